package zookeeper

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/topology"
)

func meteorshower(t *testing.T) *topology.Topology {
	t.Helper()
	topo, err := topology.Builtin("gcp-meteorshower-3")
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// loopbackHosts puts one server per region of topo on 127.0.0.2, .3, ...
func loopbackHosts(topo *topology.Topology) []peer.Host {
	var hosts []peer.Host
	for i, r := range topo.Regions {
		hosts = append(hosts, peer.Host{Name: "zk-" + r, Region: r, Addr: "127.0.0." + string(rune('2'+i))})
	}
	return hosts
}

// labHosts is the lab's layout with n servers per region: europe-zookeeper1.., us-..., asia-...
func labHosts(topo *topology.Topology, n int) []peer.Host {
	var hosts []peer.Host
	for ri, r := range topo.Regions {
		for i := range n {
			hosts = append(hosts, peer.Host{Name: r + "-zookeeper" + string(rune('1'+i)), Region: r,
				Addr: "10.77." + string(rune('1'+ri)) + "." + string(rune('5'+i))})
		}
	}
	return hosts
}

func TestRolesNineServers(t *testing.T) {
	topo := meteorshower(t)
	hosts := labHosts(topo, 3)
	rs := roles(hosts, topo.Regions, 5, "europe")
	var voters, observers []string
	ids := map[int]bool{}
	for i, r := range rs {
		if ids[r.id] || r.id < 1 || r.id > 9 {
			t.Fatalf("myid %d of %s repeated or outside 1..9", r.id, hosts[i].Name)
		}
		ids[r.id] = true
		if r.observer {
			observers = append(observers, hosts[i].Name)
		} else {
			voters = append(voters, hosts[i].Name)
		}
	}
	// The thesis's setup: five voters, spread over the regions (two in europe and us, one in
	// asia), the other four observers.
	if want := []string{"europe-zookeeper1", "europe-zookeeper2", "us-zookeeper1", "us-zookeeper2", "asia-zookeeper1"}; !slices.Equal(voters, want) {
		t.Errorf("voters %v, want %v", voters, want)
	}
	if want := []string{"europe-zookeeper3", "us-zookeeper3", "asia-zookeeper2", "asia-zookeeper3"}; !slices.Equal(observers, want) {
		t.Errorf("observers %v, want %v", observers, want)
	}
	// The preferred leader has the highest myid; every voter outranks every observer.
	if rs[0].id != 9 || rs[0].rank != 0 {
		t.Errorf("europe-zookeeper1: %+v, want myid 9, rank 0", rs[0])
	}
	for i, r := range rs {
		for j, q := range rs {
			if !r.observer && q.observer && r.id < q.id {
				t.Errorf("voter %s (myid %d) below observer %s (myid %d)", hosts[i].Name, r.id, hosts[j].Name, q.id)
			}
		}
	}
	// Another leader region rotates the turns: us first.
	rs = roles(hosts, topo.Regions, 5, "us")
	if rs[3].rank != 0 || rs[3].id != 9 || rs[6].rank != 1 || rs[0].rank != 2 || !rs[8].observer {
		t.Errorf("leader in us: %+v", rs)
	}
	// Fewer hosts than voters: everyone votes.
	for _, r := range roles(loopbackHosts(topo), topo.Regions, 3, "europe") {
		if r.observer {
			t.Errorf("an observer among three hosts: %+v", r)
		}
	}
}

func TestDefaultTiming(t *testing.T) {
	topo := meteorshower(t)
	// The largest RTT (europe–asia) is 250 ms: ZooKeeper's sample values hold.
	tick, initLimit, syncLimit := DefaultTiming(loopbackHosts(topo), topo)
	if tick != 2*time.Second || initLimit != 10 || syncLimit != 5 {
		t.Errorf("gcp-meteorshower-3: tick %v, initLimit %d, syncLimit %d; want 2s, 10, 5", tick, initLimit, syncLimit)
	}
	// A 1.46 s RTT lifts the tick to two RTTs, rounded up to 100 ms.
	slow := topology.Equidistant("slow", []string{"a", "b"}, 1460, 0.5)
	hosts := []peer.Host{{Name: "a", Region: "a", Addr: "10.0.0.1"}, {Name: "b", Region: "b", Addr: "10.0.0.2"}}
	if tick, _, _ := DefaultTiming(hosts, slow); tick != 3*time.Second {
		t.Errorf("1.46 s RTT: tick %v, want 3s", tick)
	}
	// Hosts in one region: no WAN, the defaults.
	if tick, _, _ := DefaultTiming(hosts[:1], slow); tick != 2*time.Second {
		t.Errorf("one region: tick %v", tick)
	}
}

func TestOptionsDefaults(t *testing.T) {
	topo := meteorshower(t)
	o := peer.Options{Hosts: labHosts(topo, 3), Dir: "d", Topology: topo}
	zo, err := Options{}.withDefaults(&o)
	if err != nil {
		t.Fatal(err)
	}
	if zo.Voters != 5 || zo.LeaderRegion != "europe" || zo.HeapMB != 512 || zo.TickTime != 2*time.Second ||
		zo.InitLimit != 10 || zo.SyncLimit != 5 || zo.SessionTimeout != 20*time.Second || zo.Version != "3.9.5" ||
		zo.Java != "java" || zo.StartTimeout != DefaultStartTimeout {
		t.Errorf("defaults %+v", zo)
	}
	o3 := peer.Options{Hosts: loopbackHosts(topo), Dir: "d", Topology: topo}
	if zo, err := (Options{}).withDefaults(&o3); err != nil || zo.Voters != 3 {
		t.Errorf("three hosts: %d voters, %v", zo.Voters, err)
	}
}

func TestOptionsValidation(t *testing.T) {
	topo := meteorshower(t)
	hosts := loopbackHosts(topo)
	ok := peer.Options{Hosts: hosts, Dir: "d", Topology: topo}
	for _, tc := range []struct {
		name string
		o    peer.Options
		zo   Options
		msg  string
	}{
		{"no hosts", peer.Options{Dir: "d", Topology: topo}, Options{}, "no hosts"},
		{"no dir", peer.Options{Hosts: hosts, Topology: topo}, Options{}, "working directory"},
		{"unknown region", peer.Options{Hosts: []peer.Host{{Name: "x", Region: "mars", Addr: "127.0.0.2"}}, Dir: "d", Topology: topo},
			Options{}, "does not have"},
		{"shared address", peer.Options{Hosts: []peer.Host{hosts[0], {Name: "x", Region: "us", Addr: hosts[0].Addr}},
			Dir: "d", Topology: topo}, Options{}, "share address"},
		{"negative", ok, Options{Voters: -1}, "negative"},
		{"leader region", ok, Options{LeaderRegion: "mars"}, `leader region "mars" has no host`},
		{"small heap", ok, Options{HeapMB: 32}, "too small"},
		{"tick", ok, Options{TickTime: time.Second + 1}, "whole milliseconds"},
		{"session too short", ok, Options{SessionTimeout: time.Second}, "2 to 20 ticks"},
		{"session too long", ok, Options{SessionTimeout: time.Minute}, "2 to 20 ticks"},
		{"extra line", ok, Options{ExtraConfig: []string{"no-equals"}}, "key=value"},
		{"extra newline", ok, Options{ExtraConfig: []string{"a=b\nc=d"}}, "key=value"},
	} {
		_, err := tc.zo.withDefaults(&tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.msg)
		}
	}
}

func TestZooCfg(t *testing.T) {
	topo := meteorshower(t)
	hosts := labHosts(topo, 3)
	rs := roles(hosts, topo.Regions, 5, "europe")
	ec := ensembleConfig{tick: 2 * time.Second, initLimit: 10, syncLimit: 5, maxClientCnxns: 1024, extra: []string{"snapCount=5000"}}
	cfg := func(i int) (map[string]string, []string) {
		t.Helper()
		dirs := dirsOf("/w", hosts[i].Name)
		kv := map[string]string{}
		var servers []string
		text := string(zooCfg(hosts, rs, i, dirs, ec))
		for _, l := range strings.Split(text, "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Fatalf("line %q is not key=value", l)
			}
			if strings.HasPrefix(k, "server.") {
				servers = append(servers, l)
			}
			kv[k] = v
		}
		return kv, servers
	}
	// A voter: europe's first server (index 0), the preferred leader.
	kv, servers := cfg(0)
	for k, want := range map[string]string{
		"tickTime": "2000", "initLimit": "10", "syncLimit": "5",
		"dataDir": "/w/europe-zookeeper1/data", "clientPort": "2181", "clientPortAddress": "10.77.1.5",
		"forceSync": "yes", "autopurge.snapRetainCount": "3", "autopurge.purgeInterval": "1",
		"maxClientCnxns": "1024", "4lw.commands.whitelist": "srvr,ruok",
		"admin.enableServer": "true", "admin.serverAddress": "10.77.1.5", "admin.serverPort": "8080",
		"standaloneEnabled": "false", "reconfigEnabled": "false", "snapCount": "5000",
	} {
		if kv[k] != want {
			t.Errorf("voter: %s = %q, want %q", k, kv[k], want)
		}
	}
	if _, ok := kv["peerType"]; ok {
		t.Error("a voter has peerType")
	}
	want := []string{
		"server.9=10.77.1.5:2888:3888", "server.8=10.77.2.5:2888:3888", "server.7=10.77.3.5:2888:3888",
		"server.6=10.77.1.6:2888:3888", "server.5=10.77.2.6:2888:3888",
		"server.4=10.77.3.6:2888:3888:observer", "server.3=10.77.1.7:2888:3888:observer",
		"server.2=10.77.2.7:2888:3888:observer", "server.1=10.77.3.7:2888:3888:observer",
	}
	if !slices.Equal(servers, want) {
		t.Errorf("server lines\n%v\nwant\n%v", servers, want)
	}
	// An observer: asia's third server.
	kv, servers2 := cfg(8)
	if kv["peerType"] != "observer" || kv["clientPortAddress"] != "10.77.3.7" || !slices.Equal(servers2, servers) {
		t.Errorf("observer: peerType %q, address %q, servers %v", kv["peerType"], kv["clientPortAddress"], servers2)
	}
	if string(myID(rs[8])) != "1\n" || string(myID(rs[0])) != "9\n" {
		t.Errorf("myid %q %q", myID(rs[8]), myID(rs[0]))
	}
	// IPv6 addresses are bracketed in server lines.
	if got := hostForConfig("::1"); got != "[::1]" {
		t.Errorf("hostForConfig(::1) = %s", got)
	}
}

func TestJavaArgs(t *testing.T) {
	dirs := dirsOf("/w", "zk-us")
	args := javaArgs(Options{HeapMB: 512, LibDir: "/jars", ExtraJVMArgs: []string{"-Dx=y"}}, dirs)
	for _, want := range []string{"-Xms512m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
		"-Dlogback.configurationFile=file:///w/zk-us/conf/logback.xml", "-Dx=y"} {
		if !slices.Contains(args, want) {
			t.Errorf("args lack %s: %q", want, args)
		}
	}
	tail := args[len(args)-4:]
	if !slices.Equal(tail, []string{"-cp", "/jars/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain", "/w/zk-us/conf/zoo.cfg"}) {
		t.Errorf("command tail %q", tail)
	}
}

func TestLibVersion(t *testing.T) {
	dir := t.TempDir()
	if _, err := libVersion(dir); err == nil || !strings.Contains(err.Error(), "fetch-zookeeper.sh") {
		t.Errorf("empty directory: %v", err)
	}
	for _, f := range []string{"zookeeper-jute-3.9.5.jar", "zookeeper-3.9.5.jar", "netty-3.jar"} {
		os.WriteFile(filepath.Join(dir, f), nil, 0o644)
	}
	if v, err := libVersion(dir); err != nil || v != "3.9.5" {
		t.Errorf("version %q, %v", v, err)
	}
	if _, err := libVersion(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory accepted")
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	topo := meteorshower(t)
	dir := t.TempDir()
	o := peer.Options{Hosts: loopbackHosts(topo), Dir: filepath.Join(dir, "zk"), Topology: topo}
	ctx := context.Background()
	if _, err := Start(ctx, o, Options{LibDir: dir, Java: "no-such-java-binary"}); err == nil || !strings.Contains(err.Error(), "java") {
		t.Errorf("missing java: %v", err)
	}
	if _, err := Start(ctx, o, Options{LibDir: dir}); err == nil || !strings.Contains(err.Error(), "zookeeper-VERSION.jar") {
		t.Errorf("no jars: %v", err)
	}
	if _, err := os.Stat(o.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Error("server directories written before the jars were checked")
	}
}

func TestFindFetchScript(t *testing.T) {
	p, err := peer.FindScript("scripts/fetch-zookeeper.sh")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !strings.Contains(string(b), `version="${1:-`+DefaultVersion+`}"`) {
		t.Errorf("%s does not default to ZooKeeper %s (%v)", p, DefaultVersion, err)
	}
}

func TestLowerBound(t *testing.T) {
	topo := meteorshower(t) // RTTs europe–us 100, us–asia 150, europe–asia 250
	voters := []string{"europe", "us", "asia", "europe", "us"}
	lin, seq := bench.ZooKeeperLinearizable, bench.ZooKeeperSequential
	for _, tc := range []struct {
		leader, region string
		write, read    float64
	}{
		// Leader in europe: majority (2 of the 4 others) = the other europe voter and us: 100.
		{"europe", "europe", 100, 0}, {"europe", "us", 200, 100}, {"europe", "asia", 350, 250},
		// Leader in us: the other us voter and europe: 100.
		{"us", "us", 100, 0}, {"us", "asia", 250, 150},
		// Leader unknown: the best leader for the region.
		{"", "asia", 150, 0}, {"", "europe", 100, 0},
	} {
		if got := LowerBoundMs(topo, voters, tc.leader, lin, tc.region, "write"); got != tc.write {
			t.Errorf("write from %s, leader %q: %v, want %v", tc.region, tc.leader, got, tc.write)
		}
		if got := LowerBoundMs(topo, voters, tc.leader, lin, tc.region, "read"); got != tc.read {
			t.Errorf("linearizable read from %s, leader %q: %v, want %v", tc.region, tc.leader, got, tc.read)
		}
		if got := LowerBoundMs(topo, voters, tc.leader, seq, tc.region, "read"); got != 0 {
			t.Errorf("sequential read from %s: %v, want 0", tc.region, got)
		}
	}
	// Through the registry: one voter per region.
	cfg := bench.Config{Protocol: bench.ProtocolZooKeeper, ReadLevel: lin, Options: map[string]string{OptionLeader: "europe"}}
	if got := bench.LowerBoundMs(topo, cfg, "asia", "write"); got != 350 {
		t.Errorf("registered write bound: %v, want 350", got)
	}
	if got := bench.LowerBoundMs(topo, cfg, "us", "read"); got != 100 {
		t.Errorf("registered read bound: %v, want 100", got)
	}
}

func TestCheckConfig(t *testing.T) {
	cfgs, err := bench.ParseConfigs("zookeeper:linearizable,zookeeper:SEQUENTIAL,zookeeper")
	if err != nil {
		t.Fatal(err)
	}
	if cfgs[1].ReadLevel != "sequential" || cfgs[2].ReadLevel != "linearizable" || cfgs[0].WriteLevel != "" {
		t.Errorf("parsed %+v", cfgs)
	}
	for _, cfg := range cfgs {
		if err := checkConfig(cfg); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if _, err := bench.ParseConfigs("zookeeper:serializable"); err == nil {
		t.Error("zookeeper:serializable parsed")
	}
	for _, cfg := range []bench.Config{
		{Protocol: "etcd", ReadLevel: "linearizable"},
		{Protocol: "zookeeper", ReadLevel: "QUORUM"},
		{Protocol: "zookeeper"},
		{Protocol: "zookeeper", ReadLevel: "linearizable", WriteLevel: "QUORUM"},
		{Protocol: "zookeeper", ReadLevel: "linearizable", Options: map[string]string{"batch": "1"}},
	} {
		if err := checkConfig(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestNodePath(t *testing.T) {
	if p, err := nodePath([]byte("user1234")); err != nil || p != "/meridian/user1234" {
		t.Errorf("%q %v", p, err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00b", "tab\there", "\u0085"} {
		if _, err := nodePath([]byte(bad)); err == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
}

func TestCallHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	defer close(release)
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, func() (int, error) { <-release; return 1, nil })
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("call did not return when its context ended")
	}
	if v, err := call(context.Background(), func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Errorf("call: %d, %v", v, err)
	}
	if _, err := call(ctx, func() (int, error) { t.Error("fn ran after the context ended"); return 0, nil }); err == nil {
		t.Error("a done context accepted")
	}
}

func TestOrderedHosts(t *testing.T) {
	hp := &orderedHosts{order: []string{"b:1", "c:1", "a:1"}}
	if err := hp.Init([]string{"a:1", "c:1", "b:1"}); err != nil { // shuffled, as zk.Connect passes them
		t.Fatal(err)
	}
	var got []string
	var retries []bool
	for range 4 {
		s, retry := hp.Next()
		got = append(got, s)
		retries = append(retries, retry)
	}
	if !slices.Equal(got, []string{"b:1", "c:1", "a:1", "b:1"}) || !slices.Equal(retries, []bool{false, false, false, true}) {
		t.Errorf("order %v, retries %v", got, retries)
	}
	hp.Connected() // connected to b: the next full round ends back at b
	if s, retry := hp.Next(); s != "c:1" || retry {
		t.Errorf("after connecting: %s %v", s, retry)
	}
	if err := (&orderedHosts{order: []string{"x:1"}}).Init([]string{"a:1"}); err == nil {
		t.Error("Init without the preferred servers accepted")
	}
}

func TestKVRejectsScansAndBadKeys(t *testing.T) {
	k := &kv{}
	if err := k.Scan(context.Background(), []byte("user"), 10); !errors.Is(err, errScan) {
		t.Errorf("scan: %v", err)
	}
	if err := k.Update(context.Background(), []byte("a/b"), []byte("v")); err == nil || !strings.Contains(err.Error(), "znode name") {
		t.Errorf("update of a bad key: %v", err)
	}
	if err := k.Read(context.Background(), []byte("..")); err == nil {
		t.Error("read of a bad key accepted")
	}
}

func TestBoundedLog(t *testing.T) {
	var b strings.Builder
	l := &boundedLog{w: &b, left: 2}
	for i := range 5 {
		l.Printf("line %d", i)
	}
	if got := b.String(); got != "zookeeper client: line 0\nzookeeper client: line 1\nzookeeper client: further log lines dropped\n" {
		t.Errorf("%q", got)
	}
	(&boundedLog{}).Printf("no writer: dropped")
}
