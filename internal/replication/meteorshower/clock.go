package meteorshower

import (
	"time"

	"meridian/internal/wire/peerpb"
)

// clockService estimates this node's clock offset to each peer with ping/pong (NTP's
// method): offset = t2 - (t1 + t3)/2 with error at most RTT/2. It keeps, per peer, the sample
// with the smallest RTT among the recent ones — the least uncertain — and reports the largest
// |offset| over peers. It can only detect clocks that are clearly off: over a WAN the error
// bound RTT/2 is far above ε, so the ε assumption itself must come from NTP or PTP; what this
// service guarantees is that a node whose estimate exceeds ε stops trusting it, visibly.
type clockService struct {
	peers   []uint32
	last    time.Time
	samples map[uint32][]clockSample // ring of recent samples
	// netRTT is the configured network RTT to each peer. The part of a sample's RTT beyond
	// it is time spent in queues and event loops on either side, which can fall on one leg
	// only: it bounds the error it adds to the estimate, so it is subtracted before the
	// estimate is compared with ε (otherwise scheduling noise of a few ms on a busy machine
	// would read as clock offset).
	netRTT map[uint32]time.Duration
}

type clockSample struct {
	offset, rtt time.Duration
}

const clockSamples = 16

func (c *clockService) init(peers []uint32, netRTT map[uint32]time.Duration) {
	c.peers = peers
	c.samples = map[uint32][]clockSample{}
	c.netRTT = netRTT
}

func (c *clockService) tick(now time.Time, self uint32, every time.Duration) []*peerpb.Envelope {
	if now.Sub(c.last) < every {
		return nil
	}
	c.last = now
	envs := make([]*peerpb.Envelope, 0, len(c.peers))
	for _, p := range c.peers {
		envs = append(envs, &peerpb.Envelope{From: self, To: p, Msg: &peerpb.Envelope_ClockPing{ClockPing: &peerpb.ClockPing{T1UnixNanos: now.UnixNano()}}})
	}
	return envs
}

func (c *clockService) pong(now time.Time, from uint32, p *peerpb.ClockPong) {
	t1, t2, t3 := p.T1UnixNanos, p.T2UnixNanos, now.UnixNano()
	if t3 < t1 || t1 == 0 {
		return // our own clock went back, or garbage
	}
	s := clockSample{offset: time.Duration(t2 - (t1+t3)/2), rtt: time.Duration(t3 - t1)}
	ring := append(c.samples[from], s)
	if len(ring) > clockSamples {
		ring = ring[len(ring)-clockSamples:]
	}
	c.samples[from] = ring
}

// maxOffset is the largest |offset| over peers, each peer's estimate taken from its
// lowest-RTT recent sample.
func (c *clockService) maxOffset() time.Duration {
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
