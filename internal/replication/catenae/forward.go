package catenae

import (
	"strconv"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/wire/peerpb"
)

// A node without a replica of a catenae keyspace (a region's other nodes) forwards its
// clients' requests to the nearest replica, which runs each as its own and answers with a
// CatenaeForwardReply. A request is forwarded once.

// sentForward is a request this node forwarded.
type sentForward struct {
	op       engine.Op
	keyspace string
	to       uint32
	deadline time.Time
}

// forwardOrigin is a forwarded request run here: who sent it, under which ID.
type forwardOrigin struct {
	node uint32
	id   uint64
}

// forwardGrace is how long after a forwarded request's deadline its origin still waits for the
// answer before it times the request out itself (the replica times it out first).
const forwardGrace = time.Second

// forwardedBit marks the IDs of requests run for another node (apart from the runtime's).
const forwardedBit = uint64(1) << 63

func (e *Engine) forward(k *keyspace, req engine.Request) {
	to := e.nearest(k)
	if to == 0 {
		e.reply(engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable, "keyspace %q has no replica to forward to", k.name)})
		return
	}
	f := &peerpb.CatenaeForward{RequestId: req.ID, Keyspace: req.Keyspace, Op: uint32(req.Op), Key: req.Key}
	if !req.Deadline.IsZero() {
		f.DeadlineUnixNanos = req.Deadline.UnixNano()
	}
	if t := req.Txn; t != nil {
		f.Reads, f.ReadVersions, f.ReadOnly = t.Reads, t.ReadVersions, t.ReadOnly
		for _, w := range t.Writes {
			f.Writes = append(f.Writes, &peerpb.SdurWrite{Key: w.Key, Value: w.Value, Delete: w.Delete})
		}
		for _, s := range t.Snapshots {
			if s.Partition == 0 {
				at := s.Counter
				f.AtEpoch = &at
			}
		}
	}
	e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: to, Msg: &peerpb.Envelope_CatenaeForward{CatenaeForward: f}})
	e.sent[req.ID] = &sentForward{op: req.Op, keyspace: k.name, to: to, deadline: req.Deadline}
	e.stats.forwarded.Add(1)
}

// nearest is the replica nearest to this node by the topology's RTTs (ties: the lowest ID).
func (e *Engine) nearest(k *keyspace) uint32 {
	var best uint32
	var bestRTT time.Duration
	from := e.regionOf(e.cfg.NodeID)
	for _, dc := range k.dcs {
		rtt := time.Duration(0)
		if to := e.regionOf(dc); e.cfg.Topology != nil && e.cfg.Topology.HasRegion(from) && e.cfg.Topology.HasRegion(to) {
			rtt = e.cfg.Topology.RTT(from, to)
		}
		if best == 0 || rtt < bestRTT {
			best, bestRTT = dc, rtt
		}
	}
	return best
}

func (e *Engine) regionOf(node uint32) string {
	for _, n := range e.cfg.Nodes {
		if n.ID == node {
			return n.Region
		}
	}
	return ""
}

// stepForward runs a request another node forwarded here (checked by wire.PeerCheck: the
// keyspace exists, this node is its replica, sizes within the limits).
func (e *Engine) stepForward(now time.Time, from uint32, f *peerpb.CatenaeForward) {
	if e.forwardsTaken.Seen(now, engine.ForwardKey{Node: from, ID: f.GetRequestId()}) {
		return
	}
	e.nextID++
	id := forwardedBit | e.nextID
	e.origins[id] = forwardOrigin{node: from, id: f.GetRequestId()}
	req := engine.Request{ID: id, Op: engine.Op(f.GetOp()), Keyspace: f.GetKeyspace(), Key: f.GetKey()}
	if d := f.GetDeadlineUnixNanos(); d > 0 {
		req.Deadline = time.Unix(0, d)
	}
	switch req.Op {
	case engine.OpGet:
	case engine.OpTxnRead, engine.OpTxnCommit:
		t := &engine.TxnRequest{Reads: f.GetReads(), ReadVersions: f.GetReadVersions(), ReadOnly: f.GetReadOnly()}
		for _, w := range f.GetWrites() {
			t.Writes = append(t.Writes, engine.TxnWrite{Key: w.GetKey(), Value: w.GetValue(), Delete: w.GetDelete()})
		}
		if f.AtEpoch != nil {
			t.Snapshots = []engine.TxnSnapshot{{Partition: 0, Counter: f.GetAtEpoch()}}
		}
		if req.Op == engine.OpTxnCommit && len(t.Reads) != len(t.ReadVersions) {
			e.reply(engine.Result{ID: id, Op: req.Op, Err: errs.New(errs.Invalid, "forwarded commit with %d reads and %d read versions", len(t.Reads), len(t.ReadVersions))})
			return
		}
		req.Txn = t
	default:
		e.reply(engine.Result{ID: id, Op: req.Op, Err: errs.New(errs.Invalid, "forwarded request with operation %s, which catenae keyspaces do not serve", req.Op)})
		return
	}
	k := e.keyspaces[req.Keyspace]
	if k == nil || !k.replica {
		e.reply(engine.Result{ID: id, Op: req.Op, Err: errs.New(errs.Unavailable, "keyspace %q: the node the request was forwarded to holds no replica of it; retry", req.Keyspace)})
		return
	}
	e.serve(now, k, req)
}

// forwardReply is the message that answers a forwarded request.
func forwardReply(self uint32, o forwardOrigin, res engine.Result) *peerpb.Envelope {
	r := &peerpb.CatenaeForwardReply{RequestId: o.id, Found: res.Found, Value: res.Value, Path: res.Path}
	if res.Err != nil {
		r.ErrorKind, r.Error = strconv.Itoa(int(errs.KindOf(res.Err))), res.Err.Error()
	}
	if res.Found {
		r.Version = uint64(res.Version.WallNanos)
	}
	if t := res.Txn; t != nil {
		r.Committed, r.Reason, r.AbortKey, r.TxnId = t.Committed, t.Reason, t.Key, t.ID
		r.Epoch = t.Snapshot.Counter
		r.Version = t.Version
		r.Vector = len(t.Vector) > 0
	}
	return &peerpb.Envelope{From: self, To: o.node, Msg: &peerpb.Envelope_CatenaeForwardReply{CatenaeForwardReply: r}}
}

// stepForwardReply answers this node's client with a forwarded request's result.
func (e *Engine) stepForwardReply(r *peerpb.CatenaeForwardReply) {
	s := e.sent[r.GetRequestId()]
	if s == nil {
		return // timed out here already, or a duplicate
	}
	delete(e.sent, r.GetRequestId())
	res := engine.Result{ID: r.GetRequestId(), Op: s.op}
	if r.GetErrorKind() != "" {
		kind, err := strconv.Atoi(r.GetErrorKind())
		if err != nil || kind <= 0 {
			kind = int(errs.Internal)
		}
		res.Err = errs.New(errs.Kind(kind), "%s", r.GetError())
		e.out.Replies = append(e.out.Replies, res)
		return
	}
	res.Found, res.Value, res.Path = r.GetFound(), r.GetValue(), r.GetPath()
	switch s.op {
	case engine.OpGet:
		if res.Found {
			res.Version = hlc.Version{WallNanos: int64(r.GetVersion())}
		}
	case engine.OpTxnRead:
		snap := engine.TxnSnapshot{Partition: 0, Counter: r.GetEpoch()}
		res.Txn = &engine.TxnResult{Version: r.GetVersion(), Snapshot: snap}
		if r.GetVector() {
			res.Txn.Vector = []engine.TxnSnapshot{snap}
		}
	case engine.OpTxnCommit:
		res.Txn = &engine.TxnResult{Committed: r.GetCommitted(), Reason: r.GetReason(), Key: r.GetAbortKey(), ID: r.GetTxnId(), Version: r.GetVersion()}
	}
	e.out.Replies = append(e.out.Replies, res)
}
