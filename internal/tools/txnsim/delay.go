package txnsim

import (
	"time"

	"meridian/internal/sdur"
)

// delayer is transaction delaying (paper IV-D) at the submitters: fixed (Δ = Options.Delay for
// the partitions whose preferred server is in the submitter's region, the paper's "own
// partition"), or automatic (sdur.DelayEstimator per submitting node).
type delayer struct {
	fixed time.Duration
	auto  bool
	est   map[int]*sdur.DelayEstimator
}

func newDelayEstimator(o Options) *delayer {
	return &delayer{fixed: o.Delay, auto: o.AutoDelay, est: map[int]*sdur.DelayEstimator{}}
}

func (d *delayer) of(n *node) *sdur.DelayEstimator {
	e := d.est[n.idx]
	if e == nil {
		e = &sdur.DelayEstimator{}
		d.est[n.idx] = e
	}
	return e
}

// delays returns the delay of each part's broadcast.
func (d *delayer) delays(n *node, s *cluster, parts []*sdur.Part) []time.Duration {
	out := make([]time.Duration, len(parts))
	if len(parts) < 2 {
		return out
	}
	switch {
	case d.auto:
		return d.of(n).Delays(partitionsOf(parts))
	case d.fixed > 0:
		for i, p := range parts {
			if s.nodes[s.parts[p.Partition].preferred].region == n.region {
				out[i] = d.fixed
			}
		}
	}
	return out
}

func partitionsOf(parts []*sdur.Part) []uint32 {
	out := make([]uint32, len(parts))
	for i, p := range parts {
		out[i] = p.Partition
	}
	return out
}

func (d *delayer) submitted(n *node, sub *submission, now time.Time, delays []time.Duration) {
	if d.auto && sub.global {
		d.of(n).Submitted(sub.id, partitionsOf(sub.parts), delays, now)
	}
}

func (d *delayer) observe(n *node, txn sdur.TxnID, partition uint32, now time.Time, oneWay time.Duration) {
	if d.auto {
		d.of(n).Observe(txn, partition, now, oneWay)
	}
}

func (d *delayer) finish(n *node, txn sdur.TxnID) {
	if d.auto {
		d.of(n).Finish(txn)
	}
}
