package storage

// Staged snapshots: files in the data directory's "snapshots" folder that carry a partition
// replica between nodes (a Raft snapshot of a partition's group, and later ElasCass's
// partition moves). A sender exports a partition into a staged file from a consistent
// Pebble snapshot; a receiver writes the chunks it pulls into a staged file of its own and
// then replaces its replica's data with it (ReplacePartition). Names are chosen by the
// caller and validated here: one path element, no separators.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// stagingDir is the staging folder's name inside the data directory.
const stagingDir = "snapshots"

// MaxStagedChunk bounds one ReadStaged or WriteStaged call.
const MaxStagedChunk = 4 << 20

func (e *Engine) stagedPath(name string) (string, error) {
	if name == "" || len(name) > 200 || strings.ContainsAny(name, `/\`) || name == "." || name == ".." || strings.HasSuffix(name, ingestSuffix) {
		return "", fmt.Errorf("storage: staged file name %q is not a plain file name", name)
	}
	return e.fs.PathJoin(e.dir, stagingDir, name), nil
}

// ingestSuffix marks the link ReplacePartition hands to Pebble (which moves it into the
// store), so the staged file itself survives until the install is complete.
const ingestSuffix = ".ingest"

func (e *Engine) ensureStaging() error {
	dir := e.fs.PathJoin(e.dir, stagingDir)
	if err := e.fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("storage: create %s: %w", dir, err)
	}
	return nil
}

// ExportSpanState writes span into the staged file name (ExportSpan) and returns, read from the same consistent Pebble snapshot, the values of rawKeys (nil where a
// key is absent): the state that says what the exported data is a snapshot of (a Raft
// group's applied index, term and configuration) is read atomically with the data.
func (e *Engine) ExportSpanState(span Span, name string, rawKeys [][]byte) (ExportStats, [][]byte, error) {
	if err := e.checkOpen(); err != nil {
		return ExportStats{}, nil, err
	}
	path, err := e.stagedPath(name)
	if err != nil {
		return ExportStats{}, nil, err
	}
	if err := e.ensureStaging(); err != nil {
		return ExportStats{}, nil, err
	}
	snap := e.db.NewSnapshot()
	defer snap.Close()
	values := make([][]byte, len(rawKeys))
	for i, k := range rawKeys {
		v, closer, err := snap.Get(encodeRawKey(nil, k))
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return ExportStats{}, nil, fmt.Errorf("storage: export %s: read state %x: %w", span, k, err)
		}
		values[i] = append([]byte(nil), v...)
		closer.Close()
	}
	stats, err := e.exportFrom(snap, span, path)
	if err != nil {
		return ExportStats{}, nil, err
	}
	return stats, values, nil
}

// StagedSize returns the size of a staged file (found false if there is none).
func (e *Engine) StagedSize(name string) (size int64, found bool, err error) {
	path, err := e.stagedPath(name)
	if err != nil {
		return 0, false, err
	}
	fi, err := e.fs.Stat(path)
	if oserrorNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("storage: stat %s: %w", path, err)
	}
	return fi.Size(), true, nil
}

func oserrorNotExist(err error) bool { return err != nil && errors.Is(err, os.ErrNotExist) }

// ReadStaged reads up to n bytes of a staged file at offset (fewer at its end).
func (e *Engine) ReadStaged(name string, offset int64, n int) ([]byte, error) {
	if n <= 0 || n > MaxStagedChunk || offset < 0 {
		return nil, fmt.Errorf("storage: read staged %q: offset %d, length %d out of range (at most %d)", name, offset, n, MaxStagedChunk)
	}
	path, err := e.stagedPath(name)
	if err != nil {
		return nil, err
	}
	f, err := e.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("storage: read staged %s: %w", path, err)
	}
	defer f.Close()
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("storage: read staged %s at %d: %w", path, offset, err)
	}
	return buf[:got], nil
}

// WriteStaged writes data into a staged file at offset, creating the file if needed, and
// syncs it (a staged snapshot must survive a crash once the install has begun).
func (e *Engine) WriteStaged(name string, offset int64, data []byte) error {
	if len(data) > MaxStagedChunk || offset < 0 {
		return fmt.Errorf("storage: write staged %q: offset %d, %d bytes out of range (at most %d)", name, offset, len(data), MaxStagedChunk)
	}
	if err := e.checkOpen(); err != nil {
		return err
	}
	path, err := e.stagedPath(name)
	if err != nil {
		return err
	}
	if err := e.ensureStaging(); err != nil {
		return err
	}
	f, err := e.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("storage: write staged %s: %w", path, err)
	}
	if _, err := f.WriteAt(data, offset); err != nil {
		f.Close()
		return fmt.Errorf("storage: write staged %s at %d: %w", path, offset, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("storage: sync staged %s: %w", path, err)
	}
	return f.Close()
}

// RemoveStaged removes a staged file; removing one that does not exist is not an error.
func (e *Engine) RemoveStaged(name string) error {
	path, err := e.stagedPath(name)
	if err != nil {
		return err
	}
	if err := e.fs.Remove(path); err != nil && !oserrorNotExist(err) {
		return fmt.Errorf("storage: remove staged %s: %w", path, err)
	}
	return nil
}

// CheckStaged reads a whole staged snapshot file back and checks that every entry is a
// well-formed record lying in span (an empty file holds none), calling fn (if not nil) with
// each record in key order.
func (e *Engine) CheckStaged(name string, span Span, fn func(Record)) (ExportStats, error) {
	path, err := e.stagedPath(name)
	if err != nil {
		return ExportStats{}, err
	}
	stats, err := e.scanSnapshot(path, span, fn)
	if err != nil {
		return ExportStats{}, fmt.Errorf("storage: check staged %s: %w", name, err)
	}
	return stats, nil
}

// ReplaceSpan replaces span's data (a partition replica) with the staged snapshot file name:
// before is applied and synced first (a marker that an install is under way), then the
// partition is deleted and the file ingested, then after is applied and synced (the new
// applied state, the marker removed), and the staged file is removed. Each step is
// idempotent, so a node that stops in the middle redoes the whole replacement from the
// staged file (the marker says which) and ends in the same state. The file must hold only
// records of span. With name "" the span is only deleted (a replica that left its group).
func (e *Engine) ReplaceSpan(span Span, name string, before, after []RawOp) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	wrap := func(err error) error {
		return fmt.Errorf("storage: replace %s with %q: %w", span, name, err)
	}
	var path string
	var stats ExportStats
	if name != "" {
		var err error
		if path, err = e.stagedPath(name); err != nil {
			return err
		}
		if stats, err = e.scanSnapshot(path, span, nil); err != nil {
			return wrap(err)
		}
	}
	if len(before) > 0 {
		if err := e.ApplyBatch(nil, before, true); err != nil {
			return wrap(err)
		}
	}
	if err := e.DeleteSpan(span, true); err != nil {
		return wrap(err)
	}
	if stats.Versions > 0 {
		// Pebble moves an ingested file into the store: hand it a link, so the staged file
		// stays until the replacement is complete.
		link := path + ingestSuffix
		_ = e.fs.Remove(link)
		if err := e.fs.Link(path, link); err != nil {
			return wrap(fmt.Errorf("link for ingestion: %w", err))
		}
		if err := e.db.Ingest(contextBackground(), []string{link}); err != nil {
			_ = e.fs.Remove(link)
			return wrap(err)
		}
	}
	if err := e.ApplyBatch(nil, after, true); err != nil {
		return wrap(err)
	}
	if name == "" {
		return nil
	}
	return e.RemoveStaged(name)
}

// MergeSpan adds the records of the staged snapshot file name to span without deleting what
// span holds (a new replica of a move merging a snapshot into the writes it has already
// taken): versions are distinct keys, so the result is the union, and a version present on
// both sides carries the same bytes. The file must hold only records of span; it is removed
// afterwards. Idempotent: merging the same file twice adds nothing the second time.
func (e *Engine) MergeSpan(span Span, name string) (ExportStats, error) {
	if err := e.checkOpen(); err != nil {
		return ExportStats{}, err
	}
	wrap := func(err error) error {
		return fmt.Errorf("storage: merge %q into %s: %w", name, span, err)
	}
	path, err := e.stagedPath(name)
	if err != nil {
		return ExportStats{}, err
	}
	stats, err := e.scanSnapshot(path, span, nil)
	if err != nil {
		return ExportStats{}, wrap(err)
	}
	if stats.Versions > 0 {
		link := path + ingestSuffix
		_ = e.fs.Remove(link)
		if err := e.fs.Link(path, link); err != nil {
			return ExportStats{}, wrap(fmt.Errorf("link for ingestion: %w", err))
		}
		if err := e.db.Ingest(contextBackground(), []string{link}); err != nil {
			_ = e.fs.Remove(link)
			return ExportStats{}, wrap(err)
		}
	}
	return stats, e.RemoveStaged(name)
}
