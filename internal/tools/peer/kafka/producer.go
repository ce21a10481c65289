package kafka

// The producer driver: the Kafka side of the Kawkab ingest comparison (thesis Fig. 5.10),
// appending batches of B records of R bytes to a one-partition topic.
//
// The client is github.com/twmb/franz-go (kgo, with kadm for topics): pure Go (no cgo or
// librdkafka, so it builds like the rest of the repository), maintained, the most complete
// Go Kafka client (idempotent and transactional producing, every protocol version up to
// Kafka 4), and it exposes the producer's batching controls one by one —
// ProducerBatchMaxBytes, ProducerLinger, MaxBufferedRecords, ManualFlushing, RequiredAcks,
// ProducerBatchCompression — which "producer batching matched" needs.
//
// One batch is one produce request, as one Kawkab append request carries one batch: each
// producer is its own client with manual flushing, buffers its B records (MaxBufferedRecords
// = B, ProducerBatchMaxBytes above their encoded size, no compression, no linger) and flushes
// them, which sends them as one record batch in one produce request and returns when it is
// acknowledged. The batch's latency is that round trip (open loop: from the batch's
// scheduled time). Several producers keep several batches in flight. A hook counts the
// produce requests written, so a run shows that batches were not split.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Acks is the producer's acknowledgement level.
type Acks int

const (
	// AcksAll (acks=all, -1): the leader acknowledges once every in-sync replica has the
	// batch. The default, as for Kafka's own producer since 3.0, and idempotent.
	AcksAll Acks = iota
	// AcksLeader (acks=1): the leader acknowledges once it has appended the batch. Not
	// idempotent (Kafka requires acks=all for that).
	AcksLeader
)

func (a Acks) String() string {
	if a == AcksLeader {
		return "1"
	}
	return "all"
}

// ParseAcks reads "all" (or "-1") and "1" (or "leader").
func ParseAcks(s string) (Acks, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "all", "-1", "":
		return AcksAll, nil
	case "1", "leader":
		return AcksLeader, nil
	}
	return 0, fmt.Errorf("kafka: acks %q: want all or 1", s)
}

// Record layout: the first 8 bytes are the batch's send time (int64 nanoseconds since the
// epoch, little-endian, as a Kawkab record's timestamp), the next 8 the record's sequence
// number in the run; the rest is zero.
const (
	// MinRecordBytes is the smallest record the driver writes: a timestamp and a sequence.
	MinRecordBytes = 16
	// defaultMaxMessageBytes is Kafka's message.max.bytes default, the largest record batch a
	// topic takes unless its max.message.bytes says otherwise.
	defaultMaxMessageBytes = 1048588
	// recordBatchHeaderBytes is a v2 record batch's header: base offset (8), length (4),
	// partition leader epoch (4), magic (1), CRC (4), attributes (2), last offset delta (4),
	// first and max timestamps (8+8), producer ID (8) and epoch (2), base sequence (4),
	// record count (4).
	recordBatchHeaderBytes = 61
)

// varintLen is the length of v as a zig-zag varint, Kafka's record encoding.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// RecordBatchBytes is the encoded size of a v2 record batch of b uncompressed records of r
// bytes with no key, no headers and one timestamp, as the driver sends them: what the
// broker's message.max.bytes must admit.
func RecordBatchBytes(b, r int) int {
	total := recordBatchHeaderBytes
	for i := 0; i < b; i++ {
		// attributes, timestamp delta 0, offset delta i, key length -1, value length r,
		// the value, header count 0.
		body := 1 + 1 + varintLen(int64(i)) + 1 + varintLen(int64(r)) + r + 1
		total += varintLen(int64(body)) + body
	}
	return total
}

// LoadOptions describe one producer run.
type LoadOptions struct {
	// Client are the options that reach the cluster (Cluster.ClientOpts); the driver adds
	// its producer settings.
	Client []kgo.Opt
	// Topic is the topic produced to (partition 0); see CreateTopic.
	Topic string
	// RecordBytes is R (default 16, at least MinRecordBytes).
	RecordBytes int
	// BatchRecords is B, the records of one batch and one produce request.
	BatchRecords int
	// Records bounds the run: it stops issuing batches once Records records were issued
	// (rounded up to whole batches). Required.
	Records int64
	// Duration bounds the run's time too (default 1 minute): no batch starts after it.
	Duration time.Duration
	// InFlight is the number of producers, each with at most one batch in flight (default
	// 4 closed-loop, 64 open-loop).
	InFlight int
	// Acks is the acknowledgement level (default AcksAll).
	Acks Acks
	// Rate, if positive, makes the run open-loop: batches are scheduled at Rate records per
	// second (Rate/B batches per second) whether or not earlier ones are done, and a batch's
	// latency counts from its scheduled time, so queueing behind busy producers counts.
	// Zero: closed loop, each producer sends its next batch when the previous one is
	// acknowledged.
	Rate float64
	// Poisson spaces open-loop batches exponentially (Poisson arrivals, as the thesis's
	// clients) instead of evenly.
	Poisson bool
	// Warmup excludes the batches acknowledged before it ends from the latency, the
	// throughput and the CPU time: connection set-up, the producer ID and the JVM's JIT.
	Warmup time.Duration
	// ServerPids are the broker processes whose CPU time is measured (Cluster.Pids).
	ServerPids []int
	// Seed seeds the Poisson schedule (0: 1).
	Seed uint64
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// LoadResult is what a run measured, after its warm-up.
type LoadResult struct {
	Mode         string // "closed" or "open"
	Acks         string
	BatchRecords int
	RecordBytes  int
	InFlight     int
	// Batches and Records were acknowledged in the measured window; Errors batches failed.
	Batches, Records, Errors int64
	// TotalRecords were acknowledged in the whole run, warm-up included: what the topic holds.
	TotalRecords int64
	// ProduceRequests is the number of produce requests written in the whole run: one per
	// batch unless the client split batches or retried.
	ProduceRequests, TotalBatches int64
	// Seconds is the measured window, from the warm-up's end to the last acknowledgement.
	Seconds       float64
	RecordsPerSec float64
	MBPerSec      float64 // records' bytes (R each), 10^6 bytes per second
	// TargetRecordsPerSec is the open-loop rate (0 closed-loop).
	TargetRecordsPerSec float64
	// Batch latency in milliseconds (closed loop: send to acknowledgement; open loop: from
	// the scheduled time).
	P50Ms, P90Ms, P99Ms, MaxMs, MeanMs float64
	// ServerCPUSeconds is the brokers' CPU time (user and system) in the measured window;
	// ServerCPUPerRecordUs divides it by Records, ServerCores by Seconds.
	ServerCPUSeconds     float64
	ServerCPUPerRecordUs float64
	ServerCores          float64
	// ClientCPUSeconds is this process's CPU time in the window (the producers, the
	// franz-go clients and anything else it runs): on a machine whose cores the client and
	// the broker share, what the client takes the broker cannot have.
	ClientCPUSeconds     float64
	ClientCPUPerRecordUs float64
	// Stopped says what ended the run: "records", "duration" or "context".
	Stopped string
}

// String is the result on one line.
func (r LoadResult) String() string {
	s := fmt.Sprintf("%s-loop B=%d R=%d acks=%s inflight=%d: %d records in %.2fs = %.0f rec/s (%.1f MB/s), batch p50 %.3f ms p99 %.3f ms max %.3f ms",
		r.Mode, r.BatchRecords, r.RecordBytes, r.Acks, r.InFlight, r.Records, r.Seconds, r.RecordsPerSec, r.MBPerSec,
		r.P50Ms, r.P99Ms, r.MaxMs)
	if r.TargetRecordsPerSec > 0 {
		s += fmt.Sprintf(", target %.0f rec/s", r.TargetRecordsPerSec)
	}
	if r.ServerCPUSeconds > 0 {
		s += fmt.Sprintf(", broker CPU %.3f µs/record (%.2f cores)", r.ServerCPUPerRecordUs, r.ServerCores)
	}
	if r.ClientCPUSeconds > 0 {
		s += fmt.Sprintf(", client CPU %.3f µs/record", r.ClientCPUPerRecordUs)
	}
	s += fmt.Sprintf(", %d produce requests for %d batches, %d errors, stopped by %s", r.ProduceRequests, r.TotalBatches, r.Errors, r.Stopped)
	return s
}

// withDefaults checks lo and fills in its defaults.
func (lo LoadOptions) withDefaults() (LoadOptions, error) {
	if lo.Topic == "" {
		return lo, errors.New("kafka: no topic")
	}
	if lo.RecordBytes == 0 {
		lo.RecordBytes = MinRecordBytes
	}
	if lo.RecordBytes < MinRecordBytes {
		return lo, fmt.Errorf("kafka: records of %d bytes: at least %d (a timestamp and a sequence number)", lo.RecordBytes, MinRecordBytes)
	}
	if lo.BatchRecords <= 0 {
		return lo, fmt.Errorf("kafka: batch of %d records", lo.BatchRecords)
	}
	if lo.Records <= 0 {
		return lo, fmt.Errorf("kafka: a run needs a positive record bound, not %d", lo.Records)
	}
	if lo.Duration < 0 || lo.Warmup < 0 || lo.InFlight < 0 || lo.Rate < 0 || math.IsNaN(lo.Rate) || math.IsInf(lo.Rate, 0) {
		return lo, fmt.Errorf("kafka: negative or invalid duration, warm-up, in-flight count or rate")
	}
	if lo.Duration == 0 {
		lo.Duration = time.Minute
	}
	if lo.Warmup >= lo.Duration {
		return lo, fmt.Errorf("kafka: warm-up %v is not shorter than the run's bound %v", lo.Warmup, lo.Duration)
	}
	if lo.InFlight == 0 {
		lo.InFlight = 4
		if lo.Rate > 0 {
			lo.InFlight = 64
		}
	}
	if lo.Seed == 0 {
		lo.Seed = 1
	}
	return lo, nil
}

// producerOpts are one producer's franz-go settings: one batch, one request.
func (lo LoadOptions) producerOpts(hooks ...kgo.Hook) []kgo.Opt {
	// The client's bound on a batch's size (before compression) must admit B records. Until
	// its first produce request franz-go does not know the broker's produce version and
	// sizes records as the old message format does (34 bytes of overhead each, against
	// about 8 in a v2 batch), so the bound allows 64 bytes per record: with less, every
	// producer's first batch of 30,000 records was split in two requests. The broker's own
	// bound is the topic's max.message.bytes (CreateTopic raises it when needed).
	maxBatch := int64(recordBatchHeaderBytes) + int64(lo.BatchRecords)*int64(lo.RecordBytes+64) + 1024
	maxBatch = max(maxBatch, defaultMaxMessageBytes)
	maxBatch = min(maxBatch, 1<<30)
	opts := append([]kgo.Opt{}, lo.Client...)
	opts = append(opts,
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ManualFlushing(),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(lo.BatchRecords),
		kgo.ProducerBatchMaxBytes(int32(maxBatch)),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		// A batch that cannot be delivered fails the run's batch, not the run.
		kgo.RecordDeliveryTimeout(30*time.Second),
		kgo.WithHooks(hooks...),
	)
	if lo.Acks == AcksLeader {
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	} else {
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	return opts
}

// produceCounter counts produce requests written (franz-go's HookBrokerWrite).
type produceCounter struct{ n atomic.Int64 }

func (p *produceCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.Produce.Int16() && err == nil {
		p.n.Add(1)
	}
}

// histogram bounds: batch latencies from 1 µs to 2 minutes, 3 significant digits.
const (
	histMinUs = 1
	histMaxUs = int64(2 * time.Minute / time.Microsecond)
)

// producer is one client with its reusable batch.
type producer struct {
	cl      *kgo.Client
	recs    []kgo.Record
	ptrs    []*kgo.Record
	buf     []byte
	hist    *hdrhistogram.Histogram
	failed  atomic.Int64 // records that failed in the current batch
	lastErr atomic.Value // error
	promise func(*kgo.Record, error)
	// partitioned counts the current batch's records that are in their partition's buffer
	// (franz-go's HookProduceRecordPartitioned).
	partitioned atomic.Int64
}

// OnProduceRecordPartitioned is called once a record is in its partition's buffer: at once
// when the topic's metadata is known, after the metadata request for the first batch.
func (p *producer) OnProduceRecordPartitioned(*kgo.Record, int32) { p.partitioned.Add(1) }

func newProducer(lo LoadOptions, counter kgo.Hook) (*producer, error) {
	p := &producer{}
	cl, err := kgo.NewClient(lo.producerOpts(counter, p)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: producer: %w", err)
	}
	p.cl, p.recs, p.ptrs = cl, make([]kgo.Record, lo.BatchRecords), make([]*kgo.Record, lo.BatchRecords)
	p.buf, p.hist = make([]byte, lo.BatchRecords*lo.RecordBytes), hdrhistogram.New(histMinUs, histMaxUs, 3)
	for i := range p.recs {
		p.recs[i] = kgo.Record{Topic: lo.Topic, Partition: 0, Value: p.buf[i*lo.RecordBytes : (i+1)*lo.RecordBytes]}
		p.ptrs[i] = &p.recs[i]
	}
	p.promise = func(_ *kgo.Record, err error) {
		if err != nil {
			p.failed.Add(1)
			p.lastErr.Store(err)
		}
	}
	return p, nil
}

// send produces the batch whose first record has sequence number first and waits for its
// acknowledgement.
func (p *producer) send(ctx context.Context, first int64) error {
	now := time.Now()
	for i := range p.recs {
		r := &p.recs[i]
		// Reset what the client filled in when it last sent the record.
		*r = kgo.Record{Topic: r.Topic, Partition: 0, Value: r.Value, Timestamp: now}
		binary.LittleEndian.PutUint64(r.Value[0:8], uint64(now.UnixNano()))
		binary.LittleEndian.PutUint64(r.Value[8:16], uint64(first+int64(i)))
	}
	p.failed.Store(0)
	p.partitioned.Store(0)
	for _, r := range p.ptrs {
		p.cl.Produce(ctx, r, p.promise)
	}
	// Flush only once the whole batch is in the partition's buffer. Before the topic's
	// metadata is loaded (the first batch), records wait aside and are moved in one by one
	// when it arrives; a flush meanwhile would send them in several requests.
	for n := int64(len(p.ptrs)); p.partitioned.Load()+p.failed.Load() < n; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Microsecond):
		}
	}
	if err := p.cl.Flush(ctx); err != nil {
		return err
	}
	if n := p.failed.Load(); n > 0 {
		err, _ := p.lastErr.Load().(error)
		return fmt.Errorf("%d of %d records failed: %v", n, len(p.recs), err)
	}
	return nil
}

// Produce runs one producer load against the topic and measures it. The run is bounded by
// lo.Records and lo.Duration (and ctx); a batch that fails is counted, not fatal, but a
// run in which every batch failed is an error.
func Produce(ctx context.Context, lo LoadOptions) (LoadResult, error) {
	lo, err := lo.withDefaults()
	if err != nil {
		return LoadResult{}, err
	}
	b := int64(lo.BatchRecords)
	totalBatches := (lo.Records + b - 1) / b
	mode := "closed"
	if lo.Rate > 0 {
		mode = "open"
	}
	res := LoadResult{Mode: mode, Acks: lo.Acks.String(), BatchRecords: lo.BatchRecords, RecordBytes: lo.RecordBytes,
		InFlight: lo.InFlight, TargetRecordsPerSec: lo.Rate}

	counter := &produceCounter{}
	producers := make([]*producer, lo.InFlight)
	defer func() {
		for _, p := range producers {
			if p != nil {
				p.cl.Close()
			}
		}
	}()
	for i := range producers {
		if producers[i], err = newProducer(lo, counter); err != nil {
			return res, err
		}
	}
	// Load the producer IDs (and the connections) before the clock starts.
	for _, p := range producers {
		if lo.Acks == AcksAll {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, _, err := p.cl.ProducerID(pctx)
			cancel()
			if err != nil {
				return res, fmt.Errorf("kafka: producer ID: %w", err)
			}
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, lo.Duration+2*time.Minute) // the last batches' grace
	defer cancel()
	start := time.Now()
	deadline := start.Add(lo.Duration)
	warmEnd := start.Add(lo.Warmup)

	// The measured window opens when the warm-up ends: CPU time is read then.
	var (
		cpuStart, clientStart time.Duration
		cpuErr                error
		cpuRead               = make(chan struct{}) // closed once cpuStart is read
	)
	readCPU := func() (time.Duration, error) { return ProcessesCPU(lo.ServerPids) }
	cpuTimer := time.AfterFunc(lo.Warmup, func() {
		cpuStart, cpuErr = readCPU()
		clientStart = selfCPU()
		close(cpuRead)
	})
	defer cpuTimer.Stop()

	var (
		issued           atomic.Int64 // batches handed to producers
		measuredBatches  atomic.Int64
		measuredRecords  atomic.Int64
		allRecords       atomic.Int64
		allBatches       atomic.Int64
		failedBatches    atomic.Int64
		lastAck          atomic.Int64 // UnixNano of the last measured acknowledgement
		stopReason       atomic.Value
		errMu            sync.Mutex
		firstErr         error
		wg               sync.WaitGroup
		durationExceeded = func() bool { return !time.Now().Before(deadline) }
	)
	stopReason.Store("records")
	complete := func(p *producer, k int64, sched time.Time, err error) {
		allBatches.Add(1)
		done := time.Now()
		if err != nil {
			failedBatches.Add(1)
			errMu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("batch %d: %w", k, err)
			}
			errMu.Unlock()
			return
		}
		allRecords.Add(b)
		if done.Before(warmEnd) {
			return
		}
		measuredBatches.Add(1)
		measuredRecords.Add(b)
		for {
			prev := lastAck.Load()
			if done.UnixNano() <= prev || lastAck.CompareAndSwap(prev, done.UnixNano()) {
				break
			}
		}
		us := done.Sub(sched).Microseconds()
		_ = p.hist.RecordValue(min(max(us, histMinUs), histMaxUs))
	}

	if lo.Rate <= 0 {
		for _, p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if runCtx.Err() != nil {
						stopReason.Store("context")
						return
					}
					if durationExceeded() {
						stopReason.Store("duration")
						return
					}
					k := issued.Add(1) - 1
					if k >= totalBatches {
						return
					}
					sched := time.Now()
					complete(p, k, sched, p.send(runCtx, k*b))
				}
			}()
		}
	} else {
		type job struct {
			k     int64
			sched time.Time
		}
		jobs := make(chan job, lo.InFlight)
		for _, p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range jobs {
					complete(p, j.k, j.sched, p.send(runCtx, j.k*b))
				}
			}()
		}
		rng := rand.New(rand.NewPCG(lo.Seed, 0x6b61666b61)) // "kafka"
		meanGap := float64(b) / lo.Rate                     // seconds between batches
		next := start
	schedule:
		for k := int64(0); k < totalBatches; k++ {
			if !next.Before(deadline) {
				stopReason.Store("duration")
				break
			}
			if d := time.Until(next); d > 0 {
				select {
				case <-time.After(d):
				case <-runCtx.Done():
					stopReason.Store("context")
					break schedule
				}
			}
			select {
			case jobs <- job{k, next}:
			case <-runCtx.Done():
				stopReason.Store("context")
				break schedule
			}
			issued.Add(1)
			gap := meanGap
			if lo.Poisson {
				gap = rng.ExpFloat64() * meanGap
			}
			next = next.Add(time.Duration(gap * float64(time.Second)))
		}
		close(jobs)
	}
	wg.Wait()
	cpuEnd, endErr := readCPU()
	clientEnd := selfCPU()
	cpuStarted := !cpuTimer.Stop() // false: the warm-up did not end before the run did
	if cpuStarted {
		<-cpuRead
	}
	end := time.Unix(0, lastAck.Load())

	res.TotalBatches = allBatches.Load()
	res.TotalRecords = allRecords.Load()
	res.Errors = failedBatches.Load()
	res.ProduceRequests = counter.n.Load()
	res.Batches = measuredBatches.Load()
	res.Records = measuredRecords.Load()
	res.Stopped, _ = stopReason.Load().(string)
	if res.TotalBatches > 0 && res.Errors == res.TotalBatches {
		return res, fmt.Errorf("kafka: every batch failed: %w", firstErr)
	}
	if res.Records == 0 {
		return res, fmt.Errorf("kafka: no batch was acknowledged after the warm-up of %v (%d in all)", lo.Warmup, res.TotalBatches)
	}
	hist := hdrhistogram.New(histMinUs, histMaxUs, 3)
	for _, p := range producers {
		hist.Merge(p.hist)
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	res.P50Ms, res.P90Ms, res.P99Ms = ms(hist.ValueAtQuantile(50)), ms(hist.ValueAtQuantile(90)), ms(hist.ValueAtQuantile(99))
	res.MaxMs, res.MeanMs = ms(hist.Max()), hist.Mean()/1000
	res.Seconds = end.Sub(warmEnd).Seconds()
	if res.Seconds > 0 {
		res.RecordsPerSec = float64(res.Records) / res.Seconds
		res.MBPerSec = res.RecordsPerSec * float64(lo.RecordBytes) / 1e6
	}
	if cpuStarted {
		res.ClientCPUSeconds = (clientEnd - clientStart).Seconds()
		res.ClientCPUPerRecordUs = res.ClientCPUSeconds * 1e6 / float64(res.Records)
	}
	if len(lo.ServerPids) > 0 && cpuStarted {
		if err := errors.Join(cpuErr, endErr); err != nil {
			return res, err
		}
		// The window's end is read after the last acknowledgement, a few ms late at most.
		res.ServerCPUSeconds = (cpuEnd - cpuStart).Seconds()
		res.ServerCPUPerRecordUs = res.ServerCPUSeconds * 1e6 / float64(res.Records)
		if res.Seconds > 0 {
			res.ServerCores = res.ServerCPUSeconds / res.Seconds
		}
	}
	if lo.Log != nil {
		fmt.Fprintf(lo.Log, "kafka: %s\n", res)
	}
	return res, nil
}

// PeakAndLoaded measures Fig. 5.10's two numbers for one batch size: the peak throughput
// (lo as a closed-loop run) and then an open-loop run at fraction (0.7 in the thesis) of that
// peak, with the same bounds, whose median batch latency is the figure's. The open-loop run
// has loadedInFlight producers (0: as many as the closed-loop run; more concurrent requests
// cost the broker more CPU per record here, and a batch that finds every producer busy
// waits, its wait counted). lo.Rate is ignored.
func PeakAndLoaded(ctx context.Context, lo LoadOptions, fraction float64, loadedInFlight int) (peak, loaded LoadResult, err error) {
	if fraction <= 0 || fraction > 1 {
		return peak, loaded, fmt.Errorf("kafka: load fraction %v outside (0, 1]", fraction)
	}
	lo.Rate = 0
	if peak, err = Produce(ctx, lo); err != nil {
		return peak, loaded, err
	}
	lo.Rate = fraction * peak.RecordsPerSec
	if loadedInFlight > 0 {
		lo.InFlight = loadedInFlight
	} else {
		lo.InFlight = peak.InFlight
	}
	loaded, err = Produce(ctx, lo)
	return peak, loaded, err
}

// TopicOptions describe a topic the driver produces to.
type TopicOptions struct {
	// Partitions and ReplicationFactor default to 1.
	Partitions        int32
	ReplicationFactor int16
	// BatchBytes, if positive, is the largest record batch the topic must take (see
	// RecordBatchBytes): max.message.bytes is raised above Kafka's default when needed.
	// The brokers' replica.fetch.max.bytes (Options.MaxMessageBytes) must follow for
	// replication factors above 1.
	BatchBytes int
	// Configs are further topic configurations.
	Configs map[string]string
}

// CreateTopic creates topic and waits until every partition has a leader. A topic that
// exists is an error: every run starts from an empty one.
func CreateTopic(ctx context.Context, client []kgo.Opt, topic string, to TopicOptions) error {
	if to.Partitions == 0 {
		to.Partitions = 1
	}
	if to.ReplicationFactor == 0 {
		to.ReplicationFactor = 1
	}
	cl, err := kgo.NewClient(client...)
	if err != nil {
		return fmt.Errorf("kafka: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	configs := map[string]*string{}
	for k, v := range to.Configs {
		configs[k] = kadm.StringPtr(v)
	}
	if to.BatchBytes > defaultMaxMessageBytes {
		if _, ok := configs["max.message.bytes"]; !ok {
			configs["max.message.bytes"] = kadm.StringPtr(fmt.Sprint(to.BatchBytes + 1024))
		}
	}
	if _, err := adm.CreateTopic(ctx, to.Partitions, to.ReplicationFactor, configs, topic); err != nil {
		return fmt.Errorf("kafka: create topic %s: %w", topic, err)
	}
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if d, ok := td[topic]; ok && d.Err == nil && len(d.Partitions) == int(to.Partitions) && allLed(d.Partitions) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: topic %s has no leaders yet: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func allLed(ps kadm.PartitionDetails) bool {
	for _, p := range ps {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// ReadStats is what ReadBack found in a topic.
type ReadStats struct {
	Records    int64 // records read
	Distinct   int64 // distinct sequence numbers among them
	Malformed  int64 // records shorter than MinRecordBytes
	MaxSeq     int64 // the largest sequence number (-1 if none)
	EndOffsets int64 // the partitions' end offsets, summed
}

// ReadBack consumes topic from its start to its end offsets (listed first) and checks the
// driver's records: their count and distinct sequence numbers. maxSeq bounds the sequence
// numbers tracked (the run's record bound).
func ReadBack(ctx context.Context, client []kgo.Opt, topic string, maxSeq int64) (ReadStats, error) {
	st := ReadStats{MaxSeq: -1}
	acl, err := kgo.NewClient(client...)
	if err != nil {
		return st, fmt.Errorf("kafka: client: %w", err)
	}
	ends, err := kadm.NewClient(acl).ListEndOffsets(ctx, topic)
	acl.Close()
	if err != nil {
		return st, fmt.Errorf("kafka: end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return st, fmt.Errorf("kafka: end offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		want[o.Partition] = o.Offset
		st.EndOffsets += o.Offset
	})
	if st.EndOffsets == 0 {
		return st, nil
	}
	opts := append([]kgo.Opt{}, client...)
	opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return st, fmt.Errorf("kafka: consumer: %w", err)
	}
	defer cl.Close()
	seen := make([]uint64, (maxSeq+63)/64+1)
	next := map[int32]int64{}
	remaining := 0 // partitions not yet read to their end offset
	for _, end := range want {
		if end > 0 {
			remaining++
		}
	}
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("kafka: reading %s back: %w (%d of %d records read)", topic, err, st.Records, st.EndOffsets)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("kafka: fetch %s/%d: %w", t, p, err) })
		if ferr != nil {
			return st, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			st.Records++
			if len(r.Value) < MinRecordBytes {
				st.Malformed++
			} else {
				seq := int64(binary.LittleEndian.Uint64(r.Value[8:16]))
				st.MaxSeq = max(st.MaxSeq, seq)
				if seq >= 0 && seq <= maxSeq {
					w, bit := seq/64, uint64(1)<<(seq%64)
					if seen[w]&bit == 0 {
						seen[w] |= bit
						st.Distinct++
					}
				}
			}
			if r.Offset+1 > next[r.Partition] {
				before := next[r.Partition]
				next[r.Partition] = r.Offset + 1
				if end := want[r.Partition]; before < end && next[r.Partition] >= end {
					remaining--
				}
			}
		})
	}
	return st, nil
}
