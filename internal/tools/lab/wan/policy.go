// Package wan is the lab's WAN router: it moves IPv4 packets between the lab hosts' TUN
// devices, holding each for the one-way delay of its (source region, destination region)
// pair, with jitter, loss, a bandwidth limit and cuts, all changeable at run time
// (DESIGN.md section 4: these machines have no tc netem, so the WAN is emulated in user
// space, where a packet delayed by RTT/2 each way gives real TCP the expected RTT).
//
// The decisions are a deterministic state machine, Policy, with time and randomness passed
// in; Router is the I/O around it (TUN reads and writes, timers, the control API).
package wan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"time"
)

// Host is one lab host as the router sees it.
type Host struct {
	Name   string     `json:"name"`
	Region string     `json:"region"`
	Addr   netip.Addr `json:"addr"`
}

// Link is the behaviour of packets from one host to another.
type Link struct {
	// DelayMs is the one-way delay (RTT/2 of the topology's region pair).
	DelayMs float64 `json:"delay_ms"`
	// JitterMs adds a uniform random delay in [0, JitterMs) per packet. Packets of one link
	// never overtake each other (as in netem with rate limiting): TCP would read reordering
	// as loss. The price: a packet waits for the latest release before it, so in a burst
	// (packets closer together than the jitter) delays gather near the top of the range
	// (testdata/jitter_loss.txt shows it).
	JitterMs float64 `json:"jitter_ms"`
	// LossPct drops that share of packets at random (0..100).
	LossPct float64 `json:"loss_pct"`
	// BandwidthMbps limits the link's rate (0: unlimited); packets queue behind each other
	// and are dropped once the queue holds more than MaxQueueDelay of traffic.
	BandwidthMbps float64 `json:"bandwidth_mbps"`
}

// Validate checks the link's fields.
func (l Link) Validate() error {
	switch {
	case math.IsNaN(l.DelayMs) || l.DelayMs < 0 || l.DelayMs > 10_000:
		return fmt.Errorf("wan: delay_ms %v must be in [0, 10000]", l.DelayMs)
	case math.IsNaN(l.JitterMs) || l.JitterMs < 0 || l.JitterMs > 10_000:
		return fmt.Errorf("wan: jitter_ms %v must be in [0, 10000]", l.JitterMs)
	case math.IsNaN(l.LossPct) || l.LossPct < 0 || l.LossPct > 100:
		return fmt.Errorf("wan: loss_pct %v must be in [0, 100]", l.LossPct)
	case math.IsNaN(l.BandwidthMbps) || l.BandwidthMbps < 0 || l.BandwidthMbps > 1_000_000:
		return fmt.Errorf("wan: bandwidth_mbps %v must be in [0, 1000000] (0: unlimited)", l.BandwidthMbps)
	}
	return nil
}

// Verdict is what the policy decided for one packet.
type Verdict uint8

const (
	Forward Verdict = iota
	DropCut
	DropLoss
	DropQueue   // the bandwidth-limited link's queue is full
	DropUnknown // the destination is not a lab host
)

var verdictNames = [...]string{Forward: "forwarded", DropCut: "dropped_cut", DropLoss: "dropped_loss", DropQueue: "dropped_queue", DropUnknown: "dropped_unknown"}

func (v Verdict) String() string { return verdictNames[v] }

// MaxQueueDelay bounds the queue of a bandwidth-limited link: a packet that would wait
// longer than this to be sent is dropped (a router's tail drop), so memory stays bounded.
const MaxQueueDelay = time.Second

// Policy decides, for each packet, whether it is forwarded and when it leaves the router.
// It is not safe for concurrent use; Router serialises calls.
type Policy struct {
	hosts []Host
	index map[netip.Addr]int
	links [][]Link // [src][dst]
	cut   [][]bool // [src][dst]: packets from src to dst are dropped
	// Invariants per link: busyUntil is when the link finishes sending what it has accepted
	// (bandwidth); lastRelease is the latest release time handed out, and releases never
	// decrease (no reordering).
	busyUntil   [][]time.Time
	lastRelease [][]time.Time
	rng         *rand.Rand
	fabric      *fabricState // nil: hosts are joined by per-pair links (fabric.go)
}

// NewPolicy returns a policy over hosts with every link set by linkOf(src, dst) (usually from
// the topology: RTT/2 between their regions). seed makes jitter and loss reproducible.
func NewPolicy(hosts []Host, linkOf func(src, dst Host) Link, seed uint64) (*Policy, error) {
	n := len(hosts)
	if n == 0 {
		return nil, fmt.Errorf("wan: no hosts")
	}
	p := &Policy{hosts: hosts, index: make(map[netip.Addr]int, n), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i, h := range hosts {
		if !h.Addr.Is4() {
			return nil, fmt.Errorf("wan: host %s: address %v is not IPv4", h.Name, h.Addr)
		}
		if _, dup := p.index[h.Addr]; dup {
			return nil, fmt.Errorf("wan: address %v given twice", h.Addr)
		}
		p.index[h.Addr] = i
	}
	p.links = grid[Link](n)
	p.cut = grid[bool](n)
	p.busyUntil = grid[time.Time](n)
	p.lastRelease = grid[time.Time](n)
	for i := range hosts {
		for j := range hosts {
			l := linkOf(hosts[i], hosts[j])
			if err := l.Validate(); err != nil {
				return nil, fmt.Errorf("wan: link %s -> %s: %w", hosts[i].Name, hosts[j].Name, err)
			}
			p.links[i][j] = l
		}
	}
	return p, nil
}

func grid[T any](n int) [][]T {
	g := make([][]T, n)
	for i := range g {
		g[i] = make([]T, n)
	}
	return g
}

// Hosts returns the hosts in index order.
func (p *Policy) Hosts() []Host { return p.hosts }

// IndexOf returns the host index of addr.
func (p *Policy) IndexOf(addr netip.Addr) (int, bool) {
	i, ok := p.index[addr]
	return i, ok
}

// Link returns the link from src to dst.
func (p *Policy) Link(src, dst int) Link { return p.links[src][dst] }

// Cut reports whether packets from src to dst are dropped.
func (p *Policy) Cut(src, dst int) bool { return p.cut[src][dst] }

// SetLink changes the link from src to dst.
func (p *Policy) SetLink(src, dst int, l Link) error {
	if err := l.Validate(); err != nil {
		return err
	}
	p.links[src][dst] = l
	return nil
}

// SetCut cuts (true) or heals (false) the direction src -> dst.
func (p *Policy) SetCut(src, dst int, cut bool) { p.cut[src][dst] = cut }

// Route decides the fate of a packet of size bytes from host src to host dst that arrived
// at now: Forward with the time it must leave the router, or a drop.
func (p *Policy) Route(now time.Time, src, dst, size int) (release time.Time, v Verdict) {
	if p.cut[src][dst] {
		return time.Time{}, DropCut
	}
	l := &p.links[src][dst]
	if l.LossPct > 0 && p.rng.Float64()*100 < l.LossPct {
		return time.Time{}, DropLoss
	}
	sent := now
	if l.BandwidthMbps > 0 {
		// The packet is sent after those before it (serialisation at the link's rate); its
		// propagation delay starts once it is on the wire.
		start := now
		if b := p.busyUntil[src][dst]; b.After(start) {
			start = b
		}
		if start.Sub(now) > MaxQueueDelay {
			return time.Time{}, DropQueue
		}
		txNanos := float64(size*8) / (l.BandwidthMbps * 1e6) * 1e9
		sent = start.Add(time.Duration(txNanos))
		p.busyUntil[src][dst] = sent
	}
	delay := l.DelayMs
	if l.JitterMs > 0 {
		delay += p.rng.Float64() * l.JitterMs
	}
	release = sent.Add(time.Duration(delay * float64(time.Millisecond)))
	if last := p.lastRelease[src][dst]; release.Before(last) {
		release = last // keep the link's order
	}
	p.lastRelease[src][dst] = release
	return release, Forward
}

// Select returns the host indexes a selector names: "*" (every host), a region, or a host
// name.
func (p *Policy) Select(sel string) ([]int, error) {
	var out []int
	for i, h := range p.hosts {
		if sel == "*" || h.Region == sel || h.Name == sel {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("wan: %q names no region or host of the lab", sel)
	}
	return out, nil
}
