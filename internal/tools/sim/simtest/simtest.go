// Package simtest holds what the protocols' simulation tests share: the topology and faults
// they run under, and a runner that fails a test with the first failing seed's explanation
// and replay command.
package simtest

import (
	"strings"
	"testing"

	"meridian/internal/tools/sim"
	"meridian/internal/topology"
)

// GCP is the built-in topology of the MeteorShower paper's measurements.
func GCP(t testing.TB) *topology.Topology {
	t.Helper()
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// AllFaults is `--faults all`.
func AllFaults(t testing.TB) map[string]bool {
	t.Helper()
	f, err := sim.ParseFaults("all")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// MustPassSeeds runs seeds 1..n of o and fails the test with the first failure's explanation
// and replay command.
func MustPassSeeds(t testing.TB, o sim.Options, n int, what string) *sim.SeedsResult {
	t.Helper()
	res, err := sim.RunSeeds(sim.SeedsOptions{Base: o, Seeds: n, SeedStart: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != nil {
		var b strings.Builder
		sim.PrintFailure(&b, o, res.Failed)
		t.Fatalf("%s:\n%s", what, b.String())
	}
	return res
}

// MustCatchMutations runs the mutation suite of o.Protocol (up to maxSeeds seeds each) and
// fails the test for each mutation no checker caught.
func MustCatchMutations(t testing.TB, o sim.Options, maxSeeds int) []sim.MutationResult {
	t.Helper()
	results, err := sim.RunMutations(o, maxSeeds, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if !r.Caught {
			t.Errorf("mutation %s (%s) not caught in %d seeds", r.Mutation, r.Description, r.SeedsTried)
			continue
		}
		t.Logf("mutation %s caught by %s after %d seeds", r.Mutation, r.Checker, r.SeedsTried)
	}
	return results
}
