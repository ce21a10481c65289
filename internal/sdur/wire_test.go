package sdur

import (
	"reflect"
	"strings"
	"testing"
)

// TestWireRoundTrip: every entry kind and a vote survive their wire form.
func TestWireRoundTrip(t *testing.T) {
	th := Threshold{Unit: Ticks, K: 12}
	entries := []Entry{
		{Kind: EntryTxn, Txn: &Part{ID: TxnID{3, 9}, Partition: 1, Partitions: []uint32{0, 1}, Snapshot: 42, Reads: []string{"a", "b"},
			Writes: []Write{{Key: "c", Value: []byte("v")}, {Key: "d", Delete: true}}, Submitter: 3}},
		{Kind: EntryAbortRequest, Abort: &AbortRequest{Txn: TxnID{2, 1}, Partitions: []uint32{0, 4}, Partition: 4}},
		{Kind: EntryTick, Floor: 77},
		{Kind: EntryConfig, Threshold: &th},
	}
	for _, e := range entries {
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEntry(b, DefaultWireLimits)
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip changed the entry:\n%+v\n%+v", e, got)
		}
	}
	v := Vote{Txn: TxnID{1, 2}, Partition: 3, Commit: false, Partitions: []uint32{1, 3}, Reason: string(ReasonConflict), Key: "k"}
	b, err := EncodeVote(v)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeVote(b, DefaultWireLimits); err != nil || !reflect.DeepEqual(got, v) {
		t.Fatalf("vote round trip: %+v, %v", got, err)
	}
}

// TestWireRefusesBadEntries: what a replica relies on is checked at decoding, with the field
// named.
func TestWireRefusesBadEntries(t *testing.T) {
	cases := map[string]Entry{
		"not strictly ascending": {Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 1}, Partition: 1, Partitions: []uint32{1, 0}}},
		"include partition 5":    {Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 1}, Partition: 5, Partitions: []uint32{0, 1}}},
		"a written key of 0":     {Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0}, Writes: []Write{{Key: ""}}}},
		"neither entries":        {Kind: EntryConfig, Threshold: &Threshold{Unit: 9}},
		"entry kind 7":           {Kind: 7},
	}
	for want, e := range cases {
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeEntry(b, DefaultWireLimits); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	if _, err := DecodeEntry([]byte{0xff, 0xff}, DefaultWireLimits); err == nil {
		t.Error("garbage decoded")
	}
	lim := DefaultWireLimits
	lim.MaxKeys = 1
	b, _ := EncodeEntry(Entry{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0}, Reads: []string{"a", "b"}}})
	if _, err := DecodeEntry(b, lim); err == nil || !strings.Contains(err.Error(), "above the limit") {
		t.Errorf("too many keys: %v", err)
	}
}

// FuzzDecodeEntry: any bytes decode to a checked entry or an error, never a panic, and a
// decoded entry re-encodes to the same entry.
func FuzzDecodeEntry(f *testing.F) {
	th := Threshold{Unit: Entries, K: 3}
	for _, e := range []Entry{
		{Kind: EntryTxn, Txn: &Part{ID: TxnID{1, 1}, Partition: 0, Partitions: []uint32{0, 2}, Reads: []string{"a"}, Writes: []Write{{Key: "b", Value: []byte("x")}}}},
		{Kind: EntryConfig, Threshold: &th},
		{Kind: EntryTick, Floor: 3},
	} {
		b, _ := EncodeEntry(e)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEntry(data, DefaultWireLimits)
		if err != nil {
			return
		}
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeEntry(b, DefaultWireLimits)
		if err != nil || !reflect.DeepEqual(again, e) {
			t.Fatalf("a decoded entry does not survive its own wire form: %v", err)
		}
		r, _ := NewReplica(0, Options{})
		r.Deliver(t0, e)
		r.Tick(t0)
		r.Ready()
	})
}
