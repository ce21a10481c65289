package main

import (
	"encoding/json"
	"fmt"
	"github.com/dustin/go-humanize"
	"meridian/internal/runtime/transport"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/config"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/chart"
	"meridian/internal/tools/repro"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

func benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks (commands, not tests): YCSB workloads, protocol comparisons, throughput"}
	// --cpuprofile: profile before optimising (every bench command).
	var cpuProfile string
	var profileFile *os.File
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile (pprof) of the whole benchmark to this file")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		profileFile = f
		return nil
	}
	cmd.PersistentPostRun = func(*cobra.Command, []string) {
		if profileFile != nil {
			pprof.StopCPUProfile()
			profileFile.Close()
		}
	}
	cmd.AddCommand(throughputCmd(), compareCmd("compare"), compareCmd("run"), globleaseFiguresCmd(), globleaseSpikeCmd(), benchLoopbackCmd(), benchElasticCmd(), benchSDURCmd(), benchCatenaeCmd(), benchBwManCmd(), benchAutoscaleCmd(), benchMayflowerCmd(), benchStreamCmd())
	return cmd
}

// benchFlags are shared by bench run and bench compare.
type benchFlags struct {
	emulated, configPath, keyspace, target string
	nodesPerRegion, replicas, partitions   int
	protocols, workload, mix               string
	records, fieldCount, fieldLength       int
	clients                                int
	rate                                   float64
	duration, warmup                       time.Duration
	maxOps                                 int64
	jsonPath, chartPath                    string
	sweep                                  string
	maxMode                                bool
	p99Bound, p50Bound                     time.Duration
	maxStart, p50Factor                    float64
	maxFresh                               bool
	seed                                   uint64
	maxClockOffset                         time.Duration
	labDir                                 string         // the network lab (lab bench, lab run)
	loopback                               loopbackTarget // bench loopback
	// The emulated machines (--emulated): links between regions and each node's CPU.
	linkBandwidth            string
	cpuPerMessage, cpuPerKiB time.Duration
	cpuPerRequest            time.Duration
	cpuCores                 int
}

func compareCmd(use string) *cobra.Command {
	var f benchFlags
	short := "Run each configuration in turn under identical load and print one table with ratios to the first"
	if use == "run" {
		short = "Run a YCSB workload against one configuration (the same flags as compare)"
	}
	cmd := &cobra.Command{
		Use:   use + " [--emulated TOPOLOGY | --config FILE | --target noop] [--protocols LIST] [--workload a..f] [--sweep-rtt LIST] [--max --p99 D]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runBench(cmd, f) },
	}
	addBenchFlags(cmd, &f)
	return cmd
}

// addBenchFlags declares the flags shared by bench run/compare and lab bench/run.
func addBenchFlags(cmd *cobra.Command, fp *benchFlags) {
	f := fp
	fl := cmd.Flags()
	fl.StringVar(&f.emulated, "emulated", "gcp-meteorshower-3", "run an in-process cluster on the emulated WAN of this topology (built-in name or file)")
	fl.StringVar(&f.configPath, "config", "", "benchmark a running cluster described by this configuration file instead")
	fl.StringVar(&f.keyspace, "keyspace", "bench", "keyspace of the running cluster (--config)")
	fl.StringVar(&f.target, "target", "", "noop: measure the benchmark client alone (runs on one core)")
	fl.IntVar(&f.nodesPerRegion, "nodes-per-region", 1, "nodes per region (emulated; in the lab, Meridian servers per region)")
	fl.IntVar(&f.replicas, "replicas-per-region", 1, "keyspace replicas per region (emulated and lab)")
	fl.IntVar(&f.partitions, "partitions", 16, "keyspace partitions (emulated and lab)")
	fl.StringVar(&f.protocols, "protocols", "quorum:QUORUM/QUORUM,quorum:ALL/ONE", "configurations: PROTOCOL[:READ/WRITE][:opt=v+opt=v], comma-separated")
	fl.StringVar(&f.workload, "workload", "b", "YCSB core workload a..f")
	fl.StringVar(&f.mix, "mix", "", "custom mix instead of --workload, e.g. read=0.9,update=0.1,dist=uniform")
	fl.IntVar(&f.records, "records", 1000, "records loaded before the run")
	fl.IntVar(&f.fieldCount, "field-count", 1, "fields per record")
	fl.IntVar(&f.fieldLength, "field-length", 100, "bytes per field")
	fl.IntVar(&f.clients, "clients", 8, "closed-loop clients per region (the worker pool with --rate)")
	fl.Float64Var(&f.rate, "rate", 0, "open loop: target ops/s per region with Poisson arrivals (0: closed loop)")
	fl.DurationVar(&f.duration, "duration", 20*time.Second, "measured time per configuration")
	fl.DurationVar(&f.warmup, "warmup", 2*time.Second, "warm-up excluded from the results")
	fl.Int64Var(&f.maxOps, "ops", 0, "stop after this many measured operations (0: duration only)")
	fl.StringVar(&f.jsonPath, "json", "", "write the results as JSON")
	fl.StringVar(&f.chartPath, "chart", "", "write charts: FILE.png or FILE.svg (read CDF; -write and -regions variants beside it)")
	fl.StringVar(&f.sweep, "sweep-rtt", "", "repeat over an equidistant 3-region topology at each RTT (ms), e.g. 0,50,100,200")
	fl.BoolVar(&f.maxMode, "max", false, "find the highest throughput whose p99 stays under --p99 (each configuration in turn)")
	fl.DurationVar(&f.p99Bound, "p99", 50*time.Millisecond, "p99 bound for --max")
	fl.Float64Var(&f.maxStart, "max-start", 200, "with --max, the first probe's rate per region (ops/s); the search doubles it until a probe breaks the bounds (start below a system's capacity: an overloaded system's backlog can outlast the cooldown)")
	fl.BoolVar(&f.maxFresh, "max-fresh", false, "with --max, run every probe on a fresh cluster with the data loaded again (no backlog carried from an overloaded probe into the next; the emulated target only)")
	fl.Float64Var(&f.p50Factor, "p50-factor", 0, "with --max, every region's median must stay under this factor times its unloaded median, measured first at --max-start/4 (the Canopus thesis's 1.5; also reports the medians at 70% of the highest rate; 0: none)")
	fl.DurationVar(&f.p50Bound, "p50", 0, "with --max, a bound on every region's median as well (the Canopus thesis's criterion: 1.5× the base latency; 0: none)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the workload generators")
	fl.DurationVar(&f.maxClockOffset, "max-clock-offset", 2*time.Millisecond, "ε of the emulated cluster")
	fl.StringVar(&f.linkBandwidth, "link-bandwidth", "", "emulated: bandwidth of every link between two regions, each way, e.g. 10Gbit or 125MB (per second; messages share a link one after another)")
	fl.DurationVar(&f.cpuPerMessage, "cpu-per-message", 0, "emulated: modelled CPU time each message costs the node that receives it (0: no CPU model)")
	fl.DurationVar(&f.cpuPerKiB, "cpu-per-kib", 0, "emulated: modelled CPU time per KiB of a received message")
	fl.DurationVar(&f.cpuPerRequest, "cpu-per-request", 0, "emulated: modelled CPU time each client request costs the node it is sent to, on the same cores as its messages")
	fl.IntVar(&f.cpuCores, "cpu-cores", 1, "emulated: modelled cores per node (with --cpu-per-message, --cpu-per-kib or --cpu-per-request)")
}

// parseBandwidth reads a rate per second: bits ("10Gbit", "100Mbit": SI prefixes) or bytes
// ("125MB", "1GiB").
func parseBandwidth(v string) (float64, error) {
	v = strings.TrimSpace(v)
	if num, ok := strings.CutSuffix(strings.ToLower(v), "bit"); ok {
		mult := 1.0
		switch {
		case strings.HasSuffix(num, "k"):
			mult, num = 1e3, strings.TrimSuffix(num, "k")
		case strings.HasSuffix(num, "m"):
			mult, num = 1e6, strings.TrimSuffix(num, "m")
		case strings.HasSuffix(num, "g"):
			mult, num = 1e9, strings.TrimSuffix(num, "g")
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || x <= 0 {
			return 0, fmt.Errorf("%q: want a rate such as 10Gbit or 125MB", v)
		}
		return x * mult / 8, nil
	}
	n, err := humanize.ParseBytes(v)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q: want a rate such as 10Gbit or 125MB", v)
	}
	return float64(n), nil
}

// machineModel is the emulated machines' links and CPU from the flags.
func (f benchFlags) machineModel() (linkBandwidth float64, cpu *transport.CPUModel, err error) {
	if f.linkBandwidth != "" {
		bw, err := parseBandwidth(f.linkBandwidth)
		if err != nil {
			return 0, nil, fmt.Errorf("--link-bandwidth: %w", err)
		}
		linkBandwidth = bw
	}
	if f.cpuPerMessage != 0 || f.cpuPerKiB != 0 || f.cpuPerRequest != 0 {
		cpu = &transport.CPUModel{PerMessage: f.cpuPerMessage, PerKiB: f.cpuPerKiB, PerRequest: f.cpuPerRequest, Cores: f.cpuCores}
		if err := cpu.Validate(); err != nil {
			return 0, nil, fmt.Errorf("--cpu-per-message, --cpu-per-kib, --cpu-per-request, --cpu-cores: %w", err)
		}
	}
	return linkBandwidth, cpu, nil
}

func (f benchFlags) workloadSpec() (ycsb.Workload, error) {
	var w ycsb.Workload
	var err error
	if f.mix != "" {
		w, err = ycsb.ParseMix(f.mix)
	} else {
		w, err = ycsb.Core(f.workload)
	}
	if err != nil {
		return w, err
	}
	w.RecordCount, w.FieldCount, w.FieldLength = f.records, f.fieldCount, f.fieldLength
	return w, w.Validate()
}

// startProfile starts a CPU profile of the benchmark process into $MERIDIAN_CPUPROFILE when
// it is set (the client's, and on the emulated WAN every node's: is the host the bottleneck?);
// stop ends it.
func startProfile() (stop func(), err error) {
	path := os.Getenv("MERIDIAN_CPUPROFILE")
	if path == "" {
		return func() {}, nil
	}
	pf, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: MERIDIAN_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, fmt.Errorf("bench: MERIDIAN_CPUPROFILE: %w", err)
	}
	return func() { pprof.StopCPUProfile(); pf.Close() }, nil
}

func runBench(cmd *cobra.Command, f benchFlags) error {
	ctx := cmd.Context()
	stop, err := startProfile()
	if err != nil {
		return err
	}
	defer stop()
	w, err := f.workloadSpec()
	if err != nil {
		return err
	}
	cfgs, err := bench.ParseConfigs(f.protocols)
	if err != nil {
		return err
	}
	tty := isTerminal(os.Stderr)
	ro := bench.RunOptions{Workload: w, ClientsPerRegion: f.clients, RatePerRegion: f.rate, Duration: f.duration,
		Warmup: f.warmup, MaxOps: f.maxOps, Seed: f.seed, Progress: os.Stderr, ProgressTTY: tty}
	var target bench.Target
	nodes := 0
	switch {
	case f.target == "noop":
		runtime.GOMAXPROCS(1)
		topo, err := loadTopology(f.emulated)
		if err != nil {
			return err
		}
		target = &bench.NoopTarget{Topo: topo}
		cfgs = []bench.Config{{Protocol: "noop"}}
		fmt.Fprintln(os.Stderr, "noop target: measuring the benchmark client alone on one core (GOMAXPROCS=1)")
	case f.target != "":
		return fmt.Errorf("bench: unknown --target %q (noop, or use --emulated / --config)", f.target)
	case f.loopback != nil:
		target = f.loopback
		nodes = f.loopback.Nodes()
	case f.labDir != "":
		lt, err := newLabTarget(f.labDir)
		if err != nil {
			return err
		}
		if err := lt.SetKeyspaceShape(f.replicas, f.partitions); err != nil {
			return err
		}
		target = lt
		nodes = labNodes(lt)
	case f.configPath != "":
		c, err := config.Load(f.configPath)
		if err != nil {
			return err
		}
		target = &bench.ClusterTarget{Cluster: c, Keyspace: f.keyspace}
		nodes = len(c.Nodes)
	default:
		topo, err := loadTopology(f.emulated)
		if err != nil {
			return err
		}
		lbw, cpu, err := f.machineModel()
		if err != nil {
			return err
		}
		target = &bench.EmulatedTarget{Topo: topo, NodesPerRegion: f.nodesPerRegion, ReplicasPerRegion: f.replicas, Partitions: f.partitions, Seed: f.seed, MaxClockOffset: f.maxClockOffset,
			LinkBandwidth: lbw, CPU: cpu}
		nodes = f.nodesPerRegion * len(topo.Regions)
	}
	defer target.Close()

	if f.maxMode {
		if f.maxStart <= 0 || f.maxStart > 1e7 {
			return fmt.Errorf("bench: --max-start %v: want a rate in (0, 1e7] ops/s per region", f.maxStart)
		}
		if f.maxFresh && (f.labDir != "" || f.loopback != nil || f.configPath != "" || f.target != "") {
			return fmt.Errorf("bench: --max-fresh needs the emulated target (it starts a new in-process cluster for every probe; a lab, loopback or running cluster is not restarted per probe)")
		}
		if f.p50Bound < 0 || f.p99Bound <= 0 {
			return fmt.Errorf("bench: --p99 %v and --p50 %v: want a positive p99 bound and a p50 bound ≥ 0", f.p99Bound, f.p50Bound)
		}
		// Every configuration in turn (in the lab: Meridian, Cassandra and etcd side by side).
		var all []*bench.MaxResult
		for _, cfg := range cfgs {
			// Servers in other processes: the whole machine's CPU (clients, servers, router).
			mo := bench.MaxOptions{P99BoundMs: float64(f.p99Bound.Microseconds()) / 1000, P50BoundMs: float64(f.p50Bound.Microseconds()) / 1000,
				P50Factor: f.p50Factor, Fresh: f.maxFresh, StartRatePerRegion: f.maxStart, MachineCPU: f.labDir != "" || f.loopback != nil}
			res, err := bench.FindMax(ctx, target, cfg, nodes, ro, mo, os.Stdout)
			if err != nil {
				return err
			}
			bound := fmt.Sprintf("p99 < %v", f.p99Bound)
			if f.p50Bound > 0 {
				bound += fmt.Sprintf(", p50 < %v", f.p50Bound)
			}
			if f.p50Factor > 0 {
				bound += fmt.Sprintf(", every region's p50 < %.2f× its base", f.p50Factor)
			}
			fmt.Printf("%s, workload %s: highest throughput with %s: %.0f ops/s (p50 %.1f ms, p99 %.1f ms) = %.0f ops/s per node, %.0f ops/s per core, %.0f CPU µs/op (%s, %.2f cores)\n",
				res.Config, res.Workload, bound, res.BestOps, res.BestP50Ms, res.BestP99Ms, res.OpsPerNode, res.OpsPerCore, res.CPUUsPerOp, res.CPUNote, res.CPUCores)
			all = append(all, res)
		}
		fmt.Println()
		bench.PrintMax(os.Stdout, all)
		bench.PrintMaxMedians(os.Stdout, all)
		if f.jsonPath != "" {
			if len(all) == 1 {
				return bench.WriteJSON(f.jsonPath, all[0])
			}
			return bench.WriteJSON(f.jsonPath, all)
		}
		return nil
	}

	if f.sweep != "" {
		if f.configPath != "" {
			return fmt.Errorf("bench: --sweep-rtt needs the emulated target")
		}
		rtts, err := parseFloats(f.sweep)
		if err != nil {
			return fmt.Errorf("bench: --sweep-rtt: %w", err)
		}
		newTarget := func(t *topology.Topology) bench.Target {
			return &bench.EmulatedTarget{Topo: t, NodesPerRegion: f.nodesPerRegion, ReplicasPerRegion: f.replicas, Partitions: f.partitions, Seed: f.seed, MaxClockOffset: f.maxClockOffset}
		}
		sw, err := bench.SweepRTT(ctx, newTarget, []string{"dc1", "dc2", "dc3"}, rtts, cfgs, ro, os.Stdout)
		if err != nil {
			return err
		}
		fmt.Println()
		bench.PrintSweep(os.Stdout, sw)
		if f.jsonPath != "" {
			if err := bench.WriteJSON(f.jsonPath, sw); err != nil {
				return err
			}
		}
		if f.chartPath != "" {
			for _, op := range []string{"read", "write"} {
				p := chartVariant(f.chartPath, op)
				if err := chart.LatencyVsRTT(sw, op, p); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "wrote %s\n", p)
			}
		}
		return nil
	}

	rep, err := bench.Compare(ctx, target, cfgs, ro, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Println()
	bench.PrintCompare(os.Stdout, rep)
	if f.jsonPath != "" {
		if err := bench.WriteJSON(f.jsonPath, rep); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", f.jsonPath)
	}
	if f.chartPath != "" {
		return writeCharts(rep, f.chartPath)
	}
	return nil
}

// writeCharts writes the read CDF at path, and the write CDF, per-region bars and
// throughput-over-time beside it.
func writeCharts(rep *bench.Report, path string) error {
	charts := []struct {
		path string
		draw func(string) error
	}{
		{path, func(p string) error { return chart.LatencyCDF(rep, "read", p) }},
		{chartVariant(path, "write"), func(p string) error { return chart.LatencyCDF(rep, "write", p) }},
		{chartVariant(path, "regions"), func(p string) error { return chart.RegionBars(rep, "read", p) }},
		{chartVariant(path, "throughput"), func(p string) error { return chart.ThroughputOverTime(rep, p) }},
	}
	for _, c := range charts {
		if err := c.draw(c.path); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", c.path)
	}
	return nil
}

// chartVariant turns "out/latency.png" into "out/latency-write.png".
func chartVariant(path, suffix string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + suffix + ext
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a non-negative number", p)
		}
		out = append(out, v)
	}
	return out, nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func throughputCmd() *cobra.Command {
	var o bench.ThroughputOptions
	var ops []string
	var jsonPath string
	tp := &cobra.Command{
		Use:   "throughput --endpoint HOST:PORT [--ops put,get]",
		Short: "Closed-loop throughput of one node over gRPC: ops/s, p50/p99, CPU per operation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Endpoint == "" {
				return fmt.Errorf("bench throughput: --endpoint is required")
			}
			var results []*bench.ThroughputResult
			for _, op := range ops {
				oo := o
				oo.Op = op
				r, err := bench.Throughput(cmd.Context(), oo)
				if err != nil {
					return err
				}
				r.Print(os.Stdout)
				results = append(results, r)
			}
			if jsonPath != "" {
				b, _ := json.MarshalIndent(results, "", "  ")
				if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("bench: write %s: %w", jsonPath, err)
				}
			}
			return nil
		},
	}
	tp.Flags().StringVar(&o.Endpoint, "endpoint", "", "node address HOST:PORT")
	tp.Flags().StringVar(&o.Keyspace, "keyspace", "bench", "keyspace")
	tp.Flags().StringSliceVar(&ops, "ops", []string{"put", "get"}, "operations to measure, in order")
	tp.Flags().IntVar(&o.Concurrency, "concurrency", 64, "requests in flight")
	tp.Flags().IntVar(&o.ValueBytes, "value-bytes", 100, "value size")
	tp.Flags().IntVar(&o.Keys, "keys", 100000, "key space size")
	tp.Flags().DurationVar(&o.Duration, "duration", 10*time.Second, "duration per operation")
	tp.Flags().StringVar(&o.Consistency, "consistency", "ONE", "consistency level")
	tp.Flags().IntVar(&o.ServerPID, "server-pid", 0, "server process to sample CPU time from")
	tp.Flags().StringVar(&jsonPath, "json", "", "write results as JSON")
	return tp
}

// globleaseFiguresCmd reproduces the GlobLease evaluation of the liu thesis (Figures 4.4–4.6
// and 4.8) on the emulated WAN: charts into --out-dir, Markdown tables on stdout.
func globleaseFiguresCmd() *cobra.Command {
	var (
		topoName, outDir, jsonPath, mdPath, shares, sweep string
		o                                                 repro.GlobLeaseFigOptions
		quick                                             bool
		glOptions                                         []string
	)
	cmd := &cobra.Command{
		Use:   "globlease-figures [--topology ec2-globlease-4] [--out-dir docs/img] [--json FILE] [--markdown FILE] [--quick]",
		Short: "Reproduce the GlobLease evaluation of the liu thesis (Figs. 4.4, 4.5, 4.6, 4.8): GlobLease vs Cassandra READ-ONE-WRITE-ALL on the emulated WAN",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			if quick {
				// A smoke run: small data, short runs, two lease lengths (explicit flags win).
				set := func(name string, apply func()) {
					if !fl.Changed(name) {
						apply()
					}
				}
				set("records", func() { o.Records = 1000 })
				set("value-bytes", func() { o.ValueBytes = 1024 })
				set("warmup", func() { o.Warmup = 3 * time.Second })
				set("duration", func() { o.Duration = 5 * time.Second })
				set("sweep-warmup", func() { o.SweepWarmup = 2 * time.Second })
				set("sweep-duration", func() { o.SweepDuration = 4 * time.Second })
				set("lease-sweep", func() { sweep = "1s,5s" })
			}
			topo, err := loadTopology(topoName)
			if err != nil {
				return err
			}
			o.Topology = topo
			o.GlobLeaseOptions = map[string]string{}
			for _, kv := range glOptions {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("bench globlease-figures: --option %q: want KEY=VALUE", kv)
				}
				o.GlobLeaseOptions[k] = v
			}
			if o.ReadShares, err = parseShares(shares); err != nil {
				return fmt.Errorf("bench globlease-figures: --read-shares: %w", err)
			}
			o.LeaseSweep = nil
			for _, p := range strings.Split(sweep, ",") {
				d, err := time.ParseDuration(strings.TrimSpace(p))
				if err != nil || d <= 0 {
					return fmt.Errorf("bench globlease-figures: --lease-sweep: %q is not a positive duration", p)
				}
				o.LeaseSweep = append(o.LeaseSweep, d)
			}
			if err := os.MkdirAll(outDir, 0o755); err != nil {
				return fmt.Errorf("bench globlease-figures: %w", err)
			}
			o.Log, o.Progress, o.ProgressTTY = os.Stderr, os.Stderr, isTerminal(os.Stderr)
			res, runErr := repro.GlobLeaseFigures(cmd.Context(), o)
			if res == nil {
				return runErr
			}
			md := res.Markdown()
			fmt.Print(md)
			if err := writeReproOutputs("bench globlease-figures", md, mdPath, jsonPath, res); err != nil {
				return err
			}
			if runErr != nil {
				return runErr
			}
			return writeGlobLeaseCharts(res, outDir)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&topoName, "topology", "ec2-globlease-4", "emulated WAN topology (built-in name or file); GlobLease's home region is its first region")
	fl.IntVar(&o.Records, "records", 10000, "keys (thesis Table 4.2: 10000)")
	fl.IntVar(&o.ValueBytes, "value-bytes", 10240, "value size in bytes (thesis: 10 KB)")
	fl.Float64Var(&o.RatePerSecond, "rate", 1000, "total open-loop requests/s, split evenly over the regions")
	fl.IntVar(&o.ClientsPerRegion, "clients", 64, "open-loop worker pool per region")
	fl.StringVar(&shares, "read-shares", "0.75,0.85,0.95", "read proportions of the GlobLease-vs-Cassandra runs (the rest are updates)")
	fl.DurationVar(&o.Lease, "lease", 60*time.Second, "GlobLease lease length of those runs")
	fl.StringVar(&sweep, "lease-sweep", "1s,5s,15s,60s", "lease lengths of Fig. 4.8 (run at 95% reads)")
	fl.DurationVar(&o.Warmup, "warmup", 20*time.Second, "warm-up of each comparison run")
	fl.DurationVar(&o.Duration, "duration", 40*time.Second, "measured time of each comparison run")
	fl.DurationVar(&o.SweepWarmup, "sweep-warmup", 10*time.Second, "warm-up of each lease-sweep run")
	fl.DurationVar(&o.SweepDuration, "sweep-duration", 30*time.Second, "measured time of each lease-sweep run")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the workload generators and the emulated WAN")
	fl.StringVar(&outDir, "out-dir", "docs/img", "directory of the charts globlease-{cdf,above300,overhead,lease}.png")
	fl.StringVar(&jsonPath, "json", "", "write every report and table as JSON")
	fl.StringVar(&mdPath, "markdown", "", "also write the Markdown tables to this file")
	fl.BoolVar(&quick, "quick", false, "smoke run: 1000 records of 1 KB, 3s+5s runs, lease sweep 1s,5s at 2s+4s")
	fl.StringArrayVar(&glOptions, "option", nil, "extra GlobLease keyspace option KEY=VALUE (repeatable), e.g. home_ranges=user31=virginia")
	fl.StringVar(&o.Distribution, "distribution", "", "YCSB request distribution: zipfian (default), uniform, hotspot, latest")
	fl.Float64Var(&o.KeyLocality, "locality", 0, "share of each region's reads and updates on keys mastered in that region (0: no locality)")
	return cmd
}

func parseShares(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(v > 0 && v <= 1) {
			return nil, fmt.Errorf("%q is not a proportion in (0,1]", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// writeGlobLeaseCharts writes Figs. 4.4, 4.5, 4.6 and 4.8 as PNGs into dir.
func writeGlobLeaseCharts(res *repro.GlobLeaseFigResults, dir string) error {
	topo := " — " + res.Topology
	var cdf, above, overhead, lease []chart.Series
	for _, l := range res.Fig44 {
		// One colour per line; the 95 % lines dashed.
		cdf = append(cdf, chart.Series{Name: l.Name, Points: l.Points, Dashed: l.ReadShare >= 0.9})
	}
	cas, gl := chart.Series{Name: "Cassandra READ-ONE-WRITE-ALL"}, chart.Series{Name: "GlobLease"}
	for _, r := range res.Fig45 {
		cas.Points = append(cas.Points, [2]float64{r.ReadShare * 100, r.CassandraAbove * 100})
		gl.Points = append(gl.Points, [2]float64{r.ReadShare * 100, r.GlobLeaseAbove * 100})
	}
	above = []chart.Series{cas, gl}
	if res.ScaledThresholdMs > 0 {
		casS := chart.Series{Name: fmt.Sprintf("Cassandra, > %.0f ms (scaled)", res.ScaledThresholdMs), Dashed: true}
		glS := chart.Series{Name: fmt.Sprintf("GlobLease, > %.0f ms (scaled)", res.ScaledThresholdMs), Dashed: true}
		for _, r := range res.Fig45 {
			casS.Points = append(casS.Points, [2]float64{r.ReadShare * 100, r.CassandraAboveScaled * 100})
			glS.Points = append(glS.Points, [2]float64{r.ReadShare * 100, r.GlobLeaseAboveScaled * 100})
		}
		above = append(above, casS, glS)
	}
	meas := chart.Series{Name: "measured (renewals + updates) per read"}
	formula := chart.Series{Name: "formula W/R + K/(L·R)", Dashed: true}
	bound := chart.Series{Name: "bound (n−1)·W/R + (n−1)/n·K/(L·R)", Dashed: true}
	for _, r := range res.Fig46 {
		if r.HasCounters {
			meas.Points = append(meas.Points, [2]float64{r.ReadShare * 100, r.Measured})
		}
		formula.Points = append(formula.Points, [2]float64{r.ReadShare * 100, r.Formula})
		bound.Points = append(bound.Points, [2]float64{r.ReadShare * 100, r.Bound})
	}
	overhead = []chart.Series{meas, formula, bound}
	rd, wr, all := chart.Series{Name: "read"}, chart.Series{Name: "write"}, chart.Series{Name: "all requests"}
	for _, r := range res.Fig48 {
		rd.Points = append(rd.Points, [2]float64{r.LeaseS, r.MeanReadMs})
		wr.Points = append(wr.Points, [2]float64{r.LeaseS, r.MeanWriteMs})
		all.Points = append(all.Points, [2]float64{r.LeaseS, r.MeanAllMs})
	}
	lease = []chart.Series{rd, wr, all}
	charts := []struct {
		file string
		draw func(string) error
	}{
		{"globlease-cdf.png", func(p string) error {
			return chart.CombinedCDF("Fig. 4.4: latency CDF of all requests"+topo, cdf, p)
		}},
		{"globlease-above300.png", func(p string) error {
			return chart.Lines(fmt.Sprintf("Fig. 4.5: requests above %d ms%s", repro.HighLatencyMs, topo), "reads (% of requests)",
				fmt.Sprintf("requests above %d ms (%%)", repro.HighLatencyMs), above, p)
		}},
		{"globlease-overhead.png", func(p string) error {
			return chart.Lines(fmt.Sprintf("Fig. 4.6: lease maintenance overhead (lease %g s)%s", res.LeaseS, topo),
				"reads (% of requests)", "lease renewals + updates per read", overhead, p)
		}},
		{"globlease-lease.png", func(p string) error {
			return chart.Lines(fmt.Sprintf("Fig. 4.8: average latency vs lease length (%.0f%% reads)%s", res.SweepReadShare*100, topo),
				"lease length (s)", "mean latency (ms)", lease, p)
		}},
	}
	for _, c := range charts {
		p := filepath.Join(dir, c.file)
		if err := c.draw(p); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", p)
	}
	return nil
}

// globleaseSpikeCmd reproduces liu-thesis Fig. 4.10: a spike from 400 to 1,800 requests/s on
// a Zipfian (exponent 4) key set, with hot-key replicas off and on.
func globleaseSpikeCmd() *cobra.Command {
	var (
		topoName, jsonPath, chartPath string
		o                             repro.GlobLeaseSpikeOptions
	)
	cmd := &cobra.Command{
		Use:   "globlease-spike [--topology ec2-globlease-4] [--chart FILE] [--json FILE]",
		Short: "Reproduce the elasticity experiment of the liu thesis (Fig. 4.10): a load spike on a skewed key set, hot-key replicas off and on",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topo, err := loadTopology(topoName)
			if err != nil {
				return err
			}
			o.Topology = topo
			o.Log, o.Progress = os.Stderr, nil
			rs, err := repro.GlobLeaseSpike(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench globlease-spike: %w", err)
			}
			fmt.Print(repro.SpikeMarkdown(rs))
			if jsonPath != "" {
				if err := bench.WriteJSON(jsonPath, rs); err != nil {
					return err
				}
			}
			if chartPath != "" {
				var series []chart.Series
				for _, r := range rs {
					name := "hot-key replicas off"
					if r.HotKeys {
						name = "hot-key replicas on"
					}
					s := chart.Series{Name: name, Dashed: !r.HotKeys}
					for _, p := range r.Run.Timeline {
						s.Points = append(s.Points, [2]float64{p.TSec, p.MeanMs})
					}
					series = append(series, s)
				}
				title := fmt.Sprintf("GlobLease under a spike (%.0f → %.0f requests/s at t=%.0f s) — %s", o.BeforeRate, o.AfterRate, o.Before.Seconds(), topo.Name)
				if err := chart.Lines(title, "time (s)", "mean latency per second (ms)", series, chartPath); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "wrote %s\n", chartPath)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&topoName, "topology", "ec2-globlease-4", "emulated WAN topology")
	fl.IntVar(&o.NodesPerRegion, "nodes-per-region", 3, "nodes per region: each partition's host plus candidates for affiliated nodes")
	fl.Float64Var(&o.NodeCapacityOps, "node-capacity", 300, "each node's service capacity (requests/s; client and forwarded requests alike)")
	fl.IntVar(&o.Records, "records", 1000, "keys")
	fl.IntVar(&o.ValueBytes, "value-bytes", 1024, "value size in bytes")
	fl.Float64Var(&o.ReadShare, "read-share", 1, "read proportion (the rest are updates); the thesis's skewed experiments are reads")
	fl.Float64Var(&o.ZipfExponent, "zipf", 4, "Zipfian exponent of the key popularity (thesis Table 4.2: 4)")
	fl.Float64Var(&o.BeforeRate, "before-rate", 400, "total requests/s before the spike")
	fl.Float64Var(&o.AfterRate, "after-rate", 1800, "total requests/s after the spike")
	fl.DurationVar(&o.Warmup, "warmup", 20*time.Second, "unmeasured warm-up at the first rate")
	fl.DurationVar(&o.Before, "before", 20*time.Second, "measured time before the spike")
	fl.DurationVar(&o.After, "after", 40*time.Second, "measured time after the spike")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed")
	fl.StringVar(&chartPath, "chart", "", "write the latency-over-time chart (PNG or SVG)")
	fl.StringVar(&jsonPath, "json", "", "write the runs as JSON")
	return cmd
}

// loopbackTarget is bench loopback's target (Linux only).
type loopbackTarget interface {
	bench.Target
	Nodes() int
}

// writeReproOutputs writes a reproduction's Markdown tables and JSON results where the flags
// ask (empty: not written), for the paper-reproduction commands.
func writeReproOutputs(command, md, mdPath, jsonPath string, res any) error {
	if mdPath != "" {
		if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
			return fmt.Errorf("%s: write %s: %w", command, mdPath, err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", mdPath)
	}
	if jsonPath != "" {
		if err := bench.WriteJSON(jsonPath, res); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", jsonPath)
	}
	return nil
}
