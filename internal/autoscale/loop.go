package autoscale

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

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

// Loop runs one Controller per region each control period: it observes the region's load,
// asks the controller, carries out the decision through the Actuator, logs it with its reason
// and counts it in metrics.
type Loop struct {
	Controllers map[string]*Controller
	Act         Actuator
	// Load returns a region's load (ops/s) over the last period.
	Load func(ctx context.Context, region string) (float64, error)
	Log  *slog.Logger

	target    *prometheus.GaugeVec
	decisions *prometheus.CounterVec
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
