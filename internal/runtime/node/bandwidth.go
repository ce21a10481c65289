package node

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"meridian/internal/bwman"
	"meridian/internal/engine"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// bandwidth is the node's BwMan (internal/bwman; docs/elasticity.md, "BwMan"): the sensors
// (bytes sent per class, the client workload, the client p99 per control period), the actuator
// (a token bucket on the system class: the messages of background jobs — replica-move and Raft
// snapshot chunks, anti-entropy — wait for their bytes before they leave), and, in auto mode,
// the controller that sets the bucket's rate every period.
type bandwidth struct {
	mode    bwman.Mode
	period  time.Duration
	limiter *rate.Limiter // nil: off
	// inbound paces the chunks this node asks peers for (engine.Config.PullBudget): the
	// node's downlink, which several sources at their own allowed rates would fill. Same
	// rate as the outbound bucket (links are symmetric). nil: off.
	inbound *rate.Limiter
	// chunkBytes is the snapshot chunk size (config.BwMan.ChunkBytes): the bucket's depth
	// is at least one chunk and its framing.
	chunkBytes int
	ctrl       *bwman.Controller

	userBytes, systemBytes atomic.Int64
	receivedBytes          atomic.Int64 // every class: the downlink's load
	reads, writes          atomic.Int64
	readBytes, writeBytes  atomic.Int64
	mu                     sync.Mutex
	latency                *hdrhistogram.Histogram // client requests of the period, µs

	systemRate atomic.Uint64 // float64 bits: the bucket's rate (bytes/s); +Inf: off
	last       bwman.Decision
	// ctx ends when the node stops (a system message waiting for the bucket gives up).
	ctx context.Context
}

// chunkFramingBytes is what a chunk's message carries besides its data (ids, offsets, the
// envelope), with room to spare.
const chunkFramingBytes = 4 << 10

// newBandwidth builds the node's arbiter from the configuration.
func newBandwidth(n *Node) (*bandwidth, error) {
	c := n.opts.Cluster.BwMan
	b := &bandwidth{mode: bwman.Mode(c.Mode), period: c.Period, latency: hdrhistogram.New(1, 60_000_000, 3), chunkBytes: c.ChunkBytes}
	if b.chunkBytes <= 0 {
		b.chunkBytes = engine.DefaultSystemChunkBytes // a configuration built without Validate
	}
	b.systemRate.Store(math.Float64bits(math.Inf(1)))
	ctx, cancel := context.WithCancel(context.Background())
	b.ctx = ctx
	go func() { <-n.stop; cancel() }()
	switch b.mode {
	case bwman.ModeStatic:
		b.limiter = rate.NewLimiter(rate.Limit(c.StaticBytesPerSec), b.burstFor(c.StaticBytesPerSec))
		b.inbound = rate.NewLimiter(rate.Limit(c.StaticBytesPerSec), b.burstFor(c.StaticBytesPerSec))
		b.systemRate.Store(math.Float64bits(c.StaticBytesPerSec))
	case bwman.ModeAuto:
		ctrl, err := bwman.New(bwman.Options{LinkBytesPerSec: c.LinkBytesPerSec, SLOP99: c.SLOP99, Policy: bwman.Policy(c.Policy)})
		if err != nil {
			return nil, err
		}
		b.ctrl = ctrl
		b.limiter = rate.NewLimiter(rate.Limit(c.LinkBytesPerSec), b.burstFor(c.LinkBytesPerSec))
		b.inbound = rate.NewLimiter(rate.Limit(c.LinkBytesPerSec), b.burstFor(c.LinkBytesPerSec))
		b.systemRate.Store(math.Float64bits(c.LinkBytesPerSec))
	}
	if n.opts.Registry != nil {
		n.opts.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meridian_bwman_system_rate_bytes",
			Help: "BwMan: the rate (bytes/s) the node's system traffic (replica moves, snapshots, anti-entropy) may use; +Inf: not shaped"},
			func() float64 { return math.Float64frombits(b.systemRate.Load()) }))
		n.opts.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meridian_bwman_system_bytes_total",
			Help: "BwMan: bytes the node sent in the system class"}, func() float64 { return float64(b.systemBytes.Load()) }))
	}
	return b, nil
}

// burstFor is the bucket's depth at a rate: 10 ms of it, and at least one chunk with its
// framing. The depth is what enters the node's network queue at once: deeper, and a client
// message may wait behind several chunks. A larger message (anti-entropy's) takes the whole
// bucket.
func (b *bandwidth) burstFor(bytesPerSec float64) int {
	return int(max(bytesPerSec/100, float64(b.chunkBytes+chunkFramingBytes)))
}

// pullBudget is the inbound bucket for the engines (nil when not shaping: a nil *rate.Limiter
// in the interface would not read as nil).
func (b *bandwidth) pullBudget() engine.PullBudget {
	if b == nil || b.inbound == nil {
		return nil
	}
	return b.inbound
}

// on reports whether traffic is measured and shaped.
func (b *bandwidth) on() bool { return b != nil && b.mode != bwman.ModeOff }

// sent counts a message the node sends, by class: BwMan's sensors. Off, nothing is counted
// (sizing every message on the send path is work no one would use).
func (b *bandwidth) sent(env *peerpb.Envelope) {
	if !b.on() {
		return
	}
	size := int64(proto.Size(env))
	if wire.IsSystemTraffic(env) {
		b.systemBytes.Add(size)
	} else {
		b.userBytes.Add(size)
	}
}

// received counts a message the node received (the downlink's load, for the guard).
func (b *bandwidth) received(env *peerpb.Envelope) {
	if !b.on() {
		return
	}
	b.receivedBytes.Add(int64(proto.Size(env)))
}

// request records a client request the node served.
func (b *bandwidth) request(req engine.Request, res engine.Result, d time.Duration) {
	if !b.on() {
		return
	}
	switch req.Op {
	case engine.OpGet, engine.OpScan, engine.OpTxnRead:
		b.reads.Add(1)
		n := int64(len(res.Value))
		for _, it := range res.Items {
			n += int64(len(it.Value))
		}
		b.readBytes.Add(n)
	case engine.OpPut, engine.OpDelete, engine.OpTxnCommit:
		b.writes.Add(1)
		b.writeBytes.Add(int64(len(req.Value)))
	default:
		return
	}
	b.mu.Lock()
	_ = b.latency.RecordValue(max(d.Microseconds(), 1))
	b.mu.Unlock()
}

// wait holds a job's message until the system class may send its bytes, or the node stops.
func (b *bandwidth) wait(env *peerpb.Envelope) error {
	if !b.on() || b.limiter == nil || !wire.IsSystemTraffic(env) {
		return nil
	}
	// The bucket's depth is at least one message; a rate lowered meanwhile may have made it
	// shallower: the message then takes the whole bucket.
	return b.limiter.WaitN(b.ctx, min(proto.Size(env), b.limiter.Burst()))
}

// loop runs the controller every period (auto mode).
func (n *Node) bandwidthLoop() {
	defer n.wg.Done()
	b := n.bw
	if b == nil || b.ctrl == nil {
		return
	}
	t := time.NewTicker(b.period)
	defer t.Stop()
	last := time.Now()
	var lastUser, lastSystem, lastReceived, lastReads, lastWrites, lastRB, lastWB int64
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			secs := now.Sub(last).Seconds()
			last = now
			delta := func(c *atomic.Int64, prev *int64) float64 {
				v := c.Load()
				d := v - *prev
				*prev = v
				return float64(d) / secs
			}
			s := bwman.Sample{UserBytesPerSec: delta(&b.userBytes, &lastUser), SystemBytesPerSec: delta(&b.systemBytes, &lastSystem),
				ReadsPerSec: delta(&b.reads, &lastReads), WritesPerSec: delta(&b.writes, &lastWrites),
				ReadBytesPerSec: delta(&b.readBytes, &lastRB), WriteBytesPerSec: delta(&b.writeBytes, &lastWB),
				ReceivedBytesPerSec: delta(&b.receivedBytes, &lastReceived),
				Recovering:          n.recovering()}
			b.mu.Lock()
			if b.latency.TotalCount() > 0 {
				s.P99 = time.Duration(b.latency.ValueAtQuantile(99)) * time.Microsecond
			}
			b.latency.Reset()
			b.mu.Unlock()
			d := b.ctrl.Step(s)
			for _, l := range []*rate.Limiter{b.limiter, b.inbound} {
				l.SetLimit(rate.Limit(d.SystemBytesPerSec))
				l.SetBurst(b.burstFor(d.SystemBytesPerSec))
			}
			b.systemRate.Store(math.Float64bits(d.SystemBytesPerSec))
			// A decision is logged when it changes the rate by a fifth or its reason.
			if prev := b.last; prev.Reason != d.Reason && (prev.SystemBytesPerSec == 0 || math.Abs(d.SystemBytesPerSec-prev.SystemBytesPerSec) > prev.SystemBytesPerSec/5) {
				n.log.Info("bwman decision", "system_rate_bytes", int64(d.SystemBytesPerSec), "user_need_bytes", int64(d.UserNeedBytesPerSec),
					"user_bytes", int64(s.UserBytesPerSec), "received_bytes", int64(s.ReceivedBytesPerSec),
					"p99", s.P99, "reason", d.Reason)
			}
			b.last = d
		}
	}
}

// recovering reports whether a partition this node sends data for is under-replicated: a
// move in its placement re-creates a replica whose node is gone (the move's source is not the
// replica it removes).
func (n *Node) recovering() bool {
	pm := n.pmap.Load()
	for _, ks := range pm.Keyspaces {
		for i := range ks.Partitions {
			if m := ks.Partitions[i].Move; m != nil && m.Source == n.self.ID && m.Source != m.Remove {
				return true
			}
		}
	}
	return false
}

// UserBytesSent is the bytes the node has sent in the user class (0 while BwMan is off).
func (n *Node) UserBytesSent() int64 { return n.bw.userBytes.Load() }

// SystemBytesSent is the bytes the node has sent in the system class.
func (n *Node) SystemBytesSent() int64 { return n.bw.systemBytes.Load() }

// SystemRate returns the rate (bytes/s) BwMan lets this node's system traffic use now (+Inf:
// not shaped): what a replica move into or out of it gets (the autoscaling experiments read it).
func (n *Node) SystemRate() float64 {
	if n.bw == nil {
		return math.Inf(1)
	}
	return math.Float64frombits(n.bw.systemRate.Load())
}
