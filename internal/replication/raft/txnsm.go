package raft

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

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

// txnMachine is a transactional group's state machine: an sdur.Replica fed by the log.
type txnMachine struct {
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
	// savedAt is the applied index of the state last saved (txnStateKey); broken, why the
	// core could not be restored (the group is then out of service).
	savedAt uint64
}

func txnStateKey(group uint64) []byte { return stateKey(group, 't') }

// txnCoreOptions are the core's options: the same on every replica (the threshold starts at
// 0 entries everywhere and changes only through the log, EntryConfig).
func txnCoreOptions(mutation string) sdur.Options {
	o := sdur.Options{Retention: txnRetention}
	if _, ok := sdur.Mutations[mutation]; ok {
		o.Mutation = mutation
	}
	return o.EnsureDefaults()
}

func newTxnMachine(e *Engine, g *group) (*txnMachine, error) {
	opts := txnCoreOptions(e.cfg.Mutation)
	// Recovery (IV-F) must not abort a global only because a participant's leader failed
	// over: wait at least three election timeouts.
	opts.RecoveryTimeout = max(opts.RecoveryTimeout, 3*g.opts.ElectionTimeout)
	rep, err := sdur.NewReplica(g.key.partition, opts)
	if err != nil {
		return nil, err
	}
	return &txnMachine{rep: rep, part: g.key.partition, limits: e.txnLimits(), opts: opts,
		now: func() time.Time { return e.lastNow }, contains: g.contains}, nil
}

// txnLimits bound decoded transaction entries and votes: the cluster's request limits.
func (e *Engine) txnLimits() sdur.WireLimits {
	l := sdur.DefaultWireLimits
	if e.cfg.Limits.MaxKeyBytes > 0 {
		l.MaxKeyBytes = e.cfg.Limits.MaxKeyBytes
	}
	if e.cfg.Limits.MaxValueBytes > 0 {
		l.MaxValueBytes = e.cfg.Limits.MaxValueBytes
	}
	return l
}

// Prepare checks an entry before it is proposed: only the engine's own transaction entries
// (OpCommand, encoded by sdur.EncodeEntry) reach the log; a part's keys must be the group's,
// and a part without a snapshot takes this replica's (an implicit read).
func (m *txnMachine) Prepare(req engine.Request, cmd *peerpb.RaftCommand) error {
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
func (m *txnMachine) Apply(g GroupRef, index uint64, cmd *peerpb.RaftCommand, _ hlc.Version) ([]storage.Record, engine.Result) {
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

func (m *txnMachine) Load(GroupRef, func(fn func(storage.Record) bool) error) error { return nil }

// InMemory: the core's state travels as its saved state (txnStateKey, and the snapshot
// marker), not by re-reading records.
func (m *txnMachine) InMemory() bool { return false }

// busy reports whether the core waits for something only time or messages bring (votes,
// thresholds, a snapshot to reach): its group must not quiesce.
func (m *txnMachine) busy() bool {
	pending, waiting := m.rep.PendingCount()
	return pending > 0 || waiting > 0 || m.rep.NeedsTicks()
}

// save encodes the core's state at applied index.
func (m *txnMachine) save(index uint64) ([]byte, error) {
	core, err := m.rep.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("save transaction state of partition %d: %w", m.part, err)
	}
	return proto.Marshal(&peerpb.TxnSavedState{Index: index, Mode: config.TxnSDUR, Core: core})
}

// restore replaces the core with a saved state and returns its index.
func (m *txnMachine) restore(data []byte, now time.Time) (uint64, error) {
	var st peerpb.TxnSavedState
	if err := proto.Unmarshal(data, &st); err != nil {
		return 0, fmt.Errorf("transaction state of partition %d: %w (%w)", m.part, err, storage.ErrCorrupt)
	}
	if st.GetMode() != config.TxnSDUR {
		return 0, fmt.Errorf("transaction state of partition %d is of mode %q, not %s (%w)", m.part, st.GetMode(), config.TxnSDUR, storage.ErrCorrupt)
	}
	rep, err := sdur.Restore(st.GetCore(), m.opts, now)
	if err != nil {
		return 0, fmt.Errorf("transaction state of partition %d: %w (%w)", m.part, err, storage.ErrCorrupt)
	}
	if rep.Partition() != m.part {
		return 0, fmt.Errorf("transaction state of partition %d holds partition %d (%w)", m.part, rep.Partition(), storage.ErrCorrupt)
	}
	m.rep = rep
	m.savedAt = st.GetIndex()
	return st.GetIndex(), nil
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
