package autoscale

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Actuator carries out a region's scaling decisions: the emulated cluster, the lab's server
// processes, a Kubernetes StatefulSet per region. Adding and removing nodes takes the data
// movement's time; Nodes says where the region stands meanwhile.
type Actuator interface {
	// Nodes returns the region's serving nodes and those joining (counted in the size the
	// controller plans with).
	Nodes(ctx context.Context, region string) (serving, joining int, err error)
	// Add starts n joins in region; Remove starts n decommissions (each node's data moves
	// away before it stops).
	Add(ctx context.Context, region string, n int) error
	Remove(ctx context.Context, region string, n int) error
}

// LeavingCounter is implemented by actuators that can tell how many of a region's nodes are
// still being decommissioned: the loop then times scale-ins too, not only scale-outs, to
// calibrate the migration model.
type LeavingCounter interface {
	Leaving(ctx context.Context, region string) (int, error)
}

// Loop runs one Controller per region each control period: it observes the region's load,
// asks the controller, carries out the decision through the Actuator, logs it with its reason
// and counts it in metrics.
type Loop struct {
	Controllers map[string]*Controller
	Act         Actuator
	// Load returns a region's load (ops/s) over the last period.
	Load func(ctx context.Context, region string) (float64, error)
	Log  *slog.Logger
	// Now reads the clock that times actions (default time.Now).
	Now func() time.Time

	// pending is each region's action in flight, timed to calibrate the migration model
	// (Controller.ObserveMigration) when it completes. One per region: an action that
	// overlaps another leaves both untimed.
	pending map[string]*pendingAction

	target    *prometheus.GaugeVec
	decisions *prometheus.CounterVec
}

// pendingAction is a scaling action in flight: from → to nodes since start, and the loads of
// the periods it spanned.
type pendingAction struct {
	from, to  int
	start     time.Time
	predicted time.Duration
	loadSum   float64
	loads     int
}

// RegionDecision is one region's decision in a period.
type RegionDecision struct {
	Region  string
	Load    float64
	Nodes   int
	Applied int // nodes added (> 0) or removed (< 0)
	Decision
}

// Register exports the loop's metrics: the target size per region and the decisions by region
// and mode.
func (l *Loop) Register(reg prometheus.Registerer) error {
	l.target = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meridian_autoscale_target_nodes", Help: "Autoscaler: the size each region is planned to have."}, []string{"region"})
	l.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_autoscale_decisions_total", Help: "Autoscaler: decisions by region and mode (proactive, reactive, hold)."}, []string{"region", "mode"})
	for _, c := range []prometheus.Collector{l.target, l.decisions} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("autoscale: metrics: %w", err)
		}
	}
	return nil
}

// Step runs one period over every region (in name order). A region whose observation or action
// fails is reported and skipped; the others go on.
func (l *Loop) Step(ctx context.Context) ([]RegionDecision, error) {
	var out []RegionDecision
	var errs []error
	for _, region := range slices.Sorted(func(yield func(string) bool) {
		for r := range l.Controllers {
			if !yield(r) {
				return
			}
		}
	}) {
		d, err := l.region(ctx, region)
		if err != nil {
			errs = append(errs, fmt.Errorf("region %s: %w", region, err))
			continue
		}
		out = append(out, d)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("autoscale: %v", errs)
	}
	return out, nil
}

func (l *Loop) region(ctx context.Context, region string) (RegionDecision, error) {
	load, err := l.Load(ctx, region)
	if err != nil {
		return RegionDecision{}, fmt.Errorf("observe the load: %w", err)
	}
	serving, joining, err := l.Act.Nodes(ctx, region)
	if err != nil {
		return RegionDecision{}, fmt.Errorf("count the nodes: %w", err)
	}
	nodes := serving + joining
	l.observeAction(ctx, region, load, serving, joining)
	d := l.Controllers[region].Step(load, nodes)
	rd := RegionDecision{Region: region, Load: load, Nodes: nodes, Decision: d}
	switch {
	case d.Nodes > nodes:
		if err := l.Act.Add(ctx, region, d.Nodes-nodes); err != nil {
			return rd, fmt.Errorf("add %d nodes: %w", d.Nodes-nodes, err)
		}
		rd.Applied = d.Nodes - nodes
	case d.Nodes < nodes && joining == 0:
		// A scale-in waits for joins in flight (they were planned for a reason that may
		// still hold; the next period decides again).
		if err := l.Act.Remove(ctx, region, nodes-d.Nodes); err != nil {
			return rd, fmt.Errorf("remove %d nodes: %w", nodes-d.Nodes, err)
		}
		rd.Applied = d.Nodes - nodes
	}
	if rd.Applied != 0 {
		l.startAction(region, nodes, d.Nodes, load, d.Migration)
	}
	if l.target != nil {
		l.target.WithLabelValues(region).Set(float64(d.Nodes))
		l.decisions.WithLabelValues(region, string(d.Mode)).Inc()
	}
	if l.Log != nil && (rd.Applied != 0 || d.Mode != ModeHold) {
		l.Log.Info("autoscale decision", "region", region, "load_ops", int64(load), "nodes", nodes, "target", d.Nodes, "applied", rd.Applied,
			"mode", string(d.Mode), "predicted_ops", int64(d.Predicted), "migration", d.Migration, "reason", d.Reason)
	}
	return rd, nil
}

func (l *Loop) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// startAction times a new action; one already in flight in the region is dropped untimed (the
// two overlap, so neither's time is its own).
func (l *Loop) startAction(region string, from, to int, load float64, predicted time.Duration) {
	if l.pending == nil {
		l.pending = map[string]*pendingAction{}
	}
	if _, busy := l.pending[region]; busy {
		delete(l.pending, region)
		return
	}
	l.pending[region] = &pendingAction{from: from, to: to, start: l.now(), predicted: predicted, loadSum: load, loads: 1}
}

// observeAction checks the region's action in flight: a scale-out is over when no node is
// joining and the serving nodes reach its target; a scale-in when the actuator reports no node
// leaving (actuators that cannot tell leave scale-ins untimed). A finished action calibrates the
// controller's migration model and is logged with its predicted and measured time.
func (l *Loop) observeAction(ctx context.Context, region string, load float64, serving, joining int) {
	a := l.pending[region]
	if a == nil {
		return
	}
	done := false
	switch {
	case a.to > a.from:
		done = joining == 0 && serving >= a.to
	default:
		lc, ok := l.Act.(LeavingCounter)
		if !ok {
			delete(l.pending, region)
			return
		}
		leaving, err := lc.Leaving(ctx, region)
		done = err == nil && leaving == 0
	}
	if !done {
		a.loadSum += load
		a.loads++
		return
	}
	delete(l.pending, region)
	took := l.now().Sub(a.start)
	mean := a.loadSum / float64(a.loads)
	l.Controllers[region].ObserveMigration(a.from, a.to, took, mean)
	if l.Log != nil {
		l.Log.Info("autoscale action finished", "region", region, "from", a.from, "to", a.to, "took", took, "predicted", a.predicted,
			"mean_load_ops", int64(mean), "model_rate_bytes_per_sec", int64(l.Controllers[region].Model().RateBytesPerSec))
	}
}
