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
)

// Series is one line of a Lines or CombinedCDF chart: (x, y) points, drawn in the i-th run
// colour of the house style (i = its index), solid or dashed.
type Series struct {
	Name   string
	Points [][2]float64
	Dashed bool
}

// seriesDashes is the dash pattern of dashed series.
var seriesDashes = []vg.Length{vg.Points(6), vg.Points(3)}

// Lines draws series as lines (with point markers when a series has at most 20 points) in one
// panel with linear axes; the Y axis starts at 0 when no value is negative. Points are drawn
// in X order; non-finite points are skipped, and so are series left without points (none at
// all is an error). The format is chosen by path's extension (.png or .svg).
func Lines(title, xLabel, yLabel string, series []Series, path string) error {
	if _, err := checkFormat(path); err != nil {
		return err
	}
	f, err := buildLines(title, xLabel, yLabel, series, false)
	if err != nil {
		return err
	}
	return f.save(path)
}

// CombinedCDF draws latency CDFs given as (ms, cumulative fraction 0..1) points, one line per
// series, in one panel: x logarithmic when the latencies span more than a factor of 20 (as in
// LatencyCDF), y from 0 to 1.
func CombinedCDF(title string, series []Series, path string) error {
	if _, err := checkFormat(path); err != nil {
		return err
	}
	f, err := buildLines(title, "latency (ms)", "cumulative fraction of requests", series, true)
	if err != nil {
		return err
	}
	return f.save(path)
}

func buildLines(title, xLabel, yLabel string, series []Series, cdf bool) (*figure, error) {
	type line struct {
		i   int
		pts plotter.XYs
	}
	var lines []line
	lo, hi, ymin := math.Inf(1), math.Inf(-1), math.Inf(1)
	for i, s := range series {
		var pts plotter.XYs
		for _, p := range s.Points {
			if !finite(p[0], p[1]) {
				continue
			}
			pts = append(pts, plotter.XY{X: p[0], Y: p[1]})
			lo, hi, ymin = math.Min(lo, p[0]), math.Max(hi, p[0]), math.Min(ymin, p[1])
		}
		if len(pts) == 0 {
			continue
		}
		sort.SliceStable(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
		lines = append(lines, line{i, pts})
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("chart: %q: no series has a finite point", title)
	}
	logX := cdf && hi > 0 && hi/math.Max(lo, minLogMs) > logRatio
	if logX {
		xLabel = "latency (ms, log scale)"
	}
	p := newPanel("", xLabel, yLabel)
	if logX {
		useLogX(p)
	}
	f := &figure{title: title, panels: [][]*plot.Plot{{p}}}
	for _, l := range lines {
		pts := l.pts
		if logX {
			pts = make(plotter.XYs, len(l.pts))
			for k, q := range l.pts {
				pts[k] = plotter.XY{X: math.Max(q.X, minLogMs), Y: q.Y}
			}
		}
		sty := draw.LineStyle{Color: runColor(l.i), Width: lineWidth}
		if series[l.i].Dashed {
			sty.Dashes = seriesDashes
		}
		ln, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("chart: %q: series %q: %w", title, series[l.i].Name, err)
		}
		ln.LineStyle = sty
		p.Add(ln)
		if len(pts) <= markerMax {
			sc.GlyphStyle = draw.GlyphStyle{Color: runColor(l.i), Radius: vg.Points(3), Shape: plotutil.Shape(l.i)}
			p.Add(sc)
		}
		f.legend = append(f.legend, legendItem{label: series[l.i].Name, thumbs: []plot.Thumbnailer{lineThumb(sty)}})
	}
	if cdf {
		p.Y.Min, p.Y.Max = 0, 1
		p.Y.Tick.Marker = fractionTicks
	} else if ymin >= 0 {
		p.Y.Min = 0
		if p.Y.Max <= 0 {
			p.Y.Max = 1
		}
		p.Y.Max *= 1.05
	}
	return f, nil
}
