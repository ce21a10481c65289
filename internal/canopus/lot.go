// Package canopus is the Canopus consensus protocol as a sans-IO state machine (thesis
// chapter 4, ../shared/seeds/thesis-mayflower-canopus-kawkab.txt; the plan is
// docs/plans/canopus.md). This file holds the leaf-only tree (4.2.1) and its emulation table
// (4.2.6); the cycles, rounds and reads follow it.
package canopus

import (
	"fmt"
	"math"
	"slices"

	"meridian/internal/topology"
)

// Member is a pnode: a Canopus node and the region whose super-leaf it belongs to.
type Member struct {
	ID     uint32
	Region string
}

// VNode names a vertex of the leaf-only tree: its height (1: a super-leaf's parent, the tree's
// height: the root) and its index among the vertices of that height (0 for the root). Only
// pnodes exist; every pnode emulates all its ancestors (4.2.1 ii).
type VNode struct {
	Height, Index int
}

func (v VNode) String() string { return fmt.Sprintf("v%d.%d", v.Height, v.Index) }

// LOT is a leaf-only tree over a set of members: one super-leaf per region (4.2.1 iii), the
// super-leaves grouped level by level up to a single root.
//
// Invariants: every height from 1 to Height has at least one vertex; the root is the one vertex
// of height Height; every vertex of height h < Height has exactly one parent; every vertex's
// emulators are the members of the super-leaves below it, sorted by ID, never empty.
type LOT struct {
	Height int
	// SuperLeaves are the regions in order; superLeaf[i] is the members of SuperLeaves[i].
	SuperLeaves []string
	superLeaf   [][]uint32
	// parent[h][i] is the index at height h+1 of vertex (h, i)'s parent, for h in 1..Height-1.
	parent map[int][]int
	// emulators[v] are the pnodes below v (the emulation table, 4.2.6).
	emulators map[VNode][]uint32
	leafOf    map[uint32]int // member → its super-leaf's index
}

// NewLOT builds the tree of the given height over members. Height 2 is the thesis's (every
// super-leaf under the root). Taller trees group the super-leaves by the topology's round-trip
// times: agglomerative clustering with average linkage, each level with about
// n^(1/(height−1)) children per vertex, so that nearby regions exchange their states below the
// root and a far link carries one merged state per cycle (docs/plans/canopus.md, "Tree shape").
func NewLOT(members []Member, topo *topology.Topology, height int) (*LOT, error) {
	if height < 2 {
		return nil, fmt.Errorf("canopus: tree height %d: want at least 2 (super-leaves and a root)", height)
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("canopus: no members")
	}
	t := &LOT{Height: height, parent: map[int][]int{}, emulators: map[VNode][]uint32{}, leafOf: map[uint32]int{}}
	byRegion := map[string][]uint32{}
	for _, m := range members {
		if _, dup := t.leafOf[m.ID]; dup {
			return nil, fmt.Errorf("canopus: member %d listed twice", m.ID)
		}
		if topo != nil && !topo.HasRegion(m.Region) {
			return nil, fmt.Errorf("canopus: member %d: region %q is not in topology %s", m.ID, m.Region, topo.Name)
		}
		if _, seen := byRegion[m.Region]; !seen {
			t.SuperLeaves = append(t.SuperLeaves, m.Region)
		}
		byRegion[m.Region] = append(byRegion[m.Region], m.ID)
		t.leafOf[m.ID] = -1
	}
	if topo != nil {
		// Topology order, so that every node derives the same tree from the same inputs.
		slices.SortFunc(t.SuperLeaves, func(a, b string) int { return slices.Index(topo.Regions, a) - slices.Index(topo.Regions, b) })
	} else {
		slices.Sort(t.SuperLeaves)
	}
	for i, r := range t.SuperLeaves {
		ids := slices.Sorted(slices.Values(byRegion[r]))
		t.superLeaf = append(t.superLeaf, ids)
		for _, id := range ids {
			t.leafOf[id] = i
		}
		t.emulators[VNode{1, i}] = ids
	}
	// Levels: groups[h] lists, for each vertex of height h, the super-leaves below it.
	groups := make([][]int, len(t.SuperLeaves))
	for i := range groups {
		groups[i] = []int{i}
	}
	n := len(t.SuperLeaves)
	for h := 1; h < height; h++ {
		var next [][]int
		if h == height-1 {
			next = [][]int{allOf(n)}
		} else {
			fan := math.Pow(float64(n), 1/float64(height-1))
			want := max(1, int(math.Ceil(float64(len(groups))/math.Ceil(fan))))
			next = cluster(groups, want, func(a, b int) float64 { return rttMs(topo, t.SuperLeaves[a], t.SuperLeaves[b]) })
		}
		parents := make([]int, len(groups))
		for pi, g := range next {
			for ci, c := range groups {
				if slices.Contains(g, c[0]) {
					parents[ci] = pi
				}
			}
			var ems []uint32
			for _, sl := range g {
				ems = append(ems, t.superLeaf[sl]...)
			}
			slices.Sort(ems)
			t.emulators[VNode{h + 1, pi}] = ems
		}
		t.parent[h] = parents
		groups = next
	}
	return t, nil
}

func allOf(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// rttMs is the round trip between two regions (0 without a topology: every grouping is equal).
func rttMs(topo *topology.Topology, a, b string) float64 {
	if topo == nil {
		return 0
	}
	v, err := topo.RTTMs(a, b)
	if err != nil {
		return math.Inf(1)
	}
	return v
}

// cluster merges groups (each a set of super-leaf indexes) by average linkage until want remain:
// the two groups with the smallest mean round trip between their super-leaves merge first;
// ties go to the lower indexes, so the result is deterministic. Groups come out sorted by their
// lowest super-leaf.
func cluster(groups [][]int, want int, dist func(a, b int) float64) [][]int {
	cur := make([][]int, len(groups))
	for i, g := range groups {
		cur[i] = slices.Clone(g)
	}
	for len(cur) > want {
		bi, bj, best := 0, 1, math.Inf(1)
		for i := range cur {
			for j := i + 1; j < len(cur); j++ {
				sum := 0.0
				for _, a := range cur[i] {
					for _, b := range cur[j] {
						sum += dist(a, b)
					}
				}
				if d := sum / float64(len(cur[i])*len(cur[j])); d < best {
					bi, bj, best = i, j, d
				}
			}
		}
		merged := append(slices.Clone(cur[bi]), cur[bj]...)
		slices.Sort(merged)
		cur = append(cur[:bj], cur[bj+1:]...)
		cur[bi] = merged
	}
	slices.SortFunc(cur, func(a, b []int) int { return a[0] - b[0] })
	return cur
}

// Ancestor returns member id's ancestor of height h (1: its super-leaf's vertex; Height: the
// root). ok is false for a member not in the tree or a height out of range.
func (t *LOT) Ancestor(id uint32, h int) (VNode, bool) {
	i, ok := t.leafOf[id]
	if !ok || h < 1 || h > t.Height {
		return VNode{}, false
	}
	for k := 1; k < h; k++ {
		i = t.parent[k][i]
	}
	return VNode{h, i}, true
}

// Children returns v's children (vertices of height v.Height−1); nil for a vertex of height 1,
// whose children are the pnodes of its super-leaf (SuperLeafOf).
func (t *LOT) Children(v VNode) []VNode {
	if v.Height <= 1 {
		return nil
	}
	var out []VNode
	for i, p := range t.parent[v.Height-1] {
		if p == v.Index {
			out = append(out, VNode{v.Height - 1, i})
		}
	}
	return out
}

// Emulators returns the pnodes that emulate v (the emulation table, 4.2.6): the members of the
// super-leaves below it, sorted by ID.
func (t *LOT) Emulators(v VNode) []uint32 { return t.emulators[v] }

// SuperLeafOf returns the members of id's super-leaf, sorted by ID (nil if id is not in the
// tree).
func (t *LOT) SuperLeafOf(id uint32) []uint32 {
	i, ok := t.leafOf[id]
	if !ok {
		return nil
	}
	return t.superLeaf[i]
}

// Root returns the root vertex.
func (t *LOT) Root() VNode { return VNode{t.Height, 0} }
