package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"meridian/internal/topology"
)

const examplesDir = "../../examples"

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d example configurations, want at least 2", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate after Load: %v", err)
			}
		})
	}
}

func TestLocal3(t *testing.T) {
	c, err := Load(filepath.Join(examplesDir, "local-3.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "local-3" || c.TopologyRef != "gcp-meteorshower-3" || c.Topology.Name != "gcp-meteorshower-3" {
		t.Errorf("name %q, topology ref %q, topology %q", c.Name, c.TopologyRef, c.Topology.Name)
	}
	if got := c.Topology.RTT("europe", "asia"); got != 250*time.Millisecond {
		t.Errorf("europe-asia RTT = %v", got)
	}
	wantNodes := []Node{
		{ID: 1, Name: "n1", Region: "europe", Listen: "127.0.0.1:7101", PeerListen: "127.0.0.1:8101", Metrics: "127.0.0.1:9101"},
		{ID: 2, Name: "n2", Region: "us", Listen: "127.0.0.1:7102", PeerListen: "127.0.0.1:8102", Metrics: "127.0.0.1:9102"},
		{ID: 3, Name: "n3", Region: "asia", Listen: "127.0.0.1:7103", PeerListen: "127.0.0.1:8103", Metrics: "127.0.0.1:9103"},
	}
	if !reflect.DeepEqual(c.Nodes, wantNodes) {
		t.Errorf("Nodes = %+v\nwant %+v", c.Nodes, wantNodes)
	}
	wantKS := Keyspace{
		Name: "demo", Protocol: "quorum", Regions: []string{"europe", "us", "asia"},
		ReplicasPerRegion: 1, Partitions: 16,
		Options: map[string]string{"read_selector": "nearest", "large_read_bytes": "1.0MiB", "read_chunk_bytes": "256KiB", "read_window": "8", "hedge_after": "0s", "mayflower_split": "makespan", "scan_page_bytes": "4.0MiB", "scan_window_pages": "2", "read_level": "QUORUM", "write_level": "QUORUM", "speculative_retry": "0s", "split_bytes": "512MiB", "merge_bytes": "128MiB", "split_ops": "2500", "min_partitions": "0"},
	}
	if ks, ok := c.Keyspace("demo"); !ok || !reflect.DeepEqual(ks, wantKS) {
		t.Errorf("Keyspace(demo) = %+v, %v\nwant %+v", ks, ok, wantKS)
	}
	if c.Clock.MaxOffset != 2*time.Millisecond {
		t.Errorf("MaxOffset = %v", c.Clock.MaxOffset)
	}
	if c.AntiEntropy.Interval != 2*time.Second {
		t.Errorf("anti-entropy interval = %v, want 2s", c.AntiEntropy.Interval)
	}
	if c.Limits != DefaultLimits() {
		t.Errorf("Limits = %+v, want the defaults %+v", c.Limits, DefaultLimits())
	}
	if n, ok := c.Node("n2"); !ok || n.Region != "us" {
		t.Errorf("Node(n2) = %+v, %v", n, ok)
	}
	if n, ok := c.NodeByID(3); !ok || n.Name != "n3" {
		t.Errorf("NodeByID(3) = %+v, %v", n, ok)
	}
	if _, ok := c.NodeByID(4); ok {
		t.Error("NodeByID(4) found a node")
	}
	if _, ok := c.Node("n9"); ok {
		t.Error("Node(n9) found a node")
	}
	if _, ok := c.Keyspace("nope"); ok {
		t.Error("Keyspace(nope) found a keyspace")
	}
	if got := c.NodesInRegion("asia"); len(got) != 1 || got[0].Name != "n3" {
		t.Errorf("NodesInRegion(asia) = %+v", got)
	}
	if got := c.NodesInRegion("mars"); len(got) != 0 {
		t.Errorf("NodesInRegion(mars) = %+v", got)
	}
}

func TestSingle(t *testing.T) {
	c, err := Load(filepath.Join(examplesDir, "single.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.TopologyRef != InlineTopology || !reflect.DeepEqual(c.Topology.Regions, []string{"local"}) {
		t.Errorf("topology %q %v", c.TopologyRef, c.Topology.Regions)
	}
	if got := c.Topology.RTT("local", "local"); got != 0 {
		t.Errorf("intra RTT = %v, want 0", got)
	}
	if len(c.Nodes) != 1 || c.Nodes[0].Listen != "127.0.0.1:7201" || c.Nodes[0].Metrics != "127.0.0.1:9201" {
		t.Errorf("Nodes = %+v", c.Nodes)
	}
	ks, ok := c.Keyspace("bench")
	if !ok || ks.Protocol != "quorum" || ks.ReplicasPerRegion != 1 || ks.Partitions != 16 || !reflect.DeepEqual(ks.Regions, []string{"local"}) {
		t.Errorf("Keyspace(bench) = %+v, %v", ks, ok)
	}
	if c.AntiEntropy.Interval != DefaultAntiEntropyInterval || c.Clock.MaxOffset != DefaultMaxOffset {
		t.Errorf("defaults not applied: %+v %+v", c.AntiEntropy, c.Clock)
	}
}

// base is a valid configuration; each invalid case below changes one thing in it.
const base = `cluster: test
topology: gcp-meteorshower-3
nodes:
  - name: n1
    region: europe
    listen: 127.0.0.1:7101
    peer_listen: 127.0.0.1:7201
    metrics: 127.0.0.1:9101
  - name: n2
    region: us
    listen: 127.0.0.1:7102
    peer_listen: 127.0.0.1:7202
  - name: n3
    region: asia
    listen: 127.0.0.1:7103
    peer_listen: 127.0.0.1:7203
keyspaces:
  - name: demo
    protocol: quorum
    options: {read_level: one}
`

const inlineTopo = `regions: [europe, us, asia]
rtt_ms: {europe: {us: 100, asia: 250}, us: {asia: 150}}
intra_region_rtt_ms: {europe: 0.5, us: 0.5, asia: 0.5}
`

func TestBaseIsValid(t *testing.T) {
	c, err := Parse([]byte(base), "")
	if err != nil {
		t.Fatal(err)
	}
	ks := c.Keyspaces[0]
	if ks.Options["read_level"] != "ONE" || ks.Options["write_level"] != "QUORUM" {
		t.Errorf("options not normalised: %v", ks.Options)
	}
	c2, err := Parse([]byte(strings.Replace(base, "topology: gcp-meteorshower-3\n", inlineTopo, 1)), "")
	if err != nil {
		t.Fatal(err)
	}
	if c2.TopologyRef != "inline" || c2.Topology.RTT("asia", "europe") != 250*time.Millisecond {
		t.Errorf("inline topology: %q %v", c2.TopologyRef, c2.Topology.RTT("asia", "europe"))
	}
}

func TestInvalid(t *testing.T) {
	inline := func(rtt, intra string) string {
		return strings.Replace(base, "topology: gcp-meteorshower-3\n",
			"regions: [europe, us, asia]\nrtt_ms: "+rtt+"\nintra_region_rtt_ms: "+intra+"\n", 1)
	}
	const intra3 = "{europe: 0.5, us: 0.5, asia: 0.5}"
	cases := []struct {
		name string
		old  string // replaced by new in base; "" appends new to base
		new  string
		full string // the whole file, instead of old/new
		path string // the Error.Path wanted
		msg  string // a substring of the message wanted
	}{
		// Unknown fields at every level.
		{name: "unknown top-level field", new: "colour: blue\n", path: "colour", msg: "unknown field"},
		{name: "unknown node field", old: "    region: us\n", new: "    region: us\n    zone: b\n", path: "nodes[1].zone", msg: "unknown field"},
		{name: "unknown keyspace field", old: "    protocol: quorum\n", new: "    protocol: quorum\n    replication: 3\n", path: "keyspaces[0].replication", msg: "unknown field"},
		{name: "unknown clock field", new: "clock: {max_offset: 2ms, drift: 1}\n", path: "clock.drift", msg: "unknown field"},
		{name: "unknown limits field", new: "limits: {max_batch: 5}\n", path: "limits.max_batch", msg: "unknown field"},
		{name: "unknown anti_entropy field", new: "anti_entropy: {period: 1s}\n", path: "anti_entropy.period", msg: "unknown field"},
		// BwMan.
		{name: "network node bandwidth", new: "network: {node_bandwidth: fast}\n", path: "network.node_bandwidth", msg: "not a positive byte rate"},
		{name: "network wan bandwidth", new: "network: {wan_bandwidth: 0B}\n", path: "network.wan_bandwidth", msg: "not a positive byte rate"},
		{name: "network report interval", new: "network: {report_interval: 2h}\n", path: "network.report_interval", msg: "between 50ms and 1m"},
		{name: "bwman mode", new: "bwman: {mode: fast}\n", path: "bwman.mode", msg: "not off, static or auto"},
		{name: "bwman auto without link", new: "bwman: {mode: auto}\n", path: "bwman.link_bandwidth", msg: "auto mode needs"},
		{name: "bwman static without cap", new: "bwman: {mode: static}\n", path: "bwman.static_rate", msg: "static mode needs"},
		{name: "bwman bad rate", new: "bwman: {mode: static, static_rate: lots}\n", path: "bwman.static_rate", msg: "not a positive byte rate"},
		{name: "bwman policy", new: "bwman: {mode: auto, link_bandwidth: 125MB, policy: everyone-first}\n", path: "bwman.policy", msg: "not recovery-first or user-first"},
		{name: "bwman chunk", new: "bwman: {chunk_size: 8MiB}\n", path: "bwman.chunk_size", msg: "from 4KiB to 1MiB"},
		{name: "bwman slo", new: "bwman: {mode: auto, link_bandwidth: 125MB, slo_p99: 2h}\n", path: "bwman.slo_p99", msg: "between 1ms and 1m"},
		// YAML shape.
		{name: "duplicate key", old: "    region: us\n", new: "    region: us\n    region: asia\n", path: "nodes[1].region", msg: "duplicate key"},
		{name: "wrong kind", old: "cluster: test", new: "cluster: [a, b]", path: "cluster", msg: "expected a string"},
		{name: "nodes not a list", full: "cluster: t\ntopology: equidistant\nnodes: {n1: x}\n", path: "nodes", msg: "expected a list"},
		{name: "empty document", full: "# nothing\n", path: "", msg: "empty document"},
		{name: "two documents", new: "---\ncluster: other\n", path: "", msg: "more than one YAML document"},
		{name: "yaml syntax", full: "cluster: [\n", path: "", msg: "line"},
		// Cluster.
		{name: "missing cluster", old: "cluster: test\n", new: "", path: "cluster", msg: "required"},
		{name: "bad cluster name", old: "cluster: test", new: "cluster: Test_1", path: "cluster", msg: "not a valid cluster name"},
		// Topology.
		{name: "unknown topology", old: "gcp-meteorshower-3", new: "gcp-x", path: "topology", msg: "neither a built-in topology (ec2-7, ec2-globlease-4"},
		{name: "missing topology file", old: "gcp-meteorshower-3", new: "topologies/none.yaml", path: "topology", msg: "nor an existing topology file"},
		{name: "empty topology", old: "topology: gcp-meteorshower-3", new: `topology: ""`, path: "topology", msg: "must not be empty"},
		{name: "no topology", old: "topology: gcp-meteorshower-3\n", new: "", path: "topology", msg: "required"},
		{name: "both topology and regions", new: "regions: [europe, us, asia]\n", path: "regions", msg: "cannot be combined with topology"},
		{name: "both topology and rtt_ms", new: "rtt_ms: {europe: {us: 1}}\n", path: "rtt_ms", msg: "cannot be combined with topology"},
		{name: "inline rtt without regions", old: "topology: gcp-meteorshower-3\n", new: "rtt_ms: {europe: {us: 100}}\n", path: "rtt_ms", msg: "needs regions"},
		{name: "missing rtt pair", full: inline("{europe: {us: 100}, us: {asia: 150}}", intra3), path: "rtt_ms.europe.asia", msg: "missing"},
		{name: "conflicting rtt directions", full: inline("{europe: {us: 100, asia: 250}, us: {asia: 150, europe: 120}}", intra3), path: "rtt_ms.us.europe", msg: "conflicts with rtt_ms.europe.us"},
		{name: "negative rtt", full: inline("{europe: {us: -100, asia: 250}, us: {asia: 150}}", intra3), path: "rtt_ms.europe.us", msg: "between 0 and"},
		{name: "rtt unknown region", full: inline("{europe: {us: 100, asia: 250, mars: 1}, us: {asia: 150}}", intra3), path: "rtt_ms.europe.mars", msg: `unknown region "mars"`},
		{name: "rtt not a number", full: inline("{europe: {us: fast, asia: 250}, us: {asia: 150}}", intra3), path: "rtt_ms.europe.us", msg: "expected a number"},
		{name: "intra missing a region", full: inline("{europe: {us: 100, asia: 250}, us: {asia: 150}}", "{europe: 0.5, us: 0.5}"), path: "intra_region_rtt_ms.asia", msg: "missing"},
		{name: "inline duplicate region", full: strings.Replace(inline("{europe: {us: 100, asia: 250}, us: {asia: 150}}", intra3), "[europe, us, asia]", "[europe, us, asia, us]", 1), path: "regions[3]", msg: "duplicate region"},
		// Clock.
		{name: "garbage duration", new: "clock:\n  max_offset: fast\n", path: "clock.max_offset", msg: "invalid duration"},
		{name: "duration without unit", new: "anti_entropy: {interval: 10}\n", path: "anti_entropy.interval", msg: "invalid duration"},
		{name: "negative max_offset", new: "clock: {max_offset: -1ms}\n", path: "clock.max_offset", msg: "must be > 0"},
		{name: "zero max_offset", new: "clock: {max_offset: 0s}\n", path: "clock.max_offset", msg: "must be > 0"},
		{name: "max_offset too large", new: "clock: {max_offset: 2s}\n", path: "clock.max_offset", msg: "≤ 1s"},
		// Nodes.
		{name: "no nodes", full: "cluster: t\ntopology: equidistant\nnodes: []\n", path: "nodes", msg: "at least one node"},
		{name: "unknown node region", old: "    region: us\n", new: "    region: mars\n", path: "nodes[1].region", msg: `unknown region "mars" (topology gcp-meteorshower-3 has europe, us, asia)`},
		{name: "missing node region", old: "    region: us\n", new: "", path: "nodes[1].region", msg: "required"},
		{name: "missing node name", old: "  - name: n2\n    region: us\n", new: "  - region: us\n", path: "nodes[1].name", msg: "required"},
		{name: "bad node name", old: "name: n3", new: "name: N3", path: "nodes[2].name", msg: "not a valid node name"},
		{name: "duplicate node name", old: "name: n2", new: "name: n1", path: "nodes[1].name", msg: `duplicate node name "n1"`},
		{name: "duplicate listen", old: "listen: 127.0.0.1:7102", new: "listen: 127.0.0.1:7101", path: "nodes[1].listen", msg: "already used by nodes[0].listen"},
		{name: "metrics equals a listen address", old: "    listen: 127.0.0.1:7103\n", new: "    listen: 127.0.0.1:7103\n    metrics: 127.0.0.1:7101\n", path: "nodes[2].metrics", msg: "already used by nodes[0].listen"},
		{name: "duplicate metrics", old: "    listen: 127.0.0.1:7103\n", new: "    listen: 127.0.0.1:7103\n    metrics: 127.0.0.1:9101\n", path: "nodes[2].metrics", msg: "already used by nodes[0].metrics"},
		{name: "missing listen", old: "    listen: 127.0.0.1:7103\n", new: "", path: "nodes[2].listen", msg: "required"},
		{name: "missing peer_listen", old: "    peer_listen: 127.0.0.1:7203\n", new: "", path: "nodes[2].peer_listen", msg: "required"},
		{name: "peer_listen equals a listen address", old: "peer_listen: 127.0.0.1:7203", new: "peer_listen: 127.0.0.1:7101", path: "nodes[2].peer_listen", msg: "already used by nodes[0].listen"},
		{name: "peer_listen without host", old: "peer_listen: 127.0.0.1:7203", new: `peer_listen: ":7203"`, path: "nodes[2].peer_listen", msg: "host is missing"},
		{name: "negative future version margin", new: "clock: {future_version_margin: -1s}\n", path: "clock.future_version_margin", msg: "must be ≥ 0"},
		{name: "listen without port", old: "listen: 127.0.0.1:7103", new: "listen: 127.0.0.1", path: "nodes[2].listen", msg: "want host:port"},
		{name: "listen port out of range", old: "listen: 127.0.0.1:7103", new: "listen: 127.0.0.1:70000", path: "nodes[2].listen", msg: "port must be"},
		{name: "listen without host", old: "listen: 127.0.0.1:7103", new: `listen: ":7103"`, path: "nodes[2].listen", msg: "host is missing"},
		{name: "bad metrics", old: "metrics: 127.0.0.1:9101", new: "metrics: nine", path: "nodes[0].metrics", msg: "want host:port"},
		{name: "zero node id", old: "  - name: n1\n", new: "  - name: n1\n    id: 0\n", path: "nodes[0].id", msg: "≥ 1"},
		{name: "negative node id", old: "  - name: n1\n", new: "  - name: n1\n    id: -1\n", path: "nodes[0].id", msg: "non-negative integer"},
		{name: "duplicate node id", old: "  - name: n3\n", new: "  - name: n3\n    id: 1\n", path: "nodes[2].id", msg: "also used by nodes[0]"},
		// Keyspaces.
		{name: "missing keyspace name", old: "  - name: demo\n    protocol", new: "  - protocol", path: "keyspaces[0].name", msg: "required"},
		{name: "reserved keyspace name", old: "name: demo", new: "name: _meta", path: "keyspaces[0].name", msg: "reserved"},
		{name: "bad keyspace name", old: "name: demo", new: "name: 1demo", path: "keyspaces[0].name", msg: "not a valid keyspace name"},
		{name: "keyspace name with dash", old: "name: demo", new: "name: my-demo", path: "keyspaces[0].name", msg: "not a valid keyspace name"},
		{name: "duplicate keyspace", new: "  - {name: demo, protocol: quorum}\n", path: "keyspaces[1].name", msg: "duplicate keyspace name"},
		{name: "missing protocol", old: "    protocol: quorum\n", new: "", path: "keyspaces[0].protocol", msg: "required (known protocols: canopus, catenae, epaxos, globlease, meteorshower, quorum, raft)"},
		{name: "unknown protocol", old: "protocol: quorum", new: "protocol: paxos", path: "keyspaces[0].protocol", msg: `unknown protocol "paxos" (known protocols: canopus, catenae, epaxos, globlease, meteorshower, quorum, raft)`},
		{name: "zero partitions", old: "    protocol: quorum\n", new: "    protocol: quorum\n    partitions: 0\n", path: "keyspaces[0].partitions", msg: "between 1 and 4096"},
		{name: "too many partitions", old: "    protocol: quorum\n", new: "    protocol: quorum\n    partitions: 5000\n", path: "keyspaces[0].partitions", msg: "between 1 and 4096, got 5000"},
		{name: "fractional partitions", old: "    protocol: quorum\n", new: "    protocol: quorum\n    partitions: 1.5\n", path: "keyspaces[0].partitions", msg: "expected an integer"},
		{name: "quoted partitions", old: "    protocol: quorum\n", new: "    protocol: quorum\n    partitions: \"16\"\n", path: "keyspaces[0].partitions", msg: "expected an integer"},
		{name: "zero replicas", old: "    protocol: quorum\n", new: "    protocol: quorum\n    replicas_per_region: 0\n", path: "keyspaces[0].replicas_per_region", msg: "≥ 1"},
		{name: "more replicas than nodes", old: "    protocol: quorum\n", new: "    protocol: quorum\n    replicas_per_region: 2\n", path: "keyspaces[0].replicas_per_region", msg: "region europe has 1"},
		{name: "keyspace unknown region", old: "    protocol: quorum\n", new: "    protocol: quorum\n    regions: [europe, mars]\n", path: "keyspaces[0].regions[1]", msg: `unknown region "mars"`},
		{name: "keyspace duplicate region", old: "    protocol: quorum\n", new: "    protocol: quorum\n    regions: [us, us]\n", path: "keyspaces[0].regions[1]", msg: "duplicate region"},
		{name: "keyspace empty regions", old: "    protocol: quorum\n", new: "    protocol: quorum\n    regions: []\n", path: "keyspaces[0].regions", msg: "at least one region"},
		{name: "unknown option", old: "{read_level: one}", new: "{read_level: one, colour: red}", path: "keyspaces[0].options.colour", msg: "unknown option for protocol quorum (known: hedge_after, large_read_bytes, mayflower_split, merge_bytes, min_partitions, read_chunk_bytes, read_level, read_selector, read_window, scan_page_bytes, scan_window_pages, speculative_retry, split_bytes, split_ops, write_level)"},
		{name: "split below twice merge", old: "{read_level: one}", new: "{split_bytes: 100MiB, merge_bytes: 60MiB}", path: "keyspaces[0].options.split_bytes", msg: "split_bytes (104857600) must be at least twice merge_bytes (62914560)"},
		{name: "globlease split below twice merge", old: "    protocol: quorum\n    options: {read_level: one}", new: "    protocol: globlease\n    options: {split_bytes: 100MiB, merge_bytes: 60MiB}", path: "keyspaces[0].options.split_bytes", msg: "split_bytes (104857600) must be at least twice merge_bytes (62914560)"},
		{name: "bad size", old: "{read_level: one}", new: "{split_bytes: lots}", path: "keyspaces[0].options.split_bytes", msg: "invalid size \"lots\""},
		{name: "bad read selector", old: "{read_level: one}", new: "{read_selector: fastest}", path: "keyspaces[0].options.read_selector", msg: `"fastest" is not one of nearest, snitch, hedged, mayflower`},
		{name: "large read too large", old: "{read_level: one}", new: "{large_read_bytes: 1GiB}", path: "keyspaces[0].options.large_read_bytes", msg: "must be 0 or from 1B to 64MiB"},
		{name: "read chunk too large", old: "{read_level: one}", new: "{read_chunk_bytes: 8MiB}", path: "keyspaces[0].options.read_chunk_bytes", msg: "must be 0 or from 1B to 4.0MiB"},
		{name: "read window zero", old: "{read_level: one}", new: "{read_window: 0}", path: "keyspaces[0].options.read_window", msg: "between 1 and 64"},
		{name: "hedge after negative", old: "{read_level: one}", new: "{hedge_after: -1s}", path: "keyspaces[0].options.hedge_after", msg: "must be ≥ 0"},
		{name: "bad split rule", old: "{read_level: one}", new: "{mayflower_split: often}", path: "keyspaces[0].options.mayflower_split", msg: "not one of never, literal, makespan"},
		{name: "bad read level", old: "{read_level: one}", new: "{read_level: most}", path: "keyspaces[0].options.read_level", msg: "valid: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM"},
		{name: "bad write level", old: "{read_level: one}", new: "{write_level: TWO}", path: "keyspaces[0].options.write_level", msg: `unknown consistency level "TWO"`},
		{name: "negative speculative retry", old: "{read_level: one}", new: "{speculative_retry: -5ms}", path: "keyspaces[0].options.speculative_retry", msg: "≥ 0"},
		{name: "garbage speculative retry", old: "{read_level: one}", new: "{speculative_retry: soon}", path: "keyspaces[0].options.speculative_retry", msg: "invalid duration"},
		{name: "option not a string", old: "{read_level: one}", new: "{read_level: [one]}", path: "keyspaces[0].options.read_level", msg: "expected a string"},
		// Limits and anti-entropy.
		{name: "zero max_key_bytes", new: "limits: {max_key_bytes: 0}\n", path: "limits.max_key_bytes", msg: "between 1 and 65536, got 0"},
		{name: "max_value_bytes too large", new: "limits: {max_value_bytes: 67108865}\n", path: "limits.max_value_bytes", msg: "between 1 and 67108864"},
		{name: "negative max_scan_limit", new: "limits: {max_scan_limit: -1}\n", path: "limits.max_scan_limit", msg: "between 1 and 1000000"},
		{name: "zero max_txn_keys", new: "limits: {max_txn_keys: 0}\n", path: "limits.max_txn_keys", msg: "between 1 and 65536, got 0"},
		{name: "max_txn_keys too large", new: "limits: {max_txn_keys: 65537}\n", path: "limits.max_txn_keys", msg: "between 1 and 65536, got 65537"},
		{name: "max_request_timeout too large", new: "limits: {max_request_timeout: 11m}\n", path: "limits.max_request_timeout", msg: "≤ 10m0s"},
		{name: "default above max timeout", new: "limits: {default_request_timeout: 30s, max_request_timeout: 10s}\n", path: "limits.default_request_timeout", msg: "≤ limits.max_request_timeout"},
		{name: "default above default max timeout", new: "limits: {default_request_timeout: 2m}\n", path: "limits.default_request_timeout", msg: "≤ limits.max_request_timeout (1m0s)"},
		{name: "negative default timeout", new: "limits: {default_request_timeout: -1s}\n", path: "limits.default_request_timeout", msg: "must be > 0"},
		{name: "anti_entropy too short", new: "anti_entropy: {interval: 1ms}\n", path: "anti_entropy.interval", msg: "≥ 10ms"},
		{name: "zero anti_entropy", new: "anti_entropy: {interval: 0s}\n", path: "anti_entropy.interval", msg: "≥ 10ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := c.full
			if src == "" {
				if c.old == "" {
					src = base + c.new
				} else {
					if strings.Count(base, c.old) != 1 {
						t.Fatalf("test bug: %q occurs %d times in base", c.old, strings.Count(base, c.old))
					}
					src = strings.Replace(base, c.old, c.new, 1)
				}
			}
			cl, err := Parse([]byte(src), t.TempDir())
			if err == nil {
				t.Fatalf("no error for\n%s\nparsed: %+v", src, cl)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %q is a %T, want *config.Error", err, err)
			}
			if e.Path != c.path {
				t.Errorf("Path = %q, want %q (error: %v)", e.Path, c.path, err)
			}
			if c.path != "" && !strings.Contains(err.Error(), c.path+": ") {
				t.Errorf("error %q does not name %q", err, c.path)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not contain %q", err, c.msg)
			}
			if !strings.HasPrefix(err.Error(), "config") {
				t.Errorf("error %q does not start with \"config\"", err)
			}
		})
	}
}

func lineOf(t *testing.T, src, substr string) int {
	t.Helper()
	i := strings.Index(src, substr)
	if i < 0 {
		t.Fatalf("%q not in source", substr)
	}
	return strings.Count(src[:i], "\n") + 1
}

func TestErrorLocation(t *testing.T) {
	dir := t.TempDir()
	src := strings.Replace(base, "    region: us\n", "    region: mars\n", 1)
	file := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(file)
	want := file + ":" + "10" + `: nodes[1].region: unknown region "mars" (topology gcp-meteorshower-3 has europe, us, asia)`
	if line := lineOf(t, src, "region: mars"); line != 10 {
		t.Fatalf("test bug: line %d", line)
	}
	if err == nil || err.Error() != "config "+want {
		t.Fatalf("error = %v\nwant   config %s", err, want)
	}

	// Semantic errors found after decoding point at the field's line too.
	src = strings.Replace(base, "    protocol: quorum\n", "    protocol: quorum\n    partitions: 0\n", 1)
	_, err = Parse([]byte(src), "")
	var e *Error
	if !errors.As(err, &e) || e.Line != lineOf(t, src, "partitions: 0") {
		t.Errorf("error %v: line %d, want %d", err, e.Line, lineOf(t, src, "partitions: 0"))
	}
	// Unknown fields have their line.
	src = base + "anti_entropy:\n  interval: 1s\n  jitter: 1s\n"
	_, err = Parse([]byte(src), "")
	if !errors.As(err, &e) || e.Line != lineOf(t, src, "jitter") || !strings.HasPrefix(err.Error(), "config: line ") {
		t.Errorf("error %v: line %d, want %d", err, e.Line, lineOf(t, src, "jitter"))
	}
}

func TestTopologyFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "topo"), 0o755); err != nil {
		t.Fatal(err)
	}
	topo := "name: lab-2\nregions: [west, east]\nrtt_ms: {west: {east: 80}}\n"
	if err := os.WriteFile(filepath.Join(dir, "topo", "lab.yaml"), []byte(topo), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `cluster: lab
topology: topo/lab.yaml
nodes:
  - {name: w1, region: west, listen: "127.0.0.1:7001", peer_listen: "127.0.0.1:8001"}
  - {name: e1, region: east, listen: "127.0.0.1:7002", peer_listen: "127.0.0.1:8002"}
`
	if err := os.WriteFile(filepath.Join(dir, "lab.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Load resolves relative to the config file, wherever the process runs.
	c, err := Load(filepath.Join(dir, "lab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.TopologyRef != "topo/lab.yaml" || c.Topology.Name != "lab-2" || c.Topology.RTT("east", "west") != 80*time.Millisecond {
		t.Errorf("ref %q, topology %q, RTT %v", c.TopologyRef, c.Topology.Name, c.Topology.RTT("east", "west"))
	}
	// An invalid topology file: the error names the config field and the file's field.
	bad := "name: lab-2\nregions: [west, east]\nrtt_ms: {west: {east: 80, north: 5}}\n"
	if err := os.WriteFile(filepath.Join(dir, "topo", "lab.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(filepath.Join(dir, "lab.yaml"))
	var e *Error
	if !errors.As(err, &e) || e.Path != "topology" || !strings.Contains(err.Error(), `rtt_ms.west.north: unknown region "north"`) {
		t.Errorf("error = %v", err)
	}
	var te *topology.Error
	if !errors.As(err, &te) || te.Path != "rtt_ms.west.north" {
		t.Errorf("error %v does not wrap a *topology.Error", err)
	}
}

func threeRegionCluster(t *testing.T) *Cluster {
	t.Helper()
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{
		Name:     "prog",
		Topology: topo,
		Nodes: []Node{
			{Name: "a1", Region: "europe", Listen: "127.0.0.1:7001", PeerListen: "127.0.0.1:8001"},
			{Name: "a2", Region: "europe", Listen: "127.0.0.1:7002", PeerListen: "127.0.0.1:8002"},
			{Name: "b1", Region: "us", Listen: "127.0.0.1:7003", PeerListen: "127.0.0.1:8003"},
			{Name: "b2", Region: "us", Listen: "127.0.0.1:7004", PeerListen: "127.0.0.1:8004"},
			{Name: "c1", Region: "asia", Listen: "127.0.0.1:7005", PeerListen: "127.0.0.1:8005"},
		},
		Keyspaces: []Keyspace{{Name: "kv", Protocol: ProtocolQuorum, Regions: []string{"europe", "us"}, ReplicasPerRegion: 2}},
	}
}

func TestValidateProgrammatic(t *testing.T) {
	c := threeRegionCluster(t)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes {
		if n.ID != uint32(i+1) {
			t.Errorf("node %s: ID %d, want %d", n.Name, n.ID, i+1)
		}
	}
	if c.Clock.MaxOffset != DefaultMaxOffset || c.Limits != DefaultLimits() || c.AntiEntropy.Interval != DefaultAntiEntropyInterval {
		t.Errorf("defaults not applied: %+v %+v %+v", c.Clock, c.Limits, c.AntiEntropy)
	}
	if ks := c.Keyspaces[0]; ks.Partitions != DefaultPartitions || ks.Options["read_level"] != "QUORUM" {
		t.Errorf("keyspace defaults not applied: %+v", ks)
	}
	// Idempotent.
	before := *c
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, *c) {
		t.Error("a second Validate changed the configuration")
	}
	// Errors on programmatic configurations name the field too.
	c.Keyspaces[0].Regions = []string{"europe", "asia"}
	err := c.Validate()
	if err == nil || err.Error() != "config: keyspaces[0].replicas_per_region: 2 replicas per region need at least 2 nodes in every region of the keyspace, but region asia has 1" {
		t.Errorf("error = %v", err)
	}
	c = threeRegionCluster(t)
	c.Topology = nil
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "topology: required") {
		t.Errorf("nil topology: %v", err)
	}
	c = threeRegionCluster(t)
	c.Clock.MaxOffset = -time.Millisecond
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "clock.max_offset: must be > 0") {
		t.Errorf("negative offset: %v", err)
	}
}

func TestValidateKeyspace(t *testing.T) {
	c := threeRegionCluster(t)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ks := Keyspace{Name: "runtime", Protocol: "quorum", Options: map[string]string{"write_level": "local_quorum", "speculative_retry": "1500us"}}
	if err := ValidateKeyspace(&ks, c); err != nil {
		t.Fatal(err)
	}
	want := Keyspace{
		Name: "runtime", Protocol: "quorum", Regions: []string{"europe", "us", "asia"}, ReplicasPerRegion: 1, Partitions: 16,
		Options: map[string]string{"read_selector": "nearest", "large_read_bytes": "1.0MiB", "read_chunk_bytes": "256KiB", "read_window": "8", "hedge_after": "0s", "mayflower_split": "makespan", "scan_page_bytes": "4.0MiB", "scan_window_pages": "2", "read_level": "QUORUM", "write_level": "LOCAL_QUORUM", "speculative_retry": "1.5ms", "split_bytes": "512MiB", "merge_bytes": "128MiB", "split_ops": "2500", "min_partitions": "0"},
	}
	if !reflect.DeepEqual(ks, want) {
		t.Errorf("got %+v\nwant %+v", ks, want)
	}
	qo, err := QuorumOptionsOf(ks.Options)
	if err != nil || qo != (QuorumOptions{ReadLevel: LevelQuorum, WriteLevel: LevelLocalQuorum, SpeculativeRetry: 1500 * time.Microsecond,
		LargeReads: LargeReadOptions{Selector: "nearest", ThresholdBytes: 1 << 20, ChunkBytes: 256 << 10, Window: 8, Split: "makespan", ScanPageBytes: 4 << 20, ScanWindow: 2}}) {
		t.Errorf("QuorumOptionsOf = %+v, %v", qo, err)
	}
	bad := Keyspace{Name: "runtime", Protocol: "quorum", Partitions: -1}
	err = ValidateKeyspace(&bad, c)
	if err == nil || err.Error() != `keyspace "runtime": partitions: must be between 1 and 4096, got -1` {
		t.Errorf("error = %v", err)
	}
	sys := Keyspace{Name: "_system", Protocol: "quorum"}
	if err := ValidateKeyspace(&sys, c); err == nil || !strings.Contains(err.Error(), "name: ") || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("reserved name: %v", err)
	}
	if err := ValidateKeyspace(&Keyspace{Name: "x", Protocol: "quorum"}, &Cluster{}); err == nil {
		t.Error("no error for a cluster without topology")
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]Level{"one": LevelOne, "QUORUM": LevelQuorum, "All": LevelAll, "local_one": LevelLocalOne, " LOCAL_QUORUM ": LevelLocalQuorum} {
		got, err := ParseLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "TWO", "local-quorum", "EACH_QUORUM"} {
		_, err := ParseLevel(in)
		if err == nil || !strings.Contains(err.Error(), "ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM") {
			t.Errorf("ParseLevel(%q): error %v, want one listing the levels", in, err)
		}
	}
	if !LevelLocalOne.IsLocal() || LevelQuorum.IsLocal() {
		t.Error("IsLocal")
	}
	if len(Levels()) != 5 {
		t.Error("Levels")
	}
}

func TestProtocolTable(t *testing.T) {
	if got := Protocols(); !reflect.DeepEqual(got, []string{"canopus", "catenae", "epaxos", "globlease", "meteorshower", "quorum", "raft"}) {
		t.Errorf("Protocols() = %v", got)
	}
	for _, name := range Protocols() {
		p, ok := Protocol(name)
		if !ok {
			t.Fatalf("Protocol(%q) missing", name)
		}
		for _, o := range p.Options {
			// Every default is valid and canonical.
			v, err := o.Normalize(o.Default)
			if err != nil || v != o.Default {
				t.Errorf("%s.%s: default %q normalises to %q, %v", name, o.Name, o.Default, v, err)
			}
		}
	}
}

func TestGlobLeaseOptions(t *testing.T) {
	regions := []string{"europe", "us", "asia"}
	o, err := GlobLeaseOptionsOf(map[string]string{"home_ranges": "k5=us,m=asia", "lease_ranges": "z=5s"}, regions)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"a": "europe", "k5": "us", "k9": "us", "m": "asia", "zz": "asia"} {
		if got := o.HomeRegionOf([]byte(key)); got != want {
			t.Errorf("HomeRegionOf(%q) = %q, want %q", key, got, want)
		}
	}
	if o.LeaseOf([]byte("a")) != time.Minute || o.LeaseOf([]byte("zz")) != 5*time.Second {
		t.Errorf("LeaseOf: %v %v", o.LeaseOf([]byte("a")), o.LeaseOf([]byte("zz")))
	}
	bad := []map[string]string{
		{"home_region": "mars"},
		{"home_ranges": "a=mars"},
		{"home_ranges": "b=us,a=asia"},
		{"lease_ranges": "a=1ns"},
		{"master_lease": "2s", "election_timeout": "2s"},
		{"migrate_share": "0.5"},
		{"write_mode": "lazy"},
		{"hot_key_replicas": "0"},
	}
	for _, opts := range bad {
		if _, err := GlobLeaseOptionsOf(opts, regions); err == nil {
			t.Errorf("%v: accepted", opts)
		}
	}
}

// A catenae keyspace is one partition with one replica per region, and says so.
func TestCatenaeLayout(t *testing.T) {
	base := func() *Cluster { return threeRegionCluster(t) }
	c := base()
	c.Keyspaces = []Keyspace{{Name: "bank", Protocol: ProtocolCatenae}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ks := c.Keyspaces[0]
	if ks.Partitions != 1 || ks.ReplicasPerRegion != 1 || TxnModeOf(ks.Options) != TxnCatenae || ks.Options["epoch_length"] != "10ms" {
		t.Fatalf("defaults: %+v", ks)
	}
	o, err := CatenaeOptionsOf(ks.Options)
	if err != nil || o.EpochLength != 10*time.Millisecond || o.Redundancy != 3 || o.ReadRetain != 5*time.Second {
		t.Fatalf("typed options %+v, %v", o, err)
	}
	for _, tc := range []struct {
		ks   Keyspace
		want string
	}{
		{Keyspace{Name: "bank", Protocol: ProtocolCatenae, Partitions: 4}, "one partition, got 4"},
		{Keyspace{Name: "bank", Protocol: ProtocolCatenae, ReplicasPerRegion: 2}, "one replica per region"},
		{Keyspace{Name: "bank", Protocol: ProtocolCatenae, Options: map[string]string{"txn_mode": "sdur"}}, "txn_mode is catenae"},
		{Keyspace{Name: "bank", Protocol: ProtocolCatenae, Options: map[string]string{"epoch_length": "0s"}}, "epoch_length"},
		{Keyspace{Name: "bank", Protocol: ProtocolRaft, Options: map[string]string{"txn_mode": "catenae"}}, "txn_mode"},
	} {
		c := base()
		c.Keyspaces = []Keyspace{tc.ks}
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.ks, err, tc.want)
		}
	}
}

// BwMan's byte rates are parsed and its defaults filled.
func TestBwManDefaults(t *testing.T) {
	c := threeRegionCluster(t)
	c.BwMan = BwMan{Mode: "auto", LinkBandwidth: "125MB"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b := c.BwMan
	if b.LinkBytesPerSec != 125e6 || b.SLOP99 != 100*time.Millisecond || b.Policy != "user-first" || b.Period != time.Second {
		t.Fatalf("%+v", b)
	}
	// 125 MB/s × 100 ms / 10 is above the 512 KiB ceiling.
	if b.ChunkBytes != 512<<10 {
		t.Fatalf("chunk %d", b.ChunkBytes)
	}
	// 8 MB/s × 50 ms / 10 = 40 kB: a chunk holds the link 5 ms.
	c = threeRegionCluster(t)
	c.BwMan = BwMan{Mode: "off", LinkBandwidth: "8MB", SLOP99: 50 * time.Millisecond}
	if err := c.Validate(); err != nil || c.BwMan.ChunkBytes != 40_000 {
		t.Fatalf("chunk %d, %v", c.BwMan.ChunkBytes, err)
	}
	c = threeRegionCluster(t)
	c.BwMan = BwMan{ChunkSize: "64KiB"}
	if err := c.Validate(); err != nil || c.BwMan.ChunkBytes != 64<<10 {
		t.Fatalf("chunk %d, %v", c.BwMan.ChunkBytes, err)
	}
	c = threeRegionCluster(t)
	if err := c.Validate(); err != nil || c.BwMan.Mode != "off" || c.BwMan.ChunkBytes != 512<<10 {
		t.Fatalf("default mode %q chunk %d, %v", c.BwMan.Mode, c.BwMan.ChunkBytes, err)
	}
}

func TestEPaxosOptions(t *testing.T) {
	o, err := EPaxosOptionsOf(nil)
	if err != nil || o.BatchInterval != 5*time.Millisecond || o.BatchMax != 1000 || o.FastPathTimeout != 0 || o.RecoveryTimeout != 0 || o.MaxInstances != 100_000 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	o, err = EPaxosOptionsOf(map[string]string{"recovery_timeout": "2s", "batch_max": "10", "overload_after": "3s"})
	if err != nil || o.RecoveryTimeout != 2*time.Second || o.BatchMax != 10 || o.OverloadAfter != 3*time.Second {
		t.Fatalf("set: %+v, %v", o, err)
	}
	for _, bad := range []map[string]string{{"batch_max": "0"}, {"batch_interval": "10s"}, {"recovery_timeout": "1ms"}, {"max_instances": "5"}, {"quorum": "fast"}, {"overload_after": "10ms"}, {"overload_after": "1h"}, {"overload_after": "soon"}} {
		if _, err := EPaxosOptionsOf(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
