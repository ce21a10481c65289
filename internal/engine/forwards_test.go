package engine

import (
	"testing"
	"time"
)

// A forward is taken once; a duplicate within ForwardMemory is refused, and one after it (the
// origin's IDs are not reused that soon) is forgotten.
func TestForwardsSeenOnce(t *testing.T) {
	var f Forwards
	t0 := time.Unix(1000, 0)
	k := ForwardKey{Node: 2, ID: 7}
	if f.Seen(t0, k) {
		t.Fatal("a first forward was taken for a duplicate")
	}
	if !f.Seen(t0.Add(time.Second), k) {
		t.Fatal("a duplicate was taken")
	}
	if f.Seen(t0, ForwardKey{Node: 3, ID: 7}) {
		t.Fatal("another node's request with the same ID was taken for a duplicate")
	}
	if f.Seen(t0.Add(ForwardMemory+time.Minute), k) {
		t.Fatal("a forward was remembered past ForwardMemory")
	}
}
