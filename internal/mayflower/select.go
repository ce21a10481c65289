package mayflower

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Candidate is one way to read: a replica and a network path from it to the reader (the
// thesis restricts the paths to the shortest ones between the two endpoints, 3.2.2).
type Candidate struct {
	Replica string
	Path    []LinkID
	// Latency is how long the path takes before its first bytes arrive (s): a round trip
	// across a wide-area link. The thesis's paths are within one data center, where it is
	// nothing beside a transfer's time; across regions it is not, so it adds to the read's
	// own completion time (and a split part's start). 0 in the thesis's setting.
	Latency float64
}

// Estimate is what adding a new flow on a path would do (Eq. 3.2).
type Estimate struct {
	// Rate is the new flow's bandwidth share: its max-min share at the path's bottleneck.
	Rate float64
	// Own is the new read's completion time, size / Rate (s).
	Own float64
	// Delay is the sum over the flows it slows of r/b′ − r/b: how much later they finish (s).
	Delay float64
	// Cost is Own + Delay (+Inf when the path has no bandwidth to give).
	Cost float64
	// slowed are the existing flows whose share drops, with their new rates.
	slowed map[FlowID]float64
}

// overlay is a hypothetical change to the model: flows added and rates changed, used to cost
// a second subflow after a first one is placed (3.2.3) without touching the model.
type overlay struct {
	rates map[FlowID]float64
	extra []Flow // IDs ≥ overlayIDs
}

const overlayIDs FlowID = math.MaxUint64 - 1024

func (m *Model) rate(o *overlay, id FlowID) float64 {
	if o != nil {
		if r, ok := o.rates[id]; ok {
			return r
		}
		if id >= overlayIDs {
			return o.extra[id-overlayIDs].Rate
		}
	}
	return m.flows[id].Rate
}

func (m *Model) remaining(o *overlay, id FlowID) float64 {
	if o != nil && id >= overlayIDs {
		return o.extra[id-overlayIDs].Remaining
	}
	f := m.flows[id]
	if !f.RemainingKnown && f.Remaining == 0 {
		return m.DefaultRemaining
	}
	return f.Remaining
}

// flowsOn lists the flows crossing link l, the overlay's included.
func (m *Model) flowsOn(o *overlay, l LinkID) []FlowID {
	ids := m.onLink[l]
	if o == nil || len(o.extra) == 0 {
		return ids
	}
	out := slices.Clone(ids)
	for i, f := range o.extra {
		if slices.Contains(f.Path, l) {
			out = append(out, overlayIDs+FlowID(i))
		}
	}
	return out
}

// Estimate costs a new read of size bytes on path (Eq. 3.2), with the thesis's
// simplifications (3.2.2): existing flows demand their current rate and the new flow the
// link's capacity, so its share is its max-min share at the path's bottleneck; each existing
// flow on the path then gets its max-min share beside a new flow demanding that rate, the
// lowest over the path's links it crosses; flows off the path are left as they are (their
// secondary changes are ignored, and corrected by the next measurements).
func (m *Model) Estimate(path []LinkID, size float64) (Estimate, error) {
	return m.estimate(nil, path, size)
}

func (m *Model) estimate(o *overlay, path []LinkID, size float64) (Estimate, error) {
	if err := m.checkPath(path); err != nil {
		return Estimate{}, err
	}
	if !(size > 0) || math.IsInf(size, 0) {
		return Estimate{}, fmt.Errorf("mayflower: read of %v bytes: want a finite size > 0", size)
	}
	// Each link's flows and their demands (current rates), gathered once.
	ids := make([][]FlowID, len(path))
	rates := make([][]float64, len(path))
	for i, l := range path {
		ids[i] = m.flowsOn(o, l)
		rates[i] = make([]float64, len(ids[i]), len(ids[i])+1)
		for k, id := range ids[i] {
			rates[i][k] = m.rate(o, id)
		}
	}
	// The new flow's share: its max-min share on each link (demanding the link's
	// capacity), the smallest of them.
	newRate := math.Inf(1)
	for i, l := range path {
		c := m.capacity[l]
		newRate = math.Min(newRate, MaxMinShares(c, append(rates[i], c))[len(ids[i])])
	}
	e := Estimate{Rate: newRate, slowed: map[FlowID]float64{}}
	if !(newRate > 0) {
		e.Own, e.Cost = math.Inf(1), math.Inf(1)
		return e, nil
	}
	e.Own = size / newRate
	// The existing flows' shares beside a new flow demanding newRate.
	for i, l := range path {
		shares := MaxMinShares(m.capacity[l], append(rates[i], newRate))
		for k, id := range ids[i] {
			if shares[k] < rates[i][k] {
				if prev, ok := e.slowed[id]; !ok || shares[k] < prev {
					e.slowed[id] = shares[k]
				}
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(e.slowed)) {
		old, nw, r := m.rate(o, id), e.slowed[id], m.remaining(o, id)
		if r == 0 {
			continue
		}
		if !(nw > 0) {
			e.Delay = math.Inf(1) // a flow stalled for good
			continue
		}
		e.Delay += r/nw - r/old
	}
	e.Cost = e.Own + e.Delay
	return e, nil
}

// Choice is a selection among candidates.
type Choice struct {
	// Best is the index of the chosen candidate (Eq. 3.1: the lowest cost; ties go to the
	// earlier candidate, so a caller lists the nearest first).
	Best int
	// Estimates are every candidate's, in order.
	Estimates []Estimate
}

// Choose costs a read of size bytes on every candidate and picks the cheapest (Eq. 3.1).
func (m *Model) Choose(cands []Candidate, size float64) (Choice, error) {
	return m.choose(nil, cands, size, "")
}

func (m *Model) choose(o *overlay, cands []Candidate, size float64, exclude string) (Choice, error) {
	if len(cands) == 0 {
		return Choice{}, errors.New("mayflower: no candidate to read from")
	}
	ch := Choice{Best: -1, Estimates: make([]Estimate, len(cands))}
	for i, c := range cands {
		e, err := m.estimate(o, c.Path, size)
		if err != nil {
			return Choice{}, fmt.Errorf("mayflower: candidate %d (replica %s): %w", i, c.Replica, err)
		}
		if c.Latency < 0 || math.IsNaN(c.Latency) || math.IsInf(c.Latency, 0) {
			return Choice{}, fmt.Errorf("mayflower: candidate %d (replica %s): latency %v", i, c.Replica, c.Latency)
		}
		e.Own += c.Latency
		e.Cost += c.Latency
		ch.Estimates[i] = e
		if c.Replica == exclude && exclude != "" {
			continue
		}
		if ch.Best < 0 || e.Cost < ch.Estimates[ch.Best].Cost {
			ch.Best = i
		}
	}
	if ch.Best < 0 {
		return ch, errors.New("mayflower: every candidate is on the excluded replica")
	}
	return ch, nil
}

// SplitRule decides whether a read is split over two replicas (3.2.3).
type SplitRule int

const (
	// SplitNever reads from one replica.
	SplitNever SplitRule = iota
	// SplitLiteral is the thesis's rule: split when c′1 + c2 < c1, where c1 is the cost of
	// reading everything on the best path, c′1 that read's cost once the second subflow has
	// slowed it, and c2 the second subflow's cost (Eq. 3.2), each subflow costed as if it
	// carried the whole read. It counts the job twice, so it splits only when the delay a
	// single read would cause outweighs a whole second transfer.
	SplitLiteral
	// SplitMakespan splits when the split job's completion time, size / (b′1 + b2) with the
	// parts sized to end together, plus the delays both subflows cause, is below c1.
	SplitMakespan
)

func (r SplitRule) String() string {
	switch r {
	case SplitNever:
		return "never"
	case SplitLiteral:
		return "literal"
	case SplitMakespan:
		return "makespan"
	}
	return fmt.Sprintf("SplitRule(%d)", int(r))
}

// Part is one subflow of a plan: the candidate it reads from, how many bytes, and its
// estimated rate.
type Part struct {
	Candidate int
	Bytes     float64
	Rate      float64
}

// Plan is how to read: one part, or two that end together.
type Plan struct {
	Parts []Part
	// Cost is the plan's cost under the rule that chose it (Single.Cost for one part).
	Cost float64
	// Single is the best one-replica estimate (c1), SplitCost what the split was costed at
	// (+Inf when no second replica could carry any of it).
	Single    Estimate
	SplitCost float64
}

// Plan picks the best candidate for a read of size bytes and, under rule, whether to split
// it over a second replica (3.2.3): the first subflow is placed as a temporary flow on its
// path (the flows it slows taking their new shares), the second is chosen among the other
// replicas' candidates the same way, the first's share is reduced by what the second takes
// from it, and each part's size is proportional to its share, so both end together
// (S_i = d·b_i / (b′1 + b2)).
func (m *Model) Plan(cands []Candidate, size float64, rule SplitRule) (Plan, error) {
	ch, err := m.Choose(cands, size)
	if err != nil {
		return Plan{}, err
	}
	e1 := ch.Estimates[ch.Best]
	single := Plan{Parts: []Part{{Candidate: ch.Best, Bytes: size, Rate: e1.Rate}}, Cost: e1.Cost, Single: e1, SplitCost: math.Inf(1)}
	if rule == SplitNever || math.IsInf(e1.Cost, 1) {
		return single, nil
	}
	o := &overlay{rates: map[FlowID]float64{}}
	for id, r := range e1.slowed {
		o.rates[id] = r
	}
	first := overlayIDs
	o.extra = append(o.extra, Flow{ID: first, Path: cands[ch.Best].Path, Rate: e1.Rate, Remaining: size, RemainingKnown: true})
	ch2, err := m.choose(o, cands, size, cands[ch.Best].Replica)
	if err != nil {
		return single, nil // no other replica: one part
	}
	e2 := ch2.Estimates[ch2.Best]
	if !(e2.Rate > 0) {
		return single, nil
	}
	b1 := e1.Rate
	delay2 := e2.Delay // the delay the second causes to others than the first
	if r, ok := e2.slowed[first]; ok {
		b1 = r
		if r > 0 {
			delay2 -= size/r - size/e1.Rate
		}
	}
	// Both parts end together at T: part i carries b_i·(T − L_i), L_i its path's latency.
	l1, l2, b2 := cands[ch.Best].Latency, cands[ch2.Best].Latency, e2.Rate
	b := b1 + b2
	end := (size + b1*l1 + b2*l2) / b
	bytes1, bytes2 := b1*(end-l1), b2*(end-l2)
	var cost float64
	switch rule {
	case SplitLiteral:
		cost = l1 + size/b1 + e1.Delay + e2.Own + delay2
	case SplitMakespan:
		cost = end + e1.Delay + delay2
	default:
		return Plan{}, fmt.Errorf("mayflower: unknown split rule %d", int(rule))
	}
	single.SplitCost = cost
	if !(cost < e1.Cost) || !(b1 > 0) || !(bytes1 > 0) || !(bytes2 > 0) {
		return single, nil
	}
	return Plan{
		Parts: []Part{
			{Candidate: ch.Best, Bytes: bytes1, Rate: b1},
			{Candidate: ch2.Best, Bytes: bytes2, Rate: b2},
		},
		Cost: cost, Single: e1, SplitCost: cost,
	}, nil
}

// Place adds a flow the Flowserver has just assigned to path, at its estimated rate, and
// gives the flows it slows their estimated new rates (3.2.2, "Slack in updating bandwidth
// utilization": the model is corrected by the next measurements). size is what the flow
// will transfer. It returns the estimate it applied.
func (m *Model) Place(id FlowID, path []LinkID, size float64) (Estimate, error) {
	e, err := m.Estimate(path, size)
	if err != nil {
		return Estimate{}, err
	}
	if err := m.AddFlow(Flow{ID: id, Path: path, Rate: e.Rate, Remaining: size, RemainingKnown: true}); err != nil {
		return Estimate{}, err
	}
	for fid, r := range e.slowed {
		m.flows[fid].Rate = r
	}
	return e, nil
}
