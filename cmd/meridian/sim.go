package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/config"
	"meridian/internal/tools/seedpool"
	"meridian/internal/tools/sim"
)

func simCmd() *cobra.Command {
	var (
		protocol, faults, topo, mutate, readLevel, writeLevel                                                                string
		seeds, mutationSeeds, replicaRegions, nodesPerRegion, workers                                                        int
		seedStart                                                                                                            uint64
		listMutations, mutations, roam, sessions, lin, fresh, verbose, loseRegion                                            bool
		duration, maxOffset, quiesce, clockStep, partitionEvery, repartitionEvery, moveEvery, moveCheckAfter, requestTimeout time.Duration
		spikeProb, readFraction, scanFraction                                                                                float64
		clientsPerRegion, keys                                                                                               int
		options                                                                                                              []string
	)
	cmd := &cobra.Command{
		Use:   "sim --protocol NAME [--seeds N] [--seed-start S] [--faults LIST|all|none] [--topology NAME] [--mutate NAME]",
		Short: "Deterministic simulation of a protocol under faults, checked for consistency",
		Long: `Runs whole clusters of a protocol's state machines on virtual time, a seed per core at once, with
the faults named in --faults (loss, dup, reorder, partition, crash, slowdisk, clock; "all";
clock-beyond lets clock offsets exceed ε), and checks every history for sequential
consistency (or, with --fresh-reads, that reads return the newest acknowledged write),
durability and convergence (and linearizability with --linearizability). With
--scan-fraction some reads are scans, checked as one read per key they cover.
Exits 0 when every seed passes, 1 at the first violation, printing the seed, the checker's
explanation and the command that replays it. --mutations runs every broken variant of the
protocol and reports how many seeds each took to be caught (exit 1 if one is not caught).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := sim.LookupProtocol(protocol)
			if err != nil {
				return err
			}
			if listMutations {
				for _, m := range sim.MutationNames(p) {
					d, _ := sim.MutationDescription(p, m)
					fmt.Printf("%-16s %s\n", m, d)
				}
				return nil
			}
			t, err := loadTopology(topo)
			if err != nil {
				return err
			}
			fs, err := sim.ParseFaults(faults)
			if err != nil {
				return err
			}
			rl, err := simLevel(readLevel)
			if err != nil {
				return fmt.Errorf("--read-level: %w", err)
			}
			wl, err := simLevel(writeLevel)
			if err != nil {
				return fmt.Errorf("--write-level: %w", err)
			}
			if workers < 0 || workers > seedpool.MaxWorkers {
				return fmt.Errorf("--workers %d out of range 0..%d", workers, seedpool.MaxWorkers)
			}
			if seeds < 1 || seeds > 10_000_000 {
				return fmt.Errorf("--seeds %d out of range 1..10000000", seeds)
			}
			base := sim.Options{Protocol: protocol, Seed: seedStart, Topology: t, Faults: fs, ReadLevel: rl, WriteLevel: wl,
				Mutation: mutate, Roam: roam, NoSessions: !sessions, Linearizability: lin, FreshReads: fresh, Duration: duration,
				ReplicaRegions: replicaRegions, NodesPerRegion: nodesPerRegion, KeyspaceOptions: map[string]string{},
				DelaySpikeProb: spikeProb, MaxClockOffset: maxOffset, Quiesce: quiesce, ClockStepEvery: clockStep, PartitionEvery: partitionEvery, RequestTimeout: requestTimeout,
				RepartitionEvery: repartitionEvery, MoveEvery: moveEvery, MoveCheckAfter: moveCheckAfter, LoseRegion: loseRegion,
				ReadFraction: readFraction, ScanFraction: scanFraction, ClientsPerRegion: clientsPerRegion, Keys: keys}
			if readFraction < 0 || readFraction > 1 {
				return fmt.Errorf("--read-fraction %v out of range [0, 1]", readFraction)
			}
			if !(scanFraction >= 0 && scanFraction <= 1) {
				return fmt.Errorf("--scan-fraction %v out of range [0, 1] (the share of reads that are scans)", scanFraction)
			}
			if keys < 1 || keys > 1000 {
				return fmt.Errorf("--keys %d out of range 1..1000", keys)
			}
			if clientsPerRegion < 1 || clientsPerRegion > 64 {
				return fmt.Errorf("--clients-per-region %d out of range 1..64", clientsPerRegion)
			}
			if clockStep < 0 || (clockStep > 0 && clockStep < time.Millisecond) {
				return fmt.Errorf("--clock-step-every %v: at least 1ms, or 0", clockStep)
			}
			if requestTimeout < 10*time.Millisecond || requestTimeout > time.Minute {
				return fmt.Errorf("--request-timeout %v out of range 10ms..1m", requestTimeout)
			}
			if repartitionEvery < 0 || (repartitionEvery > 0 && repartitionEvery < time.Millisecond) {
				return fmt.Errorf("--repartition-every %v: at least 1ms, or 0", repartitionEvery)
			}
			if moveEvery < 0 || (moveEvery > 0 && moveEvery < time.Millisecond) {
				return fmt.Errorf("--move-every %v: at least 1ms, or 0", moveEvery)
			}
			if moveCheckAfter < 0 || (moveCheckAfter > 0 && moveCheckAfter < time.Millisecond) {
				return fmt.Errorf("--move-check-after %v: at least 1ms, or 0 for the default (4s)", moveCheckAfter)
			}
			if partitionEvery < 0 || (partitionEvery > 0 && partitionEvery < time.Millisecond) {
				return fmt.Errorf("--partition-every %v: at least 1ms, or 0", partitionEvery)
			}
			if quiesce <= 0 || quiesce > 10*time.Minute {
				return fmt.Errorf("--quiesce %v out of range (0, 10m]", quiesce)
			}
			if maxOffset <= 0 || maxOffset > time.Minute {
				return fmt.Errorf("--max-clock-offset %v out of range (0, 1m]", maxOffset)
			}
			if spikeProb < 0 || spikeProb > 1 {
				return fmt.Errorf("--delay-spike-prob %v out of range 0..1", spikeProb)
			}
			if nodesPerRegion < 0 || nodesPerRegion > 16 {
				return fmt.Errorf("--nodes-per-region %d out of range 0..16", nodesPerRegion)
			}
			for _, kv := range options {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--option %q: want key=value", kv)
				}
				base.KeyspaceOptions[k] = v
			}
			if verbose {
				base.Trace = func(line string) { fmt.Fprintln(os.Stderr, line) }
				workers = 1 // one trace at a time
			}
			if mutations {
				fmt.Printf("mutation suite: protocol %s, faults %s, topology %s, up to %d seeds each\n", protocol, sim.FaultList(fs), t.Name, mutationSeeds)
				results, err := sim.RunMutations(base, mutationSeeds, workers, os.Stdout)
				if err != nil {
					return err
				}
				for _, r := range results {
					if !r.Caught {
						return exitError{code: 1, err: fmt.Errorf("mutation %s was not caught in %d seeds", r.Mutation, r.SeedsTried)}
					}
				}
				return nil
			}
			eff := base.Effective()
			fmt.Printf("simulating %s: seeds %d..%d, faults %s, topology %s, levels %s/%s%s\n",
				protocol, seedStart, seedStart+uint64(seeds)-1, sim.FaultList(fs), t.Name, eff.ReadLevel, eff.WriteLevel, mutationNote(mutate))
			res, err := sim.RunSeeds(sim.SeedsOptions{Base: base, Seeds: seeds, SeedStart: seedStart, Out: os.Stdout, Progress: progressEvery(seeds), Workers: workers})
			if err != nil {
				return err
			}
			fmt.Printf("%d seed(s), %d operations (%d ok), %d crashes, %d partitions, %d splits and merges, %d moves (%d finished, %d aborted), %.0f simulated s in %.1f s wall = %.1f sim s per wall s\n",
				res.Seeds, res.Ops, res.OK, res.Crashes, res.Partitions, res.Repartitions, res.Moves, res.MovesFinished, res.MovesAborted, res.SimSeconds, res.Wall.Seconds(), res.SimPerWall())
			if len(res.ReadPaths) > 0 {
				fmt.Printf("reads served: %v\n", res.ReadPaths)
			}
			if sc := res.Scans; sc.Scans > 0 {
				fmt.Printf("scans: %d (%d returned, recorded as %d key reads); split partitions %d (pages %d forward, %d backward; %d halves given up)\n",
					sc.Scans, sc.OK, sc.KeyReads, sc.Splits, sc.PagesForward, sc.PagesBackward, sc.SplitsEnded)
			}
			if res.Failed != nil {
				sim.PrintFailure(os.Stdout, base, res.Failed)
				return exitError{code: 1, err: fmt.Errorf("seed %d violated a checker", res.Failed.Seed)}
			}
			fmt.Println("every seed passed")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&protocol, "protocol", "quorum", "protocol to simulate")
	f.IntVar(&seeds, "seeds", 100, "number of seeds")
	f.IntVar(&workers, "workers", 0, "seeds run at once (0: one per core); the output and the seed a run stops at do not depend on it")
	f.Uint64Var(&seedStart, "seed-start", 1, "first seed")
	f.StringVar(&faults, "faults", "all", "faults: comma-separated list, all or none")
	f.StringVar(&topo, "topology", "gcp-meteorshower-3", "built-in topology or file")
	f.StringVar(&mutate, "mutate", "", "run a deliberately broken variant (see --list-mutations)")
	f.StringVar(&readLevel, "read-level", "", "read consistency level (default: the protocol's, QUORUM for the quorum family, LINEARIZABLE for raft)")
	f.StringVar(&writeLevel, "write-level", "", "write consistency level (default: the protocol's)")
	f.BoolVar(&listMutations, "list-mutations", false, "list the protocol's mutations and exit")
	f.BoolVar(&mutations, "mutations", false, "run the mutation suite")
	f.IntVar(&mutationSeeds, "mutation-seeds", 200, "seeds each mutation may take to be caught")
	f.Float64Var(&spikeProb, "delay-spike-prob", 0, "share of messages the delay fault holds back (0: 0.5–2.5% drawn per seed)")
	f.IntVar(&nodesPerRegion, "nodes-per-region", 0, "nodes in each region (0: the protocol's default; globlease uses 2 so hot keys have affiliated nodes)")
	f.BoolVar(&roam, "roam", false, "clients send a third of their requests to random nodes in any region")
	f.BoolVar(&sessions, "sessions", true, "clients send their session version with each request")
	f.BoolVar(&lin, "linearizability", false, "also check linearizability (Porcupine)")
	f.BoolVar(&fresh, "fresh-reads", false, "check that every read returns the newest acknowledged write or a newer one instead of sequential consistency: what reads at ONE or LOCAL_ONE promise with writes at ALL")
	f.BoolVar(&verbose, "verbose", false, "print the event trace on stderr")
	f.StringArrayVar(&options, "option", nil, "keyspace protocol option key=value (repeatable), e.g. theta=lower")
	f.IntVar(&replicaRegions, "replica-regions", 0, "place replicas in the first N regions only (0: all)")
	f.DurationVar(&duration, "duration", 5*time.Second, "virtual time of the workload per seed (plus 5s of quiescence)")
	f.Float64Var(&readFraction, "read-fraction", 0.5, "share of the clients' operations that are reads")
	f.Float64Var(&scanFraction, "scan-fraction", 0, "share of the reads that are scans of a random range with a random limit, checked as one read per key they cover (0: none)")
	f.IntVar(&clientsPerRegion, "clients-per-region", 2, "sequential clients in each region")
	f.IntVar(&keys, "keys", 3, "size of the key space (k0, k1, ...): small, so that operations collide")
	f.DurationVar(&requestTimeout, "request-timeout", time.Second, "each client request's deadline")
	f.DurationVar(&moveCheckAfter, "move-check-after", 0, "how long after its start (and after each check) the driver checks a replica move still in progress, aborting it if its new replica is down and otherwise by chance while the workload runs (0: 4s)")
	f.BoolVar(&loseRegion, "lose-region", false, "crash every node of a random region for good during the workload: the protocol must exclude it and go on (canopus with --option exclude_after=1s; the workload lasts at least 10s)")
	f.DurationVar(&moveEvery, "move-every", 0, "start a replica move this often on average: a random replica to a node of its region that holds none, finished when the new replica has caught up, some aborted (protocols that move replicas; needs --nodes-per-region above the replicas per region; 0: never)")
	f.DurationVar(&repartitionEvery, "repartition-every", 0, "split or merge a partition this often on average, each node installing the new map after its own delay (protocols that repartition; 0: never)")
	f.DurationVar(&partitionEvery, "partition-every", 0, "with the partition fault, start a partition this often on average, one after another (0: one or two a run)")
	f.DurationVar(&clockStep, "clock-step-every", 0, "with clock faults, step every node's clock this often on average (0: a few times a run)")
	f.DurationVar(&quiesce, "quiesce", 5*time.Second, "fault-free virtual time after the workload, for convergence")
	f.DurationVar(&maxOffset, "max-clock-offset", 2*time.Millisecond, "ε, the bound on clock offset between nodes (clock faults stay within it, clock-beyond does not)")
	cmd.AddCommand(simTxnCmd())
	return cmd
}

func mutationNote(m string) string {
	if m == "" {
		return ""
	}
	return ", mutation " + m
}

func progressEvery(seeds int) int {
	switch {
	case seeds >= 1000:
		return 250
	case seeds >= 100:
		return 50
	}
	return 0
}

// simLevel parses a --read-level or --write-level: "" (the protocol's default), a quorum
// level, or a Raft read level.
func simLevel(s string) (config.Level, error) {
	if s == "" {
		return "", nil
	}
	if l := config.Level(strings.ToUpper(s)); l == config.LevelLinearizable || l == config.LevelStale {
		return l, nil
	}
	return config.ParseLevel(s)
}
