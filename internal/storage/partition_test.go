package storage

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/internal/hlc"
)

// fillPartition writes nkeys keys prefix+"key\x00NNN\xff" (all inside the span starting at
// prefix) with several versions, tombstones and awkward bytes into keyspace ks and returns
// the records written.
func fillPartition(t *testing.T, e *Engine, ks, prefix string, nkeys int) []Record {
	t.Helper()
	var all []Record
	for i := 0; i < nkeys; i++ {
		key := fmt.Sprintf("%skey\x00%03d\xff", prefix, i)
		nv := 1 + i%4
		for v := 0; v < nv; v++ {
			r := rec(ks, key, int64(100+v), fmt.Sprintf("%s/%s/v%d", ks, prefix, v))
			if i%5 == 0 && v == nv-1 {
				r = tomb(ks, key, int64(100+v))
			}
			all = append(all, r)
		}
	}
	// Apply newest first in several batches, to mix memtable and sstable data.
	for i := len(all); i > 0; i -= 37 {
		mustApply(t, e, i%2 == 0, all[max(0, i-37):i]...)
	}
	return all
}

// fillKeys writes two versions (a value, then a newer tombstone for every third key) of each
// of keys into ks: keys placed on purpose at or next to a span's bounds.
func fillKeys(t *testing.T, e *Engine, ks string, keys ...string) []Record {
	t.Helper()
	var all []Record
	for i, k := range keys {
		newer := rec(ks, k, 51, fmt.Sprintf("%s/%q/v51", ks, k))
		if i%3 == 2 {
			newer = tomb(ks, k, 51)
		}
		all = append(all, rec(ks, k, 50, fmt.Sprintf("%s/%q/v50", ks, k)), newer)
	}
	mustApply(t, e, true, all...)
	return all
}

// versionsOf returns every version of every key of span, in key order, newest first.
func versionsOf(t *testing.T, e *Engine, span Span) []Record {
	t.Helper()
	var out []Record
	for _, r := range scanAll(t, e, span, 0) {
		vs, err := e.Versions(span.Keyspace, r.Key)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, vs...)
	}
	return out
}

func sameRecords(t *testing.T, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !sameRecord(got[i], want[i]) {
			t.Fatalf("%s[%d] = %s, want %s", what, i, fmtRec(got[i]), fmtRec(want[i]))
		}
	}
}

func testExportIngestRoundTrip(t *testing.T, fsA vfs.FS, dirA string, fsB vfs.FS, dirB string) {
	src := openTest(t, fsA, dirA)
	dst := openTest(t, fsB, dirB)
	// Keyspace "ks" is split like a placement map: the first partition from the empty key,
	// p5, p6 (the one moved), and the last one, without an end.
	first := Span{Keyspace: "ks", End: []byte("p5/")}
	p5, p6 := partSpan("ks", 5), partSpan("ks", 6)
	last := Span{Keyspace: "ks", Start: []byte("p7/")}

	fillPartition(t, src, "ks", "p6/", 200)
	// Inside p6 at its edges: its Start itself, 0x00 bytes right after it, and keys that are
	// prefixes of its End ("p7" < "p7/").
	fillKeys(t, src, "ks", "p6/", "p6/\x00", "p6/\x00\xff", "p7", "p7\x00")
	// Neighbours must not travel along: p5 (with keys that are prefixes of p6's Start), the
	// first partition, the last one (starting with a key equal to p6's End), and the same
	// keys in keyspace "ks\x00".
	fillPartition(t, src, "ks", "p5/", 20)
	fillKeys(t, src, "ks", "p6", "p6\x00", "p6.\xff", "", "\x00")
	fillPartition(t, src, "ks", "p7/", 20)
	fillKeys(t, src, "ks", "p7/", "p7/\x00", "\xff\xff")
	fillPartition(t, src, "ks\x00", "p6/", 20)
	fillKeys(t, src, "ks\x00", "p6/", "p7")
	// Some data on the destination in other partitions, right at p6's bounds, must stay
	// untouched and must not count as data of p6.
	fillPartition(t, dst, "ks", "p7/", 10)
	fillKeys(t, dst, "ks", "p6", "p7/", "")
	dstBefore := versionsOf(t, dst, KeyspaceSpan("ks"))

	path := filepath.Join(filepath.Dir(dirA), "p6.sst")
	stats, err := src.ExportSpan(p6, path)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Keys != 200+5 || stats.Versions != 50*(1+2+3+4)+5*2 || stats.Bytes <= 0 {
		t.Fatalf("ExportStats = %+v", stats)
	}
	// Ship the file between nodes (the transport's job in production).
	dstPath := filepath.Join(filepath.Dir(dirB), "p6.sst")
	if err := vfs.CopyAcrossFS(fsA, path, fsB, dstPath); err != nil {
		t.Fatal(err)
	}
	istats, err := dst.IngestSpan(p6, dstPath)
	if err != nil {
		t.Fatal(err)
	}
	if istats != stats {
		t.Fatalf("IngestStats = %+v, ExportStats = %+v", istats, stats)
	}
	if _, err := fsB.Stat(dstPath); err == nil {
		t.Fatalf("ingested file %s still exists; Pebble should have moved it", dstPath)
	}
	sameRecords(t, "versions after ingest", versionsOf(t, dst, p6), versionsOf(t, src, p6))
	sameRecords(t, "scan after ingest", scanAll(t, dst, p6, 0), scanAll(t, src, p6, 0))
	// Everything outside p6 on the destination is exactly what was there before.
	var outside []Record
	for _, span := range []Span{first, p5, last} {
		outside = append(outside, versionsOf(t, dst, span)...)
	}
	sameRecords(t, "destination outside p6 after ingest", outside, dstBefore)
	if got := scanAll(t, dst, KeyspaceSpan("ks\x00"), 0); len(got) != 0 {
		t.Fatalf("keyspace \"ks\\x00\" bled into the snapshot: %d keys", len(got))
	}
	// New writes on top of ingested data follow the usual rules.
	mustApply(t, dst, true, rec("ks", "p6/key\x00000\xff", 1000, "after"))
	if r, _ := mustGet(t, dst, "ks", "p6/key\x00000\xff"); string(r.Value) != "after" {
		t.Fatalf("Get after ingest+write = %s", fmtRec(r))
	}
}

func TestExportIngestRoundTripMem(t *testing.T) {
	fs := vfs.NewMem()
	testExportIngestRoundTrip(t, fs, "a/db", fs, "b/db")
}

func TestExportIngestRoundTripAcrossFS(t *testing.T) {
	testExportIngestRoundTrip(t, vfs.NewMem(), "a/db", vfs.NewMem(), "b/db")
}

func TestExportIngestRoundTripRealDir(t *testing.T) {
	dir := t.TempDir()
	testExportIngestRoundTrip(t, vfs.Default, filepath.Join(dir, "a", "db"), vfs.Default, filepath.Join(dir, "b", "db"))
}

// TestExportEdgePartitions: the first partition (empty Start) and the last (End nil) export
// exactly their keys, including the empty key and keys of 0xFF bytes, and nothing of the
// neighbouring keyspaces "k" and "ks\x00".
func TestExportEdgePartitions(t *testing.T) {
	fs := vfs.NewMem()
	src := openTest(t, fs, "a/db")
	first := Span{Keyspace: "ks", End: []byte("p1/")}
	last := Span{Keyspace: "ks", Start: []byte("p1/")}
	wantFirst := fillKeys(t, src, "ks", "", "\x00", "\x00\x00", "p1", "p1.\xff")
	wantLast := fillKeys(t, src, "ks", "p1/", "p1/\x00", "\xff", "\xff\xff\xff")
	for _, ks := range []string{"k", "ks\x00", "ks\x01", "kt", ""} {
		fillKeys(t, src, ks, "", "p1/", "\xff\xff\xff")
	}
	for i, c := range []struct {
		span Span
		want []Record
	}{{first, wantFirst}, {last, wantLast}} {
		path := fmt.Sprintf("edge%d.sst", i)
		stats, err := src.ExportSpan(c.span, path)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Versions != len(c.want) || stats.Keys != len(c.want)/2 {
			t.Fatalf("export %s: %+v, want %d versions", c.span, stats, len(c.want))
		}
		dst := openTest(t, fs, fmt.Sprintf("dst%d/db", i))
		if _, err := dst.IngestSpan(c.span, path); err != nil {
			t.Fatal(err)
		}
		// fillKeys writes versions oldest first; versionsOf is newest first.
		var want []Record
		for j := 0; j < len(c.want); j += 2 {
			want = append(want, c.want[j+1], c.want[j])
		}
		sameRecords(t, "ingested "+c.span.String(), versionsOf(t, dst, KeyspaceSpan("ks")), want)
		for _, ks := range []string{"k", "ks\x00", "ks\x01", "kt", ""} {
			if got := scanAll(t, dst, KeyspaceSpan(ks), 0); len(got) != 0 {
				t.Fatalf("export of %s carried %d keys of keyspace %q", c.span, len(got), ks)
			}
		}
	}
}

func TestIngestIntoNonEmptyPartitionFails(t *testing.T) {
	fs := vfs.NewMem()
	src := openTest(t, fs, "a/db")
	dst := openTest(t, fs, "b/db")
	p1 := partSpan("ks", 1)
	want := fillPartition(t, src, "ks", "p1/", 30)
	// Neighbours on the destination: below p1's Start and at its End. They neither block
	// the ingest nor go with the delete.
	neighbours := fillKeys(t, dst, "ks", "p1", "p2/")

	if _, err := src.ExportSpan(p1, "p1.sst"); err != nil {
		t.Fatal(err)
	}
	// A single version anywhere in the span blocks the ingest, at its Start too.
	for _, k := range []string{"p1/already-here", "p1/", "p2"} {
		mustApply(t, dst, true, rec("ks", k, 1, "x"))
		_, err := dst.IngestSpan(p1, "p1.sst")
		if !errors.Is(err, ErrPartitionNotEmpty) {
			t.Fatalf("IngestSpan into a partition holding %q = %v, want ErrPartitionNotEmpty", k, err)
		}
		if _, err := fs.Stat("p1.sst"); err != nil {
			t.Fatalf("rejected snapshot file was removed: %v", err)
		}
		if err := dst.DeleteSpan(p1, true); err != nil {
			t.Fatal(err)
		}
	}
	// The caller deletes the span first, then the ingest succeeds.
	mustApply(t, dst, true, rec("ks", "p1/already-here", 1, "x"))
	if err := dst.DeleteSpan(p1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.IngestSpan(p1, "p1.sst"); err != nil {
		t.Fatalf("IngestSpan after DeleteSpan: %v", err)
	}
	if got := versionsOf(t, dst, p1); len(got) != len(want) {
		t.Fatalf("after ingest: %d versions, want %d", len(got), len(want))
	}
	for _, k := range []string{"p1/already-here", "p1/", "p2"} {
		if _, found := mustGet(t, dst, "ks", k); found {
			t.Fatalf("deleted key %q reappeared after ingest", k)
		}
	}
	var got []Record
	for _, k := range []string{"p1", "p2/"} {
		vs, err := dst.Versions("ks", []byte(k))
		if err != nil || len(vs) != 2 {
			t.Fatalf("Versions(%q) = %d versions, %v; want 2", k, len(vs), err)
		}
		got = append(got, vs[1], vs[0]) // oldest first, like fillKeys
	}
	sameRecords(t, "neighbours after delete and ingest", got, neighbours)
}

func TestExportIngestEmptyPartition(t *testing.T) {
	fs := vfs.NewMem()
	src := openTest(t, fs, "a/db")
	dst := openTest(t, fs, "b/db")
	// p2 is empty, with data right next to both its bounds.
	fillPartition(t, src, "ks", "p1/", 5)
	fillKeys(t, src, "ks", "p2", "p2.\xff", "p3/", "p3/\x00")
	fillKeys(t, src, "ks\x00", "p2/")
	stats, err := src.ExportSpan(partSpan("ks", 2), "empty.sst")
	if err != nil {
		t.Fatal(err)
	}
	if stats.Keys != 0 || stats.Versions != 0 {
		t.Fatalf("empty export stats = %+v", stats)
	}
	istats, err := dst.IngestSpan(partSpan("ks", 2), "empty.sst")
	if err != nil {
		t.Fatalf("ingest of an empty snapshot: %v", err)
	}
	if istats.Versions != 0 {
		t.Fatalf("ingest stats = %+v", istats)
	}
	if _, err := fs.Stat("empty.sst"); err == nil {
		t.Fatal("the empty snapshot file was not removed")
	}
	if got := scanAll(t, dst, KeyspaceSpan("ks"), 0); len(got) != 0 {
		t.Fatalf("empty ingest produced %d keys", len(got))
	}
}

// TestIngestSurvivesCrash: an ingested partition is durable once IngestSpan returns.
func TestIngestSurvivesCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	src := openTest(t, fs, "a/db")
	dst := openTest(t, fs, "b/db")
	p3 := partSpan("ks", 3)
	fillPartition(t, src, "ks", "p3/", 40)
	if _, err := src.ExportSpan(p3, "p3.sst"); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.IngestSpan(p3, "p3.sst"); err != nil {
		t.Fatal(err)
	}
	want := versionsOf(t, src, p3)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	dst2 := openTest(t, crashed, "b/db")
	sameRecords(t, "versions after crash", versionsOf(t, dst2, p3), want)
}

// TestExportIsASnapshot: writes after ExportSpan returns are not in the file, and the file
// holds exactly the versions visible when it was taken.
func TestExportIsASnapshot(t *testing.T) {
	fs := vfs.NewMem()
	src := openTest(t, fs, "a/db")
	dst := openTest(t, fs, "b/db")
	p1 := partSpan("ks", 1)
	fillPartition(t, src, "ks", "p1/", 10)
	want := versionsOf(t, src, p1)
	if _, err := src.ExportSpan(p1, "p.sst"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, src, true, rec("ks", "p1/later", 1, "x"), rec("ks", "p1/key\x00000\xff", 1000, "x"))
	if _, err := dst.IngestSpan(p1, "p.sst"); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "ingested versions", versionsOf(t, dst, p1), want)
}

// TestIngestRejectsForeignFiles: files holding a record outside the target span (another
// partition's key, a key equal to the span's End, another keyspace's key) or non-data keys
// are refused before anything reaches the store; a key equal to the span's Start is in it.
func TestIngestRejectsForeignFiles(t *testing.T) {
	fs := vfs.NewMem()
	e := openTest(t, fs, "db")
	write := func(path string, keys ...[]byte) {
		t.Helper()
		f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), e.popts.MakeWriterOptions(0, e.db.TableFormat()))
		for _, k := range keys {
			if err := w.Set(k, []byte{valueFlagValue, 'v'}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	v1 := hlc.Version{WallNanos: 1}
	key := func(ks, k string) []byte { return encodeDataKey(nil, ks, []byte(k), v1) }
	p1, p2 := partSpan("ks", 1), partSpan("ks", 2)
	for _, c := range []struct {
		name string
		keys [][]byte
	}{
		{"mixed partitions", [][]byte{key("ks", "p1/a"), key("ks", "p2/a")}},
		{"key equal to End", [][]byte{key("ks", "p1/a"), key("ks", "p2/")}},
		{"key below Start", [][]byte{key("ks", "p1"), key("ks", "p1/a")}},
		{"other keyspace", [][]byte{key("ks\x00", "p1/a")}},
		{"meta key", [][]byte{[]byte("mnode")}},
		{"legacy key", [][]byte{encodeLegacyDataKey(nil, "ks", 1, []byte("p1/a"), v1)}},
	} {
		write("bad.sst", c.keys...)
		if _, err := e.IngestSpan(p1, "bad.sst"); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ingest of %s = %v, want ErrCorrupt", c.name, err)
		}
	}
	if _, err := e.IngestSpan(p1, "missing.sst"); err == nil {
		t.Fatal("ingest of a missing file succeeded")
	}
	for _, ks := range []string{"ks", "ks\x00"} {
		if got := scanAll(t, e, KeyspaceSpan(ks), 0); len(got) != 0 {
			t.Fatalf("rejected files leaked %d keys into keyspace %q", len(got), ks)
		}
	}
	// A file of p1's records, one at its Start and one a prefix of its End, is accepted
	// into p1, and only into spans that hold all of it.
	write("good.sst", key("ks", "p1/"), key("ks", "p2"))
	for _, span := range []Span{p2, {Keyspace: "ks", Start: []byte("p1/\x00"), End: []byte("p2/")}, {Keyspace: "ks", Start: []byte("p1/"), End: []byte("p2")}} {
		if _, err := e.IngestSpan(span, "good.sst"); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ingest of p1's file into %s = %v, want ErrCorrupt", span, err)
		}
	}
	if st, err := e.IngestSpan(p1, "good.sst"); err != nil || st.Keys != 2 {
		t.Fatalf("ingest of p1's file into p1 = %+v, %v", st, err)
	}
	var got []string
	for _, r := range scanAll(t, e, KeyspaceSpan("ks"), 0) {
		got = append(got, string(r.Key))
	}
	if fmt.Sprint(got) != "[p1/ p2]" {
		t.Fatalf("after ingest: keys %q", got)
	}
}
