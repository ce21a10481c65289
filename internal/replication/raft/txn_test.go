package raft_test

import (
	"fmt"
	"testing"
	"time"

	"meridian/internal/engine"
	"meridian/internal/replication/raft"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/wire/peerpb"
)

// newTxnCluster is three nodes (one per region) with a transactional keyspace of two
// partitions, leaders elected.
func newTxnCluster(t *testing.T, extra map[string]string) *replicationtest.Harness {
	t.Helper()
	opts := map[string]string{"heartbeat_interval": "100ms", "election_timeout": "500ms", "txn_mode": "sdur"}
	if m := txnModeOf(t); m != "" {
		opts["txn_mode"] = m
	}
	for k, v := range extra {
		opts[k] = v
	}
	h := replicationtest.New(t, "raft", 3, 2, opts)
	for range 200 {
		h.Tick(50 * time.Millisecond)
		h.Stabilize()
		e := h.Engine(h.IDs[0], "raft").(*raft.Engine)
		if e.Leader("ks", partitionIDs(h)[0]) != 0 && e.Leader("ks", partitionIDs(h)[1]) != 0 {
			return h
		}
	}
	t.Fatal("no leaders after 10 s")
	return nil
}

func partitionIDs(h *replicationtest.Harness) []uint32 {
	ks, _ := h.Placement(h.IDs[0]).Keyspace("ks")
	var ids []uint32
	for _, p := range ks.Partitions {
		ids = append(ids, p.ID)
	}
	return ids
}

// keysOf returns n keys of partition i (by index in the placement).
func keysOf(t *testing.T, h *replicationtest.Harness, i, n int) []string {
	t.Helper()
	ks, _ := h.Placement(h.IDs[0]).Keyspace("ks")
	want := ks.Partitions[i].ID
	var out []string
	for j := 0; len(out) < n && j < 100_000; j++ {
		k := string([]byte{byte(j * 37 % 256)}) + fmt.Sprintf("key%05d", j) // partitions are byte ranges
		if ks.Lookup([]byte(k)).ID == want {
			out = append(out, k)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d keys of partition %d", len(out), want)
	}
	return out
}

// txnModes runs a test in both transaction modes (subtests named after them).
func txnModes(t *testing.T, f func(t *testing.T)) {
	for _, m := range []string{"sdur", "2pc"} {
		t.Run(m, f)
	}
}

func txnModeOf(t *testing.T) string {
	for _, m := range []string{"sdur", "2pc"} {
		if len(t.Name()) > len(m) && t.Name()[len(t.Name())-len(m)-1:] == "/"+m {
			return m
		}
	}
	return ""
}

type txnOp struct {
	reads    []string
	versions []uint64
	writes   map[string]string
	snaps    []engine.TxnSnapshot
}

func commitReq(op txnOp) engine.Request {
	t := &engine.TxnRequest{Snapshots: op.snaps, ReadVersions: op.versions}
	for _, k := range op.reads {
		t.Reads = append(t.Reads, []byte(k))
	}
	for k, v := range op.writes {
		t.Writes = append(t.Writes, engine.TxnWrite{Key: []byte(k), Value: []byte(v)})
	}
	return engine.Request{Op: engine.OpTxnCommit, Keyspace: "ks", Txn: t}
}

func commit(t *testing.T, h *replicationtest.Harness, node uint32, op txnOp) *engine.TxnResult {
	t.Helper()
	r := run(t, h, node, commitReq(op))
	if r.Err != nil {
		t.Fatalf("commit at node %d: %v", node, r.Err)
	}
	if r.Txn == nil {
		t.Fatalf("commit at node %d: no transaction result", node)
	}
	return r.Txn
}

func txnRead(t *testing.T, h *replicationtest.Harness, node uint32, key string, snaps []engine.TxnSnapshot) engine.Result {
	t.Helper()
	r := run(t, h, node, engine.Request{Op: engine.OpTxnRead, Keyspace: "ks", Key: []byte(key), Txn: &engine.TxnRequest{Snapshots: snaps}})
	if r.Err != nil {
		t.Fatalf("read %q at node %d: %v", key, node, r.Err)
	}
	if r.Txn == nil {
		t.Fatalf("read %q at node %d: no snapshot in the result", key, node)
	}
	return r
}

// settle lets votes, outcomes and applies finish.
func settleTxns(h *replicationtest.Harness) {
	for range 20 {
		h.Stabilize()
		h.Tick(50 * time.Millisecond)
	}
}

// A local and a global transaction commit; every replica then reads their writes, at
// versions that are the partitions' snapshot counters, through its own replica or a
// forward.
func TestTxnCommitLocalAndGlobal(t *testing.T) { txnModes(t, testTxnCommitLocalAndGlobal) }

func testTxnCommitLocalAndGlobal(t *testing.T) {
	h := newTxnCluster(t, nil)
	a, b := keysOf(t, h, 0, 2), keysOf(t, h, 1, 2)
	if r := commit(t, h, 1, txnOp{writes: map[string]string{a[0]: "local"}}); !r.Committed {
		t.Fatalf("local transaction aborted: %s", r.Reason)
	}
	if r := commit(t, h, 2, txnOp{writes: map[string]string{a[1]: "g1", b[0]: "g2"}}); !r.Committed {
		t.Fatalf("global transaction aborted: %s", r.Reason)
	}
	settleTxns(h)
	for _, node := range h.IDs {
		for k, want := range map[string]string{a[0]: "local", a[1]: "g1", b[0]: "g2"} {
			r := txnRead(t, h, node, k, nil)
			if !r.Found || string(r.Value) != want {
				t.Errorf("node %d reads %q = %q (found %v), want %q", node, k, r.Value, r.Found, want)
			}
			if r.Txn.Version == 0 || (txnModeOf(t) == "sdur" && r.Txn.Version > r.Txn.Snapshot.Counter) {
				t.Errorf("node %d: %q at version %d, snapshot %d", node, k, r.Txn.Version, r.Txn.Snapshot.Counter)
			}
		}
	}
	if r := txnRead(t, h, 3, b[1], nil); r.Found {
		t.Errorf("never written key found: %q", r.Value)
	}
}

// Two transactions read the same key at the same snapshot and both write it: certification
// commits exactly one (the second read a value the first overwrote: lost update).
func TestTxnWriteWriteConflict(t *testing.T) { txnModes(t, testTxnWriteWriteConflict) }

func testTxnWriteWriteConflict(t *testing.T) {
	h := newTxnCluster(t, nil)
	a := keysOf(t, h, 0, 1)[0]
	commit(t, h, 1, txnOp{writes: map[string]string{a: "0"}})
	settleTxns(h)
	r1 := txnRead(t, h, 1, a, nil)
	r2 := txnRead(t, h, 2, a, nil)
	snaps1 := []engine.TxnSnapshot{r1.Txn.Snapshot}
	snaps2 := []engine.TxnSnapshot{r2.Txn.Snapshot}
	// Read-modify-writes: 2PC validates the version read, SDUR certifies the read at the
	// snapshot.
	id1 := h.Propose(1, commitReq(txnOp{reads: []string{a}, versions: []uint64{r1.Txn.Version}, writes: map[string]string{a: "from-1"}, snaps: snaps1}))
	id2 := h.Propose(2, commitReq(txnOp{reads: []string{a}, versions: []uint64{r2.Txn.Version}, writes: map[string]string{a: "from-2"}, snaps: snaps2}))
	var res [2]engine.Result
	for range 400 {
		h.Stabilize()
		h.Tick(10 * time.Millisecond)
		x, ok1 := h.Reply(id1)
		if ok1 {
			res[0] = x
		}
		y, ok2 := h.Reply(id2)
		if ok2 {
			res[1] = y
		}
		if res[0].Txn != nil && res[1].Txn != nil {
			break
		}
	}
	if res[0].Txn == nil || res[1].Txn == nil {
		t.Fatalf("no outcomes: %+v %+v", res[0], res[1])
	}
	if res[0].Txn.Committed == res[1].Txn.Committed {
		t.Fatalf("both %v: %+v %+v", res[0].Txn.Committed, res[0].Txn, res[1].Txn)
	}
	loser := res[0].Txn
	if loser.Committed {
		loser = res[1].Txn
	}
	if loser.Reason == "" || string(loser.Key) != a {
		t.Errorf("abort names reason %q key %q, want a reason and key %q", loser.Reason, loser.Key, a)
	}
}

// A node restarts (its core restored from the saved state and the log replayed after it);
// a follower that misses more than the retained log is caught up by a snapshot carrying the
// transaction state. Both then certify new transactions as the others do.
func TestTxnRestartAndSnapshot(t *testing.T) { txnModes(t, testTxnRestartAndSnapshot) }

func testTxnRestartAndSnapshot(t *testing.T) {
	h := newTxnCluster(t, map[string]string{"log_retain": "10"})
	a, b := keysOf(t, h, 0, 30), keysOf(t, h, 1, 30)
	// Node 3 hears nothing for a while.
	h.Cut[[2]uint32{1, 3}], h.Cut[[2]uint32{3, 1}], h.Cut[[2]uint32{2, 3}], h.Cut[[2]uint32{3, 2}] = true, true, true, true
	node := uint32(1)
	for i := range 30 {
		if r := commit(t, h, node, txnOp{writes: map[string]string{a[i]: fmt.Sprint(i), b[i]: fmt.Sprint(i)}}); !r.Committed {
			t.Fatalf("transaction %d aborted: %s", i, r.Reason)
		}
		if i == 15 {
			h.Restart(1)
			node = 2
			settleTxns(h)
		}
	}
	clear(h.Cut)
	for range 100 {
		h.Stabilize()
		h.Tick(50 * time.Millisecond)
	}
	for _, n := range h.IDs {
		for i := range 30 {
			r := txnRead(t, h, n, a[i], nil)
			if !r.Found || string(r.Value) != fmt.Sprint(i) {
				t.Fatalf("node %d reads %q = %q (found %v), want %d", n, a[i], r.Value, r.Found, i)
			}
		}
	}
	installed := h.Engine(3, "raft").(*raft.Engine).Counters().SnapshotsInstalled.Load()
	if installed == 0 {
		t.Errorf("node 3 caught up without a snapshot (log_retain 10): the test did not test the snapshot path")
	}
	// Everyone certifies alike after: a read-modify-write at node 3 on what it caught up.
	r := txnRead(t, h, 3, a[0], nil)
	if res := commit(t, h, 3, txnOp{reads: []string{a[0]}, versions: []uint64{r.Txn.Version}, writes: map[string]string{b[0]: "after"}, snaps: []engine.TxnSnapshot{r.Txn.Snapshot}}); !res.Committed {
		t.Fatalf("transaction after catch-up aborted: %s (%s)", res.Reason, res.Key)
	}
}

// A plain write on a transactional keyspace is refused with a clear error.
func TestTxnKeyspaceRefusesPlainWrites(t *testing.T) { txnModes(t, testTxnKeyspaceRefusesPlainWrites) }

func testTxnKeyspaceRefusesPlainWrites(t *testing.T) {
	h := newTxnCluster(t, nil)
	r := run(t, h, 1, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: []byte("v")})
	if r.Err == nil {
		t.Fatal("a plain put on a transactional keyspace was accepted")
	}
}

var _ = peerpb.Envelope{}

func isVote(env *peerpb.Envelope) bool {
	m, ok := env.Msg.(*peerpb.Envelope_Txn)
	return ok && m.Txn.GetSdurVote() != nil
}

// Every node here replicates both partitions, so a global's votes go between a node's own
// groups; a vote request from a peer (a replica elsewhere that lost the vote) is answered
// with the partition's vote.
func TestTxnVoteRequestAnswered(t *testing.T) {
	h := newTxnCluster(t, nil)
	a, b := keysOf(t, h, 0, 1)[0], keysOf(t, h, 1, 1)[0]
	res := commit(t, h, 1, txnOp{writes: map[string]string{a: "x", b: "y"}})
	if !res.Committed {
		t.Fatalf("global aborted: %s", res.Reason)
	}
	settleTxns(h)
	var node uint32
	var seq uint64
	if _, err := fmt.Sscanf(res.ID, "t%d.%d", &node, &seq); err != nil {
		t.Fatalf("transaction id %q: %v", res.ID, err)
	}
	p := partitionIDs(h)
	proto, _ := engine.Lookup("raft")
	h.Queue = append(h.Queue, &peerpb.Envelope{From: 3, To: 2, Engine: proto.ID, Msg: &peerpb.Envelope_Txn{Txn: &peerpb.TxnMessage{Keyspace: "ks", Partition: p[0], FromPartition: p[1],
		Body: &peerpb.TxnMessage_VoteRequest{VoteRequest: &peerpb.SdurTxnId{Node: node, Seq: seq}}}}})
	h.Deliver(func(env *peerpb.Envelope) bool { return env.To == 2 })
	var votes []*peerpb.Envelope
	for _, env := range h.Queue {
		if isVote(env) && env.From == 2 && env.To == 3 {
			votes = append(votes, env)
		}
	}
	if len(votes) != 1 {
		t.Fatalf("%d votes answered the request, want 1", len(votes))
	}
	m := votes[0].GetTxn()
	if m.GetPartition() != p[1] || m.GetFromPartition() != p[0] {
		t.Errorf("vote addressed to partition %d from %d, want %d from %d", m.GetPartition(), m.GetFromPartition(), p[1], p[0])
	}
}

// Transactional reads of one partition are served at the snapshot the first read fixed,
// however many transactions commit after it; a later commit based on them aborts.
func TestTxnReadsAtTheirSnapshot(t *testing.T) {
	h := newTxnCluster(t, nil)
	a := keysOf(t, h, 0, 2)
	commit(t, h, 1, txnOp{writes: map[string]string{a[0]: "v1", a[1]: "w1"}})
	settleTxns(h)
	r := txnRead(t, h, 2, a[0], nil)
	snaps := []engine.TxnSnapshot{r.Txn.Snapshot}
	commit(t, h, 3, txnOp{writes: map[string]string{a[0]: "v2", a[1]: "w2"}})
	settleTxns(h)
	r2 := txnRead(t, h, 2, a[1], snaps)
	if string(r2.Value) != "w1" || r2.Txn.Snapshot != snaps[0] {
		t.Fatalf("read at snapshot %v: %q at %v, want w1 at the same snapshot", snaps[0], r2.Value, r2.Txn.Snapshot)
	}
	res := commit(t, h, 2, txnOp{reads: []string{a[1]}, versions: []uint64{r2.Txn.Version}, writes: map[string]string{a[0]: "v3"}, snaps: snaps})
	if res.Committed {
		t.Fatal("a transaction that read an overwritten value committed")
	}
}

// Read-only reads take the newest snapshot vector of their node: after a global commits, a
// later vector holds it in both partitions, and reads at one vector see both its writes or
// neither.
func TestTxnReadOnlyAtSnapshotVectors(t *testing.T) {
	h := newTxnCluster(t, nil)
	a, b := keysOf(t, h, 0, 1)[0], keysOf(t, h, 1, 1)[0]
	for i := range 5 {
		if r := commit(t, h, uint32(1+i%3), txnOp{writes: map[string]string{a: fmt.Sprint(i), b: fmt.Sprint(i)}}); !r.Committed {
			t.Fatalf("global %d aborted: %s", i, r.Reason)
		}
		settleTxns(h)
		for _, node := range h.IDs {
			ra := run(t, h, node, engine.Request{Op: engine.OpTxnRead, Keyspace: "ks", Key: []byte(a), Txn: &engine.TxnRequest{ReadOnly: true}})
			if ra.Err != nil || ra.Txn == nil || len(ra.Txn.Vector) != 2 {
				t.Fatalf("node %d: read-only read: %v %+v", node, ra.Err, ra.Txn)
			}
			rb := run(t, h, node, engine.Request{Op: engine.OpTxnRead, Keyspace: "ks", Key: []byte(b), Txn: &engine.TxnRequest{ReadOnly: true, Snapshots: ra.Txn.Vector}})
			if rb.Err != nil {
				t.Fatalf("node %d: second read: %v", node, rb.Err)
			}
			if string(ra.Value) != string(rb.Value) {
				t.Fatalf("node %d: fractured read-only read at vector %v: %q and %q", node, ra.Txn.Vector, ra.Value, rb.Value)
			}
			if string(ra.Value) != fmt.Sprint(i) {
				t.Errorf("node %d: read-only read after settling is %q, want %d (vectors not advancing?)", node, ra.Value, i)
			}
		}
	}
	if n := h.Engine(leaderOfPartition(h, partitionIDs(h)[0]), "raft").(*raft.Engine).Counters().TxnVectors.Load(); n == 0 {
		t.Error("no vectors published")
	}
}

func leaderOfPartition(h *replicationtest.Harness, p uint32) uint32 {
	return uint32(h.Engine(h.IDs[0], "raft").(*raft.Engine).Leader("ks", p))
}

// Delaying: with a fixed Δ, a global's parts for partitions led in the submitter's region are
// held back Δ (here every partition is led in region r1, node 1's); it then commits.
func TestTxnDelayHoldsLocalParts(t *testing.T) {
	h := newTxnCluster(t, map[string]string{"txn_delay": "300ms", "leader_region": "r1"})
	for range 100 { // leaders steered to r1
		h.Tick(50 * time.Millisecond)
		h.Stabilize()
		if leaderOfPartition(h, partitionIDs(h)[0]) == 1 && leaderOfPartition(h, partitionIDs(h)[1]) == 1 {
			break
		}
	}
	a, b := keysOf(t, h, 0, 1)[0], keysOf(t, h, 1, 1)[0]
	id := h.Propose(1, commitReq(txnOp{writes: map[string]string{a: "x", b: "y"}}))
	start := h.Now
	for h.Now.Sub(start) < 250*time.Millisecond {
		h.Stabilize()
		h.Tick(10 * time.Millisecond)
		if _, ok := h.Reply(id); ok {
			t.Fatalf("the global was decided after %v, before its parts' delay of 300ms", h.Now.Sub(start))
		}
	}
	for range 200 {
		h.Stabilize()
		h.Tick(10 * time.Millisecond)
		if r, ok := h.Reply(id); ok {
			if r.Err != nil || !r.Txn.Committed {
				t.Fatalf("delayed global: %v %+v", r.Err, r.Txn)
			}
			return
		}
	}
	t.Fatal("the delayed global was never decided")
}
