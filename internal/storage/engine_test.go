package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/internal/hlc"
)

// testOptions keeps test engines small: tiny memtables force flushes to sstables, so reads
// cross memtable and sstable boundaries.
func testOptions(fs vfs.FS) Options {
	return Options{FS: fs, CacheBytes: 1 << 20, MemTableBytes: 256 << 10}
}

func openTest(t testing.TB, fs vfs.FS, dir string) *Engine {
	t.Helper()
	e, err := Open(dir, testOptions(fs))
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func newMemEngine(t testing.TB) *Engine { return openTest(t, vfs.NewMem(), "db") }

func ver(wall int64) hlc.Version { return hlc.Version{WallNanos: wall, NodeID: 1} }

func rec(ks string, part uint32, key string, wall int64, value string) Record {
	return Record{Keyspace: ks, Partition: part, Key: []byte(key), Version: ver(wall), Value: []byte(value)}
}

func tomb(ks string, part uint32, key string, wall int64) Record {
	return Record{Keyspace: ks, Partition: part, Key: []byte(key), Version: ver(wall), Tombstone: true}
}

func mustApply(t testing.TB, e *Engine, sync bool, recs ...Record) {
	t.Helper()
	if err := e.Apply(recs, sync); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// sameRecord compares everything, treating nil and empty live values as equal.
func sameRecord(a, b Record) bool {
	return a.Keyspace == b.Keyspace && a.Partition == b.Partition && bytes.Equal(a.Key, b.Key) &&
		a.Version == b.Version && a.Tombstone == b.Tombstone && bytes.Equal(a.Value, b.Value)
}

func fmtRec(r Record) string {
	if r.Tombstone {
		return fmt.Sprintf("%q/%d/%q@%s=<tombstone>", r.Keyspace, r.Partition, r.Key, r.Version)
	}
	return fmt.Sprintf("%q/%d/%q@%s=%q", r.Keyspace, r.Partition, r.Key, r.Version, r.Value)
}

func mustGet(t testing.TB, e *Engine, ks string, part uint32, key string) (Record, bool) {
	t.Helper()
	r, found, err := e.Get(ks, part, []byte(key))
	if err != nil {
		t.Fatalf("Get(%q,%d,%q): %v", ks, part, key, err)
	}
	return r, found
}

func scanAll(t testing.TB, e *Engine, ks string, part uint32, start, end []byte, limit int) []Record {
	t.Helper()
	var out []Record
	if err := e.Scan(ks, part, start, end, limit, func(r Record) bool {
		out = append(out, r)
		return true
	}); err != nil {
		t.Fatalf("Scan(%q,%d,%q,%q,%d): %v", ks, part, start, end, limit, err)
	}
	return out
}

func TestApplyGetNewestVersionOutOfOrder(t *testing.T) {
	e := newMemEngine(t)
	// Versions arrive out of order, in separate batches and within one batch.
	mustApply(t, e, true, rec("ks", 1, "k", 20, "v20"))
	mustApply(t, e, true, rec("ks", 1, "k", 10, "v10"))
	mustApply(t, e, false, rec("ks", 1, "k", 30, "v30"), rec("ks", 1, "k", 5, "v5"), rec("ks", 1, "k", 25, "v25"))

	r, found := mustGet(t, e, "ks", 1, "k")
	if !found || !sameRecord(r, rec("ks", 1, "k", 30, "v30")) {
		t.Fatalf("Get = %s found=%t, want v30", fmtRec(r), found)
	}
	// Ties on wall time are broken by logical counter, then node id.
	hi := rec("ks", 1, "k", 30, "node2")
	hi.Version.NodeID = 2
	mustApply(t, e, false, hi)
	if r, _ := mustGet(t, e, "ks", 1, "k"); !sameRecord(r, hi) {
		t.Fatalf("Get = %s, want %s", fmtRec(r), fmtRec(hi))
	}

	vs, err := e.Versions("ks", 1, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	var walls []string
	for _, v := range vs {
		walls = append(walls, v.Version.String())
	}
	want := []string{"30.0@2", "30.0@1", "25.0@1", "20.0@1", "10.0@1", "5.0@1"}
	if !slices.Equal(walls, want) {
		t.Fatalf("Versions = %v, want %v (newest first)", walls, want)
	}

	// Re-applying an existing version is idempotent.
	mustApply(t, e, true, rec("ks", 1, "k", 20, "v20"), rec("ks", 1, "k", 20, "v20"))
	if vs2, _ := e.Versions("ks", 1, []byte("k")); len(vs2) != len(vs) {
		t.Fatalf("re-apply changed version count %d -> %d", len(vs), len(vs2))
	}
	// Applying an older version never hides the newer one.
	mustApply(t, e, true, rec("ks", 1, "k", 1, "old"))
	if r, _ := mustGet(t, e, "ks", 1, "k"); !sameRecord(r, hi) {
		t.Fatalf("old version hid the newest: Get = %s", fmtRec(r))
	}
	if _, found := mustGet(t, e, "ks", 1, "missing"); found {
		t.Fatal("Get of a missing key reported found")
	}
	// A key that is a prefix or extension of a stored key is a different key.
	for _, k := range []string{"", "k\x00", "kk", "\x00k"} {
		if r, found := mustGet(t, e, "ks", 1, k); found {
			t.Fatalf("Get(%q) found %s", k, fmtRec(r))
		}
	}
}

func TestTombstones(t *testing.T) {
	e := newMemEngine(t)
	mustApply(t, e, true, rec("ks", 0, "k", 10, "v10"), tomb("ks", 0, "k", 20))
	r, found := mustGet(t, e, "ks", 0, "k")
	if !found || !r.Tombstone || r.Value != nil || r.Version != ver(20) {
		t.Fatalf("Get = %s found=%t, want tombstone@20", fmtRec(r), found)
	}
	// An older write arriving late does not resurrect the key.
	mustApply(t, e, true, rec("ks", 0, "k", 15, "late"))
	if r, _ := mustGet(t, e, "ks", 0, "k"); !r.Tombstone {
		t.Fatalf("late older write resurrected the key: %s", fmtRec(r))
	}
	// Scan returns tombstones too.
	got := scanAll(t, e, "ks", 0, nil, nil, 0)
	if len(got) != 1 || !got[0].Tombstone {
		t.Fatalf("Scan = %v, want the tombstone", got)
	}
	// A newer write after the tombstone is visible again.
	mustApply(t, e, true, rec("ks", 0, "k", 30, ""))
	r, _ = mustGet(t, e, "ks", 0, "k")
	if r.Tombstone || r.Value == nil || len(r.Value) != 0 {
		t.Fatalf("Get = %s (nil value=%t), want live empty value", fmtRec(r), r.Value == nil)
	}
}

// scanKeys are user keys chosen to trip up escaping: prefixes, 0x00 and 0xFF bytes.
var scanKeys = []string{"", "\x00", "\x00\x00", "\x00\xff", "\x01", "a", "a\x00", "a\x00\x00", "a\x00b",
	"a\x01", "a\xff", "ab", "b", "\xff", "\xff\x00", "\xff\xff"}

func TestScanBounds(t *testing.T) {
	e := newMemEngine(t)
	for i, k := range scanKeys {
		// Two versions per key, older one applied last; value names the newest.
		mustApply(t, e, false, rec("ks", 4, k, 100, "new:"+k), rec("ks", 4, k, int64(50-i), "old"))
	}
	sorted := slices.Clone(scanKeys)
	slices.Sort(sorted)

	model := func(start, end []byte, limit int) []string {
		var out []string
		for _, k := range sorted {
			if bytes.Compare([]byte(k), start) < 0 || (end != nil && bytes.Compare([]byte(k), end) >= 0) {
				continue
			}
			if limit > 0 && len(out) == limit {
				break
			}
			out = append(out, k)
		}
		return out
	}
	bounds := append([]string{"zz", "a\x00\x01", "a\x00\xff"}, scanKeys...)
	checked := 0
	for _, s := range append([]*string{nil}, ptrs(bounds)...) {
		for _, en := range append([]*string{nil}, ptrs(bounds)...) {
			for _, limit := range []int{0, 1, 3} {
				start, end := bytesOf(s), bytesOf(en)
				if end != nil && bytes.Compare(start, end) > 0 {
					continue
				}
				var got []string
				for _, r := range scanAll(t, e, "ks", 4, start, end, limit) {
					if string(r.Value) != "new:"+string(r.Key) || r.Version != ver(100) {
						t.Fatalf("scan returned %s, want the newest version", fmtRec(r))
					}
					got = append(got, string(r.Key))
				}
				if want := model(start, end, limit); !slices.Equal(got, want) {
					t.Fatalf("Scan([%q,%q) limit %d) = %q, want %q", start, end, limit, got, want)
				}
				checked++
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d scan cases checked", checked)
	}

	// fn returning false stops the scan at once.
	n := 0
	if err := e.Scan("ks", 4, nil, nil, 0, func(Record) bool { n++; return n < 2 }); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("fn called %d times after returning false, want 2", n)
	}
}

func ptrs(ss []string) []*string {
	out := make([]*string, len(ss))
	for i := range ss {
		out[i] = &ss[i]
	}
	return out
}

func bytesOf(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

func TestScanSkipsManyVersions(t *testing.T) {
	e := newMemEngine(t)
	// "b" has far more versions than nextsBeforeSeek, so Scan has to seek past them;
	// "b\x00" sorts right after all of them and must not be skipped.
	var recs []Record
	for w := int64(1); w <= 300; w++ {
		recs = append(recs, rec("ks", 0, "b", w, fmt.Sprint(w)))
	}
	for w := int64(1); w <= 3; w++ {
		recs = append(recs, rec("ks", 0, "a", w, fmt.Sprint(w)), rec("ks", 0, "b\x00", w, fmt.Sprint(w)))
	}
	rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	mustApply(t, e, false, recs...)
	got := scanAll(t, e, "ks", 0, nil, nil, 0)
	var s []string
	for _, r := range got {
		s = append(s, fmt.Sprintf("%s=%s", r.Key, r.Value))
	}
	if want := []string{"a=3", "b=300", "b\x00=3"}; !slices.Equal(s, want) {
		t.Fatalf("Scan = %q, want %q", s, want)
	}
}

func TestKeyspacesAndPartitionsDoNotBleed(t *testing.T) {
	e := newMemEngine(t)
	type loc struct {
		ks   string
		part uint32
	}
	locs := []loc{
		{"a", 1}, {"a\x00b", 1}, {"a\x00", 1}, {"a", 2}, {"", 1}, {"ab", 1}, {"a", 0},
		{"a", 0xFFFFFFFF}, {"a\x01", 0}, {"\xff", 0xFFFFFFFF},
	}
	for i, l := range locs {
		for _, k := range []string{"", "k", "\x00", "\xff\xff"} {
			mustApply(t, e, false, rec(l.ks, l.part, k, int64(i+1), fmt.Sprintf("%d", i)))
		}
	}
	check := func(skip int) {
		t.Helper()
		for i, l := range locs {
			got := scanAll(t, e, l.ks, l.part, nil, nil, 0)
			want := 4
			if i == skip {
				want = 0
			}
			if len(got) != want {
				t.Fatalf("Scan(%q,%d) returned %d keys, want %d: %v", l.ks, l.part, len(got), want, got)
			}
			for _, r := range got {
				if r.Keyspace != l.ks || r.Partition != l.part || string(r.Value) != fmt.Sprint(i) {
					t.Fatalf("Scan(%q,%d) returned foreign record %s", l.ks, l.part, fmtRec(r))
				}
			}
		}
	}
	check(-1)
	if err := e.DeletePartition("a", 1, true); err != nil {
		t.Fatal(err)
	}
	check(0)
}

func TestMeta(t *testing.T) {
	e := newMemEngine(t)
	if _, ok, err := e.GetMeta("node-id"); ok || err != nil {
		t.Fatalf("GetMeta of missing name = ok %t err %v", ok, err)
	}
	if err := e.PutMeta("node-id", []byte("n1"), true); err != nil {
		t.Fatal(err)
	}
	if err := e.PutMeta("empty", nil, true); err != nil {
		t.Fatal(err)
	}
	mustApply(t, e, true, rec("", 0, "node-id", 1, "data"))
	if v, ok, err := e.GetMeta("node-id"); !ok || err != nil || string(v) != "n1" {
		t.Fatalf("GetMeta = %q %t %v", v, ok, err)
	}
	if v, ok, err := e.GetMeta("empty"); !ok || err != nil || v == nil || len(v) != 0 {
		t.Fatalf("GetMeta(empty) = %q %t %v", v, ok, err)
	}
	// Meta keys are invisible to data reads and vice versa.
	if got := scanAll(t, e, "", 0, nil, nil, 0); len(got) != 1 || string(got[0].Value) != "data" {
		t.Fatalf("Scan = %v", got)
	}
}

func TestStatsCount(t *testing.T) {
	e := newMemEngine(t)
	mustApply(t, e, true, rec("ks", 0, "a", 1, "x"), rec("ks", 0, "b", 1, "x"))
	mustApply(t, e, false, rec("ks", 0, "c", 1, "x"))
	mustGet(t, e, "ks", 0, "a")
	scanAll(t, e, "ks", 0, nil, nil, 0)
	s := e.Stats()
	if s.Applies != 2 || s.RecordsApplied != 3 || s.Gets != 1 || s.Scans != 1 {
		t.Fatalf("Stats = %+v", s)
	}
	if s.WALSyncs < 1 {
		t.Fatalf("WALSyncs = %d after a synced apply", s.WALSyncs)
	}
	if s.MemTableBytes == 0 || s.DiskBytes == 0 {
		t.Fatalf("Stats missing Pebble metrics: %+v", s)
	}
}

func TestOptionsDefaultsAndValidate(t *testing.T) {
	var o Options
	if err := o.Validate(); err != nil {
		t.Fatalf("zero Options invalid: %v", err)
	}
	o.EnsureDefaults()
	if o.FS != vfs.Default || o.CacheBytes != DefaultCacheBytes || o.MemTableBytes != DefaultMemTableBytes || o.Logger == nil {
		t.Fatalf("EnsureDefaults = %+v", o)
	}
	for field, bad := range map[string]Options{
		"CacheBytes":    {CacheBytes: -1},
		"MemTableBytes": {MemTableBytes: 4 << 30},
	} {
		err := bad.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate(%s) = %v, want an error naming %s", field, err, field)
		}
		bad.FS = vfs.NewMem()
		if _, err := Open("db", bad); err == nil || !strings.Contains(err.Error(), "storage: open db") {
			t.Errorf("Open with bad %s = %v, want wrapped error", field, err)
		}
	}
}

func TestClosedEngine(t *testing.T) {
	e := newMemEngine(t)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if err := e.Apply([]Record{rec("ks", 0, "k", 1, "v")}, true); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close = %v", err)
	}
	if _, _, err := e.Get("ks", 0, []byte("k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
	if err := e.Scan("ks", 0, nil, nil, 0, func(Record) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Scan after Close = %v", err)
	}
	_ = e.Stats() // must not panic
}

// TestRandomAgainstModel applies random versions (out of order, duplicates, tombstones,
// 0x00/0xFF-laden keys, several partitions) and compares Get, Scan and Versions with a model.
func TestRandomAgainstModel(t *testing.T) {
	e := newMemEngine(t)
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0, 1, 'a', 0xfe, 0xff}
	randKey := func() []byte {
		k := make([]byte, rng.IntN(4))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return k
	}
	type mk struct {
		ks   string
		part uint32
		key  string
	}
	model := map[mk]map[hlc.Version]Record{}
	keyspaces := []string{"x", "x\x00", "y"}
	for round := 0; round < 40; round++ {
		var batch []Record
		for i := 0; i < 50; i++ {
			r := Record{
				Keyspace:  keyspaces[rng.IntN(len(keyspaces))],
				Partition: uint32(rng.IntN(3)),
				Key:       randKey(),
				Version:   hlc.Version{WallNanos: int64(rng.IntN(20)), Logical: uint32(rng.IntN(2)), NodeID: uint32(rng.IntN(2))},
			}
			if rng.IntN(5) == 0 {
				r.Tombstone = true
			} else {
				// The value is a function of the version, so duplicates are true re-applies.
				r.Value = []byte(fmt.Sprintf("%s:%s", r.Key, r.Version))
			}
			batch = append(batch, r)
			m := mk{r.Keyspace, r.Partition, string(r.Key)}
			if model[m] == nil {
				model[m] = map[hlc.Version]Record{}
			}
			if old, ok := model[m][r.Version]; ok {
				// Same version applied again: last apply wins on content; keep it consistent.
				batch[len(batch)-1] = old
				continue
			}
			model[m][r.Version] = r
		}
		mustApply(t, e, rng.IntN(2) == 0, batch...)
	}
	newest := func(m mk) Record {
		var best Record
		first := true
		for _, r := range model[m] {
			if first || best.Version.Less(r.Version) {
				best, first = r, false
			}
		}
		return best
	}
	for m, vs := range model {
		r, found := mustGet(t, e, m.ks, m.part, m.key)
		if want := newest(m); !found || !sameRecord(r, want) {
			t.Fatalf("Get(%q,%d,%q) = %s, want %s", m.ks, m.part, m.key, fmtRec(r), fmtRec(want))
		}
		got, err := e.Versions(m.ks, m.part, []byte(m.key))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(vs) {
			t.Fatalf("Versions(%q) has %d entries, want %d", m.key, len(got), len(vs))
		}
		for i := 1; i < len(got); i++ {
			if !got[i].Version.Less(got[i-1].Version) {
				t.Fatalf("Versions not newest first: %s then %s", got[i-1].Version, got[i].Version)
			}
		}
	}
	for _, ks := range keyspaces {
		for part := uint32(0); part < 3; part++ {
			var want []Record
			for m := range model {
				if m.ks == ks && m.part == part {
					want = append(want, newest(m))
				}
			}
			slices.SortFunc(want, func(a, b Record) int { return bytes.Compare(a.Key, b.Key) })
			got := scanAll(t, e, ks, part, nil, nil, 0)
			if len(got) != len(want) {
				t.Fatalf("Scan(%q,%d) = %d keys, want %d", ks, part, len(got), len(want))
			}
			for i := range got {
				if !sameRecord(got[i], want[i]) {
					t.Fatalf("Scan(%q,%d)[%d] = %s, want %s", ks, part, i, fmtRec(got[i]), fmtRec(want[i]))
				}
			}
		}
	}
}

func TestConcurrentApplyAndRead(t *testing.T) {
	e := newMemEngine(t)
	const writers, perWriter = 4, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers*2)
	for w := 0; w < writers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				r := rec("ks", uint32(w), fmt.Sprintf("k%03d", i%20), int64(i), fmt.Sprint(i))
				if err := e.Apply([]Record{r}, i%10 == 0); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				if _, _, err := e.Get("ks", uint32(w), []byte(fmt.Sprintf("k%03d", i%20))); err != nil {
					errs <- err
					return
				}
				if err := e.Scan("ks", uint32(w), nil, nil, 5, func(Record) bool { return true }); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := 0; w < writers; w++ {
		got := scanAll(t, e, "ks", uint32(w), nil, nil, 0)
		if len(got) != 20 {
			t.Fatalf("partition %d has %d keys, want 20", w, len(got))
		}
		for _, r := range got {
			// Key k%03d's newest write is the last i with i%20 == key index.
			var idx int
			fmt.Sscanf(string(r.Key), "k%03d", &idx)
			if want := int64(perWriter - 20 + idx); r.Version.WallNanos != want {
				t.Fatalf("partition %d key %s newest = %d, want %d", w, r.Key, r.Version.WallNanos, want)
			}
		}
	}
}
