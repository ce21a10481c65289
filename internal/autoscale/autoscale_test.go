package autoscale

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// diurnal is a daily cycle of season periods between lo and hi, with noise.
func diurnal(i, season int, lo, hi float64, rng *rand.Rand) float64 {
	phase := 2 * math.Pi * float64(i%season) / float64(season)
	return lo + (hi-lo)*(1-math.Cos(phase))/2*(1+0.02*rng.NormFloat64())
}

// Holt-Winters learns a daily cycle (with a trend) and forecasts it within a few percent.
func TestHoltWintersForecastsTheCycle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const season = 48
	hw, err := NewHoltWinters(0.5, 0.05, 0.3, season)
	if err != nil {
		t.Fatal(err)
	}
	x := func(i int) float64 { return diurnal(i, season, 1000, 5000, rng) + 2*float64(i) }
	for i := range 6 * season {
		hw.Observe(x(i))
	}
	worst := 0.0
	for h := 1; h <= season/2; h++ {
		want := 1000 + 4000*(1-math.Cos(2*math.Pi*float64((6*season+h-1)%season)/season))/2 + 2*float64(6*season+h-1)
		worst = max(worst, math.Abs(hw.Forecast(h)-want)/want)
	}
	if worst > 0.08 {
		t.Fatalf("forecasts up to half a day ahead are off by up to %.1f%%", 100*worst)
	}
	if _, err := NewHoltWinters(0, 0.1, 0.1, 10); err == nil {
		t.Error("alpha 0 accepted")
	}
	if _, err := NewHoltWinters(0.1, 0.1, 0.1, 1); err == nil {
		t.Error("a season of 1 accepted")
	}
}

// The migration model: joining moves each new node's share, leaving each leaving node's.
func TestMigrationModel(t *testing.T) {
	mm := MigrationModel{DataBytes: 120e6, RateBytesPerSec: 10e6, Overhead: time.Second}
	if got := mm.Bytes(3, 4); got != 30e6 {
		t.Errorf("3 → 4 moves %.0f bytes, want 30 MB", got)
	}
	if got := mm.Bytes(4, 2); got != 60e6 {
		t.Errorf("4 → 2 moves %.0f bytes, want 60 MB", got)
	}
	if got := mm.Duration(3, 4); got != 4*time.Second {
		t.Errorf("3 → 4 takes %v, want 4s (30 MB at 10 MB/s + 1 s)", got)
	}
}

func newController(t *testing.T) *Controller {
	t.Helper()
	c, err := New(Options{Period: 15 * time.Second, Season: 96, CapacityPerNode: 1000, MinNodes: 2, MaxNodes: 20,
		Model: MigrationModel{DataBytes: 4e9, RateBytesPerSec: 10e6, Overhead: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Proactive: once it knows the cycle, the controller is at the size the rising load needs
// before the load gets there (the action takes minutes: it starts early); and it never
// under-provisions by more than the tolerance the reactive correction allows.
func TestControllerScalesAhead(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	c := newController(t)
	nodes := 2
	early, late := 0, 0
	for i := range 6 * 96 {
		load := diurnal(i, 96, 1500, 9000, rng)
		d := c.Step(load, nodes)
		if i >= 3*96 {
			need := c.nodesFor(diurnal(i+1, 96, 1500, 9000, rand.New(rand.NewPCG(0, 0))))
			switch {
			case d.Nodes >= need:
				early++
			default:
				late++
			}
		}
		nodes = d.Nodes
	}
	if late > early/20 {
		t.Fatalf("after learning the cycle the size was short of the next period's need %d times of %d", late, early+late)
	}
}

// A flash crowd the predictor did not see is corrected reactively, at once.
func TestControllerReactsToAFlashCrowd(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	c := newController(t)
	nodes := 2
	for i := range 4 * 96 {
		nodes = c.Step(diurnal(i, 96, 1500, 3000, rng), nodes).Nodes
	}
	d := c.Step(12000, nodes)
	if d.Mode != ModeReactive || d.Nodes != 18 { // 12,000 ops/s at 70% of 1,000 per node
		t.Fatalf("flash crowd: %+v", d)
	}
}

// Scale-in waits for stability; an unpredictable load puts the controller in reactive mode.
func TestControllerScaleInAndFallback(t *testing.T) {
	c := newController(t)
	d := c.Step(500, 10)
	if d.Nodes != 10 || d.Mode != ModeHold {
		t.Fatalf("first low period: %+v, want a hold", d)
	}
	for range 9 {
		d = c.Step(500, 10)
	}
	if d.Nodes != 2 {
		t.Fatalf("after 10 low periods: %+v, want the scale-in to 2", d)
	}
	// Noise the cycle does not explain: the predictor's error grows and the controller
	// falls back to reactive control.
	rng := rand.New(rand.NewPCG(4, 4))
	nodes := 2
	for i := range 3 * 96 {
		d = c.Step(diurnal(i, 96, 1500, 9000, rng), nodes)
		nodes = d.Nodes
	}
	for range 30 {
		d = c.Step(1000+8000*rng.Float64(), nodes)
		nodes = d.Nodes
	}
	if d.Mode != ModeReactive && d.Mode != ModeHold {
		t.Fatalf("under unpredictable load: %+v, want reactive control", d)
	}
}

// The migration model learns the rate actions really get: after two observed joins at half
// the configured rate, its prediction is within 10% of what they took.
func TestObserveMigrationCalibrates(t *testing.T) {
	c, err := New(Options{Period: time.Second, Season: 4, CapacityPerNode: 100, MinNodes: 1, MaxNodes: 10,
		Model: MigrationModel{DataBytes: 100e6, RateBytesPerSec: 10e6, Overhead: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	// The real rate is 5 MB/s: 2 → 3 nodes moves 33 MB per new node, 6.7 s + 2 s.
	perNode := 100e6 / 3.0
	real := 2*time.Second + time.Duration(perNode/5e6*float64(time.Second))
	if got := c.Model().Duration(2, 3); got > real*8/10 {
		t.Fatalf("before: predicted %v, real %v: the test needs a wrong model to start", got, real)
	}
	c.ObserveMigration(2, 3, real, 0)
	c.ObserveMigration(2, 3, real, 0)
	got := c.Model().Duration(2, 3)
	if d := math.Abs(float64(got-real)) / float64(real); d > 0.1 {
		t.Fatalf("after two observations: predicted %v, real %v (%.0f%% off)", got, real, 100*d)
	}
}

// The driver's rounds: the busiest node sets an action's time. Going from 2 to 6 nodes the
// two old nodes each send 4·D/12 (more than a new node receives, D/6), in waves of
// MaxMovesPerNode partitions, each wave with its fixed cost.
func TestMigrationModelBottleneckAndWaves(t *testing.T) {
	mm := MigrationModel{DataBytes: 24e6, RateBytesPerSec: 1e6, Partitions: 24, MaxMovesPerNode: 4, PerMove: time.Second}
	for _, c := range []struct {
		n, m  int
		bytes float64
		waves int
	}{
		{2, 3, 8e6, 2},  // a new node receives 8 partitions: two waves of four
		{2, 6, 8e6, 2},  // an old node sends (6−2)·D/(6·2) = 8 MB: 8 partitions
		{3, 4, 6e6, 2},  // 6 partitions into the new node
		{6, 3, 4e6, 1},  // a leaving node sends its 4
		{4, 1, 18e6, 5}, // the one staying node receives 18 partitions
	} {
		if got := mm.BottleneckBytes(c.n, c.m); math.Abs(got-c.bytes) > 1 {
			t.Errorf("%d → %d: bottleneck %.0f bytes, want %.0f", c.n, c.m, got, c.bytes)
		}
		if got := mm.Waves(c.n, c.m); got != c.waves {
			t.Errorf("%d → %d: %d waves, want %d", c.n, c.m, got, c.waves)
		}
	}
	if got, want := mm.Duration(2, 6), 8*time.Second+2*time.Second; got != want {
		t.Errorf("2 → 6 takes %v, want %v (8 MB at 1 MB/s and two waves of 1 s)", got, want)
	}
}

// BwMan leaves migration what the clients do not need: the same action is slower under load,
// and the model learns the clients' bytes from actions at different loads.
func TestMigrationModelLearnsTheLoad(t *testing.T) {
	truth := MigrationModel{DataBytes: 24e6, RateBytesPerSec: 4e6, Overhead: time.Second, Partitions: 24, MaxMovesPerNode: 4,
		PerMove: 500 * time.Millisecond, UserBytesPerOp: 2000}
	if fast, slow := truth.DurationAt(2, 3, 0), truth.DurationAt(2, 3, 1600); slow <= fast {
		t.Fatalf("2 → 3 takes %v at no load and %v under load: load should slow it", fast, slow)
	}
	// The controller starts with the link's rate and no idea of the clients' bytes.
	start := truth
	start.RateBytesPerSec, start.UserBytesPerOp = 8e6, 0
	c, err := New(Options{Period: time.Second, Season: 4, CapacityPerNode: 1000, MinNodes: 1, MaxNodes: 10, Model: start})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		n, m int
		load float64
	}{{2, 3, 400}, {3, 4, 1800}, {2, 4, 900}, {3, 5, 2400}} {
		c.ObserveMigration(a.n, a.m, truth.DurationAt(a.n, a.m, a.load), a.load)
	}
	for _, load := range []float64{200, 1200, 2000} {
		got, want := c.Model().DurationAt(2, 3, load), truth.DurationAt(2, 3, load)
		if d := math.Abs(float64(got-want)) / float64(want); d > 0.05 {
			t.Errorf("at %.0f ops/s: predicted %v, real %v (%.0f%% off)", load, got, want, 100*d)
		}
	}
}

// Learn fills the predictor from history: the first decision is already proactive.
func TestLearnWarmsThePredictor(t *testing.T) {
	c, err := New(Options{Period: time.Second, Season: 4, CapacityPerNode: 100, MinNodes: 1, MaxNodes: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		c.Learn([]float64{100, 200, 300, 200}[i%4])
	}
	if d := c.Step(100, 2); d.Mode == ModeReactive && strings.Contains(d.Reason, "learning") {
		t.Fatalf("after two seasons of history the controller is still learning: %+v", d)
	}
}

// Scale-ins and scale-outs are learnt apart: on the emulated cluster a decommission of one node
// takes about twice a join of one (its one outbound bucket against the joiner's many sources).
func TestMigrationModelScaleInApart(t *testing.T) {
	c, err := New(Options{Period: time.Second, Season: 4, CapacityPerNode: 1000, MinNodes: 1, MaxNodes: 10,
		Model: MigrationModel{DataBytes: 24e6, RateBytesPerSec: 4e6, Partitions: 24, MaxMovesPerNode: 4, PerMove: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	c.ObserveMigration(3, 4, 4*time.Second, 0)
	c.ObserveMigration(4, 3, 8*time.Second, 0)
	if got := c.Model().Duration(3, 4); math.Abs(got.Seconds()-4) > 0.4 {
		t.Errorf("3 → 4 predicted %v after one of 4 s", got)
	}
	if got := c.Model().Duration(4, 3); math.Abs(got.Seconds()-8) > 0.8 {
		t.Errorf("4 → 3 predicted %v after one of 8 s", got)
	}
}
