package raft

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// maxBatchBytes bounds one coalesced envelope of Raft messages (the peer transport accepts
// messages of about 10 MiB; one Raft message is at most wire.MaxRaftMessageBytes).
const maxBatchBytes = 4 << 20

// HasReady reports whether Ready has output.
func (e *Engine) HasReady() bool {
	if !e.out.Empty() || len(e.batches) > 0 || e.syncNeeded || e.kick {
		return true
	}
	kept := e.dirty[:0]
	for _, g := range e.dirty {
		if g.rn.HasReady() {
			kept = append(kept, g)
		} else {
			g.dirty = false
		}
	}
	clear(e.dirty[len(kept):])
	e.dirty = kept
	return len(e.dirty) > 0
}

// Ready collects the dirty groups' Readies: log and hard state to persist (Raw), committed
// commands applied to storage records (Writes), messages coalesced per destination, client
// replies and reads that wait for the applied writes (Reads). The runtime makes Writes and
// Raw durable before any message or reply leaves, which is what etcd raft requires of a
// Ready's persistence.
func (e *Engine) Ready() engine.Ready {
	dirty := e.dirty
	e.dirty = nil
	slices.SortFunc(dirty, func(a, b *group) int { return cmpU64(a.id, b.id) })
	for _, g := range dirty {
		g.dirty = false
		if g.removed || !g.rn.HasReady() {
			continue
		}
		if g.installing {
			// This Ready replaces the group's data with a snapshot raft has taken: raft's
			// own Ready (the snapshot in the log, entries after it, the acknowledgement)
			// waits for the next one, after the data.
			e.markDirty(g)
			continue
		}
		e.readyGroup(g)
		if !g.removed && g.rn.HasReady() {
			e.markDirty(g)
		}
	}
	if e.syncNeeded {
		// A split, merge or snapshot changed the ranges of this node's groups: groups the
		// map lists may be created now, and requests that waited for their key's group go
		// (repartition.go).
		e.syncGroups()
	}
	if e.kick {
		e.driveRepartitions()
	}
	e.flushBatches()
	rd := e.out
	e.out = engine.Ready{}
	for _, g := range e.installing {
		g.installing = false
		e.markDirty(g)
	}
	e.installing = e.installing[:0]
	return rd
}

func (e *Engine) readyGroup(g *group) {
	rd := g.rn.Ready()
	if ss := rd.SoftState; ss != nil {
		g.electionElapsed = 0
		leaderChanged := ss.Lead != g.lead
		g.state = ss.RaftState
		g.lead = ss.Lead
		if g.state != etcdraft.StateLeader && len(g.sending) > 0 {
			clear(g.sending) // a snapshot's offer is a leader's: its transfers end with it
		}
		if g.state == etcdraft.StateLeader {
			g.newLeaseTerm(g.rn.BasicStatus().HardState.GetTerm())
		}
		if leaderChanged {
			e.unquiesce(g, false)
			if g.lead != etcdraft.None {
				defer e.retryPending(g)
				defer e.finishMoves(g)
			}
		}
	}
	if hs := rd.HardState; hs != nil && !etcdraft.IsEmptyHardState(hs) {
		if hs.GetTerm() != g.term {
			g.electionElapsed = 0
		}
		g.term = hs.GetTerm()
	}
	restored := !etcdraft.IsEmptySnap(rd.Snapshot)
	if restored {
		// A follower installed a snapshot: its data was replaced before the MsgSnap was
		// stepped (snapshot.go); here its log is replaced too.
		meta := rd.Snapshot.GetMetadata()
		g.applied, g.appliedTerm = meta.GetIndex(), meta.GetTerm()
		g.conf = proto.Clone(meta.GetConfState()).(*raftpb.ConfState)
		g.confIndex = max(g.confIndex, meta.GetIndex())
		e.refreshPeers()
	}
	ops, err := g.log.Save(rd.HardState, rd.Snapshot, rd.Entries)
	if err != nil {
		// The in-memory log refused what raft produced: a bug, not an input. Take the group
		// out of service (nothing more is acknowledged) and say why on every request.
		e.fail(g, err)
		return
	}
	e.out.Raw = append(e.out.Raw, ops...)
	for _, m := range rd.Messages {
		e.send(g, m)
	}
	applyFrom := rd.CommittedEntries
	if n := len(rd.CommittedEntries); n > 0 {
		g.handed = max(g.handed, rd.CommittedEntries[n-1].GetIndex())
	}
	if e.cfg.Mutation == "apply-before-commit" {
		applyFrom = append(slices.Clone(rd.CommittedEntries), rd.Entries...)
	}
	leaving := e.applyEntries(g, applyFrom)
	if g.removed {
		return
	}
	if restored {
		e.out.Raw = append(e.out.Raw, g.appliedOp())
	}
	for _, rs := range rd.ReadStates {
		if id, ok := e.readCtxID(rs.RequestCtx); ok {
			if c := g.leftCheck; c != nil && c.ctx == id {
				c.index = max(rs.Index, 1) // repartition.go, leftSettled
				continue
			}
			g.waiting = append(g.waiting, waitingRead{index: rs.Index, id: id})
		}
	}
	g.rn.Advance(rd)
	e.serveWaiting(g)
	e.maybeCompact(g)
	if leaving {
		// The configuration no longer includes this node: it leaves the group and deletes
		// its replica (the change is committed, so the group does not need it).
		e.leave(g, "this node was removed from the group")
	}
}

// applyEntries applies committed entries in order, and stores the applied state if it moved;
// it reports whether a configuration change removed this node. A merge entry this replica
// cannot apply yet stops it (blockedAt): that entry and the ones after apply later, read
// back from the log (tryUnblock).
func (e *Engine) applyEntries(g *group, ents []*raftpb.Entry) (leaving bool) {
	confSize := func() int {
		return len(g.conf.GetVoters()) + len(g.conf.GetLearners()) + len(g.conf.GetVotersOutgoing())
	}
	before, confBefore := g.applied, confSize()
	for _, ent := range ents {
		if g.blockedAt != 0 {
			break
		}
		if e.apply(g, ent) {
			leaving = true
		}
		if g.removed {
			return false
		}
	}
	if g.txn != nil {
		// The core's records go in this Ready, with the applied index; its state is saved
		// after them (maybeSaveTxn).
		e.drainTxn(g)
		e.maybeSaveTxn(g)
		if g.removed {
			return false
		}
	}
	if g.applied != before || confBefore != confSize() {
		e.out.Raw = append(e.out.Raw, g.appliedOp())
		if g.applied != before {
			e.appliedNotice(g)
		}
	}
	return leaving
}

// resumeApply applies entries of g after a blocked merge could apply (outside a Ready of g).
func (e *Engine) resumeApply(g *group, ents []*raftpb.Entry) {
	leaving := e.applyEntries(g, ents)
	if g.removed {
		return
	}
	e.serveWaiting(g)
	e.maybeCompact(g)
	e.markDirty(g)
	if leaving {
		e.leave(g, "this node was removed from the group")
	}
}

// serveWaiting serves g's linearizable reads whose read index has applied.
func (e *Engine) serveWaiting(g *group) {
	if len(g.waiting) == 0 {
		return
	}
	kept := g.waiting[:0]
	var again []waitingRead
	for _, w := range g.waiting {
		if w.index > g.applied {
			kept = append(kept, w)
			continue
		}
		p, ok := e.pending[w.id]
		if !ok || (p.req.Op != engine.OpGet && p.req.Op != engine.OpScan) || p.group != g {
			continue // expired meanwhile
		}
		if !e.stillServes(g, p.req) {
			// A split or merge applied meanwhile took the key (repartition.go): the read is
			// served where it is now.
			e.reroute(w.id)
			continue
		}
		e.untrack(w.id)
		path, validUntil := PathReadIndex, time.Time{}
		if w.lease {
			end, why := e.leaseEnd(e.lastNow, g)
			if why != "" {
				// The lease ran out while the read waited: confirm by ReadIndex instead.
				e.stats.leaseFallback(why)
				again = append(again, w)
				e.track(p.req, p)
				continue
			}
			path, validUntil = PathLease, end.Add(-leaseReadSlack/2)
		}
		e.stats.read(path)
		e.out.Reads = append(e.out.Reads, e.readFor(g, p, path, validUntil))
	}
	g.waiting = kept
	for _, w := range again {
		g.rn.ReadIndex(e.readCtx(w.id))
		e.markDirty(g)
	}
}

// readFor is the storage read that answers a pending get or scan part.
func (e *Engine) readFor(g *group, p *pendingReq, path string, validUntil time.Time) engine.Read {
	if p.req.Op == engine.OpScan {
		return e.scanRead(g, p.req, path, validUntil)
	}
	return e.readAt(g, p.req, path, 0, validUntil)
}

// apply applies one committed entry; it reports whether a configuration change removed this
// node from the group.
func (e *Engine) apply(g *group, ent *raftpb.Entry) (leaving bool) {
	if ent.GetIndex() <= g.applied {
		return false // replayed after a restart (or the mutation's early apply)
	}
	var cmd peerpb.RaftCommand
	if ent.GetType() == raftpb.EntryType_EntryNormal && len(ent.GetData()) > 0 {
		if err := proto.Unmarshal(ent.GetData(), &cmd); err != nil {
			// Every replica stops at the same entry: better than diverging silently.
			g.applied, g.appliedTerm = ent.GetIndex(), ent.GetTerm()
			e.fail(g, fmt.Errorf("entry %d does not decode: %w", ent.GetIndex(), err))
			return false
		}
		if cmd.GetSplit() != nil || cmd.GetFreeze() != nil || cmd.GetMerge() != nil {
			if !e.applyRange(g, ent.GetIndex(), &cmd) {
				return false // a merge this replica cannot apply yet: nothing of it applied
			}
			g.applied, g.appliedTerm = ent.GetIndex(), ent.GetTerm()
			g.sinceCut++
			return false
		}
	}
	g.applied, g.appliedTerm = ent.GetIndex(), ent.GetTerm()
	g.sinceCut++
	switch ent.GetType() {
	case raftpb.EntryType_EntryConfChange, raftpb.EntryType_EntryConfChangeV2:
		var cc raftpb.ConfChangeI
		if ent.GetType() == raftpb.EntryType_EntryConfChange {
			var c raftpb.ConfChange
			if err := proto.Unmarshal(ent.GetData(), &c); err != nil {
				e.fail(g, fmt.Errorf("configuration change at %d does not decode: %w", ent.GetIndex(), err))
				return false
			}
			cc = &c
		} else {
			var c raftpb.ConfChangeV2
			if err := proto.Unmarshal(ent.GetData(), &c); err != nil {
				e.fail(g, fmt.Errorf("configuration change at %d does not decode: %w", ent.GetIndex(), err))
				return false
			}
			cc = &c
		}
		g.conf = proto.Clone(g.rn.ApplyConfChange(cc)).(*raftpb.ConfState)
		g.confIndex = ent.GetIndex()
		g.confProposedAt = 0
		e.stats.ConfChanges.Add(1)
		e.refreshPeers()
		return !g.isMember(e.cfg.NodeID)
	}
	if len(ent.GetData()) == 0 {
		return false // a new leader's empty entry
	}
	v := wire.VersionFromPB(cmd.GetVersion())
	// At most once: a proposer's commands carry increasing versions (its hybrid logical
	// clock), so a command whose version is not above its origin's last applied one is a
	// copy (proposed again at a leader change) or was overtaken by a newer command of the
	// same origin. Every replica skips it alike; if it was this node's, its request is
	// proposed again with a new version (it cannot have applied), as CockroachDB
	// re-proposes a command with an illegal lease index.
	// A transactional group skips nothing here: its core delivers each transaction once by
	// its ID, and what it is delivered must be a function of the log alone, for replay
	// from a saved state (txn.go).
	if last, ok := g.origins[cmd.GetOrigin()]; ok && !last.Less(v) && g.txn == nil {
		e.overtaken(g, &cmd, ent.GetData(), last == v)
		return false
	}
	if g.frozenAt != 0 || (len(cmd.GetCommand()) == 0 && !g.contains(cmd.GetKey())) {
		// Refused alike on every replica: the group froze for a merge, or a split gave the
		// key to another group, after the command was proposed (CockroachDB refuses a command
		// evaluated against an older range descriptor at apply). A frozen group's state is
		// final; a narrowed one records the version as its origin's, so that no copy of the
		// command applies here later, should a merge widen the range again.
		if g.frozenAt == 0 {
			g.origins[cmd.GetOrigin()] = v
		}
		e.refused(g, &cmd, ent.GetData())
		return false
	}
	g.origins[cmd.GetOrigin()] = v
	if !g.last.Less(v) {
		v = hlc.Version{WallNanos: g.last.WallNanos, Logical: g.last.Logical + 1, NodeID: v.NodeID}
	}
	g.last = v
	e.clock.Observe(e.lastNow, v)
	recs, res := g.sm.Apply(g.key.ref(), ent.GetIndex(), &cmd, v)
	e.out.Writes = append(e.out.Writes, recs...)
	if cmd.GetOrigin() != e.cfg.NodeID {
		return false
	}
	if p, ok := e.pending[cmd.GetRequestId()]; ok && p.req.Op != engine.OpGet && p.data != nil && bytes.Equal(p.data, ent.GetData()) {
		e.untrack(cmd.GetRequestId())
		res.ID, res.Op = p.req.ID, p.req.Op
		if p.req.WaitAll && res.Err == nil && g.notifies() {
			e.hold(g, ent.GetIndex(), res, p.req.Deadline)
			return false
		}
		e.reply(res)
	}
	return false
}

// refused sends this node's write that its group refused at apply (repartition.go) to the
// group that has its key now: it has not applied anywhere, and no copy of it will.
func (e *Engine) refused(g *group, cmd *peerpb.RaftCommand, data []byte) {
	if cmd.GetOrigin() != e.cfg.NodeID {
		return
	}
	if p, ok := e.pending[cmd.GetRequestId()]; ok && p.group == g && p.data != nil && bytes.Equal(p.data, data) {
		e.reroute(cmd.GetRequestId())
	}
}

// overtaken re-proposes this node's request whose command was skipped at apply because a
// newer command of this node applied first (a copy of one that applied is matched by
// neither: its request was answered when the first copy applied).
func (e *Engine) overtaken(g *group, cmd *peerpb.RaftCommand, data []byte, applied bool) {
	if cmd.GetOrigin() != e.cfg.NodeID {
		return
	}
	p, ok := e.pending[cmd.GetRequestId()]
	if !ok || p.data == nil || !bytes.Equal(p.data, data) {
		return
	}
	if applied {
		// This very command applied, unseen by this node (a snapshot brought it): it must
		// not be proposed again. Its result is not known here.
		e.untrack(cmd.GetRequestId())
		e.reply(engine.Result{ID: p.req.ID, Op: p.req.Op, Err: errs.New(errs.Timeout,
			"keyspace %q partition %d: the write applied, but this node learned it from a snapshot and does not know its result; read to see it", g.key.keyspace, g.key.partition)})
		return
	}
	cmd.Version = wire.VersionToPB(e.clock.Now(e.lastNow))
	b, err := proto.Marshal(cmd)
	if err != nil {
		return
	}
	p.data = b
	if err := g.rn.Propose(b); err != nil {
		p.heldSince = e.lastNow // no leader: retried at the next leader change
	} else {
		p.proposed = true
	}
	e.stats.Reproposed.Add(1)
	e.markDirty(g)
}

// maybeCompact discards applied log older than the keyspace's log_retain entries, each time
// a fifth of that has applied since the last compaction. A follower further behind gets a
// snapshot of the partition's data instead (snapshot.go).
func (e *Engine) maybeCompact(g *group) {
	retain := max(g.opts.LogRetain, 1)
	// Never past the commit index (an entry applied early, as the apply-before-commit
	// mutation does, must not be compacted into a snapshot).
	upto := min(g.applied, g.rn.BasicStatus().HardState.GetCommit())
	// Nor past a snapshot being sent: its follower needs the entries after it (as
	// CockroachDB keeps the log behind in-flight snapshots).
	for _, tr := range g.sending {
		upto = min(upto, tr.index+retain)
	}
	if g.txn != nil {
		// Nor past the transaction state last saved: a restart replays the log from it.
		upto = min(upto, g.txnSavedAt+retain)
	}
	if g.sinceCut < max(retain/5, 1) || upto <= retain {
		return
	}
	ops, err := g.log.Compact(upto-retain, proto.Clone(g.conf).(*raftpb.ConfState))
	if err != nil {
		e.fail(g, err)
		return
	}
	g.sinceCut = 0
	e.out.Raw = append(e.out.Raw, ops...)
}

// send queues one of g's Raft messages for its destination's batch. Heartbeats carry the
// trailer (lease.go); a snapshot goes by transfer (snapshot.go); a hand-over ends the
// leader's lease for the term.
func (e *Engine) send(g *group, m *raftpb.Message) {
	switch m.GetType() {
	case raftpb.MessageType_MsgHeartbeat:
		m.Context = appendTrailer(m.GetContext(), trailer{sentNano: e.lastNow.UnixNano(), commit: g.rn.BasicStatus().HardState.GetCommit()})
	case raftpb.MessageType_MsgSnap:
		e.startTransfer(g, m)
		return
	case raftpb.MessageType_MsgTimeoutNow:
		g.lease.voidTerm = m.GetTerm()
	case raftpb.MessageType_MsgVoteResp:
		if !m.GetReject() {
			g.electionElapsed = 0 // etcd raft restarts its election clock on a vote granted
		}
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return
	}
	to := uint32(m.GetTo())
	e.batches[to] = append(e.batches[to], e.raftMessage(g, b))
}

// flushBatches turns the Ready's Raft messages into envelopes: one per destination (a few
// if they are large), in destination order.
func (e *Engine) flushBatches() {
	if len(e.batches) == 0 {
		return
	}
	dests := make([]uint32, 0, len(e.batches))
	for to := range e.batches {
		dests = append(dests, to)
	}
	slices.Sort(dests)
	for _, to := range dests {
		msgs := e.batches[to]
		for len(msgs) > 0 {
			n, size := 0, 0
			for n < len(msgs) && (n == 0 || size+len(msgs[n].Message) <= maxBatchBytes) {
				size += len(msgs[n].Message) + len(msgs[n].Keyspace) + 8
				n++
			}
			env := &peerpb.Envelope{From: e.cfg.NodeID, To: to}
			if n == 1 {
				env.Msg = &peerpb.Envelope_Raft{Raft: msgs[0]}
			} else {
				env.Msg = &peerpb.Envelope_RaftBatch{RaftBatch: &peerpb.RaftBatch{Messages: slices.Clone(msgs[:n])}}
				e.stats.Coalesced.Add(int64(n - 1))
			}
			e.out.Messages = append(e.out.Messages, env)
			msgs = msgs[n:]
		}
		delete(e.batches, to)
	}
}

// Step delivers a peer message (or a note from this node's own jobs) to the engine.
func (e *Engine) Step(now time.Time, env *peerpb.Envelope) {
	e.observe(now)
	from := env.GetFrom()
	if from != e.cfg.NodeID {
		e.heard(now, from)
	}
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_Raft:
		e.stepRaft(now, from, m.Raft)
	case *peerpb.Envelope_RaftBatch:
		for _, rm := range m.RaftBatch.GetMessages() {
			e.stepRaft(now, from, rm)
		}
	case *peerpb.Envelope_ClockPing:
		e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: from,
			Msg: &peerpb.Envelope_ClockPong{ClockPong: &peerpb.ClockPong{T1UnixNanos: m.ClockPing.GetT1UnixNanos(), T2UnixNanos: now.UnixNano()}}})
	case *peerpb.Envelope_ClockPong:
		if e.clockEst != nil {
			e.clockEst.Sample(from, m.ClockPong.GetT1UnixNanos(), m.ClockPong.GetT2UnixNanos(), now.UnixNano())
		}
	case *peerpb.Envelope_RaftSnapshotOffer:
		e.stepOffer(now, from, m.RaftSnapshotOffer)
	case *peerpb.Envelope_RaftSnapshotRequest:
		e.stepSnapshotRequest(now, from, m.RaftSnapshotRequest)
	case *peerpb.Envelope_RaftSnapshotChunk:
		e.stepChunk(now, from, m.RaftSnapshotChunk)
	case *peerpb.Envelope_RaftSnapshotStored:
		if from == e.cfg.NodeID {
			e.stepStored(now, m.RaftSnapshotStored)
		}
	case *peerpb.Envelope_RaftSnapshotReady:
		if from == e.cfg.NodeID {
			e.stepSnapshotReady(now, m.RaftSnapshotReady)
		}
	case *peerpb.Envelope_RaftForward:
		e.stepForward(now, from, m.RaftForward)
	case *peerpb.Envelope_RaftForwardReply:
		e.stepForwardReply(now, from, m.RaftForwardReply)
	case *peerpb.Envelope_RaftApplied:
		if m.RaftApplied.GetFrozenAt() != 0 {
			e.stepFrozenReport(from, m.RaftApplied)
			break
		}
		e.stepApplied(from, m.RaftApplied)
	case *peerpb.Envelope_RaftRemoved:
		e.stepRemoved(now, from, m.RaftRemoved)
	case *peerpb.Envelope_Txn:
		e.stepTxn(now, from, m.Txn)
		e.flushLocalTxn()
	}
}

// stepRaft delivers one Raft message to its group. Messages for groups this node does not
// have, or whose addressing disagrees with the envelope's, are dropped like lost messages.
func (e *Engine) stepRaft(now time.Time, from uint32, rm *peerpb.RaftMessage) {
	g := e.groups[groupKey{rm.GetKeyspace(), groupOf(rm.GetPartition(), rm.Group)}]
	if g == nil {
		if g = e.emptyForMessage(from, rm); g == nil {
			return
		}
	}
	g.heardAt = e.ticks
	var m raftpb.Message
	if err := proto.Unmarshal(rm.GetMessage(), &m); err != nil {
		return
	}
	if m.GetFrom() != uint64(from) || m.GetTo() != uint64(e.cfg.NodeID) || !(g.isMember(from) || g.desc.HasMember(from)) {
		return
	}
	if etcdraft.IsLocalMsg(m.GetType()) {
		return // never from the network
	}
	// An empty append response (index 0) is a follower's answer to a message from an older
	// term: it tells a stale leader that a newer term exists. A leader of that term learns
	// nothing from it, but etcd raft takes it as "matched up to 0" and moves the follower's
	// progress to replicate from index 1 — which lies behind every group's bootstrap
	// snapshot, so the leader would need a snapshot to catch up a follower that has the
	// whole log (the simulator found this: seed 129, a heartbeat delayed across the
	// leader's restart). Only a node that would step down because of it needs it.
	if m.GetType() == raftpb.MessageType_MsgAppResp && !m.GetReject() && m.GetIndex() == 0 && m.GetTerm() <= g.rn.BasicStatus().HardState.GetTerm() {
		return
	}
	quiesceHeartbeat, keepQuiet := false, false
	switch m.GetType() {
	case raftpb.MessageType_MsgVote, raftpb.MessageType_MsgPreVote:
		if g.freezeVotes && now.Before(g.freezeUntil) && !bytes.Equal(m.GetContext(), campaignTransfer) {
			e.stats.VotesFrozen.Add(1)
			return
		}
	case raftpb.MessageType_MsgHeartbeat:
		if _, tr, ok := splitTrailer(m.GetContext()); ok {
			g.noteFresh(tr.commit, tr.sentNano)
			quiesceHeartbeat = tr.flags&flagQuiesce != 0
		}
		// A quiesced follower stays quiet on its leader's heartbeats (a late one, sent
		// before the quiesce heartbeat) unless they bring news: a commit it lacks.
		last, _ := g.log.Storage().LastIndex()
		keepQuiet = uint64(from) == g.lead && m.GetTerm() == g.term && m.GetCommit() <= last
	case raftpb.MessageType_MsgHeartbeatResp:
		if ctx, tr, ok := splitTrailer(m.GetContext()); ok {
			m.Context = ctx
			g.leaseAck(from, m.GetTerm(), tr.sentNano)
			// Responses to heartbeats (raft's own, echoing their trailer) do not wake a
			// quiesced leader; a follower's wake-up call has no trailer.
			keepQuiet = true
		}
	case raftpb.MessageType_MsgAppResp:
		keepQuiet = !m.GetReject() // a late acknowledgement
	case raftpb.MessageType_MsgProp:
		e.touch(g)
	case raftpb.MessageType_MsgReadIndex:
		// A follower's linearizable read: under a valid lease the leader gives its commit
		// index at once (as etcd raft's lease-based read-only option does), instead of a
		// heartbeat round to a majority.
		e.touch(g)
		if len(m.GetEntries()) == 1 {
			if _, why := e.leaseEnd(now, g); why == "" {
				e.queueRaw(g, &raftpb.Message{Type: raftpb.MessageType_MsgReadIndexResp.Enum(), From: proto.Uint64(uint64(e.cfg.NodeID)), To: proto.Uint64(uint64(from)),
					Term: proto.Uint64(g.rn.BasicStatus().HardState.GetTerm()), Index: proto.Uint64(g.rn.BasicStatus().HardState.GetCommit()), Entries: m.GetEntries()})
				e.stats.ReadIndexByLease.Add(1)
				return
			}
		}
	}
	if g.quiesced && !quiesceHeartbeat && !keepQuiet {
		e.unquiesce(g, uint64(from) != g.lead)
	}
	switch m.GetType() {
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgSnap:
		// What may reset etcd raft's election clock (a leader's message; a vote granted, in
		// send) resets the engine's too (tickGroup).
		if m.GetTerm() >= g.rn.BasicStatus().HardState.GetTerm() {
			g.electionElapsed = 0
		}
	}
	_ = g.rn.Step(&m) // errors are for local misuse (e.g. a response to an unknown peer): drop
	e.markDirty(g)
	if quiesceHeartbeat {
		e.quiesceFollower(g, from, &m)
	}
}

// campaignTransfer is etcd raft's vote context of a campaign started by MsgTimeoutNow (a
// hand-over by the leader), which overrides followers' leases.
var campaignTransfer = []byte("CampaignTransfer")

// appliedNotice tells every node how far this node has applied g, for groups whose
// progress others wait for (the metadata group, through the state machine's Notify).
func (e *Engine) appliedNotice(g *group) {
	if !g.notifies() {
		return
	}
	for _, nd := range e.cfg.Nodes {
		if nd.ID == e.cfg.NodeID {
			continue
		}
		e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: nd.ID,
			Msg: &peerpb.Envelope_RaftApplied{RaftApplied: &peerpb.RaftApplied{Keyspace: g.key.keyspace, Partition: g.key.partition, Index: g.applied}}})
	}
}

// stepApplied hands another node's applied index to the group's state machine, if it
// listens.
func (e *Engine) stepApplied(from uint32, a *peerpb.RaftApplied) {
	g := e.groups[groupKey{a.GetKeyspace(), a.GetPartition()}]
	if g == nil {
		return
	}
	if !g.notifies() {
		return
	}
	if g.peerApplied == nil {
		g.peerApplied = map[uint32]uint64{}
	}
	g.peerApplied[from] = max(g.peerApplied[from], a.GetIndex())
	e.releaseHeld(e.lastNow, g)
}
