package twopc

import (
	"reflect"
	"testing"
	"time"
)

var t0 = time.Unix(0, 0)

// TestVoteBeforeOwnPrepare: the coordinator partition's leader may receive a participant's vote
// before it delivers its own prepare; it must still decide (sim seed 411 of the 2pc mode).
func TestVoteBeforeOwnPrepare(t *testing.T) {
	r, err := NewReplica(1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.SetLeader(true)
	id := TxnID{6, 4}
	r.Vote(t0, Vote{Txn: id, Partition: 0, Coordinator: 1, Commit: true})
	r.Deliver(t0, 1, Entry{Kind: EntryPrepare, Part: &Part{ID: id, Partition: 1, Partitions: []uint32{0, 1}, Coordinator: 1, Writes: []Write{{Key: "x"}}}})
	rd := r.Ready()
	if len(rd.Proposals) != 1 || rd.Proposals[0].Kind != EntryDecision || !rd.Proposals[0].Commit {
		t.Fatalf("proposals %+v: want a commit decision", rd.Proposals)
	}
}

// TestAbortVoteDecidesAtOnce: one abort vote decides without waiting for the others.
func TestAbortVoteDecidesAtOnce(t *testing.T) {
	r, _ := NewReplica(0, Options{})
	r.SetLeader(true)
	id := TxnID{1, 1}
	r.Deliver(t0, 1, Entry{Kind: EntryPrepare, Part: &Part{ID: id, Partition: 0, Partitions: []uint32{0, 1, 2}, Coordinator: 0, Writes: []Write{{Key: "x"}}}})
	r.Vote(t0, Vote{Txn: id, Partition: 2, Coordinator: 0, Commit: false, Key: "y"})
	rd := r.Ready()
	if len(rd.Proposals) != 1 || rd.Proposals[0].Commit {
		t.Fatalf("proposals %+v: want an abort decision", rd.Proposals)
	}
}

// TestConflictingPrepareVotesAbort: a prepared transaction's locks make a conflicting prepare
// vote abort (no-wait), and a stale read version aborts.
func TestConflictingPrepareVotesAbort(t *testing.T) {
	r, _ := NewReplica(0, Options{})
	a := &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 1}, Coordinator: 1, Reads: []Read{{Key: "x"}}, Writes: []Write{{Key: "x"}}}
	b := &Part{ID: TxnID{1, 2}, Partition: 0, Partitions: []uint32{0, 1}, Coordinator: 1, Reads: []Read{{Key: "x"}}}
	r.Deliver(t0, 1, Entry{Kind: EntryPrepare, Part: a})
	r.Deliver(t0, 2, Entry{Kind: EntryPrepare, Part: b})
	rd := r.Ready()
	if len(rd.Votes) != 2 || !rd.Votes[0].Commit || rd.Votes[1].Commit || rd.Votes[1].Key != "x" {
		t.Fatalf("votes %+v: want commit then abort on x", rd.Votes)
	}
	r.Deliver(t0, 3, Entry{Kind: EntryDecision, Txn: a.ID, Commit: true, Partitions: a.Partitions, Coordinator: 1})
	if r.Version() != 1 {
		t.Fatalf("version %d after a commit, want 1", r.Version())
	}
	stale := &Part{ID: TxnID{1, 3}, Partition: 0, Partitions: []uint32{0}, Coordinator: 0, Reads: []Read{{Key: "x", Version: 0}}, Writes: []Write{{Key: "y"}}}
	r.Deliver(t0, 4, Entry{Kind: EntryPrepare, Part: stale})
	rd = r.Ready()
	if len(rd.Outcomes) != 1 || rd.Outcomes[0].Committed || rd.Outcomes[0].Key != "x" {
		t.Fatalf("outcomes %+v: a read of x at version 0 after x's commit must abort", rd.Outcomes)
	}
}

// TestFirstDecisionWins: a second decision entry for a transaction changes nothing.
func TestFirstDecisionWins(t *testing.T) {
	r, _ := NewReplica(0, Options{})
	p := &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 1}, Coordinator: 1, Writes: []Write{{Key: "x"}}}
	r.Deliver(t0, 1, Entry{Kind: EntryPrepare, Part: p})
	r.Deliver(t0, 2, Entry{Kind: EntryDecision, Txn: p.ID, Commit: false, Coordinator: 1})
	r.Deliver(t0, 3, Entry{Kind: EntryDecision, Txn: p.ID, Commit: true, Coordinator: 1})
	if r.Version() != 0 || len(r.Ready().Applies) != 0 {
		t.Fatal("a later commit decision applied after an abort decision")
	}
}

func timeMs(ms uint64) time.Duration { return time.Duration(ms) * time.Millisecond }

// TestWireRoundTrip: prepare and decision entries survive their wire form; bad ones are refused.
func TestWireRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{Kind: EntryPrepare, Part: &Part{ID: TxnID{2, 5}, Partition: 1, Partitions: []uint32{0, 1}, Coordinator: 0, Reads: []Read{{Key: "a", Version: 3}}, Writes: []Write{{Key: "b", Value: []byte("v")}}, Submitter: 2}},
		{Kind: EntryDecision, Txn: TxnID{2, 5}, Commit: true, Partitions: []uint32{0, 1}, Submitter: 2, Coordinator: 0},
	} {
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEntry(b, DefaultLimits)
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip of %+v: %+v, %v", e, got, err)
		}
	}
	bad, _ := EncodeEntry(Entry{Kind: EntryPrepare, Part: &Part{ID: TxnID{1, 1}, Partition: 3, Partitions: []uint32{0, 1}, Coordinator: 0}})
	if _, err := DecodeEntry(bad, DefaultLimits); err == nil {
		t.Fatal("a part for a partition outside its partitions decoded")
	}
}

// TestSnapshotRestore: a restored replica has the same prepared locks, decisions and counters,
// and decides the next entries as the original does.
func TestSnapshotRestore(t *testing.T) {
	a, _ := NewReplica(0, Options{})
	a.SetLeader(true)
	a.Deliver(t0, 1, Entry{Kind: EntryPrepare, Part: &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0}, Coordinator: 0, Writes: []Write{{Key: "x"}}}})
	a.Deliver(t0, 2, Entry{Kind: EntryPrepare, Part: &Part{ID: TxnID{1, 2}, Partition: 0, Partitions: []uint32{0, 1}, Coordinator: 1, Reads: []Read{{Key: "x", Version: 1}}, Writes: []Write{{Key: "y"}}}})
	a.Vote(t0, Vote{Txn: TxnID{9, 9}, Partition: 1, Coordinator: 0, Commit: true})
	a.Ready()
	data, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Restore(data, Options{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	b.SetLeader(true)
	next := []Entry{
		{Kind: EntryPrepare, Part: &Part{ID: TxnID{1, 3}, Partition: 0, Partitions: []uint32{0}, Coordinator: 0, Reads: []Read{{Key: "y"}}, Writes: []Write{{Key: "z"}}}},
		{Kind: EntryDecision, Txn: TxnID{1, 2}, Commit: true, Partitions: []uint32{0, 1}, Coordinator: 1},
		{Kind: EntryPrepare, Part: &Part{ID: TxnID{1, 4}, Partition: 0, Partitions: []uint32{0}, Coordinator: 0, Reads: []Read{{Key: "y", Version: 2}}, Writes: []Write{{Key: "z"}}}},
	}
	for i, e := range next {
		a.Deliver(t0, uint64(3+i), e)
		b.Deliver(t0, uint64(3+i), e)
		ra, rb := a.Ready(), b.Ready()
		if !reflect.DeepEqual(ra.Outcomes, rb.Outcomes) || !reflect.DeepEqual(ra.Applies, rb.Applies) {
			t.Fatalf("entry %d: the restored replica decided differently:\n%+v\n%+v", i, ra, rb)
		}
	}
	if a.Version() != b.Version() || a.PendingCount() != b.PendingCount() {
		t.Fatalf("counters differ: %d/%d vs %d/%d", a.Version(), a.PendingCount(), b.Version(), b.PendingCount())
	}
	if _, err := Restore([]byte("junk"), Options{}, t0); err == nil {
		t.Fatal("junk restored")
	}
}

// FuzzDecodeEntry: any bytes decode to a checked entry or an error, never a panic.
func FuzzDecodeEntry(f *testing.F) {
	b, _ := EncodeEntry(Entry{Kind: EntryPrepare, Part: &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 1}, Coordinator: 1, Writes: []Write{{Key: "k"}}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEntry(data, DefaultLimits)
		if err != nil {
			return
		}
		r, _ := NewReplica(e.Coordinator, Options{})
		if e.Part != nil {
			r, _ = NewReplica(e.Part.Partition, Options{})
		}
		r.SetLeader(true)
		r.Deliver(t0, 1, e)
		r.Tick(t0.Add(time.Hour))
		r.Ready()
	})
}
