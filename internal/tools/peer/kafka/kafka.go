// Package kafka runs Apache Kafka in KRaft mode as a peer system: one node per peer.Host,
// started as a real JVM from the Maven Central jars (scripts/fetch-kafka.sh), the first
// nodes combined brokers and controllers (process.roles=broker,controller), the others brokers
// only. It is the Kafka side of the Kawkab ingest comparison (issue 20, thesis Fig. 5.10):
// the producer driver (producer.go) appends batches of small records to a one-partition topic,
// one produce request per batch, closed-loop for the peak or open-loop at a target rate, and
// reads the broker's CPU time from /proc. See docs/peers-kafka.md.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"meridian/internal/tools/peer"
)

// DefaultVersion is the Kafka release fetched when Options.LibDir is not given.
const DefaultVersion = "4.4.0"

// LibDirEnv names the environment variable that may point at the jar directory.
const LibDirEnv = "MERIDIAN_KAFKA_LIB"

// Defaults.
const (
	// DefaultHeapMB is each node's JVM heap (-Xms and -Xmx): kafka-server-start.sh's 1 GiB.
	DefaultHeapMB = 1024
	// DefaultControllers bounds the KRaft voters: the KRaft guide's "3 or 5", the smaller.
	DefaultControllers = 3
	// DefaultStartTimeout bounds Start: formatting and JVM start-up of every node on two
	// shared cores (one node takes about 10 s here).
	DefaultStartTimeout = 3 * time.Minute
	// pollInterval is how often start-up checks poll.
	pollInterval = 250 * time.Millisecond
	// stopGrace is how long Stop waits for a node to exit on SIGTERM (Kafka's controlled
	// shutdown) before it kills it.
	stopGrace = 30 * time.Second
	// formatTimeout bounds one run of the storage tool.
	formatTimeout = time.Minute
)

// Options configure the Kafka nodes (peer.Options say where they run). The zero value is
// usable.
type Options struct {
	// LibDir holds Kafka's jars. Empty: $LibDirEnv, else scripts/fetch-kafka.sh Version is run
	// (it caches the jars; see FetchScript).
	LibDir string
	// Version is the release to fetch when LibDir is empty (default DefaultVersion).
	Version string
	// FetchScript is the path of fetch-kafka.sh; empty: found above the working directory or
	// this package's source.
	FetchScript string
	// Java is the java binary (default "java"; Kafka 4 brokers need Java 17 or later).
	Java string
	// Controllers is the number of nodes that are also KRaft controllers, the first ones
	// (default min(DefaultControllers, hosts)).
	Controllers int
	// HeapMB is each node's JVM heap (default DefaultHeapMB).
	HeapMB int
	// BrokerPort and ControllerPort are the listeners' ports (default BrokerPort and
	// ControllerPort) on every host's address.
	BrokerPort, ControllerPort int
	// NumPartitions is num.partitions, for auto-created topics (default 1).
	NumPartitions int
	// Fsync makes the broker fsync every append before it acknowledges it
	// (log.flush.interval.messages=1); Kafka's default leaves flushing to the OS.
	Fsync bool
	// MaxMessageBytes raises message.max.bytes and replica.fetch.max.bytes when positive.
	MaxMessageBytes int
	// StartTimeout bounds Start (default DefaultStartTimeout).
	StartTimeout time.Duration
	// ExtraConfig are "key=value" lines appended to every server.properties (later lines win).
	ExtraConfig []string
	// ExtraJVMArgs are appended to the JVM's options.
	ExtraJVMArgs []string
}

// withDefaults checks ko against the peer options and fills in its defaults (except LibDir).
func (ko Options) withDefaults(o *peer.Options) (Options, error) {
	if err := o.Validate(); err != nil {
		return ko, err
	}
	if ko.Controllers < 0 || ko.HeapMB < 0 || ko.BrokerPort < 0 || ko.ControllerPort < 0 || ko.NumPartitions < 0 ||
		ko.MaxMessageBytes < 0 || ko.StartTimeout < 0 {
		return ko, fmt.Errorf("kafka: negative count, port or duration in options %+v", ko)
	}
	if ko.Version == "" {
		ko.Version = DefaultVersion
	}
	if ko.Java == "" {
		ko.Java = "java"
	}
	if ko.Controllers == 0 {
		ko.Controllers = DefaultControllers
	}
	ko.Controllers = min(ko.Controllers, len(o.Hosts))
	if ko.HeapMB == 0 {
		ko.HeapMB = DefaultHeapMB
	}
	if ko.HeapMB < 128 {
		return ko, fmt.Errorf("kafka: heap of %d MB is too small (at least 128)", ko.HeapMB)
	}
	if ko.BrokerPort == 0 {
		ko.BrokerPort = BrokerPort
	}
	if ko.ControllerPort == 0 {
		ko.ControllerPort = ControllerPort
	}
	if ko.BrokerPort > 65535 || ko.ControllerPort > 65535 || ko.BrokerPort == ko.ControllerPort {
		return ko, fmt.Errorf("kafka: ports %d and %d must differ and be below 65536", ko.BrokerPort, ko.ControllerPort)
	}
	if ko.NumPartitions == 0 {
		ko.NumPartitions = 1
	}
	if ko.StartTimeout == 0 {
		ko.StartTimeout = DefaultStartTimeout
	}
	addrs := map[string]string{}
	for _, h := range o.Hosts {
		a := net.ParseIP(h.Addr).String()
		if prev, ok := addrs[a]; ok {
			return ko, fmt.Errorf("kafka: hosts %q and %q share address %s (every node listens on ports %d and %d)",
				prev, h.Name, h.Addr, ko.BrokerPort, ko.ControllerPort)
		}
		addrs[a] = h.Name
	}
	for _, l := range ko.ExtraConfig {
		if k, _, ok := strings.Cut(l, "="); !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(l, "\r\n") {
			return ko, fmt.Errorf("kafka: extra configuration line %q is not one key=value line", l)
		}
	}
	return ko, nil
}

// clusterConfig is what the nodes' server.properties share.
func (ko Options) clusterConfig(hosts []peer.Host) clusterConfig {
	cc := clusterConfig{brokerPort: ko.BrokerPort, controllerPort: ko.ControllerPort, numPartitions: ko.NumPartitions,
		fsync: ko.Fsync, maxMessageBytes: ko.MaxMessageBytes, extra: ko.ExtraConfig}
	for i, h := range hosts {
		cc.nodes = append(cc.nodes, node{ID: i + 1, Addr: h.Addr, Controller: i < ko.Controllers})
	}
	return cc
}

// Cluster is a running Kafka cluster: one node per peer.Host.
type Cluster struct {
	o         peer.Options
	ko        Options
	cc        clusterConfig
	version   string
	clusterID string
	members   []*member
	// procCtx outlives Start's context: the nodes run until Stop, not until the caller's
	// start-up deadline passes.
	procCtx    context.Context
	procCancel context.CancelFunc

	// FormatTime and StartupTime are how long formatting the storage and starting the nodes
	// (until every broker answered a metadata request) took.
	FormatTime, StartupTime time.Duration

	mu      sync.Mutex
	stopped bool
}

// member is one node and its files.
type member struct {
	host peer.Host
	node node
	dirs nodeDirs
	proc peer.Process
}

// Start writes each node's configuration into o.Dir/<host>/ (wiping any data left there, so
// every cluster is fresh), formats its storage with a new cluster ID, starts every node and
// returns once a metadata request lists every broker. It fails after ko.StartTimeout with the
// end of the failing node's log.
func Start(ctx context.Context, o peer.Options, ko Options) (*Cluster, error) {
	ko, err := ko.withDefaults(&o)
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath(ko.Java); err != nil {
		return nil, fmt.Errorf("kafka: java binary %q not found (Kafka 4 needs Java 17 or later): %w", ko.Java, err)
	}
	ctx, cancel := context.WithTimeout(ctx, ko.StartTimeout)
	defer cancel()
	lib, err := resolveLibDir(ctx, ko, o.Log)
	if err != nil {
		return nil, err
	}
	ko.LibDir = lib
	version, err := libVersion(lib)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("kafka: working directory %q: %w", o.Dir, err)
	}
	o.Dir = dir
	clusterID, err := randomUUID()
	if err != nil {
		return nil, err
	}

	procCtx, procCancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Cluster{o: o, ko: ko, cc: ko.clusterConfig(o.Hosts), version: version, clusterID: clusterID,
		procCtx: procCtx, procCancel: procCancel}
	for i, h := range o.Hosts {
		m := &member{host: h, node: c.cc.nodes[i], dirs: dirsOf(o.Dir, h.Name)}
		if err := c.writeFiles(m); err != nil {
			procCancel()
			return nil, err
		}
		c.members = append(c.members, m)
	}
	o.Logf("kafka: formatting %d nodes (Kafka %s, %d controllers, cluster %s) in %s", len(c.members), version,
		ko.Controllers, clusterID, o.Dir)
	began := time.Now()
	if err := c.format(ctx); err != nil {
		procCancel()
		return nil, err
	}
	c.FormatTime = time.Since(began)
	began = time.Now()
	for _, m := range c.members {
		if err := c.launch(m); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.waitBrokers(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	c.StartupTime = time.Since(began)
	o.Logf("kafka: %d nodes formatted in %.1fs and up in %.1fs; logs in %s/<host>/kafka.log", len(c.members),
		c.FormatTime.Seconds(), c.StartupTime.Seconds(), o.Dir)
	return c, nil
}

// resolveLibDir finds the jar directory: ko.LibDir, $LibDirEnv, or the fetch script's cache.
func resolveLibDir(ctx context.Context, ko Options, log io.Writer) (string, error) {
	return peer.ResolveLibDir(ctx, peer.JarSource{Peer: "kafka", LibDir: ko.LibDir, Env: LibDirEnv, Script: ko.FetchScript,
		DefaultScript: "scripts/fetch-kafka.sh", Version: ko.Version}, log)
}

// coreJar matches the broker's jar (the "core" module, with kafka.Kafka and
// kafka.tools.StorageTool), e.g. kafka_2.13-4.4.0.jar.
var coreJar = regexp.MustCompile(`^kafka_2\.1[0-9]-(.+)\.jar$`)

// libVersion is Kafka's version, from its core jar's name; it also checks that the jars a
// broker needs beside it are there.
func libVersion(lib string) (string, error) {
	entries, err := os.ReadDir(lib)
	if err != nil {
		return "", fmt.Errorf("kafka: read %s: %w", lib, err)
	}
	version := ""
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
		if m := coreJar.FindStringSubmatch(e.Name()); m != nil {
			version = m[1]
		}
	}
	if version == "" {
		return "", fmt.Errorf("kafka: no kafka_2.13-VERSION.jar in %s (run scripts/fetch-kafka.sh)", lib)
	}
	for _, j := range []string{"kafka-clients", "kafka-server", "kafka-raft", "kafka-metadata", "kafka-storage"} {
		if !names[j+"-"+version+".jar"] {
			return "", fmt.Errorf("kafka: %s-%s.jar missing from %s (Kafka 4's broker is split into modules; run scripts/fetch-kafka.sh)", j, version, lib)
		}
	}
	if !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "log4j-slf4j") }) {
		return "", fmt.Errorf("kafka: no SLF4J binding (log4j-slf4j-impl) in %s: the broker's log would be dropped (run scripts/fetch-kafka.sh)", lib)
	}
	return version, nil
}

// writeFiles wipes m's directory and writes its configuration.
func (c *Cluster) writeFiles(m *member) error {
	if err := os.RemoveAll(m.dirs.Root); err != nil {
		return fmt.Errorf("kafka: wipe %s: %w", m.dirs.Root, err)
	}
	if err := os.MkdirAll(m.dirs.Root, 0o755); err != nil {
		return fmt.Errorf("kafka: create %s: %w", m.dirs.Root, err)
	}
	i := slices.IndexFunc(c.cc.nodes, func(n node) bool { return n.ID == m.node.ID })
	files := map[string][]byte{
		m.dirs.Properties: serverProperties(c.cc, i, m.dirs),
		m.dirs.Log4j:      []byte(log4j2XML),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("kafka: write %s: %w", path, err)
		}
	}
	return nil
}

// format runs the storage tool (bin/kafka-storage.sh format) on every node, on its host.
func (c *Cluster) format(ctx context.Context) error {
	dirIDs := map[int]string{}
	for _, n := range c.cc.nodes {
		if n.Controller {
			id, err := randomUUID()
			if err != nil {
				return err
			}
			dirIDs[n.ID] = id
		}
	}
	for i, m := range c.members {
		fctx, cancel := context.WithTimeout(ctx, formatTimeout)
		args := []string{
			// kafka-run-class.sh's heap for tools.
			"-Xmx256m", "-Djava.net.preferIPv4Stack=true", "-Dlog4j2.configurationFile=" + m.dirs.Log4j,
			"-cp", filepath.Join(c.ko.LibDir, "*"), "kafka.tools.StorageTool",
		}
		args = append(args, formatArgs(c.cc, i, c.clusterID, dirIDs, m.dirs)...)
		cmd := m.host.Cmd(fctx, c.ko.Java, args...)
		out, err := os.Create(m.dirs.FormatLog)
		if err != nil {
			cancel()
			return fmt.Errorf("kafka: %w", err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Run()
		out.Close()
		cancel()
		if err != nil {
			return fmt.Errorf("kafka: formatting %s: %w; end of %s:\n%s", m.host.Name, err, m.dirs.FormatLog,
				peer.TailFile(m.dirs.FormatLog, 15))
		}
	}
	return nil
}

// launch starts m's JVM on its host, appending to its log file.
func (c *Cluster) launch(m *member) error {
	roles := "broker"
	if m.node.Controller {
		roles = "broker+controller"
	}
	header := fmt.Sprintf("=== meridian: starting %s (%s, node.id %d, %s) at %s", m.host.Name, m.host.Addr, m.node.ID, roles,
		time.Now().Format(time.RFC3339))
	args := jvmArgs(c.ko.HeapMB, m.dirs, c.ko.ExtraJVMArgs)
	args = append(args, "-cp", filepath.Join(c.ko.LibDir, "*"), "kafka.Kafka", m.dirs.Properties)
	pid, err := m.proc.Start(c.procCtx, m.host, m.dirs.LogFile, m.dirs.Root, header, c.ko.Java, args...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	c.o.Logf("kafka: started %s on %s (node.id %d, %s, pid %d)", m.host.Name, m.host.Addr, m.node.ID, roles, pid)
	return nil
}

// waitBrokers waits until a metadata request lists every broker, failing early when a node
// exits.
func (c *Cluster) waitBrokers(ctx context.Context) error {
	cl, err := kgo.NewClient(c.ClientOpts(c.o.Hosts[0].Region)...)
	if err != nil {
		return fmt.Errorf("kafka: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		for _, m := range c.members {
			if exited, err := m.proc.Exited(); exited {
				return fmt.Errorf("kafka: %s exited while starting (%v); end of %s:\n%s", m.host.Name, err, m.dirs.LogFile,
					peer.TailFile(m.dirs.LogFile, 30))
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		md, err := adm.BrokerMetadata(rctx)
		cancel()
		if err == nil && len(md.Brokers) == len(c.members) {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("metadata lists %d of %d brokers", len(md.Brokers), len(c.members))
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: gave up waiting for the brokers (%v; last check: %v)\n%s", ctx.Err(), last, c.logTails())
		case <-time.After(pollInterval):
		}
	}
}

// logTails is the end of each node's log, for error messages.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, m := range c.members {
		fmt.Fprintf(&b, "--- %s (%s), last lines:\n%s\n", m.host.Name, m.dirs.LogFile, peer.TailFile(m.dirs.LogFile, 12))
	}
	return b.String()
}

// Stop asks every node to exit (SIGTERM: Kafka's controlled shutdown, then SIGKILL after
// 30 s) and waits for them; the data and logs stay in o.Dir. It is idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for k, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.proc.Stop(stopGrace, time.Minute); err != nil {
				errs[k] = fmt.Errorf("kafka: %s: %w", m.host.Name, err)
			}
		}()
	}
	wg.Wait()
	c.procCancel()
	c.o.Logf("kafka: stopped")
	return errors.Join(errs...)
}

// Pids are the nodes' process ids (a node that never started has none).
func (c *Cluster) Pids() []int {
	var out []int
	for _, m := range c.members {
		if pid := m.proc.Pid(); pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// Running reports whether node i's process is running.
func (c *Cluster) Running(i int) bool { return c.members[i].proc.Running() }

// Brokers are the brokers' client addresses ("addr:port"), in host order.
func (c *Cluster) Brokers() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = hostPort(m.host.Addr, c.ko.BrokerPort)
	}
	return out
}

// ClientOpts are the franz-go options that reach the cluster from a client in region: the
// brokers as seeds, dialled through the region's dialer (peer.Options.DialFrom).
func (c *Cluster) ClientOpts(region string) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers()...)}
	if d := c.o.Dialer(region); d != nil {
		opts = append(opts, kgo.Dialer(d))
	}
	return opts
}

// Hosts are the nodes' hosts, in node order.
func (c *Cluster) Hosts() []peer.Host { return slices.Clone(c.o.Hosts) }

// Version is Kafka's version, from its core jar's name (e.g. "4.4.0").
func (c *Cluster) Version() string { return c.version }

// ClusterID is the cluster ID the storage was formatted with.
func (c *Cluster) ClusterID() string { return c.clusterID }

// LogFile is node i's log.
func (c *Cluster) LogFile(i int) string { return c.members[i].dirs.LogFile }

// PropertiesFile is node i's server.properties.
func (c *Cluster) PropertiesFile(i int) string { return c.members[i].dirs.Properties }
