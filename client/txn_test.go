package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
)

// txnNode fakes a transactional keyspace "tx" of two partitions (keys before "n": 0, the
// others: 1) whose snapshot counters are 10 and 20. It serves TxnRead as the API says (a
// partition with a snapshot in the request is read at it, another at its latest counter)
// from a fixed data set, and answers TxnCommit with an abort while aborts > 0, else a commit.
// It records every request.
type txnNode struct {
	meridianpb.UnimplementedMeridianServer
	mu      sync.Mutex
	data    map[string]string
	latest  map[uint32]uint64
	aborts  int
	reads   []*meridianpb.TxnReadRequest
	commits []*meridianpb.TxnCommitRequest
}

func newTxnNode() *txnNode {
	return &txnNode{data: map[string]string{"a": "1", "b": "2", "x": "24", "y": "25"}, latest: map[uint32]uint64{0: 10, 1: 20}}
}

func partitionOf(key []byte) uint32 {
	if string(key) < "n" {
		return 0
	}
	return 1
}

func (n *txnNode) TxnRead(_ context.Context, r *meridianpb.TxnReadRequest) (*meridianpb.TxnReadResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reads = append(n.reads, r)
	if r.Keyspace == "old" {
		return nil, status.Error(codes.Aborted, `keyspace "old" partition 0: the transaction's snapshot 1 is older than the partition keeps (5): restart the transaction`)
	}
	if r.Keyspace != "tx" {
		return nil, status.Errorf(codes.InvalidArgument, "keyspace %q is not transactional (txn_mode none): use Get/Put/Delete, or create it with txn_mode sdur", r.Keyspace)
	}
	snaps := map[uint32]uint64{}
	for _, s := range r.Snapshots {
		snaps[s.Partition] = s.Counter
	}
	out := &meridianpb.TxnReadResponse{Coordinator: "fake"}
	for _, k := range r.Keys {
		p := partitionOf(k)
		if _, ok := snaps[p]; !ok {
			snaps[p] = n.latest[p]
		}
		v, found := n.data[string(k)]
		out.Values = append(out.Values, &meridianpb.TxnValue{Key: k, Found: found, Value: []byte(v), Version: snaps[p] - 1, Partition: p})
	}
	for _, p := range []uint32{0, 1} {
		if c, ok := snaps[p]; ok {
			out.Snapshots = append(out.Snapshots, &meridianpb.TxnSnapshot{Partition: p, Counter: c})
		}
	}
	return out, nil
}

func (n *txnNode) TxnCommit(_ context.Context, r *meridianpb.TxnCommitRequest) (*meridianpb.TxnCommitResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.commits = append(n.commits, r)
	id := fmt.Sprintf("t%d", len(n.commits))
	if n.aborts > 0 {
		n.aborts--
		return &meridianpb.TxnCommitResponse{Reason: "conflict: read overwritten since the snapshot", Key: []byte("x"), Txn: id}, nil
	}
	return &meridianpb.TxnCommitResponse{Committed: true, Version: 11, Txn: id, Coordinator: "fake"}, nil
}

func (n *txnNode) ServerInfo(context.Context, *meridianpb.ServerInfoRequest) (*meridianpb.ServerInfoResponse, error) {
	return &meridianpb.ServerInfoResponse{Node: "fake", MaxValueBytes: 1 << 20, MaxTxnKeys: 1024}, nil
}

func (n *txnNode) counts() (reads, commits int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.reads), len(n.commits)
}

func startTxnNode(t *testing.T) (*Client, *txnNode) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := newTxnNode()
	s := grpc.NewServer()
	meridianpb.RegisterMeridianServer(s, n)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	c, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, n
}

func snapsString(s []*meridianpb.TxnSnapshot) string {
	var parts []string
	for _, x := range s {
		parts = append(parts, fmt.Sprintf("%d:%d", x.Partition, x.Counter))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func mustGet(t *testing.T, tx *Txn, key string) (string, bool) {
	t.Helper()
	v, found, err := tx.Get(context.Background(), []byte(key))
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(v), found
}

// A transaction reads at the snapshots of its earlier reads, reads its own writes, and
// commits what it read and did not write with its last write per key.
func TestTxnReadsWritesAndCommits(t *testing.T) {
	c, n := startTxnNode(t)
	cx := context.Background()
	tx := c.Begin("tx")
	if v, found := mustGet(t, tx, "a"); v != "1" || !found {
		t.Fatalf("get a = %q %v", v, found)
	}
	vals, err := tx.GetMany(cx, [][]byte{[]byte("x"), []byte("a"), []byte("zz"), []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, v := range vals {
		desc = append(desc, fmt.Sprintf("%s=%s:%v:%d", v.Key, v.Value, v.Found, v.Version))
	}
	if got := strings.Join(desc, " "); got != "x=24:true:19 a=1:true:9 zz=:false:19 x=24:true:19" {
		t.Errorf("GetMany = %s", got)
	}
	// The second read carried the first one's snapshot, and asked only for the keys not read yet.
	if len(n.reads) != 2 || snapsString(n.reads[0].Snapshots) != "[]" || snapsString(n.reads[1].Snapshots) != "[0:10]" ||
		fmt.Sprintf("%q", n.reads[1].Keys) != `["x" "zz"]` {
		t.Fatalf("reads sent: %v", n.reads)
	}
	// Reading a key again is answered from the transaction.
	if v, _ := mustGet(t, tx, "x"); v != "24" {
		t.Errorf("x again = %q", v)
	}
	// Read-your-own-writes; the last write of a key wins.
	for _, err := range []error{tx.Put([]byte("a"), []byte("one")), tx.Put([]byte("new"), []byte("n1")), tx.Put([]byte("new"), nil),
		tx.Delete([]byte("x")), tx.Put([]byte("gone"), []byte("g")), tx.Delete([]byte("gone"))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if v, found := mustGet(t, tx, "a"); v != "one" || !found {
		t.Errorf("a after put = %q %v", v, found)
	}
	if v, found := mustGet(t, tx, "new"); v != "" || !found {
		t.Errorf("new after put of an empty value = %q %v, want found and empty", v, found)
	}
	if _, found := mustGet(t, tx, "x"); found {
		t.Error("x after delete is found")
	}
	if _, found := mustGet(t, tx, "gone"); found {
		t.Error("gone after put and delete is found")
	}
	if r, _ := n.counts(); r != 2 {
		t.Errorf("%d reads sent, want 2: buffered writes and earlier reads need none", r)
	}
	res, err := tx.Commit(cx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Txn != "t1" || res.Version != 11 || res.Coordinator != "fake" {
		t.Errorf("commit result %+v", res)
	}
	cr := n.commits[0]
	if fmt.Sprintf("%q", cr.Reads) != `["a" "x" "zz"]` || fmt.Sprint(cr.ReadVersions) != "[9 19 19]" {
		t.Errorf("reads committed %q versions %v, want every key read (a and x were also written: 2pc validates their versions) with its version", cr.Reads, cr.ReadVersions)
	}
	var ws []string
	for _, w := range cr.Writes {
		ws = append(ws, fmt.Sprintf("%s=%s:%v", w.Key, w.Value, w.Delete))
	}
	if got := strings.Join(ws, " "); got != "a=one:false new=:false x=:true gone=:true" {
		t.Errorf("writes committed %s", got)
	}
	if snapsString(cr.Snapshots) != "[0:10 1:20]" || cr.Keyspace != "tx" {
		t.Errorf("commit request %v", cr)
	}
	// Used once.
	if _, err := tx.Commit(cx); !errors.Is(err, ErrTxnDone) {
		t.Errorf("second commit: %v", err)
	}
	if _, _, err := tx.Get(cx, []byte("a")); !errors.Is(err, ErrTxnDone) {
		t.Errorf("get after commit: %v", err)
	}
	if err := tx.Put([]byte("a"), []byte("v")); !errors.Is(err, ErrTxnDone) {
		t.Errorf("put after commit: %v", err)
	}
}

// The caller's buffers may change after Put: the transaction keeps its own copies.
func TestTxnCopiesWrites(t *testing.T) {
	c, n := startTxnNode(t)
	tx := c.Begin("tx")
	k, v := []byte("k"), []byte("v1")
	if err := tx.Put(k, v); err != nil {
		t.Fatal(err)
	}
	k[0], v[1] = 'j', '2'
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := n.commits[0].Writes[0]; string(w.Key) != "k" || string(w.Value) != "v1" {
		t.Errorf("write sent %s=%s, want k=v1", w.Key, w.Value)
	}
}

func TestTxnAbort(t *testing.T) {
	c, n := startTxnNode(t)
	cx := context.Background()
	n.aborts = 1
	tx := c.Begin("tx")
	mustGet(t, tx, "x")
	tx.Put([]byte("y"), []byte("26"))
	_, err := tx.Commit(cx)
	var ae *AbortError
	if !errors.As(err, &ae) || ae.Reason != "conflict: read overwritten since the snapshot" || string(ae.Key) != "x" || ae.Txn != "t1" {
		t.Fatalf("commit of a conflicting transaction: %v (%T)", err, err)
	}
	if !errors.Is(err, ErrAborted) || CodeOf(err) != codes.Aborted {
		t.Errorf("abort error %v: errors.Is ErrAborted %v, code %v", err, errors.Is(err, ErrAborted), CodeOf(err))
	}
	if want := `transaction t1 aborted: conflict: read overwritten since the snapshot (key "x")`; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	if _, err := tx.Commit(cx); !errors.Is(err, ErrTxnDone) {
		t.Errorf("commit after an abort: %v", err)
	}

	// Abort drops the buffer and sends nothing.
	tx = c.Begin("tx")
	tx.Put([]byte("a"), []byte("v"))
	tx.Abort()
	tx.Abort()
	if _, err := tx.Commit(cx); !errors.Is(err, ErrTxnDone) {
		t.Errorf("commit after Abort: %v", err)
	}
	if err := tx.Delete([]byte("a")); !errors.Is(err, ErrTxnDone) {
		t.Errorf("delete after Abort: %v", err)
	}
	if _, commits := n.counts(); commits != 1 {
		t.Errorf("%d commits sent, want 1", commits)
	}
}

// A transaction with no reads and no writes commits without a call; an empty key is refused
// before anything is sent; the server's refusals come back as they are.
func TestTxnTrivialAndInvalid(t *testing.T) {
	c, n := startTxnNode(t)
	cx := context.Background()
	res, err := c.Begin("tx").Commit(cx)
	if err != nil || res != (CommitResult{}) {
		t.Errorf("empty transaction: %+v, %v", res, err)
	}
	tx := c.Begin("tx")
	if err := tx.Put(nil, []byte("v")); CodeOf(err) != codes.InvalidArgument {
		t.Errorf("put of an empty key: %v", err)
	}
	if _, _, err := tx.Get(cx, []byte{}); CodeOf(err) != codes.InvalidArgument {
		t.Errorf("get of an empty key: %v", err)
	}
	if reads, commits := n.counts(); reads != 0 || commits != 0 {
		t.Errorf("%d reads and %d commits sent, want none", reads, commits)
	}
	// Writes larger than the node takes are refused before they are sent.
	tx = c.Begin("tx")
	tx.Put([]byte("big1"), make([]byte, 600<<10))
	tx.Put([]byte("big2"), make([]byte, 600<<10))
	_, err = tx.Commit(cx)
	if CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "keys and values come to 1228808 bytes, limit is 1048576 (limits.max_value_bytes) on node fake") {
		t.Errorf("commit of 1.2 MB: %v", err)
	}
	if reads, commits := n.counts(); reads != 0 || commits != 0 {
		t.Errorf("%d reads and %d commits sent, want none", reads, commits)
	}
	// A read refused as a conflict ends the transaction as an abort.
	old := c.Begin("old")
	_, _, err = old.Get(cx, []byte("k"))
	var ae *AbortError
	if !errors.As(err, &ae) || !strings.Contains(ae.Reason, "older than the partition keeps") {
		t.Errorf("read at a snapshot too old: %v (%T)", err, err)
	}
	if _, err := old.Commit(cx); !errors.Is(err, ErrTxnDone) {
		t.Errorf("commit after a read's abort: %v", err)
	}
	_, _, err = c.Begin("kv").Get(cx, []byte("k"))
	if CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `keyspace "kv" is not transactional`) {
		t.Errorf("read on a keyspace without transactions: %v", err)
	}
}

func TestReadOnly(t *testing.T) {
	c, n := startTxnNode(t)
	cx := context.Background()
	// One request, marked read-only, whatever the partitions: the node reads at one
	// consistent snapshot (sdur: a snapshot vector; 2pc: validated reads); no commit.
	got, err := c.ReadOnly(cx, "tx", [][]byte{[]byte("a"), []byte("x"), []byte("c")})
	if err != nil || string(got["a"]) != "1" || string(got["x"]) != "24" || len(got) != 2 {
		t.Fatalf("read-only: %v, %v", got, err)
	}
	reads, commits := n.counts()
	if reads != 1 || commits != 0 {
		t.Errorf("%d reads and %d commits, want 1 and 0", reads, commits)
	}
	if r := n.reads[0]; !r.ReadOnly || len(r.Snapshots) != 0 {
		t.Errorf("read-only request %v: want read_only and no snapshots", r)
	}
	if got, err := c.ReadOnly(cx, "tx", nil); err != nil || len(got) != 0 {
		t.Errorf("read-only of no keys: %v, %v", got, err)
	}
	if _, err := c.ReadOnly(cx, "plain", [][]byte{[]byte("a")}); err == nil {
		t.Error("read-only on a keyspace that is not transactional succeeded")
	}
}
