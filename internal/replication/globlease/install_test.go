package globlease_test

import (
	"testing"
	"time"

	"meridian/internal/placement"
	_ "meridian/internal/replication/globlease"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/wire/peerpb"
)

// A GlobLease keyspace created more than election_timeout after the nodes started must not
// make its replicas elect a successor for the master at once: they have not yet had a chance
// to hear its heartbeats. (CI caught this: a keyspace created 1 s after start, with
// election_timeout=1s, had its keys taken over by n2 before the first write.) Failure
// detection counts silence from when this node installed the partition.
func TestGlobLeaseKeyspaceCreatedLateDoesNotElect(t *testing.T) {
	h := replicationtest.New(t, "globlease", 3, 1, map[string]string{
		"lease": "2s", "master_lease": "500ms", "election_timeout": "1s", "hot_keys": "false", "auto_migrate": "false",
	})
	full := h.Hosts[1].Placement()
	empty := *h.Cluster
	empty.Keyspaces = nil
	pm0, err := placement.Build(&empty)
	if err != nil {
		t.Fatal(err)
	}
	h.SetPlacement(pm0)
	h.Tick(3 * time.Second) // the nodes run without the keyspace for 3 election timeouts
	h.Stabilize()
	h.SetPlacement(full)
	elections := 0
	for range 50 { // 500 ms, less than one election timeout after the install
		h.Tick(10 * time.Millisecond)
		for _, env := range h.Deliver(func(*peerpb.Envelope) bool { return true }) {
			if _, ok := env.Msg.(*peerpb.Envelope_GlPrepare); ok {
				elections++
			}
		}
	}
	if elections > 0 {
		t.Fatalf("%d gl_prepare messages within 500 ms of installing the keyspace; want none (the master n1 is alive)", elections)
	}
}

// TestInteraction runs GlobLease's trace scripts in testdata/ (replicationtest.RunInteractions
// documents the commands).
func TestInteraction(t *testing.T) {
	replicationtest.RunInteractions(t, "testdata", "globlease")
}
