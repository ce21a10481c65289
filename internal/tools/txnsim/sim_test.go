package txnsim

import (
	"flag"
	"testing"
)

var simSeeds = flag.Int("txnsim.seeds", 40, "seeds per configuration in TestSimSerializable")

func simOptions(mode string, seed uint64) Options { return SimOptions(mode, seed) }

// checkRun fails the test on an error or an inconclusive seed; otherwise it reports whether the
// seed passed.
func checkRun(t *testing.T, o Options) (ok bool, why string) {
	t.Helper()
	ok, why, err := CheckSeed(o)
	if err != nil {
		t.Fatalf("seed %d: %v", o.Seed, err)
	}
	return ok, why
}

func TestSimSerializable(t *testing.T) {
	for _, mode := range Modes() {
		t.Run(mode, func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(*simSeeds); seed++ {
				if ok, why := checkRun(t, simOptions(mode, seed)); !ok {
					t.Fatalf("seed %d: %s\nreplay: go test ./internal/tools/txnsim -run TestSimSerializable/%s -txnsim.seeds=%d", seed, why, mode, seed)
				}
			}
		})
	}
}

var mutationSeeds = flag.Int("txnsim.mutation-seeds", 200, "seeds a mutation may take to be caught")

// TestSimCatchesMutations: every broken variant of SDUR must be caught (a divergence or a
// non-serializable history) within the seed budget.
func TestSimCatchesMutations(t *testing.T) {
	for _, mode := range Modes() {
		for _, m := range sortedKeys(Mutations(mode)) {
			t.Run(mode+"/"+m, func(t *testing.T) { catchMutation(t, mode, m) })
		}
	}
}

func catchMutation(t *testing.T, mode, m string) {
	{
		{
			for seed := uint64(1); seed <= uint64(*mutationSeeds); seed++ {
				o := simOptions(mode, seed)
				o.Mutation = m
				if ok, why := checkRun(t, o); !ok {
					t.Logf("caught at seed %d: %s", seed, why)
					return
				}
			}
			t.Fatalf("mutation %s not caught in %d seeds", m, *mutationSeeds)
		}
	}
}

// TestSimDeterministic: a seed replays exactly (the replay commands the failures print rely on
// it): same events, same history.
func TestSimDeterministic(t *testing.T) {
	for _, mode := range Modes() {
		a, err := Run(simOptions(mode, 7))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(simOptions(mode, 7))
		if err != nil {
			t.Fatal(err)
		}
		if a.Events != b.Events || len(a.Stats.History) != len(b.Stats.History) {
			t.Fatalf("%s: seed 7 ran twice: %d and %d events, %d and %d transactions", mode, a.Events, b.Events, len(a.Stats.History), len(b.Stats.History))
		}
		for i := range a.Stats.History {
			x, y := a.Stats.History[i], b.Stats.History[i]
			if x.Outcome != y.Outcome || x.Return != y.Return {
				t.Fatalf("%s: transaction %d differs between two runs of one seed: %+v vs %+v", mode, i, *x, *y)
			}
		}
	}
}

// TestSimRestartsFromSavedState: the simulation's restarts do begin from saved states (so that
// the seeds check Snapshot and Restore under faults), in some seeds.
func TestSimRestartsFromSavedState(t *testing.T) {
	restores := 0
	for seed := uint64(1); seed <= 6; seed++ {
		res, err := Run(simOptions("sdur", seed))
		if err != nil {
			t.Fatal(err)
		}
		restores += res.Stats.Restores
	}
	if restores == 0 {
		t.Fatal("no restart began from a saved state in 6 seeds")
	}
}
