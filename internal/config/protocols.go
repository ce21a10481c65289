package config

import (
	"errors"
	"fmt"
	"github.com/dustin/go-humanize"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Protocol names.
const (
	ProtocolQuorum       = "quorum"
	ProtocolMeteorShower = "meteorshower"
	ProtocolGlobLease    = "globlease"
	ProtocolRaft         = "raft"
	// ProtocolCatenae is Catenae (liu-thesis 1.4, 3.1.3-3.1.4): transactions over fully
	// replicated regions, ordered and validated by epoch messages (docs/catenae.md).
	ProtocolCatenae = "catenae"
	// ProtocolCanopus is Canopus (thesis chapter 4): consensus in cycles over a leaf-only tree
	// of super-leaves, one per region (docs/canopus.md).
	ProtocolCanopus = "canopus"
	// ProtocolEPaxos is Egalitarian Paxos (Moraru et al., SOSP 2013), the leaderless
	// baseline the Canopus thesis compares against (4.6; docs/epaxos.md).
	ProtocolEPaxos = "epaxos"
	// ProtocolMetadata is the cluster metadata group's: Raft with the catalog as its state
	// machine, voters from the configuration and every other node a learner. Internal: no
	// user keyspace uses it.
	ProtocolMetadata = "metadata"
)

// Raft read levels.
const (
	// LevelLinearizable: a read sees every write acknowledged before it began (ReadIndex).
	LevelLinearizable Level = "LINEARIZABLE"
	// LevelStale: the replica's applied state, with no round trip; may miss recent writes.
	LevelStale Level = "STALE"
)

// OptionSpec describes one option of a protocol.
type OptionSpec struct {
	Name    string
	Default string // canonical form; filled in when the option is absent
	Doc     string
	// Normalize validates a value and returns its canonical form.
	Normalize func(value string) (string, error)
}

// ProtocolSpec describes a replication protocol a keyspace can use, with its options.
type ProtocolSpec struct {
	Name    string
	Doc     string
	Options []OptionSpec
	// Internal protocols serve the system keyspaces only (Protocols does not list them).
	Internal bool
	// LearnersEverywhere: every node that is not a replica of a partition follows it as a
	// learner (placement.Partition.Learners).
	LearnersEverywhere bool
	// MovableReplicas: the protocol moves a partition's replicas itself when the placement
	// changes (consensus membership changes, catch-up by snapshot), so alter-keyspace may
	// change regions and replicas_per_region.
	MovableReplicas bool
	// Repartition: the protocol serves a keyspace whose partitions split and merge in place
	// (same replicas, no data moved): its state is per key, or per partition only in ways
	// that survive a changed range. Raft keeps one group (log, leader) per partition: its
	// groups split and merge at entries of their logs, after the placement has changed (a
	// split entry founds the right-hand group from the left one's state, as CockroachDB's
	// split trigger; a merge freezes the right-hand group and waits for every replica of it
	// first, as CockroachDB's subsume and merge trigger; raft/repartition.go). GlobLease
	// keeps a mastership table per partition: a split or merge starts a new generation of
	// the table, fenced against the old masters' leases (globlease/gl_split.go).
	Repartition bool
	// Moves: a replica of a partition moves to another node of its region one at a time
	// (metadata move_start / move_finish, docs/elasticity.md): the quorum family writes and
	// reads both sets while the new replica catches up; Raft adds it as a learner and
	// promotes it by joint consensus; GlobLease, on the quorum family's catch-up, hands the
	// leaving replica's masterships to a replica that stays and counts joint majorities for
	// its mastership table, master leases and writes (globlease/gl_move.go).
	Moves bool
	// Check, when set, validates the normalised options together (a rule across options).
	Check func(opts map[string]string) error
	// NoRejoin: a node that left a partition by a move never becomes its member again
	// (placement.Partition.Departed). Raft names group members by node ID, and etcd raft
	// must never see a member come back with an empty log under an ID it knew.
	NoRejoin bool
	// FullReplication: every region of the keyspace holds all of it on one node (one
	// partition, one replica per region; partitions default to 1 and other layouts are
	// refused at creation).
	FullReplication bool
	// FixedOptions: the options are fixed when the keyspace is created (alter refuses to
	// change them): the replicas agree on them and nothing orders a change among them.
	FixedOptions bool
	// RegionExclusion: the protocol can go on without a lost region's replicas of a
	// partition once the metadata group has excluded them (placement.Exclusion;
	// metadata exclude_start / exclude_report).
	RegionExclusion bool
}

func normalizeRaftReadLevel(v string) (string, error) {
	switch l := Level(strings.ToUpper(strings.TrimSpace(v))); l {
	case LevelLinearizable, LevelStale:
		return string(l), nil
	}
	return "", fmt.Errorf("invalid raft read level %q (want LINEARIZABLE or STALE)", v)
}

// raftOptionSpecs are the options of the Raft-based protocols (raft keyspaces and the
// metadata group).
var raftOptionSpecs = []OptionSpec{
	{Name: "read_level", Default: string(LevelLinearizable), Doc: "level of reads that do not name one: LINEARIZABLE (the leader under its lease, else ReadIndex: the leader confirms its leadership with a majority) or STALE (the replica's applied state, no round trip)", Normalize: normalizeRaftReadLevel},
	{Name: "log_retain", Default: "50000", Doc: "applied log entries each replica keeps for followers that lag; one further behind is caught up by a snapshot of the partition; 10..100000000 (small values are for tests: they make snapshots frequent)", Normalize: intRange(10, 100_000_000)},
	{Name: "leader_region", Default: "", Doc: "region whose replica should lead each partition's group (empty: the keyspace's first region); a leader elsewhere hands leadership over once that replica has caught up (after a failover too)", Normalize: normalizeRegionName},
	{Name: "heartbeat_interval", Default: "200ms", Doc: "how often a leader heartbeats its followers; a multiple of the 50ms Raft tick, 50ms..10s", Normalize: durationRange(50*time.Millisecond, 10*time.Second)},
	{Name: "election_timeout", Default: "2s", Doc: "a follower that hears no leader for this long (randomised up to twice) campaigns; at least 3 heartbeat intervals and above the largest RTT; 150ms..2m", Normalize: durationRange(150*time.Millisecond, 2*time.Minute)},
}

// protocols is the table of known protocols. A new protocol adds its entry here (and its
// typed accessor, like QuorumOptionsOf, below).
var protocols = []ProtocolSpec{
	{
		Name:        ProtocolQuorum,
		Doc:         "majority quorum replication, Cassandra-style levels, last-writer-wins by (timestamp, node id)",
		Repartition: true,
		Moves:       true,
		Check:       checkElastic,
		Options: append([]OptionSpec{
			{
				Name:      "read_level",
				Default:   string(LevelQuorum),
				Doc:       "consistency level of reads that do not name one: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM (case-insensitive)",
				Normalize: normalizeLevel,
			},
			{
				Name:      "write_level",
				Default:   string(LevelQuorum),
				Doc:       "consistency level of writes that do not name one: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM (case-insensitive)",
				Normalize: normalizeLevel,
			},
			{
				Name:      "speculative_retry",
				Default:   "0s",
				Doc:       "how long a read waits for a replica before asking another one; a Go duration ≥ 0, 0 = automatic",
				Normalize: normalizeNonNegativeDuration,
			},
		}, append(largeReadOptionSpecs, elasticOptionSpecs...)...),
	},
	{
		Name:        ProtocolMeteorShower,
		Repartition: true,
		Moves:       true,
		Check:       checkElastic,
		Doc: "quorum writes, sequentially consistent reads served by the local replica using periodic status " +
			"messages and bounded clock error (meteorshower-paper.txt II-III)",
		Options: append([]OptionSpec{
			{Name: "read_level", Default: string(LevelQuorum), Doc: "QUORUM or ALL: how many valid statuses a local read needs", Normalize: normalizeMSReadLevel},
			{Name: "write_level", Default: string(LevelQuorum), Doc: "ONE, QUORUM or ALL; also decides θ upper (paper II-E)", Normalize: normalizeMSWriteLevel},
			{Name: "theta", Default: "lower", Doc: "maximum staleness of a usable status: lower (0; sequentially consistent), upper (the paper's bound from the write level and the one-way delay lower bounds, minus ε; NOT sequentially consistent with concurrent writers in other regions, see docs/meteorshower.md), or a Go duration", Normalize: normalizeTheta},
			{Name: "status_interval", Default: "10ms", Doc: "how often each replica sends its status to every peer; 1ms..1s", Normalize: durationRange(time.Millisecond, time.Second)},
			{Name: "redundancy", Default: "3", Doc: "l: earlier statuses repeated in each status, so up to l consecutive lost statuses are tolerated; 0..16", Normalize: intRange(0, 16)},
			{Name: "speculative_retry", Default: "0s", Doc: "for fallback quorum reads: as in quorum", Normalize: normalizeNonNegativeDuration},
		}, elasticOptionSpecs...),
	},
	{
		Name:            ProtocolRaft,
		Doc:             "one Raft group per partition (etcd raft): writes commit at a majority through the group's leader; reads are linearizable (at the leader under its lease, elsewhere by read index) or stale (the replica's applied state, with a staleness bound)",
		MovableReplicas: true,
		Moves:           true,
		NoRejoin:        true,
		Repartition:     true,
		Check:           checkRaft,
		Options:         append(append(append([]OptionSpec{}, raftOptionSpecs...), txnOptionSpecs...), elasticOptionSpecs...),
	},
	{
		Name: ProtocolCatenae,
		Doc: "Catenae transactions (liu-thesis 1.4, 3.1.3-3.1.4): every region holds the whole keyspace; each region's replica stamps the transactions it receives " +
			"into epochs of loosely synchronised clocks, pushes them to the others with the digests of what it executed, executes every epoch in one deterministic chain order " +
			"speculatively and again when it closes, and commits in half to one round trip (docs/catenae.md); TxnRead and TxnCommit only",
		FullReplication: true,
		FixedOptions:    true,
		Options:         catenaeOptionSpecs,
	},
	{
		Name: ProtocolCanopus,
		Doc: "Canopus consensus (thesis chapter 4): the nodes of each region form a super-leaf that broadcasts its members' proposals through one Raft group per member; " +
			"super-leaves exchange their states up a leaf-only tree in cycles, every node commits the same order, and reads are served by the local node after the next cycle commits (linearizable)",
		FixedOptions:    true,
		RegionExclusion: true,
		Check:           checkCanopus,
		Options:         canopusOptionSpecs,
	},
	{
		Name: ProtocolEPaxos,
		Doc: "Egalitarian Paxos (Moraru et al., SOSP 2013; the Canopus thesis's baseline, 4.6): every replica leads its own instances; a command commits in one round trip to a fast quorum " +
			"when no concurrent command interferes, else after a second round at a majority; reads are commands too (linearizable)",
		FixedOptions: true,
		Check:        checkEPaxos,
		Options:      epaxosOptionSpecs,
	},
	{
		Name:               ProtocolMetadata,
		Doc:                "the cluster metadata group: Raft with the catalog (keyspaces, placement, membership) as its state machine; voters from metadata.voters, every other node a learner",
		Internal:           true,
		LearnersEverywhere: true,
		MovableReplicas:    true,
		Options:            raftOptionSpecs,
	},
	{
		Name: ProtocolGlobLease,
		Doc: "one master per key, read leases that let other replicas serve reads locally, active or passive " +
			"writes, master migration and failover, hot-key replicas under secondary leases (liu-thesis 4.1)",
		Moves:       true,
		Repartition: true,
		Check:       checkElastic,
		Options: append([]OptionSpec{
			{Name: "home_region", Default: "", Doc: "region whose replica masters keys by default (empty: the keyspace's first region); must be one of the keyspace's regions", Normalize: normalizeRegionName},
			{Name: "home_ranges", Default: "", Doc: "per key range home regions: \"START=REGION,...\" (keys ≥ START, up to the next START, are mastered in REGION); keys below the first START use home_region", Normalize: normalizeRanges},
			{Name: "lease", Default: "1m0s", Doc: "length of a read lease (liu-thesis Table 4.2: 60 s); 10ms..1h", Normalize: durationRange(10*time.Millisecond, time.Hour)},
			{Name: "lease_ranges", Default: "", Doc: "per key range lease lengths: \"START=DURATION,...\" (keys ≥ START up to the next START); keys below the first START use lease", Normalize: normalizeRanges},
			{Name: "write_mode", Default: "active", Doc: "default for writes that do not name one: active (replicas holding leases are updated before the reply) or passive (no valid lease: reply after the master's write, propagate afterwards)", Normalize: normalizeWriteMode},
			{Name: "master_lease", Default: "1s", Doc: "a master keeps acting only while a majority of its partition's replicas acknowledged one of its heartbeats this recently; 100ms..1m", Normalize: durationRange(100*time.Millisecond, time.Minute)},
			{Name: "election_timeout", Default: "2s", Doc: "a replica that has not acknowledged the master for this long may elect a new one; must exceed master_lease by at least 100ms; 200ms..2m", Normalize: durationRange(200*time.Millisecond, 2*time.Minute)},
			{Name: "auto_migrate", Default: "true", Doc: "move a key's master to the region its writes come from (share migrate_share, held for migrate_hold, at most once per migrate_cooldown)", Normalize: normalizeBool},
			{Name: "migrate_share", Default: "0.8", Doc: "share of a key's recent writes one other region must have for automatic migration; 0.5 < share ≤ 1", Normalize: floatRange(0.5, 1, false)},
			{Name: "migrate_hold", Default: "3s", Doc: "how long that share must hold before the master moves (hysteresis); 0s..10m", Normalize: durationRange(0, 10*time.Minute)},
			{Name: "migrate_cooldown", Default: "30s", Doc: "no second automatic move of a key within this time; 0s..1h", Normalize: durationRange(0, time.Hour)},
			{Name: "hot_keys", Default: "true", Doc: "replicate the hottest keys to the other nodes of a region under secondary leases (liu-thesis 4.1.4, affiliated nodes)", Normalize: normalizeBool},
			{Name: "hot_key_rate", Default: "200", Doc: "reads per second of one key at one replica above which the key is hot; 1..1000000", Normalize: floatRange(1, 1e6, true)},
			{Name: "hot_key_replicas", Default: "4", Doc: "most affiliated nodes per hot key and region; 1..64", Normalize: intRange(1, 64)},
			{Name: "secondary_lease", Default: "2s", Doc: "length of a secondary lease on an affiliated node (always a sub-period of the host's lease); 10ms..1m", Normalize: durationRange(10*time.Millisecond, time.Minute)},
			{Name: "suspect_after", Default: "1s", Doc: "a lease holder that leaves a write's update unacknowledged this long (paused, overloaded, cut off) becomes suspect: the write still waits for its lease to run out, but its next leases are short; 10ms..1m", Normalize: durationRange(10*time.Millisecond, time.Minute)},
			{Name: "suspect_lease", Default: "2s", Doc: "length of the leases granted to a suspect holder (liu-thesis 4.1.3: lease length per node), so its next stall delays writes this long at most instead of a whole lease; 0s: suspects get full leases; 0 or 10ms..1h", Normalize: zeroOrDurationRange(10*time.Millisecond, time.Hour)},
			{Name: "suspect_probation", Default: "5m0s", Doc: "a suspect holder gets full leases again once it has left no update unacknowledged for this long; 1s..24h", Normalize: durationRange(time.Second, 24*time.Hour)},
		}, elasticOptionSpecs...),
	},
}

func normalizeRegionName(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v != "" && !regionNameRE.MatchString(v) {
		return "", fmt.Errorf("%q is not a region name", v)
	}
	return v, nil
}

var regionNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// normalizeRanges checks "START=VALUE,..." lists; starts must be strictly increasing. The
// values are checked against the keyspace (regions) or parsed (durations) by
// GlobLeaseOptionsOf.
func normalizeRanges(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > 1024 {
		return "", fmt.Errorf("at most 1024 ranges, got %d", len(parts))
	}
	prev := ""
	out := make([]string, 0, len(parts))
	for i, part := range parts {
		start, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || val == "" {
			return "", fmt.Errorf("range %d: want START=VALUE, got %q", i+1, part)
		}
		if i > 0 && start <= prev {
			return "", fmt.Errorf("range %d: starts must increase (%q after %q)", i+1, start, prev)
		}
		prev = start
		out = append(out, start+"="+strings.TrimSpace(val))
	}
	return strings.Join(out, ","), nil
}

func normalizeWriteMode(v string) (string, error) {
	switch m := strings.ToLower(strings.TrimSpace(v)); m {
	case "active", "passive":
		return m, nil
	}
	return "", fmt.Errorf("write_mode is active or passive, not %q", v)
}

func normalizeBool(v string) (string, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return "", fmt.Errorf("want true or false, got %q", v)
	}
	return strconv.FormatBool(b), nil
}

func floatRange(lo, hi float64, loInclusive bool) func(string) (string, error) {
	return func(v string) (string, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) {
			return "", fmt.Errorf("not a number: %q", v)
		}
		if f > hi || f < lo || (!loInclusive && f == lo) {
			op := "<"
			if loInclusive {
				op = "≤"
			}
			return "", fmt.Errorf("must be %v %s value ≤ %v, got %v", lo, op, hi, f)
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	}
}

func normalizeMSReadLevel(v string) (string, error) {
	l, err := ParseLevel(v)
	if err != nil {
		return "", err
	}
	if l != LevelQuorum && l != LevelAll {
		return "", fmt.Errorf("meteorshower reads are QUORUM or ALL, not %s", l)
	}
	return string(l), nil
}

func normalizeMSWriteLevel(v string) (string, error) {
	l, err := ParseLevel(v)
	if err != nil {
		return "", err
	}
	if l != LevelOne && l != LevelQuorum && l != LevelAll {
		return "", fmt.Errorf("meteorshower writes are ONE, QUORUM or ALL, not %s", l)
	}
	return string(l), nil
}

func normalizeTheta(v string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "lower", "upper":
		return strings.ToLower(strings.TrimSpace(v)), nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return "", fmt.Errorf("theta must be lower, upper or a Go duration ≥ 0, got %q", v)
	}
	return d.String(), nil
}

func durationRange(lo, hi time.Duration) func(string) (string, error) {
	return func(v string) (string, error) {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return "", fmt.Errorf("invalid duration %q", v)
		}
		if d < lo || d > hi {
			return "", fmt.Errorf("must be between %v and %v, got %v", lo, hi, d)
		}
		return d.String(), nil
	}
}

// zeroOrDurationRange accepts 0 (off) or a duration in [lo, hi].
func zeroOrDurationRange(lo, hi time.Duration) func(string) (string, error) {
	inRange := durationRange(lo, hi)
	return func(v string) (string, error) {
		if d, err := time.ParseDuration(strings.TrimSpace(v)); err == nil && d == 0 {
			return d.String(), nil
		}
		out, err := inRange(v)
		if err != nil {
			return "", fmt.Errorf("%v (or 0s: off)", err)
		}
		return out, nil
	}
}

func intRange(lo, hi int) func(string) (string, error) {
	return func(v string) (string, error) {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d", &n); err != nil || fmt.Sprint(n) != strings.TrimSpace(v) {
			return "", fmt.Errorf("not an integer: %q", v)
		}
		if n < lo || n > hi {
			return "", fmt.Errorf("must be between %d and %d, got %d", lo, hi, n)
		}
		return fmt.Sprint(n), nil
	}
}

func normalizeLevel(v string) (string, error) {
	l, err := ParseLevel(v)
	return string(l), err
}

func normalizeNonNegativeDuration(v string) (string, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return "", fmt.Errorf("invalid duration %q (want a Go duration such as \"5ms\")", v)
	}
	if d < 0 {
		return "", fmt.Errorf("must be ≥ 0, got %s", d)
	}
	return d.String(), nil
}

// Protocols returns the names of the known protocols, sorted.
func Protocols() []string {
	names := make([]string, 0, len(protocols))
	for _, p := range protocols {
		if !p.Internal {
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return names
}

// Protocol returns the description of a known protocol.
func Protocol(name string) (ProtocolSpec, bool) {
	for _, p := range protocols {
		if p.Name == name {
			return p, true
		}
	}
	return ProtocolSpec{}, false
}

// optionError is an invalid protocol option; key is "" when the problem is not one key.
type optionError struct {
	key string
	msg string
}

// normalizeOptions validates opts against the protocol's table and returns a new map with
// every option in canonical form and the defaults filled in. Keys are checked in sorted
// order so the first error is deterministic.
func normalizeOptions(p ProtocolSpec, opts map[string]string) (map[string]string, *optionError) {
	known := make(map[string]OptionSpec, len(p.Options))
	names := make([]string, 0, len(p.Options))
	for _, o := range p.Options {
		known[o.Name] = o
		names = append(names, o.Name)
	}
	sort.Strings(names)
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(p.Options))
	for _, k := range keys {
		o, ok := known[k]
		if !ok {
			valid := "none"
			if len(names) > 0 {
				valid = strings.Join(names, ", ")
			}
			return nil, &optionError{key: k, msg: fmt.Sprintf("unknown option for protocol %s (known: %s)", p.Name, valid)}
		}
		v, err := o.Normalize(opts[k])
		if err != nil {
			return nil, &optionError{key: k, msg: err.Error()}
		}
		out[k] = v
	}
	for _, o := range p.Options {
		if _, ok := out[o.Name]; !ok {
			out[o.Name] = o.Default
		}
	}
	if p.Check != nil {
		if err := p.Check(out); err != nil {
			key := "split_bytes"
			var ke *keyedError
			if errors.As(err, &ke) {
				key = ke.key
			}
			return nil, &optionError{key: key, msg: err.Error()}
		}
	}
	return out, nil
}

// elasticOptionSpecs are the options of keyspaces whose partitions split and merge by size
// and load (ElasCass 3.1, docs/elasticity.md).
var elasticOptionSpecs = []OptionSpec{
	{Name: "split_bytes", Default: "512MiB", Doc: "Θmax: a partition holding more splits at its data-volume median (0: never by size); ElasCass used 2 GB", Normalize: byteSize},
	{Name: "merge_bytes", Default: "128MiB", Doc: "Θmin: two adjacent partitions on the same replicas holding together less merge (0: never); at most half of split_bytes", Normalize: byteSize},
	{Name: "split_ops", Default: "2500", Doc: "a partition serving more requests per second splits at the middle of its recent requests (0: never by load), as CockroachDB's load-based splitting", Normalize: floatRange(0, 1e9, true)},
	{Name: "min_partitions", Default: "0", Doc: "N: merges stop at this many partitions (0: as many as the keyspace was created with)", Normalize: intRange(0, MaxPartitions)},
}

// largeReadOptionSpecs configure large reads (docs/mayflower.md): a read at a level that needs
// one replica's answer whose value is larger than large_read_bytes is fetched in chunks, from
// the replica (or the two replicas) its selector picks.
var largeReadOptionSpecs = []OptionSpec{
	{Name: "read_selector", Default: ReadSelectorNearest, Doc: "where a large read fetches its value: nearest (the nearest live replica), snitch (Cassandra's dynamic snitch: the replica with the lowest decayed latency per byte when the nearest is 10% worse), hedged (the nearest, and after hedge_after the next nearest as well, the first copy of each chunk wins: The Tail at Scale's hedged requests) or mayflower (the replica, or the two replicas, of least cost over the links and the transfers every node reports; thesis 3.2, needs network.node_bandwidth)", Normalize: oneOf(ReadSelectorNearest, ReadSelectorSnitch, ReadSelectorHedged, ReadSelectorMayflower)},
	{Name: "large_read_bytes", Default: "1.0MiB", Doc: "values larger than this are large reads (fetched in chunks by read_selector); 0: none, every value comes whole from the nearest replica", Normalize: byteSizeZeroOr(1, 64<<20)},
	{Name: "read_chunk_bytes", Default: "256KiB", Doc: "the chunks of a large read, 1B to 4MiB (each chunk is a message: below some KiB the messages cost more than the bytes)", Normalize: byteSizeZeroOr(1, 4<<20)},
	{Name: "read_window", Default: "8", Doc: "chunks a large read keeps in flight from each replica it reads from, 1 to 64", Normalize: intRange(1, 64)},
	{Name: "hedge_after", Default: "0s", Doc: "hedged: how long the nearest replica has before the next nearest is asked too; 0 = the 95th percentile of this node's recent large reads' time per byte, times the size", Normalize: normalizeNonNegativeDuration},
	{Name: "scan_page_bytes", Default: "4.0MiB", Doc: "the most one replica returns for one round (page) of a scan, 1B to 4MiB (0: 4MiB); a scan split over two replicas (mayflower, docs/mayflower.md) reads in pages of this size from both ends of a partition, and at most about a page per half is read twice where they meet", Normalize: byteSizeZeroOr(1, 4<<20)},
	{Name: "scan_window_pages", Default: "2", Doc: "pages a scan keeps in flight from a replica it reads alone (a read at ONE or LOCAL_ONE, or each half of a split scan), 1 to 64: the replica streams them without waiting for a request per page, so a scan is bound by bandwidth rather than by a round trip per page once the window covers the link's bandwidth-delay product; 1: a request per page. Memory: up to this many pages of scan_page_bytes per partition read, eight partitions at a time", Normalize: intRange(1, 64)},
	{Name: "mayflower_split", Default: "makespan", Doc: "mayflower: whether a read is split over two replicas: never, literal (thesis 3.2.3's rule, which counts the job twice) or makespan (when the split's completion time plus the delays both parts cause is lower)", Normalize: oneOf("never", "literal", "makespan")},
}

// The large-read selectors (option read_selector).
const (
	ReadSelectorNearest   = "nearest"
	ReadSelectorSnitch    = "snitch"
	ReadSelectorHedged    = "hedged"
	ReadSelectorMayflower = "mayflower"
)

// oneOf accepts the listed words (case-insensitive).
func oneOf(words ...string) func(string) (string, error) {
	return func(v string) (string, error) {
		w := strings.ToLower(strings.TrimSpace(v))
		if slices.Contains(words, w) {
			return w, nil
		}
		return "", fmt.Errorf("%q is not one of %s", v, strings.Join(words, ", "))
	}
}

// byteSizeZeroOr accepts 0 or a size from lo to hi bytes.
func byteSizeZeroOr(lo, hi uint64) func(string) (string, error) {
	return func(v string) (string, error) {
		n, err := humanize.ParseBytes(strings.TrimSpace(v))
		if err != nil {
			return "", fmt.Errorf("invalid size %q (e.g. 256KiB, 1MiB)", v)
		}
		if n != 0 && (n < lo || n > hi) {
			return "", fmt.Errorf("size %q must be 0 or from %s to %s", v, strings.ReplaceAll(humanize.IBytes(lo), " ", ""), strings.ReplaceAll(humanize.IBytes(hi), " ", ""))
		}
		if n == 0 {
			return "0", nil
		}
		return strings.ReplaceAll(humanize.IBytes(n), " ", ""), nil
	}
}

// keyedError is a Check error about one option (normalizeOptions reports it under that key).
type keyedError struct {
	key string
	err error
}

func (e *keyedError) Error() string { return e.err.Error() }
func (e *keyedError) Unwrap() error { return e.err }

// Transaction modes (txn_mode): none, sdur and 2pc for raft keyspaces; catenae for catenae
// keyspaces (and only there).
const (
	TxnNone    = "none"
	TxnSDUR    = "sdur"
	Txn2PC     = "2pc"
	TxnCatenae = "catenae"
)

// catenaeOptionSpecs are the options of catenae keyspaces (docs/catenae.md names each
// decision).
var catenaeOptionSpecs = []OptionSpec{
	{Name: "txn_mode", Default: TxnCatenae, Doc: "catenae (the only mode of a catenae keyspace; named so that every transactional keyspace says its mode)", Normalize: func(v string) (string, error) {
		if m := strings.ToLower(strings.TrimSpace(v)); m == TxnCatenae {
			return m, nil
		}
		return "", fmt.Errorf("a catenae keyspace's txn_mode is catenae, not %q", v)
	}},
	{Name: "epoch_length", Default: "10ms", Doc: "the epoch interval: each region's replica sends the transactions it stamped into an epoch once its clock passes the epoch's end; commit latency is about half a round trip plus up to one epoch; 1ms..1s", Normalize: durationRange(time.Millisecond, time.Second)},
	{Name: "redundancy", Default: "3", Doc: "earlier epochs repeated in each epoch message (MeteorShower's l), so a lost message costs no round trip; 1..64", Normalize: intRange(1, 64)},
	{Name: "request_after", Default: "200ms", Doc: "an epoch missing from a region this long after a later one arrived is asked for again; 10ms..1m", Normalize: durationRange(10*time.Millisecond, time.Minute)},
	{Name: "read_retain", Default: "5s", Doc: "how long older versions are kept so that the reads of one transaction, spread over several requests, all read at the epoch its first read fixed (older: the read is refused and the transaction starts again); 0s..10m", Normalize: durationRange(0, 10*time.Minute)},
	{Name: "max_open", Default: "4096", Doc: "transactions a replica holds in open epochs at most (each executes again when an earlier one arrives); beyond it a commit is refused as overloaded; 1..1000000", Normalize: intRange(1, 1_000_000)},
}

func normalizeAutoOr(check func(string) (string, error)) func(string) (string, error) {
	return func(v string) (string, error) {
		if strings.EqualFold(strings.TrimSpace(v), "auto") {
			return "auto", nil
		}
		return check(v)
	}
}

var canopusOptionSpecs = []OptionSpec{
	{Name: "cycle_interval", Default: "5ms", Doc: "a node with requests waiting starts its next consensus cycle this long after its last one (thesis 4.5.1; 5 ms in 4.6.2); 1ms..1s", Normalize: durationRange(time.Millisecond, time.Second)},
	{Name: "batch_max", Default: "1000", Doc: "requests that start a cycle at once, without waiting for cycle_interval (4.6.2: 1000); 1..100000", Normalize: intRange(1, 100_000)},
	{Name: "max_cycles_in_flight", Default: "auto", Doc: "the pipeline depth p: cycles a node may have started and not committed; a membership change decided in cycle c applies from cycle c+p+1 (auto: the largest round trip between regions over cycle_interval, plus 1, at most 64); 1..64 or auto", Normalize: normalizeAutoOr(intRange(1, 64))},
	{Name: "representatives", Default: "2", Doc: "members of each super-leaf that fetch other super-leaves' states (4.2.5); any member fetches a state it waited fetch_timeout for; 1..16", Normalize: intRange(1, 16)},
	{Name: "tree_height", Default: "2", Doc: "height of the leaf-only tree: 2 puts every region under the root (the thesis's); taller trees group regions by round trip; 2..8", Normalize: intRange(2, 8)},
	{Name: "fetch_timeout", Default: "auto", Doc: "a state fetched from another super-leaf and not received after this long is fetched again, by any member (auto: twice the largest round trip plus 20ms); 1ms..1m or auto", Normalize: normalizeAutoOr(durationRange(time.Millisecond, time.Minute))},
	{Name: "write_leases", Default: "true", Doc: "write leases (thesis 4.5.2): a key not written recently is read at once from the node's committed state (after a round trip inside its region), while a write to a key without a lease first asks for it and waits max_cycles_in_flight+1 cycles; false: every read waits for the next cycle", Normalize: normalizeBool},
	{Name: "lease_cycles", Default: "auto", Doc: "cycles a write lease lasts; a node still writing the key renews it before it ends (auto: 4×(max_cycles_in_flight+1)); at least 4×(max_cycles_in_flight+1); 8..1000000 or auto", Normalize: normalizeAutoOr(intRange(8, 1_000_000))},
	{Name: "heartbeat_interval", Default: "100ms", Doc: "heartbeats of each member's broadcast group (a multiple of the 10ms tick); 10ms..10s", Normalize: durationRange(10*time.Millisecond, 10*time.Second)},
	{Name: "election_timeout", Default: "1s", Doc: "a member whose group hears nothing of it this long is replaced as its group's leader, which closes its epoch: its cycles go on without it until it is readmitted (4.2.3); at least 3 heartbeat intervals; 30ms..2m", Normalize: durationRange(30*time.Millisecond, 2*time.Minute)},
	{Name: "exclude_after", Default: "0s", Doc: "region exclusion (beyond the thesis, 4.4): a region whose super-leaf has stalled the cycles this long is excluded through the metadata group, and the others go on without it; costs every cycle one more local log commit and each super-leaf's state crossing each region pair twice (a fetch carries the requester's state), and needs tree_height 2; 0s: off, a lost region stalls the keyspace until it returns (the thesis's Canopus); 0s or 1s..1h", Normalize: normalizeExcludeAfter},
}

// normalizeExcludeAfter accepts 0s (off) or a duration in [1s, 1h]: shorter would exclude a
// region on a passing delay, and exclusion is permanent.
func normalizeExcludeAfter(v string) (string, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return "", fmt.Errorf("invalid duration %q", v)
	}
	if d != 0 && (d < time.Second || d > time.Hour) {
		return "", fmt.Errorf("%s: want 0s (off) or 1s..1h (an exclusion is permanent: a shorter wait would exclude a region on a passing delay)", d)
	}
	return d.String(), nil
}

var epaxosOptionSpecs = []OptionSpec{
	{Name: "batch_interval", Default: "5ms", Doc: "a replica with commands waiting starts an instance this long after the first arrived (the thesis ran EPaxos with Canopus's batching, 4.6.2: 5 ms); 100us..1s", Normalize: durationRange(100*time.Microsecond, time.Second)},
	{Name: "batch_max", Default: "1000", Doc: "commands that start an instance at once (4.6.2: 1000); 1..100000", Normalize: intRange(1, 100_000)},
	{Name: "fast_path_timeout", Default: "auto", Doc: "how long a command leader waits past a majority's replies for a fast quorum's before it takes the slow path (auto: the largest round trip between the keyspace's regions plus 20ms); 1ms..1m or auto", Normalize: normalizeAutoOr(durationRange(time.Millisecond, time.Minute))},
	{Name: "recovery_timeout", Default: "auto", Doc: "a replica recovers (explicit prepare) an instance it knows of that has not committed after this long plus a random share of it (auto: four times the largest round trip plus 200ms); 10ms..10m or auto", Normalize: normalizeAutoOr(durationRange(10*time.Millisecond, 10*time.Minute))},
	{Name: "report_interval", Default: "1s", Doc: "how often a replica tells the others how far it has executed: instances every replica executed are dropped, and a replica learns of instances it missed; 10ms..1m", Normalize: durationRange(10*time.Millisecond, time.Minute)},
	{Name: "max_instances", Default: "100000", Doc: "instances a replica keeps until every replica has executed them; a leader at the bound refuses commands (Overloaded); 100..10000000", Normalize: intRange(100, 10_000_000)},
	{Name: "overload_after", Default: "auto", Doc: "a replica refuses new commands (Overloaded) while the oldest of its clients' commands has waited this long, so that an overload leaves a backlog of at most this much work on the links, which then drains (auto: eight times the largest round trip between the keyspace's regions, at least 1s); 100ms..10m or auto", Normalize: normalizeAutoOr(durationRange(100*time.Millisecond, 10*time.Minute))},
}

// EPaxosOptions are an epaxos keyspace's typed options (0 durations: auto).
type EPaxosOptions struct {
	BatchInterval, FastPathTimeout, RecoveryTimeout, ReportInterval time.Duration
	OverloadAfter                                                   time.Duration
	BatchMax, MaxInstances                                          int
}

// EPaxosOptionsOf parses an epaxos keyspace's options (missing ones take their defaults).
func EPaxosOptionsOf(opts map[string]string) (EPaxosOptions, error) {
	norm, oerr := normalizeOptions(ProtocolSpec{Name: ProtocolEPaxos, Options: epaxosOptionSpecs}, opts)
	if oerr != nil {
		return EPaxosOptions{}, fmt.Errorf("options.%s: %s", oerr.key, oerr.msg)
	}
	dur := func(name string) time.Duration {
		if norm[name] == "auto" {
			return 0
		}
		d, _ := time.ParseDuration(norm[name]) // normalised above
		return d
	}
	num := func(name string) int {
		n, _ := strconv.Atoi(norm[name])
		return n
	}
	return EPaxosOptions{BatchInterval: dur("batch_interval"), FastPathTimeout: dur("fast_path_timeout"), RecoveryTimeout: dur("recovery_timeout"),
		ReportInterval: dur("report_interval"), OverloadAfter: dur("overload_after"), BatchMax: num("batch_max"), MaxInstances: num("max_instances")}, nil
}

func checkEPaxos(opts map[string]string) error {
	_, err := EPaxosOptionsOf(opts)
	return err
}

// CanopusTick is the tick of Canopus's broadcast groups.
const CanopusTick = 10 * time.Millisecond

// CanopusOptions are a canopus keyspace's typed options (0 for MaxInFlight and FetchTimeout:
// auto).
type CanopusOptions struct {
	CycleInterval, FetchTimeout, HeartbeatInterval, ElectionTimeout time.Duration
	// ExcludeAfter: 0 off; else how long a stall lasts before the region is excluded.
	ExcludeAfter                                       time.Duration
	BatchMax, MaxInFlight, Representatives, TreeHeight int
	WriteLeases                                        bool
	LeaseCycles                                        int // 0: auto
}

// CanopusOptionsOf parses a canopus keyspace's options (missing ones take their defaults).
func CanopusOptionsOf(opts map[string]string) (CanopusOptions, error) {
	norm, oerr := normalizeOptions(ProtocolSpec{Name: ProtocolCanopus, Options: canopusOptionSpecs}, opts)
	if oerr != nil {
		return CanopusOptions{}, fmt.Errorf("options.%s: %s", oerr.key, oerr.msg)
	}
	var o CanopusOptions
	dur := func(name string) time.Duration {
		d, _ := time.ParseDuration(norm[name]) // normalised above
		return d
	}
	num := func(name string) int {
		n, _ := strconv.Atoi(norm[name])
		return n
	}
	o.CycleInterval, o.HeartbeatInterval, o.ElectionTimeout = dur("cycle_interval"), dur("heartbeat_interval"), dur("election_timeout")
	if norm["fetch_timeout"] != "auto" {
		o.FetchTimeout = dur("fetch_timeout")
	}
	if norm["max_cycles_in_flight"] != "auto" {
		o.MaxInFlight = num("max_cycles_in_flight")
	}
	o.BatchMax, o.Representatives, o.TreeHeight = num("batch_max"), num("representatives"), num("tree_height")
	o.WriteLeases = norm["write_leases"] == "true"
	o.ExcludeAfter = dur("exclude_after")
	if o.ExcludeAfter > 0 && o.TreeHeight != 2 {
		return o, fmt.Errorf("options.exclude_after: region exclusion needs tree_height 2 (a taller tree's merged states would have to be split back into regions)")
	}
	if norm["lease_cycles"] != "auto" {
		o.LeaseCycles = num("lease_cycles")
	}
	if o.HeartbeatInterval%CanopusTick != 0 {
		return o, fmt.Errorf("options.heartbeat_interval: %s is not a multiple of the %s tick", o.HeartbeatInterval, CanopusTick)
	}
	if o.ElectionTimeout < 3*o.HeartbeatInterval {
		return o, fmt.Errorf("options.election_timeout: %s must be at least 3 heartbeat intervals (%s)", o.ElectionTimeout, 3*o.HeartbeatInterval)
	}
	return o, nil
}

func checkCanopus(opts map[string]string) error {
	_, err := CanopusOptionsOf(opts)
	return err
}

// CatenaeOptions are the typed options of a catenae keyspace.
type CatenaeOptions struct {
	EpochLength, RequestAfter, ReadRetain time.Duration
	Redundancy, MaxOpen                   int
}

// CatenaeOptionsOf parses a catenae keyspace's normalised options.
func CatenaeOptionsOf(opts map[string]string) (CatenaeOptions, error) {
	var o CatenaeOptions
	var err error
	dur := func(name string) time.Duration {
		if err != nil {
			return 0
		}
		var d time.Duration
		if d, err = time.ParseDuration(optionOr(opts, name, catenaeOptionSpecs)); err != nil {
			err = fmt.Errorf("option %s: %w", name, err)
		}
		return d
	}
	num := func(name string) int {
		if err != nil {
			return 0
		}
		var n int
		if n, err = strconv.Atoi(optionOr(opts, name, catenaeOptionSpecs)); err != nil {
			err = fmt.Errorf("option %s: %w", name, err)
		}
		return n
	}
	o.EpochLength, o.RequestAfter, o.ReadRetain = dur("epoch_length"), dur("request_after"), dur("read_retain")
	o.Redundancy, o.MaxOpen = num("redundancy"), num("max_open")
	return o, err
}

// optionOr is an option's value, or its default.
func optionOr(opts map[string]string, name string, specs []OptionSpec) string {
	if v, ok := opts[name]; ok && v != "" {
		return v
	}
	for _, s := range specs {
		if s.Name == name {
			return s.Default
		}
	}
	return ""
}

// txnOptionSpecs are the transaction options of raft keyspaces (docs/transactions.md). Not
// the metadata protocol's: its group is not transactional.
var txnOptionSpecs = []OptionSpec{
	{Name: "txn_mode", Default: TxnNone, Doc: "none (plain keys: Put, Delete), sdur (multi-key serializable transactions by Geo-SDUR, geo-sdur IV) or 2pc (the two-phase commit baseline: optimistic reads validated at prepare, no-wait locks, the decision in the coordinator partition's log); transactional keyspaces take TxnRead and TxnCommit and refuse plain writes; fixed when the keyspace is created", Normalize: normalizeTxnMode},
	{Name: "reorder_threshold", Default: "entries:0", Doc: "sdur only: how far a local transaction may be reordered before a global one that waits for its votes (geo-sdur IV-E): entries:K (K log entries; 0: no reordering, plain SDUR), ticks:K (K tick entries of txn_tick_interval: a threshold in time), or auto (ticks retuned from the measured vote lag)", Normalize: normalizeReorderThreshold},
	{Name: "txn_delay", Default: "0s", Doc: "sdur only: delaying (geo-sdur IV-D): a global transaction's part for a partition led in the submitter's region is appended this long after the parts for remote partitions, so that its partitions deliver it at about the same time (locals wait less behind it); a Go duration 0..1s, or auto (each submitter estimates, per partition, how long delivery takes from the votes it sees)", Normalize: normalizeTxnDelay},
	{Name: "txn_tick_interval", Default: "10ms", Doc: "sdur only: how often a partition's leader appends a tick entry while a global transaction waits for its threshold (ticks:K and auto); 1ms..1s", Normalize: durationRange(time.Millisecond, time.Second)},
}

func normalizeTxnMode(v string) (string, error) {
	switch m := strings.ToLower(strings.TrimSpace(v)); m {
	case TxnNone, TxnSDUR, Txn2PC:
		return m, nil
	}
	return "", fmt.Errorf("invalid txn_mode %q (want none, sdur or 2pc)", v)
}

func normalizeTxnDelay(v string) (string, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "auto" {
		return v, nil
	}
	return durationRange(0, time.Second)(v)
}

// maxReorderThreshold bounds reorder_threshold's K (sdur.Options.Validate).
const maxReorderThreshold = 1 << 20

func normalizeReorderThreshold(v string) (string, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "auto" {
		return v, nil
	}
	unit, k, ok := strings.Cut(v, ":")
	if !ok || (unit != "entries" && unit != "ticks") {
		return "", fmt.Errorf("invalid reorder_threshold %q (want entries:K, ticks:K or auto)", v)
	}
	n, err := strconv.ParseUint(k, 10, 64)
	if err != nil || n > maxReorderThreshold {
		return "", fmt.Errorf("invalid reorder_threshold %q: K must be an integer 0..%d", v, maxReorderThreshold)
	}
	return fmt.Sprintf("%s:%d", unit, n), nil
}

// checkRaft checks a raft keyspace's options together: the elastic ones, and the
// transaction options only with a transaction mode.
func checkRaft(opts map[string]string) error {
	if err := checkElastic(opts); err != nil {
		return err
	}
	if TxnModeOf(opts) != TxnSDUR {
		for _, o := range txnOptionSpecs[1:] {
			if v, ok := opts[o.Name]; ok && v != o.Default {
				return &keyedError{key: o.Name, err: fmt.Errorf("%s applies to txn_mode sdur only (txn_mode is %s)", o.Name, TxnModeOf(opts))}
			}
		}
	}
	return nil
}

// TxnModeOf returns a keyspace's transaction mode from its options (absent: none, as for
// keyspaces created before the option existed).
func TxnModeOf(opts map[string]string) string {
	if m := opts["txn_mode"]; m != "" {
		return m
	}
	return TxnNone
}

// checkElastic: Θmax ≥ 2·Θmin, so that a merged partition does not split again and the
// halves of a split do not merge again (ElasCass 3.1).
func checkElastic(opts map[string]string) error {
	eo, err := ElasticOptionsOf(opts)
	if err != nil {
		return err
	}
	if eo.SplitBytes > 0 && eo.MergeBytes > 0 && eo.SplitBytes < 2*eo.MergeBytes {
		return fmt.Errorf("split_bytes (%d) must be at least twice merge_bytes (%d)", eo.SplitBytes, eo.MergeBytes)
	}
	return nil
}

// ElasticOptions are a keyspace's typed elasticity options.
type ElasticOptions struct {
	SplitBytes, MergeBytes int64
	SplitOps               float64
	MinPartitions          int
}

// ElasticOptionsOf parses the elasticity options (missing ones take their defaults).
func ElasticOptionsOf(opts map[string]string) (ElasticOptions, error) {
	get := func(name string) string {
		if v, ok := opts[name]; ok && v != "" {
			return v
		}
		for _, o := range elasticOptionSpecs {
			if o.Name == name {
				return o.Default
			}
		}
		return ""
	}
	var eo ElasticOptions
	sb, err := humanize.ParseBytes(get("split_bytes"))
	if err != nil {
		return eo, fmt.Errorf("split_bytes: %w", err)
	}
	mb, err := humanize.ParseBytes(get("merge_bytes"))
	if err != nil {
		return eo, fmt.Errorf("merge_bytes: %w", err)
	}
	if _, err := fmt.Sscanf(get("split_ops"), "%g", &eo.SplitOps); err != nil {
		return eo, fmt.Errorf("split_ops: %w", err)
	}
	if _, err := fmt.Sscanf(get("min_partitions"), "%d", &eo.MinPartitions); err != nil {
		return eo, fmt.Errorf("min_partitions: %w", err)
	}
	eo.SplitBytes, eo.MergeBytes = int64(sb), int64(mb)
	return eo, nil
}

// byteSize normalises a size ("512MiB", "2 GB", "0") to bytes in IEC form.
func byteSize(v string) (string, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(v))
	if err != nil {
		return "", fmt.Errorf("invalid size %q (e.g. 512MiB, 2GB, 0)", v)
	}
	if n > 1<<50 {
		return "", fmt.Errorf("size %q is larger than 1 PiB", v)
	}
	if n == 0 {
		return "0", nil
	}
	return strings.ReplaceAll(humanize.IBytes(n), " ", ""), nil
}

// QuorumOptions are the typed options of a quorum keyspace.
type QuorumOptions struct {
	ReadLevel        Level         // default level of reads
	WriteLevel       Level         // default level of writes
	SpeculativeRetry time.Duration // 0 = automatic
	LargeReads       LargeReadOptions
}

// LargeReadOptions are a keyspace's large-read options (largeReadOptionSpecs).
type LargeReadOptions struct {
	Selector       string
	ThresholdBytes int // 0: no large reads
	ChunkBytes     int
	Window         int
	HedgeAfter     time.Duration // 0: automatic
	Split          string        // never, literal, makespan
	ScanPageBytes  int           // a scan page's byte bound; 0: 4 MiB
	ScanWindow     int           // scan pages in flight from a replica read alone; 0: 1
}

// QuorumOptionsOf parses the options of a quorum keyspace. Missing options take their
// defaults, so it also works on options that were never validated.
func QuorumOptionsOf(opts map[string]string) (QuorumOptions, error) {
	p, _ := Protocol(ProtocolQuorum)
	norm, oerr := normalizeOptions(p, opts)
	if oerr != nil {
		return QuorumOptions{}, fmt.Errorf("options.%s: %s", oerr.key, oerr.msg)
	}
	d, err := time.ParseDuration(norm["speculative_retry"])
	if err != nil {
		return QuorumOptions{}, fmt.Errorf("options.speculative_retry: %v", err)
	}
	lr, err := largeReadOptionsOf(norm)
	if err != nil {
		return QuorumOptions{}, err
	}
	return QuorumOptions{
		ReadLevel:        Level(norm["read_level"]),
		WriteLevel:       Level(norm["write_level"]),
		SpeculativeRetry: d,
		LargeReads:       lr,
	}, nil
}

// LargeReadOptionsOf parses a keyspace's large-read options. A protocol that has none (only
// the quorum protocol's reads take them) gets the zero options: no large reads.
func LargeReadOptionsOf(protocol string, opts map[string]string) (LargeReadOptions, error) {
	p, ok := Protocol(protocol)
	if !ok || !slices.ContainsFunc(p.Options, func(o OptionSpec) bool { return o.Name == "read_selector" }) {
		return LargeReadOptions{}, nil
	}
	norm, oerr := normalizeOptions(p, opts)
	if oerr != nil {
		return LargeReadOptions{}, fmt.Errorf("options.%s: %s", oerr.key, oerr.msg)
	}
	return largeReadOptionsOf(norm)
}

func largeReadOptionsOf(norm map[string]string) (LargeReadOptions, error) {
	o := LargeReadOptions{Selector: norm["read_selector"], Split: norm["mayflower_split"]}
	size := func(key string) (int, error) {
		n, err := humanize.ParseBytes(norm[key])
		if err != nil {
			return 0, fmt.Errorf("options.%s: %v", key, err)
		}
		return int(n), nil
	}
	var err error
	if o.ThresholdBytes, err = size("large_read_bytes"); err != nil {
		return o, err
	}
	if o.ChunkBytes, err = size("read_chunk_bytes"); err != nil {
		return o, err
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = 256 << 10
	}
	if o.ScanPageBytes, err = size("scan_page_bytes"); err != nil {
		return o, err
	}
	if _, err := fmt.Sscanf(norm["read_window"], "%d", &o.Window); err != nil {
		return o, fmt.Errorf("options.read_window: %v", err)
	}
	if _, err := fmt.Sscanf(norm["scan_window_pages"], "%d", &o.ScanWindow); err != nil {
		return o, fmt.Errorf("options.scan_window_pages: %v", err)
	}
	if o.HedgeAfter, err = time.ParseDuration(norm["hedge_after"]); err != nil {
		return o, fmt.Errorf("options.hedge_after: %v", err)
	}
	return o, nil
}

// KeyRange maps keys ≥ Start (up to the next range's Start) to a value.
type KeyRange[T any] struct {
	Start string
	Value T
}

// GlobLeaseOptions are the typed options of a globlease keyspace.
type GlobLeaseOptions struct {
	HomeRegion      string
	HomeRanges      []KeyRange[string]
	Lease           time.Duration
	LeaseRanges     []KeyRange[time.Duration]
	Passive         bool // default write mode
	MasterLease     time.Duration
	ElectionTimeout time.Duration
	AutoMigrate     bool
	MigrateShare    float64
	MigrateHold     time.Duration
	MigrateCooldown time.Duration
	HotKeys         bool
	HotKeyRate      float64
	HotKeyReplicas  int
	SecondaryLease  time.Duration
	// SuspectAfter, SuspectLease, SuspectProbation: shorter leases for lease holders that
	// stall writes (liu-thesis 4.1.3 "Leasing Period": lease length per node).
	SuspectAfter, SuspectLease, SuspectProbation time.Duration
}

// HomeRegionOf returns the region whose replica masters key by default.
func (o GlobLeaseOptions) HomeRegionOf(key []byte) string {
	return rangeValue(o.HomeRanges, key, o.HomeRegion)
}

// LeaseOf returns the lease length of key.
func (o GlobLeaseOptions) LeaseOf(key []byte) time.Duration {
	return rangeValue(o.LeaseRanges, key, o.Lease)
}

func rangeValue[T any](ranges []KeyRange[T], key []byte, def T) T {
	// The last range whose start is ≤ key; ranges are sorted by start (validated).
	i := sort.Search(len(ranges), func(i int) bool { return ranges[i].Start > string(key) })
	if i == 0 {
		return def
	}
	return ranges[i-1].Value
}

// GlobLeaseOptionsOf parses the options of a globlease keyspace whose replicas are in regions
// (the first is the default home region). Missing options take their defaults.
func GlobLeaseOptionsOf(opts map[string]string, regions []string) (GlobLeaseOptions, error) {
	p, _ := Protocol(ProtocolGlobLease)
	norm, oerr := normalizeOptions(p, opts)
	if oerr != nil {
		return GlobLeaseOptions{}, fmt.Errorf("options.%s: %s", oerr.key, oerr.msg)
	}
	var o GlobLeaseOptions
	inRegions := func(r string) bool { return slicesContains(regions, r) }
	o.HomeRegion = norm["home_region"]
	if o.HomeRegion == "" && len(regions) > 0 {
		o.HomeRegion = regions[0]
	}
	if !inRegions(o.HomeRegion) {
		return o, fmt.Errorf("options.home_region: %q is not one of the keyspace's regions %v", o.HomeRegion, regions)
	}
	for _, kv := range splitRanges(norm["home_ranges"]) {
		if !inRegions(kv.Value) {
			return o, fmt.Errorf("options.home_ranges: %q is not one of the keyspace's regions %v", kv.Value, regions)
		}
		o.HomeRanges = append(o.HomeRanges, kv)
	}
	dur := func(name string) time.Duration {
		d, _ := time.ParseDuration(norm[name]) // normalized above
		return d
	}
	o.Lease = dur("lease")
	for _, kv := range splitRanges(norm["lease_ranges"]) {
		d, err := durationRange(10*time.Millisecond, time.Hour)(kv.Value)
		if err != nil {
			return o, fmt.Errorf("options.lease_ranges: range %q: %v", kv.Start, err)
		}
		dd, _ := time.ParseDuration(d)
		o.LeaseRanges = append(o.LeaseRanges, KeyRange[time.Duration]{Start: kv.Start, Value: dd})
	}
	o.Passive = norm["write_mode"] == "passive"
	o.MasterLease = dur("master_lease")
	o.ElectionTimeout = dur("election_timeout")
	if o.ElectionTimeout < o.MasterLease+100*time.Millisecond {
		return o, fmt.Errorf("options.election_timeout: %v must exceed master_lease (%v) by at least 100ms, so a new master is elected only after the old one stopped acting", o.ElectionTimeout, o.MasterLease)
	}
	o.AutoMigrate = norm["auto_migrate"] == "true"
	o.MigrateShare, _ = strconv.ParseFloat(norm["migrate_share"], 64)
	o.MigrateHold = dur("migrate_hold")
	o.MigrateCooldown = dur("migrate_cooldown")
	o.HotKeys = norm["hot_keys"] == "true"
	o.HotKeyRate, _ = strconv.ParseFloat(norm["hot_key_rate"], 64)
	o.HotKeyReplicas, _ = strconv.Atoi(norm["hot_key_replicas"])
	o.SecondaryLease = dur("secondary_lease")
	o.SuspectAfter = dur("suspect_after")
	o.SuspectLease = dur("suspect_lease")
	o.SuspectProbation = dur("suspect_probation")
	return o, nil
}

func splitRanges(v string) []KeyRange[string] {
	if v == "" {
		return nil
	}
	var out []KeyRange[string]
	for _, part := range strings.Split(v, ",") {
		start, val, _ := strings.Cut(part, "=")
		out = append(out, KeyRange[string]{Start: start, Value: val})
	}
	return out
}

func slicesContains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// RaftTick is the Raft engines' logical clock tick: timings are whole numbers of ticks.
const RaftTick = 50 * time.Millisecond

// RaftOptions are a raft keyspace's options, typed.
type RaftOptions struct {
	// LeaderRegion is where leaders are steered ("": the keyspace's first region).
	LeaderRegion      string
	ReadLevel         Level
	HeartbeatInterval time.Duration
	ElectionTimeout   time.Duration
	// LogRetain is how many applied entries a replica keeps (log compaction).
	LogRetain uint64
	// TxnMode is the keyspace's transaction mode (TxnNone or TxnSDUR).
	TxnMode string
	// Threshold is sdur's reordering threshold: its unit ("entries" or "ticks") and K, or
	// AutoThreshold (ticks, retuned from the measured vote lag).
	ThresholdUnit string
	ThresholdK    uint64
	AutoThreshold bool
	// TxnTickInterval is how often a leader appends tick entries while globals wait.
	TxnTickInterval time.Duration
	// TxnDelay is sdur's fixed Δ (delaying), or AutoDelay: estimated by each submitter.
	TxnDelay  time.Duration
	AutoDelay bool
}

// HeartbeatTicks and ElectionTicks are the timings in RaftTick units.
func (o RaftOptions) HeartbeatTicks() int { return int(o.HeartbeatInterval / RaftTick) }
func (o RaftOptions) ElectionTicks() int  { return int(o.ElectionTimeout / RaftTick) }

// RaftOptionsOf parses normalised raft options and checks them together.
func RaftOptionsOf(opts map[string]string) (RaftOptions, error) {
	var o RaftOptions
	var err error
	o.LeaderRegion = opts["leader_region"]
	o.ReadLevel = Level(opts["read_level"])
	if o.ReadLevel == "" {
		o.ReadLevel = LevelLinearizable
	}
	if o.HeartbeatInterval, err = time.ParseDuration(cmpOr(opts["heartbeat_interval"], "200ms")); err != nil {
		return o, fmt.Errorf("heartbeat_interval: %w", err)
	}
	if o.ElectionTimeout, err = time.ParseDuration(cmpOr(opts["election_timeout"], "2s")); err != nil {
		return o, fmt.Errorf("election_timeout: %w", err)
	}
	o.LogRetain = 50_000
	if v := opts["log_retain"]; v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n < 10 {
			return o, fmt.Errorf("log_retain %q: want an integer of at least 10", v)
		}
		o.LogRetain = n
	}
	o.TxnMode = TxnModeOf(opts)
	o.ThresholdUnit, o.TxnTickInterval = "entries", 10*time.Millisecond
	if v := opts["reorder_threshold"]; v == "auto" {
		o.ThresholdUnit, o.AutoThreshold = "ticks", true
	} else if v != "" {
		unit, k, _ := strings.Cut(v, ":")
		n, err := strconv.ParseUint(k, 10, 64)
		if err != nil || (unit != "entries" && unit != "ticks") {
			return o, fmt.Errorf("reorder_threshold %q: want entries:K, ticks:K or auto", v)
		}
		o.ThresholdUnit, o.ThresholdK = unit, n
	}
	if v := opts["txn_delay"]; v == "auto" {
		o.AutoDelay = true
	} else if v != "" {
		if o.TxnDelay, err = time.ParseDuration(v); err != nil || o.TxnDelay < 0 {
			return o, fmt.Errorf("txn_delay %q: want a duration ≥ 0 or auto", v)
		}
	}
	if v := opts["txn_tick_interval"]; v != "" {
		if o.TxnTickInterval, err = time.ParseDuration(v); err != nil || o.TxnTickInterval <= 0 {
			return o, fmt.Errorf("txn_tick_interval %q: want a positive duration", v)
		}
	}
	if o.HeartbeatInterval%RaftTick != 0 {
		return o, fmt.Errorf("heartbeat_interval %s is not a multiple of the Raft tick %s", o.HeartbeatInterval, RaftTick)
	}
	if o.ElectionTimeout < 3*o.HeartbeatInterval {
		return o, fmt.Errorf("election_timeout %s must be at least 3 heartbeat intervals (%s)", o.ElectionTimeout, 3*o.HeartbeatInterval)
	}
	return o, nil
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
