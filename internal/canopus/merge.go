package canopus

import (
	"cmp"
	"fmt"
	"slices"
)

// RequestSet is one node's write requests of one cycle, in the order they arrived: a set is
// never split, and the merged order places whole sets (4.3: "the requests in a request set are
// never separated").
type RequestSet struct {
	Node     uint32
	Requests [][]byte
	// StampNanos is the proposer's clock when it proposed: a committed cycle's version time is
	// the largest stamp in it (and above the previous cycle's), so versions follow the order.
	StampNanos int64
	// Admits are membership updates riding on the proposal (4.2.6): nodes readmitted after
	// their epoch was closed.
	Admits []Admit
	// LeaseKeys are the keys whose write leases the proposer asks for (4.5.2, leases.go).
	LeaseKeys [][]byte
}

// Admit readmits Node, whose membership epoch Epoch was closed, in epoch Epoch+1.
type Admit struct {
	Node  uint32
	Epoch uint64
}

// State is a vertex's state in a cycle: the request sets of the pnodes below it in their merged
// order, and the proposal number that orders it among its siblings at the next round (4.2.2,
// M_i = {R'_{i−1}, N'_{i−1}, …}). A pnode's own proposal is the state of height 0, indexed by
// its node ID.
//
// Invariant: Number and Drawer are those of the set that drew the largest (Number, Drawer) among
// the pnodes below the vertex.
type State struct {
	Cycle uint64
	VNode VNode
	// Number is the proposal number; Drawer the pnode that drew it (ties between equal
	// numbers, rare with 64-bit draws, are broken by node ID, 4.2).
	Number uint64
	Drawer uint32
	Sets   []RequestSet
}

// Proposal returns pnode id's round-1 state: its requests of the cycle and the random number it
// drew for it.
func Proposal(cycle uint64, id uint32, number uint64, requests [][]byte) State {
	return State{Cycle: cycle, VNode: VNode{0, int(id)}, Number: number, Drawer: id,
		Sets: []RequestSet{{Node: id, Requests: requests}}}
}

// Merge computes vertex v's state in a cycle from its children's: the children ordered by
// their proposal numbers, ascending, ties broken by the drawing node's ID, their sets
// concatenated in that order; the result carries the largest number (4.2.2, the example of
// 4.2.7: {P_A, P_C, P_B | N_B} for N_A < N_C < N_B). The order does not depend on the order the
// children are given in, which is what lets every node compute the same state on its own
// (Theorem 1).
func Merge(cycle uint64, v VNode, children []State) (State, error) {
	if len(children) == 0 {
		return State{}, fmt.Errorf("canopus: merge %v of cycle %d: no children", v, cycle)
	}
	sorted := slices.Clone(children)
	seen := make(map[VNode]bool, len(sorted))
	for _, c := range sorted {
		if seen[c.VNode] {
			return State{}, fmt.Errorf("canopus: merge %v of cycle %d: child %v given twice", v, cycle, c.VNode)
		}
		seen[c.VNode] = true
		if c.Cycle != cycle {
			return State{}, fmt.Errorf("canopus: merge %v of cycle %d: a child of cycle %d", v, cycle, c.Cycle)
		}
		if c.VNode.Height != v.Height-1 {
			return State{}, fmt.Errorf("canopus: merge %v: child %v is not one height below", v, c.VNode)
		}
	}
	slices.SortFunc(sorted, func(a, b State) int {
		if c := cmp.Compare(a.Number, b.Number); c != 0 {
			return c
		}
		return cmp.Compare(a.Drawer, b.Drawer)
	})
	out := State{Cycle: cycle, VNode: v}
	for _, c := range sorted {
		out.Sets = append(out.Sets, c.Sets...)
	}
	last := sorted[len(sorted)-1]
	out.Number, out.Drawer = last.Number, last.Drawer
	return out, nil
}
