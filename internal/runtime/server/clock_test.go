package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/runtime/node"
	"meridian/internal/runtime/server"
	"meridian/internal/runtime/transport"
	"meridian/internal/topology"
)

// startNodes starts 3 nodes (regions a, b, c, 2ms apart) on the emulated WAN, each with an
// in-memory store, keyspace "kv" (quorum), and returns the client API of each. configure,
// when set, adjusts node i's options before it starts.
func startNodes(t *testing.T, configure func(i int, o *node.Options)) []*server.Service {
	t.Helper()
	topo := topology.Equidistant("t", regions, 2, 0)
	cfg := &config.Cluster{Name: "test", Topology: topo, TopologyRef: topo.Name,
		Keyspaces: []config.Keyspace{{Name: "kv", Protocol: config.ProtocolQuorum}}}
	for i, r := range regions {
		cfg.Nodes = append(cfg.Nodes, config.Node{Name: r + "-1", Region: r, Listen: fmt.Sprintf("127.0.0.1:%d", 21001+i), PeerListen: fmt.Sprintf("127.0.0.1:%d", 22001+i)})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	wan, err := transport.NewWAN(transport.WANOptions{Topology: topo, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wan.Close)
	var svcs []*server.Service
	for i, nd := range cfg.Nodes {
		o := node.Options{
			Cluster: cfg, NodeName: nd.Name, DataDir: "/data", FS: vfs.NewMem(),
			NewTransport: func(h transport.Handler) (transport.Transport, error) {
				return wan.Attach(nd.ID, nd.Region, h)
			},
		}
		if configure != nil {
			configure(i, &o)
		}
		n, err := node.Start(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		svcs = append(svcs, server.NewService(n))
	}
	return svcs
}

// startSkewedCluster starts the nodes of startNodes with node i's clock offsets[i] away from
// the machine clock (as server.Options.ClockOffset does in a real process).
func startSkewedCluster(t *testing.T, offsets []time.Duration) []*server.Service {
	return startNodes(t, func(i int, o *node.Options) { o.Clock = hlc.NewSystemClock(offsets[i]) })
}

// TestDeadlineFollowsNodeClock: a request's deadline must be measured on the clock the
// node's core fires deadlines with. A coordinator whose clock runs ahead of the machine clock
// (server.Options.ClockOffset, the lab's clock-skew nemesis) must still serve requests whose
// timeout is shorter than its offset.
// (Regression: the gateway once stamped deadlines with time.Now(), so with a clock ahead by
// more than the timeout every request that needed a remote reply timed out at the first tick.)
// The offset stays within ε + clock.future_version_margin: further ahead, the other nodes
// refuse the node's versions (TestFarFutureVersionsAreRefused).
func TestDeadlineFollowsNodeClock(t *testing.T) {
	svcs := startSkewedCluster(t, []time.Duration{800 * time.Millisecond, 0, 0})
	cx := ctx(t)
	_, err := svcs[0].Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: []byte("v"), TimeoutMs: 500})
	if err != nil {
		t.Fatalf("put via the node whose clock is 800ms ahead, timeout 500ms: %v", err)
	}
	_, err = svcs[0].Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte("k"), TimeoutMs: 500})
	if err != nil {
		t.Fatalf("get via the node whose clock is 800ms ahead, timeout 500ms: %v", err)
	}
}

// A coordinator whose clock is far beyond ε + clock.future_version_margin ahead cannot keep
// the clock assumption: the other replicas refuse its versions (counted), so its writes fail
// visibly instead of shadowing every later write (issue 12, defect 1).
func TestFarFutureVersionsAreRefused(t *testing.T) {
	svcs := startSkewedCluster(t, []time.Duration{30 * time.Second, 0, 0})
	cx := ctx(t)
	_, err := svcs[0].Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: []byte("from-the-future"), TimeoutMs: 500})
	wantCode(t, err, codes.DeadlineExceeded, "no ack from [b-1 c-1]")
	// The honest nodes' writes are unaffected.
	v, err := svcs[1].Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: []byte("now")})
	if err != nil {
		t.Fatal(err)
	}
	g, err := svcs[2].Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte("k"), Consistency: "QUORUM"})
	if err != nil || string(g.Value) != "now" || g.Version.WallNanos != v.Version.WallNanos {
		t.Fatalf("read after the refused future write: %q %v (%v), want the acknowledged write", g.GetValue(), g.GetVersion(), err)
	}
}
