package raft

import (
	"bytes"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Read paths of raft reads.
const (
	PathLease     = "lease"      // linearizable: the leader served it under its lease, no round trip
	PathReadIndex = "read-index" // linearizable: served once applied up to the leader's commit index
	PathStale     = "stale"      // the replica's applied state, no round trip
)

type pendingReq struct {
	req   engine.Request
	group *group
	// data is a write's encoded command, proposed again when the group's leader changes
	// (a leader that steps down or hands over drops the proposals it had not appended; the
	// copies are deduplicated at apply).
	data []byte
	// heldSince is when a request that found no leader was held (zero: proposed).
	heldSince time.Time
	// proposed: a proposal of this write has left this node (or the write was forwarded), so
	// it may commit even if this node never learns of it; failing it is then ambiguous
	// (errs.Timeout), never a definite failure (the simulator found a write failed as
	// Unavailable when its node left the group, though its proposal committed: seed 165
	// with moves).
	proposed bool
	// forwardedTo is the node a request was forwarded to (0: served here).
	forwardedTo uint32
	// moveTo is the region an OpMoveMaster waits for the leader to reach.
	moveTo string
	// rangeWait: the request waits, on no group, for its key's group here to finish a merge
	// (the group is frozen), for up to holdFor; reroutes counts the times a split or merge
	// sent it to another group (repartition.go).
	rangeWait bool
	holdFor   time.Duration
	reroutes  int
}

// forwardOrigin is where a forwarded request came from.
type forwardOrigin struct {
	node uint32
	id   uint64 // the origin's request ID
	op   engine.Op
}

// Propose starts a client request on a keyspace of this engine's protocol.
func (e *Engine) Propose(now time.Time, req engine.Request) {
	e.observe(now)
	ks, ok := e.pmap.Keyspace(req.Keyspace)
	if !ok || ks.Spec.Protocol != e.protocol {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.NotFound, "unknown keyspace %q", req.Keyspace)})
		return
	}
	if n := len(e.pending) + len(e.scans) + len(e.txnWaits); n >= maxPending {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Overloaded, "node %d has %d raft requests in flight (limit %d)", e.cfg.NodeID, n, maxPending)})
		return
	}
	if req.MinVersion.WallNanos > 0 {
		e.clock.Observe(now, req.MinVersion)
	}
	if req.Op == engine.OpTxnRead {
		if err := e.readOnlySnapshots(ks, &req); err != nil {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: err})
			return
		}
	}
	e.dispatch(now, req, 0)
}

// dispatch runs req on the group of this node whose range holds its key — the range the
// group's log made, which a split or merge in the placement changes only when its entry
// applies (repartition.go) — holds it while that group is frozen (a merge is under way), or
// forwards it to a replica of the key's partition. reroutes counts the groups it was sent
// to before.
func (e *Engine) dispatch(now time.Time, req engine.Request, reroutes int) {
	ks, ok := e.pmap.Keyspace(req.Keyspace)
	if !ok || ks.Spec.Protocol != e.protocol {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.NotFound, "unknown keyspace %q", req.Keyspace)})
		return
	}
	if req.Op == engine.OpScan {
		e.startScan(now, ks, req)
		return
	}
	if req.Op == engine.OpTxnCommit {
		e.submitTxn(now, ks, req)
		return
	}
	p := ks.Lookup(req.Key)
	g := e.groupFor(req.Keyspace, req.Key)
	switch {
	case g != nil && g.servable():
		e.proposeAt(now, g, req)
		if pr := e.pending[req.ID]; pr != nil {
			pr.reroutes = reroutes
		}
	case g != nil && g.serving() && g.frozenAt != 0:
		e.holdForRange(now, req, reroutes, g.opts.ElectionTimeout)
	case req.ID&forwardedBit != 0:
		// Run here for another node, which forwarded it: hops are not chained.
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable,
			"node %s, to which the request was forwarded, no longer serves key %q of keyspace %q (its partition split or merged); retry", e.nodeName(e.cfg.NodeID), req.Key, req.Keyspace)})
	default:
		if why, ok := e.broken[groupKey{req.Keyspace, p.ID}]; ok && g == nil {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Internal, "keyspace %q partition %d: this node's Raft group is out of service: %s", req.Keyspace, p.ID, why)})
			return
		}
		// No replica here, or one that is still being caught up: a replica that has the
		// data serves it.
		e.forward(now, p, req)
	}
}

// serving reports whether the group can serve requests here: it has a configuration (an
// empty replica waiting for its first snapshot has none) and its node is a member.
func (g *group) serving() bool {
	return len(g.conf.GetVoters()) > 0 && g.inPlacement && g.receiving == nil
}

// proposeAt runs req on the local replica of g.
func (e *Engine) proposeAt(now time.Time, g *group, req engine.Request) {
	e.touch(g)
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
			e.stats.read(path)
			e.out.Reads = append(e.out.Reads, e.readAt(g, req, path, e.staleness(now, g), time.Time{}))
			return
		}
		if e.leaseRead(now, g, req) {
			return
		}
		if e.holdWithoutLeader(now, g, req, nil) {
			return
		}
		e.track(req, &pendingReq{req: req, group: g})
		g.rn.ReadIndex(e.readCtx(req.ID))
	case engine.OpPut, engine.OpDelete, engine.OpCommand:
		cmd := &peerpb.RaftCommand{Origin: e.cfg.NodeID, RequestId: req.ID}
		if err := g.sm.Prepare(req, cmd); err != nil {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: err})
			return
		}
		cmd.Version = wire.VersionToPB(e.clock.Now(now))
		data, err := proto.Marshal(cmd)
		if err != nil {
			e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Internal, "encode raft command: %v", err)})
			return
		}
		if e.holdWithoutLeader(now, g, req, data) {
			return
		}
		pr := &pendingReq{req: req, group: g, data: data}
		if err := g.rn.Propose(data); err != nil {
			// Dropped by a leader handing over (or over its uncommitted-log bound): held
			// like a request without a leader, proposed again at the next leader change.
			pr.heldSince = now
		} else {
			pr.proposed = true
		}
		e.track(req, pr)
	case engine.OpMoveMaster:
		e.moveLeader(now, g, req)
	case engine.OpTxnRead:
		e.txnReadAt(now, g, req)
	default:
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q uses protocol %s, which has no %s operation", req.Keyspace, e.protocol, req.Op)})
	}
}

// ambiguous reports whether failing p now leaves its outcome unknown: a write of which a
// proposal (or forward) has left this node.
func (p *pendingReq) ambiguous() bool {
	return p.req.Op.IsWrite() && (p.proposed || p.forwardedTo != 0)
}

// track remembers a pending request.
func (e *Engine) track(req engine.Request, pr *pendingReq) {
	e.pending[req.ID] = pr
	if pr.group != nil {
		pr.group.pendingCount++
	}
	e.markDirtyIf(pr.group)
}

func (e *Engine) markDirtyIf(g *group) {
	if g != nil {
		e.markDirty(g)
	}
}

// untrack forgets a pending request and returns it.
func (e *Engine) untrack(id uint64) (*pendingReq, bool) {
	pr, ok := e.pending[id]
	if !ok {
		return nil, false
	}
	delete(e.pending, id)
	if pr.group != nil {
		pr.group.pendingCount--
	}
	if pr.rangeWait {
		e.rangeWaits--
	}
	return pr, true
}

// holdWithoutLeader holds a request while its group knows no leader (an election or a
// handover in progress) until one is elected (retryPending), for up to two election
// timeouts (expire).
func (e *Engine) holdWithoutLeader(now time.Time, g *group, req engine.Request, data []byte) bool {
	if g.rn.BasicStatus().Lead != etcdraft.None {
		return false
	}
	e.track(req, &pendingReq{req: req, group: g, data: data, heldSince: now})
	return true
}

// moveLeader transfers the leadership of the key's group to a voter in req.Region and
// answers once the group's leader is there.
func (e *Engine) moveLeader(now time.Time, g *group, req engine.Request) {
	var target uint64
	for _, r := range g.desc.Replicas {
		if e.regionOf(r) == req.Region && slices.Contains(g.conf.GetVoters(), uint64(r)) {
			target = uint64(r)
			break
		}
	}
	if target == 0 {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Invalid, "keyspace %q partition %d has no voter in region %q (voters: nodes %v)", req.Keyspace, g.key.partition, req.Region, g.conf.GetVoters())})
		return
	}
	e.track(req, &pendingReq{req: req, group: g, moveTo: req.Region})
	if lead := g.rn.BasicStatus().Lead; lead == target {
		e.finishMoves(g)
		return
	}
	// TransferLeader on a follower is forwarded to its leader by etcd raft.
	g.rn.TransferLeader(target)
	e.stats.LeaderTransfers.Add(1)
}

// finishMoves answers the OpMoveMaster requests whose region now holds g's leadership.
func (e *Engine) finishMoves(g *group) {
	region := e.regionOf(uint32(g.lead))
	for _, id := range e.pendingIDs(g) {
		pr := e.pending[id]
		if pr.moveTo == "" || pr.moveTo != region {
			continue
		}
		e.untrack(id)
		e.reply(engine.Result{ID: id, Op: pr.req.Op, Master: e.nodeName(uint32(g.lead)), MasterRegion: region})
	}
}

func (e *Engine) nodeName(id uint32) string {
	for _, n := range e.cfg.Nodes {
		if n.ID == id {
			return n.Name
		}
	}
	return ""
}

// pendingIDs returns the IDs of g's pending requests, sorted (deterministic order).
func (e *Engine) pendingIDs(g *group) []uint64 {
	var ids []uint64
	for id, p := range e.pending {
		if p.group == g {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// readAt is a read of key from the replica's storage, run once the Ready that carries it (and
// every earlier one) is in storage, and no later than validUntil when that is set (a lease
// read). A forwarded read's result goes back to the node that forwarded it.
func (e *Engine) readAt(g *group, req engine.Request, path string, staleness time.Duration, validUntil time.Time) engine.Read {
	k := g.key
	fwd := e.forwards[req.ID]
	return engine.Read{ID: req.ID, Op: req.Op, ValidUntil: validUntil, Wrap: e.wrapForward(fwd), Run: func(store engine.Reader) engine.Result {
		rec, found, err := store.Get(k.keyspace, req.Key)
		res := engine.Result{ID: req.ID, Op: req.Op, Path: path, Staleness: staleness}
		engine.GetLive(rec, found, err, &res)
		return res
	}}
}

// wrapForward turns a read's result into the reply to the node that forwarded it (nil: the
// read is a client's).
func (e *Engine) wrapForward(fwd *forwardOrigin) func(engine.Result) engine.Result {
	if fwd == nil {
		return nil
	}
	self := e.cfg.NodeID
	return func(r engine.Result) engine.Result {
		return engine.Result{ID: r.ID, Op: r.Op, Forward: forwardReply(self, fwd, r)}
	}
}

// reply answers a request: a client's, or a forwarded one's origin.
func (e *Engine) reply(r engine.Result) {
	if r.ID&forwardedBit != 0 {
		if s := e.scans[r.ID]; s != nil && r.Err != nil {
			e.failScan(s, r.Err)
			return
		}
		if fwd, ok := e.forwards[r.ID]; ok {
			delete(e.forwards, r.ID)
			e.out.Messages = append(e.out.Messages, forwardReply(e.cfg.NodeID, fwd, r))
		}
		return
	}
	e.out.Replies = append(e.out.Replies, r)
}

// expire fails the requests whose deadline has passed, and the held ones (no leader) held
// for two election timeouts. Checked once per Raft tick: a request may outlive its deadline
// by up to one tick.
func (e *Engine) expire(now time.Time) {
	var expired []uint64
	for id, p := range e.pending {
		if (!p.req.Deadline.IsZero() && now.After(p.req.Deadline)) ||
			(!p.heldSince.IsZero() && p.group != nil && now.Sub(p.heldSince) > 2*p.group.opts.ElectionTimeout) ||
			(p.rangeWait && now.Sub(p.heldSince) > p.holdFor) {
			expired = append(expired, id)
		}
	}
	slices.Sort(expired)
	for _, id := range expired {
		p, _ := e.untrack(id)
		if p.rangeWait {
			e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(errs.Unavailable,
				"keyspace %q: key %q is being merged into another partition here for %v (not applied); retry", p.req.Keyspace, p.req.Key, now.Sub(p.heldSince).Round(time.Millisecond))})
			continue
		}
		if p.group != nil && !p.heldSince.IsZero() {
			kind, after := errs.Unavailable, "retry, or read at STALE"
			if p.ambiguous() {
				kind, after = errs.Timeout, "the write was proposed before and may still apply"
			}
			e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(kind,
				"keyspace %q partition %d has had no Raft leader for %v (no majority reachable?); %s",
				p.group.key.keyspace, p.group.key.partition, now.Sub(p.heldSince).Round(time.Millisecond), after)})
			continue
		}
		var what string
		switch {
		case p.forwardedTo != 0:
			what = "node " + e.nodeName(p.forwardedTo) + ", to which the request was forwarded (it may still apply)"
		case p.moveTo != "":
			what = "the leader to move to region " + p.moveTo
		case p.req.Op == engine.OpGet:
			what = "the read index"
		case p.req.Op == engine.OpTxnRead:
			what = "this replica to reach the transaction's snapshot"
		default:
			what = "the write to commit (it may still apply)"
		}
		part := uint32(0)
		var lead uint64
		if p.group != nil {
			part, lead = p.group.key.partition, p.group.rn.BasicStatus().Lead
		}
		e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(errs.Timeout,
			"keyspace %q partition %d: deadline passed waiting for %s (leader: node %d)", p.req.Keyspace, part, what, lead)})
	}
	e.expireScans(now)
}

// retryPending proposes g's pending writes and read indexes again after a leader change, in
// request order.
func (e *Engine) retryPending(g *group) {
	if g.removed {
		return
	}
	for _, id := range e.pendingIDs(g) {
		p := e.pending[id]
		if p.moveTo != "" {
			continue
		}
		if !p.proposed && !e.stillServes(g, p.req) {
			e.reroute(id) // its key left the group's range meanwhile (repartition.go)
			continue
		}
		p.heldSince = time.Time{}
		if p.data != nil {
			if g.rn.Propose(p.data) == nil { // dropped again: the next leader change retries it
				p.proposed = true
			}
		} else if p.req.Op == engine.OpGet {
			g.rn.ReadIndex(e.readCtx(id))
		}
	}
	e.markDirty(g)
}

// failGroup fails every request pending on g with why. With internal, the group is also
// marked broken (an internal error took it out of service) so later requests get the same.
func (e *Engine) failGroup(g *group, why string, internal bool) {
	kind := errs.Unavailable
	if internal {
		kind = errs.Internal
		e.broken[g.key] = why
	}
	for _, id := range e.pendingIDs(g) {
		p, _ := e.untrack(id)
		if p.ambiguous() {
			e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(errs.Timeout, "keyspace %q partition %d: Raft group out of service here (%s); the write was proposed and may still apply", g.key.keyspace, g.key.partition, why)})
			continue
		}
		e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(kind, "keyspace %q partition %d: Raft group out of service here: %s", g.key.keyspace, g.key.partition, why)})
	}
	for _, w := range g.waiting {
		if p, ok := e.untrack(w.id); ok {
			e.reply(engine.Result{ID: w.id, Op: p.req.Op, Err: errs.New(kind, "keyspace %q partition %d: Raft group out of service here: %s", g.key.keyspace, g.key.partition, why)})
		}
	}
	g.waiting = nil
}

// fail takes g out of service after an internal error: its requests fail with the reason,
// and so do later ones (broken).
func (e *Engine) fail(g *group, err error) {
	e.failGroup(g, err.Error(), true)
	e.unlink(g)
}

// --- scans ---

// scanOp is a scan across the partitions of a range, read one part after another (each
// part linearizable, or stale at STALE; no snapshot across parts), up to the limit. A part is
// the rest of the range within one partition of the map and, when this node serves it, within
// the range of its group here (the two differ while a split or merge is applying).
type scanOp struct {
	req    engine.Request
	cursor []byte // where the part in flight (or the next one) starts
	// partEnd is where the part in flight ends (nil: the end of the keyspace).
	partEnd []byte
	items   []storage.Record
	// partID is the ID of the part in flight (forwardedBit set).
	partID uint64
	// more: the range holds keys past the last item.
	more bool
}

func (e *Engine) startScan(now time.Time, ks *placement.Keyspace, req engine.Request) {
	if req.Limit <= 0 {
		req.Limit = e.cfg.Limits.MaxScanLimit
	}
	s := &scanOp{req: req, cursor: bytes.Clone(req.Start)}
	if s.cursor == nil {
		s.cursor = []byte{}
	}
	e.scans[req.ID] = s
	e.nextScanPart(now, s)
}

// nextScanPart reads the scan's next part (locally if this node serves it, else at a
// replica), or answers the scan when it is complete.
func (e *Engine) nextScanPart(now time.Time, s *scanOp) {
	if len(s.items) >= s.req.Limit {
		e.finishScan(s)
		return
	}
	ks, ok := e.pmap.Keyspace(s.req.Keyspace)
	if !ok {
		e.failScan(s, errs.New(errs.NotFound, "unknown keyspace %q", s.req.Keyspace))
		return
	}
	p := ks.Lookup(s.cursor)
	end := p.End
	if len(s.req.End) > 0 && (end == nil || bytes.Compare(s.req.End, end) < 0) {
		end = s.req.End
	}
	g := e.groupFor(s.req.Keyspace, s.cursor)
	local := g != nil && g.servable()
	if local && g.end != nil && (end == nil || bytes.Compare(g.end, end) < 0) {
		end = g.end
	}
	sub := s.req
	e.nextID++
	sub.ID = forwardedBit | e.nextID
	sub.Start, sub.End = s.cursor, end
	sub.Limit = s.req.Limit - len(s.items)
	s.partID, s.partEnd = sub.ID, end
	e.scans[sub.ID] = s
	if !local {
		e.forward(now, p, sub)
		return
	}
	// The part is served here; its result comes back as a note (forwards[sub.ID] points at
	// this node itself).
	e.forwards[sub.ID] = &forwardOrigin{node: e.cfg.NodeID, id: sub.ID, op: engine.OpScan}
	e.scanLocal(now, g, sub)
}

// scanLocal reads [sub.Start, sub.End) of g's partition: at once at STALE, else after a
// read barrier (lease or read index) like a get.
func (e *Engine) scanLocal(now time.Time, g *group, sub engine.Request) {
	level := sub.Level
	if level == "" {
		level = g.opts.ReadLevel
	}
	if level == config.LevelStale {
		e.out.Reads = append(e.out.Reads, e.scanRead(g, sub, PathStale, time.Time{}))
		return
	}
	get := sub
	get.Op = engine.OpGet
	if e.leaseReadFn(now, g, get, func(path string, validUntil time.Time) engine.Read { return e.scanRead(g, sub, path, validUntil) }) {
		return
	}
	pr := &pendingReq{req: sub, group: g}
	if e.holdWithoutLeader(now, g, sub, nil) {
		return
	}
	e.track(sub, pr)
	g.rn.ReadIndex(e.readCtx(sub.ID))
}

// scanRead scans the part from storage; the result goes back to the engine as a note.
func (e *Engine) scanRead(g *group, sub engine.Request, path string, validUntil time.Time) engine.Read {
	k := g.key
	fwd := e.forwards[sub.ID]
	limit := sub.Limit
	return engine.Read{ID: sub.ID, Op: engine.OpScan, ValidUntil: validUntil, Wrap: e.wrapForward(fwd), Run: func(store engine.Reader) engine.Result {
		res := engine.Result{ID: sub.ID, Op: engine.OpScan, Path: path}
		engine.ScanLive(store, storage.Span{Keyspace: k.keyspace, Start: sub.Start, End: sub.End}, limit, &res)
		return res
	}}
}

// scanPartDone takes a part's result.
func (e *Engine) scanPartDone(now time.Time, id uint64, r *peerpb.RaftForwardReply) {
	s := e.scans[id]
	if s == nil || s.partID != id {
		return // a late or duplicated part
	}
	delete(e.scans, id)
	if err := forwardError(r); err != nil {
		e.failScan(s, err)
		return
	}
	for _, rec := range r.GetRecords() {
		if len(s.items) >= s.req.Limit {
			break
		}
		item, err := wire.RecordFromPB(rec)
		if err != nil {
			e.failScan(s, errs.New(errs.Internal, "scan of keyspace %q: a part's reply: %v", s.req.Keyspace, err))
			return
		}
		s.items = append(s.items, item)
	}
	atEnd := s.partEnd == nil || (len(s.req.End) > 0 && bytes.Compare(s.partEnd, s.req.End) >= 0)
	if r.GetMore() || len(s.items) >= s.req.Limit {
		// The part holds more than the limit left: the scan is full.
		s.more = r.GetMore() || !atEnd
		e.finishScan(s)
		return
	}
	if atEnd {
		e.finishScan(s)
		return
	}
	s.cursor = s.partEnd
	e.nextScanPart(now, s)
}

func (e *Engine) finishScan(s *scanOp) {
	delete(e.scans, s.req.ID)
	delete(e.scans, s.partID)
	e.reply(engine.Result{ID: s.req.ID, Op: engine.OpScan, Items: s.items, More: s.more})
}

func (e *Engine) failScan(s *scanOp, err error) {
	delete(e.scans, s.req.ID)
	delete(e.scans, s.partID)
	e.reply(engine.Result{ID: s.req.ID, Op: engine.OpScan, Err: err})
}

// expireScans fails the scans whose deadline passed.
func (e *Engine) expireScans(now time.Time) {
	var ids []uint64
	for id, s := range e.scans {
		if id == s.req.ID && !s.req.Deadline.IsZero() && now.After(s.req.Deadline) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := e.scans[id]
		e.failScan(s, errs.New(errs.Timeout, "scan of keyspace %q: deadline passed at key %q after %d items", s.req.Keyspace, s.cursor, len(s.items)))
	}
}
