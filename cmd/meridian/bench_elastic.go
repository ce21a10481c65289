package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"meridian/internal/elascass"
	"meridian/internal/tools/chart"
	"meridian/internal/tools/repro"
)

// benchElasticCmd reproduces ElasCass's evaluation (Figs. 5-8) on the emulated WAN.
func benchElasticCmd() *cobra.Command {
	var o repro.ElasticOptions
	var topoName, experiments, strategies, data, thetaMax, partData, thetaSweep, dataSweep, bandwidth, jsonPath, mdPath, outDir, fromJSON string
	var quick bool
	cmd := &cobra.Command{
		Use:   "elastic [--experiments bootstrap,partitioning,data-sweep] [--strategies two-phase,one-phase,split-move] [--data 1GiB] [--theta-max 20MiB]",
		Short: "ElasCass's evaluation on the emulated WAN: bootstrap time and volume, throughput and balance over nodes, partition fullness",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			stop, err := startProfile()
			if err != nil {
				return err
			}
			defer stop()
			if quick {
				set := func(name, v string) {
					if !fl.Changed(name) {
						_ = fl.Set(name, v)
					}
				}
				set("data", "64MiB")
				set("theta-max", "4MiB")
				set("max-nodes", "2")
				set("partition-data", "32MiB")
				set("theta-sweep", "2MiB,4MiB")
				set("data-sweep", "16MiB,64MiB")
				set("measure", "3s")
				set("balance", "8s")
				set("saturation-clients", "16")
			}
			topo, err := loadTopology(topoName)
			if err != nil {
				return err
			}
			o.Topology = topo
			size := func(flag, v string) (int64, error) {
				n, err := humanize.ParseBytes(v)
				if err != nil || n == 0 {
					return 0, fmt.Errorf("bench elastic: --%s %q: want a size such as 1GiB", flag, v)
				}
				return int64(n), nil
			}
			if o.DataBytes, err = size("data", data); err != nil {
				return err
			}
			if o.ThetaMax, err = size("theta-max", thetaMax); err != nil {
				return err
			}
			if o.PartitionBytes, err = size("partition-data", partData); err != nil {
				return err
			}
			bw, err := size("bandwidth", bandwidth)
			if err != nil {
				return err
			}
			o.NodeBandwidth = float64(bw)
			for _, v := range strings.Split(thetaSweep, ",") {
				t, err := size("theta-sweep", strings.TrimSpace(v))
				if err != nil {
					return err
				}
				o.ThetaSweep = append(o.ThetaSweep, t)
			}
			var sizes []int64
			for _, v := range strings.Split(dataSweep, ",") {
				t, err := size("data-sweep", strings.TrimSpace(v))
				if err != nil {
					return err
				}
				sizes = append(sizes, t)
			}
			for _, s := range strings.Split(strategies, ",") {
				o.Strategies = append(o.Strategies, elascass.Strategy(strings.TrimSpace(s)))
			}
			o.Log = os.Stderr
			var res *repro.ElasticResults
			var runErr error
			if fromJSON != "" {
				// Render earlier runs (several merged: their strategies, sweeps and
				// partitioning results side by side) instead of running.
				res, runErr = repro.MergeElasticJSON(strings.Split(fromJSON, ","))
			} else {
				res, runErr = repro.ElasticExperiments(cmd.Context(), o, strings.Split(experiments, ","), sizes)
			}
			if res == nil {
				return runErr
			}
			md := res.Markdown()
			fmt.Print(md)
			if err := writeReproOutputs("bench elastic", md, mdPath, jsonPath, res); err != nil {
				return err
			}
			if runErr != nil {
				return runErr
			}
			return writeElasticCharts(res, outDir)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&topoName, "topology", "gcp-meteorshower-3", "emulated WAN topology (built-in name or file)")
	fl.StringVar(&experiments, "experiments", "bootstrap,partitioning,data-sweep", "which experiments to run")
	fl.StringVar(&strategies, "strategies", "two-phase,one-phase,split-move", "bootstrap strategies to compare")
	fl.StringVar(&data, "data", "1GiB", "data loaded for the bootstrap experiment (records of --record-bytes)")
	fl.IntVar(&o.RecordBytes, "record-bytes", 1000, "value size of a record (ElasCass Table 2: 1 KB)")
	fl.StringVar(&thetaMax, "theta-max", "20MiB", "Θmax of the bootstrap experiment (Θmin is half); 1 GiB / 20 MiB keeps ElasCass's 100 GB / 2 GB partition count")
	fl.IntVar(&o.StartNodes, "start-nodes", 1, "nodes per region before the first join")
	fl.IntVar(&o.MaxNodes, "max-nodes", 4, "nodes per region after the last join (one joins per region at each step)")
	fl.Float64Var(&o.NodeCapacityOps, "capacity", 1500, "each node's service capacity, requests per second (the emulated machine)")
	fl.StringVar(&bandwidth, "bandwidth", "40MB", "each node's network bandwidth per second, each way")
	fl.IntVar(&o.BackgroundClients, "background-clients", 4, "closed-loop clients per region during the joins (read-heavy hotspot)")
	fl.IntVar(&o.SaturationClients, "saturation-clients", 48, "closed-loop clients per region and node per region for the throughput runs")
	fl.DurationVar(&o.MeasureDuration, "measure", 6*time.Second, "measured time of each throughput and write run")
	fl.Float64Var(&o.P99BoundMs, "p99-bound-ms", 0, "also search, at each size of the bootstrap experiment, the highest open-loop rate whose every p99 stays under this bound (0: no search)")
	fl.DurationVar(&o.ProbeDuration, "probe", 5*time.Second, "measured time of each probe of the rate search (plus 1s warm-up)")
	fl.DurationVar(&o.BalanceDuration, "balance", 20*time.Second, "least unmeasured time of the saturating Zipfian load before each throughput measurement (load splits and refinement; it goes on until no move has been in flight for 7s, at most 4× this)")
	fl.Float64Var(&o.SplitOps, "split-ops", 0, "the bench keyspace's split_ops in the bootstrap experiment (0: a third of --capacity)")
	fl.StringVar(&partData, "partition-data", "512MiB", "data of the partitioning experiment")
	fl.StringVar(&thetaSweep, "theta-sweep", "8MiB,16MiB,32MiB,64MiB", "Θmax values of the partitioning experiment")
	fl.StringVar(&dataSweep, "data-sweep", "128MiB,256MiB,512MiB,1GiB", "data sizes of the data sweep")
	fl.DurationVar(&o.Interval, "interval", 250*time.Millisecond, "elasticity interval (statistics and driver rounds)")
	fl.IntVar(&o.MaxMovesPerNode, "max-moves-per-node", 4, "replica moves into one node at a time (the background phase's throttle)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the workloads and the emulated WAN")
	fl.StringVar(&jsonPath, "json", "", "write the results as JSON")
	fl.StringVar(&mdPath, "markdown", "", "write the tables as Markdown")
	fl.StringVar(&fromJSON, "from-json", "", "render the results of earlier runs (comma-separated --json files, merged) instead of running")
	fl.StringVar(&outDir, "out-dir", "docs/img", "directory of the charts elastic-{bootstrap,volume,throughput,imbalance,fullness,data-sweep}.png")
	fl.BoolVar(&quick, "quick", false, "a smoke run: small data, two nodes per region, short runs (explicit flags win)")
	return cmd
}

// writeElasticCharts draws the figures of the experiments that ran.
func writeElasticCharts(r *repro.ElasticResults, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var written []string
	draw := func(name, title, x, y string, s []chart.Series) error {
		if len(s) == 0 {
			return nil
		}
		p := filepath.Join(dir, name)
		if err := chart.Lines(title, x, y, s, p); err != nil {
			return err
		}
		written = append(written, p)
		return nil
	}
	var boot, vol, tput, imb []chart.Series
	for _, s := range r.Strategies {
		bt, bv := chart.Series{Name: s.Strategy + ": serves after"}, chart.Series{Name: s.Strategy + ": data then"}
		full := chart.Series{Name: s.Strategy + ": full share after", Dashed: true}
		tp, ci := chart.Series{Name: s.Strategy}, chart.Series{Name: s.Strategy + ": cpu"}
		bi := chart.Series{Name: s.Strategy + ": bytes", Dashed: true}
		for i, sz := range s.Sizes {
			for _, j := range sz.Joins {
				x := float64(j.NodesInRegion)
				bt.Points = append(bt.Points, [2]float64{x, j.BootstrapS})
				full.Points = append(full.Points, [2]float64{x, j.FullShareS})
				bv.Points = append(bv.Points, [2]float64{x, float64(j.BootstrapBytes) / (1 << 20)})
			}
			tp.Points = append(tp.Points, [2]float64{float64(sz.NodesPerRegion), sz.ThroughputOps})
			ci.Points = append(ci.Points, [2]float64{float64(sz.NodesPerRegion), sz.CPUImbalance})
			bi.Points = append(bi.Points, [2]float64{float64(sz.NodesPerRegion), sz.ByteImbalance})
			_ = i
		}
		boot = append(boot, bt, full)
		vol = append(vol, bv)
		tput = append(tput, tp)
		imb = append(imb, ci, bi)
	}
	if err := draw("elastic-bootstrap.png", "Bootstrap time (ElasCass Fig. 5d)", "nodes in the region after the join", "seconds", boot); err != nil {
		return err
	}
	if err := draw("elastic-volume.png", "Bootstrap volume (ElasCass Fig. 5a)", "nodes in the region after the join", "MiB held when it serves", vol); err != nil {
		return err
	}
	if err := draw("elastic-throughput.png", "Throughput at saturation (ElasCass Fig. 6)", "nodes per region", "ops/s", tput); err != nil {
		return err
	}
	if err := draw("elastic-imbalance.png", "Imbalance index (ElasCass Figs. 5e, 7b)", "nodes per region", "σ/mean", imb); err != nil {
		return err
	}
	if len(r.Partitioning) > 0 {
		mean, sd := chart.Series{Name: "fullness mean"}, chart.Series{Name: "fullness sd", Dashed: true}
		for _, p := range r.Partitioning {
			x := float64(p.ThetaMaxBytes) / (1 << 20)
			mean.Points = append(mean.Points, [2]float64{x, 100 * p.FullnessMean})
			sd.Points = append(sd.Points, [2]float64{x, 100 * p.FullnessSD})
		}
		if err := draw("elastic-fullness.png", "Partition fullness (ElasCass Fig. 8c)", "Θmax MiB", "% of Θmax", []chart.Series{mean, sd}); err != nil {
			return err
		}
	}
	if len(r.DataSweep) > 0 {
		by := map[string]*chart.Series{}
		var order []string
		for _, p := range r.DataSweep {
			if by[p.Strategy] == nil {
				by[p.Strategy] = &chart.Series{Name: p.Strategy + ": serves after"}
				order = append(order, p.Strategy)
			}
			by[p.Strategy].Points = append(by[p.Strategy].Points, [2]float64{float64(p.DataBytes) / (1 << 20), p.BootstrapS})
		}
		var s []chart.Series
		for _, k := range order {
			s = append(s, *by[k])
		}
		if err := draw("elastic-data-sweep.png", "Bootstrap time over the data size", "MiB of data in the region", "seconds", s); err != nil {
			return err
		}
	}
	for _, p := range written {
		fmt.Fprintf(os.Stderr, "wrote %s\n", p)
	}
	return nil
}
