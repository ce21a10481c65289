// Package placement maps keys to range partitions and partitions to replicas.
//
// A keyspace is split into range partitions (DESIGN.md section 3: "a keyspace is split into
// range partitions ... the placement map is a first-class structure from day one"). At
// creation partition i starts at the keyspace's i-th split point, or, without split points,
// at the 4-byte big-endian value floor(i * 2^32 / P). Each partition has replicas_per_region
// replicas in each of the keyspace's regions, chosen round-robin over the region's nodes so
// partitions spread evenly. Afterwards partitions split and merge (ElasCass 3.1) as metadata
// commands: Split and Merge here compute the new keyspace, and because storage keys name no
// partition a split or merge changes only this map.
package placement

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"meridian/internal/config"
	"meridian/internal/storage"
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

	// Move is the replica move in progress (nil: none). While it lasts, Replicas is still
	// the old set; the new set is NewReplicas.
	Move *Move `json:"move,omitempty"`
	// MoveEpoch is the ID of the last move that started on the partition (0: none ever):
	// the fence of the move protocol. A replica refuses reads and writes coordinated under
	// a map whose epoch for the key is older than its own (docs/elasticity.md), so a node
	// that has not heard of a move cannot gather a quorum that misses the new replica.
	MoveEpoch uint64 `json:"move_epoch,omitempty"`
	// Departed are the nodes that left the partition by a move (its Remove when it
	// finished, its Add when it was aborted), in order. A consensus protocol whose members
	// are named by node (config.ProtocolSpec.NoRejoin) never takes one back: etcd raft
	// must never see a member return with an empty log under the same ID.
	Departed []uint32 `json:"departed,omitempty"`
	// Generation is the ID of the metadata command that last split or merged the range into
	// this partition (0: never), from the same sequence as move IDs, so that it exceeds every
	// move epoch before it. A protocol whose per-partition state cannot simply be cut or
	// joined (GlobLease's mastership table) starts a new configuration of it at each
	// generation; the others ignore it.
	Generation uint64 `json:"generation,omitempty"`
	// Exclusion is the exclusion of a lost region's replicas (exclusion.go; nil: none).
	Exclusion *Exclusion `json:"exclusion,omitempty"`
	// ExclusionCancelled is the last exclusion attempt cancelled (0: none): a replica ends
	// its wedges of that attempt and of every earlier one, never of a later one.
	ExclusionCancelled uint64 `json:"exclusion_cancelled,omitempty"`
}

// MoveStage is where a replica move stands.
type MoveStage int

const (
	// MoveCatchUp: the new replica is a member (quorum family: it takes every write, and
	// reads and writes must reach their level in the old and the new set; Raft: it is a
	// learner) and catches up (a snapshot from Source, then anti-entropy against the old
	// replicas). The old replica serves on.
	MoveCatchUp MoveStage = 1
)

// Move is one replica move of a partition (ElasCass 3.2-3.3 move replicas between nodes; 4.2
// swaps read and write tokens; Meridian writes at quorums, so the move is staged: docs/
// elasticity.md). Replicas stays the old set while the move lasts; finishing it makes
// NewReplicas the replicas; aborting it leaves Replicas as they are.
type Move struct {
	// ID is the metadata index of the command that started the move; stage commands name
	// it, so a command about an earlier move of the partition is refused.
	ID uint64 `json:"id"`
	// Add gains a replica; Remove loses one (a replica now, in the same region as Add).
	Add    uint32 `json:"add"`
	Remove uint32 `json:"remove"`
	// Source is the replica the new one copies its snapshot from.
	Source uint32    `json:"source"`
	Stage  MoveStage `json:"stage"`
}

// NewReplicas is the replica set once the move finishes: Replicas with Remove replaced by
// Add, in place (so regions stay grouped).
func (p *Partition) NewReplicas() []uint32 {
	if p.Move == nil {
		return p.Replicas
	}
	out := slices.Clone(p.Replicas)
	for i, r := range out {
		if r == p.Move.Remove {
			out[i] = p.Move.Add
		}
	}
	return out
}

// ReplicaSets are the sets in which reads and writes must reach their level: the replicas,
// and during a move also the new set (the quorum family writes and reads both, so either
// set alone, before or after the move, holds every acknowledged write).
func (p *Partition) ReplicaSets() [][]uint32 {
	if p.Move == nil {
		return [][]uint32{p.Replicas}
	}
	return [][]uint32{p.Replicas, p.NewReplicas()}
}

// Holders are the nodes that store the partition's data now: the replicas, and the new
// replica of a move in progress.
func (p *Partition) Holders() []uint32 {
	if p.Move == nil {
		return p.Replicas
	}
	return append(slices.Clone(p.Replicas), p.Move.Add)
}

// Holds reports whether node stores the partition's data (Holders).
func (p *Partition) Holds(node uint32) bool {
	return slices.Contains(p.Replicas, node) || (p.Move != nil && p.Move.Add == node)
}

// HasMember reports whether node is a replica or a learner of the partition, or the new
// replica of a move in progress.
func (p *Partition) HasMember(node uint32) bool {
	return p.Holds(node) || slices.Contains(p.Learners, node)
}

// Contains reports whether key falls in the partition's range.
func (p *Partition) Contains(key []byte) bool {
	return bytes.Compare(key, p.Start) >= 0 && (p.End == nil || bytes.Compare(key, p.End) < 0)
}

// Span is the partition's key range in keyspace: what its replica holds in storage.
func (p *Partition) Span(keyspace string) storage.Span {
	return storage.Span{Keyspace: keyspace, Start: p.Start, End: p.End}
}

// HasReplica reports whether node holds a replica of the partition.
func (p *Partition) HasReplica(node uint32) bool { return slices.Contains(p.Replicas, node) }

// Keyspace is the placement of one keyspace. It is immutable once built.
type Keyspace struct {
	Spec config.Keyspace
	// Partitions are in key order and cover the whole key space: the first starts at the
	// empty key, each ends where the next starts, the last has no end. IDs are unique within
	// the keyspace but not dense: splits add IDs and merges retire them (never reused, so a
	// stale message naming a retired partition cannot be taken for another one).
	Partitions []Partition
	// Version is the cluster metadata's version of this keyspace: the index of the metadata
	// command that last changed it. 0: not yet in the metadata (a keyspace from the
	// configuration file, served until the metadata group has it).
	Version uint64
	// ReplicasVersion is the metadata version of the last change other than a split or
	// merge (create, alter): peers exchange messages about the keyspace only under the same
	// ReplicasVersion, and clients' requests made before it are stale. 0 with Version 0.
	ReplicasVersion uint64

	// NextPartitionID is the ID the next split gives its new partition (IDs are never
	// reused). 0 in records written before splits existed: then max(ID)+1.
	NextPartitionID uint32

	// byID indexes Partitions by ID (built by Index; nil: Partition searches linearly).
	byID map[uint32]int
}

// Index builds the ID index of the partitions and returns k. Call it once a keyspace is
// complete, before it is shared.
func (k *Keyspace) Index() *Keyspace {
	k.byID = make(map[uint32]int, len(k.Partitions))
	for i := range k.Partitions {
		k.byID[k.Partitions[i].ID] = i
	}
	return k
}

// Partition returns the partition with the given ID.
func (k *Keyspace) Partition(id uint32) (*Partition, bool) {
	if k.byID != nil {
		i, ok := k.byID[id]
		if !ok {
			return nil, false
		}
		return &k.Partitions[i], true
	}
	for i := range k.Partitions {
		if k.Partitions[i].ID == id {
			return &k.Partitions[i], true
		}
	}
	return nil, false
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
	// Nodes are the cluster's members (the configuration's, and those that joined since),
	// by ID; nil: the configuration's nodes (engines keep those they were built with).
	Nodes []config.Node
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
		out.Nodes = m.Nodes
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
		out.Nodes = m.Nodes
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
// The partitions start at ks.SplitPoints when it is set, else at PartitionStart(i, n).
func BuildKeyspace(ks config.Keyspace, nodes []config.Node) (*Keyspace, error) {
	if ks.Partitions < 1 || ks.Partitions > MaxPartitions {
		return nil, fmt.Errorf("placement: keyspace %q: partitions %d out of range 1..%d", ks.Name, ks.Partitions, MaxPartitions)
	}
	if len(ks.SplitPoints) > 0 && len(ks.SplitPoints)+1 != ks.Partitions {
		return nil, fmt.Errorf("placement: keyspace %q: %d split points for %d partitions", ks.Name, len(ks.SplitPoints), ks.Partitions)
	}
	parts := make([]Partition, ks.Partitions)
	for i := range parts {
		p := &parts[i]
		p.ID = uint32(i)
		switch {
		case i == 0:
			p.Start = []byte{}
		case len(ks.SplitPoints) > 0:
			p.Start = []byte(ks.SplitPoints[i-1])
		default:
			p.Start = PartitionStart(i, ks.Partitions)
		}
		if i > 0 {
			parts[i-1].End = p.Start
		}
	}
	out, err := place(ks, parts, nodes)
	if err != nil {
		return nil, err
	}
	for i := range out.Partitions {
		p := &out.Partitions[i]
		p.FoundingVoters = slices.Clone(p.Replicas)
		p.FoundingLearners = slices.Clone(p.Learners)
	}
	out.NextPartitionID = uint32(len(out.Partitions))
	return out.Index(), nil
}

// place gives the partitions (boundaries and IDs set, in key order) their replicas:
// replicas_per_region per region, round-robin over the region's nodes by position, so
// neighbouring partitions spread over different nodes.
func place(ks config.Keyspace, parts []Partition, nodes []config.Node) (*Keyspace, error) {
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
	spec, _ := config.Protocol(ks.Protocol)
	out := &Keyspace{Spec: ks, Partitions: make([]Partition, len(parts))}
	for i := range parts {
		p := &out.Partitions[i]
		p.ID, p.Start, p.End = parts[i].ID, parts[i].Start, parts[i].End
		for _, r := range ks.Regions {
			ids := byRegion[r]
			for j := range ks.ReplicasPerRegion {
				p.Replicas = append(p.Replicas, ids[(i+j)%len(ids)])
			}
		}
		if spec.LearnersEverywhere {
			for _, n := range nodes {
				if !slices.Contains(p.Replicas, n.ID) {
					p.Learners = append(p.Learners, n.ID)
				}
			}
			slices.Sort(p.Learners)
		}
	}
	return out, nil
}

// Rebuild places an altered keyspace spec: the partitions keep their boundaries and IDs
// (splits and merges since creation included), each gets the replicas the round-robin gives
// its position now, and keeps its founders (a consensus group bootstraps on its founders
// only, whatever it has become since).
func Rebuild(old *Keyspace, spec config.Keyspace, nodes []config.Node) (*Keyspace, error) {
	nk, err := place(spec, old.Partitions, nodes)
	if err != nil {
		return nil, err
	}
	for i := range nk.Partitions {
		np, op := &nk.Partitions[i], &old.Partitions[i]
		np.FoundingVoters = slices.Clone(op.FoundingVoters)
		np.FoundingLearners = slices.Clone(op.FoundingLearners)
		np.MoveEpoch, np.Departed = op.MoveEpoch, slices.Clone(op.Departed)
		if op.Move != nil {
			return nil, fmt.Errorf("placement: keyspace %q: partition %d is moving a replica; its replicas change once the move is over", spec.Name, op.ID)
		}
		if ps, _ := config.Protocol(spec.Protocol); ps.NoRejoin {
			for _, n := range slices.Concat(np.Replicas, np.Learners) {
				if !op.HasMember(n) && op.HasDeparted(n) {
					return nil, fmt.Errorf("placement: keyspace %q: node %d left partition %d earlier, and a %s group never takes a member back (docs/elasticity.md)", spec.Name, n, op.ID, spec.Protocol)
				}
			}
		}
		for _, n := range slices.Concat(op.Replicas, op.Learners) {
			if !np.HasMember(n) {
				np.Departed = appendDeparted(np.Departed, n)
			}
		}
	}
	nk.NextPartitionID = old.nextID()
	return nk.Index(), nil
}

// nextID is the ID the next new partition gets.
func (k *Keyspace) nextID() uint32 {
	next := k.NextPartitionID
	for i := range k.Partitions {
		next = max(next, k.Partitions[i].ID+1)
	}
	return next
}

// Split returns a copy of k with partition id cut at key: the partition keeps its ID and
// [Start, at), a new partition (the next unused ID) takes [at, End). Both have the same
// replicas, learners and founders as the partition, so under every protocol that
// repartitions in place (engine.Protocol.Repartition) every key keeps its replicas and no
// data moves: records do not name partitions (ElasCass 3.1 splits rebuild replica files;
// here only the map changes). Both halves take generation gen, the split command's ID, which
// must exceed the partition's generation and move epoch. Version is left to the caller.
func (k *Keyspace) Split(id uint32, at []byte, gen uint64) (*Keyspace, error) {
	i := k.indexOf(id)
	if i < 0 {
		return nil, fmt.Errorf("keyspace %q has no partition %d", k.Spec.Name, id)
	}
	p := &k.Partitions[i]
	if p.Move != nil {
		return nil, fmt.Errorf("partition %d of %q is moving a replica (move %d): a partition is not split while it moves (ElasCass 3.2 Rule 1)", id, k.Spec.Name, p.Move.ID)
	}
	if len(at) == 0 || bytes.Compare(at, p.Start) <= 0 || (p.End != nil && bytes.Compare(at, p.End) >= 0) {
		return nil, fmt.Errorf("split key %q is not inside partition %d of %q (%s)", at, id, k.Spec.Name, p.Span(k.Spec.Name))
	}
	if len(k.Partitions) >= MaxPartitions {
		return nil, fmt.Errorf("keyspace %q already has %d partitions, the most one keyspace may have", k.Spec.Name, MaxPartitions)
	}
	if err := checkGeneration(k.Spec.Name, gen, p); err != nil {
		return nil, err
	}
	out := k.clone()
	left := out.Partitions[i]
	left.Generation = gen
	right := clonePartition(left)
	right.ID = out.nextID()
	right.Start = bytes.Clone(at)
	left.End = bytes.Clone(at)
	out.Partitions[i] = left
	out.Partitions = slices.Insert(out.Partitions, i+1, right)
	out.NextPartitionID = right.ID + 1
	return out.Index(), nil
}

// Merge returns a copy of k with partition id and its right-hand neighbour joined into one
// partition that keeps id. They must have the same replicas and learners (ElasCass 3.1: "if
// two adjacent partitions are not stored on the same set of nodes, then they are not
// merged"), so no data moves. The neighbour's ID is retired. The merged partition takes
// generation gen, the merge command's ID (above both partitions' generations and epochs).
func (k *Keyspace) Merge(id uint32, gen uint64) (*Keyspace, error) {
	i := k.indexOf(id)
	if i < 0 {
		return nil, fmt.Errorf("keyspace %q has no partition %d", k.Spec.Name, id)
	}
	if i+1 >= len(k.Partitions) {
		return nil, fmt.Errorf("partition %d of %q is the last one: it has no right-hand neighbour to merge with", id, k.Spec.Name)
	}
	l, r := &k.Partitions[i], &k.Partitions[i+1]
	if l.Move != nil || r.Move != nil {
		return nil, fmt.Errorf("partitions %d and %d of %q: one is moving a replica; partitions are not merged while they move (ElasCass 3.2 Rule 1)", l.ID, r.ID, k.Spec.Name)
	}
	if !sameMembers(l.Replicas, r.Replicas) || !sameMembers(l.Learners, r.Learners) {
		return nil, fmt.Errorf("partitions %d and %d of %q are on different replicas (%v and %v): merging them would move data; move a replica first", l.ID, r.ID, k.Spec.Name, l.Replicas, r.Replicas)
	}
	if err := checkGeneration(k.Spec.Name, gen, l); err != nil {
		return nil, err
	}
	if err := checkGeneration(k.Spec.Name, gen, r); err != nil {
		return nil, err
	}
	out := k.clone()
	out.Partitions[i].End = out.Partitions[i+1].End
	out.Partitions[i].MoveEpoch = max(l.MoveEpoch, r.MoveEpoch)
	out.Partitions[i].Generation = gen
	for _, d := range r.Departed {
		out.Partitions[i].Departed = appendDeparted(out.Partitions[i].Departed, d)
	}
	out.Partitions = slices.Delete(out.Partitions, i+1, i+2)
	out.NextPartitionID = k.nextID()
	return out.Index(), nil
}

// checkGeneration: a split's or merge's generation orders after everything that happened to
// the partition (its last split or merge, its last move).
func checkGeneration(ks string, gen uint64, p *Partition) error {
	if gen <= p.Generation || gen <= p.MoveEpoch {
		return fmt.Errorf("generation %d for partition %d of %q is not newer than its generation %d and move epoch %d", gen, p.ID, ks, p.Generation, p.MoveEpoch)
	}
	return nil
}

// StartMove returns a copy of k in which partition id begins moving its replica on remove
// to add (copying from source), the move's ID being id of the metadata command (it becomes
// the partition's MoveEpoch). The caller checks regions and node states; here: one move at
// a time per partition, remove and source are replicas, add is not a member.
func (k *Keyspace) StartMove(id uint32, mv Move) (*Keyspace, error) {
	i := k.indexOf(id)
	if i < 0 {
		return nil, fmt.Errorf("keyspace %q has no partition %d", k.Spec.Name, id)
	}
	p := &k.Partitions[i]
	switch {
	case p.Move != nil:
		return nil, fmt.Errorf("partition %d of %q is already moving a replica (move %d, n%d to n%d); one move at a time", id, k.Spec.Name, p.Move.ID, p.Move.Remove, p.Move.Add)
	case mv.ID <= p.Generation:
		return nil, fmt.Errorf("move %d of partition %d of %q is not newer than its last split or merge %d", mv.ID, id, k.Spec.Name, p.Generation)
	case mv.ID <= p.MoveEpoch:
		return nil, fmt.Errorf("move %d of partition %d of %q is not newer than its last move %d", mv.ID, id, k.Spec.Name, p.MoveEpoch)
	case !p.HasReplica(mv.Remove):
		return nil, fmt.Errorf("node %d is not a replica of partition %d of %q (replicas %v)", mv.Remove, id, k.Spec.Name, p.Replicas)
	case p.HasMember(mv.Add):
		return nil, fmt.Errorf("node %d is already a member of partition %d of %q", mv.Add, id, k.Spec.Name)
	case !p.HasReplica(mv.Source):
		return nil, fmt.Errorf("source node %d is not a replica of partition %d of %q", mv.Source, id, k.Spec.Name)
	}
	mv.Stage = MoveCatchUp
	out := k.clone()
	out.Partitions[i].Move = &mv
	out.Partitions[i].MoveEpoch = mv.ID
	return out.Index(), nil
}

// FinishMove returns a copy of k in which move moveID of partition id is done: the new set
// becomes the replicas.
func (k *Keyspace) FinishMove(id uint32, moveID uint64) (*Keyspace, error) {
	i, err := k.movingIndex(id, moveID)
	if err != nil {
		return nil, err
	}
	out := k.clone()
	p := &out.Partitions[i]
	p.Replicas = p.NewReplicas()
	p.Departed = appendDeparted(p.Departed, p.Move.Remove)
	p.Move = nil
	return out.Index(), nil
}

// AbortMove returns a copy of k without move moveID of partition id: the replicas stay the
// old set, and the new replica, no longer a member, drops what it copied. The epoch stays.
func (k *Keyspace) AbortMove(id uint32, moveID uint64) (*Keyspace, error) {
	i, err := k.movingIndex(id, moveID)
	if err != nil {
		return nil, err
	}
	out := k.clone()
	p := &out.Partitions[i]
	p.Departed = appendDeparted(p.Departed, p.Move.Add)
	p.Move = nil
	return out.Index(), nil
}

// maxDeparted bounds a partition's departed list; the oldest are forgotten (a protocol that
// refuses rejoins then refuses no more for them: keep NoRejoin protocols' moves fewer than
// this per partition, or give their members fresh identities).
const maxDeparted = 64

func appendDeparted(d []uint32, node uint32) []uint32 {
	if slices.Contains(d, node) {
		return d
	}
	d = append(d, node)
	if len(d) > maxDeparted {
		d = d[len(d)-maxDeparted:]
	}
	return d
}

// HasDeparted reports whether node left p by a move.
func (p *Partition) HasDeparted(node uint32) bool { return slices.Contains(p.Departed, node) }

func (k *Keyspace) movingIndex(id uint32, moveID uint64) (int, error) {
	i := k.indexOf(id)
	if i < 0 {
		return -1, fmt.Errorf("keyspace %q has no partition %d", k.Spec.Name, id)
	}
	p := &k.Partitions[i]
	if p.Move == nil || p.Move.ID != moveID {
		return -1, fmt.Errorf("partition %d of %q has no move %d in progress (it may have finished or been aborted)", id, k.Spec.Name, moveID)
	}
	return i, nil
}

// Moving reports whether any partition of k has a move in progress.
func (k *Keyspace) Moving() bool {
	for i := range k.Partitions {
		if k.Partitions[i].Move != nil {
			return true
		}
	}
	return false
}

// SameRun reports whether neighbouring partitions a and b have the same members (replicas,
// learners, a move's new replica) and the same departed nodes: splits and merges happen
// inside such runs (Raft names its groups on the wire by a run's first partition).
func SameRun(a, b *Partition) bool {
	return SameNodes(a.MemberIDs(), b.MemberIDs()) && SameNodes(a.Departed, b.Departed)
}

// MemberIDs lists p's members: replicas, learners and a move's new replica.
func (p *Partition) MemberIDs() []uint32 {
	out := slices.Concat(p.Replicas, p.Learners)
	if p.Move != nil {
		out = append(out, p.Move.Add)
	}
	return out
}

// SameNodes reports whether a and b list the same nodes, in any order, repeats ignored.
func SameNodes(a, b []uint32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func sameMembers(a, b []uint32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func (k *Keyspace) indexOf(id uint32) int {
	for i := range k.Partitions {
		if k.Partitions[i].ID == id {
			return i
		}
	}
	return -1
}

func clonePartition(p Partition) Partition {
	if p.Move != nil {
		mv := *p.Move
		p.Move = &mv
	}
	p.Exclusion = cloneExclusion(p.Exclusion)
	p.Start, p.End = bytes.Clone(p.Start), bytes.Clone(p.End)
	if p.Start == nil {
		p.Start = []byte{}
	}
	p.Replicas, p.Learners, p.Departed = slices.Clone(p.Replicas), slices.Clone(p.Learners), slices.Clone(p.Departed)
	p.FoundingVoters, p.FoundingLearners = slices.Clone(p.FoundingVoters), slices.Clone(p.FoundingLearners)
	return p
}

// clone deep-copies k (a Keyspace is immutable once shared: changes make copies).
func (k *Keyspace) clone() *Keyspace {
	out := &Keyspace{Spec: k.Spec, Version: k.Version, ReplicasVersion: k.ReplicasVersion, NextPartitionID: k.NextPartitionID, Partitions: make([]Partition, len(k.Partitions))}
	for i := range k.Partitions {
		out.Partitions[i] = clonePartition(k.Partitions[i])
	}
	return out
}

// Check verifies the structural invariants of a keyspace's partitions: key order, the
// first starting at the empty key, each ending where the next starts, the last unbounded,
// unique IDs below NextPartitionID (when set), and replicas in every partition.
func (k *Keyspace) Check() error {
	if len(k.Partitions) == 0 {
		return fmt.Errorf("keyspace %q has no partitions", k.Spec.Name)
	}
	seen := map[uint32]bool{}
	for i := range k.Partitions {
		p := &k.Partitions[i]
		if seen[p.ID] {
			return fmt.Errorf("keyspace %q: partition ID %d appears twice", k.Spec.Name, p.ID)
		}
		seen[p.ID] = true
		if k.NextPartitionID != 0 && p.ID >= k.NextPartitionID {
			return fmt.Errorf("keyspace %q: partition ID %d not below the next ID %d", k.Spec.Name, p.ID, k.NextPartitionID)
		}
		if len(p.Replicas) == 0 {
			return fmt.Errorf("keyspace %q: partition %d has no replicas", k.Spec.Name, p.ID)
		}
		if mv := p.Move; mv != nil {
			if mv.ID != p.MoveEpoch || !p.HasReplica(mv.Remove) || !p.HasReplica(mv.Source) || p.HasReplica(mv.Add) || mv.Stage != MoveCatchUp {
				return fmt.Errorf("keyspace %q: partition %d (replicas %v, epoch %d) has an inconsistent move %+v", k.Spec.Name, p.ID, p.Replicas, p.MoveEpoch, *mv)
			}
		}
		if i == 0 && len(p.Start) != 0 {
			return fmt.Errorf("keyspace %q: the first partition starts at %q, not the empty key", k.Spec.Name, p.Start)
		}
		if i+1 < len(k.Partitions) {
			if p.End == nil || !bytes.Equal(p.End, k.Partitions[i+1].Start) || bytes.Compare(p.Start, p.End) >= 0 {
				return fmt.Errorf("keyspace %q: partition %d [%q, %q) does not end where partition %d starts (%q)", k.Spec.Name, p.ID, p.Start, p.End, k.Partitions[i+1].ID, k.Partitions[i+1].Start)
			}
		} else if p.End != nil {
			return fmt.Errorf("keyspace %q: the last partition ends at %q, not at the end of the key space", k.Spec.Name, p.End)
		}
	}
	return nil
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
