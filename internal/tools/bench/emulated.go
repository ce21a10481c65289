package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/runtime/node"
	"meridian/internal/runtime/server"
	"meridian/internal/runtime/transport"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// Cluster is an in-process cluster on the emulated WAN (DESIGN.md section 4, the "emulated"
// runtime): real nodes — gateway, event loop, committer, protocol core, Pebble on an
// in-memory filesystem — whose peer messages are delayed by their region pair's one-way
// latency.
type Cluster struct {
	Config   *config.Cluster
	Nodes    []*node.Node
	Services []*server.Service
	wan      *transport.WAN
	caps     []*capacity // per node; nil entries: unlimited
	opts     ClusterOptions
	// mu guards Nodes, Services and caps against Join and Remove (the benchmark's clients
	// read them when they connect).
	mu sync.Mutex
}

// ClusterOptions describes an emulated cluster.
type ClusterOptions struct {
	Topology       *topology.Topology
	NodesPerRegion int
	Keyspace       config.Keyspace
	// Jitter of the emulated WAN.
	Jitter time.Duration
	// ClockOffsets, when set, shifts each node's clock (node index → offset).
	ClockOffsets map[int]time.Duration
	// MaxClockOffset is ε (default 2ms).
	MaxClockOffset time.Duration
	Seed           uint64
	Logger         *slog.Logger
	// NodeCapacityOps, when > 0, gives every node a service capacity in requests per second:
	// client requests and requests forwarded by peers each hold the node for
	// 1/NodeCapacityOps (one server, first come first served). It models machines of fixed
	// size (the thesis's m1.medium) so that load — a hot key's host — shapes latency, not
	// only the network (liu-thesis Fig. 4.10).
	NodeCapacityOps float64
	// NodeBandwidth, when > 0, is every node's network bandwidth in bytes per second
	// (transport.WANOptions.NodeBandwidth): data movement takes the time a link gives it.
	NodeBandwidth float64
	// LinkBandwidth, when > 0, is the bandwidth in bytes per second of every link between two
	// regions, each way (transport.WANOptions.LinkBandwidth: messages share it one after
	// another).
	LinkBandwidth float64
	// CPU, when set, is every node's modelled processor (transport.CPUModel): each message a
	// node receives costs it modelled time, so emulated nodes saturate on modelled work.
	CPU *transport.CPUModel
	// Elasticity, when set, runs the placement driver with these settings (validated
	// defaults for the zero fields); nil: the driver is off, so partitions and replicas stay
	// as placed and benchmarks compare like with like.
	Elasticity *config.Elasticity
	// BwMan, when set, is every node's bandwidth arbiter (config.BwMan, validated with the
	// cluster); nil: off.
	BwMan *config.BwMan
	// MetadataVoters, when set, names the cluster metadata group's voters (node names are
	// <region>-<i>); default: config's (up to five, one per region in turn).
	MetadataVoters []string
	// ExtraKeyspaces are created beside Keyspace (background data, for instance).
	ExtraKeyspaces []config.Keyspace
	// MaxValueBytes, when > 0, is the cluster's limits.max_value_bytes.
	MaxValueBytes int
	// Network, when set, is the cluster's network section (the Mayflower selector's links).
	Network *config.Network
	// AntiEntropyInterval, when set, replaces the 10s between a replica's repair rounds.
	AntiEntropyInterval time.Duration
}

// capacity is one node's service queue (NodeCapacityOps).
type capacity struct {
	mu   sync.Mutex
	next time.Time
	per  time.Duration
	// busy is the service time booked so far; lastBusy and lastAt are the utilisation
	// meter's previous reading.
	busy     time.Duration
	lastBusy time.Duration
	lastAt   time.Time
	// clock is the time source (nil: time.Now); tests inject one.
	clock func() time.Time
	// clientSlots and peerSlots count the service slots booked by client requests at this
	// node and by requests from peers (Cluster.Work).
	clientSlots, peerSlots atomic.Int64
	// slow stretches every slot (Cluster.SetSlowdown: a noisy neighbour on the emulated
	// host); 0 or 1: none.
	slow float64
	// waited and slots sum the time from booking to the end of each slot (queue and
	// service) for the service meter; lastWaited and lastSlots are its previous reading.
	waited                time.Duration
	slots                 int64
	lastWaited, lastSlots int64
}

// serviceTime is the mean time a request spent at this emulated node (its queue and its
// service) since the last call: the request time Hubbub-scale's detector compares
// (node.Options.ServiceMeter).
func (c *capacity) serviceTime() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	dn, dw := c.slots-c.lastSlots, int64(c.waited)-c.lastWaited
	c.lastSlots, c.lastWaited = c.slots, int64(c.waited)
	if dn <= 0 {
		return 0
	}
	return time.Duration(dw / dn)
}

// host is the emulated host's signal: a node slowed f× lost 1 − 1/f of its CPU to its
// neighbour, which the hypervisor reports as steal (node.Options.HostMeter).
func (c *capacity) host() (steal float64, sched time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slow > 1 {
		return 1 - 1/c.slow, 0
	}
	return 0, 0
}

// utilisation is the share of the time since the last call the node spent serving: the
// emulated node's CPU, for the placement driver (ElasCass 3.2 ranks nodes by CPU usage).
func (c *capacity) utilisation() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	// Work booked for the future counts when it is served: served is the work done by now,
	// and the reading is the work served since the last one. (Remembering the booked total
	// instead made a node with a long queue read as nearly idle: each reading lost the
	// previous one's queue.)
	served := c.busy
	if ahead := c.next.Sub(now); ahead > 0 {
		served -= ahead
	}
	defer func() { c.lastAt, c.lastBusy = now, served }()
	if c.lastAt.IsZero() || !now.After(c.lastAt) {
		return 0
	}
	return min(1, max(0, float64(served-c.lastBusy)/float64(now.Sub(c.lastAt))))
}

func (c *capacity) now() time.Time {
	if c.clock != nil {
		return c.clock()
	}
	return time.Now()
}

// maxQueue bounds a node's backlog: work that would wait longer is refused (overload then
// looks like loss or an error, as on a real saturated machine).
const maxQueue = 5 * time.Second

// reserve books the next service slot and returns when it ends; ok is false when the backlog
// is full.
func (c *capacity) reserve() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	start := c.next
	if start.Before(now) {
		start = now
	}
	if start.Sub(now) > maxQueue {
		return time.Time{}, false
	}
	per := c.per
	if c.slow > 1 {
		per = time.Duration(float64(per) * c.slow)
	}
	c.next = start.Add(per)
	c.busy += per
	c.waited += c.next.Sub(now)
	c.slots++
	return c.next, true
}

func (c *capacity) wait(ctx context.Context) error {
	c.clientSlots.Add(1)
	at, ok := c.reserve()
	if !ok {
		return fmt.Errorf("bench: node overloaded (more than %v of queued work)", maxQueue)
	}
	return waitUntil(ctx, at)
}

// waitUntil returns at time at, or with the context's error if it ends first.
func waitUntil(ctx context.Context, at time.Time) error {
	d := time.Until(at)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// isWork reports whether a peer message is a request the receiving node serves (as opposed to
// replies, acknowledgements and background traffic).
func isWork(env *peerpb.Envelope) bool {
	switch env.Msg.(type) {
	case *peerpb.Envelope_GlForward, *peerpb.Envelope_Read, *peerpb.Envelope_Write, *peerpb.Envelope_Scan:
		return true
	}
	return false
}

// StartCluster builds a configuration (nodes named <region>-<i>) and starts every node with
// in-memory storage on one emulated WAN. In-memory storage keeps fsync time out of latency
// figures that are about the network; durability is tested elsewhere.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	if o.NodesPerRegion <= 0 {
		o.NodesPerRegion = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cfg := &config.Cluster{
		Name:        "demo",
		Topology:    o.Topology,
		TopologyRef: o.Topology.Name,
		Clock:       config.Clock{MaxOffset: cmp.Or(o.MaxClockOffset, 2*time.Millisecond)},
		Limits:      config.DefaultLimits(),
		AntiEntropy: config.AntiEntropy{Interval: cmp.Or(o.AntiEntropyInterval, 10*time.Second)},
	}
	off := false
	cfg.Elasticity = config.Elasticity{Driver: &off}
	if o.Elasticity != nil {
		cfg.Elasticity = *o.Elasticity
	}
	if o.BwMan != nil {
		cfg.BwMan = *o.BwMan
	}
	cfg.Metadata.Voters = o.MetadataVoters
	id := uint32(0)
	for _, r := range o.Topology.Regions {
		for i := range o.NodesPerRegion {
			id++
			cfg.Nodes = append(cfg.Nodes, config.Node{ID: id, Name: fmt.Sprintf("%s-%d", r, i+1), Region: r,
				Listen: fmt.Sprintf("127.0.0.1:%d", 20000+id), PeerListen: fmt.Sprintf("127.0.0.1:%d", 30000+id)})
		}
	}
	cfg.Keyspaces = append([]config.Keyspace{o.Keyspace}, o.ExtraKeyspaces...)
	if o.MaxValueBytes > 0 {
		cfg.Limits.MaxValueBytes = o.MaxValueBytes
	}
	if o.Network != nil {
		cfg.Network = *o.Network
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("demo: cluster configuration: %w", err)
	}
	wo := transport.WANOptions{Topology: o.Topology, Jitter: o.Jitter, Seed: o.Seed, NodeBandwidth: o.NodeBandwidth, CPU: o.CPU}
	if bw := o.LinkBandwidth; bw > 0 {
		wo.LinkBandwidth = func(a, b string) float64 { return bw }
	}
	wan, err := transport.NewWAN(wo)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Config: cfg, wan: wan, opts: o}
	for i, nd := range cfg.Nodes {
		if err := c.startNode(nd, nil, o.ClockOffsets[i]); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// startNode starts one node of the cluster (self: a node that joined, not in the
// configuration).
func (c *Cluster) startNode(nd config.Node, self *config.Node, clockOffset time.Duration) error {
	var cp *capacity
	if c.opts.NodeCapacityOps > 0 {
		cp = &capacity{per: time.Duration(float64(time.Second) / c.opts.NodeCapacityOps)}
	}
	opts := node.Options{
		Cluster: c.Config, NodeName: nd.Name, Self: self, DataDir: "/data", FS: vfs.NewMem(), Logger: c.opts.Logger,
		Clock: hlc.NewSystemClock(clockOffset),
		NewTransport: func(h transport.Handler) (transport.Transport, error) {
			if cp == nil {
				return c.wan.Attach(nd.ID, nd.Region, h)
			}
			return c.wan.Attach(nd.ID, nd.Region, func(env *peerpb.Envelope) {
				if !isWork(env) {
					h(env)
					return
				}
				cp.peerSlots.Add(1)
				at, ok := cp.reserve()
				if !ok {
					return // overloaded: dropped, as a saturated machine's queue would
				}
				if d := time.Until(at); d > 0 {
					time.AfterFunc(d, func() { h(env) })
					return
				}
				h(env)
			})
		},
	}
	if cp != nil {
		opts.LoadMeter, opts.ServiceMeter, opts.HostMeter = cp.utilisation, cp.serviceTime, cp.host
	}
	n, err := node.Start(opts)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.Nodes = append(c.Nodes, n)
	c.Services = append(c.Services, server.NewService(n))
	c.caps = append(c.caps, cp)
	c.mu.Unlock()
	return nil
}

// Join adds a node to region of the running cluster, as meridian server --join does: the
// cluster metadata registers it (through the first node), then it starts and the placement
// driver gives it replicas. It returns the new node.
func (c *Cluster) Join(ctx context.Context, region string) (*node.Node, error) {
	c.mu.Lock()
	k := 0
	for _, n := range c.Nodes {
		if n.Region() == region {
			k++
		}
	}
	entry := c.Nodes[0]
	c.mu.Unlock()
	name := fmt.Sprintf("%s-%d", region, k+1)
	nd := config.Node{Name: name, Region: region, Listen: fmt.Sprintf("127.0.0.2:%d", 20000+len(c.Nodes)+100),
		PeerListen: fmt.Sprintf("127.0.0.2:%d", 30000+len(c.Nodes)+100)}
	rec, err := entry.JoinCluster(ctx, c.Config.Name, nd, 20*time.Second)
	if err != nil {
		return nil, fmt.Errorf("bench: join %s: %w", name, err)
	}
	nd.ID = rec.ID
	if err := c.startNode(nd, &nd, 0); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[len(c.Nodes)-1], nil
}

// SetSlowdown stretches every service slot of the named node by factor (a noisy neighbour
// on its emulated host; 1: none) and makes its emulated host report the stolen share.
func (c *Cluster) SetSlowdown(name string, factor float64) error {
	if !(factor >= 1) {
		return fmt.Errorf("bench: slowdown %v: want ≥ 1", factor)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for j, n := range c.Nodes {
		if n.Name() == name {
			cp := c.caps[j]
			if cp == nil {
				return fmt.Errorf("bench: node %s has no emulated capacity to slow", name)
			}
			cp.mu.Lock()
			cp.slow = factor
			cp.mu.Unlock()
			return nil
		}
	}
	return fmt.Errorf("bench: no node %s", name)
}

// Remove stops and forgets node n (after it was decommissioned).
func (c *Cluster) Remove(n *node.Node) {
	c.mu.Lock()
	for i, m := range c.Nodes {
		if m == n {
			c.Nodes = append(c.Nodes[:i:i], c.Nodes[i+1:]...)
			c.Services = append(c.Services[:i:i], c.Services[i+1:]...)
			c.caps = append(c.caps[:i:i], c.caps[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	c.wan.Detach(n.ID())
	n.Close()
}

// NodeIn returns the i-th node of region in start order (round-robin), or nil.
func (c *Cluster) NodeIn(region string, i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var in []*node.Node
	for _, n := range c.Nodes {
		if n.Region() == region {
			in = append(in, n)
		}
	}
	if len(in) == 0 {
		return nil
	}
	return in[i%len(in)]
}

// ServiceIn returns the client API of the i-th node of region (round-robin).
func (c *Cluster) ServiceIn(region string, i int) *server.Service {
	c.mu.Lock()
	defer c.mu.Unlock()
	var in []*server.Service
	for j, n := range c.Nodes {
		if n.Region() == region {
			in = append(in, c.Services[j])
		}
	}
	if len(in) == 0 {
		return nil
	}
	return in[i%len(in)]
}

// replicaIn returns the i-th node of region (and its service queue) that holds a replica of
// the bench keyspace's partition of key in the newest map of region's nodes, or fallback when
// none does (the keyspace is not placed there, or a move is between its steps).
func (c *Cluster) replicaIn(region string, i int, key []byte, fallback serviceAPI, fallbackCap *capacity) (serviceAPI, *capacity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var newest *placement.Map
	for _, n := range c.Nodes {
		if m := n.Placement(); n.Region() == region && m != nil && (newest == nil || m.Version > newest.Version) {
			newest = m
		}
	}
	if newest == nil {
		return fallback, fallbackCap
	}
	ks, ok := newest.Keyspace("bench")
	if !ok {
		return fallback, fallbackCap
	}
	p := ks.Lookup(key)
	if p == nil {
		return fallback, fallbackCap
	}
	var svcs []serviceAPI
	var caps []*capacity
	for j, n := range c.Nodes {
		if n.Region() == region && slices.Contains(p.Replicas, n.ID()) {
			svcs, caps = append(svcs, c.Services[j]), append(caps, c.caps[j])
		}
	}
	if len(svcs) == 0 {
		return fallback, fallbackCap
	}
	return svcs[i%len(svcs)], caps[i%len(caps)]
}

// Work returns, per node name, the service slots booked so far by client requests and by
// peers' requests (nodes without a capacity are left out): where the work of a run went.
func (c *Cluster) Work() map[string][2]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][2]int64{}
	for j, n := range c.Nodes {
		if cp := c.caps[j]; cp != nil {
			out[n.Name()] = [2]int64{cp.clientSlots.Load(), cp.peerSlots.Load()}
		}
	}
	return out
}

// chargeRequest books a client request on svc's node's modelled processor
// (transport.WAN.ChargeRequest) and returns when it is done.
func (c *Cluster) chargeRequest(svc serviceAPI) time.Time {
	c.mu.Lock()
	var id uint32
	for j, s := range c.Services {
		if serviceAPI(s) == svc {
			id = c.Nodes[j].ID()
			break
		}
	}
	c.mu.Unlock()
	if id == 0 {
		return time.Now() // a node that left: nothing to book
	}
	return c.wan.ChargeRequest(id)
}

// capacityIn returns the service queue of the node ServiceIn(region, i) returns.
func (c *Cluster) capacityIn(region string, i int) *capacity {
	c.mu.Lock()
	defer c.mu.Unlock()
	var in []*capacity
	for j, n := range c.Nodes {
		if n.Region() == region {
			in = append(in, c.caps[j])
		}
	}
	if len(in) == 0 {
		return nil
	}
	return in[i%len(in)]
}

// Close stops every node and the network.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
	c.wan.Close()
}

// Put is a convenience for loading data.
func (c *Cluster) Put(ctx context.Context, svc *server.Service, keyspace string, key, value []byte, level string) error {
	_, err := svc.Put(ctx, &meridianpb.PutRequest{Keyspace: keyspace, Key: key, Value: value, Consistency: level})
	return err
}
