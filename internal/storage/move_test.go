package storage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"meridian/internal/hlc"
)

// TestMergeSpanKeepsWritesTaken: a replica move's snapshot is merged into a new replica that
// has already taken writes; nothing it took is lost, older and newer versions of the same
// key coexist (the newest wins), a second merge of the same file adds nothing, and the file
// is removed.
func TestMergeSpanKeepsWritesTaken(t *testing.T) {
	src, dst := openMem(t), openMem(t)
	span := Span{Keyspace: "ks", Start: []byte("b"), End: []byte("m")}
	for i := range 100 {
		put(t, src, "ks", fmt.Sprintf("c%03d", i), fmt.Sprintf("old%d", i), int64(10+i))
	}
	// Written to the new replica since the move started: newer versions of some keys, and
	// a key the source does not have.
	put(t, dst, "ks", "c005", "new5", 1000)
	put(t, dst, "ks", "d-only-here", "mine", 1001)
	put(t, dst, "ks", "z-outside", "kept", 1)

	if _, _, err := src.ExportSpanState(span, "out", nil); err != nil {
		t.Fatal(err)
	}
	size, _, _ := src.StagedSize("out")
	b, err := src.ReadStaged("out", 0, int(size))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if err := dst.WriteStaged("in", 0, b); err != nil {
			t.Fatal(err)
		}
		stats, err := dst.MergeSpan(span, "in")
		if err != nil || stats.Keys != 100 {
			t.Fatalf("merge %d: %+v, %v", round, stats, err)
		}
		if _, found, _ := dst.StagedSize("in"); found {
			t.Fatal("staged file left behind")
		}
	}
	if r, _, _ := dst.Get("ks", []byte("c005")); string(r.Value) != "new5" {
		t.Fatalf("c005 = %q, want the newer write taken before the merge", r.Value)
	}
	if vs, _ := dst.Versions("ks", []byte("c005")); len(vs) != 2 {
		t.Fatalf("c005 has %d versions, want 2 (merged once)", len(vs))
	}
	for _, k := range []string{"d-only-here", "z-outside", "c099"} {
		if _, found, _ := dst.Get("ks", []byte(k)); !found {
			t.Fatalf("%s lost", k)
		}
	}
	// A file with records outside the span is refused.
	if err := dst.WriteStaged("in2", 0, b); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.MergeSpan(Span{Keyspace: "ks", Start: []byte("c050"), End: []byte("m")}, "in2"); err == nil {
		t.Fatal("a snapshot reaching outside the span was merged")
	}
}

// TestScanAtMatchesGetAt: ScanAt returns, per key, exactly what GetAt returns at the same
// version (the model), on memtables and sstables, with keys that are prefixes of others.
func TestScanAtMatchesGetAt(t *testing.T) {
	e := newMemEngine(t)
	rng := rand.New(rand.NewPCG(3, 5))
	keys := []string{"", "a", "a\x00", "a\x00b", "ab", "abc", "b", "c"}
	for r := range 3 {
		var recs []Record
		for range 80 {
			k := keys[rng.IntN(len(keys))]
			v := hlc.Version{WallNanos: rng.Int64N(40), Logical: rng.Uint32N(3), NodeID: rng.Uint32N(3)}
			recs = append(recs, Record{Keyspace: "ks", Key: []byte(k), Version: v, Value: []byte(v.String()), Tombstone: rng.IntN(6) == 0})
		}
		mustApply(t, e, false, recs...)
		if r < 2 {
			if err := e.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	span := KeyspaceSpan("ks")
	for wall := int64(-1); wall <= 41; wall += 3 {
		at := hlc.Version{WallNanos: wall, Logical: 1, NodeID: 1}
		var got []Record
		if err := e.ScanAt(span, at, 0, func(r Record) bool { got = append(got, r); return true }); err != nil {
			t.Fatal(err)
		}
		var want []Record
		for _, k := range keys {
			if r, found := mustGetAt(t, e, "ks", k, at); found {
				want = append(want, r)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("at %s: ScanAt gave %d keys, GetAt %d", at, len(got), len(want))
		}
		for i := range got {
			if !sameRecord(got[i], want[i]) {
				t.Fatalf("at %s: key %d: ScanAt %s, GetAt %s", at, i, fmtRec(got[i]), fmtRec(want[i]))
			}
		}
	}
	// limit and an early stop.
	n := 0
	if err := e.ScanAt(span, hlc.Version{WallNanos: 100}, 2, func(Record) bool { n++; return true }); err != nil || n != 2 {
		t.Fatalf("limit 2: %d keys, %v", n, err)
	}
}

func TestMedianKeyByVolume(t *testing.T) {
	e := newMemEngine(t)
	span := Span{Keyspace: "ks", Start: []byte("a"), End: []byte("z")}
	if k, err := e.MedianKey(span); err != nil || k != nil {
		t.Fatalf("empty span: %q, %v", k, err)
	}
	// 10 small keys, then one key holding as much as all of them together: the median is
	// at the big key (the data before it is half the volume).
	for i := range 10 {
		put(t, e, "ks", fmt.Sprintf("b%02d", i), "v", int64(i+1))
	}
	put(t, e, "ks", "m-big", string(make([]byte, 10*30)), 100)
	put(t, e, "ks", "outside", "x", 1)
	k, err := e.MedianKey(Span{Keyspace: "ks", Start: []byte("a"), End: []byte("n")})
	if err != nil || string(k) != "m-big" {
		t.Fatalf("median %q, %v; want m-big", k, err)
	}
	// Uniform keys: the median is in the middle.
	e2 := newMemEngine(t)
	for i := range 100 {
		put(t, e2, "ks", fmt.Sprintf("u%03d", i), "value", 1)
	}
	k, err = e2.MedianKey(KeyspaceSpan("ks"))
	if err != nil || string(k) < "u045" || string(k) > "u055" {
		t.Fatalf("uniform median %q, %v", k, err)
	}
}

func TestMidKeyIsStrictlyBetween(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randKey := func() []byte {
		b := make([]byte, rng.IntN(6))
		for i := range b {
			b[i] = byte(rng.IntN(4)) * 85 // 0, 85, 170, 255: neighbours and extremes
		}
		return b
	}
	for range 20000 {
		a, b := randKey(), randKey()
		if c := bytes.Compare(a, b); c == 0 {
			continue
		} else if c > 0 {
			a, b = b, a
		}
		m := midKey(a, b)
		if m == nil {
			// Only when nothing of the padded length lies between: b is a followed by zeros.
			if !bytes.Equal(bytes.TrimRight(b, "\x00"), bytes.TrimRight(a, "\x00")) {
				t.Fatalf("midKey(%x, %x) found nothing", a, b)
			}
			continue
		}
		if bytes.Compare(a, m) >= 0 || bytes.Compare(m, b) >= 0 {
			t.Fatalf("midKey(%x, %x) = %x, not strictly between", a, b, m)
		}
	}
}

// A span large enough to bisect (its data in sstables) has its median found from the size
// estimates, near where reading it finds it.
func TestMedianKeyByEstimateAgreesWithScan(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 24 MiB")
	}
	e := newMemEngine(t)
	rng := rand.New(rand.NewPCG(3, 4))
	val := make([]byte, 1000) // random: compression must not shrink the span below the bisection's threshold
	var batch []Record
	for i := range 24000 {
		for j := range val {
			val[j] = byte(rng.Uint32())
		}
		batch = append(batch, rec("ks", fmt.Sprintf("key%06d", i), 1, string(val)))
		if len(batch) == 1000 {
			if err := e.Apply(batch, false); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}
	span := KeyspaceSpan("ks")
	lo, hi := spanBounds(span)
	total, err := e.db.EstimateDiskUsage(lo, hi)
	if err != nil || total < medianBisectAbove {
		t.Fatalf("estimate %d (%v): the test needs a span above %d", total, err, medianBisectAbove)
	}
	est, err := e.MedianKey(span)
	if err != nil {
		t.Fatal(err)
	}
	scan, err := e.medianByScan(lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	var ie, is int
	fmt.Sscanf(string(est), "key%06d", &ie)
	fmt.Sscanf(string(scan), "key%06d", &is)
	t.Logf("median by estimate %q, by scan %q", est, scan)
	// The estimate is per data block (tens of keys of 1 KB): within 5% of the keys.
	if d := ie - is; d < -1200 || d > 1200 {
		t.Fatalf("median by estimate %q, by scan %q", est, scan)
	}
}
