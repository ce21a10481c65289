package mayflower

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestMaxMinShares checks progressive filling on hand-computed cases and its invariants on
// random ones: no share above its demand, the sum is min(capacity, Σ demands), and a flow
// below its demand gets at least every other flow's share (no one can gain without taking
// from a poorer one).
func TestMaxMinShares(t *testing.T) {
	for _, tc := range []struct {
		capacity float64
		demands  []float64
		want     []float64
	}{
		{10, []float64{6, 2, 2, 10}, []float64{3, 2, 2, 3}}, // Fig. 3.2b, the second link
		{10, []float64{10, 10}, []float64{5, 5}},            // Fig. 3.2b, the third link
		{10, []float64{10, 3}, []float64{7, 3}},
		{10, []float64{1, 1}, []float64{1, 1}},
		{10, nil, []float64{}},
		{10, []float64{0, 20}, []float64{0, 10}},
	} {
		got := MaxMinShares(tc.capacity, tc.demands)
		for i := range tc.want {
			if !near(got[i], tc.want[i]) {
				t.Fatalf("MaxMinShares(%v, %v) = %v, want %v", tc.capacity, tc.demands, got, tc.want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		capacity := 1 + rng.Float64()*100
		demands := make([]float64, rng.IntN(12))
		total := 0.0
		for i := range demands {
			demands[i] = rng.Float64() * 40
			total += demands[i]
		}
		got := MaxMinShares(capacity, demands)
		sum, top := 0.0, 0.0
		for i, s := range got {
			if s > demands[i]+1e-9 || s < 0 {
				t.Fatalf("share %v of demand %v", s, demands[i])
			}
			sum += s
			top = math.Max(top, s)
		}
		if math.Abs(sum-math.Min(capacity, total)) > 1e-6 {
			t.Fatalf("shares of %v sum to %v, want %v", demands, sum, math.Min(capacity, total))
		}
		for i, s := range got {
			if s < demands[i]-1e-9 && s < top-1e-9 {
				t.Fatalf("flow %d is held below its demand (%v < %v) while another gets %v", i, s, demands[i], top)
			}
		}
	}
}

// fig32 builds the thesis's worked example (Fig. 3.2): two equal paths of 10 Mbps links
// from the source's edge switch to the reader's, through two aggregate switches. Path 1's
// second link carries flows of 6, 2 and 2 Mbps and its third one of 10; path 2's second link
// carries 2, 2 and 4, its third one 8 (the figure's values, which give the costs the text
// states). Every existing flow has 6 Mb left; the new read is 9 Mb. Units: Mb and Mbps.
func fig32(t *testing.T) (*Model, []Candidate) {
	t.Helper()
	m := NewModel()
	for _, l := range []LinkID{"src-e1", "e1-a1", "a1-e2", "e1-a2", "a2-e2", "e2-dst"} {
		if err := m.SetLink(l, 10); err != nil {
			t.Fatal(err)
		}
	}
	id := FlowID(0)
	add := func(l LinkID, rate float64) {
		id++
		if err := m.AddFlow(Flow{ID: id, Path: []LinkID{l}, Rate: rate, Remaining: 6, RemainingKnown: true}); err != nil {
			t.Fatal(err)
		}
	}
	add("e1-a1", 6)
	add("e1-a1", 2)
	add("e1-a1", 2)
	add("a1-e2", 10)
	add("e1-a2", 2)
	add("e1-a2", 2)
	add("e1-a2", 4)
	add("a2-e2", 8)
	return m, []Candidate{
		{Replica: "r", Path: []LinkID{"src-e1", "e1-a1", "a1-e2", "e2-dst"}},
		{Replica: "r", Path: []LinkID{"src-e1", "e1-a2", "a2-e2", "e2-dst"}},
	}
}

// TestFig32WorkedExample: the new flow gets 3 Mbps on either path (9/3 = 3 s); on path 1 it
// slows the 6 Mbps flow to 3 (+1 s) and the 10 Mbps one to 7 (+0.257 s): 4.257, the
// thesis's "4.25"; on path 2 it slows the 4 Mbps flow to 3 (+0.5 s) and the 8 Mbps one to 7
// (+0.107 s): 3.607, the thesis's "3.6". Path 2 is chosen.
func TestFig32WorkedExample(t *testing.T) {
	m, cands := fig32(t)
	ch, err := m.Choose(cands, 9)
	if err != nil {
		t.Fatal(err)
	}
	e1, e2 := ch.Estimates[0], ch.Estimates[1]
	if !near(e1.Rate, 3) || !near(e2.Rate, 3) {
		t.Fatalf("new flow's shares %v, %v; want 3 on both paths", e1.Rate, e2.Rate)
	}
	if !near(e1.Cost, 3+1+(6.0/7-6.0/10)) || math.Abs(e1.Cost-4.25) > 0.01 {
		t.Fatalf("path 1 costs %v, want 4.257 (the thesis's 4.25)", e1.Cost)
	}
	if !near(e2.Cost, 3+0.5+(6.0/7-6.0/8)) || math.Abs(e2.Cost-3.6) > 0.01 {
		t.Fatalf("path 2 costs %v, want 3.607 (the thesis's 3.6)", e2.Cost)
	}
	if ch.Best != 1 {
		t.Fatalf("chose path %d, want path 2 (index 1)", ch.Best+1)
	}
	// The estimate changes nothing in the model.
	if f, _ := m.Flow(1); f.Rate != 6 {
		t.Fatalf("estimating changed flow 1's rate to %v", f.Rate)
	}
}

// TestUnknownSizeTakesTheDefault: a background flow of unknown size counts with the model's
// DefaultRemaining (3.2.2); with none it delays nothing.
func TestUnknownSizeTakesTheDefault(t *testing.T) {
	m := NewModel()
	if err := m.SetLink("l", 10); err != nil {
		t.Fatal(err)
	}
	if err := m.AddFlow(Flow{ID: 1, Path: []LinkID{"l"}, Rate: 10}); err != nil {
		t.Fatal(err)
	}
	e, err := m.Estimate([]LinkID{"l"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !near(e.Cost, 2) {
		t.Fatalf("cost %v, want 2 (10 at 5, no delay counted)", e.Cost)
	}
	m.DefaultRemaining = 10
	e, _ = m.Estimate([]LinkID{"l"}, 10)
	if !near(e.Cost, 2+(10.0/5-10.0/10)) {
		t.Fatalf("cost %v, want 3 (2 + the background flow's second)", e.Cost)
	}
}

// TestSplitOverTwoReplicas: two replicas on disjoint idle paths of 10 and 5. Reading 30 from
// the faster alone takes 3 s. The makespan rule splits 20/10 (both parts end at 2 s); the
// thesis's literal rule, which costs each subflow as the whole read (3 + 6 = 9 > 3), does not.
func TestSplitOverTwoReplicas(t *testing.T) {
	m := NewModel()
	for l, c := range map[LinkID]float64{"a": 10, "b": 5} {
		if err := m.SetLink(l, c); err != nil {
			t.Fatal(err)
		}
	}
	cands := []Candidate{{Replica: "slow", Path: []LinkID{"b"}}, {Replica: "fast", Path: []LinkID{"a"}}}
	p, err := m.Plan(cands, 30, SplitMakespan)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Parts) != 2 || p.Parts[0].Candidate != 1 || p.Parts[1].Candidate != 0 || !near(p.Parts[0].Bytes, 20) || !near(p.Parts[1].Bytes, 10) || !near(p.Cost, 2) {
		t.Fatalf("makespan plan %+v, want 20 from fast and 10 from slow at cost 2", p)
	}
	if !near(p.Parts[0].Bytes/p.Parts[0].Rate, p.Parts[1].Bytes/p.Parts[1].Rate) {
		t.Fatalf("parts end at %v and %v, want together", p.Parts[0].Bytes/p.Parts[0].Rate, p.Parts[1].Bytes/p.Parts[1].Rate)
	}
	p, err = m.Plan(cands, 30, SplitLiteral)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Parts) != 1 || p.Parts[0].Candidate != 1 || !near(p.SplitCost, 9) {
		t.Fatalf("literal plan %+v, want one part from fast (split costed 9 > 3)", p)
	}
	// Same replica twice is not a split.
	p, _ = m.Plan([]Candidate{{Replica: "x", Path: []LinkID{"a"}}, {Replica: "x", Path: []LinkID{"b"}}}, 30, SplitMakespan)
	if len(p.Parts) != 1 {
		t.Fatalf("split over one replica: %+v", p)
	}
}

// TestSplitSharesABottleneck: when both replicas' paths share the reader's link, the second
// subflow takes its bandwidth from the first; a split gains nothing and is not made.
func TestSplitSharesABottleneck(t *testing.T) {
	m := NewModel()
	for l, c := range map[LinkID]float64{"a": 10, "b": 10, "reader": 10} {
		if err := m.SetLink(l, c); err != nil {
			t.Fatal(err)
		}
	}
	cands := []Candidate{{Replica: "1", Path: []LinkID{"a", "reader"}}, {Replica: "2", Path: []LinkID{"b", "reader"}}}
	p, err := m.Plan(cands, 30, SplitMakespan)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Parts) != 1 {
		t.Fatalf("split through a shared bottleneck: %+v", p)
	}
}

// TestBadInput: every malformed call gets an error and changes nothing.
func TestBadInput(t *testing.T) {
	m := NewModel()
	for _, c := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if m.SetLink("l", c) == nil {
			t.Errorf("capacity %v accepted", c)
		}
	}
	if m.SetLink("", 1) == nil {
		t.Error("an unnamed link accepted")
	}
	if err := m.SetLink("l", 1); err != nil {
		t.Fatal(err)
	}
	for _, f := range []Flow{
		{ID: 1},
		{ID: 1, Path: []LinkID{"nope"}},
		{ID: 1, Path: []LinkID{"l", "l"}},
		{ID: 1, Path: []LinkID{"l"}, Rate: -1},
		{ID: 1, Path: []LinkID{"l"}, Remaining: math.NaN()},
	} {
		if m.AddFlow(f) == nil {
			t.Errorf("flow %+v accepted", f)
		}
	}
	if m.Flows() != 0 {
		t.Fatalf("%d flows after refused adds", m.Flows())
	}
	if err := m.AddFlow(Flow{ID: 1, Path: []LinkID{"l"}, Rate: 1}); err != nil {
		t.Fatal(err)
	}
	if m.AddFlow(Flow{ID: 1, Path: []LinkID{"l"}}) == nil {
		t.Error("a flow ID added twice")
	}
	if m.UpdateFlow(2, 1, 1) == nil || m.UpdateFlow(1, -1, 0) == nil {
		t.Error("a bad update accepted")
	}
	for _, size := range []float64{0, -1, math.Inf(1)} {
		if _, err := m.Estimate([]LinkID{"l"}, size); err == nil {
			t.Errorf("read of %v accepted", size)
		}
	}
	if _, err := m.Choose(nil, 1); err == nil {
		t.Error("no candidates accepted")
	}
	m.RemoveFlow(1)
	m.RemoveFlow(1)
	if m.Flows() != 0 || len(m.onLink) != 0 {
		t.Fatalf("after removal: %d flows, %d links with flows", m.Flows(), len(m.onLink))
	}
}

// TestAFlowOnTwoLinksOfThePathTakesTheLowerShare: flow f crosses both links of the new
// read's path at 5. On A (beside h at 5) it would keep 3.75 next to the new flow's 2.5; on B
// (beside two flows at 2.5) only 2.5. It runs at the lower, so its delay is 6/2.5 − 6/5.
func TestAFlowOnTwoLinksOfThePathTakesTheLowerShare(t *testing.T) {
	m := NewModel()
	for _, l := range []LinkID{"A", "B"} {
		if err := m.SetLink(l, 10); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []Flow{
		{ID: 1, Path: []LinkID{"A", "B"}, Rate: 5, Remaining: 6, RemainingKnown: true},
		{ID: 2, Path: []LinkID{"A"}, Rate: 5},
		{ID: 3, Path: []LinkID{"B"}, Rate: 2.5},
		{ID: 4, Path: []LinkID{"B"}, Rate: 2.5},
	} {
		if err := m.AddFlow(f); err != nil {
			t.Fatal(err)
		}
	}
	e, err := m.Estimate([]LinkID{"A", "B"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !near(e.Rate, 2.5) || !near(e.Delay, 6/2.5-6.0/5) || !near(e.slowed[1], 2.5) {
		t.Fatalf("estimate %+v; want rate 2.5 and flow 1 slowed to 2.5 (delay 1.2)", e)
	}
}

// TestFairRates: on hand-computed networks, and on random ones the max-min properties: no
// link over capacity, no flow over its demand, and every flow either at its demand or on a
// full link where no other flow gets more (so it is that link's largest: its bottleneck).
func TestFairRates(t *testing.T) {
	m := NewModel()
	for l, c := range map[LinkID]float64{"a": 10, "b": 4} {
		if err := m.SetLink(l, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []Flow{{ID: 1, Path: []LinkID{"a", "b"}}, {ID: 2, Path: []LinkID{"b"}}, {ID: 3, Path: []LinkID{"a"}}, {ID: 4, Path: []LinkID{"a"}}} {
		if err := m.AddFlow(f); err != nil {
			t.Fatal(err)
		}
	}
	// b (4) is shared by flows 1 and 2: 2 each; flows 3 and 4 share the rest of a: 4 each.
	got := m.FairRates(nil)
	for id, want := range map[FlowID]float64{1: 2, 2: 2, 3: 4, 4: 4} {
		if !near(got[id], want) {
			t.Fatalf("rates %v, want 1,2 → 2 and 3,4 → 4", got)
		}
	}
	// Flow 3 limited to 1: flow 4 takes 10 − 2 − 1 = 7.
	got = m.FairRates(map[FlowID]float64{3: 1})
	if !near(got[3], 1) || !near(got[4], 7) || !near(got[1], 2) {
		t.Fatalf("rates with flow 3 limited to 1: %v", got)
	}

	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		m := NewModel()
		links := []LinkID{"l0", "l1", "l2", "l3", "l4", "l5"}
		for _, l := range links {
			if err := m.SetLink(l, 1+rng.Float64()*20); err != nil {
				t.Fatal(err)
			}
		}
		demands := map[FlowID]float64{}
		for id := FlowID(1); id <= FlowID(1+rng.IntN(15)); id++ {
			var path []LinkID
			for _, l := range links {
				if rng.IntN(3) == 0 {
					path = append(path, l)
				}
			}
			if len(path) == 0 {
				path = []LinkID{links[rng.IntN(len(links))]}
			}
			if err := m.AddFlow(Flow{ID: id, Path: path}); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) == 0 {
				demands[id] = rng.Float64() * 5
			}
		}
		rates := m.FairRates(demands)
		load := map[LinkID]float64{}
		for id, f := range m.flows {
			for _, l := range f.Path {
				load[l] += rates[id]
			}
		}
		for l, v := range load {
			if v > m.capacity[l]*(1+1e-6) {
				t.Fatalf("link %s carries %v over its %v", l, v, m.capacity[l])
			}
		}
		for id, f := range m.flows {
			if d, ok := demands[id]; ok && rates[id] >= d-1e-6 {
				if rates[id] > d+1e-6 {
					t.Fatalf("flow %d at %v over its demand %v", id, rates[id], d)
				}
				continue
			}
			bottleneck := false
			for _, l := range f.Path {
				if load[l] < m.capacity[l]*(1-1e-6) {
					continue
				}
				largest := true
				for other, g := range m.flows {
					if other != id && slices.Contains(g.Path, l) && rates[other] > rates[id]+1e-6 {
						largest = false
					}
				}
				if largest {
					bottleneck = true
				}
			}
			if !bottleneck {
				t.Fatalf("flow %d at %v has no bottleneck link (not max-min fair): rates %v", id, rates[id], rates)
			}
		}
	}
}

// TestPlaceAppliesTheEstimate: placing the read of Fig. 3.2 on path 2 adds it at 3 Mbps and
// slows the 4 Mbps flow to 3 and the 8 Mbps one to 7, as the estimate said.
func TestPlaceAppliesTheEstimate(t *testing.T) {
	m, cands := fig32(t)
	if _, err := m.Place(100, cands[1].Path, 9); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[FlowID]float64{100: 3, 7: 3, 8: 7, 5: 2, 1: 6} {
		if f, _ := m.Flow(id); !near(f.Rate, want) {
			t.Fatalf("flow %d at %v after the placement, want %v", id, f.Rate, want)
		}
	}
	if _, err := m.Place(100, cands[1].Path, 9); err == nil {
		t.Fatal("a flow placed twice")
	}
}

// A path's latency counts in the read's completion time: a wider path a second away loses to
// a narrower one next door for a read that the narrow one finishes sooner, and a split's
// far part carries less, so that both parts end together.
func TestLatencyCountsInTheChoiceAndTheSplit(t *testing.T) {
	m := NewModel()
	for _, l := range []LinkID{"near", "far"} {
		if err := m.SetLink(l, map[LinkID]float64{"near": 10e6, "far": 20e6}[l]); err != nil {
			t.Fatal(err)
		}
	}
	cands := []Candidate{{Replica: "far", Path: []LinkID{"far"}, Latency: 1}, {Replica: "near", Path: []LinkID{"near"}}}
	ch, err := m.Choose(cands, 10e6)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Best != 1 || ch.Estimates[0].Own != 1.5 || ch.Estimates[1].Own != 1 {
		t.Fatalf("choice %d, own times %v / %v; want near (1 s) over far (0.5 s + 1 s)", ch.Best, ch.Estimates[0].Own, ch.Estimates[1].Own)
	}
	cands[0].Latency = math.NaN()
	if _, err := m.Choose(cands, 10e6); err == nil {
		t.Fatal("a NaN latency was accepted")
	}
	cands[0].Latency = 0.25
	plan, err := m.Plan(cands, 10e6, SplitMakespan)
	if err != nil || len(plan.Parts) != 2 {
		t.Fatalf("plan %+v, %v: want a split", plan, err)
	}
	// Both end at T = (10e6 + 20e6·0.25) / 30e6 = 0.5 s: far carries 20e6·0.25 = 5e6.
	byReplica := map[string]float64{}
	for _, p := range plan.Parts {
		byReplica[cands[p.Candidate].Replica] = p.Bytes
	}
	if math.Abs(byReplica["far"]-5e6) > 1 || math.Abs(byReplica["near"]-5e6) > 1 || math.Abs(plan.Cost-0.5) > 1e-9 {
		t.Fatalf("parts %v, cost %v; want 5e6 each, ending at 0.5 s", byReplica, plan.Cost)
	}
}
