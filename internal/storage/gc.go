package storage

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// gcBatchDeletes caps the deletions committed in one batch, so a large maxVersions does not
// build one huge batch.
const gcBatchDeletes = 1024

// GC deletes, in every partition of keyspace, the versions that are older than the newest
// version of their key AND whose wall time is before horizon (WallNanos < horizon). The
// newest version of every key, tombstone or not, is always kept: a tombstone must keep
// shadowing older versions held by other replicas until repair has spread it, and deciding
// when that is safe belongs to the caller (DESIGN.md section 4 (storage engine)).
//
// GC is bounded: it deletes at most maxVersions versions per call (maxVersions must be > 0)
// and reports whether more deletable versions remain. It is incremental: a call that stops
// at the limit remembers where, and the next call for the keyspace resumes there, so
// `for more { GC(...) }` walks the keyspace once instead of rescanning the cleaned prefix. A
// pass that reaches the end of the keyspace returns more=false and the next call starts over;
// versions before the resume point that became deletable meanwhile (a later horizon) are
// collected by that next pass. GC deletions are not synced: losing some in a crash only
// leaves garbage for the next pass.
func (e *Engine) GC(keyspace string, horizon time.Time, maxVersions int) (deleted int, more bool, err error) {
	if err := e.checkOpen(); err != nil {
		return 0, false, err
	}
	if maxVersions <= 0 {
		return 0, false, fmt.Errorf("storage: gc %q: maxVersions must be positive, got %d", keyspace, maxVersions)
	}
	horizonNanos := horizon.UnixNano()
	ksLo := appendKeyspacePrefix(nil, keyspace)
	ksHi := prefixEnd(ksLo)

	lo := ksLo
	e.gcMu.Lock()
	if r, ok := e.gcResume[keyspace]; ok {
		lo = r
	}
	e.gcMu.Unlock()

	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: ksHi})
	if err != nil {
		return 0, false, fmt.Errorf("storage: gc %q: %w", keyspace, err)
	}
	deleted, resume, err := e.gcScan(it, horizonNanos, maxVersions)
	err = errors.Join(err, it.Close())
	if err != nil {
		return deleted, false, fmt.Errorf("storage: gc %q: %w", keyspace, err)
	}
	e.gcMu.Lock()
	if resume != nil {
		e.gcResume[keyspace] = resume
	} else {
		delete(e.gcResume, keyspace)
	}
	e.gcMu.Unlock()
	return deleted, resume != nil, nil
}

// gcScan walks the iterator (a keyspace span, starting at the first version of a key),
// deletes up to limit eligible versions, and returns the key prefix at which the next call
// must resume when another eligible version exists after the limit, else nil. The loop is
// bounded by the iterator's finite span.
func (e *Engine) gcScan(it *pebble.Iterator, horizonNanos int64, limit int) (deleted int, resume []byte, err error) {
	b := e.db.NewBatch()
	defer func() { err = errors.Join(err, b.Close()) }()
	flush := func() error {
		if b.Empty() {
			return nil
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
		b.Reset()
		return nil
	}
	var cur []byte // key prefix of the key whose newest version was seen last
	haveCur := false
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		prefix, v, err := splitVersion(k)
		if err != nil {
			return deleted, nil, err
		}
		if !haveCur || !bytes.Equal(prefix, cur) {
			// First entry of a key is its newest version (inverted versions): always kept.
			cur = append(cur[:0], prefix...)
			haveCur = true
			continue
		}
		if v.WallNanos >= horizonNanos {
			continue
		}
		if deleted >= limit {
			// One more eligible version exists: resume at its key, from its newest version,
			// so the next call again recognises which version to keep.
			return deleted, cur, flush()
		}
		if err := b.Delete(k, nil); err != nil {
			return deleted, nil, err
		}
		deleted++
		if b.Count() >= gcBatchDeletes {
			if err := flush(); err != nil {
				return deleted, nil, err
			}
		}
	}
	if err := it.Error(); err != nil {
		return deleted, nil, err
	}
	return deleted, nil, flush()
}
