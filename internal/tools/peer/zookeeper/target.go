package zookeeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/topology"
)

// ParentPath is the znode under which every benchmark key is a child (ParentPath/<key>);
// Prepare creates it and deletes its children.
const ParentPath = "/meridian"

// OptionLeader is the bench.Config option a session sets to the region of the leader it
// observed at Prepare; the registered lower bound reads it.
const OptionLeader = "leader"

// Bounds on the benchmark's client side.
const (
	// prepareTimeout bounds Prepare: a leader, the parent znode and the deletion of the
	// previous configuration's keys (a few WAN round trips per thousand keys).
	prepareTimeout = 2 * time.Minute
	// deleteBatch is the number of deletions in one multi request: well inside ZooKeeper's
	// 1 MB request limit (jute.maxbuffer) for keys of up to a kilobyte.
	deleteBatch = 500
	// clearRounds bounds Prepare's list-and-delete rounds (nothing else writes during
	// Prepare, so one round empties the parent).
	clearRounds = 10
	// maxSessionsPerRegion bounds the ZooKeeper sessions one benchmark session opens in a
	// region: one per benchmark client (a rate search runs 256 per region).
	maxSessionsPerRegion = 1024
)

func init() {
	bench.RegisterLowerBound(bench.ProtocolZooKeeper, func(t *topology.Topology, cfg bench.Config, region, op string) (float64, bool) {
		return LowerBoundMs(t, t.Regions, cfg.Options[OptionLeader], cfg.ReadLevel, region, op), true
	})
}

// LowerBoundMs is the latency physics allows ZooKeeper for op ("read" or "write") from a client
// in region talking to a server of its own region, with voters in the given regions (one
// entry per voter) and the leader in region leader:
//
//	write:               RTT(region, leader) + majority(leader)
//	linearizable read:   RTT(region, leader)
//	sequential read:     0 (answered by the local server)
//
// A write goes to the leader, which commits it once a majority of the voters (itself and the
// ⌊v/2⌋ nearest others: majority(leader) is the ⌊v/2⌋-th smallest RTT from the leader to the
// other voters) have logged it; the client's server (follower or observer) answers once it
// learns the commit. A linearizable read is a sync and a read: the sync travels to the leader,
// which answers it as soon as every proposal before it has committed, with no round of its
// own (Leader.processSync), and the read is local. RTTs within a region count as 0. With
// leader "" (unknown) the bound is the smallest over every voter as leader.
func LowerBoundMs(t *topology.Topology, voters []string, leader, readLevel, region, op string) float64 {
	if op == "read" && readLevel == bench.ZooKeeperSequential {
		return 0
	}
	if leader == "" {
		best := -1.0
		for _, l := range voters {
			if b := LowerBoundMs(t, voters, l, readLevel, region, op); best < 0 || b < best {
				best = b
			}
		}
		return max(best, 0)
	}
	if op == "read" {
		return peer.RTTMs(t, region, leader)
	}
	return peer.RTTMs(t, region, leader) + peer.QuorumMs(t, voters, leader)
}

// Target is the ensemble as a benchmark target. Close does not stop the ensemble (Stop does).
func (c *Cluster) Target() bench.Target { return &target{c: c} }

type target struct{ c *Cluster }

func (t *target) Name() string {
	return fmt.Sprintf("ZooKeeper %s, %d servers (%d voters, %d observers)", t.c.version, len(t.c.members),
		t.c.zo.Voters, len(t.c.members)-t.c.zo.Voters)
}

func (t *target) Topology() *topology.Topology { return t.c.o.Topology }
func (t *target) Close() error                 { return nil }

// checkConfig accepts zookeeper:linearizable and zookeeper:sequential.
func checkConfig(cfg bench.Config) error {
	if cfg.Protocol != bench.ProtocolZooKeeper {
		return fmt.Errorf("zookeeper: configuration %s: the ZooKeeper target runs protocol %q only", cfg.Label(), bench.ProtocolZooKeeper)
	}
	if cfg.ReadLevel != bench.ZooKeeperLinearizable && cfg.ReadLevel != bench.ZooKeeperSequential {
		return fmt.Errorf("zookeeper: configuration %s: read level %q: want %s or %s", cfg.Label(), cfg.ReadLevel,
			bench.ZooKeeperLinearizable, bench.ZooKeeperSequential)
	}
	if cfg.WriteLevel != "" {
		return fmt.Errorf("zookeeper: configuration %s: ZooKeeper has no write levels (got %q)", cfg.Label(), cfg.WriteLevel)
	}
	for k := range cfg.Options {
		if k != OptionLeader {
			return fmt.Errorf("zookeeper: configuration %s: ZooKeeper takes no options (got %s)", cfg.Label(), k)
		}
	}
	return nil
}

// Prepare waits for a leader, creates ParentPath and deletes every key under it, and returns a
// session whose lower bounds use the leader it observed.
func (t *target) Prepare(ctx context.Context, cfg bench.Config) (bench.Session, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	c := t.c
	if err := c.running(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	lead, err := c.waitLeader(ctx)
	if err != nil {
		return nil, err
	}
	// Through the leader itself: deletions cost no forwarding there.
	conn, err := c.connect(lead.host.Region, []string{clientAddr(lead.host)}, false)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := clearParent(ctx, conn); err != nil {
		return nil, err
	}
	opts := map[string]string{}
	for k, v := range cfg.Options {
		opts[k] = v
	}
	opts[OptionLeader] = lead.host.Region
	cfg.Options = opts
	s := &session{c: c, cfg: cfg, leader: lead.host.Region, conns: map[connKey]*zk.Conn{}}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil, fmt.Errorf("zookeeper: ensemble stopped")
	}
	c.sessions[s] = true
	c.mu.Unlock()
	c.o.Logf("zookeeper: prepared %s (leader %s in %s)", cfg.Label(), lead.host.Name, lead.host.Region)
	return s, nil
}

// clearParent creates ParentPath if it is missing and deletes its children, in multi requests
// of deleteBatch deletions.
func clearParent(ctx context.Context, conn *zk.Conn) error {
	_, err := call(ctx, func() (string, error) {
		p, err := conn.Create(ParentPath, nil, 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return p, nil
		}
		return p, err
	})
	if err != nil {
		return fmt.Errorf("zookeeper: create %s: %w", ParentPath, err)
	}
	for range clearRounds {
		children, err := call(ctx, func() ([]string, error) {
			children, _, err := conn.Children(ParentPath)
			return children, err
		})
		if err != nil {
			return fmt.Errorf("zookeeper: list %s: %w", ParentPath, err)
		}
		if len(children) == 0 {
			return nil
		}
		for batch := range slices.Chunk(children, deleteBatch) {
			ops := make([]any, len(batch))
			for i, name := range batch {
				ops[i] = &zk.DeleteRequest{Path: ParentPath + "/" + name, Version: -1}
			}
			if _, err := call(ctx, func() ([]zk.MultiResponse, error) { return conn.Multi(ops...) }); err != nil {
				return fmt.Errorf("zookeeper: delete %d keys under %s: %w", len(batch), ParentPath, err)
			}
		}
	}
	return fmt.Errorf("zookeeper: %s still has children after %d rounds of deletion", ParentPath, clearRounds)
}

// connKey names a benchmark client: its region and index.
type connKey struct {
	region string
	i      int
}

// session is a prepared configuration: one ZooKeeper session per benchmark client, to a server
// of the client's region (client i to the region's i-th server, round robin), kept for every
// run of the configuration.
//
// Clients do not share sessions: ZooKeeper executes a session's requests in order (FIFO
// client order), so a read queued behind another client's write on a shared session would wait
// for that write's commit, a WAN round trip it did not ask for. YCSB's ZooKeeper binding
// likewise gives each client thread its own session.
type session struct {
	c      *Cluster
	cfg    bench.Config // with OptionLeader
	leader string       // region of the leader observed at Prepare

	mu     sync.Mutex
	conns  map[connKey]*zk.Conn
	closed bool
}

// Config is the session's configuration, with OptionLeader set.
func (s *session) Config() bench.Config { return s.cfg }

// regionServers are the client addresses of region's servers, in host order.
func (c *Cluster) regionServers(region string) []string {
	var out []string
	for _, m := range c.members {
		if m.host.Region == region {
			out = append(out, clientAddr(m.host))
		}
	}
	return out
}

func (s *session) Connect(region string, i int) (bench.KV, error) {
	servers := s.c.regionServers(region)
	if len(servers) == 0 {
		return nil, fmt.Errorf("zookeeper: no server in region %q", region)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("zookeeper: session closed")
	}
	key := connKey{region, i}
	conn := s.conns[key]
	if conn == nil {
		n := 0
		for k := range s.conns {
			if k.region == region {
				n++
			}
		}
		if n >= maxSessionsPerRegion {
			return nil, fmt.Errorf("zookeeper: %d sessions in region %s already; at most %d", n, region, maxSessionsPerRegion)
		}
		// The client's own server first, then the region's others (a failover stays local).
		own := i % len(servers)
		order := append(slices.Clone(servers[own:]), servers[:own]...)
		var err error
		if conn, err = s.c.connect(region, order, true); err != nil {
			return nil, err
		}
		s.conns[key] = conn
	}
	return &kv{conn: conn, sync: s.cfg.ReadLevel == bench.ZooKeeperLinearizable}, nil
}

// LowerBoundMs uses the leader observed at Prepare and the voters' regions.
func (s *session) LowerBoundMs(region, op string) float64 {
	return LowerBoundMs(s.c.o.Topology, peer.Regions(s.c.Voters()), s.leader, s.cfg.ReadLevel, region, op)
}

// Close closes every ZooKeeper session (each close is a request to the server, bounded by a
// second in the client library), all at once.
func (s *session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Add(1)
		go func() { defer wg.Done(); conn.Close() }()
	}
	wg.Wait()
	s.c.mu.Lock()
	delete(s.c.sessions, s)
	s.c.mu.Unlock()
	return nil
}

// errScan is the answer to a scan. ZooKeeper has no ordered range read: getChildren returns
// every child of a znode, unordered, and a scan would be that listing plus a read per key;
// YCSB's ZooKeeper binding leaves scan unimplemented for the same reason.
var errScan = errors.New("zookeeper: scans are not supported (ZooKeeper has no ordered range read; YCSB's ZooKeeper binding does not implement scan either)")

// kv maps the benchmark's operations onto ZooKeeper, one znode per key (ParentPath/<key>):
// Read = Get (after a Sync for linearizable reads), Update = Set (Create when the key is new),
// Insert = Create (Set when the key exists). A read of a missing key is not an error, as an
// etcd Get that finds nothing is not. Scans are refused (errScan).
type kv struct {
	conn *zk.Conn
	sync bool // Sync before each read
}

// call runs fn, requests of the client library, which take no context: it returns when ctx
// ends even if fn has not. fn then finishes in the background, when its reply arrives or the
// session's connection times out (two thirds of the session timeout), so none outlives that;
// its result goes through the channel only, so nothing it writes is shared with the caller.
func call[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// nodePath is key's znode. A key must be a valid znode name: no '/', NUL or control
// characters, not "." or ".." (ZooKeeper's PathUtils); YCSB keys ("user" and digits) are.
func nodePath(key []byte) (string, error) {
	if len(key) == 0 || string(key) == "." || string(key) == ".." || bytes.ContainsFunc(key, func(r rune) bool {
		return r == '/' || r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff)
	}) {
		return "", fmt.Errorf("zookeeper: key %q is not a valid znode name", key)
	}
	return ParentPath + "/" + string(key), nil
}

func (k *kv) Read(ctx context.Context, key []byte) error {
	_, err := k.get(ctx, key)
	return err
}

// get reads key's value (nil if it does not exist).
func (k *kv) get(ctx context.Context, key []byte) ([]byte, error) {
	path, err := nodePath(key)
	if err != nil {
		return nil, err
	}
	return call(ctx, func() ([]byte, error) {
		if k.sync {
			// Every request of a session runs after the ones before it: the Get sees at least
			// the state the leader had when it answered the Sync.
			if _, err := k.conn.Sync(path); err != nil {
				return nil, fmt.Errorf("sync: %w", err)
			}
		}
		v, _, err := k.conn.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		return v, err
	})
}

func (k *kv) Update(ctx context.Context, key, value []byte) error {
	return k.write(ctx, key, value, false)
}

func (k *kv) Insert(ctx context.Context, key, value []byte) error {
	return k.write(ctx, key, value, true)
}

// write sets key to value: a Set, or a Create first when create (an insert's key is usually
// new); each falls back to the other once, when the key turns out to be missing or present.
func (k *kv) write(ctx context.Context, key, value []byte, create bool) error {
	path, err := nodePath(key)
	if err != nil {
		return err
	}
	// The generator reuses its buffers once the operation returns, which call may do before
	// the client library has encoded the request.
	value = bytes.Clone(value)
	set := func() error { _, err := k.conn.Set(path, value, -1); return err }
	mk := func() error { _, err := k.conn.Create(path, value, 0, zk.WorldACL(zk.PermAll)); return err }
	_, err = call(ctx, func() (struct{}, error) {
		if create {
			if err := mk(); !errors.Is(err, zk.ErrNodeExists) {
				return struct{}{}, err
			}
			return struct{}{}, set()
		}
		if err := set(); !errors.Is(err, zk.ErrNoNode) {
			return struct{}{}, err
		}
		if err := mk(); !errors.Is(err, zk.ErrNodeExists) {
			return struct{}{}, err
		}
		return struct{}{}, set() // created by another client in between
	})
	return err
}

func (k *kv) Scan(context.Context, []byte, int) error { return errScan }
