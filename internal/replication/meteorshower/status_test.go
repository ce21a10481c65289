package meteorshower

import (
	"testing"
	"time"

	"meridian/internal/hlc"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

var t0 = time.Unix(1_800_000_000, 0)

func statuses(envs []*peerpb.Envelope) []*peerpb.Status {
	var out []*peerpb.Status
	for _, e := range envs {
		if s := e.GetStatus(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func v(ms int64) hlc.Version {
	return hlc.Version{WallNanos: t0.Add(time.Duration(ms) * time.Millisecond).UnixNano(), NodeID: 2}
}

// pair builds a sender (node 2) and a receiver (node 1) and makes the receiver's view of the
// sender complete (first status, full status).
func pair(t *testing.T, l int, mutation string) (sender, receiver *Tracker, now time.Time) {
	t.Helper()
	sender = NewTracker(TrackerConfig{Self: 2, Peers: []uint32{1}, Interval: 10 * time.Millisecond, Redundancy: l, MaxClockOffset: 2 * time.Millisecond}, t0)
	receiver = NewTracker(TrackerConfig{Self: 1, Peers: []uint32{2}, Interval: 10 * time.Millisecond, Redundancy: l, MaxClockOffset: 2 * time.Millisecond, Mutation: mutation}, t0)
	now = t0.Add(10 * time.Millisecond)
	st := statuses(sender.Tick(now))
	if len(st) != 1 {
		t.Fatalf("want one status, got %d", len(st))
	}
	reqs := receiver.OnStatus(now, 2, st[0])
	if len(reqs) != 1 || reqs[0].GetFullStatusRequest() == nil {
		t.Fatalf("the first status of an incarnation must ask for a full status, got %v", reqs)
	}
	if ok, _ := receiver.Check(now, "ks", 0, []byte("k"), hlc.Version{}, []uint32{1, 2}, 2, time.Hour, 0); ok {
		t.Fatal("a peer without a full status must not count as a valid status")
	}
	seq, inc := sender.FullStatusBase(1)
	receiver.OnFullStatus(now, 2, &peerpb.FullStatus{Incarnation: inc, BaseSeq: seq, BaseStsUnixNanos: now.UnixNano(), Done: true})
	return sender, receiver, now
}

func TestStatusRedundancyCoversLosses(t *testing.T) {
	sender, receiver, now := pair(t, 3, "")
	sender.Applied("ks", 0, []byte("k"), v(15), []uint32{1})
	var last *peerpb.Status
	for i := range 4 { // statuses 2..5; the receiver loses the first three
		now = now.Add(10 * time.Millisecond)
		st := statuses(sender.Tick(now))[0]
		if i == 3 {
			last = st
		}
	}
	if got := len(last.Redundant); got != 3 {
		t.Fatalf("status carries %d earlier statuses, want l=3", got)
	}
	if reqs := receiver.OnStatus(now, 2, last); len(reqs) != 0 {
		t.Fatalf("a loss within l needs no repair, got %v", reqs)
	}
	if receiver.Stats().Gaps != 0 {
		t.Fatal("gap counted")
	}
	// The lost status 2 reported k@15 through redundancy: a read of k with an older local
	// version must not be served; with k@15 local it may.
	ok, valid := receiver.Check(now, "ks", 0, []byte("k"), v(10), []uint32{1, 2}, 2, time.Hour, 0)
	if ok || valid != 2 {
		t.Fatalf("stale local served (ok=%v valid=%d)", ok, valid)
	}
	if ok, _ := receiver.Check(now, "ks", 0, []byte("k"), v(15), []uint32{1, 2}, 2, time.Hour, 0); !ok {
		t.Fatal("up-to-date local not served")
	}
}

func TestGapBeyondRedundancyIsRepaired(t *testing.T) {
	for _, mutation := range []string{"", "gap-ignored"} {
		sender, receiver, now := pair(t, 1, mutation)
		sender.Applied("ks", 0, []byte("k"), v(15), []uint32{1})
		var last *peerpb.Status
		for range 5 { // 2..6 lost but the last
			now = now.Add(10 * time.Millisecond)
			last = statuses(sender.Tick(now))[0]
		}
		reqs := receiver.OnStatus(now, 2, last)
		// Locally the key is absent; the peer wrote k@15 in a status that was lost.
		ok, _ := receiver.Check(now, "ks", 0, []byte("k"), hlc.Version{}, []uint32{1, 2}, 2, time.Hour, 0)
		if mutation == "" {
			if len(reqs) != 1 || reqs[0].GetFullStatusRequest() == nil || receiver.Stats().Gaps != 1 {
				t.Fatalf("a gap beyond l must ask for a full status: %v", reqs)
			}
			if ok {
				t.Fatal("served from a peer whose statuses have a gap")
			}
		} else if !ok {
			t.Fatal("the gap-ignored mutation should (wrongly) serve: the test cannot tell it apart")
		}
	}
}

func TestValidityFollowsTheta(t *testing.T) {
	sender, receiver, now := pair(t, 3, "")
	now = now.Add(10 * time.Millisecond)
	sts := now
	receiver.OnStatus(now, 2, statuses(sender.Tick(now))[0])
	read := sts.Add(50 * time.Millisecond)
	if ok, valid := receiver.Check(read, "ks", 0, []byte("k"), hlc.Version{}, []uint32{1, 2}, 2, 0, 0); ok || valid != 1 {
		t.Fatalf("θ=0: a status sent before the read must not be valid (ok=%v valid=%d)", ok, valid)
	}
	if ok, _ := receiver.Check(read, "ks", 0, []byte("k"), hlc.Version{}, []uint32{1, 2}, 2, 60*time.Millisecond, 0); !ok {
		t.Fatal("θ=60ms: a status 50ms old must be valid")
	}
	if ok, _ := receiver.Check(read, "ks", 0, []byte("k"), hlc.Version{}, []uint32{1, 2}, 2, 60*time.Millisecond, read.UnixNano()); ok {
		t.Fatal("a status sent before the session's floor must not be valid")
	}
}

func TestStabilityWaitsForPeersToHoldTheValue(t *testing.T) {
	sender, receiver, now := pair(t, 3, "")
	now = now.Add(10 * time.Millisecond)
	receiver.OnStatus(now, 2, statuses(sender.Tick(now))[0])
	// The local replica holds k@20 that no peer reported yet: not stable.
	if ok, _ := receiver.Check(now, "ks", 0, []byte("k"), v(20), []uint32{1, 2}, 2, time.Hour, 0); ok {
		t.Fatal("served a value only the local replica holds")
	}
	sender.Applied("ks", 0, []byte("k"), v(20), []uint32{1})
	now = now.Add(10 * time.Millisecond)
	receiver.OnStatus(now, 2, statuses(sender.Tick(now))[0])
	if ok, _ := receiver.Check(now.Add(-5*time.Millisecond), "ks", 0, []byte("k"), v(20), []uint32{1, 2}, 2, time.Hour, 0); !ok {
		t.Fatal("not served once the peer reported the value")
	}
}

func TestNewIncarnationNeedsAFullStatus(t *testing.T) {
	_, receiver, now := pair(t, 3, "")
	restarted := NewTracker(TrackerConfig{Self: 2, Peers: []uint32{1}, Interval: 10 * time.Millisecond, Redundancy: 3}, t0.Add(time.Second))
	now = now.Add(time.Second)
	reqs := receiver.OnStatus(now, 2, statuses(restarted.Tick(now))[0])
	if len(reqs) != 1 || reqs[0].GetFullStatusRequest() == nil {
		t.Fatal("a restarted peer must be re-based with a full status")
	}
	if ok, _ := receiver.Check(now, "ks", 0, []byte("k"), hlc.Version{}, []uint32{1, 2}, 2, time.Hour, 0); ok {
		t.Fatal("served from a restarted peer before its full status")
	}
}

func TestNewestAtOrBeforeIgnoresLaterWrites(t *testing.T) {
	in := &peerIn{versions: map[keyID][]hlc.Version{}}
	id := makeKeyID("ks", []byte("k"))
	for _, ms := range []int64{10, 30, 20, 30} {
		in.note(id, v(ms))
	}
	if got, ok := in.newestAtOrBefore(id, v(25).WallNanos); !ok || got != v(20) {
		t.Fatalf("newest ≤ 25ms = %v, %v", got, ok)
	}
	for ms := int64(40); ms < 100; ms += 10 {
		in.note(id, v(ms))
	}
	if _, ok := in.newestAtOrBefore(id, v(25).WallNanos); ok {
		t.Fatal("versions before the kept window must be unknown, not absent")
	}
}

func TestClockServiceFlagsOffsetsBeyondEpsilon(t *testing.T) {
	for _, mutation := range []string{"", "clock-no-fallback"} {
		tr := NewTracker(TrackerConfig{Self: 1, Peers: []uint32{2}, MaxClockOffset: 2 * time.Millisecond, Mutation: mutation, PeerRTT: map[uint32]time.Duration{2: 10 * time.Millisecond}}, t0)
		pings := tr.Tick(t0)
		var t1 int64
		for _, e := range pings {
			if p := e.GetClockPing(); p != nil {
				t1 = p.T1UnixNanos
			}
		}
		// The peer's clock is 30ms ahead; the round trip takes 10ms.
		tr.OnClockPong(t0.Add(10*time.Millisecond), 2, &peerpb.ClockPong{T1UnixNanos: t1, T2UnixNanos: t0.Add(35 * time.Millisecond).UnixNano()})
		if got := tr.MaxMeasuredOffset(); got < 29*time.Millisecond || got > 31*time.Millisecond {
			t.Fatalf("measured offset %v, want ~30ms", got)
		}
		if safe := tr.ClockSafe(); safe != (mutation != "") {
			t.Fatalf("mutation %q: ClockSafe = %v", mutation, safe)
		}
	}
}

func TestFullStatusEntriesRoundTrip(t *testing.T) {
	e := &peerpb.StatusEntry{Keyspace: "ks", Partition: 3, Key: []byte("k"), Wts: wire.VersionToPB(v(7))}
	in := &peerIn{versions: map[keyID][]hlc.Version{}}
	in.note(makeKeyID(e.Keyspace, e.Key), wire.VersionFromPB(e.Wts))
	if got, ok := in.newestAtOrBefore(makeKeyID("ks", []byte("k")), v(7).WallNanos); !ok || got != v(7) {
		t.Fatal("entry lost")
	}
	// Keyspace names never hold a zero byte (config.ValidateKeyspace), so the separator
	// keeps keyspaces apart.
	if _, ok := in.versions[makeKeyID("ks2", []byte("k"))]; ok {
		t.Fatal("keyspaces bleed into each other")
	}
	if _, ok := in.versions[makeKeyID("k", []byte("sk"))]; ok {
		t.Fatal("keyspace and key bleed into each other")
	}
}
