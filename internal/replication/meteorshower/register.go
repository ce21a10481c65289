package meteorshower

import (
	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/engine"
)

// ID is MeteorShower's engine ID on the wire (Envelope.engine).
const ID = 2

func init() {
	engine.Register(engine.Protocol{
		Name: config.ProtocolMeteorShower,
		ID:   ID,
		New:  func(cfg engine.Config, store engine.Reader) engine.Engine { return NewEngine(cfg, store) },
		// MeteorShower measures its peers' clock offsets and falls back to quorum reads when
		// one exceeds ε (docs/meteorshower.md): clocks beyond ε must show on this path.
		ClockFallbackPath: PathFallback,
		ReplicaReadLevel:  config.LevelLocalOne,
		LowerBoundMs:      lowerBoundMs,
		Metrics:           func(reg prometheus.Registerer, e engine.Engine) { registerMetrics(reg, e.(*Engine).Counters()) },
		Mutations:         Mutations,
		Sim: engine.SimSupport{MutationHints: (map[string]engine.SimHints{
			// Only clocks beyond ε make the missing fallback matter. Sessions are off for the
			// clock and θ mutations: a session's version floor also protects reads from
			// statuses that are too old, and would hide the broken bound.
			//
			// θ protects a process that reads, through one coordinator, what it wrote
			// through another (Lemma 1); a process that stays with its coordinator finds its
			// writes in the coordinator's own replica whatever θ is. So these two run with
			// roaming clients.
			"clock-no-fallback": {Faults: []string{"clock-beyond"}, NoSessions: true, Roam: true},
			"theta-above-upper": {Faults: []string{}, NoSessions: true, Roam: true},
			// Gaps come from partitions and loss; crashes restart the sequence instead.
			"gap-ignored": {Faults: []string{"partition", "loss"}},
		})},
	})
}

// CounterSnapshot returns the counters by name (engine.Counted).
func (c *Engine) CounterSnapshot() map[string]int64 {
	ms := &c.msCounters
	return map[string]int64{
		"reads_local": ms.ReadsLocal.Load(), "reads_waited": ms.ReadsWaited.Load(), "reads_fallback": ms.ReadsFallback.Load(),
		"statuses_sent": ms.StatusesSent.Load(), "statuses_received": ms.StatusesReceived.Load(),
		"status_bytes_sent": ms.StatusBytesSent.Load(), "status_gaps": ms.Gaps.Load(),
	}
}

// registerMetrics exports MeteorShower's counters and its clock service's measurements.
func registerMetrics(reg prometheus.Registerer, ms *MSCounters) {
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	counter("meridian_meteorshower_reads_local_total", "MeteorShower reads served by the local replica at once.", func() float64 { return float64(ms.ReadsLocal.Load()) })
	counter("meridian_meteorshower_reads_waited_total", "MeteorShower reads served locally after waiting for statuses or data.", func() float64 { return float64(ms.ReadsWaited.Load()) })
	counter("meridian_meteorshower_reads_fallback_total", "MeteorShower reads served by a quorum instead (clock offset beyond ε, or statuses missing too long).", func() float64 { return float64(ms.ReadsFallback.Load()) })
	counter("meridian_meteorshower_read_wait_seconds_total", "Total time MeteorShower reads waited before being served locally.", func() float64 { return float64(ms.ReadWaitNanosTotal.Load()) / 1e9 })
	counter("meridian_meteorshower_statuses_sent_total", "Status messages sent.", func() float64 { return float64(ms.StatusesSent.Load()) })
	counter("meridian_meteorshower_statuses_received_total", "Status messages received.", func() float64 { return float64(ms.StatusesReceived.Load()) })
	counter("meridian_meteorshower_status_bytes_sent_total", "Approximate bytes of status messages sent.", func() float64 { return float64(ms.StatusBytesSent.Load()) })
	counter("meridian_meteorshower_status_gaps_total", "Gaps in a peer's status sequence longer than the redundancy, repaired with a full status.", func() float64 { return float64(ms.Gaps.Load()) })
	gauge("meridian_clock_measured_offset_seconds", "Largest clock offset to a peer measured by the clock service.", func() float64 { return float64(ms.MeasuredOffsetNanos.Load()) / 1e9 })
	gauge("meridian_clock_unsafe", "1 when the measured clock offset exceeds ε and clock-dependent reads fall back.", func() float64 {
		if ms.ClockUnsafe.Load() {
			return 1
		}
		return 0
	})
}
