package wan

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"net/netip"
	"sync/atomic"
	"time"
)

// A fabric is a multi-hop network inside the router: links shared by every flow whose path
// crosses them (a switch port's direction), and for each ordered pair of hosts its
// equal-cost paths. It is how the lab reproduces the Mayflower thesis's testbed with real
// TCP (thesis-mayflower-canopus-kawkab 3.4.1: hosts in racks in pods, oversubscribed upper
// tiers): a packet queues at each link of its path in turn, serialised at the link's rate,
// and a flow's path is chosen by a hash of its 5-tuple (ECMP) unless the flow is pinned to
// a path (what the thesis's Flowserver does through OpenFlow rules, 3.3).
//
// A policy with a fabric ignores the per-pair links (delay, bandwidth, loss); cuts still
// apply per host pair.

// FabricLink is one directed link of the fabric.
type FabricLink struct {
	Name          string  `json:"name"`
	BandwidthMbps float64 `json:"bandwidth_mbps"` // > 0: every fabric link is rate-limited
	DelayMs       float64 `json:"delay_ms"`       // propagation after serialisation
	// QueueMs bounds the link's queue: a packet that would wait longer than this to be
	// sent is dropped (tail drop, as a switch port's buffer does). 0: DefaultFabricQueue.
	QueueMs float64 `json:"queue_ms,omitempty"`
}

// DefaultFabricQueue is a fabric link's queue bound when none is given: deep enough for
// TCP to keep the link busy (several bandwidth-delay products at the lab's scaled rates),
// shallow enough that a congested link drops rather than builds a second of delay.
const DefaultFabricQueue = 50 * time.Millisecond

// Fabric is the links and, for each ordered host pair, its equal-cost paths as lists of
// link indexes.
type Fabric struct {
	Links []FabricLink `json:"links"`
	// Paths[src][dst] are the paths from host src to host dst (host indexes as in the
	// policy); empty for src == dst.
	Paths [][][][]int32 `json:"paths"`
}

// Bounds of a fabric (memory and per-packet work stay bounded).
const (
	MaxFabricLinks  = 65536
	MaxPathsPerPair = 64
	MaxPathLinks    = 16
	// MaxPins bounds the pinned flows (each is a table entry with a counter).
	MaxPins = 65536
)

// Validate checks the fabric against n hosts.
func (f *Fabric) Validate(n int) error {
	if len(f.Links) == 0 || len(f.Links) > MaxFabricLinks {
		return fmt.Errorf("wan: fabric of %d links: want 1..%d", len(f.Links), MaxFabricLinks)
	}
	names := map[string]bool{}
	for i, l := range f.Links {
		switch {
		case l.Name == "" || names[l.Name]:
			return fmt.Errorf("wan: fabric link %d: name %q empty or given twice", i, l.Name)
		case math.IsNaN(l.BandwidthMbps) || !(l.BandwidthMbps > 0) || l.BandwidthMbps > 1_000_000:
			return fmt.Errorf("wan: fabric link %s: bandwidth_mbps %v must be in (0, 1000000]", l.Name, l.BandwidthMbps)
		case math.IsNaN(l.DelayMs) || l.DelayMs < 0 || l.DelayMs > 10_000:
			return fmt.Errorf("wan: fabric link %s: delay_ms %v must be in [0, 10000]", l.Name, l.DelayMs)
		case math.IsNaN(l.QueueMs) || l.QueueMs < 0 || l.QueueMs > 10_000:
			return fmt.Errorf("wan: fabric link %s: queue_ms %v must be in [0, 10000] (0: default)", l.Name, l.QueueMs)
		}
		names[l.Name] = true
	}
	if len(f.Paths) != n {
		return fmt.Errorf("wan: fabric paths for %d hosts, the policy has %d", len(f.Paths), n)
	}
	for s, row := range f.Paths {
		if len(row) != n {
			return fmt.Errorf("wan: fabric paths from host %d: %d destinations, want %d", s, len(row), n)
		}
		for d, paths := range row {
			switch {
			case s == d && len(paths) != 0:
				return fmt.Errorf("wan: fabric paths from host %d to itself", s)
			case s != d && (len(paths) == 0 || len(paths) > MaxPathsPerPair):
				return fmt.Errorf("wan: fabric: %d paths from host %d to %d, want 1..%d", len(paths), s, d, MaxPathsPerPair)
			}
			for _, p := range paths {
				if len(p) == 0 || len(p) > MaxPathLinks {
					return fmt.Errorf("wan: fabric: a path from host %d to %d of %d links, want 1..%d", s, d, len(p), MaxPathLinks)
				}
				for _, l := range p {
					if l < 0 || int(l) >= len(f.Links) {
						return fmt.Errorf("wan: fabric: a path from host %d to %d names link %d of %d", s, d, l, len(f.Links))
					}
				}
			}
		}
	}
	return nil
}

// FlowKey is a flow's 5-tuple.
type FlowKey struct {
	Src, Dst         netip.Addr
	Proto            uint8 // 6 TCP, 17 UDP; 0 for other protocols (no ports)
	SrcPort, DstPort uint16
}

func (k FlowKey) String() string {
	return fmt.Sprintf("%d %v:%d>%v:%d", k.Proto, k.Src, k.SrcPort, k.Dst, k.DstPort)
}

// flowKeyOf reads the 5-tuple of an IPv4 packet (ports only of an unfragmented TCP or UDP
// packet's first fragment; others hash by addresses alone).
func flowKeyOf(pkt []byte) FlowKey {
	k := FlowKey{Src: netip.AddrFrom4([4]byte(pkt[12:16])), Dst: netip.AddrFrom4([4]byte(pkt[16:20]))}
	proto := pkt[9]
	ihl := int(pkt[0]&0x0f) * 4
	fragOffset := binary.BigEndian.Uint16(pkt[6:8]) & 0x1fff
	if (proto == 6 || proto == 17) && fragOffset == 0 && ihl >= 20 && len(pkt) >= ihl+4 {
		k.Proto = proto
		k.SrcPort = binary.BigEndian.Uint16(pkt[ihl:])
		k.DstPort = binary.BigEndian.Uint16(pkt[ihl+2:])
	}
	return k
}

// pin is a pinned flow: its path (an index into the pair's paths) and the bytes the router
// delivered for it (the flow counter a switch keeps per rule).
type pin struct {
	path      int
	delivered atomic.Int64 // added by the router's release thread
}

// fabricState is a policy's fabric and its per-link queues and counters.
type fabricState struct {
	Fabric
	busyUntil   []time.Time
	lastRelease []time.Time
	pins        map[FlowKey]*pin
	seed        uint64
}

// NewFabricPolicy returns a policy that carries packets over f.
func NewFabricPolicy(hosts []Host, f Fabric, seed uint64) (*Policy, error) {
	p, err := NewPolicy(hosts, func(Host, Host) Link { return Link{} }, seed)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(len(hosts)); err != nil {
		return nil, err
	}
	p.fabric = &fabricState{Fabric: f, busyUntil: make([]time.Time, len(f.Links)),
		lastRelease: make([]time.Time, len(f.Links)), pins: map[FlowKey]*pin{}, seed: seed}
	return p, nil
}

// HasFabric reports whether packets cross a fabric.
func (p *Policy) HasFabric() bool { return p.fabric != nil }

// FabricLinks returns the fabric's links (nil without one).
func (p *Policy) FabricLinks() []FabricLink {
	if p.fabric == nil {
		return nil
	}
	return p.fabric.Links
}

// Paths returns the fabric paths from host src to host dst.
func (p *Policy) Paths(src, dst int) [][]int32 { return p.fabric.Paths[src][dst] }

// Pin sends the flow key along path (an index into its host pair's paths); it replaces an
// earlier pin of the key and clears its counter.
func (p *Policy) Pin(key FlowKey, path int) error {
	if p.fabric == nil {
		return fmt.Errorf("wan: no fabric: flows cannot be pinned")
	}
	src, ok1 := p.index[key.Src]
	dst, ok2 := p.index[key.Dst]
	switch {
	case !ok1 || !ok2 || src == dst:
		return fmt.Errorf("wan: pin %v: source and destination must be two lab hosts", key)
	case key.Proto != 6 && key.Proto != 17:
		return fmt.Errorf("wan: pin %v: protocol %d; only TCP (6) and UDP (17) flows are pinned", key, key.Proto)
	case key.SrcPort == 0 || key.DstPort == 0:
		return fmt.Errorf("wan: pin %v: ports must be 1..65535", key)
	case path < 0 || path >= len(p.fabric.Paths[src][dst]):
		return fmt.Errorf("wan: pin %v: path %d of %d", key, path, len(p.fabric.Paths[src][dst]))
	}
	if _, ok := p.fabric.pins[key]; !ok && len(p.fabric.pins) >= MaxPins {
		return fmt.Errorf("wan: pin %v: %d flows pinned already (the bound); unpin finished flows", key, MaxPins)
	}
	p.fabric.pins[key] = &pin{path: path}
	return nil
}

// Unpin returns the flow to ECMP; false if it was not pinned.
func (p *Policy) Unpin(key FlowKey) bool {
	if p.fabric == nil {
		return false
	}
	_, ok := p.fabric.pins[key]
	delete(p.fabric.pins, key)
	return ok
}

// PinnedFlow is a pinned flow and the bytes delivered for it.
type PinnedFlow struct {
	Key            FlowKey `json:"key"`
	Path           int     `json:"path"`
	DeliveredBytes int64   `json:"delivered_bytes"`
}

// Pinned lists the pinned flows.
func (p *Policy) Pinned() []PinnedFlow {
	if p.fabric == nil {
		return nil
	}
	out := make([]PinnedFlow, 0, len(p.fabric.pins))
	for k, pn := range p.fabric.pins {
		out = append(out, PinnedFlow{Key: k, Path: pn.path, DeliveredBytes: pn.delivered.Load()})
	}
	return out
}

// ecmp picks one of n paths by a hash of the flow's 5-tuple: every packet of a flow takes
// the same path (no reordering), different flows spread.
func (f *fabricState) ecmp(k FlowKey, n int) int {
	h := fnv.New64a()
	var b [8 + 4 + 4 + 1 + 4]byte
	binary.LittleEndian.PutUint64(b[0:], f.seed)
	s, d := k.Src.As4(), k.Dst.As4()
	copy(b[8:], s[:])
	copy(b[12:], d[:])
	b[16] = k.Proto
	binary.BigEndian.PutUint16(b[17:], k.SrcPort)
	binary.BigEndian.PutUint16(b[19:], k.DstPort)
	_, _ = h.Write(b[:])
	return int(h.Sum64() % uint64(n))
}

// RouteFabric chooses the path of a packet from host src to host dst with 5-tuple key, and
// returns it with the pin that counts it (nil when hashed).
func (p *Policy) RouteFabric(src, dst int, key FlowKey) ([]int32, *pin, Verdict) {
	if p.cut[src][dst] {
		return nil, nil, DropCut
	}
	paths := p.fabric.Paths[src][dst]
	if pn, ok := p.fabric.pins[key]; ok {
		return paths[pn.path], pn, Forward
	}
	return paths[p.fabric.ecmp(key, len(paths))], nil, Forward
}

// Hop queues a packet of size bytes that reaches fabric link l at time at: it leaves the
// link after the packets before it are sent and its own serialisation, plus the link's
// delay. A packet that would wait longer than the link's queue bound is dropped. Hops must
// be called in the order packets reach each link (the router calls them at release times).
func (p *Policy) Hop(at time.Time, l int32, size int) (time.Time, Verdict) {
	f := p.fabric
	link := &f.Links[l]
	queue := DefaultFabricQueue
	if link.QueueMs > 0 {
		queue = time.Duration(link.QueueMs * float64(time.Millisecond))
	}
	start := at
	if b := f.busyUntil[l]; b.After(start) {
		start = b
	}
	if start.Sub(at) > queue {
		return time.Time{}, DropQueue
	}
	sent := start.Add(time.Duration(float64(size*8) / (link.BandwidthMbps * 1e6) * 1e9))
	f.busyUntil[l] = sent
	release := sent.Add(time.Duration(link.DelayMs * float64(time.Millisecond)))
	if last := f.lastRelease[l]; release.Before(last) {
		release = last
	}
	f.lastRelease[l] = release
	return release, Forward
}
