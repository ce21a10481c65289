package cassandra

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
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
	ConcurrentReads        int            `yaml:"concurrent_reads"`
	ConcurrentWrites       int            `yaml:"concurrent_writes"`
	ConcurrentCounterWrite int            `yaml:"concurrent_counter_writes"`
	ConcurrentMVWrites     int            `yaml:"concurrent_materialized_view_writes"`
	Memtable               memtableYAML   `yaml:"memtable"`
	MemtableAllocationType string         `yaml:"memtable_allocation_type"`
	AutoSnapshot           bool           `yaml:"auto_snapshot"`
	HintedHandoffEnabled   bool           `yaml:"hinted_handoff_enabled"`
	DynamicSnitch          bool           `yaml:"dynamic_snitch"`
	ReadRequestTimeout     string         `yaml:"read_request_timeout"`
	RangeRequestTimeout    string         `yaml:"range_request_timeout"`
	WriteRequestTimeout    string         `yaml:"write_request_timeout"`
	NativeTransportIdle    string         `yaml:"native_transport_idle_timeout"`
	MaxHintWindow          string         `yaml:"max_hint_window"`
	CommitlogTotalSpace    string         `yaml:"commitlog_total_space"`
	CommitlogSegmentSize   string         `yaml:"commitlog_segment_size"`
	BatchlogReplayThrottle string         `yaml:"batchlog_replay_throttle"`
}

// memtableYAML is cassandra.yaml's memtable section as conf/cassandra_latest.yaml writes it:
// both implementations defined, the trie one the default. Cassandra keeps the entries in file
// order, so this is a struct, not a map (which would be written sorted).
type memtableYAML struct {
	Configurations struct {
		Skiplist memtableClass `yaml:"skiplist"`
		Trie     memtableClass `yaml:"trie"`
		Default  memtableClass `yaml:"default"`
	} `yaml:"configurations"`
}

type memtableClass struct {
	ClassName string `yaml:"class_name,omitempty"`
	Inherits  string `yaml:"inherits,omitempty"`
}

type seedProvider struct {
	ClassName  string              `yaml:"class_name"`
	Parameters []map[string]string `yaml:"parameters"`
}

// nodeDirs are one node's directories under the cluster's working directory.
type nodeDirs struct {
	Root     string // o.Dir/<host>
	Data     string // everything Cassandra writes (wiped when the cluster starts)
	Conf     string // cassandra.yaml, cassandra-rackdc.properties, logback.xml, hotspot_compiler
	LogFile  string // the JVM's stdout and stderr
	Yaml     string
	RackDC   string
	Logback  string
	HeapDump string
	Hotspot  string // the JIT hints of cassandra-all's jar (-XX:CompileCommandFile)
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
		Hotspot:  filepath.Join(conf, "hotspot_compiler"),
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

// dataDrives is the number of drives a node's data directory is on: one, the machine's disk,
// which the nodes share.
const dataDrives = 1

// nodeConfig renders cassandra.yaml for hosts[i].
func nodeConfig(clusterName string, hosts []peer.Host, i int, co Options, dirs nodeDirs) ([]byte, error) {
	h := hosts[i]
	y := nodeYAML{
		ClusterName: clusterName,
		// Cassandra's default (cassandra.yaml; getting-started/production.adoc, "Tokens").
		NumTokens:   co.NumTokens,
		Partitioner: "org.apache.cassandra.dht.Murmur3Partitioner",
		// Every cluster is fresh and empty: nothing to stream, so no bootstrap.
		AutoBootstrap:        false,
		DataFileDirectories:  []string{filepath.Join(dirs.Data, "data")},
		CommitlogDirectory:   filepath.Join(dirs.Data, "commitlog"),
		SavedCachesDirectory: filepath.Join(dirs.Data, "saved_caches"),
		HintsDirectory:       filepath.Join(dirs.Data, "hints"),
		CDCRawDirectory:      filepath.Join(dirs.Data, "cdc_raw"),
		// Cassandra's default (cassandra.yaml and cassandra_latest.yaml alike): a write is
		// acknowledged once it is in the commit log's memory-mapped segment and the memtable;
		// the segment is fsynced every 10 s. A write acknowledged by every replica can be lost
		// if every replica's machine (here: the one machine) crashes within those 10 s; a
		// killed JVM loses nothing, since the page cache survives it.
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
		// One data center per region (cassandra-rackdc.properties), as in the paper's setup;
		// production.adoc recommends GossipingPropertyFileSnitch.
		EndpointSnitch: "GossipingPropertyFileSnitch",
		// cassandra.yaml: concurrent_reads and concurrent_counter_writes "should be set to
		// (16 * number_of_drives)"; for concurrent_writes "(8 * number_of_cores) is a good rule
		// of thumb"; materialized view writes are bounded by the lesser of the two. The
		// defaults (32 each) are sized for a larger machine: here one drive and, per node, its
		// share of the cores (Options.AvailableProcessors). Fewer threads contend less for the
		// shared cores; none of them waits on the network (the coordinator does not hold
		// these threads while replicas answer).
		ConcurrentReads:        16 * dataDrives,
		ConcurrentWrites:       8 * co.AvailableProcessors,
		ConcurrentCounterWrite: 16 * dataDrives,
		ConcurrentMVWrites:     min(16*dataDrives, 8*co.AvailableProcessors),
		// conf/cassandra_latest.yaml, the configuration Cassandra 5.0 provides "for new users
		// ... and for users evaluating the technology": trie memtables, which
		// "significantly [reduce] garbage collection load", allocated off heap. A small heap on
		// starved cores suffers most from garbage collection.
		Memtable:               trieMemtables(),
		MemtableAllocationType: "offheap_objects",
		// Prepare drops the keyspace before each configuration; a snapshot per drop would
		// only cost time and disk (cassandra.yaml advises true to guard against mistakes).
		AutoSnapshot: false,
		// Cassandra's defaults, written out because the benchmark relies on them.
		HintedHandoffEnabled: true,
		DynamicSnitch:        true,
		// Cassandra 5.0's defaults, written out because the WAN's RTTs (up to ~250 ms) must
		// stay well inside them.
		ReadRequestTimeout:  "5000ms",
		RangeRequestTimeout: "10000ms",
		WriteRequestTimeout: "2000ms",
		NativeTransportIdle: "0ms",
		MaxHintWindow:       "3h",
		// Smaller than the default (8 GiB or a quarter of the volume): three nodes share one
		// disk, and a benchmark's data is megabytes.
		CommitlogTotalSpace:    "1024MiB",
		CommitlogSegmentSize:   "32MiB",
		BatchlogReplayThrottle: "1024KiB",
	}
	out, err := yaml.Marshal(y)
	if err != nil {
		return nil, fmt.Errorf("cassandra: render cassandra.yaml for %s: %w", h.Name, err)
	}
	return append([]byte("# Generated by meridian internal/tools/peer/cassandra; rewritten at every start.\n"), out...), nil
}

// trieMemtables is cassandra_latest.yaml's memtable section.
func trieMemtables() memtableYAML {
	var m memtableYAML
	m.Configurations.Skiplist.ClassName = "SkipListMemtable"
	m.Configurations.Trie.ClassName = "TrieMemtable"
	m.Configurations.Default.Inherits = "trie"
	return m
}

// defaultHeapMB is the heap cassandra-env.sh's calculate_heap_sizes gives a machine with
// memoryMB of RAM: max(min(1/2 RAM, 1024 MB), min(1/4 RAM, 8192 MB)). The lab passes each
// node's share of the machine (jvm-server.options: several instances on one machine each
// assume the whole machine otherwise). On 24 GiB shared by three nodes that is 2 GiB, the
// smallest heap operating/hardware.adoc advises ("no less than 2GB, and no more than 50% of
// your system RAM").
func defaultHeapMB(memoryMB int) int {
	half := min(memoryMB/2, 1024)
	quarter := min(memoryMB/4, 8192)
	return max(half, quarter)
}

// systemMemoryMB is the machine's RAM from /proc/meminfo, or 2048 MB where it cannot be read
// (cassandra-env.sh's assumption for an unknown system).
func systemMemoryMB() int {
	const fallbackMB = 2048
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return fallbackMB
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kB, err := strconv.Atoi(f[1])
			if err != nil || kB <= 0 {
				return fallbackMB
			}
			return kB / 1024
		}
	}
	return fallbackMB
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

// jvmServerOptions are the flags of Cassandra 5.0's conf/jvm-server.options that bin/cassandra
// passes to every server JVM, less the assertions (-ea): they only cost CPU, and leaving them
// out favours Cassandra.
var jvmServerOptions = []string{
	// "enable thread priorities, primarily so we can give periodic tasks a lower priority".
	"-XX:+UseThreadPriorities",
	"-XX:+HeapDumpOnOutOfMemoryError",
	"-Xss256k",
	// "Make sure all memory is faulted and zeroed on startup": a cost at start only, instead
	// of page faults while the benchmark runs.
	"-XX:+AlwaysPreTouch",
	"-XX:+UseTLAB", "-XX:+ResizeTLAB", "-XX:+UseNUMA",
	// No memory-mapped hsperfdata file, whose writeback can stall a safepoint
	// (http://www.evanjones.ca/jvm-mmap-pause.html, cited by the file).
	"-XX:+PerfDisableSharedMem",
	"-Djava.net.preferIPv4Stack=true",
}

// g1Options are conf/jvm17-server.options' garbage collector settings, unchanged. Cassandra
// 5.0 on Java 17 has only G1 (CMS, which operating/hardware.adoc suggests for heaps under
// 12 GB, was removed in Java 14). No young generation size: jvm-server.options says not to
// set one with G1, and cassandra-env.sh refuses -Xmn with G1. ParallelGCThreads and
// ConcGCThreads keep the JVM's defaults, which the file says equal the cores up to 8.
var g1Options = []string{
	"-XX:+UseG1GC",
	"-XX:+ParallelRefProcEnabled",
	"-XX:MaxTenuringThreshold=1",
	"-XX:G1HeapRegionSize=16m",
	// "Have the JVM do less remembered set work during STW, instead preferring concurrent
	// GC. Reduces p99.9 latency."
	"-XX:G1RSetUpdatingPauseTimePercent=5",
	// "200ms is the JVM default and lowest viable setting"; 300 ms is the file's choice.
	"-XX:MaxGCPauseMillis=300",
	"-XX:InitiatingHeapOccupancyPercent=70",
}

// nettyOptions are conf/jvm17-server.options' Netty settings: direct buffers through Unsafe,
// and the allocator defaults of Netty before 4.1.75.
var nettyOptions = []string{
	"-Dio.netty.tryReflectionSetAccessible=true",
	"-Dio.netty.allocator.useCacheForAllThreads=true",
	"-Dio.netty.allocator.maxOrder=11",
}

// hotspotCompilerEntry is the JIT hints file inside cassandra-all's jar; cassandra-env.sh
// passes conf/hotspot_compiler ("provides hints to the JIT compiler").
const hotspotCompilerEntry = "META-INF/hotspot_compiler"

// hotspotCompiler reads the JIT hints from the cassandra-all jar in libDir. A jar without them
// gives an empty file, which the JVM accepts.
func hotspotCompiler(libDir string) ([]byte, error) {
	jars, err := filepath.Glob(filepath.Join(libDir, "cassandra-all-*.jar"))
	if err != nil || len(jars) == 0 {
		return nil, fmt.Errorf("cassandra: no cassandra-all jar in %s", libDir)
	}
	zr, err := zip.OpenReader(jars[0])
	if err != nil {
		return nil, fmt.Errorf("cassandra: open %s: %w", jars[0], err)
	}
	defer zr.Close()
	f, err := zr.Open(hotspotCompilerEntry)
	if errors.Is(err, fs.ErrNotExist) {
		return []byte("# " + hotspotCompilerEntry + " is not in " + filepath.Base(jars[0]) + "\n"), nil
	}
	if err != nil {
		return nil, fmt.Errorf("cassandra: %s in %s: %w", hotspotCompilerEntry, jars[0], err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("cassandra: read %s in %s: %w", hotspotCompilerEntry, jars[0], err)
	}
	return data, nil
}

// jammAgent is bin/cassandra.in.sh's -javaagent for the jamm jar in libDir (Cassandra measures
// memtable and cache sizes with it); empty if the jar is not there.
func jammAgent(libDir string) string {
	jars, err := filepath.Glob(filepath.Join(libDir, "jamm-*.jar"))
	if err != nil || len(jars) == 0 {
		return ""
	}
	return "-javaagent:" + jars[0]
}

// javaArgs is the command line (after the java binary) that runs node i in the foreground:
// what bin/cassandra would run with Cassandra's conf/ files, plus the lab's start-up flags.
func javaArgs(co Options, i int, dirs nodeDirs) []string {
	// cassandra-env.sh sets -Xms and -Xmx to the same value.
	args := []string{fmt.Sprintf("-Xms%dm", co.HeapMB), fmt.Sprintf("-Xmx%dm", co.HeapMB)}
	args = append(args, jvmServerOptions...)
	args = append(args, g1Options...)
	args = append(args, nettyOptions...)
	args = append(args,
		// cassandra-env.sh kills the JVM on OutOfMemoryError ("it can result in some data
		// corruption"); this flag does the same.
		"-XX:+ExitOnOutOfMemoryError",
		"-XX:HeapDumpPath="+dirs.HeapDump,
		"-XX:CompileCommandFile="+dirs.Hotspot,
		// jvm-server.options: "In a multi-instance deployment, multiple Cassandra instances
		// will independently assume that all CPU processors are available to it. This
		// setting allows you to specify a smaller set of processors". It sizes the
		// internode event loops, the response stages and the memtable shards.
		"-Dcassandra.available_processors="+strconv.Itoa(co.AvailableProcessors),
		"-Djdk.attach.allowAttachSelf=true",
		"-Dcassandra.config=file://"+dirs.Yaml,
		"-Dcassandra-rackdc.properties=file://"+dirs.RackDC,
		"-Dlogback.configurationFile=file://"+dirs.Logback,
		"-Dcassandra.storagedir="+dirs.Data,
		"-Dcassandra.logdir="+dirs.Root,
		"-Dcassandra-foreground=yes",
		// Fast start of a fresh cluster: do not wait for gossip to settle or for a ring
		// delay meant to let a large cluster learn of a joining node.
		"-Dcassandra.skip_wait_for_gossip_to_settle=0",
		"-Dcassandra.ring_delay_ms="+strconv.Itoa(co.RingDelayMs),
		// No auth: no superuser to set up (the setup is delayed by default).
		"-Dcassandra.superuser_setup_delay_ms=0",
	)
	if agent := jammAgent(co.LibDir); agent != "" {
		args = append(args, agent)
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
