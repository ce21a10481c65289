package storage

import (
	"bytes"
	"errors"
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

func put(t *testing.T, e *Engine, ks string, key, value string, wall int64) {
	t.Helper()
	if err := e.Apply([]Record{{Keyspace: ks, Key: []byte(key), Value: []byte(value), Version: hlc.Version{WallNanos: wall, NodeID: 1}}}, true); err != nil {
		t.Fatal(err)
	}
}

// A partition moves between engines as a staged file copied in chunks, together with raw
// state read from the same snapshot; the receiver's old data of that partition (its key
// range) is replaced, other partitions (the keys right next to its bounds included) are
// untouched, and the staged file is gone afterwards.
func TestStagedSnapshotReplacesPartition(t *testing.T) {
	src, dst := openMem(t), openMem(t)
	p1 := partSpan("ks", 1)
	for i := range 300 {
		put(t, src, "ks", partKey(1, fmt.Sprintf("k%03d", i)), fmt.Sprintf("v%d", i), int64(100+i))
	}
	// Source data outside p1 stays behind.
	put(t, src, "ks", "p1", "below", 1)
	put(t, src, "ks", "p2/", "at end", 1)
	put(t, src, "ks\x00", "p1/k000", "other keyspace", 1)
	if err := src.ApplyBatch(nil, []RawOp{{Key: []byte("state"), Value: []byte("applied=7")}}, true); err != nil {
		t.Fatal(err)
	}
	put(t, dst, "ks", "p1/stale", "old", 1)
	put(t, dst, "ks", "p1/", "old at start", 1)
	kept := []string{"p1", "p2/", "p2/other", ""}
	for _, k := range kept {
		put(t, dst, "ks", k, "kept", 1)
	}

	stats, vals, err := src.ExportSpanState(p1, "snap-1", [][]byte{[]byte("state"), []byte("absent")})
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
	var checked []Record
	cstats, err := dst.CheckStaged("in-1", p1, func(r Record) { checked = append(checked, r) })
	if err != nil || cstats.Keys != 300 || cstats.Versions != 300 || len(checked) != 300 {
		t.Fatalf("CheckStaged = %+v, %d records, %v", cstats, len(checked), err)
	}
	if err := dst.ReplaceSpan(p1, "in-1", before, after); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := dst.Scan(p1, 0, func(r Record) bool { got = append(got, string(r.Key)); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 || got[0] != "p1/k000" || got[299] != "p1/k299" {
		t.Fatalf("after replace: %d keys, %q", len(got), got)
	}
	for _, k := range kept {
		if r, found, _ := dst.Get("ks", []byte(k)); !found || string(r.Value) != "kept" {
			t.Fatalf("key %q outside the partition was lost", k)
		}
	}
	if n := len(scanAll(t, dst, KeyspaceSpan("ks\x00"), 0)); n != 0 {
		t.Fatalf("another keyspace's data came along: %d keys", n)
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
	p3, p4 := partSpan("ks", 3), partSpan("ks", 4)
	put(t, src, "ks", "p3/a", "1", 1)
	put(t, src, "ks", "p4", "1", 1) // a prefix of p4's Start: still p3's
	if _, _, err := src.ExportSpanState(p3, "s", nil); err != nil {
		t.Fatal(err)
	}
	b, err := src.ReadStaged("s", 0, MaxStagedChunk)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.WriteStaged("s", 0, b); err != nil {
		t.Fatal(err)
	}
	put(t, dst, "ks", "p4/mine", "1", 1)
	// The file holds p3's keys: it does not check as, or replace, p4, nor a span holding
	// only part of it.
	for _, span := range []Span{p4, {Keyspace: "ks", Start: []byte("p3/"), End: []byte("p4")}, {Keyspace: "ks\x00", Start: []byte("p3/"), End: []byte("p4/")}} {
		if _, err := dst.CheckStaged("s", span, nil); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("CheckStaged of p3's file as %s = %v, want ErrCorrupt", span, err)
		}
		if err := dst.ReplaceSpan(span, "s", []RawOp{{Key: []byte("marker"), Value: []byte("x")}}, nil); err == nil {
			t.Fatalf("a file of partition 3 replaced %s", span)
		}
	}
	if _, found, _ := dst.Get("ks", []byte("p4/mine")); !found {
		t.Fatal("a refused replacement deleted data")
	}
	if _, found, _ := dst.GetRaw([]byte("marker")); found {
		t.Fatal("a refused replacement applied its before ops")
	}
	if st, err := dst.CheckStaged("s", p3, nil); err != nil || st.Keys != 2 {
		t.Fatalf("CheckStaged of p3's file as p3 = %+v, %v", st, err)
	}
	// With no file, ReplaceSpan only deletes the span (a replica that left its group).
	put(t, dst, "ks", "p4", "1", 1)
	put(t, dst, "ks", "p5/", "1", 1)
	if err := dst.ReplaceSpan(p4, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := dst.Get("ks", []byte("p4/mine")); found {
		t.Fatal("ReplaceSpan without a file kept the span's data")
	}
	for _, k := range []string{"p4", "p5/"} {
		if _, found, _ := dst.Get("ks", []byte(k)); !found {
			t.Fatalf("ReplaceSpan of p4 deleted %q", k)
		}
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
