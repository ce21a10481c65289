package canopus

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/wire/peerpb"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/topology"
)

// ID is canopus's engine ID on the wire (Envelope.engine).
const ID = 7

func init() {
	engine.Register(engine.Protocol{
		Name:         config.ProtocolCanopus,
		ID:           ID,
		New:          func(cfg engine.Config, store engine.Reader) engine.Engine { return New(cfg, store) },
		Check:        check,
		Linearizable: true,
		NoPointLevels: "canopus orders every write in a consensus cycle and serves every read after " +
			"the next cycle commits: there is one level, linearizable",
		LowerBoundMs: lowerBoundMs,
		Mutations:    Mutations,
		Metrics: func(reg prometheus.Registerer, e engine.Engine) {
			engine.RegisterCounters(reg, "meridian_canopus_", "Canopus engine (internal/replication/canopus)", counterNames, e.(*Engine).stats.byName())
		},
		Sim: engine.SimSupport{
			DescribeMessage: DescribeMessage,
			// Three nodes per region, all replicas: a super-leaf of three tolerates one
			// lost member (4.2.3). One partition: one instance, as in the thesis.
			NodesPerRegion:    3,
			ReplicasPerRegion: 3,
			Partitions:        1,
			// Elections within a simulated run of seconds, above the topology's round trips.
			KeyspaceOptions:      map[string]string{"heartbeat_interval": "50ms", "election_timeout": "400ms"},
			CheckLinearizability: true,
			Invariant:            sameCommittedCycles,
		},
	})
}

// check validates a request's canopus fields: no levels, no write modes.
func check(ks *placement.Keyspace, req *engine.Request, level string) error {
	if level != "" {
		return errs.New(errs.Invalid, "keyspace %q (canopus) takes no consistency level: every write is ordered by a consensus cycle and every read is linearizable", ks.Spec.Name)
	}
	if req.WriteMode != "" {
		return errs.New(errs.Invalid, "write_mode %q is not valid for keyspace %q: protocol canopus has no write modes", req.WriteMode, ks.Spec.Name)
	}
	switch req.Op {
	case engine.OpGet, engine.OpPut, engine.OpDelete, engine.OpScan:
		return nil
	}
	return errs.New(errs.Invalid, "keyspace %q (canopus) serves Get, Put, Delete and Scan, not %s", ks.Spec.Name, req.Op)
}

// lowerBoundMs: a write commits when its cycle has gathered every super-leaf's state, one
// round trip to the farthest super-leaf (4.6.2: "the latency is bounded by the largest round
// trip"; taller trees can beat it by relaying through a nearer emulator, docs/canopus.md). A
// read waits for the next cycle, the same round trip, unless write leases are on (the
// default): a key free of leases is read with no WAN message (4.5.2).
func lowerBoundMs(t *topology.Topology, q engine.BoundQuery) (float64, bool) {
	if q.Op == "read" && q.Options["write_leases"] != "false" {
		return 0, true
	}
	far := 0.0
	for _, r := range t.Regions {
		far = max(far, float64(t.RTT(q.Region, r).Microseconds())/1000)
	}
	return far, true
}

// sameCommittedCycles is the simulator's invariant: every two nodes committed the same sets in
// the same order in every cycle both still hold a digest of (Theorem 1).
func sameCommittedCycles(_ []time.Time, engines []engine.Engine, _ []bool) string {
	var all []*Engine
	for _, en := range engines {
		if ce, ok := en.(*Engine); ok {
			all = append(all, ce)
		} else {
			all = append(all, nil)
		}
	}
	for i, a := range all {
		if a == nil {
			continue
		}
		for _, k := range a.order {
			ia := a.insts[k]
			if ia.fatal != nil {
				return fmt.Sprintf("canopus: node %d stopped: %v", a.cfg.NodeID, ia.fatal)
			}
			if ia.node == nil {
				continue
			}
			c := ia.node.Committed()
			da, ok := ia.digests[c]
			if !ok || ia.checked == c {
				continue // compared already (the invariant runs after every event)
			}
			ia.checked = c
			for j, b := range all {
				if b == nil || j == i {
					continue
				}
				ib := b.insts[k]
				if ib == nil {
					continue
				}
				if db, ok := ib.digests[c]; ok && db != da {
					return fmt.Sprintf("canopus: nodes %d and %d committed different request sets in cycle %d of %s/%d", a.cfg.NodeID, b.cfg.NodeID, c, k.keyspace, k.partition)
				}
			}
		}
	}
	return ""
}

// DescribeMessage renders canopus's messages for traces.
func DescribeMessage(env *peerpb.Envelope, _ func(*peerpb.Version) string) (string, bool) {
	c := env.GetCanopus()
	if c == nil {
		return "", false
	}
	switch b := c.GetBody().(type) {
	case *peerpb.CanopusEnvelope_Raft:
		var m raftpb.Message
		if proto.Unmarshal(b.Raft.GetMessage(), &m) != nil {
			return "canopus raft (undecodable)", true
		}
		return fmt.Sprintf("canopus %d->%d group %d: %s term=%d index=%d logterm=%d commit=%d entries=%d reject=%v hint=%d", env.GetFrom(), env.GetTo(), b.Raft.GetOwner(), m.GetType(), m.GetTerm(), m.GetIndex(), m.GetLogTerm(), m.GetCommit(), len(m.GetEntries()), m.GetReject(), m.GetRejectHint()), true
	case *peerpb.CanopusEnvelope_Fetch:
		return fmt.Sprintf("canopus fetch cycle %d v%d.%d", b.Fetch.GetCycle(), b.Fetch.GetHeight(), b.Fetch.GetIndex()), true
	case *peerpb.CanopusEnvelope_State:
		return fmt.Sprintf("canopus state cycle %d v%d.%d sets=%d", b.State.GetCycle(), b.State.GetHeight(), b.State.GetIndex(), len(b.State.GetSets())), true
	case *peerpb.CanopusEnvelope_Rejoin:
		return fmt.Sprintf("canopus rejoin epoch %d", b.Rejoin.GetEpoch()), true
	}
	return "canopus (empty)", true
}
