package bench

import (
	"strings"

	"meridian/internal/config"
	"meridian/internal/topology"
)

// GlobLease's physical lower bounds (liu-thesis 4.1.3): a read under a lease, or at the
// master, needs no wide-area message (0); a write travels to the key's master and waits for a
// majority of the replication group there (RTT to the master + the master's majority RTT).
// With masters in several regions (home_ranges) the bound is the cheapest of them.
func init() {
	protocolBounds[config.ProtocolGlobLease] = func(t *topology.Topology, cfg Config, region, op string) (float64, bool) {
		if op == "read" {
			return 0, true
		}
		homes := []string{cfg.Options["home_region"]}
		if homes[0] == "" || !t.HasRegion(homes[0]) {
			homes[0] = t.Regions[0]
		}
		for _, r := range strings.Split(cfg.Options["home_ranges"], ",") {
			if _, h, ok := strings.Cut(r, "="); ok && t.HasRegion(h) {
				homes = append(homes, h)
			}
		}
		best := -1.0
		for _, home := range homes {
			toMaster := 0.0
			if home != region {
				toMaster = float64(t.RTT(region, home).Microseconds()) / 1000
			}
			if b := toMaster + NthRTTMs(t, home, len(t.Regions)/2+1); best < 0 || b < best {
				best = b
			}
		}
		return best, true
	}
}
