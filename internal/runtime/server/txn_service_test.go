package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"meridian/api/meridianpb"
	"meridian/client"
	"meridian/internal/config"
	"meridian/internal/tools/bench"
)

// txnCluster starts a LAN cluster of one node per region with keyspace "bank": raft,
// txn_mode mode, two partitions (keys below 0x80 and the others).
func txnCluster(t *testing.T, mode string) *bench.Cluster {
	t.Helper()
	return lanCluster(t, 1, config.Keyspace{Name: "bank", Protocol: config.ProtocolRaft, Partitions: 2,
		Options: map[string]string{"txn_mode": mode, "election_timeout": "500ms", "heartbeat_interval": "100ms"}})
}

// Keys of the two partitions.
var (
	alice = []byte("\x10alice")
	bob   = []byte("\x90bob")
)

// TestTxnThroughService runs transactions through the API of a node: blind writes to two
// partitions, reads at snapshots, a transfer, and a conflict that aborts.
func TestTxnThroughService(t *testing.T) {
	c := txnCluster(t, config.TxnSDUR)
	cx := ctx(t)
	s := c.Services[0]
	put := func(k []byte, v string) *meridianpb.TxnWrite { return &meridianpb.TxnWrite{Key: k, Value: []byte(v)} }

	// The groups elect their leaders first: retry the first commit until it goes through.
	var res *meridianpb.TxnCommitResponse
	eventually(t, "the first transaction commits", func() error {
		var err error
		res, err = s.TxnCommit(cx, &meridianpb.TxnCommitRequest{Keyspace: "bank", Writes: []*meridianpb.TxnWrite{put(alice, "100"), put(bob, "0")}, TimeoutMs: 2000})
		if err != nil {
			return err
		}
		if !res.Committed {
			return fmt.Errorf("aborted: %s (key %q)", res.Reason, res.Key)
		}
		return nil
	})
	if res.Txn == "" || res.Coordinator != c.Nodes[0].Name() {
		t.Errorf("commit response %v", res)
	}

	// Plain writes are refused; plain reads are not.
	_, err := s.Put(cx, &meridianpb.PutRequest{Keyspace: "bank", Key: alice, Value: []byte("1")})
	wantCode(t, err, codes.InvalidArgument, `keyspace "bank" is transactional (txn_mode sdur): write through TxnCommit`)

	// A read of both keys fixes a snapshot of each partition.
	var r *meridianpb.TxnReadResponse
	eventually(t, "node 1 reads the committed values", func() error {
		var err error
		r, err = c.Services[1].TxnRead(cx, &meridianpb.TxnReadRequest{Keyspace: "bank", Keys: [][]byte{alice, bob}})
		if err != nil {
			return err
		}
		if len(r.Values) != 2 || string(r.Values[0].Value) != "100" || string(r.Values[1].Value) != "0" {
			return fmt.Errorf("values %v", r.Values)
		}
		return nil
	})
	if len(r.Snapshots) != 2 || r.Snapshots[0].Partition == r.Snapshots[1].Partition || r.Values[0].Partition == r.Values[1].Partition {
		t.Fatalf("read of two partitions: %v", r)
	}
	if r.Values[0].Version == 0 || !r.Values[0].Found {
		t.Errorf("alice: %v, want found with a version", r.Values[0])
	}

	// A transfer at those snapshots commits.
	res, err = c.Services[1].TxnCommit(cx, &meridianpb.TxnCommitRequest{Keyspace: "bank", Writes: []*meridianpb.TxnWrite{put(alice, "90"), put(bob, "10")},
		Snapshots: r.Snapshots})
	if err != nil || !res.Committed {
		t.Fatalf("transfer: %v, %v", res, err)
	}
	// Another one at the same (now old) snapshots read alice, which the transfer wrote: it
	// aborts, naming the key.
	res, err = c.Services[2].TxnCommit(cx, &meridianpb.TxnCommitRequest{Keyspace: "bank", Reads: [][]byte{alice}, Writes: []*meridianpb.TxnWrite{put(bob, "1000")},
		Snapshots: r.Snapshots})
	if err != nil {
		t.Fatal(err)
	}
	if res.Committed || res.Reason == "" {
		t.Fatalf("a transaction whose read was overwritten: %v, want an abort with a reason", res)
	}
	t.Logf("abort: %s (key %q)", res.Reason, res.Key)
}

// TestTxnGoClient runs the Go client's transactions against a node served over gRPC, in
// both transaction modes (2pc validates the reads by the versions the client sends).
func TestTxnGoClient(t *testing.T) {
	for _, mode := range []string{config.TxnSDUR, config.Txn2PC} {
		t.Run(mode, func(t *testing.T) { testTxnGoClient(t, mode) })
	}
}

func testTxnGoClient(t *testing.T, mode string) {
	c := txnCluster(t, mode)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	meridianpb.RegisterMeridianServer(gs, c.Services[0])
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cl, err := client.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	eventually(t, "the first transaction commits", func() error {
		tx := cl.Begin("bank", client.Timeout(2*time.Second))
		tx.Put(alice, []byte("100"))
		tx.Put(bob, []byte("0"))
		_, err := tx.Commit(cx)
		return err
	})
	// 2pc applies a commit at the participants after it returns, and reads the replica's
	// newest state: wait until this node's replicas have it (sdur reads at a snapshot that
	// holds it at once).
	eventually(t, "the node reads the first transaction's writes", func() error {
		tx := cl.Begin("bank")
		defer tx.Abort()
		vals, err := tx.GetMany(cx, [][]byte{alice, bob})
		if err != nil {
			return err
		}
		if string(vals[0].Value) != "100" || !vals[1].Found || string(vals[1].Value) != "0" {
			return fmt.Errorf("read %q=%q, %q=%q (found %v)", alice, vals[0].Value, bob, vals[1].Value, vals[1].Found)
		}
		return nil
	})
	// A transfer: read both, write both; nothing concurrent, it commits.
	tx := cl.Begin("bank")
	a, found, err := tx.Get(cx, alice)
	if err != nil || !found || string(a) != "100" {
		t.Fatalf("get alice: %q %v %v", a, found, err)
	}
	if err := tx.Put(alice, []byte("70")); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := tx.Get(cx, alice); string(v) != "70" {
		t.Errorf("alice after the buffered write: %q", v)
	}
	vals, err := tx.GetMany(cx, [][]byte{bob})
	if err != nil || string(vals[0].Value) != "0" {
		t.Fatalf("get bob: %v %v", vals, err)
	}
	tx.Put(bob, []byte("30"))
	if _, err := tx.Commit(cx); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	wantRead := func(what, wantAlice, wantBob string) {
		t.Helper()
		eventually(t, what, func() error {
			got, err := cl.ReadOnly(cx, "bank", [][]byte{alice, bob})
			if err != nil {
				return err
			}
			if string(got[string(alice)]) != wantAlice || string(got[string(bob)]) != wantBob {
				return fmt.Errorf("read-only: %q", got)
			}
			return nil
		})
	}
	wantRead("the transfer is read", "70", "30")

	// conflict runs a transaction that reads alice and bob and writes bob (and alice too
	// with writeAlice), while another one writes alice between its reads and its commit: it
	// must abort.
	conflict := func(writeAlice bool) {
		t.Helper()
		tx := cl.Begin("bank")
		if _, err := tx.GetMany(cx, [][]byte{alice, bob}); err != nil {
			t.Fatal(err)
		}
		tx.Put(bob, []byte("1000"))
		if writeAlice {
			tx.Put(alice, []byte("0"))
		}
		other := cl.Begin("bank")
		if _, _, err := other.Get(cx, alice); err != nil {
			t.Fatal(err)
		}
		other.Put(alice, []byte("101"))
		if _, err := other.Commit(cx); err != nil {
			t.Fatalf("concurrent writer: %v", err)
		}
		_, err := tx.Commit(cx)
		var abort *client.AbortError
		if !errors.As(err, &abort) {
			t.Fatalf("a transaction whose read of alice was overwritten (writing alice too: %v): %v, want an abort", writeAlice, err)
		}
		t.Logf("abort: %v", abort)
		wantRead("the concurrent write is read, the aborted one's is not", "101", "30")
	}
	// alice only read: 2pc validates it by the version the client sends.
	conflict(false)
	if mode == config.TxnSDUR {
		// alice read and written (a lost update unless it aborts): sdur certifies a written
		// key as read at the snapshot. (2pc gets the read versions of keys read and not
		// written only, as the engine contract says: a read-then-written key's read is not
		// validated there.)
		conflict(true)
	}
	// A keyspace without transactions is refused clearly.
	_, _, err = cl.Begin("nope").Get(cx, alice)
	if client.CodeOf(err) != codes.NotFound {
		t.Errorf("transaction on an unknown keyspace: %v", err)
	}
}
