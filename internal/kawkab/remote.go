package kawkab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Historical reads at a node other than the primary (thesis 5.7.5, Fig. 5.12: "the primary
// node sends 0 bytes" for them): a RemoteStream reads a stream's uploaded prefix from the
// object store alone — its metadata and manifest, its index nodes by ranged GETs of 16 KiB,
// its data by ranged GETs of a few blocks in parallel (or whole chunks) — through the node's
// buffer cache. docs/kawkab.md, "Remote reads".

// Defaults of RemoteOptions.
const (
	// DefaultRemoteRangeBlocks is the blocks one ranged GET fetches at most (16 blocks,
	// 256 KiB). Under the S3 model a GET's first byte takes a median 20 ms with a long tail
	// and a connection moves 42 MB/s (objmodel.go): a range of 256 KiB costs 6 ms of
	// transfer, less than its latency, and a read that waits for several parallel GETs waits
	// for the slowest, so ranges are made large and split only for reads of more than 16
	// blocks.
	DefaultRemoteRangeBlocks = 16
	// DefaultRemoteParallelism bounds a read's GETs in flight.
	DefaultRemoteParallelism = 16
)

// RemoteOptions configure a RemoteStream.
type RemoteOptions struct {
	// Cache is the node's buffer cache (nil: none; every read fetches).
	Cache *Cache
	// WholeChunk fetches a whole 4 MiB chunk with one GET for any read of it; otherwise a
	// read fetches just the blocks it needs, in ranges of at most RangeBlocks blocks (0:
	// DefaultRemoteRangeBlocks), Parallelism GETs at a time (0: DefaultRemoteParallelism).
	WholeChunk  bool
	RangeBlocks int
	Parallelism int
	// MaxReadRecords lowers the records a read returns (0: MaxReadBytes/R).
	MaxReadRecords int
	// Clock: a *VirtualClock makes a read's parallel GETs take part in it (tests and the
	// modelled benchmark; one read at a time then). Other clocks change nothing.
	Clock Clock
}

// RemoteStats counts what a RemoteStream fetched.
type RemoteStats struct {
	// DataGets and DataBytes are the GETs of data chunks and their bytes; IndexGets and
	// IndexBytes those of index nodes; MetaGets the metadata and manifest GETs.
	DataGets, DataBytes, IndexGets, IndexBytes, MetaGets uint64
}

// RemoteStream reads the uploaded prefix of a stream from the object store, without the
// primary. It is safe for concurrent use; Refresh takes in what was uploaded since.
type RemoteStream struct {
	obj    ObjectStore
	prefix string
	id     uint64
	opt    RemoteOptions
	ctx    context.Context

	s        *Stream // the reads: a Stream without local files
	nodes    *remoteNodes
	stats    readStats
	metaGets atomic.Uint64

	mu       sync.Mutex // Refresh
	manifest Manifest
}

// OpenRemoteStream opens stream id's uploaded prefix in the object store under prefix: its
// metadata and manifest (a stream with nothing uploaded yet has no records), and its index.
func OpenRemoteStream(ctx context.Context, obj ObjectStore, prefix string, id uint64, opt RemoteOptions) (*RemoteStream, error) {
	if prefix == "" {
		prefix = DefaultStorePrefix
	}
	if opt.RangeBlocks <= 0 {
		opt.RangeBlocks = DefaultRemoteRangeBlocks
	}
	if opt.Parallelism <= 0 {
		opt.Parallelism = DefaultRemoteParallelism
	}
	key := streamKey(prefix, id, metaName)
	mb, err := obj.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("kawkab: open remote stream %d: get %s: %w", id, key, err)
	}
	m, err := decodeStreamMeta(mb)
	if err != nil {
		return nil, fmt.Errorf("kawkab: open remote stream %d: %s: %w", id, key, err)
	}
	if m.ID != id {
		return nil, fmt.Errorf("kawkab: open remote stream %d: %s is stream %d's: %w", id, key, m.ID, ErrCorrupt)
	}
	rs := &RemoteStream{obj: obj, prefix: prefix, id: id, opt: opt, ctx: context.WithoutCancel(ctx)}
	rs.metaGets.Add(1)
	lay := m.Layout()
	spawn := goSpawn
	if vc, ok := opt.Clock.(*VirtualClock); ok {
		spawn = virtualSpawn(vc)
	}
	rb := opt.RangeBlocks
	if opt.WholeChunk {
		rb = 0
	}
	rs.nodes = &remoteNodes{rs: rs}
	s := &Stream{cfg: m.StreamConfig, lay: lay, icfg: m.Index, maxRead: MaxReadBytes / lay.R}
	if opt.MaxReadRecords > 0 {
		s.maxRead = min(s.maxRead, opt.MaxReadRecords)
	}
	s.br = &blockReader{
		id: id, lay: lay, cache: opt.Cache, obj: obj, prefix: prefix, ctx: rs.ctx,
		rangeBlocks: rb, parallel: opt.Parallelism, spawn: spawn, stats: &rs.stats,
	}
	s.idx, err = NewIndex(rs.nodes, m.Index)
	if err != nil {
		return nil, fmt.Errorf("kawkab: open remote stream %d: %w", id, err)
	}
	rs.s = s
	if _, err := rs.Refresh(ctx); err != nil {
		return nil, err
	}
	return rs, nil
}

// Refresh reads the manifest again and takes in the chunks uploaded since (a read sees the
// prefix uploaded when it starts). It returns the manifest.
func (rs *RemoteStream) Refresh(ctx context.Context) (Manifest, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	key := streamKey(rs.prefix, rs.id, manifestName)
	b, err := rs.obj.Get(ctx, key, 0, -1)
	rs.metaGets.Add(1)
	if errors.Is(err, ErrNotFound) {
		return rs.manifest, nil // nothing uploaded yet
	}
	if err != nil {
		return rs.manifest, fmt.Errorf("kawkab: remote stream %d: get %s: %w", rs.id, key, err)
	}
	m, err := decodeManifest(b)
	if err != nil {
		return rs.manifest, fmt.Errorf("kawkab: remote stream %d: %s: %w", rs.id, key, err)
	}
	s := rs.s
	if m.StreamID != rs.id || m.RecordBytes != s.lay.R || m.IndexN != s.icfg.N {
		return rs.manifest, fmt.Errorf("kawkab: remote stream %d: %s is for stream %d with %d-byte records and n = %d, the metadata says %d, %d: %w",
			rs.id, key, m.StreamID, m.RecordBytes, m.IndexN, s.lay.R, s.icfg.N, ErrCorrupt)
	}
	if m.Chunks <= rs.manifest.Chunks {
		return rs.manifest, nil
	}
	rs.nodes.final.Store(m.Nodes - 1) // nodes before the last uploaded one never change
	rs.nodes.last.Store(m.Nodes)
	rs.nodes.keep.Store(m.Chunks*ChunkBlocks - (m.Nodes-1)*uint64(s.icfg.N))
	idx, err := OpenIndex(rs.nodes, s.icfg, m.Nodes)
	if err != nil {
		return rs.manifest, fmt.Errorf("kawkab: remote stream %d: open the index of %d nodes: %w", rs.id, m.Nodes, err)
	}
	if idx.Blocks() != m.Chunks*ChunkBlocks || idx.BlockOpen() {
		return rs.manifest, fmt.Errorf("kawkab: remote stream %d: the uploaded index describes %d data blocks (open=%v), the manifest %d: %w",
			rs.id, idx.Blocks(), idx.BlockOpen(), m.Chunks*ChunkBlocks, ErrCorrupt)
	}
	last := idx.Last()
	s.xmu.Lock()
	s.idx, s.visible, s.lastTS = idx, m.Records, last.Body[len(last.Body)-1].TsMax
	s.vis.Store(m.Records)
	s.xmu.Unlock()
	rs.manifest = m
	return m, nil
}

// Manifest is what the last Refresh found.
func (rs *RemoteStream) Manifest() Manifest {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.manifest
}

// Config is the stream's schema.
func (rs *RemoteStream) Config() StreamConfig { return rs.s.cfg }

// Layout is the stream's record layout.
func (rs *RemoteStream) Layout() Layout { return rs.s.lay }

// Len is the number of records uploaded (at the last Refresh).
func (rs *RemoteStream) Len() uint64 { return rs.s.Len() }

// LastTimestamp is the last uploaded record's timestamp; false when none is.
func (rs *RemoteStream) LastTimestamp() (int64, bool) { return rs.s.LastTimestamp() }

// MaxReadRecords is the most records one read returns.
func (rs *RemoteStream) MaxReadRecords() int { return rs.s.maxRead }

// ReadRecords is Stream.ReadRecords over the uploaded records.
func (rs *RemoteStream) ReadRecords(first uint64, n int) ([]byte, error) {
	return rs.s.ReadRecords(first, n)
}

// ReadRange is Stream.ReadRange over the uploaded records.
func (rs *RemoteStream) ReadRange(tl, th int64) (RangeResult, error) { return rs.s.ReadRange(tl, th) }

// Aggregate is Stream.Aggregate over the uploaded records.
func (rs *RemoteStream) Aggregate(tl, th int64) (Summary, error) { return rs.s.Aggregate(tl, th) }

// WarmIndex loads every uploaded index node but the last (held in memory) into the cache, so
// that searches cost no GETs (index nodes are 1/289 of the data: a node keeps them).
func (rs *RemoteStream) WarmIndex(ctx context.Context) error {
	if rs.opt.Cache == nil {
		return nil
	}
	for j := uint64(1); j <= rs.nodes.final.Load(); j++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := rs.nodes.Get(j); err != nil {
			return err
		}
	}
	return nil
}

// Stats counts what the stream fetched.
func (rs *RemoteStream) Stats() RemoteStats {
	return RemoteStats{
		DataGets: rs.stats.gets.Load(), DataBytes: rs.stats.getBytes.Load(),
		IndexGets: rs.stats.indexGets.Load(), IndexBytes: rs.stats.idxBytes.Load(),
		MetaGets: rs.metaGets.Load(),
	}
}

// Close releases nothing (the stream holds no files); it is there for symmetry with Stream.
func (rs *RemoteStream) Close() error { return nil }

// remoteNodes is the index's NodeStore over the object store: node j is a ranged GET of 16 KiB
// at ((j−1) mod 256)·16 KiB of index chunk object i<(j−1)/256>, through the cache for the
// nodes that never change (those before the last uploaded one).
type remoteNodes struct {
	rs    *RemoteStream
	final atomic.Uint64
	// last is the manifest's last node and keep the body entries it has in the manifest's
	// blocks: the primary re-puts that node as it grows (its next upload may land between
	// the manifest's GET and the node's), so a read of it is cut back to the manifest, as
	// the uploader cut it (streamTier.putIndex).
	last, keep atomic.Uint64
}

func (rn *remoteNodes) Get(j uint64) ([]byte, error) {
	rs := rn.rs
	if j == 0 {
		return nil, fmt.Errorf("kawkab: remote stream %d: index node 0: nodes start at 1", rs.id)
	}
	c, off := indexChunkOf(j)
	key := streamKey(rs.prefix, rs.id, IndexChunkName(c))
	load := func(buf []byte) error {
		b, err := rs.obj.Get(rs.ctx, key, off, BlockBytes)
		rs.stats.indexGets.Add(1)
		if err != nil {
			return fmt.Errorf("kawkab: remote stream %d: index node %d: get %s: %w", rs.id, j, key, err)
		}
		rs.stats.idxBytes.Add(uint64(len(b)))
		copy(buf, b)
		return nil
	}
	b := make([]byte, BlockBytes)
	if rs.opt.Cache != nil && j <= rn.final.Load() {
		h, err := rs.opt.Cache.Get(BlockKey{Stream: rs.id, Kind: KindIndex, Num: j}, load)
		if err == nil {
			copy(b, h.Bytes())
			h.Release()
			return b, nil
		}
		if !errors.Is(err, ErrCacheFull) {
			return nil, err
		}
	}
	if err := load(b); err != nil {
		return nil, err
	}
	if j == rn.last.Load() {
		return rn.cutToManifest(j, b)
	}
	return b, nil
}

// cutToManifest cuts the manifest's last node, read after a later upload extended it, back to
// the manifest's blocks (sealed, as the uploader puts it). A node with fewer entries is left
// for OpenIndex's check to refuse.
func (rn *remoteNodes) cutToManifest(j uint64, b []byte) ([]byte, error) {
	nd, err := UnmarshalNode(b)
	if err != nil {
		return nil, fmt.Errorf("kawkab: remote stream %d: index node %d: %w", rn.rs.id, j, err)
	}
	keep := int(rn.keep.Load())
	if len(nd.Body) < keep || (len(nd.Body) == keep && !nd.Open) {
		return b, nil
	}
	nd.Body, nd.Open = nd.Body[:keep], false
	out, err := MarshalNode(nd)
	if err != nil {
		return nil, fmt.Errorf("kawkab: remote stream %d: index node %d cut to the manifest's %d entries: %w", rn.rs.id, j, keep, err)
	}
	return out, nil
}

func (rn *remoteNodes) Put(j uint64, _ []byte) error {
	return fmt.Errorf("kawkab: remote stream %d: put index node %d: a remote stream is read-only", rn.rs.id, j)
}
