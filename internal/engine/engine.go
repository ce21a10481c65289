// Package engine is the contract between Meridian's runtimes and its replication protocols
// (DESIGN.md section 4, sans-IO protocol cores). Every protocol — quorum, MeteorShower,
// GlobLease, Raft, and those to come — is an Engine: a deterministic state machine that the
// runtime feeds with client requests (Propose), peer messages (Step) and the passage of time
// (Tick), and whose output it takes with Ready. An engine never blocks, never reads a clock,
// never touches the network; it reads storage synchronously through a Reader.
//
// The Ready contract is etcd raft's: a Ready's Writes (and Raw writes) are durable before any
// of its Messages or Replies leave the node, and Readies are released in order. The node
// runtime (internal/runtime/node), the deterministic simulator (internal/tools/sim) and the
// emulated WAN all keep it, so the same engine code runs everywhere.
//
// Protocols register themselves (Register) with what the runtime, the gateway, the simulator
// and the benchmarks need to know about them; those packages name no protocol and reach one
// only through this registry. A node hosts one engine per protocol that one of its keyspaces
// uses (Host), and routes requests by the keyspace's protocol and peer messages by the
// Envelope's engine ID.
package engine

import (
	"fmt"
	"time"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// Op is a client operation.
type Op int

const (
	OpGet Op = iota + 1
	OpPut
	OpDelete
	OpScan
	// OpMoveMaster moves the master (or the leader) of a key to a region (protocols with
	// masters or leaders).
	OpMoveMaster
	// OpCommand runs a state machine command (Request.Command) on a keyspace whose protocol
	// takes commands (the cluster metadata group); its result is Result.Output.
	OpCommand
	// OpTxnRead reads one key of a transactional keyspace (txn_mode other than none) at the
	// transaction's snapshot of the key's partition (Request.Txn.Snapshots; none yet: the
	// serving replica's latest) and returns it with that snapshot (Result.Txn.Snapshot).
	OpTxnRead
	// OpTxnCommit submits a transaction on a transactional keyspace (Request.Txn): it is
	// certified by the keyspace's transaction protocol and commits or aborts
	// (Result.Txn.Committed; an abort is a result, not an error).
	OpTxnCommit
)

func (o Op) String() string {
	switch o {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpScan:
		return "scan"
	case OpMoveMaster:
		return "move-master"
	case OpCommand:
		return "command"
	case OpTxnRead:
		return "txn-read"
	case OpTxnCommit:
		return "txn-commit"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// IsWrite reports whether the operation writes a key.
func (o Op) IsWrite() bool { return o == OpPut || o == OpDelete }

// Request is a validated client request handed to an engine.
type Request struct {
	// ID is assigned by the runtime, unique among the node's requests in flight.
	ID       uint64
	Op       Op
	Keyspace string
	Key      []byte
	Value    []byte
	// Start, End and Limit describe a scan range [Start, End); End empty is unbounded.
	Start, End []byte
	Limit      int
	// Level is the consistency level (its values are the protocol's; "" = the keyspace's
	// default).
	Level    config.Level
	Deadline time.Time
	// MinVersion, when set, is folded into the coordinator's clock before a write is stamped,
	// so a client session's later writes are newer than everything it has seen.
	MinVersion hlc.Version
	// WriteMode is a write's mode for protocols that have them ("" = the keyspace default).
	WriteMode string
	// Region is the target region of OpMoveMaster.
	Region string
	// Command is an OpCommand's command, encoded by the keyspace's protocol.
	Command []byte
	// WaitAll (writes): once the level is met, keep waiting for the acknowledgement of every
	// replica that is up, until the deadline; the result names the replicas that did not
	// acknowledge (Unacked). Cluster metadata uses it so that a change returns once every
	// node has it, or says which have not.
	WaitAll bool
	// Txn is a transaction's read (OpTxnRead) or the transaction to commit (OpTxnCommit).
	Txn *TxnRequest
}

// TxnRequest is what a transaction operation carries beyond Request's fields.
type TxnRequest struct {
	// Reads are the keys the transaction read and did not write (OpTxnCommit).
	Reads [][]byte
	// ReadOnly (OpTxnRead): a read of a read-only transaction, at the keyspace's newest
	// snapshot vector when Snapshots is empty (sdur: a globally consistent snapshot, no
	// commit needed; the result's Vector is the snapshots to pass to the transaction's other
	// reads).
	ReadOnly bool
	// ReadVersions are the versions its reads returned (TxnResult.Version), one per read,
	// or none: 2PC validates them at prepare; SDUR certifies against the snapshots instead.
	ReadVersions []uint64
	// Writes are its buffered writes (OpTxnCommit), one per key.
	Writes []TxnWrite
	// Snapshots are the snapshots its reads were served at so far, one per partition: every
	// later read of a partition is served at the same snapshot, and certification checks the
	// reads against the writes committed after it (Geo-SDUR Algorithm 1).
	Snapshots []TxnSnapshot
}

// TxnWrite is one buffered write of a transaction: a value, or a deletion.
type TxnWrite struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// TxnSnapshot is the snapshot of one partition a transaction read at: the partition's
// snapshot counter then (its number of completed transactions).
type TxnSnapshot struct {
	Partition uint32
	Counter   uint64
}

// TxnResult answers a transaction operation.
type TxnResult struct {
	// Committed, Reason and Key (OpTxnCommit): the outcome; an abort says why and, when a
	// key's conflict caused it, which key.
	Committed bool
	Reason    string
	Key       []byte
	// ID names the transaction (OpTxnCommit), for logs and operators.
	ID string
	// Version is the snapshot counter a committed transaction's writes were applied at in
	// the first of its partitions (OpTxnCommit), or the version of the key read (OpTxnRead:
	// 0 when never written).
	Version uint64
	// Snapshot is the partition and snapshot an OpTxnRead was served at.
	Snapshot TxnSnapshot
	// Vector is a read-only read's snapshot vector (TxnRequest.ReadOnly).
	Vector []TxnSnapshot
}

// Result is the reply to one Request.
type Result struct {
	ID      uint64
	Op      Op
	Err     error
	Found   bool
	Value   []byte
	Version hlc.Version
	// Items are the live records of a scan, in key order.
	Items []storage.Record
	More  bool
	// Path says how a read was served (protocol-defined: "quorum", "local", "lease", ...).
	Path string
	// Master, MasterRegion and TableVersion answer OpMoveMaster.
	Master, MasterRegion string
	TableVersion         uint64
	// Unacked (WaitAll writes that succeeded) lists the replicas that had not acknowledged
	// the write when it returned, each with why.
	Unacked []Unacked
	// Staleness, for reads that may return a past state (a Raft STALE read), bounds how old
	// that state can be: it holds every write acknowledged more than Staleness before the
	// read was served. Zero: not stale-bounded (a linearizable read, or unknown: see Path).
	Staleness time.Duration
	// Output is a state machine command's result (OpCommand), encoded by its protocol.
	Output []byte
	// Txn answers OpTxnRead and OpTxnCommit.
	Txn *TxnResult
	// Forward, when set, is released instead of an answer to a client: a message to the
	// node that forwarded the request, or back to the engine itself (To == the node) with
	// a partial result it continues from (a scan's part).
	Forward *peerpb.Envelope
}

// Unacked is a replica that did not acknowledge a WaitAll write.
type Unacked struct {
	Node   uint32
	Reason string
}

// Reader is the synchronous, read-only view of the node's storage an engine needs.
type Reader interface {
	Get(keyspace string, key []byte) (storage.Record, bool, error)
	// GetAt returns the newest version of key not newer than maxVersion.
	GetAt(keyspace string, key []byte, maxVersion hlc.Version) (storage.Record, bool, error)
	// Scan reads the newest version of every key of span (a partition's key range or part
	// of one): partitions are key ranges, and records do not name them.
	Scan(span storage.Span, limit int, fn func(storage.Record) bool) error
	// ScanReverse is Scan in descending key order (the back half of a split scan).
	ScanReverse(span storage.Span, limit int, fn func(storage.Record) bool) error
	// ScanAt reads, per key of span, the newest version not newer than at.
	ScanAt(span storage.Span, at hlc.Version, limit int, fn func(storage.Record) bool) error
	// GetRaw and ScanRaw read raw state (Ready.Raw).
	GetRaw(key []byte) ([]byte, bool, error)
	ScanRaw(start, end []byte, limit int, fn func(key, value []byte) bool) error
}

// Store is what background jobs may use: reads, and the node's staging area for partition
// snapshots (storage's staged files), through which a partition replica is exported on one
// node and pulled in chunks by another.
type Store interface {
	Reader
	// ExportSpanState exports a partition replica (its span) into the staged file name and
	// returns the values of rawKeys read from the same consistent snapshot (nil where absent).
	ExportSpanState(span storage.Span, name string, rawKeys [][]byte) (storage.ExportStats, [][]byte, error)
	StagedSize(name string) (size int64, found bool, err error)
	// CheckStaged reads a staged file back, checking that it holds records of span only,
	// and calls fn (if not nil) with each.
	CheckStaged(name string, span storage.Span, fn func(storage.Record)) (storage.ExportStats, error)
	ReadStaged(name string, offset int64, n int) ([]byte, error)
	WriteStaged(name string, offset int64, data []byte) error
	RemoveStaged(name string) error
}

// Job is background work a Ready asks the runtime to run off the event loop (storage scans
// for anti-entropy or full statuses, snapshot export and transfer); the messages it returns
// are sent when it is done. A message addressed to the node itself (To == self) is handed
// back to the node's own engine, as a note that the work is done.
type Job interface {
	Run(store Store, self uint32) ([]*peerpb.Envelope, error)
}

// Unpaced marks a Job that the runtime runs as soon as it can (a snapshot chunk), rather
// than paced like background repair scans.
type Unpaced interface {
	Job
	Unpaced()
}

// Ingest replaces a partition replica's data (Span) with a staged snapshot file, or with
// nothing when File is "" (storage.Engine.ReplaceSpan): Before is synced first, then the data is replaced, then
// After is synced. The runtime performs it after the writes of its own Ready and every
// earlier one, and before those of any later Ready, and after the Reads of every earlier
// Ready have run (an Ingest may delete the range a read handed out earlier is about); a
// failure stops the node like a failed write. Each step is idempotent, so an engine that finds its marker (Before) at start asks
// for the same Ingest again.
//
// With Merge the file's records are added to what the span holds instead
// (storage.Engine.MergeSpan: a replica move's snapshot joins the writes the new replica has
// already taken); Before and After are not used.
type Ingest struct {
	Span   storage.Span
	File   string
	Before []storage.RawOp
	After  []storage.RawOp
	Merge  bool
}

// Perform carries out in against store (the node runtime and the simulator both call it).
func (in Ingest) Perform(store IngestStore) error {
	if in.Merge {
		_, err := store.MergeSpan(in.Span, in.File)
		return err
	}
	return store.ReplaceSpan(in.Span, in.File, in.Before, in.After)
}

// IngestStore is the storage an Ingest is performed on.
type IngestStore interface {
	ReplaceSpan(span storage.Span, name string, before, after []storage.RawOp) error
	MergeSpan(span storage.Span, name string) (storage.ExportStats, error)
}

// ReportKind names what an engine reports to its runtime (Ready.Reports).
type ReportKind int

const (
	// ReportMoveCaughtUp: the new replica of a move has caught up (quorum family: it holds
	// every key's newest version that a majority of the old replicas held when the move
	// reached them; Raft: its learner has applied what its leader had committed); the
	// move may finish. Repeated while the move lasts, in case a report is lost.
	ReportMoveCaughtUp ReportKind = iota + 1
	// ReportExcludeStart: the partition has stalled on Region longer than its protocol
	// allows; the runtime proposes exclude_start (placement.Exclusion). Repeated while the
	// stall lasts.
	ReportExcludeStart
	// ReportExcludePosition: the reporting replica's region (Reporter) has frozen what it
	// holds of Region's state; Position is the first position it does not hold. The runtime
	// proposes exclude_report. Repeated until the exclusion is decided.
	ReportExcludePosition
	// ReportExcludeCancel: the exclusion attempt Round of Region has been pending longer
	// than the protocol allows (a region suspected by mistake, or another one lost before
	// it reported); the runtime proposes exclude_cancel.
	ReportExcludeCancel
)

// Report is something an engine tells its runtime, which acts on the cluster metadata (the
// engine cannot: it is sans-IO, and the metadata is a protocol of its own).
type Report struct {
	Kind      ReportKind
	Keyspace  string
	Partition uint32
	MoveID    uint64
	// Region, Reporter and Position: the exclusion reports.
	Region, Reporter string
	Position, Round  uint64
}

// Ready is an engine's output since the last call to Ready.
//
// Contract (as etcd raft's Ready): Writes must be durable (synced) before any of Messages or
// Replies is released, and Readies must be released in order.
type Ready struct {
	Writes []storage.Record
	// Raw are writes of the protocol's own durable state outside the record space (a Raft
	// group's log and hard state), made durable in the same batch as Writes.
	Raw      []storage.RawOp
	Messages []*peerpb.Envelope
	Replies  []Result
	Jobs     []Job
	// Ingests replace partitions' data with snapshots, after this Ready's Writes and Raw.
	Ingests []Ingest
	// Reports are for the runtime (a move that may finish); they need nothing durable.
	Reports []Report
	// Reads are run against storage once this Ready's writes (and every earlier Ready's)
	// are durable and visible, and before any later Ready's Ingests (which may delete the
	// range), and their results are released as replies: a protocol that
	// applies writes in its Ready (Raft) reads what it has applied, never a storage state the
	// runtime has not caught up with.
	Reads []Read
}

// Read is a client read a Ready defers until its writes are in storage (Ready.Reads).
type Read struct {
	// ID and Op are the request's (the runtime fails the read with them if storage fails).
	ID  uint64
	Op  Op
	Run func(store Reader) Result
	// ValidUntil, when set, is the latest time by the node's clock at which the read may
	// run: a read served under a leader lease is linearizable only while the lease holds.
	// Past it the runtime fails the read with errs.Unavailable instead (the client retries).
	ValidUntil time.Time
	// Wrap, when set, turns the read's result (or its expiry) into what is released: a
	// read served for another node becomes a message to it (Result.Forward).
	Wrap func(Result) Result
}

// ExpiredRead is the result the runtime gives a Read that it could not run before
// ValidUntil.
func ExpiredRead(r Read, now time.Time) Result {
	return Result{ID: r.ID, Op: r.Op, Err: errs.New(errs.Unavailable,
		"the read's lease ran out (%s ago) while it waited for storage; retry", now.Sub(r.ValidUntil).Round(time.Microsecond))}
}

// RunRead runs r against store at the node's time now, or fails it if it is past ValidUntil.
func RunRead(r Read, store Reader, now time.Time) Result {
	var res Result
	if !r.ValidUntil.IsZero() && now.After(r.ValidUntil) {
		res = ExpiredRead(r, now)
	} else {
		res = r.Run(store)
	}
	if r.Wrap != nil {
		res = r.Wrap(res)
	}
	return res
}

// Empty reports whether there is nothing to do.
func (r *Ready) Empty() bool {
	return len(r.Writes) == 0 && len(r.Raw) == 0 && len(r.Messages) == 0 && len(r.Replies) == 0 && len(r.Jobs) == 0 && len(r.Reads) == 0 && len(r.Ingests) == 0 && len(r.Reports) == 0
}

// Engine is one protocol's state machine on one node. Not safe for concurrent use: one
// goroutine (the runtime's event loop, or the simulator) drives it.
type Engine interface {
	// Propose starts a client request on a keyspace of this engine's protocol.
	Propose(now time.Time, req Request)
	// Step delivers a peer message addressed to this engine.
	Step(now time.Time, env *peerpb.Envelope)
	// Tick advances time: deadlines, retries, heartbeats, background rounds.
	Tick(now time.Time)
	// SetPlacement installs a new placement map (the engine serves its protocol's keyspaces
	// in it).
	SetPlacement(m *placement.Map)
	HasReady() bool
	Ready() Ready
}

// Config is what an engine is built from.
type Config struct {
	NodeID   uint32
	Nodes    []config.Node
	Topology *topology.Topology
	Limits   config.Limits
	// AntiEntropyInterval: how often a replica starts a repair round with a peer (protocols
	// that repair in the background).
	AntiEntropyInterval time.Duration
	// MaxClockOffset is ε; MaxClockSkew bounds how far ahead of the local clock a version
	// may be to be folded into the hybrid logical clock.
	MaxClockOffset time.Duration
	MaxClockSkew   time.Duration
	// MaxFutureVersion is how far ahead of a node's clock a peer's version may be and still
	// be accepted (config.Clock.MaxFutureVersion; 0: MaxClockSkew). A replica move's
	// catch-up compares replicas up to a version this far ahead of the moment the old
	// replica joined the move, so every write it accepted before then is included.
	MaxFutureVersion time.Duration
	// RandSeed seeds the engine's randomness (election timeouts): the simulator derives it
	// from its seed, so a run replays exactly; the node runtime from the time.
	RandSeed uint64
	// Mutation deliberately breaks the protocol (the simulator's mutation suite). Empty in
	// every real deployment.
	Mutation string
	// MetadataVoters are the configured voters of the cluster metadata group
	// (config.Metadata.Voters; empty: the default choice), which its catalog must know to
	// refuse decommissioning one.
	MetadataVoters []string
	// SystemChunkBytes is the size of the chunks a snapshot pull asks for (replica moves and
	// Raft snapshots; config.BwMan.ChunkBytes). A chunk holds its links for its size over
	// their bandwidth, and a client message queued behind it waits that long, so BwMan sizes
	// chunks to the link and the SLO. 0: DefaultSystemChunkBytes.
	SystemChunkBytes int
	// PullBudget, when set, paces snapshot pulls at the receiving node: a chunk is asked for
	// only when the budget allows its bytes at that moment (BwMan's inbound bucket: a
	// joining node's downlink carries its clients' traffic too, and several sources sending
	// at their own allowed rates would fill it). nil: unpaced (the simulator).
	PullBudget PullBudget
	// Network describes the links large reads cross (config.Network, validated): the
	// Mayflower selector's capacities and the transfer report interval.
	Network config.Network
}

// DefaultSystemChunkBytes is a snapshot pull's chunk size unless configured.
const DefaultSystemChunkBytes = 512 << 10

// ChunkBytes returns the configured snapshot chunk size.
func (c *Config) ChunkBytes() int64 {
	if c.SystemChunkBytes > 0 {
		return int64(c.SystemChunkBytes)
	}
	return DefaultSystemChunkBytes
}

// PullBudget is a rate budget a receiving node spends on the bytes it asks peers to send it
// (*rate.Limiter implements it). AllowN must not block: the protocol cores call it from their
// event loop with their own clock.
type PullBudget interface {
	AllowN(now time.Time, n int) bool
}

// AllowPull reports whether a chunk of n bytes may be asked for now (and spends the budget).
func (c *Config) AllowPull(now time.Time, n int64) bool {
	return c.PullBudget == nil || c.PullBudget.AllowN(now, int(n))
}

// Counted is implemented by engines that count protocol events (reads by path, lease
// traffic, status bytes, ...); benchmarks and reproduction harnesses read the counts by
// name. Safe to call from any goroutine.
type Counted interface {
	CounterSnapshot() map[string]int64
}

// ScanLive reads span's live records into res (Items, More): deleted keys (tombstones) are
// skipped and not counted, at most limit are kept, and a storage error becomes res.Err.
func ScanLive(store Reader, span storage.Span, limit int, res *Result) {
	err := store.Scan(span, 0, func(r storage.Record) bool {
		if r.Tombstone {
			return true
		}
		if len(res.Items) == limit {
			res.More = true
			return false
		}
		res.Items = append(res.Items, r)
		return true
	})
	if err != nil {
		res.Err = errs.New(errs.Internal, "scan: %v", err)
	}
}

// GetLive fills a get's result from what store.Get returned: a deleted key is not found but
// keeps its tombstone's version; a storage error becomes res.Err.
func GetLive(rec storage.Record, found bool, err error, res *Result) {
	switch {
	case err != nil:
		res.Err = errs.New(errs.Internal, "read: %v", err)
	case rec.Tombstone:
		res.Version = rec.Version
	default:
		res.Found, res.Value, res.Version = found, rec.Value, rec.Version
	}
}
