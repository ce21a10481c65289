package storage

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func rawKeys(t *testing.T, e *Engine, start, end []byte) []string {
	t.Helper()
	var out []string
	if err := e.ScanRaw(start, end, 0, func(k, v []byte) bool {
		out = append(out, fmt.Sprintf("%s=%s", k, v))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Raw ops and records commit in one batch; a range delete truncates; raw keys never show in
// record reads and records never in raw scans.
func TestRawOpsWithRecords(t *testing.T) {
	e := openTest(t, vfs.NewMem(), "db")
	var ops []RawOp
	for i := range 5 {
		ops = append(ops, RawOp{Key: []byte(fmt.Sprintf("g1/%d", i)), Value: []byte(fmt.Sprint(i))})
	}
	if err := e.ApplyBatch([]Record{rec("ks", "k", 1, "v")}, ops, true); err != nil {
		t.Fatal(err)
	}
	if got := rawKeys(t, e, nil, nil); len(got) != 5 || got[0] != "g1/0=0" || got[4] != "g1/4=4" {
		t.Fatalf("raw scan: %v", got)
	}
	if got, found, err := e.Get("ks", []byte("k")); err != nil || !found || string(got.Value) != "v" {
		t.Fatalf("record: %v %v %v", got, found, err)
	}
	// Truncate [g1/2, g1/4) and overwrite g1/4.
	err := e.ApplyBatch(nil, []RawOp{{Key: []byte("g1/2"), End: []byte("g1/4"), Delete: true}, {Key: []byte("g1/4"), Value: []byte("new")}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := rawKeys(t, e, nil, nil); fmt.Sprint(got) != "[g1/0=0 g1/1=1 g1/4=new]" {
		t.Fatalf("after truncation: %v", got)
	}
	if got := rawKeys(t, e, []byte("g1/1"), []byte("g1/4")); fmt.Sprint(got) != "[g1/1=1]" {
		t.Fatalf("bounded scan: %v", got)
	}
	v, found, err := e.GetRaw([]byte("g1/4"))
	if err != nil || !found || !bytes.Equal(v, []byte("new")) {
		t.Fatalf("GetRaw: %q %v %v", v, found, err)
	}
	if _, found, _ := e.GetRaw([]byte("g1/2")); found {
		t.Fatal("a truncated raw key is still there")
	}
	n := 0
	if err := e.Scan(KeyspaceSpan("ks"), 0, func(Record) bool { n++; return true }); err != nil || n != 1 {
		t.Fatalf("record scan saw %d records (%v): raw keys must not show", n, err)
	}
}

// A malformed op fails the whole batch, which writes nothing.
func TestRawOpsValidated(t *testing.T) {
	e := openTest(t, vfs.NewMem(), "db")
	for _, op := range []RawOp{
		{Value: []byte("x")},
		{Key: []byte("a"), End: []byte("b")},
		{Key: []byte("a"), Delete: true, Value: []byte("x")},
		{Key: []byte("b"), End: []byte("a"), Delete: true},
	} {
		err := e.ApplyBatch([]Record{rec("ks", "k", 1, "v")}, []RawOp{{Key: []byte("ok"), Value: []byte("1")}, op}, true)
		if err == nil {
			t.Fatalf("%+v accepted", op)
		}
	}
	if got := rawKeys(t, e, nil, nil); len(got) != 0 {
		t.Fatalf("a failed batch wrote raw keys: %v", got)
	}
	if _, found, _ := e.Get("ks", []byte("k")); found {
		t.Fatal("a failed batch wrote its records")
	}
}

// Synced raw ops survive a crash; unsynced ones may not (and do not, with no unsynced data
// kept), which shows the test can tell them apart.
func TestCrashKeepsSyncedRawOps(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, fs, "data/db")
	if err := e.ApplyBatch(nil, []RawOp{{Key: []byte("hs"), Value: []byte("term=3")}}, true); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyBatch(nil, []RawOp{{Key: []byte("unsynced"), Value: []byte("x")}}, false); err != nil {
		t.Fatal(err)
	}
	e2 := crashAndReopen(t, fs, e)
	if v, found, err := e2.GetRaw([]byte("hs")); err != nil || !found || string(v) != "term=3" {
		t.Fatalf("synced raw op after crash: %q %v %v", v, found, err)
	}
	if _, found, _ := e2.GetRaw([]byte("unsynced")); found {
		t.Fatal("an unsynced raw op survived a crash that keeps no unsynced data")
	}
}
