package raft

import (
	"encoding/binary"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/quorum"

	"meridian/internal/config"
	"meridian/internal/engine"
)

// Leader leases: linearizable reads at the leader with no round trip.
//
// A follower in etcd raft with CheckQuorum neither votes nor pre-votes for another candidate
// while it has heard from its leader within an election timeout (the "inLease" check of
// raft.Step; only a leader's own hand-over, MsgTimeoutNow, overrides it). So a leader whose
// heartbeat sent at time t0 was acknowledged by a quorum of its voters knows that no other
// node can become leader before those voters' election timeouts, measured from when they
// received it, have run out. The leader serves reads from its own applied state until then,
// with margins:
//
//   - clocks. Every clock is within ε/2 of true time (config clock.max_offset is ε, the bound
//     on the offset between two nodes), so an interval measured by one node is off by at most
//     ε, offset changes and drift included. The follower's election timeout is measured on
//     its clock: it lasts at least electionTimeout − ε of true time; the lease is measured on
//     the leader's: it must end ε earlier still. A follower counts whole Raft ticks from a
//     moment that need not be on a tick: one tick less. So the lease runs until
//     t0 + electionTimeout − tick − 2ε on the leader's clock, and is used only while the
//     estimated offset to every peer (hlc.OffsetEstimator) is within ε; beyond it reads go
//     back to ReadIndex, visibly (the "lease_clock" fallback counter).
//   - restarts. A restarted node's RawNode knows no leader and would vote at once, breaking
//     the promise it made before it stopped. Its groups that had state drop vote requests
//     for electionTimeout + tick + 2ε after start (the vote freeze), unless the request is a
//     hand-over by the leader itself.
//   - hand-overs. A leader that transfers leadership (MsgTimeoutNow) lets its target bypass
//     every follower's lease, possibly much later (the message can be delayed): it never
//     serves a lease read again in that term.
//   - a new leader's state. A leader serves under its lease only once an entry of its own
//     term has applied (before that, its commit index may lag the previous leader's), and
//     only what it has applied up to its commit index at the time of the read.
//   - the read itself runs in the runtime after the Ready that carries it: it carries the
//     lease's end (engine.Read.ValidUntil) and is refused, to be retried, if it is late.
//
// The send time of each heartbeat travels in its context, which the follower echoes (the
// trailer below); the leader strips it before etcd raft sees the response, so ReadIndex
// contexts still match.

// lease is a leader's lease state for one group.
type lease struct {
	term uint64
	// acks is, per voter, the send time (leader's clock, Unix ns) of the newest heartbeat of
	// this term it acknowledged.
	acks map[uint32]int64
	// voidTerm: leases are off for the rest of this term (a hand-over was started).
	voidTerm uint64
}

// leaseReadSlack is the least time a lease must have left for a read to be served under it:
// the read runs after the Ready that carries it is released (a group commit's fsync), and is
// refused if the lease ran out meanwhile.
const leaseReadSlack = 20 * time.Millisecond

// leaseDuration is how long a lease lasts after the quorum's acknowledged send time.
func (e *Engine) leaseDuration(g *group) time.Duration {
	switch e.cfg.Mutation {
	case "lease-ignores-epsilon":
		return g.opts.ElectionTimeout - config.RaftTick
	}
	return g.opts.ElectionTimeout - config.RaftTick - 2*e.cfg.MaxClockOffset
}

// voteFreeze is how long a restarted group drops vote requests.
func (e *Engine) voteFreeze(g *group) time.Duration {
	if e.cfg.Mutation == "restart-votes-at-once" {
		return 0
	}
	return g.opts.ElectionTimeout + config.RaftTick + 2*e.cfg.MaxClockOffset
}

// leaseEnd returns when g's lease runs out on this node's clock, or why there is none.
func (e *Engine) leaseEnd(now time.Time, g *group) (time.Time, string) {
	st := g.rn.BasicStatus()
	if e.cfg.Mutation == "lease-never-expires" && g.lease.term != 0 {
		// Broken on purpose: a lease, once held, is taken to hold for good, whatever the
		// node's role or term since.
		return now.Add(time.Hour), ""
	}
	switch {
	case st.RaftState != etcdraft.StateLeader:
		return time.Time{}, "not_leader"
	case st.LeadTransferee != etcdraft.None || g.lease.voidTerm == st.HardState.GetTerm():
		return time.Time{}, "transfer"
	case g.appliedTerm != st.HardState.GetTerm() || g.lease.term != st.HardState.GetTerm():
		return time.Time{}, "new_term"
	case e.cfg.Mutation != "lease-ignores-epsilon" && e.clockEst != nil && e.clockEst.MaxOffset() > e.cfg.MaxClockOffset:
		return time.Time{}, "clock"
	}
	acks := ackIndexer{self: uint64(e.cfg.NodeID), now: now.UnixNano(), acks: g.lease.acks}
	cfg := quorum.JointConfig{majority(g.conf.GetVoters()), majority(g.conf.GetVotersOutgoing())}
	t0 := int64(cfg.CommittedIndex(acks))
	if t0 <= 0 { // no voter configuration (an empty config "commits" MaxUint64: negative here)
		return time.Time{}, "no_quorum"
	}
	end := time.Unix(0, t0).Add(e.leaseDuration(g))
	if !now.Add(leaseReadSlack).Before(end) {
		return time.Time{}, "expired"
	}
	return end, ""
}

func majority(ids []uint64) quorum.MajorityConfig {
	m := quorum.MajorityConfig{}
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return m
}

// ackIndexer reports each voter's acknowledged heartbeat send time as its "index", so
// quorum.JointConfig.CommittedIndex returns the latest time a quorum has acknowledged.
type ackIndexer struct {
	self uint64
	now  int64
	acks map[uint32]int64
}

func (a ackIndexer) AckedIndex(id uint64) (quorum.Index, bool) {
	if id == a.self {
		return quorum.Index(a.now), true
	}
	t, ok := a.acks[uint32(id)]
	return quorum.Index(t), ok
}

// leaseRead serves a linearizable get under g's lease if it holds (true), or leaves it to
// ReadIndex (false).
func (e *Engine) leaseRead(now time.Time, g *group, req engine.Request) bool {
	return e.leaseReadFn(now, g, req, func(path string, validUntil time.Time) engine.Read {
		return e.readAt(g, req, path, 0, validUntil)
	})
}

// leaseReadFn is leaseRead with the read to run once the leader has applied its commit
// index.
func (e *Engine) leaseReadFn(now time.Time, g *group, req engine.Request, read func(path string, validUntil time.Time) engine.Read) bool {
	end, why := e.leaseEnd(now, g)
	if why != "" {
		if why != "not_leader" {
			e.stats.leaseFallback(why)
		}
		return false
	}
	commit := g.rn.BasicStatus().HardState.GetCommit()
	if g.applied >= commit {
		e.stats.read(PathLease)
		e.out.Reads = append(e.out.Reads, read(PathLease, end.Add(-leaseReadSlack/2)))
		return true
	}
	// Committed entries not applied yet: the read waits for them, then serves if the lease
	// still holds (serveWaiting).
	e.track(req, &pendingReq{req: req, group: g})
	g.waiting = append(g.waiting, waitingRead{index: commit, id: req.ID, lease: true})
	return true
}

// leaseAck records a voter's acknowledgement of a heartbeat sent at sentNano in term.
func (g *group) leaseAck(from uint32, term uint64, sentNano int64) {
	if term != g.lease.term {
		return
	}
	if sentNano > g.lease.acks[from] {
		g.lease.acks[from] = sentNano
	}
}

// newTerm resets the lease state when this node becomes leader of term.
func (g *group) newLeaseTerm(term uint64) {
	if g.lease.term == term {
		return
	}
	g.lease.term = term
	clear(g.lease.acks)
}

// staleness bounds how old the applied state of g here may be: the newest leader send time
// whose commit index this replica has applied, plus ε (the leader's clock against this
// one's). -1: unknown (no heartbeat since start, or not caught up with any).
func (e *Engine) staleness(now time.Time, g *group) time.Duration {
	if g.state == etcdraft.StateLeader {
		if g.applied >= g.rn.BasicStatus().HardState.GetCommit() {
			return 0
		}
	}
	best := int64(0)
	for _, f := range g.fresh {
		if f.commit <= g.applied && f.sentNano > best {
			best = f.sentNano
		}
	}
	if best == 0 {
		return -1
	}
	return max(0, now.Sub(time.Unix(0, best))+e.cfg.MaxClockOffset)
}

// noteFresh records a heartbeat's (leader commit, send time).
func (g *group) noteFresh(commit uint64, sentNano int64) {
	if n := len(g.fresh); n > 0 && g.fresh[n-1].commit == commit {
		g.fresh[n-1].sentNano = max(g.fresh[n-1].sentNano, sentNano)
		return
	}
	g.fresh = append(g.fresh, freshness{commit: commit, sentNano: sentNano})
	if len(g.fresh) > maxFresh {
		g.fresh = g.fresh[1:]
	}
}

// The heartbeat trailer: appended by the leader to every heartbeat's context, echoed by the
// follower in its response, removed by the leader before etcd raft sees the response.
//
//	magic (1) | flags (1) | send time, Unix ns (8) | leader commit (8)
//
// Contexts etcd raft itself puts on heartbeats are ReadIndex request contexts of 0 or 16
// bytes (readCtx), so a context of 18 or 34 bytes ending in a trailer is unambiguous.
const (
	trailerMagic = 0xA7
	trailerLen   = 18
	flagQuiesce  = 1 << 0
	readCtxLen   = 16
)

type trailer struct {
	flags    byte
	sentNano int64
	commit   uint64
}

func appendTrailer(ctx []byte, t trailer) []byte {
	out := make([]byte, 0, len(ctx)+trailerLen)
	out = append(out, ctx...)
	out = append(out, trailerMagic, t.flags)
	out = binary.BigEndian.AppendUint64(out, uint64(t.sentNano))
	return binary.BigEndian.AppendUint64(out, t.commit)
}

// splitTrailer returns the context without its trailer, and the trailer (ok false: none).
func splitTrailer(ctx []byte) ([]byte, trailer, bool) {
	n := len(ctx)
	if (n != trailerLen && n != trailerLen+readCtxLen) || ctx[n-trailerLen] != trailerMagic {
		return ctx, trailer{}, false
	}
	t := ctx[n-trailerLen:]
	tr := trailer{flags: t[1], sentNano: int64(binary.BigEndian.Uint64(t[2:10])), commit: binary.BigEndian.Uint64(t[10:18])}
	rest := ctx[:n-trailerLen]
	if len(rest) == 0 {
		rest = nil
	}
	return rest, tr, true
}

// readCtx is the ReadIndex context of request id: this engine's incarnation, then the ID. A
// read state that comes back after a restart carries the old incarnation and is ignored
// (request IDs start again; an old read index must not answer a new request).
func (e *Engine) readCtx(id uint64) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, readCtxLen), e.incarnation)
	return binary.BigEndian.AppendUint64(b, id)
}

// readCtxID returns the request ID of a read context of this incarnation.
func (e *Engine) readCtxID(ctx []byte) (uint64, bool) {
	if len(ctx) != readCtxLen || binary.BigEndian.Uint64(ctx) != e.incarnation {
		return 0, false
	}
	return binary.BigEndian.Uint64(ctx[8:]), true
}
