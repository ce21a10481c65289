// Package loadgen is the load loop of the stream-ingest benchmark (issue 20, thesis Fig.
// 5.10) shared by Meridian's targets (internal/tools/streambench) and the InfluxDB peer's
// writer (internal/tools/peer/influxdb): batches of B records sent by W workers, closed loop
// (each worker sends its next batch when the previous one is acknowledged: the peak) or open
// loop (batches scheduled at a rate whether or not earlier ones are done, a batch's latency
// counted from its scheduled time so that queueing counts: no coordinated omission), batch
// latencies in an HDR histogram, and the CPU time of the server's processes (from
// /proc/<pid>/stat) or, for a system running in this process, of this process (getrusage).
//
// The Kafka peer (internal/tools/peer/kafka) has its own copy of this loop, written before
// it; the two measure the same things the same way (see docs/streams-bench.md).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"meridian/internal/tools/peer/kafka"
)

// The latency histogram's range: 1 µs to 2 minutes, 3 significant digits.
const (
	histMinUs = 1
	histMaxUs = int64(2 * time.Minute / time.Microsecond)
)

// SendFunc sends batch number k (0, 1, ...) from worker w (0 … Workers−1) and returns when
// it is acknowledged. A worker calls it from one goroutine, one batch at a time, so a worker
// may keep its batch buffer and its connection without locks.
type SendFunc func(ctx context.Context, w int, k int64) error

// Options describe one run.
type Options struct {
	// Workers is the number of concurrent senders, each with at most one batch in flight
	// (default 4).
	Workers int
	// BatchRecords is B, the records of one batch (for the record counts).
	BatchRecords int
	// RecordBytes is R (for MB/s; default 16).
	RecordBytes int
	// Records bounds the run: no batch is issued once Records records were (rounded up to
	// whole batches). Required.
	Records int64
	// Duration bounds the run's time too (default 10 s): no batch starts after it.
	Duration time.Duration
	// Warmup excludes the batches acknowledged before it ends from the latency, the
	// throughput and the CPU time.
	Warmup time.Duration
	// Rate, if positive, makes the run open-loop at Rate records per second (Rate/B batches
	// per second); zero: closed loop.
	Rate float64
	// Poisson spaces open-loop batches exponentially (Poisson arrivals, as the thesis's
	// clients) instead of evenly.
	Poisson bool
	// Seed seeds the Poisson schedule (0: 1).
	Seed uint64
	// ServerPids are the server's processes whose CPU time is the server's. None: the
	// server runs in this process (InProcess must say so) and its CPU time is this
	// process's, the load generator's included.
	ServerPids []int
	// InProcess says that the server runs in this process: its CPU time is this process's.
	InProcess bool
	// Observe, if set, is called by the worker right after each batch's outcome is
	// accounted: its scheduled (open loop) or send (closed loop) time and whether it counts
	// (acknowledged after the warm-up). A harness that mixes operations keeps its own
	// per-operation statistics with it.
	Observe func(w int, k int64, sched time.Time, measured bool, err error) `json:"-"`
	// Name labels the progress line.
	Name string
	// Log receives a progress line per run; nil discards it.
	Log io.Writer `json:"-"`
}

// Result is what a run measured after its warm-up.
type Result struct {
	Mode         string `json:"mode"` // "closed" or "open"
	BatchRecords int    `json:"batch_records"`
	RecordBytes  int    `json:"record_bytes"`
	Workers      int    `json:"workers"`
	// Batches and Records were acknowledged in the measured window; Errors batches failed
	// (in the whole run).
	Batches int64 `json:"batches"`
	Records int64 `json:"records"`
	Errors  int64 `json:"errors"`
	// TotalRecords were acknowledged in the whole run, warm-up included.
	TotalRecords int64 `json:"total_records"`
	// Seconds is the measured window, from the warm-up's end to the last acknowledgement.
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	// TargetRecordsPerSec is the open-loop rate (0 closed loop).
	TargetRecordsPerSec float64 `json:"target_records_per_sec,omitempty"`
	// Batch latency, milliseconds (closed loop: send to acknowledgement; open loop: from
	// the scheduled time).
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
	// Service latency, milliseconds: from the moment a worker sent the batch to its
	// acknowledgement, without the wait for a free worker or the pacer's lateness (equal to
	// the batch latency in a closed loop).
	ServiceP50Ms float64 `json:"service_p50_ms"`
	ServiceP99Ms float64 `json:"service_p99_ms"`
	// ServerCPUSeconds is the server's CPU time in the window (this process's when it runs
	// in it); per record, and in cores (divided by Seconds).
	ServerCPUSeconds     float64 `json:"server_cpu_seconds"`
	ServerCPUPerRecordUs float64 `json:"server_cpu_per_record_us"`
	ServerCores          float64 `json:"server_cores"`
	// ClientCPUSeconds is this process's CPU time in the window when the server is another
	// process (0 in process: it is the server's).
	ClientCPUSeconds     float64 `json:"client_cpu_seconds,omitempty"`
	ClientCPUPerRecordUs float64 `json:"client_cpu_per_record_us,omitempty"`
	// Stopped says what ended the run: "records", "duration" or "context".
	Stopped string `json:"stopped"`
	// FirstError is the first failed batch's error, if any failed.
	FirstError string `json:"first_error,omitempty"`
}

// String is the result on one line.
func (r Result) String() string {
	s := fmt.Sprintf("%s-loop B=%d workers=%d: %d records in %.2fs = %.0f rec/s (%.1f MB/s), batch p50 %.3f ms p99 %.3f ms max %.3f ms",
		r.Mode, r.BatchRecords, r.Workers, r.Records, r.Seconds, r.RecordsPerSec, r.MBPerSec, r.P50Ms, r.P99Ms, r.MaxMs)
	if r.TargetRecordsPerSec > 0 {
		s += fmt.Sprintf(", target %.0f rec/s", r.TargetRecordsPerSec)
	}
	s += fmt.Sprintf(", server CPU %.3f µs/record (%.2f cores)", r.ServerCPUPerRecordUs, r.ServerCores)
	if r.ClientCPUSeconds > 0 {
		s += fmt.Sprintf(", client CPU %.3f µs/record", r.ClientCPUPerRecordUs)
	}
	s += fmt.Sprintf(", %d errors, stopped by %s", r.Errors, r.Stopped)
	return s
}

// WithDefaults checks o and fills in its defaults.
func (o Options) WithDefaults() (Options, error) {
	if o.BatchRecords <= 0 {
		return o, fmt.Errorf("loadgen: batch of %d records", o.BatchRecords)
	}
	if o.Records <= 0 {
		return o, fmt.Errorf("loadgen: a run needs a positive record bound, not %d", o.Records)
	}
	if o.Duration < 0 || o.Warmup < 0 || o.Workers < 0 || o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		return o, errors.New("loadgen: negative or invalid duration, warm-up, worker count or rate")
	}
	if o.RecordBytes == 0 {
		o.RecordBytes = 16
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup >= o.Duration {
		return o, fmt.Errorf("loadgen: warm-up %v is not shorter than the run's bound %v", o.Warmup, o.Duration)
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if len(o.ServerPids) == 0 && !o.InProcess {
		return o, errors.New("loadgen: no server processes and not in process: whose CPU time is the server's?")
	}
	return o, nil
}

// Pacer is an open-loop schedule: the offsets from the run's start at which batches are
// due, Rate/B a second on average, evenly or with exponential gaps (Poisson arrivals).
type Pacer struct {
	gap     float64 // mean seconds between batches
	poisson bool
	rng     *rand.Rand
	next    float64 // seconds
}

// NewPacer is the schedule of batches of b records at rate records per second.
func NewPacer(rate float64, b int, poisson bool, seed uint64) *Pacer {
	return &Pacer{gap: float64(b) / rate, poisson: poisson, rng: rand.New(rand.NewPCG(seed, 0x73747265616d))} // "stream"
}

// Next is the offset at which the next batch is due (the first at 0).
func (p *Pacer) Next() time.Duration {
	at := p.next
	g := p.gap
	if p.poisson {
		g = p.rng.ExpFloat64() * p.gap
	}
	p.next += g
	return time.Duration(at * float64(time.Second))
}

// Accounting gathers a run's acknowledgements: what counts (after the warm-up), the
// latency histogram, the errors. Safe for concurrent use.
type Accounting struct {
	b       int64
	warmEnd time.Time

	mu       sync.Mutex
	hist     *hdrhistogram.Histogram // from the scheduled time
	service  *hdrhistogram.Histogram // from the send
	batches  int64                   // measured
	records  int64                   // measured
	all      int64                   // records acknowledged in the whole run
	errs     int64
	firstErr error
	lastAck  time.Time // the last measured acknowledgement
	seen     int64
}

// NewAccounting counts batches of b records acknowledged after warmEnd.
func NewAccounting(b int, warmEnd time.Time) *Accounting {
	return &Accounting{b: int64(b), warmEnd: warmEnd, hist: hdrhistogram.New(histMinUs, histMaxUs, 3),
		service: hdrhistogram.New(histMinUs, histMaxUs, 3)}
}

// Done records batch k's outcome: scheduled at sched (closed loop: sent), sent at sent,
// acknowledged at done. It reports whether the batch counts (acknowledged after the
// warm-up).
func (a *Accounting) Done(k int64, sched, sent, done time.Time, err error) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen++
	if err != nil {
		a.errs++
		if a.firstErr == nil {
			a.firstErr = fmt.Errorf("batch %d: %w", k, err)
		}
		return false
	}
	a.all += a.b
	if done.Before(a.warmEnd) {
		return false
	}
	a.batches++
	a.records += a.b
	if done.After(a.lastAck) {
		a.lastAck = done
	}
	us := done.Sub(sched).Microseconds()
	_ = a.hist.RecordValue(min(max(us, histMinUs), histMaxUs))
	us = done.Sub(sent).Microseconds()
	_ = a.service.RecordValue(min(max(us, histMinUs), histMaxUs))
	return true
}

// Fill puts the counts, the throughput and the latency quantiles into r (not the CPU times).
func (a *Accounting) Fill(r *Result) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r.Batches, r.Records, r.TotalRecords, r.Errors = a.batches, a.records, a.all, a.errs
	if a.firstErr != nil {
		r.FirstError = a.firstErr.Error()
	}
	if a.batches == 0 {
		return
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	r.P50Ms, r.P90Ms, r.P99Ms = ms(a.hist.ValueAtQuantile(50)), ms(a.hist.ValueAtQuantile(90)), ms(a.hist.ValueAtQuantile(99))
	r.MaxMs, r.MeanMs = ms(a.hist.Max()), a.hist.Mean()/1000
	r.ServiceP50Ms, r.ServiceP99Ms = ms(a.service.ValueAtQuantile(50)), ms(a.service.ValueAtQuantile(99))
	r.Seconds = a.lastAck.Sub(a.warmEnd).Seconds()
	if r.Seconds > 0 {
		r.RecordsPerSec = float64(a.records) / r.Seconds
		r.MBPerSec = r.RecordsPerSec * float64(r.RecordBytes) / 1e6
	}
}

// SelfCPU is this process's CPU time (user and system, every thread), from getrusage.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuReading is the CPU times at one instant.
type cpuReading struct {
	server, self time.Duration
	err          error
}

func readCPU(o Options) cpuReading {
	c := cpuReading{self: SelfCPU()}
	if len(o.ServerPids) > 0 {
		c.server, c.err = kafka.ProcessesCPU(o.ServerPids)
	} else {
		c.server = c.self
	}
	return c
}

// Run runs one load: send is called for batches 0, 1, ... by o.Workers workers, closed or
// open loop, until o.Records records were issued, o.Duration passed, or ctx ended. A batch
// that fails is counted, not fatal; a run in which every batch failed, or none was
// acknowledged after the warm-up, is an error.
func Run(ctx context.Context, o Options, send SendFunc) (Result, error) {
	o, err := o.WithDefaults()
	if err != nil {
		return Result{}, err
	}
	b := int64(o.BatchRecords)
	totalBatches := (o.Records + b - 1) / b
	res := Result{Mode: "closed", BatchRecords: o.BatchRecords, RecordBytes: o.RecordBytes, Workers: o.Workers, TargetRecordsPerSec: o.Rate}
	if o.Rate > 0 {
		res.Mode = "open"
	}
	runCtx, cancel := context.WithTimeout(ctx, o.Duration+2*time.Minute) // the last batches' grace
	defer cancel()
	start := time.Now()
	deadline := start.Add(o.Duration)
	acc := NewAccounting(o.BatchRecords, start.Add(o.Warmup))

	// The measured window opens when the warm-up ends: CPU times are read then.
	var cpuStart cpuReading
	cpuRead := make(chan struct{})
	cpuTimer := time.AfterFunc(o.Warmup, func() { cpuStart = readCPU(o); close(cpuRead) })
	defer cpuTimer.Stop()

	var (
		issued atomic.Int64
		stop   atomic.Value
		wg     sync.WaitGroup
	)
	stop.Store("records")
	done := func(w int, k int64, sched, sent time.Time, err error) {
		measured := acc.Done(k, sched, sent, time.Now(), err)
		if o.Observe != nil {
			o.Observe(w, k, sched, measured, err)
		}
	}
	if o.Rate <= 0 {
		for w := range o.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if runCtx.Err() != nil {
						stop.Store("context")
						return
					}
					if !time.Now().Before(deadline) {
						stop.Store("duration")
						return
					}
					k := issued.Add(1) - 1
					if k >= totalBatches {
						return
					}
					sched := time.Now()
					err := send(runCtx, w, k)
					done(w, k, sched, sched, err)
				}
			}()
		}
	} else {
		type job struct {
			k     int64
			sched time.Time
		}
		jobs := make(chan job, o.Workers)
		for w := range o.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range jobs {
					sent := time.Now()
					err := send(runCtx, w, j.k)
					done(w, j.k, j.sched, sent, err)
				}
			}()
		}
		pacer := NewPacer(o.Rate, o.BatchRecords, o.Poisson, o.Seed)
		// The schedule sleeps in nanosleep(2) on a thread of its own (sleepUntil).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	schedule:
		for k := int64(0); k < totalBatches; k++ {
			next := start.Add(pacer.Next())
			if !next.Before(deadline) {
				stop.Store("duration")
				break
			}
			if !sleepUntil(runCtx, next) {
				stop.Store("context")
				break schedule
			}
			select {
			case jobs <- job{k, next}:
			case <-runCtx.Done():
				stop.Store("context")
				break schedule
			}
		}
		close(jobs)
	}
	wg.Wait()
	cpuEnd := readCPU(o)
	cpuStarted := !cpuTimer.Stop() // false: the warm-up did not end before the run did
	if cpuStarted {
		<-cpuRead
	}
	acc.Fill(&res)
	res.Stopped, _ = stop.Load().(string)
	if res.Errors > 0 && res.Errors == acc.seenBatches() {
		return res, fmt.Errorf("loadgen: every batch failed: %s", res.FirstError)
	}
	if res.Records == 0 {
		return res, fmt.Errorf("loadgen: no batch was acknowledged after the warm-up of %v (%d records in all, %d errors)", o.Warmup, res.TotalRecords, res.Errors)
	}
	if cpuStarted {
		if err := errors.Join(cpuStart.err, cpuEnd.err); err != nil {
			return res, err
		}
		res.ServerCPUSeconds = (cpuEnd.server - cpuStart.server).Seconds()
		res.ServerCPUPerRecordUs = res.ServerCPUSeconds * 1e6 / float64(res.Records)
		if res.Seconds > 0 {
			res.ServerCores = res.ServerCPUSeconds / res.Seconds
		}
		if len(o.ServerPids) > 0 {
			res.ClientCPUSeconds = (cpuEnd.self - cpuStart.self).Seconds()
			res.ClientCPUPerRecordUs = res.ClientCPUSeconds * 1e6 / float64(res.Records)
		}
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "%s: %s\n", o.Name, res)
	}
	return res, nil
}

func (a *Accounting) seenBatches() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen
}

// maxNap bounds one nanosleep, so that a cancelled run's schedule notices within it.
const maxNap = 10 * time.Millisecond

// sleepUntil sleeps until t, or until ctx ends (false). It sleeps in nanosleep(2) on the
// calling goroutine's thread, which the caller locks: a Go timer that is the only thing to
// wait for wakes through the network poller, whose epoll wait has a 1 ms resolution, and
// would add up to 1 ms of the load generator's own lateness to every open-loop batch at low
// rates; nanosleep wakes within the kernel's timer slack (50 µs by default).
func sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		ts := syscall.NsecToTimespec(int64(min(d, maxNap)))
		_ = syscall.Nanosleep(&ts, nil)
	}
}

// PeakAndLoaded measures Fig. 5.10's two numbers for one batch size: the peak (o as a
// closed-loop run) and then an open-loop run at fraction (0.7 in the thesis) of that peak,
// with the same workers and bounds, whose median batch latency is the figure's. o.Rate is
// ignored.
func PeakAndLoaded(ctx context.Context, o Options, fraction float64, send SendFunc) (peak, loaded Result, err error) {
	if fraction <= 0 || fraction > 1 {
		return peak, loaded, fmt.Errorf("loadgen: load fraction %v outside (0, 1]", fraction)
	}
	o.Rate = 0
	if peak, err = Run(ctx, o, send); err != nil {
		return peak, loaded, err
	}
	o.Rate = fraction * peak.RecordsPerSec
	loaded, err = Run(ctx, o, send)
	return peak, loaded, err
}
