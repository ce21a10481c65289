package check

import (
	"strings"
	"testing"

	"meridian/internal/hlc"
)

// hb builds histories tersely: every op gets the next ID; times are given explicitly so each
// test's real-time order is visible at the call site.
type hb struct{ h History }

func ver(n int64) hlc.Version { return hlc.Version{WallNanos: n, NodeID: 1} }

func (b *hb) add(op Op) *Op {
	op.ID = len(b.h)
	if op.Outcome == 0 {
		op.Outcome = OK
	}
	if op.Node == "" {
		op.Node = "n1"
	}
	b.h = append(b.h, op)
	return &b.h[len(b.h)-1]
}

// w records an OK write of key=val stamped with version v, over [inv, ret].
func (b *hb) w(p int, key, val string, v, inv, ret int64) *Op {
	return b.add(Op{Process: p, Kind: Write, Key: key, Value: val, Version: ver(v), Invoke: inv, Return: ret})
}

// r records an OK read of key returning val with version v ("" means absent).
func (b *hb) r(p int, key, val string, v, inv, ret int64) *Op {
	op := Op{Process: p, Kind: Read, Key: key, Invoke: inv, Return: ret}
	if val != "" {
		op.Found, op.Value, op.Version = true, val, ver(v)
	}
	return b.add(op)
}

// indet records an indeterminate write with no known version.
func (b *hb) indet(p int, key, val string, inv int64) *Op {
	return b.add(Op{Process: p, Kind: Write, Key: key, Value: val, Outcome: Indeterminate, Invoke: inv})
}

// failed records a failed write.
func (b *hb) failed(p int, key, val string, inv, ret int64) *Op {
	return b.add(Op{Process: p, Kind: Write, Key: key, Value: val, Outcome: Failed, Invoke: inv, Return: ret})
}

func mustValid(t *testing.T, h History) {
	t.Helper()
	if err := h.Validate(); err != nil {
		t.Fatalf("test history is malformed: %v", err)
	}
}

// opIDs lists the IDs of a violation's ops.
func opIDs(v *Violation) []int {
	var ids []int
	for _, op := range v.Ops {
		ids = append(ids, op.ID)
	}
	return ids
}

// wantOps asserts that the violation names exactly the ops with these IDs (in any order).
func wantOps(t *testing.T, v *Violation, ids ...int) {
	t.Helper()
	got := opIDs(v)
	if len(got) != len(ids) {
		t.Fatalf("violation names ops %v, want %v:\n%v", got, ids, v)
	}
	for _, id := range ids {
		found := false
		for _, g := range got {
			found = found || g == id
		}
		if !found {
			t.Fatalf("violation names ops %v, want %v:\n%v", got, ids, v)
		}
	}
}

func wantReason(t *testing.T, v *Violation, sub string) {
	t.Helper()
	if !strings.Contains(v.Reason, sub) {
		t.Fatalf("violation reason %q does not mention %q", v.Reason, sub)
	}
}
