package kawkab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The local chunk store of one stream (thesis 5.3.2, "Local Store Service"; 5.4.1): the
// directory <dir>/s<streamID>/ holds
//
//	meta       the stream's schema (StreamMetaBytes, written once: temp file, fsync, rename,
//	           fsync of the directory)
//	d<c>       data chunk c: data blocks 256c … 256c+255, block b's slot at (b mod 256)·16 KiB,
//	           written densely — a sealed block's unused tail is zero, and the file ends right
//	           after the last record written, so its size says how many records it holds
//	i<c>       index chunk c: index nodes (blocks) 256c+1 … 256c+256, node j at
//	           ((j−1) mod 256)·16 KiB; it ends after the last node put
//
// (docs/plans/kawkab.md, "Local chunk files and what an append acknowledges"). The names are
// the object keys' last components (<prefix>/s<streamID>/d<chunk>), so a chunk is uploaded
// under its file's name.

const (
	metaName    = "meta"
	metaTmpName = "meta.tmp"
	// DefaultMaxOpenFiles bounds a stream's open file descriptors: the data chunk and the
	// index chunk being written stay open (pinned) until they are full; the chunks that reads
	// touch are opened on demand and kept in a small LRU, closed when more than this many
	// files are open and they are idle. A descriptor in use by a read is never closed under
	// it, so at most this many plus one per concurrent read are open.
	DefaultMaxOpenFiles = 8
)

// StreamDirName is the name of stream id's directory: s<id>.
func StreamDirName(id uint64) string { return "s" + strconv.FormatUint(id, 10) }

// DataChunkName is data chunk c's file name (and object key suffix): d<c>.
func DataChunkName(c uint64) string { return "d" + strconv.FormatUint(c, 10) }

// IndexChunkName is index chunk c's file name (and object key suffix): i<c>.
func IndexChunkName(c uint64) string { return "i" + strconv.FormatUint(c, 10) }

// parseChunkName parses d<c> or i<c> written canonically (no sign, no leading zeros).
func parseChunkName(name string) (kind byte, c uint64, ok bool) {
	if len(name) < 2 || (name[0] != 'd' && name[0] != 'i') {
		return 0, 0, false
	}
	c, err := strconv.ParseUint(name[1:], 10, 64)
	if err != nil || strconv.FormatUint(c, 10) != name[1:] {
		return 0, 0, false
	}
	return name[0], c, true
}

// ---------------------------------------------------------------------------------------------
// The stream's metadata file
// ---------------------------------------------------------------------------------------------

// The metadata file, little-endian, StreamMetaBytes long:
//
//	offset  size  field
//	0       4     magic "KWKS"
//	4       2     version (1)
//	6       2     reserved, 0
//	8       8     stream ID
//	16      4     record size R
//	20      4     value offset (int32; −1: none)
//	24      1     ack level (0 local, 1 memory)
//	25      3     reserved, 0
//	28      4     data block size (BlockBytes)
//	32      4     blocks per chunk (ChunkBlocks)
//	36      2     index fan-out k
//	38      2     reserved, 0
//	40      4     index body entries n
//	44      4     CRC-32C (Castagnoli) of bytes 0 … 43
//
// The block and chunk sizes are stored so that files written with other constants are
// refused instead of misread; the index block size is BlockBytes.
const (
	StreamMetaBytes = 48
	metaMagic       = "KWKS"
	metaVersion     = 1
)

// ErrMalformedMeta is wrapped by every error for a stream metadata file that does not decode.
var ErrMalformedMeta = errors.New("malformed stream metadata")

// streamMeta is what the metadata file holds.
type streamMeta struct {
	StreamConfig
	Index Config // resolved, BlockSize = BlockBytes
}

func badMeta(format string, args ...any) error {
	return fmt.Errorf("kawkab: stream metadata: %s: %w", fmt.Sprintf(format, args...), ErrMalformedMeta)
}

// encodeStreamMeta encodes a valid metadata.
func encodeStreamMeta(m streamMeta) ([]byte, error) {
	if err := m.StreamConfig.Validate(); err != nil {
		return nil, err
	}
	idx, err := m.Index.Resolve()
	if err != nil || idx != m.Index || idx.BlockSize != BlockBytes {
		return nil, fmt.Errorf("kawkab: stream %d: index geometry %+v: want a resolved %d-byte block: %v", m.ID, m.Index, BlockBytes, err)
	}
	b := make([]byte, StreamMetaBytes)
	copy(b, metaMagic)
	binary.LittleEndian.PutUint16(b[4:], metaVersion)
	binary.LittleEndian.PutUint64(b[8:], m.ID)
	binary.LittleEndian.PutUint32(b[16:], uint32(m.RecordBytes))
	binary.LittleEndian.PutUint32(b[20:], uint32(int32(m.ValueOffset)))
	b[24] = byte(m.Ack)
	binary.LittleEndian.PutUint32(b[28:], BlockBytes)
	binary.LittleEndian.PutUint32(b[32:], ChunkBlocks)
	binary.LittleEndian.PutUint16(b[36:], uint16(m.Index.K))
	binary.LittleEndian.PutUint32(b[40:], uint32(m.Index.N))
	binary.LittleEndian.PutUint32(b[44:], crc32c(b[:44]))
	return b, nil
}

// decodeStreamMeta decodes and validates a metadata file: exact size, magic, version,
// reserved bytes zero, checksum, this build's block and chunk sizes, a valid schema and
// index geometry.
func decodeStreamMeta(b []byte) (streamMeta, error) {
	var m streamMeta
	if len(b) != StreamMetaBytes {
		return m, badMeta("%d bytes, want %d", len(b), StreamMetaBytes)
	}
	if string(b[:4]) != metaMagic {
		return m, badMeta("magic %q, want %q", b[:4], metaMagic)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != metaVersion {
		return m, badMeta("version %d, this build reads version %d", v, metaVersion)
	}
	if stored, computed := binary.LittleEndian.Uint32(b[44:]), crc32c(b[:44]); stored != computed {
		return m, badMeta("checksum mismatch: stored %#08x, computed %#08x", stored, computed)
	}
	if !allZero(b[6:8]) || !allZero(b[25:28]) || !allZero(b[38:40]) {
		return m, badMeta("reserved bytes are not zero")
	}
	if bs, cb := binary.LittleEndian.Uint32(b[28:]), binary.LittleEndian.Uint32(b[32:]); bs != BlockBytes || cb != ChunkBlocks {
		return m, badMeta("%d-byte blocks, %d blocks per chunk; this build uses %d and %d", bs, cb, BlockBytes, ChunkBlocks)
	}
	m.ID = binary.LittleEndian.Uint64(b[8:])
	r := binary.LittleEndian.Uint32(b[16:])
	if r > MaxRecordBytes {
		return m, badMeta("record size %d bytes, want %d to %d", r, MinRecordBytes, MaxRecordBytes)
	}
	m.RecordBytes = int(r)
	m.ValueOffset = int(int32(binary.LittleEndian.Uint32(b[20:])))
	m.Ack = AckLevel(b[24])
	if err := m.StreamConfig.Validate(); err != nil {
		return m, fmt.Errorf("%w: %w", err, ErrMalformedMeta)
	}
	m.Index = Config{BlockSize: BlockBytes, K: int(binary.LittleEndian.Uint16(b[36:])), N: int(binary.LittleEndian.Uint32(b[40:]))}
	if m.Index.N == 0 {
		return m, badMeta("index body entries n = 0")
	}
	resolved, err := m.Index.Resolve()
	if err != nil {
		return m, fmt.Errorf("%w: %w", err, ErrMalformedMeta)
	}
	if resolved != m.Index {
		// A stored geometry is always resolved (CreateStream writes what Resolve gave): a zero
		// k would otherwise be read as the default and never written back the same.
		return m, badMeta("index geometry %+v is not resolved (want %+v)", m.Index, resolved)
	}
	return m, nil
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ---------------------------------------------------------------------------------------------
// File descriptors
// ---------------------------------------------------------------------------------------------

type fileKey struct {
	kind  byte // 'd' data, 'i' index
	chunk uint64
}

func (k fileKey) name() string {
	if k.kind == 'd' {
		return DataChunkName(k.chunk)
	}
	return IndexChunkName(k.chunk)
}

// fileHandle is an open chunk file, reference counted: it is closed only when no one uses it.
type fileHandle struct {
	key  fileKey
	f    *os.File
	refs int
	used uint64 // LRU clock
	drop bool   // the file was deleted: close it when released
}

// fileCache bounds a stream's open chunk files: idle handles beyond the limit are closed,
// least recently used first.
type fileCache struct {
	mu     sync.Mutex
	dir    string
	limit  int
	open   map[fileKey]*fileHandle
	clock  uint64
	closed bool
	opens  int // files opened, for tests
}

func newFileCache(dir string, limit int) *fileCache {
	return &fileCache{dir: dir, limit: max(limit, 1), open: map[fileKey]*fileHandle{}}
}

// get returns chunk k's file, opened read-write, creating it if create is set; the caller
// releases it with put.
func (c *fileCache) get(k fileKey, create bool) (*fileHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("kawkab: %s: %w", filepath.Join(c.dir, k.name()), ErrStreamClosed)
	}
	c.clock++
	if h := c.open[k]; h != nil {
		h.refs++
		h.used = c.clock
		return h, nil
	}
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(filepath.Join(c.dir, k.name()), flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kawkab: open chunk file: %w", err)
	}
	c.opens++
	h := &fileHandle{key: k, f: f, refs: 1, used: c.clock}
	c.open[k] = h
	c.evictLocked()
	return h, nil
}

// put releases a handle from get.
func (c *fileCache) put(h *fileHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.refs--
	if h.refs > 0 {
		return
	}
	if c.closed || h.drop {
		_ = h.f.Close() // read-only use since the stream closed; nothing to report
		delete(c.open, h.key)
		return
	}
	c.evictLocked()
}

// evictLocked closes idle handles, least recently used first, while more than the limit are
// open. A handle's writes were fsynced (or are not acknowledged durably) before it became
// idle, so a close error means nothing for durability and is dropped.
func (c *fileCache) evictLocked() {
	for len(c.open) > c.limit {
		var lru *fileHandle
		for _, h := range c.open {
			if h.refs == 0 && (lru == nil || h.used < lru.used) {
				lru = h
			}
		}
		if lru == nil {
			return
		}
		_ = lru.f.Close()
		delete(c.open, lru.key)
	}
}

// drop forgets chunk k's handle (its file was deleted): closed now if idle, else when its
// last user releases it, so the deleted file's space is freed.
func (c *fileCache) drop(k fileKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.open[k]
	if h == nil {
		return
	}
	if h.refs == 0 {
		_ = h.f.Close() // read-only use; the file is gone
		delete(c.open, k)
		return
	}
	h.drop = true
}

// openFiles is the number of open chunk files.
func (c *fileCache) openFiles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

// close closes every idle file; handles in use are closed when released.
func (c *fileCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for k, h := range c.open {
		if h.refs == 0 {
			if err := h.f.Close(); err != nil {
				errs = append(errs, fmt.Errorf("kawkab: close %s: %w", h.f.Name(), err))
			}
			delete(c.open, k)
		}
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------------------------
// The chunk store of one stream
// ---------------------------------------------------------------------------------------------

// chunkStore is one stream's directory of chunk files. Every fsync goes through sync, which
// serializes them and makes a failure sticky: after one failed fsync every later one fails
// too, since the kernel reports a write-back error to one fsync only and later ones could
// succeed over lost data.
type chunkStore struct {
	id    uint64
	dir   string // <dir>/s<id>
	files *fileCache
	syncf func(*os.File) error

	smu     sync.Mutex
	syncErr error
}

func (cs *chunkStore) path(name string) string { return filepath.Join(cs.dir, name) }

// sync fsyncs f (through the injectable function).
func (cs *chunkStore) sync(f *os.File) error {
	cs.smu.Lock()
	defer cs.smu.Unlock()
	if cs.syncErr != nil {
		return cs.syncErr
	}
	if err := cs.syncf(f); err != nil {
		cs.syncErr = fmt.Errorf("kawkab: stream %d: fsync %s: %w", cs.id, f.Name(), err)
		return cs.syncErr
	}
	return nil
}

// syncDir fsyncs the stream's directory, making created, renamed and removed names durable.
func (cs *chunkStore) syncDir() error {
	return syncDirWith(cs.dir, cs.sync)
}

func syncDirWith(dir string, sync func(*os.File) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("kawkab: open directory to fsync it: %w", err)
	}
	defer d.Close()
	return sync(d)
}

// readAt reads len(p) bytes of chunk k at off. A file shorter than that is an error that
// names the file and the range.
func (cs *chunkStore) readAt(k fileKey, p []byte, off int64) error {
	h, err := cs.files.get(k, false)
	if err != nil {
		return fmt.Errorf("kawkab: stream %d: read %s: %w", cs.id, k.name(), err)
	}
	defer cs.files.put(h)
	n, err := h.f.ReadAt(p, off)
	if err == io.EOF && n < len(p) {
		return fmt.Errorf("kawkab: stream %d: read %s: bytes %d to %d: the file ends at %d: %w",
			cs.id, k.name(), off, off+int64(len(p)), off+int64(n), io.ErrUnexpectedEOF)
	}
	if err != nil && n < len(p) {
		return fmt.Errorf("kawkab: stream %d: read %s at %d: %w", cs.id, k.name(), off, err)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Index chunk files: the index's NodeStore
// ---------------------------------------------------------------------------------------------

// nodeFiles keeps the stream's index nodes (16 KiB index blocks) in its index chunk files:
// node j at ((j−1) mod 256)·16 KiB of i<(j−1)/256>. It implements NodeStore, so the index
// persists as it is built.
//
// Order of writes: a node is put again and again while it is the last one (the index puts it
// at every seal), and never again once the next node exists. Node j+1 is written to its file
// only after nodes up to j are fsynced (with the data they describe, beforeSync), so a crash
// leaves at most the last node torn or stale and never an index ahead of the durable data;
// recovery rebuilds the last node from the data. Put never fsyncs: a new node put while the
// nodes before it are not durable yet is held in memory (pending, served by Get) and written
// by flush — sync's caller (the group-commit leader, the uploader, Close, recovery) or, if
// background is set (AckMemory), a goroutine Put starts — so an append never waits for an
// fsync, and the index lock is never held across one.
type nodeFiles struct {
	cs *chunkStore
	// beforeSync is called before the index files are fsynced (it fsyncs the data chunk
	// being written, so the durable index never describes data that is not durable).
	beforeSync func() error
	// background makes Put start a goroutine that writes pending nodes (AckMemory: no
	// commit comes to do it).
	background bool

	// cache, if set, holds final nodes (those before the last, which never change) for Get;
	// grow, if set, counts the bytes a new node adds to the files.
	cache *Cache
	grow  func(int64)

	// fmu serializes flush (the fsyncs, the writes of pending nodes, index chunk creation).
	fmu sync.Mutex

	mu        sync.Mutex
	nodes     uint64        // nodes put: node nodes is the last one
	fileNodes uint64        // nodes written to the files (the files end after it)
	pending   []pendingNode // nodes fileNodes+1 … nodes, not written yet, in order
	cur       *fileHandle   // the index chunk of node fileNodes, pinned while it is written
	writes    uint64        // writes to the files
	synced    uint64        // writes covered by the last fsync
	dirDirty  bool          // an index chunk was created and the directory not fsynced since
	flushing  bool          // a background flush runs
	err       error         // sticky: a background flush failed
	puts      int           // nodes put, for tests
	closed    bool
}

type pendingNode struct {
	j     uint64
	block []byte
}

func indexChunkOf(j uint64) (chunk uint64, off int64) {
	return (j - 1) / ChunkBlocks, int64((j-1)%ChunkBlocks) * BlockBytes
}

// setNodes says that the files hold n nodes (recovery): the chunk of node n is opened, and
// taken as not durable (a killed writer's writes may be in the page cache only), so the next
// node waits for a flush.
func (nf *nodeFiles) setNodes(n uint64) error {
	nf.mu.Lock()
	defer nf.mu.Unlock()
	nf.nodes, nf.fileNodes = n, n
	if nf.cur != nil {
		nf.cs.files.put(nf.cur)
		nf.cur = nil
	}
	if n == 0 {
		return nil
	}
	c, _ := indexChunkOf(n)
	h, err := nf.cs.files.get(fileKey{'i', c}, false)
	if err != nil {
		return err
	}
	nf.cur = h
	nf.writes = nf.synced + 1
	return nil
}

// Get reads node j.
func (nf *nodeFiles) Get(j uint64) ([]byte, error) {
	if j == 0 {
		return nil, fmt.Errorf("kawkab: stream %d: index node 0: nodes start at 1", nf.cs.id)
	}
	nf.mu.Lock()
	if j > nf.fileNodes {
		for _, p := range nf.pending {
			if p.j == j {
				nf.mu.Unlock()
				return p.block, nil // the index never changes a block it put
			}
		}
	}
	final := j < nf.nodes // a node before the last never changes
	nf.mu.Unlock()
	c, off := indexChunkOf(j)
	b := make([]byte, BlockBytes)
	load := func(buf []byte) error {
		if err := nf.cs.readAt(fileKey{'i', c}, buf, off); err != nil {
			return fmt.Errorf("kawkab: stream %d: index node %d: %w", nf.cs.id, j, err)
		}
		return nil
	}
	if nf.cache != nil && final {
		h, err := nf.cache.Get(BlockKey{Stream: nf.cs.id, Kind: KindIndex, Num: j}, load)
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
	return b, nil
}

// Put writes node j — the last node again, or the next one — or, when nodes before it may
// not be durable yet, keeps it pending for flush. It never fsyncs.
func (nf *nodeFiles) Put(j uint64, block []byte) error {
	nf.mu.Lock()
	defer nf.mu.Unlock()
	if nf.closed {
		return fmt.Errorf("kawkab: stream %d: put index node %d: %w", nf.cs.id, j, ErrStreamClosed)
	}
	if nf.err != nil {
		return nf.err
	}
	if len(block) != BlockBytes {
		return fmt.Errorf("kawkab: stream %d: put index node %d: %d bytes, want %d", nf.cs.id, j, len(block), BlockBytes)
	}
	if j == 0 || j > nf.nodes+1 || (j < nf.nodes) {
		return fmt.Errorf("kawkab: stream %d: put index node %d: %d nodes are stored; only node %d or %d may be put",
			nf.cs.id, j, nf.nodes, nf.nodes, nf.nodes+1)
	}
	if j > nf.nodes && nf.grow != nil {
		nf.grow(BlockBytes)
	}
	nf.nodes = max(nf.nodes, j)
	nf.puts++
	switch {
	case j <= nf.fileNodes: // the last node, in its file: written again
		return nf.writeLocked(j, block)
	case len(nf.pending) > 0 && nf.pending[len(nf.pending)-1].j == j: // the last node, pending
		nf.pending[len(nf.pending)-1].block = block
		return nil
	}
	// A new node: written now if the nodes before it are durable and its chunk exists (or,
	// for node 1, is created now: its directory entry is fsynced by flush).
	c, _ := indexChunkOf(j)
	if j == 1 && nf.cur == nil {
		h, err := nf.cs.files.get(fileKey{'i', 0}, true)
		if err != nil {
			return fmt.Errorf("kawkab: stream %d: put index node 1: %w", nf.cs.id, err)
		}
		nf.cur, nf.dirDirty = h, true
	}
	if len(nf.pending) == 0 && nf.writes == nf.synced && nf.cur != nil && nf.cur.key.chunk == c {
		nf.fileNodes = j
		return nf.writeLocked(j, block)
	}
	nf.pending = append(nf.pending, pendingNode{j, block})
	if nf.background && !nf.flushing {
		nf.flushing = true
		go nf.flushInBackground()
	}
	return nil
}

// writeLocked writes node j to its place in the chunk being written (nf.cur).
func (nf *nodeFiles) writeLocked(j uint64, block []byte) error {
	c, off := indexChunkOf(j)
	if nf.cur == nil || nf.cur.key.chunk != c {
		return fmt.Errorf("kawkab: stream %d: write index node %d: index chunk %d is not open", nf.cs.id, j, c)
	}
	if _, err := nf.cur.f.WriteAt(block, off); err != nil {
		return fmt.Errorf("kawkab: stream %d: write index node %d to %s at %d: %w", nf.cs.id, j, IndexChunkName(c), off, err)
	}
	nf.writes++
	return nil
}

// flushInBackground flushes until no node is pending; a failure is kept for the next Put
// and sync.
func (nf *nodeFiles) flushInBackground() {
	for {
		err := nf.flush(false)
		nf.mu.Lock()
		if err != nil && nf.err == nil && !nf.closed {
			nf.err = err
		}
		if err != nil || len(nf.pending) == 0 || nf.closed {
			nf.flushing = false
			nf.mu.Unlock()
			return
		}
		nf.mu.Unlock()
	}
}

// flush makes every node put before it durable: it fsyncs the index chunk being written
// (after the data, beforeSync) and writes the pending nodes, each after an fsync of the
// nodes before it, creating index chunks as they are needed (and fsyncing the directory).
// The fsyncs run without nf.mu: Put and Get go on meanwhile. With all unset it stops when no
// node is pending (the last one written, not fsynced: what a background flush does).
func (nf *nodeFiles) flush(all bool) error {
	nf.fmu.Lock()
	defer nf.fmu.Unlock()
	for {
		nf.mu.Lock()
		if !all && len(nf.pending) == 0 {
			nf.mu.Unlock()
			return nil
		}
		if nf.err != nil {
			err := nf.err
			nf.mu.Unlock()
			return err
		}
		if nf.closed {
			nf.mu.Unlock()
			return fmt.Errorf("kawkab: stream %d: sync the index: %w", nf.cs.id, ErrStreamClosed)
		}
		// nf.cur stays open across the fsync: only flush switches it, and close waits for it.
		cur, w := nf.cur, nf.writes
		need := cur != nil && w != nf.synced
		dir := nf.dirDirty
		nf.dirDirty = false
		nf.mu.Unlock()
		if dir {
			if err := nf.cs.syncDir(); err != nil {
				return err
			}
		}
		if need {
			if nf.beforeSync != nil {
				if err := nf.beforeSync(); err != nil {
					return err
				}
			}
			if err := nf.cs.sync(cur.f); err != nil {
				return err
			}
			nf.mu.Lock()
			nf.synced = w
			nf.mu.Unlock()
		}
		nf.mu.Lock()
		if nf.writes != nf.synced && len(nf.pending) > 0 {
			nf.mu.Unlock() // written meanwhile (the last node again): fsync again first
			continue
		}
		if len(nf.pending) == 0 {
			nf.mu.Unlock()
			return nil
		}
		p := nf.pending[0]
		c, _ := indexChunkOf(p.j)
		if nf.cur == nil || nf.cur.key.chunk != c {
			nf.mu.Unlock()
			h, err := nf.openChunk(c)
			if err != nil {
				return fmt.Errorf("kawkab: stream %d: put index node %d: %w", nf.cs.id, p.j, err)
			}
			nf.mu.Lock()
			if nf.closed {
				nf.mu.Unlock()
				nf.cs.files.put(h)
				return fmt.Errorf("kawkab: stream %d: sync the index: %w", nf.cs.id, ErrStreamClosed)
			}
			if nf.cur != nil {
				nf.cs.files.put(nf.cur) // full, and fsynced above
			}
			nf.cur = h
		}
		p = nf.pending[0] // the latest bytes of the node (Put may have replaced them)
		if err := nf.writeLocked(p.j, p.block); err != nil {
			nf.mu.Unlock()
			return err
		}
		nf.pending = nf.pending[1:]
		if len(nf.pending) == 0 {
			nf.pending = nil
		}
		nf.fileNodes = p.j
		nf.mu.Unlock()
	}
}

// openChunk opens index chunk c, creating it (and fsyncing the directory) if needed.
func (nf *nodeFiles) openChunk(c uint64) (*fileHandle, error) {
	_, statErr := os.Stat(nf.cs.path(IndexChunkName(c)))
	h, err := nf.cs.files.get(fileKey{'i', c}, true)
	if err != nil {
		return nil, err
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := nf.cs.syncDir(); err != nil {
			nf.cs.files.put(h)
			return nil, err
		}
	}
	return h, nil
}

// sync makes the index nodes put so far durable (flush).
func (nf *nodeFiles) sync() error {
	return nf.flush(true)
}

// close closes the index files; pending nodes are written first (best effort: a failed
// stream's are dropped, and recovery indexes their records again from the data).
func (nf *nodeFiles) close() {
	_ = nf.flush(false)
	nf.fmu.Lock() // a flush is done with the files
	defer nf.fmu.Unlock()
	nf.mu.Lock()
	defer nf.mu.Unlock()
	nf.closed = true
	if nf.cur != nil {
		nf.cs.files.put(nf.cur)
		nf.cur = nil
	}
}

// ---------------------------------------------------------------------------------------------
// Listing a stream's directory (recovery)
// ---------------------------------------------------------------------------------------------

// chunkListing is what a stream directory holds: its chunk files' sizes, by number.
type chunkListing struct {
	data, index map[uint64]int64
}

// listChunks reads the stream directory. Names other than meta, meta.tmp and canonical
// d<c>/i<c> are refused: the directory belongs to the stream.
func listChunks(dir string) (chunkListing, error) {
	l := chunkListing{data: map[uint64]int64{}, index: map[uint64]int64{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return l, fmt.Errorf("kawkab: list stream directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if name == metaName || name == metaTmpName || name == manifestName || name == manifestTmpName {
			continue
		}
		kind, c, ok := parseChunkName(name)
		if !ok || !e.Type().IsRegular() {
			return l, fmt.Errorf("kawkab: stream directory %s holds %q, which is not a chunk file (d<n> or i<n>) or the metadata: %w", dir, name, ErrCorrupt)
		}
		info, err := e.Info()
		if err != nil {
			return l, fmt.Errorf("kawkab: stat %s: %w", filepath.Join(dir, name), err)
		}
		if kind == 'd' {
			l.data[c] = info.Size()
		} else {
			l.index[c] = info.Size()
		}
	}
	return l, nil
}

// contiguous checks that chunks 0 … len(m)−1 are all there and returns their count.
func contiguous(m map[uint64]int64, what, dir string) (uint64, error) {
	n := uint64(len(m))
	for c := range m {
		if c >= n {
			var missing []string
			for i := uint64(0); i < n && len(missing) < 5; i++ {
				if _, ok := m[i]; !ok {
					missing = append(missing, strconv.FormatUint(i, 10))
				}
			}
			return 0, fmt.Errorf("kawkab: stream directory %s: %s chunk %d exists but chunk(s) %s before it are missing: %w",
				dir, what, c, strings.Join(missing, ", "), ErrCorrupt)
		}
	}
	return n, nil
}
