package globlease

import (
	"math/rand/v2"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/placement"
	"meridian/internal/replication/coord"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

type (
	Op      = engine.Op
	Request = engine.Request
	Result  = engine.Result
)

const (
	OpGet        = engine.OpGet
	OpPut        = engine.OpPut
	OpDelete     = engine.OpDelete
	OpScan       = engine.OpScan
	OpMoveMaster = engine.OpMoveMaster
)

// GlobLease's timers, after the coordinator's.
const (
	timerGLLocalDeadline = coord.TimerExtension + iota // a local client request's deadline
	timerGLFwdDeadline                                 // a forwarded request's deadline
)

// Engine is GlobLease on one node: the quorum family's coordinator (failure detector,
// anti-entropy, scans, which read a majority) with GlobLease's masters, leases and master
// table plugged in (coord.Extension). Every get, put, delete and move-master of a globlease
// keyspace goes through GlobLease (globlease.go).
type Engine struct {
	*coord.Core
	gl         *glState // nil until the first request or tick with a placement map
	glCounters Counters
	// rng draws the proposers' back-off (engine.Config.RandSeed: deterministic in the
	// simulator).
	rng *rand.Rand
}

// NewEngine returns node cfg.NodeID's GlobLease engine.
func NewEngine(cfg engine.Config, store engine.Reader) *Engine {
	e := &Engine{rng: rand.New(rand.NewPCG(cfg.RandSeed, uint64(cfg.NodeID)^0x676c6f626c65))}
	e.Core = coord.New(coord.Config{Config: cfg, Protocol: config.ProtocolGlobLease}, store, e)
	return e
}

// Intercept takes every request but scans.
func (c *Engine) Intercept(now time.Time, ks *placement.Keyspace, req Request) bool {
	if req.Op == OpScan {
		return false
	}
	c.glProposeReq(now, ks, req)
	return true
}

// StepExtension takes GlobLease's messages.
func (c *Engine) StepExtension(now time.Time, env *peerpb.Envelope) bool {
	c.glStep(now, env)
	return true
}

// AfterTick runs GlobLease's heartbeats, failover detection, table proposals, lease
// bookkeeping and migrations.
func (c *Engine) AfterTick(now time.Time) { c.glTick(now) }

// Timer fires GlobLease's request deadlines.
func (c *Engine) Timer(kind coord.TimerKind, id uint64) {
	if c.gl == nil {
		return
	}
	switch kind {
	case timerGLLocalDeadline:
		c.glExpireLocal(id)
	case timerGLFwdDeadline:
		c.glExpireFwd(id)
	}
}

// Applied: GlobLease tracks its writes itself.
func (c *Engine) Applied(time.Time, storage.Record, bool) {}

// PlacementChanged brings GlobLease's per-partition state in line with the new map at once
// (glSetup, which also runs lazily on the next input): a replica move's step changes the
// partition's configuration, its leaving replica's and new replica's roles, and drops the
// partitions this node left (gl_move.go). Before the first tick there is no state to change.
func (c *Engine) PlacementChanged(now time.Time, old, m *placement.Map) {
	if c.gl != nil {
		c.glSetup(now)
	}
}

// DefaultLevel is the quorum protocol's (it matters only for scans).
func (c *Engine) DefaultLevel(ks *placement.Keyspace, op Op) config.Level {
	return coord.DefaultLevel(ks.Spec, op)
}
