package etcd

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/tools/ycsb"
)

// startLoopback starts one member per region of gcp-meteorshower-3 on 127.0.0.2-4 (no WAN
// delay), or skips the test when there is no etcd binary.
func startLoopback(t *testing.T, leader string) *Cluster {
	t.Helper()
	dials := map[string]int{}
	if testing.Short() {
		t.Skip("skipping: starts an etcd cluster (about 10 s)")
	}
	if _, err := findBinary(""); err != nil {
		t.Skipf("skipping: %v", err)
	}
	topo := meteorshower(t)
	o := peer.Options{Hosts: loopbackHosts(topo), Dir: t.TempDir(), Topology: topo}
	// Clients dial through the region's dialer, and only their region's member.
	home := map[string]string{}
	for _, h := range o.Hosts {
		home[h.Region] = net.JoinHostPort(h.Addr, "2379")
	}
	var mu sync.Mutex
	o.DialFrom = func(region string) peer.DialFunc {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dials[region]++
			mu.Unlock()
			if addr != home[region] {
				t.Errorf("client in %s dials %s, not its member %s", region, addr, home[region])
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range topo.Regions {
			if dials[r] == 0 {
				t.Errorf("no dial from %s through its dialer", r)
			}
		}
	})
	if testing.Verbose() {
		o.Log = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Loopback: etcd's default timing (the defaults for this topology, 250 ms / 2.5 s, only
	// make elections slower).
	c, err := Start(ctx, o, Options{HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: time.Second, LeaderRegion: leader})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		for _, m := range c.members {
			if m.proc.Running() {
				t.Errorf("member %s still running after Stop", m.host.Name)
			}
		}
	})
	return c
}

func TestCluster(t *testing.T) {
	c := startLoopback(t, "us")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if l := c.Leader(); l != "us" {
		t.Fatalf("leader in %q, want us", l)
	}
	t.Logf("%s, heartbeat/election %v", c.Target().Name(), fmt.Sprint(c.Timing()))
	tgt := c.Target()
	regions := tgt.Topology().Regions

	for _, read := range []string{bench.EtcdLinearizable, bench.EtcdSerializable} {
		cfg := bench.Config{Protocol: bench.ProtocolEtcd, ReadLevel: read}
		sess, err := tgt.Prepare(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		kvs := map[string]*kv{}
		for _, r := range regions {
			k, err := sess.Connect(r, 0)
			if err != nil {
				t.Fatal(err)
			}
			kvs[r] = k.(*kv)
		}
		// Prepare left nothing from the previous configuration.
		if resp, err := kvs["europe"].cli.Get(ctx, KeyPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
			t.Fatalf("%s: %v keys left after Prepare (%v)", read, resp, err)
		}
		// Each region writes its key; every region reads every key back.
		for _, r := range regions {
			if err := kvs[r].Update(ctx, []byte("key-"+r), []byte("value-"+r+"-"+read)); err != nil {
				t.Fatalf("%s: write from %s: %v", read, r, err)
			}
		}
		for _, from := range regions {
			for _, r := range regions {
				want := "value-" + r + "-" + read
				var got string
				for try := 0; ; try++ { // a serializable read may lag behind the commit
					resp, err := kvs[from].get(ctx, []byte("key-"+r))
					if err != nil {
						t.Fatalf("%s: read from %s: %v", read, from, err)
					}
					if len(resp.Kvs) == 1 {
						got = string(resp.Kvs[0].Value)
					}
					if got == want || read == bench.EtcdLinearizable || try == 50 {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if got != want {
					t.Errorf("%s: read key-%s from %s: %q, want %q", read, r, from, got, want)
				}
			}
		}
		resp, err := kvs["asia"].scan(ctx, []byte("key-"), 2)
		if err != nil || len(resp.Kvs) != 2 || string(resp.Kvs[0].Key) != KeyPrefix+"key-asia" || string(resp.Kvs[1].Key) != KeyPrefix+"key-europe" {
			t.Errorf("%s: scan: %v %v", read, resp, err)
		}
		if err := kvs["us"].Scan(ctx, []byte(""), 10); err != nil {
			t.Error(err)
		}
		// Bounds with the leader in us.
		if got := sess.LowerBoundMs("europe", "write"); got != 200 {
			t.Errorf("%s: write bound from europe %v, want 200", read, got)
		}
		wantRead := 200.0
		if read == bench.EtcdSerializable {
			wantRead = 0
		}
		if got := sess.LowerBoundMs("europe", "read"); got != wantRead {
			t.Errorf("%s: read bound from europe %v, want %v", read, got, wantRead)
		}
		if err := sess.Close(); err != nil {
			t.Error(err)
		}
	}

	// A short benchmark of both configurations.
	w, err := ycsb.Core("a")
	if err != nil {
		t.Fatal(err)
	}
	w.RecordCount, w.OperationCount = 200, 0
	cfgs, err := bench.ParseConfigs("etcd:linearizable,etcd:serializable")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.Compare(ctx, tgt, cfgs, bench.RunOptions{Workload: w, ClientsPerRegion: 2, Duration: 2 * time.Second,
		LoadParallel: 16, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range rep.Runs {
		for _, r := range regions {
			s := run.Regions[r]
			if s.Read.Errors+s.Write.Errors != 0 || s.Read.Count == 0 || s.Write.Count == 0 {
				t.Errorf("%s in %s: %+v", run.Label(), r, s)
			}
		}
		t.Logf("%s: %.0f ops/s, europe read p50 %.2f ms, write p50 %.2f ms (bounds %.0f / %.0f ms)", run.Label(), run.ThroughputOps,
			run.Regions["europe"].Read.P50Ms, run.Regions["europe"].Write.P50Ms,
			run.Regions["europe"].Read.LowerBoundMs, run.Regions["europe"].Write.LowerBoundMs)
	}

	// Faults: the cluster keeps serving with 2 of 3 members.
	sess, err := tgt.Prepare(ctx, bench.Config{Protocol: bench.ProtocolEtcd, ReadLevel: bench.EtcdLinearizable})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	write := func(region, key string) {
		t.Helper()
		k, err := sess.Connect(region, 0)
		if err != nil {
			t.Fatal(err)
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// Requests in flight when a leader dies fail ("request timed out, possibly due to
		// previous leader failure"); the client retries until the new leader commits.
		for {
			actx, cancel := context.WithTimeout(octx, 2*time.Second)
			err := k.Update(actx, []byte(key), []byte("v"))
			cancel()
			if err == nil {
				break
			}
			if octx.Err() != nil {
				t.Fatalf("write %s from %s: %v", key, region, err)
			}
			t.Logf("write %s from %s: %v (retrying)", key, region, err)
			time.Sleep(100 * time.Millisecond)
		}
		if err := k.Read(octx, []byte(key)); err != nil {
			t.Fatalf("read %s from %s: %v", key, region, err)
		}
	}
	// A follower (europe, member 0) crashes.
	if err := c.Kill(0); err != nil {
		t.Fatal(err)
	}
	write("us", "f1")
	write("asia", "f2")
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	write("europe", "f3")
	// The leader (us, member 1) crashes: the others elect a new one.
	if err := c.Kill(1); err != nil {
		t.Fatal(err)
	}
	write("europe", "f4")
	if l := c.Leader(); l != "europe" && l != "asia" {
		t.Errorf("leader after killing us: %q", l)
	}
	if err := c.Restart(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.MoveLeader(ctx, "us"); err != nil {
		t.Fatal(err)
	}
	write("us", "f5")
	if err := c.Restart(ctx, 1); err == nil {
		t.Error("restart of a running member accepted")
	}
	if err := c.Kill(7); err == nil {
		t.Error("Kill(7) accepted")
	}
}
