package scalesim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"meridian/internal/autoscale"
	"meridian/internal/hubbub"
)

// InterferenceOptions configure the Hubbub-scale experiment: ProRenaTa over the run's trace,
// with SlowNodes of the region's nodes slowed by SlowFactors (in turn) from SlowFrom to SlowTo
// (periods of the measured span), interference-oblivious against interference-aware.
type InterferenceOptions struct {
	SlowNodes        int
	SlowFactors      []float64
	SlowFrom, SlowTo int
}

// InterferenceResult is one controller's run.
type InterferenceResult struct {
	Controller     string
	ViolationShare float64
	// SlowViolationShare: the share of the slowed span's periods that broke the SLO.
	SlowViolationShare float64
	NodeSeconds        float64
	// DetectionPeriods is, per slowed node, the periods from its slowdown to its flag (aware
	// only; -1: never).
	DetectionPeriods []int
}

// RunInterference runs ProRenaTa on a region whose nodes are modelled one by one. A node's
// true capacity is CapacityPerNode × speed (speed 1/factor while slowed); a period breaks the
// SLO when any serving node is given more than it serves. The oblivious controller plans with
// the nominal capacity and the placement spreads load evenly; the aware one feeds every node's
// service time to the interference detector (hubbub.Detector, with the host's steal
// signal), plans with the capacity the flagged nodes lack (Controller.SetInterferenceLoss),
// spreads load in proportion to effective capacity (flagged nodes are sources of moves, not
// destinations) and removes flagged nodes first when it scales in.
func RunInterference(o Options, io InterferenceOptions, aware bool, trace []float64) (InterferenceResult, error) {
	o = o.withDefaults()
	name := "ProRenaTa, interference-oblivious"
	if aware {
		name = "ProRenaTa + Hubbub-scale (aware)"
	}
	res := InterferenceResult{Controller: name}
	ctrl, err := autoscale.New(autoscale.Options{Period: o.Period, Season: o.Season, CapacityPerNode: o.CapacityPerNode,
		TargetUtilization: 0.7, MinNodes: o.MinNodes, MaxNodes: o.MaxNodes, Model: o.Model})
	if err != nil {
		return res, err
	}
	det, err := hubbub.New(hubbub.Options{})
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x4b0b))
	type node struct {
		id    int
		speed float64
		// eff is the detector's estimate of the node's capacity share (1: not flagged).
		eff float64
	}
	var nodes []node
	next := 0
	for range o.MinNodes {
		nodes = append(nodes, node{id: next, speed: 1, eff: 1})
		next++
	}
	type action struct{ delta, doneAt int }
	var pending []action
	from := o.WarmupDays * o.Season
	slowStart, slowEnd := from+io.SlowFrom, from+io.SlowTo
	slowed := map[int]float64{} // node id → factor
	rank := map[int]int{}       // node id → its place among the slowed
	res.DetectionPeriods = make([]int, io.SlowNodes)
	for i := range res.DetectionPeriods {
		res.DetectionPeriods[i] = -1
	}
	violations, measured, slowViol, slowMeasured := 0, 0, 0, 0
	for i, load := range trace {
		// Actions complete.
		keep := pending[:0]
		for _, a := range pending {
			if i < a.doneAt {
				keep = append(keep, a)
				continue
			}
			for range max(a.delta, 0) {
				nodes = append(nodes, node{id: next, speed: 1, eff: 1})
				next++
			}
			for range max(-a.delta, 0) {
				if len(nodes) <= o.MinNodes {
					break
				}
				victim := len(nodes) - 1 // the newest
				if aware {
					for j, n := range nodes {
						if n.eff < 1 {
							victim = j // an interfered node leaves first
							break
						}
					}
				}
				nodes = append(nodes[:victim], nodes[victim+1:]...)
			}
		}
		pending = keep
		// The slowdown starts (the oldest SlowNodes nodes) and ends.
		if i == slowStart {
			for k := 0; k < io.SlowNodes && k < len(nodes); k++ {
				f := io.SlowFactors[k%len(io.SlowFactors)]
				slowed[nodes[k].id] = f
				rank[nodes[k].id] = k
			}
		}
		for j := range nodes {
			f, ok := slowed[nodes[j].id]
			if ok && i >= slowStart && i < slowEnd {
				nodes[j].speed = 1 / f
			} else {
				nodes[j].speed = 1
			}
		}
		// Load spread: evenly, or by effective capacity.
		migrating := len(pending) > 0
		weights, total := make([]float64, len(nodes)), 0.0
		for j, n := range nodes {
			weights[j] = 1
			if aware {
				weights[j] = n.eff
			}
			total += weights[j]
		}
		violated := false
		var samples []hubbub.NodeSample
		for j, n := range nodes {
			share := load * weights[j] / total
			capacity := o.CapacityPerNode * n.speed
			if migrating {
				capacity *= 1 - o.MigrationShare
			}
			if share > capacity {
				violated = true
			}
			// Service time: 1 ms + 0.5 µs per op/s, stretched by the slowdown, with noise;
			// the host shows steal while the node is slowed.
			svc := (1000 + 0.5*share) / n.speed * (1 + 0.03*rng.NormFloat64())
			samples = append(samples, hubbub.NodeSample{Node: fmt.Sprint(n.id), LoadOps: share, ServiceTime: time.Duration(svc) * time.Microsecond,
				HostMeasured: true, StealShare: map[bool]float64{true: 0.2, false: 0.01}[n.speed < 1]})
		}
		loss := 0.0
		if aware {
			got := det.Observe(samples)
			for j, s := range got {
				nodes[j].eff = 1
				if s.Interfered {
					nodes[j].eff = 1 / max(1, s.Index)
					loss += o.CapacityPerNode - hubbub.EffectiveCapacity(o.CapacityPerNode, s.Index)
					if k, ok := rank[nodes[j].id]; ok && i >= slowStart && res.DetectionPeriods[k] < 0 {
						res.DetectionPeriods[k] = i - slowStart
					}
				}
			}
			ctrl.SetInterferenceLoss(loss)
		}
		adding := 0
		for _, a := range pending {
			adding += max(a.delta, 0)
		}
		size := len(nodes) + adding
		if i >= from {
			measured++
			if violated {
				violations++
			}
			if i >= slowStart && i < slowEnd {
				slowMeasured++
				if violated {
					slowViol++
				}
			}
			res.NodeSeconds += float64(size) * o.Period.Seconds()
		}
		target := ctrl.Step(load, size).Nodes
		switch {
		case target > size:
			pending = append(pending, action{delta: target - size, doneAt: i + periodsOf(o, o.Model.Duration(size, target))})
		case target < len(nodes) && len(pending) == 0:
			pending = append(pending, action{delta: target - len(nodes), doneAt: i + periodsOf(o, o.Model.Duration(len(nodes), target))})
		}
	}
	res.ViolationShare = float64(violations) / float64(max(measured, 1))
	res.SlowViolationShare = float64(slowViol) / float64(max(slowMeasured, 1))
	return res, nil
}

func periodsOf(o Options, d time.Duration) int {
	return max(1, int(math.Ceil(float64(d)/float64(o.Period))))
}

// CompareInterference runs both controllers on the same trace (flash crowds off: the
// slowdown is the only surprise).
func CompareInterference(o Options, io InterferenceOptions) ([]InterferenceResult, error) {
	o = o.withDefaults()
	if io.SlowNodes == 0 {
		io.SlowNodes = 2
	}
	if len(io.SlowFactors) == 0 {
		io.SlowFactors = []float64{1.5, 2}
	}
	if io.SlowTo == 0 {
		io.SlowFrom, io.SlowTo = o.Season/4, 3*o.Season/4
	}
	if io.SlowFrom < 0 || io.SlowTo <= io.SlowFrom || io.SlowNodes < 1 {
		return nil, fmt.Errorf("scalesim: slowdown %+v: want 1+ nodes over a non-empty span", io)
	}
	o.FlashCrowds = -1
	trace := Trace(o)
	var out []InterferenceResult
	for _, aware := range []bool{false, true} {
		r, err := RunInterference(o, io, aware, trace)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// InterferenceMarkdown renders the comparison.
func InterferenceMarkdown(rs []InterferenceResult) string {
	var b strings.Builder
	b.WriteString("| controller | violating periods | during the slowdown | node-seconds | detection (periods after the slowdown, per node) |\n|---|---|---|---|---|\n")
	for _, r := range rs {
		det := "—"
		if strings.Contains(r.Controller, "aware") {
			det = fmt.Sprint(r.DetectionPeriods)
		}
		fmt.Fprintf(&b, "| %s | %.1f%% | %.1f%% | %.0f | %s |\n", r.Controller, 100*r.ViolationShare, 100*r.SlowViolationShare, r.NodeSeconds, det)
	}
	if len(rs) == 2 && rs[0].ViolationShare > 0 {
		fmt.Fprintf(&b, "\nAware vs oblivious: %.0f%% fewer violating periods, %+.1f%% node-seconds.\n",
			100*(1-rs[1].ViolationShare/rs[0].ViolationShare), 100*(rs[1].NodeSeconds/rs[0].NodeSeconds-1))
	}
	return b.String()
}
