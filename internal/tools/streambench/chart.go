package streambench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// seriesColors are the series' colours, in row order of first appearance.
var seriesColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // Meridian local
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}, // Meridian memory
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // Kafka
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // InfluxDB
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// chartSeries is one system and acknowledgement across batch sizes.
type chartSeries struct {
	name             string
	peak, p50, perCo plotter.XYs
}

func (rep *Report) series() []*chartSeries {
	var out []*chartSeries
	byName := map[string]*chartSeries{}
	for _, r := range rep.Rows {
		if r.Error != "" || r.Peak.RecordsPerSec <= 0 {
			continue
		}
		name := fmt.Sprintf("%s %s", r.Label(), r.Ack)
		s := byName[name]
		if s == nil {
			s = &chartSeries{name: name}
			byName[name] = s
			out = append(out, s)
		}
		x := float64(r.Batch)
		s.peak = append(s.peak, plotter.XY{X: x, Y: r.Peak.RecordsPerSec / 1e6})
		s.perCo = append(s.perCo, plotter.XY{X: x, Y: r.PerCore / 1e6})
		if r.Loaded.P50Ms > 0 {
			s.p50 = append(s.p50, plotter.XY{X: x, Y: r.Loaded.P50Ms})
		}
	}
	return out
}

// Charts draws Fig. 5.10's two panels — the peak throughput (millions of records per second)
// and the median append latency at the loaded run (ms, log scale), against the batch size
// (log scale) — one line per system and acknowledgement, into dir as stream-ingest.png and
// stream-ingest.svg. It returns the files written.
func (rep *Report) Charts(dir string) ([]string, error) {
	series := rep.series()
	if len(series) == 0 {
		return nil, fmt.Errorf("streambench: no rows with numbers to chart")
	}
	tp := plot.New()
	tp.Title.Text = "Peak ingest throughput (16-byte records)"
	tp.X.Label.Text = "batch size (records)"
	tp.Y.Label.Text = "million records/s"
	lat := plot.New()
	lat.Title.Text = fmt.Sprintf("Median append latency at %.0f%% of the peak", 100*rep.Options.Fraction)
	lat.X.Label.Text = "batch size (records)"
	lat.Y.Label.Text = "ms (log)"
	for _, p := range []*plot.Plot{tp, lat} {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
	}
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	tp.Y.Min = 0
	var maxTP, minLat, maxLat float64
	minLat = math.Inf(1)
	for _, s := range series {
		for _, xy := range s.peak {
			maxTP = max(maxTP, xy.Y)
		}
		for _, xy := range s.p50 {
			minLat, maxLat = min(minLat, xy.Y), max(maxLat, xy.Y)
		}
	}
	// Room above the lines for the legend.
	tp.Y.Max = maxTP * (1.15 + 0.08*float64(len(series)))
	if maxLat > 0 {
		lat.Y.Min, lat.Y.Max = minLat/2, maxLat*math.Pow(3, float64(len(series))/2)
	}
	for i, s := range series {
		c := seriesColors[i%len(seriesColors)]
		for _, pl := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{tp, s.peak}, {lat, s.p50}} {
			if len(pl.xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(pl.xys)
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = c, vg.Points(2)
			pts.Color, pts.Shape = c, draw.CircleGlyph{}
			pl.p.Add(l, pts)
			pl.p.Legend.Add(s.name, l, pts)
		}
	}
	var files []string
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(dir, "stream-ingest"+ext)
		if err := saveSideBySide(path, tp, lat); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// saveSideBySide draws plots side by side into path (.png or .svg).
func saveSideBySide(path string, plots ...*plot.Plot) error {
	w, h := vg.Length(len(plots))*5.5*vg.Inch, 4.2*vg.Inch
	var c draw.Canvas
	var save func() error
	switch filepath.Ext(path) {
	case ".png":
		img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(120))
		c = draw.New(img)
		save = func() error { return writeTo(path, vgimg.PngCanvas{Canvas: img}) }
	case ".svg":
		cv := newSVG(w, h)
		c = draw.New(cv)
		save = func() error { return writeTo(path, cv) }
	default:
		return fmt.Errorf("streambench: chart %s: want .png or .svg", path)
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, c)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	return save()
}
