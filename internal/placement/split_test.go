package placement

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"meridian/internal/config"
)

// TestSplitPointsBoundaries: a keyspace with split points starts its partitions exactly
// there, and keys land by range.
func TestSplitPointsBoundaries(t *testing.T) {
	c := testCluster(t, 2, 1, 0)
	ks := config.Keyspace{Name: "sp", Protocol: "quorum", ReplicasPerRegion: 1, SplitPoints: []string{"user2", "user5", "user8"}}
	if err := config.ValidateKeyspace(&ks, c); err != nil {
		t.Fatal(err)
	}
	if ks.Partitions != 4 {
		t.Fatalf("partitions = %d, want 4", ks.Partitions)
	}
	k, err := BuildKeyspace(ks, c.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Check(); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]uint32{"a": 0, "user1": 0, "user2": 1, "user49": 1, "user5": 2, "user8": 3, "zzz": 3} {
		if got := k.Lookup([]byte(key)).ID; got != want {
			t.Errorf("key %q in partition %d, want %d", key, got, want)
		}
	}
	for _, bad := range [][]string{{"b", "a"}, {"a", "a"}, {""}} {
		ks := config.Keyspace{Name: "bad", Protocol: "quorum", SplitPoints: bad}
		if err := config.ValidateKeyspace(&ks, c); err == nil {
			t.Errorf("split points %q accepted", bad)
		}
	}
	ks2 := config.Keyspace{Name: "bad", Protocol: "quorum", SplitPoints: []string{"m"}, Partitions: 5}
	if err := config.ValidateKeyspace(&ks2, c); err == nil || !strings.Contains(err.Error(), "split points make 2 partitions") {
		t.Errorf("split points disagreeing with partitions: %v", err)
	}
}

// TestSplitAndMergeKeepEveryKeysReplicas applies random splits and merges and checks after
// each that the structure holds (Check), that every key keeps exactly the replicas it had
// (nothing moves), that IDs are never reused, and that a merge of partitions on different
// replicas is refused.
func TestSplitAndMergeKeepEveryKeysReplicas(t *testing.T) {
	m, err := Build(testCluster(t, 2, 1, 4))
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := m.Keyspace("ks")
	rng := rand.New(rand.NewPCG(1, 2))
	probe := make([][]byte, 200)
	for i := range probe {
		probe[i] = []byte{byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}
	}
	replicasOf := func(k *Keyspace) [][]uint32 {
		out := make([][]uint32, len(probe))
		for i, key := range probe {
			out[i] = slices.Clone(k.Lookup(key).Replicas)
		}
		return out
	}
	want := replicasOf(ks)
	used := map[uint32]bool{}
	for _, p := range ks.Partitions {
		used[p.ID] = true
	}
	splits, merges, refused := 0, 0, 0
	for step := range 2000 {
		var next *Keyspace
		if rng.IntN(2) == 0 && len(ks.Partitions) < 64 {
			key := []byte{byte(rng.IntN(256)), byte(rng.IntN(256))}
			p := ks.Lookup(key)
			next, err = ks.Split(p.ID, key, uint64(step+1))
			if bytes.Equal(p.Start, key) {
				if err == nil {
					t.Fatalf("step %d: split at a partition's own start accepted", step)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d: split %d at %x: %v", step, p.ID, key, err)
			}
			newID := next.Lookup(key).ID
			if used[newID] {
				t.Fatalf("step %d: split reused ID %d", step, newID)
			}
			used[newID] = true
			splits++
		} else if len(ks.Partitions) > 1 {
			i := rng.IntN(len(ks.Partitions) - 1)
			l, r := ks.Partitions[i], ks.Partitions[i+1]
			next, err = ks.Merge(l.ID, uint64(step+1))
			if !sameMembers(l.Replicas, r.Replicas) {
				if err == nil {
					t.Fatalf("step %d: merge of %d %v and %d %v accepted", step, l.ID, l.Replicas, r.ID, r.Replicas)
				}
				refused++
				continue
			}
			if err != nil {
				t.Fatalf("step %d: merge %d: %v", step, l.ID, err)
			}
			merges++
		} else {
			continue
		}
		if err := next.Check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if got := replicasOf(next); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("step %d: a key changed replicas", step)
		}
		ks = next
	}
	if splits == 0 || merges == 0 || refused == 0 {
		t.Fatalf("splits %d, merges %d, refused merges %d: every case must happen", splits, merges, refused)
	}
	t.Logf("%d splits, %d merges, %d merges refused; %d partitions now", splits, merges, refused, len(ks.Partitions))
}

func TestSplitAndMergeRefuseBadInput(t *testing.T) {
	m, err := Build(testCluster(t, 1, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := m.Keyspace("ks")
	for _, c := range []struct {
		id  uint32
		key string
	}{{9, "x"}, {0, ""}, {1, "\x00"}, {0, string(ks.Partitions[1].Start)}} {
		if _, err := ks.Split(c.id, []byte(c.key), 1); err == nil {
			t.Errorf("split %d at %q accepted", c.id, c.key)
		}
	}
	if _, err := ks.Merge(1, 1); err == nil || !strings.Contains(err.Error(), "last one") {
		t.Errorf("merge of the last partition: %v", err)
	}
	if _, err := ks.Merge(7, 1); err == nil {
		t.Error("merge of an unknown partition accepted")
	}
	// A generation must order after the partition's last split, merge and move.
	split, err := ks.Split(0, []byte{0x10}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := split.Split(0, []byte{0x08}, 5); err == nil || !strings.Contains(err.Error(), "not newer") {
		t.Errorf("split at a generation not above the partition's: %v", err)
	}
	if _, err := split.Merge(0, 4); err == nil || !strings.Contains(err.Error(), "not newer") {
		t.Errorf("merge at a generation not above the partition's: %v", err)
	}
	if _, err := split.StartMove(0, Move{ID: 5, Add: 99, Remove: split.Partitions[0].Replicas[0], Source: split.Partitions[0].Replicas[0]}); err == nil || !strings.Contains(err.Error(), "split or merge") {
		t.Errorf("move not newer than the split: %v", err)
	}
	// The original is untouched by a split (keyspaces are immutable once shared).
	before := fmt.Sprint(ks.Partitions)
	if _, err := ks.Split(0, []byte{0x10}, 1); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ks.Partitions) != before {
		t.Fatal("Split modified its receiver")
	}
}
