package coord

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"meridian/internal/config"
)

// liveness is a simple timeout failure detector: a peer is down when nothing has been heard
// from it for FailureTimeout. Every message counts; idle links carry heartbeats. Peers start
// alive, so a cluster that is starting up does not refuse requests; requests to a peer that
// never answers time out instead.
type liveness struct {
	self      uint32
	peers     []uint32 // sorted, excludes self
	lastHeard map[uint32]time.Time
	lastSent  map[uint32]time.Time
	down      map[uint32]bool
	// downSnap is a copy of down published at each change, for readers off the event loop
	// (metrics scrapes): the maps above belong to the loop.
	downSnap atomic.Pointer[map[uint32]bool]
}

// publish makes the current down set what aliveSnapshot reads.
func (l *liveness) publish() {
	m := maps.Clone(l.down)
	l.downSnap.Store(&m)
}

// aliveSnapshot is alive as of the last change, safe from any goroutine.
func (l *liveness) aliveSnapshot(n uint32) bool {
	if n == l.self {
		return true
	}
	m := l.downSnap.Load()
	return m == nil || !(*m)[n]
}

func (l *liveness) init(self uint32, nodes []config.Node) {
	l.self = self
	l.lastHeard = map[uint32]time.Time{}
	l.lastSent = map[uint32]time.Time{}
	l.down = map[uint32]bool{}
	for _, n := range nodes {
		if n.ID != self {
			l.peers = append(l.peers, n.ID)
		}
	}
	slices.Sort(l.peers)
}

// setPeers makes nodes the peers (members joined or left); what is known of those that stay
// is kept.
func (l *liveness) setPeers(nodes []config.Node) {
	l.peers = l.peers[:0]
	for _, n := range nodes {
		if n.ID != l.self {
			l.peers = append(l.peers, n.ID)
		}
	}
	slices.Sort(l.peers)
}

func (l *liveness) alive(n uint32) bool { return n == l.self || !l.down[n] }

func (l *liveness) heard(n uint32, now time.Time) {
	l.lastHeard[n] = now
	if l.down[n] {
		delete(l.down, n)
		l.publish()
	}
}

func (l *liveness) sent(n uint32, now time.Time) { l.lastSent[n] = now }

// update marks peers down whose silence exceeds timeout. A peer never heard from is measured
// from the first update (the node's start).
func (l *liveness) update(now time.Time, timeout time.Duration) {
	for _, p := range l.peers {
		last, ok := l.lastHeard[p]
		if !ok {
			l.lastHeard[p] = now
			continue
		}
		if now.Sub(last) > timeout && !l.down[p] {
			l.down[p] = true
			l.publish()
		}
	}
}

// heartbeatsDue returns the peers that have not been sent anything for interval.
func (l *liveness) heartbeatsDue(now time.Time, interval time.Duration) []uint32 {
	var out []uint32
	for _, p := range l.peers {
		if now.Sub(l.lastSent[p]) >= interval {
			out = append(out, p)
		}
	}
	return out
}
