package metadata

import (
	"fmt"
	"strings"
	"testing"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/topology"
)

func testCatalog(t *testing.T, nodesPerRegion int) *Catalog {
	t.Helper()
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	c := &config.Cluster{Name: "t", Topology: topo, TopologyRef: topo.Name}
	id := uint32(0)
	for _, r := range topo.Regions {
		for i := range nodesPerRegion {
			id++
			c.Nodes = append(c.Nodes, config.Node{ID: id, Name: fmt.Sprintf("%s-%d", r, i), Region: r,
				Listen: fmt.Sprintf("127.0.0.1:%d", 7000+id), PeerListen: fmt.Sprintf("127.0.0.1:%d", 17000+id)})
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return NewCatalog(c)
}

// TestSplitAndMergeCommands: a split and a merge are versioned metadata changes that keep
// the keyspace's replicas version (peers keep talking across them), refuse a stale expected
// version, refuse protocols that cannot repartition, and refuse a merge across replica sets.
func TestSplitAndMergeCommands(t *testing.T) {
	cat := testCatalog(t, 2)
	create := func(index uint64, name, protocol string) *KeyspaceRecord {
		t.Helper()
		_, out, err := cat.Apply(index, Command{Op: OpCreate, Spec: &config.Keyspace{Name: name, Protocol: protocol, Partitions: 2}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Keyspace
	}
	ks := create(10, "kv", "quorum")
	if ks.ReplicasVersion != 10 || ks.NextPartitionID != 2 {
		t.Fatalf("created: replicas version %d, next id %d", ks.ReplicasVersion, ks.NextPartitionID)
	}
	recs, out, err := cat.Apply(11, Command{Op: OpSplit, Name: "kv", Partition: 0, SplitKey: []byte("m"), ExpectVersion: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || out.Version != 11 || len(out.Keyspace.Partitions) != 3 || out.Keyspace.ReplicasVersion != 10 {
		t.Fatalf("split: %d records, version %d, %d partitions, replicas version %d", len(recs), out.Version, len(out.Keyspace.Partitions), out.Keyspace.ReplicasVersion)
	}
	if p := out.Keyspace.Placement().Lookup([]byte("n")); p.ID != 2 || string(p.Start) != "m" {
		t.Fatalf("key n is in partition %d starting at %q, want the new partition 2 at \"m\"", p.ID, p.Start)
	}
	// The record decodes back to the same placement (a node installs it from storage).
	dec, err := DecodeKeyspace(recs[0].Value)
	if err != nil || dec.NextPartitionID != 3 || len(dec.Partitions) != 3 {
		t.Fatalf("decoded split record: %+v, %v", dec, err)
	}
	_, _, err = cat.Apply(12, Command{Op: OpMerge, Name: "kv", Partition: 0, ExpectVersion: 10})
	if errs.KindOf(err) != errs.Conflict {
		t.Fatalf("merge at a stale version: %v", err)
	}
	if _, out, err = cat.Apply(12, Command{Op: OpMerge, Name: "kv", Partition: 0, ExpectVersion: 11}); err != nil {
		t.Fatal(err)
	}
	if len(out.Keyspace.Partitions) != 2 || out.Keyspace.NextPartitionID != 3 {
		t.Fatalf("merged: %d partitions, next id %d", len(out.Keyspace.Partitions), out.Keyspace.NextPartitionID)
	}
	// Partitions 0 and 1 of a two-nodes-per-region cluster are on different nodes.
	if _, _, err = cat.Apply(13, Command{Op: OpMerge, Name: "kv", Partition: 0}); err == nil || !strings.Contains(err.Error(), "different replicas") {
		t.Fatalf("merge across replica sets: %v", err)
	}
	for _, protocol := range []string{"raft", "globlease"} {
		create(20, "ks_"+protocol, protocol)
		_, _, err := cat.Apply(21, Command{Op: OpSplit, Name: "ks_" + protocol, Partition: 0, SplitKey: []byte("m")})
		if errs.KindOf(err) != errs.Invalid || !strings.Contains(err.Error(), "does not split or merge") {
			t.Fatalf("split of a %s keyspace: %v", protocol, err)
		}
	}
	if _, _, err = cat.Apply(30, Command{Op: OpSplit, Name: "kv", Partition: 0, SplitKey: []byte("")}); errs.KindOf(err) != errs.Invalid {
		t.Fatalf("split at the empty key: %v", err)
	}
}
