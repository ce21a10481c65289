package kawkab

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"
)

// Clock is the time the object-store model (and later Kawkab's timers) waits on: the wall clock
// in production, a VirtualClock in tests so that modelled seconds cost no real time.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx is done (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// VirtualClock is a discrete-event clock for tests: time moves only when every goroutine taking
// part is asleep in Sleep, and then jumps to the earliest wake-up. A modelled minute of S3
// traffic costs microseconds, and what a test measures with Now is the modelled time alone.
//
// The goroutines taking part are the one that created the clock and those started with Go;
// Wait lets the creator wait for the latter without holding time back. A goroutine that
// sleeps without taking part breaks the accounting (Sleep panics when it notices).
type VirtualClock struct {
	mu       sync.Mutex
	now      time.Time
	running  int // goroutines taking part that are not asleep
	seq      uint64
	sleepers sleeperHeap
	wg       sync.WaitGroup
}

var _ Clock = (*VirtualClock)(nil)

// NewVirtualClock returns a clock reading start; the calling goroutine takes part.
func NewVirtualClock(start time.Time) *VirtualClock {
	return &VirtualClock{now: start, running: 1}
}

// Now returns the virtual time.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep waits until the virtual time is d later, which happens as soon as every other goroutine
// taking part is asleep or done and no one wakes earlier.
func (c *VirtualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	c.mu.Lock()
	s := &sleeper{at: c.now.Add(d), seq: c.seq, ch: make(chan struct{}), ctx: ctx}
	c.seq++
	heap.Push(&c.sleepers, s)
	c.running--
	if c.running < 0 {
		c.mu.Unlock()
		panic("kawkab: VirtualClock.Sleep from a goroutine that does not take part (start it with Go)")
	}
	c.advanceLocked()
	c.mu.Unlock()
	select {
	case <-s.ch:
		if s.canceled {
			return ctx.Err()
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		if s.index >= 0 {
			heap.Remove(&c.sleepers, s.index)
			c.running++
			return ctx.Err()
		}
		if s.canceled {
			return ctx.Err()
		}
		return nil // woken meanwhile, its time reached
	}
}

// Go runs f in a new goroutine that takes part in the clock.
func (c *VirtualClock) Go(f func()) {
	c.mu.Lock()
	c.running++
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.running--
			c.advanceLocked()
			c.mu.Unlock()
			c.wg.Done()
		}()
		f()
	}()
}

// Wait waits, without holding virtual time back, until every goroutine started with Go has
// returned.
func (c *VirtualClock) Wait() {
	c.mu.Lock()
	c.running--
	c.advanceLocked()
	c.mu.Unlock()
	c.wg.Wait()
	c.mu.Lock()
	c.running++
	c.mu.Unlock()
}

// advanceLocked moves time to the earliest wake-up when no goroutine taking part is running,
// and wakes everyone due then. A sleeper whose context is already done is woken first, without
// moving time: the goroutine that canceled it may have finished before the sleeper noticed.
func (c *VirtualClock) advanceLocked() {
	if c.running > 0 || len(c.sleepers) == 0 {
		return
	}
	for _, s := range slices.Clone(c.sleepers) {
		if s.ctx.Err() != nil {
			heap.Remove(&c.sleepers, s.index)
			s.canceled = true
			c.running++
			close(s.ch)
		}
	}
	if c.running > 0 || len(c.sleepers) == 0 {
		return
	}
	if at := c.sleepers[0].at; at.After(c.now) {
		c.now = at
	}
	for len(c.sleepers) > 0 && !c.sleepers[0].at.After(c.now) {
		s := heap.Pop(&c.sleepers).(*sleeper)
		c.running++
		close(s.ch)
	}
}

type sleeper struct {
	at  time.Time
	seq uint64
	ch  chan struct{}
	ctx context.Context
	// index is the place in the heap, -1 once woken; canceled says it was woken because ctx
	// was done.
	index    int
	canceled bool
}

type sleeperHeap []*sleeper

func (h sleeperHeap) Len() int { return len(h) }
func (h sleeperHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h sleeperHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *sleeperHeap) Push(x any) {
	s := x.(*sleeper)
	s.index = len(*h)
	*h = append(*h, s)
}
func (h *sleeperHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.index = -1
	return s
}
