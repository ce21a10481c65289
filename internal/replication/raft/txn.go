package raft

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/sdur"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// The engine's side of transactions (txnsm.go has the state machine): submitting a
// transaction's parts to its partitions' logs (geo-sdur Algorithm 2, submit), carrying the
// cores' votes, vote requests, abort requests and outcomes between nodes, tick entries,
// transactional reads at a snapshot (Algorithm 1), and saving and restoring the cores.

// maxTxnDrain bounds the Readies one drain takes from a core (each is finite; the bound
// guards against a core that keeps producing).
const maxTxnDrain = 1000

// maxLocalTxnMessages bounds the messages between co-located groups handled in one go.
const maxLocalTxnMessages = 100_000

// txnWait is a transaction this node submitted, waiting for its outcome.
type txnWait struct {
	req      engine.Request // the client's OpTxnCommit
	keyspace string
	parts    []txnPartEntry
	sentAt   time.Time
}

type txnPartEntry struct {
	partition uint32
	key       []byte // the part's first key (routing, forward checks)
	entry     []byte // sdur.EncodeEntry
}

// txnRead is a transactional read waiting for its replica to reach its snapshot.
type txnRead struct {
	id       uint64
	snapshot uint64
}

// txnCore is one transaction mode's state machine on a group (txnsdur.go: Geo-SDUR,
// txn2pc.go: two-phase commit). Apply delivers the log to the mode's sans-IO core; the rest
// is what the engine calls for everything beyond the log.
type txnCore interface {
	StateMachine
	mode() string
	// entries builds the log entries of a transaction submitted on this node, one per
	// partition in parts order (the transaction's partitions, sorted).
	entries(id sdur.TxnID, parts []uint32, keys map[uint32]*txnKeys, submitter uint32, home func(uint32) bool) ([][]byte, error)
	// drain carries out the core's output (records, outcomes, messages, entries).
	drain(e *Engine, g *group)
	// step takes a message from another group's core.
	step(e *Engine, g *group, now time.Time, from uint32, m *peerpb.TxnMessage)
	// tick runs the core's timers (raftTicked: once per Raft tick) and, on the leader, its
	// own entries.
	tick(e *Engine, g *group, now time.Time, raftTicked bool)
	setLeader(leader bool)
	// busy: the core waits for messages or time (its group must not quiesce).
	busy() bool
	// snapshot and restore are the core's saved state (TxnSavedState.core).
	snapshot() ([]byte, error)
	restore(core []byte, now time.Time) error
	// replayFrom marks the entries up to index as a replay after a restart.
	replayFrom(index uint64)
	// counter is the version reads are served at (the newest completion); floor, the oldest
	// snapshot a read may ask for; snapshots, whether reads are held at the snapshot their
	// transaction fixed (sdur) or served at the newest version (2pc).
	counter() uint64
	floor() uint64
	snapshots() bool
}

// txnKeys are a transaction's keys of one partition.
type txnKeys struct {
	reads        [][]byte
	readVersions []uint64 // the version each read saw (0: absent)
	writes       []engine.TxnWrite
	snapshot     uint64
	hasSnapshot  bool
}

func txnStateKey(group uint64) []byte { return stateKey(group, 't') }

// txnLimits bound decoded transaction entries and votes: the cluster's request limits.
func (e *Engine) txnLimits() sdur.WireLimits {
	l := sdur.DefaultWireLimits
	if e.cfg.Limits.MaxKeyBytes > 0 {
		l.MaxKeyBytes = e.cfg.Limits.MaxKeyBytes
	}
	if e.cfg.Limits.MaxValueBytes > 0 {
		l.MaxValueBytes = e.cfg.Limits.MaxValueBytes
	}
	if e.cfg.Limits.MaxTxnKeys > 0 {
		l.MaxKeys = e.cfg.Limits.MaxTxnKeys
	}
	return l
}

// stateMachineFor builds group g's state machine: the transaction core for a raft keyspace
// with a transaction mode, else the engine's (key-value, or the metadata catalog).
func (e *Engine) stateMachineFor(g *group) (StateMachine, error) {
	if e.protocol != config.ProtocolRaft {
		return e.newSM(g.key.keyspace), nil
	}
	var core txnCore
	var err error
	switch g.opts.TxnMode {
	case config.TxnSDUR:
		core, err = newSdurCore(e, g)
	case config.Txn2PC:
		core, err = newTwopcCore(e, g)
	default:
		return e.newSM(g.key.keyspace), nil
	}
	if err != nil {
		return nil, fmt.Errorf("keyspace %q partition %d: %w", g.key.keyspace, g.key.partition, err)
	}
	g.txn = core
	return core, nil
}

// saveTxn encodes g's core saved at its applied index.
func (e *Engine) saveTxn(g *group) ([]byte, error) {
	core, err := g.txn.snapshot()
	if err != nil {
		return nil, fmt.Errorf("save the transaction state of keyspace %q partition %d: %w", g.key.keyspace, g.key.partition, err)
	}
	st := &peerpb.TxnSavedState{Index: g.applied, Mode: g.txn.mode(), Core: core}
	if x, ok := g.txn.(interface{ saveExtra(*peerpb.TxnSavedState) }); ok {
		x.saveExtra(st)
	}
	return proto.Marshal(st)
}

// restoreTxn replaces g's core with a saved state and returns its index.
func (e *Engine) restoreTxn(g *group, data []byte, now time.Time) (uint64, error) {
	var st peerpb.TxnSavedState
	if err := proto.Unmarshal(data, &st); err != nil {
		return 0, fmt.Errorf("transaction state of partition %d: %w (%w)", g.key.partition, err, storage.ErrCorrupt)
	}
	if x, ok := g.txn.(interface{ restoreExtra(*peerpb.TxnSavedState) }); ok {
		x.restoreExtra(&st)
	}
	if st.GetMode() != g.txn.mode() {
		return 0, fmt.Errorf("transaction state of partition %d is of mode %q, not %s (%w)", g.key.partition, st.GetMode(), g.txn.mode(), storage.ErrCorrupt)
	}
	if err := g.txn.restore(st.GetCore(), now); err != nil {
		return 0, fmt.Errorf("transaction state of partition %d: %w (%w)", g.key.partition, err, storage.ErrCorrupt)
	}
	g.txnSavedAt = st.GetIndex()
	return st.GetIndex(), nil
}

// loadTxn restores g's core from its saved state and replays the log after it up to the
// applied index (the core's state is a function of the log: replay delivers the same
// entries in the same order). Output of the replay is carried out like any other: records
// are written again (the same keys, values and versions), votes and outcomes sent again
// (receivers take the first).
func (e *Engine) loadTxn(g *group) error {
	m := g.txn
	b, found, err := e.store.GetRaw(txnStateKey(g.id))
	if err != nil {
		return fmt.Errorf("read transaction state: %w", err)
	}
	from := uint64(0)
	if found {
		if from, err = e.restoreTxn(g, b, e.lastNow); err != nil {
			return err
		}
	}
	m.replayFrom(g.applied)
	if g.applied <= from {
		return nil
	}
	first, _ := g.log.Storage().FirstIndex()
	if from+1 < first && !(from == 0 && first <= 2) {
		return fmt.Errorf("transaction state saved at %d, but the log starts at %d: entries between are gone (%w)", from, first, storage.ErrCorrupt)
	}
	lo := max(from+1, first)
	if lo > g.applied {
		return nil // nothing after the bootstrap snapshot
	}
	ents, err := g.log.Storage().Entries(lo, g.applied+1, math.MaxUint64)
	if err != nil {
		return fmt.Errorf("replay entries %d..%d: %w", lo, g.applied, err)
	}
	for _, ent := range ents {
		if ent.GetType() != raftpb.EntryType_EntryNormal || len(ent.GetData()) == 0 {
			continue
		}
		var cmd peerpb.RaftCommand
		if err := proto.Unmarshal(ent.GetData(), &cmd); err != nil || (len(cmd.GetCommand()) == 0 && cmd.GetTxnVector() == nil) {
			continue // applied as nothing the first time too
		}
		m.Apply(g.key.ref(), ent.GetIndex(), &cmd, hlc.Version{})
	}
	e.stats.TxnReplayed.Add(int64(len(ents)))
	return nil
}

// saveTxnOp is the raw op that saves g's core at its applied index.
func (e *Engine) saveTxnOp(g *group) (storage.RawOp, error) {
	b, err := e.saveTxn(g)
	if err != nil {
		return storage.RawOp{}, err
	}
	g.txnSavedAt = g.applied
	return storage.RawOp{Key: txnStateKey(g.id), Value: b}, nil
}

// maybeSaveTxn saves g's core after entries applied: every txnSaveEvery entries (or half
// log_retain), and at
// every applied index while a snapshot of the group is being exported (the export reads the
// saved state and the data from one storage snapshot, and needs both at one index).
func (e *Engine) maybeSaveTxn(g *group) {
	if g.txn == nil || g.applied == g.txnSavedAt {
		return
	}
	// Often enough that the log behind the saved index stays within log_retain.
	every := min(txnSaveEvery, max(g.opts.LogRetain/2, 1))
	if g.applied-g.txnSavedAt < every && (g.snap == nil || g.snap.ready) {
		return
	}
	op, err := e.saveTxnOp(g)
	if err != nil {
		e.fail(g, err)
		return
	}
	e.out.Raw = append(e.out.Raw, op)
}

// --- submitting ---

// submitTxn starts a client's OpTxnCommit: its parts go to the logs of their partitions
// (geo-sdur Algorithm 2, submit; 2PC's prepares).
func (e *Engine) submitTxn(now time.Time, ks *placement.Keyspace, req engine.Request) {
	mode := config.TxnModeOf(ks.Spec.Options)
	if mode == config.TxnNone || req.Txn == nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q is not transactional (txn_mode %s)", req.Keyspace, mode)})
		return
	}
	if len(req.Txn.ReadVersions) != 0 && len(req.Txn.ReadVersions) != len(req.Txn.Reads) {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "%d read versions for %d reads", len(req.Txn.ReadVersions), len(req.Txn.Reads))})
		return
	}
	snaps := map[uint32]uint64{}
	for _, s := range req.Txn.Snapshots {
		snaps[s.Partition] = s.Counter
	}
	byPart := map[uint32]*txnKeys{}
	partOf := func(key []byte) *txnKeys {
		pid := ks.Lookup(key).ID
		p := byPart[pid]
		if p == nil {
			p = &txnKeys{}
			p.snapshot, p.hasSnapshot = snaps[pid]
			byPart[pid] = p
		}
		return p
	}
	for i, k := range req.Txn.Reads {
		p := partOf(k)
		p.reads = append(p.reads, k)
		v := uint64(0)
		if len(req.Txn.ReadVersions) > 0 {
			v = req.Txn.ReadVersions[i]
		}
		p.readVersions = append(p.readVersions, v)
	}
	for _, w := range req.Txn.Writes {
		p := partOf(w.Key)
		p.writes = append(p.writes, w)
	}
	if len(byPart) == 0 {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Txn: &engine.TxnResult{Committed: true}})
		return
	}
	pids := slices.Sorted(maps.Keys(byPart))
	// Any group of the keyspace here says which core builds the entries; without one, a
	// core of the mode built for the purpose (entries depend on the mode only).
	builder, err := e.txnBuilder(ks, mode)
	if err != nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: err})
		return
	}
	e.txnSeq++
	id := sdur.TxnID{Node: e.cfg.NodeID, Seq: e.txnSeq}
	home := func(pid uint32) bool {
		g := e.groups[groupKey{req.Keyspace, pid}]
		return g != nil && g.servable()
	}
	ents, err := builder.entries(id, pids, byPart, e.cfg.NodeID, home)
	if err != nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Internal, "encode transaction %s: %v", id, err)})
		return
	}
	w := &txnWait{req: req, keyspace: req.Keyspace, sentAt: now}
	for i, pid := range pids {
		k := byPart[pid]
		key := []byte(nil)
		if len(k.reads) > 0 {
			key = k.reads[0]
		} else {
			key = k.writes[0].Key
		}
		w.parts = append(w.parts, txnPartEntry{partition: pid, key: key, entry: ents[i]})
	}
	e.txnWaits[id] = w
	e.stats.TxnSubmitted.Add(1)
	delays := e.txnDelaysFor(now, ks, mode, id, pids)
	for i, p := range w.parts {
		if delays[i] > 0 {
			e.holdPart(now.Add(delays[i]), req.Keyspace, p, req.Deadline)
			continue
		}
		e.proposeTxnEntry(now, req.Keyspace, p.partition, p.key, p.entry, req.Deadline)
	}
}

// txnBuilder is a core of the keyspace's mode to build a transaction's entries with.
func (e *Engine) txnBuilder(ks *placement.Keyspace, mode string) (txnCore, error) {
	for _, p := range ks.Partitions {
		if g := e.groups[groupKey{ks.Spec.Name, p.ID}]; g != nil && g.txn != nil {
			return g.txn, nil
		}
	}
	switch mode {
	case config.TxnSDUR:
		return &sdurCore{limits: e.txnLimits()}, nil
	case config.Txn2PC:
		return &twopcCore{limits: e.txnLimits()}, nil
	}
	return nil, errs.New(errs.Invalid, "keyspace %q has an unknown txn_mode %q", ks.Spec.Name, mode)
}

// proposeTxnEntry appends a transaction entry to a partition's log: through this node's
// replica of it, else forwarded to the nearest replica. Its own reply is dropped (the
// transaction's outcome answers the client).
func (e *Engine) proposeTxnEntry(now time.Time, keyspace string, partition uint32, key, entry []byte, deadline time.Time) {
	p, ok := e.partitionOf(keyspace, partition)
	if !ok {
		return
	}
	e.nextID++
	sub := engine.Request{ID: forwardedBit | e.nextID, Op: engine.OpCommand, Keyspace: keyspace, Key: key, Command: entry, Deadline: deadline}
	if g := e.groups[groupKey{keyspace, partition}]; g != nil && g.servable() && g.txn != nil {
		e.proposeAt(now, g, sub)
		return
	}
	e.forward(now, p, sub)
}

// finishTxn answers the submitter's wait with a transaction's outcome (the first to arrive:
// every replica of every partition reports it, alike).
func (e *Engine) finishTxn(id sdur.TxnID, committed bool, reason string, key []byte, version uint64) {
	w, ok := e.txnWaits[id]
	if !ok {
		return
	}
	delete(e.txnWaits, id)
	if d := e.txnDelays[w.keyspace]; d != nil {
		d.Finish(id)
	}
	if committed {
		e.stats.TxnCommitted.Add(1)
	} else {
		e.stats.TxnAborted.Add(1)
	}
	e.reply(engine.Result{ID: w.req.ID, Op: engine.OpTxnCommit, Txn: &engine.TxnResult{Committed: committed, Reason: reason, Key: bytes.Clone(key), ID: id.String(), Version: version}})
}

// expireTxns fails the submitted transactions whose deadline passed (their outcome is
// unknown) and proposes again the parts of those that waited txnResendEvery.
func (e *Engine) expireTxns(now time.Time) {
	var ids []sdur.TxnID
	for id := range e.txnWaits {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b sdur.TxnID) int { return cmpU64(a.Seq, b.Seq) })
	for _, id := range ids {
		w := e.txnWaits[id]
		if !w.req.Deadline.IsZero() && now.After(w.req.Deadline) {
			delete(e.txnWaits, id)
			e.reply(engine.Result{ID: w.req.ID, Op: engine.OpTxnCommit, Err: errs.New(errs.Timeout,
				"keyspace %q: deadline passed before transaction %s was decided; it may still commit (read its keys to see)", w.keyspace, id)})
			continue
		}
		if now.Sub(w.sentAt) >= txnResendEvery {
			w.sentAt = now
			e.stats.TxnResent.Add(1)
			for _, p := range w.parts {
				e.proposeTxnEntry(now, w.keyspace, p.partition, p.key, p.entry, w.req.Deadline)
			}
		}
	}
}

// --- the cores' output ---

// localTxnMessage is a message between groups of this node (delivered without the network).
type localTxnMessage struct {
	from uint32
	msg  *peerpb.TxnMessage
}

// drainTxn carries out what g's core asks (records in this Ready: durable before its
// messages and replies leave, as the cores require), then serves the reads that waited for
// the counter to move and the messages between this node's own groups.
func (e *Engine) drainTxn(g *group) {
	if g.txn == nil || g.removed {
		return
	}
	g.txn.drain(e, g)
	e.serveTxnReads(g)
	e.flushLocalTxn()
}

// txnRecords appends a completed transaction's writes at a version to the Ready.
func (e *Engine) txnRecords(g *group, version uint64, n int, write func(i int) (key string, value []byte, del bool)) {
	for i := range n {
		k, v, del := write(i)
		rec := storage.Record{Keyspace: g.key.keyspace, Key: []byte(k), Value: v, Tombstone: del, Version: txnVersion(version)}
		if rec.Value == nil && !rec.Tombstone {
			rec.Value = []byte{}
		}
		e.out.Writes = append(e.out.Writes, rec)
	}
}

// txnOutcome reports an outcome to the submitter (this node: at once).
func (e *Engine) txnOutcome(g *group, id sdur.TxnID, submitter uint32, committed bool, reason, key string, version uint64) {
	if submitter == e.cfg.NodeID {
		e.finishTxn(id, committed, reason, []byte(key), version)
		return
	}
	e.sendTxn(submitter, &peerpb.TxnMessage{Keyspace: g.key.keyspace, FromPartition: g.key.partition,
		Body: &peerpb.TxnMessage_Outcome{Outcome: &peerpb.TxnOutcome{Txn: &peerpb.SdurTxnId{Node: id.Node, Seq: id.Seq},
			Committed: committed, Reason: reason, Key: []byte(key), Version: version}}})
}

// anyKeyOf is a key of a partition (its start) to route an entry that names no key by.
func (e *Engine) anyKeyOf(keyspace string, partition uint32) []byte {
	if p, ok := e.partitionOf(keyspace, partition); ok && len(p.Start) > 0 {
		return bytes.Clone(p.Start)
	}
	return []byte{0}
}

// partitionOf is a partition of a keyspace in this node's placement map.
func (e *Engine) partitionOf(keyspace string, partition uint32) (*placement.Partition, bool) {
	ks, ok := e.pmap.Keyspace(keyspace)
	if !ok {
		return nil, false
	}
	return ks.Partition(partition)
}

// txnVersion is the storage version of a transaction's writes: its completion's snapshot
// counter (a read at snapshot S sees the versions up to S).
func txnVersion(counter uint64) hlc.Version { return hlc.Version{WallNanos: int64(counter)} }

// txnSnapshotVersion is the highest storage version a read at snapshot s may see.
func txnSnapshotVersion(s uint64) hlc.Version {
	return hlc.Version{WallNanos: int64(s), Logical: math.MaxUint32, NodeID: math.MaxUint32}
}

// sendToPartition sends m to every replica of a partition (this node's own replica
// directly).
func (e *Engine) sendToPartition(keyspace string, partition uint32, m *peerpb.TxnMessage) {
	p, ok := e.partitionOf(keyspace, partition)
	if !ok {
		return
	}
	for _, r := range p.Replicas {
		e.sendTxn(r, m)
	}
}

func (e *Engine) sendTxn(to uint32, m *peerpb.TxnMessage) {
	if to == e.cfg.NodeID {
		if len(e.localTxn) < maxLocalTxnMessages {
			e.localTxn = append(e.localTxn, localTxnMessage{from: to, msg: m})
		}
		return
	}
	e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: to, Msg: &peerpb.Envelope_Txn{Txn: m}})
}

// flushLocalTxn delivers the messages between this node's own groups (iteratively: a vote
// may complete a transaction whose outcome is for this node, and so on).
func (e *Engine) flushLocalTxn() {
	if e.flushingTxn {
		return
	}
	e.flushingTxn = true
	defer func() { e.flushingTxn = false }()
	for n := 0; len(e.localTxn) > 0 && n < maxLocalTxnMessages; n++ {
		m := e.localTxn[0]
		e.localTxn = e.localTxn[1:]
		e.stepTxn(e.lastNow, m.from, m.msg)
	}
	e.localTxn = nil
}

// stepTxn takes a transaction message from a peer (checked by wire.PeerCheck) or from this
// node's own groups.
func (e *Engine) stepTxn(now time.Time, from uint32, m *peerpb.TxnMessage) {
	if o := m.GetOutcome(); o != nil {
		if o.GetTxn().GetNode() == e.cfg.NodeID {
			e.finishTxn(sdur.TxnID{Node: o.GetTxn().GetNode(), Seq: o.GetTxn().GetSeq()}, o.GetCommitted(), o.GetReason(), o.GetKey(), o.GetVersion())
		}
		return
	}
	if v := m.GetVector(); v != nil {
		e.noteTxnVector(m.GetKeyspace(), v)
		return
	}
	g := e.groups[groupKey{m.GetKeyspace(), m.GetPartition()}]
	if g == nil || g.txn == nil || g.removed {
		return // not a replica here (any more): like a lost message
	}
	switch {
	case m.GetSeqQuery() != nil:
		e.seqAnswer(from, g, m)
	case m.GetSeqReply() != nil:
		e.seqReply(now, from, g, m)
	default:
		g.txn.step(e, g, now, from, m)
	}
}

// --- time ---

// tickTxns runs the cores' timers and their leaders' own entries.
func (e *Engine) tickTxns(now time.Time, raftTicked bool) {
	for _, g := range e.txnGroups() {
		if !g.removed {
			g.txn.tick(e, g, now, raftTicked)
		}
	}
	e.releaseParts(now)
	e.runSequencers(now)
}

// txnGroups are the transactional groups, by group ID: kept by link and unlink, since the
// runtime ticks every millisecond and most groups of a node may not be transactional. The
// result is a copy in a reused buffer (a tick may take a group out of service: unlink), valid
// until the next call.
func (e *Engine) txnGroups() []*group {
	e.txnBuf = append(e.txnBuf[:0], e.txnList...)
	return e.txnBuf
}

// proposeOwn appends a leader's own entry (a tick, a threshold, a decision) to g's log; a
// lost one is replaced by the core's retry.
func (e *Engine) proposeOwn(now time.Time, g *group, b []byte) {
	data, err := proto.Marshal(&peerpb.RaftCommand{Origin: e.cfg.NodeID, Version: wire.VersionToPB(e.clock.Now(now)), Command: b})
	if err != nil {
		return
	}
	e.touch(g)
	if g.rn.Propose(data) == nil {
		e.stats.TxnTicks.Add(1)
	}
	e.markDirty(g)
}

// --- reads ---

// txnReadAt serves a transactional read on this node's replica of g: at the transaction's
// snapshot of the partition (or the replica's counter, fixing it), once the replica's
// counter has reached it.
func (e *Engine) txnReadAt(now time.Time, g *group, req engine.Request) {
	if g.txn == nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q is not transactional (txn_mode none)", req.Keyspace)})
		return
	}
	s, fixed := g.txn.counter(), false
	if req.Txn != nil && g.txn.snapshots() {
		for _, sn := range req.Txn.Snapshots {
			if sn.Partition == g.key.partition {
				s, fixed = sn.Counter, true
			}
		}
	}
	if fixed && s < g.txn.floor() {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Conflict,
			"keyspace %q partition %d: the transaction's snapshot %d is older than the partition keeps (%d): restart the transaction", req.Keyspace, g.key.partition, s, g.txn.floor())})
		return
	}
	if !g.txn.snapshots() {
		// 2pc: the newest version; no snapshot to report (reads are validated at commit).
		e.out.Reads = append(e.out.Reads, e.txnReadOf(g, req, s, 0))
		return
	}
	if s > g.txn.counter() {
		e.track(req, &pendingReq{req: req, group: g})
		g.txnReads = append(g.txnReads, txnRead{id: req.ID, snapshot: s})
		return
	}
	e.out.Reads = append(e.out.Reads, e.txnReadOf(g, req, s, s))
}

// serveTxnReads serves the reads of g whose snapshot the replica has reached.
func (e *Engine) serveTxnReads(g *group) {
	if len(g.txnReads) == 0 {
		return
	}
	sc := g.txn.counter()
	kept := g.txnReads[:0]
	for _, r := range g.txnReads {
		p, ok := e.pending[r.id]
		if !ok || p.group != g {
			continue // expired
		}
		if r.snapshot > sc {
			kept = append(kept, r)
			continue
		}
		e.untrack(r.id)
		e.out.Reads = append(e.out.Reads, e.txnReadOf(g, p.req, r.snapshot, r.snapshot))
	}
	g.txnReads = kept
}

// txnReadOf is the storage read of key at snapshot s (run after the Ready's writes, which
// hold every completion up to the counter), reported as read at snapshot reported.
func (e *Engine) txnReadOf(g *group, req engine.Request, s, reported uint64) engine.Read {
	k := g.key
	fwd := e.forwards[req.ID]
	e.stats.TxnReads.Add(1)
	return engine.Read{ID: req.ID, Op: req.Op, Wrap: e.wrapForward(fwd), Run: func(store engine.Reader) engine.Result {
		rec, found, err := store.GetAt(k.keyspace, req.Key, txnSnapshotVersion(s))
		res := engine.Result{ID: req.ID, Op: req.Op, Path: PathTxnSnapshot, Txn: &engine.TxnResult{Snapshot: engine.TxnSnapshot{Partition: k.partition, Counter: reported}}}
		if req.Txn != nil && req.Txn.ReadOnly {
			res.Txn.Vector = req.Txn.Snapshots
		}
		switch {
		case err != nil:
			res.Err = errs.New(errs.Internal, "read: %v", err)
		case !found:
		case rec.Tombstone:
			res.Txn.Version = uint64(rec.Version.WallNanos)
		default:
			res.Found, res.Value, res.Txn.Version = true, rec.Value, uint64(rec.Version.WallNanos)
		}
		return res
	}}
}

// PathTxnSnapshot is the read path of a transactional read: the replica's state at the
// transaction's snapshot of the partition.
const PathTxnSnapshot = "txn-snapshot"

// encodeTxnReadArgs and decodeTxnReadArgs carry a forwarded read's snapshots
// (RaftForward.command); encodeTxnReadDone and decodeTxnReadDone its result.
func encodeTxnReadArgs(t *engine.TxnRequest) []byte {
	if t == nil || len(t.Snapshots) == 0 {
		return nil
	}
	a := &peerpb.TxnReadArgs{}
	for _, s := range t.Snapshots {
		a.Snapshots = append(a.Snapshots, &peerpb.TxnSnapshotRef{Partition: s.Partition, Counter: s.Counter})
	}
	b, _ := proto.Marshal(a)
	return b
}

func decodeTxnReadArgs(b []byte) (*engine.TxnRequest, error) {
	t := &engine.TxnRequest{}
	if len(b) == 0 {
		return t, nil
	}
	var a peerpb.TxnReadArgs
	if err := proto.Unmarshal(b, &a); err != nil {
		return nil, err
	}
	if len(a.GetSnapshots()) > txnMaxSnapshots {
		return nil, fmt.Errorf("%d snapshots (limit %d)", len(a.GetSnapshots()), txnMaxSnapshots)
	}
	for _, s := range a.GetSnapshots() {
		t.Snapshots = append(t.Snapshots, engine.TxnSnapshot{Partition: s.GetPartition(), Counter: s.GetCounter()})
	}
	return t, nil
}

// txnMaxSnapshots bounds a forwarded read's snapshots (one per partition).
const txnMaxSnapshots = config.MaxPartitions

func encodeTxnReadDone(t *engine.TxnResult) []byte {
	if t == nil {
		return nil
	}
	b, _ := proto.Marshal(&peerpb.TxnReadDone{Snapshot: &peerpb.TxnSnapshotRef{Partition: t.Snapshot.Partition, Counter: t.Snapshot.Counter}, Version: t.Version})
	return b
}

func decodeTxnReadDone(b []byte) (*engine.TxnResult, error) {
	var d peerpb.TxnReadDone
	if err := proto.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	if d.GetSnapshot() == nil {
		return nil, fmt.Errorf("no snapshot")
	}
	return &engine.TxnResult{Version: d.GetVersion(), Snapshot: engine.TxnSnapshot{Partition: d.GetSnapshot().GetPartition(), Counter: d.GetSnapshot().GetCounter()}}, nil
}
