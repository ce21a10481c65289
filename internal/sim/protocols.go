package sim

import (
	"fmt"
	"sort"
	"time"

	"meridian/internal/config"
	"meridian/internal/meteorshower"
	"meridian/internal/quorum"
	"meridian/internal/storage"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// Core is what the simulator drives: a sans-IO protocol state machine with the quorum
// Ready contract (writes durable before messages and replies leave).
type Core interface {
	Propose(now time.Time, req quorum.Request)
	Step(now time.Time, env *peerpb.Envelope)
	Tick(now time.Time)
	HasReady() bool
	Ready() quorum.Ready
}

// NodeSetup is what a protocol needs to build one node's core.
type NodeSetup struct {
	Self     config.Node
	Cluster  *config.Cluster
	Topology *topology.Topology
	Store    *storage.Engine
	Mutation string
	// AntiEntropyInterval is shortened in simulation so convergence happens within the
	// quiescence window.
	AntiEntropyInterval time.Duration
}

// Protocol registers a protocol with the simulator.
type Protocol struct {
	Name string
	// Mutations are the protocol's broken variants (name → description).
	Mutations map[string]string
	// NewCore builds a node's core.
	NewCore func(s NodeSetup) (Core, error)
	// RunJob performs background work a Ready asked for (anti-entropy scans).
	RunJob func(store *storage.Engine, self uint32, job quorum.Job) ([]*peerpb.Envelope, error)
	// Levels adjusts the levels for a mutation (e.g. "one-one").
	Levels func(mutation string, read, write config.Level) (config.Level, config.Level)
}

// RuntimeMutations break the simulated runtime rather than a protocol; they apply to every
// protocol.
var RuntimeMutations = map[string]string{
	"ack-before-sync": "release a Ready's messages and replies before its writes are synced",
}

// mutationSetup adjusts a run so a mutation can show: replication masks a missing fsync
// unless every copy is lost, so ack-before-sync runs with one replica.
var mutationSetup = map[string]func(*Options){
	"ack-before-sync": func(o *Options) { o.ReplicaRegions = 1 },
	// Only clocks beyond ε make the missing fallback matter. Sessions are off for the
	// clock and θ mutations: a session's version floor also protects reads from statuses
	// that are too old, and would hide the broken bound.
	//
	// θ protects a process that reads, through one coordinator, what it wrote through
	// another (Lemma 1); a process that stays with its coordinator finds its writes in the
	// coordinator's own replica whatever θ is. So these two run with roaming clients.
	"clock-no-fallback": func(o *Options) {
		o.Faults = map[string]bool{FaultClockBeyond: true}
		o.NoSessions, o.Roam = true, true
	},
	"theta-above-upper": func(o *Options) {
		o.Faults = map[string]bool{}
		o.NoSessions, o.Roam = true, true
	},
	// Gaps come from partitions and loss; crashes restart the sequence instead.
	"gap-ignored": func(o *Options) { o.Faults = map[string]bool{FaultPartition: true, FaultLoss: true} },
}

func init() {
	q := protocols["quorum"]
	ms := q
	ms.Name = "meteorshower"
	ms.Mutations = meteorshower.Mutations
	ms.Levels = func(_ string, read, write config.Level) (config.Level, config.Level) { return read, write }
	protocols["meteorshower"] = ms
}

var protocols = map[string]Protocol{
	"quorum": {
		Name:      "quorum",
		Mutations: quorum.Mutations,
		NewCore: func(s NodeSetup) (Core, error) {
			core := quorum.NewCore(quorum.Config{
				NodeID: s.Self.ID, Nodes: s.Cluster.Nodes, Topology: s.Topology, Limits: s.Cluster.Limits,
				AntiEntropyInterval: s.AntiEntropyInterval, Mutation: s.Mutation, MaxClockOffset: s.Cluster.Clock.MaxOffset,
			}, s.Store)
			return core, nil
		},
		RunJob: func(store *storage.Engine, self uint32, job quorum.Job) ([]*peerpb.Envelope, error) {
			return quorum.RunJob(store, self, job)
		},
		Levels: func(mutation string, read, write config.Level) (config.Level, config.Level) {
			if mutation == "one-one" {
				return config.LevelOne, config.LevelOne
			}
			return read, write
		},
	},
}

// LookupProtocol returns a registered protocol.
func LookupProtocol(name string) (Protocol, error) {
	p, ok := protocols[name]
	if !ok {
		return Protocol{}, fmt.Errorf("sim: unknown protocol %q (known: %v)", name, ProtocolNames())
	}
	return p, nil
}

// ProtocolNames lists the registered protocols.
func ProtocolNames() []string {
	var out []string
	for n := range protocols {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// MutationNames lists a protocol's mutations and the runtime's, sorted.
func MutationNames(p Protocol) []string {
	var out []string
	for n := range p.Mutations {
		out = append(out, n)
	}
	for n := range RuntimeMutations {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// MutationDescription describes a mutation of p.
func MutationDescription(p Protocol, name string) (string, bool) {
	if d, ok := p.Mutations[name]; ok {
		return d, true
	}
	d, ok := RuntimeMutations[name]
	return d, ok
}
