// Package seedpool runs the seeds of a deterministic simulation on several cores and hands
// their results back in seed order, so a parallel run prints, sums and stops exactly as a
// sequential one does.
//
// Each seed's run must be independent of every other (its own simulator, storage and random
// source): the simulators in this repository share no mutable state between runs.
package seedpool

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// MaxWorkers bounds the goroutines a run starts, whatever is asked for.
const MaxWorkers = 256

// Workers returns n, or the number of usable cores when n is 0, within [1, MaxWorkers].
func Workers(n int) int {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	return max(1, min(n, MaxWorkers))
}

// Run calls run(i) for i = 0..n-1 on up to workers goroutines and deliver(i, result) for each
// in index order, on the caller's goroutine. It stops after the first index whose delivery
// returns stop = true or whose run returns an error, exactly as a sequential loop would: no
// result past that index is delivered, and runs already started past it are waited for and
// discarded. At most 2×workers results wait for delivery at any time.
//
// A run that panics returns an error carrying the panic and its stack: a run past the stop
// (one a sequential loop would never have started) must not bring the process down.
//
// It returns the number of results delivered and the first error (a run's, in index order).
func Run[T any](n, workers int, run func(i int) (T, error), deliver func(i int, result T) (stop bool)) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("seedpool: %d runs", n)
	}
	run = recovering(run)
	workers = min(Workers(workers), max(n, 1))
	if workers == 1 {
		for i := range n {
			r, err := run(i)
			if err != nil {
				return i, err
			}
			if deliver(i, r) {
				return i + 1, nil
			}
		}
		return n, nil
	}
	type outcome struct {
		i   int
		r   T
		err error
	}
	var (
		mu      sync.Mutex
		next    int  // the next index to hand out
		stopped bool // set once delivery has stopped: no new index is handed out
	)
	// window bounds how far runs may get ahead of delivery, so a slow seed cannot make the
	// others pile up results in memory.
	window := 2 * workers
	delivered := 0 // results handed to deliver; the next one due is index delivered
	slots := make(chan struct{}, window)
	results := make(chan outcome, window)
	var wg sync.WaitGroup
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if stopped || next >= n {
			return 0, false
		}
		i := next
		next++
		return i, true
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				slots <- struct{}{} // wait for room in the window before taking an index
				i, ok := take()
				if !ok {
					<-slots
					return
				}
				r, err := run(i)
				results <- outcome{i: i, r: r, err: err}
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()
	pending := make(map[int]outcome, window)
	var firstErr error
	done := false
	for o := range results {
		if done {
			<-slots // a run started before the stop: discard it
			continue
		}
		pending[o.i] = o
		for !done {
			p, ok := pending[delivered]
			if !ok {
				break
			}
			delete(pending, delivered)
			<-slots
			if p.err != nil {
				firstErr, done = p.err, true
				break
			}
			delivered++
			done = deliver(p.i, p.r)
		}
		if done {
			mu.Lock()
			stopped = true
			mu.Unlock()
			for range pending {
				<-slots
			}
			clear(pending)
		}
	}
	return delivered, firstErr
}

// PanicError is a run's panic, with the stack where it happened.
type PanicError struct {
	Index int
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("run %d panicked: %v\n%s", e.Index, e.Value, e.Stack)
}

func recovering[T any](run func(i int) (T, error)) func(i int) (T, error) {
	return func(i int) (r T, err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &PanicError{Index: i, Value: v, Stack: debug.Stack()}
			}
		}()
		return run(i)
	}
}
