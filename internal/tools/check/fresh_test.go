package check

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func freshOK(t *testing.T, h History) {
	t.Helper()
	mustValid(t, h)
	if v := FreshReads(h); v != nil {
		t.Fatalf("want every read fresh, got:\n%v", v)
	}
}

func freshFails(t *testing.T, h History, want string) *Violation {
	t.Helper()
	mustValid(t, h)
	v := FreshReads(h)
	if v == nil {
		t.Fatal("want a fresh-reads violation, got none")
	}
	if v.Checker != CheckerFresh || !strings.Contains(v.Reason, want) {
		t.Fatalf("want a %s violation saying %q, got:\n%v", CheckerFresh, want, v)
	}
	t.Log(v)
	return v
}

// What reads at ONE promise with writes at ALL, and sequential consistency does not allow: a
// write still in progress (here one that timed out, having reached one replica) is seen by
// one read and not by the process's next one, at another replica.
func TestFreshReadsAllowPartlyAppliedWrites(t *testing.T) {
	var b hb
	b.w(1, "a", "a1", 1, 0, 10)
	b.indet(2, "a", "a2", 20)
	b.r(3, "a", "a2", 2, 30, 40).Version = ver(2)
	b.r(3, "a", "a1", 1, 50, 60)
	freshOK(t, b.h)
	if SequentiallyConsistent(b.h) == nil {
		t.Fatal("sequential consistency allows what it must not: the test shows nothing")
	}
	// A read concurrent with the write's acknowledgement may return the older value.
	var c hb
	c.w(1, "a", "a1", 1, 0, 10)
	c.w(1, "a", "a2", 2, 20, 40)
	c.r(2, "a", "a1", 1, 30, 50)
	freshOK(t, c.h)
}

func TestFreshReadsViolations(t *testing.T) {
	t.Run("stale after acknowledgement", func(t *testing.T) {
		var b hb
		b.w(1, "a", "a1", 1, 0, 10)
		b.w(1, "a", "a2", 2, 20, 30)
		b.r(2, "a", "a1", 1, 31, 40)
		wantOps(t, freshFails(t, b.h, "older than"), 1, 2)
	})
	t.Run("newest by version, not by time", func(t *testing.T) {
		// a2 was acknowledged last but carries the older version: last writer wins, so a1
		// is the newest acknowledged write and a2 is stale.
		var b hb
		b.w(1, "a", "a1", 5, 0, 10)
		b.w(2, "a", "a2", 3, 0, 20)
		b.r(3, "a", "a1", 5, 30, 40)
		freshOK(t, b.h)
		b.h[2].Value, b.h[2].Version = "a2", ver(3)
		freshFails(t, b.h, "older than")
	})
	t.Run("absent after acknowledgement", func(t *testing.T) {
		var b hb
		b.w(1, "a", "a1", 1, 0, 10)
		b.r(2, "a", "", 0, 11, 20)
		freshFails(t, b.h, "absent")
	})
	t.Run("value nobody wrote", func(t *testing.T) {
		var b hb
		b.r(2, "a", "zz", 1, 11, 20)
		freshFails(t, b.h, "nobody wrote")
	})
	t.Run("failed write", func(t *testing.T) {
		var b hb
		b.failed(1, "a", "a1", 0, 10)
		b.r(2, "a", "a1", 1, 11, 20)
		freshFails(t, b.h, "failed")
	})
	t.Run("future write", func(t *testing.T) {
		var b hb
		b.r(2, "a", "a1", 1, 0, 10)
		b.w(1, "a", "a1", 1, 20, 30)
		freshFails(t, b.h, "after the read returned")
	})
	t.Run("another key's value", func(t *testing.T) {
		var b hb
		b.w(1, "b", "b1", 1, 0, 10)
		b.r(2, "a", "b1", 1, 20, 30)
		freshFails(t, b.h, "written to b")
	})
	t.Run("version mismatch", func(t *testing.T) {
		var b hb
		b.w(1, "a", "a1", 1, 0, 10)
		b.r(2, "a", "a1", 2, 20, 30)
		freshFails(t, b.h, "has version")
	})
}

// CheckAll runs fresh reads instead of sequential consistency when asked.
func TestCheckAllFreshReads(t *testing.T) {
	var b hb
	b.w(1, "a", "a1", 1, 0, 10)
	b.indet(2, "a", "a2", 20)
	b.r(3, "a", "a2", 2, 30, 40)
	b.r(3, "a", "a1", 1, 50, 60)
	if vs := CheckAll(b.h, nil, Options{}); len(vs) == 0 || vs[0].Checker != CheckerSequential {
		t.Fatalf("CheckAll without FreshReads: %v", vs)
	}
	for _, v := range CheckAll(b.h, nil, Options{FreshReads: true}) {
		if v.Checker == CheckerSequential || v.Checker == CheckerFresh {
			t.Fatalf("CheckAll with FreshReads: %v", v)
		}
	}
}

// Sequential executions are fresh; a read made stale by staleMutation (older than a write
// acknowledged before it, in a sequential execution) is not.
func TestFreshReadsOnSequentialHistories(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 37))
	mutated := 0
	for seed := range 300 {
		g := genSequential(rng, 1+rng.IntN(5), 1+rng.IntN(4), 20+rng.IntN(200))
		if v := FreshReads(g.h); v != nil {
			t.Fatalf("seed %d: sequential history flagged:\n%v", seed, v)
		}
		m, r := staleMutation(rng, g)
		if r < 0 {
			continue
		}
		mutated++
		v := FreshReads(m)
		if v == nil || !slices.ContainsFunc(v.Ops, func(op Op) bool { return op.ID == r }) {
			t.Fatalf("seed %d: stale read op#%d not flagged: %v", seed, r, v)
		}
	}
	if mutated < 100 {
		t.Fatalf("only %d of 300 histories mutated", mutated)
	}
}
