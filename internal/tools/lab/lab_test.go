//go:build linux

package lab

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"meridian/client"
	"meridian/internal/hlc"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/check"
	"meridian/internal/tools/lab/wan"
	"meridian/internal/topology"
)

func mustTopology(t *testing.T, name string) *topology.Topology {
	t.Helper()
	topo, err := topology.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestPlan(t *testing.T) {
	l, err := Plan(PlanOptions{Topology: mustTopology(t, "gcp-meteorshower-3"), MeridianPerRegion: 2, Peers: []string{RoleCassandra, RoleEtcd}})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Hosts) != 3*5 {
		t.Fatalf("%d hosts, want 15 (2 Meridian, a client, 2 peers per region)", len(l.Hosts))
	}
	seen := map[string]bool{}
	for _, h := range l.Hosts {
		for _, v := range []string{h.Name, h.Addr.String(), h.Netns, h.TUN} {
			if seen[v] {
				t.Fatalf("%q used twice", v)
			}
			seen[v] = true
		}
		if !strings.HasPrefix(h.Netns, NetnsPrefix) || len(h.TUN) > 15 || !strings.HasPrefix(h.Addr.String(), "10.77.") {
			t.Fatalf("bad host %+v", h)
		}
	}
	if h, _ := l.Client("us"); h.Addr.String() != "10.77.2.3" {
		t.Fatalf("us client at %v, want 10.77.2.3 (region 2, after its 2 servers)", h.Addr)
	}
	us, _ := l.Host("us-m1")
	asia, _ := l.Host("asia-m1")
	if d := l.TopologyLink(wanHost(us), wanHost(asia)).DelayMs; d != 75 {
		t.Fatalf("us->asia one-way delay %v, want 75 (RTT 150 / 2)", d)
	}
	if _, err := Plan(PlanOptions{Topology: mustTopology(t, "gcp-meteorshower-3"), Peers: []string{"mysql"}}); err == nil {
		t.Fatal("an unknown peer must be refused")
	}
}

// The thesis's comparison: nine Meridian servers beside nine ZooKeeper servers and nine etcd
// members, three per region; one peer host per region keeps its old name.
func TestPlanPeersPerRegion(t *testing.T) {
	topo := mustTopology(t, "gcp-meteorshower-3")
	l, err := Plan(PlanOptions{Topology: topo, MeridianPerRegion: 3, Peers: []string{RoleZooKeeper, RoleEtcd}, PeersPerRegion: 3})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(l.Hosts); n != 3*(3+1+2*3) {
		t.Fatalf("%d hosts, want 30 (3 Meridian, a client, 3 ZooKeeper and 3 etcd per region)", n)
	}
	zk := l.ByRole(RoleZooKeeper)
	if len(zk) != 9 || zk[0].Name != "europe-zookeeper1" || zk[8].Name != "asia-zookeeper3" || zk[8].Region != "asia" {
		t.Fatalf("ZooKeeper hosts %+v", zk)
	}
	if len(l.ByRole(RoleEtcd)) != 9 {
		t.Fatalf("%d etcd hosts, want 9", len(l.ByRole(RoleEtcd)))
	}
	seen := map[string]bool{}
	for _, h := range l.Hosts {
		if seen[h.Addr.String()] || seen[h.Netns] {
			t.Fatalf("%s reuses an address or namespace", h.Name)
		}
		seen[h.Addr.String()], seen[h.Netns] = true, true
	}
	one, err := Plan(PlanOptions{Topology: topo, Peers: []string{RoleZooKeeper}})
	if err != nil {
		t.Fatal(err)
	}
	if h := one.ByRole(RoleZooKeeper); len(h) != 3 || h[1].Name != "us-zookeeper" {
		t.Fatalf("one per region: %+v", h)
	}
	for _, bad := range []PlanOptions{
		{Topology: topo, Peers: []string{RoleEtcd}, PeersPerRegion: -1},
		{Topology: topo, Peers: []string{RoleEtcd, RoleEtcd}},
		{Topology: topo, Peers: []string{RoleZooKeeper}, PeersPerRegion: MaxHostsPerRegion},
	} {
		if _, err := Plan(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if r := PeerRole(bench.ProtocolZooKeeper); r != RoleZooKeeper {
		t.Errorf("zookeeper runs on %q hosts", r)
	}
	if _, ok := peerStarters[RoleZooKeeper]; !ok {
		t.Error("no ZooKeeper starter registered")
	}
}

func wanHost(h Host) wan.Host { return wan.Host{Name: h.Name, Region: h.Region, Addr: h.Addr} }

func TestOutcomeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want check.Outcome
	}{
		{&client.Error{Code: codes.Unavailable, Msg: "node us-m1: no quorum: 1 of 2 replicas answered"}, check.Failed},
		{&client.Error{Code: codes.Unavailable, Msg: "connection error: desc = \"transport: Error while dialing: dial tcp 10.77.2.1:7070: connect: connection refused\""}, check.Failed},
		{&client.Error{Code: codes.Unavailable, Msg: "error reading from server: EOF"}, check.Indeterminate},
		{&client.Error{Code: codes.Unavailable, Msg: "transport is closing"}, check.Indeterminate},
		{&client.Error{Code: codes.DeadlineExceeded, Msg: "timeout"}, check.Indeterminate},
		{&client.Error{Code: codes.InvalidArgument, Msg: "bad key"}, check.Failed},
		{errors.New("context canceled"), check.Indeterminate},
	} {
		if got := outcomeOf(c.err); got != c.want {
			t.Errorf("outcomeOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// The lab's checking must catch what it exists to catch: a lost acknowledged write and a
// stale read (deliberately broken histories), and pass a correct one.
func TestCheckHistoryCatchesBrokenHistories(t *testing.T) {
	v := func(w int64) hlc.Version { return hlc.Version{WallNanos: w, NodeID: 1} }
	good := check.History{
		{ID: 0, Process: 0, Kind: check.Write, Key: "k0", Value: "a", Version: v(10), Outcome: check.OK, Invoke: 0, Return: 10},
		{ID: 1, Process: 1, Kind: check.Read, Key: "k0", Value: "a", Found: true, Version: v(10), Outcome: check.OK, Invoke: 20, Return: 30},
		{ID: 2, Process: 0, Kind: check.Write, Key: "k0", Value: "b", Version: v(40), Outcome: check.OK, Invoke: 40, Return: 50},
	}
	final := []check.ReplicaState{{Node: "n1", Key: "k0", Found: true, Value: "b", Version: v(40)}}
	cfg := bench.Config{Protocol: "globlease"}
	if _, viol, lost := checkHistory(cfg, good, final); len(viol) != 0 || lost != 0 {
		t.Fatalf("a correct history: violations %v, lost %d", viol, lost)
	}
	// Lost write: every node still has "a".
	stale := []check.ReplicaState{{Node: "n1", Key: "k0", Found: true, Value: "a", Version: v(10)}}
	if _, viol, lost := checkHistory(cfg, good, stale); lost != 1 || len(viol) == 0 {
		t.Fatalf("a lost write: violations %v, lost %d; want it caught", viol, lost)
	}
	// Stale read: process 1 reads "a" after "b" was acknowledged and after it saw "b".
	bad := append(check.History{}, good...)
	bad = append(bad,
		check.Op{ID: 3, Process: 1, Kind: check.Read, Key: "k0", Value: "b", Found: true, Version: v(40), Outcome: check.OK, Invoke: 60, Return: 70},
		check.Op{ID: 4, Process: 1, Kind: check.Read, Key: "k0", Value: "a", Found: true, Version: v(10), Outcome: check.OK, Invoke: 80, Return: 90})
	checkers, viol, _ := checkHistory(cfg, bad, final)
	if len(viol) == 0 {
		t.Fatal("a stale read after a newer one must be caught")
	}
	if len(checkers) != 3 {
		t.Fatalf("globlease is checked with %v, want sequential consistency, durability and linearizability", checkers)
	}
	if c, _, _ := checkHistory(bench.Config{Protocol: "quorum"}, good, final); len(c) != 2 {
		t.Fatalf("quorum is checked with %v, want sequential consistency and durability", c)
	}
}

// Beyond ε MeteorShower must fall back visibly: a run whose reads all stayed local (the
// broken variant: a node that ignores its clock service) is a violation; one with fallback
// reads, or a fault within ε, is not.
func TestSilentDegradationCaught(t *testing.T) {
	ms := bench.Config{Protocol: "meteorshower", ReadLevel: "QUORUM", WriteLevel: "QUORUM"}
	if silentDegradation(ms, ScenarioClockBeyond, map[string]int{"local": 400, "local-waited": 200}) == "" {
		t.Fatal("MeteorShower serving only local reads with a clock beyond ε must be caught")
	}
	if v := silentDegradation(ms, ScenarioClockBeyond, map[string]int{"fallback": 243, "local-waited": 406}); v != "" {
		t.Fatalf("a run that fell back was flagged: %s", v)
	}
	if v := silentDegradation(ms, ScenarioClockWithin, map[string]int{"local": 400}); v != "" {
		t.Fatalf("local reads within ε were flagged: %s", v)
	}
	if v := silentDegradation(bench.Config{Protocol: "quorum"}, ScenarioClockBeyond, map[string]int{"quorum": 400}); v != "" {
		t.Fatalf("quorum has no local reads to fall back from: %s", v)
	}
}

func TestPlanRefusesNegativeServers(t *testing.T) {
	if _, err := Plan(PlanOptions{Topology: mustTopology(t, "gcp-meteorshower-3"), MeridianPerRegion: -1}); err == nil {
		t.Fatal("a negative server count must be refused")
	}
}
