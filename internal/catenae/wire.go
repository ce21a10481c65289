package catenae

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"meridian/internal/wire/peerpb"
)

// WireLimits bound what a decoded message may hold: bytes from the network never reach the
// replica unchecked.
type WireLimits struct {
	MaxKeyBytes, MaxValueBytes int
	// MaxOps bounds a transaction's operations; MaxTxns the transactions of one message;
	// MaxEpochs its epochs (maxMsgEpochs); MaxVotes its votes (maxMsgVotes).
	MaxOps, MaxTxns, MaxEpochs, MaxVotes int
}

// DefaultWireLimits are the decoders' limits unless the runtime gives others.
var DefaultWireLimits = WireLimits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20, MaxOps: 64, MaxTxns: 1 << 16, MaxEpochs: maxMsgEpochs, MaxVotes: maxMsgVotes}

func txnToPB(t *Txn) *peerpb.CatenaeTxn {
	pb := &peerpb.CatenaeTxn{Id: &peerpb.CatenaeTxnId{Dc: t.ID.DC, Seq: t.ID.Seq}, Epoch: t.Stamp.Epoch, Nanos: t.Stamp.Nanos}
	for _, op := range t.Proc.Ops {
		pb.Ops = append(pb.Ops, &peerpb.CatenaeOp{Kind: uint32(op.Kind), Key: []byte(op.Key), Value: op.Value, Delta: op.Delta, Version: op.Version})
	}
	return pb
}

func txnFromPB(pb *peerpb.CatenaeTxn, lim WireLimits) (*Txn, error) {
	if pb.GetId() == nil {
		return nil, fmt.Errorf("transaction without an id")
	}
	id := TxnID{DC: pb.GetId().GetDc(), Seq: pb.GetId().GetSeq()}
	if len(pb.GetOps()) > lim.MaxOps {
		return nil, fmt.Errorf("transaction %s: %d operations (limit %d)", id, len(pb.GetOps()), lim.MaxOps)
	}
	t := &Txn{ID: id, Stamp: Stamp{Epoch: pb.GetEpoch(), Nanos: pb.GetNanos(), DC: id.DC, Seq: id.Seq}}
	for i, op := range pb.GetOps() {
		if len(op.GetKey()) > lim.MaxKeyBytes || len(op.GetValue()) > lim.MaxValueBytes {
			return nil, fmt.Errorf("transaction %s: operation %d over the key or value limit", id, i)
		}
		t.Proc.Ops = append(t.Proc.Ops, Op{Kind: OpKind(op.GetKind()), Key: string(op.GetKey()), Value: op.GetValue(), Delta: op.GetDelta(), Version: op.GetVersion()})
	}
	if err := t.Proc.Validate(lim.MaxOps); err != nil {
		return nil, fmt.Errorf("transaction %s: %w", id, err)
	}
	return t, nil
}

// EncodeMessage is a message's wire form.
func EncodeMessage(m Message) ([]byte, error) {
	pb := &peerpb.CatenaeMessage{To: m.To}
	switch {
	case m.Epoch != nil:
		e := m.Epoch
		em := &peerpb.CatenaeEpochMsg{From: e.From, Upto: e.Upto, Closed: e.Closed, Validated: e.Validated}
		for _, txns := range e.Epochs {
			in := &peerpb.CatenaeEpochInput{}
			for _, t := range txns {
				in.Txns = append(in.Txns, txnToPB(t))
			}
			em.Epochs = append(em.Epochs, in)
		}
		for _, v := range e.Votes {
			em.Votes = append(em.Votes, &peerpb.CatenaeVote{Txn: &peerpb.CatenaeTxnId{Dc: v.Txn.DC, Seq: v.Txn.Seq}, Epoch: v.Epoch, Dc: v.DC, Digest: v.Digest})
		}
		pb.Body = &peerpb.CatenaeMessage_Epoch{Epoch: em}
	case m.Req != nil:
		pb.Body = &peerpb.CatenaeMessage_Request{Request: &peerpb.CatenaeRequest{From: m.Req.From, Epoch: m.Req.Epoch}}
	default:
		return nil, fmt.Errorf("catenae: encode an empty message")
	}
	b, err := proto.Marshal(pb)
	if err != nil {
		return nil, fmt.Errorf("catenae: encode message: %w", err)
	}
	return b, nil
}

// DecodeMessage decodes and checks a message.
func DecodeMessage(data []byte, lim WireLimits) (Message, error) {
	var pb peerpb.CatenaeMessage
	if err := proto.Unmarshal(data, &pb); err != nil {
		return Message{}, fmt.Errorf("catenae: decode message: %w", err)
	}
	m := Message{To: pb.GetTo()}
	switch b := pb.Body.(type) {
	case *peerpb.CatenaeMessage_Epoch:
		e := b.Epoch
		if len(e.GetEpochs()) > lim.MaxEpochs || len(e.GetVotes()) > lim.MaxVotes {
			return Message{}, fmt.Errorf("catenae: epoch message of %d epochs and %d votes (limits %d, %d)", len(e.GetEpochs()), len(e.GetVotes()), lim.MaxEpochs, lim.MaxVotes)
		}
		if uint64(len(e.GetEpochs())) > e.GetUpto()+1 {
			return Message{}, fmt.Errorf("catenae: epoch message with %d epochs up to epoch %d", len(e.GetEpochs()), e.GetUpto())
		}
		em := &EpochMsg{From: e.GetFrom(), Upto: e.GetUpto(), Closed: e.GetClosed(), Validated: e.GetValidated()}
		total := 0
		for _, in := range e.GetEpochs() {
			total += len(in.GetTxns())
			if total > lim.MaxTxns {
				return Message{}, fmt.Errorf("catenae: epoch message of more than %d transactions", lim.MaxTxns)
			}
			txns := make([]*Txn, 0, len(in.GetTxns()))
			for _, tp := range in.GetTxns() {
				t, err := txnFromPB(tp, lim)
				if err != nil {
					return Message{}, fmt.Errorf("catenae: epoch message from %d: %w", em.From, err)
				}
				txns = append(txns, t)
			}
			em.Epochs = append(em.Epochs, txns)
		}
		for _, v := range e.GetVotes() {
			if v.GetTxn() == nil {
				return Message{}, fmt.Errorf("catenae: a vote without a transaction")
			}
			em.Votes = append(em.Votes, Vote{Txn: TxnID{DC: v.GetTxn().GetDc(), Seq: v.GetTxn().GetSeq()}, Epoch: v.GetEpoch(), DC: v.GetDc(), Digest: v.GetDigest()})
		}
		m.Epoch = em
	case *peerpb.CatenaeMessage_Request:
		m.Req = &Request{From: b.Request.GetFrom(), Epoch: b.Request.GetEpoch()}
	default:
		return Message{}, fmt.Errorf("catenae: a message with no body")
	}
	return m, nil
}

// EncodeInput is the wire form of one data center's input for one epoch (a runtime's disk).
func EncodeInput(txns []*Txn) ([]byte, error) {
	in := &peerpb.CatenaeEpochInput{}
	for _, t := range txns {
		in.Txns = append(in.Txns, txnToPB(t))
	}
	b, err := proto.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("catenae: encode input: %w", err)
	}
	return b, nil
}

// DecodeInput decodes and checks data center dc's input for epoch.
func DecodeInput(data []byte, epoch uint64, dc uint32, lim WireLimits) ([]*Txn, error) {
	var in peerpb.CatenaeEpochInput
	if err := proto.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("catenae: decode input: %w", err)
	}
	if len(in.GetTxns()) > lim.MaxTxns {
		return nil, fmt.Errorf("catenae: input of %d transactions (limit %d)", len(in.GetTxns()), lim.MaxTxns)
	}
	out := make([]*Txn, 0, len(in.GetTxns()))
	for _, tp := range in.GetTxns() {
		t, err := txnFromPB(tp, lim)
		if err != nil {
			return nil, fmt.Errorf("catenae: input of data center %d for epoch %d: %w", dc, epoch, err)
		}
		if t.ID.DC != dc || t.Stamp.Epoch != epoch {
			return nil, fmt.Errorf("catenae: transaction %s (epoch %d) in the input of data center %d for epoch %d", t.ID, t.Stamp.Epoch, dc, epoch)
		}
		out = append(out, t)
	}
	return out, nil
}
