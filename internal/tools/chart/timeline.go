package chart

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"meridian/internal/tools/bench"
)

// markerMax is the longest series that still gets point markers (shorter ones would otherwise
// be hard to see, a single point invisible).
const markerMax = 20

// ThroughputOverTime draws ops/s against time (top panel) and p99 latency against time (bottom
// panel) for each run that has a Timeline; runs without one are left out, and a report where no
// run has one is an error. The format is chosen by path's extension (.png or .svg).
func ThroughputOverTime(rep *bench.Report, path string) error {
	if _, err := checkFormat(path); err != nil {
		return err
	}
	f, err := buildThroughputOverTime(rep)
	if err != nil {
		return err
	}
	return f.save(path)
}

func buildThroughputOverTime(rep *bench.Report) (*figure, error) {
	if err := checkReport(rep); err != nil {
		return nil, err
	}
	top := newPanel("throughput", "time (s)", "ops/s")
	bottom := newPanel("p99 latency", "time (s)", "p99 latency (ms)")
	f := &figure{title: withTopology("throughput over time", rep.Topology), panels: [][]*plot.Plot{{top}, {bottom}}}
	tMin, tMax := math.Inf(1), math.Inf(-1)
	for i, run := range rep.Runs {
		var ops, p99 plotter.XYs
		for _, tp := range run.Timeline {
			if !finite(tp.TSec) {
				continue
			}
			if finite(tp.OpsPerS) {
				ops = append(ops, plotter.XY{X: tp.TSec, Y: tp.OpsPerS})
			}
			if finite(tp.P99Ms) {
				p99 = append(p99, plotter.XY{X: tp.TSec, Y: tp.P99Ms})
			}
			tMin, tMax = math.Min(tMin, tp.TSec), math.Max(tMax, tp.TSec)
		}
		if len(ops)+len(p99) == 0 {
			continue
		}
		sty := runLine(i)
		glyph := draw.GlyphStyle{Color: runColor(i), Radius: vg.Points(2.5), Shape: plotutil.Shape(i)}
		for _, s := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{top, ops}, {bottom, p99}} {
			if len(s.xys) == 0 {
				continue
			}
			ln, sc, err := plotter.NewLinePoints(s.xys)
			if err != nil {
				return nil, fmt.Errorf("chart: timeline of %q: %w", run.Label(), err)
			}
			ln.LineStyle = sty
			s.p.Add(ln)
			if len(s.xys) <= markerMax {
				sc.GlyphStyle = glyph
				s.p.Add(sc)
			}
		}
		thumbs := []plot.Thumbnailer{lineThumb(sty)}
		label := run.Label()
		if run.ThroughputOps > 0 && finite(run.ThroughputOps) {
			label += fmt.Sprintf(" (%s ops/s)", fmtOps(run.ThroughputOps))
		}
		f.legend = append(f.legend, legendItem{label: label, thumbs: thumbs})
	}
	if len(f.legend) == 0 {
		return nil, fmt.Errorf("chart: no run of report %q has a timeline", rep.Topology)
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.Y.Min = 0
		p.Y.Max *= 1.05
		if tMin < tMax {
			p.X.Min, p.X.Max = tMin, tMax
		}
	}
	return f, nil
}

// fmtOps formats a throughput compactly (12.3k, 456).
func fmtOps(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
