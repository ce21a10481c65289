package repro

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"meridian/internal/autoscale"
	"meridian/internal/config"
	"meridian/internal/elascass"
	"meridian/internal/hubbub"
	"meridian/internal/metadata"
	"meridian/internal/runtime/node"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/scalesim"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// AutoscaleOptions configure `meridian bench autoscale --emulated` (docs/elasticity.md,
// "Autoscaling after ProRenaTa"): a policy scales the first region of an emulated cluster —
// real nodes with per-node service capacity and bandwidth, real joins and decommissions —
// through one compressed day of a diurnal load with flash crowds, its predictor trained on the
// two days before.
type AutoscaleOptions struct {
	Topology *topology.Topology
	// Policies run, each on a fresh cluster: prorenata, reactive (default both).
	Policies []string
	// Season periods of Period make the day (defaults 24 × 5s).
	Season int
	Period time.Duration
	// Low and High bound the day's load (ops/s in the region; defaults 250 and 1600);
	// FlashFactor the flash crowds' (default 1.5).
	Low, High, FlashFactor float64
	// StartNodes and MaxNodes of the scaled region (defaults 2 and 6); the other regions
	// keep 2 nodes.
	StartNodes, MaxNodes int
	// NodeCapacityOps and NodeBandwidth model each node (defaults 600 ops/s, 4 MB/s).
	NodeCapacityOps, NodeBandwidth float64
	// Records of RecordBytes (defaults 40,000 of 2 KiB: 80 MB per region).
	Records, RecordBytes int
	// SLO on each 1-s window's p99 (default 50ms).
	SLO time.Duration
	// Interference runs Hubbub-scale's comparison instead: ProRenaTa oblivious
	// ("oblivious": elasticity.interference off, the plan at nominal capacity) against aware
	// ("aware": the driver's detector on, the plan told the capacity the flagged nodes lack,
	// flagged nodes decommissioned first), flash crowds off, SlowNodes of the region's nodes
	// (not its first) slowed by SlowFactors in turn over the middle half of the day.
	Interference bool
	SlowNodes    int
	SlowFactors  []float64
	Seed         uint64
	Log          io.Writer
}

func (o *AutoscaleOptions) defaults() error {
	if o.Topology == nil {
		t, err := topology.Builtin("lan-3")
		if err != nil {
			return err
		}
		o.Topology = t
	}
	if len(o.Policies) == 0 {
		o.Policies = []string{"prorenata", "reactive"}
		if o.Interference {
			o.Policies = []string{"oblivious", "aware"}
		}
	}
	if o.Interference {
		if o.SlowNodes == 0 {
			o.SlowNodes = 2
		}
		if len(o.SlowFactors) == 0 {
			o.SlowFactors = []float64{1.5, 2}
		}
		if o.StartNodes == 0 {
			o.StartNodes = o.SlowNodes + 1
		}
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defInt(&o.Season, 24)
	if o.Period == 0 {
		o.Period = 5 * time.Second
	}
	def(&o.Low, 250)
	def(&o.High, 1600)
	def(&o.FlashFactor, 1.5)
	defInt(&o.StartNodes, 2)
	defInt(&o.MaxNodes, 6)
	def(&o.NodeCapacityOps, 600)
	def(&o.NodeBandwidth, 4e6)
	defInt(&o.Records, 40_000)
	defInt(&o.RecordBytes, 2048)
	if o.SLO == 0 {
		o.SLO = 50 * time.Millisecond
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.StartNodes < 1 || o.MaxNodes < o.StartNodes || o.Season < 4 || o.Period < time.Second {
		return fmt.Errorf("bench autoscale --emulated: nodes %d..%d, season %d, period %v: want 1 ≤ start ≤ max, season ≥ 4, period ≥ 1s",
			o.StartNodes, o.MaxNodes, o.Season, o.Period)
	}
	return nil
}

// AutoscaleAction is one scaling action and its migration time, predicted and measured.
type AutoscaleAction struct {
	Kind               string // join, decommission
	Node               string
	From, To           int
	AtS                float64
	PredictedS, TookS  float64
	PredictionErrShare float64
}

// AutoscaleRun is one policy's day.
type AutoscaleRun struct {
	Policy string
	// CapacityPerNode is the calibrated load (ops/s) one node serves (NodeCapacityOps over the
	// service slots an operation costs, measured before the run).
	CapacityPerNode float64
	// Windows and Violating are the 1-s windows and those whose p99 broke the SLO.
	Windows, Violating int
	ViolatingShare     float64
	// Utilization is the mean, over periods, of the load over the serving nodes' capacity.
	Utilization float64
	// NodeSeconds of the scaled region; OracleNodeSeconds those of sizing every period for its
	// own load at 70% with no migration time.
	NodeSeconds, OracleNodeSeconds float64
	Actions                        []AutoscaleAction
	// MigrationErrMean is the mean |predicted − took| / took over the actions after the first
	// of each kind (the model calibrates on the first).
	MigrationErrMean float64
	// Interference runs: the windows of the slowdown and those over the SLO, and per slowed
	// node the periods from the slowdown to the driver flagging it (-1: never).
	SlowWindows, SlowViolating int
	DetectionPeriods           []int
	Timeline                   []bench.TimePoint
}

// AutoscaleResult is the experiment.
type AutoscaleResult struct {
	Options AutoscaleOptions `json:"-"`
	Runs    []AutoscaleRun
}

// AutoscaleEmulated runs the experiment.
func AutoscaleEmulated(ctx context.Context, o AutoscaleOptions) (*AutoscaleResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	res := &AutoscaleResult{Options: o}
	for _, p := range o.Policies {
		if p != "prorenata" && p != "reactive" && p != "oblivious" && p != "aware" {
			return nil, fmt.Errorf("bench autoscale --emulated: policy %q: want prorenata, reactive, oblivious or aware", p)
		}
		r, err := autoscaleRun(ctx, o, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

// startAutoscaleCluster starts the emulated cluster of the autoscaling experiments and loads
// its records: StartNodes nodes per region of NodeCapacityOps and NodeBandwidth, BwMan on, the
// placement driver every 250 ms with four moves per node, Hubbub-scale's use of the detector
// when aware.
func startAutoscaleCluster(o AutoscaleOptions, aware bool) (*bench.Cluster, error) {
	on := true
	bw := config.BwMan{Mode: "auto", LinkBandwidth: fmt.Sprintf("%dB", int64(o.NodeBandwidth)), SLOP99: o.SLO}
	c, err := bench.StartCluster(bench.ClusterOptions{
		Topology: o.Topology, NodesPerRegion: o.StartNodes, Seed: o.Seed,
		Keyspace: config.Keyspace{Name: "bench", Protocol: config.ProtocolQuorum, ReplicasPerRegion: 1, Partitions: 24,
			SplitPoints: ycsb.SplitPoints(24), Options: map[string]string{"read_level": "ONE", "write_level": "QUORUM",
				"split_ops": "0", "split_bytes": "1GiB", "merge_bytes": "1MiB", "min_partitions": "24"}},
		NodeCapacityOps: o.NodeCapacityOps, NodeBandwidth: o.NodeBandwidth,
		Elasticity: &config.Elasticity{Driver: &on, Strategy: string(elascass.TwoPhase), Interval: 250 * time.Millisecond,
			MaxMovesPerNode: 4, MaxMoves: 64, DeadAfter: time.Hour, TargetByteImbalance: -1, TargetLoadImbalance: -1,
			Interference: &aware},
		BwMan: &bw, Logger: benchLogger(), MetadataVoters: firstNodes(o.Topology),
	})
	if err != nil {
		return nil, err
	}
	if err := LoadDirect(c, o.Records, o.RecordBytes, o.Seed); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// emuAction is an action in flight: the nodes one decision adds or removes.
type emuAction struct {
	AutoscaleAction
	start time.Time
	nodes []*node.Node
	done  bool
	// loadSum and loads: the region's load at each period the action spanned (the
	// migration model's fit takes their mean).
	loadSum float64
	loads   int
}

func autoscaleRun(ctx context.Context, o AutoscaleOptions, policy string) (AutoscaleRun, error) {
	run := AutoscaleRun{Policy: policy}
	fmt.Fprintf(o.Log, "  %s\n", policy)
	region := o.Topology.Regions[0]
	aware := policy == "aware"

	c, err := startAutoscaleCluster(o, aware)
	if err != nil {
		return run, err
	}
	defer c.Close()
	w := ycsbB(o.Records, o.RecordBytes)
	cfg := bench.Config{Protocol: config.ProtocolQuorum, ReadLevel: "ONE", WriteLevel: "QUORUM"}
	regionNodes := func() []*node.Node {
		var out []*node.Node
		for _, n := range c.Nodes {
			if n.Region() == region {
				out = append(out, n)
			}
		}
		return out
	}
	// Calibration (the profiling step): the service slots an operation costs at the
	// region's nodes, hence the load one node serves.
	slots := func() int64 {
		var s int64
		work := c.Work()
		for _, n := range regionNodes() {
			s += work[n.Name()][0] + work[n.Name()][1]
		}
		return s
	}
	s0 := slots()
	cal, err := bench.Execute(ctx, bench.ReplicaAwareSessionOf(c, cfg), []string{region}, cfg, bench.RunOptions{Workload: w, SkipLoad: true,
		RatePerRegion: o.Low * 2, ClientsPerRegion: 64, Duration: 6 * time.Second, Seed: o.Seed})
	if err != nil {
		return run, fmt.Errorf("calibration: %w", err)
	}
	ops := cal.ThroughputOps * 6
	if ops <= 0 {
		return run, fmt.Errorf("calibration: no operation completed")
	}
	slotsPerOp := float64(slots()-s0) / ops
	run.CapacityPerNode = o.NodeCapacityOps / max(slotsPerOp, 1)
	fmt.Fprintf(o.Log, "    calibration: %.2f service slots per operation: %.0f ops/s per node\n", slotsPerOp, run.CapacityPerNode)

	// The trace: three days, the first two the predictor's history, the third run.
	so := scalesim.Options{Period: o.Period, Season: o.Season, Days: 3, WarmupDays: 2, Low: o.Low, High: o.High,
		FlashCrowds: 2, FlashPeriods: 2, FlashFactor: o.FlashFactor, Seed: o.Seed}
	if o.Interference {
		so.FlashCrowds = -1 // the slowdown is the only surprise
	}
	trace := scalesim.Trace(so)
	day := trace[2*o.Season:]
	data := 0.0
	for _, ns := range c.Nodes[0].ClusterStatus().Nodes {
		if ns.Region == region {
			data += float64(ns.Bytes)
		}
	}
	ctrl, err := autoscale.New(autoscale.Options{Period: o.Period, Season: o.Season, CapacityPerNode: run.CapacityPerNode,
		TargetUtilization: 0.7, MinNodes: o.StartNodes, MaxNodes: o.MaxNodes, ScaleInAfter: 4 * o.Period,
		// The placement driver's rounds (24 partitions, 4 moves per node, a round every
		// 250 ms: a wave's fixed cost is taken as three rounds) and BwMan's allocation (80% of
		// the link at no load, less 1.5 × the clients' bytes; a client operation costs its
		// node about one record on the link, the prior the fit starts from).
		Model: autoscale.MigrationModel{DataBytes: data, RateBytesPerSec: o.NodeBandwidth * 0.8, Overhead: 2 * time.Second,
			Partitions: 24, MaxMovesPerNode: 4, PerMove: 750 * time.Millisecond, UserBytesPerOp: float64(o.RecordBytes)}})
	if err != nil {
		return run, err
	}
	for _, l := range trace[:2*o.Season] {
		ctrl.Learn(l)
	}
	hpa := &scalesim.Reactive{CapacityPerNode: run.CapacityPerNode, TargetUtilization: 0.7, Tolerance: 0.1, DownWindow: 4}

	// The day: the clients follow the trace; the policy decides every period.
	var steps []bench.RateStep
	for i, l := range day {
		steps = append(steps, bench.RateStep{At: time.Duration(i) * o.Period, PerRegion: l})
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	type result struct {
		r   *bench.Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := bench.Execute(lctx, bench.ReplicaAwareSessionOf(c, cfg), []string{region}, cfg, bench.RunOptions{Workload: w, SkipLoad: true,
			RatePerRegion: day[0], RateSteps: steps, ClientsPerRegion: 128, Duration: time.Duration(len(day)) * o.Period, Seed: o.Seed})
		done <- result{r, err}
	}()
	watcher := c.Nodes[0]
	start := time.Now()
	var mu sync.Mutex
	var actions []*emuAction
	pendingOf := func(kind string) int {
		n := 0
		for _, a := range actions {
			if !a.done && a.Kind == kind {
				n += len(a.nodes)
			}
		}
		return n
	}
	// finish checks the actions in flight against the cluster status.
	finish := func() {
		st := watcher.ClusterStatus()
		for _, a := range actions {
			if a.done {
				continue
			}
			ok := len(st.Moves) == 0
			for _, nd := range a.nodes {
				switch a.Kind {
				case "join":
					ok = ok && stateOf(watcher, nd.ID()) == metadata.NodeActive && holdsShare(st, nd.Name())
				case "decommission":
					ok = ok && heldByName(st, nd.Name()) == 0
				}
			}
			if !ok {
				continue
			}
			a.done = true
			a.TookS = time.Since(a.start).Seconds()
			if a.TookS > 0 {
				a.PredictionErrShare = math.Abs(a.PredictedS-a.TookS) / a.TookS
			}
			ctrl.ObserveMigration(a.From, a.To, time.Since(a.start), a.loadSum/float64(max(a.loads, 1)))
			if a.Kind == "decommission" {
				for _, nd := range a.nodes {
					c.Remove(nd)
				}
			}
			var names []string
			for _, nd := range a.nodes {
				names = append(names, nd.Name())
			}
			a.Node = strings.Join(names, ",")
			fmt.Fprintf(o.Log, "    %s %s: %d → %d nodes, predicted %.1fs, took %.1fs\n", a.Kind, a.Node, a.From, a.To, a.PredictedS, a.TookS)
		}
	}
	// Completion is watched every 100 ms (the migration times are measured, not rounded to
	// periods).
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-t.C:
				mu.Lock()
				finish()
				mu.Unlock()
			}
		}
	}()
	utilSum := 0.0
	// The slowdown (interference runs): the region's nodes 2..SlowNodes+1 over the middle half.
	slowStart, slowEnd := len(day)/4, 3*len(day)/4
	var slowed []string
	if o.Interference {
		for k, nd := range regionNodes()[1:] {
			if k < o.SlowNodes {
				slowed = append(slowed, nd.Name())
			}
		}
		run.DetectionPeriods = make([]int, len(slowed))
		for k := range run.DetectionPeriods {
			run.DetectionPeriods[k] = -1
		}
	}
	for i := range day {
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(time.Until(start.Add(time.Duration(i+1) * o.Period))):
		}
		if o.Interference && (i+1 == slowStart || i+1 == slowEnd) {
			for k, name := range slowed {
				f := o.SlowFactors[k%len(o.SlowFactors)]
				if i+1 == slowEnd {
					f = 1
				}
				if err := c.SetSlowdown(name, f); err != nil {
					return run, err
				}
			}
		}
		mu.Lock()
		flagged := map[string]float64{}
		if aware {
			// Hubbub-scale: the driver's flags; the plan covers what the flagged nodes lack.
			flagged = watcher.Interference()
			loss := 0.0
			for _, index := range flagged {
				loss += run.CapacityPerNode - hubbub.EffectiveCapacity(run.CapacityPerNode, index)
			}
			ctrl.SetInterferenceLoss(loss)
			for k, name := range slowed {
				if _, ok := flagged[name]; ok && run.DetectionPeriods[k] < 0 && i+1 >= slowStart {
					run.DetectionPeriods[k] = i + 1 - slowStart
				}
			}
		}
		// The observation: the load the region's nodes report (their coordinated requests).
		st := watcher.ClusterStatus()
		load, serving := 0.0, 0
		for _, ns := range st.Nodes {
			if ns.Region != region || ns.State != metadata.NodeActive {
				continue
			}
			load += ns.LoadOps
			joining := false
			for _, a := range actions {
				for _, nd := range a.nodes {
					if !a.done && a.Kind == "join" && nd.Name() == ns.Name {
						joining = true
					}
				}
			}
			if !joining {
				serving++
			}
		}
		for _, a := range actions {
			if !a.done {
				a.loadSum += load
				a.loads++
			}
		}
		joins, leaves := pendingOf("join"), pendingOf("decommission")
		size := serving + joins
		utilSum += min(day[i]/(float64(max(serving, 1))*run.CapacityPerNode), 1)
		run.NodeSeconds += float64(serving+joins+leaves) * o.Period.Seconds()
		run.OracleNodeSeconds += float64(max(o.StartNodes, int(math.Ceil(day[i]/(0.7*run.CapacityPerNode))))) * o.Period.Seconds()
		var target int
		var predicted time.Duration
		switch policy {
		case "prorenata", "oblivious", "aware":
			d := ctrl.Step(load, size)
			target, predicted = d.Nodes, d.Migration
		case "reactive":
			target = hpa.Target(load, size)
		}
		target = min(max(target, o.StartNodes), o.MaxNodes)
		if predicted == 0 && target != size {
			predicted = ctrl.Model().DurationAt(size, target, load)
		}
		at := time.Since(start).Seconds()
		switch {
		case target > size:
			a := &emuAction{AutoscaleAction: AutoscaleAction{Kind: "join", From: size, To: target, AtS: at, PredictedS: predicted.Seconds()}, start: time.Now(), loadSum: load, loads: 1}
			for range target - size {
				nd, err := c.Join(ctx, region)
				if err != nil {
					mu.Unlock()
					return run, err
				}
				a.nodes = append(a.nodes, nd)
			}
			actions = append(actions, a)
		case target < serving && joins == 0 && leaves == 0:
			// The newest serving nodes leave (never the first: a metadata voter); an aware
			// controller sends interfered nodes first (Hubbub-scale's preferred sources).
			nodes := regionNodes()
			slices.SortStableFunc(nodes[1:], func(x, y *node.Node) int {
				_, fx := flagged[x.Name()]
				_, fy := flagged[y.Name()]
				switch {
				case fx && !fy:
					return 1 // flagged at the end, where the victims are taken from
				case fy && !fx:
					return -1
				}
				return 0
			})
			a := &emuAction{AutoscaleAction: AutoscaleAction{Kind: "decommission", From: serving, To: target, AtS: at, PredictedS: predicted.Seconds()}, start: time.Now(), loadSum: load, loads: 1}
			for k := 0; k < serving-target && len(nodes)-1-k > 0; k++ {
				nd := nodes[len(nodes)-1-k]
				if _, _, err := watcher.SetNodeState(ctx, nd.Name(), metadata.NodeDecommissioning, 20*time.Second); err != nil {
					mu.Unlock()
					return run, fmt.Errorf("decommission %s: %w", nd.Name(), err)
				}
				a.nodes = append(a.nodes, nd)
			}
			if len(a.nodes) > 0 {
				a.To = a.From - len(a.nodes)
				actions = append(actions, a)
			}
		}
		mu.Unlock()
	}
	stopWatch()
	stopLoad()
	r := <-done
	if r.err != nil && r.r == nil {
		return run, r.err
	}
	run.Timeline = r.r.Timeline
	for _, tp := range run.Timeline {
		run.Windows++
		over := tp.P99Ms > float64(o.SLO.Microseconds())/1000
		if over {
			run.Violating++
		}
		if at := time.Duration(tp.TSec * float64(time.Second)); o.Interference && at >= time.Duration(slowStart)*o.Period && at < time.Duration(slowEnd)*o.Period {
			run.SlowWindows++
			if over {
				run.SlowViolating++
			}
		}
	}
	if run.Windows > 0 {
		run.ViolatingShare = float64(run.Violating) / float64(run.Windows)
	}
	run.Utilization = utilSum / float64(len(day))
	seen := map[string]bool{}
	var errs []float64
	for _, a := range actions {
		if !a.done {
			a.TookS = -1
			for _, nd := range a.nodes {
				a.Node += nd.Name() + " "
			}
		}
		run.Actions = append(run.Actions, a.AutoscaleAction)
		if a.done && seen[a.Kind] {
			errs = append(errs, a.PredictionErrShare)
		}
		seen[a.Kind] = true
	}
	run.MigrationErrMean = mean(errs)
	fmt.Fprintf(o.Log, "    %d of %d windows over the SLO; utilisation %.0f%%; node-seconds %.0f (oracle %.0f)\n", run.Violating, run.Windows,
		100*run.Utilization, run.NodeSeconds, run.OracleNodeSeconds)
	return run, nil
}

// Markdown renders the result.
func (r *AutoscaleResult) Markdown() string {
	o := r.Options
	var b strings.Builder
	surges := fmt.Sprintf("with 2 flash crowds ×%.1f", o.FlashFactor)
	if o.Interference {
		surges = "without flash crowds"
	}
	fmt.Fprintf(&b, "One compressed day (%d periods of %v; load %.0f-%.0f ops/s %s) on region %s of %s (YCSB B at ONE/QUORUM, %d records of %d B; nodes of %.0f service slots/s and %.0f MB/s; BwMan on); the predictor trained on the two days before; SLO: p99 of a 1-s window ≤ %v.\n\n",
		o.Season, o.Period, o.Low, o.High, surges, o.Topology.Regions[0], o.Topology.Name, o.Records, o.RecordBytes, o.NodeCapacityOps, o.NodeBandwidth/1e6, o.SLO)
	b.WriteString("| policy | windows over the SLO | mean utilisation | node-seconds | vs oracle | actions | migration-time prediction error (after the first of each kind) |\n|---|---|---|---|---|---|---|\n")
	for _, x := range r.Runs {
		fmt.Fprintf(&b, "| %s | %d of %d (%.1f%%) | %.0f%% | %.0f | %+.0f%% | %d | %.0f%% |\n", x.Policy, x.Violating, x.Windows, 100*x.ViolatingShare,
			100*x.Utilization, x.NodeSeconds, 100*(x.NodeSeconds/x.OracleNodeSeconds-1), len(x.Actions), 100*x.MigrationErrMean)
	}
	if o.Interference {
		fmt.Fprintf(&b, "\nHubbub-scale: %d nodes slowed ×%v over periods %d-%d.\n\n| controller | windows over the SLO during the slowdown | detection (periods, per slowed node) |\n|---|---|---|\n",
			o.SlowNodes, o.SlowFactors, o.Season/4, 3*o.Season/4)
		for _, x := range r.Runs {
			fmt.Fprintf(&b, "| %s | %d of %d | %v |\n", x.Policy, x.SlowViolating, x.SlowWindows, x.DetectionPeriods)
		}
	}
	for _, x := range r.Runs {
		fmt.Fprintf(&b, "\n%s (capacity calibrated at %.0f ops/s per node):\n\n| at (s) | action | node | nodes | predicted (s) | took (s) |\n|---|---|---|---|---|---|\n", x.Policy, x.CapacityPerNode)
		for _, a := range x.Actions {
			took := fmt.Sprintf("%.1f", a.TookS)
			if a.TookS < 0 {
				took = "unfinished"
			}
			fmt.Fprintf(&b, "| %.0f | %s | %s | %d → %d | %.1f | %s |\n", a.AtS, a.Kind, a.Node, a.From, a.To, a.PredictedS, took)
		}
	}
	return b.String()
}
