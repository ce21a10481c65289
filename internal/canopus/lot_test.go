package canopus

import (
	"slices"
	"testing"

	"meridian/internal/topology"
)

func ec2Members(t *testing.T, perRegion int) (*topology.Topology, []Member) {
	t.Helper()
	topo, err := topology.Builtin("ec2-7")
	if err != nil {
		t.Fatal(err)
	}
	var ms []Member
	id := uint32(1)
	for _, r := range topo.Regions {
		for range perRegion {
			ms = append(ms, Member{ID: id, Region: r})
			id++
		}
	}
	return topo, ms
}

// Height 2 is the thesis's tree: every super-leaf under the root, which every pnode emulates.
func TestLOTHeightTwo(t *testing.T) {
	topo, ms := ec2Members(t, 3)
	lot, err := NewLOT(ms[:9], topo, 2) // ireland, california, virginia
	if err != nil {
		t.Fatal(err)
	}
	if got := lot.Children(lot.Root()); len(got) != 3 {
		t.Fatalf("the root has %d children, want the 3 super-leaves", len(got))
	}
	if got := lot.Emulators(lot.Root()); len(got) != 9 {
		t.Fatalf("the root is emulated by %v, want every pnode", got)
	}
	v, ok := lot.Ancestor(5, 1)
	if !ok || !slices.Equal(lot.Emulators(v), []uint32{4, 5, 6}) || !slices.Equal(lot.SuperLeafOf(5), []uint32{4, 5, 6}) {
		t.Fatalf("node 5's super-leaf: %v %v", v, lot.Emulators(v))
	}
	if r, _ := lot.Ancestor(5, 2); r != lot.Root() {
		t.Fatalf("node 5's height-2 ancestor is %v, not the root", r)
	}
}

// A taller tree groups nearby regions by round trip (average linkage): on ec2-7 (Table 4.1),
// Europe, the Americas and Asia-Pacific.
func TestLOTHeightThreeGroupsContinents(t *testing.T) {
	topo, ms := ec2Members(t, 3)
	lot, err := NewLOT(ms, topo, 3)
	if err != nil {
		t.Fatal(err)
	}
	mid := lot.Children(lot.Root())
	if len(mid) != 3 {
		t.Fatalf("the root has %d children, want 3 continents", len(mid))
	}
	var got [][]string
	for _, v := range mid {
		var regions []string
		for _, c := range lot.Children(v) {
			regions = append(regions, lot.SuperLeaves[c.Index])
		}
		slices.Sort(regions)
		got = append(got, regions)
	}
	want := [][]string{{"frankfurt", "ireland"}, {"california", "oregon", "virginia"}, {"sydney", "tokyo"}}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g []string) bool { return slices.Equal(g, w) }) {
			t.Fatalf("continents %v, want %v", got, want)
		}
	}
	// Every pnode's ancestors chain up to the root, and each vertex's emulators are the union of
	// its children's.
	for _, m := range ms {
		for h := 1; h < 3; h++ {
			v, _ := lot.Ancestor(m.ID, h)
			p, _ := lot.Ancestor(m.ID, h+1)
			if !slices.Contains(lot.Children(p), v) {
				t.Fatalf("node %d: %v is not a child of %v", m.ID, v, p)
			}
			if !slices.Contains(lot.Emulators(v), m.ID) {
				t.Fatalf("node %d does not emulate its ancestor %v", m.ID, v)
			}
		}
	}
}

// The same members in another order give the same tree (every node derives it on its own).
func TestLOTDeterministic(t *testing.T) {
	topo, ms := ec2Members(t, 2)
	a, err := NewLOT(ms, topo, 3)
	if err != nil {
		t.Fatal(err)
	}
	rev := slices.Clone(ms)
	slices.Reverse(rev)
	b, err := NewLOT(rev, topo, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for h := 1; h <= 3; h++ {
			va, _ := a.Ancestor(m.ID, h)
			vb, _ := b.Ancestor(m.ID, h)
			if va != vb || !slices.Equal(a.Emulators(va), b.Emulators(vb)) {
				t.Fatalf("node %d height %d: %v %v against %v %v", m.ID, h, va, a.Emulators(va), vb, b.Emulators(vb))
			}
		}
	}
}

func TestLOTRefusesBadInput(t *testing.T) {
	topo, ms := ec2Members(t, 1)
	for _, c := range []struct {
		name    string
		members []Member
		height  int
	}{
		{"height 1", ms, 1},
		{"no members", nil, 2},
		{"a member twice", append(slices.Clone(ms), ms[0]), 2},
		{"an unknown region", append(slices.Clone(ms), Member{ID: 99, Region: "mars"}), 2},
	} {
		if _, err := NewLOT(c.members, topo, c.height); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}
