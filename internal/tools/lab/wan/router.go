package wan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Port is one host's packet device as the router sees it: packets the host sends come out
// of Read, packets for the host go into Write (a TUN device in the lab; a pipe in tests).
type Port interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	Close() error
}

// RouterOptions configure a router.
type RouterOptions struct {
	Policy *Policy
	// Ports are the hosts' devices, in the policy's host order.
	Ports []Port
	// MTU bounds the packets read (default 1500).
	MTU int
	// QueuePackets bounds the packets waiting for their release time, all links together
	// (default 262144, about 400 MB at the MTU); a packet arriving at a full queue is
	// dropped and counted.
	QueuePackets int
	Log          *slog.Logger
}

type packet struct {
	data     []byte
	release  time.Time
	buf      *[]byte // data's buffer, returned to the pool once written
	seq      uint64  // arrival order: ties in release time leave in arrival order
	src, dst int
	// With a fabric: the packet's path, the index of the link it is crossing, and the pin
	// that counts its delivery (nil for a hashed flow).
	path []int32
	hop  int
	pin  *pin
}

// linkStats are one direction's counters.
type linkStats struct {
	packets  atomic.Int64 // forwarded
	bytes    atomic.Int64
	verdicts [len(verdictNames)]atomic.Int64
	overflow atomic.Int64 // dropped: the link's queue was full
}

// Router moves packets between ports under a policy.
type Router struct {
	o     RouterOptions
	mu    sync.Mutex // guards policy
	stats [][]*linkStats
	// fabricStats count each fabric link's packets (sent on) and queue drops.
	fabricStats []*linkStats
	sched       *scheduler
	bufs        sync.Pool // *[]byte of MTU+64 bytes: packet copies without garbage
	// lateness is how long after its release time each packet was written (the router's
	// delay error), in microseconds.
	lateMu   sync.Mutex
	lateness *hdrhistogram.Histogram
	nonIPv4  atomic.Int64
	start    time.Time
	wg       sync.WaitGroup
	closed   atomic.Bool
	closeCh  chan struct{}
}

// NewRouter starts forwarding.
func NewRouter(o RouterOptions) (*Router, error) {
	if o.Policy == nil {
		return nil, errors.New("wan: router needs a policy")
	}
	n := len(o.Policy.Hosts())
	if len(o.Ports) != n {
		return nil, fmt.Errorf("wan: %d ports for %d hosts", len(o.Ports), n)
	}
	if o.MTU <= 0 {
		o.MTU = 1500
	}
	if o.QueuePackets <= 0 {
		o.QueuePackets = 262144
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &Router{o: o, stats: grid[*linkStats](n),
		lateness: hdrhistogram.New(1, 60_000_000, 3), start: time.Now(), closeCh: make(chan struct{})}
	for i := range n {
		for j := range n {
			r.stats[i][j] = &linkStats{}
		}
	}
	for range o.Policy.FabricLinks() {
		r.fabricStats = append(r.fabricStats, &linkStats{})
	}
	mtu := o.MTU
	r.bufs.New = func() any { b := make([]byte, 0, mtu+64); return &b }
	sched, err := newScheduler(o.QueuePackets)
	if err != nil {
		return nil, err
	}
	r.sched = sched
	r.wg.Add(1)
	go r.sendLoop()
	for i := range n {
		r.wg.Add(1)
		go r.readLoop(i)
	}
	return r, nil
}

// readLoop takes packets from host src and queues them on their links.
func (r *Router) readLoop(src int) {
	defer r.wg.Done()
	buf := make([]byte, r.o.MTU+64)
	for {
		n, err := r.o.Ports[src].Read(buf)
		if err != nil {
			if !r.closed.Load() {
				r.o.Log.Error("wan: read from host failed; its packets are lost from now on", "host", r.o.Policy.Hosts()[src].Name, "err", err)
			}
			return
		}
		now := time.Now()
		if n < 20 || buf[0]>>4 != 4 {
			r.nonIPv4.Add(1) // the lab is IPv4 only (IPv6 is disabled in its namespaces)
			continue
		}
		dstAddr := netip.AddrFrom4([4]byte(buf[16:20]))
		r.mu.Lock()
		dst, ok := r.o.Policy.IndexOf(dstAddr)
		var release time.Time
		var path []int32
		var pn *pin
		v := DropUnknown
		if ok && dst != src {
			if r.o.Policy.HasFabric() {
				path, pn, v = r.o.Policy.RouteFabric(src, dst, flowKeyOf(buf[:n]))
				if v == Forward {
					release, v = r.o.Policy.Hop(now, path[0], n)
					r.countHop(path[0], n, v)
				}
			} else {
				release, v = r.o.Policy.Route(now, src, dst, n)
			}
		}
		r.mu.Unlock()
		st := r.stats[src][src]
		if ok {
			st = r.stats[src][dst]
		}
		st.verdicts[v].Add(1)
		if v != Forward {
			continue
		}
		bp := r.bufs.Get().(*[]byte)
		data := append((*bp)[:0], buf[:n]...)
		if !r.sched.push(packet{data: data, buf: bp, release: release, src: src, dst: dst, path: path, pin: pn}) {
			st.overflow.Add(1)
			r.bufs.Put(bp)
		}
	}
}

// sendLoop writes packets to their destinations at their release times. It runs on one
// OS thread of its own, which sleeps in the kernel until the next release (see scheduler):
// the Go runtime's timers wake up to a millisecond late, which would be most of an
// intra-region RTT.
func (r *Router) sendLoop() {
	defer r.wg.Done()
	r.sched.run(r.closeCh, func(p packet, now time.Time) {
		if p.hop+1 < len(p.path) {
			// The packet reaches the next link of its fabric path at its release time (not
			// now, which is later by the router's lateness: errors do not add up per hop).
			p.hop++
			r.mu.Lock()
			release, v := r.o.Policy.Hop(p.release, p.path[p.hop], len(p.data))
			r.countHop(p.path[p.hop], len(p.data), v)
			r.mu.Unlock()
			p.release = release
			if v != Forward || !r.sched.push(p) {
				if v == Forward {
					r.stats[p.src][p.dst].overflow.Add(1)
				} else {
					r.stats[p.src][p.dst].verdicts[v].Add(1)
				}
				r.bufs.Put(p.buf)
			}
			return
		}
		_, err := r.o.Ports[p.dst].Write(p.data)
		r.bufs.Put(p.buf) // the device copied the packet
		if err != nil {
			// A host whose device went away (its namespace was deleted) just loses packets.
			return
		}
		if p.pin != nil {
			p.pin.delivered.Add(int64(len(p.data)))
		}
		st := r.stats[p.src][p.dst]
		st.packets.Add(1)
		st.bytes.Add(int64(len(p.data)))
		r.lateMu.Lock()
		_ = r.lateness.RecordValue(max(1, now.Sub(p.release).Microseconds()))
		r.lateMu.Unlock()
	}, r.o.Log)
}

// countHop counts a packet on fabric link l (called with r.mu held).
func (r *Router) countHop(l int32, size int, v Verdict) {
	st := r.fabricStats[l]
	if v != Forward {
		st.verdicts[v].Add(1)
		return
	}
	st.packets.Add(1)
	st.bytes.Add(int64(size))
}

// Do runs fn with the policy locked (control API changes).
func (r *Router) Do(fn func(p *Policy) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fn(r.o.Policy)
}

// Close stops the router and closes its ports.
func (r *Router) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	close(r.closeCh)
	r.sched.wake()
	var errs []error
	for _, p := range r.o.Ports {
		errs = append(errs, p.Close())
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		errs = append(errs, errors.New("wan: router loops did not stop within 5s"))
	}
	errs = append(errs, r.sched.close())
	return errors.Join(errs...)
}

// Wait blocks until ctx is done, then closes the router.
func (r *Router) Wait(ctx context.Context) error {
	<-ctx.Done()
	return r.Close()
}

// LinkCounters are one direction's counters in a status report.
type LinkCounters struct {
	From           string `json:"from"`
	To             string `json:"to"`
	Packets        int64  `json:"packets"`
	Bytes          int64  `json:"bytes"`
	DroppedCut     int64  `json:"dropped_cut,omitempty"`
	DroppedLoss    int64  `json:"dropped_loss,omitempty"`
	DroppedQueue   int64  `json:"dropped_queue,omitempty"`
	DroppedUnknown int64  `json:"dropped_unknown,omitempty"`
	Link           Link   `json:"link"`
	Cut            bool   `json:"cut,omitempty"`
}

// Status is the router's state and counters.
type Status struct {
	UptimeS float64        `json:"uptime_s"`
	Hosts   []Host         `json:"hosts"`
	Links   []LinkCounters `json:"links"`
	NonIPv4 int64          `json:"non_ipv4"`
	// Lateness of forwarded packets behind their release time (the delay error added by the
	// router), in microseconds.
	LatenessP50Us float64 `json:"lateness_p50_us"`
	LatenessP99Us float64 `json:"lateness_p99_us"`
	LatenessMaxUs float64 `json:"lateness_max_us"`
	Forwarded     int64   `json:"forwarded"`
	// FabricLinks are the fabric's links (with a fabric): packets and bytes sent on each,
	// packets dropped at its full queue — a switch port's counters.
	FabricLinks []FabricLinkCounters `json:"fabric_links,omitempty"`
}

// FabricLinkCounters are one fabric link's counters.
type FabricLinkCounters struct {
	FabricLink
	Packets      int64 `json:"packets"`
	Bytes        int64 `json:"bytes"`
	DroppedQueue int64 `json:"dropped_queue,omitempty"`
}

// Status reports every link with traffic, a cut or a non-default setting.
func (r *Router) Status() Status {
	hosts := r.o.Policy.Hosts()
	s := Status{UptimeS: time.Since(r.start).Seconds(), Hosts: hosts, NonIPv4: r.nonIPv4.Load()}
	r.mu.Lock()
	for i := range hosts {
		for j := range hosts {
			st := r.stats[i][j]
			lc := LinkCounters{From: hosts[i].Name, To: hosts[j].Name, Packets: st.packets.Load(), Bytes: st.bytes.Load(),
				DroppedCut: st.verdicts[DropCut].Load(), DroppedLoss: st.verdicts[DropLoss].Load(),
				DroppedQueue: st.verdicts[DropQueue].Load() + st.overflow.Load(), DroppedUnknown: st.verdicts[DropUnknown].Load(),
				Link: r.o.Policy.Link(i, j), Cut: r.o.Policy.Cut(i, j)}
			if i == j && lc.DroppedUnknown == 0 {
				continue
			}
			s.Forwarded += lc.Packets
			s.Links = append(s.Links, lc)
		}
	}
	for l, fl := range r.o.Policy.FabricLinks() {
		st := r.fabricStats[l]
		s.FabricLinks = append(s.FabricLinks, FabricLinkCounters{FabricLink: fl, Packets: st.packets.Load(),
			Bytes: st.bytes.Load(), DroppedQueue: st.verdicts[DropQueue].Load()})
	}
	r.mu.Unlock()
	r.lateMu.Lock()
	s.LatenessP50Us = float64(r.lateness.ValueAtQuantile(50))
	s.LatenessP99Us = float64(r.lateness.ValueAtQuantile(99))
	s.LatenessMaxUs = float64(r.lateness.Max())
	r.lateMu.Unlock()
	return s
}

// ResetLateness clears the lateness histogram (before a measurement).
func (r *Router) ResetLateness() {
	r.lateMu.Lock()
	r.lateness.Reset()
	r.lateMu.Unlock()
}

// fileOf is implemented by ports backed by a file (TUN devices).
var _ Port = (*os.File)(nil)
