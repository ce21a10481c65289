package wire

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"meridian/internal/config"
	"meridian/internal/placement"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// testCheck is node 1's view of a 3-node cluster (one node per region), keyspace "kv" with 4
// partitions on every node and keyspace "two" with its replicas only in regions a and b
// (nodes 1 and 2).
func testCheck(t testing.TB) *PeerCheck {
	t.Helper()
	topo := topology.Equidistant("t", []string{"a", "b", "c"}, 2, 0)
	c := &config.Cluster{Name: "t", Topology: topo, TopologyRef: topo.Name,
		Keyspaces: []config.Keyspace{
			{Name: "kv", Protocol: config.ProtocolQuorum, Partitions: 4},
			{Name: "two", Protocol: config.ProtocolQuorum, Partitions: 1, Regions: []string{"a", "b"}},
		}}
	for i, r := range []string{"a", "b", "c"} {
		c.Nodes = append(c.Nodes, config.Node{Name: r, Region: r, Listen: "127.0.0.1:" + string(rune('1'+i)) + "000",
			PeerListen: "127.0.0.1:" + string(rune('1'+i)) + "001"})
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	pm, err := placement.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	return &PeerCheck{Self: 1, Members: func(id uint32) bool { return id >= 1 && id <= 3 }, Placement: pm,
		Limits: c.Limits, Now: time.Unix(1_800_000_000, 0), MaxFuture: time.Second + 2*time.Millisecond}
}

func rec(pc *PeerCheck, ks string, key string, wall time.Time) *peerpb.Record {
	k, _ := pc.Placement.Keyspace(ks)
	_ = k
	return &peerpb.Record{Keyspace: ks, Key: []byte(key), Value: []byte("v"),
		Version: &peerpb.Version{WallNanos: wall.UnixNano(), NodeId: 2}}
}

func write(from uint32, r *peerpb.Record) *peerpb.Envelope {
	return &peerpb.Envelope{From: from, To: 1, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{RequestId: 1, Record: r}}}
}

func scanReply(reverse, truncated bool, recs ...*peerpb.Record) *peerpb.Envelope {
	return &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ScanReply{ScanReply: &peerpb.ScanReply{RequestId: 1, Records: recs, Truncated: truncated, Reverse: reverse}}}
}

func TestPeerCheckRejections(t *testing.T) {
	pc := testCheck(t)
	now := pc.Now
	big := strings.Repeat("k", pc.Limits.MaxKeyBytes+1)
	aePush := func(from uint32, r *peerpb.Record) *peerpb.Envelope {
		return &peerpb.Envelope{From: from, To: 1, Msg: &peerpb.Envelope_AePush{AePush: &peerpb.AEPush{Records: []*peerpb.Record{r}}}}
	}
	cases := []struct {
		name   string
		env    *peerpb.Envelope
		reason string // "" = accepted
	}{
		{"a valid write", write(2, rec(pc, "kv", "k", now)), ""},
		{"a version within ε + margin ahead", write(2, rec(pc, "kv", "k", now.Add(time.Second))), ""},
		{"a version in the year 2255", write(2, rec(pc, "kv", "k", time.Date(2255, 1, 1, 0, 0, 0, 0, time.UTC))), RejectFutureVersion},
		{"a version just beyond the bound", write(2, rec(pc, "kv", "k", now.Add(time.Second+3*time.Millisecond))), RejectFutureVersion},
		{"from a non-member", write(9, rec(pc, "kv", "k", now)), RejectNotMember},
		{"from itself", write(1, rec(pc, "kv", "k", now)), RejectNotMember},
		{"to another node", &peerpb.Envelope{From: 2, To: 3, Msg: &peerpb.Envelope_Heartbeat{Heartbeat: &peerpb.Heartbeat{}}}, RejectMalformed},
		{"an unknown keyspace", write(2, &peerpb.Record{Keyspace: "nope", Key: []byte("k"), Version: &peerpb.Version{WallNanos: 1, NodeId: 2}}), RejectUnknown},
		// A GlobLease message may name a partition of a neighbouring map in a keyspace whose
		// partitions split and merge (a split made it, a merge retired it): accepted, the
		// engine ignores what it does not hold; a Raft group message still may not.
		{"a globlease message naming a partition of another map", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_GlPrepare{GlPrepare: &peerpb.GlPrepare{Keyspace: "kv", Partition: 99}}}, ""},
		{"a partition out of range", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_RaftApplied{RaftApplied: &peerpb.RaftApplied{Keyspace: "kv", Partition: 99}}}, RejectBadPartition},
		{"an empty anti-entropy range", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_AeDigest{AeDigest: &peerpb.AEDigest{Keyspace: "kv", Start: []byte("b"), End: []byte("a"), BucketHashes: []uint64{1}}}}, RejectMalformed},
		{"a key over the limit", write(2, rec(pc, "kv", big, now)), RejectTooLarge},
		// Large reads (docs/mayflower.md).
		{"a chunk request", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ReadChunk{ReadChunk: &peerpb.ReadChunkRequest{Keyspace: "kv", Key: []byte("k"), Version: &peerpb.Version{WallNanos: now.UnixNano(), NodeId: 2}, Offset: 0, Length: 4096}}}, ""},
		{"a chunk request without a version", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ReadChunk{ReadChunk: &peerpb.ReadChunkRequest{Keyspace: "kv", Key: []byte("k"), Version: nil, Offset: 0, Length: 4096}}}, RejectMalformed},
		{"a chunk of no bytes", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ReadChunk{ReadChunk: &peerpb.ReadChunkRequest{Keyspace: "kv", Key: []byte("k"), Version: &peerpb.Version{WallNanos: now.UnixNano(), NodeId: 2}, Offset: 0, Length: 0}}}, RejectMalformed},
		{"a chunk over the chunk bound", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ReadChunk{ReadChunk: &peerpb.ReadChunkRequest{Keyspace: "kv", Key: []byte("k"), Version: &peerpb.Version{WallNanos: now.UnixNano(), NodeId: 2}, Offset: 0, Length: MaxReadChunkBytes + 1}}}, RejectMalformed},
		{"a chunk past max_value_bytes", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ReadChunk{ReadChunk: &peerpb.ReadChunkRequest{Keyspace: "kv", Key: []byte("k"), Version: &peerpb.Version{WallNanos: now.UnixNano(), NodeId: 2}, Offset: uint64(pc.Limits.MaxValueBytes), Length: 1}}}, RejectMalformed},
		{"a chunk reply past max_value_bytes", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ReadChunkReply{ReadChunkReply: &peerpb.ReadChunkReply{Offset: uint64(pc.Limits.MaxValueBytes), Data: []byte("x")}}}, RejectTooLarge},
		{"a read reply omitting no bytes", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ReadReply{ReadReply: &peerpb.ReadReply{Found: true, Record: rec(pc, "kv", "k", now), ValueOmitted: true}}}, RejectMalformed},
		{"a transfer report", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_TransferReport{TransferReport: &peerpb.TransferReport{Transfers: []*peerpb.Transfer{{Source: 3, RemainingBytes: 1 << 20, RemainingKnown: true, RateBytesPerSec: 1e6}}, IntervalMs: 1000}}}, ""},
		{"a transfer report naming a stranger", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_TransferReport{TransferReport: &peerpb.TransferReport{Transfers: []*peerpb.Transfer{{Source: 9, RateBytesPerSec: 1e6}}, IntervalMs: 1000}}}, RejectMalformed},
		{"a transfer report with a NaN rate", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_TransferReport{TransferReport: &peerpb.TransferReport{Transfers: []*peerpb.Transfer{{Source: 3, RateBytesPerSec: math.NaN()}}, IntervalMs: 1000}}}, RejectMalformed},
		{"a transfer report without an interval", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_TransferReport{TransferReport: &peerpb.TransferReport{Transfers: nil, IntervalMs: 0}}}, RejectMalformed},
		// Scans, and the halves of a split scan (docs/mayflower.md, "Split scans").
		{"a reverse scan", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_Scan{Scan: &peerpb.ScanRequest{Keyspace: "kv", Start: []byte("a"), End: []byte("b"), Limit: 10, Reverse: true, MaxBytes: MaxScanReplyBytes}}}, ""},
		{"a scan with pages over the bound", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_Scan{Scan: &peerpb.ScanRequest{Keyspace: "kv", Reverse: true, MaxBytes: MaxScanReplyBytes + 1}}}, RejectMalformed},
		{"a streaming scan", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_Scan{Scan: &peerpb.ScanRequest{Keyspace: "kv", Start: []byte("a"), Window: MaxScanWindow}}}, ""},
		{"a scan with a window over the bound", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_Scan{Scan: &peerpb.ScanRequest{Keyspace: "kv", Window: MaxScanWindow + 1}}}, RejectMalformed},
		{"a scan credit", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ScanCredit{ScanCredit: &peerpb.ScanCredit{RequestId: 1, Through: 9, End: []byte("m\x00")}}}, ""},
		{"a scan credit with an oversized bound", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ScanCredit{ScanCredit: &peerpb.ScanCredit{RequestId: 1, Start: make([]byte, 1<<20)}}}, RejectTooLarge},
		{"a scan reply in key order", scanReply(false, false, rec(pc, "kv", "a", now), rec(pc, "kv", "b", now)), ""},
		{"a reverse scan reply in descending key order", scanReply(true, true, rec(pc, "kv", "b", now), rec(pc, "kv", "a", now)), ""},
		{"a reverse scan reply in ascending key order", scanReply(true, false, rec(pc, "kv", "a", now), rec(pc, "kv", "b", now)), RejectMalformed},
		{"a scan reply out of key order", scanReply(false, false, rec(pc, "kv", "b", now), rec(pc, "kv", "a", now)), RejectMalformed},
		{"a scan reply naming a key twice", scanReply(false, false, rec(pc, "kv", "a", now), rec(pc, "kv", "a", now)), RejectMalformed},
		{"a truncated scan reply without records", scanReply(true, true), RejectMalformed},
		{"an empty key", write(2, &peerpb.Record{Keyspace: "kv", Version: &peerpb.Version{WallNanos: 1, NodeId: 2}}), RejectMalformed},
		{"a value over the limit", write(2, func() *peerpb.Record {
			r := rec(pc, "kv", "k", now)
			r.Value = make([]byte, pc.Limits.MaxValueBytes+1)
			return r
		}()), RejectTooLarge},
		{"a zero version", write(2, func() *peerpb.Record {
			r := rec(pc, "kv", "k", now)
			r.Version = nil
			return r
		}()), RejectMalformed},
		{"a version by a non-member", write(2, func() *peerpb.Record {
			r := rec(pc, "kv", "k", now)
			r.Version.NodeId = 7
			return r
		}()), RejectMalformed},
		{"a tombstone with a value", write(2, func() *peerpb.Record {
			r := rec(pc, "kv", "k", now)
			r.Tombstone = true
			return r
		}()), RejectMalformed},
		{"anti-entropy from a replica", aePush(2, rec(pc, "two", "k", now)), ""},
		{"anti-entropy from a non-replica", aePush(3, rec(pc, "two", "k", now)), RejectSenderReplica},
		{"a status with a future send time", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_Status{Status: &peerpb.Status{
			Current: &peerpb.StatusBatch{StsUnixNanos: now.Add(time.Hour).UnixNano()}}}}, RejectFutureVersion},
		{"a clock pong far ahead (measuring offsets is its purpose)", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_ClockPong{ClockPong: &peerpb.ClockPong{
			T2UnixNanos: now.Add(time.Hour).UnixNano()}}}, ""},
		{"a read of a partition this node does not replicate", &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_Read{Read: &peerpb.ReadRequest{
			Keyspace: "two", Partition: 0, Key: []byte("k")}}}, ""},
		{"an empty envelope", &peerpb.Envelope{From: 2, To: 1}, RejectMalformed},
	}
	for _, tc := range cases {
		got := pc.Envelope(tc.env)
		switch {
		case tc.reason == "" && got != nil:
			t.Errorf("%s: rejected: %v", tc.name, got)
		case tc.reason != "" && got == nil:
			t.Errorf("%s: accepted, want %s", tc.name, tc.reason)
		case tc.reason != "" && got.Reason != tc.reason:
			t.Errorf("%s: %v, want reason %s", tc.name, got, tc.reason)
		}
	}
	// Node 3 holds no replica of "two": a read addressed to it is refused.
	pc3 := *pc
	pc3.Self = 3
	if got := pc3.Envelope(&peerpb.Envelope{From: 1, To: 3, Msg: &peerpb.Envelope_Read{Read: &peerpb.ReadRequest{
		Keyspace: "two", Partition: 0, Key: []byte("k")}}}); got == nil || got.Reason != RejectReceiverReplic {
		t.Errorf("read at a non-replica: %v", got)
	}
}

// Every message type of the peer protocol has a validation rule: a new message added to
// peer.proto without one is refused (unknown_type) by every node, and this test names it.
func TestPeerCheckCoversEveryMessage(t *testing.T) {
	pc := testCheck(t)
	oneof := (&peerpb.Envelope{}).ProtoReflect().Descriptor().Oneofs().ByName("msg")
	fields := oneof.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &peerpb.Envelope{From: 2, To: 1}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		if rej := pc.Envelope(env); rej != nil && rej.Reason == RejectUnknownType {
			t.Errorf("message %s has no validation rule in PeerCheck.Envelope", fd.Name())
		}
	}
}

// Fuzzing the decoder and the check together: whatever bytes arrive, decoding either fails
// or yields an envelope PeerCheck judges without panicking.
func FuzzPeerEnvelope(f *testing.F) {
	pc := testCheck(f)
	for _, env := range []*peerpb.Envelope{
		write(2, rec(pc, "kv", "k", pc.Now)),
		{From: 2, To: 1, Msg: &peerpb.Envelope_Status{Status: &peerpb.Status{Current: &peerpb.StatusBatch{Entries: []*peerpb.StatusEntry{{Keyspace: "kv", Key: []byte("k"), Wts: &peerpb.Version{WallNanos: 1, NodeId: 2}}}}}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_GlAccept{GlAccept: &peerpb.GlAccept{Table: &peerpb.GlTable{Keyspace: "kv", DefaultMaster: 2, Overrides: []*peerpb.GlOverride{{Key: []byte("x"), Master: 3}}}}}},
		// A replica move's fields: ballots and heartbeats name the sender's configuration,
		// tables the configuration that chose them and the homes a move handed over.
		{From: 2, To: 1, Msg: &peerpb.Envelope_GlAccept{GlAccept: &peerpb.GlAccept{Ballot: &peerpb.GlBallot{Round: 3, Node: 2, Config: 8},
			Table: &peerpb.GlTable{Keyspace: "kv", Version: 5, Config: 8, HandedOver: []uint32{3}}}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_GlHeartbeat{GlHeartbeat: &peerpb.GlHeartbeat{Seq: 1, Parts: []*peerpb.GlPartVersion{{Keyspace: "kv", Version: 5, Config: 9}}}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_GlUpdate{GlUpdate: &peerpb.GlUpdate{WriteId: 1, Record: rec(pc, "kv", "k", pc.Now), MoveEpoch: 4}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_GlUpdateAck{GlUpdateAck: &peerpb.GlUpdateAck{WriteId: 1, Ok: true, NotStored: true}}},
		// A split scan's back half and its reply.
		{From: 2, To: 1, Msg: &peerpb.Envelope_Scan{Scan: &peerpb.ScanRequest{RequestId: 1, Keyspace: "kv", Start: []byte("a"), End: []byte("m"), Limit: 5, Reverse: true, MaxBytes: 4096}}},
		scanReply(true, true, rec(pc, "kv", "c", pc.Now), rec(pc, "kv", "b", pc.Now)),
		// A streaming scan and its credit.
		{From: 2, To: 1, Msg: &peerpb.Envelope_Scan{Scan: &peerpb.ScanRequest{RequestId: 2, Keyspace: "kv", Start: []byte("a"), Limit: 5, MaxBytes: 4096, Window: 4}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_ScanCredit{ScanCredit: &peerpb.ScanCredit{RequestId: 2, Through: 5, End: []byte("m")}}},
	} {
		b, err := proto.Marshal(env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var env peerpb.Envelope
		if err := proto.Unmarshal(b, &env); err != nil {
			return
		}
		if rej := pc.Envelope(&env); rej != nil && rej.Reason == "" {
			t.Fatalf("a rejection without a reason: %v", rej)
		}
	})
}
