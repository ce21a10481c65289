package loadgen

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

func TestPacerEven(t *testing.T) {
	p := NewPacer(10_000, 100, false, 1) // 100 batches/s: every 10 ms
	for k := range 5 {
		if got, want := p.Next(), time.Duration(k)*10*time.Millisecond; got != want {
			t.Errorf("batch %d due at %v, want %v", k, got, want)
		}
	}
}

func TestPacerPoisson(t *testing.T) {
	p := NewPacer(1_000_000, 1000, true, 7) // mean gap 1 ms
	const n = 20000
	var last time.Duration
	var gaps []float64
	for range n {
		at := p.Next()
		if at < last {
			t.Fatalf("schedule went back: %v after %v", at, last)
		}
		gaps = append(gaps, (at - last).Seconds())
		last = at
	}
	mean := last.Seconds() / float64(n-1)
	if math.Abs(mean-0.001) > 0.00005 {
		t.Errorf("mean gap %v s, want 0.001 ± 5%%", mean)
	}
	// Exponential gaps: the standard deviation is about the mean (even gaps: 0).
	var sq float64
	for _, g := range gaps[1:] {
		sq += (g - mean) * (g - mean)
	}
	if sd := math.Sqrt(sq / float64(len(gaps)-1)); sd < 0.0008 || sd > 0.0012 {
		t.Errorf("gap standard deviation %v s, want about the mean", sd)
	}
	// The same seed gives the same schedule.
	a, b := NewPacer(5000, 10, true, 3), NewPacer(5000, 10, true, 3)
	for range 100 {
		if a.Next() != b.Next() {
			t.Fatal("same seed, different schedules")
		}
	}
}

func TestAccounting(t *testing.T) {
	t0 := time.Unix(1000, 0)
	warm := t0.Add(time.Second)
	a := NewAccounting(100, warm)
	// Before the warm-up's end: counted in the total only.
	if a.Done(0, t0, t0, t0.Add(500*time.Millisecond), nil) {
		t.Error("a batch acknowledged in the warm-up counted")
	}
	// 99 batches of 1 ms and one of 100 ms, from their scheduled times.
	for k := range 99 {
		sched := warm.Add(time.Duration(k) * time.Millisecond)
		// Sent 0.4 ms after its scheduled time: the service time is 0.6 ms.
		if !a.Done(int64(k+1), sched, sched.Add(400*time.Microsecond), sched.Add(time.Millisecond), nil) {
			t.Fatal("a measured batch did not count")
		}
	}
	a.Done(100, warm.Add(time.Second), warm.Add(time.Second), warm.Add(time.Second+100*time.Millisecond), nil)
	a.Done(101, warm, warm, warm.Add(time.Millisecond), errors.New("refused"))
	r := Result{RecordBytes: 16}
	a.Fill(&r)
	if r.Batches != 100 || r.Records != 10_000 || r.TotalRecords != 10_100 || r.Errors != 1 || r.FirstError == "" {
		t.Errorf("counts: %+v", r)
	}
	if r.P50Ms < 0.99 || r.P50Ms > 1.01 || r.MaxMs < 99 || r.MaxMs > 101 {
		t.Errorf("latencies: p50 %v max %v", r.P50Ms, r.MaxMs)
	}
	if r.ServiceP50Ms < 0.599 || r.ServiceP50Ms > 0.601 || r.ServiceP99Ms < 0.599 || r.ServiceP99Ms > 0.601 {
		t.Errorf("service latencies: p50 %v p99 %v", r.ServiceP50Ms, r.ServiceP99Ms)
	}
	// The window runs from the warm-up's end to the last acknowledgement (1.1 s).
	if math.Abs(r.Seconds-1.1) > 1e-9 || math.Abs(r.RecordsPerSec-10_000/1.1) > 1e-6 {
		t.Errorf("window %v s, %v rec/s", r.Seconds, r.RecordsPerSec)
	}
	if math.Abs(r.MBPerSec-r.RecordsPerSec*16/1e6) > 1e-9 {
		t.Errorf("MB/s %v", r.MBPerSec)
	}
}

func TestRunClosedLoopRecordBound(t *testing.T) {
	var batches atomic.Int64
	var observed atomic.Int64
	o := Options{Workers: 3, BatchRecords: 100, Records: 1050, Duration: time.Minute, InProcess: true,
		Observe: func(int, int64, time.Time, bool, error) { observed.Add(1) }}
	r, err := Run(context.Background(), o, func(_ context.Context, w int, k int64) error {
		if w < 0 || w >= 3 {
			t.Errorf("worker %d", w)
		}
		batches.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 1,050 records round up to 11 whole batches.
	if batches.Load() != 11 || r.TotalRecords != 1100 || r.Records != 1100 || r.Stopped != "records" || r.Mode != "closed" {
		t.Errorf("%d batches sent; result %+v", batches.Load(), r)
	}
	if observed.Load() != 11 {
		t.Errorf("observed %d batches", observed.Load())
	}
}

func TestRunOpenLoop(t *testing.T) {
	// An open loop of 20 batches; the test asserts counts, not durations.
	o := Options{Workers: 2, BatchRecords: 10, Records: 200, Rate: 20_000, Duration: time.Minute, InProcess: true}
	r, err := Run(context.Background(), o, func(context.Context, int, int64) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != "open" || r.Batches != 20 || r.TargetRecordsPerSec != 20_000 || r.Stopped != "records" {
		t.Errorf("result %+v", r)
	}
}

func TestRunAllFail(t *testing.T) {
	o := Options{Workers: 1, BatchRecords: 10, Records: 30, InProcess: true}
	_, err := Run(context.Background(), o, func(context.Context, int, int64) error { return errors.New("no") })
	if err == nil {
		t.Fatal("a run whose every batch failed succeeded")
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{
		{BatchRecords: 0, Records: 1, InProcess: true},
		{BatchRecords: 1, Records: 0, InProcess: true},
		{BatchRecords: 1, Records: 1},                                       // whose CPU?
		{BatchRecords: 1, Records: 1, InProcess: true, Warmup: time.Minute}, // warm-up ≥ duration
		{BatchRecords: 1, Records: 1, InProcess: true, Rate: math.Inf(1)},
	} {
		if _, err := o.WithDefaults(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	o, err := Options{BatchRecords: 1, Records: 1, ServerPids: []int{1}}.WithDefaults()
	if err != nil || o.Workers != 4 || o.Duration != 10*time.Second || o.RecordBytes != 16 {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

func TestSleepUntil(t *testing.T) {
	if !sleepUntil(context.Background(), time.Now().Add(-time.Second)) {
		t.Error("a time in the past: not true at once")
	}
	if !sleepUntil(context.Background(), time.Now().Add(2*time.Millisecond)) {
		t.Error("a short sleep did not end true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sleepUntil(ctx, time.Now().Add(time.Hour)) {
		t.Error("a cancelled sleep ended true")
	}
}
