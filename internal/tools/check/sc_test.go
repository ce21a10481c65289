package check

import (
	"testing"

	"meridian/internal/hlc"
)

func scOK(t *testing.T, h History) {
	t.Helper()
	mustValid(t, h)
	if v := SequentiallyConsistent(h); v != nil {
		t.Fatalf("want sequentially consistent, got:\n%v", v)
	}
}

func scFails(t *testing.T, h History) *Violation {
	t.Helper()
	mustValid(t, h)
	v := SequentiallyConsistent(h)
	if v == nil {
		t.Fatal("want a sequential-consistency violation, got none")
	}
	if v.Checker != CheckerSequential || len(v.Ops) == 0 {
		t.Fatalf("violation without ops or checker: %#v", v)
	}
	t.Log(v)
	return v
}

// Sequential consistency ignores real time across processes: B may read an old value after
// A's write completed, as long as B's own order allows it. The same history is not
// linearizable — the difference the two checkers exist to tell apart.
func TestSCAllowsStaleReadsAcrossProcesses(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.w(1, "x", "b", 2, 2, 3)
	b.r(2, "x", "a", 1, 10, 11) // after b completed, in real time
	b.r(2, "x", "a", 1, 12, 13)
	b.r(2, "x", "b", 2, 14, 15)
	b.r(3, "x", "", 0, 20, 21) // p3 has seen nothing: absent is fine
	b.r(3, "x", "b", 2, 22, 23)
	scOK(t, b.h)
	if res, _ := Linearizable(b.h, linTimeout); res != Illegal {
		t.Fatalf("history is not linearizable but Porcupine said %v", res)
	}
}

func TestSCReadOwnWriteThenOlderValueFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.w(2, "x", "b", 2, 2, 3)
	b.r(2, "x", "b", 2, 4, 5)
	b.r(2, "x", "a", 1, 6, 7)
	v := scFails(t, b.h)
	wantOps(t, v, 1, 2, 3)
	if v.Ops[len(v.Ops)-1].ID != 3 {
		t.Fatalf("the stale read should come last: %v", v)
	}
}

func TestSCWriteThenOwnStaleReadFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.w(2, "x", "b", 2, 2, 3)
	b.r(2, "x", "a", 1, 4, 5) // read-your-writes broken
	wantOps(t, scFails(t, b.h), 1, 2)
}

func TestSCAbsentAfterOwnWriteFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.r(1, "x", "", 0, 2, 3)
	v := scFails(t, b.h)
	wantOps(t, v, 0, 1)
	wantReason(t, v, "absent")
}

// Two processes observe two writes to one key in opposite orders: no total order of writes
// explains both.
func TestSCOppositeObservationOrdersFail(t *testing.T) {
	var b hb
	b.w(3, "x", "a", 1, 0, 1)
	b.w(4, "x", "b", 2, 0, 1)
	b.r(1, "x", "a", 1, 2, 3)
	b.r(1, "x", "b", 2, 4, 5)
	b.r(2, "x", "b", 2, 2, 3)
	b.r(2, "x", "a", 1, 4, 5)
	v := scFails(t, b.h)
	wantOps(t, v, 1, 4, 5)
}

// The proxy-timestamp anomaly: a process's second write is stamped lower than its first by a
// coordinator whose clock is behind; last-writer-wins then keeps the first, and the process's
// next read returns it.
func TestSCClockSkewedCoordinatorsFail(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 100, 0, 1).Node = "n1" // n1's clock is ahead
	b.w(1, "x", "b", 50, 2, 3).Node = "n2"
	b.r(1, "x", "a", 100, 4, 5)
	v := scFails(t, b.h)
	wantOps(t, v, 0, 1)
	wantReason(t, v, "reverses the process's order")
	// The same inversion across keys is caught too: another process could see the second
	// write without the first.
	var c hb
	c.w(1, "x", "a", 100, 0, 1)
	c.w(1, "y", "b", 50, 2, 3)
	c.r(2, "y", "b", 50, 4, 5)
	c.r(2, "x", "", 0, 6, 7)
	wantOps(t, scFails(t, c.h), 0, 1, 2, 3)
}

// MeteorShower paper II-D, Lemma 2: in the witness order a read cannot reflect a version
// newer than the process's own next write. Across keys that is a property of the witness,
// not of sequential consistency: the order c, read c, a is legal.
func TestSCReadNewerThanOwnLaterWrite(t *testing.T) {
	var b hb
	b.w(2, "y", "c", 90, 0, 1)
	b.r(1, "y", "c", 90, 2, 3)
	b.w(1, "x", "a", 10, 4, 5)
	if v := witnessOrder(b.h); v == nil {
		t.Fatal("the witness order must fail (Lemma 2)")
	}
	scOK(t, b.h)
	// On one key it is a violation: p1's write a must come after c, yet carries an older
	// version, so last-writer-wins orders it before.
	var c hb
	c.w(2, "x", "c", 90, 0, 1)
	c.r(1, "x", "c", 90, 2, 3)
	c.w(1, "x", "a", 10, 4, 5)
	c.r(1, "x", "c", 90, 6, 7)
	scFails(t, c.h)
}

func TestSCReadOfOwnFutureWriteFails(t *testing.T) {
	var b hb
	b.r(1, "x", "a", 10, 0, 1)
	b.w(1, "x", "a", 10, 2, 3)
	v := scFails(t, b.h)
	wantOps(t, v, 0, 1)
	wantReason(t, v, "own write")
}

func TestSCReadOfValueNobodyWroteFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.r(2, "x", "ghost", 7, 2, 3)
	v := scFails(t, b.h)
	wantOps(t, v, 1)
	wantReason(t, v, "nobody wrote")
}

func TestSCReadOfFailedWriteFails(t *testing.T) {
	var b hb
	b.failed(1, "x", "a", 0, 1)
	b.r(2, "x", "a", 1, 2, 3)
	wantReason(t, scFails(t, b.h), "failed")
}

func TestSCReadOfAnotherKeysValueFails(t *testing.T) {
	var b hb
	b.w(1, "y", "a", 1, 0, 1)
	b.r(2, "x", "a", 1, 2, 3)
	wantOps(t, scFails(t, b.h), 0, 1)
}

func TestSCReadVersionMismatchFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.r(2, "x", "a", 2, 2, 3)
	v := scFails(t, b.h)
	wantOps(t, v, 0, 1)
	wantReason(t, v, "version")
	// A read that carries no version is not compared.
	var c hb
	c.w(1, "x", "a", 1, 0, 1)
	c.r(2, "x", "a", 1, 2, 3).Version = hlc.Version{}
	scOK(t, c.h)
}

func TestSCMultiKeyHistoryPasses(t *testing.T) {
	var b hb
	b.w(1, "x", "x1", 1, 0, 1)
	b.w(2, "y", "y1", 2, 0, 1)
	b.r(3, "y", "y1", 2, 2, 3)
	b.r(3, "x", "x1", 1, 4, 5) // x1 precedes y1: fine
	b.r(4, "x", "", 0, 2, 3)
	b.r(4, "y", "", 0, 4, 5)
	b.w(4, "x", "x2", 3, 6, 7)
	b.r(4, "y", "y1", 2, 8, 9)
	b.r(4, "x", "x2", 3, 10, 11)
	b.w(1, "z", "z1", 4, 2, 3)
	b.r(3, "z", "", 0, 6, 7)
	b.r(3, "x", "x1", 1, 8, 9) // still before x2 for p3
	b.r(3, "z", "z1", 4, 10, 11)
	scOK(t, b.h)
}

// After p3 saw y1 (version 2), x1 (version 1) precedes it in the version order, so the
// witness order of the proof places p3's read of x after x1 and fails. But sequential
// consistency does not order writes to different keys: x1 may come after p3's reads, so the
// history is SC. The checker confirms every witness failure with the exact constraint graph.
func TestSCMultiKeyVersionOrderIsNotRequired(t *testing.T) {
	var b hb
	b.w(1, "x", "x1", 1, 0, 1)
	b.w(2, "y", "y1", 2, 0, 1)
	b.r(3, "y", "y1", 2, 2, 3)
	b.r(3, "z", "", 0, 4, 5)
	b.r(3, "x", "", 0, 6, 7)
	if v := witnessOrder(b.h); v == nil {
		t.Fatal("the witness order must fail here (it orders writes across keys)")
	}
	scOK(t, b.h)
}

// The same pattern on one key is a real violation: p3 saw x2, then x absent.
func TestSCStaleReadOnOneKeyFails(t *testing.T) {
	var b hb
	b.w(1, "x", "x1", 1, 0, 1)
	b.w(2, "x", "x2", 2, 2, 3)
	b.r(3, "x", "x2", 2, 4, 5)
	b.r(3, "z", "", 0, 6, 7)
	b.r(3, "x", "x1", 1, 8, 9)
	v := scFails(t, b.h)
	wantOps(t, v, 1, 2, 3, 4)
}

func TestSCIndeterminateWrites(t *testing.T) {
	t.Run("observed, version learned", func(t *testing.T) {
		var b hb
		b.w(1, "x", "a", 1, 0, 1)
		b.indet(1, "x", "b", 2)
		b.r(2, "x", "b", 5, 10, 11)
		b.r(2, "x", "b", 5, 12, 13)
		scOK(t, b.h)
	})
	t.Run("observed, then older value read by the same process", func(t *testing.T) {
		var b hb
		b.w(1, "x", "a", 1, 0, 1)
		b.indet(1, "x", "b", 2)
		b.r(2, "x", "b", 5, 10, 11)
		b.r(2, "x", "a", 1, 12, 13)
		wantOps(t, scFails(t, b.h), 1, 2, 3)
	})
	t.Run("unobserved is ignored", func(t *testing.T) {
		var b hb
		b.w(1, "x", "a", 1, 0, 1)
		b.indet(1, "x", "b", 2)
		b.r(1, "x", "a", 1, 10, 11)
		scOK(t, b.h)
	})
	// The client abandoned the write and moved on; it was applied later. The process's later
	// ops are not ordered after it.
	t.Run("applied after its process moved on", func(t *testing.T) {
		var b hb
		b.indet(1, "x", "b", 0)
		b.r(1, "x", "", 0, 10, 11)
		b.w(1, "y", "c", 3, 12, 13)
		b.r(2, "x", "b", 5, 20, 21)
		scOK(t, b.h)
	})
	t.Run("follows its process's earlier ops", func(t *testing.T) {
		var b hb
		b.w(1, "x", "a", 9, 0, 1)
		b.indet(1, "x", "b", 2)
		b.r(2, "x", "b", 5, 20, 21) // b stamped below a on the same key, though p1 wrote a first
		wantOps(t, scFails(t, b.h), 0, 1)
	})
	t.Run("below an earlier write of its process, on another key", func(t *testing.T) {
		var b hb
		b.w(1, "x", "a", 9, 0, 1)
		b.indet(1, "y", "b", 2)
		b.r(2, "y", "b", 5, 20, 21) // versions disagree with p1's order, but keys differ: SC
		scOK(t, b.h)
	})
	t.Run("learned versions disagree", func(t *testing.T) {
		var b hb
		b.indet(1, "x", "b", 0)
		b.r(2, "x", "b", 5, 20, 21)
		b.r(3, "x", "b", 6, 22, 23)
		wantOps(t, scFails(t, b.h), 0, 1, 2)
	})
	t.Run("failed write nobody read is ignored", func(t *testing.T) {
		var b hb
		b.failed(1, "x", "z", 0, 1)
		b.r(1, "x", "", 0, 2, 3)
		scOK(t, b.h)
	})
}

func TestSCSameVersionOnOneKeyFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 5, 0, 1)
	b.w(2, "x", "b", 5, 0, 1)
	wantOps(t, scFails(t, b.h), 0, 1)
	// Distinct keys may share a version.
	var c hb
	c.w(1, "x", "a", 5, 0, 1)
	c.w(2, "y", "b", 5, 0, 1)
	c.r(3, "y", "b", 5, 2, 3)
	c.r(3, "x", "a", 5, 4, 5)
	scOK(t, c.h)
}

// The witness follows invocation order, not the order of the slice.
func TestSCUsesInvocationOrder(t *testing.T) {
	var b hb
	b.w(2, "x", "b", 2, 2, 3)
	b.r(2, "x", "a", 1, 4, 5)
	b.w(1, "x", "a", 1, 0, 1)
	wantOps(t, scFails(t, b.h), 0, 1)
	if SequentiallyConsistent(nil) != nil {
		t.Fatal("empty history must pass")
	}
}
