package raft

import (
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"meridian/internal/wire/peerpb"
)

// Quiescence and node liveness (CockroachDB's quiesced ranges, in the spirit of
// pkg/kv/kvserver's replica_raft_quiesce.go): a group with nothing to do stops ticking, so an
// idle group costs no heartbeats and no CPU, and thousands of them stay cheap.
//
//   - A leader whose group has been idle for an election timeout — no request, every member
//     caught up to its last index, everything applied, no configuration change, transfer or
//     snapshot under way — sends every member a last heartbeat flagged "quiesce" and stops
//     ticking. A follower that is caught up with it stops ticking too.
//   - Any other message for the group, a request, or a change of leader wakes it. A
//     follower woken by anything but its leader wakes the leader too (a heartbeat response),
//     so a candidate that is cut off from the leader cannot win the follower over while the
//     leader sleeps.
//   - Instead of per-group heartbeats, the engine pings every node it shares a group with
//     once per heartbeat interval (ClockPing, which also feeds the clock offset estimate).
//     A node silent for an election timeout is presumed down, and the groups it led wake up
//     here and elect a new leader after their own election timeout.
//
// Leases need nothing more: a quiesced leader sends no heartbeats, so its lease simply runs
// out; the first linearizable read after that goes by ReadIndex, which wakes the group.

// quiesceAfter is how long a group stays idle before its leader quiesces it.
func (g *group) quiesceAfterTicks() uint64 { return uint64(max(g.opts.ElectionTicks(), 1)) }

// touch marks activity on g (a request, a proposal): it wakes and stays awake a while.
func (e *Engine) touch(g *group) {
	g.idleSince = e.ticks
	if g.quiesced {
		e.unquiesce(g, true)
	}
}

// unquiesce wakes g. With wakeLeader, a follower also wakes its leader.
func (e *Engine) unquiesce(g *group, wakeLeader bool) {
	if !g.quiesced {
		return
	}
	g.quiesced = false
	g.idleSince = e.ticks
	e.activeStale = true
	e.stats.Unquiesced.Add(1)
	e.markDirty(g)
	if wakeLeader && g.lead != etcdraft.None && g.lead != uint64(e.cfg.NodeID) {
		m := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeatResp.Enum(), From: proto.Uint64(uint64(e.cfg.NodeID)), To: proto.Uint64(g.lead),
			Term: proto.Uint64(g.rn.BasicStatus().HardState.GetTerm())}
		e.queueRaw(g, m)
	}
}

// queueRaw queues a message the engine built itself (not from a Ready).
func (e *Engine) queueRaw(g *group, m *raftpb.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		return
	}
	to := uint32(m.GetTo())
	e.batches[to] = append(e.batches[to], e.raftMessage(g, b))
}

// maybeQuiesceAll lets the idle groups this node leads quiesce.
func (e *Engine) maybeQuiesceAll() {
	if e.cfg.Mutation == "no-quiesce" {
		return
	}
	for _, g := range e.activeGroups() {
		if g.state == etcdraft.StateLeader {
			e.maybeQuiesce(g)
		}
	}
}

func (e *Engine) maybeQuiesce(g *group) {
	if e.ticks-g.idleSince < g.quiesceAfterTicks() || g.pendingCount > 0 || len(g.waiting) > 0 || len(g.sending) > 0 ||
		g.receiving != nil || g.confProposedAt != 0 || len(g.conf.GetVotersOutgoing()) > 0 || !g.inPlacement || (g.txn != nil && g.txn.busy()) {
		return
	}
	st := g.rn.BasicStatus()
	if st.RaftState != etcdraft.StateLeader || st.LeadTransferee != etcdraft.None {
		return
	}
	commit := st.HardState.GetCommit()
	last, _ := g.log.Storage().LastIndex()
	if commit != last || g.applied != commit || g.appliedTerm != st.HardState.GetTerm() {
		return
	}
	caughtUp := true
	var members, matches []uint64
	g.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
		if id == uint64(e.cfg.NodeID) {
			return
		}
		members = append(members, id)
		matches = append(matches, pr.Match)
		// A member that is down does not hold the group awake: when it is back it speaks
		// first (a vote request or a response), which wakes the group.
		if pr.Match != last && e.alive(uint32(id)) {
			caughtUp = false
		}
	})
	if !caughtUp || !e.membershipSettled(g) || !e.liveQuorum(g) {
		return
	}
	term := st.HardState.GetTerm()
	ctx := appendTrailer(nil, trailer{flags: flagQuiesce, sentNano: e.lastNow.UnixNano(), commit: commit})
	for i, id := range members {
		// As etcd raft's own heartbeats: never a commit index beyond what the member has.
		e.queueRaw(g, &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(uint64(e.cfg.NodeID)), To: proto.Uint64(id),
			Term: proto.Uint64(term), Commit: proto.Uint64(min(commit, matches[i])), Context: ctx})
	}
	g.quiesced = true
	e.activeStale = true
	e.stats.Quiesced.Add(1)
}

// liveQuorum reports whether a majority of g's voters (this node included) are alive: a
// leader without one keeps ticking, so that CheckQuorum steps it down.
func (e *Engine) liveQuorum(g *group) bool {
	alive := 0
	for _, id := range g.conf.GetVoters() {
		if uint32(id) == e.cfg.NodeID || e.alive(uint32(id)) {
			alive++
		}
	}
	return 2*alive > len(g.conf.GetVoters())
}

// quiesceFollower quiesces a follower on its leader's quiesce heartbeat, if it is caught up.
func (e *Engine) quiesceFollower(g *group, from uint32, m *raftpb.Message) {
	st := g.rn.BasicStatus()
	_, tr, _ := splitTrailer(m.GetContext())
	last, _ := g.log.Storage().LastIndex()
	if st.Lead != uint64(from) || st.HardState.GetTerm() != m.GetTerm() || g.pendingCount > 0 || len(g.waiting) > 0 || g.receiving != nil || last != tr.commit {
		return
	}
	if !g.quiesced {
		g.quiesced = true
		e.activeStale = true
		e.stats.Quiesced.Add(1)
	}
}

// heard records that node spoke.
func (e *Engine) heard(now time.Time, node uint32) {
	if p := e.peers[node]; p != nil {
		p.lastHeard = now
		if p.lapsed {
			e.revived(node)
		}
		p.lapsed = false
		p.heardOnce = true
	}
}

// revived wakes the quiesced groups this node leads in which node, silent for an election
// timeout and heard again, is behind. A member that has the group wakes it itself (its
// election timer), but one that lacks it — it got a snapshot of a neighbour taken after the
// split that founded the group, repartition.go — has nothing that would speak, and the
// group's leader must reach it.
func (e *Engine) revived(node uint32) {
	for _, g := range e.order {
		if !g.quiesced || g.state != etcdraft.StateLeader || !g.isMember(node) {
			continue
		}
		last, _ := g.log.Storage().LastIndex()
		behind := false
		g.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
			behind = behind || (id == uint64(node) && pr.Match < last)
		})
		if behind {
			e.unquiesce(g, false)
		}
	}
}

// alive reports whether node spoke within an election timeout.
func (e *Engine) alive(node uint32) bool {
	p := e.peers[node]
	return p != nil && !p.lapsed
}

// livenessTimeout is how long a node may be silent before its quiesced groups wake.
func (e *Engine) livenessTimeout() time.Duration {
	d := time.Duration(0)
	for _, g := range e.order {
		d = max(d, g.opts.ElectionTimeout)
	}
	if d == 0 {
		d = 2 * time.Second
	}
	return d
}

// checkLiveness wakes the groups whose leader's node has gone silent.
func (e *Engine) checkLiveness(now time.Time) {
	timeout := e.livenessTimeout()
	for _, id := range e.peerList {
		p := e.peers[id]
		if p.lastHeard.IsZero() {
			p.lastHeard = now // known since now
			continue
		}
		if p.lapsed || now.Sub(p.lastHeard) <= timeout {
			continue
		}
		p.lapsed = true
		// The groups it led wake up here and elect another leader; the groups this node
		// leads with it as a member wake up too, so that CheckQuorum steps this node down
		// if it has lost its majority.
		for _, g := range e.order {
			if g.quiesced && (g.lead == uint64(id) || (g.state == etcdraft.StateLeader && g.isMember(id))) {
				e.unquiesce(g, false)
			}
		}
	}
}

// pingEvery is the node-level heartbeat interval: the shortest of the groups'.
func (e *Engine) pingEvery() time.Duration {
	d := time.Duration(0)
	for _, g := range e.order {
		if d == 0 || g.opts.HeartbeatInterval < d {
			d = g.opts.HeartbeatInterval
		}
	}
	return d
}

// pingPeers sends the node-level heartbeat to every node this one shares a group with.
func (e *Engine) pingPeers(now time.Time) {
	every := e.pingEvery()
	if every == 0 || now.Sub(e.lastPing) < every {
		return
	}
	e.lastPing = now
	for _, id := range e.peerList {
		e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: id,
			Msg: &peerpb.Envelope_ClockPing{ClockPing: &peerpb.ClockPing{T1UnixNanos: now.UnixNano()}}})
	}
}
