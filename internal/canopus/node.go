package canopus

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/engine"
	"meridian/internal/raftlog"
	"meridian/internal/storage"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// Options are one Canopus instance's timings and limits (config.CanopusOptions gives them from
// a keyspace's options; docs/canopus.md explains each).
type Options struct {
	// CycleInterval: a node with requests waiting starts its next cycle this long after its
	// last one (4.5.1; 5 ms in 4.6.2), or at once when BatchMax requests wait.
	CycleInterval time.Duration
	BatchMax      int
	// MaxInFlight is the pipeline depth p (4.5; the thesis leaves it undefined): a node
	// proposes cycle c only once it has committed cycle c−p. A membership change decided in
	// cycle c takes effect in cycle c+p+1, past every cycle any node may have computed.
	MaxInFlight int
	// Representatives is r (4.2.5): how many members of a super-leaf fetch the other
	// vertices' states (vertex v by the (v mod r)-th); any member fetches a state it has
	// waited FetchTimeout for.
	Representatives int
	TreeHeight      int
	FetchTimeout    time.Duration
	// Tick is the broadcast groups' Raft tick; HeartbeatTicks and ElectionTicks their
	// timings in ticks.
	Tick                          time.Duration
	HeartbeatTicks, ElectionTicks int
	// MaxBuffered bounds the proposal-requests held for states not computed yet (and the
	// reads being confirmed for the lease path).
	MaxBuffered int
	// WriteLeases turns on write leases (4.5.2, leases.go): reads of keys not written
	// recently are served at once. LeaseCycles is how many cycles a lease lasts.
	WriteLeases bool
	LeaseCycles int
	// ExcludeAfter turns on region exclusion (exclusion.go): a super-leaf that has stalled
	// the next cycle this long is reported, and the metadata group may exclude it. 0: off
	// (a lost super-leaf stalls the partition until it returns, 4.4).
	ExcludeAfter time.Duration
}

// Validate checks the options.
func (o Options) Validate() error {
	switch {
	case o.CycleInterval <= 0:
		return fmt.Errorf("canopus: cycle interval %v: want > 0", o.CycleInterval)
	case o.BatchMax < 1:
		return fmt.Errorf("canopus: batch max %d: want ≥ 1", o.BatchMax)
	case o.MaxInFlight < 1:
		return fmt.Errorf("canopus: max cycles in flight %d: want ≥ 1", o.MaxInFlight)
	case o.Representatives < 1:
		return fmt.Errorf("canopus: representatives %d: want ≥ 1", o.Representatives)
	case o.TreeHeight < 2:
		return fmt.Errorf("canopus: tree height %d: want ≥ 2", o.TreeHeight)
	case o.FetchTimeout <= 0 || o.Tick <= 0:
		return fmt.Errorf("canopus: fetch timeout %v, tick %v: want > 0", o.FetchTimeout, o.Tick)
	case o.HeartbeatTicks < 1 || o.ElectionTicks <= o.HeartbeatTicks:
		return fmt.Errorf("canopus: heartbeat %d ticks, election %d ticks: want 1 ≤ heartbeat < election", o.HeartbeatTicks, o.ElectionTicks)
	case o.MaxBuffered < 1:
		return fmt.Errorf("canopus: max buffered %d: want ≥ 1", o.MaxBuffered)
	case o.ExcludeAfter < 0 || (o.ExcludeAfter > 0 && o.TreeHeight != 2):
		return fmt.Errorf("canopus: exclude after %v with tree height %d: want 0 (off), or > 0 with tree height 2", o.ExcludeAfter, o.TreeHeight)
	case o.WriteLeases && o.LeaseCycles < 4*(o.MaxInFlight+1):
		return fmt.Errorf("canopus: lease of %d cycles: want at least 4×(max cycles in flight + 1) = %d, so that a key written often is renewed before its lease ends", o.LeaseCycles, 4*(o.MaxInFlight+1))
	}
	return nil
}

// Config builds one node's instance.
type Config struct {
	ID       uint32
	Members  []Member
	Topology *topology.Topology
	Options  Options
	// Rand draws proposal numbers (4.2.2); injected, so a simulated run replays.
	Rand *rand.Rand
	// Store holds the broadcast groups' logs under Prefix (raw keys).
	Store  engine.Reader
	Prefix []byte
	// Applied is what the instance stored with the last cycle it applied (nil: none).
	Applied *peerpb.CanopusApplied
	// ExcludedRegion and ExcludedFrom are the placement's exclusion of the partition when
	// the instance starts (SetExclusion; "" none, From 0 pending): the logs replay under it.
	ExcludedRegion     string
	ExcludedRound      uint64
	ExcludedFrom       uint64
	ExclusionCancelled uint64
	Mutation           string
	Logger             etcdraft.Logger
}

// Message is a message for another node's instance; the engine names the keyspace and
// partition.
type Message struct {
	To   uint32
	Body *peerpb.CanopusEnvelope
}

// Committed is a cycle the node committed: every node commits the same sets in the same
// order (Theorem 1).
type Committed struct {
	Cycle uint64
	// TimeNanos is the cycle's version time (above every earlier cycle's).
	TimeNanos int64
	Sets      []RequestSet
	// Own: this node's proposal of the cycle is in it; reads waiting for the cycle may be
	// served. Dropped are the requests the node proposed for the cycle that are not in it
	// (its epoch was closed first): they will never apply.
	Own     bool
	Dropped [][]byte
	// Applied is to be stored with the cycle's writes.
	Applied *peerpb.CanopusApplied
}

// Ready is the instance's output: Raw (the groups' logs) must be durable before Messages
// leave, as every engine's Ready.
type Ready struct {
	Messages  []Message
	Raw       []storage.RawOp
	Committed []Committed
	// ReadsNow are reads started by ReadNow that may be served now from the committed state
	// (every earlier Committed applied); ReadsFenced those that must wait for a cycle.
	ReadsNow    []uint64
	ReadsFenced []FencedRead
	// Exclusions are steps of a region's exclusion for the metadata group (exclusion.go).
	Exclusions []ExclusionReport
}

type vkey struct {
	cycle uint64
	v     VNode
}

type pkey struct{ cycle, epoch uint64 }

type epochSpan struct{ epoch, from uint64 }

type ownProp struct {
	p  *peerpb.CanopusProposal
	at time.Time
}

type want struct {
	since, fetchedAt time.Time
	tries            int
}

// bgroup is this node's replica of the broadcast group of super-leaf member owner (4.2.3):
// the owner proposes into it; every member reads every group's committed log, and derives
// from it the owner's proposal (or its absence) in each cycle.
type bgroup struct {
	owner uint32
	rn    *etcdraft.RawNode
	log   *raftlog.LogStore
	lead  uint64
	// props holds the first proposal of each (cycle, epoch) that precedes a close of the
	// epoch in the committed log; closed the epochs closed so far. Both are functions of the
	// log alone, so every member derives the same.
	props  map[pkey]*peerpb.CanopusProposal
	closed map[uint64]bool
	// applied is the index of the last committed entry handed to this node.
	applied uint64
	// reported is the highest committed cycle the owner reported in its proposals; entries
	// are the applied entries not compacted yet with the cycle each concerns (0: a close),
	// in log order (compact.go).
	reported uint64
	entries  []entryCycle
	// compactedCloses are the epochs closed by entries compacted away (stored, compact.go).
	compactedCloses map[uint64]bool
	// closeAt is when this node, leading the group, last proposed a close; leadSince when
	// it came to lead it.
	closeAt, leadSince time.Time
	// electionElapsed counts ticks without hearing the leader; at electionDeadline (drawn
	// from [ElectionTicks, 2·ElectionTicks)) a follower campaigns.
	electionElapsed, electionDeadline int
	// wedgeRound is the exclusion attempt whose wedge the group's log holds, not yet ended
	// by an unwedge (0: none; exclusion.go), wedgeIndex its super-leaf; unwedged the
	// attempts the log ended (a wedge of one proposed again later is void); wedgeAt is when
	// this node last proposed a wedge or an unwedge.
	wedgeRound uint64
	wedgeIndex int
	unwedged   map[uint64]bool
	wedgeAt    time.Time
	// compactedWedges is what the compacted entries' wedges amount to (compact.go).
	compactedWedges wedgeState
}

// Node is one node's Canopus instance (a keyspace partition's): a sans-IO state machine.
type Node struct {
	cfg   Config
	opts  Options
	lot   *LOT
	peers []uint32 // this super-leaf's members, sorted
	anc   []VNode  // anc[h]: this node's ancestor at height h (anc[0] unused)
	// children[h] are anc[h]'s children.
	children [][]VNode
	// index of this node among peers
	rank   int
	groups map[uint32]*bgroup
	// dirty: inputs arrived since advance last ran (settle).
	dirty bool

	now      time.Time
	tickedAt time.Time

	// committed is the last committed cycle; timeNanos its version time; epochs each
	// member's membership epochs by the cycle they start at.
	committed uint64
	timeNanos int64
	epochs    map[uint32][]epochSpan

	// proposed is the highest cycle of this node's proposals; target the highest cycle it
	// knows some node has started (self-synchronisation, 4.2.4).
	proposed, target uint64
	pending          []pendingWrite
	lastProposal     time.Time
	retriedAt        time.Time // the last look for proposals to make again
	own              map[uint64]*ownProp
	admits           []Admit

	states   map[vkey]*State
	wants    map[vkey]*want
	buffered map[vkey][]uint32
	nBuf     int
	rejoinAt time.Time

	// leases is the write-lease table (leases.go), leaseEnds its keys by the cycle their
	// last span ends, leaseAsked the keys this node asked a lease for (by the cycle it
	// asked in), confirming the reads waiting for their read index.
	leases     map[string][]leaseSpan
	leaseEnds  map[uint64][]string
	leaseAsked map[string]uint64
	confirming map[uint64]confirmRead

	// Region exclusion (exclusion.go): the placement's exclusion, the sibling states whose
	// super-leaf answered holding this one's (from the logs), the carried states proposed,
	// when the next cycle began to wait, when this node last reported.
	excl       exclusionState
	cancelled  uint64 // the last exclusion attempt the metadata group cancelled
	acked      map[vkey]bool
	carrying   map[vkey]bool
	stallSince time.Time
	reportAt   time.Time
	heardAt    map[int]time.Time // by super-leaf: the last fetch or state from one of its nodes

	out Ready
	err error
}

// NewNode loads (or founds) the instance's broadcast groups and its committed position.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Options.Validate(); err != nil {
		return nil, err
	}
	lot, err := NewLOT(cfg.Members, cfg.Topology, cfg.Options.TreeHeight)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, opts: cfg.Options, lot: lot, groups: map[uint32]*bgroup{},
		epochs: map[uint32][]epochSpan{}, own: map[uint64]*ownProp{}, states: map[vkey]*State{},
		wants: map[vkey]*want{}, buffered: map[vkey][]uint32{}, leases: map[string][]leaseSpan{},
		leaseEnds: map[uint64][]string{}, leaseAsked: map[string]uint64{}, confirming: map[uint64]confirmRead{},
		acked: map[vkey]bool{}, carrying: map[vkey]bool{}, heardAt: map[int]time.Time{}}
	n.peers = lot.SuperLeafOf(cfg.ID)
	if n.peers == nil {
		return nil, fmt.Errorf("canopus: node %d is not a member", cfg.ID)
	}
	n.rank = slices.Index(n.peers, cfg.ID)
	n.anc = make([]VNode, lot.Height+1)
	n.children = make([][]VNode, lot.Height+1)
	for h := 1; h <= lot.Height; h++ {
		n.anc[h], _ = lot.Ancestor(cfg.ID, h)
		n.children[h] = lot.Children(n.anc[h])
	}
	if a := cfg.Applied; a != nil {
		n.committed, n.timeNanos = a.GetCycle(), a.GetTimeNanos()
		for _, e := range a.GetEpochs() {
			n.epochs[e.GetNode()] = append(n.epochs[e.GetNode()], epochSpan{e.GetEpoch(), e.GetFromCycle()})
		}
	}
	n.proposed, n.target = n.committed, n.committed
	n.cancelled = cfg.ExclusionCancelled
	if cfg.ExcludedRegion != "" && n.exclOn() {
		if i := slices.Index(lot.SuperLeaves, cfg.ExcludedRegion); i >= 0 {
			n.excl = exclusionState{set: true, index: i, round: cfg.ExcludedRound, from: cfg.ExcludedFrom, seenAt: time.Time{}}
		}
	}
	if err := n.loadLeases(); err != nil {
		return nil, err
	}
	for _, owner := range n.peers {
		if err := n.loadGroup(owner); err != nil {
			return nil, err
		}
	}
	// A restarted node goes on after the proposals its log holds, committed or not: a second
	// proposal of the same cycle and epoch would be ignored (the first counts), and the
	// requests in it lost.
	me := n.groups[cfg.ID].log.Memory()
	first, _ := me.FirstIndex()
	last, _ := me.LastIndex()
	if last >= first {
		ents, err := me.Entries(first, last+1, 1<<62)
		if err != nil {
			return nil, fmt.Errorf("canopus: read own log: %w", err)
		}
		for _, ent := range ents {
			var ce peerpb.CanopusEntry
			if ent.GetType() != raftpb.EntryType_EntryNormal || proto.Unmarshal(ent.GetData(), &ce) != nil {
				continue
			}
			if p := ce.GetProposal(); p != nil && p.GetSet().GetNode() == cfg.ID {
				n.proposed = max(n.proposed, p.GetCycle())
				if p.GetCycle() > n.committed && n.own[p.GetCycle()] == nil {
					// Proposed again by maybePropose's retry if its group lost it.
					n.own[p.GetCycle()] = &ownProp{p: p, at: n.now}
				}
			}
		}
	}
	n.target = n.proposed
	n.dirty = true
	return n, nil
}

func (n *Node) groupPrefix(owner uint32) []byte {
	return append(append(append([]byte{}, n.cfg.Prefix...), 'g'), byte(owner>>24), byte(owner>>16), byte(owner>>8), byte(owner))
}

// loadGroup loads owner's group, or founds it from a snapshot at index 1 whose configuration
// is the super-leaf (every member the same way, so none waits for another to start it).
func (n *Node) loadGroup(owner uint32) error {
	name := fmt.Sprintf("canopus group of %d", owner)
	ls, err := raftlog.Load(n.cfg.Store, n.groupPrefix(owner), name)
	if err != nil {
		return err
	}
	hs, _, err := ls.Storage().InitialState()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	fresh := etcdraft.IsEmptyHardState(hs)
	if fresh {
		voters := make([]uint64, len(n.peers))
		for i, p := range n.peers {
			voters[i] = uint64(p)
		}
		snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(1), Term: proto.Uint64(1), ConfState: &raftpb.ConfState{Voters: voters}}}
		ops, err := ls.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(1)}, snap, nil)
		if err != nil {
			return err
		}
		n.out.Raw = append(n.out.Raw, ops...)
	}
	first, _ := ls.Storage().FirstIndex()
	rn, err := etcdraft.NewRawNode(&etcdraft.Config{
		ID:            uint64(n.cfg.ID),
		ElectionTick:  n.opts.ElectionTicks,
		HeartbeatTick: n.opts.HeartbeatTicks,
		Storage:       ls.Storage(),
		// Every committed entry is handed again at start: the derived state of the group
		// (proposals, closes, remote states) is rebuilt from the log.
		Applied:                   first - 1,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		Logger:                    n.cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	g := &bgroup{owner: owner, rn: rn, log: ls, props: map[pkey]*peerpb.CanopusProposal{}, closed: map[uint64]bool{}, compactedCloses: map[uint64]bool{}, unwedged: map[uint64]bool{}}
	if err := n.loadClosed(g); err != nil {
		return err
	}
	if err := n.loadWedges(g); err != nil {
		return err
	}
	n.groups[owner] = g
	if owner == n.cfg.ID {
		// Each node leads its own group (4.2.3), after a restart too: a peer that takes it
		// over closes the node's epoch.
		_ = rn.Campaign()
	}
	return nil
}

// Err is the fatal error that stopped the instance, if any (a log the raft library refused).
func (n *Node) Err() error { return n.err }

// Committed is the last committed cycle.
func (n *Node) Committed() uint64 { return n.committed }

// epochAt is member x's membership epoch in cycle c.
func (n *Node) epochAt(x uint32, c uint64) uint64 {
	var e uint64
	for _, s := range n.epochs[x] {
		if s.from <= c {
			e = s.epoch
		}
	}
	return e
}

// latestEpoch is member x's epoch in the newest cycles this node may compute.
func (n *Node) latestEpoch(x uint32) uint64 {
	spans := n.epochs[x]
	if len(spans) == 0 {
		return 0
	}
	return spans[len(spans)-1].epoch
}

// Closed reports whether this node is out of its super-leaf's cycles (its epoch closed, not
// yet readmitted): it cannot serve requests until it is readmitted.
func (n *Node) Closed() bool {
	return n.groups[n.cfg.ID].closed[n.latestEpoch(n.cfg.ID)]
}

// Write queues a write request (opaque bytes) of key for this node's next proposal (with
// write leases, the first one whose cycle the key's lease covers).
func (n *Node) Write(now time.Time, key, req []byte) {
	defer n.guard()
	n.now = now
	n.pending = append(n.pending, pendingWrite{key: key, req: req})
	n.dirty = true
}

// PendingWrites is how many writes wait for a proposal.
func (n *Node) PendingWrites() int { return len(n.pending) }

// ReadFence returns the cycle a read arriving now must wait for: the one after this node's
// newest proposal. Every write acknowledged before now is in a cycle this node had proposed
// in (a cycle commits only with every member's proposal or the close of its epoch), and a
// close of this node's epoch after its proposal of the fence cycle is ordered after it in its
// group's log, so the state after the fence cycle holds every such write (4.3: a read waits
// for the end of the next cycle). The read may be served once that cycle commits with Own.
func (n *Node) ReadFence(now time.Time) uint64 {
	defer n.guard()
	n.now = now
	f := n.fence()
	n.dirty = true
	return f
}

// fence is ReadFence without advancing.
func (n *Node) fence() uint64 {
	f := n.proposed + 1
	n.target = max(n.target, f)
	return f
}

// Tick advances time.
func (n *Node) Tick(now time.Time) {
	defer n.guard()
	n.now = now
	if n.tickedAt.IsZero() {
		n.tickedAt = now
	}
	ticked := false
	for k := 0; now.Sub(n.tickedAt) >= n.opts.Tick && k < 100; k++ {
		n.tickedAt = n.tickedAt.Add(n.opts.Tick)
		for _, id := range n.peers {
			n.tickGroup(n.groups[id])
		}
		ticked = true
	}
	if now.Sub(n.tickedAt) >= n.opts.Tick {
		n.tickedAt = now
	}
	// The timers advance looks at: the raft tick (fetch and proposal retries, closes,
	// rejoins), the cycle timer of waiting writes; anything else moves on input.
	if ticked || (len(n.pending) > 0 && now.Sub(n.lastProposal) >= n.opts.CycleInterval) {
		n.dirty = true
	}
}

// tickGroup advances g by one tick. A leader ticks normally (heartbeats, CheckQuorum); a
// follower advances etcd raft's election clock without campaigning and campaigns on this
// node's own timer, drawn from the injected generator (etcd raft draws its election timeouts
// from crypto/rand, which would make a simulated run impossible to replay), reset whenever
// the leader is heard from.
func (n *Node) tickGroup(g *bgroup) {
	if g.lead == uint64(n.cfg.ID) {
		g.rn.Tick()
		return
	}
	g.rn.TickQuiesced()
	g.electionElapsed++
	if g.electionDeadline == 0 {
		g.electionDeadline = n.opts.ElectionTicks + n.cfg.Rand.IntN(n.opts.ElectionTicks)
	}
	if g.electionElapsed < g.electionDeadline {
		return
	}
	g.electionElapsed = 0
	g.electionDeadline = n.opts.ElectionTicks + n.cfg.Rand.IntN(n.opts.ElectionTicks)
	_ = g.rn.Campaign()
}

// Step handles a message from another node's instance.
func (n *Node) Step(now time.Time, from uint32, env *peerpb.CanopusEnvelope) {
	defer n.guard()
	n.now = now
	switch b := env.GetBody().(type) {
	case *peerpb.CanopusEnvelope_Raft:
		g := n.groups[b.Raft.GetOwner()]
		if g == nil || !slices.Contains(n.peers, from) {
			return
		}
		var m raftpb.Message
		if err := proto.Unmarshal(b.Raft.GetMessage(), &m); err != nil {
			return // a corrupt message is a lost one
		}
		if m.GetFrom() != uint64(from) || m.GetTo() != uint64(n.cfg.ID) {
			return
		}
		if uint64(from) == g.lead {
			g.electionElapsed = 0
		}
		_ = g.rn.Step(&m)
	case *peerpb.CanopusEnvelope_Fetch:
		n.heard(from)
		f := b.Fetch
		c := f.GetCycle()
		v := VNode{int(f.GetHeight()), int(f.GetIndex())}
		if n.excl.from > 0 && v == n.exclVertex() && c < n.excl.from && c > 0 {
			// An excluded super-leaf's state of a cycle before its exclusion, which a
			// survivor may hold (exclusion.go, step 4).
			if st := n.states[vkey{c, v}]; st != nil {
				n.send(from, &peerpb.CanopusEnvelope{Body: &peerpb.CanopusEnvelope_State{State: encodeState(st)}})
			}
			return
		}
		if v.Height < 1 || v.Height > n.lot.Height || n.anc[v.Height] != v || c == 0 {
			return // not a vertex this node emulates
		}
		w, _ := n.lot.Ancestor(from, v.Height) // the requester's own vertex
		if n.Excluded() || n.excludedAt(w, c) {
			return
		}
		if c > n.committed+2*uint64(n.opts.MaxInFlight+1) {
			// No node proposes more than MaxInFlight cycles past its commits, and none
			// commits a cycle this node's super-leaf has not computed: this one is out of
			// reach until this node catches up through its groups' logs.
			return
		}
		n.target = max(n.target, c) // a proposal-request starts the cycle (4.2.4)
		n.takeCarried(from, v, f.GetCarried())
		if st := n.states[vkey{c, v}]; st != nil && n.mayAnswer(c, w) {
			n.answer(from, st)
			return
		}
		k := vkey{c, v}
		if c <= n.committed {
			// A committed cycle another super-leaf still needs (it lags, or lost it in a
			// crash): computed again from the proposals kept, if it is not too old.
			if !n.old(c) && n.computeUpTo(c, v.Height) {
				n.answer(from, n.states[k])
			}
			return
		}
		if slices.Contains(n.buffered[k], from) || n.nBuf >= n.opts.MaxBuffered {
			return // held already, or the buffer is full (the requester asks again)
		}
		n.buffered[k] = append(n.buffered[k], from) // buffered until computed (4.2.2)
		n.nBuf++
	case *peerpb.CanopusEnvelope_State:
		n.heard(from)
		st, err := decodeState(b.State)
		if err != nil {
			return
		}
		k := vkey{st.Cycle, st.VNode}
		if _, ok := n.wants[k]; !ok {
			return
		}
		if n.states[k] != nil && !(b.State.GetHoldsYours() && n.needsAck(k.v, k.cycle) && !n.acked[k]) {
			return // known, and acknowledged if that is needed
		}
		// A representative makes the state known to its whole super-leaf through its own
		// group (4.2.2, round i).
		n.propose(n.cfg.ID, &peerpb.CanopusEntry{Body: &peerpb.CanopusEntry_Remote{Remote: b.State}})
	case *peerpb.CanopusEnvelope_Rejoin:
		// Any member carries a readmission (every member of a super-leaf may be closed, and
		// none of them can propose): a peer checks the close in the owner's group; another
		// super-leaf's member cannot, and a needless readmission only starts a new epoch.
		if from == n.cfg.ID || !slices.Contains(n.lot.Emulators(n.lot.Root()), from) {
			return
		}
		e := b.Rejoin.GetEpoch()
		if n.latestEpoch(from) != e || (slices.Contains(n.peers, from) && !n.groups[from].closed[e]) {
			return
		}
		a := Admit{Node: from, Epoch: e}
		if !slices.Contains(n.admits, a) {
			n.admits = append(n.admits, a)
		}
		n.target = max(n.target, n.proposed+1)
	}
	n.dirty = true
}

func (n *Node) send(to uint32, body *peerpb.CanopusEnvelope) {
	n.out.Messages = append(n.out.Messages, Message{To: to, Body: body})
}

// propose appends an entry to owner's group (forwarded to its leader by etcd raft when this
// node does not lead it).
func (n *Node) propose(owner uint32, ent *peerpb.CanopusEntry) {
	b, err := proto.Marshal(ent)
	if err != nil {
		n.fail(fmt.Errorf("canopus: encode entry: %w", err))
		return
	}
	_ = n.groups[owner].rn.Propose(b) // dropped without a leader: retried by its owner's timers
}

// guard turns a panic of etcd raft — its answer to a log that lost acknowledged entries, a
// broken durability assumption — into the node's fatal error: the node stops, visibly, rather
// than the process.
func (n *Node) guard() {
	if r := recover(); r != nil {
		n.fail(fmt.Errorf("canopus: a broadcast group refused this node's log (%v): its durable state was lost or corrupted; the instance stops", r))
	}
}

func (n *Node) fail(err error) {
	if n.err == nil {
		n.err = err
	}
}

// settle runs advance once for every input since the last one (Step, Write, ReadFence, Tick
// and SetExclusion only mark the node dirty): under load the runtime hands a node many
// messages before it asks for a Ready, and advance walks every cycle in flight, so running it
// per input cost a third of a loaded node's CPU (pprof, docs/canopus.md "CPU per operation").
// What advance does depends only on the state the inputs left, not on when it runs.
func (n *Node) settle() {
	if n.dirty {
		n.dirty = false
		n.advance()
	}
}

// HasReady reports whether there is output (after settling the inputs so far).
func (n *Node) HasReady() bool {
	defer n.guard()
	n.settle()
	if len(n.out.Messages) > 0 || len(n.out.Raw) > 0 || len(n.out.Committed) > 0 || len(n.out.ReadsNow) > 0 || len(n.out.ReadsFenced) > 0 || len(n.out.Exclusions) > 0 {
		return true
	}
	for _, id := range n.peers {
		if n.groups[id].rn.HasReady() {
			return true
		}
	}
	return false
}

// Ready returns the output since the last call.
func (n *Node) Ready() Ready {
	defer n.guard()
	n.settle()
	for range 4 { // applying entries may produce more raft work; a few passes take it
		progressed := false
		for _, id := range n.peers {
			if n.groups[id].rn.HasReady() {
				n.readyGroup(n.groups[id])
				progressed = true
			}
		}
		if !progressed {
			break
		}
		n.advance()
	}
	rd := n.out
	n.out = Ready{}
	return rd
}

func (n *Node) readyGroup(g *bgroup) {
	rd := g.rn.Ready()
	if ss := rd.SoftState; ss != nil {
		if ss.Lead != g.lead && ss.Lead != etcdraft.None {
			// Proposals made without a leader were dropped: make them again now.
			if g.owner == n.cfg.ID {
				for _, op := range n.own {
					op.at = time.Time{}
				}
				n.retriedAt = time.Time{}
			}
			g.closeAt = time.Time{}
		}
		g.lead = ss.Lead
		g.electionElapsed = 0
	}
	if !etcdraft.IsEmptySnap(rd.Snapshot) && rd.Snapshot.GetMetadata().GetIndex() > 1 {
		// Logs are compacted only behind what every member has committed (compact.go): a
		// member that still needs a snapshot has lost its state, which a state transfer
		// would have to restore.
		n.fail(fmt.Errorf("canopus: group of %d sent a snapshot at index %d: this node's log is behind every compaction (its storage was lost); it needs a state transfer", g.owner, rd.Snapshot.GetMetadata().GetIndex()))
		return
	}
	ops, err := g.log.Save(rd.HardState, rd.Snapshot, rd.Entries)
	if err != nil {
		n.fail(err)
		return
	}
	n.out.Raw = append(n.out.Raw, ops...)
	for _, m := range rd.Messages {
		b, err := proto.Marshal(m)
		if err != nil {
			n.fail(fmt.Errorf("canopus: encode raft message: %w", err))
			continue
		}
		n.send(uint32(m.GetTo()), &peerpb.CanopusEnvelope{Body: &peerpb.CanopusEnvelope_Raft{Raft: &peerpb.CanopusRaft{Owner: g.owner, Message: b}}})
		if m.GetType() == raftpb.MessageType_MsgSnap {
			// A broadcast group's only snapshot is its founding one (its log is never
			// compacted: a node rebuilds what it knows from the whole log), which travels
			// in the message itself. Reported done at once, so that a lost MsgSnap leaves
			// the follower in probe (retried) rather than paused for ever.
			g.rn.ReportSnapshot(m.GetTo(), etcdraft.SnapshotFinish)
		}
	}
	if g.owner == n.cfg.ID {
		n.confirmReads(rd.ReadStates)
	}
	for _, ent := range rd.CommittedEntries {
		if ent.GetType() != raftpb.EntryType_EntryNormal || len(ent.GetData()) == 0 {
			continue
		}
		var ce peerpb.CanopusEntry
		if err := proto.Unmarshal(ent.GetData(), &ce); err != nil {
			n.fail(fmt.Errorf("canopus: group of %d: entry %d: %w", g.owner, ent.GetIndex(), err))
			continue
		}
		n.applyEntry(g, &ce)
		ec := entryCycle{index: ent.GetIndex(), cycle: entryCycleOf(&ce)}
		if cl := ce.GetClose(); cl != nil {
			ec.close, ec.epoch = true, cl.GetEpoch()
		}
		if w := ce.GetWedge(); w != nil {
			ec.wedge, ec.round, ec.wedgeIndex = true, w.GetRound(), int(w.GetIndex())
		}
		if w := ce.GetUnwedge(); w != nil {
			ec.unwedge, ec.round = true, w.GetRound()
		}
		g.entries = append(g.entries, ec)
	}
	if k := len(rd.CommittedEntries); k > 0 {
		g.applied = rd.CommittedEntries[k-1].GetIndex()
	}
	g.rn.Advance(rd)
}

// applyEntry folds a committed entry of g into what the node knows.
func (n *Node) applyEntry(g *bgroup, ce *peerpb.CanopusEntry) {
	switch b := ce.GetBody().(type) {
	case *peerpb.CanopusEntry_Proposal:
		p := b.Proposal
		g.reported = max(g.reported, p.GetCommitted())
		k := pkey{p.GetCycle(), p.GetEpoch()}
		if g.closed[k.epoch] || g.props[k] != nil {
			return // after the close of its epoch, or a copy: the first one counts
		}
		if n.old(k.cycle) {
			return // committed long ago (replayed at a restart): nothing reads it again
		}
		g.props[k] = p
		n.target = max(n.target, k.cycle) // a peer started the cycle (4.2.4)
	case *peerpb.CanopusEntry_Close:
		g.closed[b.Close.GetEpoch()] = true
		if n.cfg.Mutation == MutationClosesFirst && !g.compactedCloses[b.Close.GetEpoch()] {
			g.compactedCloses[b.Close.GetEpoch()] = true
			n.out.Raw = append(n.out.Raw, n.closedOp(g))
		}
	case *peerpb.CanopusEntry_Remote:
		st, err := decodeState(b.Remote)
		if err != nil || n.old(st.Cycle) || n.ignoresRemote(g, st.VNode, st.Cycle) {
			return
		}
		k := vkey{st.Cycle, st.VNode}
		// With exclusion on, a sibling's state of a committed cycle is kept too (until old):
		// after an exclusion the survivors fetch the excluded super-leaf's states from each
		// other, and a restarted survivor must still hold what its logs hold.
		keepCommitted := st.VNode.Height < n.lot.Height-1 || n.exclOn()
		if st.VNode.Height >= 1 && (st.Cycle > n.committed || keepCommitted) && st.VNode.Height < n.lot.Height && n.anc[st.VNode.Height] != st.VNode {
			if n.states[k] == nil {
				n.states[k] = &st
			}
			if b.Remote.GetHoldsYours() {
				n.acked[k] = true
			}
			if !n.needsAck(k.v, k.cycle) || n.acked[k] {
				delete(n.wants, k)
			}
			// Fetches from that vertex's nodes waited for this super-leaf to hold it.
			n.flush(vkey{st.Cycle, n.anc[st.VNode.Height]})
		}
		n.target = max(n.target, st.Cycle)
	case *peerpb.CanopusEntry_Wedge:
		r, i := b.Wedge.GetRound(), int(b.Wedge.GetIndex())
		if g.wedgeRound == 0 && r != 0 && !g.unwedged[r] && i < len(n.lot.SuperLeaves) {
			g.wedgeRound, g.wedgeIndex = r, i
		}
	case *peerpb.CanopusEntry_Unwedge:
		// Bounded like wedgeState.apply, so that a restart from the stored state agrees.
		if r := b.Unwedge.GetRound(); r != 0 && (g.unwedged[r] || len(g.unwedged) < maxUnwedged) {
			g.unwedged[r] = true
			if g.wedgeRound == r {
				g.wedgeRound = 0
			}
		}
	}
}

// contribution is member x's round-1 state in cycle c: its proposal, empty (its epoch closed
// before it proposed), or not known yet.
func (n *Node) contribution(x uint32, c uint64) (st *State, known bool) {
	g := n.groups[x]
	e := n.epochAt(x, c)
	if p := g.props[pkey{c, e}]; p != nil {
		s := Proposal(c, x, p.GetNumber(), p.GetSet().GetRequests())
		s.Sets[0].StampNanos = p.GetSet().GetStampNanos()
		s.Sets[0].LeaseKeys = p.GetSet().GetLeaseKeys()
		for _, a := range p.GetSet().GetAdmits() {
			s.Sets[0].Admits = append(s.Sets[0].Admits, Admit{a.GetNode(), a.GetEpoch()})
		}
		return &s, true
	}
	if g.closed[e] {
		return nil, true
	}
	return nil, false
}

// contributionKnown reports whether member x's round-1 state in cycle c is known.
func (n *Node) contributionKnown(x uint32, c uint64) bool {
	g := n.groups[x]
	e := n.epochAt(x, c)
	return g.props[pkey{c, e}] != nil || g.closed[e]
}

// compute derives what it can of cycle c's states, bottom up; it reports whether the root
// state is known.
func (n *Node) compute(c uint64) bool { return n.computeUpTo(c, n.lot.Height) }

// computeUpTo derives cycle c's states of this node's vertices up to height top.
func (n *Node) computeUpTo(c uint64, top int) bool {
	if c > n.committed+uint64(n.opts.MaxInFlight)+1 {
		return false // membership of cycle c may not be decided yet
	}
	for h := 1; h <= top; h++ {
		v := n.anc[h]
		k := vkey{c, v}
		if n.states[k] != nil {
			continue
		}
		var children []State
		if h == 1 {
			// Known for every member first (cheap), then built.
			for _, x := range n.peers {
				if !n.contributionKnown(x, c) {
					return false
				}
			}
			for _, x := range n.peers {
				if st, _ := n.contribution(x, c); st != nil {
					children = append(children, *st)
				}
			}
		} else {
			// Present for every child first (registering the fetches of the missing
			// siblings), then gathered.
			missing := false
			for _, ch := range n.children[h] {
				if n.excludedAt(ch, c) {
					continue // out of the partition from this cycle on (exclusion.go)
				}
				k := vkey{c, ch}
				if n.states[k] == nil || (n.needsAck(ch, c) && !n.acked[k] && c > n.committed) {
					missing = true
					if ch != n.anc[h-1] && c > n.committed {
						n.need(k)
					}
				}
			}
			if missing {
				return false
			}
			for _, ch := range n.children[h] {
				if !n.excludedAt(ch, c) {
					children = append(children, *n.states[vkey{c, ch}])
				}
			}
		}
		st := State{Cycle: c, VNode: v}
		if len(children) > 0 {
			var err error
			if st, err = Merge(c, v, children); err != nil {
				n.fail(err)
				return false
			}
		}
		if n.cfg.Mutation == MutationMergeOrder && h == n.lot.Height && n.cfg.ID%2 == 1 {
			slices.Reverse(st.Sets)
		}
		n.states[k] = &st
		n.flush(k)
	}
	return true
}

// need notes that this node waits for a sibling vertex's state.
func (n *Node) need(k vkey) {
	if _, ok := n.wants[k]; !ok {
		n.wants[k] = &want{since: n.now}
	}
}

// advance runs the protocol as far as the node's knowledge lets it.
func (n *Node) advance() {
	if n.err != nil || n.Excluded() {
		return
	}
	// Compute and commit cycles in order (4.5.1: never out of order).
	root := n.lot.Root()
	for c := n.committed + 1; c <= n.committed+uint64(n.opts.MaxInFlight)+1 && c <= max(n.target, n.proposed); c++ {
		if c > n.committed+1 && n.states[vkey{c, root}] != nil {
			continue // computed; it commits after the cycles before it
		}
		// Every cycle in the pipeline is computed as far as it can be (its fetches go out
		// now, not when the cycles before it have committed); commits stay in order.
		if !n.compute(c) {
			continue
		}
		if c == n.committed+1 {
			n.commit(c)
		}
	}
	n.maybePropose()
	n.maybeCompact()
	n.resolveReads()
	n.fetch()
	n.closeSilent()
	n.maybeRejoin()
	n.maintainExclusion()
}

// commit commits cycle c, whose root state is known.
func (n *Node) commit(c uint64) {
	root := n.states[vkey{c, n.lot.Root()}]
	t := n.timeNanos + 1
	own := false
	for _, s := range root.Sets {
		t = max(t, s.StampNanos)
		if s.Node == n.cfg.ID {
			own = true
		}
	}
	// Membership updates take effect MaxInFlight+1 cycles on (Options.MaxInFlight).
	for _, s := range root.Sets {
		for _, a := range s.Admits {
			if n.latestEpoch(a.Node) == a.Epoch && slices.Contains(n.lot.Emulators(n.lot.Root()), a.Node) {
				n.epochs[a.Node] = append(n.epochs[a.Node], epochSpan{a.Epoch + 1, c + uint64(n.opts.MaxInFlight) + 1})
			}
		}
	}
	n.applyLeases(c, root.Sets)
	for k, at := range n.leaseAsked {
		if at <= c {
			delete(n.leaseAsked, k) // its cycle committed: the lease is decided (or asked again)
		}
	}
	var dropped [][]byte
	if op := n.own[c]; op != nil && !own {
		dropped = op.p.GetSet().GetRequests()
	}
	delete(n.own, c)
	n.committed, n.timeNanos = c, t
	n.stallSince = n.now
	n.prune()
	n.out.Committed = append(n.out.Committed, Committed{Cycle: c, TimeNanos: t, Sets: root.Sets, Own: own, Dropped: dropped, Applied: n.appliedState()})
}

// keep is how many committed cycles a node keeps the proposals and states of: another
// super-leaf may still fetch a state of them. No node is more than MaxInFlight+1 cycles behind
// the slowest super-leaf's commits (a cycle needs every super-leaf's state, and a node proposes
// only MaxInFlight cycles past its own commits), so twice that is enough.
func (n *Node) keep() uint64 { return uint64(2*n.opts.MaxInFlight + 2) }

// old reports whether committed cycle c is past the window kept for fetches.
func (n *Node) old(c uint64) bool { return c+n.keep() <= n.committed }

// prune drops what no longer serves: states and wants of committed cycles, proposals long
// committed, epoch spans superseded before the committed cycle.
func (n *Node) prune() {
	c := n.committed
	for k := range n.states {
		if n.old(k.cycle) || (k.cycle <= c && k.v.Height == n.lot.Height) {
			delete(n.states, k)
		}
	}
	for k := range n.wants {
		if k.cycle <= c {
			delete(n.wants, k)
		}
	}
	for k := range n.acked {
		if k.cycle <= c {
			delete(n.acked, k)
		}
	}
	for k := range n.carrying {
		if k.cycle <= c {
			delete(n.carrying, k)
		}
	}
	for k, to := range n.buffered {
		if k.cycle <= c {
			n.nBuf -= len(to)
			delete(n.buffered, k)
		}
	}
	for _, g := range n.groups {
		for k := range g.props {
			if n.old(k.cycle) {
				delete(g.props, k)
			}
		}
	}
	low := uint64(0)
	if c > n.keep() {
		low = c - n.keep()
	}
	for x, spans := range n.epochs {
		i := 0
		for i+1 < len(spans) && spans[i+1].from <= low {
			i++
		}
		n.epochs[x] = spans[i:]
	}
}

func (n *Node) appliedState() *peerpb.CanopusApplied {
	a := &peerpb.CanopusApplied{Cycle: n.committed, TimeNanos: n.timeNanos}
	for _, x := range slices.Sorted(maps.Keys(n.epochs)) {
		for _, s := range n.epochs[x] {
			a.Epochs = append(a.Epochs, &peerpb.CanopusEpoch{Node: x, Epoch: s.epoch, FromCycle: s.from})
		}
	}
	return a
}

// maybePropose starts this node's next cycles: on the cycle timer or a full batch when
// requests wait, and at once for a cycle another node started (self-synchronisation, 4.2.4);
// never beyond the pipeline depth, never skipping a cycle (4.5.1). It also proposes again a
// proposal its group has not committed after an election timeout (etcd raft drops proposals
// it has no leader for).
func (n *Node) maybePropose() {
	me := n.groups[n.cfg.ID]
	if n.Closed() {
		return
	}
	for n.proposed < n.committed+uint64(n.opts.MaxInFlight) {
		next := n.proposed + 1
		due := n.target >= next || n.admitting(next) ||
			(len(n.pending) > 0 && (len(n.pending) >= n.opts.BatchMax || n.now.Sub(n.lastProposal) >= n.opts.CycleInterval)) ||
			len(n.admits) > 0
		if !due {
			break
		}
		if n.epochAt(n.cfg.ID, next) != n.latestEpoch(n.cfg.ID) {
			// Readmitted from a later cycle: the cycles before it are not this node's.
			spans := n.epochs[n.cfg.ID]
			n.proposed = max(n.proposed, spans[len(spans)-1].from-1)
			continue
		}
		set := &peerpb.CanopusSet{Node: n.cfg.ID, StampNanos: n.now.UnixNano()}
		n.takePending(set, next)
		for _, a := range n.admits {
			set.Admits = append(set.Admits, &peerpb.CanopusAdmit{Node: a.Node, Epoch: a.Epoch})
		}
		n.admits = nil
		p := &peerpb.CanopusProposal{Cycle: next, Epoch: n.epochAt(n.cfg.ID, next), Number: n.cfg.Rand.Uint64(), Set: set, Committed: n.committed}
		n.own[next] = &ownProp{p: p, at: n.now}
		n.proposed = next
		n.target = max(n.target, next)
		n.lastProposal = n.now
		n.propose(n.cfg.ID, &peerpb.CanopusEntry{Body: &peerpb.CanopusEntry_Proposal{Proposal: p}})
	}
	// A proposal whose cycle has not committed after an election timeout may have been
	// dropped (no leader, or a leader change): propose it again. The first copy in the log
	// counts; the others are ignored.
	if n.now.Sub(n.retriedAt) < n.opts.Tick {
		return // looked at within this tick
	}
	n.retriedAt = n.now
	retry := 2 * time.Duration(n.opts.HeartbeatTicks) * n.opts.Tick
	for c := n.committed + 1; c <= n.proposed; c++ {
		op := n.own[c]
		if op == nil || n.now.Sub(op.at) < retry || me.props[pkey{c, op.p.GetEpoch()}] != nil {
			continue
		}
		op.at = n.now
		n.propose(n.cfg.ID, &peerpb.CanopusEntry{Body: &peerpb.CanopusEntry_Proposal{Proposal: op.p}})
	}
}

// admitting reports whether a readmission takes effect at or after cycle c: the super-leaf's
// members drive cycles to it (with no requests, cycles would not start and the readmitted
// member would wait for ever).
func (n *Node) admitting(c uint64) bool {
	for _, x := range n.peers {
		if spans := n.epochs[x]; len(spans) > 0 && spans[len(spans)-1].from >= c {
			return true
		}
	}
	return false
}

// takePending moves into set the pending writes its cycle may carry (at most BatchMax, in
// arrival order): with write leases, those whose key's lease is active in cycle c; for the
// others, and for leases about to end, it asks for the lease (4.5.2).
func (n *Node) takePending(set *peerpb.CanopusSet, c uint64) {
	ask := func(key []byte) {
		if _, asked := n.leaseAsked[string(key)]; !asked {
			n.leaseAsked[string(key)] = c
			set.LeaseKeys = append(set.LeaseKeys, key)
		}
	}
	kept := n.pending[:0]
	renewBy := c + 2*uint64(n.opts.MaxInFlight+1)
	for _, w := range n.pending {
		if len(set.Requests) >= n.opts.BatchMax {
			kept = append(kept, w)
			continue
		}
		if !n.leaseActive(w.key, c) {
			ask(w.key)
			kept = append(kept, w)
			continue
		}
		if n.opts.WriteLeases && n.leaseEnd(w.key, c) <= renewBy {
			ask(w.key) // written still: renewed before it ends
		}
		set.Requests = append(set.Requests, w.req)
	}
	clear(n.pending[len(kept):])
	n.pending = kept
}

// fetch asks an emulator for each sibling state this node needs: the representative for the
// vertex at once, every other member after FetchTimeout (4.2.5: a representative that fails
// is replaced).
func (n *Node) fetch() {
	if len(n.wants) == 0 {
		return
	}
	r := min(n.opts.Representatives, len(n.peers))
	var keys []vkey // the wants due now, in a deterministic order
	for k, w := range n.wants {
		rep := n.rank == k.v.Index%r
		if !rep && n.now.Sub(w.since) < n.opts.FetchTimeout {
			continue
		}
		if !w.fetchedAt.IsZero() && n.now.Sub(w.fetchedAt) < n.opts.FetchTimeout {
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b vkey) int {
		if c := cmp.Compare(a.cycle, b.cycle); c != 0 {
			return c
		}
		if c := cmp.Compare(a.v.Height, b.v.Height); c != 0 {
			return c
		}
		return cmp.Compare(a.v.Index, b.v.Index)
	})
	for _, k := range keys {
		w := n.wants[k]
		ems := n.lot.Emulators(k.v)
		if n.excl.from > 0 && k.v == n.exclVertex() {
			ems = n.survivors() // before its exclusion: a survivor holds its state
		}
		if len(ems) == 0 {
			continue
		}
		to := ems[(n.rank+w.tries)%len(ems)]
		w.tries++
		w.fetchedAt = n.now
		f := &peerpb.CanopusFetch{Cycle: k.cycle, Height: uint32(k.v.Height), Index: uint32(k.v.Index)}
		if n.exclOn() && k.v.Height == 1 && !(n.excl.from > 0 && k.v == n.exclVertex()) {
			// The ack rule: the answer comes once the other super-leaf holds this one's state.
			if own := n.states[vkey{k.cycle, n.anc[k.v.Height]}]; own != nil {
				f.Carried = encodeState(own)
			}
		}
		n.send(to, &peerpb.CanopusEnvelope{Body: &peerpb.CanopusEnvelope_Fetch{Fetch: f}})
	}
}

// closeSilent closes the epoch of a member whose group this node has come to lead (4.2.3:
// when a member fails, a new leader is elected for its group and ends it): its cycles with no
// proposal before the close are empty, so the super-leaf goes on without it. It hands the
// group back once the owner, readmitted, is active again.
func (n *Node) closeSilent() {
	timeout := time.Duration(n.opts.ElectionTicks) * n.opts.Tick
	for _, x := range n.peers {
		if x == n.cfg.ID {
			continue
		}
		g := n.groups[x]
		if g.lead != uint64(n.cfg.ID) {
			g.leadSince = time.Time{}
			continue
		}
		if g.leadSince.IsZero() {
			g.leadSince = n.now
		}
		pr, ok := g.rn.Status().Progress[uint64(x)]
		if ok && pr.RecentActive {
			// The owner is back: it leads its group again (closed or not; once readmitted it
			// proposes into it).
			g.rn.TransferLeader(uint64(x))
			continue
		}
		e := n.latestEpoch(x)
		if g.closed[e] || n.now.Sub(g.leadSince) < timeout || n.now.Sub(g.closeAt) < timeout {
			continue
		}
		g.closeAt = n.now
		n.propose(x, &peerpb.CanopusEntry{Body: &peerpb.CanopusEntry_Close{Close: &peerpb.CanopusClose{Epoch: e}}})
	}
}

// maybeRejoin asks the super-leaf to readmit this node once its epoch is closed.
func (n *Node) maybeRejoin() {
	if !n.Closed() {
		return
	}
	if !n.rejoinAt.IsZero() && n.now.Sub(n.rejoinAt) < time.Duration(n.opts.ElectionTicks)*n.opts.Tick {
		return
	}
	n.rejoinAt = n.now
	for _, p := range n.lot.Emulators(n.lot.Root()) {
		if p != n.cfg.ID {
			n.send(p, &peerpb.CanopusEnvelope{Body: &peerpb.CanopusEnvelope_Rejoin{Rejoin: &peerpb.CanopusRejoin{Epoch: n.latestEpoch(n.cfg.ID)}}})
		}
	}
}

// Describe is a one-line summary for traces and invariants.
func (n *Node) Describe() string {
	var wants []string
	for _, k := range slices.SortedFunc(maps.Keys(n.wants), func(a, b vkey) int { return cmp.Compare(a.cycle, b.cycle) }) {
		if len(wants) == 4 {
			wants = append(wants, "...")
			break
		}
		wants = append(wants, fmt.Sprintf("%d/%v(state %v, ack %v)", k.cycle, k.v, n.states[k] != nil, n.acked[k]))
	}
	excl := "none"
	if n.excl.set {
		excl = fmt.Sprintf("%s round %d from %d", n.lot.SuperLeaves[n.excl.index], n.excl.round, n.excl.from)
	}
	return fmt.Sprintf("committed=%d proposed=%d target=%d states=%d wants=%v closed=%v exclusion=%s", n.committed, n.proposed, n.target, len(n.states), wants, n.Closed(), excl)
}

func encodeState(st *State) *peerpb.CanopusState {
	out := &peerpb.CanopusState{Cycle: st.Cycle, Height: uint32(st.VNode.Height), Index: uint32(st.VNode.Index), Number: st.Number, Drawer: st.Drawer}
	for _, s := range st.Sets {
		ps := &peerpb.CanopusSet{Node: s.Node, Requests: s.Requests, StampNanos: s.StampNanos, LeaseKeys: s.LeaseKeys}
		for _, a := range s.Admits {
			ps.Admits = append(ps.Admits, &peerpb.CanopusAdmit{Node: a.Node, Epoch: a.Epoch})
		}
		out.Sets = append(out.Sets, ps)
	}
	return out
}

// maxSetsPerState bounds a decoded state (a hostile or corrupt message).
const maxSetsPerState = 1 << 16

func decodeState(p *peerpb.CanopusState) (State, error) {
	if p.GetCycle() == 0 || p.GetHeight() == 0 || len(p.GetSets()) > maxSetsPerState {
		return State{}, fmt.Errorf("canopus: malformed state (cycle %d, height %d, %d sets)", p.GetCycle(), p.GetHeight(), len(p.GetSets()))
	}
	st := State{Cycle: p.GetCycle(), VNode: VNode{int(p.GetHeight()), int(p.GetIndex())}, Number: p.GetNumber(), Drawer: p.GetDrawer()}
	for _, s := range p.GetSets() {
		rs := RequestSet{Node: s.GetNode(), Requests: s.GetRequests(), StampNanos: s.GetStampNanos(), LeaseKeys: s.GetLeaseKeys()}
		for _, a := range s.GetAdmits() {
			rs.Admits = append(rs.Admits, Admit{a.GetNode(), a.GetEpoch()})
		}
		st.Sets = append(st.Sets, rs)
	}
	return st, nil
}

// SameSets reports whether two committed cycles hold the same sets in the same order (the
// simulator's identical-log invariant).
func SameSets(a, b []RequestSet) bool {
	return slices.EqualFunc(a, b, func(x, y RequestSet) bool {
		return x.Node == y.Node && slices.EqualFunc(x.Requests, y.Requests, bytes.Equal)
	})
}

// Mutations of the core (each must be caught by the simulator).
const (
	// MutationMergeOrder: odd-numbered nodes order the root's request sets the other way.
	MutationMergeOrder = "merge-order-differs"
)
