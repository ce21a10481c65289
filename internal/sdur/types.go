package sdur

import (
	"fmt"
	"slices"
	"time"
)

// TxnID names a transaction: the node that submitted it and that node's sequence number.
type TxnID struct {
	Node uint32
	Seq  uint64
}

func (id TxnID) String() string { return fmt.Sprintf("t%d.%d", id.Node, id.Seq) }

// Write is one key written by a transaction (a value, or a deletion).
type Write struct {
	Key    string
	Value  []byte
	Delete bool
}

// Part is the part of a transaction a partition certifies: its reads and writes of that
// partition's keys and the snapshot its reads there were served at (Algorithm 1, line 13). A
// global transaction is broadcast as one Part to each of its partitions (Algorithm 2, submit).
type Part struct {
	ID TxnID
	// Partition is the partition this part is for.
	Partition uint32
	// Partitions are every partition of the transaction, sorted; more than one: global.
	Partitions []uint32
	// Snapshot is the snapshot counter the transaction's reads of this partition saw (the
	// first read fixed it). A transaction that wrote this partition without reading it took
	// the snapshot of its submitter's replica (an implicit read, see Options).
	Snapshot uint64
	// Reads and Writes are this partition's keys; Reads need not repeat the written keys (a
	// written key is certified as read: writeset ⊆ readset).
	Reads  []string
	Writes []Write
	// Submitter is the node told the outcome.
	Submitter uint32
}

// Global reports whether the transaction spans more than one partition.
func (p *Part) Global() bool { return len(p.Partitions) > 1 }

// Validate checks a part before it is broadcast (the runtime calls it; a replica delivering an
// invalid part aborts it alike everywhere).
func (p *Part) Validate(partition uint32, maxKeys int) error {
	if p.Partition != partition {
		return fmt.Errorf("transaction %s: its part for partition %d was delivered to partition %d", p.ID, p.Partition, partition)
	}
	if len(p.Partitions) == 0 || !slices.IsSorted(p.Partitions) || !slices.Contains(p.Partitions, partition) {
		return fmt.Errorf("transaction %s: partitions %v must be sorted and include partition %d", p.ID, p.Partitions, partition)
	}
	for i := 1; i < len(p.Partitions); i++ {
		if p.Partitions[i] == p.Partitions[i-1] {
			return fmt.Errorf("transaction %s: partition %d listed twice", p.ID, p.Partitions[i])
		}
	}
	if n := len(p.Reads) + len(p.Writes); maxKeys > 0 && n > maxKeys {
		return fmt.Errorf("transaction %s: %d keys in partition %d, above the limit of %d", p.ID, n, partition, maxKeys)
	}
	return nil
}

// EntryKind is the kind of a log entry of a partition.
type EntryKind uint8

const (
	// EntryTxn is a transaction's part for this partition (abcast(p, t)).
	EntryTxn EntryKind = iota + 1
	// EntryAbortRequest asks the partition to abort a global transaction it may never deliver
	// (its submitter crashed after reaching only some partitions, IV-F): whichever of the
	// transaction and the request the partition delivers first decides its vote.
	EntryAbortRequest
	// EntryTick advances the tick counter (thresholds counted in ticks) and carries the
	// snapshot floor.
	EntryTick
	// EntryConfig changes the reordering threshold at run time (IV-E: "replicas can change
	// the reordering threshold by broadcasting a new value of k").
	EntryConfig
)

// Entry is one delivered entry of a partition's log.
type Entry struct {
	Kind EntryKind
	// Txn is an EntryTxn's part.
	Txn *Part
	// Abort names an EntryAbortRequest's transaction and its partitions.
	Abort *AbortRequest
	// Floor (EntryTick): transactions whose snapshot is older abort ("snapshot too old"); the
	// leader sets it SnapshotWindow completions below its own counter, so per-key state older
	// than it can be dropped.
	Floor uint64
	// Threshold (EntryConfig) is the new reordering threshold.
	Threshold *Threshold
}

// ThresholdUnit says what a reordering threshold counts.
type ThresholdUnit uint8

const (
	// Entries: the paper's k, counted in delivered entries (transactions, and the ticks and
	// requests that the log carries too, so that an idle partition still completes globals).
	Entries ThresholdUnit = iota + 1
	// Ticks: counted in tick entries, which the partition's leader appends every tick interval
	// while a global waits: a threshold in time.
	Ticks
)

// Threshold is a reordering threshold (IV-E).
type Threshold struct {
	Unit ThresholdUnit
	// K is the number of entries or ticks; 0 disables reordering (plain SDUR).
	K uint64
}

func (t Threshold) String() string {
	if t.Unit == Ticks {
		return fmt.Sprintf("%d ticks", t.K)
	}
	return fmt.Sprintf("%d entries", t.K)
}

// AbortRequest asks Partition's log to abort Txn (recovery, IV-F).
type AbortRequest struct {
	Txn        TxnID
	Partitions []uint32
	// Partition is the partition whose log it must be appended to.
	Partition uint32
}

// Vote is a partition's certification vote for a global transaction, sent by each of its
// replicas at delivery to every server of the transaction's other partitions (Algorithm 2,
// line 22). Every replica of a partition votes alike, so the first vote of a partition counts.
type Vote struct {
	Txn        TxnID
	Partition  uint32
	Commit     bool
	Partitions []uint32
	// Reason and Key explain an abort vote.
	Reason string
	Key    string
}

// VoteRequest asks the replicas of Partition for their vote on Txn again (votes travel on
// links that may lose them; the asking replica waits for it at the head of its list).
type VoteRequest struct {
	Txn       TxnID
	Partition uint32
	// From is the asking partition.
	From uint32
}

// Reason says why a transaction aborted.
type Reason string

const (
	// Conflict: a concurrent transaction wrote a key it read (or, for a global, read a key it
	// writes): Key names it.
	ReasonConflict Reason = "conflict"
	// ReasonPendingConflict: a global met a pending transaction on Key.
	ReasonPendingConflict Reason = "conflict with a pending transaction"
	// ReasonVote: another partition voted to abort.
	ReasonVote Reason = "another partition voted abort"
	// ReasonSnapshotTooOld: its snapshot is below the partition's floor.
	ReasonSnapshotTooOld Reason = "snapshot too old"
	// ReasonRecovered: the transaction's submitter did not reach every partition and the
	// partition delivered the abort request first (IV-F).
	ReasonRecovered Reason = "aborted by recovery (the submitter did not reach every partition)"
	// ReasonOverloaded: the pending list is full.
	ReasonOverloaded Reason = "the partition's pending list is full"
	// ReasonInvalid: the part did not validate.
	ReasonInvalid Reason = "invalid"
)

// Outcome is a completed transaction at this replica.
type Outcome struct {
	Txn       TxnID
	Partition uint32
	// Partitions are the transaction's partitions.
	Partitions []uint32
	Submitter  uint32
	Global     bool
	Committed  bool
	Reason     Reason
	Key        string
	// Index is the completion's snapshot counter (its writes' version); 0 when it aborted at
	// delivery without entering the pending list.
	Index uint64
	// Reordered: a local that leapt at least one pending global.
	Reordered bool
}

// Apply is a committed transaction's writes, to be applied at version Index (the snapshot
// counter after it, lines 37-39 corrected: SC+1).
type Apply struct {
	Index  uint64
	Txn    TxnID
	Writes []Write
}

// Ready is what the replica asks the runtime to do. Applies must be durable before Outcomes
// are reported and Votes leave (a vote or an outcome is a promise about the applied state).
type Ready struct {
	Applies       []Apply
	Outcomes      []Outcome
	Votes         []Vote
	VoteRequests  []VoteRequest
	AbortRequests []AbortRequest
}

// Empty reports whether there is nothing to do.
func (r *Ready) Empty() bool {
	return len(r.Applies)+len(r.Outcomes)+len(r.Votes)+len(r.VoteRequests)+len(r.AbortRequests) == 0
}

// Options configure a replica. Zero fields take the documented defaults (EnsureDefaults).
type Options struct {
	// Threshold is the initial reordering threshold (an EntryConfig changes it). Default:
	// 0 entries, plain SDUR.
	Threshold Threshold
	// VoteRetry: a global at the head waiting for a partition's vote asks its replicas again
	// after this long, and then at this interval. Default 500ms.
	VoteRetry time.Duration
	// RecoveryTimeout: a global at the head that has waited this long for a vote asks that
	// partition's log to abort it (IV-F). Default 5s.
	RecoveryTimeout time.Duration
	// Retention bounds the remembered transaction IDs (duplicate deliveries, votes given,
	// abort requests honoured), in entries. Default 1<<18.
	Retention int
	// EarlyVotes bounds the votes kept for transactions not yet delivered here. Default 1<<16.
	EarlyVotes int
	// MaxPending bounds the pending list; a delivery beyond it aborts (alike everywhere).
	// Default 1<<16.
	MaxPending int
	// Mutation deliberately breaks the protocol (the simulator must catch it): see Mutations.
	Mutation string
}

// EnsureDefaults fills zero fields.
func (o Options) EnsureDefaults() Options {
	if o.Threshold.Unit == 0 {
		o.Threshold.Unit = Entries
	}
	if o.VoteRetry <= 0 {
		o.VoteRetry = 500 * time.Millisecond
	}
	if o.RecoveryTimeout <= 0 {
		o.RecoveryTimeout = 5 * time.Second
	}
	if o.Retention <= 0 {
		o.Retention = 1 << 18
	}
	if o.EarlyVotes <= 0 {
		o.EarlyVotes = 1 << 16
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 1 << 16
	}
	return o
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Threshold.Unit != Entries && o.Threshold.Unit != Ticks {
		return fmt.Errorf("sdur: threshold unit %d is neither entries nor ticks", o.Threshold.Unit)
	}
	if o.Threshold.K > 1<<20 {
		return fmt.Errorf("sdur: reordering threshold %d is above the limit of %d", o.Threshold.K, 1<<20)
	}
	if o.RecoveryTimeout < o.VoteRetry {
		return fmt.Errorf("sdur: recovery_timeout %v is below vote_retry %v", o.RecoveryTimeout, o.VoteRetry)
	}
	if o.Mutation != "" {
		if _, ok := Mutations[o.Mutation]; !ok {
			return fmt.Errorf("sdur: unknown mutation %q", o.Mutation)
		}
	}
	return nil
}

// Mutations are deliberately broken variants the simulator must catch.
var Mutations = map[string]string{
	"global-test-one-way":       "the certification of a global checks only that it read nothing a concurrent transaction wrote, not that it wrote nothing one read (drops the write→read half of ctest, Algorithm 2 line 47)",
	"leap-ignores-conflicts":    "a local leaps pending globals without checking it invalidates nothing they read or wrote (drops lines 59-60)",
	"complete-before-threshold": "a global completes as soon as its votes are in, before its reordering threshold (replicas reorder differently and diverge)",
	"paper-certification":       "Algorithm 2's certification as printed: against the committed database and the pending list as they are when a transaction is delivered, which depend on when each replica received earlier globals' votes (replicas of a partition decide differently)",
}
