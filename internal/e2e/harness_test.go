package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"meridian/client"
)

// binPath is the meridian binary built once by TestMain.
var binPath string

// waitLimit bounds every wait of these tests. It is generous on purpose: the machines that
// run them are shared and noisy, and no test asserts a duration.
const waitLimit = 30 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // every test skips itself; no need to build
	}
	dir, err := os.MkdirTemp("", "meridian-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "meridian")
	build := exec.Command("go", "build", "-tags", "pebblegozstd", "-o", binPath, "meridian/cmd/meridian")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building the meridian binary: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts real server processes (skipped with -short)")
	}
}

// nodeSpec places one node: one per region of gcp-meteorshower-3, each on its own loopback
// address.
type nodeSpec struct{ name, region, host string }

var threeNodes = []nodeSpec{
	{"n1", "europe", "127.0.0.2"},
	{"n2", "us", "127.0.0.3"},
	{"n3", "asia", "127.0.0.4"},
}

// proc is one node of a test cluster and, while it runs, its server process.
type proc struct {
	nodeSpec
	listen, peerListen, metrics string
	dataDir                     string
	logPath                     string
	// diskReserve is passed as --disk-reserve ("": the server's default, sized for a node's
	// own disk). The tests share one machine's disk, so newCluster sets a small one.
	diskReserve string

	cmd  *exec.Cmd     // nil when not running
	done chan struct{} // closed when cmd has exited
}

func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// cluster is a set of meridian server processes sharing one configuration file.
type cluster struct {
	t       *testing.T
	dir     string
	cfgPath string
	cfgYAML string
	nodes   []*proc
	byName  map[string]*proc

	mu      sync.Mutex
	clients []*client.Client
}

// newCluster writes the configuration of a cluster of specs into a temporary directory. The
// keyspace demo (quorum, 1 replica per region, 16 partitions) lives in ksRegions (nil: every
// region of the topology). Nothing is started yet. Every process is SIGKILLed when the test
// ends, and the tails of the server logs are printed if it failed.
func newCluster(t *testing.T, specs []nodeSpec, ksRegions []string) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), byName: map[string]*proc{}}
	var hosts []string
	for _, s := range specs {
		hosts = append(hosts, s.host, s.host, s.host) // listen, peer_listen and metrics
	}
	addrs := freeAddrs(t, hosts)
	for i, s := range specs {
		p := &proc{
			nodeSpec:    s,
			listen:      addrs[3*i],
			peerListen:  addrs[3*i+1],
			metrics:     addrs[3*i+2],
			dataDir:     filepath.Join(c.dir, "data", s.name),
			diskReserve: "32MiB",
			logPath:     filepath.Join(c.dir, s.name+".log"),
		}
		c.nodes = append(c.nodes, p)
		c.byName[s.name] = p
	}
	c.cfgYAML = c.configYAML(ksRegions)
	c.cfgPath = filepath.Join(c.dir, "cluster.yaml")
	if err := os.WriteFile(c.cfgPath, []byte(c.cfgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.mu.Lock()
		for _, cl := range c.clients {
			cl.Close()
		}
		c.mu.Unlock()
		c.killAll()
		if t.Failed() {
			c.dumpLogs()
		}
	})
	return c
}

func (c *cluster) configYAML(ksRegions []string) string {
	var b strings.Builder
	b.WriteString("cluster: e2e\ntopology: gcp-meteorshower-3\nnodes:\n")
	for _, p := range c.nodes {
		fmt.Fprintf(&b, "  - name: %s\n    region: %s\n    listen: %s\n    peer_listen: %s\n    metrics: %s\n", p.name, p.region, p.listen, p.peerListen, p.metrics)
	}
	b.WriteString("keyspaces:\n  - name: demo\n    protocol: quorum\n")
	if ksRegions != nil {
		fmt.Fprintf(&b, "    regions: [%s]\n", strings.Join(ksRegions, ", "))
	}
	b.WriteString("    replicas_per_region: 1\n    partitions: 16\n")
	b.WriteString("anti_entropy:\n  interval: 500ms\n")
	return b.String()
}

// freeAddrs returns one free host:port per host. All listeners stay open until every port
// is chosen, so no port is handed out twice.
func freeAddrs(t *testing.T, hosts []string) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for _, h := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(h, "0"))
		if err != nil {
			t.Fatalf("picking a free port on %s: %v", h, err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out
}

func (c *cluster) node(name string) *proc {
	c.t.Helper()
	p, ok := c.byName[name]
	if !ok {
		c.t.Fatalf("no node %q in the test cluster", name)
	}
	return p
}

func (c *cluster) names() []string {
	var out []string
	for _, p := range c.nodes {
		out = append(out, p.name)
	}
	return out
}

// start starts node name's server process (same configuration and data directory every
// time). Its output is appended to the node's log file.
func (c *cluster) start(name string) {
	c.t.Helper()
	c.startWith(name, "", "--data-dir", c.node(name).dataDir)
}

// startWith starts node name's server process with `server --config FILE --node NAME` and
// extra arguments; note goes into the log's start line.
func (c *cluster) startWith(name, note string, extra ...string) {
	c.t.Helper()
	p := c.node(name)
	if p.running() {
		c.t.Fatalf("start %s: already running", name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== e2e: starting %s%s at %s\n", name, note, time.Now().Format(time.RFC3339Nano))
	args := append([]string{"server", "--config", c.cfgPath, "--node", name}, extra...)
	if p.diskReserve != "" {
		args = append(args, "--disk-reserve", p.diskReserve)
	}
	cmd := exec.Command(binPath, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logf, "=== e2e: %s exited at %s: %v\n", name, time.Now().Format(time.RFC3339Nano), err)
		logf.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
}

func (c *cluster) startAll() {
	c.t.Helper()
	for _, p := range c.nodes {
		c.start(p.name)
	}
}

// kill SIGKILLs the named nodes (all of them first, then waits for each to exit).
func (c *cluster) kill(names ...string) {
	c.t.Helper()
	var procs []*proc
	for _, n := range names {
		procs = append(procs, c.node(n))
	}
	for _, p := range procs {
		if p.running() {
			p.cmd.Process.Kill()
		}
	}
	for _, p := range procs {
		if p.cmd == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(waitLimit):
			c.t.Errorf("%s (pid %d) did not exit within %v of SIGKILL", p.name, p.cmd.Process.Pid, waitLimit)
		}
		p.cmd = nil
	}
}

func (c *cluster) killAll() { c.kill(c.names()...) }

// dumpLogs prints the tail of every node's log.
func (c *cluster) dumpLogs() {
	for _, p := range c.nodes {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			c.t.Logf("--- %s log: %v", p.name, err)
			continue
		}
		c.t.Logf("--- tail of %s log (%s):\n%s", p.name, p.logPath, tail(string(b), 40))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// client returns a new client connected to node name, closed when the test ends. Use a new
// one after a restart: a gRPC connection to a dead node backs off its reconnections.
func (c *cluster) client(name string) *client.Client {
	c.t.Helper()
	cl, err := client.Dial(c.node(name).listen)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl
}

// waitReady polls each named node with a Get at ONE (a missing key is success) until it
// answers, failing the test if the process exits or waitLimit passes.
func (c *cluster) waitReady(names ...string) {
	c.t.Helper()
	for _, name := range names {
		p := c.node(name)
		if p.cmd == nil {
			c.t.Fatalf("waitReady %s: not started", name)
		}
		cl := c.client(name)
		deadline := time.Now().Add(waitLimit)
		var lastErr error
		for {
			select {
			case <-p.done:
				c.t.Fatalf("%s exited while starting; see its log below", name)
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := cl.Get(ctx, "demo", []byte("e2e-readiness-probe"), client.Consistency("ONE"), client.Timeout(time.Second))
			cancel()
			if err == nil {
				break
			}
			lastErr = err
			if time.Now().After(deadline) {
				c.t.Fatalf("%s not ready within %v: last error: %v", name, waitLimit, lastErr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// transient reports whether err is what a request may legitimately get while a node is down
// or restarting: a timeout or unavailability, never a wrong answer.
func transient(err error) bool {
	switch client.CodeOf(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// eventually calls f until it returns nil, failing the test after waitLimit with f's last
// error. f itself fails the test (t.Fatal) on outcomes no retry may fix.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done within %v; last error: %v", what, waitLimit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 15*time.Second)
}

// cliResult is the outcome of one run of the meridian binary.
type cliResult struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("meridian %s: exit %d, stdout %q, stderr %q", strings.Join(quoteAll(r.args), " "), r.code, r.stdout, r.stderr)
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'") {
			a = strconv.Quote(a)
		}
		if len(a) > 60 {
			a = a[:40] + fmt.Sprintf("...(%d bytes)", len(a))
		}
		out[i] = a
	}
	return out
}

// runCLI runs the meridian binary with args, bounded by waitLimit.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{args: args, stdout: stdout.String(), stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("%v: did not finish within %v", r, waitLimit)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running meridian %v: %v", args, err)
	}
	return r
}

// mustSucceed fails the test unless r exited 0.
func (r cliResult) mustSucceed(t *testing.T) cliResult {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%v: want exit 0", r)
	}
	return r
}

// mustFailOneLine fails the test unless r exited non-zero with exactly one line on stderr,
// starting with "meridian: " and containing every one of want.
func (r cliResult) mustFailOneLine(t *testing.T, want ...string) {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("%v: want a non-zero exit", r)
	}
	if !strings.HasPrefix(r.stderr, "meridian: ") || !strings.HasSuffix(r.stderr, "\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("%v: want exactly one line on stderr starting with \"meridian: \"", r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("%v: stderr does not mention %q", r, w)
		}
	}
}

// pause stops the node with SIGSTOP and waits until every thread of the process is stopped.
// kill(2) only queues the signal: the process stops when each thread next enters the kernel,
// and on a loaded machine (CI) a request sent right after the signal can still be served.
// /proc/PID/task/*/stat shows each thread's state ('T' stopped, 't' traced).
func (p *proc) pause(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", p.name, err)
	}
	eventually(t, "node "+p.name+" stopped by SIGSTOP", func() error {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", p.cmd.Process.Pid))
		if err != nil || len(tasks) == 0 {
			return fmt.Errorf("no threads listed for pid %d: %v", p.cmd.Process.Pid, err)
		}
		for _, path := range tasks {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			// The state follows the command name, which is in parentheses and may hold spaces.
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			if i < 0 || i+2 >= len(s) {
				return fmt.Errorf("%s: unexpected format %q", path, s)
			}
			if st := s[i+2]; st != 'T' && st != 't' {
				return fmt.Errorf("thread %s in state %c", filepath.Base(filepath.Dir(path)), st)
			}
		}
		return nil
	})
}
