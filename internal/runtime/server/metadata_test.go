package server_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/tools/bench"
	"meridian/internal/topology"
)

// lanCluster is a 3-node cluster (one per region, 1 ms apart) with a quorum keyspace "kv"
// from its configuration.
func lanCluster(t *testing.T, nodesPerRegion int, ks config.Keyspace) *bench.Cluster {
	t.Helper()
	topo, err := topology.Parse([]byte("name: lan\nregions: [a, b, c]\nrtt_ms: {a: {b: 1, c: 1}, b: {c: 1}}\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	c, err := bench.StartCluster(bench.ClusterOptions{Topology: topo, NodesPerRegion: nodesPerRegion, Keyspace: ks, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Two conflicting changes of one keyspace race: both are based on the same version, and
// exactly one wins; the other gets a clear "changed concurrently" error naming both versions.
// Two creates of one name race the same way: one creates it, the other is told it exists.
func TestConflictingMetadataChanges(t *testing.T) {
	c := lanCluster(t, 1, config.Keyspace{Name: "kv", Protocol: config.ProtocolQuorum})
	cx := ctx(t)
	created, err := c.Services[0].CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("users")})
	if err != nil {
		t.Fatal(err)
	}
	base := created.Version
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		vers := make([]uint64, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := c.Services[i].AlterKeyspace(cx, &meridianpb.AlterKeyspaceRequest{Name: "users", ExpectVersion: base,
					SetOptions: map[string]string{"speculative_retry": fmt.Sprintf("%dms", 10*round+i+1)}})
				errs[i] = err
				if err == nil {
					vers[i] = r.Version
				}
			}()
		}
		wg.Wait()
		won, based := 0, base
		for i, err := range errs {
			switch {
			case err == nil:
				won++
				base = vers[i]
			case status.Code(err) == codes.Aborted && strings.Contains(err.Error(), "changed concurrently") &&
				strings.Contains(err.Error(), fmt.Sprintf("based on version %d", based)):
			default:
				t.Fatalf("round %d: change through node %d: %v", round, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d of 2 conflicting changes won (errors %v)", round, won, errs)
		}
		// Every node serves the winner's version.
		for i, svc := range c.Services {
			d, err := svc.DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "users", Consistency: "STALE"})
			if err != nil || d.PlacementVersion != base {
				t.Fatalf("round %d: node %d has version %d (err %v), want %d", round, i, d.GetPlacementVersion(), err, base)
			}
		}
	}

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Services[i].CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("orders")})
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case status.Code(err) == codes.AlreadyExists && strings.Contains(err.Error(), `keyspace "orders" already exists`):
		default:
			t.Fatalf("concurrent create: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of 3 concurrent creates won", won)
	}
}

// A dropped keyspace is gone everywhere with its data: a new keyspace of the same name
// starts empty. Requests made under an older placement than a node's are refused as stale;
// the placement version of every response says which placement served it.
func TestDropAndPlacementVersions(t *testing.T) {
	c := lanCluster(t, 1, config.Keyspace{Name: "kv", Protocol: config.ProtocolQuorum})
	cx := ctx(t)
	cr, err := c.Services[0].CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("tmp")})
	if err != nil {
		t.Fatal(err)
	}
	put, err := c.Services[1].Put(cx, &meridianpb.PutRequest{Keyspace: "tmp", Key: []byte("k"), Value: []byte("old"), Consistency: "ALL"})
	if err != nil || put.PlacementVersion != cr.Version {
		t.Fatalf("put: %v, placement version %d (want %d)", err, put.GetPlacementVersion(), cr.Version)
	}
	alt, err := c.Services[2].AlterKeyspace(cx, &meridianpb.AlterKeyspaceRequest{Name: "tmp", SetOptions: map[string]string{"read_level": "QUORUM"}})
	if err != nil || alt.Version <= cr.Version {
		t.Fatalf("alter: %v (version %d)", err, alt.GetVersion())
	}
	// Made under the version before the alter: refused, saying what to do.
	_, err = c.Services[0].Get(cx, &meridianpb.GetRequest{Keyspace: "tmp", Key: []byte("k"), PlacementVersion: cr.Version})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "refresh it") {
		t.Fatalf("get under an older placement: %v", err)
	}
	// Under a version no node has yet: refused after a short wait.
	_, err = c.Services[0].Get(cx, &meridianpb.GetRequest{Keyspace: "tmp", Key: []byte("k"), PlacementVersion: alt.Version + 1000})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not caught up") {
		t.Fatalf("get under a future placement: %v", err)
	}
	if _, err := c.Services[0].DropKeyspace(cx, &meridianpb.DropKeyspaceRequest{Name: "tmp", ExpectVersion: cr.Version}); status.Code(err) != codes.Aborted {
		t.Fatalf("drop based on an old version: %v, want Aborted", err)
	}
	if _, err := c.Services[0].DropKeyspace(cx, &meridianpb.DropKeyspaceRequest{Name: "tmp", ExpectVersion: alt.Version}); err != nil {
		t.Fatal(err)
	}
	for i, svc := range c.Services {
		if _, err := svc.Get(cx, &meridianpb.GetRequest{Keyspace: "tmp", Key: []byte("k")}); status.Code(err) != codes.NotFound {
			t.Fatalf("node %d after the drop: %v, want NotFound", i, err)
		}
	}
	if _, err := c.Services[1].CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("tmp")}); err != nil {
		t.Fatal(err)
	}
	for i, svc := range c.Services {
		g, err := svc.Get(cx, &meridianpb.GetRequest{Keyspace: "tmp", Key: []byte("k"), Consistency: "ONE"})
		if err != nil || g.Found {
			t.Fatalf("node %d, the re-created keyspace: %+v %v; want the old data gone", i, g, err)
		}
	}
}

// Changing a raft keyspace's replication moves its groups: with two nodes per region and one
// replica per region, raising replicas_per_region to 2 adds the other node of each region to
// every group (as a learner caught up by snapshot, then a voter), and the data written
// before is readable on the new replicas.
func TestAlterRaftReplication(t *testing.T) {
	c := lanCluster(t, 2, config.Keyspace{Name: "kv", Protocol: config.ProtocolRaft, Partitions: 4,
		Options: map[string]string{"election_timeout": "500ms", "heartbeat_interval": "100ms"}})
	cx := ctx(t)
	for i := range 40 {
		if _, err := c.Services[0].Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte{byte(i * 6)}, Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	alt, err := c.Services[3].AlterKeyspace(cx, &meridianpb.AlterKeyspaceRequest{Name: "kv", ReplicasPerRegion: 2})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Services[0].DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "kv"})
	if err != nil || d.PlacementVersion != alt.Version {
		t.Fatalf("describe after the alter: %v %v", d, err)
	}
	for _, p := range d.Partitions {
		if len(p.Replicas) != 6 {
			t.Fatalf("partition %d placed on %v, want all 6 nodes", p.Partition, p.Replicas)
		}
	}
	// Every node ends up a voter of every group, and serves the old data from its replica.
	deadline := time.Now().Add(30 * time.Second)
	for i := range c.Nodes {
		for {
			ok := true
			for k := range 40 {
				g, err := c.Services[i].Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte{byte(k * 6)}, Consistency: "STALE"})
				if err != nil || string(g.Value) != fmt.Sprint(k) {
					ok = false
					break
				}
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d has not caught up with the new placement after 30 s", i)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Every node holds a replica of every group of its own, filled by snapshots where it had
	// none (a read at STALE could also have been forwarded: these counters cannot).
	for i, n := range c.Nodes {
		for {
			counts := n.ProtocolCounters()
			// The keyspace's four groups and the metadata group; each joining replica
			// (two groups per node) installs a snapshot.
			if counts["raft_groups"] == 4+1 && counts["raft_snapshots_installed"] >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: %d Raft groups, %d snapshots installed, want 5 and at least 2", i, counts["raft_groups"], counts["raft_snapshots_installed"])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if _, err := c.Services[5].Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("after"), Value: []byte("x")}); err != nil {
		t.Fatalf("put after the move: %v", err)
	}
}
