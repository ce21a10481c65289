package meteorshower

import (
	"time"

	"meridian/internal/hlc"
	"meridian/internal/wire/peerpb"
)

// clockService pings every peer on a schedule and feeds the pongs to an hlc.OffsetEstimator
// (MeteorShower II-A assumes clocks within ε; the read path falls back to quorum reads when
// the estimate says they are not).
type clockService struct {
	peers []uint32
	last  time.Time
	est   *hlc.OffsetEstimator
}

func (c *clockService) init(peers []uint32, netRTT map[uint32]time.Duration) {
	c.peers = peers
	c.est = hlc.NewOffsetEstimator(peers, netRTT)
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
	c.est.Sample(from, p.T1UnixNanos, p.T2UnixNanos, now.UnixNano())
}

// maxOffset is the estimator's largest |offset| over peers.
func (c *clockService) maxOffset() time.Duration { return c.est.MaxOffset() }
