// Package config reads and validates a Meridian cluster configuration: the cluster's name,
// its topology (regions and the RTTs between them), the clock-offset bound, the nodes, the
// initial keyspaces, the request limits and the anti-entropy interval.
//
// The format is YAML, decoded strictly: unknown fields, duplicate keys, values of the wrong
// kind and every inconsistency are errors that name the field path and line, for example
//
//	config examples/bad.yaml:12: nodes[1].region: unknown region "mars" (topology gcp-meteorshower-3 has europe, us, asia)
//
// docs/configuration.md is the reference for every field.
package config

import (
	"time"

	"meridian/internal/topology"
)

// Cluster is a validated cluster configuration.
type Cluster struct {
	Name string
	// Topology is resolved: a built-in topology, a topology file, or the inline description.
	Topology *topology.Topology
	// TopologyRef is what the file said: a built-in name, the path as written, or "inline".
	TopologyRef string
	Clock       Clock
	Nodes       []Node
	Keyspaces   []Keyspace
	Limits      Limits
	AntiEntropy AntiEntropy
	Metadata    Metadata
	Elasticity  Elasticity
	BwMan       BwMan
	Network     Network
	// Streams configures the stream service (docs/streams.md).
	Streams Streams
	// AllowInternal lets keyspaces use internal protocols (the cluster metadata protocol):
	// the simulator's clusters only; never from a file.
	AllowInternal bool `yaml:"-"`
}

// Elasticity configures the placement driver (ElasCass; docs/elasticity.md): splits and
// merges, replica moves for joining, leaving and dead nodes, balancing.
type Elasticity struct {
	// Driver: the placement driver runs (on one node at a time: the live active member with
	// the lowest ID). Default true; off, partitions and replicas change only by hand
	// (split, merge, admin move).
	Driver *bool `yaml:"driver"`
	// Strategy is how a joining node gets its data: two-phase (ElasCass: a little at once,
	// then the rest in the background), one-phase (its whole share first) or split-move
	// (Cassandra's: half of the largest node's data). Default two-phase.
	Strategy string `yaml:"strategy"`
	// Interval is how often nodes share their statistics and the driver plans. Default 1s.
	Interval time.Duration `yaml:"interval"`
	// DeadAfter: a node silent this long has its replicas re-created on others (Rule 2).
	// Default 5m.
	DeadAfter time.Duration `yaml:"dead_after"`
	// MaxMovesPerNode bounds the replica moves into one node at a time (the background
	// phase's throttle; default 2); MaxMoves those of the cluster (default 16).
	MaxMovesPerNode int `yaml:"max_moves_per_node"`
	MaxMoves        int `yaml:"max_moves"`
	// TargetByteImbalance and TargetLoadImbalance: once a region's replica counts are
	// balanced and it has been quiet for SettleFor, the driver moves or swaps replicas
	// between its nodes until the imbalance index (standard deviation over mean) of their
	// bytes and of their load is at most these (defaults 0.05 and 0.10; -1 turns one off).
	TargetByteImbalance float64       `yaml:"target_byte_imbalance"`
	TargetLoadImbalance float64       `yaml:"target_load_imbalance"`
	SettleFor           time.Duration `yaml:"settle_for"` // default 5s
	// StalledAfter: a replica move in flight this long is aborted, whatever held it up (its
	// partition goes back to the old replicas, which kept serving).
	StalledAfter time.Duration `yaml:"stalled_after"` // default 10m
	// Interference: the driver detects nodes slowed by their hosts (Hubbub-scale,
	// internal/hubbub) and gives them a smaller share of replicas. Default on.
	Interference *bool `yaml:"interference"`
}

// BwMan configures each node's bandwidth arbiter (internal/bwman; docs/elasticity.md, "BwMan"):
// how the node shapes its system traffic (replica moves and Raft snapshots, anti-entropy)
// against its client traffic.
type BwMan struct {
	// Mode: off (no shaping: the default), static (a fixed cap, StaticRate) or auto (BwMan:
	// the link less the clients' learnt need, guarded by their p99).
	Mode string `yaml:"mode"`
	// LinkBandwidth is each node's network bandwidth ("1Gbit" is "125MB"; auto needs it), in
	// bytes per second, e.g. 100MB.
	LinkBandwidth string `yaml:"link_bandwidth"`
	// StaticRate caps the system class in static mode, bytes per second, e.g. 20MB.
	StaticRate string `yaml:"static_rate"`
	// SLOP99 is the client latency SLO auto mode holds: the p99 of a period's requests at a
	// node. Default 100ms.
	SLOP99 time.Duration `yaml:"slo_p99"`
	// Policy: user-first (default: clients keep their need; the system class gets what is
	// left) or recovery-first (under-replicated partitions keep half the link).
	Policy string `yaml:"policy"`
	// Period is the control period. Default 1s.
	Period time.Duration `yaml:"period"`
	// ChunkSize is the size of the chunks snapshot transfers (replica moves, Raft snapshots)
	// ask for, in every mode. A chunk holds the link for its size over the bandwidth and a
	// client message queued behind it waits as long, so by default it is a tenth of the SLO's
	// worth of the link when link_bandwidth is given (16 KiB to 512 KiB), else 512 KiB.
	ChunkSize string `yaml:"chunk_size"`

	// Parsed forms (set by validation).
	LinkBytesPerSec, StaticBytesPerSec float64 `yaml:"-"`
	ChunkBytes                         int     `yaml:"-"`
}

// Network describes the links large reads cross, for the Mayflower selector (keyspace option
// read_selector: mayflower; docs/mayflower.md): each node's network interface and the links
// between regions, each way. Mayflower costs a read on them with the transfers every node
// reports (thesis 3.5.2, endpoint-only flow tracking).
type Network struct {
	// NodeBandwidth is each node's interface, each way, bytes per second (e.g. 125MB for
	// 1 Gbit/s). Mayflower needs it; without it its keyspaces read from the nearest replica
	// and count the fallback (meridian_large_reads_total{selector="mayflower-unconfigured"}).
	NodeBandwidth string `yaml:"node_bandwidth"`
	// WANBandwidth is each link between two regions, each way (unset: the regions' links are
	// not a bottleneck, only the nodes' interfaces are).
	WANBandwidth string `yaml:"wan_bandwidth"`
	// ReportInterval is how often a node tells the others about the transfers it receives
	// (the thesis polls switch counters every second). Default 1s; 50ms to 1m.
	ReportInterval time.Duration `yaml:"report_interval"`

	// Parsed forms (set by validation).
	NodeBytesPerSec, WANBytesPerSec float64 `yaml:"-"`
}

// DriverOn reports whether the placement driver runs.
func (e Elasticity) DriverOn() bool { return e.Driver == nil || *e.Driver }

// InterferenceOn reports whether the driver acts on interference.
func (e Elasticity) InterferenceOn() bool { return e.Interference == nil || *e.Interference }

// Metadata configures the cluster metadata group: the Raft group that holds keyspaces,
// placement and membership. Its voters are a few nodes spread over the regions; every other
// node follows it as a learner.
type Metadata struct {
	// Voters names the voting members (an odd number, 1..7). Default: up to five nodes, one
	// per region in turn (the topology's region order, each region's nodes in file order).
	Voters []string `yaml:"voters"`
}

// Clock holds the clock assumptions protocols may rely on.
type Clock struct {
	// MaxOffset is ε, the bound on the clock offset between any two nodes. Protocols that
	// depend on it (MeteorShower, leases) fall back to a safe mode when the measured offset
	// exceeds it. Default 2ms; 0 < MaxOffset ≤ 1s.
	MaxOffset time.Duration `yaml:"max_offset"`
	// FutureVersionMargin: a version received from a peer more than MaxOffset +
	// FutureVersionMargin ahead of the receiver's clock is refused and counted, never
	// applied. No correct node issues one while clocks are within ε (a hybrid logical clock
	// never runs ahead of the fastest physical clock); the margin keeps a clock that is
	// somewhat beyond ε degrading visibly instead of losing writes. Default 1s; ≤ 1h.
	FutureVersionMargin time.Duration `yaml:"future_version_margin"`
}

// MaxFutureVersion is how far ahead of the receiver's clock a peer's version may be.
func (c Clock) MaxFutureVersion() time.Duration { return c.MaxOffset + c.FutureVersionMargin }

// Node is one server process.
type Node struct {
	// ID is the node's numeric identity, used as the tie-breaker of versions (timestamp, node
	// id). Default: the node's 1-based position in the file. It must stay stable for the
	// life of the cluster's data: to remove a node that is not the last, give the remaining
	// nodes explicit ids.
	ID     uint32 `yaml:"id"`
	Name   string `yaml:"name"`   // unique, [a-z0-9-]+
	Region string `yaml:"region"` // a region of the topology
	Listen string `yaml:"listen"` // host:port of the client API (gRPC)
	// PeerListen is the host:port of the peer service (replication between nodes). It is a
	// separate listener so that it can be firewalled off from clients; peers accept streams
	// only from nodes of the cluster (docs/configuration.md, "Peer traffic").
	PeerListen string `yaml:"peer_listen"`
	Metrics    string `yaml:"metrics"` // optional host:port serving Prometheus /metrics; "" when disabled
}

// Keyspace is a named set of keys with its replication settings.
type Keyspace struct {
	Name              string   `yaml:"name"`                // unique, [a-z][a-z0-9_]*
	Protocol          string   `yaml:"protocol"`            // a known protocol, see Protocols()
	Regions           []string `yaml:"regions"`             // the regions holding replicas; default every region
	ReplicasPerRegion int      `yaml:"replicas_per_region"` // default 1
	Partitions        int      `yaml:"partitions"`          // number of range partitions; default 16, 1..4096
	// SplitPoints, when set, are the initial partition boundaries (strictly increasing,
	// non-empty keys): partition i starts at SplitPoints[i-1]; Partitions is then
	// len(SplitPoints)+1. Unset: Partitions ranges of equal width over the first four key
	// bytes. Pre-splitting at the keys the application uses (YCSB: "user1", "user2", ...)
	// spreads a keyspace whose keys share a prefix, as HBase's SPLITS and CockroachDB's
	// SPLIT AT do; later splits and merges change the partitions, not this field.
	SplitPoints []string `yaml:"split_points"`
	// Options are the protocol's options, validated and normalised by ValidateKeyspace
	// (defaults filled in, levels upper-cased, durations in canonical form).
	Options map[string]string `yaml:"options"`
}

// Limits are the request limits every node enforces.
type Limits struct {
	MaxKeyBytes           int           `yaml:"max_key_bytes"`           // default 1024; 1..65536
	MaxValueBytes         int           `yaml:"max_value_bytes"`         // default 1 MiB; 1..64 MiB
	MaxScanLimit          int           `yaml:"max_scan_limit"`          // default 10000; 1..1000000
	MaxTxnKeys            int           `yaml:"max_txn_keys"`            // default 1024; 1..65536 (keys one transaction request names)
	DefaultRequestTimeout time.Duration `yaml:"default_request_timeout"` // default 5s; > 0 and ≤ MaxRequestTimeout
	MaxRequestTimeout     time.Duration `yaml:"max_request_timeout"`     // default 60s; > 0 and ≤ 10m
}

// AntiEntropy configures the background repair of replicas.
type AntiEntropy struct {
	// Interval is how often each node starts one anti-entropy round with a peer.
	// Default 10s; at least 10ms.
	Interval time.Duration `yaml:"interval"`
}

// Defaults and bounds of the fields (docs/configuration.md lists them all).
const (
	DefaultMaxOffset           = 2 * time.Millisecond
	MaxMaxOffset               = time.Second
	DefaultFutureVersionMargin = time.Second
	MaxFutureVersionMargin     = time.Hour
	DefaultReplicasPerRegion   = 1
	DefaultPartitions          = 16
	MaxPartitions              = 4096
	DefaultAntiEntropyInterval = 10 * time.Second
	MinAntiEntropyInterval     = 10 * time.Millisecond

	DefaultMaxKeyBytes           = 1024
	MaxMaxKeyBytes               = 65536
	DefaultMaxValueBytes         = 1 << 20
	MaxMaxValueBytes             = 64 << 20
	DefaultMaxScanLimit          = 10000
	MaxMaxScanLimit              = 1_000_000
	DefaultMaxTxnKeys            = 1024
	MaxMaxTxnKeys                = 65536
	DefaultDefaultRequestTimeout = 5 * time.Second
	DefaultMaxRequestTimeout     = 60 * time.Second
	MaxMaxRequestTimeout         = 10 * time.Minute

	// MaxDefaultMetadataVoters bounds the default metadata voters; MaxMetadataVoters the
	// configured ones.
	MaxDefaultMetadataVoters = 5
	MaxMetadataVoters        = 7

	maxNameLen         = 63 // cluster and node names
	maxKeyspaceNameLen = 64
)

// DefaultLimits returns the limits used for fields left unset.
func DefaultLimits() Limits {
	return Limits{
		MaxKeyBytes:           DefaultMaxKeyBytes,
		MaxValueBytes:         DefaultMaxValueBytes,
		MaxScanLimit:          DefaultMaxScanLimit,
		MaxTxnKeys:            DefaultMaxTxnKeys,
		DefaultRequestTimeout: DefaultDefaultRequestTimeout,
		MaxRequestTimeout:     DefaultMaxRequestTimeout,
	}
}

// MetadataVoters returns the IDs of the metadata group's voters (Validate has checked them).
func (c *Cluster) MetadataVoters() []uint32 {
	var out []uint32
	if len(c.Metadata.Voters) > 0 {
		for _, name := range c.Metadata.Voters {
			if n, ok := c.Node(name); ok {
				out = append(out, n.ID)
			}
		}
		return out
	}
	// One node per region in turn, up to five, an odd count.
	byRegion := map[string][]uint32{}
	for _, n := range c.Nodes {
		byRegion[n.Region] = append(byRegion[n.Region], n.ID)
	}
	var regions []string
	if c.Topology != nil {
		regions = c.Topology.Regions
	}
	for round := 0; len(out) < MaxDefaultMetadataVoters && len(out) < len(c.Nodes); round++ {
		added := false
		for _, r := range regions {
			if ids := byRegion[r]; round < len(ids) && len(out) < MaxDefaultMetadataVoters {
				out = append(out, ids[round])
				added = true
			}
		}
		if !added {
			break
		}
	}
	if len(out)%2 == 0 && len(out) > 1 {
		out = out[:len(out)-1]
	}
	return out
}

// Node returns the node called name.
func (c *Cluster) Node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// NodeByID returns the node with the given id.
func (c *Cluster) NodeByID(id uint32) (Node, bool) {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// Keyspace returns the keyspace called name. The returned value shares its Regions and
// Options with the configuration; do not modify them.
func (c *Cluster) Keyspace(name string) (Keyspace, bool) {
	for _, ks := range c.Keyspaces {
		if ks.Name == name {
			return ks, true
		}
	}
	return Keyspace{}, false
}

// NodesInRegion returns the nodes of a region, in file order.
func (c *Cluster) NodesInRegion(region string) []Node {
	var out []Node
	for _, n := range c.Nodes {
		if n.Region == region {
			out = append(out, n)
		}
	}
	return out
}
