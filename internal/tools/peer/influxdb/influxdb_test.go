package influxdb

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"meridian/internal/tools/peer"
	"meridian/internal/tools/streambench/loadgen"
)

// settings parses the configuration into "section.key" → value, failing on a repeated key.
func settings(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	section := ""
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = strings.Trim(l, "[]") + "."
		default:
			k, v, ok := strings.Cut(l, " = ")
			if !ok {
				t.Fatalf("line %q is not key = value", l)
			}
			if _, dup := out[section+k]; dup {
				t.Fatalf("%s%s set twice", section, k)
			}
			out[section+k] = v
		}
	}
	return out
}

func TestConfigFile(t *testing.T) {
	o := Options{Host: peer.Host{Addr: "127.0.0.1"}, HTTPPort: 18086, RPCPort: 18088, CacheMaxMemoryBytes: 4 << 30}
	s := settings(t, configFile(o, dirsOf("/tmp/x")))
	want := map[string]string{
		"reporting-enabled":               "false",
		"bind-address":                    `"127.0.0.1:18088"`,
		"meta.dir":                        `"/tmp/x/meta"`,
		"data.dir":                        `"/tmp/x/data"`,
		"data.wal-dir":                    `"/tmp/x/wal"`,
		"data.wal-fsync-delay":            `"0s"`,
		"data.cache-max-memory-size":      "4294967296",
		"data.cache-snapshot-memory-size": "26214400",
		"http.bind-address":               `"127.0.0.1:18086"`,
		"http.log-enabled":                "false",
		"http.suppress-write-log":         "true",
		"monitor.store-enabled":           "false",
	}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("%s = %s, want %s", k, s[k], v)
		}
	}
	o.Host.Addr, o.WALFsyncDelay = "::1", 100*time.Millisecond
	s = settings(t, configFile(o, dirsOf("/tmp/x")))
	if s["http.bind-address"] != `"[::1]:18086"` || s["data.wal-fsync-delay"] != `"100ms"` {
		t.Errorf("IPv6 / fsync delay: %s %s", s["http.bind-address"], s["data.wal-fsync-delay"])
	}
}

func TestAppendPoints(t *testing.T) {
	got := string(AppendPoints(nil, []byte("s,w=2 v="), 1000, 5, 3))
	want := "s,w=2 v=5i 1005\ns,w=2 v=6i 1006\ns,w=2 v=7i 1007\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParseCount(t *testing.T) {
	n, err := parseCount([]byte(`{"results":[{"statement_id":0,"series":[{"name":"s","columns":["time","count"],"values":[["1970-01-01T00:00:00Z",123456]]}]}]}`))
	if err != nil || n != 123456 {
		t.Errorf("got %d, %v", n, err)
	}
	if n, err := parseCount([]byte(`{"results":[{"statement_id":0}]}`)); err != nil || n != 0 {
		t.Errorf("empty: got %d, %v", n, err)
	}
	if _, err := parseCount([]byte(`{"results":[{"statement_id":0,"error":"database not found: x"}]}`)); err == nil {
		t.Error("an error answer was accepted")
	}
}

func TestOptionsDefaults(t *testing.T) {
	if _, err := (Options{}).withDefaults(); err == nil {
		t.Error("no directory accepted")
	}
	if _, err := (Options{Dir: t.TempDir(), Binary: "/nonexistent/influxd"}).withDefaults(); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("missing binary: %v", err)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// TestInfluxDBIntegration starts influxd (skipped when it is not installed), writes 100,000
// points in batches of 1,000 closed loop from 2 writers and a short open-loop run, counts
// them back, and stops the server. About 10 s.
func TestInfluxDBIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts influxd (about 10 s)")
	}
	if _, err := LookBinary(""); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if d := os.Getenv("MERIDIAN_INFLUXDB_DIR"); d != "" {
		dir = d // keep the server's log and data for inspection
	}
	s, err := Start(ctx, Options{Dir: dir, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		if err := s.Stop(); err != nil { // idempotent
			t.Error(err)
		}
		if s.Running() {
			t.Error("influxd still running after Stop")
		}
	}()
	if !strings.HasPrefix(s.Version(), "InfluxDB 1.") {
		t.Errorf("version %q", s.Version())
	}
	if err := s.CreateDatabase(ctx, "bench"); err != nil {
		t.Fatal(err)
	}
	res, err := Write(ctx, s, LoadOptions{Database: "bench", Load: loadgen.Options{Workers: 2, BatchRecords: 1000, Records: 100_000, Duration: 20 * time.Second, Log: testLog{t}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.TotalRecords != 100_000 || res.Stopped != "records" {
		t.Errorf("closed loop: %d errors, %d records, stopped by %s", res.Errors, res.TotalRecords, res.Stopped)
	}
	if res.ServerCPUSeconds <= 0 && res.Seconds > 0.5 {
		t.Errorf("no server CPU time measured over %.1fs", res.Seconds)
	}
	n, err := s.Count(ctx, "bench")
	if err != nil {
		t.Fatal(err)
	}
	if n != 100_000 {
		t.Errorf("count after the closed loop: %d, want 100000", n)
	}
	// Open loop into another database (the series would collide: timestamps start at now).
	if err := s.CreateDatabase(ctx, "open"); err != nil {
		t.Fatal(err)
	}
	res, err = Write(ctx, s, LoadOptions{Database: "open", Load: loadgen.Options{Workers: 2, BatchRecords: 100, Records: 20_000, Rate: 20_000, Duration: 5 * time.Second, Log: testLog{t}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "open" || res.Errors != 0 {
		t.Errorf("open loop: mode %s, %d errors", res.Mode, res.Errors)
	}
	if n, err := s.Count(ctx, "open"); err != nil || n != res.TotalRecords {
		t.Errorf("count after the open loop: %d (%v), want %d", n, err, res.TotalRecords)
	}
	if _, err := s.Query(ctx, "bench", "SELECT nonsense FROM"); err == nil {
		t.Error("a malformed query was accepted")
	}
}
