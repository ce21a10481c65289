package seedpool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The results arrive in index order and the run stops where a sequential loop would, however
// the runs interleave.
func TestDeliversInOrderAndStopsWhereASequentialLoopWould(t *testing.T) {
	for _, workers := range []int{1, 2, 3, 8} {
		for _, stopAt := range []int{-1, 0, 5, 49} {
			t.Run(fmt.Sprintf("workers=%d/stop=%d", workers, stopAt), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(workers), uint64(stopAt+10)))
				delays := make([]time.Duration, 50)
				for i := range delays {
					delays[i] = time.Duration(rng.IntN(300)) * time.Microsecond
				}
				var got []int
				n, err := Run(50, workers, func(i int) (int, error) {
					time.Sleep(delays[i])
					return i * i, nil
				}, func(i, r int) bool {
					if r != i*i {
						t.Fatalf("result %d for index %d", r, i)
					}
					got = append(got, i)
					return i == stopAt
				})
				if err != nil {
					t.Fatal(err)
				}
				want := 50
				if stopAt >= 0 {
					want = stopAt + 1
				}
				if n != want || len(got) != want {
					t.Fatalf("delivered %d (%d calls), want %d", n, len(got), want)
				}
				for i, g := range got {
					if g != i {
						t.Fatalf("delivery %d was index %d: %v", i, g, got)
					}
				}
			})
		}
	}
}

// An error stops the run at its index; later results, even ones that finished first, are not
// delivered.
func TestErrorStopsAtItsIndex(t *testing.T) {
	boom := errors.New("boom")
	var got []int
	n, err := Run(40, 4, func(i int) (int, error) {
		if i == 7 {
			time.Sleep(2 * time.Millisecond) // finishes after several later indexes
			return 0, boom
		}
		return i, nil
	}, func(i, r int) bool {
		got = append(got, i)
		return false
	})
	if !errors.Is(err, boom) || n != 7 || len(got) != 7 {
		t.Fatalf("n=%d err=%v delivered %v; want 7 deliveries and boom", n, err, got)
	}
}

func TestWorkersBounds(t *testing.T) {
	if Workers(0) < 1 || Workers(-3) < 1 || Workers(1_000_000) != MaxWorkers || Workers(2) != 2 {
		t.Fatalf("Workers: %d %d %d %d", Workers(0), Workers(-3), Workers(1_000_000), Workers(2))
	}
	if n, err := Run(0, 4, func(int) (int, error) { return 0, nil }, func(int, int) bool { return false }); n != 0 || err != nil {
		t.Fatalf("empty run: %d %v", n, err)
	}
}

// A panic past the stop is discarded; one before it is the run's error.
func TestPanicsBecomeErrors(t *testing.T) {
	n, err := Run(20, 2, func(i int) (int, error) {
		if i >= 3 {
			panic(fmt.Sprintf("index %d", i))
		}
		return i, nil
	}, func(i, r int) bool { return i == 2 })
	if err != nil || n != 3 {
		t.Fatalf("stop before the panics: n=%d err=%v", n, err)
	}
	n, err = Run(20, 2, func(i int) (int, error) {
		if i == 4 {
			panic("index 4")
		}
		return i, nil
	}, func(int, int) bool { return false })
	var pe *PanicError
	if !errors.As(err, &pe) || pe.Index != 4 || n != 4 {
		t.Fatalf("n=%d err=%v; want the panic of index 4 after 4 deliveries", n, err)
	}
}
