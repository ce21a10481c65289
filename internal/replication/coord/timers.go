package coord

import (
	"container/heap"
	"time"
)

// TimerKind says what a timer is for. The coordinator's own kinds are below
// TimerExtension; an extension numbers its kinds from TimerExtension on.
type TimerKind uint8

const (
	timerWriteDeadline TimerKind = iota + 1
	timerReadDeadline
	timerReadSpeculate
	timerScanDeadline
	timerScanSpeculate
	timerFetchHedge
)

// TimerExtension is the first timer kind of an extension (Extension.Timer fires it).
const TimerExtension TimerKind = 64

// timer fires once at `at` for the request `id`. Timers of finished requests are dropped
// lazily when they fire, so cancellation costs nothing.
type timer struct {
	at   time.Time
	seq  uint64 // insertion order: equal deadlines fire in a deterministic order
	kind TimerKind
	id   uint64
}

type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

type timers struct {
	h   timerHeap
	seq uint64
}

func (t *timers) add(at time.Time, kind TimerKind, id uint64) {
	t.seq++
	heap.Push(&t.h, timer{at: at, seq: t.seq, kind: kind, id: id})
}

// due pops the timers whose time has come, in deadline order; at most max per call so one
// tick's work is bounded (the rest fire on the next tick).
func (t *timers) due(now time.Time, max int) []timer {
	var out []timer
	for len(t.h) > 0 && !t.h[0].at.After(now) && len(out) < max {
		out = append(out, heap.Pop(&t.h).(timer))
	}
	return out
}

func (t *timers) len() int { return len(t.h) }
