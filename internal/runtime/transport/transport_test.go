package transport

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"meridian/client"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

type collector struct {
	mu   sync.Mutex
	got  []*peerpb.Envelope
	at   []time.Time
	cond chan struct{}
}

func newCollector() *collector { return &collector{cond: make(chan struct{}, 1<<16)} }

func (c *collector) handle(env *peerpb.Envelope) {
	c.mu.Lock()
	c.got = append(c.got, env)
	c.at = append(c.at, time.Now())
	c.mu.Unlock()
	c.cond <- struct{}{}
}

func (c *collector) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		have := len(c.got)
		c.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-c.cond:
		case <-deadline:
			t.Fatalf("received %d of %d messages before the deadline", have, n)
		}
	}
}

func hb(from, to uint32, seq int64) *peerpb.Envelope {
	return &peerpb.Envelope{From: from, To: to, Msg: &peerpb.Envelope_Heartbeat{Heartbeat: &peerpb.Heartbeat{SentUnixNanos: seq}}}
}

// The emulated WAN never delivers before the one-way delay of the region pair, and keeps
// per-link FIFO order even with jitter. (A lower bound on delay is a correctness property of
// the emulation, not a timing assertion on a noisy machine: early delivery is impossible.)
func TestWANDelaysByOneWayLatencyAndKeepsLinkOrder(t *testing.T) {
	topo := topology.Equidistant("t", []string{"a", "b"}, 40, 0)
	w, err := NewWAN(WANOptions{Topology: topo, Jitter: 5 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	col := newCollector()
	src, err := w.Attach(1, "a", func(*peerpb.Envelope) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Attach(2, "b", col.handle); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Attach(2, "b", col.handle); err == nil {
		t.Fatal("attaching a node twice must fail")
	}
	if _, err := w.Attach(3, "mars", col.handle); err == nil {
		t.Fatal("attaching to an unknown region must fail")
	}
	const n = 200
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		if !src.Send(hb(1, 2, int64(i))) {
			t.Fatal("send dropped")
		}
	}
	col.wait(t, n)
	for i, env := range col.got {
		if got := env.GetHeartbeat().SentUnixNanos; got != int64(i) {
			t.Fatalf("message %d arrived in position %d: link order broken", got, i)
		}
		if d := col.at[i].Sub(sent[i]); d < topo.OneWay("a", "b") {
			t.Fatalf("message %d delivered after %v, before the one-way delay %v", i, d, topo.OneWay("a", "b"))
		}
	}
	if s := src.Stats(); s.Sent != n || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
	// A detached node's messages are dropped at delivery; sends to unknown nodes at once.
	w.Detach(2)
	if src.Send(hb(1, 9, 0)) {
		t.Fatal("send to an unattached node must report a drop")
	}
}

func TestWANRejectsBadOptions(t *testing.T) {
	if _, err := NewWAN(WANOptions{}); err == nil {
		t.Fatal("no topology accepted")
	}
	topo := topology.Equidistant("t", []string{"a"}, 1, 0)
	if _, err := NewWAN(WANOptions{Topology: topo, Jitter: -1}); err == nil {
		t.Fatal("negative jitter accepted")
	}
}

// startReceiver serves node 2 of a two-node cluster ("t": node 1 at 127.0.0.1, node 2 on a
// free port) with a collector as its handler. It returns node 2's address, the nodes, the
// collector and the gRPC server (stopped at cleanup; tests may stop it earlier).
func startReceiver(t *testing.T, opts ...grpc.ServerOption) (string, []PeerNode, *collector, *grpc.Server, *GRPC) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	col := newCollector()
	nodes := []PeerNode{{ID: 1, Name: "n1", Addr: "127.0.0.1:1"}, {ID: 2, Name: "n2", Addr: addr}}
	recv, err := NewGRPC(GRPCOptions{Cluster: "t", Self: 2, Nodes: nodes}, col.handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Close() })
	srv := grpc.NewServer(opts...)
	recv.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return addr, nodes, col, srv, recv
}

func TestGRPCDeliversInOrderAndSurvivesPeerRestart(t *testing.T) {
	addr, nodes, col, srv, recv := startReceiver(t)
	send, err := NewGRPC(GRPCOptions{Cluster: "t", Self: 1, Nodes: nodes}, func(*peerpb.Envelope) {})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	for i := range 100 {
		send.Send(hb(1, 2, int64(i)))
	}
	col.wait(t, 100)
	for i, env := range col.got {
		if env.GetHeartbeat().SentUnixNanos != int64(i) || env.From != 1 {
			t.Fatalf("position %d holds %v", i, env)
		}
	}
	if send.Send(hb(1, 9, 0)) {
		t.Fatal("send to an unknown peer must report a drop")
	}
	// Restart the receiving server on the same address: the sender reconnects.
	srv.Stop()
	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot rebind %s: %v", addr, err)
	}
	srv2 := grpc.NewServer()
	recv.Register(srv2)
	go srv2.Serve(lis2)
	defer srv2.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		send.Send(hb(1, 2, int64(1000+i)))
		col.mu.Lock()
		n := len(col.got)
		col.mu.Unlock()
		if n > 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sender never reconnected to the restarted peer")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A peer stream is accepted only from a node of this cluster, naming itself and this node,
// from that node's own address; a node cannot speak for another (issue 12: anyone who
// reached the port could write as a replica). Each refusal is counted with its reason and
// nothing is delivered.
func TestGRPCRefusesStreamsFromNonMembers(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	col := newCollector()
	var mu sync.Mutex
	reasons := map[string]int{}
	nodes := []PeerNode{
		{ID: 1, Name: "n1", Addr: "127.0.0.1:1"},  // connects from 127.0.0.1
		{ID: 2, Name: "n2", Addr: addr},           // the receiver
		{ID: 3, Name: "n3", Addr: "127.0.0.33:1"}, // must connect from 127.0.0.33
	}
	recv, err := NewGRPC(GRPCOptions{Cluster: "prod", Self: 2, Nodes: nodes, OnRefused: func(reason, _ string, _ error) {
		mu.Lock()
		reasons[reason]++
		mu.Unlock()
	}}, col.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	srv := grpc.NewServer()
	recv.Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// send opens a stream with the given identity, sends one message and returns the
	// stream's final status.
	send := func(md []string, env *peerpb.Envelope) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if len(md) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, md...)
		}
		st, err := peerpb.NewPeerClient(conn).Stream(ctx)
		if err != nil {
			return err
		}
		st.Send(env) // the error, if any, is the stream's: CloseAndRecv reports it
		_, err = st.CloseAndRecv()
		return err
	}
	id := func(cluster, nodeID, name, to string) []string {
		return []string{"meridian-cluster", cluster, "meridian-node-id", nodeID, "meridian-node", name, "meridian-to", to}
	}
	cases := []struct {
		name   string
		md     []string
		env    *peerpb.Envelope
		code   codes.Code
		reason string
	}{
		{"no identity (a client on the peer port)", nil, hb(1, 2, 1), codes.Unauthenticated, RefuseNoIdentity},
		{"another cluster", id("staging", "1", "n1", "2"), hb(1, 2, 1), codes.PermissionDenied, RefuseWrongCluster},
		{"not a member", id("prod", "7", "n7", "2"), hb(7, 2, 1), codes.PermissionDenied, RefuseNotMember},
		{"this node's own id", id("prod", "2", "n2", "2"), hb(2, 2, 1), codes.PermissionDenied, RefuseNotMember},
		{"wrong name for the id", id("prod", "1", "n3", "2"), hb(1, 2, 1), codes.PermissionDenied, RefuseWrongNode},
		{"addressed to another node", id("prod", "1", "n1", "3"), hb(1, 2, 1), codes.PermissionDenied, RefuseWrongNode},
		{"a member, from another address", id("prod", "3", "n3", "2"), hb(3, 2, 1), codes.PermissionDenied, RefuseSourceAddress},
	}
	for _, tc := range cases {
		err := send(tc.md, tc.env)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: got %v, want %v with an explanation", tc.name, err, tc.code)
		}
	}
	// A member speaking for another node: the stream is accepted, the message is not.
	if err := send(id("prod", "1", "n1", "2"), hb(3, 2, 1)); err != nil {
		t.Fatalf("a valid stream failed: %v", err)
	}
	// The same stream identity sending as itself is delivered: the checks refuse only what
	// they should.
	if err := send(id("prod", "1", "n1", "2"), hb(1, 2, 42)); err != nil {
		t.Fatalf("a valid stream failed: %v", err)
	}
	col.wait(t, 1)
	col.mu.Lock()
	got := len(col.got)
	first := col.got[0]
	col.mu.Unlock()
	if got != 1 || first.From != 1 || first.GetHeartbeat().SentUnixNanos != 42 {
		t.Fatalf("delivered %d messages, first %v; want only the valid one", got, first)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tc := range cases {
		if reasons[tc.reason] == 0 {
			t.Errorf("refusal %q not reported", tc.reason)
		}
	}
	if reasons[RefuseFromMismatch] != 1 {
		t.Errorf("from-mismatch refusals = %d, want 1", reasons[RefuseFromMismatch])
	}
	if recv.Refused() != uint64(len(cases)+1) {
		t.Errorf("Refused() = %d, want %d", recv.Refused(), len(cases)+1)
	}
}

// The keepalive settings agree: no client of a Meridian server (the peer transport, the Go
// client's defaults) pings more often than the servers allow, so no connection is dropped
// with "too_many_pings" (issue 12).
func TestKeepaliveAgreement(t *testing.T) {
	if PeerKeepaliveParams.Time < ServerKeepaliveEnforcement.MinTime {
		t.Errorf("peer transport pings every %v, servers allow every %v", PeerKeepaliveParams.Time, ServerKeepaliveEnforcement.MinTime)
	}
	if client.DefaultKeepaliveTime < ServerKeepaliveEnforcement.MinTime {
		t.Errorf("the Go client pings every %v, servers allow every %v", client.DefaultKeepaliveTime, ServerKeepaliveEnforcement.MinTime)
	}
	if !ServerKeepaliveEnforcement.PermitWithoutStream {
		t.Error("peer streams are long-lived but idle links ping without a call: PermitWithoutStream must be on")
	}
}

// A peer stream idle for longer than three keepalive intervals survives: the server's ping
// policy allows the peer transport's pings. Under grpc-go's default policy (one ping every
// 5 minutes) the fourth ping of an idle stream earns a GOAWAY "too_many_pings" and the stream
// breaks (issue 12). Takes about 45 s.
func TestIdlePeerStreamSurvivesKeepalive(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 45 s for keepalive pings")
	}
	_, nodes, col, _, _ := startReceiver(t, ServerKeepaliveOptions()...)
	var mu sync.Mutex
	var streamErrs []error
	send, err := NewGRPC(GRPCOptions{Cluster: "t", Self: 1, Nodes: nodes, OnError: func(_ uint32, err error) {
		mu.Lock()
		streamErrs = append(streamErrs, err)
		mu.Unlock()
	}}, func(*peerpb.Envelope) {})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	send.Send(hb(1, 2, 1))
	col.wait(t, 1)
	time.Sleep(4*KeepaliveTime + KeepaliveTimeout)
	send.Send(hb(1, 2, 2))
	col.wait(t, 2)
	mu.Lock()
	defer mu.Unlock()
	if len(streamErrs) > 0 {
		t.Fatalf("the idle peer stream broke: %v", streamErrs)
	}
}

// legacyPeer serves only Peer.Stream, as a node of a version before Peer.StreamBatches.
type legacyPeer struct {
	peerpb.UnimplementedPeerServer
	recv *GRPC
}

func (l legacyPeer) Stream(s grpc.ClientStreamingServer[peerpb.Envelope, peerpb.StreamAck]) error {
	return l.recv.Stream(s)
}

// A sender whose receiver does not know Peer.StreamBatches (Unimplemented) goes on with one
// message per stream message: after the loss of what it sent meanwhile, which the protocols
// tolerate, every message arrives, in order.
func TestGRPCFallsBackToStreamForOlderReceivers(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	nodes := []PeerNode{{ID: 1, Name: "n1", Addr: "127.0.0.1:1"}, {ID: 2, Name: "n2", Addr: lis.Addr().String()}}
	recv, err := NewGRPC(GRPCOptions{Cluster: "t", Self: 2, Nodes: nodes}, col.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	srv := grpc.NewServer()
	peerpb.RegisterPeerServer(srv, legacyPeer{recv: recv})
	go srv.Serve(lis)
	defer srv.Stop()
	send, err := NewGRPC(GRPCOptions{Cluster: "t", Self: 1, Nodes: nodes}, func(*peerpb.Envelope) {})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !send.view.Load().peers[2].legacy.Load(); i++ {
		send.Send(hb(1, 2, -1))
		if time.Now().After(deadline) {
			t.Fatal("the sender never fell back to Peer.Stream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := func() int { col.mu.Lock(); defer col.mu.Unlock(); return len(col.got) }()
	for i := range 50 {
		send.Send(hb(1, 2, int64(i)))
	}
	col.wait(t, before+50)
	col.mu.Lock()
	defer col.mu.Unlock()
	var seqs []int64
	for _, env := range col.got {
		if s := env.GetHeartbeat().SentUnixNanos; s >= 0 {
			seqs = append(seqs, s)
		}
	}
	if len(seqs) < 50 {
		t.Fatalf("received %d numbered messages, want 50", len(seqs))
	}
	for i, s := range seqs[len(seqs)-50:] {
		if s != int64(i) {
			t.Fatalf("numbered message %d is %d: order lost", i, s)
		}
	}
}

// Messages queued together leave in batches of at most MaxBatchBytes (one larger message
// alone), and arrive whole and in order.
func TestGRPCBatchesStayWithinTheirBounds(t *testing.T) {
	_, nodes, col, _, _ := startReceiver(t, grpc.MaxRecvMsgSize(MaxBatchBytes+64<<10))
	send, err := NewGRPC(GRPCOptions{Cluster: "t", Self: 1, Nodes: nodes}, func(*peerpb.Envelope) {})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	value := make([]byte, 300<<10)
	const n = 12
	for i := range n {
		env := &peerpb.Envelope{From: 1, To: 2, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{RequestId: uint64(i),
			Record: &peerpb.Record{Keyspace: "k", Key: []byte("x"), Value: value}}}}
		if !send.Send(env) {
			t.Fatalf("message %d dropped at send", i)
		}
	}
	col.wait(t, n)
	for i, env := range col.got {
		if w := env.GetWrite(); w == nil || w.RequestId != uint64(i) || len(w.Record.Value) != len(value) {
			t.Fatalf("position %d holds request %d", i, w.GetRequestId())
		}
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// A node that joins the running cluster: the receiver refuses its streams until its
// membership lists it (SetMembers), then takes them; once it leaves the membership again,
// its streams are refused.
func TestGRPCMembershipChanges(t *testing.T) {
	_, nodes, col, _, recv := startReceiver(t)
	joined := PeerNode{ID: 3, Name: "n3", Addr: "127.0.0.1:1"}
	send, err := NewGRPC(GRPCOptions{Cluster: "t", Self: 3, Nodes: append(slices.Clone(nodes), joined), MaxBackoff: 20 * time.Millisecond}, func(*peerpb.Envelope) {})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	for range 20 {
		send.Send(hb(3, 2, 1))
		time.Sleep(10 * time.Millisecond)
	}
	if n := col.count(); n != 0 {
		t.Fatalf("%d messages of a node that is not a member yet were delivered", n)
	}
	if recv.refusedCount.Load() == 0 {
		t.Fatal("no stream of the stranger was refused")
	}
	if err := recv.SetMembers(append(slices.Clone(nodes), joined)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for col.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the joined node's messages never arrived")
		}
		send.Send(hb(3, 2, 2))
		time.Sleep(20 * time.Millisecond)
	}
	// Leaving: refused again (a new stream; the old one's messages are checked on arrival).
	if err := recv.SetMembers(nodes); err != nil {
		t.Fatal(err)
	}
	if _, ok := recv.view.Load().members[3]; ok {
		t.Fatal("node 3 still a member after it left")
	}
	if err := recv.SetMembers([]PeerNode{{ID: 1, Name: "n1"}}); err == nil {
		t.Fatal("a member without a peer address accepted")
	}
}

// TestWANLinkBandwidthAndCPUBookInOrder checks the booking arithmetic with explicit times: a
// region pair's link carries one message at a time; a node's cores take messages in arrival
// order, the earliest free core first.
func TestWANLinkBandwidthAndCPUBookInOrder(t *testing.T) {
	topo := topology.Equidistant("t", []string{"a", "b"}, 40, 0)
	w, err := NewWAN(WANOptions{Topology: topo, CPU: &CPUModel{PerMessage: time.Millisecond, Cores: 2},
		LinkBandwidth: func(a, b string) float64 { return 1 << 20 }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	t0 := time.Unix(100, 0)
	pair := [2]string{"a", "b"}
	// Two 1 MiB messages ready at once: the second leaves the link a second after the first.
	if got := w.bookLink(pair, t0, 20*time.Millisecond, time.Second); !got.Equal(t0.Add(time.Second + 20*time.Millisecond)) {
		t.Fatalf("first message arrives at %v", got.Sub(t0))
	}
	if got := w.bookLink(pair, t0, 20*time.Millisecond, time.Second); !got.Equal(t0.Add(2*time.Second + 20*time.Millisecond)) {
		t.Fatalf("second message arrives at %v, want after the first has left the link", got.Sub(t0))
	}
	// The other direction is another link.
	if got := w.bookLink([2]string{"b", "a"}, t0, 20*time.Millisecond, time.Second); !got.Equal(t0.Add(time.Second + 20*time.Millisecond)) {
		t.Fatalf("the reverse link waited for the forward one: %v", got.Sub(t0))
	}
	// Three messages arriving together on two cores: two done after 1 ms, the third after 2.
	var done []time.Duration
	for range 3 {
		done = append(done, w.process(7, t0, time.Millisecond).Sub(t0))
	}
	if done[0] != time.Millisecond || done[1] != time.Millisecond || done[2] != 2*time.Millisecond {
		t.Fatalf("processing ends %v, want [1ms 1ms 2ms]", done)
	}
	if c := (CPUModel{PerMessage: time.Millisecond, PerKiB: 4 * time.Millisecond, Cores: 1}).cost(2048); c != 9*time.Millisecond {
		t.Fatalf("cost of 2 KiB = %v, want 9ms", c)
	}
	for _, bad := range []WANOptions{
		{Topology: topo, CPU: &CPUModel{Cores: 0}},
		{Topology: topo, CPU: &CPUModel{PerMessage: -1, Cores: 1}},
		{Topology: topo, CPU: &CPUModel{PerRequest: -1, Cores: 1}},
		{Topology: topo, LinkBandwidth: func(a, b string) float64 { return -1 }},
	} {
		if w, err := NewWAN(bad); err == nil {
			w.Close()
			t.Errorf("options %+v accepted", bad)
		}
	}
}

// TestWANChargeRequestSharesTheCores: client requests queue on the same modelled cores as
// messages (a node busy with messages serves requests later), and cost nothing without a
// cost per request.
func TestWANChargeRequestSharesTheCores(t *testing.T) {
	topo := topology.Equidistant("t", []string{"a"}, 0, 0)
	w, err := NewWAN(WANOptions{Topology: topo, CPU: &CPUModel{PerMessage: time.Hour, PerRequest: time.Hour, Cores: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	before := time.Now()
	first := w.ChargeRequest(3)
	if first.Sub(before) < time.Hour {
		t.Fatalf("a request on an idle core is done %v after it arrived, want its cost (1h)", first.Sub(before))
	}
	// The core is booked until first: a message arriving now waits for it, then the next
	// request waits for both.
	msg := w.process(3, time.Now(), time.Hour)
	if !msg.Equal(first.Add(time.Hour)) {
		t.Fatalf("a message behind a request is done at +%v, want +1h after the request", msg.Sub(first))
	}
	if next := w.ChargeRequest(3); !next.Equal(msg.Add(time.Hour)) {
		t.Fatalf("a request behind a message is done at +%v, want +1h after it", next.Sub(msg))
	}
	// Another node has its own core.
	if other := w.ChargeRequest(4); other.After(first.Add(time.Minute)) {
		t.Fatalf("node 4's request waited for node 3's core")
	}
	free, err := NewWAN(WANOptions{Topology: topo, CPU: &CPUModel{PerMessage: time.Hour, Cores: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer free.Close()
	if d := time.Until(free.ChargeRequest(3)); d > time.Minute {
		t.Fatalf("without a cost per request a request waits %v", d)
	}
}

// TestWANLinkBandwidthDelaysDelivery: over a 64 KiB/s link, 16 messages of 4 KiB cannot all
// arrive before a second plus the one-way delay (a lower bound the emulator guarantees).
func TestWANLinkBandwidthDelaysDelivery(t *testing.T) {
	topo := topology.Equidistant("t", []string{"a", "b"}, 10, 0)
	w, err := NewWAN(WANOptions{Topology: topo, LinkBandwidth: func(a, b string) float64 { return 64 << 10 }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	col := newCollector()
	src, _ := w.Attach(1, "a", func(*peerpb.Envelope) {})
	if _, err := w.Attach(2, "b", col.handle); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 16 {
		env := hb(1, 2, int64(i))
		env.Msg = &peerpb.Envelope_Canopus{Canopus: &peerpb.CanopusEnvelope{Keyspace: string(make([]byte, 4<<10))}}
		if !src.Send(env) {
			t.Fatal("send dropped")
		}
	}
	col.wait(t, 16)
	if d := col.at[15].Sub(start); d < time.Second+topo.OneWay("a", "b") {
		t.Fatalf("16 × 4 KiB over 64 KiB/s delivered after %v", d)
	}
}

// A receiver's downlink carries messages in the order they reach it: a message from a node
// next door is not held behind one still on its way from another continent (the downlink
// was once booked at send time, through the far message's propagation delay, which made
// every intra-region transfer wait for the WAN's one-way delays).
func TestWANDownlinkServesMessagesInArrivalOrder(t *testing.T) {
	topo, err := topology.New(topology.Spec{Name: "t", Regions: []string{"near", "far"},
		RTTMs: map[string]map[string]float64{"near": {"far": 400}}, IntraRegionRTTMs: map[string]float64{"near": 1, "far": 1}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWAN(WANOptions{Topology: topo, NodeBandwidth: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	col := newCollector()
	if _, err := w.Attach(1, "near", col.handle); err != nil {
		t.Fatal(err)
	}
	neighbour, _ := w.Attach(2, "near", func(*peerpb.Envelope) {})
	remote, _ := w.Attach(3, "far", func(*peerpb.Envelope) {})
	if !remote.Send(hb(3, 1, 1)) || !neighbour.Send(hb(2, 1, 2)) {
		t.Fatal("send dropped")
	}
	col.wait(t, 2)
	if col.got[0].From != 2 {
		t.Fatalf("the far node's message (sent first, 200ms away) came before the neighbour's: order %d, %d", col.got[0].From, col.got[1].From)
	}
}
