package storage

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func wallsOf(t *testing.T, e *Engine, ks string, key string) []int64 {
	t.Helper()
	vs, err := e.Versions(ks, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, v := range vs {
		out = append(out, v.Version.WallNanos)
	}
	return out
}

func TestGCKeepsNewestAndDeletesOldBeforeHorizon(t *testing.T) {
	e := newMemEngine(t)
	mustApply(t, e, true,
		// Old versions 10, 20, 30 are before the horizon (35); 40 is the newest.
		rec("ks", "a", 20, "x"), rec("ks", "a", 40, "x"), rec("ks", "a", 10, "x"), rec("ks", "a", 30, "x"),
		// Only version, older than the horizon: kept.
		rec("ks", "b", 10, "x"),
		// Newest is a tombstone: kept; the value under it goes.
		rec("ks", "c", 10, "x"), tomb("ks", "c", 20),
		// Old versions at or after the horizon are kept; the one before it goes.
		rec("ks", "d", 60, "x"), rec("ks", "d", 50, "x"), rec("ks", "d", 35, "x"), rec("ks", "d", 34, "x"),
		// Other keyspaces are out of scope.
		rec("ks\x00", "a", 10, "x"), rec("ks\x00", "a", 40, "x"),
		rec("k", "a", 10, "x"), rec("k", "a", 40, "x"),
		rec("ksa", "a", 10, "x"), rec("ksa", "a", 40, "x"),
	)
	deleted, more, err := e.GC("ks", time.Unix(0, 35), 100)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 5 || more {
		t.Fatalf("GC = (%d, %t), want (5, false)", deleted, more)
	}
	for _, c := range []struct {
		ks   string
		key  string
		want []int64
	}{
		{"ks", "a", []int64{40}},
		{"ks", "b", []int64{10}},
		{"ks", "c", []int64{20}},
		{"ks", "d", []int64{60, 50, 35}},
		{"ks\x00", "a", []int64{40, 10}},
		{"k", "a", []int64{40, 10}},
		{"ksa", "a", []int64{40, 10}},
	} {
		if got := wallsOf(t, e, c.ks, c.key); !slices.Equal(got, c.want) {
			t.Errorf("versions of %q/%q after GC = %v, want %v", c.ks, c.key, got, c.want)
		}
	}
	if r, _ := mustGet(t, e, "ks", "c"); !r.Tombstone {
		t.Fatalf("GC removed the newest tombstone: %s", fmtRec(r))
	}
	// Nothing left: a second pass deletes nothing.
	if deleted, more, err := e.GC("ks", time.Unix(0, 35), 100); deleted != 0 || more || err != nil {
		t.Fatalf("second GC = (%d, %t, %v)", deleted, more, err)
	}
}

func TestGCRespectsMaxVersions(t *testing.T) {
	e := newMemEngine(t)
	const keys, versions = 10, 6
	for k := 0; k < keys; k++ {
		for v := int64(1); v <= versions; v++ {
			mustApply(t, e, false, rec("ks", partKey(k%3, fmt.Sprintf("k%d", k)), v, "x"))
		}
	}
	horizon := time.Unix(0, 1000)
	want := keys * (versions - 1)
	total, calls := 0, 0
	// At most ceil(want/7)+1 calls can be needed; the bound catches a GC that never finishes.
	for more := true; more; calls++ {
		if calls > want/7+1 {
			t.Fatalf("GC still reports more after %d calls (%d deleted)", calls, total)
		}
		var n int
		var err error
		n, more, err = e.GC("ks", horizon, 7)
		if err != nil {
			t.Fatal(err)
		}
		if n > 7 {
			t.Fatalf("GC deleted %d versions with maxVersions 7", n)
		}
		if more && n != 7 {
			t.Fatalf("GC reported more after deleting only %d of 7", n)
		}
		total += n
	}
	if total != want {
		t.Fatalf("GC deleted %d versions in total, want %d", total, want)
	}
	if calls != (want+6)/7 {
		t.Fatalf("GC took %d calls, want %d (no wasted passes)", calls, (want+6)/7)
	}
	for k := 0; k < keys; k++ {
		if got := wallsOf(t, e, "ks", partKey(k%3, fmt.Sprintf("k%d", k))); !slices.Equal(got, []int64{versions}) {
			t.Fatalf("k%d versions after GC = %v, want [%d]", k, got, versions)
		}
	}
	if _, _, err := e.GC("ks", horizon, 0); err == nil {
		t.Fatal("GC with maxVersions 0 succeeded")
	}
}

// TestGCResumeKeepsNewest: a pass resumed in the middle of the keyspace still recognises the
// newest version of the key it resumes at, even when a newer version arrived in between.
func TestGCResumeKeepsNewest(t *testing.T) {
	e := newMemEngine(t)
	for v := int64(1); v <= 5; v++ {
		mustApply(t, e, false, rec("ks", "a", v, "x"), rec("ks", "b", v, "x"))
	}
	// "a" has 4 old versions: the budget of 4 runs out exactly when b's first old version is
	// found, so the next call resumes at "b".
	n, more, err := e.GC("ks", time.Unix(0, 100), 4)
	if err != nil || n != 4 || !more {
		t.Fatalf("GC = (%d, %t, %v), want (4, true)", n, more, err)
	}
	mustApply(t, e, true, rec("ks", "b", 9, "x"))
	n, more, err = e.GC("ks", time.Unix(0, 100), 100)
	if err != nil || n != 5 || more {
		t.Fatalf("GC = (%d, %t, %v), want (5, false)", n, more, err)
	}
	if got := wallsOf(t, e, "ks", "b"); !slices.Equal(got, []int64{9}) {
		t.Fatalf("b versions = %v, want [9]", got)
	}
	if got := wallsOf(t, e, "ks", "a"); !slices.Equal(got, []int64{5}) {
		t.Fatalf("a versions = %v, want [5]", got)
	}
}
