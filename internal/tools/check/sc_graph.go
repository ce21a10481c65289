package check

import (
	"fmt"
	"slices"
	"strings"
)

// scGraph decides sequential consistency exactly, given that writes to one key take effect in
// version order (last-writer-wins), by searching for a cycle in the constraint graph:
//
//   - process order: each op follows its process's previous op; an indeterminate write follows
//     its predecessors but constrains nothing after it (it may take effect long after the
//     client gave up);
//   - per key, the writes in version order: w1 → w2 → …;
//   - a read that returned w_i comes after w_i and before w_{i+1}; a read of an absent key
//     comes before w_1.
//
// Any topological order of an acyclic graph is a legal sequential execution (every read sits
// between the write it returned and the next write to its key), and a cycle proves that none
// exists. The witness order of the MeteorShower proof (SequentiallyConsistent) fixes the order
// of writes across keys too, which is stronger than SC when a write's outcome was
// indeterminate: such a write can take effect much later than its version suggests (a delayed
// replica message, then read repair or anti-entropy). SequentiallyConsistent therefore
// confirms every witness failure here and reports a violation only when this graph has a
// cycle. O(n + e) with e ≤ 4n, plus, for a group (Op.Group) that directly follows another of
// its process, an edge from each member of the first to each member of the second.
func scGraph(h History) *Violation {
	order := invocationOrder(h)
	byValue := map[string]int32{}
	for i := range h {
		if h[i].Kind == Write {
			byValue[h[i].Value] = int32(i)
		}
	}
	// Versions and inclusion, as in the witness construction.
	version := make([]struct {
		ok       bool
		observed bool
	}, len(h))
	vers := make([]int32, len(h)) // index of the op whose Version is authoritative (self or a read)
	for i := range h {
		vers[i] = int32(i)
	}
	for _, i := range order {
		r := &h[i]
		if r.Kind != Read || r.Outcome != OK || !r.Found {
			continue
		}
		w, ok := byValue[r.Value]
		if !ok || h[w].Key != r.Key {
			continue
		}
		version[w].observed = true
		if h[vers[w]].Version.IsZero() && !r.Version.IsZero() {
			vers[w] = i
		}
	}
	included := make([]bool, len(h))
	keyWrites := map[string][]int32{}
	for i := range h {
		op := &h[i]
		if op.Kind != Write || h[vers[i]].Version.IsZero() {
			continue
		}
		if op.Outcome == OK || (op.Outcome == Indeterminate && version[i].observed) {
			included[i] = true
			keyWrites[op.Key] = append(keyWrites[op.Key], int32(i))
		}
	}
	next := map[int32]int32{} // write → next write to its key in version order
	first := map[string]int32{}
	for k, ws := range keyWrites {
		slices.SortFunc(ws, func(a, b int32) int {
			if c := h[vers[a]].Version.Compare(h[vers[b]].Version); c != 0 {
				return c
			}
			return cmpInvocation(&h[a], &h[b])
		})
		first[k] = ws[0]
		for j := 0; j+1 < len(ws); j++ {
			next[ws[j]] = ws[j+1]
		}
	}
	for i := range h {
		op := &h[i]
		if op.Kind != Read || op.Outcome != OK {
			continue
		}
		if !op.Found {
			included[i] = true
			continue
		}
		if w, ok := byValue[op.Value]; ok && included[w] && h[w].Key == op.Key {
			included[i] = true
		}
	}
	adj := make([][]int32, len(h))
	edge := func(a, b int32) { adj[a] = append(adj[a], b) }
	// Process order. The members of a group (Op.Group, a scan's reads) follow the ops before
	// the group, not one another, and the op after the group follows every member.
	last := map[int][]int32{} // process → the ops its next op follows
	var group map[int]int     // process → the group its latest op belongs to (0: none)
	var base map[int][]int32  // process → the ops its current group's members follow
	for _, i := range order {
		if !included[i] {
			continue
		}
		op := &h[i]
		p := op.Process
		preds := last[p]
		if op.Group != 0 {
			if group == nil {
				group, base = map[int]int{}, map[int][]int32{}
			}
			if group[p] != op.Group {
				group[p] = op.Group
				base[p] = preds
				last[p] = nil
			}
			preds = base[p]
		} else if group != nil {
			delete(group, p)
		}
		for _, a := range preds {
			edge(a, int32(i))
		}
		switch {
		case op.Group != 0:
			last[p] = append(last[p], int32(i))
		case !(op.Kind == Write && op.Outcome == Indeterminate):
			last[p] = append(last[p][:0], int32(i))
		}
	}
	// Per-key write chains and reads between their write and the next.
	for _, ws := range keyWrites {
		for j := 0; j+1 < len(ws); j++ {
			edge(ws[j], ws[j+1])
		}
	}
	for i := range h {
		op := &h[i]
		if !included[i] || op.Kind != Read {
			continue
		}
		if !op.Found {
			if w, ok := first[op.Key]; ok {
				edge(int32(i), w)
			}
			continue
		}
		w := byValue[op.Value]
		edge(w, int32(i))
		if n, ok := next[w]; ok {
			edge(int32(i), n)
		}
	}
	// Kahn's algorithm; what remains holds a cycle.
	indeg := make([]int32, len(h))
	for a := range adj {
		for _, b := range adj[a] {
			indeg[b]++
		}
	}
	queue := make([]int32, 0, len(h))
	for i := range h {
		if included[i] && indeg[i] == 0 {
			queue = append(queue, int32(i))
		}
	}
	seen := 0
	for len(queue) > 0 {
		a := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		seen++
		for _, b := range adj[a] {
			indeg[b]--
			if indeg[b] == 0 {
				queue = append(queue, b)
			}
		}
	}
	total := 0
	for i := range h {
		if included[i] {
			total++
		}
	}
	if seen == total {
		return nil
	}
	cycle := findCycle(adj, indeg)
	ops := make([]Op, 0, len(cycle))
	var steps []string
	for j, a := range cycle {
		ops = append(ops, h[a])
		b := cycle[(j+1)%len(cycle)]
		steps = append(steps, fmt.Sprintf("op#%d before op#%d (%s)", h[a].ID, h[b].ID, edgeReason(h, a, b, byValue, next)))
	}
	return &Violation{
		Checker: "sequential-consistency",
		Reason: "no legal order exists: the constraints form a cycle — " + strings.Join(steps, ", ") +
			" (writes to a key take effect in version order; MeteorShower paper II-B, Definition 1)",
		Ops: ops,
	}
}

// findCycle returns one cycle among the nodes Kahn's algorithm could not remove (indeg > 0).
func findCycle(adj [][]int32, indeg []int32) []int32 {
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(adj))
	parent := make([]int32, len(adj))
	for start := range adj {
		if indeg[start] == 0 || color[start] != white {
			continue
		}
		// Iterative DFS restricted to the remaining nodes.
		type frame struct {
			n   int32
			out int
		}
		stack := []frame{{int32(start), 0}}
		color[start] = grey
		parent[start] = -1
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			if f.out == len(adj[f.n]) {
				color[f.n] = black
				stack = stack[:len(stack)-1]
				continue
			}
			b := adj[f.n][f.out]
			f.out++
			if indeg[b] == 0 {
				continue
			}
			switch color[b] {
			case white:
				color[b] = grey
				parent[b] = f.n
				stack = append(stack, frame{b, 0})
			case grey:
				// Found: walk back from f.n to b.
				cyc := []int32{b}
				for x := f.n; x != b && x >= 0; x = parent[x] {
					cyc = append(cyc, x)
				}
				slices.Reverse(cyc[1:])
				return cyc
			}
		}
	}
	return nil
}

func edgeReason(h History, a, b int32, byValue map[string]int32, next map[int32]int32) string {
	oa, ob := &h[a], &h[b]
	switch {
	case oa.Kind == Write && ob.Kind == Write && oa.Key == ob.Key && next[a] == b:
		return "version order of " + oa.Key
	case oa.Kind == Write && ob.Kind == Read && ob.Found && byValue[ob.Value] == a:
		return "the read returned it"
	case oa.Kind == Read && ob.Kind == Write && oa.Key == ob.Key:
		return "the read did not see the newer write"
	case oa.Process == ob.Process:
		return fmt.Sprintf("process p%d's order", oa.Process)
	}
	return "constraint"
}
