// Package epaxos is Egalitarian Paxos (Moraru, Andersen, Kaminsky, "There is more consensus
// in egalitarian parliaments", SOSP 2013, and its technical report CMU-PDL-13-111) as a
// sans-IO state machine: the baseline the Canopus thesis compares against (4.6, "we use the
// publicly available implementation of EPaxos from the paper's authors").
//
// Every replica leads its own instances. A command leader pre-accepts a batch of commands
// with a sequence number and dependencies taken from the commands it knows that interfere
// (the same key, one a write; a scan interferes with every write). When a fast quorum
// replies without adding anything, the instance commits in one round trip (the fast path);
// otherwise the leader takes the union and runs a Paxos accept round at a majority (the slow
// path). Replicas execute committed instances in dependency order: strongly connected
// components of the dependency graph in reverse topological order, each in sequence order
// (Tarjan, TR §4.4).
//
// Choices the papers leave open or got wrong, each explained where it is made:
//   - The fast quorum is N−1 for odd N (TR §4.3, "basic EPaxos"; NewNode derives it for
//     any N), not the optimized F+⌊(F+1)/2⌋: the
//     optimized quorum needs TryPreAccept in recovery, whose check that the old leader was
//     in the initial fast quorum has no known way to be done without thrifty quorums
//     (Ryabinin, Gotsman, Sutra, OPODIS 2025, §7), and the thesis ran EPaxos thrifty off.
//     For three replicas both quorums are two.
//   - Each replica keeps two ballots per instance, the one it promised and the one its
//     value was taken in; recovery reads the latter (Sutra, "On the correctness of
//     Egalitarian Paxos", IPL 2020: one variable for both lets replicas diverge).
//   - Dependencies are a vector: deps[i] is the highest instance of the i-th replica the
//     instance depends on, and execution waits for every instance of that replica up to it
//     (as the authors' implementation does).
package epaxos

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// Status is an instance's state at a replica, in the order it advances.
type Status uint32

const (
	StatusNone Status = iota
	StatusPreAccepted
	StatusAccepted
	StatusCommitted
	StatusExecuted
)

func (s Status) String() string {
	return [...]string{"none", "pre-accepted", "accepted", "committed", "executed"}[min(int(s), 4)]
}

// Mutations: deliberately broken variants the simulator must catch.
const (
	// MutationFastShort commits on the fast path with one reply fewer than a fast quorum.
	MutationFastShort = "fast-path-one-reply-short"
	// MutationIgnoreDeps executes an instance as soon as it commits, without waiting for
	// its dependencies.
	MutationIgnoreDeps = "execute-ignoring-deps"
	// MutationRecoveryIgnoresAccepted has recovery ignore accepted values (it restarts from
	// pre-accepted ones or a no-op).
	MutationRecoveryIgnoresAccepted = "recovery-ignores-accepted"
)

// Options are one EPaxos instance space's timings and limits.
type Options struct {
	// BatchInterval: a leader with commands waiting starts an instance this long after the
	// first arrived, or at once with BatchMax waiting (4.6.2: 5 ms or 1000 requests).
	BatchInterval time.Duration
	BatchMax      int
	// FastPathTimeout: how long a leader waits past a majority for a fast quorum's replies
	// before it takes the slow path.
	FastPathTimeout time.Duration
	// RecoveryTimeout: a replica starts recovering (explicit prepare) an instance it knows
	// of that has not committed this long after it learnt of it, plus a random share of it.
	RecoveryTimeout time.Duration
	// ReportInterval: how often a replica tells the others how far it has executed
	// (garbage collection, and how a replica learns of instances it missed).
	ReportInterval time.Duration
	// MaxInstances bounds the instances a replica keeps (not yet executed by every replica);
	// a leader at the bound refuses new commands.
	MaxInstances int
}

// Validate checks the options.
func (o Options) Validate() error {
	switch {
	case o.BatchInterval <= 0:
		return fmt.Errorf("epaxos: batch interval %v: want > 0", o.BatchInterval)
	case o.BatchMax < 1:
		return fmt.Errorf("epaxos: batch max %d: want ≥ 1", o.BatchMax)
	case o.FastPathTimeout <= 0:
		return fmt.Errorf("epaxos: fast path timeout %v: want > 0", o.FastPathTimeout)
	case o.RecoveryTimeout <= 0:
		return fmt.Errorf("epaxos: recovery timeout %v: want > 0", o.RecoveryTimeout)
	case o.ReportInterval <= 0:
		return fmt.Errorf("epaxos: report interval %v: want > 0", o.ReportInterval)
	case o.MaxInstances < 1:
		return fmt.Errorf("epaxos: max instances %d: want ≥ 1", o.MaxInstances)
	}
	return nil
}

// RawReader reads a replica's saved state.
type RawReader interface {
	ScanRaw(start, end []byte, limit int, fn func(key, value []byte) bool) error
	GetRaw(key []byte) ([]byte, bool, error)
}

// Config is one replica of one instance space.
type Config struct {
	ID       uint32
	Replicas []uint32 // every replica, this one included
	Options  Options
	Rand     *rand.Rand
	Store    RawReader
	// Prefix is where the instances are stored (raw keys).
	Prefix   []byte
	Mutation string
}

// ID names an instance: its command leader and slot (slots start at 1).
type ID struct {
	Replica uint32
	Slot    uint64
}

func (id ID) String() string { return fmt.Sprintf("%d.%d", id.Replica, id.Slot) }

// Ballot orders attempts to decide an instance; (0, leader) is the leader's own.
type Ballot struct {
	Number  uint64
	Replica uint32
}

func (b Ballot) Less(o Ballot) bool {
	return b.Number < o.Number || (b.Number == o.Number && b.Replica < o.Replica)
}

func ballotOf(p *peerpb.EPaxosBallot) Ballot {
	return Ballot{p.GetNumber(), p.GetReplica()}
}
func (b Ballot) pb() *peerpb.EPaxosBallot {
	return &peerpb.EPaxosBallot{Number: b.Number, Replica: b.Replica}
}

// Message is a message to send.
type Message struct {
	To   uint32
	Body *peerpb.EPaxosEnvelope
}

// Executed is an instance executed at this replica, in execution order, with its
// committed attributes.
type Executed struct {
	ID    ID
	Attrs *peerpb.EPaxosAttrs
}

// Ready is a replica's output. Raw must be durable before Messages leave (the engine's
// Ready contract); Executed are applied in the same batch as Raw.
type Ready struct {
	Raw      []storage.RawOp
	Messages []Message
	Executed []Executed
	// Refused are commands no instance took (the replica is at MaxInstances).
	Refused []*peerpb.EPaxosCommand
}

// phase of an instance this replica leads (as command leader or as recoverer).
type phase int

const (
	phasePreAccept phase = iota + 1
	phaseAccept
	phasePrepare
)

type lead struct {
	phase  phase
	ballot Ballot
	// initial are the attributes the leader pre-accepted with (the fast path needs every
	// reply to leave them unchanged).
	initSeq  uint64
	initDeps []uint64
	allEqual bool
	// merged are the union of the replies' attributes.
	seq  uint64
	deps []uint64
	oks  map[uint32]bool
	// prepared are the replies to a prepare, by replier.
	prepared map[uint32]*peerpb.EPaxosPrepareReply
	started  time.Time
}

type instance struct {
	id     ID
	status Status
	// bal is the highest ballot this replica promised; vbal the ballot its value (attrs)
	// was taken in (Sutra 2019: they must be two variables).
	bal, vbal Ballot
	attrs     *peerpb.EPaxosAttrs
	// unchanged: this replica pre-accepted in the leader's own ballot and added nothing to
	// the leader's attributes. Recovery counts only such replicas: a replica that changed
	// them was not in a fast quorum, and with e = 1 (three replicas) its value could
	// otherwise be taken for the one that committed.
	unchanged bool
	lead      *lead
	// recoverAt is when this replica starts recovering the instance if it has not
	// committed by then (zero: not scheduled).
	recoverAt time.Time
}

// keyConflicts are, per replica index, the highest instance holding a command on a key,
// and the highest holding a write of it; seqAny and seqWrite are the highest sequence numbers
// among each (a read takes only the writes', so reads of a key never change each other's
// attributes: they do not interfere, and the fast path stays open to them).
type keyConflicts struct {
	any, write       []uint64
	seqAny, seqWrite uint64
}

// Node is one replica.
type Node struct {
	cfg   Config
	index map[uint32]int // replica → position in cfg.Replicas
	// majority and fastQuorum count this replica; recoverQuorum is how many identical
	// pre-accepted replies from others than the leader, at its ballot, recovery needs to
	// take their value (N − majority, at least 1).
	majority, fastQuorum, recoverQuorum int

	insts    map[ID]*instance
	nextSlot uint64
	// executedUpTo[i]: every instance of replica i up to it is executed here.
	executedUpTo []uint64
	// known[i]: the highest slot of replica i this replica knows exists.
	known []uint64
	// collected[i]: instances of replica i up to it are dropped (executed everywhere).
	collected []uint64
	reports   map[uint32][]uint64
	conflicts map[string]*keyConflicts
	// scans are the conflicts of scans (every write interferes), writes of all writes.
	scans, writes keyConflicts
	// pending are committed instances not yet executed; open those not committed.
	pending, open map[ID]bool

	// wakeAt is the earliest time an open instance needs Tick (a recovery or fast-path
	// deadline): ticks before it skip the open instances (hundreds are in flight at load).
	wakeAt time.Time

	batch      []*peerpb.EPaxosCommand
	batchStart time.Time
	lastReport time.Time
	now        time.Time
	out        Ready
	err        error
}

// NewNode loads a replica's saved instances.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Options.Validate(); err != nil {
		return nil, err
	}
	if cfg.Rand == nil || cfg.Store == nil {
		return nil, fmt.Errorf("epaxos: a config needs Rand and Store")
	}
	reps := slices.Clone(cfg.Replicas)
	slices.Sort(reps)
	if len(reps) == 0 || len(slices.Compact(slices.Clone(reps))) != len(reps) || !slices.Contains(reps, cfg.ID) {
		return nil, fmt.Errorf("epaxos: replicas %v: want distinct replicas including %d", cfg.Replicas, cfg.ID)
	}
	cfg.Replicas = reps
	n := len(reps)
	nd := &Node{cfg: cfg, index: map[uint32]int{}, majority: n/2 + 1, insts: map[ID]*instance{},
		nextSlot: 1, executedUpTo: make([]uint64, n), known: make([]uint64, n), collected: make([]uint64, n),
		reports: map[uint32][]uint64{}, conflicts: map[string]*keyConflicts{}, pending: map[ID]bool{}, open: map[ID]bool{}}
	for i, r := range reps {
		nd.index[r] = i
	}
	// Recovery takes a value that e = N − majority replicas other than the leader
	// pre-accepted in the leader's ballot: fewer could agree with a conflicting command's
	// quorum and the leader without any of them seeing it (majority + e + 1 > N). A value
	// committed on the fast path must show that often in any majority other than the
	// leader: fast quorum − 1 + majority − (N − 1) ≥ e, so the fast quorum is 2e (N − 1
	// for odd N, the basic EPaxos quorum of TR §4.3), and at least a majority.
	nd.recoverQuorum = max(1, n-nd.majority)
	nd.fastQuorum = max(nd.majority, 2*(n-nd.majority))
	nd.scans = keyConflicts{any: make([]uint64, n), write: make([]uint64, n)}
	nd.writes = keyConflicts{any: make([]uint64, n), write: make([]uint64, n)}
	if err := nd.load(); err != nil {
		return nil, err
	}
	return nd, nil
}

// Saved state: prefix|'i'|replica|slot → EPaxosInstance; prefix|'s' → the next own slot;
// prefix|'g' → the collected vector.
func (n *Node) instKey(id ID) []byte {
	b := append(slices.Clone(n.cfg.Prefix), 'i')
	b = binary.BigEndian.AppendUint32(b, id.Replica)
	return binary.BigEndian.AppendUint64(b, id.Slot)
}
func (n *Node) slotKey() []byte      { return append(slices.Clone(n.cfg.Prefix), 's') }
func (n *Node) collectedKey() []byte { return append(slices.Clone(n.cfg.Prefix), 'g') }

func (n *Node) load() error {
	if b, ok, err := n.cfg.Store.GetRaw(n.slotKey()); err != nil {
		return fmt.Errorf("epaxos: read next slot: %w", err)
	} else if ok && len(b) == 8 {
		n.nextSlot = binary.BigEndian.Uint64(b)
	}
	if b, ok, err := n.cfg.Store.GetRaw(n.collectedKey()); err != nil {
		return fmt.Errorf("epaxos: read collected: %w", err)
	} else if ok {
		var ex peerpb.EPaxosExecuted
		if err := proto.Unmarshal(b, &ex); err != nil || len(ex.GetExecuted()) != len(n.collected) {
			return fmt.Errorf("epaxos: collected state undecodable (%v): %w", err, storage.ErrCorrupt)
		}
		copy(n.collected, ex.GetExecuted())
		copy(n.executedUpTo, ex.GetExecuted())
		copy(n.known, ex.GetExecuted())
	}
	start := append(slices.Clone(n.cfg.Prefix), 'i')
	end := append(slices.Clone(n.cfg.Prefix), 'j')
	var loadErr error
	err := n.cfg.Store.ScanRaw(start, end, 0, func(_, v []byte) bool {
		var rec peerpb.EPaxosInstance
		if err := proto.Unmarshal(v, &rec); err != nil {
			loadErr = fmt.Errorf("epaxos: saved instance undecodable: %v: %w", err, storage.ErrCorrupt)
			return false
		}
		i, ok := n.index[rec.GetReplica()]
		if !ok {
			return true // a replica no longer in the set
		}
		id := ID{rec.GetReplica(), rec.GetSlot()}
		inst := &instance{id: id, status: Status(rec.GetStatus()), bal: ballotOf(rec.GetBallot()), vbal: ballotOf(rec.GetVballot()), attrs: rec.GetAttrs(), unchanged: rec.GetUnchanged()}
		n.insts[id] = inst
		n.known[i] = max(n.known[i], id.Slot)
		if inst.attrs != nil {
			n.noteConflicts(inst)
		}
		switch inst.status {
		case StatusCommitted:
			n.pending[id] = true
		case StatusNone, StatusPreAccepted, StatusAccepted:
			n.open[id] = true // recovery is scheduled at the first tick
		}
		if id.Replica == n.cfg.ID {
			n.nextSlot = max(n.nextSlot, id.Slot+1)
		}
		return true
	})
	if err == nil {
		err = loadErr
	}
	if err != nil {
		return fmt.Errorf("epaxos: load instances: %w", err)
	}
	for i := range n.executedUpTo {
		n.advanceExecuted(i)
	}
	return nil
}

// Err is the error that stopped the replica (nil while it runs).
func (n *Node) Err() error { return n.err }

// Committed reports an instance's committed attributes (the simulator's agreement check).
func (n *Node) Committed(id ID) (*peerpb.EPaxosAttrs, bool) {
	inst := n.insts[id]
	if inst == nil || inst.status < StatusCommitted {
		return nil, false
	}
	return inst.attrs, true
}

// Instances returns the IDs of the instances this replica holds.
func (n *Node) Instances() []ID { return slices.Collect(maps.Keys(n.insts)) }

// Propose queues a command for this replica's next instance.
func (n *Node) Propose(now time.Time, cmd *peerpb.EPaxosCommand) {
	n.now = now
	if len(n.batch) == 0 {
		n.batchStart = now
	}
	n.batch = append(n.batch, cmd)
	if len(n.batch) >= n.cfg.Options.BatchMax {
		n.flush()
	}
}

// Tick advances time: batches leave, stalled instances are recovered, executed prefixes
// are reported.
func (n *Node) Tick(now time.Time) {
	n.now = now
	if len(n.batch) > 0 && now.Sub(n.batchStart) >= n.cfg.Options.BatchInterval {
		n.flush()
	}
	if !now.Before(n.wakeAt) {
		n.wakeAt = now.Add(time.Hour)
		// The due instances, in a fixed order (runs replay); the others only move wakeAt.
		due := map[ID]bool{}
		for id := range n.open {
			inst := n.insts[id]
			if inst == nil || inst.status >= StatusCommitted {
				delete(n.open, id)
				continue
			}
			next := inst.recoverAt
			if l := inst.lead; l != nil && l.phase == phasePreAccept && l.ballot.Number == 0 {
				if d := l.started.Add(n.cfg.Options.FastPathTimeout); d.Before(next) {
					next = d
				}
			}
			if inst.recoverAt.IsZero() || !now.Before(next) {
				due[id] = true
			} else {
				n.wake(next)
			}
		}
		for _, id := range sortIDs(due) {
			inst := n.insts[id]
			if l := inst.lead; l != nil && l.phase == phasePreAccept && l.ballot.Number == 0 {
				if deadline := l.started.Add(n.cfg.Options.FastPathTimeout); now.Before(deadline) {
					n.wake(deadline)
				} else if len(l.oks)+1 >= n.majority {
					n.slowPath(inst)
					continue
				}
			}
			switch {
			case inst.recoverAt.IsZero():
				n.scheduleRecovery(inst)
			case !now.Before(inst.recoverAt):
				n.startPrepare(inst)
			default:
				n.wake(inst.recoverAt)
			}
		}
	}
	if now.Sub(n.lastReport) >= n.cfg.Options.ReportInterval {
		n.lastReport = now
		n.reports[n.cfg.ID] = slices.Clone(n.executedUpTo)
		for _, to := range n.cfg.Replicas {
			if to != n.cfg.ID {
				n.send(to, &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_Executed{Executed: &peerpb.EPaxosExecuted{Executed: slices.Clone(n.executedUpTo)}}})
			}
		}
		n.collect()
	}
}

// sortIDs orders a set's instances (maps iterate at random; runs must replay).
func sortIDs(set map[ID]bool) []ID {
	return slices.SortedFunc(maps.Keys(set), func(a, b ID) int {
		return cmp.Or(cmp.Compare(a.Replica, b.Replica), cmp.Compare(a.Slot, b.Slot))
	})
}

func (n *Node) scheduleRecovery(inst *instance) {
	t := n.cfg.Options.RecoveryTimeout
	inst.recoverAt = n.now.Add(t + time.Duration(n.cfg.Rand.Int64N(int64(t))))
	n.wake(inst.recoverAt)
}

// wake makes Tick look at the open instances at t at the latest.
func (n *Node) wake(t time.Time) {
	if t.Before(n.wakeAt) || n.wakeAt.IsZero() {
		n.wakeAt = t
	}
}

// HasReady reports whether there is output.
func (n *Node) HasReady() bool {
	return len(n.out.Raw) > 0 || len(n.out.Messages) > 0 || len(n.out.Executed) > 0 || len(n.out.Refused) > 0
}

// Ready returns the output and clears it.
func (n *Node) Ready() Ready {
	rd := n.out
	n.out = Ready{}
	return rd
}

func (n *Node) send(to uint32, body *peerpb.EPaxosEnvelope) {
	n.out.Messages = append(n.out.Messages, Message{To: to, Body: body})
}

func (n *Node) broadcast(body func() *peerpb.EPaxosEnvelope) {
	for _, to := range n.cfg.Replicas {
		if to != n.cfg.ID {
			n.send(to, body())
		}
	}
}

func (n *Node) save(inst *instance) {
	b, err := proto.Marshal(&peerpb.EPaxosInstance{Replica: inst.id.Replica, Slot: inst.id.Slot, Status: uint32(inst.status),
		Ballot: inst.bal.pb(), Vballot: inst.vbal.pb(), Attrs: inst.attrs, Unchanged: inst.unchanged})
	if err != nil {
		n.err = fmt.Errorf("epaxos: encode instance %s: %w", inst.id, err)
		return
	}
	n.out.Raw = append(n.out.Raw, storage.RawOp{Key: n.instKey(inst.id), Value: b})
}

// get returns the instance, creating an empty one (status none) when this replica has not
// heard of it; nil for an instance already collected or of an unknown replica.
func (n *Node) get(id ID) *instance {
	i, ok := n.index[id.Replica]
	if !ok || id.Slot == 0 || id.Slot <= n.collected[i] {
		return nil
	}
	inst := n.insts[id]
	if inst == nil {
		inst = &instance{id: id}
		n.insts[id] = inst
		n.open[id] = true
		n.wake(n.now)
		if id.Replica == n.cfg.ID && id.Slot >= n.nextSlot {
			// Only a slot this replica saved before it sent anything is known elsewhere;
			// never reuse one.
			n.nextSlot = id.Slot + 1
		}
		n.known[i] = max(n.known[i], id.Slot)
	}
	return inst
}

// flush starts an instance with the batched commands (TR Fig. 2, phase 1, at the leader).
func (n *Node) flush() {
	cmds := n.batch
	n.batch = nil
	if len(n.insts) >= n.cfg.Options.MaxInstances {
		n.out.Refused = append(n.out.Refused, cmds...)
		return
	}
	id := ID{n.cfg.ID, n.nextSlot}
	n.nextSlot++
	n.out.Raw = append(n.out.Raw, storage.RawOp{Key: n.slotKey(), Value: binary.BigEndian.AppendUint64(nil, n.nextSlot)})
	inst := n.get(id)
	if inst == nil || inst.status != StatusNone {
		n.err = fmt.Errorf("epaxos: own slot %d is already in use (collected up to %d): the saved next slot was lost", id.Slot, n.collected[n.index[n.cfg.ID]])
		return
	}
	inst.attrs = &peerpb.EPaxosAttrs{Commands: cmds, Deps: make([]uint64, len(n.cfg.Replicas))}
	n.preAcceptAt(inst, Ballot{0, n.cfg.ID})
}

// preAcceptAt runs phase 1 at ballot b from this replica: its own attributes, then the
// others'.
func (n *Node) preAcceptAt(inst *instance, b Ballot) {
	seq, deps := n.attributes(inst.id, inst.attrs.GetCommands(), inst.attrs.GetSeq(), inst.attrs.GetDeps())
	inst.attrs = &peerpb.EPaxosAttrs{Commands: inst.attrs.GetCommands(), Seq: seq, Deps: deps}
	inst.status, inst.bal, inst.vbal, inst.unchanged = StatusPreAccepted, b, b, false
	n.noteConflicts(inst)
	n.save(inst)
	inst.lead = &lead{phase: phasePreAccept, ballot: b, initSeq: seq, initDeps: slices.Clone(deps), allEqual: true,
		seq: seq, deps: slices.Clone(deps), oks: map[uint32]bool{}, started: n.now}
	n.scheduleRecovery(inst)
	n.wake(n.now.Add(n.cfg.Options.FastPathTimeout))
	attrs := inst.attrs
	n.broadcast(func() *peerpb.EPaxosEnvelope {
		return &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_PreAccept{PreAccept: &peerpb.EPaxosPreAccept{
			Replica: inst.id.Replica, Slot: inst.id.Slot, Ballot: b.pb(), Attrs: attrs}}}
	})
	if len(n.cfg.Replicas) == 1 {
		n.commit(inst, attrs)
	}
}

// interferes reports whether a command with these keys interferes with what conf records,
// and the attributes it adds: the highest interfering instances and sequence number.
func (n *Node) attributes(id ID, cmds []*peerpb.EPaxosCommand, seq uint64, deps []uint64) (uint64, []uint64) {
	out := make([]uint64, len(n.cfg.Replicas))
	copy(out, deps)
	merge := func(vec []uint64, s uint64) {
		for i, d := range vec {
			out[i] = max(out[i], d)
		}
		seq = max(seq, s+1)
	}
	for _, c := range cmds {
		switch {
		case c.GetScan():
			merge(n.writes.write, n.writes.seqWrite)
		case c.GetWrite():
			merge(n.scans.any, n.scans.seqAny)
			if kc := n.conflicts[string(c.GetKey())]; kc != nil {
				merge(kc.any, kc.seqAny)
			}
		default:
			if kc := n.conflicts[string(c.GetKey())]; kc != nil {
				merge(kc.write, kc.seqWrite)
			}
		}
	}
	// An instance never depends on itself: the prefix of its own replica stops below it
	// (every interfering instance of the leader's below it is in that prefix).
	if i := n.index[id.Replica]; out[i] == id.Slot {
		out[i] = id.Slot - 1
	}
	return seq, out
}

// noteConflicts records an instance's commands in the conflict maps.
func (n *Node) noteConflicts(inst *instance) {
	i := n.index[inst.id.Replica]
	s := inst.id.Slot
	seq := inst.attrs.GetSeq()
	for _, c := range inst.attrs.GetCommands() {
		switch {
		case c.GetScan():
			n.scans.any[i] = max(n.scans.any[i], s)
			n.scans.seqAny = max(n.scans.seqAny, seq)
		case c.GetWrite():
			n.writes.write[i] = max(n.writes.write[i], s)
			n.writes.seqWrite = max(n.writes.seqWrite, seq)
			fallthrough
		default:
			k := string(c.GetKey())
			kc := n.conflicts[k]
			if kc == nil {
				kc = &keyConflicts{any: make([]uint64, len(n.cfg.Replicas)), write: make([]uint64, len(n.cfg.Replicas))}
				n.conflicts[k] = kc
			}
			kc.any[i] = max(kc.any[i], s)
			kc.seqAny = max(kc.seqAny, seq)
			if c.GetWrite() {
				kc.write[i] = max(kc.write[i], s)
				kc.seqWrite = max(kc.seqWrite, seq)
			}
		}
	}
}

// Step handles a message from another replica.
func (n *Node) Step(now time.Time, from uint32, env *peerpb.EPaxosEnvelope) {
	n.now = now
	if _, ok := n.index[from]; !ok || from == n.cfg.ID || n.err != nil {
		return
	}
	switch b := env.GetBody().(type) {
	case *peerpb.EPaxosEnvelope_PreAccept:
		n.onPreAccept(from, b.PreAccept)
	case *peerpb.EPaxosEnvelope_PreAcceptReply:
		n.onPreAcceptReply(from, b.PreAcceptReply)
	case *peerpb.EPaxosEnvelope_Accept:
		n.onAccept(from, b.Accept)
	case *peerpb.EPaxosEnvelope_AcceptReply:
		n.onAcceptReply(from, b.AcceptReply)
	case *peerpb.EPaxosEnvelope_Commit:
		if inst := n.get(ID{b.Commit.GetReplica(), b.Commit.GetSlot()}); inst != nil && n.validAttrs(b.Commit.GetAttrs()) {
			n.commitLocal(inst, b.Commit.GetAttrs())
		}
	case *peerpb.EPaxosEnvelope_Prepare:
		n.onPrepare(from, b.Prepare)
	case *peerpb.EPaxosEnvelope_PrepareReply:
		n.onPrepareReply(from, b.PrepareReply)
	case *peerpb.EPaxosEnvelope_Executed:
		n.onExecuted(from, b.Executed.GetExecuted())
	}
}

// validAttrs: attributes from the wire have one dependency per replica.
func (n *Node) validAttrs(a *peerpb.EPaxosAttrs) bool {
	return a != nil && len(a.GetDeps()) == len(n.cfg.Replicas)
}

// refreshCommitted sends a committed instance's value to a replica still deciding it.
func (n *Node) refreshCommitted(to uint32, inst *instance) {
	n.send(to, &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_Commit{Commit: &peerpb.EPaxosCommit{
		Replica: inst.id.Replica, Slot: inst.id.Slot, Attrs: inst.attrs}}})
}

// onPreAccept: TR Fig. 2, phase 1 at a replica: add what this replica knows interferes.
func (n *Node) onPreAccept(from uint32, m *peerpb.EPaxosPreAccept) {
	inst := n.get(ID{m.GetReplica(), m.GetSlot()})
	if inst == nil || !n.validAttrs(m.GetAttrs()) {
		return
	}
	b := ballotOf(m.GetBallot())
	reply := &peerpb.EPaxosPreAcceptReply{Replica: m.GetReplica(), Slot: m.GetSlot(), Ballot: m.GetBallot()}
	switch {
	case inst.status >= StatusCommitted:
		n.refreshCommitted(from, inst)
		return
	case b.Less(inst.bal):
		reply.Promised = inst.bal.pb()
	case inst.status >= StatusPreAccepted && inst.vbal == b:
		// A duplicate: answer what this replica answered, never attributes computed anew
		// (recovery relies on what it said).
		if inst.status != StatusPreAccepted {
			return
		}
		reply.Ok, reply.Seq, reply.Deps = true, inst.attrs.GetSeq(), inst.attrs.GetDeps()
	default:
		seq, deps := n.attributes(inst.id, m.GetAttrs().GetCommands(), m.GetAttrs().GetSeq(), m.GetAttrs().GetDeps())
		inst.attrs = &peerpb.EPaxosAttrs{Commands: m.GetAttrs().GetCommands(), Seq: seq, Deps: deps}
		inst.status, inst.bal, inst.vbal = StatusPreAccepted, b, b
		inst.unchanged = b.Number == 0 && seq == m.GetAttrs().GetSeq() && slices.Equal(deps, m.GetAttrs().GetDeps())
		if inst.lead != nil && inst.lead.ballot.Less(b) {
			inst.lead = nil // another replica took over
		}
		n.noteConflicts(inst)
		n.save(inst)
		if inst.recoverAt.IsZero() || inst.lead == nil {
			n.scheduleRecovery(inst)
		}
		reply.Ok, reply.Seq, reply.Deps = true, seq, deps
	}
	n.send(from, &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_PreAcceptReply{PreAcceptReply: reply}})
}

func (n *Node) onPreAcceptReply(from uint32, m *peerpb.EPaxosPreAcceptReply) {
	inst := n.insts[ID{m.GetReplica(), m.GetSlot()}]
	if inst == nil || inst.lead == nil || inst.lead.phase != phasePreAccept || ballotOf(m.GetBallot()) != inst.lead.ballot || inst.status >= StatusCommitted {
		return
	}
	l := inst.lead
	if !m.GetOk() {
		n.outbid(inst, ballotOf(m.GetPromised()))
		return
	}
	if l.oks[from] || len(m.GetDeps()) != len(n.cfg.Replicas) {
		return
	}
	l.oks[from] = true
	if m.GetSeq() != l.initSeq || !slices.Equal(m.GetDeps(), l.initDeps) {
		l.allEqual = false
	}
	l.seq = max(l.seq, m.GetSeq())
	for i, d := range m.GetDeps() {
		l.deps[i] = max(l.deps[i], d)
	}
	replies := len(l.oks) + 1 // the leader's own
	fast := n.fastQuorum
	if n.cfg.Mutation == MutationFastShort {
		fast--
	}
	switch {
	case l.ballot.Number == 0 && l.allEqual && replies >= fast:
		// The fast path (TR Fig. 2, step 2): a fast quorum left the attributes unchanged.
		n.commit(inst, inst.attrs)
	case replies >= n.majority && (!l.allEqual || l.ballot.Number != 0 || replies == len(n.cfg.Replicas)):
		n.slowPath(inst)
	}
}

// outbid: another replica promised a higher ballot; leave the instance to it (recovery takes
// over if it stalls).
func (n *Node) outbid(inst *instance, promised Ballot) {
	if inst.bal.Less(promised) {
		inst.bal = promised
		n.save(inst)
	}
	inst.lead = nil
	n.scheduleRecovery(inst)
}

// slowPath: the Paxos accept round with the union of the replies' attributes (TR Fig. 2,
// phase 2).
func (n *Node) slowPath(inst *instance) {
	l := inst.lead
	attrs := &peerpb.EPaxosAttrs{Commands: inst.attrs.GetCommands(), Seq: l.seq, Deps: slices.Clone(l.deps)}
	n.acceptAt(inst, l.ballot, attrs)
}

func (n *Node) acceptAt(inst *instance, b Ballot, attrs *peerpb.EPaxosAttrs) {
	inst.attrs, inst.status, inst.bal, inst.vbal, inst.unchanged = attrs, StatusAccepted, b, b, false
	n.noteConflicts(inst)
	n.save(inst)
	inst.lead = &lead{phase: phaseAccept, ballot: b, oks: map[uint32]bool{}, started: n.now}
	n.scheduleRecovery(inst)
	n.broadcast(func() *peerpb.EPaxosEnvelope {
		return &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_Accept{Accept: &peerpb.EPaxosAccept{
			Replica: inst.id.Replica, Slot: inst.id.Slot, Ballot: b.pb(), Attrs: attrs}}}
	})
	if n.majority == 1 {
		n.commit(inst, attrs)
	}
}

func (n *Node) onAccept(from uint32, m *peerpb.EPaxosAccept) {
	inst := n.get(ID{m.GetReplica(), m.GetSlot()})
	if inst == nil || !n.validAttrs(m.GetAttrs()) {
		return
	}
	if inst.status >= StatusCommitted {
		n.refreshCommitted(from, inst)
		return
	}
	b := ballotOf(m.GetBallot())
	reply := &peerpb.EPaxosAcceptReply{Replica: m.GetReplica(), Slot: m.GetSlot(), Ballot: m.GetBallot()}
	if b.Less(inst.bal) {
		reply.Promised = inst.bal.pb()
	} else {
		inst.attrs, inst.status, inst.bal, inst.vbal, inst.unchanged = m.GetAttrs(), StatusAccepted, b, b, false
		if inst.lead != nil && inst.lead.ballot.Less(b) {
			inst.lead = nil
		}
		n.noteConflicts(inst)
		n.save(inst)
		n.scheduleRecovery(inst)
		reply.Ok = true
	}
	n.send(from, &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_AcceptReply{AcceptReply: reply}})
}

func (n *Node) onAcceptReply(from uint32, m *peerpb.EPaxosAcceptReply) {
	inst := n.insts[ID{m.GetReplica(), m.GetSlot()}]
	if inst == nil || inst.lead == nil || inst.lead.phase != phaseAccept || ballotOf(m.GetBallot()) != inst.lead.ballot || inst.status >= StatusCommitted {
		return
	}
	if !m.GetOk() {
		n.outbid(inst, ballotOf(m.GetPromised()))
		return
	}
	inst.lead.oks[from] = true
	if len(inst.lead.oks)+1 >= n.majority {
		n.commit(inst, inst.attrs)
	}
}

// commit decides an instance here and tells every replica (TR Fig. 2, commit).
func (n *Node) commit(inst *instance, attrs *peerpb.EPaxosAttrs) {
	n.commitLocal(inst, attrs)
	n.broadcast(func() *peerpb.EPaxosEnvelope {
		return &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_Commit{Commit: &peerpb.EPaxosCommit{
			Replica: inst.id.Replica, Slot: inst.id.Slot, Attrs: attrs}}}
	})
}

func (n *Node) commitLocal(inst *instance, attrs *peerpb.EPaxosAttrs) {
	if inst.status >= StatusCommitted {
		return
	}
	inst.attrs, inst.status, inst.lead, inst.recoverAt = attrs, StatusCommitted, nil, time.Time{}
	delete(n.open, inst.id)
	n.noteConflicts(inst)
	n.save(inst)
	n.pending[inst.id] = true
	n.execute()
}

// startPrepare: explicit prepare (TR Fig. 3) of an instance that has not committed in
// time, at a ballot above every one this replica has seen for it.
func (n *Node) startPrepare(inst *instance) {
	b := Ballot{inst.bal.Number + 1, n.cfg.ID}
	inst.bal = b
	n.save(inst) // the promise to itself
	inst.lead = &lead{phase: phasePrepare, ballot: b, prepared: map[uint32]*peerpb.EPaxosPrepareReply{}, started: n.now}
	inst.lead.prepared[n.cfg.ID] = n.prepareReply(inst, b)
	n.scheduleRecovery(inst)
	n.broadcast(func() *peerpb.EPaxosEnvelope {
		return &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_Prepare{Prepare: &peerpb.EPaxosPrepare{
			Replica: inst.id.Replica, Slot: inst.id.Slot, Ballot: b.pb()}}}
	})
	n.decidePrepared(inst)
}

func (n *Node) prepareReply(inst *instance, b Ballot) *peerpb.EPaxosPrepareReply {
	return &peerpb.EPaxosPrepareReply{Replica: inst.id.Replica, Slot: inst.id.Slot, Ballot: b.pb(), Ok: true,
		Status: uint32(min(inst.status, StatusCommitted)), Vballot: inst.vbal.pb(), Attrs: inst.attrs, Unchanged: inst.unchanged}
}

func (n *Node) onPrepare(from uint32, m *peerpb.EPaxosPrepare) {
	inst := n.get(ID{m.GetReplica(), m.GetSlot()})
	if inst == nil {
		return
	}
	b := ballotOf(m.GetBallot())
	var reply *peerpb.EPaxosPrepareReply
	switch {
	case inst.status >= StatusCommitted:
		reply = n.prepareReply(inst, b)
	case b.Less(inst.bal):
		reply = &peerpb.EPaxosPrepareReply{Replica: m.GetReplica(), Slot: m.GetSlot(), Ballot: m.GetBallot(), Promised: inst.bal.pb()}
	default:
		if inst.bal != b {
			inst.bal = b
			n.save(inst)
		}
		if inst.lead != nil && inst.lead.ballot.Less(b) {
			inst.lead = nil
		}
		n.scheduleRecovery(inst)
		reply = n.prepareReply(inst, b)
	}
	n.send(from, &peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_PrepareReply{PrepareReply: reply}})
}

func (n *Node) onPrepareReply(from uint32, m *peerpb.EPaxosPrepareReply) {
	inst := n.insts[ID{m.GetReplica(), m.GetSlot()}]
	if inst == nil || inst.lead == nil || inst.lead.phase != phasePrepare || ballotOf(m.GetBallot()) != inst.lead.ballot || inst.status >= StatusCommitted {
		return
	}
	if !m.GetOk() {
		n.outbid(inst, ballotOf(m.GetPromised()))
		return
	}
	if m.GetAttrs() != nil && !n.validAttrs(m.GetAttrs()) {
		return
	}
	inst.lead.prepared[from] = m
	n.decidePrepared(inst)
}

// decidePrepared chooses what to do once a majority answered a prepare (TR Fig. 3, with
// the value ballots of Sutra 2019).
func (n *Node) decidePrepared(inst *instance) {
	l := inst.lead
	if len(l.prepared) < n.majority {
		return
	}
	repliers := slices.Sorted(maps.Keys(l.prepared)) // a fixed order: runs replay
	// 1. A committed value is the value.
	for _, r := range repliers {
		if p := l.prepared[r]; Status(p.GetStatus()) >= StatusCommitted {
			n.commit(inst, p.GetAttrs())
			return
		}
	}
	// 2. The accepted value of the highest value ballot.
	if n.cfg.Mutation != MutationRecoveryIgnoresAccepted {
		var best *peerpb.EPaxosPrepareReply
		for _, r := range repliers {
			p := l.prepared[r]
			if Status(p.GetStatus()) == StatusAccepted && (best == nil || ballotOf(best.GetVballot()).Less(ballotOf(p.GetVballot()))) {
				best = p
			}
		}
		if best != nil {
			n.acceptAt(inst, l.ballot, best.GetAttrs())
			return
		}
	}
	// 3. Enough replicas other than the leader pre-accepted the leader's attributes
	// unchanged in its own ballot: the value may have committed on the fast path, and it is
	// the leader's (so every such reply holds the same one).
	initial := Ballot{0, inst.id.Replica}
	same := 0
	for _, from := range repliers {
		p := l.prepared[from]
		if from == inst.id.Replica || Status(p.GetStatus()) != StatusPreAccepted || ballotOf(p.GetVballot()) != initial || !p.GetUnchanged() {
			continue
		}
		if same++; same >= n.recoverQuorum {
			n.acceptAt(inst, l.ballot, p.GetAttrs())
			return
		}
	}
	// 4. Some replica pre-accepted the commands: run phase 1 again at this ballot (never the
	// fast path: the ballot is not the leader's).
	var best *peerpb.EPaxosPrepareReply
	for _, r := range repliers {
		p := l.prepared[r]
		if Status(p.GetStatus()) >= StatusPreAccepted && p.GetAttrs() != nil &&
			(best == nil || ballotOf(best.GetVballot()).Less(ballotOf(p.GetVballot()))) {
			best = p
		}
	}
	if best != nil {
		inst.attrs = &peerpb.EPaxosAttrs{Commands: best.GetAttrs().GetCommands(), Deps: make([]uint64, len(n.cfg.Replicas))}
		n.preAcceptAt(inst, l.ballot)
		return
	}
	// 5. No replica of a majority has it: no fast or slow path can have decided a value
	// (each needs a majority), so a no-op is safe.
	n.acceptAt(inst, l.ballot, &peerpb.EPaxosAttrs{Deps: make([]uint64, len(n.cfg.Replicas))})
}

// execute runs every committed instance whose dependencies are executed (TR §4.4: Tarjan's
// strongly connected components, each in sequence order).
func (n *Node) execute() {
	if len(n.pending) == 0 {
		return
	}
	for _, id := range sortIDs(n.pending) {
		if n.pending[id] {
			n.executeFrom(id)
		}
	}
}

// maxVisit bounds one search of the dependency graph; a larger one resumes at the next
// commit or tick.
const maxVisit = 1 << 20

// executeFrom runs Tarjan's algorithm from root over the instances it depends on and
// executes every component that is complete (all of its dependencies committed).
func (n *Node) executeFrom(root ID) {
	type frame struct {
		id   ID
		next []ID // dependencies still to visit
	}
	index := map[ID]int{}
	low := map[ID]int{}
	onStack := map[ID]bool{}
	var stack []ID
	counter := 0
	blocked := false
	depsOf := func(id ID) []ID {
		inst := n.insts[id]
		if n.cfg.Mutation == MutationIgnoreDeps {
			return nil
		}
		var out []ID
		for i, d := range inst.attrs.GetDeps() {
			r := n.cfg.Replicas[i]
			for s := max(n.executedUpTo[i], n.collected[i]) + 1; s <= d; s++ {
				w := ID{r, s}
				if w == id {
					continue
				}
				if o := n.insts[w]; o != nil && o.status == StatusExecuted {
					continue
				}
				out = append(out, w)
			}
		}
		return out
	}
	var frames []frame
	push := func(id ID) {
		index[id], low[id] = counter, counter
		counter++
		stack = append(stack, id)
		onStack[id] = true
		frames = append(frames, frame{id: id, next: depsOf(id)})
	}
	push(root)
	for len(frames) > 0 && !blocked {
		if counter > maxVisit {
			return
		}
		f := &frames[len(frames)-1]
		if len(f.next) > 0 {
			w := f.next[0]
			f.next = f.next[1:]
			wi := n.get(w)
			if wi == nil {
				continue // collected: executed everywhere
			}
			if wi.status < StatusCommitted {
				blocked = true
				if wi.recoverAt.IsZero() {
					n.scheduleRecovery(wi)
				}
				break
			}
			if _, seen := index[w]; !seen {
				push(w)
			} else if onStack[w] {
				low[f.id] = min(low[f.id], index[w])
			}
			continue
		}
		v := f.id
		frames = frames[:len(frames)-1]
		if len(frames) > 0 {
			p := frames[len(frames)-1].id
			low[p] = min(low[p], low[v])
		}
		if low[v] != index[v] {
			continue
		}
		var scc []ID
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			scc = append(scc, w)
			if w == v {
				break
			}
		}
		slices.SortFunc(scc, func(a, b ID) int {
			return cmp.Or(cmp.Compare(n.insts[a].attrs.GetSeq(), n.insts[b].attrs.GetSeq()),
				cmp.Compare(a.Replica, b.Replica), cmp.Compare(a.Slot, b.Slot))
		})
		for _, id := range scc {
			n.executeOne(n.insts[id])
		}
	}
}

func (n *Node) executeOne(inst *instance) {
	inst.status = StatusExecuted
	delete(n.pending, inst.id)
	n.save(inst)
	n.out.Executed = append(n.out.Executed, Executed{ID: inst.id, Attrs: inst.attrs})
	n.advanceExecuted(n.index[inst.id.Replica])
}

func (n *Node) advanceExecuted(i int) {
	r := n.cfg.Replicas[i]
	for {
		inst := n.insts[ID{r, n.executedUpTo[i] + 1}]
		if inst == nil || inst.status != StatusExecuted {
			return
		}
		n.executedUpTo[i]++
	}
}

// maxGapFill bounds the placeholders one report creates for instances this replica has
// not heard of.
const maxGapFill = 1024

// onExecuted: a replica's executed prefix. Instances below it that this replica never
// heard of get placeholders (recovery learns them); those every replica has executed are
// collected.
func (n *Node) onExecuted(from uint32, executed []uint64) {
	if len(executed) != len(n.cfg.Replicas) {
		return
	}
	n.reports[from] = slices.Clone(executed)
	for i, e := range executed {
		r := n.cfg.Replicas[i]
		for s, filled := max(n.executedUpTo[i], n.collected[i])+1, 0; s <= e && filled < maxGapFill; s++ {
			if _, ok := n.insts[ID{r, s}]; !ok {
				if inst := n.get(ID{r, s}); inst != nil {
					n.scheduleRecovery(inst)
					filled++
				}
			}
		}
	}
}

// collect drops the instances every replica has executed.
func (n *Node) collect() {
	if len(n.reports) < len(n.cfg.Replicas) {
		return
	}
	changed := false
	lows := slices.Clone(n.executedUpTo)
	for _, rep := range n.reports {
		for i := range lows {
			lows[i] = min(lows[i], rep[i])
		}
	}
	from := slices.Clone(n.collected)
	for i := range n.collected {
		n.collected[i] = max(n.collected[i], lows[i])
	}
	for i, r := range n.cfg.Replicas {
		for s := from[i] + 1; s <= lows[i]; s++ {
			id := ID{r, s}
			if inst := n.insts[id]; inst != nil {
				n.forgetConflicts(inst)
				delete(n.insts, id)
				delete(n.open, id)
				delete(n.pending, id)
			}
		}
		if lows[i] > from[i] {
			n.out.Raw = append(n.out.Raw, storage.RawOp{Key: n.instKey(ID{r, from[i] + 1}), End: n.instKey(ID{r, lows[i] + 1}), Delete: true})
			changed = true
		}
	}
	if changed {
		b, err := proto.Marshal(&peerpb.EPaxosExecuted{Executed: slices.Clone(n.collected)})
		if err != nil {
			n.err = fmt.Errorf("epaxos: encode collected: %w", err)
			return
		}
		n.out.Raw = append(n.out.Raw, storage.RawOp{Key: n.collectedKey(), Value: b})
	}
}

// forgetConflicts drops a key's conflicts once every instance they name is collected.
func (n *Node) forgetConflicts(inst *instance) {
	for _, c := range inst.attrs.GetCommands() {
		k := string(c.GetKey())
		kc := n.conflicts[k]
		if kc == nil {
			continue
		}
		live := false
		for i := range kc.any {
			live = live || kc.any[i] > n.collected[i]
		}
		if !live {
			delete(n.conflicts, k)
		}
	}
}
