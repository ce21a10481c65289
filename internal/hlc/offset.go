package hlc

import "time"

// OffsetEstimator estimates this node's clock offset to each peer from ping/pong samples
// (NTP's method): offset = t2 - (t1 + t3)/2, with error at most RTT/2. It keeps, per peer,
// the recent sample with the smallest RTT (the least uncertain) and reports the largest
// |offset| over peers. It can only detect clocks that are clearly off: over a WAN the error
// bound RTT/2 is far above ε, so the ε assumption itself must come from NTP or PTP; what it
// guarantees is that a node whose estimate exceeds ε stops trusting it, visibly (DESIGN.md
// section 4, "Clock"). MeteorShower's reads and Raft's leader leases fall back on it.
//
// Not safe for concurrent use. Memory is bounded: offsetSamples per peer.
type OffsetEstimator struct {
	peers   []uint32
	samples map[uint32][]offsetSample // ring of recent samples
	// netRTT is the configured network RTT to each peer. The part of a sample's RTT beyond
	// it is time spent in queues and event loops on either side, which can fall on one leg
	// only: it bounds the error it adds to the estimate, so it is subtracted before the
	// estimate is compared with ε (otherwise scheduling noise of a few ms on a busy machine
	// would read as clock offset).
	netRTT map[uint32]time.Duration
}

type offsetSample struct {
	offset, rtt time.Duration
}

// offsetSamples is how many recent samples per peer the estimate chooses from.
const offsetSamples = 16

// NewOffsetEstimator returns an estimator over peers with their network RTTs (nil: unknown,
// taken as zero).
func NewOffsetEstimator(peers []uint32, netRTT map[uint32]time.Duration) *OffsetEstimator {
	return &OffsetEstimator{peers: peers, samples: map[uint32][]offsetSample{}, netRTT: netRTT}
}

// AddPeer starts estimating the offset to peer (a node that came to share data with this
// one), with its network RTT.
func (c *OffsetEstimator) AddPeer(peer uint32, netRTT time.Duration) {
	for _, p := range c.peers {
		if p == peer {
			return
		}
	}
	c.peers = append(c.peers, peer)
	if c.netRTT == nil {
		c.netRTT = map[uint32]time.Duration{}
	}
	c.netRTT[peer] = netRTT
}

// Sample records one exchange with peer from: t1 is when this node sent the ping (its
// clock), t2 when the peer answered (the peer's clock), t3 when the answer arrived (this
// node's clock), all in Unix nanoseconds. Garbage (a zero t1, or this clock gone back) is
// ignored.
func (c *OffsetEstimator) Sample(from uint32, t1, t2, t3 int64) {
	if t3 < t1 || t1 == 0 {
		return
	}
	s := offsetSample{offset: time.Duration(t2 - (t1+t3)/2), rtt: time.Duration(t3 - t1)}
	ring := append(c.samples[from], s)
	if len(ring) > offsetSamples {
		ring = ring[len(ring)-offsetSamples:]
	}
	c.samples[from] = ring
}

// MaxOffset is the largest |offset| over peers, each peer's estimate taken from its
// lowest-RTT recent sample, less the half of that sample's RTT in excess of the network's.
func (c *OffsetEstimator) MaxOffset() time.Duration {
	var worst time.Duration
	for _, p := range c.peers {
		ring := c.samples[p]
		if len(ring) == 0 {
			continue
		}
		best := ring[0]
		for _, s := range ring[1:] {
			if s.rtt < best.rtt {
				best = s
			}
		}
		off := best.offset
		if off < 0 {
			off = -off
		}
		if excess := best.rtt - c.netRTT[p]; excess > 0 {
			off = max(0, off-excess/2)
		}
		worst = max(worst, off)
	}
	return worst
}
