package kawkab

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// The stream engine: appends to a stream's local chunk files with the time index built as
// they go, acknowledged at the stream's level; reads by record number, by time range, and
// aggregates; recovery from the files alone. docs/kawkab.md, "The stream engine".

// Limits.
const (
	// MaxBatchBytes bounds an append's batch (64 MiB, n×R bytes): the batch is the caller's
	// buffer, held (not copied) until it is acknowledged, so it bounds the memory an
	// appender pins.
	MaxBatchBytes = 64 << 20
	// MaxReadBytes bounds the records a read returns (64 MiB): ReadRecords and ReadRange
	// return at most MaxReadBytes/R records (StreamOptions.MaxReadRecords lowers it).
	MaxReadBytes = 64 << 20
	// maxPendingBatches bounds the group-commit queue: an AckLocal appender whose batch
	// would be the next beyond it waits (holding the writer) until a commit takes the queue.
	// Every queued batch has its appender blocked in Append, so the queue is also bounded by
	// the number of appenders.
	maxPendingBatches = 1024
	// maxKeptWriteBuffer bounds the buffer a stream keeps between appends for laying out
	// blocks with unused tails (a batch's part in one chunk is copied there, up to 4 MiB).
	maxKeptWriteBuffer = 64 << 10
)

var (
	// ErrInvalidBatch is wrapped by the error for a batch that is empty, too large or not a
	// whole number of records. (A batch whose timestamps go back wraps ErrOutOfOrder.)
	ErrInvalidBatch = errors.New("invalid batch")
	// ErrOutOfRange is wrapped by the error for a read that starts after the stream's end.
	ErrOutOfRange = errors.New("record number out of range")
	// ErrReadTooLarge is wrapped by the error for a read of more records than the limit.
	ErrReadTooLarge = errors.New("read too large")
	// ErrStreamClosed is wrapped by the error for an operation on a closed stream.
	ErrStreamClosed = errors.New("stream closed")
	// ErrStreamFailed is wrapped by every append's error after a write or fsync failed:
	// what was written since the last acknowledgement is in doubt, so the stream takes no
	// more appends; reopening it (recovery) finds what the files hold.
	ErrStreamFailed = errors.New("stream failed")
	// ErrStreamExists is wrapped by CreateStream's error for a stream that exists.
	ErrStreamExists = errors.New("stream exists")
	// ErrStreamLocked is wrapped by OpenStream's error for a stream open elsewhere.
	ErrStreamLocked = errors.New("stream is open by another writer")
	// ErrCorrupt is wrapped by OpenStream's error when the stream's files contradict each
	// other (a missing chunk, a short chunk before the last, an index ahead of the data, an
	// index entry that does not describe its block); recovery refuses them rather than guess.
	ErrCorrupt = errors.New("stream files are inconsistent")
)

// StreamOptions are a stream's run-time options (not stored).
type StreamOptions struct {
	// Sync fsyncs a file or a directory; nil means (*os.File).Sync. Tests count or slow
	// fsyncs with it.
	Sync func(*os.File) error
	// MaxOpenFiles bounds the stream's idle open chunk files; 0 means DefaultMaxOpenFiles.
	MaxOpenFiles int
	// MaxReadRecords lowers the records a read returns (0: MaxReadBytes/R).
	MaxReadRecords int
	// MaxReadBytes lowers the bytes a read returns, for options shared by streams of
	// several record sizes (0: MaxReadBytes); a read returns at least one record.
	MaxReadBytes int
	// Index is the index geometry of a stream CreateStream creates (zero: the default, k = 3
	// and n = 289 in 16 KiB blocks); the block size must be BlockBytes. It is stored in the
	// metadata; OpenStream ignores this field.
	Index Config

	// tier is the stream's part of a Store (uploads, deletion, backpressure, the cache in
	// reads); nil for a stream opened on its own.
	tier *streamTier
}

func (o StreamOptions) syncFunc() func(*os.File) error {
	if o.Sync != nil {
		return o.Sync
	}
	return (*os.File).Sync
}

// RecoveryInfo says what OpenStream found and repaired.
type RecoveryInfo struct {
	// Records is the stream's length after recovery.
	Records uint64
	// CutBytes are the bytes cut from the end of the last data chunk: a torn last record, a
	// partly written block tail, and the CutRecords.
	CutBytes int64
	// CutRecords are whole records cut from the end because their timestamps went back:
	// bytes a machine crash left in the unacknowledged tail (zeros, say).
	CutRecords uint64
	// IndexNodes is the number of index nodes found; DroppedNodes were torn (a write cut
	// short) and rebuilt from the data.
	IndexNodes, DroppedNodes uint64
	// Reindexed is the number of records indexed again from the data: those after the
	// last data block the stored index had sealed.
	Reindexed uint64
	// DroppedChunks is the number of data chunk files removed because a chunk before them
	// was short, missing or held records whose timestamps go back (a machine crash before
	// it was fsynced; nothing in them was acknowledged at AckLocal). Their bytes are in
	// CutBytes.
	DroppedChunks uint64
}

type pendingBatch struct {
	first uint64
	data  []byte
}

// Stream is one stream's engine (thesis 5.3.2: the primary node, the stream's one writer):
// its local chunk files, its time index, appends and reads. Append may be called from many
// goroutines (they are ordered by the writer lock, and at AckLocal share fsyncs: group
// commit); reads are safe concurrently with appends and each other and see only
// acknowledged records (5.3.2: "the reads are restricted to only successfully appended
// data").
type Stream struct {
	cfg     StreamConfig
	lay     Layout
	icfg    Config
	cs      *chunkStore
	nf      *nodeFiles
	lock    io.Closer
	maxRead int
	rec     RecoveryInfo

	// The store's part (nil for a stream opened on its own): tier uploads and deletes, br
	// reads blocks through the cache, from local files or the object store. localBytes is
	// what the stream's chunk files hold (counted with a tier).
	tier       *streamTier
	br         *blockReader
	localBytes atomic.Int64
	// vis mirrors visible for readers that do not take xmu.
	vis atomic.Uint64

	// The writer: batches are written in order under wmu.
	wmu       sync.Mutex
	closed    bool
	written   uint64 // records written to the chunk files
	wlast     int64  // the last written record's timestamp
	dataFiles uint64 // data chunk files that exist
	wbuf      []byte // a batch's part in one chunk with its blocks' zero tails

	// The data chunk being written (pinned open) and the records written to the files;
	// changed together under dmu. A chunk that fills is not fsynced by the writer (an fsync
	// on the append path stalls every append queued behind it): it joins rolled, still
	// pinned, and syncData fsyncs it — the group-commit leader at AckLocal before it
	// acknowledges anything after it, a background sync at AckMemory, the uploader before it
	// uploads it. Chunks before rolled's are durable, and so are their directory entries
	// when dirSynced = created.
	dmu         sync.Mutex
	wh          *fileHandle
	rolled      []*fileHandle // full chunks written, not yet fsynced, in order
	created     uint64        // data chunk files created by this writer
	dirSynced   uint64        // created as of the last directory fsync (guarded by syncMu)
	dataWritten atomic.Uint64
	dataSynced  atomic.Uint64 // records known durable
	indexedEnd  atomic.Uint64 // records the index is being brought to (nodeFiles.beforeSync)
	// syncMu serializes syncData: rolled chunks are fsynced in order, each once, before the
	// directory and the chunk being written.
	syncMu sync.Mutex
	// bgSync is set while a background syncData runs (AckMemory, after a chunk rolled).
	bgSync atomic.Bool

	// Group commit (AckLocal): batches written and waiting for their fsync.
	cmu     sync.Mutex
	ccond   *sync.Cond
	pending []pendingBatch
	syncing bool   // a leader is committing
	acked   uint64 // records acknowledged
	failed  error  // sticky

	// The readers' view: the index and the records it covers, which are the records reads
	// return (acknowledged ones, or at AckLocal durable ones whose fsync is being
	// acknowledged).
	xmu     sync.RWMutex
	idx     *Index
	visible uint64
	lastTS  int64
}

// CreateStream creates stream cfg.ID in dir (the directory <dir>/s<ID>/ and its metadata,
// written atomically) and opens it. A stream that exists is refused (ErrStreamExists); a
// directory left by an interrupted creation (no metadata, no chunks) is reused.
func CreateStream(dir string, cfg StreamConfig, opt StreamOptions) (*Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	icfg := opt.Index
	if icfg.BlockSize == 0 {
		icfg.BlockSize = BlockBytes
	}
	if icfg.BlockSize != BlockBytes {
		return nil, fmt.Errorf("kawkab: create stream %d: index block size %d, want %d (index nodes share the chunk layout of data blocks): %w",
			cfg.ID, icfg.BlockSize, BlockBytes, ErrInvalidConfig)
	}
	icfg, err := icfg.Resolve()
	if err != nil {
		return nil, fmt.Errorf("kawkab: create stream %d: %w: %w", cfg.ID, err, ErrInvalidConfig)
	}
	meta, err := encodeStreamMeta(streamMeta{StreamConfig: cfg, Index: icfg})
	if err != nil {
		return nil, err
	}
	syncf := opt.syncFunc()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kawkab: create stream %d: %w", cfg.ID, err)
	}
	sdir := filepath.Join(dir, StreamDirName(cfg.ID))
	if err := os.Mkdir(sdir, 0o755); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("kawkab: create stream %d: %w", cfg.ID, err)
		}
		if _, err := os.Stat(filepath.Join(sdir, metaName)); err == nil {
			return nil, fmt.Errorf("kawkab: create stream %d: %s: %w", cfg.ID, sdir, ErrStreamExists)
		}
		l, err := listChunks(sdir)
		if err != nil {
			return nil, err
		}
		if len(l.data)+len(l.index) > 0 {
			return nil, fmt.Errorf("kawkab: create stream %d: %s holds chunk files but no metadata: %w", cfg.ID, sdir, ErrCorrupt)
		}
	}
	tmp := filepath.Join(sdir, metaTmpName)
	if err := writeFileSynced(tmp, meta, syncf); err != nil {
		return nil, fmt.Errorf("kawkab: create stream %d: write metadata: %w", cfg.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(sdir, metaName)); err != nil {
		return nil, fmt.Errorf("kawkab: create stream %d: %w", cfg.ID, err)
	}
	if err := syncDirWith(sdir, syncf); err != nil {
		return nil, fmt.Errorf("kawkab: create stream %d: %w", cfg.ID, err)
	}
	if err := syncDirWith(dir, syncf); err != nil {
		return nil, fmt.Errorf("kawkab: create stream %d: %w", cfg.ID, err)
	}
	return OpenStream(dir, cfg.ID, opt)
}

func writeFileSynced(path string, b []byte, syncf func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := syncf(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// OpenStream opens stream id in dir, recovering it from its files alone (docs/kawkab.md,
// "Recovery"): the data chunks give the record count (a torn last record is cut off), the
// index is reopened from its stored nodes (a torn last node is rebuilt) and the records
// after the last data block it sealed are indexed again from the data. Files that contradict
// each other are refused with an error wrapping ErrCorrupt. Everything acknowledged at
// AckLocal before a crash is there.
func OpenStream(dir string, id uint64, opt StreamOptions) (*Stream, error) {
	sdir := filepath.Join(dir, StreamDirName(id))
	mb, err := os.ReadFile(filepath.Join(sdir, metaName))
	if err != nil {
		return nil, fmt.Errorf("kawkab: open stream %d: read metadata: %w", id, err)
	}
	m, err := decodeStreamMeta(mb)
	if err != nil {
		return nil, fmt.Errorf("kawkab: open stream %d: %s: %w", id, filepath.Join(sdir, metaName), err)
	}
	if m.ID != id {
		return nil, fmt.Errorf("kawkab: open stream %d: the metadata in %s is stream %d's: %w", id, sdir, m.ID, ErrCorrupt)
	}
	lock, err := lockStream(filepath.Join(sdir, metaName))
	if err != nil {
		return nil, err
	}
	if err := os.Remove(filepath.Join(sdir, metaTmpName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		lock.Close()
		return nil, fmt.Errorf("kawkab: open stream %d: %w", id, err)
	}
	limit := opt.MaxOpenFiles
	if limit <= 0 {
		limit = DefaultMaxOpenFiles
	}
	lay := m.Layout()
	s := &Stream{
		cfg:     m.StreamConfig,
		lay:     lay,
		icfg:    m.Index,
		cs:      &chunkStore{id: id, dir: sdir, files: newFileCache(sdir, limit), syncf: opt.syncFunc()},
		lock:    lock,
		maxRead: MaxReadBytes / lay.R,
	}
	if opt.MaxReadBytes > 0 {
		s.maxRead = min(s.maxRead, max(1, opt.MaxReadBytes/lay.R))
	}
	if opt.MaxReadRecords > 0 {
		s.maxRead = min(s.maxRead, opt.MaxReadRecords)
	}
	s.nf = &nodeFiles{cs: s.cs, beforeSync: func() error { return s.syncData(s.indexedEnd.Load()) }, background: m.Ack == AckMemory}
	s.ccond = sync.NewCond(&s.cmu)
	if opt.tier != nil {
		if err := opt.tier.attach(s); err != nil {
			s.release()
			return nil, fmt.Errorf("kawkab: open stream %d: %w", id, err)
		}
		s.tier = opt.tier
	}
	if err := s.recover(); err != nil {
		s.release()
		return nil, fmt.Errorf("kawkab: open stream %d: %w", id, err)
	}
	s.vis.Store(s.visible)
	if s.tier != nil {
		if err := s.tier.started(); err != nil {
			s.release()
			return nil, fmt.Errorf("kawkab: open stream %d: %w", id, err)
		}
	}
	return s, nil
}

// Config is the stream's schema.
func (s *Stream) Config() StreamConfig { return s.cfg }

// Layout is the stream's record layout.
func (s *Stream) Layout() Layout { return s.lay }

// Recovery says what OpenStream found and repaired.
func (s *Stream) Recovery() RecoveryInfo { return s.rec }

// MaxReadRecords is the most records one read returns.
func (s *Stream) MaxReadRecords() int { return s.maxRead }

// Len is the number of records readers see: the acknowledged ones (at AckLocal, also the
// durable ones whose acknowledgement is on its way).
func (s *Stream) Len() uint64 {
	s.xmu.RLock()
	defer s.xmu.RUnlock()
	return s.visible
}

// LastTimestamp is the timestamp of the last record readers see; false for an empty stream.
func (s *Stream) LastTimestamp() (int64, bool) {
	s.xmu.RLock()
	defer s.xmu.RUnlock()
	return s.lastTS, s.visible > 0
}

// IndexNodes is the number of the index's nodes.
func (s *Stream) IndexNodes() uint64 {
	s.xmu.RLock()
	defer s.xmu.RUnlock()
	return s.idx.Nodes()
}

// ---------------------------------------------------------------------------------------------
// Append
// ---------------------------------------------------------------------------------------------

// Append appends a batch of records — n×R bytes, timestamps not decreasing, none older than
// the stream's last record (equal ones are kept) — and returns the record number of the
// first. A refused batch (ErrInvalidBatch, ErrOutOfOrder) changes nothing. The records go
// to the chunk files and the index, and Append returns when they are acknowledged at the
// stream's level: AckLocal once they and the index blocks they changed are fsynced (one
// fsync for every batch written meanwhile: group commit), AckMemory once they are written.
// The batch must not be modified until Append returns.
func (s *Stream) Append(batch []byte) (uint64, error) {
	R := s.lay.R
	switch {
	case len(batch) == 0:
		return 0, fmt.Errorf("kawkab: stream %d: append: an empty batch: %w", s.cfg.ID, ErrInvalidBatch)
	case len(batch) > MaxBatchBytes:
		return 0, fmt.Errorf("kawkab: stream %d: append: a batch of %d bytes, more than the limit of %d: %w",
			s.cfg.ID, len(batch), MaxBatchBytes, ErrInvalidBatch)
	case len(batch)%R != 0:
		return 0, fmt.Errorf("kawkab: stream %d: append: a batch of %d bytes is %d records of %d bytes and a partial record of %d bytes: %w",
			s.cfg.ID, len(batch), len(batch)/R, R, len(batch)%R, ErrInvalidBatch)
	}
	n := len(batch) / R
	prev := Timestamp(batch)
	for i := 1; i < n; i++ {
		ts := Timestamp(batch[i*R:])
		if ts < prev {
			return 0, fmt.Errorf("kawkab: stream %d: append: record %d of the batch has timestamp %d, older than record %d's %d: %w",
				s.cfg.ID, i, ts, i-1, prev, ErrOutOfOrder)
		}
		prev = ts
	}
	if s.tier != nil {
		// Backpressure (docs/kawkab.md, "Backpressure"): slowed above the store's high-water
		// mark, declined at its capacity.
		if err := s.tier.st.admit(s.cfg.ID, int64(len(batch))); err != nil {
			return 0, err
		}
	}

	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return 0, fmt.Errorf("kawkab: stream %d: append: %w", s.cfg.ID, ErrStreamClosed)
	}
	if err := s.failure(); err != nil {
		s.wmu.Unlock()
		return 0, err
	}
	if ts, last := Timestamp(batch), s.wlast; s.written > 0 && ts < last {
		s.wmu.Unlock()
		return 0, fmt.Errorf("kawkab: stream %d: append: the batch's first record has timestamp %d, older than the stream's last record's %d: %w",
			s.cfg.ID, ts, last, ErrOutOfOrder)
	}
	first := s.written
	if err := s.write(first, batch); err != nil {
		err = s.fail(err)
		s.wmu.Unlock()
		return 0, err
	}
	s.written += uint64(n)
	s.wlast = prev

	if s.cfg.Ack == AckMemory {
		// Acknowledged once written: index it and make it visible.
		s.indexedEnd.Store(s.written)
		err := s.apply([]pendingBatch{{first, batch}})
		if err != nil {
			err = s.fail(err)
		}
		s.wmu.Unlock()
		if err != nil {
			return 0, err
		}
		return first, nil
	}

	// AckLocal: queue the batch for the next group commit.
	s.cmu.Lock()
	for len(s.pending) >= maxPendingBatches && s.failed == nil {
		s.ccond.Wait()
	}
	if s.failed != nil {
		err := s.failed
		s.cmu.Unlock()
		s.wmu.Unlock()
		return 0, err
	}
	s.pending = append(s.pending, pendingBatch{first, batch})
	s.cmu.Unlock()
	s.wmu.Unlock()
	if err := s.waitAcked(first + uint64(n)); err != nil {
		return 0, err
	}
	return first, nil
}

func (s *Stream) failure() error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.failed
}

// fail makes err the stream's sticky failure (the first one wins) and returns it.
func (s *Stream) fail(err error) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.failed == nil {
		s.failed = fmt.Errorf("kawkab: stream %d: %w (reopen the stream to recover): %w", s.cfg.ID, ErrStreamFailed, err)
		s.ccond.Broadcast()
	}
	return s.failed
}

// waitAcked waits until the records before end are acknowledged: group commit, leader and
// followers. The first waiter to find no commit running becomes the leader: it takes every
// queued batch, fsyncs the data chunk, indexes the batches, fsyncs the index blocks that
// changed, and acknowledges them all. Batches queued meanwhile wait for the next leader, one
// of their own appenders. So one fsync (two when index blocks changed) serves every batch
// that arrived during the previous one.
func (s *Stream) waitAcked(end uint64) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	for s.acked < end {
		if s.failed != nil {
			return s.failed
		}
		if s.syncing {
			s.ccond.Wait()
			continue
		}
		bs := s.pending
		if len(bs) == 0 {
			// Cannot happen: a batch not acknowledged is queued or being committed.
			return fmt.Errorf("kawkab: stream %d: record %d is neither acknowledged nor queued", s.cfg.ID, end-1)
		}
		s.pending = nil
		s.syncing = true
		s.ccond.Broadcast() // the queue has room again
		s.cmu.Unlock()
		err := s.commit(bs)
		s.cmu.Lock()
		s.syncing = false
		if err != nil {
			if s.failed == nil {
				s.failed = fmt.Errorf("kawkab: stream %d: %w (reopen the stream to recover): %w", s.cfg.ID, ErrStreamFailed, err)
			}
		} else {
			last := bs[len(bs)-1]
			s.acked = last.first + uint64(len(last.data)/s.lay.R)
		}
		s.ccond.Broadcast()
	}
	return nil
}

// commit makes the batches durable: the data first, then the index (which only ever
// describes durable data), then the index blocks it changed.
func (s *Stream) commit(bs []pendingBatch) error {
	last := bs[len(bs)-1]
	end := last.first + uint64(len(last.data)/s.lay.R)
	if err := s.syncData(end); err != nil {
		return err
	}
	s.indexedEnd.Store(end)
	if err := s.apply(bs); err != nil {
		return err
	}
	return s.nf.sync()
}

// apply adds the batches' records to the index — sealing each data block as it fills, which
// puts the last index node to its chunk file — and makes them visible to readers.
func (s *Stream) apply(bs []pendingBatch) error {
	s.xmu.Lock()
	defer s.xmu.Unlock()
	R := s.lay.R
	for _, b := range bs {
		n := len(b.data) / R
		for i := 0; i < n; i++ {
			rec := b.data[i*R : (i+1)*R]
			p := s.lay.Locate(b.first + uint64(i))
			if err := s.idx.Append(p.Block, Timestamp(rec), s.cfg.Value(rec)); err != nil {
				return err
			}
			if p.Slot == s.lay.PerBlock-1 {
				if err := s.idx.Seal(p.Block); err != nil {
					return err
				}
			}
		}
		s.visible = b.first + uint64(n)
		s.lastTS = Timestamp(b.data[(n-1)*R:])
	}
	s.vis.Store(s.visible)
	if t := s.tier; t != nil {
		if full := s.visible / s.lay.PerChunk; full > t.fullSeen {
			// Chunks complete: queue them for upload (thesis 5.3.2: full chunks go to the
			// global store).
			t.fullSeen = full
			t.chunksFull(full)
		}
	}
	return nil
}

// write writes the batch's records, the first being record number first, to the data chunk
// files: per chunk, one write of the bytes from the file's end to the batch's last record in
// it, blocks' unused tails zero. A chunk that fills is left to syncData (useChunk): a chunk
// file may exist before the chunks before it are durable, which recovery handles (a short or
// missing chunk before the last cuts the stream there: nothing at or after it was
// acknowledged at AckLocal).
func (s *Stream) write(first uint64, batch []byte) error {
	R := s.lay.R
	n := uint64(len(batch) / R)
	rolled := false
	for i := uint64(0); i < n; {
		r := first + i
		p := s.lay.Locate(r)
		if s.wh == nil || s.wh.key.chunk != p.Chunk {
			rolled = rolled || s.wh != nil
			if err := s.useChunk(p.Chunk); err != nil {
				return err
			}
		}
		inChunk := s.lay.PerChunk - r%s.lay.PerChunk
		j := min(n, i+inChunk) // records i … j−1 go to this chunk
		start := int64(0)
		if r%s.lay.PerChunk != 0 {
			start = s.lay.Locate(r-1).Offset + int64(R)
		}
		var buf []byte
		if s.lay.Tail == 0 {
			buf = batch[i*uint64(R) : j*uint64(R)]
		} else {
			end := s.lay.Locate(first+j-1).Offset + int64(R)
			if cap(s.wbuf) < int(end-start) {
				s.wbuf = make([]byte, end-start, max(int(end-start), 64<<10))
			}
			buf = s.wbuf[:end-start]
			pos := start
			for k := i; k < j; {
				q := s.lay.Locate(first + k)
				cnt := min(j-k, uint64(s.lay.PerBlock-q.Slot))
				clear(buf[pos-start : q.Offset-start]) // the previous block's unused tail
				copy(buf[q.Offset-start:], batch[k*uint64(R):(k+cnt)*uint64(R)])
				pos = q.Offset + int64(cnt)*int64(R)
				k += cnt
			}
		}
		if _, err := s.wh.f.WriteAt(buf, start); err != nil {
			return fmt.Errorf("kawkab: stream %d: write records %d to %d to %s at %d: %w",
				s.cfg.ID, r, first+j-1, DataChunkName(p.Chunk), start, err)
		}
		s.dataWritten.Store(first + j) // under wmu; read with dmu held by syncData
		if s.tier != nil {
			s.tier.grow(int64(len(buf))) // the file ended at start: it grew by buf
		}
		i = j
	}
	if cap(s.wbuf) > maxKeptWriteBuffer {
		s.wbuf = nil // a big batch's buffer is not kept: a node holds many streams
	}
	if rolled && s.cfg.Ack == AckMemory {
		s.syncInBackground()
	}
	return nil
}

// useChunk makes data chunk c the one written: the previous one joins rolled (pinned, to be
// fsynced by syncData), c is created if needed and pinned open. No fsync here: the writer
// never waits for one.
func (s *Stream) useChunk(c uint64) error {
	h, err := s.cs.files.get(fileKey{'d', c}, true)
	if err != nil {
		return fmt.Errorf("kawkab: stream %d: create %s: %w", s.cfg.ID, DataChunkName(c), err)
	}
	s.dmu.Lock()
	if s.wh != nil {
		s.rolled = append(s.rolled, s.wh)
	}
	s.wh = h
	if c >= s.dataFiles {
		s.dataFiles = c + 1
		s.created++ // its directory entry is made durable by syncData
	}
	s.dmu.Unlock()
	return nil
}

// syncInBackground makes what was written durable off the append path (AckMemory, after a
// chunk filled), unless a background sync runs already. A failure fails the stream.
func (s *Stream) syncInBackground() {
	if !s.bgSync.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			// The full chunks: the one being written is left alone (fsyncing it would only
			// make its appends wait for its pages' write-back).
			s.dmu.Lock()
			var end uint64
			if s.wh != nil {
				end = s.lay.PerChunk * s.wh.key.chunk
			}
			s.dmu.Unlock()
			err := s.syncData(end)
			if err != nil && !errors.Is(err, ErrStreamClosed) {
				s.fail(err)
			}
			s.bgSync.Store(false)
			// A chunk that filled while this sync ran (its writer found it running) is
			// synced by another round, not left pinned until the next roll.
			s.dmu.Lock()
			more := len(s.rolled) > 0 && s.wh != nil
			s.dmu.Unlock()
			if err != nil || !more || !s.bgSync.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// syncData makes the records before end durable (end at most the records written): in order,
// the full chunks not yet fsynced (rolled), the directory (if data chunk files were created
// since its last fsync), and the chunk being written — unless a sync already covered them.
// It runs outside the writer lock, concurrently with writes to the chunk being written.
func (s *Stream) syncData(end uint64) error {
	if s.dataSynced.Load() >= end {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.dataSynced.Load() >= end {
		return nil
	}
	s.dmu.Lock()
	rolled := append([]*fileHandle(nil), s.rolled...)
	created := s.created
	h := s.wh
	w := s.dataWritten.Load()
	if h != nil {
		var err error
		if h, err = s.cs.files.get(h.key, false); err != nil { // pin it across the fsync
			s.dmu.Unlock()
			return err
		}
	}
	s.dmu.Unlock()
	if h == nil {
		return nil
	}
	defer s.cs.files.put(h)
	for _, r := range rolled {
		if err := s.cs.sync(r.f); err != nil {
			return err
		}
		raise(&s.dataSynced, s.lay.PerChunk*(r.key.chunk+1))
	}
	if len(rolled) > 0 {
		s.dmu.Lock()
		s.rolled = s.rolled[len(rolled):] // they were its first ones: rolled only grows at the end
		if len(s.rolled) == 0 {
			s.rolled = nil
		}
		s.dmu.Unlock()
		for _, r := range rolled {
			s.cs.files.put(r)
		}
	}
	if created > s.dirSynced {
		if err := s.cs.syncDir(); err != nil {
			return err
		}
		s.dirSynced = created
	}
	if end <= s.lay.PerChunk*h.key.chunk {
		return nil // the full chunks were asked for (the background sync): not the one written
	}
	if err := s.cs.sync(h.f); err != nil {
		return err
	}
	raise(&s.dataSynced, w)
	return nil
}

// raise sets a to v if v is larger.
func raise(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// Close waits for the appends in flight, fsyncs what was written (also at AckMemory) and
// closes the stream's files. Reads after Close fail.
func (s *Stream) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.cmu.Lock()
	for (len(s.pending) > 0 || s.syncing) && s.failed == nil {
		s.ccond.Wait()
	}
	failed := s.failed
	s.cmu.Unlock()
	var errs []error
	if failed == nil {
		s.indexedEnd.Store(s.written)
		errs = append(errs, s.syncData(s.written), s.nf.sync())
	}
	errs = append(errs, s.release())
	if s.tier != nil {
		s.tier.detach()
	}
	return errors.Join(errs...)
}

// release closes the files and drops the lock.
func (s *Stream) release() error {
	s.nf.close()
	s.syncMu.Lock() // a background sync is done with the handles
	defer s.syncMu.Unlock()
	s.dmu.Lock()
	if s.wh != nil {
		s.cs.files.put(s.wh)
		s.wh = nil
	}
	for _, r := range s.rolled {
		s.cs.files.put(r)
	}
	s.rolled = nil
	s.dmu.Unlock()
	return errors.Join(s.cs.files.close(), s.lock.Close())
}

// ---------------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------------

// readRecords reads the records first, first+1, … into out (a multiple of R bytes): one
// read per block, or per chunk when blocks have no unused tail. The records must exist.
func (s *Stream) readRecords(out []byte, first uint64) error {
	if s.br != nil {
		return s.br.read(out, first, s.vis.Load())
	}
	R := s.lay.R
	n := uint64(len(out) / R)
	for i := uint64(0); i < n; {
		p := s.lay.Locate(first + i)
		var cnt uint64
		if s.lay.Tail == 0 {
			cnt = min(n-i, s.lay.PerChunk-(first+i)%s.lay.PerChunk)
		} else {
			cnt = min(n-i, uint64(s.lay.PerBlock-p.Slot))
		}
		if err := s.cs.readAt(fileKey{'d', p.Chunk}, out[i*uint64(R):(i+cnt)*uint64(R)], p.Offset); err != nil {
			return fmt.Errorf("kawkab: stream %d: read records %d to %d: %w", s.cfg.ID, first+i, first+i+cnt-1, err)
		}
		i += cnt
	}
	return nil
}

// ReadRecords returns up to n records from record number first (fewer at the stream's end),
// n×R bytes. n is at most MaxReadRecords; first at most Len (reading at Len returns none).
func (s *Stream) ReadRecords(first uint64, n int) ([]byte, error) {
	if n < 0 || n > s.maxRead {
		return nil, fmt.Errorf("kawkab: stream %d: read %d records: want 0 to %d per read: %w", s.cfg.ID, n, s.maxRead, ErrReadTooLarge)
	}
	vis := s.Len()
	if first > vis {
		return nil, fmt.Errorf("kawkab: stream %d: read from record %d: the stream has %d records: %w", s.cfg.ID, first, vis, ErrOutOfRange)
	}
	n = int(min(uint64(n), vis-first))
	out := make([]byte, n*s.lay.R)
	if err := s.readRecords(out, first); err != nil {
		return nil, err
	}
	return out, nil
}

// RangeResult is the answer of ReadRange.
type RangeResult struct {
	// First is the record number of the first record returned (0 when none is).
	First uint64
	// N is the number of records returned.
	N int
	// Records are the records with timestamps in the range, in order: N×R bytes, records
	// First … First+N−1 (a stream's records in a time range are consecutive).
	Records []byte
	// More reports that record First+N is in the range too: the read stopped at
	// MaxReadRecords. Continue with ReadRecords from First+N, up to the range's end.
	More bool
	// IndexNodes is the number of index nodes the search read.
	IndexNodes int
}

// ReadRange returns the records whose timestamps are in [tl, th], in order, at most
// MaxReadRecords of them (More says when more follow). It searches the index for the data
// blocks that may hold them (5.5.3) and reads those blocks, keeping the records in range
// (the edge blocks hold others too).
func (s *Stream) ReadRange(tl, th int64) (RangeResult, error) {
	if tl > th {
		return RangeResult{}, fmt.Errorf("kawkab: stream %d: read range [%d, %d]: the low bound is after the high bound", s.cfg.ID, tl, th)
	}
	s.xmu.RLock()
	sr, err := s.idx.Search(tl, th)
	vis := s.visible
	s.xmu.RUnlock()
	res := RangeResult{IndexNodes: sr.Visits()}
	if err != nil {
		return res, fmt.Errorf("kawkab: stream %d: read range [%d, %d]: %w", s.cfg.ID, tl, th, err)
	}
	if !sr.Found {
		return res, nil
	}
	R := s.lay.R
	from, to := s.lay.FirstRecord(sr.First), min(s.lay.FirstRecord(sr.Last+1), vis)
	// Read block by block from the files; through a Store's block reader, up to a chunk at
	// a time, so that the blocks missing from the cache are fetched together (ranged GETs in
	// parallel for a chunk in the object store).
	step := uint64(s.lay.PerBlock)
	if s.br != nil {
		step = s.lay.PerChunk
	}
	block := make([]byte, min(step, to-from)*uint64(R))
	var out []byte
	count := 0
	for r := from; r < to; {
		cnt := min(to-r, step-r%step) // to the end of r's block (or chunk)
		buf := block[:cnt*uint64(R)]
		if err := s.readRecords(buf, r); err != nil {
			return res, err
		}
		for i := 0; i < int(cnt); i++ {
			rec := buf[i*R : (i+1)*R]
			ts := Timestamp(rec)
			if ts < tl {
				continue
			}
			if ts > th {
				res.Records, res.N = out, count
				return res, nil
			}
			if count == s.maxRead {
				res.Records, res.N, res.More = out, count, true
				return res, nil
			}
			if count == 0 {
				res.First = r + uint64(i)
				out = make([]byte, 0, min(uint64(s.maxRead), to-res.First)*uint64(R))
			}
			out = append(out, rec...)
			count++
		}
		r += cnt
	}
	res.Records, res.N = out, count
	return res, nil
}

// Aggregate summarizes the values of the records whose timestamps are in [tl, th]: the
// summary index answers for the data blocks wholly inside the range and the at most two edge
// blocks are read (docs/kawkab.md, "Aggregates"). A stream without a value offset summarizes
// zeros: only Count means something.
func (s *Stream) Aggregate(tl, th int64) (Summary, error) {
	s.xmu.RLock()
	g, err := s.idx.Aggregate(tl, th)
	vis := s.visible
	s.xmu.RUnlock()
	if err != nil {
		return Summary{}, fmt.Errorf("kawkab: stream %d: aggregate [%d, %d]: %w", s.cfg.ID, tl, th, err)
	}
	edges := make([]Summary, len(g.Edges))
	for i, b := range g.Edges {
		recs, err := s.blockRecords(b, vis)
		if err != nil {
			return Summary{}, err
		}
		edges[i] = SummarizeRange(recs, tl, th)
	}
	return g.Combine(edges...)
}

// blockRecords reads data block b's records (those before end).
func (s *Stream) blockRecords(b, end uint64) ([]Record, error) {
	first := s.lay.FirstRecord(b)
	if first >= end {
		return nil, nil
	}
	n := min(uint64(s.lay.PerBlock), end-first)
	buf := make([]byte, n*uint64(s.lay.R))
	if err := s.readRecords(buf, first); err != nil {
		return nil, err
	}
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = s.cfg.Record(buf[i*s.lay.R:])
	}
	return recs, nil
}

// ---------------------------------------------------------------------------------------------
// Recovery
// ---------------------------------------------------------------------------------------------

// recover rebuilds the stream's state from its files (docs/kawkab.md, "Recovery").
func (s *Stream) recover() error {
	dir := s.cs.dir
	l, err := listChunks(dir)
	if err != nil {
		return err
	}
	// The data chunks end at the first one before the last that is missing (not uploaded) or
	// short: a machine crash can leave that, since the writer does not fsync a chunk before
	// creating the next (the files after it hold only unacknowledged records — see cutData).
	// It is a contradiction, refused, if the index describes records after it.
	var uploaded uint64
	if s.tier != nil {
		uploaded = s.tier.manifest.Chunks
	}
	var C uint64
	for c := range l.data {
		C = max(C, c+1)
	}
	var defect error // why the data is cut at chunk C−1 (nil: the chunks are whole)
	for c := uploaded; c+1 < C; c++ {
		if _, ok := l.data[c]; !ok {
			defect = fmt.Errorf("kawkab: stream directory %s: data chunk %d exists but chunk(s) %d before it are missing: %w",
				dir, C-1, c, ErrCorrupt)
			C = c + 1 // the stream ends at this (empty) chunk
			break
		}
	}
	data := l.data
	if defect != nil || s.tier != nil {
		data = make(map[uint64]int64, len(l.data))
		for c, n := range l.data {
			if c < C {
				data[c] = n
			}
		}
	}
	if s.tier != nil {
		// Chunks deleted after their upload may be missing (the manifest says which).
		cut := C
		if C, err = s.tier.checkLocalChunks(data, dir); err != nil {
			return err
		}
		if defect != nil {
			C = cut // ending at the missing chunk
		}
	}
	I, err := contiguous(l.index, "index", dir)
	if err != nil {
		return err
	}

	// The data: every chunk but the last is full; the last one's size gives its records.
	full := s.lay.FullChunkFileBytes()
	var D uint64
	if C > 0 {
		for c := uint64(0); c < C-1; c++ {
			if _, ok := data[c]; !ok {
				continue // deleted after its upload
			}
			if data[c] != full {
				if data[c] > full {
					return fmt.Errorf("data chunk %s is %d bytes, more than a full chunk (%d bytes with %d-byte records): %w",
						DataChunkName(c), data[c], full, s.lay.R, ErrCorrupt)
				}
				defect = fmt.Errorf("data chunk %s is %d bytes, but chunks follow it: a chunk before the last must be full (%d bytes with %d-byte records): %w",
					DataChunkName(c), data[c], full, s.lay.R, ErrCorrupt)
				C = c + 1
				break
			}
		}
		size, present := data[C-1]
		if size > full {
			return fmt.Errorf("data chunk %s is %d bytes, more than a full chunk (%d bytes with %d-byte records): %w",
				DataChunkName(C-1), size, full, s.lay.R, ErrCorrupt)
		}
		n, end := s.lay.RecordsInChunkFile(size)
		D = (C-1)*s.lay.PerChunk + n
		if defect == nil && end != size {
			if err := s.truncate(DataChunkName(C-1), end); err != nil {
				return err
			}
			s.rec.CutBytes += size - end
		}
		// The writer's state: the last chunk pinned (a missing one is created by the next
		// append).
		s.dataFiles = C
		if present {
			h, err := s.cs.files.get(fileKey{'d', C - 1}, false)
			if err != nil {
				return err
			}
			s.wh = h
		} else {
			s.dataFiles = C - 1
		}
	}
	s.setWritten(D)

	// The index: every index chunk but the last is full; the last one's whole nodes count.
	var M uint64
	if I > 0 {
		for c := uint64(0); c < I-1; c++ {
			if l.index[c] != ChunkBytes {
				return fmt.Errorf("index chunk %s is %d bytes, but chunks follow it: a chunk before the last must hold %d nodes (%d bytes): %w",
					IndexChunkName(c), l.index[c], ChunkBlocks, ChunkBytes, ErrCorrupt)
			}
		}
		size := l.index[I-1]
		if size > ChunkBytes {
			return fmt.Errorf("index chunk %s is %d bytes, more than %d nodes: %w", IndexChunkName(I-1), size, ChunkBlocks, ErrCorrupt)
		}
		M = (I-1)*ChunkBlocks + uint64(size/BlockBytes)
		if size%BlockBytes != 0 { // the first write of a new node, cut short
			if err := s.truncate(IndexChunkName(I-1), size-size%BlockBytes); err != nil {
				return err
			}
		}
	}
	s.rec.IndexNodes = M
	if err := s.nf.setNodes(M); err != nil {
		return err
	}
	idx, err := s.openIndex(M)
	if err != nil {
		return err
	}
	resume, err := s.checkIndex(idx, D)
	if errors.Is(err, ErrCorrupt) && s.cfg.Ack == AckMemory && idx.Nodes() > 0 && s.rec.DroppedNodes == 0 {
		// At AckMemory nothing orders the last node's write after its data's (no fsync
		// between them): a power loss can keep the one and not the other. Nodes before it
		// were fsynced after their data, so the last node is rebuilt from the data. (At
		// AckLocal the index is written only after its data's fsync: this is refused.)
		if idx, err = s.dropLastNode(idx.Nodes()); err != nil {
			return err
		}
		resume, err = s.checkIndex(idx, D)
	}
	if err != nil {
		if defect != nil && errors.Is(err, ErrCorrupt) {
			// The index describes records after the cut: they were acknowledged, so the short
			// or missing chunk is not what a crash leaves.
			return fmt.Errorf("%w (and the index describes records after it: %v)", defect, err)
		}
		return err
	}
	if defect != nil {
		if err := s.cutData(C-1, D, l.data); err != nil {
			return err
		}
	}
	// A killed writer's page-cache writes are readable now and what reads return must
	// survive: the data chunks that may not be durable are fsynced before anything is written
	// on top of them (the index nodes rebuilt below). Nodes before the last one describe only
	// durable data (a node is first written after the data of the nodes before it is
	// fsynced), so the chunks from the one holding the last node's first block are.
	var lo uint64
	if m := idx.Nodes(); m > 0 {
		lo = s.lay.Locate(s.lay.FirstRecord((m - 1) * uint64(s.icfg.N))).Chunk
	}
	if err := s.syncChunks(lo, s.dataFiles); err != nil {
		return err
	}
	raise(&s.dataSynced, D)
	if s.rec.DroppedNodes > 0 {
		// Cut the dropped node off the files, now that the rest is known to be consistent.
		c, off := indexChunkOf(idx.Nodes() + 1)
		if err := s.truncate(IndexChunkName(c), off); err != nil {
			return err
		}
	}
	s.idx = idx
	idx.KeepDecodedNodes(DecodedNodeCache) // full nodes never change: searches share them decoded

	// The records after the last one the index describes are indexed again.
	if err := s.reindex(resume, D, C); err != nil {
		return err
	}
	D = s.written
	s.visible, s.acked = D, D
	if D > 0 {
		buf := make([]byte, s.lay.R)
		if err := s.readRecords(buf, D-1); err != nil {
			return err
		}
		s.lastTS, s.wlast = Timestamp(buf), Timestamp(buf)
	}
	s.rec.Records = D
	s.indexedEnd.Store(D)
	if err := s.syncData(D); err != nil {
		return err
	}
	if err := s.nf.sync(); err != nil {
		return err
	}
	// What a killed writer wrote without fsyncing is in the page cache: make durable what
	// the stream goes on from — the last index chunk (the ordering of index nodes assumes
	// the nodes before the next one durable) and the directory (a chunk file created just
	// before the crash, whose entry was not fsynced yet, will be written and acknowledged).
	if I > 0 {
		h, err := s.cs.files.get(fileKey{'i', I - 1}, false)
		if err != nil {
			return err
		}
		err = s.cs.sync(h.f)
		s.cs.files.put(h)
		if err != nil {
			return err
		}
	}
	return s.cs.syncDir()
}

func (s *Stream) setWritten(n uint64) {
	s.written = n
	s.dataWritten.Store(n)
	s.indexedEnd.Store(n)
}

// truncate cuts a chunk file to size bytes and fsyncs it.
func (s *Stream) truncate(name string, size int64) error {
	f, err := os.OpenFile(s.cs.path(name), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("cut %s to %d bytes: %w", name, size, err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("cut %s to %d bytes: %w", name, size, err)
	}
	return s.cs.sync(f)
}

// openIndex reopens the index from its M stored nodes. The last node may be torn (its write
// cut short by the crash: it does not decode): it is dropped and rebuilt from the data, since
// the node before it is full and was durable before it was first written.
func (s *Stream) openIndex(M uint64) (*Index, error) {
	if M == 0 {
		return NewIndex(s.nf, s.icfg)
	}
	idx, err := OpenIndex(s.nf, s.icfg, M)
	if err == nil {
		return idx, nil
	}
	if !errors.Is(err, ErrMalformedNode) {
		return nil, err
	}
	return s.dropLastNode(M)
}

// dropLastNode reopens the index from the M−1 nodes before node M, the last of which must be
// full and sealed (it was final and durable before node M was first written). The caller
// cuts node M off the files once the index is found consistent with the data.
func (s *Stream) dropLastNode(M uint64) (*Index, error) {
	s.rec.DroppedNodes++
	M--
	if err := s.nf.setNodes(M); err != nil {
		return nil, err
	}
	if M == 0 {
		return NewIndex(s.nf, s.icfg)
	}
	idx, err := OpenIndex(s.nf, s.icfg, M)
	if err != nil {
		return nil, fmt.Errorf("index node %d, before the dropped last node, does not load: %w: %w", M, err, ErrCorrupt)
	}
	if idx.BlockOpen() || idx.Blocks() != M*uint64(s.icfg.N) {
		return nil, fmt.Errorf("index node %d holds %d data blocks (open=%v), but a node after it was written, so it must be full (%d): %w",
			M, idx.Blocks()-(M-1)*uint64(s.icfg.N), idx.BlockOpen(), s.icfg.N, ErrCorrupt)
	}
	return idx, nil
}

// checkIndex checks a reopened index against the D records of the data chunks — it describes
// no more sealed blocks than the data holds full ones, and its last entry is its block's
// records' — and returns the first record it does not describe.
func (s *Stream) checkIndex(idx *Index, D uint64) (resume uint64, err error) {
	b := idx.Blocks()
	if b == 0 {
		return 0, nil
	}
	resume = s.lay.FirstRecord(b)
	last := idx.Last()
	e := last.Body[len(last.Body)-1]
	count := uint64(s.lay.PerBlock)
	if idx.BlockOpen() {
		resume = s.lay.FirstRecord(b-1) + e.Count
		count = e.Count
	}
	if resume > D {
		return 0, fmt.Errorf("the index describes %d data blocks (the last one open: %v) up to record %d, but the data chunks hold %d records (%d full blocks of %d): the index is ahead of the data: %w",
			b, idx.BlockOpen(), resume, D, D/uint64(s.lay.PerBlock), s.lay.PerBlock, ErrCorrupt)
	}
	recs, err := s.blockRecords(b-1, s.lay.FirstRecord(b-1)+count)
	if err != nil {
		return 0, err
	}
	var got Entry
	for i, r := range recs {
		if i == 0 {
			got.TsMin = r.TS
		}
		got.TsMax = r.TS
		got.Summary.Add(r.Value)
	}
	if got != e {
		return 0, fmt.Errorf("index node %d's entry for data block %d is %v, but the block's records give %v: %w",
			last.Number, b-1, e, got, ErrCorrupt)
	}
	return resume, nil
}

// reindex indexes the records [from, to) again, block by block. A record whose timestamp goes
// back is where the tail a crash left ends: when it is in the last data chunk, it and the
// records after it are cut off; anywhere else the files are refused.
func (s *Stream) reindex(from, to, chunks uint64) error {
	R := s.lay.R
	buf := make([]byte, s.lay.PerBlock*R)
	for r := from; r < to; {
		p := s.lay.Locate(r)
		cnt := min(to-r, uint64(s.lay.PerBlock-p.Slot))
		b := buf[:cnt*uint64(R)]
		if err := s.readRecords(b, r); err != nil {
			return err
		}
		for i := uint64(0); i < cnt; i++ {
			rec := b[i*uint64(R) : (i+1)*uint64(R)]
			err := s.idx.Append(p.Block, Timestamp(rec), s.cfg.Value(rec))
			if errors.Is(err, ErrOutOfOrder) {
				return s.cutTail(r+i, to, chunks)
			}
			if err != nil {
				return fmt.Errorf("index record %d again: %w: %w", r+i, err, ErrCorrupt)
			}
			if p.Slot+int(i) == s.lay.PerBlock-1 {
				if err := s.idx.Seal(p.Block); err != nil {
					return err
				}
			}
			s.rec.Reindexed++
		}
		r += cnt
	}
	return nil
}

// cutTail cuts records [at, end) off the data chunks: at's chunk is cut to the records
// before it and the chunks after it are removed. A record whose timestamp goes back is what a
// machine crash leaves where the kernel wrote back a file's size without its bytes; with the
// writer not fsyncing a chunk before creating the next, that can be in a chunk before the
// last, and the records from there on were not acknowledged at AckLocal (an acknowledgement
// follows the fsync of every chunk up to its records; fsynced bytes do not go back). It is
// after the last block the index sealed, which a crash cannot tear.
func (s *Stream) cutTail(at, end, chunks uint64) error {
	c := at / s.lay.PerChunk
	size := s.lay.ChunkFileBytes(end, c)
	keep := s.lay.ChunkFileBytes(at, c)
	if err := s.truncate(DataChunkName(c), keep); err != nil {
		return err
	}
	s.rec.CutRecords += end - at
	s.rec.CutBytes += size - keep
	if c+1 < chunks {
		sizes := map[uint64]int64{}
		for k := c + 1; k < chunks; k++ {
			sizes[k] = s.lay.ChunkFileBytes(end, k)
		}
		if err := s.removeChunksAfter(c, chunks, sizes); err != nil {
			return err
		}
	}
	s.dmu.Lock()
	s.setWritten(at)
	s.dmu.Unlock()
	return nil
}

// cutData cuts the stream at data chunk c, short or missing although chunks follow it: c
// is cut to its whole records (D in all) and the chunks after it are removed. A machine
// crash leaves that when the writer created chunk c+1 before c was fsynced: none of the
// records from c's durable end on was acknowledged at AckLocal (the group-commit leader
// fsyncs every chunk up to a record before acknowledging it), and the index does not
// describe them (checked by the caller). listed is the directory's chunk sizes.
func (s *Stream) cutData(c, D uint64, listed map[uint64]int64) error {
	var last uint64
	for k := range listed {
		last = max(last, k)
	}
	if size, ok := listed[c]; ok {
		end := s.lay.ChunkFileBytes(D, c)
		if err := s.truncate(DataChunkName(c), end); err != nil {
			return err
		}
		s.rec.CutBytes += size - end
	}
	return s.removeChunksAfter(c, last+1, listed)
}

// removeChunksAfter removes data chunks c+1 … to−1 (those that exist) and fsyncs the
// directory; sizes says how many bytes each held (counted as cut).
func (s *Stream) removeChunksAfter(c, to uint64, sizes map[uint64]int64) error {
	for k := c + 1; k < to; k++ {
		s.cs.files.drop(fileKey{'d', k})
		if s.wh != nil && s.wh.key.chunk == k {
			s.dmu.Lock()
			h := s.wh
			s.wh = nil
			s.dmu.Unlock()
			s.cs.files.put(h)
		}
		err := os.Remove(s.cs.path(DataChunkName(k)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("remove %s after the cut at chunk %d: %w", DataChunkName(k), c, err)
		}
		s.rec.CutBytes += sizes[k]
		s.rec.DroppedChunks++
	}
	if s.wh == nil {
		if _, err := os.Stat(s.cs.path(DataChunkName(c))); err == nil {
			h, err := s.cs.files.get(fileKey{'d', c}, false)
			if err != nil {
				return err
			}
			s.dmu.Lock()
			s.wh = h
			s.dmu.Unlock()
			s.dataFiles = c + 1
		} else {
			s.dataFiles = c
		}
	} else {
		s.dataFiles = min(s.dataFiles, c+1)
	}
	return s.cs.syncDir()
}

// syncChunks fsyncs the data chunk files from … to−1 that exist (recovery).
func (s *Stream) syncChunks(from, to uint64) error {
	for c := from; c < to; c++ {
		if s.tier != nil && s.tier.isGone(c) {
			continue
		}
		h, err := s.cs.files.get(fileKey{'d', c}, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = s.cs.sync(h.f)
		s.cs.files.put(h)
		if err != nil {
			return err
		}
	}
	return nil
}
