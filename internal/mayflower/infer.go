package mayflower

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// Report is what the endpoints of one transfer the selector placed tell at a poll: the path
// it was placed on and its measured rate (bytes/s).
type Report struct {
	Path []LinkID
	Rate float64
}

// Hidden is load inferred on one link that no report accounts for: Flows elephants of
// unknown size (background traffic, 3.2.2), each at Rate now and at Free while no reported
// transfer shares the link with them.
type Hidden struct {
	Link  LinkID
	Flows int
	Rate  float64
	Free  float64
	// Among is how many links the reports could not tell this load's place from when it was
	// inferred: 1 once a report has located it on this link; k > 1 when it was put on each
	// of k equally likely links at 1/√k of its rate (hedged).
	Among int
}

// HiddenState is what InferHidden has learnt up to a poll, and its input at the next.
type HiddenState struct {
	Poll int
	// Hidden is the inferred load, sorted by link.
	Hidden []Hidden
	// Clean are links that reported transfers alone filled, with the last poll they did:
	// no elephant hides there, so they are no candidate for unexplained slowness.
	Clean map[LinkID]int
}

// InferOptions tune InferHidden.
type InferOptions struct {
	// Tolerance is the relative error a measured rate may carry (0 ≤ Tolerance < 0.5).
	Tolerance float64
	// Prior weighs how likely each link is to carry traffic the reports do not account for
	// (> 0; a link not listed weighs 1): where several links would explain a slow transfer
	// with as many hidden flows, the one of greater weight is chosen. The flow-level
	// testbed weighs a link by how many host pairs' shortest paths cross it. nil: all alike.
	Prior map[LinkID]float64
	// CleanPolls is how many polls a link filled by reported transfers alone stays ruled out
	// (0: only at the poll it was full).
	CleanPolls int
}

// MaxHiddenFlows bounds the hidden flows InferHidden puts on one link.
const MaxHiddenFlows = 64

// InferHidden infers the load on the model's links that the reports do not account for: the
// endpoint-only Flowserver of thesis 3.5.2, which learns of the network only from the
// transfers it placed, gets from their endpoints' reports what switch counters would have
// told it of the traffic it did not place. It reads only the model's link capacities and
// changes nothing; reports are every transfer in flight with its measured rate, prev what
// the previous poll returned (the zero value at first). The result is deterministic and
// bounded: at most one entry per link of the model, each with 1..MaxHiddenFlows flows.
//
// The reasoning is max-min fairness, which the measured rates obey: every transfer has a
// bottleneck link on its path, one that is full and where no flow gets more than it does.
//   - Link l's reported load K_l leaves room R_l = capacity − K_l; hidden load on l is at
//     most R_l, whatever the transfers crossing it are limited by.
//   - A transfer slower than another reported transfer on l is not bottlenecked at l. On a
//     link where it is the fastest, it is bottlenecked exactly when hidden load fills R_l,
//     carried by flows no faster than it: at least ⌈R_l / rate⌉ of them.
//   - A transfer is explained by the reports alone when one of those links is full of
//     reported load. Otherwise hidden load must fill one of them; a link full of reported
//     load within the last CleanPolls polls is none (elephants last). The links are chosen
//     for all unexplained transfers at once, fewest new hidden flows per transfer
//     explained first, weighed by Prior (a greedy set cover): one hidden flow on a link two
//     slow transfers share is preferred to one on each of their own links, and a link that
//     already holds inferred flows costs only those it lacks, so hidden load once located
//     stays where it was found. When the reports cannot tell among several links (a
//     transfer alone on a path of equal links, equally weighed), the load goes on each of
//     them at 1/√k of its rate: a selector then avoids them somewhat, and the next slow
//     transfer across one of them locates it there.
//   - Hidden flows are long-lived elephants: an inferred link keeps them while no report
//     contradicts them. A link full of reported load holds none (under max-min fairness
//     every flow gets a share); one crossed by a transfer faster than the hidden flows could
//     then get holds flows limited elsewhere, whose free rate drops to what they get.
//     Links no transfer crosses keep what was inferred, at its free rate.
//
// Counted hidden flows and their rates are lower bounds and estimates; the thesis's own
// model takes measured rates as demands in the same way (3.2.2).
func (m *Model) InferHidden(reports []Report, prev HiddenState, o InferOptions) (HiddenState, error) {
	tol := o.Tolerance
	if !(tol >= 0) || !(tol < 0.5) {
		return HiddenState{}, fmt.Errorf("mayflower: tolerance %v: want 0 ≤ tol < 0.5", tol)
	}
	if o.CleanPolls < 0 {
		return HiddenState{}, fmt.Errorf("mayflower: clean for %d polls: want ≥ 0", o.CleanPolls)
	}
	for l, w := range o.Prior {
		if !(w > 0) || math.IsInf(w, 0) {
			return HiddenState{}, fmt.Errorf("mayflower: prior %v for link %s: want a finite weight > 0", w, l)
		}
	}
	if len(reports) > MaxFlows {
		return HiddenState{}, fmt.Errorf("mayflower: %d reports, at most %d", len(reports), MaxFlows)
	}
	for i, r := range reports {
		if err := m.checkPath(r.Path); err != nil {
			return HiddenState{}, fmt.Errorf("mayflower: report %d: %w", i, err)
		}
		if !(r.Rate >= 0) || math.IsInf(r.Rate, 0) {
			return HiddenState{}, fmt.Errorf("mayflower: report %d: rate %v: want a finite value ≥ 0", i, r.Rate)
		}
	}
	if len(prev.Hidden) > MaxLinks || len(prev.Clean) > MaxLinks {
		return HiddenState{}, fmt.Errorf("mayflower: a state of %d hidden and %d clean links, at most %d", len(prev.Hidden), len(prev.Clean), MaxLinks)
	}
	before := make(map[LinkID]Hidden, len(prev.Hidden))
	for _, h := range prev.Hidden {
		if err := m.checkHidden(h); err != nil {
			return HiddenState{}, err
		}
		if _, dup := before[h.Link]; dup {
			return HiddenState{}, fmt.Errorf("mayflower: hidden load on link %s twice", h.Link)
		}
		if !(h.Free >= 0) || math.IsInf(h.Free, 0) || h.Among < 1 {
			return HiddenState{}, fmt.Errorf("mayflower: hidden load on link %s: free rate %v among %d links: want a finite rate ≥ 0 among ≥ 1", h.Link, h.Free, h.Among)
		}
		before[h.Link] = h
	}

	// What the reports put on each link they cross.
	type seen struct{ known, top float64 }
	links := map[LinkID]*seen{}
	for _, r := range reports {
		for _, l := range r.Path {
			s := links[l]
			if s == nil {
				s = &seen{}
				links[l] = s
			}
			s.known += r.Rate
			s.top = math.Max(s.top, r.Rate)
		}
	}
	room := func(l LinkID) float64 { return math.Max(0, m.capacity[l]-links[l].known) }
	full := func(l LinkID) bool { return room(l) <= tol*m.capacity[l] }
	// need is how many hidden flows fill l's room at no more than its fastest report's rate.
	need := func(l LinkID) int {
		if !(links[l].top > 0) {
			return MaxHiddenFlows
		}
		return min(MaxHiddenFlows, max(1, int(math.Ceil(room(l)/links[l].top-tol))))
	}
	weight := func(l LinkID) float64 {
		if w, ok := o.Prior[l]; ok {
			return w
		}
		return 1
	}

	next := HiddenState{Poll: prev.Poll + 1, Clean: make(map[LinkID]int, len(prev.Clean))}
	for l, p := range prev.Clean {
		if next.Poll-p <= o.CleanPolls {
			next.Clean[l] = p
		}
	}
	for l := range links {
		if full(l) {
			next.Clean[l] = next.Poll
		}
	}

	// Each unexplained report's candidate bottlenecks.
	var open [][]LinkID
	for _, r := range reports {
		if !(r.Rate > 0) {
			continue // nothing measured: no evidence
		}
		var cands []LinkID
		explained := false
		for _, l := range r.Path {
			if r.Rate < links[l].top*(1-tol) {
				continue // a faster transfer crosses l: not r's bottleneck
			}
			if full(l) {
				explained = true
				break
			}
			if _, ok := next.Clean[l]; ok {
				continue // full of reported load a moment ago: no elephant there
			}
			cands = append(cands, l)
		}
		if !explained && len(cands) > 0 {
			open = append(open, cands)
		}
	}

	// Greedy cover: the link that explains the most open reports per hidden flow it adds.
	byLink := map[LinkID][]int{}
	for i, c := range open {
		for _, l := range c {
			byLink[l] = append(byLink[l], i)
		}
	}
	order := slices.Sorted(maps.Keys(byLink))
	covers := make(map[LinkID]int, len(byLink))
	for l, is := range byLink {
		covers[l] = len(is)
	}
	covered := make([]bool, len(open))
	added := func(l LinkID) int { return need(l) - min(need(l), before[l].Flows) }
	cost := func(l LinkID) float64 {
		// A link that needs no new flow costs a little, so that among those the one
		// explaining most is still preferred.
		return (float64(added(l)) + 1e-3) / (float64(covers[l]) * weight(l))
	}
	chosen := map[LinkID]int{} // → among how many links its load is spread (1: located)
	for left := len(open); left > 0; {
		var best LinkID
		bestCost := math.Inf(1)
		for _, l := range order {
			if covers[l] == 0 {
				continue
			}
			c := cost(l)
			switch {
			case c < bestCost*(1-1e-12):
			case c <= bestCost*(1+1e-12) && (covers[l] > covers[best] || covers[l] == covers[best] && room(l) < room(best)):
			default:
				continue
			}
			best, bestCost = l, c
		}
		group := []LinkID{best}
		if before[best].Flows == 0 {
			// New load the reports cannot place: every link as likely, explaining the same
			// reports with as many flows, shares it.
			for _, l := range order {
				if l == best || before[l].Flows > 0 || covers[l] != covers[best] || added(l) != added(best) || weight(l) != weight(best) {
					continue
				}
				same := true
				for _, i := range byLink[best] {
					if !covered[i] && !slices.Contains(open[i], l) {
						same = false
						break
					}
				}
				if same {
					group = append(group, l)
				}
			}
		}
		for _, l := range group {
			chosen[l] = len(group)
		}
		for _, i := range byLink[best] {
			if covered[i] {
				continue
			}
			covered[i] = true
			left--
			for _, l := range open[i] {
				covers[l]--
			}
		}
	}

	for l, among := range chosen {
		n := need(l)
		rate := room(l) / float64(n) / math.Sqrt(float64(among))
		next.Hidden = append(next.Hidden, Hidden{Link: l, Flows: n, Rate: rate, Free: rate, Among: among})
	}
	for l, h := range before {
		if _, ok := chosen[l]; ok {
			continue
		}
		if links[l] == nil {
			h.Rate = h.Free
			next.Hidden = append(next.Hidden, h)
			continue
		}
		if full(l) {
			continue // reported transfers fill l: no flow of any size is hidden there
		}
		share := room(l) / float64(h.Flows)
		if links[l].top > share*(1+tol) {
			// A transfer gets more than the hidden flows could: they are held elsewhere.
			h.Free = math.Min(h.Free, share)
		}
		h.Rate = math.Min(h.Free, share)
		next.Hidden = append(next.Hidden, h)
	}
	slices.SortFunc(next.Hidden, func(a, b Hidden) int {
		switch {
		case a.Link < b.Link:
			return -1
		case a.Link > b.Link:
			return 1
		}
		return 0
	})
	return next, nil
}

func (m *Model) checkHidden(h Hidden) error {
	if _, ok := m.capacity[h.Link]; !ok {
		return fmt.Errorf("mayflower: hidden load on link %s, which is not in the model", h.Link)
	}
	if h.Flows < 1 || h.Flows > MaxHiddenFlows || !(h.Rate >= 0) || math.IsInf(h.Rate, 0) {
		return fmt.Errorf("mayflower: hidden load on link %s: %d flows at %v: want 1..%d flows at a finite rate ≥ 0", h.Link, h.Flows, h.Rate, MaxHiddenFlows)
	}
	return nil
}

// HiddenIDs is the first flow ID of the model's hidden flows (SetHidden); AddFlow refuses
// IDs from here up.
const HiddenIDs FlowID = overlayIDs - MaxLinks*MaxHiddenFlows

// SetHidden replaces the model's hidden flows with the given ones: each entry becomes Flows
// single-link flows of unknown size (they count with DefaultRemaining) at Rate on its link,
// which estimates and placements then treat as any other flow. On an error the model is
// left as it was.
func (m *Model) SetHidden(hidden []Hidden) error {
	if len(hidden) > MaxLinks {
		return fmt.Errorf("mayflower: hidden load on %d links, at most %d", len(hidden), MaxLinks)
	}
	had := map[LinkID]int{}
	for _, id := range m.hidden {
		if f, ok := m.flows[id]; ok {
			had[f.Path[0]]++
		}
	}
	seen := map[LinkID]bool{}
	total := 0
	for _, h := range hidden {
		if err := m.checkHidden(h); err != nil {
			return err
		}
		if seen[h.Link] {
			return fmt.Errorf("mayflower: hidden load on link %s twice", h.Link)
		}
		seen[h.Link] = true
		if len(m.onLink[h.Link])-had[h.Link]+h.Flows > MaxFlowsPerLink {
			return fmt.Errorf("mayflower: hidden load on link %s: %d flows beside %d, the most a link takes is %d", h.Link, h.Flows, len(m.onLink[h.Link])-had[h.Link], MaxFlowsPerLink)
		}
		total += h.Flows
	}
	others := len(m.flows)
	for _, id := range m.hidden {
		if _, ok := m.flows[id]; ok {
			others--
		}
	}
	if others+total > MaxFlows {
		return fmt.Errorf("mayflower: %d hidden flows beside %d, the most the model takes is %d", total, others, MaxFlows)
	}
	for _, id := range m.hidden {
		m.RemoveFlow(id)
	}
	m.hidden = m.hidden[:0]
	id := HiddenIDs
	for _, h := range hidden {
		for range h.Flows {
			m.flows[id] = &Flow{ID: id, Path: []LinkID{h.Link}, Rate: h.Rate}
			m.onLink[h.Link] = append(m.onLink[h.Link], id)
			m.hidden = append(m.hidden, id)
			id++
		}
	}
	return nil
}

// HiddenFlows returns copies of the model's hidden flows (SetHidden), in ID order.
func (m *Model) HiddenFlows() []Flow {
	out := make([]Flow, 0, len(m.hidden))
	for _, id := range m.hidden {
		if f, ok := m.Flow(id); ok {
			out = append(out, f)
		}
	}
	return out
}
