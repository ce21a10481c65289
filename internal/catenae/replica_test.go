package catenae

import (
	"strings"
	"testing"
	"time"
)

// net is a synchronous test network: messages are delivered in order at the next pump.
type testNet struct {
	reps map[uint32]*Replica
	outs map[uint32][]Outcome
	drop func(from uint32, m Message) bool
}

func newTestNet(t *testing.T, opts Options) *testNet {
	t.Helper()
	n := &testNet{reps: map[uint32]*Replica{}, outs: map[uint32][]Outcome{}}
	for _, dc := range []uint32{1, 2, 3} {
		r, err := NewReplica(dc, []uint32{1, 2, 3}, opts)
		if err != nil {
			t.Fatal(err)
		}
		n.reps[dc] = r
	}
	return n
}

// pump delivers every message until none is left (bounded).
func (n *testNet) pump(now time.Time) {
	for range 100 {
		moved := false
		for _, dc := range []uint32{1, 2, 3} {
			r := n.reps[dc]
			for r.HasReady() {
				rd := r.Ready()
				n.outs[dc] = append(n.outs[dc], rd.Outcomes...)
				for _, m := range rd.Messages {
					if n.drop != nil && n.drop(dc, m) {
						continue
					}
					n.reps[m.To].Step(now, m)
					moved = true
				}
			}
		}
		if !moved {
			return
		}
	}
}

func (n *testNet) tick(now time.Time) {
	for _, dc := range []uint32{1, 2, 3} {
		n.reps[dc].Tick(now)
	}
	n.pump(now)
}

var t0 = time.Unix(0, 0).Add(time.Second)

// Two conflicting transactions from two data centers commit in the chain order, alike
// everywhere: the later-stamped one reads the earlier one's write.
func TestCommitInChainOrder(t *testing.T) {
	n := newTestNet(t, Options{EpochLength: 10 * time.Millisecond, Start: 99})
	id1, err := n.reps[1].Submit(t0.Add(time.Millisecond), Proc{Ops: []Op{{Kind: OpAppend, Key: "x", Delta: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := n.reps[2].Submit(t0.Add(2*time.Millisecond), Proc{Ops: []Op{{Kind: OpRead, Key: "x"}, {Kind: OpAppend, Key: "x", Delta: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	for ms := 3; ms < 100; ms++ {
		n.tick(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	if len(n.outs[1]) != 1 || n.outs[1][0].Txn != id1 || !n.outs[1][0].Committed {
		t.Fatalf("data center 1 outcomes: %+v", n.outs[1])
	}
	if len(n.outs[2]) != 1 || n.outs[2][0].Txn != id2 {
		t.Fatalf("data center 2 outcomes: %+v", n.outs[2])
	}
	if got := n.outs[2][0].Result.Reads[0]; len(got) != 8 {
		t.Fatalf("the later transaction read %v, want the earlier one's append", got)
	}
	for _, dc := range []uint32{2, 3} {
		if n.reps[dc].StateDigest(n.reps[dc].Closed()) != n.reps[1].StateDigest(n.reps[1].Closed()) {
			t.Errorf("data center %d's state differs", dc)
		}
	}
}

// An epoch does not close while a data center's message is missing; redundancy in later
// messages fills the gap.
func TestEpochWaitsForEveryDataCenter(t *testing.T) {
	n := newTestNet(t, Options{EpochLength: 10 * time.Millisecond, Start: 99})
	lost := 0
	n.drop = func(from uint32, m Message) bool {
		if from == 3 && m.Epoch != nil && m.Epoch.Upto == 100 && lost < 2 {
			lost++
			return true // data center 3's first message is lost
		}
		return false
	}
	if _, err := n.reps[1].Submit(t0, Proc{Ops: []Op{{Kind: OpWrite, Key: "k", Value: []byte("v")}}}); err != nil {
		t.Fatal(err)
	}
	n.tick(t0.Add(10*time.Millisecond + time.Microsecond)) // epoch 100 ends
	if c := n.reps[1].Closed(); c >= 100 {
		t.Fatalf("epoch 100 closed at data center 1 without data center 3's input (closed %d)", c)
	}
	n.tick(t0.Add(20*time.Millisecond + time.Microsecond)) // epoch 101: repeats 100
	if c := n.reps[1].Closed(); c < 100 {
		t.Fatalf("epoch 100 still open after the redundant message (closed %d)", c)
	}
}

// A replica that executes a transaction wrongly is outvoted, repairs itself, and converges;
// its client's transaction that read the wrong value waits for the repair.
func TestFaultyExecutionRepaired(t *testing.T) {
	faulty := true
	n := newTestNet(t, Options{EpochLength: 10 * time.Millisecond, Start: 99})
	n.reps[3].opts.Corrupt = func(TxnID) bool { f := faulty; faulty = false; return f }
	if _, err := n.reps[1].Submit(t0, Proc{Ops: []Op{{Kind: OpWrite, Key: "k", Value: []byte("v1")}}}); err != nil {
		t.Fatal(err)
	}
	for ms := 1; ms < 60; ms++ {
		n.tick(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	if n.reps[3].Stats().Repairs == 0 {
		t.Fatal("the faulty replica did not repair")
	}
	id, _ := n.reps[3].Submit(t0.Add(60*time.Millisecond), Proc{Ops: []Op{{Kind: OpRead, Key: "k"}}})
	for ms := 61; ms < 150; ms++ {
		n.tick(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	outs := n.outs[3]
	if len(outs) != 1 || outs[0].Txn != id || string(outs[0].Result.Reads[0]) != "v1" {
		t.Fatalf("read at the repaired replica: %+v", outs)
	}
}

func TestRefusesNonChainable(t *testing.T) {
	r, _ := NewReplica(1, []uint32{1}, Options{})
	for _, p := range []Proc{{}, {Ops: []Op{{Kind: OpRead}}}, {Ops: []Op{{Kind: 9, Key: "k"}}}} {
		if _, err := r.Submit(t0, p); err == nil || !strings.Contains(err.Error(), "catenae") {
			t.Errorf("procedure %+v accepted (%v)", p, err)
		}
	}
}

// Optimistic read-modify-writes: a transaction that read a key at the validated prefix commits
// with OpExpect only if nothing overwrote the key since; the loser aborts alike everywhere
// and writes nothing.
func TestExpectAbortsOverwrittenReads(t *testing.T) {
	n := newTestNet(t, Options{EpochLength: 10 * time.Millisecond, Start: 99})
	n.reps[1].Submit(t0, Proc{Ops: []Op{{Kind: OpWrite, Key: "x", Value: []byte("0")}}})
	for ms := 1; ms < 60; ms++ {
		n.tick(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	vals, vers, _ := n.reps[2].ReadOnly([]string{"x"})
	if string(vals[0]) != "0" || vers[0] == 0 {
		t.Fatalf("read-only read: %q at version %d", vals[0], vers[0])
	}
	for _, dc := range []uint32{1, 3} {
		if _, v2, _ := n.reps[dc].ReadOnly([]string{"x"}); v2[0] != vers[0] {
			t.Fatalf("data center %d reads version %d, data center 2 %d: versions differ", dc, v2[0], vers[0])
		}
	}
	now := t0.Add(60 * time.Millisecond)
	a, _ := n.reps[2].Submit(now, Proc{Ops: []Op{{Kind: OpExpect, Key: "x", Version: vers[0]}, {Kind: OpWrite, Key: "x", Value: []byte("from-2")}}})
	b, _ := n.reps[3].Submit(now.Add(time.Millisecond), Proc{Ops: []Op{{Kind: OpExpect, Key: "x", Version: vers[0]}, {Kind: OpWrite, Key: "x", Value: []byte("from-3")}}})
	for ms := 62; ms < 200; ms++ {
		n.tick(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	if o := n.outs[2]; len(o) != 1 || o[0].Txn != a || !o[0].Committed {
		t.Fatalf("first read-modify-write: %+v", o)
	}
	if o := n.outs[3]; len(o) != 1 || o[0].Txn != b || o[0].Committed || !strings.Contains(o[0].Reason, "conflict") {
		t.Fatalf("second read-modify-write: %+v", o)
	}
	for _, dc := range []uint32{1, 2, 3} {
		if v, _, _ := n.reps[dc].ReadOnly([]string{"x"}); string(v[0]) != "from-2" {
			t.Errorf("data center %d holds %q", dc, v[0])
		}
	}
}

// A data center that crashes with transactions in open epochs restarts from its saved state:
// its own inputs go out again to a peer that missed them, it executes its open epochs again,
// and its client's transaction commits, with every data center agreeing.
func TestRestartFromSavedState(t *testing.T) {
	n := newTestNet(t, Options{EpochLength: 10 * time.Millisecond, Start: 99})
	id, _ := n.reps[2].Submit(t0, Proc{Ops: []Op{{Kind: OpAppend, Key: "x", Delta: 7}}})
	// Data center 2's message for epoch 100 reaches 1 but not 3; then 2 crashes.
	n.drop = func(from uint32, m Message) bool { return from == 2 && m.To == 3 }
	n.tick(t0.Add(10*time.Millisecond + time.Microsecond))
	saved := n.reps[2].Save()
	r, err := Restore(saved, Options{EpochLength: 10 * time.Millisecond, Start: 99}, t0.Add(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	n.reps[2], n.drop = r, nil
	for ms := 50; ms < 700; ms++ {
		n.tick(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	if o := n.outs[2]; len(o) != 1 || o[0].Txn != id || !o[0].Committed {
		t.Fatalf("the restarted data center's transaction: %+v", o)
	}
	for _, dc := range []uint32{1, 3} {
		if v, _, _ := n.reps[dc].ReadOnly([]string{"x"}); len(v[0]) != 8 {
			t.Errorf("data center %d holds %v", dc, v[0])
		}
	}
}
