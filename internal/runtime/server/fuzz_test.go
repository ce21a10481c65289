package server

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
)

// fuzzLimits are small so the fuzzer reaches every limit, not only the rules before them.
var fuzzLimits = config.Limits{MaxKeyBytes: 8, MaxValueBytes: 16, MaxScanLimit: 5,
	DefaultRequestTimeout: time.Second, MaxRequestTimeout: 3 * time.Second}

// FuzzRequestDecodeValidate decodes arbitrary bytes as the request kind%4 selects
// (Get, Put, Delete, Scan) and validates it, under the default limits and under small ones.
// Validation must never panic; a request it accepts must be within the limits; a request it
// rejects must get an Invalid or NotFound error with a one-line message.
func FuzzRequestDecodeValidate(f *testing.F) {
	add := func(kind byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(kind, b)
	}
	long := bytes.Repeat([]byte("x"), config.DefaultMaxKeyBytes+1)
	// Valid requests.
	add(0, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte("k")})
	add(0, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte("k"), Consistency: "local_one", TimeoutMs: 2000})
	add(1, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: []byte("v"), Consistency: "ALL"})
	add(1, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("12345678")})
	add(2, &meridianpb.DeleteRequest{Keyspace: "kv", Key: []byte("k"), Consistency: "one", TimeoutMs: 1})
	add(3, &meridianpb.ScanRequest{Keyspace: "kv"})
	add(3, &meridianpb.ScanRequest{Keyspace: "kv", Start: []byte("a"), End: []byte("b"), Limit: 5, Consistency: "quorum"})
	add(0, &meridianpb.GetRequest{Keyspace: "gl", Key: []byte("k")})
	add(1, &meridianpb.PutRequest{Keyspace: "gl", Key: []byte("k"), Value: []byte("v"), WriteMode: "passive"})
	add(2, &meridianpb.DeleteRequest{Keyspace: "gl", Key: []byte("k"), WriteMode: "ACTIVE"})
	add(3, &meridianpb.ScanRequest{Keyspace: "gl", Consistency: "ONE"})
	add(0, &meridianpb.GetRequest{Keyspace: "tx", Key: []byte("k"), Consistency: "STALE"})
	add(3, &meridianpb.ScanRequest{Keyspace: "tx", Consistency: "linearizable"})
	add(1, &meridianpb.PutRequest{Keyspace: "rk", Key: []byte("k"), Value: []byte("v")})
	// Invalid requests.
	add(0, &meridianpb.GetRequest{})
	add(0, &meridianpb.GetRequest{Keyspace: "_system", Key: []byte("k")})
	add(0, &meridianpb.GetRequest{Keyspace: "nope", Key: []byte("k")})
	add(0, &meridianpb.GetRequest{Keyspace: "kv", Key: long})
	add(1, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 17)})
	add(1, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Consistency: "FOO"})
	add(0, &meridianpb.GetRequest{Keyspace: "gl", Key: []byte("k"), Consistency: "QUORUM"})
	add(1, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), WriteMode: "active"})
	add(2, &meridianpb.DeleteRequest{Keyspace: "gl", Key: []byte("k"), WriteMode: "lazy"})
	add(2, &meridianpb.DeleteRequest{Keyspace: "kv", Key: []byte("k"), TimeoutMs: 1<<32 - 1})
	add(2, &meridianpb.DeleteRequest{Keyspace: "kv", Consistency: "ONE\n"})
	add(3, &meridianpb.ScanRequest{Keyspace: "kv", Start: []byte("b"), End: []byte("a")})
	add(3, &meridianpb.ScanRequest{Keyspace: "kv", Limit: 10001})
	add(3, &meridianpb.ScanRequest{Keyspace: "kv", Start: long})
	add(1, &meridianpb.PutRequest{Keyspace: "tx", Key: []byte("k"), Value: []byte("v")})
	add(2, &meridianpb.DeleteRequest{Keyspace: "tx", Key: []byte("k")})
	add(1, &meridianpb.PutRequest{Keyspace: "rk", Key: []byte("k"), Consistency: "ONE"})
	// A request of another kind, and bytes that are not protobuf.
	add(3, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: []byte("v")})
	f.Add(byte(0), []byte{0xff, 0xff, 0xff})
	f.Add(byte(1), []byte{})

	pm := testPlacement(f)
	validators := []validator{
		{limits: config.DefaultLimits(), pmap: pm, now: testNow},
		{limits: fuzzLimits, pmap: pm, now: testNow},
	}
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		var msg proto.Message
		switch kind % 4 {
		case 0:
			msg = &meridianpb.GetRequest{}
		case 1:
			msg = &meridianpb.PutRequest{}
		case 2:
			msg = &meridianpb.DeleteRequest{}
		case 3:
			msg = &meridianpb.ScanRequest{}
		}
		if err := proto.Unmarshal(data, msg); err != nil {
			return
		}
		for _, v := range validators {
			got, err := validate(v, msg)
			if err != nil {
				checkFuzzError(t, msg, err)
				continue
			}
			checkFuzzRequest(t, v, msg, got)
		}
	})
}

func checkFuzzError(t *testing.T, in proto.Message, err error) {
	t.Helper()
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("%v: error %q is a %T, want *errs.Error", in, err, err)
	}
	if e.Kind != errs.Invalid && e.Kind != errs.NotFound {
		t.Fatalf("%v: error kind %v, want invalid argument or not found (%q)", in, e.Kind, e.Msg)
	}
	if e.Msg == "" || strings.ContainsAny(e.Msg, "\r\n") || !utf8.ValidString(e.Msg) {
		t.Fatalf("%v: message %q is not one non-empty line of UTF-8", in, e.Msg)
	}
}

func checkFuzzRequest(t *testing.T, v validator, in proto.Message, r engine.Request) {
	t.Helper()
	lim := v.limits
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("accepted %v (limits %+v) as %+v: "+format, append([]any{in, lim, r}, args...)...)
	}
	if _, ok := v.pmap.Keyspace(r.Keyspace); !ok || strings.HasPrefix(r.Keyspace, "_") {
		fail("keyspace %q is unknown or reserved", r.Keyspace)
	}
	ks, _ := v.pmap.Keyspace(r.Keyspace)
	levels := config.Levels()
	if ks != nil && ks.Spec.Protocol == config.ProtocolRaft {
		levels = []config.Level{config.LevelLinearizable, config.LevelStale}
	}
	if r.Level != "" && !slices.Contains(levels, r.Level) {
		fail("level %q is not a level of the keyspace's protocol", r.Level)
	}
	if ks != nil && r.Op.IsWrite() && config.TxnModeOf(ks.Spec.Options) != config.TxnNone {
		fail("a plain write on a transactional keyspace")
	}
	gl := ks != nil && ks.Spec.Protocol == config.ProtocolGlobLease
	if gl && r.Op != engine.OpScan && r.Level != "" {
		fail("level %q on a single-key operation of a globlease keyspace", r.Level)
	}
	if r.WriteMode != "" && (!gl || (r.WriteMode != "active" && r.WriteMode != "passive") || (r.Op != engine.OpPut && r.Op != engine.OpDelete)) {
		fail("write mode %q", r.WriteMode)
	}
	if !r.Deadline.After(v.now) || r.Deadline.After(v.now.Add(lim.MaxRequestTimeout)) {
		fail("deadline %v is not in (now, now+%v]", r.Deadline, lim.MaxRequestTimeout)
	}
	checkKey := func(what string, k []byte) {
		t.Helper()
		if len(k) < 1 || len(k) > lim.MaxKeyBytes {
			fail("%s is %d bytes, want 1..%d", what, len(k), lim.MaxKeyBytes)
		}
	}
	switch m := in.(type) {
	case *meridianpb.GetRequest:
		if r.Op != engine.OpGet || r.Keyspace != m.Keyspace || !bytes.Equal(r.Key, m.Key) {
			fail("not the request given")
		}
		checkKey("key", r.Key)
	case *meridianpb.PutRequest:
		if r.Op != engine.OpPut || r.Keyspace != m.Keyspace || !bytes.Equal(r.Key, m.Key) || !bytes.Equal(r.Value, m.Value) {
			fail("not the request given")
		}
		checkKey("key", r.Key)
		if r.Value == nil || len(r.Value) > lim.MaxValueBytes {
			fail("value is nil or %d bytes, want non-nil and ≤ %d", len(r.Value), lim.MaxValueBytes)
		}
	case *meridianpb.DeleteRequest:
		if r.Op != engine.OpDelete || r.Keyspace != m.Keyspace || !bytes.Equal(r.Key, m.Key) {
			fail("not the request given")
		}
		checkKey("key", r.Key)
	case *meridianpb.ScanRequest:
		if r.Op != engine.OpScan || r.Keyspace != m.Keyspace || !bytes.Equal(r.Start, m.Start) || !bytes.Equal(r.End, m.End) {
			fail("not the request given")
		}
		if r.Start == nil || len(r.Start) > lim.MaxKeyBytes || len(r.End) > lim.MaxKeyBytes {
			fail("start (%d bytes) or end (%d bytes) is nil or over %d", len(r.Start), len(r.End), lim.MaxKeyBytes)
		}
		if len(r.End) > 0 && bytes.Compare(r.Start, r.End) >= 0 {
			fail("empty range [%q, %q)", r.Start, r.End)
		}
		if r.Limit < 1 || r.Limit > lim.MaxScanLimit {
			fail("limit %d, want 1..%d", r.Limit, lim.MaxScanLimit)
		}
		if m.Limit != 0 && r.Limit != int(m.Limit) {
			fail("limit %d, asked for %d", r.Limit, m.Limit)
		}
	}
}

// FuzzTxnCommitRequest decodes arbitrary bytes as a TxnCommitRequest and validates it, under
// the default limits and under small ones. Validation must never panic; a request it accepts
// must be a transaction on a transactional keyspace within the limits, with no key twice and
// every snapshot of one of the keyspace's partitions, handed to the engine as given; a request
// it rejects must get an Invalid or NotFound error with a one-line message.
func FuzzTxnCommitRequest(f *testing.F) {
	add := func(m *meridianpb.TxnCommitRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	w := func(k, v string, del bool) *meridianpb.TxnWrite {
		return &meridianpb.TxnWrite{Key: []byte(k), Value: []byte(v), Delete: del}
	}
	sn := func(p uint32, c uint64) *meridianpb.TxnSnapshot {
		return &meridianpb.TxnSnapshot{Partition: p, Counter: c}
	}
	// Valid requests.
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a")}, Writes: []*meridianpb.TxnWrite{w("b", "v", false)}, Snapshots: []*meridianpb.TxnSnapshot{sn(0, 3)}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Writes: []*meridianpb.TxnWrite{w("b", "", true), w("c", "", false)}, TimeoutMs: 1000})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a"), []byte("b")}, Snapshots: []*meridianpb.TxnSnapshot{sn(3, 1), sn(1, 1<<40)}, PlacementVersion: 7})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a"), []byte("b")}, ReadVersions: []uint64{3, 0}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a"), []byte("b")}, ReadVersions: []uint64{3}})
	// Invalid requests.
	add(&meridianpb.TxnCommitRequest{})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx"})
	add(&meridianpb.TxnCommitRequest{Keyspace: "kv", Reads: [][]byte{[]byte("a")}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "nope", Reads: [][]byte{[]byte("a")}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a"), []byte("a")}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a")}, Writes: []*meridianpb.TxnWrite{w("a", "v", false)}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Writes: []*meridianpb.TxnWrite{w("a", "v", false), w("a", "", true)}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Writes: []*meridianpb.TxnWrite{w("a", "v", true)}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Writes: []*meridianpb.TxnWrite{w("a", "0123456789abcdef", false)}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Writes: []*meridianpb.TxnWrite{w("", "v", false)}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a")}, Snapshots: []*meridianpb.TxnSnapshot{sn(9, 1)}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a")}, Snapshots: []*meridianpb.TxnSnapshot{sn(1, 1), sn(1, 2)}})
	add(&meridianpb.TxnCommitRequest{Keyspace: "tx", Reads: [][]byte{[]byte("a")}, TimeoutMs: 1<<32 - 1})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add([]byte{})

	pm := testPlacement(f)
	small := fuzzLimits
	small.MaxTxnKeys = 3
	validators := []validator{
		{limits: config.DefaultLimits(), pmap: pm, now: testNow},
		{limits: small, pmap: pm, now: testNow},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msg := &meridianpb.TxnCommitRequest{}
		if err := proto.Unmarshal(data, msg); err != nil {
			return
		}
		for _, v := range validators {
			got, err := v.txnCommit(msg)
			if err != nil {
				checkFuzzError(t, msg, err)
				continue
			}
			checkFuzzTxnCommit(t, v, msg, got)
		}
	})
}

func checkFuzzTxnCommit(t *testing.T, v validator, in *meridianpb.TxnCommitRequest, r engine.Request) {
	t.Helper()
	lim := v.limits
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("accepted %v (limits %+v) as %+v: "+format, append([]any{in, lim, r}, args...)...)
	}
	ks, ok := v.pmap.Keyspace(r.Keyspace)
	if !ok || strings.HasPrefix(r.Keyspace, "_") || r.Keyspace != in.Keyspace {
		fail("keyspace %q is unknown, reserved or not the one given", r.Keyspace)
	}
	if config.TxnModeOf(ks.Spec.Options) == config.TxnNone {
		fail("keyspace %q is not transactional", r.Keyspace)
	}
	if r.Op != engine.OpTxnCommit || r.Txn == nil || r.Level != "" || r.WriteMode != "" || len(r.Key) != 0 {
		fail("not a plain txn-commit")
	}
	if !r.Deadline.After(v.now) || r.Deadline.After(v.now.Add(lim.MaxRequestTimeout)) {
		fail("deadline %v is not in (now, now+%v]", r.Deadline, lim.MaxRequestTimeout)
	}
	tx := r.Txn
	if n := len(tx.Reads) + len(tx.Writes); n == 0 || n > lim.MaxTxnKeys {
		fail("%d keys, want 1..%d", n, lim.MaxTxnKeys)
	}
	if len(tx.Reads) != len(in.Reads) || len(tx.Writes) != len(in.Writes) || len(tx.Snapshots) != len(in.Snapshots) {
		fail("not the reads, writes and snapshots given")
	}
	if len(tx.ReadVersions) != 0 && (len(tx.ReadVersions) != len(tx.Reads) || !slices.Equal(tx.ReadVersions, in.ReadVersions)) {
		fail("read versions %v for %d reads, given %v", tx.ReadVersions, len(tx.Reads), in.ReadVersions)
	}
	seen := map[string]bool{}
	total := 0
	for i, w := range tx.Writes {
		if len(w.Key) < 1 || len(w.Key) > lim.MaxKeyBytes || seen[string(w.Key)] {
			fail("write key %q: empty, over %d bytes or twice", w.Key, lim.MaxKeyBytes)
		}
		seen[string(w.Key)] = true
		if !bytes.Equal(w.Key, in.Writes[i].Key) || !bytes.Equal(w.Value, in.Writes[i].Value) || w.Delete != in.Writes[i].Delete {
			fail("write %d is not the one given", i)
		}
		if w.Delete && len(w.Value) > 0 || !w.Delete && w.Value == nil {
			fail("write %d: delete %v with value %#v", i, w.Delete, w.Value)
		}
		total += len(w.Key) + len(w.Value)
	}
	seenRead := map[string]bool{}
	for i, k := range tx.Reads {
		if len(k) < 1 || len(k) > lim.MaxKeyBytes || seenRead[string(k)] {
			fail("read key %q: empty, over %d bytes, or twice", k, lim.MaxKeyBytes)
		}
		seenRead[string(k)] = true
		if !bytes.Equal(k, in.Reads[i]) {
			fail("read %d is not the one given", i)
		}
		total += len(k)
	}
	if total > lim.MaxValueBytes {
		fail("%d bytes of keys and values, over %d", total, lim.MaxValueBytes)
	}
	parts := map[uint32]bool{}
	for i, s := range tx.Snapshots {
		if _, ok := ks.Partition(s.Partition); !ok || parts[s.Partition] {
			fail("snapshot of partition %d: not in the keyspace, or twice", s.Partition)
		}
		parts[s.Partition] = true
		if s.Partition != in.Snapshots[i].GetPartition() || s.Counter != in.Snapshots[i].GetCounter() {
			fail("snapshot %d is not the one given", i)
		}
	}
}
