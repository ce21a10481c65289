package raft

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/storage"
)

func ent(index, term uint64, data string) *raftpb.Entry {
	return &raftpb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: raftpb.EntryType_EntryNormal.Enum(), Data: []byte(data)}
}

func openStore(t *testing.T, fs vfs.FS) *storage.Engine {
	t.Helper()
	e, err := storage.Open("/data", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustSave(t *testing.T, st *storage.Engine, ls *LogStore, hs *raftpb.HardState, snap *raftpb.Snapshot, ents ...*raftpb.Entry) {
	t.Helper()
	ops, err := ls.Save(hs, snap, ents)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ApplyBatch(nil, ops, true); err != nil {
		t.Fatal(err)
	}
}

// logOf describes a store's view: first..last and each entry's term/data.
func logOf(t *testing.T, ls *LogStore) string {
	t.Helper()
	s := ls.Storage()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	hs, _, _ := s.InitialState()
	out := fmt.Sprintf("first=%d last=%d term=%d vote=%d commit=%d:", first, last, hs.GetTerm(), hs.GetVote(), hs.GetCommit())
	if last >= first {
		ents, err := s.Entries(first, last+1, ^uint64(0))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			out += fmt.Sprintf(" %d/%d=%s", e.GetIndex(), e.GetTerm(), e.GetData())
		}
	}
	return out
}

// What a group saves is what it loads after a crash: entries, the hard state, a conflicting
// suffix replaced by a new leader's entries, and compaction.
func TestLogStoreSurvivesCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	st := openStore(t, fs)
	ls, err := LoadLogStore(st, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := logOf(t, ls); got != "first=1 last=0 term=0 vote=0 commit=0:" {
		t.Fatalf("empty group: %s", got)
	}
	mustSave(t, st, ls, &raftpb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(2), Commit: proto.Uint64(2)}, nil,
		ent(1, 1, "a"), ent(2, 1, "b"), ent(3, 1, "c"), ent(4, 1, "d"))
	// Another group's log next to it must not leak in.
	other, _ := LoadLogStore(st, 8)
	mustSave(t, st, other, nil, nil, ent(1, 5, "x"))
	// A new leader (term 2) overwrites index 3 onwards with one entry: 4 must go.
	mustSave(t, st, ls, &raftpb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(3), Commit: proto.Uint64(3)}, nil, ent(3, 2, "C"))
	want := "first=1 last=3 term=2 vote=3 commit=3: 1/1=a 2/1=b 3/2=C"
	if got := logOf(t, ls); got != want {
		t.Fatalf("in memory: %s\nwant        %s", got, want)
	}
	// Unsynced writes must not be what makes this pass.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	st.Close()
	st = openStore(t, crashed)
	defer st.Close()
	ls, err = LoadLogStore(st, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := logOf(t, ls); got != want {
		t.Fatalf("after crash: %s\nwant        %s", got, want)
	}
	// Compact through 2: the log starts at 3, and so does it after a reload.
	ops, err := ls.Compact(2, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ApplyBatch(nil, ops, true); err != nil {
		t.Fatal(err)
	}
	ls, err = LoadLogStore(st, 7)
	if err != nil {
		t.Fatal(err)
	}
	want = "first=3 last=3 term=2 vote=3 commit=3: 3/2=C"
	if got := logOf(t, ls); got != want {
		t.Fatalf("after compaction: %s\nwant              %s", got, want)
	}
	if term, err := ls.Storage().Term(2); err != nil || term != 1 {
		t.Fatalf("term of the compaction index: %d, %v; want 1", term, err)
	}
	if got := logOf(t, other); got != "first=1 last=1 term=0 vote=0 commit=0: 1/5=x" {
		t.Fatalf("group 8: %s", got)
	}
}

// A snapshot replaces the log; Remove deletes every trace of a group.
func TestLogStoreSnapshotAndRemove(t *testing.T) {
	st := openStore(t, vfs.NewMem())
	defer st.Close()
	ls, _ := LoadLogStore(st, 1)
	mustSave(t, st, ls, nil, nil, ent(1, 1, "a"), ent(2, 1, "b"))
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(10), Term: proto.Uint64(3), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
	mustSave(t, st, ls, &raftpb.HardState{Term: proto.Uint64(3), Commit: proto.Uint64(10)}, snap, ent(11, 3, "k"))
	ls, err := LoadLogStore(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := logOf(t, ls), "first=11 last=11 term=3 vote=0 commit=10: 11/3=k"; got != want {
		t.Fatalf("after snapshot: %s, want %s", got, want)
	}
	_, cs, _ := ls.Storage().InitialState()
	if len(cs.GetVoters()) != 3 {
		t.Fatalf("conf state after reload: %v", cs)
	}
	if err := st.ApplyBatch(nil, ls.Remove(), true); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := st.ScanRaw(nil, nil, 0, func(k, v []byte) bool { n++; return true }); err != nil || n != 0 {
		t.Fatalf("%d raw keys left after Remove (%v)", n, err)
	}
}

// A log with a hole (an entry missing where the next index belongs) is refused, never
// misread.
func TestLogStoreRefusesAHole(t *testing.T) {
	st := openStore(t, vfs.NewMem())
	defer st.Close()
	ls, _ := LoadLogStore(st, 1)
	mustSave(t, st, ls, nil, nil, ent(1, 1, "a"), ent(2, 1, "b"), ent(3, 1, "c"))
	if err := st.ApplyBatch(nil, []storage.RawOp{{Key: entryKey(1, 2), Delete: true}}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadLogStore(st, 1); err == nil {
		t.Fatal("a log with a hole loaded")
	}
}

// Compaction deletes exactly the entries through its index, whether a few (one point
// tombstone each) or many (one range deletion): no entry at or below it is left on disk, and
// none above it is lost.
func TestLogStoreCompactionDeletesExactly(t *testing.T) {
	st := openStore(t, vfs.NewMem())
	defer st.Close()
	ls, _ := LoadLogStore(st, 4)
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 200; i++ {
		ents = append(ents, ent(i, 1, fmt.Sprint(i)))
	}
	mustSave(t, st, ls, &raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(200)}, nil, ents...)
	onDisk := func() (n int, lowest uint64) {
		lowest = ^uint64(0)
		prefix := entryKey(4, 0)[:len(entryKey(4, 0))-8]
		if err := st.ScanRaw(prefix, append(prefix, 0xff), 0, func(k, v []byte) bool {
			var e raftpb.Entry
			if err := proto.Unmarshal(v, &e); err != nil {
				t.Fatal(err)
			}
			n++
			lowest = min(lowest, e.GetIndex())
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return n, lowest
	}
	for _, tc := range []struct{ index uint64 }{
		{10},  // entries 1..10: point deletes
		{11},  // one entry
		{150}, // 12..150, 139 entries: a range deletion
		{150}, // already compacted: nothing
	} {
		ops, err := ls.Compact(tc.index, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.ApplyBatch(nil, ops, true); err != nil {
			t.Fatal(err)
		}
		if n, lowest := onDisk(); n != int(200-tc.index) || lowest != tc.index+1 {
			t.Fatalf("after compacting to %d: %d entries on disk from %d, want %d from %d", tc.index, n, lowest, 200-tc.index, tc.index+1)
		}
		reloaded, err := LoadLogStore(st, 4)
		if err != nil {
			t.Fatal(err)
		}
		if first, _ := reloaded.Storage().FirstIndex(); first != tc.index+1 {
			t.Fatalf("reloaded after compacting to %d: first %d", tc.index, first)
		}
	}
}
