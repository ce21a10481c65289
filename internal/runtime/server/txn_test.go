package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
)

// validateTxn runs the validator of a transaction request: the requests it hands the engine
// (TxnRead: one per key; TxnCommit: one).
func validateTxn(v validator, req any) ([]engine.Request, error) {
	switch r := req.(type) {
	case *meridianpb.TxnReadRequest:
		return v.txnRead(r)
	case *meridianpb.TxnCommitRequest:
		got, err := v.txnCommit(r)
		if err != nil {
			return nil, err
		}
		return []engine.Request{got}, nil
	}
	panic(fmt.Sprintf("validateTxn: unexpected request type %T", req))
}

type txnCase struct {
	name  string
	req   any
	kind  errs.Kind
	msg   []string
	check func(t *testing.T, rs []engine.Request)
}

func runTxnCases(t *testing.T, v validator, cases []txnCase) {
	t.Helper()
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("test bug: duplicate case %q", c.name)
		}
		names[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			got, err := validateTxn(v, c.req)
			if c.kind != 0 {
				checkErr(t, err, c.kind, c.msg...)
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

func keys(ks ...string) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = []byte(k)
	}
	return out
}

func manyKeys(n int, prefix string) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf("%s%05d", prefix, i))
	}
	return out
}

func snaps(pc ...uint64) []*meridianpb.TxnSnapshot {
	var out []*meridianpb.TxnSnapshot
	for i := 0; i+1 < len(pc); i += 2 {
		out = append(out, &meridianpb.TxnSnapshot{Partition: uint32(pc[i]), Counter: pc[i+1]})
	}
	return out
}

func TestValidatorTxnRead(t *testing.T) {
	lim := config.DefaultLimits()
	maxMs := uint32(lim.MaxRequestTimeout / time.Millisecond)
	longKey := bytes.Repeat([]byte("k"), lim.MaxKeyBytes+1)
	read := func(ks string, k [][]byte, sn []*meridianpb.TxnSnapshot, ms uint32) *meridianpb.TxnReadRequest {
		return &meridianpb.TxnReadRequest{Keyspace: ks, Keys: k, Snapshots: sn, TimeoutMs: ms}
	}
	notTxn := func(ks string) []string {
		return []string{fmt.Sprintf("keyspace %q is not transactional (txn_mode none)", ks), "use Get/Put/Delete", "create it with txn_mode sdur"}
	}
	cases := []txnCase{
		{name: "one key", req: read("tx", keys("a"), nil, 0), check: func(t *testing.T, rs []engine.Request) {
			if len(rs) != 1 {
				t.Fatalf("%d requests, want 1", len(rs))
			}
			r := rs[0]
			if r.Op != engine.OpTxnRead || r.Keyspace != "tx" || string(r.Key) != "a" || r.Level != "" || r.Txn == nil || len(r.Txn.Snapshots) != 0 ||
				len(r.Txn.Reads) != 0 || len(r.Txn.Writes) != 0 {
				t.Errorf("request = %+v (txn %+v), want a txn-read of tx/a with no snapshots", r, r.Txn)
			}
			wantDeadline(lim.DefaultRequestTimeout)(t, r)
		}},
		{name: "keys in order with the snapshots", req: read("tx", keys("c", "a", "b"), snaps(2, 7, 0, 5), 1500), check: func(t *testing.T, rs []engine.Request) {
			if len(rs) != 3 {
				t.Fatalf("%d requests, want 3", len(rs))
			}
			for i, want := range []string{"c", "a", "b"} {
				r := rs[i]
				if r.Op != engine.OpTxnRead || string(r.Key) != want {
					t.Errorf("request %d = %v %q, want txn-read %q", i, r.Op, r.Key, want)
				}
				if r.Txn == nil || fmt.Sprint(r.Txn.Snapshots) != "[{2 7} {0 5}]" {
					t.Errorf("request %d: txn %+v, want the snapshots given", i, r.Txn)
				}
				wantDeadline(1500*time.Millisecond)(t, r)
			}
		}},
		{name: "exactly max_txn_keys", req: read("tx", manyKeys(lim.MaxTxnKeys, "k"), nil, 0), check: func(t *testing.T, rs []engine.Request) {
			if len(rs) != lim.MaxTxnKeys {
				t.Errorf("%d requests, want %d", len(rs), lim.MaxTxnKeys)
			}
		}},
		{name: "every partition's snapshot", req: read("tx", keys("a"), snaps(0, 1, 1, 1, 2, 1, 3, 1), 0)},
		{name: "quorum keyspace", req: read("kv", keys("a"), nil, 0), kind: errs.Invalid, msg: notTxn("kv")},
		{name: "raft keyspace without txn_mode", req: read("rk", keys("a"), nil, 0), kind: errs.Invalid, msg: notTxn("rk")},
		{name: "unknown keyspace", req: read("nope", keys("a"), nil, 0), kind: errs.NotFound, msg: []string{`unknown keyspace "nope"`}},
		{name: "reserved keyspace", req: read("_system", keys("a"), nil, 0), kind: errs.Invalid, msg: []string{"reserved"}},
		{name: "empty keyspace", req: read("", keys("a"), nil, 0), kind: errs.Invalid, msg: []string{"keyspace name is empty"}},
		{name: "no keys", req: read("tx", nil, nil, 0), kind: errs.Invalid, msg: []string{"names no keys"}},
		{name: "empty key", req: read("tx", keys("a", ""), nil, 0), kind: errs.Invalid, msg: []string{"keys[1] is empty"}},
		{name: "key max+1", req: read("tx", [][]byte{longKey}, nil, 0), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("keys[0] is %d bytes, limit is %d (limits.max_key_bytes)", lim.MaxKeyBytes+1, lim.MaxKeyBytes)}},
		{name: "duplicate key", req: read("tx", keys("a", "b", "a"), nil, 0), kind: errs.Invalid, msg: []string{`key "a" is named twice`}},
		{name: "max_txn_keys+1", req: read("tx", manyKeys(lim.MaxTxnKeys+1, "k"), nil, 0), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("transaction names %d keys, limit is %d (limits.max_txn_keys)", lim.MaxTxnKeys+1, lim.MaxTxnKeys)}},
		{name: "unknown partition", req: read("tx", keys("a"), snaps(9, 1), 0), kind: errs.Invalid, msg: []string{`keyspace "tx" has no partition 9`}},
		{name: "two snapshots of a partition", req: read("tx", keys("a"), snaps(1, 1, 1, 2), 0), kind: errs.Invalid, msg: []string{"partition 1 has two snapshots"}},
		{name: "more snapshots than partitions", req: read("tx", keys("a"), snaps(0, 1, 1, 1, 2, 1, 3, 1, 0, 2), 0), kind: errs.Invalid,
			msg: []string{"5 snapshots", `keyspace "tx" has 4 partitions`}},
		{name: "timeout over max", req: read("tx", keys("a"), nil, maxMs+1), kind: errs.Invalid, msg: []string{"limits.max_request_timeout"}},
		{name: "keyspace before keys", req: read("kv", nil, nil, 0), kind: errs.Invalid, msg: notTxn("kv")},
		{name: "keys before snapshots", req: read("tx", keys(""), snaps(9, 1), 0), kind: errs.Invalid, msg: []string{"keys[0] is empty"}},
	}
	runTxnCases(t, testValidator(t), cases)
}

func TestValidatorTxnCommit(t *testing.T) {
	lim := config.DefaultLimits()
	maxMs := uint32(lim.MaxRequestTimeout / time.Millisecond)
	longKey := bytes.Repeat([]byte("k"), lim.MaxKeyBytes+1)
	put := func(k, v string) *meridianpb.TxnWrite { return &meridianpb.TxnWrite{Key: []byte(k), Value: []byte(v)} }
	del := func(k string) *meridianpb.TxnWrite { return &meridianpb.TxnWrite{Key: []byte(k), Delete: true} }
	commit := func(ks string, reads [][]byte, writes []*meridianpb.TxnWrite, sn []*meridianpb.TxnSnapshot) *meridianpb.TxnCommitRequest {
		return &meridianpb.TxnCommitRequest{Keyspace: ks, Reads: reads, Writes: writes, Snapshots: sn}
	}
	notTxn := []string{`keyspace "kv" is not transactional (txn_mode none)`, "txn_mode sdur"}
	half := bytes.Repeat([]byte("v"), lim.MaxValueBytes/2)
	cases := []txnCase{
		{name: "reads, writes and snapshots", req: commit("tx", keys("r1", "r2"), []*meridianpb.TxnWrite{put("w1", "v1"), del("w2"), {Key: []byte("w3")}}, snaps(3, 10, 1, 4)),
			check: func(t *testing.T, rs []engine.Request) {
				r := rs[0]
				if r.Op != engine.OpTxnCommit || r.Keyspace != "tx" || r.Level != "" || len(r.Key) != 0 || r.Txn == nil {
					t.Fatalf("request = %+v, want a txn-commit on tx", r)
				}
				tx := r.Txn
				if fmt.Sprintf("%q", tx.Reads) != `["r1" "r2"]` {
					t.Errorf("Reads = %q", tx.Reads)
				}
				if len(tx.Writes) != 3 || string(tx.Writes[0].Key) != "w1" || string(tx.Writes[0].Value) != "v1" || tx.Writes[0].Delete ||
					string(tx.Writes[1].Key) != "w2" || !tx.Writes[1].Delete || tx.Writes[1].Value != nil ||
					string(tx.Writes[2].Key) != "w3" || tx.Writes[2].Delete || tx.Writes[2].Value == nil || len(tx.Writes[2].Value) != 0 {
					t.Errorf("Writes = %+v, want w1=v1, delete w2, w3 = the empty value (not a tombstone)", tx.Writes)
				}
				if fmt.Sprint(tx.Snapshots) != "[{3 10} {1 4}]" {
					t.Errorf("Snapshots = %v", tx.Snapshots)
				}
				wantDeadline(lim.DefaultRequestTimeout)(t, r)
			}},
		{name: "reads only", req: commit("tx", keys("r"), nil, snaps(0, 1))},
		{name: "read versions", req: &meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: keys("r1", "r2"), ReadVersions: []uint64{7, 0}},
			check: func(t *testing.T, rs []engine.Request) {
				if fmt.Sprint(rs[0].Txn.ReadVersions) != "[7 0]" {
					t.Errorf("ReadVersions = %v, want [7 0]", rs[0].Txn.ReadVersions)
				}
			}},
		{name: "no read versions", req: commit("tx", keys("r1", "r2"), nil, nil), check: func(t *testing.T, rs []engine.Request) {
			if rs[0].Txn.ReadVersions != nil {
				t.Errorf("ReadVersions = %v, want none", rs[0].Txn.ReadVersions)
			}
		}},
		{name: "read versions not one per read", req: &meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: keys("r1", "r2"), ReadVersions: []uint64{7}},
			kind: errs.Invalid, msg: []string{"1 read versions for 2 reads"}},
		{name: "read versions without reads", req: &meridianpb.TxnCommitRequest{Keyspace: "tx", Writes: []*meridianpb.TxnWrite{put("w", "v")}, ReadVersions: []uint64{7}},
			kind: errs.Invalid, msg: []string{"1 read versions for 0 reads"}},
		{name: "writes only", req: commit("tx", nil, []*meridianpb.TxnWrite{put("w", "v")}, nil)},
		{name: "timeout", req: &meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: keys("r"), TimeoutMs: 2500}, check: func(t *testing.T, rs []engine.Request) {
			wantDeadline(2500*time.Millisecond)(t, rs[0])
		}},
		{name: "exactly max_txn_keys", req: commit("tx", manyKeys(lim.MaxTxnKeys-1, "r"), []*meridianpb.TxnWrite{put("w", "v")}, nil)},
		{name: "writes of max_value_bytes together", req: commit("tx", nil, []*meridianpb.TxnWrite{put("a", string(half[1:])), put("b", string(half[1:]))}, nil)},
		{name: "nothing to commit", req: commit("tx", nil, nil, snaps(0, 1)), kind: errs.Invalid, msg: []string{"no reads and no writes"}},
		{name: "quorum keyspace", req: commit("kv", keys("r"), nil, nil), kind: errs.Invalid, msg: notTxn},
		{name: "raft keyspace without txn_mode", req: commit("rk", keys("r"), nil, nil), kind: errs.Invalid, msg: []string{`keyspace "rk" is not transactional`}},
		{name: "unknown keyspace", req: commit("nope", keys("r"), nil, nil), kind: errs.NotFound, msg: []string{`unknown keyspace "nope"`}},
		{name: "key written twice", req: commit("tx", nil, []*meridianpb.TxnWrite{put("a", "1"), del("a")}, nil), kind: errs.Invalid,
			msg: []string{`key "a" is written twice`}},
		{name: "key read twice", req: commit("tx", keys("a", "a"), nil, nil), kind: errs.Invalid, msg: []string{`read key "a" is named twice`}},
		{name: "empty write key", req: commit("tx", nil, []*meridianpb.TxnWrite{put("", "1")}, nil), kind: errs.Invalid, msg: []string{"writes[0].key is empty"}},
		{name: "empty read key", req: commit("tx", keys("a", ""), nil, nil), kind: errs.Invalid, msg: []string{"reads[1] is empty"}},
		{name: "write key max+1", req: commit("tx", nil, []*meridianpb.TxnWrite{{Key: longKey}}, nil), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("writes[0].key is %d bytes", lim.MaxKeyBytes+1), "limits.max_key_bytes"}},
		{name: "read key max+1", req: commit("tx", [][]byte{longKey}, nil, nil), kind: errs.Invalid, msg: []string{"reads[0] is", "limits.max_key_bytes"}},
		{name: "delete with a value", req: commit("tx", nil, []*meridianpb.TxnWrite{{Key: []byte("a"), Value: []byte("v"), Delete: true}}, nil), kind: errs.Invalid,
			msg: []string{`write of key "a" deletes it and carries a value of 1 bytes`}},
		{name: "value max+1", req: commit("tx", nil, []*meridianpb.TxnWrite{put("a", string(half)+string(half)+"v")}, nil), kind: errs.Invalid,
			msg: []string{fmt.Sprintf(`value of key "a" is %d bytes, limit is %d (limits.max_value_bytes)`, lim.MaxValueBytes+1, lim.MaxValueBytes)}},
		{name: "writes over max_value_bytes together", req: commit("tx", nil, []*meridianpb.TxnWrite{put("a", string(half)), put("b", string(half))}, nil), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("keys and values come to more than %d bytes together (limits.max_value_bytes", lim.MaxValueBytes)}},
		{name: "reads count toward the size", req: commit("tx", keys("r"), []*meridianpb.TxnWrite{put("a", string(half[1:])), put("b", string(half[1:]))}, nil), kind: errs.Invalid,
			msg: []string{"limits.max_value_bytes"}},
		{name: "max_txn_keys+1", req: commit("tx", manyKeys(lim.MaxTxnKeys, "r"), []*meridianpb.TxnWrite{put("w", "v")}, nil), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("transaction names %d keys, limit is %d (limits.max_txn_keys)", lim.MaxTxnKeys+1, lim.MaxTxnKeys)}},
		{name: "unknown partition", req: commit("tx", keys("r"), nil, snaps(4, 1)), kind: errs.Invalid, msg: []string{`keyspace "tx" has no partition 4`}},
		{name: "two snapshots of a partition", req: commit("tx", keys("r"), nil, snaps(0, 1, 0, 1)), kind: errs.Invalid, msg: []string{"partition 0 has two snapshots"}},
		{name: "timeout over max", req: &meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: keys("r"), TimeoutMs: maxMs + 1}, kind: errs.Invalid,
			msg: []string{"limits.max_request_timeout"}},
	}
	runTxnCases(t, testValidator(t), cases)
}

// TestValidatorTxnKeyspaces checks what a transactional keyspace takes outside
// transactions: reads (Get, Scan), but no plain writes.
func TestValidatorTxnKeyspaces(t *testing.T) {
	refused := []string{`keyspace "tx" is transactional (txn_mode sdur): write through TxnCommit`}
	cases := []valCase{
		{name: "get", req: &meridianpb.GetRequest{Keyspace: "tx", Key: []byte("k")}},
		{name: "get stale", req: &meridianpb.GetRequest{Keyspace: "tx", Key: []byte("k"), Consistency: "stale"}, check: wantLevel(config.LevelStale)},
		{name: "scan", req: &meridianpb.ScanRequest{Keyspace: "tx"}},
		{name: "put", req: &meridianpb.PutRequest{Keyspace: "tx", Key: []byte("k"), Value: []byte("v")}, kind: errs.Invalid, msg: refused},
		{name: "delete", req: &meridianpb.DeleteRequest{Keyspace: "tx", Key: []byte("k")}, kind: errs.Invalid, msg: refused},
		{name: "put on a raft keyspace without txn_mode", req: &meridianpb.PutRequest{Keyspace: "rk", Key: []byte("k"), Value: []byte("v")}},
		{name: "delete on a raft keyspace without txn_mode", req: &meridianpb.DeleteRequest{Keyspace: "rk", Key: []byte("k")}},
	}
	runValCases(t, testValidator(t), cases)
}

// TestValidatorTxnConfiguredLimits checks the transaction rules against configured limits.
func TestValidatorTxnConfiguredLimits(t *testing.T) {
	v := validator{
		limits: config.Limits{MaxKeyBytes: 4, MaxValueBytes: 8, MaxScanLimit: 50, MaxTxnKeys: 3,
			DefaultRequestTimeout: 250 * time.Millisecond, MaxRequestTimeout: 2 * time.Second},
		pmap: testPlacement(t),
		now:  testNow,
	}
	_, err := v.txnRead(&meridianpb.TxnReadRequest{Keyspace: "tx", Keys: keys("a", "b", "c", "d")})
	checkErr(t, err, errs.Invalid, "transaction names 4 keys, limit is 3 (limits.max_txn_keys)")
	_, err = v.txnRead(&meridianpb.TxnReadRequest{Keyspace: "tx", Keys: keys("aaaa", "bbbb", "c")})
	checkErr(t, err, errs.Invalid, "more than 8 bytes together (limits.max_value_bytes")
	rs, err := v.txnRead(&meridianpb.TxnReadRequest{Keyspace: "tx", Keys: keys("aaaa", "bbbb")})
	if err != nil || len(rs) != 2 || !rs[0].Deadline.Equal(testNow.Add(250*time.Millisecond)) {
		t.Errorf("two 4-byte keys: %d requests, %v", len(rs), err)
	}
	_, err = v.txnRead(&meridianpb.TxnReadRequest{Keyspace: "tx", Keys: keys("aaaaa")})
	checkErr(t, err, errs.Invalid, "keys[0] is 5 bytes, limit is 4 (limits.max_key_bytes)")
	w := []*meridianpb.TxnWrite{{Key: []byte("k"), Value: []byte("1234567")}}
	if _, err := v.txnCommit(&meridianpb.TxnCommitRequest{Keyspace: "tx", Writes: w}); err != nil {
		t.Errorf("8 bytes of key and value: %v", err)
	}
	_, err = v.txnCommit(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: keys("r"), Writes: w})
	checkErr(t, err, errs.Invalid, "more than 8 bytes together")
	_, err = v.txnCommit(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: keys("a", "b", "c"), Writes: []*meridianpb.TxnWrite{{Key: []byte("d")}}})
	checkErr(t, err, errs.Invalid, "transaction names 4 keys, limit is 3")
	_, err = v.txnCommit(&meridianpb.TxnCommitRequest{Keyspace: "tx", Writes: []*meridianpb.TxnWrite{{Key: []byte("k"), Value: []byte("123456789")}}})
	checkErr(t, err, errs.Invalid, "value of key \"k\" is 9 bytes, limit is 8 (limits.max_value_bytes)")
	_, err = v.txnCommit(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: keys("r"), TimeoutMs: 2001})
	checkErr(t, err, errs.Invalid, "limits.max_request_timeout")
	if strings.Contains(fmt.Sprint(v.limits), "MaxTxnKeys:0") {
		t.Fatal("test bug: limits without max_txn_keys")
	}
}

// TestValidatorTxnDoesNotMutate checks that validation leaves the request as it was.
func TestValidatorTxnDoesNotMutate(t *testing.T) {
	v := testValidator(t)
	r := &meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: keys("r"), Writes: []*meridianpb.TxnWrite{{Key: []byte("w")}}}
	if _, err := v.txnCommit(r); err != nil {
		t.Fatal(err)
	}
	if r.Writes[0].Value != nil || len(r.Reads) != 1 || r.Snapshots != nil {
		t.Errorf("request changed: %v", r)
	}
}

// fakeTxnEngine serves OpTxnRead like the contract says: a key of partition 0 (keys before
// "n") or 1, at the transaction's snapshot of its partition, else at the partition's latest.
type fakeTxnEngine struct {
	latest map[uint32]uint64
	seen   [][]engine.TxnSnapshot // the snapshots each request carried
	// wrong: serve at the latest snapshot even when the transaction has one (a broken engine).
	wrong bool
}

func (f *fakeTxnEngine) do(_ context.Context, req engine.Request) engine.Result {
	f.seen = append(f.seen, req.Txn.Snapshots)
	p := uint32(0)
	if string(req.Key) >= "n" {
		p = 1
	}
	at := f.latest[p]
	for _, s := range req.Txn.Snapshots {
		if s.Partition == p && !f.wrong {
			at = s.Counter
		}
	}
	found := req.Key[0] != 'z'
	var val []byte
	if found {
		val = []byte(fmt.Sprintf("%s@%d", req.Key, at))
	}
	return engine.Result{Op: req.Op, Found: found, Value: val, Txn: &engine.TxnResult{Version: at - 1, Snapshot: engine.TxnSnapshot{Partition: p, Counter: at}}}
}

// TestReadTxnKeys checks the TxnRead handler's loop: one read per key in order, each with the
// snapshots the earlier ones fixed, the values in the order of the keys and the snapshots by
// partition.
func TestReadTxnKeys(t *testing.T) {
	v := testValidator(t)
	reqs, err := v.txnRead(&meridianpb.TxnReadRequest{Keyspace: "tx", Keys: keys("x", "b", "z", "c"), Snapshots: snaps(1, 15)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTxnEngine{latest: map[uint32]uint64{0: 10, 1: 20}}
	values, got, err := readTxnKeys(context.Background(), reqs, f.do)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[{0 10} {1 15}]" {
		t.Errorf("snapshots %v, want [{0 10} {1 15}]: the one given and the one the read of b fixed", got)
	}
	wantSeen := "[[{1 15}] [{1 15}] [{1 15} {0 10}] [{1 15} {0 10}]]"
	if fmt.Sprint(f.seen) != wantSeen {
		t.Errorf("the reads carried the snapshots %v, want %s", f.seen, wantSeen)
	}
	var desc []string
	for _, val := range values {
		desc = append(desc, fmt.Sprintf("%s:%v:%s:%d:%d", val.Key, val.Found, val.Value, val.Version, val.Partition))
	}
	if want := "x:true:x@15:14:1 b:true:b@10:9:0 z:false::14:1 c:true:c@10:9:0"; strings.Join(desc, " ") != want {
		t.Errorf("values %s, want %s", strings.Join(desc, " "), want)
	}
	// Each request had its own copy of the snapshots.
	f.seen[0][0].Counter = 99
	if f.seen[1][0].Counter != 15 || reqs[0].Txn.Snapshots[0].Counter != 15 {
		t.Error("the requests share their snapshots")
	}

	// An engine that serves a partition at another snapshot than the transaction's.
	_, _, err = readTxnKeys(context.Background(), reqs, (&fakeTxnEngine{latest: map[uint32]uint64{0: 10, 1: 20}, wrong: true}).do)
	checkErr(t, err, errs.Internal, `key "x" was read at snapshot 20 of partition 1, but the transaction reads that partition at snapshot 15`)
	// No transaction result.
	_, _, err = readTxnKeys(context.Background(), reqs, func(context.Context, engine.Request) engine.Result { return engine.Result{Found: true} })
	checkErr(t, err, errs.Internal, `transaction read of key "x" in keyspace "tx" returned no snapshot`)
	// An engine error is returned as it is.
	timeout := errs.New(errs.Timeout, "partition 1: no leader")
	_, _, err = readTxnKeys(context.Background(), reqs, func(context.Context, engine.Request) engine.Result { return engine.Result{Err: timeout} })
	if !errors.Is(err, timeout) {
		t.Errorf("error %v, want the engine's", err)
	}
}
