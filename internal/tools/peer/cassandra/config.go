package cassandra

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"meridian/internal/tools/peer"
)

// Ports every node uses. Each node has its own address (a lab host or a loopback address),
// so the ports need not differ between nodes.
const (
	StoragePort = 7000 // internode messaging and gossip
	NativePort  = 9042 // CQL native protocol
)

// The rack of every node: the lab has one node per region, so racks carry no information,
// but GossipingPropertyFileSnitch needs one.
const rackName = "r1"

// nodeYAML is the subset of cassandra.yaml the lab sets; everything else keeps Cassandra's
// defaults. The field order is the order in the file.
type nodeYAML struct {
	ClusterName            string         `yaml:"cluster_name"`
	NumTokens              int            `yaml:"num_tokens"`
	Partitioner            string         `yaml:"partitioner"`
	AutoBootstrap          bool           `yaml:"auto_bootstrap"`
	DataFileDirectories    []string       `yaml:"data_file_directories"`
	CommitlogDirectory     string         `yaml:"commitlog_directory"`
	SavedCachesDirectory   string         `yaml:"saved_caches_directory"`
	HintsDirectory         string         `yaml:"hints_directory"`
	CDCRawDirectory        string         `yaml:"cdc_raw_directory"`
	CommitlogSync          string         `yaml:"commitlog_sync"`
	CommitlogSyncPeriod    string         `yaml:"commitlog_sync_period"`
	SeedProvider           []seedProvider `yaml:"seed_provider"`
	ListenAddress          string         `yaml:"listen_address"`
	RPCAddress             string         `yaml:"rpc_address"`
	StoragePort            int            `yaml:"storage_port"`
	NativeTransportPort    int            `yaml:"native_transport_port"`
	StartNativeTransport   bool           `yaml:"start_native_transport"`
	EndpointSnitch         string         `yaml:"endpoint_snitch"`
	KeyCacheSize           string         `yaml:"key_cache_size"`
	RowCacheSize           string         `yaml:"row_cache_size"`
	CounterCacheSize       string         `yaml:"counter_cache_size"`
	AutoSnapshot           bool           `yaml:"auto_snapshot"`
	ConcurrentCompactors   int            `yaml:"concurrent_compactors"`
	HintedHandoffEnabled   bool           `yaml:"hinted_handoff_enabled"`
	DynamicSnitch          bool           `yaml:"dynamic_snitch"`
	ReadRequestTimeout     string         `yaml:"read_request_timeout"`
	RangeRequestTimeout    string         `yaml:"range_request_timeout"`
	WriteRequestTimeout    string         `yaml:"write_request_timeout"`
	NativeTransportIdle    string         `yaml:"native_transport_idle_timeout"`
	MaxHintWindow          string         `yaml:"max_hint_window"`
	MemtableHeapSpace      string         `yaml:"memtable_heap_space,omitempty"`
	CommitlogTotalSpace    string         `yaml:"commitlog_total_space"`
	CommitlogSegmentSize   string         `yaml:"commitlog_segment_size"`
	BatchlogReplayThrottle string         `yaml:"batchlog_replay_throttle"`
}

type seedProvider struct {
	ClassName  string              `yaml:"class_name"`
	Parameters []map[string]string `yaml:"parameters"`
}

// nodeDirs are one node's directories under the cluster's working directory.
type nodeDirs struct {
	Root     string // o.Dir/<host>
	Data     string // everything Cassandra writes (wiped when the cluster starts)
	Conf     string // cassandra.yaml, cassandra-rackdc.properties, logback.xml
	LogFile  string // the JVM's stdout and stderr
	Yaml     string
	RackDC   string
	Logback  string
	HeapDump string
}

func dirsOf(clusterDir, hostName string) nodeDirs {
	root := filepath.Join(clusterDir, hostName)
	conf := filepath.Join(root, "conf")
	return nodeDirs{
		Root:     root,
		Data:     filepath.Join(root, "data"),
		Conf:     conf,
		LogFile:  filepath.Join(root, "cassandra.log"),
		Yaml:     filepath.Join(conf, "cassandra.yaml"),
		RackDC:   filepath.Join(conf, "cassandra-rackdc.properties"),
		Logback:  filepath.Join(conf, "logback.xml"),
		HeapDump: root,
	}
}

// seedAddrs are the first host of each region, in the hosts' order: every data center can
// then join through a node of its own, and with one node per region every node is a seed,
// which lets all nodes start at once without one waiting for another.
func seedAddrs(hosts []peer.Host) []string {
	seen := map[string]bool{}
	var out []string
	for _, h := range hosts {
		if !seen[h.Region] {
			seen[h.Region] = true
			out = append(out, h.Addr)
		}
	}
	return out
}

// nodeConfig renders cassandra.yaml for hosts[i].
func nodeConfig(clusterName string, hosts []peer.Host, i int, co Options, dirs nodeDirs) ([]byte, error) {
	h := hosts[i]
	y := nodeYAML{
		ClusterName: clusterName,
		// Few tokens: a fresh ring forms faster and range scans touch fewer ranges; with one
		// replica per data center the tokens only place keys, balance is not at stake.
		NumTokens:   co.NumTokens,
		Partitioner: "org.apache.cassandra.dht.Murmur3Partitioner",
		// Every cluster is fresh and empty: nothing to stream, so no bootstrap.
		AutoBootstrap:        false,
		DataFileDirectories:  []string{filepath.Join(dirs.Data, "data")},
		CommitlogDirectory:   filepath.Join(dirs.Data, "commitlog"),
		SavedCachesDirectory: filepath.Join(dirs.Data, "saved_caches"),
		HintsDirectory:       filepath.Join(dirs.Data, "hints"),
		CDCRawDirectory:      filepath.Join(dirs.Data, "cdc_raw"),
		// Cassandra's default: acknowledge before fsync, sync every 10 s.
		CommitlogSync:       "periodic",
		CommitlogSyncPeriod: "10000ms",
		SeedProvider: []seedProvider{{
			ClassName:  "org.apache.cassandra.locator.SimpleSeedProvider",
			Parameters: []map[string]string{{"seeds": strings.Join(seedAddrs(hosts), ",")}},
		}},
		ListenAddress:        h.Addr,
		RPCAddress:           h.Addr,
		StoragePort:          StoragePort,
		NativeTransportPort:  NativePort,
		StartNativeTransport: true,
		// One data center per region (cassandra-rackdc.properties), as in the paper's setup.
		EndpointSnitch: "GossipingPropertyFileSnitch",
		// Minimal caches: the working set of a benchmark fits the memtables and page cache;
		// a key cache would only take heap from two-core machines.
		KeyCacheSize:     "0MiB",
		RowCacheSize:     "0MiB",
		CounterCacheSize: "0MiB",
		// Prepare drops the keyspace before each configuration; a snapshot per drop would
		// only cost time and disk.
		AutoSnapshot:         false,
		ConcurrentCompactors: 1,
		HintedHandoffEnabled: true,
		DynamicSnitch:        true,
		// Cassandra's defaults, written out because the WAN's RTTs (up to ~250 ms) must
		// stay well inside them.
		ReadRequestTimeout:     "5000ms",
		RangeRequestTimeout:    "10000ms",
		WriteRequestTimeout:    "2000ms",
		NativeTransportIdle:    "0ms",
		MaxHintWindow:          "3h",
		CommitlogTotalSpace:    "1024MiB",
		CommitlogSegmentSize:   "32MiB",
		BatchlogReplayThrottle: "1024KiB",
	}
	if co.HeapMB > 0 {
		// Cassandra's default is a quarter of the heap; keep it explicit so small heaps flush
		// early rather than run out of memory.
		y.MemtableHeapSpace = strconv.Itoa(max(64, co.HeapMB/4)) + "MiB"
	}
	out, err := yaml.Marshal(y)
	if err != nil {
		return nil, fmt.Errorf("cassandra: render cassandra.yaml for %s: %w", h.Name, err)
	}
	return append([]byte("# Generated by meridian internal/peer/cassandra; rewritten at every start.\n"), out...), nil
}

// rackDCProperties places a node for GossipingPropertyFileSnitch: data center = region.
func rackDCProperties(h peer.Host) []byte {
	return []byte(fmt.Sprintf("dc=%s\nrack=%s\nprefer_local=false\n", h.Region, rackName))
}

// logbackXML sends Cassandra's log to stdout (which goes to the node's log file) at INFO:
// the Maven jars carry no logging configuration, and logback's fallback logs everything at
// DEBUG, which is slow and floods the file.
const logbackXML = `<configuration scan="false">
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder>
      <pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern>
    </encoder>
  </appender>
  <logger name="org.apache.cassandra" level="INFO"/>
  <logger name="com.thinkaurelius.thrift" level="ERROR"/>
  <root level="INFO">
    <appender-ref ref="STDOUT"/>
  </root>
</configuration>
`

// java17ModuleFlags open the JDK internals Cassandra uses (the JPMS lines of Cassandra 5.0's
// conf/jvm17-server.options, plus the ones of earlier 5.0 releases); without them the daemon
// fails at start with IllegalAccessError / InaccessibleObjectException.
var java17ModuleFlags = []string{
	"--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
	"--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED",
	"--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED",
	"--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
	"--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
	"--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
	"--add-exports", "java.sql/java.sql=ALL-UNNAMED",
	"--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
	"--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
	"--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
	"--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
	"--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
	"--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
	"--add-opens", "java.base/java.io=ALL-UNNAMED",
	"--add-opens", "java.base/java.nio=ALL-UNNAMED",
	"--add-opens", "java.base/java.net=ALL-UNNAMED",
	"--add-opens", "java.base/java.math=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
	"--add-opens", "java.base/java.util=ALL-UNNAMED",
	"--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED",
	"--add-opens", "java.base/java.util.concurrent.atomic=ALL-UNNAMED",
	"--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
}

// javaArgs is the command line (after the java binary) that runs node i in the foreground.
func javaArgs(co Options, i int, dirs nodeDirs) []string {
	args := []string{
		fmt.Sprintf("-Xms%dm", co.HeapMB), fmt.Sprintf("-Xmx%dm", co.HeapMB),
		"-Xss256k",
		"-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxGCPauseMillis=300",
		"-XX:+ExitOnOutOfMemoryError",
		"-XX:+HeapDumpOnOutOfMemoryError", "-XX:HeapDumpPath=" + dirs.HeapDump,
		"-Djava.net.preferIPv4Stack=true",
		"-Djdk.attach.allowAttachSelf=true",
		"-Dio.netty.tryReflectionSetAccessible=true",
		"-Dcassandra.config=file://" + dirs.Yaml,
		"-Dcassandra-rackdc.properties=file://" + dirs.RackDC,
		"-Dlogback.configurationFile=file://" + dirs.Logback,
		"-Dcassandra.storagedir=" + dirs.Data,
		"-Dcassandra.logdir=" + dirs.Root,
		"-Dcassandra-foreground=yes",
		// Fast start of a fresh cluster: do not wait for gossip to settle or for a ring
		// delay meant to let a large cluster learn of a joining node.
		"-Dcassandra.skip_wait_for_gossip_to_settle=0",
		"-Dcassandra.ring_delay_ms=" + strconv.Itoa(co.RingDelayMs),
		// No auth: no superuser to set up (the setup is delayed by default).
		"-Dcassandra.superuser_setup_delay_ms=0",
	}
	if co.JMXBasePort > 0 {
		// Local (loopback-only) JMX, for nodetool; distinct per node so that nodes sharing
		// one machine's loopback do not collide.
		args = append(args, "-Dcassandra.jmx.local.port="+strconv.Itoa(co.JMXBasePort+i))
	}
	args = append(args, java17ModuleFlags...)
	args = append(args, co.ExtraJVMArgs...)
	args = append(args, "-cp", filepath.Join(co.LibDir, "*"), "org.apache.cassandra.service.CassandraDaemon")
	return args
}
