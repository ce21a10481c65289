package sim

import (
	"container/heap"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/time/rate"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/tools/check"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// epoch is virtual time zero as wall time; node clocks are epoch + virtual + offset.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// Report is the outcome of one run.
type Report struct {
	Seed       uint64
	Ops        int
	OK         int
	SimSeconds float64
	Violations []*check.Violation
	TraceHash  uint64
	Events     int
	Crashes    int
	Partitions int
	// Repartitions counts splits and merges of the keyspace (Options.RepartitionEvery).
	Repartitions int
	// Moves, MovesFinished and MovesAborted count replica moves (Options.MoveEvery).
	Moves, MovesFinished, MovesAborted int
	Messages                           int
	Dropped                            int
	MaxOffsetMs                        float64 // largest pairwise clock difference seen
	// ReadPaths counts how OK reads were served (quorum, local, local-waited, fallback).
	ReadPaths map[string]int
	// Scans counts the scans (Options.ScanFraction) and how the coordinators read them.
	Scans ScanCounts
}

type eventKind uint8

const (
	evDeliver eventKind = iota + 1
	evTick
	evSync
	evClientOp
	evClientTimeout
	evCrash
	evRestart
	evPartitionStart
	evPartitionEnd
	evEndWorkload
	evLocal     // a node's job hands a note to its own engine
	evClockStep // a node's clock is stepped (as NTP steps a clock), within the fault's bound
	evRepartition
	evInstallMap // a node installs a newer placement map (event.pmap)
	evMoveStart  // the driver starts a replica move
	evMoveFinish // the metadata applies move_finish (cli: partition, req: move ID)
	evMoveCheck  // a move still in progress may be aborted (cli: partition, req: move ID)
	evLoseRegion // every node of the lost region crashes for good (regionloss.go)
	evExclusion  // the metadata applies an exclusion report (event.report)
)

type event struct {
	at     int64
	seq    uint64
	kind   eventKind
	node   int
	env    *peerpb.Envelope
	cli    int
	req    uint64
	cut    *cut
	pmap   *placement.Map
	report *engine.Report
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// cut is a set of directed links that are down for a while.
type cut struct {
	name  string
	links map[[2]uint32]bool
}

type simNode struct {
	cfg       config.Node
	fs        *vfs.MemFS
	engine    *storage.Engine
	host      *engine.Host
	up        bool
	pending   []engine.Ready // released when the covering sync completes
	syncing   int            // how many of pending the sync in flight covers (0: none)
	offset0   int64          // clock offset at virtual 0, ns
	driftPPM  float64
	epoch     int // incarnation, so stale sync events are ignored after a crash
	lastReady int64
	// pmap is the placement map this node serves under; s.pmap is the newest one, which
	// nodes install after their own delays (repartition.go).
	pmap *placement.Map
	// lostEngine is the protocol engine of a node lost for good (regionloss.go), frozen at
	// the loss, for the step invariant: the survivors must not decide differently what it
	// had decided.
	lostEngine engine.Engine
}

type client struct {
	id int
	// proc is the client's current logical process in the history. After an indeterminate
	// operation the client continues as a new process (as Jepsen does for crashed
	// operations): the old process may still be "executing" that operation, so nothing the
	// client does later is ordered after it.
	proc     int
	region   string
	home     int // index of its coordinator node
	seq      int
	session  hlc.Version
	inflight *inflightOp
	stopped  bool
}

type inflightOp struct {
	idx  int // index in the history (not for a scan, whose reads are recorded when it returns)
	req  uint64
	node int
	scan *scanOp // a scan in flight (scan.go)
}

type simulator struct {
	o       Options
	proto   Protocol
	rng     *rand.Rand
	now     int64 // virtual ns since start
	events  eventHeap
	seq     uint64
	nodes   []*simNode
	byID    map[uint32]int
	cluster *config.Cluster
	pmap    *placement.Map
	moveSeq uint64 // the last move ID given (IDs increase, as metadata indexes do)
	// moveStarted is each move's start in virtual time (the move-progress report names it);
	// one entry per move started, at most Duration/MoveEvery·2 of them.
	moveStarted       map[uint64]int64
	clients           []*client
	history           check.History
	procs             int            // logical processes handed out
	reqs              map[uint64]int // request ID → client
	nextReq           uint64
	cuts              []*cut
	lastDue           map[[2]uint32]int64
	hash              hash.Hash64
	report            Report
	readLvl, writeLvl config.Level
	workloadOver      bool
	lossProb, dupProb float64
	spikeProb         float64
	invariantBroken   *check.Violation
	// workload replaces the key-value clients and checkers for protocols that bring their
	// own (engine.SimSupport.NewWorkload).
	workload engine.SimWorkload
	wops     map[uint64]*workloadOp
	// Region loss (regionloss.go): the region, its nodes (never restarted), when it was
	// lost and when its exclusion was decided (virtual ns; 0: not yet).
	lostRegion         string
	lost               map[int]bool
	lostAt, excludedAt int64
	excludedRegion     string
	exclusionSeq       uint64
	// Scans (scan.go): the key space in byte order, the last group ID given to a scan's
	// reads, and the first scan answer that broke a scan's own rules (order, range, limit).
	scanKeys   []string
	scanGroups int
	scanBroken *check.Violation
}

// workloadOp is a request of the protocol's own workload in flight.
type workloadOp struct {
	client int
	req    engine.Request
	invoke int64
}

// Run executes one seed and checks its history.
func Run(o Options) (*Report, error) {
	if o.Protocol == "" {
		o.Protocol = "quorum"
	}
	p, err := LookupProtocol(o.Protocol)
	if err != nil {
		return nil, err
	}
	prepare(p, &o)
	o.ensureDefaults()
	if !(o.ScanFraction >= 0 && o.ScanFraction <= 1) {
		return nil, fmt.Errorf("sim: scan fraction %v out of range [0, 1]", o.ScanFraction)
	}
	if o.Mutation != "" {
		if _, ok := MutationDescription(p, o.Mutation); !ok {
			return nil, fmt.Errorf("sim: protocol %s has no mutation %q (known: %v)", p.Name, o.Mutation, MutationNames(p))
		}
	}
	s := &simulator{
		o: o, proto: p,
		rng:         rand.New(rand.NewPCG(o.Seed, o.Seed^0x6d65726964696e)),
		byID:        map[uint32]int{},
		moveStarted: map[uint64]int64{}, lost: map[int]bool{},
		reqs:    map[uint64]int{},
		lastDue: map[[2]uint32]int64{},
		hash:    fnv.New64a(),
	}
	s.report.Seed = o.Seed
	s.readLvl, s.writeLvl = levels(p, o.Mutation, o.ReadLevel, o.WriteLevel)
	if p.Sim.NewWorkload != nil {
		s.workload = p.Sim.NewWorkload()
		s.wops = map[uint64]*workloadOp{}
	}
	if err := s.setup(); err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.loop(); err != nil {
		return nil, err
	}
	return s.finish()
}

func (s *simulator) close() {
	for _, n := range s.nodes {
		if n.engine != nil {
			n.engine.Close()
			n.engine = nil
		}
	}
}

func (s *simulator) trace(format string, args ...any) {
	line := fmt.Sprintf("%10.3fms ", float64(s.now)/1e6) + fmt.Sprintf(format, args...)
	s.hash.Write([]byte(line))
	s.hash.Write([]byte{'\n'})
	if s.o.Trace != nil {
		s.o.Trace(line)
	}
}

func (s *simulator) schedule(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
}

func (s *simulator) setup() error {
	t := s.o.Topology
	c := &config.Cluster{Name: "sim", Topology: t, TopologyRef: t.Name,
		Clock: config.Clock{MaxOffset: s.o.MaxClockOffset}, AllowInternal: true,
		// A network for the Mayflower selector of large reads (read_selector: mayflower):
		// the model it costs reads on; the simulated links do not limit bandwidth.
		Network: config.Network{NodeBandwidth: "100MB", WANBandwidth: "50MB", ReportInterval: 500 * time.Millisecond}}
	id := uint32(0)
	for _, r := range t.Regions {
		for i := range s.o.NodesPerRegion {
			id++
			c.Nodes = append(c.Nodes, config.Node{ID: id, Name: fmt.Sprintf("%s-%d", r, i+1), Region: r,
				Listen: fmt.Sprintf("127.0.0.1:%d", 40000+id), PeerListen: fmt.Sprintf("127.0.0.1:%d", 50000+id)})
		}
	}
	opts := map[string]string{}
	for k, v := range s.o.KeyspaceOptions {
		opts[k] = v
	}
	ks := config.Keyspace{Name: "sim", Protocol: s.o.Protocol, ReplicasPerRegion: s.o.ReplicasPerRegion,
		Partitions: s.o.Partitions, Options: opts}
	if s.o.ReplicaRegions > 0 && s.o.ReplicaRegions < len(t.Regions) {
		ks.Regions = slices.Clone(t.Regions[:s.o.ReplicaRegions])
	}
	c.Keyspaces = []config.Keyspace{ks}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("sim: cluster: %w", err)
	}
	s.cluster = c
	pm, err := placement.Build(c)
	if err != nil {
		return err
	}
	s.pmap = pm
	eps := int64(s.o.MaxClockOffset)
	for i, nd := range c.Nodes {
		n := &simNode{cfg: nd, fs: vfs.NewCrashableMem()}
		switch {
		case s.o.Faults[FaultClockBeyond]:
			// Far beyond the bound: up to ±100ε (±200ms at the default ε), more than a WAN
			// round trip, so a coordinator can stamp a write older than one acknowledged
			// earlier elsewhere.
			n.offset0 = s.rng.Int64N(200*eps+1) - 100*eps
			n.driftPPM = float64(s.rng.IntN(401) - 200)
		case s.o.Faults[FaultClock]:
			// Offsets within ±ε/2 keep every pair within ε; drift is clamped below.
			n.offset0 = s.rng.Int64N(eps+1) - eps/2
			n.driftPPM = float64(s.rng.IntN(201) - 100)
		}
		s.nodes = append(s.nodes, n)
		s.byID[nd.ID] = i
		if err := s.startNode(i); err != nil {
			return err
		}
		s.schedule(event{at: s.rng.Int64N(int64(s.o.TickInterval)), kind: evTick, node: i})
	}
	for _, r := range t.Regions {
		var local []int
		for i, n := range s.nodes {
			if n.cfg.Region == r {
				local = append(local, i)
			}
		}
		for j := range s.o.ClientsPerRegion {
			cl := &client{id: len(s.clients), proc: s.procs, region: r, home: local[j%len(local)]}
			s.procs++
			s.clients = append(s.clients, cl)
			s.schedule(event{at: s.rng.Int64N(int64(20 * time.Millisecond)), kind: evClientOp, cli: cl.id})
		}
	}
	if s.o.Faults[FaultLoss] {
		s.lossProb = 0.02 + s.rng.Float64()*0.08
	}
	if s.o.Faults[FaultDup] {
		s.dupProb = 0.01 + s.rng.Float64()*0.05
	}
	if s.o.Faults[FaultDelay] {
		s.spikeProb = 0.005 + s.rng.Float64()*0.02
		if s.o.DelaySpikeProb > 0 {
			s.spikeProb = s.o.DelaySpikeProb
		}
	}
	s.scheduleFaults()
	if err := s.scheduleRegionLoss(); err != nil {
		return err
	}
	s.scheduleClockSteps()
	if err := s.scheduleRepartitions(); err != nil {
		return err
	}
	if err := s.scheduleMoves(); err != nil {
		return err
	}
	s.schedule(event{at: int64(s.o.Duration), kind: evEndWorkload})
	return nil
}

// localTime is node i's clock reading at virtual time s.now.
func (s *simulator) localTime(i int) time.Time {
	n := s.nodes[i]
	off := n.offset0 + int64(n.driftPPM*float64(s.now)/1e6)
	if !s.o.Faults[FaultClockBeyond] {
		eps := int64(s.o.MaxClockOffset)
		off = max(-eps/2, min(eps/2, off))
	}
	return time.Unix(0, epoch+s.now+off)
}

// scheduleClockSteps: with clock faults, every node's clock is stepped a few times during the
// workload to a new offset drawn like its first (within ±ε/2 under "clock", so every pair stays
// within ε; far beyond under "clock-beyond"). A step is how a real clock moves fastest (NTP
// steps, a VM resumed): an interval measured across one is off by up to the step, which
// is what timing rules with an ε margin (leases) must survive.
func (s *simulator) scheduleClockSteps() {
	if !s.o.Faults[FaultClock] && !s.o.Faults[FaultClockBeyond] {
		return
	}
	d := int64(s.o.Duration)
	for i := range s.nodes {
		if every := int64(s.o.ClockStepEvery); every > 0 {
			for at := s.rng.Int64N(2 * every); at < d; at += 1 + s.rng.Int64N(2*every) {
				s.schedule(event{at: at, kind: evClockStep, node: i})
			}
			continue
		}
		for range s.rng.IntN(4) {
			s.schedule(event{at: s.rng.Int64N(d), kind: evClockStep, node: i})
		}
	}
}

// stepClock moves node i's clock to a new offset (keeping its drift).
func (s *simulator) stepClock(i int) {
	n := s.nodes[i]
	eps := int64(s.o.MaxClockOffset)
	target := s.rng.Int64N(eps+1) - eps/2
	if s.o.Faults[FaultClockBeyond] {
		target = s.rng.Int64N(200*eps+1) - 100*eps
	}
	before := s.localTime(i)
	n.offset0 = target - int64(n.driftPPM*float64(s.now)/1e6)
	s.trace("clock step %s: %+.3fms", n.cfg.Name, float64(s.localTime(i).Sub(before))/1e6)
}

// simMemTableBytes is the memtable size of the simulated nodes' storage.
const simMemTableBytes = 128 << 10

// simChunkBytes and simPullBytesPerSec shape the even seeds' snapshot pulls: a simulated
// partition's snapshot is a kilobyte or two, so 512-byte chunks make a pull several chunks long,
// and 64 KiB/s with a burst of two chunks (8 ms a chunk, above a region's round trip) makes the
// bucket hold back a pull with nothing in flight, which only the tick resumes (the mutation
// pull-not-resumed must be caught by the move-progress check). At 2 KiB and 1 MiB/s the bucket
// never held a pull's first chunk back and that path went unchecked.
const (
	simChunkBytes      = 512
	simPullBytesPerSec = 64 << 10
)

func (s *simulator) startNode(i int) error {
	n := s.nodes[i]
	// Small memtables: the in-memory filesystem copies a WAL file whole on each sync, so a
	// WAL that grows to the default 4 MiB makes every sync slow; 128 KiB WALs rotate (and
	// memtables flush to sstables, which crashes then exercise) several times a run.
	e, err := storage.Open("/data", storage.Options{FS: n.fs, MemTableBytes: simMemTableBytes})
	if err != nil {
		return fmt.Errorf("sim: node %s: open storage: %w", n.cfg.Name, err)
	}
	n.engine = e
	// Anti-entropy runs every 500ms so that convergence happens within the quiescence
	// window.
	cfg := engine.Config{
		NodeID: n.cfg.ID, Nodes: s.cluster.Nodes, Topology: s.o.Topology, Limits: s.cluster.Limits,
		AntiEntropyInterval: 500 * time.Millisecond, Mutation: s.o.Mutation, MaxClockOffset: s.cluster.Clock.MaxOffset,
		MaxFutureVersion: s.cluster.Clock.MaxFutureVersion(),
		RandSeed:         s.o.Seed<<20 ^ uint64(n.cfg.ID)<<8 ^ uint64(n.epoch),
		Network:          s.cluster.Network,
	}
	if s.o.Seed%2 == 0 {
		// Even seeds move data as BwMan shapes it (docs/elasticity.md): small chunks, and
		// snapshot pulls paced by an inbound bucket (deterministic: it reads only the
		// node's virtual clock), so that a pull held back by the bucket and resumed by a
		// later tick meets the checkers too.
		cfg.SystemChunkBytes = simChunkBytes
		cfg.PullBudget = rate.NewLimiter(simPullBytesPerSec, 2*simChunkBytes)
	}
	n.host = engine.NewHost(cfg, e, nil)
	// A restarted node reads the newest map from the metadata it follows.
	n.pmap = s.pmap
	n.host.SetPlacement(n.pmap)
	n.up = true
	n.pending = nil
	n.syncing = 0
	n.epoch++
	return nil
}

func (s *simulator) loop() error {
	end := int64(s.o.Duration + s.o.Quiesce)
	for s.events.Len() > 0 {
		e := heap.Pop(&s.events).(event)
		if e.at > end {
			break
		}
		s.now = e.at
		s.report.Events++
		if s.report.Events > 20_000_000 {
			return fmt.Errorf("sim: seed %d: more than 20M events; a protocol loop?", s.o.Seed)
		}
		if err := s.handle(e); err != nil {
			return fmt.Errorf("sim: seed %d at %.3fms: %w", s.o.Seed, float64(s.now)/1e6, err)
		}
	}
	s.now = end
	return nil
}

func (s *simulator) handle(e event) error {
	switch e.kind {
	case evTick:
		n := s.nodes[e.node]
		if n.up {
			n.host.Tick(s.localTime(e.node))
			if err := s.processReady(e.node); err != nil {
				return err
			}
		}
		s.schedule(event{at: s.now + int64(s.o.TickInterval), kind: evTick, node: e.node})
	case evDeliver:
		i, ok := s.byID[e.env.To]
		if !ok {
			return nil
		}
		n := s.nodes[i]
		if !n.up || s.isCut(e.env.From, e.env.To) {
			s.report.Dropped++
			return nil
		}
		s.trace("deliver %s", fmtEnv(e.env))
		// The node runtime validates every peer message before its core sees it
		// (wire.PeerCheck). Every message here comes from a correct node, so a refusal means
		// the validation rules are wrong: it is a violation, as a broken invariant is.
		// (A message a node addresses to itself is ignored by its core, and no transport
		// carries it in production; it is not a peer message.)
		if rej := s.peerCheck(i).Envelope(e.env); rej != nil && e.env.From != e.env.To {
			// With replica moves, a node that has not installed a move's step yet (or a
			// message sent under a step since undone) meets a member it does not know: the
			// runtime drops it, as it drops messages made under another map. Those refusals
			// are the membership rule working, not a wrong rule.
			membership := rej.Reason == wire.RejectSenderReplica || rej.Reason == wire.RejectReceiverReplic
			if membership && s.o.MoveEvery > 0 {
				s.report.Dropped++
				return nil
			}
			if s.invariantBroken == nil {
				s.invariantBroken = &check.Violation{Checker: "peer-check", Reason: fmt.Sprintf("at %.3fms: %s refused a correct node's %s: %v",
					float64(s.now)/1e6, n.cfg.Name, fmtEnv(e.env), rej)}
			}
			s.report.Dropped++
			return nil
		}
		n.host.Step(s.localTime(i), e.env)
		if err := s.processReady(i); err != nil {
			return err
		}
		s.checkInvariant()
		return nil
	case evSync:
		return s.completeSync(e.node, e.cli)
	case evClockStep:
		s.stepClock(e.node)
	case evLocal:
		n := s.nodes[e.node]
		if !n.up || e.cli != n.epoch {
			return nil // the node crashed after its job ran: the note is lost with it
		}
		s.trace("local %s", fmtEnv(e.env))
		n.host.Step(s.localTime(e.node), e.env)
		if err := s.processReady(e.node); err != nil {
			return err
		}
		s.checkInvariant()
	case evRepartition:
		s.repartition()
	case evMoveStart:
		s.startMove()
	case evMoveFinish:
		s.finishMove(uint32(e.cli), e.req)
	case evMoveCheck:
		s.checkMove(uint32(e.cli), e.req)
	case evLoseRegion:
		return s.loseRegion()
	case evExclusion:
		s.applyExclusion(e.report)
	case evInstallMap:
		n := s.nodes[e.node]
		if n.up && e.pmap.Version > n.pmap.Version {
			n.pmap = e.pmap
			n.host.SetPlacement(n.pmap)
			s.trace("%s installs map %d", n.cfg.Name, n.pmap.Version)
			return s.processReady(e.node)
		}
	case evClientOp:
		return s.clientOp(e.cli)
	case evClientTimeout:
		s.clientTimeout(e.cli, e.req)
	case evCrash:
		return s.crash(e.node)
	case evRestart:
		if !s.nodes[e.node].up && !s.lost[e.node] {
			s.trace("restart %s", s.nodes[e.node].cfg.Name)
			return s.startNode(e.node)
		}
	case evPartitionStart:
		s.cuts = append(s.cuts, e.cut)
		s.report.Partitions++
		s.trace("partition start %s", e.cut.name)
	case evPartitionEnd:
		s.cuts = slices.DeleteFunc(s.cuts, func(c *cut) bool { return c == e.cut })
		s.trace("partition end %s", e.cut.name)
	case evEndWorkload:
		s.workloadOver = true
		s.trace("workload over: healing every fault")
		s.cuts = nil
		s.lossProb, s.dupProb, s.spikeProb = 0, 0, 0
		for i, n := range s.nodes {
			if !n.up && !s.lost[i] {
				s.trace("restart %s", n.cfg.Name)
				if err := s.startNode(i); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkInvariant evaluates the protocol's step invariant (e.g. one master per key) and
// records the first violation.
// peerCheck is the validation node i's runtime applies to a peer message now.
func (s *simulator) peerCheck(i int) *wire.PeerCheck {
	return &wire.PeerCheck{Self: s.nodes[i].cfg.ID, Members: func(id uint32) bool { _, ok := s.byID[id]; return ok },
		Placement: s.nodes[i].pmap, Limits: s.cluster.Limits, Now: s.localTime(i), MaxFuture: s.cluster.Clock.MaxFutureVersion()}
}

func (s *simulator) checkInvariant() {
	if s.proto.Sim.Invariant == nil || s.invariantBroken != nil {
		return
	}
	now := make([]time.Time, len(s.nodes))
	engines := make([]engine.Engine, len(s.nodes))
	up := make([]bool, len(s.nodes))
	for i, n := range s.nodes {
		now[i], up[i] = s.localTime(i), n.up
		if n.host != nil {
			engines[i], _ = n.host.Engine(s.proto.Name)
		} else if s.lost[i] {
			engines[i] = n.lostEngine // frozen at the loss: what it committed stays on record
		}
	}
	if msg := s.proto.Sim.Invariant(now, engines, up); msg != "" {
		s.invariantBroken = &check.Violation{Checker: "invariant", Reason: fmt.Sprintf("at %.3fms: %s", float64(s.now)/1e6, msg)}
		s.trace("INVARIANT BROKEN: %s", msg)
	}
}

func (s *simulator) isCut(from, to uint32) bool {
	for _, c := range s.cuts {
		if c.links[[2]uint32{from, to}] {
			return true
		}
	}
	return false
}

// processReady applies a node's new writes to storage at once (visible, not yet synced — as
// Pebble does) and queues the Ready until a sync covers it; only then do its messages and
// replies leave (the Ready contract). A crash before that loses the unsynced writes.
func (s *simulator) processReady(i int) error {
	n := s.nodes[i]
	for range 1000 {
		if !n.host.HasReady() {
			return nil
		}
		rd := n.host.Ready()
		if len(rd.Writes) > 0 || len(rd.Raw) > 0 {
			if err := n.engine.ApplyBatch(rd.Writes, rd.Raw, false); err != nil {
				return fmt.Errorf("node %s: apply: %w", n.cfg.Name, err)
			}
		}
		// An Ingest may delete or replace a range (a replica that left its group): the reads
		// of the Readies still waiting for their sync run first, on their writes made
		// durable now, as the runtime does (node.go) — a read handed out before the deletion
		// must not find the range empty.
		if len(rd.Ingests) > 0 {
			if err := s.readsBeforeIngest(i); err != nil {
				return err
			}
		}
		// A snapshot install syncs as it goes (ReplacePartition), after this Ready's writes.
		for _, in := range rd.Ingests {
			if err := in.Perform(n.engine); err != nil {
				return fmt.Errorf("node %s: install snapshot: %w", n.cfg.Name, err)
			}
			s.trace("%s installed a snapshot of %s", n.cfg.Name, in.Span)
		}
		if s.o.Mutation == "ack-before-sync" {
			// Broken on purpose: outputs leave before the writes are durable.
			if err := s.release(i, rd); err != nil {
				return err
			}
			rd.Messages, rd.Replies, rd.Jobs, rd.Reads = nil, nil, nil, nil
		}
		n.pending = append(n.pending, rd)
		if n.syncing == 0 {
			s.startSync(i)
		}
	}
	return fmt.Errorf("node %s keeps producing output", n.cfg.Name)
}

func (s *simulator) startSync(i int) {
	n := s.nodes[i]
	n.syncing = len(n.pending)
	d := 200*time.Microsecond + time.Duration(s.rng.Int64N(int64(800*time.Microsecond)))
	if s.o.Faults[FaultSlowDisk] && s.rng.IntN(50) == 0 {
		d = 20*time.Millisecond + time.Duration(s.rng.Int64N(int64(180*time.Millisecond)))
	}
	s.schedule(event{at: s.now + int64(d), kind: evSync, node: i, cli: n.epoch})
}

func (s *simulator) completeSync(i, incarnation int) error {
	n := s.nodes[i]
	if !n.up || incarnation != n.epoch || n.syncing == 0 {
		return nil // the node crashed meanwhile: the sync never completed
	}
	if err := n.engine.Apply(nil, true); err != nil {
		return fmt.Errorf("node %s: sync: %w", n.cfg.Name, err)
	}
	done := n.pending[:n.syncing]
	n.pending = slices.Clone(n.pending[n.syncing:])
	n.syncing = 0
	for _, rd := range done {
		if err := s.release(i, rd); err != nil {
			return err
		}
	}
	if len(n.pending) > 0 && n.up {
		s.startSync(i)
	}
	return nil
}

// runReads serves reads at node i.
func (s *simulator) runReads(i int, reads []engine.Read) {
	n := s.nodes[i]
	for _, r := range reads {
		res := engine.RunRead(r, n.engine, s.localTime(i))
		if res.Forward != nil {
			if res.Forward.To == n.cfg.ID {
				s.schedule(event{at: s.now + int64(50*time.Microsecond), kind: evLocal, node: i, env: res.Forward, cli: n.epoch})
			} else {
				s.send(res.Forward)
			}
			continue
		}
		s.reply(i, res)
	}
}

// readsBeforeIngest makes node i's pending Readies durable and serves their reads (their
// messages and replies still wait for their sync to complete).
func (s *simulator) readsBeforeIngest(i int) error {
	n := s.nodes[i]
	has := false
	for _, rd := range n.pending {
		has = has || len(rd.Reads) > 0
	}
	if !has {
		return nil
	}
	if err := n.engine.Apply(nil, true); err != nil {
		return fmt.Errorf("node %s: sync: %w", n.cfg.Name, err)
	}
	for k := range n.pending {
		s.runReads(i, n.pending[k].Reads)
		n.pending[k].Reads = nil
	}
	return nil
}

// release sends a durable Ready's messages, answers its replies and runs its jobs.
func (s *simulator) release(i int, rd engine.Ready) error {
	n := s.nodes[i]
	for _, env := range rd.Messages {
		s.send(env)
	}
	for _, r := range rd.Replies {
		s.reply(i, r)
	}
	for _, r := range rd.Reports {
		s.exclusionReport(r)
		if r.Kind == engine.ReportMoveCaughtUp && r.Keyspace == "sim" {
			// The report becomes a move_finish the metadata group commits a round trip later.
			s.schedule(event{at: s.now + s.rng.Int64N(int64(maxInstallDelay)+1), kind: evMoveFinish, cli: int(r.Partition), req: r.MoveID})
		}
	}
	s.runReads(i, rd.Reads)
	for _, j := range rd.Jobs {
		envs, err := j.Run(n.engine, n.cfg.ID)
		if err != nil {
			return fmt.Errorf("node %s: job: %w", n.cfg.Name, err)
		}
		for _, env := range envs {
			if env.To == n.cfg.ID {
				// A job's note to its own engine: delivered to this incarnation only.
				s.schedule(event{at: s.now + int64(50*time.Microsecond), kind: evLocal, node: i, env: env, cli: n.epoch})
				continue
			}
			s.send(env)
		}
	}
	return nil
}

func (s *simulator) send(env *peerpb.Envelope) {
	s.report.Messages++
	from, to := s.byID[env.From], s.byID[env.To]
	if s.isCut(env.From, env.To) || (s.lossProb > 0 && s.rng.Float64() < s.lossProb) {
		s.report.Dropped++
		return
	}
	delay := int64(s.o.Topology.OneWay(s.nodes[from].cfg.Region, s.nodes[to].cfg.Region))
	jitter := s.rng.Int64N(int64(100*time.Microsecond) + 1)
	if s.o.Faults[FaultReorder] {
		jitter = s.rng.Int64N(delay/3 + int64(2*time.Millisecond))
	}
	if s.spikeProb > 0 && s.rng.Float64() < s.spikeProb {
		// A delay spike (a retransmission, a paused process): the kind of delay a lease's
		// timing rule must survive (liu-thesis 4.1.3, "Leasing Period").
		jitter += int64(100*time.Millisecond) + s.rng.Int64N(int64(900*time.Millisecond))
	}
	due := s.now + delay + jitter
	link := [2]uint32{env.From, env.To}
	if !s.o.Faults[FaultReorder] {
		due = max(due, s.lastDue[link]) // per-link FIFO, as TCP
		s.lastDue[link] = due
	}
	s.schedule(event{at: due, kind: evDeliver, env: env})
	if s.dupProb > 0 && s.rng.Float64() < s.dupProb {
		s.schedule(event{at: due + s.rng.Int64N(int64(20*time.Millisecond)), kind: evDeliver, env: env})
	}
}

func (s *simulator) crash(i int) error {
	n := s.nodes[i]
	if !n.up {
		return nil
	}
	s.report.Crashes++
	s.trace("crash %s (%d readies unsynced)", n.cfg.Name, len(n.pending))
	// The crash keeps every synced byte and a random share of the unsynced ones, of a store
	// whose background work has settled (storage.Engine.WaitIdle): otherwise what survives
	// depends on the host's scheduling, and a seed would not replay.
	if !n.engine.WaitIdle(10 * time.Second) {
		return fmt.Errorf("sim: node %s: storage still busy with flushes or compactions after 10s", n.cfg.Name)
	}
	clone := n.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: s.rng.IntN(101), RNG: rand.New(rand.NewPCG(s.rng.Uint64(), 1))})
	s.countScanStats(n.host) // the engine's counters go with it
	n.engine.Close()
	n.engine = nil
	n.fs = clone
	n.up = false
	n.host = nil
	n.pending = nil
	n.syncing = 0
	n.epoch++
	return nil
}

func (s *simulator) scheduleFaults() {
	d := int64(s.o.Duration)
	if s.o.Faults[FaultCrash] {
		if s.rng.IntN(4) == 0 {
			// A correlated failure (a power cut): every node at once. Only what was synced
			// survives anywhere.
			at := s.rng.Int64N(d * 8 / 10)
			down := int64(100*time.Millisecond) + s.rng.Int64N(int64(time.Second))
			for i := range s.nodes {
				s.schedule(event{at: at, kind: evCrash, node: i})
				s.schedule(event{at: min(at+down, d), kind: evRestart, node: i})
			}
		}
		for range 1 + s.rng.IntN(2) {
			i := s.rng.IntN(len(s.nodes))
			at := s.rng.Int64N(d * 8 / 10)
			down := int64(100*time.Millisecond) + s.rng.Int64N(int64(1500*time.Millisecond))
			s.schedule(event{at: at, kind: evCrash, node: i})
			s.schedule(event{at: min(at+down, d), kind: evRestart, node: i})
		}
	}
	if s.o.Faults[FaultPartition] && s.o.PartitionEvery > 0 {
		every := int64(s.o.PartitionEvery)
		for at := s.rng.Int64N(2 * every); at < d; {
			c := s.randomCut()
			dur := int64(200*time.Millisecond) + s.rng.Int64N(int64(1500*time.Millisecond))
			s.schedule(event{at: at, kind: evPartitionStart, cut: c})
			s.schedule(event{at: min(at+dur, d), kind: evPartitionEnd, cut: c})
			at += dur + 1 + s.rng.Int64N(2*every)
		}
	} else if s.o.Faults[FaultPartition] {
		for range 1 + s.rng.IntN(2) {
			c := s.randomCut()
			at := s.rng.Int64N(d * 8 / 10)
			dur := int64(200*time.Millisecond) + s.rng.Int64N(int64(1500*time.Millisecond))
			s.schedule(event{at: at, kind: evPartitionStart, cut: c})
			s.schedule(event{at: min(at+dur, d), kind: evPartitionEnd, cut: c})
		}
	}
}

// randomCut picks a partition shape: one node isolated, a region isolated, a one-way cut
// between two nodes, or a minority/majority split.
func (s *simulator) randomCut() *cut {
	c := &cut{links: map[[2]uint32]bool{}}
	all := s.cluster.Nodes
	isolate := func(group map[uint32]bool) {
		for _, a := range all {
			for _, b := range all {
				if group[a.ID] != group[b.ID] {
					c.links[[2]uint32{a.ID, b.ID}] = true
				}
			}
		}
	}
	switch s.rng.IntN(4) {
	case 0:
		n := all[s.rng.IntN(len(all))]
		isolate(map[uint32]bool{n.ID: true})
		c.name = "isolate node " + n.Name
	case 1:
		r := s.o.Topology.Regions[s.rng.IntN(len(s.o.Topology.Regions))]
		g := map[uint32]bool{}
		for _, n := range all {
			if n.Region == r {
				g[n.ID] = true
			}
		}
		isolate(g)
		c.name = "isolate region " + r
	case 2:
		a, b := all[s.rng.IntN(len(all))], all[s.rng.IntN(len(all))]
		if a.ID == b.ID {
			b = all[(s.byID[a.ID]+1)%len(all)]
		}
		c.links[[2]uint32{a.ID, b.ID}] = true
		c.name = fmt.Sprintf("one-way %s -> %s", a.Name, b.Name)
	default:
		perm := s.rng.Perm(len(all))
		g := map[uint32]bool{}
		for _, p := range perm[:(len(all)-1)/2+0] {
			g[all[p].ID] = true
		}
		if len(g) == 0 {
			g[all[perm[0]].ID] = true
		}
		isolate(g)
		c.name = fmt.Sprintf("minority of %d split off", len(g))
	}
	return c
}

// --- clients ---

func (s *simulator) clientOp(ci int) error {
	cl := s.clients[ci]
	if cl.inflight != nil || cl.stopped {
		return nil
	}
	if s.workloadOver || (s.lostAt > 0 && cl.region == s.lostRegion) {
		cl.stopped = true // the region's clients are lost with it
		return nil
	}
	if s.workload != nil {
		return s.workloadOp(ci)
	}
	node := cl.home
	if s.o.Roam && s.rng.IntN(3) == 0 {
		node = s.rng.IntN(len(s.nodes))
	}
	key := fmt.Sprintf("k%d", s.rng.IntN(s.o.Keys))
	op := check.Op{ID: len(s.history), Process: cl.proc, Key: key, Invoke: s.now, Node: s.nodes[node].cfg.Name}
	req := engine.Request{Keyspace: "sim", Key: []byte(key)}
	if s.rng.Float64() < s.o.ReadFraction {
		if s.o.ScanFraction > 0 && s.rng.Float64() < s.o.ScanFraction {
			return s.scan(ci, node)
		}
		op.Kind = check.Read
		req.Op, req.Level = engine.OpGet, s.readLvl
	} else {
		cl.seq++
		op.Kind = check.Write
		op.Value = fmt.Sprintf("c%d-%d", ci, cl.seq)
		req.Op, req.Level, req.Value = engine.OpPut, s.writeLvl, []byte(op.Value)
	}
	if !s.o.NoSessions {
		req.MinVersion = cl.session
	}
	s.history = append(s.history, op)
	n := s.nodes[node]
	if !n.up {
		// Connection refused: certainly not executed. The client moves to another node.
		s.finishOp(ci, len(s.history)-1, check.Failed, engine.Result{})
		cl.home = s.otherNodeIn(cl.region, cl.home)
		return nil
	}
	s.nextReq++
	req.ID = s.nextReq
	local := s.localTime(node)
	req.Deadline = local.Add(s.o.RequestTimeout)
	s.history[len(s.history)-1].NodeInvoke = local.UnixNano() - epoch
	cl.inflight = &inflightOp{idx: len(s.history) - 1, req: req.ID, node: node}
	s.reqs[req.ID] = ci
	s.trace("invoke c%d %s via %s", ci, opString(op), n.cfg.Name)
	// Client-side timeout: a crashed coordinator never answers.
	s.schedule(event{at: s.now + int64(s.o.RequestTimeout) + int64(500*time.Millisecond), kind: evClientTimeout, cli: ci, req: req.ID})
	n.host.Propose(local, req)
	return s.processReady(node)
}

// workloadOp starts client ci's next request of the protocol's own workload.
func (s *simulator) workloadOp(ci int) error {
	cl := s.clients[ci]
	node := cl.home
	req := s.workload.Next(s.rng, "sim", ci)
	n := s.nodes[node]
	if !n.up {
		s.workload.Done(ci, req, engine.Result{}, engine.SimFailed, time.Duration(s.now), time.Duration(s.now))
		cl.home = s.otherNodeIn(cl.region, cl.home)
		s.schedule(event{at: s.now + s.rng.Int64N(int64(10*time.Millisecond)), kind: evClientOp, cli: ci})
		return nil
	}
	s.nextReq++
	req.ID = s.nextReq
	local := s.localTime(node)
	req.Deadline = local.Add(s.o.RequestTimeout)
	cl.inflight = &inflightOp{req: req.ID, node: node}
	s.reqs[req.ID] = ci
	s.wops[req.ID] = &workloadOp{client: ci, req: req, invoke: s.now}
	s.trace("invoke c%d %s via %s", ci, s.workload.Describe(req), n.cfg.Name)
	s.schedule(event{at: s.now + int64(s.o.RequestTimeout) + int64(500*time.Millisecond), kind: evClientTimeout, cli: ci, req: req.ID})
	n.host.Propose(local, req)
	return s.processReady(node)
}

// finishWorkloadOp ends a workload request.
func (s *simulator) finishWorkloadOp(ci int, id uint64, res engine.Result, outcome engine.SimOutcome) {
	cl := s.clients[ci]
	w := s.wops[id]
	delete(s.wops, id)
	delete(s.reqs, id)
	cl.inflight = nil
	if w == nil {
		return
	}
	s.workload.Done(ci, w.req, res, outcome, time.Duration(w.invoke), time.Duration(s.now))
	if outcome == engine.SimOK {
		s.report.OK++
	}
	s.report.Ops++
	s.trace("return c%d %s -> %v", ci, s.workload.Describe(w.req), res.Err)
	s.schedule(event{at: s.now + s.rng.Int64N(int64(10*time.Millisecond)), kind: evClientOp, cli: ci})
}

func opString(op check.Op) string {
	if op.Kind == check.Write {
		return fmt.Sprintf("write %s=%s", op.Key, op.Value)
	}
	return "read " + op.Key
}

func (s *simulator) reply(node int, r engine.Result) {
	ci, ok := s.reqs[r.ID]
	if !ok {
		return
	}
	cl := s.clients[ci]
	if cl.inflight == nil || cl.inflight.req != r.ID {
		return
	}
	if s.workload != nil {
		outcome := engine.SimOK
		switch errs.KindOf(r.Err) {
		case errs.Unavailable, errs.Overloaded:
			outcome = engine.SimFailed
		case errs.Timeout, errs.Internal:
			outcome = engine.SimIndeterminate
		}
		if r.Err == nil {
			outcome = engine.SimOK
		}
		s.finishWorkloadOp(ci, r.ID, r, outcome)
		return
	}
	idx := cl.inflight.idx
	outcome := check.OK
	if r.Err != nil {
		switch errs.KindOf(r.Err) {
		case errs.Unavailable, errs.Invalid, errs.NotFound, errs.Overloaded:
			outcome = check.Failed
		default:
			outcome = check.Indeterminate
		}
	}
	if sc := cl.inflight.scan; sc != nil {
		s.finishScan(ci, sc, outcome, r, s.localTime(node).UnixNano()-epoch)
		return
	}
	s.history[idx].NodeReturn = s.localTime(node).UnixNano() - epoch
	s.finishOp(ci, idx, outcome, r)
}

func (s *simulator) finishOp(ci, idx int, outcome check.Outcome, r engine.Result) {
	cl := s.clients[ci]
	op := &s.history[idx]
	op.Outcome = outcome
	op.Return = s.now
	if outcome == check.OK {
		op.Version = r.Version
		if op.Kind == check.Read {
			op.Found = r.Found
			op.Value = string(r.Value)
			if s.report.ReadPaths == nil {
				s.report.ReadPaths = map[string]int{}
			}
			s.report.ReadPaths[r.Path]++
		}
		if cl.session.Less(r.Version) {
			cl.session = r.Version
		}
	}
	s.clientReturned(ci, outcome, op.String())
}

// clientReturned ends client ci's operation (what is the trace's description): the client is
// free, becomes a new process after an indeterminate outcome (it cannot know what happened),
// and starts its next operation after a think time.
func (s *simulator) clientReturned(ci int, outcome check.Outcome, what string) {
	cl := s.clients[ci]
	if cl.inflight != nil {
		delete(s.reqs, cl.inflight.req)
	}
	cl.inflight = nil
	if outcome == check.Indeterminate {
		cl.proc = s.procs
		s.procs++
	}
	s.trace("return c%d %s", ci, what)
	think := s.rng.Int64N(int64(10 * time.Millisecond))
	s.schedule(event{at: s.now + think, kind: evClientOp, cli: ci})
}

func (s *simulator) clientTimeout(ci int, req uint64) {
	cl := s.clients[ci]
	if cl.inflight == nil || cl.inflight.req != req {
		return
	}
	if s.workload != nil {
		s.finishWorkloadOp(ci, req, engine.Result{}, engine.SimIndeterminate)
		cl.home = s.otherNodeIn(cl.region, cl.home)
		return
	}
	if sc := cl.inflight.scan; sc != nil {
		s.finishScan(ci, sc, check.Indeterminate, engine.Result{}, 0)
		cl.home = s.otherNodeIn(cl.region, cl.home)
		return
	}
	s.finishOp(ci, cl.inflight.idx, check.Indeterminate, engine.Result{})
	cl.home = s.otherNodeIn(cl.region, cl.home) // try another coordinator of its region
}

// otherNodeIn picks another node of the client's region (the same node when it is alone):
// a client keeps to its own region's coordinators, as the protocols' models assume.
func (s *simulator) otherNodeIn(region string, cur int) int {
	var in []int
	for i, n := range s.nodes {
		if n.cfg.Region == region && i != cur {
			in = append(in, i)
		}
	}
	if len(in) == 0 {
		return cur
	}
	return in[s.rng.IntN(len(in))]
}

// --- the end ---

func (s *simulator) finish() (*Report, error) {
	for _, n := range s.nodes {
		if !n.up {
			continue // lost with its region
		}
		_, engines := n.host.Engines()
		for _, e := range engines {
			if d, ok := e.(interface{ DebugState() string }); ok && n.up {
				s.trace("final state of %s:\n%s", n.cfg.Name, d.DebugState())
			}
		}
	}
	// Clients still waiting at the end (their coordinator never answered) are indeterminate.
	for ci, cl := range s.clients {
		if cl.inflight != nil {
			s.clientTimeout(ci, cl.inflight.req)
		}
	}
	for _, n := range s.nodes {
		if n.host != nil {
			s.countScanStats(n.host)
		}
	}
	if s.workload != nil {
		return s.finishWorkload()
	}
	var final []check.ReplicaState
	ks, _ := s.pmap.Keyspace("sim")
	for k := range s.o.Keys {
		key := fmt.Sprintf("k%d", k)
		p := ks.Lookup([]byte(key))
		for _, id := range p.Replicas {
			n := s.nodes[s.byID[id]]
			if s.lost[s.byID[id]] || (p.Exclusion.Decided() && p.Exclusion.Region == n.cfg.Region) {
				continue // lost, or excluded, with its region: it keeps the state it was cut off at
			}
			rec, found, err := n.engine.Get("sim", []byte(key))
			if err != nil {
				return nil, fmt.Errorf("sim: final read on %s: %w", n.cfg.Name, err)
			}
			st := check.ReplicaState{Node: n.cfg.Name, Key: key, Found: found && !rec.Tombstone}
			if found {
				st.Version = rec.Version
				st.Value = string(rec.Value)
			}
			final = append(final, st)
		}
	}
	if err := s.history.Validate(); err != nil {
		return nil, fmt.Errorf("sim: seed %d produced a malformed history (a simulator bug): %w", s.o.Seed, err)
	}
	s.report.Violations = check.CheckAll(s.history, final, check.Options{Linearizability: s.o.Linearizability, LinearizabilityTimeout: 10 * time.Second, FreshReads: s.o.FreshReads})
	if v := s.moveProgress(); v != nil {
		s.report.Violations = append(s.report.Violations, v)
	}
	if v := s.regionLossProgress(); v != nil {
		s.report.Violations = append(s.report.Violations, v)
	}
	if s.scanBroken != nil {
		s.report.Violations = append([]*check.Violation{s.scanBroken}, s.report.Violations...)
	}
	if s.invariantBroken != nil {
		s.report.Violations = append([]*check.Violation{s.invariantBroken}, s.report.Violations...)
	}
	s.report.Ops = len(s.history)
	for _, op := range s.history {
		if op.Outcome == check.OK {
			s.report.OK++
		}
	}
	s.report.SimSeconds = float64(s.now) / 1e9
	s.report.TraceHash = s.hash.Sum64()
	return &s.report, nil
}

// finishWorkload has the protocol's workload judge the history and every node's final
// records.
func (s *simulator) finishWorkload() (*Report, error) {
	final := map[string][]storage.Record{}
	for _, n := range s.nodes {
		var recs []storage.Record
		err := n.engine.Scan(storage.KeyspaceSpan("sim"), 0, func(r storage.Record) bool {
			recs = append(recs, r)
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("sim: final read on %s: %w", n.cfg.Name, err)
		}
		final[n.cfg.Name] = recs
	}
	for _, v := range s.workload.Check(final) {
		checker, reason, _ := strings.Cut(v, ": ")
		s.report.Violations = append(s.report.Violations, &check.Violation{Checker: checker, Reason: reason})
	}
	if v := s.moveProgress(); v != nil {
		s.report.Violations = append(s.report.Violations, v)
	}
	if s.invariantBroken != nil {
		s.report.Violations = append([]*check.Violation{s.invariantBroken}, s.report.Violations...)
	}
	s.report.SimSeconds = float64(s.now) / 1e9
	s.report.TraceHash = s.hash.Sum64()
	return &s.report, nil
}

// fmtEnv renders a peer message for the trace: the protocol's own describer first (through
// the registry), then the messages the quorum family shares.
func fmtEnv(env *peerpb.Envelope) string {
	if p, ok := engine.LookupID(env.GetEngine()); ok && p.Sim.DescribeMessage != nil {
		if line, ok := p.Sim.DescribeMessage(env, vstr); ok {
			return line
		}
	}
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_Write:
		return fmt.Sprintf("%d->%d write %s=%s v=%s", env.From, env.To, m.Write.GetRecord().GetKey(), m.Write.GetRecord().GetValue(), vstr(m.Write.GetRecord().GetVersion()))
	case *peerpb.Envelope_WriteAck:
		return fmt.Sprintf("%d->%d write_ack %d", env.From, env.To, m.WriteAck.RequestId)
	case *peerpb.Envelope_Read:
		return fmt.Sprintf("%d->%d read %s", env.From, env.To, m.Read.Key)
	case *peerpb.Envelope_ReadReply:
		return fmt.Sprintf("%d->%d read_reply %d found=%v v=%s", env.From, env.To, m.ReadReply.RequestId, m.ReadReply.Found, vstr(m.ReadReply.GetRecord().GetVersion()))
	case *peerpb.Envelope_Heartbeat:
		return fmt.Sprintf("%d->%d heartbeat", env.From, env.To)
	default:
		return fmt.Sprintf("%d->%d %T", env.From, env.To, env.Msg)
	}
}

func vstr(v *peerpb.Version) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%d.%d@%d", v.WallNanos-epoch, v.Logical, v.NodeId)
}
