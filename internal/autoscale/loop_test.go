package autoscale

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeActuator is a region whose joins and decommissions take effect at once.
type fakeActuator struct {
	nodes   map[string]int
	failAdd bool
	calls   []string
}

func (f *fakeActuator) Nodes(_ context.Context, r string) (int, int, error) {
	return f.nodes[r], 0, nil
}
func (f *fakeActuator) Add(_ context.Context, r string, n int) error {
	if f.failAdd {
		return errors.New("no capacity in the cloud")
	}
	f.calls = append(f.calls, "add "+r)
	f.nodes[r] += n
	return nil
}
func (f *fakeActuator) Remove(_ context.Context, r string, n int) error {
	f.calls = append(f.calls, "remove "+r)
	f.nodes[r] -= n
	return nil
}

// The loop scales each region through the actuator, logs the decisions with their reasons,
// counts them in metrics, and reports a failing region without stopping the others.
func TestLoopActsLogsAndCounts(t *testing.T) {
	mk := func() *Controller {
		c, err := New(Options{Period: 15 * time.Second, Season: 8, CapacityPerNode: 1000, MinNodes: 2, MaxNodes: 30, ScaleInAfter: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	act := &fakeActuator{nodes: map[string]int{"eu": 2, "us": 2}}
	loads := map[string]float64{"eu": 7000, "us": 1000}
	var logs bytes.Buffer
	l := &Loop{Controllers: map[string]*Controller{"eu": mk(), "us": mk()}, Act: act,
		Load: func(_ context.Context, r string) (float64, error) { return loads[r], nil }, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	reg := prometheus.NewRegistry()
	if err := l.Register(reg); err != nil {
		t.Fatal(err)
	}
	ds, err := l.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if act.nodes["eu"] != 10 || ds[0].Applied != 8 { // 7,000 ops/s at 70% of 1,000
		t.Fatalf("eu: %d nodes, decision %+v", act.nodes["eu"], ds[0])
	}
	if !strings.Contains(logs.String(), "autoscale decision") || !strings.Contains(logs.String(), "reason=") {
		t.Errorf("decisions not logged with their reasons:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(l.target.WithLabelValues("eu")); got != 10 {
		t.Errorf("target metric %v", got)
	}
	loads["eu"] = 1000
	for range 3 {
		if _, err := l.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if act.nodes["eu"] != 2 {
		t.Fatalf("eu after the load fell: %d nodes (calls %v)", act.nodes["eu"], act.calls)
	}
	act.failAdd, loads["us"] = true, 9000
	ds, err = l.Step(context.Background())
	if err == nil || !strings.Contains(err.Error(), "region us") || len(ds) != 1 || ds[0].Region != "eu" {
		t.Fatalf("a failing region: %v, decisions %+v", err, ds)
	}
}
