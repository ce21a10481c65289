package wan

import (
	"context"
	"encoding/binary"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// fabric3 joins hosts3's three hosts by a small two-tier fabric: each host has an uplink
// and a downlink; traffic into host 2 crosses one of two 8 Mbps "spine" links (two
// equal-cost paths), traffic between hosts 0 and 1 a direct pair of links.
//
//	links: 0 h0>sw  1 h1>sw  2 h2>sw  3 sw>h0  4 sw>h1  5 sw>h2  6 spineA  7 spineB
func fabric3() Fabric {
	links := []FabricLink{
		{Name: "h0>sw", BandwidthMbps: 80}, {Name: "h1>sw", BandwidthMbps: 80}, {Name: "h2>sw", BandwidthMbps: 80},
		{Name: "sw>h0", BandwidthMbps: 80}, {Name: "sw>h1", BandwidthMbps: 80}, {Name: "sw>h2", BandwidthMbps: 80},
		{Name: "spineA", BandwidthMbps: 8, DelayMs: 1}, {Name: "spineB", BandwidthMbps: 8, DelayMs: 1},
	}
	paths := make([][][][]int32, 3)
	for s := range 3 {
		paths[s] = make([][][]int32, 3)
		for d := range 3 {
			switch {
			case s == d:
			case d == 2:
				paths[s][d] = [][]int32{{int32(s), 6, 5}, {int32(s), 7, 5}}
			default:
				paths[s][d] = [][]int32{{int32(s), int32(3 + d)}}
			}
		}
	}
	return Fabric{Links: links, Paths: paths}
}

func tcpPacket(src, dst netip.Addr, srcPort, dstPort uint16, size int) []byte {
	b := make([]byte, size)
	b[0] = 0x45
	b[9] = 6
	s, d := src.As4(), dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[20:], srcPort)
	binary.BigEndian.PutUint16(b[22:], dstPort)
	return b
}

func TestFlowKeyOf(t *testing.T) {
	hs := hosts3()
	pkt := tcpPacket(hs[0].Addr, hs[2].Addr, 40000, 7000, 60)
	want := FlowKey{Src: hs[0].Addr, Dst: hs[2].Addr, Proto: 6, SrcPort: 40000, DstPort: 7000}
	if got := flowKeyOf(pkt); got != want {
		t.Fatalf("key %v, want %v", got, want)
	}
	// A later fragment has no ports: it hashes by addresses alone.
	binary.BigEndian.PutUint16(pkt[6:8], 100)
	if got := flowKeyOf(pkt); got.Proto != 0 || got.SrcPort != 0 {
		t.Fatalf("fragment key %v: want no ports", got)
	}
}

// TestFabricSharedLinkSerialises: two flows from different hosts pinned to the same spine
// link queue behind each other there; pinned to different spines they do not.
func TestFabricSharedLinkSerialises(t *testing.T) {
	hs := hosts3()
	p, err := NewFabricPolicy(hs, fabric3(), 1)
	if err != nil {
		t.Fatal(err)
	}
	a := FlowKey{Src: hs[0].Addr, Dst: hs[2].Addr, Proto: 6, SrcPort: 1000, DstPort: 80}
	b := FlowKey{Src: hs[1].Addr, Dst: hs[2].Addr, Proto: 6, SrcPort: 1000, DstPort: 80}
	t0 := time.Unix(100, 0)
	// through routes a 1000-byte packet of key k at t0 hop by hop and returns its delivery.
	through := func(k FlowKey, src int) (time.Time, []int32) {
		path, _, v := p.RouteFabric(src, 2, k)
		if v != Forward {
			t.Fatalf("%v: %v", k, v)
		}
		at := t0
		for _, l := range path {
			at, v = p.Hop(at, l, 1000)
			if v != Forward {
				t.Fatalf("%v at link %d: %v", k, l, v)
			}
		}
		return at, path
	}
	for _, k := range []FlowKey{a, b} {
		if err := p.Pin(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Each host's 80 Mbps uplink takes 0.1 ms; spineA 1 ms to send plus 1 ms delay; the
	// second packet waits 1 ms behind the first on spineA.
	da, pa := through(a, 0)
	db, pb := through(b, 1)
	if pa[1] != 6 || pb[1] != 6 {
		t.Fatalf("pinned paths %v %v: want both over spineA", pa, pb)
	}
	if got := db.Sub(da); got != time.Millisecond {
		t.Fatalf("the second packet on a shared spine arrives %v after the first, want 1ms", got)
	}
	// Pinned apart (fresh policy: no queue left), they share only host 2's 80 Mbps downlink:
	// the second waits one 0.1 ms packet time there.
	p, _ = NewFabricPolicy(hs, fabric3(), 1)
	_ = p.Pin(a, 0)
	_ = p.Pin(b, 1)
	da, _ = through(a, 0)
	db, pb = through(b, 1)
	if pb[1] != 7 || db.Sub(da) != 100*time.Microsecond {
		t.Fatalf("on separate spines: arrivals %v and %v (b over link %d), want 0.1ms apart", da.Sub(t0), db.Sub(t0), pb[1])
	}
	// The queue bound: 60 ms of packets on one 8 Mbps spine overflow its 50 ms queue.
	p, _ = NewFabricPolicy(hs, fabric3(), 1)
	dropped := 0
	for range 60 {
		if _, v := p.Hop(t0, 6, 1000); v == DropQueue {
			dropped++
		}
	}
	if dropped == 0 || dropped > 10 {
		t.Fatalf("%d of 60 back-to-back packets dropped at a 50 ms queue of 1 ms each; want a few", dropped)
	}
}

// TestFabricECMPSpreadsAndPinsValidate: unpinned flows hash over both spines, each flow
// always to the same one; bad pins are refused.
func TestFabricECMPSpreadsAndPinsValidate(t *testing.T) {
	hs := hosts3()
	p, err := NewFabricPolicy(hs, fabric3(), 7)
	if err != nil {
		t.Fatal(err)
	}
	used := map[int32]int{}
	for port := range uint16(200) {
		k := FlowKey{Src: hs[0].Addr, Dst: hs[2].Addr, Proto: 6, SrcPort: 20000 + port, DstPort: 80}
		path, pn, _ := p.RouteFabric(0, 2, k)
		again, _, _ := p.RouteFabric(0, 2, k)
		if pn != nil || path[1] != again[1] {
			t.Fatalf("flow %v: hashed to %v then %v (pin %v)", k, path, again, pn)
		}
		used[path[1]]++
	}
	if used[6] < 60 || used[7] < 60 {
		t.Fatalf("200 flows hashed %d / %d over the two spines; want both well used", used[6], used[7])
	}
	good := FlowKey{Src: hs[0].Addr, Dst: hs[2].Addr, Proto: 6, SrcPort: 1, DstPort: 2}
	for _, bad := range []struct {
		k    FlowKey
		path int
		want string
	}{
		{good, 2, "path 2 of 2"},
		{FlowKey{Src: hs[0].Addr, Dst: hs[0].Addr, Proto: 6, SrcPort: 1, DstPort: 2}, 0, "two lab hosts"},
		{FlowKey{Src: hs[0].Addr, Dst: netip.MustParseAddr("10.9.9.9"), Proto: 6, SrcPort: 1, DstPort: 2}, 0, "two lab hosts"},
		{FlowKey{Src: hs[0].Addr, Dst: hs[2].Addr, Proto: 1}, 0, "only TCP"},
		{FlowKey{Src: hs[0].Addr, Dst: hs[2].Addr, Proto: 6, DstPort: 2}, 0, "ports"},
	} {
		if err := p.Pin(bad.k, bad.path); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("pin %v path %d: %v, want an error with %q", bad.k, bad.path, err, bad.want)
		}
	}
	if err := p.Pin(good, 1); err != nil {
		t.Fatal(err)
	}
	if path, pn, _ := p.RouteFabric(0, 2, good); pn == nil || path[1] != 7 {
		t.Fatalf("pinned to path 1: routed over %v (pin %v)", path, pn)
	}
	if !p.Unpin(good) || p.Unpin(good) {
		t.Fatal("unpin: first must find the pin, second not")
	}
}

func TestFabricValidate(t *testing.T) {
	hs := hosts3()
	for name, mutate := range map[string]func(f *Fabric){
		"no bandwidth":     func(f *Fabric) { f.Links[0].BandwidthMbps = 0 },
		"duplicate name":   func(f *Fabric) { f.Links[1].Name = f.Links[0].Name },
		"negative queue":   func(f *Fabric) { f.Links[2].QueueMs = -1 },
		"unknown link":     func(f *Fabric) { f.Paths[0][2][0] = []int32{0, 99} },
		"missing pair":     func(f *Fabric) { f.Paths[0][1] = nil },
		"self path":        func(f *Fabric) { f.Paths[1][1] = [][]int32{{1}} },
		"wrong host count": func(f *Fabric) { f.Paths = f.Paths[:2] },
	} {
		f := fabric3()
		mutate(&f)
		if _, err := NewFabricPolicy(hs, f, 1); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRouterFabricCountsAndPins: packets cross the fabric through a router, the links'
// counters and the pinned flow's delivered bytes count them, and the control API pins.
func TestRouterFabricCountsAndPins(t *testing.T) {
	hs := hosts3()
	p, err := NewFabricPolicy(hs, fabric3(), 1)
	if err != nil {
		t.Fatal(err)
	}
	ports := []*chanPort{newChanPort(), newChanPort(), newChanPort()}
	r, err := NewRouter(RouterOptions{Policy: p, Ports: []Port{ports[0], ports[1], ports[2]}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	srv := httptest.NewServer(Handler(r))
	defer srv.Close()
	c := &Client{Socket: srv.URL, hc: srv.Client()}
	ctx := context.Background()
	k := FlowKey{Src: hs[0].Addr, Dst: hs[2].Addr, Proto: 6, SrcPort: 5000, DstPort: 80}
	if err := c.callURL(ctx, srv.URL+"/v1/pin", PinRequest{Flows: []PinnedFlow{{Key: k, Path: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.callURL(ctx, srv.URL+"/v1/pin", PinRequest{Flows: []PinnedFlow{{Key: k, Path: 5}}}); err == nil {
		t.Fatal("a pin to path 5 of 2 must be refused")
	}
	for range 3 {
		ports[0].out <- tcpPacket(hs[0].Addr, hs[2].Addr, 5000, 80, 500)
	}
	for i := range 3 {
		select {
		case got := <-ports[2].in:
			if len(got) != 500 {
				t.Fatalf("packet %d: %d bytes", i, len(got))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("packet %d not delivered", i)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var delivered int64
		_ = r.Do(func(p *Policy) error {
			for _, f := range p.Pinned() {
				delivered += f.DeliveredBytes
			}
			return nil
		})
		st := r.Status()
		spineB := st.FabricLinks[7]
		if delivered == 1500 && spineB.Bytes == 1500 && st.FabricLinks[6].Bytes == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pinned flow delivered %d bytes, spineB sent %d, spineA %d; want 1500, 1500, 0", delivered, spineB.Bytes, st.FabricLinks[6].Bytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
