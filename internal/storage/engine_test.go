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

func rec(ks, key string, wall int64, value string) Record {
	return Record{Keyspace: ks, Key: []byte(key), Version: ver(wall), Value: []byte(value)}
}

func tomb(ks, key string, wall int64) Record {
	return Record{Keyspace: ks, Key: []byte(key), Version: ver(wall), Tombstone: true}
}

// partKey is user key key inside test partition p (see partSpan).
func partKey(p int, key string) string { return fmt.Sprintf("p%d/%s", p, key) }

// partSpan is test partition p of ks: the key range ["p<p>/", "p<p+1>/"). Partitions are key
// ranges now, so tests that need separate partitions use adjacent ranges like these; p must be
// a single digit (0..8) so that the ranges are adjacent and ordered like their numbers.
func partSpan(ks string, p int) Span {
	if p < 0 || p > 8 {
		panic(fmt.Sprintf("partSpan: partition %d is not a single digit", p))
	}
	return Span{Keyspace: ks, Start: []byte(fmt.Sprintf("p%d/", p)), End: []byte(fmt.Sprintf("p%d/", p+1))}
}

func mustApply(t testing.TB, e *Engine, sync bool, recs ...Record) {
	t.Helper()
	if err := e.Apply(recs, sync); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// sameRecord compares everything, treating nil and empty live values as equal.
func sameRecord(a, b Record) bool {
	return a.Keyspace == b.Keyspace && bytes.Equal(a.Key, b.Key) &&
		a.Version == b.Version && a.Tombstone == b.Tombstone && bytes.Equal(a.Value, b.Value)
}

func fmtRec(r Record) string {
	if r.Tombstone {
		return fmt.Sprintf("%q/%q@%s=<tombstone>", r.Keyspace, r.Key, r.Version)
	}
	return fmt.Sprintf("%q/%q@%s=%q", r.Keyspace, r.Key, r.Version, r.Value)
}

func mustGet(t testing.TB, e *Engine, ks string, key string) (Record, bool) {
	t.Helper()
	r, found, err := e.Get(ks, []byte(key))
	if err != nil {
		t.Fatalf("Get(%q,%q): %v", ks, key, err)
	}
	return r, found
}

func scanAll(t testing.TB, e *Engine, span Span, limit int) []Record {
	t.Helper()
	return collectScan(t, "Scan", e.Scan, span, limit)
}

// collectScan returns every record scan (named name in failures) gives for span and limit.
func collectScan(t testing.TB, name string, scan func(Span, int, func(Record) bool) error, span Span, limit int) []Record {
	t.Helper()
	var out []Record
	if err := scan(span, limit, func(r Record) bool {
		out = append(out, r)
		return true
	}); err != nil {
		t.Fatalf("%s(%s, %d): %v", name, span, limit, err)
	}
	return out
}

func TestApplyGetNewestVersionOutOfOrder(t *testing.T) {
	e := newMemEngine(t)
	// Versions arrive out of order, in separate batches and within one batch.
	mustApply(t, e, true, rec("ks", "k", 20, "v20"))
	mustApply(t, e, true, rec("ks", "k", 10, "v10"))
	mustApply(t, e, false, rec("ks", "k", 30, "v30"), rec("ks", "k", 5, "v5"), rec("ks", "k", 25, "v25"))

	r, found := mustGet(t, e, "ks", "k")
	if !found || !sameRecord(r, rec("ks", "k", 30, "v30")) {
		t.Fatalf("Get = %s found=%t, want v30", fmtRec(r), found)
	}
	// Ties on wall time are broken by logical counter, then node id.
	hi := rec("ks", "k", 30, "node2")
	hi.Version.NodeID = 2
	mustApply(t, e, false, hi)
	if r, _ := mustGet(t, e, "ks", "k"); !sameRecord(r, hi) {
		t.Fatalf("Get = %s, want %s", fmtRec(r), fmtRec(hi))
	}

	vs, err := e.Versions("ks", []byte("k"))
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
	mustApply(t, e, true, rec("ks", "k", 20, "v20"), rec("ks", "k", 20, "v20"))
	if vs2, _ := e.Versions("ks", []byte("k")); len(vs2) != len(vs) {
		t.Fatalf("re-apply changed version count %d -> %d", len(vs), len(vs2))
	}
	// Applying an older version never hides the newer one.
	mustApply(t, e, true, rec("ks", "k", 1, "old"))
	if r, _ := mustGet(t, e, "ks", "k"); !sameRecord(r, hi) {
		t.Fatalf("old version hid the newest: Get = %s", fmtRec(r))
	}
	if _, found := mustGet(t, e, "ks", "missing"); found {
		t.Fatal("Get of a missing key reported found")
	}
	// A key that is a prefix or extension of a stored key is a different key.
	for _, k := range []string{"", "k\x00", "kk", "\x00k"} {
		if r, found := mustGet(t, e, "ks", k); found {
			t.Fatalf("Get(%q) found %s", k, fmtRec(r))
		}
	}
}

func TestTombstones(t *testing.T) {
	e := newMemEngine(t)
	mustApply(t, e, true, rec("ks", "k", 10, "v10"), tomb("ks", "k", 20))
	r, found := mustGet(t, e, "ks", "k")
	if !found || !r.Tombstone || r.Value != nil || r.Version != ver(20) {
		t.Fatalf("Get = %s found=%t, want tombstone@20", fmtRec(r), found)
	}
	// An older write arriving late does not resurrect the key.
	mustApply(t, e, true, rec("ks", "k", 15, "late"))
	if r, _ := mustGet(t, e, "ks", "k"); !r.Tombstone {
		t.Fatalf("late older write resurrected the key: %s", fmtRec(r))
	}
	// Scan returns tombstones too.
	got := scanAll(t, e, KeyspaceSpan("ks"), 0)
	if len(got) != 1 || !got[0].Tombstone {
		t.Fatalf("Scan = %v, want the tombstone", got)
	}
	// A newer write after the tombstone is visible again.
	mustApply(t, e, true, rec("ks", "k", 30, ""))
	r, _ = mustGet(t, e, "ks", "k")
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
		mustApply(t, e, false, rec("ks", k, 100, "new:"+k), rec("ks", k, int64(50-i), "old"))
		// The same keys in the neighbouring keyspaces: no bound of a "ks" scan (an empty
		// start, a nil end) may reach them.
		for _, ks := range []string{"k", "kr", "ks\x00", "ks\x01", "ksa", "kt"} {
			mustApply(t, e, false, rec(ks, k, 200, "other"))
		}
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
				for _, r := range scanAll(t, e, Span{Keyspace: "ks", Start: start, End: end}, limit) {
					if r.Keyspace != "ks" || string(r.Value) != "new:"+string(r.Key) || r.Version != ver(100) {
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
	if err := e.Scan(KeyspaceSpan("ks"), 0, func(Record) bool { n++; return n < 2 }); err != nil {
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
		recs = append(recs, rec("ks", "b", w, fmt.Sprint(w)))
	}
	for w := int64(1); w <= 3; w++ {
		recs = append(recs, rec("ks", "a", w, fmt.Sprint(w)), rec("ks", "b\x00", w, fmt.Sprint(w)))
	}
	rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	mustApply(t, e, false, recs...)
	got := scanAll(t, e, KeyspaceSpan("ks"), 0)
	var s []string
	for _, r := range got {
		s = append(s, fmt.Sprintf("%s=%s", r.Key, r.Value))
	}
	if want := []string{"a=3", "b=300", "b\x00=3"}; !slices.Equal(s, want) {
		t.Fatalf("Scan = %q, want %q", s, want)
	}
}

// TestKeyspacesAndPartitionsDoNotBleed: partitions are adjacent key ranges of a keyspace, so
// a scan or delete of one must stop exactly at its bounds (a key equal to Start is inside, a
// key equal to End is outside, a key that is a prefix of a boundary sorts before it) and never
// reach another keyspace, even one whose name extends this one ("a" vs "a\x00").
func TestKeyspacesAndPartitionsDoNotBleed(t *testing.T) {
	e := newMemEngine(t)
	type loc struct {
		span Span
		keys []string // every key written in the span
	}
	sp := func(ks string, start, end *string) Span {
		return Span{Keyspace: ks, Start: bytesOf(start), End: bytesOf(end)}
	}
	str := func(s string) *string { return &s }
	// Keyspace "a" is split into four adjacent partitions; the other keyspaces reuse the same
	// bounds (or the whole keyspace), so only the keyspace separates them from "a"'s.
	b1, b2, b3 := str("p1/"), str("p2/"), str("p2/\x00\xff")
	firstKeys := []string{"", "\x00", "\x00\xff", "k", "p1", "p1.\xff", "p1\x00"}
	p1Keys := []string{"p1/", "p1/\x00", "p1/k", "p1/\xff\xff", "p2", "p2\x00", "p2.\xff"}
	p2Keys := []string{"p2/", "p2/\x00", "p2/\x00\x00", "p2/\x00\xfe", "p2/\x00\xfe\xff\xff"}
	lastKeys := []string{"p2/\x00\xff", "p2/\x00\xff\x00", "p2/\x01", "p3/", "\xff", "\xff\xff\xff"}
	locs := []loc{
		{sp("a", nil, b1), firstKeys},  // 0: the first partition: empty Start
		{sp("a", b1, b2), p1Keys},      // 1
		{sp("a", b2, b3), p2Keys},      // 2: bounds with 0x00 and 0xFF bytes
		{sp("a", b3, nil), lastKeys},   // 3: the last partition: End nil
		{sp("a\x00", b1, b2), p1Keys},  // 4
		{sp("a\x00b", b1, b2), p1Keys}, // 5
		{sp("a\x01", b3, nil), lastKeys},
		{sp("ab", nil, b1), firstKeys},
		{sp("", nil, nil), []string{"", "\x00", "p1/", "\xff\xff"}},
		{sp("\xff", nil, nil), []string{"", "p2/\x00\xff", "\xff"}},
	}
	for i, l := range locs {
		for _, k := range l.keys {
			if !l.span.Contains([]byte(k)) {
				t.Fatalf("test setup: key %q is not in %s", k, l.span)
			}
			mustApply(t, e, false, rec(l.span.Keyspace, k, int64(i+1), fmt.Sprint(i)))
		}
	}
	deleted := map[int]bool{}
	check := func() {
		t.Helper()
		for i, l := range locs {
			got := scanAll(t, e, l.span, 0)
			var keys []string
			for _, r := range got {
				if r.Keyspace != l.span.Keyspace || !l.span.Contains(r.Key) || string(r.Value) != fmt.Sprint(i) {
					t.Fatalf("Scan(%s) returned foreign record %s", l.span, fmtRec(r))
				}
				keys = append(keys, string(r.Key))
			}
			want := slices.Clone(l.keys)
			slices.Sort(want)
			if deleted[i] {
				want = nil
			}
			if !slices.Equal(keys, want) {
				t.Fatalf("Scan(%s) = %q, want %q", l.span, keys, want)
			}
			for _, k := range l.keys {
				if _, found := mustGet(t, e, l.span.Keyspace, k); found == deleted[i] {
					t.Fatalf("Get(%q, %q) found=%t after deleting %v", l.span.Keyspace, k, found, deleted)
				}
			}
		}
	}
	check()
	// Delete a middle partition, then the last (End nil), then the first (empty Start):
	// each time only that partition's keys go.
	for _, i := range []int{1, 3, 0} {
		if err := e.DeleteSpan(locs[i].span, true); err != nil {
			t.Fatal(err)
		}
		deleted[i] = true
		check()
	}
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
	mustApply(t, e, true, rec("", "node-id", 1, "data"))
	if v, ok, err := e.GetMeta("node-id"); !ok || err != nil || string(v) != "n1" {
		t.Fatalf("GetMeta = %q %t %v", v, ok, err)
	}
	if v, ok, err := e.GetMeta("empty"); !ok || err != nil || v == nil || len(v) != 0 {
		t.Fatalf("GetMeta(empty) = %q %t %v", v, ok, err)
	}
	// Meta keys are invisible to data reads and vice versa.
	if got := scanAll(t, e, KeyspaceSpan(""), 0); len(got) != 1 || string(got[0].Value) != "data" {
		t.Fatalf("Scan = %v", got)
	}
}

func TestStatsCount(t *testing.T) {
	e := newMemEngine(t)
	mustApply(t, e, true, rec("ks", "a", 1, "x"), rec("ks", "b", 1, "x"))
	mustApply(t, e, false, rec("ks", "c", 1, "x"))
	mustGet(t, e, "ks", "a")
	scanAll(t, e, KeyspaceSpan("ks"), 0)
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
	if err := e.Apply([]Record{rec("ks", "k", 1, "v")}, true); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close = %v", err)
	}
	if _, _, err := e.Get("ks", []byte("k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
	if err := e.Scan(KeyspaceSpan("ks"), 0, func(Record) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Scan after Close = %v", err)
	}
	if _, err := e.Versions("ks", []byte("k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Versions after Close = %v", err)
	}
	if err := e.DeleteSpan(KeyspaceSpan("ks"), true); !errors.Is(err, ErrClosed) {
		t.Fatalf("DeleteSpan after Close = %v", err)
	}
	if _, err := e.ExportSpan(KeyspaceSpan("ks"), "x.sst"); !errors.Is(err, ErrClosed) {
		t.Fatalf("ExportSpan after Close = %v", err)
	}
	if _, err := e.IngestSpan(KeyspaceSpan("ks"), "x.sst"); !errors.Is(err, ErrClosed) {
		t.Fatalf("IngestSpan after Close = %v", err)
	}
	_ = e.Stats() // must not panic
}

// TestRandomAgainstModel applies random versions (out of order, duplicates, tombstones,
// 0x00/0xFF-laden keys, several keyspaces) and compares Get, Versions and Scan with a model;
// the scans cover a partitioning of each keyspace into adjacent spans and random spans.
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
		ks  string
		key string
	}
	model := map[mk]map[hlc.Version]Record{}
	keyspaces := []string{"x", "x\x00", "y"}
	for round := 0; round < 40; round++ {
		var batch []Record
		for i := 0; i < 50; i++ {
			r := Record{
				Keyspace: keyspaces[rng.IntN(len(keyspaces))],
				Key:      randKey(),
				Version:  hlc.Version{WallNanos: int64(rng.IntN(20)), Logical: uint32(rng.IntN(2)), NodeID: uint32(rng.IntN(2))},
			}
			if rng.IntN(5) == 0 {
				r.Tombstone = true
			} else {
				// The value is a function of the version, so duplicates are true re-applies.
				r.Value = []byte(fmt.Sprintf("%s:%s", r.Key, r.Version))
			}
			batch = append(batch, r)
			m := mk{r.Keyspace, string(r.Key)}
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
		r, found := mustGet(t, e, m.ks, m.key)
		if want := newest(m); !found || !sameRecord(r, want) {
			t.Fatalf("Get(%q,%q) = %s, want %s", m.ks, m.key, fmtRec(r), fmtRec(want))
		}
		got, err := e.Versions(m.ks, []byte(m.key))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(vs) {
			t.Fatalf("Versions(%q) has %d entries, want %d", m.key, len(got), len(vs))
		}
		for i := range got {
			if want, ok := vs[got[i].Version]; !ok || !sameRecord(got[i], want) {
				t.Fatalf("Versions(%q,%q)[%d] = %s, not in the model", m.ks, m.key, i, fmtRec(got[i]))
			}
			if i > 0 && !got[i].Version.Less(got[i-1].Version) {
				t.Fatalf("Versions not newest first: %s then %s", got[i-1].Version, got[i].Version)
			}
		}
	}
	checkScan := func(span Span) {
		t.Helper()
		var want []Record
		for m := range model {
			if m.ks == span.Keyspace && span.Contains([]byte(m.key)) {
				want = append(want, newest(m))
			}
		}
		slices.SortFunc(want, func(a, b Record) int { return bytes.Compare(a.Key, b.Key) })
		got := scanAll(t, e, span, 0)
		if len(got) != len(want) {
			t.Fatalf("Scan(%s) = %d keys, want %d", span, len(got), len(want))
		}
		for i := range got {
			if !sameRecord(got[i], want[i]) {
				t.Fatalf("Scan(%s)[%d] = %s, want %s", span, i, fmtRec(got[i]), fmtRec(want[i]))
			}
		}
	}
	for _, ks := range keyspaces {
		// Three adjacent partitions: the keys they return together are the keyspace's.
		b1, b2 := []byte{'a'}, []byte{'a', 0, 0xff}
		for _, span := range []Span{
			KeyspaceSpan(ks),
			{Keyspace: ks, End: b1}, {Keyspace: ks, Start: b1, End: b2}, {Keyspace: ks, Start: b2},
		} {
			checkScan(span)
		}
		for i := 0; i < 100; i++ {
			span := Span{Keyspace: ks, Start: randKey(), End: randKey()}
			if rng.IntN(4) == 0 {
				span.End = nil
			}
			checkScan(span)
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
				r := rec("ks", partKey(w, fmt.Sprintf("k%03d", i%20)), int64(i), fmt.Sprint(i))
				if err := e.Apply([]Record{r}, i%10 == 0); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				if _, _, err := e.Get("ks", []byte(partKey(w, fmt.Sprintf("k%03d", i%20)))); err != nil {
					errs <- err
					return
				}
				span := partSpan("ks", w)
				var foreign error
				if err := e.Scan(span, 5, func(r Record) bool {
					if !span.Contains(r.Key) {
						foreign = fmt.Errorf("Scan(%s) returned %s", span, fmtRec(r))
					}
					return foreign == nil
				}); err != nil || foreign != nil {
					errs <- errors.Join(err, foreign)
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
		got := scanAll(t, e, partSpan("ks", w), 0)
		if len(got) != 20 {
			t.Fatalf("partition %d has %d keys, want 20", w, len(got))
		}
		for _, r := range got {
			// Key k%03d's newest write is the last i with i%20 == key index.
			var pw, idx int
			if _, err := fmt.Sscanf(string(r.Key), "p%d/k%03d", &pw, &idx); err != nil || pw != w {
				t.Fatalf("partition %d: foreign key %q (%v)", w, r.Key, err)
			}
			if want := int64(perWriter - 20 + idx); r.Version.WallNanos != want {
				t.Fatalf("partition %d key %s newest = %d, want %d", w, r.Key, r.Version.WallNanos, want)
			}
		}
	}
}
