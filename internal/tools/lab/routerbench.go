//go:build linux

package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"meridian/internal/tools/lab/wan"
)

// RouterBenchOptions measure the WAN router (issue 7: accuracy and cost).
type RouterBenchOptions struct {
	// RatesPPS are the probe rates whose delay error is measured (default 1000, 20000).
	RatesPPS []int
	// DelayMs is the one-way delay configured on the probed link (default 50).
	DelayMs float64
	// Duration of each measurement (default 5s).
	Duration time.Duration
	// From and To are the probing hosts (default: the first two client hosts).
	From, To string
}

// AccuracyPoint is the delay error at one probe rate.
type AccuracyPoint struct {
	RatePPS      int     `json:"rate_pps"`
	Sent         int64   `json:"sent"`
	Received     int64   `json:"received"`
	ConfiguredMs float64 `json:"configured_ms"`
	// Error is the measured one-way delay minus the configured delay, in microseconds: the
	// router's lateness plus the kernel's TUN and socket path (both ends are in this
	// process, timed on one monotonic clock).
	ErrorP50Us float64 `json:"error_p50_us"`
	ErrorP99Us float64 `json:"error_p99_us"`
	ErrorMaxUs float64 `json:"error_max_us"`
	// RouterLatenessP50Us/P99Us are the router's own view: how late after its release
	// time it wrote each packet.
	RouterLatenessP50Us float64 `json:"router_lateness_p50_us"`
	RouterLatenessP99Us float64 `json:"router_lateness_p99_us"`
}

// CapacityResult is the highest rate the router forwards (no delay configured).
type CapacityResult struct {
	UDPOfferedPPS   float64 `json:"udp_offered_pps"`
	UDPForwardedPPS float64 `json:"udp_forwarded_pps"` // 64-byte datagrams received per second
	UDPLossPct      float64 `json:"udp_loss_pct"`
	TCPMbps         float64 `json:"tcp_mbps"` // one TCP stream's goodput
}

// RouterBenchResult is the whole measurement.
type RouterBenchResult struct {
	From     string          `json:"from"`
	To       string          `json:"to"`
	Accuracy []AccuracyPoint `json:"accuracy"`
	Capacity CapacityResult  `json:"capacity"`
}

// RouterBench measures the router of the lab up in dir: the delay error at each probe rate
// under a configured delay, then its capacity with no delay. It changes the probed links for
// the measurement and restores them after.
func RouterBench(ctx context.Context, dir string, o RouterBenchOptions, log io.Writer) (*RouterBenchResult, error) {
	st, err := LoadState(dir)
	if err != nil {
		return nil, err
	}
	if len(o.RatesPPS) == 0 {
		o.RatesPPS = []int{1000, 20000}
	}
	if o.DelayMs == 0 {
		o.DelayMs = 50
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	clients := st.Layout.ByRole(RoleClient)
	if o.From == "" && len(clients) >= 2 {
		o.From, o.To = clients[0].Name, clients[1].Name
	}
	from, ok1 := st.Layout.Host(o.From)
	to, ok2 := st.Layout.Host(o.To)
	if !ok1 || !ok2 || from.Name == to.Name {
		return nil, fmt.Errorf("lab: router bench needs two distinct hosts (from %q, to %q)", o.From, o.To)
	}
	rc := wan.NewClient(RouterSocket(dir))
	before, err := rc.Status(ctx)
	if err != nil {
		return nil, err
	}
	var orig wan.Link
	for _, l := range before.Links {
		if l.From == from.Name && l.To == to.Name {
			orig = l.Link
		}
	}
	setDelay := func(ms float64) error {
		return rc.SetLink(ctx, wan.LinkRequest{From: from.Name, To: to.Name, Symmetric: true, DelayMs: &ms, JitterMs: new(float64), LossPct: new(float64), BandwidthMbps: new(float64)})
	}
	defer func() {
		d := orig
		_ = rc.SetLink(context.Background(), wan.LinkRequest{From: from.Name, To: to.Name, Symmetric: true, DelayMs: &d.DelayMs, JitterMs: &d.JitterMs, LossPct: &d.LossPct, BandwidthMbps: &d.BandwidthMbps})
	}()
	res := &RouterBenchResult{From: from.Name, To: to.Name}
	if err := setDelay(o.DelayMs); err != nil {
		return nil, err
	}
	for _, rate := range o.RatesPPS {
		if err := rc.ResetLateness(ctx); err != nil {
			return nil, err
		}
		p, err := probe(ctx, from, to, rate, o.Duration, o.DelayMs)
		if err != nil {
			return nil, err
		}
		if s, err := rc.Status(ctx); err == nil {
			p.RouterLatenessP50Us, p.RouterLatenessP99Us = s.LatenessP50Us, s.LatenessP99Us
		}
		if log != nil {
			fmt.Fprintf(log, "%d pkt/s at %g ms: received %d/%d, error p50 %.0f µs p99 %.0f µs max %.0f µs (router lateness p50 %.0f p99 %.0f µs)\n",
				rate, o.DelayMs, p.Received, p.Sent, p.ErrorP50Us, p.ErrorP99Us, p.ErrorMaxUs, p.RouterLatenessP50Us, p.RouterLatenessP99Us)
		}
		res.Accuracy = append(res.Accuracy, *p)
	}
	if err := setDelay(0); err != nil {
		return nil, err
	}
	if res.Capacity, err = capacity(ctx, from, to, o.Duration); err != nil {
		return nil, err
	}
	if log != nil {
		c := res.Capacity
		fmt.Fprintf(log, "capacity: UDP offered %.0f pkt/s, forwarded %.0f pkt/s (%.1f%% lost); one TCP stream %.0f Mbit/s\n",
			c.UDPOfferedPPS, c.UDPForwardedPPS, c.UDPLossPct, c.TCPMbps)
	}
	return res, nil
}

const probePort = 47001

// probe sends timestamped datagrams from -> to at rate for d and returns the delay error.
func probe(ctx context.Context, from, to Host, rate int, d time.Duration, delayMs float64) (*AccuracyPoint, error) {
	rx, err := ListenPacketIn(to.Netns, "udp4", fmt.Sprintf("%s:%d", to.Addr, probePort))
	if err != nil {
		return nil, err
	}
	defer rx.Close()
	setBuffers(rx)
	tx, err := ListenPacketIn(from.Netns, "udp4", fmt.Sprintf("%s:0", from.Addr))
	if err != nil {
		return nil, err
	}
	defer tx.Close()
	base := time.Now()
	hist := hdrhistogram.New(1, 60_000_000, 3)
	var received atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		configured := time.Duration(delayMs * float64(time.Millisecond))
		for {
			_ = rx.SetReadDeadline(time.Now().Add(time.Duration(delayMs)*time.Millisecond + 2*time.Second))
			n, _, err := rx.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 8 {
				continue
			}
			sent := time.Duration(binary.LittleEndian.Uint64(buf[:8]))
			errUs := (time.Since(base) - sent - configured).Microseconds()
			_ = hist.RecordValue(max(1, errUs))
			received.Add(1)
		}
	}()
	dst := &net.UDPAddr{IP: net.IP(to.Addr.AsSlice()), Port: probePort}
	payload := make([]byte, 64)
	var sent int64
	// Send in 1 ms ticks: rate/1000 datagrams per tick keeps the rate without a sleep per
	// packet (a sleep cannot be shorter than the scheduler's granularity).
	perTick := max(1, rate/1000)
	interval := time.Duration(float64(time.Second) * float64(perTick) / float64(rate))
	next := time.Now()
	end := next.Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		for range perTick {
			binary.LittleEndian.PutUint64(payload[:8], uint64(time.Since(base)))
			if _, err := tx.WriteTo(payload, dst); err == nil {
				sent++
			}
		}
		next = next.Add(interval)
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
	}
	wg.Wait() // the receiver stops after its read deadline passes with nothing to read
	return &AccuracyPoint{RatePPS: rate, Sent: sent, Received: received.Load(), ConfiguredMs: delayMs,
		ErrorP50Us: float64(hist.ValueAtQuantile(50)), ErrorP99Us: float64(hist.ValueAtQuantile(99)), ErrorMaxUs: float64(hist.Max())}, nil
}

// capacity floods UDP datagrams for d, then streams TCP for d, both with no delay.
func capacity(ctx context.Context, from, to Host, d time.Duration) (CapacityResult, error) {
	var c CapacityResult
	rx, err := ListenPacketIn(to.Netns, "udp4", fmt.Sprintf("%s:%d", to.Addr, probePort))
	if err != nil {
		return c, err
	}
	tx, err := ListenPacketIn(from.Netns, "udp4", fmt.Sprintf("%s:0", from.Addr))
	if err != nil {
		rx.Close()
		return c, err
	}
	setBuffers(rx)
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			_ = rx.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := rx.ReadFrom(buf); err != nil {
				return
			}
			received.Add(1)
		}
	}()
	dst := &net.UDPAddr{IP: net.IP(to.Addr.AsSlice()), Port: probePort}
	payload := make([]byte, 64)
	var sent int64
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		if _, err := tx.WriteTo(payload, dst); err == nil {
			sent++
		}
	}
	elapsed := time.Since(start)
	<-done
	tx.Close()
	rx.Close()
	c.UDPOfferedPPS = float64(sent) / elapsed.Seconds()
	c.UDPForwardedPPS = float64(received.Load()) / elapsed.Seconds()
	if sent > 0 {
		c.UDPLossPct = 100 * float64(sent-received.Load()) / float64(sent)
	}

	lis, err := ListenIn(to.Netns, "tcp4", fmt.Sprintf("%s:%d", to.Addr, probePort))
	if err != nil {
		return c, err
	}
	defer lis.Close()
	var got atomic.Int64
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		buf := make([]byte, 256<<10)
		for {
			n, err := conn.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	conn, err := DialFrom(from.Netns)(ctx, "tcp4", lis.Addr().String())
	if err != nil {
		return c, err
	}
	chunk := make([]byte, 256<<10)
	start = time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write(chunk); err != nil && !errors.Is(err, net.ErrClosed) {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			break
		}
	}
	elapsed = time.Since(start)
	conn.Close()
	<-srvDone
	c.TCPMbps = float64(got.Load()) * 8 / elapsed.Seconds() / 1e6
	return c, nil
}

// setBuffers enlarges a probe socket's receive buffer, so that drops measure the router and
// not a receiver that fell behind for a moment.
func setBuffers(pc net.PacketConn) {
	if u, ok := pc.(*net.UDPConn); ok {
		_ = u.SetReadBuffer(16 << 20)
	}
}
