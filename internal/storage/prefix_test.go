package storage

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCrashLeavesAPrefix: whatever a crash keeps of unsynced writes, what the store holds
// afterwards is the state after some prefix of the batches applied (every synced one
// included). Raft logs rely on it: a log written entry after entry must never come back
// with an entry missing in the middle. Each round writes entries of one size, synced one by
// one, until the WAL nears the end of its first 32 KiB block, then a few unsynced ones, and
// crashes keeping a random share of the unsynced 4 KiB pages: sooner or later an entry's
// first chunk sits in the last bytes of the block, on a page the crash drops, while the next
// page survives (the case the simulator found, Open's fresh-store WAL rotation).
// walBytes is the size of the store's newest WAL file.
func walBytes(t *testing.T, fs vfs.FS) int64 {
	t.Helper()
	names, err := fs.List("data/db")
	if err != nil {
		t.Fatal(err)
	}
	var newest string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") && n > newest {
			newest = n
		}
	}
	st, err := fs.Stat(filepath.Join("data/db", newest))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func TestCrashLeavesAPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 300 {
		fs := vfs.NewCrashableMem()
		opts := testOptions(fs)
		opts.MemTableBytes = 128 << 10
		e, err := Open("data/db", opts)
		if err != nil {
			t.Fatal(err)
		}
		valueBytes := 60 + round%64
		next, synced := uint64(0), uint64(0)
		// Sync entry after entry until the WAL is within a few entries of its first block's
		// end, then write unsynced ones across it.
		syncUntil := int64(32<<10) - int64(rng.IntN(3*(valueBytes+60)))
		unsynced := 0
		for unsynced < 12 {
			op := RawOp{Key: binary.BigEndian.AppendUint64([]byte("log"), next), Value: make([]byte, valueBytes)}
			next++
			if err := e.ApplyBatch(nil, []RawOp{op}, false); err != nil {
				t.Fatal(err)
			}
			if walBytes(t, fs) >= syncUntil {
				unsynced++
				continue
			}
			{
				// As the simulator and the runtime's committer sync: a LogData record.
				if err := e.Apply(nil, true); err != nil {
					t.Fatal(err)
				}
				synced = next
			}
		}
		// Let Pebble's WAL flusher write the unsynced entries to the file (it does so at
		// once, in the background): a crash may then keep some of their pages.
		time.Sleep(2 * time.Millisecond)
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 1 + rng.IntN(99), RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))})
		e.Close()
		opts.FS = crashed
		e2, err := Open("data/db", opts)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		var got []uint64
		if err := e2.ScanRaw([]byte("log"), []byte("loh"), 0, func(k, _ []byte) bool {
			got = append(got, binary.BigEndian.Uint64(k[3:]))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			if x != uint64(i) {
				t.Fatalf("round %d: after the crash the log holds %d where %d belongs (%d entries kept of %d written, %d synced)", round, x, i, len(got), next, synced)
			}
		}
		if uint64(len(got)) < synced {
			t.Fatalf("round %d: %d entries kept, %d were synced", round, len(got), synced)
		}
		e2.Close()
	}
}
