// Package quorum is the Cassandra-style majority-quorum protocol: the baseline every later
// protocol is compared with (MeteorShower paper, section I and IV-2 "The Baseline"; DESIGN.md
// section 5). Its engine is the quorum family's shared coordinator (package coord) with
// nothing plugged in; this package registers it and names its deliberately broken variants.
package quorum

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/replication/coord"
)

// ID is the quorum protocol's engine ID on the wire (Envelope.engine).
const ID = 1

// Mutations are the named broken variants of this protocol, for `meridian sim --mutate`. A
// checker that never fails proves nothing: each of these must be caught within a bounded
// number of simulation seeds (DESIGN.md section 6).
var Mutations = map[string]string{
	"one-one":         "reads and writes at ONE/ONE, so R + W <= N (the simulator sets the levels)",
	"first-reply":     "a read returns the first reply it gets instead of the newest, and repairs nothing",
	"no-anti-entropy": "anti-entropy never runs, so a replica that missed writes stays behind (the convergence checker must see it)",
}

// NewEngine returns node cfg.NodeID's quorum engine.
func NewEngine(cfg engine.Config, store engine.Reader) *coord.Core {
	return coord.New(coord.Config{Config: cfg, Protocol: config.ProtocolQuorum}, store, nil)
}

// OneOneLevels is the "one-one" mutation's client levels: R + W <= N.
func OneOneLevels(mutation string, read, write config.Level) (config.Level, config.Level) {
	if mutation == "one-one" {
		return config.LevelOne, config.LevelOne
	}
	return read, write
}

func init() {
	engine.Register(engine.Protocol{
		Name:      config.ProtocolQuorum,
		ID:        ID,
		New:       func(cfg engine.Config, store engine.Reader) engine.Engine { return NewEngine(cfg, store) },
		Mutations: coord.WithMoveMutations(coord.WithMoveMutations(coord.WithMoveMutations(Mutations, coord.MoveMutations), coord.LargeReadMutations), coord.ScanMutations),
		Metrics: func(reg prometheus.Registerer, e engine.Engine) {
			registerLargeReadMetrics(reg, e.(*coord.Core).LargeReadCounters())
		},
		Sim: engine.SimSupport{MutationLevels: OneOneLevels, MutationHints: coord.WithMoveMutations(coord.WithMoveMutations(coord.MoveMutationHints, coord.LargeReadMutationHints), coord.ScanMutationHints)},
	})
}

// registerLargeReadMetrics exports the large reads' counters (docs/mayflower.md).
func registerLargeReadMetrics(reg prometheus.Registerer, s *coord.LargeReadStats) {
	load := func(v *atomic.Int64) func() float64 { return func() float64 { return float64(v.Load()) } }
	for label, v := range map[string]*atomic.Int64{"nearest": &s.Nearest, "snitch": &s.Snitch, "hedged": &s.Hedged,
		"mayflower": &s.Mayflower, "mayflower-unconfigured": &s.MayflowerUnconfigured, "local": &s.Local} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meridian_large_reads_total",
			Help: "Large reads (values over large_read_bytes) by how their value was fetched: the keyspace's read_selector, " +
				"mayflower-unconfigured (mayflower without network.node_bandwidth: from the nearest replica), local (this node held the version).",
			ConstLabels: prometheus.Labels{"selector": label}}, load(v)))
	}
	for _, c := range []struct {
		name, help string
		v          *atomic.Int64
	}{
		{"meridian_large_reads_split_total", "Large reads fetched from two replicas at once (Mayflower, thesis 3.2.3).", &s.Split},
		{"meridian_large_read_bytes_total", "Chunk bytes large reads received.", &s.BytesFetched},
		{"meridian_large_read_wasted_bytes_total", "Chunk bytes received twice (hedged reads) or after their read ended.", &s.BytesWasted},
		{"meridian_large_read_restarts_total", "Large reads started over because no live replica held the version they were fetching.", &s.Restarts},
		{"meridian_large_read_sources_failed_total", "Replicas dropped from a large read's fetch (missing version, or down).", &s.SourcesFailed},
		{"meridian_split_scans_total", "Partitions of scans read from two replicas at once, one paging forward and one backward (Mayflower, docs/mayflower.md).", &s.ScanSplits},
		{"meridian_split_scan_fallbacks_total", "Halves of split scans given up because their replica was slow or down; the other replica read on alone.", &s.ScanSplitFallbacks},
		{"meridian_scan_streams_total", "Streaming scans this node served as a replica: a cursor sending a window of pages ahead (scan_window_pages).", &s.ScanStreams},
		{"meridian_scan_cursors_refused_total", "Requests for a streaming scan this node answered with one page because every cursor was in use.", &s.ScanCursorsRefused},
		{"meridian_scan_cursors_expired_total", "Streaming scan cursors dropped after their coordinator fell silent.", &s.ScanCursorsExpired},
		{"meridian_scan_stream_restarts_total", "Streaming scans this node gave up as a coordinator (the replica was slow, or a page did not continue the read) and read on from another round.", &s.ScanStreamRestarts},
		{"meridian_scan_read_repairs_total", "Records scans wrote to replicas that answered with an older version of a key, or without it (blocking read repair).", &s.ScanRepairs},
		{"meridian_split_scan_unused_records_total", "Records the halves of split scans received that were not part of the answer (read by both halves where they met, or by a backward half the limit made useless).", &s.ScanSplitUnused},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, load(c.v)))
	}
	for dir, v := range map[string]*atomic.Int64{"forward": &s.ScanPagesForward, "backward": &s.ScanPagesBackward} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meridian_split_scan_pages_total",
			Help:        "Pages the halves of split scans received, by direction (forward from the start of the partition's range, backward from its end).",
			ConstLabels: prometheus.Labels{"direction": dir}}, load(v)))
	}
}
