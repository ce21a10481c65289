package kawkab_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"meridian/internal/kawkab"
)

// Every duration these tests check is modelled time on a VirtualClock, never the wall clock.

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const chunk = 4 << 20 // a Kawkab chunk, the thesis's "4MB"

// sizedStore answers every Get from one shared buffer (no copy, so that tens of thousands of
// modelled 4 MiB GETs cost nothing real) and discards Puts.
type sizedStore struct{ data []byte }

func (s sizedStore) Put(ctx context.Context, key string, data []byte) error { return nil }
func (s sizedStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	start, end, err := kawkab.CheckRange(key, int64(len(s.data)), off, n)
	if err != nil {
		return nil, err
	}
	return s.data[start:end], nil
}
func (s sizedStore) Delete(ctx context.Context, key string) error { return nil }
func (s sizedStore) List(ctx context.Context, prefix string) ([]kawkab.ObjectInfo, error) {
	return nil, nil
}

func near(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// The calibration's derived numbers (objmodel.go) and the thesis's, analytically.
func TestDefaultS3ModelCalibration(t *testing.T) {
	m := kawkab.DefaultS3Model()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	sigma := m.FirstByteSigma()
	checks := []struct {
		what      string
		got, want float64
	}{
		{"first-byte median (ms)", ms(m.FirstByteMedian), 20},
		{"first-byte p99 (ms)", ms(m.FirstByteP99), 900.4},
		{"σ", sigma, 1.637},
		{"first-byte mean (ms)", ms(m.FirstByteMean()), 76.3},
		{"GET bandwidth per connection (MB/s)", m.GetBandwidth / 1e6, 42.1},
		{"PUT bandwidth per connection (MB/s)", m.PutBandwidth / 1e6, 87.5},
		{"aggregate (MB/s)", m.AggregateBandwidth / 1e6, 1250},
	}
	for _, c := range checks {
		if !near(c.got, c.want, 0.002) {
			t.Errorf("%s = %.4g, want %.4g", c.what, c.got, c.want)
		}
	}
	// The thesis's numbers follow exactly: 4 MiB GET p1 and p99, eight threads' upload rate.
	const z = 2.3263478740408408
	tGet := chunk / m.GetBandwidth * 1000
	if p1 := tGet + ms(m.FirstByteMedian)*math.Exp(-z*sigma); !near(p1, 100, 1e-6) {
		t.Errorf("4 MiB GET p1 = %.3f ms, want 100", p1)
	}
	if p99 := tGet + ms(m.FirstByteP99); !near(p99, 1000, 1e-6) {
		t.Errorf("4 MiB GET p99 = %.3f ms, want 1000", p99)
	}
	meanPut := m.FirstByteMean().Seconds() + chunk/m.PutBandwidth
	if rate := 8 * chunk / meanPut / 1e6; !near(rate, 270, 1e-6) {
		t.Errorf("eight upload threads: %.3f MB/s, want 270", rate)
	}
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(q*float64(len(sorted)-1)+0.5)]
}

// getTimes issues count GETs of (off, n) one after the other and returns their modelled times.
func getTimes(t *testing.T, s *kawkab.ModelledObjectStore, clk *kawkab.VirtualClock, count int, off, n int64) []time.Duration {
	t.Helper()
	ctx := context.Background()
	out := make([]time.Duration, count)
	for i := range out {
		start := clk.Now()
		if _, err := s.Get(ctx, "kawkab/s1/d0", off, n); err != nil {
			t.Fatal(err)
		}
		out[i] = clk.Now().Sub(start)
	}
	slices.Sort(out)
	return out
}

// 5.7.6: "it takes 100ms to more than a second to read a 4MB block from Amazon S3". Under the
// default model, 4 MiB GETs have their p1 at 100 ms and their p99 at 1 s.
func TestS3ModelGet4MiBQuantiles(t *testing.T) {
	clk := kawkab.NewVirtualClock(epoch)
	s := &kawkab.ModelledObjectStore{Inner: sizedStore{make([]byte, chunk)}, Model: kawkab.DefaultS3Model(), Clock: clk}
	times := getTimes(t, s, clk, 50000, 0, -1)
	var sum time.Duration
	inside := 0
	for _, d := range times {
		sum += d
		if d >= 100*time.Millisecond && d <= time.Second {
			inside++
		}
	}
	p1, p50, p99 := ms(quantile(times, 0.01)), ms(quantile(times, 0.5)), ms(quantile(times, 0.99))
	mean := ms(sum / time.Duration(len(times)))
	t.Logf("4 MiB GET: p1 %.1f ms, median %.1f ms, p99 %.1f ms, mean %.1f ms, %.2f%% within [100 ms, 1 s]",
		p1, p50, p99, mean, 100*float64(inside)/float64(len(times)))
	if !near(p1, 100, 0.03) {
		t.Errorf("p1 %.1f ms, want 100", p1)
	}
	if !near(p50, 119.6, 0.03) {
		t.Errorf("median %.1f ms, want 119.6", p50)
	}
	if !near(p99, 1000, 0.06) {
		t.Errorf("p99 %.1f ms, want 1000", p99)
	}
	if !near(mean, 176, 0.05) {
		t.Errorf("mean %.1f ms, want 176", mean)
	}
	if frac := float64(inside) / float64(len(times)); !near(frac, 0.98, 0.01) {
		t.Errorf("%.3f of GETs within [100 ms, 1 s], want 0.98", frac)
	}
	if first, last := times[0], times[len(times)-1]; first < 99*time.Millisecond || last < 2*time.Second {
		t.Errorf("fastest %v, slowest %v: want about 100 ms and well over a second", first, last)
	}
}

// uploadRate runs threads uploaders of 4 MiB objects for a modelled duration and returns the
// aggregate MB/s of the uploads completed in it.
func uploadRate(t *testing.T, threads int, duration time.Duration) float64 {
	clk := kawkab.NewVirtualClock(epoch)
	s := &kawkab.ModelledObjectStore{Inner: sizedStore{}, Model: kawkab.DefaultS3Model(), Clock: clk}
	obj := make([]byte, chunk)
	deadline := epoch.Add(duration)
	var mu sync.Mutex
	var bytes int64
	var failed error
	for w := range threads {
		clk.Go(func() {
			for i := 0; clk.Now().Before(deadline); i++ {
				if err := s.Put(context.Background(), fmt.Sprintf("kawkab/s%d/d%d", w, i), obj); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				if !clk.Now().After(deadline) {
					mu.Lock()
					bytes += chunk
					mu.Unlock()
				}
			}
		})
	}
	clk.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	return float64(bytes) / duration.Seconds() / 1e6
}

// 5.7.6: "270 MB/s upload rate to Amazon S3 with eight worker threads and 4 MB object sizes".
// One thread gets an eighth of it, 64 threads the VM's 10 Gbit/s.
func TestS3ModelUploadAggregate(t *testing.T) {
	cases := []struct {
		threads  int
		duration time.Duration
		want     float64
	}{
		{1, 20 * time.Minute, 33.75},
		{8, 5 * time.Minute, 270},
		{64, time.Minute, 1250},
	}
	for _, c := range cases {
		got := uploadRate(t, c.threads, c.duration)
		t.Logf("%d upload threads: %.1f MB/s (modelled %v)", c.threads, got, c.duration)
		if !near(got, c.want, 0.06) {
			t.Errorf("%d upload threads: %.1f MB/s, want %.1f", c.threads, got, c.want)
		}
	}
}

// Ranged GETs pay the first-byte latency and their own bytes only: a 64 KiB read of a chunk is
// far faster than the whole chunk, which historical reads rely on.
func TestS3ModelRangedGet(t *testing.T) {
	clk := kawkab.NewVirtualClock(epoch)
	s := &kawkab.ModelledObjectStore{Inner: sizedStore{make([]byte, chunk)}, Model: kawkab.DefaultS3Model(), Clock: clk}
	whole := getTimes(t, s, clk, 20000, 0, -1)
	ranged := getTimes(t, s, clk, 20000, 100*16384, 64<<10)
	wm, rm := ms(quantile(whole, 0.5)), ms(quantile(ranged, 0.5))
	w1, r1 := ms(quantile(whole, 0.01)), ms(quantile(ranged, 0.01))
	t.Logf("median: whole 4 MiB %.1f ms, ranged 64 KiB %.1f ms; p1: %.1f ms vs %.1f ms", wm, rm, w1, r1)
	if !near(rm, 20+65536/42.13e6*1000, 0.05) {
		t.Errorf("ranged 64 KiB median %.1f ms, want the first-byte median plus 1.6 ms", rm)
	}
	if rm > wm/4 || r1 > w1/10 {
		t.Errorf("ranged 64 KiB GET (median %.1f, p1 %.1f ms) not much faster than a whole chunk (%.1f, %.1f ms)", rm, r1, wm, w1)
	}
}

// With a constant first-byte latency the model's arithmetic is exact.
func TestS3ModelExactTimes(t *testing.T) {
	m := kawkab.S3Model{
		FirstByteMedian: 10 * time.Millisecond, FirstByteP99: 10 * time.Millisecond,
		GetBandwidth: 2e6, PutBandwidth: 1e6, ListPageKeys: 1000,
	}
	clk := kawkab.NewVirtualClock(epoch)
	s := &kawkab.ModelledObjectStore{Inner: kawkab.NewMemObjectStore(), Model: m, Clock: clk}
	ctx := context.Background()
	timed := func(what string, want time.Duration, f func() error) {
		t.Helper()
		start := clk.Now()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := clk.Now().Sub(start); got != want {
			t.Errorf("%s took %v, want %v", what, got, want)
		}
	}
	obj := make([]byte, 1e6)
	timed("Put 1 MB", 1010*time.Millisecond, func() error { return s.Put(ctx, "o", obj) })
	timed("Get 1 MB", 510*time.Millisecond, func() error { _, err := s.Get(ctx, "o", 0, -1); return err })
	timed("Get 100 kB range", 60*time.Millisecond, func() error { _, err := s.Get(ctx, "o", 5000, 100000); return err })
	timed("Get missing", 10*time.Millisecond, func() error {
		if _, err := s.Get(ctx, "missing", 0, -1); !errors.Is(err, kawkab.ErrNotFound) {
			return fmt.Errorf("got %v, want ErrNotFound", err)
		}
		return nil
	})
	timed("Delete", 10*time.Millisecond, func() error { return s.Delete(ctx, "o") })
	timed("refused key", 0, func() error {
		if err := s.Put(ctx, "", obj); !errors.Is(err, kawkab.ErrInvalidKey) {
			return fmt.Errorf("got %v, want ErrInvalidKey", err)
		}
		return nil
	})
	for i := range 2500 {
		if err := s.Inner.Put(ctx, fmt.Sprintf("l/%04d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	timed("List of 2,500 keys: 3 pages", 30*time.Millisecond, func() error { _, err := s.List(ctx, "l/"); return err })
	timed("List of nothing: 1 page", 10*time.Millisecond, func() error { _, err := s.List(ctx, "none/"); return err })

	// The aggregate cap: two 1 MB uploads at once share 1 MB/s, so the second ends after 2 s.
	m.AggregateBandwidth = 1e6
	s = &kawkab.ModelledObjectStore{Inner: kawkab.NewMemObjectStore(), Model: m, Clock: clk}
	start := clk.Now()
	ends := make([]time.Duration, 2)
	for i := range 2 {
		clk.Go(func() {
			if err := s.Put(ctx, fmt.Sprintf("cap/%d", i), obj); err != nil {
				t.Error(err)
			}
			ends[i] = clk.Now().Sub(start)
		})
	}
	clk.Wait()
	slices.Sort(ends)
	if ends[0] != 1010*time.Millisecond || ends[1] != 2*time.Second {
		t.Errorf("two concurrent 1 MB uploads under a 1 MB/s cap ended after %v, want [1.01s 2s]", ends)
	}
}

// A Put becomes visible when its modelled time is over, not before.
func TestS3ModelPutVisibleAtEnd(t *testing.T) {
	m := kawkab.S3Model{FirstByteMedian: 10 * time.Millisecond, FirstByteP99: 10 * time.Millisecond, GetBandwidth: 1e9, PutBandwidth: 1e6, ListPageKeys: 1000}
	clk := kawkab.NewVirtualClock(epoch)
	inner := kawkab.NewMemObjectStore()
	s := &kawkab.ModelledObjectStore{Inner: inner, Model: m, Clock: clk}
	ctx := context.Background()
	clk.Go(func() {
		if err := s.Put(ctx, "k", make([]byte, 1e6)); err != nil { // 1.01 s
			t.Error(err)
		}
	})
	clk.Go(func() {
		_ = clk.Sleep(ctx, 500*time.Millisecond)
		if _, err := inner.Get(ctx, "k", 0, 0); !errors.Is(err, kawkab.ErrNotFound) {
			t.Errorf("at 0.5 s: %v, want ErrNotFound", err)
		}
		_ = clk.Sleep(ctx, 600*time.Millisecond)
		if _, err := inner.Get(ctx, "k", 0, 0); err != nil {
			t.Errorf("at 1.1 s: %v", err)
		}
	})
	clk.Wait()
}

// The draws are seeded: the same seed gives the same modelled times, another seed others.
func TestS3ModelSeeded(t *testing.T) {
	run := func(seed uint64) []time.Duration {
		m := kawkab.DefaultS3Model()
		m.Seed = seed
		clk := kawkab.NewVirtualClock(epoch)
		s := &kawkab.ModelledObjectStore{Inner: sizedStore{make([]byte, chunk)}, Model: m, Clock: clk}
		var out []time.Duration
		for range 50 {
			start := clk.Now()
			if _, err := s.Get(context.Background(), "k", 0, 4096); err != nil {
				t.Fatal(err)
			}
			out = append(out, clk.Now().Sub(start))
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a, b) {
		t.Error("same seed, different modelled times")
	}
	if slices.Equal(a, c) {
		t.Error("different seeds, same modelled times")
	}
}

func TestS3ModelValidate(t *testing.T) {
	good := kawkab.DefaultS3Model()
	bad := map[string]func(m *kawkab.S3Model){
		"p99 below median":   func(m *kawkab.S3Model) { m.FirstByteP99 = m.FirstByteMedian / 2 },
		"negative median":    func(m *kawkab.S3Model) { m.FirstByteMedian = -1 },
		"zero GET bandwidth": func(m *kawkab.S3Model) { m.GetBandwidth = 0 },
		"NaN PUT bandwidth":  func(m *kawkab.S3Model) { m.PutBandwidth = math.NaN() },
		"negative cap":       func(m *kawkab.S3Model) { m.AggregateBandwidth = -1 },
		"no LIST page":       func(m *kawkab.S3Model) { m.ListPageKeys = 0 },
	}
	for name, f := range bad {
		m := good
		f(&m)
		if m.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
		s := &kawkab.ModelledObjectStore{Inner: kawkab.NewMemObjectStore(), Model: m, Clock: kawkab.NewVirtualClock(epoch)}
		if err := s.Put(context.Background(), "k", nil); err == nil {
			t.Errorf("%s: a store with this model accepted a Put", name)
		}
	}
	var none kawkab.ModelledObjectStore
	if err := none.Put(context.Background(), "k", nil); err == nil {
		t.Error("a store without an inner store accepted a Put")
	}
}

func TestVirtualClock(t *testing.T) {
	clk := kawkab.NewVirtualClock(epoch)
	ctx := context.Background()
	if err := clk.Sleep(ctx, 3*time.Second); err != nil || !clk.Now().Equal(epoch.Add(3*time.Second)) {
		t.Fatalf("alone, Sleep moves time at once: now %v, %v", clk.Now(), err)
	}
	// Goroutines wake in the order of their wake-up times, each seeing its own time.
	var mu sync.Mutex
	var order []int
	base := clk.Now()
	for _, d := range []int{5, 1, 3, 2, 4} {
		clk.Go(func() {
			_ = clk.Sleep(ctx, time.Duration(d)*time.Second)
			if got := clk.Now().Sub(base); got != time.Duration(d)*time.Second {
				t.Errorf("woke at +%v, want +%ds", got, d)
			}
			mu.Lock()
			order = append(order, d)
			mu.Unlock()
		})
	}
	clk.Wait()
	if !slices.Equal(order, []int{1, 2, 3, 4, 5}) {
		t.Errorf("wake order %v", order)
	}
	// A sleeper whose context is canceled by another goroutine returns at once, and time does
	// not jump to its wake-up.
	cctx, cancel := context.WithCancel(ctx)
	base = clk.Now()
	clk.Go(func() {
		if err := clk.Sleep(cctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Errorf("canceled sleep: %v", err)
		}
	})
	clk.Go(func() {
		_ = clk.Sleep(ctx, time.Second)
		cancel()
	})
	clk.Wait()
	if got := clk.Now().Sub(base); got != time.Second {
		t.Errorf("after the canceled sleep, time moved %v, want 1s", got)
	}
}
