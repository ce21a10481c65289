package repro

import (
	"context"
	"encoding/json"
	"math"
	"meridian/internal/tools/bench"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// linOp is an bench.OpStats uniform on [lo, hi] ms (percentiles 0, 50, 100).
func linOp(count int64, lo, hi float64) bench.OpStats {
	return bench.OpStats{Count: count, MeanMs: (lo + hi) / 2, P50Ms: (lo + hi) / 2, P99Ms: lo + 0.99*(hi-lo),
		Percentiles: [][2]float64{{0, lo}, {50, (lo + hi) / 2}, {100, hi}}}
}

func TestShareAbove(t *testing.T) {
	cases := []struct {
		name  string
		stats []bench.OpStats
		thr   float64
		want  float64
	}{
		{"none", nil, 300, 0},
		{"empty stats", []bench.OpStats{{}}, 300, 0},
		{"uniform 100..400", []bench.OpStats{linOp(10, 100, 400)}, 300, 1.0 / 3},
		{"all below", []bench.OpStats{linOp(10, 1, 2)}, 300, 0},
		{"all above", []bench.OpStats{linOp(10, 400, 500)}, 300, 1},
		{"at the max", []bench.OpStats{linOp(10, 100, 300)}, 300, 0},
		// Weighted by count: 90 local reads, 10 writes between 200 and 600 ms (3/4 above).
		{"weighted", []bench.OpStats{linOp(90, 0.5, 2), linOp(10, 200, 600)}, 300, 0.1 * 0.75},
		// Uneven percentile spacing: 90 % below 10 ms, the last 10 % between 10 and 510 ms.
		{"tail", []bench.OpStats{{Count: 100, Percentiles: [][2]float64{{0, 1}, {90, 10}, {100, 510}}}}, 260, 0.05},
		// Without percentiles: p50/p99/p99.9 points.
		{"fallback", []bench.OpStats{{Count: 100, P50Ms: 100, P99Ms: 500, P999Ms: 600}}, 300, 1 - (0.5 + 0.49*0.5)},
	}
	for _, c := range cases {
		if got := ShareAbove(c.stats, c.thr); !near(got, c.want) {
			t.Errorf("%s: ShareAbove = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCombinedCDF(t *testing.T) {
	run := &bench.Run{Regions: map[string]bench.RegionStats{
		"a": {Read: linOp(300, 0, 10), Write: linOp(100, 100, 200)},
		"b": {Read: linOp(0, 0, 0)}, // no requests: ignored
	}}
	pts := CombinedCDF(run)
	want := [][2]float64{{0, 0}, {5, 0.375}, {10, 0.75}, {100, 0.75}, {150, 0.875}, {200, 1}}
	if len(pts) != len(want) {
		t.Fatalf("CombinedCDF = %v, want %v", pts, want)
	}
	for i := range want {
		if !near(pts[i][0], want[i][0]) || !near(pts[i][1], want[i][1]) {
			t.Fatalf("CombinedCDF = %v, want %v", pts, want)
		}
	}
	if CombinedCDF(&bench.Run{}) != nil || CombinedCDF(nil) != nil {
		t.Error("CombinedCDF of no requests is not nil")
	}
	// Consistent with ShareAbove and the quantiles.
	if got, want := 1-cdfAt(pts, 175), ShareAbove(RunOpStats(run), 175); !near(got, want) {
		t.Errorf("1 - CDF(175) = %v, ShareAbove = %v", got, want)
	}
	if q := cdfQuantile(pts, 0.875); !near(q, 150) {
		t.Errorf("quantile 0.875 = %v, want 150", q)
	}
	if q := cdfQuantile(pts, 0.5); !near(q, 20.0/3) {
		t.Errorf("quantile 0.5 = %v, want 6.67", q)
	}
}

// synthGLReport is a report at one read share with a GlobLease run (fast reads, some slow
// writes) and a Cassandra ONE/ALL run (fast reads, all writes slow), over 40 s.
func synthGLReport(share float64, lease bool) *bench.Report {
	regions := []string{"california", "virginia", "ireland", "tokyo"}
	rep := &bench.Report{Topology: "ec2-globlease-4", Regions: regions}
	reads := int64(math.Round(share * 10000)) // per region over 40 s: 250 ops/s
	writes := 10000 - reads
	gl := bench.Run{Protocol: "globlease", Options: map[string]string{"lease": "1m0s"}, Regions: map[string]bench.RegionStats{},
		ProtocolCounters: map[string]int64{"reads_master": reads, "reads_lease": 2 * reads, "reads_forwarded": reads,
			"lease_renewals": reads / 10, "lease_updates": writes * 2}}
	cas := bench.Run{Protocol: "quorum", ReadLevel: "ONE", WriteLevel: "ALL", Regions: map[string]bench.RegionStats{}}
	for _, r := range regions {
		gl.Regions[r] = bench.RegionStats{Read: linOp(reads, 0.2, 250), Write: linOp(writes, 0.5, 500)}
		cas.Regions[r] = bench.RegionStats{Read: linOp(reads, 0.2, 1), Write: linOp(writes, 400, 600)}
	}
	rep.Runs = []bench.Run{gl}
	if !lease {
		rep.Runs = append(rep.Runs, cas)
	}
	return rep
}

func synthGLResults() *GlobLeaseFigResults {
	r := &GlobLeaseFigResults{Topology: "ec2-globlease-4", Regions: []string{"california", "virginia", "ireland", "tokyo"},
		Records: 10000, ValueBytes: 10240, RatePerSecond: 1000, LeaseS: 60, WarmupS: 20, DurationS: 40,
		SweepWarmupS: 10, SweepDurationS: 30, SweepReadShare: 0.95, ClientsPerRegion: 64}
	for _, s := range []float64{0.75, 0.85, 0.95} {
		r.Shares = append(r.Shares, GLShareRun{ReadShare: s, Report: synthGLReport(s, false)})
	}
	for _, l := range []float64{1, 5} {
		r.Sweep = append(r.Sweep, GLLeaseRun{LeaseS: l, ReadShare: 0.95, Report: synthGLReport(0.95, true)})
	}
	r.Tabulate()
	return r
}

func TestGlobLeaseTabulate(t *testing.T) {
	r := synthGLResults()
	if len(r.Fig44) != 4 || r.Fig44[0].ReadShare != 0.85 || r.Fig44[3].Protocol != "quorum" {
		t.Fatalf("Fig44 = %d lines (%+v)", len(r.Fig44), r.Fig44)
	}
	if len(r.Fig45) != 3 || len(r.Fig46) != 3 || len(r.Fig48) != 2 {
		t.Fatalf("rows: %d %d %d", len(r.Fig45), len(r.Fig46), len(r.Fig48))
	}
	// 95 % reads: Cassandra's writes (5 %) are all above 300 ms; GlobLease's writes are
	// uniform on 0.5..500 ms (≈ 40 % above), its reads never.
	row := r.Fig45[2]
	if !near(row.CassandraAbove, 0.05) {
		t.Errorf("Cassandra above = %v, want 0.05", row.CassandraAbove)
	}
	wantGL := 0.05 * (500 - 300) / (500 - 0.5)
	if !near(row.GlobLeaseAbove, wantGL) || row.ReductionPct == nil || !near(*row.ReductionPct, (0.05-wantGL)/0.05*100) {
		t.Errorf("GlobLease above = %v (want %v), reduction %v", row.GlobLeaseAbove, wantGL, row.ReductionPct)
	}
	if want := 0.95*(0.2+1)/2 + 0.05*500; !near(row.CassandraMeanMs, want) {
		t.Errorf("Cassandra mean = %v, want %v", row.CassandraMeanMs, want)
	}
	// Overhead at 75 %: 7500 reads and 2500 writes per region over 40 s.
	o := r.Fig46[0]
	R, W := 7500.0/40, 2500.0/40
	if !near(o.ReadsPerSPerReg, R) || !near(o.WritesPerSPerReg, W) || !o.HasCounters {
		t.Errorf("throughputs %v/%v, counters %v", o.ReadsPerSPerReg, o.WritesPerSPerReg, o.HasCounters)
	}
	if want := W/R + 10000/(60*R); !near(o.Formula, want) {
		t.Errorf("formula = %v, want %v", o.Formula, want)
	}
	if want := 3*W/R + 0.75*10000/(60*R); !near(o.Bound, want) {
		t.Errorf("bound = %v, want %v", o.Bound, want)
	}
	// Counters: reads = 4·7500, renewals 750, updates 5000.
	if want := (750.0 + 5000) / 30000; !near(o.Measured, want) || !near(o.RenewalsPerRead, 0.025) {
		t.Errorf("measured = %v (renewals %v), want %v", o.Measured, o.RenewalsPerRead, want)
	}
	l := r.Fig48[0]
	if l.LeaseS != 1 || !near(l.MeanReadMs, 125.1) || !near(l.MeanWriteMs, 250.25) || !near(l.LeaseReadShare, 0.5) {
		t.Errorf("lease row = %+v", l)
	}
	if !near(l.MeanAllMs, 0.95*125.1+0.05*250.25) {
		t.Errorf("mean all = %v", l.MeanAllMs)
	}
}

func TestGlobLeaseMarkdown(t *testing.T) {
	r := synthGLResults()
	md := r.Markdown()
	for _, want := range []string{
		"ec2-globlease-4", "### Fig. 4.4", "### Fig. 4.5", "### Fig. 4.6", "### Fig. 4.8",
		"| reads (%) | Cassandra > 300 ms (% of requests) | GlobLease > 300 ms (% of requests) | reduction (%) |",
		"| 95 | 5.00 | 2.00 | 60 |", // GlobLease: 5 % · 199.5/499.5 = 2.00 %
		"formula W/R + K/(L·R)", "| lease (s) | mean read (ms) |", "| 1 | 125.1 |",
		"| GlobLease | 85 |", "| Cassandra ONE/ALL | 95 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	// Every table row has as many cells as its header.
	var cols int
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		n := strings.Count(line, "|")
		if cols == 0 {
			cols = n
		} else if n != cols {
			t.Errorf("row %q has %d bars, header %d", line, n, cols)
		}
	}
	// Undefined values render as "-", and the results survive JSON.
	empty := &GlobLeaseFigResults{Topology: "x", Regions: []string{"a", "b"}, DurationS: 1, LeaseS: 1,
		Shares: []GLShareRun{{ReadShare: 0.9, Report: &bench.Report{Runs: []bench.Run{
			{Protocol: "globlease", Regions: map[string]bench.RegionStats{"a": {Read: linOp(10, 1, 2)}}},
			{Protocol: "quorum", Regions: map[string]bench.RegionStats{"a": {Read: linOp(10, 1, 2)}}}}}}}}
	empty.Tabulate()
	md = empty.Markdown()
	if !strings.Contains(md, "| 90 | 0.00 | 0.00 | - |") || !strings.Contains(md, "| 90 | 5.0 | 0.0 | - | - | - |") {
		t.Errorf("undefined values:\n%s", md)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(empty); err != nil {
		t.Fatal(err)
	}
}

func TestGlobLeaseFiguresArgs(t *testing.T) {
	if _, err := GlobLeaseFigures(context.Background(), GlobLeaseFigOptions{}); err == nil {
		t.Error("no topology accepted")
	}
	w, err := glWorkload(0.85, 100, 1024)
	if err != nil || w.ReadProportion != 0.85 || !near(w.UpdateProportion, 0.15) || w.ValueBytes() != 1024 || w.RequestDistribution != "zipfian" {
		t.Errorf("workload %+v, %v", w, err)
	}
}
