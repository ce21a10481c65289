package raft

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Read paths of raft reads.
const (
	PathReadIndex = "read-index" // linearizable: served once applied up to the leader's commit index
	PathStale     = "stale"      // the replica's applied state, no round trip
)

// Limits of one node's Raft engine.
const (
	// maxPending bounds the client requests one engine tracks (proposals and reads).
	maxPending = 100_000
	// maxSizePerMsg bounds one append message's entries (etcd raft MaxSizePerMsg); the
	// transport's limit allows it (wire.MaxRaftMessageBytes).
	maxSizePerMsg = 1 << 20
	// maxInflightMsgs bounds the append messages in flight to one follower (MsgApp flow
	// control: pipelining up to this many, then waiting for acknowledgements).
	maxInflightMsgs = 256
	// maxUncommittedBytes bounds a leader's uncommitted log: beyond it proposals are
	// dropped (the client gets a clear error) rather than queued without limit.
	maxUncommittedBytes = 64 << 20
	// retainEntries is how much applied log a replica keeps for followers that lag; older
	// entries are compacted every compactEvery applied entries. A follower further behind
	// than that waits for a snapshot, which this version cannot send yet (the group keeps
	// working with the others; the lag is visible in raft status).
	retainEntries = 50_000
	compactEvery  = 10_000
	// dedupWindow: a command applied again within this many log entries of its first copy
	// is a duplicate (a proposal message delivered twice, a retry) and is skipped. Every
	// replica decides alike: the window is measured in log indexes, and every replica keeps
	// at least this much applied log (dedupWindow < retainEntries) to rebuild it at start.
	dedupWindow = 10_000
	// steerEveryTicks: how often leaders outside the leader region try to hand over (200 ms).
	steerEveryTicks = 4
	// maxTicksPerCall bounds the ticks one Tick call replays after a long pause.
	maxTicksPerCall = 100
)

// Mutations are Raft's deliberately broken variants, each caught by the simulator's
// linearizability checker.
var Mutations = map[string]string{
	"stale-read-as-linearizable": "linearizable reads are served from the replica's applied state without ReadIndex (a partitioned ex-leader returns stale values)",
	"apply-before-commit":        "a replica applies entries as soon as they are in its log, before a majority has them (a minority's writes become visible, then are lost)",
}

// Engine is the Raft protocol on one node: a RawNode per partition this node replicates
// (multi-raft), their logs in storage raw keys, their applied writes in storage records.
// Not safe for concurrent use (engine.Engine).
type Engine struct {
	cfg   engine.Config
	store engine.Reader
	clock *hlc.HLC
	pmap  *placement.Map
	log   etcdraft.Logger

	groups map[groupKey]*group
	order  []*group            // by group ID: deterministic iteration
	byID   map[uint64]groupKey // group IDs are hashes: collisions are refused

	pending map[uint64]*pendingReq // client requests by request ID
	// broken are the groups this node should replicate but could not set up (or stopped
	// after an internal error), with why: their requests fail with that reason.
	broken   map[groupKey]string
	nextTick time.Time
	ticks    uint64 // Raft ticks so far
	lastNow  time.Time

	out engine.Ready
}

type groupKey struct {
	keyspace  string
	partition uint32
}

type group struct {
	key   groupKey
	id    uint64
	peers []uint32
	opts  config.RaftOptions
	// preferred are the replicas in the leader region (config.RaftOptions.LeaderRegion).
	preferred []uint32
	rn        *etcdraft.RawNode
	log       *LogStore
	applied   uint64
	last      hlc.Version // version of the last applied write: versions grow in log order
	sinceCut  uint64      // entries applied since the last compaction
	dirty     bool        // may have a Ready
	removed   bool        // out of service (Engine.remove)
	lead      uint64      // the leader last seen in a Ready
	// waiting are linearizable reads whose read index is known but not applied yet.
	waiting []waitingRead
	// seen are the commands applied in the last dedupWindow entries, oldest first in
	// seenOrder.
	seen      map[commandID]uint64
	seenOrder []seenEntry
}

// commandID identifies a client write: its proposer and the version the proposer stamped
// (unique per proposer: its hybrid logical clock never repeats a version).
type commandID struct {
	origin  uint32
	version hlc.Version
}

type seenEntry struct {
	index uint64
	id    commandID
}

// duplicate reports whether cmd at index was applied within the window, and remembers it.
func (g *group) duplicate(index uint64, id commandID) bool {
	for len(g.seenOrder) > 0 && g.seenOrder[0].index+dedupWindow < index {
		if g.seen[g.seenOrder[0].id] == g.seenOrder[0].index {
			delete(g.seen, g.seenOrder[0].id)
		}
		g.seenOrder = g.seenOrder[1:]
	}
	if first, ok := g.seen[id]; ok && first+dedupWindow >= index {
		return true
	}
	g.seen[id] = index
	g.seenOrder = append(g.seenOrder, seenEntry{index, id})
	return false
}

type waitingRead struct {
	index uint64
	id    uint64
}

type pendingReq struct {
	req   engine.Request
	group *group
	// data is a write's encoded command, proposed again when the group's leader changes
	// (a leader that steps down or hands over drops the proposals it had not appended; the
	// copies are deduplicated at apply).
	data []byte
	// heldSince is when a request that found no leader was held (zero: proposed).
	heldSince time.Time
}

// NewEngine returns node cfg.NodeID's Raft engine; SetPlacement creates its groups.
func NewEngine(cfg engine.Config, store engine.Reader) *Engine {
	if cfg.MaxClockSkew <= 0 {
		cfg.MaxClockSkew = time.Minute
	}
	return &Engine{
		cfg:     cfg,
		store:   store,
		clock:   hlc.NewHLC(cfg.NodeID, cfg.MaxClockSkew),
		log:     discardLogger{},
		groups:  map[groupKey]*group{},
		byID:    map[uint64]groupKey{},
		pending: map[uint64]*pendingReq{},
		broken:  map[groupKey]string{},
	}
}

// groupID names a partition's group in storage: a hash of keyspace and partition, the same
// on every node.
func groupID(k groupKey) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k.keyspace))
	h.Write([]byte{0, byte(k.partition >> 24), byte(k.partition >> 16), byte(k.partition >> 8), byte(k.partition)})
	return h.Sum64() | 1 // never 0
}

func appliedKey(group uint64) []byte { return stateKey(group, 'a') }

// SetPlacement creates the groups of the raft keyspaces' partitions this node replicates.
// Membership changes of existing groups are not driven from placement yet.
func (e *Engine) SetPlacement(m *placement.Map) {
	e.pmap = m
	for _, name := range slices.Sorted(maps.Keys(m.Keyspaces)) {
		ks := m.Keyspaces[name]
		if ks.Spec.Protocol != config.ProtocolRaft {
			continue
		}
		opts, err := config.RaftOptionsOf(ks.Spec.Options)
		if err != nil {
			for _, p := range ks.Partitions {
				e.broken[groupKey{name, p.ID}] = err.Error()
			}
			continue
		}
		for _, p := range ks.Partitions {
			k := groupKey{name, p.ID}
			if _, ok := e.groups[k]; ok || !p.HasReplica(e.cfg.NodeID) {
				continue
			}
			if err := e.addGroup(k, p.Replicas, opts); err != nil {
				e.broken[k] = err.Error()
				continue
			}
			region := opts.LeaderRegion
			if region == "" && len(ks.Spec.Regions) > 0 {
				region = ks.Spec.Regions[0]
			}
			g := e.groups[k]
			g.preferred = g.preferred[:0]
			for _, r := range p.Replicas {
				if e.regionOf(r) == region {
					g.preferred = append(g.preferred, r)
				}
			}
			// The first preferred replica campaigns at once, so leaders start where they
			// belong instead of after an election timeout somewhere else (with PreVote, a
			// campaign cannot disturb a leader the others still hear from).
			if len(g.preferred) > 0 && g.preferred[0] == e.cfg.NodeID {
				_ = g.rn.Campaign()
			}
		}
	}
}

// addGroup loads (or bootstraps) a group. A new group starts from a snapshot at index 1 whose
// configuration is the partition's replicas: every replica bootstraps the same way, so they
// agree on the initial log without a round of configuration changes.
func (e *Engine) addGroup(k groupKey, replicas []uint32, opts config.RaftOptions) error {
	id := groupID(k)
	if other, dup := e.byID[id]; dup {
		return fmt.Errorf("group id %x collides with keyspace %s partition %d", id, other.keyspace, other.partition)
	}
	ls, err := LoadLogStore(e.store, id)
	if err != nil {
		return err
	}
	g := &group{key: k, id: id, peers: slices.Clone(replicas), opts: opts, log: ls, seen: map[commandID]uint64{}}
	if b, ok, err := e.store.GetRaw(appliedKey(id)); err != nil {
		return fmt.Errorf("read applied state: %w", err)
	} else if ok {
		if len(b) != 8+hlc.EncodedVersionLen {
			return fmt.Errorf("applied state of %d bytes (%w)", len(b), storage.ErrCorrupt)
		}
		g.applied = binary.BigEndian.Uint64(b)
		if g.last, err = hlc.DecodeVersion(b[8:]); err != nil {
			return fmt.Errorf("applied version: %w", err)
		}
	}
	if last, _ := ls.Storage().LastIndex(); last == 0 {
		voters := make([]uint64, len(replicas))
		for i, r := range replicas {
			voters[i] = uint64(r)
		}
		snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(1), Term: proto.Uint64(1), ConfState: &raftpb.ConfState{Voters: voters}}}
		ops, err := ls.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(1)}, snap, nil)
		if err != nil {
			return err
		}
		e.out.Raw = append(e.out.Raw, ops...)
		g.applied = 1
	}
	if err := g.rebuildSeen(); err != nil {
		return err
	}
	hs, _, err := ls.Storage().InitialState()
	if err != nil {
		return fmt.Errorf("initial state: %w", err)
	}
	if g.applied > hs.GetCommit() && e.cfg.Mutation == "" {
		return fmt.Errorf("applied index %d above the commit index %d (%w)", g.applied, hs.GetCommit(), storage.ErrCorrupt)
	}
	rn, err := etcdraft.NewRawNode(&etcdraft.Config{
		ID:                        uint64(e.cfg.NodeID),
		ElectionTick:              opts.ElectionTicks(),
		HeartbeatTick:             opts.HeartbeatTicks(),
		Storage:                   snapshotlessStorage{ls.Storage()},
		Applied:                   min(g.applied, hs.GetCommit()),
		MaxSizePerMsg:             maxSizePerMsg,
		MaxInflightMsgs:           maxInflightMsgs,
		MaxUncommittedEntriesSize: maxUncommittedBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            etcdraft.ReadOnlySafe,
		Logger:                    e.log,
	})
	if err != nil {
		return fmt.Errorf("raft node: %w", err)
	}
	g.rn = rn
	g.dirty = true
	e.groups[k] = g
	e.byID[id] = k
	i, _ := slices.BinarySearchFunc(e.order, id, func(a *group, id uint64) int { return cmpU64(a.id, id) })
	e.order = slices.Insert(e.order, i, g)
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rebuildSeen reads the commands of the last dedupWindow applied entries from the log.
func (g *group) rebuildSeen() error {
	st := g.log.Storage()
	first, _ := st.FirstIndex()
	lo := max(first, g.applied+1-min(g.applied, dedupWindow))
	if g.applied < lo {
		return nil
	}
	ents, err := st.Entries(lo, g.applied+1, ^uint64(0))
	if err != nil {
		return fmt.Errorf("read applied log [%d, %d]: %w", lo, g.applied, err)
	}
	for _, ent := range ents {
		if ent.GetType() != raftpb.EntryType_EntryNormal || len(ent.GetData()) == 0 {
			continue
		}
		var cmd peerpb.RaftCommand
		if err := proto.Unmarshal(ent.GetData(), &cmd); err != nil {
			return fmt.Errorf("entry %d: %w (%w)", ent.GetIndex(), err, storage.ErrCorrupt)
		}
		g.duplicate(ent.GetIndex(), commandID{cmd.GetOrigin(), wire.VersionFromPB(cmd.GetVersion())})
	}
	return nil
}

func (e *Engine) regionOf(node uint32) string {
	for _, n := range e.cfg.Nodes {
		if n.ID == node {
			return n.Region
		}
	}
	return ""
}

// steerLeaders hands leadership to a replica in the leader region, from every group this node
// leads elsewhere (after a failover, once the preferred replica is back and active). etcd
// raft's transfer waits until the target has the whole log, then tells it to campaign at
// once (MsgTimeoutNow), so no write is lost and the gap is about one round trip.
func (e *Engine) steerLeaders() {
	for _, g := range e.order {
		if len(g.preferred) == 0 || slices.Contains(g.preferred, e.cfg.NodeID) || g.rn.BasicStatus().RaftState != etcdraft.StateLeader {
			continue
		}
		st := g.rn.Status()
		if st.RaftState != etcdraft.StateLeader || st.LeadTransferee != etcdraft.None {
			continue
		}
		for _, target := range g.preferred {
			if pr, ok := st.Progress[uint64(target)]; ok && pr.RecentActive {
				g.rn.TransferLeader(uint64(target))
				g.dirty = true
				break
			}
		}
	}
}

// Leader returns the leader this node knows for a partition's group (0: none, or no such
// group here).
func (e *Engine) Leader(keyspace string, partition uint32) uint64 {
	g := e.groups[groupKey{keyspace, partition}]
	if g == nil {
		return 0
	}
	return g.rn.BasicStatus().Lead
}

// snapshotlessStorage is a group's log as the RawNode sees it. A snapshot carrying the
// partition's data is not implemented yet, so a follower behind the compacted log is told
// that no snapshot is available (it stays behind, visibly) instead of being sent one without
// data, which would silently lose writes.
type snapshotlessStorage struct{ etcdraft.Storage }

func (s snapshotlessStorage) Snapshot() (*raftpb.Snapshot, error) {
	return nil, etcdraft.ErrSnapshotTemporarilyUnavailable
}

// Propose starts a client request on a raft keyspace.
func (e *Engine) Propose(now time.Time, req engine.Request) {
	e.observe(now)
	ks, ok := e.pmap.Keyspace(req.Keyspace)
	if !ok || ks.Spec.Protocol != config.ProtocolRaft {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.NotFound, "unknown keyspace %q", req.Keyspace)})
		return
	}
	if req.Op == engine.OpScan {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q uses protocol raft, which serves get, put and delete; scans of raft keyspaces are not implemented yet", req.Keyspace)})
		return
	}
	p := ks.Lookup(req.Key)
	g := e.groups[groupKey{req.Keyspace, p.ID}]
	if why, ok := e.broken[groupKey{req.Keyspace, p.ID}]; ok {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Internal, "keyspace %q partition %d: this node's Raft group is out of service: %s", req.Keyspace, p.ID, why)})
		return
	}
	if g == nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable,
			"node %d holds no replica of keyspace %q partition %d (replicas: nodes %v); raft keyspaces are served by their replicas", e.cfg.NodeID, req.Keyspace, p.ID, p.Replicas)})
		return
	}
	if len(e.pending) >= maxPending {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Overloaded, "node %d has %d raft requests in flight (limit %d)", e.cfg.NodeID, len(e.pending), maxPending)})
		return
	}
	if req.MinVersion.WallNanos > 0 {
		e.clock.Observe(now, req.MinVersion)
	}
	g.dirty = true
	// Without a known leader (an election or a handover in progress) a request is held
	// until one is elected (retryPending), for up to two election timeouts (Tick).
	noLeader := func(data []byte) bool {
		if g.rn.BasicStatus().Lead != etcdraft.None {
			return false
		}
		e.pending[req.ID] = &pendingReq{req: req, group: g, data: data, heldSince: now}
		return true
	}
	switch req.Op {
	case engine.OpGet:
		level := req.Level
		if level == "" {
			level = g.opts.ReadLevel
		}
		if level == config.LevelStale || e.cfg.Mutation == "stale-read-as-linearizable" {
			path := PathStale
			if level != config.LevelStale {
				path = PathReadIndex // the mutation claims linearizability
			}
			e.out.Reads = append(e.out.Reads, readAt(g.key, req, path))
			return
		}
		if noLeader(nil) {
			return
		}
		e.pending[req.ID] = &pendingReq{req: req, group: g}
		g.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, req.ID))
	case engine.OpPut, engine.OpDelete:
		cmd := &peerpb.RaftCommand{Origin: e.cfg.NodeID, RequestId: req.ID, Key: req.Key, Value: req.Value,
			Tombstone: req.Op == engine.OpDelete, Version: wire.VersionToPB(e.clock.Now(now))}
		data, err := proto.Marshal(cmd)
		if err != nil {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Internal, "encode raft command: %v", err)})
			return
		}
		if noLeader(data) {
			return
		}
		pr := &pendingReq{req: req, group: g, data: data}
		if err := g.rn.Propose(data); err != nil {
			// Dropped by a leader handing over (or over its uncommitted-log bound): held
			// like a request without a leader, proposed again at the next leader change.
			pr.heldSince = now
		}
		e.pending[req.ID] = pr
	default:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q uses protocol raft, which has no %s operation", req.Keyspace, req.Op)})
	}
}

// readAt is a read of key from the replica's storage, run once the Ready that carries it
// (and every earlier one) is in storage.
func readAt(k groupKey, req engine.Request, path string) engine.Read {
	return engine.Read{ID: req.ID, Op: req.Op, Run: func(store engine.Reader) engine.Result {
		rec, found, err := store.Get(k.keyspace, k.partition, req.Key)
		if err != nil {
			return engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Internal, "read: %v", err)}
		}
		if rec.Tombstone {
			return engine.Result{ID: req.ID, Op: req.Op, Version: rec.Version, Path: path}
		}
		return engine.Result{ID: req.ID, Op: req.Op, Found: found, Value: rec.Value, Version: rec.Version, Path: path}
	}}
}

func (e *Engine) reply(r engine.Result) { e.out.Replies = append(e.out.Replies, r) }

func (e *Engine) observe(now time.Time) {
	if now.After(e.lastNow) {
		e.lastNow = now
	}
	if e.nextTick.IsZero() {
		e.nextTick = now.Add(config.RaftTick)
	}
}

// Step delivers a Raft message to its group. Messages for groups this node does not have,
// or whose addressing disagrees with the envelope's, are dropped like lost messages.
func (e *Engine) Step(now time.Time, env *peerpb.Envelope) {
	e.observe(now)
	rm := env.GetRaft()
	if rm == nil {
		return
	}
	g := e.groups[groupKey{rm.GetKeyspace(), rm.GetPartition()}]
	if g == nil {
		return
	}
	var m raftpb.Message
	if err := proto.Unmarshal(rm.GetMessage(), &m); err != nil {
		return
	}
	if m.GetFrom() != uint64(env.GetFrom()) || m.GetTo() != uint64(e.cfg.NodeID) || !slices.Contains(g.peers, env.GetFrom()) {
		return
	}
	if etcdraft.IsLocalMsg(m.GetType()) {
		return // never from the network
	}
	// An empty append response (index 0) is a follower's answer to a message from an older
	// term: it tells a stale leader that a newer term exists. A leader of that term learns
	// nothing from it, but etcd raft takes it as "matched up to 0" and moves the follower's
	// progress to replicate from index 1 — which lies behind every group's bootstrap
	// snapshot, so the leader would need a snapshot it cannot send and the follower would
	// stay behind for good (the simulator found this: seed 129, a heartbeat delayed across
	// the leader's restart). Only a node that would step down because of it needs it.
	if m.GetType() == raftpb.MessageType_MsgAppResp && !m.GetReject() && m.GetIndex() == 0 && m.GetTerm() <= g.rn.BasicStatus().HardState.GetTerm() {
		return
	}
	_ = g.rn.Step(&m) // errors are for local misuse (e.g. a response to an unknown peer): drop
	g.dirty = true
}

// Tick advances every group's logical clock by the Raft ticks that have elapsed, and fails
// the requests whose deadline has passed.
func (e *Engine) Tick(now time.Time) {
	e.observe(now)
	ticked := false
	for n := 0; !now.Before(e.nextTick) && n < maxTicksPerCall; n++ {
		for _, g := range e.order {
			g.rn.Tick()
			g.dirty = true
		}
		e.nextTick = e.nextTick.Add(config.RaftTick)
		if e.ticks++; e.ticks%steerEveryTicks == 0 {
			e.steerLeaders()
		}
		ticked = true
	}
	if now.After(e.nextTick.Add(config.RaftTick)) {
		e.nextTick = now.Add(config.RaftTick) // a long pause: do not replay it tick by tick
	}
	if ticked {
		e.expire(now)
	}
}

// expire fails the requests whose deadline has passed, and the held ones (no leader) held
// for two election timeouts. Checked once per Raft tick: a request may outlive its deadline
// by up to one tick.
func (e *Engine) expire(now time.Time) {
	var expired []uint64
	for id, p := range e.pending {
		if (!p.req.Deadline.IsZero() && now.After(p.req.Deadline)) ||
			(!p.heldSince.IsZero() && now.Sub(p.heldSince) > 2*p.group.opts.ElectionTimeout) {
			expired = append(expired, id)
		}
	}
	slices.Sort(expired)
	for _, id := range expired {
		p := e.pending[id]
		delete(e.pending, id)
		if !p.heldSince.IsZero() {
			e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(errs.Unavailable,
				"keyspace %q partition %d has had no Raft leader for %v (no majority reachable?); retry, or read at STALE",
				p.group.key.keyspace, p.group.key.partition, now.Sub(p.heldSince).Round(time.Millisecond))})
			continue
		}
		what := "the read index"
		if p.req.Op != engine.OpGet {
			what = "the write to commit (it may still apply)"
		}
		e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(errs.Timeout,
			"keyspace %q partition %d: deadline passed waiting for %s (leader: node %d)", p.group.key.keyspace, p.group.key.partition, what, p.group.rn.BasicStatus().Lead)})
	}
}

// HasReady reports whether Ready has output.
func (e *Engine) HasReady() bool {
	if !e.out.Empty() {
		return true
	}
	for _, g := range e.order {
		if g.dirty {
			if g.rn.HasReady() {
				return true
			}
			g.dirty = false
		}
	}
	return false
}

// Ready collects every group's Ready: log and hard state to persist (Raw), committed writes
// applied to storage records (Writes), messages, client replies and reads that wait for the
// applied writes (Reads). The runtime makes Writes and Raw durable before any message or
// reply leaves, which is what etcd raft requires of a Ready's persistence.
func (e *Engine) Ready() engine.Ready {
	removed := false
	for _, g := range e.order {
		if g.removed || !g.dirty || !g.rn.HasReady() {
			g.dirty = false
			continue
		}
		e.readyGroup(g)
		g.dirty = !g.removed && g.rn.HasReady()
		removed = removed || g.removed
	}
	if removed {
		e.order = slices.DeleteFunc(e.order, func(g *group) bool { return g.removed })
	}
	rd := e.out
	e.out = engine.Ready{}
	return rd
}

func (e *Engine) readyGroup(g *group) {
	rd := g.rn.Ready()
	if rd.SoftState != nil && rd.SoftState.Lead != etcdraft.None && rd.SoftState.Lead != g.lead {
		g.lead = rd.SoftState.Lead
		defer e.retryPending(g)
	}
	ops, err := g.log.Save(rd.HardState, rd.Snapshot, rd.Entries)
	if err != nil {
		// The in-memory log refused what raft produced: a bug, not an input. Take the group
		// out of service (nothing more is acknowledged) and say why on every request.
		e.remove(g, err)
		return
	}
	e.out.Raw = append(e.out.Raw, ops...)
	for _, m := range rd.Messages {
		b, err := proto.Marshal(m)
		if err != nil {
			continue
		}
		e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: uint32(m.GetTo()),
			Msg: &peerpb.Envelope_Raft{Raft: &peerpb.RaftMessage{Keyspace: g.key.keyspace, Partition: g.key.partition, Message: b}}})
	}
	applyFrom := rd.CommittedEntries
	if e.cfg.Mutation == "apply-before-commit" {
		applyFrom = append(slices.Clone(rd.CommittedEntries), rd.Entries...)
	}
	for _, ent := range applyFrom {
		e.apply(g, ent)
	}
	if len(rd.CommittedEntries) > 0 {
		b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+hlc.EncodedVersionLen), g.applied)
		e.out.Raw = append(e.out.Raw, storage.RawOp{Key: appliedKey(g.id), Value: g.last.Encode(b)})
	}
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) == 8 {
			g.waiting = append(g.waiting, waitingRead{index: rs.Index, id: binary.BigEndian.Uint64(rs.RequestCtx)})
		}
	}
	kept := g.waiting[:0]
	for _, w := range g.waiting {
		if w.index > g.applied {
			kept = append(kept, w)
			continue
		}
		if p, ok := e.pending[w.id]; ok {
			delete(e.pending, w.id)
			e.out.Reads = append(e.out.Reads, readAt(g.key, p.req, PathReadIndex))
		}
	}
	g.waiting = kept
	g.rn.Advance(rd)
	e.maybeCompact(g)
}

// retryPending proposes g's pending writes and read indexes again after a leader change,
// in request order.
func (e *Engine) retryPending(g *group) {
	if g.removed {
		return
	}
	var ids []uint64
	for id, p := range e.pending {
		if p.group == g {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := e.pending[id]
		p.heldSince = time.Time{}
		if p.data != nil {
			_ = g.rn.Propose(p.data) // dropped again: the next leader change retries it
		} else {
			g.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, id))
		}
	}
	g.dirty = true
}

// remove takes g out of service after an internal error: its pending requests fail with the
// reason, and so do later ones (broken).
func (e *Engine) remove(g *group, err error) {
	e.broken[g.key] = err.Error()
	delete(e.groups, g.key)
	g.removed = true // dropped from e.order at the end of Ready (which may be iterating it)
	ids := make([]uint64, 0)
	for id, p := range e.pending {
		if p.group == g {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := e.pending[id]
		delete(e.pending, id)
		e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(errs.Internal, "keyspace %q partition %d: Raft group out of service: %v", g.key.keyspace, g.key.partition, err)})
	}
}

// apply applies one committed entry: a write becomes a record whose version is above every
// earlier applied write's (so storage's newest version is the log's last write), and the
// proposer answers its client.
func (e *Engine) apply(g *group, ent *raftpb.Entry) {
	if ent.GetIndex() <= g.applied {
		return // replayed after a restart (or the mutation's early apply)
	}
	g.applied = ent.GetIndex()
	g.sinceCut++
	switch ent.GetType() {
	case raftpb.EntryType_EntryConfChange, raftpb.EntryType_EntryConfChangeV2:
		var cc raftpb.ConfChangeI
		if ent.GetType() == raftpb.EntryType_EntryConfChange {
			var c raftpb.ConfChange
			if proto.Unmarshal(ent.GetData(), &c) != nil {
				return
			}
			cc = &c
		} else {
			var c raftpb.ConfChangeV2
			if proto.Unmarshal(ent.GetData(), &c) != nil {
				return
			}
			cc = &c
		}
		g.rn.ApplyConfChange(cc)
		return
	}
	if len(ent.GetData()) == 0 {
		return // a new leader's empty entry
	}
	var cmd peerpb.RaftCommand
	if err := proto.Unmarshal(ent.GetData(), &cmd); err != nil {
		// Every replica stops at the same entry: better than diverging silently.
		e.remove(g, fmt.Errorf("entry %d does not decode: %w", ent.GetIndex(), err))
		return
	}
	v := wire.VersionFromPB(cmd.GetVersion())
	if g.duplicate(ent.GetIndex(), commandID{cmd.GetOrigin(), v}) {
		return
	}
	if !g.last.Less(v) {
		v = hlc.Version{WallNanos: g.last.WallNanos, Logical: g.last.Logical + 1, NodeID: v.NodeID}
	}
	g.last = v
	e.clock.Observe(e.lastNow, v)
	rec := storage.Record{Keyspace: g.key.keyspace, Partition: g.key.partition, Key: cmd.GetKey(), Value: cmd.GetValue(), Tombstone: cmd.GetTombstone(), Version: v}
	if rec.Value == nil && !rec.Tombstone {
		rec.Value = []byte{}
	}
	e.out.Writes = append(e.out.Writes, rec)
	if cmd.GetOrigin() != e.cfg.NodeID {
		return
	}
	if p, ok := e.pending[cmd.GetRequestId()]; ok && p.req.Op != engine.OpGet {
		delete(e.pending, cmd.GetRequestId())
		e.reply(engine.Result{ID: p.req.ID, Op: p.req.Op, Version: v})
	}
}

// maybeCompact discards applied log older than retainEntries, every compactEvery entries.
func (e *Engine) maybeCompact(g *group) {
	if g.sinceCut < compactEvery || g.applied <= retainEntries {
		return
	}
	// The current configuration is stored with the compaction.
	conf := &raftpb.ConfState{Voters: slices.Sorted(maps.Keys(g.rn.Status().Config.Voters.IDs()))}
	ops, err := g.log.Compact(g.applied-retainEntries, conf)
	if err != nil {
		e.remove(g, err)
		return
	}
	g.sinceCut = 0
	e.out.Raw = append(e.out.Raw, ops...)
}

// discardLogger drops etcd raft's logging (the engine reports through results and
// metrics); Panic and Fatal still stop the process, as raft requires.
type discardLogger struct{}

func (discardLogger) Debug(...interface{})            {}
func (discardLogger) Debugf(string, ...interface{})   {}
func (discardLogger) Error(...interface{})            {}
func (discardLogger) Errorf(string, ...interface{})   {}
func (discardLogger) Info(...interface{})             {}
func (discardLogger) Infof(string, ...interface{})    {}
func (discardLogger) Warning(...interface{})          {}
func (discardLogger) Warningf(string, ...interface{}) {}
func (discardLogger) Fatal(v ...interface{})          { panic(fmt.Sprint(v...)) }
func (discardLogger) Fatalf(f string, v ...interface{}) {
	panic(fmt.Sprintf(f, v...))
}
func (discardLogger) Panic(v ...interface{})            { panic(fmt.Sprint(v...)) }
func (discardLogger) Panicf(f string, v ...interface{}) { panic(fmt.Sprintf(f, v...)) }
