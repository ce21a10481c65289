package raft

import (
	"maps"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/sdur"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Read-only transactions of sdur keyspaces (geo-sdur III-A: "read-only transactions execute
// against a globally-consistent snapshot and commit without certification"; the snapshots
// "are built asynchronously by servers"). They read at a snapshot vector, one snapshot counter
// per partition, and never abort. Two properties make every such read serializable:
//
//   - each vector holds every global transaction in all its partitions or in none: the vector
//     is then a prefix of a serialization order (a chain of dependencies between partitions
//     passes through globals, which are in or out everywhere);
//   - the vectors form one chain (each componentwise at or above the one before); without it
//     two read-only transactions could see two independent locals of two partitions in
//     opposite orders (a long fork: the simulator's checker found exactly that, G2, with
//     vectors chosen per transaction; internal/tools/txnsim/ro.go).
//
// The snapshot sequencer is the leader of the keyspace's first partition (the one holding the
// empty key). Every txnSeqInterval it asks a replica of each partition (its own, else the
// nearest) for its snapshot counter and the globals it completed above the last vector's
// component (phase 1), asks every partition where it completed those globals (phase 2),
// lowers each component below every global not yet in all its partitions (never below the
// last vector: the globals there are in all of them already), and appends the new vector to
// its partition's log. Once applied, the vector is the chain's next (a new sequencer, a new
// leader of that partition, continues from the last vector in the log) and the leader
// publishes it to every node. A read-only read takes the newest vector its node has and reads
// each partition at its component (a replica behind it waits): everything in its own region.

const (
	// txnSeqInterval is how often the sequencer starts a round (a vector is about one round,
	// a WAN round trip, plus this old).
	txnSeqInterval = 20 * time.Millisecond
	// txnSeqRoundTimeout gives up a round whose replies do not come (a lost message, a
	// replica down): the next round asks again.
	txnSeqRoundTimeout = 5 * time.Second
	// txnVectorProposeTimeout: a vector proposed and not applied in this time (lost at a
	// leader change) is given up; the next round proposes a new one.
	txnVectorProposeTimeout = 2 * time.Second
	// maxRetainedGlobals bounds a replica's record of the globals it completed (a partition
	// whose record no longer reaches the last vector answers "not ok": the round fails
	// rather than vouch for what it forgot).
	maxRetainedGlobals = 1 << 14
)

// completedGlobal is where a global completed at a partition.
type completedGlobal struct {
	index uint64
	parts []uint32
}

// txnSequencer is a keyspace's snapshot sequencer on the leader of its first partition.
type txnSequencer struct {
	round      uint64
	inFlight   bool
	phase2     bool
	started    time.Time
	lastRound  time.Time
	parts      []uint32
	servers    map[uint32]uint32
	sc         map[uint32]uint64
	cands      map[uint32][]*peerpb.TxnCompletedGlobal
	status     map[uint32]map[sdur.TxnID]uint64
	replied    map[uint32]bool
	failed     bool
	last       *peerpb.TxnVector
	proposed   uint64 // seq of the vector proposed and not yet applied (0: none)
	proposedAt time.Time
}

// sequencerPartition is the partition whose leader sequences the keyspace's vectors.
func sequencerPartition(ks *placement.Keyspace) uint32 { return ks.Lookup([]byte{}).ID }

// vectorComponent returns v's component for partition p (0: none).
func vectorComponent(v *peerpb.TxnVector, p uint32) uint64 {
	for _, c := range v.GetComponents() {
		if c.GetPartition() == p {
			return c.GetCounter()
		}
	}
	return 0
}

// noteTxnVector keeps the newest vector this node knows of a keyspace.
func (e *Engine) noteTxnVector(keyspace string, v *peerpb.TxnVector) {
	if cur := e.txnVectors[keyspace]; cur == nil || cur.GetSeq() < v.GetSeq() {
		e.txnVectors[keyspace] = v
	}
}

// runSequencers drives the sequencers of the sdur keyspaces whose first partition this node
// leads.
func (e *Engine) runSequencers(now time.Time) {
	for _, g := range e.txnGroups() {
		m, ok := g.txn.(*sdurCore)
		if !ok || g.removed {
			continue
		}
		ks, ok := e.pmap.Keyspace(g.key.keyspace)
		if !ok || sequencerPartition(ks) != g.key.partition {
			continue
		}
		q := e.seqs[g.key.keyspace]
		if g.state != etcdraft.StateLeader || !g.servable() {
			delete(e.seqs, g.key.keyspace)
			continue
		}
		if q == nil {
			q = &txnSequencer{}
			e.seqs[g.key.keyspace] = q
		}
		e.sequencerTick(now, g, m, ks, q)
	}
}

func (e *Engine) sequencerTick(now time.Time, g *group, m *sdurCore, ks *placement.Keyspace, q *txnSequencer) {
	if q.inFlight && now.Sub(q.started) < txnSeqRoundTimeout {
		return
	}
	q.inFlight = false
	if q.proposed != 0 {
		if m.vector.GetSeq() >= q.proposed || now.Sub(q.proposedAt) >= txnVectorProposeTimeout {
			q.proposed = 0
		} else {
			return // the last vector is not in the log yet: the next builds on it
		}
	}
	if now.Sub(q.lastRound) < txnSeqInterval || g.applied < g.rn.BasicStatus().HardState.GetCommit() {
		return // every committed vector applied first: the chain continues from the last
	}
	q.round++
	q.inFlight, q.phase2, q.failed, q.started, q.lastRound = true, false, false, now, now
	q.last = m.vector
	if q.last == nil {
		q.last = &peerpb.TxnVector{}
	}
	q.parts = q.parts[:0]
	for _, p := range ks.Partitions {
		q.parts = append(q.parts, p.ID)
	}
	slices.Sort(q.parts)
	q.servers, q.sc, q.cands, q.status, q.replied = map[uint32]uint32{}, map[uint32]uint64{}, map[uint32][]*peerpb.TxnCompletedGlobal{}, map[uint32]map[sdur.TxnID]uint64{}, map[uint32]bool{}
	for _, pid := range q.parts {
		p, _ := ks.Partition(pid)
		if lg := e.groups[groupKey{ks.Spec.Name, pid}]; lg != nil && lg.servable() && lg.txn != nil {
			q.servers[pid] = e.cfg.NodeID
		} else {
			q.servers[pid] = e.nearest(p)
		}
	}
	e.seqAsk(g, q, func(pid uint32) *peerpb.TxnSeqQuery {
		return &peerpb.TxnSeqQuery{Round: q.round, From: vectorComponent(q.last, pid)}
	})
}

// seqAsk sends the round's query to the chosen replica of every partition.
func (e *Engine) seqAsk(g *group, q *txnSequencer, query func(pid uint32) *peerpb.TxnSeqQuery) {
	for _, pid := range q.parts {
		to := q.servers[pid]
		if to == 0 {
			q.failed = true
			continue
		}
		e.sendTxn(to, &peerpb.TxnMessage{Keyspace: g.key.keyspace, Partition: pid, FromPartition: g.key.partition, Body: &peerpb.TxnMessage_SeqQuery{SeqQuery: query(pid)}})
	}
	if q.failed {
		q.inFlight = false
	}
}

// seqAnswer answers a sequencer's query at this node's replica of a partition.
func (e *Engine) seqAnswer(from uint32, g *group, msg *peerpb.TxnMessage) {
	m, ok := g.txn.(*sdurCore)
	if !ok {
		return
	}
	qy := msg.GetSeqQuery()
	rep := &peerpb.TxnSeqReply{Round: qy.GetRound(), Phase2: qy.GetPhase2(), Counter: m.rep.SnapshotCounter(), Ok: true}
	if qy.GetPhase2() {
		for _, id := range qy.GetStatus() {
			tid := sdur.TxnID{Node: id.GetNode(), Seq: id.GetSeq()}
			rep.Globals = append(rep.Globals, &peerpb.TxnCompletedGlobal{Txn: id, Index: m.completed[tid].index})
		}
	} else {
		from := qy.GetFrom()
		if rep.Counter < from {
			rep.Ok = false // behind the last vector: the next round asks again
		}
		// The globals completed in (from, counter], newest first.
		for i := len(m.completedOrder) - 1; i >= 0 && rep.Ok; i-- {
			id := m.completedOrder[i]
			cg := m.completed[id]
			if cg.index <= from {
				break
			}
			rep.Globals = append(rep.Globals, &peerpb.TxnCompletedGlobal{Txn: &peerpb.SdurTxnId{Node: id.Node, Seq: id.Seq}, Index: cg.index, Partitions: cg.parts})
			if i == 0 && len(m.completedOrder) >= maxRetainedGlobals {
				rep.Ok = false // older ones forgotten: cannot vouch for the range
			}
		}
	}
	e.sendTxn(from, &peerpb.TxnMessage{Keyspace: g.key.keyspace, Partition: msg.GetFromPartition(), FromPartition: g.key.partition, Body: &peerpb.TxnMessage_SeqReply{SeqReply: rep}})
}

// seqReply takes a replica's answer at the sequencer.
func (e *Engine) seqReply(now time.Time, from uint32, g *group, msg *peerpb.TxnMessage) {
	q := e.seqs[g.key.keyspace]
	r := msg.GetSeqReply()
	pid := msg.GetFromPartition()
	if q == nil || !q.inFlight || r.GetRound() != q.round || r.GetPhase2() != q.phase2 || q.servers[pid] != from || q.replied[pid] {
		return // late, duplicated, or not from the replica asked
	}
	q.replied[pid] = true
	if !r.GetOk() {
		q.failed = true
	}
	if !q.phase2 {
		q.sc[pid] = r.GetCounter()
		q.cands[pid] = r.GetGlobals()
	} else {
		st := map[sdur.TxnID]uint64{}
		for _, c := range r.GetGlobals() {
			st[sdur.TxnID{Node: c.GetTxn().GetNode(), Seq: c.GetTxn().GetSeq()}] = c.GetIndex()
		}
		q.status[pid] = st
	}
	if len(q.replied) < len(q.parts) {
		return
	}
	if q.failed {
		q.inFlight = false
		return
	}
	if !q.phase2 {
		// Phase 2: where did every partition complete the candidates?
		q.phase2, q.replied = true, map[uint32]bool{}
		var ids []*peerpb.SdurTxnId
		seen := map[sdur.TxnID]bool{}
		for _, pid := range q.parts {
			for _, c := range q.cands[pid] {
				id := sdur.TxnID{Node: c.GetTxn().GetNode(), Seq: c.GetTxn().GetSeq()}
				if !seen[id] {
					seen[id] = true
					ids = append(ids, c.GetTxn())
				}
			}
		}
		if len(ids) == 0 {
			e.publishVector(now, g, q)
			return
		}
		e.seqAsk(g, q, func(uint32) *peerpb.TxnSeqQuery {
			return &peerpb.TxnSeqQuery{Round: q.round, Phase2: true, Status: ids}
		})
		return
	}
	e.publishVector(now, g, q)
}

// publishVector computes the round's vector and appends it to the sequencer partition's log.
func (e *Engine) publishVector(now time.Time, g *group, q *txnSequencer) {
	q.inFlight = false
	vec := map[uint32]uint64{}
	for _, pid := range q.parts {
		vec[pid] = max(q.sc[pid], vectorComponent(q.last, pid))
	}
	// Lower below every global in one component and not (yet) in another; bounded (each
	// pass lowers a component or ends).
	for range 64 * len(q.parts) {
		changed := false
		for _, pid := range q.parts {
			for _, c := range q.cands[pid] {
				if c.GetIndex() > vec[pid] {
					continue
				}
				id := sdur.TxnID{Node: c.GetTxn().GetNode(), Seq: c.GetTxn().GetSeq()}
				for _, other := range c.GetPartitions() {
					if other == pid {
						continue
					}
					if _, ours := vec[other]; !ours {
						continue
					}
					if idx := q.status[other][id]; idx == 0 || idx > vec[other] {
						vec[pid] = c.GetIndex() - 1
						changed = true
						break
					}
				}
			}
		}
		if !changed {
			break
		}
	}
	same := true
	for _, pid := range q.parts {
		last := vectorComponent(q.last, pid)
		if vec[pid] < last {
			// Cannot happen (a global at or below the last vector is in all its partitions);
			// refuse to publish rather than break the chain.
			e.stats.TxnVectorRefused.Add(1)
			return
		}
		same = same && vec[pid] == last
	}
	if same && q.last.GetSeq() > 0 {
		return
	}
	v := &peerpb.TxnVector{Seq: q.last.GetSeq() + 1}
	for _, pid := range slices.Sorted(maps.Keys(vec)) {
		v.Components = append(v.Components, &peerpb.TxnSnapshotRef{Partition: pid, Counter: vec[pid]})
	}
	data, err := proto.Marshal(&peerpb.RaftCommand{Origin: e.cfg.NodeID, Version: wire.VersionToPB(e.clock.Now(now)), TxnVector: v})
	if err != nil {
		return
	}
	e.touch(g)
	if g.rn.Propose(data) == nil {
		q.proposed, q.proposedAt = v.GetSeq(), now
	}
	e.markDirty(g)
}

// publishApplied sends a vector the leader's log applied to every node of the cluster.
func (e *Engine) publishApplied(g *group, v *peerpb.TxnVector) {
	e.noteTxnVector(g.key.keyspace, v)
	e.stats.TxnVectors.Add(1)
	for _, n := range e.cfg.Nodes {
		if n.ID != e.cfg.NodeID {
			e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: n.ID, Msg: &peerpb.Envelope_Txn{Txn: &peerpb.TxnMessage{
				Keyspace: g.key.keyspace, Partition: g.key.partition, FromPartition: g.key.partition, Body: &peerpb.TxnMessage_Vector{Vector: v}}}})
		}
	}
}

// readOnlySnapshots fills a read-only read's snapshots with the newest vector this node
// has (sdur keyspaces; 2pc reads the newest versions and validates at commit).
func (e *Engine) readOnlySnapshots(ks *placement.Keyspace, req *engine.Request) error {
	if req.Txn == nil || !req.Txn.ReadOnly || len(req.Txn.Snapshots) > 0 || config.TxnModeOf(ks.Spec.Options) != config.TxnSDUR {
		return nil
	}
	v := e.txnVectors[ks.Spec.Name]
	if v == nil {
		return errs.New(errs.Unavailable, "keyspace %q has no snapshot vector on this node yet (its sequencer publishes one every %v once its first partition has a leader); retry", ks.Spec.Name, txnSeqInterval)
	}
	t := *req.Txn
	t.Snapshots = nil
	for _, c := range v.GetComponents() {
		t.Snapshots = append(t.Snapshots, engine.TxnSnapshot{Partition: c.GetPartition(), Counter: c.GetCounter()})
	}
	req.Txn = &t
	return nil
}
