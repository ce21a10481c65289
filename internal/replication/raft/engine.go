package raft

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"meridian/internal/raftlog"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/sdur"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// Limits of one node's Raft engine.
const (
	// maxPending bounds the client requests one engine tracks (proposals, reads, forwards,
	// scans).
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
	// housekeepEveryTicks: how often leaders steer leadership, drive configuration changes,
	// and groups outside the placement ask whether they were removed (200 ms).
	housekeepEveryTicks = 4
	// maxTicksPerCall bounds the ticks one Tick call replays after a long pause.
	maxTicksPerCall = 100
	// forwardedBit marks the IDs of requests this engine runs for another node (forwarded)
	// or for itself (a scan's parts): the runtime's own request IDs never reach it.
	forwardedBit = uint64(1) << 63
)

// Engine is the Raft protocol on one node: a RawNode per partition this node replicates
// (multi-raft), their logs in storage raw keys, their applied state in storage records. One
// Engine hosts every group of its protocol's keyspaces: the raft protocol's (a key-value
// state machine per partition), or the cluster metadata group (the metadata protocol builds
// an Engine with its own state machine). Not safe for concurrent use (engine.Engine).
type Engine struct {
	cfg      engine.Config
	store    engine.Reader
	protocol string
	newSM    func(keyspace string) StateMachine
	clock    *hlc.HLC
	pmap     *placement.Map
	log      etcdraft.Logger
	stats    *Counters

	groups map[groupKey]*group
	byID   map[uint64]*group
	order  []*group // every group, by group ID (deterministic iteration)
	// txnList are the groups of order with a transaction core (txn.go, ticked every call).
	txnList []*group
	txnBuf  []*group
	// freezeToStart: a group was loaded with state and its vote freeze has not started
	// (observe starts it at the first time the engine sees).
	freezeToStart bool
	// active are the groups that tick (not quiesced), by group ID; rebuilt when stale.
	active      []*group
	activeStale bool
	dirty       []*group // groups that may have a Ready

	pending       map[uint64]*pendingReq // client requests (and forwarded ones) by request ID
	scans         map[uint64]*scanOp
	forwards      map[uint64]*forwardOrigin // forwarded requests served here: where to reply
	forwardsTaken engine.Forwards           // forwards taken recently
	// broken are the groups this node should replicate but could not set up (or stopped
	// after an internal error), with why: their requests fail with that reason.
	broken map[groupKey]string

	peers    map[uint32]*peerState // other nodes sharing a group with this one
	peerList []uint32              // sorted keys of peers
	clockEst *hlc.OffsetEstimator
	lastPing time.Time

	nextTick time.Time
	ticks    uint64 // Raft ticks so far
	lastNow  time.Time
	nextID   uint64 // IDs of forwarded requests and scan parts (with forwardedBit)
	// heldOffers are the groups holding a snapshot offer (repartition.go, holdOffer).
	heldOffers []*group
	snapSeq    uint64

	// rng draws election timeouts (etcd raft's own come from crypto/rand, which would make
	// simulations unrepeatable: groups' followers tick with TickQuiesced and campaign on the
	// engine's own timer instead).
	rng *rand.Rand
	// incarnation tells this run of the engine from earlier ones (read contexts).
	incarnation uint64

	// Splits and merges (repartition.go): the groups with a range by keyspace and start
	// (rebuilt when stale), whether the map's groups must be synced again, how many requests
	// wait for their key's group, and the anchors of the map's partitions (wire.go).
	ranges        map[string][]*group
	rangesStale   bool
	syncNeeded    bool
	orphansLoaded bool
	rangeWaits    int
	anchors       anchorCache
	// dropped are the groups whose state this engine deleted since the map last changed:
	// the deletion is in a Ready not applied yet, so storage still shows their state.
	dropped map[uint64]bool
	// kick: splits, freezes or merges may be ready to propose (driveRepartitions runs at
	// the end of the Ready).
	kick bool

	// Transactions (txn.go): this node's submitted transactions waiting for their outcome,
	// the sequence of its transaction IDs (random start: IDs of an earlier run are not
	// reused), and messages between its own groups.
	txnWaits   map[sdur.TxnID]*txnWait
	txnVectors map[string]*peerpb.TxnVector // the newest snapshot vector of each sdur keyspace known here
	seqs       map[string]*txnSequencer     // the sequencers this node runs (txnro.go)
	// Delaying (geo-sdur IV-D, txndelay.go): the parts this node holds back, and its
	// estimators of how long each partition takes to deliver (txn_delay auto).
	txnDelayed  []delayedPart
	txnDelays   map[string]*sdur.DelayEstimator
	txnSeq      uint64
	localTxn    []localTxnMessage
	flushingTxn bool

	out     engine.Ready
	batches map[uint32][]*peerpb.RaftMessage // this Ready's Raft messages, per destination
	// installing are the groups whose snapshot data the current Ready installs.
	installing []*group
}

type groupKey struct {
	keyspace  string
	partition uint32
}

func (k groupKey) ref() GroupRef { return GroupRef{Keyspace: k.keyspace, Partition: k.partition} }

// peerState is what the engine knows of another node.
type peerState struct {
	lastHeard time.Time // anything received from it
	lapsed    bool      // silent for an election timeout: its quiesced groups woke up
	rtt       time.Duration
	// created is when this node learnt of the peer; heardOnce, whether it ever heard from
	// it. A node registered by a metadata change that is held for every live node cannot
	// have applied it (it starts once the change returns): releaseHeld does not wait for it.
	created   time.Time
	heardOnce bool
}

// Options configures an Engine beyond engine.Config.
type Options struct {
	// Protocol is the keyspace protocol whose keyspaces the engine serves.
	Protocol string
	// StateMachine builds the state machine of a keyspace's groups (default: key-value).
	StateMachine func(keyspace string) StateMachine
}

// NewEngine returns node cfg.NodeID's engine for the raft protocol's keyspaces.
func NewEngine(cfg engine.Config, store engine.Reader) *Engine {
	return New(cfg, store, Options{Protocol: config.ProtocolRaft})
}

// New returns node cfg.NodeID's Raft engine; SetPlacement creates its groups.
func New(cfg engine.Config, store engine.Reader, o Options) *Engine {
	if cfg.MaxClockSkew <= 0 {
		cfg.MaxClockSkew = time.Minute
	}
	if o.StateMachine == nil {
		o.StateMachine = func(string) StateMachine { return kvStateMachine{} }
	}
	if o.Protocol == "" {
		o.Protocol = config.ProtocolRaft
	}
	e := &Engine{
		cfg:        cfg,
		store:      store,
		protocol:   o.Protocol,
		newSM:      o.StateMachine,
		clock:      hlc.NewHLC(cfg.NodeID, cfg.MaxClockSkew),
		log:        discardLogger{},
		stats:      &Counters{},
		groups:     map[groupKey]*group{},
		byID:       map[uint64]*group{},
		pending:    map[uint64]*pendingReq{},
		scans:      map[uint64]*scanOp{},
		forwards:   map[uint64]*forwardOrigin{},
		broken:     map[groupKey]string{},
		peers:      map[uint32]*peerState{},
		batches:    map[uint32][]*peerpb.RaftMessage{},
		rng:        rand.New(rand.NewPCG(cfg.RandSeed, uint64(cfg.NodeID))),
		anchors:    anchorCache{},
		dropped:    map[uint64]bool{},
		txnWaits:   map[sdur.TxnID]*txnWait{},
		txnVectors: map[string]*peerpb.TxnVector{},
		seqs:       map[string]*txnSequencer{},
		txnDelays:  map[string]*sdur.DelayEstimator{},
	}
	e.incarnation = e.rng.Uint64() | 1
	// IDs of forwarded requests and scan parts start at a random point, so that a message
	// about an earlier run's request (a late reply) does not match this run's.
	e.nextID = e.rng.Uint64() >> 2
	e.txnSeq = e.rng.Uint64() >> 2
	return e
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
func markerKey(group uint64) []byte  { return stateKey(group, 'm') }

// SetPlacement creates the groups of the protocol's keyspaces' partitions this node is a
// member of, hands every group its partition's new description (configuration changes are
// driven from it, membership.go; splits and merges too, repartition.go), retires the groups
// of partitions a merge removed and destroys the groups of keyspaces that were dropped
// (syncGroups).
func (e *Engine) SetPlacement(m *placement.Map) {
	e.pmap = m
	if m.Nodes != nil && !sameNodeIDs(m.Nodes, e.cfg.Nodes) {
		e.cfg.Nodes = m.Nodes // members joined or left (names, regions)
	}
	e.anchors = anchorCache{}
	clear(e.dropped)
	e.syncGroups()
}

func sameNodeIDs(a, b []config.Node) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID {
			return false
		}
	}
	return true
}

// refreshPeers recomputes the nodes that share a group with this one.
func (e *Engine) refreshPeers() {
	want := map[uint32]bool{}
	for _, g := range e.order {
		for _, id := range slices.Concat(g.desc.Replicas, g.desc.Learners) {
			if id != e.cfg.NodeID {
				want[id] = true
			}
		}
		for _, id := range slices.Concat(g.conf.GetVoters(), g.conf.GetLearners(), g.conf.GetVotersOutgoing()) {
			if uint32(id) != e.cfg.NodeID {
				want[uint32(id)] = true
			}
		}
	}
	for id := range want {
		if e.peers[id] == nil {
			e.peers[id] = &peerState{rtt: e.rttTo(id), created: e.lastNow}
		}
	}
	for id := range e.peers {
		if !want[id] {
			delete(e.peers, id)
		}
	}
	e.peerList = slices.Sorted(maps.Keys(e.peers))
	rtts := map[uint32]time.Duration{}
	for _, id := range e.peerList {
		rtts[id] = e.peers[id].rtt
	}
	e.clockEst = hlc.NewOffsetEstimator(e.peerList, rtts)
}

func (e *Engine) rttTo(id uint32) time.Duration {
	from, to := e.regionOf(e.cfg.NodeID), e.regionOf(id)
	if e.cfg.Topology == nil || !e.cfg.Topology.HasRegion(from) || !e.cfg.Topology.HasRegion(to) {
		// A member this node has not learnt of yet (it joined moments ago): no distance.
		return 0
	}
	return e.cfg.Topology.RTT(from, to)
}

func (e *Engine) regionOf(node uint32) string {
	for _, n := range e.cfg.Nodes {
		if n.ID == node {
			return n.Region
		}
	}
	return ""
}

// hasGroupState reports whether this node's storage holds a group's Raft state (a replica
// it has not deleted).
func (e *Engine) hasGroupState(id uint64) bool {
	_, found, err := e.store.GetRaw(stateKey(id, kindHard))
	return err == nil && found
}

// addGroup loads a group's durable state, or creates it: a founding member bootstraps from a
// snapshot at index 1 whose configuration is the partition's founding members (every founder
// the same way, so they agree without a round of configuration changes); any other member
// starts empty and waits for its leader's snapshot (or, for a partition a split made, for the
// split that founds it, repartition.go).
//
// bootstrap says whether a founding member with no state may bootstrap (canBootstrap); the
// group's range is its stored one, else (a state from before ranges were stored, or a
// bootstrap) the partition's.
func (e *Engine) addGroup(k groupKey, p *placement.Partition, opts config.RaftOptions, leaderRegion string, bootstrap bool) error {
	id := groupID(k)
	if other, dup := e.byID[id]; dup {
		return fmt.Errorf("group id %x collides with keyspace %s partition %d", id, other.key.keyspace, other.key.partition)
	}
	ls, err := LoadLogStore(e.store, id)
	if err != nil {
		return err
	}
	g := &group{key: k, id: id, opts: opts, log: ls, origins: map[uint32]hlc.Version{}, desc: *p, conf: &raftpb.ConfState{}}
	if g.sm, err = e.stateMachineFor(g); err != nil {
		return err
	}
	g.lease.acks = map[uint32]int64{}
	st, ok, err := e.loadApplied(id)
	if err != nil {
		return err
	}
	if ok {
		if err := g.restoreApplied(st); err != nil {
			return err
		}
		if !g.ranged {
			// Written before ranges were stored, when partitions never split: the
			// placement's range is the group's (every replica takes it when it loads).
			g.ranged, g.start, g.end, g.gen = true, bytes.Clone(p.Start), bytes.Clone(p.End), 1
			if g.start == nil {
				g.start = []byte{}
			}
		}
	}
	hs, _, err := ls.Storage().InitialState()
	if err != nil {
		return fmt.Errorf("initial state: %w", err)
	}
	hadState := ok || !etcdraft.IsEmptyHardState(hs)
	// A snapshot install that did not finish: redo it from the staged file before anything
	// else touches the partition (its data may be half replaced).
	if b, found, err := e.store.GetRaw(markerKey(id)); err != nil {
		return fmt.Errorf("read snapshot marker: %w", err)
	} else if found {
		var mk peerpb.RaftSnapshotMarker
		if err := proto.Unmarshal(b, &mk); err != nil {
			return fmt.Errorf("snapshot marker: %w (%w)", err, storage.ErrCorrupt)
		}
		if err := g.restoreApplied(mk.GetState()); err != nil {
			return err
		}
		e.out.Ingests = append(e.out.Ingests, e.installOp(g, mk.GetFile(), mk.GetState()))
		e.stats.SnapshotsResumed.Add(1)
	}
	last, _ := ls.Storage().LastIndex()
	switch {
	case bootstrap && !hadState && last == 0 && (slices.Contains(p.FoundingVoters, e.cfg.NodeID) || slices.Contains(p.FoundingLearners, e.cfg.NodeID)):
		g.conf = &raftpb.ConfState{Voters: u64s(p.FoundingVoters), Learners: u64s(p.FoundingLearners)}
		g.ranged, g.start, g.end, g.gen = true, bytes.Clone(p.Start), bytes.Clone(p.End), 1
		if g.start == nil {
			g.start = []byte{}
		}
		snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(1), Term: proto.Uint64(1), ConfState: proto.Clone(g.conf).(*raftpb.ConfState)}}
		ops, err := ls.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(1)}, snap, nil)
		if err != nil {
			return err
		}
		e.out.Raw = append(e.out.Raw, ops...)
		g.applied, g.appliedTerm = 1, 1
		e.out.Raw = append(e.out.Raw, g.appliedOp())
	case g.applied > last:
		// The data holds a snapshot whose install in the log was not persisted before the
		// node stopped (or was redone just above): install its metadata in the log now,
		// before the RawNode reads it.
		commit := max(hs.GetCommit(), g.applied)
		snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(g.applied), Term: proto.Uint64(g.appliedTerm), ConfState: proto.Clone(g.conf).(*raftpb.ConfState)}}
		hs2 := &raftpb.HardState{Term: proto.Uint64(max(hs.GetTerm(), g.appliedTerm)), Vote: proto.Uint64(hs.GetVote()), Commit: proto.Uint64(commit)}
		ops, err := ls.Save(hs2, snap, nil)
		if err != nil {
			return err
		}
		e.out.Raw = append(e.out.Raw, ops...)
	}
	hs, _, _ = ls.Storage().InitialState()
	if g.applied > hs.GetCommit() && e.cfg.Mutation == "" {
		return fmt.Errorf("applied index %d above the commit index %d (%w)", g.applied, hs.GetCommit(), storage.ErrCorrupt)
	}
	if g.sm.InMemory() {
		err := g.sm.Load(k.ref(), func(fn func(storage.Record) bool) error {
			return e.store.Scan(g.span(), 0, fn)
		})
		if err != nil {
			return fmt.Errorf("load state machine: %w", err)
		}
	}
	if g.txn != nil {
		if err := e.loadTxn(g); err != nil {
			return fmt.Errorf("keyspace %q partition %d: %w", k.keyspace, k.partition, err)
		}
		if g.applied > 0 && g.txnSavedAt == 0 {
			// A founding member that bootstrapped just now: its state at index 1 is the base
			// later restarts replay from.
			op, err := e.saveTxnOp(g)
			if err != nil {
				return err
			}
			e.out.Raw = append(e.out.Raw, op)
		}
	}
	// A member that had state may have acknowledged a leader's heartbeat just before it
	// stopped, promising that leader not to vote for another before an election timeout
	// had passed; a restarted RawNode knows no leader and would vote at once, so its votes
	// wait out the promise (lease.go).
	g.freezeVotes = hadState
	e.freezeToStart = e.freezeToStart || hadState
	rn, err := etcdraft.NewRawNode(e.raftConfig(g, min(g.applied, hs.GetCommit())))
	if err != nil {
		return fmt.Errorf("raft node: %w", err)
	}
	g.rn = rn
	g.idleSince = e.ticks
	g.heardAt = e.ticks
	e.link(g)
	e.drainTxn(g) // what replaying the log asked (records again, votes, outcomes)
	// The first preferred replica of a new group campaigns at once, so leaders start where
	// they belong instead of after an election timeout somewhere else (with PreVote, a
	// campaign cannot disturb a leader the others still hear from).
	if !hadState && len(g.conf.GetVoters()) > 0 {
		for _, r := range p.Replicas {
			if e.regionOf(r) == leaderRegion {
				if r == e.cfg.NodeID {
					_ = g.rn.Campaign()
				}
				break
			}
		}
	}
	return nil
}

// raftConfig is the etcd raft configuration of g's RawNode, applied up to applied.
func (e *Engine) raftConfig(g *group, applied uint64) *etcdraft.Config {
	return &etcdraft.Config{
		ID:                        uint64(e.cfg.NodeID),
		ElectionTick:              g.opts.ElectionTicks(),
		HeartbeatTick:             g.opts.HeartbeatTicks(),
		Storage:                   &groupStorage{MemoryStorage: g.log.Memory(), g: g, e: e},
		Applied:                   applied,
		MaxSizePerMsg:             maxSizePerMsg,
		MaxInflightMsgs:           maxInflightMsgs,
		MaxUncommittedEntriesSize: maxUncommittedBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            etcdraft.ReadOnlySafe,
		StepDownOnRemoval:         true,
		Logger:                    e.log,
	}
}

func (e *Engine) loadApplied(id uint64) (*peerpb.RaftAppliedState, bool, error) {
	b, ok, err := e.store.GetRaw(appliedKey(id))
	if err != nil {
		return nil, false, fmt.Errorf("read applied state: %w", err)
	}
	if !ok {
		return nil, false, nil
	}
	var st peerpb.RaftAppliedState
	if err := proto.Unmarshal(b, &st); err != nil {
		return nil, false, fmt.Errorf("applied state: %w (%w)", err, storage.ErrCorrupt)
	}
	return &st, true, nil
}

func u64s(ids []uint32) []uint64 {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return out
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

// markDirty queues g for the next Ready.
func (e *Engine) markDirty(g *group) {
	if !g.dirty && !g.removed {
		g.dirty = true
		e.dirty = append(e.dirty, g)
	}
}

// activeGroups returns the groups that tick, by group ID.
func (e *Engine) activeGroups() []*group {
	if e.activeStale {
		e.active = e.active[:0]
		for _, g := range e.order {
			if !g.quiesced {
				e.active = append(e.active, g)
			}
		}
		e.activeStale = false
	}
	return e.active
}

// destroy takes g out of this node: its requests fail with why, its log, applied state and
// data are deleted (in one Ready op, after everything before it).
func (e *Engine) destroy(g *group, why string) {
	if g.removed {
		return
	}
	e.dropped[g.id] = true
	e.failGroup(g, why, false)
	raw := append(g.log.Remove(), storage.RawOp{Key: appliedKey(g.id), Delete: true}, storage.RawOp{Key: markerKey(g.id), Delete: true})
	if g.ranged {
		e.out.Ingests = append(e.out.Ingests, engine.Ingest{Span: g.span(), After: raw})
	} else {
		// No state, hence no data of its own: the range may be another group's here.
		e.out.Raw = append(e.out.Raw, raw...)
	}
	e.unlink(g)
	e.stats.ReplicasRemoved.Add(1)
}

// unlink drops g from the engine's indexes.
func (e *Engine) unlink(g *group) {
	g.removed = true
	delete(e.groups, g.key)
	delete(e.byID, g.id)
	e.order = slices.DeleteFunc(e.order, func(x *group) bool { return x == g })
	e.txnList = slices.DeleteFunc(e.txnList, func(x *group) bool { return x == g })
	e.activeStale = true
	e.rangeChanged()
	e.dirty = slices.DeleteFunc(e.dirty, func(x *group) bool { return x == g })
	e.refreshPeers()
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

// GroupStatus is what the engine reports about one of its groups (tests, raft status).
type GroupStatus struct {
	Keyspace  string
	Partition uint32
	State     string
	Leader    uint64
	Term      uint64
	Commit    uint64
	Applied   uint64
	Quiesced  bool
	Voters    []uint64
	Learners  []uint64
	Outgoing  []uint64
	// The group's range (End nil: unbounded), its generation, and the index of the freeze it
	// applied (0: not frozen); Ranged is false on an empty replica.
	Start, End []byte
	Ranged     bool
	Generation uint64
	FrozenAt   uint64
}

// Groups returns the status of every group on this node, by group ID.
func (e *Engine) Groups() []GroupStatus {
	out := make([]GroupStatus, 0, len(e.order))
	for _, g := range e.order {
		st := g.rn.BasicStatus()
		out = append(out, GroupStatus{Keyspace: g.key.keyspace, Partition: g.key.partition, State: st.RaftState.String(),
			Leader: st.Lead, Term: st.HardState.GetTerm(), Commit: st.HardState.GetCommit(), Applied: g.applied,
			Quiesced: g.quiesced, Voters: slices.Clone(g.conf.GetVoters()), Learners: slices.Clone(g.conf.GetLearners()),
			Outgoing: slices.Clone(g.conf.GetVotersOutgoing()), Start: bytes.Clone(g.start), End: bytes.Clone(g.end), Ranged: g.ranged,
			Generation: g.gen, FrozenAt: g.frozenAt})
	}
	return out
}

func (e *Engine) observe(now time.Time) {
	if now.After(e.lastNow) {
		e.lastNow = now
	}
	if e.nextTick.IsZero() {
		e.nextTick = now.Add(config.RaftTick)
	}
	// Vote freezes start counting from the first moment the engine knows the time (only
	// after groups were loaded with state: this runs on every call, over every group).
	if !e.freezeToStart {
		return
	}
	e.freezeToStart = false
	for _, g := range e.order {
		if g.freezeVotes && g.freezeUntil.IsZero() {
			g.freezeUntil = now.Add(e.voteFreeze(g))
		}
	}
}

// Tick advances every active group's logical clock by the Raft ticks that have elapsed,
// sends the node-level pings, keeps house, and fails the requests whose deadline passed.
func (e *Engine) Tick(now time.Time) {
	e.observe(now)
	ticked := false
	for n := 0; !now.Before(e.nextTick) && n < maxTicksPerCall; n++ {
		for _, g := range e.activeGroups() {
			e.tickGroup(g)
		}
		e.nextTick = e.nextTick.Add(config.RaftTick)
		e.ticks++
		if e.ticks%housekeepEveryTicks == 0 {
			e.housekeep(now)
		}
		ticked = true
	}
	e.tickTxns(now, ticked)
	if now.After(e.nextTick.Add(config.RaftTick)) {
		e.nextTick = now.Add(config.RaftTick) // a long pause: do not replay it tick by tick
	}
	if ticked {
		e.stats.Groups.Store(int64(len(e.order)))
		e.stats.QuiescedGroups.Store(int64(len(e.order) - len(e.activeGroups())))
		e.pingPeers(now)
		e.checkLiveness(now)
		e.maybeQuiesceAll()
		e.expire(now)
		e.expireTxns(now)
		e.expireTransfers(now)
		e.retryHeldOffers(now)
		for _, g := range e.order {
			e.releaseHeld(now, g)
		}
	}
}

// tickGroup advances g by one Raft tick. A leader ticks normally (heartbeats, CheckQuorum,
// hand-over timeouts). A follower or candidate advances its election clock without
// campaigning (TickQuiesced) and campaigns on the engine's own timer: electionElapsed is
// a count of ticks since anything that may have reset etcd raft's own election clock (so it
// never runs ahead of it, and a campaign never breaks a lease this node promised), against a
// timeout drawn uniformly from [electionTimeout, 2·electionTimeout) by the engine's seeded
// generator, as etcd raft draws its own.
func (e *Engine) tickGroup(g *group) {
	e.markDirty(g)
	if g.state == etcdraft.StateLeader {
		g.rn.Tick()
		return
	}
	g.rn.TickQuiesced()
	g.electionElapsed++
	if g.electionDeadline == 0 {
		g.electionDeadline = e.drawElectionTimeout(g)
	}
	if g.campaignAt != 0 && e.ticks >= g.campaignAt {
		// Founded by a split whose left group this node leads (repartition.go): it
		// campaigns a few heartbeats apart until a leader is known (the first attempts may
		// reach followers that have not applied the split yet; with PreVote a failed
		// attempt costs no term).
		g.campaignAt = 0
		if slices.Contains(g.conf.GetVoters(), uint64(e.cfg.NodeID)) && g.rn.BasicStatus().Lead == etcdraft.None {
			if g.campaigns--; g.campaigns > 0 {
				g.campaignAt = e.ticks + 2*uint64(max(g.opts.HeartbeatTicks(), 1))
			}
			g.electionElapsed = 0
			_ = g.rn.Campaign()
			return
		}
	}
	if g.electionElapsed < g.electionDeadline || !slices.Contains(g.conf.GetVoters(), uint64(e.cfg.NodeID)) {
		return
	}
	g.electionElapsed = 0
	g.electionDeadline = e.drawElectionTimeout(g)
	_ = g.rn.Campaign()
}

func (e *Engine) drawElectionTimeout(g *group) int {
	et := max(g.opts.ElectionTicks(), 1)
	return et + e.rng.IntN(et)
}

// raftDesc is a partition as its Raft group sees it: the new replica of a move in progress
// is a learner (it catches up by the log or a snapshot and votes in no quorum); finishing
// the move makes it a voter and removes the old one, by one joint change (membership.go).
func raftDesc(p placement.Partition) placement.Partition {
	if p.Move != nil && !slices.Contains(p.Learners, p.Move.Add) {
		p.Learners = append(slices.Clone(p.Learners), p.Move.Add)
	}
	return p
}

// reportCaughtUp tells the runtime that this node, the new replica of g's move, has caught up:
// it is a learner of the group, knows a leader, and has applied everything it knows to be
// committed (Raft's safety does not depend on it; it keeps a lagging learner from being
// promoted, which would cost availability). Repeated every housekeeping round until the
// move ends.
func (e *Engine) reportCaughtUp(now time.Time, g *group) {
	mv := g.desc.Move
	if mv == nil || mv.Add != e.cfg.NodeID || g.removed {
		return
	}
	bs := g.rn.BasicStatus()
	if bs.Lead == etcdraft.None || bs.HardState.GetCommit() == 0 || g.applied < bs.HardState.GetCommit() || !slices.Contains(g.conf.GetLearners(), uint64(e.cfg.NodeID)) {
		return
	}
	if now.Sub(g.movedReported) < time.Second {
		return
	}
	g.movedReported = now
	e.out.Reports = append(e.out.Reports, engine.Report{Kind: engine.ReportMoveCaughtUp, Keyspace: g.key.keyspace, Partition: g.key.partition, MoveID: mv.ID})
}

// housekeep steers leaders, drives configuration changes, and lets replicas that left
// their placement find out whether they may go.
func (e *Engine) housekeep(now time.Time) {
	for _, g := range slices.Clone(e.order) {
		if g.removed {
			continue
		}
		e.tryUnblock(g)
		if g.frozenAt != 0 {
			e.reportFrozen(g)
		}
		if g.partRetired || g.unborn {
			// A merge retired its partition (or a split here founded it before this node's
			// map lists it): it is neither removed nor driven by its description, but its
			// leader still steers, whether or not the placement lists this node. A group
			// must settle the membership its last description asks for before it freezes
			// (driveRetired), and a leader never removes itself (driveMembershipTo waits
			// for the hand-over), as CockroachDB transfers the lease away before it removes
			// the leaseholder's replica, and aligns the replica sets of both sides before
			// it subsumes the right one. A leader that a move dropped from the placement
			// (the move was under way when its parent split, so the founded group has the
			// old members) that kept its leadership here would keep the group from ever
			// freezing and merging, and a member that never got the group's state would
			// never get it (it takes a retired group's messages only from members of its
			// placement): the simulator found the writes of such a group missing on that
			// member for good (seed 136 with moves).
			if g.state == etcdraft.StateLeader {
				e.steerLeader(g)
			}
			e.driveRetired(g)
			continue
		}
		if g.quiesced && g.state == etcdraft.StateLeader && (!g.inPlacement || !e.membershipSettled(g)) {
			// The placement changed under a quiesced leader (a move finished or started
			// after the group fell idle): wake it, or it would neither hand over (a leader
			// that is to go picks only a recently active voter, and a quiesced group hears
			// from none) nor change its members. The simulator's move-progress check found
			// such a move waiting for ever (raft seed 2 with moves).
			e.unquiesce(g, false)
		}
		if !g.inPlacement {
			// A leader the placement no longer lists (its replica moved away) hands the
			// group to a member that stays: while it leads, no one else campaigns, and a
			// leader does not remove itself (the new leader does).
			if g.state == etcdraft.StateLeader {
				e.steerLeader(g)
			}
			e.askRemoved(now, g)
			continue
		}
		e.reportCaughtUp(now, g)
		if g.state != etcdraft.StateLeader {
			continue
		}
		if !e.driveRange(g) {
			// Membership changes wait for a pending split or merge (repartition.go).
			e.driveMembership(g)
		}
		e.steerLeader(g)
	}
}

// steerLeader hands leadership to a replica in the leader region from a group this node
// leads elsewhere (after a failover, once the preferred replica is back and active), or
// to a remaining voter when this node is being removed. etcd raft's transfer waits until
// the target has the whole log, then tells it to campaign at once (MsgTimeoutNow), so no
// write is lost and the gap is about one round trip.
func (e *Engine) steerLeader(g *group) {
	leaving := !slices.Contains(g.desc.Replicas, e.cfg.NodeID)
	if !leaving && (len(g.preferred) == 0 || slices.Contains(g.preferred, e.cfg.NodeID)) {
		return
	}
	if g.rn.BasicStatus().LeadTransferee != etcdraft.None {
		return
	}
	targets := g.preferred
	if leaving {
		targets = append(slices.Clone(g.preferred), g.desc.Replicas...)
	}
	voters := g.conf.GetVoters()
	var target uint64
	// Prefer the first eligible target in order (the visit order is by ID).
	for _, t := range targets {
		if t == e.cfg.NodeID || !slices.Contains(voters, uint64(t)) {
			continue
		}
		if e.recentlyActive(g, uint64(t)) {
			target = uint64(t)
			break
		}
	}
	if target != 0 {
		g.rn.TransferLeader(target)
		e.markDirty(g)
		e.stats.LeaderTransfers.Add(1)
	}
}

func (e *Engine) recentlyActive(g *group, id uint64) bool {
	active := false
	g.rn.WithProgress(func(pid uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
		if pid == id {
			active = pr.RecentActive
		}
	})
	return active
}

// discardLogger is raftlog.DiscardLogger.
type discardLogger = raftlog.DiscardLogger
