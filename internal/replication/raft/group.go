package raft

import (
	"fmt"
	"maps"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// span is the group's key range: what its replica holds in storage. It is the range the
// group's log made (splits and merges change it when they apply, repartition.go), not the
// placement's, which changes first; a replica that has none yet (waiting for its first
// snapshot) holds nothing, and its span is the placement's.
func (g *group) span() storage.Span {
	if g.ranged {
		return storage.Span{Keyspace: g.key.keyspace, Start: g.start, End: g.end}
	}
	return g.desc.Span(g.key.keyspace)
}

// group is one partition's Raft group on this node.

type group struct {
	key  groupKey
	id   uint64
	opts config.RaftOptions
	// desc is the partition as the placement describes it: the voters (Replicas) and
	// learners the group is to have; the leader moves the group's configuration there.
	desc placement.Partition
	// movedReported is when this node last reported that it caught up as the new replica of
	// desc's move.
	movedReported time.Time
	// descGen counts updates of desc; settledConf and settledDescGen remember the conf and
	// the desc under which membershipSettled last found the membership settled.
	descGen        uint64
	settledConf    *raftpb.ConfState
	settledDescGen uint64
	// inPlacement: this node is a member of the partition in the placement. A group that
	// is not may still be a member of its Raft configuration (until the change that
	// removes it commits); it asks its peers whether it may go (askRemoved).
	inPlacement bool
	// preferred are the voters in the leader region (config.RaftOptions.LeaderRegion).
	preferred []uint32
	rn        *etcdraft.RawNode
	log       *LogStore
	sm        StateMachine

	// Applied state: the last applied index and its term, the configuration there, the
	// version of the last applied write (versions grow in log order).
	applied, appliedTerm uint64
	conf                 *raftpb.ConfState
	last                 hlc.Version
	sinceCut             uint64 // entries applied since the last compaction

	dirty   bool // queued in Engine.dirty
	removed bool // out of this engine (destroyed or failed)
	// Soft state last seen in a Ready.
	lead  uint64
	state etcdraft.StateType
	term  uint64

	// electionElapsed counts ticks since anything that may have reset etcd raft's election
	// clock; electionDeadline is the drawn timeout (tickGroup).
	electionElapsed, electionDeadline int

	// quiesced groups do not tick (quiesce.go); idleSince is the tick of the last activity.
	quiesced  bool
	idleSince uint64
	// pendingCount is how many requests of this node wait on the group.
	pendingCount int
	// txn is the transaction state machine of a transactional keyspace's group (nil
	// otherwise; the same object as sm); txnReads are its reads waiting for the counter.
	txn      txnCore
	txnReads []txnRead
	// txnSavedAt is the applied index of txn's state last saved (txnStateKey): the log is
	// kept from it (a restart replays it).
	txnSavedAt uint64

	// waiting are linearizable reads whose read index is known but not applied yet.
	waiting []waitingRead
	// origins holds, per proposing node, the version of its last applied command (at most
	// once: apply).
	origins map[uint32]hlc.Version

	lease lease
	// freezeVotes: the group had state when it was loaded, so its votes wait until
	// freezeUntil (lease.go).
	freezeVotes bool
	freezeUntil time.Time
	// fresh are recent (leader commit, leader send time) pairs from heartbeats: a replica
	// that has applied a commit index holds every write acknowledged before that time
	// (stale reads' staleness bound).
	fresh []freshness

	// Snapshots (snapshot.go).
	snap      *outSnapshot
	retired   []string // prepared snapshots replaced while a transfer still reads them
	sending   map[uint32]*outTransfer
	receiving *inTransfer
	// declined: followers that declined this group's snapshot, until when none is offered
	// to them (repartition.go).
	declined map[uint32]time.Time

	// confIndex is the index of the last configuration change applied (or of the snapshot
	// the replica was restored from).
	confIndex uint64
	// installing: the current Ready replaces the group's data with a snapshot raft has
	// taken; raft's own Ready waits for the next one (snapshot.go).
	installing bool

	// peerApplied is how far each node has applied the group (groups that notify); held
	// are WaitAll results waiting for every live node (applied.go).
	peerApplied map[uint32]uint64
	held        []heldReply

	// confProposedAt is the tick at which this leader proposed a configuration change that
	// has not applied yet (0: none in flight).
	confProposedAt uint64
	// removedAskedAt is the tick this group last asked whether it was removed.
	removedAskedAt uint64

	// Key range and repartitioning (repartition.go). start and end (nil: unbounded) are the
	// range the group's applied state covers, gen the number of splits and merges that made
	// it (CockroachDB's descriptor generation); ranged is false on a replica that has no
	// state yet (it waits for a snapshot, or for the split that founds it). frozenAt is the
	// index of the freeze entry the group applied (0: not frozen), rangeIndex the index of
	// its last split, merge or freeze (older snapshots are not offered).
	start, end []byte
	ranged     bool
	gen        uint64
	frozenAt   uint64
	rangeIndex uint64
	// partRetired: the placement no longer has the group's partition (a merge retired it);
	// unborn: it does not have it yet (a split this node applied before its map). Its desc is
	// then the last one known, or the parent's.
	partRetired bool
	unborn      bool
	// blockedAt is the index of a merge entry this replica cannot apply yet (its replica of
	// the right-hand group has not applied the freeze): entries from it on apply once it
	// can; handed is the last committed index etcd raft has handed out.
	blockedAt, handed uint64
	// frozenReports are the members' reports of how far their frozen replica of this group
	// has applied (RaftApplied with frozen_at), kept while the group is frozen.
	frozenReports map[uint32]frozenReport
	// rangeProposedAt is the tick of the last split, merge or freeze this leader proposed
	// (proposed again after confRetryTicks if it has not applied).
	rangeProposedAt uint64
	// campaignAt: a group founded by a split here campaigns at this tick (0: not), up to
	// campaigns more times while it knows no leader.
	campaignAt uint64
	campaigns  int
	// heardAt is the tick the group last heard a Raft message (a retired replica that
	// never got state and hears nothing for long goes).
	heardAt uint64
	// leftCheck is the read index asked for a snapshot of the group right of this one that
	// would supersede groups of this node (repartition.go, leftSettled).
	leftCheck *leftCheck
	// heldOffer is a snapshot offer kept until leftCheck's answer (holdOffer).
	heldOffer *heldOffer
}

// frozenReport is one member's report on its frozen replica.
type frozenReport struct {
	frozenAt, applied uint64
}

type waitingRead struct {
	index uint64
	id    uint64
	// lease reads were confirmed by the leader lease, not by a read index round.
	lease bool
}

type freshness struct {
	commit   uint64
	sentNano int64
}

// maxFresh bounds the freshness samples a group keeps.
const maxFresh = 8

// restoreApplied installs a stored applied state.
func (g *group) restoreApplied(st *peerpb.RaftAppliedState) error {
	g.applied, g.appliedTerm = st.GetIndex(), st.GetTerm()
	g.restoreRange(st)
	g.last = wire.VersionFromPB(st.GetLastVersion())
	g.origins = map[uint32]hlc.Version{}
	for _, o := range st.GetOrigins() {
		g.origins[o.GetNode()] = wire.VersionFromPB(o.GetVersion())
	}
	g.conf = &raftpb.ConfState{}
	if len(st.GetConfState()) > 0 {
		if err := proto.Unmarshal(st.GetConfState(), g.conf); err != nil {
			return fmt.Errorf("applied configuration: %w (%w)", err, storage.ErrCorrupt)
		}
	}
	return nil
}

// appliedState is what appliedOp stores.
func (g *group) appliedState() *peerpb.RaftAppliedState {
	cs, _ := proto.Marshal(g.conf)
	st := &peerpb.RaftAppliedState{Index: g.applied, Term: g.appliedTerm, LastVersion: wire.VersionToPB(g.last), ConfState: cs,
		Keyspace: g.key.keyspace, Partition: g.key.partition, Start: g.start, End: g.end, Generation: g.gen, FrozenAt: g.frozenAt}
	for _, node := range slices.Sorted(maps.Keys(g.origins)) {
		st.Origins = append(st.Origins, &peerpb.RaftOriginApplied{Node: node, Version: wire.VersionToPB(g.origins[node])})
	}
	return st
}

// appliedOp is the raw op that stores the group's applied state.
func (g *group) appliedOp() storage.RawOp {
	b, _ := proto.Marshal(g.appliedState())
	return storage.RawOp{Key: appliedKey(g.id), Value: b}
}

// isMember reports whether node is in the group's applied configuration (voter, outgoing
// voter or learner).
func (g *group) isMember(node uint32) bool {
	id := uint64(node)
	for _, l := range [][]uint64{g.conf.GetVoters(), g.conf.GetVotersOutgoing(), g.conf.GetLearners(), g.conf.GetLearnersNext()} {
		for _, x := range l {
			if x == id {
				return true
			}
		}
	}
	return false
}

// groupStorage is a group's log as its RawNode sees it: the LogStore's MemoryStorage, with
// the configuration at the applied index (etcd raft requires InitialState's ConfState to be
// the one at Config.Applied; the LogStore's is the one at its last compaction) and
// snapshots of the partition's data (snapshot.go).
type groupStorage struct {
	*etcdraft.MemoryStorage
	g *group
	e *Engine
}

func (s *groupStorage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	hs, _, err := s.MemoryStorage.InitialState()
	if err != nil {
		return nil, nil, err
	}
	cs := proto.Clone(s.g.conf).(*raftpb.ConfState)
	return hs, cs, nil
}

func (s *groupStorage) Snapshot() (*raftpb.Snapshot, error) { return s.e.snapshotFor(s.g) }
