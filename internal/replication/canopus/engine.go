// Package canopus is the engine of protocol canopus: one Canopus instance
// (internal/canopus, thesis chapter 4) per partition of a canopus keyspace that this node
// replicates. It turns client writes into requests of the node's proposals, applies every
// committed cycle to storage in the committed order (the same at every node), acknowledges
// the node's own writes once their cycle is applied, and serves reads from the local
// replica after the cycle that follows them commits (4.3).
package canopus

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	core "meridian/internal/canopus"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/raftlog"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// Limits of one instance.
const (
	// maxPendingWrites bounds the writes a node holds for its proposals or their cycles; more
	// are refused as overloaded.
	maxPendingWrites = 100_000
	// maxPendingReads bounds the reads waiting for their cycle.
	maxPendingReads = 100_000
	// maxBuffered bounds the proposal-requests held for states not computed yet.
	maxBuffered = 4096
	// digestsKept is how many committed cycles' digests an instance keeps for the simulator's
	// identical-log invariant.
	digestsKept = 1024
	// expiryInterval is how often pending requests are checked against their deadlines.
	expiryInterval = 20 * time.Millisecond
)

// Mutations are canopus's broken variants; the simulator must catch each.
var Mutations = map[string]string{
	core.MutationMergeOrder:          "odd-numbered nodes order a cycle's merged request sets the other way (a round merged in a different order at two nodes)",
	mutationReadEarly:                "reads are served from the local replica at once, without waiting for the next cycle to commit",
	core.MutationClosesFirst:         "every close is stored when applied and loaded before a restarted node replays its logs, so it ignores the proposals that preceded the close",
	core.MutationLeaseIgnoresPending: "a read served at once under the lease rule checks the key's lease in the next cycle only, not in every cycle in flight (a write lease that ignores a pending write)",
}

const mutationReadEarly = "read-before-cycle-commits"

type instKey struct {
	keyspace  string
	partition uint32
}

type instance struct {
	key    instKey
	node   *core.Node
	failed error
	writes map[uint64]engine.Request
	// reads wait by fence cycle; confirming those on the lease path (by request ID).
	reads      map[uint64][]engine.Request
	confirming map[uint64]engine.Request
	nReads     int
	// digests[c] is a digest of committed cycle c's sets (the identical-log invariant).
	digests map[uint64]uint64
	// checked is the last cycle the simulator's invariant compared.
	checked uint64
	// fatal is the error that stopped the instance (its node is gone).
	fatal error
}

// counters count what the engine did (engine.Counted; read from any goroutine). Messages
// and bytes are split by link class: inside the node's region (the super-leaf's broadcast)
// and between regions (proposal-requests and states), the classes of Canopus's cost model.
type counters struct {
	writes, readsCycle, readsLease, readsFenced, dropped, expired, cycles atomic.Int64
	msgsIntra, msgsInter, bytesIntra, bytesInter                          atomic.Int64
}

// counterNames are CounterSnapshot's keys.
var counterNames = []string{"writes", "reads_cycle", "reads_lease", "reads_fenced", "writes_dropped", "expired", "cycles",
	"peer_msgs_intra", "peer_msgs_inter", "peer_bytes_intra", "peer_bytes_inter"}

func (c *counters) byName() map[string]*atomic.Int64 {
	return map[string]*atomic.Int64{"writes": &c.writes, "reads_cycle": &c.readsCycle, "reads_lease": &c.readsLease,
		"reads_fenced": &c.readsFenced, "writes_dropped": &c.dropped, "expired": &c.expired, "cycles": &c.cycles,
		"peer_msgs_intra": &c.msgsIntra, "peer_msgs_inter": &c.msgsInter, "peer_bytes_intra": &c.bytesIntra, "peer_bytes_inter": &c.bytesInter}
}

// CounterSnapshot returns the counters (engine.Counted).
func (e *Engine) CounterSnapshot() map[string]int64 {
	out := map[string]int64{}
	for name, c := range e.stats.byName() {
		out[name] = c.Load()
	}
	return out
}

// Engine is one node's canopus engine.
type Engine struct {
	stats counters
	cfg   engine.Config
	store engine.Reader
	// incarnation tells this run's writes from those of earlier runs of the node in a
	// replayed cycle (request IDs start again after a restart).
	incarnation uint64
	pmap        *placement.Map
	insts       map[instKey]*instance
	order       []instKey
	out         engine.Ready
	now         time.Time
	lastExpiry  time.Time
	regions     map[uint32]string // node → region (regionOf)
}

// New returns the engine of node cfg.NodeID.
func New(cfg engine.Config, store engine.Reader) *Engine {
	rng := rand.New(rand.NewPCG(cfg.RandSeed, uint64(cfg.NodeID)))
	return &Engine{cfg: cfg, store: store, incarnation: rng.Uint64() | 1, insts: map[instKey]*instance{}}
}

func prefix(k instKey) []byte {
	b := append([]byte{'P'}, k.keyspace...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint32(b, k.partition)
}

func appliedKey(k instKey) []byte { return append(prefix(k), 'a') }

// SetPlacement creates an instance for every partition of a canopus keyspace this node
// replicates.
func (e *Engine) SetPlacement(m *placement.Map) {
	e.pmap = m
	local := engine.LocalPartitions(m, config.ProtocolCanopus, e.cfg.NodeID)
	e.order = engine.Reconcile(e.insts, local,
		func(lp engine.LocalPartition) instKey { return instKey{lp.Keyspace.Spec.Name, lp.Partition.ID} },
		func(k instKey, lp engine.LocalPartition) *instance {
			return e.newInstance(k, lp.Keyspace, lp.Partition)
		},
		func(k instKey, inst *instance) {
			e.failAll(inst, errs.New(errs.NotFound, "keyspace %q partition %d left this node's map", k.keyspace, k.partition))
		})
	// A region's exclusion (placement.Exclusion) reaches the instances already running.
	for _, lp := range local {
		ex := lp.Partition.Exclusion
		inst := e.insts[instKey{lp.Keyspace.Spec.Name, lp.Partition.ID}]
		if inst == nil || inst.node == nil {
			continue
		}
		cancelled := lp.Partition.ExclusionCancelled
		if ex == nil {
			inst.node.SetExclusion(e.now, "", 0, 0, cancelled) // none, or the attempt was cancelled
			continue
		}
		inst.node.SetExclusion(e.now, ex.Region, ex.Round, ex.From, cancelled)
		if inst.node.Excluded() {
			// A write waiting here may be in a cycle before the exclusion, which the other
			// regions commit: its outcome is unknown (Timeout), where a read's is not.
			err := excludedErr(inst.key, ex)
			e.failAllWrites(inst, errs.New(errs.Timeout, "%v; this write may have been ordered in a cycle before it (read it back from another region)", err), err)
		}
	}
}

// excludedErr is the answer of a node whose region was excluded from the partition.
func excludedErr(k instKey, ex *placement.Exclusion) error {
	return errs.New(errs.Unavailable, "keyspace %q partition %d: region %s was excluded from it from cycle %d (its super-leaf was lost and the others went on without it); "+
		"this node serves it no more: use a replica in another region", k.keyspace, k.partition, ex.Region, ex.From)
}

// Options returns the core options of a keyspace on topology regions: its options with the
// automatic ones derived from the largest round trip between its regions.
func Options(spec config.Keyspace, maxRTT time.Duration) (core.Options, error) {
	co, err := config.CanopusOptionsOf(spec.Options)
	if err != nil {
		return core.Options{}, err
	}
	o := core.Options{CycleInterval: co.CycleInterval, BatchMax: co.BatchMax, MaxInFlight: co.MaxInFlight,
		Representatives: co.Representatives, TreeHeight: co.TreeHeight, FetchTimeout: co.FetchTimeout,
		Tick: config.CanopusTick, HeartbeatTicks: int(co.HeartbeatInterval / config.CanopusTick),
		ElectionTicks: int(co.ElectionTimeout / config.CanopusTick), MaxBuffered: maxBuffered,
		WriteLeases: co.WriteLeases, LeaseCycles: co.LeaseCycles, ExcludeAfter: co.ExcludeAfter}
	if o.MaxInFlight == 0 {
		// A cycle takes about the largest round trip; one starts every cycle interval.
		o.MaxInFlight = min(int(math.Ceil(float64(maxRTT)/float64(co.CycleInterval)))+1, 64)
	}
	if o.LeaseCycles == 0 {
		o.LeaseCycles = 4 * (o.MaxInFlight + 1)
	}
	if o.FetchTimeout == 0 {
		o.FetchTimeout = 2*maxRTT + 20*time.Millisecond
	}
	return o, o.Validate()
}

func (e *Engine) newInstance(k instKey, ks *placement.Keyspace, p placement.Partition) *instance {
	inst := &instance{key: k, writes: map[uint64]engine.Request{}, reads: map[uint64][]engine.Request{},
		confirming: map[uint64]engine.Request{}, digests: map[uint64]uint64{}}
	var members []core.Member
	var regions []string
	for _, id := range p.Replicas {
		r := e.regionOf(id)
		members = append(members, core.Member{ID: id, Region: r})
		if !slices.Contains(regions, r) {
			regions = append(regions, r)
		}
	}
	var maxRTT time.Duration
	if t := e.cfg.Topology; t != nil {
		for _, a := range regions {
			for _, b := range regions {
				if t.HasRegion(a) && t.HasRegion(b) {
					maxRTT = max(maxRTT, t.RTT(a, b))
				}
			}
		}
	}
	opts, err := Options(ks.Spec, maxRTT)
	if err != nil {
		inst.failed = errs.New(errs.Internal, "keyspace %q: %v", k.keyspace, err)
		return inst
	}
	var applied *peerpb.CanopusApplied
	if b, ok, err := e.store.GetRaw(appliedKey(k)); err != nil {
		inst.failed = errs.New(errs.Internal, "keyspace %q partition %d: read applied state: %v", k.keyspace, k.partition, err)
		return inst
	} else if ok {
		applied = &peerpb.CanopusApplied{}
		if err := proto.Unmarshal(b, applied); err != nil {
			inst.failed = errs.New(errs.Internal, "keyspace %q partition %d: applied state: %v (%v)", k.keyspace, k.partition, err, storage.ErrCorrupt)
			return inst
		}
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", k.keyspace, k.partition)
	cc := core.Config{ID: e.cfg.NodeID, Members: members, Topology: e.cfg.Topology, Options: opts,
		Rand: rand.New(rand.NewPCG(e.cfg.RandSeed^uint64(e.cfg.NodeID), h.Sum64())), Store: e.store, Prefix: prefix(k),
		Applied: applied, Mutation: e.cfg.Mutation, Logger: raftlog.DiscardLogger{}}
	if ex := p.Exclusion; ex != nil {
		cc.ExcludedRegion, cc.ExcludedRound, cc.ExcludedFrom = ex.Region, ex.Round, ex.From
	}
	cc.ExclusionCancelled = p.ExclusionCancelled
	node, err := core.NewNode(cc)
	if err != nil {
		inst.failed = errs.New(errs.Internal, "keyspace %q partition %d: %v", k.keyspace, k.partition, err)
		return inst
	}
	inst.node = node
	return inst
}

// regionOf is a node's region (cached: every message sent asks it).
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
	e.now = now
	_, p, err := engine.RoutePartition(e.pmap, config.ProtocolCanopus, req)
	if err != nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: err})
		return
	}
	inst := e.insts[instKey{req.Keyspace, p.ID}]
	switch {
	case inst == nil:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable, "this node does not replicate keyspace %q partition %d; send the request to one of its replicas %v", req.Keyspace, p.ID, p.Replicas)})
		return
	case inst.failed != nil:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: inst.failed})
		return
	case inst.node.Excluded():
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: excludedErr(inst.key, p.Exclusion)})
		return
	case inst.node.Closed():
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable, "this node is out of its super-leaf's cycles (its group closed its epoch while it was unreachable) until it is readmitted; retry, or use another node of the region")})
		return
	}
	switch req.Op {
	case engine.OpPut, engine.OpDelete:
		if len(inst.writes) >= maxPendingWrites {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Overloaded, "keyspace %q partition %d: %d writes wait for their cycles; retry later", req.Keyspace, p.ID, len(inst.writes))})
			return
		}
		b, err := proto.Marshal(&peerpb.CanopusWrite{RequestId: req.ID, Key: req.Key, Value: req.Value, Tombstone: req.Op == engine.OpDelete, Incarnation: e.incarnation})
		if err != nil {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Internal, "encode write: %v", err)})
			return
		}
		inst.writes[req.ID] = req
		e.stats.writes.Add(1)
		inst.node.Write(now, req.Key, b)
	case engine.OpGet, engine.OpScan:
		if e.cfg.Mutation == mutationReadEarly {
			e.out.Reads = append(e.out.Reads, engine.LocalRead(req, "cycle"))
			return
		}
		if inst.nReads >= maxPendingReads {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Overloaded, "keyspace %q partition %d: %d reads wait for their cycles; retry later", req.Keyspace, p.ID, inst.nReads)})
			return
		}
		inst.nReads++
		if req.Op == engine.OpGet && inst.node.ReadNow(now, req.ID, req.Key) {
			inst.confirming[req.ID] = req // served at once, or fenced after all (Ready)
			return
		}
		f := inst.node.ReadFence(now)
		inst.reads[f] = append(inst.reads[f], req)
	default:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q (canopus) serves Get, Put, Delete and Scan, not %s", req.Keyspace, req.Op)})
	}
}

// Step delivers a peer message.
func (e *Engine) Step(now time.Time, env *peerpb.Envelope) {
	e.now = now
	c := env.GetCanopus()
	if c == nil {
		return
	}
	inst := e.insts[instKey{c.GetKeyspace(), c.GetPartition()}]
	if inst == nil || inst.node == nil {
		return
	}
	inst.node.Step(now, env.GetFrom(), c)
}

// Tick advances time.
func (e *Engine) Tick(now time.Time) {
	e.now = now
	for _, k := range e.order {
		if inst := e.insts[k]; inst.node != nil {
			inst.node.Tick(now)
		}
	}
	if now.Sub(e.lastExpiry) >= expiryInterval {
		e.lastExpiry = now
		e.expire(now)
	}
}

// expire fails requests past their deadline: a write's outcome is unknown (its cycle may still
// commit), a read simply was not served.
func (e *Engine) expire(now time.Time) {
	for _, k := range e.order {
		inst := e.insts[k]
		for _, id := range slices.Sorted(maps.Keys(inst.writes)) {
			req := inst.writes[id]
			if !req.Deadline.IsZero() && now.After(req.Deadline) {
				delete(inst.writes, id)
				e.stats.expired.Add(1)
				e.reply(engine.Result{ID: id, Op: req.Op, Err: errs.New(errs.Timeout, "the write's cycle had not committed by its deadline; it may still apply")})
			}
		}
		for _, f := range slices.Sorted(maps.Keys(inst.reads)) {
			reqs := inst.reads[f]
			kept := reqs[:0]
			for _, req := range reqs {
				if !req.Deadline.IsZero() && now.After(req.Deadline) {
					inst.nReads--
					e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Timeout, "cycle %d, which the read waits for, had not committed by its deadline", f)})
					continue
				}
				kept = append(kept, req)
			}
			if len(kept) == 0 {
				delete(inst.reads, f)
			} else {
				inst.reads[f] = kept
			}
		}
	}
}

// failAll fails every request an instance holds.
func (e *Engine) failAll(inst *instance, err error) { e.failAllWrites(inst, err, err) }

// failAllWrites fails the instance's pending writes with writeErr and its reads with err.
func (e *Engine) failAllWrites(inst *instance, writeErr, err error) {
	for _, id := range slices.Sorted(maps.Keys(inst.writes)) {
		e.reply(engine.Result{ID: id, Op: inst.writes[id].Op, Err: writeErr})
	}
	for _, f := range slices.Sorted(maps.Keys(inst.reads)) {
		reqs := inst.reads[f]
		for _, req := range reqs {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: err})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(inst.confirming)) {
		e.reply(engine.Result{ID: id, Op: inst.confirming[id].Op, Err: err})
	}
	inst.writes, inst.reads, inst.confirming, inst.nReads = map[uint64]engine.Request{}, map[uint64][]engine.Request{}, map[uint64]engine.Request{}, 0
}

// HasReady reports whether there is output.
func (e *Engine) HasReady() bool {
	if !e.out.Empty() {
		return true
	}
	for _, k := range e.order {
		if inst := e.insts[k]; inst.node != nil && inst.node.HasReady() {
			return true
		}
	}
	return false
}

// Ready returns the output: each instance's log writes, messages and committed cycles, the
// cycles applied to storage in the same batch.
func (e *Engine) Ready() engine.Ready {
	for _, k := range e.order {
		inst := e.insts[k]
		if inst.node == nil || !inst.node.HasReady() {
			continue
		}
		rd := inst.node.Ready()
		if err := inst.node.Err(); err != nil {
			inst.failed = errs.New(errs.Internal, "keyspace %q partition %d: %v", k.keyspace, k.partition, err)
			inst.fatal = err
			e.failAll(inst, inst.failed)
			inst.node = nil
			continue
		}
		e.out.Raw = append(e.out.Raw, rd.Raw...)
		self := e.regionOf(e.cfg.NodeID)
		for _, m := range rd.Messages {
			m.Body.Keyspace, m.Body.Partition = k.keyspace, k.partition
			env := &peerpb.Envelope{From: e.cfg.NodeID, To: m.To, Msg: &peerpb.Envelope_Canopus{Canopus: m.Body}}
			e.out.Messages = append(e.out.Messages, env)
			if e.regionOf(m.To) == self {
				e.stats.msgsIntra.Add(1)
				e.stats.bytesIntra.Add(int64(proto.Size(env)))
			} else {
				e.stats.msgsInter.Add(1)
				e.stats.bytesInter.Add(int64(proto.Size(env)))
			}
		}
		for _, c := range rd.Committed {
			e.apply(inst, c)
		}
		for _, x := range rd.Exclusions {
			r := engine.Report{Kind: engine.ReportExcludePosition, Keyspace: k.keyspace, Partition: k.partition, Region: x.Region, Round: x.Round,
				Reporter: x.Reporter, Position: x.Position}
			switch {
			case x.Start:
				r.Kind = engine.ReportExcludeStart
			case x.Cancel:
				r.Kind = engine.ReportExcludeCancel
			}
			e.out.Reports = append(e.out.Reports, r)
		}
		// After the cycles above: a read served now sees every committed cycle.
		for _, id := range rd.ReadsNow {
			if req, ok := inst.confirming[id]; ok {
				delete(inst.confirming, id)
				inst.nReads--
				e.stats.readsLease.Add(1)
				e.out.Reads = append(e.out.Reads, engine.LocalRead(req, "lease"))
			}
		}
		for _, fr := range rd.ReadsFenced {
			if req, ok := inst.confirming[fr.ID]; ok {
				e.stats.readsFenced.Add(1)
				delete(inst.confirming, fr.ID)
				inst.reads[fr.Fence] = append(inst.reads[fr.Fence], req)
			}
		}
	}
	rd := e.out
	e.out = engine.Ready{}
	return rd
}

// apply writes a committed cycle's requests in the committed order, each at the cycle's
// version time and its position in the cycle (versions follow the order at every node), and
// answers what waited for the cycle.
func (e *Engine) apply(inst *instance, c core.Committed) {
	k := inst.key
	h := fnv.New64a()
	pos := uint32(0)
	for _, set := range c.Sets {
		fmt.Fprintf(h, "|%d:", set.Node)
		for _, b := range set.Requests {
			h.Write(b)
			var w peerpb.CanopusWrite
			if err := proto.Unmarshal(b, &w); err != nil {
				// Every node skips the same undecodable request: the replicas stay equal.
				pos++
				continue
			}
			v := hlc.Version{WallNanos: c.TimeNanos, Logical: pos, NodeID: set.Node}
			pos++
			e.out.Writes = append(e.out.Writes, storage.Record{Keyspace: k.keyspace, Key: w.GetKey(), Value: w.GetValue(), Tombstone: w.GetTombstone(), Version: v})
			if set.Node == e.cfg.NodeID && w.GetIncarnation() == e.incarnation {
				if req, ok := inst.writes[w.GetRequestId()]; ok {
					delete(inst.writes, w.GetRequestId())
					e.reply(engine.Result{ID: req.ID, Op: req.Op, Version: v, Path: "cycle"})
				}
			}
		}
	}
	for _, b := range c.Dropped {
		var w peerpb.CanopusWrite
		if proto.Unmarshal(b, &w) != nil || w.GetIncarnation() != e.incarnation {
			continue
		}
		if req, ok := inst.writes[w.GetRequestId()]; ok {
			delete(inst.writes, w.GetRequestId())
			e.stats.dropped.Add(1)
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable, "the write was not ordered: this node's epoch was closed before its proposal of cycle %d committed (it will never apply); retry", c.Cycle)})
		}
	}
	ab, err := proto.Marshal(c.Applied)
	if err != nil {
		inst.failed = errs.New(errs.Internal, "encode applied state: %v", err)
		return
	}
	e.out.Raw = append(e.out.Raw, storage.RawOp{Key: appliedKey(k), Value: ab})
	inst.digests[c.Cycle] = h.Sum64()
	e.stats.cycles.Add(1)
	delete(inst.digests, c.Cycle-digestsKept)
	for _, f := range slices.Sorted(maps.Keys(inst.reads)) {
		reqs := inst.reads[f]
		if f > c.Cycle {
			continue
		}
		for _, req := range reqs {
			inst.nReads--
			if c.Own && f == c.Cycle {
				e.stats.readsCycle.Add(1)
				e.out.Reads = append(e.out.Reads, engine.LocalRead(req, "cycle"))
				continue
			}
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable, "this node's epoch was closed before cycle %d, which the read waited for: it cannot tell the read is linearizable; retry", c.Cycle)})
		}
		delete(inst.reads, f)
	}
}

// DebugState is every instance's state, one line each (the simulator's final trace).
func (e *Engine) DebugState() string {
	var b strings.Builder
	for _, k := range e.order {
		inst := e.insts[k]
		switch {
		case inst.node != nil:
			fmt.Fprintf(&b, "%s/%d: %s\n", k.keyspace, k.partition, inst.node.Describe())
		case inst.failed != nil:
			fmt.Fprintf(&b, "%s/%d: failed: %v\n", k.keyspace, k.partition, inst.failed)
		}
	}
	return b.String()
}
