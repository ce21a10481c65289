package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/hlc"
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
}

// capacity is one node's service queue (NodeCapacityOps).
type capacity struct {
	mu   sync.Mutex
	next time.Time
	per  time.Duration
}

// maxQueue bounds a node's backlog: work that would wait longer is refused (overload then
// looks like loss or an error, as on a real saturated machine).
const maxQueue = 5 * time.Second

// reserve books the next service slot and returns when it ends; ok is false when the backlog
// is full.
func (c *capacity) reserve() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	start := c.next
	if start.Before(now) {
		start = now
	}
	if start.Sub(now) > maxQueue {
		return time.Time{}, false
	}
	c.next = start.Add(c.per)
	return c.next, true
}

func (c *capacity) wait(ctx context.Context) error {
	at, ok := c.reserve()
	if !ok {
		return fmt.Errorf("bench: node overloaded (more than %v of queued work)", maxQueue)
	}
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
		AntiEntropy: config.AntiEntropy{Interval: 10 * time.Second},
	}
	id := uint32(0)
	for _, r := range o.Topology.Regions {
		for i := range o.NodesPerRegion {
			id++
			cfg.Nodes = append(cfg.Nodes, config.Node{ID: id, Name: fmt.Sprintf("%s-%d", r, i+1), Region: r,
				Listen: fmt.Sprintf("127.0.0.1:%d", 20000+id), PeerListen: fmt.Sprintf("127.0.0.1:%d", 30000+id)})
		}
	}
	cfg.Keyspaces = []config.Keyspace{o.Keyspace}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("demo: cluster configuration: %w", err)
	}
	wan, err := transport.NewWAN(transport.WANOptions{Topology: o.Topology, Jitter: o.Jitter, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	c := &Cluster{Config: cfg, wan: wan}
	for i, nd := range cfg.Nodes {
		nd := nd
		var cp *capacity
		if o.NodeCapacityOps > 0 {
			cp = &capacity{per: time.Duration(float64(time.Second) / o.NodeCapacityOps)}
		}
		c.caps = append(c.caps, cp)
		n, err := node.Start(node.Options{
			Cluster: cfg, NodeName: nd.Name, DataDir: "/data", FS: vfs.NewMem(), Logger: o.Logger,
			Clock: hlc.NewSystemClock(o.ClockOffsets[i]),
			NewTransport: func(h transport.Handler) (transport.Transport, error) {
				if cp == nil {
					return wan.Attach(nd.ID, nd.Region, h)
				}
				return wan.Attach(nd.ID, nd.Region, func(env *peerpb.Envelope) {
					if !isWork(env) {
						h(env)
						return
					}
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
		})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		c.Services = append(c.Services, server.NewService(n))
	}
	return c, nil
}

// ServiceIn returns the client API of the i-th node of region (round-robin).
func (c *Cluster) ServiceIn(region string, i int) *server.Service {
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

// capacityIn returns the service queue of the node ServiceIn(region, i) returns.
func (c *Cluster) capacityIn(region string, i int) *capacity {
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
