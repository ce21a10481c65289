package sdur

import (
	"testing"
	"time"
)

// FuzzRestore: a saved state that does not decode, or decodes into nonsense, is refused with an
// error and never panics; one that is restored must snapshot again and keep taking entries.
func FuzzRestore(f *testing.F) {
	r, err := NewReplica(0, Options{Threshold: Threshold{Unit: Entries, K: 2}})
	if err != nil {
		f.Fatal(err)
	}
	r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 1}, Reads: []string{"a"}, Writes: []Write{{Key: "b", Value: []byte("v")}}}})
	r.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 2}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: "c"}}}})
	r.Vote(t0, Vote{Txn: TxnID{1, 9}, Partition: 1, Commit: true})
	seed, err := r.Snapshot()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{})
	f.Add(seed[:len(seed)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Restore(data, Options{}, time.Unix(0, 0))
		if err != nil {
			return
		}
		if _, err := got.Snapshot(); err != nil {
			t.Fatalf("a restored state does not snapshot again: %v", err)
		}
		got.Deliver(t0, Entry{Kind: EntryTick})
		got.Deliver(t0, Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{7, 7}, Partition: got.Partition(), Partitions: []uint32{got.Partition()}, Writes: []Write{{Key: "z"}}}})
		got.Tick(t0.Add(time.Hour))
		got.Ready()
	})
}
