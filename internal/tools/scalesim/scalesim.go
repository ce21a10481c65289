// Package scalesim compares autoscaling policies on a model of a region's storage nodes, in
// virtual time: a load trace, nodes of a fixed capacity, scaling actions that take the time the
// data-migration model says (with the noise of a real transfer) and during which the new nodes
// do not serve yet and the data movement costs the serving nodes a share of their capacity
// (BwMan's system share). It is the policies' first proving ground (docs/elasticity.md,
// "Autoscaling"); the emulated cluster is the second.
//
// Policies: reactive (Kubernetes HPA's rule: desired = ceil(n × utilisation / target), a 10%
// tolerance, a down-scale stabilisation window), step (the Spanner autoscaler's stepwise
// method: a fixed step out above a high threshold, in below a low one), proactive only (the
// predictor's plan, no correction), ProRenaTa (internal/autoscale), and an oracle that knows the
// future exactly and starts every action just in time (the node-seconds reference).
package scalesim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"meridian/internal/autoscale"
)

// Options configure a run.
type Options struct {
	// Period is the control period (default 15s); Days of Season periods each (default 4
	// days of 96: a day compressed into 24 virtual minutes). The first WarmupDays (default 2:
	// the predictor's two seasons) run but are not measured.
	Period     time.Duration
	Season     int
	Days       int
	WarmupDays int
	// Trace: the load (ops/s) of a day goes from Low to High and back (a smooth daily cycle),
	// with noise, and FlashCrowds extra surges on the last day (×FlashFactor for FlashPeriods).
	Low, High                 float64
	Noise                     float64
	FlashCrowds, FlashPeriods int
	FlashFactor               float64
	// CapacityPerNode ops/s at the SLO; a period whose load exceeds the serving capacity
	// (less the migration's share) breaks the SLO.
	CapacityPerNode float64
	// MigrationShare is the capacity share a node gives up while it sends or receives data
	// (BwMan's system class). Default 0.1.
	MigrationShare float64
	Model          autoscale.MigrationModel
	// MigrationNoise: an action's real duration is the model's × (1 ± this) (default 0.1).
	MigrationNoise float64
	MinNodes       int
	MaxNodes       int
	Seed           uint64
}

func (o Options) withDefaults() Options {
	if o.Period == 0 {
		o.Period = 15 * time.Second
	}
	if o.Season == 0 {
		o.Season = 96
	}
	if o.Days == 0 {
		o.Days = 4
	}
	if o.WarmupDays == 0 {
		o.WarmupDays = 2
	}
	if o.Low == 0 {
		o.Low = 2000
	}
	if o.High == 0 {
		o.High = 12000
	}
	if o.Noise == 0 {
		o.Noise = 0.03
	}
	if o.FlashCrowds == 0 {
		o.FlashCrowds = 2
	}
	if o.FlashPeriods == 0 {
		o.FlashPeriods = 6
	}
	if o.FlashFactor == 0 {
		o.FlashFactor = 1.5
	}
	if o.CapacityPerNode == 0 {
		o.CapacityPerNode = 1000
	}
	if o.MigrationShare == 0 {
		o.MigrationShare = 0.1
	}
	if o.Model.DataBytes == 0 {
		o.Model = autoscale.MigrationModel{DataBytes: 20e9, RateBytesPerSec: 50e6, Overhead: 10 * time.Second}
	}
	if o.MigrationNoise == 0 {
		o.MigrationNoise = 0.1
	}
	if o.MinNodes == 0 {
		o.MinNodes = 2
	}
	if o.MaxNodes == 0 {
		o.MaxNodes = 40
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// Trace returns the run's load, one value per period.
func Trace(o Options) []float64 {
	o = o.withDefaults()
	rng := rand.New(rand.NewPCG(o.Seed, 0x7ace))
	n := o.Days * o.Season
	out := make([]float64, n)
	for i := range n {
		phase := 2 * math.Pi * float64(i%o.Season) / float64(o.Season)
		out[i] = (o.Low + (o.High-o.Low)*(1-math.Cos(phase))/2) * (1 + o.Noise*rng.NormFloat64())
	}
	// Flash crowds on the last day, at a third and two thirds of it, before the peak.
	last := (o.Days - 1) * o.Season
	for k := range o.FlashCrowds {
		at := last + (k+1)*o.Season/(o.FlashCrowds+1) - o.Season/8
		for j := range o.FlashPeriods {
			if at+j < n {
				out[at+j] *= o.FlashFactor
			}
		}
	}
	return out
}

// Policy decides a region's target size each period.
type Policy interface {
	Name() string
	// Target is the size wanted given the period's observed load and the current size
	// (serving nodes plus those being added).
	Target(load float64, nodes int) int
}

// Result is one policy's run.
type Result struct {
	Policy string
	// ViolationShare is the share of periods whose load exceeded the serving capacity.
	ViolationShare float64
	// Utilization is the mean of load over the serving capacity (capped at 1).
	Utilization float64
	NodeSeconds float64
	Actions     int
	// MigrationErrMean is the mean relative error of the predicted action durations against
	// the actual ones (policies that predict them).
	MigrationErrMean float64
}

// Run runs a policy over the trace.
func Run(o Options, p Policy, trace []float64) Result {
	o = o.withDefaults()
	rng := rand.New(rand.NewPCG(o.Seed, 0x5ca1e))
	serving := o.MinNodes
	// Actions in flight: scale-outs may overlap (more joins while some run: each new node
	// pulls its own share); a scale-in starts only when nothing else runs.
	type action struct {
		delta  int
		doneAt int // period at which it completes
	}
	var pending []action
	res := Result{Policy: p.Name()}
	violations, utilSum, measured := 0, 0.0, 0
	var migErr []float64
	from := o.WarmupDays * o.Season
	for i, load := range trace {
		pending = slices.DeleteFunc(pending, func(a action) bool {
			if i >= a.doneAt {
				serving += a.delta // joining nodes serve once their data is in; leaving ones stop
				return true
			}
			return false
		})
		adding := 0
		for _, a := range pending {
			adding += max(a.delta, 0)
		}
		capacity := float64(serving) * o.CapacityPerNode
		if len(pending) > 0 {
			capacity *= 1 - o.MigrationShare
		}
		nodes := serving + adding
		if i >= from {
			measured++
			if load > capacity {
				violations++
			}
			utilSum += min(load/capacity, 1)
			res.NodeSeconds += float64(nodes) * o.Period.Seconds()
		}
		target := min(max(p.Target(load, nodes), o.MinNodes), o.MaxNodes)
		var delta int
		switch {
		case target > nodes:
			delta = target - nodes
		case target < serving && len(pending) == 0:
			delta = target - serving
		}
		if delta != 0 {
			predicted := o.Model.Duration(nodes, nodes+delta)
			actual := time.Duration(float64(predicted) * (1 + o.MigrationNoise*(2*rng.Float64()-1)))
			if predicted > 0 && i >= from {
				migErr = append(migErr, math.Abs(float64(predicted-actual))/float64(actual))
			}
			pending = append(pending, action{delta: delta, doneAt: i + int(math.Ceil(float64(actual)/float64(o.Period)))})
			res.Actions++
		}
	}
	res.ViolationShare = float64(violations) / float64(max(measured, 1))
	res.Utilization = utilSum / float64(max(measured, 1))
	for _, e := range migErr {
		res.MigrationErrMean += e / float64(len(migErr))
	}
	return res
}

// Reactive is Kubernetes HPA's rule, scaled to the run: desired = ceil(n × u / target) beyond a
// tolerance, scale-in only to the largest desired size of the stabilisation window.
type Reactive struct {
	CapacityPerNode, TargetUtilization, Tolerance float64
	DownWindow                                    int // periods
	recent                                        []int
}

func (r *Reactive) Name() string { return "reactive (HPA)" }

func (r *Reactive) Target(load float64, nodes int) int {
	u := load / (float64(nodes) * r.CapacityPerNode)
	desired := nodes
	if math.Abs(u/r.TargetUtilization-1) > r.Tolerance {
		desired = int(math.Ceil(float64(nodes) * u / r.TargetUtilization))
	}
	r.recent = append(r.recent, desired)
	if len(r.recent) > r.DownWindow {
		r.recent = r.recent[1:]
	}
	if desired < nodes {
		best := desired
		for _, d := range r.recent {
			best = max(best, d)
		}
		return min(best, nodes)
	}
	return desired
}

// Step is the Spanner autoscaler's stepwise method: Step nodes out above High utilisation, in
// below Low.
type Step struct {
	CapacityPerNode, High, Low float64
	Step                       int
}

func (s *Step) Name() string { return "step" }

func (s *Step) Target(load float64, nodes int) int {
	u := load / (float64(nodes) * s.CapacityPerNode)
	switch {
	case u > s.High:
		return nodes + s.Step
	case u < s.Low:
		return nodes - s.Step
	}
	return nodes
}

// ProRenaTa wraps autoscale.Controller.
type ProRenaTa struct {
	C    *autoscale.Controller
	name string
}

// NewProRenaTa returns ProRenaTa, or its proactive part alone (no reactive correction, no
// fallback) when proactiveOnly.
func NewProRenaTa(o Options, proactiveOnly bool) (*ProRenaTa, error) {
	o = o.withDefaults()
	// Sized for the predicted peak, ProRenaTa needs less margin than a reactive rule: 85% of a
	// node's capacity at the SLO (the reactive correction covers what the prediction misses).
	ao := autoscale.Options{Period: o.Period, Season: o.Season, CapacityPerNode: o.CapacityPerNode, TargetUtilization: 0.85,
		MinNodes: o.MinNodes, MaxNodes: o.MaxNodes, Model: o.Model}
	name := "prorenata"
	if proactiveOnly {
		ao.Tolerance, ao.MaxError, name = math.Inf(1), math.Inf(1), "proactive only"
	}
	c, err := autoscale.New(ao)
	if err != nil {
		return nil, err
	}
	return &ProRenaTa{C: c, name: name}, nil
}

func (p *ProRenaTa) Name() string { return p.name }

func (p *ProRenaTa) Target(load float64, nodes int) int { return p.C.Step(load, nodes).Nodes }

// Oracle knows the trace: it wants, at every period, the size the peak of the coming lead time
// needs at full capacity less the migration share.
type Oracle struct {
	O     Options
	Trace []float64
	i     int
}

func (x *Oracle) Name() string { return "oracle" }

func (x *Oracle) Target(_ float64, nodes int) int {
	o := x.O.withDefaults()
	want := nodes
	for range 4 {
		// Look as far ahead as the action would take (with its noise) and two periods more.
		d := time.Duration(float64(o.Model.Duration(nodes, max(want, nodes+1))) * (1 + o.MigrationNoise))
		lead := int(math.Ceil(float64(d)/float64(o.Period))) + 2
		peak := 0.0
		for h := 0; h <= lead && x.i+h < len(x.Trace); h++ {
			peak = max(peak, x.Trace[x.i+h])
		}
		next := int(math.Ceil(peak / (o.CapacityPerNode * (1 - o.MigrationShare))))
		if next <= want && want != nodes {
			break
		}
		want = next
	}
	x.i++
	return want
}

// Compare runs every policy over one trace.
func Compare(o Options) ([]Result, error) {
	o = o.withDefaults()
	trace := Trace(o)
	pr, err := NewProRenaTa(o, false)
	if err != nil {
		return nil, err
	}
	po, err := NewProRenaTa(o, true)
	if err != nil {
		return nil, err
	}
	policies := []Policy{
		&Reactive{CapacityPerNode: o.CapacityPerNode, TargetUtilization: 0.7, Tolerance: 0.1, DownWindow: int(300 * time.Second / o.Period / 4)},
		&Step{CapacityPerNode: o.CapacityPerNode, High: 0.75, Low: 0.45, Step: 2},
		po, pr,
		&Oracle{O: o, Trace: trace},
	}
	var out []Result
	for _, p := range policies {
		out = append(out, Run(o, p, trace))
	}
	return out, nil
}

// Markdown renders a comparison.
func Markdown(o Options, rs []Result) string {
	o = o.withDefaults()
	s := fmt.Sprintf("%d days of %d periods of %v; load %.0f-%.0f ops/s, %d flash crowds ×%.1f on the last day; %.0f ops/s per node; actions per the migration model (%.0f GB per region at %.0f MB/s per node, ±%.0f%%).\n\n",
		o.Days, o.Season, o.Period, o.Low, o.High, o.FlashCrowds, o.FlashFactor, o.CapacityPerNode, o.Model.DataBytes/1e9, o.Model.RateBytesPerSec/1e6, 100*o.MigrationNoise)
	s += "| policy | SLO-violating periods | mean utilisation | node-seconds | vs oracle | actions | migration-time prediction error |\n|---|---|---|---|---|---|---|\n"
	oracle := 0.0
	for _, r := range rs {
		if r.Policy == "oracle" {
			oracle = r.NodeSeconds
		}
	}
	for _, r := range rs {
		s += fmt.Sprintf("| %s | %.1f%% | %.0f%% | %.0f | %+.0f%% | %d | %.1f%% |\n", r.Policy, 100*r.ViolationShare, 100*r.Utilization, r.NodeSeconds,
			100*(r.NodeSeconds/oracle-1), r.Actions, 100*r.MigrationErrMean)
	}
	return s
}
