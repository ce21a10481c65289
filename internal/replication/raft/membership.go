package raft

import (
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"meridian/internal/wire/peerpb"
)

// Membership changes. The placement (cluster metadata) says which nodes a partition's group
// is to have: voters (Replicas) and learners. The group's leader moves its configuration
// there one committed step at a time, the way CockroachDB moves a range's replicas
// (learner, then voter) and with joint consensus (etcd raft's ConfChangeV2):
//
//  1. nodes that are not in the group yet join as learners (they start empty and are caught
//     up by the log or a snapshot, without counting in any quorum);
//  2. once every learner that is to vote has caught up, one joint change promotes them and
//     removes (or demotes to learner) the voters that are to go; etcd raft leaves the joint
//     configuration by itself once it is committed (ConfChangeTransitionAuto);
//  3. learners that are to go are removed.
//
// A leader that is itself to go hands leadership to a voter that stays first (steerLeader).
// A removed node finds out by applying the change; one that missed it (it was down, or cut
// off) sees that the placement no longer lists it and asks the members (RaftRemoved) until
// one that has applied the change confirms, and then deletes its replica.

// confRetryTicks: a configuration change that has not applied after this many ticks (3 s)
// is proposed again (the proposal was dropped, or its leader changed). Proposing again is
// harmless: etcd raft drops a change while another is pending, and each proposal is computed
// afresh from the current configuration. It was 10 s, longer than the simulator's quiet
// period, and a move whose change was dropped waited that long (the move-progress check).
const confRetryTicks = 60

// caughtUpLag: a learner within this many entries of the leader's last index may be promoted.
const caughtUpLag = 64

// membershipSettled reports whether g's configuration is what the placement asks for.
func (e *Engine) membershipSettled(g *group) bool {
	// Remembered while neither the configuration (replaced, never changed in place) nor the
	// placement changes: housekeeping asks for every group it leads several times a second.
	if g.settledConf != nil && g.settledConf == g.conf && g.settledDescGen == g.descGen {
		return true
	}
	voters, learners := targetMembers(g)
	settled := len(g.conf.GetVotersOutgoing()) == 0 && sameSet(g.conf.GetVoters(), voters) && sameSet(g.conf.GetLearners(), learners)
	if settled {
		g.settledConf, g.settledDescGen = g.conf, g.descGen
	}
	return settled
}

// targetMembers are the voters and learners the placement asks g to have.
func targetMembers(g *group) (voters, learners []uint64) {
	voters = u64s(g.desc.Replicas)
	for _, l := range g.desc.Learners {
		if !slices.Contains(g.desc.Replicas, l) {
			learners = append(learners, uint64(l))
		}
	}
	return voters, learners
}

func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// driveMembership proposes g's next configuration step, if any (leader only).
func (e *Engine) driveMembership(g *group) {
	if e.membershipSettled(g) || len(g.desc.Replicas) == 0 {
		return
	}
	voters, learners := targetMembers(g)
	e.driveMembershipTo(g, voters, learners)
}

// driveMembershipTo proposes g's next configuration step towards voters and learners (the
// placement's, or, before a merge, those of the right-hand group it absorbs).
func (e *Engine) driveMembershipTo(g *group, voters, learners []uint64) {
	if g.confProposedAt != 0 && e.ticks-g.confProposedAt < confRetryTicks {
		return
	}
	g.confProposedAt = 0
	// A new leader's etcd raft drops (silently: an empty entry replaces it) every change
	// proposed before it has applied an entry of its own term (pendingConfIndex is its last
	// index at election); a leader fresh from a restart proposed at once and then waited
	// confRetryTicks. Wait for that entry instead.
	bs := g.rn.BasicStatus()
	commit := bs.HardState.GetCommit()
	if commitTerm, err := g.log.Storage().Term(commit); (err == nil && commitTerm != bs.HardState.GetTerm()) || bs.Applied < commit {
		return
	}
	if len(voters) == 0 {
		return
	}
	if len(g.conf.GetVotersOutgoing()) > 0 {
		// Joint: etcd raft leaves it by itself (ConfChangeTransitionAuto) when the leader
		// applies an entry at or past the change — but only then: if that proposal was
		// dropped (a leadership transfer was under way) and nothing more is applied, the
		// group stays joint and every later change waits (the simulator's move-progress
		// check, raft seed 142 with moves). So the leader proposes the leave itself (an
		// empty ConfChangeV2); a second one while raft's is pending is dropped.
		e.proposeConfChange(g, &raftpb.ConfChangeV2{})
		return
	}
	if sameSet(g.conf.GetVoters(), voters) && sameSet(g.conf.GetLearners(), learners) {
		return
	}
	cur := g.conf
	var changes []*raftpb.ConfChangeSingle
	add := func(t raftpb.ConfChangeType, id uint64) {
		changes = append(changes, &raftpb.ConfChangeSingle{Type: t.Enum(), NodeId: &id})
	}
	// 1. Newcomers join as learners.
	for _, id := range slices.Concat(voters, learners) {
		if !slices.Contains(cur.GetVoters(), id) && !slices.Contains(cur.GetLearners(), id) {
			add(raftpb.ConfChangeType_ConfChangeAddLearnerNode, id)
		}
	}
	if len(changes) == 0 {
		// 2. Promotions (caught-up learners) and removals of voters, jointly.
		last, _ := g.log.Storage().LastIndex()
		match := map[uint64]uint64{}
		state := map[uint64]tracker.StateType{}
		g.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
			match[id], state[id] = pr.Match, pr.State
		})
		for _, id := range voters {
			if slices.Contains(cur.GetLearners(), id) {
				if match[id]+caughtUpLag < last || state[id] != tracker.StateReplicate {
					return // wait until it has caught up
				}
				add(raftpb.ConfChangeType_ConfChangeAddNode, id)
			}
		}
		for _, id := range cur.GetVoters() {
			if slices.Contains(voters, id) {
				continue
			}
			if id == uint64(e.cfg.NodeID) {
				return // hand leadership over first (steerLeader)
			}
			if slices.Contains(learners, id) {
				add(raftpb.ConfChangeType_ConfChangeAddLearnerNode, id) // demote
			} else {
				add(raftpb.ConfChangeType_ConfChangeRemoveNode, id)
			}
		}
	}
	if len(changes) == 0 {
		// 3. Learners that are to go.
		for _, id := range cur.GetLearners() {
			if !slices.Contains(voters, id) && !slices.Contains(learners, id) {
				add(raftpb.ConfChangeType_ConfChangeRemoveNode, id)
			}
		}
	}
	if len(changes) == 0 {
		return
	}
	e.proposeConfChange(g, &raftpb.ConfChangeV2{Transition: raftpb.ConfChangeTransition_ConfChangeTransitionAuto.Enum(), Changes: changes})
}

// proposeConfChange proposes cc for g (leader) and notes when, for confRetryTicks.
func (e *Engine) proposeConfChange(g *group, cc *raftpb.ConfChangeV2) {
	if err := g.rn.ProposeConfChange(cc); err != nil {
		return
	}
	g.confProposedAt = max(e.ticks, 1)
	e.touch(g)
	e.markDirty(g)
	e.stats.ConfChangesProposed.Add(1)
}

// askRemoved: a group whose node the placement no longer lists asks the listed members,
// every two election timeouts, whether the change that removed it has applied.
func (e *Engine) askRemoved(now time.Time, g *group) {
	every := uint64(2 * max(g.opts.ElectionTicks(), 1))
	if g.removedAskedAt != 0 && e.ticks-g.removedAskedAt < every {
		return
	}
	g.removedAskedAt = e.ticks
	for _, id := range slices.Concat(g.desc.Replicas, g.desc.Learners) {
		if id == e.cfg.NodeID {
			continue
		}
		r := &peerpb.RaftRemoved{Keyspace: g.key.keyspace}
		r.Partition, r.Group = e.wireRef(g)
		e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: id, Msg: &peerpb.Envelope_RaftRemoved{RaftRemoved: r}})
	}
}

// stepRemoved answers a node's question whether it was removed (conf_index 0), or takes the
// answer: a member of the group, as the placement lists it, has applied a configuration
// without this node, so the change is committed and the replica may go.
func (e *Engine) stepRemoved(now time.Time, from uint32, r *peerpb.RaftRemoved) {
	g := e.groups[groupKey{r.GetKeyspace(), groupOf(r.GetPartition(), r.Group)}]
	if g == nil {
		return
	}
	if r.GetConfIndex() == 0 {
		// Answer only from a configuration that is already what the placement asks for:
		// then the change that removed the asker is committed (a lagging member, whose
		// applied configuration may predate the asker's joining, says nothing).
		if g.inPlacement && len(g.conf.GetVoters()) > 0 && !g.isMember(from) && e.membershipSettled(g) {
			e.out.Messages = append(e.out.Messages, &peerpb.Envelope{From: e.cfg.NodeID, To: from,
				Msg: &peerpb.Envelope_RaftRemoved{RaftRemoved: &peerpb.RaftRemoved{Keyspace: r.GetKeyspace(), Partition: r.GetPartition(), Group: r.Group, ConfIndex: max(g.confIndex, 1)}}})
		}
		return
	}
	if !g.inPlacement && g.desc.HasMember(from) {
		e.leave(g, "this node was removed from the group (confirmed by node "+e.nodeName(from)+")")
	}
}
