package sdur

import (
	"time"
)

// The two automatic settings (beyond the paper): a reordering threshold that follows the
// measured wait of globals for their votes, and a delaying Δ that follows the measured delivery
// time of each partition. Both run in the runtime around the replicas (they read clocks); what
// they decide reaches the replicas deterministically — the threshold as a configuration entry
// of the log, Δ as the time a submitter waits before a broadcast, which no replica sees.

// LagEstimator measures, at a replica, how long after it delivers a global the last vote of the
// transaction's other partitions arrives: the time a global stays pending for its votes. A
// threshold in ticks of about that time keeps a global leapable while it waits anyway, and
// holds it little longer. Bounded: it tracks at most lagRetained globals.
type LagEstimator struct {
	tracked map[TxnID]*lagTrack
	early   map[TxnID]map[uint32]bool
	order   []TxnID
	ewma    time.Duration
	dev     time.Duration
	samples int
	// lastProposal: when a threshold was last proposed from these samples.
	lastProposal time.Time
}

type lagTrack struct {
	at   time.Time
	need int
	got  map[uint32]bool
}

const lagRetained = 1 << 14

func (l *LagEstimator) init() {
	if l.tracked == nil {
		l.tracked, l.early = map[TxnID]*lagTrack{}, map[TxnID]map[uint32]bool{}
	}
}

// Delivered records that this replica delivered a global and voted v (commit votes only).
func (l *LagEstimator) Delivered(v Vote, now time.Time) {
	l.init()
	t := &lagTrack{at: now, need: len(v.Partitions) - 1, got: l.early[v.Txn]}
	delete(l.early, v.Txn)
	if t.got == nil {
		t.got = map[uint32]bool{}
	}
	if len(t.got) >= t.need {
		l.sample(0)
		return
	}
	l.tracked[v.Txn] = t
	l.order = append(l.order, v.Txn)
	for len(l.order) > lagRetained {
		delete(l.tracked, l.order[0])
		l.order = l.order[1:]
	}
}

// Vote records another partition's vote arriving.
func (l *LagEstimator) Vote(v Vote, now time.Time) {
	l.init()
	t := l.tracked[v.Txn]
	if t == nil {
		if len(l.early) < lagRetained {
			if l.early[v.Txn] == nil {
				l.early[v.Txn] = map[uint32]bool{}
			}
			l.early[v.Txn][v.Partition] = true
		}
		return
	}
	t.got[v.Partition] = true
	if len(t.got) >= t.need {
		l.sample(now.Sub(t.at))
		delete(l.tracked, v.Txn)
	}
}

// sample folds one lag into an EWMA of the lag and of its absolute deviation (as TCP's RTO
// estimator, RFC 6298).
func (l *LagEstimator) sample(lag time.Duration) {
	if l.samples == 0 {
		l.ewma, l.dev = lag, lag/2
	} else {
		diff := lag - l.ewma
		if diff < 0 {
			diff = -diff
		}
		l.dev += (diff - l.dev) / 4
		l.ewma += (lag - l.ewma) / 8
	}
	l.samples++
}

// Window is how long a global should stay leapable: its expected wait for votes plus margin
// deviations, plus one tick interval for the tick entries' own commit.
func (l *LagEstimator) Window(tick time.Duration, margin float64) time.Duration {
	return l.ewma + time.Duration(margin*float64(l.dev)) + tick
}

// Retune returns the threshold in ticks to propose (as a configuration entry) when the window
// moved by more than a sixth from cur — after at least 20 samples and at most twice a second —
// and false otherwise.
func (l *LagEstimator) Retune(cur Threshold, tick time.Duration, margin float64, now time.Time) (Threshold, bool) {
	if l.samples < 20 || now.Sub(l.lastProposal) < 500*time.Millisecond || tick <= 0 {
		return Threshold{}, false
	}
	k := uint64((l.Window(tick, margin) + tick - 1) / tick)
	k = min(k, maxThreshold)
	if cur.Unit == Ticks && k*6 >= cur.K*5 && k*6 <= cur.K*7 {
		return Threshold{}, false
	}
	l.lastProposal = now
	return Threshold{Unit: Ticks, K: k}, true
}

// DelayEstimator is the automatic Δ of delaying (IV-D) at one submitter: it learns, per
// partition, how long after submission the partition delivers the submitter's globals (its own
// replica's delivery, or the earliest vote of the partition less that sender's one-way delay),
// keeps an EWMA, and delays each partition's broadcast by the largest estimate less its own —
// every partition then delivers the global at about the same time. Bounded: it tracks at most
// delayRetained transactions.
type DelayEstimator struct {
	est   map[uint32]time.Duration
	track map[TxnID]*delayTrack
	order []TxnID
}

type delayTrack struct {
	start   time.Time
	applied map[uint32]time.Duration
	best    map[uint32]time.Duration
}

const (
	delayEWMAWeight = 0.1
	delayRetained   = 1 << 16
	// MaxDelay bounds Δ (a mis-estimate must not hold a transaction for long).
	MaxDelay = time.Second
)

// Delays returns the delay of each partition's broadcast of a global (zeros until estimates
// exist).
func (d *DelayEstimator) Delays(partitions []uint32) []time.Duration {
	out := make([]time.Duration, len(partitions))
	if len(partitions) < 2 {
		return out
	}
	var top time.Duration
	for _, p := range partitions {
		top = max(top, d.est[p])
	}
	for i, p := range partitions {
		if e, ok := d.est[p]; ok {
			out[i] = min(MaxDelay, top-e)
		}
	}
	return out
}

// Submitted starts tracking a global broadcast at now with the delays applied.
func (d *DelayEstimator) Submitted(id TxnID, partitions []uint32, delays []time.Duration, now time.Time) {
	if d.track == nil {
		d.track, d.est = map[TxnID]*delayTrack{}, map[uint32]time.Duration{}
	}
	t := &delayTrack{start: now, applied: map[uint32]time.Duration{}, best: map[uint32]time.Duration{}}
	for i, p := range partitions {
		if i < len(delays) {
			t.applied[p] = delays[i]
		}
	}
	d.track[id] = t
	d.order = append(d.order, id)
	for len(d.order) > delayRetained {
		delete(d.track, d.order[0])
		d.order = d.order[1:]
	}
}

// Observe records that partition delivered id, learnt at now, oneWay after the fact.
func (d *DelayEstimator) Observe(id TxnID, partition uint32, now time.Time, oneWay time.Duration) {
	t := d.track[id]
	if t == nil {
		return
	}
	lat := now.Sub(t.start) - oneWay - t.applied[partition]
	if best, ok := t.best[partition]; !ok || lat < best {
		t.best[partition] = lat
	}
}

// Finish folds a transaction's delivery latencies into the estimates once its outcome is in.
func (d *DelayEstimator) Finish(id TxnID) {
	t := d.track[id]
	if t == nil {
		return
	}
	delete(d.track, id)
	for p, lat := range t.best {
		if e, ok := d.est[p]; ok {
			d.est[p] = e + time.Duration(delayEWMAWeight*float64(lat-e))
		} else {
			d.est[p] = lat
		}
	}
}
