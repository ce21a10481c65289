// Package mayflower is the Flowserver's replica-and-path selection of the Mayflower
// filesystem (thesis-mayflower-canopus-kawkab chapter 3): a model of the network's links and
// the flows on them, the max-min fair share of a link among its flows, the cost of a read on
// a path — its own completion time plus the delay it causes to every flow it slows
// (Eq. 3.1–3.2, 3.2.2) — and the split of a read over two replicas so that both parts end
// together (3.2.3). It is pure: no clock, no network; the caller keeps the model current
// (flows added when reads start, rates and remaining bytes updated from measurements, flows
// removed when they end) and asks it to choose.
//
// Units: bytes and bytes per second; times in seconds (float64), as the thesis's worked
// example (Fig. 3.2) counts them.
package mayflower

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// LinkID names a directed link of the network.
type LinkID string

// FlowID names a flow in the model.
type FlowID uint64

// Flow is a transfer in flight: the links it crosses, its current rate and what it has left
// to send.
type Flow struct {
	ID   FlowID
	Path []LinkID
	// Rate is the flow's current bandwidth share (bytes/s), measured or estimated.
	Rate float64
	// Remaining is what the flow has left to transfer (bytes). Unknown sizes (background
	// flows) take the model's DefaultRemaining (3.2.2, "Unknown flow size").
	Remaining float64
	// RemainingKnown is false for flows whose size is unknown.
	RemainingKnown bool
}

// Model is the Flowserver's view of the network: link capacities and the flows on them.
// Not safe for concurrent use.
type Model struct {
	capacity map[LinkID]float64
	flows    map[FlowID]*Flow
	// onLink[l] are the flows crossing link l.
	onLink map[LinkID][]FlowID
	// DefaultRemaining is the remaining size assumed for flows of unknown size: the average
	// elephant flow (3.2.2). Zero: such flows count as delayed by nothing.
	DefaultRemaining float64
	// hidden are the flows SetHidden put in, in ID order.
	hidden []FlowID
}

// Limits of a model: a selection walks every candidate path's links and their flows, so both
// are bounded.
const (
	MaxLinks        = 1 << 16
	MaxFlows        = 1 << 20
	MaxPathLinks    = 64
	MaxFlowsPerLink = 1 << 14
)

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{capacity: map[LinkID]float64{}, flows: map[FlowID]*Flow{}, onLink: map[LinkID][]FlowID{}}
}

// SetLink adds a link or changes its capacity (bytes/s, > 0).
func (m *Model) SetLink(id LinkID, capacity float64) error {
	if id == "" {
		return errors.New("mayflower: a link needs a name")
	}
	if !(capacity > 0) || math.IsInf(capacity, 0) {
		return fmt.Errorf("mayflower: link %s: capacity %v: want a finite rate > 0", id, capacity)
	}
	if _, ok := m.capacity[id]; !ok && len(m.capacity) >= MaxLinks {
		return fmt.Errorf("mayflower: link %s: the model holds %d links, the most it takes", id, MaxLinks)
	}
	m.capacity[id] = capacity
	return nil
}

// Capacity returns a link's capacity (0 for an unknown link).
func (m *Model) Capacity(id LinkID) float64 { return m.capacity[id] }

func (m *Model) checkPath(path []LinkID) error {
	if len(path) == 0 {
		return errors.New("mayflower: an empty path")
	}
	if len(path) > MaxPathLinks {
		return fmt.Errorf("mayflower: a path of %d links (at most %d)", len(path), MaxPathLinks)
	}
	for i, l := range path {
		if _, ok := m.capacity[l]; !ok {
			return fmt.Errorf("mayflower: path link %s is not in the model", l)
		}
		if slices.Contains(path[:i], l) {
			return fmt.Errorf("mayflower: path crosses link %s twice", l)
		}
	}
	return nil
}

// AddFlow adds a flow (its ID unused so far) on a path of known links.
func (m *Model) AddFlow(f Flow) error {
	if _, ok := m.flows[f.ID]; ok {
		return fmt.Errorf("mayflower: flow %d is in the model already", f.ID)
	}
	if f.ID >= HiddenIDs {
		return fmt.Errorf("mayflower: flow %d: IDs from %d up are the model's own", f.ID, HiddenIDs)
	}
	if len(m.flows) >= MaxFlows {
		return fmt.Errorf("mayflower: the model holds %d flows, the most it takes", MaxFlows)
	}
	if err := m.checkPath(f.Path); err != nil {
		return fmt.Errorf("mayflower: flow %d: %w", f.ID, err)
	}
	if !(f.Rate >= 0) || math.IsInf(f.Rate, 0) || !(f.Remaining >= 0) || math.IsInf(f.Remaining, 0) {
		return fmt.Errorf("mayflower: flow %d: rate %v, remaining %v: want finite values ≥ 0", f.ID, f.Rate, f.Remaining)
	}
	for _, l := range f.Path {
		if len(m.onLink[l]) >= MaxFlowsPerLink {
			return fmt.Errorf("mayflower: flow %d: link %s carries %d flows, the most it takes", f.ID, l, MaxFlowsPerLink)
		}
	}
	cp := f
	cp.Path = slices.Clone(f.Path)
	m.flows[f.ID] = &cp
	for _, l := range cp.Path {
		m.onLink[l] = append(m.onLink[l], f.ID)
	}
	return nil
}

// UpdateFlow sets a flow's measured rate and remaining bytes.
func (m *Model) UpdateFlow(id FlowID, rate, remaining float64) error {
	f, ok := m.flows[id]
	if !ok {
		return fmt.Errorf("mayflower: flow %d is not in the model", id)
	}
	if !(rate >= 0) || math.IsInf(rate, 0) || !(remaining >= 0) || math.IsInf(remaining, 0) {
		return fmt.Errorf("mayflower: flow %d: rate %v, remaining %v: want finite values ≥ 0", id, rate, remaining)
	}
	f.Rate, f.Remaining, f.RemainingKnown = rate, remaining, true
	return nil
}

// SetRate sets a flow's measured rate, leaving what the model knows of its size.
func (m *Model) SetRate(id FlowID, rate float64) error {
	f, ok := m.flows[id]
	if !ok {
		return fmt.Errorf("mayflower: flow %d is not in the model", id)
	}
	if !(rate >= 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("mayflower: flow %d: rate %v: want a finite value ≥ 0", id, rate)
	}
	f.Rate = rate
	return nil
}

// RemoveFlow drops a flow (ended or cancelled); removing an unknown flow does nothing.
func (m *Model) RemoveFlow(id FlowID) {
	f, ok := m.flows[id]
	if !ok {
		return
	}
	delete(m.flows, id)
	for _, l := range f.Path {
		m.onLink[l] = slices.DeleteFunc(m.onLink[l], func(x FlowID) bool { return x == id })
		if len(m.onLink[l]) == 0 {
			delete(m.onLink, l)
		}
	}
}

// Flow returns a copy of a flow of the model.
func (m *Model) Flow(id FlowID) (Flow, bool) {
	f, ok := m.flows[id]
	if !ok {
		return Flow{}, false
	}
	cp := *f
	cp.Path = slices.Clone(f.Path)
	return cp, true
}

// LinkLoad is the sum of the rates of the flows crossing link l, in the order they were
// added (so the same model always sums to the same value).
func (m *Model) LinkLoad(l LinkID) float64 {
	load := 0.0
	for _, id := range m.onLink[l] {
		load += m.flows[id].Rate
	}
	return load
}

// Flows is the number of flows in the model.
func (m *Model) Flows() int { return len(m.flows) }

// MaxMinShares divides capacity among flows with the given demands, max-min fairly
// (progressive filling): every flow gets an equal share up to its demand, and what a flow
// leaves is shared again among the others. The result is in the order of demands; no share
// exceeds its demand, and the shares sum to min(capacity, Σ demands).
func MaxMinShares(capacity float64, demands []float64) []float64 {
	shares := make([]float64, len(demands))
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	// Smallest demands are satisfied first; ties in index order (deterministic).
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case demands[a] < demands[b]:
			return -1
		case demands[a] > demands[b]:
			return 1
		}
		return 0
	})
	left := capacity
	for k, i := range order {
		fair := left / float64(len(order)-k)
		shares[i] = math.Max(0, math.Min(demands[i], fair))
		left -= shares[i]
	}
	return shares
}

// FairRates computes the network-wide max-min fair rates of the model's flows by progressive
// filling: every flow's rate rises at the same pace until a link it crosses is full or it
// reaches its demand, then it stays. A flow's demand is demands[id] when given (a rate
// limit, e.g. a sender's), else unlimited. This is how TCP flows sharing links settle,
// roughly; the flow-level simulator moves bytes at these rates, and the Flowserver's own
// estimates (Estimate) approximate them path by path. Flows crossing a link of capacity 0
// get 0. The result holds every flow of the model.
func (m *Model) FairRates(demands map[FlowID]float64) map[FlowID]float64 {
	rates := make(map[FlowID]float64, len(m.flows))
	active := make(map[FlowID]bool, len(m.flows))
	for id := range m.flows {
		rates[id] = 0
		if d, ok := demands[id]; !ok || d > 0 {
			active[id] = true
		}
	}
	left := make(map[LinkID]float64, len(m.onLink))
	for l := range m.onLink {
		left[l] = m.capacity[l]
	}
	// Each round freezes at least one flow (the one whose link or demand binds first), so
	// the loop ends within len(flows) rounds.
	for round := 0; len(active) > 0 && round <= len(m.flows); round++ {
		// The smallest equal increase that fills a link or meets a demand.
		inc := math.Inf(1)
		users := make(map[LinkID]int, len(left))
		for id := range active {
			for _, l := range m.flows[id].Path {
				users[l]++
			}
			if d, ok := demands[id]; ok {
				inc = math.Min(inc, d-rates[id])
			}
		}
		for l, n := range users {
			inc = math.Min(inc, left[l]/float64(n))
		}
		if math.IsInf(inc, 1) {
			break // no link and no demand binds: cannot happen with finite capacities
		}
		inc = math.Max(inc, 0)
		for id := range active {
			rates[id] += inc
		}
		for l, n := range users {
			left[l] -= inc * float64(n)
		}
		const eps = 1e-9
		for _, id := range slices.Sorted(maps.Keys(active)) {
			full := false
			for _, l := range m.flows[id].Path {
				if left[l] <= eps*m.capacity[l] {
					full = true
					break
				}
			}
			if d, ok := demands[id]; full || (ok && rates[id] >= d-eps*math.Max(1, d)) {
				delete(active, id)
			}
		}
	}
	return rates
}
