package epaxos

import (
	"testing"
	"time"

	"meridian/internal/engine"
	"meridian/internal/topology"
)

// The bound is the round trip to the farthest replica the fast quorum needs.
func TestLowerBound(t *testing.T) {
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		region string
		per    int
		want   float64
	}{
		{"europe", 1, 100}, // 3 replicas: fast quorum 2, the nearest other region
		{"asia", 1, 150},
		{"europe", 2, 100}, // 6 replicas: fast quorum 4 (local, then us's two)
		{"europe", 3, 250}, // 9 replicas: fast quorum 8, asia too
		{"us", 3, 150},
	} {
		got, ok := lowerBoundMs(topo, engine.BoundQuery{Region: tc.region, Op: "write", ReplicasPerRegion: tc.per})
		if !ok || got != tc.want {
			t.Errorf("%s with %d per region: %v ms, want %v", tc.region, tc.per, got, tc.want)
		}
	}
}

// TestAdmitRefusesBehindABacklog: new requests are refused while the oldest unexecuted
// command has waited overload_after, also after its request expired (its command still
// travels), and admitted again once it executes; a command that never executes (its
// instance recovered as a no-op) is forgotten after twice the bound.
func TestAdmitRefusesBehindABacklog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sp := &space{waiting: map[uint64]engine.Request{}, unexecuted: map[uint64]struct{}{}, overloadAfter: time.Second}
	if _, ok := sp.admit(t0); !ok {
		t.Fatal("an idle replica refused a request")
	}
	sp.arrived(1, t0)
	sp.arrived(2, t0.Add(500*time.Millisecond))
	if w, ok := sp.admit(t0.Add(900 * time.Millisecond)); !ok || w != 900*time.Millisecond {
		t.Fatalf("admit after 900ms = %v, %t; want 900ms, admitted", w, ok)
	}
	// Request 1 expired at its client (no longer waiting), but its command has not executed.
	if w, ok := sp.admit(t0.Add(time.Second)); ok || w != time.Second {
		t.Fatalf("admit with a command unexecuted for 1s = %v, %t; want refused", w, ok)
	}
	delete(sp.unexecuted, 1) // executed
	if w, ok := sp.admit(t0.Add(1200 * time.Millisecond)); !ok || w != 700*time.Millisecond {
		t.Fatalf("after the oldest executed, admit = %v, %t; want 700ms (request 2), admitted", w, ok)
	}
	// Request 2's command never executes: refused from 1.5s, forgotten at 2.5s.
	if _, ok := sp.admit(t0.Add(2400 * time.Millisecond)); ok {
		t.Fatal("admitted behind a command unexecuted for 1.9s")
	}
	if _, ok := sp.admit(t0.Add(2500 * time.Millisecond)); !ok {
		t.Fatal("a command unexecuted for twice overload_after still holds admission shut")
	}
	if len(sp.unexecuted) != 0 || len(sp.arrivals) != 0 {
		t.Fatalf("left %d unexecuted, %d arrivals; want none", len(sp.unexecuted), len(sp.arrivals))
	}
}
