package canopus_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	_ "meridian/internal/replication/canopus"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/wire/peerpb"
)

var simOpts = map[string]string{"election_timeout": "300ms", "heartbeat_interval": "50ms"}

// settle runs the cluster until request id is answered (or a bound of virtual time).
func settle(t *testing.T, h *replicationtest.Harness, id uint64) engine.Result {
	t.Helper()
	for range 400 {
		h.Stabilize()
		if r, ok := h.Reply(id); ok {
			return r
		}
		h.Tick(10 * time.Millisecond)
	}
	t.Fatalf("request %d not answered after 4 s of virtual time", id)
	return engine.Result{}
}

func TestWriteThenReadEverywhere(t *testing.T) {
	for _, leases := range []string{"true", "false"} {
		t.Run("write_leases="+leases, func(t *testing.T) {
			opts := map[string]string{"write_leases": leases}
			for k, v := range simOpts {
				opts[k] = v
			}
			h := replicationtest.New(t, config.ProtocolCanopus, 3, 1, opts)
			h.Tick(500 * time.Millisecond)
			w := h.Propose(h.IDs[0], engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: []byte("v1")})
			if r := settle(t, h, w); r.Err != nil || r.Path != "cycle" {
				t.Fatalf("put: %+v", r)
			}
			// Every replica applied the write at the same version.
			h.Tick(300 * time.Millisecond)
			h.Stabilize()
			recs := h.Newest("k")
			if len(recs) != 3 {
				t.Fatalf("the write is on %d replicas, want 3", len(recs))
			}
			for _, r := range recs {
				if string(r.Value) != "v1" || r.Version != recs[h.IDs[0]].Version {
					t.Fatalf("replicas differ: %v", recs)
				}
			}
			// Once the lease has lapsed a read is served at once; without leases it
			// waits for a cycle.
			h.Tick(3 * time.Second)
			rd := h.Propose(h.IDs[2], engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k")})
			r := settle(t, h, rd)
			if r.Err != nil || !r.Found || string(r.Value) != "v1" {
				t.Fatalf("get: %+v", r)
			}
			want := "cycle"
			if leases == "true" {
				want = "lease"
			}
			if r.Path != want {
				t.Errorf("get served by %q, want %q", r.Path, want)
			}
		})
	}
}

// TestRestartReplaysItsLog: a node restarted from its storage rebuilds its cycles from its
// broadcast groups' logs and goes on committing with the others.
func TestRestartReplaysItsLog(t *testing.T) {
	h := replicationtest.New(t, config.ProtocolCanopus, 3, 1, simOpts)
	h.Tick(500 * time.Millisecond)
	for i, v := range []string{"a", "b"} {
		id := h.Propose(h.IDs[i], engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: []byte(v)})
		if r := settle(t, h, id); r.Err != nil {
			t.Fatalf("put %s: %v", v, r.Err)
		}
	}
	h.Restart(h.IDs[2])
	id := h.Propose(h.IDs[2], engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: []byte("c")})
	if r := settle(t, h, id); r.Err != nil {
		t.Fatalf("put after restart: %v", r.Err)
	}
	h.Tick(300 * time.Millisecond)
	h.Stabilize()
	for node, rec := range h.Newest("k") {
		if string(rec.Value) != "c" {
			t.Errorf("node %d holds %q, want c", node, rec.Value)
		}
	}
}

func TestBadRequestsAreRefused(t *testing.T) {
	h := replicationtest.New(t, config.ProtocolCanopus, 3, 1, simOpts)
	for _, tc := range []struct {
		req  engine.Request
		want string
	}{
		{engine.Request{Op: engine.OpMoveMaster, Keyspace: "ks", Key: []byte("k")}, "serves Get, Put, Delete and Scan"},
		{engine.Request{Op: engine.OpGet, Keyspace: "nope", Key: []byte("k")}, "unknown keyspace"},
	} {
		id := h.Propose(h.IDs[0], tc.req)
		r, ok := h.Reply(id)
		if !ok || r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
			t.Errorf("%v: got %+v, want an error containing %q", tc.req.Op, r, tc.want)
		}
	}
	p, _ := engine.Lookup(config.ProtocolCanopus)
	ks, _ := h.Placement(h.IDs[0]).Keyspace("ks")
	if err := p.Check(ks, &engine.Request{Op: engine.OpGet}, "QUORUM"); err == nil {
		t.Error("a consistency level was accepted")
	}
}

func TestOptionsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		opts map[string]string
		want string
	}{
		{map[string]string{"cycle_interval": "0s"}, "cycle_interval"},
		{map[string]string{"max_cycles_in_flight": "100"}, "max_cycles_in_flight"},
		{map[string]string{"tree_height": "1"}, "tree_height"},
		{map[string]string{"heartbeat_interval": "15ms"}, "heartbeat_interval"},
		{map[string]string{"election_timeout": "100ms", "heartbeat_interval": "50ms"}, "election_timeout"},
		{map[string]string{"write_leases": "maybe"}, "write_leases"},
	} {
		_, err := config.CanopusOptionsOf(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %s", tc.opts, err, tc.want)
		}
	}
}

// FuzzDecodeEnvelope: a canopus message of any bytes is rejected or handled, never a panic.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x2a, 0x04, 0x08, 0x01, 0x10, 0x01})
	h := replicationtest.New(f, config.ProtocolCanopus, 3, 1, simOpts)
	h.Tick(300 * time.Millisecond)
	e := h.Engine(h.IDs[0], config.ProtocolCanopus)
	f.Fuzz(func(t *testing.T, b []byte) {
		var c peerpb.CanopusEnvelope
		if err := proto.Unmarshal(b, &c); err != nil {
			return
		}
		c.Keyspace, c.Partition = "ks", 0
		e.Step(h.Now, &peerpb.Envelope{From: h.IDs[1], To: h.IDs[0], Msg: &peerpb.Envelope_Canopus{Canopus: &c}})
		e.Tick(h.Now.Add(10 * time.Millisecond))
		_ = e.Ready()
	})
}
