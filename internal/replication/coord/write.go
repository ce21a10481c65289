package coord

import (
	"time"

	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// pendingWrite is a client write this node coordinates. Invariant: acks ⊆ holders of part,
// and the request is answered exactly once (done).
type pendingWrite struct {
	req  Request
	rec  storage.Record
	part *placement.Partition
	q    quorum
	acks map[uint32]bool
	done bool
	// waitAll: the level is met (replied is false until then); wait for every replica in
	// waitFor until the deadline. down were already dead at the start.
	waitAll bool
	waitFor []uint32
	down    []uint32
}

func (w *pendingWrite) acked(r uint32) bool { return w.acks[r] }

func (c *Core) startWrite(now time.Time, ks *placement.Keyspace, req Request) {
	p := ks.Lookup(req.Key)
	q, err := c.quorumFor(p, req.Level)
	if err != nil {
		c.Fail(req, err)
		return
	}
	if err := c.checkQuorumAvailable(q, req.Level, p); err != nil {
		c.Fail(req, err)
		return
	}
	if !req.MinVersion.IsZero() {
		c.Clock.Observe(now, req.MinVersion)
	}
	rec := storage.Record{
		Keyspace:  req.Keyspace,
		Key:       req.Key,
		Version:   c.Clock.Now(now),
		Value:     req.Value,
		Tombstone: req.Op == OpDelete,
	}
	if rec.Tombstone {
		rec.Value = nil
	}
	id := c.newPeerReq()
	w := &pendingWrite{req: req, rec: rec, part: p, q: q, acks: map[uint32]bool{}, waitAll: req.WaitAll}
	if w.waitAll {
		for _, r := range p.Holders() {
			if r == c.Cfg.NodeID || c.Alive(r) {
				w.waitFor = append(w.waitFor, r)
			} else {
				w.down = append(w.down, r)
			}
		}
	}
	c.writes[id] = w
	c.Inflight++
	c.AddTimer(req.Deadline, timerWriteDeadline, id)
	pb := wire.RecordToPB(rec)
	// Every holder gets the write: the old replicas and, while a replica moves, the new
	// one (which must see every write from the move's start on, docs/elasticity.md).
	targets := p.Holders()
	if c.Cfg.Mutation == "move-writes-old-only" {
		targets = p.Replicas // broken on purpose: the new replica of a move gets no writes
	}
	for _, r := range targets {
		if r == c.Cfg.NodeID {
			// The local write is durable before this Ready's replies leave (Ready contract),
			// so it may count as an ack right away.
			c.ApplyLocal(now, rec, true)
			w.acks[r] = true
			continue
		}
		c.Send(r, &peerpb.Envelope{Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{RequestId: id, Record: pb, MoveEpoch: p.MoveEpoch}}})
	}
	c.maybeFinishWrite(id, w)
}

func (c *Core) maybeFinishWrite(id uint64, w *pendingWrite) {
	if w.done || !w.q.satisfied(w.acked) {
		return
	}
	if w.waitAll {
		for _, r := range w.waitFor {
			if !w.acks[r] {
				return // the deadline (expireWrite) answers if this replica stays silent
			}
		}
		c.finishWaitAll(id, w)
		return
	}
	w.done = true
	c.Inflight--
	c.Reply(Result{ID: w.req.ID, Op: w.req.Op, Version: w.rec.Version})
	// Keep tracking until every replica acked or the deadline passes? No: late acks carry no
	// information the client needs; drop the entry now to bound memory.
	delete(c.writes, id)
}

// finishWaitAll answers a WaitAll write whose level is met: with every alive replica's
// acknowledgement, or at its deadline naming the replicas that stayed silent.
func (c *Core) finishWaitAll(id uint64, w *pendingWrite) {
	res := Result{ID: w.req.ID, Op: w.req.Op, Version: w.rec.Version}
	for _, r := range w.down {
		res.Unacked = append(res.Unacked, Unacked{Node: r, Reason: "down"})
	}
	for _, r := range w.waitFor {
		if !w.acks[r] {
			res.Unacked = append(res.Unacked, Unacked{Node: r, Reason: "no acknowledgement before the deadline"})
		}
	}
	w.done = true
	c.Inflight--
	c.Reply(res)
	delete(c.writes, id)
}

// handleWrite applies a replicated write (from a coordinator, a read repair or anti-entropy)
// and acknowledges it once durable. Last-writer-wins needs no comparison here: storage keeps
// versions side by side and always reads the newest.
func (c *Core) handleWrite(now time.Time, from uint32, m *peerpb.WriteRequest) {
	rec, err := wire.RecordFromPB(m.GetRecord())
	if err != nil {
		return // a correct peer never sends this; dropping is safe (the coordinator times out)
	}
	if !c.admitKey(rec.Keyspace, rec.Key, m.MoveEpoch) {
		return
	}
	c.Clock.Observe(now, rec.Version)
	c.ApplyLocal(now, rec, true)
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_WriteAck{WriteAck: &peerpb.WriteAck{RequestId: m.RequestId}}})
}

func (c *Core) handleWriteAck(now time.Time, from uint32, m *peerpb.WriteAck) {
	if w, ok := c.writes[m.RequestId]; ok {
		if w.part.Holds(from) {
			w.acks[from] = true
		}
		c.maybeFinishWrite(m.RequestId, w)
		return
	}
	if r, ok := c.reads[m.RequestId]; ok {
		c.handleRepairAck(now, from, m.RequestId, r)
		return
	}
	c.scanRepairAcked(now, m.RequestId, from)
}

// expireWrite fails write id if it is still pending at its deadline.
func (c *Core) expireWrite(id uint64) {
	w, ok := c.writes[id]
	if !ok || w.done {
		return
	}
	if w.waitAll && w.q.satisfied(w.acked) {
		c.finishWaitAll(id, w)
		return
	}
	{
		var missing []uint32
		for _, r := range w.q.union {
			if !w.acks[r] {
				missing = append(missing, r)
			}
		}
		w.done = true
		c.Inflight--
		delete(c.writes, id)
		c.Fail(w.req, errs.New(errs.Timeout,
			"write timed out at consistency %s: %s replica acks before the deadline (no ack from %v); the write may or may not have been applied",
			w.req.Level, w.q.describe(w.acked), c.NodeNames(missing)))
	}
}
