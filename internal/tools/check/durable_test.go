package check

import (
	"strings"
	"testing"
)

func st(node, key, val string, v int64) ReplicaState {
	s := ReplicaState{Node: node, Key: key}
	if val != "" {
		s.Found, s.Value, s.Version = true, val, ver(v)
	}
	return s
}

func TestDurableAcknowledgedWriteLostFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.w(1, "x", "b", 2, 2, 3)
	// Replicas hold a, older than the acknowledged b.
	final := []ReplicaState{st("n1", "x", "a", 1), st("n2", "x", "a", 1), st("n3", "x", "", 0)}
	v := Durable(b.h, final)
	if v == nil {
		t.Fatal("lost acknowledged write not reported")
	}
	wantOps(t, v, 1)
	for _, s := range []string{"n1", "n3: absent"} {
		wantReason(t, v, s)
	}
}

func TestDurableKeyAbsentEverywhereFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	if v := Durable(b.h, []ReplicaState{st("n1", "x", "", 0), st("n2", "x", "", 0)}); v == nil {
		t.Fatal("key absent everywhere not reported")
	}
	v := Durable(b.h, []ReplicaState{st("n1", "y", "q", 9)})
	if v == nil {
		t.Fatal("key reported by no replica not reported")
	}
	wantReason(t, v, "no replica reported")
}

func TestDurableSameVersionOtherValueFails(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 5, 0, 1)
	if v := Durable(b.h, []ReplicaState{st("n1", "x", "other", 5)}); v == nil {
		t.Fatal("a different value at the write's version does not preserve the write")
	}
}

func TestDurablePresentOrSupersededPasses(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.w(2, "x", "b", 2, 0, 1)
	b.w(2, "y", "c", 3, 2, 3)
	final := []ReplicaState{
		st("n1", "x", "b", 2), st("n2", "x", "a", 1), // a superseded, b present on n1
		st("n1", "y", "later", 9), st("n2", "y", "", 0), // c superseded by a newer write
	}
	if v := Durable(b.h, final); v != nil {
		t.Fatal(v)
	}
	// A tombstone newer than the write supersedes it.
	tomb := ReplicaState{Node: "n1", Key: "x", Version: ver(7)}
	if v := Durable(b.h[:2], []ReplicaState{tomb}); v != nil {
		t.Fatal(v)
	}
}

func TestDurableIndeterminateOrFailedWriteLostPasses(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.indet(1, "x", "b", 2)
	b.failed(2, "y", "c", 0, 1)
	final := []ReplicaState{st("n1", "x", "a", 1), st("n1", "y", "", 0)}
	if v := Durable(b.h, final); v != nil {
		t.Fatal(v)
	}
}

func TestConvergedDisagreementNamesNodes(t *testing.T) {
	final := []ReplicaState{
		st("n1", "a", "same", 1), st("n2", "a", "same", 1),
		st("n3", "x", "v2", 2), st("n1", "x", "v1", 1), st("n2", "x", "v2", 2),
	}
	v := Converged(final)
	if v == nil {
		t.Fatal("disagreement not reported")
	}
	if v.Checker != CheckerConvergent {
		t.Fatal(v.Checker)
	}
	for _, s := range []string{"x", `n1: "v1"`, `n2: "v2"`, `n3: "v2"`} {
		wantReason(t, v, s)
	}
	if strings.Index(v.Reason, "n1") > strings.Index(v.Reason, "n3") {
		t.Fatalf("states not sorted by node: %s", v.Reason)
	}
	// Absent on one replica and present on another is a disagreement too.
	if Converged([]ReplicaState{st("n1", "k", "v", 1), st("n2", "k", "", 0)}) == nil {
		t.Fatal("present vs absent not reported")
	}
	// Same value, different version.
	if Converged([]ReplicaState{st("n1", "k", "v", 1), st("n2", "k", "v", 2)}) == nil {
		t.Fatal("version disagreement not reported")
	}
}

func TestConvergedAgreementPasses(t *testing.T) {
	final := []ReplicaState{
		st("n1", "a", "v", 1), st("n2", "a", "v", 1), st("n3", "a", "v", 1),
		st("n1", "b", "", 0), st("n2", "b", "", 0),
		st("n1", "c", "only", 4),
	}
	if v := Converged(final); v != nil {
		t.Fatal(v)
	}
	if Converged(nil) != nil {
		t.Fatal("no states must pass")
	}
}
