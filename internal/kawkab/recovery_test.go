package kawkab

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// crash abandons a stream the way a killed process does: no fsync, no close of the index;
// the files keep what was written (the kernel's page cache survives a process).
func crash(t *testing.T, s *Stream) {
	t.Helper()
	s.wmu.Lock()
	s.closed = true
	s.wmu.Unlock()
	_ = s.release()
}

// buildStreamFiles appends n random records (no fsyncs) and returns the stream and its model.
func buildStreamFiles(t *testing.T, dir string, cfg StreamConfig, opt StreamOptions, n uint64, seed int64) (*Stream, *model, *tsGen) {
	t.Helper()
	s, err := CreateStream(dir, cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(seed))
	g := &tsGen{rng: rng, ts: 1 << 20, perB: s.lay.PerBlock}
	m := &model{cfg: cfg}
	for m.n() < n {
		k := min(n-m.n(), uint64(1+rng.Intn(4*s.lay.PerBlock)), uint64(MaxBatchBytes/cfg.RecordBytes))
		b := batchOf(cfg, g, m.n(), int(k))
		if _, err := s.Append(b); err != nil {
			t.Fatal(err)
		}
		m.add(b)
	}
	return s, m, g
}

// truncate is a copy of the model's first n records.
func (m *model) truncate(n uint64) *model {
	R := uint64(m.cfg.RecordBytes)
	return &model{cfg: m.cfg, data: slices.Clone(m.data[:n*R]), ts: slices.Clone(m.ts[:n]), vals: slices.Clone(m.vals[:n])}
}

// copyDir copies a directory of files.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func appendBytes(t *testing.T, p string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestRecoverTornTail: what a crash leaves at the end of the files is repaired from the
// files alone — a torn last record, a partly written block tail, zeros where the next
// records would be (their timestamps go back), a torn or half-appended last index node, an
// index behind the data or missing — and the stream reopens with exactly the whole records,
// its index answering ranges and aggregates like the brute-force model, and takes appends.
func TestRecoverTornTail(t *testing.T) {
	cfg := StreamConfig{ID: 7, RecordBytes: 100, ValueOffset: 8, Ack: AckMemory}
	opt := StreamOptions{Sync: noSync, Index: Config{K: 2, N: 3}, MaxReadRecords: 2000}
	base := t.TempDir()
	// 3 blocks and 10 records: the last block open, the last index node holding one entry.
	s, m, _ := buildStreamFiles(t, base, cfg, opt, 3*163+10, 1)
	lay := s.lay
	crash(t, s)
	full, _, _ := buildStreamFiles(t, filepath.Join(base, "full"), cfg, opt, 9*163, 2) // ends at a node's end
	fullM := full.IndexNodes()
	crash(t, full)
	_ = fullM

	last := DataChunkName(0)
	cases := []struct {
		name   string
		from   string // the stream directory to start from
		m      *model
		mutate func(t *testing.T, sdir string)
		want   uint64 // records after recovery
		check  func(t *testing.T, r RecoveryInfo)
	}{
		{"torn record", base, m, func(t *testing.T, sdir string) {
			p := filepath.Join(sdir, last)
			if err := os.Truncate(p, fileSize(t, p)-37); err != nil {
				t.Fatal(err)
			}
		}, m.n() - 1, func(t *testing.T, r RecoveryInfo) {
			if r.CutBytes != 100-37 {
				t.Errorf("cut %d bytes, want %d", r.CutBytes, 100-37)
			}
		}},
		{"block tail partly written", base, m, func(t *testing.T, sdir string) {
			// Cut to the end of block 2, then write 40 bytes of its tail.
			p := filepath.Join(sdir, last)
			if err := os.Truncate(p, 2*BlockBytes+int64(lay.PerBlock*lay.R)+40); err != nil {
				t.Fatal(err)
			}
		}, 3 * 163, func(t *testing.T, r RecoveryInfo) {
			if r.CutBytes != 40 {
				t.Errorf("cut %d bytes, want 40", r.CutBytes)
			}
		}},
		{"zeros after the end", base, m, func(t *testing.T, sdir string) {
			appendBytes(t, filepath.Join(sdir, last), make([]byte, 3*100+5))
		}, m.n(), func(t *testing.T, r RecoveryInfo) {
			if r.CutRecords != 3 || r.CutBytes != 305 {
				t.Errorf("cut %d records, %d bytes; want 3, 305", r.CutRecords, r.CutBytes)
			}
		}},
		{"torn last index node", filepath.Join(base, "full"), full9(m, cfg), func(t *testing.T, sdir string) {
			p := filepath.Join(sdir, IndexChunkName(0))
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Half of the last node's new version: garbage from byte 4096.
			if _, err := f.WriteAt(bytes.Repeat([]byte{0xab}, 4096), fileSize(t, p)-BlockBytes+4096); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}, 9 * 163, func(t *testing.T, r RecoveryInfo) {
			if r.DroppedNodes != 1 || r.Reindexed != 3*163 {
				t.Errorf("recovery %+v: want the last node dropped and its 3 blocks indexed again", r)
			}
		}},
		{"half-appended index node", base, m, func(t *testing.T, sdir string) {
			appendBytes(t, filepath.Join(sdir, IndexChunkName(0)), bytes.Repeat([]byte{1}, 5000))
		}, m.n(), nil},
		{"index behind the data", filepath.Join(base, "full"), full9(m, cfg), func(t *testing.T, sdir string) {
			if err := os.Truncate(filepath.Join(sdir, IndexChunkName(0)), BlockBytes); err != nil {
				t.Fatal(err)
			}
		}, 9 * 163, func(t *testing.T, r RecoveryInfo) {
			if r.IndexNodes != 1 || r.Reindexed != 6*163 {
				t.Errorf("recovery %+v: want 1 node found and 6 blocks indexed again", r)
			}
		}},
		{"no index", base, m, func(t *testing.T, sdir string) {
			if err := os.Remove(filepath.Join(sdir, IndexChunkName(0))); err != nil {
				t.Fatal(err)
			}
		}, m.n(), func(t *testing.T, r RecoveryInfo) {
			if r.Reindexed != m.n() {
				t.Errorf("recovery %+v: want every record indexed again", r)
			}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
			copyDir(t, filepath.Join(c.from, StreamDirName(cfg.ID)), filepath.Join(dir, StreamDirName(cfg.ID)))
			c.mutate(t, filepath.Join(dir, StreamDirName(cfg.ID)))
			s, err := OpenStream(dir, cfg.ID, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Len() != c.want {
				t.Fatalf("%d records after recovery, want %d (%+v)", s.Len(), c.want, s.Recovery())
			}
			if c.check != nil {
				c.check(t, s.Recovery())
			}
			mm := c.m.truncate(c.want)
			rng := rand.New(rand.NewSource(3))
			check(t, s, mm, rng, 40)
			checkFiles(t, s, mm)
			// It takes appends again, and reopens the same.
			g := &tsGen{rng: rng, ts: mm.ts[len(mm.ts)-1], perB: s.lay.PerBlock}
			b := batchOf(cfg, g, mm.n(), 400)
			if _, err := s.Append(b); err != nil {
				t.Fatal(err)
			}
			mm.add(b)
			check(t, s, mm, rng, 20)
			crash(t, s)
			if s, err = OpenStream(dir, cfg.ID, opt); err != nil {
				t.Fatal(err)
			}
			check(t, s, mm, rng, 20)
		})
	}
}

// full9 is the model of the second stream of TestRecoverTornTail (seed 2, 9 blocks).
func full9(_ *model, cfg StreamConfig) *model {
	rng := rand.New(rand.NewSource(2))
	l, _ := NewLayout(cfg.RecordBytes)
	g := &tsGen{rng: rng, ts: 1 << 20, perB: l.PerBlock}
	m := &model{cfg: cfg}
	for n := uint64(9 * 163); m.n() < n; {
		k := min(n-m.n(), uint64(1+rng.Intn(4*l.PerBlock)))
		m.add(batchOf(cfg, g, m.n(), int(k)))
	}
	return m
}

// TestRecoverLastNodeAhead: a last index node that describes data the chunk files do not
// hold is what a power loss can leave at AckMemory (the node's write and its data's are not
// ordered by an fsync): the node is rebuilt from the data. At AckLocal the index is written
// only after its data is fsynced, so the same files contradict each other and are refused —
// as is, at either level, an index ahead by more than its last node.
func TestRecoverLastNodeAhead(t *testing.T) {
	for _, ack := range []AckLevel{AckMemory, AckLocal} {
		t.Run(ack.String(), func(t *testing.T) {
			cfg := StreamConfig{ID: 7, RecordBytes: 100, ValueOffset: 8, Ack: ack}
			opt := StreamOptions{Sync: noSync, Index: Config{K: 2, N: 3}}
			dir := t.TempDir()
			s, _, _ := buildStreamFiles(t, dir, cfg, opt, 9*163, 2) // 3 full nodes
			crash(t, s)
			m := full9(nil, cfg)
			d := filepath.Join(dir, StreamDirName(cfg.ID), DataChunkName(0))
			undo := keep(t, d)
			// Ahead by 4 blocks, beyond the last node: refused at both levels.
			if err := os.Truncate(d, 5*BlockBytes); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenStream(dir, cfg.ID, opt); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "ahead of the data") {
				t.Fatalf("index ahead by 4 blocks: %v", err)
			}
			undo()
			// Ahead by one block (and a torn record), within the last node.
			if err := os.Truncate(d, 7*BlockBytes+163*100+50); err != nil {
				t.Fatal(err)
			}
			s, err := OpenStream(dir, cfg.ID, opt)
			if ack == AckLocal {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("AckLocal, index ahead by a block: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if r := s.Recovery(); s.Len() != 8*163 || r.DroppedNodes != 1 || r.Reindexed != 2*163 {
				t.Fatalf("%d records, recovery %+v; want 8 blocks, the last node dropped, 2 blocks indexed again", s.Len(), r)
			}
			check(t, s, m.truncate(8*163), rand.New(rand.NewSource(1)), 30)
		})
	}
}

// TestRecoverRefusesContradictions: files that contradict each other are refused with a
// clear error (ErrCorrupt), not guessed at — and leave the stream openable once repaired.
func TestRecoverRefusesContradictions(t *testing.T) {
	cfg := StreamConfig{ID: 7, RecordBytes: 4096, ValueOffset: 8, Ack: AckLocal}
	// One index node per data block: 3 index chunks for 602 blocks.
	opt := StreamOptions{Sync: noSync, Index: Config{K: 2, N: 1}}
	dir := t.TempDir()
	s, m, _ := buildStreamFiles(t, dir, cfg, opt, (2*ChunkBlocks+90)*4+2, 4)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, StreamDirName(cfg.ID))
	p := func(name string) string { return filepath.Join(sdir, name) }
	// Each case changes one thing, checks the refusal, and puts it back.
	cases := []struct {
		name   string
		mutate func(t *testing.T) (undo func())
		want   string
		is     error
	}{
		{"missing middle data chunk", moveAway(p(DataChunkName(1))), "data chunk 2 exists but chunk(s) 1 before it are missing", ErrCorrupt},
		{"missing middle index chunk", moveAway(p(IndexChunkName(1))), "index chunk 2 exists but chunk(s) 1 before it are missing", ErrCorrupt},
		{"short middle data chunk", shorten(p(DataChunkName(0)), 4096), "data chunk d0 is 4096 bytes, but chunks follow it", ErrCorrupt},
		{"short middle index chunk", shorten(p(IndexChunkName(0)), BlockBytes), "index chunk i0 is 16384 bytes, but chunks follow it", ErrCorrupt},
		{"oversized last data chunk", grow(p(DataChunkName(2)), ChunkBytes+1), "more than a full chunk", ErrCorrupt},
		{"index ahead of the data", shorten(p(DataChunkName(2)), fileSize(t, p(DataChunkName(2)))-3*BlockBytes), "the index is ahead of the data", ErrCorrupt},
		{"index entry that does not describe its block", poke(p(DataChunkName(2)), int64(BlockBytes*89+8)), "but the block's records give", ErrCorrupt},
		{"a stranger file", create(p("junk")), `holds "junk", which is not a chunk file`, ErrCorrupt},
		{"a non-canonical chunk name", create(p("d01")), `holds "d01"`, ErrCorrupt},
		{"metadata of another stream", swapMeta(t, p(metaName), 8), "the metadata in", ErrCorrupt},
		{"metadata checksum", poke(p(metaName), 9), "checksum mismatch", ErrMalformedMeta},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			undo := c.mutate(t)
			_, err := OpenStream(dir, cfg.ID, opt)
			undo()
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("OpenStream: %v; want %v containing %q", err, c.is, c.want)
			}
			t.Log(err)
		})
	}
	s, err := OpenStream(dir, cfg.ID, opt)
	if err != nil {
		t.Fatalf("after the cases were undone: %v", err)
	}
	defer s.Close()
	check(t, s, m, rand.New(rand.NewSource(5)), 20)
	// One writer: a second open is refused while the first holds the stream.
	if _, err := OpenStream(dir, cfg.ID, opt); !errors.Is(err, ErrStreamLocked) {
		t.Fatalf("a second OpenStream: %v", err)
	}
	if _, err := CreateStream(dir, cfg, opt); !errors.Is(err, ErrStreamExists) {
		t.Fatalf("CreateStream of an existing stream: %v", err)
	}
	if _, err := OpenStream(dir, 99, opt); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenStream of a missing stream: %v", err)
	}
}

func moveAway(path string) func(t *testing.T) func() {
	return func(t *testing.T) func() {
		away := filepath.Join(filepath.Dir(filepath.Dir(path)), "away")
		if err := os.Rename(path, away); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := os.Rename(away, path); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// keep saves a file's bytes and returns the function that puts them back.
func keep(t *testing.T, path string) func() {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func shorten(path string, size int64) func(t *testing.T) func() {
	return func(t *testing.T) func() {
		undo := keep(t, path)
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		return undo
	}
}

func grow(path string, size int64) func(t *testing.T) func() { return shorten(path, size) }

func poke(path string, off int64) func(t *testing.T) func() {
	return func(t *testing.T) func() {
		undo := keep(t, path)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := f.ReadAt(b[:], off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x40
		if _, err := f.WriteAt(b[:], off); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return undo
	}
}

func create(path string) func(t *testing.T) func() {
	return func(t *testing.T) func() {
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return func() { os.Remove(path) }
	}
}

// swapMeta writes the metadata of stream id (otherwise the same) in place.
func swapMeta(t *testing.T, path string, id uint64) func(t *testing.T) func() {
	return func(t *testing.T) func() {
		undo := keep(t, path)
		b, _ := os.ReadFile(path)
		m, err := decodeStreamMeta(b)
		if err != nil {
			t.Fatal(err)
		}
		m.ID = id
		nb, err := encodeStreamMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nb, 0o644); err != nil {
			t.Fatal(err)
		}
		return undo
	}
}

// ---------------------------------------------------------------------------------------------
// Power loss, modelled: only what was fsynced survives
// ---------------------------------------------------------------------------------------------

// durableDir models a file system that loses everything not fsynced: a file's durable bytes
// are what it held at its last fsync, a directory's durable names what it held at its last
// fsync. It is the stream's Sync function.
type durableDir struct {
	mu    sync.Mutex
	dir   string
	files map[string][]byte
	names map[string]bool
	syncs int
}

func newDurableDir(t *testing.T, sdir string) *durableDir {
	d := &durableDir{dir: sdir, files: map[string][]byte{}, names: map[string]bool{}}
	ents, err := os.ReadDir(sdir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents { // the state CreateStream made durable
		b, err := os.ReadFile(filepath.Join(sdir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		d.files[e.Name()], d.names[e.Name()] = b, true
	}
	return d
}

func (d *durableDir) sync(f *os.File) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncs++
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		if filepath.Clean(f.Name()) != filepath.Clean(d.dir) {
			return nil
		}
		ents, err := os.ReadDir(d.dir)
		if err != nil {
			return err
		}
		d.names = map[string]bool{}
		for _, e := range ents {
			d.names[e.Name()] = true
		}
		return nil
	}
	name := filepath.Base(f.Name())
	old := d.files[name]
	if strings.HasPrefix(name, "d") && int64(len(old)) <= st.Size() {
		// Data chunks only grow while the stream runs: read what was added.
		b := make([]byte, st.Size()-int64(len(old)))
		if _, err := f.ReadAt(b, int64(len(old))); err != nil {
			return err
		}
		d.files[name] = append(old[:len(old):len(old)], b...)
		return nil
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return err
	}
	d.files[name] = b
	return nil
}

// crash writes what survives a power loss now into dst (a fresh parent directory). With rng
// nil, exactly the fsynced state. With rng, also some of what was written since, the way a
// file system may have written it back on its own, in any order: a data chunk keeps a random
// part of its unsynced growth, sometimes as zeros (the size written back, the data not); an
// index chunk gets a random subset of its changed 4 KiB pages (a node torn) and maybe its
// unsynced length.
func (d *durableDir) crash(t *testing.T, dst string, rng *rand.Rand) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for name := range d.names {
		b := d.files[name]
		if rng != nil && name != metaName {
			cur, err := os.ReadFile(filepath.Join(d.dir, name))
			if err != nil {
				t.Fatal(err)
			}
			b = tornVersion(name, b, cur, rng)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func tornVersion(name string, synced, cur []byte, rng *rand.Rand) []byte {
	if strings.HasPrefix(name, "d") {
		if len(cur) <= len(synced) {
			return synced
		}
		extra := cur[len(synced) : len(synced)+rng.Intn(len(cur)-len(synced)+1)]
		if rng.Intn(4) == 0 {
			extra = make([]byte, len(extra))
		}
		return append(bytes.Clone(synced), extra...)
	}
	n := len(synced)
	if rng.Intn(2) == 0 {
		n = len(cur)
	}
	out := make([]byte, n)
	copy(out, synced)
	const page = 4096
	for off := 0; off < n; off += page {
		if off >= len(synced) || rng.Intn(2) == 0 {
			copy(out[off:min(n, off+page)], cur[off:min(len(cur), off+page)])
		}
	}
	return out
}

// TestPowerLoss: a machine crash, modelled — the fsynced bytes and directory entries survive,
// and, in a second copy of each crash, a random part of what was written since (torn index
// nodes, partial or zeroed data tails) — at several moments while four goroutines append. At
// AckLocal every acknowledged batch survives, whole, where Append said; at AckMemory
// acknowledged batches may be lost but recovery always succeeds (chunks are fsynced in order,
// an index node only after the data of the nodes before it) with a consistent prefix whose
// index answers like the brute-force model.
func TestPowerLoss(t *testing.T) {
	for _, ack := range []AckLevel{AckLocal, AckMemory} {
		t.Run(ack.String(), func(t *testing.T) {
			cfg := StreamConfig{ID: 2, RecordBytes: 100, ValueOffset: 8, Ack: ack}
			dir := t.TempDir()
			s, err := CreateStream(dir, cfg, StreamOptions{Sync: noSync, Index: Config{K: 2, N: 5}})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			d := newDurableDir(t, filepath.Join(dir, StreamDirName(cfg.ID)))
			opt := StreamOptions{Sync: d.sync, MaxOpenFiles: 3}
			if s, err = OpenStream(dir, cfg.ID, opt); err != nil {
				t.Fatal(err)
			}
			total := uint64(60000) // past the first 41,728-record chunk
			if testing.Short() {
				total = 20000
			}
			type snapshot struct {
				dir   string
				acked []ackedBatch
			}
			var snaps []snapshot
			var ackedSoFar []ackedBatch
			crashAt := []int{30, 150, 300}
			acked := concurrentAppends(t, s, 4, 300, func(n int) bool { return s.Len() >= total }, func(b ackedBatch) {
				ackedSoFar = append(ackedSoFar, b)
				if len(snaps) < 2*len(crashAt) && len(ackedSoFar) == crashAt[len(snaps)/2] {
					// Everything acknowledged so far happened before this crash.
					sn := snapshot{dir: filepath.Join(t.TempDir(), "crash"), acked: append([]ackedBatch(nil), ackedSoFar...)}
					d.crash(t, filepath.Join(sn.dir, StreamDirName(cfg.ID)), nil)
					torn := snapshot{dir: filepath.Join(t.TempDir(), "torn"), acked: sn.acked}
					d.crash(t, filepath.Join(torn.dir, StreamDirName(cfg.ID)), rand.New(rand.NewSource(int64(len(snaps)))))
					snaps = append(snaps, sn, torn)
				}
			})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			sn := snapshot{dir: filepath.Join(t.TempDir(), "end"), acked: acked}
			d.crash(t, filepath.Join(sn.dir, StreamDirName(cfg.ID)), nil)
			snaps = append(snaps, sn)
			for i, sn := range snaps {
				r, err := OpenStream(sn.dir, cfg.ID, StreamOptions{Sync: noSync})
				if err != nil {
					t.Fatalf("crash %d: %v", i, err)
				}
				var want []ackedBatch
				for _, a := range sn.acked {
					if ack == AckLocal || a.first+uint64(a.n) <= r.Len() {
						want = append(want, a)
					}
				}
				m := checkConcurrent(t, r, want)
				check(t, r, m, rand.New(rand.NewSource(int64(i))), 30)
				t.Logf("crash %d (%s): %d batches acknowledged, %d records survive; recovery %+v", i, filepath.Base(sn.dir), len(sn.acked), r.Len(), r.Recovery())
				r.Close()
			}
			// A clean close makes everything durable, also at AckMemory.
			if last := snaps[len(snaps)-1]; len(last.acked) != len(acked) {
				t.Fatal("the last snapshot misses acknowledgements")
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// kill -9
// ---------------------------------------------------------------------------------------------

const killEnv = "KAWKAB_KILL9_DIR"

var killCfg = StreamConfig{ID: 1, RecordBytes: 100, ValueOffset: 8, Ack: AckLocal}

// TestHelperProcess is the process TestKill9 kills: it opens (or creates) the stream in
// $KAWKAB_KILL9_DIR, prints "open <records>", then appends at AckLocal from four goroutines
// and prints "ack <first> <n> <writer> <seq>" for every acknowledged batch, until it is
// killed (or has appended 300,000 more records).
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(killEnv)
	if dir == "" {
		t.Skip("the process TestKill9 runs and kills")
	}
	s, err := OpenStream(dir, killCfg.ID, StreamOptions{})
	if errors.Is(err, fs.ErrNotExist) {
		// Two blocks per index node: the index crosses an index chunk (256 nodes) at 83,456 records.
		s, err = CreateStream(dir, killCfg, StreamOptions{Index: Config{K: 2, N: 2}})
	}
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	start := s.Len()
	fmt.Printf("open %d\n", start)
	concurrentAppends(t, s, 4, 600, func(int) bool { return s.Len() >= start+300000 }, func(b ackedBatch) {
		// One write(2) per line: a line printed is an acknowledged batch.
		fmt.Printf("ack %d %d %d %d\n", b.first, b.n, b.writer, b.seq)
	})
	s.Close()
	os.Exit(0)
}

// TestKill9: a real process appends at AckLocal (with real fsyncs) and is killed with
// SIGKILL after some acknowledgements, at a different point each round; the stream is
// reopened from its files and every batch the process acknowledged must be there, whole,
// where Append said, and the index must answer ranges and aggregates like a brute-force
// model of the records read back. Each round continues the stream of the previous one.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes that fsync")
	}
	dir := t.TempDir()
	var acked []ackedBatch
	for round, killAfter := range []int{1, 5, 60, 150, 80} {
		var n int
		acked, n = appendUntilKilled(t, round, "TestHelperProcess", killEnv+"="+dir, killAfter, acked)
		s, err := OpenStream(dir, killCfg.ID, StreamOptions{Sync: noSync})
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		m := checkConcurrent(t, s, acked)
		check(t, s, m, rand.New(rand.NewSource(int64(round))), 40)
		t.Logf("round %d: killed after %d acknowledgements (%d read); %d records survive; recovery %+v",
			round, killAfter, n, s.Len(), s.Recovery())
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// appendUntilKilled runs helper (a test of this binary appending and printing "ack FIRST N
// WRITER SEQ" per acknowledged batch, "open RECORDS" when it opened the stream, "error ..."
// on a failure) with env, and sends it SIGKILL at its killAfter-th acknowledgement, while
// other appends are in flight. It returns acked with the round's acknowledgements added and
// how many it read; it fails the test if the helper ended before the kill.
func appendUntilKilled(t *testing.T, round int, helper, env string, killAfter int, acked []ackedBatch) ([]ackedBatch, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$")
	cmd.Env = append(os.Environ(), env)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	n, killed := 0, false
	for sc.Scan() {
		line := sc.Text()
		var a ackedBatch
		var opened uint64
		switch {
		case strings.HasPrefix(line, "ack "):
			if _, err := fmt.Sscanf(line, "ack %d %d %d %d", &a.first, &a.n, &a.writer, &a.seq); err != nil {
				t.Fatalf("helper said %q: %v", line, err)
			}
			acked = append(acked, a)
			if n++; n == killAfter {
				// Other appends are in flight: the kill lands anywhere in them.
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed = true
			}
		case strings.HasPrefix(line, "open "):
			fmt.Sscanf(line, "open %d", &opened)
			t.Logf("round %d: the helper opened the stream with %d records", round, opened)
		case strings.HasPrefix(line, "error "):
			t.Fatalf("helper: %s", line)
		}
	}
	werr := cmd.Wait()
	if !killed {
		t.Fatalf("round %d: the helper ended before %d acknowledgements: %v\n%s", round, killAfter, werr, stderr.String())
	}
	return acked, n
}
