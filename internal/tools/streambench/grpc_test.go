package streambench

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// meridianBinary builds the meridian binary once for the tests that start servers.
func meridianBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts meridian server processes (skipped with -short)")
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "meridian-streambench-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "meridian")
		out, err := exec.Command("go", "build", "-tags", "pebblegozstd", "-o", binPath, "meridian/cmd/meridian").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("building meridian: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestParseMetrics(t *testing.T) {
	page := `# HELP meridian_stream_read_records_total Records sent.
# TYPE meridian_stream_read_records_total counter
meridian_stream_read_records_total{call="range"} 1500
meridian_stream_read_records_total{call="records"} 2.5e+03
meridian_stream_read_records_totalx 7
meridian_stream_historical_reads_total 3
garbage line
`
	m, err := parseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("meridian_stream_read_records_total"); got != 4000 {
		t.Errorf("read records %v, want 4000 (the labelled samples, not the longer name)", got)
	}
	if got := m.Sum("meridian_stream_historical_reads_total"); got != 3 {
		t.Errorf("historical reads %v", got)
	}
	if got := m.Sum("nonesuch"); got != 0 {
		t.Errorf("absent metric %v", got)
	}
}

func TestLatencyOf(t *testing.T) {
	var d []time.Duration
	for i := 1000; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	l := latencyOf(d, 2)
	if l.Count != 1000 || l.Errors != 2 || l.P50Ms != 500 || l.P99Ms != 990 || l.P999Ms != 999 || l.MaxMs != 1000 {
		t.Errorf("%+v", l)
	}
	if l := latencyOf(nil, 0); l.Count != 0 || l.P50Ms != 0 {
		t.Errorf("empty: %+v", l)
	}
}

func TestHistRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ uploaded, want uint64 }{{10_000_000, 1_000_000}, {1_000_000, 1_000_000}, {1, 1_000_000}, {0, 5}, {3_000_000, 1_000_000}} {
		for range 1000 {
			from, n := histRange(rng, c.uploaded, c.want)
			half := c.uploaded / 2
			if n == 0 || n > c.want || (half > 0 && (n > half || from+n > half)) {
				t.Fatalf("uploaded %d, want %d: from %d n %d", c.uploaded, c.want, from, n)
			}
		}
	}
}

func TestPace(t *testing.T) {
	start := time.Now()
	var calls []time.Time
	pace(context.Background(), start, start.Add(50*time.Millisecond), 10*time.Millisecond, func(s time.Time) { calls = append(calls, s) })
	if len(calls) != 5 {
		t.Fatalf("%d calls in 50 ms every 10 ms", len(calls))
	}
	for i, c := range calls {
		if c != start.Add(time.Duration(i)*10*time.Millisecond) {
			t.Errorf("call %d scheduled at %v", i, c.Sub(start))
		}
	}
}

func TestHistoricalOptionsValidated(t *testing.T) {
	for _, o := range []HistoricalOptions{
		{ObjectStore: "nfs"},
		{Phase1: time.Second, Warmup: 2 * time.Second},
		{Batch: 100_000},
		{AppendRate: -1},
	} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	o, err := HistoricalOptions{}.withDefaults()
	if err != nil || o.ReadRate != o.AppendRate || o.Batch != 1000 || o.HistRecords != 1_000_000 || o.ObjectStore != HistoricalStoreAuto {
		t.Errorf("defaults %+v, %v", o, err)
	}
}

func TestTargetsValidated(t *testing.T) {
	if _, err := (Options{Targets: []string{InProcess, "nonesuch"}}).withDefaults(); err == nil {
		t.Error("an unknown target kind was accepted")
	}
	o, err := Options{}.withDefaults()
	if err != nil || len(o.Targets) != 1 || o.Targets[0] != InProcess {
		t.Errorf("default targets %v, %v", o.Targets, err)
	}
}

func TestGRPCRowsLabelled(t *testing.T) {
	rep := sampleReport()
	rep.Options.Targets = []string{InProcess, GRPC}
	g := rep.Rows[0]
	g.Target = GRPC
	g.Peak.ClientCPUPerRecordUs = 0.125
	rep.Rows = append(rep.Rows, g)
	md := rep.Markdown()
	if !strings.Contains(md, "| meridian (grpc) | local | 100 |") || !strings.Contains(md, "| 0.125 |") || !strings.Contains(md, "`meridian server` process") {
		t.Errorf("markdown:\n%s", md)
	}
}

func sampleHistorical() *HistoricalReport {
	rep := &HistoricalReport{Cores: 2, Options: HistoricalOptions{Streams: 2, Batch: 1000, AppendRate: 500_000, ReadRate: 500_000, Phase1: 3 * time.Second, Phase2: 3 * time.Second, HistReaders: 2, HistRecords: 1000, On: time.Second, Off: time.Second, Cache: "4MiB"},
		ObjectStore: "dir", Primary: "n1", Reader: "n2", UploadedAtPhase2: 1 << 20,
		PrimaryReadRecords: 5000, RecentRecords: 5000}
	for i, name := range []string{"1", "2"} {
		p := Phase{Name: name, Seconds: 3, Appends: Latency{Count: 10, P50Ms: 0.5, P99Ms: 1.5, P999Ms: 2}, RecentReads: Latency{Count: 10, P50Ms: 0.4, P99Ms: 1}, AppendRecPerSec: 500_000}
		if i == 1 {
			p.Historical, p.HistoricalRecords, p.ReaderHistorical = Latency{Count: 4, P50Ms: 20, P99Ms: 30}, 4000, 4
			u := ProcessUse{Cores: 0.3}
			p.ObjectStore = &u
		}
		rep.Phases = append(rep.Phases, p)
	}
	for s := range 6 {
		rep.Timeline = append(rep.Timeline, TimelinePoint{Second: s, Appends: 500_000, Recent: 500_000, Historical: float64(s/3) * 1e6})
	}
	rep.cdfs = []cdfSeries{{"appends, phase 1", []float64{0.1, 0.5, 2}}, {"historical reads (reader)", []float64{10, 20}}}
	return rep
}

func TestHistoricalMarkdownAndChart(t *testing.T) {
	rep := sampleHistorical()
	md := rep.Markdown()
	for _, want := range []string{"Bytes the primary sent for historical reads: 0**", "| 2 | 500,000 | 0.500 | 1.50 | 2.00 |", "append p99 1.50 → 1.50 ms (+0%)"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	files, err := rep.Charts(t.TempDir())
	if err != nil || len(files) != 2 {
		t.Fatalf("charts %v: %v", files, err)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Fatalf("chart %s: %v", f, err)
		}
	}
}

// TestBenchStreamGRPCSmoke runs `bench stream --targets inproc,grpc` with tiny runs: a real
// server process, a stream per appender through the Go client.
func TestBenchStreamGRPCSmoke(t *testing.T) {
	exe := meridianBinary(t)
	rep, err := Run(context.Background(), Options{Batches: []int{1000}, Acks: []string{"memory"}, Targets: []string{InProcess, GRPC}, Exe: exe,
		Skip: []string{SystemKafka, SystemInfluxDB}, Appenders: 2, Duration: 800 * time.Millisecond, Warmup: 200 * time.Millisecond, MaxRecords: 2_000_000, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[1].Target != GRPC {
		t.Fatalf("rows %+v", rep.Rows)
	}
	g := rep.Rows[1]
	if g.Error != "" || g.Peak.RecordsPerSec <= 0 || g.Peak.Errors != 0 || g.Loaded.P50Ms <= 0 || g.Peak.ServerCPUSeconds <= 0 {
		t.Errorf("grpc row %+v", g)
	}
	t.Log("\n" + rep.Markdown())
}

// TestBenchStreamHistoricalSmoke runs `bench stream historical` with tiny phases: two server
// processes, VersityGW if cached (else a shared directory), the historical clients' process.
func TestBenchStreamHistoricalSmoke(t *testing.T) {
	exe := meridianBinary(t)
	rep, err := RunHistorical(context.Background(), HistoricalOptions{Streams: 1, AppendRate: 200_000, ReadRate: 20_000,
		Phase1: 3 * time.Second, Phase2: 2 * time.Second, Warmup: 500 * time.Millisecond, HistReaders: 1, HistRecords: 50_000,
		On: time.Second, Off: 200 * time.Millisecond, Exe: exe, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	if len(rep.Phases) != 2 {
		t.Fatalf("%d phases", len(rep.Phases))
	}
	p1, p2 := rep.Phases[0], rep.Phases[1]
	if p1.Appends.Count == 0 || p2.Appends.Count == 0 || p1.Appends.Errors+p2.Appends.Errors != 0 {
		t.Errorf("appends %+v %+v", p1.Appends, p2.Appends)
	}
	if rep.UploadedAtPhase2 == 0 || p2.Historical.Count == 0 || p2.HistoricalRecords == 0 || p2.ReaderHistorical == 0 {
		t.Errorf("no historical reads: uploaded %d, phase 2 %+v", rep.UploadedAtPhase2, p2)
	}
	if p1.Historical.Count != 0 || p1.PrimaryHistorical+p2.PrimaryHistorical != 0 {
		t.Errorf("historical reads in phase 1 or at the primary: %+v %+v", p1, p2)
	}
	if rep.PrimaryHistoricalBytes != 0 {
		t.Errorf("the primary sent %v bytes beyond the recent reads", rep.PrimaryHistoricalBytes)
	}
	if _, err := rep.Charts(t.TempDir()); err != nil {
		t.Error(err)
	}
}

// TestBenchStreamCommands runs the commands as a user does, with tiny runs: `meridian bench
// stream --targets grpc` and `meridian bench stream historical --hist-readers 0` (a control
// run) write their Markdown, JSON and charts.
func TestBenchStreamCommands(t *testing.T) {
	exe := meridianBinary(t)
	for _, c := range []struct {
		args  []string
		files []string
	}{
		{[]string{"bench", "stream", "--targets", "grpc", "--skip-peers", "kafka,influxdb", "--batches", "1000", "--acks", "memory", "--appenders", "1",
			"--duration", "600ms", "--warmup", "100ms"}, []string{"stream.md", "stream.json", "stream-ingest.png"}},
		{[]string{"bench", "stream", "historical", "--object-store", "dir", "--streams", "1", "--append-rate", "100000", "--read-rate", "10000",
			"--phase1", "1500ms", "--phase2", "1s", "--warmup", "200ms", "--hist-readers", "0"}, []string{"historical.md", "historical.json", "stream-historical.png"}},
	} {
		out := t.TempDir()
		cmd := exec.Command(exe, append(c.args, "--out", out)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, b)
		}
		for _, f := range c.files {
			if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
				t.Errorf("%v: %s: %v\n%s", c.args, f, err, b)
			}
		}
		if md, _ := os.ReadFile(filepath.Join(out, c.files[0])); strings.Contains(string(md), "failed:") || (c.args[2] == "historical" && !strings.Contains(string(md), "object_store: dir")) {
			t.Errorf("%v:\n%s", c.args, md)
		}
	}
}

func TestParseSSAndDelta(t *testing.T) {
	a := parseSS(`0      0      127.0.0.72:7000 127.0.0.1:40534 users:(("meridian",pid=10,fd=7))
	 bbr wscale:10,10 bytes_sent:1000 bytes_acked:900 bytes_received:50 segs_out:4
0      0      127.0.0.1:40600 127.0.0.74:9000 users:(("meridian",pid=10,fd=9))
	 cubic bytes_acked:4000 bytes_received:10
`)
	if len(a) != 2 || a["127.0.0.72:7000 127.0.0.1:40534"].Sent != 900 || a["127.0.0.1:40600 127.0.0.74:9000"].Received != 10 {
		t.Fatalf("%+v", a)
	}
	b := parseSS(`0      0      127.0.0.72:7000 127.0.0.1:40534 users:(("meridian",pid=10,fd=7))
	 bbr bytes_acked:1900 bytes_received:150
0      0      127.0.0.1:40600 127.0.0.74:9000 users:(("meridian",pid=10,fd=9))
	 cubic bytes_acked:9000 bytes_received:20
0      0      127.0.0.72:7001 127.0.0.73:5000 users:(("meridian",pid=10,fd=11))
	 cubic bytes_acked:77 bytes_received:33
0      0      127.0.0.73:7000 127.0.0.1:40999 users:(("meridian",pid=11,fd=7))
	 cubic bytes_acked:123456 bytes_received:1
`)
	d := tcpDelta(a, b, 10, tcpRoles{clientListen: "127.0.0.72:7000", peerAddrs: []string{"127.0.0.72:7001"}, objectStore: "127.0.0.74:9000"})
	if d != (TCPBytes{ToClients: 1000, FromClients: 100, ToObjectStore: 5000, FromObjectStore: 10, ToPeers: 77, FromPeers: 33}) {
		t.Errorf("%+v", d)
	}
}
