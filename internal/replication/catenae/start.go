package catenae

import (
	"slices"
	"time"

	core "meridian/internal/catenae"
	"meridian/internal/wire/peerpb"
)

// The start handshake. The replicas of a keyspace must agree on the epoch they start after
// (catenae.Options.Start: every epoch before it is closed and empty everywhere), and nothing
// gives them one: a keyspace from the configuration file has no creation time, and clocks
// differ. So each replica proposes one — the epoch after its clock's current one — writes it
// to disk before it tells anyone (it never changes, even across a restart), and sends it to the
// others in a hello, again every request_after until it has every proposal. Every replica
// starts after the largest proposal, which they all compute alike from the same proposals. A
// replica that has started answers a hello with its own, so that one that restarted before it
// had every proposal learns them again. Until it has started, a replica refuses requests as
// unavailable, naming the nodes it waits for.

// ensure loads k's state once, proposes a start if it has none, and starts the replica once
// every proposal is in.
func (e *Engine) ensure(now time.Time, k *keyspace) {
	if !k.replica || k.failed != nil || k.rep != nil {
		return
	}
	if !k.loaded {
		k.loaded = true
		if err := e.load(k); err != nil {
			failLoad(k, err)
			return
		}
		if k.start != 0 {
			r, err := e.restore(k)
			if err != nil {
				failLoad(k, err)
				return
			}
			k.rep = r
			return
		}
	}
	if k.proposal == 0 {
		k.proposal = uint64(now.UnixNano()/int64(k.opts.EpochLength)) + 1
		k.proposals[e.cfg.NodeID] = k.proposal
		e.out.Raw = append(e.out.Raw, k.metaOp()) // durable before the hellos leave
		e.helloAll(now, k)
	}
	e.tryStart(k)
}

// tryStart starts the replica once every replica's proposal is in.
func (e *Engine) tryStart(k *keyspace) {
	if k.rep != nil || k.failed != nil {
		return
	}
	start := uint64(0)
	for _, dc := range k.dcs {
		p, ok := k.proposals[dc]
		if !ok {
			return
		}
		start = max(start, p)
	}
	opts := k.opts
	opts.Start = start
	r, err := core.NewReplica(e.cfg.NodeID, k.dcs, opts)
	if err != nil {
		failLoad(k, err)
		return
	}
	k.start, k.rep = start, r
	e.out.Raw = append(e.out.Raw, k.metaOp())
	// The others may still wait for this replica's proposal.
	for _, dc := range k.dcs {
		if dc != e.cfg.NodeID {
			e.sendHello(k, dc)
		}
	}
}

// helloAll sends this replica's proposal to every replica whose proposal it lacks.
func (e *Engine) helloAll(now time.Time, k *keyspace) {
	k.helloAt = now
	for _, dc := range k.dcs {
		if _, ok := k.proposals[dc]; !ok && dc != e.cfg.NodeID {
			e.sendHello(k, dc)
		}
	}
}

// helloAgain repeats the hellos of a replica that has not started, every request_after.
func (e *Engine) helloAgain(now time.Time, k *keyspace) {
	if k.failed == nil && k.proposal != 0 && now.Sub(k.helloAt) >= k.opts.RequestAfter {
		e.helloAll(now, k)
	}
}

func (e *Engine) sendHello(k *keyspace, to uint32) {
	e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: to, Msg: &peerpb.Envelope_Catenae{Catenae: &peerpb.CatenaeEnvelope{
		Keyspace: k.name, Body: &peerpb.CatenaeEnvelope_Hello{Hello: &peerpb.CatenaeHello{Proposal: k.proposal, Started: k.rep != nil}}}}})
}

// stepHello takes a replica's proposal.
func (e *Engine) stepHello(k *keyspace, from uint32, h *peerpb.CatenaeHello) {
	if !slices.Contains(k.dcs, from) || from == e.cfg.NodeID || h.GetProposal() == 0 {
		return
	}
	old, known := k.proposals[from]
	if known && old != h.GetProposal() {
		return // a proposal never changes: a second one is not taken
	}
	k.proposals[from] = h.GetProposal()
	// A replica still gathering needs this one's proposal: answered when its proposal is new
	// here (it may not have this one's yet), or when this one has started (it may have
	// restarted and lost what it had). Two gathering replicas do not answer each other's
	// repeats, which come every request_after anyway.
	if !h.GetStarted() && k.proposal != 0 && (!known || k.rep != nil) {
		e.sendHello(k, from)
	}
	e.tryStart(k)
}
