package kawkab

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

const storeKillEnv = "KAWKAB_KILL9_STORE_DIR"

var storeKillCfg = StreamConfig{ID: 2, RecordBytes: 100, ValueOffset: 8, Ack: AckLocal}

// killStoreOpts: a directory object store shared by the processes, a local capacity small
// enough that uploaded chunks are deleted as the stream grows (half of it is 4 chunks).
func killStoreOpts(t testing.TB, dir string) StoreOptions {
	obj, err := OpenDirObjectStore(filepath.Join(dir, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	return StoreOptions{ObjectStore: obj, Prefix: "k", CapacityBytes: 34 << 20, UploadWorkers: 4}
}

// TestStoreHelperProcess is the process TestStoreKill9 kills: it opens the store in
// $KAWKAB_KILL9_STORE_DIR (creating the stream), prints "open <records>", then appends at
// AckLocal from four goroutines and prints "ack <first> <n> <writer> <seq>" for every
// acknowledged batch, while chunks are uploaded and deleted, until it is killed.
func TestStoreHelperProcess(t *testing.T) {
	dir := os.Getenv(storeKillEnv)
	if dir == "" {
		t.Skip("the process TestStoreKill9 runs and kills")
	}
	st, err := OpenStore(filepath.Join(dir, "local"), killStoreOpts(t, dir))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	s, ok := st.Stream(storeKillCfg.ID)
	if !ok {
		if s, err = st.Create(storeKillCfg); err != nil {
			fmt.Printf("error %v\n", err)
			os.Exit(2)
		}
	}
	start := s.Len()
	fmt.Printf("open %d\n", start)
	concurrentAppends(t, s, 4, 3000, func(int) bool { return s.Len() >= start+2000000 }, func(b ackedBatch) {
		fmt.Printf("ack %d %d %d %d\n", b.first, b.n, b.writer, b.seq)
	})
	st.Close()
	os.Exit(0)
}

// TestStoreKill9: a process appends through a Store (real fsyncs, uploads to a directory
// object store, deletion of uploaded chunks) and is killed with SIGKILL while uploads,
// manifest writes and deletions are in flight. Each round reopens the store: every
// acknowledged batch is there, whole (reading deleted chunks from the object store), the
// index answers like a model, the uploads resume, and a remote reader of the uploaded prefix
// reads the same records.
func TestStoreKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes that fsync")
	}
	dir := t.TempDir()
	var acked []ackedBatch
	for round, killAfter := range []int{40, 120, 15, 200} {
		acked, _ = appendUntilKilled(t, round, "TestStoreHelperProcess", storeKillEnv+"="+dir, killAfter, acked)
		opt := killStoreOpts(t, dir)
		opt.Stream.Sync = noSync
		st, err := OpenStore(filepath.Join(dir, "local"), opt)
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		s, ok := st.Stream(storeKillCfg.ID)
		if !ok {
			t.Fatalf("round %d: the stream was not reopened", round)
		}
		m := checkConcurrent(t, s, acked)
		check(t, s, m, rand.New(rand.NewSource(int64(round))), 30)
		up := s.tier.manifest
		rs, err := OpenRemoteStream(context.Background(), opt.ObjectStore, "k", storeKillCfg.ID, RemoteOptions{})
		if err != nil && up.Chunks > 0 {
			t.Fatalf("round %d: remote reader: %v", round, err)
		}
		if err == nil {
			// The reopened store resumes uploads at once: the object store may be ahead.
			if rs.Manifest().Chunks < up.Chunks {
				t.Fatalf("round %d: the remote reader's manifest %+v, the store opened with %+v", round, rs.Manifest(), up)
			}
			check(t, rs.s, m.truncate(rs.Len()), rand.New(rand.NewSource(int64(round))), 20)
		}
		s.tier.gmu.RLock()
		gone := len(s.tier.gone)
		s.tier.gmu.RUnlock()
		t.Logf("round %d: killed after %d acknowledgements; %d records survive, %d chunks uploaded at reopen, %d deleted locally; recovery %+v",
			round, killAfter, s.Len(), up.Chunks, gone, s.Recovery())
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
