package cassandra

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// TestCPU starts the integration test's three nodes with the lab's options, prepares the
// benchmark keyspace, lets the cluster settle, and logs the CPU the three JVMs use while no
// client sends anything, per node and per thread group. Then, with MERIDIAN_CASSANDRA_MAX=1,
// it runs the lab's highest-throughput search (p99 < 100 ms; warm-up
// MERIDIAN_CASSANDRA_WARMUP, default 60s) on loopback; with MERIDIAN_CASSANDRA_RATE > 0, it
// loads YCSB A's records and logs the same CPU breakdown at that open-loop rate (ops/s per
// region), with the latencies. It asserts nothing about timings or CPU: the machine is
// shared, so the numbers are noisy, and the test exists to measure configuration changes.
// Skipped unless MERIDIAN_CASSANDRA_CPU=1. MERIDIAN_CASSANDRA_SETTLE (default 60s) and
// MERIDIAN_CASSANDRA_SAMPLE (default 30s) set the phases.
func TestCPU(t *testing.T) {
	if os.Getenv("MERIDIAN_CASSANDRA_CPU") != "1" {
		t.Skip("set MERIDIAN_CASSANDRA_CPU=1 to measure the CPU of a real 3-node Cassandra cluster (~2-4 minutes)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("java is not installed")
	}
	settle := envDuration(t, "MERIDIAN_CASSANDRA_SETTLE", time.Minute)
	sample := envDuration(t, "MERIDIAN_CASSANDRA_SAMPLE", 30*time.Second)
	var ratePerRegion float64
	if s := os.Getenv("MERIDIAN_CASSANDRA_RATE"); s != "" {
		var err error
		if ratePerRegion, err = strconv.ParseFloat(s, 64); err != nil {
			t.Fatalf("MERIDIAN_CASSANDRA_RATE: %v", err)
		}
	}
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+3*(settle+sample))
	defer cancel()
	dir := t.TempDir()
	if d := os.Getenv("MERIDIAN_CASSANDRA_DIR"); d != "" {
		dir = d
	}
	o := peer.Options{Hosts: testHosts(), Dir: dir, Topology: topo, Log: testLog{t}}
	// MERIDIAN_CASSANDRA_JVM_ARGS adds JVM flags (space-separated), e.g. GC logging.
	c, err := Start(ctx, o, Options{ExtraJVMArgs: strings.Fields(os.Getenv("MERIDIAN_CASSANDRA_JVM_ARGS"))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	target := c.Target()
	defer target.Close()
	cfgs, err := bench.ParseConfigs("cassandra:QUORUM/QUORUM")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := target.Prepare(ctx, cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("settling for %v", settle)
	time.Sleep(settle)
	measureCPU(t, c, "idle", func() { time.Sleep(sample) })

	w, err := ycsb.Core("a")
	if err != nil {
		t.Fatal(err)
	}
	// The lab's records: 10,000 of one 100-byte field (meridian bench's defaults).
	w.RecordCount, w.FieldCount, w.FieldLength = 10_000, 1, 100
	if os.Getenv("MERIDIAN_CASSANDRA_MAX") == "1" {
		// The lab's search (docs/benchmarks.md, "Throughput per node at equal p99"), on
		// loopback: no router, and the clients are this process.
		var res *bench.MaxResult
		measureCPU(t, c, "max search", func() {
			warmup := envDuration(t, "MERIDIAN_CASSANDRA_WARMUP", time.Minute) // the lab's --warmup
			res, err = bench.FindMax(ctx, target, cfgs[0], len(c.nodes), bench.RunOptions{Workload: w, Warmup: warmup, Seed: 1},
				bench.MaxOptions{P99BoundMs: 100, MachineCPU: true}, testLog{t})
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("highest throughput with p99 < 100 ms: %.0f ops/s (p99 %.1f ms), %.0f ops/s per node, machine CPU %.2f cores",
			res.BestOps, res.BestP99Ms, res.OpsPerNode, res.CPUCores)
		return
	}
	if ratePerRegion <= 0 {
		return
	}
	// The lab loads with 256 inserts in flight; a load that fails is logged and tried once
	// more, to tell a cold cluster from a slow one.
	for attempt := 1; ; attempt++ {
		began := time.Now()
		err := bench.Load(ctx, sess, w, topo.Regions, 256)
		if err == nil {
			t.Logf("loaded %d records in %.1fs (attempt %d)", w.RecordCount, time.Since(began).Seconds(), attempt)
			break
		}
		if attempt == 2 {
			t.Fatal(err)
		}
		t.Logf("load attempt %d failed after %.1fs: %v", attempt, time.Since(began).Seconds(), err)
	}
	ro := bench.RunOptions{Workload: w, RatePerRegion: ratePerRegion, ClientsPerRegion: 256,
		SkipLoad: true, Duration: settle, Seed: 1} // a warm-up whose results are dropped
	t.Logf("warming up for %v at %.0f ops/s per region", settle, ratePerRegion)
	if _, err := bench.Execute(ctx, sess, topo.Regions, cfgs[0], ro); err != nil {
		t.Fatal(err)
	}
	ro.Duration = sample
	var run *bench.Run
	measureCPU(t, c, fmt.Sprintf("%.0f ops/s per region", ratePerRegion), func() {
		if run, err = bench.Execute(ctx, sess, topo.Regions, cfgs[0], ro); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("achieved %.0f ops/s in total", run.ThroughputOps)
	for _, r := range topo.Regions {
		s := run.Regions[r]
		t.Logf("  %-8s read p50 %6.1f ms p99 %6.1f ms, write p50 %6.1f ms p99 %6.1f ms, errors %d",
			r, s.Read.P50Ms, s.Read.P99Ms, s.Write.P50Ms, s.Write.P99Ms, s.Read.Errors+s.Write.Errors)
	}
}

// measureCPU logs the CPU the cluster's JVMs use while phase runs, per node and per thread
// group (the 15 busiest).
func measureCPU(t *testing.T, c *Cluster, name string, phase func()) {
	var pids []int
	for _, n := range c.nodes {
		pids = append(pids, n.pid)
	}
	before := make([]map[string]int64, len(pids))
	for i, pid := range pids {
		before[i] = threadTicks(t, pid)
	}
	began := time.Now()
	phase()
	elapsed := time.Since(began).Seconds()
	const ticksPerSec = 100 // USER_HZ on Linux
	groups := map[string]int64{}
	var total float64
	for i, pid := range pids {
		after := threadTicks(t, pid)
		var node int64
		for name, v := range after {
			d := v - before[i][name]
			node += d
			groups[threadGroup(name)] += d
		}
		cores := float64(node) / ticksPerSec / elapsed
		total += cores
		t.Logf("%s: %s (pid %d): %.3f cores", name, c.nodes[i].host.Name, pid, cores)
	}
	t.Logf("%s: %d JVMs over %.0fs: %.3f cores in total", name, len(pids), elapsed, total)
	type group struct {
		name  string
		ticks int64
	}
	var gs []group
	for name, v := range groups {
		gs = append(gs, group{name, v})
	}
	sort.Slice(gs, func(a, b int) bool { return gs[a].ticks > gs[b].ticks })
	for _, g := range gs[:min(len(gs), 15)] {
		if g.ticks > 0 {
			t.Logf("  %-24s %.3f cores (all nodes)", g.name, float64(g.ticks)/ticksPerSec/elapsed)
		}
	}
}

// threadTicks is user+system CPU ticks per thread of pid, keyed by "name/tid" (a thread
// name, from /proc's comm, is not unique).
func threadTicks(t *testing.T, pid int) map[string]int64 {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of pid %d: %v", pid, err)
	}
	out := map[string]int64{}
	for _, p := range tasks {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		s := string(data)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		name := s[open+1 : close]
		// Fields after the name: state is field 3, utime 14, stime 15 (1-based).
		f := strings.Fields(s[close+1:])
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[name+"/"+filepath.Base(filepath.Dir(p))] = utime + stime
	}
	return out
}

// threadGroup strips a thread key's tid and numeric suffixes, so that the workers of one
// pool add up: "CompactionExec:1/1234" → "CompactionExec".
func threadGroup(key string) string {
	name := key[:strings.LastIndexByte(key, '/')]
	return strings.TrimRight(name, "0123456789:-#")
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}
