package sdur

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"slices"
	"time"
)

// A replica's state can be saved with the log index it reflects and restored, so that a
// replica that restarts (or a new replica that receives a Raft snapshot) delivers only the
// entries after that index instead of its whole log. Restoring is exact: a restored replica
// fed the same entries decides exactly as one that never stopped (TestSnapshotRestoreDecidesAlike).
// The votes a pending global had received are saved too; they are inputs, not decisions, and a
// restored replica asks again for those it lacks.

// snapshotVersion is the encoding's version; Restore refuses others.
const snapshotVersion = 1

type snapPending struct {
	Part      Part
	Global    bool
	RT        uint64
	Unit      ThresholdUnit
	Votes     []Vote
	Reordered bool
}

type snapKey struct {
	Key                                     string
	LastCommittedWrite, LastWrite, LastRead uint64
	PendingWriters, PendingReaders          int32
}

type snapSeen struct {
	ID        TxnID
	Vote      Vote
	Global    bool
	AbortedBy bool
}

type snapEarly struct {
	ID    TxnID
	Votes []Vote
}

type snapState struct {
	Version   int
	Partition uint32
	Threshold Threshold
	DC, TC    uint64
	SC, Floor uint64
	Pending   []snapPending
	Keys      []snapKey
	Touched   []touch
	Waiting   []Entry
	Seen      []snapSeen
	Early     []snapEarly
}

// Snapshot encodes the replica's state.
func (r *Replica) Snapshot() ([]byte, error) {
	st := snapState{Version: snapshotVersion, Partition: r.partition, Threshold: r.threshold, DC: r.dc, TC: r.tc, SC: r.sc, Floor: r.floor,
		Touched: r.touched, Waiting: r.waiting}
	for _, p := range r.pl {
		sp := snapPending{Part: *p.part, Global: p.global, RT: p.rt, Unit: p.unit, Reordered: p.reordered}
		for _, pid := range p.part.Partitions {
			if v, ok := p.votes[pid]; ok {
				sp.Votes = append(sp.Votes, v)
			}
		}
		st.Pending = append(st.Pending, sp)
	}
	keys := make([]string, 0, len(r.keys))
	for k := range r.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ks := r.keys[k]
		st.Keys = append(st.Keys, snapKey{Key: k, LastCommittedWrite: ks.lastCommittedWrite, LastWrite: ks.lastWrite, LastRead: ks.lastRead,
			PendingWriters: ks.pendingWriters, PendingReaders: ks.pendingReaders})
	}
	for _, id := range r.seenOrder {
		if s, ok := r.seen[id]; ok {
			st.Seen = append(st.Seen, snapSeen{ID: id, Vote: s.vote, Global: s.global, AbortedBy: s.abortedBy})
		}
	}
	for _, id := range r.earlyOrder {
		if vs, ok := r.early[id]; ok {
			st.Early = append(st.Early, snapEarly{ID: id, Votes: vs})
		}
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&st); err != nil {
		return nil, fmt.Errorf("sdur: encode the state of partition %d: %w", r.partition, err)
	}
	return buf.Bytes(), nil
}

// Restore returns a replica at the state data encodes, with opts (which are not saved: they
// are the node's configuration). now starts the vote-retry timers of the pending globals.
func Restore(data []byte, opts Options, now time.Time) (*Replica, error) {
	var st snapState
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&st); err != nil {
		return nil, fmt.Errorf("sdur: decode a replica state: %w", err)
	}
	if st.Version != snapshotVersion {
		return nil, fmt.Errorf("sdur: replica state version %d, this build reads %d", st.Version, snapshotVersion)
	}
	r, err := NewReplica(st.Partition, opts)
	if err != nil {
		return nil, err
	}
	r.threshold, r.dc, r.tc, r.sc, r.floor = st.Threshold, st.DC, st.TC, st.SC, st.Floor
	r.touched, r.waiting = st.Touched, st.Waiting
	for _, sp := range st.Pending {
		part := sp.Part
		p := &pending{part: &part, global: sp.Global, rt: sp.RT, unit: sp.Unit, reordered: sp.Reordered,
			reads: map[string]struct{}{}, writes: map[string]struct{}{}}
		for _, k := range part.Reads {
			p.reads[k] = struct{}{}
		}
		for _, w := range part.Writes {
			p.writes[w.Key] = struct{}{}
			p.reads[w.Key] = struct{}{}
		}
		if sp.Global {
			p.votes = map[uint32]Vote{}
			for _, v := range sp.Votes {
				p.votes[v.Partition] = v
			}
		}
		r.pl = append(r.pl, p)
	}
	for _, k := range st.Keys {
		r.keys[k.Key] = &keyState{lastCommittedWrite: k.LastCommittedWrite, lastWrite: k.LastWrite, lastRead: k.LastRead,
			pendingWriters: k.PendingWriters, pendingReaders: k.PendingReaders}
	}
	for _, s := range st.Seen {
		r.seen[s.ID] = seenTxn{vote: s.Vote, global: s.Global, abortedBy: s.AbortedBy}
		r.seenOrder = append(r.seenOrder, s.ID)
	}
	for _, e := range st.Early {
		r.early[e.ID] = e.Votes
		r.earlyOrder = append(r.earlyOrder, e.ID)
	}
	if err := r.checkCounts(); err != nil {
		return nil, err
	}
	return r, nil
}

// checkCounts verifies that the per-key pending counts are those of the pending list (a
// corrupt or mismatched state is refused rather than certified against).
func (r *Replica) checkCounts() error {
	readers, writers := map[string]int32{}, map[string]int32{}
	for _, p := range r.pl {
		for k := range p.reads {
			readers[k]++
		}
		for k := range p.writes {
			writers[k]++
		}
	}
	for k, ks := range r.keys {
		if ks.pendingReaders != readers[k] || ks.pendingWriters != writers[k] {
			return fmt.Errorf("sdur: restored state of partition %d is inconsistent: key %q has %d/%d pending readers/writers, the pending list %d/%d",
				r.partition, k, ks.pendingReaders, ks.pendingWriters, readers[k], writers[k])
		}
	}
	for k := range readers {
		if r.keys[k] == nil {
			return fmt.Errorf("sdur: restored state of partition %d is inconsistent: pending key %q has no state", r.partition, k)
		}
	}
	return nil
}
