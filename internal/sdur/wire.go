package sdur

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"meridian/internal/txnwire"
	"meridian/internal/wire/peerpb"
)

// The wire form of entries, votes and saved states (proto/meridian/v1/peer.proto, Sdur*). A
// decoder checks everything a replica relies on and refuses the rest with an error naming the
// field: bytes from the network or a disk never reach the state machine unchecked.

// WireLimits bound what a decoded entry may hold (shared with 2PC: txnwire).
type WireLimits = txnwire.Limits

// DefaultWireLimits are the decoders' limits unless the runtime gives others.
var DefaultWireLimits = txnwire.DefaultLimits

func idToPB(id TxnID) *peerpb.SdurTxnId { return &peerpb.SdurTxnId{Node: id.Node, Seq: id.Seq} }

func idFromPB(pb *peerpb.SdurTxnId) (TxnID, error) {
	if pb == nil {
		return TxnID{}, fmt.Errorf("transaction id missing")
	}
	return TxnID{Node: pb.GetNode(), Seq: pb.GetSeq()}, nil
}

func partToPB(p *Part) *peerpb.SdurPart {
	pb := &peerpb.SdurPart{Id: idToPB(p.ID), Partition: p.Partition, Partitions: p.Partitions, Snapshot: p.Snapshot, Submitter: p.Submitter}
	for _, k := range p.Reads {
		pb.Reads = append(pb.Reads, []byte(k))
	}
	for _, w := range p.Writes {
		pb.Writes = append(pb.Writes, &peerpb.SdurWrite{Key: []byte(w.Key), Value: w.Value, Delete: w.Delete})
	}
	return pb
}

func partFromPB(pb *peerpb.SdurPart, lim WireLimits) (*Part, error) {
	if pb == nil {
		return nil, fmt.Errorf("transaction part missing")
	}
	id, err := idFromPB(pb.GetId())
	if err != nil {
		return nil, err
	}
	if err := lim.CheckKeys(len(pb.GetReads()) + len(pb.GetWrites())); err != nil {
		return nil, fmt.Errorf("transaction %s: %w", id, err)
	}
	if err := lim.CheckPartitions(pb.GetPartitions()); err != nil {
		return nil, fmt.Errorf("transaction %s: %w", id, err)
	}
	p := &Part{ID: id, Partition: pb.GetPartition(), Partitions: pb.GetPartitions(), Snapshot: pb.GetSnapshot(), Submitter: pb.GetSubmitter()}
	for _, k := range pb.GetReads() {
		if err := lim.CheckKey("read", k); err != nil {
			return nil, fmt.Errorf("transaction %s: %w", id, err)
		}
		p.Reads = append(p.Reads, string(k))
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
	if err := p.Validate(p.Partition, lim.MaxKeys); err != nil {
		return nil, err
	}
	return p, nil
}

func thresholdToPB(t Threshold) *peerpb.SdurThreshold {
	return &peerpb.SdurThreshold{Unit: uint32(t.Unit), K: t.K}
}

func thresholdFromPB(pb *peerpb.SdurThreshold) (Threshold, error) {
	t := Threshold{Unit: ThresholdUnit(pb.GetUnit()), K: pb.GetK()}
	if t.Unit != Entries && t.Unit != Ticks {
		return Threshold{}, fmt.Errorf("threshold unit %d is neither entries (1) nor ticks (2)", pb.GetUnit())
	}
	if t.K > maxThreshold {
		return Threshold{}, fmt.Errorf("threshold %d above the limit of %d", t.K, maxThreshold)
	}
	return t, nil
}

// maxThreshold bounds a reordering threshold (Options.Validate has the same limit).
const maxThreshold = 1 << 20

func entryToPB(e Entry) *peerpb.SdurEntry {
	pb := &peerpb.SdurEntry{Kind: uint32(e.Kind), Floor: e.Floor}
	if e.Txn != nil {
		pb.Txn = partToPB(e.Txn)
	}
	if e.Abort != nil {
		pb.Abort = &peerpb.SdurAbortRequest{Txn: idToPB(e.Abort.Txn), Partitions: e.Abort.Partitions, Partition: e.Abort.Partition}
	}
	if e.Threshold != nil {
		pb.Threshold = thresholdToPB(*e.Threshold)
	}
	return pb
}

func entryFromPB(pb *peerpb.SdurEntry, lim WireLimits) (Entry, error) {
	e := Entry{Kind: EntryKind(pb.GetKind()), Floor: pb.GetFloor()}
	switch e.Kind {
	case EntryTxn:
		p, err := partFromPB(pb.GetTxn(), lim)
		if err != nil {
			return Entry{}, err
		}
		e.Txn = p
	case EntryAbortRequest:
		a := pb.GetAbort()
		id, err := idFromPB(a.GetTxn())
		if err != nil {
			return Entry{}, fmt.Errorf("abort request: %w", err)
		}
		if err := lim.CheckPartitions(a.GetPartitions()); err != nil {
			return Entry{}, fmt.Errorf("abort request for %s: %w", id, err)
		}
		e.Abort = &AbortRequest{Txn: id, Partitions: a.GetPartitions(), Partition: a.GetPartition()}
	case EntryTick:
	case EntryConfig:
		t, err := thresholdFromPB(pb.GetThreshold())
		if err != nil {
			return Entry{}, fmt.Errorf("configuration entry: %w", err)
		}
		e.Threshold = &t
	default:
		return Entry{}, fmt.Errorf("entry kind %d is not a transaction (1), an abort request (2), a tick (3) or a configuration (4)", pb.GetKind())
	}
	return e, nil
}

// EncodeEntry is an entry's wire form (a log entry's payload).
func EncodeEntry(e Entry) ([]byte, error) {
	b, err := proto.Marshal(entryToPB(e))
	if err != nil {
		return nil, fmt.Errorf("sdur: encode entry: %w", err)
	}
	return b, nil
}

// DecodeEntry decodes and checks an entry.
func DecodeEntry(data []byte, lim WireLimits) (Entry, error) {
	var pb peerpb.SdurEntry
	if err := proto.Unmarshal(data, &pb); err != nil {
		return Entry{}, fmt.Errorf("sdur: decode entry: %w", err)
	}
	e, err := entryFromPB(&pb, lim)
	if err != nil {
		return Entry{}, fmt.Errorf("sdur: entry: %w", err)
	}
	return e, nil
}

func voteToPB(v Vote) *peerpb.SdurVote {
	return &peerpb.SdurVote{Txn: idToPB(v.Txn), Partition: v.Partition, Commit: v.Commit, Partitions: v.Partitions, Reason: v.Reason, Key: []byte(v.Key)}
}

func voteFromPB(pb *peerpb.SdurVote, lim WireLimits) (Vote, error) {
	id, err := idFromPB(pb.GetTxn())
	if err != nil {
		return Vote{}, fmt.Errorf("vote: %w", err)
	}
	if err := lim.CheckPartitions(pb.GetPartitions()); err != nil {
		return Vote{}, fmt.Errorf("vote on %s: %w", id, err)
	}
	if len(pb.GetKey()) > lim.MaxKeyBytes || len(pb.GetReason()) > 1024 {
		return Vote{}, fmt.Errorf("vote on %s: key or reason too long", id)
	}
	return Vote{Txn: id, Partition: pb.GetPartition(), Commit: pb.GetCommit(), Partitions: pb.GetPartitions(), Reason: pb.GetReason(), Key: string(pb.GetKey())}, nil
}

// EncodeVote is a vote's wire form.
func EncodeVote(v Vote) ([]byte, error) {
	b, err := proto.Marshal(voteToPB(v))
	if err != nil {
		return nil, fmt.Errorf("sdur: encode vote: %w", err)
	}
	return b, nil
}

// DecodeVote decodes and checks a vote.
func DecodeVote(data []byte, lim WireLimits) (Vote, error) {
	var pb peerpb.SdurVote
	if err := proto.Unmarshal(data, &pb); err != nil {
		return Vote{}, fmt.Errorf("sdur: decode vote: %w", err)
	}
	return voteFromPB(&pb, lim)
}
