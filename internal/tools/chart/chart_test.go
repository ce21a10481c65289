package chart

import (
	"bytes"
	"html"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"meridian/internal/tools/bench"
)

var testRegions = []string{"us-east1", "europe-west1", "asia-east1"}

// pcts are the percentiles the synthetic reports carry.
var pcts = []float64{0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100}

// synthOp returns stats whose percentiles rise from base towards base*spread with a long tail.
func synthOp(base, spread, bound float64, withPercentiles bool) bench.OpStats {
	at := func(p float64) float64 {
		// Exponential-ish tail: latency grows like -log(1-p).
		q := math.Min(p/100, 0.99999)
		return base * (1 + (spread-1)*(-math.Log(1-q))/math.Log(1e5))
	}
	s := bench.OpStats{
		Count: 10000, P50Ms: at(50), P99Ms: at(99), P999Ms: at(99.9), MeanMs: at(60),
		LowerBoundMs: bound,
	}
	if withPercentiles {
		for _, p := range pcts {
			s.Percentiles = append(s.Percentiles, [2]float64{p, at(p)})
		}
	}
	return s
}

// synthReport is a 3-region report with 3 runs: two quorum protocols (one with options) and an
// eventual ONE/ONE run whose local reads are ~1 ms, so read CDFs mix linear and log panels.
func synthReport(rtt float64) *bench.Report {
	rep := &bench.Report{Topology: "gcp-meteorshower-3", Regions: testRegions}
	scale := rtt / 100
	bases := []float64{60, 90, 120} // per region, at RTT 100
	type cfg struct {
		run      bench.Run
		rdFactor float64
		wrFactor float64
		timeline bool
	}
	cfgs := []cfg{
		{bench.Run{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"}, 1.0, 1.0, true},
		{bench.Run{Protocol: "meteorshower", ReadLevel: "QUORUM", WriteLevel: "QUORUM",
			Options: map[string]string{"theta": "upper"}}, 0.7, 0.8, true},
		{bench.Run{Protocol: "eventual", ReadLevel: "ONE", WriteLevel: "ONE"}, 0.01, 0.02, false},
	}
	for ci, c := range cfgs {
		run := c.run
		run.Regions = map[string]bench.RegionStats{}
		for ri, region := range testRegions {
			b := bases[ri] * scale
			run.Regions[region] = bench.RegionStats{
				Read:  synthOp(b*c.rdFactor, 3+float64(ci), b*0.9*math.Max(c.rdFactor, 0.01), true),
				Write: synthOp(b*c.wrFactor*1.2, 4, b*0.9*c.wrFactor, true),
			}
		}
		run.ThroughputOps = 12000 + 3000*float64(ci)
		if c.timeline {
			for t := 0; t < 40; t++ {
				run.Timeline = append(run.Timeline, bench.TimePoint{
					TSec:    float64(t),
					OpsPerS: run.ThroughputOps * (0.9 + 0.1*math.Sin(float64(t)/3+float64(ci))),
					P99Ms:   bases[0] * scale * (2 + 0.5*math.Cos(float64(t)/5+float64(ci))),
				})
			}
		}
		rep.Runs = append(rep.Runs, run)
	}
	return rep
}

func synthSweep(rtts ...float64) *bench.Sweep {
	sw := &bench.Sweep{}
	for _, rtt := range rtts {
		rep := synthReport(rtt)
		rep.Topology = "equidistant-3"
		r := rtt
		rep.RTTMs = &r
		sw.Points = append(sw.Points, *rep)
	}
	return sw
}

// chartCase renders one chart type to a path.
type chartCase struct {
	name   string
	title  string
	build  func() (*figure, error)
	render func(path string) error
}

func chartCases(rep *bench.Report, sw *bench.Sweep) []chartCase {
	return []chartCase{
		{"cdf-read", "read latency CDF — gcp-meteorshower-3",
			func() (*figure, error) { return buildLatencyCDF(rep, "read") },
			func(p string) error { return LatencyCDF(rep, "read", p) }},
		{"cdf-write", "write latency CDF — gcp-meteorshower-3",
			func() (*figure, error) { return buildLatencyCDF(rep, "write") },
			func(p string) error { return LatencyCDF(rep, "write", p) }},
		{"rtt-read", "read latency vs RTT",
			func() (*figure, error) { return buildLatencyVsRTT(sw, "read") },
			func(p string) error { return LatencyVsRTT(sw, "read", p) }},
		{"throughput", "throughput over time — gcp-meteorshower-3",
			func() (*figure, error) { return buildThroughputOverTime(rep) },
			func(p string) error { return ThroughputOverTime(rep, p) }},
		{"bars-read", "read latency per region — gcp-meteorshower-3",
			func() (*figure, error) { return buildRegionBars(rep, "read") },
			func(p string) error { return RegionBars(rep, "read", p) }},
	}
}

// checkPNG asserts path is a non-trivial PNG of the figure's size.
func checkPNG(t *testing.T, path string, f *figure) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 5*1024 {
		t.Errorf("%s: only %d bytes", path, len(b))
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	w, h := f.sizePx()
	if got := img.Bounds().Size(); got.X != w || got.Y != h {
		t.Errorf("%s: size %v, want %dx%d", path, got, w, h)
	}
	if w != 1200 || h < 400*len(f.panels) {
		t.Errorf("%s: figure size %dx%d for %d rows", path, w, h, len(f.panels))
	}
}

// checkSVG asserts path is a non-trivial SVG containing every text in want.
func checkSVG(t *testing.T, path string, want ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 5*1024 {
		t.Errorf("%s: only %d bytes", path, len(b))
	}
	s := string(b)
	if !strings.HasPrefix(s, "<?xml") || !strings.Contains(s, "<svg") {
		t.Errorf("%s: not an SVG", path)
	}
	for _, w := range want {
		if !strings.Contains(s, html.EscapeString(w)) {
			t.Errorf("%s: missing text %q", path, w)
		}
	}
}

func TestRenderAll(t *testing.T) {
	rep := synthReport(100)
	sw := synthSweep(20, 50, 100, 200)
	dir := t.TempDir()
	for _, c := range chartCases(rep, sw) {
		t.Run(c.name, func(t *testing.T) {
			f, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			if f.title != c.title {
				t.Errorf("title %q, want %q", f.title, c.title)
			}
			pngPath := filepath.Join(dir, c.name+".png")
			if err := c.render(pngPath); err != nil {
				t.Fatal(err)
			}
			checkPNG(t, pngPath, f)

			svgPath := filepath.Join(dir, c.name+".SVG") // extensions are case-insensitive
			if err := c.render(svgPath); err != nil {
				t.Fatal(err)
			}
			want := []string{c.title}
			for _, run := range rep.Runs {
				if c.name == "throughput" && len(run.Timeline) == 0 {
					continue
				}
				want = append(want, run.Label())
			}
			checkSVG(t, svgPath, want...)
		})
	}
}

func TestLayout(t *testing.T) {
	rep := synthReport(100)
	f, err := buildLatencyCDF(rep, "read")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.panels) != 1 || len(f.panels[0]) != 3 {
		t.Fatalf("3 regions: panels %dx%d, want 1x3", len(f.panels), len(f.panels[0]))
	}
	for i, p := range f.panels[0] {
		if p.Title.Text != testRegions[i] {
			t.Errorf("panel %d is %q, want %q (report region order)", i, p.Title.Text, testRegions[i])
		}
	}
	// Regions without an order sort; five regions wrap onto two rows.
	rep.Regions = nil
	for _, r := range []string{"b-region", "a-region"} {
		for i := range rep.Runs {
			rep.Runs[i].Regions[r] = rep.Runs[i].Regions["us-east1"]
		}
	}
	f, err = buildLatencyCDF(rep, "read")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.panels) != 2 || f.panels[0][0].Title.Text != "a-region" || f.panels[1][2] != nil {
		t.Errorf("5 sorted regions: got %d rows, first %q", len(f.panels), f.panels[0][0].Title.Text)
	}
	// The eventual run's ~1 ms reads next to ~100 ms quorum reads make a log axis; the quorum
	// runs alone are within a factor of 20 and stay linear.
	if !isLogX(f.panels[0][0]) {
		t.Error("read CDF with 1 ms and 100+ ms latencies should use a log x axis")
	}
	quorums := synthReport(100)
	quorums.Runs = quorums.Runs[:2]
	fw, err := buildLatencyCDF(quorums, "write")
	if err != nil {
		t.Fatal(err)
	}
	if isLogX(fw.panels[0][0]) {
		t.Error("write CDF spanning < 20x should use a linear x axis")
	}
}

func TestLogTicks(t *testing.T) {
	ticks := logTicks{}.Ticks(0.8, 350)
	var labels []string
	for _, tk := range ticks {
		if tk.Value < 0.8 || tk.Value > 350 {
			t.Errorf("tick %v outside range", tk.Value)
		}
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, ","); got != "1,3,10,30,100,300" {
		t.Errorf("labels %s", got)
	}
	if len(logTicks{}.Ticks(0, 10)) != 0 {
		t.Error("non-positive range must give no ticks")
	}
}

func TestEdgeCases(t *testing.T) {
	dir := t.TempDir()

	t.Run("missing percentiles fall back to 3 points", func(t *testing.T) {
		rep := synthReport(100)
		for region, rs := range rep.Runs[0].Regions {
			rs.Read.Percentiles = nil
			rep.Runs[0].Regions[region] = rs
		}
		path := filepath.Join(dir, "fallback.svg")
		if err := LatencyCDF(rep, "read", path); err != nil {
			t.Fatal(err)
		}
		checkSVG(t, path, rep.Runs[0].Label()+fallbackNote, rep.Runs[1].Label())
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), rep.Runs[1].Label()+fallbackNote) {
			t.Error("runs with percentiles must not be flagged")
		}
	})

	t.Run("zero latencies on a log axis", func(t *testing.T) {
		rep := synthReport(100)
		rs := rep.Runs[2].Regions["us-east1"]
		for i := range rs.Read.Percentiles {
			if rs.Read.Percentiles[i][0] <= 50 {
				rs.Read.Percentiles[i][1] = 0
			}
		}
		rs.Read.LowerBoundMs = 0
		rep.Runs[2].Regions["us-east1"] = rs
		f, err := buildLatencyCDF(rep, "read")
		if err != nil {
			t.Fatal(err)
		}
		if !isLogX(f.panels[0][0]) {
			t.Fatal("want a log axis")
		}
		path := filepath.Join(dir, "zeros.png")
		if err := LatencyCDF(rep, "read", path); err != nil {
			t.Fatal(err)
		}
		checkPNG(t, path, f)
	})

	t.Run("single sweep point", func(t *testing.T) {
		sw := synthSweep(80)
		f, err := buildLatencyVsRTT(sw, "write")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "single.png")
		if err := LatencyVsRTT(sw, "write", path); err != nil {
			t.Fatal(err)
		}
		checkPNG(t, path, f)
		if p := f.panels[0][0]; p.X.Min != 0 || p.X.Max != 160 {
			t.Errorf("single point x range [%v, %v], want [0, 160]", p.X.Min, p.X.Max)
		}
	})

	t.Run("unsorted sweep and partial runs", func(t *testing.T) {
		sw := synthSweep(200, 20, 100)
		sw.Points[1].Runs = sw.Points[1].Runs[:1] // only one protocol at RTT 20
		path := filepath.Join(dir, "partial.svg")
		if err := LatencyVsRTT(sw, "read", path); err != nil {
			t.Fatal(err)
		}
		checkSVG(t, path, "read latency vs RTT", sw.Points[0].Runs[2].Label())
	})

	t.Run("many runs wrap the legend", func(t *testing.T) {
		rep := manyRuns(10)
		for _, c := range chartCases(rep, synthSweep(20, 50, 100, 200)) {
			f, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "many-"+c.name+".png")
			if err := c.render(path); err != nil {
				t.Fatal(err)
			}
			checkPNG(t, path, f)
		}
	})

	t.Run("optional operation", func(t *testing.T) {
		rep := synthReport(100)
		if err := RegionBars(rep, "scan", filepath.Join(dir, "scan.png")); err == nil ||
			!strings.Contains(err.Error(), "no scan latencies") {
			t.Errorf("scan without data: %v", err)
		}
		s := synthOp(5, 3, 0, true)
		rs := rep.Runs[1].Regions["asia-east1"]
		rs.Scan = &s
		rep.Runs[1].Regions["asia-east1"] = rs
		if err := RegionBars(rep, "scan", filepath.Join(dir, "scan.png")); err != nil {
			t.Error(err)
		}
		if err := LatencyCDF(rep, "scan", filepath.Join(dir, "scan-cdf.png")); err != nil {
			t.Error(err)
		}
	})
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	rep := synthReport(100)
	sw := synthSweep(20, 50)
	empty := &bench.Report{Topology: "empty"}
	noTimeline := synthReport(100)
	for i := range noTimeline.Runs {
		noTimeline.Runs[i].Timeline = nil
	}
	noRTT := synthSweep(20, 50)
	noRTT.Points[1].RTTMs = nil
	rtt := 50.0
	emptyPoint := bench.Report{Topology: "empty", RTTMs: &rtt}

	png := filepath.Join(dir, "x.png")
	pdf := filepath.Join(dir, "x.pdf")
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"cdf bad ext", LatencyCDF(rep, "read", pdf), pdf},
		{"rtt bad ext", LatencyVsRTT(sw, "read", pdf), pdf},
		{"timeline bad ext", ThroughputOverTime(rep, pdf), pdf},
		{"bars no ext", RegionBars(rep, "read", filepath.Join(dir, "noext")), "noext"},
		{"cdf no runs", LatencyCDF(empty, "read", png), "no runs"},
		{"bars no runs", RegionBars(empty, "read", png), "no runs"},
		{"timeline no runs", ThroughputOverTime(empty, png), "no runs"},
		{"cdf nil", LatencyCDF(nil, "read", png), "nil report"},
		{"cdf bad op", LatencyCDF(rep, "delete", png), `unknown operation "delete"`},
		{"bars bad op", RegionBars(rep, "", png), "unknown operation"},
		{"rtt nil", LatencyVsRTT(nil, "read", png), "nil sweep"},
		{"rtt no points", LatencyVsRTT(&bench.Sweep{}, "read", png), "no points"},
		{"rtt no rtt", LatencyVsRTT(noRTT, "read", png), "point 1"},
		{"rtt no runs", LatencyVsRTT(&bench.Sweep{Points: []bench.Report{emptyPoint}}, "read", png), "no runs"},
		{"no timeline", ThroughputOverTime(noTimeline, png), "timeline"},
		{"unwritable", LatencyCDF(rep, "read", filepath.Join(dir, "missing", "x.png")), "missing"},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %q does not mention %q", c.name, c.err, c.want)
		}
	}
	if _, err := os.Stat(png); err == nil {
		t.Error("a failed chart left a file behind")
	}
}

// manyRuns is the synthetic report with its runs repeated under distinct options up to n runs.
func manyRuns(n int) *bench.Report {
	rep := synthReport(100)
	base := rep.Runs
	for k := 0; len(rep.Runs) < n; k++ {
		r := base[k%len(base)]
		r.Options = map[string]string{"variant": string(rune('a' + k))}
		rep.Runs = append(rep.Runs, r)
	}
	return rep
}

// TestExampleRendering writes every chart as PNG to $MERIDIAN_CHART_DIR for a human to look at.
func TestExampleRendering(t *testing.T) {
	dir := os.Getenv("MERIDIAN_CHART_DIR")
	if dir == "" {
		t.Skip("set MERIDIAN_CHART_DIR to write example charts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fallback := synthReport(100)
	for region, rs := range fallback.Runs[1].Regions {
		rs.Read.Percentiles = nil
		fallback.Runs[1].Regions[region] = rs
	}
	cases := append(chartCases(synthReport(100), synthSweep(20, 50, 100, 200)),
		chartCase{name: "cdf-read-fallback", render: func(p string) error { return LatencyCDF(fallback, "read", p) }},
		chartCase{name: "bars-write-many", render: func(p string) error { return RegionBars(manyRuns(10), "write", p) }},
		chartCase{name: "rtt-write-single", render: func(p string) error { return LatencyVsRTT(synthSweep(80), "write", p) }},
	)
	for _, c := range cases {
		path := filepath.Join(dir, c.name+".png")
		if err := c.render(path); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}

func isLogX(p *plot.Plot) bool {
	_, ok := p.X.Scale.(plot.LogScale)
	return ok
}
