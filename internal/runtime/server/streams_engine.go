package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"meridian/internal/config"
	"meridian/internal/kawkab"
	"meridian/internal/kawkab/s3store"
	"meridian/internal/metadata"
)

// The adapter between the Streams service and the node's stream storage. It is the only
// file of the server that calls internal/kawkab's engine: today it opens one kawkab.Stream
// per stream under <data>/streams (lazily, on first use at the primary) and keeps the
// object store ready; when the node-level kawkab.Store (uploads, local deletion,
// backpressure with ErrStoreFull, remote historical reads) lands, only this file changes.

// streamsDirName is the directory of a node's stream files, under its data directory.
const streamsDirName = "streams"

// maxStreamPageBytes bounds one page of records (ReadRange, ReadRecords, Subscribe) and one
// engine read: a stream is opened with MaxReadRecords = maxStreamPageBytes / R.
const maxStreamPageBytes = 4 << 20

// errStoreFull is the sentinel for a full local store: kawkab.ErrStoreFull once the Store
// exists (set it here); until then nothing returns it. streamStatus maps it to
// RESOURCE_EXHAUSTED.
var errStoreFull = errors.New("stream store full")

// localStream is one open stream and its tail notification.
type localStream struct {
	s *kawkab.Stream
	// tailMu guards tailCh, closed and replaced whenever records are appended.
	tailMu sync.Mutex
	tailCh chan struct{}
}

// streamStore holds the node's open streams and its object store.
type streamStore struct {
	dir     string
	log     *slog.Logger
	opts    kawkab.StreamOptions
	objects kawkab.ObjectStore // for the Store (uploads, historical reads); not used yet
	closeOS func() error

	mu      sync.Mutex
	closed  bool
	streams map[uint64]*localStream
	// dropped are the streams dropped since start: never opened (or created) again, even
	// by a request that looked the stream up just before its drop.
	dropped map[uint64]bool
}

// newStreamStore opens the stream store of a node whose data directory is dataDir.
func newStreamStore(dataDir string, objects kawkab.ObjectStore, closeOS func() error, log *slog.Logger) (*streamStore, error) {
	dir := filepath.Join(dataDir, streamsDirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	if closeOS == nil {
		closeOS = func() error { return nil }
	}
	return &streamStore{dir: dir, log: log, objects: objects, closeOS: closeOS, streams: map[uint64]*localStream{}, dropped: map[uint64]bool{}}, nil
}

// openObjectStore builds the object store the configuration names. Secrets come from the
// environment variables it names and are never logged.
func openObjectStore(ctx context.Context, cfg config.Streams, dataDir string) (kawkab.ObjectStore, func() error, string, error) {
	switch cfg.ObjectStore {
	case config.StreamsDir:
		dir := cfg.Dir
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(dataDir, dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, "", fmt.Errorf("streams: object store directory: %w", err)
		}
		st, err := kawkab.OpenDirObjectStore(dir)
		if err != nil {
			return nil, nil, "", fmt.Errorf("streams: object store directory: %w", err)
		}
		return st, st.Close, "dir " + dir, nil
	case config.StreamsS3Store:
		s3 := cfg.S3
		c := s3store.Config{Endpoint: s3.Endpoint, Region: s3.Region, Bucket: s3.Bucket, PathStyle: s3.PathStyle}
		if s3.AccessKeyIDEnv != "" {
			c.AccessKeyID, c.SecretAccessKey = os.Getenv(s3.AccessKeyIDEnv), os.Getenv(s3.SecretAccessKeyEnv)
			if c.AccessKeyID == "" || c.SecretAccessKey == "" {
				return nil, nil, "", fmt.Errorf("streams: s3: environment variables %s and %s (streams.s3.access_key_id_env, secret_access_key_env) must both be set", s3.AccessKeyIDEnv, s3.SecretAccessKeyEnv)
			}
			if s3.SessionTokenEnv != "" {
				c.SessionToken = os.Getenv(s3.SessionTokenEnv)
			}
		}
		st, err := s3store.New(ctx, c)
		if err != nil {
			return nil, nil, "", fmt.Errorf("streams: %w", err)
		}
		where := "s3 bucket " + s3.Bucket
		if s3.Endpoint != "" {
			where += " at " + s3.Endpoint
		}
		return st, func() error { return nil }, where, nil
	default: // embedded
		const bucket = "meridian"
		srv, err := s3store.StartServer(filepath.Join(dataDir, "streams-objects"), s3store.ServerOptions{Buckets: []string{bucket}})
		if err != nil {
			return nil, nil, "", fmt.Errorf("streams: embedded object store: %w", err)
		}
		st, err := s3store.New(ctx, srv.Config(bucket))
		if err != nil {
			srv.Close()
			return nil, nil, "", fmt.Errorf("streams: embedded object store: %w", err)
		}
		return st, srv.Close, "embedded S3 server at " + srv.Endpoint(), nil
	}
}

// get returns the open stream of rec, opening it (recovering it from its files) or
// creating it on first use.
func (st *streamStore) get(rec *metadata.StreamRecord) (*localStream, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, fmt.Errorf("streams: %w", kawkab.ErrStreamClosed)
	}
	if ls, ok := st.streams[rec.ID]; ok {
		return ls, nil
	}
	if st.dropped[rec.ID] {
		return nil, fmt.Errorf("streams: stream %d was dropped: %w", rec.ID, kawkab.ErrStreamClosed)
	}
	cfg, err := rec.Config()
	if err != nil {
		return nil, err
	}
	opts := st.opts
	opts.MaxReadRecords = max(1, maxStreamPageBytes/cfg.RecordBytes)
	s, err := kawkab.OpenStream(st.dir, rec.ID, opts)
	if errors.Is(err, fs.ErrNotExist) {
		s, err = kawkab.CreateStream(st.dir, cfg, opts)
	}
	if err != nil {
		return nil, err
	}
	if got := s.Config(); got.RecordBytes != cfg.RecordBytes || got.ValueOffset != cfg.ValueOffset {
		s.Close()
		return nil, fmt.Errorf("streams: stream %d's files have records of %d bytes (value at %d), the catalog says %d (value at %d): %w",
			rec.ID, got.RecordBytes, got.ValueOffset, cfg.RecordBytes, cfg.ValueOffset, kawkab.ErrCorrupt)
	}
	if r := s.Recovery(); r.CutBytes > 0 || r.DroppedNodes > 0 || r.Reindexed > 0 {
		st.log.Info("stream recovered", "stream", rec.Spec.Keyspace+"/"+rec.Spec.Name, "id", rec.ID, "records", r.Records,
			"cut_bytes", r.CutBytes, "cut_records", r.CutRecords, "dropped_index_nodes", r.DroppedNodes, "reindexed", r.Reindexed)
	}
	ls := &localStream{s: s, tailCh: make(chan struct{})}
	st.streams[rec.ID] = ls
	return ls, nil
}

// append appends a batch of whole records and wakes the stream's subscribers.
func (st *streamStore) append(rec *metadata.StreamRecord, batch []byte) (uint64, error) {
	ls, err := st.get(rec)
	if err != nil {
		return 0, err
	}
	first, err := ls.s.Append(batch)
	if err != nil {
		return 0, err
	}
	ls.tailMu.Lock()
	close(ls.tailCh)
	ls.tailCh = make(chan struct{})
	ls.tailMu.Unlock()
	return first, nil
}

// tail returns the stream's length and a channel closed at its next append.
func (st *streamStore) tail(rec *metadata.StreamRecord) (uint64, <-chan struct{}, error) {
	ls, err := st.get(rec)
	if err != nil {
		return 0, nil, err
	}
	ls.tailMu.Lock()
	ch := ls.tailCh
	ls.tailMu.Unlock()
	return ls.s.Len(), ch, nil
}

// info returns the stream's length and last timestamp.
func (st *streamStore) info(rec *metadata.StreamRecord) (n uint64, last int64, has bool, err error) {
	ls, err := st.get(rec)
	if err != nil {
		return 0, 0, false, err
	}
	last, has = ls.s.LastTimestamp()
	return ls.s.Len(), last, has, nil
}

// readRecords returns up to n records from first (n at most maxStreamPageBytes worth).
func (st *streamStore) readRecords(rec *metadata.StreamRecord, first uint64, n int) ([]byte, error) {
	ls, err := st.get(rec)
	if err != nil {
		return nil, err
	}
	return ls.s.ReadRecords(first, n)
}

// readRange returns the first records with timestamps in [tl, th] (at most
// maxStreamPageBytes of them; more: others follow from first + n).
func (st *streamStore) readRange(rec *metadata.StreamRecord, tl, th int64) (first uint64, n int, recs []byte, more bool, err error) {
	ls, err := st.get(rec)
	if err != nil {
		return 0, 0, nil, false, err
	}
	r, err := ls.s.ReadRange(tl, th)
	if err != nil {
		return 0, 0, nil, false, err
	}
	return r.First, r.N, r.Records, r.More, nil
}

// aggregate summarizes the values of the records in [tl, th].
func (st *streamStore) aggregate(rec *metadata.StreamRecord, tl, th int64) (kawkab.Summary, error) {
	ls, err := st.get(rec)
	if err != nil {
		return kawkab.Summary{}, err
	}
	return ls.s.Aggregate(tl, th)
}

// markDropped refuses every later use of a stream (the drop's files go in the background).
func (st *streamStore) markDropped(id uint64) {
	st.mu.Lock()
	st.dropped[id] = true
	st.mu.Unlock()
}

// drop closes a dropped stream and removes its files.
func (st *streamStore) drop(id uint64) error {
	st.mu.Lock()
	ls := st.streams[id]
	delete(st.streams, id)
	st.dropped[id] = true
	st.mu.Unlock()
	if ls != nil {
		if err := ls.s.Close(); err != nil && !errors.Is(err, kawkab.ErrStreamClosed) {
			st.log.Warn("closing a dropped stream", "id", id, "err", err)
		}
		ls.tailMu.Lock()
		close(ls.tailCh) // subscribers wake and find the stream gone
		ls.tailCh = make(chan struct{})
		ls.tailMu.Unlock()
	}
	return os.RemoveAll(filepath.Join(st.dir, kawkab.StreamDirName(id)))
}

// sweep removes the files of streams that are not in the catalog any more (dropped while
// this node was down): directories s<ID> whose ID keep does not hold.
func (st *streamStore) sweep(keep func(id uint64) bool) {
	ents, err := os.ReadDir(st.dir)
	if err != nil {
		st.log.Warn("listing the stream directory", "dir", st.dir, "err", err)
		return
	}
	for _, e := range ents {
		id, err := strconv.ParseUint(strings.TrimPrefix(e.Name(), "s"), 10, 64)
		if !e.IsDir() || err != nil || kawkab.StreamDirName(id) != e.Name() || keep(id) {
			continue
		}
		if err := st.drop(id); err != nil {
			st.log.Warn("removing a dropped stream's files", "id", id, "err", err)
			continue
		}
		st.log.Info("removed the files of a stream dropped while this node was down", "id", id)
	}
}

// close closes every open stream and the object store.
func (st *streamStore) close() error {
	st.mu.Lock()
	st.closed = true
	streams := st.streams
	st.streams = map[uint64]*localStream{}
	st.mu.Unlock()
	var first error
	for _, ls := range streams {
		if err := ls.s.Close(); err != nil && first == nil {
			first = err
		}
		ls.tailMu.Lock()
		close(ls.tailCh)
		ls.tailCh = make(chan struct{})
		ls.tailMu.Unlock()
	}
	if err := st.closeOS(); err != nil && first == nil {
		first = err
	}
	return first
}
