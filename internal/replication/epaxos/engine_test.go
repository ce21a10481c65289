package epaxos

import (
	"testing"

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
