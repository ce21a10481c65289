// Package placement maps keys to range partitions and partitions to replicas.
//
// A keyspace is split into a fixed number of range partitions (DESIGN.md section 3: "a keyspace
// is split into range partitions ... the placement map is a first-class structure from day
// one"). Partition i covers [start_i, start_{i+1}) where start_i is the 4-byte big-endian value
// floor(i * 2^32 / P), so boundaries are fixed and identical on every node. Each partition has
// replicas_per_region replicas in each of the keyspace's regions, chosen round-robin over the
// region's nodes so partitions spread evenly. Later issues (ElasCass bootstrapping) split,
// merge and move partitions; they will publish new map versions through the same structure.
package placement

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"meridian/internal/config"
)

// MaxPartitions bounds the partition count of one keyspace.
const MaxPartitions = 4096

// Partition is one key range and its replica set.
type Partition struct {
	ID uint32
	// Start is the inclusive lower bound of the range (empty for the first partition).
	Start []byte
	// End is the exclusive upper bound (nil for the last partition).
	End []byte
	// Replicas are node IDs grouped by region in the keyspace's region order.
	Replicas []uint32
	// Learners receive a consensus group's log but do not vote (the cluster metadata group:
	// every node that is not one of its voters). Empty for the other protocols.
	Learners []uint32
	// FoundingVoters and FoundingLearners are the members the partition had when it was
	// created. A consensus protocol bootstraps the group on them alone, every founder the
	// same way; a member added later starts empty and is caught up by its group (Raft: by
	// snapshot), so no two nodes can bootstrap different histories.
	FoundingVoters, FoundingLearners []uint32
}

// HasMember reports whether node is a replica or a learner of the partition.
func (p *Partition) HasMember(node uint32) bool {
	return slices.Contains(p.Replicas, node) || slices.Contains(p.Learners, node)
}

// Contains reports whether key falls in the partition's range.
func (p *Partition) Contains(key []byte) bool {
	return bytes.Compare(key, p.Start) >= 0 && (p.End == nil || bytes.Compare(key, p.End) < 0)
}

// HasReplica reports whether node holds a replica of the partition.
func (p *Partition) HasReplica(node uint32) bool { return slices.Contains(p.Replicas, node) }

// Keyspace is the placement of one keyspace. It is immutable once built.
type Keyspace struct {
	Spec       config.Keyspace
	Partitions []Partition
	// Version is the cluster metadata's version of this keyspace: the index of the metadata
	// command that last changed it. 0: not yet in the metadata (a keyspace from the
	// configuration file, served until the metadata group has it).
	Version uint64
}

// Lookup returns the partition holding key.
func (k *Keyspace) Lookup(key []byte) *Partition {
	// Find the last partition whose Start <= key.
	i := sort.Search(len(k.Partitions), func(i int) bool {
		return bytes.Compare(k.Partitions[i].Start, key) > 0
	}) - 1
	if i < 0 {
		i = 0
	}
	return &k.Partitions[i]
}

// Overlapping returns the partitions intersecting [start, end) in key order; end == nil or
// empty means unbounded.
func (k *Keyspace) Overlapping(start, end []byte) []*Partition {
	var out []*Partition
	for i := range k.Partitions {
		p := &k.Partitions[i]
		if p.End != nil && bytes.Compare(p.End, start) <= 0 {
			continue
		}
		if len(end) > 0 && bytes.Compare(p.Start, end) >= 0 {
			break
		}
		out = append(out, p)
	}
	return out
}

// Map is a versioned, immutable placement of every keyspace. Nodes swap whole maps atomically.
type Map struct {
	// Version increases with every change of the map.
	Version   uint64
	Keyspaces map[string]*Keyspace
}

// Keyspace returns the placement of name.
func (m *Map) Keyspace(name string) (*Keyspace, bool) {
	if m == nil {
		return nil, false
	}
	k, ok := m.Keyspaces[name]
	return k, ok
}

// With returns a copy of m with ks added or replaced and the version bumped.
func (m *Map) With(ks *Keyspace) *Map {
	out := &Map{Version: 1, Keyspaces: map[string]*Keyspace{}}
	if m != nil {
		out.Version = m.Version + 1
		for n, k := range m.Keyspaces {
			out.Keyspaces[n] = k
		}
	}
	out.Keyspaces[ks.Spec.Name] = ks
	return out
}

// Without returns a copy of m without keyspace name, the version bumped.
func (m *Map) Without(name string) *Map {
	out := &Map{Version: 1, Keyspaces: map[string]*Keyspace{}}
	if m != nil {
		out.Version = m.Version + 1
		for n, k := range m.Keyspaces {
			if n != name {
				out.Keyspaces[n] = k
			}
		}
	}
	return out
}

// PartitionStart returns the fixed start key of partition i of n.
func PartitionStart(i, n int) []byte {
	if i == 0 {
		return []byte{}
	}
	return binary.BigEndian.AppendUint32(nil, uint32((uint64(i)<<32)/uint64(n)))
}

// BuildKeyspace places ks on nodes. ks must have been validated (config.ValidateKeyspace).
func BuildKeyspace(ks config.Keyspace, nodes []config.Node) (*Keyspace, error) {
	if ks.Partitions < 1 || ks.Partitions > MaxPartitions {
		return nil, fmt.Errorf("placement: keyspace %q: partitions %d out of range 1..%d", ks.Name, ks.Partitions, MaxPartitions)
	}
	byRegion := map[string][]uint32{}
	for _, n := range nodes {
		byRegion[n.Region] = append(byRegion[n.Region], n.ID)
	}
	for _, r := range ks.Regions {
		ids := byRegion[r]
		slices.Sort(ids)
		if len(ids) < ks.ReplicasPerRegion {
			return nil, fmt.Errorf("placement: keyspace %q: region %q has %d nodes, needs %d replicas",
				ks.Name, r, len(ids), ks.ReplicasPerRegion)
		}
	}
	out := &Keyspace{Spec: ks, Partitions: make([]Partition, ks.Partitions)}
	for i := range ks.Partitions {
		p := &out.Partitions[i]
		p.ID = uint32(i)
		p.Start = PartitionStart(i, ks.Partitions)
		if i+1 < ks.Partitions {
			p.End = PartitionStart(i+1, ks.Partitions)
		}
		for _, r := range ks.Regions {
			ids := byRegion[r]
			for j := range ks.ReplicasPerRegion {
				p.Replicas = append(p.Replicas, ids[(i+j)%len(ids)])
			}
		}
		if spec, _ := config.Protocol(ks.Protocol); spec.LearnersEverywhere {
			for _, n := range nodes {
				if !slices.Contains(p.Replicas, n.ID) {
					p.Learners = append(p.Learners, n.ID)
				}
			}
			slices.Sort(p.Learners)
		}
		p.FoundingVoters = slices.Clone(p.Replicas)
		p.FoundingLearners = slices.Clone(p.Learners)
	}
	return out, nil
}

// Rebuild places an altered keyspace spec (its partitions unchanged in number): each
// partition gets the replicas BuildKeyspace would give it now, and keeps its founders (a
// consensus group bootstraps on its founders only, whatever it has become since).
func Rebuild(old *Keyspace, spec config.Keyspace, nodes []config.Node) (*Keyspace, error) {
	if spec.Partitions != len(old.Partitions) {
		return nil, fmt.Errorf("placement: keyspace %q: %d partitions cannot become %d here (splits and merges move data)", spec.Name, len(old.Partitions), spec.Partitions)
	}
	nk, err := BuildKeyspace(spec, nodes)
	if err != nil {
		return nil, err
	}
	for i := range nk.Partitions {
		nk.Partitions[i].FoundingVoters = slices.Clone(old.Partitions[i].FoundingVoters)
		nk.Partitions[i].FoundingLearners = slices.Clone(old.Partitions[i].FoundingLearners)
	}
	return nk, nil
}

// Build places every keyspace of the cluster configuration.
func Build(c *config.Cluster) (*Map, error) {
	m := &Map{Version: 1, Keyspaces: map[string]*Keyspace{}}
	for _, ks := range c.Keyspaces {
		k, err := BuildKeyspace(ks, c.Nodes)
		if err != nil {
			return nil, err
		}
		m.Keyspaces[ks.Name] = k
	}
	return m, nil
}
