package kawkab

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"
)

// remoteFixture is a store with a stream of R = 100 and 5 chunks uploaded (with k = 3, n = 3
// the index crosses an index chunk: node 256 is at block 768, in chunk 2).
func remoteFixture(t *testing.T, icfg Config) (*Store, *Stream, *model, *recStore, *int64) {
	obj := newRecStore()
	opt := storeOpts(obj, 0)
	opt.Stream.Index = icfg
	st, err := OpenStore(t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := StreamConfig{ID: 11, RecordBytes: 100, ValueOffset: 8, Ack: AckMemory}
	s, err := st.Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{cfg: cfg}
	ts := new(int64)
	appendRecords(t, s, m, ts, 5*int(s.Layout().PerChunk)+1234, 3000)
	waitFor(t, "uploads", uploadedAll(st))
	return st, s, m, obj, ts
}

// TestRemoteStream: a reader with only the object store answers like the primary for the
// uploaded prefix — ranged and whole-chunk GETs alike — and sees more after Refresh.
func TestRemoteStream(t *testing.T) {
	st, s, m, obj, ts := remoteFixture(t, Config{K: 3, N: 3})
	ctx := context.Background()
	for _, whole := range []bool{false, true} {
		cache, err := NewCache(CacheConfig{CapacityBytes: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := OpenRemoteStream(ctx, obj, "t", 11, RemoteOptions{Cache: cache, WholeChunk: whole, RangeBlocks: 3, Parallelism: 4})
		if err != nil {
			t.Fatal(err)
		}
		up := rs.Manifest()
		want := uint64(5)
		if whole {
			want = 7 // the first round uploaded two more
		}
		if up.Chunks != want || rs.Len() != want*s.Layout().PerChunk {
			t.Fatalf("remote manifest %+v, %d records", up, rs.Len())
		}
		if up.Nodes <= ChunkBlocks {
			t.Fatalf("the fixture's index should cross an index chunk: %d nodes", up.Nodes)
		}
		check(t, rs.s, m.truncate(rs.Len()), rand.New(rand.NewSource(1)), 40)
		if _, err := rs.ReadRecords(rs.Len()+1, 1); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("read past the uploaded records: %v", err)
		}
		// More uploaded: Refresh takes it in.
		if !whole {
			appendRecords(t, s, m, ts, 2*int(s.Layout().PerChunk), 3000)
			waitFor(t, "uploads", uploadedAll(st))
		}
		if _, err := rs.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if rs.Manifest().Chunks != 7 {
			t.Fatalf("after Refresh: %+v", rs.Manifest())
		}
		check(t, rs.s, m.truncate(rs.Len()), rand.New(rand.NewSource(2)), 40)
		t.Logf("whole=%v: stats %+v, cache %+v", whole, rs.Stats(), cache.Stats())
	}
}

// TestRemoteRangedFetchesLess: the same historical reads (1,000 records each) with ranged
// GETs and with whole-chunk GETs return identical records; the ranged reads fetch far fewer
// bytes.
func TestRemoteRangedFetchesLess(t *testing.T) {
	_, _, m, obj, _ := remoteFixture(t, Config{K: 3, N: 3})
	ctx := context.Background()
	ranged, err := OpenRemoteStream(ctx, obj, "t", 11, RemoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := OpenRemoteStream(ctx, obj, "t", 11, RemoteOptions{WholeChunk: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(7))
	n := ranged.Len()
	for range 30 {
		first := uint64(rng.Int63n(int64(n - 1000)))
		tl, th := m.ts[first], m.ts[first+999]
		a, err := ranged.ReadRange(tl, th)
		if err != nil {
			t.Fatal(err)
		}
		b, err := whole.ReadRange(tl, th)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := m.span(tl, th)
		if a.First != b.First || a.N != b.N || string(a.Records) != string(b.Records) || a.N != hi-lo ||
			string(a.Records) != string(m.data[lo*100:hi*100]) {
			t.Fatalf("[%d, %d]: ranged %d records from %d, whole %d from %d, model %d from %d", tl, th, a.N, a.First, b.N, b.First, hi-lo, lo)
		}
	}
	rst, wst := ranged.Stats(), whole.Stats()
	t.Logf("ranged %+v; whole chunk %+v", rst, wst)
	if rst.DataBytes*10 > wst.DataBytes {
		t.Fatalf("ranged GETs fetched %d bytes, whole chunks %d: not much fewer", rst.DataBytes, wst.DataBytes)
	}
}

// TestRemoteStreamEmpty: a stream with nothing uploaded has no records remotely; a stream that
// does not exist is an error.
func TestRemoteStreamEmpty(t *testing.T) {
	obj := newRecStore()
	st, err := OpenStore(t.TempDir(), storeOpts(obj, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := st.Create(StreamConfig{ID: 4, RecordBytes: 64, ValueOffset: NoValue})
	if err != nil {
		t.Fatal(err)
	}
	var ts int64
	appendRecords(t, s, nil, &ts, 10, 10)
	if _, err := OpenRemoteStream(context.Background(), obj, "t", 4, RemoteOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before any upload (no metadata object yet): %v", err)
	}
	if _, err := OpenRemoteStream(context.Background(), obj, "t", 5, RemoteOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a missing stream: %v", err)
	}
}

// TestRemoteSingleFlight: eight concurrent reads of one range, each GET slow, fetch its blocks
// once: the reads wait for the one GET in flight instead of issuing their own.
func TestRemoteSingleFlight(t *testing.T) {
	_, _, m, obj, _ := remoteFixture(t, Config{})
	rs, err := OpenRemoteStream(context.Background(), obj, "t", 11, RemoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.getDelay.Store(int64(50 * time.Millisecond))
	tl, th := m.ts[100000], m.ts[100999]
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := rs.ReadRange(tl, th)
			if err == nil && res.N != 1000 {
				err = fmt.Errorf("%d records, want 1000", res.N)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := rs.Stats()
	t.Logf("%+v", st)
	if st.DataGets > 2 {
		t.Fatalf("%d data GETs for eight concurrent reads of one range: no single flight", st.DataGets)
	}
}

// TestRemoteManifestOlderThanIndex: a reader that gets the manifest, then the last index node
// after the primary's next upload extended it (the node is re-put as it grows), reads the
// manifest's records — the node cut back to them — instead of refusing the stream as
// inconsistent (found by bench stream historical: DATA_LOSS "the uploaded index describes
// 9826 data blocks, the manifest 9728").
func TestRemoteManifestOlderThanIndex(t *testing.T) {
	obj := newRecStore()
	opts := storeOpts(obj, 0)
	opts.Stream.Index = Config{K: 3, N: 40} // chunk 0's 256 blocks end inside node 7
	st, err := OpenStore(t.TempDir(), opts)
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
	per := int(s.Layout().PerChunk)
	appendRecords(t, s, m, &ts, per+10, 64)
	waitFor(t, "chunk 0 uploaded", uploadedAll(st))
	ctx := context.Background()
	mkey := streamKey("t", 7, manifestName)
	old, err := obj.Get(ctx, mkey, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, s, m, &ts, per, 64)
	waitFor(t, "chunk 1 uploaded", uploadedAll(st))
	// The reader's view: the old manifest, the new index objects.
	if err := obj.ObjectStore.Put(ctx, mkey, old); err != nil {
		t.Fatal(err)
	}
	rs, err := OpenRemoteStream(ctx, obj, "t", 7, RemoteOptions{})
	if err != nil {
		t.Fatalf("open with a manifest older than the index: %v", err)
	}
	if rs.Len() != uint64(per) {
		t.Fatalf("remote stream has %d records, want chunk 0's %d", rs.Len(), per)
	}
	check(t, rs.s, m.truncate(rs.Len()), rand.New(rand.NewSource(2)), 30)
}
