// Package cassandra runs Apache Cassandra 5.0 as a peer system in the network lab: one node
// per lab host, one data center per region, started from the Maven Central jars
// (scripts/fetch-cassandra.sh), and benchmarked through bench.Target with Cassandra's own
// consistency levels (configurations such as cassandra:QUORUM/QUORUM). See
// docs/peers-cassandra.md.
package cassandra

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"meridian/internal/tools/peer"
)

// DefaultVersion is the Cassandra release fetched when Options.LibDir is not given.
const DefaultVersion = "5.0.4"

// LibDirEnv names the environment variable that may point at the jar directory.
const LibDirEnv = "MERIDIAN_CASSANDRA_LIB"

// Options configure the Cassandra nodes (peer.Options say where they run).
type Options struct {
	// LibDir holds Cassandra's jars (cassandra-all and its dependencies). Empty: $LibDirEnv,
	// else scripts/fetch-cassandra.sh Version is run (it caches the jars; see FetchScript).
	LibDir string
	// Version is the release to fetch when LibDir is empty (default DefaultVersion).
	Version string
	// FetchScript is the path of fetch-cassandra.sh; empty: found by walking up from the
	// working directory or from this package's source to the repository's scripts/.
	FetchScript string
	// Java is the java binary (default "java"); Cassandra 5.0 needs Java 11 or 17.
	Java string
	// HeapMB is each node's JVM heap. Default: cassandra-env.sh's formula applied to each
	// node's share of the machine's memory (defaultHeapMB).
	HeapMB int
	// AvailableProcessors is each node's cassandra.available_processors, the cores Cassandra
	// sizes its thread pools for. Default: the machine's cores shared among the nodes, at
	// least 1 (conf/jvm-server.options: for several instances on one machine).
	AvailableProcessors int
	// NumTokens is each node's number of virtual nodes (default 16).
	NumTokens int
	// RingDelayMs is cassandra.ring_delay_ms (default 1000; Cassandra's is 30000, which only
	// a joining node in a large established cluster needs).
	RingDelayMs int
	// JMXBasePort > 0 opens loopback-only JMX (for nodetool) on JMXBasePort+i for node i;
	// 0 leaves JMX off, which also spares namespaces whose loopback is down.
	JMXBasePort int
	// ClusterName is cassandra.yaml's cluster_name (default "meridian-lab").
	ClusterName string
	// StartTimeout bounds Start and Restart (default 5 minutes).
	StartTimeout time.Duration
	// ConnsPerHost is the number of driver connections per node and region (default 2);
	// each connection multiplexes thousands of requests.
	ConnsPerHost int
	// ExtraJVMArgs are appended to the JVM's options (e.g. -XX flags).
	ExtraJVMArgs []string
}

// withDefaults fills in the defaults for a cluster of nodes nodes, all on this machine (as
// in the lab and the tests).
func (co Options) withDefaults(nodes int) Options {
	nodes = max(nodes, 1)
	if co.Version == "" {
		co.Version = DefaultVersion
	}
	if co.Java == "" {
		co.Java = "java"
	}
	if co.HeapMB == 0 {
		co.HeapMB = defaultHeapMB(systemMemoryMB() / nodes)
	}
	if co.AvailableProcessors == 0 {
		co.AvailableProcessors = max(1, runtime.NumCPU()/nodes)
	}
	if co.NumTokens == 0 {
		co.NumTokens = 16
	}
	if co.RingDelayMs == 0 {
		co.RingDelayMs = 1000
	}
	if co.ClusterName == "" {
		co.ClusterName = "meridian-lab"
	}
	if co.StartTimeout == 0 {
		co.StartTimeout = 5 * time.Minute
	}
	if co.ConnsPerHost == 0 {
		co.ConnsPerHost = 2
	}
	return co
}

// validate checks options after withDefaults.
func (co Options) validate() error {
	switch {
	case co.HeapMB < 256:
		return fmt.Errorf("cassandra: heap of %d MB is too small (at least 256)", co.HeapMB)
	case co.AvailableProcessors < 1:
		return fmt.Errorf("cassandra: %d available processors", co.AvailableProcessors)
	case co.NumTokens < 1 || co.NumTokens > 256:
		return fmt.Errorf("cassandra: num_tokens %d out of range 1..256", co.NumTokens)
	case co.RingDelayMs < 0:
		return fmt.Errorf("cassandra: negative ring delay %d ms", co.RingDelayMs)
	case co.JMXBasePort < 0 || co.JMXBasePort > 65000:
		return fmt.Errorf("cassandra: JMX base port %d out of range", co.JMXBasePort)
	case co.StartTimeout < 0:
		return fmt.Errorf("cassandra: negative start timeout %v", co.StartTimeout)
	case co.ConnsPerHost < 1:
		return fmt.Errorf("cassandra: %d connections per host", co.ConnsPerHost)
	case strings.ContainsAny(co.ClusterName, "\n'\""):
		return fmt.Errorf("cassandra: cluster name %q has quotes or newlines", co.ClusterName)
	}
	return nil
}

// Cluster is a running Cassandra cluster: one node per peer.Host.
type Cluster struct {
	o     peer.Options
	co    Options
	nodes []*node
	// procCtx outlives Start's context: the nodes run until Stop, not until the caller's
	// start-up deadline passes.
	procCtx    context.Context
	procCancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
	targets []*target
}

// node is one Cassandra process and its files.
type node struct {
	i    int
	host peer.Host
	dirs nodeDirs

	proc peer.Process
	pid  int // of the current or last JVM; set by launch
}

// Start writes each node's configuration into o.Dir/<host>/ (wiping any data left there,
// so every cluster is fresh), starts one Cassandra node per host, and returns once every
// node answers CQL and knows every other node as a member of the ring with its data center
// and tokens. It fails after co.StartTimeout with the end of the failing node's log.
func Start(ctx context.Context, o peer.Options, co Options) (*Cluster, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	co = co.withDefaults(len(o.Hosts))
	if err := co.validate(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath(co.Java); err != nil {
		return nil, fmt.Errorf("cassandra: java binary %q not found (Cassandra 5.0 needs Java 11 or 17): %w", co.Java, err)
	}
	ctx, cancel := context.WithTimeout(ctx, co.StartTimeout)
	defer cancel()
	lib, err := resolveLibDir(ctx, co, o.Log)
	if err != nil {
		return nil, err
	}
	co.LibDir = lib
	if err := checkLibDir(lib); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("cassandra: working directory %q: %w", o.Dir, err)
	}
	o.Dir = dir

	procCtx, procCancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Cluster{o: o, co: co, procCtx: procCtx, procCancel: procCancel}
	for i, h := range o.Hosts {
		n := &node{i: i, host: h, dirs: dirsOf(o.Dir, h.Name)}
		if err := c.writeNodeFiles(n, true); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}

	began := time.Now()
	// Seeds first, all at once; the other nodes then join through them (a non-seed node that
	// finds no live seed within the ring delay gives up).
	seeds := map[string]bool{}
	for _, a := range seedAddrs(o.Hosts) {
		seeds[a] = true
	}
	var seedNodes, others []*node
	for _, n := range c.nodes {
		if seeds[n.host.Addr] {
			seedNodes = append(seedNodes, n)
		} else {
			others = append(others, n)
		}
	}
	for _, group := range [][]*node{seedNodes, others} {
		for _, n := range group {
			if err := c.launch(n); err != nil {
				c.Stop()
				return nil, err
			}
		}
		if err := c.waitGroup(ctx, group, (*Cluster).waitNative); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.waitGroup(ctx, c.nodes, (*Cluster).waitRing); err != nil {
		c.Stop()
		return nil, err
	}
	o.Logf("cassandra: %d nodes up in %.1fs (logs in %s/<host>/cassandra.log)", len(c.nodes), time.Since(began).Seconds(), o.Dir)
	return c, nil
}

// Hosts are the cluster's hosts, in node order.
func (c *Cluster) Hosts() []peer.Host { return append([]peer.Host(nil), c.o.Hosts...) }

// LogFile is node i's log (the JVM's stdout and stderr).
func (c *Cluster) LogFile(i int) string { return c.nodes[i].dirs.LogFile }

// Stop kills every node (SIGKILL: the data is thrown away with the cluster, so there is
// nothing to flush) and waits for the processes to exit. It is idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	targets := c.targets
	c.targets = nil
	c.mu.Unlock()
	for _, t := range targets {
		t.Close()
	}
	var errs []error
	for _, n := range c.nodes {
		if err := n.kill(); err != nil {
			errs = append(errs, err)
		}
	}
	c.procCancel()
	return errors.Join(errs...)
}

// Kill kills node i (SIGKILL) and waits for it to exit, as a crash would; Restart brings
// it back with its data.
func (c *Cluster) Kill(i int) error {
	if i < 0 || i >= len(c.nodes) {
		return fmt.Errorf("cassandra: no node %d (cluster has %d)", i, len(c.nodes))
	}
	return c.nodes[i].kill()
}

// Restart kills node i if it is running and starts it again with its data, returning once
// it answers CQL and sees the ring again (bounded by Options.StartTimeout).
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if i < 0 || i >= len(c.nodes) {
		return fmt.Errorf("cassandra: no node %d (cluster has %d)", i, len(c.nodes))
	}
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	if stopped {
		return fmt.Errorf("cassandra: cluster is stopped")
	}
	n := c.nodes[i]
	if err := n.kill(); err != nil {
		return err
	}
	if err := c.writeNodeFiles(n, false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.co.StartTimeout)
	defer cancel()
	if err := c.launch(n); err != nil {
		return err
	}
	if err := c.waitNative(ctx, n); err != nil {
		return err
	}
	return c.waitRing(ctx, n)
}

// writeNodeFiles writes n's configuration; fresh wipes its data first.
func (c *Cluster) writeNodeFiles(n *node, fresh bool) error {
	if fresh {
		// A fresh cluster starts with empty data and a new log; a restart keeps both.
		for _, p := range []string{n.dirs.Data, n.dirs.LogFile} {
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("cassandra: wipe %s: %w", p, err)
			}
		}
	}
	for _, d := range []string{n.dirs.Conf, n.dirs.Data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cassandra: create %s: %w", d, err)
		}
	}
	y, err := nodeConfig(c.co.ClusterName, c.o.Hosts, n.i, c.co, n.dirs)
	if err != nil {
		return err
	}
	hints, err := hotspotCompiler(c.co.LibDir)
	if err != nil {
		return err
	}
	files := map[string][]byte{n.dirs.Yaml: y, n.dirs.RackDC: rackDCProperties(n.host), n.dirs.Logback: []byte(logbackXML),
		n.dirs.Hotspot: hints}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("cassandra: write %s: %w", path, err)
		}
	}
	return nil
}

// launch starts n's JVM on its host, appending to its log file.
func (c *Cluster) launch(n *node) error {
	header := fmt.Sprintf("=== meridian: starting %s (%s, dc %s) at %s", n.host.Name, n.host.Addr, n.host.Region, time.Now().Format(time.RFC3339))
	pid, err := n.proc.Start(c.procCtx, n.host, n.dirs.LogFile, n.dirs.Root, header, c.co.Java, javaArgs(c.co, n.i, n.dirs)...)
	if err != nil {
		return fmt.Errorf("cassandra: %w", err)
	}
	n.pid = pid
	c.o.Logf("cassandra: started %s on %s (pid %d)", n.host.Name, n.host.Addr, pid)
	return nil
}

// kill SIGKILLs n's process group and waits (at most a minute) for the process to exit.
func (n *node) kill() error {
	if err := n.proc.Kill(time.Minute); err != nil {
		return fmt.Errorf("cassandra: %s: %w", n.host.Name, err)
	}
	return nil
}

// exited reports whether n's current process has exited, and how.
func (n *node) exited() (bool, error) { return n.proc.Exited() }

// waitGroup runs wait for every node concurrently and returns the first error.
func (c *Cluster) waitGroup(ctx context.Context, nodes []*node, wait func(*Cluster, context.Context, *node) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for k, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = wait(c, ctx, n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pollInterval is how often start-up checks poll: short next to the ~10-30 s a node takes.
const pollInterval = 250 * time.Millisecond

// poll calls check until it returns done or an error, n's process exits, or ctx ends; what
// names the wait in errors, which carry the end of n's log.
func (c *Cluster) poll(ctx context.Context, n *node, what string, check func(context.Context) (done bool, lastErr error)) error {
	var lastErr error
	for {
		if exited, err := n.exited(); exited {
			return fmt.Errorf("cassandra: %s exited while %s (%v); end of %s:\n%s", n.host.Name, what, err, n.dirs.LogFile, logTail(n.dirs.LogFile, 30))
		}
		ok, err := check(ctx)
		if ok {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("cassandra: %s: gave up %s (%v; last check: %v); end of %s:\n%s",
				n.host.Name, what, ctx.Err(), lastErr, n.dirs.LogFile, logTail(n.dirs.LogFile, 30))
		case <-time.After(pollInterval):
		}
	}
}

// waitNative waits until n accepts CQL connections.
func (c *Cluster) waitNative(ctx context.Context, n *node) error {
	addr := net.JoinHostPort(n.host.Addr, strconv.Itoa(NativePort))
	dial := c.o.Dialer(n.host.Region)
	return c.poll(ctx, n, "waiting for the CQL port "+addr, func(ctx context.Context) (bool, error) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var conn net.Conn
		var err error
		if dial != nil {
			conn, err = dial(dctx, "tcp", addr)
		} else {
			conn, err = (&net.Dialer{}).DialContext(dctx, "tcp", addr)
		}
		if err != nil {
			return false, err
		}
		conn.Close()
		return true, nil
	})
}

// waitRing waits until n lists every other node in system.peers_v2 with its data center and
// tokens, i.e. has learnt through gossip that each one joined the ring.
func (c *Cluster) waitRing(ctx context.Context, n *node) error {
	want := map[string]string{} // address → data center
	for _, h := range c.o.Hosts {
		if h.Addr != n.host.Addr {
			want[net.ParseIP(h.Addr).String()] = h.Region
		}
	}
	var sess *gocql.Session
	defer func() {
		if sess != nil {
			sess.Close()
		}
	}()
	return c.poll(ctx, n, "waiting to see every other node in its ring", func(ctx context.Context) (bool, error) {
		if sess == nil {
			s, err := c.nodeSession(n)
			if err != nil {
				return false, err
			}
			sess = s
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		iter := sess.Query("SELECT peer, data_center, tokens FROM system.peers_v2").Consistency(gocql.One).IterContext(qctx)
		var (
			addr   net.IP
			dc     string
			tokens []string
		)
		var missing []string
		seen := map[string]bool{}
		for iter.Scan(&addr, &dc, &tokens) {
			if want[addr.String()] == dc && len(tokens) > 0 {
				seen[addr.String()] = true
			}
		}
		if err := iter.Close(); err != nil {
			return false, err
		}
		for a := range want {
			if !seen[a] {
				missing = append(missing, a)
			}
		}
		if len(missing) > 0 {
			return false, fmt.Errorf("not yet in its ring: %s", strings.Join(missing, ", "))
		}
		return true, nil
	})
}

// nodeSession is a driver session whose only host is n (no discovery), so that its
// queries run on n and show n's view of the cluster.
func (c *Cluster) nodeSession(n *node) (*gocql.Session, error) {
	cfg := gocql.NewCluster(n.host.Addr)
	cfg.Port = NativePort
	cfg.DisableInitialHostLookup = true
	cfg.HostFilter = gocql.WhiteListHostFilter(n.host.Addr)
	cfg.Events.DisableNodeStatusEvents = true
	cfg.Events.DisableTopologyEvents = true
	cfg.Events.DisableSchemaEvents = true
	cfg.NumConns = 1
	cfg.Timeout = 10 * time.Second
	cfg.ConnectTimeout = 5 * time.Second
	cfg.Metadata.CacheMode = gocql.Disabled
	if d := c.o.Dialer(n.host.Region); d != nil {
		cfg.Dialer = dialer(d)
	}
	s, err := cfg.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("cassandra: driver session to %s: %w", n.host.Name, err)
	}
	return s, nil
}

// dialer adapts peer.DialFunc to gocql.Dialer.
type dialer peer.DialFunc

func (d dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d(ctx, network, addr)
}

// logTail is the last lines of a log file, or why it cannot be read.
func logTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	var all []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// --- the jars ---

// resolveLibDir finds the jar directory: co.LibDir, $MERIDIAN_CASSANDRA_LIB, or the output
// of scripts/fetch-cassandra.sh (which downloads once and caches).
func resolveLibDir(ctx context.Context, co Options, log io.Writer) (string, error) {
	if co.LibDir != "" {
		return filepath.Abs(co.LibDir)
	}
	if env := os.Getenv(LibDirEnv); env != "" {
		return filepath.Abs(env)
	}
	script := co.FetchScript
	if script == "" {
		var err error
		if script, err = findFetchScript(); err != nil {
			return "", err
		}
	}
	lib, err := peer.FetchLibDir(ctx, script, co.Version, log)
	if err != nil {
		return "", fmt.Errorf("cassandra: %w", err)
	}
	return lib, nil
}

// findFetchScript looks for scripts/fetch-cassandra.sh above the working directory, then
// above the source tree (tests and `go run` from a checkout).
func findFetchScript() (string, error) {
	const rel = "scripts/fetch-cassandra.sh"
	p, err := peer.FindScript(rel)
	if err != nil {
		return "", fmt.Errorf("cassandra: no jar directory: set Options.LibDir or $%s, or run from the repository (%s not found)", LibDirEnv, rel)
	}
	return p, nil
}

// checkLibDir checks that dir holds a cassandra-all jar.
func checkLibDir(dir string) error {
	m, err := filepath.Glob(filepath.Join(dir, "cassandra-all-*.jar"))
	if err != nil || len(m) == 0 {
		return fmt.Errorf("cassandra: %s holds no cassandra-all-*.jar (run scripts/fetch-cassandra.sh)", dir)
	}
	return nil
}
