package cassandra

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"go.yaml.in/yaml/v3"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/topology"
)

func testHosts() []peer.Host {
	return []peer.Host{
		{Name: "cassandra-europe", Region: "europe", Addr: "127.0.0.2"},
		{Name: "cassandra-us", Region: "us", Addr: "127.0.0.3"},
		{Name: "cassandra-asia", Region: "asia", Addr: "127.0.0.4"},
	}
}

func TestNodeConfig(t *testing.T) {
	hosts := testHosts()
	hosts = append(hosts, peer.Host{Name: "cassandra-us-2", Region: "us", Addr: "127.0.0.5"})
	co := Options{LibDir: "/lib", AvailableProcessors: 2}.withDefaults(len(hosts))
	dirs := dirsOf("/w", hosts[1].Name)
	data, err := nodeConfig("lab", hosts, 1, co, dirs)
	if err != nil {
		t.Fatal(err)
	}
	var y map[string]any
	if err := yaml.Unmarshal(data, &y); err != nil {
		t.Fatalf("generated yaml does not parse: %v\n%s", err, data)
	}
	want := map[string]any{
		"cluster_name":           "lab",
		"listen_address":         "127.0.0.3",
		"rpc_address":            "127.0.0.3",
		"storage_port":           7000,
		"native_transport_port":  9042,
		"endpoint_snitch":        "GossipingPropertyFileSnitch",
		"auto_bootstrap":         false,
		"num_tokens":             16,
		"auto_snapshot":          false,
		"start_native_transport": true,
		"commitlog_directory":    "/w/cassandra-us/data/commitlog",
		"partitioner":            "org.apache.cassandra.dht.Murmur3Partitioner",
	}
	for k, v := range want {
		if y[k] != v {
			t.Errorf("%s = %#v, want %#v", k, y[k], v)
		}
	}
	dirsList, _ := y["data_file_directories"].([]any)
	if len(dirsList) != 1 || dirsList[0] != "/w/cassandra-us/data/data" {
		t.Errorf("data_file_directories = %#v", y["data_file_directories"])
	}
	// The first host of each region is a seed; the second U.S. node is not.
	sp := y["seed_provider"].([]any)[0].(map[string]any)
	seeds := sp["parameters"].([]any)[0].(map[string]any)["seeds"]
	if sp["class_name"] != "org.apache.cassandra.locator.SimpleSeedProvider" || seeds != "127.0.0.2,127.0.0.3,127.0.0.4" {
		t.Errorf("seed provider = %#v", sp)
	}
	// cassandra.yaml's rules: 16 per drive for reads, 8 per core for writes.
	for k, v := range map[string]any{"concurrent_reads": 16, "concurrent_counter_writes": 16, "concurrent_writes": 16,
		"concurrent_materialized_view_writes": 16, "memtable_allocation_type": "offheap_objects",
		"commitlog_sync": "periodic", "commitlog_sync_period": "10000ms"} {
		if y[k] != v {
			t.Errorf("%s = %#v, want %#v", k, y[k], v)
		}
	}
	// Caches keep Cassandra's defaults.
	for _, k := range []string{"key_cache_size", "row_cache_size", "counter_cache_size", "concurrent_compactors"} {
		if v, ok := y[k]; ok {
			t.Errorf("%s = %v, want Cassandra's default", k, v)
		}
	}
	// The trie memtable is the default, defined after the one it inherits (Cassandra keeps
	// the file's order).
	mt := string(data[strings.Index(string(data), "memtable:"):])
	if s, tr, d := strings.Index(mt, "skiplist:"), strings.Index(mt, "trie:"), strings.Index(mt, "default:"); s < 0 || tr < s || d < tr ||
		!strings.Contains(mt, "inherits: trie") || !strings.Contains(mt, "class_name: TrieMemtable") {
		t.Errorf("memtable section:\n%s", mt)
	}
}

func TestDefaultHeap(t *testing.T) {
	// cassandra-env.sh: max(min(1/2 RAM, 1024 MB), min(1/4 RAM, 8192 MB)).
	for memMB, want := range map[int]int{1024: 512, 2048: 1024, 4096: 1024, 8035: 2008, 8192: 2048, 65536: 8192} {
		if got := defaultHeapMB(memMB); got != want {
			t.Errorf("defaultHeapMB(%d) = %d, want %d", memMB, got, want)
		}
	}
	if m := systemMemoryMB(); m <= 0 {
		t.Errorf("systemMemoryMB() = %d", m)
	}
}

func TestRackDCPerRegion(t *testing.T) {
	for _, h := range testHosts() {
		got := string(rackDCProperties(h))
		if !strings.Contains(got, "dc="+h.Region+"\n") || !strings.Contains(got, "rack=r1\n") {
			t.Errorf("%s: %q", h.Name, got)
		}
	}
}

func TestJavaArgs(t *testing.T) {
	co := Options{LibDir: "/jars", HeapMB: 512, JMXBasePort: 7199, AvailableProcessors: 1}.withDefaults(3)
	args := javaArgs(co, 2, dirsOf("/w", "n"))
	for _, want := range []string{
		"-Xms512m", "-Xmx512m", "-Dcassandra.config=file:///w/n/conf/cassandra.yaml",
		"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=300", "-XX:G1HeapRegionSize=16m", "-XX:+AlwaysPreTouch",
		"-XX:+PerfDisableSharedMem", "-Dcassandra.available_processors=1",
		"-XX:CompileCommandFile=/w/n/conf/hotspot_compiler",
		"-Dcassandra-rackdc.properties=file:///w/n/conf/cassandra-rackdc.properties",
		"-Dcassandra.skip_wait_for_gossip_to_settle=0", "-Dcassandra.ring_delay_ms=1000",
		"-Dcassandra.jmx.local.port=7201", "java.base/sun.nio.ch=ALL-UNNAMED",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("missing %q in %v", want, args)
		}
	}
	if n := len(args); args[n-3] != "-cp" || args[n-2] != "/jars/*" || args[n-1] != "org.apache.cassandra.service.CassandraDaemon" {
		t.Errorf("args end with %v", args[n-3:])
	}
	co.JMXBasePort = 0
	for _, a := range javaArgs(co, 0, dirsOf("/w", "n")) {
		if strings.Contains(a, "cassandra.jmx") {
			t.Errorf("JMX off, but %q", a)
		}
	}
}

func TestParseLevel(t *testing.T) {
	good := map[string]gocql.Consistency{
		"ONE": gocql.One, "two": gocql.Two, "THREE": gocql.Three, "QUORUM": gocql.Quorum, "ALL": gocql.All,
		"LOCAL_ONE": gocql.LocalOne, " local_quorum ": gocql.LocalQuorum, "EACH_QUORUM": gocql.EachQuorum,
	}
	for s, want := range good {
		got, err := parseLevel(s)
		if err != nil || got != want {
			t.Errorf("parseLevel(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "ANY", "SERIAL", "LOCAL_SERIAL", "MAJORITY", "QUORUM2"} {
		if _, err := parseLevel(bad); err == nil {
			t.Errorf("parseLevel(%q) accepted", bad)
		}
	}
}

func TestParseConfig(t *testing.T) {
	cfgs, err := bench.ParseConfigs("cassandra:QUORUM/QUORUM,cassandra:ALL/ONE,cassandra:local_one/each_quorum,cassandra")
	if err != nil {
		t.Fatal(err)
	}
	wants := []levelPair{{gocql.Quorum, gocql.Quorum}, {gocql.All, gocql.One}, {gocql.LocalOne, gocql.EachQuorum}, {gocql.Quorum, gocql.Quorum}}
	for i, cfg := range cfgs {
		lp, err := parseConfig(cfg, 3)
		if err != nil || lp != wants[i] {
			t.Errorf("%s: %+v, %v; want %+v", cfg.Label(), lp, err, wants[i])
		}
	}
	bad := []bench.Config{
		{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"},
		{Protocol: "cassandra", ReadLevel: "MAJORITY", WriteLevel: "QUORUM"},
		{Protocol: "cassandra", ReadLevel: "QUORUM", WriteLevel: "ANY"},
		{Protocol: "cassandra", ReadLevel: "QUORUM", WriteLevel: "QUORUM", Options: map[string]string{"theta": "upper"}},
	}
	for _, cfg := range bad {
		if _, err := parseConfig(cfg, 3); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	// THREE needs three data centers.
	if _, err := parseConfig(bench.Config{Protocol: "cassandra", ReadLevel: "THREE", WriteLevel: "ONE"}, 2); err == nil {
		t.Error("THREE accepted with two data centers")
	}
}

func TestCreateKeyspaceCQL(t *testing.T) {
	got := createKeyspaceCQL([]string{"europe", "us", "asia"})
	want := "CREATE KEYSPACE bench WITH replication = {'class': 'NetworkTopologyStrategy', 'europe': 1, 'us': 1, 'asia': 1}"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestLowerBound(t *testing.T) {
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		read, write string
		region      string
		readMs      float64
		writeMs     float64
	}{
		{"QUORUM", "QUORUM", "europe", 100, 100},
		{"ALL", "ONE", "europe", 250, 0},
		{"TWO", "THREE", "asia", 150, 250},
		{"LOCAL_QUORUM", "EACH_QUORUM", "us", 0, 150},
		{"LOCAL_ONE", "ALL", "asia", 0, 250},
	}
	for _, c := range cases {
		cfg := bench.Config{Protocol: "cassandra", ReadLevel: c.read, WriteLevel: c.write}
		if got := bench.LowerBoundMs(topo, cfg, c.region, "read"); got != c.readMs {
			t.Errorf("%s/%s read from %s: %v ms, want %v", c.read, c.write, c.region, got, c.readMs)
		}
		if got := bench.LowerBoundMs(topo, cfg, c.region, "write"); got != c.writeMs {
			t.Errorf("%s/%s write from %s: %v ms, want %v", c.read, c.write, c.region, got, c.writeMs)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	co := Options{}.withDefaults(3)
	if co.HeapMB != defaultHeapMB(systemMemoryMB()/3) || co.AvailableProcessors != max(1, runtime.NumCPU()/3) ||
		co.Java != "java" || co.NumTokens != 16 || co.Version != DefaultVersion || co.StartTimeout <= 0 {
		t.Fatalf("defaults: %+v", co)
	}
	if err := co.validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Options{{HeapMB: 100}, {NumTokens: 1000}, {ConnsPerHost: -1}, {ClusterName: "a'b"}, {JMXBasePort: -5}, {AvailableProcessors: -1}} {
		if err := bad.withDefaults(3).validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	topo, _ := topology.Builtin("gcp-meteorshower-3")
	ctx := context.Background()
	dir := t.TempDir()
	cases := map[string]peer.Options{
		"no hosts":       {Dir: dir, Topology: topo},
		"unknown region": {Dir: dir, Topology: topo, Hosts: []peer.Host{{Name: "a", Region: "mars", Addr: "127.0.0.2"}}},
	}
	for name, o := range cases {
		if _, err := Start(ctx, o, Options{LibDir: dir}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A lib directory without Cassandra's jar is refused before anything starts.
	o := peer.Options{Dir: dir, Topology: topo, Hosts: testHosts()}
	_, err := Start(ctx, o, Options{LibDir: dir, Java: "/bin/true"})
	if err == nil || !strings.Contains(err.Error(), "cassandra-all") {
		t.Errorf("empty lib dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cassandra-europe")); err == nil {
		t.Error("node directories written before the options were checked")
	}
	_, err = Start(ctx, o, Options{LibDir: dir, Java: "no-such-java-binary"})
	if err == nil || !strings.Contains(err.Error(), "java") {
		t.Errorf("missing java: %v", err)
	}
}

func TestLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte("a\nb\nc\nd\n"), 0o644)
	if got := logTail(p, 2); got != "c\nd" {
		t.Errorf("%q", got)
	}
	if got := logTail(filepath.Join(t.TempDir(), "missing"), 2); !strings.Contains(got, "cannot read") {
		t.Errorf("%q", got)
	}
}

func TestFindFetchScript(t *testing.T) {
	p, err := findFetchScript()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != "fetch-cassandra.sh" {
		t.Errorf("%s", p)
	}
}
