package storage

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/internal/hlc"
)

func openMem(t *testing.T) *Engine {
	t.Helper()
	e, err := Open("/data", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func put(t *testing.T, e *Engine, ks string, p uint32, key, value string, wall int64) {
	t.Helper()
	if err := e.Apply([]Record{{Keyspace: ks, Partition: p, Key: []byte(key), Value: []byte(value), Version: hlc.Version{WallNanos: wall, NodeID: 1}}}, true); err != nil {
		t.Fatal(err)
	}
}

// A partition moves between engines as a staged file copied in chunks, together with raw
// state read from the same snapshot; the receiver's old data of that partition is replaced,
// other partitions are untouched, and the staged file is gone afterwards.
func TestStagedSnapshotReplacesPartition(t *testing.T) {
	src, dst := openMem(t), openMem(t)
	for i := range 300 {
		put(t, src, "ks", 1, fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i), int64(100+i))
	}
	if err := src.ApplyBatch(nil, []RawOp{{Key: []byte("state"), Value: []byte("applied=7")}}, true); err != nil {
		t.Fatal(err)
	}
	put(t, dst, "ks", 1, "stale", "old", 1)
	put(t, dst, "ks", 2, "other", "kept", 1)

	stats, vals, err := src.ExportPartitionState("ks", 1, "snap-1", [][]byte{[]byte("state"), []byte("absent")})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Keys != 300 || string(vals[0]) != "applied=7" || vals[1] != nil {
		t.Fatalf("export: %+v, state %q %q", stats, vals[0], vals[1])
	}
	size, found, err := src.StagedSize("snap-1")
	if err != nil || !found || size != stats.Bytes {
		t.Fatalf("staged size %d %v %v, want %d", size, found, err, stats.Bytes)
	}
	const chunk = 1000
	for off := int64(0); off < size; off += chunk {
		b, err := src.ReadStaged("snap-1", off, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.WriteStaged("in-1", off, b); err != nil {
			t.Fatal(err)
		}
	}
	before := []RawOp{{Key: []byte("marker"), Value: []byte("installing")}}
	after := []RawOp{{Key: []byte("marker"), Delete: true}, {Key: []byte("state"), Value: vals[0]}}
	if err := dst.ReplacePartition("ks", 1, "in-1", before, after); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := dst.Scan("ks", 1, nil, nil, 0, func(r Record) bool { got = append(got, string(r.Key)); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 || got[0] != "k000" {
		t.Fatalf("after replace: %d keys, first %q", len(got), got)
	}
	if _, found, _ := dst.Get("ks", 2, []byte("other")); !found {
		t.Fatal("another partition's data was lost")
	}
	if v, ok, _ := dst.GetRaw([]byte("state")); !ok || !bytes.Equal(v, []byte("applied=7")) {
		t.Fatalf("state after replace: %q %v", v, ok)
	}
	if _, ok, _ := dst.GetRaw([]byte("marker")); ok {
		t.Fatal("marker still set")
	}
	if _, found, _ := dst.StagedSize("in-1"); found {
		t.Fatal("staged file left behind")
	}
}

// A staged file of another partition is refused before anything changes; bad names and
// chunk sizes are refused.
func TestStagedSnapshotRefusals(t *testing.T) {
	src, dst := openMem(t), openMem(t)
	put(t, src, "ks", 3, "a", "1", 1)
	if _, _, err := src.ExportPartitionState("ks", 3, "s", nil); err != nil {
		t.Fatal(err)
	}
	b, err := src.ReadStaged("s", 0, MaxStagedChunk)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.WriteStaged("s", 0, b); err != nil {
		t.Fatal(err)
	}
	put(t, dst, "ks", 4, "mine", "1", 1)
	if err := dst.ReplacePartition("ks", 4, "s", nil, nil); err == nil {
		t.Fatal("a file of partition 3 replaced partition 4")
	}
	if _, found, _ := dst.Get("ks", 4, []byte("mine")); !found {
		t.Fatal("a refused replacement deleted data")
	}
	for _, name := range []string{"", "../x", "a/b", "x.ingest"} {
		if err := dst.WriteStaged(name, 0, []byte("x")); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if _, err := dst.ReadStaged("s", 0, MaxStagedChunk+1); err == nil {
		t.Error("oversized read accepted")
	}
}
