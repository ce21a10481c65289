package chart

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"meridian/internal/tools/bench"
)

// RegionBars draws grouped bars: per region (rep.Regions order, else sorted), one bar per run of
// op's p50 (solid), a lighter bar behind it up to p99, and the lower bound as a black tick across
// the bar — the per-region comparison of the MeteorShower paper's Figures 13/14. Regions where
// no run has op data are left out. The format is chosen by path's extension (.png or .svg).
func RegionBars(rep *bench.Report, op string, path string) error {
	if _, err := checkFormat(path); err != nil {
		return err
	}
	f, err := buildRegionBars(rep, op)
	if err != nil {
		return err
	}
	return f.save(path)
}

// boundStyle is the black tick marking a lower bound on a bar.
var boundStyle = draw.LineStyle{Color: color.Black, Width: vg.Points(2.5)}

func buildRegionBars(rep *bench.Report, op string) (*figure, error) {
	if err := checkReport(rep); err != nil {
		return nil, err
	}
	if err := checkOp(op); err != nil {
		return nil, err
	}
	var regions []string
	for _, region := range regionOrder(rep) {
		for i := range rep.Runs {
			if runOp(&rep.Runs[i], region, op) != nil {
				regions = append(regions, region)
				break
			}
		}
	}
	if len(regions) == 0 {
		return nil, fmt.Errorf("chart: report %q has no %s latencies in any run", rep.Topology, op)
	}

	// Bar width: 80% of a region's slot shared by the runs, capped so few bars stay slim.
	nRuns := len(rep.Runs)
	slot := (pxToPt(widthPx) - vg.Points(90)) / vg.Length(len(regions))
	barW := min(slot*0.8/vg.Length(nRuns), vg.Points(48))
	barW = max(barW, vg.Points(2))

	p := newPanel("", "", op+" latency (ms)")
	f := &figure{
		title:  withTopology(op+" latency per region", rep.Topology),
		panels: [][]*plot.Plot{{p}},
	}
	var hasBound, labelled bool
	for i := range rep.Runs {
		run := &rep.Runs[i]
		p50 := make(plotter.Values, len(regions))
		p99 := make(plotter.Values, len(regions))
		bounds := make([]float64, len(regions))
		present := false
		for k, region := range regions {
			s := runOp(run, region, op)
			if s == nil {
				continue
			}
			present = true
			p50[k] = nonNeg(s.P50Ms)
			p99[k] = math.Max(nonNeg(s.P99Ms), p50[k])
			bounds[k] = nonNeg(s.LowerBoundMs)
			hasBound = hasBound || bounds[k] > 0
		}
		if !present {
			continue
		}
		offset := (vg.Length(i) - vg.Length(nRuns-1)/2) * barW
		clr := runColor(i)
		tail, err := plotter.NewBarChart(p99, barW)
		if err != nil {
			return nil, err
		}
		tail.Color = lighten(clr, 0.65)
		tail.LineStyle = draw.LineStyle{Color: lighten(clr, 0.3), Width: vg.Points(0.5)}
		tail.Offset = offset
		med, err := plotter.NewBarChart(p50, barW)
		if err != nil {
			return nil, err
		}
		med.Color = clr
		med.LineStyle = draw.LineStyle{Color: clr, Width: vg.Points(0.5)}
		med.Offset = offset
		marks := &barMarks{bounds: bounds, offset: offset, width: barW}
		if barW >= vg.Points(22) { // room for a value label per bar
			marks.p50, marks.top = p50, p99
			labelled = true
		}
		p.Add(tail, med, marks)
		f.legend = append(f.legend, legendItem{label: run.Label(), thumbs: []plot.Thumbnailer{boxThumb(clr)}})
	}
	p50Label := "p50"
	if labelled {
		p50Label = "p50 (value above bar)"
	}
	f.legend = append(f.legend,
		legendItem{label: p50Label, thumbs: []plot.Thumbnailer{boxThumb(grey(90))}},
		legendItem{label: "p99", thumbs: []plot.Thumbnailer{boxThumb(grey(200))}},
	)
	if hasBound {
		f.legend = append(f.legend, legendItem{label: "lower bound", thumbs: []plot.Thumbnailer{lineThumb(boundStyle)}})
	}
	p.NominalX(regions...)
	p.X.Tick.Label.Font.Size = labelSize
	p.X.Min, p.X.Max = -0.5, float64(len(regions))-0.5
	p.Y.Min = 0
	p.Y.Max *= 1.08 // headroom for the value labels
	return f, nil
}

func nonNeg(v float64) float64 {
	if !finite(v) || v < 0 {
		return 0
	}
	return v
}

// barMarks draws a horizontal tick of the bar's width at bounds[i] over bar i (zero = none) and,
// when p50 is set, the p50 value above top[i].
type barMarks struct {
	bounds   []float64
	p50, top []float64
	offset   vg.Length
	width    vg.Length
}

func (b *barMarks) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := textStyle(tickSize * 0.9)
	sty.XAlign = draw.XCenter
	for i, v := range b.bounds {
		x := trX(float64(i)) + b.offset
		if y := trY(v); v > 0 && c.ContainsY(y) {
			c.StrokeLine2(boundStyle, x-b.width/2, y, x+b.width/2, y)
		}
		if b.p50 != nil && (b.p50[i] > 0 || b.top[i] > 0) {
			c.FillText(sty, vg.Point{X: x, Y: trY(b.top[i]) + vg.Points(2)}, fmtMs(b.p50[i]))
		}
	}
}

func (b *barMarks) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = 0, float64(len(b.bounds)-1)
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, v := range b.bounds {
		if v > 0 {
			ymin, ymax = math.Min(ymin, v), math.Max(ymax, v)
		}
	}
	return xmin, xmax, ymin, ymax
}
