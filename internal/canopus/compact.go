package canopus

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// Log compaction of the broadcast groups. An entry of a group concerns one cycle (a proposal
// or another super-leaf's state) or none (a close). Once every member of the super-leaf has
// committed past a cycle by more than keep, no member computes that cycle from the logs
// again, nor answers a fetch of it: its entries are dropped. Every member that committed a
// cycle holds its group entries up to it (raft logs are prefixes), so no member ever needs a
// snapshot of a group: the only snapshot is the founding one. Members report their committed
// cycle in their proposals (CanopusProposal.committed); a member that stops proposing (down,
// or closed out) holds the compaction back until it returns, so the logs grow while a member
// is away — what a state transfer would bound is in docs/canopus.md.
//
// The closes a compaction drops are kept as a raw key per group (closedOp), so a restarted
// node knows the epochs they ended. Only those: a close still in the log is read again in
// its place, after the proposals that precede it (which count), and loading it first would
// make the node ignore them.

// entryCycle is an applied entry and the cycle it concerns (0: none); a close says which
// epoch it closed.
type entryCycle struct {
	index, cycle uint64
	close        bool
	epoch        uint64
	// wedge or unwedge: an exclusion entry of attempt round (of super-leaf wedgeIndex).
	wedge, unwedge bool
	round          uint64
	wedgeIndex     int
}

func entryCycleOf(ce *peerpb.CanopusEntry) uint64 {
	switch b := ce.GetBody().(type) {
	case *peerpb.CanopusEntry_Proposal:
		return b.Proposal.GetCycle()
	case *peerpb.CanopusEntry_Remote:
		return b.Remote.GetCycle()
	}
	return 0
}

// Compaction mutations.
const (
	// MutationCompactAhead: a node compacts behind its own commits, not every member's.
	// Too narrow for random faults within a bounded number of seeds (a member must stay
	// away for 64 entries while the others commit); TestCompactionWaitsForEveryMember
	// catches it.
	MutationCompactAhead = "compact-ahead-of-members"
	// MutationClosesFirst: every close is stored when applied and loaded before the log is
	// replayed (the bug the invariant found while compaction was built).
	MutationClosesFirst = "closes-loaded-first"
)

// compactBatch is the fewest entries a compaction drops (fewer wait: each compaction is a
// write).
const compactBatch = 64

// lowWater is the lowest committed cycle among the super-leaf's members, as they last
// reported it (this node's own is current).
func (n *Node) lowWater() uint64 {
	low := n.committed
	if n.cfg.Mutation == MutationCompactAhead {
		return low // broken: a member behind needs entries no one has any more
	}
	for _, id := range n.peers {
		if id != n.cfg.ID {
			low = min(low, n.groups[id].reported)
		}
	}
	return low
}

// maybeCompact compacts each group's log behind the cycles every member has committed.
func (n *Node) maybeCompact() {
	low := n.lowWater()
	if low <= n.keep() {
		return
	}
	bound := low - n.keep()
	for _, id := range n.peers {
		g := n.groups[id]
		k := 0
		for k < len(g.entries) && g.entries[k].cycle <= bound {
			k++
		}
		if k < compactBatch {
			continue
		}
		index := g.entries[k-1].index
		ops, err := g.log.Compact(index, &raftpb.ConfState{Voters: n.voters()})
		if err != nil {
			n.fail(fmt.Errorf("canopus: compact the group of %d at %d: %w", id, index, err))
			return
		}
		n.out.Raw = append(n.out.Raw, ops...)
		closes, wedges := false, false
		for _, e := range g.entries[:k] {
			if e.close && !g.compactedCloses[e.epoch] {
				g.compactedCloses[e.epoch], closes = true, true
			}
			if e.wedge || e.unwedge {
				g.compactedWedges.apply(e)
				wedges = true
			}
		}
		if closes {
			n.out.Raw = append(n.out.Raw, n.closedOp(g))
		}
		if wedges {
			n.out.Raw = append(n.out.Raw, storage.RawOp{Key: n.wedgeKey(g.owner), Value: g.compactedWedges.encode()})
		}
		g.entries = slices.Delete(g.entries, 0, k)
	}
}

func (n *Node) voters() []uint64 {
	out := make([]uint64, len(n.peers))
	for i, p := range n.peers {
		out[i] = uint64(p)
	}
	return out
}

func (n *Node) closedKey(owner uint32) []byte {
	return binary.BigEndian.AppendUint32(append(append([]byte{}, n.cfg.Prefix...), 'c'), owner)
}

// closedOp stores the epochs g's log has closed.
func (n *Node) closedOp(g *bgroup) storage.RawOp {
	epochs := slices.Sorted(maps.Keys(g.compactedCloses))
	b := make([]byte, 0, 8*len(epochs))
	for _, e := range epochs {
		b = binary.BigEndian.AppendUint64(b, e)
	}
	return storage.RawOp{Key: n.closedKey(g.owner), Value: b}
}

// loadClosed reads the epochs g's log closed (some of those closes may be compacted away).
func (n *Node) loadClosed(g *bgroup) error {
	b, ok, err := n.cfg.Store.GetRaw(n.closedKey(g.owner))
	if err != nil {
		return fmt.Errorf("canopus: read the closed epochs of %d: %w", g.owner, err)
	}
	if !ok {
		return nil
	}
	if len(b)%8 != 0 {
		return fmt.Errorf("canopus: closed epochs of %d: %d bytes (%w)", g.owner, len(b), storage.ErrCorrupt)
	}
	for i := 0; i < len(b); i += 8 {
		e := binary.BigEndian.Uint64(b[i:])
		g.closed[e], g.compactedCloses[e] = true, true
	}
	return nil
}

// wedgeState is what a group's wedge and unwedge entries (exclusion.go) amount to, folded in
// log order: like closes, those a compaction drops are stored beside the log (and only those:
// one still in the log is read again in its place).
type wedgeState struct {
	round    uint64
	index    int
	unwedged []uint64
}

// maxUnwedged bounds the cancelled exclusion attempts a group remembers.
const maxUnwedged = 1024

func (w *wedgeState) apply(e entryCycle) {
	switch {
	case e.wedge && e.round != 0 && w.round == 0 && !slices.Contains(w.unwedged, e.round):
		w.round, w.index = e.round, e.wedgeIndex
	case e.unwedge && e.round != 0 && (slices.Contains(w.unwedged, e.round) || len(w.unwedged) < maxUnwedged):
		if !slices.Contains(w.unwedged, e.round) {
			w.unwedged = append(w.unwedged, e.round)
		}
		if w.round == e.round {
			w.round = 0
		}
	}
}

func (w *wedgeState) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, w.round)
	b = binary.BigEndian.AppendUint32(b, uint32(w.index))
	for _, r := range w.unwedged {
		b = binary.BigEndian.AppendUint64(b, r)
	}
	return b
}

func (n *Node) wedgeKey(owner uint32) []byte {
	return binary.BigEndian.AppendUint32(append(append([]byte{}, n.cfg.Prefix...), 'w'), owner)
}

// loadWedges reads the wedge state of g's compacted entries.
func (n *Node) loadWedges(g *bgroup) error {
	b, ok, err := n.cfg.Store.GetRaw(n.wedgeKey(g.owner))
	if err != nil {
		return fmt.Errorf("canopus: read the wedges of %d: %w", g.owner, err)
	}
	if !ok {
		return nil
	}
	if len(b) < 12 || (len(b)-12)%8 != 0 || len(b) > 12+8*maxUnwedged {
		return fmt.Errorf("canopus: wedges of %d: %d bytes (%w)", g.owner, len(b), storage.ErrCorrupt)
	}
	w := wedgeState{round: binary.BigEndian.Uint64(b), index: int(binary.BigEndian.Uint32(b[8:]))}
	for i := 12; i < len(b); i += 8 {
		w.unwedged = append(w.unwedged, binary.BigEndian.Uint64(b[i:]))
	}
	if w.index >= len(n.lot.SuperLeaves) {
		return fmt.Errorf("canopus: wedges of %d: super-leaf %d of %d (%w)", g.owner, w.index, len(n.lot.SuperLeaves), storage.ErrCorrupt)
	}
	g.compactedWedges = w
	g.wedgeRound, g.wedgeIndex = w.round, w.index
	for _, r := range w.unwedged {
		g.unwedged[r] = true
	}
	return nil
}
