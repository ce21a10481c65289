package autoscale

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
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

// slowActuator is a region whose joins take two observations to finish.
type slowActuator struct {
	serving, joining, seen int
}

func (s *slowActuator) Nodes(context.Context, string) (int, int, error) {
	if s.joining > 0 {
		s.seen++
		if s.seen > 2 {
			s.serving, s.joining, s.seen = s.serving+s.joining, 0, 0
		}
	}
	return s.serving, s.joining, nil
}
func (s *slowActuator) Add(_ context.Context, _ string, n int) error { s.joining += n; return nil }
func (s *slowActuator) Remove(context.Context, string, int) error    { return nil }

// The loop times each scale-out until its nodes serve and calibrates the controller's migration
// model with it, logging predicted against measured.
func TestLoopCalibratesTheMigrationModel(t *testing.T) {
	c, err := New(Options{Period: 15 * time.Second, Season: 8, CapacityPerNode: 1000, MinNodes: 2, MaxNodes: 30,
		Model: MigrationModel{DataBytes: 300e6, RateBytesPerSec: 100e6, Overhead: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	act := &slowActuator{serving: 2}
	clock := time.Unix(0, 0)
	var logs bytes.Buffer
	l := &Loop{Controllers: map[string]*Controller{"eu": c}, Act: act, Now: func() time.Time { return clock },
		Load: func(context.Context, string) (float64, error) { return 2000, nil }, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	before := c.Model().Duration(2, 3)
	for range 4 {
		if _, err := l.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(15 * time.Second)
	}
	if act.serving != 3 {
		t.Fatalf("the join did not finish: %+v", act)
	}
	// Added at 0 s, serving at the third observation after: 45 s.
	after := c.Model().Duration(2, 3)
	if d := math.Abs(float64(after-45*time.Second)) / float64(45*time.Second); d > 0.1 || before > 10*time.Second {
		t.Fatalf("model 2 → 3: %v before, %v after an action of 45 s", before, after)
	}
	if !strings.Contains(logs.String(), "autoscale action finished") {
		t.Errorf("the finished action is not logged:\n%s", logs.String())
	}
}
