package kawkab

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A node's stream store (thesis 5.3.2): the streams of one node in one directory, their chunks
// uploaded to the object store (the global store), local chunks deleted once uploaded while the
// local store is more than half full, appends slowed and then declined when it fills, reads
// through the buffer cache (the memory manager). docs/kawkab.md, "The node's store".

// Defaults of StoreOptions.
const (
	// DefaultUploadWorkers is the number of upload workers: 5.7.6 measures "270 MB/s upload
	// rate to Amazon S3 with eight worker threads and 4 MB object sizes".
	DefaultUploadWorkers = 8
	// DefaultStorePrefix is the object keys' prefix.
	DefaultStorePrefix = "kawkab"
	// DefaultHighWater is the fraction of the local capacity above which appends are slowed.
	DefaultHighWater = 0.90
	// DefaultMaxSlowdown bounds how long one append waits for uploads and deletion to free
	// space before it is admitted (below the capacity) or declined (at it).
	DefaultMaxSlowdown = time.Second
	// DefaultReadRangeBlocks is the blocks one ranged GET of a deleted chunk fetches at most
	// (16 blocks, 256 KiB).
	DefaultReadRangeBlocks = 16
	// DefaultReadParallelism bounds the ranged GETs one read has in flight.
	DefaultReadParallelism = 8
	// DefaultRetryBackoff and DefaultMaxRetryBackoff: a failed upload request is retried after
	// a wait that doubles from the first to the second.
	DefaultRetryBackoff    = 10 * time.Millisecond
	DefaultMaxRetryBackoff = 5 * time.Second
	// slowdownPollInterval is how often a slowed append looks at the local store's level.
	slowdownPollInterval = 2 * time.Millisecond
)

// ErrStoreFull is wrapped by the error for an append declined because the node's local store
// is at its capacity and uploads did not free space in time (the service maps it to
// ResourceExhausted; the client retries later).
var ErrStoreFull = errors.New("local store full")

// ErrStreamNotFound is wrapped by the error for a stream the store does not hold.
var ErrStreamNotFound = errors.New("stream not found")

// StoreOptions configure a Store.
type StoreOptions struct {
	// ObjectStore is the global store chunks are uploaded to (nil: none; then nothing is
	// uploaded or deleted, and the capacity only declines appends).
	ObjectStore ObjectStore
	// Prefix is the object keys' prefix ("" means DefaultStorePrefix): <prefix>/s<id>/….
	Prefix string
	// UploadWorkers is the number of upload workers (0: DefaultUploadWorkers).
	UploadWorkers int
	// CapacityBytes is the local store's capacity: the bytes of the streams' chunk files
	// (0: unlimited — no deletion, no backpressure).
	CapacityBytes int64
	// HighWater is the fraction of CapacityBytes above which appends are slowed (0:
	// DefaultHighWater); 0.5 < HighWater ≤ 1.
	HighWater float64
	// MaxSlowdown bounds one append's wait for space (0: DefaultMaxSlowdown).
	MaxSlowdown time.Duration
	// Cache is the node's buffer cache, shared by its streams (nil: reads go to the files).
	Cache *Cache
	// Clock is what retries and slowed appends wait on (nil: RealClock).
	Clock Clock
	// Stream are the streams' options (Index applies to streams Create creates).
	Stream StreamOptions
	// ReadRangeBlocks and ReadParallelism shape reads of deleted chunks: ranged GETs of at
	// most ReadRangeBlocks blocks, ReadParallelism at a time (0: the defaults).
	ReadRangeBlocks, ReadParallelism int
	// RetryBackoff and MaxRetryBackoff bound the waits between retries of a failed upload
	// request (0: the defaults).
	RetryBackoff, MaxRetryBackoff time.Duration
}

func (o StoreOptions) resolve() (StoreOptions, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultStorePrefix
	}
	if err := ValidatePrefix(o.Prefix); err != nil {
		return o, fmt.Errorf("kawkab: store: prefix: %w", err)
	}
	if o.UploadWorkers <= 0 {
		o.UploadWorkers = DefaultUploadWorkers
	}
	if o.HighWater == 0 {
		o.HighWater = DefaultHighWater
	}
	if o.HighWater <= 0.5 || o.HighWater > 1 {
		return o, fmt.Errorf("kawkab: store: high-water mark %v of the capacity, want more than 0.5 (deletion stops at half) and at most 1: %w", o.HighWater, ErrInvalidConfig)
	}
	if o.CapacityBytes < 0 {
		return o, fmt.Errorf("kawkab: store: capacity %d bytes: %w", o.CapacityBytes, ErrInvalidConfig)
	}
	if o.MaxSlowdown <= 0 {
		o.MaxSlowdown = DefaultMaxSlowdown
	}
	if o.Clock == nil {
		o.Clock = RealClock
	}
	if o.ReadRangeBlocks <= 0 {
		o.ReadRangeBlocks = DefaultReadRangeBlocks
	}
	if o.ReadParallelism <= 0 {
		o.ReadParallelism = DefaultReadParallelism
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.MaxRetryBackoff <= 0 {
		o.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	o.MaxRetryBackoff = max(o.MaxRetryBackoff, o.RetryBackoff)
	return o, nil
}

// StoreStats is a snapshot of a Store, for Figs. 5.8–5.9.
type StoreStats struct {
	// Cache is the buffer cache's (zero without one).
	Cache CacheStats
	// LocalBytes is what the streams' chunk files hold; CapacityBytes the local capacity
	// (0: unlimited). EvictableBytes is the part of LocalBytes uploaded and not yet deleted.
	LocalBytes, CapacityBytes, EvictableBytes int64
	// UploadQueue is the chunks full and not yet recorded as uploaded (in flight included);
	// UploadsInFlight those a worker is uploading.
	UploadQueue, UploadsInFlight int
	// Uploads counts data chunks uploaded (recorded in a manifest); UploadFailures failed
	// requests (each retried); UploadedBytes the bytes put (data, index, metadata, manifests).
	Uploads, UploadFailures, UploadedBytes uint64
	// LastUploadError is the last failed request's error ("" if none).
	LastUploadError string
	// AppendsSlowed counts appends that waited for space; AppendsDeclined those refused
	// with ErrStoreFull.
	AppendsSlowed, AppendsDeclined uint64
	// DeletedChunks and DeletedBytes count local data chunks deleted after their upload.
	DeletedChunks, DeletedBytes uint64
	// ObjectGets and ObjectGetBytes count reads of deleted chunks from the object store.
	ObjectGets, ObjectGetBytes uint64
}

// Store is a node's streams (thesis 5.3.2): their local chunks in one directory, uploads of
// full chunks to the object store, deletion of uploaded chunks, backpressure, and the buffer
// cache in their reads. It is safe for concurrent use.
type Store struct {
	dir string
	opt StoreOptions
	// halfBytes and highBytes are the deletion and slowdown thresholds (0: none).
	halfBytes, highBytes int64

	ctx    context.Context // canceled by Close: stops retries and waits
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// used is the bytes of the streams' chunk files.
	used atomic.Int64

	mu      sync.Mutex
	wake    *sync.Cond // workers wait for work on it
	closed  bool
	streams map[uint64]*Stream
	tiers   []*streamTier // streams with a tier, for the workers' round robin
	rr      int
	// lru is the uploaded local chunks, most recently used at the front (*lruChunk values);
	// lruOf finds a chunk's element.
	lru       *list.List
	lruOf     map[chunkID]*list.Element
	evictable int64
	inflight  int
	reclaimCh chan struct{}

	uploads, uploadFailures, uploadedBytes atomic.Uint64
	slowed, declined                       atomic.Uint64
	deleted, deletedBytes                  atomic.Uint64
	lastErr                                atomic.Pointer[string]
	reads                                  readStats
}

type chunkID struct {
	stream, chunk uint64
}

type lruChunk struct {
	t     *streamTier
	chunk uint64
	bytes int64
}

// OpenStore opens (creating it if needed) the store in dir and every stream in it, recovering
// each: what its manifest says is uploaded, local chunks deleted after their upload, full
// chunks not yet uploaded queued again.
func OpenStore(dir string, opt StoreOptions) (*Store, error) {
	opt, err := opt.resolve()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kawkab: open store: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &Store{
		dir: dir, opt: opt, ctx: ctx, cancel: cancel,
		streams:   map[uint64]*Stream{},
		lru:       list.New(),
		lruOf:     map[chunkID]*list.Element{},
		reclaimCh: make(chan struct{}, 1),
	}
	st.wake = sync.NewCond(&st.mu)
	if opt.CapacityBytes > 0 {
		st.halfBytes = opt.CapacityBytes / 2
		st.highBytes = int64(float64(opt.CapacityBytes) * opt.HighWater)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kawkab: open store: %w", err)
	}
	if opt.ObjectStore != nil {
		for range opt.UploadWorkers {
			st.wg.Add(1)
			go st.worker()
		}
		st.wg.Add(1)
		go st.deleter()
	}
	for _, e := range entries {
		id, ok := parseStreamDirName(e.Name())
		if !ok || !e.IsDir() {
			continue // not a stream: the directory may hold other things
		}
		if _, err := st.Open(id); err != nil {
			if errors.Is(err, ErrStreamNotFound) {
				continue // a creation interrupted before the metadata: Create reuses it
			}
			return nil, errors.Join(fmt.Errorf("kawkab: open store %s: %w", dir, err), st.Close())
		}
	}
	return st, nil
}

func parseStreamDirName(name string) (uint64, bool) {
	if len(name) < 2 || name[0] != 's' {
		return 0, false
	}
	id, err := strconv.ParseUint(name[1:], 10, 64)
	if err != nil || strconv.FormatUint(id, 10) != name[1:] {
		return 0, false
	}
	return id, true
}

// Create creates stream cfg.ID (CreateStream) in the store and opens it. A stream the object
// store already holds uploads of is refused (ErrStreamExists).
func (st *Store) Create(cfg StreamConfig) (*Stream, error) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, fmt.Errorf("kawkab: create stream %d: store closed: %w", cfg.ID, ErrStreamClosed)
	}
	if _, ok := st.streams[cfg.ID]; ok {
		st.mu.Unlock()
		return nil, fmt.Errorf("kawkab: create stream %d: %w", cfg.ID, ErrStreamExists)
	}
	st.mu.Unlock()
	t, err := st.newTier(cfg.ID)
	if err != nil {
		return nil, err
	}
	if t.manifest.Chunks > 0 {
		return nil, fmt.Errorf("kawkab: create stream %d: the object store holds %d uploaded chunks of it (%s): %w",
			cfg.ID, t.manifest.Chunks, streamKey(st.opt.Prefix, cfg.ID, manifestName), ErrStreamExists)
	}
	opt := st.opt.Stream
	opt.tier = t
	s, err := CreateStream(st.dir, cfg, opt)
	if err != nil {
		return nil, err
	}
	return s, st.add(s)
}

// Open returns stream id, opening (recovering) it if it is not open.
func (st *Store) Open(id uint64) (*Stream, error) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, fmt.Errorf("kawkab: open stream %d: store closed: %w", id, ErrStreamClosed)
	}
	if s, ok := st.streams[id]; ok {
		st.mu.Unlock()
		return s, nil
	}
	st.mu.Unlock()
	if _, err := os.Stat(filepath.Join(st.dir, StreamDirName(id), metaName)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("kawkab: open stream %d: %w", id, ErrStreamNotFound)
	}
	t, err := st.newTier(id)
	if err != nil {
		return nil, err
	}
	opt := st.opt.Stream
	opt.tier = t
	s, err := OpenStream(st.dir, id, opt)
	if err != nil {
		return nil, err
	}
	return s, st.add(s)
}

// add registers an opened stream and starts its uploads.
func (st *Store) add(s *Stream) error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return errors.Join(fmt.Errorf("kawkab: stream %d: store closed: %w", s.cfg.ID, ErrStreamClosed), s.Close())
	}
	if _, ok := st.streams[s.cfg.ID]; ok { // opened twice concurrently: the lock refuses the second
		st.mu.Unlock()
		return errors.Join(fmt.Errorf("kawkab: stream %d: opened twice: %w", s.cfg.ID, ErrStreamLocked), s.Close())
	}
	st.streams[s.cfg.ID] = s
	t := s.tier
	st.tiers = append(st.tiers, t)
	for c := uint64(0); c < t.uploaded && c+1 < t.localChunks; c++ {
		st.addEvictableLocked(t, c) // not if gone
	}
	st.wake.Broadcast()
	st.mu.Unlock()
	st.kickReclaim()
	return nil
}

// Stream returns stream id if it is open.
func (st *Store) Stream(id uint64) (*Stream, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.streams[id]
	return s, ok
}

// Streams returns the open streams' IDs.
func (st *Store) Streams() []uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	ids := make([]uint64, 0, len(st.streams))
	for id := range st.streams {
		ids = append(ids, id)
	}
	return ids
}

// Close stops the uploads (chunks not yet uploaded are queued again at the next open) and
// closes every stream.
func (st *Store) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	st.closed = true
	st.cancel()
	st.wake.Broadcast()
	st.mu.Unlock()
	st.wg.Wait()
	st.mu.Lock()
	streams := make([]*Stream, 0, len(st.streams))
	for _, s := range st.streams {
		streams = append(streams, s)
	}
	st.mu.Unlock()
	var errs []error
	for _, s := range streams {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// Stats is a snapshot of the store.
func (st *Store) Stats() StoreStats {
	var ss StoreStats
	if st.opt.Cache != nil {
		ss.Cache = st.opt.Cache.Stats()
	}
	st.mu.Lock()
	ss.EvictableBytes = st.evictable
	ss.UploadsInFlight = st.inflight
	for _, t := range st.tiers {
		ss.UploadQueue += int(t.full - t.uploaded)
	}
	st.mu.Unlock()
	ss.LocalBytes = st.used.Load()
	ss.CapacityBytes = st.opt.CapacityBytes
	ss.Uploads = st.uploads.Load()
	ss.UploadFailures = st.uploadFailures.Load()
	ss.UploadedBytes = st.uploadedBytes.Load()
	if p := st.lastErr.Load(); p != nil {
		ss.LastUploadError = *p
	}
	ss.AppendsSlowed = st.slowed.Load()
	ss.AppendsDeclined = st.declined.Load()
	ss.DeletedChunks = st.deleted.Load()
	ss.DeletedBytes = st.deletedBytes.Load()
	ss.ObjectGets = st.reads.gets.Load()
	ss.ObjectGetBytes = st.reads.getBytes.Load()
	return ss
}

// ---------------------------------------------------------------------------------------------
// Backpressure (beyond the thesis, which declines appends when the local store is full)
// ---------------------------------------------------------------------------------------------

// admit lets an append of n bytes in: at once while the local store stays at or below the
// high-water mark; above it the append is slowed — it waits, at most MaxSlowdown, for uploads
// and deletion to bring the store back below the mark — and then goes in if the store has room
// for it below the capacity, or is declined with ErrStoreFull. Slowing appends spreads the
// excess over time and lets the uploads catch up; declining at the capacity keeps the disk
// from filling (docs/kawkab.md, "Backpressure"). The thesis only declines, and only appends
// that need a new chunk (5.7.1, Fig. 5.9); here every append's bytes count, so a batch larger
// than the room left below the capacity is declined even if it would not start a chunk.
func (st *Store) admit(id uint64, n int64) error {
	if st.highBytes <= 0 || st.used.Load()+n <= st.highBytes {
		return nil
	}
	st.slowed.Add(1)
	st.kickReclaim()
	clock := st.opt.Clock
	deadline := clock.Now().Add(st.opt.MaxSlowdown)
	maxPolls := int(st.opt.MaxSlowdown/slowdownPollInterval) + 1
	for range maxPolls {
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			break
		}
		if clock.Sleep(st.ctx, min(left, slowdownPollInterval)) != nil {
			break // the store is closing
		}
		if st.used.Load()+n <= st.highBytes {
			return nil
		}
	}
	used := st.used.Load()
	if used+n <= st.opt.CapacityBytes {
		return nil
	}
	st.declined.Add(1)
	return fmt.Errorf("kawkab: stream %d: append of %d bytes: the local store holds %d of its %d bytes and uploads did not free room within %v: %w",
		id, n, used, st.opt.CapacityBytes, st.opt.MaxSlowdown, ErrStoreFull)
}

// ---------------------------------------------------------------------------------------------
// Local deletion (5.3.2: uploaded chunks are deleted while the local store is more than half
// full, least recently used first)
// ---------------------------------------------------------------------------------------------

func (st *Store) addEvictableLocked(t *streamTier, c uint64) {
	id := chunkID{t.s.cfg.ID, c}
	if _, ok := st.lruOf[id]; ok || t.isGone(c) {
		return
	}
	e := &lruChunk{t: t, chunk: c, bytes: t.s.lay.FullChunkFileBytes()}
	st.lruOf[id] = st.lru.PushFront(e)
	st.evictable += e.bytes
}

func (st *Store) removeEvictableLocked(id chunkID) *lruChunk {
	el, ok := st.lruOf[id]
	if !ok {
		return nil
	}
	e := st.lru.Remove(el).(*lruChunk)
	delete(st.lruOf, id)
	st.evictable -= e.bytes
	return e
}

// touch marks local chunk c of stream id used (a read).
func (st *Store) touch(id, c uint64) {
	st.mu.Lock()
	if el, ok := st.lruOf[chunkID{id, c}]; ok {
		st.lru.MoveToFront(el)
	}
	st.mu.Unlock()
}

func (st *Store) kickReclaim() {
	select {
	case st.reclaimCh <- struct{}{}:
	default:
	}
}

// deleter deletes uploaded chunks when asked, until the store closes.
func (st *Store) deleter() {
	defer st.wg.Done()
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-st.reclaimCh:
			st.reclaim()
		}
	}
}

// reclaim deletes uploaded local chunks, least recently used first (5.3.2: "the transferred
// chunks are deleted from the local store based on LRU policy"), while the local store is
// more than half full (5.7.1: "until the local store reaches half of its capacity, no chunks
// are deleted"). A chunk is deletable once its upload is in the local manifest (so the
// object store's manifest has it too) and the chunk after it exists locally (the last data
// chunk file stays: recovery counts records from it); one that is not yet goes back to the
// front. At most one pass over the list per call.
func (st *Store) reclaim() {
	if st.halfBytes <= 0 {
		return
	}
	st.mu.Lock()
	passes := st.lru.Len()
	st.mu.Unlock()
	for range passes {
		if st.used.Load() <= st.halfBytes || st.ctx.Err() != nil {
			return
		}
		st.mu.Lock()
		el := st.lru.Back()
		if el == nil {
			st.mu.Unlock()
			return
		}
		e := el.Value.(*lruChunk)
		t, c := e.t, e.chunk
		if !t.deletable(c) {
			st.lru.MoveToFront(el)
			st.mu.Unlock()
			continue
		}
		st.removeEvictableLocked(chunkID{t.s.cfg.ID, c})
		t.setGone(c, true) // reads of c go to the object store from now on
		st.mu.Unlock()
		if err := t.deleteLocal(c); err != nil {
			st.mu.Lock()
			t.setGone(c, false)
			st.addEvictableLocked(t, c)
			st.mu.Unlock()
			st.noteErr(err)
			return
		}
	}
}

func (st *Store) noteErr(err error) {
	s := err.Error()
	st.lastErr.Store(&s)
}

// ---------------------------------------------------------------------------------------------
// Uploads (5.3.2 "Global Store Service": full chunks are uploaded by a pool of workers)
// ---------------------------------------------------------------------------------------------

// maxInflightPerStream bounds the chunks of one stream being uploaded at once beyond its
// manifest (they are recorded in order, so a slow one holds the others' manifest back).
// maxUncommittedChunks bounds a stream's chunks put and not yet in its manifest.
const maxUncommittedChunks = 64

func (st *Store) maxInflightPerStream() uint64 { return uint64(st.opt.UploadWorkers) }

// worker uploads chunks until the store closes: it takes the next chunk of the next stream
// with work (round robin), puts it, and records the stream's uploaded prefix.
func (st *Store) worker() {
	defer st.wg.Done()
	for {
		st.mu.Lock()
		var t *streamTier
		var c uint64
		for t == nil && !st.closed {
			for i := range st.tiers {
				u := st.tiers[(st.rr+i)%len(st.tiers)]
				// In flight: handed to a worker and not yet put. Put chunks wait for their
				// commit (startCommit) without holding a worker, at most
				// maxUncommittedChunks of them per stream.
				inflight := u.queued - u.uploaded - uint64(len(u.done))
				if !u.detached && !u.abandoned && u.queued < u.full && inflight < st.maxInflightPerStream() && len(u.done) < maxUncommittedChunks {
					t, c = u, u.queued
					u.queued++
					st.rr = (st.rr + i + 1) % len(st.tiers)
					break
				}
			}
			if t == nil && !st.closed {
				st.wake.Wait()
			}
		}
		if st.closed {
			st.mu.Unlock()
			return
		}
		st.inflight++
		st.mu.Unlock()

		err := t.uploadChunk(c)
		st.mu.Lock()
		st.inflight--
		if err != nil {
			// Closed or failed stream, or the store closing: the chunk is queued again when
			// the stream is next opened.
			if t.queued > c {
				t.queued = c
			}
			t.abandoned = true
			st.mu.Unlock()
			continue
		}
		t.done[c] = true
		st.mu.Unlock()
		st.startCommit(t)
	}
}

// startCommit records a stream's put chunks in its manifest in the background, so that the
// upload worker goes on with the next data chunk while the commit's requests (the index chunk
// and the manifest: two first-byte latencies of S3 each) are in flight, and chunks put
// meanwhile share one commit. At most one committer runs per stream: a call while one runs
// makes it commit once more. Without it, one upload worker spent most of its time on the
// commits' latencies (Fig. 5.9 at one worker moved 13.6 MB/s of the model's 33.75).
func (st *Store) startCommit(t *streamTier) {
	st.mu.Lock()
	if t.committing {
		t.commitAgain = true
		st.mu.Unlock()
		return
	}
	t.committing = true
	st.wg.Add(1) // the caller is a worker, counted in wg: Close cannot be waiting for zero
	st.mu.Unlock()
	go func() {
		defer st.wg.Done()
		// Bounded: each pass follows a call that found a committer running.
		for {
			err := t.commit()
			st.mu.Lock()
			if err != nil {
				t.abandoned = true
			}
			st.wake.Broadcast() // the stream's in-flight bound may allow more
			if err != nil || !t.commitAgain {
				t.committing, t.commitAgain = false, false
				st.mu.Unlock()
				return
			}
			t.commitAgain = false
			st.mu.Unlock()
		}
	}()
}

// retry runs f until it succeeds, waiting between attempts (doubling from RetryBackoff to
// MaxRetryBackoff) and counting failures. It gives up when the store closes or f's error
// cannot be cured by retrying (a closed or failed stream, an invalid key).
func (st *Store) retry(f func() error) error {
	wait := st.opt.RetryBackoff
	for {
		err := f()
		if err == nil {
			return nil
		}
		if st.ctx.Err() != nil || errors.Is(err, ErrStreamClosed) || errors.Is(err, ErrStreamFailed) || errors.Is(err, ErrInvalidKey) {
			return err
		}
		st.uploadFailures.Add(1)
		st.noteErr(err)
		if st.opt.Clock.Sleep(st.ctx, wait) != nil {
			return err
		}
		wait = min(2*wait, st.opt.MaxRetryBackoff)
	}
}

func (st *Store) put(key string, data []byte) error {
	return st.retry(func() error {
		if err := st.opt.ObjectStore.Put(st.ctx, key, data); err != nil {
			return fmt.Errorf("kawkab: upload %s: %w", key, err)
		}
		st.uploadedBytes.Add(uint64(len(data)))
		return nil
	})
}

// ---------------------------------------------------------------------------------------------
// A stream's part of the store
// ---------------------------------------------------------------------------------------------

// streamTier is one stream's uploads and deletions. Each field says what guards it.
type streamTier struct {
	st *Store
	s  *Stream
	id uint64
	// manifest is what the object store's manifest (or the local copy) said at open.
	manifest Manifest
	// commitMu serializes the stream's manifest updates.
	commitMu sync.Mutex
	// nodesUp is the index nodes in the object store's manifest; metaUp that the metadata
	// object is there. Guarded by commitMu.
	nodesUp uint64
	metaUp  bool

	// Guarded by st.mu:
	uploaded    uint64          // chunks in the manifest (local copy written): deletable
	full        uint64          // chunks full and visible: uploadable
	queued      uint64          // chunks handed to workers
	done        map[uint64]bool // chunks put, not yet in the manifest
	localChunks uint64          // data chunk files at open (the last one is never deleted)
	detached    bool            // the stream closed
	abandoned   bool            // an upload gave up (closed or failed stream)
	// committing: a committer goroutine runs commit for the stream; commitAgain: chunks
	// were put while it ran, so it runs commit once more.
	committing, commitAgain bool

	// fullSeen is the full chunks the stream has announced (guarded by the stream's xmu).
	fullSeen uint64

	// gone is the local chunks deleted after their upload, read by every read of the
	// stream: under its own lock (taken after st.mu when both are).
	gmu  sync.RWMutex
	gone map[uint64]bool
}

func (t *streamTier) isGone(c uint64) bool {
	t.gmu.RLock()
	defer t.gmu.RUnlock()
	return t.gone[c]
}

func (t *streamTier) setGone(c uint64, gone bool) {
	t.gmu.Lock()
	defer t.gmu.Unlock()
	if gone {
		t.gone[c] = true
	} else {
		delete(t.gone, c)
	}
}

// newTier reads what is uploaded of stream id: the object store's manifest, else (the object
// store unreachable) the local copy, which is never ahead of it.
func (st *Store) newTier(id uint64) (*streamTier, error) {
	t := &streamTier{st: st, id: id, done: map[uint64]bool{}, gone: map[uint64]bool{}}
	var local *Manifest
	if b, err := os.ReadFile(filepath.Join(st.dir, StreamDirName(id), manifestName)); err == nil {
		m, err := decodeManifest(b)
		if err != nil {
			return nil, fmt.Errorf("kawkab: open stream %d: local manifest: %w", id, err)
		}
		local = &m
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("kawkab: open stream %d: read local manifest: %w", id, err)
	}
	if st.opt.ObjectStore != nil {
		key := streamKey(st.opt.Prefix, id, manifestName)
		b, err := st.opt.ObjectStore.Get(st.ctx, key, 0, -1)
		switch {
		case err == nil:
			m, err := decodeManifest(b)
			if err != nil {
				return nil, fmt.Errorf("kawkab: open stream %d: %s: %w", id, key, err)
			}
			if local != nil && local.Chunks > m.Chunks {
				return nil, fmt.Errorf("kawkab: open stream %d: the object store's manifest has %d chunks, the local copy %d: the object store lost uploads: %w",
					id, m.Chunks, local.Chunks, ErrCorrupt)
			}
			t.manifest, t.metaUp = m, true
		case errors.Is(err, ErrNotFound):
			if local != nil && local.Chunks > 0 {
				return nil, fmt.Errorf("kawkab: open stream %d: the local manifest has %d uploaded chunks, but %s is missing: the object store lost uploads: %w",
					id, local.Chunks, key, ErrCorrupt)
			}
		default:
			if local == nil {
				return nil, fmt.Errorf("kawkab: open stream %d: read %s: %w", id, key, err)
			}
			// The local copy is never ahead of the object store's: uploads resume from it
			// (putting again what is there already).
			st.noteErr(err)
			t.manifest = *local
		}
	} else if local != nil {
		t.manifest = *local
	}
	if t.manifest.Chunks > 0 && t.manifest.StreamID != id {
		return nil, fmt.Errorf("kawkab: open stream %d: the manifest is stream %d's: %w", id, t.manifest.StreamID, ErrCorrupt)
	}
	t.uploaded, t.queued, t.nodesUp = t.manifest.Chunks, t.manifest.Chunks, t.manifest.Nodes
	return t, nil
}

// attach binds the tier to its stream (OpenStream, before recovery): the manifest must match
// the metadata, and reads of chunks deleted after their upload go to the object store.
func (t *streamTier) attach(s *Stream) error {
	t.s = s
	m := t.manifest
	if m.Chunks > 0 && (m.RecordBytes != s.lay.R || m.IndexN != s.icfg.N) {
		return fmt.Errorf("the manifest says %d-byte records and %d index entries per node, the metadata %d and %d: %w",
			m.RecordBytes, m.IndexN, s.lay.R, s.icfg.N, ErrCorrupt)
	}
	st := t.st
	s.br = &blockReader{
		id: s.cfg.ID, lay: s.lay, cache: st.opt.Cache, local: s.cs,
		gone:        t.isGone,
		touch:       func(c uint64) { st.touch(s.cfg.ID, c) },
		obj:         st.opt.ObjectStore,
		prefix:      st.opt.Prefix,
		ctx:         st.ctx,
		rangeBlocks: st.opt.ReadRangeBlocks,
		parallel:    st.opt.ReadParallelism,
		spawn:       goSpawn,
		stats:       &st.reads,
	}
	s.nf.cache = st.opt.Cache
	return nil
}

// localChunks checks the data chunk files at recovery: chunks before the last may be missing
// only if they are uploaded (deleted after their upload); it returns the number of chunks
// (the last file's number + 1) and records the missing ones as gone.
func (t *streamTier) checkLocalChunks(data map[uint64]int64, dir string) (uint64, error) {
	var C uint64
	for c := range data {
		C = max(C, c+1)
	}
	U := t.manifest.Chunks
	if C < U {
		return 0, fmt.Errorf("kawkab: stream directory %s: %d data chunks are uploaded but the last local one is %d (the last local chunk is never deleted): %w",
			dir, U, int64(C)-1, ErrCorrupt)
	}
	var missing []string
	for c := uint64(0); c < C; c++ {
		if _, ok := data[c]; ok {
			continue
		}
		if c < U {
			t.gone[c] = true
			continue
		}
		if len(missing) < 5 {
			missing = append(missing, strconv.FormatUint(c, 10))
		}
	}
	if len(missing) > 0 {
		return 0, fmt.Errorf("kawkab: stream directory %s: data chunk %d exists but chunk(s) %s before it are missing and not uploaded (%d are): %w",
			dir, C-1, strings.Join(missing, ", "), U, ErrCorrupt)
	}
	t.localChunks = C
	return C, nil
}

// started is called when the stream is recovered: it counts the local bytes and queues the
// full chunks not yet uploaded.
func (t *streamTier) started() error {
	s := t.s
	l, err := listChunks(s.cs.dir)
	if err != nil {
		return err
	}
	var bytes int64
	for _, n := range l.data {
		bytes += n
	}
	for _, n := range l.index {
		bytes += n
	}
	t.st.used.Add(bytes)
	s.localBytes.Store(bytes)
	s.nf.grow = t.grow
	full := s.visible / s.lay.PerChunk
	t.fullSeen = full
	t.st.mu.Lock()
	t.full = full
	t.st.mu.Unlock()
	return nil
}

// grow counts n more local bytes of the stream.
func (t *streamTier) grow(n int64) {
	used := t.st.used.Add(n)
	t.s.localBytes.Add(n)
	if n > 0 && t.st.halfBytes > 0 && used > t.st.halfBytes {
		t.st.kickReclaim() // more than half full: delete uploaded chunks
	}
}

// chunksFull is called (under the stream's xmu) when the stream's visible records complete
// chunks: they are queued for upload.
func (t *streamTier) chunksFull(full uint64) {
	t.st.mu.Lock()
	t.full = max(t.full, full)
	t.st.wake.Broadcast()
	t.st.mu.Unlock()
}

// detach is called when the stream closes: its uploads stop (they resume at the next open).
func (t *streamTier) detach() {
	st := t.st
	st.mu.Lock()
	defer st.mu.Unlock()
	t.detached = true
	for c := range t.uploaded {
		st.removeEvictableLocked(chunkID{t.id, c})
	}
	for i, u := range st.tiers {
		if u == t {
			st.tiers = append(st.tiers[:i], st.tiers[i+1:]...)
			break
		}
	}
	if st.streams[t.id] == t.s {
		delete(st.streams, t.id)
	}
}

// deletable reports whether uploaded chunk c may be deleted: the chunk after it exists (so c
// is not the last chunk file) and the stream is open.
func (t *streamTier) deletable(c uint64) bool {
	return !t.detached && t.s.dataWritten.Load() > (c+1)*t.s.lay.PerChunk
}

// deleteLocal deletes local data chunk c (uploaded and marked gone).
func (t *streamTier) deleteLocal(c uint64) error {
	s := t.s
	path := s.cs.path(DataChunkName(c))
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("kawkab: stream %d: delete uploaded %s: %w", s.cfg.ID, DataChunkName(c), err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("kawkab: stream %d: delete uploaded %s: %w", s.cfg.ID, DataChunkName(c), err)
	}
	s.cs.files.drop(fileKey{'d', c}) // its space is freed when the last reader closes it
	t.grow(-info.Size())
	t.st.deleted.Add(1)
	t.st.deletedBytes.Add(uint64(info.Size()))
	return nil
}

// uploadChunk puts data chunk c: the chunk file's bytes, once the chunk and the index nodes
// describing it are durable locally (at AckMemory they may not be yet; the index must be,
// since recovery of a stream whose chunk was deleted cannot re-index it from local data).
func (t *streamTier) uploadChunk(c uint64) error {
	s, st := t.s, t.st
	key := streamKey(st.opt.Prefix, t.id, DataChunkName(c))
	return st.retry(func() error {
		if err := s.failure(); err != nil {
			return err
		}
		if err := s.syncData((c + 1) * s.lay.PerChunk); err != nil {
			return fmt.Errorf("kawkab: stream %d: upload %s: %w: %w", t.id, key, ErrStreamFailed, err)
		}
		if err := s.nf.sync(); err != nil {
			return fmt.Errorf("kawkab: stream %d: upload %s: %w: %w", t.id, key, ErrStreamFailed, err)
		}
		data := make([]byte, s.lay.FullChunkFileBytes())
		if err := s.cs.readAt(fileKey{'d', c}, data, 0); err != nil {
			if errors.Is(err, ErrStreamClosed) || errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("kawkab: stream %d: upload %s: %w: %w", t.id, key, ErrStreamClosed, err)
			}
			return err
		}
		if err := st.opt.ObjectStore.Put(st.ctx, key, data); err != nil {
			return fmt.Errorf("kawkab: upload %s: %w", key, err)
		}
		st.uploadedBytes.Add(uint64(len(data)))
		return nil
	})
}

// commit records in the manifest the longest prefix of chunks put: it puts the metadata
// object (once), the index chunk objects holding the nodes that describe the prefix (the last
// of them cut to it), the manifest, and then the local copy; the chunks become deletable.
func (t *streamTier) commit() error {
	t.commitMu.Lock()
	defer t.commitMu.Unlock()
	s, st := t.s, t.st
	for range 1 << 20 { // each pass records at least one more chunk
		st.mu.Lock()
		from := t.uploaded
		to := from
		for t.done[to] {
			to++
		}
		st.mu.Unlock()
		if to == from {
			return nil
		}
		m := manifestFor(t.id, s.lay, s.icfg.N, to)
		mb, err := encodeManifest(m)
		if err != nil {
			return err
		}
		if !t.metaUp {
			meta, err := os.ReadFile(s.cs.path(metaName))
			if err != nil {
				return fmt.Errorf("kawkab: stream %d: upload metadata: %w", t.id, err)
			}
			if err := st.put(streamKey(st.opt.Prefix, t.id, metaName), meta); err != nil {
				return err
			}
			t.metaUp = true
		}
		if err := t.putIndex(m); err != nil {
			return err
		}
		if err := st.put(streamKey(st.opt.Prefix, t.id, manifestName), mb); err != nil {
			return err
		}
		t.nodesUp = m.Nodes
		if err := t.writeLocalManifest(mb); err != nil {
			return err
		}
		st.mu.Lock()
		for c := from; c < to; c++ {
			delete(t.done, c)
			if !t.detached {
				st.addEvictableLocked(t, c)
			}
		}
		t.uploaded = to
		st.uploads.Add(to - from) // under mu: a snapshot with the queue empty counts them
		st.mu.Unlock()
		st.kickReclaim()
	}
	return nil
}

// putIndex puts the index chunk objects holding nodes nodesUp … m.Nodes: each as its local
// file holds it up to node m.Nodes, which is cut to the uploaded blocks and sealed (it goes
// on past them locally). Node j is at ((j−1) mod 256)·16 KiB of i<(j−1)/256>, as locally.
func (t *streamTier) putIndex(m Manifest) error {
	s, st := t.s, t.st
	J := m.Nodes
	if J == 0 {
		return nil
	}
	first := max(t.nodesUp, 1)
	for ic := (first - 1) / ChunkBlocks; ic <= (J-1)/ChunkBlocks; ic++ {
		nodes := min(J-ic*ChunkBlocks, ChunkBlocks)
		buf := make([]byte, nodes*BlockBytes)
		// The last node may be the index's last, which appends put again: read it whole.
		s.xmu.RLock()
		err := s.cs.readAt(fileKey{'i', ic}, buf, 0)
		s.xmu.RUnlock()
		if err != nil {
			return fmt.Errorf("kawkab: stream %d: upload index chunk %d: %w", t.id, ic, err)
		}
		if (J-1)/ChunkBlocks == ic {
			last := buf[(nodes-1)*BlockBytes:]
			nd, err := UnmarshalNode(last)
			if err != nil {
				return fmt.Errorf("kawkab: stream %d: upload index node %d: %w", t.id, J, err)
			}
			keep := int(m.Chunks*ChunkBlocks - (J-1)*uint64(s.icfg.N))
			if keep > len(nd.Body) || (keep == len(nd.Body) && nd.Open) {
				return fmt.Errorf("kawkab: stream %d: upload index node %d: it describes %d data blocks (open=%v), the %d uploaded chunks need %d sealed: %w",
					t.id, J, len(nd.Body), nd.Open, m.Chunks, keep, ErrCorrupt)
			}
			if keep < len(nd.Body) || nd.Open {
				nd.Body, nd.Open = nd.Body[:keep], false
				b, err := MarshalNode(nd)
				if err != nil {
					return fmt.Errorf("kawkab: stream %d: upload index node %d cut to %d entries: %w", t.id, J, keep, err)
				}
				copy(last, b)
			}
		}
		if err := st.put(streamKey(st.opt.Prefix, t.id, IndexChunkName(ic)), buf); err != nil {
			return err
		}
	}
	return nil
}

// writeLocalManifest writes the local copy of the manifest: temp file, fsync, rename, fsync
// of the directory. It governs deletion, so it is never ahead of the object store's.
func (t *streamTier) writeLocalManifest(b []byte) error {
	s := t.s
	tmp := s.cs.path(manifestTmpName)
	if err := writeFileSynced(tmp, b, s.cs.sync); err != nil {
		return fmt.Errorf("kawkab: stream %d: write local manifest: %w", t.id, err)
	}
	if err := os.Rename(tmp, s.cs.path(manifestName)); err != nil {
		return fmt.Errorf("kawkab: stream %d: write local manifest: %w", t.id, err)
	}
	return s.cs.syncDir()
}
