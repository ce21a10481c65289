package transport

import (
	"container/heap"
	"fmt"
	"google.golang.org/protobuf/proto"
	"math/rand/v2"
	"sync"
	"time"

	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// WANOptions configures the emulated wide-area network.
type WANOptions struct {
	// Topology gives the RTT of every region pair; a message is delayed by RTT/2 of its
	// (sender region, receiver region) pair, intra-region RTT/2 within a region.
	Topology *topology.Topology
	// Jitter adds a uniformly random extra delay in [0, Jitter) to each message. Per-link FIFO
	// order is kept (a message never overtakes an earlier one on the same link), as TCP does.
	Jitter time.Duration
	// Seed seeds the jitter generator.
	Seed uint64
	// MaxInFlight bounds the messages queued in the network; beyond it Send drops.
	// Default 1,000,000.
	MaxInFlight int
	// NodeBandwidth, when > 0, is every node's network bandwidth in bytes per second, each
	// way: a message occupies its sender's uplink and then its receiver's downlink for its
	// size over the bandwidth, one message after another. Bulk transfers (snapshots of
	// moving replicas) then take the time a real link gives them, and delay the requests
	// queued behind them, so that the emulated nodes, not the host, limit data movement.
	NodeBandwidth float64
	// LinkBandwidth, when set, gives the bandwidth in bytes per second of the link from
	// region a to region b (a ≠ b; 0: unlimited). The messages between two regions share
	// that link one after another, each holding it for its size over the bandwidth: the
	// data-centre-pair links of the Canopus evaluation (thesis 4.6), where a link saturates
	// before a node does.
	LinkBandwidth func(a, b string) float64
	// CPU, when set, is every node's processor, which handles each message it receives
	// first come first served (CPUModel). It stands for the machines a benchmark emulates,
	// so that they saturate on modelled work rather than on sharing the host's cores.
	CPU *CPUModel
}

// CPUModel is the processing cost of one emulated node: a message received takes PerMessage
// plus PerKiB for each KiB of it, on one of Cores processors (the earliest free), in arrival
// order. The cost of sending a message is counted in its receiver's (a model of the pair).
// A client request takes PerRequest on the same processors (ChargeRequest): without it a
// protocol that serves reads locally (Canopus) would read for free, and only the host's
// cores would bound it.
type CPUModel struct {
	PerMessage time.Duration
	PerKiB     time.Duration
	PerRequest time.Duration
	Cores      int
}

// Validate checks the model.
func (m CPUModel) Validate() error {
	if m.PerMessage < 0 || m.PerKiB < 0 || m.PerRequest < 0 {
		return fmt.Errorf("transport: CPU cost per message %v, per KiB %v, per request %v: want ≥ 0", m.PerMessage, m.PerKiB, m.PerRequest)
	}
	if m.Cores < 1 || m.Cores > 1024 {
		return fmt.Errorf("transport: CPU with %d cores: want 1..1024", m.Cores)
	}
	return nil
}

// cost is the processing time of a message of size bytes.
func (m CPUModel) cost(size int) time.Duration {
	return m.PerMessage + time.Duration(float64(m.PerKiB)*float64(size)/1024)
}

// WAN is an in-process network that delays every message by the one-way latency of its
// region pair. One goroutine delivers messages in due order. Create endpoints with Attach.
type WAN struct {
	opts     WANOptions
	mu       sync.Mutex
	rng      *rand.Rand
	queue    deliveryHeap
	seq      uint64
	regions  map[uint32]string
	nodes    map[uint32]*wanEndpoint
	lastDue  map[[2]uint32]time.Time // per link: due time of the last message (FIFO)
	upFree   map[uint32]time.Time    // per node: when its uplink is free (NodeBandwidth)
	downFree map[uint32]time.Time    // per node: when its downlink is free
	linkFree map[[2]string]time.Time // per region pair: when the link is free (LinkBandwidth)
	cpuFree  map[uint32][]time.Time  // per node: when each of its cores is free (CPU)
	// processedLast is per link the delivery time of its last processed message (CPU).
	processedLast map[[2]uint32]time.Time
	// downLast is per link the time its last message left the receiver's downlink (a
	// link's messages stay in order).
	downLast map[[2]uint32]time.Time
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

type delivery struct {
	due time.Time
	seq uint64
	env *peerpb.Envelope
	// size is the message's size when a model needs it; processed says the receiver's CPU
	// has handled it (CPU): it is delivered when due.
	size      int
	processed bool
	// downTx, while > 0, is the time the message will hold its receiver's downlink: due is
	// its arrival there, and the downlink is booked at that moment, in arrival order.
	downTx time.Duration
}

type deliveryHeap []delivery

func (h deliveryHeap) Len() int { return len(h) }
func (h deliveryHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h deliveryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deliveryHeap) Push(x any)   { *h = append(*h, x.(delivery)) }
func (h *deliveryHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}

// NewWAN starts an emulated network.
func NewWAN(opts WANOptions) (*WAN, error) {
	if opts.Topology == nil {
		return nil, fmt.Errorf("transport: WAN needs a topology")
	}
	if opts.Jitter < 0 {
		return nil, fmt.Errorf("transport: WAN jitter %v is negative", opts.Jitter)
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 1_000_000
	}
	if opts.NodeBandwidth < 0 {
		return nil, fmt.Errorf("transport: WAN node bandwidth %v is negative", opts.NodeBandwidth)
	}
	if opts.CPU != nil {
		if err := opts.CPU.Validate(); err != nil {
			return nil, err
		}
	}
	if opts.LinkBandwidth != nil {
		for _, a := range opts.Topology.Regions {
			for _, b := range opts.Topology.Regions {
				if bw := opts.LinkBandwidth(a, b); a != b && (bw < 0 || bw != bw) {
					return nil, fmt.Errorf("transport: WAN link bandwidth %s→%s is %v: want ≥ 0", a, b, bw)
				}
			}
		}
	}
	w := &WAN{
		opts:          opts,
		rng:           rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		regions:       map[uint32]string{},
		nodes:         map[uint32]*wanEndpoint{},
		lastDue:       map[[2]uint32]time.Time{},
		upFree:        map[uint32]time.Time{},
		downFree:      map[uint32]time.Time{},
		linkFree:      map[[2]string]time.Time{},
		cpuFree:       map[uint32][]time.Time{},
		processedLast: map[[2]uint32]time.Time{},
		downLast:      map[[2]uint32]time.Time{},
		wake:          make(chan struct{}, 1),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	go w.run()
	return w, nil
}

// Attach registers node id in region and returns its endpoint; h receives its messages.
func (w *WAN) Attach(id uint32, region string, h Handler) (Transport, error) {
	if !w.opts.Topology.HasRegion(region) {
		return nil, fmt.Errorf("transport: region %q is not in topology %s", region, w.opts.Topology.Name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.nodes[id]; dup {
		return nil, fmt.Errorf("transport: node %d attached twice", id)
	}
	ep := &wanEndpoint{wan: w, id: id, handler: h}
	w.nodes[id] = ep
	w.regions[id] = region
	return ep, nil
}

// Detach removes node id: messages to it are dropped (a crashed process).
func (w *WAN) Detach(id uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.nodes, id)
}

// Close stops the delivery goroutine.
func (w *WAN) Close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *WAN) send(env *peerpb.Envelope) bool {
	now := time.Now()
	size := 0
	if w.opts.NodeBandwidth > 0 || w.opts.LinkBandwidth != nil || w.opts.CPU != nil {
		size = proto.Size(env)
	}
	w.mu.Lock()
	from, okFrom := w.regions[env.From]
	to, okTo := w.regions[env.To]
	if !okFrom || !okTo || len(w.queue) >= w.opts.MaxInFlight {
		w.mu.Unlock()
		return false
	}
	delay := w.opts.Topology.OneWay(from, to)
	if w.opts.Jitter > 0 {
		delay += time.Duration(w.rng.Int64N(int64(w.opts.Jitter)))
	}
	due := now.Add(delay)
	var downTx time.Duration
	if size > 0 && w.opts.NodeBandwidth > 0 {
		// The sender's uplink (FIFO in send order), the wire, then the receiver's downlink —
		// booked when the message arrives there (run), so that it queues behind the messages
		// that arrived before it, not behind those still on their way from farther away.
		tx := time.Duration(float64(size) / w.opts.NodeBandwidth * float64(time.Second))
		sent := maxTime(now, w.upFree[env.From]).Add(tx)
		w.upFree[env.From] = sent
		due = sent.Add(delay)
		downTx = tx
	}
	if w.opts.LinkBandwidth != nil && from != to {
		if bw := w.opts.LinkBandwidth(from, to); bw > 0 {
			// The region pair's link: it carries one message at a time, for its size over
			// the link's bandwidth, before the message travels the one-way delay.
			tx := time.Duration(float64(size) / bw * float64(time.Second))
			due = w.bookLink([2]string{from, to}, due.Add(-delay), delay, tx)
		}
	}
	link := [2]uint32{env.From, env.To}
	if last := w.lastDue[link]; due.Before(last) {
		due = last
	}
	w.lastDue[link] = due
	w.seq++
	heap.Push(&w.queue, delivery{due: due, seq: w.seq, env: env, size: size, processed: w.opts.CPU == nil, downTx: downTx})
	first := w.queue[0].seq == w.seq
	w.mu.Unlock()
	if first {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// bookLink books a message ready to leave at ready on a region pair's link for tx and
// returns when it arrives, delay after it has left the link.
func (w *WAN) bookLink(pair [2]string, ready time.Time, delay, tx time.Duration) time.Time {
	left := maxTime(ready, w.linkFree[pair]).Add(tx)
	w.linkFree[pair] = left
	return left.Add(delay)
}

// ChargeRequest books a client request's processing (CPUModel.PerRequest) on node's
// processors from now on and returns when it is done: the caller hands the request to the
// node then. Without a CPU model, or with no cost per request, it returns now.
func (w *WAN) ChargeRequest(node uint32) time.Time {
	now := time.Now()
	if w.opts.CPU == nil || w.opts.CPU.PerRequest == 0 {
		return now
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.process(node, now, w.opts.CPU.PerRequest)
}

// process books cost on node's earliest free core from arrival on and returns when it is done.
func (w *WAN) process(node uint32, arrival time.Time, cost time.Duration) time.Time {
	cores := w.cpuFree[node]
	if cores == nil {
		cores = make([]time.Time, w.opts.CPU.Cores)
		w.cpuFree[node] = cores
	}
	k := 0
	for i := range cores {
		if cores[i].Before(cores[k]) {
			k = i
		}
	}
	done := maxTime(arrival, cores[k]).Add(cost)
	cores[k] = done
	return done
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (w *WAN) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var batch []delivery
	for {
		w.mu.Lock()
		now := time.Now()
		batch = batch[:0]
		for len(w.queue) > 0 && !w.queue[0].due.After(now) && len(batch) < 4096 {
			d := heap.Pop(&w.queue).(delivery)
			if d.downTx > 0 {
				// Arrived at the receiver's downlink: it takes the link when the messages
				// that arrived before it have passed.
				d.due = maxTime(d.due, w.downFree[d.env.To]).Add(d.downTx)
				w.downFree[d.env.To] = d.due
				d.downTx = 0
				link := [2]uint32{d.env.From, d.env.To}
				d.due = maxTime(d.due, w.downLast[link])
				w.downLast[link] = d.due
				w.seq++
				d.seq = w.seq
				heap.Push(&w.queue, d)
				continue
			}
			if !d.processed {
				// Arrived: it waits for a core of its receiver, in arrival order, and is
				// delivered when that core has processed it.
				d.due = w.process(d.env.To, d.due, w.opts.CPU.cost(d.size))
				// Several cores may finish out of order: a link's messages stay in order.
				link := [2]uint32{d.env.From, d.env.To}
				d.due = maxTime(d.due, w.processedLast[link])
				w.processedLast[link] = d.due
				d.processed = true
				w.seq++
				d.seq = w.seq
				heap.Push(&w.queue, d)
				continue
			}
			batch = append(batch, d)
		}
		var wait time.Duration = time.Hour
		if len(w.queue) > 0 {
			wait = w.queue[0].due.Sub(now)
		}
		targets := make([]*wanEndpoint, len(batch))
		for i, d := range batch {
			targets[i] = w.nodes[d.env.To]
		}
		w.mu.Unlock()
		for i, d := range batch {
			if ep := targets[i]; ep != nil {
				ep.received.Add(1)
				ep.handler(d.env)
			}
		}
		if len(batch) == 4096 {
			continue // more may be due already
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-w.stop:
			return
		case <-w.wake:
		case <-timer.C:
		}
	}
}

type wanEndpoint struct {
	wan     *WAN
	id      uint32
	handler Handler
	counters
}

func (e *wanEndpoint) Send(env *peerpb.Envelope) bool {
	env.From = e.id
	if e.wan.send(env) {
		e.sent.Add(1)
		return true
	}
	e.dropped.Add(1)
	return false
}

func (e *wanEndpoint) Stats() Stats { return e.stats() }

func (e *wanEndpoint) Close() error {
	e.wan.Detach(e.id)
	return nil
}
