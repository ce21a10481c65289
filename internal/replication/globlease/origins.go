package globlease

// Write-origin tracking for automatic master migration.
//
// In GlobLease every key has one master, and a write from a client in another region pays at
// least one cross-region round trip to reach it. The thesis's write-dominant experiment
// (liu thesis 4.1.5, "Evaluation of GlobLease", around line 2085 of
// liu-thesis-globlease-meteorshower.txt) enables master migration and assigns "the master of
// the key ... to the corresponding region", relying on "the fact that users do not frequently
// change their locations"; but there "the master migration is not automated, it is achieved by
// calling the master migration API from a script by analyzing the incoming workload
// (offline)". Origins automates that analysis. A move is costly (the old master's leases must
// be settled and the metadata changed everywhere) and a wrong move makes every write of the
// previous region remote, so a key is proposed only when the evidence is strong and lasting:
//
//   - MinWrites: enough recent writes that the shares mean something;
//   - Share: one region writes the large majority (> 1/2, so at most one region qualifies);
//   - Hold: that region has kept the share continuously for a while, so a burst does not move
//     a master, and two regions that take turns writing never move it back and forth;
//   - Cooldown: after a move the key is left alone, whatever happens, for a long time.
//
// Counts are exponentially weighted (HalfLife) so that a change in where users are is picked
// up after a few half-lives instead of being outvoted forever by old history.

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

const (
	// DefaultOriginCapacity is the default number of keys Origins tracks.
	DefaultOriginCapacity = 4096
	// DefaultOriginHalfLife is the default half-life of the per-region write counts.
	DefaultOriginHalfLife = 5 * time.Second
	// DefaultMinWrites is the default number of weighted writes a key needs before a move.
	DefaultMinWrites = 5.0
	// DefaultShare is the default fraction of a key's writes one region must hold.
	DefaultShare = 0.8
	// DefaultHold is the default time a region must hold the share before a move.
	DefaultHold = 3 * time.Second
	// DefaultCooldown is the default time after a move during which a key is not moved again.
	DefaultCooldown = 30 * time.Second

	// maxRegionsPerKey bounds the regions counted per key. Deployments have a handful of
	// regions; if more write one key, the smallest count is dropped from the per-region
	// table but stays in the key's total, which can only lower the shares of the others (a
	// move becomes less likely, never more).
	maxRegionsPerKey = 8
	// evictScan is how many of the least recently written entries eviction looks at for one
	// that is not in cooldown, so that forgetting a key rarely shortens its cooldown while
	// eviction stays O(1).
	evictScan = 16
)

// MigrationPolicy parameterises Origins. Zero values mean the defaults (EnsureDefaults).
type MigrationPolicy struct {
	// Capacity is the number of keys tracked; when full, the least recently written key is
	// forgotten. Default 4096.
	Capacity int
	// HalfLife is the half-life of the per-region weighted write counts. Default 5s.
	HalfLife time.Duration
	// MinWrites is the weighted writes a key needs before any move is considered. Default 5.
	MinWrites float64
	// Share is the fraction of a key's weighted writes that must come from one other region.
	// Default 0.8; it must be in (0.5, 1] so that at most one region can hold it.
	Share float64
	// Hold is how long that region must have held the share continuously. Default 3s.
	Hold time.Duration
	// Cooldown is how long after a move the key is not moved again. Default 30s.
	Cooldown time.Duration
}

// EnsureDefaults fills every zero field of p with its default value.
func (p *MigrationPolicy) EnsureDefaults() {
	if p.Capacity == 0 {
		p.Capacity = DefaultOriginCapacity
	}
	if p.HalfLife == 0 {
		p.HalfLife = DefaultOriginHalfLife
	}
	if p.MinWrites == 0 {
		p.MinWrites = DefaultMinWrites
	}
	if p.Share == 0 {
		p.Share = DefaultShare
	}
	if p.Hold == 0 {
		p.Hold = DefaultHold
	}
	if p.Cooldown == 0 {
		p.Cooldown = DefaultCooldown
	}
}

// Validate returns an error naming the first invalid field of p. It judges the values that
// EnsureDefaults would produce, so it may be called before or after EnsureDefaults.
func (p MigrationPolicy) Validate() error {
	p.EnsureDefaults()
	switch {
	case p.Capacity < 0:
		return fmt.Errorf("globlease: invalid MigrationPolicy.Capacity %d: must not be negative", p.Capacity)
	case p.HalfLife < 0:
		return fmt.Errorf("globlease: invalid MigrationPolicy.HalfLife %s: must not be negative", p.HalfLife)
	case !(p.MinWrites > 0) || math.IsInf(p.MinWrites, 0):
		return fmt.Errorf("globlease: invalid MigrationPolicy.MinWrites %v: must be positive and finite", p.MinWrites)
	case !(p.Share > 0.5 && p.Share <= 1):
		return fmt.Errorf("globlease: invalid MigrationPolicy.Share %v: must be in (0.5, 1]", p.Share)
	case p.Hold < 0:
		return fmt.Errorf("globlease: invalid MigrationPolicy.Hold %s: must not be negative", p.Hold)
	case p.Cooldown < 0:
		return fmt.Errorf("globlease: invalid MigrationPolicy.Cooldown %s: must not be negative", p.Cooldown)
	}
	return nil
}

// regionCount is one region's decayed write count for a key.
type regionCount struct {
	region string
	w      float64
}

// originEntry is one tracked key.
type originEntry struct {
	key string
	// regions holds at most maxRegionsPerKey counts, as of last.
	regions []regionCount
	// total is the decayed count of every write of the key, as of last, including writes of
	// unknown origin and of regions dropped from regions.
	total float64
	last  time.Time
	// dom is the region that has held at least Share of the writes since domSince; "" when
	// no region does. Decay scales every count alike, so shares change only at writes and
	// checking them at every write tracks dominance exactly.
	dom      string
	domSince time.Time
	// moved and movedAt: the key's last move (Moved), for the cooldown.
	moved   bool
	movedAt time.Time
	// prev and next link the LRU list (prev is more recent).
	prev, next *originEntry
}

// Move proposes moving the master of Key to region To, whose share of the key's weighted
// writes is Share.
type Move struct {
	Key   []byte
	To    string
	Share float64
}

// Origins tracks, per key, which regions its writes come from and proposes master moves
// (Candidates). It is not safe for concurrent use; time comes in as arguments.
type Origins struct {
	p MigrationPolicy
	// entries holds at most p.Capacity keys.
	entries map[string]*originEntry
	// head is the most recently written (or moved) entry, tail the least.
	head, tail *originEntry
}

// NewOrigins returns an empty tracker. It applies p.EnsureDefaults and panics if the result
// does not Validate: a bad policy is a programming error that configuration loading should
// have reported.
func NewOrigins(p MigrationPolicy) *Origins {
	p.EnsureDefaults()
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return &Origins{p: p, entries: make(map[string]*originEntry, p.Capacity)}
}

// decay returns the factor 2^(-dt/HalfLife) that ages a count from last to now; time that
// runs backwards ages nothing.
func (o *Origins) decay(last, now time.Time) float64 {
	dt := now.Sub(last)
	if dt <= 0 {
		return 1
	}
	return math.Exp2(-float64(dt) / float64(o.p.HalfLife))
}

// unlink removes e from the LRU list.
func (o *Origins) unlink(e *originEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		o.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		o.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// pushFront makes e the most recent entry of the LRU list.
func (o *Origins) pushFront(e *originEntry) {
	e.next = o.head
	if o.head != nil {
		o.head.prev = e
	}
	o.head = e
	if o.tail == nil {
		o.tail = e
	}
}

// inCooldown reports whether e was moved less than Cooldown before now.
func (o *Origins) inCooldown(e *originEntry, now time.Time) bool {
	return e.moved && now.Sub(e.movedAt) < o.p.Cooldown
}

// evictOne forgets the least recently written entry, preferring, among the evictScan least
// recent, one that is not in cooldown: a forgotten key would need MinWrites and a full Hold
// to be proposed again, but could then be moved before its cooldown is over. If all of them
// are in cooldown the least recent goes anyway, because the bound on memory comes first.
func (o *Origins) evictOne(now time.Time) {
	victim := o.tail
	e := o.tail
	// Bounded by evictScan steps.
	for i := 0; i < evictScan && e != nil; i++ {
		if !o.inCooldown(e, now) {
			victim = e
			break
		}
		e = e.prev
	}
	if victim == nil {
		return
	}
	o.unlink(victim)
	delete(o.entries, victim.key)
}

// entry returns key's entry, creating it (and evicting if full), and makes it the most
// recent one.
func (o *Origins) entry(now time.Time, key []byte) *originEntry {
	if e, ok := o.entries[string(key)]; ok {
		o.unlink(e)
		o.pushFront(e)
		return e
	}
	if len(o.entries) >= o.p.Capacity {
		o.evictOne(now)
	}
	e := &originEntry{key: string(key), last: now}
	o.entries[e.key] = e
	o.pushFront(e)
	return e
}

// Observe records one write of key from a client in region. An empty region (origin
// unknown) counts toward the key's total but never dominates, so unknown traffic can only
// make a move less likely. O(1): at most maxRegionsPerKey counts are touched.
func (o *Origins) Observe(now time.Time, key []byte, region string) {
	e := o.entry(now, key)
	if now.After(e.last) {
		f := o.decay(e.last, now)
		e.total *= f
		// Bounded by maxRegionsPerKey.
		for i := range e.regions {
			e.regions[i].w *= f
		}
		e.last = now
	}
	e.total++
	if region != "" {
		o.countRegion(e, region)
	}

	// Re-evaluate dominance: the only moment a share can change.
	best := -1
	// Bounded by maxRegionsPerKey.
	for i, rc := range e.regions {
		if best < 0 || rc.w > e.regions[best].w || (rc.w == e.regions[best].w && rc.region < e.regions[best].region) {
			best = i
		}
	}
	if best >= 0 && e.regions[best].w/e.total >= o.p.Share {
		if e.dom != e.regions[best].region {
			e.dom, e.domSince = e.regions[best].region, now
		}
		return
	}
	e.dom, e.domSince = "", time.Time{}
}

// countRegion adds one write from region to e's per-region table, replacing the smallest
// count (ties: the greatest region name) when the table is full; the replaced count stays
// in e.total.
func (o *Origins) countRegion(e *originEntry, region string) {
	smallest := -1
	// Bounded by maxRegionsPerKey.
	for i := range e.regions {
		if e.regions[i].region == region {
			e.regions[i].w++
			return
		}
		if smallest < 0 || e.regions[i].w < e.regions[smallest].w ||
			(e.regions[i].w == e.regions[smallest].w && e.regions[i].region > e.regions[smallest].region) {
			smallest = i
		}
	}
	if len(e.regions) < maxRegionsPerKey {
		e.regions = append(e.regions, regionCount{region: region, w: 1})
		return
	}
	e.regions[smallest] = regionCount{region: region, w: 1}
}

// weightOf returns e's count for region as of e.last (0 if not counted).
func weightOf(e *originEntry, region string) float64 {
	// Bounded by maxRegionsPerKey.
	for _, rc := range e.regions {
		if rc.region == region {
			return rc.w
		}
	}
	return 0
}

// Candidates returns the keys whose master should move at now: the dominant write region
// holds at least Share of the key's weighted writes, the key has at least MinWrites weighted
// writes, the dominance has lasted at least Hold, the key is not in cooldown, and the
// dominant region differs from masterRegion(key). At most max moves are returned (none if
// max <= 0), highest share first, then by key bytes. Keys in the result are fresh copies;
// masterRegion receives a fresh copy too and is called only for keys that pass every other
// test. Candidates does not change the tracker: the caller reports the moves it makes with
// Moved.
func (o *Origins) Candidates(now time.Time, masterRegion func(key []byte) string, max int) []Move {
	if max <= 0 {
		return nil
	}
	var out []Move
	// Bounded by Capacity entries.
	for _, e := range o.entries {
		if e.dom == "" || o.inCooldown(e, now) || now.Sub(e.domSince) < o.p.Hold {
			continue
		}
		if e.total*o.decay(e.last, now) < o.p.MinWrites {
			continue
		}
		share := weightOf(e, e.dom) / e.total
		if share < o.p.Share {
			continue
		}
		key := []byte(e.key)
		if masterRegion(key) == e.dom {
			continue
		}
		out = append(out, Move{Key: key, To: e.dom, Share: share})
	}
	slices.SortFunc(out, func(a, b Move) int {
		if a.Share != b.Share {
			if a.Share > b.Share {
				return -1
			}
			return 1
		}
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.To, b.To)
	})
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// Moved records that key's master was moved at now: the key is not proposed again for
// Cooldown, and its dominance is reset, so that even after the cooldown a region must hold
// the share for a full Hold measured from a write after the move. The write counts are kept:
// they are still true evidence of where the key is written. An untracked key is tracked from
// here (a move made for another reason, say by an operator, still earns its cooldown); a
// moved key also counts as recently used, so eviction does not forget it soon.
func (o *Origins) Moved(now time.Time, key []byte) {
	e := o.entry(now, key)
	e.moved, e.movedAt = true, now
	e.dom, e.domSince = "", time.Time{}
}
