package kawkab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// noSync skips fsyncs: tests that do not crash the machine need none, and the disk is shared.
func noSync(*os.File) error { return nil }

// model is the brute-force model of a stream: every record's bytes, timestamp and value.
type model struct {
	cfg  StreamConfig
	data []byte
	ts   []int64
	vals []int64
}

func (m *model) n() uint64 { return uint64(len(m.ts)) }

func (m *model) add(batch []byte) {
	R := m.cfg.RecordBytes
	m.data = append(m.data, batch...)
	for i := 0; i < len(batch); i += R {
		m.ts = append(m.ts, Timestamp(batch[i:]))
		m.vals = append(m.vals, m.cfg.Value(batch[i:]))
	}
}

// span is the records [lo, hi) with timestamps in [tl, th].
func (m *model) span(tl, th int64) (lo, hi int) {
	lo = sort.Search(len(m.ts), func(i int) bool { return m.ts[i] >= tl })
	hi = sort.Search(len(m.ts), func(i int) bool { return m.ts[i] > th })
	return lo, max(lo, hi)
}

// fillRecord writes a record: its timestamp, its value at the value offset (if any), and
// bytes derived from seed elsewhere, so a record read from the wrong place shows.
func fillRecord(cfg StreamConfig, rec []byte, ts, value int64, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := TimestampBytes; i < len(rec); i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		rec[i] = byte(x)
	}
	PutTimestamp(rec, ts)
	if cfg.ValueOffset != NoValue {
		binary.LittleEndian.PutUint64(rec[cfg.ValueOffset:], uint64(value))
	}
}

// tsGen draws non-decreasing timestamps: small steps, duplicates, runs of one timestamp over
// more than a block, jumps.
type tsGen struct {
	rng  *rand.Rand
	ts   int64
	run  int
	perB int
}

func (g *tsGen) next() int64 {
	if g.run > 0 {
		g.run--
		return g.ts
	}
	switch x := g.rng.Intn(100); {
	case x < 60:
		g.ts += int64(g.rng.Intn(4))
	case x < 85:
	case x < 98:
		g.ts += int64(g.rng.Intn(1000))
	case x < 99:
		g.run = g.perB + g.rng.Intn(2*g.perB)
	default:
		g.ts += 1 << 40
	}
	return g.ts
}

// batchOf builds n records continuing the model's stream.
func batchOf(cfg StreamConfig, g *tsGen, first uint64, n int) []byte {
	R := cfg.RecordBytes
	b := make([]byte, n*R)
	for i := 0; i < n; i++ {
		ts := g.next()
		v := g.rng.Int63n(1<<20) - 1<<19
		if g.rng.Intn(50) == 0 {
			v = []int64{math.MaxInt64, math.MinInt64}[g.rng.Intn(2)]
		}
		fillRecord(cfg, b[i*R:(i+1)*R], ts, v, first+uint64(i))
	}
	return b
}

// check compares a stream to the model: its length and last timestamp, reads by record
// number, ranges and aggregates, q random queries of each.
func check(t *testing.T, s *Stream, m *model, rng *rand.Rand, q int) {
	t.Helper()
	R := m.cfg.RecordBytes
	if got := s.Len(); got != m.n() {
		t.Fatalf("Len %d, model %d", got, m.n())
	}
	if ts, ok := s.LastTimestamp(); ok != (m.n() > 0) || (ok && ts != m.ts[m.n()-1]) {
		t.Fatalf("LastTimestamp %d %v, model %v", ts, ok, m.ts[max(0, len(m.ts)-1):])
	}
	if m.n() == 0 {
		return
	}
	for range q {
		first := uint64(rng.Int63n(int64(m.n()) + 1))
		n := rng.Intn(min(3*s.lay.PerBlock, s.maxRead+1))
		got, err := s.ReadRecords(first, n)
		if err != nil {
			t.Fatalf("ReadRecords(%d, %d): %v", first, n, err)
		}
		end := min(m.n(), first+uint64(n))
		if !bytes.Equal(got, m.data[first*uint64(R):end*uint64(R)]) {
			t.Fatalf("ReadRecords(%d, %d): %d bytes differ from the model's %d", first, n, len(got), (end-first)*uint64(R))
		}
	}
	lo, hi := m.ts[0], m.ts[len(m.ts)-1]
	for range q {
		var tl, th int64
		switch rng.Intn(4) {
		case 0: // anywhere, maybe outside
			tl = lo - 3 + rng.Int63n(max(hi-lo, 1)+6)
			th = tl + rng.Int63n(50)
		case 1: // bounds on records
			tl = m.ts[rng.Intn(len(m.ts))]
			th = m.ts[rng.Intn(len(m.ts))]
			if tl > th {
				tl, th = th, tl
			}
		case 2: // one timestamp (runs span blocks)
			tl = m.ts[rng.Intn(len(m.ts))]
			th = tl
		default: // the recent end
			tl = m.ts[len(m.ts)-1-rng.Intn(min(len(m.ts), 3*s.lay.PerBlock))]
			th = math.MaxInt64
		}
		checkRange(t, s, m, tl, th)
	}
	checkRange(t, s, m, math.MinInt64, math.MaxInt64)
}

func checkRange(t *testing.T, s *Stream, m *model, tl, th int64) {
	t.Helper()
	R := m.cfg.RecordBytes
	a, b := m.span(tl, th)
	res, err := s.ReadRange(tl, th)
	if err != nil {
		t.Fatalf("ReadRange(%d, %d): %v", tl, th, err)
	}
	want := b - a
	more := want > s.maxRead
	want = min(want, s.maxRead)
	if res.N != want || res.More != more || (want > 0 && res.First != uint64(a)) ||
		!bytes.Equal(res.Records, m.data[a*R:(a+want)*R]) {
		t.Fatalf("ReadRange(%d, %d): first %d, %d records, more=%v; model: first %d, %d records (of %d), more=%v",
			tl, th, res.First, res.N, res.More, a, want, b-a, more)
	}
	var sum Summary
	for _, v := range m.vals[a:b] {
		sum.Add(v)
	}
	got, err := s.Aggregate(tl, th)
	if err != nil {
		t.Fatalf("Aggregate(%d, %d): %v", tl, th, err)
	}
	if got != sum && !(got.Count == 0 && sum.Count == 0) {
		t.Fatalf("Aggregate(%d, %d) = %v, model %v", tl, th, got, sum)
	}
}

// checkFiles checks the chunk files against the layout: data chunk c is
// ChunkFileBytes(n, c) bytes, every sealed block's tail is zero, the index files end after
// the last node.
func checkFiles(t *testing.T, s *Stream, m *model) {
	t.Helper()
	l := s.lay
	n := m.n()
	for c := uint64(0); c < l.Chunks(n); c++ {
		b, err := os.ReadFile(s.cs.path(DataChunkName(c)))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != l.ChunkFileBytes(n, c) {
			t.Fatalf("%s is %d bytes, want %d", DataChunkName(c), len(b), l.ChunkFileBytes(n, c))
		}
		for blk := 0; blk*BlockBytes < len(b); blk++ {
			end := min(len(b), (blk+1)*BlockBytes)
			recs := blk*BlockBytes + l.PerBlock*l.R
			if recs < end && !allZero(b[recs:end]) {
				t.Fatalf("%s block %d: its unused tail is not zero", DataChunkName(c), blk)
			}
		}
		first := c * l.PerChunk
		for i := uint64(0); i < min(l.PerChunk, n-first); i += 97 {
			p := l.Locate(first + i)
			if !bytes.Equal(b[p.Offset:p.Offset+int64(l.R)], m.data[(first+i)*uint64(l.R):(first+i+1)*uint64(l.R)]) {
				t.Fatalf("record %d is not at offset %d of %s", first+i, p.Offset, DataChunkName(c))
			}
		}
	}
	if _, err := os.Stat(s.cs.path(DataChunkName(l.Chunks(n)))); err == nil && n%l.PerChunk != 0 {
		t.Fatalf("a data chunk after the last record's")
	}
	nodes := s.IndexNodes()
	var size int64
	for c := uint64(0); ; c++ {
		st, err := os.Stat(s.cs.path(IndexChunkName(c)))
		if err != nil {
			break
		}
		size += st.Size()
	}
	// The last node is stored once a block of it was sealed.
	if stored := uint64(size / BlockBytes); size%BlockBytes != 0 || (stored != nodes && stored != nodes-1) {
		t.Fatalf("index files hold %d bytes; the index has %d nodes", size, nodes)
	}
}

// TestStreamModel appends random batches to streams of 16-, 24-, 100- and 4096-byte
// records — past chunk and index node boundaries — and checks
// every read against a brute-force model, the files' layout, and the same after a reopen.
func TestStreamModel(t *testing.T) {
	cases := []struct {
		r, valueOffset int
		ack            AckLevel
		index          Config
	}{
		{16, 8, AckLocal, Config{}},
		{24, NoValue, AckMemory, Config{}},
		{100, 92, AckLocal, Config{K: 2, N: 7}},
		{4096, 2000, AckMemory, Config{K: 3, N: 5}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("R=%d", c.r), func(t *testing.T) {
			cfg := StreamConfig{ID: uint64(c.r), RecordBytes: c.r, ValueOffset: c.valueOffset, Ack: c.ack}
			opt := StreamOptions{Sync: noSync, MaxOpenFiles: 3, MaxReadRecords: 3000, Index: c.index}
			dir := t.TempDir()
			s, err := CreateStream(dir, cfg, opt)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewSource(int64(c.r)))
			lay := s.Layout()
			m := &model{cfg: cfg}
			g := &tsGen{rng: rng, ts: -1 << 30, perB: lay.PerBlock}
			// Past two chunks (512 blocks) for the larger records; for the small ones, whose
			// blocks hold many more records, past one chunk and the first index node (289
			// blocks at the default geometry).
			blocks := uint64(2*ChunkBlocks + 90)
			if c.r < 100 || testing.Short() {
				blocks = ChunkBlocks + 44
			}
			total := blocks * uint64(lay.PerBlock)
			for step := 0; m.n() < total; step++ {
				var n int
				switch x := rng.Intn(20); {
				case x == 0: // a big batch: more than a chunk for large records
					n = int(min(total-m.n(), uint64(MaxBatchBytes/c.r), lay.PerChunk+uint64(lay.PerBlock)))
				case x < 5:
					n = 1 + rng.Intn(3*lay.PerBlock)
				default:
					n = 1 + rng.Intn(lay.PerBlock)
				}
				batch := batchOf(cfg, g, m.n(), n)
				first, err := s.Append(batch)
				if err != nil {
					t.Fatalf("append %d records at %d: %v", n, m.n(), err)
				}
				if first != m.n() {
					t.Fatalf("append returned %d, want %d", first, m.n())
				}
				m.add(batch)
				if step%40 == 0 {
					check(t, s, m, rng, 5)
					if o := s.cs.files.openFiles(); o > 3 {
						t.Fatalf("%d chunk files open, the limit is 3", o)
					}
				}
			}
			check(t, s, m, rng, 60)
			checkFiles(t, s, m)
			t.Logf("%d records in %d blocks, %d data chunks, %d index nodes", m.n(), lay.Blocks(m.n()), lay.Chunks(m.n()), s.IndexNodes())
			if nodes, want := s.IndexNodes(), (lay.Blocks(m.n())+uint64(s.icfg.N)-1)/uint64(s.icfg.N); nodes != want {
				t.Fatalf("%d index nodes for %d blocks, want %d", nodes, lay.Blocks(m.n()), want)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Reopen: the index from its nodes, only the open block's records indexed again.
			s, err = OpenStream(dir, cfg.ID, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rec := s.Recovery()
			if rec.Records != m.n() || rec.CutBytes != 0 || rec.DroppedNodes != 0 || rec.Reindexed >= uint64(lay.PerBlock) {
				t.Fatalf("recovery after a clean close: %+v (%d records)", rec, m.n())
			}
			check(t, s, m, rng, 40)
			for range 5 {
				batch := batchOf(cfg, g, m.n(), 1+rng.Intn(2*lay.PerBlock))
				if _, err := s.Append(batch); err != nil {
					t.Fatal(err)
				}
				m.add(batch)
			}
			check(t, s, m, rng, 20)
			checkFiles(t, s, m)
		})
	}
}

// fileSizes are the sizes of the stream's files by name.
func fileSizes(t *testing.T, s *Stream) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	ents, err := os.ReadDir(s.cs.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = info.Size()
	}
	return out
}

// TestStreamRefusals: a refused batch — empty, oversized, a partial record, timestamps going
// back within it or against the last record — is refused with a clear error and changes
// nothing: the length, the files, the index, the next record number.
func TestStreamRefusals(t *testing.T) {
	for _, ack := range []AckLevel{AckLocal, AckMemory} {
		t.Run(ack.String(), func(t *testing.T) {
			cfg := StreamConfig{ID: 3, RecordBytes: 100, ValueOffset: 8, Ack: ack}
			s, err := CreateStream(t.TempDir(), cfg, StreamOptions{Sync: noSync})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rng := rand.New(rand.NewSource(2))
			m := &model{cfg: cfg}
			g := &tsGen{rng: rng, ts: 1000, perB: s.lay.PerBlock}
			b := batchOf(cfg, g, 0, 250)
			if _, err := s.Append(b); err != nil {
				t.Fatal(err)
			}
			m.add(b)
			last := m.ts[len(m.ts)-1]
			rec := func(ts ...int64) []byte {
				out := make([]byte, len(ts)*100)
				for i, x := range ts {
					fillRecord(cfg, out[i*100:(i+1)*100], x, 1, 0)
				}
				return out
			}
			refusals := []struct {
				name  string
				batch []byte
				is    error
				want  string
			}{
				{"empty", nil, ErrInvalidBatch, "an empty batch"},
				{"partial", append(rec(last+1), 1, 2, 3), ErrInvalidBatch, "1 records of 100 bytes and a partial record of 3 bytes"},
				{"short", make([]byte, 99), ErrInvalidBatch, "0 records of 100 bytes and a partial record of 99 bytes"},
				{"oversized", make([]byte, MaxBatchBytes+100), ErrInvalidBatch, "more than the limit of 67108864"},
				{"back in the batch", rec(last+5, last+7, last+6), ErrOutOfOrder, "record 2 of the batch has timestamp " + fmt.Sprint(last+6) + ", older than record 1's " + fmt.Sprint(last+7)},
				{"older than the last", rec(last-1, last+10), ErrOutOfOrder, fmt.Sprintf("first record has timestamp %d, older than the stream's last record's %d", last-1, last)},
			}
			before := fileSizes(t, s)
			nodes := s.IndexNodes()
			for _, r := range refusals {
				_, err := s.Append(r.batch)
				if !errors.Is(err, r.is) || !strings.Contains(err.Error(), r.want) {
					t.Fatalf("%s: %v, want %v containing %q", r.name, err, r.is, r.want)
				}
				if s.Len() != m.n() || s.IndexNodes() != nodes {
					t.Fatalf("%s: the refusal changed the stream", r.name)
				}
				if after := fileSizes(t, s); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Fatalf("%s: files %v, before %v", r.name, after, before)
				}
			}
			check(t, s, m, rng, 10)
			// Equal timestamps are kept, and the next record number follows.
			b = rec(last, last, last)
			first, err := s.Append(b)
			if err != nil || first != m.n() {
				t.Fatalf("append of equal timestamps: %d, %v", first, err)
			}
			m.add(b)
			check(t, s, m, rng, 10)
			// Reads out of bounds.
			if _, err := s.ReadRecords(m.n()+1, 1); !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("read past the end: %v", err)
			}
			if got, err := s.ReadRecords(m.n(), 5); err != nil || len(got) != 0 {
				t.Fatalf("read at the end: %d bytes, %v", len(got), err)
			}
			if _, err := s.ReadRecords(0, s.MaxReadRecords()+1); !errors.Is(err, ErrReadTooLarge) {
				t.Fatalf("read beyond the limit: %v", err)
			}
			if _, err := s.ReadRange(5, 4); err == nil {
				t.Fatal("ReadRange(5, 4): no error")
			}
			if _, err := s.Aggregate(5, 4); err == nil {
				t.Fatal("Aggregate(5, 4): no error")
			}
		})
	}
}

// appendTS is a record for the concurrency tests: its timestamp from a shared clock, the
// writer and its sequence number in the payload, the value derived from them; self-checking.
func concRecord(cfg StreamConfig, rec []byte, ts int64, writer, seq, i uint32) {
	fillRecord(cfg, rec, ts, int64(writer)<<40|int64(seq)<<16|int64(i), uint64(writer)<<48|uint64(seq)<<20|uint64(i))
	binary.LittleEndian.PutUint32(rec[16:], writer)
	binary.LittleEndian.PutUint32(rec[20:], seq)
	binary.LittleEndian.PutUint32(rec[24:], i)
}

// concCheck checks a record written by concRecord.
func concCheck(cfg StreamConfig, rec []byte) (writer, seq, i uint32, ok bool) {
	writer = binary.LittleEndian.Uint32(rec[16:])
	seq = binary.LittleEndian.Uint32(rec[20:])
	i = binary.LittleEndian.Uint32(rec[24:])
	want := make([]byte, len(rec))
	concRecord(cfg, want, Timestamp(rec), writer, seq, i)
	return writer, seq, i, bytes.Equal(rec, want)
}

type ackedBatch struct {
	first       uint64
	writer, seq uint32
	n           int
}

// concurrentAppends runs writers goroutines, each appending batches of 1 … maxN records
// with timestamps from a shared clock (retrying a batch the clock's order made stale), until
// stop says so; it returns the acknowledged batches.
func concurrentAppends(t *testing.T, s *Stream, writers, maxN int, stop func(acked int) bool, onAck func(ackedBatch)) []ackedBatch {
	cfg := s.Config()
	R := cfg.RecordBytes
	var clock, retries atomic.Int64
	defer func() { t.Logf("%d retries", retries.Load()) }()
	var mu sync.Mutex
	var acked []ackedBatch
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range writers {
		wg.Add(1)
		go func(w uint32) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for seq := uint32(0); ; seq++ {
				mu.Lock()
				done := stop(len(acked))
				mu.Unlock()
				if done {
					return
				}
				n := 1 + rng.Intn(maxN)
				batch := make([]byte, n*R)
				for {
					span := int64((n-1)/2 + 1) // timestamps base … base+span−1, none past the clock
					base := clock.Add(span) - span + 1
					for i := range n {
						concRecord(cfg, batch[i*R:(i+1)*R], base+int64(i/2), w, seq, uint32(i))
					}
					first, err := s.Append(batch)
					if errors.Is(err, ErrOutOfOrder) {
						retries.Add(1)
						continue // another writer's later timestamps went first
					}
					if err != nil {
						failed.Store(err)
						return
					}
					b := ackedBatch{first: first, writer: w, seq: seq, n: n}
					mu.Lock()
					acked = append(acked, b)
					if onAck != nil {
						onAck(b)
					}
					mu.Unlock()
					break
				}
			}
		}(uint32(w))
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	return acked
}

// checkConcurrent reads the whole stream: every record is well formed, timestamps never
// decrease, and every acknowledged batch is where Append said, whole.
func checkConcurrent(t *testing.T, s *Stream, acked []ackedBatch) *model {
	t.Helper()
	cfg := s.Config()
	R := cfg.RecordBytes
	m := &model{cfg: cfg}
	for m.n() < s.Len() {
		b, err := s.ReadRecords(m.n(), s.MaxReadRecords())
		if err != nil {
			t.Fatal(err)
		}
		m.add(b)
	}
	for i := range m.ts {
		if _, _, _, ok := concCheck(cfg, m.data[i*R:(i+1)*R]); !ok {
			t.Fatalf("record %d is not one a writer wrote", i)
		}
		if i > 0 && m.ts[i] < m.ts[i-1] {
			t.Fatalf("record %d's timestamp %d is older than record %d's %d", i, m.ts[i], i-1, m.ts[i-1])
		}
	}
	for _, a := range acked {
		if a.first+uint64(a.n) > m.n() {
			t.Fatalf("acknowledged batch %+v is past the stream's end %d", a, m.n())
		}
		for i := 0; i < a.n; i++ {
			at := (a.first + uint64(i)) * uint64(R)
			w, seq, j, _ := concCheck(cfg, m.data[at:at+uint64(R)])
			if w != a.writer || seq != a.seq || j != uint32(i) {
				t.Fatalf("acknowledged batch %+v: record %d is writer %d's batch %d record %d", a, i, w, seq, j)
			}
		}
	}
	return m
}

// TestConcurrentAppendersAndReaders: appenders and readers at once (run with -race): readers
// see only whole, acknowledged records in order and ranges that match what they read.
func TestConcurrentAppendersAndReaders(t *testing.T) {
	for _, ack := range []AckLevel{AckLocal, AckMemory} {
		t.Run(ack.String(), func(t *testing.T) {
			cfg := StreamConfig{ID: 9, RecordBytes: 64, ValueOffset: 8, Ack: ack}
			s, err := CreateStream(t.TempDir(), cfg, StreamOptions{Sync: noSync, Index: Config{K: 2, N: 3}, MaxOpenFiles: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			R := cfg.RecordBytes
			var done atomic.Bool
			var rwg sync.WaitGroup
			var readErr atomic.Value
			for r := range 3 {
				rwg.Add(1)
				go func() {
					defer rwg.Done()
					rng := rand.New(rand.NewSource(int64(100 + r)))
					for ; !done.Load(); time.Sleep(100 * time.Microsecond) { // leave the writers some CPU
						n := s.Len()
						if n == 0 {
							continue
						}
						first := uint64(rng.Int63n(int64(n)))
						b, err := s.ReadRecords(first, 1+rng.Intn(200))
						if err != nil {
							readErr.Store(err)
							return
						}
						for i := 0; i < len(b); i += R {
							if _, _, _, ok := concCheck(cfg, b[i:i+R]); !ok {
								readErr.Store(fmt.Errorf("record %d read torn", first+uint64(i/R)))
								return
							}
						}
						tl := Timestamp(b)
						th := tl + rng.Int63n(300)
						res, err := s.ReadRange(tl, th)
						if err != nil {
							readErr.Store(err)
							return
						}
						for i := 0; i < len(res.Records); i += R {
							ts := Timestamp(res.Records[i:])
							if ts < tl || ts > th || (i > 0 && ts < Timestamp(res.Records[i-R:])) {
								readErr.Store(fmt.Errorf("ReadRange(%d, %d) returned timestamp %d", tl, th, ts))
								return
							}
						}
						if res.First > first || (res.First < first && len(res.Records) == 0) {
							readErr.Store(fmt.Errorf("ReadRange(%d, %d) starts at %d, record %d has timestamp %d", tl, th, res.First, first, tl))
							return
						}
						g, err := s.Aggregate(tl, th)
						if err != nil || g.Count < uint64(len(res.Records)/R) {
							readErr.Store(fmt.Errorf("Aggregate(%d, %d) = %v, %v after %d records were read", tl, th, g, err, len(res.Records)/R))
							return
						}
					}
				}()
			}
			total := 70000 // past the first chunk (65536 records)
			if testing.Short() {
				total = 5000
			}
			acked := concurrentAppends(t, s, 4, 120, func(int) bool { return s.Len() >= uint64(total) }, nil)
			done.Store(true)
			rwg.Wait()
			if err := readErr.Load(); err != nil {
				t.Fatal(err)
			}
			m := checkConcurrent(t, s, acked)
			check(t, s, m, rand.New(rand.NewSource(1)), 30)
		})
	}
}

// countingSync counts fsyncs by kind and makes each take a moment, the way a disk does, so
// that appends arrive while one is running.
type countingSync struct {
	data, index, dirs atomic.Int64
	wait              func()
}

func (c *countingSync) sync(f *os.File) error {
	switch base := filepath.Base(f.Name()); {
	case strings.HasPrefix(base, "d"):
		c.data.Add(1)
	case strings.HasPrefix(base, "i"):
		c.index.Add(1)
	default:
		c.dirs.Add(1)
	}
	if c.wait != nil {
		c.wait()
	}
	return nil
}

// TestGroupCommit: AckLocal appends from several goroutines share fsyncs — fewer data fsyncs
// than appends — and each append returns only after an fsync that covered it.
func TestGroupCommit(t *testing.T) {
	cs := &countingSync{}
	cs.wait = func() { time.Sleep(time.Millisecond) } // a disk's fsync: appends queue behind it
	cfg := StreamConfig{ID: 4, RecordBytes: 100, ValueOffset: 8, Ack: AckLocal}
	s, err := CreateStream(t.TempDir(), cfg, StreamOptions{Sync: cs.sync})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	baseData, baseIndex := cs.data.Load(), cs.index.Load()
	// Every acknowledged record must have been covered by a data fsync: wrap the sync to
	// record how many records were written when each data fsync began.
	const appends = 240
	var acks atomic.Int64
	acked := concurrentAppends(t, s, 8, 20, func(n int) bool { return acks.Load() >= appends }, func(ackedBatch) { acks.Add(1) })
	dataSyncs := cs.data.Load() - baseData
	indexSyncs := cs.index.Load() - baseIndex
	t.Logf("%d appends, %d data fsyncs, %d index fsyncs", len(acked), dataSyncs, indexSyncs)
	if dataSyncs >= int64(len(acked)) {
		t.Fatalf("%d data fsyncs for %d appends: no group commit", dataSyncs, len(acked))
	}
	if dataSyncs == 0 {
		t.Fatal("no data fsync at AckLocal")
	}
	if s.dataSynced.Load() < s.Len() {
		t.Fatalf("%d records visible, %d durable", s.Len(), s.dataSynced.Load())
	}
	checkConcurrent(t, s, acked)

	// At AckMemory an append fsyncs nothing (until a chunk fills).
	cs2 := &countingSync{}
	cfg2 := StreamConfig{ID: 5, RecordBytes: 100, ValueOffset: 8, Ack: AckMemory}
	s2, err := CreateStream(t.TempDir(), cfg2, StreamOptions{Sync: cs2.sync})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	before := cs2.data.Load() + cs2.index.Load()
	acked2 := concurrentAppends(t, s2, 4, 20, func(n int) bool { return n >= 100 }, nil)
	if after := cs2.data.Load() + cs2.index.Load(); after != before {
		t.Fatalf("AckMemory: %d fsyncs for %d appends", after-before, len(acked2))
	}
	checkConcurrent(t, s2, acked2)
}
