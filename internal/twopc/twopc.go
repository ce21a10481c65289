// Package twopc is Meridian's two-phase commit baseline for transactions (issue 15), in
// Spanner's layering without TrueTime: every participant is a partition whose state is
// replicated by its Raft log, and the coordinator's record is an entry of the coordinator
// partition's log, so neither a participant's prepared state nor the decision is lost when a
// node crashes. Concurrency control is optimistic with locks held from prepare to decision:
//
//   - reads run at any replica, before commit, and return each key's version (the commit
//     counter of the partition when the value was written);
//   - a partition's prepare entry validates, at apply time on every replica alike, that every
//     key read still has the version read and that no other prepared transaction holds a
//     conflicting lock (no-wait: a conflict votes abort, nobody waits), then takes read locks on
//     the keys read and write locks on the keys written;
//   - a single-partition transaction commits in its one entry (one-phase commit);
//   - a multi-partition transaction is prepared in every partition at once; each partition's
//     replicas send their vote to the coordinator partition; its leader, with every vote in,
//     appends the decision to its log (the commit point), and the decision is then appended to
//     each participant's log, which applies the writes and releases the locks;
//   - the first decision entry for a transaction in a log wins: a participant that waits too
//     long asks the coordinator partition, whose leader appends an abort if nothing was decided
//     (presumed abort), and a coordinator that waits too long for votes does the same.
//
// Like internal/sdur, a Replica is a sans-IO state machine: entries of its log in order
// (Deliver), votes and status requests (Vote, Status), time (Tick) in; a Ready out.
package twopc

import (
	"fmt"
	"time"
)

// TxnID names a transaction: its submitting node and that node's sequence number.
type TxnID struct {
	Node uint32
	Seq  uint64
}

func (id TxnID) String() string { return fmt.Sprintf("t%d.%d", id.Node, id.Seq) }

// Read is a key read and the version it had (0: absent).
type Read struct {
	Key     string
	Version uint64
}

// Write is a key written.
type Write struct {
	Key    string
	Value  []byte
	Delete bool
}

// Part is a transaction's part for one partition.
type Part struct {
	ID          TxnID
	Partition   uint32
	Partitions  []uint32 // sorted; more than one: two-phase
	Coordinator uint32   // the partition whose log holds the decision
	Reads       []Read
	Writes      []Write
	Submitter   uint32
}

// EntryKind is the kind of a log entry.
type EntryKind uint8

const (
	// EntryPrepare is a part (a single-partition transaction commits or aborts in it).
	EntryPrepare EntryKind = iota + 1
	// EntryDecision is the decision: at the coordinator partition the commit point, at a
	// participant the order to commit or abort.
	EntryDecision
)

// Entry is one entry of a partition's log.
type Entry struct {
	Kind EntryKind
	Part *Part
	// Decision fields.
	Txn        TxnID
	Commit     bool
	Partitions []uint32
	Submitter  uint32
	// Coordinator is the partition that decided.
	Coordinator uint32
}

// Vote is a participant's vote, sent to the coordinator partition's replicas.
type Vote struct {
	Txn         TxnID
	Partition   uint32
	Coordinator uint32
	Commit      bool
	Key         string // an abort's conflicting key
}

// Decide is a decision the coordinator partition sends to the participants' replicas, whose
// leader appends it to their log.
type Decide struct {
	Txn        TxnID
	Commit     bool
	Partitions []uint32
	Submitter  uint32
	// Coordinator is the partition that decided.
	Coordinator uint32
}

// StatusRequest asks the coordinator partition for a decision (a participant waiting).
type StatusRequest struct {
	Txn         TxnID
	Coordinator uint32
	Partitions  []uint32
	Submitter   uint32
}

// Outcome is a completed transaction.
type Outcome struct {
	Txn       TxnID
	Partition uint32
	Submitter uint32
	Committed bool
	Global    bool
	Reason    string
	Key       string
	Version   uint64
}

// Apply is a committed transaction's writes at version Version.
type Apply struct {
	Version uint64
	Txn     TxnID
	Writes  []Write
}

// Ready is what the runtime must do: Applies durable before the rest leaves.
type Ready struct {
	Applies  []Apply
	Outcomes []Outcome
	Votes    []Vote
	Decides  []Decide
	// Proposals are entries for this replica's own log (the leader appends them).
	Proposals      []Entry
	StatusRequests []StatusRequest
}

// Options configure a replica.
type Options struct {
	// DecisionTimeout: a coordinator waiting this long for votes, or a participant this long
	// for a decision, asks for an abort (presumed abort). Default 2s.
	DecisionTimeout time.Duration
	// Retention bounds the remembered decisions. Default 1<<18.
	Retention int
	Mutation  string
}

// Mutations are deliberately broken variants the simulator must catch.
var Mutations = map[string]string{
	"forget-prepared-on-restart": "a participant that restarts replays its log without the prepare entries of transactions not yet decided: it forgets their locks and writes (prepared state must survive a crash)",
}

func (o Options) withDefaults() Options {
	if o.DecisionTimeout <= 0 {
		o.DecisionTimeout = 2 * time.Second
	}
	if o.Retention <= 0 {
		o.Retention = 1 << 18
	}
	return o
}

type lock struct {
	writer  TxnID
	written bool
	readers map[TxnID]struct{}
}

type prepared struct {
	part  *Part
	since time.Time
	asked time.Time
}

type coordinating struct {
	parts     []uint32
	submitter uint32
	votes     map[uint32]Vote
	since     time.Time
	proposed  time.Time
}

// Replica is one replica of a partition.
type Replica struct {
	partition uint32
	opts      Options
	leader    bool
	// replayUpTo: entries at or below this index are replayed after a restart (the mutation
	// forgets prepares among them).
	replayUpTo uint64

	version   uint64
	lastWrite map[string]uint64
	locks     map[string]*lock
	prepared  map[TxnID]*prepared
	decided   map[TxnID]bool
	order     []TxnID
	coord     map[TxnID]*coordinating

	out Ready
}

// NewReplica returns a replica at its initial state.
func NewReplica(partition uint32, opts Options) (*Replica, error) {
	if opts.Mutation != "" {
		if _, ok := Mutations[opts.Mutation]; !ok {
			return nil, fmt.Errorf("twopc: unknown mutation %q", opts.Mutation)
		}
	}
	return &Replica{partition: partition, opts: opts.withDefaults(), lastWrite: map[string]uint64{}, locks: map[string]*lock{},
		prepared: map[TxnID]*prepared{}, decided: map[TxnID]bool{}, coord: map[TxnID]*coordinating{}}, nil
}

// SetLeader tells the replica whether it leads its partition's log (only the leader appends
// decisions).
func (r *Replica) SetLeader(leader bool) { r.leader = leader }

// SetReplay marks the entries up to index as a replay after a restart.
func (r *Replica) SetReplay(index uint64) { r.replayUpTo = index }

// Version returns the partition's commit counter: a read returns a key's newest version at or
// below it.
func (r *Replica) Version() uint64 { return r.version }

// PendingCount returns the prepared transactions and those this replica coordinates.
func (r *Replica) PendingCount() int { return len(r.prepared) + len(r.coord) }

// Deliver applies the entry at index of the partition's log.
func (r *Replica) Deliver(now time.Time, index uint64, e Entry) {
	switch e.Kind {
	case EntryPrepare:
		if e.Part != nil {
			r.prepare(now, index, e.Part)
		}
	case EntryDecision:
		r.decide(now, e)
	}
}

func (r *Replica) remember(id TxnID, commit bool) {
	r.decided[id] = commit
	r.order = append(r.order, id)
	for len(r.order) > r.opts.Retention {
		delete(r.decided, r.order[0])
		r.order = r.order[1:]
	}
}

// conflict validates a part against the committed versions and the locks of others.
func (r *Replica) conflict(p *Part) (string, bool) {
	for _, rd := range p.Reads {
		if r.lastWrite[rd.Key] != rd.Version {
			return rd.Key, true
		}
		if l := r.locks[rd.Key]; l != nil && l.written && l.writer != p.ID {
			return rd.Key, true
		}
	}
	for _, w := range p.Writes {
		if l := r.locks[w.Key]; l != nil {
			if l.written && l.writer != p.ID {
				return w.Key, true
			}
			for reader := range l.readers {
				if reader != p.ID {
					return w.Key, true
				}
			}
		}
	}
	return "", false
}

func (r *Replica) prepare(now time.Time, index uint64, p *Part) {
	global := len(p.Partitions) > 1
	if _, ok := r.decided[p.ID]; ok {
		if global { // decided already (an abort came first, or a duplicate): repeat the vote
			r.out.Votes = append(r.out.Votes, Vote{Txn: p.ID, Partition: r.partition, Coordinator: p.Coordinator, Commit: r.decided[p.ID]})
		}
		return
	}
	if _, ok := r.prepared[p.ID]; ok {
		r.out.Votes = append(r.out.Votes, Vote{Txn: p.ID, Partition: r.partition, Coordinator: p.Coordinator, Commit: true})
		return
	}
	if global && r.opts.Mutation == "forget-prepared-on-restart" && index <= r.replayUpTo {
		return // the mutation: replayed prepares are forgotten
	}
	key, bad := r.conflict(p)
	if !global {
		r.remember(p.ID, !bad)
		o := Outcome{Txn: p.ID, Partition: r.partition, Submitter: p.Submitter, Committed: !bad}
		if bad {
			o.Reason, o.Key = "conflict", key
		} else {
			r.version++
			o.Version = r.version
			r.apply(p)
		}
		r.out.Outcomes = append(r.out.Outcomes, o)
		return
	}
	if r.partition == p.Coordinator {
		c := r.coordFor(now, p.ID, p.Partitions, p.Submitter)
		if _, ok := c.votes[r.partition]; !ok {
			c.votes[r.partition] = Vote{Txn: p.ID, Partition: r.partition, Coordinator: p.Coordinator, Commit: !bad, Key: key}
		}
	}
	v := Vote{Txn: p.ID, Partition: r.partition, Coordinator: p.Coordinator, Commit: !bad, Key: key}
	if bad {
		// Voting abort: it can never commit. A participant remembers, so that the decision
		// is moot here; the coordinator partition waits for its own decision entry, which
		// tells the submitter.
		if r.partition != p.Coordinator {
			r.remember(p.ID, false)
		}
	} else {
		r.prepared[p.ID] = &prepared{part: p, since: now}
		r.lock(p)
	}
	if r.partition != p.Coordinator {
		r.out.Votes = append(r.out.Votes, v)
	} else {
		r.maybeDecide(now, p.ID)
	}
}

// lock takes p's read and write locks.
func (r *Replica) lock(p *Part) {
	for _, rd := range p.Reads {
		l := r.lockFor(rd.Key)
		if l.readers == nil {
			l.readers = map[TxnID]struct{}{}
		}
		l.readers[p.ID] = struct{}{}
	}
	for _, w := range p.Writes {
		l := r.lockFor(w.Key)
		l.writer, l.written = p.ID, true
	}
}

func (r *Replica) lockFor(k string) *lock {
	l := r.locks[k]
	if l == nil {
		l = &lock{}
		r.locks[k] = l
	}
	return l
}

func (r *Replica) unlock(p *Part) {
	for _, rd := range p.Reads {
		if l := r.locks[rd.Key]; l != nil {
			delete(l.readers, p.ID)
			r.dropIfFree(rd.Key, l)
		}
	}
	for _, w := range p.Writes {
		if l := r.locks[w.Key]; l != nil && l.written && l.writer == p.ID {
			l.written, l.writer = false, TxnID{}
			r.dropIfFree(w.Key, l)
		}
	}
}

func (r *Replica) dropIfFree(k string, l *lock) {
	if !l.written && len(l.readers) == 0 {
		delete(r.locks, k)
	}
}

func (r *Replica) apply(p *Part) {
	for _, w := range p.Writes {
		r.lastWrite[w.Key] = r.version
	}
	r.out.Applies = append(r.out.Applies, Apply{Version: r.version, Txn: p.ID, Writes: p.Writes})
}

func (r *Replica) coordFor(now time.Time, id TxnID, parts []uint32, submitter uint32) *coordinating {
	c := r.coord[id]
	if c == nil {
		c = &coordinating{parts: parts, submitter: submitter, votes: map[uint32]Vote{}, since: now}
		r.coord[id] = c
	}
	if c.parts == nil && parts != nil {
		// Votes came before this replica delivered its own prepare: now it knows the
		// transaction.
		c.parts, c.submitter, c.since = parts, submitter, now
	}
	return c
}

// Vote hands the coordinator partition's replica a participant's vote.
func (r *Replica) Vote(now time.Time, v Vote) {
	if v.Coordinator != r.partition {
		return
	}
	if _, ok := r.decided[v.Txn]; ok {
		return
	}
	c := r.coord[v.Txn]
	if c == nil {
		// Before this replica delivered its own prepare: keep the vote (bounded by the
		// prepares to come; a vote for a transaction never prepared here expires with Tick).
		c = r.coordFor(now, v.Txn, nil, 0)
	}
	if _, ok := c.votes[v.Partition]; !ok {
		c.votes[v.Partition] = v
	}
	r.maybeDecide(now, v.Txn)
}

// maybeDecide: the leader appends the decision once every vote is in (or one is abort).
func (r *Replica) maybeDecide(now time.Time, id TxnID) {
	c := r.coord[id]
	if c == nil || !r.leader || c.parts == nil || !c.proposed.IsZero() && now.Sub(c.proposed) < r.opts.DecisionTimeout/2 {
		return
	}
	commit, complete := true, true
	for _, p := range c.parts {
		v, ok := c.votes[p]
		if !ok {
			complete = false
			continue
		}
		if !v.Commit {
			commit = false
		}
	}
	if !complete && commit {
		return // an abort vote decides at once; a commit needs every vote
	}
	c.proposed = now
	r.out.Proposals = append(r.out.Proposals, Entry{Kind: EntryDecision, Txn: id, Commit: commit, Partitions: c.parts, Submitter: c.submitter, Coordinator: r.partition})
}

// decide applies a decision entry (the first for a transaction wins).
func (r *Replica) decide(now time.Time, e Entry) {
	if _, ok := r.decided[e.Txn]; ok {
		if p, ok := r.prepared[e.Txn]; ok { // cannot happen: decided transactions are not prepared
			panic(fmt.Sprintf("twopc: %s decided and still prepared (%v)", e.Txn, p.part.Partitions))
		}
		return
	}
	r.remember(e.Txn, e.Commit)
	delete(r.coord, e.Txn)
	p := r.prepared[e.Txn]
	if p != nil {
		delete(r.prepared, e.Txn)
		r.unlock(p.part)
		if e.Commit {
			r.version++
			r.apply(p.part)
		}
	}
	if r.partition == e.Coordinator {
		// The commit point: tell the submitter and the participants.
		o := Outcome{Txn: e.Txn, Partition: r.partition, Submitter: e.Submitter, Committed: e.Commit, Global: true, Version: r.version}
		if !e.Commit {
			o.Reason = "a participant voted abort (or the decision timed out)"
		}
		r.out.Outcomes = append(r.out.Outcomes, o)
		r.out.Decides = append(r.out.Decides, Decide{Txn: e.Txn, Commit: e.Commit, Partitions: e.Partitions, Submitter: e.Submitter, Coordinator: e.Coordinator})
	}
}

// Decided hands a participant's replica a decision from the coordinator: the leader appends
// it to the log.
func (r *Replica) Decided(now time.Time, d Decide) {
	if _, ok := r.decided[d.Txn]; ok || !r.leader {
		return
	}
	r.out.Proposals = append(r.out.Proposals, Entry{Kind: EntryDecision, Txn: d.Txn, Commit: d.Commit, Partitions: d.Partitions, Submitter: d.Submitter, Coordinator: d.Coordinator})
}

// Status answers a participant's status request at the coordinator partition: the decision
// if there is one; otherwise the leader presumes abort once the transaction is older than the
// timeout here (or unknown here).
func (r *Replica) Status(now time.Time, s StatusRequest) {
	if s.Coordinator != r.partition {
		return
	}
	if commit, ok := r.decided[s.Txn]; ok {
		r.out.Decides = append(r.out.Decides, Decide{Txn: s.Txn, Commit: commit, Partitions: s.Partitions, Submitter: s.Submitter, Coordinator: r.partition})
		return
	}
	if !r.leader {
		return
	}
	c := r.coord[s.Txn]
	if c != nil && now.Sub(c.since) < r.opts.DecisionTimeout {
		return
	}
	r.out.Proposals = append(r.out.Proposals, Entry{Kind: EntryDecision, Txn: s.Txn, Commit: false, Partitions: s.Partitions, Submitter: s.Submitter, Coordinator: r.partition})
}

// Tick: participants ask for decisions they have waited long for; the coordinator's leader
// aborts transactions whose votes do not come.
func (r *Replica) Tick(now time.Time) {
	for _, id := range sortIDs(r.prepared) {
		p := r.prepared[id]
		if now.Sub(p.since) >= r.opts.DecisionTimeout && now.Sub(p.asked) >= r.opts.DecisionTimeout/2 {
			p.asked = now
			r.out.StatusRequests = append(r.out.StatusRequests, StatusRequest{Txn: id, Coordinator: p.part.Coordinator, Partitions: p.part.Partitions, Submitter: p.part.Submitter})
		}
	}
	for _, id := range r.sortedCoord() {
		c := r.coord[id]
		if now.Sub(c.since) < r.opts.DecisionTimeout {
			continue
		}
		if c.parts == nil {
			if now.Sub(c.since) >= 4*r.opts.DecisionTimeout {
				delete(r.coord, id) // votes for a prepare this replica never delivered
			}
			continue
		}
		if r.leader && (c.proposed.IsZero() || now.Sub(c.proposed) >= r.opts.DecisionTimeout) {
			c.proposed = now
			r.out.Proposals = append(r.out.Proposals, Entry{Kind: EntryDecision, Txn: id, Commit: false, Partitions: c.parts, Submitter: c.submitter, Coordinator: r.partition})
		}
	}
	for _, id := range r.sortedCoord() {
		r.maybeDecide(now, id)
	}
}

func (r *Replica) sortedCoord() []TxnID { return sortIDs(r.coord) }

// HasReady reports whether Ready has something.
func (r *Replica) HasReady() bool {
	o := &r.out
	return len(o.Applies)+len(o.Outcomes)+len(o.Votes)+len(o.Decides)+len(o.Proposals)+len(o.StatusRequests) > 0
}

// Ready returns and clears the replica's output.
func (r *Replica) Ready() Ready {
	out := r.out
	r.out = Ready{}
	return out
}

// Describe reports the replica's pending state (diagnostics).
func (r *Replica) Describe() string {
	s := fmt.Sprintf("partition %d: version %d leader %v prepared %d coordinating %d", r.partition, r.version, r.leader, len(r.prepared), len(r.coord))
	for id, p := range r.prepared {
		s += fmt.Sprintf("; prepared %s coord %d since %v", id, p.part.Coordinator, p.since.UnixNano())
	}
	for id, c := range r.coord {
		s += fmt.Sprintf("; coordinating %s parts %v votes %d", id, c.parts, len(c.votes))
	}
	return s
}

// DecidedFor reports a remembered decision (diagnostics, tests).
func (r *Replica) DecidedFor(id TxnID) (commit, ok bool) {
	commit, ok = r.decided[id]
	return
}
