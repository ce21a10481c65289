package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/node"
	"meridian/internal/server"
	"meridian/internal/topology"
	"meridian/internal/transport"
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
				Listen: fmt.Sprintf("127.0.0.1:%d", 20000+id)})
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
		n, err := node.Start(node.Options{
			Cluster: cfg, NodeName: nd.Name, DataDir: "/data", FS: vfs.NewMem(), Logger: o.Logger,
			Clock: hlc.NewSystemClock(o.ClockOffsets[i]),
			NewTransport: func(h transport.Handler) (transport.Transport, error) {
				return wan.Attach(nd.ID, nd.Region, h)
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
