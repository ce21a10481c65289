// Package catenae runs Catenae (internal/catenae: the protocol's sans-IO replica, liu-thesis
// 1.4, 1.5, 3.1.3, 3.1.4) on Meridian's runtimes as the engine of catenae keyspaces: one
// catenae.Replica per keyspace on its replica node of each region (the keyspace's one
// partition has one replica per region: each is that region's data center), fed with the
// node's clock (Tick), the other regions' epoch messages (Step) and the transactions of the
// Txn API (Propose), its Ready made durable incrementally in the node's storage (disk.go).
//
// A keyspace starts after a handshake (start.go): every replica proposes, durably, the epoch
// after which it may start, and all start after the largest proposal, so they agree on the
// first epoch without a clock or the metadata having to. A node without a replica forwards
// its clients' requests to the nearest one (forward.go). docs/catenae.md ("On the node
// runtime") describes the mapping of the Txn API.
package catenae

import (
	"slices"
	"sync/atomic"
	"time"

	core "meridian/internal/catenae"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/wire/peerpb"
)

// Engine is the catenae engine of one node.
type Engine struct {
	cfg   engine.Config
	store engine.Reader
	pmap  *placement.Map
	lim   core.WireLimits
	// keyspaces are the catenae keyspaces of the map, by name; names in sorted order (a
	// deterministic iteration).
	keyspaces map[string]*keyspace
	names     []string
	out       engine.Ready
	now       time.Time
	nextID    uint64
	// sent are requests this node forwarded to a replica, by request ID; origins the
	// requests other nodes forwarded here, by the ID they run under.
	sent          map[uint64]*sentForward
	origins       map[uint64]forwardOrigin
	forwardsTaken engine.Forwards
	// lastExpiry is when pending requests were last checked against their deadlines.
	lastExpiry time.Time
	stats      counters
}

// counters count what the engine did (engine.Counted; read from any goroutine). The epoch
// messages' and the replicas' are summed over the keyspaces at each Ready.
type counters struct {
	commits, aborts, fastCommits, reads, forwarded, expired, refused atomic.Int64
	epochMessages, epochBytes, rollbacks, repairs                    atomic.Int64
}

// counterNames are CounterSnapshot's keys.
var counterNames = []string{"commits", "aborts", "fast_commits", "reads", "forwarded", "expired", "refused", "epoch_messages", "epoch_bytes", "rollbacks", "repairs"}

func (c *counters) byName() map[string]*atomic.Int64 {
	return map[string]*atomic.Int64{"commits": &c.commits, "aborts": &c.aborts, "fast_commits": &c.fastCommits, "reads": &c.reads,
		"forwarded": &c.forwarded, "expired": &c.expired, "refused": &c.refused, "epoch_messages": &c.epochMessages,
		"epoch_bytes": &c.epochBytes, "rollbacks": &c.rollbacks, "repairs": &c.repairs}
}

// keyspace is one catenae keyspace on this node.
type keyspace struct {
	name string
	// replicasVersion is the keyspace's placement.Keyspace.ReplicasVersion (its state on
	// disk belongs to it: a keyspace dropped and created again starts afresh).
	replicasVersion uint64
	dcs             []uint32
	replica         bool // this node is one of dcs
	opts            core.Options
	copts           config.CatenaeOptions

	// Start handshake (start.go).
	loaded    bool
	proposal  uint64
	start     uint64
	proposals map[uint32]uint64
	helloAt   time.Time

	rep    *core.Replica // nil until started
	meta   core.Meta
	forgot uint64
	// failed: its durable state could not be read; it refuses every request.
	failed error
	// pending are the commits submitted here, by transaction.
	pending map[core.TxnID]*pendingCommit
}

type pendingCommit struct {
	id       uint64
	deadline time.Time
}

// New returns a node's catenae engine.
func New(cfg engine.Config, store engine.Reader) *Engine {
	maxOps := max(cfg.Limits.MaxTxnKeys, 64)
	lim := core.DefaultWireLimits
	lim.MaxOps = maxOps
	if cfg.Limits.MaxKeyBytes > 0 {
		lim.MaxKeyBytes = cfg.Limits.MaxKeyBytes
	}
	if cfg.Limits.MaxValueBytes > 0 {
		lim.MaxValueBytes = cfg.Limits.MaxValueBytes
	}
	return &Engine{cfg: cfg, store: store, lim: lim, keyspaces: map[string]*keyspace{}, sent: map[uint64]*sentForward{},
		origins: map[uint64]forwardOrigin{}}
}

// CounterSnapshot implements engine.Counted.
func (e *Engine) CounterSnapshot() map[string]int64 {
	out := map[string]int64{}
	for name, c := range e.stats.byName() {
		out[name] = c.Load()
	}
	return out
}

// sumReplicaStats refreshes the counters the replicas keep.
func (e *Engine) sumReplicaStats() {
	var msgs, bytes, rollbacks, repairs int64
	for _, name := range e.names {
		if k := e.keyspaces[name]; k.rep != nil {
			st := k.rep.Stats()
			msgs, bytes, rollbacks, repairs = msgs+st.MessagesSent, bytes+st.BytesSent, rollbacks+int64(st.Rollbacks), repairs+int64(st.Repairs)
		}
	}
	e.stats.epochMessages.Store(msgs)
	e.stats.epochBytes.Store(bytes)
	e.stats.rollbacks.Store(rollbacks)
	e.stats.repairs.Store(repairs)
}

// SetPlacement installs a map: keyspaces of protocol catenae appear (their state is loaded
// at the next step, which has the time) and disappear (their state on disk is deleted).
func (e *Engine) SetPlacement(m *placement.Map) {
	e.pmap = m
	seen := map[string]bool{}
	for name, ks := range m.Keyspaces {
		if ks.Spec.Protocol != config.ProtocolCatenae || len(ks.Partitions) != 1 {
			continue
		}
		seen[name] = true
		k := e.keyspaces[name]
		if k != nil && (k.replicasVersion == ks.ReplicasVersion || k.replicasVersion == 0) {
			k.replicasVersion = ks.ReplicasVersion
			continue
		}
		if k != nil {
			e.drop(k) // dropped and created again under the same name
		}
		copts, err := config.CatenaeOptionsOf(ks.Spec.Options)
		k = &keyspace{name: name, replicasVersion: ks.ReplicasVersion, dcs: slices.Sorted(slices.Values(ks.Partitions[0].Replicas)),
			copts: copts, proposals: map[uint32]uint64{}, pending: map[core.TxnID]*pendingCommit{}}
		k.replica = slices.Contains(k.dcs, e.cfg.NodeID)
		if err != nil {
			k.failed = errs.New(errs.Internal, "keyspace %q: options: %v", name, err)
		}
		k.opts = core.Options{EpochLength: copts.EpochLength, Redundancy: copts.Redundancy, RequestAfter: copts.RequestAfter,
			MaxOps: e.lim.MaxOps, MaxOpen: copts.MaxOpen, Mutation: e.cfg.Mutation}
		if copts.EpochLength > 0 {
			k.opts.RetainEpochs = uint64(max(copts.ReadRetain/copts.EpochLength, 1))
		}
		e.keyspaces[name] = k
	}
	for name, k := range e.keyspaces {
		if !seen[name] {
			e.drop(k)
		}
	}
	e.names = slices.Sorted(func(yield func(string) bool) {
		for n := range e.keyspaces {
			if !yield(n) {
				return
			}
		}
	})
}

// drop forgets a keyspace that left the map: its clients' requests fail, and its state on
// disk goes (the runtime deletes its records).
func (e *Engine) drop(k *keyspace) {
	for _, p := range k.pending {
		e.reply(engine.Result{ID: p.id, Op: engine.OpTxnCommit, Err: errs.New(errs.NotFound, "keyspace %q was dropped; the transaction's outcome is unknown", k.name)})
	}
	if k.replica {
		e.out.Raw = append(e.out.Raw, dropState(k.name))
	}
	delete(e.keyspaces, k.name)
}

// Propose starts a client request.
func (e *Engine) Propose(now time.Time, req engine.Request) {
	e.now = now
	k := e.keyspaces[req.Keyspace]
	if k == nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.NotFound, "keyspace %q is not a catenae keyspace of this node's map", req.Keyspace)})
		return
	}
	if !k.replica {
		e.forward(k, req)
		return
	}
	e.serve(now, k, req)
}

// serve runs a request on this node's replica of k.
func (e *Engine) serve(now time.Time, k *keyspace, req engine.Request) {
	if err := e.ready(now, k); err != nil {
		e.stats.refused.Add(1)
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: err})
		return
	}
	switch req.Op {
	case engine.OpGet:
		e.read(k, req, k.rep.ValidatedEpoch())
	case engine.OpTxnRead:
		at := k.rep.ValidatedEpoch()
		if req.Txn != nil {
			for _, s := range req.Txn.Snapshots {
				if s.Partition == 0 {
					at = s.Counter
				}
			}
		}
		e.read(k, req, at)
	case engine.OpTxnCommit:
		e.commit(now, k, req)
	default:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q (catenae) serves Get, TxnRead and TxnCommit, not %s", k.name, req.Op)})
	}
}

// ready loads, or starts, k's replica; an error says why it cannot serve.
func (e *Engine) ready(now time.Time, k *keyspace) error {
	e.ensure(now, k)
	switch {
	case k.failed != nil:
		return k.failed
	case k.rep == nil:
		var missing []uint32
		for _, dc := range k.dcs {
			if _, ok := k.proposals[dc]; !ok {
				missing = append(missing, dc)
			}
		}
		return errs.New(errs.Unavailable, "keyspace %q is starting: its replicas agree on the first epoch, and nodes %v have not answered yet; retry", k.name, missing)
	}
	return nil
}

// read answers a Get or a TxnRead at epoch at: the state after every transaction of the epochs
// up to it (validated: every region holds the same), with the key's version for TxnCommit.
func (e *Engine) read(k *keyspace, req engine.Request, at uint64) {
	e.stats.reads.Add(1)
	if at > k.rep.ValidatedEpoch() {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable,
			"keyspace %q: the transaction reads at epoch %d, which this replica has not validated yet (it has %d); retry", k.name, at, k.rep.ValidatedEpoch())})
		return
	}
	vals, err := k.rep.ReadAt([]string{string(req.Key)}, at)
	if err != nil {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Conflict, "keyspace %q: %v; start the transaction again", k.name, err)})
		return
	}
	v := vals[0]
	res := engine.Result{ID: req.ID, Op: req.Op, Found: v.Found, Value: v.Value, Path: "validated"}
	if v.Found {
		res.Version.WallNanos = int64(v.Version)
	}
	if req.Op == engine.OpTxnRead {
		snap := engine.TxnSnapshot{Partition: 0, Counter: at}
		res.Txn = &engine.TxnResult{Version: v.Version, Snapshot: snap}
		if req.Txn != nil && req.Txn.ReadOnly && len(req.Txn.Snapshots) == 0 {
			res.Txn.Vector = []engine.TxnSnapshot{snap}
		}
	}
	e.reply(res)
}

// commit submits a transaction: an OpExpect of each key read at the version it read (the
// transaction commits only if no transaction ordered between its read and its place in the
// chain wrote one of them: optimistic validation inside the deterministic order), then its
// writes (docs/catenae.md, "On the node runtime").
func (e *Engine) commit(now time.Time, k *keyspace, req engine.Request) {
	t := req.Txn
	var p core.Proc
	for i, key := range t.Reads {
		p.Ops = append(p.Ops, core.Op{Kind: core.OpExpect, Key: string(key), Version: t.ReadVersions[i]})
	}
	for _, w := range t.Writes {
		if w.Delete {
			p.Ops = append(p.Ops, core.Op{Kind: core.OpDelete, Key: string(w.Key)})
		} else {
			p.Ops = append(p.Ops, core.Op{Kind: core.OpWrite, Key: string(w.Key), Value: w.Value})
		}
	}
	id, err := k.rep.Submit(now, p)
	if err != nil {
		e.stats.refused.Add(1)
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Overloaded, "keyspace %q: %v", k.name, err)})
		return
	}
	k.pending[id] = &pendingCommit{id: req.ID, deadline: req.Deadline}
}

// Step takes a peer message.
func (e *Engine) Step(now time.Time, env *peerpb.Envelope) {
	e.now = now
	switch m := env.GetMsg().(type) {
	case *peerpb.Envelope_Catenae:
		c := m.Catenae
		k := e.keyspaces[c.GetKeyspace()]
		if k == nil || !k.replica {
			return
		}
		e.ensure(now, k)
		switch b := c.GetBody().(type) {
		case *peerpb.CatenaeEnvelope_Hello:
			e.stepHello(k, env.GetFrom(), b.Hello)
		case *peerpb.CatenaeEnvelope_Message:
			if k.rep == nil {
				// Not started here yet: a peer that has started needs this node's
				// proposal (the epochs it sends now are asked for again once started).
				if _, ok := k.proposals[env.GetFrom()]; !ok && k.proposal != 0 {
					e.sendHello(k, env.GetFrom())
				}
				return
			}
			msg, err := core.DecodeMessage(b.Message, e.lim)
			if err != nil || msg.To != e.cfg.NodeID || (msg.Epoch != nil && msg.Epoch.From != env.GetFrom()) || (msg.Req != nil && msg.Req.From != env.GetFrom()) {
				return // malformed or misaddressed: dropped, as a lost message
			}
			k.rep.Step(now, msg)
		}
	case *peerpb.Envelope_CatenaeForward:
		e.stepForward(now, env.GetFrom(), m.CatenaeForward)
	case *peerpb.Envelope_CatenaeForwardReply:
		e.stepForwardReply(m.CatenaeForwardReply)
	}
}

// Tick advances time: each replica's epochs, the start handshakes, deadlines.
func (e *Engine) Tick(now time.Time) {
	e.now = now
	for _, name := range e.names {
		k := e.keyspaces[name]
		if !k.replica {
			continue
		}
		e.ensure(now, k)
		if k.rep != nil {
			k.rep.Tick(now)
		} else {
			e.helloAgain(now, k)
		}
	}
	if now.Sub(e.lastExpiry) >= expiryInterval {
		e.lastExpiry = now
		e.expire(now)
	}
}

// expiryInterval is how often pending requests are checked against their deadlines.
const expiryInterval = 20 * time.Millisecond

// expire fails the requests whose deadline passed: their outcome is unknown (a commit may
// still take effect).
func (e *Engine) expire(now time.Time) {
	for _, name := range e.names {
		k := e.keyspaces[name]
		for tid, p := range k.pending {
			if !p.deadline.IsZero() && now.After(p.deadline) {
				delete(k.pending, tid)
				e.stats.expired.Add(1)
				e.reply(engine.Result{ID: p.id, Op: engine.OpTxnCommit, Err: errs.New(errs.Timeout,
					"transaction %s in keyspace %q: no outcome before the deadline; it may still commit", tid, k.name)})
			}
		}
	}
	for id, s := range e.sent {
		if !s.deadline.IsZero() && now.After(s.deadline.Add(forwardGrace)) {
			delete(e.sent, id)
			e.stats.expired.Add(1)
			e.reply(engine.Result{ID: id, Op: s.op, Err: errs.New(errs.Timeout,
				"keyspace %q: node %d, to which the request was forwarded, did not answer before the deadline; a commit may still take effect", s.keyspace, s.to)})
		}
	}
}

// HasReady reports whether there is output.
func (e *Engine) HasReady() bool {
	if !e.out.Empty() {
		return true
	}
	for _, name := range e.names {
		if k := e.keyspaces[name]; k.rep != nil && k.rep.HasReady() {
			return true
		}
	}
	return false
}

// Ready returns the output: each replica's Ready turned into storage writes (durable before
// its messages leave: the runtime's contract is the replica's), messages and replies.
func (e *Engine) Ready() engine.Ready {
	for _, name := range e.names {
		k := e.keyspaces[name]
		if k.rep == nil || !k.rep.HasReady() {
			continue
		}
		rd := k.rep.Ready()
		if err := e.persist(k, rd.Durable); err != nil {
			// An input that cannot be encoded is a bug; nothing of this Ready may leave.
			k.failed = errs.New(errs.Internal, "keyspace %q: %v", k.name, err)
			k.rep = nil
			continue
		}
		for _, m := range rd.Messages {
			b, err := core.EncodeMessage(m)
			if err != nil {
				continue
			}
			e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: m.To,
				Msg: &peerpb.Envelope_Catenae{Catenae: &peerpb.CatenaeEnvelope{Keyspace: k.name, Body: &peerpb.CatenaeEnvelope_Message{Message: b}}}})
		}
		for _, o := range rd.Outcomes {
			e.outcome(k, o)
		}
	}
	e.sumReplicaStats()
	rd := e.out
	e.out = engine.Ready{}
	return rd
}

// outcome answers the client waiting for a transaction submitted here.
func (e *Engine) outcome(k *keyspace, o core.Outcome) {
	p := k.pending[o.Txn]
	if p == nil {
		return // its client gave up (deadline), or it was submitted before a restart
	}
	delete(k.pending, o.Txn)
	res := &engine.TxnResult{Committed: o.Committed, Reason: o.Reason, ID: k.name + "/" + o.Txn.String()}
	if o.Committed {
		e.stats.commits.Add(1)
		res.Version = o.Seq
		if o.Fast {
			e.stats.fastCommits.Add(1)
		}
	} else {
		e.stats.aborts.Add(1)
		res.Key = []byte(o.Result.Key)
	}
	e.reply(engine.Result{ID: p.id, Op: engine.OpTxnCommit, Txn: res})
}

// reply releases a result: to this node's client, or, for a request another node forwarded,
// as a message to it.
func (e *Engine) reply(res engine.Result) {
	if o, ok := e.origins[res.ID]; ok {
		delete(e.origins, res.ID)
		// A message like the others: it leaves once this Ready's writes are durable.
		e.out.Messages = append(e.out.Messages, forwardReply(e.cfg.NodeID, o, res))
		return
	}
	e.out.Replies = append(e.out.Replies, res)
}
