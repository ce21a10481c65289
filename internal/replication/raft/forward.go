package raft

import (
	"slices"
	"strconv"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// A node that holds no replica of a partition (or one still being caught up) forwards its
// client's request to the nearest replica that serves it; that replica runs it as its own and
// sends the result back. A request is forwarded once (hops are not chained): a replica that
// cannot serve a forwarded request answers with the error.

// forward sends req to the nearest member of p's group, in the topology's RTT order. The
// message names p's anchor (wire.go); the receiver finds the group by the key.
func (e *Engine) forward(now time.Time, p *placement.Partition, req engine.Request) {
	target := e.nearest(p)
	if target == 0 {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable,
			"keyspace %q partition %d has no replica this node can forward to (replicas: nodes %v)", req.Keyspace, p.ID, p.Replicas)})
		return
	}
	wp := p.ID
	if ks, ok := e.pmap.Keyspace(req.Keyspace); ok {
		wp = e.anchorOf(ks, p.Start)
	}
	f := &peerpb.RaftForward{RequestId: req.ID, Keyspace: req.Keyspace, Partition: wp, Op: uint32(req.Op), Key: req.Key, Value: req.Value,
		Level: string(req.Level), Start: req.Start, End: req.End, Limit: uint32(max(req.Limit, 0)), Command: req.Command, Region: req.Region}
	if req.Op == engine.OpTxnRead {
		f.Command = encodeTxnReadArgs(req.Txn)
	}
	if !req.Deadline.IsZero() {
		f.DeadlineUnixNanos = req.Deadline.UnixNano()
	}
	if !req.MinVersion.IsZero() {
		f.MinVersion = wire.VersionToPB(req.MinVersion)
	}
	e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: target, Msg: &peerpb.Envelope_RaftForward{RaftForward: f}})
	e.track(req, &pendingReq{req: req, forwardedTo: target})
	e.stats.Forwarded.Add(1)
}

// nearest returns the member of p nearest to this node that is not this node (0: none),
// preferring the leader region's replicas among equals.
func (e *Engine) nearest(p *placement.Partition) uint32 {
	var best uint32
	var bestRTT time.Duration
	for _, r := range p.Replicas {
		if r == e.cfg.NodeID {
			continue
		}
		if rtt := e.rttTo(r); best == 0 || rtt < bestRTT {
			best, bestRTT = r, rtt
		}
	}
	return best
}

// stepForward runs a request another node forwarded here.
func (e *Engine) stepForward(now time.Time, from uint32, f *peerpb.RaftForward) {
	if e.forwardsTaken.Seen(now, engine.ForwardKey{Node: from, ID: f.GetRequestId()}) {
		e.stats.ForwardsDuplicated.Add(1)
		return
	}
	e.nextID++
	id := forwardedBit | e.nextID
	e.forwards[id] = &forwardOrigin{node: from, id: f.GetRequestId(), op: engine.Op(f.GetOp())}
	req := engine.Request{ID: id, Op: engine.Op(f.GetOp()), Keyspace: f.GetKeyspace(), Key: f.GetKey(), Value: f.GetValue(),
		Level: config.Level(f.GetLevel()), Start: f.GetStart(), End: f.GetEnd(), Limit: int(f.GetLimit()), Command: f.GetCommand(),
		Region: f.GetRegion(), MinVersion: wire.VersionFromPB(f.GetMinVersion())}
	if d := f.GetDeadlineUnixNanos(); d > 0 {
		req.Deadline = time.Unix(0, d)
	}
	switch req.Op {
	case engine.OpGet, engine.OpPut, engine.OpDelete, engine.OpCommand, engine.OpMoveMaster, engine.OpScan:
	case engine.OpTxnRead:
		t, err := decodeTxnReadArgs(req.Command)
		if err != nil {
			e.reply(engine.Result{ID: id, Op: req.Op, Err: errs.New(errs.Invalid, "forwarded transactional read: %v", err)})
			return
		}
		req.Txn, req.Command = t, nil
	default:
		e.reply(engine.Result{ID: id, Op: req.Op, Err: errs.New(errs.Invalid, "forwarded request with unknown operation %d", f.GetOp())})
		return
	}
	if req.MinVersion.WallNanos > 0 {
		e.clock.Observe(now, req.MinVersion)
	}
	// The group is the one of this node whose range holds the key (or the scan's range):
	// the sender's map may name another partition for it while a split or merge applies.
	key := req.Key
	if req.Op == engine.OpScan {
		key = req.Start
	}
	g := e.groupFor(req.Keyspace, key)
	switch {
	case g != nil && g.servable() && (req.Op != engine.OpScan || g.covers(req.Start, req.End)):
	case g != nil && g.serving() && g.frozenAt != 0 && req.Op != engine.OpScan:
		// Frozen for a merge: it waits for the merged group here.
		e.holdForRange(now, req, 0, g.opts.ElectionTimeout)
		return
	default:
		e.reply(engine.Result{ID: id, Op: req.Op, Err: errs.New(errs.Unavailable,
			"node %s, to which the request was forwarded, does not serve key %q of keyspace %q now; retry", e.nodeName(e.cfg.NodeID), key, req.Keyspace)})
		return
	}
	if req.Op == engine.OpScan {
		e.scanLocal(now, g, req)
		return
	}
	e.proposeAt(now, g, req)
}

// forwardReply is the message that answers a forwarded request (or hands a scan part's
// result back to this engine, when origin is this node).
func forwardReply(self uint32, origin *forwardOrigin, r engine.Result) *peerpb.Envelope {
	if origin == nil {
		return nil
	}
	rep := &peerpb.RaftForwardReply{RequestId: origin.id, Found: r.Found, Value: r.Value, Path: r.Path,
		StalenessNanos: int64(r.Staleness), More: r.More, Result: r.Output}
	if r.Op == engine.OpTxnRead && r.Err == nil {
		rep.Result = encodeTxnReadDone(r.Txn)
	}
	if !r.Version.IsZero() {
		rep.Version = wire.VersionToPB(r.Version)
	}
	if r.Err != nil {
		rep.ErrorKind = strconv.Itoa(int(errs.KindOf(r.Err)))
		rep.Error = r.Err.Error()
	}
	for _, it := range r.Items {
		rep.Records = append(rep.Records, wire.RecordToPB(it))
	}
	if r.Master != "" {
		rep.Path = "leader:" + r.Master + "@" + r.MasterRegion
	}
	return &peerpb.Envelope{From: self, To: origin.node, Msg: &peerpb.Envelope_RaftForwardReply{RaftForwardReply: rep}}
}

// forwardError is the error a forward reply carries (nil: none).
func forwardError(r *peerpb.RaftForwardReply) error {
	if r.GetErrorKind() == "" {
		return nil
	}
	kind, err := strconv.Atoi(r.GetErrorKind())
	if err != nil || kind <= 0 {
		kind = int(errs.Internal)
	}
	return errs.New(errs.Kind(kind), "%s", r.GetError())
}

// stepForwardReply answers the request this node forwarded (or takes a scan part).
func (e *Engine) stepForwardReply(now time.Time, from uint32, r *peerpb.RaftForwardReply) {
	id := r.GetRequestId()
	if id&forwardedBit != 0 {
		if _, ok := e.scans[id]; ok {
			if p, ok := e.pending[id]; ok && p.forwardedTo != 0 && p.forwardedTo != from {
				return // not the node the part was sent to
			}
			e.untrack(id)
			delete(e.forwards, id)
			e.scanPartDone(now, id, r)
			return
		}
	}
	p, ok := e.pending[id]
	if !ok || p.forwardedTo != from {
		return // late (the request expired) or not from the node it went to
	}
	e.untrack(id)
	res := engine.Result{ID: id, Op: p.req.Op, Err: forwardError(r), Found: r.GetFound(), Value: r.GetValue(), Path: r.GetPath(),
		Staleness: time.Duration(r.GetStalenessNanos()), More: r.GetMore(), Output: r.GetResult()}
	if v := r.GetVersion(); v != nil {
		res.Version = wire.VersionFromPB(v)
		// A forwarded write's version is newer than everything this node's client saw:
		// fold it into the clock so a session's next write is newer still.
		e.clock.Observe(now, res.Version)
	}
	if p.req.Op == engine.OpTxnRead && res.Err == nil {
		t, err := decodeTxnReadDone(r.GetResult())
		if err != nil {
			res.Err = errs.New(errs.Internal, "forwarded transactional read's reply: %v", err)
		}
		if t != nil && p.req.Txn != nil && p.req.Txn.ReadOnly {
			t.Vector = p.req.Txn.Snapshots
		}
		res.Txn, res.Output = t, nil
	}
	if name, region, ok := cutLeader(r.GetPath()); ok {
		res.Path, res.Master, res.MasterRegion = "", name, region
	}
	for _, rec := range r.GetRecords() {
		item, err := wire.RecordFromPB(rec)
		if err != nil {
			res.Err = errs.New(errs.Internal, "forwarded scan reply: %v", err)
			break
		}
		res.Items = append(res.Items, item)
	}
	e.reply(res)
}

// cutLeader parses the "leader:NAME@REGION" path of a forwarded leader move.
func cutLeader(path string) (name, region string, ok bool) {
	const prefix = "leader:"
	if len(path) <= len(prefix) || path[:len(prefix)] != prefix {
		return "", "", false
	}
	rest := path[len(prefix):]
	at := slices.Index([]byte(rest), '@')
	if at < 0 {
		return "", "", false
	}
	return rest[:at], rest[at+1:], true
}
