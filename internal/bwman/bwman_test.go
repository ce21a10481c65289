package bwman

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"
)

// RLS finds the weights of a noisy linear relation, and follows them when they change.
func TestRLSLearnsAndForgets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := NewRLS(3, 0.95)
	truth := func(w []float64, x []float64) float64 { return w[0]*x[0] + w[1]*x[1] + w[2]*x[2] }
	w1, w2 := []float64{1000, 300, 50}, []float64{1000, 600, 50}
	for range 200 {
		x := []float64{1, 100 * rng.Float64(), 1000 * rng.Float64()}
		r.Update(x, truth(w1, x)*(1+0.01*rng.NormFloat64()))
	}
	if got := r.Weights(); math.Abs(got[1]-300) > 15 || math.Abs(got[2]-50) > 2.5 {
		t.Fatalf("weights %v, want about %v", got, w1)
	}
	for range 200 { // the environment changes: the model follows
		x := []float64{1, 100 * rng.Float64(), 1000 * rng.Float64()}
		r.Update(x, truth(w2, x)*(1+0.01*rng.NormFloat64()))
	}
	if got := r.Weights(); math.Abs(got[1]-600) > 30 {
		t.Fatalf("after the change: weights %v, want about %v", got, w2)
	}
}

func newController(t *testing.T, p Policy) *Controller {
	t.Helper()
	c, err := New(Options{LinkBytesPerSec: 10e6, SLOP99: 50 * time.Millisecond, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Work-conserving: without clients the system class gets the link up to the utilisation
// ceiling (80%); with clients it gets that less their need and the headroom, learnt from what
// they used.
func TestControllerShares(t *testing.T) {
	c := newController(t, UserFirst)
	idle := c.Step(Sample{P99: 0})
	if idle.SystemBytesPerSec != 8e6 {
		t.Fatalf("idle: system gets %.0f B/s of 10 MB/s, want 80%%", idle.SystemBytesPerSec)
	}
	var d Decision
	for i := range 30 {
		reads := 1000 + float64(i%5)*100
		d = c.Step(Sample{ReadsPerSec: reads, ReadBytesPerSec: reads * 1000, UserBytesPerSec: reads * 2000, P99: 10 * time.Millisecond})
	}
	// need ≈ 2000 B per read at 1400 reads/s = 2.8 MB/s, headroom 1.5 → system ≈ 3.8 MB/s.
	if d.UserNeedBytesPerSec < 2.7e6 || d.UserNeedBytesPerSec > 2.9e6 || math.Abs(d.SystemBytesPerSec-(8e6-1.5*d.UserNeedBytesPerSec)) > 1 {
		t.Fatalf("decision %+v", d)
	}
	// A load not seen yet: the model extrapolates (more reads, more need).
	if need := c.model.Predict(features(Sample{ReadsPerSec: 2000, ReadBytesPerSec: 2e6})); need < 3.8e6 || need > 4.2e6 {
		t.Fatalf("at 2000 reads/s the predicted need is %.0f B/s, want about 4 MB/s", need)
	}
}

// The guard: a p99 above the SLO halves the system share each period (whatever the model
// says), and it comes back gradually once the p99 is well under.
func TestControllerGuard(t *testing.T) {
	c := newController(t, UserFirst)
	s := Sample{ReadsPerSec: 100, ReadBytesPerSec: 1e5, UserBytesPerSec: 2e5, P99: 10 * time.Millisecond}
	for range 20 {
		c.Step(s)
	}
	base := c.Last().SystemBytesPerSec
	s.P99, s.SystemBytesPerSec = 80*time.Millisecond, 6e6 // the uplink at 62%
	d1 := c.Step(s)
	d2 := c.Step(s)
	if !(d1.SystemBytesPerSec < base*0.51 && d2.SystemBytesPerSec < base*0.26) || !strings.Contains(d2.Reason, "above the SLO") {
		t.Fatalf("base %.0f, then %+v, %+v", base, d1, d2)
	}
	s.P99 = 10 * time.Millisecond
	for range 10 {
		c.Step(s)
	}
	if got := c.Last().SystemBytesPerSec; math.Abs(got-base) > base*0.01 {
		t.Fatalf("the guard did not give back: %.0f, was %.0f", got, base)
	}
	// A broken SLO with no system traffic to blame does not shrink the share.
	s.P99, s.SystemBytesPerSec = 80*time.Millisecond, 0
	if got := c.Step(s).SystemBytesPerSec; math.Abs(got-base) > base*0.01 {
		t.Fatalf("an overload without system traffic halved the share: %.0f, was %.0f", got, base)
	}
}

// Recovery first: while a partition is under-replicated the system class keeps half the link
// even when the clients' p99 is in trouble; user first gives it nothing beyond the minimum.
func TestControllerPolicies(t *testing.T) {
	heavy := Sample{ReadsPerSec: 5000, ReadBytesPerSec: 5e6, UserBytesPerSec: 9e6, P99: 90 * time.Millisecond, Recovering: true}
	rf, uf := newController(t, RecoveryFirst), newController(t, UserFirst)
	for range 5 {
		rf.Step(heavy)
		uf.Step(heavy)
	}
	if got := rf.Last(); got.SystemBytesPerSec != 5e6 || !strings.Contains(got.Reason, "recovery first") {
		t.Fatalf("recovery first: %+v", got)
	}
	if got := uf.Last(); got.SystemBytesPerSec != 5e5 {
		t.Fatalf("user first: %+v, want the minimum (5%% of the link)", got)
	}
}

// The guard blames the system class only when a link was loaded: a slow period on an idle
// link (the CPU's, the disk's) leaves the share alone; the same p99 on a half-loaded downlink
// halves it.
func TestControllerGuardNeedsALoadedLink(t *testing.T) {
	c := newController(t, UserFirst)
	calm := Sample{ReadsPerSec: 100, ReadBytesPerSec: 1e5, UserBytesPerSec: 2e5, SystemBytesPerSec: 1e6, P99: 10 * time.Millisecond}
	for range 10 {
		c.Step(calm)
	}
	base := c.Last().SystemBytesPerSec
	slowIdle := calm
	slowIdle.P99 = 200 * time.Millisecond
	if got := c.Step(slowIdle); got.Guard != 1 || got.SystemBytesPerSec != base {
		t.Fatalf("a slow period on a link at 12%% halved the share: %+v (was %.0f)", got, base)
	}
	slowLoaded := slowIdle
	slowLoaded.ReceivedBytesPerSec = 6e6 // the downlink at 60%
	if got := c.Step(slowLoaded); got.Guard != 0.5 {
		t.Fatalf("a slow period on a loaded downlink did not halve the share: %+v", got)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{SLOP99: time.Millisecond},
		{LinkBytesPerSec: 1e6},
		{LinkBytesPerSec: 1e6, SLOP99: time.Millisecond, Policy: "nobody-first"},
		{LinkBytesPerSec: 1e6, SLOP99: time.Millisecond, Headroom: 0.5},
		{LinkBytesPerSec: 1e6, SLOP99: time.Millisecond, RecoveryShare: 2},
		{LinkBytesPerSec: 1e6, SLOP99: time.Millisecond, MaxUtilization: 1.5},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// Covariance windup: 600 periods in which reads and read bytes move together (one value size)
// leave the other directions unexcited; P stays bounded, and one period at another value size
// moves the prediction by no more than the sample's own error.
func TestRLSNoWindup(t *testing.T) {
	r := NewRLS(3, 0.95)
	for i := range 600 {
		reads := 100 + float64(i%7)
		r.Update([]float64{1, reads, reads * 4096}, reads*4096*1.1)
	}
	if tr := mat.Trace(r.p); tr > maxTraceP*1.0001 {
		t.Fatalf("trace of P %g, bound %g", tr, maxTraceP)
	}
	before := r.Predict([]float64{1, 103, 103 * 4096})
	r.Update([]float64{1, 103, 103 * 2048}, 103*2048*1.1) // half-size values once
	after := r.Predict([]float64{1, 103, 103 * 4096})
	if math.Abs(after-before) > 103*2048*1.1 {
		t.Fatalf("one stray sample swung the prediction from %.0f to %.0f", before, after)
	}
}
