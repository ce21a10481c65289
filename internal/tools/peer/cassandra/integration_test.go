package cassandra

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// TestClusterIntegration starts a real three-node cluster (one data center per region of
// gcp-meteorshower-3) on loopback addresses, without WAN delay, and runs two configurations
// against it. It needs the jars (fetched and cached on first use) and about a minute.
func TestClusterIntegration(t *testing.T) {
	if os.Getenv("MERIDIAN_CASSANDRA") != "1" {
		t.Skip("set MERIDIAN_CASSANDRA=1 to start a real 3-node Cassandra cluster (needs Java 17 and the jars from scripts/fetch-cassandra.sh; ~1 minute)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("java is not installed")
	}
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if d := os.Getenv("MERIDIAN_CASSANDRA_DIR"); d != "" {
		dir = d // keep the nodes' logs and data for inspection
	}
	o := peer.Options{Hosts: testHosts(), Dir: dir, Topology: topo, Log: testLog{t}}
	began := time.Now()
	c, err := Start(ctx, o, Options{HeapMB: 768})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3-node cluster up in %.1fs", time.Since(began).Seconds())
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		if err := c.Stop(); err != nil { // idempotent
			t.Error(err)
		}
	}()

	target := c.Target()
	defer target.Close()
	if target.Topology() != topo {
		t.Error("target topology differs")
	}
	if _, err := target.Prepare(ctx, bench.Config{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"}); err == nil {
		t.Error("Prepare accepted protocol quorum")
	}

	cfgs, err := bench.ParseConfigs("cassandra:QUORUM/QUORUM,cassandra:ALL/ONE")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		sess, err := target.Prepare(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Each region writes its keys; every region reads every key back.
		for _, w := range topo.Regions {
			kvw, err := sess.Connect(w, 0)
			if err != nil {
				t.Fatal(err)
			}
			for j := range 3 {
				key := []byte(fmt.Sprintf("%s-%d", w, j))
				if err := kvw.Update(ctx, key, []byte("v-"+string(key))); err != nil {
					t.Fatalf("%s: write %s from %s: %v", cfg.Label(), key, w, err)
				}
			}
		}
		for _, r := range topo.Regions {
			kvr, err := sess.Connect(r, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range topo.Regions {
				for j := range 3 {
					key := []byte(fmt.Sprintf("%s-%d", w, j))
					// ALL/ONE: a write at ONE may still be on its way to the other replicas,
					// but a read at ALL waits for every replica and the newest value wins.
					v, found, err := kvr.(*kv).get(ctx, key)
					if err != nil || !found || !bytes.Equal(v, []byte("v-"+string(key))) {
						t.Fatalf("%s: read %s from %s: %q found=%v err=%v", cfg.Label(), key, r, v, found, err)
					}
				}
			}
			// The coordinator is the client's own region's node.
			iter := kvr.(*kv).s.Query("SELECT data_center FROM system.local").Consistency(gocql.One).IterContext(ctx)
			var dc string
			iter.Scan(&dc)
			if err := iter.Close(); err != nil || dc != r || iter.Host().DataCenter() != r {
				t.Fatalf("%s: coordinator of a client in %s is in %q (host %s), err %v", cfg.Label(), r, dc, iter.Host().ConnectAddress(), err)
			}
			if err := kvr.Scan(ctx, []byte("europe-0"), 5); err != nil {
				t.Fatalf("%s: scan from %s: %v", cfg.Label(), r, err)
			}
			if _, found, err := kvr.(*kv).get(ctx, []byte("no-such-key")); err != nil || found {
				t.Fatalf("%s: missing key: found=%v err=%v", cfg.Label(), found, err)
			}
		}
		if _, err := sess.Connect("mars", 0); err == nil {
			t.Error("Connect accepted an unknown region")
		}
		if got, want := sess.LowerBoundMs("europe", "read"), bench.LowerBoundMs(topo, cfg, "europe", "read"); got != want {
			t.Errorf("lower bound %v, want %v", got, want)
		}
		sess.Close()
	}

	w, err := ycsb.Core("a")
	if err != nil {
		t.Fatal(err)
	}
	w.RecordCount = 200
	rep, err := bench.Compare(ctx, target, cfgs, bench.RunOptions{
		Workload: w, ClientsPerRegion: 2, Duration: 2 * time.Second, Warmup: 500 * time.Millisecond,
		LoadParallel: 16, Seed: 1,
	}, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != len(cfgs) {
		t.Fatalf("%d runs, want %d", len(rep.Runs), len(cfgs))
	}
	for _, run := range rep.Runs {
		for _, r := range topo.Regions {
			s := run.Regions[r]
			if s.Read.Count == 0 || s.Write.Count == 0 {
				t.Errorf("%s %s: no reads or writes: %+v", run.Label(), r, s)
			}
			if s.Read.Errors != 0 || s.Write.Errors != 0 {
				t.Errorf("%s %s: %d read and %d write errors", run.Label(), r, s.Read.Errors, s.Write.Errors)
			}
		}
	}
	var buf bytes.Buffer
	bench.PrintCompare(&buf, rep)
	t.Logf("\n%s", buf.String())

	// A killed node comes back with its data.
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, 2); err != nil {
		t.Fatal(err)
	}
}

// testLog writes progress lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
