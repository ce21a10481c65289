// Package coord is the quorum family's shared coordinator: the Cassandra-style machinery that
// the quorum, MeteorShower and GlobLease engines have in common (MeteorShower paper, section I
// and IV-2 "The Baseline"; DESIGN.md section 5).
//
// The node that receives a request coordinates it. A write is stamped with a version from the
// coordinator's hybrid logical clock, sent to every replica of the key's partition, and
// acknowledged to the client once the consistency level's count of replicas has made it
// durable. A read asks the level's count of replicas (nearest first, with a speculative retry
// to the others), returns the newest version among the replies and, before returning, repairs
// the stale replicas it asked (blocking read repair, as Cassandra does since 4.0, so that two
// successive QUORUM reads never go back in time). Replicas keep every version (last-writer-
// wins by version: versions are separate MVCC keys in storage, so an older version never hides
// a newer one). Replicas that missed writes while down are repaired by anti-entropy
// (antientropy.go); a failure detector (liveness.go) fails requests at once when too few
// replicas are up.
//
// A Core is sans-IO in the style of etcd raft's RawNode (package engine): it never blocks,
// never reads a clock and never touches the network. It serves the keyspaces of one protocol
// (Config.Protocol). A protocol that extends it (MeteorShower's local reads, GlobLease's
// masters and leases) embeds the Core and plugs in through Extension.
package coord

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// The engine types, under the names this package has always used.
type (
	Op      = engine.Op
	Request = engine.Request
	Result  = engine.Result
	Ready   = engine.Ready
	Reader  = engine.Reader
	Unacked = engine.Unacked
)

const (
	OpGet        = engine.OpGet
	OpPut        = engine.OpPut
	OpDelete     = engine.OpDelete
	OpScan       = engine.OpScan
	OpMoveMaster = engine.OpMoveMaster
)

// PathQuorum: a read served by asking replicas at its consistency level.
const PathQuorum = "quorum"

// Config parameterises a Core.
type Config struct {
	engine.Config
	// Protocol is the name of the protocol whose keyspaces this core serves.
	Protocol string
	// HeartbeatInterval is how often an idle link carries a heartbeat. Default 250ms.
	HeartbeatInterval time.Duration
	// FailureTimeout: a peer silent for this long is considered down and is not counted on
	// for availability (Cassandra's failure detector marks it down the same way). Default 2s.
	FailureTimeout time.Duration
	// MaxInflight bounds the requests this coordinator tracks at once. Default 100,000.
	MaxInflight int
}

func (c *Config) ensureDefaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 250 * time.Millisecond
	}
	if c.FailureTimeout <= 0 {
		c.FailureTimeout = 2 * time.Second
	}
	if c.AntiEntropyInterval <= 0 {
		c.AntiEntropyInterval = 10 * time.Second
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 100_000
	}
	if c.MaxClockSkew <= 0 {
		c.MaxClockSkew = time.Minute
	}
	if c.MaxClockOffset <= 0 {
		c.MaxClockOffset = 2 * time.Millisecond
	}
}

// Extension is how a protocol of the quorum family adds to the shared coordinator. Each hook
// returns whether it handled the input; unhandled inputs take the coordinator's path.
type Extension interface {
	// Intercept may take over a request of a keyspace of the protocol (ks), after the level
	// default is applied.
	Intercept(now time.Time, ks *placement.Keyspace, req Request) bool
	// StepExtension may take a message the coordinator does not know.
	StepExtension(now time.Time, env *peerpb.Envelope) bool
	// AfterTick runs after the coordinator's own tick work.
	AfterTick(now time.Time)
	// Timer fires an extension timer (kinds from TimerExtension on).
	Timer(kind TimerKind, id uint64)
	// Applied is told of every record queued for this replica's storage; notify: the write
	// is first applied here (a coordinator's local write or a replica's replicated write).
	Applied(now time.Time, rec storage.Record, notify bool)
	// DefaultLevel is the level of a request that names none.
	DefaultLevel(ks *placement.Keyspace, op Op) config.Level
	// PlacementChanged is told of every new map after the core has installed it (old is nil
	// the first time).
	PlacementChanged(now time.Time, old, m *placement.Map)
}

// Core is the shared coordinator of one node, for the keyspaces of one protocol. Not safe for
// concurrent use. The exported fields are for the protocols that embed it.
type Core struct {
	Cfg        Config
	Store      Reader
	Clock      *hlc.HLC
	Pmap       *placement.Map
	Region     map[uint32]string // node ID → region
	SelfRegion string            // this node's region
	// LastTick is the latest time the runtime has told the core about.
	LastTick time.Time
	// Inflight counts the client requests being coordinated (bounded by MaxInflight).
	Inflight int

	ext         Extension // nil: plain quorum
	nextPeerReq uint64
	writes      map[uint64]*pendingWrite // by peer request ID
	reads       map[uint64]*pendingRead  // by peer request ID (including repair writes)
	scans       map[uint64]*scanRound    // by peer request ID
	scanOps     map[uint64]*pendingScan  // by client request ID
	cursors     scanCursors              // streaming scans this node serves as a replica
	// scanRepairWrites are scans' read-repair writes in flight, by peer request ID.
	scanRepairWrites map[uint64]scanRepairWrite
	fetches          map[uint64]*fetch // large reads' transfers, by peer request ID
	lr               largeReads

	timers timers
	live   liveness
	ae     aeState
	mv     moveState

	out Ready
}

// New returns the coordinator of node cfg.NodeID for cfg.Protocol's keyspaces; ext (nil for
// plain quorum) extends it.
func New(cfg Config, store Reader, ext Extension) *Core {
	cfg.ensureDefaults()
	c := &Core{
		Cfg:              cfg,
		Store:            store,
		Clock:            hlc.NewHLC(cfg.NodeID, cfg.MaxClockSkew),
		Region:           map[uint32]string{},
		ext:              ext,
		writes:           map[uint64]*pendingWrite{},
		reads:            map[uint64]*pendingRead{},
		scans:            map[uint64]*scanRound{},
		cursors:          scanCursors{open: map[scanCursorKey]*scanCursor{}},
		scanRepairWrites: map[uint64]scanRepairWrite{},
		scanOps:          map[uint64]*pendingScan{},
		fetches:          map[uint64]*fetch{},
	}
	for _, n := range cfg.Nodes {
		c.Region[n.ID] = n.Region
	}
	c.SelfRegion = c.Region[cfg.NodeID]
	c.live.init(cfg.NodeID, cfg.Nodes)
	return c
}

// sameNodes reports whether two member lists name the same nodes.
func sameNodes(a, b []config.Node) bool {
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

// SetExtension plugs ext in (a protocol that embeds the Core sets itself once built).
func (c *Core) SetExtension(ext Extension) { c.ext = ext }

// SetPlacement installs a new placement map. Requests in flight keep the partition they
// started with. Moves this node takes part in start or end (move.go).
func (c *Core) SetPlacement(m *placement.Map) {
	old := c.Pmap
	c.Pmap = m
	if m.Nodes != nil && !sameNodes(c.Cfg.Nodes, m.Nodes) {
		// Members joined or left: they are peers from now on (names, regions, liveness).
		c.Cfg.Nodes = m.Nodes
		for _, n := range m.Nodes {
			c.Region[n.ID] = n.Region
		}
		c.live.setPeers(m.Nodes)
	}
	c.lr.opts, c.lr.mayflowerUsed = nil, nil // options may have changed
	c.syncMoves(c.LastTick, old, m)
	if c.ext != nil {
		c.ext.PlacementChanged(c.LastTick, old, m)
	}
}

// Placement returns the installed placement map.
func (c *Core) Placement() *placement.Map { return c.Pmap }

// Owns reports whether ks is a keyspace of this core's protocol.
func (c *Core) Owns(ks *placement.Keyspace) bool {
	return ks != nil && ks.Spec.Protocol == c.Cfg.Protocol
}

// Alive reports whether the failure detector considers node alive.
func (c *Core) Alive(node uint32) bool { return c.live.alive(node) }

// AliveConcurrent is Alive as of the failure detector's last change, safe to call from any
// goroutine (Alive belongs to the event loop): for metrics.
func (c *Core) AliveConcurrent(node uint32) bool { return c.live.aliveSnapshot(node) }

// Ready returns and clears the output accumulated since the last call.
func (c *Core) Ready() Ready {
	rd := c.out
	c.out = Ready{}
	// Deletions of ranges this node left are in rd, after its writes: from now on a write
	// to such a range lands after the deletion.
	c.mv.clearing = nil
	return rd
}

// HasReady reports whether Ready would return anything.
func (c *Core) HasReady() bool { return !c.out.Empty() }

// Send queues env for node to.
func (c *Core) Send(to uint32, env *peerpb.Envelope) {
	env.From = c.Cfg.NodeID
	env.To = to
	c.out.Messages = append(c.out.Messages, env)
	c.live.sent(to, c.LastTick)
}

// Reply queues a client result.
func (c *Core) Reply(r Result) {
	c.out.Replies = append(c.out.Replies, r)
}

// Fail answers req with err.
func (c *Core) Fail(req Request, err error) {
	c.Reply(Result{ID: req.ID, Op: req.Op, Err: err})
}

// Persist queues a record for this node's storage without telling the extension (protocol
// metadata such as GlobLease's acceptor state).
func (c *Core) Persist(rec storage.Record) { c.out.Writes = append(c.out.Writes, rec) }

// AddJob queues background work for the runtime.
func (c *Core) AddJob(j engine.Job) { c.out.Jobs = append(c.out.Jobs, j) }

// ApplyLocal queues rec for this replica's storage and tells the extension (notify: the
// write is first applied here).
func (c *Core) ApplyLocal(now time.Time, rec storage.Record, notify bool) {
	c.out.Writes = append(c.out.Writes, rec)
	if c.ext != nil {
		c.ext.Applied(now, rec, notify)
	}
}

// Propose starts coordinating a client request. The request must already have passed the
// gateway's validation (limits, level syntax); the core checks what needs placement.
func (c *Core) Propose(now time.Time, req Request) {
	c.observeTime(now)
	if c.Inflight >= c.Cfg.MaxInflight {
		c.Fail(req, errs.New(errs.Overloaded, "node coordinates %d requests already (limit %d)", c.Inflight, c.Cfg.MaxInflight))
		return
	}
	ks, ok := c.Pmap.Keyspace(req.Keyspace)
	if !ok || !c.Owns(ks) {
		c.Fail(req, errs.New(errs.NotFound, "unknown keyspace %q", req.Keyspace))
		return
	}
	if req.Level == "" {
		if c.ext != nil {
			req.Level = c.ext.DefaultLevel(ks, req.Op)
		} else {
			req.Level = DefaultLevel(ks.Spec, req.Op)
		}
	}
	if c.ext != nil && c.ext.Intercept(now, ks, req) {
		return
	}
	switch req.Op {
	case OpPut, OpDelete:
		c.startWrite(now, ks, req)
	case OpGet:
		c.StartRead(now, ks, req, PathQuorum)
	case OpScan:
		c.startScan(now, ks, req)
	case OpMoveMaster:
		c.Fail(req, errs.New(errs.Invalid, "keyspace %q uses protocol %s, which has no masters to move", req.Keyspace, ks.Spec.Protocol))
	default:
		c.Fail(req, errs.New(errs.Invalid, "unknown operation %d", int(req.Op)))
	}
}

// DefaultLevel is the quorum protocol's level for a request that names none: the keyspace's
// read_level or write_level option, QUORUM otherwise.
func DefaultLevel(ks config.Keyspace, op Op) config.Level {
	key := "read_level"
	if op == OpPut || op == OpDelete {
		key = "write_level"
	}
	if v, ok := ks.Options[key]; ok && v != "" {
		return config.Level(v)
	}
	return config.LevelQuorum
}

func (c *Core) NodeName(id uint32) string {
	for _, n := range c.Cfg.Nodes {
		if n.ID == id {
			return n.Name
		}
	}
	return fmt.Sprintf("node-%d", id)
}

func (c *Core) NodeNames(ids []uint32) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, c.NodeName(id))
	}
	return out
}

// byDistance orders replicas nearest first (self, then by RTT from the topology, then by ID),
// as Cassandra's snitch orders replicas for reads.
func (c *Core) ByDistance(replicas []uint32) []uint32 {
	out := slices.Clone(replicas)
	slices.SortStableFunc(out, func(a, b uint32) int {
		if a == c.Cfg.NodeID || b == c.Cfg.NodeID {
			if a == b {
				return 0
			}
			if a == c.Cfg.NodeID {
				return -1
			}
			return 1
		}
		da, db := c.RTT(a), c.RTT(b)
		if da != db {
			return cmp.Compare(da, db)
		}
		return cmp.Compare(a, b)
	})
	return out
}

func (c *Core) RTT(node uint32) time.Duration {
	if c.Cfg.Topology == nil {
		return 0
	}
	r, ok := c.Region[node]
	if !ok || !c.Cfg.Topology.HasRegion(r) || !c.Cfg.Topology.HasRegion(c.SelfRegion) {
		return 0
	}
	return c.Cfg.Topology.RTT(c.SelfRegion, r)
}

func (c *Core) newPeerReq() uint64 {
	c.nextPeerReq++
	return c.nextPeerReq
}

// observeTime remembers the latest time the runtime has told us about.
func (c *Core) observeTime(now time.Time) {
	if now.After(c.LastTick) {
		c.LastTick = now
	}
}

// Step processes one message from a peer.
func (c *Core) Step(now time.Time, env *peerpb.Envelope) {
	c.observeTime(now)
	if env == nil || env.To != c.Cfg.NodeID {
		return
	}
	if n, ok := env.Msg.(*peerpb.Envelope_MoveNote); ok && env.From == c.Cfg.NodeID {
		c.handleMoveNote(now, n.MoveNote)
		return
	}
	if _, known := c.Region[env.From]; !known || env.From == c.Cfg.NodeID {
		return
	}
	c.live.heard(env.From, now)
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_Write:
		c.handleWrite(now, env.From, m.Write)
	case *peerpb.Envelope_WriteAck:
		c.handleWriteAck(now, env.From, m.WriteAck)
	case *peerpb.Envelope_Read:
		c.handleRead(now, env.From, m.Read)
	case *peerpb.Envelope_ReadReply:
		c.handleReadReply(now, env.From, m.ReadReply)
	case *peerpb.Envelope_Scan:
		c.handleScan(now, env.From, m.Scan)
	case *peerpb.Envelope_ScanReply:
		c.handleScanReply(now, env.From, m.ScanReply)
	case *peerpb.Envelope_ScanCredit:
		c.handleScanCredit(now, env.From, m.ScanCredit)
	case *peerpb.Envelope_AeDigest, *peerpb.Envelope_AeKeys, *peerpb.Envelope_AePull:
		c.handleAE(now, env)
	case *peerpb.Envelope_AePush:
		c.handleAEPush(now, env.From, m.AePush)
	case *peerpb.Envelope_MoveSnapshotRequest:
		c.handleMoveSnapshotRequest(now, env.From, m.MoveSnapshotRequest)
	case *peerpb.Envelope_MoveSnapshotChunk:
		c.handleMoveSnapshotChunk(now, env.From, m.MoveSnapshotChunk)
	case *peerpb.Envelope_ReadChunk:
		c.handleReadChunk(now, env.From, m.ReadChunk)
	case *peerpb.Envelope_ReadChunkReply:
		c.handleReadChunkReply(now, env.From, m.ReadChunkReply)
	case *peerpb.Envelope_TransferReport:
		c.handleTransferReport(now, env.From, m.TransferReport)
	case *peerpb.Envelope_Heartbeat:
		// liveness already recorded
	default:
		if c.ext != nil {
			c.ext.StepExtension(now, env)
		}
	}
}

// Tick advances time: deadlines, speculative retries, heartbeats, anti-entropy, then the
// extension's tick.
func (c *Core) Tick(now time.Time) {
	c.observeTime(now)
	for _, t := range c.timers.due(now, 10_000) {
		switch t.kind {
		case timerWriteDeadline:
			c.expireWrite(t.id)
		case timerReadDeadline:
			c.expireRead(t.id)
		case timerReadSpeculate:
			c.speculateRead(now, t.id)
		case timerScanDeadline:
			c.expireScan(t.id)
		case timerScanSpeculate:
			c.speculateScan(now, t.id)
		case timerFetchHedge:
			c.hedgeFetch(now, t.id)
		default:
			if t.kind >= TimerExtension && c.ext != nil {
				c.ext.Timer(t.kind, t.id)
			}
		}
	}
	for _, peer := range c.live.heartbeatsDue(now, c.Cfg.HeartbeatInterval) {
		c.Send(peer, &peerpb.Envelope{Msg: &peerpb.Envelope_Heartbeat{Heartbeat: &peerpb.Heartbeat{SentUnixNanos: now.UnixNano()}}})
	}
	c.live.update(now, c.Cfg.FailureTimeout)
	c.tickAE(now)
	c.tickMoves(now)
	c.tickFetches(now)
	c.tickTransfers(now)
	c.sweepScanCursors(now, false)
	if c.ext != nil {
		c.ext.AfterTick(now)
	}
}

// AddTimer fires the extension's Timer(kind, id) at (a kind from TimerExtension on).
func (c *Core) AddTimer(at time.Time, kind TimerKind, id uint64) { c.timers.add(at, kind, id) }

// localReplica reports whether this node holds p's data: a replica, or the new replica of
// p's move in progress.
func (c *Core) localReplica(p *placement.Partition) bool { return c.holdsLocally(p) }

// PartitionFor finds the partition of (keyspace, partition id) named by a peer's message;
// ok is false if this node does not know it or does not replicate it.
func (c *Core) PartitionFor(keyspace string, id uint32) (*placement.Partition, bool) {
	ks, ok := c.Pmap.Keyspace(keyspace)
	if !ok {
		return nil, false
	}
	p, ok := ks.Partition(id)
	if !ok {
		return nil, false
	}
	return p, c.localReplica(p)
}

// PartitionOfKey returns the partition holding key in this node's map; ok is false if the
// keyspace is unknown or this node does not replicate that partition. Records and key
// references from peers are placed by key: partitions are key ranges, so a split or merge
// that the peer has not seen yet (or this node has not) does not change where a key lives.
func (c *Core) PartitionOfKey(keyspace string, key []byte) (*placement.Partition, bool) {
	ks, ok := c.Pmap.Keyspace(keyspace)
	if !ok {
		return nil, false
	}
	p := ks.Lookup(key)
	return p, c.localReplica(p)
}

// HoldsRange reports whether this node replicates every partition of its map overlapping
// [start, end) (end nil: to the end of the keyspace). A scan request names the range its
// coordinator cut from one partition of the coordinator's map; by key range, it is served
// whatever splits or merges either side has seen.
func (c *Core) HoldsRange(keyspace string, start, end []byte) bool {
	ks, ok := c.Pmap.Keyspace(keyspace)
	if !ok {
		return false
	}
	parts := ks.Overlapping(start, end)
	for _, p := range parts {
		if !c.localReplica(p) {
			return false
		}
	}
	return len(parts) > 0
}

// HoldsKey reports whether this node replicates the partition holding key.
func (c *Core) HoldsKey(keyspace string, key []byte) bool {
	_, ok := c.PartitionOfKey(keyspace, key)
	return ok
}
