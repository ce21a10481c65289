package elascass

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"meridian/internal/placement"
)

// Node states (as the cluster metadata names them).
const (
	StateJoining         = "joining"
	StateActive          = "active"
	StateDecommissioning = "decommissioning"
)

// Member is one node as the driver sees it.
type Member struct {
	ID     uint32
	Name   string
	Region string
	State  string
	// Alive: its statistics are fresh. DownFor: how long they have not been (0 when alive).
	Alive   bool
	DownFor time.Duration
	// CPU is the node's utilisation in [0, 1] (ElasCass 3.2 uses CPU usage; Meridian's nodes
	// report the process's, or an emulated capacity's).
	CPU float64
	// LoadOps is the requests per second the node served.
	LoadOps float64
	// Interference is the node's interference index when Hubbub-scale's detector has flagged
	// it (internal/hubbub: its service time over the healthy nodes' at the same load); 0 or
	// ≤ 1: not interfered. An interfered node's share of its region's replicas is weighted
	// by 1/index, it is the first source of moves, and a destination only when no other
	// node can take one.
	Interference float64
}

// weight is the member's share weight: 1, or 1/index when interfered.
func (m *Member) weight() float64 { return 1 / max(1, m.Interference) }

// interfered reports whether the detector flagged the member.
func (m *Member) interfered() bool { return m.Interference > 1 }

// PartKey names a partition.
type PartKey struct {
	Keyspace  string
	Partition uint32
}

// ReplicaStat is one replica's size and heat on one node.
type ReplicaStat struct {
	Bytes int64
	// Hits is the exponential moving average of the replica's hits per second (Eq. 3).
	Hits float64
}

// PartitionStat is a partition's size and heat over its replicas.
type PartitionStat struct {
	// Known: some replica reported the partition as it is now (a split or merge since, or
	// a move, can leave it unmeasured for an interval); splits and merges need it.
	Known bool
	// Bytes is the data volume (the largest replica's).
	Bytes int64
	// Rate is the requests per second on the partition (all coordinators).
	Rate float64
	// Heat is the partition's requests per second smoothed by Eq. 3's moving average (the
	// sum of its coordinators' hits): what a replica of it costs the node that holds it,
	// up to a factor that is the same for every partition of a region.
	Heat float64
	// SplitKey is the key at the middle of the data volume; LoadSplitKey the key at the
	// middle of the recent requests (nil: not known).
	SplitKey, LoadSplitKey []byte
}

// KeyspaceOptions are a keyspace's elasticity settings (keyspace options elastic_*, with
// documented defaults: config.ElasticOptionsOf).
type KeyspaceOptions struct {
	// MaxBytes is Θmax: a larger partition splits (0: never by size).
	MaxBytes int64
	// MinBytes is Θmin: adjacent partitions on the same replicas together below it merge
	// (0: never). MaxBytes ≥ 2·MinBytes, so a merge does not split again and a split does
	// not merge again.
	MinBytes int64
	// SplitOps: a partition with more requests per second splits at its load median (0:
	// never by load).
	SplitOps float64
	// MinPartitions is N: merges stop there.
	MinPartitions int
	// Repartition: the keyspace's protocol splits and merges (config.ProtocolSpec).
	Repartition bool
	// NoRejoin: a node never takes back a partition it left (Raft).
	NoRejoin bool
}

// Keyspace is a keyspace the driver manages: its placement and settings.
type Keyspace struct {
	*placement.Keyspace
	Options KeyspaceOptions
}

// State is everything a plan depends on.
type State struct {
	Now       time.Time
	Members   []Member
	Keyspaces []Keyspace
	// Replicas are the replica statistics by node.
	Replicas   map[uint32]map[PartKey]ReplicaStat
	Partitions map[PartKey]PartitionStat
}

// Strategy is how a new node gets its data.
type Strategy string

const (
	// TwoPhase is ElasCass's: phase 1 takes little (Rule 2, a share of the heavily loaded
	// nodes' replicas), the node serves, phase 2 takes the rest in the background.
	TwoPhase Strategy = "two-phase"
	// OnePhase takes the whole share R̄ before the node counts as bootstrapped.
	OnePhase Strategy = "one-phase"
	// SplitMove is Cassandra's (ElasCass 2.1): the new node takes half of the data of the
	// region's largest node, contiguous in key order, before it serves; nothing is balanced
	// afterwards.
	SplitMove Strategy = "split-move"
)

// Options are the driver's settings. Zero values take the defaults of EnsureDefaults.
type Options struct {
	Strategy Strategy
	// HeavyCPU and HeavyAbove: a node is heavily loaded when its CPU is above HeavyCPU and
	// above the mean by more than HeavyAbove (a fraction): ElasCass's 50% and 20%.
	HeavyCPU, HeavyAbove float64
	// PhaseOneShare: the share of a heavily loaded node's replicas phase 1 takes (10%).
	PhaseOneShare float64
	// MaxMovesPerNode bounds the moves in flight into one node (the phase-2 throttle), and
	// MaxMoves those of the cluster.
	MaxMovesPerNode, MaxMoves int
	// MaxRepartitions bounds the splits and merges proposed per plan.
	MaxRepartitions int
	// DeadAfter: a node silent this long has its replicas re-created (Rule 2). AbortAfter:
	// a move into a node silent this long is aborted.
	DeadAfter, AbortAfter time.Duration
	// StalledAfter: a move the driver has seen in flight this long is aborted, whatever the
	// reason it has not finished (its partition goes back to the old set, which never
	// stopped serving, and the driver may plan again): the bound on how long any move may hold
	// a partition in its two-set state (default 10 minutes: at the default bandwidth a move of
	// a Θmax partition takes seconds). CockroachDB's replicate queue likewise removes a learner
	// whose snapshot never completed.
	StalledAfter time.Duration
	// TargetByteImbalance and TargetLoadImbalance are what refinement aims for within a
	// region once Rule 4 has balanced its replica counts (defaults 0.05 and 0.10; the paper
	// reports < 0.2). Negative: that metric is not refined.
	TargetByteImbalance, TargetLoadImbalance float64
	// SettleFor: refinement waits until a region has had no move, join or decommission for
	// this long, so the statistics it weighs describe the placement as it is (default 5 s).
	SettleFor time.Duration
	// MinLoadOps: below this many requests per second in a region, its load is noise and
	// only bytes are refined (default 10).
	MinLoadOps float64
}

// EnsureDefaults fills the zero fields.
func (o *Options) EnsureDefaults() {
	if o.Strategy == "" {
		o.Strategy = TwoPhase
	}
	if o.HeavyCPU == 0 {
		o.HeavyCPU = 0.5
	}
	if o.HeavyAbove == 0 {
		o.HeavyAbove = 0.2
	}
	if o.PhaseOneShare == 0 {
		o.PhaseOneShare = 0.1
	}
	if o.MaxMovesPerNode == 0 {
		o.MaxMovesPerNode = 2
	}
	if o.MaxMoves == 0 {
		o.MaxMoves = 16
	}
	if o.MaxRepartitions == 0 {
		o.MaxRepartitions = 4
	}
	if o.DeadAfter == 0 {
		o.DeadAfter = 5 * time.Minute
	}
	if o.StalledAfter == 0 {
		o.StalledAfter = 10 * time.Minute
	}
	if o.AbortAfter == 0 {
		o.AbortAfter = 30 * time.Second
	}
	if o.TargetByteImbalance == 0 {
		o.TargetByteImbalance = 0.05
	}
	if o.TargetLoadImbalance == 0 {
		o.TargetLoadImbalance = 0.10
	}
	if o.SettleFor == 0 {
		o.SettleFor = 5 * time.Second
	}
	if o.MinLoadOps == 0 {
		o.MinLoadOps = 10
	}
}

// Validate checks the options.
func (o *Options) Validate() error {
	switch o.Strategy {
	case TwoPhase, OnePhase, SplitMove:
	default:
		return fmt.Errorf("elascass: strategy %q is not two-phase, one-phase or split-move", o.Strategy)
	}
	if o.HeavyCPU < 0 || o.HeavyCPU > 1 || o.PhaseOneShare <= 0 || o.PhaseOneShare > 1 || o.HeavyAbove < 0 {
		return fmt.Errorf("elascass: heavy cpu %v, heavy above %v, phase-one share %v out of range", o.HeavyCPU, o.HeavyAbove, o.PhaseOneShare)
	}
	if o.TargetByteImbalance > 1 || o.TargetLoadImbalance > 1 || o.SettleFor < 0 || o.MinLoadOps < 0 {
		return fmt.Errorf("elascass: imbalance targets %v/%v (at most 1, negative: off), settle for %v, min load %v out of range",
			o.TargetByteImbalance, o.TargetLoadImbalance, o.SettleFor, o.MinLoadOps)
	}
	if o.MaxMovesPerNode < 1 || o.MaxMoves < 1 || o.MaxRepartitions < 0 || o.DeadAfter <= 0 || o.AbortAfter <= 0 || o.StalledAfter <= 0 {
		return fmt.Errorf("elascass: move bounds %d/%d, repartitions %d, dead after %v, abort after %v out of range",
			o.MaxMovesPerNode, o.MaxMoves, o.MaxRepartitions, o.DeadAfter, o.AbortAfter)
	}
	return nil
}

// ActionKind names a change the driver asks for.
type ActionKind int

const (
	ActSplit ActionKind = iota + 1
	ActMerge
	ActStartMove
	ActAbortMove
	ActNodeState
)

func (k ActionKind) String() string {
	return [...]string{"", "split", "merge", "move", "abort-move", "node-state"}[k]
}

// Action is one metadata change. Every action is conditional in the metadata (a split or
// merge on the keyspace's version, a move's end on its ID, a state change on the state it
// comes from), so one planned from a stale view fails harmlessly.
type Action struct {
	Kind      ActionKind
	Keyspace  string
	Version   uint64 // the keyspace version it was planned at (splits, merges)
	Partition uint32
	SplitKey  []byte
	Move      placement.Move // Add, Remove, Source (start); ID (abort)
	Node      uint32
	State     string
	From      string // the node state it comes from
	Why       string
}

func (a Action) String() string {
	switch a.Kind {
	case ActSplit:
		return fmt.Sprintf("split %s/%d at %q (%s)", a.Keyspace, a.Partition, a.SplitKey, a.Why)
	case ActMerge:
		return fmt.Sprintf("merge %s/%d with its right neighbour (%s)", a.Keyspace, a.Partition, a.Why)
	case ActStartMove:
		return fmt.Sprintf("move %s/%d from n%d to n%d, source n%d (%s)", a.Keyspace, a.Partition, a.Move.Remove, a.Move.Add, a.Move.Source, a.Why)
	case ActAbortMove:
		return fmt.Sprintf("abort move %d of %s/%d (%s)", a.Move.ID, a.Keyspace, a.Partition, a.Why)
	case ActNodeState:
		return fmt.Sprintf("node n%d %s → %s (%s)", a.Node, a.From, a.State, a.Why)
	}
	return "?"
}

// Driver plans. It keeps, between plans, only what a joining node's bootstrap has asked for
// (its phase-1 moves); everything else is recomputed from the state each time.
type Driver struct {
	opts Options
	// phaseOne is, per joining node, the moves its first phase asked for (by partition).
	phaseOne map[uint32]map[PartKey]bool
	// phaseOneRound is, per joining node, the plan (round) that asked for its first phase;
	// round counts the plans.
	phaseOneRound map[uint32]uint64
	round         uint64
	// busyAt is, per region, the last plan that saw it changing (a move in flight, a node
	// joining or leaving) or changed it: refinement waits SettleFor after it.
	busyAt map[string]time.Time
	// splitFrom is, per node joining by split-move, the node whose data it takes half of.
	splitFrom map[uint32]uint32
	// moveSeen is, per move in flight, when a plan first saw it (StalledAfter).
	moveSeen map[uint64]time.Time
	// refinedAt is, per region, when its recent refinements were planned (refineWait).
	refinedAt map[string][]time.Time
}

// New returns a driver.
func New(opts Options) (*Driver, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Driver{opts: opts, phaseOne: map[uint32]map[PartKey]bool{}, phaseOneRound: map[uint32]uint64{}, busyAt: map[string]time.Time{},
		refinedAt: map[string][]time.Time{}, moveSeen: map[uint64]time.Time{}, splitFrom: map[uint32]uint32{}}, nil
}

// Options returns the driver's options.
func (d *Driver) Options() Options { return d.opts }

// plan is one planning pass's working state.
type plan struct {
	d       *Driver
	st      State
	members map[uint32]*Member
	// held counts each node's replicas (and incoming moves) per region; busy counts moves
	// into a node and out of it; moving is the cluster's moves in flight.
	held    map[uint32]int
	bytes   map[uint32]int64
	in, out map[uint32]int
	moving  int
	taken   map[PartKey]bool // partitions touched by this plan
	actions []Action
}

// Plan returns the actions to take now, in the order to take them.
func (d *Driver) Plan(st State) []Action {
	d.round++
	p := &plan{d: d, st: st, members: map[uint32]*Member{}, held: map[uint32]int{}, bytes: map[uint32]int64{},
		in: map[uint32]int{}, out: map[uint32]int{}, taken: map[PartKey]bool{}}
	for i := range st.Members {
		p.members[st.Members[i].ID] = &st.Members[i]
	}
	// A node's first phase is forgotten once it is no longer joining (kept until then, so a
	// plan made before its activation applied does not ask for a first phase again).
	for id := range d.phaseOne {
		if m := p.members[id]; m == nil || m.State != StateJoining {
			delete(d.phaseOne, id)
			delete(d.phaseOneRound, id)
			delete(d.splitFrom, id)
		}
	}
	p.count()
	p.abortDeadMoves()
	p.repartition()
	p.nodeStates()
	p.decommission()
	p.rereplicate()
	p.bootstrap()
	p.balance()
	p.refine()
	return p.actions
}

// count tallies replicas, bytes and moves per node.
func (p *plan) count() {
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			key := PartKey{ks.Spec.Name, part.ID}
			for _, r := range part.Replicas {
				p.held[r]++
				p.bytes[r] += p.st.Partitions[key].Bytes
			}
			if mv := part.Move; mv != nil {
				p.held[mv.Add]++
				p.bytes[mv.Add] += p.st.Partitions[key].Bytes
				p.in[mv.Add]++
				p.out[mv.Remove]++
				p.moving++
			}
		}
	}
}

func (p *plan) add(a Action) {
	p.actions = append(p.actions, a)
	if a.Kind == ActStartMove || a.Kind == ActSplit || a.Kind == ActMerge || a.Kind == ActAbortMove {
		p.taken[PartKey{a.Keyspace, a.Partition}] = true
	}
	if a.Kind == ActStartMove {
		p.held[a.Move.Add]++
		p.held[a.Move.Remove]--
		key := PartKey{a.Keyspace, a.Partition}
		p.bytes[a.Move.Add] += p.st.Partitions[key].Bytes
		p.bytes[a.Move.Remove] -= p.st.Partitions[key].Bytes
		p.in[a.Move.Add]++
		p.out[a.Move.Remove]++
		p.moving++
	}
}

// abortDeadMoves aborts moves into a node that has been silent for AbortAfter: its catch-up
// cannot finish, and the partition cannot move again until the move is over.
func (p *plan) abortDeadMoves() {
	live := map[uint64]bool{}
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			mv := part.Move
			if mv == nil {
				continue
			}
			m := p.members[mv.Add]
			seen, ok := p.d.moveSeen[mv.ID]
			if !ok {
				seen = p.st.Now
				p.d.moveSeen[mv.ID] = seen
			}
			live[mv.ID] = true
			switch {
			case m == nil || (!m.Alive && m.DownFor >= p.d.opts.AbortAfter):
				p.add(Action{Kind: ActAbortMove, Keyspace: ks.Spec.Name, Partition: part.ID, Move: *mv,
					Why: "the new replica's node is down"})
			case p.st.Now.Sub(seen) >= p.d.opts.StalledAfter:
				p.add(Action{Kind: ActAbortMove, Keyspace: ks.Spec.Name, Partition: part.ID, Move: *mv,
					Why: fmt.Sprintf("in flight for %v without finishing", p.st.Now.Sub(seen).Round(time.Second))})
			}
		}
	}
	for id := range p.d.moveSeen {
		if !live[id] {
			delete(p.d.moveSeen, id)
		}
	}
}

// repartition splits partitions above Θmax (at their volume median) or hotter than the
// split rate (at their load median), and merges adjacent partitions on the same replicas
// below Θmin (ElasCass 3.1; Rule 1: not while they move).
func (p *plan) repartition() {
	budget := p.d.opts.MaxRepartitions
	for _, ks := range p.st.Keyspaces {
		o := ks.Options
		if !o.Repartition || budget <= 0 {
			continue
		}
		name := ks.Spec.Name
		for i := range ks.Partitions {
			if budget <= 0 {
				break
			}
			part := &ks.Partitions[i]
			key := PartKey{name, part.ID}
			stat := p.st.Partitions[key]
			if part.Move != nil || p.taken[key] || !stat.Known {
				continue
			}
			var at []byte
			why := ""
			switch {
			case o.MaxBytes > 0 && stat.Bytes > o.MaxBytes && validSplit(part, stat.SplitKey):
				at, why = stat.SplitKey, fmt.Sprintf("%d bytes > Θmax %d", stat.Bytes, o.MaxBytes)
			case o.SplitOps > 0 && stat.Rate > o.SplitOps && validSplit(part, stat.LoadSplitKey):
				at, why = stat.LoadSplitKey, fmt.Sprintf("%.0f requests/s > %.0f", stat.Rate, o.SplitOps)
			default:
				continue
			}
			p.add(Action{Kind: ActSplit, Keyspace: name, Version: ks.Version, Partition: part.ID, SplitKey: at, Why: why})
			budget--
		}
		if o.MinBytes <= 0 || len(ks.Partitions) <= max(o.MinPartitions, 1) || budget <= 0 {
			continue
		}
		// One merge per keyspace and plan: a merge changes the neighbours' indexes.
		for i := 0; i+1 < len(ks.Partitions); i++ {
			l, r := &ks.Partitions[i], &ks.Partitions[i+1]
			lk, rk := PartKey{name, l.ID}, PartKey{name, r.ID}
			if l.Move != nil || r.Move != nil || p.taken[lk] || p.taken[rk] || !sameSet(l.Replicas, r.Replicas) {
				continue
			}
			ls, rs := p.st.Partitions[lk], p.st.Partitions[rk]
			// Not while the pair is warm: a load split's halves are small, and merging them as
			// soon as one quiet interval goes by would undo it (the smoothed rate, Heat, decays
			// over a few intervals).
			warm := max(ls.Rate, ls.Heat) + max(rs.Rate, rs.Heat)
			if !ls.Known || !rs.Known || ls.Bytes+rs.Bytes >= o.MinBytes || (o.SplitOps > 0 && warm > o.SplitOps/2) {
				continue
			}
			p.add(Action{Kind: ActMerge, Keyspace: name, Version: ks.Version, Partition: l.ID,
				Why: fmt.Sprintf("%d + %d bytes < Θmin %d", ls.Bytes, rs.Bytes, o.MinBytes)})
			p.taken[rk] = true
			budget--
			break
		}
	}
}

func validSplit(p *placement.Partition, at []byte) bool {
	return len(at) > 0 && bytes.Compare(at, p.Start) > 0 && (p.End == nil || bytes.Compare(at, p.End) < 0)
}

func sameSet(a, b []uint32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// nodeStates ends bootstraps and decommissions: a joining node whose first phase is done
// becomes active; a decommissioning node that holds nothing is removed.
func (p *plan) nodeStates() {
	for _, m := range p.sortedMembers() {
		switch m.State {
		case StateJoining:
			if p.phaseOneDone(m) {
				p.add(Action{Kind: ActNodeState, Node: m.ID, State: StateActive, From: StateJoining, Why: "bootstrap phase 1 done"})
			}
		case StateDecommissioning:
			if p.held[m.ID] == 0 {
				p.add(Action{Kind: ActNodeState, Node: m.ID, State: "removed", From: StateDecommissioning, Why: "it holds no replica"})
			}
		}
	}
}

// phaseOneDone: phase 1 was planned and the node may serve.
//
// Two-phase: once a later plan has seen the map that phase 1's moves are in (or were refused
// or aborted). From move_start the new replica takes every write of its partition at the
// write's consistency level, as a member of the new set, and it serves the partition's reads
// once it has caught up (docs/elasticity.md, "Moving a replica"). So the node is in the
// request path at once, and serving waits for no copy: ElasCass 3.2 serves after phase 1's
// copies, which take time in proportion to the data; here that time is spent in the
// background, per partition, as in phase 2. Split-move and one-phase: once every move phase
// 1 asked for has ended (finished, or aborted: its partition is no longer moving into the
// node), as Cassandra's bootstrap streams its range before the node joins the ring.
func (p *plan) phaseOneDone(m *Member) bool {
	asked, ok := p.d.phaseOne[m.ID]
	if !ok {
		return false
	}
	if p.d.opts.Strategy == TwoPhase {
		return p.d.round > p.d.phaseOneRound[m.ID]
	}
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			if part.Move != nil && part.Move.Add == m.ID && asked[PartKey{ks.Spec.Name, part.ID}] {
				return false
			}
			// Split-move: a planned partition it does not hold yet, and its source still
			// does, is still to be moved.
			if p.d.opts.Strategy == SplitMove && asked[PartKey{ks.Spec.Name, part.ID}] && !part.HasReplica(m.ID) && part.HasReplica(p.d.splitFrom[m.ID]) {
				return false
			}
		}
	}
	if p.d.opts.Strategy == OnePhase {
		// One phase: the node is bootstrapped once it holds its whole share.
		return p.held[m.ID] >= p.floorShare(m.Region, m) && p.in[m.ID] == 0
	}
	return true
}

// decommission moves a leaving node's replicas out one at a time, each to the least loaded
// live node of the region that lacks it (ElasCass 3.3).
func (p *plan) decommission() {
	for _, m := range p.sortedMembers() {
		if m.State != StateDecommissioning || p.out[m.ID] > 0 {
			continue
		}
		p.moveOneOff(m.ID, "decommission")
	}
}

// rereplicate re-creates the replicas of nodes dead for longer than DeadAfter on live nodes
// of their region (Rule 2), a few at a time.
func (p *plan) rereplicate() {
	for _, m := range p.sortedMembers() {
		if m.Alive || m.DownFor < p.d.opts.DeadAfter || m.State == StateJoining {
			continue
		}
		for p.out[m.ID] < p.d.opts.MaxMovesPerNode && p.moving < p.d.opts.MaxMoves {
			if !p.moveOneOff(m.ID, fmt.Sprintf("n%d down for %v", m.ID, m.DownFor.Round(time.Second))) {
				break
			}
		}
	}
}

// moveOneOff moves one replica off node from to the least loaded live active node of its
// region that lacks the partition; it reports whether it found one.
func (p *plan) moveOneOff(from uint32, why string) bool {
	if p.moving >= p.d.opts.MaxMoves {
		return false
	}
	fm := p.members[from]
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			key := PartKey{ks.Spec.Name, part.ID}
			if part.Move != nil || p.taken[key] || !part.HasReplica(from) {
				continue
			}
			dest := p.leastLoaded(fm.Region, ks, part, nil)
			if dest == 0 {
				continue
			}
			src := from
			if !fm.Alive {
				src = p.liveSource(part, from, fm.Region)
				if src == 0 {
					continue
				}
			}
			p.add(Action{Kind: ActStartMove, Keyspace: ks.Spec.Name, Partition: part.ID,
				Move: placement.Move{Add: dest, Remove: from, Source: src}, Why: why})
			return true
		}
	}
	return false
}

// leastLoaded picks, in region, the live active (or joining) node that does not hold part,
// may take it (NoRejoin), has room for another incoming move, and has the least CPU, then
// the fewest replicas; except excludes nodes. 0: none.
//
// An interfered node (Hubbub-scale) is chosen only when no other node can take the replica.
func (p *plan) leastLoaded(region string, ks Keyspace, part *placement.Partition, except map[uint32]bool) uint32 {
	best := uint32(0)
	for _, m := range p.sortedMembers() {
		if m.Region != region || !m.Alive || (m.State != StateActive && m.State != StateJoining) || except[m.ID] {
			continue
		}
		if part.HasMember(m.ID) || (ks.Options.NoRejoin && part.HasDeparted(m.ID)) || p.in[m.ID] >= p.d.opts.MaxMovesPerNode {
			continue
		}
		if best == 0 {
			best = m.ID
			continue
		}
		b := p.members[best]
		if b.interfered() != m.interfered() {
			if b.interfered() {
				best = m.ID
			}
			continue
		}
		if lessLoaded(m, b, p.held) {
			best = m.ID
		}
	}
	return best
}

func lessLoaded(a, b *Member, held map[uint32]int) bool {
	if a.CPU != b.CPU {
		return a.CPU < b.CPU
	}
	if held[a.ID] != held[b.ID] {
		return held[a.ID] < held[b.ID]
	}
	return a.ID < b.ID
}

// liveSource is a live replica of part other than from, in from's region first.
func (p *plan) liveSource(part *placement.Partition, from uint32, region string) uint32 {
	best := uint32(0)
	for _, r := range part.Replicas {
		m := p.members[r]
		if r == from || m == nil || !m.Alive {
			continue
		}
		if best == 0 || (m.Region == region && p.members[best].Region != region) {
			best = r
		}
	}
	return best
}

// bootstrap plans the first phase of every joining node that has none yet (ElasCass 3.2):
// TwoPhase takes the partitions with a replica on a dead node of its region (Rule 2) and
// PhaseOneShare of each heavily loaded node's replicas (Rule 3); OnePhase takes its whole
// share R̄; SplitMove takes half of the data of the region's largest node.
func (p *plan) bootstrap() {
	for _, m := range p.sortedMembers() {
		if m.State != StateJoining || !m.Alive {
			continue
		}
		asked, planned := p.d.phaseOne[m.ID]
		if planned && p.d.opts.Strategy == SplitMove {
			p.splitMoveIssue(m, asked)
			continue
		}
		if planned && p.d.opts.Strategy != OnePhase {
			continue
		}
		if !planned {
			asked = map[PartKey]bool{}
		}
		switch p.d.opts.Strategy {
		case TwoPhase:
			p.phaseOneRuleTwo(m, asked)
			p.phaseOneRuleThree(m, asked)
		case OnePhase:
			// Until the node holds its share (which grows while partitions split meanwhile),
			// at most MaxMovesPerNode at a time, the throttle phase 2 has too.
			p.takeShare(m, min(p.floorShare(m.Region, m), p.held[m.ID]+p.d.opts.MaxMovesPerNode-p.in[m.ID]), asked, "one-phase bootstrap")
		case SplitMove:
			p.splitMove(m, asked)
		}
		if !planned {
			p.d.phaseOneRound[m.ID] = p.d.round
		}
		p.d.phaseOne[m.ID] = asked
	}
}

// phaseOneRuleTwo takes, for node m, a replica of every partition whose replica in m's region
// is on a node that has been down for DeadAfter (Rule 2: high availability first).
func (p *plan) phaseOneRuleTwo(m *Member, asked map[PartKey]bool) {
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			key := PartKey{ks.Spec.Name, part.ID}
			if part.Move != nil || p.taken[key] || part.HasMember(m.ID) || (ks.Options.NoRejoin && part.HasDeparted(m.ID)) || p.moving >= p.d.opts.MaxMoves {
				continue
			}
			for _, r := range part.Replicas {
				rm := p.members[r]
				if rm == nil || rm.Alive || rm.DownFor < p.d.opts.DeadAfter || rm.Region != m.Region {
					continue
				}
				src := p.liveSource(part, r, m.Region)
				if src == 0 {
					break
				}
				p.add(Action{Kind: ActStartMove, Keyspace: ks.Spec.Name, Partition: part.ID,
					Move: placement.Move{Add: m.ID, Remove: r, Source: src}, Why: "bootstrap phase 1, Rule 2: replica on a node that is down"})
				asked[key] = true
				break
			}
		}
	}
}

// phaseOneRuleThree takes PhaseOneShare of the replicas of each heavily loaded node of m's
// region (Rule 3), chosen middle-out by hits (Eq. 3).
func (p *plan) phaseOneRuleThree(m *Member, asked map[PartKey]bool) {
	var mean float64
	var n int
	for _, o := range p.st.Members {
		if o.Region == m.Region && o.Alive && o.State == StateActive {
			mean += o.CPU
			n++
		}
	}
	if n == 0 {
		return
	}
	mean /= float64(n)
	for _, o := range p.sortedMembers() {
		if o.Region != m.Region || !o.Alive || o.State != StateActive || o.CPU <= p.d.opts.HeavyCPU || o.CPU <= mean*(1+p.d.opts.HeavyAbove) {
			continue
		}
		share := int(math.Ceil(p.d.opts.PhaseOneShare * float64(p.held[o.ID])))
		for range share {
			if !p.takeFrom(m, o.ID, asked, fmt.Sprintf("bootstrap phase 1, Rule 3: n%d heavily loaded (cpu %.0f%%)", o.ID, 100*o.CPU)) {
				break
			}
		}
	}
}

// takeShare moves replicas into m from the region's nodes above R̄ (most loaded first) until
// m holds target.
func (p *plan) takeShare(m *Member, target int, asked map[PartKey]bool, why string) {
	for p.held[m.ID] < target && p.moving < p.d.opts.MaxMoves {
		src := p.richest(m.Region, m.ID)
		if src == 0 || !p.takeFrom(m, src, asked, why) {
			return
		}
	}
}

// richest is the live active node of region, other than except, that holds more than its
// share (R̄, weighted by interference: Rule 4, only such a node offers replicas), interfered
// nodes first (Hubbub-scale: the preferred sources), then the most loaded, then the one
// holding most; 0: none.
func (p *plan) richest(region string, except uint32) uint32 {
	total, weights := p.regionShare(region)
	best := uint32(0)
	for _, o := range p.sortedMembers() {
		if o.Region != region || o.ID == except || !o.Alive || o.State != StateActive || float64(p.held[o.ID])*weights <= float64(total)*o.weight() {
			continue
		}
		if best == 0 {
			best = o.ID
			continue
		}
		b := p.members[best]
		switch {
		case o.interfered() != b.interfered():
			if o.interfered() {
				best = o.ID
			}
		case o.CPU > b.CPU || (o.CPU == b.CPU && p.held[o.ID] > p.held[best]):
			best = o.ID
		}
	}
	return best
}

// takeFrom moves one replica from src to m: src's replicas ranked by hits, walked out from
// the middle, the first m does not hold (ElasCass 3.2, after Eq. 3: neither the hottest
// nor the coldest, which would unsettle the system).
func (p *plan) takeFrom(m *Member, src uint32, asked map[PartKey]bool, why string) bool {
	if p.moving >= p.d.opts.MaxMoves {
		return false
	}
	type cand struct {
		ks   Keyspace
		part *placement.Partition
		hits float64
	}
	var cands []cand
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			key := PartKey{ks.Spec.Name, part.ID}
			if !part.HasReplica(src) || part.Move != nil || p.taken[key] || part.HasMember(m.ID) || (ks.Options.NoRejoin && part.HasDeparted(m.ID)) {
				continue
			}
			cands = append(cands, cand{ks, part, p.st.Replicas[src][key].Hits})
		}
	}
	if len(cands) == 0 {
		return false
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(a.hits, b.hits) })
	c := cands[middleOut(len(cands))[0]]
	key := PartKey{c.ks.Spec.Name, c.part.ID}
	p.add(Action{Kind: ActStartMove, Keyspace: c.ks.Spec.Name, Partition: c.part.ID,
		Move: placement.Move{Add: m.ID, Remove: src, Source: src}, Why: why})
	asked[key] = true
	return true
}

// middleOut is the visiting order of n ranked items from the middle outwards: n/2, n/2-1,
// n/2+1, ... (the first one is all the planner needs; the rest documents the walk).
func middleOut(n int) []int {
	out := make([]int, 0, n)
	mid := n / 2
	out = append(out, mid)
	for d := 1; len(out) < n; d++ {
		if mid-d >= 0 {
			out = append(out, mid-d)
		}
		if mid+d < n {
			out = append(out, mid+d)
		}
	}
	return out
}

// splitMove is the Cassandra-style baseline: the new node takes, from the region's node with
// the most bytes, the replicas of the lower half of its data in key order.
func (p *plan) splitMove(m *Member, asked map[PartKey]bool) {
	big := uint32(0)
	for _, o := range p.sortedMembers() {
		if o.Region == m.Region && o.ID != m.ID && o.Alive && o.State == StateActive && (big == 0 || p.bytes[o.ID] > p.bytes[big]) {
			big = o.ID
		}
	}
	if big == 0 {
		return
	}
	half := p.bytes[big] / 2
	var taken int64
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			key := PartKey{ks.Spec.Name, part.ID}
			if taken >= half || !part.HasReplica(big) || part.Move != nil || part.HasMember(m.ID) || (ks.Options.NoRejoin && part.HasDeparted(m.ID)) {
				continue
			}
			asked[key] = true
			taken += p.st.Partitions[key].Bytes
		}
	}
	p.d.splitFrom[m.ID] = big
	p.splitMoveIssue(m, asked)
}

// splitMoveIssue starts the moves of a split-move plan that have not started, at most
// MaxMovesPerNode into the node at a time: the same throttle as the other strategies, so
// they compare by what moves, not by how much moves at once.
func (p *plan) splitMoveIssue(m *Member, asked map[PartKey]bool) {
	big := p.d.splitFrom[m.ID]
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			key := PartKey{ks.Spec.Name, part.ID}
			if !asked[key] || p.in[m.ID] >= p.d.opts.MaxMovesPerNode || p.moving >= p.d.opts.MaxMoves {
				continue
			}
			if !part.HasReplica(big) || part.Move != nil || part.HasMember(m.ID) || p.taken[key] {
				continue
			}
			p.add(Action{Kind: ActStartMove, Keyspace: ks.Spec.Name, Partition: part.ID,
				Move: placement.Move{Add: m.ID, Remove: big, Source: big}, Why: fmt.Sprintf("split-move: half of n%d's data", big)})
		}
	}
}

// balance is Rule 4 in the background (phase 2): in every region, a node below R̄ pulls
// replicas from nodes above it, most loaded first, at most MaxMovesPerNode into one node at
// a time. SplitMove never balances.
func (p *plan) balance() {
	if p.d.opts.Strategy == SplitMove {
		return
	}
	for _, region := range p.regions() {
		if p.decommissioning(region) {
			continue // the leaving node's replicas are spread first; balance after
		}
		for _, m := range p.sortedMembers() {
			if m.Region != region || !m.Alive || m.State != StateActive {
				continue
			}
			floor := p.floorShare(region, m)
			for p.held[m.ID] < floor && p.in[m.ID] < p.d.opts.MaxMovesPerNode && p.moving < p.d.opts.MaxMoves {
				src := p.richest(region, m.ID)
				if src == 0 || !p.takeFrom(m, src, map[PartKey]bool{}, fmt.Sprintf("phase 2, Rule 4: n%d holds %d < R̄ %d", m.ID, p.held[m.ID], floor)) {
					break
				}
			}
		}
	}
}

// floorShare is m's share of region rounded down: R̄, the replicas of the region's partitions
// over its active nodes (joining ones included: they count in n+1), weighted by interference
// (an interfered node's weight is 1/index; all 1 otherwise, and the share is R̄).
func (p *plan) floorShare(region string, m *Member) int {
	total, weights := p.regionShare(region)
	if weights == 0 {
		return 0
	}
	return int(math.Floor(float64(total)*m.weight()/weights + 1e-9))
}

// regionShare returns the replicas of region's partitions and the sum of its active and
// joining nodes' weights (their count when none is interfered).
func (p *plan) regionShare(region string) (total int, weights float64) {
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			for _, r := range ks.Partitions[i].Replicas {
				if m := p.members[r]; m != nil && m.Region == region {
					total++
				}
			}
		}
	}
	for i := range p.st.Members {
		m := &p.st.Members[i]
		if m.Region == region && (m.State == StateActive || m.State == StateJoining) {
			weights += m.weight()
		}
	}
	return total, weights
}

// decommissioning reports whether a node of region is being decommissioned.
func (p *plan) decommissioning(region string) bool {
	for _, m := range p.st.Members {
		if m.Region == region && m.State == StateDecommissioning {
			return true
		}
	}
	return false
}

func (p *plan) regions() []string {
	var out []string
	for _, m := range p.st.Members {
		if !slices.Contains(out, m.Region) {
			out = append(out, m.Region)
		}
	}
	slices.Sort(out)
	return out
}

func (p *plan) sortedMembers() []*Member {
	out := make([]*Member, 0, len(p.st.Members))
	for i := range p.st.Members {
		out = append(out, &p.st.Members[i])
	}
	slices.SortFunc(out, func(a, b *Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Imbalance is ElasCass's imbalance index (5.1): the standard deviation of loads over their
// mean (0 when the mean is 0).
func Imbalance(loads []float64) float64 {
	if len(loads) == 0 {
		return 0
	}
	var mean float64
	for _, l := range loads {
		mean += l
	}
	mean /= float64(len(loads))
	if mean == 0 {
		return 0
	}
	var v float64
	for _, l := range loads {
		v += (l - mean) * (l - mean)
	}
	return math.Sqrt(v/float64(len(loads))) / mean
}

// EWMA is Eq. 3: the moving average of a replica's hits H_t = α·h_{t-1} + (1-α)·H_{t-1}.
func EWMA(prev, sample, alpha float64) float64 { return alpha*sample + (1-alpha)*prev }
