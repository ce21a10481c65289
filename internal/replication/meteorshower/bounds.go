package meteorshower

import (
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/topology"
)

// lowerBoundMs is MeteorShower's read bound (meteorshower-paper.txt IV-A): with θ lower a
// read waits for statuses sent after it arrived from enough peers — one one-way delay to the
// replica whose status completes the level; with θ upper (or any θ at least that delay) it
// needs no WAN message at all. Writes are quorum writes (ok false: the quorum bound).
func lowerBoundMs(t *topology.Topology, q engine.BoundQuery) (float64, bool) {
	if q.Op != "read" {
		return 0, false
	}
	count := len(t.Regions)/2 + 1
	if q.ReadLevel == config.LevelAll {
		count = len(t.Regions)
	}
	oneWayMs := t.NthRTTMs(q.Region, count) / 2
	switch q.Options["theta"] {
	case "upper":
		return 0, true
	case "", "lower":
		return oneWayMs, true
	default:
		d, err := time.ParseDuration(q.Options["theta"])
		if err != nil {
			return oneWayMs, true
		}
		return max(0, oneWayMs-float64(d.Microseconds())/1000), true
	}
}
