package transport

import (
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

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

func TestGRPCDeliversInOrderAndSurvivesPeerRestart(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	col := newCollector()
	recv, err := NewGRPC(GRPCOptions{Self: 2, Peers: map[uint32]string{1: "127.0.0.1:1"}}, col.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	srv := grpc.NewServer()
	recv.Register(srv)
	go srv.Serve(lis)
	send, err := NewGRPC(GRPCOptions{Self: 1, Peers: map[uint32]string{2: addr}}, func(*peerpb.Envelope) {})
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
