package sdur

import (
	"fmt"
	"testing"
)

// BenchmarkLocalCommit is the core's CPU per local transaction (2 reads + 2 writes of a million
// keys, the paper's microbenchmark): certification, placement, completion.
func BenchmarkLocalCommit(b *testing.B) {
	r, _ := NewReplica(0, Options{})
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k1, k2 := keys[(i*7919)&(len(keys)-1)], keys[(i*104729+1)&(len(keys)-1)]
		r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, uint64(i + 1)}, Partition: 0, Partitions: []uint32{0}, Snapshot: r.SnapshotCounter(),
			Writes: []Write{{Key: k1, Value: []byte("v")}, {Key: k2, Value: []byte("v")}}}})
		r.Ready()
	}
}

// BenchmarkGlobalCommit is the core's CPU per global transaction at one partition: delivery
// with the two-way certification, the other partition's vote, completion.
func BenchmarkGlobalCommit(b *testing.B) {
	r, _ := NewReplica(0, Options{Threshold: Threshold{Unit: Entries, K: 0}})
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	parts := []uint32{0, 1}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := TxnID{1, uint64(i + 1)}
		k := keys[(i*7919)&(len(keys)-1)]
		r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: id, Partition: 0, Partitions: parts, Snapshot: r.SnapshotCounter(), Writes: []Write{{Key: k, Value: []byte("v")}}}})
		r.Vote(t0, Vote{Txn: id, Partition: 1, Commit: true, Partitions: parts})
		r.Ready()
	}
}
