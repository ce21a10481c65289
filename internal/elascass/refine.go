package elascass

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"meridian/internal/placement"
)

// Refinement. Rule 4 balances the number of replicas each node of a region holds (R̄ is a
// count in ElasCass 3.2), which balances bytes and load only as far as partitions are alike.
// They are not: bounded partitions hold between Θmin and Θmax (a factor of two), and under a
// skewed workload (Zipfian) a few partitions take much of the load even after load-based
// splits. The paper measures both imbalance indexes (5.1, Figs. 5(e) and 7(b)) but has no
// rule that acts on them; refinement is that rule, in the spirit of CockroachDB's load-based
// rebalancing: once a region's counts are balanced and it has been quiet for SettleFor, the
// driver moves one replica from one node to another of the region, or swaps two, when that
// lowers the region's cost
//
//	cost = max(byte imbalance / TargetByteImbalance, load imbalance / TargetLoadImbalance)
//
// by at least refineGain, keeping every node's count within [⌊R̄⌋, ⌈R̄⌉] so Rule 4 has nothing
// to undo. It stops once the cost is at most 1 (both targets met). A node's load is the sum
// of the smoothed request rates (Eq. 3) of the partitions it holds, which is its share of
// the region's requests up to a factor common to all its partitions.

// refineGain is the least relative improvement of the cost a refinement must bring: below
// it, statistics noise would move replicas back and forth.
const refineGain = 0.10

// maxRefineCandidates bounds the replicas of one node weighed per plan (the largest and the
// hottest, evenly spread over the rest), so a plan stays cheap with thousands of
// partitions: swaps weigh pairs.
const maxRefineCandidates = 48

// refine plans at most one refinement (a move or a swap) per quiet region.
func (p *plan) refine() {
	if p.d.opts.Strategy == SplitMove {
		return
	}
	for _, region := range p.regions() {
		if p.regionBusy(region) {
			p.d.busyAt[region] = p.st.Now
			continue
		}
		if p.st.Now.Sub(p.d.busyAt[region]) < p.refineWait(region) {
			continue
		}
		if p.refineRegion(region) {
			p.d.busyAt[region] = p.st.Now
			p.d.refinedAt[region] = append(p.d.refinedAt[region], p.st.Now)
		}
	}
}

// refineBackoffWindow and refineBackoffMax: every refinement of a region in the last
// refineBackoffWindow doubles the quiet time its next one waits for, up to
// SettleFor·2^refineBackoffMax. Under a skewed load measured over short windows the imbalance
// a refinement removes partly comes back as sampling noise, and a driver that chased it at
// full rate would move replicas for ever (as CockroachDB's store rebalancer bounds how often
// it acts); the backoff bounds refinement to a few moves per region per window while the
// first, largest corrections still come at once.
const (
	refineBackoffWindow = 5 * time.Minute
	refineBackoffMax    = 4
)

// refineWait is how long region must have been quiet before its next refinement.
func (p *plan) refineWait(region string) time.Duration {
	recent := p.d.refinedAt[region][:0]
	for _, at := range p.d.refinedAt[region] {
		if p.st.Now.Sub(at) < refineBackoffWindow {
			recent = append(recent, at)
		}
	}
	p.d.refinedAt[region] = recent
	return p.d.opts.SettleFor << min(len(recent), refineBackoffMax)
}

// regionBusy: a node of region is joining, leaving or down, or moves in flight (or planned
// by this plan) touch one of its nodes.
func (p *plan) regionBusy(region string) bool {
	for _, m := range p.st.Members {
		if m.Region != region {
			continue
		}
		if m.State != StateActive || !m.Alive || p.in[m.ID] > 0 || p.out[m.ID] > 0 {
			return true
		}
	}
	return false
}

// refReplica is one replica weighed by refinement.
type refReplica struct {
	ks    Keyspace
	part  *placement.Partition
	key   PartKey
	bytes float64
	heat  float64
}

// refineRegion plans the best move or swap of region, if it lowers the cost enough.
func (p *plan) refineRegion(region string) bool {
	var nodes []*Member
	for _, m := range p.sortedMembers() {
		if m.Region == region && m.Alive && m.State == StateActive {
			nodes = append(nodes, m)
		}
	}
	if len(nodes) < 2 {
		return false
	}
	idx := map[uint32]int{}
	for i, m := range nodes {
		idx[m.ID] = i
	}
	held := make([][]refReplica, len(nodes))
	bytesOf := make([]float64, len(nodes))
	loadOf := make([]float64, len(nodes))
	count := make([]int, len(nodes))
	var regionLoad float64
	for _, ks := range p.st.Keyspaces {
		for i := range ks.Partitions {
			part := &ks.Partitions[i]
			key := PartKey{ks.Spec.Name, part.ID}
			st := p.st.Partitions[key]
			for _, r := range part.Replicas {
				j, ok := idx[r]
				if !ok {
					continue
				}
				rr := refReplica{ks: ks, part: part, key: key, bytes: float64(st.Bytes), heat: st.Heat}
				held[j] = append(held[j], rr)
				bytesOf[j] += rr.bytes
				loadOf[j] += rr.heat
				count[j]++
				regionLoad += rr.heat
			}
		}
	}
	total := 0
	for _, c := range count {
		total += c
	}
	floor := total / len(nodes)
	ceil := floor
	if total%len(nodes) != 0 {
		ceil++
	}
	for _, c := range count {
		if c < floor || c > ceil {
			return false // Rule 4 first
		}
	}
	tb, tl := p.d.opts.TargetByteImbalance, p.d.opts.TargetLoadImbalance
	// Load imbalance counts only when it costs something: when the region's busiest node is
	// heavily loaded (CPU above HeavyCPU, the threshold of ElasCass 3.2 Rule 3) and the region
	// serves at least MinLoadOps. Below that, the measured imbalance of a light load is mostly
	// sampling noise of the hit EWMAs, and moves chasing it oscillate.
	busiest := 0.0
	for _, m := range nodes {
		busiest = max(busiest, m.CPU)
	}
	if regionLoad < p.d.opts.MinLoadOps || busiest <= p.d.opts.HeavyCPU {
		tl = -1
	}
	cost := func(b, l []float64) float64 {
		c := 0.0
		if tb > 0 {
			c = max(c, Imbalance(b)/tb)
		}
		if tl > 0 {
			c = max(c, Imbalance(l)/tl)
		}
		return c
	}
	c0 := cost(bytesOf, loadOf)
	if c0 <= 1 {
		return false
	}
	cands := make([][]refReplica, len(nodes))
	for j := range nodes {
		cands[j] = refineCandidates(held[j], func(r refReplica) bool {
			return r.part.Move == nil && !p.taken[r.key]
		})
	}
	movable := func(r refReplica, to int) bool {
		m := nodes[to]
		// Never back to a node the replica left: refinement would swing it to and fro, and
		// a quorum-family replica that rejoins soon after leaving stalled its catch-up once
		// in the benchmarks (the driver aborts such a move after StalledAfter).
		return !r.part.HasMember(m.ID) && !r.part.HasDeparted(m.ID) && p.in[m.ID] < p.d.opts.MaxMovesPerNode
	}
	b2, l2 := slices.Clone(bytesOf), slices.Clone(loadOf)
	eval := func(a, b int, ra, rb *refReplica) float64 {
		copy(b2, bytesOf)
		copy(l2, loadOf)
		if ra != nil {
			b2[a], l2[a], b2[b], l2[b] = b2[a]-ra.bytes, l2[a]-ra.heat, b2[b]+ra.bytes, l2[b]+ra.heat
		}
		if rb != nil {
			b2[b], l2[b], b2[a], l2[a] = b2[b]-rb.bytes, l2[b]-rb.heat, b2[a]+rb.bytes, l2[a]+rb.heat
		}
		return cost(b2, l2)
	}
	best := c0 * (1 - refineGain)
	var bestA, bestB int
	var bestRA, bestRB *refReplica
	for a := range nodes {
		for b := range nodes {
			if a == b {
				continue
			}
			for i := range cands[a] {
				ra := &cands[a][i]
				if !movable(*ra, b) {
					continue
				}
				// A move keeps the counts within [floor, ceil].
				if count[a]-1 >= floor && count[b]+1 <= ceil {
					if c := eval(a, b, ra, nil); c < best {
						best, bestA, bestB, bestRA, bestRB = c, a, b, ra, nil
					}
				}
				if a > b {
					continue // a swap is weighed once per pair
				}
				for k := range cands[b] {
					rb := &cands[b][k]
					if rb.key == ra.key || !movable(*rb, a) || p.moving+2 > p.d.opts.MaxMoves {
						continue
					}
					if c := eval(a, b, ra, rb); c < best {
						best, bestA, bestB, bestRA, bestRB = c, a, b, ra, rb
					}
				}
			}
		}
	}
	if bestRA == nil || p.moving >= p.d.opts.MaxMoves {
		return false
	}
	why := fmt.Sprintf("refine %s: imbalance bytes %.3f load %.3f, cost %.2f → %.2f", region,
		Imbalance(bytesOf), Imbalance(loadOf), c0, best)
	from, to := nodes[bestA].ID, nodes[bestB].ID
	p.add(Action{Kind: ActStartMove, Keyspace: bestRA.ks.Spec.Name, Partition: bestRA.part.ID,
		Move: placement.Move{Add: to, Remove: from, Source: from}, Why: why})
	if bestRB != nil {
		p.add(Action{Kind: ActStartMove, Keyspace: bestRB.ks.Spec.Name, Partition: bestRB.part.ID,
			Move: placement.Move{Add: from, Remove: to, Source: to}, Why: why + " (swap)"})
	}
	return true
}

// refineCandidates are up to maxRefineCandidates of a node's replicas that ok admits: all of
// them when few, else the largest and hottest and an even spread of the rest (by bytes).
func refineCandidates(rs []refReplica, ok func(refReplica) bool) []refReplica {
	var out []refReplica
	for _, r := range rs {
		if ok(r) {
			out = append(out, r)
		}
	}
	if len(out) <= maxRefineCandidates {
		return out
	}
	slices.SortStableFunc(out, func(a, b refReplica) int { return cmp.Compare(b.bytes, a.bytes) })
	picked := make([]refReplica, 0, maxRefineCandidates)
	seen := map[PartKey]bool{}
	take := func(r refReplica) {
		if !seen[r.key] && len(picked) < maxRefineCandidates {
			seen[r.key] = true
			picked = append(picked, r)
		}
	}
	byHeat := slices.Clone(out)
	slices.SortStableFunc(byHeat, func(a, b refReplica) int { return cmp.Compare(b.heat, a.heat) })
	for i := 0; i < maxRefineCandidates/4; i++ {
		take(out[i])
		take(byHeat[i])
	}
	step := float64(len(out)) / float64(maxRefineCandidates)
	for f := 0.0; len(picked) < maxRefineCandidates && int(f) < len(out); f += step {
		take(out[int(f)])
	}
	return picked
}
