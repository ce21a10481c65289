// Package epaxos is the engine of protocol epaxos: one EPaxos replica (internal/epaxos) per
// partition of an epaxos keyspace that this node replicates. Client writes, reads and scans
// become commands of the node's own instances (EPaxos sends reads through consensus too, as
// the Canopus thesis notes in 4.6.1); every replica applies the writes of executed instances
// in execution order, and the command leader answers each of its commands once the instance
// is executed here.
package epaxos

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	core "meridian/internal/epaxos"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// Limits of one engine.
const (
	// maxPending bounds the requests a node waits on per partition; more are refused as
	// overloaded.
	maxPending = 100_000
	// maxVersionCache bounds the keys whose newest version the engine remembers beyond
	// storage (writes handed out in Readies not yet applied); above it, keys storage has
	// caught up with are forgotten.
	maxVersionCache = 65_536
	// digestsKept is how many executed instances' digests an instance space keeps for the
	// simulator's agreement invariant.
	digestsKept = 4096
	// expiryInterval is how often pending requests are checked against their deadlines.
	expiryInterval = 20 * time.Millisecond
)

// Mutations are epaxos's broken variants; the simulator must catch each.
var Mutations = map[string]string{
	core.MutationFastShort:               "a command leader commits on the fast path when one reply fewer than a fast quorum left its attributes unchanged",
	core.MutationIgnoreDeps:              "a replica executes an instance as soon as it commits, without waiting for the instances it depends on",
	core.MutationRecoveryIgnoresAccepted: "explicit prepare ignores accepted values: it restarts from a pre-accepted value or a no-op",
}

type spaceKey struct {
	keyspace  string
	partition uint32
}

// space is one partition's replica and what this node's clients wait on.
type space struct {
	key    spaceKey
	node   *core.Node
	failed error
	fatal  error
	// waiting are this node's requests in its instances, by request ID.
	waiting map[uint64]engine.Request
	// unexecuted are this node's requests (this incarnation) whose commands have not
	// executed: the waiting ones and those that expired meanwhile, whose commands still
	// travel. arrivals are their arrival times in order (entries of executed requests are
	// skipped when they reach the front). overloadAfter is the oldest an unexecuted command
	// may be before new requests are refused (admit).
	unexecuted    map[uint64]struct{}
	arrivals      []arrival
	overloadAfter time.Duration
	// digests: executed instance → digest of its attributes, in execution order (the
	// agreement invariant); checked is how many the invariant has compared.
	digests map[core.ID]uint64
	order   []core.ID
	checked int
}

type arrival struct {
	id uint64
	at time.Time
}

// admit reports how long the oldest unexecuted command of this node's clients has waited,
// and whether a new request may join it: not once that is overloadAfter or more. Without it
// a replica under more load than the links carry keeps proposing, the commands of expired
// requests stay in their instances, and the backlog they leave on the links outlasts the
// overload by minutes (docs/epaxos.md, "Overload"). Refused requests cost nothing on the
// links; the backlog drains, and admission resumes by itself. A command whose instance
// recovery replaced with a no-op never executes: it is forgotten 2 × overloadAfter after it
// arrived, so it holds admission shut for at most overloadAfter.
func (sp *space) admit(now time.Time) (waited time.Duration, ok bool) {
	k := 0
	for k < len(sp.arrivals) {
		a := sp.arrivals[k]
		if _, still := sp.unexecuted[a.id]; still && now.Sub(a.at) < 2*sp.overloadAfter {
			break
		}
		delete(sp.unexecuted, a.id)
		k++
	}
	if k > 0 {
		sp.arrivals = slices.Delete(sp.arrivals, 0, k)
	}
	if len(sp.arrivals) == 0 {
		return 0, true
	}
	waited = now.Sub(sp.arrivals[0].at)
	return waited, waited < sp.overloadAfter
}

// arrived records a request whose command this node proposes now.
func (sp *space) arrived(id uint64, now time.Time) {
	if len(sp.arrivals) > 2*len(sp.unexecuted)+maxPending {
		// Executed requests behind a long-waiting one: drop their entries (amortised: at
		// least maxPending go each time).
		sp.arrivals = slices.DeleteFunc(sp.arrivals, func(a arrival) bool { _, still := sp.unexecuted[a.id]; return !still })
	}
	sp.unexecuted[id] = struct{}{}
	sp.arrivals = append(sp.arrivals, arrival{id: id, at: now})
}

type versionKey struct {
	keyspace, key string
}

// counters count what the engine did (engine.Counted), split by link class like canopus's.
type counters struct {
	writes, reads, scans, executed, refused, expired atomic.Int64
	msgsIntra, msgsInter, bytesIntra, bytesInter     atomic.Int64
}

var counterNames = []string{"writes", "reads", "scans", "instances_executed", "refused", "expired",
	"peer_msgs_intra", "peer_msgs_inter", "peer_bytes_intra", "peer_bytes_inter"}

func (c *counters) byName() map[string]*atomic.Int64 {
	return map[string]*atomic.Int64{"writes": &c.writes, "reads": &c.reads, "scans": &c.scans, "instances_executed": &c.executed,
		"refused": &c.refused, "expired": &c.expired, "peer_msgs_intra": &c.msgsIntra, "peer_msgs_inter": &c.msgsInter,
		"peer_bytes_intra": &c.bytesIntra, "peer_bytes_inter": &c.bytesInter}
}

// CounterSnapshot returns the counters (engine.Counted).
func (e *Engine) CounterSnapshot() map[string]int64 {
	out := map[string]int64{}
	for name, c := range e.stats.byName() {
		out[name] = c.Load()
	}
	return out
}

// Engine is one node's epaxos engine.
type Engine struct {
	stats counters
	cfg   engine.Config
	store engine.Reader
	// incarnation tells this run's commands from earlier runs' (request IDs restart).
	incarnation uint64
	pmap        *placement.Map
	spaces      map[spaceKey]*space
	order       []spaceKey
	// versions are the newest versions of keys written in Readies storage may not hold yet.
	versions   map[versionKey]hlc.Version
	out        engine.Ready
	lastExpiry time.Time
	regions    map[uint32]string
}

// New returns the engine of node cfg.NodeID.
func New(cfg engine.Config, store engine.Reader) *Engine {
	rng := rand.New(rand.NewPCG(cfg.RandSeed, uint64(cfg.NodeID)^0x45506178))
	return &Engine{cfg: cfg, store: store, incarnation: rng.Uint64() | 1, spaces: map[spaceKey]*space{},
		versions: map[versionKey]hlc.Version{}}
}

func prefix(k spaceKey) []byte {
	b := append([]byte{'E'}, k.keyspace...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint32(b, k.partition)
}

// SetPlacement creates a replica for every partition of an epaxos keyspace this node holds.
func (e *Engine) SetPlacement(m *placement.Map) {
	e.pmap = m
	e.order = engine.Reconcile(e.spaces, engine.LocalPartitions(m, config.ProtocolEPaxos, e.cfg.NodeID),
		func(lp engine.LocalPartition) spaceKey { return spaceKey{lp.Keyspace.Spec.Name, lp.Partition.ID} },
		func(k spaceKey, lp engine.LocalPartition) *space { return e.newSpace(k, lp.Keyspace, lp.Partition) },
		func(k spaceKey, sp *space) {
			e.failAll(sp, errs.New(errs.NotFound, "keyspace %q partition %d left this node's map", k.keyspace, k.partition))
		})
}

// Options returns the core options of a keyspace whose replicas are at most maxRTT apart.
func Options(spec config.Keyspace, maxRTT time.Duration) (core.Options, error) {
	eo, err := config.EPaxosOptionsOf(spec.Options)
	if err != nil {
		return core.Options{}, err
	}
	o := core.Options{BatchInterval: eo.BatchInterval, BatchMax: eo.BatchMax, FastPathTimeout: eo.FastPathTimeout,
		RecoveryTimeout: eo.RecoveryTimeout, ReportInterval: eo.ReportInterval, MaxInstances: eo.MaxInstances}
	if o.FastPathTimeout == 0 {
		o.FastPathTimeout = maxRTT + 20*time.Millisecond
	}
	if o.RecoveryTimeout == 0 {
		o.RecoveryTimeout = 4*maxRTT + 200*time.Millisecond
	}
	return o, o.Validate()
}

// overloadAfter is the keyspace's overload_after (auto: eight largest round trips, at least
// a second: far beyond any latency the replicas reach unloaded, so only a backlog trips it).
func overloadAfter(spec config.Keyspace, maxRTT time.Duration) time.Duration {
	eo, err := config.EPaxosOptionsOf(spec.Options)
	if err == nil && eo.OverloadAfter > 0 {
		return eo.OverloadAfter
	}
	return max(time.Second, 8*maxRTT)
}

func (e *Engine) newSpace(k spaceKey, ks *placement.Keyspace, p placement.Partition) *space {
	sp := &space{key: k, waiting: map[uint64]engine.Request{}, unexecuted: map[uint64]struct{}{}, digests: map[core.ID]uint64{}}
	var maxRTT time.Duration
	if t := e.cfg.Topology; t != nil {
		for _, a := range p.Replicas {
			for _, b := range p.Replicas {
				ra, rb := e.regionOf(a), e.regionOf(b)
				if t.HasRegion(ra) && t.HasRegion(rb) {
					maxRTT = max(maxRTT, t.RTT(ra, rb))
				}
			}
		}
	}
	opts, err := Options(ks.Spec, maxRTT)
	if err != nil {
		sp.failed = errs.New(errs.Internal, "keyspace %q: %v", k.keyspace, err)
		return sp
	}
	sp.overloadAfter = overloadAfter(ks.Spec, maxRTT)
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", k.keyspace, k.partition)
	node, err := core.NewNode(core.Config{ID: e.cfg.NodeID, Replicas: p.Replicas, Options: opts,
		Rand: rand.New(rand.NewPCG(e.cfg.RandSeed^uint64(e.cfg.NodeID), h.Sum64())), Store: e.store,
		Prefix: prefix(k), Mutation: e.cfg.Mutation})
	if err != nil {
		sp.failed = errs.New(errs.Internal, "keyspace %q partition %d: %v", k.keyspace, k.partition, err)
		return sp
	}
	sp.node = node
	return sp
}

func (e *Engine) regionOf(id uint32) string {
	if e.regions == nil {
		e.regions = make(map[uint32]string, len(e.cfg.Nodes))
		for _, n := range e.cfg.Nodes {
			e.regions[n.ID] = n.Region
		}
	}
	return e.regions[id]
}

func (e *Engine) reply(r engine.Result) { e.out.Replies = append(e.out.Replies, r) }

// Propose starts a client request.
func (e *Engine) Propose(now time.Time, req engine.Request) {
	_, p, err := engine.RoutePartition(e.pmap, config.ProtocolEPaxos, req)
	if err != nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: err})
		return
	}
	sp := e.spaces[spaceKey{req.Keyspace, p.ID}]
	switch {
	case sp == nil:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable, "this node does not replicate keyspace %q partition %d; send the request to one of its replicas %v", req.Keyspace, p.ID, p.Replicas)})
		return
	case sp.failed != nil:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: sp.failed})
		return
	case len(sp.waiting) >= maxPending || len(sp.unexecuted) >= 2*maxPending:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Overloaded, "keyspace %q partition %d: %d requests wait for their instances (%d commands unexecuted); retry later", req.Keyspace, p.ID, len(sp.waiting), len(sp.unexecuted))})
		return
	}
	if waited, ok := sp.admit(now); !ok {
		e.stats.refused.Add(1)
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Overloaded, "keyspace %q partition %d: the oldest of this replica's %d unexecuted commands has waited %v (overload_after %v): the replicas are behind; retry later", req.Keyspace, p.ID, len(sp.unexecuted), waited.Round(time.Millisecond), sp.overloadAfter)})
		return
	}
	cmd := &peerpb.EPaxosCommand{RequestId: req.ID, Incarnation: e.incarnation, Key: req.Key}
	switch req.Op {
	case engine.OpPut, engine.OpDelete:
		cmd.Write, cmd.Value, cmd.Tombstone, cmd.TimeNanos = true, req.Value, req.Op == engine.OpDelete, now.UnixNano()
		e.stats.writes.Add(1)
	case engine.OpGet:
		e.stats.reads.Add(1)
	case engine.OpScan:
		cmd.Scan, cmd.Key, cmd.End, cmd.Limit = true, req.Start, req.End, uint32(max(0, req.Limit))
		e.stats.scans.Add(1)
	default:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q (epaxos) serves Get, Put, Delete and Scan, not %s", req.Keyspace, req.Op)})
		return
	}
	sp.waiting[req.ID] = req
	sp.arrived(req.ID, now)
	sp.node.Propose(now, cmd)
}

// Step delivers a peer message.
func (e *Engine) Step(now time.Time, env *peerpb.Envelope) {
	m := env.GetEpaxos()
	if m == nil {
		return
	}
	if sp := e.spaces[spaceKey{m.GetKeyspace(), m.GetPartition()}]; sp != nil && sp.node != nil {
		sp.node.Step(now, env.GetFrom(), m)
	}
}

// Tick advances time.
func (e *Engine) Tick(now time.Time) {
	for _, k := range e.order {
		if sp := e.spaces[k]; sp.node != nil {
			sp.node.Tick(now)
		}
	}
	if now.Sub(e.lastExpiry) >= expiryInterval {
		e.lastExpiry = now
		e.expire(now)
	}
}

// expire fails requests past their deadline: a write's outcome is unknown (its instance may
// still commit), a read was not served.
func (e *Engine) expire(now time.Time) {
	for _, k := range e.order {
		sp := e.spaces[k]
		for _, id := range slices.Sorted(maps.Keys(sp.waiting)) {
			req := sp.waiting[id]
			if req.Deadline.IsZero() || !now.After(req.Deadline) {
				continue
			}
			delete(sp.waiting, id)
			e.stats.expired.Add(1)
			msg := "the read's instance had not executed by its deadline"
			if req.Op == engine.OpPut || req.Op == engine.OpDelete {
				msg = "the write's instance had not executed by its deadline; it may still apply"
			}
			e.reply(engine.Result{ID: id, Op: req.Op, Err: errs.New(errs.Timeout, "%s", msg)})
		}
	}
}

func (e *Engine) failAll(sp *space, err error) {
	for _, id := range slices.Sorted(maps.Keys(sp.waiting)) {
		e.reply(engine.Result{ID: id, Op: sp.waiting[id].Op, Err: err})
	}
	sp.waiting = map[uint64]engine.Request{}
	sp.unexecuted, sp.arrivals = map[uint64]struct{}{}, nil
}

// HasReady reports whether there is output.
func (e *Engine) HasReady() bool {
	if !e.out.Empty() {
		return true
	}
	for _, k := range e.order {
		if sp := e.spaces[k]; sp.node != nil && sp.node.HasReady() {
			return true
		}
	}
	return false
}

// Ready returns the output: each replica's saved instances and messages, and the writes of
// the instances it executed, in execution order, in the same batch.
func (e *Engine) Ready() engine.Ready {
	self := e.regionOf(e.cfg.NodeID)
	for _, k := range e.order {
		sp := e.spaces[k]
		if sp.node == nil || !sp.node.HasReady() {
			continue
		}
		rd := sp.node.Ready()
		if err := sp.node.Err(); err != nil {
			sp.failed = errs.New(errs.Internal, "keyspace %q partition %d: %v", k.keyspace, k.partition, err)
			sp.fatal = err
			e.failAll(sp, sp.failed)
			sp.node = nil
			continue
		}
		e.out.Raw = append(e.out.Raw, rd.Raw...)
		for _, m := range rd.Messages {
			m.Body.Keyspace, m.Body.Partition = k.keyspace, k.partition
			env := &peerpb.Envelope{From: e.cfg.NodeID, To: m.To, Msg: &peerpb.Envelope_Epaxos{Epaxos: m.Body}}
			e.out.Messages = append(e.out.Messages, env)
			if e.regionOf(m.To) == self {
				e.stats.msgsIntra.Add(1)
				e.stats.bytesIntra.Add(int64(proto.Size(env)))
			} else {
				e.stats.msgsInter.Add(1)
				e.stats.bytesInter.Add(int64(proto.Size(env)))
			}
		}
		for _, ex := range rd.Executed {
			e.apply(sp, ex)
		}
		for _, c := range rd.Refused {
			if req, ok := sp.waiting[c.GetRequestId()]; ok && c.GetIncarnation() == e.incarnation {
				delete(sp.waiting, c.GetRequestId())
				delete(sp.unexecuted, c.GetRequestId())
				e.stats.refused.Add(1)
				e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Overloaded, "keyspace %q partition %d: the replica holds as many instances as max_instances allows until every replica has executed them; retry later", k.keyspace, k.partition)})
			}
		}
	}
	if len(e.versions) > maxVersionCache {
		e.forgetVersions()
	}
	rd := e.out
	e.out = engine.Ready{}
	return rd
}

// apply applies an executed instance's writes in its order and answers this node's commands.
func (e *Engine) apply(sp *space, ex core.Executed) {
	e.stats.executed.Add(1)
	h := fnv.New64a()
	fmt.Fprintf(h, "%d %v|", ex.Attrs.GetSeq(), ex.Attrs.GetDeps())
	own := ex.ID.Replica == e.cfg.NodeID
	for _, c := range ex.Attrs.GetCommands() {
		// The fields that decide the outcome, without encoding the command again.
		fmt.Fprintf(h, "%d.%d %t%t%t %q %q %q %d %d|", c.GetRequestId(), c.GetIncarnation(), c.GetWrite(), c.GetScan(), c.GetTombstone(),
			c.GetKey(), c.GetValue(), c.GetEnd(), c.GetLimit(), c.GetTimeNanos())
		var req engine.Request
		mine := false
		if own && c.GetIncarnation() == e.incarnation {
			delete(sp.unexecuted, c.GetRequestId())
			req, mine = sp.waiting[c.GetRequestId()]
			if mine {
				delete(sp.waiting, c.GetRequestId())
			}
		}
		if !c.GetWrite() {
			if mine {
				e.out.Reads = append(e.out.Reads, engine.LocalRead(req, "instance"))
			}
			continue
		}
		v := e.nextVersion(sp.key.keyspace, c, ex.ID.Replica)
		e.out.Writes = append(e.out.Writes, storage.Record{Keyspace: sp.key.keyspace, Key: c.GetKey(), Value: c.GetValue(), Tombstone: c.GetTombstone(), Version: v})
		if mine {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Version: v, Path: "instance"})
		}
	}
	sp.digests[ex.ID] = h.Sum64()
	sp.order = append(sp.order, ex.ID)
	if len(sp.order) > digestsKept {
		drop := len(sp.order) - digestsKept
		for _, id := range sp.order[:drop] {
			delete(sp.digests, id)
		}
		sp.order = slices.Delete(sp.order, 0, drop)
		sp.checked = max(0, sp.checked-drop)
	}
}

// nextVersion is a write's version: above the key's newest and at least the leader's clock
// when it proposed. Every replica applies a key's writes in the same order onto the same
// versions, so each computes the same one.
func (e *Engine) nextVersion(keyspace string, c *peerpb.EPaxosCommand, leader uint32) hlc.Version {
	vk := versionKey{keyspace, string(c.GetKey())}
	prev, ok := e.versions[vk]
	if !ok {
		if rec, found, err := e.store.Get(keyspace, c.GetKey()); err == nil && found {
			prev = rec.Version
		}
	}
	v := hlc.Version{WallNanos: c.GetTimeNanos(), NodeID: leader}
	if !prev.Less(v) {
		v = hlc.Version{WallNanos: prev.WallNanos, Logical: prev.Logical + 1, NodeID: leader}
	}
	e.versions[vk] = v
	return v
}

// forgetVersions drops the remembered versions storage already holds.
func (e *Engine) forgetVersions() {
	for vk, v := range e.versions {
		if rec, found, err := e.store.Get(vk.keyspace, []byte(vk.key)); err == nil && found && rec.Version == v {
			delete(e.versions, vk)
		}
	}
}
