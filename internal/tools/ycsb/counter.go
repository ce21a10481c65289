package ycsb

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// AckWindow is YCSB's AcknowledgedCounterGenerator.WINDOW_SIZE (2^20): how many issued values
// may be awaiting acknowledgement beyond the lowest unacknowledged one.
const AckWindow = 1 << 20

const ackMask = AckWindow - 1

// AckCounter is YCSB's AcknowledgedCounterGenerator: a counter whose Last value is the highest
// value v such that every value from the start up to v has been acknowledged, as opposed to
// the highest value issued. The insert key sequence of a run is one of these: readers (the
// request distributions) only ever see keys whose insert has completed.
//
// It is safe for concurrent use. Next is one atomic add; Acknowledge marks a bit in a ring of
// AckWindow bits and, if no other goroutine is doing so, advances Last over the contiguous run
// of acknowledged values (YCSB's tryLock scheme, plus a re-check after unlocking so that an
// acknowledgement that lost the race for the lock is never left unconsumed).
type AckCounter struct {
	start  uint64
	next   atomic.Uint64
	limit  atomic.Int64
	mu     sync.Mutex
	window [AckWindow / 64]atomic.Uint64
}

// NewAckCounter is AcknowledgedCounterGenerator(countstart): the first value issued is start
// and Last starts at start-1.
func NewAckCounter(start uint64) *AckCounter {
	if start > 1<<62 {
		panic(fmt.Sprintf("ycsb: NewAckCounter(%d): start too large", start))
	}
	c := &AckCounter{start: start}
	c.next.Store(start)
	c.limit.Store(int64(start) - 1)
	return c
}

// Next issues the next value (CounterGenerator.nextValue).
func (c *AckCounter) Next() uint64 {
	return c.next.Add(1) - 1
}

// Issued is how many values Next has returned.
func (c *AckCounter) Issued() uint64 {
	return c.next.Load() - c.start
}

// Last is AcknowledgedCounterGenerator.lastValue(): every value in [start, Last] has been
// acknowledged. It is start-1 before the first acknowledgement (so -1 for a counter from 0),
// and it never decreases.
func (c *AckCounter) Last() int64 {
	return c.limit.Load()
}

// Acknowledge is AcknowledgedCounterGenerator.acknowledge(value): v, a value returned by Next,
// has completed. Each issued value must be acknowledged exactly once — YCSB acknowledges an
// insert in a finally block, whether or not it succeeded — since Last cannot pass a value that
// is never acknowledged. It panics (as YCSB throws "Too many unacknowledged insertion keys")
// if v is more than AckWindow past the lowest unacknowledged value, and on a value that was
// never issued or was already acknowledged (when that is detectable).
func (c *AckCounter) Acknowledge(v uint64) {
	if v < c.start || v >= c.next.Load() {
		panic(fmt.Sprintf("ycsb: AckCounter: acknowledged %d, which was never issued", v))
	}
	limit := c.limit.Load()
	if int64(v) <= limit {
		panic(fmt.Sprintf("ycsb: AckCounter: %d acknowledged twice", v))
	}
	if int64(v)-limit > AckWindow {
		panic(fmt.Sprintf("ycsb: AckCounter: too many unacknowledged insertion keys: %d acknowledged while %d "+
			"is still pending (window %d)", v, limit+1, AckWindow))
	}
	slot := v & ackMask
	bit := uint64(1) << (slot & 63)
	if c.window[slot>>6].Or(bit)&bit != 0 {
		panic(fmt.Sprintf("ycsb: AckCounter: %d acknowledged twice", v))
	}
	for c.mu.TryLock() {
		// Move the contiguous run of acknowledged values over to limit, visiting each slot of
		// the window at most once.
		idx := c.limit.Load() + 1
		for range AckWindow {
			s := uint64(idx) & ackMask
			b := uint64(1) << (s & 63)
			if c.window[s>>6].Load()&b == 0 {
				break
			}
			c.window[s>>6].And(^b)
			idx++
		}
		c.limit.Store(idx - 1)
		c.mu.Unlock()
		// An Acknowledge of idx that failed TryLock while we held the lock has set its bit
		// after we looked; nobody else will consume it, so go round again.
		s := uint64(idx) & ackMask
		if c.window[s>>6].Load()&(uint64(1)<<(s&63)) == 0 {
			return
		}
	}
}
