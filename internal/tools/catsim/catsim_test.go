package catsim

import (
	"maps"
	"slices"
	"testing"
	"time"

	"meridian/internal/catenae"
)

func TestSeedsSerializableAndConverged(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 6
	}
	for seed := range seeds {
		ok, why, err := CheckSeed(SimOptions(uint64(seed + 1)))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("seed %d: %s", seed+1, why)
		}
	}
}

// Every mutation is caught within a few seeds: the simulation can fail.
func TestMutationsCaught(t *testing.T) {
	for _, m := range slices.Sorted(maps.Keys(catenae.Mutations)) {
		t.Run(m, func(t *testing.T) {
			for seed := range 30 {
				ok, why, err := CheckSeed(MutationOptions(uint64(seed+1), m))
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					t.Logf("caught at seed %d: %s", seed+1, firstLine(why))
					return
				}
			}
			t.Errorf("mutation %s not caught in 30 seeds", m)
		})
	}
}

func firstLine(s string) string {
	for i := range s {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// Without faults every commit takes the fast path or a round trip, and the workloads run.
func TestWorkloadsRun(t *testing.T) {
	for _, w := range []Workload{Micro, TPCC} {
		res, err := Run(Options{Seed: 1, Workload: w, Duration: 2 * time.Second, Warmup: time.Second, ClientsPerRegion: 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.All.TotalCount() == 0 || !res.Converged {
			t.Fatalf("%s: %d measured commits, converged %v (%s)", w, res.All.TotalCount(), res.Converged, res.Divergence)
		}
		t.Logf("%s: %.0f tps, p50 %.1f ms, p99 %.1f ms, %.0f B/s per data center, fast %d of %d", w, res.ThroughputTPS,
			float64(res.All.ValueAtQuantile(50))/1000, float64(res.All.ValueAtQuantile(99))/1000, res.BytesPerNodeSec, res.Fast, res.Committed)
	}
}
