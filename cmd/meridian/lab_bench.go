//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/lab"
)

func newLabTarget(dir string) (*lab.Target, error) { return lab.NewTarget(dir, os.Stderr) }

func labNodes(t *lab.Target) int { return len(t.Meridian().Hosts()) }

func labBenchCmd(dir *string) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [--protocols LIST] [--workload a..f] [--duration D] [--json FILE] [--max --p99 D]",
		Short: "Run the benchmark against the lab that is up: clients in each region's client host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.labDir = *dir
			return runBench(cmd, f)
		},
	}
	addBenchFlags(cmd, &f)
	return cmd
}

// SideBySide is the MeteorShower paper's comparison (section IV) with the peers beside it.
const SideBySide = "cassandra:QUORUM/QUORUM,cassandra:ALL/ONE,quorum:QUORUM/QUORUM,quorum:ALL/ONE," +
	"meteorshower:QUORUM/QUORUM:theta=lower,meteorshower:QUORUM/QUORUM:theta=upper,globlease,raft,etcd:linearizable,etcd:serializable"

func labRunCmd(dir *string) *cobra.Command {
	var f benchFlags
	var topo string
	var perRegion, peersPerRegion int
	cmd := &cobra.Command{
		Use:   "run --topology T --workload W --duration D --json FILE [--targets LIST]",
		Short: "Bring the lab up, run the benchmark from every region against each target, and tear it down",
		Long: `lab run brings a lab up (with the peer hosts its targets need), runs each target
configuration in turn with clients in every region's client host, writes the bench JSON, and
tears the lab down — on success, error or signal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfgs, err := bench.ParseConfigs(f.protocols)
			if err != nil {
				return err
			}
			var peers []string
			for _, c := range cfgs {
				if r := lab.PeerRole(c.Protocol); r != "" && !slices.Contains(peers, r) {
					peers = append(peers, r)
				}
			}
			t, err := loadTopology(topo)
			if err != nil {
				return err
			}
			// --nodes-per-region (the emulated cluster's flag) means the same in the lab.
			if cmd.Flags().Changed("nodes-per-region") {
				if cmd.Flags().Changed("meridian-per-region") && perRegion != f.nodesPerRegion {
					return fmt.Errorf("lab run: --nodes-per-region %d and --meridian-per-region %d disagree", f.nodesPerRegion, perRegion)
				}
				perRegion = f.nodesPerRegion
			}
			// The peers run on as many servers per region as Meridian (the thesis compares
			// systems of the same size), unless --peers-per-region says otherwise.
			if !cmd.Flags().Changed("peers-per-region") {
				peersPerRegion = perRegion
			}
			if _, err := lab.Up(cmd.Context(), lab.UpOptions{Dir: *dir, Topology: t, MeridianPerRegion: perRegion, Peers: peers,
				PeersPerRegion: peersPerRegion, Seed: f.seed, Log: os.Stderr}); err != nil {
				return err
			}
			defer func() {
				// Tear down even when the run was interrupted (its context is cancelled).
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if err := lab.Down(ctx, *dir, os.Stderr); err != nil {
					fmt.Fprintln(os.Stderr, "meridian: lab down:", err)
				}
			}()
			f.labDir = *dir
			return runBench(cmd, f)
		},
	}
	addBenchFlags(cmd, &f)
	cmd.Flags().StringVar(&topo, "topology", "gcp-meteorshower-3", "regions and RTTs (built-in name or file)")
	cmd.Flags().IntVar(&perRegion, "meridian-per-region", 1, "Meridian servers per region")
	cmd.Flags().IntVar(&peersPerRegion, "peers-per-region", 1, "hosts of each peer in each region (default: the Meridian servers per region)")
	// --targets is the lab's name for --protocols.
	cmd.Flags().Lookup("protocols").Usage = "the targets (same as --targets)"
	cmd.Flags().StringVar(&f.protocols, "targets", SideBySide, "configurations to run: PROTOCOL[:READ/WRITE][:opt=v], Meridian's protocols and the peers cassandra:LEVEL/LEVEL, etcd:linearizable|serializable, zookeeper:linearizable|sequential")
	return cmd
}

func labRouterBenchCmd(dir *string) *cobra.Command {
	var o lab.RouterBenchOptions
	var rates, jsonPath string
	cmd := &cobra.Command{
		Use:   "router-bench [--rates 1000,20000] [--delay-ms 50] [--duration 5s] [--json FILE]",
		Short: "Measure the WAN router: delay error at each probe rate, and its highest packet rate and throughput",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := parseFloats(rates)
			if err != nil {
				return fmt.Errorf("lab: --rates: %w", err)
			}
			for _, r := range rs {
				if r < 1 || r > 1e6 {
					return fmt.Errorf("lab: --rates: %g pkt/s is outside 1..1000000", r)
				}
				o.RatesPPS = append(o.RatesPPS, int(r))
			}
			res, err := lab.RouterBench(cmd.Context(), *dir, o, os.Stdout)
			if err != nil {
				return err
			}
			if jsonPath != "" {
				return bench.WriteJSON(jsonPath, res)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rates, "rates", "1000,20000", "probe rates, packets per second")
	cmd.Flags().Float64Var(&o.DelayMs, "delay-ms", 50, "one-way delay configured on the probed link")
	cmd.Flags().DurationVar(&o.Duration, "duration", 5*time.Second, "length of each measurement")
	cmd.Flags().StringVar(&o.From, "from", "", "probing host (default: the first client host)")
	cmd.Flags().StringVar(&o.To, "to", "", "probed host (default: the second client host)")
	cmd.Flags().StringVar(&jsonPath, "json", "", "write the results as JSON")
	return cmd
}

func labNemesisCmd(dir *string) *cobra.Command {
	var scenarios, protocols, topo, jsonPath, historyDir string
	var o lab.NemesisOptions
	cmd := &cobra.Command{
		Use:   "nemesis [--scenarios all|kill,partition,one-way,clock-within,clock-beyond] [--protocols LIST] [--duration D] [--json FILE]",
		Short: "Inject real faults while clients in every region record a history, then check it with the simulator's checkers",
		Long: `lab nemesis runs a register workload from every region's client host against the lab's
Meridian servers, injects each scenario's faults a quarter into the run and heals them at three
quarters, then reads every key at every node and checks the history: sequential consistency
and durability always, linearizability for GlobLease. It uses the lab that is up, or brings
one up (and down again) on --topology.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if scenarios == "all" {
				o.Scenarios = lab.Scenarios
			} else {
				o.Scenarios = splitList(scenarios)
			}
			cfgs, err := bench.ParseConfigs(protocols)
			if err != nil {
				return err
			}
			o.Configs = cfgs
			o.HistoryDir = historyDir
			o.Log = os.Stderr
			if _, err := lab.LoadState(*dir); err != nil {
				t, err := loadTopology(topo)
				if err != nil {
					return err
				}
				if _, err := lab.Up(ctx, lab.UpOptions{Dir: *dir, Topology: t, Seed: o.Seed, Log: os.Stderr}); err != nil {
					return err
				}
				defer func() {
					dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					if err := lab.Down(dctx, *dir, os.Stderr); err != nil {
						fmt.Fprintln(os.Stderr, "meridian: lab down:", err)
					}
				}()
			}
			t, err := lab.NewTarget(*dir, os.Stderr)
			if err != nil {
				return err
			}
			defer t.Close()
			res, err := lab.RunNemesis(ctx, t, o)
			lab.PrintNemesis(os.Stdout, res)
			if jsonPath != "" && len(res) > 0 {
				if werr := bench.WriteJSON(jsonPath, res); werr != nil {
					return werr
				}
			}
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.WithinAssumptions && (len(r.Violations) > 0 || r.LostWrites > 0) {
					return exitError{code: 3, err: fmt.Errorf("lab nemesis: %s under %s: %d violations, %d acknowledged writes lost", r.Config, r.Scenario, len(r.Violations), r.LostWrites)}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&scenarios, "scenarios", "all", "scenarios to run: all, or a list of "+strings.Join(lab.Scenarios, ","))
	cmd.Flags().StringVar(&protocols, "protocols", "quorum:QUORUM/QUORUM,meteorshower:QUORUM/QUORUM:theta=upper,globlease", "Meridian configurations")
	cmd.Flags().DurationVar(&o.Duration, "duration", 20*time.Second, "workload time per scenario (faults from 1/4 to 3/4 of it)")
	cmd.Flags().IntVar(&o.ClientsPerRegion, "clients", 2, "clients per region")
	cmd.Flags().IntVar(&o.Keys, "keys", 8, "registers the workload reads and writes")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "seed of the workload")
	cmd.Flags().StringVar(&topo, "topology", "gcp-meteorshower-3", "topology of the lab, when none is up")
	cmd.Flags().StringVar(&jsonPath, "json", "", "write the results as JSON")
	cmd.Flags().StringVar(&historyDir, "history-dir", "", "write each run's history and final states as JSON here")
	return cmd
}
