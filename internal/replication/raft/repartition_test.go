package raft_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"meridian/internal/config"
	"meridian/internal/placement"
	"meridian/internal/replication/raft"
	"meridian/internal/replication/replicationtest"
)

// repartitioned installs at every node the map with keyspace "ks" changed by change.
func repartitioned(t *testing.T, h *replicationtest.Harness, change func(*placement.Keyspace) (*placement.Keyspace, error)) {
	t.Helper()
	m := h.Placement(1)
	ks, _ := m.Keyspace("ks")
	nk, err := change(ks)
	if err != nil {
		t.Fatal(err)
	}
	next := m.With(nk)
	next.Version = m.Version + 1
	h.SetPlacement(next)
}

func readAll(t *testing.T, h *replicationtest.Harness, want map[string]string) {
	t.Helper()
	for _, id := range h.IDs {
		for k, v := range want {
			if r := get(t, h, id, k, config.LevelLinearizable); r.Err != nil || string(r.Value) != v {
				t.Fatalf("%s read at node %d: %+v, want %q", k, id, r, v)
			}
		}
	}
}

// A split founds the right-hand group from the left one's state at the split entry (same
// members, the data already in storage, no record rewritten), and a merge freezes the
// right-hand group and widens the left one over it; every acknowledged write stays readable
// and writes to either side commit throughout.
func TestSplitAndMergeGroups(t *testing.T) {
	h := cluster(t, 3, 1, nil)
	want := map[string]string{}
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		put(t, h, uint32(i%3)+1, k, "v1")
		want[k] = "v1"
	}
	repartitioned(t, h, func(ks *placement.Keyspace) (*placement.Keyspace, error) { return ks.Split(0, []byte("k20")) })
	for i := range 40 { // writes on both sides while the nodes apply the split
		k := fmt.Sprintf("k%02d", i)
		put(t, h, uint32(i%3)+1, k, "v2")
		want[k] = "v2"
	}
	settle(h, 2*time.Second)
	for _, id := range h.IDs {
		gs := raftEngine(h, id).Groups()
		slices.SortFunc(gs, func(a, b raft.GroupStatus) int { return bytes.Compare(a.Start, b.Start) })
		if len(gs) != 2 || !bytes.Equal(gs[0].End, []byte("k20")) || !bytes.Equal(gs[1].Start, []byte("k20")) || gs[1].Partition != 1 {
			t.Fatalf("node %d after the split: groups %+v, want [\"\", k20) and [k20, end) as partition 1", id, gs)
		}
		if n := raftEngine(h, id).Counters().Splits.Load(); n != 1 {
			t.Fatalf("node %d applied %d splits, want 1", id, n)
		}
	}
	if leaderOfPart(h, 1) == 0 {
		t.Fatal("the group founded by the split has no leader")
	}
	readAll(t, h, want)

	repartitioned(t, h, func(ks *placement.Keyspace) (*placement.Keyspace, error) { return ks.Merge(0) })
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		put(t, h, uint32(i%3)+1, k, "v3")
		want[k] = "v3"
	}
	settle(h, 3*time.Second)
	for _, id := range h.IDs {
		gs := raftEngine(h, id).Groups()
		if len(gs) != 1 || gs[0].Partition != 0 || len(gs[0].End) != 0 {
			t.Fatalf("node %d after the merge: groups %+v, want one group over the whole keyspace", id, gs)
		}
		c := raftEngine(h, id).Counters()
		if c.Freezes.Load() != 1 || c.Merges.Load() != 1 {
			t.Fatalf("node %d: %d freezes and %d merges applied, want 1 and 1", id, c.Freezes.Load(), c.Merges.Load())
		}
	}
	readAll(t, h, want)
}

// A node that was cut off while a split and the merge after it happened catches up from the
// leader (log or snapshot) and ends with the same single group and every write.
func TestSplitAndMergeWhileAFollowerIsCutOff(t *testing.T) {
	h := cluster(t, 3, 1, map[string]string{"log_retain": "10"})
	want := map[string]string{}
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		put(t, h, 1, k, "a")
		want[k] = "a"
	}
	lagging := uint32(3)
	if leaderOfPart(h, 0) == lagging {
		lagging = 2
	}
	for _, id := range h.IDs {
		if id != lagging {
			h.Cut[[2]uint32{id, lagging}], h.Cut[[2]uint32{lagging, id}] = true, true
		}
	}
	repartitioned(t, h, func(ks *placement.Keyspace) (*placement.Keyspace, error) { return ks.Split(0, []byte("k10")) })
	settle(h, 2*time.Second)
	leader := leaderOfPart(h, 0)
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		put(t, h, leader, k, "b")
		want[k] = "b"
	}
	repartitioned(t, h, func(ks *placement.Keyspace) (*placement.Keyspace, error) { return ks.Merge(0) })
	settle(h, 2*time.Second)
	h.Cut = map[[2]uint32]bool{}
	settle(h, 5*time.Second)
	for _, id := range h.IDs {
		if gs := raftEngine(h, id).Groups(); len(gs) != 1 || len(gs[0].End) != 0 {
			t.Fatalf("node %d: groups %+v, want one group over the whole keyspace", id, gs)
		}
	}
	readAll(t, h, want)
}
