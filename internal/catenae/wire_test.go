package catenae

import (
	"reflect"
	"testing"
	"time"
)

func sampleMessages() []Message {
	t1 := &Txn{ID: TxnID{DC: 2, Seq: 7}, Stamp: Stamp{Epoch: 101, Nanos: 1010, DC: 2, Seq: 7},
		Proc: Proc{Ops: []Op{{Kind: OpRead, Key: "a"}, {Kind: OpExpect, Key: "b", Version: 3}, {Kind: OpAdd, Key: "c", Delta: -4}, {Kind: OpWrite, Key: "d", Value: []byte("v")},
			{Kind: OpDelete, Key: "\xff\x00not utf-8"}}}}
	return []Message{
		{To: 1, Epoch: &EpochMsg{From: 2, Upto: 102, Epochs: [][]*Txn{{t1}, {}}, Votes: []Vote{{Txn: t1.ID, Epoch: 101, DC: 2, Digest: 99}}, Closed: 100, Validated: 99}},
		{To: 3, Req: &Request{From: 1, Epoch: 55}},
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := EncodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMessage(b, DefaultWireLimits)
		if err != nil {
			t.Fatal(err)
		}
		if got.Epoch != nil {
			for i := range got.Epoch.Epochs {
				if got.Epoch.Epochs[i] == nil {
					got.Epoch.Epochs[i] = []*Txn{}
				}
			}
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
		}
	}
}

func TestWireRefuses(t *testing.T) {
	bad := sampleMessages()[0]
	bad.Epoch.Epochs[0][0].Proc.Ops[0].Key = ""
	b, _ := EncodeMessage(bad)
	if _, err := DecodeMessage(b, DefaultWireLimits); err == nil {
		t.Error("a transaction with an empty key decoded")
	}
	big := sampleMessages()[0]
	lim := DefaultWireLimits
	lim.MaxOps = 2
	b, _ = EncodeMessage(big)
	if _, err := DecodeMessage(b, lim); err == nil {
		t.Error("a transaction over the operations limit decoded")
	}
	if _, err := DecodeMessage([]byte{0xff, 0xff}, DefaultWireLimits); err == nil {
		t.Error("garbage decoded")
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		b, _ := EncodeMessage(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeMessage(data, DefaultWireLimits)
		if err != nil {
			return
		}
		if m.Epoch == nil && m.Req == nil {
			t.Fatal("decoded a message with no body")
		}
		if m.Epoch != nil {
			for _, txns := range m.Epoch.Epochs {
				for _, tx := range txns {
					if tx.Proc.Validate(DefaultWireLimits.MaxOps) != nil {
						t.Fatalf("decoded an invalid transaction %+v", tx)
					}
				}
			}
		}
		// What decodes encodes again and decodes to the same.
		b, err := EncodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeMessage(b, DefaultWireLimits); err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
	})
}

// A saved state decodes to what was saved: a replica restored from the bytes continues
// exactly as one restored from the saved state itself.
func TestSavedRoundTrip(t *testing.T) {
	n := newTestNet(t, Options{EpochLength: 10 * time.Millisecond, Start: 99})
	n.reps[1].Submit(t0, Proc{Ops: []Op{{Kind: OpWrite, Key: "k", Value: []byte("v")}, {Kind: OpRead, Key: "j"}}})
	for ms := 1; ms < 60; ms++ {
		n.tick(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	n.reps[1].Submit(t0.Add(60*time.Millisecond), Proc{Ops: []Op{{Kind: OpAppend, Key: "k", Delta: 3}}})
	n.tick(t0.Add(71 * time.Millisecond))
	saved := n.reps[1].Save()
	b, err := EncodeSaved(saved)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSaved(b, DefaultWireLimits)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := EncodeSaved(got)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(b2) {
		t.Fatal("a decoded saved state encodes differently")
	}
	r1, err := Restore(saved, Options{EpochLength: 10 * time.Millisecond, Start: 99}, t0.Add(72*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Restore(got, Options{EpochLength: 10 * time.Millisecond, Start: 99}, t0.Add(72*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if r1.StateDigest(r1.Closed()) != r2.StateDigest(r2.Closed()) || r1.Closed() != r2.Closed() || r1.Pending() != r2.Pending() {
		t.Fatal("replicas restored from the state and from its bytes differ")
	}
}

func FuzzDecodeSaved(f *testing.F) {
	r, _ := NewReplica(1, []uint32{1, 2}, Options{Start: 5})
	r.Submit(time.Unix(0, 70_000_000), Proc{Ops: []Op{{Kind: OpWrite, Key: "k", Value: []byte("v")}}})
	b, _ := EncodeSaved(r.Save())
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSaved(data, DefaultWireLimits)
		if err != nil {
			return
		}
		if _, err := Restore(s, Options{Start: 0}, time.Unix(0, 0)); err != nil {
			return // a state the options refuse
		}
	})
}

// An input decodes to what was encoded (keys are bytes, not UTF-8 text), and a decoded input
// holds only valid transactions of the data center and epoch it names.
func FuzzDecodeInput(f *testing.F) {
	in := sampleMessages()[0].Epoch.Epochs[0]
	b, err := EncodeInput(in)
	if err != nil {
		f.Fatal(err)
	}
	if got, err := DecodeInput(b, 101, 2, DefaultWireLimits); err != nil || len(got) != 1 || got[0].Proc.Ops[4].Key != "\xff\x00not utf-8" {
		f.Fatalf("round trip: %v %+v", err, got)
	}
	f.Add(b, uint64(101), uint32(2))
	f.Fuzz(func(t *testing.T, data []byte, epoch uint64, dc uint32) {
		txns, err := DecodeInput(data, epoch, dc, DefaultWireLimits)
		if err != nil {
			return
		}
		for _, tx := range txns {
			if tx.ID.DC != dc || tx.Stamp.Epoch != epoch || tx.Proc.Validate(DefaultWireLimits.MaxOps) != nil {
				t.Fatalf("decoded a transaction that is not a valid one of data center %d, epoch %d: %+v", dc, epoch, tx)
			}
		}
		b, err := EncodeInput(txns)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := DecodeInput(b, epoch, dc, DefaultWireLimits); err != nil || len(again) != len(txns) {
			t.Fatalf("re-encoded input does not decode alike: %v", err)
		}
	})
}
