package repro

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"meridian/internal/config"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// The GlobLease evaluation of the liu thesis (section 4.1.5, Figures 4.4–4.6 and 4.8) on the
// emulated WAN:
//
//   - Fig. 4.4: latency CDF of all requests (reads and writes, every region) of GlobLease and
//     Cassandra READ-ONE-WRITE-ALL (here: quorum ONE/ALL) at 85 % and 95 % reads;
//   - Fig. 4.5: share of requests above 300 ms at 75/85/95 % reads;
//   - Fig. 4.6: lease maintenance overhead per read against the thesis's bound
//     WriteThroughput/ReadThroughput + NumberOfKeys/(LeaseLength·ReadThroughput);
//   - Fig. 4.8: average latency against the lease length.
//
// Table 4.2's parameters are the defaults: 10000 keys, 10 KB values, 1000 requests/s spread
// evenly over the regions, 60 s leases. The thesis used YCSB but names a distribution only for
// its skew experiments (Zipf exponent 4); the runs here use YCSB's default request
// distribution, zipfian (constant 0.99), as YCSB's core workloads do.

// HighLatencyMs is the threshold of Fig. 4.5 ("high latency requests (above 300 ms)").
const HighLatencyMs = 300

// GlobLeaseFigOptions configures GlobLeaseFigures. Zero values take the defaults named.
type GlobLeaseFigOptions struct {
	// Topology of the emulated WAN (required; the thesis's is ec2-globlease-4).
	Topology *topology.Topology
	// Records is the number of keys (default 10000).
	Records int
	// ValueBytes is the size of each value, one YCSB field (default 10240).
	ValueBytes int
	// RatePerSecond is the total open-loop request rate, split evenly over the regions
	// (default 1000).
	RatePerSecond float64
	// ReadShares are the read proportions of the GlobLease-vs-Cassandra runs (default
	// 0.75, 0.85, 0.95); the rest are updates.
	ReadShares []float64
	// Lease is GlobLease's lease length in those runs (default 60s).
	Lease time.Duration
	// LeaseSweep are the lease lengths of Fig. 4.8 (default 1s, 5s, 15s, 60s), run at
	// SweepReadShare (default 0.95).
	LeaseSweep     []time.Duration
	SweepReadShare float64
	// Warmup and Duration of each comparison run (defaults 20s, 40s); SweepWarmup and
	// SweepDuration of each lease-sweep run (defaults 10s, 30s).
	Warmup, Duration           time.Duration
	SweepWarmup, SweepDuration time.Duration
	// ClientsPerRegion is the worker pool of the open loop (default 64).
	ClientsPerRegion int
	// GlobLeaseOptions are extra keyspace options of the GlobLease runs (e.g. home_ranges to
	// spread masters over the regions, as the thesis's load-balanced mastership does).
	GlobLeaseOptions map[string]string
	// Distribution is YCSB's request distribution (default zipfian).
	Distribution string
	// KeyLocality > 0: that share of each region's reads and updates go to keys mastered in
	// the region (bench.RunOptions.KeyLocality), for both systems alike.
	KeyLocality float64
	Seed        uint64
	// Log receives a line per run; Progress the runs' live progress lines (nil: none).
	Log         io.Writer
	Progress    io.Writer
	ProgressTTY bool
}

func (o *GlobLeaseFigOptions) defaults() {
	if o.Records <= 0 {
		o.Records = 10000
	}
	if o.ValueBytes <= 0 {
		o.ValueBytes = 10240
	}
	if o.RatePerSecond <= 0 {
		o.RatePerSecond = 1000
	}
	if len(o.ReadShares) == 0 {
		o.ReadShares = []float64{0.75, 0.85, 0.95}
	}
	if o.Lease <= 0 {
		o.Lease = 60 * time.Second
	}
	if len(o.LeaseSweep) == 0 {
		o.LeaseSweep = []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 60 * time.Second}
	}
	if o.SweepReadShare <= 0 {
		o.SweepReadShare = 0.95
	}
	if o.Warmup <= 0 {
		o.Warmup = 20 * time.Second
	}
	if o.Duration <= 0 {
		o.Duration = 40 * time.Second
	}
	if o.SweepWarmup <= 0 {
		o.SweepWarmup = 10 * time.Second
	}
	if o.SweepDuration <= 0 {
		o.SweepDuration = 30 * time.Second
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 64
	}
}

// GLShareRun is the comparison at one read share: one report with the GlobLease run and the
// Cassandra READ-ONE-WRITE-ALL run.
type GLShareRun struct {
	ReadShare float64       `json:"read_share"`
	Report    *bench.Report `json:"report"`
}

// GLLeaseRun is one lease length of the Fig. 4.8 sweep (a report with one GlobLease run).
type GLLeaseRun struct {
	LeaseS    float64       `json:"lease_s"`
	ReadShare float64       `json:"read_share"`
	Report    *bench.Report `json:"report"`
}

// GLHighLatencyRow is a row of Fig. 4.5 (shares are fractions of all requests, 0..1), with
// the mean latency of all requests (Fig. 4.7's quantity) beside it.
type GLHighLatencyRow struct {
	ReadShare      float64 `json:"read_share"`
	CassandraAbove float64 `json:"cassandra_above"`
	GlobLeaseAbove float64 `json:"globlease_above"`
	// ReductionPct = (Cassandra − GlobLease) / Cassandra · 100; absent when Cassandra had
	// no request above the threshold.
	ReductionPct    *float64 `json:"reduction_pct,omitempty"`
	CassandraMeanMs float64  `json:"cassandra_mean_ms"`
	GlobLeaseMeanMs float64  `json:"globlease_mean_ms"`
	// The same at the scaled threshold (GlobLeaseFigResults.ScaledThresholdMs).
	CassandraAboveScaled float64  `json:"cassandra_above_scaled"`
	GlobLeaseAboveScaled float64  `json:"globlease_above_scaled"`
	ReductionScaledPct   *float64 `json:"reduction_scaled_pct,omitempty"`
}

// GLOverheadRow is a row of Fig. 4.6.
//
// Measured: (lease_renewals + lease_updates) / reads, all three summed over every node from
// GlobLease's own counters (reads = reads_master + reads_lease + reads_forwarded +
// reads_affiliate), so numerator and denominator cover the same window — bench.Compare snapshots
// the counters before the warm-up, so that window is warm-up plus measured time.
// lease_renewals counts the reads at a non-master replica that asked the master for a lease;
// lease_updates counts the lease holders writes had to update.
//
// Formula: W/R + K/(L·R) with W and R the measured write and read throughput per region
// (client-side counts of the measured time / its duration / number of regions; with one
// replica per region that is per replica, as the thesis's formula is), K the number of keys
// and L the lease length in seconds.
//
// Bound: the same reasoning applied to what Measured counts. Each write updates at most the
// n−1 non-master replicas, and each of those renews each key at most once per lease, while
// every region's reads are in the denominator: Measured ≤ (n−1)·W/R + (n−1)/n·K/(L·R).
type GLOverheadRow struct {
	ReadShare        float64 `json:"read_share"`
	ReadsPerSPerReg  float64 `json:"reads_per_s_per_region"`
	WritesPerSPerReg float64 `json:"writes_per_s_per_region"`
	// HasCounters is false when the run reported no GlobLease counters (then the measured
	// columns are zero and meaningless).
	HasCounters     bool    `json:"has_counters"`
	RenewalsPerRead float64 `json:"renewals_per_read"`
	UpdatesPerRead  float64 `json:"updates_per_read"`
	Measured        float64 `json:"measured"`
	Formula         float64 `json:"formula"`
	Bound           float64 `json:"bound"`
}

// GLLeaseRow is a row of Fig. 4.8: mean latencies (all regions, weighted by counts).
type GLLeaseRow struct {
	LeaseS      float64 `json:"lease_s"`
	MeanReadMs  float64 `json:"mean_read_ms"`
	MeanWriteMs float64 `json:"mean_write_ms"`
	MeanAllMs   float64 `json:"mean_all_ms"`
	// LeaseReadShare is reads_lease / reads from GlobLease's counters (0..1).
	LeaseReadShare float64 `json:"lease_read_share"`
}

// GLCDFLine is one line of Fig. 4.4: the CDF of all requests of one system at one read share.
type GLCDFLine struct {
	Name      string       `json:"name"`
	Protocol  string       `json:"protocol"`
	ReadShare float64      `json:"read_share"`
	Points    [][2]float64 `json:"points"` // (latency ms, cumulative fraction)
}

// GlobLeaseFigResults are the runs of GlobLeaseFigures and the tables derived from them.
type GlobLeaseFigResults struct {
	Topology         string   `json:"topology"`
	Regions          []string `json:"regions"`
	Records          int      `json:"records"`
	ValueBytes       int      `json:"value_bytes"`
	RatePerSecond    float64  `json:"rate_per_s"`
	LeaseS           float64  `json:"lease_s"`
	WarmupS          float64  `json:"warmup_s"`
	DurationS        float64  `json:"duration_s"`
	SweepWarmupS     float64  `json:"sweep_warmup_s"`
	SweepDurationS   float64  `json:"sweep_duration_s"`
	SweepReadShare   float64  `json:"sweep_read_share"`
	ClientsPerRegion int      `json:"clients_per_region"`
	// ScaledThresholdMs is Fig. 4.5's 300 ms scaled to this topology: the thesis's round
	// trips span 100–500 ms ("latency connecting data centers varies from 50 ms to 250 ms,
	// which result in 100 ms to 500 ms round trip"), so 300 ms is 60% of its longest round
	// trip; this is 60% of the topology's longest.
	ScaledThresholdMs float64 `json:"scaled_threshold_ms"`
	// GlobLeaseOptions and Distribution as run.
	GlobLeaseOptions map[string]string `json:"globlease_options,omitempty"`
	Distribution     string            `json:"distribution,omitempty"`
	KeyLocality      float64           `json:"key_locality,omitempty"`

	Shares []GLShareRun `json:"shares"`
	Sweep  []GLLeaseRun `json:"lease_sweep"`

	Fig44 []GLCDFLine        `json:"fig44_cdf"`
	Fig45 []GLHighLatencyRow `json:"fig45_high_latency"`
	Fig46 []GLOverheadRow    `json:"fig46_lease_overhead"`
	Fig48 []GLLeaseRow       `json:"fig48_lease_length"`
}

// scaledThreshold is 60% of the topology's longest round trip (see ScaledThresholdMs).
func scaledThreshold(t *topology.Topology) float64 {
	longest := 0.0
	for _, a := range t.Regions {
		for _, b := range t.Regions {
			if a != b {
				longest = math.Max(longest, float64(t.RTT(a, b).Microseconds())/1000)
			}
		}
	}
	return math.Round(0.6 * longest)
}

// cassandraConfig is the thesis's baseline for read-dominant workloads.
var cassandraConfig = bench.Config{Protocol: config.ProtocolQuorum, ReadLevel: "ONE", WriteLevel: "ALL"}

func globleaseConfig(lease time.Duration, extra map[string]string) bench.Config {
	opts := map[string]string{"lease": lease.String()}
	for k, v := range extra {
		opts[k] = v
	}
	return bench.Config{Protocol: config.ProtocolGlobLease, Options: opts}
}

// glWorkload is YCSB with readShare reads and the rest updates, zipfian requests (YCSB's
// default distribution), recs keys of one field of valueBytes bytes.
func glWorkload(readShare float64, recs, valueBytes int) (ycsb.Workload, error) {
	w, err := ycsb.Core("b")
	if err != nil {
		return w, err
	}
	w.Name = fmt.Sprintf("zipfian-read%.0f", readShare*100)
	w.ReadProportion, w.UpdateProportion = readShare, 1-readShare
	w.RequestDistribution = ycsb.DistZipfian
	w.RecordCount, w.FieldCount, w.FieldLength = recs, 1, valueBytes
	return w, w.Validate()
}

// GlobLeaseFigures runs the experiments of Figures 4.4–4.6 and 4.8 on an emulated cluster of
// o.Topology (one node and one replica per region, 16 partitions, a fresh cluster per run)
// and tabulates them. On error it returns what it has (tabulated) with the error.
func GlobLeaseFigures(ctx context.Context, o GlobLeaseFigOptions) (*GlobLeaseFigResults, error) {
	if o.Topology == nil {
		return nil, errors.New("bench: globlease figures: no topology")
	}
	o.defaults()
	for _, s := range append(append([]float64{}, o.ReadShares...), o.SweepReadShare) {
		if !(s > 0 && s <= 1) {
			return nil, fmt.Errorf("bench: globlease figures: read share %v is not in (0,1]", s)
		}
	}
	regions := o.Topology.Regions
	res := &GlobLeaseFigResults{
		Topology: o.Topology.Name, Regions: regions, Records: o.Records, ValueBytes: o.ValueBytes,
		RatePerSecond: o.RatePerSecond, LeaseS: o.Lease.Seconds(),
		WarmupS: o.Warmup.Seconds(), DurationS: o.Duration.Seconds(),
		SweepWarmupS: o.SweepWarmup.Seconds(), SweepDurationS: o.SweepDuration.Seconds(),
		SweepReadShare: o.SweepReadShare, ClientsPerRegion: o.ClientsPerRegion,
		ScaledThresholdMs: scaledThreshold(o.Topology),
		GlobLeaseOptions:  o.GlobLeaseOptions, Distribution: o.Distribution, KeyLocality: o.KeyLocality,
	}
	glOpts, err := config.GlobLeaseOptionsOf(o.GlobLeaseOptions, regions)
	if err != nil {
		return nil, fmt.Errorf("bench: globlease figures: %w", err)
	}
	target := &bench.EmulatedTarget{Topo: o.Topology, NodesPerRegion: 1, ReplicasPerRegion: 1, Partitions: 16, Seed: o.Seed}
	defer target.Close()
	run := func(share float64, cfgs []bench.Config, warmup, dur time.Duration) (*bench.Report, error) {
		w, err := glWorkload(share, o.Records, o.ValueBytes)
		if o.Distribution != "" {
			w.RequestDistribution = o.Distribution
		}
		if err != nil {
			return nil, err
		}
		ro := bench.RunOptions{Workload: w, ClientsPerRegion: o.ClientsPerRegion,
			RatePerRegion: o.RatePerSecond / float64(len(regions)), Warmup: warmup, Duration: dur,
			Seed: o.Seed, Progress: o.Progress, ProgressTTY: o.ProgressTTY,
			KeyLocality: o.KeyLocality, HomeOf: glOpts.HomeRegionOf}
		return bench.Compare(ctx, target, cfgs, ro, o.Log)
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format, args...)
		}
	}
	for _, s := range o.ReadShares {
		logf("== %.0f%% reads: GlobLease lease=%v vs Cassandra READ-ONE-WRITE-ALL ==\n", s*100, o.Lease)
		rep, err := run(s, []bench.Config{globleaseConfig(o.Lease, o.GlobLeaseOptions), cassandraConfig}, o.Warmup, o.Duration)
		if rep != nil && len(rep.Runs) > 0 {
			res.Shares = append(res.Shares, GLShareRun{ReadShare: s, Report: rep})
		}
		if err != nil {
			res.Tabulate()
			return res, err
		}
	}
	for _, l := range o.LeaseSweep {
		logf("== lease %v, %.0f%% reads ==\n", l, o.SweepReadShare*100)
		rep, err := run(o.SweepReadShare, []bench.Config{globleaseConfig(l, o.GlobLeaseOptions)}, o.SweepWarmup, o.SweepDuration)
		if rep != nil && len(rep.Runs) > 0 {
			res.Sweep = append(res.Sweep, GLLeaseRun{LeaseS: l.Seconds(), ReadShare: o.SweepReadShare, Report: rep})
		}
		if err != nil {
			res.Tabulate()
			return res, err
		}
	}
	res.Tabulate()
	return res, nil
}

// findRun returns the report's first run of protocol, or nil.
func findRun(rep *bench.Report, protocol string) *bench.Run {
	if rep == nil {
		return nil
	}
	for i := range rep.Runs {
		if rep.Runs[i].Protocol == protocol {
			return &rep.Runs[i]
		}
	}
	return nil
}

// RunOpStats returns every operation's stats of run, all regions (sorted by name).
func RunOpStats(run *bench.Run) []bench.OpStats {
	if run == nil {
		return nil
	}
	names := make([]string, 0, len(run.Regions))
	for r := range run.Regions {
		names = append(names, r)
	}
	sort.Strings(names)
	var out []bench.OpStats
	for _, r := range names {
		rs := run.Regions[r]
		out = append(out, rs.Read, rs.Write)
		for _, p := range []*bench.OpStats{rs.Scan, rs.Insert, rs.RMW} {
			if p != nil {
				out = append(out, *p)
			}
		}
	}
	return out
}

// meanMs is the count-weighted mean latency of stats (0 without requests).
func meanMs(stats []bench.OpStats) float64 {
	var n int64
	var sum float64
	for _, s := range stats {
		if s.Count > 0 {
			n += s.Count
			sum += float64(s.Count) * s.MeanMs
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// opCDF returns s's CDF as (ms, fraction) points, non-decreasing in both coordinates: from
// Percentiles, else from p50/p99/p99.9, else all at the mean; nil when s has nothing.
func opCDF(s bench.OpStats) [][2]float64 {
	var pts [][2]float64
	for _, pr := range s.Percentiles {
		if math.IsNaN(pr[0]) || math.IsNaN(pr[1]) || math.IsInf(pr[1], 0) || pr[0] < 0 || pr[0] > 100 {
			continue
		}
		pts = append(pts, [2]float64{math.Max(pr[1], 0), pr[0] / 100})
	}
	if len(pts) == 0 {
		for _, q := range [][2]float64{{s.P50Ms, 0.5}, {s.P99Ms, 0.99}, {s.P999Ms, 0.999}} {
			if q[0] > 0 && !math.IsInf(q[0], 0) {
				pts = append(pts, q)
			}
		}
	}
	if len(pts) == 0 && s.MeanMs > 0 {
		pts = [][2]float64{{s.MeanMs, 1}}
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i][1] < pts[j][1] })
	for i := 1; i < len(pts); i++ {
		pts[i][0] = math.Max(pts[i][0], pts[i-1][0])
	}
	return pts
}

// cdfAt is the fraction of pts's distribution at or below x, interpolating linearly between
// the points: 0 below the first point's latency, 1 at or above the last's.
func cdfAt(pts [][2]float64, x float64) float64 {
	if len(pts) == 0 || x < pts[0][0] {
		return 0
	}
	j := sort.Search(len(pts), func(i int) bool { return pts[i][0] > x }) - 1 // last with ms ≤ x
	if j >= len(pts)-1 {
		return 1
	}
	a, b := pts[j], pts[j+1]
	return a[1] + (b[1]-a[1])*(x-a[0])/(b[0]-a[0])
}

// ShareAbove is the fraction (0..1) of the requests of stats whose latency exceeds
// thresholdMs, each bench.OpStats weighted by its Count and its share estimated from its
// Percentiles by linear interpolation (p50/p99/p99.9 when it has none). 0 without requests.
func ShareAbove(stats []bench.OpStats, thresholdMs float64) float64 {
	var n int64
	var above float64
	for _, s := range stats {
		if s.Count <= 0 {
			continue
		}
		pts := opCDF(s)
		if len(pts) == 0 {
			continue
		}
		n += s.Count
		above += float64(s.Count) * (1 - cdfAt(pts, thresholdMs))
	}
	if n == 0 {
		return 0
	}
	return above / float64(n)
}

// CombinedCDF is the latency CDF of all of run's requests (every operation of every region),
// as (ms, cumulative fraction) points: the regions' per-operation CDFs (their Percentiles,
// linearly interpolated) weighted by their counts, evaluated at every latency any of them
// has a point at — exact for the interpolated distributions. nil without requests.
func CombinedCDF(run *bench.Run) [][2]float64 {
	type part struct {
		w   float64
		pts [][2]float64
	}
	var parts []part
	var total float64
	var xs []float64
	for _, s := range RunOpStats(run) {
		if s.Count <= 0 {
			continue
		}
		pts := opCDF(s)
		if len(pts) == 0 {
			continue
		}
		parts = append(parts, part{float64(s.Count), pts})
		total += float64(s.Count)
		for _, p := range pts {
			xs = append(xs, p[0])
		}
	}
	if total == 0 {
		return nil
	}
	sort.Float64s(xs)
	var out [][2]float64
	for i, x := range xs {
		if i > 0 && x == xs[i-1] {
			continue
		}
		var f float64
		for _, p := range parts {
			f += p.w * cdfAt(p.pts, x)
		}
		out = append(out, [2]float64{x, math.Min(f/total, 1)})
	}
	return out
}

// cdfQuantile is the latency at cumulative fraction q of a CDF's points (linear).
func cdfQuantile(pts [][2]float64, q float64) float64 {
	if len(pts) == 0 {
		return 0
	}
	for i, p := range pts {
		if p[1] >= q {
			if i == 0 || p[1] == pts[i-1][1] {
				return p[0]
			}
			a := pts[i-1]
			return a[0] + (p[0]-a[0])*(q-a[1])/(p[1]-a[1])
		}
	}
	return pts[len(pts)-1][0]
}

// glCounterReads is the number of reads GlobLease's counters saw.
func glCounterReads(c map[string]int64) int64 {
	return c["reads_master"] + c["reads_lease"] + c["reads_forwarded"] + c["reads_affiliate"]
}

func opCount(run *bench.Run, read bool) int64 {
	var n int64
	for _, rs := range run.Regions {
		if read {
			n += rs.Read.Count
		} else {
			n += rs.Write.Count
		}
	}
	return n
}

// Tabulate (re)computes the Fig44/45/46/48 tables from the reports and parameters.
func (r *GlobLeaseFigResults) Tabulate() {
	r.Fig44, r.Fig45, r.Fig46, r.Fig48 = nil, nil, nil, nil
	nReg := float64(len(r.Regions))

	// Fig. 4.4: the 85 % and 95 % read shares, or every share when neither was run.
	var cdfShares []GLShareRun
	for _, sr := range r.Shares {
		if math.Abs(sr.ReadShare-0.85) < 1e-9 || math.Abs(sr.ReadShare-0.95) < 1e-9 {
			cdfShares = append(cdfShares, sr)
		}
	}
	if len(cdfShares) == 0 {
		cdfShares = r.Shares
	}
	for _, sr := range cdfShares {
		for _, sys := range []struct{ proto, name string }{{config.ProtocolGlobLease, "GlobLease"}, {config.ProtocolQuorum, "Cassandra ONE/ALL"}} {
			if run := findRun(sr.Report, sys.proto); run != nil {
				if pts := CombinedCDF(run); len(pts) > 0 {
					r.Fig44 = append(r.Fig44, GLCDFLine{Name: fmt.Sprintf("%s, %.0f%% reads", sys.name, sr.ReadShare*100),
						Protocol: sys.proto, ReadShare: sr.ReadShare, Points: pts})
				}
			}
		}
	}

	for _, sr := range r.Shares {
		gl, cas := findRun(sr.Report, config.ProtocolGlobLease), findRun(sr.Report, config.ProtocolQuorum)
		row := GLHighLatencyRow{ReadShare: sr.ReadShare}
		if cas != nil {
			row.CassandraAbove = ShareAbove(RunOpStats(cas), HighLatencyMs)
			row.CassandraMeanMs = meanMs(RunOpStats(cas))
		}
		if gl != nil {
			row.GlobLeaseAbove = ShareAbove(RunOpStats(gl), HighLatencyMs)
			row.GlobLeaseMeanMs = meanMs(RunOpStats(gl))
		}
		if cas != nil && gl != nil && row.CassandraAbove > 0 {
			v := (row.CassandraAbove - row.GlobLeaseAbove) / row.CassandraAbove * 100
			row.ReductionPct = &v
		}
		if r.ScaledThresholdMs > 0 {
			if cas != nil {
				row.CassandraAboveScaled = ShareAbove(RunOpStats(cas), r.ScaledThresholdMs)
			}
			if gl != nil {
				row.GlobLeaseAboveScaled = ShareAbove(RunOpStats(gl), r.ScaledThresholdMs)
			}
			if cas != nil && gl != nil && row.CassandraAboveScaled > 0 {
				v := (row.CassandraAboveScaled - row.GlobLeaseAboveScaled) / row.CassandraAboveScaled * 100
				row.ReductionScaledPct = &v
			}
		}
		r.Fig45 = append(r.Fig45, row)

		if gl == nil || r.DurationS <= 0 || nReg == 0 {
			continue
		}
		o := GLOverheadRow{ReadShare: sr.ReadShare,
			ReadsPerSPerReg:  float64(opCount(gl, true)) / r.DurationS / nReg,
			WritesPerSPerReg: float64(opCount(gl, false)) / r.DurationS / nReg}
		if o.ReadsPerSPerReg <= 0 {
			continue
		}
		if reads := glCounterReads(gl.ProtocolCounters); reads > 0 {
			o.HasCounters = true
			o.RenewalsPerRead = float64(gl.ProtocolCounters["lease_renewals"]) / float64(reads)
			o.UpdatesPerRead = float64(gl.ProtocolCounters["lease_updates"]) / float64(reads)
			o.Measured = o.RenewalsPerRead + o.UpdatesPerRead
		}
		wr := o.WritesPerSPerReg / o.ReadsPerSPerReg
		kl := 0.0
		if r.LeaseS > 0 {
			kl = float64(r.Records) / (r.LeaseS * o.ReadsPerSPerReg)
		}
		o.Formula = wr + kl
		o.Bound = (nReg-1)*wr + (nReg-1)/nReg*kl
		r.Fig46 = append(r.Fig46, o)
	}

	for _, lr := range r.Sweep {
		gl := findRun(lr.Report, config.ProtocolGlobLease)
		if gl == nil {
			continue
		}
		row := GLLeaseRow{LeaseS: lr.LeaseS, MeanAllMs: meanMs(RunOpStats(gl))}
		var reads, writes []bench.OpStats
		for _, rs := range gl.Regions {
			reads, writes = append(reads, rs.Read), append(writes, rs.Write)
		}
		row.MeanReadMs, row.MeanWriteMs = meanMs(reads), meanMs(writes)
		if n := glCounterReads(gl.ProtocolCounters); n > 0 {
			row.LeaseReadShare = float64(gl.ProtocolCounters["reads_lease"]) / float64(n)
		}
		r.Fig48 = append(r.Fig48, row)
	}
}

// Markdown renders the tables (Fig. 4.4 as percentiles of the CDFs) with the setup.
func (r *GlobLeaseFigResults) Markdown() string {
	var b strings.Builder
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	pf("## GlobLease evaluation (liu thesis 4.1.5) on the emulated WAN %s\n\n", r.Topology)
	masters := "home region " + firstOr(r.Regions, "-")
	if v := r.GlobLeaseOptions["home_ranges"]; v != "" {
		masters = fmt.Sprintf("masters by key range (home_ranges %s; keys below the first start in %s)", v, firstOr(r.Regions, "-"))
	}
	dist := r.Distribution
	if dist == "" {
		dist = "zipfian"
	}
	if r.KeyLocality > 0 {
		dist += fmt.Sprintf(" (%.0f%% of each region's requests on keys mastered in that region)", r.KeyLocality*100)
	}
	pf("Setup: regions %s, one node and one replica per region; YCSB %s requests over %d keys of %d B; "+
		"open loop at %.0f requests/s in total (%.0f per region, %d workers per region); GlobLease lease %s, %s; "+
		"Cassandra READ-ONE-WRITE-ALL = quorum ONE/ALL. Each run: %s warm-up + %s measured; lease sweep: %s + %s at %.0f%% reads.\n\n",
		strings.Join(r.Regions, ", "), dist, r.Records, r.ValueBytes, r.RatePerSecond, r.RatePerSecond/math.Max(1, float64(len(r.Regions))),
		r.ClientsPerRegion, fmtSec(r.LeaseS), masters, fmtSec(r.WarmupS), fmtSec(r.DurationS),
		fmtSec(r.SweepWarmupS), fmtSec(r.SweepDurationS), r.SweepReadShare*100)

	pf("### Fig. 4.4 — latency distribution of all requests\n\n")
	if len(r.Fig44) == 0 {
		pf("no runs\n\n")
	} else {
		pf("| system | reads (%%) | p50 (ms) | p80 (ms) | p90 (ms) | p95 (ms) | p99 (ms) | > %d ms (%% of requests) |\n", HighLatencyMs)
		pf("|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range r.Fig44 {
			above := 1 - cdfAt(l.Points, HighLatencyMs)
			pf("| %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", sysName(l.Protocol), l.ReadShare*100,
				cdfQuantile(l.Points, 0.5), cdfQuantile(l.Points, 0.8), cdfQuantile(l.Points, 0.9),
				cdfQuantile(l.Points, 0.95), cdfQuantile(l.Points, 0.99), above*100)
		}
		pf("\nPercentiles of the count-weighted mixture of every region's read and write distributions (each interpolated linearly between its stored percentiles).\n\n")
	}

	pf("### Fig. 4.5 — high-latency requests (> %d ms)\n\n", HighLatencyMs)
	if len(r.Fig45) == 0 {
		pf("no runs\n\n")
	} else {
		pf("| reads (%%) | Cassandra > %d ms (%% of requests) | GlobLease > %d ms (%% of requests) | reduction (%%) | Cassandra mean (ms) | GlobLease mean (ms) |\n", HighLatencyMs, HighLatencyMs)
		pf("|---:|---:|---:|---:|---:|---:|\n")
		for _, row := range r.Fig45 {
			red := "-"
			if row.ReductionPct != nil {
				red = fmt.Sprintf("%.0f", *row.ReductionPct)
			}
			pf("| %.0f | %.2f | %.2f | %s | %.1f | %.1f |\n", row.ReadShare*100, row.CassandraAbove*100, row.GlobLeaseAbove*100,
				red, row.CassandraMeanMs, row.GlobLeaseMeanMs)
		}
		pf("\nShares of all requests (reads and writes, every region), estimated from each region's stored percentiles by linear interpolation; means over all requests.\n\n")
		if r.ScaledThresholdMs > 0 {
			t := r.ScaledThresholdMs
			pf("At the threshold scaled to this topology (60%% of its longest round trip, as 300 ms is of the thesis's 500 ms): %.0f ms.\n\n", t)
			pf("| reads (%%) | Cassandra > %.0f ms (%%) | GlobLease > %.0f ms (%%) | reduction (%%) |\n|---:|---:|---:|---:|\n", t, t)
			for _, row := range r.Fig45 {
				red := "-"
				if row.ReductionScaledPct != nil {
					red = fmt.Sprintf("%.0f", *row.ReductionScaledPct)
				}
				pf("| %.0f | %.2f | %.2f | %s |\n", row.ReadShare*100, row.CassandraAboveScaled*100, row.GlobLeaseAboveScaled*100, red)
			}
			pf("\n")
		}
	}

	pf("### Fig. 4.6 — lease maintenance overhead (lease %s)\n\n", fmtSec(r.LeaseS))
	if len(r.Fig46) == 0 {
		pf("no runs\n\n")
	} else {
		pf("| reads (%%) | R: reads/s per region | W: writes/s per region | renewals per read | updates per read | measured overhead (per read) | formula W/R + K/(L·R) | bound (n−1)·W/R + (n−1)/n·K/(L·R) |\n")
		pf("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, o := range r.Fig46 {
			ren, upd, meas := "-", "-", "-"
			if o.HasCounters {
				ren, upd, meas = fmt.Sprintf("%.3f", o.RenewalsPerRead), fmt.Sprintf("%.3f", o.UpdatesPerRead), fmt.Sprintf("%.3f", o.Measured)
			}
			pf("| %.0f | %.1f | %.1f | %s | %s | %s | %.3f | %.3f |\n", o.ReadShare*100, o.ReadsPerSPerReg, o.WritesPerSPerReg,
				ren, upd, meas, o.Formula, o.Bound)
		}
		pf("\nMeasured = (lease_renewals + lease_updates) / reads from GlobLease's counters summed over the nodes (warm-up included, for numerator and denominator alike). "+
			"W, R = measured writes and reads per second per region (= per replica); K = %d keys; L = %s; n = %d regions. "+
			"The thesis's formula is per replica; the last column bounds what is counted here: a write updates up to n−1 lease holders, and only the n−1 non-master regions renew.\n\n",
			r.Records, fmtSec(r.LeaseS), len(r.Regions))
	}

	pf("### Fig. 4.8 — average latency vs lease length (%.0f%% reads)\n\n", r.SweepReadShare*100)
	if len(r.Fig48) == 0 {
		pf("no runs\n\n")
	} else {
		pf("| lease (s) | mean read (ms) | mean write (ms) | mean all (ms) | reads under a lease (%%) |\n")
		pf("|---:|---:|---:|---:|---:|\n")
		for _, row := range r.Fig48 {
			pf("| %s | %.1f | %.1f | %.1f | %.1f |\n", fmtNum(row.LeaseS), row.MeanReadMs, row.MeanWriteMs, row.MeanAllMs, row.LeaseReadShare*100)
		}
		pf("\n")
	}
	return b.String()
}

func sysName(protocol string) string {
	if protocol == config.ProtocolQuorum {
		return "Cassandra ONE/ALL"
	}
	if protocol == config.ProtocolGlobLease {
		return "GlobLease"
	}
	return protocol
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

func fmtNum(v float64) string { return fmt.Sprintf("%g", v) }

func fmtSec(s float64) string { return fmt.Sprintf("%g s", s) }
