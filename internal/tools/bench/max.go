package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// MaxOptions configures the search for the highest throughput whose p99 stays under a bound.
type MaxOptions struct {
	// P99BoundMs: every region's p99 of every operation must stay under it.
	P99BoundMs float64
	// P50BoundMs, when set: every region's median of every operation must stay under it too
	// (the Canopus thesis reports the throughput where latency reaches 1.5× its base,
	// 4.6.2).
	P50BoundMs float64
	// P50Factor, when set: every region's median of every operation must stay under this
	// factor times its median at BaseRatePerRegion, measured first (the thesis's criterion,
	// "the throughput when the latency touches 1.5 times the base latency", 4.6.2, per region
	// since each region has its own base). The search then also measures the medians at 70%
	// of the highest rate found (the thesis's "median at 70% load").
	P50Factor float64
	// BaseRatePerRegion is the rate of the base probe (default StartRatePerRegion/4).
	BaseRatePerRegion float64
	// StartRatePerRegion is the first probe's open-loop rate (default 200 ops/s per region).
	StartRatePerRegion float64
	// Probe is the measured time of each probe (default 5s, plus 1s warm-up).
	Probe time.Duration
	// Bisections after the first failing rate (default 4).
	Bisections int
	// Cooldown is the pause after a probe that broke the bound, before the next one (default:
	// the probe's length). A system that fell behind still works off its backlog for a while
	// (an emulated node's queue, a server's), and a probe started then measures the backlog:
	// every later probe of a search failed after one overload (bench elastic, 2026-11-26).
	Cooldown time.Duration
	// MachineCPU samples the whole machine's CPU (/proc/stat) instead of this process's:
	// in the lab the servers are other processes.
	MachineCPU bool
	// Fresh runs every probe on a fresh session (FindMax prepares the target and loads the
	// data again): a system that fell behind in one probe does not carry its backlog into
	// the next (EPaxos on bandwidth-limited links measured 0 ops/s at every rate after its
	// first overload, 2026-11-27), as the thesis ran each rate as its own experiment.
	Fresh bool
}

// Probe is one measured rate.
type Probe struct {
	RatePerRegion float64 `json:"rate_per_region"`
	Achieved      float64 `json:"achieved_ops"`
	WorstP99Ms    float64 `json:"worst_p99_ms"`
	Errors        int64   `json:"errors"`
	// Dropped: arrivals the open loop could not offer (every client busy, queue full).
	Dropped  int64   `json:"dropped,omitempty"`
	CPUCores float64 `json:"cpu_cores"`
	// WorstP50Ms is the highest p50 of any operation in any region.
	WorstP50Ms float64 `json:"worst_p50_ms"`
	// ServerCPUCores is the servers' CPU (sessions that are ServerProcesses), 0 otherwise.
	ServerCPUCores float64 `json:"server_cpu_cores,omitempty"`
	// RegionP50Ms is each region's highest median over its operations.
	RegionP50Ms map[string]float64 `json:"region_p50_ms,omitempty"`
	OK          bool               `json:"ok"`
}

// ServerProcesses is a session whose servers are processes of this machine: FindMax then
// also reports the CPU those processes use, apart from the clients' and everything else's.
type ServerProcesses interface {
	ServerPIDs() []int
}

// WithServerPIDs returns sess, reporting pids as its servers (ServerProcesses).
func WithServerPIDs(sess Session, pids func() []int) Session {
	return &pidSession{Session: sess, pids: pids}
}

type pidSession struct {
	Session
	pids func() []int
}

func (s *pidSession) ServerPIDs() []int { return s.pids() }

// serverCPUSeconds sums the user+system CPU of pids; processes that are gone count 0.
func serverCPUSeconds(pids []int) float64 {
	var sum float64
	for _, pid := range pids {
		v, _ := procCPU(pid)
		sum += v
	}
	return sum
}

// MaxResult is the outcome of FindMax.
type MaxResult struct {
	Config     string  `json:"config"`
	Workload   string  `json:"workload"`
	Nodes      int     `json:"nodes"`
	BestOps    float64 `json:"best_ops"`
	BestP99Ms  float64 `json:"best_p99_ms"`
	OpsPerNode float64 `json:"ops_per_node"`
	OpsPerCore float64 `json:"ops_per_core"`
	CPUCores   float64 `json:"cpu_cores"`
	P99BoundMs float64 `json:"p99_bound_ms"`
	P50BoundMs float64 `json:"p50_bound_ms,omitempty"`
	// BestP50Ms is the worst p50 (any operation, any region) of the best probe.
	BestP50Ms float64 `json:"best_p50_ms"`
	// CPUUsPerOp is the CPU (CPUCores, as CPUNote says) per operation of the best probe.
	CPUUsPerOp float64 `json:"cpu_us_per_op"`
	// ServerCPUCores and ServerCPUUsPerOp are the servers' own CPU in the best probe, when
	// the session knows their processes (ServerProcesses); 0 otherwise.
	ServerCPUCores   float64 `json:"server_cpu_cores,omitempty"`
	ServerCPUUsPerOp float64 `json:"server_cpu_us_per_op,omitempty"`
	Probes           []Probe `json:"probes"`
	// Base is the unloaded probe (P50Factor) whose medians the bounds scale; Load70 the probe
	// at 70% of BestOps's rate.
	Base   *Probe `json:"base,omitempty"`
	Load70 *Probe `json:"load70,omitempty"`
	// P50Factor is MaxOptions.P50Factor.
	P50Factor float64 `json:"p50_factor,omitempty"`
	CPUNote   string  `json:"cpu_note"`
}

// freshLoadAttempts bounds the fresh clusters tried for one probe (MaxOptions.Fresh).
const freshLoadAttempts = 3

// ensureDefaults fills the options' documented defaults and checks the bound.
func (mo *MaxOptions) ensureDefaults() error {
	if mo.P99BoundMs <= 0 {
		return fmt.Errorf("bench: a rate search (--max) needs a positive p99 bound")
	}
	if mo.StartRatePerRegion <= 0 {
		mo.StartRatePerRegion = 200
	}
	if mo.Probe <= 0 {
		mo.Probe = 5 * time.Second
	}
	if mo.Bisections <= 0 {
		mo.Bisections = 4
	}
	if mo.Cooldown <= 0 {
		mo.Cooldown = mo.Probe
	}
	if mo.P50Factor < 0 || (mo.P50Factor > 0 && mo.P50Factor <= 1) {
		return fmt.Errorf("bench: p50 factor %v: want > 1 (or 0: none)", mo.P50Factor)
	}
	if mo.BaseRatePerRegion <= 0 {
		mo.BaseRatePerRegion = mo.StartRatePerRegion / 4
	}
	return nil
}

// FindMax doubles the open-loop rate until a probe breaks the p99 bound twice in a row (or
// errs, or drops arrivals), then bisects. CPU is sampled from /proc/self/stat: for the
// emulated target that is the whole process — nodes and clients.
func FindMax(ctx context.Context, t Target, cfg Config, nodes int, o RunOptions, mo MaxOptions, log io.Writer) (*MaxResult, error) {
	if err := mo.ensureDefaults(); err != nil {
		return nil, err
	}
	sess, err := t.Prepare(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	regions := o.Regions
	if len(regions) == 0 {
		regions = t.Topology().Regions
	}
	if err := Load(ctx, sess, o.Workload, regions, 256); err != nil {
		return nil, err
	}
	if mo.Fresh {
		sess.Close() // only the check that the target prepares and loads
		fresh := func() (Session, func(), error) {
			// A fresh cluster may still be electing its leaders when the load starts (a Raft
			// load once timed out on record 224): a failed load is tried again on another
			// fresh cluster, a bounded number of times.
			var lastErr error
			for range freshLoadAttempts {
				s, err := t.Prepare(ctx, cfg)
				if err != nil {
					return nil, nil, err
				}
				if lastErr = Load(ctx, s, o.Workload, regions, 256); lastErr == nil {
					return s, func() { s.Close() }, nil
				}
				s.Close()
			}
			return nil, nil, fmt.Errorf("bench: loading a fresh cluster for a probe, %d attempts: %w", freshLoadAttempts, lastErr)
		}
		return searchMax(ctx, fresh, regions, cfg, nodes, o, mo, log)
	}
	if o.Warmup > time.Second {
		// Settle before the first probe: a JVM peer compiles its hot paths and a freshly
		// loaded store compacts during the first tens of seconds, and a probe measured then
		// measures that instead. Unmeasured, at the first probe's rate.
		so := o
		so.SkipLoad, so.RatePerRegion, so.Duration, so.Warmup = true, mo.StartRatePerRegion, o.Warmup, 0
		so.ClientsPerRegion = max(o.ClientsPerRegion, 256)
		so.Progress = nil
		if _, err := Execute(ctx, sess, regions, cfg, so); err != nil {
			return nil, fmt.Errorf("bench: settling before the search: %w", err)
		}
	}
	return SearchMax(ctx, sess, regions, cfg, nodes, o, mo, log)
}

// SearchMax is FindMax's search on a session whose data is loaded (it does not close it):
// the open-loop rate doubles from mo.StartRatePerRegion until a probe breaks the p99 bound,
// then bisects.
func SearchMax(ctx context.Context, sess Session, regions []string, cfg Config, nodes int, o RunOptions, mo MaxOptions, log io.Writer) (*MaxResult, error) {
	same := func() (Session, func(), error) { return sess, func() {}, nil }
	return searchMax(ctx, same, regions, cfg, nodes, o, mo, log)
}

// searchMax is SearchMax with the session of each probe from next (the same one, or a
// fresh one with MaxOptions.Fresh); done releases it.
func searchMax(ctx context.Context, next func() (sess Session, done func(), err error), regions []string, cfg Config, nodes int, o RunOptions, mo MaxOptions, log io.Writer) (*MaxResult, error) {
	if err := mo.ensureDefaults(); err != nil {
		return nil, err
	}
	res := &MaxResult{Config: cfg.Label(), Workload: o.Workload.Name, Nodes: nodes, P99BoundMs: mo.P99BoundMs, P50BoundMs: mo.P50BoundMs,
		P50Factor: mo.P50Factor,
		CPUNote:   fmt.Sprintf("CPU of this process (nodes and clients together) on a %d-core machine", runtime.NumCPU())}
	cpuSeconds := processCPUSeconds
	if mo.MachineCPU {
		cpuSeconds = machineCPUSeconds
		res.CPUNote = fmt.Sprintf("CPU of the whole machine (servers, clients and, in the lab, the router) on a %d-core machine", runtime.NumCPU())
	}
	probe := func(rate float64, candidate bool) (Probe, error) {
		sess, done, err := next()
		if err != nil {
			return Probe{}, err
		}
		defer done()
		po := o
		po.SkipLoad = true
		po.RatePerRegion = rate
		po.Duration = mo.Probe
		po.Warmup = time.Second
		po.ClientsPerRegion = max(o.ClientsPerRegion, 256)
		var pids []int
		if sp, ok := sess.(ServerProcesses); ok {
			pids = sp.ServerPIDs()
		}
		cpu0, server0 := cpuSeconds(), serverCPUSeconds(pids)
		wall0 := time.Now()
		run, err := Execute(ctx, sess, regions, cfg, po)
		if err != nil {
			return Probe{}, err
		}
		wall := time.Since(wall0).Seconds()
		p := Probe{RatePerRegion: rate, Achieved: run.ThroughputOps, CPUCores: (cpuSeconds() - cpu0) / wall, RegionP50Ms: map[string]float64{}}
		if len(pids) > 0 {
			p.ServerCPUCores = (serverCPUSeconds(pids) - server0) / wall
		}
		for region, rs := range run.Regions {
			for _, s := range []*OpStats{&rs.Read, &rs.Write, rs.Scan, rs.Insert, rs.RMW} {
				if s != nil && s.Count > 0 {
					p.WorstP99Ms = max(p.WorstP99Ms, s.P99Ms)
					p.WorstP50Ms = max(p.WorstP50Ms, s.P50Ms)
					p.RegionP50Ms[region] = max(p.RegionP50Ms[region], s.P50Ms)
				}
				if s != nil {
					p.Errors += s.Errors
				}
			}
		}
		// Latency counts from each operation's intended (Poisson) arrival, so a system that
		// falls behind shows it in the p99. The achieved rate is only a sanity floor: Poisson
		// counts and the operations still in flight when the window closes (a WAN round trip
		// of a short probe) make it fall a few percent below the rate by chance, which a
		// tighter test took for overload (a probe of 40 operations could miss by a third).
		want := rate * float64(len(regions))
		p.Dropped = run.DroppedArrivals
		p.OK = p.Errors == 0 && p.Dropped == 0 && p.WorstP99Ms < mo.P99BoundMs && (mo.P50BoundMs <= 0 || p.WorstP50Ms < mo.P50BoundMs) && (p.Achieved >= 0.8*want || want*mo.Probe.Seconds() < 200)
		if res.Base != nil && !withinBase(p, *res.Base, mo.P50Factor) {
			p.OK = false
		}
		if log != nil {
			servers := ""
			if len(pids) > 0 {
				servers = fmt.Sprintf(" (servers %.2f)", p.ServerCPUCores)
			}
			fmt.Fprintf(log, "  probe %6.0f ops/s per region: achieved %7.0f ops/s, worst p50 %6.1f ms, p99 %7.1f ms, errors %d, CPU %.2f cores%s -> %s\n",
				rate, p.Achieved, p.WorstP50Ms, p.WorstP99Ms, p.Errors, p.CPUCores, servers, map[bool]string{true: "ok", false: "over"}[p.OK])
		}
		if !candidate {
			return p, nil // the base or the 70% probe: neither a candidate nor a cooldown
		}
		res.Probes = append(res.Probes, p)
		if !p.OK && !mo.Fresh {
			select {
			case <-ctx.Done():
			case <-time.After(mo.Cooldown):
			}
		}
		if p.OK && p.Achieved > res.BestOps {
			res.BestOps, res.BestP99Ms, res.BestP50Ms, res.CPUCores, res.ServerCPUCores = p.Achieved, p.WorstP99Ms, p.WorstP50Ms, p.CPUCores, p.ServerCPUCores
		}
		return p, nil
	}
	// A probe over the bound is tried once more (after the cooldown) before the rate counts
	// as over: one transient spike — a compaction, a replica move, the host's other work —
	// must not cap the whole search below the rate the system holds (bench elastic: one
	// 600 ms p99 at half the saturated rate ended a search at 0.4 of it).
	confirmed := func(rate float64) (Probe, error) {
		p, err := probe(rate, true)
		if err != nil || p.OK {
			return p, err
		}
		return probe(rate, true)
	}
	if mo.P50Factor > 0 {
		base, err := probe(mo.BaseRatePerRegion, false)
		if err != nil {
			return res, fmt.Errorf("bench: base probe: %w", err)
		}
		if base.Errors > 0 || len(base.RegionP50Ms) == 0 {
			return res, fmt.Errorf("bench: base probe at %.0f ops/s per region: %d errors, medians %v: no base latency to scale", mo.BaseRatePerRegion, base.Errors, base.RegionP50Ms)
		}
		res.Base = &base
		if log != nil {
			fmt.Fprintf(log, "  base medians %s: bounds ×%.2f\n", formatRegionMs(base.RegionP50Ms), mo.P50Factor)
		}
	}
	good, bad := 0.0, 0.0
	for rate := mo.StartRatePerRegion; rate < 1e7; rate *= 2 {
		p, err := confirmed(rate)
		if err != nil {
			return res, err
		}
		if !p.OK {
			bad = rate
			break
		}
		good = rate
	}
	for range mo.Bisections {
		if bad == 0 || ctx.Err() != nil {
			break
		}
		mid := (good + bad) / 2
		p, err := confirmed(mid)
		if err != nil {
			return res, err
		}
		if p.OK {
			good = mid
		} else {
			bad = mid
		}
	}
	if mo.P50Factor > 0 && good > 0 && ctx.Err() == nil {
		// The thesis's "median at 70% load": 70% of the highest rate that held the bounds.
		p, err := probe(0.7*good, false)
		if err != nil {
			return res, err
		}
		res.Load70 = &p
	}
	if nodes > 0 {
		res.OpsPerNode = res.BestOps / float64(nodes)
	}
	if res.CPUCores > 0 {
		res.OpsPerCore = res.BestOps / res.CPUCores
	}
	if res.BestOps > 0 {
		res.CPUUsPerOp = res.CPUCores / res.BestOps * 1e6
		res.ServerCPUUsPerOp = res.ServerCPUCores / res.BestOps * 1e6
	}
	return res, nil
}

// processCPUSeconds is this process's user+system CPU time.
func processCPUSeconds() float64 {
	v, err := procCPU(os.Getpid())
	if err != nil {
		return SelfCPUSeconds()
	}
	return v
}

// machineCPUSeconds is the machine's busy CPU time (every core, every process) from
// /proc/stat, in seconds; 0 when unreadable.
func machineCPUSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	// user nice system idle iowait irq softirq steal: everything but idle and iowait.
	for i, v := range f[1:min(len(f), 9)] {
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseFloat(v, 64)
		busy += n
	}
	return busy / 100 // USER_HZ is 100 on Linux
}

// PrintMax writes one row per configuration: the highest throughput, its latencies, per node,
// and the CPU it cost (the servers' own CPU where the session knows their processes).
func PrintMax(w io.Writer, rs []*MaxResult) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tops/s\tp50 ms\tp99 ms\tops/s per node\tmachine CPU cores\tmachine CPU µs/op\tserver CPU cores\tserver CPU µs/op\t")
	for _, r := range rs {
		server := "-\t-"
		if r.ServerCPUCores > 0 {
			server = fmt.Sprintf("%.2f\t%.0f", r.ServerCPUCores, r.ServerCPUUsPerOp)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.1f\t%.0f\t%.2f\t%.0f\t%s\t\n", r.Config, r.BestOps, r.BestP50Ms, r.BestP99Ms, r.OpsPerNode, r.CPUCores, r.CPUUsPerOp, server)
	}
	tw.Flush()
}

// formatRegionMs prints region medians in a stable order.
func formatRegionMs(m map[string]float64) string {
	var b strings.Builder
	for i, r := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%.1f", r, m[r])
	}
	return b.String()
}

// PrintMaxMedians writes, for the searches with a relative median bound (P50Factor), each
// region's median unloaded and at 70% of the highest rate (the Canopus thesis's Fig. 4.6/4.7
// report both); nothing when no search had one.
func PrintMaxMedians(w io.Writer, rs []*MaxResult) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	header := false
	for _, r := range rs {
		if r.Base == nil {
			continue
		}
		if !header {
			fmt.Fprintln(tw, "configuration\tregion\tbase p50 ms\tbound ms\t70% load ops/s\tp50 ms\t")
			header = true
		}
		for _, region := range slices.Sorted(maps.Keys(r.Base.RegionP50Ms)) {
			at70, rate70 := "-", "-"
			if r.Load70 != nil {
				at70, rate70 = fmt.Sprintf("%.1f", r.Load70.RegionP50Ms[region]), fmt.Sprintf("%.0f", r.Load70.Achieved)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%s\t%s\t\n", r.Config, region, r.Base.RegionP50Ms[region], r.P50Factor*r.Base.RegionP50Ms[region], rate70, at70)
		}
	}
	tw.Flush()
}

// withinBase reports whether every region's median in p stays under factor times its median
// in base; a region base measured that p lacks (no operation completed there) is over.
func withinBase(p, base Probe, factor float64) bool {
	for region, b := range base.RegionP50Ms {
		got, ok := p.RegionP50Ms[region]
		if !ok || got >= factor*b {
			return false
		}
	}
	return true
}
