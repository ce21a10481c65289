package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"meridian/internal/runtime/transport"
	"time"

	"meridian/api/meridianpb"
	"meridian/client"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// KV is one benchmark client's connection to the system under test. Implementations must be
// safe for use by one goroutine at a time (each client has its own).
type KV interface {
	Read(ctx context.Context, key []byte) error
	Update(ctx context.Context, key, value []byte) error
	Insert(ctx context.Context, key, value []byte) error
	Scan(ctx context.Context, start []byte, count int) error
}

// Config is one configuration of the system under test: a protocol with its consistency
// levels and options. The lab adds peers (Cassandra, etcd) with their own protocol names.
type Config struct {
	Protocol   string
	ReadLevel  string
	WriteLevel string
	Options    map[string]string
	// ReplicasPerRegion is the keyspace's replicas in each region, for bounds that depend
	// on it (0: one).
	ReplicasPerRegion int
}

// Label names the configuration.
func (c Config) Label() string {
	return Run{Protocol: c.Protocol, ReadLevel: c.ReadLevel, WriteLevel: c.WriteLevel, Options: c.Options}.Label()
}

// Target is a system that can be benchmarked under a configuration. Keep it an interface:
// the emulated cluster, a running Meridian cluster, and (in the lab) Cassandra and etcd all
// sit behind it.
type Target interface {
	// Name describes the target.
	Name() string
	// Topology gives the regions and RTTs the target runs under.
	Topology() *topology.Topology
	// Prepare readies the target for cfg (fresh cluster or keyspace) and returns a session.
	Prepare(ctx context.Context, cfg Config) (Session, error)
	Close() error
}

// Session is a prepared configuration of a target.
type Session interface {
	// Connect returns the i-th client's connection in region.
	Connect(region string, i int) (KV, error)
	// LowerBoundMs is the physical lower bound of op ("read" or "write") from region.
	LowerBoundMs(region, op string) float64
	Close() error
}

// --- the emulated cluster ---

// EmulatedTarget starts a fresh in-process cluster on the emulated WAN for each
// configuration, so no run inherits another's state.
type EmulatedTarget struct {
	Topo              *topology.Topology
	NodesPerRegion    int
	ReplicasPerRegion int
	Partitions        int
	Jitter            time.Duration
	Seed              uint64
	// MaxClockOffset is the cluster's ε (default 2ms).
	MaxClockOffset time.Duration
	// NodeCapacityOps gives each node a service capacity (ClusterOptions.NodeCapacityOps).
	NodeCapacityOps float64
	// LinkBandwidth and CPU model the links between regions and each node's processor
	// (ClusterOptions).
	LinkBandwidth float64
	CPU           *transport.CPUModel
}

func (t *EmulatedTarget) Name() string                 { return "emulated " + t.Topo.Name }
func (t *EmulatedTarget) Topology() *topology.Topology { return t.Topo }
func (t *EmulatedTarget) Close() error                 { return nil }

// Prepare starts the cluster with keyspace "bench" under cfg.
func (t *EmulatedTarget) Prepare(ctx context.Context, cfg Config) (Session, error) {
	opts := map[string]string{}
	for k, v := range cfg.Options {
		opts[k] = v
	}
	if cfg.ReadLevel != "" {
		opts["read_level"] = cfg.ReadLevel
	}
	if cfg.WriteLevel != "" {
		opts["write_level"] = cfg.WriteLevel
	}
	c, err := StartCluster(ClusterOptions{
		Topology:       t.Topo,
		NodesPerRegion: t.NodesPerRegion,
		Keyspace: config.Keyspace{Name: "bench", Protocol: cfg.Protocol, ReplicasPerRegion: max(1, t.ReplicasPerRegion),
			Partitions: max(1, t.Partitions), SplitPoints: ycsb.SplitPoints(t.Partitions), Options: opts},
		Jitter:          t.Jitter,
		Seed:            t.Seed,
		MaxClockOffset:  t.MaxClockOffset,
		NodeCapacityOps: t.NodeCapacityOps,
		LinkBandwidth:   t.LinkBandwidth,
		CPU:             t.CPU,
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	cfg.ReplicasPerRegion = max(1, t.ReplicasPerRegion)
	return &emulatedSession{c: c, cfg: cfg, topo: t.Topo}, nil
}

// SessionOf is a benchmark session on an emulated cluster that is already running (its
// nodes may join and leave between runs: clients connect to the nodes of their region at the
// start of each run).
func SessionOf(c *Cluster, cfg Config) Session {
	return &emulatedSession{c: c, cfg: cfg, topo: c.Config.Topology}
}

// ReplicaAwareSessionOf is SessionOf with replica-aware routing: each request goes to a node
// of the client's region that holds a replica of the key's partition (client i takes the
// i-th of them), as Cassandra's drivers route by token by default (TokenAwarePolicy). With
// more nodes in a region than replicas per region, a client of a fixed node would send most
// requests to a node that only coordinates and forwards them, spending the service capacity
// of two nodes on one request; the elasticity benchmarks scale nodes and use it.
func ReplicaAwareSessionOf(c *Cluster, cfg Config) Session {
	return &emulatedSession{c: c, cfg: cfg, topo: c.Config.Topology, replicaAware: true}
}

type emulatedSession struct {
	c            *Cluster
	cfg          Config
	topo         *topology.Topology
	replicaAware bool
}

func (s *emulatedSession) Connect(region string, i int) (KV, error) {
	svc := s.c.ServiceIn(region, i)
	if svc == nil {
		return nil, fmt.Errorf("bench: no node in region %q", region)
	}
	kv := &serviceKV{svc: svc, cap: s.c.capacityIn(region, i)}
	if cpu := s.c.opts.CPU; cpu != nil && cpu.PerRequest > 0 {
		kv.charge = s.c.chargeRequest
	}
	if s.replicaAware {
		kv.route = func(key []byte) (serviceAPI, *capacity) { return s.c.replicaIn(region, i, key, kv.svc, kv.cap) }
	}
	return kv, nil
}

func (s *emulatedSession) LowerBoundMs(region, op string) float64 {
	return LowerBoundMs(s.topo, s.cfg, region, op)
}

func (s *emulatedSession) Close() error { s.c.Close(); return nil }

// Close of a session made by SessionOf closes the cluster too; runs on a shared cluster do
// not close their session.

// StatusBytes is the status traffic (protocol counter status_bytes_sent) every node has
// sent so far.
func (s *emulatedSession) StatusBytes() int64 {
	var n int64
	for _, nd := range s.c.Nodes {
		n += nd.ProtocolCounters()["status_bytes_sent"]
	}
	return n
}

// Nodes is the number of nodes.
func (s *emulatedSession) Nodes() int { return len(s.c.Nodes) }

// ProtocolCounters sums the engines' counters (engine.Counted) over every node.
func (s *emulatedSession) ProtocolCounters() map[string]int64 {
	out := map[string]int64{}
	for _, nd := range s.c.Nodes {
		for k, v := range nd.ProtocolCounters() {
			out[k] += v
		}
	}
	return out
}

// serviceKV calls a node's gateway in-process (no gRPC), keyspace "bench", with the
// keyspace's default levels. The gateway keeps the request's byte slices (they travel in
// replication messages and storage batches), so keys and values are copied here: the YCSB
// generator reuses its buffers for the next operation.
// serviceAPI is the part of a node's client service the benchmarks call.
type serviceAPI interface {
	Get(context.Context, *meridianpb.GetRequest) (*meridianpb.GetResponse, error)
	Put(context.Context, *meridianpb.PutRequest) (*meridianpb.PutResponse, error)
	Scan(context.Context, *meridianpb.ScanRequest) (*meridianpb.ScanResponse, error)
}

type serviceKV struct {
	cap *capacity // the node's service queue; nil: unlimited
	svc serviceAPI
	// route, when set, picks the node (and its queue) of each key's request
	// (ReplicaAwareSessionOf); nil: always svc.
	route func(key []byte) (serviceAPI, *capacity)
	// charge, when set, books the request on the receiving node's modelled processor
	// (transport.CPUModel.PerRequest) and returns when it is done.
	charge func(serviceAPI) time.Time
}

// admit waits for the node's service queue and modelled processor before a request.
func (k *serviceKV) admit(ctx context.Context, svc serviceAPI, cp *capacity) error {
	if cp != nil {
		if err := cp.wait(ctx); err != nil {
			return err
		}
	}
	if k.charge == nil {
		return nil
	}
	return waitUntil(ctx, k.charge(svc))
}

// target returns the node serving key's request and its service queue.
func (k *serviceKV) target(key []byte) (serviceAPI, *capacity) {
	if k.route != nil {
		return k.route(key)
	}
	return k.svc, k.cap
}

func (k *serviceKV) Read(ctx context.Context, key []byte) error {
	svc, cp := k.target(key)
	if err := k.admit(ctx, svc, cp); err != nil {
		return err
	}
	_, err := svc.Get(ctx, &meridianpb.GetRequest{Keyspace: "bench", Key: bytes.Clone(key)})
	return err
}

func (k *serviceKV) Update(ctx context.Context, key, value []byte) error {
	svc, cp := k.target(key)
	if err := k.admit(ctx, svc, cp); err != nil {
		return err
	}
	_, err := svc.Put(ctx, &meridianpb.PutRequest{Keyspace: "bench", Key: bytes.Clone(key), Value: bytes.Clone(value)})
	return err
}

func (k *serviceKV) Insert(ctx context.Context, key, value []byte) error {
	return k.Update(ctx, key, value)
}

func (k *serviceKV) Scan(ctx context.Context, start []byte, count int) error {
	if err := k.admit(ctx, k.svc, nil); err != nil {
		return err
	}
	_, err := k.svc.Scan(ctx, &meridianpb.ScanRequest{Keyspace: "bench", Start: bytes.Clone(start), Limit: uint32(count)})
	return err
}

// --- a running cluster ---

// ClusterTarget benchmarks a running Meridian cluster described by its configuration file;
// each client connects over gRPC to a node in its own region. The configuration's levels are
// sent with every request; its protocol must match the keyspace's.
type ClusterTarget struct {
	Cluster  *config.Cluster
	Keyspace string
}

func (t *ClusterTarget) Name() string                 { return "cluster " + t.Cluster.Name }
func (t *ClusterTarget) Topology() *topology.Topology { return t.Cluster.Topology }
func (t *ClusterTarget) Close() error                 { return nil }

func (t *ClusterTarget) Prepare(ctx context.Context, cfg Config) (Session, error) {
	ks, ok := t.Cluster.Keyspace(t.Keyspace)
	if !ok {
		return nil, fmt.Errorf("bench: keyspace %q is not in cluster %s's configuration", t.Keyspace, t.Cluster.Name)
	}
	if cfg.Protocol != "" && cfg.Protocol != ks.Protocol {
		return nil, fmt.Errorf("bench: keyspace %q uses protocol %s, not %s", t.Keyspace, ks.Protocol, cfg.Protocol)
	}
	return &clusterSession{t: t, cfg: cfg}, nil
}

type clusterSession struct {
	t       *ClusterTarget
	cfg     Config
	clients []*client.Client
}

func (s *clusterSession) Connect(region string, i int) (KV, error) {
	nodes := s.t.Cluster.NodesInRegion(region)
	if len(nodes) == 0 {
		return nil, fmt.Errorf("bench: cluster %s has no node in region %q", s.t.Cluster.Name, region)
	}
	c, err := client.Dial(nodes[i%len(nodes)].Listen)
	if err != nil {
		return nil, err
	}
	s.clients = append(s.clients, c)
	return ClientKV(c, s.t.Keyspace, s.cfg), nil
}

func (s *clusterSession) LowerBoundMs(region, op string) float64 {
	return LowerBoundMs(s.t.Cluster.Topology, s.cfg, region, op)
}

func (s *clusterSession) Close() error {
	for _, c := range s.clients {
		c.Close()
	}
	return nil
}

type clientKV struct {
	c           *client.Client
	ks          string
	read, write client.Option
}

// ClientKV benchmarks keyspace ks through c at the configuration's levels (the lab's
// Meridian target; ClusterTarget). gRPC marshals each request, so the generator's reused
// buffers need no copy here.
func ClientKV(c *client.Client, ks string, cfg Config) KV {
	return &clientKV{c: c, ks: ks, read: client.Consistency(cfg.ReadLevel), write: client.Consistency(cfg.WriteLevel)}
}

func (k *clientKV) Read(ctx context.Context, key []byte) error {
	_, err := k.c.Get(ctx, k.ks, key, k.read)
	return err
}

func (k *clientKV) Update(ctx context.Context, key, value []byte) error {
	_, err := k.c.Put(ctx, k.ks, key, value, k.write)
	return err
}

func (k *clientKV) Insert(ctx context.Context, key, value []byte) error {
	return k.Update(ctx, key, value)
}

func (k *clientKV) Scan(ctx context.Context, start []byte, count int) error {
	_, _, err := k.c.Scan(ctx, k.ks, start, nil, count, k.read)
	return err
}

// --- no-op ---

// NoopTarget answers every operation at once. It measures the benchmark client itself: the
// client must never be the bottleneck.
type NoopTarget struct{ Topo *topology.Topology }

func (t *NoopTarget) Name() string                 { return "noop" }
func (t *NoopTarget) Topology() *topology.Topology { return t.Topo }
func (t *NoopTarget) Close() error                 { return nil }
func (t *NoopTarget) Prepare(context.Context, Config) (Session, error) {
	return noopSession{}, nil
}

type noopSession struct{}

func (noopSession) Connect(string, int) (KV, error)     { return noopKV{}, nil }
func (noopSession) LowerBoundMs(string, string) float64 { return 0 }
func (noopSession) Close() error                        { return nil }

type noopKV struct{}

func (noopKV) Read(context.Context, []byte) error           { return nil }
func (noopKV) Update(context.Context, []byte, []byte) error { return nil }
func (noopKV) Insert(context.Context, []byte, []byte) error { return nil }
func (noopKV) Scan(context.Context, []byte, int) error      { return nil }

// --- lower bounds ---

// LowerBoundMs is the latency physics allows for op from region under cfg, with one replica
// per region: the count-th smallest RTT from region to the replicas, where count is the
// number of replies the level needs (the local replica costs nothing). Protocols that serve
// reads locally register their own bound (engine.Protocol.LowerBoundMs).
func LowerBoundMs(t *topology.Topology, cfg Config, region, op string) float64 {
	level := cfg.ReadLevel
	if op != "read" {
		level = cfg.WriteLevel
	}
	if b, ok := protocolBounds[cfg.Protocol]; ok {
		if v, ok := b(t, cfg, region, op); ok {
			return v
		}
	}
	if p, ok := engine.Lookup(cfg.Protocol); ok && p.LowerBoundMs != nil {
		q := engine.BoundQuery{Region: region, Op: op, ReadLevel: config.Level(cfg.ReadLevel), WriteLevel: config.Level(cfg.WriteLevel), Options: cfg.Options,
			ReplicasPerRegion: max(1, cfg.ReplicasPerRegion)}
		if v, ok := p.LowerBoundMs(t, q); ok {
			return v
		}
	}
	n := len(t.Regions)
	count := n
	switch config.Level(level) {
	case config.LevelOne, config.LevelLocalOne, config.LevelLocalQuorum:
		count = 1
	case config.LevelQuorum:
		count = n/2 + 1
	}
	return NthRTTMs(t, region, count)
}

// BoundFunc computes a protocol's lower bound; ok false falls back to the quorum bound.
type BoundFunc func(t *topology.Topology, cfg Config, region, op string) (ms float64, ok bool)

// protocolBounds are the peers' bounds (RegisterLowerBound); Meridian's protocols register
// theirs with their engine (engine.Protocol.LowerBoundMs).
var protocolBounds = map[string]BoundFunc{}

// RegisterLowerBound sets protocol's lower bound (peers register theirs: etcd's depends on
// where its leader is). Call it from an init function: the map is not locked.
func RegisterLowerBound(protocol string, fn BoundFunc) { protocolBounds[protocol] = fn }

// NthRTTMs is topology.NthRTTMs (peers' bounds use it).
func NthRTTMs(t *topology.Topology, region string, count int) float64 {
	return t.NthRTTMs(region, count)
}
