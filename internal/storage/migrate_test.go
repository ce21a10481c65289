package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/internal/hlc"
)

// encodeLegacyDataKey builds a data key of the layout before partitions became key ranges:
// 'd' | escaped(keyspace) | partition (uint32 big-endian) | escaped(userKey) | ^version.
// Only tests write it; Open migrates such keys (migrate.go).
func encodeLegacyDataKey(dst []byte, keyspace string, partition uint32, userKey []byte, v hlc.Version) []byte {
	dst = append(dst, legacyDataKeyTag)
	dst = appendEscapedString(dst, keyspace)
	dst = binary.BigEndian.AppendUint32(dst, partition)
	dst = appendEscaped(dst, userKey)
	return appendInvertedVersion(dst, v)
}

// legacyVersion is one version as an old store held it: in a partition.
type legacyVersion struct {
	part uint32
	rec  Record
}

// legacyVersions builds the contents of an old store: several keyspaces (two that differ by
// a trailing 0x00), partitions whose numbers contain 0x00 0x01 and 0xFF bytes, keys with 0x00
// and 0xFF bytes, the empty key, several versions per key, tombstones, one key with
// thousands of versions, and one key held by two partitions (a copy left behind by a move:
// one version in both, one only in each). More than two migration batches in all.
func legacyVersions() []legacyVersion {
	var out []legacyVersion
	add := func(part uint32, ks, key string, wall int64, tombstone bool) {
		r := Record{Keyspace: ks, Key: []byte(key), Version: hlc.Version{WallNanos: wall, Logical: uint32(wall % 3), NodeID: part % 5}}
		if tombstone {
			r.Tombstone = true
		} else {
			r.Value = []byte(fmt.Sprintf("%s|%q|%d|%d", ks, key, wall, part))
			if wall%7 == 0 {
				r.Value = []byte{} // an empty live value stays distinct from a tombstone
			}
		}
		out = append(out, legacyVersion{part, r})
	}
	parts := []uint32{0, 1, 7, 0x00010000, 0x00ff0001, 0xFFFFFFFF}
	for _, ks := range []string{"ks", "ks\x00", "", "other"} {
		for pi, part := range parts {
			for i := 0; i < 70; i++ {
				key := fmt.Sprintf("p%d/key\x00%03d\xff", pi, i)
				nv := 1 + i%5
				for v := 0; v < nv; v++ {
					add(part, ks, key, int64(10+v), i%4 == 0 && v == nv-1)
				}
			}
		}
		add(0, ks, "", 5, false)
		add(0, ks, "\x00", 5, false)
		add(0xFFFFFFFF, ks, "\xff\xff", 5, false)
	}
	for w := int64(1); w <= 4000; w++ {
		add(1, "ks", "hot", w, w%500 == 0)
	}
	// The same key in two partitions: the shared version carries the same bytes in both
	// (a version's content never differs between copies).
	add(1, "ks", "moved", 1, false)
	add(1, "ks", "moved", 2, false)
	add(2, "ks", "moved", 2, false)
	out[len(out)-1].rec.Value = out[len(out)-2].rec.Value
	add(2, "ks", "moved", 3, true)
	return out
}

// writeLegacy writes versions straight into Pebble in the old layout, synced.
func writeLegacy(t *testing.T, db *pebble.DB, versions []legacyVersion) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	for _, lv := range versions {
		k := encodeLegacyDataKey(nil, lv.rec.Keyspace, lv.part, lv.rec.Key, lv.rec.Version)
		if err := b.Set(k, appendValue(nil, &lv.rec), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// countTagged counts the Pebble keys starting with tag.
func countTagged(t *testing.T, db *pebble.DB, tag byte) int {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{tag}, UpperBound: []byte{tag + 1}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// legacyModel is what the migrated store must hold: every (keyspace, key)'s versions, newest
// first, partitions forgotten.
type legacyModel map[string]map[string][]Record // keyspace -> key -> versions

func modelOf(versions []legacyVersion) (legacyModel, int) {
	m := legacyModel{}
	total := 0
	for _, lv := range versions {
		r := lv.rec
		if m[r.Keyspace] == nil {
			m[r.Keyspace] = map[string][]Record{}
		}
		vs := m[r.Keyspace][string(r.Key)]
		if slices.ContainsFunc(vs, func(o Record) bool { return o.Version == r.Version }) {
			continue // the same version from another partition: one version after migration
		}
		m[r.Keyspace][string(r.Key)] = append(vs, r)
		total++
	}
	for _, keys := range m {
		for _, vs := range keys {
			slices.SortFunc(vs, func(a, b Record) int { return b.Version.Compare(a.Version) })
		}
	}
	return m, total
}

// checkMigrated checks that e holds exactly the model in the current layout: every version
// readable through Versions, the newest through Get and Scan, no legacy key left, no
// duplicate, and the node's other state untouched.
func checkMigrated(t *testing.T, e *Engine, m legacyModel, total int) {
	t.Helper()
	if n := countTagged(t, e.db, legacyDataKeyTag); n != 0 {
		t.Fatalf("%d legacy data keys left after migration", n)
	}
	if n := countTagged(t, e.db, dataKeyTag); n != total {
		t.Fatalf("%d data keys after migration, want %d (one per version)", n, total)
	}
	for ks, keys := range m {
		var newest []Record
		for key, want := range keys {
			got, err := e.Versions(ks, []byte(key))
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, fmt.Sprintf("Versions(%q, %q)", ks, key), got, want)
			r, found := mustGet(t, e, ks, key)
			if !found || !sameRecord(r, want[0]) {
				t.Fatalf("Get(%q, %q) = %s (found %t), want %s", ks, key, fmtRec(r), found, fmtRec(want[0]))
			}
			newest = append(newest, want[0])
		}
		slices.SortFunc(newest, func(a, b Record) int { return bytes.Compare(a.Key, b.Key) })
		sameRecords(t, fmt.Sprintf("Scan(%q)", ks), scanAll(t, e, KeyspaceSpan(ks), 0), newest)
		// A former partition's keys are now a key range of the keyspace.
		var p2 []Record
		for _, r := range newest {
			if bytes.HasPrefix(r.Key, []byte("p2/")) {
				p2 = append(p2, r)
			}
		}
		sameRecords(t, fmt.Sprintf("Scan(%q, p2)", ks), scanAll(t, e, partSpan(ks, 2), 0), p2)
	}
	if v, ok, err := e.GetMeta("node-id"); err != nil || !ok || string(v) != "n1" {
		t.Fatalf("meta after migration: %q %t %v", v, ok, err)
	}
	if v, ok, err := e.GetRaw([]byte("hs")); err != nil || !ok || string(v) != "term=3" {
		t.Fatalf("raw state after migration: %q %t %v", v, ok, err)
	}
}

// TestMigrateLegacyDataKeys: Open rewrites every data key of a store written with partitions
// in its keys into the partition-free layout, in several batches, keeping every version and
// its value, and a second Open finds nothing left to do.
func TestMigrateLegacyDataKeys(t *testing.T) {
	fs := vfs.NewMem()
	versions := legacyVersions()
	m, total := modelOf(versions)
	if total <= 2*migrateBatchKeys {
		t.Fatalf("test setup: %d versions do not need three migration batches", total)
	}

	e := openTest(t, fs, "data/db")
	writeLegacy(t, e.db, versions)
	if err := e.PutMeta("node-id", []byte("n1"), true); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyBatch(nil, []RawOp{{Key: []byte("hs"), Value: []byte("term=3")}}, true); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e2 := openTest(t, fs, "data/db")
	checkMigrated(t, e2, m, total)
	// A migrated store has nothing left to migrate, on a direct call or on the next Open.
	if n, err := migrateLegacyDataKeys(e2.db); n != 0 || err != nil {
		t.Fatalf("second migration = %d, %v; want 0, nil", n, err)
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	e3 := openTest(t, fs, "data/db")
	checkMigrated(t, e3, m, total)
}

// TestMigrateLegacyDataKeysResumes: a migration that stopped after its first batch (a crash)
// is finished by the next Open with the same result and no duplicate, also when some
// migrated versions are still present in the old layout too (as if their deletes were lost).
func TestMigrateLegacyDataKeysResumes(t *testing.T) {
	versions := legacyVersions()
	m, total := modelOf(versions)
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs, "data/db")
	writeLegacy(t, e.db, versions)
	if err := e.PutMeta("node-id", []byte("n1"), true); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyBatch(nil, []RawOp{{Key: []byte("hs"), Value: []byte("term=3")}}, true); err != nil {
		t.Fatal(err)
	}
	legacyKeys := countTagged(t, e.db, legacyDataKeyTag)
	if legacyKeys != len(versions) {
		t.Fatalf("test setup: %d legacy keys, want %d", legacyKeys, len(versions))
	}

	// One batch only, as the migration does it, then the crash.
	n, err := migrateOneBatch(e.db, []byte{legacyDataKeyTag}, []byte{legacyDataKeyTag + 1})
	if err != nil || n != migrateBatchKeys {
		t.Fatalf("migrateOneBatch = %d, %v; want %d", n, err, migrateBatchKeys)
	}
	if got := countTagged(t, e.db, legacyDataKeyTag); got != legacyKeys-n {
		t.Fatalf("%d legacy keys after one batch, want %d", got, legacyKeys-n)
	}
	if got := countTagged(t, e.db, dataKeyTag); got != n {
		t.Fatalf("%d data keys after one batch, want %d", got, n)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})

	// On the original store, some of the migrated versions reappear in the old layout.
	var again []legacyVersion
	for _, lv := range versions[:50] {
		if r, found, err := e.GetAt(lv.rec.Keyspace, lv.rec.Key, lv.rec.Version); err != nil || !found || !sameRecord(r, lv.rec) {
			t.Fatalf("test setup: %s not migrated by the first batch (%v)", fmtRec(lv.rec), err)
		}
		again = append(again, lv)
	}
	writeLegacy(t, e.db, again)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e2 := openTest(t, fs, "data/db")
	checkMigrated(t, e2, m, total)
	e3 := openTest(t, crashed, "data/db")
	checkMigrated(t, e3, m, total)
}
