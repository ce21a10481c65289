package catenae

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Durable is the incremental form of a replica's durable state: what one Ready adds to the
// disk, in one batch, before its messages leave (the Ready contract). Saved is the whole state
// at once (the simulator's restarts); a runtime whose state lives on a disk writes Durable
// instead, whose size follows the Ready's work and not the store's:
//
//   - the inputs that became final here — its own, in the Ready whose message first
//     announces them; every other data center's, in the Ready that closes their epoch;
//   - the versions that became validated (they never change again);
//   - its own votes (a peer that has not validated an epoch waits for them, and after a
//     crash they cannot be computed again: the state they were computed on is gone);
//   - the small state (Meta), when it changed;
//   - Forget: inputs and votes of epochs up to it are needed by no one any more.
//
// A restart (Disk.Restore) loads the validated state, executes the closed epochs that were
// not validated again from their inputs (execution is deterministic, so their results, and the
// outcomes already reported, come out the same), and takes its own inputs of open epochs back
// into the speculative order.
type Durable struct {
	Inputs   []Input
	Versions []StoredVersion
	Votes    []Vote
	Meta     *Meta
	Forget   uint64
}

// Empty reports whether there is nothing to write.
func (d *Durable) Empty() bool {
	return len(d.Inputs) == 0 && len(d.Versions) == 0 && len(d.Votes) == 0 && d.Meta == nil && d.Forget == 0
}

// Input is one data center's transactions of one epoch (an empty input is not written: an
// epoch at or below the writer's SentUpto, or Closed for a peer, without one is empty).
type Input struct {
	Epoch uint64
	DC    uint32
	Txns  []*Txn
}

// StoredVersion is a validated version of a key: Value nil is a deletion. Seq is its chain
// position (every data center's version number for it) and Epoch its writer's epoch.
type StoredVersion struct {
	Key   string
	Value []byte
	Epoch uint64
	Seq   uint64
}

// Meta is the replica's small state.
type Meta struct {
	Seq       uint64
	LastNanos int64
	// SentUpto: its own inputs up to it are final and sent; Closed: every input up to it is
	// on disk; ValidatedUpto and ValidatedSeq: the versions up to it are on disk, the last of
	// them at chain position ValidatedSeq.
	SentUpto, Closed, ValidatedUpto, ValidatedSeq uint64
}

// Disk is a replica's durable state as Durable builds it up: what a runtime keeps on its disk
// (the node runtime in raw keys and records, the simulator in memory). Only each key's newest
// validated version is kept (older ones serve reads of recent epochs only, which a restarted
// replica refuses until it has built them up again).
type Disk struct {
	Meta     Meta
	Versions map[string]StoredVersion
	Inputs   map[InputKey][]*Txn
	Votes    map[TxnID]Vote
	Forgot   uint64
}

// InputKey names an input.
type InputKey struct {
	Epoch uint64
	DC    uint32
}

// NewDisk returns an empty disk.
func NewDisk() *Disk {
	return &Disk{Versions: map[string]StoredVersion{}, Inputs: map[InputKey][]*Txn{}, Votes: map[TxnID]Vote{}}
}

// Apply adds a Ready's Durable.
func (d *Disk) Apply(u Durable) {
	for _, in := range u.Inputs {
		d.Inputs[InputKey{in.Epoch, in.DC}] = in.Txns
	}
	for _, v := range u.Versions {
		if old, ok := d.Versions[v.Key]; !ok || old.Seq < v.Seq {
			d.Versions[v.Key] = v
		}
	}
	for _, v := range u.Votes {
		d.Votes[v.Txn] = v
	}
	if u.Meta != nil {
		d.Meta = *u.Meta
	}
	if u.Forget > d.Forgot {
		d.Forgot = u.Forget
		maps.DeleteFunc(d.Inputs, func(k InputKey, _ []*Txn) bool { return k.Epoch <= u.Forget })
		maps.DeleteFunc(d.Votes, func(_ TxnID, v Vote) bool { return v.Epoch <= u.Forget })
	}
}

// Restore returns data center self's replica among dcs restarted from the disk, at time now.
// An empty disk (Meta zero) is a fresh replica.
func (d *Disk) Restore(self uint32, dcs []uint32, opts Options, now time.Time) (*Replica, error) {
	r, err := NewReplica(self, dcs, opts)
	if err != nil {
		return nil, err
	}
	m := d.Meta
	if m == (Meta{}) {
		r.now = now
		return r, nil
	}
	start := r.opts.Start
	if m.SentUpto < start || m.Closed < m.ValidatedUpto || m.ValidatedUpto < start || m.SentUpto < m.ValidatedUpto {
		return nil, fmt.Errorf("catenae: data center %d: inconsistent saved state %+v (start %d)", self, m, start)
	}
	r.seq, r.lastNanos, r.sentUpto = m.Seq, m.LastNanos, m.SentUpto
	r.closed, r.validatedUpto, r.finalSeq, r.validatedSeq = m.ValidatedUpto, m.ValidatedUpto, m.ValidatedSeq, m.ValidatedSeq
	r.retainFrom, r.forgot = m.ValidatedUpto, d.Forgot
	for _, v := range d.Versions {
		if v.Epoch > m.ValidatedUpto || v.Seq > m.ValidatedSeq {
			return nil, fmt.Errorf("catenae: data center %d: saved version of %q at epoch %d (seq %d) beyond the validated prefix %d (seq %d)",
				self, v.Key, v.Epoch, v.Seq, m.ValidatedUpto, m.ValidatedSeq)
		}
		r.store[v.Key] = []version{{stamp: Stamp{Epoch: v.Epoch}, value: v.Value, absent: v.Value == nil, seq: v.Seq}}
	}
	for _, v := range d.Votes {
		if v.Epoch <= m.ValidatedUpto && v.DC == self {
			r.myVotes[v.Epoch] = append(r.myVotes[v.Epoch], v) // the rest are computed again
		}
	}
	for _, vs := range r.myVotes {
		slices.SortFunc(vs, func(a, b Vote) int { return cmp.Compare(a.Txn.Seq, b.Txn.Seq) })
	}
	// Its own inputs of the validated epochs that a peer may still ask for (one that has not
	// closed them: validation needs a majority only); the others' are not needed.
	for k, txns := range d.Inputs {
		if k.DC == self && k.Epoch > d.Forgot && k.Epoch <= m.ValidatedUpto {
			if r.inputs[k.Epoch] == nil {
				r.inputs[k.Epoch] = map[uint32][]*Txn{}
			}
			r.inputs[k.Epoch][self] = txns
		}
	}
	for e := range r.inputs {
		for _, dc := range r.dcs {
			if _, ok := r.inputs[e][dc]; !ok {
				r.inputs[e][dc] = nil // closed here: a peer's repeat of it is not taken
			}
		}
	}
	// Every data center has closed, and validated, the epochs up to Forgot (that is why they
	// were forgotten): none is asked for, none is sent.
	for _, dc := range r.dcs {
		if dc != self {
			r.peerClosed[dc], r.peerValidated[dc] = max(r.peerClosed[dc], d.Forgot), max(r.peerValidated[dc], d.Forgot)
		}
	}
	// Inputs: every data center's up to Closed (the empty ones were not written), its own up
	// to SentUpto.
	for e := m.ValidatedUpto + 1; e <= m.SentUpto; e++ {
		in := map[uint32][]*Txn{}
		for _, dc := range r.dcs {
			if dc == self && e <= m.SentUpto || dc != self && e <= m.Closed {
				in[dc] = d.Inputs[InputKey{e, dc}]
			}
		}
		r.inputs[e] = in
	}
	for _, dc := range r.dcs {
		r.upto[dc] = max(m.Closed, start)
	}
	r.upto[self] = m.SentUpto
	var again []*Txn
	for e := m.ValidatedUpto + 1; e <= m.SentUpto; e++ {
		for _, dc := range r.dcs {
			again = append(again, r.inputs[e][dc]...)
		}
	}
	slices.SortFunc(again, func(a, b *Txn) int { return a.Stamp.Compare(b.Stamp) })
	r.now = now
	r.speculate(again)
	r.tryClose()
	return r, nil
}
