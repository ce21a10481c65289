package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meridian/internal/tools/bench"
	"meridian/internal/topology"
)

// The emulated WAN cannot deliver early, so no measured latency may beat its physical lower
// bound; a lower bound that is wrong (too high) or an emulation that cuts corners fails here.
func TestDemoReportsLatencyAtOrAboveLowerBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a small cluster for a few seconds")
	}
	topo, err := topology.Parse([]byte(`
name: tiny
source: test
regions: [a, b, c]
intra_region_rtt_ms: {a: 0, b: 0, c: 0}
rtt_ms:
  a: {b: 20, c: 60}
  b: {c: 40}
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	w := DefaultWorkload()
	w.RecordCount = 50
	w.ReadProportion, w.UpdateProportion = 0.5, 0.5
	var out bytes.Buffer
	rep, err := Run(context.Background(), Options{Topology: topo, Workload: w, Duration: 1500 * time.Millisecond,
		Warmup: time.Second, ClientsPerRegion: 2, Out: &out, Seed: 3})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if len(rep.Runs) != len(Configs) {
		t.Fatalf("%d runs, want %d", len(rep.Runs), len(Configs))
	}
	wantBound := map[string]map[string][2]float64{ // run → region → {read, write} bound in ms
		"quorum QUORUM/QUORUM": {"a": {20, 20}, "b": {20, 20}, "c": {40, 40}},
		"quorum ALL/ONE":       {"a": {60, 0}, "b": {40, 0}, "c": {60, 0}},
		// θ lower: one one-way delay to the nearest peer; θ upper: no WAN message.
		"meteorshower QUORUM/QUORUM theta=lower": {"a": {10, 20}, "b": {10, 20}, "c": {20, 40}},
		"meteorshower QUORUM/QUORUM theta=upper": {"a": {0, 20}, "b": {0, 20}, "c": {0, 40}},
		// GlobLease: reads under a lease need no WAN message; writes go to the master (in a)
		// and wait for a majority there.
		"globlease": {"a": {0, 20}, "b": {0, 40}, "c": {0, 80}},
		// Raft: the leader is steered to a and serves reads under its lease; elsewhere a
		// read costs the trip to the leader (which answers the read index under its
		// lease); writes cost the trip to the leader and the leader's nearest majority.
		"raft LINEARIZABLE": {"a": {0, 20}, "b": {20, 40}, "c": {60, 80}},
		// Canopus: a write's cycle gathers every region's state, the round trip to the
		// farthest region; reads of keys free of write leases need no WAN message.
		"canopus": {"a": {0, 60}, "b": {0, 40}, "c": {0, 60}},
	}
	for _, run := range rep.Runs {
		key := run.Label()
		if _, ok := wantBound[key]; !ok {
			t.Fatalf("no expected bounds for %q", key)
		}
		for reg, want := range wantBound[key] {
			s := run.Regions[reg]
			if s.Read.LowerBoundMs != want[0] || s.Write.LowerBoundMs != want[1] {
				t.Fatalf("%s %s: bounds read %.1f write %.1f, want %v", key, reg, s.Read.LowerBoundMs, s.Write.LowerBoundMs, want)
			}
			if s.Read.Count == 0 || s.Write.Count == 0 {
				t.Fatalf("%s %s: no operations measured: %+v", key, reg, s)
			}
			if s.Read.Errors+s.Write.Errors > 0 {
				t.Fatalf("%s %s: errors %+v", key, reg, s)
			}
			// 0.5 ms of histogram rounding slack.
			if s.Read.P50Ms+0.5 < s.Read.LowerBoundMs || s.Write.P50Ms+0.5 < s.Write.LowerBoundMs {
				t.Fatalf("%s %s: p50 below the physical lower bound: %+v", key, reg, s)
			}
		}
	}
	if !strings.Contains(out.String(), "ratio") || !strings.Contains(out.String(), "R + W > N") {
		t.Fatalf("the table or the explanation is missing:\n%s", out.String())
	}
	path := filepath.Join(t.TempDir(), "demo.json")
	if err := bench.WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	r0 := generic["runs"].([]any)[0].(map[string]any)
	for _, k := range []string{"protocol", "read_level", "write_level", "regions", "throughput_ops"} {
		if _, ok := r0[k]; !ok {
			t.Fatalf("JSON run lacks %q: %s", k, b)
		}
	}
	read := r0["regions"].(map[string]any)["a"].(map[string]any)["read"].(map[string]any)
	for _, k := range []string{"count", "p50_ms", "p99_ms", "p999_ms", "lower_bound_ms"} {
		if _, ok := read[k]; !ok {
			t.Fatalf("JSON read stats lack %q: %s", k, b)
		}
	}
	if generic["topology"] != "tiny" {
		t.Fatalf("topology %v", generic["topology"])
	}
}
