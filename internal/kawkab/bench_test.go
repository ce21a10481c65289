package kawkab

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// BenchmarkAppend measures one stream's ingest of 16-byte records (Fig. 5.10's record size) in
// batches of 100, 1,000 and 10,000, at both acknowledgement levels, from one goroutine: the
// engine's cost per record (records/s in the "rec/s" metric). A command, not a timed test:
// `go test -tags pebblegozstd -run '^$' -bench Append ./internal/kawkab/`.
func BenchmarkAppend(b *testing.B) {
	for _, ack := range []AckLevel{AckMemory, AckLocal} {
		for _, batch := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/batch=%d", ack, batch), func(b *testing.B) {
				s, err := CreateStream(b.TempDir(), StreamConfig{ID: 1, RecordBytes: 16, ValueOffset: 8, Ack: ack}, StreamOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
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
