// Package hubbub is interference awareness after Hubbub-scale (liu-thesis abstract, 1.4,
// 3.2.6): a node slowed by its neighbours on a shared host (CPU steal, a noisy co-tenant)
// serves less than the capacity the plan assumes; a controller that ignores it
// under-provisions. Each node gets an
// interference index — its observed service time against the model's at the same load — and
// an interfered node counts for less capacity in the plan, is a preferred source of moves and
// an avoided destination. docs/elasticity.md ("Interference") names the decisions.
//
// The model: service time as a linear function of a node's load, fitted by recursive least
// squares over the nodes not flagged (the cluster's own healthy behaviour is the reference, so
// nothing is trained offline). A node is flagged once its index, smoothed over periods, is
// above Threshold for Confirm consecutive periods and, when the runtime measures them, a host
// signal agrees (CPU steal, run-queue wait, Go scheduler latency above their bounds): a slow
// node whose host looks idle is slow for another reason (a hot partition), which moving
// replicas away from it would not cure the same way. It is cleared after Clear periods under
// ClearBelow.
package hubbub

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"meridian/internal/bwman"
)

// NodeSample is one node's period.
type NodeSample struct {
	Node string
	// LoadOps is the requests per second it served; ServiceTime their mean service time.
	LoadOps     float64
	ServiceTime time.Duration
	// Host signals, when the runtime measures them (HostMeasured): the share of CPU time
	// stolen, the mean run-queue wait, the Go scheduler's p99 latency.
	HostMeasured  bool
	StealShare    float64
	RunQueueWait  time.Duration
	SchedLatency  time.Duration
	Interfered    bool // set by Observe
	Index         float64
	expectedMicro float64
}

// Options configure the detector. Zero fields take defaults.
type Options struct {
	// Threshold and Confirm: flagged when the smoothed index exceeds Threshold (default 1.3)
	// for Confirm consecutive periods (default 2: detection within two control periods).
	Threshold float64
	Confirm   int
	// ClearBelow and Clear: unflagged after Clear periods (default 3) under ClearBelow
	// (default 1.1).
	ClearBelow float64
	Clear      int
	// Smoothing is the index's EWMA weight of the newest period (default 0.6).
	Smoothing float64
	// Host signal bounds (defaults 5% steal, 2 ms run-queue wait, 5 ms scheduler latency).
	MaxSteal        float64
	MaxRunQueueWait time.Duration
	MaxSchedLatency time.Duration
}

func (o Options) withDefaults() Options {
	if o.Threshold == 0 {
		o.Threshold = 1.3
	}
	if o.Confirm == 0 {
		o.Confirm = 2
	}
	if o.ClearBelow == 0 {
		o.ClearBelow = 1.1
	}
	if o.Clear == 0 {
		o.Clear = 3
	}
	if o.Smoothing == 0 {
		o.Smoothing = 0.6
	}
	if o.MaxSteal == 0 {
		o.MaxSteal = 0.05
	}
	if o.MaxRunQueueWait == 0 {
		o.MaxRunQueueWait = 2 * time.Millisecond
	}
	if o.MaxSchedLatency == 0 {
		o.MaxSchedLatency = 5 * time.Millisecond
	}
	return o
}

// Detector computes every node's interference index and flags interfered nodes.
type Detector struct {
	opts  Options
	model *bwman.RLS
	nodes map[string]*nodeState
}

type nodeState struct {
	index       float64
	above, calm int
	flagged     bool
}

// New returns a detector.
func New(o Options) (*Detector, error) {
	o = o.withDefaults()
	if o.Threshold <= 1 || o.ClearBelow < 1 || o.ClearBelow >= o.Threshold || o.Confirm < 1 || o.Clear < 1 || !(o.Smoothing > 0 && o.Smoothing <= 1) {
		return nil, fmt.Errorf("hubbub: options %+v: want 1 ≤ clear_below < threshold, confirm and clear ≥ 1, smoothing in (0, 1]", o)
	}
	return &Detector{opts: o, model: bwman.NewRLS(2, 0.98), nodes: map[string]*nodeState{}}, nil
}

// Observe takes one period's samples (one per node) and returns them with Index and Interfered
// set.
func (x *Detector) Observe(samples []NodeSample) []NodeSample {
	o := x.opts
	out := slices.Clone(samples)
	// The model first predicts (from the periods before), then learns from the nodes that
	// are not flagged.
	for i := range out {
		s := &out[i]
		st := x.nodes[s.Node]
		if st == nil {
			st = &nodeState{index: 1}
			x.nodes[s.Node] = st
		}
		obs := float64(s.ServiceTime.Microseconds())
		exp := obs
		if x.model.Trained() {
			exp = max(x.model.Predict([]float64{1, s.LoadOps}), 1)
		} else if med := medianService(samples); med > 0 {
			exp = med // before the model has data: the cluster's median
		}
		s.expectedMicro = exp
		ratio := obs / exp
		st.index = o.Smoothing*ratio + (1-o.Smoothing)*st.index
		s.Index = st.index
		hostAgrees := !s.HostMeasured || s.StealShare > o.MaxSteal || s.RunQueueWait > o.MaxRunQueueWait || s.SchedLatency > o.MaxSchedLatency
		switch {
		case st.index > o.Threshold && hostAgrees:
			st.above++
			st.calm = 0
			if st.above >= o.Confirm {
				st.flagged = true
			}
		case st.index < o.ClearBelow:
			st.above = 0
			st.calm++
			if st.calm >= o.Clear {
				st.flagged = false
			}
		default:
			st.above, st.calm = 0, 0
		}
		s.Interfered = st.flagged
	}
	for _, s := range out {
		if !s.Interfered && s.LoadOps > 0 {
			x.model.Update([]float64{1, s.LoadOps}, float64(s.ServiceTime.Microseconds()))
		}
	}
	return out
}

func medianService(samples []NodeSample) float64 {
	v := make([]float64, 0, len(samples))
	for _, s := range samples {
		v = append(v, float64(s.ServiceTime.Microseconds()))
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// EffectiveCapacity is what a node with this index serves at the SLO, for the plan: a node
// twice as slow as the model counts for half a node.
func EffectiveCapacity(capacity, index float64) float64 { return capacity / max(1, index) }

// Sources orders nodes as sources of moves: interfered first, then by index, highest first.
func Sources(samples []NodeSample) []string {
	s := slices.Clone(samples)
	sort.SliceStable(s, func(i, j int) bool {
		if s[i].Interfered != s[j].Interfered {
			return s[i].Interfered
		}
		return s[i].Index > s[j].Index
	})
	return names(s)
}

// Destinations orders the nodes that may take moves: interfered ones are left out, the others
// least interfered first.
func Destinations(samples []NodeSample) []string {
	s := slices.DeleteFunc(slices.Clone(samples), func(n NodeSample) bool { return n.Interfered })
	sort.SliceStable(s, func(i, j int) bool { return s[i].Index < s[j].Index })
	return names(s)
}

func names(s []NodeSample) []string {
	out := make([]string, len(s))
	for i, n := range s {
		out[i] = n.Node
	}
	return out
}
