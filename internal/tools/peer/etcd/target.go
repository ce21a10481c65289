package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/topology"
)

// KeyPrefix is prepended to every benchmark key; Prepare deletes everything under it.
const KeyPrefix = "bench/"

// OptionLeader is the bench.Config option a session sets to the region of the leader it
// observed at Prepare; the registered lower bound reads it.
const OptionLeader = "leader"

func init() {
	bench.RegisterLowerBound(bench.ProtocolEtcd, func(t *topology.Topology, cfg bench.Config, region, op string) (float64, bool) {
		return LowerBoundMs(t, t.Regions, cfg.Options[OptionLeader], cfg.ReadLevel, region, op), true
	})
}

// LowerBoundMs is the latency physics allows etcd for op ("read" or "write") from a client
// in region talking to its local member, with members in the given regions (one entry per
// member) and the leader in region leader:
//
//	write, linearizable read:  RTT(region, leader) + majority(leader)
//	serializable read:         0 (answered by the local member)
//
// A write is forwarded to the leader, which needs acknowledgements from a majority (itself
// and the ⌊n/2⌋ nearest other members: majority(leader) is the ⌊n/2⌋-th smallest RTT from
// the leader to the other members), and the commit travels back; a linearizable read
// (ReadIndex) has the same shape, with a heartbeat round instead of the append. RTTs within
// a region count as 0. With leader "" (unknown) the bound is the smallest over every member
// as leader.
func LowerBoundMs(t *topology.Topology, members []string, leader, readLevel, region, op string) float64 {
	if op == "read" && readLevel == bench.EtcdSerializable {
		return 0
	}
	if leader == "" {
		best := -1.0
		for _, l := range members {
			if b := LowerBoundMs(t, members, l, readLevel, region, op); best < 0 || b < best {
				best = b
			}
		}
		return max(best, 0)
	}
	return peer.RTTMs(t, region, leader) + peer.QuorumMs(t, members, leader)
}

// Target is the cluster as a benchmark target. Close does not stop the cluster (Stop does).
func (c *Cluster) Target() bench.Target { return &target{c: c} }

type target struct{ c *Cluster }

func (t *target) Name() string {
	v := t.c.version
	if v == "" {
		v = "(unknown version)"
	}
	return fmt.Sprintf("etcd %s, %d members", v, len(t.c.members))
}

func (t *target) Topology() *topology.Topology { return t.c.o.Topology }
func (t *target) Close() error                 { return nil }

// checkConfig accepts etcd:linearizable and etcd:serializable.
func checkConfig(cfg bench.Config) error {
	if cfg.Protocol != bench.ProtocolEtcd {
		return fmt.Errorf("etcd: configuration %s: the etcd target runs protocol %q only", cfg.Label(), bench.ProtocolEtcd)
	}
	if cfg.ReadLevel != bench.EtcdLinearizable && cfg.ReadLevel != bench.EtcdSerializable {
		return fmt.Errorf("etcd: configuration %s: read level %q: want %s or %s", cfg.Label(), cfg.ReadLevel,
			bench.EtcdLinearizable, bench.EtcdSerializable)
	}
	if cfg.WriteLevel != "" {
		return fmt.Errorf("etcd: configuration %s: etcd has no write levels (got %q)", cfg.Label(), cfg.WriteLevel)
	}
	return nil
}

// Prepare deletes every key under KeyPrefix, compacts and defragments, moves leadership back
// to Options.LeaderRegion when its member is up, and returns a session whose lower bounds use
// the leader it then observes.
func (t *target) Prepare(ctx context.Context, cfg bench.Config) (bench.Session, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	c := t.c
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	if stopped {
		return nil, fmt.Errorf("etcd: cluster stopped")
	}
	wctx, cancel := context.WithTimeout(ctx, c.eo.StartTimeout)
	defer cancel()
	// Leadership back where the configuration says (after faults), if that member is up.
	for _, m := range c.members {
		c.mu.Lock()
		up := m.running()
		c.mu.Unlock()
		if m.host.Region == c.eo.LeaderRegion && up {
			if err := c.MoveLeader(wctx, c.eo.LeaderRegion); err != nil {
				return nil, err
			}
			break
		}
	}
	lead, err := c.waitLeader(wctx)
	if err != nil {
		return nil, err
	}
	resp, err := lead.admin.Delete(wctx, KeyPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: delete %s*: %w", KeyPrefix, err)
	}
	if _, err := lead.admin.Compact(wctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil &&
		!errors.Is(err, rpctypes.ErrCompacted) {
		return nil, fmt.Errorf("etcd: compact: %w", err)
	}
	for _, m := range c.members {
		c.mu.Lock()
		up := m.running()
		c.mu.Unlock()
		if !up {
			continue
		}
		if _, err := m.admin.Defragment(wctx, clientURL(m.host)); err != nil {
			return nil, fmt.Errorf("etcd: defragment %s: %w", m.host.Name, err)
		}
	}
	opts := map[string]string{}
	for k, v := range cfg.Options {
		opts[k] = v
	}
	opts[OptionLeader] = lead.host.Region
	cfg.Options = opts
	c.o.Logf("etcd: prepared %s (leader in %s)", cfg.Label(), lead.host.Region)
	return &session{c: c, cfg: cfg, clients: map[string]*clientv3.Client{}}, nil
}

// waitLeader waits until the running members agree on a leader.
func (c *Cluster) waitLeader(ctx context.Context) (*member, error) {
	for {
		if m := c.leader(ctx); m != nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcd: no leader: %w\n%s", ctx.Err(), c.logTails())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// session is a prepared configuration: one client per region, shared by the region's
// benchmark clients, whose endpoints are the region's members only.
type session struct {
	c   *Cluster
	cfg bench.Config // with OptionLeader

	mu      sync.Mutex
	clients map[string]*clientv3.Client
	closed  bool
}

// Config is the session's configuration, with OptionLeader set.
func (s *session) Config() bench.Config { return s.cfg }

func (s *session) Connect(region string, i int) (bench.KV, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("etcd: session closed")
	}
	cli := s.clients[region]
	if cli == nil {
		var eps []string
		for _, m := range s.c.members {
			if m.host.Region == region {
				eps = append(eps, clientURL(m.host))
			}
		}
		if len(eps) == 0 {
			return nil, fmt.Errorf("etcd: no member in region %q", region)
		}
		var err error
		if cli, err = newClient(eps, s.c.o.Dialer(region)); err != nil {
			return nil, err
		}
		s.clients[region] = cli
	}
	kv := &kv{cli: cli}
	if s.cfg.ReadLevel == bench.EtcdSerializable {
		kv.readOpts = []clientv3.OpOption{clientv3.WithSerializable()}
	}
	return kv, nil
}

// LowerBoundMs uses the leader observed at Prepare and the members' regions.
func (s *session) LowerBoundMs(region, op string) float64 {
	return LowerBoundMs(s.c.o.Topology, peer.Regions(s.c.o.Hosts), s.cfg.Options[OptionLeader], s.cfg.ReadLevel, region, op)
}

func (s *session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	for _, cli := range s.clients {
		if err := cli.Close(); err != nil && first == nil && !strings.Contains(err.Error(), "context canceled") {
			first = err
		}
	}
	return first
}

// kv maps the benchmark's operations onto etcd: Read = Get, Update/Insert = Put, Scan = a
// range Get from the start key, limited to count keys. Keys live under KeyPrefix.
type kv struct {
	cli      *clientv3.Client
	readOpts []clientv3.OpOption // WithSerializable for serializable reads
}

var prefixEnd = clientv3.GetPrefixRangeEnd(KeyPrefix)

func (k *kv) Read(ctx context.Context, key []byte) error {
	_, err := k.get(ctx, key)
	return err
}

func (k *kv) get(ctx context.Context, key []byte) (*clientv3.GetResponse, error) {
	return k.cli.Get(ctx, KeyPrefix+string(key), k.readOpts...)
}

func (k *kv) Update(ctx context.Context, key, value []byte) error {
	_, err := k.cli.Put(ctx, KeyPrefix+string(key), string(value))
	return err
}

func (k *kv) Insert(ctx context.Context, key, value []byte) error { return k.Update(ctx, key, value) }

func (k *kv) Scan(ctx context.Context, start []byte, count int) error {
	_, err := k.scan(ctx, start, count)
	return err
}

func (k *kv) scan(ctx context.Context, start []byte, count int) (*clientv3.GetResponse, error) {
	count = max(count, 1) // etcd's limit 0 means no limit
	opts := append([]clientv3.OpOption{clientv3.WithRange(prefixEnd), clientv3.WithLimit(int64(count))}, k.readOpts...)
	return k.cli.Get(ctx, KeyPrefix+string(start), opts...)
}
