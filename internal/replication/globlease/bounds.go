package globlease

import (
	"strings"

	"meridian/internal/engine"
	"meridian/internal/topology"
)

// lowerBoundMs is GlobLease's physical lower bound (liu-thesis 4.1.3): a read under a lease,
// or at the master, needs no wide-area message (0); a write travels to the key's master and
// waits for a majority of the replication group there (RTT to the master + the master's
// majority RTT). With masters in several regions (home_ranges) the bound is the cheapest of
// them.
func lowerBoundMs(t *topology.Topology, q engine.BoundQuery) (float64, bool) {
	if q.Op == "read" {
		return 0, true
	}
	homes := []string{q.Options["home_region"]}
	if homes[0] == "" || !t.HasRegion(homes[0]) {
		homes[0] = t.Regions[0]
	}
	for _, r := range strings.Split(q.Options["home_ranges"], ",") {
		if _, h, ok := strings.Cut(r, "="); ok && t.HasRegion(h) {
			homes = append(homes, h)
		}
	}
	best := -1.0
	for _, home := range homes {
		toMaster := 0.0
		if home != q.Region {
			toMaster = float64(t.RTT(q.Region, home).Microseconds()) / 1000
		}
		if b := toMaster + t.NthRTTMs(home, len(t.Regions)/2+1); best < 0 || b < best {
			best = b
		}
	}
	return best, true
}
