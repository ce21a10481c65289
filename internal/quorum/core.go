// Package quorum is the Cassandra-style majority-quorum protocol: the baseline every later
// protocol is compared with (MeteorShower paper, section I and IV-2 "The Baseline"; DESIGN.md
// section 5).
//
// The node that receives a request coordinates it. A write is stamped with a version from the
// coordinator's hybrid logical clock, sent to every replica of the key's partition, and
// acknowledged to the client once the consistency level's count of replicas has made it
// durable. A read asks the level's count of replicas (nearest first, with a speculative retry
// to the others), returns the newest version among the replies and, before returning, repairs
// the stale replicas it asked (blocking read repair, as Cassandra does since 4.0, so that two
// successive QUORUM reads never go back in time). Replicas apply a write only if it is newer
// (last-writer-wins by version: versions are separate MVCC keys in storage, so an older
// version never hides a newer one). Replicas that missed writes while down are repaired by
// anti-entropy (antientropy.go).
//
// The Core is sans-IO in the style of etcd raft's RawNode: it never blocks, never reads a
// clock and never touches the network. The runtime feeds it client requests (Propose), peer
// messages (Step) and the passage of time (Tick), then takes its output with Ready: storage
// writes that must be durable before any of the output messages or replies of the same or a
// later Ready leave the node. Storage is read synchronously through the injected Reader.
package quorum

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// SystemKeyspace holds cluster metadata (keyspaces created through the API). It is replicated
// on every node and uses this protocol.
const SystemKeyspace = "_system"

// Op is a client operation.
type Op int

const (
	OpGet Op = iota + 1
	OpPut
	OpDelete
	OpScan
)

func (o Op) String() string {
	switch o {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpScan:
		return "scan"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Request is a validated client request handed to the coordinator.
type Request struct {
	// ID is assigned by the runtime, unique among the node's requests in flight.
	ID       uint64
	Op       Op
	Keyspace string
	Key      []byte
	Value    []byte
	// Start, End and Limit describe a scan range [Start, End); End empty is unbounded.
	Start, End []byte
	Limit      int
	Level      config.Level
	Deadline   time.Time
	// MinVersion, when set, is folded into the coordinator's clock before a write is stamped,
	// so a client session's later writes are newer than everything it has seen.
	MinVersion hlc.Version
	// WriteMode is GlobLease's write mode: "active", "passive" or "" (the keyspace default).
	WriteMode string
	// Region is the target region of OpMoveMaster.
	Region string
	// WaitAll (writes of the quorum protocol): once the level is met, keep waiting for the
	// acknowledgement of every replica the failure detector considers alive, until the
	// deadline; the result then names the replicas that did not acknowledge (Unacked). The
	// catalog uses it so that creating a keyspace returns once every node can use it, or
	// says which cannot.
	WaitAll bool
}

// Result is the reply to one Request.
type Result struct {
	ID      uint64
	Op      Op
	Err     error
	Found   bool
	Value   []byte
	Version hlc.Version
	// Items are the live records of a scan, in key order.
	Items []storage.Record
	More  bool
	// Path says how a read was served (PathQuorum, PathLocal, ...).
	Path string
	// Master, MasterRegion and TableVersion answer OpMoveMaster.
	Master, MasterRegion string
	TableVersion         uint64
	// Unacked (WaitAll writes that succeeded) lists the replicas that had not acknowledged
	// the write when it returned, each with why: "down" or "no acknowledgement before the
	// deadline".
	Unacked []Unacked
}

// Unacked is a replica that did not acknowledge a WaitAll write.
type Unacked struct {
	Node   uint32
	Reason string
}

// Reader is the synchronous, read-only view of the node's storage the core needs.
type Reader interface {
	Get(keyspace string, partition uint32, key []byte) (storage.Record, bool, error)
	// GetAt returns the newest version of key not newer than maxVersion.
	GetAt(keyspace string, partition uint32, key []byte, maxVersion hlc.Version) (storage.Record, bool, error)
	Scan(keyspace string, partition uint32, start, end []byte, limit int, fn func(storage.Record) bool) error
}

// Ready is the core's output since the last call to Ready.
//
// Contract (as etcd raft's Ready): Writes must be durable (synced) before any of Messages or
// Replies is released, and Readies must be released in order. Jobs are anti-entropy work the
// runtime runs off the event loop (RunJob) and whose messages it sends when done.
type Ready struct {
	Writes   []storage.Record
	Messages []*peerpb.Envelope
	Replies  []Result
	Jobs     []Job
}

// Empty reports whether there is nothing to do.
func (r *Ready) Empty() bool {
	return len(r.Writes) == 0 && len(r.Messages) == 0 && len(r.Replies) == 0 && len(r.Jobs) == 0
}

// Config parameterises a Core.
type Config struct {
	NodeID   uint32
	Nodes    []config.Node
	Topology *topology.Topology
	Limits   config.Limits
	// HeartbeatInterval is how often an idle link carries a heartbeat. Default 250ms.
	HeartbeatInterval time.Duration
	// FailureTimeout: a peer silent for this long is considered down and is not counted on
	// for availability (Cassandra's failure detector marks it down the same way). Default 2s.
	FailureTimeout time.Duration
	// AntiEntropyInterval is how often this node starts an anti-entropy exchange with a peer.
	AntiEntropyInterval time.Duration
	// MaxInflight bounds the requests this coordinator tracks at once. Default 100,000.
	MaxInflight int
	// MaxClockSkew: versions further ahead of the local clock are not folded into the HLC.
	MaxClockSkew time.Duration
	// MaxClockOffset is ε, the clock bound MeteorShower reads rely on (default 2ms).
	MaxClockOffset time.Duration
	// Mutation deliberately breaks the protocol (see Mutations) so the simulator can prove
	// its checkers catch the breakage. Empty in every real deployment.
	Mutation string
}

// Mutations are the named broken variants of this protocol, for `meridian sim --mutate`. A
// checker that never fails proves nothing: each of these must be caught within a bounded
// number of simulation seeds (DESIGN.md section 6).
var Mutations = map[string]string{
	"one-one":         "reads and writes at ONE/ONE, so R + W <= N (the simulator sets the levels)",
	"first-reply":     "a read returns the first reply it gets instead of the newest, and repairs nothing",
	"no-anti-entropy": "anti-entropy never runs, so a replica that missed writes stays behind (the convergence checker must see it)",
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

// Core is the quorum protocol state machine of one node. Not safe for concurrent use.
type Core struct {
	cfg    Config
	store  Reader
	clock  *hlc.HLC
	pmap   *placement.Map
	region map[uint32]string // node ID → region
	self   string            // this node's region

	nextPeerReq uint64
	writes      map[uint64]*pendingWrite // by peer request ID
	reads       map[uint64]*pendingRead  // by peer request ID (including repair writes)
	scans       map[uint64]*scanRound    // by peer request ID
	scanOps     map[uint64]*pendingScan  // by client request ID
	inflight    int

	timers timers
	live   liveness
	ae     aeState

	ms         *msState // MeteorShower's statuses and waiting reads; nil without such keyspaces
	msCounters MSCounters
	gl         *glState // GlobLease state; nil until the placement holds a globlease keyspace
	glCounters GLCounters
	lastTick   time.Time

	out Ready
}

// NewCore returns the protocol state machine of node cfg.NodeID.
func NewCore(cfg Config, store Reader) *Core {
	cfg.ensureDefaults()
	c := &Core{
		cfg:     cfg,
		store:   store,
		clock:   hlc.NewHLC(cfg.NodeID, cfg.MaxClockSkew),
		region:  map[uint32]string{},
		writes:  map[uint64]*pendingWrite{},
		reads:   map[uint64]*pendingRead{},
		scans:   map[uint64]*scanRound{},
		scanOps: map[uint64]*pendingScan{},
	}
	for _, n := range cfg.Nodes {
		c.region[n.ID] = n.Region
	}
	c.self = c.region[cfg.NodeID]
	c.live.init(cfg.NodeID, cfg.Nodes)
	return c
}

// SetPlacement installs a new placement map. Requests in flight keep the partition they
// started with.
func (c *Core) SetPlacement(m *placement.Map) { c.pmap = m }

// Placement returns the installed placement map.
func (c *Core) Placement() *placement.Map { return c.pmap }

// Clock exposes the HLC (read-only use: metrics, tests).
func (c *Core) Clock() *hlc.HLC { return c.clock }

// Alive reports whether the failure detector considers node alive.
func (c *Core) Alive(node uint32) bool { return c.live.alive(node) }

// Inflight returns the number of client requests being coordinated.
func (c *Core) Inflight() int { return c.inflight }

// Ready returns and clears the output accumulated since the last call.
func (c *Core) Ready() Ready {
	rd := c.out
	c.out = Ready{}
	return rd
}

// HasReady reports whether Ready would return anything.
func (c *Core) HasReady() bool { return !c.out.Empty() }

func (c *Core) send(to uint32, env *peerpb.Envelope) {
	env.From = c.cfg.NodeID
	env.To = to
	c.out.Messages = append(c.out.Messages, env)
	c.live.sent(to, c.lastTick)
}

func (c *Core) reply(r Result) {
	c.out.Replies = append(c.out.Replies, r)
}

func (c *Core) fail(req Request, err error) {
	c.reply(Result{ID: req.ID, Op: req.Op, Err: err})
}

// Propose starts coordinating a client request. The request must already have passed the
// gateway's validation (limits, level syntax); the core checks what needs placement.
func (c *Core) Propose(now time.Time, req Request) {
	c.observeTime(now)
	if c.inflight >= c.cfg.MaxInflight {
		c.fail(req, errs.New(errs.Overloaded, "node coordinates %d requests already (limit %d)", c.inflight, c.cfg.MaxInflight))
		return
	}
	ks, ok := c.pmap.Keyspace(req.Keyspace)
	if !ok {
		c.fail(req, errs.New(errs.NotFound, "unknown keyspace %q", req.Keyspace))
		return
	}
	level := req.Level
	if level == "" {
		level = defaultLevel(ks.Spec, req.Op)
	}
	req.Level = level
	if req.Op == OpMoveMaster && !isGL(ks) {
		c.fail(req, errs.New(errs.Invalid, "keyspace %q uses protocol %s: only globlease keyspaces have masters to move", req.Keyspace, ks.Spec.Protocol))
		return
	}
	if isGL(ks) && req.Op != OpScan {
		c.glProposeReq(now, ks, req)
		return
	}
	switch req.Op {
	case OpPut, OpDelete:
		c.startWrite(now, ks, req)
	case OpGet:
		if isMS(ks) && c.ms != nil && req.Level != config.LevelOne && !req.Level.IsLocal() {
			c.startMSRead(now, ks, req)
		} else {
			c.startRead(now, ks, req, PathQuorum)
		}
	case OpScan:
		c.startScan(now, ks, req)
	default:
		c.fail(req, errs.New(errs.Invalid, "unknown operation %d", int(req.Op)))
	}
}

func defaultLevel(ks config.Keyspace, op Op) config.Level {
	key := "read_level"
	if op == OpPut || op == OpDelete {
		key = "write_level"
	}
	if v, ok := ks.Options[key]; ok && v != "" {
		return config.Level(v)
	}
	return config.LevelQuorum
}

// eligible returns the replicas whose replies count for level and how many are needed.
func (c *Core) eligible(p *placement.Partition, level config.Level) ([]uint32, int, error) {
	switch level {
	case config.LevelOne:
		return p.Replicas, 1, nil
	case config.LevelQuorum:
		return p.Replicas, len(p.Replicas)/2 + 1, nil
	case config.LevelAll:
		return p.Replicas, len(p.Replicas), nil
	case config.LevelLocalOne, config.LevelLocalQuorum:
		var local []uint32
		for _, r := range p.Replicas {
			if c.region[r] == c.self {
				local = append(local, r)
			}
		}
		if len(local) == 0 {
			return nil, 0, errs.New(errs.Invalid,
				"consistency %s needs a replica in the coordinator's region %q, and partition %d has none",
				level, c.self, p.ID)
		}
		if level == config.LevelLocalOne {
			return local, 1, nil
		}
		return local, len(local)/2 + 1, nil
	}
	return nil, 0, errs.New(errs.Invalid, "consistency level %q is not valid for protocol quorum (valid: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM)", level)
}

// checkAvailable fails fast, as Cassandra's UnavailableException does, when the failure
// detector already knows that too few eligible replicas are alive.
func (c *Core) checkAvailable(elig []uint32, need int, level config.Level, p *placement.Partition) error {
	alive := 0
	var down []string
	for _, r := range elig {
		if c.live.alive(r) {
			alive++
		} else {
			down = append(down, c.nodeName(r))
		}
	}
	if alive >= need {
		return nil
	}
	return errs.New(errs.Unavailable,
		"consistency %s needs %d replicas of partition %d, only %d alive (down: %v)",
		level, need, p.ID, alive, down)
}

func (c *Core) nodeName(id uint32) string {
	for _, n := range c.cfg.Nodes {
		if n.ID == id {
			return n.Name
		}
	}
	return fmt.Sprintf("node-%d", id)
}

func (c *Core) nodeNames(ids []uint32) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, c.nodeName(id))
	}
	return out
}

// byDistance orders replicas nearest first (self, then by RTT from the topology, then by ID),
// as Cassandra's snitch orders replicas for reads.
func (c *Core) byDistance(replicas []uint32) []uint32 {
	out := slices.Clone(replicas)
	slices.SortStableFunc(out, func(a, b uint32) int {
		if a == c.cfg.NodeID || b == c.cfg.NodeID {
			if a == b {
				return 0
			}
			if a == c.cfg.NodeID {
				return -1
			}
			return 1
		}
		da, db := c.rtt(a), c.rtt(b)
		if da != db {
			return cmp.Compare(da, db)
		}
		return cmp.Compare(a, b)
	})
	return out
}

func (c *Core) rtt(node uint32) time.Duration {
	if c.cfg.Topology == nil {
		return 0
	}
	r, ok := c.region[node]
	if !ok || !c.cfg.Topology.HasRegion(r) || !c.cfg.Topology.HasRegion(c.self) {
		return 0
	}
	return c.cfg.Topology.RTT(c.self, r)
}

func (c *Core) newPeerReq() uint64 {
	c.nextPeerReq++
	return c.nextPeerReq
}

// observeTime remembers the latest time the runtime has told us about.
func (c *Core) observeTime(now time.Time) {
	if now.After(c.lastTick) {
		c.lastTick = now
	}
}

// Step processes one message from a peer.
func (c *Core) Step(now time.Time, env *peerpb.Envelope) {
	c.observeTime(now)
	if env == nil || env.To != c.cfg.NodeID {
		return
	}
	if _, known := c.region[env.From]; !known || env.From == c.cfg.NodeID {
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
	case *peerpb.Envelope_AeDigest, *peerpb.Envelope_AeKeys, *peerpb.Envelope_AePull:
		c.handleAE(now, env)
	case *peerpb.Envelope_AePush:
		c.handleAEPush(now, env.From, m.AePush)
	case *peerpb.Envelope_Heartbeat:
		// liveness already recorded
	case *peerpb.Envelope_Status, *peerpb.Envelope_WriteNotification, *peerpb.Envelope_FullStatusRequest,
		*peerpb.Envelope_FullStatus, *peerpb.Envelope_ClockPing, *peerpb.Envelope_ClockPong:
		c.handleMS(now, env)
	default:
		c.glStep(now, env)
	}
}

// Tick advances time: deadlines, speculative retries, heartbeats, anti-entropy.
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
		case timerGLLocalDeadline:
			if c.gl != nil {
				c.glExpireLocal(t.id)
			}
		case timerGLFwdDeadline:
			if c.gl != nil {
				c.glExpireFwd(t.id)
			}
		}
	}
	for _, peer := range c.live.heartbeatsDue(now, c.cfg.HeartbeatInterval) {
		c.send(peer, &peerpb.Envelope{Msg: &peerpb.Envelope_Heartbeat{Heartbeat: &peerpb.Heartbeat{SentUnixNanos: now.UnixNano()}}})
	}
	c.live.update(now, c.cfg.FailureTimeout)
	c.tickAE(now)
	c.tickMS(now)
	c.glTick(now)
}

// localReplica reports whether this node holds a replica of p.
func (c *Core) localReplica(p *placement.Partition) bool { return p.HasReplica(c.cfg.NodeID) }

// partitionFor finds the partition of (keyspace, partition id) for records arriving from
// peers; it rejects records for partitions this node does not replicate.
func (c *Core) partitionFor(keyspace string, id uint32) (*placement.Partition, bool) {
	ks, ok := c.pmap.Keyspace(keyspace)
	if !ok || int(id) >= len(ks.Partitions) {
		return nil, false
	}
	p := &ks.Partitions[id]
	return p, c.localReplica(p)
}
