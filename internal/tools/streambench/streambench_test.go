package streambench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meridian/internal/tools/streambench/loadgen"
)

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
	for ms, want := range map[float64]string{0: "—", 0.2204: "0.220", 2.345: "2.35", 22.04: "22.0", 134.4: "134"} {
		if got := Ms(ms); got != want {
			t.Errorf("Ms(%v) = %q, want %q", ms, got, want)
		}
	}
	if Ratio(0) != "—" || Ratio(2.345) != "2.35×" {
		t.Errorf("Ratio: %q %q", Ratio(0), Ratio(2.345))
	}
	if got := cell("a |b\n c"); got != "a /b c" {
		t.Errorf("cell: %q", got)
	}
}

func sampleReport() *Report {
	res := func(rps, p50 float64) loadgen.Result {
		return loadgen.Result{RecordsPerSec: rps, MBPerSec: rps * 16 / 1e6, P50Ms: p50, P99Ms: 2 * p50, ServerCores: 1.5, ServerCPUPerRecordUs: 0.25}
	}
	rep := &Report{Cores: 2, Options: Options{Fraction: 0.7, Appenders: 4, Duration: time.Second, Target: InProcess}, Rows: []Row{
		{System: SystemMeridian, Ack: "local", Batch: 100, Peak: res(1_000_000, 0), Loaded: res(700_000, 0.5)},
		{System: SystemMeridian, Ack: "local", Batch: 1000, Peak: res(4_000_000, 0), Loaded: res(2_800_000, 1.5)},
		{System: SystemKafka, Ack: "all", Batch: 100, Peak: res(250_000, 0), Loaded: res(175_000, 1)},
		{System: SystemKafka, Ack: "all", Batch: 1000, Error: "broker | gone\nfor good"},
		{System: SystemInfluxDB, Ack: "wal-fsync", Batch: 1000, Peak: res(500_000, 0), Loaded: res(350_000, 9)},
	}}
	rep.finish()
	return rep
}

func TestFinishRatios(t *testing.T) {
	rep := sampleReport()
	r := rep.Rows
	if r[0].PerCore != 500_000 || r[2].PerCore != 125_000 {
		t.Errorf("per core: %v %v", r[0].PerCore, r[2].PerCore)
	}
	if r[0].VsKafka != 4 || r[0].VsInfluxDB != 0 {
		t.Errorf("batch 100 ratios: %v %v", r[0].VsKafka, r[0].VsInfluxDB)
	}
	// Kafka failed at 1,000: no ratio; InfluxDB's is there.
	if r[1].VsKafka != 0 || r[1].VsInfluxDB != 8 {
		t.Errorf("batch 1000 ratios: %v %v", r[1].VsKafka, r[1].VsInfluxDB)
	}
	if r[2].VsKafka != 0 || r[3].PerCore != 0 {
		t.Error("a peer row got a ratio, or a failed row numbers")
	}
}

func TestMarkdownAndJSON(t *testing.T) {
	rep := sampleReport()
	md := rep.Markdown()
	lines := strings.Split(strings.TrimSpace(md), "\n")
	var table []string
	for _, l := range lines {
		if strings.HasPrefix(l, "|") {
			table = append(table, l)
		}
	}
	if len(table) != 2+len(rep.Rows) {
		t.Fatalf("%d table lines for %d rows:\n%s", len(table), len(rep.Rows), md)
	}
	cols := strings.Count(table[0], "|")
	for _, l := range table {
		if strings.Count(l, "|") != cols {
			t.Errorf("line with %d cells, header %d: %s", strings.Count(l, "|"), cols, l)
		}
	}
	for _, want := range []string{"| meridian | local | 100 | 1,000,000 | 16.0 | 500,000 | 1.50 | 0.250 | — | 0.500 | 1.00 | — | 700,000 | 4.00× | — |",
		"| kafka | all | 1,000 | failed: broker / gone for good |", "8.00×"} {
		if !strings.Contains(md, want) {
			t.Errorf("the table lacks %q:\n%s", want, md)
		}
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != len(rep.Rows) || back.Rows[0].VsKafka != 4 || back.Rows[0].Peak.RecordsPerSec != 1_000_000 {
		t.Errorf("JSON round trip: %+v", back.Rows)
	}
	files, err := rep.Charts(t.TempDir())
	if err != nil || len(files) != 2 {
		t.Fatalf("charts: %v %v", files, err)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() < 1000 {
			t.Errorf("chart %s: %v", f, err)
		}
	}
}

func TestGenerator(t *testing.T) {
	g := newGenerator(3)
	var last int64 = -1
	for range 3 {
		b := g.fill()
		for off := 0; off < len(b); off += RecordBytes {
			ts := int64(binary.LittleEndian.Uint64(b[off:]))
			if ts != last+1 || int64(binary.LittleEndian.Uint64(b[off+8:])) != ts {
				t.Fatalf("record %d: ts %d after %d", off/RecordBytes, ts, last)
			}
			last = ts
		}
	}
}

func TestRegistry(t *testing.T) {
	if _, err := Lookup("nonesuch"); err == nil {
		t.Error("an unknown kind was found")
	}
	if _, err := Lookup(InProcess); err != nil {
		t.Error(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a kind twice did not panic")
		}
	}()
	Register(InProcess, openInProcess)
}

func TestOpIsWrite(t *testing.T) {
	for _, share := range []float64{0, 0.2, 0.5, 0.8, 1} {
		w := 0
		for k := range int64(100_000) {
			if opIsWrite(k, share, 1) {
				w++
			}
		}
		if got := float64(w) / 100_000; got < share-0.01 || got > share+0.01 {
			t.Errorf("share %v: %v writes", share, got)
		}
	}
}

// TestBenchStreamSmoke runs the in-process side of `bench stream` with tiny runs.
func TestBenchStreamSmoke(t *testing.T) {
	rep, err := Run(context.Background(), Options{Batches: []int{100, 1000}, Skip: []string{SystemKafka, SystemInfluxDB},
		Appenders: 2, Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond, MaxRecords: 2_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Error != "" || r.Peak.RecordsPerSec <= 0 || r.Loaded.Mode != "open" || r.Loaded.P50Ms <= 0 || r.Peak.Errors != 0 {
			t.Errorf("row %+v", r)
		}
	}
	t.Log("\n" + rep.Markdown())
}

// TestBenchStreamReadsSmoke runs `bench stream reads` with tiny runs, and the aggregates
// over 1 M records.
func TestBenchStreamReadsSmoke(t *testing.T) {
	rep, err := RunReads(context.Background(), ReadsOptions{WriteShares: []float64{1, 0.5}, Streams: 2, Rate: 100_000,
		RequestRecords: 100, Window: 5000, Duration: 400 * time.Millisecond, Warmup: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Reads != 0 || rep.Rows[0].Writes == 0 || rep.Rows[1].Reads == 0 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	r := rep.Rows[1]
	if r.Errors != 0 || r.IndexNodesMean < 1 || r.VisitsAgree != 1 || r.SearchShare <= 0 || r.SearchP50Us <= 0 {
		t.Errorf("mixed row %+v", r)
	}
	a := rep.Aggregate
	if a == nil || !a.Match || !a.NodesAgree || a.Records != 1_000_000 || a.EdgeBlocks != 2 || a.Ratio < 100 {
		t.Errorf("aggregate %+v", a)
	}
	t.Log("\n" + rep.Markdown())
}
