package raft

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Splits and merges of Raft partitions (ElasCass 3.1 splits and merges partitions; a Raft
// partition is a group with its own log, so its state must split and merge at one point of
// that log, as CockroachDB's split and merge triggers do).
//
// The placement changes first (metadata commands split and merge, placement.Split/Merge: the
// left part keeps its ID, the right one gets a new ID, both on the same replicas). Each group
// keeps the key range its own log made (group.start/end, in its applied state) and serves
// that range, whatever the map says, until an entry of its log changes it:
//
//   - Split. When the map narrows a partition P to [start, k) and a new partition Q covers
//     [k, end), P's leader proposes a split entry (RaftCommand.split). Every replica, when it
//     applies it, narrows P to [start, k) and founds Q's replica from P's state at that
//     index: P's configuration, a log that starts at raftInitialLogIndex (CockroachDB's
//     raftInitialLogIndex and raftInitialLogTerm, 10 and 5), the at-most-once origins and
//     the last version copied, and the data already in storage (keys name no partition).
//     Until a replica has applied the split, its P serves the whole old range: a request the
//     new map sends to Q is served by P there (routing is by the local groups' ranges, not by
//     the map), and a write P committed for a key that has moved to Q is refused at apply on
//     every replica alike and proposed again to Q. A replica that has not applied the split
//     creates no replica of Q; one whose P no longer covers Q's range (it got P's snapshot
//     after the split) creates Q empty, and Q's leader catches it up by a snapshot before it
//     serves. An empty replica holds no log and no configuration: it never campaigns, and its
//     vote, given with an empty log, is the vote of a member that has received nothing —
//     which Raft's safety allows; its hard state (term and vote) is kept when the split
//     founds the replica later (as CockroachDB keeps an uninitialized replica's HardState).
//
//   - Merge. When the map widens P over its right-hand neighbour Q (same replicas, no move;
//     placement.Merge), Q's ID is retired. Q's leader, seeing its partition gone, proposes a
//     freeze entry (RaftCommand.freeze, CockroachDB's Subsume): from it on, Q applies no write
//     (each is refused on every replica alike and proposed again to P once P has merged) and
//     serves no read (P may take writes for Q's keys once merged). Every replica of Q reports
//     how far it has applied (RaftApplied with frozen_at) to the other members. P's leader
//     proposes the merge entry (RaftCommand.merge) only when Q's configuration is P's and every
//     member of Q has applied the freeze (CockroachDB's merge waits for every replica of the
//     right-hand side). Every replica of P applying it widens P over Q's range, takes Q's
//     last version and the newer of the two origins per node, and deletes Q's Raft state
//     (log, hard state, applied state — not the data, which is now P's). A replica whose Q
//     has not applied the freeze yet does not apply the merge: its apply stops at that entry
//     until it has (blockedAt); a replica that gets P's snapshot after the merge drops its Q
//     (a snapshot of a higher generation covering Q's start key supersedes Q). If P split
//     again before that snapshot, it no longer covers Q: Q is then superseded by the
//     snapshot of the group that holds its start key now (its empty replica is created over
//     the frozen Q), once the node's group that could still apply the merge is known to be
//     past it (leftSettled; CockroachDB's replica GC of a merged-away range).
//
// Moves: the placement refuses to split or merge a moving partition. A leader does not change
// its group's membership while a split or merge of it is pending (the split first, so both
// groups start from one configuration; for a merge, the membership the right-hand group froze
// with), and proposes neither while a configuration change is in its log or the configuration
// is joint. Every step is in the replicated log or in storage written with it, so a node that
// restarts resumes: a split or merge entry not applied yet applies again, a frozen group
// reports again, a blocked merge waits again, and groups on disk that the map no longer (or
// not yet) lists are loaded (loadOrphans).

const (
	// raftInitialLogIndex and raftInitialLogTerm are where a group founded by a split starts
	// its log (CockroachDB, pkg/kv/kvserver/stateloader: 10 and 5). An empty replica (index 0)
	// is told apart from one the split has founded, and its leader catches it up by snapshot.
	raftInitialLogIndex = 10
	raftInitialLogTerm  = 5
	// maxReroutes bounds how many times one request moves to another group (a split or merge
	// took its key away) before it fails.
	maxReroutes = 8
	// retiredEmptyTicks: an empty replica of a retired group that hears nothing for this many
	// ticks (60 s) goes.
	retiredEmptyTicks = 1200
	// rangeRetryTicks: a split, freeze or merge proposal that has not applied (or been
	// refused) after this many ticks (2 s) is proposed again (dropped, or its leader changed).
	rangeRetryTicks = 40
	// splitCampaigns: how many times a group founded by a split campaigns at once.
	splitCampaigns = 5
)

// contains reports whether key lies in g's range.
func (g *group) contains(key []byte) bool {
	return g.ranged && bytes.Compare(key, g.start) >= 0 && (g.end == nil || bytes.Compare(key, g.end) < 0)
}

// covers reports whether [start, end) (end empty: unbounded) lies in g's range.
func (g *group) covers(start, end []byte) bool {
	if !g.contains(start) {
		return false
	}
	if g.end == nil {
		return true
	}
	return len(end) > 0 && bytes.Compare(end, g.end) <= 0
}

// startKey is the first key of g's range: its own if it has one, else the placement's.
func (g *group) startKey() []byte {
	if g.ranged {
		return g.start
	}
	return g.desc.Start
}

// restoreRange installs the range of a stored applied state (generation 0: a state written
// before ranges were stored; the caller takes the placement's).
func (g *group) restoreRange(st *peerpb.RaftAppliedState) {
	if st.GetGeneration() == 0 {
		return
	}
	g.ranged = true
	g.start = bytes.Clone(st.GetStart())
	if g.start == nil {
		g.start = []byte{}
	}
	g.end = nil
	if len(st.GetEnd()) > 0 {
		g.end = bytes.Clone(st.GetEnd())
	}
	g.gen, g.frozenAt = st.GetGeneration(), st.GetFrozenAt()
	g.rangeIndex = max(g.rangeIndex, st.GetIndex())
}

// rangeString renders g's range for errors and traces.
func (g *group) rangeString() string {
	if !g.ranged {
		return "(no range yet)"
	}
	return g.span().String()
}

// servable reports whether g may serve requests for its keys now: it serves (serving) and is
// not frozen (a frozen group's keys are about to be, or already are, its left neighbour's).
func (g *group) servable() bool { return g.serving() && g.ranged && g.frozenAt == 0 }

// --- the local groups' ranges ---

// groupFor returns the group of this node whose range holds key (nil: none). Ranges of a
// node's groups never overlap (a snapshot that would make them is refused or supersedes the
// other, repartition.go).
func (e *Engine) groupFor(keyspace string, key []byte) *group {
	e.rebuildRanges()
	gs := e.ranges[keyspace]
	i := sort.Search(len(gs), func(i int) bool { return bytes.Compare(gs[i].start, key) > 0 }) - 1
	if i < 0 || !gs[i].contains(key) {
		return nil
	}
	return gs[i]
}

// rebuildRanges indexes the groups that have a range by keyspace and start.
func (e *Engine) rebuildRanges() {
	if !e.rangesStale && e.ranges != nil {
		return
	}
	e.ranges = map[string][]*group{}
	for _, g := range e.order {
		if g.ranged && !g.removed {
			e.ranges[g.key.keyspace] = append(e.ranges[g.key.keyspace], g)
		}
	}
	for _, gs := range e.ranges {
		slices.SortFunc(gs, func(a, b *group) int { return bytes.Compare(a.start, b.start) })
	}
	e.rangesStale = false
}

// overlapping returns this node's groups with a range that intersects [start, end) (end
// nil: unbounded), except skip.
func (e *Engine) overlapping(keyspace string, start, end []byte, skip *group) []*group {
	e.rebuildRanges()
	var out []*group
	for _, g := range e.ranges[keyspace] {
		if g == skip || (end != nil && bytes.Compare(g.start, end) >= 0) || (g.end != nil && bytes.Compare(g.end, start) <= 0) {
			continue
		}
		out = append(out, g)
	}
	return out
}

// rightOf returns the group of this node whose range starts where g's ends (nil: none).
func (e *Engine) rightOf(g *group) *group {
	if !g.ranged || g.end == nil {
		return nil
	}
	r := e.groupFor(g.key.keyspace, g.end)
	if r == nil || !bytes.Equal(r.start, g.end) {
		return nil
	}
	return r
}

// driveRepartitions runs the repartitioning part of housekeeping at once (after the map
// changed, or a split, freeze or merge applied, or a frozen replica reported), so that a
// split or merge does not wait for the next housekeeping round at each of its steps.
func (e *Engine) driveRepartitions() {
	e.kick = false
	for _, g := range slices.Clone(e.order) {
		if g.removed {
			continue
		}
		e.tryUnblock(g)
		switch {
		case g.partRetired || g.unborn:
			if g.ranged && g.frozenAt == 0 && g.state == etcdraft.StateLeader && e.membershipSettled(g) {
				e.driveRetired(g)
			}
		case g.inPlacement && g.state == etcdraft.StateLeader:
			e.driveRange(g)
		}
	}
}

// rangeChanged notes that a group's range changed (or a group came or went): the index is
// rebuilt, groups the map lists may be created now, and requests waiting for their keys'
// group are dispatched again (at the end of the Ready).
func (e *Engine) rangeChanged() {
	e.rangesStale = true
	e.syncNeeded = true
}

// --- groups from the placement ---

// nextPartitionID is the ID the keyspace's next split gives: IDs below it that the keyspace
// does not have were retired by merges; IDs from it on are not born yet in this map.
func nextPartitionID(ks *placement.Keyspace) uint32 {
	next := ks.NextPartitionID
	for i := range ks.Partitions {
		next = max(next, ks.Partitions[i].ID+1)
	}
	return next
}

// creationRange is partition id's range when its keyspace was created (placement.
// BuildKeyspace); ok false for an ID a split created.
func creationRange(spec config.Keyspace, id uint32) (start, end []byte, ok bool) {
	n := spec.Partitions
	if int(id) >= n {
		return nil, nil, false
	}
	at := func(i int) []byte {
		switch {
		case i == 0:
			return []byte{}
		case len(spec.SplitPoints) > 0:
			return []byte(spec.SplitPoints[i-1])
		}
		return placement.PartitionStart(i, n)
	}
	start = at(int(id))
	if int(id)+1 < n {
		end = at(int(id) + 1)
	}
	return start, end, true
}

// canBootstrap reports whether a founding member may bootstrap p's group at index 1 with an
// empty range of data: only a partition of the keyspace's creation, while its keyspace has
// never split and it has its creation range. Then its log holds no split, freeze or merge
// entry, and replaying it from index 1 gives every founder the same state. Otherwise its
// history has range changes that only a replica holding the groups around can replay, and it
// waits for its leader's snapshot like any new member.
func canBootstrap(ks *placement.Keyspace, p *placement.Partition) bool {
	if nextPartitionID(ks) != uint32(ks.Spec.Partitions) {
		return false
	}
	start, end, ok := creationRange(ks.Spec, p.ID)
	return ok && bytes.Equal(start, p.Start) && bytes.Equal(end, p.End) && (end == nil) == (p.End == nil)
}

// syncGroups makes this node's groups follow the placement map: the groups of partitions it
// is a member of are created (bootstrapped by founders when canBootstrap, else empty, and
// never over a range a group of this node still covers: that group splits or merges into
// them), every group gets its partition's description, groups whose partition is gone from a
// keyspace that remains are retired (a merge absorbs them), and groups of dropped keyspaces
// are destroyed.
func (e *Engine) syncGroups() {
	e.syncNeeded = false
	m := e.pmap
	if m == nil {
		return
	}
	if !e.orphansLoaded {
		e.orphansLoaded = true
		e.loadOrphans()
	}
	kept := map[string]*placement.Keyspace{}
	for _, name := range slices.Sorted(maps.Keys(m.Keyspaces)) {
		ks := m.Keyspaces[name]
		if ks.Spec.Protocol != e.protocol {
			continue
		}
		kept[name] = ks
		opts, err := config.RaftOptionsOf(ks.Spec.Options)
		if err != nil {
			for _, p := range ks.Partitions {
				e.broken[groupKey{name, p.ID}] = err.Error()
			}
			continue
		}
		region := opts.LeaderRegion
		if region == "" && len(ks.Spec.Regions) > 0 {
			region = ks.Spec.Regions[0]
		}
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			k := groupKey{name, p.ID}
			g := e.groups[k]
			if g == nil {
				g = e.createFromMap(ks, p, opts, region)
				if g == nil {
					continue
				}
			}
			e.describe(g, *p, opts, region)
			g.partRetired, g.unborn = false, false
			if e.cfg.Mutation == "split-founds-fresh-group" && g.ranged && p.End != nil && (g.end == nil || bytes.Compare(p.End, g.end) < 0) {
				// Broken on purpose: the group narrows when this node installs the map, not
				// at a split entry of its log, and the right part is founded afresh below.
				g.end = bytes.Clone(p.End)
				e.rangeChanged()
			}
		}
	}
	droppedKs := map[string]bool{}
	for _, g := range slices.Clone(e.order) {
		ks, ok := kept[g.key.keyspace]
		if !ok {
			e.destroy(g, "its keyspace was dropped")
			if !droppedKs[g.key.keyspace] {
				droppedKs[g.key.keyspace] = true
				e.out.Raw = append(e.out.Raw, tombstonesOf(g.key.keyspace))
			}
			continue
		}
		if _, ok := ks.Partition(g.key.partition); ok {
			continue
		}
		// The map no longer lists the partition (a merge retired it: IDs are never reused)
		// or does not list it yet (a split this node applied before installing the map that
		// made it). Its description stays the last one known, or the parent's.
		g.unborn = g.key.partition >= nextPartitionID(ks)
		g.partRetired = !g.unborn
		if g.unborn {
			if p := ks.Lookup(g.startKey()); p != nil {
				g.inPlacement = p.HasMember(e.cfg.NodeID)
			}
		}
	}
	e.refreshPeers()
	e.retryRangeWaits()
}

// describe hands g its partition's description from the placement.
func (e *Engine) describe(g *group, p placement.Partition, opts config.RaftOptions, region string) {
	g.desc = raftDesc(p)
	g.descGen++
	g.opts = opts
	g.inPlacement = p.HasMember(e.cfg.NodeID)
	g.preferred = g.preferred[:0]
	for _, r := range p.Replicas {
		if e.regionOf(r) == region {
			g.preferred = append(g.preferred, r)
		}
	}
	e.markDirty(g)
}

// createFromMap creates this node's group of p, if it is to have one now (nil: not).
func (e *Engine) createFromMap(ks *placement.Keyspace, p *placement.Partition, opts config.RaftOptions, region string) *group {
	k := groupKey{ks.Spec.Name, p.ID}
	id := groupID(k)
	if e.dropped[id] {
		return nil // its state is being deleted (a Ready not applied yet)
	}
	hasState := e.hasGroupState(id) || e.hasAppliedState(id)
	// A node a move dropped from the placement stays a member of the group until the change
	// that removes it commits, and that change may need its vote: if it restarts before (its
	// replica's state is still on disk), it loads the group again and stays until removed
	// (the simulator found a joint configuration that could never leave when such a node
	// did not: seed 373 with moves and a crash of every node).
	if !p.HasMember(e.cfg.NodeID) && !(p.HasDeparted(e.cfg.NodeID) && hasState) {
		return nil
	}
	bootstrap := false
	if !hasState {
		if e.tombstoned(k) {
			return nil // gone from here for good; a map that still lists this node is older
		}
		if ov := e.overlapping(k.keyspace, p.Start, p.End, nil); len(ov) > 0 && !frozenInside(ov, p) {
			// A group of this node still serves part of the range: it founds this one by a
			// split, or absorbs what is left of the range by a merge. Creating an empty
			// replica now would let a snapshot of the new group in over data the old one
			// still serves. A frozen group serves nothing: its range is its left
			// neighbour's once merged, and if the merge and the splits after it went by
			// without this node (its left neighbour caught up by a snapshot taken after
			// them), only the snapshot of the group that holds its start key now can
			// supersede it (snapshotFits decides when). So frozen groups whose start keys
			// the partition holds do not keep its replica out (others would only make its
			// snapshots be declined until they go).
			return nil
		}
		founder := slices.Contains(p.FoundingVoters, e.cfg.NodeID) || slices.Contains(p.FoundingLearners, e.cfg.NodeID)
		bootstrap = founder && canBootstrap(ks, p)
		if e.cfg.Mutation == "split-founds-fresh-group" && founder {
			// Broken on purpose: the new partition of a split is founded afresh from the
			// placement (index 1, empty origins), at this node's own moment.
			bootstrap = true
		}
	}
	if err := e.addGroup(k, p, opts, region, bootstrap); err != nil {
		e.broken[k] = err.Error()
		return nil
	}
	return e.groups[k]
}

// frozenInside reports whether every group of gs is frozen and one at least starts inside p.
func frozenInside(gs []*group, p *placement.Partition) bool {
	inside := false
	for _, g := range gs {
		if g.frozenAt == 0 {
			return false
		}
		inside = inside || p.Contains(g.start)
	}
	return inside
}

// hasAppliedState reports whether this node's storage holds an applied state of the group
// (a replica whose log is not written yet, e.g. a snapshot being installed).
func (e *Engine) hasAppliedState(id uint64) bool {
	_, found, err := e.store.GetRaw(appliedKey(id))
	return err == nil && found
}

// loadOrphans loads the groups this node has state for whose partition the map does not
// list: a group a merge retired before this node merged it (its left neighbour's merge waits
// for it), or one a split founded here before the map that made it arrived. The applied
// state names the keyspace and partition; the scan visits one key per group.
func (e *Engine) loadOrphans() {
	from := []byte{rawGroupTag}
	for n := 0; n < maxOrphanScan; n++ {
		var id uint64
		found := false
		err := e.store.ScanRaw(from, []byte{rawGroupTag + 1}, 1, func(k, _ []byte) bool {
			if len(k) >= 9 {
				id, found = uint64FromKey(k[1:9]), true
			}
			return false
		})
		if err != nil || !found {
			return
		}
		e.loadOrphan(id)
		if id == ^uint64(0) {
			return
		}
		from = groupPrefix(id + 1)
	}
}

// maxOrphanScan bounds the groups loadOrphans visits.
const maxOrphanScan = 1 << 20

func uint64FromKey(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// loadOrphan loads group id if it is an orphan of one of this engine's keyspaces.
func (e *Engine) loadOrphan(id uint64) {
	if e.byID[id] != nil || e.dropped[id] {
		return
	}
	st, ok, err := e.loadApplied(id)
	if err != nil || !ok || st.GetGeneration() == 0 || st.GetKeyspace() == "" {
		return
	}
	ks, ok := e.pmap.Keyspace(st.GetKeyspace())
	if !ok || ks.Spec.Protocol != e.protocol {
		return
	}
	k := groupKey{st.GetKeyspace(), st.GetPartition()}
	if groupID(k) != id {
		return
	}
	if _, listed := ks.Partition(k.partition); listed {
		return // syncGroups takes it like any other
	}
	opts, err := config.RaftOptionsOf(ks.Spec.Options)
	if err != nil {
		return
	}
	desc := e.orphanDesc(ks, k.partition, st.GetStart(), st.GetEnd())
	if err := e.addGroup(k, &desc, opts, "", false); err != nil {
		e.broken[k] = err.Error()
		return
	}
	g := e.groups[k]
	g.unborn = k.partition >= nextPartitionID(ks)
	g.partRetired = !g.unborn
	g.inPlacement = desc.HasMember(e.cfg.NodeID)
}

// orphanDesc is the description of a partition the map does not list: the members of the
// partition that holds its start key, with its own ID and range.
func (e *Engine) orphanDesc(ks *placement.Keyspace, id uint32, start, end []byte) placement.Partition {
	p := *ks.Lookup(start)
	p.ID = id
	p.Start, p.End = bytes.Clone(start), nil
	if p.Start == nil {
		p.Start = []byte{}
	}
	if len(end) > 0 {
		p.End = bytes.Clone(end)
	}
	p.Move = nil
	return p
}

// --- driving splits, freezes and merges (leaders, at housekeeping) ---

// rangePending reports whether the placement asks g to split or merge (leader's view):
// its partition ends before g's range does (split), or after it, or the group right of it is
// retired (merge).
func (e *Engine) rangePending(g *group) (split, merge bool) {
	if !g.ranged || g.partRetired || g.unborn || g.frozenAt != 0 || g.txn != nil {
		return false, false // a transactional group never splits or merges (metadata refuses it)
	}
	mapEnd := g.desc.End
	switch {
	case g.end == nil && mapEnd == nil:
	case g.end == nil:
		return true, false
	case mapEnd == nil || bytes.Compare(mapEnd, g.end) > 0:
		return false, true
	case bytes.Compare(mapEnd, g.end) < 0:
		return true, false
	}
	if r := e.rightOf(g); r != nil && r.partRetired {
		return false, true
	}
	return false, false
}

// confPending reports whether g's log holds a configuration change it has not applied, or its
// configuration is joint: a split or merge then waits, so that both groups have one
// configuration.
func (e *Engine) confPending(g *group) bool {
	if len(g.conf.GetVotersOutgoing()) > 0 || g.confProposedAt != 0 {
		return true
	}
	ents, complete := unappliedEntries(g)
	if !complete {
		return true // not all in view: assume the worst
	}
	for _, ent := range ents {
		if ent.GetType() != raftpb.EntryType_EntryNormal {
			return true
		}
	}
	return false
}

// unappliedEntries returns the entries of g's log past its applied index, and whether that is
// all of them (false: some are not in view, a caller assumes the worst).
func unappliedEntries(g *group) ([]*raftpb.Entry, bool) {
	last, _ := g.log.Storage().LastIndex()
	if last <= g.applied {
		return nil, true
	}
	first, _ := g.log.Storage().FirstIndex()
	ents, err := g.log.Storage().Entries(max(g.applied+1, first), last+1, maxSizePerMsg)
	if err != nil || uint64(len(ents)) < last-max(g.applied+1, first)+1 {
		return nil, false
	}
	return ents, true
}

// rangeInFlight reports whether g's log holds a split, freeze or merge entry it has not
// applied: a membership change proposed now would apply after it, and the groups it founds
// or absorbs would not have it.
func (e *Engine) rangeInFlight(g *group) bool {
	ents, complete := unappliedEntries(g)
	if !complete {
		return true // not all in view: assume the worst
	}
	for _, ent := range ents {
		if ent.GetType() != raftpb.EntryType_EntryNormal || len(ent.GetData()) == 0 {
			continue
		}
		var cmd peerpb.RaftCommand
		if proto.Unmarshal(ent.GetData(), &cmd) == nil && (cmd.GetSplit() != nil || cmd.GetFreeze() != nil || cmd.GetMerge() != nil) {
			return true
		}
	}
	return false
}

// driveRange proposes g's next split or merge, if the placement asks for one; it reports
// whether one is pending or in the log (membership changes wait for it).
func (e *Engine) driveRange(g *group) (pending bool) {
	split, merge := e.rangePending(g)
	if !split && !merge {
		return g.ranged && e.rangeInFlight(g)
	}
	if g.blockedAt != 0 || (g.rangeProposedAt != 0 && e.ticks-g.rangeProposedAt < rangeRetryTicks) {
		return true
	}
	if split {
		e.trySplit(g)
	} else {
		e.tryMerge(g)
	}
	return true
}

// maxSplitPoints bounds the partitions one split entry founds.
const maxSplitPoints = 64

// trySplit proposes the split of g at its partition's new end, and at the starts of the
// map's partitions after it that lie inside g's range: the placement may have split several
// times before g follows, and one entry founds them all (each founded group would otherwise
// have to elect a leader before it could split off the next).
func (e *Engine) trySplit(g *group) {
	if e.confPending(g) || g.state != etcdraft.StateLeader {
		return
	}
	ks, ok := e.pmap.Keyspace(g.key.keyspace)
	if !ok {
		return
	}
	s := &peerpb.RaftSplit{}
	for at := g.desc.End; at != nil && (g.end == nil || bytes.Compare(at, g.end) < 0) && len(s.Keys) < maxSplitPoints; {
		p := ks.Lookup(at)
		if !bytes.Equal(p.Start, at) {
			return
		}
		s.Keys = append(s.Keys, bytes.Clone(at))
		s.Rights = append(s.Rights, p.ID)
		at = p.End
	}
	if len(s.Keys) == 0 {
		return
	}
	e.proposeRange(g, &peerpb.RaftCommand{Split: s})
}

// tryMerge proposes the merge of g's right-hand neighbour into g, once every member has
// applied the neighbour's freeze.
func (e *Engine) tryMerge(g *group) {
	q := e.rightOf(g)
	if q == nil || !q.ranged || q.removed || e.confPending(g) || g.state != etcdraft.StateLeader {
		return
	}
	broken := e.cfg.Mutation == "merge-without-freeze"
	if !broken {
		if q.frozenAt == 0 || q.applied < q.frozenAt || len(q.conf.GetVotersOutgoing()) > 0 {
			return
		}
		if !sameSet(g.conf.GetVoters(), q.conf.GetVoters()) || !sameSet(g.conf.GetLearners(), q.conf.GetLearners()) {
			// The configurations differ: a membership change of g was under way when the
			// placement merged the partitions (on the same replicas), and g's membership
			// changes wait while the merge is pending. g finishes moving to the members the
			// neighbour froze with — the replicas the merge was decided on — unless that
			// would remove a member its placement lists (it never rejoins: wait instead).
			for _, id := range slices.Concat(g.conf.GetVoters(), g.conf.GetLearners()) {
				if !q.isMember(uint32(id)) && g.desc.HasMember(uint32(id)) {
					return
				}
			}
			e.driveMembershipTo(g, q.conf.GetVoters(), q.conf.GetLearners())
			return
		}
		for _, id := range slices.Concat(q.conf.GetVoters(), q.conf.GetLearners()) {
			if uint32(id) == e.cfg.NodeID {
				continue
			}
			if r, ok := q.frozenReports[uint32(id)]; !ok || r.frozenAt != q.frozenAt || r.applied < q.frozenAt {
				return // CockroachDB's merge waits for every replica of the right-hand side
			}
		}
	}
	cs, _ := proto.Marshal(q.conf)
	m := &peerpb.RaftMerge{Right: q.key.partition, FreezeIndex: q.frozenAt, RightStart: bytes.Clone(q.start), RightEnd: bytes.Clone(q.end),
		RightGeneration: q.gen, RightLastVersion: wire.VersionToPB(q.last), ConfState: cs}
	if broken {
		m.FreezeIndex = q.applied
	}
	for _, node := range slices.Sorted(maps.Keys(q.origins)) {
		m.RightOrigins = append(m.RightOrigins, &peerpb.RaftOriginApplied{Node: node, Version: wire.VersionToPB(q.origins[node])})
	}
	e.proposeRange(g, &peerpb.RaftCommand{Merge: m})
}

// driveRetired runs a retired group: its leader settles the membership its last description
// asks for, then freezes it; a frozen replica reports how far it has applied; an empty
// replica that hears nothing for long goes.
func (e *Engine) driveRetired(g *group) {
	if !g.ranged {
		if g.receiving == nil && e.ticks-max(g.heardAt, g.idleSince) > retiredEmptyTicks {
			e.destroy(g, "its partition was merged away and this replica never got its state")
			e.out.Raw = append(e.out.Raw, tombstoneOp(g.key))
		}
		return
	}
	if g.frozenAt != 0 || g.state != etcdraft.StateLeader || g.unborn {
		return
	}
	if e.cfg.Mutation == "merge-without-freeze" {
		return // broken on purpose: the left neighbour merges without waiting for a freeze
	}
	if !e.membershipSettled(g) {
		e.driveMembership(g)
		return
	}
	if e.confPending(g) || (g.rangeProposedAt != 0 && e.ticks-g.rangeProposedAt < rangeRetryTicks) {
		return
	}
	var into uint32
	if ks, ok := e.pmap.Keyspace(g.key.keyspace); ok && len(g.start) > 0 {
		into = ks.Lookup(g.start).ID
	}
	e.proposeRange(g, &peerpb.RaftCommand{Freeze: &peerpb.RaftFreeze{Into: into}})
}

// proposeRange proposes a split, freeze or merge entry in g's log.
func (e *Engine) proposeRange(g *group, cmd *peerpb.RaftCommand) {
	cmd.Origin = e.cfg.NodeID
	b, err := proto.Marshal(cmd)
	if err != nil {
		return
	}
	e.touch(g)
	if err := g.rn.Propose(b); err != nil {
		return // a hand-over in progress: housekeeping proposes again
	}
	g.rangeProposedAt = max(e.ticks, 1)
	e.markDirty(g)
	e.stats.RangeProposals.Add(1)
}

// --- applying splits, freezes and merges ---

// applyRange applies a split, freeze or merge entry; it reports false when the entry cannot
// apply on this replica yet (a merge whose right-hand group here has not applied the freeze):
// nothing of it is applied, and the group's apply stops there until it can.
func (e *Engine) applyRange(g *group, index uint64, cmd *peerpb.RaftCommand) bool {
	if cmd.GetOrigin() == e.cfg.NodeID && cmd.GetMerge() == nil {
		g.rangeProposedAt = 0 // this node's proposal applied (or was refused): the next may go
	}
	switch {
	case cmd.GetSplit() != nil:
		e.applySplit(g, index, cmd.GetSplit())
	case cmd.GetFreeze() != nil:
		e.applyFreeze(g, index)
	case cmd.GetMerge() != nil:
		return e.applyMerge(g, index, cmd.GetMerge())
	}
	return true
}

// applySplit narrows g to its first split key and founds the right-hand groups' replicas
// from g's state at index (CockroachDB's splitTrigger). Refused alike on every replica when
// the keys do not ascend strictly inside the range, or the group is frozen.
func (e *Engine) applySplit(g *group, index uint64, s *peerpb.RaftSplit) {
	keys := s.GetKeys()
	ok := g.ranged && g.frozenAt == 0 && len(keys) > 0 && len(keys) == len(s.GetRights())
	for i, key := range keys {
		lo := g.start
		if i > 0 {
			lo = keys[i-1]
		}
		ok = ok && bytes.Compare(key, lo) > 0 && (g.end == nil || bytes.Compare(key, g.end) < 0)
	}
	if !ok {
		e.stats.RangeRefused.Add(1)
		return
	}
	oldEnd := g.end
	g.end = bytes.Clone(keys[0])
	g.gen++
	g.rangeIndex = index
	cs, _ := proto.Marshal(g.conf)
	for i, key := range keys {
		end := oldEnd
		if i+1 < len(keys) {
			end = keys[i+1]
		}
		st := &peerpb.RaftAppliedState{Index: raftInitialLogIndex, Term: raftInitialLogTerm, LastVersion: wire.VersionToPB(g.last), ConfState: cs,
			Keyspace: g.key.keyspace, Partition: s.GetRights()[i], Start: bytes.Clone(key), End: bytes.Clone(end), Generation: g.gen}
		for _, node := range slices.Sorted(maps.Keys(g.origins)) {
			st.Origins = append(st.Origins, &peerpb.RaftOriginApplied{Node: node, Version: wire.VersionToPB(g.origins[node])})
		}
		if err := e.foundRight(g, st); err != nil {
			// The right-hand replica cannot be founded here (a bug, not an input): it
			// stays out of service on this node, with the reason; the others serve it.
			e.broken[groupKey{g.key.keyspace, s.GetRights()[i]}] = err.Error()
		}
		e.stats.Splits.Add(1)
	}
	e.rangeChanged()
	e.rerouteHeld(g)
}

// foundRight creates (or completes, if an empty replica of it exists) this node's replica of
// the right-hand group of a split, at state.
func (e *Engine) foundRight(left *group, st *peerpb.RaftAppliedState) error {
	k := groupKey{st.GetKeyspace(), st.GetPartition()}
	id := groupID(k)
	q := e.groups[k]
	if q != nil && q.ranged {
		// Already founded here (a snapshot of it, taken after this split, arrived first):
		// it is newer than this state and stays.
		return nil
	}
	var ls *LogStore
	var err error
	if q != nil {
		// An empty replica (it may have voted: its hard state is kept). Its RawNode is
		// replaced; whatever it had not persisted was not sent either.
		ls = q.log
		if q.receiving != nil {
			e.abortReceive(q, "founded by the split")
		}
		pend := e.pendingIDs(q)
		e.unlink(q)
		for _, pid := range pend {
			e.pending[pid].group = nil
		}
		defer func() {
			for _, pid := range pend {
				e.reroute(pid)
			}
		}()
	} else if other, dup := e.byID[id]; dup {
		return fmt.Errorf("group id %x collides with keyspace %s partition %d", id, other.key.keyspace, other.key.partition)
	} else if ls, err = LoadLogStore(e.store, id); err != nil {
		return err
	}
	hs, _, _ := ls.Storage().InitialState()
	nhs := &raftpb.HardState{Term: proto.Uint64(raftInitialLogTerm), Commit: proto.Uint64(max(hs.GetCommit(), raftInitialLogIndex))}
	if hs.GetTerm() >= raftInitialLogTerm {
		nhs.Term, nhs.Vote = proto.Uint64(hs.GetTerm()), proto.Uint64(hs.GetVote())
	}
	conf := &raftpb.ConfState{}
	if err := proto.Unmarshal(st.GetConfState(), conf); err != nil {
		return fmt.Errorf("split: configuration: %w", err)
	}
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(raftInitialLogIndex), Term: proto.Uint64(raftInitialLogTerm), ConfState: conf}}
	ops, err := ls.Save(nhs, snap, nil)
	if err != nil {
		return fmt.Errorf("split: found the log of %s/%d: %w", k.keyspace, k.partition, err)
	}
	e.out.Raw = append(e.out.Raw, ops...)
	desc := left.desc
	if ks, ok := e.pmap.Keyspace(k.keyspace); ok {
		if p, ok := ks.Partition(k.partition); ok {
			desc = *p
		} else {
			desc = e.orphanDesc(ks, k.partition, st.GetStart(), st.GetEnd())
		}
	}
	g, err := e.newGroup(k, &desc, left.opts, ls, st)
	if err != nil {
		return err
	}
	e.out.Raw = append(e.out.Raw, g.appliedOp())
	g.preferred = slices.Clone(left.preferred)
	g.inPlacement = left.inPlacement
	if ks, ok := e.pmap.Keyspace(k.keyspace); ok {
		if p, ok := ks.Partition(k.partition); ok {
			g.inPlacement = p.HasMember(e.cfg.NodeID)
		} else {
			g.unborn = k.partition >= nextPartitionID(ks)
			g.partRetired = !g.unborn
		}
	}
	// The left group's leader founds the right one's leader too, as CockroachDB's does: it
	// campaigns once the followers have had time to apply the split (before, their empty
	// replicas do not exist yet and the campaign would only cost an election timeout).
	if left.state == etcdraft.StateLeader {
		g.campaignAt = e.ticks + uint64(max(left.opts.HeartbeatTicks(), 1))
		g.campaigns = splitCampaigns
	}
	e.stats.GroupsFounded.Add(1)
	return nil
}

// newGroup builds a replica of group k from a founding state whose log (ls) is in place.
func (e *Engine) newGroup(k groupKey, p *placement.Partition, opts config.RaftOptions, ls *LogStore, st *peerpb.RaftAppliedState) (*group, error) {
	id := groupID(k)
	g := &group{key: k, id: id, opts: opts, log: ls, sm: e.newSM(k.keyspace), origins: map[uint32]hlc.Version{}, desc: raftDesc(*p), conf: &raftpb.ConfState{}}
	g.lease.acks = map[uint32]int64{}
	if err := g.restoreApplied(st); err != nil {
		return nil, err
	}
	g.confIndex = st.GetIndex()
	hs, _, _ := ls.Storage().InitialState()
	rn, err := etcdraft.NewRawNode(e.raftConfig(g, min(g.applied, hs.GetCommit())))
	if err != nil {
		return nil, fmt.Errorf("raft node: %w", err)
	}
	g.rn = rn
	g.idleSince = e.ticks
	g.heardAt = e.ticks
	e.link(g)
	return g, nil
}

// link adds g to the engine's indexes.
func (e *Engine) link(g *group) {
	e.groups[g.key] = g
	e.byID[g.id] = g
	i, _ := slices.BinarySearchFunc(e.order, g.id, func(a *group, id uint64) int { return cmpU64(a.id, id) })
	e.order = slices.Insert(e.order, i, g)
	if g.txn != nil {
		j, _ := slices.BinarySearchFunc(e.txnList, g.id, func(a *group, id uint64) int { return cmpU64(a.id, id) })
		e.txnList = slices.Insert(e.txnList, j, g)
	}
	e.activeStale = true
	e.rangeChanged()
	e.markDirty(g)
	delete(e.broken, g.key)
}

// applyFreeze freezes g: from here on it applies no write and changes its range no more.
func (e *Engine) applyFreeze(g *group, index uint64) {
	if g.frozenAt != 0 || !g.ranged {
		return
	}
	g.frozenAt = index
	g.rangeIndex = index
	e.stats.Freezes.Add(1)
	e.reportFrozen(g)
	e.rerouteHeld(g)
	e.kick = true
}

// applyMerge widens g over its right-hand neighbour (CockroachDB's mergeTrigger). It reports
// false when this replica's replica of the neighbour has not applied the freeze yet.
func (e *Engine) applyMerge(g *group, index uint64, m *peerpb.RaftMerge) bool {
	cs := &raftpb.ConfState{}
	if g.frozenAt != 0 || !g.ranged || g.end == nil || !bytes.Equal(g.end, m.GetRightStart()) || proto.Unmarshal(m.GetConfState(), cs) != nil ||
		!sameSet(g.conf.GetVoters(), cs.GetVoters()) || !sameSet(g.conf.GetLearners(), cs.GetLearners()) ||
		len(g.conf.GetVotersOutgoing()) > 0 || len(cs.GetVotersOutgoing()) > 0 {
		// The same on every replica: the range moved since the proposal, or the
		// configurations differ. The leader proposes again if the placement still asks.
		e.stats.RangeRefused.Add(1)
		g.rangeProposedAt = 0
		return true
	}
	q := e.groups[groupKey{g.key.keyspace, m.GetRight()}]
	ready := q != nil && q.ranged && q.frozenAt == m.GetFreezeIndex() && q.applied >= m.GetFreezeIndex() && bytes.Equal(q.start, g.end)
	if e.cfg.Mutation == "merge-without-freeze" {
		ready = true // broken on purpose: whatever this replica's neighbour holds becomes g's
	}
	if !ready {
		if g.blockedAt != index {
			e.stats.MergesBlocked.Add(1)
		}
		g.blockedAt = index
		return false
	}
	g.blockedAt = 0
	g.rangeProposedAt = 0
	g.end = nil
	if len(m.GetRightEnd()) > 0 {
		g.end = bytes.Clone(m.GetRightEnd())
	}
	g.gen = max(g.gen, m.GetRightGeneration()) + 1
	g.rangeIndex = index
	if v := wire.VersionFromPB(m.GetRightLastVersion()); g.last.Less(v) {
		g.last = v
	}
	for _, o := range m.GetRightOrigins() {
		if v := wire.VersionFromPB(o.GetVersion()); g.origins[o.GetNode()].Less(v) {
			g.origins[o.GetNode()] = v
		}
	}
	e.stats.Merges.Add(1)
	if q != nil {
		e.dropMerged(q, "merged into partition "+fmt.Sprint(g.key.partition))
	}
	e.rangeChanged()
	return true
}

// dropMerged deletes this node's replica of a group that a merge (or a snapshot of the group
// that absorbed it) has superseded: its Raft state goes in the same batch as the change that
// superseded it; its data is now the absorbing group's and stays. Its requests go to the
// group that now has their keys.
func (e *Engine) dropMerged(q *group, why string) {
	if q.receiving != nil {
		e.abortReceive(q, why)
	}
	for _, tr := range q.sending {
		e.retireSnapshot(q, tr.snapID)
	}
	if q.snap != nil {
		e.out.Jobs = append(e.out.Jobs, removeStagedJob{file: q.snap.id})
	}
	e.out.Raw = append(e.out.Raw, q.log.Remove()...)
	e.out.Raw = append(e.out.Raw, storage.RawOp{Key: appliedKey(q.id), Delete: true}, storage.RawOp{Key: markerKey(q.id), Delete: true}, tombstoneOp(q.key))
	pend := e.pendingIDs(q)
	waiting := q.waiting
	q.waiting = nil
	e.dropped[q.id] = true
	e.unlink(q)
	for _, id := range pend {
		if p := e.pending[id]; p != nil {
			p.group = nil
		}
		e.reroute(id)
	}
	for _, w := range waiting {
		e.reroute(w.id)
	}
	e.stats.GroupsMerged.Add(1)
}

// A tombstone (a raw key written with the deletion of a group's Raft state) marks a group
// this node merged away, dropped under a snapshot that superseded it, or was removed from:
// the node never creates a replica of it again — an empty one, made for a late message or a
// map that still lists the node, would have forgotten entries it acknowledged, which Raft
// forbids (CockroachDB's range tombstone; a node never rejoins a Raft partition it left,
// config.ProtocolSpec.NoRejoin). Tombstones are per keyspace, 'T' | keyspace | 0 | partition,
// and go with the keyspace (a keyspace created again under the name reuses partition IDs).
const tombstoneTag = 'T'

func tombstoneKey(k groupKey) []byte {
	b := append([]byte{tombstoneTag}, k.keyspace...)
	return append(b, 0, byte(k.partition>>24), byte(k.partition>>16), byte(k.partition>>8), byte(k.partition))
}

func tombstoneOp(k groupKey) storage.RawOp {
	return storage.RawOp{Key: tombstoneKey(k), Value: []byte{1}}
}

// tombstonesOf is the op that deletes a dropped keyspace's tombstones.
func tombstonesOf(keyspace string) storage.RawOp {
	b := append([]byte{tombstoneTag}, keyspace...)
	return storage.RawOp{Key: append(bytes.Clone(b), 0), End: append(b, 1), Delete: true}
}

// leave destroys this node's replica of a group whose configuration no longer has it; for a
// protocol whose nodes never rejoin a group (NoRejoin) a tombstone keeps it from being made
// again, empty, from a map that still lists the node.
func (e *Engine) leave(g *group, why string) {
	e.destroy(g, why)
	if spec, _ := config.Protocol(e.protocol); spec.NoRejoin {
		e.out.Raw = append(e.out.Raw, tombstoneOp(g.key))
	}
}

// tombstoned reports whether this node's replica of group k went for good.
func (e *Engine) tombstoned(k groupKey) bool {
	_, found, err := e.store.GetRaw(tombstoneKey(k))
	return err != nil || found
}

// tryUnblock applies a blocked group's entries once the merge it waits for can apply.
func (e *Engine) tryUnblock(g *group) {
	if g.blockedAt == 0 || g.removed {
		return
	}
	ents, err := g.log.Storage().Entries(g.blockedAt, g.handed+1, ^uint64(0))
	if err != nil || len(ents) == 0 || ents[0].GetIndex() != g.blockedAt {
		return
	}
	var cmd peerpb.RaftCommand
	if proto.Unmarshal(ents[0].GetData(), &cmd) != nil || cmd.GetMerge() == nil {
		return
	}
	m := cmd.GetMerge()
	q := e.groups[groupKey{g.key.keyspace, m.GetRight()}]
	if q == nil || !q.ranged || q.frozenAt != m.GetFreezeIndex() || q.applied < m.GetFreezeIndex() {
		return
	}
	g.blockedAt = 0
	e.applyEntries(g, ents)
}

// --- frozen groups' reports ---

// reportFrozen tells the other members how far this node's frozen replica of g has applied.
func (e *Engine) reportFrozen(g *group) {
	if g.frozenAt == 0 || g.removed {
		return
	}
	for _, id := range slices.Concat(g.conf.GetVoters(), g.conf.GetLearners()) {
		if uint32(id) == e.cfg.NodeID {
			continue
		}
		a := &peerpb.RaftApplied{Keyspace: g.key.keyspace, Index: g.applied, FrozenAt: g.frozenAt}
		a.Partition, a.Group = e.wireRef(g)
		e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: uint32(id), Msg: &peerpb.Envelope_RaftApplied{RaftApplied: a}})
	}
}

// stepFrozenReport takes a member's report on its frozen replica.
func (e *Engine) stepFrozenReport(from uint32, a *peerpb.RaftApplied) {
	g := e.groups[groupKey{a.GetKeyspace(), groupOf(a.GetPartition(), a.Group)}]
	if g == nil {
		return
	}
	if g.frozenReports == nil {
		g.frozenReports = map[uint32]frozenReport{}
	}
	r := g.frozenReports[from]
	if a.GetFrozenAt() != r.frozenAt || a.GetIndex() > r.applied {
		g.frozenReports[from] = frozenReport{frozenAt: a.GetFrozenAt(), applied: a.GetIndex()}
		if r.frozenAt != a.GetFrozenAt() {
			e.kick = true // it may complete the reports a merge waits for
		}
	}
}

// --- snapshots across splits and merges ---

// snapshotFits checks that a snapshot of g at st may replace this node's data of st's range:
// every other group of this node that overlaps the range must be superseded by it — its
// start key inside the range and its generation older (then it was merged into the
// snapshot's group: while a group lives, only it holds its start key, and each split or merge
// raises the generation of the group holding a key) — and those are returned, to be dropped
// with the install. Otherwise (a group of this node is newer, or begins left of the range)
// the snapshot is refused: the group of this node is not done with that range yet. A
// snapshot of a replica that has no range here yet supersedes groups only once no group of
// this node can still need them for a merge (leftSettled); wait says that a read index
// asked for that is on its way (the offer is held, not declined).
func (e *Engine) snapshotFits(g *group, st *peerpb.RaftAppliedState) (drop []*group, fits, wait bool) {
	if st.GetGeneration() == 0 {
		return nil, true, false // a state without a range: a group that never repartitioned
	}
	var end []byte
	if len(st.GetEnd()) > 0 {
		end = st.GetEnd()
	}
	for _, h := range e.overlapping(g.key.keyspace, st.GetStart(), end, g) {
		inside := bytes.Compare(h.start, st.GetStart()) >= 0 && (end == nil || bytes.Compare(h.start, end) < 0)
		if !inside || h.gen >= st.GetGeneration() {
			return nil, false, false
		}
		drop = append(drop, h)
	}
	if len(drop) > 0 && !g.ranged {
		if settled, asked := e.leftSettled(g, st, drop); !settled {
			return nil, false, asked
		}
	}
	return drop, true, false
}

// leftSettled reports whether a snapshot of g, a replica that has no range here yet, may
// supersede the groups drop; asked: a read index it waits for is on its way.
//
// That they were merged away is certain (a newer group holds their start keys); that this
// node no longer needs them is not. The group that absorbed one of them may be this node's
// group left of the snapshot's range, still behind the merge in its log: were the merged
// group gone, its merge would wait for it forever. And if this node keeps a merged group
// whose absorbing group caught up by a snapshot taken after the merge and after a split
// that gave the merged range to new groups (that snapshot no longer covers it, so it does
// not supersede it), the merged group is kept, and keeps the new groups out of its range,
// for good: the simulator found a node that never got the writes of that range again (seed
// 721). CockroachDB's merge trigger subsumes the right-hand replica only on the replicas
// that apply it (and a snapshot of the left-hand range subsumes the replicas it covers);
// a replica of a merged-away range that neither covers is removed by the replica GC queue
// only once its left neighbour on the store is up to date with its range descriptor in
// meta, for only that neighbour could still apply the merge (docs/tech-notes/range-merges.md,
// "Replica GC"). The same here, with the left neighbour L: the first group of this node left
// of the snapshot's start that is not frozen (a frozen group merges nothing; the group that
// absorbs it could absorb the ones right of it next). L is past any merge of them if its
// generation is at least the snapshot's (every holder of a key since its merge has at least
// the generation the merge gave; a group other than L could only absorb them by absorbing
// L's keys first, which would raise its generation above L's before the merge), or else
// once it has applied its leader's commit index as read after the snapshot was offered (a
// read index, linearizable: the merge was committed before; if another group was to absorb
// them, L would be frozen or narrowed by then). No group there (nothing holds the keys left
// of them): none can absorb them through its log.
func (e *Engine) leftSettled(g *group, st *peerpb.RaftAppliedState, drop []*group) (settled, asked bool) {
	start := st.GetStart()
	if len(start) == 0 {
		return true, false
	}
	l := e.endingAt(g.key.keyspace, start)
	for l != nil && l.frozenAt != 0 && len(l.start) > 0 {
		// A frozen group merges nothing (applyMerge refuses): the group that absorbs it
		// is the one that could absorb the snapshot's groups next.
		l = e.endingAt(g.key.keyspace, l.start)
	}
	if l == nil || l.frozenAt != 0 {
		return true, false
	}
	if l.blockedAt != 0 {
		return false, false // it waits for a merge: later
	}
	if l.gen >= st.GetGeneration() {
		// Every group that held the snapshot's keys since the merge has at least the
		// generation the merge gave (each split and merge raises it along a key's holders),
		// and the snapshot's group is one: so is l, if it absorbed them. Had another group
		// absorbed them, it would have absorbed (or split off) l's keys first, with a
		// generation above l's, before the merge: no read needed.
		return true, false
	}
	ids := make([]uint64, 0, len(drop))
	for _, h := range drop {
		ids = append(ids, h.id)
	}
	slices.Sort(ids)
	if c := l.leftCheck; c != nil && c.forGroup == g.id && slices.Equal(c.covers, ids) {
		if c.index != 0 {
			return l.applied >= c.index, false // behind: it catches up first
		}
		if e.ticks-c.asked < uint64(2*max(l.opts.ElectionTicks(), 1)) {
			return false, true // asked: the answer comes
		}
	}
	e.nextID++
	l.leftCheck = &leftCheck{forGroup: g.id, covers: ids, ctx: forwardedBit | e.nextID, asked: e.ticks}
	e.touch(l)
	l.rn.ReadIndex(e.readCtx(l.leftCheck.ctx))
	e.markDirty(l)
	return false, true
}

// heldOffer is a snapshot offer this node neither takes nor declines yet: it would
// supersede groups of this node once their left neighbour is known to be up to date, and
// the read index that tells is on its way (leftSettled). It is taken up again every tick
// (retryHeldOffers) rather than declined, which would cost an election timeout before the
// leader offered again.
type heldOffer struct {
	from  uint32
	offer *peerpb.RaftSnapshotOffer
	since time.Time
}

// holdOffer keeps g's offer until leftSettled can answer, for up to two election timeouts
// (the offer holds one of the leader's transfer slots); false: declined instead.
func (e *Engine) holdOffer(now time.Time, g *group, from uint32, o *peerpb.RaftSnapshotOffer) bool {
	since := now
	if h := g.heldOffer; h != nil && h.from == from && h.offer.GetSnapshotId() == o.GetSnapshotId() {
		since = h.since
	}
	if now.Sub(since) > 2*g.opts.ElectionTimeout {
		return false
	}
	if !slices.Contains(e.heldOffers, g) {
		e.heldOffers = append(e.heldOffers, g)
	}
	g.heldOffer = &heldOffer{from: from, offer: o, since: since}
	return true
}

// retryHeldOffers takes up the held offers again.
func (e *Engine) retryHeldOffers(now time.Time) {
	held := e.heldOffers
	e.heldOffers = nil
	for _, g := range held {
		h := g.heldOffer
		if h == nil {
			continue
		}
		if !g.removed && g.receiving == nil {
			e.stepOffer(now, h.from, h.offer)
		}
		if g.heldOffer == h {
			g.heldOffer = nil // taken, declined, or moot
		}
	}
}

// endingAt returns the group of this node whose range ends at key (nil: none).
func (e *Engine) endingAt(keyspace string, key []byte) *group {
	e.rebuildRanges()
	for _, h := range e.ranges[keyspace] {
		if h.end != nil && bytes.Equal(h.end, key) {
			return h
		}
	}
	return nil
}

// leftCheck is a read index of a group, asked for a snapshot of its right-hand neighbour
// that would supersede groups of this node (leftSettled).
type leftCheck struct {
	forGroup uint64   // the snapshot's group
	covers   []uint64 // the groups it would supersede, sorted
	ctx      uint64   // the read's request ID
	asked    uint64   // tick
	index    uint64   // the read index (0: not answered yet)
}

// supersede drops groups a snapshot being installed supersedes: their Raft state and their
// data (the snapshot brings its range's; what lies beyond belongs to no group here) go before
// the snapshot's data is ingested.
func (e *Engine) supersede(drop []*group, by *group) {
	for _, h := range drop {
		span := h.span()
		e.dropMerged(h, fmt.Sprintf("superseded by a snapshot of partition %d", by.key.partition))
		e.out.Ingests = append(e.out.Ingests, engine.Ingest{Span: span})
		e.stats.GroupsSuperseded.Add(1)
	}
}

// takeSnapshotRange installs a snapshot's range in g (its data is being installed).
func (e *Engine) takeSnapshotRange(g *group, st *peerpb.RaftAppliedState) {
	if st.GetGeneration() == 0 {
		// Taken before ranges were stored, when partitions never split: the partition's.
		if !g.ranged {
			g.ranged, g.start, g.end, g.gen = true, bytes.Clone(g.desc.Start), bytes.Clone(g.desc.End), 1
			if g.start == nil {
				g.start = []byte{}
			}
			e.rangeChanged()
		}
		return
	}
	wasFrozen := g.frozenAt != 0
	g.restoreRange(st)
	g.rangeIndex = st.GetIndex()
	g.blockedAt = 0
	e.rangeChanged()
	if g.frozenAt != 0 && !wasFrozen {
		e.rerouteHeld(g)
	}
}

// --- requests whose keys moved ---

// rerouteHeld sends the requests held on g that g can no longer serve (their keys left its
// range, or it froze) to the group that has them; requests already proposed are refused at
// apply and sent then, and reads are checked when they are served.
func (e *Engine) rerouteHeld(g *group) {
	for _, id := range e.pendingIDs(g) {
		p := e.pending[id]
		if p.proposed || p.heldSince.IsZero() || e.stillServes(g, p.req) {
			continue
		}
		e.reroute(id)
	}
}

// stillServes reports whether g may still serve req (its keys are in g's range, and g is not
// frozen).
func (e *Engine) stillServes(g *group, req engine.Request) bool {
	if g.removed || !g.ranged || g.frozenAt != 0 {
		return false
	}
	if req.Op == engine.OpScan {
		return g.covers(req.Start, req.End)
	}
	return g.contains(req.Key)
}

// reroute dispatches a pending request again (its group no longer has its key, and it has
// certainly not applied there): to the group of this node that has the key now, or it waits
// for one, or it goes to a replica that has it.
func (e *Engine) reroute(id uint64) {
	p, ok := e.untrack(id)
	if !ok {
		return
	}
	e.stats.Rerouted.Add(1)
	if s := e.scans[id]; s != nil {
		// A scan's part: read it again from where it stands.
		delete(e.scans, id)
		delete(e.forwards, id)
		if s.partID == id {
			e.nextScanPart(e.lastNow, s)
		}
		return
	}
	if p.reroutes >= maxReroutes {
		e.reply(engine.Result{ID: id, Op: p.req.Op, Err: errs.New(errs.Unavailable,
			"keyspace %q: the partition of key %q split or merged %d times while the request waited; it was not applied, retry", p.req.Keyspace, p.req.Key, p.reroutes)})
		return
	}
	e.dispatch(e.lastNow, p.req, p.reroutes+1)
}

// holdForRange holds a request whose key's group here is frozen (a merge is under way) until
// the merged group has it, for up to two election timeouts.
func (e *Engine) holdForRange(now time.Time, req engine.Request, reroutes int, timeout time.Duration) {
	e.track(req, &pendingReq{req: req, heldSince: now, rangeWait: true, holdFor: 2 * timeout, reroutes: reroutes})
	e.rangeWaits++
}

// retryRangeWaits dispatches again the requests waiting for their key's group.
func (e *Engine) retryRangeWaits() {
	if e.rangeWaits == 0 {
		return
	}
	var ids []uint64
	for id, p := range e.pending {
		if p.rangeWait {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := e.pending[id]
		ks, ok := e.pmap.Keyspace(p.req.Keyspace)
		if !ok {
			continue
		}
		key := p.req.Key
		if p.req.Op == engine.OpScan {
			key = p.req.Start
		}
		if g := e.groupFor(ks.Spec.Name, key); g != nil && g.frozenAt != 0 {
			continue // still frozen: keep waiting
		}
		e.untrack(id)
		e.dispatch(e.lastNow, p.req, p.reroutes)
	}
}

// emptyForMessage creates an empty replica of a retired group that a member's message names,
// when this node has none: a replica whose left neighbour got a snapshot taken after the
// split that founded the group, and that learned of the group only once its partition was
// already retired, has no other way to get it, and the merge waits for its report. The
// group's range is unknown until its snapshot comes, and the snapshot is taken only if no
// group of this node is newer over that range (snapshotFits). Its vote, with an empty log,
// is that of a member that has received nothing; and a group this node merged away is not
// created again (gone).
func (e *Engine) emptyForMessage(from uint32, rm *peerpb.RaftMessage) *group {
	if rm.Group == nil {
		return nil
	}
	ks, ok := e.pmap.Keyspace(rm.GetKeyspace())
	if !ok || ks.Spec.Protocol != e.protocol {
		return nil
	}
	id := rm.GetGroup()
	k := groupKey{rm.GetKeyspace(), id}
	if _, listed := ks.Partition(id); listed || id >= nextPartitionID(ks) || e.dropped[groupID(k)] || e.tombstoned(k) {
		return nil
	}
	anchor, ok := ks.Partition(rm.GetPartition())
	if !ok || !anchor.HasMember(e.cfg.NodeID) || !anchor.HasMember(from) {
		return nil
	}
	var m raftpb.Message
	if proto.Unmarshal(rm.GetMessage(), &m) != nil {
		return nil
	}
	switch m.GetType() {
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgSnap:
	default:
		return nil // only a leader's messages: it is the one that catches a replica up
	}
	opts, err := config.RaftOptionsOf(ks.Spec.Options)
	if err != nil {
		return nil
	}
	desc := *anchor
	desc.ID, desc.Move = id, nil
	if err := e.addGroup(k, &desc, opts, "", false); err != nil {
		e.broken[k] = err.Error()
		return nil
	}
	g := e.groups[k]
	g.partRetired, g.inPlacement = true, true
	e.stats.GroupsFounded.Add(1)
	return g
}
