package catenae_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/replication/catenae"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/wire/peerpb"
)

// newCluster is three regions (RTT 100 ms), one catenae keyspace "ks", started: every
// replica has every other's proposal.
func newCluster(t *testing.T) *replicationtest.Harness {
	t.Helper()
	h := replicationtest.New(t, "catenae", 3, 1, nil)
	settle(h, 200*time.Millisecond)
	return h
}

// settle delivers every message and ticks for d.
func settle(h *replicationtest.Harness, d time.Duration) {
	for end := h.Now.Add(d); h.Now.Before(end); {
		h.Stabilize()
		h.Tick(time.Millisecond)
	}
	h.Stabilize()
}

// await runs the cluster (every message delivered) until request id at node is answered.
func await(t *testing.T, h *replicationtest.Harness, id uint64) engine.Result {
	t.Helper()
	for range 5000 {
		if r, ok := h.Reply(id); ok {
			return r
		}
		h.Stabilize()
		h.Tick(time.Millisecond)
	}
	t.Fatalf("request %d: no answer in 5 s", id)
	return engine.Result{}
}

func read(t *testing.T, h *replicationtest.Harness, node uint32, key string, snaps []engine.TxnSnapshot, readOnly bool) engine.Result {
	t.Helper()
	r := await(t, h, h.Propose(node, engine.Request{Op: engine.OpTxnRead, Keyspace: "ks", Key: []byte(key), Txn: &engine.TxnRequest{Snapshots: snaps, ReadOnly: readOnly}}))
	if r.Err != nil || r.Txn == nil {
		t.Fatalf("read %q at node %d: %v (txn %v)", key, node, r.Err, r.Txn)
	}
	return r
}

type write struct {
	key, value string
	del        bool
}

func commit(t *testing.T, h *replicationtest.Harness, node uint32, reads map[string]uint64, writes ...write) *engine.TxnResult {
	t.Helper()
	return await(t, h, proposeCommit(h, node, reads, writes...)).Txn
}

func proposeCommit(h *replicationtest.Harness, node uint32, reads map[string]uint64, writes ...write) uint64 {
	tx := &engine.TxnRequest{}
	for k, v := range reads {
		tx.Reads = append(tx.Reads, []byte(k))
		tx.ReadVersions = append(tx.ReadVersions, v)
	}
	for _, w := range writes {
		tx.Writes = append(tx.Writes, engine.TxnWrite{Key: []byte(w.key), Value: []byte(w.value), Delete: w.del})
	}
	return h.Propose(node, engine.Request{Op: engine.OpTxnCommit, Keyspace: "ks", Txn: tx})
}

// A commit at one region becomes visible, at one version, to reads at every region once its
// epoch is validated; a delete is a version too.
func TestCommitReadEverywhere(t *testing.T) {
	h := newCluster(t)
	r := read(t, h, 1, "a", nil, false)
	if r.Found || r.Txn.Version != 0 {
		t.Fatalf("fresh key: found %v version %d", r.Found, r.Txn.Version)
	}
	res := commit(t, h, 1, map[string]uint64{"a": 0}, write{key: "a", value: "1"}, write{key: "b", value: ""})
	if !res.Committed || res.Version == 0 {
		t.Fatalf("commit: %+v", res)
	}
	settle(h, 300*time.Millisecond) // validated everywhere
	for _, node := range h.IDs {
		a, b := read(t, h, node, "a", nil, false), read(t, h, node, "b", nil, false)
		if !a.Found || string(a.Value) != "1" || a.Txn.Version != res.Version {
			t.Errorf("node %d reads a = %q found %v version %d, want 1 at %d", node, a.Value, a.Found, a.Txn.Version, res.Version)
		}
		if !b.Found || len(b.Value) != 0 {
			t.Errorf("node %d reads b = %q found %v, want an empty value", node, b.Value, b.Found)
		}
	}
	del := commit(t, h, 2, map[string]uint64{"a": res.Version}, write{key: "a", del: true})
	if !del.Committed {
		t.Fatalf("delete: %+v", del)
	}
	settle(h, 300*time.Millisecond)
	if a := read(t, h, 3, "a", nil, false); a.Found || a.Txn.Version != del.Version {
		t.Errorf("after the delete: found %v version %d, want absent at %d", a.Found, a.Txn.Version, del.Version)
	}
	// Records: the validated versions are in every node's storage alike.
	newest := h.Newest("b")
	if len(newest) != 3 {
		t.Fatalf("b is stored at %d nodes", len(newest))
	}
}

// Two read-modify-writes of one key from two regions at once: one commits, the other aborts
// and says which key; no lost update.
func TestConflictAbortsOne(t *testing.T) {
	h := newCluster(t)
	first := commit(t, h, 1, nil, write{key: "x", value: "0"})
	settle(h, 300*time.Millisecond)
	v := read(t, h, 1, "x", nil, false).Txn.Version
	if v != first.Version {
		t.Fatalf("x at version %d, committed at %d", v, first.Version)
	}
	a := proposeCommit(h, 1, map[string]uint64{"x": v}, write{key: "x", value: "from-1"})
	b := proposeCommit(h, 2, map[string]uint64{"x": v}, write{key: "x", value: "from-2"})
	ra, rb := await(t, h, a), await(t, h, b)
	if ra.Err != nil || rb.Err != nil {
		t.Fatalf("errors: %v, %v", ra.Err, rb.Err)
	}
	if ra.Txn.Committed == rb.Txn.Committed {
		t.Fatalf("both committed or both aborted: %+v %+v", ra.Txn, rb.Txn)
	}
	lost := ra.Txn
	if ra.Txn.Committed {
		lost = rb.Txn
	}
	if string(lost.Key) != "x" || !strings.Contains(lost.Reason, "conflict") {
		t.Errorf("abort names key %q, reason %q", lost.Key, lost.Reason)
	}
}

// A read-only transaction's reads all see one epoch, even with commits in between: the first
// read fixes it (its vector), and the later ones read there.
func TestReadOnlyOneEpoch(t *testing.T) {
	h := newCluster(t)
	commit(t, h, 1, nil, write{key: "p", value: "1"}, write{key: "q", value: "1"})
	settle(h, 300*time.Millisecond)
	first := read(t, h, 2, "p", nil, true)
	if len(first.Txn.Vector) != 1 {
		t.Fatalf("a read-only read returns its snapshot as the vector: %+v", first.Txn)
	}
	commit(t, h, 3, nil, write{key: "p", value: "2"}, write{key: "q", value: "2"})
	settle(h, 300*time.Millisecond)
	second := read(t, h, 2, "q", first.Txn.Vector, true)
	if string(first.Value) != "1" || string(second.Value) != "1" {
		t.Errorf("read-only reads p=%q q=%q, want both from before the second commit", first.Value, second.Value)
	}
	if now := read(t, h, 2, "q", nil, true); string(now.Value) != "2" {
		t.Errorf("a new read-only transaction reads q=%q, want 2", now.Value)
	}
}

// Requests are refused until the replicas have agreed on the start, naming who they wait for;
// a region cut off delays the start, not its safety.
func TestStartHandshake(t *testing.T) {
	h := replicationtest.New(t, "catenae", 3, 1, nil)
	h.Cut[[2]uint32{3, 1}], h.Cut[[2]uint32{3, 2}] = true, true
	h.Tick(time.Millisecond)
	h.Stabilize()
	r := await(t, h, h.Propose(1, engine.Request{Op: engine.OpTxnRead, Keyspace: "ks", Key: []byte("a"), Txn: &engine.TxnRequest{}}))
	if errs.KindOf(r.Err) != errs.Unavailable || !strings.Contains(r.Err.Error(), "[3]") {
		t.Fatalf("before the start: %v", r.Err)
	}
	delete(h.Cut, [2]uint32{3, 1})
	delete(h.Cut, [2]uint32{3, 2})
	settle(h, 500*time.Millisecond) // hellos are repeated every request_after
	if res := commit(t, h, 1, nil, write{key: "a", value: "1"}); !res.Committed {
		t.Fatalf("after the start: %+v", res)
	}
}

// A replica restarted after a crash — mid-epoch, with its messages of the moment lost —
// rebuilds its state from its disk (validated versions, inputs, votes, meta), and the cluster
// goes on: commits from every region, the same data everywhere.
func TestRestartFromDisk(t *testing.T) {
	h := newCluster(t)
	for i := range 20 {
		node := h.IDs[i%3]
		if res := commit(t, h, node, nil, write{key: fmt.Sprintf("k%d", i%4), value: fmt.Sprint(i)}); !res.Committed {
			t.Fatalf("commit %d: %+v", i, res)
		}
		if i == 9 {
			// Crash node 2 with what it just sent lost.
			h.Drop(func(env *peerpb.Envelope) bool { return env.From == 2 })
			h.Restart(2)
		}
	}
	settle(h, time.Second)
	for k := range 4 {
		key := fmt.Sprintf("k%d", k)
		want := read(t, h, 1, key, nil, false)
		for _, node := range h.IDs[1:] {
			got := read(t, h, node, key, nil, false)
			if string(got.Value) != string(want.Value) || got.Txn.Version != want.Txn.Version {
				t.Errorf("%s: node %d has %q@%d, node 1 %q@%d", key, node, got.Value, got.Txn.Version, want.Value, want.Txn.Version)
			}
		}
	}
}

// A node without a replica forwards its clients' requests to the nearest replica.
func TestForwardFromNonReplica(t *testing.T) {
	h := replicationtest.NewWithPlacement(t, "catenae", 3, 1, nil, func(m *placement.Map) *placement.Map {
		ks, _ := m.Keyspace("ks")
		ks.Partitions[0].Replicas = []uint32{1, 2}
		return m
	})
	settle(h, 200*time.Millisecond)
	res := commit(t, h, 3, nil, write{key: "f", value: "v"})
	if !res.Committed {
		t.Fatalf("forwarded commit: %+v", res)
	}
	settle(h, 300*time.Millisecond)
	if r := read(t, h, 3, "f", nil, false); string(r.Value) != "v" || r.Txn.Version != res.Version {
		t.Errorf("forwarded read: %q@%d", r.Value, r.Txn.Version)
	}
	got := await(t, h, h.Propose(3, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("f")}))
	if got.Err != nil || string(got.Value) != "v" {
		t.Errorf("forwarded get: %q, %v", got.Value, got.Err)
	}
}

// The transaction path under faults (loss, reordering, restarts): serializable histories.
func TestSerializableUnderFaults(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newCluster(t)
			err := replicationtest.RunTxnFaults(t, h, replicationtest.TxnFaults{Seed: uint64(seed), Keys: []string{"a", "b", "c", "d", "e"}, ReadOnlyOneIn: 4})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// ... and the test can fail: with OpExpect ignored (reads not validated), some seed's history
// is not serializable.
func TestFaultsCatchIgnoredExpect(t *testing.T) {
	for seed := range 30 {
		h := newCluster(t)
		for _, id := range h.IDs {
			catenae.SetMutationForTest(h.Engine(id, "catenae").(*catenae.Engine), "ignore-expect")
		}
		restarted := func(node uint32) {
			catenae.SetMutationForTest(h.Engine(node, "catenae").(*catenae.Engine), "ignore-expect")
		}
		err := replicationtest.RunTxnFaults(t, h, replicationtest.TxnFaults{Seed: uint64(seed), Keys: []string{"a", "b", "c", "d"}, Restarted: restarted})
		if err != nil {
			t.Logf("caught at seed %d: %v", seed, err)
			return
		}
	}
	t.Error("30 seeds all looked serializable")
}
