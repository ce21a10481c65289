package placement

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"meridian/internal/config"
	"meridian/internal/topology"
)

func testCluster(t *testing.T, nodesPerRegion, rpr, parts int) *config.Cluster {
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
			c.Nodes = append(c.Nodes, config.Node{ID: id, Name: fmt.Sprintf("%s-%d", r, i), Region: r, Listen: fmt.Sprintf("127.0.0.1:%d", 7000+id), PeerListen: fmt.Sprintf("127.0.0.1:%d", 17000+id)})
		}
	}
	c.Keyspaces = []config.Keyspace{{Name: "ks", Protocol: "quorum", ReplicasPerRegion: rpr, Partitions: parts}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLookupMatchesRanges(t *testing.T) {
	for _, parts := range []int{1, 2, 3, 16, 4096} {
		m, err := Build(testCluster(t, 1, 1, parts))
		if err != nil {
			t.Fatal(err)
		}
		ks, _ := m.Keyspace("ks")
		if len(ks.Partitions) != parts {
			t.Fatalf("%d partitions, want %d", len(ks.Partitions), parts)
		}
		rng := rand.New(rand.NewPCG(uint64(parts), 1))
		keys := [][]byte{{}, {0}, {0xff, 0xff, 0xff, 0xff, 0xff}, []byte("user1")}
		for range 2000 {
			k := make([]byte, rng.IntN(6))
			for i := range k {
				k[i] = byte(rng.IntN(256))
			}
			keys = append(keys, k)
		}
		for _, k := range keys {
			p := ks.Lookup(k)
			if !p.Contains(k) {
				t.Fatalf("parts=%d: key %x looked up to partition %d [%x,%x)", parts, k, p.ID, p.Start, p.End)
			}
			n := 0
			for i := range ks.Partitions {
				if ks.Partitions[i].Contains(k) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("key %x is in %d partitions", k, n)
			}
		}
		// Overlapping returns exactly the partitions intersecting the range, in order.
		for range 200 {
			a, b := keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]
			if bytes.Compare(a, b) > 0 {
				a, b = b, a
			}
			got := ks.Overlapping(a, b)
			for i := 1; i < len(got); i++ {
				if got[i].ID != got[i-1].ID+1 {
					t.Fatal("overlapping partitions not contiguous")
				}
			}
			if len(b) > 0 && bytes.Equal(a, b) {
				continue
			}
			if len(got) == 0 || !got[0].Contains(a) {
				t.Fatalf("range [%x,%x): first partition does not hold the start", a, b)
			}
		}
	}
}

func TestReplicasSpreadAcrossRegionsAndNodes(t *testing.T) {
	c := testCluster(t, 3, 2, 12)
	m, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := m.Keyspace("ks")
	count := map[uint32]int{}
	for _, p := range ks.Partitions {
		if len(p.Replicas) != 6 {
			t.Fatalf("partition %d has %d replicas, want 2 per region x 3", p.ID, len(p.Replicas))
		}
		perRegion := map[string]int{}
		seen := map[uint32]bool{}
		for _, r := range p.Replicas {
			nd, _ := c.NodeByID(r)
			perRegion[nd.Region]++
			if seen[r] {
				t.Fatalf("partition %d lists node %d twice", p.ID, r)
			}
			seen[r] = true
			count[r]++
		}
		for reg, n := range perRegion {
			if n != 2 {
				t.Fatalf("partition %d: %d replicas in %s", p.ID, n, reg)
			}
		}
	}
	for id, n := range count {
		if n != 8 { // 12 partitions x 2 replicas per region / 3 nodes per region
			t.Fatalf("node %d holds %d replicas, want an even 8", id, n)
		}
	}
}

func TestMapWithBumpsVersion(t *testing.T) {
	m, err := Build(testCluster(t, 1, 1, 4))
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := m.Keyspace("ks")
	spec := ks.Spec
	spec.Name = "other"
	k2, err := BuildKeyspace(spec, testCluster(t, 1, 1, 4).Nodes)
	if err != nil {
		t.Fatal(err)
	}
	m2 := m.With(k2)
	if m2.Version != m.Version+1 {
		t.Fatalf("version %d -> %d", m.Version, m2.Version)
	}
	if _, ok := m.Keyspace("other"); ok {
		t.Fatal("With mutated the original map")
	}
	if _, ok := m2.Keyspace("ks"); !ok {
		t.Fatal("With lost a keyspace")
	}
}
