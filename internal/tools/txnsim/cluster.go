// Package txnsim runs transactions over Geo-SDUR (internal/sdur) on a simulated geo-distributed
// cluster: every partition's atomic broadcast is an etcd raft group (go.etcd.io/raft/v3) whose
// replicas sit on nodes in the topology's regions, every message is delayed by its region pair's
// one-way delay, and time is virtual. The same run is both the deterministic simulation (seeded
// faults: message loss and duplication, delay spikes, crashes with restarts that replay the
// log, region cuts; histories checked for serializability and replicas for convergence) and the
// benchmark that reproduces the paper's figures (latency per class and region, throughput,
// abort rates) — no wall clock, so a run of minutes of virtual time takes seconds.
package txnsim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	etcdraft "go.etcd.io/raft/v3"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"meridian/internal/tools/tpcc"

	"meridian/internal/sdur"
	"meridian/internal/topology"
	"meridian/internal/twopc"
)

// event is one scheduled action of the simulation.
type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int)                   { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)                     { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any                       { old := *h; n := len(old); e := old[n-1]; *h = old[:n-1]; return e }
func (h eventHeap) peek() *event                    { return h[0] }
func (s *cluster) after(d time.Duration, fn func()) { s.at(s.now+d, fn) }
func (s *cluster) at(t time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: t, seq: s.seq, fn: fn})
}

// partition is one partition: its replicas (node indexes) and its preferred server (IV-A).
type partition struct {
	id        uint32
	replicas  []int
	preferred int
}

// version is one committed value of a key at a replica (MVCC, versioned by snapshot counter).
type version struct {
	index uint64
	value []int64
	txn   sdur.TxnID
}

// group is one replica of a partition on a node: its Raft member, its SDUR replica and its
// multiversion store.
type group struct {
	part    *partition
	storage *etcdraft.MemoryStorage
	rn      *etcdraft.RawNode
	// rep is the transaction mode's replica (SDUR, 2PC) fed by the log.
	rep     replica
	store   map[string][]version
	applied []sdur.TxnID // the commit sequence, for the convergence check
	// readWait are reads waiting for the replica's snapshot counter to reach theirs.
	readWait    []*readReq
	leaderSince time.Duration
	// appliedIndex is the last log index delivered to rep; durable the last saved state; conf
	// the Raft configuration.
	appliedIndex uint64
	durable      *durableState
	conf         *raftpb.ConfState
	// electionAt: a follower that has heard nothing from a leader until then campaigns. The
	// simulator draws election timeouts from its seeded source (etcd raft's own come from
	// crypto/rand: followers tick with TickQuiesced so that raft never draws one), as the
	// raft engine does.
	electionAt time.Duration
}

// completedGlobal is a global's completion at a replica.
type completedGlobal struct {
	index uint64
	parts []uint32
}

// node is one server.
type node struct {
	id     uint32 // 1-based, the Raft ID
	idx    int
	region string
	up     bool
	epoch  int // incremented at every crash: events of an older epoch are void
	groups map[uint32]*group
	// the submitter's transactions in flight, by ID
	submitted map[sdur.TxnID]*submission
	seq       uint64
	// latest is the newest snapshot vector this node has received (read-only transactions).
	latest snapVector
}

// cluster is the simulated system.
type cluster struct {
	// tpcc draws the TPC-C-like workload's transactions (Workload TPCC).
	tpcc  *tpcc.Gen
	opts  Options
	topo  *topology.Topology
	rng   *rand.Rand
	now   time.Duration
	seq   uint64
	q     eventHeap
	nodes []*node
	parts []*partition
	// entries are the broadcast payloads; a Raft entry carries the index of one (the
	// simulator's encoding; the product encodes them as protobuf).
	mode mode
	// cut[a][b]: messages from region a to region b are dropped.
	cut map[[2]string]bool
	// fifo is the last delivery time per (from, to) link.
	fifo  map[[2]int]time.Duration
	stats *Stats
	delay *delayer
	seqr  *sequencer
	err   error
}

// newGroup creates (or, after a crash, recreates from its durable log) the replica of part on n.
func (s *cluster) newGroup(n *node, p *partition, storage *etcdraft.MemoryStorage, d *durableState) (*group, error) {
	var rep replica
	var err error
	if d != nil {
		rep, err = s.mode.restore(s, p, d.rep)
	} else {
		rep, err = s.mode.newReplica(s, p)
	}
	if err != nil {
		return nil, err
	}
	fresh := storage == nil
	if fresh {
		storage = etcdraft.NewMemoryStorage()
	}
	cfg := &etcdraft.Config{
		ID:              uint64(n.id),
		ElectionTick:    s.opts.ElectionTicks,
		HeartbeatTick:   1,
		Storage:         storage,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		CheckQuorum:     true,
		PreVote:         true,
		Logger:          discardLogger{},
		// A restarted replica with a saved state is delivered the entries after it; without
		// one (Applied 0), its whole log again, to a fresh replica (deterministic replay
		// rebuilds the pending list, the counters and the store).
	}
	if d != nil {
		cfg.Applied = d.index
	}
	rn, err := etcdraft.NewRawNode(cfg)
	if err != nil {
		return nil, fmt.Errorf("partition %d on node %d: %w", p.id, n.id, err)
	}
	if fresh {
		peers := make([]etcdraft.Peer, 0, len(p.replicas))
		for _, r := range p.replicas {
			peers = append(peers, etcdraft.Peer{ID: uint64(s.nodes[r].id)})
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("bootstrap partition %d on node %d: %w", p.id, n.id, err)
		}
	}
	if !fresh {
		hs, _, err := storage.InitialState()
		if err != nil {
			return nil, fmt.Errorf("partition %d on node %d: %w", p.id, n.id, err)
		}
		rep.setReplay(hs.GetCommit())
	}
	g := &group{part: p, storage: storage, rn: rn, rep: rep, store: map[string][]version{}}
	if d != nil {
		g.appliedIndex, g.durable, g.conf = d.index, d, d.conf
		for k, vs := range d.store {
			g.store[k] = slices.Clone(vs)
		}
		g.applied = slices.Clone(d.applied)
	}
	return g, nil
}

// saveAll saves every up replica's state (every SaveEvery).
func (s *cluster) saveAll() {
	for _, n := range s.nodes {
		if !n.up {
			continue
		}
		for _, pid := range s.partIDs(n) {
			s.save(n.groups[pid])
		}
	}
	s.after(s.opts.SaveEvery, s.saveAll)
}

// durableState is a replica's saved state (what the product keeps on disk beside the Raft log):
// the mode's replica state at a log index, the store and the commit sequence then, and the
// Raft configuration.
type durableState struct {
	index   uint64
	rep     any
	store   map[string][]version
	applied []sdur.TxnID
	conf    *raftpb.ConfState
}

// save records g's durable state at its applied index (modes that can save their state), and
// the configuration into the Raft storage's snapshot metadata, so that a restart can begin
// after it.
func (s *cluster) save(g *group) {
	if g.conf == nil || (g.durable != nil && g.durable.index == g.appliedIndex) || g.appliedIndex == 0 {
		return
	}
	st, ok := g.rep.save()
	if !ok {
		return
	}
	d := &durableState{index: g.appliedIndex, rep: st, store: make(map[string][]version, len(g.store)), applied: slices.Clone(g.applied), conf: g.conf}
	for k, vs := range g.store {
		d.store[k] = slices.Clone(vs)
	}
	if _, err := g.storage.CreateSnapshot(g.appliedIndex, g.conf, nil); err != nil {
		s.fail(fmt.Errorf("partition %d: save at %d: %w", g.part.id, g.appliedIndex, err))
		return
	}
	g.durable = d
	s.stats.Saves++
}

// raftMsg is a Raft message of one partition's group.
type raftMsg struct {
	part uint32
	m    *raftpb.Message
}

// send delivers fn at node `to` after the one-way delay from node `from`, subject to faults.
func (s *cluster) send(from, to int, fn func(n *node)) {
	a, b := s.nodes[from], s.nodes[to]
	if s.cut[[2]string{a.region, b.region}] {
		return
	}
	d := s.topo.OneWay(a.region, b.region)
	if from == to {
		d = 0
	}
	f := s.opts.Faults
	if from != to {
		if f.Loss > 0 && s.rng.Float64() < f.Loss {
			return
		}
		if s.opts.JitterFrac > 0 {
			d += time.Duration(s.rng.Float64() * s.opts.JitterFrac * float64(d))
		}
		d += s.opts.IntraDelay
		if f.SpikeProb > 0 && s.rng.Float64() < f.SpikeProb {
			d += time.Duration(s.rng.Float64() * float64(f.Spike))
		}
	}
	copies := 1
	if from != to && f.Dup > 0 && s.rng.Float64() < f.Dup {
		copies = 2
	}
	// Links are FIFO, as the product's gRPC streams over TCP are (the lab's router keeps order
	// too): jitter and spikes delay a message and everything behind it, never reorder. (With
	// reordering, Raft followers reject appends that arrive out of order and their leader
	// falls back to one append per round trip.)
	link := [2]int{from, to}
	at := s.now + d
	if last := s.fifo[link]; at < last {
		at = last
	}
	s.fifo[link] = at
	epoch := b.epoch
	for c := range copies {
		extra := time.Duration(c) * time.Millisecond
		s.at(at+extra, func() {
			if !b.up || b.epoch != epoch {
				return
			}
			fn(b)
			s.flush(b)
		})
	}
}

// flush processes every group of n that has something ready.
func (s *cluster) flush(n *node) {
	if !n.up {
		return
	}
	for _, pid := range s.partIDs(n) {
		g := n.groups[pid]
		for range 1000 { // bounded: each round consumes one Ready
			if !g.rn.HasReady() {
				break
			}
			s.handleReady(n, g)
		}
		s.drainReplica(n, g)
	}
}

// drainReplica carries out what the mode's replica asks, then serves the reads that waited
// for its counter.
func (s *cluster) drainReplica(n *node, g *group) {
	g.rep.drain(s, n, g)
	s.serveWaitingReads(n, g)
}

// applyWrites applies a committed transaction's n writes (write(i): key, value, deletion) to
// g's store at version index.
func (s *cluster) applyWrites(g *group, index uint64, txn sdur.TxnID, n int, write func(i int) (string, []byte, bool)) {
	for i := range n {
		k, value, deleted := write(i)
		var list []int64
		if !deleted {
			list = decodeList(value)
		}
		g.store[k] = append(g.store[k], version{index: index, value: list, txn: txn})
	}
	g.applied = append(g.applied, txn)
}

func (s *cluster) partIDs(n *node) []uint32 {
	ids := make([]uint32, 0, len(n.groups))
	for id := range n.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// handleReady persists, sends and applies one Raft Ready (etcd raft's contract: entries and
// hard state durable before messages leave).
func (s *cluster) handleReady(n *node, g *group) {
	rd := g.rn.Ready()
	if !etcdraft.IsEmptyHardState(rd.HardState) {
		if err := g.storage.SetHardState(rd.HardState); err != nil {
			s.fail(fmt.Errorf("node %d partition %d: set hard state: %w", n.id, g.part.id, err))
		}
	}
	if len(rd.Entries) > 0 {
		if err := g.storage.Append(rd.Entries); err != nil {
			s.fail(fmt.Errorf("node %d partition %d: append: %w", n.id, g.part.id, err))
		}
	}
	sync := time.Duration(0)
	if len(rd.Entries) > 0 || !etcdraft.IsEmptyHardState(rd.HardState) {
		sync = s.opts.DiskSync
	}
	for _, m := range rd.Messages {
		to := s.nodeByID(uint32(m.GetTo()))
		if to < 0 {
			continue
		}
		msg := raftMsg{part: g.part.id, m: m}
		if sync > 0 {
			from, epoch := n.idx, n.epoch
			s.after(sync, func() {
				if n.up && n.epoch == epoch {
					s.send(from, to, func(dst *node) { s.stepRaft(dst, msg) })
				}
			})
			continue
		}
		s.send(n.idx, to, func(dst *node) { s.stepRaft(dst, msg) })
	}
	for _, ent := range rd.CommittedEntries {
		if ent.GetType() != raftpb.EntryType_EntryNormal || len(ent.GetData()) == 0 {
			if ent.GetType() == raftpb.EntryType_EntryConfChange {
				var cc raftpb.ConfChange
				if err := proto.Unmarshal(ent.GetData(), &cc); err == nil {
					g.conf = g.rn.ApplyConfChange(&cc)
				}
			}
			g.appliedIndex = ent.GetIndex()
			continue
		}
		payload, err := s.decodePayload(ent.GetData())
		if err != nil {
			s.fail(fmt.Errorf("node %d partition %d: entry %d: %w", n.id, g.part.id, ent.GetIndex(), err))
			continue
		}
		g.rep.deliver(s, n, g, ent.GetIndex(), payload)
		g.appliedIndex = ent.GetIndex()
	}
	if rd.SoftState != nil && rd.SoftState.RaftState == etcdraft.StateLeader && g.leaderSince < 0 {
		g.leaderSince = s.now
	}
	g.rn.Advance(rd)
}

// resetElection draws the next election deadline of a follower.
func (s *cluster) resetElection(g *group) {
	et := time.Duration(s.opts.ElectionTicks) * s.opts.RaftTick
	g.electionAt = s.now + et + time.Duration(s.rng.Int64N(int64(et)))
}

func (s *cluster) stepRaft(n *node, msg raftMsg) {
	g := n.groups[msg.part]
	if g == nil {
		return
	}
	switch msg.m.GetType() {
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgSnap:
		s.resetElection(g)
	}
	_ = g.rn.Step(msg.m) // a message for an older term or a removed peer is refused; Raft retries
}

// clock returns the virtual time as a time.Time for the cores.
func (s *cluster) clock() time.Time { return time.Unix(0, 0).Add(s.now) }

func (s *cluster) nodeByID(id uint32) int {
	if id == 0 || int(id) > len(s.nodes) {
		return -1
	}
	return int(id) - 1
}

func (s *cluster) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// propose appends an entry to partition pid's log from node n: through its own replica if it
// has one (Raft forwards to the leader), else through the nearest replica.
func (s *cluster) propose(n *node, pid uint32, e any) {
	data, err := s.encodePayload(e)
	if err != nil {
		s.fail(err)
		return
	}
	if g := n.groups[pid]; g != nil {
		_ = g.rn.Propose(data) // dropped without a leader: the submitter's retry covers it
		s.flush(n)
		return
	}
	to := s.nearestReplica(n, s.parts[pid])
	s.send(n.idx, to, func(dst *node) {
		if g := dst.groups[pid]; g != nil {
			_ = g.rn.Propose(data)
		}
	})
}

// Log payloads: entries travel in their wire form (sdur.EncodeEntry, twopc.EncodeEntry: what the
// product's logs hold), so that every seed also checks the encodings; a tag byte says whose.
const (
	payloadWire  = 'W'
	payloadTwopc = 'P'
)

func (s *cluster) encodePayload(e any) ([]byte, error) {
	if se, ok := e.(sdur.Entry); ok {
		b, err := sdur.EncodeEntry(se)
		if err != nil {
			return nil, err
		}
		return append([]byte{payloadWire}, b...), nil
	}
	if te, ok := e.(twopc.Entry); ok {
		b, err := twopc.EncodeEntry(te)
		if err != nil {
			return nil, err
		}
		return append([]byte{payloadTwopc}, b...), nil
	}
	return nil, fmt.Errorf("log payload of type %T has no wire form", e)
}

func (s *cluster) decodePayload(data []byte) (any, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty payload")
	}
	switch data[0] {
	case payloadWire:
		return sdur.DecodeEntry(data[1:], sdur.DefaultWireLimits)
	case payloadTwopc:
		return twopc.DecodeEntry(data[1:], twopc.DefaultLimits)
	}
	return nil, fmt.Errorf("payload tag %q", data[0])
}

// nearestReplica returns the replica of p nearest to n (up or not: the sender cannot know),
// preferring the preferred server among equals.
func (s *cluster) nearestReplica(n *node, p *partition) int {
	best, bestD := -1, time.Duration(1<<62)
	for _, r := range p.replicas {
		d := s.topo.OneWay(n.region, s.nodes[r].region)
		if r == n.idx {
			d = -1
		}
		if d < bestD || (d == bestD && r == p.preferred) {
			best, bestD = r, d
		}
	}
	return best
}

// tick drives Raft ticks, SDUR timers, leader steering and tick entries on every node.
func (s *cluster) tick() {
	for _, n := range s.nodes {
		if !n.up {
			continue
		}
		for _, pid := range s.partIDs(n) {
			g := n.groups[pid]
			st := g.rn.Status()
			if st.RaftState == etcdraft.StateLeader {
				g.rn.Tick()
			} else {
				g.rn.TickQuiesced()
				if s.now >= g.electionAt {
					_ = g.rn.Campaign()
					s.resetElection(g)
				}
			}
			g.rep.setLeader(st.RaftState == etcdraft.StateLeader)
			g.rep.tick(s, n, g)
			if st.RaftState == etcdraft.StateLeader {
				// The preferred server leads when it can (IV-A): hand leadership back once it
				// has caught up.
				pref := s.nodes[g.part.preferred]
				if pref.idx != n.idx && pref.up {
					if pr, ok := st.Progress[uint64(pref.id)]; ok && pr.Match == st.Progress[uint64(n.id)].Match {
						g.rn.TransferLeader(uint64(pref.id))
					}
				}
			}
		}
		s.flush(n)
	}
	s.after(s.opts.RaftTick, s.tick)
}

// crash stops node i: its volatile state is gone; its Raft log (MemoryStorage, the durable
// part) stays.
func (s *cluster) crash(i int) {
	n := s.nodes[i]
	if !n.up {
		return
	}
	n.up = false
	n.epoch++

	n.submitted = map[sdur.TxnID]*submission{}
	s.stats.Crashes++
}

// restart brings node i back: each replica restarts from its log, delivered again from the
// start to a fresh SDUR replica.
func (s *cluster) restart(i int) {
	n := s.nodes[i]
	if n.up {
		return
	}
	for _, pid := range s.partIDs(n) {
		old := n.groups[pid]
		// Only what was appended (durable) survives: the MemoryStorage is the disk, with the
		// last saved state.
		g, err := s.newGroup(n, old.part, old.storage, old.durable)
		if err != nil {
			s.fail(err)
			return
		}
		if old.durable != nil {
			s.stats.Restores++
		}
		g.leaderSince = -1
		s.resetElection(g)
		n.groups[pid] = g
	}
	n.up = true
	s.flush(n)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type discardLogger struct{}

func (discardLogger) Debug(...any)              {}
func (discardLogger) Debugf(string, ...any)     {}
func (discardLogger) Error(...any)              {}
func (discardLogger) Errorf(string, ...any)     {}
func (discardLogger) Info(...any)               {}
func (discardLogger) Infof(string, ...any)      {}
func (discardLogger) Warning(...any)            {}
func (discardLogger) Warningf(string, ...any)   {}
func (discardLogger) Fatal(v ...any)            { panic(fmt.Sprint(v...)) }
func (discardLogger) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
func (discardLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (discardLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
