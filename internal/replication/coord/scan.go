package coord

import (
	"bytes"
	"slices"
	"time"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Scans read every partition overlapping the range from the level's count of replicas and
// merge the replies key by key, newest version wins, tombstones hide older values. Like reads,
// they repair the replicas they asked that answered with an older version of a key, or none,
// before the page counts (blocking read repair, scanrepair.go), so they give the same
// guarantee per key as a read at the same level, but no snapshot across keys.
//
// A replica returns at most `limit` keys (tombstones included) and about scan_page_bytes (a
// page), so a merged round is only complete up to the smallest last key among the replies
// that were cut short; the scan then continues the partition from there. At most scanWindow
// partitions are read at once.
//
// Split scans (Mayflower, thesis 3.2.3; docs/mayflower.md "Split scans"). A partition read at
// a level whose quorum is one replica (ONE, LOCAL_ONE) in a keyspace that reads with
// mayflower may be read from two replicas at once, as a large value is: the partition is not
// cut in advance (its keys' distribution is unknown) but read from both ends — one replica
// pages forward from the start of the unread range [resume, back), the other pages backward
// from its end — until the two meet (work stealing: each half takes what the other has not
// read yet). A page's records the other half has already read are dropped, so every key comes
// from exactly one replica, and the partition's items are the forward half's followed by the
// backward half's reversed. The rule for when, and how the limit is kept, is at scanSplitPlan.

const (
	scanWindow = 8
	// maxScanReplyBytes bounds one replica's scan reply (a page; scan_page_bytes is at most
	// this).
	maxScanReplyBytes = wire.MaxScanReplyBytes
)

type scanPart struct {
	p      *placement.Partition
	resume []byte // next start key within the partition
	end    []byte // exclusive end within the partition (nil = partition end)
	// back is the exclusive end of what is still unread: end, or as far down as the backward
	// half of a split read has got. The unread range is [resume, back).
	back  []byte
	items []storage.Record // live records of keys < resume, ascending
	// tail holds the backward half's live records, of keys ≥ back, descending; appended to
	// items reversed when the halves meet.
	tail         []storage.Record
	done         bool
	inflight     uint64 // peer request ID of the forward round in flight, 0 if none
	inflightBack uint64 // peer request ID of the backward round in flight, 0 if none
	planned      bool   // whether to split has been decided (at the partition's first round)
	split        *scanSplit
	// paged: a forward page has come back without reaching back, so the unread range held
	// more than a page; only then does a split read's backward half start.
	paged bool
	// prefer is the replica that reads on alone after a split half was given up (0: none);
	// avoid are the replicas of halves given up, asked last.
	prefer uint32
	avoid  []uint32
	// limit is the most items the scan can still take from this partition (as of its last
	// round): a split read's backward stream stops once both halves hold that many.
	limit int
}

// scanSplit is a partition read from two replicas: fwd pages forward, back backward; the rates
// are the plan's estimates (bytes/s).
type scanSplit struct {
	fwd, back         uint32
	fwdRate, backRate float64
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
	reverse   bool // the backward half of a split read
	split     bool // asked of one replica of a split read
	// A streaming round (scanstream.go) asked one replica, node, for a window of pages: it
	// takes them in order (next is the next page's number; early holds the at most window-1
	// pages that arrived before it) and stays open until the stream's last page.
	stream  bool
	node    uint32
	window  uint32
	next    uint32
	early   map[uint32]*peerpb.ScanReply
	started time.Time
	// merged is the round's replies merged (set once the quorum has answered); repair, while
	// the replicas that answered with an older version of some key (or none) are brought up
	// to date before the page counts (blocking read repair, scanrepair.go).
	merged   *mergedPage
	repair   *scanRepair
	lastPage time.Time     // when the last page was taken (zero: none yet)
	patience time.Duration // how long a page may take before the replica counts as slow
	// A stream is a transfer this node receives (transfers.go reports it): the bytes and
	// records its pages brought, its limit, and its rate (the plan's for a split half until
	// measured: bytes received since sampleAt, folded in every report interval).
	streamBytes, streamRecords, limit int64
	rate                              float64
	received                          int64
	sampleAt                          time.Time
}

// scanStreamStall: a stream is given up when its replica is down, or when no page has come
// for this many times its patience (the speculative delay, plus for a split half twice a
// page's transfer at the planned rate). Not at the first patience, as a page-by-page round's
// speculation is: a stream's pages queue behind whatever else shares the link, and a stream
// given up leaves its pages in flight to waste the link (each restart made the next page
// later still: 365 restarts for 369 streams under a bootstrap stream, docs/mayflower.md).
// Work stealing already lets the other half of a split read take over from a slow one.
const scanStreamStall = 4

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
		sp.back = sp.end
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
			if c.pumpScanPart(now, op, sp, op.req.Limit-count) {
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
	c.dropScanRounds(op)
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

// dropScanRounds forgets op's rounds in flight (their replies are ignored) and counts what the
// backward halves of unfinished split partitions read for nothing.
func (c *Core) dropScanRounds(op *pendingScan) {
	for _, sp := range op.parts {
		for _, id := range []uint64{sp.inflight, sp.inflightBack} {
			if id != 0 {
				c.dropScanRound(id)
			}
		}
		sp.inflight, sp.inflightBack = 0, 0
		if !sp.done && len(sp.tail) > 0 {
			c.lr.stats.ScanSplitUnused.Add(int64(len(sp.tail)))
		}
	}
}

// pumpScanPart keeps sp's rounds in flight: the forward one and, while sp is read split and the
// two halves' items do not fill limit yet, the backward one. It reports whether a round
// completed at once (only the local replica was needed).
func (c *Core) pumpScanPart(now time.Time, op *pendingScan, sp *scanPart, limit int) bool {
	sp.limit = limit
	progressed := false
	if sp.inflight == 0 && c.startScanRound(now, op, sp, limit, false) {
		progressed = true
	}
	if sp.done || sp.split == nil || !sp.paged || sp.inflightBack != 0 {
		return progressed
	}
	// The backward half starts once the first forward page has shown that the partition holds
	// more than a page (a smaller one would be read whole by both halves). Its records are part
	// of the answer only if the halves meet before the forward half's items fill the limit;
	// once both halves together hold limit items it stops (the forward half reads on alone),
	// and it never asks for more than that would take.
	if rest := limit - len(sp.items) - len(sp.tail); rest > 0 && c.startScanRound(now, op, sp, rest, true) {
		progressed = true
	}
	return progressed
}

// scanPageBytes is ks's scan page size (option scan_page_bytes).
func (c *Core) scanPageBytes(ks *placement.Keyspace) int {
	if ks == nil {
		return maxScanReplyBytes
	}
	if n := c.largeReadOptions(ks).ScanPageBytes; n > 0 && n <= maxScanReplyBytes {
		return n
	}
	return maxScanReplyBytes
}

// scanWindowPages is ks's scan window (option scan_window_pages): the pages a round asking one
// replica alone keeps in flight.
func (c *Core) scanWindowPages(ks *placement.Keyspace) uint32 {
	if ks == nil {
		return 1
	}
	return uint32(min(max(c.largeReadOptions(ks).ScanWindow, 1), wire.MaxScanWindow))
}

// scanSplitPlanPages is the size, in pages, of the transfer a scan's split is planned for.
const scanSplitPlanPages = 8

// scanSplitPlan decides whether a partition's read is split over two replicas, at its first
// round; alive are its live replicas in the selector's order. It splits when
//   - the level's quorum is one replica of one replica set (ONE, LOCAL_ONE outside moves;
//     QUORUM and ALL compare replicas key by key, which a split cannot do), so that each half's
//     replica alone satisfies the level;
//   - this node holds no replica of the partition counted by the level (a local read costs no
//     link), and two replicas are live;
//   - the keyspace reads with mayflower, the network is configured, and mayflowerPlan, under
//     the keyspace's mayflower_split rule (never: no split), splits a transfer of
//     scanSplitPlanPages pages (scan_page_bytes each) between two replicas: the first reads
//     forward, the second backward. The plan cannot know the range's size in advance; a
//     split only ever starts for a range of more than a page (below), and planning for one
//     page would never split across a WAN, where a page's transfer is shorter than the
//     farther replica's extra round trip.
//
// The backward half starts after the first forward page, and only if that page did not reach
// the end of the range: a partition of at most a page is read by the forward half alone, never
// twice.
//
// The limit: a scan returns its first `limit` live items in key order, so the backward half's
// records count only when the halves meet before the forward half alone fills the limit. The
// scan never waits for the backward half once the forward half's items fill the limit (the
// partition's read ends there, More set); the backward half asks for at most the limit less
// both halves' items, and stops as soon as both together hold the limit's count. When the limit
// cuts inside a split partition, the backward half has read at most about half the limit's
// keys for nothing (counted in ScanSplitUnused); a partition the limit does not reach is read
// by both halves with at most about a page read twice where they meet.
func (c *Core) scanSplitPlan(now time.Time, ks *placement.Keyspace, q quorum, alive []uint32, page int) *scanSplit {
	if ks == nil || len(q.sets) != 1 || q.need[0] != 1 || slices.Contains(q.union, c.Cfg.NodeID) || len(alive) < 2 {
		return nil
	}
	o := c.largeReadOptions(ks)
	if o.Selector != config.ReadSelectorMayflower || o.Split == "never" {
		return nil
	}
	plan, ok := c.mayflowerPlan(now, o.Split, float64(page*scanSplitPlanPages), alive)
	if !ok || len(plan) < 2 {
		return nil
	}
	return &scanSplit{fwd: plan[0].node, back: plan[1].node, fwdRate: plan[0].rate, backRate: plan[1].rate}
}

// endScanSplit gives up the half of sp's split read whose replica (slow) is slow or down: the
// other replica reads on alone, forward, over the whole remaining range [resume, back); slow
// is asked last from then on. A backward round still in flight is kept: what it brings is
// read.
func (c *Core) endScanSplit(sp *scanPart, slow uint32) {
	s := sp.split
	sp.split = nil
	sp.prefer = s.fwd
	if slow == s.fwd {
		sp.prefer = s.back
	}
	sp.avoid = append(sp.avoid, slow)
	c.lr.stats.ScanSplitFallbacks.Add(1)
}

// scanOrder puts sp's preferred replica first and the avoided ones last (stable otherwise).
func (sp *scanPart) scanOrder(nodes []uint32) []uint32 {
	rank := func(n uint32) int {
		switch {
		case n == sp.prefer:
			return 0
		case slices.Contains(sp.avoid, n):
			return 2
		}
		return 1
	}
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b uint32) int { return rank(a) - rank(b) })
	return out
}

// startScanRound asks the nearest live replicas (or, in a split read, its half's replica) for
// the next page of sp, forward from resume or (reverse) backward from back; it reports whether
// the round completed at once (only the local replica was needed).
func (c *Core) startScanRound(now time.Time, op *pendingScan, sp *scanPart, limit int, reverse bool) bool {
	q, _ := c.quorumFor(sp.p, op.req.Level) // validated in startScan
	ks, _ := c.Pmap.Keyspace(op.req.Keyspace)
	page := c.scanPageBytes(ks)
	var alive []uint32
	for _, n := range c.ByDistance(q.union) {
		if c.Alive(n) {
			alive = append(alive, n)
		}
	}
	if ks != nil {
		// A page is a transfer of up to scan_page_bytes: the keyspace's selector orders the
		// replicas it may come from (transfers.go).
		alive = c.transferOrder(now, ks, alive, float64(page))
	}
	if !sp.planned {
		sp.planned = true
		if sp.split = c.scanSplitPlan(now, ks, q, alive, page); sp.split != nil {
			c.lr.stats.ScanSplits.Add(1)
		}
	}
	alive = sp.scanOrder(alive)
	var node uint32
	var rate float64
	if sp.split != nil {
		node, rate = sp.split.fwd, sp.split.fwdRate
		if reverse {
			node, rate = sp.split.back, sp.split.backRate
		}
		if !c.Alive(node) {
			// The failure detector has given up on this half's replica.
			c.endScanSplit(sp, node)
			alive = sp.scanOrder(alive)
			if reverse {
				return false
			}
		}
	}
	id := c.newPeerReq()
	rd := &scanRound{op: op, part: sp, q: q, contacted: map[uint32]bool{}, replies: map[uint32]*peerpb.ScanReply{}, reverse: reverse, started: now}
	c.scans[id] = rd
	if reverse {
		sp.inflightBack = id
	} else {
		sp.inflight = id
	}
	var first []uint32
	if sp.split != nil {
		rd.split = true
		first = []uint32{node}
	} else {
		var enough bool
		first, enough = q.pick(alive)
		if !enough {
			first = alive
		}
	}
	for _, n := range alive {
		if !slices.Contains(first, n) {
			rd.spare = append(rd.spare, n)
		}
	}
	rd.request = &peerpb.ScanRequest{RequestId: id, Keyspace: op.req.Keyspace, Partition: sp.p.ID,
		Start: sp.resume, End: sp.back, Limit: uint32(limit), MoveEpoch: sp.p.MoveEpoch, Reverse: reverse, MaxBytes: uint32(page)}
	// One remote replica alone answers the round: it streams a window of pages
	// (scanstream.go) rather than answering one.
	if w := c.scanWindowPages(ks); w > 1 && len(first) == 1 && first[0] != c.Cfg.NodeID &&
		q.satisfied(func(n uint32) bool { return n == first[0] }) {
		rd.stream, rd.node, rd.window = true, first[0], w
		rd.request.Window = w
		rd.limit, rd.rate = int64(limit), rate
	}
	var farthest time.Duration
	for _, n := range first {
		farthest = max(farthest, c.RTT(n))
	}
	switch {
	case rd.split:
		// A half is slow when its page takes longer than the speculative delay plus twice the
		// page's transfer time at the plan's rate; the other half then takes over
		// (speculateScan), so the timer is set even without spare replicas.
		d := c.speculativeDelay(ks, farthest)
		if rate > 0 {
			d += time.Duration(2 * float64(page) / rate * float64(time.Second))
		}
		rd.patience = d
		c.AddTimer(now.Add(d), timerScanSpeculate, id)
	case len(rd.spare) > 0 || rd.stream:
		// A stream is watched even without spare replicas: its replica drops the cursor
		// silently when it stops holding the range (a move), and a lost page or credit stalls
		// it; the stream is then given up and the read goes on from where it stands.
		rd.patience = c.speculativeDelay(ks, farthest)
		c.AddTimer(now.Add(rd.patience), timerScanSpeculate, id)
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
			if rep := c.localScan(m, id); rep != nil {
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
	if rd.stream {
		last := rd.lastPage
		if last.IsZero() {
			last = rd.started
		}
		if c.Alive(rd.node) && now.Sub(last) < scanStreamStall*rd.patience {
			// Still within the stall bound: look again a patience later.
			c.AddTimer(now.Add(rd.patience), timerScanSpeculate, id)
			return
		}
	}
	if sp := rd.part; rd.split && sp.split != nil {
		// One half of a split read is slow: give it up (its late reply is ignored), and the
		// other half's replica reads on alone over the whole remaining range.
		c.dropScanRound(id)
		slow := sp.split.fwd
		if rd.reverse {
			sp.inflightBack = 0
			slow = sp.split.back
		} else {
			sp.inflight = 0
		}
		c.endScanSplit(sp, slow)
		c.advanceScan(now, rd.op)
		return
	}
	if rd.stream {
		// A stream's replica is slow: give the stream up and read on from resume in a new
		// round, which asks the next replica first.
		c.restartScanStream(now, id, rd)
		c.advanceScan(now, rd.op)
		return
	}
	c.askScanReplicas(id, rd, rd.spare)
	rd.spare = nil
	if c.completeScanRound(now, id, rd) {
		c.advanceScan(now, rd.op)
	}
}

// localScan serves m from this node's storage: [start, end) of the keyspace (the coordinator
// clipped the range to one partition of its map; end nil only for the keyspace's last
// partition), forward or reverse, up to m's limit and about max_bytes.
func (c *Core) localScan(m *peerpb.ScanRequest, id uint64) *peerpb.ScanReply {
	reply := &peerpb.ScanReply{RequestId: id, Reverse: m.Reverse}
	limit := int(m.Limit)
	maxBytes := int(m.MaxBytes)
	if maxBytes <= 0 || maxBytes > maxScanReplyBytes {
		maxBytes = maxScanReplyBytes
	}
	size := 0
	scan := c.Store.Scan
	if m.Reverse {
		scan = c.Store.ScanReverse
	}
	err := scan(msgSpan(m.Keyspace, m.Start, m.End), limit, func(r storage.Record) bool {
		reply.Records = append(reply.Records, wire.RecordToPB(r))
		size += len(r.Key) + len(r.Value) + 32
		if size >= maxBytes {
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
	if m.Limit == 0 || int(m.Limit) > c.Cfg.Limits.MaxScanLimit {
		m.Limit = uint32(c.Cfg.Limits.MaxScanLimit)
	}
	if m.Window > 1 {
		c.startScanStream(now, from, m)
		return
	}
	if reply := c.localScan(m, m.RequestId); reply != nil {
		c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_ScanReply{ScanReply: reply}})
	}
}

func (c *Core) handleScanReply(now time.Time, from uint32, m *peerpb.ScanReply) {
	rd, ok := c.scans[m.RequestId]
	if !ok || !rd.contacted[from] || m.Reverse != rd.reverse {
		return
	}
	if rd.stream {
		if from == rd.node {
			c.takeStreamPage(now, m.RequestId, rd, m)
		}
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
	if rd.repair != nil || !rd.q.satisfied(func(n uint32) bool { _, ok := rd.replies[n]; return ok }) {
		return false
	}
	sp := rd.part
	if !rd.stream && rd.merged == nil && !rd.op.done && !sp.done {
		recs, bound, truncated := mergeScanReplies(rd)
		rd.merged = &mergedPage{recs: recs, bound: bound, truncated: truncated}
		if c.startScanRepair(now, id, rd) {
			return false // the page counts once the stale replicas have taken its records
		}
	}
	// A stream's round stays open until its last page; a page that does not continue the
	// read exactly where it stands (a restarted cursor, a page lost) ends the stream, and a
	// new round reads on.
	last := true
	if rd.stream {
		page := rd.replies[rd.node]
		if !rd.op.done && !sp.done && !streamContinues(sp, page) {
			c.restartScanStream(now, id, rd)
			return true
		}
		last = !page.Streaming
	}
	if last {
		delete(c.scans, id)
		if rd.reverse && sp.inflightBack == id {
			sp.inflightBack = 0
		} else if !rd.reverse && sp.inflight == id {
			sp.inflight = 0
		}
	}
	if rd.op.done || sp.done {
		if !last {
			c.dropScanRound(id)
		}
		return false
	}
	if rd.split {
		if rd.reverse {
			c.lr.stats.ScanPagesBackward.Add(1)
		} else {
			c.lr.stats.ScanPagesForward.Add(1)
		}
	}
	var recs []storage.Record
	var bound []byte
	var truncated bool
	if m := rd.merged; m != nil {
		recs, bound, truncated = m.recs, m.bound, m.truncated
		rd.merged = nil
	} else {
		recs, bound, truncated = mergeScanReplies(rd)
	}
	recs = c.scanPageMutation(rd, recs) // broken on purpose only under the mutation (scanmutations.go)
	// Keys outside the unread range [resume, back) were read by the other half of a split read
	// (or are not what was asked): every key comes from the half that read it first.
	for _, rec := range recs {
		if bytes.Compare(rec.Key, sp.resume) < 0 || (sp.back != nil && bytes.Compare(rec.Key, sp.back) >= 0) {
			c.lr.stats.ScanSplitUnused.Add(1)
			continue
		}
		c.Clock.Observe(now, rec.Version)
		if rec.Tombstone {
			continue
		}
		if rd.reverse {
			sp.tail = append(sp.tail, rec)
		} else {
			sp.items = append(sp.items, rec)
		}
	}
	// A reply that was not cut short covered the whole range asked, which reached the other
	// half (or the partition's end): the halves meet.
	met := !truncated
	switch {
	case truncated && rd.reverse:
		// Keys ≥ bound are read.
		if bytes.Compare(bound, sp.resume) <= 0 {
			met = true
		} else if sp.back == nil || bytes.Compare(bound, sp.back) < 0 {
			sp.back = bytes.Clone(bound)
		}
	case truncated:
		// Keys ≤ bound are read.
		next := append(bytes.Clone(bound), 0)
		if sp.back != nil && bytes.Compare(next, sp.back) >= 0 {
			met = true
		} else if bytes.Compare(next, sp.resume) > 0 {
			sp.resume = next
		}
	}
	if !met && !rd.reverse {
		sp.paged = true
	}
	if met {
		for i := len(sp.tail) - 1; i >= 0; i-- {
			sp.items = append(sp.items, sp.tail[i])
		}
		sp.tail = nil
		sp.done = true
		// The other half's round (or this stream), if any, has nothing left to read.
		for _, other := range []uint64{sp.inflight, sp.inflightBack} {
			if other != 0 {
				c.dropScanRound(other)
			}
		}
		sp.inflight, sp.inflightBack = 0, 0
	} else if !last {
		if rd.reverse && len(sp.items)+len(sp.tail) >= sp.limit {
			// Both halves hold the limit's count: the backward stream's records cannot be part
			// of the answer unless the halves meet, which the forward half will do alone.
			c.dropScanRound(id)
			sp.inflightBack = 0
		} else {
			c.grantScanCredit(id, rd)
		}
	}
	return true
}

// restartScanStream gives up rd's stream (its replica was slow, or a page did not continue
// the read): the partition reads on from where it stands in a new round, which asks the
// stream's replica last. A half of a split read is given up as a slow half is.
func (c *Core) restartScanStream(now time.Time, id uint64, rd *scanRound) {
	sp := rd.part
	c.dropScanRound(id)
	c.lr.stats.ScanStreamRestarts.Add(1)
	if rd.reverse && sp.inflightBack == id {
		sp.inflightBack = 0
	} else if !rd.reverse && sp.inflight == id {
		sp.inflight = 0
	}
	if sp.split != nil && rd.split {
		c.endScanSplit(sp, rd.node)
		return
	}
	if !slices.Contains(sp.avoid, rd.node) && len(sp.avoid) < 16 {
		sp.avoid = append(sp.avoid, rd.node)
	}
}

// mergeScanReplies merges a round's replies: the newest version of each key, in the round's
// key order (descending when reverse), complete up to bound when truncated — the last record of
// the reply that got least far among those cut short; records past it are left out (another
// replica may not have read there).
func mergeScanReplies(rd *scanRound) (recs []storage.Record, bound []byte, truncated bool) {
	// before reports whether key a comes before b in the round's order.
	before := func(a, b []byte) bool {
		if rd.reverse {
			return bytes.Compare(a, b) > 0
		}
		return bytes.Compare(a, b) < 0
	}
	newest := map[string]storage.Record{}
	for _, n := range rd.q.union {
		rep, ok := rd.replies[n]
		if !ok || rep == nil {
			continue
		}
		if rep.Truncated && len(rep.Records) > 0 {
			last := rep.Records[len(rep.Records)-1].Key
			if !truncated || before(last, bound) {
				bound = last
			}
			truncated = true
		}
		for _, pr := range rep.Records {
			rec, err := wire.RecordFromPB(pr)
			if err != nil {
				continue
			}
			if cur, seen := newest[string(rec.Key)]; !seen || cur.Version.Less(rec.Version) {
				newest[string(rec.Key)] = rec
			}
		}
	}
	for _, rec := range newest {
		if truncated && before(bound, rec.Key) {
			continue
		}
		recs = append(recs, rec)
	}
	slices.SortFunc(recs, func(a, b storage.Record) int {
		if rd.reverse {
			return bytes.Compare(b.Key, a.Key)
		}
		return bytes.Compare(a.Key, b.Key)
	})
	return recs, bound, truncated
}

func (c *Core) expireScan(id uint64) {
	op, ok := c.scanOps[id]
	if !ok || op.done {
		return
	}
	op.done = true
	c.Inflight--
	delete(c.scanOps, id)
	c.dropScanRounds(op)
	c.Fail(op.req, errs.New(errs.Timeout, "scan timed out at consistency %s before enough replicas replied", op.req.Level))
}
