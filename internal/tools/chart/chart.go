// Package chart renders Meridian benchmark results (package bench's JSON report types) as PNG or
// SVG charts with gonum.org/v1/plot:
//
//   - LatencyCDF: per-region latency CDFs of one operation, one line per run;
//   - LatencyVsRTT: p50/p99 latency against the RTT of an equidistant sweep (the MeteorShower
//     paper's Figures 9/10);
//   - ThroughputOverTime: ops/s and p99 against time for runs that recorded a timeline;
//   - RegionBars: per-region grouped bars of p50 with p99 and the lower bound (Figures 13/14).
//
// The output format is chosen by the file extension (.png or .svg). Every figure is 1200 px wide
// with 400 px per row of panels, plus a header holding the title and one legend shared by all
// panels. A run keeps the same colour (its index in the report) in every chart of a report.
//
// Missing data is handled rather than rejected where a useful chart can still be drawn:
//
//   - a run without Percentiles for a region gets a 3-point CDF from its p50/p99/p99.9, drawn
//     with point markers and flagged in the legend as "(p50/p99/p99.9 only)";
//   - a run without any stats for a region (or an operation) is left out of that panel/bar group;
//     regions without data in any run are left out; nothing at all is an error;
//   - latencies on a log axis are clamped to 0.01 ms; a lower bound of 0 means "unknown" and is
//     not drawn;
//   - a sweep with a single point is drawn as markers on an axis from 0 to twice its RTT.
//
// Invalid input (nil report, no runs, unknown operation, sweep points without rtt_ms, unsupported
// extension) is an error naming the problem.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"meridian/internal/tools/bench"
)

// Figure geometry. PNGs are rendered at dpi, so one pixel is 72/dpi points.
const (
	dpi         = 96
	widthPx     = 1200
	rowHeightPx = 400
	// logRatio is the max/min latency ratio above which latency axes are logarithmic.
	logRatio = 20
	// minLogMs is the smallest latency drawn on a log axis (0 would be -inf).
	minLogMs = 0.01
)

// pxToPt converts pixels to points at dpi.
func pxToPt(px float64) vg.Length { return vg.Length(px * 72 / dpi) }

// ops are the operations OpStats exist for.
var ops = []string{"read", "write", "scan", "insert", "rmw"}

// Fonts.
var (
	sansFont   = font.Font{Typeface: "Liberation", Variant: "Sans"}
	titleSize  = vg.Points(15)
	panelSize  = vg.Points(12)
	labelSize  = vg.Points(11)
	tickSize   = vg.Points(10)
	legendSize = vg.Points(10.5)
	lineWidth  = vg.Points(1.6)
)

func textStyle(size vg.Length) text.Style {
	return text.Style{
		Color:   color.Black,
		Font:    font.From(sansFont, size),
		Handler: plot.DefaultTextHandler,
	}
}

// checkFormat returns "png" or "svg" for path, or an error naming it.
func checkFormat(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png", ".svg":
		return ext[1:], nil
	default:
		return "", fmt.Errorf("chart: unsupported output format %q for %s: want .png or .svg", ext, path)
	}
}

func checkOp(op string) error {
	for _, o := range ops {
		if o == op {
			return nil
		}
	}
	return fmt.Errorf("chart: unknown operation %q (want one of %s)", op, strings.Join(ops, ", "))
}

// opStats returns the stats of op in rs, or nil when the run did not issue it.
func opStats(rs bench.RegionStats, op string) *bench.OpStats {
	switch op {
	case "read":
		return &rs.Read
	case "write":
		return &rs.Write
	case "scan":
		return rs.Scan
	case "insert":
		return rs.Insert
	case "rmw":
		return rs.RMW
	}
	return nil
}

// hasData reports whether s holds any latency measurement.
func hasData(s *bench.OpStats) bool {
	return s != nil && (s.Count > 0 || s.P50Ms > 0 || s.P99Ms > 0 || s.P999Ms > 0 || len(s.Percentiles) > 0)
}

// runOp returns run's stats of op in region, or nil.
func runOp(run *bench.Run, region, op string) *bench.OpStats {
	rs, ok := run.Regions[region]
	if !ok {
		return nil
	}
	if s := opStats(rs, op); hasData(s) {
		return s
	}
	return nil
}

// regionOrder returns rep.Regions followed by any other region of the runs (sorted), or, without
// rep.Regions, all regions of the runs sorted.
func regionOrder(rep *bench.Report) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rep.Regions {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	var extra []string
	for _, run := range rep.Runs {
		for r := range run.Regions {
			if !seen[r] {
				seen[r] = true
				extra = append(extra, r)
			}
		}
	}
	sort.Strings(extra)
	return append(out, extra...)
}

// checkReport validates the common preconditions of report charts.
func checkReport(rep *bench.Report) error {
	if rep == nil {
		return errors.New("chart: nil report")
	}
	if len(rep.Runs) == 0 {
		return fmt.Errorf("chart: report %q has no runs", rep.Topology)
	}
	return nil
}

func withTopology(title, topology string) string {
	if topology == "" {
		return title
	}
	return title + " — " + topology
}

func finite(v ...float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// extraColors follow plotutil's seven default colours, so that up to twelve runs get distinct
// colours (bars cannot fall back on dash patterns).
var extraColors = []color.Color{
	color.RGBA{R: 0, G: 150, B: 150, A: 255},   // teal
	color.RGBA{R: 140, G: 86, B: 45, A: 255},   // brown
	color.RGBA{R: 128, G: 128, B: 0, A: 255},   // olive
	color.RGBA{R: 20, G: 20, B: 110, A: 255},   // navy
	color.RGBA{R: 105, G: 105, B: 105, A: 255}, // grey
}

// runColor is the colour of the i-th run.
func runColor(i int) color.Color {
	n := len(plotutil.DefaultColors)
	i %= n + len(extraColors)
	if i < n {
		return plotutil.Color(i)
	}
	return extraColors[i-n]
}

// lighten blends c with white; f = 0 keeps c, f = 1 is white.
func lighten(c color.Color, f float64) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8(float64(v>>8)*(1-f) + 255*f + 0.5) }
	return color.RGBA{R: mix(r), G: mix(g), B: mix(b), A: 255}
}

// runLine is the line style of the i-th run.
func runLine(i int) draw.LineStyle {
	return draw.LineStyle{Color: runColor(i), Width: lineWidth, Dashes: plotutil.Dashes(i)}
}

// newPanel returns a plot with Meridian's fonts and a light grid.
func newPanel(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sansFont, panelSize)
	p.Title.Padding = vg.Points(4)
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font = font.From(sansFont, labelSize)
		ax.Tick.Label.Font = font.From(sansFont, tickSize)
	}
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 225}
	g.Horizontal.Color = color.Gray{Y: 225}
	p.Add(g)
	return p
}

// useLogX makes p's X axis logarithmic with 1-2-5 labels.
func useLogX(p *plot.Plot) {
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
}

// logTicks labels 1, 2 and 5 times powers of ten (only powers of ten over wide ranges), with
// minor ticks at the other integer multiples.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= 0 || lo > hi {
		return nil
	}
	first := int(math.Floor(math.Log10(lo)))
	last := int(math.Ceil(math.Log10(hi)))
	labelled := map[int]bool{1: true, 2: true, 5: true}
	switch span := last - first; {
	case span > 4:
		labelled = map[int]bool{1: true}
	case span > 2:
		labelled = map[int]bool{1: true, 3: true}
	}
	var ticks []plot.Tick
	for e := first; e <= last; e++ {
		base := math.Pow10(e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if labelled[m] {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// legendItem is one entry of a figure's shared legend.
type legendItem struct {
	label  string
	thumbs []plot.Thumbnailer
}

// figure is a titled grid of aligned panels with one legend shared by all of them.
type figure struct {
	title  string
	legend []legendItem
	panels [][]*plot.Plot // rows × cols; nil panels are left blank
}

const (
	headerPadPt  = 8
	thumbWidthPt = 28
	thumbGapPt   = 6
	legendGapPt  = 24
)

// legendLayout arranges the legend as a table filled row by row, with as many columns as fit
// the figure's width; each column is as wide as its widest entry.
func (f *figure) legendLayout() (colW []vg.Length, rows int, rowH vg.Length) {
	n := len(f.legend)
	if n == 0 {
		return nil, 0, 0
	}
	sty := textStyle(legendSize)
	itemW := make([]vg.Length, n)
	for i, it := range f.legend {
		itemW[i] = vg.Points(thumbWidthPt+thumbGapPt) + sty.Width(it.label)
	}
	avail := pxToPt(widthPx) - 2*vg.Points(headerPadPt)
	for cols := n; cols >= 1; cols-- {
		colW = make([]vg.Length, cols)
		for i, w := range itemW {
			colW[i%cols] = max(colW[i%cols], w)
		}
		total := vg.Points(legendGapPt) * vg.Length(cols-1)
		for _, w := range colW {
			total += w
		}
		if total <= avail || cols == 1 {
			break
		}
	}
	rows = (n + len(colW) - 1) / len(colW)
	return colW, rows, legendSize * 1.6
}

// headerPx is the height of the title and legend strip, in whole pixels.
func (f *figure) headerPx() int {
	_, rows, rowH := f.legendLayout()
	h := 2*vg.Points(headerPadPt) + titleSize*1.4 + vg.Length(rows)*rowH
	if rows > 0 {
		h += vg.Points(headerPadPt) / 2
	}
	return int(math.Ceil(float64(h) * dpi / 72))
}

// sizePx is the figure's size in pixels.
func (f *figure) sizePx() (w, h int) {
	return widthPx, rowHeightPx*len(f.panels) + f.headerPx()
}

// draw renders the figure onto dc.
func (f *figure) draw(dc draw.Canvas) {
	// White background (SVG canvases are transparent).
	dc.FillPolygon(color.White, []vg.Point{
		dc.Min, {X: dc.Max.X, Y: dc.Min.Y}, dc.Max, {X: dc.Min.X, Y: dc.Max.Y},
	})
	pad := vg.Points(headerPadPt)
	top := dc.Max.Y - pad

	// Title.
	ts := textStyle(titleSize)
	ts.Font.Weight = xfont.WeightBold
	ts.XAlign, ts.YAlign = draw.XCenter, draw.YTop
	dc.FillText(ts, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: top}, f.title)
	top -= titleSize*1.4 + pad/2

	// Shared legend: a table centred under the title.
	colW, _, rowH := f.legendLayout()
	ls := textStyle(legendSize)
	ls.YAlign = draw.YCenter
	tableW := vg.Points(legendGapPt) * vg.Length(len(colW)-1)
	for _, w := range colW {
		tableW += w
	}
	left := (dc.Min.X + dc.Max.X - tableW) / 2
	for i, it := range f.legend {
		r, c := i/len(colW), i%len(colW)
		x := left
		for k := range c {
			x += colW[k] + vg.Points(legendGapPt)
		}
		yc := top - (vg.Length(r)+0.5)*rowH
		thumb := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x, Y: yc - rowH*0.35},
			Max: vg.Point{X: x + vg.Points(thumbWidthPt), Y: yc + rowH*0.35},
		}}
		for _, t := range it.thumbs {
			t.Thumbnail(&thumb)
		}
		dc.FillText(ls, vg.Point{X: x + vg.Points(thumbWidthPt+thumbGapPt), Y: yc}, it.label)
	}

	// Panels.
	area := dc
	area.Max.Y = dc.Max.Y - pxToPt(float64(f.headerPx()))
	nrows := len(f.panels)
	ncols := 0
	for _, row := range f.panels {
		ncols = max(ncols, len(row))
	}
	grid := make([][]*plot.Plot, nrows)
	for j := range grid {
		grid[j] = make([]*plot.Plot, ncols)
		copy(grid[j], f.panels[j])
	}
	tiles := draw.Tiles{
		Rows: nrows, Cols: ncols,
		PadX: vg.Points(22), PadY: vg.Points(16),
		PadTop: vg.Points(4), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(14),
	}
	canvases := plot.Align(grid, tiles, area)
	for j := range grid {
		for i, p := range grid[j] {
			if p != nil {
				p.Draw(canvases[j][i])
			}
		}
	}
}

// save renders the figure to path in the format of its extension.
func (f *figure) save(path string) (err error) {
	format, err := checkFormat(path)
	if err != nil {
		return err
	}
	if len(f.panels) == 0 {
		return fmt.Errorf("chart: %s: nothing to draw", path)
	}
	wpx, hpx := f.sizePx()
	w, h := pxToPt(float64(wpx)), pxToPt(float64(hpx))
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))}
	case "svg":
		c = vgsvg.New(w, h)
	}
	defer func() {
		// gonum/plot panics on some degenerate input; report it as an error instead.
		if r := recover(); r != nil {
			err = fmt.Errorf("chart: render %s: %v", path, r)
		}
	}()
	f.draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("chart: encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("chart: write %s: %w", path, err)
	}
	return nil
}

// gridOf lays panels out in rows of at most cols.
func gridOf(panels []*plot.Plot, cols int) [][]*plot.Plot {
	cols = max(1, min(cols, len(panels)))
	var out [][]*plot.Plot
	for i := 0; i < len(panels); i += cols {
		row := make([]*plot.Plot, cols)
		copy(row, panels[i:min(i+cols, len(panels))])
		out = append(out, row)
	}
	return out
}

// vline is a vertical line across the whole panel at X, with an optional label at its top.
type vline struct {
	X     float64
	Label string
	Style draw.LineStyle
}

func (v vline) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(v.X)
	if !c.ContainsX(x) {
		return
	}
	c.StrokeLine2(v.Style, x, c.Min.Y, x, c.Max.Y)
	if v.Label != "" {
		sty := textStyle(tickSize)
		sty.Color = v.Style.Color
		sty.YAlign = draw.YTop
		pt := vg.Point{X: x + vg.Points(4), Y: c.Max.Y - vg.Points(3)}
		r := sty.Rectangle(v.Label)
		m := vg.Points(1.5)
		box := vg.Rectangle{
			Min: vg.Point{X: pt.X + r.Min.X - m, Y: pt.Y + r.Min.Y - m},
			Max: vg.Point{X: pt.X + r.Max.X + m, Y: pt.Y + r.Max.Y + m},
		}
		c.FillPolygon(color.NRGBA{R: 255, G: 255, B: 255, A: 220}, []vg.Point{
			box.Min, {X: box.Max.X, Y: box.Min.Y}, box.Max, {X: box.Min.X, Y: box.Max.Y},
		})
		c.FillText(sty, pt, v.Label)
	}
}

// DataRange covers X only: +Inf/-Inf leave the Y range to the other plotters.
func (v vline) DataRange() (xmin, xmax, ymin, ymax float64) {
	return v.X, v.X, math.Inf(1), math.Inf(-1)
}

func (v vline) Thumbnail(c *draw.Canvas) { lineThumb(v.Style)(c) }

// thumbFunc adapts a function to plot.Thumbnailer.
type thumbFunc func(c *draw.Canvas)

func (f thumbFunc) Thumbnail(c *draw.Canvas) { f(c) }

// lineThumb draws a horizontal line in the middle of the thumbnail.
func lineThumb(sty draw.LineStyle) thumbFunc {
	return func(c *draw.Canvas) {
		y := c.Center().Y
		c.StrokeLine2(sty, c.Min.X, y, c.Max.X, y)
	}
}

// boxThumb fills the thumbnail with clr (inset vertically a little).
func boxThumb(clr color.Color) thumbFunc {
	return func(c *draw.Canvas) {
		inset := (c.Max.Y - c.Min.Y) * 0.1
		c.FillPolygon(clr, []vg.Point{
			{X: c.Min.X, Y: c.Min.Y + inset}, {X: c.Max.X, Y: c.Min.Y + inset},
			{X: c.Max.X, Y: c.Max.Y - inset}, {X: c.Min.X, Y: c.Max.Y - inset},
		})
	}
}

func grey(y uint8) color.Color { return color.Gray{Y: y} }
