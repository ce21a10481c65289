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

// fillPartition writes keys with several versions, tombstones and awkward bytes into
// (ks, part) and returns the records written.
func fillPartition(t *testing.T, e *Engine, ks string, part uint32, nkeys int) []Record {
	t.Helper()
	var all []Record
	for i := 0; i < nkeys; i++ {
		key := fmt.Sprintf("key\x00%03d\xff", i)
		nv := 1 + i%4
		for v := 0; v < nv; v++ {
			r := rec(ks, part, key, int64(100+v), fmt.Sprintf("%s/%d/v%d", ks, part, v))
			if i%5 == 0 && v == nv-1 {
				r = tomb(ks, part, key, int64(100+v))
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

func versionsOf(t *testing.T, e *Engine, ks string, part uint32) []Record {
	t.Helper()
	var out []Record
	for _, r := range scanAll(t, e, ks, part, nil, nil, 0) {
		vs, err := e.Versions(ks, part, r.Key)
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
	fillPartition(t, src, "ks", 6, 200)
	fillPartition(t, src, "ks", 5, 20) // neighbours must not travel along
	fillPartition(t, src, "ks", 7, 20)
	fillPartition(t, src, "ks\x00", 6, 20)
	// Some data on the destination in other partitions must stay untouched.
	other := fillPartition(t, dst, "ks", 7, 10)

	path := filepath.Join(filepath.Dir(dirA), "p6.sst")
	stats, err := src.ExportPartition("ks", 6, path)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Keys != 200 || stats.Versions != 50*(1+2+3+4) || stats.Bytes <= 0 {
		t.Fatalf("ExportStats = %+v", stats)
	}
	// Ship the file between nodes (the transport's job in production).
	dstPath := filepath.Join(filepath.Dir(dirB), "p6.sst")
	if err := vfs.CopyAcrossFS(fsA, path, fsB, dstPath); err != nil {
		t.Fatal(err)
	}
	istats, err := dst.IngestPartition(dstPath)
	if err != nil {
		t.Fatal(err)
	}
	if istats != stats {
		t.Fatalf("IngestStats = %+v, ExportStats = %+v", istats, stats)
	}
	if _, err := fsB.Stat(dstPath); err == nil {
		t.Fatalf("ingested file %s still exists; Pebble should have moved it", dstPath)
	}
	sameRecords(t, "versions after ingest", versionsOf(t, dst, "ks", 6), versionsOf(t, src, "ks", 6))
	sameRecords(t, "scan after ingest", scanAll(t, dst, "ks", 6, nil, nil, 0), scanAll(t, src, "ks", 6, nil, nil, 0))
	for _, loc := range []struct {
		ks   string
		part uint32
	}{{"ks", 5}, {"ks\x00", 6}} {
		if got := scanAll(t, dst, loc.ks, loc.part, nil, nil, 0); len(got) != 0 {
			t.Fatalf("partition %q/%d bled into the snapshot: %d keys", loc.ks, loc.part, len(got))
		}
	}
	if got := versionsOf(t, dst, "ks", 7); len(got) != len(other) {
		t.Fatalf("destination partition 7 has %d versions, want %d", len(got), len(other))
	}
	// New writes on top of ingested data follow the usual rules.
	mustApply(t, dst, true, rec("ks", 6, "key\x00000\xff", 1000, "after"))
	if r, _ := mustGet(t, dst, "ks", 6, "key\x00000\xff"); string(r.Value) != "after" {
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

func TestIngestIntoNonEmptyPartitionFails(t *testing.T) {
	fs := vfs.NewMem()
	src := openTest(t, fs, "a/db")
	dst := openTest(t, fs, "b/db")
	want := fillPartition(t, src, "ks", 1, 30)
	mustApply(t, dst, true, rec("ks", 1, "already-here", 1, "x"))

	if _, err := src.ExportPartition("ks", 1, "p1.sst"); err != nil {
		t.Fatal(err)
	}
	_, err := dst.IngestPartition("p1.sst")
	if !errors.Is(err, ErrPartitionNotEmpty) {
		t.Fatalf("IngestPartition into a non-empty partition = %v, want ErrPartitionNotEmpty", err)
	}
	if _, err := fs.Stat("p1.sst"); err != nil {
		t.Fatalf("rejected snapshot file was removed: %v", err)
	}
	// The caller deletes the partition first, then the ingest succeeds.
	if err := dst.DeletePartition("ks", 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.IngestPartition("p1.sst"); err != nil {
		t.Fatalf("IngestPartition after DeletePartition: %v", err)
	}
	if got := versionsOf(t, dst, "ks", 1); len(got) != len(want) {
		t.Fatalf("after ingest: %d versions, want %d", len(got), len(want))
	}
	if _, found := mustGet(t, dst, "ks", 1, "already-here"); found {
		t.Fatal("deleted key reappeared after ingest")
	}
}

func TestExportIngestEmptyPartition(t *testing.T) {
	fs := vfs.NewMem()
	src := openTest(t, fs, "a/db")
	dst := openTest(t, fs, "b/db")
	fillPartition(t, src, "ks", 1, 5)
	stats, err := src.ExportPartition("ks", 2, "empty.sst")
	if err != nil {
		t.Fatal(err)
	}
	if stats.Keys != 0 || stats.Versions != 0 {
		t.Fatalf("empty export stats = %+v", stats)
	}
	istats, err := dst.IngestPartition("empty.sst")
	if err != nil {
		t.Fatalf("ingest of an empty snapshot: %v", err)
	}
	if istats.Versions != 0 {
		t.Fatalf("ingest stats = %+v", istats)
	}
	if got := scanAll(t, dst, "ks", 2, nil, nil, 0); len(got) != 0 {
		t.Fatalf("empty ingest produced %d keys", len(got))
	}
}

// TestIngestSurvivesCrash: an ingested partition is durable once IngestPartition returns.
func TestIngestSurvivesCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	src := openTest(t, fs, "a/db")
	dst := openTest(t, fs, "b/db")
	fillPartition(t, src, "ks", 3, 40)
	if _, err := src.ExportPartition("ks", 3, "p3.sst"); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.IngestPartition("p3.sst"); err != nil {
		t.Fatal(err)
	}
	want := versionsOf(t, src, "ks", 3)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	dst2 := openTest(t, crashed, "b/db")
	sameRecords(t, "versions after crash", versionsOf(t, dst2, "ks", 3), want)
}

// TestExportIsASnapshot: writes after ExportPartition returns are not in the file, and the
// file holds exactly the versions visible when it was taken.
func TestExportIsASnapshot(t *testing.T) {
	fs := vfs.NewMem()
	src := openTest(t, fs, "a/db")
	dst := openTest(t, fs, "b/db")
	fillPartition(t, src, "ks", 1, 10)
	want := versionsOf(t, src, "ks", 1)
	if _, err := src.ExportPartition("ks", 1, "p.sst"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, src, true, rec("ks", 1, "later", 1, "x"))
	if _, err := dst.IngestPartition("p.sst"); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "ingested versions", versionsOf(t, dst, "ks", 1), want)
}

// TestIngestRejectsForeignFiles: files mixing partitions or holding non-data keys are refused
// before anything reaches the store.
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
	k1 := encodeDataKey(nil, "ks", 1, []byte("a"), hlc.Version{WallNanos: 1})
	k2 := encodeDataKey(nil, "ks", 2, []byte("a"), hlc.Version{WallNanos: 1})
	write("mixed.sst", k1, k2)
	if _, err := e.IngestPartition("mixed.sst"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ingest of mixed partitions = %v, want ErrCorrupt", err)
	}
	write("meta.sst", []byte("mnode"))
	if _, err := e.IngestPartition("meta.sst"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ingest of a meta key = %v, want ErrCorrupt", err)
	}
	if _, err := e.IngestPartition("missing.sst"); err == nil {
		t.Fatal("ingest of a missing file succeeded")
	}
	for _, part := range []uint32{1, 2} {
		if got := scanAll(t, e, "ks", part, nil, nil, 0); len(got) != 0 {
			t.Fatalf("rejected file leaked %d keys into partition %d", len(got), part)
		}
	}
}
