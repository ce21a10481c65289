package coord

import (
	"slices"
	"time"

	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

type readReply struct {
	found bool
	rec   storage.Record
	// omitted: the value was larger than the request's max_value_bytes and left out (rec has
	// no value); size is its length (largeread.go).
	omitted bool
	size    int
}

func (r readReply) version() hlc.Version {
	if !r.found {
		return hlc.Version{}
	}
	return r.rec.Version
}

// pendingRead is a client read this node coordinates.
//
// Stages: collecting replies until the quorum q has answered (in every replica set); then,
// if some of them were stale, repairing them (blocking read repair) until q is known to hold
// the newest version; then answered. Invariant: contacted ⊆ q.union; replies ⊆ contacted.
type pendingRead struct {
	req       Request
	part      *placement.Partition
	q         quorum
	contacted map[uint32]bool
	spare     []uint32 // eligible live replicas not asked yet, nearest first (speculative retry)
	replies   map[uint32]readReply
	order     []uint32 // replicas in the order their replies arrived
	repairing bool
	newest    readReply
	holders   map[uint32]bool // replicas known to hold newest
	done      bool
	path      string
	// fetch is the transfer of newest's value when the replies omitted it (largeread.go);
	// fetched: it is in newest. restarts counts how often the read started over.
	fetch    *fetch
	fetched  bool
	restarts int
	// maxValueBytes is what the read's requests ask (0: whole values).
	maxValueBytes int
}

func (c *Core) StartRead(now time.Time, ks *placement.Keyspace, req Request, path string) {
	c.startRead(now, ks, req, path, 0)
}

func (c *Core) startRead(now time.Time, ks *placement.Keyspace, req Request, path string, restarts int) {
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
	var alive []uint32
	for _, n := range c.ByDistance(q.union) {
		if c.Alive(n) {
			alive = append(alive, n)
		}
	}
	first, _ := q.pick(alive)
	if len(first) == 1 && first[0] == c.Cfg.NodeID {
		// Fast path: one reply is enough and the nearest replica is this node. No read
		// repair can be needed with a single reply.
		rec, found, err := c.Store.Get(req.Keyspace, req.Key)
		if err != nil {
			c.Fail(req, errs.New(errs.Internal, "local read of partition %d: %v", p.ID, err))
			return
		}
		res := Result{ID: req.ID, Op: OpGet, Path: path}
		if found {
			c.Clock.Observe(now, rec.Version)
			res.Version = rec.Version
			if !rec.Tombstone {
				res.Found, res.Value = true, rec.Value
			}
		}
		c.Reply(res)
		return
	}
	id := c.newPeerReq()
	r := &pendingRead{
		req: req, part: p, q: q, path: path, restarts: restarts,
		contacted: map[uint32]bool{}, replies: map[uint32]readReply{}, holders: map[uint32]bool{},
		maxValueBytes: c.largeReadOptions(ks).ThresholdBytes,
	}
	for _, n := range alive {
		if !slices.Contains(first, n) {
			r.spare = append(r.spare, n)
		}
	}
	spare := r.spare
	c.reads[id] = r
	c.Inflight++
	c.AddTimer(req.Deadline, timerReadDeadline, id)
	var farthest time.Duration
	for _, n := range first {
		farthest = max(farthest, c.RTT(n))
	}
	if len(spare) > 0 {
		c.AddTimer(now.Add(c.speculativeDelay(ks, farthest)), timerReadSpeculate, id)
	}
	c.askReplicas(id, r, first)
	c.maybeFinishRead(now, id, r)
}

// speculativeDelay is how long a read waits for its first choice of replicas before asking
// the others too (Cassandra's speculative_retry). "auto" (0) is 1.5× the RTT to the farthest
// replica asked plus 10ms of slack.
func (c *Core) speculativeDelay(ks *placement.Keyspace, farthest time.Duration) time.Duration {
	if ks == nil {
		return farthest*3/2 + 10*time.Millisecond
	}
	if v, ok := ks.Spec.Options["speculative_retry"]; ok && v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return farthest*3/2 + 10*time.Millisecond
}

func (c *Core) askReplicas(id uint64, r *pendingRead, nodes []uint32) {
	for _, n := range nodes {
		if r.contacted[n] {
			continue
		}
		r.contacted[n] = true
		if n == c.Cfg.NodeID {
			rec, found, err := c.Store.Get(r.req.Keyspace, r.req.Key)
			if err != nil {
				// Treat a local storage failure as no reply from this replica: the read can
				// still complete from others (speculative retry), or time out visibly.
				delete(r.contacted, n)
				continue
			}
			r.replies[n] = readReply{found: found, rec: rec}
			r.order = append(r.order, n)
			continue
		}
		c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_Read{Read: &peerpb.ReadRequest{
			RequestId: id, Keyspace: r.req.Keyspace, Partition: r.part.ID, Key: r.req.Key, MoveEpoch: r.part.MoveEpoch,
			MaxValueBytes: uint64(r.maxValueBytes),
		}}})
	}
}

func (c *Core) maybeFinishRead(now time.Time, id uint64, r *pendingRead) {
	if r.done {
		return
	}
	if !r.repairing {
		switch {
		case r.fetch == nil:
			if !r.q.satisfied(r.replied) {
				return
			}
			for _, rep := range r.replies {
				if r.newest.version().Less(rep.version()) {
					r.newest = rep
				}
			}
			if c.Cfg.Mutation == "first-reply" {
				// Broken on purpose: answer with whatever arrived first, repair nothing.
				r.newest = r.replies[r.order[0]]
				for n := range r.replies {
					r.holders[n] = true
				}
			}
			if r.newest.omitted {
				// A large value: fetch it in chunks first (largeread.go), which calls back.
				c.startFetch(now, id, r)
				return
			}
		case !r.fetched:
			return
		}
		if r.newest.found {
			c.Clock.Observe(now, r.newest.rec.Version)
		}
		r.repairing = true
		for n, rep := range r.replies {
			if rep.version() == r.newest.version() {
				r.holders[n] = true
			}
		}
		if !r.q.satisfied(r.holds) {
			pb := wire.RecordToPB(r.newest.rec)
			for _, n := range sortedStale(r) {
				if n == c.Cfg.NodeID {
					c.ApplyLocal(now, r.newest.rec, false)
					r.holders[n] = true
					continue
				}
				c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{RequestId: id, Record: pb, MoveEpoch: r.part.MoveEpoch}}})
			}
		}
	}
	if !r.q.satisfied(r.holds) {
		return
	}
	r.done = true
	c.Inflight--
	delete(c.reads, id)
	res := Result{ID: r.req.ID, Op: OpGet, Version: r.newest.version(), Path: r.path}
	if r.newest.found && !r.newest.rec.Tombstone {
		res.Found = true
		res.Value = r.newest.rec.Value
	}
	c.Reply(res)
}

func (r *pendingRead) replied(n uint32) bool { _, ok := r.replies[n]; return ok }
func (r *pendingRead) holds(n uint32) bool   { return r.holders[n] }

// sortedStale lists the replicas that replied with an older version, in node order so the
// output is deterministic.
func sortedStale(r *pendingRead) []uint32 {
	var out []uint32
	for _, n := range r.q.union {
		if rep, ok := r.replies[n]; ok && rep.version() != r.newest.version() {
			out = append(out, n)
		}
	}
	return out
}

func (c *Core) handleRepairAck(now time.Time, from uint32, id uint64, r *pendingRead) {
	if !r.repairing || r.done {
		return
	}
	if rep, ok := r.replies[from]; ok && rep.version() != r.newest.version() {
		r.holders[from] = true
	}
	c.maybeFinishRead(now, id, r)
}

func (c *Core) handleRead(now time.Time, from uint32, m *peerpb.ReadRequest) {
	if !c.admitKey(m.Keyspace, m.Key, m.MoveEpoch) {
		return
	}
	rec, found, err := c.Store.Get(m.Keyspace, m.Key)
	if err != nil {
		return // no reply: the coordinator retries elsewhere or times out
	}
	reply := &peerpb.ReadReply{RequestId: m.RequestId, Found: found}
	if found {
		if m.MaxValueBytes > 0 && uint64(len(rec.Value)) > m.MaxValueBytes && !rec.Tombstone {
			// A large value: the version and the size only; the coordinator fetches the value
			// in chunks from the replicas it chooses (largeread.go).
			reply.ValueOmitted, reply.ValueSize = true, uint64(len(rec.Value))
			rec.Value = nil
		}
		reply.Record = wire.RecordToPB(rec)
	}
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_ReadReply{ReadReply: reply}})
}

func (c *Core) handleReadReply(now time.Time, from uint32, m *peerpb.ReadReply) {
	r, ok := c.reads[m.RequestId]
	if !ok || r.done || r.repairing || r.fetch != nil || !r.contacted[from] {
		return
	}
	rep := readReply{found: m.Found}
	if m.Found {
		rec, err := wire.RecordFromPB(m.Record)
		if err != nil || rec.Keyspace != r.req.Keyspace || string(rec.Key) != string(r.req.Key) {
			return
		}
		rep.rec = rec
		if m.ValueOmitted {
			if r.maxValueBytes <= 0 || m.ValueSize <= uint64(r.maxValueBytes) || rec.Tombstone || len(rec.Value) != 0 {
				return // not what this read asked for
			}
			rep.omitted, rep.size = true, int(m.ValueSize)
		}
	}
	if _, dup := r.replies[from]; !dup {
		r.order = append(r.order, from)
	}
	r.replies[from] = rep
	c.maybeFinishRead(now, m.RequestId, r)
}

func (c *Core) speculateRead(now time.Time, id uint64) {
	r, ok := c.reads[id]
	if !ok || r.done || r.repairing || r.fetch != nil {
		return
	}
	c.askReplicas(id, r, r.spare)
	r.spare = nil
	c.maybeFinishRead(now, id, r)
}

func (c *Core) expireRead(id uint64) {
	r, ok := c.reads[id]
	if !ok || r.done {
		return
	}
	r.done = true
	c.Inflight--
	delete(c.reads, id)
	if f := r.fetch; f != nil && !r.fetched {
		delete(c.fetches, id)
		c.Fail(r.req, errs.New(errs.Timeout,
			"read timed out at consistency %s fetching a %d-byte value: %d of %d chunks in (%s, from %v)",
			r.req.Level, f.size, f.gotN, f.n, f.label, c.NodeNames(f.nodes())))
		return
	}
	var missing []uint32
	for _, n := range r.q.union {
		if !r.contacted[n] {
			continue
		}
		if _, ok := r.replies[n]; !ok {
			missing = append(missing, n)
		}
	}
	if r.repairing {
		c.Fail(r.req, errs.New(errs.Timeout,
			"read timed out at consistency %s during read repair: %s replicas hold the newest version",
			r.req.Level, r.q.describe(r.holds)))
		return
	}
	c.Fail(r.req, errs.New(errs.Timeout,
		"read timed out at consistency %s: %s replica replies before the deadline (no reply from %v)",
		r.req.Level, r.q.describe(r.replied), c.NodeNames(missing)))
}
