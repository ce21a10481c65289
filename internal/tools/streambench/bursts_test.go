package streambench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBurstSchedule: the schedule is the seed's (the same load for the same seed), its share
// of bursts follows the probability, and the offered records integrate its rates.
func TestBurstSchedule(t *testing.T) {
	o := BurstsOptions{Duration: 1000 * time.Second, BurstProbability: 0.2, Seed: 7}
	a, b := burstSchedule(o), burstSchedule(o)
	n := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("second %d differs between two schedules of one seed", i)
		}
		if a[i] {
			n++
		}
	}
	if n < 150 || n > 250 {
		t.Fatalf("%d bursts in 1000 seconds at p = 0.2", n)
	}
	sched := []bool{false, true, false}
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{0, 0}, {500 * time.Millisecond, 50}, {time.Second, 100}, {1500 * time.Millisecond, 100 + 150}, {3 * time.Second, 100 + 300 + 100}, {5 * time.Second, 500}} {
		if got := newSchedule(sched).offered(c.at, 100, 300); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("offered(%v) = %v, want %v", c.at, got, c.want)
		}
	}
}

func TestBurstsOptionsValidated(t *testing.T) {
	for _, o := range []BurstsOptions{
		{Duration: time.Millisecond},
		{BurstProbability: 1.5},
		{RecordBytes: 8},
		{SteadyRate: 10, BurstRate: 5},
		{CapacityBytes: 1 << 20},
		{UploadWorkers: -1},
		{ObjectStore: "s3"},
	} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestBenchStreamBurstsSmoke runs a short burst experiment: the clients keep up (every offered
// batch acknowledged or still to be sent, none dropped), the store uploads, and the outputs
// are written.
func TestBenchStreamBurstsSmoke(t *testing.T) {
	rep, err := RunBursts(context.Background(), BurstsOptions{
		Duration: 3 * time.Second, SampleEvery: 500 * time.Millisecond, Appenders: 2,
		SteadyRate: 200_000, BurstRate: 400_000, CapacityBytes: 64 << 20, CacheBytes: 8 << 20,
		Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Samples) < 4 {
		t.Fatalf("%d samples in 3 s at 500 ms", len(rep.Samples))
	}
	if rep.Acknowledged <= 0 || rep.Acknowledged > rep.Offered {
		t.Fatalf("acknowledged %d of %d offered", rep.Acknowledged, rep.Offered)
	}
	if rep.Dropped != 0 {
		t.Fatalf("%d batches dropped with the store far from full", rep.Dropped)
	}
	if rep.Uploads == 0 {
		t.Fatalf("no chunk uploaded after %d records of 64 bytes", rep.Acknowledged)
	}
	md := rep.Markdown()
	if !strings.Contains(md, "| t (s) |") || strings.Count(md, "\n|") < len(rep.Samples)+4 {
		t.Fatalf("markdown:\n%s", md)
	}
	dir := t.TempDir()
	files, err := rep.Charts(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Fatalf("chart %s: %v", filepath.Base(f), err)
		}
	}
}
