package coord

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// Replica moves in the quorum family (docs/elasticity.md, "the move protocol").
//
// ElasCass (4.2) moves a replica with two ownership tokens per partition: the new node takes
// writes first, reads once the data is there, and the old node drops out last. That is safe
// only because ElasCass writes every replica (ALL). Meridian writes and reads at quorums, so
// a move here is staged by the cluster metadata (placement.Move) and fenced by an epoch:
//
//  1. move_start: the partition gets a new replica (Add) next to the old set. From then on
//     every write goes to the old replicas and Add, and reads and writes must reach their
//     level in the old set and in the new set (old with Remove replaced by Add): either set
//     alone holds every acknowledged write and every value a read returned. The partition's
//     MoveEpoch becomes the move's ID; replicas refuse reads and writes coordinated under an
//     older epoch, so a node that has not heard of the move cannot gather a quorum of the old
//     set once the old replicas it needs have moved on.
//  2. Add catches up: it pulls a snapshot of the range from Source (an sstable exported and
//     merged into Add's storage without touching the writes Add already took), and every old
//     replica, from the moment it applied the move, runs catch-up rounds with Add: both
//     compare, per key, the newest version not newer than a version T0 chosen by the old
//     replica then (its hybrid clock, which has observed every version it applied), and the
//     old replica pushes what Add lacks, until Add holds, for every key, at least what that
//     old replica held at T0. Once Add holds what a majority of the old set held (and every live
//     old replica of its region, for the LOCAL levels), it reports that it has caught up.
//  3. move_finish: the new set becomes the replicas. Remove drops its data when it applies it.
//
// A write acknowledged before step 1 reached a majority of the old set; each of those
// replicas applied it before it applied the move (and refuses older-epoch writes after), and
// Add's catch-up covers a majority of them, so Add holds it. A write after step 1 reached its
// level in both sets. So after step 3 the new set holds every acknowledged write, and the old
// set's stale coordinators are fenced by the epoch.

const (
	// moveRoundInterval spaces an old replica's catch-up rounds with the new one, and
	// moveRoundMaxInterval bounds the backoff after rounds the new replica left unanswered:
	// it answers none before its snapshot is in, and each round is a scan of the partition
	// (bench elastic: a bootstrap's host CPU went mostly to rounds nobody answered).
	moveRoundInterval    = 250 * time.Millisecond
	moveRoundMaxInterval = 2 * time.Second
	// moveDoneRecheck spaces the rounds an old replica runs after one found nothing missing,
	// while the move has not finished: a move normally finishes within a report interval and
	// a metadata commit of its last round, so these are rare; they matter when the new
	// replica restarted and must be covered again.
	moveDoneRecheck = 3 * time.Second
	// moveAskInterval: the new replica asks its source for the snapshot again this often
	// until the source answers (it may not have applied the move yet).
	moveAskInterval = time.Second
	// moveWindow shapes a snapshot pull: four chunks in flight (each Cfg.ChunkBytes()).
	moveWindow = 4
	// moveChunkRetry: a chunk not stored this long after it was asked for is asked again.
	moveChunkRetry = 2 * time.Second
	// moveIdle: a transfer without progress this long starts over; a source drops an export
	// nobody has read for this long.
	moveIdle = 30 * time.Second
	// moveReportInterval: a caught-up replica repeats its report this often until the move
	// finishes (a report or the command it causes may be lost).
	moveReportInterval = time.Second
	// maxMovesIn bounds the snapshot pulls one node runs at once; further moves wait.
	maxMovesIn = 4
)

type moveKey struct {
	keyspace  string
	partition uint32
	id        uint64
}

type inPhase int

const (
	phaseAsk   inPhase = iota // asking the source to export the range
	phasePull                 // pulling chunks into a staged file
	phaseCheck                // reading the whole file back
	phaseDone                 // merged into storage; catch-up rounds decide the rest
)

// inMove is a move whose new replica this node is.
type inMove struct {
	key  moveKey
	span storage.Span
	// source is the old replica the snapshot is pulled from: the one the move names, or, in
	// a keyspace that reads with mayflower, the cheapest (moveSource), chosen afresh at each
	// attempt. named is the move's.
	source uint32
	named  uint32
	old    []uint32
	phase  inPhase
	// seq numbers this node's attempts, so a late chunk of an abandoned attempt matches
	// nothing.
	seq         int
	snapID      string
	size        int64
	next        int64
	outstanding map[int64]time.Time
	stored      int64
	asked       time.Time
	progress    time.Time
	covered     map[uint32]bool
	reported    time.Time
	// early: the last catch-up round of each old replica that came before the snapshot was
	// in (at most one per old replica), answered as soon as it is: the old replica backs its
	// rounds off while they go unanswered (up to moveRoundMaxInterval), so without this each
	// move waited up to 2 s more for the next round, which made actions' times vary in steps
	// of that (`meridian bench autoscale --emulated --repeat`).
	early map[uint32]earlyDigest
	// pullBytes are the snapshot bytes received since pullSampleAt; pullRate the measured
	// rate (bytes/s): the transfer this node reports (transfers.go).
	pullBytes    int64
	pullRate     float64
	pullSampleAt time.Time
}

// earlyDigest is a catch-up round that reached the new replica before its snapshot was in.
type earlyDigest struct {
	digest *peerpb.AEDigest
	span   storage.Span
}

func (in *inMove) file() string { return "in-" + in.snapID }

// outMove is a move this node takes part in as an old replica: it catches the new one up.
type outMove struct {
	key  moveKey
	span storage.Span
	add  uint32
	at   hlc.Version // T0, fixed at the first round
	// done: the last round found nothing missing. The new replica keeps that only in
	// memory (inMove.covered), so a done move is still rechecked every moveDoneRecheck
	// until it finishes: a new replica that restarted after its rounds lost what they
	// proved and waited for rounds nobody sent (the simulator's move-progress check).
	done      bool
	lastRound time.Time
	round     uint64
	// answered: the new replica answered round (catchUpKeys); every = the wait before the
	// next round, doubled (up to moveRoundMaxInterval) after each round left unanswered.
	answered bool
	every    time.Duration
}

// srcExport is a snapshot this node exported for a new replica.
type srcExport struct {
	file string
	to   uint32
	last time.Time
	// made: the export's job has made it, of size bytes.
	made bool
	size int64
	// queued are the chunks (by offset) whose job has not sent them yet: a repeated request
	// for one is dropped. Without this, a source whose system traffic is held to a share of
	// the link (BwMan) took every repeat the new replica sent after moveChunkRetry as new
	// work, and the transfer collapsed under its own duplicates.
	queued map[int64]bool
}

// MoveStats counts the move protocol's work on one node (metrics). Safe to read from any
// goroutine.
type MoveStats struct {
	SnapshotsSent, SnapshotsReceived, SnapshotBytesReceived atomic.Int64
	CatchUpRounds, CatchUpRecordsPushed                     atomic.Int64
	Fenced                                                  atomic.Int64
	CaughtUpReports                                         atomic.Int64
}

type moveState struct {
	in        map[moveKey]*inMove
	out       map[moveKey]*outMove
	exports   map[string]*srcExport
	clearing  []storage.Span // ranges whose deletion is in the Ready being built
	started   bool           // the first placement was checked for leftovers
	seq       int
	nextRound uint64
	// roundsAt: when this node started its catch-up rounds of the last moveRoundInterval
	// (at most maxMovesIn: see tickMoves).
	roundsAt []time.Time
	stats    MoveStats
}

// MoveCounters exposes the move protocol's counters.
func (c *Core) MoveCounters() *MoveStats { return &c.mv.stats }

// movesOf reports whether keyspaces of ks's protocol move replicas (config.ProtocolSpec.Moves);
// only those have ranges a node stops holding, so only those are cleaned up here.
func movesOf(ks *placement.Keyspace) bool {
	spec, ok := config.Protocol(ks.Spec.Protocol)
	return ok && spec.Moves
}

// holdsLocally reports whether this node stores p's data: it is a replica, or the new
// replica of p's move, and the range is not being deleted in the Ready being built.
func (c *Core) holdsLocally(p *placement.Partition) bool {
	return p.Holds(c.Cfg.NodeID)
}

// clearingKey reports whether key's range is being deleted in the Ready being built: a write
// taken now would be deleted with it (the deletion runs after the Ready's writes).
func (c *Core) clearingKey(keyspace string, key []byte) bool {
	for _, sp := range c.mv.clearing {
		if sp.Keyspace == keyspace && sp.Contains(key) {
			return true
		}
	}
	return false
}

// admitKey decides whether this node takes a coordinator's read or write of key made under
// move epoch epoch: it must hold the key, and the coordinator's map must not predate the
// last move of the key's partition here (the fence of step 1).
func (c *Core) admitKey(keyspace string, key []byte, epoch uint64) bool {
	p, ok := c.PartitionOfKey(keyspace, key)
	if !ok || c.clearingKey(keyspace, key) {
		return false
	}
	if epoch < p.MoveEpoch {
		c.mv.stats.Fenced.Add(1)
		return false
	}
	return true
}

// epochAdmits is admitKey's epoch rule for a range (scans): every partition of this node's
// map overlapping it.
func (c *Core) epochAdmits(keyspace string, start, end []byte, epoch uint64) bool {
	ks, ok := c.Pmap.Keyspace(keyspace)
	if !ok {
		return false
	}
	for _, p := range ks.Overlapping(start, end) {
		if epoch < p.MoveEpoch {
			c.mv.stats.Fenced.Add(1)
			return false
		}
	}
	for _, sp := range c.mv.clearing {
		if sp.Keyspace == keyspace && overlaps(sp, start, end) {
			return false
		}
	}
	return true
}

func overlaps(sp storage.Span, start, end []byte) bool {
	if sp.End != nil && bytes.Compare(sp.End, start) <= 0 {
		return false
	}
	return len(end) == 0 || bytes.Compare(sp.Start, end) < 0
}

// syncMoves brings the move state in line with a newly installed map: moves this node takes
// part in start, ended ones are dropped, and ranges this node no longer holds are deleted.
func (c *Core) syncMoves(now time.Time, old, m *placement.Map) {
	if c.mv.in == nil {
		c.mv.in, c.mv.out, c.mv.exports = map[moveKey]*inMove{}, map[moveKey]*outMove{}, map[string]*srcExport{}
	}
	live := map[moveKey]bool{}
	for _, name := range slices.Sorted(maps.Keys(m.Keyspaces)) {
		ks := m.Keyspaces[name]
		if !c.Owns(ks) || !movesOf(ks) {
			continue
		}
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			mv := p.Move
			if mv == nil {
				continue
			}
			key := moveKey{name, p.ID, mv.ID}
			switch {
			case mv.Add == c.Cfg.NodeID:
				live[key] = true
				if c.mv.in[key] == nil {
					c.mv.in[key] = &inMove{key: key, span: p.Span(name), source: mv.Source, named: mv.Source, old: slices.Clone(p.Replicas),
						covered: map[uint32]bool{}, outstanding: map[int64]time.Time{}}
				}
			case p.HasReplica(c.Cfg.NodeID):
				live[key] = true
				if c.mv.out[key] == nil {
					c.mv.out[key] = &outMove{key: key, span: p.Span(name), add: mv.Add}
				}
				if mv.Remove == c.Cfg.NodeID && c.Cfg.Mutation == "delete-source-early" && (old == nil || !c.wasMoving(old, name, p.ID, mv.ID)) {
					// Broken on purpose: the leaving replica drops its data as the move
					// starts, while it is still a replica of the old set.
					c.out.Ingests = append(c.out.Ingests, engine.Ingest{Span: p.Span(name)})
				}
			}
		}
	}
	for k, in := range c.mv.in {
		if !live[k] {
			if in.phase == phasePull || in.phase == phaseCheck {
				c.AddJob(removeStagedJob{file: in.file()})
			}
			delete(c.mv.in, k)
		}
	}
	for k := range c.mv.out {
		if !live[k] {
			delete(c.mv.out, k)
		}
	}
	c.clearLeftRanges(old, m)
}

func (c *Core) wasMoving(m *placement.Map, keyspace string, id uint32, moveID uint64) bool {
	ks, ok := m.Keyspace(keyspace)
	if !ok {
		return false
	}
	p, ok := ks.Partition(id)
	return ok && p.Move != nil && p.Move.ID == moveID
}

// clearLeftRanges deletes the data of ranges this node held under old and does not hold
// under m (a move finished or aborted), and, at the first placement, of every range it does
// not hold that has data (left behind by a crash between a change and its deletion).
func (c *Core) clearLeftRanges(old, m *placement.Map) {
	for _, name := range slices.Sorted(maps.Keys(m.Keyspaces)) {
		ks := m.Keyspaces[name]
		if !c.Owns(ks) || !movesOf(ks) {
			continue
		}
		now := c.heldRanges(ks)
		var gone []storage.Span
		if !c.mv.started {
			gone = complement(name, now)
		} else if oks, ok := old.Keyspace(name); ok {
			gone = subtract(c.heldRanges(oks), now)
		}
		for _, sp := range gone {
			if !c.mv.started {
				empty := true
				_ = c.Store.Scan(sp, 1, func(storage.Record) bool { empty = false; return false })
				if empty {
					continue
				}
			}
			c.out.Ingests = append(c.out.Ingests, engine.Ingest{Span: sp})
			c.mv.clearing = append(c.mv.clearing, sp)
		}
	}
	c.mv.started = true
}

// heldRanges are the key ranges of ks this node holds, merged, in key order.
func (c *Core) heldRanges(ks *placement.Keyspace) []storage.Span {
	var out []storage.Span
	for i := range ks.Partitions {
		p := &ks.Partitions[i]
		if !c.holdsLocally(p) {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End != nil && bytes.Equal(out[n-1].End, p.Start) {
			out[n-1].End = p.End
			continue
		}
		out = append(out, p.Span(ks.Spec.Name))
	}
	return out
}

// complement is the key space of keyspace minus the sorted, disjoint ranges held.
func complement(keyspace string, held []storage.Span) []storage.Span {
	return subtract([]storage.Span{storage.KeyspaceSpan(keyspace)}, held)
}

// subtract returns the parts of the sorted, disjoint ranges a not covered by the sorted,
// disjoint ranges b (same keyspace).
func subtract(a, b []storage.Span) []storage.Span {
	var out []storage.Span
	for _, x := range a {
		cur := x.Start
		done := false
		for _, y := range b {
			if done {
				break
			}
			// y entirely before cur, or entirely after x: skip.
			if y.End != nil && bytes.Compare(y.End, cur) <= 0 {
				continue
			}
			if x.End != nil && bytes.Compare(y.Start, x.End) >= 0 {
				break
			}
			if bytes.Compare(y.Start, cur) > 0 {
				out = append(out, storage.Span{Keyspace: x.Keyspace, Start: cur, End: y.Start})
			}
			if y.End == nil {
				done = true
				break
			}
			cur = y.End
		}
		if !done && (x.End == nil || bytes.Compare(cur, x.End) < 0) {
			out = append(out, storage.Span{Keyspace: x.Keyspace, Start: cur, End: x.End})
		}
	}
	return out
}

// tickMoves drives this node's part of the moves in progress.
func (c *Core) tickMoves(now time.Time) {
	if len(c.mv.in) == 0 && len(c.mv.out) == 0 && len(c.mv.exports) == 0 {
		return
	}
	pulling := 0
	for _, in := range c.mv.in {
		if in.phase == phasePull || in.phase == phaseCheck {
			pulling++
		}
	}
	for _, k := range sortedMoveKeys(c.mv.in) {
		in := c.mv.in[k]
		switch in.phase {
		case phaseAsk:
			if pulling >= maxMovesIn || now.Sub(in.asked) < moveAskInterval {
				continue
			}
			pulling++ // an asked snapshot is pulled next: it counts against the bound
			if in.snapID == "" {
				// A fresh attempt: the source may be chosen by cost (transfers.go).
				in.source = c.moveSource(now, in)
				c.mv.seq++
				in.seq = c.mv.seq
				in.snapID = fmt.Sprintf("mv-%d-%d-%d-%d", in.key.id, in.key.partition, c.Cfg.NodeID, in.seq)
			}
			in.asked = now
			c.Send(in.source, &peerpb.Envelope{Msg: &peerpb.Envelope_MoveSnapshotRequest{MoveSnapshotRequest: &peerpb.MoveSnapshotRequest{
				Keyspace: in.span.Keyspace, Start: in.span.Start, End: in.span.End, MoveId: in.key.id, SnapshotId: in.snapID, Offset: -1}}})
		case phasePull:
			if now.Sub(in.progress) > moveIdle {
				c.restartPull(in)
				continue
			}
			for _, off := range slices.Sorted(maps.Keys(in.outstanding)) {
				if now.Sub(in.outstanding[off]) > moveChunkRetry {
					c.requestChunk(in, off)
					in.outstanding[off] = now
				}
			}
			if c.Cfg.Mutation != "pull-not-resumed" { // broken on purpose: a held-back pull waits for moveIdle
				c.pullChunks(now, in) // chunks the inbound bucket held back
			}

		case phaseDone:
			// Rounds that came before the snapshot was in are answered from the tick after
			// its merge (as every round is answered from the next Ready on).
			if len(in.early) > 0 { // the tick's hot path: nothing to sort on most ticks
				for _, from := range slices.Sorted(maps.Keys(in.early)) {
					e := in.early[from]
					c.catchUpDigest(from, e.digest, e.span)
				}
				in.early = nil
			}
			if c.caughtUp(in) && now.Sub(in.reported) >= moveReportInterval {
				in.reported = now
				c.mv.stats.CaughtUpReports.Add(1)
				c.out.Reports = append(c.out.Reports, engine.Report{Kind: engine.ReportMoveCaughtUp,
					Keyspace: in.key.keyspace, Partition: in.key.partition, MoveID: in.key.id})
			}
		}
	}
	// Catch-up rounds: each scans the partition (a digest at T0), so this node starts at most
	// maxMovesIn of them per moveRoundInterval, the moves that waited longest first. Without
	// the bound, a node that is the old replica of many moves at once (a one-phase or
	// split-move bootstrap) queued a full scan per move every interval, more than it could run,
	// and its snapshot exports starved behind them: no move finished (bench elastic).
	recent := c.mv.roundsAt[:0]
	for _, at := range c.mv.roundsAt {
		if now.Sub(at) < moveRoundInterval {
			recent = append(recent, at)
		}
	}
	c.mv.roundsAt = recent
	outKeys := sortedMoveKeys(c.mv.out)
	slices.SortStableFunc(outKeys, func(a, b moveKey) int { return c.mv.out[a].lastRound.Compare(c.mv.out[b].lastRound) })
	for _, k := range outKeys {
		o := c.mv.out[k]
		if o.every == 0 {
			o.every = moveRoundInterval
		}
		if !c.Alive(o.add) || now.Sub(o.lastRound) < o.every || (o.done && now.Sub(o.lastRound) < moveDoneRecheck) {
			continue
		}
		if len(c.mv.roundsAt) >= maxMovesIn {
			break
		}
		c.mv.roundsAt = append(c.mv.roundsAt, now)
		if o.at.IsZero() {
			// T0: this node's hybrid clock, which has observed every version it applied, so
			// every write it took before it applied the move is at or below it (writes of
			// coordinators that had not heard of the move are refused since: the fence).
			o.at = c.Clock.Now(now)
			o.at.Logical, o.at.NodeID = math.MaxUint32, math.MaxUint32
		}
		switch {
		case o.round != 0 && !o.answered:
			o.every = min(2*o.every, moveRoundMaxInterval)
		default:
			o.every = moveRoundInterval
		}
		o.answered, o.done = false, false
		o.lastRound = now
		c.mv.nextRound++
		o.round = c.mv.nextRound
		c.mv.stats.CatchUpRounds.Add(1)
		c.AddJob(catchUpJob{Job{Kind: JobSendDigest, Peer: o.add, RoundID: o.round, Keyspace: k.keyspace, Partition: k.partition,
			Span: o.span, MoveID: k.id, At: o.at}})
	}
	for _, id := range slices.Sorted(maps.Keys(c.mv.exports)) {
		if now.Sub(c.mv.exports[id].last) > moveIdle {
			c.AddJob(removeStagedJob{file: c.mv.exports[id].file})
			delete(c.mv.exports, id)
		}
	}
}

func sortedMoveKeys[V any](m map[moveKey]V) []moveKey {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b moveKey) int {
		if a.keyspace != b.keyspace {
			return bytes.Compare([]byte(a.keyspace), []byte(b.keyspace))
		}
		if a.partition != b.partition {
			return int(a.partition) - int(b.partition)
		}
		return int(a.id) - int(b.id)
	})
	return keys
}

// maxFuture is how far ahead of this node's clock an accepted version may be.
func (c *Core) maxFuture() time.Duration {
	if c.Cfg.MaxFutureVersion > 0 {
		return c.Cfg.MaxFutureVersion
	}
	return c.Cfg.MaxClockSkew
}

// caughtUp reports whether the new replica holds what step 2 asks: the snapshot is merged,
// and catch-up rounds covered a majority of the old set and every old replica that is alive
// (so that a write acknowledged at ONE, or LOCAL_ONE, by a single replica is not left
// behind unless that replica is down; docs/elasticity.md says what that costs).
func (c *Core) caughtUp(in *inMove) bool {
	if in.phase != phaseDone {
		return false
	}
	if c.Cfg.Mutation == "catch-up-snapshot-only" {
		return true // broken on purpose: the snapshot alone is taken for a caught-up replica
	}
	n := 0
	for _, r := range in.old {
		if in.covered[r] {
			n++
		} else if c.Alive(r) {
			return false
		}
	}
	return n >= len(in.old)/2+1
}

func (c *Core) restartPull(in *inMove) {
	if in.phase == phasePull || in.phase == phaseCheck {
		c.AddJob(removeStagedJob{file: in.file()})
	}
	in.phase, in.snapID, in.size, in.next, in.stored = phaseAsk, "", 0, 0, 0
	clear(in.outstanding)
}

func (c *Core) requestChunk(in *inMove, offset int64) {
	n := min(c.Cfg.ChunkBytes(), in.size-offset)
	c.Send(in.source, &peerpb.Envelope{Msg: &peerpb.Envelope_MoveSnapshotRequest{MoveSnapshotRequest: &peerpb.MoveSnapshotRequest{
		Keyspace: in.span.Keyspace, Start: in.span.Start, End: in.span.End, MoveId: in.key.id, SnapshotId: in.snapID, Offset: offset, Length: int32(n)}}})
}

func (c *Core) pullChunks(now time.Time, in *inMove) {
	for len(in.outstanding) < moveWindow && in.next < in.size {
		n := min(c.Cfg.ChunkBytes(), in.size-in.next)
		if !c.Cfg.AllowPull(now, n) {
			return // BwMan's inbound bucket is empty: the next tick asks again
		}
		c.requestChunk(in, in.next)
		in.outstanding[in.next] = now
		in.next += n
	}
}

// findIn returns the inbound move a message names.
func (c *Core) findIn(keyspace string, id uint64, snapID string) *inMove {
	for k, in := range c.mv.in {
		if k.keyspace == keyspace && k.id == id && (snapID == "" || in.snapID == snapID) {
			return in
		}
	}
	return nil
}

// movingTo returns this node's partition of the range [start, end) of keyspace whose move id
// has node as its new replica, if this node holds it.
func (c *Core) movingTo(keyspace string, start, end []byte, id uint64, node uint32) (*placement.Partition, bool) {
	ks, ok := c.Pmap.Keyspace(keyspace)
	if !ok {
		return nil, false
	}
	p := ks.Lookup(start)
	sameEnd := bytes.Equal(p.End, end) || (p.End == nil && len(end) == 0)
	if p.Move == nil || p.Move.ID != id || p.Move.Add != node || !p.HasReplica(c.Cfg.NodeID) || !bytes.Equal(p.Start, start) || !sameEnd {
		return nil, false
	}
	return p, true
}

// handleMoveSnapshotRequest serves a new replica's snapshot pull (this node is the source).
func (c *Core) handleMoveSnapshotRequest(now time.Time, from uint32, m *peerpb.MoveSnapshotRequest) {
	reply := func(ch *peerpb.MoveSnapshotChunk) {
		ch.Keyspace, ch.Start, ch.End, ch.MoveId, ch.SnapshotId = m.Keyspace, m.Start, m.End, m.MoveId, m.SnapshotId
		c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_MoveSnapshotChunk{MoveSnapshotChunk: ch}})
	}
	p, ok := c.movingTo(m.Keyspace, m.Start, m.End, m.MoveId, from)
	if !ok {
		// This node has not applied the move yet (or it is over): the new replica asks again.
		if m.Offset >= 0 {
			reply(&peerpb.MoveSnapshotChunk{Offset: m.Offset, Error: "no such move here"})
		}
		return
	}
	file := "out-" + m.SnapshotId
	if m.Offset < 0 {
		if ex := c.mv.exports[m.SnapshotId]; ex != nil && ex.to == from {
			// A repeated ask (the answer was lost, or is still being made): answer with the
			// export made, never export again into the same file — that changed the file
			// under the chunks the new replica had read, and its pull ended short of the size
			// it was told, stalled (the simulator's move-progress check, quorum seed 164).
			ex.last = now
			if ex.made {
				reply(&peerpb.MoveSnapshotChunk{Offset: -1, Size: ex.size})
			}
			return
		}
		c.mv.exports[m.SnapshotId] = &srcExport{file: file, to: from, last: now}
		c.mv.stats.SnapshotsSent.Add(1)
		c.AddJob(moveExportJob{to: from, span: p.Span(m.Keyspace), file: file, req: m})
		return
	}
	ex := c.mv.exports[m.SnapshotId]
	if ex == nil || ex.to != from {
		reply(&peerpb.MoveSnapshotChunk{Offset: m.Offset, Error: "no such snapshot (ended or restarted)"})
		return
	}
	ex.last = now
	if ex.queued[m.Offset] {
		return // on its way
	}
	if ex.queued == nil {
		ex.queued = map[int64]bool{}
	}
	ex.queued[m.Offset] = true
	c.AddJob(moveChunkJob{to: from, file: file, req: m})
}

// handleMoveSnapshotChunk takes a prepared snapshot's size or a chunk (this node is the new
// replica).
func (c *Core) handleMoveSnapshotChunk(now time.Time, from uint32, m *peerpb.MoveSnapshotChunk) {
	in := c.findIn(m.Keyspace, m.MoveId, m.SnapshotId)
	if in == nil || from != in.source {
		return
	}
	if m.Error != "" {
		if in.phase == phasePull {
			c.restartPull(in)
		}
		return
	}
	if m.Offset < 0 {
		if in.phase != phaseAsk || m.Size <= 0 {
			return
		}
		in.phase, in.size, in.next, in.stored, in.progress = phasePull, m.Size, 0, 0, now
		c.pullChunks(now, in)
		return
	}
	if in.phase != phasePull {
		return
	}
	if _, ok := in.outstanding[m.Offset]; !ok || m.Offset+int64(len(m.Data)) > in.size {
		return
	}
	in.progress = now
	in.pullBytes += int64(len(m.Data))
	c.AddJob(moveWriteJob{self: c.Cfg.NodeID, in: noteOf(in), file: in.file(), offset: m.Offset, data: m.Data})
}

func noteOf(in *inMove) *peerpb.MoveNote {
	return &peerpb.MoveNote{Keyspace: in.span.Keyspace, Start: in.span.Start, End: in.span.End, MoveId: in.key.id, SnapshotId: in.snapID}
}

// handleMoveNote takes what this node's own jobs found.
func (c *Core) handleMoveNote(now time.Time, m *peerpb.MoveNote) {
	if m.Sent {
		if ex := c.mv.exports[m.SnapshotId]; ex != nil {
			delete(ex.queued, m.Offset)
		}
		return
	}
	if m.MoveId == 0 && m.Offset < 0 {
		// The source's export job is done: a repeated ask is answered with its size, or, if it
		// failed, exports again.
		if ex := c.mv.exports[m.SnapshotId]; ex != nil {
			if m.Error != "" {
				c.AddJob(removeStagedJob{file: ex.file})
				delete(c.mv.exports, m.SnapshotId)
			} else {
				ex.size, ex.made = m.ExportedSize, true
			}
		}
		return
	}
	if m.CoveredBy != 0 {
		if in := c.findIn(m.Keyspace, m.MoveId, ""); in != nil && in.phase == phaseDone {
			in.covered[m.CoveredBy] = true
		}
		return
	}
	in := c.findIn(m.Keyspace, m.MoveId, m.SnapshotId)
	if in == nil {
		return
	}
	if m.Error != "" {
		c.restartPull(in)
		return
	}
	switch {
	case !m.Checked && in.phase == phasePull:
		if _, ok := in.outstanding[m.Offset]; !ok {
			return
		}
		delete(in.outstanding, m.Offset)
		in.stored += int64(m.Length)
		in.progress = now
		if in.next >= in.size && len(in.outstanding) == 0 && in.stored != in.size {
			// Every chunk is in and they do not add up to the size the source announced:
			// the file changed under the pull. Start over rather than wait for moveIdle.
			c.restartPull(in)
			return
		}
		if in.stored >= in.size {
			in.phase = phaseCheck
			c.AddJob(moveCheckJob{self: c.Cfg.NodeID, note: noteOf(in), span: in.span, file: in.file()})
			return
		}
		c.pullChunks(now, in)
	case m.Checked && in.phase == phaseCheck:
		// The file is whole and holds only the range: merge it into storage after this
		// Ready's writes. Catch-up rounds are answered from the next Ready on.
		c.out.Ingests = append(c.out.Ingests, engine.Ingest{Span: in.span, File: in.file(), Merge: true})
		in.phase = phaseDone
		c.mv.stats.SnapshotsReceived.Add(1)
		c.mv.stats.SnapshotBytesReceived.Add(in.size)
	}
}

// catchUpDigest answers an old replica's catch-up round (this node is the new replica):
// only once the snapshot is in storage, else the round would push the whole range.
func (c *Core) catchUpDigest(from uint32, d *peerpb.AEDigest, span storage.Span) {
	in := c.findIn(d.Keyspace, d.MoveId, "")
	if in == nil || !slices.Contains(in.old, from) || len(d.BucketHashes) != aeBuckets {
		return
	}
	if in.phase != phaseDone {
		if in.early == nil {
			in.early = map[uint32]earlyDigest{}
		}
		in.early[from] = earlyDigest{digest: d, span: span}
		return
	}
	c.AddJob(catchUpJob{Job{Kind: JobCompareDigest, Peer: from, RoundID: d.RoundId, Keyspace: d.Keyspace, Partition: d.Partition,
		Span: span, Hashes: d.BucketHashes, MoveID: d.MoveId, At: versionOf(d.At)}})
}

// catchUpKeys takes the new replica's answer to a catch-up round (this node is an old
// replica): done when the digests matched, else push what the new replica lacks.
func (c *Core) catchUpKeys(from uint32, k *peerpb.AEKeys, span storage.Span) {
	var o *outMove
	for key, om := range c.mv.out {
		if key.keyspace == k.Keyspace && key.id == k.MoveId && om.add == from {
			o = om
		}
	}
	if o == nil || o.done || k.RoundId != o.round {
		return
	}
	o.answered, o.every = true, moveRoundInterval
	if k.Equal {
		o.done = true
		return
	}
	c.AddJob(catchUpJob{Job{Kind: JobReconcile, Peer: from, RoundID: k.RoundId, Keyspace: k.Keyspace, Partition: k.Partition, Span: span,
		Buckets: k.Buckets, Entries: k.Entries, Truncated: k.Truncated, MoveID: k.MoveId, At: versionOf(k.At)}})
}

// catchUpPush applies an old replica's catch-up push; a push that says the round found
// nothing missing marks that replica as covered.
func (c *Core) catchUpPush(now time.Time, from uint32, m *peerpb.AEPush) {
	for _, pr := range m.Records {
		c.applyRepair(now, pr)
	}
	c.mv.stats.CatchUpRecordsPushed.Add(int64(len(m.Records)))
	if m.Covered {
		for _, in := range c.mv.in {
			if in.key.id == m.MoveId && in.phase == phaseDone && slices.Contains(in.old, from) {
				in.covered[from] = true
			}
		}
	}
}

func versionOf(v *peerpb.Version) hlc.Version {
	if v == nil {
		return hlc.Version{}
	}
	return hlc.Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeID: v.NodeId}
}

// catchUpJob is a catch-up round's step: run as soon as possible (a move waits for it), not
// paced like background repair.
type catchUpJob struct{ Job }

func (catchUpJob) Unpaced() {}

// moveExportJob exports a range for a new replica and answers with the file's size.
type moveExportJob struct {
	to   uint32
	span storage.Span
	file string
	req  *peerpb.MoveSnapshotRequest
}

func (moveExportJob) Unpaced() {}

func (j moveExportJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	ch := &peerpb.MoveSnapshotChunk{Keyspace: j.req.Keyspace, Start: j.req.Start, End: j.req.End, MoveId: j.req.MoveId, SnapshotId: j.req.SnapshotId, Offset: -1}
	stats, _, err := store.ExportSpanState(j.span, j.file, nil)
	if err != nil {
		ch.Error = err.Error()
		return []*peerpb.Envelope{{From: self, To: j.to, Msg: &peerpb.Envelope_MoveSnapshotChunk{MoveSnapshotChunk: ch}},
			{From: self, To: self, Msg: &peerpb.Envelope_MoveNote{MoveNote: &peerpb.MoveNote{SnapshotId: j.req.SnapshotId, Offset: -1, Error: ch.Error}}}}, nil
	}
	ch.Size = stats.Bytes
	return []*peerpb.Envelope{{From: self, To: j.to, Msg: &peerpb.Envelope_MoveSnapshotChunk{MoveSnapshotChunk: ch}},
		// The source's own engine learns the size, for a repeated ask (handleMoveSnapshotRequest).
		{From: self, To: self, Msg: &peerpb.Envelope_MoveNote{MoveNote: &peerpb.MoveNote{SnapshotId: j.req.SnapshotId, Offset: -1, ExportedSize: stats.Bytes}}}}, nil
}

// moveChunkJob reads one chunk of an export and sends it.
type moveChunkJob struct {
	to   uint32
	file string
	req  *peerpb.MoveSnapshotRequest
}

func (moveChunkJob) Unpaced() {}

func (j moveChunkJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	ch := &peerpb.MoveSnapshotChunk{Keyspace: j.req.Keyspace, Start: j.req.Start, End: j.req.End, MoveId: j.req.MoveId, SnapshotId: j.req.SnapshotId, Offset: j.req.Offset}
	if b, err := store.ReadStaged(j.file, j.req.Offset, int(j.req.Length)); err != nil {
		ch.Error = err.Error()
	} else {
		ch.Data = b
	}
	// The chunk, then a note to this node's engine that it left (the runtime sends a job's
	// messages in order).
	note := &peerpb.MoveNote{Keyspace: j.req.Keyspace, Start: j.req.Start, End: j.req.End, MoveId: j.req.MoveId, SnapshotId: j.req.SnapshotId, Offset: j.req.Offset, Sent: true}
	return []*peerpb.Envelope{{From: self, To: j.to, Msg: &peerpb.Envelope_MoveSnapshotChunk{MoveSnapshotChunk: ch}},
		{From: self, To: self, Msg: &peerpb.Envelope_MoveNote{MoveNote: note}}}, nil
}

// moveWriteJob writes a received chunk into the staged file.
type moveWriteJob struct {
	self   uint32
	in     *peerpb.MoveNote
	file   string
	offset int64
	data   []byte
}

func (moveWriteJob) Unpaced() {}

func (j moveWriteJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	n := &peerpb.MoveNote{Keyspace: j.in.Keyspace, Start: j.in.Start, End: j.in.End, MoveId: j.in.MoveId, SnapshotId: j.in.SnapshotId,
		Offset: j.offset, Length: int32(len(j.data))}
	if err := store.WriteStaged(j.file, j.offset, j.data); err != nil {
		n.Error = err.Error()
	}
	return []*peerpb.Envelope{{From: self, To: self, Msg: &peerpb.Envelope_MoveNote{MoveNote: n}}}, nil
}

// moveCheckJob reads the whole received file back before it is merged.
type moveCheckJob struct {
	self uint32
	note *peerpb.MoveNote
	span storage.Span
	file string
}

func (moveCheckJob) Unpaced() {}

func (j moveCheckJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	n := &peerpb.MoveNote{Keyspace: j.note.Keyspace, Start: j.note.Start, End: j.note.End, MoveId: j.note.MoveId, SnapshotId: j.note.SnapshotId, Checked: true}
	if _, err := store.CheckStaged(j.file, j.span, nil); err != nil {
		n.Error = err.Error()
	}
	return []*peerpb.Envelope{{From: self, To: self, Msg: &peerpb.Envelope_MoveNote{MoveNote: n}}}, nil
}

// removeStagedJob removes a staged file.
type removeStagedJob struct{ file string }

func (removeStagedJob) Unpaced() {}

func (j removeStagedJob) Run(store engine.Store, _ uint32) ([]*peerpb.Envelope, error) {
	return nil, store.RemoveStaged(j.file)
}

// MoveMutations are the move protocol's deliberately broken variants. The protocols built
// on this coordinator share the code they break; the quorum protocol lists them, since its
// reads show a missing write most directly (MeteorShower's status checks and write
// notifications mask some of them, which proves nothing more about the shared code).
var MoveMutations = map[string]string{
	"read-new-before-catch-up": "while a replica moves, reads and writes count only the new set, so the new replica serves before it has caught up",
	"move-writes-old-only":     "while a replica moves, writes go to the old set only and reads and writes reach their level there (the new replica gets writes only through its catch-up)",
	"delete-source-early":      "the leaving replica deletes its data when the move starts, while it is still a replica of the set that serves",
	"catch-up-snapshot-only":   "the new replica reports it has caught up once the snapshot is in, without the old replicas' catch-up rounds (writes the source missed stay missing)",
	"pull-not-resumed":         "the tick does not resume a snapshot pull that BwMan's inbound bucket held back, so a pull with no chunk in flight waits for the idle restart (30 s): the move stalls",
}

// MoveMutationHints run the move mutations with frequent moves and spare nodes to move to.
var MoveMutationHints = map[string]engine.SimHints{
	"read-new-before-catch-up": {NodesPerRegion: 2, MoveEvery: 200 * time.Millisecond},
	// The new replica misses only the writes between its catch-up and the move's end:
	// frequent moves, partitions one after another, and linearizability (the stale read is
	// usually another client's).
	"move-writes-old-only": {NodesPerRegion: 2, MoveEvery: 100 * time.Millisecond, Faults: []string{"partition", "loss"},
		PartitionEvery: 3 * time.Second, Linearizability: true},
	"delete-source-early": {NodesPerRegion: 2, MoveEvery: 200 * time.Millisecond},
	// The source must have missed writes that the others acknowledged (a lost message) and
	// serve its snapshot before anti-entropy or read repair mends it: lost messages, frequent
	// moves. The stale read that follows is usually another client's, so linearizability
	// (which quorum reads with blocking read repair keep when clocks agree) is what shows it.
	// The move must also finish before the old replicas' first round pushes what the snapshot
	// lacks: since a round that came before the snapshot is answered as soon as it is in,
	// that takes messages held back (a fifth of them, by the delay fault); with loss alone the
	// mutation went uncaught in 200 seeds, and is caught in a dozen with the delays.
	"catch-up-snapshot-only": {NodesPerRegion: 2, MoveEvery: 200 * time.Millisecond, Faults: []string{"loss", "delay"}, DelaySpikeProb: 0.2,
		Linearizability: true},
	// Only even seeds pace pulls (the simulator's BwMan bucket), and the bucket holds a pull
	// back only when several pulls into one node overlap: frequent moves, no faults (a
	// fault's abort would end the stalled move before the quiet period).
	"pull-not-resumed": {NodesPerRegion: 2, MoveEvery: 50 * time.Millisecond, Faults: []string{}},
}

// WithMoveMutations returns the union of a protocol's own mutations (or hints) and the
// move protocol's.
func WithMoveMutations[V any](own, moves map[string]V) map[string]V {
	out := maps.Clone(own)
	if out == nil {
		out = map[string]V{}
	}
	maps.Copy(out, moves)
	return out
}
