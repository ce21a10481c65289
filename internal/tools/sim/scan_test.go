package sim

import (
	"strings"
	"testing"

	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/replication/coord"
	"meridian/internal/storage"
	"meridian/internal/topology"
)

func rec(key, value string, wall int64) storage.Record {
	return storage.Record{Key: []byte(key), Value: []byte(value), Version: hlc.Version{WallNanos: wall, NodeID: 1}}
}

// render lists reads as "k=v" or "k=-" (absent), in order.
func render(reads []keyRead) string {
	var out []string
	for _, r := range reads {
		v := "-"
		if r.found {
			v = r.value
		}
		out = append(out, r.key+"="+v)
	}
	return strings.Join(out, " ")
}

// A scan's answer becomes one read per key of the key space it covered, in byte order (k10
// before k2): the whole range when More is false, up to the last key returned when it is set.
func TestScanKeyReads(t *testing.T) {
	keys := sortedKeys(12)
	if got := strings.Join(keys, " "); got != "k0 k1 k10 k11 k2 k3 k4 k5 k6 k7 k8 k9" {
		t.Fatalf("key space in byte order: %s", got)
	}
	items := func(kv ...string) []storage.Record {
		var out []storage.Record
		for i, s := range kv {
			k, v, _ := strings.Cut(s, "=")
			out = append(out, rec(k, v, int64(i+1)))
		}
		return out
	}
	for _, c := range []struct {
		name       string
		start, end string
		limit      int
		items      []storage.Record
		more       bool
		want       string
	}{
		{"whole range, no more", "k1", "k3", 10, items("k10=a", "k2=b"), false, "k1=- k10=a k11=- k2=b"},
		{"more: covered up to the last key returned", "k1", "k3", 2, items("k10=a", "k2=b"), true, "k1=- k10=a k11=- k2=b"},
		{"more: the keys after the last one are unknown", "k1", "k3", 1, items("k10=a"), true, "k1=- k10=a"},
		{"more and nothing returned covers nothing", "k1", "", 1, nil, true, ""},
		{"end empty: to the keyspace's end", "k8", "", 5, items("k9=z"), false, "k8=- k9=z"},
		{"start empty: from the keyspace's start", "", "k10", 5, nil, false, "k0=- k1=-"},
		{"a range between keys", "", "k0", 1, nil, false, ""},
		{"limit reached, no more", "k5", "k7", 2, items("k5=a", "k6=b"), false, "k5=a k6=b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			reads, err := scanKeyReads(keys, []byte(c.start), []byte(c.end), c.limit, c.items, c.more)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(reads); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			for _, r := range reads {
				if r.found && r.version.IsZero() {
					t.Fatalf("read of %s without the item's version", r.key)
				}
			}
		})
	}
	for _, c := range []struct {
		name       string
		start, end string
		limit      int
		items      []storage.Record
		want       string
	}{
		{"over the limit", "", "", 1, items("k0=a", "k1=b"), "over its limit"},
		{"out of order", "", "", 5, items("k2=a", "k10=b"), "ascending"},
		{"repeated", "", "", 5, items("k2=a", "k2=b"), "ascending"},
		{"before the range", "k1", "", 5, items("k0=a"), "outside"},
		{"at the range's end", "k1", "k2", 5, items("k2=a"), "outside"},
		{"unknown key", "", "", 5, items("x=a"), "nobody wrote"},
		{"tombstone", "", "", 5, []storage.Record{{Key: []byte("k1"), Tombstone: true}}, "tombstone"},
	} {
		if _, err := scanKeyReads(keys, []byte(c.start), []byte(c.end), c.limit, c.items, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// splitScanOptions is make sim-ci's split-scan configuration: reads at ONE from a region
// without replicas, two equidistant replica regions, mayflower, one-record pages, writes at
// ALL, reads checked for freshness (what reads at ONE promise).
func splitScanOptions(t *testing.T) Options {
	t.Helper()
	topo, err := topology.Builtin("equidistant")
	if err != nil {
		t.Fatal(err)
	}
	return Options{Topology: topo, Faults: allFaults(t), ReplicaRegions: 2, ReadLevel: config.LevelOne, WriteLevel: config.LevelAll,
		ScanFraction: 0.5, FreshReads: true, Keys: 12,
		KeyspaceOptions: map[string]string{"read_selector": "mayflower", "scan_page_bytes": "1"}}
}

func runScans(t *testing.T, o Options, seeds int) *SeedsResult {
	t.Helper()
	res, err := RunSeeds(SeedsOptions{Base: o, Seeds: seeds, SeedStart: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != nil {
		var b strings.Builder
		PrintFailure(&b, o, res.Failed)
		t.Fatal(b.String())
	}
	sc := res.Scans
	if sc.Scans == 0 || sc.OK == 0 || sc.KeyReads == 0 {
		t.Fatalf("no scans checked: %+v", sc)
	}
	t.Logf("%d seeds: %+v", res.Seeds, sc)
	return res
}

// Scans at the protocol's levels pass, and no partition is read split (QUORUM compares
// replicas key by key).
func TestScansPass(t *testing.T) {
	res := runScans(t, Options{Topology: gcp(t), Faults: allFaults(t), ScanFraction: 0.5, FreshReads: true,
		KeyspaceOptions: map[string]string{"scan_page_bytes": "1"}}, 6)
	if res.Scans.Splits != 0 {
		t.Fatalf("split scans at QUORUM: %+v", res.Scans)
	}
}

// In the split-scan configuration partitions are read from both ends, and the runs pass.
func TestSplitScansPass(t *testing.T) {
	res := runScans(t, splitScanOptions(t), 8)
	if sc := res.Scans; sc.Splits == 0 || sc.PagesForward == 0 || sc.PagesBackward == 0 {
		t.Fatalf("no split scan read from both ends: %+v", sc)
	}
}

// The scan mutation is caught, under its hints (the mutation suite's runs) and in the
// split-scan configuration.
func TestScanMutationIsCaught(t *testing.T) {
	hinted, err := MutationOptions(Options{Topology: gcp(t), Faults: allFaults(t)}, coord.MutationScanSkipPageBoundary)
	if err != nil {
		t.Fatal(err)
	}
	if hinted.ScanFraction == 0 || hinted.KeyspaceOptions["scan_page_bytes"] != "1" {
		t.Fatalf("the mutation's hints do not reach the options: %+v", hinted)
	}
	for name, o := range map[string]Options{"hints": hinted, "split": splitScanOptions(t)} {
		o.Mutation = coord.MutationScanSkipPageBoundary
		res, err := RunSeeds(SeedsOptions{Base: o, Seeds: 10, SeedStart: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed == nil {
			t.Fatalf("%s: %s not caught in %d seeds", name, o.Mutation, res.Seeds)
		}
		t.Logf("%s: caught at seed %d by %s", name, res.Failed.Seed, res.Failed.Violations[0].Checker)
	}
}

// Scans that repair nothing are caught by sequential consistency under the mutation's hints,
// and the same runs pass with the repair on.
func TestScanRepairMutationIsCaught(t *testing.T) {
	o, err := MutationOptions(Options{Topology: gcp(t), Faults: allFaults(t)}, coord.MutationScanNoRepair)
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunSeeds(SeedsOptions{Base: o, Seeds: 10, SeedStart: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != nil {
		t.Fatalf("scans with repair fail: %+v", res.Failed)
	}
	o.Mutation = coord.MutationScanNoRepair
	if res, err = RunSeeds(SeedsOptions{Base: o, Seeds: 10, SeedStart: 1}); err != nil {
		t.Fatal(err)
	}
	if res.Failed == nil {
		t.Fatalf("%s not caught in %d seeds", o.Mutation, res.Seeds)
	}
	t.Logf("caught at seed %d by %s", res.Failed.Seed, res.Failed.Violations[0].Checker)
}

func TestScanOptions(t *testing.T) {
	for _, f := range []float64{-0.1, 1.5} {
		if _, err := Run(Options{Topology: gcp(t), ScanFraction: f}); err == nil || !strings.Contains(err.Error(), "scan fraction") {
			t.Errorf("scan fraction %v: %v", f, err)
		}
	}
	o := splitScanOptions(t)
	o.Seed = 3
	cmd := ReplayCommand(o)
	for _, want := range []string{"--scan-fraction 0.5", "--fresh-reads", "--keys 12", "--read-level ONE", "--write-level ALL", "--replica-regions 2", "--option scan_page_bytes=1", "--topology equidistant"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("replay command lacks %q: %s", want, cmd)
		}
	}
	// No scan randomness without scans: a run without them records no scan.
	rep, err := Run(Options{Topology: gcp(t), Faults: allFaults(t), Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scans != (ScanCounts{}) {
		t.Fatalf("scans without --scan-fraction: %+v", rep.Scans)
	}
}
