package storage

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// batchOf returns n records spread over test partitions 0, 1 and 2 (partSpan).
func batchOf(prefix string, n int, wall int64) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = rec("ks", partKey(i%3, fmt.Sprintf("%s-%04d", prefix, i)), wall, fmt.Sprintf("%s-value-%d", prefix, i))
	}
	return recs
}

// present counts how many of recs Get returns with exactly that version and value.
func present(t *testing.T, e *Engine, recs []Record) int {
	t.Helper()
	n := 0
	for _, r := range recs {
		got, found, err := e.Get(r.Keyspace, r.Key)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if found && sameRecord(got, r) {
			n++
		}
	}
	return n
}

// crashAndReopen simulates a power loss that keeps only synced data (UnsyncedDataPercent 0)
// and opens the store again from what survived.
func crashAndReopen(t *testing.T, fs *vfs.MemFS, e *Engine) *Engine {
	t.Helper()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openTest(t, crashed, "data/db")
}

// TestCrashKeepsSyncedApplies is the group-commit durability contract (DESIGN.md section 4
// (storage engine)): once Apply(sync=true) returns, its records survive a crash.
func TestCrashKeepsSyncedApplies(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs, "data/db")
	var synced []Record
	// Enough batches to fill several 256 KiB memtables, so some records live in flushed
	// sstables and some only in the WAL at crash time.
	for b := 0; b < 40; b++ {
		batch := batchOf(fmt.Sprintf("b%02d", b), 64, int64(b+1))
		for i := range batch {
			batch[i].Value = append(batch[i].Value, make([]byte, 200)...)
		}
		mustApply(t, e, true, batch...)
		synced = append(synced, batch...)
	}
	// A tombstone and an out-of-order older version, synced too.
	mustApply(t, e, true, tomb("ks", "p0/b00-0000", 100), rec("ks", "p0/b00-0000", 0, "older"))
	synced[0] = tomb("ks", "p0/b00-0000", 100)

	e2 := crashAndReopen(t, fs, e)
	if got := present(t, e2, synced); got != len(synced) {
		t.Fatalf("%d of %d synced records survived the crash", got, len(synced))
	}
}

// TestCrashMayLoseUnsyncedApplies shows the crash test can tell synced from unsynced writes:
// with UnsyncedDataPercent 0 every write after the last sync is gone. If Apply ignored its
// sync flag (or always synced) this test or the previous one would fail.
func TestCrashMayLoseUnsyncedApplies(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs, "data/db")
	synced := batchOf("synced", 64, 1)
	mustApply(t, e, true, synced...)
	unsynced := batchOf("unsynced", 64, 2)
	mustApply(t, e, false, unsynced...)
	// Before the crash, unsynced writes are visible.
	if got := present(t, e, unsynced); got != len(unsynced) {
		t.Fatalf("only %d of %d unsynced records visible before the crash", got, len(unsynced))
	}

	e2 := crashAndReopen(t, fs, e)
	if got := present(t, e2, synced); got != len(synced) {
		t.Fatalf("%d of %d synced records survived", got, len(synced))
	}
	if got := present(t, e2, unsynced); got == len(unsynced) {
		t.Fatalf("all %d unsynced records survived a crash that keeps no unsynced data; "+
			"the crash simulation cannot detect a missing sync", got)
	}
}

// TestCrashKeepsSyncedMetaAndDeletes covers PutMeta(sync=true) and DeleteSpan(sync=true).
func TestCrashKeepsSyncedMetaAndDeletes(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs, "data/db")
	mustApply(t, e, true, batchOf("x", 30, 1)...)
	if err := e.PutMeta("node-id", []byte("n7"), true); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteSpan(partSpan("ks", 1), true); err != nil {
		t.Fatal(err)
	}
	e2 := crashAndReopen(t, fs, e)
	if v, ok, err := e2.GetMeta("node-id"); !ok || err != nil || string(v) != "n7" {
		t.Fatalf("GetMeta after crash = %q %t %v", v, ok, err)
	}
	if got := scanAll(t, e2, partSpan("ks", 1), 0); len(got) != 0 {
		t.Fatalf("deleted partition has %d keys after crash", len(got))
	}
	for _, p := range []int{0, 2} {
		if got := scanAll(t, e2, partSpan("ks", p), 0); len(got) != 10 {
			t.Fatalf("partition %d has %d keys after crash, want 10", p, len(got))
		}
	}
}

// TestReopenRealDirectory runs the same contract on the OS filesystem.
func TestReopenRealDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "db")
	e, err := Open(dir, Options{CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	recs := batchOf("real", 64, 5)
	mustApply(t, e, true, recs...)
	mustApply(t, e, true, tomb("ks", "p0/real-0000", 6))
	recs[0] = tomb("ks", "p0/real-0000", 6)
	if err := e.PutMeta("schema", []byte("v1"), true); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := openTest(t, vfs.Default, dir)
	if got := present(t, e2, recs); got != len(recs) {
		t.Fatalf("%d of %d records present after reopen", got, len(recs))
	}
	if v, ok, _ := e2.GetMeta("schema"); !ok || string(v) != "v1" {
		t.Fatalf("meta after reopen = %q %t", v, ok)
	}
}

// TestCrashSyncBarrier: Apply(nil, true) fsyncs the WAL, so earlier unsynced applies survive.
// (Pebble skips the WAL for an empty batch; without the engine's LogData record this fails.)
func TestCrashSyncBarrier(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs, "data/db")
	unsynced := batchOf("u", 64, 1)
	mustApply(t, e, false, unsynced...)
	mustApply(t, e, true)  // barrier
	mustApply(t, e, false) // no-op
	e2 := crashAndReopen(t, fs, e)
	if got := present(t, e2, unsynced); got != len(unsynced) {
		t.Fatalf("%d of %d records applied before the barrier survived", got, len(unsynced))
	}
}
