package repro

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"meridian/internal/autoscale"
	"meridian/internal/metadata"
	"meridian/internal/runtime/node"
	"meridian/internal/tools/bench"
)

// AutoscaleRepeatOptions configure `meridian bench autoscale --emulated --repeat N`: the same
// scaling action, again and again, at one constant load, on the emulated cluster of the
// autoscaling experiment. The spread of identical actions bounds how well any migration model
// can predict them (docs/elasticity.md).
type AutoscaleRepeatOptions struct {
	AutoscaleOptions
	// Repeats of the pair join (Nodes → Nodes+1) and decommission (back to Nodes).
	Repeats int
	// Nodes of the scaled region before each join (default 3); LoadOps the clients' constant
	// load on it (default half the region's capacity).
	Nodes   int
	LoadOps float64
}

// AutoscaleRepeatKind is one kind of action over the repeats.
type AutoscaleRepeatKind struct {
	Kind     string
	From, To int
	TookS    []float64
	// MeanS, SdS and CV (sd over mean) of the times; MADShare the mean absolute deviation
	// from the median over the median: the least mean relative error a model that predicts one
	// time for the action can have.
	MeanS, SdS, CV, MinS, MaxS, MADShare float64
	// PredictedS is what the controller's migration model predicted before each repeat,
	// calibrated on the ones before it (0 for the first); ModelErrMean its mean relative error
	// after the first.
	PredictedS   []float64
	ModelErrMean float64
}

// AutoscaleRepeatResult is the experiment.
type AutoscaleRepeatResult struct {
	Options AutoscaleRepeatOptions `json:"-"`
	Kinds   []AutoscaleRepeatKind
}

// AutoscaleRepeat runs the experiment.
func AutoscaleRepeat(ctx context.Context, o AutoscaleRepeatOptions) (*AutoscaleRepeatResult, error) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	o.StartNodes = o.Nodes
	if o.MaxNodes < o.Nodes+1 {
		o.MaxNodes = o.Nodes + 1
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.Repeats < 2 || o.Repeats > 50 {
		return nil, fmt.Errorf("bench autoscale --repeat %d: want 2..50", o.Repeats)
	}
	if o.LoadOps == 0 {
		o.LoadOps = 0.5 * float64(o.Nodes) * o.NodeCapacityOps
	}
	if !(o.LoadOps > 0) {
		return nil, fmt.Errorf("bench autoscale --repeat-load %v: must be positive", o.LoadOps)
	}
	region := o.Topology.Regions[0]
	c, err := startAutoscaleCluster(o.AutoscaleOptions, false)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	watcher := c.Nodes[0]
	data := 0.0
	for _, ns := range watcher.ClusterStatus().Nodes {
		if ns.Region == region {
			data += float64(ns.Bytes)
		}
	}
	ctrl, err := autoscale.New(autoscale.Options{Period: o.Period, Season: o.Season, CapacityPerNode: o.NodeCapacityOps,
		MinNodes: 1, MaxNodes: o.MaxNodes,
		Model: autoscale.MigrationModel{DataBytes: data, RateBytesPerSec: o.NodeBandwidth * 0.8, Overhead: 2 * time.Second,
			Partitions: 24, MaxMovesPerNode: 4, PerMove: 750 * time.Millisecond, UserBytesPerOp: float64(o.RecordBytes)}})
	if err != nil {
		return nil, err
	}
	// The clients: a constant load for as long as the repeats take (bounded: 4 minutes per
	// repeat at most).
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	cfg := bench.Config{Protocol: "quorum", ReadLevel: "ONE", WriteLevel: "QUORUM"}
	done := make(chan error, 1)
	go func() {
		_, err := bench.Execute(lctx, bench.ReplicaAwareSessionOf(c, cfg), []string{region}, cfg, bench.RunOptions{Workload: ycsbB(o.Records, o.RecordBytes),
			SkipLoad: true, RatePerRegion: o.LoadOps, ClientsPerRegion: 128, Duration: time.Duration(o.Repeats) * 4 * time.Minute, Seed: o.Seed})
		done <- err
	}()
	join := AutoscaleRepeatKind{Kind: "join", From: o.Nodes, To: o.Nodes + 1}
	leave := AutoscaleRepeatKind{Kind: "decommission", From: o.Nodes + 1, To: o.Nodes}
	// wait polls the cluster status every 100 ms until ok, for at most 3 minutes.
	wait := func(ok func(st node.Status) bool) (time.Duration, error) {
		start := time.Now()
		for {
			if ok(watcher.ClusterStatus()) {
				return time.Since(start), nil
			}
			if time.Since(start) > 3*time.Minute {
				return 0, fmt.Errorf("an action did not finish in 3 minutes")
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	settle := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Second):
			return nil
		}
	}
	if err := settle(); err != nil {
		return nil, err
	}
	rates := func() string {
		var parts []string
		for _, nd := range c.Nodes {
			if nd.Region() == region {
				parts = append(parts, fmt.Sprintf("%s %.2f", nd.Name(), nd.SystemRate()/1e6))
			}
		}
		return strings.Join(parts, ", ")
	}
	for i := range o.Repeats {
		fmt.Fprintf(o.Log, "    BwMan system rates (MB/s): %s\n", rates())
		join.PredictedS = append(join.PredictedS, ctrl.Model().DurationAt(join.From, join.To, o.LoadOps).Seconds())
		start := time.Now()
		nd, err := c.Join(ctx, region)
		if err != nil {
			return nil, fmt.Errorf("repeat %d: join: %w", i+1, err)
		}
		if _, err := wait(func(st node.Status) bool {
			return len(st.Moves) == 0 && stateOf(watcher, nd.ID()) == metadata.NodeActive && holdsShare(st, nd.Name())
		}); err != nil {
			return nil, fmt.Errorf("repeat %d: join: %w", i+1, err)
		}
		took := time.Since(start)
		join.TookS = append(join.TookS, took.Seconds())
		ctrl.ObserveMigration(join.From, join.To, took, o.LoadOps)
		fmt.Fprintf(o.Log, "    repeat %d: join %s %d → %d took %.1fs (predicted %.1fs)\n", i+1, nd.Name(), join.From, join.To, took.Seconds(), join.PredictedS[i])
		if err := settle(); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "    BwMan system rates (MB/s): %s\n", rates())
		leave.PredictedS = append(leave.PredictedS, ctrl.Model().DurationAt(leave.From, leave.To, o.LoadOps).Seconds())
		start = time.Now()
		if _, _, err := watcher.SetNodeState(ctx, nd.Name(), metadata.NodeDecommissioning, 20*time.Second); err != nil {
			return nil, fmt.Errorf("repeat %d: decommission %s: %w", i+1, nd.Name(), err)
		}
		if _, err := wait(func(st node.Status) bool { return len(st.Moves) == 0 && heldByName(st, nd.Name()) == 0 }); err != nil {
			return nil, fmt.Errorf("repeat %d: decommission: %w", i+1, err)
		}
		took = time.Since(start)
		leave.TookS = append(leave.TookS, took.Seconds())
		ctrl.ObserveMigration(leave.From, leave.To, took, o.LoadOps)
		fmt.Fprintf(o.Log, "    repeat %d: decommission %s %d → %d took %.1fs (predicted %.1fs)\n", i+1, nd.Name(), leave.From, leave.To, took.Seconds(), leave.PredictedS[i])
		c.Remove(nd)
		if err := settle(); err != nil {
			return nil, err
		}
	}
	stopLoad()
	if err := <-done; err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "context canceled") {
		return nil, fmt.Errorf("the clients: %w", err)
	}
	res := &AutoscaleRepeatResult{Options: o}
	for _, k := range []*AutoscaleRepeatKind{&join, &leave} {
		k.summarise()
		res.Kinds = append(res.Kinds, *k)
	}
	return res, nil
}

// summarise computes the spread of the times and the model's error.
func (k *AutoscaleRepeatKind) summarise() {
	n := float64(len(k.TookS))
	if n == 0 {
		return
	}
	k.MinS, k.MaxS = math.Inf(1), math.Inf(-1)
	for _, t := range k.TookS {
		k.MeanS += t / n
		k.MinS, k.MaxS = min(k.MinS, t), max(k.MaxS, t)
	}
	for _, t := range k.TookS {
		k.SdS += (t - k.MeanS) * (t - k.MeanS) / n
	}
	k.SdS = math.Sqrt(k.SdS)
	k.CV = k.SdS / k.MeanS
	med := median(k.TookS)
	for _, t := range k.TookS {
		k.MADShare += math.Abs(t-med) / med / n
	}
	var errs []float64
	for i := 1; i < len(k.TookS) && i < len(k.PredictedS); i++ {
		errs = append(errs, math.Abs(k.PredictedS[i]-k.TookS[i])/k.TookS[i])
	}
	k.ModelErrMean = mean(errs)
}

// Markdown renders the result.
func (r *AutoscaleRepeatResult) Markdown() string {
	o := r.Options
	var b strings.Builder
	fmt.Fprintf(&b, "The same action %d times on region %s of %s at a constant %.0f ops/s (YCSB B at ONE/QUORUM, %d records of %d B; nodes of %.0f service slots/s and %.0f MB/s; BwMan on; placement driver every 250 ms, 4 moves per node).\n\n",
		o.Repeats, o.Topology.Regions[0], o.Topology.Name, o.LoadOps, o.Records, o.RecordBytes, o.NodeCapacityOps, o.NodeBandwidth/1e6)
	b.WriteString("| action | times (s) | mean ± sd (s) | CV | min–max (s) | mean deviation from the median | migration model's mean error (after the first) |\n|---|---|---|---|---|---|---|\n")
	for _, k := range r.Kinds {
		var ts []string
		for _, t := range k.TookS {
			ts = append(ts, fmt.Sprintf("%.1f", t))
		}
		fmt.Fprintf(&b, "| %s %d → %d | %s | %.1f ± %.1f | %.0f%% | %.1f–%.1f | %.0f%% | %.0f%% |\n", k.Kind, k.From, k.To, strings.Join(ts, ", "),
			k.MeanS, k.SdS, 100*k.CV, k.MinS, k.MaxS, 100*k.MADShare, 100*k.ModelErrMean)
	}
	return b.String()
}

// median of v (v is not changed).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
