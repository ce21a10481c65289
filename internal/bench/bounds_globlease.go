package bench

import (
	"meridian/internal/config"
	"meridian/internal/topology"
)

// GlobLease's physical lower bounds (liu-thesis 4.1.3): a read under a lease, or at the
// master, needs no wide-area message (0); a write travels to the key's master and waits for a
// majority of the replication group there (RTT to the master + the master's majority RTT).
func init() {
	protocolBounds[config.ProtocolGlobLease] = func(t *topology.Topology, cfg Config, region, op string) (float64, bool) {
		if op == "read" {
			return 0, true
		}
		home := cfg.Options["home_region"]
		if home == "" || !t.HasRegion(home) {
			home = t.Regions[0]
		}
		toMaster := 0.0
		if home != region {
			toMaster = float64(t.RTT(region, home).Microseconds()) / 1000
		}
		return toMaster + nthRTTMs(t, home, len(t.Regions)/2+1), true
	}
}
