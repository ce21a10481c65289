package metadata

import (
	"strings"
	"testing"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/storage"
)

// The metadata group's simulator checker, on histories built to pass and to break it: a
// legal history passes; a description that contradicts a completed change, a second create
// that succeeds, and a conditional change that wins against a newer version are refused by
// the linearizability check; nodes whose final catalogs differ are refused by the convergence
// check. (The mutation suite proves the same checks catch a broken engine.)
func TestSimCheckerCatchesBrokenHistories(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	ok := func(proc int, kind, tag string, expect uint64, from, to int, version uint64) simOp {
		return simOp{proc: proc, kind: kind, name: "alpha", tag: tag, expect: expect, invoke: ms(from), ret: ms(to), outcome: engine.SimOK, version: version}
	}
	describe := func(proc, from, to int, found bool, tag string, version uint64) simOp {
		return simOp{proc: proc, kind: "describe", name: "alpha", invoke: ms(from), ret: ms(to), outcome: engine.SimOK, found: found, outTag: tag, version: version}
	}
	rec := func(v string) []storage.Record { return []storage.Record{{Key: []byte("ks/alpha"), Value: []byte(v)}} }
	same := map[string][]storage.Record{"n1": rec("v"), "n2": rec("v")}

	legal := []simOp{
		ok(0, OpCreate, "a", 0, 0, 10, 1),
		describe(1, 20, 30, true, "a", 1),
		ok(1, OpAlter, "b", 1, 40, 50, 2),
		describe(0, 60, 70, true, "b", 2),
		ok(0, OpDrop, "", 2, 80, 90, 0),
		describe(1, 100, 110, false, "", 0),
	}
	if v := (&simWorkload{ops: legal}).Check(same); len(v) != 0 {
		t.Fatalf("a legal history was refused: %v", v)
	}
	conflict := ok(1, OpAlter, "c", 1, 60, 70, 0)
	conflict.errKind = errs.Conflict
	if v := (&simWorkload{ops: append(legal[:3:3], conflict)}).Check(same); len(v) != 0 {
		t.Fatalf("a change refused as based on an old version was refused by the checker: %v", v)
	}
	for name, ops := range map[string][]simOp{
		"describe misses a completed create":  {ok(0, OpCreate, "a", 0, 0, 10, 1), describe(1, 20, 30, false, "", 0)},
		"describe returns an overwritten tag": {ok(0, OpCreate, "a", 0, 0, 10, 1), ok(1, OpAlter, "b", 1, 20, 30, 2), describe(0, 40, 50, true, "a", 1)},
		"two creates both succeed":            {ok(0, OpCreate, "a", 0, 0, 10, 1), ok(1, OpCreate, "b", 0, 20, 30, 2)},
		"an alter on a stale version wins":    {ok(0, OpCreate, "a", 0, 0, 10, 1), ok(1, OpAlter, "b", 1, 20, 30, 2), ok(0, OpAlter, "c", 1, 40, 50, 3)},
	} {
		v := (&simWorkload{ops: ops}).Check(same)
		if len(v) != 1 || !strings.HasPrefix(v[0], "linearizability: ") {
			t.Errorf("%s: violations %v, want one linearizability violation", name, v)
		}
	}
	v := (&simWorkload{ops: legal}).Check(map[string][]storage.Record{"n1": rec("v"), "n2": rec("w")})
	if len(v) != 1 || !strings.HasPrefix(v[0], "convergence: ") {
		t.Errorf("diverged catalogs: violations %v, want one convergence violation", v)
	}
}
