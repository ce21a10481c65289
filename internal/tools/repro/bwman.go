package repro

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"meridian/internal/config"
	"meridian/internal/elascass"
	"meridian/internal/metadata"
	"meridian/internal/runtime/node"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// BwManOptions configure `meridian bench bwman` (docs/elasticity.md, "BwMan"): YCSB B at a
// fixed open-loop rate on an emulated cluster whose nodes have a service capacity and a network
// bandwidth, while three migrations run one after another — a node joins (bootstrap), a node
// decommissions, a node dies (re-replication after dead_after) — under each way of shaping the
// system traffic: none, static caps, and BwMan.
type BwManOptions struct {
	Topology *topology.Topology
	// NodesPerRegion at the start (default 2).
	NodesPerRegion int
	// Records of RecordBytes loaded before the run (default 20,000 of 4 KiB: 80 MB per
	// region, half of it on each node).
	Records, RecordBytes int
	// NodeCapacityOps and NodeBandwidth (bytes/s) model each node (defaults 500 and 2 MB/s:
	// slow enough links that the emulated nodes, not the host's cores, limit the moves).
	NodeCapacityOps, NodeBandwidth float64
	// RatePerRegion is the clients' open-loop rate (ops/s per region; default 150: the
	// clients use about a fifth of the links).
	RatePerRegion float64
	// SLO is the p99 latency a 1-s window must hold (default 100ms, bwman.slo_p99's).
	SLO time.Duration
	// StaticCaps are the static caps tried, as shares of NodeBandwidth (default 0.25, 0.5).
	StaticCaps []float64
	// Modes run (default off, static, auto).
	Modes []string
	Seed  uint64
	Log   io.Writer
}

func (o *BwManOptions) defaults() error {
	if o.Topology == nil {
		t, err := topology.Builtin("lan-3")
		if err != nil {
			return err
		}
		o.Topology = t
	}
	if o.NodesPerRegion == 0 {
		o.NodesPerRegion = 2
	}
	if o.Records == 0 {
		o.Records = 20_000
	}
	if o.RecordBytes == 0 {
		o.RecordBytes = 4096
	}
	if o.NodeCapacityOps == 0 {
		o.NodeCapacityOps = 500
	}
	if o.NodeBandwidth == 0 {
		o.NodeBandwidth = 2e6
	}
	if o.RatePerRegion == 0 {
		o.RatePerRegion = 150
	}
	if o.SLO == 0 {
		o.SLO = 100 * time.Millisecond
	}
	if len(o.StaticCaps) == 0 {
		o.StaticCaps = []float64{0.25, 0.5}
	}
	if len(o.Modes) == 0 {
		o.Modes = []string{"off", "static", "auto"}
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// BwManRun is one shaping's result.
type BwManRun struct {
	// Label: "unthrottled", "static 25%", "bwman".
	Label string
	Mode  string
	// CapBytesPerSec is the static cap (static mode).
	CapBytesPerSec float64
	// Windows are the 1-s windows from the first migration's start to the last one's end;
	// Violating those whose p99 broke the SLO.
	Windows, Violating int
	ViolatingShare     float64
	// P99MeanMs and P99SdMs are the mean and standard deviation of the windows' p99.
	P99MeanMs, P99SdMs float64
	// Migration times (s): the join (until the new node holds its share and no move into it
	// is in flight), the decommission (until the node holds nothing), the re-replication
	// (from the node's death until the moves off it are done; dead_after included).
	JoinS, DecommissionS, RereplicateS, TotalS float64
	// ClientBandwidthShare is the clients' share of the node bandwidth before the migrations
	// (user bytes per node per second over NodeBandwidth; measured by BwMan's sensors, so 0
	// in the unthrottled run, where they are off).
	ClientBandwidthShare float64
	// BaselineP99Ms is the mean window p99 before the first migration (seconds 1-5).
	BaselineP99Ms float64
	Timeline      []bench.TimePoint
}

// BwManResult is the experiment.
type BwManResult struct {
	Options BwManOptions `json:"-"`
	Runs    []BwManRun
	// BestStatic is the static cap with the fewest violating windows (ties: the faster).
	BestStatic string
}

// BwManBench runs the experiment.
func BwManBench(ctx context.Context, o BwManOptions) (*BwManResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	res := &BwManResult{Options: o}
	// Every shaping is given the link and the SLO, so that every run moves data in the same
	// chunks (config.BwMan.ChunkSize's default): the runs differ only in the rate control.
	link := fmt.Sprintf("%dB", int64(o.NodeBandwidth))
	for _, mode := range o.Modes {
		switch mode {
		case "off":
			r, err := bwmanRun(ctx, o, config.BwMan{Mode: "off", LinkBandwidth: link, SLOP99: o.SLO}, "unthrottled")
			if err != nil {
				return nil, err
			}
			res.Runs = append(res.Runs, r)
		case "static":
			for _, share := range o.StaticCaps {
				bw := config.BwMan{Mode: "static", StaticRate: fmt.Sprintf("%dB", int64(share*o.NodeBandwidth)), LinkBandwidth: link, SLOP99: o.SLO}
				r, err := bwmanRun(ctx, o, bw, fmt.Sprintf("static %.0f%%", 100*share))
				if err != nil {
					return nil, err
				}
				r.CapBytesPerSec = share * o.NodeBandwidth
				res.Runs = append(res.Runs, r)
			}
		case "auto":
			bw := config.BwMan{Mode: "auto", LinkBandwidth: link, SLOP99: o.SLO}
			r, err := bwmanRun(ctx, o, bw, "bwman")
			if err != nil {
				return nil, err
			}
			res.Runs = append(res.Runs, r)
		default:
			return nil, fmt.Errorf("bench bwman: mode %q: want off, static or auto", mode)
		}
	}
	var best *BwManRun
	for i := range res.Runs {
		r := &res.Runs[i]
		if r.Mode == "static" && (best == nil || r.Violating < best.Violating || (r.Violating == best.Violating && r.TotalS < best.TotalS)) {
			best = r
		}
	}
	if best != nil {
		res.BestStatic = best.Label
	}
	return res, nil
}

// bwmanRun is one shaping: a fresh cluster, the data, the load, the three migrations.
func bwmanRun(ctx context.Context, o BwManOptions, bw config.BwMan, label string) (BwManRun, error) {
	run := BwManRun{Label: label, Mode: bw.Mode}
	fmt.Fprintf(o.Log, "  %s\n", label)
	on := true
	c, err := bench.StartCluster(bench.ClusterOptions{
		Topology: o.Topology, NodesPerRegion: o.NodesPerRegion, Seed: o.Seed,
		Keyspace: config.Keyspace{Name: "bench", Protocol: config.ProtocolQuorum, ReplicasPerRegion: 1, Partitions: 16,
			SplitPoints: ycsb.SplitPoints(16), Options: map[string]string{"read_level": "QUORUM", "write_level": "QUORUM",
				"split_ops": "0", "split_bytes": "1GiB", "merge_bytes": "1MiB", "min_partitions": "16"}},
		NodeCapacityOps: o.NodeCapacityOps, NodeBandwidth: o.NodeBandwidth,
		Elasticity: &config.Elasticity{Driver: &on, Strategy: string(elascass.TwoPhase), Interval: 250 * time.Millisecond,
			MaxMovesPerNode: 4, MaxMoves: 64, DeadAfter: 2 * time.Second, TargetByteImbalance: -1, TargetLoadImbalance: -1},
		BwMan:  &bw,
		Logger: benchLogger(),
		// The first node of each region votes in the metadata group: the others may leave
		// (a voter cannot be decommissioned).
		MetadataVoters: firstNodes(o.Topology),
	})
	if err != nil {
		return run, err
	}
	defer c.Close()
	if err := LoadDirect(c, o.Records, o.RecordBytes, o.Seed); err != nil {
		return run, err
	}
	w := ycsbB(o.Records, o.RecordBytes)
	cfg := bench.Config{Protocol: config.ProtocolQuorum, ReadLevel: "QUORUM", WriteLevel: "QUORUM"}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	start := time.Now()
	type result struct {
		r   *bench.Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := bench.Execute(lctx, bench.ReplicaAwareSessionOf(c, cfg), o.Topology.Regions, cfg, bench.RunOptions{Workload: w, SkipLoad: true,
			RatePerRegion: o.RatePerRegion, ClientsPerRegion: 64, Duration: time.Hour, Seed: o.Seed})
		done <- result{r, err}
	}()
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	// Before the migrations: the clients' bandwidth.
	user0 := userBytes(c)
	if err := sleep(5 * time.Second); err != nil {
		return run, err
	}
	run.ClientBandwidthShare = float64(userBytes(c)-user0) / 5 / float64(len(c.Nodes)) / o.NodeBandwidth
	migStart := time.Since(start)
	watcher := c.Nodes[0]
	// 1. A node joins the first region.
	t0 := time.Now()
	nn, err := c.Join(ctx, o.Topology.Regions[0])
	if err != nil {
		return run, err
	}
	if err := waitMoves(ctx, watcher, func(st node.Status) bool {
		return stateOf(watcher, nn.ID()) == metadata.NodeActive && holdsShare(st, nn.Name())
	}); err != nil {
		return run, fmt.Errorf("%s: join: %w", label, err)
	}
	run.JoinS = time.Since(t0).Seconds()
	fmt.Fprintf(o.Log, "    join %.1fs\n", run.JoinS)
	if err := sleep(2 * time.Second); err != nil {
		return run, err
	}
	// 2. A node of the second region decommissions.
	leaving := nodeIn(c, o.Topology.Regions[1%len(o.Topology.Regions)], 1)
	t0 = time.Now()
	if _, _, err := watcher.SetNodeState(ctx, leaving, metadata.NodeDecommissioning, 20*time.Second); err != nil {
		return run, fmt.Errorf("%s: decommission %s: %w", label, leaving, err)
	}
	if err := waitMoves(ctx, watcher, func(st node.Status) bool { return heldByName(st, leaving) == 0 }); err != nil {
		return run, fmt.Errorf("%s: decommission: %w", label, err)
	}
	run.DecommissionS = time.Since(t0).Seconds()
	fmt.Fprintf(o.Log, "    decommission %.1fs\n", run.DecommissionS)
	if err := sleep(2 * time.Second); err != nil {
		return run, err
	}
	// 3. A node of the third region dies: its replicas are re-created after dead_after.
	dying := c.NodeIn(o.Topology.Regions[2%len(o.Topology.Regions)], 1)
	dyingName := dying.Name()
	t0 = time.Now()
	c.Remove(dying)
	if err := waitMoves(ctx, watcher, func(st node.Status) bool { return heldByName(st, dyingName) == 0 }); err != nil {
		return run, fmt.Errorf("%s: re-replication: %w", label, err)
	}
	run.RereplicateS = time.Since(t0).Seconds()
	fmt.Fprintf(o.Log, "    re-replication %.1fs\n", run.RereplicateS)
	migEnd := time.Since(start)
	run.TotalS = run.JoinS + run.DecommissionS + run.RereplicateS
	if err := sleep(2 * time.Second); err != nil {
		return run, err
	}
	stopLoad()
	r := <-done
	if r.err != nil && r.r == nil {
		return run, r.err
	}
	runEnd := time.Since(start).Seconds()
	for _, tp := range r.r.Timeline {
		if tp.TSec <= runEnd {
			run.Timeline = append(run.Timeline, tp) // the run's seconds, not the hour it was given
		}
	}
	var p99s, base []float64
	for _, tp := range run.Timeline {
		at := time.Duration(tp.TSec * float64(time.Second))
		if at >= time.Second && at < migStart {
			base = append(base, tp.P99Ms)
		}
		if at < migStart || at > migEnd+time.Second {
			continue
		}
		run.Windows++
		p99s = append(p99s, tp.P99Ms)
		if tp.P99Ms > float64(o.SLO.Microseconds())/1000 {
			run.Violating++
		}
	}
	run.BaselineP99Ms = mean(base)
	if run.Windows > 0 {
		run.ViolatingShare = float64(run.Violating) / float64(run.Windows)
		run.P99MeanMs = mean(p99s)
		ss := 0.0
		for _, v := range p99s {
			ss += (v - run.P99MeanMs) * (v - run.P99MeanMs)
		}
		run.P99SdMs = math.Sqrt(ss / float64(len(p99s)))
	}
	fmt.Fprintf(o.Log, "    %d of %d windows over the SLO, window p99 %.1f ± %.1f ms\n", run.Violating, run.Windows, run.P99MeanMs, run.P99SdMs)
	return run, nil
}

// waitMoves polls the cluster status until done holds and no move is in flight (at most 10
// minutes).
func waitMoves(ctx context.Context, watcher *node.Node, done func(node.Status) bool) error {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		st := watcher.ClusterStatus()
		if len(st.Moves) == 0 && done(st) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not done within 10 minutes")
}

// holdsShare reports whether node holds at least its region's even share of replicas.
func holdsShare(st node.Status, node string) bool {
	region, held, total, members := "", 0, 0, 0
	for _, m := range st.Nodes {
		if m.Name == node {
			region, held = m.Region, m.Replicas
		}
	}
	for _, m := range st.Nodes {
		if m.Region == region && m.State == metadata.NodeActive {
			members++
			total += m.Replicas
		}
	}
	return members > 0 && held > 0 && held >= total/members
}

func heldByName(st node.Status, node string) int {
	for _, m := range st.Nodes {
		if m.Name == node {
			return m.Replicas
		}
	}
	return 0
}

// firstNodes names the first node of each region (bench.StartCluster's names).
func firstNodes(t *topology.Topology) []string {
	var out []string
	for _, r := range t.Regions {
		out = append(out, r+"-1")
	}
	return out
}

func nodeIn(c *bench.Cluster, region string, i int) string { return c.NodeIn(region, i).Name() }

// userBytes is what the cluster's nodes sent in the user class so far.
func userBytes(c *bench.Cluster) int64 {
	var n int64
	for _, nd := range c.Nodes {
		n += nd.UserBytesSent()
	}
	return n
}

// Markdown renders the result.
func (r *BwManResult) Markdown() string {
	o := r.Options
	var b strings.Builder
	fmt.Fprintf(&b, "YCSB B (95%% reads, uniform, %d records of %d B, QUORUM/QUORUM) at %.0f ops/s per region, open loop, on %s with %d nodes per region of %.0f ops/s and %.0f MB/s each; a join, a decommission and a death (re-replication after 2 s) one after another; SLO: p99 of a 1-s window ≤ %v.\n\n",
		o.Records, o.RecordBytes, o.RatePerRegion, o.Topology.Name, o.NodesPerRegion, o.NodeCapacityOps, o.NodeBandwidth/1e6, o.SLO)
	b.WriteString("| shaping | windows over the SLO | window p99 mean ± sd (ms) | p99 before (ms) | join (s) | decommission (s) | re-replication (s) | total (s) | clients' share of the link |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Runs {
		share := "—"
		if x.ClientBandwidthShare > 0 {
			share = fmt.Sprintf("%.0f%%", 100*x.ClientBandwidthShare)
		}
		fmt.Fprintf(&b, "| %s | %d of %d (%.0f%%) | %.1f ± %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n", x.Label, x.Violating, x.Windows, 100*x.ViolatingShare,
			x.P99MeanMs, x.P99SdMs, x.BaselineP99Ms, x.JoinS, x.DecommissionS, x.RereplicateS, x.TotalS, share)
	}
	if r.BestStatic != "" {
		fmt.Fprintf(&b, "\nBest static cap: %s.\n", r.BestStatic)
	}
	return b.String()
}
