package kafka

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"meridian/internal/tools/peer"
)

// fetchLib returns the jar directory for the integration tests: $MERIDIAN_KAFKA_LIB, else
// what scripts/fetch-kafka.sh resolves (it downloads from Maven Central the first time,
// into $MERIDIAN_CACHE, default ~/.cache/meridian, and answers from that cache afterwards).
// It skips the test, saying why, when Java or Maven is missing or the fetch fails.
func fetchLib(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("skipping: java is not installed (Kafka 4 needs Java 17 or later)")
	}
	if env := os.Getenv(LibDirEnv); env != "" {
		return env
	}
	script, err := peer.FindScript("scripts/fetch-kafka.sh")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	lib, err := peer.FetchLibDir(ctx, script, DefaultVersion, testLog{t})
	if err != nil {
		// The script answers from its cache first, and says when mvn is missing.
		t.Skipf("skipping: scripts/fetch-kafka.sh could not provide Kafka %s (is Maven installed, is Maven Central reachable? or set $%s to a jar directory): %v",
			DefaultVersion, LibDirEnv, err)
	}
	t.Logf("jars of Kafka %s in %s (fetch or cache look-up: %.1fs)", DefaultVersion, lib, time.Since(began).Seconds())
	return lib
}

// testLog writes progress lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func testDir(t *testing.T) string {
	if d := os.Getenv("MERIDIAN_KAFKA_DIR"); d != "" {
		return d // keep the nodes' logs and data for inspection
	}
	return t.TempDir()
}

// TestKafkaIntegration starts one combined broker+controller on 127.0.0.41, produces 100,000
// 16-byte records at batch sizes 100 and 1,000 (acks=all, closed loop), a short acks=1 run
// and a short open-loop run, and reads every topic back with a consumer. It needs Java and
// Maven (or $MERIDIAN_KAFKA_LIB) and takes about half a minute once the jars are cached.
func TestKafkaIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts a Kafka JVM (about 30 s)")
	}
	lib := fetchLib(t)
	o := peer.Options{Hosts: []peer.Host{{Name: "kafka-1", Region: "local", Addr: "127.0.0.41"}}, Dir: testDir(t),
		Topology: oneRegion(), Log: testLog{t}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := Start(ctx, o, Options{LibDir: lib})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Kafka %s up in %.1fs (format %.1fs, start %.1fs), pids %v", c.Version(), time.Since(began).Seconds(),
		c.FormatTime.Seconds(), c.StartupTime.Seconds(), c.Pids())
	defer func() {
		began := time.Now()
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		t.Logf("stopped in %.1fs", time.Since(began).Seconds())
		if err := c.Stop(); err != nil { // idempotent
			t.Error(err)
		}
		if c.Running(0) {
			t.Error("node still running after Stop")
		}
		if log, err := os.ReadFile(c.LogFile(0)); err != nil || !bytes.Contains(log, []byte("Kafka Server started")) {
			t.Errorf("the broker's log (%v) lacks its start line: is logging bound?", err)
		}
	}()
	if c.Version() != DefaultVersion {
		t.Errorf("version %q", c.Version())
	}
	client := c.ClientOpts("local")

	run := func(name string, lo LoadOptions, want int64) LoadResult {
		t.Helper()
		lo.Client, lo.Topic, lo.ServerPids, lo.Log = client, name, c.Pids(), testLog{t}
		if err := CreateTopic(ctx, client, name, TopicOptions{BatchBytes: RecordBatchBytes(lo.BatchRecords, max(lo.RecordBytes, MinRecordBytes))}); err != nil {
			t.Fatal(err)
		}
		res, err := Produce(ctx, lo)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Errors != 0 {
			t.Errorf("%s: %d batches failed", name, res.Errors)
		}
		if want > 0 && res.TotalRecords != want {
			t.Errorf("%s: %d records acknowledged, want %d (stopped by %s)", name, res.TotalRecords, want, res.Stopped)
		}
		// One produce request per batch: the client neither split nor retried a batch.
		if res.ProduceRequests != res.TotalBatches {
			t.Errorf("%s: %d produce requests for %d batches", name, res.ProduceRequests, res.TotalBatches)
		}
		st, err := ReadBack(ctx, client, name, max(want, res.TotalRecords))
		if err != nil {
			t.Fatal(err)
		}
		if st.Records != res.TotalRecords || st.Distinct != res.TotalRecords || st.EndOffsets != res.TotalRecords || st.Malformed != 0 {
			t.Errorf("%s: read back %+v, want %d distinct records", name, st, res.TotalRecords)
		}
		return res
	}
	for _, b := range []int{100, 1000} {
		res := run(fmt.Sprintf("closed-b%d", b), LoadOptions{BatchRecords: b, Records: 100_000, Duration: time.Minute}, 100_000)
		if res.ServerCPUSeconds <= 0 && res.Seconds > 0.5 {
			t.Errorf("B=%d: no broker CPU time measured over %.1fs", b, res.Seconds)
		}
	}
	run("leader-acks", LoadOptions{BatchRecords: 500, Records: 20_000, Acks: AcksLeader}, 20_000)
	// Open loop at a modest rate for about a second: every scheduled batch is sent.
	res := run("open-loop", LoadOptions{BatchRecords: 1000, Records: 50_000, Rate: 50_000, Poisson: true, InFlight: 8}, 50_000)
	if res.Mode != "open" || res.TargetRecordsPerSec != 50_000 {
		t.Errorf("open loop: %+v", res)
	}
	if err := CreateTopic(ctx, client, "open-loop", TopicOptions{}); err == nil {
		t.Error("an existing topic was created again")
	}
}

// TestKafkaClusterIntegration starts three nodes, two of them controllers (a two-voter
// quorum formatted with --initial-controllers, and a broker-only node), and produces to a
// topic replicated on all three. It starts three JVMs, so it runs only when
// MERIDIAN_KAFKA_CLUSTER_TEST=1.
func TestKafkaClusterIntegration(t *testing.T) {
	if os.Getenv("MERIDIAN_KAFKA_CLUSTER_TEST") != "1" {
		t.Skip("skipping: set MERIDIAN_KAFKA_CLUSTER_TEST=1 to start a three-node Kafka cluster")
	}
	lib := fetchLib(t)
	var hosts []peer.Host
	for i := range 3 {
		hosts = append(hosts, peer.Host{Name: "kafka-" + strconv.Itoa(i+1), Region: "local", Addr: "127.0.0." + strconv.Itoa(42+i)})
	}
	o := peer.Options{Hosts: hosts, Dir: testDir(t), Topology: oneRegion(), Log: testLog{t}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, o, Options{LibDir: lib, Controllers: 2, HeapMB: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if p, err := os.ReadFile(c.PropertiesFile(2)); err != nil || !strings.Contains(string(p), "process.roles=broker\n") {
		t.Errorf("node 3 is not a broker only: %v", err)
	}
	client := c.ClientOpts("local")
	if err := CreateTopic(ctx, client, "replicated", TopicOptions{ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	res, err := Produce(ctx, LoadOptions{Client: client, Topic: "replicated", BatchRecords: 1000, Records: 50_000, ServerPids: c.Pids(), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadBack(ctx, client, "replicated", 50_000)
	if err != nil || st.Distinct != 50_000 || res.TotalRecords != 50_000 {
		t.Errorf("produced %d, read back %+v (%v)", res.TotalRecords, st, err)
	}
}

// TestKafkaFig510 measures Fig. 5.10's Kafka numbers on this machine: for each batch size of
// 16-byte records, the closed-loop peak and the median batch latency at 70% of it, with the
// broker's CPU time per record. It reports, it asserts nothing about speed, and it runs only
// when MERIDIAN_KAFKA_BENCH=1 (MERIDIAN_KAFKA_BENCH_SECONDS sets each run's length, default 10).
func TestKafkaFig510(t *testing.T) {
	if os.Getenv("MERIDIAN_KAFKA_BENCH") != "1" {
		t.Skip("skipping: set MERIDIAN_KAFKA_BENCH=1 to measure Kafka at batch sizes 100 to 30,000")
	}
	secs := 10
	if s := os.Getenv("MERIDIAN_KAFKA_BENCH_SECONDS"); s != "" {
		var err error
		if secs, err = strconv.Atoi(s); err != nil || secs < 2 || secs > 120 {
			t.Fatalf("MERIDIAN_KAFKA_BENCH_SECONDS=%q: want 2 to 120", s)
		}
	}
	acks, err := ParseAcks(os.Getenv("MERIDIAN_KAFKA_BENCH_ACKS"))
	if err != nil {
		t.Fatal(err)
	}
	lib := fetchLib(t)
	o := peer.Options{Hosts: []peer.Host{{Name: "kafka-1", Region: "local", Addr: "127.0.0.41"}}, Dir: testDir(t),
		Topology: oneRegion(), Log: testLog{t}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c, err := Start(ctx, o, Options{LibDir: lib})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	client := c.ClientOpts("local")
	var table strings.Builder
	fmt.Fprintf(&table, "%8s %12s %8s %13s %13s %13s %13s %12s\n", "batch", "peak rec/s", "MB/s", "broker µs/rec", "client µs/rec",
		"p50 ms (peak)", "p50 ms (70%)", "70% rec/s")
	for _, b := range []int{100, 1000, 10_000, 30_000} {
		topic := fmt.Sprintf("fig510-b%d", b)
		if err := CreateTopic(ctx, client, topic, TopicOptions{BatchBytes: RecordBatchBytes(b, 16)}); err != nil {
			t.Fatal(err)
		}
		lo := LoadOptions{Client: client, Topic: topic, BatchRecords: b, Records: 1 << 40, Acks: acks,
			Duration: time.Duration(secs) * time.Second, Warmup: 2 * time.Second, InFlight: 4, ServerPids: c.Pids(), Log: testLog{t}}
		peak, loaded, err := PeakAndLoaded(ctx, lo, 0.7, 0)
		if err != nil {
			t.Fatalf("B=%d: %v", b, err)
		}
		fmt.Fprintf(&table, "%8d %12.0f %8.1f %13.3f %13.3f %13.3f %13.3f %12.0f\n", b, peak.RecordsPerSec, peak.MBPerSec,
			peak.ServerCPUPerRecordUs, peak.ClientCPUPerRecordUs, peak.P50Ms, loaded.P50Ms, loaded.RecordsPerSec)
	}
	t.Logf("Kafka %s, one partition, acks=%s, 16-byte records, closed loop with 4 batches in flight for the peak, open loop (Poisson, 4 producers) at 70%% of it:\n%s",
		c.Version(), acks, table.String())
}
