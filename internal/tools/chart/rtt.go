package chart

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"meridian/internal/tools/bench"
)

// Dash patterns of the latency-vs-RTT series.
var (
	p50Dashes   []vg.Length
	p99Dashes   = []vg.Length{vg.Points(7), vg.Points(3)}
	boundDashes = []vg.Length{vg.Points(1.5), vg.Points(2.5)}
)

// LatencyVsRTT draws, for op, the p50 (solid) and p99 (dashed) latency of every run label across
// the sweep points against the point's RTT (x = point.RTTMs, y = latency in ms averaged over the
// regions that have data — the topology is equidistant, so they agree), plus each run's lower
// bound (dotted; drawn once in black when several runs share it), like the MeteorShower paper's
// Figures 9/10. Runs are matched across points by Label(). Points need RTTMs; a single point is
// drawn as markers. The format is chosen by path's extension (.png or .svg).
func LatencyVsRTT(sw *bench.Sweep, op string, path string) error {
	if _, err := checkFormat(path); err != nil {
		return err
	}
	f, err := buildLatencyVsRTT(sw, op)
	if err != nil {
		return err
	}
	return f.save(path)
}

// avgOver averages field over the regions of run that have op data; ok is false without any.
func avgOver(run *bench.Run, op string, field func(*bench.OpStats) float64) (float64, bool) {
	var sum float64
	n := 0
	for region := range run.Regions {
		s := runOp(run, region, op)
		if s == nil {
			continue
		}
		if v := field(s); finite(v) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

func buildLatencyVsRTT(sw *bench.Sweep, op string) (*figure, error) {
	if sw == nil {
		return nil, errors.New("chart: nil sweep")
	}
	if len(sw.Points) == 0 {
		return nil, errors.New("chart: sweep has no points")
	}
	if err := checkOp(op); err != nil {
		return nil, err
	}
	order := make([]int, len(sw.Points))
	for i := range sw.Points {
		pt := &sw.Points[i]
		if pt.RTTMs == nil || !finite(*pt.RTTMs) {
			return nil, fmt.Errorf("chart: sweep point %d (%q) has no rtt_ms", i, pt.Topology)
		}
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return *sw.Points[order[a]].RTTMs < *sw.Points[order[b]].RTTMs })

	// Run labels in order of first appearance.
	var labels []string
	index := map[string]int{}
	for _, pt := range sw.Points {
		for _, run := range pt.Runs {
			if l := run.Label(); !contains(index, l) {
				index[l] = len(labels)
				labels = append(labels, l)
			}
		}
	}
	if len(labels) == 0 {
		return nil, errors.New("chart: sweep points have no runs")
	}

	type series struct{ p50, p99, lb plotter.XYs }
	data := make([]series, len(labels))
	for _, pi := range order {
		pt := &sw.Points[pi]
		rtt := *pt.RTTMs
		done := map[string]bool{}
		for ri := range pt.Runs {
			run := &pt.Runs[ri]
			l := run.Label()
			if done[l] {
				continue // the first run with a label wins
			}
			done[l] = true
			d := &data[index[l]]
			if v, ok := avgOver(run, op, func(s *bench.OpStats) float64 { return s.P50Ms }); ok {
				d.p50 = append(d.p50, plotter.XY{X: rtt, Y: v})
			}
			if v, ok := avgOver(run, op, func(s *bench.OpStats) float64 { return s.P99Ms }); ok {
				d.p99 = append(d.p99, plotter.XY{X: rtt, Y: v})
			}
			if v, ok := avgOver(run, op, func(s *bench.OpStats) float64 { return s.LowerBoundMs }); ok && v > 0 {
				d.lb = append(d.lb, plotter.XY{X: rtt, Y: v})
			}
		}
	}

	p := newPanel("", "RTT (ms)", op+" latency (ms)")
	f := &figure{title: op + " latency vs RTT", panels: [][]*plot.Plot{{p}}}
	drawn := false
	addSeries := func(xys plotter.XYs, sty draw.LineStyle, glyph draw.GlyphStyle) error {
		if len(xys) == 0 {
			return nil
		}
		ln, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		ln.LineStyle = sty
		sc.GlyphStyle = glyph
		p.Add(ln, sc)
		drawn = true
		return nil
	}

	// Lower bounds first so the measured lines are drawn over them. Runs sharing the same bound
	// (typical: protocols with equal quorum sizes) get one black line.
	var bounds []plotter.XYs
	shared := func(xys plotter.XYs) int {
		n := 0
		for _, d := range data {
			if sameXYs(d.lb, xys) {
				n++
			}
		}
		return n
	}
	for i, d := range data {
		if len(d.lb) == 0 {
			continue
		}
		dup := false
		for _, b := range bounds {
			dup = dup || sameXYs(b, d.lb)
		}
		if dup {
			continue
		}
		bounds = append(bounds, d.lb)
		clr := runColor(i)
		if shared(d.lb) > 1 {
			clr = grey(0)
		}
		sty := draw.LineStyle{Color: clr, Width: vg.Points(1.4), Dashes: boundDashes}
		var glyph draw.GlyphStyle
		if len(d.lb) == 1 { // a lone point has no line to show
			glyph = draw.GlyphStyle{Color: clr, Radius: vg.Points(4), Shape: dashGlyph{}}
		}
		if err := addSeries(d.lb, sty, glyph); err != nil {
			return nil, fmt.Errorf("chart: lower bound of %q: %w", labels[i], err)
		}
	}
	for i, d := range data {
		filled, open := glyphPair(i)
		glyph := draw.GlyphStyle{Color: runColor(i), Radius: vg.Points(3.5), Shape: filled}
		openGlyph := draw.GlyphStyle{Color: runColor(i), Radius: vg.Points(3.5), Shape: open}
		solid := draw.LineStyle{Color: runColor(i), Width: lineWidth, Dashes: p50Dashes}
		dashed := draw.LineStyle{Color: runColor(i), Width: lineWidth, Dashes: p99Dashes}
		if err := addSeries(d.p50, solid, glyph); err != nil {
			return nil, fmt.Errorf("chart: p50 of %q: %w", labels[i], err)
		}
		if err := addSeries(d.p99, dashed, openGlyph); err != nil {
			return nil, fmt.Errorf("chart: p99 of %q: %w", labels[i], err)
		}
		if len(d.p50)+len(d.p99) > 0 {
			f.legend = append(f.legend, legendItem{label: labels[i], thumbs: []plot.Thumbnailer{
				lineThumb(solid), thumbFunc(func(c *draw.Canvas) { c.DrawGlyph(glyph, c.Center()) }),
			}})
		}
	}
	if !drawn {
		return nil, fmt.Errorf("chart: sweep has no %s latencies in any run", op)
	}
	black := func(d []vg.Length) draw.LineStyle {
		return draw.LineStyle{Color: grey(0), Width: lineWidth, Dashes: d}
	}
	blackGlyph := func(shape draw.GlyphDrawer) thumbFunc {
		return func(c *draw.Canvas) {
			c.DrawGlyph(draw.GlyphStyle{Color: grey(0), Radius: vg.Points(3.5), Shape: shape}, c.Center())
		}
	}
	f.legend = append(f.legend,
		legendItem{label: "p50", thumbs: []plot.Thumbnailer{lineThumb(black(p50Dashes)), blackGlyph(draw.CircleGlyph{})}},
		legendItem{label: "p99", thumbs: []plot.Thumbnailer{lineThumb(black(p99Dashes)), blackGlyph(draw.RingGlyph{})}},
	)
	if len(bounds) > 0 {
		f.legend = append(f.legend, legendItem{label: "lower bound", thumbs: []plot.Thumbnailer{lineThumb(black(boundDashes))}})
	}

	p.Y.Min = 0
	p.Y.Max *= 1.05
	lo, hi := *sw.Points[order[0]].RTTMs, *sw.Points[order[len(order)-1]].RTTMs
	if lo == hi { // a single RTT: centre it on an axis from 0
		p.X.Min, p.X.Max = 0, math.Max(2*hi, 1)
	} else {
		p.X.Min = math.Min(p.X.Min, 0)
	}
	// Label the swept RTTs themselves when there are few enough to fit.
	if len(order) <= 8 {
		ticks := plot.ConstantTicks{{Value: 0, Label: "0"}}
		for _, pi := range order {
			v := *sw.Points[pi].RTTMs
			if last := ticks[len(ticks)-1].Value; v > last && (v-last) >= (hi-math.Min(lo, 0))/40 {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
		p.X.Tick.Marker = ticks
	}
	return f, nil
}

func contains(m map[string]int, k string) bool {
	_, ok := m[k]
	return ok
}

func sameXYs(a, b plotter.XYs) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i].X-b[i].X) > 1e-9 || math.Abs(a[i].Y-b[i].Y) > 1e-6*math.Max(1, math.Abs(a[i].Y)) {
			return false
		}
	}
	return true
}

// glyphPair returns the filled (p50) and open (p99) marker of the i-th run.
func glyphPair(i int) (filled, open draw.GlyphDrawer) {
	pairs := [][2]draw.GlyphDrawer{
		{draw.CircleGlyph{}, draw.RingGlyph{}},
		{draw.BoxGlyph{}, draw.SquareGlyph{}},
		{draw.PyramidGlyph{}, draw.TriangleGlyph{}},
	}
	p := pairs[i%len(pairs)]
	return p[0], p[1]
}

// dashGlyph is a short horizontal bar, marking a lower bound at a single sweep point.
type dashGlyph struct{}

func (dashGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	ls := draw.LineStyle{Color: sty.Color, Width: vg.Points(2)}
	c.StrokeLine2(ls, pt.X-sty.Radius*1.5, pt.Y, pt.X+sty.Radius*1.5, pt.Y)
}
