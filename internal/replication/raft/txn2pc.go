package raft

import (
	"fmt"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/sdur"
	"meridian/internal/storage"
	"meridian/internal/twopc"
	"meridian/internal/wire/peerpb"
)

// twopcCore is a transactional group's state machine in txn_mode 2pc: a twopc.Replica fed by
// the log (internal/twopc: Spanner's layering without TrueTime — every participant a Raft
// group, optimistic reads validated at prepare with no-wait locks, the decision in the
// coordinator partition's log, presumed abort).
type twopcCore struct {
	rep      *twopc.Replica
	part     uint32
	limits   sdur.WireLimits
	opts     twopc.Options
	now      func() time.Time
	contains func(key []byte) bool
	leader   bool
}

func newTwopcCore(e *Engine, g *group) (*twopcCore, error) {
	opts := twopc.Options{Retention: txnRetention, DecisionTimeout: max(2*time.Second, 3*g.opts.ElectionTimeout)}
	if _, ok := twopc.Mutations[e.cfg.Mutation]; ok {
		opts.Mutation = e.cfg.Mutation
	}
	rep, err := twopc.NewReplica(g.key.partition, opts)
	if err != nil {
		return nil, err
	}
	return &twopcCore{rep: rep, part: g.key.partition, limits: e.txnLimits(), opts: opts,
		now: func() time.Time { return e.lastNow }, contains: g.contains}, nil
}

func (m *twopcCore) mode() string              { return config.Txn2PC }
func (m *twopcCore) snapshot() ([]byte, error) { return m.rep.Snapshot() }
func (m *twopcCore) counter() uint64           { return m.rep.Version() }
func (m *twopcCore) floor() uint64             { return 0 }
func (m *twopcCore) snapshots() bool           { return false }
func (m *twopcCore) replayFrom(index uint64)   { m.rep.SetReplay(index) }
func (m *twopcCore) busy() bool                { return m.rep.PendingCount() > 0 }
func (m *twopcCore) setLeader(leader bool) {
	m.leader = leader
	m.rep.SetLeader(leader)
}

func (m *twopcCore) restore(core []byte, now time.Time) error {
	rep, err := twopc.Restore(core, m.opts, now)
	if err != nil {
		return err
	}
	rep.SetLeader(m.leader)
	m.rep = rep
	return nil
}

func (m *twopcCore) Load(GroupRef, func(fn func(storage.Record) bool) error) error { return nil }
func (m *twopcCore) InMemory() bool                                                { return false }

// Prepare admits the engine's prepares (their keys must be the group's) and, from a leader,
// decisions; nothing else reaches the log.
func (m *twopcCore) Prepare(req engine.Request, cmd *peerpb.RaftCommand) error {
	if req.Op != engine.OpCommand {
		return errs.New(errs.Invalid, "keyspace %q is transactional (txn_mode %s): write through TxnCommit", req.Keyspace, config.Txn2PC)
	}
	ent, err := twopc.DecodeEntry(req.Command, m.limits)
	if err != nil {
		return errs.New(errs.Invalid, "keyspace %q partition %d: transaction entry: %v", req.Keyspace, m.part, err)
	}
	if ent.Kind != twopc.EntryPrepare || ent.Part.Partition != m.part {
		return errs.New(errs.Invalid, "keyspace %q partition %d: a request may only prepare a transaction's part for this partition", req.Keyspace, m.part)
	}
	for _, r := range ent.Part.Reads {
		if !m.contains([]byte(r.Key)) {
			return errs.New(errs.Unavailable, "keyspace %q: key %q of transaction %s is not in partition %d here; retry", req.Keyspace, r.Key, ent.Part.ID, m.part)
		}
	}
	for _, w := range ent.Part.Writes {
		if !m.contains([]byte(w.Key)) {
			return errs.New(errs.Unavailable, "keyspace %q: key %q of transaction %s is not in partition %d here; retry", req.Keyspace, w.Key, ent.Part.ID, m.part)
		}
	}
	cmd.Command = req.Command
	return nil
}

func (m *twopcCore) Apply(g GroupRef, index uint64, cmd *peerpb.RaftCommand, _ hlc.Version) ([]storage.Record, engine.Result) {
	if len(cmd.GetCommand()) == 0 {
		return nil, engine.Result{Err: errs.New(errs.Invalid, "keyspace %q is transactional: write through TxnCommit", g.Keyspace)}
	}
	ent, err := twopc.DecodeEntry(cmd.GetCommand(), m.limits)
	if err != nil {
		return nil, engine.Result{Err: errs.New(errs.Invalid, "keyspace %q partition %d entry %d: %v", g.Keyspace, g.Partition, index, err)}
	}
	m.rep.Deliver(m.now(), index, ent)
	return nil, engine.Result{}
}

// entries builds the prepares: the coordinator is the first partition this node replicates
// (its decision is then local), else the first.
func (m *twopcCore) entries(id sdur.TxnID, parts []uint32, keys map[uint32]*txnKeys, submitter uint32, home func(uint32) bool) ([][]byte, error) {
	coord := parts[0]
	for _, pid := range parts {
		if home(pid) {
			coord = pid
			break
		}
	}
	out := make([][]byte, 0, len(parts))
	for _, pid := range parts {
		k := keys[pid]
		p := &twopc.Part{ID: twopc.TxnID(id), Partition: pid, Partitions: parts, Coordinator: coord, Submitter: submitter}
		for i, r := range k.reads {
			p.Reads = append(p.Reads, twopc.Read{Key: string(r), Version: k.readVersions[i]})
		}
		for _, w := range k.writes {
			p.Writes = append(p.Writes, twopc.Write{Key: string(w.Key), Value: w.Value, Delete: w.Delete})
		}
		b, err := twopc.EncodeEntry(twopc.Entry{Kind: twopc.EntryPrepare, Part: p})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// drain carries out the core's output: records, outcomes, votes to the coordinator
// partition's replicas, decisions to the participants' replicas, status requests, and the
// leader's own entries (decisions).
func (m *twopcCore) drain(e *Engine, g *group) {
	now := e.lastNow
	ks := g.key.keyspace
	for range maxTxnDrain {
		if !m.rep.HasReady() {
			break
		}
		rd := m.rep.Ready()
		for _, a := range rd.Applies {
			e.txnRecords(g, a.Version, len(a.Writes), func(i int) (string, []byte, bool) { return a.Writes[i].Key, a.Writes[i].Value, a.Writes[i].Delete })
		}
		for _, o := range rd.Outcomes {
			e.txnOutcome(g, sdur.TxnID(o.Txn), o.Submitter, o.Committed, o.Reason, o.Key, o.Version)
		}
		for _, v := range rd.Votes {
			b, err := proto.Marshal(&peerpb.TwopcVote{Txn: &peerpb.SdurTxnId{Node: v.Txn.Node, Seq: v.Txn.Seq}, Partition: v.Partition, Coordinator: v.Coordinator, Commit: v.Commit, Key: []byte(v.Key)})
			if err != nil {
				continue
			}
			e.stats.TxnVotesSent.Add(1)
			e.sendToPartition(ks, v.Coordinator, &peerpb.TxnMessage{Keyspace: ks, Partition: v.Coordinator, FromPartition: g.key.partition, Body: &peerpb.TxnMessage_TwopcVote{TwopcVote: b}})
		}
		for _, d := range rd.Decides {
			b, err := twopc.EncodeEntry(twopc.Entry{Kind: twopc.EntryDecision, Txn: d.Txn, Commit: d.Commit, Partitions: d.Partitions, Submitter: d.Submitter, Coordinator: d.Coordinator})
			if err != nil {
				continue
			}
			for _, pid := range d.Partitions {
				if pid != g.key.partition {
					e.sendToPartition(ks, pid, &peerpb.TxnMessage{Keyspace: ks, Partition: pid, FromPartition: g.key.partition, Body: &peerpb.TxnMessage_TwopcDecide{TwopcDecide: b}})
				}
			}
		}
		for _, s := range rd.StatusRequests {
			b, err := twopc.EncodeEntry(twopc.Entry{Kind: twopc.EntryDecision, Txn: s.Txn, Partitions: s.Partitions, Submitter: s.Submitter, Coordinator: s.Coordinator})
			if err != nil {
				continue
			}
			e.sendToPartition(ks, s.Coordinator, &peerpb.TxnMessage{Keyspace: ks, Partition: s.Coordinator, FromPartition: g.key.partition, Body: &peerpb.TxnMessage_TwopcStatus{TwopcStatus: b}})
		}
		if g.state == etcdraft.StateLeader {
			for _, p := range rd.Proposals {
				if b, err := twopc.EncodeEntry(p); err == nil {
					e.proposeOwn(now, g, b)
				}
			}
		}
	}
}

// step takes a vote (at the coordinator partition), a decision (at a participant: its leader
// appends it) or a status request (at the coordinator).
func (m *twopcCore) step(e *Engine, g *group, now time.Time, _ uint32, msg *peerpb.TxnMessage) {
	switch b := msg.Body.(type) {
	case *peerpb.TxnMessage_TwopcVote:
		var v peerpb.TwopcVote
		if err := proto.Unmarshal(b.TwopcVote, &v); err != nil || v.GetTxn() == nil || v.GetPartition() != msg.GetFromPartition() || len(v.GetKey()) > m.limits.MaxKeyBytes {
			e.stats.TxnBadMessages.Add(1)
			return
		}
		m.rep.Vote(now, twopc.Vote{Txn: twopc.TxnID{Node: v.GetTxn().GetNode(), Seq: v.GetTxn().GetSeq()}, Partition: v.GetPartition(), Coordinator: v.GetCoordinator(), Commit: v.GetCommit(), Key: string(v.GetKey())})
	case *peerpb.TxnMessage_TwopcDecide:
		d, err := m.decision(b.TwopcDecide, msg)
		if err != nil {
			e.stats.TxnBadMessages.Add(1)
			return
		}
		m.rep.Decided(now, twopc.Decide{Txn: d.Txn, Commit: d.Commit, Partitions: d.Partitions, Submitter: d.Submitter, Coordinator: d.Coordinator})
	case *peerpb.TxnMessage_TwopcStatus:
		d, err := m.decision(b.TwopcStatus, msg)
		if err != nil {
			e.stats.TxnBadMessages.Add(1)
			return
		}
		m.rep.Status(now, twopc.StatusRequest{Txn: d.Txn, Coordinator: d.Coordinator, Partitions: d.Partitions, Submitter: d.Submitter})
	default:
		return
	}
	e.drainTxn(g)
	e.markDirty(g)
}

// decision decodes a decision or status request and checks it concerns the receiver.
func (m *twopcCore) decision(b []byte, msg *peerpb.TxnMessage) (twopc.Entry, error) {
	d, err := twopc.DecodeEntry(b, m.limits)
	if err != nil {
		return d, err
	}
	if d.Kind != twopc.EntryDecision {
		return d, fmt.Errorf("not a decision")
	}
	has := false
	for _, p := range d.Partitions {
		has = has || p == m.part
	}
	if !has {
		return d, fmt.Errorf("partition %d takes no part in %s", m.part, d.Txn)
	}
	return d, nil
}

// tick runs the core's timers (status requests, the coordinator's presumed abort) once per
// Raft tick; leadership is told to the core as it changes (only the leader proposes).
func (m *twopcCore) tick(e *Engine, g *group, now time.Time, raftTicked bool) {
	if leader := g.state == etcdraft.StateLeader && g.servable(); leader != m.leader {
		m.setLeader(leader)
	}
	if raftTicked {
		m.rep.Tick(now)
		e.drainTxn(g)
	}
}
