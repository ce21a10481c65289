package mayflower

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// truthReports builds a network of links, places the reads (which the inference is told of)
// and the hidden flows (which it is not) on it, and returns the reads' reports at their
// max-min fair rates, as the flow-level simulator moves bytes: what endpoints measure.
func truthReports(t *testing.T, links map[LinkID]float64, reads, hidden [][]LinkID) (*Model, []Report) {
	t.Helper()
	truth, view := NewModel(), NewModel()
	for l, c := range links {
		if err := truth.SetLink(l, c); err != nil {
			t.Fatal(err)
		}
		if err := view.SetLink(l, c); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range append(slices.Clone(reads), hidden...) {
		if err := truth.AddFlow(Flow{ID: FlowID(i + 1), Path: p}); err != nil {
			t.Fatal(err)
		}
	}
	rates := truth.FairRates(nil)
	reports := make([]Report, len(reads))
	for i, p := range reads {
		reports[i] = Report{Path: p, Rate: rates[FlowID(i+1)]}
	}
	return view, reports
}

var exact = InferOptions{Tolerance: 1e-6}

// The thesis's testbed in miniature: two readers' 10-unit edge links and a 15-unit core link
// their reads share.
var twoReaders = map[LinkID]float64{"a>tor": 10, "b>tor": 10, "core": 15, "tor>c": 10, "tor>d": 10}

var (
	readA = []LinkID{"a>tor", "core", "tor>c"}
	readB = []LinkID{"b>tor", "core", "tor>d"}
)

// TestInferHiddenLocalisesSharedLoad: one hidden flow on the core link two reads share
// leaves each read a third of it (5). Each read alone would be explained as well by one
// hidden flow of 5 on either of its edge links; together they are explained by the one on
// the core, which is where the inference puts it, located (not hedged), at the 5 it gets.
func TestInferHiddenLocalisesSharedLoad(t *testing.T) {
	m, reports := truthReports(t, twoReaders, [][]LinkID{readA, readB}, [][]LinkID{{"core"}})
	if !near(reports[0].Rate, 5) || !near(reports[1].Rate, 5) {
		t.Fatalf("reads at %v and %v, want a third of the core each", reports[0].Rate, reports[1].Rate)
	}
	st, err := m.InferHidden(reports, HiddenState{}, exact)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Hidden) != 1 {
		t.Fatalf("hidden load %+v, want one flow on the core only", st.Hidden)
	}
	if h := st.Hidden[0]; h.Link != "core" || h.Flows != 1 || !near(h.Rate, 5) || h.Among != 1 {
		t.Fatalf("hidden load %+v, want 1 flow on the core at 5, located", h)
	}
	// Held as a flow of the model, it slows a new read's estimate on the core to a quarter.
	if err := m.SetHidden(st.Hidden); err != nil {
		t.Fatal(err)
	}
	for i, r := range reports {
		if err := m.AddFlow(Flow{ID: FlowID(i + 1), Path: r.Path, Rate: r.Rate}); err != nil {
			t.Fatal(err)
		}
	}
	e, err := m.Estimate([]LinkID{"core"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !near(e.Rate, 3.75) {
		t.Fatalf("a new read on the core is estimated at %v, want 3.75 (a quarter)", e.Rate)
	}
}

// TestInferHiddenNoShortfallNoPhantoms: on 500 random networks with reads only, every read's
// rate is explained by the reads themselves, so nothing is inferred.
func TestInferHiddenNoShortfallNoPhantoms(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for n := range 500 {
		links, reads := randomNetwork(rng)
		m, reports := truthReports(t, links, reads, nil)
		st, err := m.InferHidden(reports, HiddenState{}, exact)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Hidden) != 0 {
			t.Fatalf("network %d: hidden load %+v inferred with no hidden flow (reports %+v)", n, st.Hidden, reports)
		}
	}
}

func randomNetwork(rng *rand.Rand) (map[LinkID]float64, [][]LinkID) {
	links := map[LinkID]float64{}
	var ids []LinkID
	for i := range 2 + rng.IntN(8) {
		l := LinkID(fmt.Sprint("l", i))
		links[l] = float64(1 + rng.IntN(4)*5)
		ids = append(ids, l)
	}
	var reads [][]LinkID
	for range 1 + rng.IntN(8) {
		p := slices.Clone(ids)
		rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		reads = append(reads, p[:1+rng.IntN(min(4, len(p)))])
	}
	return links, reads
}

// TestInferHiddenExplainsEveryRead: on 500 random networks with hidden flows too, what the
// inference holds never exceeds a crossed link's room, and with it every read has a link of
// its path that it is the fastest on and that reads and inferred load fill: the view
// explains every measured rate by max-min fairness.
func TestInferHiddenExplainsEveryRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	inferredSome := 0
	for n := range 500 {
		links, reads := randomNetwork(rng)
		var hidden [][]LinkID
		for _, p := range reads[:rng.IntN(len(reads)+1)] {
			hidden = append(hidden, p[:1+rng.IntN(len(p))])
		}
		m, reports := truthReports(t, links, reads, hidden)
		st, err := m.InferHidden(reports, HiddenState{}, exact)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Hidden) > 0 {
			inferredSome++
		}
		known, top, inferred := map[LinkID]float64{}, map[LinkID]float64{}, map[LinkID]float64{}
		for _, r := range reports {
			for _, l := range r.Path {
				known[l] += r.Rate
				top[l] = math.Max(top[l], r.Rate)
			}
		}
		for _, h := range st.Hidden {
			if h.Among < 1 {
				t.Fatalf("network %d: %+v", n, h)
			}
			inferred[h.Link] = float64(h.Flows) * h.Rate * math.Sqrt(float64(h.Among))
			if _, crossed := known[h.Link]; crossed && known[h.Link]+inferred[h.Link] > links[h.Link]*(1+1e-9) {
				t.Fatalf("network %d: %+v on a link of %v carrying %v of reads", n, h, links[h.Link], known[h.Link])
			}
		}
		for _, r := range reports {
			if r.Rate == 0 {
				continue
			}
			if !slices.ContainsFunc(r.Path, func(l LinkID) bool {
				return r.Rate >= top[l]*(1-1e-6) && known[l]+inferred[l] >= links[l]*(1-1e-6)
			}) {
				t.Fatalf("network %d: read %+v has no bottleneck in the view (links %v, reports %+v, hidden %+v, inferred %+v)", n, r, links, reports, hidden, st.Hidden)
			}
		}
	}
	if inferredSome < 100 {
		t.Fatalf("hidden load inferred on only %d of 500 networks", inferredSome)
	}
}

// TestInferHiddenFasterReadRemovesPhantom: hidden load inferred on the core stays while no
// read crosses the core (background flows are elephants); reads that get more than the
// hidden flow would leave them lower its rate to what is left; reads that fill the core
// remove it.
func TestInferHiddenFasterReadRemovesPhantom(t *testing.T) {
	m, reports := truthReports(t, twoReaders, [][]LinkID{readA, readB}, [][]LinkID{{"core"}})
	st, err := m.InferHidden(reports, HiddenState{}, exact)
	if err != nil || len(st.Hidden) != 1 {
		t.Fatalf("%+v, %v", st, err)
	}
	// No report crosses the core: kept, at its free rate.
	st, err = m.InferHidden([]Report{{Path: []LinkID{"a>tor"}, Rate: 10}}, st, exact)
	if err != nil || len(st.Hidden) != 1 || st.Hidden[0].Link != "core" || !near(st.Hidden[0].Rate, 5) {
		t.Fatalf("after a poll without a read on the core: %+v, %v", st.Hidden, err)
	}
	// Two reads at 6 on the core, each limited by another read on its edge link: the
	// hidden flow gets at most 3 now, less than they do, so it is limited elsewhere.
	st, err = m.InferHidden([]Report{{Path: readA, Rate: 6}, {Path: []LinkID{"a>tor"}, Rate: 4}, {Path: readB, Rate: 6}, {Path: []LinkID{"b>tor"}, Rate: 4}}, st, exact)
	if err != nil || len(st.Hidden) != 1 || !near(st.Hidden[0].Rate, 3) || !near(st.Hidden[0].Free, 3) {
		t.Fatalf("after a read at 8 on the core: %+v, %v", st.Hidden, err)
	}
	// Two reads at 7.5 fill the core: nothing hides there.
	st, err = m.InferHidden([]Report{{Path: readB, Rate: 7.5}, {Path: readA, Rate: 7.5}}, st, exact)
	if err != nil || len(st.Hidden) != 0 {
		t.Fatalf("after a read filling the core: %+v, %v", st.Hidden, err)
	}
	if _, ok := st.Clean["core"]; !ok {
		t.Fatalf("the core is not marked clean: %v", st.Clean)
	}
}

// TestInferHiddenHedgesThenLocates: a read alone on two equal links, slowed by a hidden
// flow on the second: the reports cannot tell which, so both get the load at 1/√2 of its
// rate. A second read crossing the second link only, slowed as well, locates it there.
// A link filled by reads alone a poll ago is no candidate.
func TestInferHiddenHedgesThenLocates(t *testing.T) {
	links := map[LinkID]float64{"x": 10, "y": 10, "z": 10}
	m, reports := truthReports(t, links, [][]LinkID{{"x", "y"}}, [][]LinkID{{"y"}})
	st, err := m.InferHidden(reports, HiddenState{}, exact)
	if err != nil {
		t.Fatal(err)
	}
	want := []Hidden{{Link: "x", Flows: 1, Rate: 5 / math.Sqrt2, Free: 5 / math.Sqrt2, Among: 2}, {Link: "y", Flows: 1, Rate: 5 / math.Sqrt2, Free: 5 / math.Sqrt2, Among: 2}}
	if !slices.EqualFunc(st.Hidden, want, func(a, b Hidden) bool {
		return a.Link == b.Link && a.Flows == b.Flows && near(a.Rate, b.Rate) && a.Among == b.Among
	}) {
		t.Fatalf("hidden %+v, want %+v", st.Hidden, want)
	}
	_, reports = truthReports(t, links, [][]LinkID{{"z", "y"}}, [][]LinkID{{"y"}})
	st, err = m.InferHidden(reports, st, exact)
	if err != nil {
		t.Fatal(err)
	}
	byLink := map[LinkID]Hidden{}
	for _, h := range st.Hidden {
		byLink[h.Link] = h
	}
	if h := byLink["y"]; h.Among != 1 || !near(h.Rate, 5) {
		t.Fatalf("hidden %+v: want y located at 5", st.Hidden)
	}
	if _, ok := byLink["z"]; ok {
		t.Fatalf("hidden %+v: z is explained by y's load", st.Hidden)
	}
	// x was filled by a read alone at this poll's start: not a candidate for a while.
	st, err = m.InferHidden([]Report{{Path: []LinkID{"x"}, Rate: 10}}, HiddenState{}, InferOptions{Tolerance: 1e-6, CleanPolls: 5})
	if err != nil {
		t.Fatal(err)
	}
	_, reports = truthReports(t, links, [][]LinkID{{"x", "z"}}, [][]LinkID{{"z"}})
	st, err = m.InferHidden(reports, st, InferOptions{Tolerance: 1e-6, CleanPolls: 5})
	if err != nil || len(st.Hidden) != 1 || st.Hidden[0].Link != "z" || st.Hidden[0].Among != 1 {
		t.Fatalf("hidden %+v, %v: want z located (x was full a poll ago)", st.Hidden, err)
	}
}

// TestInferHiddenPriorBreaksTies: between two links that explain a slow read with as many
// hidden flows, the one the prior weighs more is chosen, located.
func TestInferHiddenPriorBreaksTies(t *testing.T) {
	links := map[LinkID]float64{"edge": 10, "core": 10}
	m, reports := truthReports(t, links, [][]LinkID{{"edge", "core"}}, [][]LinkID{{"core"}})
	st, err := m.InferHidden(reports, HiddenState{}, InferOptions{Tolerance: 1e-6, Prior: map[LinkID]float64{"edge": 1, "core": 3}})
	if err != nil || len(st.Hidden) != 1 || st.Hidden[0].Link != "core" || st.Hidden[0].Among != 1 {
		t.Fatalf("hidden %+v, %v: want the core", st.Hidden, err)
	}
}

func TestInferHiddenBadInput(t *testing.T) {
	m := NewModel()
	if err := m.SetLink("l", 10); err != nil {
		t.Fatal(err)
	}
	ok := []Report{{Path: []LinkID{"l"}, Rate: 5}}
	for name, tc := range map[string]struct {
		reports []Report
		prev    HiddenState
		o       InferOptions
	}{
		"tolerance":     {ok, HiddenState{}, InferOptions{Tolerance: 0.5}},
		"NaN tolerance": {ok, HiddenState{}, InferOptions{Tolerance: math.NaN()}},
		"clean polls":   {ok, HiddenState{}, InferOptions{CleanPolls: -1}},
		"prior":         {ok, HiddenState{}, InferOptions{Prior: map[LinkID]float64{"l": 0}}},
		"unknown link":  {[]Report{{Path: []LinkID{"m"}, Rate: 5}}, HiddenState{}, InferOptions{}},
		"NaN rate":      {[]Report{{Path: []LinkID{"l"}, Rate: math.NaN()}}, HiddenState{}, InferOptions{}},
		"empty path":    {[]Report{{Rate: 1}}, HiddenState{}, InferOptions{}},
		"prev link":     {ok, HiddenState{Hidden: []Hidden{{Link: "m", Flows: 1, Among: 1}}}, InferOptions{}},
		"prev flows":    {ok, HiddenState{Hidden: []Hidden{{Link: "l", Flows: 0, Among: 1}}}, InferOptions{}},
		"prev twice":    {ok, HiddenState{Hidden: []Hidden{{Link: "l", Flows: 1, Among: 1}, {Link: "l", Flows: 1, Among: 1}}}, InferOptions{}},
		"prev among":    {ok, HiddenState{Hidden: []Hidden{{Link: "l", Flows: 1}}}, InferOptions{}},
		"prev free":     {ok, HiddenState{Hidden: []Hidden{{Link: "l", Flows: 1, Among: 1, Free: math.Inf(1)}}}, InferOptions{}},
	} {
		if _, err := m.InferHidden(tc.reports, tc.prev, tc.o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, h := range map[string][]Hidden{
		"unknown link": {{Link: "m", Flows: 1}},
		"no flow":      {{Link: "l"}},
		"too many":     {{Link: "l", Flows: MaxHiddenFlows + 1}},
		"twice":        {{Link: "l", Flows: 1}, {Link: "l", Flows: 1}},
		"NaN rate":     {{Link: "l", Flows: 1, Rate: math.NaN()}},
	} {
		if err := m.SetHidden(h); err == nil {
			t.Errorf("SetHidden %s: accepted", name)
		}
	}
	if err := m.AddFlow(Flow{ID: HiddenIDs, Path: []LinkID{"l"}}); err == nil {
		t.Error("a flow with a hidden flow's ID accepted")
	}
}

// TestSetHiddenReplaces: hidden flows are flows of the model until the next SetHidden
// replaces them; the others are left alone.
func TestSetHiddenReplaces(t *testing.T) {
	m := NewModel()
	for _, l := range []LinkID{"a", "b"} {
		if err := m.SetLink(l, 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.AddFlow(Flow{ID: 1, Path: []LinkID{"a"}, Rate: 4}); err != nil {
		t.Fatal(err)
	}
	if err := m.SetHidden([]Hidden{{Link: "a", Flows: 2, Rate: 3}, {Link: "b", Flows: 1, Rate: 10}}); err != nil {
		t.Fatal(err)
	}
	if m.Flows() != 4 || !near(m.LinkLoad("a"), 10) || !near(m.LinkLoad("b"), 10) || len(m.HiddenFlows()) != 3 {
		t.Fatalf("%d flows, loads %v / %v", m.Flows(), m.LinkLoad("a"), m.LinkLoad("b"))
	}
	if err := m.SetHidden([]Hidden{{Link: "b", Flows: 1, Rate: 5}}); err != nil {
		t.Fatal(err)
	}
	if m.Flows() != 2 || !near(m.LinkLoad("a"), 4) || !near(m.LinkLoad("b"), 5) {
		t.Fatalf("after replacing: %d flows, loads %v / %v", m.Flows(), m.LinkLoad("a"), m.LinkLoad("b"))
	}
	// A refused replacement changes nothing.
	if err := m.SetHidden([]Hidden{{Link: "a", Flows: 1}, {Link: "zz", Flows: 1}}); err == nil || m.Flows() != 2 || !near(m.LinkLoad("b"), 5) {
		t.Fatalf("a bad replacement: %v, %d flows", err, m.Flows())
	}
	if err := m.SetHidden(nil); err != nil || m.Flows() != 1 {
		t.Fatalf("clearing: %v, %d flows", err, m.Flows())
	}
}
