package chart

import (
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"meridian/internal/tools/bench"
)

// fallbackNote marks, in the legend, runs whose CDF was built from p50/p99/p99.9 only.
const fallbackNote = " (p50/p99/p99.9 only)"

// lowerBoundStyle is the dashed grey line of the lower bound in CDF panels.
var lowerBoundStyle = draw.LineStyle{
	Color:  grey(80),
	Width:  vg.Points(1.2),
	Dashes: []vg.Length{vg.Points(5), vg.Points(3)},
}

// LatencyCDF draws, for one operation ("read", "write", or "scan", "insert", "rmw" when the
// workload issued them), one panel per region (rep.Regions order, else sorted; at most three
// panels per row) with one line per run (legend = run.Label()): x = latency in ms, logarithmic
// when the panel's max/min ratio exceeds 20, y = cumulative fraction from OpStats.Percentiles
// (percentiles in 0..100). A run without Percentiles falls back to the three points
// p50/p99/p99.9, drawn with markers and flagged in the legend. Each panel has a dashed vertical
// line at the smallest positive LowerBoundMs among its runs, labelled "lower bound".
// The format is chosen by path's extension (.png or .svg).
func LatencyCDF(rep *bench.Report, op string, path string) error {
	if _, err := checkFormat(path); err != nil {
		return err
	}
	f, err := buildLatencyCDF(rep, op)
	if err != nil {
		return err
	}
	return f.save(path)
}

// cdfPoints returns the CDF of s as (ms, fraction) points and whether it is the 3-point fallback.
func cdfPoints(s *bench.OpStats) (plotter.XYs, bool) {
	var pts plotter.XYs
	for _, pr := range s.Percentiles {
		if !finite(pr[0], pr[1]) || pr[0] < 0 || pr[0] > 100 {
			continue
		}
		pts = append(pts, plotter.XY{X: math.Max(pr[1], 0), Y: pr[0] / 100})
	}
	if len(pts) > 0 {
		sort.SliceStable(pts, func(i, j int) bool { return pts[i].Y < pts[j].Y })
		// Latency is non-decreasing in the percentile; smooth out rounding noise.
		for i := 1; i < len(pts); i++ {
			pts[i].X = math.Max(pts[i].X, pts[i-1].X)
		}
		return pts, false
	}
	for _, q := range []struct{ ms, frac float64 }{{s.P50Ms, 0.5}, {s.P99Ms, 0.99}, {s.P999Ms, 0.999}} {
		if finite(q.ms) && q.ms >= 0 && (q.ms > 0 || s.Count > 0) {
			pts = append(pts, plotter.XY{X: q.ms, Y: q.frac})
		}
	}
	for i := 1; i < len(pts); i++ {
		pts[i].X = math.Max(pts[i].X, pts[i-1].X)
	}
	return pts, true
}

func buildLatencyCDF(rep *bench.Report, op string) (*figure, error) {
	if err := checkReport(rep); err != nil {
		return nil, err
	}
	if err := checkOp(op); err != nil {
		return nil, err
	}
	fallback := make([]bool, len(rep.Runs))
	used := make([]bool, len(rep.Runs))
	var panels []*plot.Plot
	for _, region := range regionOrder(rep) {
		type series struct {
			run      int
			pts      plotter.XYs
			fallback bool
		}
		var lines []series
		lb := math.Inf(1)
		for i := range rep.Runs {
			s := runOp(&rep.Runs[i], region, op)
			if s == nil {
				continue
			}
			if s.LowerBoundMs > 0 && finite(s.LowerBoundMs) {
				lb = math.Min(lb, s.LowerBoundMs)
			}
			pts, fb := cdfPoints(s)
			if len(pts) == 0 {
				continue
			}
			lines = append(lines, series{i, pts, fb})
		}
		if len(lines) == 0 {
			continue
		}

		// Log scale when the panel's latencies span more than logRatio.
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, l := range lines {
			for _, p := range l.pts {
				lo, hi = math.Min(lo, p.X), math.Max(hi, p.X)
			}
		}
		if !math.IsInf(lb, 0) {
			lo, hi = math.Min(lo, lb), math.Max(hi, lb)
		}
		logX := hi > 0 && hi/math.Max(lo, minLogMs) > logRatio
		xLabel := "latency (ms)"
		if logX {
			xLabel = "latency (ms, log scale)"
		}

		p := newPanel(region, xLabel, "cumulative fraction")
		if logX {
			useLogX(p)
		}
		for _, l := range lines {
			pts := l.pts
			if logX {
				pts = make(plotter.XYs, len(l.pts))
				for k, q := range l.pts {
					pts[k] = plotter.XY{X: math.Max(q.X, minLogMs), Y: q.Y}
				}
			}
			ln, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, fmt.Errorf("chart: %s CDF of %q in %s: %w", op, rep.Runs[l.run].Label(), region, err)
			}
			ln.LineStyle = runLine(l.run)
			p.Add(ln)
			if l.fallback {
				sc.GlyphStyle = draw.GlyphStyle{Color: runColor(l.run), Radius: vg.Points(3.5), Shape: plotutil.Shape(l.run)}
				p.Add(sc)
				fallback[l.run] = true
			}
			used[l.run] = true
		}
		if !math.IsInf(lb, 0) {
			x := lb
			if logX {
				x = math.Max(x, minLogMs)
			}
			p.Add(vline{X: x, Label: fmt.Sprintf("lower bound %s ms", fmtMs(lb)), Style: lowerBoundStyle})
		}
		p.Y.Min, p.Y.Max = 0, 1
		p.Y.Tick.Marker = fractionTicks
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil, fmt.Errorf("chart: report %q has no %s latencies in any run", rep.Topology, op)
	}

	f := &figure{
		title:  withTopology(op+" latency CDF", rep.Topology),
		panels: gridOf(panels, 3),
	}
	for i, run := range rep.Runs {
		if !used[i] {
			continue
		}
		label := run.Label()
		thumbs := []plot.Thumbnailer{lineThumb(runLine(i))}
		if fallback[i] {
			label += fallbackNote
		}
		f.legend = append(f.legend, legendItem{label: label, thumbs: thumbs})
	}
	f.legend = append(f.legend, legendItem{label: "lower bound", thumbs: []plot.Thumbnailer{lineThumb(lowerBoundStyle)}})
	return f, nil
}

// fmtMs formats a latency with about three significant digits.
func fmtMs(ms float64) string {
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.2f", ms)
	}
}

// fractionTicks label every 0.2 of a cumulative fraction, with minor ticks every 0.1.
var fractionTicks = func() plot.ConstantTicks {
	var ts plot.ConstantTicks
	for i := 0; i <= 10; i++ {
		t := plot.Tick{Value: float64(i) / 10}
		if i%2 == 0 {
			t.Label = fmt.Sprintf("%.1f", t.Value)
		}
		ts = append(ts, t)
	}
	return ts
}()
