package raft

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Snapshots: a follower too far behind for the log (or a new member, which starts empty)
// is caught up with a snapshot of the partition's data, moved as an sstable through the
// storage engine's staged files (storage.ExportPartitionState / ReplacePartition, the
// partition export/ingest ElasCass's data movement uses too). The shape is CockroachDB's:
// the Raft message is small and the data goes separately, in flow-controlled chunks.
//
//  1. etcd raft on the leader asks its storage for a snapshot. If none is prepared (or the
//     prepared one is older than the log's first index or the last configuration change),
//     a job exports the partition, and its applied state read from the same Pebble
//     snapshot, into a staged file; raft hears "temporarily unavailable" and asks again.
//  2. raft's MsgSnap carries no data, only the snapshot's identity and applied state
//     (Snapshot.Data holds a RaftSnapshotMarker). The engine does not send it; it offers the
//     snapshot (RaftSnapshotOffer, with the MsgSnap inside).
//  3. The follower pulls the file in chunks (RaftSnapshotRequest → RaftSnapshotChunk), at
//     most snapshotWindow in flight, each written to its own staged file by a job.
//  4. With the whole file on disk and read back (checked), the follower replaces its
//     partition's data (engine.Ingest: a marker first, then the data, then the applied
//     state) and, in the next Ready, steps the MsgSnap: raft installs the snapshot in its
//     log and acknowledges it. A node that stops in between finishes from the marker when
//     it starts again.
//
// Transfers are bounded (snapshotMaxOut, snapshotMaxIn per node) and abandoned after
// snapshotIdle without progress; raft then asks again.

const (
	// Chunks are e.cfg.ChunkBytes() (BwMan sizes them to the link; 512 KiB by default).
	snapshotWindow = 4
	snapshotMaxOut = 4
	snapshotMaxIn  = 4
	snapshotIdle   = 20 * time.Second
	// snapshotKeepTicks: a prepared snapshot nobody is receiving is removed after this many
	// ticks (30 s).
	snapshotKeepTicks = 600
)

// outSnapshot is a snapshot the leader has prepared (or is preparing) for its group.
type outSnapshot struct {
	id    string
	ready bool
	// state is the applied state the data was exported at; txnState the transaction state
	// saved at the same index (transactional groups).
	state    *peerpb.RaftAppliedState
	txnState []byte
	size     int64
	// doneTick is when the last transfer of it ended (or it became ready).
	doneTick uint64
}

// outTransfer is one follower's pull of the leader's snapshot.
type outTransfer struct {
	snapID       string
	index        uint64
	term         uint64           // the leader's term when raft sent the MsgSnap
	offer        *peerpb.Envelope // sent again while the follower asks for nothing (lost)
	lastActivity time.Time
	lastOffer    time.Time
}

// inTransfer is a follower's pull of its leader's snapshot into a staged file.
type inTransfer struct {
	from  uint32
	id    string
	file  string
	size  int64
	msg   *raftpb.Message // the MsgSnap, stepped once the data is installed
	state *peerpb.RaftAppliedState
	// txnState is the snapshot's transaction state (transactional groups).
	txnState []byte
	next     int64 // next offset to request
	// outstanding are the chunks requested and not yet on disk, by offset, with when they
	// were (last) asked for: lost requests or chunks are asked for again.
	outstanding map[int64]time.Time
	stored      int64 // bytes on disk
	checking    bool
	last        time.Time
}

// snapshotFor is the group storage's Snapshot: the prepared snapshot if it is recent enough,
// else ErrSnapshotTemporarilyUnavailable while a job prepares one.
func (e *Engine) snapshotFor(g *group) (*raftpb.Snapshot, error) {
	first, _ := g.log.Storage().FirstIndex()

	// Never one from before the group's last split, merge or freeze either: its range (or its
	// frozen state) is not the group's any more, and a replica whose other groups have moved
	// on would refuse it (snapshotFits).
	if s := g.snap; s != nil && s.ready && s.state.GetIndex()+1 >= first && s.state.GetIndex() >= g.lastConfIndex() && s.state.GetIndex() >= g.rangeIndex {
		var cs raftpb.ConfState
		if err := proto.Unmarshal(s.state.GetConfState(), &cs); err != nil {
			return nil, fmt.Errorf("raft: prepared snapshot's configuration: %w", err)
		}
		data, _ := proto.Marshal(&peerpb.RaftSnapshotMarker{File: s.id, State: s.state, TxnState: s.txnState})
		return &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(s.state.GetIndex()), Term: proto.Uint64(s.state.GetTerm()), ConfState: &cs}}, nil
	}
	if s := g.snap; s == nil || s.ready {
		if s != nil {
			e.retireSnapshot(g, s.id)
		}
		e.snapSeq++
		id := fmt.Sprintf("out-%016x-%d-%d", g.id, e.cfg.NodeID, e.snapSeq)
		g.snap = &outSnapshot{id: id}
		if g.txn != nil {
			// The export reads the transaction state with the data: save it at the applied
			// index now (and at every index applied until the export is ready, maybeSaveTxn).
			op, err := e.saveTxnOp(g)
			if err != nil {
				return nil, err
			}
			e.out.Raw = append(e.out.Raw, op)
		}
		e.out.Jobs = append(e.out.Jobs, exportJob{key: g.key, span: g.span(), group: g.id, file: id, txn: g.txn != nil, maxTxnBytes: e.maxTxnStateBytes()})
		e.stats.SnapshotsPrepared.Add(1)
	}
	return nil, etcdraft.ErrSnapshotTemporarilyUnavailable
}

// retireSnapshot removes a prepared snapshot's file once no transfer reads it any more.
func (e *Engine) retireSnapshot(g *group, id string) {
	for _, tr := range g.sending {
		if tr.snapID == id {
			g.retired = append(g.retired, id)
			return
		}
	}
	e.out.Jobs = append(e.out.Jobs, removeStagedJob{file: id})
}

// sweepRetired removes the files of retired snapshots whose transfers have ended.
func (e *Engine) sweepRetired(g *group) {
	kept := g.retired[:0]
	for _, id := range g.retired {
		inUse := false
		for _, tr := range g.sending {
			inUse = inUse || tr.snapID == id
		}
		if inUse {
			kept = append(kept, id)
		} else {
			e.out.Jobs = append(e.out.Jobs, removeStagedJob{file: id})
		}
	}
	g.retired = kept
}

// lastConfIndex is the index of the last configuration change g applied (a snapshot older
// than it would restore a configuration without the members added since).
func (g *group) lastConfIndex() uint64 { return g.confIndex }

// exportJob exports a group's partition into a staged file.
type exportJob struct {
	key   groupKey
	span  storage.Span
	group uint64
	file  string
	// txn: the group is transactional; its saved state (at the same index as the data) goes
	// with the snapshot, up to maxTxnBytes (it travels in the offer).
	txn         bool
	maxTxnBytes int
}

func (exportJob) Unpaced() {}

func (j exportJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	ready := &peerpb.RaftSnapshotReady{Keyspace: j.key.keyspace, Partition: j.key.partition, SnapshotId: j.file}
	raw := [][]byte{appliedKey(j.group)}
	if j.txn {
		raw = append(raw, txnStateKey(j.group))
	}
	stats, vals, err := store.ExportSpanState(j.span, j.file, raw)
	switch {
	case err != nil:
		ready.Error = err.Error()
	case vals[0] == nil:
		ready.Error = "the group has no applied state yet"
	case j.txn && vals[1] == nil:
		ready.Error = "the group has no transaction state yet"
	case j.txn && len(vals[1]) > j.maxTxnBytes:
		ready.Error = fmt.Sprintf("the group's transaction state is %d bytes, above the %d a snapshot offer carries", len(vals[1]), j.maxTxnBytes)
	default:
		var st peerpb.RaftAppliedState
		if err := proto.Unmarshal(vals[0], &st); err != nil {
			ready.Error = fmt.Sprintf("applied state: %v", err)
		} else if st.GetGeneration() != 0 && (!bytes.Equal(st.GetStart(), j.span.Start) || !bytes.Equal(st.GetEnd(), j.span.End)) {
			// A split or merge applied between the job's start and its read: the data
			// exported is not the state's range. Raft asks again.
			ready.Error = fmt.Sprintf("the group's range changed to [%q, %q) while the snapshot of %s was taken", st.GetStart(), st.GetEnd(), j.span)
		} else if txnAt, ok := txnStateIndex(vals, j.txn); j.txn && (!ok || txnAt != st.GetIndex()) {
			// Saved at another index than the data's (an apply between the save and the
			// export's read): raft asks again.
			ready.Error = fmt.Sprintf("the transaction state (index %d) and the data (index %d) differ", txnAt, st.GetIndex())
		} else {
			ready.State, ready.Size = &st, stats.Bytes
			if j.txn {
				ready.TxnState = vals[1]
			}
		}
	}
	return []*peerpb.Envelope{{From: self, To: self, Msg: &peerpb.Envelope_RaftSnapshotReady{RaftSnapshotReady: ready}}}, nil
}

// txnStateIndex is the index of the transaction state among an export's raw values.
func txnStateIndex(vals [][]byte, txn bool) (uint64, bool) {
	if !txn {
		return 0, true
	}
	var st peerpb.TxnSavedState
	if err := proto.Unmarshal(vals[1], &st); err != nil {
		return 0, false
	}
	return st.GetIndex(), true
}

// maxTxnStateBytes bounds a transaction state sent with a snapshot: it rides in the offer's
// Raft message, with the marker's other fields.
func (e *Engine) maxTxnStateBytes() int {
	return wire.MaxRaftMessageBytes(e.cfg.Limits) - 64<<10
}

// stepSnapshotReady takes the export job's result.
func (e *Engine) stepSnapshotReady(now time.Time, r *peerpb.RaftSnapshotReady) {
	g := e.groups[groupKey{r.GetKeyspace(), r.GetPartition()}]
	if g == nil || g.snap == nil || g.snap.id != r.GetSnapshotId() || g.snap.ready {
		e.out.Jobs = append(e.out.Jobs, removeStagedJob{file: r.GetSnapshotId()})
		return
	}
	if r.GetError() != "" {
		e.stats.SnapshotErrors.Add(1)
		g.snap = nil // asked again at raft's next attempt
		return
	}
	g.snap.ready, g.snap.state, g.snap.size, g.snap.doneTick = true, r.GetState(), r.GetSize(), e.ticks
	g.snap.txnState = r.GetTxnState()
	e.markDirty(g)
}

// removeStagedJob removes a staged file.
type removeStagedJob struct{ file string }

func (removeStagedJob) Unpaced() {}

func (j removeStagedJob) Run(store engine.Store, _ uint32) ([]*peerpb.Envelope, error) {
	return nil, store.RemoveStaged(j.file)
}

// startTransfer offers the snapshot of raft's MsgSnap to its follower.
func (e *Engine) startTransfer(g *group, m *raftpb.Message) {
	to := uint32(m.GetTo())

	var mk peerpb.RaftSnapshotMarker
	if err := proto.Unmarshal(m.GetSnapshot().GetData(), &mk); err != nil || g.snap == nil || mk.GetFile() != g.snap.id {
		g.rn.ReportSnapshot(uint64(to), etcdraft.SnapshotFailure)
		return
	}
	if tr := g.sending[to]; tr != nil && tr.snapID == mk.GetFile() && tr.term == m.GetTerm() {
		return // raft asked again; the transfer is under way
	}
	if until, ok := g.declined[to]; ok && e.lastNow.Before(until) {
		// The follower declined a snapshot of this group moments ago (repartition.go).
		g.rn.ReportSnapshot(uint64(to), etcdraft.SnapshotFailure)
		return
	}
	if e.outTransfers() >= snapshotMaxOut {
		g.rn.ReportSnapshot(uint64(to), etcdraft.SnapshotFailure)
		e.stats.SnapshotsDeferred.Add(1)
		return
	}
	b, err := proto.Marshal(m)
	if err != nil {
		g.rn.ReportSnapshot(uint64(to), etcdraft.SnapshotFailure)
		return
	}
	if g.sending == nil {
		g.sending = map[uint32]*outTransfer{}
	}
	so := &peerpb.RaftSnapshotOffer{Keyspace: g.key.keyspace, SnapshotId: mk.GetFile(), Size: g.snap.size, Message: b}
	so.Partition, so.Group = e.wireRef(g)
	offer := &peerpb.Envelope{From: e.cfg.NodeID, To: to, Msg: &peerpb.Envelope_RaftSnapshotOffer{RaftSnapshotOffer: so}}
	g.sending[to] = &outTransfer{snapID: mk.GetFile(), index: mk.GetState().GetIndex(), term: m.GetTerm(), offer: offer, lastActivity: e.lastNow, lastOffer: e.lastNow}
	e.out.Messages = append(e.out.Messages, offer)
	e.stats.SnapshotsSent.Add(1)
}

func (e *Engine) outTransfers() int {
	n := 0
	for _, g := range e.order {
		n += len(g.sending)
	}
	return n
}

func (e *Engine) inTransfers() int {
	n := 0
	for _, g := range e.order {
		if g.receiving != nil {
			n++
		}
	}
	return n
}

// stepOffer starts pulling an offered snapshot.
func (e *Engine) stepOffer(now time.Time, from uint32, o *peerpb.RaftSnapshotOffer) {
	g := e.groups[groupKey{o.GetKeyspace(), groupOf(o.GetPartition(), o.Group)}]
	if g == nil {
		return
	}
	var m raftpb.Message
	if err := proto.Unmarshal(o.GetMessage(), &m); err != nil || m.GetType() != raftpb.MessageType_MsgSnap || m.GetFrom() != uint64(from) || m.GetTo() != uint64(e.cfg.NodeID) {
		return
	}
	var mk peerpb.RaftSnapshotMarker
	if err := proto.Unmarshal(m.GetSnapshot().GetData(), &mk); err != nil || mk.GetFile() != o.GetSnapshotId() || mk.GetState() == nil {
		return
	}
	if !e.snapshotUseful(g, &m, mk.GetState()) {
		// From a leader of an older term, or not ahead of what this replica has committed:
		// raft would not install it. Raft answers the MsgSnap with where this replica is.
		_ = g.rn.Step(&m)
		e.markDirty(g)
		return
	}
	if rx := g.receiving; rx != nil {
		if rx.id == o.GetSnapshotId() {
			e.resendRequests(now, g, true) // the leader offers again: our requests were lost
			return
		}
		if rx.from == from || rx.checking || m.GetTerm() < rx.msg.GetTerm() {
			return // one at a time; the leader offers again after this one ends
		}
		// Another leader, of the same term or a later one, offers: the transfer under way
		// comes from a node that has lost its leadership, perhaps because a move removed it
		// from the group, and then its chunks never come (the runtime drops messages about a
		// partition to a node that is no longer its replica). Waiting for snapshotIdle would
		// hold up the group: a joint configuration whose outgoing majority needs this
		// replica cannot leave (the simulator found this: seed 127 with moves).
		e.abortReceive(g, "superseded by a newer leader's snapshot")
	}
	if mk.GetState().GetIndex() <= g.applied {
		// Nothing to install: raft answers with where this replica is.
		_ = g.rn.Step(&m)
		e.markDirty(g)
		return
	}
	if _, ok, wait := e.snapshotFits(g, mk.GetState()); !ok {
		if wait && e.holdOffer(now, g, from, o) {
			return // a read index decides in a moment (repartition.go, leftSettled)
		}
		// Another group of this node is not done with the snapshot's range (it has yet to
		// apply the split that founds this group, or is newer): the offer is declined, so
		// that the leader's transfer slot goes to a snapshot that can be taken (the one
		// that brings the other group up to date may well be next), and offered again
		// later (repartition.go).
		e.stats.SnapshotsRefused.Add(1)
		r := &peerpb.RaftSnapshotRequest{Keyspace: g.key.keyspace, SnapshotId: o.GetSnapshotId(), Length: 1, Decline: true}
		r.Partition, r.Group = e.wireRef(g)
		e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: from, Msg: &peerpb.Envelope_RaftSnapshotRequest{RaftSnapshotRequest: r}})
		return
	}
	if e.inTransfers() >= snapshotMaxIn {
		e.stats.SnapshotsDeferred.Add(1)
		return
	}
	if g.txn != nil && len(mk.GetTxnState()) == 0 {
		return // a transactional group's snapshot without its transaction state: useless
	}
	g.receiving = &inTransfer{from: from, id: o.GetSnapshotId(), file: "in-" + o.GetSnapshotId(), size: o.GetSize(), msg: &m, state: mk.GetState(), txnState: mk.GetTxnState(),
		outstanding: map[int64]time.Time{}, last: now}
	e.unquiesce(g, false)
	e.stats.SnapshotsReceived.Add(1)
	e.pullChunks(g)
}

// snapshotUseful reports whether raft would install the snapshot of m now: it comes from a
// leader of this replica's term or a later one, and is ahead of what the replica has
// committed (etcd raft's restore ignores anything else). Only then is the replica's data
// replaced.
func (e *Engine) snapshotUseful(g *group, m *raftpb.Message, st *peerpb.RaftAppliedState) bool {
	bs := g.rn.BasicStatus()

	return m.GetTerm() >= bs.HardState.GetTerm() && st.GetIndex() > bs.HardState.GetCommit() && st.GetIndex() > g.applied
}

// pullChunks requests chunks up to the window.
func (e *Engine) pullChunks(g *group) {
	rx := g.receiving
	if rx.size == 0 && !rx.checking {
		e.checkTransfer(g)
		return
	}
	for len(rx.outstanding) < snapshotWindow && rx.next < rx.size {
		n := min(e.cfg.ChunkBytes(), rx.size-rx.next)
		if !e.cfg.AllowPull(e.lastNow, n) {
			return // BwMan's inbound bucket is empty: the next tick asks again
		}
		e.requestChunk(g, rx.next)
		rx.outstanding[rx.next] = e.lastNow
		rx.next += n
	}
}

func (e *Engine) requestChunk(g *group, offset int64) {
	rx := g.receiving
	n := min(e.cfg.ChunkBytes(), rx.size-offset)
	r := &peerpb.RaftSnapshotRequest{Keyspace: g.key.keyspace, SnapshotId: rx.id, Offset: offset, Length: int32(n)}
	r.Partition, r.Group = e.wireRef(g)
	e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: rx.from, Msg: &peerpb.Envelope_RaftSnapshotRequest{RaftSnapshotRequest: r}})
}

// resendRequests asks again for the chunks outstanding for longer than the group's
// election timeout (a request or its chunk was lost), or for all of them with all.
func (e *Engine) resendRequests(now time.Time, g *group, all bool) {
	rx := g.receiving
	for _, off := range slices.Sorted(maps.Keys(rx.outstanding)) {
		if all || now.Sub(rx.outstanding[off]) > g.opts.ElectionTimeout {
			e.requestChunk(g, off)
			rx.outstanding[off] = now
		}
	}
}

// stepSnapshotRequest serves a chunk of a snapshot this node is sending.
func (e *Engine) stepSnapshotRequest(now time.Time, from uint32, r *peerpb.RaftSnapshotRequest) {
	g := e.groups[groupKey{r.GetKeyspace(), groupOf(r.GetPartition(), r.Group)}]
	var tr *outTransfer
	if g != nil {
		tr = g.sending[from]
	}
	if r.GetDecline() {
		if tr != nil && tr.snapID == r.GetSnapshotId() {
			delete(g.sending, from)
			g.rn.ReportSnapshot(uint64(from), etcdraft.SnapshotFailure)
			if g.declined == nil {
				g.declined = map[uint32]time.Time{}
			}
			g.declined[from] = now.Add(g.opts.ElectionTimeout)
			e.markDirty(g)
		}
		return
	}
	if tr == nil || tr.snapID != r.GetSnapshotId() {
		e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: from, Msg: &peerpb.Envelope_RaftSnapshotChunk{RaftSnapshotChunk: &peerpb.RaftSnapshotChunk{
			Keyspace: r.GetKeyspace(), Partition: r.GetPartition(), Group: r.Group, SnapshotId: r.GetSnapshotId(), Offset: r.GetOffset(), Error: "no such snapshot transfer (ended or restarted)"}}})
		return
	}
	tr.lastActivity = now
	wp, wg := e.wireRef(g)
	e.out.Jobs = append(e.out.Jobs, readChunkJob{key: g.key, wirePartition: wp, wireGroup: wg, to: from, file: tr.snapID, offset: r.GetOffset(), length: int(r.GetLength())})
}

// readChunkJob reads a chunk of a staged snapshot and sends it.
type readChunkJob struct {
	key groupKey
	// wirePartition and wireGroup name the group in the chunk (wire.go).
	wirePartition uint32
	wireGroup     *uint32
	to            uint32
	file          string
	offset        int64
	length        int
}

func (readChunkJob) Unpaced() {}

func (j readChunkJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	c := &peerpb.RaftSnapshotChunk{Keyspace: j.key.keyspace, Partition: j.wirePartition, Group: j.wireGroup, SnapshotId: j.file, Offset: j.offset}
	if b, err := store.ReadStaged(j.file, j.offset, j.length); err != nil {
		c.Error = err.Error()
	} else {
		c.Data = b
	}
	return []*peerpb.Envelope{{From: self, To: j.to, Msg: &peerpb.Envelope_RaftSnapshotChunk{RaftSnapshotChunk: c}}}, nil
}

// stepChunk writes a received chunk to the staged file.
func (e *Engine) stepChunk(now time.Time, from uint32, c *peerpb.RaftSnapshotChunk) {
	g := e.groups[groupKey{c.GetKeyspace(), groupOf(c.GetPartition(), c.Group)}]
	if g == nil || g.receiving == nil || g.receiving.id != c.GetSnapshotId() || g.receiving.from != from {
		return
	}
	rx := g.receiving
	if _, ok := rx.outstanding[c.GetOffset()]; !ok {
		return // a duplicate of a chunk already stored
	}
	if c.GetError() != "" || c.GetOffset()+int64(len(c.GetData())) > rx.size {
		e.abortReceive(g, "the leader: "+c.GetError())
		return
	}
	rx.last = now
	e.out.Jobs = append(e.out.Jobs, writeChunkJob{key: g.key, file: rx.file, id: rx.id, offset: c.GetOffset(), data: c.GetData()})
}

// writeChunkJob writes a chunk into the receiver's staged file.
type writeChunkJob struct {
	key    groupKey
	file   string
	id     string
	offset int64
	data   []byte
}

func (writeChunkJob) Unpaced() {}

func (j writeChunkJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	s := &peerpb.RaftSnapshotStored{Keyspace: j.key.keyspace, Partition: j.key.partition, SnapshotId: j.id, Offset: j.offset, Length: int32(len(j.data))}
	if err := store.WriteStaged(j.file, j.offset, j.data); err != nil {
		s.Error = err.Error()
	}
	return []*peerpb.Envelope{{From: self, To: self, Msg: &peerpb.Envelope_RaftSnapshotStored{RaftSnapshotStored: s}}}, nil
}

// checkJob reads the whole received file back before it is installed, and hands the
// records to state machines that keep state in memory.
type checkJob struct {
	key      groupKey
	span     storage.Span
	file     string
	id       string
	inMemory bool
}

func (checkJob) Unpaced() {}

func (j checkJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	s := &peerpb.RaftSnapshotStored{Keyspace: j.key.keyspace, Partition: j.key.partition, SnapshotId: j.id, Checked: true}
	if _, found, err := store.StagedSize(j.file); err != nil || !found {
		// An empty partition's snapshot has no bytes: write an empty file (a valid empty
		// sstable is never empty, so a missing file means nothing was sent).
		if err == nil {
			err = fmt.Errorf("staged file %s is missing", j.file)
		}
		s.Error = err.Error()
		return []*peerpb.Envelope{{From: self, To: self, Msg: &peerpb.Envelope_RaftSnapshotStored{RaftSnapshotStored: s}}}, nil
	}
	_, err := store.CheckStaged(j.file, j.span, func(r storage.Record) {
		if j.inMemory {
			s.Records = append(s.Records, wire.RecordToPB(r))
		}
	})
	if err != nil {
		s.Error = err.Error()
		s.Records = nil
	}
	return []*peerpb.Envelope{{From: self, To: self, Msg: &peerpb.Envelope_RaftSnapshotStored{RaftSnapshotStored: s}}}, nil
}

// stepStored takes a chunk-written (or file-checked) note.
func (e *Engine) stepStored(now time.Time, s *peerpb.RaftSnapshotStored) {
	g := e.groups[groupKey{s.GetKeyspace(), s.GetPartition()}]
	if g == nil || g.receiving == nil || g.receiving.id != s.GetSnapshotId() {
		return
	}
	rx := g.receiving
	if s.GetError() != "" {
		e.abortReceive(g, s.GetError())
		return
	}
	rx.last = now
	if !s.GetChecked() {
		if _, ok := rx.outstanding[s.GetOffset()]; !ok {
			return // stored twice (a duplicated chunk): counted once
		}
		delete(rx.outstanding, s.GetOffset())
		rx.stored += int64(s.GetLength())
		if rx.stored >= rx.size {
			e.checkTransfer(g)
			return
		}
		e.pullChunks(g)
		return
	}
	// The file is whole and sound. Raft is given the snapshot first: if it takes it (its
	// commit index moves to the snapshot's), the partition's data is replaced in this Ready
	// and raft's own install of the snapshot in the log (its next Ready) waits until after
	// (installing). If it does not (a newer term meanwhile, or the replica has caught up
	// through the log while the file came), nothing is replaced: replacing the data then
	// would move the replica back.
	var recs []storage.Record
	if g.sm.InMemory() {
		recs = make([]storage.Record, 0, len(s.GetRecords()))
		for _, r := range s.GetRecords() {
			rec, err := wire.RecordFromPB(r)
			if err != nil {
				e.abortReceive(g, err.Error())
				return
			}
			recs = append(recs, rec)
		}
	}
	g.receiving = nil
	drop, fits, _ := e.snapshotFits(g, rx.state)
	if !fits {
		// The groups of this node changed while the file came (repartition.go).
		e.stats.SnapshotsRefused.Add(1)
		e.out.Jobs = append(e.out.Jobs, removeStagedJob{file: rx.file})
		return
	}
	useful := rx.state.GetIndex() > g.applied && e.snapshotUseful(g, rx.msg, rx.state)
	_ = g.rn.Step(rx.msg)
	e.markDirty(g)
	if !useful || g.rn.BasicStatus().HardState.GetCommit() < rx.state.GetIndex() {
		e.out.Jobs = append(e.out.Jobs, removeStagedJob{file: rx.file})
		return
	}
	if g.sm.InMemory() {
		err := g.sm.Load(g.key.ref(), func(fn func(storage.Record) bool) error {
			for _, r := range recs {
				if !fn(r) {
					break
				}
			}
			return nil
		})
		if err != nil {
			// Raft has the snapshot in memory but its data cannot be loaded: take the group
			// out of service rather than run on a state machine that disagrees with it.
			e.fail(g, fmt.Errorf("load the state machine from a snapshot: %w", err))
			return
		}
	}
	if g.txn != nil {
		// The core is the snapshot's from now on (what the old one had not asked for yet is
		// dropped with it: the snapshot's state covers it).
		if _, err := e.restoreTxn(g, rx.txnState, now); err != nil {
			e.fail(g, fmt.Errorf("restore the transaction state from a snapshot: %w", err))
			return
		}
	}
	// Groups of this node the snapshot supersedes (merged into this group since) go first,
	// then the snapshot's range replaces what this node holds of it, and the group takes
	// the snapshot's range.
	e.supersede(drop, g)
	e.takeSnapshotRange(g, rx.state)
	ing := e.installOp(g, rx.file, rx.state)
	if g.txn != nil {
		// Saved with the marker, before the data is replaced: a restart that redoes the
		// install restores the snapshot's core.
		ing.Before = append(ing.Before, storage.RawOp{Key: txnStateKey(g.id), Value: rx.txnState})
	}
	e.out.Ingests = append(e.out.Ingests, ing)
	// The state machine's at-most-once record and version order continue from the
	// snapshot's (its applied index, term and configuration are taken when raft's Ready
	// installs it).
	g.last = wire.VersionFromPB(rx.state.GetLastVersion())
	clear(g.origins)
	for _, o := range rx.state.GetOrigins() {
		g.origins[o.GetNode()] = wire.VersionFromPB(o.GetVersion())
	}
	// This node's writes the snapshot may include never apply here through the log: their
	// results are unknown (as CockroachDB fails such proposals as ambiguous).
	e.failCoveredWrites(g)
	g.installing = true
	e.installing = append(e.installing, g)
	e.stats.SnapshotsInstalled.Add(1)
}

// failCoveredWrites fails, as ambiguous, this node's writes on g whose command a snapshot
// just installed may include (its version is not above this node's last applied one).
func (e *Engine) failCoveredWrites(g *group) {
	last, ok := g.origins[e.cfg.NodeID]
	if !ok {
		return
	}
	for _, id := range e.pendingIDs(g) {
		p := e.pending[id]
		if p.data == nil {
			continue
		}
		var cmd peerpb.RaftCommand
		if proto.Unmarshal(p.data, &cmd) != nil || last.Less(wire.VersionFromPB(cmd.GetVersion())) {
			continue
		}
		e.untrack(id)
		e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(errs.Timeout,
			"keyspace %q partition %d: this replica was caught up by a snapshot that may include the write; it may have applied", g.key.keyspace, g.key.partition)})
	}
}

// checkTransfer reads the received file back (a job).
func (e *Engine) checkTransfer(g *group) {
	rx := g.receiving
	rx.checking = true
	if rx.size == 0 {
		// Nothing to pull (cannot happen with sstables, which always have a footer), but
		// never install what was not received.
		e.abortReceive(g, "the offered snapshot is empty")
		return
	}
	e.out.Jobs = append(e.out.Jobs, checkJob{key: g.key, span: snapshotSpan(g, rx.state), file: rx.file, id: rx.id, inMemory: g.sm.InMemory()})
}

// installOp replaces g's partition with the staged file at state: a marker first (so a
// restart finishes the job), then the data, then the applied state with the marker gone.
func (e *Engine) installOp(g *group, file string, state *peerpb.RaftAppliedState) engine.Ingest {
	mk, _ := proto.Marshal(&peerpb.RaftSnapshotMarker{File: file, State: state})
	st, _ := proto.Marshal(state)
	return engine.Ingest{Span: snapshotSpan(g, state), File: file,
		Before: []storage.RawOp{{Key: markerKey(g.id), Value: mk}},
		After:  []storage.RawOp{{Key: appliedKey(g.id), Value: st}, {Key: markerKey(g.id), Delete: true}}}
}

// snapshotSpan is the range a snapshot of g at state holds: the state's (a snapshot taken
// before ranges were stored holds the group's partition's).
func snapshotSpan(g *group, state *peerpb.RaftAppliedState) storage.Span {
	if state.GetGeneration() == 0 {
		return g.desc.Span(g.key.keyspace)
	}
	sp := storage.Span{Keyspace: g.key.keyspace, Start: state.GetStart()}
	if sp.Start == nil {
		sp.Start = []byte{}
	}
	if len(state.GetEnd()) > 0 {
		sp.End = state.GetEnd()
	}
	return sp
}

func (e *Engine) abortReceive(g *group, why string) {
	rx := g.receiving
	g.receiving = nil
	e.out.Jobs = append(e.out.Jobs, removeStagedJob{file: rx.file})
	e.stats.SnapshotErrors.Add(1)
	_ = why
}

// expireTransfers abandons transfers without progress, and removes prepared snapshots
// nobody needs.
func (e *Engine) expireTransfers(now time.Time) {
	for _, g := range e.order {
		if g.receiving == nil && len(g.sending) == 0 {
			continue // the common case, cheap for thousands of idle groups
		}
		if rx := g.receiving; rx != nil {
			if now.Sub(rx.last) > snapshotIdle {
				e.abortReceive(g, "no progress")
			} else if !rx.checking {
				e.resendRequests(now, g, false)
				if rx.size > 0 {
					e.pullChunks(g) // chunks the inbound bucket held back
				}
			}
		}
		for _, to := range slices.Sorted(maps.Keys(g.sending)) {
			tr := g.sending[to]
			done := false
			g.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
				if id == uint64(to) && pr.Match >= tr.index {
					done = true
				}
			})
			switch {
			case done:
				delete(g.sending, to)
				g.rn.ReportSnapshot(uint64(to), etcdraft.SnapshotFinish)
				if g.snap != nil {
					g.snap.doneTick = e.ticks
				}
			case now.Sub(tr.lastActivity) > snapshotIdle:
				delete(g.sending, to)
				g.rn.ReportSnapshot(uint64(to), etcdraft.SnapshotFailure)
				e.stats.SnapshotErrors.Add(1)
			case now.Sub(tr.lastActivity) > g.opts.ElectionTimeout && now.Sub(tr.lastOffer) > g.opts.ElectionTimeout:
				// The follower asks for nothing: the offer (or everything since) was lost.
				tr.lastOffer = now
				e.out.Messages = append(e.out.Messages, tr.offer)
			}
		}
		e.sweepRetired(g)
		if s := g.snap; s != nil && s.ready && len(g.sending) == 0 && e.ticks-s.doneTick > snapshotKeepTicks {
			e.out.Jobs = append(e.out.Jobs, removeStagedJob{file: s.id})
			g.snap = nil
		}
	}
}
