// Package streambench is `meridian bench stream`: thesis Fig. 5.10 (ingest throughput, and
// the median append latency at 70% of the peak, against the batch size) for Meridian's
// stream engine beside Apache Kafka 4.4 and InfluxDB 1.6 in one run, and Fig. 5.11 (recent
// reads under a mix of writes and reads) with the summary index's aggregates against a scan.
// docs/streams-bench.md says how to run it and what each column means.
package streambench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"meridian/internal/tools/peer"
	"meridian/internal/tools/peer/influxdb"
	"meridian/internal/tools/peer/kafka"
	"meridian/internal/tools/streambench/loadgen"
	"meridian/internal/topology"
)

// Systems a row can be.
const (
	SystemMeridian = "meridian"
	SystemKafka    = "kafka"
	SystemInfluxDB = "influxdb"
)

// DefaultBatches are Fig. 5.10's batch sizes.
var DefaultBatches = []int{100, 1000, 10000, 30000}

// RecordBytes is Fig. 5.10's record size: a timestamp and one int64.
const RecordBytes = 16

// Options describe one `bench stream` run.
type Options struct {
	// Batches are the batch sizes (records per append); default DefaultBatches.
	Batches []int
	// Acks are Meridian's acknowledgement levels, one row each (default local, memory).
	Acks []string
	// Target is Meridian's target kind (default InProcess) when Targets is empty.
	Target string
	// Targets are Meridian's target kinds, rows each, side by side in one run: InProcess
	// (the engine in this process) and GRPC (a `meridian server` process on loopback, the Go
	// client's appenders in this process). Default: Target.
	Targets []string
	// Exe is the meridian binary the gRPC target's server runs (default: this executable).
	Exe string
	// Appenders is the number of Meridian appenders, each with a stream of its own
	// (default 4); KafkaInFlight the Kafka producers (default 4); InfluxWriters the
	// InfluxDB writers, each with a series of its own (default 4).
	Appenders, KafkaInFlight, InfluxWriters int
	// Duration bounds each run (a peak or a loaded run: two per point); Warmup is excluded
	// from its measurements. Defaults 10 s and 2 s.
	Duration, Warmup time.Duration
	// MaxRecords bounds each run's records (default 500 M).
	MaxRecords int64
	// Fraction is the loaded run's share of the peak (default 0.7).
	Fraction float64
	// Poisson spaces the loaded runs' batches exponentially, as the thesis's clients.
	Poisson bool
	// Skip names systems not run: "kafka", "influxdb", "meridian".
	Skip []string
	// KafkaFsync makes Kafka flush every append before acknowledging it
	// (log.flush.interval.messages=1), like Meridian's local level.
	KafkaFsync bool
	// KafkaLibDir is Kafka's jar directory (default: $MERIDIAN_KAFKA_LIB, else
	// scripts/fetch-kafka.sh's cache).
	KafkaLibDir string
	// KafkaAddr is the loopback address Kafka binds (default 127.0.0.61).
	KafkaAddr string
	// Dir is the run's scratch directory (default: a new one under the system's temporary
	// directory, removed at the end); Keep keeps it.
	Dir  string
	Keep bool
	// Log receives progress lines.
	Log io.Writer `json:"-"`
}

func (o Options) withDefaults() (Options, error) {
	if len(o.Batches) == 0 {
		o.Batches = DefaultBatches
	}
	for _, b := range o.Batches {
		if b <= 0 || b*RecordBytes > 64<<20 {
			return o, fmt.Errorf("streambench: batch size %d: want 1 to %d records", b, (64<<20)/RecordBytes)
		}
	}
	if len(o.Acks) == 0 {
		o.Acks = []string{"local", "memory"}
	}
	if o.Target == "" {
		o.Target = InProcess
	}
	if len(o.Targets) == 0 {
		o.Targets = []string{o.Target}
	}
	for _, t := range o.Targets {
		if _, err := Lookup(t); err != nil {
			return o, err
		}
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.Appenders, 4)
	def(&o.KafkaInFlight, 4)
	def(&o.InfluxWriters, 4)
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 2 * time.Second
	}
	if o.Warmup >= o.Duration {
		return o, fmt.Errorf("streambench: warm-up %v is not shorter than a run (%v)", o.Warmup, o.Duration)
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 500_000_000
	}
	if o.Fraction == 0 {
		o.Fraction = 0.7
	}
	if o.Fraction <= 0 || o.Fraction > 1 {
		return o, fmt.Errorf("streambench: load fraction %v outside (0, 1]", o.Fraction)
	}
	for _, s := range o.Skip {
		if s != SystemKafka && s != SystemInfluxDB && s != SystemMeridian {
			return o, fmt.Errorf("streambench: --skip-peers %q: want kafka, influxdb or meridian", s)
		}
	}
	if o.KafkaAddr == "" {
		o.KafkaAddr = "127.0.0.61"
	}
	return o, nil
}

func (o Options) skipped(system string) bool { return slices.Contains(o.Skip, system) }

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Row is one system at one batch size: its peak and its loaded run.
type Row struct {
	System string `json:"system"`
	// Target is a Meridian row's target kind (inproc, grpc).
	Target string `json:"target,omitempty"`
	// Ack is the acknowledgement: Meridian's level, Kafka's acks (and fsync), InfluxDB's
	// WAL fsync.
	Ack    string         `json:"ack"`
	Batch  int            `json:"batch"`
	Peak   loadgen.Result `json:"peak"`
	Loaded loadgen.Result `json:"loaded"`
	// PeakFsyncs and LoadedFsyncs are a Meridian row's fsyncs in each run (targets that
	// count them: in process), warm-up included.
	PeakFsyncs   *FsyncStats `json:"peak_fsyncs,omitempty"`
	LoadedFsyncs *FsyncStats `json:"loaded_fsyncs,omitempty"`
	// PerCore is the peak divided by the machine's cores (Report.Cores).
	PerCore float64 `json:"records_per_sec_per_core"`
	// VsKafka and VsInfluxDB are a Meridian row's peak over the peer's at the same batch
	// size (0: no peer row).
	VsKafka    float64 `json:"vs_kafka,omitempty"`
	VsInfluxDB float64 `json:"vs_influxdb,omitempty"`
	// Error is why the row has no numbers, if it has none.
	Error string `json:"error,omitempty"`
}

// Report is a `bench stream` run.
type Report struct {
	Started time.Time `json:"started"`
	// Cores is the machine's CPU count (runtime.NumCPU), the divisor of PerCore.
	Cores int `json:"cores"`
	// LoadBefore and LoadAfter are /proc/loadavg at the start and the end: the machine is
	// shared, and its load says how far to trust the numbers.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	GoVersion  string `json:"go_version"`
	// Versions are the peers' versions.
	KafkaVersion    string  `json:"kafka_version,omitempty"`
	InfluxDBVersion string  `json:"influxdb_version,omitempty"`
	Options         Options `json:"options"`
	Rows            []Row   `json:"rows"`
	Seconds         float64 `json:"seconds"`
}

// LoadAvg is /proc/loadavg's first three fields ("?" where it cannot be read).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Run runs Fig. 5.10: Meridian at each acknowledgement level, then Kafka, then InfluxDB, each
// at every batch size (the peers are started once, when their turn comes, and stopped after
// it, so that an idle JVM or influxd does not share the cores with another system's run).
// A peer that cannot start is reported in its rows' Error, not fatal.
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	rep := &Report{Started: began.UTC(), Cores: runtime.NumCPU(), LoadBefore: LoadAvg(), GoVersion: runtime.Version(), Options: o}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "meridian-bench-stream-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if !o.Keep {
		defer os.RemoveAll(dir)
	}
	o.logf("bench stream: batches %v, %v per run (%v warm-up), %d cores, load %s, scratch %s", o.Batches, o.Duration, o.Warmup, rep.Cores, rep.LoadBefore, dir)

	if !o.skipped(SystemMeridian) {
		for _, kind := range o.Targets {
			if err := runTarget(ctx, o, kind, dir, rep); err != nil {
				return rep, err
			}
		}
	}
	if !o.skipped(SystemKafka) {
		rows, version := runKafka(ctx, o, filepath.Join(dir, "kafka"))
		rep.KafkaVersion = version
		rep.Rows = append(rep.Rows, rows...)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	if !o.skipped(SystemInfluxDB) {
		rows, version := runInfluxDB(ctx, o, filepath.Join(dir, "influxdb"))
		rep.InfluxDBVersion = version
		rep.Rows = append(rep.Rows, rows...)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	rep.finish()
	rep.LoadAfter = LoadAvg()
	rep.Seconds = time.Since(began).Seconds()
	return rep, nil
}

// finish fills the per-core throughputs and Meridian's ratios to the peers.
func (rep *Report) finish() {
	peerPeak := func(system string, b int) float64 {
		// The peers' rows have no target.
		for _, r := range rep.Rows {
			if r.System == system && r.Batch == b && r.Error == "" {
				return r.Peak.RecordsPerSec
			}
		}
		return 0
	}
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if r.Error != "" {
			continue
		}
		if rep.Cores > 0 {
			r.PerCore = r.Peak.RecordsPerSec / float64(rep.Cores)
		}
		if r.System != SystemMeridian {
			continue
		}
		if k := peerPeak(SystemKafka, r.Batch); k > 0 {
			r.VsKafka = r.Peak.RecordsPerSec / k
		}
		if f := peerPeak(SystemInfluxDB, r.Batch); f > 0 {
			r.VsInfluxDB = r.Peak.RecordsPerSec / f
		}
	}
}

// generator fills one appender's batches: record i of the stream has timestamp i and value
// i (int64 little-endian at 0 and 8), so timestamps never decrease across its batches.
type generator struct {
	next  int64
	batch []byte
}

func newGenerator(b int) *generator { return &generator{batch: make([]byte, b*RecordBytes)} }

// fill lays out the next batch.
func (g *generator) fill() []byte {
	buf := g.batch
	for off := 0; off < len(buf); off += RecordBytes {
		binary.LittleEndian.PutUint64(buf[off:], uint64(g.next))
		binary.LittleEndian.PutUint64(buf[off+8:], uint64(g.next))
		g.next++
	}
	return buf
}

// runTarget runs every acknowledgement level and batch size on one target kind, in a session
// of its own (the gRPC target's server process is started for them and stopped after them,
// so that it does not share the cores with another system's run). Only a cancelled context
// is returned as an error; a failed session or row is reported in the rows.
func runTarget(ctx context.Context, o Options, kind, dir string, rep *Report) error {
	sess, err := openSession(ctx, kind, sessionOptions{Dir: dir, Exe: o.Exe, Log: o.Log})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		o.logf("bench stream: target %s did not start: %v", kind, err)
	}
	for _, ack := range o.Acks {
		for _, b := range o.Batches {
			row := Row{System: SystemMeridian, Target: kind, Ack: ack, Batch: b}
			rerr := err
			if sess != nil {
				rerr = runMeridian(ctx, o, sess, kind, filepath.Join(dir, fmt.Sprintf("meridian-%s-%s-%d", kind, ack, b)), &row)
			}
			if rerr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				row.Error = rerr.Error()
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	if sess != nil {
		if err := sess.Close(); err != nil {
			o.logf("bench stream: target %s: %v", kind, err)
		}
	}
	return nil
}

// runMeridian measures one Meridian row: o.Appenders targets of the session's kind, each an
// appender with a stream of its own, in dir (removed afterwards); the peak, then the loaded
// run at o.Fraction of it, on the same streams.
func runMeridian(ctx context.Context, o Options, sess session, kind, dir string, row *Row) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := row.Batch
	targets := make([]Target, o.Appenders)
	gens := make([]*generator, o.Appenders)
	defer func() {
		for _, t := range targets {
			if t != nil {
				err = errors.Join(err, t.Close())
			}
		}
	}()
	for i := range targets {
		cfg := TargetConfig{Appender: i, Run: fmt.Sprintf("%s-%s-%d", kind, row.Ack, b), RecordBytes: RecordBytes, ValueOffset: 8, Ack: row.Ack, Dir: dir}
		if targets[i], err = sess.Open(ctx, cfg); err != nil {
			return fmt.Errorf("streambench: open target %d: %w", i, err)
		}
		gens[i] = newGenerator(b)
	}
	// fsyncs takes the targets' fsync counts since the last call, if they count them.
	fsyncs := func() *FsyncStats {
		var sum FsyncStats
		for _, t := range targets {
			c, ok := t.(FsyncCounter)
			if !ok {
				return nil
			}
			sum = sum.Add(c.TakeFsyncs())
		}
		return &sum
	}
	fsyncs() // creating the streams fsynced their directories
	send := func(ctx context.Context, w int, _ int64) error {
		return targets[w].Append(ctx, gens[w].fill())
	}
	lo := loadgen.Options{Workers: o.Appenders, BatchRecords: b, RecordBytes: RecordBytes, Records: o.MaxRecords,
		Duration: o.Duration, Warmup: o.Warmup, Poisson: o.Poisson, ServerPids: sess.ServerPids(), InProcess: len(sess.ServerPids()) == 0,
		Name: fmt.Sprintf("meridian %s ack=%s B=%d", kind, row.Ack, b), Log: o.Log}
	if row.Peak, err = loadgen.Run(ctx, lo, send); err != nil {
		return err
	}
	row.PeakFsyncs = fsyncs()
	lo.Rate = o.Fraction * row.Peak.RecordsPerSec
	if row.Loaded, err = loadgen.Run(ctx, lo, send); err != nil {
		return err
	}
	row.LoadedFsyncs = fsyncs()
	return nil
}

// localTopology is a one-region topology for peers on this machine.
func localTopology() *topology.Topology {
	return topology.Equidistant("local", []string{"local"}, 1, 0)
}

// runKafka starts one Kafka node, runs every batch size against a topic of its own, and
// stops it.
func runKafka(ctx context.Context, o Options, dir string) (rows []Row, version string) {
	ack := "all"
	if o.KafkaFsync {
		ack = "all+fsync"
	}
	fail := func(err error) []Row {
		for _, b := range o.Batches {
			rows = append(rows, Row{System: SystemKafka, Ack: ack, Batch: b, Error: err.Error()})
		}
		return rows
	}
	po := peer.Options{Hosts: []peer.Host{{Name: "kafka-1", Region: "local", Addr: o.KafkaAddr}}, Dir: dir, Topology: localTopology(), Log: o.Log}
	c, err := kafka.Start(ctx, po, kafka.Options{LibDir: o.KafkaLibDir, Fsync: o.KafkaFsync})
	if err != nil {
		o.logf("bench stream: Kafka did not start: %v", err)
		return fail(err), ""
	}
	defer func() {
		if err := c.Stop(); err != nil {
			o.logf("bench stream: %v", err)
		}
	}()
	client := c.ClientOpts("local")
	for _, b := range o.Batches {
		row := Row{System: SystemKafka, Ack: ack, Batch: b}
		topic := fmt.Sprintf("bench-%d", b)
		lo := kafka.LoadOptions{Client: client, Topic: topic, RecordBytes: RecordBytes, BatchRecords: b, Records: o.MaxRecords,
			Duration: o.Duration, InFlight: o.KafkaInFlight, Acks: kafka.AcksAll, Poisson: o.Poisson, Warmup: o.Warmup,
			ServerPids: c.Pids(), Log: o.Log}
		err := kafka.CreateTopic(ctx, client, topic, kafka.TopicOptions{BatchBytes: kafka.RecordBatchBytes(b, RecordBytes)})
		if err == nil {
			var p, l kafka.LoadResult
			p, l, err = kafka.PeakAndLoaded(ctx, lo, o.Fraction, 0)
			row.Peak, row.Loaded = fromKafka(p), fromKafka(l)
		}
		if err != nil {
			row.Error = err.Error()
		}
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return rows, "Apache Kafka " + c.Version()
}

// fromKafka is a Kafka producer result as the harness's.
func fromKafka(r kafka.LoadResult) loadgen.Result {
	return loadgen.Result{Mode: r.Mode, BatchRecords: r.BatchRecords, RecordBytes: r.RecordBytes, Workers: r.InFlight,
		Batches: r.Batches, Records: r.Records, Errors: r.Errors, TotalRecords: r.TotalRecords, Seconds: r.Seconds,
		RecordsPerSec: r.RecordsPerSec, MBPerSec: r.MBPerSec, TargetRecordsPerSec: r.TargetRecordsPerSec,
		P50Ms: r.P50Ms, P90Ms: r.P90Ms, P99Ms: r.P99Ms, MaxMs: r.MaxMs, MeanMs: r.MeanMs,
		ServerCPUSeconds: r.ServerCPUSeconds, ServerCPUPerRecordUs: r.ServerCPUPerRecordUs, ServerCores: r.ServerCores,
		ClientCPUSeconds: r.ClientCPUSeconds, ClientCPUPerRecordUs: r.ClientCPUPerRecordUs, Stopped: r.Stopped}
}

// runInfluxDB starts influxd, runs every batch size against a database of its own, and
// stops it.
func runInfluxDB(ctx context.Context, o Options, dir string) (rows []Row, version string) {
	const ack = "wal-fsync"
	fail := func(err error) []Row {
		for _, b := range o.Batches {
			rows = append(rows, Row{System: SystemInfluxDB, Ack: ack, Batch: b, Error: err.Error()})
		}
		return rows
	}
	s, err := influxdb.Start(ctx, influxdb.Options{Dir: dir, Log: o.Log})
	if err != nil {
		o.logf("bench stream: InfluxDB did not start: %v", err)
		return fail(err), ""
	}
	defer func() {
		if err := s.Stop(); err != nil {
			o.logf("bench stream: %v", err)
		}
	}()
	for _, b := range o.Batches {
		row := Row{System: SystemInfluxDB, Ack: ack, Batch: b}
		db := fmt.Sprintf("bench%d", b)
		err := s.CreateDatabase(ctx, db)
		if err == nil {
			lo := influxdb.LoadOptions{Database: db, Load: loadgen.Options{Workers: o.InfluxWriters, BatchRecords: b, RecordBytes: RecordBytes,
				Records: o.MaxRecords, Duration: o.Duration, Warmup: o.Warmup, Poisson: o.Poisson,
				Name: fmt.Sprintf("influxdb B=%d", b), Log: o.Log}}
			row.Peak, row.Loaded, err = influxdb.PeakAndLoaded(ctx, s, lo, o.Fraction)
		}
		if err != nil {
			row.Error = err.Error()
		}
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return rows, s.Version()
}
