package sdur

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Unix(0, 0)

// completion is what a replica decided about one transaction, in its completion order.
type completion struct {
	txn       TxnID
	committed bool
	index     uint64
}

// recorder drives one replica and records its decisions.
type recorder struct {
	r           *Replica
	completions []completion
	votes       map[TxnID]bool // this partition's votes
	applies     []Apply
}

func newRecorder(t *testing.T, opts Options) *recorder {
	t.Helper()
	r, err := NewReplica(0, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &recorder{r: r, votes: map[TxnID]bool{}}
}

func (rc *recorder) drain() {
	rd := rc.r.Ready()
	for _, o := range rd.Outcomes {
		if o.Index > 0 {
			rc.completions = append(rc.completions, completion{o.Txn, o.Committed, o.Index})
		}
	}
	for _, v := range rd.Votes {
		rc.votes[v.Txn] = v.Commit
	}
	rc.applies = append(rc.applies, rd.Applies...)
}

// scenario is a partition's log and the votes of the other partitions for its globals.
type scenario struct {
	log   []Entry
	votes map[TxnID][]Vote // the other partitions' votes per global
}

// genScenario builds a log the way clients would: each transaction's snapshot is one a
// reference replica had reached when it was read (votes reach the reference replica at
// random times).
func genScenario(t *testing.T, rng *rand.Rand, opts Options, n int) scenario {
	ref := newRecorder(t, opts)
	sc := scenario{votes: map[TxnID][]Vote{}}
	var undelivered []Vote
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for i := range n {
		switch x := rng.IntN(10); {
		case x < 7:
			id := TxnID{Node: 1, Seq: uint64(i + 1)}
			part := &Part{ID: id, Partition: 0, Partitions: []uint32{0}, Snapshot: ref.r.SnapshotCounter() - uint64(min(int(ref.r.SnapshotCounter()), rng.IntN(3)))}
			if rng.IntN(3) == 0 {
				part.Partitions = []uint32{0, 1}
				if rng.IntN(2) == 0 {
					part.Partitions = []uint32{0, 1, 2}
				}
			}
			for _, k := range rng.Perm(len(keys))[:1+rng.IntN(3)] {
				if rng.IntN(2) == 0 {
					part.Writes = append(part.Writes, Write{Key: keys[k], Value: []byte(fmt.Sprint(i))})
				} else {
					part.Reads = append(part.Reads, keys[k])
				}
			}
			sc.log = append(sc.log, Entry{Kind: EntryTxn, Txn: part})
			if part.Global() {
				for _, p := range part.Partitions[1:] {
					v := Vote{Txn: id, Partition: p, Commit: rng.IntN(5) > 0, Partitions: part.Partitions}
					sc.votes[id] = append(sc.votes[id], v)
					undelivered = append(undelivered, v)
				}
			}
		case x < 8:
			sc.log = append(sc.log, Entry{Kind: EntryTick})
		case x < 9 && len(sc.log) > 0:
			// A recovery request for some global (delivered or not yet).
			id := TxnID{Node: 1, Seq: uint64(rng.IntN(i + 2))}
			sc.log = append(sc.log, Entry{Kind: EntryAbortRequest, Abort: &AbortRequest{Txn: id, Partitions: []uint32{0, 1}, Partition: 0}})
		default:
			th := Threshold{Unit: opts.Threshold.Unit, K: uint64(rng.IntN(5))}
			sc.log = append(sc.log, Entry{Kind: EntryConfig, Threshold: &th})
		}
		ref.r.Deliver(t0, sc.log[len(sc.log)-1])
		ref.drain()
		for len(undelivered) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(undelivered))
			ref.r.Vote(t0, undelivered[j])
			undelivered = slices.Delete(undelivered, j, j+1)
			ref.drain()
		}
	}
	return sc
}

// replay delivers the log to a fresh replica with the other partitions' votes arriving at
// random points (before or after their transaction's delivery), then everything left and
// enough ticks to pass every threshold.
func replay(t *testing.T, rng *rand.Rand, opts Options, sc scenario) *recorder {
	rc := newRecorder(t, opts)
	var pending []Vote
	for _, vs := range sc.votes {
		pending = append(pending, vs...)
	}
	slices.SortFunc(pending, func(a, b Vote) int { return int(a.Txn.Seq) - int(b.Txn.Seq) })
	rng.Shuffle(len(pending), func(i, j int) {
		if rng.IntN(4) == 0 { // mostly in order, some far off
			pending[i], pending[j] = pending[j], pending[i]
		}
	})
	for _, e := range sc.log {
		rc.r.Deliver(t0, e)
		rc.drain()
		for len(pending) > 0 && rng.IntN(2) == 0 {
			rc.r.Vote(t0, pending[0])
			pending = pending[1:]
			rc.drain()
		}
	}
	for _, v := range pending {
		rc.r.Vote(t0, v)
		rc.drain()
	}
	for range 200 {
		rc.r.Deliver(t0, Entry{Kind: EntryTick})
		rc.drain()
	}
	return rc
}

// TestReplicasDecideAlike: replicas of a partition that deliver the same log but receive the
// votes of the other partitions at different times must make the same decisions — votes,
// completion order, outcomes and versions (IV-G 3a). The paper's Algorithm 2 fails it: its
// certification reads a database and a pending list whose contents depend on vote timing.
func TestReplicasDecideAlike(t *testing.T) {
	for _, unit := range []ThresholdUnit{Entries, Ticks} {
		for seed := range uint64(300) {
			rng := rand.New(rand.NewPCG(seed, uint64(unit)))
			opts := Options{Threshold: Threshold{Unit: unit, K: uint64(rng.IntN(6))}}
			sc := genScenario(t, rng, opts, 120)
			a := replay(t, rand.New(rand.NewPCG(seed, 1)), opts, sc)
			b := replay(t, rand.New(rand.NewPCG(seed, 2)), opts, sc)
			if p, w := a.r.PendingCount(); p+w > 0 {
				t.Fatalf("unit %d seed %d: %d pending, %d waiting after every vote and 200 ticks: %s", unit, seed, p, w, a.r.Describe())
			}
			if !slices.Equal(a.completions, b.completions) {
				t.Fatalf("unit %d seed %d: replicas completed differently:\n%v\n%v", unit, seed, a.completions, b.completions)
			}
			for id, v := range a.votes {
				if bv, ok := b.votes[id]; ok && bv != v {
					t.Fatalf("unit %d seed %d: replicas voted differently on %s", unit, seed, id)
				}
			}
		}
	}
}

// TestThresholdBoundaries pins the corrected lines 29 and 58: the k-th entry after a global
// may still leap it, the (k+1)-th may not; it completes once DC ≥ rt and not before.
func TestThresholdBoundaries(t *testing.T) {
	rc := newRecorder(t, Options{Threshold: Threshold{Unit: Entries, K: 2}})
	g := &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 1}, Writes: []Write{{Key: "x"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: g}) // DC=1, rt=3
	rc.r.Vote(t0, Vote{Txn: g.ID, Partition: 1, Commit: true})
	rc.drain()
	if len(rc.completions) != 0 {
		t.Fatalf("the global completed before its threshold: %v", rc.completions)
	}
	l1 := &Part{ID: TxnID{1, 2}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "y"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: l1}) // DC=2 ≤ rt: leaps
	rc.drain()
	l2 := &Part{ID: TxnID{1, 3}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "z"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: l2}) // DC=3 = rt: leaps, then the global completes
	rc.drain()
	l3 := &Part{ID: TxnID{1, 4}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "w"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: l3}) // DC=4 > rt: after the global
	rc.drain()
	want := []completion{{l1.ID, true, 1}, {l2.ID, true, 2}, {g.ID, true, 3}, {l3.ID, true, 4}}
	if !slices.Equal(rc.completions, want) {
		t.Fatalf("completion order %v, want %v", rc.completions, want)
	}
}

// TestTickThresholdBoundary: with ticks, a local delivered after the tick that reaches a
// global's threshold does not leap it (a replica may already have completed it).
func TestTickThresholdBoundary(t *testing.T) {
	rc := newRecorder(t, Options{Threshold: Threshold{Unit: Ticks, K: 1}})
	g := &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 1}, Writes: []Write{{Key: "x"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: g}) // rt = TC + 1 = 1
	if !rc.r.NeedsTicks() {
		t.Fatal("a global waiting for a tick threshold does not ask for ticks")
	}
	l1 := &Part{ID: TxnID{1, 2}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "y"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: l1}) // TC=0 < 1: leaps
	rc.r.Deliver(t0, Entry{Kind: EntryTick})         // TC=1: threshold reached (no vote yet)
	l2 := &Part{ID: TxnID{1, 3}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "z"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: l2}) // TC=1: must not leap
	rc.drain()
	rc.r.Vote(t0, Vote{Txn: g.ID, Partition: 1, Commit: true})
	rc.drain()
	want := []completion{{l1.ID, true, 1}, {g.ID, true, 2}, {l2.ID, true, 3}}
	if !slices.Equal(rc.completions, want) {
		t.Fatalf("completion order %v, want %v", rc.completions, want)
	}
}

// TestWritesAtNextSnapshot pins lines 37-39 corrected: a commit's writes carry SC+1, and a
// local whose snapshot already holds a write does not conflict with it (DB[st+1 … SC]).
func TestWritesAtNextSnapshot(t *testing.T) {
	rc := newRecorder(t, Options{})
	w := &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "x", Value: []byte("1")}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: w})
	rc.drain()
	if len(rc.applies) != 1 || rc.applies[0].Index != 1 || rc.r.SnapshotCounter() != 1 {
		t.Fatalf("applies %v SC %d: want the write at version 1 = SC", rc.applies, rc.r.SnapshotCounter())
	}
	// Read x at snapshot 1 (which holds the write): no conflict.
	r1 := &Part{ID: TxnID{1, 2}, Partition: 0, Partitions: []uint32{0}, Snapshot: 1, Reads: []string{"x"}, Writes: []Write{{Key: "x", Value: []byte("2")}}}
	// Read x at snapshot 0 (before it): conflict on x.
	r0 := &Part{ID: TxnID{1, 3}, Partition: 0, Partitions: []uint32{0}, Snapshot: 0, Reads: []string{"x"}, Writes: []Write{{Key: "y"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: r1})
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: r0})
	rd := rc.r.Ready()
	if len(rd.Outcomes) != 2 || !rd.Outcomes[0].Committed || rd.Outcomes[1].Committed || rd.Outcomes[1].Key != "x" || rd.Outcomes[1].Reason != ReasonConflict {
		t.Fatalf("outcomes %+v: want the first committed and the second aborted by a conflict on x", rd.Outcomes)
	}
}

// TestBlindWriteIsImplicitRead: a transaction that writes x without reading it conflicts with
// a concurrent committed write of x (writeset ⊆ readset, II-B), so two blind writers at the same
// snapshot cannot both commit.
func TestBlindWriteIsImplicitRead(t *testing.T) {
	rc := newRecorder(t, Options{})
	a := &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "x", Value: []byte("a")}}}
	b := &Part{ID: TxnID{1, 2}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "x", Value: []byte("b")}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: a})
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: b})
	rd := rc.r.Ready()
	if len(rd.Outcomes) != 2 || !rd.Outcomes[0].Committed || rd.Outcomes[1].Committed {
		t.Fatalf("outcomes %+v: the second blind writer at the same snapshot must abort", rd.Outcomes)
	}
}

// TestGlobalCertificationBothWays: a global that writes a key a concurrent (pending) local
// read aborts — the write→read half of the global test (line 47) — and one that reads a key a
// pending transaction writes aborts too.
func TestGlobalCertificationBothWays(t *testing.T) {
	for _, mutation := range []string{"", "global-test-one-way"} {
		rc := newRecorder(t, Options{Mutation: mutation})
		g1 := &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 1}, Reads: []string{"x"}, Writes: []Write{{Key: "z"}}}
		rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: g1}) // pending: reads x (and z)
		g2 := &Part{ID: TxnID{1, 2}, Partition: 0, Partitions: []uint32{0, 1}, Reads: []string{"y"}, Writes: []Write{{Key: "x"}}}
		rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: g2}) // writes x, which pending g1 read
		rd := rc.r.Ready()
		var g2vote *Vote
		for i := range rd.Votes {
			if rd.Votes[i].Txn == g2.ID {
				g2vote = &rd.Votes[i]
			}
		}
		if g2vote == nil {
			t.Fatal("no vote for the second global")
		}
		if mutation == "" && (g2vote.Commit || g2vote.Key != "x") {
			t.Fatalf("vote %+v: want abort on x (it writes what a concurrent global read)", *g2vote)
		}
		if mutation != "" && !g2vote.Commit {
			t.Fatalf("the mutation %s still checks the write→read half", mutation)
		}
	}
}

// TestRecoveryAbortRequestFirst (IV-F): a partition that delivers the abort request before the
// transaction votes abort and aborts the transaction when it arrives; one that delivered the
// transaction first keeps its vote and sends it again.
func TestRecoveryAbortRequestFirst(t *testing.T) {
	rc := newRecorder(t, Options{})
	id := TxnID{2, 7}
	rc.r.Deliver(t0, Entry{Kind: EntryAbortRequest, Abort: &AbortRequest{Txn: id, Partitions: []uint32{0, 1}, Partition: 0}})
	rd := rc.r.Ready()
	if len(rd.Votes) != 1 || rd.Votes[0].Commit {
		t.Fatalf("votes %+v: want one abort vote", rd.Votes)
	}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: id, Partition: 0, Partitions: []uint32{0, 1}, Writes: []Write{{Key: "x"}}}})
	rd = rc.r.Ready()
	if len(rd.Outcomes) != 1 || rd.Outcomes[0].Committed || rd.Outcomes[0].Reason != ReasonRecovered || len(rd.Applies) != 0 {
		t.Fatalf("ready %+v: the transaction must abort (recovered)", rd)
	}

	rc = newRecorder(t, Options{})
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: id, Partition: 0, Partitions: []uint32{0, 1}, Writes: []Write{{Key: "x"}}}})
	rc.r.Ready()
	rc.r.Deliver(t0, Entry{Kind: EntryAbortRequest, Abort: &AbortRequest{Txn: id, Partitions: []uint32{0, 1}, Partition: 0}})
	rd = rc.r.Ready()
	if len(rd.Votes) != 1 || !rd.Votes[0].Commit {
		t.Fatalf("votes %+v: the partition must repeat its commit vote", rd.Votes)
	}
}

// TestRecoveryTimers: a pending global asks for missing votes after VoteRetry and asks the
// silent partition's log to abort it after RecoveryTimeout.
func TestRecoveryTimers(t *testing.T) {
	rc := newRecorder(t, Options{VoteRetry: 100 * time.Millisecond, RecoveryTimeout: time.Second})
	id := TxnID{1, 1}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: id, Partition: 0, Partitions: []uint32{0, 3}, Writes: []Write{{Key: "x"}}}})
	rc.r.Ready()
	rc.r.Tick(t0) // the first tick that sees it pending starts its wait
	rc.r.Tick(t0.Add(50 * time.Millisecond))
	if rd := rc.r.Ready(); len(rd.VoteRequests)+len(rd.AbortRequests) != 0 {
		t.Fatalf("asked too early: %+v", rd)
	}
	rc.r.Tick(t0.Add(150 * time.Millisecond))
	if rd := rc.r.Ready(); len(rd.VoteRequests) != 1 || rd.VoteRequests[0].Partition != 3 {
		t.Fatalf("want a vote request to partition 3: %+v", rd)
	}
	rc.r.Tick(t0.Add(1100 * time.Millisecond))
	if rd := rc.r.Ready(); len(rd.AbortRequests) != 1 || rd.AbortRequests[0].Partition != 3 || rd.AbortRequests[0].Txn != id {
		t.Fatalf("want an abort request to partition 3: %+v", rd)
	}
}

// TestDuplicateDeliveryIgnored: a transaction broadcast twice (a submitter's retry) is decided
// once.
func TestDuplicateDeliveryIgnored(t *testing.T) {
	rc := newRecorder(t, Options{})
	p := &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "x"}}}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: p})
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: p})
	rd := rc.r.Ready()
	if len(rd.Outcomes) != 1 || len(rd.Applies) != 1 {
		t.Fatalf("ready %+v: want one outcome and one apply", rd)
	}
}

// TestSnapshotFloor: a transaction whose snapshot is below the floor aborts; key state below
// the floor is dropped.
func TestSnapshotFloor(t *testing.T) {
	rc := newRecorder(t, Options{})
	for i := range 10 {
		rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, uint64(i + 1)}, Partition: 0, Partitions: []uint32{0}, Snapshot: uint64(i), Reads: []string{"x"}, Writes: []Write{{Key: fmt.Sprint("k", i)}}}})
	}
	rc.r.Deliver(t0, Entry{Kind: EntryTick, Floor: 5})
	rc.r.Ready()
	if n := len(rc.r.keys); n != 6 { // x (last read at 10) and k5…k9
		t.Fatalf("%d keys kept after the floor, want 6", n)
	}
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 99}, Partition: 0, Partitions: []uint32{0}, Snapshot: 4, Writes: []Write{{Key: "y"}}}})
	rd := rc.r.Ready()
	if len(rd.Outcomes) != 1 || rd.Outcomes[0].Reason != ReasonSnapshotTooOld {
		t.Fatalf("outcomes %+v: want snapshot too old", rd.Outcomes)
	}
}

// TestRestartAsksForEveryVote: a replica that delivers its log again after a restart holds many
// globals whose votes were sent long ago; one tick interval later it asks for all of them, not
// one head at a time (sim seed 6 of sdur's global-test-one-way mutation spent its whole
// quiescence asking one by one).
func TestRestartAsksForEveryVote(t *testing.T) {
	rc := newRecorder(t, Options{VoteRetry: 100 * time.Millisecond})
	for i := range 50 {
		rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, uint64(i + 1)}, Partition: 0, Partitions: []uint32{0, 1}, Writes: []Write{{Key: fmt.Sprint("k", i)}}}})
	}
	rc.r.Ready()
	rc.r.Tick(t0)
	rc.r.Tick(t0.Add(150 * time.Millisecond))
	if n := len(rc.r.Ready().VoteRequests); n != 50 {
		t.Fatalf("%d vote requests, want one for each of the 50 pending globals", n)
	}
}

// TestSnapshotRestoreDecidesAlike: a replica restored from another's snapshot, fed the same
// entries and votes afterwards, decides exactly as the one that never stopped.
func TestSnapshotRestoreDecidesAlike(t *testing.T) {
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 9))
		opts := Options{Threshold: Threshold{Unit: Ticks, K: uint64(rng.IntN(5))}}
		sc := genScenario(t, rng, opts, 150)
		a := newRecorder(t, opts)
		var pending []Vote
		for _, vs := range sc.votes {
			pending = append(pending, vs...)
		}
		slices.SortFunc(pending, func(x, y Vote) int { return int(x.Txn.Seq) - int(y.Txn.Seq) })
		cut := len(sc.log) / 2
		var b *recorder
		for i, e := range sc.log {
			if i == cut {
				data, err := a.r.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				r, err := Restore(data, opts, t0)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				b = &recorder{r: r, votes: map[TxnID]bool{}}
				a.completions = nil
			}
			for _, rc := range []*recorder{a, b} {
				if rc != nil {
					rc.r.Deliver(t0, e)
					rc.drain()
				}
			}
			if len(pending) > 0 && rng.IntN(2) == 0 {
				v := pending[0]
				pending = pending[1:]
				for _, rc := range []*recorder{a, b} {
					if rc != nil {
						rc.r.Vote(t0, v)
						rc.drain()
					}
				}
			}
		}
		for _, rc := range []*recorder{a, b} {
			for _, v := range pending {
				rc.r.Vote(t0, v)
			}
			for range 100 {
				rc.r.Deliver(t0, Entry{Kind: EntryTick})
			}
			rc.drain()
		}
		if !slices.Equal(a.completions, b.completions) {
			t.Fatalf("seed %d: the restored replica completed differently:\n%v\n%v", seed, a.completions, b.completions)
		}
		if a.r.SnapshotCounter() != b.r.SnapshotCounter() || a.r.Delivered() != b.r.Delivered() {
			t.Fatalf("seed %d: counters differ after the same inputs", seed)
		}
	}
}

// TestRestoreRefusesGarbage: a state that does not decode, or whose counts disagree with its
// pending list, is refused.
func TestRestoreRefusesGarbage(t *testing.T) {
	if _, err := Restore([]byte("not a state"), Options{}, t0); err == nil {
		t.Fatal("garbage restored")
	}
	rc := newRecorder(t, Options{Threshold: Threshold{Unit: Entries, K: 3}})
	rc.r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 1}, Writes: []Write{{Key: "x"}}}})
	rc.r.keys["x"].pendingWriters = 7
	data, err := rc.r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(data, Options{}, t0); err == nil {
		t.Fatal("a state with inconsistent pending counts restored")
	}
}

// TestPaperCertificationDiverges: Algorithm 2's certification as printed (the
// paper-certification mutation) fails TestReplicasDecideAlike's check — replicas that receive
// votes at different times decide differently — while the corrected one passes it above.
func TestPaperCertificationDiverges(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		opts := Options{Threshold: Threshold{Unit: Entries, K: uint64(rng.IntN(6))}, Mutation: "paper-certification"}
		sc := genScenario(t, rng, opts, 120)
		a := replay(t, rand.New(rand.NewPCG(seed, 1)), opts, sc)
		b := replay(t, rand.New(rand.NewPCG(seed, 2)), opts, sc)
		if !slices.Equal(a.completions, b.completions) {
			t.Logf("caught at seed %d", seed)
			return
		}
		for id, v := range a.votes {
			if bv, ok := b.votes[id]; ok && bv != v {
				t.Logf("caught at seed %d (votes)", seed)
				return
			}
		}
	}
	t.Fatal("the paper's certification decided alike at every replica in 300 scenarios: the check cannot tell")
}
