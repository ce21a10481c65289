//go:build linux

package wan

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// scheduler holds packets until their release time. Its loop runs on a locked OS thread that
// sleeps in ppoll(2) with a nanosecond timeout (timer slack set to 1 ns, real-time priority
// when allowed) on an eventfd that readers signal when a packet becomes the earliest. This
// keeps the delay error in tens of microseconds where Go timers give up to a millisecond.
type scheduler struct {
	mu    sync.Mutex
	q     packetHeap
	limit int
	seq   uint64
	efd   int // eventfd: a reader wrote a packet earlier than the head the loop sleeps on
}

func newScheduler(limit int) (*scheduler, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("wan: eventfd: %w", err)
	}
	return &scheduler{limit: limit, efd: efd}, nil
}

// push queues p; false when the queue is full.
func (s *scheduler) push(p packet) bool {
	s.mu.Lock()
	if len(s.q) >= s.limit {
		s.mu.Unlock()
		return false
	}
	s.seq++
	p.seq = s.seq
	s.q.push(p)
	earliest := s.q[0].seq == p.seq
	s.mu.Unlock()
	if earliest {
		s.wake()
	}
	return true
}

func (s *scheduler) wake() {
	var one = [8]byte{1}
	_, _ = unix.Write(s.efd, one[:])
}

func (s *scheduler) close() error { return unix.Close(s.efd) }

// run delivers due packets with send until done is closed.
func (s *scheduler) run(done <-chan struct{}, send func(p packet, now time.Time), log *slog.Logger) {
	runtime.LockOSThread() // never unlocked: the thread's settings die with it
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 10}, 0); err != nil {
		log.Warn("wan: no real-time priority for the release thread; delays are less exact under load", "err", err)
	}
	fds := []unix.PollFd{{Fd: int32(s.efd), Events: unix.POLLIN}}
	var drain [8]byte
	due := make([]packet, 0, 256)
	for {
		select {
		case <-done:
			return
		default:
		}
		now := time.Now()
		s.mu.Lock()
		for len(s.q) > 0 && !s.q[0].release.After(now) && len(due) < cap(due) {
			due = append(due, s.q.pop())
		}
		var wait time.Duration = -1 // -1: until woken
		if len(s.q) > 0 {
			wait = s.q[0].release.Sub(now)
		}
		s.mu.Unlock()
		if len(due) > 0 {
			for _, p := range due {
				send(p, time.Now())
			}
			clear(due)
			due = due[:0]
			continue // more may have come due while sending
		}
		var ts *unix.Timespec
		if wait >= 0 {
			t := unix.NsecToTimespec(wait.Nanoseconds())
			ts = &t
		} else {
			// Bounded, so a close is noticed even if its wake-up were lost.
			t := unix.NsecToTimespec(int64(100 * time.Millisecond))
			ts = &t
		}
		if n, _ := unix.Ppoll(fds, ts, nil); n > 0 {
			_, _ = unix.Read(s.efd, drain[:])
		}
	}
}

// packetHeap is a binary min-heap of packets by release time, then arrival. It is written
// out rather than used through container/heap, whose interface boxes every packet: the
// allocations made the release thread assist the garbage collector, which showed up as
// milliseconds of delay error.
type packetHeap []packet

func (h packetHeap) less(i, j int) bool {
	if !h[i].release.Equal(h[j].release) {
		return h[i].release.Before(h[j].release)
	}
	return h[i].seq < h[j].seq
}

func (h *packetHeap) push(p packet) {
	*h = append(*h, p)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *packetHeap) pop() packet {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = packet{}
	q = q[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q.less(l, m) {
			m = l
		}
		if r < len(q) && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}
