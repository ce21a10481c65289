package catenae

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"
)

// maxMsgEpochs bounds the epochs one message carries (a receiver further behind asks again);
// maxMsgVotes the votes (the oldest epochs first go out; the rest in the next messages).
const (
	maxMsgEpochs = 1000
	maxMsgVotes  = 1 << 16
)

// version is one value of a key: written by the transaction writer (zero: the initial state)
// at its place in the order.
type version struct {
	stamp  Stamp
	writer TxnID
	value  []byte
	absent bool // a version that deletes (not used by the operations yet; kept for reads)
	// seq is the writer's final position in the chain order (the count of transactions
	// finally executed before it, plus one): a version number every data center agrees on.
	seq uint64
}

// specSeq marks a speculative version (its writer's final position is not known yet).
const specSeq = ^uint64(0)

// txnState is what a replica knows of one transaction.
type txnState struct {
	txn *Txn
	// result is its execution's result (speculative while its epoch is open, final after);
	// writes are the values it wrote, by key; deps the writers of the versions it read.
	result Result
	writes map[string][]byte
	deps   []TxnID
	final  bool
	// seq is its final position in the chain order (final only).
	seq uint64
	// decided is the digest the data centers agreed on (validation), once known; validated:
	// this replica's own final result has that digest.
	decided    uint64
	hasDecided bool
	validated  bool
	corrupted  bool
}

// Replica is one data center's Catenae server (a sans-IO state machine).
//
// Invariants: every epoch ≤ closed has every data center's input and is executed finally, in
// stamp order, into store; spec holds exactly the transactions of epochs > closed that this
// replica has received, sorted by stamp, each executed speculatively on store and the spec
// entries before it; a data center's input for an epoch never changes once received.
type Replica struct {
	self uint32
	dcs  []uint32
	opts Options

	seq       uint64
	lastNanos int64
	// sentUpto is the last epoch whose message this replica sent: its own input for every
	// epoch ≤ sentUpto is final (a later submission is stamped into a later epoch).
	sentUpto uint64
	// inputs[e][dc] is dc's input for epoch e (present once received); upto[dc] the last
	// epoch up to which every input of dc is in.
	inputs   map[uint64]map[uint32][]*Txn
	upto     map[uint32]uint64
	maxSeen  map[uint32]uint64
	gapSince map[uint32]time.Time
	heard    map[uint32]time.Time
	asked    map[uint32]time.Time
	// closed is the last closed epoch; peerClosed what each data center says it closed.
	closed     uint64
	peerClosed map[uint32]uint64

	store map[string][]version
	// finalSeq counts the transactions finally executed (the chain order's positions).
	finalSeq uint64
	spec     []*txnState
	txns     map[TxnID]*txnState
	// history is the finally executed transactions not yet validated and those after them
	// (a divergence is repaired by executing them again).
	history []*txnState
	votes   map[TxnID]map[uint32]uint64
	// myVotes are this replica's digests by epoch, repeated in every message until every data
	// center has validated the epoch (a lost vote would hold a transaction forever).
	myVotes       map[uint64][]Vote
	peerValidated map[uint32]uint64
	// waiting are the transactions submitted here and not yet decided.
	waiting map[TxnID]bool
	// validatedUpto: every transaction of epochs ≤ it is validated here (read-only
	// transactions read at it); unvalidated counts, per closed epoch, those that are not.
	validatedUpto uint64
	unvalidated   map[uint64]int
	// validatedSeq is the chain position of the last transaction of the validated prefix.
	validatedSeq uint64
	// retainFrom: reads at an epoch below it are refused (older versions are dropped, or were
	// not loaded at a restart); trims are the keys written per validated epoch, whose older
	// versions go once the epoch falls RetainEpochs below the validated prefix.
	retainFrom uint64
	trims      []trim
	// forgot is the last Durable.Forget reported; metaDirty: Meta changed since the last Ready.
	forgot    uint64
	metaDirty bool

	stats Stats
	out   Ready
	now   time.Time
}

// Stats count what a replica did (for the benchmarks and the bound on cascades).
type Stats struct {
	Executed, Rollbacks, MaxCascade, Repairs int
	// SpecHits and SpecMisses: final executions that confirmed, or replaced, a speculative
	// result.
	SpecHits, SpecMisses     int
	FastCommits, SlowCommits int
	MessagesSent, BytesSent  int64
}

// NewReplica returns data center self's replica among dcs (every data center's ID, self
// included).
func NewReplica(self uint32, dcs []uint32, opts Options) (*Replica, error) {
	opts = opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	dcs = slices.Clone(dcs)
	slices.Sort(dcs)
	if !slices.Contains(dcs, self) || len(dcs) == 0 {
		return nil, fmt.Errorf("catenae: data center %d is not among %v", self, dcs)
	}
	r := &Replica{self: self, dcs: dcs, opts: opts, inputs: map[uint64]map[uint32][]*Txn{}, upto: map[uint32]uint64{},
		maxSeen: map[uint32]uint64{}, gapSince: map[uint32]time.Time{}, heard: map[uint32]time.Time{}, asked: map[uint32]time.Time{},
		peerClosed: map[uint32]uint64{}, myVotes: map[uint64][]Vote{}, peerValidated: map[uint32]uint64{}, store: map[string][]version{}, txns: map[TxnID]*txnState{}, votes: map[TxnID]map[uint32]uint64{},
		waiting: map[TxnID]bool{}, unvalidated: map[uint64]int{}}
	r.sentUpto, r.closed, r.validatedUpto, r.retainFrom, r.forgot = opts.Start, opts.Start, opts.Start, opts.Start, opts.Start
	for _, dc := range dcs {
		r.upto[dc], r.peerClosed[dc], r.peerValidated[dc] = opts.Start, opts.Start, opts.Start
	}
	return r, nil
}

// Stats returns the replica's counters.
func (r *Replica) Stats() Stats { return r.stats }

// Closed returns the last closed epoch.
func (r *Replica) Closed() uint64 { return r.closed }

func (r *Replica) epochOf(nanos int64) uint64 { return uint64(nanos / int64(r.opts.EpochLength)) }

// Submit stamps a transaction submitted at this data center into its current epoch (never one
// whose message has left) and executes it speculatively. Its outcome comes in a later Ready.
func (r *Replica) Submit(now time.Time, p Proc) (TxnID, error) {
	if err := p.Validate(r.opts.MaxOps); err != nil {
		return TxnID{}, err
	}
	if len(r.spec) >= r.opts.MaxOpen {
		return TxnID{}, fmt.Errorf("catenae: data center %d has %d transactions in open epochs (limit %d)", r.self, len(r.spec), r.opts.MaxOpen)
	}
	nanos := max(now.UnixNano(), r.lastNanos+1)
	e := r.epochOf(nanos)
	if e <= r.sentUpto {
		e = r.sentUpto + 1
		nanos = max(nanos, int64(e)*int64(r.opts.EpochLength))
	}
	r.lastNanos = nanos
	r.seq++
	r.metaDirty = true
	t := &Txn{ID: TxnID{DC: r.self, Seq: r.seq}, Stamp: Stamp{Epoch: e, Nanos: nanos, DC: r.self, Seq: r.seq}, Proc: p}
	in := r.inputs[e]
	if in == nil {
		in = map[uint32][]*Txn{}
		r.inputs[e] = in
	}
	in[r.self] = append(in[r.self], t)
	r.waiting[t.ID] = true
	r.speculate([]*Txn{t})
	return t.ID, nil
}

// Tick sends the epoch messages of the epochs that ended, asks again for inputs missing too
// long, and closes what it can.
func (r *Replica) Tick(now time.Time) {
	cur := r.epochOf(now.UnixNano())
	if cur > 0 && cur-1 > r.sentUpto {
		prev := r.sentUpto
		r.sentUpto = cur - 1
		r.upto[r.self] = r.sentUpto
		r.metaDirty = true
		// The inputs the message announces are final: on disk before it leaves (a peer
		// that misses it asks again, and must get the same answer after a crash).
		for e := prev + 1; e <= r.sentUpto; e++ {
			if txns := r.inputs[e][r.self]; len(txns) > 0 && r.opts.Mutation != "restart-forgets-inputs" {
				r.out.Durable.Inputs = append(r.out.Durable.Inputs, Input{Epoch: e, DC: r.self, Txns: txns})
			}
		}
		r.broadcast(prev)
	}
	r.now = now
	for _, dc := range r.dcs {
		if dc == r.self {
			continue
		}
		missing := r.maxSeen[dc] > r.upto[dc] || (r.sentUpto > r.upto[dc]+uint64(r.opts.Redundancy) && now.Sub(r.heard[dc]) > r.opts.RequestAfter)
		if !missing {
			delete(r.gapSince, dc)
			continue
		}
		if r.gapSince[dc].IsZero() {
			r.gapSince[dc] = now
		}
		if now.Sub(r.gapSince[dc]) >= r.opts.RequestAfter && now.Sub(r.asked[dc]) >= r.opts.RequestAfter {
			r.asked[dc] = now
			r.send(Message{To: dc, Req: &Request{From: r.self, Epoch: r.upto[dc] + 1}})
		}
	}
	r.tryClose()
}

// broadcast sends this data center's message: its inputs for the epochs after prev and the
// Redundancy before, the votes not yet sent, and how far it has closed.
func (r *Replica) broadcast(prev uint64) {
	from := prev + 1
	if from > uint64(r.opts.Redundancy) && from-uint64(r.opts.Redundancy) > 0 {
		from -= uint64(r.opts.Redundancy)
	} else {
		from = 1
	}
	m := r.epochMsg(from)
	floor := r.validatedUpto
	for _, dc := range r.dcs {
		if dc != r.self {
			floor = min(floor, r.peerValidated[dc])
		}
	}
	epochs := make([]uint64, 0, len(r.myVotes))
	for e := range r.myVotes {
		epochs = append(epochs, e)
	}
	slices.Sort(epochs)
	for _, e := range epochs {
		if e <= floor {
			delete(r.myVotes, e)
			continue
		}
		if len(m.Votes) < maxMsgVotes {
			m.Votes = append(m.Votes, r.myVotes[e]...)
		}
	}
	for _, dc := range r.dcs {
		if dc != r.self {
			r.send(Message{To: dc, Epoch: m})
		}
	}
}

// epochMsg is this replica's inputs from epoch from to sentUpto (not those every data
// center has closed: no one needs them, and they may be dropped here).
func (r *Replica) epochMsg(from uint64) *EpochMsg {
	first := max(from, r.gcFloor()+1, r.opts.Start+1)
	last := min(r.sentUpto, first+maxMsgEpochs-1)
	m := &EpochMsg{From: r.self, Upto: last, Closed: r.closed, Validated: r.validatedUpto}
	for e := first; e <= last; e++ {
		m.Epochs = append(m.Epochs, r.inputs[e][r.self])
	}
	if first > last {
		m.Upto = r.sentUpto // nothing to repeat: the message still says how far it is
	}
	return m
}

func (r *Replica) send(m Message) {
	r.stats.MessagesSent++
	r.stats.BytesSent += int64(messageSize(m))
	r.out.Messages = append(r.out.Messages, m)
}

// Step takes a message from another data center.
func (r *Replica) Step(now time.Time, m Message) {
	switch {
	case m.Epoch != nil:
		r.stepEpoch(now, m.Epoch)
	case m.Req != nil:
		q := m.Req
		if q.From == r.self || !slices.Contains(r.dcs, q.From) {
			return
		}
		msg := r.epochMsg(max(q.Epoch, 1))
		r.send(Message{To: q.From, Epoch: msg})
	}
	r.tryClose()
}

func (r *Replica) stepEpoch(now time.Time, m *EpochMsg) {
	dc := m.From
	if dc == r.self || !slices.Contains(r.dcs, dc) {
		return
	}
	r.heard[dc] = now
	r.peerClosed[dc] = max(r.peerClosed[dc], m.Closed)
	r.peerValidated[dc] = max(r.peerValidated[dc], m.Validated)
	r.maxSeen[dc] = max(r.maxSeen[dc], m.Upto)
	first := m.Upto + 1 - uint64(len(m.Epochs))
	var fresh []*Txn
	for i, txns := range m.Epochs {
		e := first + uint64(i)
		if e == 0 || e <= r.upto[dc] && r.inputs[e] == nil {
			continue // closed and dropped here already
		}
		in := r.inputs[e]
		if in == nil {
			if e <= r.closed && r.opts.Mutation != "close-on-majority" {
				continue
			}
			in = map[uint32][]*Txn{}
			r.inputs[e] = in
		}
		if _, ok := in[dc]; ok {
			continue
		}
		got := make([]*Txn, 0, len(txns))
		for _, t := range txns {
			if t == nil || t.ID.DC != dc || t.Stamp.Epoch != e || t.Proc.Validate(r.opts.MaxOps) != nil {
				continue // not this data center's, or malformed: dropped alike everywhere
			}
			got = append(got, t)
		}
		in[dc] = got
		fresh = append(fresh, got...)
	}
	for r.inputs[r.upto[dc]+1] != nil {
		if _, ok := r.inputs[r.upto[dc]+1][dc]; !ok {
			break
		}
		r.upto[dc]++
	}
	if len(fresh) > 0 {
		r.speculate(fresh)
	}
	for _, v := range m.Votes {
		if v.DC != dc {
			continue
		}
		r.vote(v)
	}
	r.gcInputs()
}

// speculate inserts transactions into the speculative order and executes again, from the
// first of them, every later transaction whose reads may have changed (a rollback: its
// earlier speculative result was wrong).
func (r *Replica) speculate(ts []*Txn) {
	first := len(r.spec)
	for _, t := range ts {
		if r.txns[t.ID] != nil || (t.Stamp.Epoch <= r.closed && r.opts.Mutation != "close-on-majority") {
			continue
		}
		st := &txnState{txn: t}
		r.txns[t.ID] = st
		i := sort.Search(len(r.spec), func(i int) bool { return t.Stamp.Less(r.spec[i].txn.Stamp) })
		r.spec = slices.Insert(r.spec, i, st)
		first = min(first, i)
	}
	if first >= len(r.spec) {
		return
	}
	// Keys written by the transactions executed again so far: a later transaction that
	// touches none of them keeps its result.
	dirty := map[string]bool{}
	overlay := map[string][]byte{}
	for _, st := range r.spec[:first] {
		for k, v := range st.writes {
			overlay[k] = v
		}
	}
	cascade := 0
	for _, st := range r.spec[first:] {
		touched := st.writes == nil // new
		if !touched {
			for _, op := range st.txn.Proc.Ops {
				if dirty[op.Key] {
					touched = true
					break
				}
			}
		}
		if touched {
			old := st.result.Digest
			hadResult := st.writes != nil
			r.execute(st, func(k string) ([]byte, TxnID, uint64, bool) {
				if v, ok := overlay[k]; ok {
					return v, TxnID{}, specSeq, v != nil // a speculative version: dependency on open epochs
				}
				return r.latest(k)
			}, false)
			if hadResult && st.result.Digest != old {
				cascade++
				r.stats.Rollbacks++
			}
			for _, op := range st.txn.Proc.Ops {
				if op.Kind != OpRead {
					dirty[op.Key] = true
				}
			}
			if r.opts.Mutation == "expose-speculative" && r.waiting[st.txn.ID] {
				delete(r.waiting, st.txn.ID)
				r.out.Outcomes = append(r.out.Outcomes, Outcome{Txn: st.txn.ID, Committed: true, Result: st.result, Fast: true})
			}
		}
		for k, v := range st.writes {
			overlay[k] = v
		}
	}
	r.stats.MaxCascade = max(r.stats.MaxCascade, cascade)
}

// latest is the newest final version of k.
func (r *Replica) latest(k string) ([]byte, TxnID, uint64, bool) {
	vs := r.store[k]
	if len(vs) == 0 {
		return nil, TxnID{}, 0, false
	}
	v := vs[len(vs)-1]
	return v.value, v.writer, v.seq, !v.absent
}

// execute runs st's procedure with get as its view of the keys (its own writes first: a
// procedure reads what it wrote) and sets its result, writes and dependencies.
func (r *Replica) execute(st *txnState, get func(string) ([]byte, TxnID, uint64, bool), final bool) {
	r.stats.Executed++
	writes := map[string][]byte{}
	var reads [][]byte
	var versions []uint64
	var deps []TxnID
	aborted, reason, abortKey := false, "", ""
	view := func(k string) ([]byte, uint64, bool) {
		if v, ok := writes[k]; ok {
			return v, specSeq, v != nil // nil: deleted by the procedure
		}
		v, w, seq, found := get(k)
		if w != (TxnID{}) && !slices.Contains(deps, w) {
			deps = append(deps, w)
		}
		return v, seq, found
	}
	for _, op := range st.txn.Proc.Ops {
		if aborted {
			break
		}
		cur, seq, found := view(op.Key)
		switch op.Kind {
		case OpExpect:
			if !found {
				seq = 0
			}
			if seq != op.Version && r.opts.Mutation != "ignore-expect" {
				aborted, reason, abortKey = true, fmt.Sprintf("conflict: key %q is at version %d, the transaction read version %d", op.Key, seq, op.Version), op.Key
			}
		case OpRead:
			if found {
				reads = append(reads, slices.Clone(cur))
			} else {
				reads = append(reads, nil)
				seq = 0
			}
			versions = append(versions, seq)
		case OpWrite:
			v := slices.Clone(op.Value)
			if v == nil {
				v = []byte{} // an empty value is a value (nil is a deletion)
			}
			writes[op.Key] = v
		case OpDelete:
			writes[op.Key] = nil
		case OpAppend:
			writes[op.Key] = binary.BigEndian.AppendUint64(slices.Clone(cur), uint64(op.Delta))
		case OpAdd:
			n, _ := strconv.ParseInt(string(cur), 10, 64)
			writes[op.Key] = []byte(strconv.FormatInt(n+op.Delta, 10))
		}
	}
	if final && r.opts.Corrupt != nil && !st.corrupted && r.opts.Corrupt(st.txn.ID) {
		// The fault: this replica writes a wrong value (every written key gets a stray byte,
		// its own: two faulty replicas do not agree on a wrong result).
		st.corrupted = true
		for k, v := range writes {
			writes[k] = append(slices.Clone(v), byte(0xA0+r.self))
		}
	}
	if aborted {
		writes, reads, versions = map[string][]byte{}, nil, nil
	}
	st.result = Result{Reads: reads, Versions: versions, Aborted: aborted, Reason: reason, Key: abortKey, Digest: digest(reads, writes)}
	if aborted {
		st.result.Digest ^= 0xab0127ed // an abort is a result too: data centers agree on it
	}
	st.writes = writes
	st.deps = deps
}

// digest covers what validation compares: the values read and the values written.
func digest(reads [][]byte, writes map[string][]byte) uint64 {
	h := fnv.New64a()
	var n [8]byte
	for _, v := range reads {
		binary.BigEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		h.Write(v)
	}
	keys := make([]string, 0, len(writes))
	for k := range writes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		binary.BigEndian.PutUint64(n[:], uint64(len(k)))
		h.Write(n[:])
		h.Write([]byte(k))
		if writes[k] == nil {
			binary.BigEndian.PutUint64(n[:], ^uint64(0)) // a deletion, unlike an empty value
		} else {
			binary.BigEndian.PutUint64(n[:], uint64(len(writes[k])))
		}
		h.Write(n[:])
		h.Write(writes[k])
	}
	return h.Sum64()
}

// closable reports whether epoch e has every data center's input (the mutation: a majority).
func (r *Replica) closable(e uint64) bool {
	have := 0
	for _, dc := range r.dcs {
		if r.upto[dc] >= e {
			have++
		}
	}
	if r.opts.Mutation == "close-on-majority" {
		return r.sentUpto >= e && have >= len(r.dcs)/2+1
	}
	return have == len(r.dcs)
}

// tryClose closes the epochs whose inputs are all in, in order: their transactions (the
// front of the speculative order) are executed finally into the store — their speculative
// results stand, since nothing can come before them any more — and this replica votes.
func (r *Replica) tryClose() {
	for r.closable(r.closed + 1) {
		e := r.closed + 1
		n := 0
		for n < len(r.spec) && r.spec[n].txn.Stamp.Epoch <= e {
			n++
		}
		batch := slices.Clone(r.spec[:n])
		r.spec = slices.Delete(r.spec, 0, n)
		// Every input of a closed epoch is on disk with the close: a restart executes the
		// closed epochs not yet validated again from them (durable.go).
		for _, dc := range r.dcs {
			if txns := r.inputs[e][dc]; dc != r.self && len(txns) > 0 {
				r.out.Durable.Inputs = append(r.out.Durable.Inputs, Input{Epoch: e, DC: dc, Txns: txns})
			}
		}
		r.metaDirty = true
		changed := false
		for _, st := range batch {
			changed = r.finalize(st) || changed
		}
		r.closed = e
		if r.unvalidated[e] == 0 && r.validatedUpto == e-1 {
			r.advanceValidated()
		}
		if changed && len(r.spec) > 0 {
			// The speculative results after the batch were computed on its speculative
			// writes; a final execution that differs (a fault, or an input that came late
			// under the close-on-majority mutation) invalidates them: execute them again.
			r.respeculate()
		}
	}
	r.decideWaiting()
	r.gcInputs()
}

// finalize executes st at its final place and writes its versions; it reports whether the
// result differs from its speculative one (a miss).
func (r *Replica) finalize(st *txnState) bool {
	spec, hadSpec := st.result.Digest, st.writes != nil
	r.execute(st, r.latest, true)
	miss := hadSpec && spec != st.result.Digest
	if miss {
		r.stats.SpecMisses++
	} else if hadSpec {
		r.stats.SpecHits++
	}
	st.final = true
	r.finalSeq++
	st.seq = r.finalSeq
	for k, v := range st.writes {
		r.store[k] = append(r.store[k], version{stamp: st.txn.Stamp, writer: st.txn.ID, value: v, absent: v == nil, seq: st.seq})
	}
	r.history = append(r.history, st)
	r.unvalidated[st.txn.Stamp.Epoch]++
	v := Vote{Txn: st.txn.ID, Epoch: st.txn.Stamp.Epoch, DC: r.self, Digest: st.result.Digest}
	r.myVotes[v.Epoch] = append(r.myVotes[v.Epoch], v)
	r.out.Durable.Votes = append(r.out.Durable.Votes, v)
	r.vote(v)
	return miss
}

// respeculate executes the whole speculative order again on the store.
func (r *Replica) respeculate() {
	for _, st := range r.spec {
		st.writes = nil
	}
	specs := r.spec
	r.spec = nil
	ts := make([]*Txn, 0, len(specs))
	for _, st := range specs {
		delete(r.txns, st.txn.ID)
		ts = append(ts, st.txn)
	}
	r.speculate(ts)
}

// vote records a data center's digest of a transaction and decides it once a majority
// agrees (or, every vote in without one, by the tie-break: the digest of the lowest data
// center among those with the most votes).
func (r *Replica) vote(v Vote) {
	vs := r.votes[v.Txn]
	if vs == nil {
		st := r.txns[v.Txn]
		if st != nil && st.hasDecided && st.validated {
			return // decided and validated here: nothing to learn
		}
		if st == nil && v.Epoch <= r.validatedUpto {
			return // validated and forgotten here
		}
		vs = map[uint32]uint64{}
		r.votes[v.Txn] = vs
	}
	vs[v.DC] = v.Digest
	r.decide(v.Txn)
}

func (r *Replica) decide(id TxnID) {
	st := r.txns[id]
	vs := r.votes[id]
	if st == nil || vs == nil || !st.final {
		return
	}
	if !st.hasDecided {
		count := map[uint64]int{}
		lowest := map[uint64]uint32{}
		for dc, d := range vs {
			count[d]++
			if l, ok := lowest[d]; !ok || dc < l {
				lowest[d] = dc
			}
		}
		maj := len(r.dcs)/2 + 1
		for d, c := range count {
			if c >= maj {
				st.decided, st.hasDecided = d, true
			}
		}
		if !st.hasDecided && len(vs) == len(r.dcs) {
			best, bestCount, bestDC := uint64(0), -1, uint32(0)
			for d, c := range count {
				own := r.opts.Mutation == "tie-own-digest" && d == st.result.Digest
				better := c > bestCount || (c == bestCount && (lowest[d] < bestDC || own))
				if c == bestCount && r.opts.Mutation == "tie-own-digest" && best == st.result.Digest {
					better = false
				}
				if better {
					best, bestCount, bestDC = d, c, lowest[d]
				}
			}
			st.decided, st.hasDecided = best, true
		}
	}
	if !st.hasDecided {
		return
	}
	if st.decided == st.result.Digest {
		r.markValidated(st)
		return
	}
	// This replica diverged: its result is not the one the data centers agreed on. It
	// executes again, from that transaction on, everything it executed finally (its inputs
	// are the same everywhere; the fault was in its execution).
	r.repair(st)
}

func (r *Replica) markValidated(st *txnState) {
	if st.validated {
		return
	}
	st.validated = true
	delete(r.votes, st.txn.ID)
	e := st.txn.Stamp.Epoch
	r.unvalidated[e]--
	if r.unvalidated[e] <= 0 {
		delete(r.unvalidated, e)
		r.advanceValidated()
	}
	r.decideWaiting()
}

func (r *Replica) advanceValidated() {
	for r.validatedUpto < r.closed && r.unvalidated[r.validatedUpto+1] == 0 {
		r.validatedUpto++
	}
	// History before the oldest unvalidated transaction is not needed for repairs, nor are
	// those transactions' states (a missing writer counts as validated).
	n := 0
	for n < len(r.history) && r.history[n].validated && r.history[n].txn.Stamp.Epoch <= r.validatedUpto {
		st := r.history[n]
		if !r.waiting[st.txn.ID] {
			delete(r.txns, st.txn.ID)
		}
		// Its versions never change again: on disk (durable.go), and their keys' older
		// versions are dropped once no read may need them.
		for _, k := range slices.Sorted(maps.Keys(st.writes)) {
			r.out.Durable.Versions = append(r.out.Durable.Versions, StoredVersion{Key: k, Value: st.writes[k], Epoch: st.txn.Stamp.Epoch, Seq: st.seq})
			r.trims = append(r.trims, trim{epoch: st.txn.Stamp.Epoch, key: k})
		}
		r.validatedSeq = st.seq
		n++
	}
	r.history = r.history[n:]
	r.metaDirty = true
	r.trimVersions()
}

// repair executes again the final history from st on, after dropping the versions written
// from st's place on.
func (r *Replica) repair(from *txnState) {
	r.stats.Repairs++
	i := slices.Index(r.history, from)
	if i < 0 {
		return
	}
	redo := slices.Clone(r.history[i:])
	r.finalSeq = from.seq - 1
	for k, vs := range r.store {
		j := len(vs)
		for j > 0 && !vs[j-1].stamp.Less(from.txn.Stamp) {
			j--
		}
		r.store[k] = vs[:j]
	}
	for _, st := range redo {
		old := st.result.Digest
		st.corrupted = true // a fault does not strike twice on one transaction
		r.execute(st, r.latest, true)
		r.finalSeq++
		st.seq = r.finalSeq
		for k, v := range st.writes {
			r.store[k] = append(r.store[k], version{stamp: st.txn.Stamp, writer: st.txn.ID, value: v, absent: v == nil, seq: st.seq})
		}
		if st.result.Digest != old {
			e := st.txn.Stamp.Epoch
			r.myVotes[e] = slices.DeleteFunc(r.myVotes[e], func(v Vote) bool { return v.Txn == st.txn.ID })
			nv := Vote{Txn: st.txn.ID, Epoch: e, DC: r.self, Digest: st.result.Digest}
			r.myVotes[e] = append(r.myVotes[e], nv)
			r.out.Durable.Votes = append(r.out.Durable.Votes, nv)
			if vs := r.votes[st.txn.ID]; vs != nil {
				vs[r.self] = st.result.Digest
			}
		}
	}
	for _, st := range redo {
		if st.hasDecided && st.decided == st.result.Digest {
			r.markValidated(st)
		}
	}
	if len(r.spec) > 0 {
		r.respeculate()
	}
}

// decideWaiting reports the transactions submitted here that may commit: final, and either
// every version they read is validated (their result follows from agreed state: half a round
// trip) or their own result is validated (a round trip).
func (r *Replica) decideWaiting() {
	if len(r.waiting) == 0 {
		return
	}
	ids := make([]TxnID, 0, len(r.waiting))
	for id := range r.waiting {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b TxnID) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, id := range ids {
		st := r.txns[id]
		if st == nil || !st.final {
			continue
		}
		fast := r.depsValidated(st)
		if !st.validated && !fast {
			continue
		}
		delete(r.waiting, id)
		if fast && !st.validated {
			r.stats.FastCommits++
		} else {
			r.stats.SlowCommits++
		}
		out := Outcome{Txn: id, Committed: !st.result.Aborted, Reason: st.result.Reason, Result: st.result, Fast: fast && !st.validated, Seq: st.seq}
		r.out.Outcomes = append(r.out.Outcomes, out)
	}
}

// depsValidated reports whether every version st read was written by a validated transaction
// (or is the initial state). The mutation skips the check.
func (r *Replica) depsValidated(st *txnState) bool {
	if r.opts.Mutation == "skip-validation" {
		return true
	}
	for _, w := range st.deps {
		if d := r.txns[w]; d != nil && !d.validated {
			return false
		}
	}
	return true
}

// gcFloor is the last epoch every data center (this one included) has closed.
func (r *Replica) gcFloor() uint64 {
	floor := r.closed
	for _, dc := range r.dcs {
		if dc != r.self {
			floor = min(floor, r.peerClosed[dc])
		}
	}
	return floor
}

// gcInputs drops the inputs of epochs every data center has closed (no one will ask again).
func (r *Replica) gcInputs() {
	floor := r.gcFloor()
	for e := range r.inputs {
		if e <= floor && e <= r.validatedUpto {
			delete(r.inputs, e)
		}
	}
}

// ReadAt reads keys as of epoch at (at most the validated prefix, at least RetainEpochs below
// it): every transaction of the epochs up to it, none after. Every data center answers alike.
// A read at an epoch whose versions are gone (or, after a restart, were not loaded) is refused:
// the reader starts again at the validated prefix.
func (r *Replica) ReadAt(keys []string, at uint64) ([]Value, error) {
	if at > r.validatedUpto {
		return nil, fmt.Errorf("catenae: epoch %d is not validated here yet (validated up to %d)", at, r.validatedUpto)
	}
	if at < r.retainFrom {
		return nil, fmt.Errorf("catenae: epoch %d is too old to read here (versions kept from epoch %d)", at, r.retainFrom)
	}
	out := make([]Value, 0, len(keys))
	for _, k := range keys {
		var v Value
		vs := r.store[k]
		for j := len(vs) - 1; j >= 0; j-- {
			if vs[j].stamp.Epoch <= at {
				v = Value{Value: slices.Clone(vs[j].value), Found: !vs[j].absent, Version: vs[j].seq}
				break
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// Value is a key's value as of an epoch: Found false when absent (never written, or deleted);
// Version is its writer's chain position (0: never written).
type Value struct {
	Value   []byte
	Found   bool
	Version uint64
}

// ValidatedEpoch is the epoch up to which every transaction is validated here: ReadAt's newest.
func (r *Replica) ValidatedEpoch() uint64 { return r.validatedUpto }

// trim is a key written in a validated epoch.
type trim struct {
	epoch uint64
	key   string
}

// trimVersions drops the versions no read may need any more: of each key written in an epoch
// RetainEpochs below the validated prefix, every version before the newest one at or below
// that epoch (reads at older epochs are refused from then on).
func (r *Replica) trimVersions() {
	if r.validatedUpto < r.opts.Start+r.opts.RetainEpochs {
		return
	}
	floor := r.validatedUpto - r.opts.RetainEpochs
	r.retainFrom = max(r.retainFrom, floor)
	n := 0
	for n < len(r.trims) && r.trims[n].epoch <= floor {
		k := r.trims[n].key
		vs := r.store[k]
		j := len(vs) - 1
		for j > 0 && vs[j].stamp.Epoch > floor {
			j--
		}
		if j > 0 {
			r.store[k] = slices.Delete(vs, 0, j)
		}
		n++
	}
	r.trims = slices.Delete(r.trims, 0, n)
}

// ReadOnly reads keys at the validated prefix: the versions of every transaction of the epochs
// every data center agreed on (0 round trips; about a round trip stale). It returns each key's
// value (nil: absent) and version (0: never written), the same at every data center: a
// transaction that computes writes from them submits them with an OpExpect per key read.
func (r *Replica) ReadOnly(keys []string) (vals [][]byte, versions []uint64, epoch uint64) {
	for _, k := range keys {
		var val []byte
		var seq uint64
		vs := r.store[k]
		for j := len(vs) - 1; j >= 0; j-- {
			if vs[j].stamp.Epoch <= r.validatedUpto {
				val, seq = vs[j].value, vs[j].seq
				break
			}
		}
		vals = append(vals, slices.Clone(val))
		versions = append(versions, seq)
	}
	return vals, versions, r.validatedUpto
}

// HasReady reports whether Ready has something.
func (r *Replica) HasReady() bool { return !r.out.Empty() }

// Ready returns and clears what the runtime must do.
func (r *Replica) Ready() Ready {
	if r.metaDirty {
		r.metaDirty = false
		r.out.Durable.Meta = &Meta{Seq: r.seq, LastNanos: r.lastNanos, SentUpto: r.sentUpto, Closed: r.closed,
			ValidatedUpto: r.validatedUpto, ValidatedSeq: r.validatedSeq}
	}
	if f := r.forgetFloor(); f > r.forgot {
		r.forgot = f
		r.out.Durable.Forget = f
	}
	rd := r.out
	r.out = Ready{}
	return rd
}

// forgetFloor is the last epoch whose inputs and votes no one needs from this data center's
// disk: validated here (a restart does not execute it again), closed everywhere (no one asks
// for its inputs), validated everywhere (no one waits for its votes).
func (r *Replica) forgetFloor() uint64 {
	f := min(r.validatedUpto, r.gcFloor())
	for _, dc := range r.dcs {
		if dc != r.self {
			f = min(f, r.peerValidated[dc])
		}
	}
	return f
}

// Pending returns the transactions submitted here and not yet decided.
func (r *Replica) Pending() int { return len(r.waiting) }

// messageSize estimates a message's bytes on the wire (Stats.BytesSent; the simulator measures
// the encoded messages).
func messageSize(m Message) int {
	if m.Req != nil {
		return 16
	}
	n := 24
	for _, ts := range m.Epoch.Epochs {
		n += 8
		for _, t := range ts {
			n += 40
			for _, op := range t.Proc.Ops {
				n += 10 + len(op.Key) + len(op.Value)
			}
		}
	}
	n += 24 * len(m.Epoch.Votes)
	return n
}

// ValidatedUpto returns the epoch up to which every transaction is validated here.
func (r *Replica) ValidatedUpto() uint64 { return r.validatedUpto }

// StateDigest is a digest of the state as of epoch upto (every key's newest version of the
// epochs up to it): data centers that agree on it hold the same data.
func (r *Replica) StateDigest(upto uint64) uint64 {
	keys := make([]string, 0, len(r.store))
	for k := range r.store {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := fnv.New64a()
	var n [8]byte
	for _, k := range keys {
		vs := r.store[k]
		for j := len(vs) - 1; j >= 0; j-- {
			if vs[j].stamp.Epoch <= upto {
				binary.BigEndian.PutUint64(n[:], uint64(len(k)))
				h.Write(n[:])
				h.Write([]byte(k))
				binary.BigEndian.PutUint64(n[:], uint64(len(vs[j].value)))
				h.Write(n[:])
				h.Write(vs[j].value)
				break
			}
		}
	}
	return h.Sum64()
}

// SetMutation switches a running replica to a deliberately broken variant (Mutations), for the
// tests of runtimes that build replicas themselves; "" restores the protocol.
func (r *Replica) SetMutation(name string) error {
	o := r.opts
	o.Mutation = name
	if err := o.Validate(); err != nil {
		return err
	}
	r.opts = o
	return nil
}
