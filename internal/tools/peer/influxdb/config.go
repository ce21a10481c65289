package influxdb

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
)

// dirs are where one server keeps its files, under Options.Dir.
type dirs struct {
	Root, Meta, Data, WAL string
	Config, LogFile       string
}

func dirsOf(root string) dirs {
	return dirs{
		Root:    root,
		Meta:    filepath.Join(root, "meta"),
		Data:    filepath.Join(root, "data"),
		WAL:     filepath.Join(root, "wal"),
		Config:  filepath.Join(root, "influxdb.conf"),
		LogFile: filepath.Join(root, "influxd.log"),
	}
}

// quote is a TOML basic string.
func quote(s string) string { return strconv.Quote(s) }

// hostPort joins an address and a port (IPv6 in brackets).
func hostPort(addr string, port int) string {
	return fmt.Sprintf("%s:%d", bracket(addr), port)
}

func bracket(addr string) string {
	if bytes.IndexByte([]byte(addr), ':') >= 0 {
		return "[" + addr + "]"
	}
	return addr
}

// configFile is influxd's configuration (influxdb.conf, TOML) for one benchmark server.
// Every setting written is commented with why; everything else keeps InfluxDB 1.6's default
// (`influxd config` prints them). docs/peers-influxdb.md has the same table.
func configFile(o Options, d dirs) []byte {
	var b bytes.Buffer
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# Written by meridian's InfluxDB peer (internal/tools/peer/influxdb) for one benchmark run.")
	line("# No usage statistics are sent to InfluxData (the default sends them every 24 h).")
	line("reporting-enabled = false")
	line("# The RPC service (backup and restore), on the loopback address and a port of its own so")
	line("# that two servers on one machine do not collide (default 127.0.0.1:8088).")
	line("bind-address = %s", quote(hostPort(o.Host.Addr, o.RPCPort)))
	line("")
	line("[meta]")
	line("  dir = %s", quote(d.Meta))
	line("  # CREATE DATABASE makes the autogen retention policy (infinite, 7-day shard groups).")
	line("  retention-autocreate = true")
	line("  logging-enabled = false")
	line("")
	line("[data]")
	line("  dir = %s", quote(d.Data))
	line("  wal-dir = %s", quote(d.WAL))
	line("  # 0 (the default): a write is fsynced to the WAL before it is acknowledged, as Meridian's")
	line("  # `local` acknowledgement fsyncs. InfluxDB's docs advise 0-100ms for non-SSD disks to batch")
	line("  # fsyncs; Options.WALFsyncDelay sets it (then a write is acknowledged unsynced).")
	line("  wal-fsync-delay = %s", quote(o.WALFsyncDelay.String()))
	line("  # One series per writer: the in-memory index (the default) is the fastest for few series.")
	line("  index-version = \"inmem\"")
	line("  # No log line per query (the driver's count queries).")
	line("  query-log-enabled = false")
	line("  # A shard's in-memory cache rejects writes above this size (default 1 GiB). A write")
	line("  # burst at millions of points a second can outrun the cache's snapshots to TSM files")
	line("  # for a moment; the benchmark measures ingest, not that back-pressure, so it allows more.")
	line("  cache-max-memory-size = %d", o.CacheMaxMemoryBytes)
	line("  # The size at which the cache is snapshotted to a TSM file: the default (25 MiB), the")
	line("  # value InfluxDB's docs advise keeping unless compactions are measured to lag.")
	line("  cache-snapshot-memory-size = %d", int64(25<<20))
	line("  trace-logging-enabled = false")
	line("")
	line("[coordinator]")
	line("  write-timeout = \"10s\"")
	line("")
	line("[retention]")
	line("  # Nothing expires during a benchmark.")
	line("  enabled = false")
	line("")
	line("[shard-precreation]")
	line("  # Shards are created by the writes themselves; no background work.")
	line("  enabled = false")
	line("")
	line("[monitor]")
	line("  # No _internal database: its writes every 10 s would compete with the benchmark's.")
	line("  store-enabled = false")
	line("")
	line("[subscriber]")
	line("  enabled = false")
	line("")
	line("[http]")
	line("  enabled = true")
	line("  bind-address = %s", quote(hostPort(o.Host.Addr, o.HTTPPort)))
	line("  auth-enabled = false")
	line("  # No access-log line per request: at thousands of writes a second it costs CPU and disk.")
	line("  log-enabled = false")
	line("  suppress-write-log = true")
	line("  write-tracing = false")
	line("  pprof-enabled = false")
	line("  # The largest body a write may have (default 25 MB): a batch of 30,000 points is about")
	line("  # 1.3 MB of line protocol.")
	line("  max-body-size = %d", 25000000)
	line("")
	line("[logging]")
	line("  level = \"info\"")
	line("  suppress-logo = true")
	line("")
	line("[continuous_queries]")
	line("  enabled = false")
	line("  log-enabled = false")
	for _, l := range o.ExtraConfig {
		line("%s", l)
	}
	return b.Bytes()
}
