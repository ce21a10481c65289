package raft

import (
	"strings"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/topology"
)

// ID is Raft's engine ID on the wire (Envelope.engine).
const ID = 4

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
		Mutations:        Mutations,
		Sim: engine.SimSupport{
			// Elections within a simulated run of seconds, above the topology's RTTs.
			KeyspaceOptions:      map[string]string{"heartbeat_interval": "100ms", "election_timeout": "500ms"},
			CheckLinearizability: true,
		},
	})
}

// check validates a request's Raft fields: gets take LINEARIZABLE or STALE (or the
// keyspace's read_level); writes take no level; there are no write modes, masters or scans.
func check(ks *placement.Keyspace, req *engine.Request, level string) error {
	if req.WriteMode != "" {
		return errs.New(errs.Invalid, "write_mode %q is not valid for keyspace %q: protocol raft has no write modes", req.WriteMode, ks.Spec.Name)
	}
	switch req.Op {
	case engine.OpMoveMaster:
		return errs.New(errs.Invalid, "keyspace %q uses protocol raft, which has no masters to move (its leader is per partition)", ks.Spec.Name)
	case engine.OpScan:
		return errs.New(errs.Invalid, "keyspace %q uses protocol raft, which serves get, put and delete; scans of raft keyspaces are not implemented yet", ks.Spec.Name)
	case engine.OpGet:
		if level == "" {
			return nil
		}
		switch lv := config.Level(strings.ToUpper(level)); lv {
		case config.LevelLinearizable, config.LevelStale:
			req.Level = lv
			return nil
		}
		return errs.New(errs.Invalid, "consistency %q is not valid for keyspace %q (protocol raft): use LINEARIZABLE or STALE", level, ks.Spec.Name)
	}
	if level != "" {
		return errs.New(errs.Invalid, "keyspace %q uses protocol raft, whose writes take no consistency level (every write commits at a majority)", ks.Spec.Name)
	}
	return nil
}

// lowerBoundMs is Raft's physical lower bound with the leader in the leader region
// (leader_region, else the keyspace's first region: here the topology's first). A write
// travels to the leader and waits for the leader's nearest majority; a linearizable read
// needs the leader's confirmation from a majority (ReadIndex): the RTT to the leader plus the
// leader's majority RTT (just the latter at the leader). STALE reads need nothing.
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
	return toLeader + t.NthRTTMs(leader, len(t.Regions)/2+1), true
}
