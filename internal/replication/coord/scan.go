package coord

import (
	"bytes"
	"slices"
	"time"

	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Scans read every partition overlapping the range from the level's count of replicas and
// merge the replies key by key, newest version wins, tombstones hide older values. Scans do
// not read-repair (anti-entropy converges replicas); they give the same guarantee per key as
// a read at the same level, but no snapshot across keys.
//
// A replica returns at most `limit` keys (tombstones included), so a merged round is only
// complete up to the smallest last key among the replies that were cut short; the scan then
// continues the partition from there. At most scanWindow partitions are read at once.

const (
	scanWindow = 8
	// maxScanReplyBytes bounds one replica's scan reply.
	maxScanReplyBytes = 4 << 20
)

type scanPart struct {
	p        *placement.Partition
	resume   []byte // next start key within the partition
	end      []byte // exclusive end within the partition (nil = partition end)
	items    []storage.Record
	done     bool
	inflight uint64 // peer request ID of the round in flight, 0 if none
}

type pendingScan struct {
	req   Request
	parts []*scanPart
	done  bool
}

// scanRound is one request to a quorum of replicas for one partition.
type scanRound struct {
	op        *pendingScan
	part      *scanPart
	q         quorum
	contacted map[uint32]bool
	replies   map[uint32]*peerpb.ScanReply
	spare     []uint32 // live eligible replicas not asked yet (speculative retry)
	request   *peerpb.ScanRequest
}

func (c *Core) startScan(now time.Time, ks *placement.Keyspace, req Request) {
	op := &pendingScan{req: req}
	for _, p := range ks.Overlapping(req.Start, req.End) {
		sp := &scanPart{p: p, resume: p.Start, end: p.End}
		if bytes.Compare(req.Start, p.Start) > 0 {
			sp.resume = req.Start
		}
		if len(req.End) > 0 && (p.End == nil || bytes.Compare(req.End, p.End) < 0) {
			sp.end = req.End
		}
		op.parts = append(op.parts, sp)
	}
	for _, sp := range op.parts {
		q, err := c.quorumFor(sp.p, req.Level)
		if err == nil {
			err = c.checkQuorumAvailable(q, req.Level, sp.p)
		}
		if err != nil {
			c.Fail(req, err)
			return
		}
	}
	c.scanOps[req.ID] = op
	c.Inflight++
	c.AddTimer(req.Deadline, timerScanDeadline, req.ID)
	c.advanceScan(now, op)
}

// advanceScan finishes the scan when enough is known, and otherwise keeps rounds in flight for
// the first unfinished partition and the next ones within the window. Rounds answered at once
// (this node is the only replica needed) are folded in by looping; every pass either starts
// remote rounds and returns, or completes a round, which moves a resume key forward.
func (c *Core) advanceScan(now time.Time, op *pendingScan) {
	for pass := 0; pass < 1_000_000 && !op.done; pass++ {
		count := 0
		first := -1
		for i, sp := range op.parts {
			if count >= op.req.Limit {
				break
			}
			if !sp.done {
				first = i
				break
			}
			count += len(sp.items)
		}
		if first >= 0 && count+len(op.parts[first].items) >= op.req.Limit {
			// The unfinished partition already holds enough items in key order.
			c.finishScan(op)
			return
		}
		if first < 0 {
			c.finishScan(op)
			return
		}
		progressed := false
		window := 0
		for _, sp := range op.parts[first:] {
			if window >= scanWindow {
				break
			}
			if sp.done {
				continue
			}
			window++
			if sp.inflight == 0 && c.startScanRound(now, op, sp, op.req.Limit-count) {
				progressed = true
			}
		}
		if !progressed {
			return
		}
	}
}

// finishScan answers with the first Limit live items in key order. More is set when items
// were left out or a partition was not read to its end ("there may be more").
func (c *Core) finishScan(op *pendingScan) {
	op.done = true
	c.Inflight--
	delete(c.scanOps, op.req.ID)
	for _, sp := range op.parts {
		if sp.inflight != 0 {
			delete(c.scans, sp.inflight)
		}
	}
	res := Result{ID: op.req.ID, Op: OpScan}
	for _, sp := range op.parts {
		if len(res.Items) == op.req.Limit {
			if !sp.done || len(sp.items) > 0 {
				res.More = true
			}
			continue
		}
		for _, it := range sp.items {
			if len(res.Items) == op.req.Limit {
				res.More = true
				break
			}
			res.Items = append(res.Items, it)
		}
		if !sp.done {
			res.More = true
		}
	}
	c.Reply(res)
}

// startScanRound asks the nearest live replicas for the next piece of sp; it reports whether
// the round completed at once (only the local replica was needed).
func (c *Core) startScanRound(now time.Time, op *pendingScan, sp *scanPart, limit int) bool {
	q, _ := c.quorumFor(sp.p, op.req.Level) // validated in startScan
	id := c.newPeerReq()
	rd := &scanRound{op: op, part: sp, q: q, contacted: map[uint32]bool{}, replies: map[uint32]*peerpb.ScanReply{}}
	c.scans[id] = rd
	sp.inflight = id
	var alive []uint32
	for _, n := range c.ByDistance(q.union) {
		if c.Alive(n) {
			alive = append(alive, n)
		}
	}
	if ks, ok := c.Pmap.Keyspace(op.req.Keyspace); ok {
		// A page is a transfer of up to maxScanReplyBytes: the keyspace's selector orders the
		// replicas it may come from (transfers.go).
		alive = c.transferOrder(now, ks, alive, maxScanReplyBytes)
	}
	first, enough := q.pick(alive)
	if !enough {
		first = alive
	}
	for _, n := range alive {
		if !slices.Contains(first, n) {
			rd.spare = append(rd.spare, n)
		}
	}
	rd.request = &peerpb.ScanRequest{RequestId: id, Keyspace: op.req.Keyspace, Partition: sp.p.ID,
		Start: sp.resume, End: sp.end, Limit: uint32(limit), MoveEpoch: sp.p.MoveEpoch}
	var farthest time.Duration
	for _, n := range first {
		farthest = max(farthest, c.RTT(n))
	}
	if len(rd.spare) > 0 {
		ks, _ := c.Pmap.Keyspace(op.req.Keyspace)
		c.AddTimer(now.Add(c.speculativeDelay(ks, farthest)), timerScanSpeculate, id)
	}
	c.askScanReplicas(id, rd, first)
	return c.completeScanRound(now, id, rd)
}

func (c *Core) askScanReplicas(id uint64, rd *scanRound, nodes []uint32) {
	for _, n := range nodes {
		if rd.contacted[n] {
			continue
		}
		rd.contacted[n] = true
		if n == c.Cfg.NodeID {
			m := rd.request
			if rep := c.localScan(m.Keyspace, m.Start, m.End, int(m.Limit), id); rep != nil {
				rd.replies[n] = rep
			}
			continue
		}
		c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_Scan{Scan: rd.request}})
	}
}

// speculateScan asks the remaining replicas when the first choice is slow, as reads do.
func (c *Core) speculateScan(now time.Time, id uint64) {
	rd, ok := c.scans[id]
	if !ok || rd.op.done {
		return
	}
	c.askScanReplicas(id, rd, rd.spare)
	rd.spare = nil
	if c.completeScanRound(now, id, rd) {
		c.advanceScan(now, rd.op)
	}
}

// localScan reads [start, end) of keyspace: the coordinator clipped the range to one
// partition of its map (end nil only for the keyspace's last partition).
func (c *Core) localScan(keyspace string, start, end []byte, limit int, id uint64) *peerpb.ScanReply {
	reply := &peerpb.ScanReply{RequestId: id}
	size := 0
	err := c.Store.Scan(msgSpan(keyspace, start, end), limit, func(r storage.Record) bool {
		reply.Records = append(reply.Records, wire.RecordToPB(r))
		size += len(r.Key) + len(r.Value) + 32
		if size >= maxScanReplyBytes {
			reply.Truncated = true
			return false
		}
		return true
	})
	if err != nil {
		return nil
	}
	if limit > 0 && len(reply.Records) >= limit {
		reply.Truncated = true
	}
	return reply
}

func (c *Core) handleScan(now time.Time, from uint32, m *peerpb.ScanRequest) {
	if !c.HoldsRange(m.Keyspace, m.Start, m.End) || !c.epochAdmits(m.Keyspace, m.Start, m.End, m.MoveEpoch) {
		return
	}
	limit := int(m.Limit)
	if limit <= 0 || limit > c.Cfg.Limits.MaxScanLimit {
		limit = c.Cfg.Limits.MaxScanLimit
	}
	if reply := c.localScan(m.Keyspace, m.Start, m.End, limit, m.RequestId); reply != nil {
		c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_ScanReply{ScanReply: reply}})
	}
}

func (c *Core) handleScanReply(now time.Time, from uint32, m *peerpb.ScanReply) {
	rd, ok := c.scans[m.RequestId]
	if !ok || !rd.contacted[from] {
		return
	}
	rd.replies[from] = m
	if c.completeScanRound(now, m.RequestId, rd) {
		c.advanceScan(now, rd.op)
	}
}

// completeScanRound merges the round's replies into its partition once `need` replicas have
// answered, and reports whether it did.
func (c *Core) completeScanRound(now time.Time, id uint64, rd *scanRound) bool {
	if !rd.q.satisfied(func(n uint32) bool { _, ok := rd.replies[n]; return ok }) {
		return false
	}
	delete(c.scans, id)
	sp := rd.part
	sp.inflight = 0
	if rd.op.done {
		return false
	}
	// The merged result is complete up to bound: the smallest last key among truncated replies.
	var bound []byte
	truncated := false
	newest := map[string]storage.Record{}
	var order [][]byte
	for _, n := range rd.q.union {
		rep, ok := rd.replies[n]
		if !ok || rep == nil {
			continue
		}
		if rep.Truncated && len(rep.Records) > 0 {
			last := rep.Records[len(rep.Records)-1].Key
			if !truncated || bytes.Compare(last, bound) < 0 {
				bound = last
			}
			truncated = true
		}
		for _, pr := range rep.Records {
			rec, err := wire.RecordFromPB(pr)
			if err != nil {
				continue
			}
			cur, seen := newest[string(rec.Key)]
			if !seen {
				order = append(order, rec.Key)
			}
			if !seen || cur.Version.Less(rec.Version) {
				newest[string(rec.Key)] = rec
			}
		}
	}
	slices.SortFunc(order, bytes.Compare)
	for _, k := range order {
		if truncated && bytes.Compare(k, bound) > 0 {
			break
		}
		rec := newest[string(k)]
		c.Clock.Observe(now, rec.Version)
		if !rec.Tombstone {
			sp.items = append(sp.items, rec)
		}
	}
	if truncated {
		sp.resume = append(bytes.Clone(bound), 0)
	} else {
		sp.done = true
	}
	return true
}

func (c *Core) expireScan(id uint64) {
	op, ok := c.scanOps[id]
	if !ok || op.done {
		return
	}
	op.done = true
	c.Inflight--
	delete(c.scanOps, id)
	for _, sp := range op.parts {
		if sp.inflight != 0 {
			delete(c.scans, sp.inflight)
		}
	}
	c.Fail(op.req, errs.New(errs.Timeout, "scan timed out at consistency %s before enough replicas replied", op.req.Level))
}
