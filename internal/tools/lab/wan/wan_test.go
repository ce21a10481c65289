package wan

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func hosts3() []Host {
	return []Host{
		{Name: "eu-1", Region: "europe", Addr: netip.MustParseAddr("10.77.1.1")},
		{Name: "eu-2", Region: "europe", Addr: netip.MustParseAddr("10.77.1.2")},
		{Name: "us-1", Region: "us", Addr: netip.MustParseAddr("10.77.2.1")},
	}
}

func regionDelay(src, dst Host) Link {
	if src.Region == dst.Region {
		return Link{DelayMs: 0.25}
	}
	return Link{DelayMs: 50}
}

func TestPolicyDelayAndOrder(t *testing.T) {
	p, err := NewPolicy(hosts3(), regionDelay, 1)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(100, 0)
	rel, v := p.Route(t0, 0, 2, 100)
	if v != Forward || rel.Sub(t0) != 50*time.Millisecond {
		t.Fatalf("europe->us: %v after %v, want forwarded after 50ms", v, rel.Sub(t0))
	}
	rel, _ = p.Route(t0, 0, 1, 100)
	if rel.Sub(t0) != 250*time.Microsecond {
		t.Fatalf("in-region delay %v", rel.Sub(t0))
	}
	// With jitter, releases of one link never go backwards (a fresh link: the one above
	// already holds a release 50ms out, which later packets may not overtake).
	if err := p.SetLink(1, 2, Link{DelayMs: 10, JitterMs: 20}); err != nil {
		t.Fatal(err)
	}
	var last time.Time
	jittered := false
	for i := range 1000 {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		rel, _ := p.Route(now, 1, 2, 100)
		if rel.Before(last) {
			t.Fatalf("packet %d released before its predecessor", i)
		}
		if d := rel.Sub(now); d < 10*time.Millisecond || d > 30*time.Millisecond+time.Duration(i)*100*time.Microsecond {
			t.Fatalf("packet %d delayed %v, outside [10ms, 30ms+queue]", i, d)
		}
		if rel.Sub(now) > 11*time.Millisecond {
			jittered = true
		}
		last = rel
	}
	if !jittered {
		t.Fatal("jitter never added delay")
	}
}

func TestPolicyLossCutBandwidth(t *testing.T) {
	p, _ := NewPolicy(hosts3(), regionDelay, 7)
	_ = p.SetLink(0, 2, Link{DelayMs: 1, LossPct: 30})
	t0 := time.Unix(100, 0)
	lost := 0
	for range 10000 {
		if _, v := p.Route(t0, 0, 2, 100); v == DropLoss {
			lost++
		}
	}
	if lost < 2500 || lost > 3500 {
		t.Fatalf("30%% loss dropped %d of 10000", lost)
	}
	p.SetCut(2, 0, true)
	if _, v := p.Route(t0, 2, 0, 100); v != DropCut {
		t.Fatalf("cut link: %v", v)
	}
	if _, v := p.Route(t0, 0, 1, 100); v != Forward {
		t.Fatalf("uncut link: %v", v)
	}
	// 8 Mbit/s: a 1000-byte packet takes 1ms on the wire; the 10th leaves 10ms after the 1st
	// started, and the queue is bounded by MaxQueueDelay.
	_ = p.SetLink(1, 2, Link{DelayMs: 0, BandwidthMbps: 8})
	var rel time.Time
	for range 10 {
		rel, _ = p.Route(t0, 1, 2, 1000)
	}
	if rel.Sub(t0) != 10*time.Millisecond {
		t.Fatalf("10 packets at 8 Mbit/s released after %v, want 10ms", rel.Sub(t0))
	}
	dropped := false
	for range 2000 {
		if _, v := p.Route(t0, 1, 2, 1000); v == DropQueue {
			dropped = true
			break
		}
	}
	if !dropped {
		t.Fatal("a queue over MaxQueueDelay must drop")
	}
}

func TestPolicyValidates(t *testing.T) {
	if _, err := NewPolicy(hosts3(), func(Host, Host) Link { return Link{LossPct: 101} }, 1); err == nil {
		t.Fatal("loss over 100% accepted")
	}
	h := hosts3()
	h[1].Addr = h[0].Addr
	if _, err := NewPolicy(h, regionDelay, 1); err == nil {
		t.Fatal("duplicate address accepted")
	}
	p, _ := NewPolicy(hosts3(), regionDelay, 1)
	if _, err := p.Select("mars"); err == nil {
		t.Fatal("unknown selector accepted")
	}
}

func TestPairsOf(t *testing.T) {
	p, _ := NewPolicy(hosts3(), regionDelay, 1)
	// Isolating europe cuts europe<->us both ways, not europe's hosts from each other.
	pairs, err := pairsOf(p, "europe", "*", false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]int]bool{{0, 2}: true, {2, 0}: true, {1, 2}: true, {2, 1}: true}
	if len(pairs) != len(want) {
		t.Fatalf("pairs %v, want %v", pairs, want)
	}
	for _, pr := range pairs {
		if !want[pr] {
			t.Fatalf("unexpected pair %v", pr)
		}
	}
	pairs, _ = pairsOf(p, "us-1", "eu-1", true)
	if len(pairs) != 1 || pairs[0] != [2]int{2, 0} {
		t.Fatalf("one-way pairs %v", pairs)
	}
	all, _ := pairsOf(p, "*", "*", false)
	if len(all) != 6 {
		t.Fatalf("every link: %d pairs, want 6", len(all))
	}
}

// chanPort is an in-memory Port: the test writes packets "sent by the host" into out and
// reads packets "delivered to the host" from in.
type chanPort struct {
	out  chan []byte
	in   chan []byte
	done chan struct{}
}

func newChanPort() *chanPort {
	return &chanPort{out: make(chan []byte, 64), in: make(chan []byte, 64), done: make(chan struct{})}
}

func (c *chanPort) Read(p []byte) (int, error) {
	select {
	case b := <-c.out:
		return copy(p, b), nil
	case <-c.done:
		return 0, errors.New("closed")
	}
}

func (c *chanPort) Write(p []byte) (int, error) {
	select {
	case c.in <- append([]byte(nil), p...):
		return len(p), nil
	case <-c.done:
		return 0, errors.New("closed")
	}
}

func (c *chanPort) Close() error { close(c.done); return nil }

func ipv4Packet(src, dst netip.Addr, payload string) []byte {
	b := make([]byte, 20+len(payload))
	b[0] = 0x45
	s, d := src.As4(), dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	copy(b[20:], payload)
	return b
}

func TestRouterForwardsCutsAndServesControl(t *testing.T) {
	hs := hosts3()
	p, _ := NewPolicy(hs, func(Host, Host) Link { return Link{DelayMs: 1} }, 1)
	ports := []*chanPort{newChanPort(), newChanPort(), newChanPort()}
	r, err := NewRouter(RouterOptions{Policy: p, Ports: []Port{ports[0], ports[1], ports[2]}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ports[0].out <- ipv4Packet(hs[0].Addr, hs[2].Addr, "hello")
	select {
	case got := <-ports[2].in:
		if !strings.HasSuffix(string(got), "hello") {
			t.Fatalf("delivered %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("packet not delivered")
	}
	srv := httptest.NewServer(Handler(r))
	defer srv.Close()
	ctx := context.Background()
	// The test server listens on TCP; the client posts to its URL.
	call := func(path string, in any) error {
		return (&Client{Socket: srv.URL, hc: srv.Client()}).callURL(ctx, srv.URL+path, in)
	}
	if err := call("/v1/cut", CutRequest{From: "europe", To: "us", OneWay: true}); err != nil {
		t.Fatal(err)
	}
	if err := call("/v1/link", LinkRequest{From: "*", To: "*", LossPct: ptr(150.0)}); err == nil {
		t.Fatal("a loss of 150% must be refused")
	}
	if err := call("/v1/cut", CutRequest{From: "mars", To: "*"}); err == nil {
		t.Fatal("an unknown region must be refused")
	}
	ports[0].out <- ipv4Packet(hs[0].Addr, hs[2].Addr, "cut")
	ports[2].out <- ipv4Packet(hs[2].Addr, hs[0].Addr, "back")
	select {
	case got := <-ports[0].in:
		if !strings.HasSuffix(string(got), "back") {
			t.Fatalf("delivered %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the uncut direction must still deliver")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := r.Status()
		var cut int64
		for _, l := range st.Links {
			cut += l.DroppedCut
		}
		if cut == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cut drops not counted: %+v", st.Links)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := call("/v1/heal", CutRequest{All: true}); err != nil {
		t.Fatal(err)
	}
	ports[0].out <- ipv4Packet(hs[0].Addr, hs[2].Addr, "healed")
	select {
	case got := <-ports[2].in:
		if !strings.HasSuffix(string(got), "healed") {
			t.Fatalf("delivered %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("healed link must deliver")
	}
}

func ptr[T any](v T) *T { return &v }
