// Package bwman is Meridian's BwMan (liu-thesis abstract, 1.3.2, 1.4 "BwMan", 1.5, 3.2.4): a
// per-node arbiter of network bandwidth between two classes of traffic — user (client requests
// and their replication) and system (data movement: bootstrap, decommission, re-replication,
// rebalancing, anti-entropy) — so that data migration does not break the client latency SLO,
// and runs as fast as clients leave room for.
//
// The thesis gives a summary only (the paper is not available): a model maps the client
// workload to the bandwidth it needs, trained offline on profiled points; the rest of the
// node's bandwidth goes to the system class; "dedicated bandwidth allocation to user-centric
// workloads guarantees predictable performance", and "dynamic allocation to system-centric
// workloads allows maintenance tasks to finish as fast as possible". docs/elasticity.md
// ("BwMan") names every decision taken here where it is silent; in short:
//
//   - The model is learnt online, by recursive least squares with forgetting (the thesis'
//     limitation 1.5: "trained offline, impossible to adapt"), from the control periods in which
//     the SLO held: the user bytes per second observed then, as a linear function of the
//     client read and write rates and their bytes.
//   - The system class gets 80% of the link minus the predicted user need times a headroom; a feedback
//     guard on the measured p99 halves that when the SLO breaks (the model may be wrong or
//     stale) and gives it back gradually once the p99 is well under.
//   - Policy when the link cannot serve both: user first (default) — or recovery first while a
//     partition is under-replicated: then the system class keeps at least RecoveryShare of the
//     link whatever the guard says, since a second failure would lose data.
//   - Work-conserving: with no clients the system class gets the link up to a utilisation
//     ceiling (MaxUtilization, 80%), which keeps the FIFO queue every message crosses short.
//
// The Controller is a sans-IO state machine: the runtime feeds it one Sample per control period
// and applies its Decision to a token bucket on the system class (internal/runtime/node).
package bwman

import (
	"fmt"
	"math"
	"time"
)

// Mode is how a node shapes its system traffic.
type Mode string

const (
	// ModeOff: no shaping (migration as fast as the transport takes it).
	ModeOff Mode = "off"
	// ModeStatic: a fixed cap on the system class (CockroachDB's, Cassandra's and Scylla's way).
	ModeStatic Mode = "static"
	// ModeAuto: BwMan.
	ModeAuto Mode = "auto"
)

// Policy decides who yields when the link cannot serve both classes.
type Policy string

const (
	// UserFirst: clients keep their need; the system class gets what is left.
	UserFirst Policy = "user-first"
	// RecoveryFirst: as UserFirst, but while a partition is under-replicated the system class
	// keeps at least RecoveryShare of the link.
	RecoveryFirst Policy = "recovery-first"
)

// Options configure a Controller. Zero fields take EnsureDefaults' values.
type Options struct {
	// LinkBytesPerSec is the node's network bandwidth (required for ModeAuto).
	LinkBytesPerSec float64
	// SLOP99 is the client latency SLO: the 99th percentile of a control period's requests.
	SLOP99 time.Duration
	Policy Policy
	// Headroom multiplies the predicted user need (bursts within a period). Default 1.5.
	Headroom float64
	// MaxUtilization caps the link's planned load (user need with headroom plus the system
	// class). A FIFO link's queue, and with it every client message's wait, grows as
	// ρ/(1−ρ): planning the link full would leave clients queueing behind chunks whenever
	// their traffic bursts above the prediction. Default 0.8.
	MaxUtilization float64
	// MinSystemBytesPerSec: the system class never gets less (migration always progresses:
	// a re-replication starved by a guard that blames it for every slow period leaves data
	// under-replicated indefinitely). Default 5% of the link.
	MinSystemBytesPerSec float64
	// RecoveryShare is the system class's floor under RecoveryFirst while a partition is
	// under-replicated. Default 0.5.
	RecoveryShare float64
	// Forgetting is the model's forgetting factor (recent periods weigh more). Default 0.95.
	Forgetting float64
}

// EnsureDefaults fills zero fields.
func (o Options) EnsureDefaults() Options {
	if o.Policy == "" {
		o.Policy = UserFirst
	}
	if o.Headroom == 0 {
		o.Headroom = 1.5
	}
	if o.MaxUtilization == 0 {
		o.MaxUtilization = 0.8
	}
	if o.MinSystemBytesPerSec == 0 {
		o.MinSystemBytesPerSec = o.LinkBytesPerSec / 20
	}
	if o.RecoveryShare == 0 {
		o.RecoveryShare = 0.5
	}
	if o.Forgetting == 0 {
		o.Forgetting = 0.95
	}
	return o
}

// Validate refuses options the controller cannot work with.
func (o Options) Validate() error {
	switch {
	case !(o.LinkBytesPerSec > 0) || math.IsInf(o.LinkBytesPerSec, 0):
		return fmt.Errorf("bwman: link bandwidth %v bytes/s: must be positive", o.LinkBytesPerSec)
	case o.SLOP99 <= 0:
		return fmt.Errorf("bwman: p99 SLO %v: must be positive", o.SLOP99)
	case o.Policy != UserFirst && o.Policy != RecoveryFirst:
		return fmt.Errorf("bwman: policy %q: want %s or %s", o.Policy, UserFirst, RecoveryFirst)
	case o.Headroom < 1 || o.Headroom > 10:
		return fmt.Errorf("bwman: headroom %v: want 1..10", o.Headroom)
	case !(o.MaxUtilization > 0 && o.MaxUtilization <= 1):
		return fmt.Errorf("bwman: maximum link utilisation %v: want (0, 1]", o.MaxUtilization)
	case o.MinSystemBytesPerSec < 0 || o.MinSystemBytesPerSec > o.LinkBytesPerSec:
		return fmt.Errorf("bwman: minimum system rate %v: want 0..the link (%v)", o.MinSystemBytesPerSec, o.LinkBytesPerSec)
	case o.RecoveryShare < 0 || o.RecoveryShare > 1:
		return fmt.Errorf("bwman: recovery share %v: want 0..1", o.RecoveryShare)
	case o.Forgetting <= 0.5 || o.Forgetting > 1:
		return fmt.Errorf("bwman: forgetting factor %v: want (0.5, 1]", o.Forgetting)
	}
	return nil
}

// Sample is one control period at a node.
type Sample struct {
	// Client workload at the node: requests per second and their value bytes per second.
	ReadsPerSec, WritesPerSec         float64
	ReadBytesPerSec, WriteBytesPerSec float64
	// UserBytesPerSec and SystemBytesPerSec are what the node sent in each class;
	// ReceivedBytesPerSec what it received (both classes: the downlink's load).
	UserBytesPerSec, SystemBytesPerSec float64
	ReceivedBytesPerSec                float64
	// P99 of the client requests the node served in the period (0: none).
	P99 time.Duration
	// Recovering: a partition the node sends data for is under-replicated (a replica is
	// being re-created after a node died).
	Recovering bool
}

// Decision is the system class's rate for the next period, and why.
type Decision struct {
	SystemBytesPerSec float64
	// UserNeedBytesPerSec is the model's prediction of the clients' need (before headroom).
	UserNeedBytesPerSec float64
	// Guard is the feedback guard's factor (1: no SLO trouble).
	Guard  float64
	Reason string
}

// Controller is BwMan at one node.
type Controller struct {
	opts  Options
	model *RLS
	guard float64
	last  Decision
}

// New returns a controller.
func New(o Options) (*Controller, error) {
	o = o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Controller{opts: o, model: NewRLS(len(features(Sample{})), o.Forgetting), guard: 1}, nil
}

// Options returns the controller's options (defaults filled in).
func (c *Controller) Options() Options { return c.opts }

// features are the model's inputs: a constant (the replication and control traffic that does
// not scale with requests), the request rates and their bytes.
func features(s Sample) []float64 {
	return []float64{1, s.ReadsPerSec, s.WritesPerSec, s.ReadBytesPerSec, s.WriteBytesPerSec}
}

// Step takes one period's sample and decides the next period's system rate.
func (c *Controller) Step(s Sample) Decision {
	o := c.opts
	x := features(s)
	slo := s.P99 <= o.SLOP99
	// Learn the clients' need from the periods in which the SLO held: what they used then
	// was enough.
	if slo && s.UserBytesPerSec >= 0 {
		c.model.Update(x, s.UserBytesPerSec)
	}
	need := s.UserBytesPerSec
	if c.model.Trained() {
		// The model smooths one period's noise and extrapolates to loads not seen yet; never
		// below what the clients just used.
		need = max(c.model.Predict(x), s.UserBytesPerSec)
	}
	// The guard: the measured p99 overrules the model — when the network can be what broke
	// it: the node sent system traffic and one of its links was at least half loaded. A slow
	// period on an idle link is the CPU's or the disk's (or a peer's), and throttling data
	// movement would only make it last longer.
	reason := ""
	linkLoad := max(s.UserBytesPerSec+s.SystemBytesPerSec, s.ReceivedBytesPerSec)
	switch {
	case s.P99 > o.SLOP99 && s.SystemBytesPerSec > o.MinSystemBytesPerSec && linkLoad >= o.LinkBytesPerSec/2:
		c.guard = max(c.guard/2, 1.0/64)
		reason = fmt.Sprintf("p99 %v above the SLO %v: system share halved", s.P99.Round(time.Microsecond), o.SLOP99)
	case s.P99 < o.SLOP99*8/10 || s.SystemBytesPerSec <= o.MinSystemBytesPerSec || linkLoad < o.LinkBytesPerSec/2:
		// Well within the SLO, or the SLO broke with no system traffic or no loaded link
		// here to blame (an overload, or another node's migration): the share grows back.
		c.guard = min(c.guard*1.25, 1)
	}
	allowance := o.MaxUtilization*o.LinkBytesPerSec - o.Headroom*need
	rate := max(allowance, 0) * c.guard
	if reason == "" {
		reason = fmt.Sprintf("%.0f%% of link %.0f B/s − %.1f × user need %.0f B/s", 100*o.MaxUtilization, o.LinkBytesPerSec, o.Headroom, need)
		if c.guard < 1 {
			reason += fmt.Sprintf(", guard %.2f", c.guard)
		}
	}
	if o.Policy == RecoveryFirst && s.Recovering && rate < o.RecoveryShare*o.LinkBytesPerSec {
		rate = o.RecoveryShare * o.LinkBytesPerSec
		reason = fmt.Sprintf("recovery first: a partition is under-replicated, the system class keeps %.0f%% of the link", 100*o.RecoveryShare)
	}
	rate = min(max(rate, o.MinSystemBytesPerSec), o.LinkBytesPerSec)
	c.last = Decision{SystemBytesPerSec: rate, UserNeedBytesPerSec: need, Guard: c.guard, Reason: reason}
	return c.last
}

// Last returns the last decision.
func (c *Controller) Last() Decision { return c.last }
