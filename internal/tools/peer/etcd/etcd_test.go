package etcd

import (
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

// loopbackHosts puts one member per region of topo on 127.0.0.2, .3, ...
func loopbackHosts(topo *topology.Topology) []peer.Host {
	var hosts []peer.Host
	for i, r := range topo.Regions {
		hosts = append(hosts, peer.Host{Name: "etcd-" + r, Region: r, Addr: "127.0.0." + string(rune('2'+i))})
	}
	return hosts
}

func TestDefaults(t *testing.T) {
	topo := meteorshower(t)
	o := peer.Options{Hosts: loopbackHosts(topo), Dir: t.TempDir(), Topology: topo}
	eo, err := Options{}.withDefaults(&o)
	if err != nil {
		t.Fatal(err)
	}
	// The largest RTT between the members is europe–asia, 250 ms.
	if eo.HeartbeatInterval != 250*time.Millisecond || eo.ElectionTimeout != 2500*time.Millisecond {
		t.Errorf("timing %v / %v, want 250ms / 2.5s", eo.HeartbeatInterval, eo.ElectionTimeout)
	}
	if eo.LeaderRegion != "europe" || eo.QuotaBackendBytes != 8<<30 || eo.StartTimeout != 2*time.Minute {
		t.Errorf("defaults %+v", eo)
	}
	// Small RTTs: etcd's own default heartbeat; a given heartbeat alone sets the timeout.
	eq := topology.Equidistant("eq", []string{"a", "b", "c"}, 20, 0.5)
	o2 := peer.Options{Hosts: []peer.Host{{Name: "a", Region: "a", Addr: "10.0.0.1"}, {Name: "b", Region: "b", Addr: "10.0.0.2"}},
		Dir: "x", Topology: eq}
	if hb := DefaultHeartbeat(&o2); hb != 100*time.Millisecond {
		t.Errorf("heartbeat for 20 ms RTTs: %v, want 100ms", hb)
	}
	eo, err = Options{HeartbeatInterval: 300 * time.Millisecond, LeaderRegion: "b"}.withDefaults(&o2)
	if err != nil || eo.ElectionTimeout != 3*time.Second || eo.LeaderRegion != "b" {
		t.Errorf("%+v, %v", eo, err)
	}
	// Rounded up to 10 ms.
	odd := topology.Equidistant("odd", []string{"a", "b"}, 123.4, 0.5)
	o3 := peer.Options{Hosts: o2.Hosts, Dir: "x", Topology: odd}
	if hb := DefaultHeartbeat(&o3); hb != 130*time.Millisecond {
		t.Errorf("heartbeat for 123.4 ms RTT: %v, want 130ms", hb)
	}
}

func TestOptionsValidation(t *testing.T) {
	topo := meteorshower(t)
	hosts := loopbackHosts(topo)
	ok := peer.Options{Hosts: hosts, Dir: "d", Topology: topo}
	for _, tc := range []struct {
		name string
		o    peer.Options
		eo   Options
		msg  string
	}{
		{"no hosts", peer.Options{Dir: "d", Topology: topo}, Options{}, "no hosts"},
		{"no dir", peer.Options{Hosts: hosts, Topology: topo}, Options{}, "working directory"},
		{"shared address", peer.Options{Hosts: []peer.Host{hosts[0], {Name: "x", Region: "us", Addr: hosts[0].Addr}},
			Dir: "d", Topology: topo}, Options{}, "share address"},
		{"election too short", ok, Options{HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond}, "at least 5"},
		{"election too long", ok, Options{ElectionTimeout: 60 * time.Second}, "limit"},
		{"not milliseconds", ok, Options{HeartbeatInterval: 100*time.Millisecond + 1}, "whole milliseconds"},
		{"negative", ok, Options{QuotaBackendBytes: -1}, "negative"},
		{"leader region", ok, Options{LeaderRegion: "mars"}, `leader region "mars" has no member`},
	} {
		_, err := tc.eo.withDefaults(&tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.msg)
		}
	}
	if _, err := (Options{HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond}).withDefaults(&ok); err != nil {
		t.Errorf("5 × heartbeat: %v", err)
	}
}

func TestFindBinary(t *testing.T) {
	_, err := findBinary("/nonexistent/etcd")
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y etcd-server") {
		t.Errorf("missing binary: %v", err)
	}
}

func TestMemberFlags(t *testing.T) {
	topo := meteorshower(t)
	hosts := loopbackHosts(topo)
	hosts = append(hosts, peer.Host{Name: "v6", Region: "us", Addr: "::1"})
	eo := Options{HeartbeatInterval: 250 * time.Millisecond, ElectionTimeout: 2500 * time.Millisecond,
		QuotaBackendBytes: 8 << 30, ExtraFlags: []string{"--snapshot-count=5000"}}
	f := memberFlags(hosts[1], hosts, "/tmp/lab/etcd-us/data", "tok", eo)
	for _, want := range []string{
		"--name=etcd-us",
		"--data-dir=/tmp/lab/etcd-us/data",
		"--listen-client-urls=http://127.0.0.3:2379",
		"--advertise-client-urls=http://127.0.0.3:2379",
		"--listen-peer-urls=http://127.0.0.3:2380",
		"--initial-advertise-peer-urls=http://127.0.0.3:2380",
		"--initial-cluster=etcd-europe=http://127.0.0.2:2380,etcd-us=http://127.0.0.3:2380,etcd-asia=http://127.0.0.4:2380,v6=http://[::1]:2380",
		"--initial-cluster-state=new",
		"--initial-cluster-token=tok",
		"--heartbeat-interval=250",
		"--election-timeout=2500",
		"--pre-vote=true",
		"--quota-backend-bytes=8589934592",
		"--auto-compaction-retention=0",
	} {
		if !slices.Contains(f, want) {
			t.Errorf("flags lack %s: %q", want, f)
		}
	}
	if f[len(f)-1] != "--snapshot-count=5000" {
		t.Errorf("extra flags not last: %q", f)
	}
	for _, s := range f {
		if strings.Contains(s, "unsafe-no-fsync") {
			t.Errorf("fsync must stay on: %s", s)
		}
	}
}

func TestLowerBound(t *testing.T) {
	topo := meteorshower(t)
	regions := topo.Regions // europe, us, asia; RTTs eu–us 100, us–asia 150, eu–asia 250
	for _, tc := range []struct {
		leader, region string
		want           float64
	}{
		// Leader in us: majority = 100 (europe, the nearer of the two others).
		{"us", "europe", 200}, {"us", "us", 100}, {"us", "asia", 250},
		// Leader in europe: majority = 100 (us).
		{"europe", "europe", 100}, {"europe", "us", 200}, {"europe", "asia", 350},
		// Leader in asia: majority = 150 (us).
		{"asia", "asia", 150}, {"asia", "us", 300}, {"asia", "europe", 400},
		// Leader unknown: the best leader for the region.
		{"", "europe", 100}, {"", "us", 100}, {"", "asia", 150},
	} {
		for _, read := range []string{bench.EtcdLinearizable, bench.EtcdSerializable} {
			if got := LowerBoundMs(topo, regions, tc.leader, read, tc.region, "write"); got != tc.want {
				t.Errorf("write from %s, leader %q, %s: %v, want %v", tc.region, tc.leader, read, got, tc.want)
			}
		}
		if got := LowerBoundMs(topo, regions, tc.leader, bench.EtcdLinearizable, tc.region, "read"); got != tc.want {
			t.Errorf("linearizable read from %s, leader %q: %v, want %v", tc.region, tc.leader, got, tc.want)
		}
		if got := LowerBoundMs(topo, regions, tc.leader, bench.EtcdSerializable, tc.region, "read"); got != 0 {
			t.Errorf("serializable read from %s: %v, want 0", tc.region, got)
		}
	}
	// Five members, two in us: majority needs the 2 nearest others (the second us member at 0, europe at 100).
	five := []string{"europe", "us", "us", "asia", "asia"}
	if got := LowerBoundMs(topo, five, "us", bench.EtcdLinearizable, "asia", "write"); got != 250 {
		t.Errorf("five members: %v, want 250", got)
	}
	// Through the registry, as bench.LowerBoundMs sees a session's configuration.
	cfg := bench.Config{Protocol: bench.ProtocolEtcd, ReadLevel: bench.EtcdLinearizable, Options: map[string]string{OptionLeader: "us"}}
	if got := bench.LowerBoundMs(topo, cfg, "europe", "write"); got != 200 {
		t.Errorf("registered bound: %v, want 200", got)
	}
	cfg.ReadLevel = bench.EtcdSerializable
	if got, w := bench.LowerBoundMs(topo, cfg, "asia", "read"), bench.LowerBoundMs(topo, cfg, "asia", "write"); got != 0 || w != 250 {
		t.Errorf("registered serializable bounds: read %v write %v, want 0 and 250", got, w)
	}
	// A session's bound uses the leader it observed.
	s := &session{c: &Cluster{o: peer.Options{Hosts: loopbackHosts(topo), Topology: topo}},
		cfg: bench.Config{Protocol: "etcd", ReadLevel: "linearizable", Options: map[string]string{OptionLeader: "us"}}}
	if got := s.LowerBoundMs("europe", "read"); got != 200 {
		t.Errorf("session bound: %v, want 200", got)
	}
}

func TestCheckConfig(t *testing.T) {
	for _, cfg := range []bench.Config{
		{Protocol: "etcd", ReadLevel: "linearizable"},
		{Protocol: "etcd", ReadLevel: "serializable"},
	} {
		if err := checkConfig(cfg); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	for _, cfg := range []bench.Config{
		{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"},
		{Protocol: "etcd", ReadLevel: "QUORUM"},
		{Protocol: "etcd"},
		{Protocol: "etcd", ReadLevel: "linearizable", WriteLevel: "QUORUM"},
	} {
		if err := checkConfig(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	// What --protocols gives.
	cfgs, err := bench.ParseConfigs("etcd:linearizable,etcd:serializable,etcd")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		if err := checkConfig(cfg); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}
