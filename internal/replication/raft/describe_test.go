package raft

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/wire/peerpb"
)

// The simulator renders Raft's messages through the registry: this package's describer owns
// its envelopes and nothing else.
func TestDescribeMessage(t *testing.T) {
	msg, err := proto.Marshal(&raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), Term: proto.Uint64(3), Index: proto.Uint64(7), LogTerm: proto.Uint64(2), Commit: proto.Uint64(6),
		Entries: []*raftpb.Entry{{Index: proto.Uint64(8)}}})
	if err != nil {
		t.Fatal(err)
	}
	batch := &peerpb.Envelope{From: 1, To: 2, Msg: &peerpb.Envelope_RaftBatch{RaftBatch: &peerpb.RaftBatch{Messages: []*peerpb.RaftMessage{
		{Keyspace: "kv", Partition: 4, Message: msg}, {Keyspace: "kv", Partition: 5, Message: []byte{0xff}}}}}}
	line, ok := DescribeMessage(batch, nil)
	if !ok || line[:len("1->2 raft_batch [kv/4 MsgApp t3 i7/t2 +1 c6; kv/5 undecodable")] != "1->2 raft_batch [kv/4 MsgApp t3 i7/t2 +1 c6; kv/5 undecodable" {
		t.Fatalf("got %q, %v", line, ok)
	}
	if _, ok := DescribeMessage(&peerpb.Envelope{Msg: &peerpb.Envelope_Heartbeat{Heartbeat: &peerpb.Heartbeat{}}}, nil); ok {
		t.Fatal("claimed a heartbeat of the quorum family")
	}
}
