package coord

import (
	"bytes"
	"time"

	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Streaming scan pages (docs/mayflower.md, "Streaming scan pages"). A scan that asks for each
// page once the previous one has arrived pays a round trip per page: an 8 MiB scan in 512 KiB
// pages across a 150 ms WAN round trip spends 2.4 s waiting and 0.5 s moving bytes. A round
// that asks one replica alone (a read at ONE or LOCAL_ONE, or one half of a split scan) asks
// instead for a window of pages (the keyspace's scan_window_pages): the replica keeps a cursor
// on the range and streams pages numbered from 0, at most `window` beyond what the coordinator
// has taken; the coordinator takes pages in order and grants one more page of credit for each
// (ScanCredit), narrowing the range to what the other half of a split scan has not read. With
// a window that covers the link's bandwidth-delay product, a scan moves at the link's rate —
// the case where Mayflower's choice of replicas pays, as it does for large values.
//
// Each page says where it was read from (ScanReply.from): the coordinator takes a page only if
// it continues exactly where the partition's read stands, so a repeated request, a restarted
// cursor or a lost page can never leave a gap; a stream that cannot go on is given up and the
// partition read on by a new round, as a slow replica's is.
//
// The replica bounds its cursors (maxScanCursors; a request beyond them gets one page, not a
// stream, and the coordinator goes on page by page) and drops a cursor whose coordinator has
// been silent for scanCursorIdle (it crashed, or gave the stream up and its cancel was lost).

const (
	// maxScanCursors bounds the streams a replica serves at once.
	maxScanCursors = 1024
	// scanCursorIdle is how long a cursor waits for credit before it is dropped.
	scanCursorIdle = 10 * time.Second
	// scanCursorSweep is how often idle cursors are looked for.
	scanCursorSweep = time.Second
)

// scanCursorKey names a stream: the coordinator and its request ID.
type scanCursorKey struct {
	from uint32
	id   uint64
}

// scanCursor is a replica's side of a streaming scan.
type scanCursor struct {
	// what is left to read: forward, [start, end) with start just past the last page;
	// reverse, end at the last page's last key; limit is what is left of the stream's limit.
	keyspace   string
	start, end []byte
	limit      uint32
	maxBytes   uint32
	moveEpoch  uint64
	reverse    bool
	window     uint32
	seq        uint32 // the next page's number
	through    uint32 // pages numbered below this may be sent (seq ≤ through ≤ seq + window)
	last       time.Time
}

// scanCursors is the replica side's state.
type scanCursors struct {
	open      map[scanCursorKey]*scanCursor
	nextSweep time.Time
}

// startScanStream serves m, a request for a window of pages: it opens a cursor and sends what
// the window allows; with every cursor in use it answers one page, not streaming.
func (c *Core) startScanStream(now time.Time, from uint32, m *peerpb.ScanRequest) {
	key := scanCursorKey{from, m.RequestId}
	if _, open := c.cursors.open[key]; open {
		return // a repeated request: the stream is under way
	}
	if len(c.cursors.open) >= maxScanCursors {
		c.sweepScanCursors(now, true)
	}
	if len(c.cursors.open) >= maxScanCursors {
		c.lr.stats.ScanCursorsRefused.Add(1)
		if reply := c.localScan(m, m.RequestId); reply != nil {
			c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_ScanReply{ScanReply: reply}})
		}
		return
	}
	w := min(m.Window, wire.MaxScanWindow)
	cur := &scanCursor{keyspace: m.Keyspace, start: m.Start, end: m.End, limit: m.Limit, maxBytes: m.MaxBytes,
		moveEpoch: m.MoveEpoch, reverse: m.Reverse, window: w, through: w, last: now}
	c.cursors.open[key] = cur
	c.lr.stats.ScanStreams.Add(1)
	c.pumpScanCursor(now, key, cur)
}

// pumpScanCursor sends cur's pages while its credit lasts, and closes it after its last page.
// It re-checks on every page that this node still holds the range: a replica that lost it (a
// move) stops, and the coordinator's round notices the silence.
func (c *Core) pumpScanCursor(now time.Time, key scanCursorKey, cur *scanCursor) {
	for cur.seq < cur.through { // at most a window (≤ wire.MaxScanWindow) per call
		if !c.HoldsRange(cur.keyspace, cur.start, cur.end) || !c.epochAdmits(cur.keyspace, cur.start, cur.end, cur.moveEpoch) {
			delete(c.cursors.open, key)
			return
		}
		var reply *peerpb.ScanReply
		if len(cur.end) > 0 && bytes.Compare(cur.start, cur.end) >= 0 {
			reply = &peerpb.ScanReply{RequestId: key.id, Reverse: cur.reverse} // narrowed to nothing
		} else if reply = c.localScan(&peerpb.ScanRequest{Keyspace: cur.keyspace, Start: cur.start, End: cur.end,
			Limit: cur.limit, Reverse: cur.reverse, MaxBytes: cur.maxBytes}, key.id); reply == nil {
			delete(c.cursors.open, key) // a storage error: stop, the coordinator reads elsewhere
			return
		}
		reply.Seq = cur.seq
		reply.From = cur.start
		if cur.reverse {
			reply.From = cur.end
		}
		cur.seq++
		n := uint32(len(reply.Records))
		more := reply.Truncated && n < cur.limit
		if more {
			cur.limit -= n
			last := reply.Records[n-1].GetKey()
			if cur.reverse {
				cur.end = bytes.Clone(last)
			} else {
				cur.start = append(bytes.Clone(last), 0)
			}
		}
		reply.Streaming = more
		c.Send(key.from, &peerpb.Envelope{Msg: &peerpb.Envelope_ScanReply{ScanReply: reply}})
		if !more {
			delete(c.cursors.open, key)
			return
		}
	}
}

// handleScanCredit lets a stream go on, narrows it, or ends it.
func (c *Core) handleScanCredit(now time.Time, from uint32, m *peerpb.ScanCredit) {
	key := scanCursorKey{from, m.RequestId}
	cur, ok := c.cursors.open[key]
	if !ok {
		return
	}
	if m.Cancel {
		delete(c.cursors.open, key)
		return
	}
	cur.last = now
	// Narrow [Start, End) to its intersection with the credit's range (an empty bound
	// leaves that side as it is).
	if len(m.Start) > 0 && bytes.Compare(m.Start, cur.start) > 0 {
		cur.start = bytes.Clone(m.Start)
	}
	if len(m.End) > 0 && (len(cur.end) == 0 || bytes.Compare(m.End, cur.end) < 0) {
		cur.end = bytes.Clone(m.End)
	}
	if m.Through > cur.through {
		cur.through = min(m.Through, cur.seq+cur.window)
	}
	c.pumpScanCursor(now, key, cur)
}

// sweepScanCursors drops cursors idle for scanCursorIdle, once a scanCursorSweep unless now.
func (c *Core) sweepScanCursors(now time.Time, force bool) {
	if !force && now.Before(c.cursors.nextSweep) {
		return
	}
	c.cursors.nextSweep = now.Add(scanCursorSweep)
	for key, cur := range c.cursors.open { // at most maxScanCursors
		if now.Sub(cur.last) >= scanCursorIdle {
			delete(c.cursors.open, key)
			c.lr.stats.ScanCursorsExpired.Add(1)
		}
	}
}

// --- the coordinator's side ---

// takeStreamPage takes page m of rd's stream: in order of its number (pages ahead of the next
// one wait, at most a window of them), each folded in as a round's reply.
func (c *Core) takeStreamPage(now time.Time, id uint64, rd *scanRound, m *peerpb.ScanReply) {
	if m.Seq < rd.next || m.Seq >= rd.next+rd.window {
		return // a repeat, or outside the window (not sent by this stream)
	}
	if m.Seq > rd.next {
		if rd.early == nil {
			rd.early = map[uint32]*peerpb.ScanReply{}
		}
		rd.early[m.Seq] = m
		return
	}
	progressed := false
	for page := m; page != nil; { // at most a window of pages
		n := pageBytes(page)
		rd.streamBytes += n
		rd.received += n
		rd.streamRecords += int64(len(page.Records))
		rd.replies = map[uint32]*peerpb.ScanReply{rd.node: page}
		rd.next++
		rd.lastPage = now
		if c.completeScanRound(now, id, rd) {
			progressed = true
		}
		if _, open := c.scans[id]; !open {
			break
		}
		page = rd.early[rd.next]
		delete(rd.early, rd.next)
	}
	if progressed {
		c.advanceScan(now, rd.op)
	}
}

// pageBytes is a page's size as its replica bounds it (localScan): keys, values and 32 bytes
// per record.
func pageBytes(page *peerpb.ScanReply) int64 {
	var n int64
	for _, r := range page.Records {
		n += int64(len(r.GetKey()) + len(r.GetValue()) + 32)
	}
	return n
}

// streamRemaining estimates what rd's stream has left to bring: its records still within the
// limit at the size of those so far (a window of pages before the first arrives). The range's
// own end is not known; the partition's size would bound it, at a storage estimate per stream.
func (rd *scanRound) streamRemaining(pageBytes int) int64 {
	if rd.streamRecords == 0 {
		return int64(rd.window) * int64(pageBytes)
	}
	return max(rd.limit-rd.streamRecords, 0) * (rd.streamBytes / rd.streamRecords)
}

// streamContinues reports whether page, of a stream of sp's, starts where sp's read stands:
// forward at or before resume, backward at or after back (so no key in between is skipped).
func streamContinues(sp *scanPart, page *peerpb.ScanReply) bool {
	if !page.Reverse {
		return bytes.Compare(page.From, sp.resume) <= 0
	}
	if len(page.From) == 0 {
		return true // read from the range's end
	}
	return len(sp.back) > 0 && bytes.Compare(page.From, sp.back) >= 0
}

// grantScanCredit lets rd's stream send one more page, within the part of the partition not
// read yet.
func (c *Core) grantScanCredit(id uint64, rd *scanRound) {
	sp := rd.part
	credit := &peerpb.ScanCredit{RequestId: id, Through: rd.next + rd.window}
	if rd.reverse {
		credit.Start = sp.resume
	} else {
		credit.End = sp.back
	}
	c.Send(rd.node, &peerpb.Envelope{Msg: &peerpb.Envelope_ScanCredit{ScanCredit: credit}})
}

// dropScanRound forgets the round id (its replies are ignored from now on) and ends its
// stream at the replica, if it has one.
func (c *Core) dropScanRound(id uint64) {
	rd, ok := c.scans[id]
	if !ok {
		return
	}
	delete(c.scans, id)
	if rd.repair != nil {
		c.endScanRepair(rd.repair)
		rd.repair = nil
	}
	if rd.stream {
		c.Send(rd.node, &peerpb.Envelope{Msg: &peerpb.Envelope_ScanCredit{ScanCredit: &peerpb.ScanCredit{RequestId: id, Cancel: true}}})
	}
}
