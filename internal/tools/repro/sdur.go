package repro

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"meridian/internal/sdur"
	"meridian/internal/tools/chart"
	"meridian/internal/tools/txnsim"
)

// The Geo-SDUR evaluation (geo-sdur-deferred-update-replication.txt, section VI) on the
// simulated cluster of internal/tools/txnsim: two partitions of three replicas on ec2-sdur-3
// (EU, US-East, US-West), every partition's atomic broadcast an etcd raft group, every message
// delayed by its region pair's one-way delay, in virtual time.
//
//   - Fig. 2: local and global p99 and throughput at 0/1/10/50% globals, WAN 1 and WAN 2;
//   - Fig. 3: delaying (WAN 1) with fixed Δ and with Δ estimated from measured delivery times;
//   - Figs. 4-5: reordering with thresholds k (entries) and with the automatic threshold in
//     ticks (the measured wait of globals for their votes);
//   - Fig. 6: the social network (85% timeline, 7.5% post, 7.5% follow);
//   - beyond the paper: automatic delaying and threshold together against the 0%-globals run;
//   - sdur against 2pc on the same workloads.
//
// What the simulation does not model: CPU and disk contention (the paper ran single-core EC2
// instances, whose queueing is most of its 32.6 ms local latency at 0% globals); here a Raft
// append costs DiskSync (1 ms) and the load is closed-loop clients, so latencies are the
// network's and the protocol's, and throughputs are those of the clients, not of saturated
// servers.

// SDURFigOptions configure SDURFigures. Zero values take the defaults named.
type SDURFigOptions struct {
	Topology string // default ec2-sdur-3
	// Warmup and Duration of each run, in virtual time (defaults 3s, 20s).
	Warmup, Duration time.Duration
	// ClientsPerRegion: closed-loop clients next to each partition's preferred server
	// (default 16).
	ClientsPerRegion int
	// Mixes: percentages of global transactions (default 0, 1, 10, 50).
	Mixes []float64
	// Delays: fixed Δ of Fig. 3 (default 20ms, 45ms).
	Delays []time.Duration
	// Thresholds: k of Figs. 4-5 in entries (default 80, 320).
	Thresholds []uint64
	Seed       uint64
	// OutDir receives the charts (sdur-*.png); "" draws none.
	OutDir   string
	Progress io.Writer
}

func (o SDURFigOptions) withDefaults() SDURFigOptions {
	if o.Topology == "" {
		o.Topology = "ec2-sdur-3"
	}
	if o.Warmup == 0 {
		o.Warmup = 3 * time.Second
	}
	if o.Duration == 0 {
		o.Duration = 20 * time.Second
	}
	if o.ClientsPerRegion == 0 {
		o.ClientsPerRegion = 16
	}
	if o.Mixes == nil {
		o.Mixes = []float64{0, 1, 10, 50}
	}
	if o.Delays == nil {
		o.Delays = []time.Duration{20 * time.Millisecond, 45 * time.Millisecond}
	}
	if o.Thresholds == nil {
		o.Thresholds = []uint64{80, 320}
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// SDURRun is one simulated run.
type SDURRun struct {
	Figure     string  `json:"figure"`
	Deployment string  `json:"deployment"`
	Mode       string  `json:"mode"`
	Config     string  `json:"config"`
	Workload   string  `json:"workload"`
	GlobalPct  float64 `json:"global_pct"`
	// Classes: per class (local, global, readonly; the social operations) and region, then
	// per class over all regions ("all").
	Classes   []txnsim.ClassStats `json:"classes"`
	Reordered int                 `json:"reordered"`
	Retunes   int                 `json:"retunes"`
	WallMs    int64               `json:"wall_ms"`
}

// class returns the all-regions stats of a class (zero if absent).
func (r *SDURRun) class(c string) txnsim.ClassStats {
	for _, s := range r.Classes {
		if s.Class == c && s.Region == "all" {
			return s
		}
	}
	return txnsim.ClassStats{}
}

// SDURFigResult is every run and the topology's RTTs the targets refer to.
type SDURFigResult struct {
	Options SDURFigOptions `json:"options"`
	Runs    []*SDURRun     `json:"runs"`
	// RTTMs is the EU - US-East RTT (the global's wide-area round trip in WAN 1).
	RTTMs  float64  `json:"rtt_ms"`
	Charts []string `json:"charts"`
}

// SDURFigures runs the evaluation.
func SDURFigures(ctx context.Context, o SDURFigOptions) (*SDURFigResult, error) {
	o = o.withDefaults()
	res := &SDURFigResult{Options: o, RTTMs: 90}
	run := func(fig string, dep txnsim.Deployment, mode, config, workload string, pct float64, to txnsim.Options) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		to.Mode, to.Seed, to.Topology, to.Deployment, to.GlobalPct = mode, o.Seed, o.Topology, dep, pct
		to.Workload = txnsim.Workload(workload)
		to.Warmup, to.Duration, to.ClientsPerRegion = o.Warmup, o.Duration, o.ClientsPerRegion
		to.Quiesce = 5 * time.Second
		start := time.Now()
		r, err := txnsim.Run(to)
		if err != nil {
			return fmt.Errorf("%s %s %s %s %v%%: %w", fig, dep, mode, config, pct, err)
		}
		run := &SDURRun{Figure: fig, Deployment: string(dep), Mode: mode, Config: config, Workload: workload, GlobalPct: pct,
			Classes: r.Stats.Summary(), Reordered: r.Stats.Reordered, Retunes: r.Stats.Retunes, WallMs: time.Since(start).Milliseconds()}
		res.Runs = append(res.Runs, run)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "%-7s %-4s %-4s %-22s %-6s %4.0f%%  local p99 %6.1f ms  global p99 %6.1f ms  (%v)\n", fig, dep, mode, config, workload, pct,
				run.class("local").P99Ms, run.class("global").P99Ms, time.Since(start).Round(time.Millisecond))
		}
		return nil
	}
	auto := txnsim.Options{AutoDelay: true, AutoThreshold: true}
	for _, dep := range []txnsim.Deployment{txnsim.WAN1, txnsim.WAN2} {
		for _, pct := range o.Mixes {
			if err := run("fig2", dep, "sdur", "baseline", "micro", pct, txnsim.Options{}); err != nil {
				return res, err
			}
		}
	}
	for _, pct := range nonZero(o.Mixes) {
		for _, d := range o.Delays {
			if err := run("fig3", txnsim.WAN1, "sdur", "delay "+d.String(), "micro", pct, txnsim.Options{Delay: d}); err != nil {
				return res, err
			}
		}
		if err := run("fig3", txnsim.WAN1, "sdur", "delay auto", "micro", pct, txnsim.Options{AutoDelay: true}); err != nil {
			return res, err
		}
	}
	for _, dep := range []txnsim.Deployment{txnsim.WAN1, txnsim.WAN2} {
		fig := map[txnsim.Deployment]string{txnsim.WAN1: "fig4", txnsim.WAN2: "fig5"}[dep]
		for _, pct := range nonZero(o.Mixes) {
			for _, k := range o.Thresholds {
				if err := run(fig, dep, "sdur", fmt.Sprintf("reorder k=%d", k), "micro", pct, txnsim.Options{Threshold: sdur.Threshold{Unit: sdur.Entries, K: k}}); err != nil {
					return res, err
				}
			}
			if err := run(fig, dep, "sdur", "reorder auto", "micro", pct, txnsim.Options{AutoThreshold: true}); err != nil {
				return res, err
			}
			if err := run("beyond", dep, "sdur", "reorder auto + delay auto", "micro", pct, auto); err != nil {
				return res, err
			}
			if err := run("vs2pc", dep, "2pc", "2pc", "micro", pct, txnsim.Options{}); err != nil {
				return res, err
			}
		}
	}
	for _, dep := range []txnsim.Deployment{txnsim.WAN1, txnsim.WAN2} {
		if err := run("fig6", dep, "sdur", "baseline", "social", 0, txnsim.Options{}); err != nil {
			return res, err
		}
		if err := run("fig6", dep, "sdur", "reorder auto + delay auto", "social", 0, auto); err != nil {
			return res, err
		}
		if err := run("fig6", dep, "2pc", "2pc", "social", 0, txnsim.Options{}); err != nil {
			return res, err
		}
	}
	if o.OutDir != "" {
		if err := res.charts(o.OutDir); err != nil {
			return res, err
		}
	}
	return res, nil
}

func nonZero(xs []float64) []float64 {
	var out []float64
	for _, x := range xs {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

// find returns the run of a figure, deployment, config and mix.
func (r *SDURFigResult) find(fig, dep, config string, pct float64) *SDURRun {
	for _, run := range r.Runs {
		if run.Figure == fig && run.Deployment == dep && run.Config == config && run.GlobalPct == pct {
			return run
		}
	}
	return nil
}

// charts draws local and global p99 against the share of globals, per deployment: the
// baseline, the paper's techniques and the automatic ones.
func (r *SDURFigResult) charts(dir string) error {
	for _, dep := range []string{"wan1", "wan2"} {
		for _, class := range []string{"local", "global"} {
			var series []chart.Series
			add := func(name, fig, config string) {
				s := chart.Series{Name: name}
				for _, pct := range r.Options.Mixes {
					f := fig
					if pct == 0 {
						f, config = "fig2", map[bool]string{true: "baseline", false: config}[fig == "fig2"]
					}
					run := r.find(f, dep, config, pct)
					if run == nil || (pct == 0 && fig != "fig2") {
						continue
					}
					if c := run.class(class); c.Commits > 0 {
						s.Points = append(s.Points, [2]float64{pct, c.P99Ms})
					}
				}
				if len(s.Points) > 0 {
					series = append(series, s)
				}
			}
			add("SDUR (baseline)", "fig2", "baseline")
			if dep == "wan1" {
				add("delay 20ms", "fig3", "delay 20ms")
				add("delay auto", "fig3", "delay auto")
			}
			fig := map[string]string{"wan1": "fig4", "wan2": "fig5"}[dep]
			for _, k := range r.Options.Thresholds {
				add(fmt.Sprintf("reorder k=%d", k), fig, fmt.Sprintf("reorder k=%d", k))
			}
			add("reorder auto", fig, "reorder auto")
			add("reorder auto + delay auto", "beyond", "reorder auto + delay auto")
			add("2PC", "vs2pc", "2pc")
			path := filepath.Join(dir, fmt.Sprintf("sdur-%s-%s-p99.png", dep, class))
			title := fmt.Sprintf("Geo-SDUR %s: %s transactions, p99 (ec2-sdur-3, simulated)", strings.ToUpper(dep), class)
			if err := chart.Lines(title, "global transactions (%)", "p99 latency (ms)", series, path); err != nil {
				return fmt.Errorf("chart %s: %w", path, err)
			}
			r.Charts = append(r.Charts, path)
		}
	}
	return nil
}

// Markdown renders the tables.
func (r *SDURFigResult) Markdown() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "Geo-SDUR on %s, simulated (txnsim): 2 partitions × 3 replicas, %d closed-loop clients next to each partition's preferred server, %v measured after %v, seed %d.\n\n",
		o.Topology, o.ClientsPerRegion, o.Duration, o.Warmup, o.Seed)
	row := func(run *SDURRun) string {
		l, g := run.class("local"), run.class("global")
		cell := func(c txnsim.ClassStats) string {
			if c.Commits == 0 {
				return "— | — | —"
			}
			return fmt.Sprintf("%.1f | %.1f | %.0f", c.P99Ms, c.MeanMs, c.ThroughputTPS)
		}
		return fmt.Sprintf("| %s | %s | %s | %.0f%% | %s | %s | %.1f%% / %.1f%% |\n", run.Figure, run.Deployment, run.Config, run.GlobalPct, cell(l), cell(g), 100*l.AbortRate, 100*g.AbortRate)
	}
	b.WriteString("Physical lower bounds (a majority of every partition involved and back, from the client's region): ")
	if base := r.find("fig2", "wan1", "baseline", 0); base != nil {
		b.WriteString(boundLine("WAN 1", r))
	}
	b.WriteString(boundLine("WAN 2", r))
	b.WriteString("\n\n| figure | deployment | configuration | globals | local p99 (ms) | local mean (ms) | local tps | global p99 (ms) | global mean (ms) | global tps | aborts local / global |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		if run.Workload == "micro" && run.Mode == "sdur" {
			b.WriteString(row(run))
		}
	}
	b.WriteString("\n**Beyond the paper** (automatic delaying and threshold; targets: local p99 ≤ 1.25× the 0%-globals run, WAN 1 global p99 ≤ 1 RTT + 10 ms):\n\n")
	b.WriteString("| deployment | globals | local p99 (ms) | 0%-globals local p99 (ms) | ratio | global p99 (ms) | bound (ms) |\n|---|---|---|---|---|---|---|\n")
	for _, dep := range []string{"wan1", "wan2"} {
		base := r.find("fig2", dep, "baseline", 0)
		for _, pct := range nonZero(o.Mixes) {
			run := r.find("beyond", dep, "reorder auto + delay auto", pct)
			if run == nil || base == nil {
				continue
			}
			l, g, b0 := run.class("local"), run.class("global"), base.class("local")
			bound := "—"
			if dep == "wan1" {
				bound = fmt.Sprintf("%.0f", r.RTTMs+10)
			}
			fmt.Fprintf(&b, "| %s | %.0f%% | %.1f | %.1f | %.2f× | %.1f | %s |\n", dep, pct, l.P99Ms, b0.P99Ms, l.P99Ms/b0.P99Ms, g.P99Ms, bound)
		}
	}
	b.WriteString("\n**Social network** (Fig. 6; timeline is a global read-only transaction):\n\n")
	b.WriteString("| deployment | mode | configuration | timeline p99 / mean (ms) | post p99 / mean | follow-local p99 / mean | follow-global p99 / mean | aborts (post, follow-l, follow-g, timeline) |\n|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		if run.Workload != "social" {
			continue
		}
		cell := func(c string) string {
			s := run.class(c)
			if s.Commits == 0 {
				return "—"
			}
			return fmt.Sprintf("%.1f / %.1f", s.P99Ms, s.MeanMs)
		}
		ab := func(c string) string { return fmt.Sprintf("%.1f%%", 100*run.class(c).AbortRate) }
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s, %s, %s, %s |\n", run.Deployment, run.Mode, run.Config, cell("timeline"), cell("post"), cell("follow-local"), cell("follow-global"),
			ab("post"), ab("follow-local"), ab("follow-global"), ab("timeline"))
	}
	b.WriteString("\n**sdur vs 2pc** (same workload and topology; commit latency per region, p50 / p99 ms, with the physical lower bound — a majority of every partition involved and back; throughput; aborts):\n\n")
	b.WriteString("| deployment | globals | mode | class | region p50/p99 (ms) | tps | aborts |\n|---|---|---|---|---|---|---|\n")
	for _, dep := range []string{"wan1", "wan2"} {
		for _, pct := range nonZero(o.Mixes) {
			for _, run := range []*SDURRun{r.find("beyond", dep, "reorder auto + delay auto", pct), r.find("vs2pc", dep, "2pc", pct)} {
				if run == nil {
					continue
				}
				for _, class := range []string{"local", "global"} {
					var regions []string
					for _, c := range run.Classes {
						if c.Class == class && c.Region != "all" {
							regions = append(regions, fmt.Sprintf("%s %.1f/%.1f (bound %.1f)", c.Region, c.P50Ms, c.P99Ms, c.LowerBoundMs))
						}
					}
					all := run.class(class)
					fmt.Fprintf(&b, "| %s | %.0f%% | %s | %s | %s | %.0f | %.2f%% |\n", dep, pct, run.Mode, class, strings.Join(regions, ", "), all.ThroughputTPS, 100*all.AbortRate)
				}
			}
		}
	}
	for _, c := range r.Charts {
		fmt.Fprintf(&b, "\n![%s](%s)\n", filepath.Base(c), c)
	}
	return b.String()
}

// boundLine states a deployment's lower bounds per class and region from the runs' stats.
func boundLine(label string, r *SDURFigResult) string {
	dep := strings.ReplaceAll(strings.ToLower(label), " ", "")
	bounds := map[string]float64{}
	var keys []string
	for _, run := range r.Runs {
		if run.Deployment != dep || run.Mode != "sdur" {
			continue
		}
		for _, c := range run.Classes {
			if c.Region == "all" || c.LowerBoundMs == 0 && c.Class != "timeline" {
				continue
			}
			k := c.Class + " " + c.Region
			if _, ok := bounds[k]; !ok {
				keys = append(keys, k)
			}
			bounds[k] = c.LowerBoundMs
		}
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f ms", k, bounds[k]))
	}
	return label + ": " + strings.Join(parts, ", ") + ". "
}
