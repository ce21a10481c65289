package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/catenae"
	"meridian/internal/tools/catsim"
	"meridian/internal/tools/repro"
	"meridian/internal/tools/seedpool"
	"meridian/internal/tools/txnsim"
)

// simTxnCmd is `meridian sim txn`: transactions (Geo-SDUR, 2PC) on the simulated cluster under
// every fault, checked for serializability and convergence.
func simTxnCmd() *cobra.Command {
	var (
		mode, deployment, mutate string
		seeds, mutationSeeds     int
		workers                  int
		seedStart                uint64
		mutations, listMutations bool
		duration                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "txn [--mode sdur|2pc|catenae] [--seeds N] [--seed-start S] [--mutate NAME | --mutations]",
		Short: "Deterministic simulation of transactions (sdur, 2pc, catenae) under faults, checked for serializability",
		Long: `Runs two partitions of three replicas (etcd raft groups as the partitions' logs) on virtual
time with message loss, duplication and delay spikes, two node crashes with restarts, and a region
cut per seed; clients run list-append transactions (2-3 keys, 40% global, 15% read-only). Every
history goes through the serializability checker (Elle's method) and every partition's replicas
must commit the same transactions in the same order. sdur runs with delaying and reordering on
(the threshold alternates between entries and ticks by seed). Exits 1 at the first failing seed
with the command that replays it. --mutations runs every broken variant of the mode and reports
the seed that caught each (exit 1 if one is not caught).

catenae runs one data center per region (ec2-sdur-3 and gcp-meteorshower-3 alternating by seed)
exchanging epoch messages (internal/tools/catsim): 2% message loss and 1% duplication, jittered
delays that reorder messages, clock offsets within ±1 ms, one faulty data center executing 2% of
its transactions wrongly (two faulty ones every third seed: digests split three ways), two pauses
of a data center on even seeds; nine clients run list-append transactions on six keys. Every
history must be serializable and the data centers' validated states equal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			modes := append(txnsim.Modes(), "catenae")
			if !slices.Contains(modes, mode) {
				return fmt.Errorf("sim txn: mode %q: want one of %s", mode, strings.Join(modes, ", "))
			}
			mutationsOf := txnsim.Mutations
			var check func(seed uint64, mutation string) (bool, string, error)
			if mode == "catenae" {
				mutationsOf = func(string) map[string]string { return catenae.Mutations }
				check = func(seed uint64, mutation string) (bool, string, error) {
					o := catsim.SimOptions(seed)
					if mutation != "" {
						o = catsim.MutationOptions(seed, mutation)
					}
					if duration > 0 {
						o.Duration = duration
					}
					return catsim.CheckSeed(o)
				}
			}
			if listMutations {
				ms := mutationsOf(mode)
				for _, m := range slices.Sorted(maps.Keys(ms)) {
					fmt.Printf("%-28s %s\n", m, ms[m])
				}
				return nil
			}
			if workers < 0 || workers > seedpool.MaxWorkers {
				return fmt.Errorf("sim txn: --workers %d out of range 0..%d", workers, seedpool.MaxWorkers)
			}
			if seeds < 1 || seeds > 100000 {
				return fmt.Errorf("sim txn: --seeds %d: want 1 to 100000", seeds)
			}
			opts := func(seed uint64, mutation string) txnsim.Options {
				o := txnsim.SimOptions(mode, seed)
				o.Mutation = mutation
				if duration > 0 {
					o.Duration = duration
				}
				if deployment != "" {
					o.Deployment = txnsim.Deployment(deployment) // validated by Run
				}
				return o
			}
			if check == nil {
				check = func(seed uint64, mutation string) (bool, string, error) {
					return txnsim.CheckSeed(opts(seed, mutation))
				}
			}
			// runSeeds returns the lowest failing seed and why (why empty: every seed passed);
			// the seeds run on several cores, the answer is a sequential run's.
			runSeeds := func(mutation string, n int) (uint64, string, error) {
				type verdict struct {
					ok  bool
					why string
				}
				var failed uint64
				var failedWhy string
				_, err := seedpool.Run(n, workers, func(i int) (verdict, error) {
					ok, why, err := check(seedStart+uint64(i), mutation)
					if err != nil {
						return verdict{}, fmt.Errorf("seed %d: %w", seedStart+uint64(i), err)
					}
					return verdict{ok, why}, nil
				}, func(i int, v verdict) bool {
					if !v.ok {
						failed, failedWhy = seedStart+uint64(i), v.why
					}
					return !v.ok
				})
				return failed, failedWhy, err
			}
			if mutations || mutate != "" {
				names := []string{mutate}
				if mutations {
					names = slices.Sorted(maps.Keys(mutationsOf(mode)))
				}
				missed := 0
				for _, m := range names {
					if _, ok := mutationsOf(mode)[m]; !ok {
						return fmt.Errorf("sim txn: mode %s has no mutation %q", mode, m)
					}
					seed, why, err := runSeeds(m, mutationSeeds)
					if err != nil {
						return err
					}
					if why == "" {
						fmt.Printf("%-28s NOT caught in %d seeds\n", m, mutationSeeds)
						missed++
						continue
					}
					fmt.Printf("%-28s caught at seed %d: %s\n", m, seed, firstLine(why))
				}
				if missed > 0 {
					return fmt.Errorf("sim txn: %d mutation(s) not caught", missed)
				}
				return nil
			}
			start := time.Now()
			seed, why, err := runSeeds("", seeds)
			if err != nil {
				return err
			}
			if why != "" {
				fmt.Printf("seed %d FAILED: %s\nreplay: meridian sim txn --mode %s --seed-start %d --seeds 1\n", seed, why, mode, seed)
				return fmt.Errorf("sim txn: seed %d failed", seed)
			}
			fmt.Printf("%d seeds (%d..%d) of %s: serializable, replicas converged (%v)\n", seeds, seedStart, seedStart+uint64(seeds)-1, mode, time.Since(start).Round(time.Second))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&mode, "mode", "sdur", "transaction mode: "+strings.Join(txnsim.Modes(), ", "))
	f.StringVar(&deployment, "deployment", "", "wan1 or wan2 (default: alternate by seed)")
	f.IntVar(&seeds, "seeds", 100, "number of seeds")
	f.IntVar(&workers, "workers", 0, "seeds run at once (0: one per core); the output does not depend on it")
	f.Uint64Var(&seedStart, "seed-start", 1, "first seed")
	f.StringVar(&mutate, "mutate", "", "run one mutation (a deliberately broken variant) until a seed catches it")
	f.BoolVar(&mutations, "mutations", false, "run every mutation of the mode")
	f.BoolVar(&listMutations, "list-mutations", false, "list the mode's mutations")
	f.IntVar(&mutationSeeds, "mutation-seeds", 300, "seeds a mutation may take to be caught")
	f.DurationVar(&duration, "duration", 0, "virtual duration of the client load per seed (default 6s)")
	return cmd
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// benchSDURCmd is `meridian bench sdur`: the Geo-SDUR paper's figures on the simulated cluster.
func benchSDURCmd() *cobra.Command {
	var (
		o                        repro.SDURFigOptions
		mixes, delays, ks        string
		outDir, jsonPath, mdPath string
		quick                    bool
	)
	cmd := &cobra.Command{
		Use:   "sdur [--out-dir docs/img] [--json FILE] [--markdown FILE] [--quick]",
		Short: "Reproduce the Geo-SDUR evaluation (Figs. 2-6; delaying, reordering, the social network) and compare with 2PC, on ec2-sdur-3 in simulation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quick && !cmd.Flags().Changed("duration") {
				o.Duration, o.Warmup = 5*time.Second, time.Second
			}
			var err error
			if o.Mixes, err = parseFloats(mixes); err != nil {
				return fmt.Errorf("bench sdur: --mixes: %w", err)
			}
			for _, m := range o.Mixes {
				if m > 100 {
					return fmt.Errorf("bench sdur: --mixes: %v is not a percentage", m)
				}
			}
			for _, d := range splitTrimmed(delays) {
				v, err := time.ParseDuration(d)
				if err != nil || v <= 0 {
					return fmt.Errorf("bench sdur: --delays: %q is not a positive duration", d)
				}
				o.Delays = append(o.Delays, v)
			}
			for _, k := range splitTrimmed(ks) {
				var v uint64
				if _, err := fmt.Sscan(k, &v); err != nil || v == 0 || v > 1<<20 {
					return fmt.Errorf("bench sdur: --thresholds: %q is not a threshold between 1 and %d", k, 1<<20)
				}
				o.Thresholds = append(o.Thresholds, v)
			}
			if outDir != "" {
				if err := os.MkdirAll(outDir, 0o755); err != nil {
					return fmt.Errorf("bench sdur: %w", err)
				}
			}
			o.OutDir, o.Progress = outDir, os.Stderr
			res, runErr := repro.SDURFigures(cmd.Context(), o)
			if res == nil {
				return runErr
			}
			md := res.Markdown()
			fmt.Print(md)
			if err := writeReproOutputs("bench sdur", md, mdPath, jsonPath, res); err != nil {
				return err
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Topology, "topology", "ec2-sdur-3", "built-in topology")
	f.DurationVar(&o.Duration, "duration", 20*time.Second, "virtual measured time per run")
	f.DurationVar(&o.Warmup, "warmup", 3*time.Second, "virtual warmup per run")
	f.IntVar(&o.ClientsPerRegion, "clients", 16, "closed-loop clients next to each partition's preferred server")
	f.StringVar(&mixes, "mixes", "0,1,10,50", "percentages of global transactions")
	f.StringVar(&delays, "delays", "20ms,45ms", "fixed delaying Δ values (Fig. 3)")
	f.StringVar(&ks, "thresholds", "80,320", "reordering thresholds k in entries (Figs. 4-5)")
	f.Uint64Var(&o.Seed, "seed", 1, "simulation seed")
	f.StringVar(&outDir, "out-dir", "", "directory for the charts (sdur-*.png); none without it")
	f.StringVar(&jsonPath, "json", "", "write the results as JSON")
	f.StringVar(&mdPath, "markdown", "", "write the tables as Markdown")
	f.BoolVar(&quick, "quick", false, "short runs (5s) for a smoke test")
	return cmd
}

// splitTrimmed splits a comma-separated list, trimming blanks and dropping empty items.
func splitTrimmed(s string) []string {
	var out []string
	for _, p := range splitList(s) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// benchCatenaeCmd is `meridian bench catenae`: Catenae against sdur and 2pc on the TPC-C-like
// workload and the SDUR microbenchmark, on each topology, in one run.
func benchCatenaeCmd() *cobra.Command {
	var (
		o                                       repro.CatenaeOptions
		topologies, workloads, jsonPath, mdPath string
		product                                 bool
	)
	cmd := &cobra.Command{
		Use:   "catenae [--topologies A,B] [--workloads tpcc,micro] [--duration D] [--product]",
		Short: "Catenae vs sdur vs 2pc (simulated): commit p50/p99 per region, throughput, aborts, epoch bandwidth",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Topologies = splitList(topologies)
			o.Workloads = splitList(workloads)
			for _, w := range o.Workloads {
				if w != "tpcc" && w != "micro" {
					return fmt.Errorf("bench catenae: workload %q: want tpcc or micro", w)
				}
			}
			if product {
				po := repro.CatenaeProductOptions{Topologies: o.Topologies, Seed: o.Seed}
				if cmd.Flags().Changed("duration") {
					po.Duration = o.Duration
				}
				if cmd.Flags().Changed("warmup") {
					po.Warmup = o.Warmup
				}
				if cmd.Flags().Changed("clients") {
					po.ClientsPerRegion = o.ClientsPerRegion
				}
				res, err := repro.CatenaeProduct(cmd.Context(), po)
				if err != nil {
					return fmt.Errorf("bench catenae --product: %w", err)
				}
				md := res.Markdown()
				fmt.Print(md)
				return writeReproOutputs("bench catenae", md, mdPath, jsonPath, res)
			}
			res, err := repro.CatenaeBench(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench catenae: %w", err)
			}
			md := res.Markdown()
			fmt.Print(md)
			return writeReproOutputs("bench catenae", md, mdPath, jsonPath, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&topologies, "topologies", "gcp-meteorshower-3,ec2-sdur-3", "built-in topologies")
	f.StringVar(&workloads, "workloads", "tpcc,micro", "workloads: tpcc, micro")
	f.DurationVar(&o.Duration, "duration", 20*time.Second, "virtual measured time per run")
	f.DurationVar(&o.Warmup, "warmup", 3*time.Second, "virtual warmup per run")
	f.IntVar(&o.ClientsPerRegion, "clients", 16, "closed-loop clients per region")
	f.Float64Var(&o.GlobalPct, "globals", 10, "micro: percent of global transactions for sdur and 2pc")
	f.Uint64Var(&o.Seed, "seed", 1, "simulation seed")
	f.StringVar(&jsonPath, "json", "", "write the results as JSON")
	f.StringVar(&mdPath, "markdown", "", "write the table as Markdown")
	f.StringVar(&o.OutDir, "out-dir", "", "directory for the charts (catenae-*.png); none without it")
	f.BoolVar(&product, "product", false, "instead: catenae keyspaces on the node runtime over the emulated WAN (real time; default 10s measured after 2s, 8 clients per region), blind and read-modify-write transactions through the gRPC service, commit p50/p99 per region beside ½ RTT to the farthest region, CPU per transaction")
	return cmd
}
