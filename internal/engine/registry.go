package engine

import (
	"fmt"
	"math/rand/v2"
	"meridian/internal/wire/peerpb"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/topology"
)

// Protocol is what a replication protocol registers: how to build its engine, and what the
// gateway, the runtime, the simulator and the benchmarks need to know about it. Only Name,
// ID and New are required.
type Protocol struct {
	// Name is the protocol's name in keyspace specifications ("quorum", "raft", ...).
	Name string
	// ID identifies the protocol's engines on the wire (Envelope.engine): stable, unique, > 0.
	ID uint32
	// New builds the protocol's engine on one node.
	New func(cfg Config, store Reader) Engine

	// Check validates what of a request depends on the protocol — its consistency level
	// (level is what the client sent, "" for the keyspace default), write mode (req.WriteMode
	// as the client sent it), operation — and sets req.Level and req.WriteMode to what the
	// engine is to use. nil: DefaultCheck.
	Check func(ks *placement.Keyspace, req *Request, level string) error
	// Linearizable: the protocol promises linearizability per key, so the simulator and the
	// lab check histories with Porcupine as well as sequential consistency.
	Linearizable bool
	// ClockDependent: the protocol's correctness rests on the clock bound ε holding, so
	// faults beyond it are outside its assumptions (violations there are findings).
	ClockDependent bool
	// ClockFallbackPath, when set, is the read path a protocol that notices clocks beyond ε
	// falls back to; under such a fault the lab requires reads on it (never silent
	// degradation).
	ClockFallbackPath string
	// NotKeyValue, when set, says why the key-value tools (the simulator's get/put workload,
	// the YCSB benchmarks) do not run the protocol, and what does: its clients run
	// transactions.
	NotKeyValue string
	// NoPointLevels, when set, says why the protocol's gets, puts and deletes take no
	// consistency level (benchmarks refuse levels for it).
	NoPointLevels string
	// ReadLevel and WriteLevel are the levels the tools (simulator, benchmarks) use when a
	// run names none; "" for both: QUORUM/QUORUM, the quorum family's.
	ReadLevel, WriteLevel config.Level
	// ReplicaReadLevel is the level that reads the coordinator's own replica (the lab's final
	// state reads); "" reads through the protocol's default path.
	ReplicaReadLevel config.Level
	// LowerBoundMs, when set, is the protocol's physical lower bound on the latency of op
	// ("read" or "write") for a client in region; ok false: the quorum bound of the levels.
	LowerBoundMs func(t *topology.Topology, q BoundQuery) (ms float64, ok bool)

	// Metrics registers the engine's series (called once per engine, when the node creates
	// it).
	Metrics func(reg prometheus.Registerer, e Engine)
	// Mutations are the protocol's deliberately broken variants (name → what is broken):
	// each must be caught by a checker or an invariant within a bounded number of
	// simulation seeds (DESIGN.md section 6).
	Mutations map[string]string
	// Sim is how the simulator runs the protocol.
	Sim SimSupport
}

// SimSupport is what the deterministic simulator needs to run a protocol.
type SimSupport struct {
	// DescribeMessage, when set, renders the protocol's own peer messages for traces, one
	// line each, with versions rendered by version (ok false: a message it does not own,
	// which the simulator renders itself).
	DescribeMessage func(env *peerpb.Envelope, version func(*peerpb.Version) string) (line string, ok bool)
	// KeyspaceOptions are defaults for simulated keyspaces (timings scaled to runs of
	// seconds); options the caller sets win.
	KeyspaceOptions map[string]string
	// NodesPerRegion is the default when the caller sets none (0: the simulator's).
	NodesPerRegion int
	// ReplicasPerRegion is the default when the caller sets none (0: the simulator's).
	ReplicasPerRegion int
	// Partitions, when set, is the simulated keyspace's partition count (the metadata
	// keyspace has one).
	Partitions int
	// CheckLinearizability: runs check histories with Porcupine by default.
	CheckLinearizability bool
	// MutationLevels, when set, changes the clients' levels for a mutation (e.g. ONE/ONE).
	MutationLevels func(mutation string, read, write config.Level) (config.Level, config.Level)
	// MutationHints adjust a mutation's runs so that the breakage can show.
	MutationHints map[string]SimHints
	// NewWorkload, when set, replaces the simulator's key-value workload and checkers for a
	// protocol whose operations are not key reads and writes (the cluster metadata).
	NewWorkload func() SimWorkload
	// Invariant, when set, is checked after every delivered message and tick: engines[i] is
	// node i's engine of this protocol (nil if it has none; for a node lost for good with
	// its region, its engine frozen at the loss), now[i] its clock, up[i] whether it runs. A
	// non-empty string is a violation.
	Invariant func(now []time.Time, engines []Engine, up []bool) string
}

// SimOutcome is how a simulated request ended.
type SimOutcome int

const (
	SimOK SimOutcome = iota + 1
	// SimFailed: certainly not applied (refused, unavailable, not found...).
	SimFailed
	// SimIndeterminate: may or may not have been applied (a timeout, a crash).
	SimIndeterminate
)

// SimWorkload drives a protocol whose client operations are not key reads and writes: the
// simulator asks it for each client's next request, hands it every outcome, and lets it
// judge the history and the replicas' final state.
type SimWorkload interface {
	// Next returns client's next request on keyspace (ID and Deadline are the simulator's).
	Next(rng *rand.Rand, keyspace string, client int) Request
	// Done records a request's outcome; res is valid when outcome is SimOK. invoke and ret
	// are virtual times.
	Done(client int, req Request, res Result, outcome SimOutcome, invoke, ret time.Duration)
	// Check judges the history and every node's final records of the keyspace (by node
	// name); each string is one violation.
	Check(final map[string][]storage.Record) []string
	// Describe renders a request for traces.
	Describe(req Request) string
}

// BoundQuery is what a lower bound depends on.
type BoundQuery struct {
	Region, Op            string
	ReadLevel, WriteLevel config.Level
	// Options are the keyspace's options.
	Options map[string]string
	// ReplicasPerRegion is the keyspace's replicas in each of the topology's regions (≥ 1).
	ReplicasPerRegion int
}

// SimHints adjust the simulated runs of one mutation.
type SimHints struct {
	// Faults, when non-nil, replaces the run's faults (names as `meridian sim --faults`).
	Faults         []string
	NoSessions     bool
	Roam           bool
	ReplicaRegions int
	// LoseRegion: the runs lose a region for good (sim.Options.LoseRegion).
	LoseRegion bool
	// MaxClockOffset, when set, is the run's ε (a timing rule that ignores ε shows only when
	// ε is large against the network's delays).
	MaxClockOffset time.Duration
	// KeyspaceOptions override the protocol's simulation options for the mutation's runs.
	KeyspaceOptions map[string]string
	// Quiesce, when set, is the fault-free time after the workload (slow timings need longer
	// to converge).
	Quiesce time.Duration
	// ReadFraction and ClientsPerRegion, when set, change the workload (a stale read shows
	// only if some client reads while it can be served).
	ReadFraction     float64
	ClientsPerRegion int
	// ScanFraction, when set, is the share of reads that are scans (a scan bug shows only if
	// the workload scans).
	ScanFraction float64
	// FreshReads, when set, checks that every read returns the newest acknowledged write or
	// a newer one instead of checking sequential consistency (sim.Options.FreshReads): what
	// reads at ONE promise even with writes at ALL, as they repair nothing.
	FreshReads bool
	// ClockStepEvery, when set, steps every node's clock this often on average (within the
	// fault's bound) instead of a few times a run.
	ClockStepEvery time.Duration
	// PartitionEvery, when set, starts a new partition this often on average, one after
	// another, instead of one or two a run (a bug that needs one node cut off at the right
	// moment shows sooner).
	PartitionEvery time.Duration
	// RequestTimeout, when set, is the clients' request deadline: short deadlines free
	// clients stuck behind an unavailable leader to read again where a stale answer shows.
	RequestTimeout time.Duration
	// Topology, when set, names the built-in topology of the mutation's runs (a timing bug
	// that hides behind WAN delays shows on a LAN).
	Topology string
	// NodesPerRegion, when set, shapes the cluster (partitions on different replica sets
	// need more nodes than replicas).
	NodesPerRegion int
	// RepartitionEvery, when set, splits or merges a partition this often on average.
	RepartitionEvery time.Duration
	// MoveEvery, when set, starts a replica move this often on average.
	MoveEvery time.Duration
	// DelaySpikeProb, when set, is the share of messages the delay fault holds back.
	DelaySpikeProb float64
	// MoveCheckAfter, when set, is how often the driver checks (and may abort) a move in
	// progress: quorum rules of a move show most when moves are aborted.
	MoveCheckAfter time.Duration
	// Linearizability, when set, checks the mutation's runs for linearizability too (a
	// stale read by another client is a violation only there).
	Linearizability bool
}

var (
	regMu  sync.RWMutex
	byName = map[string]Protocol{}
	byID   = map[uint32]Protocol{}
)

// Register adds a protocol. It panics on a missing field or a duplicate name or ID: both
// are programming errors found at start-up.
func Register(p Protocol) {
	if p.Name == "" || p.ID == 0 || p.New == nil {
		panic(fmt.Sprintf("engine: protocol %q registered without a name, an ID or New", p.Name))
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := byName[p.Name]; dup {
		panic(fmt.Sprintf("engine: protocol %q registered twice", p.Name))
	}
	if q, dup := byID[p.ID]; dup {
		panic(fmt.Sprintf("engine: protocols %q and %q share ID %d", p.Name, q.Name, p.ID))
	}
	byName[p.Name] = p
	byID[p.ID] = p
}

// Lookup returns the protocol called name.
func Lookup(name string) (Protocol, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	p, ok := byName[name]
	return p, ok
}

// LookupID returns the protocol whose engines use id on the wire.
func LookupID(id uint32) (Protocol, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	p, ok := byID[id]
	return p, ok
}

// Names returns the registered protocols' names, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(byName))
	for n := range byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
