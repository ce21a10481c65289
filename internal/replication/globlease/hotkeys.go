package globlease

// Online hot-key detection for affiliated (hot-key) replicas.
//
// The thesis (liu thesis 4.1.4, "Affiliated Nodes", lines 1883-2010 of
// liu-thesis-globlease-meteorshower.txt) replicates "a configurable subset of the keys served
// in the host standard node" at affiliated nodes, so that "only highly requested data items"
// are copied and the data migration overhead stays negligible. HotKeys is how a host node
// decides that subset from its own read stream:
//
//   - Each tracked key carries an exponentially weighted access count: on every touch the
//     count is multiplied by 2^(-dt/HalfLife) and then, for an access, incremented by one.
//     rate = count * ln2 / HalfLife, so a steady stream of r accesses per second converges to
//     r (the count's fixed point is r * HalfLife / ln2) and a key that stops being read halves
//     its rate every HalfLife.
//   - The table is bounded (Capacity entries, space-saving style): when a new key arrives at a
//     full table, the non-hot entry with the lowest estimated count is evicted.
//   - Promotion and demotion use two thresholds (HotRate, CoolRate < HotRate), so a key whose
//     rate sits between them keeps whatever state it has: an affiliated replica, which costs a
//     secondary lease and a copy, is neither created nor dropped by noise around one number.

import (
	"bytes"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

const (
	// DefaultHotKeyCapacity is the default number of keys HotKeys tracks.
	DefaultHotKeyCapacity = 1024
	// DefaultHotKeyHalfLife is the default half-life of the access rate: short enough that a
	// spike is seen within seconds (the thesis adds affiliated nodes "in seconds"), long
	// enough that one burst of a few requests does not look like a sustained rate.
	DefaultHotKeyHalfLife = 2 * time.Second
	// DefaultMaxHot is the default bound on the number of hot keys at once.
	DefaultMaxHot = 16
)

// HotKeyConfig parameterises HotKeys. Zero values of Capacity, HalfLife, CoolRate and MaxHot
// mean their defaults (EnsureDefaults); HotRate has no default because it depends on what a
// node can serve.
type HotKeyConfig struct {
	// Capacity is the number of keys tracked (a space-saving style bounded table).
	// The default value is 1024. It must exceed MaxHot, so that a full table always has a
	// non-hot entry to evict.
	Capacity int
	// HalfLife is the half-life of the exponentially weighted access rate. Default 2s.
	HalfLife time.Duration
	// HotRate is the rate, in reads per second, at or above which a key becomes hot.
	// It must be > 0.
	HotRate float64
	// CoolRate is the rate below which a hot key becomes cold again (hysteresis). 0 means
	// HotRate/2. It must be below HotRate.
	CoolRate float64
	// MaxHot bounds the number of hot keys at once (highest rates win). Default 16.
	MaxHot int
}

// EnsureDefaults fills every zero field of c that has a default. CoolRate's default depends
// on HotRate, so it is filled only when HotRate is positive.
func (c *HotKeyConfig) EnsureDefaults() {
	if c.Capacity == 0 {
		c.Capacity = DefaultHotKeyCapacity
	}
	if c.HalfLife == 0 {
		c.HalfLife = DefaultHotKeyHalfLife
	}
	if c.CoolRate == 0 && c.HotRate > 0 {
		c.CoolRate = c.HotRate / 2
	}
	if c.MaxHot == 0 {
		c.MaxHot = DefaultMaxHot
	}
}

// Validate returns an error naming the first invalid field of c. It judges the values that
// EnsureDefaults would produce, so it may be called before or after EnsureDefaults.
func (c HotKeyConfig) Validate() error {
	c.EnsureDefaults()
	switch {
	case c.Capacity < 0:
		return fmt.Errorf("globlease: invalid HotKeyConfig.Capacity %d: must not be negative", c.Capacity)
	case c.HalfLife < 0:
		return fmt.Errorf("globlease: invalid HotKeyConfig.HalfLife %s: must not be negative", c.HalfLife)
	case !(c.HotRate > 0) || math.IsInf(c.HotRate, 0):
		return fmt.Errorf("globlease: invalid HotKeyConfig.HotRate %v: must be positive and finite", c.HotRate)
	case !(c.CoolRate >= 0) || c.CoolRate >= c.HotRate:
		return fmt.Errorf("globlease: invalid HotKeyConfig.CoolRate %v: must be in [0, HotRate %v)", c.CoolRate, c.HotRate)
	case c.MaxHot < 0:
		return fmt.Errorf("globlease: invalid HotKeyConfig.MaxHot %d: must not be negative", c.MaxHot)
	case c.MaxHot >= c.Capacity:
		return fmt.Errorf("globlease: invalid HotKeyConfig.MaxHot %d: must be below Capacity %d (hot keys are never evicted)",
			c.MaxHot, c.Capacity)
	}
	return nil
}

// hotEntry is one tracked key.
type hotEntry struct {
	key string
	// seen is the decayed count of the accesses observed since the key was tracked, as of
	// last. Rate is computed from it alone, so a key is never promoted on another key's
	// history.
	seen float64
	// inherited is the decayed count inherited from the entry this one evicted (space-saving),
	// as of last. It only orders evictions: see evict.
	inherited float64
	last      time.Time
	// score orders evictions: log2(seen+inherited) + (last-epoch)/HalfLife. Decay multiplies
	// every count by the same factor, so the order of scores never changes as time passes;
	// only a touch changes an entry's score, and only upwards.
	score float64
	hot   bool
	// inHeap is true while exactly one item for this entry is in the eviction heap.
	inHeap bool
}

// heapItem is an entry with the score it had when pushed; an item whose score is below its
// entry's current score is stale (the entry was touched since).
type heapItem struct {
	score float64
	e     *hotEntry
}

// evictHeap is a min-heap on (score, key).
type evictHeap []heapItem

func (h evictHeap) Len() int { return len(h) }
func (h evictHeap) Less(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score < h[j].score
	}
	return h[i].e.key < h[j].e.key
}
func (h evictHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *evictHeap) Push(x any)   { *h = append(*h, x.(heapItem)) }
func (h *evictHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = heapItem{}
	*h = old[:len(old)-1]
	return it
}

// HotKeys tracks per-key read rates in a bounded table and maintains a hysteretic set of hot
// keys. It is not safe for concurrent use; time comes in as arguments.
type HotKeys struct {
	cfg HotKeyConfig
	// entries holds at most cfg.Capacity keys.
	entries map[string]*hotEntry
	// heap has at most one item per entry (see hotEntry.inHeap), so at most cfg.Capacity.
	heap evictHeap
	// hot holds at most cfg.MaxHot entries.
	hot      []*hotEntry
	epoch    time.Time
	hasEpoch bool
}

// NewHotKeys returns an empty tracker. It applies cfg.EnsureDefaults and panics if the
// result does not Validate: a bad configuration is a programming error that the caller's
// configuration loading should have reported, and failing here beats silently tracking with
// thresholds nobody asked for.
func NewHotKeys(cfg HotKeyConfig) *HotKeys {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return &HotKeys{
		cfg:     cfg,
		entries: make(map[string]*hotEntry, cfg.Capacity),
		heap:    make(evictHeap, 0, cfg.Capacity),
		hot:     make([]*hotEntry, 0, cfg.MaxHot),
	}
}

// decay returns the factor 2^(-dt/HalfLife) that ages a count from last to now. Time that
// runs backwards (now before last) ages nothing rather than inflating counts.
func (h *HotKeys) decay(last, now time.Time) float64 {
	dt := now.Sub(last)
	if dt <= 0 {
		return 1
	}
	return math.Exp2(-float64(dt) / float64(h.cfg.HalfLife))
}

// toRate converts a decayed count into accesses per second.
func (h *HotKeys) toRate(count float64) float64 {
	return count * math.Ln2 / h.cfg.HalfLife.Seconds()
}

// touch ages e to now and counts one access.
func (h *HotKeys) touch(e *hotEntry, now time.Time) {
	if now.After(e.last) {
		f := h.decay(e.last, now)
		e.seen *= f
		e.inherited *= f
		e.last = now
	}
	e.seen++
	e.score = math.Log2(e.seen+e.inherited) + float64(e.last.Sub(h.epoch))/float64(h.cfg.HalfLife)
}

// Observe records one access to key at now. A tracked key costs O(1). An untracked key is
// copied into the table; if the table is full it first evicts the non-hot entry with the
// lowest estimated count (amortized O(log Capacity): the heap is lazy, see evict).
//
// Eviction follows space-saving: the newcomer inherits the victim's decayed count as an
// upper-bound estimate, kept apart from the accesses it was really seen with. The inherited
// part ranks the newcomer above the entry it replaced. Without it, once more keys are warm
// than the table holds, every newcomer would be the lowest entry and be evicted before its
// second access, so a key that suddenly turns hot would never get in. Rate and hot
// decisions use only the observed part, so inheritance never makes a key hot.
//
// As in space-saving, eviction moves counts around but loses none, so the estimates add up
// to the decayed access mass of the whole stream and the lowest one is at most about a
// 1/(Capacity-MaxHot) share of it: a key with a clearly larger share of all reads stays
// tracked. Size Capacity well above (total read rate / CoolRate), or hot keys can be
// evicted and restart from zero.
func (h *HotKeys) Observe(now time.Time, key []byte) {
	if !h.hasEpoch {
		h.epoch, h.hasEpoch = now, true
	}
	if e, ok := h.entries[string(key)]; ok {
		h.touch(e, now)
		return
	}
	var inherited float64
	if len(h.entries) >= h.cfg.Capacity {
		victim := h.evict()
		inherited = (victim.seen + victim.inherited) * h.decay(victim.last, now)
	}
	e := &hotEntry{key: string(key), inherited: inherited, last: now}
	h.touch(e, now)
	h.entries[e.key] = e
	heap.Push(&h.heap, heapItem{score: e.score, e: e})
	e.inHeap = true
}

// evict removes and returns the non-hot entry with the lowest score (ties: lowest key).
//
// The heap is lazy: Observe does not fix an entry's position when it touches it, so an item
// may carry a score below its entry's current one. Scores only grow, so the heap minimum is
// still a lower bound of every current score; popping until the minimum is current gives the
// exact lowest entry. A stale item is re-pushed with its current score, and an item of a hot
// entry is dropped (Update re-pushes the entry when it turns cold). Each entry is popped at
// most twice per call (once stale, once current or hot), so the loop is bounded by twice the
// heap size; a non-hot entry always exists because Validate requires MaxHot < Capacity.
func (h *HotKeys) evict() *hotEntry {
	for bound := 2*len(h.heap) + 1; bound > 0 && len(h.heap) > 0; bound-- {
		it := heap.Pop(&h.heap).(heapItem)
		e := it.e
		switch {
		case e.hot:
			e.inHeap = false
		case it.score < e.score:
			heap.Push(&h.heap, heapItem{score: e.score, e: e})
		default:
			e.inHeap = false
			delete(h.entries, e.key)
			return e
		}
	}
	panic("globlease: HotKeys eviction found no cold entry (MaxHot must be below Capacity)")
}

// Rate returns key's current decayed access rate in accesses per second, counting only the
// accesses observed since it was last tracked; 0 if the key is not tracked.
func (h *HotKeys) Rate(now time.Time, key []byte) float64 {
	e, ok := h.entries[string(key)]
	if !ok {
		return 0
	}
	return h.rateOf(e, now)
}

func (h *HotKeys) rateOf(e *hotEntry, now time.Time) float64 {
	return h.toRate(e.seen * h.decay(e.last, now))
}

// rated is an entry with its rate at the time of an Update.
type rated struct {
	e    *hotEntry
	rate float64
}

// byRateDescKey orders by rate, highest first, then by key bytes ascending: the
// deterministic order of Update's results.
func byRateDescKey(a, b rated) int {
	if a.rate != b.rate {
		if a.rate > b.rate {
			return -1
		}
		return 1
	}
	return strings.Compare(a.e.key, b.e.key)
}

// Update re-evaluates every tracked key at now and returns the keys that turned hot and the
// keys that turned cold, each ordered by rate (highest first) then key bytes. The returned
// slices are fresh copies.
//
//   - A hot key whose rate fell below CoolRate turns cold.
//   - Cold keys at or above HotRate turn hot, highest rate first, while fewer than MaxHot
//     keys are hot.
//   - When the hot set is full, a remaining candidate displaces the hot key with the lowest
//     rate, but only if that key has fallen below HotRate (into the hysteresis band): the
//     candidate is then strictly hotter, so the highest rates win, while two keys that are
//     both at or above HotRate never take turns occupying one slot. A key held steady between
//     CoolRate and HotRate never changes state on its own.
//
// Update costs O(Capacity log Capacity) and is meant to run at a coarse interval (a fraction
// of HalfLife), not per request.
func (h *HotKeys) Update(now time.Time) (becameHot, becameCold [][]byte) {
	var cold, hot []rated
	// Bounded by Capacity entries.
	for _, e := range h.entries {
		r := rated{e: e, rate: h.rateOf(e, now)}
		if e.hot {
			hot = append(hot, r)
		} else if r.rate >= h.cfg.HotRate {
			cold = append(cold, r)
		}
	}
	slices.SortFunc(cold, byRateDescKey)
	slices.SortFunc(hot, byRateDescKey)

	var toHot, toCold []rated
	var stay []rated
	// Bounded by MaxHot hot entries.
	for _, r := range hot {
		if r.rate < h.cfg.CoolRate {
			toCold = append(toCold, r)
		} else {
			stay = append(stay, r)
		}
	}
	// Victims are taken from the end of stay (sorted by rate descending): lowest rate first.
	displaced := 0
	// Bounded by the number of candidates (at most Capacity).
	for _, c := range cold {
		if len(stay)-displaced+len(toHot) < h.cfg.MaxHot {
			toHot = append(toHot, c)
			continue
		}
		v := len(stay) - 1 - displaced
		if v < 0 || stay[v].rate >= h.cfg.HotRate {
			break // no victim, and later candidates would find none either
		}
		toCold = append(toCold, stay[v])
		displaced++
		toHot = append(toHot, c)
	}

	for _, r := range toCold {
		r.e.hot = false
		if !r.e.inHeap {
			heap.Push(&h.heap, heapItem{score: r.e.score, e: r.e})
			r.e.inHeap = true
		}
	}
	for _, r := range toHot {
		r.e.hot = true
	}
	h.hot = h.hot[:0]
	// Bounded by Capacity entries; the result holds at most MaxHot.
	for _, e := range h.entries {
		if e.hot {
			h.hot = append(h.hot, e)
		}
	}
	slices.SortFunc(h.hot, func(a, b *hotEntry) int { return strings.Compare(a.key, b.key) })

	slices.SortFunc(toHot, byRateDescKey)
	slices.SortFunc(toCold, byRateDescKey)
	return keysOf(toHot), keysOf(toCold)
}

// keysOf copies the keys of rs, nil for none.
func keysOf(rs []rated) [][]byte {
	if len(rs) == 0 {
		return nil
	}
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = []byte(r.e.key)
	}
	return out
}

// IsHot reports whether key is in the hot set (as of the last Update).
func (h *HotKeys) IsHot(key []byte) bool {
	e, ok := h.entries[string(key)]
	return ok && e.hot
}

// Hot returns copies of the hot keys sorted by key bytes.
func (h *HotKeys) Hot() [][]byte {
	if len(h.hot) == 0 {
		return nil
	}
	out := make([][]byte, len(h.hot))
	for i, e := range h.hot {
		out[i] = []byte(e.key)
	}
	// h.hot is kept sorted by Update; sorting the copies again is cheap and makes the
	// contract independent of that invariant.
	slices.SortFunc(out, bytes.Compare)
	return out
}
