package txnsim

import (
	"time"

	"meridian/internal/sdur"
)

// delayEstimator is transaction delaying (paper IV-D): a submitter broadcasts a global to the
// remote partitions at once and delays its own partition's broadcast by Δ, so that the global
// reaches its own partition's log about when it reaches the others' and holds the locals
// behind it for less. Fixed: Δ is Options.Delay, for the partitions whose preferred server is
// in the submitter's region (the paper's "own partition"). Auto (beyond the paper): the
// submitter measures, per partition, how long after submission it learns that the partition
// delivered its globals (its own replica's delivery, or the first vote from the partition
// less the one-way delay back), keeps an EWMA, and delays each partition's broadcast by the
// largest estimate less its own — every partition's delivery then lands at about the same
// time, with no Δ to tune.
type delayEstimator struct {
	fixed time.Duration
	auto  bool
	// est: EWMA of the delivery latency per (submitter node, partition).
	est map[[2]int]time.Duration
	// track: per submitted global, its start and the delay applied per partition.
	track map[sdur.TxnID]*delayTrack
}

type delayTrack struct {
	start   time.Duration
	applied map[uint32]time.Duration
	// best is the earliest delivery seen per partition.
	best map[uint32]time.Duration
}

const delayEWMAWeight = 0.1

// maxDelay bounds Δ (a mis-estimate must not hold a transaction for long).
const maxDelay = time.Second

func newDelayEstimator(o Options) *delayEstimator {
	return &delayEstimator{fixed: o.Delay, auto: o.AutoDelay, est: map[[2]int]time.Duration{}, track: map[sdur.TxnID]*delayTrack{}}
}

// delays returns the delay of each part's broadcast.
func (d *delayEstimator) delays(n *node, s *cluster, parts []*sdur.Part) []time.Duration {
	out := make([]time.Duration, len(parts))
	if len(parts) < 2 {
		return out
	}
	switch {
	case d.auto:
		var top time.Duration
		for _, p := range parts {
			top = max(top, d.est[[2]int{n.idx, int(p.Partition)}])
		}
		for i, p := range parts {
			e, ok := d.est[[2]int{n.idx, int(p.Partition)}]
			if ok {
				out[i] = min(maxDelay, top-e)
			}
		}
	case d.fixed > 0:
		for i, p := range parts {
			if s.nodes[s.parts[p.Partition].preferred].region == n.region {
				out[i] = d.fixed
			}
		}
	}
	return out
}

func (d *delayEstimator) submitted(n *node, sub *submission, now time.Duration, delays []time.Duration) {
	if !d.auto || !sub.global {
		return
	}
	t := &delayTrack{start: now, applied: map[uint32]time.Duration{}, best: map[uint32]time.Duration{}}
	for i, p := range sub.parts {
		t.applied[p.Partition] = delays[i]
	}
	d.track[sub.id] = t
	if len(d.track) > 1<<16 {
		for id := range d.track { // bound: drop an arbitrary old one (estimates only)
			delete(d.track, id)
			break
		}
	}
}

// observe: node n learnt that partition delivered txn, oneWay after the fact (the delay the
// news took to come back: 0 for the submitter's own replica, the sender's one-way delay for a
// vote). The earliest delivery per partition counts (a replica behind delivers late).
func (d *delayEstimator) observe(n *node, txn sdur.TxnID, partition uint32, now, oneWay time.Duration) {
	if !d.auto {
		return
	}
	t := d.track[txn]
	if t == nil {
		return
	}
	lat := now - t.start - oneWay - t.applied[partition]
	if best, ok := t.best[partition]; !ok || lat < best {
		t.best[partition] = lat
	}
}

// finish folds a transaction's delivery latencies into the estimates once its outcome is in.
func (d *delayEstimator) finish(n *node, txn sdur.TxnID) {
	t := d.track[txn]
	if t == nil {
		return
	}
	delete(d.track, txn)
	for p, lat := range t.best {
		k := [2]int{n.idx, int(p)}
		if e, ok := d.est[k]; ok {
			d.est[k] = e + time.Duration(delayEWMAWeight*float64(lat-e))
		} else {
			d.est[k] = lat
		}
	}
}
