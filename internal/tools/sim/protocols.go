package sim

import (
	"fmt"
	"sort"
	"time"

	"meridian/internal/config"
	"meridian/internal/hlc"
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
	// Prepare, when set, adjusts a run's options for the protocol before defaults apply
	// (only fields the caller left unset).
	Prepare func(o *Options)
	// Invariant, when set, is checked after every event that can change it; a non-empty
	// string is a violation.
	Invariant func(now []time.Time, cores []Core, up []bool) string
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
	gl := q
	gl.Name = "globlease"
	gl.Mutations = quorum.GLMutations
	gl.Levels = ms0
	gl.Prepare = prepareGlobLease
	gl.Invariant = globleaseInvariant
	protocols["globlease"] = gl
	ms := q
	ms.Name = "meteorshower"
	ms.Mutations = meteorshower.Mutations
	ms.Levels = ms0
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

func ms0(_ string, read, write config.Level) (config.Level, config.Level) { return read, write }

// prepareGlobLease scales GlobLease's timings to a simulated run of seconds: leases of a few
// hundred milliseconds so they expire and renew many times, a master lease short enough that
// failovers happen within the run, hot keys at the simulator's rates, and two nodes per
// region so every region has an affiliated node for hot keys.
func prepareGlobLease(o *Options) {
	defaults := map[string]string{
		"lease": "400ms", "master_lease": "300ms", "election_timeout": "600ms",
		"hot_key_rate": "1", "secondary_lease": "150ms",
		"migrate_hold": "500ms", "migrate_cooldown": "2s",
	}
	if o.KeyspaceOptions == nil {
		o.KeyspaceOptions = map[string]string{}
	}
	for k, v := range defaults {
		if _, ok := o.KeyspaceOptions[k]; !ok {
			o.KeyspaceOptions[k] = v
		}
	}
	if o.NodesPerRegion == 0 {
		o.NodesPerRegion = 2
	}
}

// globleaseInvariant checks the one-master invariant and the lease invariant.
func globleaseInvariant(now []time.Time, cores []Core, up []bool) string {
	if msg := oneMasterInvariant(now, cores, up); msg != "" {
		return msg
	}
	return leaseInvariant(now, cores, up)
}

// leaseInvariant is the timing rule checked directly (liu-thesis 4.1.3): no node may serve a
// version under a valid lease (by its own clock) once a newer write of the key has committed
// at a master. A committed write must have updated every valid lease holder or outwaited it.
func leaseInvariant(now []time.Time, cores []Core, up []bool) string {
	committed := map[string]hlc.Version{}
	for i, c := range cores {
		qc, ok := c.(*quorum.Core)
		if !ok || !up[i] {
			continue
		}
		for id, v := range qc.GLCommitted() {
			if committed[id].Less(v) {
				committed[id] = v
			}
		}
	}
	for i, c := range cores {
		qc, ok := c.(*quorum.Core)
		if !ok || !up[i] {
			continue
		}
		for _, l := range qc.GLServingLeases(now[i]) {
			if cv, ok := committed[l.KeyID]; ok && l.Version.Less(cv) {
				return fmt.Sprintf("node %d serves version %s of key %q under a valid lease, but version %s has committed", l.Node, l.Version, keyName(l.KeyID), cv)
			}
		}
	}
	return ""
}

// keyName shows the user key of a key ID (keyspace, 0, partition, key).
func keyName(id string) string {
	for i := 0; i < len(id); i++ {
		if id[i] == 0 && i+5 <= len(id) {
			return id[i+5:]
		}
	}
	return id
}

// oneMasterInvariant: at no step may two nodes act as master of the same key (liu-thesis
// 4.1.3: "either no master or only one correct master of a key exists"). Each node's claim is
// evaluated at its own clock.
func oneMasterInvariant(now []time.Time, cores []Core, up []bool) string {
	byPart := map[string][]quorum.GLClaim{}
	for i, c := range cores {
		if !up[i] {
			continue
		}
		qc, ok := c.(*quorum.Core)
		if !ok {
			continue
		}
		for _, cl := range qc.GLMasterClaims(now[i]) {
			id := fmt.Sprintf("%s/%d", cl.Keyspace, cl.Partition)
			byPart[id] = append(byPart[id], cl)
		}
	}
	parts := make([]string, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Strings(parts)
	for _, p := range parts {
		cls := byPart[p]
		for i := range cls {
			for j := i + 1; j < len(cls); j++ {
				a, b := cls[i], cls[j]
				for _, h := range a.Homes {
					if slicesContains(b.Homes, h) {
						return fmt.Sprintf("partition %s: nodes %d and %d both act as master of the keys homed at node %d", p, a.Node, b.Node, h)
					}
				}
				for _, k := range append(append([]string{}, a.Keys...), append(b.Keys, append(a.Excluded, b.Excluded...)...)...) {
					if a.Claims(k) && b.Claims(k) {
						return fmt.Sprintf("partition %s: nodes %d and %d both act as master of key %q", p, a.Node, b.Node, k)
					}
				}
			}
		}
	}
	return ""
}

func slicesContains(xs []uint32, x uint32) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
