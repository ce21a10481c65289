package hlc

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestVersionEncodingSortsLikeCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var vs []Version
	for range 500 {
		vs = append(vs, Version{WallNanos: rng.Int64N(1000) - 500, Logical: uint32(rng.IntN(3)), NodeID: uint32(rng.IntN(3))})
	}
	for _, a := range vs {
		b := vs[rng.IntN(len(vs))]
		ea, eb := a.Encode(nil), b.Encode(nil)
		if got, want := slices.Compare(ea, eb), a.Compare(b); got != want {
			t.Fatalf("encoding order %d != Compare %d for %v vs %v", got, want, a, b)
		}
		d, err := DecodeVersion(ea)
		if err != nil || d != a {
			t.Fatalf("round trip %v -> %v, %v", a, d, err)
		}
	}
	if _, err := DecodeVersion([]byte{1, 2}); err == nil {
		t.Fatal("short encoding accepted")
	}
}

func TestHLCIsMonotonicAndTiesBreakByNode(t *testing.T) {
	c := NewHLC(7, time.Minute)
	t0 := time.Unix(100, 0)
	a := c.Now(t0)
	b := c.Now(t0) // same physical time: logical counter moves
	if !a.Less(b) || b.Logical != a.Logical+1 {
		t.Fatalf("want %v < %v with logical+1", a, b)
	}
	d := c.Now(t0.Add(-time.Second)) // physical clock went back: the HLC must not
	if !b.Less(d) {
		t.Fatalf("clock went backwards: %v then %v", b, d)
	}
	other := NewHLC(3, time.Minute).Now(t0)
	if other.Compare(a) >= 0 {
		t.Fatalf("same wall and logical: node 3 must order before node 7: %v vs %v", other, a)
	}
}

func TestHLCObserve(t *testing.T) {
	c := NewHLC(1, time.Second)
	t0 := time.Unix(100, 0)
	remote := Version{WallNanos: t0.Add(500 * time.Millisecond).UnixNano(), Logical: 4, NodeID: 2}
	if !c.Observe(t0, remote) {
		t.Fatal("a version within maxSkew must be adopted")
	}
	if v := c.Now(t0); !remote.Less(v) {
		t.Fatalf("after observing %v, Now gave %v", remote, v)
	}
	far := Version{WallNanos: t0.Add(time.Hour).UnixNano(), NodeID: 2}
	if c.Observe(t0, far) {
		t.Fatal("a version an hour ahead must not drag the clock")
	}
	if v := c.Now(t0); !v.Less(far) {
		t.Fatalf("clock adopted a far-future version: %v", v)
	}
}

func TestSystemClockOffset(t *testing.T) {
	c := NewSystemClock(time.Hour)
	if d := c.Now().Sub(time.Now()); d < 59*time.Minute {
		t.Fatalf("offset not applied: %v", d)
	}
	c.SetOffset(0)
	if c.Offset() != 0 {
		t.Fatal("SetOffset")
	}
}

func TestSystemClockDrift(t *testing.T) {
	c := NewSystemClock(time.Second)
	// 1e6 ppm: the clock runs at twice the machine's rate, so the offset grows by the time
	// that passes; the sleep is only a lower bound on that time.
	c.SetDrift(1e6)
	time.Sleep(20 * time.Millisecond)
	if off := c.Offset(); off < time.Second+20*time.Millisecond {
		t.Fatalf("drift not applied: offset %v", off)
	}
	if c.DriftPPM() != 1e6 {
		t.Fatalf("DriftPPM = %v", c.DriftPPM())
	}
	c.SetDrift(0)
	kept := c.Offset()
	time.Sleep(5 * time.Millisecond)
	if c.Offset() != kept || kept < time.Second+20*time.Millisecond {
		t.Fatalf("stopping the drift must keep the offset reached: %v then %v", kept, c.Offset())
	}
	c.SetOffset(-time.Second)
	if c.Offset() != -time.Second || c.DriftPPM() != 0 {
		t.Fatal("SetOffset must replace offset and drift")
	}
}
