package sdur

import (
	"testing"
	"time"
)

// TestLagEstimatorRetunes: globals whose other partition's vote comes 45 ms after this
// replica's delivery lead to a threshold of about 45 ms in ticks, proposed once, and again
// only when the lag moves.
func TestLagEstimatorRetunes(t *testing.T) {
	var l LagEstimator
	now := t0
	for i := range 30 {
		id := TxnID{1, uint64(i + 1)}
		l.Delivered(Vote{Txn: id, Partition: 0, Commit: true, Partitions: []uint32{0, 1}}, now)
		l.Vote(Vote{Txn: id, Partition: 1, Commit: true, Partitions: []uint32{0, 1}}, now.Add(45*time.Millisecond))
		now = now.Add(10 * time.Millisecond)
	}
	th, ok := l.Retune(Threshold{Unit: Entries}, time.Millisecond, 0.75, now)
	if !ok || th.Unit != Ticks || th.K < 45 || th.K > 50 {
		t.Fatalf("retune = %+v, %v: want about 46 ticks of 1 ms", th, ok)
	}
	if _, ok := l.Retune(th, time.Millisecond, 0.75, now.Add(time.Second)); ok {
		t.Fatal("retuned although the lag did not move")
	}
	// A vote that came before the delivery counts as no wait.
	id := TxnID{2, 1}
	l.Vote(Vote{Txn: id, Partition: 1, Commit: true, Partitions: []uint32{0, 1}}, now)
	l.Delivered(Vote{Txn: id, Partition: 0, Commit: true, Partitions: []uint32{0, 1}}, now)
	if l.samples != 31 {
		t.Fatalf("%d samples, want 31", l.samples)
	}
}

// TestDelayEstimator: a partition that delivers 3 ms after submission and one that delivers
// after 48 ms: the first is delayed by about 45 ms, the second not at all.
func TestDelayEstimator(t *testing.T) {
	var d DelayEstimator
	parts := []uint32{0, 1}
	if got := d.Delays(parts); got[0] != 0 || got[1] != 0 {
		t.Fatalf("delays before any estimate: %v", got)
	}
	for i := range 50 {
		id := TxnID{1, uint64(i + 1)}
		start := t0.Add(time.Duration(i) * time.Second)
		delays := d.Delays(parts)
		d.Submitted(id, parts, delays, start)
		d.Observe(id, 0, start.Add(3*time.Millisecond+delays[0]), 0)
		// Partition 1's vote arrives 45 ms after its delivery at 48 ms.
		d.Observe(id, 1, start.Add(93*time.Millisecond+delays[1]), 45*time.Millisecond)
		d.Finish(id)
	}
	got := d.Delays(parts)
	if got[0] < 44*time.Millisecond || got[0] > 46*time.Millisecond || got[1] != 0 {
		t.Fatalf("delays %v: want about [45ms 0]", got)
	}
}
