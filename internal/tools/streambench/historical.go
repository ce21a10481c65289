package streambench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meridian/client"
	"meridian/internal/kawkab/s3store"
	"meridian/internal/tools/peer"
	"meridian/internal/tools/peer/kafka"
	"meridian/internal/tools/peer/versitygw"
	"meridian/internal/tools/streambench/loadgen"
)

// Object stores of the historical benchmark.
const (
	HistoricalStoreAuto = "auto" // VersityGW when its binary is there, else a shared directory
	HistoricalStoreS3   = "s3"   // VersityGW as its own process, through object_store: s3
	HistoricalStoreDir  = "dir"  // object_store: dir on a directory both servers share
)

// Addresses of the historical benchmark's processes.
const (
	HistoricalPrimaryAddr = "127.0.0.72"
	HistoricalReaderAddr  = "127.0.0.73"
	HistoricalS3Addr      = "127.0.0.74"
)

// HistoricalOptions describe `meridian bench stream historical` (thesis 5.7.4, Fig. 5.12).
type HistoricalOptions struct {
	// Streams are the appenders, each with a stream of its own at the primary (default 2).
	Streams int
	// Batch is the records per append and per recent read (default 1000, the thesis's).
	Batch int
	// AppendRate is the offered append load in records per second over all streams, open
	// loop (default 500,000); ReadRate the recent reads' (default: AppendRate), each read
	// 1000 records among the last 50,000 of a stream, at the primary.
	AppendRate, ReadRate float64
	// Ack is the streams' acknowledgement level (default memory, the thesis's).
	Ack string
	// Phase1 is the time without historical reads (chunks are uploaded meanwhile), Phase2
	// the time with them (defaults 30 s each); Warmup is left out of phase 1's statistics.
	Phase1, Phase2, Warmup time.Duration
	// HistReaders are the historical clients at the reader node (default 4; negative: none,
	// a control run whose phase 2 is like phase 1); each reads
	// ranges of HistRecords records (default 1,000,000, or half of what is uploaded if
	// less) from a random section of the lower half of a stream's uploaded records,
	// back to back for On, then idle for Off (defaults 5 s and 5 s).
	HistReaders, HistRecords int
	On, Off                  time.Duration
	// ObjectStore is HistoricalStoreAuto (default), HistoricalStoreS3 or HistoricalStoreDir.
	ObjectStore string
	// Cache is the servers' buffer cache (default 4MiB: small, so that the historical
	// reads come from the object store as the thesis's 1 GB cache made them).
	Cache string
	// Pin pins the primary and its clients (this process) to CPU 0 and the reader, the
	// object store and the historical clients (a process of their own) to CPU 1 with
	// taskset: as in the thesis, where the historical clients run on the non-primary node.
	Pin bool
	// Exe is the meridian binary (default: this executable); VersityGW is the gateway's
	// binary (default: $MERIDIAN_VERSITYGW, else scripts/fetch-versitygw.sh's cache).
	Exe, VersityGW string
	// Dir is the scratch directory (default: a temporary one, removed); Keep keeps it.
	Dir  string
	Keep bool
	// Seed seeds the read positions (0: 1).
	Seed uint64
	Log  io.Writer `json:"-"`
}

func (o HistoricalOptions) withDefaults() (HistoricalOptions, error) {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.Streams, 2)
	def(&o.Batch, 1000)
	def(&o.HistReaders, 4)
	def(&o.HistRecords, 1_000_000)
	if o.AppendRate == 0 {
		o.AppendRate = 500_000
	}
	if o.ReadRate == 0 {
		o.ReadRate = o.AppendRate
	}
	if o.Ack == "" {
		o.Ack = "memory"
	}
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&o.Phase1, 30 * time.Second}, {&o.Phase2, 30 * time.Second}, {&o.Warmup, 2 * time.Second}, {&o.On, 5 * time.Second}, {&o.Off, 5 * time.Second}} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
	if o.ObjectStore == "" {
		o.ObjectStore = HistoricalStoreAuto
	}
	if o.Cache == "" {
		o.Cache = "4MiB"
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	switch {
	case o.Streams < 0 || o.Batch < 0 || o.HistRecords < 0 || o.AppendRate < 0 || o.ReadRate < 0:
		return o, errors.New("streambench: historical: negative option")
	case o.Batch*RecordBytes > 1<<20:
		return o, fmt.Errorf("streambench: historical: batch %d over the servers' 1 MiB max_batch", o.Batch)
	case o.Warmup >= o.Phase1:
		return o, fmt.Errorf("streambench: historical: warm-up %v is not shorter than phase 1 (%v)", o.Warmup, o.Phase1)
	case o.ObjectStore != HistoricalStoreAuto && o.ObjectStore != HistoricalStoreS3 && o.ObjectStore != HistoricalStoreDir:
		return o, fmt.Errorf("streambench: historical: object store %q: want auto, s3 or dir", o.ObjectStore)
	}
	return o, nil
}

func (o HistoricalOptions) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Latency is a latency distribution, milliseconds.
type Latency struct {
	Count  int     `json:"count"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	// Errors are operations that failed.
	Errors int `json:"errors"`
}

// latencyOf summarizes samples (sorted in place).
func latencyOf(d []time.Duration, errs int) Latency {
	l := Latency{Count: len(d), Errors: errs}
	if len(d) == 0 {
		return l
	}
	slices.Sort(d)
	q := func(p float64) float64 {
		i := int(p*float64(len(d))+0.5) - 1
		i = min(max(i, 0), len(d)-1)
		return float64(d[i].Microseconds()) / 1000
	}
	l.P50Ms, l.P90Ms, l.P99Ms, l.P999Ms, l.MaxMs = q(0.5), q(0.9), q(0.99), q(0.999), float64(d[len(d)-1].Microseconds())/1000
	return l
}

// ProcessUse is a process's CPU and I/O in a phase.
type ProcessUse struct {
	Pid        int     `json:"pid"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Cores      float64 `json:"cores"`
	// WriteMB is /proc/<pid>/io's wchar: bytes the process wrote through write calls —
	// files and sockets alike (its appends' files, its uploads, its answers) — in MB.
	WriteMB float64 `json:"write_mb"`
	ReadMB  float64 `json:"read_mb"`
}

// Phase is one phase of the historical benchmark.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// Appends and RecentReads at the primary; Historical at the reader.
	Appends     Latency `json:"appends"`
	RecentReads Latency `json:"recent_reads"`
	Historical  Latency `json:"historical"`
	// Achieved rates, records per second.
	AppendRecPerSec     float64 `json:"append_records_per_sec"`
	RecentRecPerSec     float64 `json:"recent_read_records_per_sec"`
	HistoricalRecPerSec float64 `json:"historical_records_per_sec"`
	HistoricalMBPerSec  float64 `json:"historical_mb_per_sec"`
	// PrimaryReadRecords is the primary's meridian_stream_read_records_total (every call) in
	// the phase; RecentRecords the records the recent readers received from it (reads that
	// straddle the phase's ends make the two differ by a few reads' worth); PrimaryHistorical
	// and ReaderHistorical are meridian_stream_historical_reads_total at each node.
	PrimaryReadRecords float64 `json:"primary_read_records"`
	RecentRecords      int64   `json:"recent_records"`
	HistoricalRecords  int64   `json:"historical_records"`
	PrimaryHistorical  float64 `json:"primary_historical_reads"`
	ReaderHistorical   float64 `json:"reader_historical_reads"`
	// Primary, Reader and ObjectStore are the processes' CPU and I/O.
	Primary     ProcessUse  `json:"primary"`
	Reader      ProcessUse  `json:"reader"`
	ObjectStore *ProcessUse `json:"object_store,omitempty"`
	// PrimaryTCP and ReaderTCP are the servers' TCP bytes in the phase by the other end
	// (tcp_info's bytes_acked and bytes_received of their established connections, from
	// ss -tinp at the phase's ends; nil without ss).
	PrimaryTCP *TCPBytes `json:"primary_tcp,omitempty"`
	ReaderTCP  *TCPBytes `json:"reader_tcp,omitempty"`
	// HistClientCores is the historical clients' process's CPU over the phase (phase 2).
	HistClientCores float64 `json:"hist_client_cores,omitempty"`
	// Uploads is the primary's meridian_stream_store_uploads_total in the phase.
	Uploads float64 `json:"uploads"`
}

// FirstErrors are the first failed append, recent read and historical read of the run.
type FirstErrors struct {
	Append     string `json:"append,omitempty"`
	Recent     string `json:"recent,omitempty"`
	Historical string `json:"historical,omitempty"`
}

// HistoricalReport is a `bench stream historical` run.
type HistoricalReport struct {
	Started    time.Time         `json:"started"`
	Cores      int               `json:"cores"`
	LoadBefore string            `json:"load_before"`
	LoadAfter  string            `json:"load_after"`
	GoVersion  string            `json:"go_version"`
	Options    HistoricalOptions `json:"options"`
	// ObjectStore says which object store was used and where.
	ObjectStore string `json:"object_store"`
	// Primary and Reader are the streams' primary and the node the historical reads went to.
	Primary string `json:"primary"`
	Reader  string `json:"reader"`
	// UploadedAtPhase2 are the records uploaded over all streams when phase 2 began.
	UploadedAtPhase2 uint64  `json:"uploaded_at_phase2"`
	Phases           []Phase `json:"phases"`
	// PrimaryReadRecords and RecentRecords are the totals over the whole run (scraped
	// before the first request and after the last): their difference, times R, is what the
	// primary sent beyond the recent reads — PrimaryHistoricalBytes, which must be 0.
	PrimaryReadRecords     float64 `json:"primary_read_records"`
	RecentRecords          int64   `json:"recent_records"`
	PrimaryHistoricalBytes float64 `json:"primary_historical_bytes"`
	// Timeline is records per second by second: appends, recent reads, historical reads.
	Timeline []TimelinePoint `json:"timeline"`
	// FirstErrors are the first errors of each kind of request, if any failed.
	FirstErrors FirstErrors `json:"first_errors"`
	// cdf samples (milliseconds) for the chart.
	cdfs    []cdfSeries
	Seconds float64 `json:"seconds"`
}

// TimelinePoint is one second of the run.
type TimelinePoint struct {
	Second     int     `json:"second"`
	Appends    float64 `json:"append_records"`
	Recent     float64 `json:"recent_read_records"`
	Historical float64 `json:"historical_records"`
}

type cdfSeries struct {
	name string
	ms   []float64 // sorted
}

// opStats collects one kind of operation's latencies by phase.
type opStats struct {
	mu   sync.Mutex
	lat  [2][]time.Duration
	errs [2]int
	recs [2]int64
	// first is the first error.
	first string
}

func (s *opStats) add(phase int, d time.Duration, recs int64, err error) {
	if phase < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs[phase]++
		if s.first == "" {
			s.first = err.Error()
		}
		return
	}
	s.lat[phase] = append(s.lat[phase], d)
	s.recs[phase] += recs
}

// timeline counts records per second.
type timeline struct {
	start time.Time
	secs  []atomic.Int64 // 3 per second: appends, recent, historical
}

func (t *timeline) add(kind int, at time.Time, recs int64) {
	s := int(at.Sub(t.start) / time.Second)
	if s >= 0 && 3*s+kind < len(t.secs) {
		t.secs[3*s+kind].Add(recs)
	}
}

// RunHistorical runs Fig. 5.12: two `meridian server` processes — the streams' primary and
// the reader — sharing an object store (VersityGW as its own process, or a shared
// directory). Phase 1: open-loop appends and recent reads at the primary, chunks uploaded;
// phase 2: the same plus historical range reads at the reader, on and off. It reports each
// phase's latencies and rates, and what the primary served.
func RunHistorical(ctx context.Context, o HistoricalOptions) (rep *HistoricalReport, err error) {
	if o, err = o.withDefaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	rep = &HistoricalReport{Started: began.UTC(), Cores: runtime.NumCPU(), LoadBefore: LoadAvg(), GoVersion: runtime.Version(), Options: o}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "meridian-bench-historical-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if !o.Keep {
		defer os.RemoveAll(dir)
	}
	cpus := func(c string) string {
		if o.Pin && runtime.NumCPU() >= 2 {
			return c
		}
		return ""
	}
	if o.Pin {
		if runtime.NumCPU() < 2 {
			o.logf("bench stream historical: --pin needs 2 CPUs; not pinned")
		} else {
			restore, err := pinSelf("0")
			if err != nil {
				return nil, err
			}
			defer restore()
		}
	}

	// The object store.
	streams := map[string]any{"local_capacity": "16GiB", "cache": o.Cache, "max_batch": "1MiB"}
	var env []string
	var gw *versitygw.Gateway
	useS3 := o.ObjectStore == HistoricalStoreS3
	gwBin := versityGWBinary(o.VersityGW)
	if o.ObjectStore == HistoricalStoreAuto {
		useS3 = gwBin != ""
	}
	if useS3 {
		h := peer.Host{Name: "versitygw", Addr: HistoricalS3Addr}
		if c := cpus("1"); c != "" {
			h.Command = func(ctx context.Context, name string, args ...string) *exec.Cmd {
				return exec.CommandContext(ctx, "taskset", append([]string{"-c", c, name}, args...)...)
			}
		}
		gw, err = versitygw.Start(ctx, versitygw.Options{Binary: gwBin, Dir: filepath.Join(dir, "versitygw"), Host: h, Log: o.Log})
		if err != nil {
			return nil, err
		}
		defer gw.Stop()
		const bucket = "meridian"
		cfg := gw.Config(bucket)
		st, err := s3store.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if err := st.CreateBucket(ctx); err != nil {
			return nil, fmt.Errorf("streambench: create bucket: %w", err)
		}
		streams["object_store"] = "s3"
		streams["s3"] = map[string]any{"endpoint": gw.Endpoint(), "region": cfg.Region, "bucket": bucket, "path_style": true,
			"access_key_id_env": "MERIDIAN_BENCH_S3_ACCESS_KEY", "secret_access_key_env": "MERIDIAN_BENCH_S3_SECRET_KEY"}
		env = []string{"MERIDIAN_BENCH_S3_ACCESS_KEY=" + cfg.AccessKeyID, "MERIDIAN_BENCH_S3_SECRET_KEY=" + cfg.SecretAccessKey}
		rep.ObjectStore = fmt.Sprintf("VersityGW %s as its own process (pid %d) at %s, through object_store: s3", versitygw.DefaultVersion, gw.Pid(), gw.Endpoint())
	} else {
		shared := filepath.Join(dir, "objects")
		streams["object_store"] = "dir"
		streams["dir"] = shared
		rep.ObjectStore = "object_store: dir on a directory both servers share (" + shared + ")"
	}
	o.logf("bench stream historical: object store: %s", rep.ObjectStore)

	srv, err := startServers(ctx, serverOptions{Dir: filepath.Join(dir, "servers"), Exe: o.Exe, Addrs: []string{HistoricalPrimaryAddr, HistoricalReaderAddr},
		Streams: streams, Env: env, CPUs: []string{cpus("0"), cpus("1")}, Log: o.Log})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Stop()) }()
	primary, reader := srv.Nodes[0], srv.Nodes[1]
	rep.Primary, rep.Reader = primary.Name+" at "+primary.Listen, reader.Name+" at "+reader.Listen

	// The streams, each with its appender, its recent reader (at the primary) and a client
	// of the reader node for the historical reads.
	pc, err := client.Dial(primary.Listen)
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	rc, err := client.Dial(reader.Listen)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	names := make([]string, o.Streams)
	apps := make([]*client.Appender, o.Streams)
	acked := make([]atomic.Int64, o.Streams)
	defer func() {
		for _, a := range apps {
			if a != nil {
				a.Close()
			}
		}
	}()
	for i := range names {
		names[i] = fmt.Sprintf("hist-%d", i)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		info, err := pc.CreateStream(cctx, &client.StreamSpec{Keyspace: BenchKeyspace, Name: names[i], RecordBytes: RecordBytes, ValueOffset: 8, Ack: o.Ack})
		if err == nil {
			info, err = rc.DescribeStream(cctx, BenchKeyspace, names[i])
		}
		if err == nil && info.Primary != primary.Name {
			err = fmt.Errorf("stream %s has primary %s, want %s", names[i], info.Primary, primary.Name)
		}
		if err == nil {
			apps[i], err = pc.NewAppender(cctx, BenchKeyspace, names[i])
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("streambench: stream %s: %w", names[i], err)
		}
	}
	o.logf("bench stream historical: %d streams, primary %s (pid %d), reader %s (pid %d)", o.Streams, rep.Primary, primary.Pid(), rep.Reader, reader.Pid())

	total := o.Phase1 + o.Phase2
	start := time.Now().Add(200 * time.Millisecond)
	tl := &timeline{start: start, secs: make([]atomic.Int64, 3*(int(total/time.Second)+2))}
	phase2At := start.Add(o.Phase1)
	end := start.Add(total)
	phaseOf := func(t time.Time) int {
		switch {
		case t.Before(start.Add(o.Warmup)):
			return -1
		case t.Before(phase2At):
			return 0
		case t.Before(end):
			return 1
		}
		return -1
	}
	var appends, recent, hist opStats
	var recentTotal atomic.Int64
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()

	// Scrapes at the start, at the phases' ends and at the end.
	type snap struct {
		p, r               metricSamples
		pu, ru, gu         procSnap
		tcp                tcpSnapshot
		recent, histRecs   int64
		at                 time.Time
		hasObjectStoreSnap bool
	}
	var gwPid int
	if gw != nil {
		gwPid = gw.Pid()
	}
	take := func() (snap, error) {
		p, err := scrapeMetrics(ctx, primary.Metr)
		if err != nil {
			return snap{}, err
		}
		r, err := scrapeMetrics(ctx, reader.Metr)
		if err != nil {
			return snap{}, err
		}
		s := snap{p: p, r: r, pu: readProc(primary.Pid()), ru: readProc(reader.Pid()), tcp: readTCP(ctx), recent: recentTotal.Load(), at: time.Now()}
		if gwPid > 0 {
			s.gu, s.hasObjectStoreSnap = readProc(gwPid), true
		}
		return s, nil
	}
	s0, err := take()
	if err != nil {
		return nil, err
	}

	var wg sync.WaitGroup
	// Appenders: open loop, evenly spaced, latency from the scheduled time.
	perStream := o.AppendRate / float64(o.Streams)
	for i := range apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gen := newGenerator(o.Batch)
			pace(mctx, start, end, time.Duration(float64(time.Second)*float64(o.Batch)/perStream), func(sched time.Time) {
				_, err := apps[i].Append(mctx, gen.fill())
				now := time.Now()
				if err == nil {
					acked[i].Store(gen.next)
					tl.add(0, now, int64(o.Batch))
				}
				if mctx.Err() == nil {
					appends.add(phaseOf(sched), now.Sub(sched), int64(o.Batch), err)
				}
			})
		}()
	}
	// Recent readers: 1000 records among the last 50,000 of a stream, at the primary.
	if o.ReadRate > 0 {
		perReader := o.ReadRate / float64(o.Streams)
		for i := range apps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(o.Seed, uint64(i)+100))
				const window = 50_000
				pace(mctx, start, end, time.Duration(float64(time.Second)*1000/perReader), func(sched time.Time) {
					n := acked[i].Load()
					if n < 1000 {
						return
					}
					lo := max(n-window, 0)
					from := lo + rng.Int64N(n-1000-lo+1)
					it := pc.ReadRange(mctx, BenchKeyspace, names[i], from, from+999)
					var got int64
					for it.Next() {
						got++
					}
					err := it.Err()
					now := time.Now()
					recentTotal.Add(got)
					tl.add(1, now, got)
					if mctx.Err() == nil {
						recent.add(phaseOf(sched), now.Sub(sched), got, err)
					}
				})
			}()
		}
	}
	// Historical readers, from phase 2 on, at the reader node: a process of their own (the
	// thesis's historical clients run on the non-primary node), pinned with the reader.
	var histRes *HistClientResult
	var histErr error
	histDone := make(chan struct{})
	// The clients' process answers, then stays (its connections with it, for the last
	// scrape of the sockets) until finish.
	var finish func() error
	defer func() {
		<-histDone // the clients end by the run's end
		if finish != nil {
			finish()
		}
	}()
	go func() {
		defer close(histDone)
		if o.HistReaders < 0 {
			histRes, finish = &HistClientResult{}, func() error { return nil }
			return
		}
		// ctx, not mctx: the process outlives the load, until finish.
		histRes, finish, histErr = runHistClientProcess(ctx, o, filepath.Join(dir, "hist-clients.log"), HistClientOptions{
			Endpoint: reader.Listen, Streams: names, Readers: o.HistReaders, Records: o.HistRecords,
			Start: start.UnixNano(), Phase2: phase2At.UnixNano(), End: end.UnixNano(), On: o.On, Off: o.Off, Seed: o.Seed}, cpus("1"))
	}()

	// The phase boundary's scrape, and the uploaded records then.
	var s1 snap
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(phase2At)):
	}
	if s1, err = take(); err != nil {
		mcancel()
		wg.Wait()
		return nil, err
	}
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		it := rc.HistoricalRecords(cctx, BenchKeyspace, n, 0, 1)
		for it.Next() {
		}
		rep.UploadedAtPhase2 += it.Uploaded()
		cancel()
	}
	o.logf("bench stream historical: phase 2 (historical reads at %s); %d records uploaded", reader.Name, rep.UploadedAtPhase2)
	wg.Wait()
	<-histDone
	mcancel()
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	if histErr != nil {
		return nil, fmt.Errorf("streambench: historical clients: %w", histErr)
	}
	for _, r := range histRes.Reads {
		t0 := time.Unix(0, r.At)
		var err error
		if r.Error != "" {
			err = errors.New(r.Error)
		}
		hist.add(phaseOf(t0), time.Duration(r.Us)*time.Microsecond, r.Records, err)
	}
	for s, n := range histRes.PerSecond {
		if 3*s+2 < len(tl.secs) {
			tl.secs[3*s+2].Add(n)
		}
	}
	s2, err := take()
	if ferr := finish(); err == nil && ferr != nil {
		err = fmt.Errorf("streambench: historical clients: %w", ferr)
	}
	finish = nil
	if err != nil {
		return nil, err
	}
	histRecs := func(ph int) int64 { return hist.recs[ph] }
	mk := func(name string, ph int, a, b snap, secs float64) Phase {
		p := Phase{Name: name, Seconds: secs,
			Appends: latencyOf(appends.lat[ph], appends.errs[ph]), RecentReads: latencyOf(recent.lat[ph], recent.errs[ph]), Historical: latencyOf(hist.lat[ph], hist.errs[ph]),
			AppendRecPerSec: float64(appends.recs[ph]) / secs, RecentRecPerSec: float64(recent.recs[ph]) / secs,
			HistoricalRecPerSec: float64(histRecs(ph)) / secs, HistoricalMBPerSec: float64(histRecs(ph)) * RecordBytes / secs / 1e6,
			PrimaryReadRecords: b.p.Sum("meridian_stream_read_records_total") - a.p.Sum("meridian_stream_read_records_total"),
			RecentRecords:      b.recent - a.recent, HistoricalRecords: histRecs(ph),
			PrimaryHistorical: b.p.Sum("meridian_stream_historical_reads_total") - a.p.Sum("meridian_stream_historical_reads_total"),
			ReaderHistorical:  b.r.Sum("meridian_stream_historical_reads_total") - a.r.Sum("meridian_stream_historical_reads_total"),
			Uploads:           b.p.Sum("meridian_stream_store_uploads_total") - a.p.Sum("meridian_stream_store_uploads_total"),
		}
		el := b.at.Sub(a.at).Seconds()
		p.Primary, p.Reader = b.pu.sub(a.pu, el), b.ru.sub(a.ru, el)
		if a.tcp != nil && b.tcp != nil {
			gwAddr := ""
			if gw != nil {
				gwAddr = strings.TrimPrefix(gw.Endpoint(), "http://")
			}
			pt := tcpDelta(a.tcp, b.tcp, primary.Pid(), tcpRoles{clientListen: primary.Listen, peerAddrs: []string{primary.PeerListen, reader.PeerListen, reader.Listen}, objectStore: gwAddr})
			rt := tcpDelta(a.tcp, b.tcp, reader.Pid(), tcpRoles{clientListen: reader.Listen, peerAddrs: []string{reader.PeerListen, primary.PeerListen, primary.Listen}, objectStore: gwAddr})
			p.PrimaryTCP, p.ReaderTCP = &pt, &rt
		}
		if a.hasObjectStoreSnap {
			u := b.gu.sub(a.gu, el)
			p.ObjectStore = &u
		}
		return p
	}
	rep.Phases = []Phase{
		mk("1: appends and recent reads", 0, s0, s1, (o.Phase1 - o.Warmup).Seconds()),
		mk("2: … and historical reads at the reader", 1, s1, s2, o.Phase2.Seconds()),
	}
	if el := s2.at.Sub(s1.at).Seconds(); el > 0 {
		rep.Phases[1].HistClientCores = histRes.CPUSeconds / el
	}
	rep.FirstErrors = FirstErrors{Append: appends.first, Recent: recent.first, Historical: hist.first}
	rep.PrimaryReadRecords = s2.p.Sum("meridian_stream_read_records_total") - s0.p.Sum("meridian_stream_read_records_total")
	rep.RecentRecords = s2.recent - s0.recent
	rep.PrimaryHistoricalBytes = (rep.PrimaryReadRecords - float64(rep.RecentRecords)) * RecordBytes
	for s := 0; 3*s+2 < len(tl.secs) && s < int(total/time.Second); s++ {
		rep.Timeline = append(rep.Timeline, TimelinePoint{Second: s, Appends: float64(tl.secs[3*s].Load()), Recent: float64(tl.secs[3*s+1].Load()), Historical: float64(tl.secs[3*s+2].Load())})
	}
	cdf := func(name string, d []time.Duration) {
		if len(d) == 0 {
			return
		}
		ms := make([]float64, len(d))
		for i, v := range d {
			ms[i] = float64(v.Microseconds()) / 1000
		}
		slices.Sort(ms)
		rep.cdfs = append(rep.cdfs, cdfSeries{name: name, ms: ms})
	}
	cdf("appends, phase 1", appends.lat[0])
	cdf("appends, phase 2", appends.lat[1])
	cdf("recent reads, phase 1", recent.lat[0])
	cdf("recent reads, phase 2", recent.lat[1])
	cdf("historical reads (reader)", hist.lat[1])
	rep.LoadAfter = LoadAvg()
	rep.Seconds = time.Since(began).Seconds()
	return rep, nil
}

// pace calls op at start, start+every, … until end (one at a time: a late call delays the
// next ones, whose latencies then include the wait, as an open-loop client's would).
func pace(ctx context.Context, start, end time.Time, every time.Duration, op func(sched time.Time)) {
	if every <= 0 {
		every = time.Microsecond
	}
	for k := int64(0); ; k++ {
		sched := start.Add(time.Duration(k) * every)
		if !sched.Before(end) || ctx.Err() != nil {
			return
		}
		if d := time.Until(sched); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		op(sched)
	}
}

// procSnap is a process's CPU time and /proc/<pid>/io's rchar and wchar.
type procSnap struct {
	pid          int
	cpu          time.Duration
	rchar, wchar int64
}

func readProc(pid int) procSnap {
	s := procSnap{pid: pid}
	s.cpu, _ = kafka.ProcessCPU(pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch k {
			case "rchar":
				s.rchar = n
			case "wchar":
				s.wchar = n
			}
		}
	}
	return s
}

func (s procSnap) sub(a procSnap, secs float64) ProcessUse {
	u := ProcessUse{Pid: s.pid, CPUSeconds: (s.cpu - a.cpu).Seconds(), WriteMB: float64(s.wchar-a.wchar) / 1e6, ReadMB: float64(s.rchar-a.rchar) / 1e6}
	if secs > 0 {
		u.Cores = u.CPUSeconds / secs
	}
	return u
}

// versityGWBinary is the VersityGW binary at hand ("": none; it is not built here).
func versityGWBinary(bin string) string {
	if bin == "" {
		bin = os.Getenv(versitygw.EnvBinary)
	}
	if bin == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		bin = filepath.Join(home, ".cache", "meridian", "versitygw-"+versitygw.DefaultVersion, "bin", "versitygw")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return ""
	}
	return bin
}

// pinSelf pins every thread of this process to cpus with taskset; restore unpins it.
func pinSelf(cpus string) (restore func(), err error) {
	pid := strconv.Itoa(os.Getpid())
	if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, pid).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("streambench: taskset: %v: %s", err, out)
	}
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	return func() { exec.Command("taskset", "-a", "-p", "-c", all, pid).Run() }, nil
}

// HistClientOptions are the historical clients' (a process of their own, `meridian bench
// stream historical-clients`).
type HistClientOptions struct {
	// Endpoint is the reader node's client address; Streams the streams' names.
	Endpoint string   `json:"endpoint"`
	Streams  []string `json:"streams"`
	// Readers are the clients; Records the records per range read.
	Readers int `json:"readers"`
	Records int `json:"records"`
	// Start, Phase2 and End are Unix nanoseconds: the run's start (the timeline's origin),
	// when the reads begin, and when they end.
	Start  int64 `json:"start"`
	Phase2 int64 `json:"phase2"`
	End    int64 `json:"end"`
	// On and Off are the on/off pattern.
	On  time.Duration `json:"on"`
	Off time.Duration `json:"off"`
	// Seed seeds the read positions.
	Seed uint64 `json:"seed"`
}

// HistRead is one historical range read.
type HistRead struct {
	// At is its start (Unix nanoseconds), Us its time to the last record.
	At      int64  `json:"at"`
	Us      int64  `json:"us"`
	Records int64  `json:"records"`
	Error   string `json:"error,omitempty"`
}

// HistClientResult is what the historical clients did.
type HistClientResult struct {
	Reads []HistRead `json:"reads"`
	// PerSecond are the records received in each second from Start.
	PerSecond []int64 `json:"per_second"`
	// CPUSeconds is the clients' process's CPU time (getrusage), start-up included.
	CPUSeconds float64 `json:"cpu_seconds"`
}

// RunHistClients runs the historical clients: each, from Phase2 to End, reads back to back
// for On then idles for Off; a read is a range of Records records (at most half of the
// uploaded ones) from a random section of the lower half of a random stream's uploaded
// records, by time range (a record's timestamp is its number), at the reader node. The
// returned close ends the clients' connection (kept open until then, so that the benchmark can
// read its byte counts).
func RunHistClients(ctx context.Context, o HistClientOptions) (_ *HistClientResult, close func() error, _ error) {
	if o.Endpoint == "" || len(o.Streams) == 0 || o.Readers <= 0 || o.Records <= 0 || o.End <= o.Phase2 || o.On <= 0 || o.Off < 0 {
		return nil, nil, errors.New("streambench: historical clients: want an endpoint, streams, readers, records, a phase and an on time")
	}
	rc, err := client.Dial(o.Endpoint)
	if err != nil {
		return nil, nil, err
	}
	start, phase2At, end := time.Unix(0, o.Start), time.Unix(0, o.Phase2), time.Unix(0, o.End)
	res := &HistClientResult{}
	per := make([]atomic.Int64, int(end.Sub(start)/time.Second)+2)
	addAt := func(at time.Time, n int64) {
		if s := int(at.Sub(start) / time.Second); s >= 0 && s < len(per) {
			per[s].Add(n)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k := 0; k < o.Readers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(k)+1000))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(phase2At)):
			}
			uploaded := make([]uint64, len(o.Streams))
			for cycle := phase2At; time.Now().Before(end) && ctx.Err() == nil; cycle = cycle.Add(o.On + o.Off) {
				for time.Now().Before(cycle.Add(o.On)) && time.Now().Before(end) && ctx.Err() == nil {
					i := rng.IntN(len(o.Streams))
					if uploaded[i] == 0 {
						it := rc.HistoricalRecords(ctx, BenchKeyspace, o.Streams[i], 0, 1)
						for it.Next() {
						}
						if it.Err() != nil || it.Uploaded() == 0 {
							time.Sleep(100 * time.Millisecond) // nothing uploaded yet
							continue
						}
						uploaded[i] = it.Uploaded()
					}
					from, n := histRange(rng, uploaded[i], uint64(o.Records))
					t0 := time.Now()
					it := rc.HistoricalRange(ctx, BenchKeyspace, o.Streams[i], int64(from), int64(from+n-1))
					var got, unreported int64
					for it.Next() {
						got++
						if unreported++; unreported == 10_000 {
							addAt(time.Now(), unreported)
							unreported = 0
						}
					}
					now := time.Now()
					addAt(now, unreported)
					r := HistRead{At: t0.UnixNano(), Us: now.Sub(t0).Microseconds(), Records: got}
					if err := it.Err(); err != nil {
						r.Error = err.Error()
					}
					if u := it.Uploaded(); u > uploaded[i] {
						uploaded[i] = u
					}
					if ctx.Err() == nil {
						mu.Lock()
						res.Reads = append(res.Reads, r)
						mu.Unlock()
					}
				}
				if d := time.Until(cycle.Add(o.On + o.Off)); d > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(d):
					}
				}
			}
		}()
	}
	wg.Wait()
	for i := range per {
		res.PerSecond = append(res.PerSecond, per[i].Load())
	}
	res.CPUSeconds = loadgen.SelfCPU().Seconds()
	if err := ctx.Err(); err != nil {
		rc.Close()
		return nil, nil, err
	}
	return res, rc.Close, nil
}

// histRange is a historical read's first record and count: up to want records from a
// random section of the lower half of the uploaded ones.
func histRange(rng *rand.Rand, uploaded, want uint64) (from, n uint64) {
	half := uploaded / 2
	n = min(want, max(half, 1))
	if half > n {
		from = rng.Uint64N(half - n + 1)
	}
	return from, n
}

// HistClientsCommand is the hidden subcommand that runs the historical clients in a process
// of their own: it reads HistClientOptions as JSON from its argument and writes a
// HistClientResult as JSON to stdout.
const HistClientsCommand = "historical-clients"

// runHistClientProcess runs the historical clients as `<exe> bench stream
// historical-clients <options JSON>`, pinned to cpus if set.
func runHistClientProcess(ctx context.Context, o HistoricalOptions, logPath string, co HistClientOptions, cpus string) (*HistClientResult, func() error, error) {
	exe := o.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, nil, err
		}
	}
	arg, err := json.Marshal(co)
	if err != nil {
		return nil, nil, err
	}
	args := []string{"bench", "stream", HistClientsCommand, string(arg)}
	name := exe
	if cpus != "" {
		args = append([]string{"-c", cpus, exe}, args...)
		name = "taskset"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err == nil {
		var stdout io.ReadCloser
		if stdout, err = cmd.StdoutPipe(); err == nil {
			if err = cmd.Start(); err == nil {
				// The process writes its result, then waits for its standard input to close.
				var res HistClientResult
				derr := json.NewDecoder(stdout).Decode(&res)
				finish := func() error {
					stdin.Close()
					err := cmd.Wait()
					logf.Close()
					if err != nil {
						return fmt.Errorf("%v (log %s: %s)", err, logPath, strings.TrimSpace(peer.TailFile(logPath, 5)))
					}
					return nil
				}
				if derr != nil {
					return nil, nil, errors.Join(fmt.Errorf("their output: %w", derr), finish())
				}
				return &res, finish, nil
			}
		}
	}
	logf.Close()
	return nil, nil, err
}
