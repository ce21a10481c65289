package check

import (
	"fmt"
	"math"
	"slices"

	"meridian/internal/hlc"
)

// notPlaced marks an op that is not part of the witness order (failed, an unread
// indeterminate write, a non-OK read, or a write whose version is unknown).
const notPlaced = math.MinInt32

// scOp is the per-op state of the witness construction.
type scOp struct {
	// slot is the op's place in the witness order. A write's slot is its rank in version
	// order; a read's slot is the rank of the write it is placed immediately after (-1: before
	// every write). Reads in one slot come after that slot's write and keep process order.
	slot int32
	// src is the op of the same process (possibly the op itself) whose own version fixed this
	// op's slot: a write, or a read whose slot came from the write it returned. It lets a
	// violation name the op that forced a read late, however long the chain of reads between.
	src int32
	// from is the write a read returned (-1: absent).
	from int32
	// learnedFrom is, for a write recorded without a version, the read its version was taken
	// from (-1: none).
	learnedFrom int32
	version     hlc.Version
	observed    bool // an OK read returned this write's value
}

// SequentiallyConsistent checks the history against the witness order of the MeteorShower
// proof (MeteorShower paper II-D, Theorem 1): writes ordered by version — the order in which
// last-writer-wins replicas apply them — and each read inserted immediately after the later of
// (1) its process's previous operation and (2) the write it returned. The history passes when
// that order is legal (every read returns the latest write to its key before it) and respects
// every process's order. Real-time order across processes is deliberately ignored: that is
// what separates sequential consistency from linearizability.
//
// Because the write order is fixed to the version order, this is slightly stronger than bare
// sequential consistency (which may pick any write order): it checks the property the store
// claims, that the version order is a witness. A failure therefore means either a genuine SC
// violation or that replicas apply writes in an order no client saw — both bugs in a
// last-writer-wins store.
//
// Inclusion (each exclusion only removes constraints, so it cannot invent a violation):
//   - OK writes; Indeterminate writes that some OK read returned (their version, when not
//     recorded, is learned from the first such read that carries one); other writes are out.
//     A write whose version stays unknown has no place in the order and is left out with its
//     readers (Validate already rejects OK writes without a version).
//   - OK reads only.
//   - An Indeterminate write constrains its process only backwards: it follows the process's
//     earlier ops, but the process's later ops are not ordered after it, because the client
//     abandoned it and it may have been applied long after (a delayed message), concurrently
//     with what the process did next.
//
// Reads are placed as early as the two rules allow. With the write order fixed, earliest is
// best for every later constraint (a read only needs to precede the next write to its key and
// its process's later writes), so a legality or process-order violation means that no legal
// order keeping the writes in version order respects the process orders. It returns the first violation in invocation order, with the
// few ops that show it; nil when the history passes. O(n log n): one sort of the writes and a
// binary search per read.
func SequentiallyConsistent(h History) *Violation {
	v := witnessOrder(h)
	if v == nil {
		return nil
	}
	if v.definitive {
		return v // not about order: a value nobody wrote, a version that changed, ...
	}
	// The witness fixes the order of writes across keys; a write whose outcome was
	// indeterminate may legitimately take effect later than its version suggests. Report a
	// violation only when no legal order exists at all (scGraph); then both explanations.
	g := scGraph(h)
	if g == nil {
		return nil
	}
	g.Reason += "; the witness order fails too: " + v.Reason
	return g
}

// witnessOrder builds and checks the witness order described on SequentiallyConsistent.
func witnessOrder(h History) *Violation {
	if len(h) == 0 {
		return nil
	}
	order := invocationOrder(h)
	st := make([]scOp, len(h))
	nWrites := 0
	for i := range h {
		if h[i].Kind == Write {
			nWrites++
		}
	}
	byValue := make(map[string]int32, nWrites)
	for i := range h {
		st[i] = scOp{slot: notPlaced, src: int32(i), from: -1, learnedFrom: -1, version: h[i].Version}
		if h[i].Kind == Write {
			byValue[h[i].Value] = int32(i)
		}
	}
	// Pass 1: which indeterminate writes were observed, and the versions of writes recorded
	// without one.
	for _, i := range order {
		r := &h[i]
		if r.Kind != Read || r.Outcome != OK || !r.Found {
			continue
		}
		w, ok := byValue[r.Value]
		if !ok || h[w].Key != r.Key {
			continue
		}
		st[w].observed = true
		if st[w].version.IsZero() && !r.Version.IsZero() {
			st[w].version = r.Version
			st[w].learnedFrom = i
		}
	}
	// The writes of the witness, in version order (ties, which only distinct keys may
	// legitimately have, broken by invocation).
	writes := make([]int32, 0, len(byValue))
	for i := range h {
		op := &h[i]
		if op.Kind != Write || st[i].version.IsZero() {
			continue
		}
		if op.Outcome == OK || (op.Outcome == Indeterminate && st[i].observed) {
			writes = append(writes, int32(i))
		}
	}
	slices.SortFunc(writes, func(a, b int32) int {
		if c := st[a].version.Compare(st[b].version); c != 0 {
			return c
		}
		return cmpInvocation(&h[a], &h[b])
	})
	// Per key, the ascending slots of its writes: legality asks for "the next write to this key
	// after slot t", a binary search.
	keySlots := make(map[string][]int32)
	for rank, w := range writes {
		st[w].slot = int32(rank)
		st[w].src = w
		keySlots[h[w].Key] = append(keySlots[h[w].Key], int32(rank))
	}
	// Two writes to one key with one version cannot be ordered by last-writer-wins: replicas
	// keep whichever arrived first. Recorded against the later-invoked one.
	var sameVersion map[int32]int32
	for lo := 0; lo < len(writes); {
		hi := lo + 1
		for hi < len(writes) && st[writes[hi]].version == st[writes[lo]].version {
			hi++
		}
		for a := lo; a < hi; a++ {
			for b := a + 1; b < hi; b++ {
				if h[writes[a]].Key == h[writes[b]].Key {
					if sameVersion == nil {
						sameVersion = make(map[int32]int32)
					}
					sameVersion[writes[b]] = writes[a]
				}
			}
		}
		lo = hi
	}

	// Pass 2, in invocation order: place reads and check each op.
	lastDone := newProcMap(h) // process -> its latest placed op that completed (OK)
	// The members of a group (Op.Group, a scan's reads) follow the op before the group, not
	// one another; the op after the group follows the member placed last.
	var groupFirst, groupBase procMap // process -> its current group's first member, and the op before it
	for i := range h {
		if h[i].Group != 0 {
			groupFirst, groupBase = newProcMap(h), newProcMap(h)
			break
		}
	}
	for _, i := range order {
		op := &h[i]
		if op.Outcome != OK && !(op.Kind == Write && op.Outcome == Indeterminate) {
			continue
		}
		prev := lastDone.get(op.Process)
		if op.Group != 0 {
			if f := groupFirst.get(op.Process); f < 0 || h[f].Group != op.Group {
				groupFirst.set(op.Process, i)
				groupBase.set(op.Process, prev)
			}
			prev = groupBase.get(op.Process)
		}
		hasPrev := prev >= 0
		prevSlot := int32(-1)
		if hasPrev {
			prevSlot = st[prev].slot
		}
		if op.Kind == Write {
			if st[i].slot == notPlaced {
				continue
			}
			if w, ok := sameVersion[i]; ok {
				return &Violation{
					Checker: CheckerSequential,
					Reason: fmt.Sprintf("two writes to %s carry the same version %v, so the version order cannot order them (replicas keep whichever arrives first)",
						op.Key, st[i].version),
					Ops:        []Op{h[w], *op},
					definitive: true,
				}
			}
			if hasPrev && st[prev].slot >= st[i].slot {
				return scProcessOrder(h, st, writes, prev, i)
			}
			if op.Outcome == OK {
				lastDone.set(op.Process, i)
			}
			continue
		}
		// An OK read.
		t := int32(-1)
		if op.Found {
			w, ok := byValue[op.Value]
			switch {
			case !ok:
				return &Violation{Checker: CheckerSequential, Reason: "read a value nobody wrote", Ops: []Op{*op}, definitive: true}
			case h[w].Outcome == Failed:
				return &Violation{Checker: CheckerSequential, Reason: "read the value of a write that failed (failed writes certainly did not take effect)", Ops: []Op{h[w], *op}, definitive: true}
			case h[w].Key != op.Key:
				return &Violation{Checker: CheckerSequential, Reason: fmt.Sprintf("read of %s returned a value written to %s", op.Key, h[w].Key), Ops: []Op{h[w], *op}, definitive: true}
			case !op.Version.IsZero() && !st[w].version.IsZero() && op.Version != st[w].version:
				v := &Violation{Checker: CheckerSequential, Ops: []Op{h[w], *op}, definitive: true}
				if lf := st[w].learnedFrom; lf >= 0 {
					v.Reason = fmt.Sprintf("read returned version %v of a write that an earlier read returned with version %v", op.Version, st[w].version)
					v.Ops = []Op{h[w], h[lf], *op}
				} else {
					v.Reason = fmt.Sprintf("read returned version %v but the write it returned has version %v", op.Version, st[w].version)
				}
				return v
			case st[w].slot == notPlaced:
				// The write's version is unknown (nothing recorded it), so it has no place in
				// the version order; leaving its reader out only removes constraints.
				continue
			}
			t = st[w].slot
			st[i].from = w
		}
		s := t
		st[i].src = i
		if prevSlot > t {
			s = prevSlot
			st[i].src = st[prev].src
		}
		st[i].slot = s
		if slots := keySlots[op.Key]; len(slots) > 0 {
			// The first write to this key after the one the read returned.
			j, _ := slices.BinarySearch(slots, t+1)
			if j < len(slots) && slots[j] <= s {
				return scStaleRead(h, st, writes, i, writes[slots[j]])
			}
		}
		if ld := lastDone.get(op.Process); op.Group != 0 && ld >= 0 && h[ld].Group == op.Group && st[ld].slot > s {
			continue // an earlier member of the group sits later: the op after the group follows it
		}
		lastDone.set(op.Process, i)
	}
	return nil
}

// scAnchor returns the ops that explain why op a sits at its slot: a itself when it is a
// write, or the write it returned followed by a when it is a read.
func scAnchor(h History, st []scOp, a int32) []int32 {
	if h[a].Kind == Read && st[a].from >= 0 {
		return []int32{st[a].from, a}
	}
	return []int32{a}
}

// anchorVerb describes how op a fixed its version: by writing it or by reading it.
func anchorVerb(h History, a int32) string {
	if h[a].Kind == Write {
		return "wrote"
	}
	return "observed"
}

// scStaleRead explains a read r that returned an older write than the witness order allows:
// newer is a write to the same key that the order places between the write r returned (or the
// start) and r.
func scStaleRead(h History, st []scOp, writes []int32, r, newer int32) *Violation {
	op := &h[r]
	var ids []int32
	var reason string
	if from := st[r].from; from >= 0 {
		ids = append(ids, from)
		reason = fmt.Sprintf("p%d read %s=%q (version %v), but write %q (version %v) to %s comes after that write in the version order and before the read",
			op.Process, op.Key, op.Value, st[from].version, h[newer].Value, st[newer].version, op.Key)
	} else {
		reason = fmt.Sprintf("p%d read %s as absent, but write %q (version %v) to %s comes before the read in the version order",
			op.Process, op.Key, h[newer].Value, st[newer].version, op.Key)
	}
	ids = append(ids, newer)
	if src := st[r].src; src != r {
		anchorWrite := writes[st[src].slot]
		reason += fmt.Sprintf(": the read must follow op#%d of the same process, which %s version %v (MeteorShower paper II-D, Lemma 1)",
			h[src].ID, anchorVerb(h, src), st[anchorWrite].version)
		ids = append(ids, scAnchor(h, st, src)...)
	}
	ids = append(ids, r)
	return &Violation{Checker: CheckerSequential, Reason: reason, Ops: opsOf(h, ids)}
}

// scProcessOrder explains a write w that the version order places at or before prev, an op
// its process completed before invoking w.
func scProcessOrder(h History, st []scOp, writes []int32, prev, w int32) *Violation {
	op := &h[w]
	src := st[prev].src
	anchorWrite := writes[st[src].slot]
	var reason string
	if anchorWrite == w {
		reason = fmt.Sprintf("p%d observed the value of its own write op#%d before invoking it (MeteorShower paper II-D, Lemma 2)", op.Process, op.ID)
	} else {
		reason = fmt.Sprintf("p%d invoked write %q (version %v) after op#%d, which %s the newer version %v: the version order reverses the process's order (coordinator clocks out of order?)",
			op.Process, op.Value, st[w].version, h[src].ID, anchorVerb(h, src), st[anchorWrite].version)
	}
	ids := scAnchor(h, st, src)
	if prev != src {
		ids = append(ids, prev)
	}
	ids = append(ids, w)
	return &Violation{Checker: CheckerSequential, Reason: reason, Ops: opsOf(h, ids)}
}

// opsOf copies the ops at ids, dropping repeats.
func opsOf(h History, ids []int32) []Op {
	out := make([]Op, 0, len(ids))
	for k, id := range ids {
		if slices.Contains(ids[:k], id) {
			continue
		}
		out = append(out, h[id])
	}
	return out
}

// procMap maps a process to an op index (-1: none). Processes are usually small dense
// integers (the simulator's client numbers), so a slice serves them; anything else falls back
// to a map.
type procMap struct {
	dense  []int32
	sparse map[int]int32
}

func newProcMap(h History) procMap {
	hi := -1
	for i := range h {
		p := h[i].Process
		if p < 0 || p >= 1<<16 {
			return procMap{sparse: make(map[int]int32)}
		}
		hi = max(hi, p)
	}
	d := make([]int32, hi+1)
	for i := range d {
		d[i] = -1
	}
	return procMap{dense: d}
}

func (m procMap) get(p int) int32 {
	if m.sparse == nil {
		return m.dense[p]
	}
	if i, ok := m.sparse[p]; ok {
		return i
	}
	return -1
}

func (m procMap) set(p int, i int32) {
	if m.sparse == nil {
		m.dense[p] = i
	} else {
		m.sparse[p] = i
	}
}
