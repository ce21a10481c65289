package bench

import (
	"math"
	"testing"
	"time"
)

// A node whose queue stays long is busy all the time: every reading of its utilisation is 1,
// however far ahead its work is booked. An idle stretch reads 0, half the work reads 0.5.
func TestCapacityUtilisation(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &capacity{per: 2500 * time.Microsecond, clock: func() time.Time { return now }}
	c.utilisation() // the first reading starts the meter
	for range 80 {  // a standing queue of 200 ms
		c.reserve()
	}
	for step := range 8 {
		// Keep 200 ms of work queued: book 250 ms of new work each 250 ms.
		for range 100 {
			if _, ok := c.reserve(); !ok {
				t.Fatal("queue full")
			}
		}
		now = now.Add(250 * time.Millisecond)
		if u := c.utilisation(); math.Abs(u-1) > 0.01 {
			t.Fatalf("step %d: saturated node reads %.3f", step, u)
		}
	}
	// Drain the queue, then idle.
	now = now.Add(time.Second)
	c.utilisation()
	now = now.Add(time.Second)
	if u := c.utilisation(); u != 0 {
		t.Fatalf("idle node reads %.3f", u)
	}
	for range 200 { // 0.5 s of work in 1 s
		c.reserve()
	}
	now = now.Add(time.Second)
	if u := c.utilisation(); math.Abs(u-0.5) > 0.01 {
		t.Fatalf("half-busy node reads %.3f", u)
	}
}

// A slowed node's slots take factor× as long, its service meter shows it, and its emulated host
// reports the stolen share; back to 1, both are back to normal.
func TestCapacitySlowdown(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &capacity{per: time.Millisecond, clock: func() time.Time { return now }}
	c.reserve()
	if got := c.serviceTime(); got != time.Millisecond {
		t.Fatalf("one slot on an idle node: %v", got)
	}
	now = now.Add(time.Second)
	c.slow = 2
	c.reserve()
	if got := c.serviceTime(); got != 2*time.Millisecond {
		t.Fatalf("one slot slowed 2×: %v", got)
	}
	if steal, _ := c.host(); steal != 0.5 {
		t.Fatalf("slowed 2×: steal %v, want 0.5", steal)
	}
	c.slow = 1
	if steal, _ := c.host(); steal != 0 {
		t.Fatalf("not slowed: steal %v", steal)
	}
	if got := c.serviceTime(); got != 0 {
		t.Fatalf("no slot since the last reading: %v", got)
	}
}
