package sdur

import (
	"fmt"
	"time"
)

// pending is a transaction in the pending list PL (Algorithm 2, line 3).
type pending struct {
	part   *Part
	global bool
	// reads and writes are the key sets certified (writes ⊆ reads).
	reads  map[string]struct{}
	writes map[string]struct{}
	// rt is the reordering threshold position (line 17): a delivered-entry count or a tick
	// count, per unit.
	rt   uint64
	unit ThresholdUnit
	// votes (globals) per partition: the first vote of each counts.
	votes map[uint32]Vote
	// reordered: a local inserted before at least one global.
	reordered bool
	// headSince is when a tick first saw it pending (recovery timers; not part of any
	// decision).
	headSince   time.Time
	lastAsk     time.Time
	lastRecover time.Time
}

// keyState is what certification needs about one key: the completion indexes (snapshot
// counter values) of the last completed transaction that wrote it — committed only, and of
// either outcome — and that read it, and how many pending transactions write and read it.
type keyState struct {
	lastCommittedWrite uint64
	lastCommittedRead  uint64 // (the paper-certification mutation)
	lastWrite          uint64 // committed or aborted
	lastRead           uint64 // committed or aborted
	pendingWriters     int32
	pendingReaders     int32
}

// Replica is one replica of a partition (Algorithm 2, server s in partition p), corrected as
// the package documentation explains.
type Replica struct {
	partition uint32
	opts      Options
	threshold Threshold

	// dc counts delivered entries (DC, line 5); tc counts delivered ticks.
	dc, tc uint64
	// sc is the snapshot counter (SC, line 4): completions of pending transactions, committed
	// or aborted, in the deterministic completion order. A commit's writes have version sc.
	sc uint64
	// floor: snapshots below it abort (from the log's ticks).
	floor uint64

	pl   []*pending
	keys map[string]*keyState
	// touched is a FIFO of (completion index, key) for pruning key state below the floor.
	touched []touch

	// waiting are delivered entries not yet processed: a global whose snapshot is ahead of sc
	// holds itself and everything after it (bounded by MaxPending).
	waiting []Entry

	// seen remembers delivered transactions and honoured abort requests (duplicates, IV-F),
	// with this partition's vote for globals; seenOrder bounds it (FIFO, Retention).
	seen      map[TxnID]seenTxn
	seenOrder []TxnID
	// early are votes for globals not yet delivered here.
	early      map[TxnID][]Vote
	earlyOrder []TxnID

	out Ready
}

type touch struct {
	Index uint64
	Key   string
}

type seenTxn struct {
	vote      Vote
	global    bool
	abortedBy bool // an abort request was delivered first
}

// NewReplica returns the replica of partition at its initial state (an empty log).
func NewReplica(partition uint32, opts Options) (*Replica, error) {
	opts = opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Replica{
		partition: partition,
		opts:      opts,
		threshold: opts.Threshold,
		keys:      map[string]*keyState{},
		seen:      map[TxnID]seenTxn{},
		early:     map[TxnID][]Vote{},
	}, nil
}

// Partition returns the replica's partition.
func (r *Replica) Partition() uint32 { return r.partition }

// SnapshotCounter returns SC: reads at the current snapshot are served at this version.
func (r *Replica) SnapshotCounter() uint64 { return r.sc }

// Delivered returns DC.
func (r *Replica) Delivered() uint64 { return r.dc }

// Floor returns the snapshot floor.
func (r *Replica) Floor() uint64 { return r.floor }

// Threshold returns the reordering threshold in force.
func (r *Replica) Threshold() Threshold { return r.threshold }

// PendingCount returns the size of the pending list and of the waiting queue.
func (r *Replica) PendingCount() (pending, waiting int) { return len(r.pl), len(r.waiting) }

// NeedsTicks reports whether a global waits for its reordering threshold: the partition's
// leader should append tick entries. Thresholds in ticks need them to advance at all; those in
// entries need them when no transaction comes (the paper's algorithm waits for traffic: "provided
// that transactions are constantly delivered", IV-F).
func (r *Replica) NeedsTicks() bool {
	for _, p := range r.pl {
		if p.global && !r.thresholdReached(p) {
			return true
		}
	}
	return false
}

// Deliver hands the replica the next entry of its partition's log. Entries must be delivered
// exactly once each, in log order (a restarted replica delivers its log again from the start
// or from a snapshot of this state).
func (r *Replica) Deliver(now time.Time, e Entry) {
	if len(r.waiting) > 0 {
		r.waiting = append(r.waiting, e)
		return
	}
	r.process(now, e)
	r.advance(now)
}

// process handles one entry (lines 15-22), or queues it behind a global waiting for the
// replica to complete up to its snapshot.
func (r *Replica) process(now time.Time, e Entry) {
	if e.Kind == EntryTxn && e.Txn != nil && e.Txn.Global() && e.Txn.Snapshot > r.sc && r.opts.Mutation != "paper-certification" {
		// Its certification needs to know which transactions its snapshot holds: every one
		// up to Snapshot has completed at the replica that served its reads, and will here
		// once the votes of those before it arrive (their thresholds are behind this entry).
		r.waiting = append(r.waiting, e)
		return
	}
	r.dc++
	switch e.Kind {
	case EntryTick:
		r.tc++
		if e.Floor > r.floor {
			r.floor = e.Floor
			r.prune()
		}
	case EntryConfig:
		if e.Threshold != nil && (e.Threshold.Unit == Entries || e.Threshold.Unit == Ticks) {
			r.threshold = *e.Threshold
		}
	case EntryAbortRequest:
		if e.Abort != nil {
			r.abortRequested(e.Abort)
		}
	case EntryTxn:
		if e.Txn != nil {
			r.deliverTxn(now, e.Txn)
		}
	}
}

// abortRequested: the first of a transaction and its abort request decides (IV-F).
func (r *Replica) abortRequested(a *AbortRequest) {
	if s, ok := r.seen[a.Txn]; ok {
		if s.global {
			// Delivered already: its vote stands; send it again (it may be what was lost).
			r.out.Votes = append(r.out.Votes, s.vote)
		}
		return
	}
	v := Vote{Txn: a.Txn, Partition: r.partition, Commit: false, Partitions: a.Partitions, Reason: string(ReasonRecovered)}
	r.remember(a.Txn, seenTxn{vote: v, global: true, abortedBy: true})
	r.out.Votes = append(r.out.Votes, v)
}

// deliverTxn certifies a delivered transaction (lines 15-22 with reorder, lines 48-64).
func (r *Replica) deliverTxn(now time.Time, t *Part) {
	if s, ok := r.seen[t.ID]; ok {
		if s.abortedBy {
			// The abort request came first: the transaction aborts here, as the vote said.
			r.out.Outcomes = append(r.out.Outcomes, Outcome{Txn: t.ID, Partition: r.partition, Partitions: t.Partitions, Submitter: t.Submitter, Global: t.Global(), Reason: ReasonRecovered})
		}
		return // a duplicate (a submitter's retry): decided at its first delivery
	}
	global := t.Global()
	abort := func(reason Reason, key string) {
		v := Vote{Txn: t.ID, Partition: r.partition, Commit: false, Partitions: t.Partitions, Reason: string(reason), Key: key}
		r.remember(t.ID, seenTxn{vote: v, global: global})
		r.out.Outcomes = append(r.out.Outcomes, Outcome{Txn: t.ID, Partition: r.partition, Partitions: t.Partitions, Submitter: t.Submitter, Global: global, Reason: reason, Key: key})
		if global {
			r.out.Votes = append(r.out.Votes, v) // line 22
		}
		delete(r.early, t.ID)
	}
	if err := t.Validate(r.partition, 0); err != nil {
		abort(ReasonInvalid, "")
		return
	}
	if t.Snapshot < r.floor {
		abort(ReasonSnapshotTooOld, "")
		return
	}
	if len(r.pl) >= r.opts.MaxPending {
		abort(ReasonOverloaded, "")
		return
	}
	p := &pending{part: t, global: global, reads: make(map[string]struct{}, len(t.Reads)+len(t.Writes)), writes: make(map[string]struct{}, len(t.Writes))}
	for _, k := range t.Reads {
		p.reads[k] = struct{}{}
	}
	for _, w := range t.Writes {
		p.writes[w.Key] = struct{}{}
		p.reads[w.Key] = struct{}{} // writeset ⊆ readset: a blind write is an implicit read
	}
	if r.opts.Mutation == "paper-certification" {
		r.paperCertify(t, p, global, abort)
		return
	}
	if global {
		// Lines 49-52, deterministic: every transaction delivered before t and not in its
		// snapshot — pending, or completed after the snapshot with either outcome — must
		// neither write what t reads nor (both directions, line 47) read what t writes.
		if key, reason, bad := r.globalConflict(p); bad {
			abort(reason, key)
			return
		}
		r.admitGlobal(t, p)
		return
	}
	r.remember(t.ID, seenTxn{global: false})
	// Lines 55-63: the leftmost position i such that every pending transaction from i on is a
	// global still within its threshold that t does not invalidate (lines 57-60). Those
	// globals cannot have completed at any replica (completion needs the threshold passed),
	// so the candidates are the same everywhere. Line 56 (t's reads not stale with respect to
	// what stays ahead of it) is checked when t reaches the head (complete), where it is exact.
	i := len(r.pl)
	for j := len(r.pl) - 1; j >= 0; j-- {
		q := r.pl[j]
		if !q.global || !r.leapable(q) {
			break
		}
		if r.opts.Mutation != "leap-ignores-conflicts" && (intersects(p.writes, q.reads) || intersects(p.reads, q.writes)) {
			break
		}
		i = j
	}
	p.reordered = i < len(r.pl)
	r.insert(i, p)
}

// admitGlobal appends a certified global to the pending list with its threshold (line 17),
// takes the votes that came before it, and votes commit (lines 22, 53).
func (r *Replica) admitGlobal(t *Part, p *pending) {
	p.unit = r.threshold.Unit
	p.rt = r.position() + r.threshold.K
	p.votes = map[uint32]Vote{}
	v := Vote{Txn: t.ID, Partition: r.partition, Commit: true, Partitions: t.Partitions}
	p.votes[r.partition] = v
	for _, ev := range r.early[t.ID] {
		if _, ok := p.votes[ev.Partition]; !ok && ev.Partition != r.partition {
			p.votes[ev.Partition] = ev
		}
	}
	delete(r.early, t.ID)
	r.remember(t.ID, seenTxn{vote: v, global: true})
	r.insert(len(r.pl), p)
	r.out.Votes = append(r.out.Votes, v)
}

// position returns the counter a threshold of the current unit counts.
func (r *Replica) position() uint64 {
	if r.threshold.Unit == Ticks {
		return r.tc
	}
	return r.dc
}

// leapable reports whether a local delivered now may be placed before global q (line 58,
// corrected: while DC ≤ q.rt for entries — the k-th entry after q may still leap it; for
// ticks, while TC < q.rt, because a tick is not a transaction: at TC = rt a replica may
// already have completed q, and a local delivered after that tick must find the same answer
// everywhere).
func (r *Replica) leapable(q *pending) bool {
	if q.unit == Ticks {
		return r.tc < q.rt
	}
	return r.dc <= q.rt
}

// thresholdReached reports whether global q may complete (line 29, corrected: DC ≥ rt).
func (r *Replica) thresholdReached(q *pending) bool {
	if r.opts.Mutation == "complete-before-threshold" {
		return true
	}
	if q.unit == Ticks {
		return r.tc >= q.rt
	}
	return r.dc >= q.rt
}

// globalConflict is the certification of a global at delivery.
func (r *Replica) globalConflict(p *pending) (key string, reason Reason, bad bool) {
	st := p.part.Snapshot
	// In the part's order, so that every replica names the same key.
	for _, k := range readOrder(p.part) {
		ks := r.keys[k]
		if ks == nil {
			continue
		}
		if ks.pendingWriters > 0 {
			return k, ReasonPendingConflict, true
		}
		if ks.lastWrite > st {
			return k, ReasonConflict, true
		}
	}
	if r.opts.Mutation == "global-test-one-way" {
		return "", "", false
	}
	for _, w := range p.part.Writes {
		k := w.Key
		ks := r.keys[k]
		if ks == nil {
			continue
		}
		if ks.pendingReaders > 0 {
			return k, ReasonPendingConflict, true
		}
		if ks.lastRead > st {
			return k, ReasonConflict, true
		}
	}
	return "", "", false
}

// insert puts p at position i of the pending list and counts its keys as pending.
func (r *Replica) insert(i int, p *pending) {
	for k := range p.reads {
		r.key(k).pendingReaders++
	}
	for k := range p.writes {
		r.key(k).pendingWriters++
	}
	r.pl = append(r.pl, nil)
	copy(r.pl[i+1:], r.pl[i:])
	r.pl[i] = p
}

func (r *Replica) key(k string) *keyState {
	ks := r.keys[k]
	if ks == nil {
		ks = &keyState{}
		r.keys[k] = ks
	}
	return ks
}

// advance completes what the head of the pending list allows (lines 23-33), then processes
// waiting entries that can go on.
func (r *Replica) advance(now time.Time) {
	for range 1 << 30 { // bounded: every round completes one transaction or processes one entry
		if len(r.pl) > 0 {
			h := r.pl[0]
			if !h.global {
				r.completeLocal(h)
				continue
			}
			if len(h.votes) == len(h.part.Partitions) && r.thresholdReached(h) {
				commit, reason, key := true, Reason(""), ""
				for _, pid := range h.part.Partitions {
					if v := h.votes[pid]; !v.Commit {
						commit, reason, key = false, ReasonVote, v.Key
						if pid == r.partition {
							reason = Reason(v.Reason)
						}
						break
					}
				}
				r.complete(h, commit, reason, key)
				continue
			}
		}
		if len(r.waiting) == 0 {
			return
		}
		e := r.waiting[0]
		if e.Kind == EntryTxn && e.Txn != nil && e.Txn.Global() && e.Txn.Snapshot > r.sc && r.opts.Mutation != "paper-certification" {
			return
		}
		r.waiting = r.waiting[1:]
		r.process(now, e)
	}
}

// completeLocal certifies a local at the head: nothing committed after its snapshot wrote a
// key it read (lines 49 and 56, with the range corrected to DB[st+1 … SC]).
func (r *Replica) completeLocal(h *pending) {
	if r.opts.Mutation == "paper-certification" {
		r.complete(h, true, "", "") // the paper certified it at delivery
		return
	}
	for _, k := range readOrder(h.part) {
		if ks := r.keys[k]; ks != nil && ks.lastCommittedWrite > h.part.Snapshot {
			r.complete(h, false, ReasonConflict, k)
			return
		}
	}
	r.complete(h, true, "", "")
}

// complete removes the head h of the pending list with its outcome (lines 34-40).
func (r *Replica) complete(h *pending, commit bool, reason Reason, key string) {
	if len(r.pl) == 0 || r.pl[0] != h {
		panic(fmt.Sprintf("sdur: completing %s, which is not the head of the pending list", h.part.ID))
	}
	r.pl[0] = nil
	r.pl = r.pl[1:]
	r.sc++ // lines 38-39: the next snapshot
	idx := r.sc
	for k := range h.reads {
		ks := r.keys[k]
		ks.pendingReaders--
		ks.lastRead = idx
		if commit {
			ks.lastCommittedRead = idx
		}
		r.touched = append(r.touched, touch{idx, k})
	}
	for k := range h.writes {
		ks := r.keys[k]
		ks.pendingWriters--
		ks.lastWrite = idx
		if commit {
			ks.lastCommittedWrite = idx
		}
	}
	if commit {
		// Line 37, corrected: the writes are version SC+1, the snapshot they create.
		r.out.Applies = append(r.out.Applies, Apply{Index: idx, Txn: h.part.ID, Writes: h.part.Writes})
	}
	r.out.Outcomes = append(r.out.Outcomes, Outcome{Txn: h.part.ID, Partition: r.partition, Partitions: h.part.Partitions, Submitter: h.part.Submitter, Global: h.global,
		Committed: commit, Reason: reason, Key: key, Index: idx, Reordered: h.reordered})
}

// prune drops key state at or below the floor with nothing pending: every snapshot a later
// transaction may have is at or above the floor, so such a key can conflict with none.
func (r *Replica) prune() {
	n := 0
	for n < len(r.touched) && r.touched[n].Index <= r.floor {
		k := r.touched[n].Key
		if ks := r.keys[k]; ks != nil && ks.pendingReaders == 0 && ks.pendingWriters == 0 &&
			ks.lastRead <= r.floor && ks.lastWrite <= r.floor {
			delete(r.keys, k)
		}
		n++
	}
	r.touched = r.touched[n:]
}

// remember records a delivered transaction (or honoured abort request), bounded FIFO.
func (r *Replica) remember(id TxnID, s seenTxn) {
	r.seen[id] = s
	r.seenOrder = append(r.seenOrder, id)
	for len(r.seenOrder) > r.opts.Retention {
		delete(r.seen, r.seenOrder[0])
		r.seenOrder = r.seenOrder[1:]
	}
}

// Vote hands the replica a vote from another partition (line 13).
func (r *Replica) Vote(now time.Time, v Vote) {
	if v.Partition == r.partition {
		return
	}
	for _, p := range r.pl {
		if p.global && p.part.ID == v.Txn {
			if _, ok := p.votes[v.Partition]; !ok {
				p.votes[v.Partition] = v
				r.advance(now)
			}
			return
		}
	}
	if _, ok := r.seen[v.Txn]; ok {
		return // completed here, or aborted at delivery
	}
	if _, ok := r.early[v.Txn]; !ok {
		r.earlyOrder = append(r.earlyOrder, v.Txn)
		for len(r.earlyOrder) > r.opts.EarlyVotes {
			delete(r.early, r.earlyOrder[0])
			r.earlyOrder = r.earlyOrder[1:]
		}
	}
	for _, ev := range r.early[v.Txn] {
		if ev.Partition == v.Partition {
			return
		}
	}
	r.early[v.Txn] = append(r.early[v.Txn], v)
}

// VoteFor answers a vote request: this partition's vote on id, if it has delivered it (or
// honoured an abort request for it).
func (r *Replica) VoteFor(id TxnID) (Vote, bool) {
	s, ok := r.seen[id]
	if !ok || !s.global {
		return Vote{}, false
	}
	return s.vote, true
}

// Tick asks again for the votes pending globals have waited VoteRetry for, and asks the logs
// of partitions silent for RecoveryTimeout to abort the transaction (IV-F). Every pending
// global, not only the head: a replica that restarts and delivers its log again holds many
// globals whose votes were sent long ago, and asking for them one head at a time would take a
// retry interval each. Nothing it does changes a decision.
func (r *Replica) Tick(now time.Time) {
	for _, h := range r.pl {
		if !h.global {
			continue
		}
		if h.headSince.IsZero() {
			h.headSince = now // the wait is measured from the first tick that sees it pending
			continue
		}
		if len(h.votes) == len(h.part.Partitions) {
			continue
		}
		waited := now.Sub(h.headSince)
		if waited >= r.opts.VoteRetry && now.Sub(h.lastAsk) >= r.opts.VoteRetry {
			h.lastAsk = now
			for _, pid := range h.part.Partitions {
				if _, ok := h.votes[pid]; !ok {
					r.out.VoteRequests = append(r.out.VoteRequests, VoteRequest{Txn: h.part.ID, Partition: pid, From: r.partition})
				}
			}
		}
		if waited >= r.opts.RecoveryTimeout && now.Sub(h.lastRecover) >= r.opts.RecoveryTimeout {
			h.lastRecover = now
			for _, pid := range h.part.Partitions {
				if _, ok := h.votes[pid]; !ok {
					r.out.AbortRequests = append(r.out.AbortRequests, AbortRequest{Txn: h.part.ID, Partitions: h.part.Partitions, Partition: pid})
				}
			}
		}
	}
}

// HasReady reports whether Ready has something.
func (r *Replica) HasReady() bool { return !r.out.Empty() }

// Ready returns and clears what the runtime must do.
func (r *Replica) Ready() Ready {
	out := r.out
	r.out = Ready{}
	return out
}

// intersects reports whether two key sets share a key.
func intersects(a, b map[string]struct{}) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	for k := range a {
		if _, ok := b[k]; ok {
			return true
		}
	}
	return false
}

// readOrder lists a part's certified reads (its reads, then its written keys) in the part's
// order.
func readOrder(p *Part) []string {
	out := make([]string, 0, len(p.Reads)+len(p.Writes))
	out = append(out, p.Reads...)
	for _, w := range p.Writes {
		out = append(out, w.Key)
	}
	return out
}

// PendingGlobals returns the IDs of the globals in the pending list (read-only transactions
// use them to find a globally consistent snapshot).
func (r *Replica) PendingGlobals() []GlobalRef {
	var out []GlobalRef
	for _, p := range r.pl {
		if p.global {
			out = append(out, GlobalRef{ID: p.part.ID, Partitions: p.part.Partitions})
		}
	}
	return out
}

// GlobalRef names a global transaction and its partitions.
type GlobalRef struct {
	ID         TxnID
	Partitions []uint32
}

// Describe reports the replica's counters and the head of its pending list (diagnostics).
func (r *Replica) Describe() string {
	s := fmt.Sprintf("partition %d: DC=%d TC=%d SC=%d floor=%d threshold=%s pending=%d waiting=%d", r.partition, r.dc, r.tc, r.sc, r.floor, r.threshold, len(r.pl), len(r.waiting))
	if len(r.pl) > 0 {
		h := r.pl[0]
		s += fmt.Sprintf("; head %s global=%v rt=%d unit=%d votes=%d/%d", h.part.ID, h.global, h.rt, h.unit, len(h.votes), len(h.part.Partitions))
	}
	if len(r.waiting) > 0 && r.waiting[0].Txn != nil {
		s += fmt.Sprintf("; first waiting %s snapshot %d", r.waiting[0].Txn.ID, r.waiting[0].Txn.Snapshot)
	}
	return s
}

// paperCertify is Algorithm 2's certification as printed (lines 48-64, with lines 29, 37-39 and
// 58 corrected so that only the determinism defect is left): against the committed database and
// the pending list as they are at this replica when the transaction is delivered. Both depend on
// when this replica received the votes of earlier globals, so replicas decide differently (the
// "paper-certification" mutation; TestPaperCertificationDiverges).
func (r *Replica) paperCertify(t *Part, p *pending, global bool, abort func(Reason, string)) {
	st := t.Snapshot
	// Line 49: DB[st+1 … SC] (committed after the snapshot).
	for _, k := range readOrder(t) {
		if ks := r.keys[k]; ks != nil && ks.lastCommittedWrite > st {
			abort(ReasonConflict, k)
			return
		}
	}
	if global {
		for _, w := range t.Writes {
			if ks := r.keys[w.Key]; ks != nil && ks.lastCommittedRead > st {
				abort(ReasonConflict, w.Key)
				return
			}
		}
		// Line 52: every pending transaction, both directions.
		for _, q := range r.pl {
			if intersects(p.reads, q.writes) || intersects(p.writes, q.reads) {
				abort(ReasonPendingConflict, "")
				return
			}
		}
		r.admitGlobal(t, p)
		return
	}
	// Lines 55-61: the leftmost position i with no stale read before it (56) and only leapable,
	// unaffected globals from it on (57-60).
	for i := 0; i <= len(r.pl); i++ {
		ok := true
		for k := 0; k < i && ok; k++ {
			ok = !intersects(r.pl[k].writes, p.reads)
		}
		for k := i; k < len(r.pl) && ok; k++ {
			q := r.pl[k]
			ok = q.global && r.leapable(q) && !intersects(p.writes, q.reads) && !intersects(p.reads, q.writes)
		}
		if ok {
			r.remember(t.ID, seenTxn{global: false})
			p.reordered = i < len(r.pl)
			r.insert(i, p)
			return
		}
	}
	abort(ReasonConflict, "")
}
