package storage

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"meridian/internal/hlc"
)

func scanAllReverse(t testing.TB, e *Engine, span Span, limit int) []Record {
	t.Helper()
	return collectScan(t, "ScanReverse", e.ScanReverse, span, limit)
}

// A reverse scan returns exactly the forward scan's records in the opposite order, and with a
// limit the last limit of them: random keys (including 0x00 and 0xff bytes, keys that are
// prefixes of others) with up to a dozen versions each — more than nextsBeforeSeek, so both
// the stepping and the seeking path run — tombstones among the newest versions, neighbouring
// keyspaces whose names extend this one's, and random bounds.
func TestScanReverseIsScanReversed(t *testing.T) {
	e := newMemEngine(t)
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []byte{0, 1, 'a', 'b', 0xfe, 0xff}
	randKey := func() []byte {
		k := make([]byte, rng.IntN(5))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return k
	}
	keyspaces := []string{"x", "x\x00", "y"}
	for range 30 {
		var batch []Record
		for range 60 {
			ks := keyspaces[rng.IntN(len(keyspaces))]
			key := randKey()
			versions := 1 + rng.IntN(3)
			if rng.IntN(8) == 0 {
				versions = 6 + rng.IntN(7) // more than nextsBeforeSeek
			}
			for range versions {
				// The value is a function of key and version, so a version applied twice
				// stores the same record.
				v := hlc.Version{WallNanos: int64(1 + rng.IntN(50)), Logical: uint32(rng.IntN(2)), NodeID: uint32(1 + rng.IntN(2))}
				r := Record{Keyspace: ks, Key: key, Version: v}
				if (v.WallNanos+int64(len(key)))%4 == 0 {
					r.Tombstone = true
				} else {
					r.Value = fmt.Appendf(nil, "%x:%s", key, v)
				}
				batch = append(batch, r)
			}
		}
		mustApply(t, e, false, batch...)
	}
	check := func(span Span, limit int) {
		t.Helper()
		want := scanAll(t, e, span, 0)
		slices.Reverse(want)
		if limit > 0 && len(want) > limit {
			want = want[:limit]
		}
		got := scanAllReverse(t, e, span, limit)
		if len(got) != len(want) {
			t.Fatalf("ScanReverse(%s, %d) = %d keys, want %d", span, limit, len(got), len(want))
		}
		for i := range got {
			if !sameRecord(got[i], want[i]) {
				t.Fatalf("ScanReverse(%s, %d)[%d] = %s, want %s", span, limit, i, fmtRec(got[i]), fmtRec(want[i]))
			}
		}
	}
	tombstones := 0
	for _, r := range scanAll(t, e, KeyspaceSpan("x"), 0) {
		if r.Tombstone {
			tombstones++
		}
	}
	if tombstones == 0 {
		t.Fatal("the data has no tombstone among the newest versions")
	}
	for _, ks := range keyspaces {
		for _, limit := range []int{0, 1, 7} {
			check(KeyspaceSpan(ks), limit)
		}
		for range 150 {
			span := Span{Keyspace: ks, Start: randKey(), End: randKey()}
			if rng.IntN(4) == 0 {
				span.End = nil
			}
			check(span, []int{0, 1, 3, 50}[rng.IntN(4)])
		}
	}
	// fn returning false stops the scan at once.
	n := 0
	if err := e.ScanReverse(KeyspaceSpan("x"), 0, func(Record) bool { n++; return n < 2 }); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("fn called %d times after returning false, want 2", n)
	}
}

// A key with hundreds of versions is passed with one seek, and the keys on either side of it
// (one a prefix of it, one right after all its versions) are still returned.
func TestScanReverseSkipsManyVersions(t *testing.T) {
	e := newMemEngine(t)
	var recs []Record
	for w := int64(1); w <= 300; w++ {
		recs = append(recs, rec("ks", "b", w, fmt.Sprint(w)))
	}
	for w := int64(1); w <= 3; w++ {
		recs = append(recs, rec("ks", "a", w, fmt.Sprint(w)), rec("ks", "b\x00", w, fmt.Sprint(w)))
	}
	recs = append(recs, tomb("ks", "c", 9), rec("ks", "c", 8, "hidden"))
	rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	mustApply(t, e, false, recs...)
	var s []string
	for _, r := range scanAllReverse(t, e, KeyspaceSpan("ks"), 0) {
		if r.Tombstone {
			s = append(s, fmt.Sprintf("%s=<tombstone>", r.Key))
			continue
		}
		s = append(s, fmt.Sprintf("%s=%s", r.Key, r.Value))
	}
	if want := []string{"c=<tombstone>", "b\x00=3", "b=300", "a=3"}; !slices.Equal(s, want) {
		t.Fatalf("ScanReverse = %q, want %q", s, want)
	}
	if got := scanAllReverse(t, e, Span{Keyspace: "ks", Start: []byte("b"), End: []byte("b\x00")}, 0); len(got) != 1 || string(got[0].Value) != "300" {
		t.Fatalf("ScanReverse([b, b\\x00)) = %d records", len(got))
	}
	if got := scanAllReverse(t, e, Span{Keyspace: "ks", Start: []byte("c"), End: []byte("b")}, 0); len(got) != 0 {
		t.Fatalf("an empty span returned %d records", len(got))
	}
}
