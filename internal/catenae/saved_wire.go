package catenae

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"meridian/internal/wire/peerpb"
)

// The saved state's wire form (peer.proto CatenaeSaved): what a runtime writes to storage
// before a Ready's messages leave, and reads back at start. DecodeSaved checks what the
// replica relies on (known data centers, valid transactions, limits).

func idPB(id TxnID) *peerpb.CatenaeTxnId { return &peerpb.CatenaeTxnId{Dc: id.DC, Seq: id.Seq} }

func idOf(pb *peerpb.CatenaeTxnId) TxnID { return TxnID{DC: pb.GetDc(), Seq: pb.GetSeq()} }

func stateToPB(st *txnState) *peerpb.CatenaeTxnState {
	pb := &peerpb.CatenaeTxnState{Txn: txnToPB(st.txn), Versions: st.result.Versions, Aborted: st.result.Aborted, Reason: st.result.Reason,
		Digest: st.result.Digest, Seq: st.seq, Decided: st.decided, HasDecided: st.hasDecided, Validated: st.validated, Corrupted: st.corrupted}
	for _, r := range st.result.Reads {
		pb.Reads = append(pb.Reads, r)
		pb.ReadsFound = append(pb.ReadsFound, r != nil)
	}
	keys := make([]string, 0, len(st.writes))
	for k := range st.writes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		pb.Writes = append(pb.Writes, &peerpb.CatenaeWrite{Key: []byte(k), Value: st.writes[k], Deleted: st.writes[k] == nil})
	}
	for _, d := range st.deps {
		pb.Deps = append(pb.Deps, idPB(d))
	}
	return pb
}

func stateOf(pb *peerpb.CatenaeTxnState, lim WireLimits) (*txnState, error) {
	if pb.GetTxn() == nil {
		return nil, fmt.Errorf("a transaction state without its transaction")
	}
	t, err := txnFromPB(pb.GetTxn(), lim)
	if err != nil {
		return nil, err
	}
	if len(pb.GetReadsFound()) != len(pb.GetReads()) || len(pb.GetWrites()) > lim.MaxOps || len(pb.GetDeps()) > lim.MaxOps {
		return nil, fmt.Errorf("transaction %s: malformed state", t.ID)
	}
	st := &txnState{txn: t, result: Result{Versions: pb.GetVersions(), Aborted: pb.GetAborted(), Reason: pb.GetReason(), Digest: pb.GetDigest()},
		writes: map[string][]byte{}, final: true, seq: pb.GetSeq(), decided: pb.GetDecided(), hasDecided: pb.GetHasDecided(), validated: pb.GetValidated(), corrupted: pb.GetCorrupted()}
	for i, r := range pb.GetReads() {
		if !pb.GetReadsFound()[i] {
			r = nil
		} else if r == nil {
			r = []byte{}
		}
		st.result.Reads = append(st.result.Reads, r)
	}
	for _, w := range pb.GetWrites() {
		if len(w.GetValue()) > lim.MaxValueBytes {
			return nil, fmt.Errorf("transaction %s: a written value over the limit", t.ID)
		}
		st.writes[string(w.GetKey())] = valueOf(w.GetValue(), w.GetDeleted())
	}
	for _, d := range pb.GetDeps() {
		st.deps = append(st.deps, idOf(d))
	}
	return st, nil
}

// EncodeSaved is a saved state's wire form.
func EncodeSaved(s *Saved) ([]byte, error) {
	pb := &peerpb.CatenaeSaved{Self: s.self, Dcs: s.dcs, Seq: s.seq, LastNanos: s.lastNanos, SentUpto: s.sentUpto, Closed: s.closed,
		ValidatedUpto: s.validatedUpto, FinalSeq: s.finalSeq, ValidatedSeq: s.validatedSeq, RetainFrom: s.retainFrom}
	for _, e := range sortedKeys(s.own) {
		in := &peerpb.CatenaeOwnInput{Epoch: e}
		for _, t := range s.own[e] {
			in.Txns = append(in.Txns, txnToPB(t))
		}
		pb.Own = append(pb.Own, in)
	}
	keys := make([]string, 0, len(s.store))
	for k := range s.store {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kv := &peerpb.CatenaeKeyVersions{Key: []byte(k)}
		for _, v := range s.store[k] {
			kv.Versions = append(kv.Versions, &peerpb.CatenaeVersion{Epoch: v.stamp.Epoch, Nanos: v.stamp.Nanos, Writer: idPB(v.writer), Value: v.value, Seq: v.seq, Deleted: v.absent})
		}
		pb.Store = append(pb.Store, kv)
	}
	for _, st := range s.history {
		pb.History = append(pb.History, stateToPB(st))
	}
	ids := make([]TxnID, 0, len(s.waiting))
	for id := range s.waiting {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, cmpTxnID)
	for _, id := range ids {
		w := &peerpb.CatenaeWaiting{Id: idPB(id)}
		if st := s.waiting[id]; st != nil {
			w.State = stateToPB(st)
		}
		pb.Waiting = append(pb.Waiting, w)
	}
	for _, e := range sortedKeys(s.myVotes) {
		for _, v := range s.myVotes[e] {
			pb.MyVotes = append(pb.MyVotes, &peerpb.CatenaeVote{Txn: idPB(v.Txn), Epoch: v.Epoch, Dc: v.DC, Digest: v.Digest})
		}
	}
	for _, e := range sortedKeys(s.unvalidated) {
		pb.Unvalidated = append(pb.Unvalidated, &peerpb.CatenaeEpochCount{Epoch: e, Count: int64(s.unvalidated[e])})
	}
	for _, dc := range s.dcs {
		pb.PeerClosed = append(pb.PeerClosed, &peerpb.CatenaeDcEpoch{Dc: dc, Epoch: s.peerClosed[dc]})
		pb.PeerValidated = append(pb.PeerValidated, &peerpb.CatenaeDcEpoch{Dc: dc, Epoch: s.peerValidated[dc]})
	}
	b, err := proto.Marshal(pb)
	if err != nil {
		return nil, fmt.Errorf("catenae: encode saved state: %w", err)
	}
	return b, nil
}

func cmpTxnID(a, b TxnID) int {
	if c := cmp.Compare(a.DC, b.DC); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// DecodeSaved decodes and checks a saved state.
func DecodeSaved(data []byte, lim WireLimits) (*Saved, error) {
	var pb peerpb.CatenaeSaved
	if err := proto.Unmarshal(data, &pb); err != nil {
		return nil, fmt.Errorf("catenae: decode saved state: %w", err)
	}
	if !slices.Contains(pb.GetDcs(), pb.GetSelf()) || len(pb.GetDcs()) > 64 {
		return nil, fmt.Errorf("catenae: saved state of data center %d among %v", pb.GetSelf(), pb.GetDcs())
	}
	if pb.GetClosed() > pb.GetSentUpto() || pb.GetValidatedUpto() > pb.GetClosed() {
		return nil, fmt.Errorf("catenae: saved state with validated %d, closed %d, sent %d out of order", pb.GetValidatedUpto(), pb.GetClosed(), pb.GetSentUpto())
	}
	s := &Saved{self: pb.GetSelf(), dcs: pb.GetDcs(), seq: pb.GetSeq(), lastNanos: pb.GetLastNanos(), sentUpto: pb.GetSentUpto(), closed: pb.GetClosed(),
		validatedUpto: pb.GetValidatedUpto(), finalSeq: pb.GetFinalSeq(), validatedSeq: pb.GetValidatedSeq(), retainFrom: pb.GetRetainFrom(), own: map[uint64][]*Txn{}, store: map[string][]version{},
		waiting: map[TxnID]*txnState{}, myVotes: map[uint64][]Vote{}, unvalidated: map[uint64]int{}, peerClosed: map[uint32]uint64{}, peerValidated: map[uint32]uint64{}}
	for _, in := range pb.GetOwn() {
		for _, tp := range in.GetTxns() {
			t, err := txnFromPB(tp, lim)
			if err != nil {
				return nil, fmt.Errorf("catenae: saved state: %w", err)
			}
			if t.ID.DC != s.self || t.Stamp.Epoch != in.GetEpoch() {
				return nil, fmt.Errorf("catenae: saved state: transaction %s is not this data center's input for epoch %d", t.ID, in.GetEpoch())
			}
			s.own[in.GetEpoch()] = append(s.own[in.GetEpoch()], t)
		}
		if _, ok := s.own[in.GetEpoch()]; !ok {
			s.own[in.GetEpoch()] = []*Txn{}
		}
	}
	for _, kv := range pb.GetStore() {
		if len(kv.GetKey()) > lim.MaxKeyBytes {
			return nil, fmt.Errorf("catenae: saved state: a key over the limit")
		}
		for _, v := range kv.GetVersions() {
			if len(v.GetValue()) > lim.MaxValueBytes {
				return nil, fmt.Errorf("catenae: saved state: a value over the limit")
			}
			w := idOf(v.GetWriter())
			s.store[string(kv.GetKey())] = append(s.store[string(kv.GetKey())], version{stamp: Stamp{Epoch: v.GetEpoch(), Nanos: v.GetNanos(), DC: w.DC, Seq: w.Seq}, writer: w, value: valueOf(v.GetValue(), v.GetDeleted()), absent: v.GetDeleted(), seq: v.GetSeq()})
		}
	}
	for _, hp := range pb.GetHistory() {
		st, err := stateOf(hp, lim)
		if err != nil {
			return nil, fmt.Errorf("catenae: saved state: %w", err)
		}
		s.history = append(s.history, st)
	}
	for _, w := range pb.GetWaiting() {
		var st *txnState
		if w.GetState() != nil {
			var err error
			if st, err = stateOf(w.GetState(), lim); err != nil {
				return nil, fmt.Errorf("catenae: saved state: %w", err)
			}
		}
		s.waiting[idOf(w.GetId())] = st
	}
	for _, v := range pb.GetMyVotes() {
		s.myVotes[v.GetEpoch()] = append(s.myVotes[v.GetEpoch()], Vote{Txn: idOf(v.GetTxn()), Epoch: v.GetEpoch(), DC: v.GetDc(), Digest: v.GetDigest()})
	}
	for _, c := range pb.GetUnvalidated() {
		s.unvalidated[c.GetEpoch()] = int(c.GetCount())
	}
	for _, d := range pb.GetPeerClosed() {
		s.peerClosed[d.GetDc()] = d.GetEpoch()
	}
	for _, d := range pb.GetPeerValidated() {
		s.peerValidated[d.GetDc()] = d.GetEpoch()
	}
	return s, nil
}

// valueOf is a decoded value: nil for a deletion, never nil otherwise (the wire form drops
// empty bytes).
func valueOf(v []byte, deleted bool) []byte {
	switch {
	case deleted:
		return nil
	case v == nil:
		return []byte{}
	}
	return v
}
