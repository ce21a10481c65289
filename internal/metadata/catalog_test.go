package metadata

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
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
	// Raft splits in its groups' logs (raft/repartition.go); GlobLease starts a new generation
	// of each resulting partition's mastership table (globlease/gl_split.go): both halves of
	// a split, and a merged partition, carry the command's index as their generation.
	create(20, "ks_raft", "raft")
	if _, _, err := cat.Apply(21, Command{Op: OpSplit, Name: "ks_raft", Partition: 0, SplitKey: []byte("m")}); err != nil {
		t.Fatalf("split of a raft keyspace: %v", err)
	}
	create(22, "ks_globlease", "globlease")
	_, out, err = cat.Apply(23, Command{Op: OpSplit, Name: "ks_globlease", Partition: 0, SplitKey: []byte("m")})
	if err != nil {
		t.Fatalf("split of a globlease keyspace: %v", err)
	}
	if g0, g1 := out.Keyspace.Partitions[0].Generation, out.Keyspace.Partitions[1].Generation; g0 != 23 || g1 != 23 {
		t.Fatalf("split halves have generations %d and %d, want the command's index 23", g0, g1)
	}
	_, out, err = cat.Apply(24, Command{Op: OpMerge, Name: "ks_globlease", Partition: 0})
	if err != nil || out.Keyspace.Partitions[0].Generation != 24 {
		t.Fatalf("merge of a globlease keyspace: %v (partitions %+v)", err, out.Keyspace)
	}
	if _, _, err = cat.Apply(30, Command{Op: OpSplit, Name: "kv", Partition: 0, SplitKey: []byte("")}); errs.KindOf(err) != errs.Invalid {
		t.Fatalf("split at the empty key: %v", err)
	}
}

// TestMoveCommands: a replica move starts, is refused while one is in progress (and refuses
// splits of the partition), finishes only under its own ID, keeps the replicas version, and
// checks regions, membership and — for Raft — that a node never rejoins a group it left.
func TestMoveCommands(t *testing.T) {
	cat := testCatalog(t, 2) // europe-0,1 = n1,n2; us-0,1 = n3,n4; asia-0,1 = n5,n6
	create := func(index uint64, name, protocol string) {
		t.Helper()
		if _, _, err := cat.Apply(index, Command{Op: OpCreate, Spec: &config.Keyspace{Name: name, Protocol: protocol, Partitions: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	create(10, "kv", "quorum")
	ks := cat.keyspaces["kv"].Placement()
	p0, _ := ks.Partition(0)
	// Partition 0's replicas are the first node of each region: n1, n3, n5.
	if !slices.Equal(p0.Replicas, []uint32{1, 3, 5}) {
		t.Fatalf("partition 0 replicas %v", p0.Replicas)
	}
	start := func(index uint64, name string, part, add, remove, source uint32) (*KeyspaceRecord, error) {
		_, out, err := cat.Apply(index, Command{Op: OpMoveStart, Name: name, Partition: part, Move: &placement.Move{Add: add, Remove: remove, Source: source}})
		return out.Keyspace, err
	}
	for _, bad := range []struct {
		add, remove, source uint32
		want                string
	}{
		{4, 1, 3, "within its region"},    // us node for a europe replica
		{1, 2, 1, "not a replica"},        // n2 holds none of partition 0
		{2, 1, 4, "not a replica"},        // the source holds none
		{99, 1, 3, "not a member of the"}, // unknown node
	} {
		if _, err := start(11, "kv", 0, bad.add, bad.remove, bad.source); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("move n%d→n%d from n%d: %v, want %q", bad.remove, bad.add, bad.source, err, bad.want)
		}
	}
	rec, err := start(11, "kv", 0, 2, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	p := rec.Placement()
	p0, _ = p.Partition(0)
	if p0.Move == nil || p0.Move.ID != 11 || p0.MoveEpoch != 11 || rec.ReplicasVersion != 10 || !p0.Holds(2) || p0.HasReplica(2) {
		t.Fatalf("after start: %+v, replicas version %d", p0, rec.ReplicasVersion)
	}
	if !slices.Equal(p0.NewReplicas(), []uint32{2, 3, 5}) || len(p0.ReplicaSets()) != 2 {
		t.Fatalf("new replicas %v, sets %v", p0.NewReplicas(), p0.ReplicaSets())
	}
	if _, err := start(12, "kv", 0, 6, 5, 5); err == nil || !strings.Contains(err.Error(), "already moving") {
		t.Fatalf("second move of a moving partition: %v", err)
	}
	if _, _, err := cat.Apply(12, Command{Op: OpSplit, Name: "kv", Partition: 0, SplitKey: []byte("\x20")}); err == nil || !strings.Contains(err.Error(), "Rule 1") {
		t.Fatalf("split of a moving partition: %v", err)
	}
	if _, _, err := cat.Apply(12, Command{Op: OpMoveFinish, Name: "kv", Partition: 0, MoveID: 7}); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("finish of another move: %v", err)
	}
	_, out, err := cat.Apply(13, Command{Op: OpMoveFinish, Name: "kv", Partition: 0, MoveID: 11})
	if err != nil {
		t.Fatal(err)
	}
	p0, _ = out.Keyspace.Placement().Partition(0)
	if !slices.Equal(p0.Replicas, []uint32{2, 3, 5}) || p0.Move != nil || p0.MoveEpoch != 11 || !p0.HasDeparted(1) {
		t.Fatalf("after finish: %+v", p0)
	}
	if _, _, err := cat.Apply(14, Command{Op: OpMoveFinish, Name: "kv", Partition: 0, MoveID: 11}); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("finishing twice: %v", err)
	}
	// A quorum keyspace takes a node back; an abort leaves the replicas as they were.
	if _, err := start(15, "kv", 0, 1, 2, 3); err != nil {
		t.Fatalf("quorum: n1 back: %v", err)
	}
	if _, out, err = cat.Apply(16, Command{Op: OpMoveAbort, Name: "kv", Partition: 0, MoveID: 15}); err != nil {
		t.Fatal(err)
	}
	if p0, _ = out.Keyspace.Placement().Partition(0); !slices.Equal(p0.Replicas, []uint32{2, 3, 5}) || p0.Move != nil || p0.MoveEpoch != 15 {
		t.Fatalf("after abort: %+v", p0)
	}
	// Raft: a node that left a group's partition does not come back.
	create(20, "rk", "raft")
	if _, err := start(21, "rk", 0, 2, 1, 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cat.Apply(22, Command{Op: OpMoveFinish, Name: "rk", Partition: 0, MoveID: 21}); err != nil {
		t.Fatal(err)
	}
	if _, err := start(23, "rk", 0, 1, 2, 3); err == nil || !strings.Contains(err.Error(), "never takes a member back") {
		t.Fatalf("raft: n1 back: %v", err)
	}
	// GlobLease moves replicas (globlease/gl_move.go); a protocol without moves refuses.
	create(30, "gl", "globlease")
	if _, err := start(31, "gl", 0, 2, 1, 3); err != nil {
		t.Fatalf("globlease move: %v", err)
	}
}

// The metadata group's catalog knows the configured voters (metadata.voters), not the default
// choice: a configured non-voter may be decommissioned, a configured voter may not (the catalog
// used to be built without them and refused the wrong nodes).
func TestStateMachineKnowsConfiguredVoters(t *testing.T) {
	var nodes []config.Node
	for i, r := range []string{"a", "a", "b", "b", "c", "c"} {
		nodes = append(nodes, config.Node{ID: uint32(i + 1), Name: fmt.Sprintf("%s-%d", r, i%2+1), Region: r})
	}
	topo := topology.Equidistant("t", []string{"a", "b", "c"}, 10, 0.1)
	sm := newStateMachine(engine.Config{Topology: topo, Nodes: nodes, MetadataVoters: []string{"a-1", "b-1", "c-1"}})
	if got := sm.cat.cluster.MetadataVoters(); fmt.Sprint(got) != "[1 3 5]" {
		t.Fatalf("the catalog's voters are %v, want the configured [1 3 5]", got)
	}
	def := newStateMachine(engine.Config{Topology: topo, Nodes: nodes})
	if got := def.cat.cluster.MetadataVoters(); len(got) != 5 {
		t.Fatalf("without configured voters: %v, want the default five", got)
	}
}

func TestExcludeCommands(t *testing.T) {
	cat := testCatalog(t, 1)
	for i, ks := range []config.Keyspace{{Name: "c", Protocol: "canopus", Partitions: 1}, {Name: "q", Protocol: "quorum", Partitions: 1}} {
		if _, _, err := cat.Apply(uint64(10+i), Command{Op: OpCreate, Spec: &ks}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := cat.Apply(20, Command{Op: OpExcludeStart, Name: "q", Region: "asia"}); errs.KindOf(err) != errs.Invalid {
		t.Fatalf("excluding a region of a quorum keyspace: %v, want Invalid (the protocol cannot go on without it)", err)
	}
	if _, _, err := cat.Apply(21, Command{Op: OpExcludeReport, Name: "c", Region: "asia", Round: 1, Reporter: "europe", Position: 5}); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("a report before the exclusion started: %v, want Conflict", err)
	}
	if _, _, err := cat.Apply(22, Command{Op: OpExcludeStart, Name: "c", Region: "asia"}); err != nil {
		t.Fatal(err)
	}
	if recs, out, err := cat.Apply(23, Command{Op: OpExcludeStart, Name: "c", Region: "asia"}); err != nil || len(recs) != 0 || out.Version != 22 {
		t.Fatalf("starting it again: %v, %d records, version %d: want a no-op at 22", err, len(recs), out.Version)
	}
	if _, _, err := cat.Apply(24, Command{Op: OpExcludeStart, Name: "c", Region: "europe"}); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("a second region's exclusion: %v, want Conflict", err)
	}
	for i, r := range []struct {
		reporter string
		pos      uint64
	}{{"europe", 7}, {"us", 9}} {
		if _, _, err := cat.Apply(uint64(25+i), Command{Op: OpExcludeReport, Name: "c", Region: "asia", Round: 22, Reporter: r.reporter, Position: r.pos}); err != nil {
			t.Fatal(err)
		}
	}
	rec := cat.keyspaces["c"]
	if ex := rec.Partitions[0].Exclusion; !ex.Decided() || ex.From != 9 || rec.ReplicasVersion != 10 {
		t.Fatalf("exclusion %+v, replicas version %d: want decided from 9, replicas version unchanged (peers keep talking)", ex, rec.ReplicasVersion)
	}
	// The record round-trips (a restarted node loads the exclusion from its catalog).
	back, err := DecodeKeyspace(keyspaceRecord(rec).Value)
	if err != nil || back.Partitions[0].Exclusion.From != 9 {
		t.Fatalf("decoded record: %v, %+v", err, back)
	}
}
