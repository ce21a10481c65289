package main

import (
	"bytes"
	"strings"
	"testing"

	"meridian/client"
)

func TestStreamCLIHelpers(t *testing.T) {
	for _, tc := range []struct {
		in, typ string
		bytes   uint32
		err     string
	}{
		{"ts:int64", "int64", 0, ""}, {"p:float64", "float64", 0, ""}, {"s:bytes[12]", "bytes", 12, ""},
		{"x", "", 0, "NAME:TYPE"}, {":int64", "", 0, "NAME:TYPE"}, {"x:int32", "", 0, `type "int32"`}, {"x:bytes[]", "", 0, "bytes[N]"},
	} {
		f, err := parseField(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseField(%q): %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || f.Type != tc.typ || f.Bytes != tc.bytes {
			t.Errorf("parseField(%q): %+v, %v", tc.in, f, err)
		}
	}
	if ts, err := parseTimestamp("2026-01-01T00:00:01Z"); err != nil || ts != 1767225601000000000 {
		t.Errorf("RFC 3339: %d, %v", ts, err)
	}
	if ts, err := parseTimestamp(" -5 "); err != nil || ts != -5 {
		t.Errorf("nanoseconds: %d, %v", ts, err)
	}
	if _, err := parseTimestamp("yesterday"); err == nil {
		t.Error("parseTimestamp accepted yesterday")
	}
	if _, _, err := parseRange("10", "5"); err == nil {
		t.Error("parseRange accepted from > to")
	}

	var got [][2]int64
	add := func(ts, v int64) error { got = append(got, [2]int64{ts, v}); return nil }
	if err := readCSV(strings.NewReader("timestamp,value\n# c\n\n1,2\n3, -4\n5\n"), true, add); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1] != [2]int64{3, -4} || got[2] != [2]int64{5, 0} {
		t.Fatalf("readCSV: %v", got)
	}
	if err := readCSV(strings.NewReader("1,x\n"), true, add); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad value: %v", err)
	}
	if err := readCSV(strings.NewReader("1,2\n"), false, add); err == nil || !strings.Contains(err.Error(), "no value field") {
		t.Errorf("value without a value field: %v", err)
	}

	// Columns and printing of a sized stream with a value in the middle.
	info := &client.StreamInfo{Spec: &client.StreamSpec{RecordBytes: 32, ValueOffset: 16}}
	cols := columns(info)
	if len(cols) != 4 || cols[1].name != "bytes_8" || cols[2].name != "value" || cols[3].n != 8 {
		t.Fatalf("columns: %+v", cols)
	}
	b := client.NewBatch(32, 16)
	b.Add(7, -9)
	pr, _ := newRecordPrinter("csv")
	var out bytes.Buffer
	recs := []client.Record{{Number: 3, Bytes: b.Bytes()}}
	if err := pr.printRecords(&out, info, recs); err != nil {
		t.Fatal(err)
	}
	if want := "record,timestamp,bytes_8,value,bytes_24\n3,7,0000000000000000,-9,0000000000000000\n"; out.String() != want {
		t.Fatalf("csv: %q, want %q", out.String(), want)
	}
	if _, err := newRecordPrinter("xml"); err == nil {
		t.Error("format xml accepted")
	}
}
