package raft

import (
	"fmt"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/wire/peerpb"
)

// DescribeMessage renders the Raft engine's group messages for the simulator's traces (the
// metadata group, built on the same engine, uses it too).
func DescribeMessage(env *peerpb.Envelope, _ func(*peerpb.Version) string) (string, bool) {
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_Raft:
		return fmt.Sprintf("%d->%d raft %s", env.From, env.To, describeRaft(m.Raft)), true
	case *peerpb.Envelope_RaftBatch:
		parts := make([]string, 0, len(m.RaftBatch.Messages))
		for _, r := range m.RaftBatch.Messages {
			parts = append(parts, describeRaft(r))
		}
		return fmt.Sprintf("%d->%d raft_batch [%s]", env.From, env.To, strings.Join(parts, "; ")), true
	case *peerpb.Envelope_RaftRemoved:
		r := m.RaftRemoved
		if r.GetConfIndex() == 0 {
			return fmt.Sprintf("%d->%d raft_removed? %s", env.From, env.To, groupName(r.GetKeyspace(), r.GetPartition(), r.Group)), true
		}
		return fmt.Sprintf("%d->%d raft_removed %s conf_index=%d", env.From, env.To, groupName(r.GetKeyspace(), r.GetPartition(), r.Group), r.GetConfIndex()), true
	case *peerpb.Envelope_RaftSnapshotOffer:
		o := m.RaftSnapshotOffer
		return fmt.Sprintf("%d->%d raft_snapshot_offer %s %s (%d bytes)", env.From, env.To, groupName(o.GetKeyspace(), o.GetPartition(), o.Group), o.GetSnapshotId(), o.GetSize()), true
	case *peerpb.Envelope_RaftApplied:
		a := m.RaftApplied
		if a.GetFrozenAt() != 0 {
			return fmt.Sprintf("%d->%d raft_frozen %s applied=%d frozen_at=%d", env.From, env.To, groupName(a.GetKeyspace(), a.GetPartition(), a.Group), a.GetIndex(), a.GetFrozenAt()), true
		}
	}
	return "", false
}

// groupName renders a group a message names: keyspace/partition, or keyspace/group@anchor
// when the message names the group's anchor (wire.go).
func groupName(keyspace string, partition uint32, group *uint32) string {
	if group == nil {
		return fmt.Sprintf("%s/%d", keyspace, partition)
	}
	return fmt.Sprintf("%s/%d@%d", keyspace, *group, partition)
}

// describeRaft renders a Raft message briefly: its group, type, term, index and commit, or
// why it does not decode.
func describeRaft(r *peerpb.RaftMessage) string {
	var m raftpb.Message
	if err := proto.Unmarshal(r.GetMessage(), &m); err != nil {
		return fmt.Sprintf("%s undecodable: %v", groupName(r.GetKeyspace(), r.GetPartition(), r.Group), err)
	}
	s := fmt.Sprintf("%s %s t%d", groupName(r.GetKeyspace(), r.GetPartition(), r.Group), m.GetType(), m.GetTerm())
	if m.GetIndex() != 0 || m.GetLogTerm() != 0 {
		s += fmt.Sprintf(" i%d/t%d", m.GetIndex(), m.GetLogTerm())
	}
	if n := len(m.GetEntries()); n > 0 {
		s += fmt.Sprintf(" +%d", n)
	}
	if m.GetCommit() != 0 {
		s += fmt.Sprintf(" c%d", m.GetCommit())
	}
	if m.GetReject() {
		s += " reject"
	}
	return s
}

// DebugState describes every group of this node in one line each (the simulator prints it
// at the end of a verbose run): role, term, commit, applied, configuration, placement.
func (e *Engine) DebugState() string {
	var b strings.Builder
	for _, g := range e.order {
		st := g.rn.BasicStatus()
		last, _ := g.log.Storage().LastIndex()
		fmt.Fprintf(&b, "%s/%d: %v lead=%d term=%d commit=%d last=%d applied=%d voters=%v out=%v learners=%v desc=%v learners=%v inPlacement=%v removed=%v range=%s gen=%d frozen=%d retired=%v blocked=%d\n",
			g.key.keyspace, g.key.partition, st.RaftState, st.Lead, st.HardState.GetTerm(), st.HardState.GetCommit(), last, g.applied,
			g.conf.GetVoters(), g.conf.GetVotersOutgoing(), g.conf.GetLearners(), g.desc.Replicas, g.desc.Learners, g.inPlacement, g.removed,
			g.rangeString(), g.gen, g.frozenAt, g.partRetired, g.blockedAt)
	}
	return b.String()
}
