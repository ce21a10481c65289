// Package quorum is the Cassandra-style majority-quorum protocol: the baseline every later
// protocol is compared with (MeteorShower paper, section I and IV-2 "The Baseline"; DESIGN.md
// section 5). Its engine is the quorum family's shared coordinator (package coord) with
// nothing plugged in; this package registers it and names its deliberately broken variants.
package quorum

import (
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
		Mutations: coord.WithMoveMutations(coord.WithMoveMutations(Mutations, coord.MoveMutations), coord.LargeReadMutations),
		Sim:       engine.SimSupport{MutationLevels: OneOneLevels, MutationHints: coord.WithMoveMutations(coord.MoveMutationHints, coord.LargeReadMutationHints)},
	})
}
