package client

import (
	"errors"
	"io"
	"math/big"
	"strings"
	"testing"

	"meridian/api/meridianpb"
)

func TestBatchAndRecords(t *testing.T) {
	b := NewBatch(24, 16)
	b.Add(5, -7)
	b.Add(6, 8)
	if err := b.AddRecord(make([]byte, 23)); err == nil {
		t.Fatal("a 23-byte record accepted in a batch of 24-byte records")
	}
	if b.Len() != 2 || len(b.Bytes()) != 48 {
		t.Fatalf("batch of %d records, %d bytes", b.Len(), len(b.Bytes()))
	}
	pages := []*meridianpb.RecordsPage{
		{FirstRecord: 10, Count: 2, RecordBytes: 24, Records: b.Bytes()},
		{FirstRecord: 12, Count: 1, RecordBytes: 24, Records: make([]byte, 24)},
	}
	it := &Records{recv: func() (*meridianpb.RecordsPage, error) {
		if len(pages) == 0 {
			return nil, io.EOF
		}
		p := pages[0]
		pages = pages[1:]
		return p, nil
	}, cancel: func() {}}
	var got []Record
	for it.Next() {
		got = append(got, it.Record())
	}
	if it.Err() != nil || len(got) != 3 || got[0].Number != 10 || got[1].Timestamp() != 6 || got[1].Int64(16) != 8 || got[0].Int64(16) != -7 || got[2].Number != 12 {
		t.Fatalf("records %+v, err %v", got, it.Err())
	}
	// A malformed page ends the iteration with an error; so does a server error.
	bad := &Records{recv: func() (*meridianpb.RecordsPage, error) {
		return &meridianpb.RecordsPage{Count: 3, RecordBytes: 16, Records: make([]byte, 16)}, nil
	}, cancel: func() {}}
	if bad.Next() || bad.Err() == nil || !strings.Contains(bad.Err().Error(), "holds 16 bytes") {
		t.Fatalf("malformed page: %v", bad.Err())
	}
	failing := &Records{recv: func() (*meridianpb.RecordsPage, error) { return nil, errors.New("boom") }, cancel: func() {}}
	if failing.Next() || failing.Err() == nil {
		t.Fatal("an error was not reported")
	}
	agg := Aggregate{Count: 4, Sum: bigInt(10)}
	if agg.Mean() != 2.5 {
		t.Fatalf("mean %v", agg.Mean())
	}
}

func bigInt(v int64) *big.Int { return big.NewInt(v) }
