package coord

import (
	"time"

	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// pendingWrite is a client write this node coordinates. Invariant: acks ⊆ replicas of part,
// and the request is answered exactly once (done).
type pendingWrite struct {
	req      Request
	rec      storage.Record
	part     *placement.Partition
	eligible []uint32
	need     int
	acks     map[uint32]bool
	done     bool
	// waitAll: the level is met (replied is false until then); wait for every replica in
	// waitFor until the deadline. down were already dead at the start.
	waitAll bool
	waitFor []uint32
	down    []uint32
}

func (w *pendingWrite) eligibleAcks() int {
	n := 0
	for _, r := range w.eligible {
		if w.acks[r] {
			n++
		}
	}
	return n
}

func (c *Core) startWrite(now time.Time, ks *placement.Keyspace, req Request) {
	p := ks.Lookup(req.Key)
	elig, need, err := c.eligible(p, req.Level)
	if err != nil {
		c.Fail(req, err)
		return
	}
	if err := c.checkAvailable(elig, need, req.Level, p); err != nil {
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
	w := &pendingWrite{req: req, rec: rec, part: p, eligible: elig, need: need, acks: map[uint32]bool{}, waitAll: req.WaitAll}
	if w.waitAll {
		for _, r := range p.Replicas {
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
	for _, r := range p.Replicas {
		if r == c.Cfg.NodeID {
			// The local write is durable before this Ready's replies leave (Ready contract),
			// so it may count as an ack right away.
			c.ApplyLocal(now, rec, true)
			w.acks[r] = true
			continue
		}
		c.Send(r, &peerpb.Envelope{Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{RequestId: id, Record: pb}}})
	}
	c.maybeFinishWrite(id, w)
}

func (c *Core) maybeFinishWrite(id uint64, w *pendingWrite) {
	if w.done || w.eligibleAcks() < w.need {
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
	if !c.HoldsKey(rec.Keyspace, rec.Key) {
		return
	}
	c.Clock.Observe(now, rec.Version)
	c.ApplyLocal(now, rec, true)
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_WriteAck{WriteAck: &peerpb.WriteAck{RequestId: m.RequestId}}})
}

func (c *Core) handleWriteAck(now time.Time, from uint32, m *peerpb.WriteAck) {
	if w, ok := c.writes[m.RequestId]; ok {
		if w.part.HasReplica(from) {
			w.acks[from] = true
		}
		c.maybeFinishWrite(m.RequestId, w)
		return
	}
	if r, ok := c.reads[m.RequestId]; ok {
		c.handleRepairAck(now, from, m.RequestId, r)
	}
}

// expireWrite fails write id if it is still pending at its deadline.
func (c *Core) expireWrite(id uint64) {
	w, ok := c.writes[id]
	if !ok || w.done {
		return
	}
	if w.waitAll && w.eligibleAcks() >= w.need {
		c.finishWaitAll(id, w)
		return
	}
	{
		var missing []uint32
		for _, r := range w.eligible {
			if !w.acks[r] {
				missing = append(missing, r)
			}
		}
		w.done = true
		c.Inflight--
		delete(c.writes, id)
		c.Fail(w.req, errs.New(errs.Timeout,
			"write timed out at consistency %s: %d of %d replica acks before the deadline (no ack from %v); the write may or may not have been applied",
			w.req.Level, w.eligibleAcks(), w.need, c.NodeNames(missing)))
	}
}
