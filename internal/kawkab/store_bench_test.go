package kawkab

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// BenchmarkStoreAppend is BenchmarkAppend through a Store: a buffer cache in the read path
// (appends do not fill it), uploads of full chunks to an in-memory object store by 8 workers,
// the local capacity unlimited. Its cost over BenchmarkAppend is what the tier adds to an
// append: `go test -tags pebblegozstd -run '^$' -bench 'Append$' ./internal/kawkab/`.
func BenchmarkStoreAppend(b *testing.B) {
	for _, ack := range []AckLevel{AckMemory, AckLocal} {
		for _, batch := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/batch=%d", ack, batch), func(b *testing.B) {
				cache, err := NewCache(CacheConfig{CapacityBytes: 64 << 20})
				if err != nil {
					b.Fatal(err)
				}
				st, err := OpenStore(b.TempDir(), StoreOptions{ObjectStore: NewMemObjectStore(), Cache: cache})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				s, err := st.Create(StreamConfig{ID: 1, RecordBytes: 16, ValueOffset: 8, Ack: ack})
				if err != nil {
					b.Fatal(err)
				}
				buf := make([]byte, 16*batch)
				ts := int64(0)
				b.SetBytes(int64(len(buf)))
				b.ResetTimer()
				for range b.N {
					for r := range batch {
						ts++
						binary.LittleEndian.PutUint64(buf[16*r:], uint64(ts))
						binary.LittleEndian.PutUint64(buf[16*r+8:], uint64(r))
					}
					if _, err := s.Append(buf); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
			})
		}
	}
}
