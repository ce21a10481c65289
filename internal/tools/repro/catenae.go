package repro

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"meridian/internal/tools/catsim"
	"meridian/internal/tools/chart"
	"meridian/internal/tools/txnsim"
	"meridian/internal/topology"
)

// CatenaeOptions configure `meridian bench catenae`: Catenae (catsim) against sdur and 2pc
// (txnsim, deployment WAN 2: a replica of every partition in every region, the nearest to
// Catenae's full replication) on the same topologies and workloads, in one run.
type CatenaeOptions struct {
	Topologies       []string
	Workloads        []string // micro, tpcc
	Duration, Warmup time.Duration
	ClientsPerRegion int
	// GlobalPct: the micro workload's share of global transactions for sdur and 2pc (Catenae
	// has no partitions: every transaction is the same to it).
	GlobalPct float64
	Seed      uint64
	// OutDir, when set, receives the charts: the epoch messages' bandwidth per data center
	// against load, and TPC-C commit p50 against throughput for each mode (the first
	// topology), swept over LoadSweep clients per region.
	OutDir    string
	LoadSweep []int
}

func (o CatenaeOptions) withDefaults() CatenaeOptions {
	if len(o.Topologies) == 0 {
		o.Topologies = []string{"gcp-meteorshower-3", "ec2-sdur-3"}
	}
	if len(o.Workloads) == 0 {
		o.Workloads = []string{"tpcc", "micro"}
	}
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	if o.Warmup <= 0 {
		o.Warmup = 3 * time.Second
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 16
	}
	if o.GlobalPct == 0 {
		o.GlobalPct = 10
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if len(o.LoadSweep) == 0 {
		o.LoadSweep = []int{1, 2, 4, 8, 16, 32}
	}
	return o
}

// CatenaeRow is one mode's result on one topology and workload, in one region (or "all").
type CatenaeRow struct {
	Topology, Workload, Mode, Region string
	P50Ms, P99Ms, ThroughputTPS      float64
	AbortRate                        float64
	// Catenae only: the share of commits on the fast path (validated reads: half a round
	// trip), the epoch messages' bytes per data center per second, and the worst cascade
	// of speculative re-executions one arrival caused.
	FastShare       float64
	BytesPerNodeSec float64
	MaxCascade      int
	// RollbacksPerTxn: speculative re-executions per committed transaction (Catenae).
	RollbacksPerTxn float64
}

// CatenaeResult is the whole run.
type CatenaeResult struct {
	Options CatenaeOptions
	Rows    []CatenaeRow
	// IdleBytesPerNodeSec: Catenae's epoch messages at idle, per topology.
	IdleBytesPerNodeSec map[string]float64
	// RTTMs: per topology, the round trip from each region to the farthest other (what a
	// commit of Catenae waits for at most: every data center's epoch message).
	RTTMs map[string]map[string]float64
	// Charts written (OutDir).
	Charts []string
}

// CatenaeBench runs the comparison.
func CatenaeBench(ctx context.Context, o CatenaeOptions) (*CatenaeResult, error) {
	o = o.withDefaults()
	res := &CatenaeResult{Options: o, IdleBytesPerNodeSec: map[string]float64{}, RTTMs: map[string]map[string]float64{}}
	for _, topo := range o.Topologies {
		t, err := topology.Builtin(topo)
		if err != nil {
			return nil, err
		}
		res.RTTMs[topo] = map[string]float64{}
		for _, a := range t.Regions {
			far := 0.0
			for _, b := range t.Regions {
				if ms, err := t.RTTMs(a, b); err == nil && ms > far {
					far = ms
				}
			}
			res.RTTMs[topo][a] = far
		}
		idle, err := catsim.Run(catsim.Options{Seed: o.Seed, Topology: topo, Workload: catsim.Micro, Idle: true, Duration: 5 * time.Second, Warmup: time.Second})
		if err != nil {
			return nil, err
		}
		res.IdleBytesPerNodeSec[topo] = idle.BytesPerNodeSec
		// The bound on cascades under skew: the microbenchmark's items drawn Zipfian (0.99),
		// Catenae only (the other modes' simulator has no skewed workload).
		skewed, err := catenaeRows(o, topo, "micro-zipf")
		if err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, skewed...)
		for _, w := range o.Workloads {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rows, err := catenaeRows(o, topo, w)
			if err != nil {
				return nil, err
			}
			res.Rows = append(res.Rows, rows...)
			for _, mode := range []string{"sdur", "2pc"} {
				rows, err := txnRows(o, topo, w, mode)
				if err != nil {
					return nil, err
				}
				res.Rows = append(res.Rows, rows...)
			}
		}
	}
	if o.OutDir != "" {
		if err := res.charts(o); err != nil {
			return res, err
		}
	}
	return res, nil
}

// charts sweeps the load and draws the bandwidth and latency-throughput charts.
func (r *CatenaeResult) charts(o CatenaeOptions) error {
	var bw []chart.Series
	for _, topo := range o.Topologies {
		s := chart.Series{Name: "catenae, " + topo + " (TPC-C)"}
		s.Points = append(s.Points, [2]float64{0, r.IdleBytesPerNodeSec[topo] / 1000})
		for _, c := range o.LoadSweep {
			run, err := catsim.Run(catsim.Options{Seed: o.Seed, Topology: topo, Workload: catsim.TPCC, ClientsPerRegion: c, Duration: o.Duration / 2, Warmup: o.Warmup})
			if err != nil {
				return err
			}
			s.Points = append(s.Points, [2]float64{run.ThroughputTPS, run.BytesPerNodeSec / 1000})
		}
		bw = append(bw, s)
	}
	path := filepath.Join(o.OutDir, "catenae-bandwidth.png")
	if err := chart.Lines("Catenae: epoch messages per data center (10 ms epochs, redundancy 3, simulated)", "committed transactions per second (all regions)", "sent per data center (KB/s)", bw, path); err != nil {
		return err
	}
	r.Charts = append(r.Charts, path)
	topo := o.Topologies[0]
	var lat []chart.Series
	for _, mode := range []string{"catenae", "sdur", "2pc"} {
		s := chart.Series{Name: mode}
		for _, c := range o.LoadSweep {
			oo := o
			oo.ClientsPerRegion, oo.Duration = c, o.Duration/2
			var rows []CatenaeRow
			var err error
			if mode == "catenae" {
				rows, err = catenaeRows(oo, topo, "tpcc")
			} else {
				rows, err = txnRows(oo, topo, "tpcc", mode)
			}
			if err != nil {
				return err
			}
			for _, row := range rows {
				if row.Region == "all" {
					s.Points = append(s.Points, [2]float64{row.ThroughputTPS, row.P50Ms})
				}
			}
		}
		lat = append(lat, s)
	}
	path = filepath.Join(o.OutDir, "catenae-tpcc-latency.png")
	if err := chart.Lines("TPC-C-like: commit p50 against throughput ("+topo+", simulated)", "committed transactions per second (all regions)", "commit p50 (ms)", lat, path); err != nil {
		return err
	}
	r.Charts = append(r.Charts, path)
	return nil
}

func catenaeRows(o CatenaeOptions, topo, w string) ([]CatenaeRow, error) {
	co := catsim.Options{Seed: o.Seed, Topology: topo, Workload: catsim.Workload(w), ClientsPerRegion: o.ClientsPerRegion, Duration: o.Duration, Warmup: o.Warmup}
	if w == "micro-zipf" {
		co.Workload, co.Zipf, co.Items = catsim.Micro, 0.99, 10_000
	}
	r, err := catsim.Run(co)
	if err != nil {
		return nil, fmt.Errorf("catenae on %s, %s: %w", topo, w, err)
	}
	cascade, rollbacks := 0, 0
	for _, st := range r.Stats {
		cascade = max(cascade, st.MaxCascade)
		rollbacks += st.Rollbacks
	}
	fast := 0.0
	if r.Committed > 0 {
		fast = float64(r.Fast) / float64(r.Committed)
	}
	row := func(region string, p50, p99 float64, tps float64) CatenaeRow {
		return CatenaeRow{Topology: topo, Workload: w, Mode: "catenae", Region: region, P50Ms: p50, P99Ms: p99, ThroughputTPS: tps,
			FastShare: fast, BytesPerNodeSec: r.BytesPerNodeSec, MaxCascade: cascade, RollbacksPerTxn: float64(rollbacks) / float64(max(r.Committed, 1))}
	}
	var rows []CatenaeRow
	for _, region := range r.Regions {
		h := r.Latency[region]
		rows = append(rows, row(region, float64(h.ValueAtQuantile(50))/1000, float64(h.ValueAtQuantile(99))/1000, float64(h.TotalCount())/o.Duration.Seconds()))
	}
	rows = append(rows, row("all", float64(r.All.ValueAtQuantile(50))/1000, float64(r.All.ValueAtQuantile(99))/1000, r.ThroughputTPS))
	return rows, nil
}

func txnRows(o CatenaeOptions, topo, w, mode string) ([]CatenaeRow, error) {
	r, err := txnsim.Run(txnsim.Options{Mode: mode, Seed: o.Seed, Topology: topo, Deployment: txnsim.WAN2, Workload: txnsim.Workload(w),
		GlobalPct: o.GlobalPct, ClientsPerRegion: o.ClientsPerRegion, Duration: o.Duration, Warmup: o.Warmup})
	if err != nil {
		return nil, fmt.Errorf("%s on %s, %s: %w", mode, topo, w, err)
	}
	// Every class together, per region: a commit is a commit (local or global, new-order or
	// payment); the abort rate over all of them.
	type agg struct {
		commits, aborts int
		p50w, p99w      float64
	}
	by := map[string]*agg{}
	for _, c := range r.Stats.Summary() {
		a := by[c.Region]
		if a == nil {
			a = &agg{}
			by[c.Region] = a
		}
		a.commits += c.Commits
		a.aborts += c.Aborts
		a.p50w += c.P50Ms * float64(c.Commits)
		a.p99w = max(a.p99w, c.P99Ms)
	}
	var rows []CatenaeRow
	for _, region := range slices.Sorted(maps.Keys(by)) {
		a := by[region]
		row := CatenaeRow{Topology: topo, Workload: w, Mode: mode, Region: region, ThroughputTPS: float64(a.commits) / o.Duration.Seconds(), P99Ms: a.p99w}
		if a.commits > 0 {
			row.P50Ms = a.p50w / float64(a.commits) // commit-weighted p50 of the classes
		}
		if n := a.commits + a.aborts; n > 0 {
			row.AbortRate = float64(a.aborts) / float64(n)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// Markdown renders the comparison and the claims.
func (r *CatenaeResult) Markdown() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "Catenae (catsim: one data center per region, full replication, %d closed-loop clients per region) against sdur and 2pc (txnsim, WAN 2: a replica of each of 2 partitions in every region, %d clients next to each partition's home); %v measured after %v, seed %d. sdur/2pc micro: %.0f%% globals.\n\n",
		o.ClientsPerRegion, o.ClientsPerRegion, o.Duration, o.Warmup, o.Seed, o.GlobalPct)
	fmt.Fprintf(&b, "| topology | workload | mode | region | commit p50 (ms) | commit p99 (ms) | tps | aborts | fast path | epoch bytes/s per DC | max cascade | re-executions per txn |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		extra := "— | — | — | —"
		if row.Mode == "catenae" {
			extra = fmt.Sprintf("%.0f%% | %.0f | %d | %.2f", 100*row.FastShare, row.BytesPerNodeSec, row.MaxCascade, row.RollbacksPerTxn)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %.1f | %.0f | %.1f%% | %s |\n", row.Topology, row.Workload, row.Mode, row.Region, row.P50Ms, row.P99Ms, row.ThroughputTPS, 100*row.AbortRate, extra)
	}
	b.WriteString("\nClaims (all regions):\n\n")
	for _, topo := range o.Topologies {
		fmt.Fprintf(&b, "- %s: epoch messages at idle %.0f B/s per data center.", topo, r.IdleBytesPerNodeSec[topo])
		for _, w := range o.Workloads {
			c, t2 := r.find(topo, w, "catenae", "all"), r.find(topo, w, "2pc", "all")
			if c == nil || t2 == nil {
				continue
			}
			fmt.Fprintf(&b, " %s: catenae %.0f tps vs 2pc %.0f (%.2f×), p50 %.1f vs %.1f ms (%+.0f%%);", w, c.ThroughputTPS, t2.ThroughputTPS,
				c.ThroughputTPS/max(t2.ThroughputTPS, 1e-9), c.P50Ms, t2.P50Ms, 100*(c.P50Ms/max(t2.P50Ms, 1e-9)-1))
		}
		b.WriteString(" RTT to the farthest region:")
		for _, region := range slices.Sorted(maps.Keys(r.RTTMs[topo])) {
			fmt.Fprintf(&b, " %s %.0f ms", region, r.RTTMs[topo][region])
		}
		b.WriteString(".\n")
	}
	return b.String()
}

func (r *CatenaeResult) find(topo, w, mode, region string) *CatenaeRow {
	for i := range r.Rows {
		x := &r.Rows[i]
		if x.Topology == topo && x.Workload == w && x.Mode == mode && x.Region == region {
			return x
		}
	}
	return nil
}
