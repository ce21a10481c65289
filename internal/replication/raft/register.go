package raft

import (
	"maps"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/topology"
)

// ID is Raft's engine ID on the wire (Envelope.engine).
const ID = 4

// Mutations are Raft's deliberately broken variants; each must be caught by the simulator
// (meridian sim --protocol raft --mutations).
var Mutations = map[string]string{
	"stale-read-as-linearizable": "linearizable reads are served from the replica's applied state without ReadIndex or a lease (a partitioned ex-leader returns stale values)",
	"apply-before-commit":        "a replica applies entries as soon as they are in its log, before a majority has them (commits on a minority: its writes become visible, then are lost)",
	"lease-never-expires":        "a node that once held a leader lease serves lease reads for good, without checking that the lease is still valid (an ex-leader cut off by a partition keeps serving after another was elected)",
	"lease-ignores-epsilon":      "the leader lease lasts a full election timeout less a tick, ignoring the clock bound ε (and the offset estimate): clocks that step within ε let a new leader commit while the old one still serves",
}

// RepartitionMutations are Raft's broken splits and merges (repartition.go); the raft
// protocol registers them with Mutations (the metadata group, which never splits, does not).
var RepartitionMutations = map[string]string{
	"split-founds-fresh-group": "a split does not go through the group's log: each replica narrows the partition when it installs the new map, and the new partition's group is founded afresh (index 1, empty at-most-once origins) instead of from the left group's state at a split entry",
	"merge-without-freeze":     "a merge does not freeze the right-hand group nor wait for its replicas: the left group's leader merges as soon as the map asks, and each replica absorbs whatever its right-hand replica holds (writes the right-hand group still takes, or a replica had not applied, are lost)",
}

// allMutations are the raft protocol's mutations: Mutations and RepartitionMutations.
func allMutations() map[string]string {
	out := maps.Clone(Mutations)
	maps.Copy(out, RepartitionMutations)
	return out
}

// UnitMutations are broken variants too narrow for random faults to find in a bounded number
// of seeds; each has a scripted test that catches it (engine_test.go).
var UnitMutations = map[string]string{
	"restart-votes-at-once": "a restarted node votes at once instead of waiting out the leases it may have promised before it stopped",
	"no-quiesce":            "idle groups never quiesce (not a safety bug: the idle-cost test catches it)",
}

func init() {
	engine.Register(engine.Protocol{
		Name:         config.ProtocolRaft,
		ID:           ID,
		New:          func(cfg engine.Config, store engine.Reader) engine.Engine { return NewEngine(cfg, store) },
		Check:        check,
		Linearizable: true,
		ReadLevel:    config.LevelLinearizable,
		// The applied state of the local replica.
		ReplicaReadLevel: config.LevelStale,
		LowerBoundMs:     lowerBoundMs,
		Mutations:        allMutations(),
		Metrics: func(reg prometheus.Registerer, e engine.Engine) {
			RegisterMetrics(reg, config.ProtocolRaft, e.(*Engine).Counters())
		},
		// The lease rests on the clock bound ε; the engine measures offsets and falls back
		// to ReadIndex beyond it, visibly.
		ClockFallbackPath: PathReadIndex,
		Sim: engine.SimSupport{
			DescribeMessage: DescribeMessage,
			MutationHints:   MutationHints(),
			// Elections within a simulated run of seconds, above the topology's RTTs.
			// A short retained log, so that replicas behind after a crash or a partition are
			// caught up by snapshots as well as by the log.
			KeyspaceOptions:      map[string]string{"heartbeat_interval": "100ms", "election_timeout": "500ms", "log_retain": "10"},
			CheckLinearizability: true,
		},
	})
}

// check validates a request's Raft fields: gets and scans take LINEARIZABLE or STALE (or
// the keyspace's read_level); writes take no level and no write mode; a key's leader can be
// moved to a region (OpMoveMaster).
func check(ks *placement.Keyspace, req *engine.Request, level string) error {
	if req.WriteMode != "" {
		return errs.New(errs.Invalid, "write_mode %q is not valid for keyspace %q: protocol raft has no write modes", req.WriteMode, ks.Spec.Name)
	}
	switch req.Op {
	case engine.OpMoveMaster:
		return nil
	case engine.OpGet, engine.OpScan:
		return CheckReadLevel(ks, req, level)
	}
	if level != "" {
		return errs.New(errs.Invalid, "keyspace %q uses protocol raft, whose writes take no consistency level (every write commits at a majority)", ks.Spec.Name)
	}
	return nil
}

// CheckReadLevel sets the level of a get or scan on a keyspace of the Raft engine (the
// metadata group's too): LINEARIZABLE or STALE, "" for the keyspace's read_level.
func CheckReadLevel(ks *placement.Keyspace, req *engine.Request, level string) error {
	if level == "" {
		return nil
	}
	switch lv := config.Level(strings.ToUpper(level)); lv {
	case config.LevelLinearizable, config.LevelStale:
		req.Level = lv
		return nil
	}
	return errs.New(errs.Invalid, "consistency %q is not valid for keyspace %q (protocol %s): use LINEARIZABLE or STALE", level, ks.Spec.Name, ks.Spec.Protocol)
}

// lowerBoundMs is Raft's physical lower bound with the leader in the leader region
// (leader_region, else the keyspace's first region: here the topology's first). A write
// travels to the leader and waits for the leader's nearest majority. A linearizable read at
// the leader's region is served under the leader's lease: no WAN round trip. Elsewhere it
// needs the leader's read index, which the leader gives at once under its lease: the RTT to
// the leader. STALE reads need nothing.
func lowerBoundMs(t *topology.Topology, q engine.BoundQuery) (float64, bool) {
	if q.Op == "read" && q.ReadLevel == config.LevelStale {
		return 0, true
	}
	leader := q.Options["leader_region"]
	if !t.HasRegion(leader) {
		leader = t.Regions[0]
	}
	toLeader := 0.0
	if leader != q.Region {
		toLeader = float64(t.RTT(q.Region, leader).Microseconds()) / 1000
	}
	if q.Op == "read" {
		return toLeader, true
	}
	return toLeader + t.NthRTTMs(leader, len(t.Regions)/2+1), true
}

// MutationHints adjust the simulated runs of Raft's mutations so that each can show (the
// metadata group, built on the same engine, uses them too).
func MutationHints() map[string]engine.SimHints {
	return map[string]engine.SimHints{
		// Splits and merges every 100 ms on average (the raft protocol's; the metadata
		// group has no such mutations).
		"split-founds-fresh-group": {RepartitionEvery: 100 * time.Millisecond},
		"merge-without-freeze":     {RepartitionEvery: 100 * time.Millisecond},
		// Ignoring ε shows when clocks move by as much as the lease leaves out: on a
		// LAN, with ε as long as the election timeout and clocks stepped often within
		// it, a partition's majority elects a leader and commits while the old
		// leader's ε-less lease still runs, and many readers catch it serving. With
		// ε that large a correct lease is never valid: reads go by ReadIndex. A new
		// partition every 300 ms and 100 ms client deadlines give many such windows a run
		// and free the clients stuck behind the cut-off leader to read where the stale
		// answer shows (with one or two partitions and 1 s deadlines, 200 seeds did not).
		"lease-ignores-epsilon": {Topology: "lan-3", MaxClockOffset: 500 * time.Millisecond, ClockStepEvery: 100 * time.Millisecond,
			PartitionEvery: 300 * time.Millisecond, RequestTimeout: 100 * time.Millisecond,
			Faults: []string{"partition", "clock"}, ReadFraction: 0.9, ClientsPerRegion: 6,
			KeyspaceOptions: map[string]string{"election_timeout": "500ms", "heartbeat_interval": "100ms"}},
	}
}
