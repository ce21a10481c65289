// Package influxdb runs InfluxDB 1.x (influxd, Debian's `influxdb` package, 1.6.7) as a peer
// of Meridian's stream ingest (issue 20, thesis Fig. 5.10): one server as its own process
// with a generated configuration in a directory of its own, on a loopback (or lab) address,
// and a writer that appends batches of points over HTTP in line protocol (writer.go).
// docs/peers-influxdb.md says how it is set up and why.
package influxdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"meridian/internal/tools/peer"
)

// Defaults.
const (
	// DefaultBinary is the server's executable, looked up in PATH (Debian installs
	// /usr/bin/influxd).
	DefaultBinary = "influxd"
	// DefaultCacheMaxMemoryBytes is the shard cache's bound (InfluxDB's default is 1 GiB).
	DefaultCacheMaxMemoryBytes = 4 << 30
	// DefaultStartTimeout bounds the wait for /ping.
	DefaultStartTimeout = time.Minute
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 20 * time.Second
	// BinaryEnv names an influxd binary, overriding PATH.
	BinaryEnv = "MERIDIAN_INFLUXD"
)

// ErrNotInstalled is wrapped by Start's error when influxd is not found.
var ErrNotInstalled = errors.New("influxd is not installed (Debian: apt-get install -y influxdb)")

// Options start one server.
type Options struct {
	// Host is where it runs; the zero value is this machine on 127.0.0.1.
	Host peer.Host
	// Dir is the server's directory (configuration, meta, data, WAL, log); wiped at Start.
	Dir string
	// Binary is influxd's path ($MERIDIAN_INFLUXD, else "influxd" in PATH).
	Binary string
	// HTTPPort is the HTTP API's port and RPCPort the backup service's; 0 picks a free port
	// on the host's address.
	HTTPPort, RPCPort int
	// WALFsyncDelay is [data] wal-fsync-delay: 0 (the default) fsyncs the WAL before every
	// write is acknowledged.
	WALFsyncDelay time.Duration
	// CacheMaxMemoryBytes is [data] cache-max-memory-size (default 4 GiB).
	CacheMaxMemoryBytes int64
	// StartTimeout bounds the wait for /ping (default 1 minute).
	StartTimeout time.Duration
	// ExtraConfig are lines appended to the configuration (whole TOML sections).
	ExtraConfig []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// LookBinary is the influxd that Start would run, or an error wrapping ErrNotInstalled.
func LookBinary(binary string) (string, error) {
	if binary == "" {
		binary = os.Getenv(BinaryEnv)
	}
	if binary == "" {
		binary = DefaultBinary
	}
	p, err := exec.LookPath(binary)
	if err != nil {
		return "", fmt.Errorf("influxdb: %q: %w", binary, ErrNotInstalled)
	}
	return p, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("influxdb: no directory")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, fmt.Errorf("influxdb: directory %q: %w", o.Dir, err)
	}
	o.Dir = dir
	if o.Host.Addr == "" {
		o.Host.Addr = "127.0.0.1"
	}
	if o.Host.Name == "" {
		o.Host.Name = "influxdb"
	}
	if net.ParseIP(o.Host.Addr) == nil {
		return o, fmt.Errorf("influxdb: address %q is not an IP address", o.Host.Addr)
	}
	if o.Binary, err = LookBinary(o.Binary); err != nil {
		return o, err
	}
	if o.WALFsyncDelay < 0 || o.CacheMaxMemoryBytes < 0 || o.HTTPPort < 0 || o.RPCPort < 0 {
		return o, errors.New("influxdb: negative delay, cache size or port")
	}
	if o.CacheMaxMemoryBytes == 0 {
		o.CacheMaxMemoryBytes = DefaultCacheMaxMemoryBytes
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	for _, p := range []*int{&o.HTTPPort, &o.RPCPort} {
		if *p == 0 {
			if *p, err = freePort(o.Host.Addr); err != nil {
				return o, err
			}
		}
	}
	if o.HTTPPort == o.RPCPort {
		return o, fmt.Errorf("influxdb: the HTTP and RPC ports are both %d", o.HTTPPort)
	}
	return o, nil
}

// freePort is a TCP port free on addr a moment ago (the server binds it soon after; a race
// with another program is possible and makes Start fail with the server's log).
func freePort(addr string) (int, error) {
	l, err := net.Listen("tcp", hostPort(addr, 0))
	if err != nil {
		return 0, fmt.Errorf("influxdb: find a free port on %s: %w", addr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Server is one running influxd.
type Server struct {
	o          Options
	d          dirs
	proc       peer.Process
	procCancel context.CancelFunc
	version    string
	// StartupTime is how long the server took to answer /ping.
	StartupTime time.Duration
	client      *http.Client
}

// Start wipes o.Dir, writes the configuration there, starts influxd and returns once /ping
// answers (failing with the end of the server's log if it exits or does not answer within
// StartTimeout).
func Start(ctx context.Context, o Options) (*Server, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	d := dirsOf(o.Dir)
	if err := os.RemoveAll(d.Root); err != nil {
		return nil, fmt.Errorf("influxdb: wipe %s: %w", d.Root, err)
	}
	for _, p := range []string{d.Meta, d.Data, d.WAL} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("influxdb: %w", err)
		}
	}
	if err := os.WriteFile(d.Config, configFile(o, d), 0o644); err != nil {
		return nil, fmt.Errorf("influxdb: %w", err)
	}
	procCtx, procCancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Server{o: o, d: d, procCancel: procCancel, client: &http.Client{Timeout: 30 * time.Second}}
	header := fmt.Sprintf("=== meridian: starting influxd on %s (HTTP %d) at %s", o.Host.Addr, o.HTTPPort, time.Now().Format(time.RFC3339))
	began := time.Now()
	pid, err := s.proc.Start(procCtx, o.Host, d.LogFile, d.Root, header, o.Binary, "-config", d.Config)
	if err != nil {
		procCancel()
		return nil, fmt.Errorf("influxdb: %w", err)
	}
	o.logf("influxdb: started %s (pid %d) on %s, HTTP port %d, in %s", o.Binary, pid, o.Host.Addr, o.HTTPPort, d.Root)
	wctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := s.waitPing(wctx); err != nil {
		s.Stop()
		return nil, err
	}
	s.StartupTime = time.Since(began)
	o.logf("influxdb: %s up in %.1fs", s.version, s.StartupTime.Seconds())
	return s, nil
}

// waitPing polls /ping until it answers 204, failing early when the server exits.
func (s *Server) waitPing(ctx context.Context) error {
	var last error
	for {
		if exited, err := s.proc.Exited(); exited {
			return fmt.Errorf("influxdb: influxd exited while starting (%v); end of %s:\n%s", err, s.d.LogFile, peer.TailFile(s.d.LogFile, 30))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/ping", nil)
		resp, err := s.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				s.version = "InfluxDB " + resp.Header.Get("X-Influxdb-Version")
				return nil
			}
			err = fmt.Errorf("/ping answered %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("influxdb: gave up waiting for /ping (%v; last: %v); end of %s:\n%s", ctx.Err(), last, s.d.LogFile, peer.TailFile(s.d.LogFile, 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// URL is the HTTP API's base URL, e.g. http://127.0.0.1:8086.
func (s *Server) URL() string { return "http://" + hostPort(s.o.Host.Addr, s.o.HTTPPort) }

// Version is the server's version from /ping's X-Influxdb-Version header.
func (s *Server) Version() string { return s.version }

// Pid is influxd's process id.
func (s *Server) Pid() int { return s.proc.Pid() }

// Pids is []int{Pid()}, for the load's CPU accounting.
func (s *Server) Pids() []int { return []int{s.Pid()} }

// Running reports whether influxd is running.
func (s *Server) Running() bool { return s.proc.Running() }

// LogFile is the server's stdout and stderr.
func (s *Server) LogFile() string { return s.d.LogFile }

// ConfigFile is the configuration Start wrote.
func (s *Server) ConfigFile() string { return s.d.Config }

// Stop sends SIGTERM, waits up to 20 s, then SIGKILL. It is idempotent; the files stay.
func (s *Server) Stop() error {
	err := s.proc.Stop(stopGrace, time.Minute)
	s.procCancel()
	if err != nil {
		return fmt.Errorf("influxdb: %w", err)
	}
	return nil
}

// Query runs an InfluxQL statement (POST /query) and returns the response body (JSON).
func (s *Server) Query(ctx context.Context, db, q string) ([]byte, error) {
	form := url.Values{"q": {q}}
	if db != "" {
		form.Set("db", db)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/query", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("influxdb: query %q: %w", q, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("influxdb: query %q: %w", q, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("influxdb: query %q: %s: %s", q, resp.Status, strings.TrimSpace(string(body)))
	}
	if strings.Contains(string(body), `"error"`) {
		return nil, fmt.Errorf("influxdb: query %q: %s", q, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// CreateDatabase creates database db (with the autogen retention policy).
func (s *Server) CreateDatabase(ctx context.Context, db string) error {
	_, err := s.Query(ctx, "", "CREATE DATABASE "+quoteIdent(db))
	return err
}

// quoteIdent is an InfluxQL identifier in double quotes.
func quoteIdent(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
