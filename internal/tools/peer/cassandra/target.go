package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"meridian/internal/tools/bench"
	"meridian/internal/topology"
)

// The benchmark's schema: one keyspace, one table of blobs.
const (
	Keyspace = "bench"
	Table    = "kv"
)

// levels are the consistency levels a configuration may name (cassandra:READ/WRITE).
// ANY and the SERIAL levels are left out: ANY is not a read level and says nothing about
// replicas, SERIAL levels belong to lightweight transactions.
var levels = map[string]gocql.Consistency{
	"ONE":          gocql.One,
	"TWO":          gocql.Two,
	"THREE":        gocql.Three,
	"QUORUM":       gocql.Quorum,
	"ALL":          gocql.All,
	"LOCAL_ONE":    gocql.LocalOne,
	"LOCAL_QUORUM": gocql.LocalQuorum,
	"EACH_QUORUM":  gocql.EachQuorum,
}

// LevelNames are the accepted level names, sorted.
func LevelNames() []string {
	var out []string
	for k := range levels {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// parseLevel parses a level name, case-insensitively.
func parseLevel(s string) (gocql.Consistency, error) {
	c, ok := levels[strings.ToUpper(strings.TrimSpace(s))]
	if !ok {
		return 0, fmt.Errorf("cassandra: unknown consistency level %q (accepted: %s)", s, strings.Join(LevelNames(), ", "))
	}
	return c, nil
}

// fixedReplicas is the number of replies a level needs regardless of the replication
// factor (0: it depends on it).
func fixedReplicas(c gocql.Consistency) int {
	switch c {
	case gocql.One, gocql.LocalOne:
		return 1
	case gocql.Two:
		return 2
	case gocql.Three:
		return 3
	}
	return 0
}

// levelPair is a configuration's parsed levels.
type levelPair struct {
	read, write gocql.Consistency
}

// parseConfig checks cfg for a cluster whose keyspace has one replica in each of dcs data
// centers. Empty levels mean QUORUM, as bench.ParseConfigs gives a protocol without levels.
func parseConfig(cfg bench.Config, dcs int) (levelPair, error) {
	var lp levelPair
	if cfg.Protocol != bench.ProtocolCassandra {
		return lp, fmt.Errorf("cassandra: configuration %q is for protocol %q, not %q", cfg.Label(), cfg.Protocol, bench.ProtocolCassandra)
	}
	if len(cfg.Options) > 0 {
		var keys []string
		for k := range cfg.Options {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return lp, fmt.Errorf("cassandra: configuration %q: Cassandra takes no options (got %s)", cfg.Label(), strings.Join(keys, ", "))
	}
	parse := func(name, s string) (gocql.Consistency, error) {
		if s == "" {
			s = "QUORUM"
		}
		c, err := parseLevel(s)
		if err != nil {
			return 0, fmt.Errorf("cassandra: %s level: %w", name, err)
		}
		if n := fixedReplicas(c); n > dcs {
			return 0, fmt.Errorf("cassandra: %s level %s needs %d replicas, but the keyspace has %d (one per data center)", name, c, n, dcs)
		}
		return c, nil
	}
	var err error
	if lp.read, err = parse("read", cfg.ReadLevel); err != nil {
		return lp, err
	}
	if lp.write, err = parse("write", cfg.WriteLevel); err != nil {
		return lp, err
	}
	return lp, nil
}

// createKeyspaceCQL replicates the keyspace once in each data center (region), as Meridian's
// keyspaces are in the paper's setup.
func createKeyspaceCQL(dcs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE KEYSPACE %s WITH replication = {'class': 'NetworkTopologyStrategy'", Keyspace)
	for _, dc := range dcs {
		fmt.Fprintf(&b, ", '%s': 1", strings.ReplaceAll(dc, "'", "''"))
	}
	b.WriteString("}")
	return b.String()
}

const createTableCQL = "CREATE TABLE " + Keyspace + "." + Table + " (k blob PRIMARY KEY, v blob)"

const (
	readCQL   = "SELECT v FROM " + Keyspace + "." + Table + " WHERE k = ?"
	writeCQL  = "INSERT INTO " + Keyspace + "." + Table + " (k, v) VALUES (?, ?)"
	deleteCQL = "DELETE FROM " + Keyspace + "." + Table + " WHERE k = ?"
	// Scans follow the ring from the start key's token, as YCSB's Cassandra binding does:
	// Murmur3 order, not key order, is the only order a range read can follow.
	scanCQL = "SELECT k, v FROM " + Keyspace + "." + Table + " WHERE token(k) >= token(?) LIMIT ?"
)

// Bounds on Prepare's steps: schema changes on a WAN and the first contact of every
// coordinator with every replica take seconds, not minutes.
const (
	prepareTimeout    = 3 * time.Minute
	ddlTimeout        = time.Minute
	driverOpTimeout   = 30 * time.Second // backstop; the benchmark's per-op context is shorter
	driverDialTimeout = 10 * time.Second
)

// Target benchmarks the cluster: each configuration gets a fresh keyspace.
func (c *Cluster) Target() bench.Target {
	t := &target{c: c}
	c.mu.Lock()
	c.targets = append(c.targets, t)
	c.mu.Unlock()
	return t
}

type target struct {
	c *Cluster

	mu       sync.Mutex
	admin    *gocql.Session
	sessions []*session
}

func (t *target) Name() string {
	return fmt.Sprintf("cassandra %d nodes (%s)", len(t.c.nodes), strings.Join(t.dataCenters(), ", "))
}

func (t *target) Topology() *topology.Topology { return t.c.o.Topology }

// dataCenters are the regions that have a node, in the topology's order.
func (t *target) dataCenters() []string {
	var out []string
	for _, r := range t.c.o.Topology.Regions {
		for _, h := range t.c.o.Hosts {
			if h.Region == r {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// Close closes the driver sessions (the nodes keep running until Cluster.Stop).
func (t *target) Close() error {
	t.mu.Lock()
	admin, sessions := t.admin, t.sessions
	t.admin, t.sessions = nil, nil
	t.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
	if admin != nil {
		admin.Close()
	}
	return nil
}

// Prepare recreates keyspace bench (one replica per data center) and table bench.kv, waits
// for every node to agree on the schema, opens one driver session per region, and checks
// that each region's coordinator reaches every replica.
func (t *target) Prepare(ctx context.Context, cfg bench.Config) (bench.Session, error) {
	dcs := t.dataCenters()
	lp, err := parseConfig(cfg, len(dcs))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	admin, err := t.adminSession()
	if err != nil {
		return nil, err
	}
	for _, stmt := range []string{"DROP KEYSPACE IF EXISTS " + Keyspace, createKeyspaceCQL(dcs), createTableCQL} {
		dctx, dcancel := context.WithTimeout(ctx, ddlTimeout)
		// The driver waits for schema agreement after each schema change.
		err := admin.Query(stmt).Consistency(gocql.All).ExecContext(dctx)
		dcancel()
		if err != nil {
			return nil, fmt.Errorf("cassandra: prepare %s: %s: %w", cfg.Label(), stmt, err)
		}
	}
	actx, acancel := context.WithTimeout(ctx, ddlTimeout)
	err = admin.AwaitSchemaAgreement(actx)
	acancel()
	if err != nil {
		return nil, fmt.Errorf("cassandra: prepare %s: schema agreement: %w", cfg.Label(), err)
	}

	s := &session{t: t, cfg: cfg, levels: lp, regions: map[string]*gocql.Session{}}
	for _, dc := range dcs {
		rs, err := t.regionSession(dc)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.regions[dc] = rs
	}
	for _, dc := range dcs {
		if err := probe(ctx, s.regions[dc], dc); err != nil {
			s.Close()
			return nil, fmt.Errorf("cassandra: prepare %s: %w", cfg.Label(), err)
		}
	}
	t.mu.Lock()
	t.sessions = append(t.sessions, s)
	t.mu.Unlock()
	t.c.o.Logf("cassandra: prepared %s (keyspace %s, one replica in each of %s)", cfg.Label(), Keyspace, strings.Join(dcs, ", "))
	return s, nil
}

// probe writes and deletes a key at ALL through sess until both succeed: each coordinator
// then has the table and sees every replica alive, so the run's first operations do not
// fail on a cold cluster. Bounded by ctx.
func probe(ctx context.Context, sess *gocql.Session, region string) error {
	key := []byte("\x00meridian-probe-" + region)
	var lastErr error
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := sess.Query(writeCQL, key, []byte("probe")).Consistency(gocql.All).ExecContext(qctx)
		if err == nil {
			err = sess.Query(deleteCQL, key).Consistency(gocql.All).ExecContext(qctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("coordinator in %s never reached every replica at ALL: %w", region, lastErr)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// adminSession is the target's session for schema changes (created once).
func (t *target) adminSession() (*gocql.Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.admin != nil {
		return t.admin, nil
	}
	first := t.c.o.Hosts[0]
	cfg := t.c.clusterConfig(first.Region)
	cfg.Timeout = ddlTimeout
	cfg.NumConns = 1
	s, err := cfg.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("cassandra: admin session (via %s): %w", first.Region, err)
	}
	t.admin = s
	return s, nil
}

// regionSession opens the driver session every client in region shares.
func (t *target) regionSession(region string) (*gocql.Session, error) {
	cfg := t.c.clusterConfig(region)
	s, err := cfg.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("cassandra: driver session for region %s: %w", region, err)
	}
	return s, nil
}

// clusterConfig is the driver configuration of clients in region: the region's nodes as
// contact points (so the control connection stays in the region), plain DC-aware round
// robin so the coordinator is always a node of the client's own region (as in the paper's
// setup; token awareness would send requests to remote replicas' regions), connections
// dialled from the region, and no retries or speculative executions, so that a measured
// latency is one request's.
func (c *Cluster) clusterConfig(region string) *gocql.ClusterConfig {
	var local []string
	for _, h := range c.o.Hosts {
		if h.Region == region {
			local = append(local, h.Addr)
		}
	}
	cfg := gocql.NewCluster(local...)
	cfg.Port = NativePort
	cfg.PoolConfig.HostSelectionPolicy = gocql.DCAwareRoundRobinPolicy(region)
	cfg.RetryPolicy = nil
	cfg.NumConns = c.co.ConnsPerHost
	cfg.Timeout = driverOpTimeout
	cfg.ConnectTimeout = driverDialTimeout
	cfg.MaxWaitSchemaAgreement = ddlTimeout
	cfg.Consistency = gocql.Quorum
	if d := c.o.Dialer(region); d != nil {
		cfg.Dialer = dialer(d)
	}
	return cfg
}

// session is a prepared configuration: one driver session per region, shared by the
// region's clients (driver sessions are safe for concurrent use).
type session struct {
	t       *target
	cfg     bench.Config
	levels  levelPair
	regions map[string]*gocql.Session

	closeOnce sync.Once
}

func (s *session) Connect(region string, i int) (bench.KV, error) {
	rs, ok := s.regions[region]
	if !ok {
		return nil, fmt.Errorf("cassandra: no node in region %q (data centers: %s)", region, strings.Join(s.t.dataCenters(), ", "))
	}
	return &kv{s: rs, read: s.levels.read, write: s.levels.write}, nil
}

func (s *session) LowerBoundMs(region, op string) float64 {
	return bench.LowerBoundMs(s.t.c.o.Topology, s.cfg, region, op)
}

func (s *session) Close() error {
	s.closeOnce.Do(func() {
		for _, rs := range s.regions {
			rs.Close()
		}
	})
	return nil
}

// kv runs one client's operations through its region's session.
type kv struct {
	s           *gocql.Session
	read, write gocql.Consistency
}

// Read reads key; a missing key is not an error (the benchmark may read a key whose insert
// has not happened yet).
func (k *kv) Read(ctx context.Context, key []byte) error {
	_, _, err := k.get(ctx, key)
	return err
}

// get reads key's value at the read level; found is false if there is none.
func (k *kv) get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	err = k.s.Query(readCQL, key).Consistency(k.read).ScanContext(ctx, &value)
	if errors.Is(err, gocql.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("cassandra: read at %s: %w", k.read, err)
	}
	return value, true, nil
}

// Update writes key at the write level. Cassandra's INSERT is an upsert, as is its UPDATE.
func (k *kv) Update(ctx context.Context, key, value []byte) error {
	if err := k.s.Query(writeCQL, key, value).Consistency(k.write).ExecContext(ctx); err != nil {
		return fmt.Errorf("cassandra: write at %s: %w", k.write, err)
	}
	return nil
}

func (k *kv) Insert(ctx context.Context, key, value []byte) error { return k.Update(ctx, key, value) }

// Scan reads up to count rows from start's token on, at the read level.
func (k *kv) Scan(ctx context.Context, start []byte, count int) error {
	iter := k.s.Query(scanCQL, start, count).Consistency(k.read).PageSize(max(count, 1)).IterContext(ctx)
	var key, value []byte
	for iter.Scan(&key, &value) {
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("cassandra: scan at %s: %w", k.read, err)
	}
	return nil
}

// --- lower bounds ---

func init() { bench.RegisterLowerBound(bench.ProtocolCassandra, lowerBound) }

// lowerBound corrects bench.LowerBoundMs for the levels it does not know, TWO and THREE:
// the count-th smallest RTT to the replicas (one per region, the local one free). Every
// other level maps onto the shared quorum bound (ONE, LOCAL_ONE, LOCAL_QUORUM: 0 with a local
// replica; QUORUM: a majority of regions; ALL and EACH_QUORUM: every region).
func lowerBound(t *topology.Topology, cfg bench.Config, region, op string) (float64, bool) {
	level := cfg.ReadLevel
	if op != "read" {
		level = cfg.WriteLevel
	}
	c, err := parseLevel(level)
	if err != nil || (c != gocql.Two && c != gocql.Three) {
		return 0, false
	}
	return bench.NthRTTMs(t, region, fixedReplicas(c)), true
}
