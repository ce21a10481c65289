package storage

// Partition snapshots: a whole partition replica moved as one file.
//
// ElasCass bootstrapping (../shared/seeds/elascass-node-bootstrapping.txt) moves consolidated
// partition replicas between nodes instead of migrating key-value pairs one by one ("each
// partition of data into single transferable replicas to eliminate the overhead of migrating
// individual key-value pairs"). Here a partition replica is exported into one sstable written
// with Pebble's sstable writer from a consistent snapshot, shipped by the caller, and ingested
// on the receiving node with pebble.DB.Ingest, which links the file into the LSM without
// rewriting it key by key (DESIGN.md section 4 (storage engine): "partition snapshots as SSTs").

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrPartitionNotEmpty is returned by IngestSpan when the target span already holds data;
// the caller deletes it first (DeleteSpan).
var ErrPartitionNotEmpty = errors.New("storage: partition already holds data")

// ExportStats describes one partition snapshot file.
type ExportStats struct {
	// Keys is the number of distinct user keys.
	Keys int
	// Versions is the number of stored versions (tombstones included); Versions >= Keys.
	Versions int
	// Bytes is the size of the snapshot file.
	Bytes int64
}

// ExportSpan writes every version of every key of span (a partition replica), tombstones
// included, into one sstable at path (on Options.FS), read from a consistent Pebble snapshot
// so concurrent writes are either wholly in or wholly out. The file is fsynced before
// ExportSpan returns. An existing file at path is replaced. A span with no data exports a
// valid empty sstable. On error the partial file is removed.
func (e *Engine) ExportSpan(span Span, path string) (stats ExportStats, err error) {
	if err := e.checkOpen(); err != nil {
		return ExportStats{}, err
	}
	snap := e.db.NewSnapshot()
	defer snap.Close()
	return e.exportFrom(snap, span, path)
}

// exportFrom writes span as read from snap into an sstable at path.
func (e *Engine) exportFrom(snap *pebble.Snapshot, span Span, path string) (stats ExportStats, err error) {
	wrap := func(err error) error {
		return fmt.Errorf("storage: export %s to %s: %w", span, path, err)
	}
	lo, hi := spanBounds(span)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return ExportStats{}, wrap(err)
	}
	defer func() { err = errors.Join(err, it.Close()) }()

	f, err := e.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return ExportStats{}, wrap(err)
	}
	// The writer uses the DB's comparer, key schema and table format, so the receiving
	// engine (same binary, same FormatMajorVersion) accepts the file for ingestion. Level 0
	// options: the file may land on any level, so it must not claim to be bottommost.
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f),
		e.popts.MakeWriterOptions(0, e.db.TableFormat()))
	closed := false
	defer func() {
		if !closed {
			_ = w.Close()
		}
		if err != nil {
			_ = e.fs.Remove(path)
		}
	}()

	var cur []byte // key prefix of the current user key, to count distinct keys
	// Bounded by the partition's size (finite iterator bounds, one snapshot).
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		val, err := it.ValueAndErr()
		if err != nil {
			return ExportStats{}, wrap(err)
		}
		// Validate before shipping: a corrupt entry must fail here, not on the receiver.
		if _, err := decodeRecord(k, val); err != nil {
			return ExportStats{}, wrap(err)
		}
		prefix := k[:len(k)-versionLen]
		if stats.Versions == 0 || string(prefix) != string(cur) {
			stats.Keys++
			cur = append(cur[:0], prefix...)
		}
		stats.Versions++
		if err := w.Set(k, val); err != nil {
			return ExportStats{}, wrap(err)
		}
	}
	if err := it.Error(); err != nil {
		return ExportStats{}, wrap(err)
	}
	closed = true
	// Close flushes, fsyncs (objstorageprovider's file writable syncs in Finish) and closes.
	if err := w.Close(); err != nil {
		return ExportStats{}, wrap(err)
	}
	fi, err := e.fs.Stat(path)
	if err != nil {
		return ExportStats{}, wrap(err)
	}
	stats.Bytes = fi.Size()
	return stats, nil
}

// IngestSpan ingests a file written by ExportSpan (moved onto Options.FS by the caller) into
// this engine. It first reads the whole file: every key must decode and lie in span, and span
// must hold no data here, else it returns an error wrapping ErrPartitionNotEmpty (the caller
// deletes the span first). On success the file is gone: Pebble moves (links) it into the
// store. An empty snapshot ingests nothing and its file is removed too.
//
// A write applied to the span between the emptiness check and the ingestion is not lost:
// versions are distinct keys, so the ingested versions merge with it, and an ingested copy
// of the same version carries the same bytes.
func (e *Engine) IngestSpan(span Span, path string) (ExportStats, error) {
	if err := e.checkOpen(); err != nil {
		return ExportStats{}, err
	}
	wrap := func(err error) error { return fmt.Errorf("storage: ingest %s: %w", path, err) }
	fi, err := e.fs.Stat(path)
	if err != nil {
		return ExportStats{}, wrap(err)
	}
	stats, err := e.scanSnapshot(path, span, nil)
	if err != nil {
		return ExportStats{}, wrap(err)
	}
	stats.Bytes = fi.Size()
	if stats.Versions == 0 {
		if err := e.fs.Remove(path); err != nil {
			return ExportStats{}, wrap(err)
		}
		return stats, nil
	}
	empty, err := e.spanEmpty(span)
	if err != nil {
		return ExportStats{}, wrap(err)
	}
	if !empty {
		return ExportStats{}, wrap(fmt.Errorf("%w: %s", ErrPartitionNotEmpty, span))
	}
	if err := e.db.Ingest(contextBackground(), []string{path}); err != nil {
		return ExportStats{}, wrap(err)
	}
	return stats, nil
}

// scanSnapshot reads a snapshot file with an external iterator, checks that every entry is
// a well-formed record lying in span, counts keys and versions, and calls fn (if not nil)
// with every record in key order.
func (e *Engine) scanSnapshot(path string, span Span, fn func(Record)) (stats ExportStats, err error) {
	f, err := e.fs.Open(path)
	if err != nil {
		return ExportStats{}, err
	}
	// NewExternalIter owns f from here on (closed with the iterator, or on its error).
	it, err := pebble.NewExternalIter(e.popts, &pebble.IterOptions{}, [][]sstable.ReadableFile{{f}})
	if err != nil {
		return ExportStats{}, fmt.Errorf("open sstable: %w", err)
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	var cur []byte
	// Bounded by the file's size.
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		val, err := it.ValueAndErr()
		if err != nil {
			return ExportStats{}, err
		}
		rec, err := decodeRecord(k, val)
		if err != nil {
			return ExportStats{}, err
		}
		if rec.Keyspace != span.Keyspace || !span.Contains(rec.Key) {
			return ExportStats{}, fmt.Errorf("%w: snapshot holds %q/%q, outside %s",
				ErrCorrupt, rec.Keyspace, rec.Key, span)
		}
		prefix := k[:len(k)-versionLen]
		if stats.Versions == 0 || string(prefix) != string(cur) {
			stats.Keys++
			cur = append(cur[:0], prefix...)
		}
		stats.Versions++
		if fn != nil {
			fn(rec)
		}
	}
	if err := it.Error(); err != nil {
		return ExportStats{}, err
	}
	return stats, nil
}

// spanEmpty reports whether span has no visible data key.
func (e *Engine) spanEmpty(span Span) (empty bool, err error) {
	lo, hi := spanBounds(span)
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, err
	}
	empty = !it.First()
	return empty, errors.Join(it.Error(), it.Close())
}

// DeleteSpan removes every version of every key of span with one range deletion (cheap to
// write; compactions reclaim the space later). With sync=true it returns after the WAL is
// fsynced.
func (e *Engine) DeleteSpan(span Span, sync bool) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	lo, hi := spanBounds(span)
	if err := e.db.DeleteRange(lo, hi, writeOptions(sync)); err != nil {
		return fmt.Errorf("storage: delete %s: %w", span, err)
	}
	return nil
}

func contextBackground() context.Context { return context.Background() }

// DeleteKeyspace removes every version of every key of every partition of the keyspace with
// one range deletion (a dropped keyspace), synced.
func (e *Engine) DeleteKeyspace(keyspace string) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	lo := appendKeyspacePrefix(nil, keyspace)
	if err := e.db.DeleteRange(lo, prefixEnd(lo), pebble.Sync); err != nil {
		return fmt.Errorf("storage: delete keyspace %q: %w", keyspace, err)
	}
	return nil
}
