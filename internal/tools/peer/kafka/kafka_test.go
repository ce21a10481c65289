package kafka

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"meridian/internal/tools/peer"
	"meridian/internal/topology"
)

func oneRegion() *topology.Topology {
	return topology.Equidistant("local", []string{"local"}, 1, 0)
}

// props parses server.properties into key → value, failing on a repeated key (the writer
// never relies on "later lines win" itself).
func props(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("line %q is not key=value", l)
		}
		if _, dup := out[k]; dup {
			t.Fatalf("key %s written twice", k)
		}
		out[k] = v
	}
	return out
}

func TestServerPropertiesSingleNode(t *testing.T) {
	o := peer.Options{Hosts: []peer.Host{{Name: "kafka-1", Region: "local", Addr: "127.0.0.31"}}, Dir: "/x", Topology: oneRegion()}
	ko, err := Options{}.withDefaults(&o)
	if err != nil {
		t.Fatal(err)
	}
	cc := ko.clusterConfig(o.Hosts)
	dirs := dirsOf("/x", "kafka-1")
	p := props(t, serverProperties(cc, 0, dirs))
	want := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          "1",
		"controller.quorum.bootstrap.servers":              "127.0.0.31:9093",
		"listeners":                                        "PLAINTEXT://127.0.0.31:9092,CONTROLLER://127.0.0.31:9093",
		"advertised.listeners":                             "PLAINTEXT://127.0.0.31:9092,CONTROLLER://127.0.0.31:9093",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"controller.listener.names":                        "CONTROLLER",
		"listener.security.protocol.map":                   "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs":                                         "/x/kafka-1/data",
		"num.partitions":                                   "1",
		"offsets.topic.replication.factor":                 "1",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		"auto.create.topics.enable":                        "false",
		"group.initial.rebalance.delay.ms":                 "0",
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %q, want %q", k, p[k], v)
		}
	}
	for _, k := range []string{"controller.quorum.voters", "log.flush.interval.messages", "message.max.bytes"} {
		if _, ok := p[k]; ok {
			t.Errorf("%s set by default", k)
		}
	}
	if len(p) != len(want) {
		t.Errorf("%d keys written, want %d: %v", len(p), len(want), p)
	}
	if got := formatArgs(cc, 0, "CID", nil, dirs); !slices.Equal(got, []string{"format", "--cluster-id", "CID", "--config", "/x/kafka-1/server.properties", "--standalone"}) {
		t.Errorf("format args %q", got)
	}
}

func TestServerPropertiesCluster(t *testing.T) {
	hosts := []peer.Host{
		{Name: "k1", Region: "local", Addr: "127.0.0.31"},
		{Name: "k2", Region: "local", Addr: "127.0.0.32"},
		{Name: "k3", Region: "local", Addr: "127.0.0.33"},
		{Name: "k4", Region: "local", Addr: "::1"},
	}
	o := peer.Options{Hosts: hosts, Dir: "/x", Topology: oneRegion()}
	ko, err := Options{Controllers: 2, BrokerPort: 19092, ControllerPort: 19093, Fsync: true, MaxMessageBytes: 4 << 20,
		ExtraConfig: []string{"num.io.threads=2"}}.withDefaults(&o)
	if err != nil {
		t.Fatal(err)
	}
	cc := ko.clusterConfig(hosts)
	for i, h := range hosts {
		p := props(t, serverProperties(cc, i, dirsOf("/x", h.Name)))
		if p["controller.quorum.bootstrap.servers"] != "127.0.0.31:19093,127.0.0.32:19093" {
			t.Errorf("%s: bootstrap servers %q", h.Name, p["controller.quorum.bootstrap.servers"])
		}
		if p["node.id"] != string(rune('1'+i)) {
			t.Errorf("%s: node.id %q", h.Name, p["node.id"])
		}
		for k, v := range map[string]string{"offsets.topic.replication.factor": "3", "transaction.state.log.min.isr": "2",
			"log.flush.interval.messages": "1", "message.max.bytes": "4194304", "replica.fetch.max.bytes": "4194304",
			"num.io.threads": "2"} {
			if p[k] != v {
				t.Errorf("%s: %s = %q, want %q", h.Name, k, p[k], v)
			}
		}
	}
	p2 := props(t, serverProperties(cc, 1, dirsOf("/x", "k2")))
	if p2["process.roles"] != "broker,controller" || p2["listeners"] != "PLAINTEXT://127.0.0.32:19092,CONTROLLER://127.0.0.32:19093" {
		t.Errorf("controller k2: %q, %q", p2["process.roles"], p2["listeners"])
	}
	p4 := props(t, serverProperties(cc, 3, dirsOf("/x", "k4")))
	if p4["process.roles"] != "broker" || p4["listeners"] != "PLAINTEXT://[::1]:19092" {
		t.Errorf("broker k4: %q, %q", p4["process.roles"], p4["listeners"])
	}
	ids := map[int]string{1: "AAAAAAAAAAAAAAAAAAAAAA", 2: "BBBBBBBBBBBBBBBBBBBBBB"}
	got := formatArgs(cc, 0, "CID", ids, dirsOf("/x", "k1"))
	if want := "1@127.0.0.31:19093:AAAAAAAAAAAAAAAAAAAAAA,2@127.0.0.32:19093:BBBBBBBBBBBBBBBBBBBBBB"; got[len(got)-2] != "--initial-controllers" || got[len(got)-1] != want {
		t.Errorf("controller format args %q", got)
	}
	if got := formatArgs(cc, 3, "CID", ids, dirsOf("/x", "k4")); got[len(got)-1] != "--no-initial-controllers" {
		t.Errorf("broker format args %q", got)
	}
}

func TestOptionsChecks(t *testing.T) {
	hosts := []peer.Host{{Name: "a", Region: "local", Addr: "127.0.0.31"}, {Name: "b", Region: "local", Addr: "::ffff:127.0.0.31"}}
	o := peer.Options{Hosts: hosts, Dir: "/x", Topology: oneRegion()}
	if _, err := (Options{}).withDefaults(&o); err == nil || !strings.Contains(err.Error(), "share address") {
		t.Errorf("shared address: %v", err)
	}
	o.Hosts = hosts[:1]
	for _, ko := range []Options{{HeapMB: 64}, {BrokerPort: 9093}, {ExtraConfig: []string{"novalue"}}, {ExtraConfig: []string{"a=b\nc=d"}}, {Controllers: -1}} {
		if _, err := ko.withDefaults(&o); err == nil {
			t.Errorf("%+v accepted", ko)
		}
	}
	ko, err := Options{Controllers: 5}.withDefaults(&o)
	if err != nil || ko.Controllers != 1 || ko.HeapMB != 1024 || ko.Version != DefaultVersion || ko.StartTimeout != DefaultStartTimeout {
		t.Errorf("defaults %+v, %v", ko, err)
	}
}

func TestRandomUUID(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		s, err := randomUUID()
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != 22 || strings.HasPrefix(s, "-") || seen[s] {
			t.Fatalf("bad or repeated UUID %q", s)
		}
		seen[s] = true
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(b) != 16 || b[6]>>4 != 4 || b[8]>>6 != 2 {
			t.Fatalf("UUID %q decodes to %x (%v)", s, b, err)
		}
	}
}

func TestLibVersion(t *testing.T) {
	dir := t.TempDir()
	touch := func(names ...string) {
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := libVersion(dir); err == nil {
		t.Error("empty directory accepted")
	}
	touch("kafka_2.13-4.4.0.jar", "kafka-clients-4.4.0.jar", "kafka-server-4.4.0.jar", "kafka-raft-4.4.0.jar", "kafka-metadata-4.4.0.jar")
	if _, err := libVersion(dir); err == nil || !strings.Contains(err.Error(), "kafka-storage") {
		t.Errorf("missing kafka-storage: %v", err)
	}
	touch("kafka-storage-4.4.0.jar")
	if _, err := libVersion(dir); err == nil || !strings.Contains(err.Error(), "SLF4J") {
		t.Errorf("missing logging binding: %v", err)
	}
	touch("log4j-slf4j-impl-2.25.5.jar")
	if v, err := libVersion(dir); err != nil || v != "4.4.0" {
		t.Errorf("version %q, %v", v, err)
	}
}

func TestParseProcStat(t *testing.T) {
	// A JVM's line, with a command name that holds spaces and parentheses.
	line := "4242 (java (x) y) S 1 4242 4242 0 -1 4194560 180324 0 12 0 1234 567 0 0 20 0 61 0 9160 4480638976 123456 18446744073709551615 1 1 0 0 0 0 0 2 16800975 0 0 0 17 1 0 0 0 0 0\n"
	u, s, err := parseProcStat([]byte(line))
	if err != nil || u != 1234 || s != 567 {
		t.Fatalf("utime %d stime %d, %v", u, s, err)
	}
	if got := ticksToDuration(u + s); got != 18010*time.Millisecond {
		t.Errorf("%d ticks = %v", u+s, got)
	}
	for _, bad := range []string{"", "4242 java S 1", "4242 (java) S 1 2 3", "4242 (java) S 1 4242 4242 0 -1 4194560 180324 0 12 0 x 567 0"} {
		if _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// This process: a real line parses, and the time does not go backwards.
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for x, i := 0, 0; i < 20_000_000; i++ {
		x += i
		_ = x
	}
	after, err := ProcessesCPU([]int{os.Getpid()})
	if err != nil || after < before {
		t.Errorf("CPU %v then %v (%v)", before, after, err)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Error("pid -1 read")
	}
}

// TestRecordBatchBytes checks the size formula against kmsg's encoding of the same batch.
func TestRecordBatchBytes(t *testing.T) {
	for _, c := range []struct{ b, r int }{{1, 16}, {100, 16}, {1000, 16}, {30000, 16}, {70, 200}, {20000, 4096}} {
		var recs []byte
		for i := 0; i < c.b; i++ {
			r := kmsg.Record{OffsetDelta: int32(i), Value: make([]byte, c.r)}
			body := len(r.AppendTo(nil)) - 1 // Length 0 encodes in one byte
			r.Length = int32(body)
			recs = r.AppendTo(recs)
		}
		batch := kmsg.RecordBatch{Magic: 2, NumRecords: int32(c.b), Records: recs, LastOffsetDelta: int32(c.b - 1)}
		if got, want := RecordBatchBytes(c.b, c.r), len(batch.AppendTo(nil)); got != want {
			t.Errorf("B=%d R=%d: %d bytes, kmsg encodes %d", c.b, c.r, got, want)
		}
	}
	// Fig. 5.10's largest batch fits Kafka's default message.max.bytes.
	if n := RecordBatchBytes(30000, 16); n > defaultMaxMessageBytes {
		t.Errorf("30,000 16-byte records take %d bytes", n)
	}
}

func TestLoadOptions(t *testing.T) {
	ok := LoadOptions{Topic: "t", BatchRecords: 100, Records: 1000}
	lo, err := ok.withDefaults()
	if err != nil || lo.RecordBytes != 16 || lo.InFlight != 4 || lo.Duration != time.Minute {
		t.Errorf("defaults %+v, %v", lo, err)
	}
	open := ok
	open.Rate = 1000
	if lo, err := open.withDefaults(); err != nil || lo.InFlight != 64 {
		t.Errorf("open-loop defaults %+v, %v", lo, err)
	}
	for _, bad := range []LoadOptions{
		{BatchRecords: 1, Records: 1},
		{Topic: "t", Records: 1},
		{Topic: "t", BatchRecords: 1},
		{Topic: "t", BatchRecords: 1, Records: 1, RecordBytes: 8},
		{Topic: "t", BatchRecords: 1, Records: 1, Rate: -1},
		{Topic: "t", BatchRecords: 1, Records: 1, Warmup: time.Minute},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	for s, want := range map[string]Acks{"all": AcksAll, "-1": AcksAll, "1": AcksLeader, "leader": AcksLeader} {
		if got, err := ParseAcks(s); err != nil || got != want {
			t.Errorf("ParseAcks(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseAcks("0"); err == nil {
		t.Error("acks=0 accepted")
	}
}
