package zookeeper

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/tools/ycsb"
)

// cachedLibDir is the jar directory the integration test uses: $MERIDIAN_ZOOKEEPER_LIB, else
// what scripts/fetch-zookeeper.sh left in the cache ($MERIDIAN_CACHE, default
// ~/.cache/meridian). The test never downloads: "" when neither is there.
func cachedLibDir() string {
	if env := os.Getenv(LibDirEnv); env != "" {
		return env
	}
	cache := os.Getenv("MERIDIAN_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "meridian")
	}
	dir := filepath.Join(cache, "zookeeper-"+DefaultVersion)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return ""
	}
	return filepath.Join(dir, "lib")
}

// TestEnsembleIntegration starts a real ensemble on loopback addresses, without WAN delay: one
// voter per region of gcp-meteorshower-3 and a second europe server as an observer (Voters: 3),
// then writes from one region and reads linearizably from every server, runs a short benchmark
// of both read modes, and crashes and restarts a follower. It needs Java and the jars
// (scripts/fetch-zookeeper.sh) and takes about half a minute.
func TestEnsembleIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts four ZooKeeper JVMs (about 30 s)")
	}
	lib := cachedLibDir()
	if lib == "" {
		t.Skipf("skipping: no ZooKeeper jars: set $%s or run scripts/fetch-zookeeper.sh (it caches ZooKeeper %s under $MERIDIAN_CACHE, default ~/.cache/meridian)",
			LibDirEnv, DefaultVersion)
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("skipping: java is not installed")
	}
	topo := meteorshower(t)
	hosts := append(loopbackHosts(topo), peer.Host{Name: "zk-europe-2", Region: "europe", Addr: "127.0.0.5"})
	dir := t.TempDir()
	if d := os.Getenv("MERIDIAN_ZOOKEEPER_DIR"); d != "" {
		dir = d // keep the servers' logs and data for inspection
	}
	o := peer.Options{Hosts: hosts, Dir: dir, Topology: topo, Log: testLog{t}}
	// Clients dial through their region's dialer, and only their region's servers.
	regionOf := map[string]string{}
	for _, h := range hosts {
		regionOf[h.Addr] = h.Region
	}
	var mu sync.Mutex
	dials := map[string]int{}
	o.DialFrom = func(region string) peer.DialFunc {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if regionOf[host] != region {
				t.Errorf("a client in %s dials %s, a server in %q", region, addr, regionOf[host])
			}
			mu.Lock()
			dials[region]++
			mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := Start(ctx, o, Options{LibDir: lib, Voters: 3, HeapMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("4 servers up in %.1fs", time.Since(began).Seconds())
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		if err := c.Stop(); err != nil { // idempotent
			t.Error(err)
		}
		for i, m := range c.members {
			if m.proc.Running() {
				t.Errorf("server %d still running after Stop", i)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range topo.Regions {
			if dials[r] == 0 {
				t.Errorf("no dial from %s through its dialer", r)
			}
		}
	}()
	// The preferred leader (the first region's first host, highest myid, started first) leads.
	if l := c.Leader(); l != "europe" {
		t.Errorf("leader in %q, want europe", l)
	}
	if v := peer.Regions(c.Voters()); !slices.Equal(v, []string{"europe", "us", "asia"}) {
		t.Errorf("voters in %v", v)
	}
	if st, err := c.state(ctx, c.members[3]); err != nil || st != "observer" {
		t.Errorf("the second europe server is %q (%v), want an observer", st, err)
	}
	tgt := c.Target()
	t.Log(tgt.Name())

	for _, read := range []string{bench.ZooKeeperLinearizable, bench.ZooKeeperSequential} {
		sess, err := tgt.Prepare(ctx, bench.Config{Protocol: bench.ProtocolZooKeeper, ReadLevel: read})
		if err != nil {
			t.Fatal(err)
		}
		// Each region writes its key, through its first server.
		for _, r := range topo.Regions {
			k, err := sess.Connect(r, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Update(ctx, []byte("key-"+r), []byte("value-"+r+"-"+read)); err != nil {
				t.Fatalf("%s: write from %s: %v", read, r, err)
			}
		}
		// Every server reads every key: client i of a region talks to the region's i-th server,
		// so europe's client 1 reads through the observer.
		for _, from := range []struct {
			region string
			i      int
		}{{"europe", 0}, {"europe", 1}, {"us", 0}, {"asia", 0}} {
			k, err := sess.Connect(from.region, from.i)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range topo.Regions {
				want := []byte("value-" + r + "-" + read)
				var got []byte
				for try := 0; ; try++ { // a sequential read may lag behind the commit
					if got, err = k.(*kv).get(ctx, []byte("key-"+r)); err != nil {
						t.Fatalf("%s: read from %s/%d: %v", read, from.region, from.i, err)
					}
					if bytes.Equal(got, want) || read == bench.ZooKeeperLinearizable || try == 50 {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: read key-%s from %s/%d: %q, want %q", read, r, from.region, from.i, got, want)
				}
			}
			if srv := k.(*kv).conn.Server(); regionOf[srv[:len(srv)-len(":2181")]] != from.region {
				t.Errorf("client %s/%d is connected to %s", from.region, from.i, srv)
			}
		}
		k, _ := sess.Connect("asia", 0)
		if got, err := k.(*kv).get(ctx, []byte("no-such-key")); err != nil || got != nil {
			t.Errorf("%s: a missing key: %q, %v", read, got, err)
		}
		if err := k.Insert(ctx, []byte("key-europe"), []byte("again")); err != nil {
			t.Errorf("%s: insert of an existing key: %v", read, err)
		}
		if err := k.Scan(ctx, []byte("key-"), 2); !errors.Is(err, errScan) {
			t.Errorf("%s: scan: %v", read, err)
		}
		// Bounds with the leader in europe (voters europe, us, asia: majority 100 ms).
		if got := sess.LowerBoundMs("asia", "write"); got != 350 {
			t.Errorf("%s: write bound from asia %v, want 350", read, got)
		}
		wantRead := 250.0
		if read == bench.ZooKeeperSequential {
			wantRead = 0
		}
		if got := sess.LowerBoundMs("asia", "read"); got != wantRead {
			t.Errorf("%s: read bound from asia %v, want %v", read, got, wantRead)
		}
		if err := sess.Close(); err != nil {
			t.Error(err)
		}
	}

	// A short benchmark of both configurations: Prepare deletes the keys of the one before.
	w, err := ycsb.Core("b")
	if err != nil {
		t.Fatal(err)
	}
	w.RecordCount = 200
	cfgs, err := bench.ParseConfigs("zookeeper:linearizable,zookeeper:sequential")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.Compare(ctx, tgt, cfgs, bench.RunOptions{Workload: w, ClientsPerRegion: 2, Duration: 2 * time.Second,
		Warmup: 500 * time.Millisecond, LoadParallel: 16, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range rep.Runs {
		for _, r := range topo.Regions {
			s := run.Regions[r]
			if s.Read.Errors+s.Write.Errors != 0 || s.Read.Count == 0 || s.Write.Count == 0 {
				t.Errorf("%s in %s: %+v", run.Label(), r, s)
			}
		}
		t.Logf("%s: %.0f ops/s, europe read p50 %.2f ms, write p50 %.2f ms", run.Label(), run.ThroughputOps,
			run.Regions["europe"].Read.P50Ms, run.Regions["europe"].Write.P50Ms)
	}

	// A follower (us, server 1) crashes: the other two voters keep committing; it comes back.
	sess, err := tgt.Prepare(ctx, bench.Config{Protocol: bench.ProtocolZooKeeper, ReadLevel: bench.ZooKeeperLinearizable})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := c.Kill(1); err != nil {
		t.Fatal(err)
	}
	k, err := sess.Connect("asia", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Update(ctx, []byte("after-kill"), []byte("v")); err != nil {
		t.Fatalf("write with a follower down: %v", err)
	}
	if err := c.Restart(ctx, 1); err != nil {
		t.Fatal(err)
	}
	k, err = sess.Connect("us", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.(*kv).get(ctx, []byte("after-kill")); err != nil || string(got) != "v" {
		t.Errorf("read from the restarted server: %q, %v", got, err)
	}
	if err := c.Restart(ctx, 1); err == nil {
		t.Error("restart of a running server accepted")
	}
	if err := c.Kill(7); err == nil {
		t.Error("Kill(7) accepted")
	}
}

// testLog writes progress lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
