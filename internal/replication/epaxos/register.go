package epaxos

import (
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// ID is epaxos's engine ID on the wire (Envelope.engine).
const ID = 8

func init() {
	engine.Register(engine.Protocol{
		Name:         config.ProtocolEPaxos,
		ID:           ID,
		New:          func(cfg engine.Config, store engine.Reader) engine.Engine { return New(cfg, store) },
		Check:        check,
		Linearizable: true,
		NoPointLevels: "epaxos orders every command, reads included, through consensus: " +
			"there is one level, linearizable",
		LowerBoundMs: lowerBoundMs,
		Mutations:    Mutations,
		Metrics: func(reg prometheus.Registerer, e engine.Engine) {
			engine.RegisterCounters(reg, "meridian_epaxos_", "EPaxos engine (internal/replication/epaxos)", counterNames, e.(*Engine).stats.byName())
		},
		Sim: engine.SimSupport{
			DescribeMessage: DescribeMessage,
			// Two replicas per region, six in all: a majority is four, the fast quorum four
			// (any value recovery must find shows at two replicas of a majority).
			NodesPerRegion:    2,
			ReplicasPerRegion: 2,
			Partitions:        1,
			// Recovery and reports within a simulated run of seconds.
			KeyspaceOptions:      map[string]string{"recovery_timeout": "300ms", "report_interval": "200ms"},
			CheckLinearizability: true,
			Invariant:            sameExecutedInstances,
			// A missing fsync shows when every copy is lost: one replica (the runtime's own
			// hint keeps one region, whose two replicas each hold every instance).
			MutationHints: map[string]engine.SimHints{"ack-before-sync": {ReplicaRegions: 1, NodesPerRegion: 1}},
		},
	})
}

// check validates a request's epaxos fields: no levels, no write modes.
func check(ks *placement.Keyspace, req *engine.Request, level string) error {
	if level != "" {
		return errs.New(errs.Invalid, "keyspace %q (epaxos) takes no consistency level: every command, reads included, is ordered by consensus", ks.Spec.Name)
	}
	if req.WriteMode != "" {
		return errs.New(errs.Invalid, "write_mode %q is not valid for keyspace %q: protocol epaxos has no write modes", req.WriteMode, ks.Spec.Name)
	}
	switch req.Op {
	case engine.OpGet, engine.OpPut, engine.OpDelete, engine.OpScan:
		return nil
	}
	return errs.New(errs.Invalid, "keyspace %q (epaxos) serves Get, Put, Delete and Scan, not %s", ks.Spec.Name, req.Op)
}

// lowerBoundMs: a command (a read too) commits on the fast path once a fast quorum (the
// leader included) has the pre-accept: the round trip to the (FQ−1)-th nearest other replica,
// with q.ReplicasPerRegion replicas in every region and the leader in the client's region.
// The engine's batching adds up to batch_interval.
func lowerBoundMs(t *topology.Topology, q engine.BoundQuery) (float64, bool) {
	per := max(1, q.ReplicasPerRegion)
	var rtts []float64
	for _, r := range t.Regions {
		for i := range per {
			if r == q.Region && i == 0 {
				continue // the leader itself
			}
			rtts = append(rtts, float64(t.RTT(q.Region, r).Microseconds())/1000)
		}
	}
	if len(rtts) == 0 {
		return 0, true
	}
	slices.Sort(rtts)
	n := len(rtts) + 1
	majority := n/2 + 1
	fast := max(majority, 2*(n-majority)) // as core.NewNode
	return rtts[fast-2], true
}

// sameExecutedInstances is the simulator's invariant: every instance two nodes executed has
// the same commands, sequence number and dependencies at both (agreement: one value per
// instance).
func sameExecutedInstances(_ []time.Time, engines []engine.Engine, _ []bool) string {
	var all []*Engine
	for _, en := range engines {
		ee, _ := en.(*Engine)
		all = append(all, ee)
	}
	for i, a := range all {
		if a == nil {
			continue
		}
		for _, k := range a.order {
			sa := a.spaces[k]
			if sa.fatal != nil {
				return fmt.Sprintf("epaxos: node %d stopped: %v", a.cfg.NodeID, sa.fatal)
			}
			for _, id := range sa.order[sa.checked:] {
				da := sa.digests[id]
				for j, b := range all {
					if b == nil || j == i {
						continue
					}
					if sb := b.spaces[k]; sb != nil {
						if db, ok := sb.digests[id]; ok && db != da {
							return fmt.Sprintf("epaxos: nodes %d and %d executed different commands in instance %s of %s/%d", a.cfg.NodeID, b.cfg.NodeID, id, k.keyspace, k.partition)
						}
					}
				}
			}
			sa.checked = len(sa.order)
		}
	}
	return ""
}

// DescribeMessage renders epaxos's messages for traces.
func DescribeMessage(env *peerpb.Envelope, _ func(*peerpb.Version) string) (string, bool) {
	m := env.GetEpaxos()
	if m == nil {
		return "", false
	}
	b := func(p *peerpb.EPaxosBallot) string { return fmt.Sprintf("%d.%d", p.GetNumber(), p.GetReplica()) }
	attrs := func(a *peerpb.EPaxosAttrs) string {
		return fmt.Sprintf("cmds=%d seq=%d deps=%v", len(a.GetCommands()), a.GetSeq(), a.GetDeps())
	}
	switch x := m.GetBody().(type) {
	case *peerpb.EPaxosEnvelope_PreAccept:
		return fmt.Sprintf("epaxos %d->%d preaccept %d.%d b%s %s", env.GetFrom(), env.GetTo(), x.PreAccept.GetReplica(), x.PreAccept.GetSlot(), b(x.PreAccept.GetBallot()), attrs(x.PreAccept.GetAttrs())), true
	case *peerpb.EPaxosEnvelope_PreAcceptReply:
		r := x.PreAcceptReply
		return fmt.Sprintf("epaxos %d->%d preaccept-reply %d.%d b%s ok=%v seq=%d deps=%v", env.GetFrom(), env.GetTo(), r.GetReplica(), r.GetSlot(), b(r.GetBallot()), r.GetOk(), r.GetSeq(), r.GetDeps()), true
	case *peerpb.EPaxosEnvelope_Accept:
		return fmt.Sprintf("epaxos %d->%d accept %d.%d b%s %s", env.GetFrom(), env.GetTo(), x.Accept.GetReplica(), x.Accept.GetSlot(), b(x.Accept.GetBallot()), attrs(x.Accept.GetAttrs())), true
	case *peerpb.EPaxosEnvelope_AcceptReply:
		r := x.AcceptReply
		return fmt.Sprintf("epaxos %d->%d accept-reply %d.%d b%s ok=%v", env.GetFrom(), env.GetTo(), r.GetReplica(), r.GetSlot(), b(r.GetBallot()), r.GetOk()), true
	case *peerpb.EPaxosEnvelope_Commit:
		return fmt.Sprintf("epaxos %d->%d commit %d.%d %s", env.GetFrom(), env.GetTo(), x.Commit.GetReplica(), x.Commit.GetSlot(), attrs(x.Commit.GetAttrs())), true
	case *peerpb.EPaxosEnvelope_Prepare:
		return fmt.Sprintf("epaxos %d->%d prepare %d.%d b%s", env.GetFrom(), env.GetTo(), x.Prepare.GetReplica(), x.Prepare.GetSlot(), b(x.Prepare.GetBallot())), true
	case *peerpb.EPaxosEnvelope_PrepareReply:
		r := x.PrepareReply
		return fmt.Sprintf("epaxos %d->%d prepare-reply %d.%d b%s ok=%v status=%d vb%s %s", env.GetFrom(), env.GetTo(), r.GetReplica(), r.GetSlot(), b(r.GetBallot()), r.GetOk(), r.GetStatus(), b(r.GetVballot()), attrs(r.GetAttrs())), true
	case *peerpb.EPaxosEnvelope_Executed:
		return fmt.Sprintf("epaxos %d->%d executed %v", env.GetFrom(), env.GetTo(), x.Executed.GetExecuted()), true
	}
	return "epaxos (empty)", true
}
