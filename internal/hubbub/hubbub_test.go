package hubbub

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// cluster is six nodes with service time 1 ms + 0.5 µs per op/s; slow (node → factor) slows
// some from period from on.
func samples(rng *rand.Rand, period int, slow map[int]float64, from int, host bool) []NodeSample {
	var out []NodeSample
	for i := range 6 {
		load := 400 + 300*rng.Float64()
		svc := 1000 + 0.5*load
		f := 1.0
		if period >= from {
			f = max(1, slow[i])
		}
		svc *= f * (1 + 0.03*rng.NormFloat64())
		s := NodeSample{Node: fmt.Sprintf("n%d", i), LoadOps: load, ServiceTime: time.Duration(svc) * time.Microsecond}
		if host {
			s.HostMeasured = true
			if f > 1 {
				s.StealShare = 0.2
			}
		}
		out = append(out, s)
	}
	return out
}

// A node slowed 1.5-2× mid-run is flagged within two control periods; the others never are; it
// becomes the first source of moves and no destination; its effective capacity drops.
func TestInterferenceDetected(t *testing.T) {
	for _, factor := range []float64{1.5, 2} {
		rng := rand.New(rand.NewPCG(1, uint64(factor*10)))
		x, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		var got []NodeSample
		detected := -1
		for p := range 40 {
			got = x.Observe(samples(rng, p, map[int]float64{3: factor}, 20, true))
			for _, s := range got {
				if s.Interfered && s.Node != "n3" {
					t.Fatalf("factor %v, period %d: %s flagged (index %.2f)", factor, p, s.Node, s.Index)
				}
				if s.Interfered && s.Node == "n3" && detected < 0 {
					detected = p
				}
			}
		}
		if detected < 20 || detected > 21 {
			t.Fatalf("factor %v: slowed at period 20, detected at %d (want within two periods)", factor, detected)
		}
		if src := Sources(got); src[0] != "n3" {
			t.Errorf("sources %v: the interfered node first", src)
		}
		if dst := Destinations(got); slices.Contains(dst, "n3") || len(dst) != 5 {
			t.Errorf("destinations %v: every node but the interfered one", dst)
		}
		idx := got[3].Index
		if c := EffectiveCapacity(1000, idx); c > 1000/(factor*0.85) {
			t.Errorf("factor %v: index %.2f, effective capacity %.0f", factor, idx, c)
		}
	}
}

// A slow node whose host shows no interference (measured, and idle) is not flagged; one that
// recovers is cleared.
func TestInterferenceCrossCheckAndClear(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	x, _ := New(Options{})
	for p := range 30 {
		s := samples(rng, p, map[int]float64{1: 2}, 10, true)
		s[1].StealShare = 0 // the host says it is not interference
		for _, n := range x.Observe(s) {
			if n.Interfered {
				t.Fatalf("period %d: %s flagged although its host is idle", p, n.Node)
			}
		}
	}
	y, _ := New(Options{})
	var last []NodeSample
	for p := range 40 {
		slow := map[int]float64{}
		if p < 20 {
			slow[2] = 2
		}
		last = y.Observe(samples(rng, p, slow, 5, false))
	}
	if last[2].Interfered {
		t.Fatalf("a node 20 periods after its interference ended is still flagged (index %.2f)", last[2].Index)
	}
}
