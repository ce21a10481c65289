package streambench

// Fig. 5.11 (5.7.3): recent reads under a mix of writes and reads, and the summary index's
// aggregates against a scan (issue 20, "Beyond the paper").
//
// The engine does not time its index search, and keeps its index private: ReadRange returns
// only the number of index nodes it read. The harness therefore keeps, for every stream, a
// mirror of its index built through kawkab's public Index API from the same records, with
// the same geometry (the default: k = 3, 16 KiB blocks) and the engine's block layout
// (⌊16 KiB/R⌋ records a block, sealed when full), in a NodeStore that copies each block out
// on Get as a read from a file would; each read's range is searched again there and timed.
// That the mirror's search reads as many nodes as the engine's did is checked read by read
// (the "visits agree" column). What the mirror's time leaves out: the engine's pread of an
// index block other than the last (the last is in memory in both), a page-cache copy of
// 16 KiB, a few µs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"meridian/internal/kawkab"
	"meridian/internal/tools/streambench/loadgen"
)

// ReadsOptions describe a `bench stream reads` run.
type ReadsOptions struct {
	// WriteShares are the shares of writes in the request mix, one row each (default 1,
	// 0.8, 0.5, 0.2: Fig. 5.11's 100/80/50/20% writes).
	WriteShares []float64
	// Streams is the number of streams, each with a worker of its own that writes and reads
	// it (default 4).
	Streams int
	// Rate is the offered load in records per second, writes and reads together (default
	// 1 M: 1,000 requests a second), open loop with Poisson arrivals.
	Rate float64
	// RequestRecords is a write's batch and a read's length (default 1,000); Window the
	// recent records a read falls in (default 50,000).
	RequestRecords, Window int
	// Duration and Warmup as in Options (defaults 10 s and 2 s).
	Duration, Warmup time.Duration
	// Ack is the streams' level (default memory, the thesis's own).
	Ack string
	// AggregateRecords is the aggregate's range in records (default 1 M; negative: no
	// aggregates).
	AggregateRecords int64
	// Dir is the scratch directory (default a temporary one, removed).
	Dir string
	// Seed seeds the mix and the read offsets (0: 1).
	Seed uint64
	Log  io.Writer `json:"-"`
}

func (o ReadsOptions) withDefaults() (ReadsOptions, error) {
	if len(o.WriteShares) == 0 {
		o.WriteShares = []float64{1, 0.8, 0.5, 0.2}
	}
	for _, s := range o.WriteShares {
		if s < 0 || s > 1 || math.IsNaN(s) {
			return o, fmt.Errorf("streambench: write share %v outside [0, 1]", s)
		}
	}
	if o.Streams == 0 {
		o.Streams = 4
	}
	if o.Rate == 0 {
		o.Rate = 1_000_000
	}
	if o.RequestRecords == 0 {
		o.RequestRecords = 1000
	}
	if o.Window == 0 {
		o.Window = 50_000
	}
	if o.Streams < 0 || o.Rate < 0 || o.RequestRecords < 0 || o.Window < o.RequestRecords {
		return o, fmt.Errorf("streambench: reads: %d streams, rate %v, requests of %d records in a window of %d: want positive numbers and a window of at least a request",
			o.Streams, o.Rate, o.RequestRecords, o.Window)
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 2 * time.Second
	}
	if o.Warmup >= o.Duration {
		return o, fmt.Errorf("streambench: warm-up %v is not shorter than a run (%v)", o.Warmup, o.Duration)
	}
	if o.Ack == "" {
		o.Ack = "memory"
	}
	if _, err := kawkab.ParseAckLevel(o.Ack); err != nil {
		return o, err
	}
	if o.AggregateRecords == 0 {
		o.AggregateRecords = 1_000_000
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o, nil
}

func (o ReadsOptions) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// ReadsRow is one write share's run.
type ReadsRow struct {
	WriteShare float64 `json:"write_share"`
	// Offered and Achieved are records per second (a request is RequestRecords records).
	OfferedRecordsPerSec  float64 `json:"offered_records_per_sec"`
	AchievedRecordsPerSec float64 `json:"achieved_records_per_sec"`
	Writes                int64   `json:"writes"`
	Reads                 int64   `json:"reads"`
	Errors                int64   `json:"errors"`
	FirstError            string  `json:"first_error,omitempty"`
	// Latencies from the request's scheduled time (open loop), milliseconds.
	WriteP50Ms float64 `json:"write_p50_ms"`
	WriteP99Ms float64 `json:"write_p99_ms"`
	ReadP50Ms  float64 `json:"read_p50_ms"`
	ReadP99Ms  float64 `json:"read_p99_ms"`
	// ReadServiceUs is the mean time of ReadRange alone (no queueing), µs.
	ReadServiceUs float64 `json:"read_service_us"`
	// IndexNodesMean and IndexNodesMax are the index blocks a read visited (the engine's
	// RangeResult.IndexNodes); IndexNodes counts reads by visits.
	IndexNodesMean float64       `json:"index_nodes_mean"`
	IndexNodesMax  int           `json:"index_nodes_max"`
	IndexNodes     map[int]int64 `json:"index_nodes"`
	SearchUs       float64       `json:"search_us"`    // mean search time on the mirror index
	SearchShare    float64       `json:"search_share"` // SearchUs / ReadServiceUs
	// Medians (a loaded machine's preemptions weigh on means): ReadRange alone, the search,
	// and the ratio of the two.
	ReadServiceP50Us float64 `json:"read_service_p50_us"`
	SearchP50Us      float64 `json:"search_p50_us"`
	SearchShareP50   float64 `json:"search_share_p50"`
	// SearchUsByNodes is the mean search time of the reads that visited 1, 2, ... index
	// blocks: a block other than the last is read and decoded (the last is in memory).
	SearchUsByNodes map[int]float64 `json:"search_us_by_nodes"`
	VisitsAgree     float64         `json:"visits_agree"` // share of reads where the mirror read as many nodes
	Result          *loadgen.Result `json:"all_requests,omitempty"`
}

// AggregateResult compares an aggregate answered from the summary index with a scan.
type AggregateResult struct {
	// StreamRecords are in the stream; Records in the range [From, To] (timestamps are
	// record numbers).
	StreamRecords int64 `json:"stream_records"`
	Records       int64 `json:"records"`
	From          int64 `json:"from"`
	To            int64 `json:"to"`
	// IndexNodes the search read (the engine's, from the scan's ReadRange; the mirror's
	// Aggregate read the same number: NodesAgree), EdgeBlocks the data blocks the aggregate
	// read at the range's edges.
	IndexNodes int  `json:"index_nodes"`
	EdgeBlocks int  `json:"edge_blocks"`
	NodesAgree bool `json:"nodes_agree"`
	// AggregateBytes = (IndexNodes + EdgeBlocks) × 16 KiB; ScanBytes = IndexNodes × 16 KiB +
	// the records ReadRange read × R. Ratio = ScanBytes / AggregateBytes.
	AggregateBytes int64   `json:"aggregate_bytes"`
	ScanBytes      int64   `json:"scan_bytes"`
	Ratio          float64 `json:"ratio"`
	// Median times of 5 repetitions, µs.
	AggregateUs float64 `json:"aggregate_us"`
	ScanUs      float64 `json:"scan_us"`
	// Summary is the answer; Match says the scan's sum, count, min and max equal it.
	Summary string `json:"summary"`
	Match   bool   `json:"match"`
}

// ReadsReport is a `bench stream reads` run.
type ReadsReport struct {
	Started    time.Time        `json:"started"`
	Cores      int              `json:"cores"`
	LoadBefore string           `json:"load_before"`
	LoadAfter  string           `json:"load_after"`
	Options    ReadsOptions     `json:"options"`
	Rows       []ReadsRow       `json:"rows"`
	Aggregate  *AggregateResult `json:"aggregate,omitempty"`
	Seconds    float64          `json:"seconds"`
}

// mirrorStore is a NodeStore that hands out a copy of a block, as a read from a file does.
type mirrorStore struct{ blocks map[uint64][]byte }

func (m *mirrorStore) Get(j uint64) ([]byte, error) {
	b, ok := m.blocks[j]
	if !ok {
		return nil, fmt.Errorf("streambench: mirror index block %d missing", j)
	}
	return append(make([]byte, 0, len(b)), b...), nil
}

func (m *mirrorStore) Put(j uint64, b []byte) error {
	m.blocks[j] = b
	return nil
}

// mirror is a stream's index rebuilt through the public API (see the file's comment).
type mirror struct {
	idx *kawkab.Index
	per uint64 // records per data block
	n   uint64 // records indexed
}

func newMirror(lay kawkab.Layout) (*mirror, error) {
	idx, err := kawkab.NewIndex(&mirrorStore{blocks: map[uint64][]byte{}}, kawkab.Config{})
	if err != nil {
		return nil, err
	}
	idx.KeepDecodedNodes(kawkab.DecodedNodeCache) // as the engine's index does

	return &mirror{idx: idx, per: uint64(lay.PerBlock)}, nil
}

// add indexes a batch of records laid out as the harness's generator lays them out.
func (m *mirror) add(batch []byte) error {
	for off := 0; off < len(batch); off += RecordBytes {
		b := m.n / m.per
		ts := kawkab.Timestamp(batch[off:])
		if err := m.idx.Append(b, ts, ts); err != nil { // the value equals the timestamp
			return err
		}
		m.n++
		if m.n%m.per == 0 {
			if err := m.idx.Seal(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// opIsWrite decides request k's kind from a hash of k: a write with probability share.
func opIsWrite(k int64, share float64, seed uint64) bool {
	if share >= 1 {
		return true
	}
	x := uint64(k) ^ seed*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/(1<<53) < share
}

// readWorker is one stream and its worker's statistics.
type readWorker struct {
	s     *kawkab.Stream
	m     *mirror
	gen   *generator
	rng   *rand.Rand
	ackAt time.Time
	// the last request's measurements, accounted by observe
	lastWrite               bool
	lastService, lastSearch time.Duration
	lastNodes               int
	lastAgree               bool
	writeHist, readHist     *hdrhistogram.Histogram
	serviceNs, searchNs     *hdrhistogram.Histogram // ReadRange alone and the mirror search, ns
	searchByNodes           map[int]time.Duration
	writes, reads           int64
	serviceSum, searchSum   time.Duration
	nodesSum                int64
	nodesMax                int
	nodes                   map[int]int64
	agree                   int64
}

func newReadWorker(dir string, id int, ack kawkab.AckLevel, b int, seed uint64) (*readWorker, error) {
	s, err := kawkab.CreateStream(dir, kawkab.StreamConfig{ID: uint64(id) + 1, RecordBytes: RecordBytes, ValueOffset: 8, Ack: ack}, kawkab.StreamOptions{})
	if err != nil {
		return nil, err
	}
	m, err := newMirror(s.Layout())
	if err != nil {
		s.Close()
		return nil, err
	}
	return &readWorker{s: s, m: m, gen: newGenerator(b), rng: rand.New(rand.NewPCG(seed, uint64(id))),
		writeHist: hdrhistogram.New(1, int64(2*time.Minute/time.Microsecond), 3),
		readHist:  hdrhistogram.New(1, int64(2*time.Minute/time.Microsecond), 3), nodes: map[int]int64{},
		serviceNs: hdrhistogram.New(1, int64(time.Minute), 3), searchNs: hdrhistogram.New(1, int64(time.Minute), 3),
		searchByNodes: map[int]time.Duration{}}, nil
}

func (w *readWorker) write() error {
	batch := w.gen.fill()
	_, err := w.s.Append(batch)
	w.ackAt = time.Now()
	if err != nil {
		return err
	}
	return w.m.add(batch)
}

// read reads n records at a random place among the last window records.
func (w *readWorker) read(n, window int) error {
	vis := w.s.Len()
	lo := uint64(0)
	if vis > uint64(window) {
		lo = vis - uint64(window)
	}
	if vis-lo < uint64(n) {
		return fmt.Errorf("streambench: stream %d has %d records, fewer than a read's %d", w.s.Config().ID, vis, n)
	}
	first := int64(lo + w.rng.Uint64N(vis-lo-uint64(n)+1))
	tl, th := first, first+int64(n)-1
	t0 := time.Now()
	res, err := w.s.ReadRange(tl, th)
	w.ackAt = time.Now()
	if err != nil {
		return err
	}
	if res.N != n || res.First != uint64(first) {
		return fmt.Errorf("streambench: read [%d, %d] returned %d records from %d, want %d from %d", tl, th, res.N, res.First, n, first)
	}
	w.lastService, w.lastNodes = w.ackAt.Sub(t0), res.IndexNodes
	t1 := time.Now()
	sr, err := w.m.idx.Search(tl, th)
	w.lastSearch = time.Since(t1)
	if err != nil {
		return err
	}
	w.lastAgree = sr.Visits() == res.IndexNodes
	return nil
}

func (w *readWorker) observe(sched time.Time, measured bool, err error) {
	if !measured || err != nil {
		return
	}
	us := min(max(w.ackAt.Sub(sched).Microseconds(), 1), int64(2*time.Minute/time.Microsecond))
	if w.lastWrite {
		w.writes++
		_ = w.writeHist.RecordValue(us)
		return
	}
	w.reads++
	_ = w.readHist.RecordValue(us)
	w.serviceSum += w.lastService
	w.searchSum += w.lastSearch
	w.nodesSum += int64(w.lastNodes)
	w.nodesMax = max(w.nodesMax, w.lastNodes)
	w.nodes[w.lastNodes]++
	w.searchByNodes[w.lastNodes] += w.lastSearch
	_ = w.serviceNs.RecordValue(max(w.lastService.Nanoseconds(), 1))
	_ = w.searchNs.RecordValue(max(w.lastSearch.Nanoseconds(), 1))
	if w.lastAgree {
		w.agree++
	}
}

// runShare is one write share's run on fresh streams.
func runShare(ctx context.Context, o ReadsOptions, dir string, share float64) (row ReadsRow, err error) {
	row = ReadsRow{WriteShare: share, OfferedRecordsPerSec: o.Rate, IndexNodes: map[int]int64{}, SearchUsByNodes: map[int]float64{}}
	ack, _ := kawkab.ParseAckLevel(o.Ack)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	ws := make([]*readWorker, o.Streams)
	defer func() {
		for _, w := range ws {
			if w != nil {
				err = errors.Join(err, w.s.Close())
			}
		}
	}()
	for i := range ws {
		if ws[i], err = newReadWorker(dir, i, ack, o.RequestRecords, o.Seed); err != nil {
			return row, err
		}
		// Fill the window first, so that every read finds its records.
		for range (o.Window + o.RequestRecords - 1) / o.RequestRecords {
			if err := ws[i].write(); err != nil {
				return row, err
			}
		}
	}
	send := func(_ context.Context, wi int, k int64) error {
		w := ws[wi]
		w.lastWrite = opIsWrite(k, share, o.Seed)
		if w.lastWrite {
			return w.write()
		}
		return w.read(o.RequestRecords, o.Window)
	}
	lo := loadgen.Options{Workers: o.Streams, BatchRecords: o.RequestRecords, RecordBytes: RecordBytes, Records: math.MaxInt64 / 2,
		Duration: o.Duration, Warmup: o.Warmup, Rate: o.Rate, Poisson: true, Seed: o.Seed, InProcess: true,
		Name: fmt.Sprintf("reads %.0f%% writes", 100*share), Log: o.Log,
		Observe: func(wi int, _ int64, sched time.Time, measured bool, err error) { ws[wi].observe(sched, measured, err) }}
	res, err := loadgen.Run(ctx, lo, send)
	if err != nil {
		return row, err
	}
	row.Result = &res
	row.AchievedRecordsPerSec = res.RecordsPerSec
	row.Errors, row.FirstError = res.Errors, res.FirstError
	wh := hdrhistogram.New(1, int64(2*time.Minute/time.Microsecond), 3)
	rh := hdrhistogram.New(1, int64(2*time.Minute/time.Microsecond), 3)
	var service, search time.Duration
	var nodes, agree int64
	serviceNs := hdrhistogram.New(1, int64(time.Minute), 3)
	searchNs := hdrhistogram.New(1, int64(time.Minute), 3)
	byNodes := map[int]time.Duration{}
	for _, w := range ws {
		serviceNs.Merge(w.serviceNs)
		searchNs.Merge(w.searchNs)
		for k, v := range w.searchByNodes {
			byNodes[k] += v
		}
		wh.Merge(w.writeHist)
		rh.Merge(w.readHist)
		row.Writes += w.writes
		row.Reads += w.reads
		service += w.serviceSum
		search += w.searchSum
		nodes += w.nodesSum
		agree += w.agree
		row.IndexNodesMax = max(row.IndexNodesMax, w.nodesMax)
		for k, v := range w.nodes {
			row.IndexNodes[k] += v
		}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	if row.Writes > 0 {
		row.WriteP50Ms, row.WriteP99Ms = ms(wh.ValueAtQuantile(50)), ms(wh.ValueAtQuantile(99))
	}
	if row.Reads > 0 {
		row.ReadP50Ms, row.ReadP99Ms = ms(rh.ValueAtQuantile(50)), ms(rh.ValueAtQuantile(99))
		row.ReadServiceUs = float64(service.Microseconds()) / float64(row.Reads)
		row.SearchUs = float64(search.Nanoseconds()) / 1000 / float64(row.Reads)
		if service > 0 {
			row.SearchShare = float64(search) / float64(service)
		}
		row.IndexNodesMean = float64(nodes) / float64(row.Reads)
		row.VisitsAgree = float64(agree) / float64(row.Reads)
		row.ReadServiceP50Us = float64(serviceNs.ValueAtQuantile(50)) / 1000
		row.SearchP50Us = float64(searchNs.ValueAtQuantile(50)) / 1000
		if row.ReadServiceP50Us > 0 {
			row.SearchShareP50 = row.SearchP50Us / row.ReadServiceP50Us
		}
		for k, d := range byNodes {
			if c := row.IndexNodes[k]; c > 0 {
				row.SearchUsByNodes[k] = float64(d.Nanoseconds()) / 1000 / float64(c)
			}
		}
	}
	return row, nil
}

// RunReads runs Fig. 5.11 at each write share, then the aggregates.
func RunReads(ctx context.Context, o ReadsOptions) (*ReadsReport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	rep := &ReadsReport{Started: began.UTC(), Cores: runtime.NumCPU(), LoadBefore: LoadAvg(), Options: o}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "meridian-bench-stream-reads-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	o.logf("bench stream reads: write shares %v, %d streams, %.0f records/s offered, %v per run, load %s", o.WriteShares, o.Streams, o.Rate, o.Duration, rep.LoadBefore)
	for _, share := range o.WriteShares {
		row, err := runShare(ctx, o, filepath.Join(dir, fmt.Sprintf("share-%.0f", 100*share)), share)
		if err != nil {
			return rep, fmt.Errorf("write share %v: %w", share, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	if o.AggregateRecords > 0 {
		agg, err := RunAggregate(filepath.Join(dir, "aggregate"), o.AggregateRecords, o.Log)
		if err != nil {
			return rep, fmt.Errorf("aggregates: %w", err)
		}
		rep.Aggregate = agg
	}
	rep.LoadAfter = LoadAvg()
	rep.Seconds = time.Since(began).Seconds()
	return rep, nil
}

// RunAggregate appends records+150,000 16-byte records to a stream in dir (timestamps and
// values are record numbers) and aggregates a range of records records starting off block
// boundaries, once from the summary index (Stream.Aggregate) and once by a scan (ReadRange
// and a sum), comparing the answers and the bytes each read.
func RunAggregate(dir string, records int64, log io.Writer) (*AggregateResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := kawkab.CreateStream(dir, kawkab.StreamConfig{ID: 1, RecordBytes: RecordBytes, ValueOffset: 8, Ack: kawkab.AckMemory}, kawkab.StreamOptions{})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	m, err := newMirror(s.Layout())
	if err != nil {
		return nil, err
	}
	total := records + 150_000
	gen := newGenerator(10_000)
	for int64(s.Len()) < total {
		batch := gen.fill()
		if _, err := s.Append(batch); err != nil {
			return nil, err
		}
		if err := m.add(batch); err != nil {
			return nil, err
		}
	}
	from := int64(50_000 + 123) // inside a data block: both edges straddle
	to := from + records - 1
	r := &AggregateResult{StreamRecords: int64(s.Len()), Records: records, From: from, To: to}

	const reps = 5
	var aggT, scanT []time.Duration
	var sum kawkab.Summary
	var scan kawkab.Summary
	var scanRes kawkab.RangeResult
	for range reps {
		t0 := time.Now()
		if sum, err = s.Aggregate(from, to); err != nil {
			return nil, err
		}
		aggT = append(aggT, time.Since(t0))
		t0 = time.Now()
		if scanRes, err = s.ReadRange(from, to); err != nil {
			return nil, err
		}
		if scanRes.More {
			return nil, fmt.Errorf("streambench: the scan of %d records stopped at the read limit", records)
		}
		scan = kawkab.Summary{}
		for off := 0; off < len(scanRes.Records); off += RecordBytes {
			scan.Add(s.Config().Value(scanRes.Records[off:]))
		}
		scanT = append(scanT, time.Since(t0))
	}
	g, err := m.idx.Aggregate(from, to)
	if err != nil {
		return nil, err
	}
	r.IndexNodes, r.EdgeBlocks = scanRes.IndexNodes, len(g.Edges)
	r.NodesAgree = len(g.Visited) == scanRes.IndexNodes
	lay := s.Layout()
	vis := s.Len()
	readFrom, readTo := lay.FirstRecord(g.First), min(lay.FirstRecord(g.Last+1), vis)
	r.AggregateBytes = int64(len(g.Visited)+len(g.Edges)) * kawkab.BlockBytes
	r.ScanBytes = int64(scanRes.IndexNodes)*kawkab.BlockBytes + int64(readTo-readFrom)*RecordBytes
	if r.AggregateBytes > 0 {
		r.Ratio = float64(r.ScanBytes) / float64(r.AggregateBytes)
	}
	r.AggregateUs, r.ScanUs = medianUs(aggT), medianUs(scanT)
	r.Summary = sum.String()
	r.Match = sum == scan && int64(sum.Count) == records
	if log != nil {
		fmt.Fprintf(log, "aggregate over %d records: %d index nodes + %d edge blocks = %d bytes vs scan %d bytes (%.0f×), %.0f µs vs %.0f µs, match %v\n",
			records, r.IndexNodes, r.EdgeBlocks, r.AggregateBytes, r.ScanBytes, r.Ratio, r.AggregateUs, r.ScanUs, r.Match)
	}
	return r, nil
}

func medianUs(d []time.Duration) float64 {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2].Nanoseconds()) / 1000
}

// Markdown is the reads report as two tables.
func (rep *ReadsReport) Markdown() string {
	var b strings.Builder
	o := rep.Options
	fmt.Fprintf(&b, "## Recent reads (thesis Fig. 5.11): %d-record reads within the last %s records, %d-record writes\n\n", o.RequestRecords, Count(int64(o.Window)), o.RequestRecords)
	fmt.Fprintf(&b, "%s, %d cores, load average %s at the start and %s at the end; in process, %d streams (a worker each, writing and reading it), ack %s, %s records/s offered (Poisson), runs of %v (%v warm-up).\n\n",
		rep.Started.Format("2006-01-02 15:04 MST"), rep.Cores, rep.LoadBefore, orQ(rep.LoadAfter), o.Streams, o.Ack, Count(int64(o.Rate)), o.Duration, o.Warmup)
	b.WriteString("| writes | achieved rec/s | writes | reads | write p50 (ms) | write p99 (ms) | read p50 (ms) | read p99 (ms) | ReadRange µs (p50, mean) | index blocks/read (mean, max) | search µs (p50, mean) | search µs by blocks visited | search share (p50, mean) | visits agree | errors |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, r := range rep.Rows {
		nodes, search, byNodes, share, agree, service := "—", "—", "—", "—", "—", "—"
		if r.Reads > 0 {
			nodes = fmt.Sprintf("%.2f, %d", r.IndexNodesMean, r.IndexNodesMax)
			search = fmt.Sprintf("%.2f, %.2f", r.SearchP50Us, r.SearchUs)
			var parts []string
			for k := 1; k <= r.IndexNodesMax; k++ {
				if c := r.IndexNodes[k]; c > 0 {
					parts = append(parts, fmt.Sprintf("%d: %.1f (%s reads)", k, r.SearchUsByNodes[k], Count(c)))
				}
			}
			byNodes = strings.Join(parts, "; ")
			share = fmt.Sprintf("%.2f%%, %.2f%%", 100*r.SearchShareP50, 100*r.SearchShare)
			agree = fmt.Sprintf("%.1f%%", 100*r.VisitsAgree)
			service = fmt.Sprintf("%.1f, %.1f", r.ReadServiceP50Us, r.ReadServiceUs)
		}
		fmt.Fprintf(&b, "| %.0f%% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			100*r.WriteShare, Count(int64(r.AchievedRecordsPerSec+0.5)), Count(r.Writes), Count(r.Reads), Ms(r.WriteP50Ms), Ms(r.WriteP99Ms),
			Ms(r.ReadP50Ms), Ms(r.ReadP99Ms), service, nodes, search, byNodes, share, agree, r.Errors)
	}
	if a := rep.Aggregate; a != nil {
		fmt.Fprintf(&b, "\n## Aggregates from the summary index vs a scan (%s records in a stream of %s)\n\n", Count(a.Records), Count(a.StreamRecords))
		b.WriteString("| range | index blocks | edge data blocks | aggregate bytes | scan bytes | scan/aggregate | aggregate µs | scan µs | answers match |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		fmt.Fprintf(&b, "| [%s, %s] | %d | %d | %s | %s | %.0f× | %.0f | %.0f | %v |\n\n%s\n",
			Count(a.From), Count(a.To), a.IndexNodes, a.EdgeBlocks, Count(a.AggregateBytes), Count(a.ScanBytes), a.Ratio, a.AggregateUs, a.ScanUs, a.Match, a.Summary)
	}
	return b.String()
}
