package txnsim

import (
	"flag"
	"testing"
	"time"

	"meridian/internal/sdur"
	"meridian/internal/tools/check"
)

var simSeeds = flag.Int("txnsim.seeds", 40, "seeds per configuration in TestSimSerializable")

// simOptions is the simulation's configuration for a seed: the check workload with every fault,
// delaying and reordering on, alternating deployments and threshold units.
func simOptions(mode string, seed uint64) Options {
	o := Options{
		Mode: mode, Seed: seed, Workload: Check, GlobalPct: 40, ReadOnlyPct: 15, ItemsPerPartition: 10,
		ClientsPerRegion: 3, Duration: 6 * time.Second, Warmup: time.Millisecond, Quiesce: 40 * time.Second,
		KeepHistory: true, AutoDelay: true,
		Faults:    Faults{Loss: 0.02, Dup: 0.02, SpikeProb: 0.02, Spike: 300 * time.Millisecond, Crashes: 2, CrashFor: 3 * time.Second, Cuts: 1, CutFor: 2 * time.Second},
		VoteRetry: 300 * time.Millisecond, RecoveryTimeout: 2 * time.Second, SubmitRetry: time.Second, ClientTimeout: 3 * time.Second,
	}
	if seed%2 == 1 {
		o.Deployment = WAN2
	}
	switch seed % 3 {
	case 0:
		o.Threshold = sdur.Threshold{Unit: sdur.Entries, K: 8}
	case 1:
		o.Threshold = sdur.Threshold{Unit: sdur.Ticks, K: 20}
	}
	return o
}

// checkRun fails unless the run converged and its history is serializable.
func checkRun(t *testing.T, o Options) (ok bool, why string) {
	t.Helper()
	res, err := Run(o)
	if err != nil {
		t.Fatalf("seed %d: %v", o.Seed, err)
	}
	if !res.Converged {
		return false, "diverged: " + res.Divergence
	}
	verdict, anomalies := res.CheckSerializable(time.Minute)
	switch verdict {
	case check.Illegal:
		return false, anomalies[0].String()
	case check.Unknown:
		t.Fatalf("seed %d: the checker ran out of time", o.Seed)
	}
	if res.Stuck > 0 {
		return false, "stuck transactions after quiescence"
	}
	commits := 0
	for _, n := range res.Stats.Commits {
		commits += n
	}
	if commits == 0 {
		t.Fatalf("seed %d: nothing committed (the check proves nothing)", o.Seed)
	}
	return true, ""
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
