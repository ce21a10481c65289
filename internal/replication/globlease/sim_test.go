package globlease_test

import (
	"testing"

	"meridian/internal/tools/sim"
	"meridian/internal/tools/sim/simtest"
)

// GlobLease's broken variants are each caught: the two timing-rule mutations by the
// sequential-consistency checker, the mastership one by the one-master invariant.
func TestGlobLeaseMutationsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up to hundreds of seeds")
	}
	results := simtest.MustCatchMutations(t, sim.Options{Protocol: "globlease", Topology: simtest.GCP(t), Faults: simtest.AllFaults(t), Seed: 1}, 200)
	for _, r := range results {
		if r.Mutation == "master-ignores-lease" && r.Caught && r.Checker != "invariant" {
			t.Errorf("master-ignores-lease caught by %s, want the one-master invariant", r.Checker)
		}
	}
}

// The settings that let each mutation show do not break the correct protocol: what the
// mutation suite catches is the mutation.
func TestGlobLeaseCorrectUnderMutationSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("runs hundreds of seeds")
	}
	for _, m := range []string{"lease-record-at-grant", "write-skips-lease-holder", "master-ignores-lease"} {
		o, err := sim.MutationOptions(sim.Options{Protocol: "globlease", Topology: simtest.GCP(t), Faults: simtest.AllFaults(t)}, m)
		if err != nil {
			t.Fatal(err)
		}
		simtest.MustPassSeeds(t, o, 100, "settings of "+m+", no mutation")
	}
}

// One node per region (no affiliated nodes) and passive writes: the correct protocol passes.
func TestGlobLeaseVariants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs hundreds of seeds")
	}
	one := sim.Options{Protocol: "globlease", Topology: simtest.GCP(t), Faults: simtest.AllFaults(t), NodesPerRegion: 1}
	res := simtest.MustPassSeeds(t, one, 100, "one node per region")
	t.Logf("one node per region: %d seeds, reads %v", res.Seeds, res.ReadPaths)

	// Passive writes are acknowledged by the master alone: they survive everything but the
	// loss of the master before propagation (docs/globlease.md), so no crashes or partitions.
	passive := sim.Options{Protocol: "globlease", Topology: simtest.GCP(t), KeyspaceOptions: map[string]string{"write_mode": "passive"},
		Faults: map[string]bool{sim.FaultLoss: true, sim.FaultDup: true, sim.FaultReorder: true, sim.FaultDelay: true, sim.FaultSlowDisk: true, sim.FaultClock: true}}
	simtest.MustPassSeeds(t, passive, 100, "passive writes")
}

// GlobLease runs are deterministic too: same seed, same trace.
func TestGlobLeaseSameSeedSameTrace(t *testing.T) {
	for _, seed := range []uint64{3, 17} {
		o := sim.Options{Protocol: "globlease", Topology: simtest.GCP(t), Faults: simtest.AllFaults(t), Seed: seed}
		a, err := sim.Run(o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sim.Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if a.TraceHash != b.TraceHash || a.Events != b.Events {
			t.Fatalf("seed %d: trace %x (%d events) then %x (%d events)", seed, a.TraceHash, a.Events, b.TraceHash, b.Events)
		}
	}
}

// Seeds that found a master retransmitting an update (same write ID, fresh send time) after
// the replica had refused the first copy's lease: the retransmission passed the freshness
// test and started a lease the master, following the first acknowledgement, did not count
// on, and a newer write committed without it (the lease invariant). A replica now refuses
// every copy of an update whose first copy it refused. Seed 1993: a node that became the
// master of a key kept the lease it held on it as a replica of the old master, past the first
// write it committed; a new master now drops its own leases on the keys it takes.
func TestGlobLeaseSeedsThatBrokeTheLeaseInvariant(t *testing.T) {
	for _, tc := range []struct {
		seed           uint64
		nodesPerRegion int
	}{{999, 1}, {318, 2}, {1993, 2}} {
		o := sim.Options{Protocol: "globlease", Topology: simtest.GCP(t), Faults: simtest.AllFaults(t), Seed: tc.seed, NodesPerRegion: tc.nodesPerRegion}
		rep, err := sim.Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Violations) > 0 {
			t.Errorf("seed %d, %d node(s) per region: %v", tc.seed, tc.nodesPerRegion, rep.Violations)
		}
	}
}
