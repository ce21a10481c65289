package server_test

import (
	"slices"
	"strings"
	"testing"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/tools/bench"
	"meridian/internal/topology"
)

// Issue 12, defect 6: create-keyspace returned once a majority had stored the catalog record,
// and a far region answered "unknown keyspace" for a while after. Here region c is 150 ms
// from a and b (one way), so a create through a is acknowledged by a and b long before c has
// the record: the call must return only once c can use the keyspace, and then every node
// serves it at once.
func TestCreateKeyspaceReturnsOnceUsableEverywhere(t *testing.T) {
	topo, err := topology.Parse([]byte("name: far-c\nregions: [a, b, c]\nrtt_ms: {a: {b: 2, c: 300}, b: {c: 300}}\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	c, err := bench.StartCluster(bench.ClusterOptions{Topology: topo, NodesPerRegion: 1,
		Keyspace: config.Keyspace{Name: "kv", Protocol: config.ProtocolQuorum}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cx := ctx(t)
	for _, name := range []string{"users", "orders", "events"} {
		res, err := c.Services[0].CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec(name)})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if len(res.NotInstalled) != 0 {
			t.Fatalf("create %s: not installed on %v with every node up", name, res.NotInstalled)
		}
		for i, svc := range c.Services {
			if _, err := svc.DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: name}); err != nil {
				t.Fatalf("node %d right after create %s returned: %v", i, name, err)
			}
			if _, err := svc.Put(cx, &meridianpb.PutRequest{Keyspace: name, Key: []byte("k"), Value: []byte("v"), Consistency: "ONE"}); err != nil {
				t.Fatalf("put on node %d right after create %s returned: %v", i, name, err)
			}
		}
	}
	l, err := c.Services[2].ListKeyspaces(cx, &meridianpb.ListKeyspacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ks := range l.Keyspaces {
		names = append(names, ks.Name)
	}
	if !slices.Equal(names, []string{"events", "kv", "orders", "users"}) {
		t.Errorf("keyspaces on the far node: %v", names)
	}
}

// With a node down, a create still succeeds (a majority stored it) and says which node does
// not have the keyspace yet and why; the node learns it when it is back.
func TestCreateKeyspaceNamesNodesWithoutIt(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	c.Nodes[2].Close()
	// Until the failure detector notices, the create waits for c-1 until its deadline; after,
	// it reports c-1 as down at once. Either way it names c-1. If c-1 led the metadata group,
	// the create first waits for a new leader: the liveness timeout (one election timeout,
	// 2 s by default) plus an election drawn from [2 s, 4 s), so the deadline leaves room
	// for up to 6 s of that.
	res, err := c.Services[0].CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("users"), TimeoutMs: 15000})
	if err != nil {
		t.Fatalf("create with one node of three down: %v", err)
	}
	if len(res.NotInstalled) != 1 || !strings.HasPrefix(res.NotInstalled[0], "c-1: ") {
		t.Fatalf("not_installed = %q, want c-1 with a reason", res.NotInstalled)
	}
	for i := range 2 {
		if _, err := c.Services[i].DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "users"}); err != nil {
			t.Fatalf("node %d after the create: %v", i, err)
		}
	}
}
