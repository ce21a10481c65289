// Package catenae is Meridian's Catenae (liu-thesis abstract, 1.3.1, 1.4, 1.5, 3.1.3, 3.1.4):
// serializable transactions over fully replicated data centers, distributed and validated by
// periodic epoch messages pushed among the data centers, executed speculatively in each one in
// a deterministic chain order, and committed in half to one round trip. The thesis gives only a
// summary; docs/catenae.md names every decision this package takes where it is silent.
//
// A Replica is one data center's server and a sans-IO state machine, like internal/sdur: the
// runtime feeds it client submissions (Submit), the other data centers' messages (Step) and
// time (Tick), and carries out its Ready (messages to send, outcomes to report). It reads no
// clock and draws no randomness; the same inputs give the same outputs.
package catenae

import (
	"fmt"
	"time"
)

// TxnID names a transaction: the data center that stamped it and that data center's sequence.
type TxnID struct {
	DC  uint32
	Seq uint64
}

func (id TxnID) String() string { return fmt.Sprintf("c%d.%d", id.DC, id.Seq) }

// OpKind is what one operation of a transaction's procedure does.
type OpKind uint8

const (
	// OpRead returns the key's value (as of the transaction's place in the order).
	OpRead OpKind = iota + 1
	// OpWrite sets the key to Value.
	OpWrite
	// OpAppend appends the integer Delta to the key's list (list-append histories).
	OpAppend
	// OpAdd adds Delta to the key's integer (an absent key is 0).
	OpAdd
	// OpExpect aborts the transaction, alike at every data center, unless the key's version
	// is still Version (0: never written): a client that read the key earlier (at the
	// validated prefix) and computed its writes from it commits only if nothing overwrote it
	// since (optimistic validation inside the deterministic order).
	OpExpect
	// OpDelete removes the key (a version that says it is absent).
	OpDelete
)

func (k OpKind) String() string {
	switch k {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpAppend:
		return "append"
	case OpAdd:
		return "add"
	case OpExpect:
		return "expect"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", k)
}

// Op is one operation of a transaction's procedure. A procedure is a list of operations run in
// order on the keys it declares: deterministic, its keys known before it runs — the
// "chainable" transactions of 1.5.
type Op struct {
	Kind    OpKind
	Key     string
	Value   []byte
	Delta   int64
	Version uint64 // OpExpect
}

// Proc is a transaction as a client submits it: its operations (the procedure). The keys it
// accesses are those of its operations; the replica refuses procedures that are not chainable.
type Proc struct {
	Ops []Op
}

// Keys returns the procedure's keys, each once, in the order first accessed.
func (p Proc) Keys() []string {
	seen := map[string]bool{}
	var out []string
	for _, op := range p.Ops {
		if !seen[op.Key] {
			seen[op.Key] = true
			out = append(out, op.Key)
		}
	}
	return out
}

// Validate refuses a procedure that is not chainable: no operations, an empty key, an unknown
// operation, more operations than maxOps.
func (p Proc) Validate(maxOps int) error {
	if len(p.Ops) == 0 {
		return fmt.Errorf("catenae: a transaction with no operations")
	}
	if maxOps > 0 && len(p.Ops) > maxOps {
		return fmt.Errorf("catenae: %d operations, limit %d", len(p.Ops), maxOps)
	}
	for i, op := range p.Ops {
		if op.Key == "" {
			return fmt.Errorf("catenae: operation %d has no key (a chainable transaction declares every key it accesses)", i)
		}
		switch op.Kind {
		case OpRead, OpWrite, OpAppend, OpAdd, OpExpect, OpDelete:
		default:
			return fmt.Errorf("catenae: operation %d is of unknown kind %d", i, op.Kind)
		}
	}
	return nil
}

// Stamp places a transaction in the order: its epoch, then the stamping data center's clock,
// then the data center and its sequence (a total order: every data center sorts alike).
type Stamp struct {
	Epoch uint64
	Nanos int64
	DC    uint32
	Seq   uint64
}

// Compare orders stamps (the chain order of docs/catenae.md): -1, 0 or 1.
func (a Stamp) Compare(b Stamp) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// Less orders stamps: the chain order of docs/catenae.md.
func (a Stamp) Less(b Stamp) bool {
	if a.Epoch != b.Epoch {
		return a.Epoch < b.Epoch
	}
	if a.Nanos != b.Nanos {
		return a.Nanos < b.Nanos
	}
	if a.DC != b.DC {
		return a.DC < b.DC
	}
	return a.Seq < b.Seq
}

// Txn is a stamped transaction, as epoch messages carry it.
type Txn struct {
	ID    TxnID
	Stamp Stamp
	Proc  Proc
}

// Result is what a transaction's execution returned: the values of its reads, in the order of
// its read operations (nil: absent), and the digest every data center compares (validation).
type Result struct {
	Reads [][]byte
	// Versions are the versions of the keys read (0: never written), in the order of Reads:
	// the final position of their writer in the chain order, the same at every data center.
	Versions []uint64
	// Aborted: an OpExpect failed (Reason says which key); nothing was written.
	Aborted bool
	Reason  string
	// Key is the key whose OpExpect failed (Aborted).
	Key    string
	Digest uint64
}

// Vote is a data center's result digest of one transaction (the validation payload).
type Vote struct {
	Txn    TxnID
	Epoch  uint64
	DC     uint32
	Digest uint64
}

// EpochMsg is a data center's periodic push (1.4, 3.1.3): the transactions it stamped into its
// last epochs (distribution; the newest Redundancy epochs again, against loss), the digests of
// the transactions it executed since its last message (validation), and how far it has closed
// (so senders may drop old inputs).
type EpochMsg struct {
	From uint32
	// Epochs are the sender's inputs per epoch, for Upto-len(Epochs)+1 … Upto (the sender's
	// last ended epoch); an epoch without transactions is an empty list, still an input.
	Upto   uint64
	Epochs [][]*Txn
	Votes  []Vote
	// Closed is the last epoch the sender has closed (every input in); Validated the last up
	// to which every transaction is validated there (the others stop repeating their votes
	// below it).
	Closed    uint64
	Validated uint64
}

// Request asks a data center to send its inputs again from epoch From (a gap redundancy did
// not cover).
type Request struct {
	From  uint32
	Epoch uint64
}

// Message is one message to another data center: one of EpochMsg or Request.
type Message struct {
	To    uint32
	Epoch *EpochMsg
	Req   *Request
}

// Outcome tells the runtime a transaction submitted at this data center is decided.
type Outcome struct {
	Txn       TxnID
	Committed bool
	Reason    string
	Result    Result
	// Fast: committed at close, every version it read already validated (half a round
	// trip); else it waited for its own validation (a round trip).
	Fast bool
	// Seq is its position in the chain order: the version of the keys it wrote.
	Seq uint64
}

// Ready is what the replica asks the runtime to do. Messages leave after the replica's state
// is durable (Snapshot), as etcd raft's Ready.
type Ready struct {
	Messages []Message
	Outcomes []Outcome
	// Durable is what must be on disk before Messages leave and Outcomes are reported (the
	// incremental form of Saved; durable.go).
	Durable Durable
}

// Empty reports whether there is nothing to do.
func (r *Ready) Empty() bool {
	return len(r.Messages) == 0 && len(r.Outcomes) == 0 && r.Durable.Empty()
}

// Options configure a replica.
type Options struct {
	// EpochLength is the epoch interval: a data center's message for epoch e leaves once its
	// clock passes the end of e. Default 10ms.
	EpochLength time.Duration
	// Redundancy is how many earlier epochs each message repeats (MeteorShower's l). Default 3.
	Redundancy int
	// RequestAfter: an epoch missing from a data center for this long after a later one
	// arrived is asked for again. Default 200ms.
	RequestAfter time.Duration
	// Start is the epoch the data centers start after (agreed: the keyspace's creation
	// epoch); everything before it is closed and empty.
	Start uint64
	// MaxOps bounds a procedure. Default 64.
	MaxOps int
	// RetainEpochs is how many epochs below the validated prefix old versions are kept, so
	// that the reads of one read-only transaction, spread over a few requests, all read at
	// the epoch the first one fixed (ReadAt). Default 500 (5s of 10ms epochs).
	RetainEpochs uint64
	// MaxOpen bounds the transactions waiting in open epochs (speculation re-executes among
	// them: its cost grows with their number); a submission beyond it is refused (the replica
	// is saturated). Default 4096.
	MaxOpen int
	// Mutation deliberately breaks the protocol (see Mutations).
	Mutation string
	// Corrupt, when set, is called for every transaction this replica executes at close and
	// may change its result (a fault: a replica that executes wrongly, which validation must
	// outvote). Tests and the simulator only.
	Corrupt func(id TxnID) bool
}

// Mutations are deliberately broken variants the simulation must catch.
var Mutations = map[string]string{
	"close-on-majority":      "an epoch closes once a majority of data centers' messages are in, not every one (the missing inputs are executed later, out of order)",
	"skip-validation":        "a transaction commits at close whatever it read: no version it read need be validated, and its own digest is never compared",
	"tie-own-digest":         "a tie between digests is broken in favour of the replica's own, not by the lowest data center id (replicas decide differently)",
	"expose-speculative":     "a transaction's speculative result is reported as committed as soon as it is executed, before its epoch closes",
	"restart-forgets-inputs": "a data center's saved state omits its own inputs: after a crash it answers a peer that missed its epoch message with an empty epoch",
	"ignore-expect":          "OpExpect never aborts: an optimistic transaction commits writes computed from reads that were overwritten (lost updates)",
}

// EnsureDefaults fills zero fields.
func (o Options) EnsureDefaults() Options {
	if o.EpochLength <= 0 {
		o.EpochLength = 10 * time.Millisecond
	}
	if o.Redundancy <= 0 {
		o.Redundancy = 3
	}
	if o.RequestAfter <= 0 {
		o.RequestAfter = 200 * time.Millisecond
	}
	if o.MaxOps <= 0 {
		o.MaxOps = 64
	}
	if o.MaxOpen <= 0 {
		o.MaxOpen = 4096
	}
	if o.RetainEpochs == 0 {
		o.RetainEpochs = 500
	}
	return o
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Mutation != "" {
		if _, ok := Mutations[o.Mutation]; !ok {
			return fmt.Errorf("catenae: unknown mutation %q", o.Mutation)
		}
	}
	if o.Redundancy > 64 {
		return fmt.Errorf("catenae: redundancy %d above 64", o.Redundancy)
	}
	return nil
}
