package check

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// group makes ops (by index) one group: one multi-key read, as the simulator records a scan.
func (b *hb) group(g int, idx ...int) {
	for _, i := range idx {
		b.h[i].Group = g
	}
}

// A scan's reads are concurrent with one another: it may read a key's newer value and another
// key's older one, whichever order its keys are listed in. Read one after the other (no
// group), the same answers are inconsistent: p2 wrote b2 before a1, so having seen a1, p4 can
// no longer read b1.
func TestSCGroupMembersAreUnordered(t *testing.T) {
	var b hb
	b.w(1, "b", "b1", 1, 0, 10)
	b.w(2, "b", "b2", 2, 20, 30)
	b.w(2, "a", "a1", 3, 40, 50)
	b.r(4, "a", "a1", 3, 60, 70)
	b.r(4, "b", "b1", 1, 60, 70)
	b.group(1, 3, 4)
	scOK(t, b.h)

	seq := append(History(nil), b.h...)
	seq[3].Group, seq[4].Group = 0, 0
	seq[4].Invoke, seq[4].Return = 71, 80
	scFails(t, seq)
}

// A group follows its process's previous op: a scan after the process's own write must not
// miss it.
func TestSCGroupFollowsProcessOrder(t *testing.T) {
	var b hb
	b.w(1, "a", "a1", 1, 0, 10)
	b.r(1, "a", "", 0, 20, 30)
	b.r(1, "b", "", 0, 20, 30)
	b.group(1, 1, 2)
	v := scFails(t, b.h)
	if !strings.Contains(v.Reason, "absent") {
		t.Fatalf("want the absent read explained: %v", v)
	}
}

// The op after a group follows every member, also one listed before a member placed earlier.
func TestSCOpAfterGroupFollowsEveryMember(t *testing.T) {
	var b hb
	b.w(2, "a", "a1", 5, 0, 100)
	b.r(1, "a", "a1", 5, 20, 30)
	b.r(1, "b", "", 0, 20, 30)
	b.group(1, 1, 2)
	b.r(1, "a", "", 0, 40, 50)
	scFails(t, b.h)

	// Without the last read the history is fine.
	scOK(t, b.h[:3])
}

// Two groups in a row: the second's members follow every member of the first.
func TestSCConsecutiveGroups(t *testing.T) {
	var b hb
	b.w(2, "a", "a1", 5, 0, 100)
	b.r(1, "b", "", 0, 20, 30)
	b.r(1, "a", "a1", 5, 20, 30)
	b.group(1, 1, 2)
	b.r(1, "a", "", 0, 40, 50)
	b.r(1, "b", "", 0, 40, 50)
	b.group(2, 3, 4)
	scFails(t, b.h)
	if v := scGraph(b.h); v == nil {
		t.Fatal("the constraint graph misses the order between two groups")
	}
}

func TestValidateGroups(t *testing.T) {
	ok := func() *hb {
		var b hb
		b.w(1, "a", "a1", 1, 0, 10)
		b.r(2, "a", "a1", 1, 20, 30)
		b.r(2, "b", "", 0, 20, 30)
		b.group(7, 1, 2)
		b.r(2, "a", "a1", 1, 30, 40)
		return &b
	}
	mustValid(t, ok().h)
	for _, c := range []struct {
		name, want string
		edit       func(h History)
	}{
		{"times differ", "differ", func(h History) { h[2].Return = 31 }},
		{"process differs", "differ", func(h History) { h[2].Process = 3 }},
		{"outcome differs", "differ", func(h History) { h[2].Outcome = Failed }},
		{"same key twice", "twice", func(h History) { h[2].Key = "a"; h[2].Found, h[2].Value, h[2].Version = true, "a1", ver(1) }},
		{"a write", "not a read", func(h History) { h[0].Group = 7 }},
		{"interleaved", "comes between", func(h History) {
			// An indeterminate group (no overlap check after it) with another op invoked at
			// the same time between its members.
			h[1].Outcome, h[2].Outcome = Indeterminate, Indeterminate
			h[3].Invoke, h[3].Return, h[2].ID = 20, 30, 5
		}},
		{"overlaps the next op", "overlapping", func(h History) { h[3].Invoke = 25 }},
	} {
		b := ok()
		c.edit(b.h)
		err := b.h.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// With groups, SequentiallyConsistent and the witness order must still agree with the
// exhaustive search, which orders a process's ops by invocation time and so leaves a group's
// members (one invocation) unordered.
func TestSCGroupsAgreeWithExhaustiveSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 29))
	grouped, fails := 0, 0
	for seed := range 5000 {
		h := genSmallSC(rng)
		// Merge some runs of a process's consecutive OK reads of distinct keys into groups.
		last := map[int]int{}
		g := 0
		for i := range h {
			op := &h[i]
			j, ok := last[op.Process]
			last[op.Process] = i
			if !ok || op.Kind != Read || h[j].Kind != Read || h[j].Key == op.Key || h[j].Group != 0 || rng.IntN(2) == 0 {
				continue
			}
			g++
			h[j].Group, op.Group = g, g
			op.Invoke, op.Return = h[j].Invoke, h[j].Return
		}
		if g == 0 {
			continue
		}
		grouped++
		mustValid(t, h)
		v := SequentiallyConsistent(h)
		if want := scOracle(h, false); (v == nil) != want {
			t.Fatalf("seed %d: checker says %v, exhaustive search says consistent=%v; history:\n%v", seed, v, want, h)
		}
		if w := witnessOrder(h); (w == nil) != scOracle(h, true) {
			t.Fatalf("seed %d: witness order says %v, exhaustive search with a global version order disagrees; history:\n%v", seed, w, h)
		}
		if v != nil {
			fails++
		}
	}
	if grouped < 500 || fails == 0 || fails == grouped {
		t.Fatalf("%d histories with groups, %d inconsistent: the generator is lopsided", grouped, fails)
	}
	t.Logf("%d histories with groups, %d inconsistent", grouped, fails)
}
