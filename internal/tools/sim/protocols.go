package sim

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	_ "meridian/internal/replication/all" // the simulator runs every registered protocol
	"meridian/internal/topology"
)

// Protocol is a registered protocol (package engine's registry): the simulator builds each
// node's engines through it and takes its mutations, simulation defaults and step invariant
// from it.
type Protocol = engine.Protocol

// RuntimeMutations break the simulated runtime rather than a protocol; they apply to every
// protocol.
var RuntimeMutations = map[string]string{
	"ack-before-sync":          "release a Ready's messages and replies before its writes are synced",
	"merge-different-replicas": "merge adjacent partitions whose replicas differ (the merged range keeps the left one's replicas, which do not hold the right one's data)",
}

// repartitionMutations are runtime mutations of splits and merges: they apply only to
// protocols that repartition (config.ProtocolSpec.Repartition).
var repartitionMutations = map[string]bool{"merge-different-replicas": true}

// repartitions reports whether keyspaces of protocol p split and merge.
func repartitions(p Protocol) bool {
	spec, ok := config.Protocol(p.Name)
	return ok && spec.Repartition
}

// runtimeMutationHints adjust a run so a runtime mutation can show: replication masks a
// missing fsync unless every copy is lost, so ack-before-sync runs with one replica.
var runtimeMutationHints = map[string]engine.SimHints{
	"ack-before-sync": {ReplicaRegions: 1},
	// Two nodes per region and one replica per region: neighbouring partitions are on
	// different nodes.
	"merge-different-replicas": {NodesPerRegion: 2, RepartitionEvery: 100 * time.Millisecond},
}

// LookupProtocol returns a registered protocol.
func LookupProtocol(name string) (Protocol, error) {
	p, ok := engine.Lookup(name)
	if !ok {
		return Protocol{}, fmt.Errorf("sim: unknown protocol %q (known: %v)", name, ProtocolNames())
	}
	if p.NotKeyValue != "" {
		return Protocol{}, fmt.Errorf("sim: protocol %s: %s", name, p.NotKeyValue)
	}
	return p, nil
}

// ProtocolNames lists the registered protocols.
func ProtocolNames() []string { return engine.Names() }

// MutationNames lists a protocol's mutations and the runtime's, sorted.
func MutationNames(p Protocol) []string {
	var out []string
	for n := range p.Mutations {
		out = append(out, n)
	}
	for n := range RuntimeMutations {
		if repartitionMutations[n] && !repartitions(p) {
			continue
		}
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

// prepare applies the protocol's simulation defaults to the options the caller left unset.
func prepare(p Protocol, o *Options) {
	o.KeyspaceOptions = maps.Clone(o.KeyspaceOptions)
	if o.KeyspaceOptions == nil {
		o.KeyspaceOptions = map[string]string{}
	}
	for k, v := range p.Sim.KeyspaceOptions {
		if _, ok := o.KeyspaceOptions[k]; !ok {
			o.KeyspaceOptions[k] = v
		}
	}
	if o.NodesPerRegion == 0 {
		o.NodesPerRegion = p.Sim.NodesPerRegion
	}
	if o.ReplicasPerRegion == 0 {
		// The protocol's default, within the nodes the caller asked for (canopus: every node
		// of a region is a replica).
		o.ReplicasPerRegion = p.Sim.ReplicasPerRegion
		if o.NodesPerRegion > 0 && o.ReplicasPerRegion > o.NodesPerRegion {
			o.ReplicasPerRegion = o.NodesPerRegion
		}
	}
	if o.Partitions == 0 {
		o.Partitions = p.Sim.Partitions
	}
	if o.ReadLevel == "" && o.WriteLevel == "" {
		o.ReadLevel, o.WriteLevel = p.ReadLevel, p.WriteLevel
	}
	if p.Sim.CheckLinearizability {
		o.Linearizability = true
	}
}

// levels returns the clients' levels under mutation.
func levels(p Protocol, mutation string, read, write config.Level) (config.Level, config.Level) {
	if p.Sim.MutationLevels != nil {
		return p.Sim.MutationLevels(mutation, read, write)
	}
	return read, write
}

// applyMutationHints adjusts o so that mutation m of p can show (engine.SimHints).
func applyMutationHints(p Protocol, m string, o *Options) error {
	h, ok := p.Sim.MutationHints[m]
	if !ok {
		h, ok = runtimeMutationHints[m]
	}
	if !ok {
		return nil
	}
	if h.Faults != nil {
		o.Faults = map[string]bool{}
		for _, f := range h.Faults {
			if !slices.Contains(knownFaults, f) {
				return fmt.Errorf("sim: protocol %s: mutation %s names unknown fault %q (known: %v)", p.Name, m, f, knownFaults)
			}
			o.Faults[f] = true
		}
	}
	if h.Linearizability {
		o.Linearizability = true
	}
	if h.NoSessions {
		o.NoSessions = true
	}
	if h.FreshReads {
		o.FreshReads = true
	}
	if h.Roam {
		o.Roam = true
	}
	if h.LoseRegion {
		o.LoseRegion = true
	}
	if h.ReplicaRegions > 0 {
		o.ReplicaRegions = h.ReplicaRegions
	}
	if h.Topology != "" {
		t, err := topology.Builtin(h.Topology)
		if err != nil {
			return fmt.Errorf("sim: protocol %s: mutation %s: %w", p.Name, m, err)
		}
		o.Topology = t
	}
	setIfPositive(&o.ReadFraction, h.ReadFraction)
	setIfPositive(&o.ScanFraction, h.ScanFraction)
	setIfPositive(&o.ClientsPerRegion, h.ClientsPerRegion)
	setIfPositive(&o.ClockStepEvery, h.ClockStepEvery)
	setIfPositive(&o.PartitionEvery, h.PartitionEvery)
	setIfPositive(&o.RequestTimeout, h.RequestTimeout)
	setIfPositive(&o.NodesPerRegion, h.NodesPerRegion)
	if o.NodesPerRegion > 0 && o.ReplicasPerRegion > o.NodesPerRegion {
		o.ReplicasPerRegion = o.NodesPerRegion // the protocol's default, within the hint's nodes
	}
	setIfPositive(&o.RepartitionEvery, h.RepartitionEvery)
	setIfPositive(&o.MoveEvery, h.MoveEvery)
	setIfPositive(&o.MoveCheckAfter, h.MoveCheckAfter)
	setIfPositive(&o.DelaySpikeProb, h.DelaySpikeProb)
	setIfPositive(&o.Quiesce, h.Quiesce)
	setIfPositive(&o.MaxClockOffset, h.MaxClockOffset)
	for k, v := range h.KeyspaceOptions {
		o.KeyspaceOptions[k] = v
	}
	return nil
}

// setIfPositive sets *dst to v when a hint gives v (a zero hint leaves the option alone).
func setIfPositive[T int | float64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}
