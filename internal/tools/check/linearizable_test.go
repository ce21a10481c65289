package check

import (
	"fmt"
	"testing"
	"time"
)

const linTimeout = 10 * time.Second

func linOK(t *testing.T, h History) {
	t.Helper()
	mustValid(t, h)
	if res, v := Linearizable(h, linTimeout); res != Ok || v != nil {
		t.Fatalf("want linearizable, got %v: %v", res, v)
	}
}

func linIllegal(t *testing.T, h History) *Violation {
	t.Helper()
	mustValid(t, h)
	res, v := Linearizable(h, linTimeout)
	if res != Illegal || v == nil {
		t.Fatalf("want a linearizability violation, got %v", res)
	}
	if v.Checker != CheckerLinearizable || len(v.Ops) == 0 {
		t.Fatalf("violation without ops or checker: %#v", v)
	}
	return v
}

func TestLinearizableSequentialHistoryPasses(t *testing.T) {
	var b hb
	b.r(2, "x", "", 0, 0, 1)
	b.w(1, "x", "a", 1, 2, 3)
	b.r(2, "x", "a", 1, 4, 5)
	b.w(3, "y", "c", 2, 6, 7)
	b.w(1, "x", "b", 3, 8, 9)
	b.r(3, "x", "b", 3, 10, 11)
	b.r(2, "y", "c", 2, 12, 13)
	linOK(t, b.h)
}

func TestLinearizableStaleReadAfterCompletedWriteFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.w(1, "x", "b", 2, 2, 3)
	b.r(2, "x", "a", 1, 4, 5) // b completed before this read began
	v := linIllegal(t, b.h)
	wantOps(t, v, 0, 1, 2)
	wantReason(t, v, "stale read")
}

func TestLinearizableStaleAbsentReadFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.r(2, "x", "", 0, 4, 5)
	wantOps(t, linIllegal(t, b.h), 0, 1)
}

func TestLinearizableConcurrentWriteAndReadPassBothWays(t *testing.T) {
	for _, val := range []string{"", "a"} {
		t.Run(fmt.Sprintf("read=%q", val), func(t *testing.T) {
			var b hb
			b.w(1, "x", "a", 1, 0, 10)
			b.r(2, "x", val, 1, 2, 5)
			linOK(t, b.h)
		})
	}
	// Touching intervals are concurrent (Porcupine's closed intervals).
	var b hb
	b.w(1, "x", "a", 1, 0, 10)
	b.r(2, "x", "", 0, 10, 12)
	linOK(t, b.h)
}

func TestLinearizableIndeterminateWriteObservedLaterPasses(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.indet(1, "x", "b", 2)     // timed out
	b.r(2, "x", "a", 1, 3, 4)   // not applied yet
	b.r(2, "x", "b", 5, 50, 51) // applied much later
	b.r(3, "x", "b", 5, 60, 61)
	linOK(t, b.h)
}

func TestLinearizableIndeterminateWriteNobodyObservedPasses(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.indet(1, "x", "b", 2)
	b.r(2, "x", "a", 1, 3, 4)
	b.r(3, "x", "a", 1, 100, 101)
	linOK(t, b.h)
}

func TestLinearizableIndeterminateWriteObservedThenUnseenFails(t *testing.T) {
	var b hb
	b.indet(1, "x", "a", 0)
	b.r(2, "x", "a", 3, 5, 6) // a is in effect by 6
	b.r(3, "x", "", 0, 10, 11)
	v := linIllegal(t, b.h)
	wantOps(t, v, 0, 1, 2)
}

func TestLinearizableFailedWriteReadFails(t *testing.T) {
	var b hb
	b.failed(1, "x", "a", 0, 1)
	b.r(2, "x", "a", 1, 2, 3)
	v := linIllegal(t, b.h)
	wantOps(t, v, 0, 1)
	wantReason(t, v, "failed")
}

func TestLinearizableReadBeforeWriteInvokedFails(t *testing.T) {
	var b hb
	b.r(2, "x", "a", 1, 0, 1)
	b.w(1, "x", "a", 1, 5, 6)
	wantOps(t, linIllegal(t, b.h), 0, 1)
}

// A violation the direct patterns miss (every interval overlaps one write) is explained by
// shrinking; the shrunk ops must still be non-linearizable on their own.
func TestLinearizableShrinksOtherViolations(t *testing.T) {
	var b hb
	// a and b concurrent; p3 sees a, then b, then a again: b must lie between the first two
	// reads and a cannot come back.
	b.w(1, "x", "a", 1, 0, 100)
	b.w(2, "x", "b", 2, 0, 100)
	b.r(3, "x", "a", 1, 10, 11)
	b.r(3, "x", "b", 2, 20, 21)
	b.r(3, "x", "a", 1, 30, 31)
	// Noise on other keys and on x that the explanation must drop.
	for i := range 20 {
		b.w(4, "y", fmt.Sprintf("y%d", i), int64(10+i), int64(200+2*i), int64(201+2*i))
		b.r(5, "x", "b", 2, int64(200+2*i), int64(201+2*i))
	}
	v := linIllegal(t, b.h)
	if len(v.Ops) > 5 {
		t.Fatalf("explanation not shrunk: %v", v)
	}
	var sub History
	sub = append(sub, v.Ops...)
	if res, _ := Linearizable(sub, linTimeout); res != Illegal {
		t.Fatalf("the explanation's ops alone are %v, want illegal:\n%v", res, v)
	}
}

// A search that cannot finish in time is Unknown: neither a pass nor a violation.
func TestLinearizableTimeoutIsUnknown(t *testing.T) {
	var b hb
	// 20 concurrent writes, each read by a concurrent read, then one process reading v0, v1,
	// v0 again (impossible: v0 cannot come back). No direct pattern shows it, and Porcupine
	// must exhaust ~2^40 interleavings of the concurrent part to call it illegal.
	for i := range 20 {
		b.w(i, "x", fmt.Sprintf("v%d", i), int64(i+1), 0, 1000)
		b.r(100+i, "x", fmt.Sprintf("v%d", i), int64(i+1), 0, 1000)
	}
	b.r(200, "x", "v0", 1, 2000, 2001)
	b.r(200, "x", "v1", 2, 2002, 2003)
	b.r(200, "x", "v0", 1, 2004, 2005)
	h := b.h
	mustValid(t, h)
	res, v := Linearizable(h, time.Millisecond)
	if res != Unknown || v != nil {
		t.Fatalf("want Unknown and no violation, got %v %v", res, v)
	}
}

func TestLinearizableEmptyHistory(t *testing.T) {
	if res, v := Linearizable(nil, linTimeout); res != Ok || v != nil {
		t.Fatalf("%v %v", res, v)
	}
}
