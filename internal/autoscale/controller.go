package autoscale

import (
	"fmt"
	"math"
	"time"
)

// MigrationModel is ProRenaTa's data-migration model: how much data a scaling action moves and
// how long that takes at the rate the system class may use without breaking the SLO (BwMan's
// share of each node's link). Data is spread evenly over a region's nodes (the placement
// driver balances bytes), so going from n to m nodes each joining node receives D/m, each
// leaving node sends its D/n, and the nodes move in parallel.
type MigrationModel struct {
	// DataBytes is the data one region holds (one replica per region).
	DataBytes float64
	// RateBytesPerSec is one node's system rate during the action.
	RateBytesPerSec float64
	// Overhead is the fixed cost of an action (a join's registration and first phase, the
	// driver's rounds).
	Overhead time.Duration
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

// Duration returns how long going from n to m nodes takes: one node's part at the rate, plus
// the overhead.
func (mm MigrationModel) Duration(n, m int) time.Duration {
	if n == m || mm.RateBytesPerSec <= 0 {
		return 0
	}
	per := mm.DataBytes / float64(max(n, m))
	return mm.Overhead + time.Duration(per/mm.RateBytesPerSec*float64(time.Second))
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
	// migrations counts the actions ObserveMigration has seen.
	migrations int
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
// m nodes: the per-node rate it implies (its part of the data over the time less the fixed
// overhead) is the first replaces the configured rate, later ones are averaged in (EWMA, weight 0.5). The thesis' model is fixed; the rate data
// movement really gets depends on the link, BwMan's share and the host, so it is learnt.
func (c *Controller) ObserveMigration(n, m int, took time.Duration) {
	mm := &c.opts.Model
	if n == m || took <= mm.Overhead || mm.DataBytes <= 0 {
		return
	}
	per := mm.DataBytes / float64(max(n, m))
	rate := per / (took - mm.Overhead).Seconds()
	c.migrations++
	if c.migrations == 1 || mm.RateBytesPerSec <= 0 {
		mm.RateBytesPerSec = rate // a measurement replaces the configured guess
		return
	}
	mm.RateBytesPerSec = 0.5*mm.RateBytesPerSec + 0.5*rate
}

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
	lead := o.Model.Duration(nodes, nodes+1)
	peak, proactiveN := 0.0, nodes
	for range 4 {
		ahead := max(1, int(math.Ceil(float64(lead+o.Period)/float64(o.Period))))
		peak = 0
		for h := 1; h <= ahead; h++ {
			peak = max(peak, c.pred.Forecast(h))
		}
		proactiveN = c.nodesFor(peak)
		next := o.Model.Duration(nodes, proactiveN)
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
		return c.finish(nodes, reactiveN, ModeReactive, load, o.Model.Duration(nodes, reactiveN), fmt.Sprintf("load %.0f ops/s is above the prediction by more than %.0f%%: reactive correction", load, 100*o.Tolerance))
	}
	target := max(proactiveN, reactiveN)
	return c.finish(nodes, target, ModeProactive, peak, o.Model.Duration(nodes, target),
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
