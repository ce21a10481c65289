package repro

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// GlobLeaseSpikeOptions describe the elasticity experiment of liu-thesis Fig. 4.10: a
// read-dominant workload with Zipfian exponent 4 jumps from 400 to 1,800 requests/s; hot-key
// replicas (affiliated nodes) take the hottest keys' reads off their hosts.
type GlobLeaseSpikeOptions struct {
	Topology *topology.Topology
	// NodesPerRegion: the host of each partition plus the nodes that can become affiliated
	// nodes (default 3).
	NodesPerRegion int
	// NodeCapacityOps is each node's service bench.capacity (default 300 requests/s).
	NodeCapacityOps float64
	Records         int     // default 1,000
	ValueBytes      int     // default 1,024
	ReadShare       float64 // default 1: the thesis's skewed experiments are read workloads
	ZipfExponent    float64 // default 4 (thesis Table 4.2)
	// BeforeRate and AfterRate are total request rates (split evenly over the regions).
	BeforeRate, AfterRate float64 // defaults 400 and 1,800
	// Warmup, then Before at BeforeRate, then After at AfterRate (measured: Before + After).
	Warmup, Before, After time.Duration // defaults 20s, 20s, 40s
	ClientsPerRegion      int           // open-loop worker pool (default 256)
	Seed                  uint64
	Log, Progress         io.Writer
}

func (o *GlobLeaseSpikeOptions) ensureDefaults() {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.NodesPerRegion <= 0 {
		o.NodesPerRegion = 3
	}
	def(&o.NodeCapacityOps, 300)
	if o.Records <= 0 {
		o.Records = 1000
	}
	if o.ValueBytes <= 0 {
		o.ValueBytes = 1024
	}
	def(&o.ReadShare, 1)
	def(&o.ZipfExponent, 4)
	def(&o.BeforeRate, 400)
	def(&o.AfterRate, 1800)
	if o.Warmup <= 0 {
		o.Warmup = 20 * time.Second
	}
	if o.Before <= 0 {
		o.Before = 20 * time.Second
	}
	if o.After <= 0 {
		o.After = 40 * time.Second
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 256
	}
}

// SpikeResult is one configuration's run and what it shows.
type SpikeResult struct {
	HotKeys bool      `json:"hot_keys"`
	Run     bench.Run `json:"run"`
	// BaselineMs is the mean latency over the seconds before the spike.
	BaselineMs float64 `json:"baseline_ms"`
	// PeakMs is the highest per-second mean latency after the spike.
	PeakMs float64 `json:"peak_ms"`
	// RecoverySec is the time from the spike until the per-second mean latency is back within
	// 1.5× the baseline (+2 ms) and stays there for 5 s; -1 if it never is.
	RecoverySec float64 `json:"recovery_s"`
	// AfterMs is the mean latency over the last 10 s.
	AfterMs float64 `json:"after_ms"`
}

// GlobLeaseSpike runs the spike with hot-key replicas off and on (same seed and load).
func GlobLeaseSpike(ctx context.Context, o GlobLeaseSpikeOptions) ([]SpikeResult, error) {
	o.ensureDefaults()
	w, err := ycsb.Core("b")
	if err != nil {
		return nil, err
	}
	w.Name = "spike"
	w.RecordCount = o.Records
	w.FieldCount, w.FieldLength = 1, o.ValueBytes
	w.ReadProportion, w.UpdateProportion, w.InsertProportion = o.ReadShare, 1-o.ReadShare, 0
	w.RequestDistribution = ycsb.DistZipfian
	w.ZipfianConstant = o.ZipfExponent
	regions := float64(len(o.Topology.Regions))
	var out []SpikeResult
	for _, hot := range []bool{false, true} {
		cfg := bench.Config{Protocol: "globlease", Options: map[string]string{"hot_keys": fmt.Sprint(hot)}}
		target := &bench.EmulatedTarget{Topo: o.Topology, NodesPerRegion: o.NodesPerRegion, Partitions: 16, Seed: o.Seed,
			NodeCapacityOps: o.NodeCapacityOps}
		ro := bench.RunOptions{Workload: w, ClientsPerRegion: o.ClientsPerRegion, RatePerRegion: o.BeforeRate / regions,
			RateSteps: []bench.RateStep{{At: o.Warmup + o.Before, PerRegion: o.AfterRate / regions}},
			Warmup:    o.Warmup, Duration: o.Before + o.After, Seed: o.Seed, Progress: o.Progress}
		rep, err := bench.Compare(ctx, target, []bench.Config{cfg}, ro, o.Log)
		if err != nil {
			return out, err
		}
		out = append(out, summarizeSpike(hot, rep.Runs[0], o.Before.Seconds()))
	}
	return out, nil
}

// summarizeSpike reads the per-second timeline of a spike run (t counts measured seconds; the
// spike happens at spikeAt).
func summarizeSpike(hot bool, run bench.Run, spikeAt float64) SpikeResult {
	res := SpikeResult{HotKeys: hot, Run: run, RecoverySec: -1}
	var sum, n float64
	for _, p := range run.Timeline {
		if p.TSec <= spikeAt && p.OpsPerS > 0 {
			sum += p.MeanMs * p.OpsPerS
			n += p.OpsPerS
		}
	}
	if n > 0 {
		res.BaselineMs = sum / n
	}
	limit := 1.5*res.BaselineMs + 2
	const stay = 5
	var after []bench.TimePoint
	for _, p := range run.Timeline {
		if p.TSec > spikeAt {
			after = append(after, p)
			res.PeakMs = math.Max(res.PeakMs, p.MeanMs)
		}
	}
	for i := range after {
		ok := i+stay <= len(after)
		for j := i; ok && j < i+stay; j++ {
			ok = after[j].MeanMs <= limit
		}
		if ok {
			res.RecoverySec = after[i].TSec - 1 - spikeAt
			break
		}
	}
	sum, n = 0, 0
	for _, p := range after[max(0, len(after)-10):] {
		sum += p.MeanMs * p.OpsPerS
		n += p.OpsPerS
	}
	if n > 0 {
		res.AfterMs = sum / n
	}
	return res
}

// SpikeMarkdown renders the spike results as a table.
func SpikeMarkdown(rs []SpikeResult) string {
	var b strings.Builder
	b.WriteString("| hot-key replicas | mean before spike (ms) | peak per-second mean (ms) | back to normal after (s) | mean over the last 10 s (ms) | affiliated reads | secondary grants |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rs {
		rec := "never"
		if r.RecoverySec >= 0 {
			rec = fmt.Sprintf("%.0f", r.RecoverySec)
		}
		on := "off"
		if r.HotKeys {
			on = "on"
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %s | %.1f | %d | %d |\n", on, r.BaselineMs, r.PeakMs, rec, r.AfterMs,
			r.Run.ProtocolCounters["reads_affiliate"], r.Run.ProtocolCounters["secondary_grants"])
	}
	return b.String()
}
