package kawkab

// The buffer cache: the thesis's memory manager (5.3.2, "Memory Manager" and "Memory manager
// optimizations"; 5.6, "Code Optimizations"), which the stream engine uses for data blocks and
// index nodes.
//
// The cache is an LRU buffer cache backed by a pool of fixed-length buffers of BlockBytes
// (16 KiB: a data block, and an index node at the index's DefaultBlockSize) ("the
// memory manager organizes the memory as an LRU-based buffer cache that is backed by a pool of
// fixed-length buffers"), reference counted ("to allow concurrent readers and the writer of a
// file to use the same memory buffers") and sharded by a hash of the block's key ("we shard
// the cache to reduce the contention"; 5.7 runs eight shards). Each shard has its own lock,
// its own map, its own LRU list, its own pool and its own part of the capacity, so a shard
// never takes another shard's lock.
//
// A block is clean when its bytes are in the local store, so it can be dropped and read back;
// dirty when they are not (a new block, or one written since it was last stored), so it is
// never evicted. Only blocks that are resident, clean and unreferenced are on a shard's LRU
// list, ordered by when they were last released (or cleaned): eviction takes the list's tail
// in O(1) and never looks at a dirty or referenced block. When a shard's blocks exceed its
// high-water mark (90% of its capacity, docs/plans/kawkab.md; 5.7.1: "At 90%, the cache
// maintains its buffers aggressively"), the shard evicts down to its low-water mark (85%).
// A new block when the shard is at capacity and nothing can be evicted is refused with
// ErrCacheFull at once: the engine turns it into backpressure, nothing waits for memory.
//
// Owner timeouts are the thesis's timer queues: a writer appending to a block keeps it
// without returning to the cache after each append ("a query handler takes the ownership of
// the buffer it obtains from the cache and releases the buffer after a pre-defined timeout").
// Own gives a block an owner reference that the cache drops when the owner's deadline passes;
// renewing moves the deadline with one atomic compare-and-swap and no lock, and an owned block
// is queued once however often it is renewed (the thesis's idempotent enqueue). Tick, or the
// goroutine Run, drops the references whose deadline has passed, a bounded number per call.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of CacheConfig.
const (
	// DefaultCacheShards is the number of shards (5.7: "16GB cache divided in eight shards").
	DefaultCacheShards = 8
	// DefaultCacheHighWater is the fraction of capacity above which a shard evicts (the plan's
	// and 5.7.1's 90%).
	DefaultCacheHighWater = 0.90
	// DefaultCacheLowWater is the fraction of capacity a shard evicts down to.
	DefaultCacheLowWater = 0.85
	// DefaultCacheTickBudget bounds the owner deadlines one Tick handles.
	DefaultCacheTickBudget = 4096
)

var (
	// ErrCacheFull is returned for a new block when its shard is at capacity and every block
	// in it is dirty or referenced: nothing can be evicted. The stream engine turns it into
	// backpressure.
	ErrCacheFull = errors.New("kawkab: buffer cache full: every block of the shard is dirty or referenced")
	// ErrNotResident is returned by Own for a block that is not in the cache (or still being
	// loaded).
	ErrNotResident = errors.New("kawkab: block not in the buffer cache")
	// errLoadPanicked is what waiters for a load get when the loader panicked.
	errLoadPanicked = errors.New("kawkab: buffer cache loader panicked")
)

// BlockKind says whether a cached block is a data block or an index node.
type BlockKind uint8

const (
	// KindData is a stream's data block.
	KindData BlockKind = iota
	// KindIndex is a stream's index node.
	KindIndex
)

func (k BlockKind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindIndex:
		return "index"
	}
	return fmt.Sprintf("BlockKind(%d)", uint8(k))
}

// BlockKey names a block in the cache: a stream, the kind of block and its number (a data
// block's number, or an index node's).
type BlockKey struct {
	Stream uint64
	Kind   BlockKind
	Num    uint64
}

func (k BlockKey) String() string {
	return fmt.Sprintf("s%d/%v/%d", k.Stream, k.Kind, k.Num)
}

// CacheConfig configures a Cache.
type CacheConfig struct {
	// CapacityBytes is the memory the cache holds at most, rounded down to whole 16 KiB
	// blocks and split evenly among the shards (each shard evicts, and is full, on its own);
	// it must give every shard at least one block. Buffers are allocated when first needed and
	// then kept in the pool.
	CapacityBytes int64
	// Shards is the number of shards (0: DefaultCacheShards).
	Shards int
	// HighWater and LowWater are fractions of a shard's capacity: when its blocks exceed
	// HighWater, it evicts least recently used clean, unreferenced blocks until they are at
	// most LowWater (0: the defaults, 0.90 and 0.85). 0 < LowWater ≤ HighWater ≤ 1.
	HighWater, LowWater float64
	// Clock gives the time owner deadlines are measured on (nil: RealClock); Run also sleeps
	// on it.
	Clock Clock
	// TickBudget bounds the owner deadlines one Tick handles (0: DefaultCacheTickBudget).
	TickBudget int
}

// CacheStats is a snapshot of a Cache (each shard's part is consistent; the shards are read one
// after the other). Byte counts are blocks × 16 KiB.
type CacheStats struct {
	CapacityBytes int64
	// UsedBytes is what resident blocks hold: DirtyBytes + CleanBytes + LoadingBytes.
	UsedBytes  int64
	DirtyBytes int64
	CleanBytes int64
	// EvictableBytes is the clean, unreferenced part of CleanBytes: what eviction may take.
	EvictableBytes int64
	// LoadingBytes is what blocks being loaded hold (and failed loads whose waiters have not
	// all seen the error yet).
	LoadingBytes int64
	// ReferencedBytes is what blocks with at least one reference (a handle, an owner, a
	// waiter) hold.
	ReferencedBytes int64
	// PooledBytes is what free buffers kept for reuse hold; UsedBytes + PooledBytes is all the
	// cache ever allocated.
	PooledBytes int64
	// OwnedBlocks is the number of blocks with an owner reference.
	OwnedBlocks int

	// Hits counts Gets (and Acquires) that found their block resident; Misses those that did
	// not (they loaded or created it, or failed with ErrCacheFull); SharedLoads those that
	// waited for another Get's load of the same block.
	Hits, Misses, SharedLoads uint64
	// LoadErrors counts loads that failed; Full counts ErrCacheFull refusals.
	LoadErrors, Full uint64
	// Evictions counts blocks evicted; OwnerTimeouts owner references dropped because their
	// deadline passed.
	Evictions, OwnerTimeouts uint64
}

// Cache is the buffer cache. It is safe for concurrent use.
type Cache struct {
	shards []*cacheShard
	clock  Clock
	epoch  time.Time // owner deadlines are nanoseconds since epoch (monotonic with RealClock)
	budget int
	// tickNext rotates the shard a Tick starts at, so a tick that runs out of budget does not
	// always leave the same shards for later.
	tickNext atomic.Uint64
	// dirtyBlocks is the sum of the shards' dirty blocks, for DirtyBytes without locks.
	dirtyBlocks atomic.Int64
	capBlocks   int64
	// evictHook, if set (by tests), is called under the shard lock for every evicted block.
	evictHook func(*cacheBlock)
}

type blockState uint8

const (
	blockFree    blockState = iota // in the pool
	blockLoading                   // in the map, its loader running
	blockReady                     // in the map, its bytes valid
	blockFailed                    // out of the map: the load failed, waiters still hold it
)

// notOwned is cacheBlock.own's value for a block without an owner.
const notOwned = math.MinInt64

// cacheBlock is one buffer of the pool and, while in use, one resident block. A buffer stays
// with its cacheBlock for the cache's life. Fields other than gen and own are guarded by the
// shard's lock.
type cacheBlock struct {
	key   BlockKey
	buf   []byte
	shard *cacheShard
	// gen changes every time the block goes back to the pool, so a stale handle is noticed.
	// It is written under the lock and read without it by OwnedBlock.Renew.
	gen atomic.Uint64
	// own is the owner's deadline (nanoseconds since the cache's epoch) or notOwned. It is
	// set from notOwned only under the lock, moved later by Renew without the lock, and set
	// back to notOwned only under the lock (Tick, Disown).
	own atomic.Int64
	// ownAt is the deadline the block is queued under in the shard's timer heap (Renew does
	// not requeue: Tick finds the later deadline and requeues then); timerIdx its place there
	// (-1: not queued).
	ownAt    int64
	timerIdx int
	refs     int32
	state    blockState
	dirty    bool
	version  uint64
	loadErr  error
	// prev and next link the block into its shard's LRU list (next also links the pool).
	prev, next *cacheBlock
}

type cacheShard struct {
	mu     sync.Mutex
	cond   sync.Cond // signalled when a load ends
	cache  *Cache
	blocks map[BlockKey]*cacheBlock
	// lru is the sentinel of the list of resident, ready, clean, unreferenced blocks: lru.next
	// is the most recently used, lru.prev the least.
	lru    cacheBlock
	free   *cacheBlock   // the pool: a list through next
	timers []*cacheBlock // owned blocks, a min-heap by ownAt

	capBlocks, high, low int

	used, dirty, clean, loading, evictable, referenced, owned, pooled int

	hits, misses, shared, loadErrors, full, evictions, ownerTimeouts uint64

	_ [64]byte // keep shards off each other's cache lines
}

// NewCache returns an empty cache.
func NewCache(cfg CacheConfig) (*Cache, error) {
	if cfg.Shards == 0 {
		cfg.Shards = DefaultCacheShards
	}
	if cfg.HighWater == 0 {
		cfg.HighWater = DefaultCacheHighWater
	}
	if cfg.LowWater == 0 {
		cfg.LowWater = DefaultCacheLowWater
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock
	}
	if cfg.TickBudget == 0 {
		cfg.TickBudget = DefaultCacheTickBudget
	}
	switch {
	case cfg.Shards < 0:
		return nil, fmt.Errorf("kawkab: cache: %d shards", cfg.Shards)
	case !(cfg.LowWater > 0 && cfg.LowWater <= cfg.HighWater && cfg.HighWater <= 1):
		return nil, fmt.Errorf("kawkab: cache: watermarks low %v, high %v: need 0 < low ≤ high ≤ 1", cfg.LowWater, cfg.HighWater)
	case cfg.TickBudget < 0:
		return nil, fmt.Errorf("kawkab: cache: tick budget %d", cfg.TickBudget)
	}
	total := cfg.CapacityBytes / BlockBytes
	if total < int64(cfg.Shards) {
		return nil, fmt.Errorf("kawkab: cache: capacity %d bytes is %d blocks of %d bytes, fewer than its %d shards",
			cfg.CapacityBytes, total, BlockBytes, cfg.Shards)
	}
	if total/int64(cfg.Shards) > math.MaxInt32 {
		return nil, fmt.Errorf("kawkab: cache: capacity %d bytes too large", cfg.CapacityBytes)
	}
	c := &Cache{
		shards:    make([]*cacheShard, cfg.Shards),
		clock:     cfg.Clock,
		epoch:     cfg.Clock.Now(),
		budget:    cfg.TickBudget,
		capBlocks: total,
	}
	for i := range c.shards {
		n := int(total / int64(cfg.Shards))
		if int64(i) < total%int64(cfg.Shards) {
			n++
		}
		s := &cacheShard{
			cache:     c,
			blocks:    make(map[BlockKey]*cacheBlock, n),
			capBlocks: n,
			high:      int(float64(n) * cfg.HighWater),
			low:       int(float64(n) * cfg.LowWater),
		}
		s.cond.L = &s.mu
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		c.shards[i] = s
	}
	return c, nil
}

// BlockHandle is a reference to a resident block, from Get or Acquire. The block stays
// resident, and its buffer its own, until Release. A BlockHandle is a small value; copies of
// it are the same reference, to be released once.
type BlockHandle struct {
	b   *cacheBlock
	gen uint64
}

// Bytes returns the block's 16 KiB buffer. Several handles of one block share it: readers may
// read it concurrently; the stream's writer only writes bytes past what readers are allowed to
// read (5.3.2: "the reads are restricted to only successfully appended data").
func (h BlockHandle) Bytes() []byte { return h.b.buf }

// Key returns the block's key.
func (h BlockHandle) Key() BlockKey { return h.b.key }

// Release drops the reference. It panics for a handle already released, if it notices (a
// handle whose block went back to the pool; a reference count below zero).
func (h BlockHandle) Release() {
	b := h.b
	if b == nil {
		panic("kawkab: Release of a zero BlockHandle")
	}
	s := b.shard
	s.mu.Lock()
	defer s.mu.Unlock() // also when a misuse panics: the shard stays usable
	if b.gen.Load() != h.gen {
		panic("kawkab: Release of a BlockHandle already released")
	}
	s.unrefLocked(b)
}

// OwnedBlock is a block with an owner reference (Own): the cache drops the reference when the
// deadline passes without a renewal.
type OwnedBlock struct {
	b   *cacheBlock
	gen uint64
}

// Bytes returns the block's buffer. It is the owner's while the ownership lasts: after a
// Renew that returned true, until the deadline it set. After the ownership ended the buffer
// may belong to another block.
func (o OwnedBlock) Bytes() []byte { return o.b.buf }

// Key returns the block's key.
func (o OwnedBlock) Key() BlockKey { return o.b.key }

// Renew moves the owner's deadline to timeout from now (never earlier than it is) without
// taking a lock — the thesis's idempotent enqueue: the block stays queued once and Tick
// requeues it under its new deadline. It returns false if the ownership has already ended
// (then the caller gets the block again with Get and Own).
func (o OwnedBlock) Renew(timeout time.Duration) bool {
	b := o.b
	if b == nil || b.gen.Load() != o.gen {
		return false
	}
	c := b.shard.cache
	d := c.since(c.clock.Now()) + int64(timeout)
	for {
		cur := b.own.Load()
		if cur == notOwned {
			return false
		}
		if d <= cur || b.own.CompareAndSwap(cur, d) {
			break
		}
	}
	// If the block went back to the pool and was owned again meanwhile, the swap moved that
	// ownership's deadline (harmless: it is released later); this one is over.
	return b.gen.Load() == o.gen
}

// Disown drops the owner reference now. It returns false if the ownership had already ended.
func (o OwnedBlock) Disown() bool {
	b := o.b
	if b == nil {
		return false
	}
	s := b.shard
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.gen.Load() != o.gen {
		return false
	}
	return s.disownLocked(b)
}

func (c *Cache) shardOf(k BlockKey) *cacheShard {
	x := k.Stream*0x9e3779b97f4a7c15 + k.Num*0xc2b2ae3d27d4eb4f + uint64(k.Kind)*0x165667b19e3779f9
	x ^= x >> 29
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 32
	return c.shards[x%uint64(len(c.shards))]
}

func (c *Cache) since(t time.Time) int64 { return int64(t.Sub(c.epoch)) }

// Get returns a reference to key's block. A resident block is a hit. Otherwise a buffer is
// taken from the pool (evicting if the shard needs room; ErrCacheFull if it cannot), zeroed,
// and load fills it outside the shard's lock; the block is then clean. Concurrent Gets of a
// block being loaded wait for that load (one load per key) and get its error if it fails; a
// failed load leaves nothing behind, and the next Get loads again. With load nil a missing
// block is created zeroed and dirty: that is Acquire.
func (c *Cache) Get(key BlockKey, load func(buf []byte) error) (BlockHandle, error) {
	s := c.shardOf(key)
	s.mu.Lock()
	if b, ok := s.blocks[key]; ok {
		if b.state == blockReady {
			s.hits++
			s.refLocked(b)
			h := BlockHandle{b, b.gen.Load()}
			s.mu.Unlock()
			return h, nil
		}
		// Loading: wait for it, holding a reference so the block stays ours.
		s.shared++
		s.refLocked(b)
		for b.state == blockLoading {
			s.cond.Wait()
		}
		if b.state == blockFailed {
			err := b.loadErr
			s.unrefLocked(b)
			s.mu.Unlock()
			return BlockHandle{}, err
		}
		h := BlockHandle{b, b.gen.Load()}
		s.mu.Unlock()
		return h, nil
	}
	s.misses++
	b, err := s.allocLocked()
	if err != nil {
		s.mu.Unlock()
		return BlockHandle{}, err
	}
	b.key = key
	s.blocks[key] = b
	s.refLocked(b)
	h := BlockHandle{b, b.gen.Load()}
	if load == nil {
		clear(b.buf)
		b.state = blockReady
		b.dirty = true
		s.dirty++
		c.dirtyBlocks.Add(1)
		s.mu.Unlock()
		return h, nil
	}
	b.state = blockLoading
	s.loading++
	s.mu.Unlock()
	if err := s.load(b, load); err != nil {
		return BlockHandle{}, err
	}
	return h, nil
}

// Lookup returns a reference to key's block if it is resident and loaded — a hit, counted
// as one — and false otherwise, loading nothing and counting nothing: a reader that wants
// many blocks looks them all up first and fetches the missing ones together (one ranged read
// for a run of blocks), then inserts them with Get, which counts the misses.
func (c *Cache) Lookup(key BlockKey) (BlockHandle, bool) {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blocks[key]
	if !ok || b.state != blockReady {
		return BlockHandle{}, false
	}
	s.hits++
	s.refLocked(b)
	return BlockHandle{b, b.gen.Load()}, true
}

// Acquire returns a reference to key's block, creating it zeroed and dirty if it is not
// resident (Get with no loader): for new blocks, which exist nowhere else yet. A block that
// may be in the local store must be read with Get and a loader.
func (c *Cache) Acquire(key BlockKey) (BlockHandle, error) { return c.Get(key, nil) }

// load runs the loader of block b (state loading, one reference: the caller's) and ends the
// load, also if the loader panics.
func (s *cacheShard) load(b *cacheBlock, load func([]byte) error) (err error) {
	done := false
	defer func() {
		if !done {
			s.endLoad(b, errLoadPanicked)
		}
	}()
	clear(b.buf)
	err = load(b.buf)
	done = true
	return s.endLoad(b, err)
}

func (s *cacheShard) endLoad(b *cacheBlock, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cond.Broadcast()
	if err != nil {
		b.state = blockFailed // still counted in loading until freed
		b.loadErr = err
		delete(s.blocks, b.key)
		s.loadErrors++
		s.unrefLocked(b)
		return err
	}
	s.loading--
	b.state = blockReady
	b.dirty = false
	s.clean++
	return nil
}

// allocLocked takes a buffer for a new block: from the pool, or a new one while the shard has
// allocated fewer than its capacity, evicting first if the shard is at capacity and afterwards
// down to the low-water mark if it is above the high-water mark.
func (s *cacheShard) allocLocked() (*cacheBlock, error) {
	if s.used >= s.capBlocks && !s.evictLocked() {
		s.full++
		return nil, ErrCacheFull
	}
	b := s.free
	if b != nil {
		s.free = b.next
		b.next = nil
		s.pooled--
	} else {
		b = &cacheBlock{buf: make([]byte, BlockBytes), shard: s, timerIdx: -1}
		b.own.Store(notOwned)
	}
	s.used++
	if s.used > s.high {
		for s.used > s.low && s.evictLocked() {
		}
	}
	return b, nil
}

// evictLocked evicts the least recently used evictable block, if there is one.
func (s *cacheShard) evictLocked() bool {
	b := s.lru.prev
	if b == &s.lru {
		return false
	}
	if h := s.cache.evictHook; h != nil {
		h(b)
	}
	s.unlinkLocked(b)
	delete(s.blocks, b.key)
	s.clean--
	s.evictions++
	s.freeLocked(b)
	return true
}

// freeLocked returns a block that is out of the map and unreferenced to the pool.
func (s *cacheShard) freeLocked(b *cacheBlock) {
	if b.state == blockFailed {
		s.loading--
	}
	b.gen.Add(1)
	b.state = blockFree
	b.dirty = false
	b.version = 0
	b.loadErr = nil
	s.used--
	b.next = s.free
	s.free = b
	s.pooled++
}

func (s *cacheShard) refLocked(b *cacheBlock) {
	if b.refs == 0 {
		s.referenced++
		if b.state == blockReady && !b.dirty {
			s.unlinkLocked(b)
		}
	}
	b.refs++
}

func (s *cacheShard) unrefLocked(b *cacheBlock) {
	b.refs--
	switch {
	case b.refs > 0:
		return
	case b.refs < 0:
		b.refs = 0
		panic("kawkab: buffer cache block released more often than referenced")
	}
	s.referenced--
	switch {
	case b.state == blockFailed:
		s.freeLocked(b)
	case b.state == blockReady && !b.dirty:
		s.pushLocked(b)
	}
}

// pushLocked puts b at the front (most recently used) of the LRU list.
func (s *cacheShard) pushLocked(b *cacheBlock) {
	b.prev = &s.lru
	b.next = s.lru.next
	b.next.prev = b
	s.lru.next = b
	s.evictable++
}

func (s *cacheShard) unlinkLocked(b *cacheBlock) {
	b.prev.next = b.next
	b.next.prev = b.prev
	b.prev, b.next = nil, nil
	s.evictable--
}

// MarkDirty records that key's block was written and is not (all) in the local store: it
// will not be evicted until marked clean. It returns the block's new version, which
// MarkCleanIf takes, and false if the block is not resident (or still loading).
func (c *Cache) MarkDirty(key BlockKey) (version uint64, ok bool) {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blocks[key]
	if !ok || b.state != blockReady {
		return 0, false
	}
	if !b.dirty {
		if b.refs == 0 {
			s.unlinkLocked(b)
		}
		b.dirty = true
		s.clean--
		s.dirty++
		c.dirtyBlocks.Add(1)
	}
	b.version++
	return b.version, true
}

// MarkClean records that key's block is in the local store: it may be evicted once
// unreferenced. It returns false if the block is not resident (or still loading).
func (c *Cache) MarkClean(key BlockKey) bool { return c.markClean(key, 0, false) }

// MarkCleanIf marks key's block clean only if it was not marked dirty again after the
// MarkDirty that returned version: the local store's copy, taken after that MarkDirty, may
// miss later writes. It returns whether the block is resident and now clean.
func (c *Cache) MarkCleanIf(key BlockKey, version uint64) bool {
	return c.markClean(key, version, true)
}

func (c *Cache) markClean(key BlockKey, version uint64, check bool) bool {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blocks[key]
	if !ok || b.state != blockReady {
		return false
	}
	if check && b.version != version {
		return !b.dirty
	}
	if b.dirty {
		b.dirty = false
		s.dirty--
		s.clean++
		c.dirtyBlocks.Add(-1)
		if b.refs == 0 {
			s.pushLocked(b)
		}
	}
	return true
}

// DirtyBytes is what dirty blocks hold, read without locks: the engine's backpressure signal.
func (c *Cache) DirtyBytes() int64 { return c.dirtyBlocks.Load() * BlockBytes }

// CapacityBytes is the cache's capacity in whole blocks.
func (c *Cache) CapacityBytes() int64 { return c.capBlocks * BlockBytes }

// Own gives key's resident block an owner reference that the cache drops timeout from now
// (Tick, Run) unless renewed. Owning an owned block only moves its deadline (never earlier):
// a block has at most one owner reference and is queued once. ErrNotResident if the block is
// not resident; the caller typically holds a handle from Get or Acquire, owns, and releases
// the handle.
func (c *Cache) Own(key BlockKey, timeout time.Duration) (OwnedBlock, error) {
	d := c.since(c.clock.Now()) + int64(timeout)
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blocks[key]
	if !ok || b.state != blockReady {
		return OwnedBlock{}, ErrNotResident
	}
	if b.own.Load() != notOwned {
		for { // only Renew races with this, and only moves the deadline later
			cur := b.own.Load()
			if d <= cur || b.own.CompareAndSwap(cur, d) {
				break
			}
		}
	} else {
		s.refLocked(b)
		s.owned++
		b.own.Store(d)
		b.ownAt = d
		s.timerPush(b)
	}
	return OwnedBlock{b, b.gen.Load()}, nil
}

// Disown drops key's owner reference now; false if the block is not owned.
func (c *Cache) Disown(key BlockKey) bool {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blocks[key]
	if !ok {
		return false
	}
	return s.disownLocked(b)
}

func (s *cacheShard) disownLocked(b *cacheBlock) bool {
	if b.own.Swap(notOwned) == notOwned {
		return false
	}
	s.timerRemove(b)
	s.owned--
	s.unrefLocked(b)
	return true
}

// Tick drops the owner references whose deadline is at or before now, handling at most the
// tick budget of queued deadlines (a renewed block is requeued under its new deadline, which
// counts too). It returns how many references it dropped and whether deadlines at or before
// now remain (then the caller ticks again).
func (c *Cache) Tick(now time.Time) (released int, more bool) {
	t := c.since(now)
	budget := c.budget
	n := len(c.shards)
	start := int(c.tickNext.Add(1) % uint64(n))
	for i := 0; i < n; i++ {
		s := c.shards[(start+i)%n]
		s.mu.Lock()
		for len(s.timers) > 0 && s.timers[0].ownAt <= t {
			if budget == 0 {
				more = true
				break
			}
			budget--
			b := s.timers[0]
			s.timerRemove(b)
			for {
				d := b.own.Load()
				if d > t { // renewed: requeue under the new deadline
					b.ownAt = d
					s.timerPush(b)
					break
				}
				if b.own.CompareAndSwap(d, notOwned) {
					s.owned--
					s.ownerTimeouts++
					s.unrefLocked(b)
					released++
					break
				}
			}
		}
		s.mu.Unlock()
	}
	return released, more
}

// Run ticks every interval on the cache's clock until ctx is done, ticking again at once while
// a tick leaves deadlines due. It returns ctx's error. The engine starts it in a goroutine.
func (c *Cache) Run(ctx context.Context, every time.Duration) error {
	for {
		if err := c.clock.Sleep(ctx, every); err != nil {
			return err
		}
		for {
			if _, more := c.Tick(c.clock.Now()); !more || ctx.Err() != nil {
				break
			}
		}
	}
}

// Stats returns a snapshot of the cache's occupancy and counters.
func (c *Cache) Stats() CacheStats {
	st := CacheStats{CapacityBytes: c.CapacityBytes()}
	const bb = BlockBytes
	for _, s := range c.shards {
		s.mu.Lock()
		st.UsedBytes += int64(s.used) * bb
		st.DirtyBytes += int64(s.dirty) * bb
		st.CleanBytes += int64(s.clean) * bb
		st.EvictableBytes += int64(s.evictable) * bb
		st.LoadingBytes += int64(s.loading) * bb
		st.ReferencedBytes += int64(s.referenced) * bb
		st.PooledBytes += int64(s.pooled) * bb
		st.OwnedBlocks += s.owned
		st.Hits += s.hits
		st.Misses += s.misses
		st.SharedLoads += s.shared
		st.LoadErrors += s.loadErrors
		st.Full += s.full
		st.Evictions += s.evictions
		st.OwnerTimeouts += s.ownerTimeouts
		s.mu.Unlock()
	}
	return st
}

// The owner timer queue: a binary min-heap of blocks by ownAt, each knowing its index.

func (s *cacheShard) timerPush(b *cacheBlock) {
	b.timerIdx = len(s.timers)
	s.timers = append(s.timers, b)
	s.timerUp(b.timerIdx)
}

func (s *cacheShard) timerRemove(b *cacheBlock) {
	i := b.timerIdx
	last := len(s.timers) - 1
	if i != last {
		s.timerSwap(i, last)
	}
	s.timers[last] = nil
	s.timers = s.timers[:last]
	b.timerIdx = -1
	if i != last {
		s.timerDown(i)
		s.timerUp(i)
	}
}

func (s *cacheShard) timerSwap(i, j int) {
	h := s.timers
	h[i], h[j] = h[j], h[i]
	h[i].timerIdx = i
	h[j].timerIdx = j
}

func (s *cacheShard) timerUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.timers[p].ownAt <= s.timers[i].ownAt {
			return
		}
		s.timerSwap(i, p)
		i = p
	}
}

func (s *cacheShard) timerDown(i int) {
	n := len(s.timers)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.timers[r].ownAt < s.timers[l].ownAt {
			m = r
		}
		if s.timers[i].ownAt <= s.timers[m].ownAt {
			return
		}
		s.timerSwap(i, m)
		i = m
	}
}
