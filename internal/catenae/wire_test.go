package catenae

import (
	"reflect"
	"testing"
)

func sampleMessages() []Message {
	t1 := &Txn{ID: TxnID{DC: 2, Seq: 7}, Stamp: Stamp{Epoch: 101, Nanos: 1010, DC: 2, Seq: 7},
		Proc: Proc{Ops: []Op{{Kind: OpRead, Key: "a"}, {Kind: OpExpect, Key: "b", Version: 3}, {Kind: OpAdd, Key: "c", Delta: -4}, {Kind: OpWrite, Key: "d", Value: []byte("v")}}}}
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
