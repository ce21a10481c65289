package storage

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"meridian/internal/hlc"
)

// mustGetAt is GetAt that fails the test on error.
func mustGetAt(t testing.TB, e *Engine, ks string, key string, maxVersion hlc.Version) (Record, bool) {
	t.Helper()
	r, found, err := e.GetAt(ks, []byte(key), maxVersion)
	if err != nil {
		t.Fatalf("GetAt(%q,%q,%s): %v", ks, key, maxVersion, err)
	}
	return r, found
}

// getAtCase is one GetAt query and its expected answer (wantWall 0 means not found).
type getAtCase struct {
	name     string
	key      string
	max      hlc.Version
	wantWall int64
	wantTomb bool
	wantVal  string
}

// checkGetAt runs the cases against e. It is called before and after a flush, so the seek is
// exercised on the memtable and on sstables (they position iterators differently).
func checkGetAt(t *testing.T, e *Engine, cases []getAtCase) {
	t.Helper()
	for _, c := range cases {
		got, found := mustGetAt(t, e, "ks", c.key, c.max)
		if c.wantWall == 0 {
			if found {
				t.Errorf("%s: GetAt(%q, %s) = %s, want not found", c.name, c.key, c.max, fmtRec(got))
			}
			continue
		}
		want := Record{Keyspace: "ks", Key: []byte(c.key), Version: ver(c.wantWall),
			Tombstone: c.wantTomb}
		if !c.wantTomb {
			want.Value = []byte(c.wantVal)
		}
		if !found || !sameRecord(got, want) {
			t.Errorf("%s: GetAt(%q, %s) = %s (found=%t), want %s", c.name, c.key, c.max, fmtRec(got), found, fmtRec(want))
		}
	}
}

func TestGetAtVersions(t *testing.T) {
	e := newMemEngine(t)
	// "a" has versions 10, 20 (tombstone), 30; "ab" and "a\x00" sort right next to "a" and
	// must never be returned for it (and vice versa). Written out of order on purpose.
	mustApply(t, e, false,
		rec("ks", "a", 30, "a30"),
		rec("ks", "a", 10, "a10"),
		tomb("ks", "a", 20),
		rec("ks", "ab", 15, "ab15"),
		rec("ks", "ab", 5, "ab5"),
		rec("ks", "a\x00", 12, "a0-12"),
		// Same key in neighbouring keyspaces ("ks\x00" sorts right after all of "ks"):
		// must not bleed either.
		rec("ks\x00", "a", 8, "ks0"),
		rec("ks2", "a", 8, "ks2"),
		rec("k", "a", 8, "k"),
	)
	cases := []getAtCase{
		{name: "below all", key: "a", max: ver(9)},
		{name: "zero version", key: "a", max: hlc.Version{}},
		{name: "equal to oldest", key: "a", max: ver(10), wantWall: 10, wantVal: "a10"},
		{name: "between oldest and tombstone", key: "a", max: ver(15), wantWall: 10, wantVal: "a10"},
		{name: "equal to tombstone", key: "a", max: ver(20), wantWall: 20, wantTomb: true},
		{name: "between tombstone and newest", key: "a", max: ver(29), wantWall: 20, wantTomb: true},
		{name: "equal to newest", key: "a", max: ver(30), wantWall: 30, wantVal: "a30"},
		{name: "above all", key: "a", max: ver(1000), wantWall: 30, wantVal: "a30"},
		{name: "max version", key: "a", max: hlc.Version{WallNanos: math.MaxInt64, Logical: math.MaxUint32,
			NodeID: math.MaxUint32}, wantWall: 30, wantVal: "a30"},
		// The stored versions have NodeID 1: the same wall with a lower node or logical
		// component is older than the stored version, a higher one newer.
		{name: "same wall lower node", key: "a", max: hlc.Version{WallNanos: 30, NodeID: 0}, wantWall: 20, wantTomb: true},
		{name: "same wall higher logical", key: "a", max: hlc.Version{WallNanos: 30, Logical: 1}, wantWall: 30, wantVal: "a30"},
		// Prefix keys: "ab" below its oldest version must not fall through to anything of
		// "a" or "a\x00", and "a" above "ab"'s versions must not pick up "ab".
		{name: "ab below all", key: "ab", max: ver(4)},
		{name: "ab between", key: "ab", max: ver(10), wantWall: 5, wantVal: "ab5"},
		{name: "ab above all", key: "ab", max: ver(40), wantWall: 15, wantVal: "ab15"},
		{name: "a0 below all", key: "a\x00", max: ver(11)},
		{name: "a0 above", key: "a\x00", max: ver(12), wantWall: 12, wantVal: "a0-12"},
		{name: "a between ab versions", key: "a", max: ver(7)},
		{name: "missing key", key: "b", max: ver(1000)},
		{name: "missing shorter key", key: "", max: ver(1000)},
	}
	checkGetAt(t, e, cases)
	if err := e.db.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	checkGetAt(t, e, cases)

	for ks, want := range map[string]string{"ks\x00": "ks0", "ks2": "ks2", "k": "k"} {
		if got, found := mustGetAt(t, e, ks, "a", ver(100)); !found || string(got.Value) != want || got.Keyspace != ks {
			t.Errorf("keyspace %q: GetAt = %s (found=%t), want %s", ks, fmtRec(got), found, want)
		}
	}
	for _, ks := range []string{"ks\x01", "ks3", "kt", ""} {
		if got, found := mustGetAt(t, e, ks, "a", ver(100)); found {
			t.Errorf("keyspace %q: found %s, want none", ks, fmtRec(got))
		}
	}
}

// TestGetAtMatchesVersions checks GetAt against a model built from Versions for random
// histories and random cut points, spread over the memtable and several sstables.
func TestGetAtMatchesVersions(t *testing.T) {
	e := newMemEngine(t)
	rng := rand.New(rand.NewPCG(7, 11))
	keys := []string{"", "a", "a\x00", "a\x00b", "ab", "abc", "b"}
	const rounds = 4
	const perRound = 60
	for r := 0; r < rounds; r++ {
		recs := make([]Record, 0, perRound)
		for i := 0; i < perRound; i++ {
			k := keys[rng.IntN(len(keys))]
			v := hlc.Version{WallNanos: rng.Int64N(50), Logical: rng.Uint32N(3), NodeID: rng.Uint32N(3)}
			recs = append(recs, Record{Keyspace: "ks", Key: []byte(k), Version: v,
				Value: []byte(v.String()), Tombstone: rng.IntN(5) == 0})
		}
		mustApply(t, e, false, recs...)
		if r < rounds-1 {
			if err := e.db.Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}
		}
	}
	for _, k := range keys {
		versions, err := e.Versions("ks", []byte(k))
		if err != nil {
			t.Fatalf("Versions(%q): %v", k, err)
		}
		for wall := int64(-1); wall <= 51; wall++ {
			for logical := uint32(0); logical < 3; logical++ {
				cut := hlc.Version{WallNanos: wall, Logical: logical, NodeID: 1}
				// Model: Versions is newest first, so the first one <= cut is the answer.
				var want Record
				wantFound := false
				for _, v := range versions {
					if v.Version.Compare(cut) <= 0 {
						want, wantFound = v, true
						break
					}
				}
				got, found := mustGetAt(t, e, "ks", k, cut)
				if found != wantFound || (found && !sameRecord(got, want)) {
					t.Fatalf("GetAt(%q, %s) = %s (found=%t), want %s (found=%t)",
						k, cut, fmtRec(got), found, fmtRec(want), wantFound)
				}
			}
		}
	}
}

func TestGetAtCountsAndClosed(t *testing.T) {
	e := newMemEngine(t)
	mustApply(t, e, false, rec("ks", "a", 10, "v"))
	before := e.Stats().Gets
	mustGetAt(t, e, "ks", "a", ver(10))
	if got := e.Stats().Gets; got != before+1 {
		t.Errorf("Gets = %d after one GetAt, want %d", got, before+1)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, _, err := e.GetAt("ks", []byte("a"), ver(10)); !errors.Is(err, ErrClosed) {
		t.Errorf("GetAt after Close: err = %v, want ErrClosed", err)
	}
}
