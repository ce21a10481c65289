package storage

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	dto "github.com/prometheus/client_model/go"

	"meridian/internal/hlc"
)

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("storage: engine closed")

// nextsBeforeSeek is how many Next calls Scan spends looking for the next user key before it
// seeks past the remaining versions of the current one. Most keys have one or two live
// versions, and a Next is much cheaper than a SeekGE, so this keeps the common case fast
// while a key with thousands of versions costs one seek (the trick CockroachDB's MVCC scanner
// uses).
const nextsBeforeSeek = 4

// Engine is one node's store: multi-version records on a Pebble DB (DESIGN.md section 4
// (storage engine)). It is safe for concurrent use; Close must not race with other calls.
type Engine struct {
	dir   string
	fs    vfs.FS
	db    *pebble.DB
	popts *pebble.Options // defaulted copy of the options the DB was opened with

	closed atomic.Bool
	space  *spaceGuard
	stop   chan struct{}
	done   chan struct{}

	applies        atomic.Int64
	syncApplies    atomic.Int64
	recordsApplied atomic.Int64
	gets           atomic.Int64
	scans          atomic.Int64

	gcMu     sync.Mutex
	gcResume map[string][]byte // keyspace -> key prefix where the next GC call resumes
}

// Open opens (creating if missing, with its parents) the store in dir.
func Open(dir string, opts Options) (*Engine, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	space := newSpaceGuard(opts.FS, dir)
	po := opts.pebbleOptions()
	// Every write Pebble makes goes through the disk-full hook: on ENOSPC the ballast is
	// given back and the write retried (space.go).
	po.FS = vfs.OnDiskFull(opts.FS, space.onNoSpace)
	// pebble.Open creates dir and its missing parents and syncs their parent directories,
	// so a freshly created store survives a crash (MemFS.CrashClone tests rely on this).
	fresh := !hasManifest(opts.FS, dir)
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	// The guard reads usage and lays down the ballast once Pebble has created (and synced)
	// the directory.
	if err := space.start(opts.DiskReserveBytes); err != nil {
		db.Close()
		return nil, err
	}
	// Stores written before partitions became plain key ranges name a partition in every
	// data key: rewrite them once (migrate.go).
	if _, err := migrateLegacyDataKeys(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	if err := rotateFirstWAL(db, fresh); err != nil {
		db.Close()
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	e := &Engine{
		dir:      dir,
		fs:       opts.FS,
		db:       db,
		popts:    po,
		space:    space,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		gcResume: make(map[string][]byte),
	}
	if space.monitored {
		go space.monitor(opts.DiskCheckInterval, e.stop, e.done)
	} else {
		close(e.done)
	}
	return e, nil
}

// rotateFirstWAL moves a store that Pebble has just created off its first WAL. Pebble writes
// that WAL before it raises the new store to its format version, so in the older chunk
// format, without sync offsets, and its reader takes zeros in the last 11 to 18 bytes of a
// 32 KiB block for padding: if a crash loses the page holding the first chunk of an unsynced
// record there but keeps the next page, replay skips that record and applies the ones after
// it. The store comes back with a hole in the middle of unsynced writes — a Raft log with an
// entry missing (the simulator found it: "log has entry 152 where 151 belongs";
// TestCrashLeavesAPrefix reproduces it). The WALs Pebble creates afterwards carry sync
// offsets, never start a chunk in those bytes, and stop at such a hole. So a new store's
// first WAL, still empty, is replaced at once (a flush rotates it).
func rotateFirstWAL(db *pebble.DB, fresh bool) error {
	if !fresh || db.FormatMajorVersion() < pebble.FormatWALSyncChunks {
		return nil // reopened stores start a WAL in their own format
	}
	if err := db.LogData(nil, pebble.NoSync); err != nil {
		return fmt.Errorf("rotate the first WAL: %w", err)
	}
	if err := db.Flush(); err != nil {
		return fmt.Errorf("rotate the first WAL: %w", err)
	}
	return nil
}

// hasManifest reports whether dir holds a Pebble store already (its manifest marker).
func hasManifest(fs vfs.FS, dir string) bool {
	names, err := fs.List(dir)
	if err != nil {
		return false
	}
	for _, n := range names {
		if strings.HasPrefix(n, "marker.manifest.") {
			return true
		}
	}
	return false
}

// DiskState returns the store's last reading of its filesystem (no system call).
func (e *Engine) DiskState() DiskState { return e.space.load() }

// RefreshDiskState reads the filesystem's usage now and returns the new state.
func (e *Engine) RefreshDiskState() DiskState { return e.space.refresh() }

// WaitIdle waits, at most limit, until Pebble has no flush or compaction running or pending
// (one memtable), and reports whether it got there. The simulator crashes a store only when
// it is idle: what a crash keeps then depends only on the writes and syncs the simulation
// made, not on how far Pebble's background goroutines happened to be on the host (a crash in
// the middle of a flush is Pebble's own tests' subject; a simulated run must replay).
func (e *Engine) WaitIdle(limit time.Duration) bool {
	if e.checkOpen() != nil {
		return true
	}
	deadline := time.Now().Add(limit)
	for {
		m := e.db.Metrics()
		if m.MemTable.Count <= 1 && m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Close closes the store. Data applied with sync=true is durable; data applied with
// sync=false may or may not be, as after a crash. Calling Close twice returns ErrClosed.
func (e *Engine) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	close(e.stop)
	<-e.done
	if err := e.db.Close(); err != nil {
		return fmt.Errorf("storage: close %s: %w", e.dir, err)
	}
	return nil
}

func (e *Engine) checkOpen() error {
	if e.closed.Load() {
		return ErrClosed
	}
	return nil
}

func writeOptions(sync bool) *pebble.WriteOptions {
	if sync {
		return pebble.Sync
	}
	return pebble.NoSync
}

// Apply writes all records in one Pebble batch, atomically. With sync=true it returns only
// after the WAL holding the batch is fsynced. The node's committer merges many client
// requests into one Apply: that is Meridian's group commit, one fsync for many writes
// (DESIGN.md section 4 (storage engine)).
//
// Apply(nil, true) is a durability barrier: it fsyncs the WAL, making every earlier
// unsynced Apply durable.
//
// Every version is its own key, so applying a version that already exists rewrites the same
// bytes (idempotent), and applying an older version adds a key that sorts after the newer
// one and never hides it: last-writer-wins needs no read-before-write.
func (e *Engine) Apply(recs []Record, sync bool) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	size := 0
	for i := range recs {
		// Generous estimate: escapes at most double a string; 32 bytes of fixed overhead.
		size += 2*(len(recs[i].Keyspace)+len(recs[i].Key)) + len(recs[i].Value) + 32
	}
	b := e.db.NewBatchWithSize(size)
	defer b.Close()
	if err := e.fillRecords(b, recs); err != nil {
		return err
	}
	if len(recs) == 0 {
		if !sync {
			return nil
		}
		// Pebble skips the WAL for an empty batch, so an empty synced Apply would return
		// without an fsync. A LogData record (WAL only, never indexed) makes Apply(nil, true)
		// a durability barrier for every earlier unsynced Apply, as the contract promises.
		if err := b.LogData(nil, nil); err != nil {
			return fmt.Errorf("storage: apply: sync barrier: %w", err)
		}
	}
	if err := b.Commit(writeOptions(sync)); err != nil {
		return fmt.Errorf("storage: apply %d records (sync=%t): %w", len(recs), sync, err)
	}
	e.countApply(len(recs), sync)
	return nil
}

// fillRecords adds recs to b.
func (e *Engine) fillRecords(b *pebble.Batch, recs []Record) error {
	var kbuf, vbuf []byte
	for i := range recs {
		r := &recs[i]
		kbuf = encodeDataKey(kbuf[:0], r.Keyspace, r.Key, r.Version)
		vbuf = appendValue(vbuf[:0], r)
		// Batch.Set copies key and value, so the scratch buffers can be reused.
		if err := b.Set(kbuf, vbuf, nil); err != nil {
			return fmt.Errorf("storage: apply: batch set %q/%q@%s: %w",
				r.Keyspace, r.Key, r.Version, err)
		}
	}
	return nil
}

func (e *Engine) countApply(records int, sync bool) {
	e.applies.Add(1)
	e.recordsApplied.Add(int64(records))
	if sync {
		e.syncApplies.Add(1)
	}
}

// Get returns the newest version of key, which may be a tombstone (found=true,
// rec.Tombstone=true). found is false when no version exists.
func (e *Engine) Get(keyspace string, key []byte) (rec Record, found bool, err error) {
	if err := e.checkOpen(); err != nil {
		return Record{}, false, err
	}
	e.gets.Add(1)
	lo := appendKeyPrefix(nil, keyspace, key)
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return Record{}, false, fmt.Errorf("storage: get %q/%q: %w", keyspace, key, err)
	}
	// The newest version sorts first (inverted version), so the first entry is the answer.
	if it.First() {
		rec, err = decodeRecordAt(it)
		found = err == nil
	}
	err = errors.Join(err, it.Error(), it.Close())
	if err != nil {
		return Record{}, false, fmt.Errorf("storage: get %q/%q: %w", keyspace, key, err)
	}
	return rec, found, nil
}

// GetAt returns the newest version of key whose version is <= maxVersion, which may be a
// tombstone (found=true, rec.Tombstone=true). found is false when no such version exists.
// It is the read of a snapshot as of maxVersion: a lease holder or a repair path that must
// not see writes stamped after a cut can read the key as it was, without scanning versions.
//
// Versions of one key sort newest first (inverted version suffix, see keys.go), so the
// versions <= maxVersion are exactly the entries at or after encodeDataKey(..., maxVersion):
// one SeekGE on an iterator bounded to the key's prefix lands on the answer, and the bounds
// keep a different user key (say "ab" when asking for "a") from ever being returned.
func (e *Engine) GetAt(keyspace string, key []byte, maxVersion hlc.Version) (rec Record, found bool, err error) {
	if err := e.checkOpen(); err != nil {
		return Record{}, false, err
	}
	e.gets.Add(1)
	seek := encodeDataKey(nil, keyspace, key, maxVersion)
	// The key prefix is the seek key without its version. lo aliases seek, which is fine:
	// neither is modified while the iterator lives, and prefixEnd returns a copy.
	lo := seek[:len(seek)-versionLen]
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return Record{}, false, fmt.Errorf("storage: get %q/%q at %s: %w", keyspace, key, maxVersion, err)
	}
	if it.SeekGE(seek) {
		rec, err = decodeRecordAt(it)
		found = err == nil
	}
	err = errors.Join(err, it.Error(), it.Close())
	if err != nil {
		return Record{}, false, fmt.Errorf("storage: get %q/%q at %s: %w", keyspace, key, maxVersion, err)
	}
	return rec, found, nil
}

// Scan calls fn with the newest version of each key of span (a partition's range, or any
// sub-range of one) in key order, tombstones included (replica merging needs them). Scan
// stops after limit keys when limit > 0, or as soon as fn returns false. fn owns the Record
// it receives (its slices are fresh copies) and may call other Engine methods.
//
// Pebble's bounds are set to the span, so a scan never reads a neighbouring range's blocks.
func (e *Engine) Scan(span Span, limit int, fn func(Record) bool) error {
	return e.scanWith("scan", span, func(it *pebble.Iterator) error { return scanNewest(it, limit, fn) })
}

// scanWith runs walk over an iterator bounded to span (what names the scan in errors).
func (e *Engine) scanWith(what string, span Span, walk func(it *pebble.Iterator) error) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	e.scans.Add(1)
	if span.End != nil && bytes.Compare(span.Start, span.End) >= 0 {
		return nil
	}
	lo, hi := spanBounds(span)
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("storage: %s %s: %w", what, span, err)
	}
	err = walk(it)
	err = errors.Join(err, it.Error(), it.Close())
	if err != nil {
		return fmt.Errorf("storage: %s %s: %w", what, span, err)
	}
	return nil
}

// ScanReverse is Scan in descending key order: fn gets the newest version of each key of
// span, tombstones included, from the last key down, and the scan stops after limit keys
// (limit > 0) or as soon as fn returns false. A scan split over two replicas reads its
// second half this way, from the end of the range towards the first half
// (docs/mayflower.md, "Split scans").
func (e *Engine) ScanReverse(span Span, limit int, fn func(Record) bool) error {
	return e.scanWith("reverse scan", span, func(it *pebble.Iterator) error { return scanNewestReverse(it, limit, fn) })
}

// ScanAt calls fn, in key order, with the newest version not newer than at of each key of
// span that has one (tombstones included): the keys as they were at version at. A replica
// move's catch-up compares replicas this way (docs/elasticity.md): what a replica holds up
// to a version is fixed once the writes stamped before it have landed, so two replicas'
// digests at the same version converge while new writes go on. Stops after limit keys
// (limit > 0) or when fn returns false.
func (e *Engine) ScanAt(span Span, at hlc.Version, limit int, fn func(Record) bool) error {
	return e.scanWith(fmt.Sprintf("scan at %s of", at), span, func(it *pebble.Iterator) error { return scanAt(it, at, limit, fn) })
}

// scanAt visits each user key once: the first entry of a key tells its prefix; a few Nexts,
// then one seek to prefix|^at, pass its versions newer than at (versions sort newest first)
// and land on its newest version not newer than at; a few Nexts, then one seek past the
// prefix, move to the next key. Most keys have one or two versions, so most steps are Nexts,
// which cost a fraction of a seek (a seek per key made the move catch-up digests, which scan
// whole partitions, the largest CPU cost of a replica move; profile in docs/elasticity.md).
// The loop ends with the iterator (finite bounds), after limit keys, or when fn returns
// false. Every pass moves the iterator forward at least one entry.
func scanAt(it *pebble.Iterator, at hlc.Version, limit int, fn func(Record) bool) error {
	var prefix, seek []byte
	emitted := 0
	// versionOf reports whether key is a version of the user key prefix names.
	versionOf := func(key []byte) bool {
		return len(key) == len(prefix)+versionLen && bytes.HasPrefix(key, prefix)
	}
	valid := it.First()
	for valid {
		k := it.Key()
		if len(k) < versionLen {
			return fmt.Errorf("%w: short data key", ErrCorrupt)
		}
		prefix = append(prefix[:0], k[:len(k)-versionLen]...)
		seek = appendInvertedVersion(append(seek[:0], prefix...), at)
		// Versions newer than at.
		for i := 0; valid && versionOf(it.Key()) && bytes.Compare(it.Key(), seek) < 0; i++ {
			if i == nextsBeforeSeek {
				valid = it.SeekGE(seek)
				break
			}
			valid = it.Next()
		}
		if !valid || !versionOf(it.Key()) {
			continue // every version is newer than at: the next key (or the end)
		}
		rec, err := decodeRecordAt(it)
		if err != nil {
			return err
		}
		emitted++
		if !fn(rec) || (limit > 0 && emitted >= limit) {
			return nil
		}
		// The older versions of this key.
		valid = it.Next()
		for i := 0; valid && i < nextsBeforeSeek && versionOf(it.Key()); i++ {
			valid = it.Next()
		}
		if valid && versionOf(it.Key()) {
			valid = it.SeekGE(prefixEnd(prefix))
		}
	}
	return nil
}

// scanNewest drives a bounded iterator over data keys and calls fn with the first (newest)
// version of every user key. The loop ends when the iterator is exhausted (its bounds are
// finite), after limit keys, or when fn returns false.
func scanNewest(it *pebble.Iterator, limit int, fn func(Record) bool) error {
	var cur []byte // key prefix (everything but the version) of the key just emitted
	emitted := 0
	valid := it.First()
	for valid {
		rec, err := decodeRecordAt(it)
		if err != nil {
			return err
		}
		emitted++
		if !fn(rec) || (limit > 0 && emitted >= limit) {
			return nil
		}
		cur = append(cur[:0], it.Key()[:len(it.Key())-versionLen]...)
		// Skip the older versions of this key: a few Nexts, then one seek past them all.
		valid = it.Next()
		for i := 0; valid && i < nextsBeforeSeek && bytes.HasPrefix(it.Key(), cur); i++ {
			valid = it.Next()
		}
		if valid && bytes.HasPrefix(it.Key(), cur) {
			valid = it.SeekGE(prefixEnd(cur))
		}
	}
	return nil
}

// scanNewestReverse drives a bounded iterator backwards and calls fn with the newest version
// of every user key, last key first. A key's versions sort newest first, so going backwards
// the iterator meets a key's oldest version first: it steps back over the key's versions,
// copying the entry it stands on, until the previous entry belongs to another key (or there
// is none); the copy is then the newest version and the iterator already stands on the
// previous key. A key with more than nextsBeforeSeek versions costs one seek to its newest
// version instead. The loop ends when the iterator is exhausted (finite bounds), after limit
// keys, or when fn returns false; every pass moves the iterator back at least one entry.
func scanNewestReverse(it *pebble.Iterator, limit int, fn func(Record) bool) error {
	var prefix, kbuf, vbuf []byte
	emitted := 0
	hold := func() error {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		kbuf = append(kbuf[:0], it.Key()...)
		vbuf = append(vbuf[:0], v...)
		return nil
	}
	valid := it.Last()
	for valid {
		k := it.Key()
		if len(k) < versionLen {
			return fmt.Errorf("%w: short data key", ErrCorrupt)
		}
		prefix = append(prefix[:0], k[:len(k)-versionLen]...)
		for i := 0; ; i++ {
			if i == nextsBeforeSeek {
				// Many versions: seek to the newest (the first entry of the key's prefix).
				if !it.SeekGE(prefix) {
					return errors.Join(fmt.Errorf("%w: versions of a key vanished during a reverse scan", ErrCorrupt), it.Error())
				}
				if err := hold(); err != nil {
					return err
				}
				valid = it.Prev()
				break
			}
			if err := hold(); err != nil {
				return err
			}
			valid = it.Prev()
			if !valid || !bytes.HasPrefix(it.Key(), prefix) {
				break
			}
		}
		rec, err := decodeRecord(kbuf, vbuf)
		if err != nil {
			return err
		}
		emitted++
		if !fn(rec) || (limit > 0 && emitted >= limit) {
			return nil
		}
	}
	return nil
}

// decodeRecordAt decodes the iterator's current entry; the Record owns all its slices.
func decodeRecordAt(it *pebble.Iterator) (Record, error) {
	val, err := it.ValueAndErr()
	if err != nil {
		return Record{}, err
	}
	return decodeRecord(it.Key(), val)
}

// Versions returns every stored version of key, newest first (tests, debugging, repair).
func (e *Engine) Versions(keyspace string, key []byte) ([]Record, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	lo := appendKeyPrefix(nil, keyspace, key)
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, fmt.Errorf("storage: versions %q/%q: %w", keyspace, key, err)
	}
	var out []Record
	// Bounded by the number of versions of one key (the iterator's bounds).
	for valid := it.First(); valid && err == nil; valid = it.Next() {
		var rec Record
		rec, err = decodeRecordAt(it)
		if err == nil {
			out = append(out, rec)
		}
	}
	err = errors.Join(err, it.Error(), it.Close())
	if err != nil {
		return nil, fmt.Errorf("storage: versions %q/%q: %w", keyspace, key, err)
	}
	return out, nil
}

// PutMeta stores a small node-local value (node identity, applied schema) under name, in the
// 'm' key prefix, apart from all data keys.
func (e *Engine) PutMeta(name string, value []byte, sync bool) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	if err := e.db.Set(encodeMetaKey(name), value, writeOptions(sync)); err != nil {
		return fmt.Errorf("storage: put meta %q: %w", name, err)
	}
	return nil
}

// GetMeta returns the value stored by PutMeta under name, as a fresh slice.
func (e *Engine) GetMeta(name string) ([]byte, bool, error) {
	if err := e.checkOpen(); err != nil {
		return nil, false, err
	}
	v, closer, err := e.db.Get(encodeMetaKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("storage: get meta %q: %w", name, err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("storage: get meta %q: %w", name, err)
	}
	return out, true, nil
}

// Stats is a snapshot of the engine's counters and Pebble's metrics.
type Stats struct {
	// DiskBytes is the space used on disk: live and obsolete sstables, WAL files, manifest.
	DiskBytes uint64
	// MemTableBytes is the memory allocated by memtables (including ones being flushed).
	MemTableBytes uint64
	// WALBytes is the physical size of the live WAL files.
	WALBytes uint64
	// WALSyncs is the number of WAL fsyncs Pebble performed since Open. Compared with
	// Applies it shows how well group commit batches writes. If Pebble's fsync histogram is
	// unavailable it falls back to the number of Apply(sync=true) calls.
	WALSyncs int64
	// Applies is the number of successful Apply calls; RecordsApplied the records in them.
	Applies        int64
	RecordsApplied int64
	// Gets and Scans count calls to Get (and GetAt) and Scan.
	Gets  int64
	Scans int64
	// Compactions is the number of compactions Pebble has run since Open.
	Compactions int64
	// ReadAmp is the current read amplification (L0 sublevels plus non-empty levels).
	ReadAmp int
	// WALBytesIn is the logical bytes written to the WAL since Open; IngestedBytes the
	// bytes of sstables ingested (snapshots merged or installed).
	WALBytesIn, IngestedBytes uint64
}

// Stats returns the engine's counters and a few Pebble metrics. It takes Pebble's metrics
// lock, so call it at a reporting interval, not per request.
func (e *Engine) Stats() Stats {
	s := Stats{
		Applies:        e.applies.Load(),
		RecordsApplied: e.recordsApplied.Load(),
		Gets:           e.gets.Load(),
		Scans:          e.scans.Load(),
		WALSyncs:       e.syncApplies.Load(),
	}
	if e.closed.Load() {
		return s
	}
	m := e.db.Metrics()
	s.DiskBytes = m.DiskSpaceUsage()
	s.MemTableBytes = m.MemTable.Size
	s.WALBytes = m.WAL.PhysicalSize
	s.Compactions = m.Compact.Count
	s.ReadAmp = m.ReadAmp()
	s.WALBytesIn = m.WAL.BytesIn
	for _, l := range m.Levels {
		s.IngestedBytes += l.TableBytesIngested
	}
	if h := m.LogWriter.FsyncLatency; h != nil {
		// Every WAL fsync is observed in this histogram, so its sample count is the number
		// of fsyncs.
		var pm dto.Metric
		if err := h.Write(&pm); err == nil && pm.GetHistogram() != nil {
			s.WALSyncs = int64(pm.GetHistogram().GetSampleCount())
		}
	}
	return s
}

// EstimateSpanBytes estimates the bytes span takes on disk (Pebble's estimate over the
// sstables overlapping it; a memtable's content is not counted until it is flushed).
func (e *Engine) EstimateSpanBytes(span Span) (uint64, error) {
	if err := e.checkOpen(); err != nil {
		return 0, err
	}
	lo, hi := spanBounds(span)
	n, err := e.db.EstimateDiskUsage(lo, hi)
	if err != nil {
		return 0, fmt.Errorf("storage: estimate %s: %w", span, err)
	}
	return n, nil
}

// SpanBytes is EstimateSpanBytes, made exact for a span whose estimate is below exactBelow by
// summing its keys and values (every version): a memtable's content is then counted too, so
// small partitions are not taken for empty (a merge, an imbalance) because their data has
// not been flushed. The scan reads at most exactBelow plus a memtable's worth of data.
func (e *Engine) SpanBytes(span Span, exactBelow uint64) (uint64, error) {
	est, err := e.EstimateSpanBytes(span)
	if err != nil || est >= exactBelow {
		return est, err
	}
	lo, hi := spanBounds(span)
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, fmt.Errorf("storage: size of %s: %w", span, err)
	}
	var n uint64
	for valid := it.First(); valid && n < 4*exactBelow; valid = it.Next() {
		n += uint64(len(it.Key()) + len(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, fmt.Errorf("storage: size of %s: %w", span, err)
	}
	return max(est, n), nil
}

// maxMedianScanKeys bounds the keys MedianKey reads; past it, the median of what was read
// is returned (a split there still divides the data, if less evenly).
const maxMedianScanKeys = 4 << 20

// MedianKey returns the user key at the middle of span's data by volume (keys and values of
// every version): the split point of ElasCass 3.1, "such that the resulting sub-ranges
// contain roughly equal volumes of data". nil when span holds fewer than two keys.
func (e *Engine) MedianKey(span Span) ([]byte, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	lo, hi := spanBounds(span)
	if total, err := e.db.EstimateDiskUsage(lo, hi); err == nil && total >= medianBisectAbove {
		return e.medianByEstimate(lo, hi, total)
	}
	return e.medianByScan(lo, hi)
}

// medianBisectAbove: a span whose sstables hold at least this much has its median found by
// bisecting the storage engine's size estimates (a few dozen index lookups) rather than by
// reading it (a 2 GiB partition would take seconds of CPU, every statistics interval); a
// smaller one is read, so data still in memtables counts.
const medianBisectAbove = 16 << 20

// medianBisectSteps bounds the bisection: each halves the key interval, and 64 steps reach
// below any two neighbouring keys of realistic length.
const medianBisectSteps = 64

// medianByEstimate bisects [lo, hi) for the key below which the estimated volume is half of
// total, then returns the first user key at or after it (never the span's first key).
func (e *Engine) medianByEstimate(lo, hi []byte, total uint64) ([]byte, error) {
	a, b := lo, hi
	for range medianBisectSteps {
		mid := midKey(a, b)
		if mid == nil {
			break
		}
		left, err := e.db.EstimateDiskUsage(lo, mid)
		if err != nil {
			return nil, fmt.Errorf("storage: median estimate: %w", err)
		}
		if left < total/2 {
			a = mid
		} else {
			b = mid
		}
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("storage: median: %w", err)
	}
	defer it.Close()
	first := it.First()
	if !first || len(it.Key()) < versionLen {
		return nil, it.Error()
	}
	firstPrefix := bytes.Clone(it.Key()[:len(it.Key())-versionLen])
	for valid := it.SeekGE(a); valid; valid = it.Next() {
		k := it.Key()
		if len(k) < versionLen {
			continue
		}
		prefix := k[:len(k)-versionLen]
		if bytes.Equal(prefix, firstPrefix) {
			continue // the split must leave data on both sides
		}
		return userKeyOf(prefix)
	}
	// The estimate put the middle past the last key (data in memtables): read instead.
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("storage: median: %w", err)
	}
	return e.medianByScan(lo, hi)
}

// midKey returns a byte string strictly between a and b (a < b), or nil when there is none
// this function can find (they differ only past maxMidKeyBytes).
func midKey(a, b []byte) []byte {
	n := max(len(a), len(b)) + 1
	if n > maxMidKeyBytes {
		return nil
	}
	// a and b as big-endian numbers of n base-256 digits (zero-padded: one more digit than
	// either, so there is room between neighbours); mid = (a + b) / 2.
	pa, pb := make([]byte, n), make([]byte, n)
	copy(pa, a)
	copy(pb, b)
	sum := make([]int, n+1)
	carry := 0
	for i := n - 1; i >= 0; i-- {
		v := int(pa[i]) + int(pb[i]) + carry
		sum[i+1], carry = v&0xff, v>>8
	}
	sum[0] = carry
	mid := make([]byte, n)
	rem := sum[0]
	for i := 1; i <= n; i++ {
		v := rem<<8 | sum[i]
		mid[i-1], rem = byte(v>>1), v&1
	}
	if bytes.Compare(mid, a) <= 0 || bytes.Compare(mid, b) >= 0 {
		return nil
	}
	return mid
}

// maxMidKeyBytes bounds midKey's strings (keys are at most a few KiB).
const maxMidKeyBytes = 8 << 10

// medianByScan reads [lo, hi) (at most maxMedianScanKeys keys) for the median by volume.
func (e *Engine) medianByScan(lo, hi []byte) ([]byte, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("storage: median: %w", err)
	}
	type point struct {
		prefix []byte
		cum    int64
	}
	var pts []point
	var total int64
	for valid := it.First(); valid && len(pts) < maxMedianScanKeys; valid = it.Next() {
		k := it.Key()
		if len(k) < versionLen {
			continue
		}
		prefix := k[:len(k)-versionLen]
		total += int64(len(k) + len(it.Value()))
		if n := len(pts); n == 0 || !bytes.Equal(pts[n-1].prefix, prefix) {
			pts = append(pts, point{prefix: bytes.Clone(prefix)})
		}
		pts[len(pts)-1].cum = total
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("storage: median: %w", err)
	}
	if len(pts) < 2 {
		return nil, nil
	}
	// The first key whose data starts at or beyond half the volume (never the first key:
	// the split must leave data on both sides).
	for i := 1; i < len(pts); i++ {
		if pts[i-1].cum >= total/2 {
			return userKeyOf(pts[i].prefix)
		}
	}
	return userKeyOf(pts[len(pts)-1].prefix)
}

// userKeyOf decodes the user key of a data key's prefix ('k' | esc(keyspace) | esc(key)).
func userKeyOf(prefix []byte) ([]byte, error) {
	if len(prefix) == 0 || prefix[0] != dataKeyTag {
		return nil, fmt.Errorf("%w: not a data key", ErrCorrupt)
	}
	_, rest, err := decodeEscaped(prefix[1:])
	if err != nil {
		return nil, err
	}
	uk, _, err := decodeEscaped(rest)
	return uk, err
}
