package catenae

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Saved is a replica's durable state: what a data center keeps across a crash. It is what a
// Ready's messages promise (a runtime makes it durable before they leave): its own inputs (a
// peer that missed its message asks for them again), its stamps' clock and sequence, the state
// of the closed epochs (the multi-version store, the history not yet validated, its own
// votes), and the transactions its clients wait for. Everything else — the other data
// centers' inputs for open epochs, the speculative order, their votes — is volatile: a
// restarted replica asks for the inputs again (its gap requests), executes its open epochs
// again, and hears the votes again (peers repeat them until every data center validated them).
//
// Saved shares no mutable memory with the replica it came from.
type Saved struct {
	self                            uint32
	dcs                             []uint32
	seq                             uint64
	lastNanos                       int64
	sentUpto, closed, validatedUpto uint64
	finalSeq                        uint64
	validatedSeq, retainFrom        uint64
	own                             map[uint64][]*Txn // own inputs, by epoch
	store                           map[string][]version
	history                         []*txnState
	waiting                         map[TxnID]*txnState // nil state: not executed yet
	myVotes                         map[uint64][]Vote
	unvalidated                     map[uint64]int
	peerClosed, peerValidated       map[uint32]uint64
	stats                           Stats
}

// Save returns the replica's durable state.
func (r *Replica) Save() *Saved {
	s := &Saved{self: r.self, dcs: slices.Clone(r.dcs), seq: r.seq, lastNanos: r.lastNanos, sentUpto: r.sentUpto, closed: r.closed,
		validatedUpto: r.validatedUpto, finalSeq: r.finalSeq, validatedSeq: r.validatedSeq, retainFrom: r.retainFrom, own: map[uint64][]*Txn{}, store: map[string][]version{},
		waiting: map[TxnID]*txnState{}, myVotes: map[uint64][]Vote{}, unvalidated: maps.Clone(r.unvalidated),
		peerClosed: maps.Clone(r.peerClosed), peerValidated: maps.Clone(r.peerValidated), stats: r.stats}
	for e, in := range r.inputs {
		if txns, ok := in[r.self]; ok && r.opts.Mutation != "restart-forgets-inputs" {
			s.own[e] = slices.Clone(txns) // transactions are immutable once stamped
		}
	}
	for k, vs := range r.store {
		s.store[k] = slices.Clone(vs) // versions' values are never changed in place
	}
	clones := map[*txnState]*txnState{}
	for _, st := range r.history {
		c := st.clone()
		clones[st] = c
		s.history = append(s.history, c)
	}
	for id := range r.waiting {
		st := r.txns[id]
		switch {
		case st == nil || !st.final:
			s.waiting[id] = nil // in an open epoch: executed again after the restart
		case clones[st] != nil:
			s.waiting[id] = clones[st]
		default:
			s.waiting[id] = st.clone()
		}
	}
	for e, vs := range r.myVotes {
		s.myVotes[e] = slices.Clone(vs)
	}
	return s
}

func (st *txnState) clone() *txnState {
	c := *st
	c.result.Reads = slices.Clone(st.result.Reads)
	c.result.Versions = slices.Clone(st.result.Versions)
	c.writes = maps.Clone(st.writes)
	c.deps = slices.Clone(st.deps)
	return &c
}

// Restore returns a replica that starts from a saved state, as a data center restarting after
// a crash: its own inputs of open epochs go back into the speculative order; the rest it learns
// again from its peers.
func Restore(s *Saved, opts Options, now time.Time) (*Replica, error) {
	if s == nil {
		return nil, fmt.Errorf("catenae: restore from no saved state")
	}
	r, err := NewReplica(s.self, s.dcs, opts)
	if err != nil {
		return nil, err
	}
	r.seq, r.lastNanos, r.sentUpto, r.closed, r.validatedUpto, r.finalSeq = s.seq, s.lastNanos, s.sentUpto, s.closed, s.validatedUpto, s.finalSeq
	r.validatedSeq, r.retainFrom, r.forgot = s.validatedSeq, max(s.retainFrom, r.opts.Start), r.opts.Start
	r.unvalidated, r.peerClosed, r.peerValidated, r.stats = maps.Clone(s.unvalidated), maps.Clone(s.peerClosed), maps.Clone(s.peerValidated), s.stats
	for _, dc := range r.dcs {
		r.upto[dc] = r.closed // every closed epoch had every input; the open ones come again
	}
	r.upto[r.self] = r.sentUpto
	for k, vs := range s.store {
		r.store[k] = slices.Clone(vs)
	}
	for e, vs := range s.myVotes {
		r.myVotes[e] = slices.Clone(vs)
	}
	for _, st := range s.history {
		c := st.clone()
		r.history = append(r.history, c)
		r.txns[c.txn.ID] = c
		if !c.validated {
			r.votes[c.txn.ID] = map[uint32]uint64{r.self: c.result.Digest}
		}
	}
	var open []*Txn
	for e, txns := range s.own {
		in := map[uint32][]*Txn{r.self: slices.Clone(txns)}
		r.inputs[e] = in
		if e > r.closed {
			open = append(open, txns...)
		}
	}
	for id, st := range s.waiting {
		r.waiting[id] = true
		if st != nil && r.txns[id] == nil {
			r.txns[id] = st.clone()
		}
	}
	slices.SortFunc(open, func(a, b *Txn) int { return a.Stamp.Compare(b.Stamp) })
	r.speculate(open)
	r.now = now
	r.decideWaiting()
	return r, nil
}
