// Package node is the runtime that drives a node's protocol core (DESIGN.md section 4): one
// event-loop goroutine owns the core and feeds it client requests, peer messages and ticks;
// a committer goroutine makes the core's storage writes durable — many requests' writes in
// one synced Pebble batch (group commit) — and only then releases the messages and replies
// of the same Ready, in order; an anti-entropy worker runs storage scans off the loop.
//
// The same runtime serves production (gRPC transport), the lab, and the in-process emulated
// WAN of `meridian demo`; only the Transport differs. The simulator (issue 3) drives the cores
// itself on virtual time.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/elascass"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/metadata"
	"meridian/internal/placement"
	_ "meridian/internal/replication/all" // the runtime hosts every registered protocol
	"meridian/internal/runtime/transport"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Options configures a node.
type Options struct {
	Cluster  *config.Cluster
	NodeName string
	// Self is this node's identity when it is not in the configuration file: a node that
	// joined the running cluster (its ID came from the cluster metadata).
	Self *config.Node
	// LoadMeter, when set, measures the node's utilisation in [0, 1] for the placement
	// driver (an emulated node's service capacity); default the process's CPU.
	LoadMeter func() float64
	// ServiceMeter and HostMeter, when set, replace Hubbub-scale's sensors (an emulated
	// node: its request time at its service queue, its emulated host's steal and scheduler
	// latency); default: the requests' time at this node, and /proc and the Go runtime when
	// the node has a host of its own (LoadMeter unset).
	ServiceMeter func() time.Duration
	HostMeter    func() (stealShare float64, schedLatency time.Duration)
	// DataDir holds the node's Pebble store.
	DataDir string
	// FS is the filesystem for storage; default the OS filesystem.
	FS vfs.FS
	// Clock is the node's physical clock; default the system clock.
	Clock hlc.PhysicalClock
	// NewTransport builds the node's transport given the handler for incoming messages.
	NewTransport func(h transport.Handler) (transport.Transport, error)
	// Registry receives the node's metrics; default a new registry.
	Registry *prometheus.Registry
	// TickInterval is how often the core's timers are checked. Default 1ms.
	TickInterval time.Duration
	// InboxLen bounds the queue of requests and messages waiting for the event loop.
	// Default 65536.
	InboxLen int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// DiskReserveBytes is the disk space the store keeps free for itself (storage.Options);
	// 0 is the default (5% of the filesystem, within [16 MiB, 1 GiB]).
	DiskReserveBytes uint64
}

type inputKind uint8

const (
	inRequest inputKind = iota + 1
	inMessage
)

type input struct {
	kind inputKind
	req  engine.Request
	env  *peerpb.Envelope
}

// Node is a running Meridian node.
type Node struct {
	opts  Options
	self  config.Node
	store *storage.Engine
	host  *engine.Host
	// engines are the host's engines, published for the metrics and counters goroutines
	// (the host itself belongs to the event loop).
	engines atomic.Pointer[[]engine.Engine]
	tr      transport.Transport
	clock   hlc.PhysicalClock
	log     *slog.Logger
	m       *metrics
	gm      *guardMetrics
	bw      *bandwidth

	inbox    chan input
	commitCh chan engine.Ready
	jobCh    chan engine.Job
	// fastJobCh carries the unpaced jobs (snapshot transfers, a move's catch-up): their own
	// worker, so that they never wait behind a paced repair scan's pause.
	fastJobCh chan engine.Job
	stop      chan struct{}
	wg        sync.WaitGroup

	nextID  atomic.Uint64
	waiters sync.Map // request ID → chan engine.Result
	pmap    atomic.Pointer[placement.Map]
	origins sync.Map // keyspace name → "config" | "api"
	failed  atomic.Pointer[error]
	closed  atomic.Bool
	memb    atomic.Pointer[membership]
	// removed is closed when this node's record says it was removed (decommissioned).
	removed     chan struct{}
	removedOnce sync.Once
	logs        *rateLog
	// imports are the keyspaces of the configuration file (and of a layout-1 catalog) to
	// import into the cluster metadata; legacyCatalog: the data directory had one.
	imports       []config.Keyspace
	legacyCatalog bool
	moves         moveReports
	el            elastic
	// splitKeys caches the volume medians of this node's large replicas (measureReplicas,
	// on the elasticity loop's goroutine only).
	splitKeys map[elascass.PartKey]cachedSplitKey
	// exactSizes caches exact sizes of small replicas (replicaBytes; same goroutine).
	exactSizes map[elascass.PartKey]exactSize
	// streams is the table of stream records applied here (streams.go); streamHook is
	// told of their changes.
	streams    atomic.Pointer[streamTable]
	streamHook atomic.Pointer[func(StreamEvent)]
}

// Start opens the node's storage, builds its core and starts its goroutines.
func Start(opts Options) (*Node, error) {
	if opts.Cluster == nil {
		return nil, errors.New("node: no cluster configuration")
	}
	self, ok := opts.Cluster.Node(opts.NodeName)
	if opts.Self != nil {
		// A node that joined the running cluster (not in the configuration file).
		self, ok = *opts.Self, opts.Self.Name == opts.NodeName || opts.NodeName == ""
	}
	if !ok {
		return nil, fmt.Errorf("node: %q is not a node of cluster %s (a node that is not in the configuration file joins with --join)", opts.NodeName, opts.Cluster.Name)
	}
	if opts.Clock == nil {
		opts.Clock = hlc.NewSystemClock(0)
	}
	if opts.TickInterval <= 0 {
		opts.TickInterval = time.Millisecond
	}
	if opts.InboxLen <= 0 {
		opts.InboxLen = 65536
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.NewTransport == nil {
		return nil, errors.New("node: no transport")
	}
	store, err := storage.Open(opts.DataDir, storage.Options{FS: opts.FS, DiskReserveBytes: opts.DiskReserveBytes})
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("node %s: data directory %s is locked by another process (is a server for this node still running?)", self.Name, opts.DataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", self.Name, err)
	}
	if err := checkIdentity(store, opts.Cluster, self); err != nil {
		store.Close()
		return nil, err
	}
	n := &Node{
		opts:      opts,
		self:      self,
		store:     store,
		clock:     opts.Clock,
		log:       opts.Logger.With("node", self.Name),
		inbox:     make(chan input, opts.InboxLen),
		commitCh:  make(chan engine.Ready, 1024),
		jobCh:     make(chan engine.Job, 4096),
		fastJobCh: make(chan engine.Job, 4096),
		stop:      make(chan struct{}),
		removed:   make(chan struct{}),
		logs:      newRateLog(time.Minute),
	}
	n.memb.Store(newMembership(opts.Cluster.Nodes, nil))
	n.el.peers, n.el.hits, n.el.lastCount, n.el.started = map[uint32]peerStats{}, map[elascass.PartKey]float64{}, map[elascass.PartKey]int64{}, opts.Clock.Now()
	n.splitKeys = map[elascass.PartKey]cachedSplitKey{}
	n.exactSizes = map[elascass.PartKey]exactSize{}
	// Request IDs start from the time, so this run's IDs are above any an earlier run of
	// the node used: a late message about an earlier run's request (a peer's reply) cannot
	// match one of this run's. Below 2^62: the engines keep the top bits for their own IDs.
	n.nextID.Store(uint64(time.Now().UnixNano()) & (1<<62 - 1))
	pm, err := n.loadPlacement()
	if err != nil {
		store.Close()
		return nil, err
	}
	n.pmap.Store(pm)
	n.m = newMetrics(opts.Registry, n)
	if n.bw, err = newBandwidth(n); err != nil {
		store.Close()
		return nil, fmt.Errorf("node %s: bwman: %w", self.Name, err)
	}
	n.host = engine.NewHost(engine.Config{
		NodeID:              self.ID,
		Nodes:               opts.Cluster.Nodes,
		Topology:            opts.Cluster.Topology,
		Limits:              opts.Cluster.Limits,
		AntiEntropyInterval: opts.Cluster.AntiEntropy.Interval,
		MaxClockOffset:      opts.Cluster.Clock.MaxOffset,
		// Versions further ahead are refused at the door (peerCheck); never adopt them.
		MaxClockSkew:     opts.Cluster.Clock.MaxFutureVersion(),
		MaxFutureVersion: opts.Cluster.Clock.MaxFutureVersion(),
		RandSeed:         uint64(time.Now().UnixNano()) ^ uint64(self.ID)<<32,
		MetadataVoters:   opts.Cluster.Metadata.Voters,
		SystemChunkBytes: opts.Cluster.BwMan.ChunkBytes,
		Network:          opts.Cluster.Network,
		PullBudget:       n.bw.pullBudget(),
	}, store, n.engineCreated)
	n.host.SetPlacement(pm)
	n.gm = newGuardMetrics(opts.Registry, n)
	tr, err := opts.NewTransport(n.deliver)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("node %s: transport: %w", self.Name, err)
	}
	n.tr = tr
	// The membership the metadata had applied here (loadPlacement read it): peers that
	// joined are known to the transport before anything is sent.
	if m := n.memb.Load(); len(m.records) > 0 {
		n.pmap.Store(n.setMembership(m, n.pmap.Load()))
		n.host.SetPlacement(n.pmap.Load())
	}
	n.wg.Add(8)
	go n.bandwidthLoop()
	go n.elasticLoop()
	go n.loop()
	go n.committer()
	go n.jobWorker(n.jobCh)
	go n.jobWorker(n.fastJobCh)
	go n.diskWatcher()
	go n.importCatalog()
	n.log.Info("node started", "region", self.Region, "data_dir", opts.DataDir)
	return n, nil
}

// checkIdentity refuses to open a data directory that belongs to another node or cluster:
// serving it would silently mix two replicas' data.
func checkIdentity(e *storage.Engine, c *config.Cluster, self config.Node) error {
	want := fmt.Sprintf("%s/%s/%d", c.Name, self.Name, self.ID)
	got, found, err := e.GetMeta("identity")
	if err != nil {
		return fmt.Errorf("node %s: read identity: %w", self.Name, err)
	}
	if found && string(got) != want {
		return fmt.Errorf("node %s: data directory belongs to %q, not %q (cluster/node/id)", self.Name, got, want)
	}
	if !found {
		if err := e.PutMeta("identity", []byte(want), true); err != nil {
			return fmt.Errorf("node %s: write identity: %w", self.Name, err)
		}
	}
	return nil
}

// Name returns the node's name.
func (n *Node) Name() string { return n.self.Name }

// ID returns the node's ID.
func (n *Node) ID() uint32 { return n.self.ID }

// Region returns the node's region.
func (n *Node) Region() string { return n.self.Region }

// Cluster returns the cluster configuration.
func (n *Node) Cluster() *config.Cluster { return n.opts.Cluster }

// Placement returns the current placement map.
func (n *Node) Placement() *placement.Map { return n.pmap.Load() }

// Engine exposes the storage engine (tests, benchmarks).
func (n *Node) Engine() *storage.Engine { return n.store }

// Clock returns the node's physical clock (with its configured offset).
func (n *Node) Clock() hlc.PhysicalClock { return n.clock }

// engineCreated registers a new engine's metrics and publishes it (the host calls it on the
// event loop, or in Start before the loop runs).
func (n *Node) engineCreated(p engine.Protocol, e engine.Engine) {
	if p.Metrics != nil {
		p.Metrics(n.opts.Registry, e)
	}
	var all []engine.Engine
	if old := n.engines.Load(); old != nil {
		all = append(all, *old...)
	}
	all = append(all, e)
	n.engines.Store(&all)
}

// ProtocolCounters sums the counters of the node's engines by name (engine.Counted;
// read-only use: benchmarks and reproduction harnesses).
func (n *Node) ProtocolCounters() map[string]int64 {
	out := map[string]int64{}
	if es := n.engines.Load(); es != nil {
		for _, e := range *es {
			if c, ok := e.(engine.Counted); ok {
				for k, v := range c.CounterSnapshot() {
					out[k] += v
				}
			}
		}
	}
	return out
}

// peerAlive reports whether any of the node's engines that run a failure detector has heard
// from node recently (no such engine: true). On the event loop only.
func (n *Node) peerAlive(node uint32) bool {
	return n.anyAlive(node, func(e engine.Engine) (bool, bool) {
		a, ok := e.(interface{ Alive(uint32) bool })
		return ok && a.Alive(node), ok
	})
}

// peerAliveConcurrent is peerAlive as of the failure detectors' last changes, safe off the
// event loop (the metrics scrape).
func (n *Node) peerAliveConcurrent(node uint32) bool {
	return n.anyAlive(node, func(e engine.Engine) (bool, bool) {
		a, ok := e.(interface{ AliveConcurrent(uint32) bool })
		return ok && a.AliveConcurrent(node), ok
	})
}

// anyAlive asks each engine with a failure detector (alive: its answer, tracked: it has one).
func (n *Node) anyAlive(node uint32, ask func(engine.Engine) (alive, tracked bool)) bool {
	es := n.engines.Load()
	if es == nil {
		return true
	}
	tracked := false
	for _, e := range *es {
		alive, has := ask(e)
		tracked = tracked || has
		if alive {
			return true
		}
	}
	return !tracked
}

// Registry returns the node's metrics registry.
func (n *Node) Registry() *prometheus.Registry { return n.opts.Registry }

// deliver is the transport handler: it validates a peer message (peerCheck), refuses the
// replicated writes a full disk cannot take, and queues the rest for the loop, dropping a
// message when the inbox is full (overload looks like message loss, which the protocols
// tolerate).
func (n *Node) deliver(env *peerpb.Envelope) {
	if !n.admitPeer(env) || n.handleNodeStats(env) {
		return
	}
	select {
	case n.inbox <- input{kind: inMessage, env: env}:
		n.m.received(env)
		n.bw.received(env)
	default:
		n.m.dropped.WithLabelValues("inbox_full").Inc()
	}
}

// Do coordinates one validated request and waits for its result or ctx.
func (n *Node) Do(ctx context.Context, req engine.Request) engine.Result {
	if errp := n.failed.Load(); errp != nil {
		return engine.Result{Op: req.Op, Err: errs.New(errs.Internal, "node %s stopped serving after a storage failure: %v", n.self.Name, *errp)}
	}
	if n.closed.Load() {
		return engine.Result{Op: req.Op, Err: errs.New(errs.Unavailable, "node %s is shutting down", n.self.Name)}
	}
	if err := n.refuseWriteOnFullDisk(req); err != nil {
		res := engine.Result{Op: req.Op, Err: err}
		n.m.observe(req, res, 0)
		return res
	}
	switch req.Op {
	case engine.OpGet, engine.OpPut, engine.OpDelete:
		n.countRequest(req.Keyspace, req.Key)
	case engine.OpScan:
		n.countRequest(req.Keyspace, req.Start)
	}
	start := time.Now()
	req.ID = n.nextID.Add(1)
	ch := make(chan engine.Result, 1)
	n.waiters.Store(req.ID, ch)
	select {
	case n.inbox <- input{kind: inRequest, req: req}:
	default:
		n.waiters.Delete(req.ID)
		res := engine.Result{Op: req.Op, Err: errs.New(errs.Overloaded, "node %s: request queue full (%d)", n.self.Name, cap(n.inbox))}
		n.m.observe(req, res, time.Since(start))
		return res
	}
	var res engine.Result
	select {
	case res = <-ch:
	case <-ctx.Done():
		n.waiters.Delete(req.ID)
		res = engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Timeout, "request cancelled by the client: %v", ctx.Err())}
	case <-n.stop:
		n.waiters.Delete(req.ID)
		res = engine.Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.Unavailable, "node %s shut down", n.self.Name)}
	}
	d := time.Since(start)
	n.m.observe(req, res, d)
	n.bw.request(req, res, d)
	if res.Err == nil {
		n.el.service.observe(d)
	}
	return res
}

// loop is the event loop: the only goroutine that touches the core.
func (n *Node) loop() {
	defer n.wg.Done()
	ticker := time.NewTicker(n.opts.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-n.stop:
			return
		case in := <-n.inbox:
			n.handle(in)
			// Drain what else is waiting, bounded, so one Ready (one synced batch) covers many
			// requests: this is where group commit gets its batches.
			for i := 0; i < 4096; i++ {
				select {
				case in := <-n.inbox:
					n.handle(in)
					continue
				default:
				}
				break
			}
		case <-ticker.C:
			n.syncPlacement()
			n.host.Tick(n.clock.Now())
		}
		if n.host.HasReady() {
			rd := n.host.Ready()
			select {
			case n.commitCh <- rd:
			case <-n.stop:
				return
			}
		}
	}
}

func (n *Node) handle(in input) {
	n.syncPlacement()
	now := n.clock.Now()
	switch in.kind {
	case inRequest:
		n.host.Propose(now, in.req)
	case inMessage:
		n.host.Step(now, in.env)
	}
}

// syncPlacement hands the core the placement map the committer last installed
// (watchCatalog), before the core sees any input validated against it.
func (n *Node) syncPlacement() {
	if pm := n.pmap.Load(); pm != n.host.Placement() {
		n.host.SetPlacement(pm)
	}
}

// committer makes each Ready's writes durable and then releases its output, in order. It
// merges every Ready that is already waiting into one synced batch (group commit).
func (n *Node) committer() {
	defer n.wg.Done()
	var batch []engine.Ready
	var writes []storage.Record
	var raw []storage.RawOp
	for {
		batch = batch[:0]
		select {
		case <-n.stop:
			return
		case rd := <-n.commitCh:
			batch = append(batch, rd)
		}
		for len(batch) < 256 {
			select {
			case rd := <-n.commitCh:
				batch = append(batch, rd)
				continue
			default:
			}
			break
		}
		// Readies that replace a partition's data (Ingests) split the batch: everything
		// before such a Ready, and that Ready's own writes, are made durable first, then the
		// partition is replaced, then the rest follows.
		n.expireLeaving()
		// readsRun: the Readies whose reads have run. An Ingest may delete or replace a range
		// (a replica that left its group), so the reads of every earlier Ready run before it
		// (their writes are durable by then): a read handed out before the deletion must not
		// find the range empty.
		readsRun := 0
		for start := 0; start < len(batch) && n.failed.Load() == nil; {
			end := start
			for end < len(batch) && len(batch[end].Ingests) == 0 {
				end++
			}
			if end < len(batch) {
				end++
			}
			seg := batch[start:end]
			start = end
			writes, raw = writes[:0], raw[:0]
			for _, rd := range seg {
				writes = append(writes, rd.Writes...)
				raw = append(raw, rd.Raw...)
			}
			writes = n.admitWrites(writes)
			if len(writes) > 0 || len(raw) > 0 {
				began := time.Now()
				if err := n.store.ApplyBatch(writes, raw, true); err != nil {
					n.storageFailed(batch, err)
					break
				}
				n.m.commit(len(writes)+len(raw), time.Since(began))
				n.watchCatalog(writes)
			}
			if len(seg[len(seg)-1].Ingests) > 0 {
				n.runReads(batch[readsRun : end-1])
				readsRun = end - 1
			}
			for _, in := range seg[len(seg)-1].Ingests {
				if err := in.Perform(n.store); err != nil {
					n.storageFailed(batch, err)
					break
				}
				switch {
				case in.Span.Keyspace == metadata.Keyspace:
					n.reloadCatalog()
				case in.Merge:
					n.log.Debug("snapshot merged into a new replica", "span", in.Span.String())
				case in.File == "":
					n.log.Debug("range deleted (this node no longer holds it)", "span", in.Span.String())
				default:
					n.log.Info("partition replica replaced by a snapshot", "span", in.Span.String())
				}
			}
		}
		if n.failed.Load() != nil {
			continue
		}
		for i, rd := range batch {
			n.handleReports(rd.Reports)
			for _, env := range rd.Messages {
				n.m.sent(env)
				if !n.send(env) {
					n.m.dropped.WithLabelValues("transport").Inc()
				}
			}
			for _, r := range rd.Replies {
				n.complete(r)
			}
			if i >= readsRun {
				n.runReads(batch[i : i+1])
			}
			for _, j := range rd.Jobs {
				select {
				case n.jobQueue(j) <- j:
				default:
					n.m.dropped.WithLabelValues("ae_job_queue_full").Inc()
				}
			}
		}
	}
}

// runReads serves the reads of readies against storage (after their writes are durable).
func (n *Node) runReads(readies []engine.Ready) {
	for _, rd := range readies {
		for _, r := range rd.Reads {
			res := engine.RunRead(r, n.store, n.clock.Now())
			if res.Forward != nil {
				n.release(res.Forward)
				continue
			}
			n.complete(res)
		}
	}
}

// release sends a message an engine produced off the event loop (a read served for another
// node, a part of a scan): to its node, or back into this node's inbox when it is addressed
// to this node (dropped, like a lost message, if the inbox is full: the committer must never
// block on the loop, which may be blocked on the committer).
func (n *Node) release(env *peerpb.Envelope) {
	if env.To == n.self.ID {
		select {
		case n.inbox <- input{kind: inMessage, env: env}:
		default:
			n.m.dropped.WithLabelValues("inbox_full").Inc()
		}
		return
	}
	n.m.sent(env)
	if !n.send(env) {
		n.m.dropped.WithLabelValues("transport").Inc()
	}
}

// send stamps a message with this node's replicas version of the keyspace it is about
// (the receiver drops it if its own differs: admitPeer) and hands it to the transport.
// Splits and merges keep the replicas version: nodes on either side of one keep talking.
func (n *Node) send(env *peerpb.Envelope) bool {
	if name, ok := wire.KeyspaceOf(env); ok {
		if ks, ok := n.pmap.Load().Keyspace(name); ok {
			env.PlacementVersion = ks.ReplicasVersion
		}
	}
	n.bw.sent(env)
	return n.tr.Send(env)
}

// storageFailed stops the node releasing anything after a failed write or snapshot install:
// durability can no longer be promised (crash-stop). The batch's clients get the error.
func (n *Node) storageFailed(batch []engine.Ready, err error) {
	n.log.Error("storage apply failed; node stops serving", "err", err)
	n.failed.Store(&err)
	for _, rd := range batch {
		for _, r := range rd.Replies {
			n.complete(engine.Result{ID: r.ID, Op: r.Op, Err: errs.New(errs.Internal, "storage failure: %v", err)})
		}
		for _, r := range rd.Reads {
			n.complete(engine.Result{ID: r.ID, Op: r.Op, Err: errs.New(errs.Internal, "storage failure: %v", err)})
		}
	}
}

func (n *Node) complete(r engine.Result) {
	if ch, ok := n.waiters.LoadAndDelete(r.ID); ok {
		ch.(chan engine.Result) <- r
	}
}

// jobQueue is the worker queue of job j.
func (n *Node) jobQueue(j engine.Job) chan engine.Job {
	if _, unpaced := j.(engine.Unpaced); unpaced {
		return n.fastJobCh
	}
	return n.jobCh
}

// jobWorker runs jobs off the event loop, from ch (the paced or the unpaced queue).
func (n *Node) jobWorker(ch chan engine.Job) {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case j := <-ch:
			start := time.Now()
			envs, err := j.Run(n.store, n.self.ID)
			// Pace background scans to a tenth of one core: a repair round scans whole
			// partitions, and run back to back those scans showed up as 60-100 ms spikes in
			// client p99 on a 2-core machine. Repair is not urgent; client requests are.
			// Snapshot transfers pace themselves (a bounded window of chunks in flight).
			pause := min(9*time.Since(start), time.Second)
			if _, unpaced := j.(engine.Unpaced); unpaced {
				pause = 0
			}
			if err != nil {
				n.log.Warn("background job failed", "err", err)
				continue
			}
			n.m.aeJobs.Inc()
			for _, env := range envs {
				if env.To == n.self.ID {
					// The job's note to its own engine (snapshot exported, chunk stored).
					select {
					case n.inbox <- input{kind: inMessage, env: env}:
					case <-n.stop:
						return
					}
					continue
				}
				// System traffic waits for BwMan's bucket (bandwidth.go).
				if err := n.bw.wait(env); err != nil {
					return // stopping
				}
				n.m.sent(env)
				n.send(env)
			}
			select {
			case <-n.stop:
				return
			case <-time.After(pause):
			}
		}
	}
}

// Close stops the node. Acknowledged writes are already durable; nothing is flushed here.
func (n *Node) Close() error {
	if !n.closed.CompareAndSwap(false, true) {
		return nil
	}
	n.tr.Close()
	close(n.stop)
	n.wg.Wait()
	n.waiters.Range(func(k, v any) bool {
		v.(chan engine.Result) <- engine.Result{ID: k.(uint64), Err: errs.New(errs.Unavailable, "node %s shut down", n.self.Name)}
		n.waiters.Delete(k)
		return true
	})
	return n.store.Close()
}
