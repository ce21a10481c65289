package coord

import (
	"fmt"
	"slices"
	"strings"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/placement"
)

// quorum is what a request must gather: at least need[i] replies (or acknowledgements) from
// the nodes of sets[i], for every i. Outside moves there is one set, the partition's
// replicas at the level; while a replica moves there are two, the old and the new set
// (placement.Partition.ReplicaSets), so that either set on its own holds every acknowledged
// write and every value a read returned (docs/elasticity.md, "the move protocol").
type quorum struct {
	sets  [][]uint32
	need  []int
	union []uint32 // every node of some set, in set order, each once
}

// satisfied reports whether the nodes for which has is true reach need in every set.
func (q *quorum) satisfied(has func(uint32) bool) bool {
	for i, set := range q.sets {
		n := 0
		for _, r := range set {
			if has(r) {
				n++
			}
		}
		if n < q.need[i] {
			return false
		}
	}
	return true
}

// member reports whether node counts in some set.
func (q *quorum) member(node uint32) bool { return slices.Contains(q.union, node) }

// pick chooses, from candidates in preference order (nearest first), the nodes to ask: a
// candidate is taken when a set it belongs to still needs more, so with one set this is
// the first need candidates, and during a move the nodes of both sets come first. ok is
// false when the candidates cannot satisfy the quorum.
func (q *quorum) pick(candidates []uint32) (chosen []uint32, ok bool) {
	count := make([]int, len(q.sets))
	for _, n := range candidates {
		useful := false
		for i, set := range q.sets {
			if count[i] < q.need[i] && slices.Contains(set, n) {
				useful = true
			}
		}
		if !useful {
			continue
		}
		chosen = append(chosen, n)
		for i, set := range q.sets {
			if slices.Contains(set, n) {
				count[i]++
			}
		}
	}
	for i := range q.sets {
		if count[i] < q.need[i] {
			return chosen, false
		}
	}
	return chosen, true
}

// describe says how far has got, set by set: "2 of 2 (old set), 1 of 2 (new set)".
func (q *quorum) describe(has func(uint32) bool) string {
	var parts []string
	for i, set := range q.sets {
		n := 0
		for _, r := range set {
			if has(r) {
				n++
			}
		}
		s := fmt.Sprintf("%d of %d", n, q.need[i])
		if len(q.sets) > 1 {
			s += [...]string{" in the old replica set", " in the new replica set"}[min(i, 1)]
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// quorumFor returns the quorum of level on p, from this node's view: the level's count of
// each replica set (LOCAL levels: of the set's replicas in this node's region).
func (c *Core) quorumFor(p *placement.Partition, level config.Level) (quorum, error) {
	sets := p.ReplicaSets()
	if len(sets) > 1 {
		switch c.Cfg.Mutation {
		case "move-writes-old-only":
			// Broken on purpose: a move counts only the old set, and writes go there only
			// (write.go): the new replica sees writes only through its catch-up.
			sets = sets[:1]
		case "read-new-before-catch-up":
			// Broken on purpose: the new set alone serves as soon as the move starts,
			// before the new replica has caught up.
			sets = sets[1:]
		}
	}
	var q quorum
	for _, set := range sets {
		nodes, need, err := c.levelOf(p, set, level)
		if err != nil {
			return quorum{}, err
		}
		q.sets = append(q.sets, nodes)
		q.need = append(q.need, need)
		for _, n := range nodes {
			if !slices.Contains(q.union, n) {
				q.union = append(q.union, n)
			}
		}
	}
	return q, nil
}

// levelOf returns the nodes of one replica set whose replies count for level and how many
// are needed.
func (c *Core) levelOf(p *placement.Partition, set []uint32, level config.Level) ([]uint32, int, error) {
	switch level {
	case config.LevelOne:
		return set, 1, nil
	case config.LevelQuorum:
		return set, len(set)/2 + 1, nil
	case config.LevelAll:
		return set, len(set), nil
	case config.LevelLocalOne, config.LevelLocalQuorum:
		var local []uint32
		for _, r := range set {
			if c.Region[r] == c.SelfRegion {
				local = append(local, r)
			}
		}
		if len(local) == 0 {
			return nil, 0, errs.New(errs.Invalid,
				"consistency %s needs a replica in the coordinator's region %q, and partition %d has none",
				level, c.SelfRegion, p.ID)
		}
		if level == config.LevelLocalOne {
			return local, 1, nil
		}
		return local, len(local)/2 + 1, nil
	}
	return nil, 0, errs.New(errs.Invalid, "consistency level %q is not valid for protocol quorum (valid: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM)", level)
}

// checkQuorumAvailable fails fast, as Cassandra's UnavailableException does, when the
// failure detector already knows that too few replicas of some set are alive.
func (c *Core) checkQuorumAvailable(q quorum, level config.Level, p *placement.Partition) error {
	for i, set := range q.sets {
		alive := 0
		var down []string
		for _, r := range set {
			if c.Alive(r) {
				alive++
			} else {
				down = append(down, c.NodeName(r))
			}
		}
		if alive < q.need[i] {
			which := ""
			if len(q.sets) > 1 {
				which = [...]string{" (old replica set of a move)", " (new replica set of a move)"}[min(i, 1)]
			}
			return errs.New(errs.Unavailable,
				"consistency %s needs %d replicas of partition %d%s, only %d alive (down: %v)",
				level, q.need[i], p.ID, which, alive, down)
		}
	}
	return nil
}
