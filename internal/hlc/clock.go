package hlc

import (
	"sync"
	"sync/atomic"
	"time"
)

// PhysicalClock is the node's wall clock. Protocol cores never call it: the runtime reads it
// and passes the time in (sans-IO), so the simulator can substitute virtual time.
type PhysicalClock interface {
	Now() time.Time
}

// SystemClock is the machine clock shifted by a configurable offset, so tests and the lab can
// run nodes whose clocks disagree by a known amount (DESIGN.md section 4, "Clock").
type SystemClock struct {
	offsetNanos atomic.Int64
	// drift, when set, makes the clock run fast (ppm > 0) or slow by ppm parts per million
	// since drift.since: the lab's nemesis drifts a node's clock past ε.
	drift   atomic.Pointer[clockDrift]
	writeMu sync.Mutex // serialises SetOffset and SetDrift (Now takes no lock)
}

type clockDrift struct {
	since time.Time
	ppm   float64
}

// NewSystemClock returns the machine clock shifted by offset.
func NewSystemClock(offset time.Duration) *SystemClock {
	c := &SystemClock{}
	c.offsetNanos.Store(int64(offset))
	return c
}

// Now returns the machine time plus the offset (and the drift accumulated so far).
func (c *SystemClock) Now() time.Time {
	t := time.Now()
	return t.Add(c.offsetAt(t))
}

func (c *SystemClock) offsetAt(t time.Time) time.Duration {
	off := time.Duration(c.offsetNanos.Load())
	if d := c.drift.Load(); d != nil {
		off += time.Duration(float64(t.Sub(d.since)) * d.ppm / 1e6)
	}
	return off
}

// SetOffset changes the offset at run time (lab nemesis, tests) and stops any drift.
func (c *SystemClock) SetOffset(offset time.Duration) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.drift.Store(nil)
	c.offsetNanos.Store(int64(offset))
}

// SetDrift makes the clock gain ppm parts per million from now on (negative: lose), keeping
// the offset it has reached; 0 stops drifting.
func (c *SystemClock) SetDrift(ppm float64) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	now := time.Now()
	c.offsetNanos.Store(int64(c.offsetAt(now)))
	if ppm == 0 {
		c.drift.Store(nil)
		return
	}
	c.drift.Store(&clockDrift{since: now, ppm: ppm})
}

// Offset returns the current offset from the machine clock, drift included.
func (c *SystemClock) Offset() time.Duration { return c.offsetAt(time.Now()) }

// DriftPPM returns the drift rate (0: none).
func (c *SystemClock) DriftPPM() float64 {
	if d := c.drift.Load(); d != nil {
		return d.ppm
	}
	return 0
}

// HLC is a hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", 2014): its wall
// component never runs behind the physical clock nor behind any version it has observed, and
// the logical counter orders events within one wall value. It is not safe for concurrent use:
// it lives inside one protocol core, driven by the core's event loop.
type HLC struct {
	nodeID  uint32
	last    Version
	maxSkew time.Duration // observed remote versions further ahead than this are not adopted
}

// NewHLC returns an HLC stamping versions with nodeID. Remote timestamps more than maxSkew
// ahead of the local physical clock are not adopted (they still order correctly as versions,
// but must not drag this clock into the future); maxSkew <= 0 disables the check.
func NewHLC(nodeID uint32, maxSkew time.Duration) *HLC {
	return &HLC{nodeID: nodeID, maxSkew: maxSkew}
}

// Now returns a new version strictly greater than every version this clock has issued or
// observed, given the current physical time.
func (c *HLC) Now(physical time.Time) Version {
	pt := physical.UnixNano()
	if pt > c.last.WallNanos {
		c.last = Version{WallNanos: pt, Logical: 0, NodeID: c.nodeID}
	} else {
		c.last = Version{WallNanos: c.last.WallNanos, Logical: c.last.Logical + 1, NodeID: c.nodeID}
	}
	return c.last
}

// Observe folds a version seen in a message into the clock, so that versions this node
// issues later are newer than it (the HLC receive rule). It reports false, and ignores the
// version, when the version is more than maxSkew ahead of physical time.
func (c *HLC) Observe(physical time.Time, remote Version) bool {
	if c.maxSkew > 0 && remote.WallNanos > physical.UnixNano()+int64(c.maxSkew) {
		return false
	}
	if remote.WallNanos > c.last.WallNanos ||
		(remote.WallNanos == c.last.WallNanos && remote.Logical > c.last.Logical) {
		c.last = Version{WallNanos: remote.WallNanos, Logical: remote.Logical, NodeID: c.nodeID}
	}
	return true
}

// Last returns the last version issued or observed.
func (c *HLC) Last() Version { return c.last }
