package raft

import (
	"slices"
	"time"

	"meridian/internal/config"
	"meridian/internal/placement"
	"meridian/internal/sdur"
)

// Delaying (geo-sdur IV-D): a global transaction waits at every partition until its votes are
// in, and the locals behind it wait too. The partition nearest the submitter delivers the
// global first and waits longest; the submitter holds that partition's part back by Δ so that
// every partition delivers the global at about the same time. Δ is fixed (txn_delay: a
// duration, given to the parts for partitions led in the submitter's region), or automatic
// (txn_delay: auto): the submitter's sdur.DelayEstimator learns from the votes it sees how
// long each partition takes to deliver its globals and delays each part by the largest
// estimate less its own partition's.

// maxDelayedParts bounds the parts held back on one node (beyond it, parts go at once).
const maxDelayedParts = 100_000

// delayedPart is a transaction's part held back until at.
type delayedPart struct {
	at       time.Time
	keyspace string
	part     txnPartEntry
	deadline time.Time
}

// txnDelaysFor returns the delay of each part of a transaction submitted here (zeros for
// locals, 2pc, and without txn_delay).
func (e *Engine) txnDelaysFor(now time.Time, ks *placement.Keyspace, mode string, id sdur.TxnID, pids []uint32) []time.Duration {
	out := make([]time.Duration, len(pids))
	if mode != config.TxnSDUR || len(pids) < 2 {
		return out
	}
	o, err := config.RaftOptionsOf(ks.Spec.Options)
	if err != nil {
		return out
	}
	switch {
	case o.AutoDelay:
		d := e.txnDelays[ks.Spec.Name]
		if d == nil {
			d = &sdur.DelayEstimator{}
			e.txnDelays[ks.Spec.Name] = d
		}
		out = d.Delays(pids)
		d.Submitted(id, pids, out, now)
	case o.TxnDelay > 0:
		region := e.regionOf(e.cfg.NodeID)
		for i, pid := range pids {
			if e.leaderRegionOf(ks, pid, o) == region {
				out[i] = o.TxnDelay
			}
		}
	}
	return out
}

// leaderRegionOf is the region of a partition's leader: the one this node knows, else the
// keyspace's leader region (where leaders are steered).
func (e *Engine) leaderRegionOf(ks *placement.Keyspace, pid uint32, o config.RaftOptions) string {
	if g := e.groups[groupKey{ks.Spec.Name, pid}]; g != nil && g.lead != 0 {
		return e.regionOf(uint32(g.lead))
	}
	if o.LeaderRegion != "" {
		return o.LeaderRegion
	}
	if len(ks.Spec.Regions) > 0 {
		return ks.Spec.Regions[0]
	}
	return ""
}

// holdPart keeps a part back until at (proposed at once when too many are held).
func (e *Engine) holdPart(at time.Time, keyspace string, p txnPartEntry, deadline time.Time) {
	if len(e.txnDelayed) >= maxDelayedParts {
		e.proposeTxnEntry(e.lastNow, keyspace, p.partition, p.key, p.entry, deadline)
		return
	}
	e.txnDelayed = append(e.txnDelayed, delayedPart{at: at, keyspace: keyspace, part: p, deadline: deadline})
}

// releaseParts proposes the held parts whose time has come (the runtime ticks every
// millisecond).
func (e *Engine) releaseParts(now time.Time) {
	if len(e.txnDelayed) == 0 {
		return
	}
	var due []delayedPart
	e.txnDelayed = slices.DeleteFunc(e.txnDelayed, func(d delayedPart) bool {
		if now.Before(d.at) {
			return false
		}
		due = append(due, d)
		return true
	})
	for _, d := range due {
		e.proposeTxnEntry(now, d.keyspace, d.part.partition, d.part.key, d.part.entry, d.deadline)
	}
}

// observeDelivery tells the submitter's estimator that a partition delivered one of its
// globals (its own replica's vote: oneWay 0; another node's: half the round trip to it).
func (e *Engine) observeDelivery(keyspace string, id sdur.TxnID, partition uint32, now time.Time, oneWay time.Duration) {
	if d := e.txnDelays[keyspace]; d != nil {
		d.Observe(id, partition, now, oneWay)
	}
}
