package repro

import (
	"meridian/internal/tools/bench"
	"testing"
)

func TestSummarizeSpike(t *testing.T) {
	run := bench.Run{}
	for s := 1; s <= 30; s++ {
		mean := 10.0
		switch {
		case s > 10 && s <= 14:
			mean = 200 // the spike at t=10 overloads the host for four seconds
		case s == 16:
			mean = 40 // one bad second afterwards does not count as recovered
		}
		run.Timeline = append(run.Timeline, bench.TimePoint{TSec: float64(s), OpsPerS: 100, MeanMs: mean})
	}
	r := summarizeSpike(true, run, 10)
	if r.BaselineMs != 10 || r.PeakMs != 200 {
		t.Fatalf("baseline %.1f peak %.1f", r.BaselineMs, r.PeakMs)
	}
	// Seconds 15 and 17.. are normal; recovery needs five normal seconds in a row: 17..21,
	// so the latency was back 6 s after the spike.
	if r.RecoverySec != 6 {
		t.Fatalf("recovery %.1f s, want 6", r.RecoverySec)
	}
	run.Timeline[len(run.Timeline)-1].MeanMs = 500
	for i := 10; i < len(run.Timeline); i++ {
		run.Timeline[i].MeanMs = 500
	}
	if r := summarizeSpike(false, run, 10); r.RecoverySec != -1 {
		t.Fatalf("never recovered, got %.1f", r.RecoverySec)
	}
}
