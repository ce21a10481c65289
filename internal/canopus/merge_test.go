package canopus

import (
	"slices"
	"testing"
)

func nodesOf(s State) []uint32 {
	var out []uint32
	for _, set := range s.Sets {
		out = append(out, set.Node)
	}
	return out
}

// The example of 4.2.7: super-leaves Sx = {A, B, C} and Sy = {D, E, F}; with N_A < N_C < N_B
// and N_D < N_E < N_F < N_B, every node ends the cycle with {R_D, R_E, R_F, R_A, R_C, R_B}.
func TestMergeThesisExample(t *testing.T) {
	const A, B, C, D, E, F = 1, 2, 3, 4, 5, 6
	req := func(id uint32) [][]byte { return [][]byte{{byte(id)}} }
	px, err := Merge(7, VNode{1, 0}, []State{Proposal(7, A, 10, req(A)), Proposal(7, B, 90, req(B)), Proposal(7, C, 40, req(C))})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodesOf(px); !slices.Equal(got, []uint32{A, C, B}) || px.Number != 90 || px.Drawer != B {
		t.Fatalf("P_x = %v | %d by %d, want [A C B] | N_B", got, px.Number, px.Drawer)
	}
	py, err := Merge(7, VNode{1, 1}, []State{Proposal(7, F, 80, req(F)), Proposal(7, D, 5, req(D)), Proposal(7, E, 20, req(E))})
	if err != nil {
		t.Fatal(err)
	}
	// Both super-leaves compute the root from the same two states, in whatever order they
	// arrive.
	for _, children := range [][]State{{px, py}, {py, px}} {
		pz, err := Merge(7, VNode{2, 0}, children)
		if err != nil {
			t.Fatal(err)
		}
		if got := nodesOf(pz); !slices.Equal(got, []uint32{D, E, F, A, C, B}) || pz.Number != 90 {
			t.Fatalf("P_z = %v | %d, want [D E F A C B] | N_B", got, pz.Number)
		}
	}
}

// Equal numbers are ordered by the drawing node's ID; a request set is never split.
func TestMergeTiesAndSets(t *testing.T) {
	a := Proposal(1, 9, 50, [][]byte{[]byte("a1"), []byte("a2")})
	b := Proposal(1, 3, 50, [][]byte{[]byte("b1")})
	m, err := Merge(1, VNode{1, 0}, []State{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodesOf(m); !slices.Equal(got, []uint32{3, 9}) || m.Drawer != 9 {
		t.Fatalf("tie: %v drawn by %d, want [3 9] drawn by 9", got, m.Drawer)
	}
	if len(m.Sets[1].Requests) != 2 || string(m.Sets[1].Requests[0]) != "a1" {
		t.Fatalf("node 9's set was split or reordered: %q", m.Sets[1].Requests)
	}
}

func TestMergeRefusesBadInput(t *testing.T) {
	p := Proposal(1, 1, 5, nil)
	for _, c := range []struct {
		name     string
		v        VNode
		children []State
	}{
		{"no children", VNode{1, 0}, nil},
		{"a child of another cycle", VNode{1, 0}, []State{p, Proposal(2, 2, 6, nil)}},
		{"a child given twice", VNode{1, 0}, []State{p, Proposal(1, 1, 7, nil)}},
		{"a child two heights below", VNode{2, 0}, []State{p}},
	} {
		if _, err := Merge(1, c.v, c.children); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}
