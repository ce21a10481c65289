package flowsim

import (
	"math"
	"slices"
	"testing"

	"meridian/internal/mayflower"
)

// TestTestbedPaths: the thesis's testbed has 64 hosts; paths within a rack, a pod and
// across pods have 2, 4 and 6 links, 1, 2 and 8 of them; every link a path names exists.
func TestTestbedPaths(t *testing.T) {
	tb := DefaultTestbed()
	if err := tb.Validate(); err != nil {
		t.Fatal(err)
	}
	if tb.Hosts() != 64 {
		t.Fatalf("%d hosts, want 64", tb.Hosts())
	}
	links := tb.Links()
	for _, tc := range []struct{ a, b, n, hops, dist int }{{0, 1, 1, 2, 1}, {0, 4, 2, 4, 2}, {0, 16, 8, 6, 3}, {63, 0, 8, 6, 3}} {
		ps := tb.Paths(tc.a, tc.b)
		if len(ps) != tc.n || tb.Distance(tc.a, tc.b) != tc.dist {
			t.Fatalf("%d→%d: %d paths, distance %d; want %d, %d", tc.a, tc.b, len(ps), tb.Distance(tc.a, tc.b), tc.n, tc.dist)
		}
		for _, p := range ps {
			if len(p) != tc.hops {
				t.Fatalf("%d→%d: path %v, want %d links", tc.a, tc.b, p, tc.hops)
			}
			for _, l := range p {
				if _, ok := links[l]; !ok {
					t.Fatalf("path %v names link %s, which does not exist", p, l)
				}
			}
		}
	}
	for h := range tb.Hosts() {
		if tb.HostAt(tb.Place(h)) != h {
			t.Fatalf("host %d placed at %+v maps back to %d", h, tb.Place(h), tb.HostAt(tb.Place(h)))
		}
	}
	// 8:1 as 2 × 4: a rack's four 1 Gbps hosts share two uplinks of 1 Gbps; an
	// aggregation switch's four 1 Gbps rack uplinks share two core uplinks of 0.5 Gbps.
	if up, core := links["tor0.0>agg0.0"], links["agg0.0>core0"]; up != tb.EdgeBps || core != tb.EdgeBps/2 || tb.Oversubscription() != 8 {
		t.Fatalf("rack uplink %v, core uplink %v bytes/s; want %v and %v", up, core, tb.EdgeBps, tb.EdgeBps/2)
	}
}

// TestRunIsDeterministicAndBounded: one seed gives the same result twice; every job ends.
func TestRunIsDeterministicAndBounded(t *testing.T) {
	o := Options{Scheme: MayflowerP, Seed: 3, Jobs: 150}
	a, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("two runs of one seed differ: %+v / %+v", a, b)
	}
	if a.Jobs != 150 || !(a.Mean > 0) || a.P95 < a.P50 {
		t.Fatalf("result %+v", a)
	}
	// A 128 MB read cannot beat a 1 Gbps edge link: at least 1.07 s.
	if a.P50 < 128<<20/DefaultTestbed().EdgeBps*(1-1e-9) {
		t.Fatalf("median %v s below the edge link's bound", a.P50)
	}
}

// TestCompareRunsEverySchemeOnTheSameWorkload: the comparison holds every scheme with the
// seeds' jobs, and on this workload (seed 1, 400 jobs, the thesis's defaults) the cost-based
// selection beats nearest-replica with ECMP on average, as in every run of Fig. 3.3's
// setting; the thesis's literal split rule never splits here, the makespan rule does.
func TestCompareRunsEverySchemeOnTheSameWorkload(t *testing.T) {
	c, err := Compare(Options{Jobs: 400}, Schemes, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Results) != len(Schemes) {
		t.Fatalf("%d results for %d schemes", len(c.Results), len(Schemes))
	}
	for _, r := range c.Results {
		if r.Jobs != 400 {
			t.Fatalf("%s: %d jobs, want 400", r.Scheme, r.Jobs)
		}
	}
	near, _ := c.Result(NearestECMP)
	mf, _ := c.Result(MayflowerPMakespan)
	lit, _ := c.Result(MayflowerP)
	b, _ := c.Result(MayflowerB)
	if !(mf.Mean < near.Mean) || mf.Split == 0 || lit.Split != 0 || lit != (Result{Scheme: MayflowerP, Jobs: b.Jobs, Mean: b.Mean, P50: b.P50, P95: b.P95, P99: b.P99, SimSeconds: b.SimSeconds}) {
		t.Fatalf("nearest-ecmp %+v, mayflower-p (makespan) %+v, literal %+v, b %+v", near, mf, lit, b)
	}
	// Tail stealing moves bytes of stragglers to another replica; every job still ends.
	steal, _ := c.Result(MayflowerPSteal)
	if steal.Steals == 0 || !(steal.StolenBytes > 0) || mf.Steals != 0 {
		t.Fatalf("mayflower-p-steal %+v (makespan %+v): want steals only under the steal scheme", steal, mf)
	}
	cdf := c.CDF(MayflowerB, 50)
	if len(cdf) != 50 || cdf[len(cdf)-1][1] != 1 || cdf[len(cdf)-1][0] < b.P99 || cdf[0][0] > b.P50 {
		t.Fatalf("CDF of %d points ending at %v", len(cdf), cdf[len(cdf)-1])
	}
	for i := 1; i < len(cdf); i++ {
		if cdf[i][0] < cdf[i-1][0] || cdf[i][1] <= cdf[i-1][1] {
			t.Fatalf("CDF not increasing at %d: %v then %v", i, cdf[i-1], cdf[i])
		}
	}
	if c.CDF("nope", 10) != nil {
		t.Fatal("a CDF for a scheme not run")
	}
	if _, err := Compare(Options{}, nil, 1, 1); err == nil {
		t.Fatal("a comparison of no scheme accepted")
	}
	if _, err := Run(Options{Scheme: "nope"}); err == nil {
		t.Fatal("an unknown scheme accepted")
	}
	if _, err := Run(Options{Scheme: MayflowerB, Locality: [3]float64{0.5, 0.5, 0.5}}); err == nil {
		t.Fatal("a locality summing to 1.5 accepted")
	}
}

// TestEndpointOnlyIgnoresBackground: without background flows the endpoint-only view sees
// everything the counters do and infers no hidden load (every read's rate is explained by
// the reads), so the runs are identical, with and without the inference; with them it
// differs from the counters (it cannot see them) and from the view without the inference
// (it infers their load).
func TestEndpointOnlyIgnoresBackground(t *testing.T) {
	run := func(bg int, endpoint, noInference bool) Result {
		r, err := Run(Options{Scheme: MayflowerB, Seed: 5, Jobs: 200, Background: bg, EndpointOnly: endpoint, NoInference: noInference})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if a, b, c := run(0, false, false), run(0, true, false), run(0, true, true); a != b || a != c {
		t.Fatalf("no background: counters %+v, endpoints %+v, endpoints without inference %+v; want the same", a, b, c)
	}
	a, b, c := run(16, false, false), run(16, true, false), run(16, true, true)
	if a == b || b == c {
		t.Fatalf("16 background flows: counters %+v, endpoints %+v, endpoints without inference %+v; want three different runs", a, b, c)
	}
	if _, err := Run(Options{Scheme: MayflowerB, NoInference: true}); err == nil {
		t.Fatal("no inference without the endpoint-only view accepted")
	}
}

// TestEndpointInferenceFindsBackgroundLoad: over a run with 16 background flows, most of the
// load the endpoint-only view infers lies on links that carry background flows, and most of
// the background flows' load lies on links where it infers some (the test peeks at the
// simulated truth; the inference does not). Links are counted by load (bytes/s), polled.
func TestEndpointInferenceFindsBackgroundLoad(t *testing.T) {
	var inferred, inferredOnBg, bg, bgFound, bgUncrossed float64
	polls := 0
	crossed := map[mayflower.LinkID]bool{} // links some read has crossed so far
	_, _, err := runWith(Options{Scheme: MayflowerB, Seed: 2, Jobs: 400, Background: 16, EndpointOnly: true}, func(s *sim, rates map[mayflower.FlowID]float64) {
		polls++
		onLink := map[mayflower.LinkID]float64{}
		for id, f := range s.flows {
			tf, _ := s.truth.Flow(id)
			for _, l := range tf.Path {
				if f.job == nil {
					onLink[l] += rates[id]
				} else {
					crossed[l] = true
				}
			}
		}
		found := map[mayflower.LinkID]bool{}
		for _, h := range s.inferred.Hidden {
			load := float64(h.Flows) * h.Rate
			inferred += load
			if onLink[h.Link] > 0 {
				inferredOnBg += load
			}
			found[h.Link] = true
		}
		for l, load := range onLink {
			bg += load
			if found[l] {
				bgFound += load
			}
			if !crossed[l] {
				bgUncrossed += load
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	precision, recall := inferredOnBg/inferred, bgFound/bg
	t.Logf("%d polls: %.0f%% of the inferred load on links with background flows, %.0f%% of the background load on links with inferred load, %.1f%% on links no read had crossed yet", polls, 100*precision, 100*recall, 100*bgUncrossed/bg)
	if precision < 0.7 || recall < 0.65 {
		t.Fatalf("%.2f of the inferred load on background links (want ≥ 0.7), %.2f of the background load found (want ≥ 0.65)", precision, recall)
	}
	// Without the inference the view holds nothing of the kind.
	_, _, err = runWith(Options{Scheme: MayflowerB, Seed: 2, Jobs: 50, Background: 16, EndpointOnly: true, NoInference: true}, func(s *sim, _ map[mayflower.FlowID]float64) {
		if len(s.view.HiddenFlows()) > 0 {
			t.Fatalf("hidden flows %v without the inference", s.view.HiddenFlows())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkloadRepeatsAndSelectorChoosesTestbedPaths: a seed's workload is the same every
// time and for every scheme, a run on it is deterministic, and a detached selector's choices
// are paths of the testbed whose shares sum to one.
func TestWorkloadRepeatsAndSelectorChoosesTestbedPaths(t *testing.T) {
	o := Options{Seed: 3, Jobs: 50}
	a, err := Workload(o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Workload(o)
	if !slices.Equal(a, b) || len(a) != 50 {
		t.Fatalf("two draws of one seed's workload differ (or %d jobs)", len(a))
	}
	r1, err := RunWorkload(o, MayflowerPMakespan, a)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := RunWorkload(o, MayflowerPMakespan, a)
	if r1 != r2 || r1.Jobs != 50 {
		t.Fatalf("runs on one workload differ: %+v vs %+v", r1, r2)
	}
	bad := slices.Clone(a)
	bad[3].Client = bad[3].Replicas[0]
	if _, err := RunWorkload(o, NearestECMP, bad); err == nil {
		t.Fatal("a client on a replica must be refused")
	}
	for _, sc := range []Scheme{NearestECMP, SinbadRM, MayflowerPMakespan} {
		o.Scheme = sc
		sel, err := NewSelector(o)
		if err != nil {
			t.Fatal(err)
		}
		var id mayflower.FlowID
		for i, j := range a[:20] {
			cs, err := sel.Choose(j.Client, j.Replicas)
			if err != nil {
				t.Fatal(err)
			}
			share := 0.0
			for _, c := range cs {
				paths := DefaultTestbed().Paths(c.Replica, j.Client)
				if !slices.Contains(j.Replicas[:], c.Replica) || !slices.Equal(paths[c.PathIndex], c.Path) {
					t.Fatalf("%s job %d: choice %+v is not a replica's testbed path", sc, i, c)
				}
				share += c.Share
				id++
				if err := sel.Started(id, c.Path, 32<<20); err != nil {
					t.Fatal(err)
				}
			}
			if math.Abs(share-1) > 1e-9 {
				t.Fatalf("%s job %d: shares sum to %v", sc, i, share)
			}
		}
	}
	o.Scheme = MayflowerPSteal
	if _, err := NewSelector(o); err == nil {
		t.Fatal("tail stealing has no whole-chunk selector; it must be refused")
	}
}
