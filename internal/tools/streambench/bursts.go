package streambench

// `meridian bench stream bursts`: thesis Figs. 5.8–5.9 (5.7.1, "Handling Data Bursts"). One
// node's store (kawkab.Store: buffer cache, local chunk store with a capacity, uploads to an
// object store through the S3 model) ingests a steady rate with bursts drawn second by second;
// every sample records the ingest throughput and the state of the modules — cache occupancy,
// local store occupancy, the evictable share (uploaded, not yet deleted) and the upload queue
// — as the thesis's figures plot them. Fig. 5.9 is the same run with fewer upload workers, so
// that uploads fall behind the ingest. Beyond the thesis, appends are slowed before they are
// declined (kawkab.StoreOptions.HighWater): the run counts appends slowed, declined and
// dropped (declined after the clients' retries).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"meridian/internal/kawkab"
)

// BurstsOptions describe one `bench stream bursts` run.
type BurstsOptions struct {
	// Duration bounds the run (default 60 s); SampleEvery is the sampling period (default
	// 1 s). Each second of the run is a burst with probability BurstProbability (default
	// 0.2, the thesis's), drawn from Seed.
	Duration, SampleEvery time.Duration
	BurstProbability      float64
	Seed                  uint64
	// RecordBytes is R (default 64, the thesis's records in 5.7.1); BatchRecords the records
	// per append (default 1000).
	RecordBytes, BatchRecords int
	// Appenders is the number of clients, each appending to a stream of its own (default 8).
	Appenders int
	// SteadyRate and BurstRate are the offered records per second outside and during a
	// burst, over all appenders (defaults 500,000 and 1,500,000: 32 and 96 MB/s of 64-byte
	// records; the thesis's 2 M and 4.5 M records/s scaled to this machine's disk).
	SteadyRate, BurstRate float64
	// CapacityBytes is the local store's capacity (default 512 MiB); CacheBytes the buffer
	// cache's (default 256 MiB); UploadWorkers the upload workers (default 8; Fig. 5.9: 1).
	CapacityBytes, CacheBytes int64
	UploadWorkers             int
	// HighWater is the local store's level above which appends are slowed (0: the store's
	// default, 0.9); MaxSlowdown bounds one append's wait (0: the store's default, 1 s).
	HighWater   float64
	MaxSlowdown time.Duration
	// Retries is how many times a client retries a declined append, backing off
	// exponentially from 10 ms, before it drops the batch (default 5, as the thesis's
	// clients "keep retrying for a fixed number of retries").
	Retries int
	// ObjectStore is where uploads go: "mem" (default: in memory, bounded by the run) or
	// "dir" (a directory in the scratch directory); either behind the S3 model calibrated on
	// the thesis (kawkab.DefaultS3Model) unless NoModel.
	ObjectStore string
	NoModel     bool
	// Dir is the scratch directory (default: a new temporary one, removed at the end).
	Dir string
	// Log receives progress lines.
	Log io.Writer `json:"-"`
}

func (o BurstsOptions) withDefaults() (BurstsOptions, error) {
	if o.Duration == 0 {
		o.Duration = 60 * time.Second
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = time.Second
	}
	if o.BurstProbability == 0 {
		o.BurstProbability = 0.2
	}
	if o.Seed == 0 {
		o.Seed = 571
	}
	if o.RecordBytes == 0 {
		o.RecordBytes = 64
	}
	if o.BatchRecords == 0 {
		o.BatchRecords = 1000
	}
	if o.Appenders == 0 {
		o.Appenders = 8
	}
	if o.SteadyRate == 0 {
		o.SteadyRate = 500_000
	}
	if o.BurstRate == 0 {
		o.BurstRate = 1_500_000
	}
	if o.CapacityBytes == 0 {
		o.CapacityBytes = 512 << 20
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 256 << 20
	}
	if o.UploadWorkers == 0 {
		o.UploadWorkers = kawkab.DefaultUploadWorkers
	}
	if o.Retries == 0 {
		o.Retries = 5
	}
	if o.ObjectStore == "" {
		o.ObjectStore = "mem"
	}
	switch {
	case o.Duration < time.Second || o.Duration > time.Hour:
		return o, fmt.Errorf("streambench: bursts: duration %v: want 1 s to 1 h", o.Duration)
	case o.SampleEvery < 10*time.Millisecond || o.SampleEvery > o.Duration:
		return o, fmt.Errorf("streambench: bursts: sample period %v: want 10 ms to the duration", o.SampleEvery)
	case o.BurstProbability < 0 || o.BurstProbability > 1:
		return o, fmt.Errorf("streambench: bursts: burst probability %v outside [0, 1]", o.BurstProbability)
	case o.RecordBytes < 16 || o.RecordBytes > 4096:
		return o, fmt.Errorf("streambench: bursts: record size %d: want 16 to 4096 bytes", o.RecordBytes)
	case o.BatchRecords < 1 || o.BatchRecords*o.RecordBytes > kawkab.MaxBatchBytes:
		return o, fmt.Errorf("streambench: bursts: batch of %d records: want 1 to %d", o.BatchRecords, kawkab.MaxBatchBytes/o.RecordBytes)
	case o.Appenders < 1 || o.Appenders > 1024:
		return o, fmt.Errorf("streambench: bursts: %d appenders: want 1 to 1024", o.Appenders)
	case !(o.SteadyRate > 0) || !(o.BurstRate >= o.SteadyRate) || math.IsInf(o.BurstRate, 0):
		return o, fmt.Errorf("streambench: bursts: rates %v and %v: want 0 < steady ≤ burst", o.SteadyRate, o.BurstRate)
	case o.CapacityBytes < 4*(4<<20)*int64(o.Appenders):
		return o, fmt.Errorf("streambench: bursts: local capacity %d bytes: want at least 4 chunks (16 MiB) per appender", o.CapacityBytes)
	case o.CacheBytes < 1<<20:
		return o, fmt.Errorf("streambench: bursts: cache of %d bytes: want at least 1 MiB", o.CacheBytes)
	case o.UploadWorkers < 1 || o.UploadWorkers > 256:
		return o, fmt.Errorf("streambench: bursts: %d upload workers: want 1 to 256", o.UploadWorkers)
	case o.Retries < 0 || o.Retries > 20:
		return o, fmt.Errorf("streambench: bursts: %d retries: want 0 to 20", o.Retries)
	case o.ObjectStore != "mem" && o.ObjectStore != "dir":
		return o, fmt.Errorf("streambench: bursts: object store %q: want mem or dir", o.ObjectStore)
	}
	return o, nil
}

func (o BurstsOptions) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// BurstSample is the state at the end of one sampling period.
type BurstSample struct {
	// AtSec is the sample's time since the start of the run.
	AtSec float64 `json:"at_sec"`
	// Burst says the period's offered load was a burst's; OfferedPerSec is that load.
	Burst         bool    `json:"burst"`
	OfferedPerSec float64 `json:"offered_per_sec"`
	// IngestPerSec are the records acknowledged during the period, per second.
	IngestPerSec float64 `json:"ingest_per_sec"`
	// AppendP99Ms is the 99th percentile of the period's append latencies, from the call
	// (a slowed append's wait included).
	AppendP99Ms float64 `json:"append_p99_ms"`
	// Fractions as the thesis plots them: of the cache's capacity, and of the local store's.
	CacheUsed      float64 `json:"cache_used"`
	LocalUsed      float64 `json:"local_used"`
	LocalEvictable float64 `json:"local_evictable"`
	UploadQueue    float64 `json:"upload_queue"`
	// Totals so far.
	Slowed   uint64 `json:"slowed"`
	Declined uint64 `json:"declined"`
	Dropped  uint64 `json:"dropped_batches"`
	Uploads  uint64 `json:"uploads"`
	Deleted  uint64 `json:"deleted_chunks"`
}

// BurstsReport is the outcome of a run.
type BurstsReport struct {
	Options BurstsOptions `json:"options"`
	Load    string        `json:"load_average"`
	Samples []BurstSample `json:"samples"`
	// Offered and Acknowledged count records over the run; Behind is the records the
	// clients were still behind their schedule at the end (appends slowed by backpressure
	// make the clients fall behind rather than lose data).
	Offered, Acknowledged, Behind int64
	// Slowed, Declined and Dropped count appends slowed, declined (each retry counts) and
	// batches dropped after every retry was declined.
	Slowed, Declined, Dropped uint64
	// Max levels over the run.
	MaxLocalUsed, MaxUploadQueue, MaxCacheUsed float64
	// Uploads and DeletedChunks at the end; UploadFailures the failed upload requests.
	Uploads, DeletedChunks, UploadFailures uint64
	// AppendP50Ms and AppendP99Ms over the whole run.
	AppendP50Ms, AppendP99Ms float64
}

// burstSchedule is the offered rate of each second of the run: a burst with the given
// probability, drawn once from the seed so that runs with the same seed offer the same load.
func burstSchedule(o BurstsOptions) []bool {
	secs := int(math.Ceil(o.Duration.Seconds()))
	r := rand.New(rand.NewPCG(o.Seed, o.Seed^0x5_7_1))
	out := make([]bool, secs)
	for i := range out {
		out[i] = r.Float64() < o.BurstProbability
	}
	return out
}

// schedule is a burst schedule with the number of burst seconds before each second, so that
// the records offered up to any time take O(1): the clients ask before every batch.
type schedule struct {
	bursts []bool
	before []int // before[i]: burst seconds among seconds 0 … i−1
}

func newSchedule(bursts []bool) schedule {
	before := make([]int, len(bursts)+1)
	for i, b := range bursts {
		before[i+1] = before[i]
		if b {
			before[i+1]++
		}
	}
	return schedule{bursts: bursts, before: before}
}

// burst reports whether the second holding at is a burst.
func (s schedule) burst(at time.Duration) bool {
	sec := int(at.Seconds())
	return sec >= 0 && sec < len(s.bursts) && s.bursts[sec]
}

// offered is the records offered from the start to at at these rates (one appender's share,
// or all of them), integrated second by second; the schedule's end holds after it.
func (s schedule) offered(at time.Duration, steady, burst float64) float64 {
	sec := min(math.Max(at.Seconds(), 0), float64(len(s.bursts)))
	whole := int(sec)
	bursted := float64(s.before[whole])
	if whole < len(s.bursts) && s.bursts[whole] {
		bursted += sec - float64(whole)
	}
	return steady*(sec-bursted) + burst*bursted
}

// RunBursts runs Figs. 5.8–5.9's experiment.
func RunBursts(ctx context.Context, o BurstsOptions) (rep *BurstsReport, err error) {
	if o, err = o.withDefaults(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "meridian-bursts-"); err != nil {
			return nil, fmt.Errorf("streambench: bursts: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	var inner kawkab.ObjectStore = kawkab.NewMemObjectStore()
	if o.ObjectStore == "dir" {
		d, err := kawkab.OpenDirObjectStore(filepath.Join(dir, "objects"))
		if err != nil {
			return nil, fmt.Errorf("streambench: bursts: %w", err)
		}
		inner = d
	}
	obj := inner
	if !o.NoModel {
		obj = &kawkab.ModelledObjectStore{Inner: inner, Model: kawkab.DefaultS3Model()}
	}
	cache, err := kawkab.NewCache(kawkab.CacheConfig{CapacityBytes: o.CacheBytes})
	if err != nil {
		return nil, fmt.Errorf("streambench: bursts: %w", err)
	}
	st, err := kawkab.OpenStore(filepath.Join(dir, "local"), kawkab.StoreOptions{
		ObjectStore: obj, UploadWorkers: o.UploadWorkers, CapacityBytes: o.CapacityBytes,
		HighWater: o.HighWater, MaxSlowdown: o.MaxSlowdown, Cache: cache,
	})
	if err != nil {
		return nil, fmt.Errorf("streambench: bursts: %w", err)
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	streams := make([]*kawkab.Stream, o.Appenders)
	for i := range streams {
		cfg := kawkab.StreamConfig{ID: uint64(i + 1), RecordBytes: o.RecordBytes, ValueOffset: 8, Ack: kawkab.AckMemory}
		if streams[i], err = st.Create(cfg); err != nil {
			return nil, fmt.Errorf("streambench: bursts: %w", err)
		}
	}
	rep = &BurstsReport{Options: o}
	sched := newSchedule(burstSchedule(o))
	perSteady, perBurst := o.SteadyRate/float64(o.Appenders), o.BurstRate/float64(o.Appenders)
	o.logf("bench stream bursts: %d appenders, %.0f rec/s steady, %.0f in bursts (p = %.2f), %d-byte records, batches of %d, local store %d MiB, cache %d MiB, %d upload workers, %v",
		o.Appenders, o.SteadyRate, o.BurstRate, o.BurstProbability, o.RecordBytes, o.BatchRecords, o.CapacityBytes>>20, o.CacheBytes>>20, o.UploadWorkers, o.Duration)

	// A recent-data reader per stream keeps the cache in use, as the thesis's realtime
	// queries do: every 10 ms it reads the last batch's records.
	var (
		acked, dropped, declined atomic.Int64
		behind                   atomic.Int64
		histMu                   sync.Mutex
		period                   = hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
		whole                    = hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
	)
	runCtx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, 2*o.Appenders)
	for w := range o.Appenders {
		s := streams[w]
		wg.Go(func() {
			batch := make([]byte, o.BatchRecords*o.RecordBytes)
			var ts int64
			var sent int64 // records this appender has sent (acknowledged or dropped)
			for runCtx.Err() == nil {
				// Open loop: send when the schedule says the next batch is due; a client
				// held up by a slowed append catches up without skipping.
				elapsed := time.Since(start)
				due := sched.offered(elapsed, perSteady, perBurst)
				if float64(sent+int64(o.BatchRecords)) > due {
					need := float64(sent+int64(o.BatchRecords)) - due
					rate := perSteady
					if sched.burst(elapsed) {
						rate = perBurst
					}
					wait := time.Duration(need / rate * float64(time.Second))
					select {
					case <-runCtx.Done():
					case <-time.After(min(wait, 50*time.Millisecond)):
					}
					continue
				}
				for i := range o.BatchRecords {
					rec := batch[i*o.RecordBytes:]
					binary.LittleEndian.PutUint64(rec, uint64(ts))
					binary.LittleEndian.PutUint64(rec[8:], uint64(ts))
					ts++
				}
				t0 := time.Now()
				var aerr error
				for try := 0; ; try++ {
					_, aerr = s.Append(batch)
					if !errors.Is(aerr, kawkab.ErrStoreFull) {
						break
					}
					declined.Add(1)
					if try == o.Retries {
						break
					}
					select {
					case <-runCtx.Done():
					case <-time.After(10 * time.Millisecond << try):
					}
				}
				sent += int64(o.BatchRecords)
				switch {
				case aerr == nil:
					us := time.Since(t0).Microseconds()
					histMu.Lock()
					_ = period.RecordValue(max(us, 1))
					_ = whole.RecordValue(max(us, 1))
					histMu.Unlock()
					acked.Add(int64(o.BatchRecords))
				case errors.Is(aerr, kawkab.ErrStoreFull):
					dropped.Add(1)
				default:
					errc <- fmt.Errorf("streambench: bursts: appender %d: %w", w, aerr)
					cancel()
					return
				}
			}
			due := sched.offered(o.Duration, perSteady, perBurst)
			behind.Add(int64(math.Max(0, due-float64(sent))))
		})
		wg.Go(func() {
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
				}
				n := s.Len()
				if n < uint64(o.BatchRecords) {
					continue
				}
				if _, err := s.ReadRecords(n-uint64(o.BatchRecords), o.BatchRecords); err != nil {
					errc <- fmt.Errorf("streambench: bursts: reader %d: %w", w, err)
					cancel()
					return
				}
			}
		})
	}

	// The sampler.
	var lastAcked int64
	lastAt := start
	sample := func(now time.Time) {
		s := st.Stats()
		a := acked.Load()
		dt := now.Sub(lastAt).Seconds()
		histMu.Lock()
		p99 := float64(period.ValueAtQuantile(99)) / 1000
		period.Reset()
		histMu.Unlock()
		// The period's offered load, and whether its middle was in a burst.
		offered := (sched.offered(now.Sub(start), o.SteadyRate, o.BurstRate) -
			sched.offered(lastAt.Sub(start), o.SteadyRate, o.BurstRate)) / dt
		burst := sched.burst(now.Sub(start) - now.Sub(lastAt)/2)
		frac := func(n, d int64) float64 {
			if d <= 0 {
				return 0
			}
			return float64(n) / float64(d)
		}
		chunkBytes := int64(kawkab.ChunkBytes)
		bs := BurstSample{
			AtSec: now.Sub(start).Seconds(), Burst: burst, OfferedPerSec: offered,
			IngestPerSec: float64(a-lastAcked) / dt, AppendP99Ms: p99,
			CacheUsed:      frac(s.Cache.UsedBytes, s.Cache.CapacityBytes),
			LocalUsed:      frac(s.LocalBytes, s.CapacityBytes),
			LocalEvictable: frac(s.EvictableBytes, s.CapacityBytes),
			UploadQueue:    frac(int64(s.UploadQueue)*chunkBytes, s.CapacityBytes),
			Slowed:         s.AppendsSlowed, Declined: uint64(declined.Load()), Dropped: uint64(dropped.Load()),
			Uploads: s.Uploads, Deleted: s.DeletedChunks,
		}
		rep.Samples = append(rep.Samples, bs)
		rep.MaxLocalUsed = math.Max(rep.MaxLocalUsed, bs.LocalUsed)
		rep.MaxUploadQueue = math.Max(rep.MaxUploadQueue, bs.UploadQueue)
		rep.MaxCacheUsed = math.Max(rep.MaxCacheUsed, bs.CacheUsed)
		lastAcked, lastAt = a, now
		o.logf("  t=%5.1fs %-6s ingest %9.0f rec/s  p99 %7.2f ms  cache %.2f  local %.2f  evictable %.2f  upload queue %.2f  slowed %d declined %d dropped %d",
			bs.AtSec, map[bool]string{true: "burst", false: "steady"}[burst], bs.IngestPerSec, p99, bs.CacheUsed, bs.LocalUsed, bs.LocalEvictable, bs.UploadQueue, bs.Slowed, bs.Declined, bs.Dropped)
	}
	tick := time.NewTicker(o.SampleEvery)
	// Bounded: one sample per period until the run ends.
sampling:
	for {
		select {
		case <-runCtx.Done():
			break sampling
		case now := <-tick.C:
			sample(now)
		}
	}
	tick.Stop()
	wg.Wait()
	close(errc)
	for e := range errc {
		err = errors.Join(err, e)
	}
	if err != nil {
		return rep, err
	}
	s := st.Stats()
	rep.Load = LoadAvg()
	rep.Acknowledged = acked.Load()
	rep.Offered = int64(sched.offered(o.Duration, o.SteadyRate, o.BurstRate))
	rep.Behind = behind.Load()
	rep.Slowed, rep.Declined, rep.Dropped = s.AppendsSlowed, uint64(declined.Load()), uint64(dropped.Load())
	rep.Uploads, rep.DeletedChunks, rep.UploadFailures = s.Uploads, s.DeletedChunks, s.UploadFailures
	rep.AppendP50Ms = float64(whole.ValueAtQuantile(50)) / 1000
	rep.AppendP99Ms = float64(whole.ValueAtQuantile(99)) / 1000
	return rep, nil
}

// Markdown is the run's summary and its samples as tables.
func (rep *BurstsReport) Markdown() string {
	o := rep.Options
	var b strings.Builder
	fmt.Fprintf(&b, "Bursts (thesis Figs. 5.8–5.9): %d appenders, %s rec/s steady and %s in bursts (p = %.2f per second), %d-byte records in batches of %d; local store %d MiB, cache %d MiB, %d upload workers, object store %s%s; %v. Load average: %s.\n\n",
		o.Appenders, Count(int64(o.SteadyRate)), Count(int64(o.BurstRate)), o.BurstProbability, o.RecordBytes, o.BatchRecords,
		o.CapacityBytes>>20, o.CacheBytes>>20, o.UploadWorkers, o.ObjectStore, map[bool]string{false: " behind the S3 model", true: ""}[o.NoModel], o.Duration, rep.Load)
	fmt.Fprintf(&b, "| offered | acknowledged | behind at the end | slowed | declined | dropped batches | append p50 / p99 (ms) | max local | max upload queue | max cache | uploads | deleted chunks | upload failures |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %s / %s | %.2f | %.2f | %.2f | %d | %d | %d |\n\n",
		Count(rep.Offered), Count(rep.Acknowledged), Count(rep.Behind), rep.Slowed, rep.Declined, rep.Dropped,
		Ms(rep.AppendP50Ms), Ms(rep.AppendP99Ms), rep.MaxLocalUsed, rep.MaxUploadQueue, rep.MaxCacheUsed, rep.Uploads, rep.DeletedChunks, rep.UploadFailures)
	fmt.Fprintf(&b, "| t (s) | load | offered rec/s | ingest rec/s | append p99 (ms) | cache | local | evictable | upload queue | slowed | declined | dropped |\n")
	fmt.Fprintf(&b, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range rep.Samples {
		kind := "steady"
		if s.Burst {
			kind = "burst"
		}
		fmt.Fprintf(&b, "| %.0f | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %d | %d | %d |\n",
			s.AtSec, kind, Count(int64(s.OfferedPerSec)), Count(int64(s.IngestPerSec)), Ms(s.AppendP99Ms),
			s.CacheUsed, s.LocalUsed, s.LocalEvictable, s.UploadQueue, s.Slowed, s.Declined, s.Dropped)
	}
	return b.String()
}

// Charts draws the run as the thesis's Figs. 5.8–5.9 do: (a) the offered load and the ingest
// throughput over time, (b) the cache's and the local store's occupancy, the local store's
// evictable share and the upload queue (as fractions of their capacities) over time, side by
// side into dir as bursts.png and bursts.svg.
func (rep *BurstsReport) Charts(dir string) ([]string, error) {
	if len(rep.Samples) == 0 {
		return nil, fmt.Errorf("streambench: bursts: no samples to chart")
	}
	tp := plot.New()
	workers := fmt.Sprintf("%d upload workers", rep.Options.UploadWorkers)
	if rep.Options.UploadWorkers == 1 {
		workers = "1 upload worker"
	}
	tp.Title.Text = "(a) Ingest (" + workers + ")"
	tp.X.Label.Text = "time (s)"
	tp.Y.Label.Text = "million records/s"
	st := plot.New()
	st.Title.Text = "(b) Modules (fraction of capacity)"
	st.X.Label.Text = "time (s)"
	st.Y.Label.Text = "fraction"
	st.Y.Min, st.Y.Max = 0, 1.4 // room for the legend above the lines
	tp.Y.Min = 0
	series := func(f func(BurstSample) float64) plotter.XYs {
		xy := make(plotter.XYs, len(rep.Samples))
		for i, s := range rep.Samples {
			xy[i] = plotter.XY{X: s.AtSec, Y: f(s)}
		}
		return xy
	}
	add := func(p *plot.Plot, name string, c int, xy plotter.XYs) error {
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color = seriesColors[c%len(seriesColors)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	for i, l := range []struct {
		p    *plot.Plot
		name string
		f    func(BurstSample) float64
	}{
		{tp, "offered", func(s BurstSample) float64 { return s.OfferedPerSec / 1e6 }},
		{tp, "ingested", func(s BurstSample) float64 { return s.IngestPerSec / 1e6 }},
		{st, "cache", func(s BurstSample) float64 { return s.CacheUsed }},
		{st, "local store", func(s BurstSample) float64 { return s.LocalUsed }},
		{st, "evictable", func(s BurstSample) float64 { return s.LocalEvictable }},
		{st, "upload queue", func(s BurstSample) float64 { return s.UploadQueue }},
	} {
		if err := add(l.p, l.name, i, series(l.f)); err != nil {
			return nil, err
		}
	}
	for _, p := range []*plot.Plot{tp, st} {
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
	}
	var files []string
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(dir, "bursts"+ext)
		if err := saveSideBySide(path, tp, st); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}
