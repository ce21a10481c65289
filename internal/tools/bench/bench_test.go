package bench

import (
	"context"
	"testing"
	"time"

	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

func TestLowerBound(t *testing.T) {
	topo, _ := topology.Builtin("gcp-meteorshower-3")
	cases := []struct {
		region      string
		read, write string
		wantR       float64
		wantW       float64
	}{
		{"europe", "QUORUM", "QUORUM", 100, 100},
		{"asia", "QUORUM", "QUORUM", 150, 150},
		{"europe", "ALL", "ONE", 250, 0},
		{"us", "ALL", "ONE", 150, 0},
		{"asia", "LOCAL_ONE", "ALL", 0, 250},
	}
	for _, c := range cases {
		cfg := Config{Protocol: "quorum", ReadLevel: c.read, WriteLevel: c.write}
		if r, w := LowerBoundMs(topo, cfg, c.region, "read"), LowerBoundMs(topo, cfg, c.region, "write"); r != c.wantR || w != c.wantW {
			t.Errorf("%s %s/%s: bounds %v/%v, want %v/%v", c.region, c.read, c.write, r, w, c.wantR, c.wantW)
		}
	}
}

func TestParseConfigs(t *testing.T) {
	cfgs, err := ParseConfigs("quorum, quorum:ALL/ONE ; meteorshower:QUORUM/QUORUM:theta=upper+interval=2ms")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 3 || cfgs[0].ReadLevel != "QUORUM" || cfgs[1].WriteLevel != "ONE" ||
		cfgs[2].Options["theta"] != "upper" || cfgs[2].Options["interval"] != "2ms" {
		t.Fatalf("%+v", cfgs)
	}
	for _, bad := range []string{"", "quorum:ALL", "quorum:A/B:x", "quorum:A/B:x=1:extra"} {
		if _, err := ParseConfigs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestExecuteAgainstNoop(t *testing.T) {
	topo, _ := topology.Builtin("gcp-meteorshower-3")
	w, err := ycsb.Core("a")
	if err != nil {
		t.Fatal(err)
	}
	w.RecordCount = 100
	sess, _ := (&NoopTarget{Topo: topo}).Prepare(context.Background(), Config{Protocol: "noop"})
	run, err := Execute(context.Background(), sess, topo.Regions, Config{Protocol: "noop"},
		RunOptions{Workload: w, ClientsPerRegion: 2, Duration: time.Second, Warmup: 100 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range topo.Regions {
		s := run.Regions[r]
		if s.Read.Count == 0 || s.Write.Count == 0 {
			t.Fatalf("%s: workload A must issue reads and updates: %+v", r, s)
		}
		if len(s.Read.Percentiles) == 0 || s.Read.Percentiles[len(s.Read.Percentiles)-1][0] != 100 {
			t.Fatalf("%s: percentiles missing", r)
		}
	}
	if run.ThroughputOps <= 0 || len(run.Timeline) == 0 {
		t.Fatalf("throughput %v, timeline %d points", run.ThroughputOps, len(run.Timeline))
	}
}

func TestOpenLoopCountsFromIntendedStart(t *testing.T) {
	// A target that takes 20ms per op with one worker cannot keep up with 200 ops/s: in an
	// open loop the queueing delay must show in the latency (coordinated omission avoided).
	topo := topology.Equidistant("t", []string{"a"}, 0, 0)
	w, _ := ycsb.Core("c")
	w.RecordCount = 10
	sess := slowSession{d: 20 * time.Millisecond}
	run, err := Execute(context.Background(), sess, topo.Regions, Config{Protocol: "slow"},
		RunOptions{Workload: w, ClientsPerRegion: 1, RatePerRegion: 200, Duration: time.Second, SkipLoad: true, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if p99 := run.Regions["a"].Read.P99Ms; p99 < 100 {
		t.Fatalf("p99 %.1f ms: a saturated open loop must count queueing from the intended start", p99)
	}
}

type slowSession struct{ d time.Duration }

func (s slowSession) Connect(string, int) (KV, error)   { return slowKV(s), nil }
func (slowSession) LowerBoundMs(string, string) float64 { return 0 }
func (slowSession) Close() error                        { return nil }

type slowKV struct{ d time.Duration }

func (k slowKV) Read(context.Context, []byte) error           { time.Sleep(k.d); return nil }
func (k slowKV) Update(context.Context, []byte, []byte) error { time.Sleep(k.d); return nil }
func (k slowKV) Insert(context.Context, []byte, []byte) error { time.Sleep(k.d); return nil }
func (k slowKV) Scan(context.Context, []byte, int) error      { time.Sleep(k.d); return nil }
