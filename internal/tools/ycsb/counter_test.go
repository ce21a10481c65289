package ycsb

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func TestAckCounterOutOfOrder(t *testing.T) {
	c := NewAckCounter(10)
	if c.Last() != 9 {
		t.Fatalf("Last = %d before any insert, want 9", c.Last())
	}
	var v [5]uint64
	for i := range v {
		v[i] = c.Next()
	}
	if v != [5]uint64{10, 11, 12, 13, 14} {
		t.Fatalf("issued %v", v)
	}
	c.Acknowledge(12)
	c.Acknowledge(11)
	if c.Last() != 9 {
		t.Fatalf("Last = %d with 10 unacknowledged, want 9", c.Last())
	}
	c.Acknowledge(10)
	if c.Last() != 12 {
		t.Fatalf("Last = %d after 10,11,12, want 12", c.Last())
	}
	c.Acknowledge(14)
	if c.Last() != 12 {
		t.Fatalf("Last = %d with 13 pending, want 12", c.Last())
	}
	c.Acknowledge(13)
	if c.Last() != 14 || c.Issued() != 5 {
		t.Fatalf("Last = %d, Issued = %d, want 14, 5", c.Last(), c.Issued())
	}
}

func TestAckCounterMisuse(t *testing.T) {
	mustPanic := func(name, want string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil {
				t.Errorf("%s: no panic", name)
			} else if s, _ := r.(string); !strings.Contains(s, want) {
				t.Errorf("%s: panic %q, want it to mention %q", name, s, want)
			}
		}()
		f()
	}
	c := NewAckCounter(0)
	a, b := c.Next(), c.Next()
	c.Acknowledge(a)
	mustPanic("twice after consumed", "twice", func() { c.Acknowledge(a) })
	_ = b
	d := c.Next()
	c.Acknowledge(d) // pending behind b
	mustPanic("twice while pending", "twice", func() { c.Acknowledge(d) })
	mustPanic("never issued", "never issued", func() { c.Acknowledge(1000) })

	// YCSB's "Too many unacknowledged insertion keys": more than AckWindow past the lowest
	// pending value.
	w := NewAckCounter(0)
	first := w.Next()
	var last uint64
	for range AckWindow {
		last = w.Next()
	}
	mustPanic("window overflow", "too many unacknowledged", func() { w.Acknowledge(last) })
	w.Acknowledge(last - 1) // exactly AckWindow past Last=-1... within the window
	w.Acknowledge(first)
	if w.Last() != 0 {
		t.Fatalf("Last = %d, want 0", w.Last())
	}
}

// Concurrent acknowledgements in random order: Last ends at the last value and never passes
// a value that has not been acknowledged.
func TestAckCounterConcurrent(t *testing.T) {
	const workers, each = 8, 5000
	c := NewAckCounter(100)
	var acked sync.Map
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			var held []uint64
			for range each {
				held = append(held, c.Next())
				// Acknowledge a random held value now and then, so acks arrive out of order.
				for len(held) > 0 && r.IntN(3) == 0 {
					i := r.IntN(len(held))
					v := held[i]
					held = append(held[:i], held[i+1:]...)
					acked.Store(v, true)
					c.Acknowledge(v)
				}
				if last := c.Last(); last >= 100 {
					if _, ok := acked.Load(uint64(last)); !ok {
						t.Errorf("Last = %d, which was not acknowledged", last)
						return
					}
				}
			}
			for _, v := range held {
				acked.Store(v, true)
				c.Acknowledge(v)
			}
		}()
	}
	wg.Wait()
	if want := int64(100 + workers*each - 1); c.Last() != want {
		t.Fatalf("Last = %d after all acknowledgements, want %d", c.Last(), want)
	}
}
