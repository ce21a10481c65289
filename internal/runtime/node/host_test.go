package node

import (
	"os"
	"path/filepath"
	rtmetrics "runtime/metrics"
	"testing"
	"time"
)

func TestReadProcStatCPU(t *testing.T) {
	p := filepath.Join(t.TempDir(), "stat")
	if err := os.WriteFile(p, []byte("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	steal, total, err := readProcStatCPU(p)
	if err != nil || steal != 40 || total != 1000 {
		t.Fatalf("steal %d total %d err %v, want 40 of 1000", steal, total, err)
	}
	if err := os.WriteFile(p, []byte("intr 1 2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readProcStatCPU(p); err == nil {
		t.Fatal("a file without the cpu line was read")
	}
}

// The scheduler-latency quantile is taken over the observations between two readings only.
func TestHistDeltaQuantile(t *testing.T) {
	buckets := []float64{0, 0.001, 0.002, 0.004, 0.008}
	prev := &rtmetrics.Float64Histogram{Buckets: buckets, Counts: []uint64{1000, 0, 0, 0}}
	cur := &rtmetrics.Float64Histogram{Buckets: buckets, Counts: []uint64{1090, 0, 0, 10}}
	// Of the 100 new observations, 10 are in the last bucket: the p99 is its upper bound.
	if got := histDeltaQuantile(prev, cur, 0.99); got != 8*time.Millisecond {
		t.Fatalf("p99 %v, want 8ms", got)
	}
	if got := histDeltaQuantile(prev, cur, 0.5); got != time.Millisecond {
		t.Fatalf("p50 %v, want 1ms", got)
	}
	if got := histDeltaQuantile(cur, cur, 0.99); got != 0 {
		t.Fatalf("no new observation: %v", got)
	}
}
