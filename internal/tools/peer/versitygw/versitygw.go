// Package versitygw runs the Versity S3 Gateway (github.com/versity/versitygw, Apache-2.0) as
// its own process: a real S3-compatible server over a local directory (its posix backend),
// for Kawkab's object-store benchmarks and the lab (issue 20: "a real S3-compatible server as
// a separate process for benchmarks and the lab"). Tests and the demo use the in-process
// gofakes3 server of package s3store instead; both are reached through s3store.Store, the
// same client any S3 endpoint is reached with.
//
// The binary is built from the Go module proxy by scripts/fetch-versitygw.sh into a cache
// outside the repository (docs/kawkab.md, "Object store tier").
package versitygw

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"meridian/internal/kawkab/s3store"
	"meridian/internal/tools/peer"
)

// DefaultVersion is the VersityGW release the fetch script builds.
const DefaultVersion = "v1.8.0"

// EnvBinary names an environment variable that points at a versitygw binary to use instead
// of fetching one.
const EnvBinary = "MERIDIAN_VERSITYGW"

// Options start a gateway.
type Options struct {
	// Binary is the versitygw executable; empty: $MERIDIAN_VERSITYGW, else the one
	// scripts/fetch-versitygw.sh builds (or finds in its cache).
	Binary string
	// Version is the release the fetch script builds (empty: DefaultVersion).
	Version string
	// Dir is the gateway's working directory: its buckets live in Dir/root (one
	// subdirectory per bucket, one file per object) and its output in Dir/versitygw.log.
	// Created if absent.
	Dir string
	// Host is where the process runs (zero: this machine on 127.0.0.1).
	Host peer.Host
	// Port is the port it listens on (0: a free one, picked before the start).
	Port int
	// AccessKey and SecretKey are the root user's credentials (empty: random ones; they are
	// passed in the environment, never on the command line, where ps would show them).
	AccessKey, SecretKey string
	// Region is the S3 region requests are signed for (empty: us-east-1).
	Region string
	// StartTimeout bounds the wait for the gateway to answer (0: 60 s).
	StartTimeout time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Gateway is a running VersityGW process.
type Gateway struct {
	proc     peer.Process
	endpoint string
	region   string
	access   string
	secret   string
	logPath  string
}

// Start runs a gateway and waits (at most o.StartTimeout) until it answers S3 requests. The
// process lives until Stop or until ctx is done.
func Start(ctx context.Context, o Options) (*Gateway, error) {
	if o.Dir == "" {
		return nil, errors.New("versitygw: no working directory")
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("versitygw: port %d out of range", o.Port)
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		return nil, errors.New("versitygw: give both an access key and a secret key, or neither")
	}
	if o.Host.Addr == "" {
		o.Host = peer.Host{Name: "versitygw", Addr: "127.0.0.1"}
	}
	if net.ParseIP(o.Host.Addr) == nil {
		return nil, fmt.Errorf("versitygw: host address %q is not an IP address", o.Host.Addr)
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.AccessKey == "" {
		o.AccessKey, o.SecretKey = randomKey(10), randomKey(20)
	}
	bin, err := resolveBinary(ctx, o)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(o.Dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("versitygw: %w", err)
	}
	if o.Port == 0 {
		if o.Port, err = freePort(o.Host.Addr); err != nil {
			return nil, err
		}
	}
	listen := net.JoinHostPort(o.Host.Addr, strconv.Itoa(o.Port))
	g := &Gateway{
		endpoint: "http://" + listen,
		region:   o.Region,
		access:   o.AccessKey,
		secret:   o.SecretKey,
		logPath:  filepath.Join(o.Dir, "versitygw.log"),
	}
	// The credentials go in the environment (ROOT_ACCESS_KEY, ROOT_SECRET_KEY: the gateway's
	// own variables), so they appear neither in ps nor in the log's header.
	host := o.Host
	inner := host.Command
	host.Command = func(ctx context.Context, name string, args ...string) *exec.Cmd {
		var cmd *exec.Cmd
		if inner != nil {
			cmd = inner(ctx, name, args...)
		} else {
			cmd = exec.CommandContext(ctx, name, args...)
		}
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+o.AccessKey, "ROOT_SECRET_KEY="+o.SecretKey)
		return cmd
	}
	// The posix backend keeps object metadata (ETags, content types) in extended attributes;
	// --nometa drops them, because the directory may be on a file system without user
	// xattrs (tmpfs before Linux 6.6) and Kawkab needs none of them. --log-level silent: no
	// per-request logging in the measured path.
	args := []string{"--port", listen, "--region", o.Region, "--log-level", "silent",
		"posix", "--nometa", root}
	header := fmt.Sprintf("=== versitygw %s on %s at %s", bin, listen, time.Now().UTC().Format(time.RFC3339))
	if _, err := g.proc.Start(ctx, host, g.logPath, o.Dir, header, bin, args...); err != nil {
		return nil, err
	}
	if err := g.waitReady(ctx, o.StartTimeout); err != nil {
		g.Stop()
		return nil, fmt.Errorf("%w\n%s", err, peer.TailFile(g.logPath, 20))
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "versitygw: serving %s (buckets in %s)\n", g.endpoint, root)
	}
	return g, nil
}

func resolveBinary(ctx context.Context, o Options) (string, error) {
	if o.Binary != "" {
		return o.Binary, nil
	}
	if b := os.Getenv(EnvBinary); b != "" {
		return b, nil
	}
	script, err := peer.FindScript("scripts/fetch-versitygw.sh")
	if err != nil {
		return "", fmt.Errorf("versitygw: %w (or set %s)", err, EnvBinary)
	}
	version := o.Version
	if version == "" {
		version = DefaultVersion
	}
	bin, err := peer.FetchLibDir(ctx, script, version, o.Log)
	if err != nil {
		return "", fmt.Errorf("versitygw: %w", err)
	}
	return bin, nil
}

// waitReady polls the endpoint until the gateway answers HTTP at all (an unsigned request
// gets an S3 error document: the server is up) or the process exits.
func (g *Gateway) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	// Bounded: one try every 100 ms until the timeout.
	for {
		if exited, err := g.proc.Exited(); exited {
			return fmt.Errorf("versitygw: exited during start: %v", err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.endpoint+"/", nil)
		if err != nil {
			return fmt.Errorf("versitygw: %w", err)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("versitygw: not answering at %s after %v", g.endpoint, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Endpoint is the gateway's URL, e.g. http://127.0.0.1:7070.
func (g *Gateway) Endpoint() string { return g.endpoint }

// Pid is the gateway process's id (for its CPU time).
func (g *Gateway) Pid() int { return g.proc.Pid() }

// LogFile is the path of the gateway's output.
func (g *Gateway) LogFile() string { return g.logPath }

// Config is an s3store configuration for the gateway and bucket: path-style addressing and
// the root user's credentials. Checksums only when required: the gateway returns no checksum
// with a ranged GET (S3 does not either), which the SDK's default validation reports on every
// read as a debug line; uploads stay covered by the SHA-256 of the signed payload.
func (g *Gateway) Config(bucket string) s3store.Config {
	return s3store.Config{
		Endpoint:              g.endpoint,
		Region:                g.region,
		Bucket:                bucket,
		PathStyle:             true,
		AccessKeyID:           g.access,
		SecretAccessKey:       g.secret,
		ChecksumsWhenRequired: true,
	}
}

// Stop ends the gateway: SIGTERM, then SIGKILL after 10 s.
func (g *Gateway) Stop() error {
	if err := g.proc.Stop(10*time.Second, 20*time.Second); err != nil {
		return fmt.Errorf("versitygw: stop: %w", err)
	}
	return nil
}

func randomKey(bytes int) string {
	b := make([]byte, bytes)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("versitygw: crypto/rand: %v", err)) // never fails on Linux
	}
	return hex.EncodeToString(b)
}

// freePort asks the kernel for a free TCP port on addr. Another process could take it before
// the gateway binds it; the start then fails with the gateway's own error in the message.
func freePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("versitygw: finding a free port on %s: %w", addr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
