package autoscale

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// MigrationModel is ProRenaTa's data-migration model: how much data a scaling action moves and
// how long that takes at the rate the system class may use without breaking the SLO (BwMan's
// share of each node's link). Data is spread evenly over a region's nodes (the placement
// driver balances bytes).
//
// The time of an action is set by its busiest node, the bottleneck: going from n to m > n
// nodes, each joining node receives D/m and each old node sends (m−n)·D/(m·n); going from n to
// m < n, each leaving node sends D/n and each staying node receives (n−m)·D/(n·m). The
// placement driver (internal/elascass) moves whole partitions, at most MaxMovesPerNode into or
// out of one node at a time, so the bottleneck's partitions go in waves, and each wave costs
// PerMove on top of its bytes (the driver's next round, the snapshot's export and ask, a
// catch-up round, the report and the metadata commit of move_finish). The rate is what BwMan
// leaves the system class: its ceiling (RateBytesPerSec, at no client load) less Headroom × the
// link bytes the clients need (UserBytesPerOp per operation a node serves), never under
// MinRateShare of the ceiling (BwMan's floor).
type MigrationModel struct {
	// DataBytes is the data one region holds (one replica per region).
	DataBytes float64
	// RateBytesPerSec is one node's system rate during an action when clients are idle;
	// ScaleInRateBytesPerSec the same for scale-ins when it differs (0: the same). They do
	// on the emulated cluster, by about 2×: a joining node pulls from every old node, each
	// paced by its own outbound bucket, while a leaving node's one outbound bucket carries all
	// it sends (`meridian bench autoscale --emulated --repeat`).
	RateBytesPerSec, ScaleInRateBytesPerSec float64
	// Overhead is the fixed cost of an action (a join's registration and first phase).
	Overhead time.Duration
	// Partitions is the number of replicas a region holds (the units the driver moves; 0:
	// the data moves as one stream and PerMove is not counted).
	Partitions int
	// MaxMovesPerNode is the driver's bound on moves in flight into or out of one node
	// (elasticity.max_moves_per_node; default 2).
	MaxMovesPerNode int
	// PerMove is the fixed cost of one wave of moves.
	PerMove time.Duration
	// UserBytesPerOp is the link bytes one client operation costs the node that serves it;
	// Headroom BwMan's factor on the clients' need (default 1.5); MinRateShare its floor
	// (default 0.05).
	UserBytesPerOp, Headroom, MinRateShare float64
}

// Bytes returns the data that moves when a region goes from n to m nodes.
func (mm MigrationModel) Bytes(n, m int) float64 {
	switch {
	case m > n && m > 0:
		return float64(m-n) * mm.DataBytes / float64(m)
	case m < n && n > 0:
		return float64(n-m) * mm.DataBytes / float64(n)
	}
	return 0
}

// BottleneckBytes returns the bytes the busiest node sends or receives when a region goes from
// n to m nodes.
func (mm MigrationModel) BottleneckBytes(n, m int) float64 {
	switch {
	case m > n && n > 0:
		return max(mm.DataBytes/float64(m), float64(m-n)*mm.DataBytes/float64(m*n))
	case m < n && m > 0:
		return max(mm.DataBytes/float64(n), float64(n-m)*mm.DataBytes/float64(n*m))
	case m > n || m < n:
		return mm.DataBytes // from nothing, or to nothing
	}
	return 0
}

// Waves returns the rounds of moves the bottleneck node goes through.
func (mm MigrationModel) Waves(n, m int) int {
	if mm.Partitions <= 0 || mm.DataBytes <= 0 || n == m {
		return 0
	}
	moves := int(math.Ceil(mm.BottleneckBytes(n, m)/(mm.DataBytes/float64(mm.Partitions)) - 1e-9))
	per := mm.MaxMovesPerNode
	if per <= 0 {
		per = 2
	}
	return (moves + per - 1) / per
}

// ceiling returns the system rate at no load of a scale-out (up) or a scale-in.
func (mm MigrationModel) ceiling(up bool) float64 {
	if !up && mm.ScaleInRateBytesPerSec > 0 {
		return mm.ScaleInRateBytesPerSec
	}
	return mm.RateBytesPerSec
}

// rateAt returns the system rate one node gets in a scale-out (up) or scale-in while the region
// serves loadOps over nodes.
func (mm MigrationModel) rateAt(up bool, loadOps float64, nodes int) float64 {
	headroom, floor := mm.Headroom, mm.MinRateShare
	if headroom <= 0 {
		headroom = 1.5
	}
	if floor <= 0 {
		floor = 0.05
	}
	perNode := 0.0
	if nodes > 0 {
		perNode = max(loadOps, 0) / float64(nodes)
	}
	c := mm.ceiling(up)
	return max(floor*c, c-headroom*mm.UserBytesPerOp*perNode)
}

// Duration returns how long going from n to m nodes takes with idle clients.
func (mm MigrationModel) Duration(n, m int) time.Duration { return mm.DurationAt(n, m, 0) }

// DurationAt returns how long going from n to m nodes takes while the region serves loadOps:
// the overhead, the bottleneck's waves, and its bytes at the rate BwMan leaves (the nodes that
// serve throughout, min(n, m), carry the load).
func (mm MigrationModel) DurationAt(n, m int, loadOps float64) time.Duration {
	if n == m || mm.ceiling(m > n) <= 0 {
		return 0
	}
	rate := mm.rateAt(m > n, loadOps, max(min(n, m), 1))
	return mm.Overhead + time.Duration(mm.Waves(n, m))*mm.PerMove + time.Duration(mm.BottleneckBytes(n, m)/rate*float64(time.Second))
}

// Options configure a Controller.
type Options struct {
	// Period is the control period; Season the periods of the workload's cycle (a day).
	Period time.Duration
	Season int
	// CapacityPerNode is the load (ops/s) one node serves at the SLO; TargetUtilization the
	// share of it a plan aims at (the rest absorbs prediction error and bursts).
	CapacityPerNode, TargetUtilization float64
	MinNodes, MaxNodes                 int
	// Tolerance: an observation further than this (relative) from the prediction triggers
	// the reactive correction. Default 0.1.
	Tolerance float64
	// ErrorWindow periods of mean absolute percentage error above MaxError switch the
	// controller to reactive control until the error falls again. Defaults 12 and 0.2.
	ErrorWindow int
	MaxError    float64
	// ScaleInAfter: a scale-in needs the proactive and the reactive targets both below the
	// current size for this long. Default 10 periods.
	ScaleInAfter time.Duration
	// Alpha, Beta, Gamma are the predictor's smoothing factors (defaults 0.5, 0.05, 0.3).
	Alpha, Beta, Gamma float64
	Model              MigrationModel
}

// EnsureDefaults fills zero fields.
func (o Options) EnsureDefaults() Options {
	if o.Tolerance == 0 {
		o.Tolerance = 0.1
	}
	if o.ErrorWindow == 0 {
		o.ErrorWindow = 12
	}
	if o.MaxError == 0 {
		o.MaxError = 0.2
	}
	if o.ScaleInAfter == 0 {
		o.ScaleInAfter = 10 * o.Period
	}
	if o.Alpha == 0 {
		o.Alpha = 0.5
	}
	if o.Beta == 0 {
		o.Beta = 0.05
	}
	if o.Gamma == 0 {
		o.Gamma = 0.3
	}
	if o.TargetUtilization == 0 {
		o.TargetUtilization = 0.7
	}
	return o
}

// Validate refuses options the controller cannot work with.
func (o Options) Validate() error {
	switch {
	case o.Period <= 0:
		return fmt.Errorf("autoscale: period %v: must be positive", o.Period)
	case o.Season < 2:
		return fmt.Errorf("autoscale: season of %d periods: want ≥ 2", o.Season)
	case !(o.CapacityPerNode > 0):
		return fmt.Errorf("autoscale: capacity per node %v: must be positive", o.CapacityPerNode)
	case !(o.TargetUtilization > 0 && o.TargetUtilization <= 1):
		return fmt.Errorf("autoscale: target utilisation %v: want (0, 1]", o.TargetUtilization)
	case o.MinNodes < 1 || o.MaxNodes < o.MinNodes:
		return fmt.Errorf("autoscale: nodes %d..%d: want 1 ≤ min ≤ max", o.MinNodes, o.MaxNodes)
	case o.Tolerance <= 0 || o.MaxError <= 0 || o.ErrorWindow < 1:
		return fmt.Errorf("autoscale: tolerance %v, max error %v, error window %d: must be positive", o.Tolerance, o.MaxError, o.ErrorWindow)
	}
	return nil
}

// Mode is how a decision was made.
type Mode string

const (
	// ModeProactive: sized for the predicted peak within the time the action takes.
	ModeProactive Mode = "proactive"
	// ModeReactive: sized for the observed load (the predictor is warming up, or its recent
	// error is too large, or the observation left the prediction).
	ModeReactive Mode = "reactive"
	// ModeHold: no change (within the target, or a scale-in not yet stable).
	ModeHold Mode = "hold"
)

// Decision is the controller's answer for one period.
type Decision struct {
	// Nodes is the target size (of each region).
	Nodes int
	Mode  Mode
	// Predicted is the load the plan was sized for; Migration the time the action is
	// expected to take (the migration model's).
	Predicted float64
	Migration time.Duration
	Reason    string
}

// Controller is ProRenaTa for one region's nodes.
type Controller struct {
	opts     Options
	pred     *HoltWinters
	errs     []float64 // the last ErrorWindow relative errors of the one-period forecast
	lastPred float64
	below    time.Duration // how long both targets have been below the size
	loss     float64       // capacity the interfered nodes lack (SetInterferenceLoss)
	// obs are, for scale-outs (true) and scale-ins, the last maxMigrationObservations
	// actions ObserveMigration saw, as (load per serving node, rate the bottleneck got).
	obs map[bool][][2]float64
}

// New returns a controller.
func New(o Options) (*Controller, error) {
	o = o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	hw, err := NewHoltWinters(o.Alpha, o.Beta, o.Gamma, o.Season)
	if err != nil {
		return nil, err
	}
	return &Controller{opts: o, pred: hw, lastPred: math.NaN()}, nil
}

// Learn feeds the predictor a past period's load without deciding anything: the history a
// controller starts from (the previous days' loads), so it does not spend two seasons learning.
func (c *Controller) Learn(load float64) {
	c.recordError(load)
	c.pred.Observe(load)
	c.lastPred = math.NaN()
	if c.pred.Ready() {
		c.lastPred = c.pred.Forecast(1)
	}
}

// recordError keeps the relative error of the forecast made for the period that just ended
// (the last ErrorWindow of them: the fallback's measure).
func (c *Controller) recordError(load float64) {
	if math.IsNaN(c.lastPred) || load <= 0 {
		return
	}
	c.errs = append(c.errs, math.Abs(c.lastPred-load)/load)
	if len(c.errs) > c.opts.ErrorWindow {
		c.errs = c.errs[1:]
	}
}

// ObserveMigration calibrates the migration model on an action that took took to go from n to
// m nodes while the region served loadOps. The thesis' model is fixed; the rate data movement
// really gets depends on the link, BwMan's share and the host, so it is learnt: each action
// gives the rate its bottleneck got (its bytes over the time less the overhead and the waves'
// fixed cost) at the load per serving node. The ceiling is the median over the actions so far
// of that rate plus what the clients took (Headroom × UserBytesPerOp × load per node); the
// clients' bytes per operation are fitted too once there are actions enough at loads far
// enough apart.
func (c *Controller) ObserveMigration(n, m int, took time.Duration, loadOps float64) {
	mm := &c.opts.Model
	fixed := mm.Overhead + time.Duration(mm.Waves(n, m))*mm.PerMove
	if n == m || mm.DataBytes <= 0 {
		return
	}
	// An action faster than the fixed part says the fixed part is too large: its bytes are
	// taken to have moved in a tenth of the time, which lowers the estimate of neither.
	moving := max(took-fixed, took/10)
	rate := mm.BottleneckBytes(n, m) / moving.Seconds()
	x := max(loadOps, 0) / float64(max(min(n, m), 1))
	up := m > n
	if c.obs == nil {
		c.obs = map[bool][][2]float64{}
	}
	obs := append(c.obs[up], [2]float64{x, rate})
	if len(obs) > maxMigrationObservations {
		obs = obs[1:]
	}
	c.obs[up] = obs
	headroom := mm.Headroom
	if headroom <= 0 {
		headroom = 1.5
	}
	// The clients' bytes per operation: a least-squares fit of rate on load per node, only
	// over four actions or more whose loads differ by half their mean or more (fewer, or
	// closer loads, leave the slope to noise: the emulated cluster's actions vary 2× at one
	// load), and only when it is negative (more load, less rate).
	var sx, sy, sxx, sxy float64
	lo, hi := obs[0][0], obs[0][0]
	for _, o := range obs {
		sx, sy, sxx, sxy = sx+o[0], sy+o[1], sxx+o[0]*o[0], sxy+o[0]*o[1]
		lo, hi = min(lo, o[0]), max(hi, o[0])
	}
	k := float64(len(obs))
	if den := k*sxx - sx*sx; len(obs) >= 4 && hi-lo >= 0.5*sx/k && den > 0 {
		if slope := (k*sxy - sx*sy) / den; slope < 0 {
			mm.UserBytesPerOp = -slope / headroom
		}
	}
	// The ceiling: the median of what each action implies (its rate plus what the clients
	// took), robust to the one action in several that a slow host or a busy driver stretched.
	ceilings := make([]float64, len(obs))
	for i, o := range obs {
		ceilings[i] = o[1] + headroom*mm.UserBytesPerOp*o[0]
	}
	slices.Sort(ceilings)
	ceiling := ceilings[len(ceilings)/2]
	if n := len(ceilings); n%2 == 0 {
		ceiling = (ceilings[n/2-1] + ceilings[n/2]) / 2
	}
	// Scale-outs and scale-ins are fitted apart (their bottlenecks differ); until a scale-in
	// has been seen it takes the scale-out rate.
	if up {
		mm.RateBytesPerSec = ceiling
	} else {
		mm.ScaleInRateBytesPerSec = ceiling
	}
}

// maxMigrationObservations bounds the actions the migration model's fit remembers.
const maxMigrationObservations = 32

// Model returns the migration model as calibrated so far.
func (c *Controller) Model() MigrationModel { return c.opts.Model }

// SetDataBytes updates the migration model's data per region (it grows and shrinks with the
// keyspaces).
func (c *Controller) SetDataBytes(b float64) {
	if b > 0 {
		c.opts.Model.DataBytes = b
	}
}

// SetInterferenceLoss tells the plan how much capacity (ops/s) the region's interfered nodes
// lack (Hubbub-scale: Σ over the flagged nodes of capacity − EffectiveCapacity). The sizes it
// plans then cover it with healthy nodes: N × capacity − loss ≥ load / target utilisation.
func (c *Controller) SetInterferenceLoss(opsPerSec float64) { c.loss = max(opsPerSec, 0) }

// nodesFor is the size that serves load at the target utilisation.
func (c *Controller) nodesFor(load float64) int {
	o := c.opts
	n := int(math.Ceil((load/o.TargetUtilization + c.loss) / o.CapacityPerNode))
	return min(max(n, o.MinNodes), o.MaxNodes)
}

// Step takes the period's observed load (ops/s) with the current size and decides the target.
func (c *Controller) Step(load float64, nodes int) Decision {
	o := c.opts
	// The forecast error of the period that just ended, then learn it.
	predictedNow := c.lastPred // what was forecast for this period
	c.recordError(load)
	c.pred.Observe(load)
	reactiveN := c.nodesFor(load)
	if !c.pred.Ready() {
		c.lastPred = math.NaN()
		return c.finish(nodes, reactiveN, ModeReactive, load, 0, "the predictor is learning its first two seasons")
	}
	c.lastPred = c.pred.Forecast(1)
	mape := 0.0
	for _, e := range c.errs {
		mape += e
	}
	if len(c.errs) > 0 {
		mape /= float64(len(c.errs))
	}
	// The lead time: what the action the forecast calls for would take, found by iterating
	// (a bigger change moves more data, and may need to look further ahead).
	lead := o.Model.DurationAt(nodes, nodes+1, load)
	peak, proactiveN := 0.0, nodes
	for range 4 {
		ahead := max(1, int(math.Ceil(float64(lead+o.Period)/float64(o.Period))))
		peak = 0
		for h := 1; h <= ahead; h++ {
			peak = max(peak, c.pred.Forecast(h))
		}
		proactiveN = c.nodesFor(peak)
		next := o.Model.DurationAt(nodes, proactiveN, peak)
		if next <= lead {
			break
		}
		lead = next
	}
	switch {
	case len(c.errs) >= o.ErrorWindow && mape > o.MaxError:
		return c.finish(nodes, reactiveN, ModeReactive, load, 0, fmt.Sprintf("the predictor's recent error is %.0f%% (over %.0f%%): reactive until it falls", 100*mape, 100*o.MaxError))
	case !math.IsNaN(predictedNow) && load > predictedNow*(1+o.Tolerance) && reactiveN > proactiveN:
		// The observation left the prediction upwards (a flash crowd): correct at once.
		return c.finish(nodes, reactiveN, ModeReactive, load, o.Model.DurationAt(nodes, reactiveN, load), fmt.Sprintf("load %.0f ops/s is above the prediction by more than %.0f%%: reactive correction", load, 100*o.Tolerance))
	}
	target := max(proactiveN, reactiveN)
	return c.finish(nodes, target, ModeProactive, peak, o.Model.DurationAt(nodes, target, max(load, peak)),
		fmt.Sprintf("predicted peak %.0f ops/s within the %v the action takes", peak, lead.Round(time.Second)))
}

// finish applies the scale-in rule: a smaller size only after both targets have stayed below
// the current one for ScaleInAfter.
func (c *Controller) finish(nodes, target int, mode Mode, predicted float64, migration time.Duration, reason string) Decision {
	o := c.opts
	if target < nodes {
		c.below += o.Period
		if c.below < o.ScaleInAfter {
			return Decision{Nodes: nodes, Mode: ModeHold, Predicted: predicted,
				Reason: fmt.Sprintf("a scale-in to %d waits for %v of stability (%v so far)", target, o.ScaleInAfter, c.below)}
		}
		c.below = 0
		return Decision{Nodes: target, Mode: mode, Predicted: predicted, Migration: migration, Reason: reason}
	}
	c.below = 0
	if target == nodes {
		mode = ModeHold
	}
	return Decision{Nodes: target, Mode: mode, Predicted: predicted, Migration: migration, Reason: reason}
}
