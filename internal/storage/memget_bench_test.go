package storage

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"meridian/internal/hlc"
)

// BenchmarkGetFromMemtable reads random keys that are still in the memtable: the state of a
// node right after a write burst.
func BenchmarkGetFromMemtable(b *testing.B) {
	for _, mt := range []uint64{4 << 20, 32 << 20} {
		b.Run(fmt.Sprintf("memtable=%dMiB", mt>>20), func(b *testing.B) {
			e, err := Open(filepath.Join(b.TempDir(), "db"), Options{MemTableBytes: mt})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			const keys = 100000
			value := make([]byte, 100)
			var recs []Record
			for k := range keys {
				recs = append(recs, Record{Keyspace: "bench", Key: fmt.Appendf(nil, "k%09d", k), Version: hlc.Version{WallNanos: int64(k + 1)}, Value: value})
				if len(recs) == 1000 {
					if err := e.Apply(recs, false); err != nil {
						b.Fatal(err)
					}
					recs = recs[:0]
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ResetTimer()
			for range b.N {
				if _, _, err := e.Get("bench", fmt.Appendf(nil, "k%09d", rng.IntN(keys))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
