package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"meridian/internal/config"
	"meridian/internal/kawkab"
	"meridian/internal/kawkab/s3store"
	"meridian/internal/metadata"
)

// The adapter between the Streams service and the node's stream storage. It is the only
// file of the server that calls internal/kawkab's engine: the node's kawkab.Store under
// <data>/streams (thesis 5.3.2: the local chunk store, uploads of full chunks to the object
// store, deletion of uploaded chunks once the local store is half full, appends slowed and
// then declined when it fills, the buffer cache in reads), the streams this node is the
// primary of opened in it on first use, and remote readers of the object store for
// historical reads of streams whose primary is another node (5.7.4: the primary sends
// nothing for them).

// streamsDirName is the directory of a node's stream files, under its data directory.
const streamsDirName = "streams"

// maxStreamPageBytes bounds one page of records (ReadRange, ReadRecords, Subscribe) and one
// engine read: streams are opened with MaxReadBytes = maxStreamPageBytes.
const maxStreamPageBytes = 4 << 20

// remoteRefreshInterval is how stale a remote reader's view of the uploads may be: a
// historical read refreshes the manifest (one GET) when it is older.
const remoteRefreshInterval = time.Second

// errStoreFull is the local store's refusal (kawkab.ErrStoreFull): streamStatus maps it to
// RESOURCE_EXHAUSTED.
var errStoreFull = kawkab.ErrStoreFull

// errNotUploaded is wrapped by a historical read's error when nothing of the stream is in
// the object store yet.
var errNotUploaded = errors.New("nothing of the stream is uploaded yet")

// localStream is one open stream and its tail notification.
type localStream struct {
	s *kawkab.Stream
	// tailMu guards tailCh, closed and replaced whenever records are appended.
	tailMu sync.Mutex
	tailCh chan struct{}
}

// remoteStream is a historical reader of a stream another node is the primary of.
type remoteStream struct {
	mu        sync.Mutex // serializes refreshes
	r         *kawkab.RemoteStream
	refreshed time.Time
}

// streamReader is what reads need of a stream: the primary's own (a kawkab.Stream) or the
// object store's uploaded prefix (a kawkab.RemoteStream).
type streamReader interface {
	Len() uint64
	ReadRecords(first uint64, n int) ([]byte, error)
	ReadRange(tl, th int64) (kawkab.RangeResult, error)
	Aggregate(tl, th int64) (kawkab.Summary, error)
}

// streamStore holds the node's store, its open streams and remote readers.
type streamStore struct {
	dir     string
	log     *slog.Logger
	store   *kawkab.Store
	cache   *kawkab.Cache
	objects kawkab.ObjectStore
	prefix  string
	closeOS func() error

	mu      sync.Mutex
	closed  bool
	streams map[uint64]*localStream
	remotes map[uint64]*remoteStream
	// dropped are the streams dropped since start: never opened (or created) again, even
	// by a request that looked the stream up just before its drop.
	dropped map[uint64]bool
}

// newStreamStore opens the stream store of a node whose data directory is dataDir, with the
// section's capacities (validated), uploading to objects.
func newStreamStore(dataDir string, cfg config.Streams, objects kawkab.ObjectStore, closeOS func() error, log *slog.Logger) (*streamStore, error) {
	dir := filepath.Join(dataDir, streamsDirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	if closeOS == nil {
		closeOS = func() error { return nil }
	}
	cacheBytes := int64(cfg.CacheBytes)
	if cacheBytes == 0 {
		cacheBytes = 256 << 20
	}
	cache, err := kawkab.NewCache(kawkab.CacheConfig{CapacityBytes: cacheBytes})
	if err != nil {
		return nil, fmt.Errorf("streams: buffer cache: %w", err)
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = kawkab.DefaultStorePrefix
	}
	store, err := kawkab.OpenStore(dir, kawkab.StoreOptions{
		ObjectStore: objects, Prefix: prefix, UploadWorkers: cfg.UploadWorkers,
		CapacityBytes: int64(cfg.LocalCapacityBytes), Cache: cache,
		Stream: kawkab.StreamOptions{MaxReadBytes: maxStreamPageBytes},
	})
	if err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	return &streamStore{dir: dir, log: log, store: store, cache: cache, objects: objects, prefix: prefix, closeOS: closeOS,
		streams: map[uint64]*localStream{}, remotes: map[uint64]*remoteStream{}, dropped: map[uint64]bool{}}, nil
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
	s, err := st.store.Open(rec.ID)
	if errors.Is(err, kawkab.ErrStreamNotFound) {
		s, err = st.store.Create(cfg)
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

// remote returns a historical reader of rec's uploaded records, its view of the uploads at
// most remoteRefreshInterval old. It never contacts the primary: the metadata, the manifest,
// the index and the data come from the object store.
func (st *streamStore) remote(ctx context.Context, rec *metadata.StreamRecord) (*kawkab.RemoteStream, error) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, fmt.Errorf("streams: %w", kawkab.ErrStreamClosed)
	}
	if st.dropped[rec.ID] {
		st.mu.Unlock()
		return nil, fmt.Errorf("streams: stream %d was dropped: %w", rec.ID, kawkab.ErrStreamClosed)
	}
	rs := st.remotes[rec.ID]
	if rs == nil {
		rs = &remoteStream{}
		st.remotes[rec.ID] = rs
	}
	st.mu.Unlock()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.r == nil {
		cfg, err := rec.Config()
		if err != nil {
			return nil, err
		}
		r, err := kawkab.OpenRemoteStream(ctx, st.objects, st.prefix, rec.ID, kawkab.RemoteOptions{
			Cache: st.cache, MaxReadRecords: max(1, maxStreamPageBytes/cfg.RecordBytes)})
		if errors.Is(err, kawkab.ErrNotFound) {
			return nil, fmt.Errorf("streams: stream %d: %w", rec.ID, errNotUploaded)
		}
		if err != nil {
			return nil, err
		}
		rs.r, rs.refreshed = r, time.Now()
		return r, nil
	}
	if time.Since(rs.refreshed) > remoteRefreshInterval {
		if _, err := rs.r.Refresh(ctx); err != nil {
			return nil, err
		}
		rs.refreshed = time.Now()
	}
	return rs.r, nil
}

// reader returns what reads of rec use: the stream itself at its primary, else (historical
// reads) the object store's uploaded records.
func (st *streamStore) reader(ctx context.Context, rec *metadata.StreamRecord, primary bool) (streamReader, error) {
	if primary {
		ls, err := st.get(rec)
		if err != nil {
			return nil, err
		}
		return ls.s, nil
	}
	return st.remote(ctx, rec)
}

// stats is the node store's state (uploads, local store, cache).
func (st *streamStore) stats() kawkab.StoreStats { return st.store.Stats() }

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
	st.mu.Lock()
	delete(st.remotes, id)
	st.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(st.dir, kawkab.StreamDirName(id))); err != nil {
		return err
	}
	return st.deleteObjects(id)
}

// deleteObjects deletes a dropped stream's uploads (<prefix>/s<id>/…), bounded in time.
func (st *streamStore) deleteObjects(id uint64) error {
	if st.objects == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	objs, err := st.objects.List(ctx, st.prefix+"/"+kawkab.StreamDirName(id)+"/")
	if err != nil {
		return fmt.Errorf("streams: listing stream %d's uploads: %w", id, err)
	}
	for _, o := range objs {
		if err := st.objects.Delete(ctx, o.Key); err != nil {
			return fmt.Errorf("streams: deleting stream %d's upload %s: %w", id, o.Key, err)
		}
	}
	return nil
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
	if err := st.store.Close(); err != nil && first == nil {
		first = err
	}
	if err := st.closeOS(); err != nil && first == nil {
		first = err
	}
	return first
}
