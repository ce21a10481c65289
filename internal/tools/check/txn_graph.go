package check

import (
	"math"
	"slices"
	"time"
)

// The dependency graph of a transactional history and the search for its cycles (Elle
// section 5): strongly connected components first (Tarjan, iterative), then, inside each,
// a shortest cycle of the most basic class that exists — G0 before G1c before G-single
// before G2 — because the most basic anomaly is the most telling one (a G0 means writes
// were not even isolated from each other; a G2 could still be a subtle snapshot-isolation
// effect).

// txnEdgeKind is the type of a dependency. The values order them from the least to the most
// permissive: out-edges are kept sorted by kind, so a search that may use several kinds of
// edge between the same pair meets the most telling one first.
type txnEdgeKind uint8

const (
	edgeWW txnEdgeKind = 1 << iota // write-write: the source's version precedes the target's
	edgeWR                         // write-read: the target read the source's write
	edgeRW                         // read-write (anti-dependency): the target overwrote what the source read
	edgeRT                         // real time: the source returned before the target was invoked
)

// edgesSerial are the dependencies serializability must respect.
const edgesSerial = edgeWW | edgeWR | edgeRW

func (k txnEdgeKind) String() string {
	switch k {
	case edgeWW:
		return "ww"
	case edgeWR:
		return "wr"
	case edgeRW:
		return "rw"
	case edgeRT:
		return "rt"
	}
	return "?"
}

// edgeBasis says which observation an edge was inferred from, so that its explanation can
// quote it (txnChecker.describeEdge).
type edgeBasis uint8

const (
	basisListOrder       edgeBasis = iota + 1 // ww: v1 and v2 are consecutive in key's version order
	basisListRead                             // wr: the read's last element, v1, is the source's
	basisListMissed                           // rw: the read stopped just before v2, the target's
	basisListUnseen                           // rw: the read missed v2, the target's, which no read saw
	basisListUnseenOrder                      // ww: v1, the source's, is the last element read; v2, the target's, no read saw
	basisRegRead                              // wr: the target read v1, the source's write
	basisRegOverwrite                         // ww: the target read v1, the source's, then wrote v2
	basisRegMissed                            // rw: the source read v1 (or absent); the target overwrote it with v2
	basisRealtime                             // rt
)

type txnEdge struct {
	from, to int32 // transaction indices
	kind     txnEdgeKind
	basis    edgeBasis
	absent   bool // basisRegMissed: the source read the key absent
	key      string
	v1, v2   int64
	// The read the edge was inferred from (basisListRead, basisListMissed, basisListUnseen).
	readTxn, readMop int32
}

// txnGraph holds the dependencies between transactions (nodes are indices into
// TxnHistory.Txns; excluded transactions simply have no edges).
type txnGraph struct {
	edges []txnEdge
	out   [][]int32 // node → indices into edges
	dedup map[uint64]struct{}
}

func newTxnGraph(n int) *txnGraph {
	return &txnGraph{out: make([][]int32, n), dedup: make(map[uint64]struct{})}
}

// add records an edge unless it is a self-loop (a transaction does not depend on itself) or
// the pair already has an edge of its kind (the first explanation is as good as any).
func (g *txnGraph) add(e txnEdge, budget *txnBudget) {
	budget.ok()
	if e.from == e.to {
		return
	}
	// 30 bits per endpoint and 4 for the kind: a history of a billion transactions is not
	// checked this way anyway.
	k := uint64(e.from)<<34 | uint64(e.to)<<4 | uint64(e.kind)
	if _, dup := g.dedup[k]; dup {
		return
	}
	g.dedup[k] = struct{}{}
	g.out[e.from] = append(g.out[e.from], int32(len(g.edges)))
	g.edges = append(g.edges, e)
}

// finish sorts each node's out-edges by kind (see txnEdgeKind) and frees the dedup index.
func (g *txnGraph) finish() {
	g.dedup = nil
	for _, out := range g.out {
		slices.SortStableFunc(out, func(a, b int32) int { return int(g.edges[a].kind) - int(g.edges[b].kind) })
	}
}

// sccs finds the strongly connected components of the subgraph of edges whose kind is in
// mask (Tarjan's algorithm with an explicit stack: a history's dependency chains can be
// far deeper than a goroutine stack should be). comp maps each node to the index of its
// component in comps, or -1 when the component is a single node (no self-loops exist, so
// such a node is on no cycle); comps lists each nontrivial component's nodes in ascending
// order. ok is false when time ran out.
func (g *txnGraph) sccs(mask txnEdgeKind, budget *txnBudget) (comp []int32, comps [][]int32, ok bool) {
	n := len(g.out)
	index := make([]int32, n) // visit order + 1; 0: not yet visited
	low := make([]int32, n)
	onStack := make([]bool, n)
	comp = make([]int32, n)
	var stack []int32
	type frame struct {
		v    int32
		next int // position in out[v] of the next edge to follow
	}
	var calls []frame
	counter := int32(0)
	visit := func(v int32) {
		counter++
		index[v], low[v] = counter, counter
		stack = append(stack, v)
		onStack[v] = true
		calls = append(calls, frame{v: v})
	}
	for s := range n {
		if index[s] != 0 {
			continue
		}
		visit(int32(s))
		for len(calls) > 0 {
			if !budget.ok() {
				return nil, nil, false
			}
			f := &calls[len(calls)-1]
			v := f.v
			if f.next < len(g.out[v]) {
				e := &g.edges[g.out[v][f.next]]
				f.next++
				if e.kind&mask == 0 {
					continue
				}
				switch w := e.to; {
				case index[w] == 0:
					visit(w) // f is stale from here on
				case onStack[w]:
					low[v] = min(low[v], index[w])
				}
				continue
			}
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				p := calls[len(calls)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			// v is the root of a component: everything above it on the stack.
			k := len(stack) - 1
			for stack[k] != v {
				k--
			}
			members := stack[k:]
			stack = stack[:k]
			for _, m := range members {
				onStack[m] = false
				comp[m] = -1
			}
			if len(members) > 1 {
				c := slices.Clone(members)
				slices.Sort(c)
				for _, m := range c {
					comp[m] = int32(len(comps))
				}
				comps = append(comps, c)
			}
		}
	}
	return comp, comps, true
}

// txnCycle is a cycle found in the graph: edge indices in order, each edge's target the
// next one's source.
type txnCycle struct {
	edges []int32
	kind  string
	rw    int // anti-dependencies on it
}

// classify names a cycle by the kinds of its edges (Adya; Elle section 5.2).
func (g *txnGraph) classify(edges []int32) txnCycle {
	var wr, rw, rt int
	for _, ei := range edges {
		switch g.edges[ei].kind {
		case edgeWR:
			wr++
		case edgeRW:
			rw++
		case edgeRT:
			rt++
		}
	}
	cyc := txnCycle{edges: edges, rw: rw}
	switch {
	case rt > 0:
		cyc.kind = anomalyGRealtime
	case rw == 0 && wr == 0:
		cyc.kind = anomalyG0
	case rw == 0:
		cyc.kind = anomalyG1c
	case rw == 1:
		cyc.kind = anomalyGSingle
	default:
		cyc.kind = anomalyG2
	}
	// Start at the earliest transaction in the history, so the report reads in history order.
	first := 0
	for i, ei := range edges {
		if g.edges[ei].from < g.edges[edges[first]].from {
			first = i
		}
	}
	cyc.edges = append(slices.Clone(edges[first:]), edges[:first]...)
	return cyc
}

// txnCycleSearchWork bounds, per class, the edge visits spent looking for shorter or more
// basic cycles beyond the first one found in each component (which is always found: it
// takes one breadth-first search, linear in the component). A history with huge components
// then still gets a prompt answer, though perhaps not the most basic or shortest cycle.
const txnCycleSearchWork = 1 << 22

// cycles finds, for each strongly connected component of the serializability graph, one
// shortest cycle of the most basic class it holds, and with real time one cycle for each
// component that only real-time edges make cyclic.
func (c *txnChecker) cycles() []txnCycle {
	g := c.g
	unitComp, units, ok := g.sccs(edgesSerial, c.budget)
	if !ok {
		return nil // the budget records that time ran out: no verdict
	}
	s := newTxnSearch(g, c.budget)
	best := make([][]int32, len(units))
	// G0, then G1c: cycles of the subgraph of ww (then ww and wr) edges. Each of their
	// components lies inside one component of the full graph, which may hold several: the
	// shortest cycle among them is kept.
	foundBy := make([]txnEdgeKind, len(units)) // the mask of the class that found best[u]
	for _, mask := range []txnEdgeKind{edgeWW, edgeWW | edgeWR} {
		s.work = txnCycleSearchWork
		comp, comps, ok := g.sccs(mask, c.budget)
		if !ok {
			break
		}
		for ci, members := range comps {
			u := unitComp[members[0]]
			if best[u] != nil && foundBy[u] != mask {
				continue // a more basic class was found already
			}
			best[u] = s.shortestCycle(members, comp, int32(ci), mask, best[u])
			foundBy[u] = mask
		}
	}
	s.work = txnCycleSearchWork
	for u, members := range units {
		if best[u] == nil {
			best[u] = s.singleAntiDependency(members, unitComp, int32(u))
		}
	}
	s.work = txnCycleSearchWork
	for u, members := range units {
		if best[u] == nil {
			best[u] = s.shortestCycle(members, unitComp, int32(u), edgesSerial, nil)
		}
	}
	var out []txnCycle
	for _, cyc := range best {
		if cyc != nil {
			out = append(out, g.classify(cyc))
		}
	}
	if !c.realtime {
		return out
	}
	comp, comps, ok := g.sccs(edgesSerial|edgeRT, c.budget)
	if !ok {
		return out
	}
	s.work = txnCycleSearchWork
	for ci, members := range comps {
		if slices.ContainsFunc(members, func(m int32) bool { return unitComp[m] >= 0 }) {
			continue // it holds a serializability cycle, reported above
		}
		if cyc := s.shortestCycle(members, comp, int32(ci), edgesSerial|edgeRT, nil); cyc != nil {
			out = append(out, g.classify(cyc))
		}
	}
	return out
}

// txnSearch is breadth-first search over a txnGraph, with scratch space reused across
// searches (an epoch stamp marks the nodes seen by the current search).
type txnSearch struct {
	g      *txnGraph
	budget *txnBudget
	work   int // optional edge visits left for the current class
	epoch  uint32
	seen   []uint32
	wanted []uint32
	dist   []int32
	via    []int32 // the edge the search reached each node by
	queue  []int32
}

func newTxnSearch(g *txnGraph, budget *txnBudget) *txnSearch {
	n := len(g.out)
	return &txnSearch{g: g, budget: budget, seen: make([]uint32, n), wanted: make([]uint32, n), dist: make([]int32, n), via: make([]int32, n)}
}

func (s *txnSearch) reset() {
	s.epoch++
	if s.epoch == 0 {
		clear(s.seen)
		clear(s.wanted)
		s.epoch = 1
	}
	s.queue = s.queue[:0]
}

// spend accounts for one edge visit and says whether the search may go on. A forced search
// always may: it is the one that proves a component cyclic, and it is linear.
func (s *txnSearch) spend(forced bool) bool {
	s.work--
	timeLeft := s.budget.ok()
	return forced || (timeLeft && s.work > 0)
}

// shortestCycle returns the shortest cycle it finds among members, a strongly connected
// component (comp[n] == c) of the edges in mask, shorter than best (nil: none yet): a
// breadth-first search from each member finds the shortest cycle through it. The first
// search is forced, so a cycle is always returned; the others stop when the class's work
// or the time runs out.
func (s *txnSearch) shortestCycle(members, comp []int32, c int32, mask txnEdgeKind, best []int32) []int32 {
	for _, start := range members {
		if best != nil && (len(best) <= 2 || s.work <= 0 || s.budget.expired) {
			break // two is the shortest cycle without self-loops
		}
		maxLen := math.MaxInt32
		if best != nil {
			maxLen = len(best)
		}
		if cyc := s.cycleThrough(start, comp, c, mask, maxLen, best == nil); cyc != nil {
			best = cyc
		}
	}
	return best
}

// cycleThrough returns a shortest cycle through start shorter than maxLen, or nil.
func (s *txnSearch) cycleThrough(start int32, comp []int32, c int32, mask txnEdgeKind, maxLen int, forced bool) []int32 {
	s.reset()
	s.seen[start], s.dist[start] = s.epoch, 0
	s.queue = append(s.queue, start)
	for qi := 0; qi < len(s.queue); qi++ {
		u := s.queue[qi]
		du := int(s.dist[u])
		if du+1 >= maxLen {
			return nil // breadth-first: every later node is at least as far
		}
		for _, ei := range s.g.out[u] {
			if !s.spend(forced) {
				return nil
			}
			e := &s.g.edges[ei]
			if e.kind&mask == 0 || comp[e.to] != c {
				continue
			}
			if e.to == start {
				return s.path(start, ei)
			}
			if s.seen[e.to] == s.epoch || du+2 >= maxLen {
				continue
			}
			s.seen[e.to], s.dist[e.to], s.via[e.to] = s.epoch, int32(du+1), ei
			s.queue = append(s.queue, e.to)
		}
	}
	return nil
}

// path returns the edges of the search tree from start to last's source, then last.
func (s *txnSearch) path(start, last int32) []int32 {
	p := []int32{last}
	for n := s.g.edges[last].from; n != start; n = s.g.edges[s.via[n]].from {
		p = append(p, s.via[n])
	}
	slices.Reverse(p)
	return p
}

// singleAntiDependency looks for a shortest G-single cycle in a component of the
// serializability graph: one rw edge a → b closed by a path of ww and wr edges from b back to
// a. Grouping the rw edges by target, one breadth-first search from each target finds the
// nearest of its sources. Unlike the other searches none is forced, since the class may be
// absent; when the work runs out it returns what it has, and the component is then
// classified by a plain shortest cycle.
func (s *txnSearch) singleAntiDependency(members, comp []int32, c int32) []int32 {
	g := s.g
	byTarget := map[int32][]int32{}
	var targets []int32
	for _, a := range members {
		for _, ei := range g.out[a] {
			e := &g.edges[ei]
			if e.kind != edgeRW || comp[e.to] != c {
				continue
			}
			if byTarget[e.to] == nil {
				targets = append(targets, e.to)
			}
			byTarget[e.to] = append(byTarget[e.to], ei)
		}
	}
	slices.Sort(targets)
	var best []int32
	for _, b := range targets {
		if (best != nil && len(best) <= 2) || s.work <= 0 || s.budget.expired {
			break
		}
		maxLen := math.MaxInt32
		if best != nil {
			maxLen = len(best)
		}
		s.reset()
		for _, ei := range byTarget[b] {
			s.wanted[g.edges[ei].from] = s.epoch
		}
		if cyc := s.closeAntiDependency(b, byTarget[b], comp, c, maxLen); cyc != nil {
			best = cyc
		}
	}
	return best
}

// closeAntiDependency searches ww and wr edges from b for the nearest wanted node a (a
// source of one of the rw edges rws into b), and returns the cycle a → b ⇝ a if it is
// shorter than maxLen.
func (s *txnSearch) closeAntiDependency(b int32, rws []int32, comp []int32, c int32, maxLen int) []int32 {
	g := s.g
	s.seen[b], s.dist[b] = s.epoch, 0
	s.queue = append(s.queue, b)
	for qi := 0; qi < len(s.queue); qi++ {
		u := s.queue[qi]
		du := int(s.dist[u])
		if du+2 >= maxLen {
			return nil
		}
		for _, ei := range g.out[u] {
			if !s.spend(false) {
				return nil
			}
			e := &g.edges[ei]
			if e.kind&(edgeWW|edgeWR) == 0 || comp[e.to] != c || s.seen[e.to] == s.epoch {
				continue
			}
			s.seen[e.to], s.dist[e.to], s.via[e.to] = s.epoch, int32(du+1), ei
			if s.wanted[e.to] != s.epoch {
				s.queue = append(s.queue, e.to)
				continue
			}
			a := e.to
			for _, rw := range rws {
				if g.edges[rw].from == a {
					return append([]int32{rw}, s.path(b, ei)...)
				}
			}
		}
	}
	return nil
}

// txnBudget is the check's time limit.
type txnBudget struct {
	bounded  bool
	deadline time.Time
	steps    uint32
	expired  bool
}

func newTxnBudget(timeout time.Duration) *txnBudget {
	if timeout <= 0 {
		return &txnBudget{}
	}
	return &txnBudget{bounded: true, deadline: time.Now().Add(timeout)}
}

// ok counts one step of work and reports whether time remains. The clock is read every 1024
// steps: often enough to stop within well under a millisecond of the deadline, rarely
// enough to cost nothing.
func (b *txnBudget) ok() bool {
	if !b.bounded || b.expired {
		return !b.expired
	}
	b.steps++
	if b.steps%1024 == 0 && !time.Now().Before(b.deadline) {
		b.expired = true
	}
	return !b.expired
}
