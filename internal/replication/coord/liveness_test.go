package coord

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meridian/internal/config"
)

// TestAliveSnapshot: the snapshot a metrics scrape reads agrees with the event loop's view
// after every change, and reading it while the loop changes the detector is not a data race
// (run with -race; reading the loop's map there would be one).
func TestAliveSnapshot(t *testing.T) {
	var l liveness
	l.init(1, []config.Node{{ID: 1}, {ID: 2}, {ID: 3}})
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			for n := uint32(1); n <= 3; n++ {
				_ = l.aliveSnapshot(n)
			}
		}
	})
	t0 := time.Unix(0, 0)
	check := func(step string) {
		t.Helper()
		for n := uint32(1); n <= 3; n++ {
			if l.aliveSnapshot(n) != l.alive(n) {
				t.Fatalf("%s: node %d alive %v, snapshot %v", step, n, l.alive(n), l.aliveSnapshot(n))
			}
		}
	}
	check("start")
	for i := range 200 {
		now := t0.Add(time.Duration(i) * time.Second)
		if i%3 != 0 {
			l.heard(2, now) // node 2 speaks two seconds in three; node 3 goes silent
		}
		l.update(now, 1500*time.Millisecond)
		check("step")
	}
	if l.aliveSnapshot(3) || !l.aliveSnapshot(2) && l.alive(2) {
		t.Fatalf("node 3 silent for 200 s is alive in the snapshot")
	}
	stop.Store(true)
	wg.Wait()
}
