package sdur

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/wire/peerpb"
)

// A replica's state can be saved with the log index it reflects and restored, so that a
// replica that restarts (or a new replica that receives a Raft snapshot) delivers only the
// entries after that index instead of its whole log. Restoring is exact: a restored replica
// fed the same entries decides exactly as one that never stopped (TestSnapshotRestoreDecidesAlike).
// The votes a pending global had received are saved too; they are inputs, not decisions, and a
// restored replica asks again for those it lacks.

// snapshotVersion is the encoding's version; Restore refuses others.
const snapshotVersion = 1

// Snapshot encodes the replica's state (peerpb.SdurState).
func (r *Replica) Snapshot() ([]byte, error) {
	st := &peerpb.SdurState{Version: snapshotVersion, Partition: r.partition, Threshold: thresholdToPB(r.threshold),
		Dc: r.dc, Tc: r.tc, Sc: r.sc, Floor: r.floor}
	for _, p := range r.pl {
		sp := &peerpb.SdurPending{Part: partToPB(p.part), Global: p.global, Rt: p.rt, Unit: uint32(p.unit), Reordered: p.reordered}
		for _, pid := range p.part.Partitions {
			if v, ok := p.votes[pid]; ok {
				sp.Votes = append(sp.Votes, voteToPB(v))
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
		st.Keys = append(st.Keys, &peerpb.SdurKeyState{Key: []byte(k), LastCommittedWrite: ks.lastCommittedWrite, LastWrite: ks.lastWrite,
			LastRead: ks.lastRead, PendingWriters: ks.pendingWriters, PendingReaders: ks.pendingReaders})
	}
	for _, t := range r.touched {
		st.Touched = append(st.Touched, &peerpb.SdurTouch{Index: t.Index, Key: []byte(t.Key)})
	}
	for _, e := range r.waiting {
		st.Waiting = append(st.Waiting, entryToPB(e))
	}
	for _, id := range r.seenOrder {
		if s, ok := r.seen[id]; ok {
			st.Seen = append(st.Seen, &peerpb.SdurSeen{Id: idToPB(id), Vote: voteToPB(s.vote), Global: s.global, AbortedBy: s.abortedBy})
		}
	}
	for _, id := range r.earlyOrder {
		if vs, ok := r.early[id]; ok {
			e := &peerpb.SdurEarly{Id: idToPB(id)}
			for _, v := range vs {
				e.Votes = append(e.Votes, voteToPB(v))
			}
			st.Early = append(st.Early, e)
		}
	}
	b, err := proto.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("sdur: encode the state of partition %d: %w", r.partition, err)
	}
	return b, nil
}

// Restore returns a replica at the state data encodes, with opts (which are not saved: they
// are the node's configuration). Everything is checked as a decoded entry is, and the per-key
// counts against the pending list: an inconsistent state is refused, never certified against.
func Restore(data []byte, opts Options, now time.Time) (*Replica, error) {
	var st peerpb.SdurState
	if err := proto.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("sdur: decode a replica state: %w", err)
	}
	if st.GetVersion() != snapshotVersion {
		return nil, fmt.Errorf("sdur: replica state version %d, this build reads %d", st.GetVersion(), snapshotVersion)
	}
	lim := DefaultWireLimits
	r, err := NewReplica(st.GetPartition(), opts)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*Replica, error) {
		return nil, fmt.Errorf("sdur: restored state of partition %d: "+format, append([]any{st.GetPartition()}, args...)...)
	}
	if r.threshold, err = thresholdFromPB(st.GetThreshold()); err != nil {
		return bad("%v", err)
	}
	r.dc, r.tc, r.sc, r.floor = st.GetDc(), st.GetTc(), st.GetSc(), st.GetFloor()
	for _, t := range st.GetTouched() {
		r.touched = append(r.touched, touch{Index: t.GetIndex(), Key: string(t.GetKey())})
	}
	for _, e := range st.GetWaiting() {
		entry, err := entryFromPB(e, lim)
		if err != nil {
			return bad("waiting entry: %v", err)
		}
		r.waiting = append(r.waiting, entry)
	}
	for _, sp := range st.GetPending() {
		part, err := partFromPB(sp.GetPart(), lim)
		if err != nil {
			return bad("pending: %v", err)
		}
		if part.Partition != r.partition || sp.GetGlobal() != part.Global() {
			return bad("pending %s is not this partition's or not what it claims", part.ID)
		}
		unit := ThresholdUnit(sp.GetUnit())
		if sp.GetGlobal() && unit != Entries && unit != Ticks {
			return bad("pending %s has threshold unit %d", part.ID, unit)
		}
		p := &pending{part: part, global: sp.GetGlobal(), rt: sp.GetRt(), unit: unit, reordered: sp.GetReordered(),
			reads: map[string]struct{}{}, writes: map[string]struct{}{}}
		for _, k := range part.Reads {
			p.reads[k] = struct{}{}
		}
		for _, w := range part.Writes {
			p.writes[w.Key] = struct{}{}
			p.reads[w.Key] = struct{}{}
		}
		if p.global {
			p.votes = map[uint32]Vote{}
			for _, vpb := range sp.GetVotes() {
				v, err := voteFromPB(vpb, lim)
				if err != nil {
					return bad("pending %s: %v", part.ID, err)
				}
				p.votes[v.Partition] = v
			}
		}
		r.pl = append(r.pl, p)
	}
	for _, k := range st.GetKeys() {
		if k.GetPendingReaders() < 0 || k.GetPendingWriters() < 0 {
			return bad("key %q has negative pending counts", k.GetKey())
		}
		r.keys[string(k.GetKey())] = &keyState{lastCommittedWrite: k.GetLastCommittedWrite(), lastWrite: k.GetLastWrite(), lastRead: k.GetLastRead(),
			pendingWriters: k.GetPendingWriters(), pendingReaders: k.GetPendingReaders()}
	}
	for _, s := range st.GetSeen() {
		id, err := idFromPB(s.GetId())
		if err != nil {
			return bad("seen: %v", err)
		}
		var v Vote
		if s.GetVote() != nil && s.GetGlobal() {
			if v, err = voteFromPB(s.GetVote(), lim); err != nil {
				return bad("seen %s: %v", id, err)
			}
		}
		r.seen[id] = seenTxn{vote: v, global: s.GetGlobal(), abortedBy: s.GetAbortedBy()}
		r.seenOrder = append(r.seenOrder, id)
	}
	for _, e := range st.GetEarly() {
		id, err := idFromPB(e.GetId())
		if err != nil {
			return bad("early votes: %v", err)
		}
		for _, vpb := range e.GetVotes() {
			v, err := voteFromPB(vpb, lim)
			if err != nil {
				return bad("early vote on %s: %v", id, err)
			}
			r.early[id] = append(r.early[id], v)
		}
		r.earlyOrder = append(r.earlyOrder, id)
	}
	if err := r.checkCounts(); err != nil {
		return nil, err
	}
	_ = now
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
