package coord

import (
	"slices"
	"testing"

	"meridian/internal/storage"
)

func TestQuorumPickAndSatisfied(t *testing.T) {
	// Old set {1,2,3}, new set {1,2,4} (3 moves to 4), QUORUM in each.
	q := quorum{sets: [][]uint32{{1, 2, 3}, {1, 2, 4}}, need: []int{2, 2}, union: []uint32{1, 2, 3, 4}}
	for _, c := range []struct {
		cands []uint32
		want  []uint32
		ok    bool
	}{
		{[]uint32{3, 1, 4, 2}, []uint32{3, 1, 4}, true}, // 3 counts for old, 1 for both, 4 for new
		{[]uint32{1, 2, 3, 4}, []uint32{1, 2}, true},    // the shared nodes satisfy both
		{[]uint32{3, 4}, []uint32{3, 4}, false},
		{[]uint32{4, 3, 2}, []uint32{4, 3, 2}, true},
	} {
		got, ok := q.pick(c.cands)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("pick(%v) = %v %v, want %v %v", c.cands, got, ok, c.want, c.ok)
		}
	}
	has := func(ns ...uint32) func(uint32) bool { return func(n uint32) bool { return slices.Contains(ns, n) } }
	if !q.satisfied(has(1, 2)) || q.satisfied(has(1, 3)) || q.satisfied(has(2, 4)) || !q.satisfied(has(1, 3, 4)) {
		t.Error("satisfied: wrong answer for a set of acknowledgements")
	}
	if got := q.describe(has(1, 3)); got != "2 of 2 in the old replica set, 1 of 2 in the new replica set" {
		t.Errorf("describe = %q", got)
	}
	one := quorum{sets: [][]uint32{{1, 2, 3}}, need: []int{2}, union: []uint32{1, 2, 3}}
	if got := one.describe(has(1)); got != "1 of 2" {
		t.Errorf("describe (one set) = %q", got)
	}
}

func span(start, end string) storage.Span {
	s := storage.Span{Keyspace: "ks", Start: []byte(start)}
	if end != "" {
		s.End = []byte(end)
	}
	return s
}

func TestSubtractRanges(t *testing.T) {
	str := func(ss []storage.Span) []string {
		var out []string
		for _, s := range ss {
			out = append(out, string(s.Start)+"-"+string(s.End))
		}
		return out
	}
	for _, c := range []struct {
		a, b []storage.Span
		want []string
	}{
		{[]storage.Span{span("", "")}, nil, []string{"-"}},
		{[]storage.Span{span("", "")}, []storage.Span{span("c", "f")}, []string{"-c", "f-"}},
		{[]storage.Span{span("", "")}, []storage.Span{span("", "c"), span("f", "")}, []string{"c-f"}},
		{[]storage.Span{span("a", "k")}, []storage.Span{span("", "b"), span("c", "d"), span("j", "z")}, []string{"b-c", "d-j"}},
		{[]storage.Span{span("a", "c"), span("e", "g")}, []storage.Span{span("b", "f")}, []string{"a-b", "f-g"}},
		{[]storage.Span{span("a", "c")}, []storage.Span{span("a", "c")}, nil},
	} {
		if got := str(subtract(c.a, c.b)); !slices.Equal(got, c.want) {
			t.Errorf("subtract(%v, %v) = %v, want %v", str(c.a), str(c.b), got, c.want)
		}
	}
}
