package sim

import (
	"strings"
	"testing"

	"meridian/internal/topology"
)

func gcp(t *testing.T) *topology.Topology {
	t.Helper()
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func allFaults(t *testing.T) map[string]bool {
	f, err := ParseFaults("all")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The same seed gives the same execution byte for byte: the hash covers every delivered
// message, invocation, response, crash and partition, in order.
func TestSameSeedSameTrace(t *testing.T) {
	var lines [2][]string
	var hashes [2]uint64
	for i := range 2 {
		rep, err := Run(Options{Seed: 7, Topology: gcp(t), Faults: allFaults(t), Trace: func(l string) { lines[i] = append(lines[i], l) }})
		if err != nil {
			t.Fatal(err)
		}
		hashes[i] = rep.TraceHash
		if rep.Ops == 0 || rep.Events == 0 {
			t.Fatalf("empty run: %+v", rep)
		}
	}
	if hashes[0] != hashes[1] || len(lines[0]) != len(lines[1]) {
		for j := range min(len(lines[0]), len(lines[1])) {
			if lines[0][j] != lines[1][j] {
				t.Fatalf("runs diverge at trace line %d:\n  %s\n  %s", j, lines[0][j], lines[1][j])
			}
		}
		t.Fatalf("hashes %x vs %x, %d vs %d lines", hashes[0], hashes[1], len(lines[0]), len(lines[1]))
	}
	other, err := Run(Options{Seed: 8, Topology: gcp(t), Faults: allFaults(t)})
	if err != nil {
		t.Fatal(err)
	}
	if other.TraceHash == hashes[0] {
		t.Fatal("a different seed gave the same trace: the seed is not driving the run")
	}
}

func TestQuorumPassesWithAllFaults(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	res, err := RunSeeds(SeedsOptions{Base: Options{Topology: gcp(t), Faults: allFaults(t)}, Seeds: seeds, SeedStart: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != nil {
		var b strings.Builder
		PrintFailure(&b, Options{Topology: gcp(t), Faults: allFaults(t)}, res.Failed)
		t.Fatal(b.String())
	}
	if res.Crashes == 0 || res.Partitions == 0 || res.OK == 0 {
		t.Fatalf("faults or operations missing: %+v", res)
	}
	t.Logf("%d seeds, %d ops (%d ok), %d crashes, %d partitions, %.1f sim s per wall s", res.Seeds, res.Ops, res.OK, res.Crashes, res.Partitions, res.SimPerWall())
}

// Every mutation must be caught within a bounded number of seeds: a checker that never fails
// proves nothing.
func TestMutationsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up to hundreds of seeds")
	}
	results, err := RunMutations(Options{Topology: gcp(t), Faults: allFaults(t), Seed: 1}, 200, 0, nil)
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
}

// A violation found once is found again by its replay: same seed, same options, same
// violation text.
func TestReplayReproducesViolation(t *testing.T) {
	o := Options{Topology: gcp(t), Faults: allFaults(t), Mutation: "one-one"}
	res, err := RunSeeds(SeedsOptions{Base: o, Seeds: 100, SeedStart: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed == nil {
		t.Fatal("one-one was not caught, so there is nothing to replay")
	}
	o.Seed = res.Failed.Seed
	again, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	if again.TraceHash != res.Failed.TraceHash || len(again.Violations) != len(res.Failed.Violations) ||
		again.Violations[0].Error() != res.Failed.Violations[0].Error() {
		t.Fatalf("replay of seed %d differs:\nfirst:  %v\nreplay: %v", o.Seed, res.Failed.Violations[0], again.Violations)
	}
	if cmd := ReplayCommand(o); !strings.Contains(cmd, "--mutate one-one") || !strings.Contains(cmd, "--seed-start") {
		t.Fatalf("replay command incomplete: %s", cmd)
	}
}

func TestParseFaults(t *testing.T) {
	f, err := ParseFaults("loss,crash")
	if err != nil || !f[FaultLoss] || !f[FaultCrash] || len(f) != 2 {
		t.Fatalf("%v %v", f, err)
	}
	if _, err := ParseFaults("loss,meteor"); err == nil || !strings.Contains(err.Error(), "meteor") {
		t.Fatalf("unknown fault accepted: %v", err)
	}
	if FaultList(allFaults(t)) != "all" {
		t.Fatal("FaultList(all)")
	}
}

// The proxy-timestamp anomaly: a client whose requests move between coordinators whose
// clocks disagree by more than a write's latency gets its second write stamped older than
// its first, and last-writer-wins undoes it. Sessions (the client sends the newest version it
// has seen; the coordinator's HLC moves past it) fix it.
func TestSessionsFixProxyTimestampAnomaly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up to 300 seeds")
	}
	faults, err := ParseFaults("clock-beyond,loss")
	if err != nil {
		t.Fatal(err)
	}
	base := Options{Topology: gcp(t), Faults: faults, Roam: true}
	without := base
	without.NoSessions = true
	res, err := RunSeeds(SeedsOptions{Base: without, Seeds: 300, SeedStart: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed == nil {
		t.Fatalf("no anomaly without sessions in %d seeds: the test cannot tell sessions apart", res.Seeds)
	}
	failing := res.Failed.Seed
	t.Logf("without sessions: seed %d violates %s", failing, res.Failed.Violations[0].Checker)
	with := base
	res2, err := RunSeeds(SeedsOptions{Base: with, Seeds: int(failing) + 50, SeedStart: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Failed != nil {
		var b strings.Builder
		PrintFailure(&b, with, res2.Failed)
		t.Fatalf("with sessions:\n%s", b.String())
	}
}

// Seeds run on several cores give the sequential run's answer: the same sums, and the same
// first failing seed for a broken variant.
func TestParallelSeedsMatchSequential(t *testing.T) {
	for _, mutation := range []string{"", "one-one"} {
		var got [2]*SeedsResult
		for i, workers := range []int{1, 3} {
			o := Options{Topology: gcp(t), Faults: allFaults(t), Mutation: mutation}
			res, err := RunSeeds(SeedsOptions{Base: o, Seeds: 12, SeedStart: 1, Workers: workers})
			if err != nil {
				t.Fatal(err)
			}
			got[i] = res
		}
		a, b := got[0], got[1]
		if a.Seeds != b.Seeds || a.Ops != b.Ops || a.OK != b.OK || a.Crashes != b.Crashes || a.SimSeconds != b.SimSeconds {
			t.Fatalf("mutation %q: sequential %+v, parallel %+v", mutation, a, b)
		}
		if (a.Failed == nil) != (b.Failed == nil) || (a.Failed != nil && (a.Failed.Seed != b.Failed.Seed || a.Failed.TraceHash != b.Failed.TraceHash)) {
			t.Fatalf("mutation %q: the first failure differs: %+v vs %+v", mutation, a.Failed, b.Failed)
		}
		if mutation != "" && a.Failed == nil {
			t.Fatalf("mutation %q not caught in 12 seeds: the comparison proves nothing", mutation)
		}
	}
}
