package twopc

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/txnwire"
	"meridian/internal/wire/peerpb"
)

// The wire form of entries and a replica's saved state (proto/meridian/v1/peer.proto, Twopc*).
// Decoders check what a replica relies on and refuse the rest with an error naming the field.

// Limits bound what a decoded entry may hold (shared with SDUR: txnwire).
type Limits = txnwire.Limits

// DefaultLimits are the decoders' limits unless the runtime gives others.
var DefaultLimits = txnwire.DefaultLimits

func idPB(id TxnID) *peerpb.SdurTxnId { return &peerpb.SdurTxnId{Node: id.Node, Seq: id.Seq} }

func idOf(pb *peerpb.SdurTxnId) (TxnID, error) {
	if pb == nil {
		return TxnID{}, fmt.Errorf("transaction id missing")
	}
	return TxnID{Node: pb.GetNode(), Seq: pb.GetSeq()}, nil
}

func partPB(p *Part) *peerpb.TwopcPart {
	pb := &peerpb.TwopcPart{Id: idPB(p.ID), Partition: p.Partition, Partitions: p.Partitions, Coordinator: p.Coordinator, Submitter: p.Submitter}
	for _, r := range p.Reads {
		pb.Reads = append(pb.Reads, &peerpb.TwopcRead{Key: []byte(r.Key), Version: r.Version})
	}
	for _, w := range p.Writes {
		pb.Writes = append(pb.Writes, &peerpb.SdurWrite{Key: []byte(w.Key), Value: w.Value, Delete: w.Delete})
	}
	return pb
}

func partOf(pb *peerpb.TwopcPart, lim Limits) (*Part, error) {
	if pb == nil {
		return nil, fmt.Errorf("part missing")
	}
	id, err := idOf(pb.GetId())
	if err != nil {
		return nil, err
	}
	if err := lim.CheckKeys(len(pb.GetReads()) + len(pb.GetWrites())); err != nil {
		return nil, fmt.Errorf("transaction %s: %w", id, err)
	}
	if err := lim.CheckPartitions(pb.GetPartitions()); err != nil {
		return nil, fmt.Errorf("transaction %s: %w", id, err)
	}
	if !slices.Contains(pb.GetPartitions(), pb.GetPartition()) || !slices.Contains(pb.GetPartitions(), pb.GetCoordinator()) {
		return nil, fmt.Errorf("transaction %s: partitions %v must include its partition %d and its coordinator %d", id, pb.GetPartitions(), pb.GetPartition(), pb.GetCoordinator())
	}
	p := &Part{ID: id, Partition: pb.GetPartition(), Partitions: pb.GetPartitions(), Coordinator: pb.GetCoordinator(), Submitter: pb.GetSubmitter()}
	for _, r := range pb.GetReads() {
		if err := lim.CheckKey("read", r.GetKey()); err != nil {
			return nil, fmt.Errorf("transaction %s: %w", id, err)
		}
		p.Reads = append(p.Reads, Read{Key: string(r.GetKey()), Version: r.GetVersion()})
	}
	for _, w := range pb.GetWrites() {
		if err := lim.CheckKey("written", w.GetKey()); err != nil {
			return nil, fmt.Errorf("transaction %s: %w", id, err)
		}
		if err := lim.CheckValue(w.GetValue()); err != nil {
			return nil, fmt.Errorf("transaction %s: %w", id, err)
		}
		p.Writes = append(p.Writes, Write{Key: string(w.GetKey()), Value: w.GetValue(), Delete: w.GetDelete()})
	}
	return p, nil
}

// EncodeEntry is an entry's wire form (a log entry's payload).
func EncodeEntry(e Entry) ([]byte, error) {
	pb := &peerpb.TwopcEntry{Kind: uint32(e.Kind), Txn: idPB(e.Txn), Commit: e.Commit, Partitions: e.Partitions, Submitter: e.Submitter, Coordinator: e.Coordinator}
	if e.Part != nil {
		pb.Part = partPB(e.Part)
	}
	b, err := proto.Marshal(pb)
	if err != nil {
		return nil, fmt.Errorf("twopc: encode entry: %w", err)
	}
	return b, nil
}

// DecodeEntry decodes and checks an entry.
func DecodeEntry(data []byte, lim Limits) (Entry, error) {
	var pb peerpb.TwopcEntry
	if err := proto.Unmarshal(data, &pb); err != nil {
		return Entry{}, fmt.Errorf("twopc: decode entry: %w", err)
	}
	switch EntryKind(pb.GetKind()) {
	case EntryPrepare:
		p, err := partOf(pb.GetPart(), lim)
		if err != nil {
			return Entry{}, fmt.Errorf("twopc: prepare entry: %w", err)
		}
		return Entry{Kind: EntryPrepare, Part: p}, nil
	case EntryDecision:
		id, err := idOf(pb.GetTxn())
		if err != nil {
			return Entry{}, fmt.Errorf("twopc: decision entry: %w", err)
		}
		if err := lim.CheckPartitions(pb.GetPartitions()); err != nil {
			return Entry{}, fmt.Errorf("twopc: decision on %s: %w", id, err)
		}
		return Entry{Kind: EntryDecision, Txn: id, Commit: pb.GetCommit(), Partitions: pb.GetPartitions(), Submitter: pb.GetSubmitter(), Coordinator: pb.GetCoordinator()}, nil
	}
	return Entry{}, fmt.Errorf("twopc: entry kind %d is neither a prepare (1) nor a decision (2)", pb.GetKind())
}

// stateVersion is the saved state's encoding version; Restore refuses others.
const stateVersion = 1

// Snapshot encodes the replica's state: the commit counter, each key's last committed
// version, the prepared transactions (their locks are derived from them), the decisions it
// remembers, and what it coordinates.
func (r *Replica) Snapshot() ([]byte, error) {
	st := &peerpb.TwopcState{Version: stateVersion, Partition: r.partition, CommitVersion: r.version}
	keys := make([]string, 0, len(r.lastWrite))
	for k := range r.lastWrite {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		st.LastWrites = append(st.LastWrites, &peerpb.TwopcLastWrite{Key: []byte(k), Version: r.lastWrite[k]})
	}
	for _, id := range sortIDs(r.prepared) {
		st.Prepared = append(st.Prepared, partPB(r.prepared[id].part))
	}
	for _, id := range r.order {
		if c, ok := r.decided[id]; ok {
			st.Decided = append(st.Decided, &peerpb.TwopcDecided{Txn: idPB(id), Commit: c})
		}
	}
	for _, id := range r.sortedCoord() {
		c := r.coord[id]
		pc := &peerpb.TwopcCoordinating{Txn: idPB(id), Partitions: c.parts, Submitter: c.submitter}
		for _, p := range sortedPartitions(c.votes) {
			v := c.votes[p]
			pc.Votes = append(pc.Votes, &peerpb.TwopcVote{Txn: idPB(v.Txn), Partition: v.Partition, Coordinator: v.Coordinator, Commit: v.Commit, Key: []byte(v.Key)})
		}
		st.Coordinating = append(st.Coordinating, pc)
	}
	b, err := proto.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("twopc: encode the state of partition %d: %w", r.partition, err)
	}
	return b, nil
}

// Restore returns a replica at the state data encodes, with opts (the node's configuration).
// Locks are rebuilt from the prepared transactions; two prepared transactions whose locks
// conflict are refused (a corrupt state).
func Restore(data []byte, opts Options, now time.Time) (*Replica, error) {
	var st peerpb.TwopcState
	if err := proto.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("twopc: decode a replica state: %w", err)
	}
	if st.GetVersion() != stateVersion {
		return nil, fmt.Errorf("twopc: replica state version %d, this build reads %d", st.GetVersion(), stateVersion)
	}
	r, err := NewReplica(st.GetPartition(), opts)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*Replica, error) {
		return nil, fmt.Errorf("twopc: restored state of partition %d: "+format, append([]any{st.GetPartition()}, args...)...)
	}
	r.version = st.GetCommitVersion()
	for _, lw := range st.GetLastWrites() {
		if lw.GetVersion() > r.version {
			return bad("key %q at version %d, above the commit counter %d", lw.GetKey(), lw.GetVersion(), r.version)
		}
		r.lastWrite[string(lw.GetKey())] = lw.GetVersion()
	}
	for _, ppb := range st.GetPrepared() {
		p, err := partOf(ppb, DefaultLimits)
		if err != nil {
			return bad("prepared: %v", err)
		}
		if p.Partition != r.partition {
			return bad("prepared %s is partition %d's", p.ID, p.Partition)
		}
		if key, conflict := r.conflictLocks(p); conflict {
			return bad("prepared %s conflicts with another prepared transaction on %q", p.ID, key)
		}
		r.prepared[p.ID] = &prepared{part: p, since: now}
		r.lock(p)
	}
	for _, d := range st.GetDecided() {
		id, err := idOf(d.GetTxn())
		if err != nil {
			return bad("decided: %v", err)
		}
		if _, ok := r.prepared[id]; ok {
			return bad("%s is both decided and prepared", id)
		}
		r.remember(id, d.GetCommit())
	}
	for _, c := range st.GetCoordinating() {
		id, err := idOf(c.GetTxn())
		if err != nil {
			return bad("coordinating: %v", err)
		}
		co := &coordinating{parts: c.GetPartitions(), submitter: c.GetSubmitter(), votes: map[uint32]Vote{}, since: now}
		if len(co.parts) == 0 {
			co.parts = nil
		}
		for _, v := range c.GetVotes() {
			vid, err := idOf(v.GetTxn())
			if err != nil || vid != id {
				return bad("a vote of coordinated %s names another transaction", id)
			}
			co.votes[v.GetPartition()] = Vote{Txn: id, Partition: v.GetPartition(), Coordinator: v.GetCoordinator(), Commit: v.GetCommit(), Key: string(v.GetKey())}
		}
		r.coord[id] = co
	}
	return r, nil
}

// conflictLocks reports a lock conflict of p with the prepared transactions (restore checks).
func (r *Replica) conflictLocks(p *Part) (string, bool) {
	for _, rd := range p.Reads {
		if l := r.locks[rd.Key]; l != nil && l.written && l.writer != p.ID {
			return rd.Key, true
		}
	}
	for _, w := range p.Writes {
		if l := r.locks[w.Key]; l != nil && ((l.written && l.writer != p.ID) || len(l.readers) > 0) {
			return w.Key, true
		}
	}
	return "", false
}

func sortIDs[V any](m map[TxnID]V) []TxnID {
	ids := make([]TxnID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b TxnID) int {
		if a.Node != b.Node {
			return int(a.Node) - int(b.Node)
		}
		return cmpU64(a.Seq, b.Seq)
	})
	return ids
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sortedPartitions(m map[uint32]Vote) []uint32 {
	out := make([]uint32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
