package raft

import (
	"fmt"
	"math"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/sdur"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// Transactions on raft keyspaces (txn_mode sdur, docs/transactions.md). Each partition's
// Raft group is the partition's atomic broadcast of Geo-SDUR (geo-sdur III, "abcast"): a
// transaction's part is an entry of the group's log, and every replica delivers the log to
// its own sdur.Replica (internal/sdur, the protocol's sans-IO core). What the core asks for
// beyond the log — votes to the other partitions' replicas, outcomes to the submitter,
// abort requests to other logs, tick entries — the engine carries out (txn.go).

const (
	// unsetSnapshot marks a part of a transaction that wrote a partition it never read: the
	// replica that proposes the part fills in its own snapshot counter (an implicit read,
	// sdur.Part), so it is fixed before the entry is in the log.
	unsetSnapshot = math.MaxUint64
	// txnSnapshotWindow: the leader's tick entries set the snapshot floor this many
	// completions below its counter; transactions whose snapshot is older abort ("snapshot
	// too old") and per-key certification state older than it is dropped.
	txnSnapshotWindow = 100_000
	// txnRetention bounds the transaction IDs a replica remembers (duplicates, votes given):
	// the saved state travels in a snapshot offer (RaftSnapshotMarker.txn_state), bounded by
	// wire.MaxRaftMessageBytes.
	txnRetention = 1 << 16
	// txnSaveEvery: a transactional group saves its state machine every this many applied
	// entries (the log is not compacted past the saved index: a restart replays from it).
	txnSaveEvery = 1000
	// txnTickLinger: tick entries keep flowing this long after a global last waited (a
	// tick takes a commit latency to be delivered; ticks in flight reach a new global's
	// threshold on time).
	txnTickLinger = time.Second
	// txnResendEvery: a submitter without an outcome proposes its parts again (a proposal
	// may be lost; replicas deliver a transaction once).
	txnResendEvery = 2 * time.Second
	// thresholdMargin is the automatic threshold's share of the measured vote lag
	// (sdur.LagEstimator.Retune; docs/transactions.md, the margin sweep).
	thresholdMargin = 0.75
)

// sdurCore is a transactional group's state machine in txn_mode sdur: an sdur.Replica fed
// by the log.
type sdurCore struct {
	rep    *sdur.Replica
	part   uint32
	limits sdur.WireLimits
	opts   sdur.Options
	// now is the engine's time (an entry's delivery time drives the core's vote timers).
	now func() time.Time
	// contains reports whether a key is in the group's range (a part's keys must be).
	contains func(key []byte) bool
	// lag measures how long votes take (automatic thresholds); lastNeed is when a global
	// last waited for its threshold; lastTick when the leader last appended a tick entry.
	lag      sdur.LagEstimator
	lastNeed time.Time
	lastTick time.Time
	// completed are the globals completed here, in completion order (the snapshot
	// sequencer asks about them, txnro.go; bounded by maxRetainedGlobals); vector is the last
	// snapshot vector this partition's log holds (the sequencer's partition), newVector one
	// applied and not yet published.
	completed      map[sdur.TxnID]completedGlobal
	completedOrder []sdur.TxnID
	vector         *peerpb.TxnVector
	newVector      *peerpb.TxnVector
}

// txnCoreOptions are the core's options: the same on every replica (the threshold starts at
// 0 entries everywhere and changes only through the log, EntryConfig).
func txnCoreOptions(mutation string) sdur.Options {
	o := sdur.Options{Retention: txnRetention}
	if _, ok := sdur.Mutations[mutation]; ok {
		o.Mutation = mutation
	}
	return o.EnsureDefaults()
}

func newSdurCore(e *Engine, g *group) (*sdurCore, error) {
	opts := txnCoreOptions(e.cfg.Mutation)
	// Recovery (IV-F) must not abort a global only because a participant's leader failed
	// over: wait at least three election timeouts.
	opts.RecoveryTimeout = max(opts.RecoveryTimeout, 3*g.opts.ElectionTimeout)
	rep, err := sdur.NewReplica(g.key.partition, opts)
	if err != nil {
		return nil, err
	}
	return &sdurCore{rep: rep, completed: map[sdur.TxnID]completedGlobal{}, part: g.key.partition, limits: e.txnLimits(), opts: opts,
		now: func() time.Time { return e.lastNow }, contains: g.contains}, nil
}

// Prepare checks an entry before it is proposed: only the engine's own transaction entries
// (OpCommand, encoded by sdur.EncodeEntry) reach the log; a part's keys must be the group's,
// and a part without a snapshot takes this replica's (an implicit read).
func (m *sdurCore) Prepare(req engine.Request, cmd *peerpb.RaftCommand) error {
	if req.Op != engine.OpCommand {
		return errs.New(errs.Invalid, "keyspace %q is transactional (txn_mode %s): write through TxnCommit", req.Keyspace, config.TxnSDUR)
	}
	ent, err := sdur.DecodeEntry(req.Command, m.limits)
	if err != nil {
		return errs.New(errs.Invalid, "keyspace %q partition %d: transaction entry: %v", req.Keyspace, m.part, err)
	}
	switch ent.Kind {
	case sdur.EntryTxn:
		p := ent.Txn
		if err := p.Validate(m.part, m.limits.MaxKeys); err != nil {
			return errs.New(errs.Invalid, "keyspace %q: %v", req.Keyspace, err)
		}
		for _, k := range p.Reads {
			if !m.contains([]byte(k)) {
				return errs.New(errs.Unavailable, "keyspace %q: key %q of transaction %s is not in partition %d here; retry", req.Keyspace, k, p.ID, m.part)
			}
		}
		for _, w := range p.Writes {
			if !m.contains([]byte(w.Key)) {
				return errs.New(errs.Unavailable, "keyspace %q: key %q of transaction %s is not in partition %d here; retry", req.Keyspace, w.Key, p.ID, m.part)
			}
		}
		if p.Snapshot == unsetSnapshot {
			p.Snapshot = m.rep.SnapshotCounter()
			if cmd.Command, err = sdur.EncodeEntry(ent); err != nil {
				return errs.New(errs.Internal, "encode transaction entry: %v", err)
			}
			return nil
		}
	case sdur.EntryAbortRequest:
		if ent.Abort.Partition != m.part {
			return errs.New(errs.Invalid, "keyspace %q: abort request for partition %d proposed to partition %d", req.Keyspace, ent.Abort.Partition, m.part)
		}
	default:
		// Ticks and thresholds are the leader's own entries (txn.go), never a request's.
		return errs.New(errs.Invalid, "keyspace %q: a request cannot propose transaction entries of kind %d", req.Keyspace, ent.Kind)
	}
	cmd.Command = req.Command
	return nil
}

// Apply delivers a committed entry to the core. Its records come later, from the core's
// Ready (drainTxn): a transaction completes when its votes are in, not at its entry.
func (m *sdurCore) Apply(g GroupRef, index uint64, cmd *peerpb.RaftCommand, _ hlc.Version) ([]storage.Record, engine.Result) {
	if v := cmd.GetTxnVector(); v != nil {
		if v.GetSeq() > m.vector.GetSeq() {
			m.vector, m.newVector = v, v
		}
		return nil, engine.Result{}
	}
	if len(cmd.GetCommand()) == 0 {
		// Not a transaction entry (a plain write cannot be proposed here; Prepare refuses it).
		return nil, engine.Result{Err: errs.New(errs.Invalid, "keyspace %q is transactional: write through TxnCommit", g.Keyspace)}
	}
	ent, err := sdur.DecodeEntry(cmd.GetCommand(), m.limits)
	if err != nil {
		// Every replica skips the same entry alike (the same bytes, the same limits).
		return nil, engine.Result{Err: errs.New(errs.Invalid, "keyspace %q partition %d entry %d: %v", g.Keyspace, g.Partition, index, err)}
	}
	m.rep.Deliver(m.now(), ent)
	return nil, engine.Result{}
}

func (m *sdurCore) Load(GroupRef, func(fn func(storage.Record) bool) error) error { return nil }

// InMemory: the core's state travels as its saved state (txnStateKey, and the snapshot
// marker), not by re-reading records.
func (m *sdurCore) InMemory() bool { return false }

// busy reports whether the core waits for something only time or messages bring (votes,
// thresholds, a snapshot to reach): its group must not quiesce.
func (m *sdurCore) busy() bool {
	pending, waiting := m.rep.PendingCount()
	return pending > 0 || waiting > 0 || m.rep.NeedsTicks()
}

func (m *sdurCore) mode() string              { return config.TxnSDUR }
func (m *sdurCore) snapshot() ([]byte, error) { return m.rep.Snapshot() }
func (m *sdurCore) counter() uint64           { return m.rep.SnapshotCounter() }
func (m *sdurCore) floor() uint64             { return m.rep.Floor() }
func (m *sdurCore) snapshots() bool           { return true }
func (m *sdurCore) setLeader(bool)            {}
func (m *sdurCore) replayFrom(uint64)         {}

func (m *sdurCore) restore(core []byte, now time.Time) error {
	rep, err := sdur.Restore(core, m.opts, now)
	if err != nil {
		return err
	}
	if rep.Partition() != m.part {
		return fmt.Errorf("it holds partition %d", rep.Partition())
	}
	m.rep = rep
	return nil
}

// desiredThreshold is the threshold the keyspace's options ask for (auto: the lag
// estimator's current choice, or the core's).
func desiredThreshold(o config.RaftOptions) (sdur.Threshold, bool) {
	if o.AutoThreshold {
		return sdur.Threshold{}, false
	}
	unit := sdur.Entries
	if o.ThresholdUnit == "ticks" {
		unit = sdur.Ticks
	}
	return sdur.Threshold{Unit: unit, K: o.ThresholdK}, true
}

// entries builds a transaction's parts (geo-sdur Algorithm 2, submit): a partition it read
// carries the snapshot its reads fixed; one it only wrote, unsetSnapshot (filled by the
// proposing replica: an implicit read).
func (m *sdurCore) entries(id sdur.TxnID, parts []uint32, keys map[uint32]*txnKeys, submitter uint32, _ func(uint32) bool) ([][]byte, error) {
	out := make([][]byte, 0, len(parts))
	for _, pid := range parts {
		k := keys[pid]
		p := &sdur.Part{ID: id, Partition: pid, Partitions: parts, Snapshot: unsetSnapshot, Submitter: submitter}
		if k.hasSnapshot {
			p.Snapshot = k.snapshot
		}
		written := map[string]bool{}
		for _, w := range k.writes {
			p.Writes = append(p.Writes, sdur.Write{Key: string(w.Key), Value: w.Value, Delete: w.Delete})
			written[string(w.Key)] = true
		}
		for _, r := range k.reads {
			if !written[string(r)] { // a written key is certified as read (writeset ⊆ readset)
				p.Reads = append(p.Reads, string(r))
			}
		}
		b, err := sdur.EncodeEntry(sdur.Entry{Kind: sdur.EntryTxn, Txn: p})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// drain carries out the core's output: records, outcomes to the submitter, votes to every
// replica of the transaction's other partitions (Algorithm 2 line 22), vote requests, and
// abort requests into other partitions' logs (IV-F).
func (m *sdurCore) drain(e *Engine, g *group) {
	now := e.lastNow
	if v := m.newVector; v != nil {
		m.newVector = nil
		if g.state == etcdraft.StateLeader {
			e.publishApplied(g, v)
		} else {
			e.noteTxnVector(g.key.keyspace, v)
		}
	}
	for range maxTxnDrain {
		if !m.rep.HasReady() {
			break
		}
		rd := m.rep.Ready()
		for _, a := range rd.Applies {
			e.txnRecords(g, a.Index, len(a.Writes), func(i int) (string, []byte, bool) { return a.Writes[i].Key, a.Writes[i].Value, a.Writes[i].Delete })
		}
		for _, o := range rd.Outcomes {
			if o.Global && o.Index > 0 {
				m.noteCompleted(o.Txn, o.Index, o.Partitions)
			}
			e.txnOutcome(g, o.Txn, o.Submitter, o.Committed, string(o.Reason), o.Key, o.Index)
		}
		for _, v := range rd.Votes {
			if v.Partition == g.key.partition && v.Commit {
				m.lag.Delivered(v, now)
			}
			if v.Txn.Node == e.cfg.NodeID {
				e.observeDelivery(g.key.keyspace, v.Txn, v.Partition, now, 0) // delivered by this node's own replica
			}
			b, err := sdur.EncodeVote(v)
			if err != nil {
				continue
			}
			for _, pid := range v.Partitions {
				if pid != g.key.partition {
					e.sendToPartition(g.key.keyspace, pid, &peerpb.TxnMessage{Keyspace: g.key.keyspace, Partition: pid, FromPartition: g.key.partition,
						Body: &peerpb.TxnMessage_SdurVote{SdurVote: b}})
				}
			}
			e.stats.TxnVotesSent.Add(1)
		}
		for _, vr := range rd.VoteRequests {
			e.sendToPartition(g.key.keyspace, vr.Partition, &peerpb.TxnMessage{Keyspace: g.key.keyspace, Partition: vr.Partition, FromPartition: g.key.partition,
				Body: &peerpb.TxnMessage_VoteRequest{VoteRequest: &peerpb.SdurTxnId{Node: vr.Txn.Node, Seq: vr.Txn.Seq}}})
		}
		for _, ar := range rd.AbortRequests {
			b, err := sdur.EncodeEntry(sdur.Entry{Kind: sdur.EntryAbortRequest, Abort: &ar})
			if err != nil {
				continue
			}
			e.stats.TxnAbortRequests.Add(1)
			e.proposeTxnEntry(now, g.key.keyspace, ar.Partition, e.anyKeyOf(g.key.keyspace, ar.Partition), b, now.Add(txnResendEvery))
		}
	}
}

// step takes a vote (the first of a partition counts) or answers a vote request.
func (m *sdurCore) step(e *Engine, g *group, now time.Time, from uint32, msg *peerpb.TxnMessage) {
	switch b := msg.Body.(type) {
	case *peerpb.TxnMessage_SdurVote:
		v, err := sdur.DecodeVote(b.SdurVote, m.limits)
		if err != nil || v.Partition != msg.GetFromPartition() || !slices.Contains(v.Partitions, g.key.partition) {
			e.stats.TxnBadMessages.Add(1)
			return
		}
		m.rep.Vote(now, v)
		m.lag.Vote(v, now)
		if v.Txn.Node == e.cfg.NodeID {
			e.observeDelivery(g.key.keyspace, v.Txn, v.Partition, now, e.rttTo(from)/2)
		}
		e.drainTxn(g)
		e.markDirty(g)
	case *peerpb.TxnMessage_VoteRequest:
		v, ok := m.rep.VoteFor(sdur.TxnID{Node: b.VoteRequest.GetNode(), Seq: b.VoteRequest.GetSeq()})
		if !ok {
			return
		}
		vb, err := sdur.EncodeVote(v)
		if err != nil {
			return
		}
		e.sendTxn(from, &peerpb.TxnMessage{Keyspace: g.key.keyspace, Partition: msg.GetFromPartition(), FromPartition: g.key.partition,
			Body: &peerpb.TxnMessage_SdurVote{SdurVote: vb}})
	}
}

// tick runs the core's timers (vote retries, recovery) and, on the leader, appends tick
// entries while globals wait for a threshold counted in ticks, moves the snapshot floor,
// and changes the threshold when the keyspace's options (or the automatic estimate) ask.
func (m *sdurCore) tick(e *Engine, g *group, now time.Time, raftTicked bool) {
	if raftTicked {
		m.rep.Tick(now)
		e.drainTxn(g)
	}
	if g.state != etcdraft.StateLeader || !g.servable() || now.Sub(m.lastTick) < g.opts.TxnTickInterval {
		return
	}
	m.lastTick = now
	if th, ok := desiredThreshold(g.opts); ok && th != m.rep.Threshold() {
		m.propose(e, g, now, sdur.Entry{Kind: sdur.EntryConfig, Threshold: &th})
	} else if !ok {
		if th, changed := m.lag.Retune(m.rep.Threshold(), g.opts.TxnTickInterval, thresholdMargin, now); changed {
			m.propose(e, g, now, sdur.Entry{Kind: sdur.EntryConfig, Threshold: &th})
		}
	}
	floor := uint64(0)
	if sc := m.rep.SnapshotCounter(); sc > txnSnapshotWindow {
		floor = sc - txnSnapshotWindow
	}
	if m.rep.NeedsTicks() {
		m.lastNeed = now
	}
	lingering := !m.lastNeed.IsZero() && now.Sub(m.lastNeed) < txnTickLinger && m.rep.Threshold().Unit == sdur.Ticks
	if m.rep.NeedsTicks() || lingering || floor > m.rep.Floor()+txnSnapshotWindow/4 {
		m.propose(e, g, now, sdur.Entry{Kind: sdur.EntryTick, Floor: floor})
	}
}

func (m *sdurCore) propose(e *Engine, g *group, now time.Time, ent sdur.Entry) {
	if b, err := sdur.EncodeEntry(ent); err == nil {
		e.proposeOwn(now, g, b)
	}
}

// noteCompleted records a global's completion here (bounded: the oldest are forgotten).
func (m *sdurCore) noteCompleted(id sdur.TxnID, index uint64, parts []uint32) {
	if _, ok := m.completed[id]; ok {
		return
	}
	m.completed[id] = completedGlobal{index: index, parts: slices.Clone(parts)}
	m.completedOrder = append(m.completedOrder, id)
	if len(m.completedOrder) > maxRetainedGlobals {
		delete(m.completed, m.completedOrder[0])
		m.completedOrder = m.completedOrder[1:]
	}
}

// saveExtra and restoreExtra keep what the sequencer needs across restarts: a vector that
// missed a global completed before a restart could hold it in one partition only.
func (m *sdurCore) saveExtra(st *peerpb.TxnSavedState) {
	for _, id := range m.completedOrder {
		c := m.completed[id]
		st.Completed = append(st.Completed, &peerpb.TxnCompletedGlobal{Txn: &peerpb.SdurTxnId{Node: id.Node, Seq: id.Seq}, Index: c.index, Partitions: c.parts})
	}
	st.Vector = m.vector
}

func (m *sdurCore) restoreExtra(st *peerpb.TxnSavedState) {
	m.completed, m.completedOrder = map[sdur.TxnID]completedGlobal{}, nil
	for _, c := range st.GetCompleted() {
		if len(m.completedOrder) >= maxRetainedGlobals {
			break
		}
		m.noteCompleted(sdur.TxnID{Node: c.GetTxn().GetNode(), Seq: c.GetTxn().GetSeq()}, c.GetIndex(), c.GetPartitions())
	}
	m.vector, m.newVector = st.GetVector(), nil
}
