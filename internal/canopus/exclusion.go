package canopus

import (
	"slices"
	"time"

	"meridian/internal/wire/peerpb"
)

// Exclusion of a lost region (beyond the thesis: 4.4 stalls; 4.7.1 sketches RCanopus's
// membership service, which pays "additional round-trip latency in the common case").
// docs/canopus.md, "Exclusion of a lost region", gives the argument; in short:
//
//  1. The ack rule. With Options.ExcludeAfter set, a fetch carries the requester's own
//     super-leaf state, and a super-leaf answers it (holds_yours) only once its logs hold
//     that state. A node commits cycle c only with such an answer from every other
//     super-leaf in the cycle. So every cycle any node of S committed is known, in their
//     logs, to every other super-leaf. The cost is one local log commit per cycle and the
//     states crossing each region pair twice; not a wide-area round trip.
//  2. Suspicion. A node whose next cycle has waited ExcludeAfter for one super-leaf S alone
//     reports it; the runtime proposes exclude_start to the metadata group, which accepts
//     one region per partition (placement.Exclusion), so two sides of a partition cannot
//     exclude each other.
//  3. Freezing. Every node outside S that sees the exclusion start proposes a wedge of S into
//     each broadcast group of its super-leaf. S's states later in a group's log than its
//     wedge are ignored, and nothing is answered to S past them. Once every group's wedge
//     is applied, the super-leaf's position G is the first cycle above its commits whose S
//     state its logs do not hold: a function of the logs, the same at every member. It is
//     reported (exclude_report).
//  4. Decision. Once every other region has reported, the metadata group sets From = the
//     highest G. S committed no cycle ≥ From: that needs the ack of the super-leaf whose G is
//     From, which does not hold S's state of it. No survivor committed a cycle ≥ From with S:
//     its G is above its commits. Every cycle below From has S's state in some survivor's
//     logs (the one that reported From holds all of them), so the survivors commit those
//     cycles with S, fetching its state from each other, and every cycle from From on without
//     it.
//
// An attempt pending longer than 2·ExcludeAfter is cancelled (a region suspected by mistake,
// or another region lost before it reported): each node that sees the cancellation ends its
// groups' wedges of the attempt with unwedge entries, so what the super-leaf holds stays a
// function of its logs.
//
// A region once excluded stays out (readmission needs a state transfer): its nodes refuse
// requests (Excluded).

// MutationCommitWithoutAck: the ack rule is off while exclusion is on (a super-leaf answers
// a fetch without holding the requester's state, and a node commits without every other
// super-leaf's answer): a region lost right after committing a cycle may be excluded from
// it, and its acknowledged writes are lost. The window is a one-way delay at the moment of
// the loss, too narrow for the simulator's random faults within a bounded number of seeds
// (300 seeds of --lose-region passed it); TestAckRule catches it by cutting one direction.
const MutationCommitWithoutAck = "commit-without-holding-ack"

// ExclusionReport is a step of a region's exclusion the runtime proposes to the metadata
// group (engine.ReportExcludeStart / ReportExcludePosition).
type ExclusionReport struct {
	// Start: this node suspects Region. Cancel: attempt Round has been pending too long.
	// Else this node's region (Reporter) reports Position for attempt Round.
	Start, Cancel bool
	Region        string
	Round         uint64
	Reporter      string
	Position      uint64
}

// exclusionState is what the placement says of the partition's exclusion.
type exclusionState struct {
	set    bool
	index  int    // the excluded super-leaf (vertex (1, index))
	round  uint64 // the attempt
	from   uint64 // 0: pending
	seenAt time.Time
}

func (n *Node) exclOn() bool { return n.opts.ExcludeAfter > 0 }

// SetExclusion tells the instance the placement's exclusion of the partition: region ""
// when there is none (or the attempt was cancelled), else attempt round of region, from 0
// while pending, else the first cycle without it; cancelled is the last attempt cancelled
// (placement.Partition.ExclusionCancelled). A decided exclusion is never taken back: a later
// call that contradicts it is ignored.
func (n *Node) SetExclusion(now time.Time, region string, round, from, cancelled uint64) {
	defer n.guard()
	if now.After(n.now) {
		n.now = now // a placement may arrive before the first tick
	}
	if !n.exclOn() || n.lot.Height != 2 || n.excl.from > 0 {
		return
	}
	n.cancelled = max(n.cancelled, cancelled)
	if region == "" {
		n.excl = exclusionState{}
		n.dirty = true
		return
	}
	idx := slices.Index(n.lot.SuperLeaves, region)
	if idx < 0 || round == 0 {
		return
	}
	if !n.excl.set || n.excl.round != round {
		n.excl = exclusionState{set: true, index: idx, round: round, seenAt: n.now}
	}
	n.excl.from = from
	if from > 0 {
		// Roots computed ahead, while the exclusion was pending, merged the super-leaf into
		// cycles it is now out of: computed again without it.
		for k := range n.states {
			if k.v.Height == n.lot.Height && k.cycle >= from {
				delete(n.states, k)
			}
		}
		for k := range n.wants {
			if n.excludedAt(k.v, k.cycle) {
				delete(n.wants, k) // never needed now
			}
		}
	}
	n.dirty = true
}

// Excluded reports whether this node's region has been excluded: it serves nothing more.
func (n *Node) Excluded() bool {
	return n.excl.set && n.excl.from > 0 && n.anc[1].Index == n.excl.index
}

func (n *Node) exclVertex() VNode { return VNode{1, n.excl.index} }

// excludedAt reports whether vertex v is out of cycle c (decided exclusion, c ≥ From).
func (n *Node) excludedAt(v VNode, c uint64) bool {
	return n.excl.from > 0 && v == n.exclVertex() && c >= n.excl.from
}

// needsAck reports whether committing cycle c needs sibling vertex v's answer holding this
// super-leaf's state (the ack rule): with exclusion on, for every top-level sibling still
// in the partition.
func (n *Node) needsAck(v VNode, c uint64) bool {
	if !n.exclOn() || v.Height != 1 || v == n.anc[1] || n.cfg.Mutation == MutationCommitWithoutAck {
		return false
	}
	return !(n.excl.from > 0 && v == n.exclVertex())
}

// mayAnswer reports whether this node may send its vertex's state of cycle c to a node of
// vertex w (the ack rule): it holds w's state of c in its logs, or committed c.
func (n *Node) mayAnswer(c uint64, w VNode) bool {
	if !n.exclOn() || c <= n.committed || n.cfg.Mutation == MutationCommitWithoutAck {
		return true
	}
	if n.wedgedAgainst(w) {
		return false // frozen: past the wedge nothing more is acknowledged to the excluded
	}
	return n.states[vkey{c, w}] != nil
}

// wedgedAgainst reports whether some group of this super-leaf holds a wedge of w.
func (n *Node) wedgedAgainst(w VNode) bool {
	if w.Height != 1 {
		return false
	}
	for _, id := range n.peers {
		if g := n.groups[id]; g.wedgeRound != 0 && g.wedgeIndex == w.Index {
			return true
		}
	}
	return false
}

// ignoresRemote reports whether a state of vertex v for cycle c, in g's log, is left out:
// past g's wedge of the excluded super-leaf (until the decision, which makes the cycles
// below From fetchable again), or of a cycle the super-leaf is out of.
func (n *Node) ignoresRemote(g *bgroup, v VNode, c uint64) bool {
	if n.excl.from > 0 && v == n.exclVertex() {
		return c >= n.excl.from
	}
	return v.Height == 1 && g.wedgeRound != 0 && g.wedgeIndex == v.Index
}

// flush answers the fetches buffered for this node's vertex k that it may answer now.
func (n *Node) flush(k vkey) {
	st := n.states[k]
	to := n.buffered[k]
	if st == nil || len(to) == 0 {
		return
	}
	kept := to[:0]
	for _, id := range to {
		w, ok := n.lot.Ancestor(id, k.v.Height)
		if ok && !n.mayAnswer(k.cycle, w) {
			kept = append(kept, id)
			continue
		}
		n.answer(id, st)
	}
	n.nBuf -= len(to) - len(kept)
	if len(kept) == 0 {
		delete(n.buffered, k)
	} else {
		n.buffered[k] = kept
	}
}

// answer sends st to node to, marked as holding its state with exclusion on.
func (n *Node) answer(to uint32, st *State) {
	p := encodeState(st)
	p.HoldsYours = n.exclOn()
	n.send(to, &peerpb.CanopusEnvelope{Body: &peerpb.CanopusEnvelope_State{State: p}})
}

// takeCarried keeps the state a fetch carried (the requester's own vertex): proposed into
// this node's group, after which this super-leaf holds it and may answer.
func (n *Node) takeCarried(from uint32, v VNode, p *peerpb.CanopusState) {
	if p == nil || !n.exclOn() {
		return
	}
	st, err := decodeState(p)
	if err != nil || st.Cycle <= n.committed || st.VNode.Height != v.Height || st.VNode == v {
		return
	}
	if w, ok := n.lot.Ancestor(from, v.Height); !ok || w != st.VNode {
		return // a node carries only its own vertex's state
	}
	k := vkey{st.Cycle, st.VNode}
	if n.states[k] != nil || n.carrying[k] {
		return
	}
	n.carrying[k] = true
	p.HoldsYours = false // carried, not an answer: it acknowledges nothing
	n.propose(n.cfg.ID, &peerpb.CanopusEntry{Body: &peerpb.CanopusEntry_Remote{Remote: p}})
}

// maintainExclusion drives this node's part in an exclusion: suspicion of a stalled
// super-leaf, the wedges, the position report.
func (n *Node) maintainExclusion() {
	if !n.exclOn() || n.lot.Height != 2 {
		return
	}
	if n.excl.from > 0 {
		return // decided: the wedges no longer matter
	}
	// Wedge every group for the pending attempt (outside the suspected super-leaf), and end
	// the wedges of attempts that are no longer pending (cancelled).
	shouldWedge := n.excl.set && n.anc[1].Index != n.excl.index
	wedged := shouldWedge
	for _, id := range n.peers {
		g := n.groups[id]
		if n.excl.set && g.wedgeRound == n.excl.round {
			continue
		}
		var ent *peerpb.CanopusEntry
		switch {
		case g.wedgeRound != 0 && g.wedgeRound <= n.cancelled:
			// Only an attempt the metadata group cancelled: ending the wedge of a live one
			// would let this super-leaf acknowledge past the position it reported.
			ent = &peerpb.CanopusEntry{Body: &peerpb.CanopusEntry_Unwedge{Unwedge: &peerpb.CanopusWedge{Index: uint32(g.wedgeIndex), Round: g.wedgeRound}}}
		case g.wedgeRound != 0:
			wedged = false
			continue // an attempt this node has not heard of yet
		case shouldWedge:
			ent = &peerpb.CanopusEntry{Body: &peerpb.CanopusEntry_Wedge{Wedge: &peerpb.CanopusWedge{Index: uint32(n.excl.index), Round: n.excl.round}}}
		default:
			continue
		}
		wedged = false
		if n.now.Sub(g.wedgeAt) >= n.opts.FetchTimeout {
			g.wedgeAt = n.now
			n.propose(id, ent)
		}
	}
	if n.excl.set && n.excl.seenAt.IsZero() {
		n.excl.seenAt = n.now // seen at a restart: the cancellation timer starts now
	}
	if !n.excl.set {
		n.suspect()
		return
	}
	if n.now.Sub(n.reportAt) < n.opts.FetchTimeout {
		return
	}
	region := n.lot.SuperLeaves[n.excl.index]
	switch {
	case n.now.Sub(n.excl.seenAt) >= 2*n.opts.ExcludeAfter:
		n.reportAt = n.now
		n.out.Exclusions = append(n.out.Exclusions, ExclusionReport{Cancel: true, Region: region, Round: n.excl.round})
	case wedged:
		n.reportAt = n.now
		n.out.Exclusions = append(n.out.Exclusions, ExclusionReport{Region: region, Round: n.excl.round, Reporter: n.lot.SuperLeaves[n.anc[1].Index], Position: n.frozenPosition()})
	}
}

// frozenPosition is this super-leaf's G: the first cycle above this node's commits whose
// excluded-super-leaf state its logs (before each group's wedge) do not hold.
func (n *Node) frozenPosition() uint64 {
	v := n.exclVertex()
	c := n.committed + 1
	for n.states[vkey{c, v}] != nil {
		c++
	}
	return c
}

// suspect reports, when the next cycle has waited ExcludeAfter, the one super-leaf silent
// that long.
func (n *Node) suspect() {
	c := n.committed + 1
	if max(n.target, n.proposed) < c || n.stallSince.IsZero() {
		n.stallSince = n.now // idle, or just committed: nothing waits
		return
	}
	if n.now.Sub(n.stallSince) < n.opts.ExcludeAfter || n.now.Sub(n.reportAt) < n.opts.FetchTimeout {
		return
	}
	if n.states[vkey{c, n.anc[1]}] == nil {
		return // this super-leaf's own state is missing: its members' closes are the cure
	}
	// The one other super-leaf none of whose nodes has sent this node anything for
	// ExcludeAfter (a super-leaf that still fetches or answers is alive, whatever this cycle
	// lacks from it).
	var missing []VNode
	for _, ch := range n.children[2] {
		if ch == n.anc[1] {
			continue
		}
		heard, ok := n.heardAt[ch.Index]
		if !ok {
			heard = n.stallSince
		}
		if n.now.Sub(heard) >= n.opts.ExcludeAfter {
			missing = append(missing, ch)
		}
	}
	if len(missing) != 1 {
		return // none, or several: this node may be the one cut off; it suspects nobody
	}
	n.reportAt = n.now
	n.out.Exclusions = append(n.out.Exclusions, ExclusionReport{Start: true, Region: n.lot.SuperLeaves[missing[0].Index]})
}

// survivors are the members outside the excluded super-leaf, other than this node.
func (n *Node) survivors() []uint32 {
	var out []uint32
	for _, id := range n.lot.Emulators(n.lot.Root()) {
		if a, _ := n.lot.Ancestor(id, 1); a != n.exclVertex() && id != n.cfg.ID {
			out = append(out, id)
		}
	}
	return out
}

// heard notes a message from node from (another super-leaf's, for suspicion).
func (n *Node) heard(from uint32) {
	if !n.exclOn() {
		return
	}
	if v, ok := n.lot.Ancestor(from, 1); ok && v != n.anc[1] {
		n.heardAt[v.Index] = n.now
	}
}
