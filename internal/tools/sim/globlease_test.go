package sim

import (
	"maps"
	"strings"
	"testing"
)

// GlobLease's broken variants are each caught: the two timing-rule mutations by the
// sequential-consistency checker, the mastership one by the one-master invariant.
func TestGlobLeaseMutationsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up to hundreds of seeds")
	}
	results, err := RunMutations(Options{Protocol: "globlease", Topology: gcp(t), Faults: allFaults(t), Seed: 1}, 200, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if !r.Caught {
			t.Errorf("mutation %s (%s) not caught in %d seeds", r.Mutation, r.Description, r.SeedsTried)
			continue
		}
		if r.Mutation == "master-ignores-lease" && r.Checker != "invariant" {
			t.Errorf("master-ignores-lease caught by %s, want the one-master invariant", r.Checker)
		}
		t.Logf("mutation %s caught by %s after %d seeds", r.Mutation, r.Checker, r.SeedsTried)
	}
}

// The settings that let each mutation show do not break the correct protocol: what the
// mutation suite catches is the mutation.
func TestGlobLeaseCorrectUnderMutationSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("runs hundreds of seeds")
	}
	for _, m := range []string{"lease-record-at-grant", "write-skips-lease-holder", "master-ignores-lease"} {
		o := Options{Protocol: "globlease", Topology: gcp(t), Faults: allFaults(t), KeyspaceOptions: map[string]string{}}
		prepareGlobLease(&o)
		o.Faults = maps.Clone(o.Faults)
		if setup, ok := mutationSetup[m]; ok {
			setup(&o)
		}
		mustPassSeeds(t, o, 100, "settings of "+m+", no mutation")
	}
}

// One node per region (no affiliated nodes) and passive writes: the correct protocol passes.
func TestGlobLeaseVariants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs hundreds of seeds")
	}
	one := Options{Protocol: "globlease", Topology: gcp(t), Faults: allFaults(t), NodesPerRegion: 1}
	res := mustPassSeeds(t, one, 100, "one node per region")
	t.Logf("one node per region: %d seeds, reads %v", res.Seeds, res.ReadPaths)

	// Passive writes are acknowledged by the master alone: they survive everything but the
	// loss of the master before propagation (docs/globlease.md), so no crashes or partitions.
	passive := Options{Protocol: "globlease", Topology: gcp(t), KeyspaceOptions: map[string]string{"write_mode": "passive"},
		Faults: map[string]bool{FaultLoss: true, FaultDup: true, FaultReorder: true, FaultDelay: true, FaultSlowDisk: true, FaultClock: true}}
	mustPassSeeds(t, passive, 100, "passive writes")
}

// GlobLease runs are deterministic too: same seed, same trace.
func TestGlobLeaseSameSeedSameTrace(t *testing.T) {
	for _, seed := range []uint64{3, 17} {
		o := Options{Protocol: "globlease", Topology: gcp(t), Faults: allFaults(t), Seed: seed}
		a, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if a.TraceHash != b.TraceHash || a.Events != b.Events {
			t.Fatalf("seed %d: trace %x (%d events) then %x (%d events)", seed, a.TraceHash, a.Events, b.TraceHash, b.Events)
		}
	}
}

// mustPassSeeds runs seeds 1..n of o and fails the test with the first failure's explanation
// and replay command.
func mustPassSeeds(t *testing.T, o Options, n int, what string) *SeedsResult {
	t.Helper()
	res, err := RunSeeds(SeedsOptions{Base: o, Seeds: n, SeedStart: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != nil {
		var b strings.Builder
		PrintFailure(&b, o, res.Failed)
		t.Fatalf("%s:\n%s", what, b.String())
	}
	return res
}
