package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"meridian/internal/hlc"
)

// BenchmarkApplySync measures group commit: one Apply(sync=true) of 64 records of 100 bytes
// per iteration, on the OS filesystem (so every iteration pays a real WAL fsync).
func BenchmarkApplySync(b *testing.B) {
	e, err := Open(filepath.Join(b.TempDir(), "db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const batch = 64
	value := make([]byte, 100)
	recs := make([]Record, batch)
	b.SetBytes(batch * 100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range recs {
			// Keys spread over 8 partitions (key ranges p0/ .. p7/).
			k := (i*batch + j) % 100000
			recs[j] = Record{
				Keyspace: "bench",
				Key:      []byte(partKey(k%8, fmt.Sprintf("key-%08d", k))),
				Version:  hlc.Version{WallNanos: int64(i), NodeID: 1},
				Value:    value,
			}
		}
		if err := e.Apply(recs, true); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
	s := e.Stats()
	b.ReportMetric(float64(s.WALSyncs)/float64(b.N), "fsyncs/op")
}

// BenchmarkGet reads random keys of 100,000 (each with 2 versions) from a flushed store with
// a warm block cache.
func BenchmarkGet(b *testing.B) {
	e, err := Open(filepath.Join(b.TempDir(), "db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const keys = 100000
	value := make([]byte, 100)
	recs := make([]Record, 0, 1000)
	for v := int64(1); v <= 2; v++ {
		for k := 0; k < keys; k++ {
			recs = append(recs, Record{Keyspace: "bench",
				Key: []byte(partKey(k%8, fmt.Sprintf("key-%08d", k))), Version: hlc.Version{WallNanos: v}, Value: value})
			if len(recs) == cap(recs) {
				if err := e.Apply(recs, false); err != nil {
					b.Fatal(err)
				}
				recs = recs[:0]
			}
		}
	}
	// Settle the LSM (flush, then compact everything) so no background compaction rewrites
	// files, and their cached blocks, while the benchmark runs.
	if err := e.db.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := e.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	// Warm the block cache with one scan per partition, so the benchmark measures the read
	// path rather than first-touch disk reads and decompression.
	for p := 0; p < 8; p++ {
		if err := e.Scan(partSpan("bench", p), 0, func(Record) bool { return true }); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := rng.IntN(keys)
		r, found, err := e.Get("bench", []byte(partKey(k%8, fmt.Sprintf("key-%08d", k))))
		if err != nil || !found || r.Version.WallNanos != 2 {
			b.Fatalf("Get = %v %t %v", r.Version, found, err)
		}
	}
}

// BenchmarkScan reads 100 keys (each with 3 versions) per iteration from one partition.
func BenchmarkScan(b *testing.B) {
	e, err := Open(filepath.Join(b.TempDir(), "db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	value := make([]byte, 100)
	for v := int64(1); v <= 3; v++ {
		recs := make([]Record, 0, 10000)
		for k := 0; k < 10000; k++ {
			recs = append(recs, Record{Keyspace: "bench",
				Key: []byte(partKey(1, fmt.Sprintf("key-%08d", k))), Version: hlc.Version{WallNanos: v}, Value: value})
		}
		if err := e.Apply(recs, false); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		span := partSpan("bench", 1)
		span.Start = []byte(partKey(1, fmt.Sprintf("key-%08d", rng.IntN(9900))))
		n := 0
		if err := e.Scan(span, 100, func(Record) bool { n++; return true }); err != nil || n != 100 {
			b.Fatalf("Scan = %d keys, %v", n, err)
		}
	}
}
