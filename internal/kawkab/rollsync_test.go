package kawkab

import (
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Chunk rolls off the append path: the writer does not fsync a filled data chunk (or an index
// node's predecessors) itself; syncData and the index flush do, outside the writer lock.

// TestRollMemoryNoFsyncWait: at AckMemory, with every data and index fsync blocked, appends
// across several data chunks and index nodes still complete (none waits for an fsync), reads
// see them (pending index nodes are served from memory), and once the fsyncs are let through,
// Close makes everything durable.
func TestRollMemoryNoFsyncWait(t *testing.T) {
	gate := make(chan struct{})
	var blocked atomic.Int64
	syncf := func(f *os.File) error {
		if b := filepath.Base(f.Name()); strings.HasPrefix(b, "d") || strings.HasPrefix(b, "i") {
			blocked.Add(1)
			<-gate
		}
		return nil
	}
	cfg := StreamConfig{ID: 3, RecordBytes: 4096, ValueOffset: 8, Ack: AckMemory} // 4 per block, 1,024 per chunk
	dir := t.TempDir()
	s, err := CreateStream(dir, cfg, StreamOptions{Sync: syncf, Index: Config{K: 2, N: 100}})
	if err != nil {
		t.Fatal(err)
	}
	const total = 3500 // 3.4 chunks, 875 blocks: 9 index nodes
	m := &model{cfg: cfg}
	g := &tsGen{rng: rand.New(rand.NewSource(1)), ts: 1, perB: s.lay.PerBlock}
	done := make(chan error, 1)
	go func() {
		for m.n() < total {
			b := batchOf(cfg, g, m.n(), 70)
			if _, err := s.Append(b); err != nil {
				done <- err
				return
			}
			m.add(b)
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		close(gate)
		t.Fatal("AckMemory appends waited for a blocked fsync")
	}
	if blocked.Load() == 0 {
		t.Fatal("no fsync was attempted: the test does not test the roll")
	}
	if s.Len() != total || s.dataSynced.Load() >= total {
		t.Fatalf("%d records visible, %d durable; want %d visible, not all durable (fsyncs are blocked)", s.Len(), s.dataSynced.Load(), total)
	}
	res, err := s.ReadRange(m.ts[0], m.ts[total-1])
	if err != nil || res.N != total {
		t.Fatalf("a range read over everything while fsyncs are blocked: %d records, %v", res.N, err)
	}
	close(gate)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenStream(dir, cfg.ID, StreamOptions{Sync: noSync})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Len() != total || r.Recovery().Reindexed != 0 {
		t.Fatalf("after Close: %d records (%d indexed again), want %d (none)", r.Len(), r.Recovery().Reindexed, total)
	}
	check(t, r, m, rand.New(rand.NewSource(3)), 20)
}

// TestRollLocalAckAfterChunkSync: at AckLocal, with slow fsyncs, no append is acknowledged
// before every data chunk holding its records (and every chunk before them) was fsynced with
// them in it; and the writer goes on writing while a filled chunk is fsynced (the leader does
// it, outside the writer lock).
func TestRollLocalAckAfterChunkSync(t *testing.T) {
	cfg := StreamConfig{ID: 4, RecordBytes: 4096, ValueOffset: 8, Ack: AckLocal}
	var (
		mu       sync.Mutex
		synced   = map[uint64]int64{} // data chunk → its size when an fsync of it began
		overlaps atomic.Int64         // fsyncs of a full chunk during which records were written
	)
	var s *Stream
	syncf := func(f *os.File) error {
		b := filepath.Base(f.Name())
		if !strings.HasPrefix(b, "d") {
			return nil
		}
		c, err := strconv.ParseUint(b[1:], 10, 64)
		if err != nil {
			return err
		}
		info, err := f.Stat()
		if err != nil {
			return err
		}
		before := s.dataWritten.Load()
		time.Sleep(3 * time.Millisecond) // a slow disk
		if info.Size() == s.lay.FullChunkFileBytes() && s.dataWritten.Load() > before {
			overlaps.Add(1)
		}
		mu.Lock()
		synced[c] = max(synced[c], info.Size())
		mu.Unlock()
		return nil
	}
	dir := t.TempDir()
	var err error
	if s, err = CreateStream(dir, cfg, StreamOptions{Sync: syncf}); err != nil {
		t.Fatal(err)
	}
	const total = 4 * 1024 // 4 chunks
	var bad []string
	acked := concurrentAppends(t, s, 4, 40, func(int) bool { return s.Len() >= total }, func(b ackedBatch) {
		end := b.first + uint64(b.n)
		mu.Lock()
		defer mu.Unlock()
		for c := uint64(0); c <= (end-1)/s.lay.PerChunk; c++ {
			if need := s.lay.ChunkFileBytes(end, c); synced[c] < need {
				bad = append(bad, "records "+strconv.FormatUint(b.first, 10)+"…"+strconv.FormatUint(end-1, 10)+
					" acknowledged with "+DataChunkName(c)+" fsynced at "+strconv.FormatInt(synced[c], 10)+" bytes, need "+strconv.FormatInt(need, 10))
			}
		}
	})
	if len(bad) > 0 {
		t.Fatalf("%d acknowledgements before their fsync, e.g. %s", len(bad), bad[0])
	}
	t.Logf("%d appends; %d fsyncs of a full chunk overlapped writes", len(acked), overlaps.Load())
	if overlaps.Load() == 0 {
		t.Error("no fsync of a filled chunk ran while records were written: the writer waits for it")
	}
	checkConcurrent(t, s, acked)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverCutAtShortChunk: a machine crash can leave a data chunk before the last short
// (the writer created the next one before it was fsynced) — then none of the records from its
// durable end on was acknowledged: recovery cuts the stream there and removes the chunks
// after it. Also a missing chunk, and zeros in a chunk before the last (a size written back
// without the bytes). When the index describes records after the cut, it is refused.
func TestRecoverCutAtShortChunk(t *testing.T) {
	cfg := StreamConfig{ID: 9, RecordBytes: 4096, ValueOffset: 8, Ack: AckMemory} // 1,024 records per chunk
	build := func(t *testing.T) (string, *model) {
		dir := t.TempDir()
		s, m, _ := buildStreamFiles(t, dir, cfg, StreamOptions{Sync: noSync}, 2500, 5) // 2.4 chunks
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The index as it was after 1,000 records (a crash left only that much of it).
		sdir := filepath.Join(dir, StreamDirName(cfg.ID))
		if err := os.Remove(filepath.Join(sdir, IndexChunkName(0))); err != nil {
			t.Fatal(err)
		}
		return dir, m
	}
	sdirOf := func(dir string) string { return filepath.Join(dir, StreamDirName(cfg.ID)) }
	t.Run("short", func(t *testing.T) {
		dir, m := build(t)
		p := filepath.Join(sdirOf(dir), DataChunkName(1))
		keep := 700
		if err := os.Truncate(p, s0(cfg).ChunkFileBytes(uint64(keep), 0)); err != nil {
			t.Fatal(err)
		}
		r, err := OpenStream(dir, cfg.ID, StreamOptions{Sync: noSync})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if r.Len() != 1024+uint64(keep) || r.Recovery().DroppedChunks != 1 {
			t.Fatalf("%d records, recovery %+v; want %d, one chunk dropped", r.Len(), r.Recovery(), 1024+keep)
		}
		if _, err := os.Stat(filepath.Join(sdirOf(dir), DataChunkName(2))); !os.IsNotExist(err) {
			t.Fatalf("d2 after the cut: %v", err)
		}
		check(t, r, m.truncate(r.Len()), rand.New(rand.NewSource(4)), 20)
		if _, err := r.Append(batchOf(cfg, &tsGen{rng: rand.New(rand.NewSource(2)), ts: m.ts[r.Len()-1], perB: 4}, r.Len(), 2000)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		dir, m := build(t)
		if err := os.Remove(filepath.Join(sdirOf(dir), DataChunkName(1))); err != nil {
			t.Fatal(err)
		}
		r, err := OpenStream(dir, cfg.ID, StreamOptions{Sync: noSync})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if r.Len() != 1024 {
			t.Fatalf("%d records, recovery %+v; want 1024", r.Len(), r.Recovery())
		}
		check(t, r, m.truncate(r.Len()), rand.New(rand.NewSource(4)), 20)
		if _, err := r.Append(batchOf(cfg, &tsGen{rng: rand.New(rand.NewSource(2)), ts: m.ts[r.Len()-1], perB: 4}, r.Len(), 100)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("zeros", func(t *testing.T) {
		dir, m := build(t)
		p := filepath.Join(sdirOf(dir), DataChunkName(1))
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		at := s0(cfg).Locate(1024 + 800).Offset
		if _, err := f.WriteAt(make([]byte, s0(cfg).FullChunkFileBytes()-at), at); err != nil {
			t.Fatal(err)
		}
		f.Close()
		r, err := OpenStream(dir, cfg.ID, StreamOptions{Sync: noSync})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if r.Len() != 1024+800 || r.Recovery().CutRecords == 0 || r.Recovery().DroppedChunks != 1 {
			t.Fatalf("%d records, recovery %+v; want %d", r.Len(), r.Recovery(), 1024+800)
		}
		check(t, r, m.truncate(r.Len()), rand.New(rand.NewSource(4)), 20)
	})
	t.Run("index after the cut", func(t *testing.T) {
		dir := t.TempDir()
		c := cfg
		c.Ack = AckLocal
		s, _, _ := buildStreamFiles(t, dir, c, StreamOptions{Sync: noSync}, 2500, 5)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(sdirOf(dir), DataChunkName(0)), 4096); err != nil {
			t.Fatal(err)
		}
		_, err := OpenStream(dir, c.ID, StreamOptions{Sync: noSync})
		if err == nil || !strings.Contains(err.Error(), "but chunks follow it") {
			t.Fatalf("a short d0 under an index describing d1: %v", err)
		}
	})
}

func s0(cfg StreamConfig) Layout { return cfg.Layout() }

// waitBackground waits until the stream's background data sync and index flush are done.
func waitBackground(t *testing.T, s *Stream) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.dmu.Lock()
		rolled := len(s.rolled)
		s.dmu.Unlock()
		s.nf.mu.Lock()
		busy := s.nf.flushing || len(s.nf.pending) > 0
		s.nf.mu.Unlock()
		if !s.bgSync.Load() && rolled == 0 && !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("background syncs still running after 10s (%d chunks not fsynced, index flush busy: %v)", rolled, busy)
		}
		time.Sleep(time.Millisecond)
	}
}
