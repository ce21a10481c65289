package raft

import (
	"fmt"
	"slices"
	"time"

	"meridian/internal/engine"
)

// Waiting for every node to apply. A group whose state machine asks for it (NotifyApplied:
// the cluster metadata group) tells every node of the cluster how far it has applied
// (RaftApplied, sent in the Ready that applies, so it leaves after the applied state is
// durable and installed). A request with WaitAll (a metadata change) is answered once every
// node that is alive has applied it — the change is then in force everywhere — or at its
// deadline, naming the nodes that have not (engine.Result.Unacked).

// heldReply is a WaitAll request's result, held until every live node has applied index.
type heldReply struct {
	index    uint64
	res      engine.Result
	deadline time.Time
	since    time.Time // when it was held
}

// notifies reports whether g's state machine wants applied indexes shared.
func (g *group) notifies() bool {
	n, ok := g.sm.(interface{ NotifyApplied() bool })
	return ok && n.NotifyApplied()
}

// hold keeps res until every live node has applied index (releaseHeld).
func (e *Engine) hold(g *group, index uint64, res engine.Result, deadline time.Time) {
	if g.peerApplied == nil {
		g.peerApplied = map[uint32]uint64{}
	}
	g.held = append(g.held, heldReply{index: index, res: res, deadline: deadline, since: e.lastNow})
	e.releaseHeld(e.lastNow, g)
}

// releaseHeld answers the held results whose index every live node has applied, and those
// whose deadline has passed (with the nodes that had not).
func (e *Engine) releaseHeld(now time.Time, g *group) {
	if len(g.held) == 0 {
		return
	}
	kept := g.held[:0]
	for _, h := range g.held {
		var missing []engine.Unacked
		allLive := true
		for _, n := range e.cfg.Nodes {
			if n.ID == e.cfg.NodeID || g.peerApplied[n.ID] >= h.index {
				continue
			}
			reason := fmt.Sprintf("has applied the metadata up to %d, not yet %d", g.peerApplied[n.ID], h.index)
			switch p := e.peers[n.ID]; {
			case !e.alive(n.ID):
				reason = "down (not heard from for an election timeout)"
			case p != nil && !p.heardOnce && !p.created.Before(h.since):
				// It became a member with this change or after (a joining node, which starts
				// once its registration returns): it learns the change when it starts.
				reason = "joined with this change and has not started yet"
			default:
				allLive = false
			}
			missing = append(missing, engine.Unacked{Node: n.ID, Reason: reason})
		}
		expired := !h.deadline.IsZero() && now.After(h.deadline)
		if !allLive && !expired {
			kept = append(kept, h)
			continue
		}
		slices.SortFunc(missing, func(a, b engine.Unacked) int { return int(a.Node) - int(b.Node) })
		h.res.Unacked = missing
		e.reply(h.res)
	}
	g.held = kept
}
