package peer

import (
	"slices"

	"meridian/internal/topology"
)

// Helpers the leader-based peers (etcd, ZooKeeper) share: where their leader goes by default
// and the physical lower bound of a request through it.

// FirstRegion is the topology's first region that has a host: where a leader-based peer puts
// its leader by default, so that runs are comparable.
func FirstRegion(o *Options) string {
	for _, r := range o.Topology.Regions {
		for _, h := range o.Hosts {
			if h.Region == r {
				return r
			}
		}
	}
	return o.Hosts[0].Region
}

// Regions lists the hosts' regions, in host order (one entry per host).
func Regions(hosts []Host) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h.Region
	}
	return out
}

// QuorumMs is the time a leader in region leader waits for a majority of voters (its own
// vote counts): the ⌊v/2⌋-th smallest RTT from it to the other voters.
func QuorumMs(t *topology.Topology, voters []string, leader string) float64 {
	var rtts []float64
	skipped := false
	for _, v := range voters {
		if v == leader && !skipped {
			skipped = true // the leader itself
			continue
		}
		rtts = append(rtts, RTTMs(t, leader, v))
	}
	slices.Sort(rtts)
	need := len(voters) / 2
	if need == 0 || need > len(rtts) {
		return 0
	}
	return rtts[need-1]
}

// RTTMs is the round trip between two regions in ms (0 within one).
func RTTMs(t *topology.Topology, a, b string) float64 {
	if a == b {
		return 0
	}
	return float64(t.RTT(a, b).Microseconds()) / 1000
}
