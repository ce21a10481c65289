package sim

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"meridian/internal/config"
	"meridian/internal/placement"
	"meridian/internal/tools/check"
)

// Splits and merges during a run (Options.RepartitionEvery). The metadata group orders a
// split or merge and nodes install the new map as they apply it, each at its own moment; here
// the newest map changes at once and each node installs it after its own delay, up to
// maxInstallDelay, so for a while nodes serve under different maps (ElasCass 3.1: "the old
// partition serves until the new map is in force"). Protocols that repartition must behave
// exactly as without splits: the checkers judge the run as any other.

// maxPartitionsInSim bounds the partitions of the simulated keyspace (splits stop there).
const maxPartitionsInSim = 32

// maxInstallDelay bounds how long after a change a node installs the new map: about the
// slowest WAN round trip, the time a metadata learner needs to hear of a commit.
const maxInstallDelay = 300 * time.Millisecond

func (s *simulator) scheduleRepartitions() error {
	if s.o.RepartitionEvery <= 0 {
		return nil
	}
	p, err := LookupProtocol(s.o.Protocol)
	if err != nil {
		return err
	}
	if !repartitions(p) {
		return fmt.Errorf("sim: protocol %s does not split or merge partitions (--repartition-every needs a protocol that does)", s.o.Protocol)
	}
	every := int64(s.o.RepartitionEvery)
	for at := s.rng.Int64N(2 * every); at < int64(s.o.Duration); at += 1 + s.rng.Int64N(2*every) {
		s.schedule(event{at: at, kind: evRepartition})
	}
	return nil
}

// repartition splits a random partition at a random key inside it, or merges two adjacent
// partitions on the same replicas, and schedules every node's install of the new map.
func (s *simulator) repartition() {
	ks, _ := s.pmap.Keyspace("sim")
	var next *placement.Keyspace
	var what string
	merge := len(ks.Partitions) >= maxPartitionsInSim || (len(ks.Partitions) > 1 && s.rng.IntN(2) == 0)
	if merge {
		next, what = s.randomMerge(ks)
	}
	if next == nil && len(ks.Partitions) < maxPartitionsInSim {
		next, what = s.randomSplit(ks)
	}
	if next == nil {
		return
	}
	next.Version = ks.Version + 1
	if err := next.Check(); err != nil {
		panic(fmt.Sprintf("sim: %s made a broken keyspace: %v", what, err))
	}
	s.pmap = s.pmap.With(next)
	s.report.Repartitions++
	s.trace("repartition: %s (map %d, %d partitions)", what, s.pmap.Version, len(next.Partitions))
	for i := range s.nodes {
		s.schedule(event{at: s.now + s.rng.Int64N(int64(maxInstallDelay)+1), kind: evInstallMap, node: i, pmap: s.pmap})
	}
}

// randomSplit splits a random partition at a key strictly inside it: the workload's keys
// ("k0", "k1", ...) and keys between them, so splits fall between keys that are in use.
func (s *simulator) randomSplit(ks *placement.Keyspace) (*placement.Keyspace, string) {
	// Bounded: a few tries, each drawing a candidate key.
	for range 16 {
		key := fmt.Appendf(nil, "k%d", s.rng.IntN(s.o.Keys+1))
		if s.rng.IntN(2) == 0 {
			key = fmt.Appendf(key, "%d", s.rng.IntN(10))
		}
		p := ks.Lookup(key)
		if bytes.Equal(p.Start, key) {
			continue
		}
		s.moveSeq++ // splits, merges and moves share one sequence of IDs, as metadata commands do
		out, err := ks.Split(p.ID, key, s.moveSeq)
		if err != nil {
			continue
		}
		return out, fmt.Sprintf("split partition %d at %q", p.ID, key)
	}
	return nil, ""
}

// randomMerge merges a random partition with its right-hand neighbour when both are on the
// same replicas. Under the mutation merge-different-replicas it merges a pair on different
// replicas instead, the merged range keeping the left one's replicas (a broken merge).
func (s *simulator) randomMerge(ks *placement.Keyspace) (*placement.Keyspace, string) {
	var ok, bad []int
	for i := 0; i+1 < len(ks.Partitions); i++ {
		if _, err := ks.Merge(ks.Partitions[i].ID, s.moveSeq+1); err != nil {
			bad = append(bad, i)
		} else if s.groupsNamedByNode() && !s.sameEverywhere(ks.Partitions[i].ID, ks.Partitions[i+1].ID) {
			continue // see sameEverywhere
		} else {
			ok = append(ok, i)
		}
	}
	if s.o.Mutation == "merge-different-replicas" && len(bad) > 0 {
		i := bad[s.rng.IntN(len(bad))]
		parts := slices.Clone(ks.Partitions)
		parts[i].End = parts[i+1].End
		parts = slices.Delete(parts, i+1, i+2)
		out := &placement.Keyspace{Spec: ks.Spec, Partitions: parts, ReplicasVersion: ks.ReplicasVersion, NextPartitionID: ks.NextPartitionID}
		return out.Index(), fmt.Sprintf("merge (broken) partitions %d and %d on different replicas", ks.Partitions[i].ID, ks.Partitions[i+1].ID)
	}
	if len(ok) == 0 {
		return nil, ""
	}
	i := ok[s.rng.IntN(len(ok))]
	s.moveSeq++
	out, _ := ks.Merge(ks.Partitions[i].ID, s.moveSeq)
	return out, fmt.Sprintf("merge partitions %d and %d", ks.Partitions[i].ID, ks.Partitions[i+1].ID)
}

// groupsNamedByNode reports whether the protocol runs a consensus group per partition whose
// members are named by node (config.ProtocolSpec.NoRejoin: Raft).
func (s *simulator) groupsNamedByNode() bool {
	spec, ok := config.Protocol(s.o.Protocol)
	return ok && spec.NoRejoin
}

// sameEverywhere reports whether partitions a and b have the same members and departed nodes
// in the newest map and in the map every node has installed — and, when replicas move (which
// changes members from one map to the next), whether every live node has installed the newest
// map. Raft names a group on the wire by the first partition of its run of neighbours with the
// same members (raft/wire.go), which splits and merges inside the run never retire; a merge
// of two neighbours that some node's map, installed or about to be, shows with different
// members (a move finished moments ago) could retire a partition that node names (the
// metadata, which answers a change once every live node has applied it, orders changes the
// same way).
func (s *simulator) sameEverywhere(a, b uint32) bool {
	maps := []*placement.Map{s.pmap}
	for _, n := range s.nodes {
		if s.o.MoveEvery > 0 && n.up && n.pmap.Version != s.pmap.Version {
			return false
		}
		maps = append(maps, n.pmap)
	}
	for _, m := range maps {
		ks, ok := m.Keyspace("sim")
		if !ok {
			return false
		}
		pa, okA := ks.Partition(a)
		pb, okB := ks.Partition(b)
		if !okA || !okB || !placement.SameRun(pa, pb) {
			return false
		}
	}
	return true
}

// everywhere reports whether partition id exists in the map every node has installed.
func (s *simulator) everywhere(id uint32) bool {
	for _, n := range s.nodes {
		ks, ok := n.pmap.Keyspace("sim")
		if !ok {
			return false
		}
		if _, ok := ks.Partition(id); !ok {
			return false
		}
	}
	return true
}

// Replica moves during a run (Options.MoveEvery). The simulator plays the cluster metadata
// and the placement driver: it starts a move of a random replica to a node of the same region
// that is not a member, finishes it when the new replica's engine reports that it has caught
// up (engine.ReportMoveCaughtUp), and aborts some moves that take too long (as a driver does
// when the new node dies). Every change reaches each node after its own delay, as above, so
// nodes coordinate under maps on both sides of every step.

// defaultMoveCheckAfter is how long after its start a move is checked (Options.MoveCheckAfter);
// one still in progress is aborted if its new replica is down, and otherwise with probability
// moveAbortOdds.
const (
	defaultMoveCheckAfter = 4 * time.Second
	moveAbortOdds         = 0.3
)

func (s *simulator) scheduleMoves() error {
	if s.o.MoveEvery <= 0 {
		return nil
	}
	p, err := LookupProtocol(s.o.Protocol)
	if err != nil {
		return err
	}
	if !movesReplicas(p) {
		return fmt.Errorf("sim: protocol %s does not move replicas (--move-every needs a protocol that does)", s.o.Protocol)
	}
	if s.o.NodesPerRegion <= s.o.ReplicasPerRegion {
		return fmt.Errorf("sim: --move-every needs more nodes per region (%d) than replicas per region (%d): a replica moves to a node of its region that holds none", s.o.NodesPerRegion, s.o.ReplicasPerRegion)
	}
	every := int64(s.o.MoveEvery)
	for at := s.rng.Int64N(2 * every); at < int64(s.o.Duration); at += 1 + s.rng.Int64N(2*every) {
		s.schedule(event{at: at, kind: evMoveStart})
	}
	return nil
}

// installNewest makes next the newest map and schedules every node's install of it.
func (s *simulator) installNewest(next *placement.Keyspace, what string) {
	ks, _ := s.pmap.Keyspace("sim")
	next.Version = ks.Version + 1
	if err := next.Check(); err != nil {
		panic(fmt.Sprintf("sim: %s made a broken keyspace: %v", what, err))
	}
	s.pmap = s.pmap.With(next)
	s.trace("%s (map %d, %d partitions)", what, s.pmap.Version, len(next.Partitions))
	for i := range s.nodes {
		s.schedule(event{at: s.now + s.rng.Int64N(int64(maxInstallDelay)+1), kind: evInstallMap, node: i, pmap: s.pmap})
	}
}

// startMove moves a random replica of a random partition that is not moving.
func (s *simulator) startMove() {
	ks, _ := s.pmap.Keyspace("sim")
	for range 16 {
		i := s.rng.IntN(len(ks.Partitions))
		p := &ks.Partitions[i]
		if p.Move != nil {
			continue
		}
		if s.groupsNamedByNode() && (!s.everywhere(p.ID) || (i+1 < len(ks.Partitions) && !s.everywhere(ks.Partitions[i+1].ID))) {
			// A move changes the partition's members: it becomes the first of its run, and
			// so does its right-hand neighbour, which Raft messages then name (see
			// sameEverywhere); each must be in every node's map (not just made by a split).
			continue
		}
		remove := p.Replicas[s.rng.IntN(len(p.Replicas))]
		region := s.nodes[s.byID[remove]].cfg.Region
		spec, _ := config.Protocol(s.o.Protocol)
		var adds []uint32
		for _, n := range s.nodes {
			if n.cfg.Region == region && !p.HasMember(n.cfg.ID) && !(spec.NoRejoin && p.HasDeparted(n.cfg.ID)) {
				adds = append(adds, n.cfg.ID)
			}
		}
		if len(adds) == 0 {
			continue
		}
		s.moveSeq++
		mv := placement.Move{ID: s.moveSeq, Add: adds[s.rng.IntN(len(adds))], Remove: remove, Source: p.Replicas[s.rng.IntN(len(p.Replicas))]}
		next, err := ks.StartMove(p.ID, mv)
		if err != nil {
			panic(fmt.Sprintf("sim: start move: %v", err))
		}
		s.report.Moves++
		s.moveStarted[mv.ID] = s.now
		s.installNewest(next, fmt.Sprintf("move %d of partition %d: n%d -> n%d (source n%d)", mv.ID, p.ID, mv.Remove, mv.Add, mv.Source))
		s.schedule(event{at: s.now + int64(s.o.MoveCheckAfter), kind: evMoveCheck, req: mv.ID, cli: int(p.ID)})
		return
	}
}

// finishMove applies move_finish for a reported move, if it is still in progress.
func (s *simulator) finishMove(partition uint32, moveID uint64) {
	ks, _ := s.pmap.Keyspace("sim")
	next, err := ks.FinishMove(partition, moveID)
	if err != nil {
		return // finished already, or aborted
	}
	s.report.MovesFinished++
	s.installNewest(next, fmt.Sprintf("move %d of partition %d finished", moveID, partition))
}

// checkMove aborts a move still in progress when its new replica is down, or by chance while
// the workload runs. Once every fault has healed the driver aborts only moves whose new
// replica is down, so that a move that stalls with all its nodes up shows at the end
// (moveProgress) instead of being hidden by a lucky abort.
func (s *simulator) checkMove(partition uint32, moveID uint64) {
	ks, _ := s.pmap.Keyspace("sim")
	p, ok := ks.Partition(partition)
	if !ok || p.Move == nil || p.Move.ID != moveID {
		return
	}
	byChance := !s.workloadOver && s.rng.Float64() < moveAbortOdds
	if s.nodes[s.byID[p.Move.Add]].up && !byChance {
		s.schedule(event{at: s.now + int64(s.o.MoveCheckAfter), kind: evMoveCheck, req: moveID, cli: int(partition)})
		return
	}
	next, err := ks.AbortMove(partition, moveID)
	if err != nil {
		panic(fmt.Sprintf("sim: abort move: %v", err))
	}
	s.report.MovesAborted++
	s.installNewest(next, fmt.Sprintf("move %d of partition %d aborted", moveID, partition))
}

// movesReplicas reports whether keyspaces of protocol p move replicas.
func movesReplicas(p Protocol) bool {
	spec, ok := config.Protocol(p.Name)
	return ok && spec.Moves
}

// moveProgress is the liveness check of replica moves: every move still in progress when the
// faults healed (or started since) must have finished by the end of the quiet period, in
// which every node is up, no message is lost and the driver aborts nothing. A move that is
// still in progress then has stalled: its new replica neither pulled its snapshot nor
// reported that it caught up within Options.Quiesce (a BwMan-held pull that nothing resumes,
// say), and a real driver would wait on it for ever.
func (s *simulator) moveProgress() *check.Violation {
	if s.o.MoveEvery <= 0 {
		return nil
	}
	ks, ok := s.pmap.Keyspace("sim")
	if !ok {
		return nil
	}
	var stuck []string
	for _, p := range ks.Partitions {
		if p.Move == nil {
			continue
		}
		started := s.moveStarted[p.Move.ID]
		stuck = append(stuck, fmt.Sprintf("move %d of partition %d (n%d -> n%d, source n%d, started at %.3fms)",
			p.Move.ID, p.ID, p.Move.Remove, p.Move.Add, p.Move.Source, float64(started)/1e6))
	}
	if len(stuck) == 0 {
		return nil
	}
	return &check.Violation{Checker: "move-progress", Reason: fmt.Sprintf("%d move(s) still in progress %s after every fault healed: %s",
		len(stuck), s.o.Quiesce, strings.Join(stuck, "; "))}
}
