package kawkab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recStore wraps an object store: it records every Put's key in order and can fail requests.
type recStore struct {
	ObjectStore
	mu       sync.Mutex
	puts     []string
	putData  map[string][][]byte // manifests put, in order
	failPut  atomic.Bool
	failGet  atomic.Bool
	gets     atomic.Int64
	getDelay atomic.Int64 // nanoseconds every Get waits
	// Puts of a key ending with slowSuffix wait (at most 10 s) until a put of a key ending
	// with afterSuffix is done: a slow upload that others overtake.
	slowSuffix, afterSuffix string
	after                   chan struct{}
	afterOnce               sync.Once
}

func newRecStore() *recStore {
	return &recStore{ObjectStore: NewMemObjectStore(), putData: map[string][][]byte{}}
}

var errInjected = errors.New("injected object store failure")

func (r *recStore) Put(ctx context.Context, key string, data []byte) error {
	if r.failPut.Load() {
		return fmt.Errorf("put %s: %w", key, errInjected)
	}
	if r.slowSuffix != "" && strings.HasSuffix(key, r.slowSuffix) {
		select {
		case <-r.after:
		case <-time.After(10 * time.Second):
		}
	}
	if err := r.ObjectStore.Put(ctx, key, data); err != nil {
		return err
	}
	if r.afterSuffix != "" && strings.HasSuffix(key, r.afterSuffix) {
		r.afterOnce.Do(func() { close(r.after) })
	}
	r.mu.Lock()
	r.puts = append(r.puts, key)
	if strings.HasSuffix(key, "/"+manifestName) {
		r.putData[key] = append(r.putData[key], slices.Clone(data))
	}
	r.mu.Unlock()
	return nil
}

func (r *recStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if r.failGet.Load() {
		return nil, fmt.Errorf("get %s: %w", key, errInjected)
	}
	r.gets.Add(1)
	if d := r.getDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	return r.ObjectStore.Get(ctx, key, off, n)
}

func (r *recStore) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.puts)
}

// storeOpts are small, fast options for tests: real clock, short retry waits.
func storeOpts(obj ObjectStore, capacity int64) StoreOptions {
	return StoreOptions{
		ObjectStore: obj, Prefix: "t", CapacityBytes: capacity, UploadWorkers: 3,
		RetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond,
		MaxSlowdown: 20 * time.Millisecond,
		Stream:      StreamOptions{Sync: noSync, Index: Config{K: 3, N: 40}},
	}
}

// waitFor polls cond (bounded: 20 s of 1 ms polls) and fails the test if it never holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 20000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// appendRecords appends n records of R bytes with increasing timestamps from *ts, in batches
// of batch, to s and to the model.
func appendRecords(t testing.TB, s *Stream, m *model, ts *int64, n, batch int) {
	t.Helper()
	R := s.Layout().R
	for n > 0 {
		k := min(n, batch)
		buf := make([]byte, k*R)
		for i := range k {
			*ts += int64(1 + i%3)
			rec := buf[i*R : (i+1)*R]
			PutTimestamp(rec, *ts)
			for j := 8; j < R; j++ {
				rec[j] = byte(*ts>>uint(j%8)) ^ byte(j)
			}
		}
		if _, err := s.Append(buf); err != nil {
			t.Fatalf("append: %v", err)
		}
		if m != nil {
			m.add(buf)
		}
		n -= k
	}
}

func uploadedAll(st *Store) func() bool {
	return func() bool { ss := st.Stats(); return ss.UploadQueue == 0 && ss.UploadsInFlight == 0 }
}

// localChunks lists the data chunk files of a stream directory.
func localChunks(t testing.TB, sdir string) map[uint64]int64 {
	t.Helper()
	l, err := listChunks(sdir)
	if err != nil {
		t.Fatal(err)
	}
	return l.data
}

// manifestsPut decodes the manifests put under key, in order.
func (r *recStore) manifestsPut(t testing.TB, key string) []Manifest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Manifest
	for _, b := range r.putData[key] {
		m, err := decodeManifest(b)
		if err != nil {
			t.Fatalf("manifest put: %v", err)
		}
		out = append(out, m)
	}
	return out
}

var tierCfg = StreamConfig{ID: 7, RecordBytes: 4096, ValueOffset: 8, Ack: AckLocal}

// TestStoreUploadsInOrder: full chunks are uploaded (three workers, so puts of data chunks
// overlap), and every manifest put records a prefix: the metadata, the data chunks and the
// index objects it counts were put before it, and manifests only grow. The objects are the
// chunk files' bytes; the open chunk is not uploaded.
func TestStoreUploadsInOrder(t *testing.T) {
	obj := newRecStore()
	obj.slowSuffix, obj.afterSuffix, obj.after = "/d1", "/d2", make(chan struct{}) // chunk 2 is put before chunk 1
	dir := t.TempDir()
	st, err := OpenStore(dir, storeOpts(obj, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := st.Create(tierCfg)
	if err != nil {
		t.Fatal(err)
	}
	var ts int64
	appendRecords(t, s, nil, &ts, 6*1024+500, 37)
	waitFor(t, "uploads", uploadedAll(st))
	mkey := streamKey("t", 7, manifestName)
	ms := obj.manifestsPut(t, mkey)
	if len(ms) == 0 {
		t.Fatal("no manifest put")
	}
	log := obj.log()
	seen := map[string]int{}
	nm := 0
	for i, k := range log {
		seen[k] = i
		if k != mkey {
			continue
		}
		m := ms[nm]
		nm++
		if nm > 1 && m.Chunks <= ms[nm-2].Chunks {
			t.Fatalf("manifest %d has %d chunks after %d", nm, m.Chunks, ms[nm-2].Chunks)
		}
		if m != manifestFor(7, s.Layout(), 40, m.Chunks) {
			t.Fatalf("manifest %+v", m)
		}
		need := []string{streamKey("t", 7, metaName)}
		for c := range m.Chunks {
			need = append(need, streamKey("t", 7, DataChunkName(c)))
		}
		for ic := range (m.Nodes + ChunkBlocks - 1) / ChunkBlocks {
			need = append(need, streamKey("t", 7, IndexChunkName(ic)))
		}
		for _, n := range need {
			if _, ok := seen[n]; !ok {
				t.Fatalf("manifest put %d (%d chunks, %d nodes) before %s", nm, m.Chunks, m.Nodes, n)
			}
		}
	}
	if d1, d2 := slices.Index(log, streamKey("t", 7, "d1")), slices.Index(log, streamKey("t", 7, "d2")); d1 < d2 {
		t.Fatalf("chunk 1 was put at %d, before chunk 2 at %d: the test wants it overtaken", d1, d2)
	}
	if last := ms[len(ms)-1]; last.Chunks != 6 || last.Nodes != nodesFor(6*256, 40) {
		t.Fatalf("last manifest %+v, want 6 chunks", last)
	}
	for c := range uint64(7) {
		local, err := os.ReadFile(filepath.Join(dir, "s7", DataChunkName(c)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := obj.ObjectStore.Get(context.Background(), streamKey("t", 7, DataChunkName(c)), 0, -1)
		if c == 6 {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("the open chunk was uploaded: %v", err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, local) {
			t.Fatalf("object d%d: %v, equal %v", c, err, bytes.Equal(got, local))
		}
	}
	lb, err := os.ReadFile(filepath.Join(dir, "s7", manifestName))
	if err != nil || !bytes.Equal(lb, obj.putData[mkey][len(ms)-1]) {
		t.Fatalf("local manifest copy: %v", err)
	}
	ss := st.Stats()
	if ss.Uploads != 6 || ss.DeletedChunks != 0 || ss.UploadQueue != 0 || ss.UploadFailures != 0 {
		t.Fatalf("stats %+v", ss)
	}
}

// TestStoreDeletion: uploaded chunks are deleted only while the store is more than half full,
// least recently used first, never the last chunk file; reads go on across deletion.
func TestStoreDeletion(t *testing.T) {
	obj := newRecStore()
	dir := t.TempDir()
	// 70 MiB: half is 35 MiB; 8 chunks (and their index) stay below it, 10 do not.
	st, err := OpenStore(dir, storeOpts(obj, 70<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	half := st.halfBytes
	s, err := st.Create(tierCfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{cfg: tierCfg}
	var ts int64
	appendRecords(t, s, m, &ts, 8*1024+10, 100)
	waitFor(t, "uploads", uploadedAll(st))
	if ss := st.Stats(); ss.DeletedChunks != 0 || ss.LocalBytes > half {
		t.Fatalf("deleted below half full: %+v (half %d)", ss, half)
	}
	if len(localChunks(t, s.cs.dir)) != 9 {
		t.Fatal("chunks missing")
	}
	// Chunk 0 read last: chunks 1 and 2 are the least recently used.
	if _, err := s.ReadRecords(5, 10); err != nil {
		t.Fatal(err)
	}
	appendRecords(t, s, m, &ts, 2*1024, 100)
	waitFor(t, "uploads and deletion", func() bool {
		return uploadedAll(st)() && st.Stats().LocalBytes <= half
	})
	ss := st.Stats()
	local := localChunks(t, s.cs.dir)
	t.Logf("stats %+v; local chunks %v", ss, local)
	if ss.DeletedChunks == 0 {
		t.Fatal("nothing deleted above half full")
	}
	if _, ok := local[0]; !ok {
		t.Fatal("chunk 0, read recently, was deleted before older ones")
	}
	if _, ok := local[1]; ok {
		t.Fatal("chunk 1, the least recently used, was not deleted")
	}
	if _, ok := local[10]; !ok {
		t.Fatal("the last chunk was deleted")
	}
	man := obj.manifestsPut(t, streamKey("t", 7, manifestName))
	for c := range uint64(11) {
		if _, ok := local[c]; !ok && c >= man[len(man)-1].Chunks {
			t.Fatalf("chunk %d deleted but not uploaded", c)
		}
	}
	check(t, s, m, rand.New(rand.NewSource(2)), 30)
	if ss := st.Stats(); ss.ObjectGets == 0 {
		t.Fatal("reads of deleted chunks made no GETs")
	}
}

// TestStoreBackpressure: with the object store failing, nothing is deleted (no chunk is
// uploaded); appends are slowed above the high-water mark and declined with ErrStoreFull at
// the capacity; once the object store works again, uploads and deletion free space and
// appends go in again. Failed puts are retried and counted.
func TestStoreBackpressure(t *testing.T) {
	obj := newRecStore()
	obj.failPut.Store(true)
	dir := t.TempDir()
	opt := storeOpts(obj, 16<<20) // half 8 MiB, high water 0.75: 12 MiB
	opt.HighWater = 0.75
	st, err := OpenStore(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := st.Create(tierCfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{cfg: tierCfg}
	var ts int64
	R := tierCfg.RecordBytes
	batch := 64 // 256 KiB
	var slowedSeen bool
	var declined error
	for i := 0; i < 200 && declined == nil; i++ {
		buf := make([]byte, batch*R)
		for j := range batch {
			ts++
			PutTimestamp(buf[j*R:], ts)
		}
		before := st.Stats().AppendsSlowed
		_, err := s.Append(buf)
		if err != nil {
			declined = err
			break
		}
		m.add(buf)
		if st.Stats().AppendsSlowed > before {
			slowedSeen = true
			if st.Stats().LocalBytes > 16<<20 {
				t.Fatal("an append went past the capacity")
			}
		}
	}
	if !errors.Is(declined, ErrStoreFull) {
		t.Fatalf("appends were never declined: %v", declined)
	}
	if !slowedSeen {
		t.Fatal("no append was slowed and then admitted before the decline")
	}
	ss := st.Stats()
	t.Logf("full: %+v; %v", ss, declined)
	if ss.DeletedChunks != 0 || ss.Uploads != 0 || ss.UploadFailures == 0 || ss.AppendsDeclined == 0 || ss.LastUploadError == "" {
		t.Fatalf("stats while the object store fails: %+v", ss)
	}
	if n := len(localChunks(t, s.cs.dir)); uint64(n) != s.Layout().Chunks(s.Len()) {
		t.Fatalf("%d local chunks, want all %d: un-uploaded chunks deleted", n, s.Layout().Chunks(s.Len()))
	}
	check(t, s, m, rand.New(rand.NewSource(3)), 10)

	// The object store recovers: uploads, deletion, appends again.
	obj.failPut.Store(false)
	waitFor(t, "uploads and deletion", func() bool {
		ss := st.Stats()
		return ss.UploadQueue == 0 && ss.LocalBytes <= st.halfBytes+4<<20
	})
	ok := false
	for range 100 {
		buf := make([]byte, batch*R)
		for j := range batch {
			PutTimestamp(buf[j*R:], ts+int64(j)+1)
		}
		if _, err := s.Append(buf); err != nil {
			if !errors.Is(err, ErrStoreFull) {
				t.Fatal(err)
			}
			continue
		}
		ts += int64(batch)
		m.add(buf)
		ok = true
		break
	}
	if !ok {
		t.Fatal("appends still declined after uploads freed space")
	}
	ss = st.Stats()
	if ss.DeletedChunks == 0 || ss.Uploads == 0 {
		t.Fatalf("after recovery: %+v", ss)
	}
	check(t, s, m, rand.New(rand.NewSource(4)), 10)
}

// TestStoreRecovery: chunks written while the object store failed are uploaded after a
// reopen; after deletion a reopen finds deleted chunks in the manifest; reads equal the model
// throughout; a local copy of the manifest ahead of the object store's is refused.
func TestStoreRecovery(t *testing.T) {
	obj := newRecStore()
	obj.failPut.Store(true)
	dir := t.TempDir()
	st, err := OpenStore(dir, storeOpts(obj, 30<<20))
	if err != nil {
		t.Fatal(err)
	}
	s, err := st.Create(tierCfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{cfg: tierCfg}
	var ts int64
	appendRecords(t, s, m, &ts, 5*1024+3, 100)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if len(obj.log()) != 0 {
		t.Fatal("puts succeeded while failing")
	}
	obj.failPut.Store(false)
	for round := range 3 {
		st, err = OpenStore(dir, storeOpts(obj, 30<<20))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		s, ok := st.Stream(7)
		if !ok {
			t.Fatal("stream not reopened")
		}
		check(t, s, m, rand.New(rand.NewSource(int64(round))), 20)
		appendRecords(t, s, m, &ts, 2*1024, 100)
		waitFor(t, "uploads and deletion", func() bool {
			ss := st.Stats()
			return ss.UploadQueue == 0 && ss.UploadsInFlight == 0 && (ss.LocalBytes <= st.halfBytes || ss.EvictableBytes == 0)
		})
		ss := st.Stats()
		t.Logf("round %d: %d records, stats %+v, local %v", round, s.Len(), ss, localChunks(t, s.cs.dir))
		if want := s.Len() / s.Layout().PerChunk; ss.Uploads+s.tier.manifest.Chunks != want {
			t.Fatalf("round %d: %d uploads after reopen with %d uploaded, want %d chunks", round, ss.Uploads, s.tier.manifest.Chunks, want)
		}
		if round > 0 && s.tier.manifest.Chunks == 0 {
			t.Fatal("the reopened stream did not read the manifest")
		}
		check(t, s, m, rand.New(rand.NewSource(int64(round+10))), 20)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(localChunks(t, filepath.Join(dir, "s7"))) == int(tierCfg.Layout().Chunks(m.n())) {
		t.Fatal("nothing was deleted")
	}
	// The object store lost the manifest: refused, not guessed.
	if err := obj.ObjectStore.Delete(context.Background(), streamKey("t", 7, manifestName)); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir, storeOpts(obj, 30<<20)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with the object store's manifest lost: %v", err)
	}
	// The object store unreachable: the local copy says what is uploaded.
	obj2 := newRecStore()
	obj2.failGet.Store(true)
	st, err = OpenStore(dir, storeOpts(obj2, 0))
	if err != nil {
		t.Fatalf("open with the object store unreachable: %v", err)
	}
	s, _ = st.Stream(7)
	if s.tier.manifest.Chunks == 0 || s.Len() != m.n() {
		t.Fatalf("local manifest not used: %+v, %d records", s.tier.manifest, s.Len())
	}
	st.Close()
}

// TestStoreReadsAcrossDeletion: readers read random ranges while appends, uploads and
// deletions go on (a small cache in front), and every read equals the model.
func TestStoreReadsAcrossDeletion(t *testing.T) {
	obj := newRecStore()
	dir := t.TempDir()
	cache, err := NewCache(CacheConfig{CapacityBytes: 2 << 20, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	opt := storeOpts(obj, 24<<20)
	opt.Cache = cache
	opt.ReadRangeBlocks = 3
	st, err := OpenStore(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := StreamConfig{ID: 3, RecordBytes: 100, ValueOffset: 8, Ack: AckMemory}
	s, err := st.Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{cfg: cfg}
	var mu sync.RWMutex
	var ts int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	errc := make(chan error, 4)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(r)))
			for range 100000 {
				select {
				case <-done:
					return
				default:
				}
				mu.RLock()
				n := m.n()
				mu.RUnlock()
				if n == 0 {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				first := uint64(rng.Int63n(int64(n)))
				k := min(1+rng.Intn(2000), int(n-first)) // records the model has
				got, err := s.ReadRecords(first, k)
				if err != nil {
					errc <- err
					return
				}
				mu.RLock()
				want := m.data[first*100 : (first+uint64(k))*100]
				mu.RUnlock()
				if !bytes.Equal(got, want) {
					errc <- fmt.Errorf("ReadRecords(%d, %d) differs from the model", first, k)
					return
				}
				reads.Add(1)
			}
		}()
	}
	R := cfg.RecordBytes
	for range 12 * 163 * 256 / 5000 {
		buf := make([]byte, 5000*R)
		for j := range 5000 {
			ts++
			PutTimestamp(buf[j*R:], ts/3)
		}
		if _, err := s.Append(buf); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		m.add(buf)
		mu.Unlock()
	}
	waitFor(t, "uploads and deletion", func() bool {
		ss := st.Stats()
		return ss.UploadQueue == 0 && ss.LocalBytes <= st.halfBytes
	})
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	ss := st.Stats()
	t.Logf("%d reads; stats %+v", reads.Load(), ss)
	if ss.DeletedChunks == 0 || ss.ObjectGets == 0 || ss.Cache.Hits == 0 {
		t.Fatalf("the test did not read across deletion through the cache: %+v", ss)
	}
	check(t, s, m, rand.New(rand.NewSource(5)), 30)
}

// TestStoreOpen: OpenStore opens every stream of its directory and skips what is not one (a
// creation interrupted before the metadata, foreign names); Create refuses an open stream and
// a stream the object store holds; Open of a missing stream is ErrStreamNotFound; a closed
// stream can be opened again.
func TestStoreOpen(t *testing.T) {
	obj := newRecStore()
	dir := t.TempDir()
	st, err := OpenStore(dir, storeOpts(obj, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{1, 2} {
		if _, err := st.Create(StreamConfig{ID: id, RecordBytes: 64, ValueOffset: NoValue}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Create(StreamConfig{ID: 1, RecordBytes: 64, ValueOffset: NoValue}); !errors.Is(err, ErrStreamExists) {
		t.Fatalf("create an open stream: %v", err)
	}
	if _, err := st.Open(3); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("open a missing stream: %v", err)
	}
	s2, _ := st.Stream(2)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Stream(2); ok {
		t.Fatal("a closed stream is still the store's")
	}
	if s, err := st.Open(2); err != nil || s == s2 {
		t.Fatalf("reopen a closed stream: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s7", "notes", "s01"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	st, err = OpenStore(dir, storeOpts(obj, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ids := st.Streams()
	slices.Sort(ids)
	if !slices.Equal(ids, []uint64{1, 2}) {
		t.Fatalf("streams %v, want [1 2]", ids)
	}
	if _, err := st.Create(StreamConfig{ID: 7, RecordBytes: 64, ValueOffset: NoValue}); err != nil {
		t.Fatalf("create over an interrupted creation: %v", err)
	}
	// A stream the object store holds uploads of is not created again.
	m, _ := encodeManifest(manifestFor(9, tierLayout(64), 289, 1))
	if err := obj.Put(context.Background(), streamKey("t", 9, manifestName), m); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(StreamConfig{ID: 9, RecordBytes: 64, ValueOffset: NoValue}); !errors.Is(err, ErrStreamExists) {
		t.Fatalf("create a stream the object store holds: %v", err)
	}
}

// TestStoreRecoverFromObjectStore: recovery's checks read a block of a chunk deleted after its
// upload from the object store. The index (n = 256: two nodes per chunk) is cut back to the end
// of chunk 1, which is deleted: reopening reads chunk 1's last block back to check the index's
// last entry, and re-indexes the record in chunk 2 from the local file.
func TestStoreRecoverFromObjectStore(t *testing.T) {
	obj := newRecStore()
	dir := t.TempDir()
	opt := storeOpts(obj, 0)
	opt.Stream.Index = Config{K: 3, N: 256}
	st, err := OpenStore(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	s, err := st.Create(tierCfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{cfg: tierCfg}
	var ts int64
	appendRecords(t, s, m, &ts, 2*1024+1, 100)
	waitFor(t, "uploads", uploadedAll(st))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened with a small capacity, the store deletes both uploaded chunks.
	opt.CapacityBytes = 1 << 20
	st, err = OpenStore(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deletion", func() bool { return st.Stats().DeletedChunks == 2 })
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "s7")
	if err := os.Truncate(filepath.Join(sdir, IndexChunkName(0)), 2*BlockBytes); err != nil {
		t.Fatal(err)
	}
	gets := obj.gets.Load()
	st, err = OpenStore(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, _ = st.Stream(7)
	if rec := s.Recovery(); rec.Reindexed != 1 || rec.DroppedNodes != 0 || rec.IndexNodes != 2 {
		t.Fatalf("recovery %+v, want 1 record re-indexed after 2 nodes", rec)
	}
	if obj.gets.Load() <= gets+1 { // more than the manifest
		t.Fatal("recovery did not read the deleted chunk from the object store")
	}
	check(t, s, m, rand.New(rand.NewSource(8)), 20)
}

// TestStoreUploadWorkerNotHeldByCommits: with one upload worker, the worker goes on putting
// data chunks while a commit's manifest put is slow (startCommit), and the chunks put
// meanwhile are recorded together; a worker that committed inline would put nothing until the
// manifest was in.
func TestStoreUploadWorkerNotHeldByCommits(t *testing.T) {
	obj := newRecStore()
	// Manifest puts wait until data chunk 3 is put.
	obj.slowSuffix, obj.afterSuffix, obj.after = "/"+manifestName, "/d3", make(chan struct{})
	opts := storeOpts(obj, 0)
	opts.UploadWorkers = 1
	st, err := OpenStore(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := st.Create(tierCfg)
	if err != nil {
		t.Fatal(err)
	}
	var ts int64
	appendRecords(t, s, nil, &ts, 5*1024+10, 64)
	waitFor(t, "uploads", uploadedAll(st))
	log := obj.log()
	mkey, d3 := streamKey("t", 7, manifestName), streamKey("t", 7, DataChunkName(3))
	first, put3 := slices.Index(log, mkey), slices.Index(log, d3)
	if first < 0 || put3 < 0 || put3 > first {
		t.Fatalf("chunk 3 put at %d, the first manifest at %d, want chunk 3 first: %q", put3, first, log)
	}
	ms := obj.manifestsPut(t, mkey)
	if last := ms[len(ms)-1]; last.Chunks != 5 || len(ms) > 4 {
		t.Fatalf("%d manifests, the last with %d chunks; want at most 4 (commits shared), the last with 5", len(ms), last.Chunks)
	}
}
