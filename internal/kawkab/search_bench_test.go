package kawkab

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"
)

// BenchmarkSearch measures ReadRange's index search (Index.Search on a stream's file-backed
// index) for narrow ranges in the old part of a stream whose index has many full nodes, with
// the decoded-node cache off and on: without it each search decodes the peaks and the nodes
// on its path again. `go test -tags pebblegozstd -run '^$' -bench Search ./internal/kawkab/`.
func BenchmarkSearch(b *testing.B) {
	for _, cache := range []int{0, DecodedNodeCache} {
		b.Run(fmt.Sprintf("cache=%d", cache), func(b *testing.B) {
			saved := DecodedNodeCache
			DecodedNodeCache = cache
			defer func() { DecodedNodeCache = saved }()
			cfg := StreamConfig{ID: 1, RecordBytes: 16, ValueOffset: 8, Ack: AckMemory}
			s, err := CreateStream(b.TempDir(), cfg, StreamOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const batch = 10000
			buf := make([]byte, 16*batch)
			ts := int64(0)
			for s.IndexNodes() < 40 { // 40 nodes of 289 blocks of 1,024 records: 11.8 M records
				for r := range batch {
					ts++
					binary.LittleEndian.PutUint64(buf[16*r:], uint64(ts))
					binary.LittleEndian.PutUint64(buf[16*r+8:], uint64(r))
				}
				if _, err := s.Append(buf); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewSource(1))
			visits := 0
			b.ResetTimer()
			for range b.N {
				lo := 1 + rng.Int63n(ts*3/4)
				s.xmu.RLock()
				r, err := s.idx.Search(lo, lo+100)
				s.xmu.RUnlock()
				if err != nil || !r.Found {
					b.Fatal(err, r.Found)
				}
				visits += r.Visits()
			}
			b.ReportMetric(float64(visits)/float64(b.N), "nodes/search")
		})
	}
}
