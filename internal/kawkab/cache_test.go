package kawkab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// manualClock is a clock that moves only when told to.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (m *manualClock) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t
}

func (m *manualClock) Advance(d time.Duration) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t = m.t.Add(d)
	return m.t
}

// Sleep moves the clock instead of waiting.
func (m *manualClock) Sleep(ctx context.Context, d time.Duration) error {
	m.Advance(d)
	return ctx.Err()
}

func newTestCache(t testing.TB, blocks, shards int, clk Clock) *Cache {
	t.Helper()
	c, err := NewCache(CacheConfig{CapacityBytes: int64(blocks) * BlockBytes, Shards: shards, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dkey(n uint64) BlockKey { return BlockKey{Stream: 1, Kind: KindData, Num: n} }

// sign writes key into the first 24 bytes of buf: a block's signature.
func sign(buf []byte, k BlockKey) {
	binary.LittleEndian.PutUint64(buf[0:], k.Stream)
	binary.LittleEndian.PutUint64(buf[8:], uint64(k.Kind)+1)
	binary.LittleEndian.PutUint64(buf[16:], k.Num)
}

func signed(buf []byte, k BlockKey) bool {
	return binary.LittleEndian.Uint64(buf[0:]) == k.Stream &&
		binary.LittleEndian.Uint64(buf[8:]) == uint64(k.Kind)+1 &&
		binary.LittleEndian.Uint64(buf[16:]) == k.Num
}

// loadClean gets k with a loader that signs it, and releases it: a clean, evictable block.
func loadClean(t testing.TB, c *Cache, k BlockKey) {
	t.Helper()
	h, err := c.Get(k, func(buf []byte) error { sign(buf, k); return nil })
	if err != nil {
		t.Fatalf("Get %v: %v", k, err)
	}
	h.Release()
}

func resident(c *Cache, k BlockKey) bool {
	s := c.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.blocks[k]
	return ok
}

// checkCache checks every shard's invariants (at rest: no loads in flight).
func checkCache(t testing.TB, c *Cache) {
	t.Helper()
	var dirtyTotal int64
	for i, s := range c.shards {
		s.mu.Lock()
		var dirty, clean, loading, referenced, owned int
		for k, b := range s.blocks {
			if b.key != k || b.shard != s || c.shardOf(k) != s {
				t.Errorf("shard %d: block %v misplaced (key %v)", i, k, b.key)
			}
			switch b.state {
			case blockReady:
				if b.dirty {
					dirty++
				} else {
					clean++
				}
			case blockLoading:
				loading++
			default:
				t.Errorf("shard %d: block %v in the map in state %d", i, k, b.state)
			}
			if b.refs < 0 {
				t.Errorf("shard %d: block %v refs %d", i, k, b.refs)
			}
			if b.refs > 0 {
				referenced++
			}
			if b.own.Load() != notOwned {
				owned++
				if b.refs == 0 || b.timerIdx < 0 || s.timers[b.timerIdx] != b {
					t.Errorf("shard %d: owned block %v refs %d timer %d", i, k, b.refs, b.timerIdx)
				}
			} else if b.timerIdx >= 0 {
				t.Errorf("shard %d: unowned block %v queued", i, k)
			}
		}
		n := 0
		for b := s.lru.next; b != &s.lru; b = b.next {
			if b.next.prev != b {
				t.Errorf("shard %d: LRU list broken", i)
				break
			}
			if s.blocks[b.key] != b || b.state != blockReady || b.dirty || b.refs != 0 {
				t.Errorf("shard %d: LRU holds %v (state %d, dirty %v, refs %d)", i, b.key, b.state, b.dirty, b.refs)
			}
			n++
		}
		if n != clean-countReferencedClean(s) {
			t.Errorf("shard %d: LRU list has %d blocks, want the %d clean unreferenced", i, n, clean-countReferencedClean(s))
		}
		pooled := 0
		for b := s.free; b != nil; b = b.next {
			if b.state != blockFree || b.refs != 0 {
				t.Errorf("shard %d: pooled block in state %d refs %d", i, b.state, b.refs)
			}
			pooled++
		}
		for j, b := range s.timers {
			if b.timerIdx != j || (j > 0 && s.timers[(j-1)/2].ownAt > b.ownAt) || b.own.Load() < b.ownAt {
				t.Errorf("shard %d: timer heap broken at %d", i, j)
			}
		}
		got := [...]int{s.used, s.dirty, s.clean, s.loading, s.evictable, s.referenced, s.owned, s.pooled, len(s.timers)}
		want := [...]int{len(s.blocks), dirty, clean, loading, n, referenced, owned, pooled, owned}
		if got != want {
			t.Errorf("shard %d: counters used, dirty, clean, loading, evictable, referenced, owned, pooled, timers = %v, blocks say %v", i, got, want)
		}
		if s.used > s.capBlocks || s.used+s.pooled > s.capBlocks {
			t.Errorf("shard %d: %d used + %d pooled blocks, capacity %d", i, s.used, s.pooled, s.capBlocks)
		}
		dirtyTotal += int64(dirty)
		s.mu.Unlock()
	}
	if got := c.DirtyBytes(); got != dirtyTotal*BlockBytes {
		t.Errorf("DirtyBytes %d, blocks say %d", got, dirtyTotal*BlockBytes)
	}
	st := c.Stats()
	if st.UsedBytes != st.DirtyBytes+st.CleanBytes+st.LoadingBytes || st.EvictableBytes > st.CleanBytes ||
		st.UsedBytes+st.PooledBytes > st.CapacityBytes {
		t.Errorf("stats inconsistent: %+v", st)
	}
}

func countReferencedClean(s *cacheShard) int {
	n := 0
	for _, b := range s.blocks {
		if b.state == blockReady && !b.dirty && b.refs > 0 {
			n++
		}
	}
	return n
}

func TestCacheConfig(t *testing.T) {
	for _, cfg := range []CacheConfig{
		{CapacityBytes: 7 * BlockBytes},                                 // fewer blocks than 8 shards
		{CapacityBytes: 8*BlockBytes - 1, Shards: 8},                    // rounds down to 7
		{CapacityBytes: 1 << 20, Shards: -1},                            // negative shards
		{CapacityBytes: 1 << 20, HighWater: 0.8, LowWater: 0.9},         // low above high
		{CapacityBytes: 1 << 20, HighWater: 1.1},                        // above 1
		{CapacityBytes: 1 << 20, LowWater: -0.5},                        // negative
		{CapacityBytes: 1 << 20, TickBudget: -1},                        // negative budget
		{CapacityBytes: 0},                                              // nothing
		{CapacityBytes: 1 << 20, HighWater: 0.5, LowWater: 0.6},         // low above high again
		{CapacityBytes: 1 << 20, HighWater: 0.9, LowWater: math.Inf(1)}, // +Inf
	} {
		if _, err := NewCache(cfg); err == nil {
			t.Errorf("NewCache(%+v) accepted", cfg)
		}
	}
	c, err := NewCache(CacheConfig{CapacityBytes: 100*BlockBytes + 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.shards) != DefaultCacheShards || c.CapacityBytes() != 100*BlockBytes {
		t.Fatalf("%d shards, capacity %d", len(c.shards), c.CapacityBytes())
	}
	total := 0
	for _, s := range c.shards {
		if s.capBlocks != 12 && s.capBlocks != 13 {
			t.Errorf("shard capacity %d, want 12 or 13", s.capBlocks)
		}
		total += s.capBlocks
	}
	if total != 100 {
		t.Errorf("shards hold %d blocks, want 100", total)
	}
	if st := c.Stats(); st.CapacityBytes != 100*BlockBytes || st.UsedBytes != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestCacheHitsMissesLRU(t *testing.T) {
	c := newTestCache(t, 10, 1, nil) // high-water 9 blocks, low-water 8
	loads := 0
	get := func(n uint64) {
		k := dkey(n)
		h, err := c.Get(k, func(buf []byte) error { loads++; sign(buf, k); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if !signed(h.Bytes(), k) || h.Key() != k || len(h.Bytes()) != BlockBytes {
			t.Fatalf("block %v: wrong bytes", k)
		}
		h.Release()
	}
	for n := range uint64(9) { // 9 blocks: at the high-water mark, not above
		get(n)
	}
	st := c.Stats()
	if st.Misses != 9 || st.Hits != 0 || loads != 9 || st.Evictions != 0 || st.UsedBytes != 9*BlockBytes ||
		st.CleanBytes != st.UsedBytes || st.EvictableBytes != st.UsedBytes || st.DirtyBytes != 0 {
		t.Fatalf("after 9 loads: %+v", st)
	}
	// Hits on 0 and 2 make them the most recently used: LRU order is now 1 3 4 5 6 7 8 0 2.
	get(0)
	get(2)
	if st := c.Stats(); st.Hits != 2 || st.Misses != 9 || loads != 9 {
		t.Fatalf("after two hits: %+v, %d loads", st, loads)
	}
	// The 10th block goes above 90%: the two least recently used (1, 3) are evicted, down to 8.
	get(9)
	for n := range uint64(10) {
		if want := n != 1 && n != 3; resident(c, dkey(n)) != want {
			t.Errorf("block %d resident = %v, want %v", n, !want, want)
		}
	}
	if st := c.Stats(); st.Evictions != 2 || st.UsedBytes != 8*BlockBytes || st.PooledBytes != 2*BlockBytes {
		t.Fatalf("after the 10th block: %+v", st)
	}
	// A reloaded block is a miss, and its buffer comes from the pool.
	get(1)
	if st := c.Stats(); st.Misses != 11 || st.PooledBytes != BlockBytes || st.UsedBytes+st.PooledBytes != 10*BlockBytes {
		t.Fatalf("after reloading 1: %+v", st)
	}
	checkCache(t, c)
}

func TestCacheWatermarks(t *testing.T) {
	c := newTestCache(t, 100, 1, nil) // evicts above 90 blocks, down to 85
	for n := range uint64(90) {
		loadClean(t, c, dkey(n))
	}
	if st := c.Stats(); st.Evictions != 0 || st.UsedBytes != 90*BlockBytes {
		t.Fatalf("at 90%%: %+v", st)
	}
	loadClean(t, c, dkey(90)) // 91 > 90: evict down to 85
	st := c.Stats()
	if st.Evictions != 6 || st.UsedBytes != 85*BlockBytes {
		t.Fatalf("above 90%%: %+v, want 6 evictions down to 85 blocks", st)
	}
	for n := range uint64(6) {
		if resident(c, dkey(n)) {
			t.Errorf("block %d, among the 6 least recently used, still resident", n)
		}
	}
	// Up to 90 again with no eviction, then the next block evicts 6 more.
	for n := uint64(91); n < 96; n++ {
		loadClean(t, c, dkey(n))
	}
	if st := c.Stats(); st.Evictions != 6 || st.UsedBytes != 90*BlockBytes {
		t.Fatalf("back at 90%%: %+v", st)
	}
	loadClean(t, c, dkey(96))
	if st := c.Stats(); st.Evictions != 12 || st.UsedBytes != 85*BlockBytes {
		t.Fatalf("above 90%% again: %+v", st)
	}
	checkCache(t, c)
}

func TestCacheRefcountPreventsEviction(t *testing.T) {
	c := newTestCache(t, 10, 1, nil)
	k0 := dkey(0)
	h0, err := c.Get(k0, func(buf []byte) error { sign(buf, k0); return nil })
	if err != nil {
		t.Fatal(err)
	}
	h0b, err := c.Get(k0, nil) // a second reference: a hit
	if err != nil || h0b.Bytes()[0] != h0.Bytes()[0] {
		t.Fatal(err)
	}
	for n := uint64(1); n < 10; n++ {
		loadClean(t, c, dkey(n))
	}
	// Block 0 is the oldest but referenced: blocks 1 and 2 go instead.
	if !resident(c, k0) || resident(c, dkey(1)) || resident(c, dkey(2)) {
		t.Fatal("eviction took a referenced block or skipped the LRU ones")
	}
	if st := c.Stats(); st.ReferencedBytes != BlockBytes || st.EvictableBytes != 7*BlockBytes {
		t.Fatalf("%+v", st)
	}
	h0.Release()
	if st := c.Stats(); st.ReferencedBytes != BlockBytes {
		t.Fatalf("one of two references released: %+v", st)
	}
	h0b.Release()
	// Now 0 is unreferenced and the most recently released: evicted after 3 … 9.
	for n := uint64(10); n < 13; n++ {
		loadClean(t, c, dkey(n))
	}
	if !resident(c, k0) || resident(c, dkey(3)) {
		t.Fatal("LRU order after release")
	}
	checkCache(t, c)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("double release did not panic")
			}
		}()
		h0.Release() // its block is still resident with refs 0: the count would go below zero
	}()
	// The shard is still usable and consistent; a handle whose block was recycled panics too.
	checkCache(t, c)
	for n := uint64(13); n < 40; n++ {
		loadClean(t, c, dkey(n))
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("release of a recycled block did not panic")
			}
		}()
		h0.Release()
	}()
	checkCache(t, c)
}

func TestCacheDirtyNeverEvictedAndFull(t *testing.T) {
	c := newTestCache(t, 10, 1, nil)
	var keys []BlockKey
	for n := range uint64(10) {
		k := dkey(n)
		h, err := c.Acquire(k) // new blocks are dirty
		if err != nil {
			t.Fatalf("Acquire %d: %v", n, err)
		}
		sign(h.Bytes(), k)
		h.Release()
		keys = append(keys, k)
	}
	st := c.Stats()
	if st.DirtyBytes != 10*BlockBytes || st.Evictions != 0 || c.DirtyBytes() != st.DirtyBytes || st.EvictableBytes != 0 {
		t.Fatalf("10 dirty blocks: %+v", st)
	}
	// At capacity, all dirty: a new block is refused, at once.
	if _, err := c.Acquire(dkey(10)); !errors.Is(err, ErrCacheFull) {
		t.Fatalf("Acquire in a full cache: %v", err)
	}
	if _, err := c.Get(dkey(10), func([]byte) error { t.Error("loader called in a full cache"); return nil }); !errors.Is(err, ErrCacheFull) {
		t.Fatalf("Get in a full cache: %v", err)
	}
	// Resident blocks are still served.
	if h, err := c.Get(keys[3], nil); err != nil || !signed(h.Bytes(), keys[3]) {
		t.Fatalf("hit in a full cache: %v", err)
	} else {
		h.Release()
	}
	// A clean but referenced block is not evictable either.
	h5, _ := c.Get(keys[5], nil)
	if !c.MarkClean(keys[5]) {
		t.Fatal("MarkClean of a resident block")
	}
	if _, err := c.Acquire(dkey(10)); !errors.Is(err, ErrCacheFull) {
		t.Fatalf("Acquire with only a referenced clean block: %v", err)
	}
	h5.Release()
	// Released, it is evicted for the new block, and only it: the others are dirty.
	h, err := c.Acquire(dkey(10))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range h.Bytes() {
		if b != 0 {
			t.Fatalf("a new block from the pool is not zero at %d", i)
		}
	}
	h.Release()
	if resident(c, keys[5]) {
		t.Error("the clean block is still resident")
	}
	for i, k := range keys {
		if i != 5 && !resident(c, k) {
			t.Errorf("dirty block %v evicted", k)
		}
	}
	if st := c.Stats(); st.Full != 3 || st.Evictions != 1 || st.DirtyBytes != 10*BlockBytes {
		t.Fatalf("%+v", st)
	}
	// MarkDirty takes a clean block off the LRU list; MarkCleanIf refuses a stale version.
	if !c.MarkClean(keys[0]) {
		t.Fatal("MarkClean")
	}
	v, ok := c.MarkDirty(keys[0])
	if !ok {
		t.Fatal("MarkDirty")
	}
	v2, _ := c.MarkDirty(keys[0]) // written again after the flusher's copy
	if v2 == v || c.MarkCleanIf(keys[0], v) {
		t.Fatal("MarkCleanIf cleaned a block written after its version")
	}
	if st := c.Stats(); st.DirtyBytes != 10*BlockBytes || st.EvictableBytes != 0 {
		t.Fatalf("%+v", st)
	}
	if !c.MarkCleanIf(keys[0], v2) || c.Stats().EvictableBytes != BlockBytes {
		t.Fatal("MarkCleanIf with the current version")
	}
	if c.MarkClean(dkey(99)) || c.MarkCleanIf(dkey(99), 0) {
		t.Fatal("marked a block that is not resident")
	}
	if _, ok := c.MarkDirty(dkey(99)); ok {
		t.Fatal("marked a block that is not resident")
	}
	checkCache(t, c)
}

func TestCacheFullWhenReferenced(t *testing.T) {
	c := newTestCache(t, 8, 2, nil)
	var hs []BlockHandle
	for n := uint64(0); len(hs) < 8; n++ {
		h, err := c.Get(dkey(n), func([]byte) error { return nil }) // clean, but held
		if errors.Is(err, ErrCacheFull) {
			continue // that shard is full; fill the other
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for n := uint64(1000); n < 1010; n++ {
		if _, err := c.Get(dkey(n), func([]byte) error { return nil }); !errors.Is(err, ErrCacheFull) {
			t.Fatalf("Get %d with every block referenced: %v", n, err)
		}
	}
	for _, h := range hs {
		h.Release()
	}
	if _, err := c.Get(dkey(1000), func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestCacheOwnerTimeout(t *testing.T) {
	clk := newManualClock()
	c := newTestCache(t, 4, 1, clk) // high-water 3, low-water 3
	k := dkey(0)
	h, err := c.Acquire(k)
	if err != nil {
		t.Fatal(err)
	}
	sign(h.Bytes(), k)
	if _, err := c.Own(dkey(9), time.Second); !errors.Is(err, ErrNotResident) {
		t.Fatalf("Own of a missing block: %v", err)
	}
	o, err := c.Own(k, time.Second) // deadline 1s
	if err != nil {
		t.Fatal(err)
	}
	h.Release() // the owner reference keeps it
	c.MarkClean(k)
	if !signed(o.Bytes(), k) || o.Key() != k {
		t.Fatal("owned bytes")
	}
	if st := c.Stats(); st.OwnedBlocks != 1 || st.ReferencedBytes != BlockBytes || st.EvictableBytes != 0 {
		t.Fatalf("owned: %+v", st)
	}
	// Owned, clean, the least recently used: still not evicted.
	for n := uint64(1); n < 5; n++ {
		loadClean(t, c, dkey(n))
	}
	if !resident(c, k) {
		t.Fatal("an owned block was evicted")
	}
	if r, more := c.Tick(clk.Advance(500 * time.Millisecond)); r != 0 || more {
		t.Fatalf("tick before the deadline released %d", r)
	}
	if !o.Renew(time.Second) { // deadline 1.5s
		t.Fatal("Renew of an owned block")
	}
	if r, _ := c.Tick(clk.Advance(700 * time.Millisecond)); r != 0 { // 1.2s: past the first deadline
		t.Fatalf("a renewed ownership was released at 1.2s")
	}
	if o2, err := c.Own(k, time.Second); err != nil || o2 != o { // 2.2s, the same ownership
		t.Fatalf("Own of an owned block: %v", err)
	}
	if !o.Renew(time.Millisecond) { // never moves the deadline earlier
		t.Fatal("Renew")
	}
	if st := c.Stats(); st.OwnedBlocks != 1 || st.ReferencedBytes != BlockBytes || len(c.shards[0].timers) != 1 {
		t.Fatalf("owning twice took a second reference or queue entry: %+v", st)
	}
	if r, _ := c.Tick(clk.Advance(time.Second - time.Nanosecond)); r != 0 { // 2.2s minus a nanosecond
		t.Fatal("released before the deadline")
	}
	if r, more := c.Tick(clk.Advance(time.Nanosecond)); r != 1 || more { // 2.2s
		t.Fatalf("tick after the deadline released %d", r)
	}
	if o.Renew(time.Second) || o.Disown() || c.Disown(k) {
		t.Fatal("the ownership did not end")
	}
	st := c.Stats()
	if st.OwnerTimeouts != 1 || st.OwnedBlocks != 0 || st.ReferencedBytes != 0 || st.EvictableBytes != 3*BlockBytes {
		t.Fatalf("after the timeout: %+v", st)
	}
	checkCache(t, c)
	// Now evictable: it is the most recently released, so blocks before it go first.
	for n := uint64(5); n < 9; n++ {
		loadClean(t, c, dkey(n))
	}
	if resident(c, k) {
		t.Error("the block released by its owner timeout was never evicted")
	}
	// A handle to a block that went back to the pool cannot renew.
	if o.Renew(time.Second) {
		t.Error("Renew of a recycled block")
	}
	checkCache(t, c)
}

func TestCacheDisown(t *testing.T) {
	clk := newManualClock()
	c := newTestCache(t, 8, 1, clk)
	k := dkey(1)
	loadClean(t, c, k)
	o, err := c.Own(k, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Disown() || o.Disown() || c.Disown(k) {
		t.Fatal("Disown")
	}
	if _, err := c.Own(k, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !c.Disown(k) {
		t.Fatal("Disown by key")
	}
	if r, _ := c.Tick(clk.Advance(time.Hour)); r != 0 {
		t.Fatalf("a disowned block timed out")
	}
	if st := c.Stats(); st.OwnerTimeouts != 0 || st.ReferencedBytes != 0 || st.EvictableBytes != BlockBytes {
		t.Fatalf("%+v", st)
	}
	checkCache(t, c)
}

func TestCacheTickBudget(t *testing.T) {
	clk := newManualClock()
	c, err := NewCache(CacheConfig{CapacityBytes: 64 * BlockBytes, Shards: 4, Clock: clk, TickBudget: 3})
	if err != nil {
		t.Fatal(err)
	}
	for n := range uint64(10) {
		loadClean(t, c, dkey(n))
		if _, err := c.Own(dkey(n), time.Duration(n+1)*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	now := clk.Advance(time.Second)
	var got []int
	for {
		r, more := c.Tick(now)
		got = append(got, r)
		if !more {
			break
		}
	}
	if fmt.Sprint(got) != "[3 3 3 1]" {
		t.Fatalf("ticks released %v, want [3 3 3 1]", got)
	}
	if st := c.Stats(); st.OwnerTimeouts != 10 || st.OwnedBlocks != 0 {
		t.Fatalf("%+v", st)
	}
	checkCache(t, c)
}

// TestCacheTimerHeap owns blocks under random deadlines, renews some, and checks that the
// releases come at the right ticks.
func TestCacheTimerHeap(t *testing.T) {
	clk := newManualClock()
	c := newTestCache(t, 512, 2, clk)
	rng := rand.New(rand.NewPCG(1, 2))
	deadline := map[BlockKey]time.Duration{}
	var owned []OwnedBlock
	for n := range uint64(200) {
		k := dkey(n)
		loadClean(t, c, k)
		d := time.Duration(1+rng.IntN(100)) * time.Millisecond
		o, err := c.Own(k, d)
		if err != nil {
			t.Fatal(err)
		}
		deadline[k] = d
		owned = append(owned, o)
	}
	for _, o := range owned {
		if rng.IntN(3) == 0 {
			d := time.Duration(1+rng.IntN(200)) * time.Millisecond
			o.Renew(d)
			deadline[o.Key()] = max(deadline[o.Key()], d)
		}
	}
	start := clk.Now()
	for ms := 1; ms <= 201; ms++ {
		now := start.Add(time.Duration(ms) * time.Millisecond)
		c.Tick(now)
		for k, d := range deadline {
			s := c.shardOf(k)
			s.mu.Lock()
			owned := s.blocks[k].own.Load() != notOwned
			s.mu.Unlock()
			if want := d > time.Duration(ms)*time.Millisecond; owned != want {
				t.Fatalf("at %d ms block %v (deadline %v) owned = %v", ms, k, d, owned)
			}
		}
	}
	checkCache(t, c)
}

// TestCacheRun runs the background ticker on a virtual clock.
func TestCacheRun(t *testing.T) {
	clk := NewVirtualClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newTestCache(t, 8, 1, clk)
	k := dkey(1)
	loadClean(t, c, k)
	if _, err := c.Own(k, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	clk.Go(func() { runErr = c.Run(ctx, 100*time.Millisecond) })
	if err := clk.Sleep(ctx, 4900*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.OwnerTimeouts != 0 {
		t.Fatalf("released before its deadline: %+v", st)
	}
	if err := clk.Sleep(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.OwnerTimeouts != 1 || st.OwnedBlocks != 0 {
		t.Fatalf("not released after its deadline: %+v", st)
	}
	cancel()
	clk.Wait()
	if !errors.Is(runErr, context.Canceled) {
		t.Fatalf("Run returned %v", runErr)
	}
}

func TestCacheSingleFlight(t *testing.T) {
	c := newTestCache(t, 16, 2, nil)
	k := dkey(7)
	const gets = 50
	var loads atomic.Int32
	load := func(buf []byte) error {
		loads.Add(1)
		// Hold the load until the other 49 wait for it (bounded, in case they are slow to
		// come: they would then be hits, and the test below says so).
		for i := 0; i < 10000 && c.Stats().SharedLoads < gets-1; i++ {
			time.Sleep(100 * time.Microsecond)
		}
		sign(buf, k)
		return nil
	}
	var wg sync.WaitGroup
	hs := make([]BlockHandle, gets)
	errs := make([]error, gets)
	ready := make([]bool, gets) // whether the bytes were loaded when Get returned
	for i := range gets {
		wg.Go(func() {
			hs[i], errs[i] = c.Get(k, load)
			ready[i] = errs[i] == nil && signed(hs[i].Bytes(), k)
		})
	}
	wg.Wait()
	for i := range gets {
		if errs[i] != nil || !ready[i] || &hs[i].Bytes()[0] != &hs[0].Bytes()[0] {
			t.Fatalf("Get %d: %v", i, errs[i])
		}
	}
	st := c.Stats()
	if loads.Load() != 1 || st.Misses != 1 || st.SharedLoads != gets-1 || st.Hits != 0 || st.ReferencedBytes != BlockBytes {
		t.Fatalf("%d loads; %+v", loads.Load(), st)
	}
	for _, h := range hs {
		h.Release()
	}
	checkCache(t, c)
	if st := c.Stats(); st.EvictableBytes != BlockBytes {
		t.Fatalf("%+v", st)
	}
}

func TestCacheLoadError(t *testing.T) {
	c := newTestCache(t, 16, 1, nil)
	k := dkey(3)
	boom := errors.New("boom")
	started := make(chan struct{})
	finish := make(chan struct{})
	var loads atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, 5)
	wg.Go(func() {
		_, errs[0] = c.Get(k, func([]byte) error { loads.Add(1); close(started); <-finish; return boom })
	})
	<-started
	for i := 1; i < 5; i++ {
		wg.Go(func() { _, errs[i] = c.Get(k, func([]byte) error { loads.Add(1); return nil }) })
	}
	for c.Stats().SharedLoads < 4 {
		runtime.Gosched()
	}
	if st := c.Stats(); st.LoadingBytes != BlockBytes || st.UsedBytes != BlockBytes {
		t.Fatalf("while loading: %+v", st)
	}
	close(finish)
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("Get %d: %v, want the load's error", i, err)
		}
	}
	st := c.Stats()
	if loads.Load() != 1 || st.LoadErrors != 1 || st.UsedBytes != 0 || st.PooledBytes != BlockBytes || resident(c, k) {
		t.Fatalf("after a failed load: %d loads, %+v", loads.Load(), st)
	}
	// The next Get loads again, into the pooled buffer.
	loadClean(t, c, k)
	if st := c.Stats(); st.UsedBytes != BlockBytes || st.PooledBytes != 0 {
		t.Fatalf("%+v", st)
	}
	// A loader that panics leaves nothing behind either.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the loader's panic was swallowed")
			}
		}()
		c.Get(dkey(4), func([]byte) error { panic("loader") })
	}()
	if resident(c, dkey(4)) {
		t.Error("a panicked load left its block")
	}
	checkCache(t, c)
}

// TestCachePoolNoAllocs counts allocations of the acquire/release cycle: none once the pool
// holds the buffers, for hits and for misses that evict.
func TestCachePoolNoAllocs(t *testing.T) {
	c := newTestCache(t, 64, 4, nil)
	k := dkey(1)
	loadClean(t, c, k)
	if a := testing.AllocsPerRun(1000, func() {
		h, err := c.Get(k, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}); a != 0 {
		t.Errorf("a hit's acquire/release allocates %v times", a)
	}
	load := func(buf []byte) error { buf[0] = 1; return nil }
	var n uint64
	cycle := func() {
		n++
		h, err := c.Get(dkey(n%1000), load) // 1,000 keys through 64 blocks: misses and evictions
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
		h, err = c.Acquire(BlockKey{Stream: 2, Num: n % 1000})
		if err != nil {
			t.Fatal(err)
		}
		c.MarkClean(h.Key())
		h.Release()
	}
	for range 5000 { // fill the pool and the maps
		cycle()
	}
	allocated := c.Stats().UsedBytes + c.Stats().PooledBytes
	if a := testing.AllocsPerRun(2000, cycle); a != 0 {
		t.Errorf("a miss's acquire/release allocates %v times", a)
	}
	st := c.Stats()
	if st.UsedBytes+st.PooledBytes != allocated || allocated > st.CapacityBytes || st.Evictions < 10000 {
		t.Errorf("the pool was not reused: %+v", st)
	}
	checkCache(t, c)
}

// TestCacheStress runs many goroutines on random keys with references, marks, owners and
// ticks, and checks that no referenced, owned or dirty block was ever evicted and that the
// counters add up.
func TestCacheStress(t *testing.T) {
	clk := newManualClock()
	c, err := NewCache(CacheConfig{CapacityBytes: 96 * BlockBytes, Shards: 4, Clock: clk, TickBudget: 8})
	if err != nil {
		t.Fatal(err)
	}
	var badEvictions atomic.Int32
	c.evictHook = func(b *cacheBlock) {
		if b.refs != 0 || b.dirty || b.state != blockReady || b.own.Load() != notOwned {
			badEvictions.Add(1)
		}
	}
	const (
		workers = 12
		ops     = 2500
		shared  = 150 // shared keys, read-only, loaded by whoever misses
	)
	var gets, loadErrs atomic.Uint64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var tickers sync.WaitGroup
	tickers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.Tick(clk.Advance(time.Millisecond))
			runtime.Gosched()
		}
	})
	dirtyLeft := make([][]BlockKey, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var held []BlockHandle
			var owned []OwnedBlock
			dirty := map[BlockKey]bool{} // this worker's private blocks that are dirty
			check := func(buf []byte, k BlockKey) {
				if !signed(buf, k) {
					t.Errorf("worker %d: block %v lost its bytes while referenced", w, k)
				}
			}
			for i := range ops {
				switch op := rng.IntN(100); {
				case op < 45: // read a shared block
					k := BlockKey{Stream: 1, Kind: BlockKind(rng.IntN(2)), Num: uint64(rng.IntN(shared))}
					gets.Add(1)
					h, err := c.Get(k, func(buf []byte) error {
						if rng.IntN(50) == 0 {
							return errors.New("injected")
						}
						sign(buf, k)
						return nil
					})
					switch {
					case errors.Is(err, ErrCacheFull):
						continue
					case err != nil:
						loadErrs.Add(1)
						continue
					}
					check(h.Bytes(), k)
					held = append(held, h)
				case op < 60: // write a private block: new, dirty
					k := BlockKey{Stream: 100 + uint64(w), Num: uint64(i)}
					if len(dirty) >= 2 {
						continue
					}
					gets.Add(1)
					h, err := c.Acquire(k)
					if errors.Is(err, ErrCacheFull) {
						continue
					}
					if err != nil {
						t.Error(err)
						continue
					}
					sign(h.Bytes(), k)
					if _, ok := c.MarkDirty(k); !ok {
						t.Errorf("MarkDirty of a held block %v", k)
					}
					dirty[k] = true
					held = append(held, h)
				case op < 70: // the private block reaches the local store
					for k := range dirty {
						if !c.MarkClean(k) {
							t.Errorf("dirty block %v not resident", k)
						}
						delete(dirty, k)
						break
					}
				case op < 85: // release a reference
					if len(held) > 0 {
						j := rng.IntN(len(held))
						check(held[j].Bytes(), held[j].Key())
						held[j].Release()
						held = append(held[:j], held[j+1:]...)
					}
				case op < 92: // own a held block
					if len(held) > 0 {
						h := held[rng.IntN(len(held))]
						o, err := c.Own(h.Key(), time.Duration(1+rng.IntN(5))*time.Millisecond)
						if err != nil {
							t.Errorf("Own of a held block: %v", err)
						}
						owned = append(owned, o)
					}
				case op < 97: // renew (or drop) an ownership
					if len(owned) > 0 {
						j := rng.IntN(len(owned))
						// Renewed, the block is the owner's for 2 ms of the ticker's clock,
						// which is not long enough here to read it safely: only handles are.
						if !owned[j].Renew(2 * time.Millisecond) {
							owned = append(owned[:j], owned[j+1:]...)
						}
					}
				default:
					if len(owned) > 0 {
						j := rng.IntN(len(owned))
						owned[j].Disown()
						owned = append(owned[:j], owned[j+1:]...)
					}
				}
				for len(held) > 3 {
					check(held[0].Bytes(), held[0].Key())
					held[0].Release()
					held = held[1:]
				}
			}
			for _, h := range held {
				check(h.Bytes(), h.Key())
				h.Release()
			}
			for k := range dirty {
				dirtyLeft[w] = append(dirtyLeft[w], k)
			}
		})
	}
	wg.Wait()
	close(stop)
	tickers.Wait()
	// Let every ownership time out.
	for {
		if _, more := c.Tick(clk.Advance(time.Second)); !more && c.Stats().OwnedBlocks == 0 {
			break
		}
	}
	if n := badEvictions.Load(); n != 0 {
		t.Errorf("%d evictions of referenced, owned, dirty or loading blocks", n)
	}
	checkCache(t, c)
	st := c.Stats()
	var wantDirty int64
	for w := range workers {
		for _, k := range dirtyLeft[w] {
			wantDirty++
			h, err := c.Get(k, nil)
			if err != nil || !signed(h.Bytes(), k) {
				t.Errorf("dirty block %v lost: %v", k, err)
				continue
			}
			h.Release()
		}
	}
	if st.DirtyBytes != wantDirty*BlockBytes {
		t.Errorf("dirty bytes %d, want %d blocks", st.DirtyBytes, wantDirty)
	}
	if st.ReferencedBytes != 0 || st.LoadingBytes != 0 || st.OwnedBlocks != 0 {
		t.Errorf("at rest: %+v", st)
	}
	if st.Hits+st.Misses+st.SharedLoads != gets.Load() {
		t.Errorf("hits %d + misses %d + shared %d != %d gets", st.Hits, st.Misses, st.SharedLoads, gets.Load())
	}
	// Every miss made a block unless refused or failed; blocks leave only by eviction.
	if made := st.Misses - st.Full - st.LoadErrors - st.Evictions; int64(made)*BlockBytes != st.UsedBytes {
		t.Errorf("misses %d − full %d − load errors %d − evictions %d = %d blocks, used %d bytes",
			st.Misses, st.Full, st.LoadErrors, st.Evictions, made, st.UsedBytes)
	}
	if st.Evictions == 0 || st.OwnerTimeouts == 0 || st.SharedLoads+st.Hits == 0 || loadErrs.Load() == 0 {
		t.Errorf("the stress did not reach every path: %+v", st)
	}
	t.Logf("%+v", st)
}

func benchCache(b *testing.B, shards int) {
	c, err := NewCache(CacheConfig{CapacityBytes: 4096 * BlockBytes, Shards: shards})
	if err != nil {
		b.Fatal(err)
	}
	const keys = 1024
	for n := range uint64(keys) {
		loadClean(b, c, dkey(n))
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		x := seed.Add(1) * 0x9e3779b97f4a7c15
		for pb.Next() {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			h, err := c.Get(dkey(x%keys), nil)
			if err != nil {
				b.Error(err)
				return
			}
			h.Release()
		}
	})
}

// BenchmarkCacheAcquireRelease is a hit's acquire and release, from parallel goroutines, with
// the default eight shards and with one.
func BenchmarkCacheAcquireRelease(b *testing.B) {
	b.Run("shards=8", func(b *testing.B) { benchCache(b, 8) })
	b.Run("shards=1", func(b *testing.B) { benchCache(b, 1) })
}

// BenchmarkCacheOwnedRenew is the appender's path with an owned block: a renewal, no lock.
func BenchmarkCacheOwnedRenew(b *testing.B) {
	c, err := NewCache(CacheConfig{CapacityBytes: 64 * BlockBytes})
	if err != nil {
		b.Fatal(err)
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		k := BlockKey{Stream: seed.Add(1), Num: 1}
		h, err := c.Acquire(k)
		if err != nil {
			b.Error(err)
			return
		}
		o, err := c.Own(k, time.Hour)
		h.Release()
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if !o.Renew(time.Hour) {
				b.Error("ownership ended")
				return
			}
		}
	})
}
