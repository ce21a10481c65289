package bench

import (
	"time"

	"meridian/internal/config"
	"meridian/internal/topology"
)

// MeteorShower's read bounds (meteorshower-paper.txt IV-A): with θ lower a read waits for
// statuses sent after it arrived from enough peers — one one-way delay to the replica whose
// status completes the level; with θ upper (or any θ at least that delay) it needs no WAN
// message at all. Writes are quorum writes.
func init() {
	protocolBounds[config.ProtocolMeteorShower] = func(t *topology.Topology, cfg Config, region, op string) (float64, bool) {
		if op != "read" {
			return 0, false
		}
		count := len(t.Regions)/2 + 1
		if config.Level(cfg.ReadLevel) == config.LevelAll {
			count = len(t.Regions)
		}
		oneWayMs := NthRTTMs(t, region, count) / 2
		switch cfg.Options["theta"] {
		case "upper":
			return 0, true
		case "", "lower":
			return oneWayMs, true
		default:
			d, err := time.ParseDuration(cfg.Options["theta"])
			if err != nil {
				return oneWayMs, true
			}
			return max(0, oneWayMs-float64(d.Microseconds())/1000), true
		}
	}
}
