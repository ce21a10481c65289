package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/internal/tools/ycsb"
)

// RunOptions configures one measured run of a workload.
type RunOptions struct {
	Workload ycsb.Workload
	// Regions the clients run in (default: every region of the topology).
	Regions []string
	// ClientsPerRegion: closed-loop threads, or the worker pool of an open loop.
	ClientsPerRegion int
	// RatePerRegion > 0 selects the open loop: operations arrive as a Poisson process at this
	// rate (ops/s) in each region, and latency is measured from the intended start, so
	// coordinated omission cannot hide tail latency.
	RatePerRegion float64
	// RateSteps change the open loop's rate during the run: from At (since the run's start,
	// warm-up included) on, operations arrive at PerRegion ops/s in each region. Sorted by At.
	RateSteps []RateStep
	// KeyLocality > 0 gives each region's clients that share of their reads and updates on
	// keys whose home region (HomeOf) is their own, the rest on other regions' keys (user
	// data that lives where its users are). Keys keep the workload's popularity within each
	// subset (drawn again until they fall in it, a bounded number of times).
	KeyLocality float64
	HomeOf      func(key []byte) string
	// Duration is measured time after Warmup (not measured). MaxOps > 0 stops earlier.
	Duration time.Duration
	Warmup   time.Duration
	MaxOps   int64
	// SkipLoad skips the load phase (the data is there already).
	SkipLoad bool
	// LoadParallel bounds concurrent inserts in the load phase (default 256).
	LoadParallel int
	// Timeout of each operation (default 10s).
	Timeout time.Duration
	Seed    uint64
	// Progress receives a live line each second (elapsed, ops/s, current p99); nil: none.
	Progress io.Writer
	// ProgressTTY rewrites one line with \r instead of printing a line per update.
	ProgressTTY bool
	// OnMeasureStart, when set, is called once when the measured part begins (after
	// Warmup), from its own goroutine, so a caller can sample the system over exactly it.
	OnMeasureStart func()
}

func (o *RunOptions) ensureDefaults(regions []string) {
	if len(o.Regions) == 0 {
		o.Regions = regions
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 8
	}
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	}
	if o.LoadParallel <= 0 {
		o.LoadParallel = 256
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
}

var opNames = [...]string{ycsb.Read: "read", ycsb.Update: "write", ycsb.Insert: "insert", ycsb.Scan: "scan", ycsb.ReadModifyWrite: "rmw"}

const numOps = len(opNames)

// coarse log-scale buckets for the live p99 and the per-second timeline: bucket i holds
// latencies below 2^(i/8) µs (9% resolution), up to ~2^(255/8) µs ≈ 1 h.
const coarseBuckets = 256

func coarseBucket(us int64) int {
	if us < 1 {
		return 0
	}
	b := int(math.Ceil(math.Log2(float64(us)) * 8))
	return min(max(b, 0), coarseBuckets-1)
}

func coarseUpperMs(b int) float64 { return math.Pow(2, float64(b)/8) / 1000 }

type second struct {
	ops       atomic.Int64
	sumMicros atomic.Int64
	buckets   [coarseBuckets]atomic.Int64
}

func (s *second) p99() float64 {
	n := s.ops.Load()
	if n == 0 {
		return 0
	}
	target := int64(math.Ceil(float64(n) * 0.99))
	var acc int64
	for b := range coarseBuckets {
		acc += s.buckets[b].Load()
		if acc >= target {
			return coarseUpperMs(b)
		}
	}
	return coarseUpperMs(coarseBuckets - 1)
}

// clientStats are the histograms of one region's clients, shared (under a mutex) so that a
// run with hundreds of clients does not allocate hundreds of histograms at its start — the
// allocation burst and the GC it causes showed up as tail latency.
type clientStats struct {
	mu   sync.Mutex
	h    [numOps]*hdrhistogram.Histogram
	errs [numOps]int64
}

func (c *clientStats) record(op ycsb.OpKind, d time.Duration) {
	c.mu.Lock()
	if c.h[op] == nil {
		c.h[op] = hdrhistogram.New(1, 120_000_000, 3) // µs, up to 2 min
	}
	_ = c.h[op].RecordValue(max(1, d.Microseconds()))
	c.mu.Unlock()
}

func (c *clientStats) fail(op ycsb.OpKind) {
	c.mu.Lock()
	c.errs[op]++
	c.mu.Unlock()
}

// Load inserts the workload's records through the session's clients, all regions sharing
// the work.
// loadRetryFor bounds how long one load insert retries a target that is not serving yet (a
// new keyspace whose partitions are still electing leaders answers Unavailable).
const loadRetryFor = 30 * time.Second

// insertRetrying inserts one record, retrying Unavailable answers every 100ms for up to
// loadRetryFor.
func insertRetrying(ctx context.Context, kv KV, key, value []byte) error {
	deadline := time.Now().Add(loadRetryFor)
	for {
		err := kv.Insert(ctx, key, value)
		if err == nil || status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func Load(ctx context.Context, sess Session, w ycsb.Workload, regions []string, parallel int) error {
	conns := make([]KV, 0, len(regions))
	for _, r := range regions {
		kv, err := sess.Connect(r, 0)
		if err != nil {
			return err
		}
		conns = append(conns, kv)
	}
	value := make([]byte, w.ValueBytes())
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for g := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kv := conns[g%len(conns)]
			for ctx.Err() == nil && firstErr.Load() == nil {
				i := next.Add(1) - 1
				if i >= int64(w.RecordCount) {
					return
				}
				if err := insertRetrying(ctx, kv, w.LoadKey(int(i)), value); err != nil {
					err = fmt.Errorf("bench: load record %d: %w", i, err)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}

// Execute loads the workload (unless SkipLoad) and measures it against sess.
func Execute(ctx context.Context, sess Session, regions []string, cfg Config, o RunOptions) (*Run, error) {
	o.ensureDefaults(regions)
	if err := o.Workload.Validate(); err != nil {
		return nil, err
	}
	if !o.SkipLoad {
		if err := Load(ctx, sess, o.Workload, o.Regions, o.LoadParallel); err != nil {
			return nil, err
		}
	}
	gens := ycsb.NewShared(o.Workload)
	start := time.Now()
	measureFrom := start.Add(o.Warmup)
	end := measureFrom.Add(o.Duration)
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	nsec := int(math.Ceil((o.Warmup + o.Duration).Seconds())) + 2
	secs := make([]second, nsec)
	var measured, dropped atomic.Int64
	type regionClients struct {
		stats []*clientStats
	}
	perRegion := make([]regionClients, len(o.Regions))
	var wg sync.WaitGroup
	var connErr error
	for ri, region := range o.Regions {
		perRegion[ri].stats = []*clientStats{{}}
		shared := perRegion[ri].stats[0]
		var arrivals chan time.Time
		if o.RatePerRegion > 0 {
			arrivals = make(chan time.Time, 100_000)
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				defer close(arrivals)
				poisson(runCtx, arrivals, rateAt(o.RatePerRegion, o.RateSteps, start), seed, &dropped)
			}(o.Seed*7919 + uint64(ri))
		}
		for ci := range o.ClientsPerRegion {
			kv, err := sess.Connect(region, ci)
			if err != nil {
				connErr = err
				break
			}
			st := shared
			gen := gens.NewGenerator(o.Seed*1_000_003 + uint64(ri*10_000+ci))
			wg.Add(1)
			go func() {
				defer wg.Done()
				runClient(runCtx, kv, gen, st, arrivals, o, start, measureFrom, end, secs, &measured, region,
					rand.New(rand.NewPCG(o.Seed, uint64(ri*10_000+ci))))
			}()
		}
	}
	if o.OnMeasureStart != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(time.Until(measureFrom))
			defer t.Stop()
			select {
			case <-runCtx.Done():
			case <-t.C:
				o.OnMeasureStart()
			}
		}()
	}
	var progressDone chan struct{}
	if o.Progress != nil {
		progressDone = make(chan struct{})
		go progress(runCtx, o, start, measureFrom, secs, progressDone)
	}
	wg.Wait()
	cancel()
	if progressDone != nil {
		<-progressDone
	}
	if connErr != nil {
		return nil, connErr
	}
	run := &Run{Protocol: cfg.Protocol, ReadLevel: cfg.ReadLevel, WriteLevel: cfg.WriteLevel, Options: cfg.Options,
		Workload: o.Workload.Name, Regions: map[string]RegionStats{}}
	elapsed := min(time.Since(measureFrom), o.Duration)
	var total int64
	for ri, region := range o.Regions {
		var merged [numOps]*hdrhistogram.Histogram
		var errs [numOps]int64
		for _, st := range perRegion[ri].stats {
			if st == nil {
				continue
			}
			for op := range numOps {
				errs[op] += st.errs[op]
				if st.h[op] == nil {
					continue
				}
				if merged[op] == nil {
					merged[op] = hdrhistogram.New(1, 120_000_000, 3)
				}
				merged[op].Merge(st.h[op])
			}
		}
		rs := RegionStats{
			Read:  opStats(merged[ycsb.Read], errs[ycsb.Read], sess.LowerBoundMs(region, "read")),
			Write: opStats(merged[ycsb.Update], errs[ycsb.Update], sess.LowerBoundMs(region, "write")),
		}
		if merged[ycsb.Insert] != nil || errs[ycsb.Insert] > 0 {
			s := opStats(merged[ycsb.Insert], errs[ycsb.Insert], sess.LowerBoundMs(region, "write"))
			rs.Insert = &s
		}
		if merged[ycsb.Scan] != nil || errs[ycsb.Scan] > 0 {
			s := opStats(merged[ycsb.Scan], errs[ycsb.Scan], sess.LowerBoundMs(region, "read"))
			rs.Scan = &s
		}
		if merged[ycsb.ReadModifyWrite] != nil || errs[ycsb.ReadModifyWrite] > 0 {
			s := opStats(merged[ycsb.ReadModifyWrite], errs[ycsb.ReadModifyWrite],
				sess.LowerBoundMs(region, "read")+sess.LowerBoundMs(region, "write"))
			rs.RMW = &s
		}
		for _, h := range merged {
			if h != nil {
				total += h.TotalCount()
			}
		}
		run.Regions[region] = rs
	}
	if elapsed > 0 {
		run.ThroughputOps = float64(total) / elapsed.Seconds()
		run.DroppedArrivals = dropped.Load()
	}
	first := int(o.Warmup / time.Second)
	for s := first; s < len(secs); s++ {
		t := float64(s-first) + 1
		if t > o.Duration.Seconds()+0.5 {
			break
		}
		tp := TimePoint{TSec: t, OpsPerS: float64(secs[s].ops.Load()), P99Ms: secs[s].p99()}
		if n := secs[s].ops.Load(); n > 0 {
			tp.MeanMs = float64(secs[s].sumMicros.Load()) / float64(n) / 1000
		}
		run.Timeline = append(run.Timeline, tp)
	}
	return run, nil
}

// RateStep is a change of the open loop's arrival rate (a load spike, liu-thesis Fig. 4.10).
type RateStep struct {
	At        time.Duration
	PerRegion float64
}

// rateAt returns the arrival rate in force at a time.
func rateAt(base float64, steps []RateStep, start time.Time) func(time.Time) float64 {
	return func(t time.Time) float64 {
		r := base
		for _, s := range steps {
			if t.Sub(start) >= s.At {
				r = s.PerRegion
			}
		}
		return r
	}
}

func poisson(ctx context.Context, out chan<- time.Time, rate func(time.Time) float64, seed uint64, dropped *atomic.Int64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e37))
	next := time.Now()
	for ctx.Err() == nil {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate(next) * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		select {
		case out <- next:
		default:
			// Workers are saturated and the queue is full: the system is past its capacity.
			// Drop the arrival rather than block the schedule (the latency of what does run
			// shows the overload; the count tells a rate search the load was not offered).
			dropped.Add(1)
		}
	}
}

func runClient(ctx context.Context, kv KV, gen *ycsb.Generator, st *clientStats, arrivals <-chan time.Time,
	o RunOptions, start, measureFrom, end time.Time, secs []second, measured *atomic.Int64, region string, rng *rand.Rand) {
	for {
		var intended time.Time
		if arrivals != nil {
			var ok bool
			select {
			case intended, ok = <-arrivals:
				if !ok {
					return
				}
			case <-ctx.Done():
				return
			}
		} else {
			if ctx.Err() != nil {
				return
			}
			intended = time.Now()
		}
		if o.MaxOps > 0 && measured.Load() >= o.MaxOps {
			return
		}
		op := gen.Next()
		if o.KeyLocality > 0 && o.HomeOf != nil && (op.Kind == ycsb.Read || op.Kind == ycsb.Update) {
			local := rng.Float64() < o.KeyLocality
			for try := 0; try < 64 && (o.HomeOf(op.Key) == region) != local; try++ {
				op = gen.Next()
			}
		}
		opCtx, cancel := context.WithTimeout(ctx, o.Timeout)
		err := do(opCtx, kv, op)
		cancel()
		done := time.Now()
		if err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled)) && !done.Before(end) {
			if op.Kind == ycsb.Insert {
				gen.Acknowledge(op)
			}
			return // the run ended while this op was in flight
		}
		if op.Kind == ycsb.Insert {
			// YCSB acknowledges every insert, failed or not (its finally block); otherwise
			// the acknowledged counter stalls and later inserts never become readable.
			gen.Acknowledge(op)
		}
		lat := done.Sub(intended)
		if intended.Before(measureFrom) || done.After(end) {
			continue
		}
		if err != nil {
			st.fail(op.Kind)
			continue
		}
		st.record(op.Kind, lat)
		measured.Add(1)
		if s := int(done.Sub(start) / time.Second); s < len(secs) {
			secs[s].ops.Add(1)
			secs[s].sumMicros.Add(lat.Microseconds())
			secs[s].buckets[coarseBucket(lat.Microseconds())].Add(1)
		}
	}
}

func do(ctx context.Context, kv KV, op ycsb.Op) error {
	switch op.Kind {
	case ycsb.Read:
		return kv.Read(ctx, op.Key)
	case ycsb.Update:
		return kv.Update(ctx, op.Key, op.Value)
	case ycsb.Insert:
		return kv.Insert(ctx, op.Key, op.Value)
	case ycsb.Scan:
		return kv.Scan(ctx, op.Key, op.ScanLength)
	case ycsb.ReadModifyWrite:
		if err := kv.Read(ctx, op.Key); err != nil {
			return err
		}
		return kv.Update(ctx, op.Key, op.Value)
	}
	return fmt.Errorf("bench: unknown operation %v", op.Kind)
}

func progress(ctx context.Context, o RunOptions, start, measureFrom time.Time, secs []second, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if o.ProgressTTY {
				fmt.Fprint(o.Progress, "\r\033[K")
			}
			return
		case now := <-tick.C:
			s := int(now.Sub(start)/time.Second) - 1
			if s < 0 || s >= len(secs) {
				continue
			}
			phase := "measuring"
			if now.Before(measureFrom) {
				phase = "warm-up"
			}
			line := fmt.Sprintf("  %s %3.0fs  %8.0f ops/s  p99 %7.1f ms", phase, now.Sub(start).Seconds(), float64(secs[s].ops.Load()), secs[s].p99())
			if o.ProgressTTY {
				fmt.Fprint(o.Progress, "\r\033[K"+line)
			} else if s%5 == 4 {
				fmt.Fprintln(o.Progress, line)
			}
		}
	}
}

// percentilesForCDF are the points stored for CDF charts.
var percentilesForCDF = []float64{0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97, 98, 99, 99.5, 99.9, 99.99, 100}

func opStats(h *hdrhistogram.Histogram, errs int64, boundMs float64) OpStats {
	s := OpStats{Errors: errs, LowerBoundMs: boundMs}
	if h == nil || h.TotalCount() == 0 {
		return s
	}
	ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	s.Count = h.TotalCount()
	s.P50Ms, s.P99Ms, s.P999Ms = ms(50), ms(99), ms(99.9)
	s.MeanMs = h.Mean() / 1000
	for _, p := range percentilesForCDF {
		v := ms(p)
		if p == 0 {
			v = float64(h.Min()) / 1000
		}
		s.Percentiles = append(s.Percentiles, [2]float64{p, v})
	}
	return s
}
