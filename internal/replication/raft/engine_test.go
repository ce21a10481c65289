package raft_test

import (
	"testing"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/replication/raft"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/wire/peerpb"
)

func newCluster(t *testing.T) *replicationtest.Harness {
	t.Helper()
	h := replicationtest.New(t, "raft", 3, 1, map[string]string{"heartbeat_interval": "100ms", "election_timeout": "500ms"})
	// Elect a leader: tick until one node accepts a write, delivering everything.
	for range 100 {
		h.Tick(50 * time.Millisecond)
		h.Stabilize()
		if leaderOf(h) != 0 {
			return h
		}
	}
	t.Fatal("no leader after 5 s")
	return nil
}

func leaderOf(h *replicationtest.Harness) uint32 {
	for _, id := range h.IDs {
		if h.Engine(id, "raft").(*raft.Engine).Leader("ks", 0) == uint64(id) {
			return id
		}
	}
	return 0
}

// run proposes req at node and delivers messages until it is answered.
func run(t *testing.T, h *replicationtest.Harness, node uint32, req engine.Request) engine.Result {
	t.Helper()
	id := h.Propose(node, req)
	for range 200 {
		if r, ok := h.Reply(id); ok {
			return r
		}
		h.Stabilize()
		h.Tick(10 * time.Millisecond)
	}
	t.Fatalf("request %d at node %d not answered", id, node)
	return engine.Result{}
}

// A write through a follower commits through the leader; linearizable reads at every node see
// it, a delete hides it, and versions grow in log order.
func TestWriteThenReadEverywhere(t *testing.T) {
	h := newCluster(t)
	leader := leaderOf(h)
	follower := h.IDs[0]
	if follower == leader {
		follower = h.IDs[1]
	}
	w := run(t, h, follower, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: []byte("v1")})
	if w.Err != nil {
		t.Fatalf("put through a follower: %v", w.Err)
	}
	for _, id := range h.IDs {
		r := run(t, h, id, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k")})
		if r.Err != nil || !r.Found || string(r.Value) != "v1" || r.Version != w.Version || r.Path != raft.PathReadIndex {
			t.Fatalf("linearizable read at node %d: %+v, want v1 at %s via %s", id, r, w.Version, raft.PathReadIndex)
		}
	}
	d := run(t, h, leader, engine.Request{Op: engine.OpDelete, Keyspace: "ks", Key: []byte("k")})
	if d.Err != nil || !w.Version.Less(d.Version) {
		t.Fatalf("delete: %+v (write was %s)", d, w.Version)
	}
	r := run(t, h, follower, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k"), Level: config.LevelStale})
	if r.Err != nil || r.Found || r.Path != raft.PathStale {
		t.Fatalf("stale read after the delete applied everywhere: %+v", r)
	}
}

// A node cut off from the others cannot serve a linearizable read (no majority confirms its
// leadership), while a stale read answers at once from its applied state.
func TestPartitionedNodeRefusesLinearizableReads(t *testing.T) {
	h := newCluster(t)
	leader := leaderOf(h)
	if r := run(t, h, leader, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: []byte("v1")}); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.Stabilize()
	for _, id := range h.IDs {
		if id != leader {
			h.Cut[[2]uint32{leader, id}], h.Cut[[2]uint32{id, leader}] = true, true
		}
	}
	id := h.Propose(leader, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k"), Deadline: h.Now.Add(3 * time.Second)})
	for range 40 {
		h.Tick(100 * time.Millisecond)
		h.Drop(func(env *peerpb.Envelope) bool { return h.Cut[[2]uint32{env.From, env.To}] })
		h.Stabilize()
	}
	r, ok := h.Reply(id)
	if ok && r.Err == nil {
		t.Fatalf("a partitioned ex-leader served a linearizable read: %+v", r)
	}
	s := run(t, h, leader, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k"), Level: config.LevelStale})
	if s.Err != nil || string(s.Value) != "v1" || s.Path != raft.PathStale {
		t.Fatalf("stale read at the cut-off node: %+v", s)
	}
}
