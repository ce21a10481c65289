// Package etcd runs an etcd cluster as a peer system in the network lab: one etcd member per
// peer.Host, started as a real process (in the lab: inside the host's network namespace,
// under the emulated WAN), and benchmarked through bench.Target like Meridian itself.
//
// The server is Debian's etcd-server package (3.4.x); the client is go.etcd.io/etcd/client/v3,
// which speaks the same v3 gRPC KV API. See docs/peers-etcd.md.
package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"meridian/internal/tools/peer"
)

// Ports every member listens on, at its host's address.
const (
	ClientPort = 2379
	PeerPort   = 2380
)

// Defaults.
const (
	// DefaultQuotaBackendBytes is the backend quota: 8 GiB, the largest etcd 3.4 recommends.
	// Auto-compaction is off during a run, so the quota must hold every revision a benchmark
	// writes (about 8 million 1 KB writes); Prepare compacts and defragments between runs.
	DefaultQuotaBackendBytes = 8 << 30
	// DefaultStartTimeout bounds the wait for a leader and healthy members.
	DefaultStartTimeout = 2 * time.Minute
	// minHeartbeat is the heartbeat used when the topology's RTTs are smaller (etcd's default).
	minHeartbeat = 100 * time.Millisecond
	// maxElectionTimeout is etcd's upper limit for --election-timeout.
	maxElectionTimeout = 50 * time.Second
)

// Options configure the etcd members. The zero value is usable.
type Options struct {
	// Binary is the etcd server executable: default "etcd" on PATH, else /usr/bin/etcd
	// (Debian: apt-get install etcd-server).
	Binary string
	// HeartbeatInterval is Raft's heartbeat (--heartbeat-interval). Default: the largest RTT
	// between the members' regions, rounded up to 10 ms, at least 100 ms (etcd's tuning guide:
	// heartbeat ≈ the maximum RTT between members).
	HeartbeatInterval time.Duration
	// ElectionTimeout is Raft's election timeout (--election-timeout). Default: 10 ×
	// HeartbeatInterval (etcd: at least 10 × the RTT; etcd itself requires ≥ 5 × heartbeat).
	ElectionTimeout time.Duration
	// LeaderRegion: after start, leadership is moved (MoveLeader) to the member in this region,
	// so that runs are reproducible. Default: the topology's first region that has a member.
	LeaderRegion string
	// QuotaBackendBytes is --quota-backend-bytes (default DefaultQuotaBackendBytes).
	QuotaBackendBytes int64
	// StartTimeout bounds the wait for a leader and healthy members at Start and Restart
	// (default DefaultStartTimeout).
	StartTimeout time.Duration
	// ExtraFlags are appended to every member's command line (later flags win).
	ExtraFlags []string
}

// withDefaults checks eo against the peer options and fills in its defaults (except Binary).
func (eo Options) withDefaults(o *peer.Options) (Options, error) {
	if err := o.Validate(); err != nil {
		return eo, err
	}
	addrs := map[string]string{}
	for _, h := range o.Hosts {
		a := net.ParseIP(h.Addr).String()
		if prev, ok := addrs[a]; ok {
			return eo, fmt.Errorf("etcd: hosts %q and %q share address %s (every member listens on ports %d and %d)",
				prev, h.Name, h.Addr, ClientPort, PeerPort)
		}
		addrs[a] = h.Name
	}
	if eo.HeartbeatInterval < 0 || eo.ElectionTimeout < 0 || eo.QuotaBackendBytes < 0 || eo.StartTimeout < 0 {
		return eo, fmt.Errorf("etcd: negative duration or quota in options %+v", eo)
	}
	if eo.HeartbeatInterval%time.Millisecond != 0 || eo.ElectionTimeout%time.Millisecond != 0 {
		return eo, fmt.Errorf("etcd: heartbeat %v and election timeout %v must be whole milliseconds",
			eo.HeartbeatInterval, eo.ElectionTimeout)
	}
	if eo.HeartbeatInterval == 0 {
		eo.HeartbeatInterval = DefaultHeartbeat(o)
	}
	if eo.ElectionTimeout == 0 {
		eo.ElectionTimeout = 10 * eo.HeartbeatInterval
	}
	if eo.ElectionTimeout < 5*eo.HeartbeatInterval {
		return eo, fmt.Errorf("etcd: election timeout %v must be at least 5 × the heartbeat %v (etcd refuses less; 10 × is recommended)",
			eo.ElectionTimeout, eo.HeartbeatInterval)
	}
	if eo.ElectionTimeout > maxElectionTimeout {
		return eo, fmt.Errorf("etcd: election timeout %v exceeds etcd's limit of %v", eo.ElectionTimeout, maxElectionTimeout)
	}
	if eo.LeaderRegion == "" {
		eo.LeaderRegion = peer.FirstRegion(o)
	}
	found := false
	for _, h := range o.Hosts {
		found = found || h.Region == eo.LeaderRegion
	}
	if !found {
		return eo, fmt.Errorf("etcd: leader region %q has no member (members are in %s)", eo.LeaderRegion, strings.Join(peer.Regions(o.Hosts), ", "))
	}
	if eo.QuotaBackendBytes == 0 {
		eo.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	if eo.StartTimeout == 0 {
		eo.StartTimeout = DefaultStartTimeout
	}
	return eo, nil
}

// DefaultHeartbeat is the default heartbeat for the members in o: the largest RTT between
// their regions, rounded up to 10 ms, at least 100 ms.
func DefaultHeartbeat(o *peer.Options) time.Duration {
	var maxMs float64
	for _, a := range o.Hosts {
		for _, b := range o.Hosts {
			if a.Region != b.Region {
				maxMs = max(maxMs, float64(o.Topology.RTT(a.Region, b.Region).Microseconds())/1000)
			}
		}
	}
	hb := time.Duration(math.Ceil(maxMs/10)) * 10 * time.Millisecond
	return max(hb, minHeartbeat)
}

// findBinary resolves the etcd executable.
func findBinary(name string) (string, error) {
	const hint = "install etcd with `apt-get install -y etcd-server` (Debian) or set Options.Binary"
	if name == "" {
		if p, err := exec.LookPath("etcd"); err == nil {
			return filepath.Abs(p)
		}
		if _, err := os.Stat("/usr/bin/etcd"); err == nil {
			return "/usr/bin/etcd", nil
		}
		return "", fmt.Errorf("etcd: no etcd binary on PATH or at /usr/bin/etcd: %s", hint)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("etcd: binary %q: %v: %s", name, err, hint)
	}
	return filepath.Abs(p)
}

func hostPort(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }

func clientURL(h peer.Host) string { return "http://" + hostPort(h.Addr, ClientPort) }
func peerURL(h peer.Host) string   { return "http://" + hostPort(h.Addr, PeerPort) }

// initialCluster is --initial-cluster: every member's name and peer URL.
func initialCluster(hosts []peer.Host) string {
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = h.Name + "=" + peerURL(h)
	}
	return strings.Join(parts, ",")
}

// memberFlags is the command line of the member on h.
func memberFlags(h peer.Host, hosts []peer.Host, dataDir, token string, eo Options) []string {
	f := []string{
		"--name=" + h.Name,
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + clientURL(h),
		"--advertise-client-urls=" + clientURL(h),
		"--listen-peer-urls=" + peerURL(h),
		"--initial-advertise-peer-urls=" + peerURL(h),
		"--initial-cluster=" + initialCluster(hosts),
		"--initial-cluster-state=new", // ignored on restart: the data directory has the WAL
		"--initial-cluster-token=" + token,
		"--heartbeat-interval=" + strconv.FormatInt(eo.HeartbeatInterval.Milliseconds(), 10),
		"--election-timeout=" + strconv.FormatInt(eo.ElectionTimeout.Milliseconds(), 10),
		// Pre-vote keeps a restarted or briefly cut-off member from deposing a healthy leader.
		"--pre-vote=true",
		"--quota-backend-bytes=" + strconv.FormatInt(eo.QuotaBackendBytes, 10),
		// No background compaction during a run (Prepare compacts between runs).
		"--auto-compaction-retention=0",
		"--enable-pprof=false",
		"--enable-v2=false",
		"--logger=zap",
		"--log-outputs=stderr",
		"--log-level=info",
		// fsync stays on (etcd has no switch for it in 3.4): every write is durable, as in
		// production.
	}
	return append(f, eo.ExtraFlags...)
}

// Cluster is a running etcd cluster.
type Cluster struct {
	o       peer.Options
	eo      Options
	binary  string
	version string
	token   string
	members []*member

	mu      sync.Mutex
	stopped bool
}

type member struct {
	host    peer.Host
	dir     string
	dataDir string
	logPath string
	admin   *clientv3.Client // endpoint: this member only, dialled from its region
	id      uint64           // Raft member ID, learnt from its status

	proc peer.Process
}

// Start starts one member per host, waits until the cluster has a leader and every member is
// healthy, and moves leadership to eo.LeaderRegion.
func Start(ctx context.Context, o peer.Options, eo Options) (*Cluster, error) {
	eo, err := eo.withDefaults(&o)
	if err != nil {
		return nil, err
	}
	bin, err := findBinary(eo.Binary)
	if err != nil {
		return nil, err
	}
	version := binaryVersion(ctx, bin)
	tok := make([]byte, 6)
	_, _ = rand.Read(tok)
	c := &Cluster{o: o, eo: eo, binary: bin, version: version, token: "meridian-lab-" + hex.EncodeToString(tok)}
	for _, h := range o.Hosts {
		dir := filepath.Join(o.Dir, h.Name)
		m := &member{host: h, dir: dir, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "etcd.log")}
		if err := os.RemoveAll(m.dataDir); err != nil {
			return nil, fmt.Errorf("etcd: fresh data directory: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("etcd: %w", err)
		}
		if err := os.Remove(m.logPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("etcd: %w", err)
		}
		cli, err := newClient([]string{clientURL(h)}, o.Dialer(h.Region))
		if err != nil {
			c.Stop()
			return nil, err
		}
		m.admin = cli
		c.members = append(c.members, m)
	}
	o.Logf("etcd: starting %d members (etcd %s, heartbeat %v, election timeout %v) in %s",
		len(c.members), version, eo.HeartbeatInterval, eo.ElectionTimeout, o.Dir)
	c.mu.Lock()
	for _, m := range c.members {
		if err := c.launch(m); err != nil {
			c.mu.Unlock()
			c.Stop()
			return nil, err
		}
	}
	c.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, eo.StartTimeout)
	defer cancel()
	if err := c.waitHealthy(wctx, c.members); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.MoveLeader(wctx, eo.LeaderRegion); err != nil {
		err = fmt.Errorf("%w\n%s", err, c.logTails())
		c.Stop()
		return nil, err
	}
	o.Logf("etcd: cluster ready, leader in %s", eo.LeaderRegion)
	return c, nil
}

// binaryVersion runs `etcd --version` ("" if that fails).
func binaryVersion(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// newClient opens a client of endpoints, dialling with dial when non-nil.
func newClient(endpoints []string, dial peer.DialFunc) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
		MaxCallSendMsgSize:   2 << 20,
		MaxCallRecvMsgSize:   64 << 20,
	}
	if dial != nil {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		}))
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: client for %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// launch starts m's process. Called with c.mu held.
func (c *Cluster) launch(m *member) error {
	flags := memberFlags(m.host, c.o.Hosts, m.dataDir, c.token, c.eo)
	header := fmt.Sprintf("### %s: %s %s", time.Now().Format(time.RFC3339), c.binary, strings.Join(flags, " "))
	// The process outlives Start's context: it ends with Stop or Kill.
	if _, err := m.proc.Start(context.Background(), m.host, m.logPath, "", header, c.binary, flags...); err != nil {
		return fmt.Errorf("etcd: member %s: %w", m.host.Name, err)
	}
	return nil
}

// running reports whether m's process is running.
func (m *member) running() bool { return m.proc.Running() }

// kill kills m's process and waits (at most a minute) for it.
func (c *Cluster) kill(m *member) {
	if err := m.proc.Kill(time.Minute); err != nil {
		c.o.Logf("etcd: %s: %v", m.host.Name, err)
	}
}

// Stop kills every member and waits for them to exit; the data stays in o.Dir. Idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Add(1)
		go func() { defer wg.Done(); c.kill(m) }()
	}
	wg.Wait()
	for _, m := range c.members {
		if m.admin != nil {
			m.admin.Close()
		}
	}
	c.o.Logf("etcd: stopped")
	return nil
}

// Kill kills member i (SIGKILL: a crash) and waits for it to exit.
func (c *Cluster) Kill(i int) error {
	if err := c.check(i); err != nil {
		return err
	}
	c.kill(c.members[i])
	c.o.Logf("etcd: killed member %s", c.members[i].host.Name)
	return nil
}

// Restart starts member i again on its data directory (it must have been killed) and waits
// until it is healthy. Leadership is not moved back: call MoveLeader for that.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if err := c.check(i); err != nil {
		return err
	}
	m := c.members[i]
	c.mu.Lock()
	if m.running() {
		c.mu.Unlock()
		return fmt.Errorf("etcd: member %s is running", m.host.Name)
	}
	err := c.launch(m)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.eo.StartTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx, []*member{m}); err != nil {
		return err
	}
	c.o.Logf("etcd: restarted member %s", m.host.Name)
	return nil
}

func (c *Cluster) check(i int) error {
	if i < 0 || i >= len(c.members) {
		return fmt.Errorf("etcd: no member %d (the cluster has %d)", i, len(c.members))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("etcd: cluster stopped")
	}
	return nil
}

// Pids are the members' process ids (a member that never started has none).
func (c *Cluster) Pids() []int {
	var out []int
	for _, m := range c.members {
		if pid := m.proc.Pid(); pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// Hosts are the members' hosts, in member order (the index Kill and Restart take).
func (c *Cluster) Hosts() []peer.Host { return append([]peer.Host(nil), c.o.Hosts...) }

// Version is the server's version, from `etcd --version` (e.g. "3.4.23"; "" if unknown).
func (c *Cluster) Version() string { return c.version }

// Timing is the heartbeat interval and election timeout the members run with.
func (c *Cluster) Timing() (heartbeat, election time.Duration) {
	return c.eo.HeartbeatInterval, c.eo.ElectionTimeout
}

// status asks member m for its status.
func (c *Cluster) status(ctx context.Context, m *member) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := m.admin.Status(ctx, clientURL(m.host))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	m.id = st.Header.MemberId
	c.mu.Unlock()
	return st, nil
}

// leader asks the running members who leads; nil if none knows (or they disagree).
func (c *Cluster) leader(ctx context.Context) *member {
	var lead uint64
	for _, m := range c.members {
		c.mu.Lock()
		up := m.running()
		c.mu.Unlock()
		if !up {
			continue
		}
		st, err := c.status(ctx, m)
		if err != nil || st.Leader == 0 {
			continue
		}
		if lead != 0 && st.Leader != lead {
			return nil
		}
		lead = st.Leader
	}
	return c.byID(lead)
}

func (c *Cluster) byID(id uint64) *member {
	if id == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

// Leader is the region of the current leader ("" if there is none, or it is unknown).
func (c *Cluster) Leader() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m := c.leader(ctx); m != nil {
		return m.host.Region
	}
	return ""
}

// waitHealthy waits until each of ms is running, knows the leader (a member of the cluster)
// and serves a linearizable read.
func (c *Cluster) waitHealthy(ctx context.Context, ms []*member) error {
	// A member that exits ends the wait at once.
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	for _, m := range ms {
		if done := m.proc.Done(); done != nil {
			go func() {
				select {
				case <-done:
					cancel()
				case <-hctx.Done():
				}
			}()
		}
	}
	c.mu.Unlock()
	var last error
	for {
		last = c.healthy(hctx, ms)
		if last == nil {
			return nil
		}
		var exited *member
		c.mu.Lock()
		for _, m := range ms {
			if !m.running() {
				exited = m
			}
		}
		c.mu.Unlock()
		if exited != nil {
			_, exitErr := exited.proc.Exited()
			return fmt.Errorf("etcd: member %s exited (%v); see %s\n%s", exited.host.Name, exitErr, exited.logPath, c.logTails())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd: cluster not healthy: %v (%v)\n%s", last, ctx.Err(), c.logTails())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context, ms []*member) error {
	for _, m := range ms {
		st, err := c.status(ctx, m)
		if err != nil {
			return fmt.Errorf("member %s: status: %w", m.host.Name, err)
		}
		if st.Leader == 0 {
			return fmt.Errorf("member %s: no leader", m.host.Name)
		}
		if len(st.Errors) > 0 {
			return fmt.Errorf("member %s: %s", m.host.Name, strings.Join(st.Errors, "; "))
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = m.admin.Get(rctx, "health")
		cancel()
		if err != nil {
			return fmt.Errorf("member %s: linearizable read: %w", m.host.Name, err)
		}
	}
	// Every member's ID is known once each has answered a status request.
	for _, m := range c.members {
		c.mu.Lock()
		known := m.id != 0
		c.mu.Unlock()
		if !known {
			if _, err := c.status(ctx, m); err != nil {
				return fmt.Errorf("member %s: status: %w", m.host.Name, err)
			}
		}
	}
	if c.leader(ctx) == nil {
		return fmt.Errorf("members do not agree on a leader")
	}
	return nil
}

// MoveLeader transfers leadership to the member in region (the first, if several) and waits
// until every running member follows it.
func (c *Cluster) MoveLeader(ctx context.Context, region string) error {
	var target *member
	for _, m := range c.members {
		if m.host.Region == region {
			target = m
			break
		}
	}
	if target == nil {
		return fmt.Errorf("etcd: no member in region %q", region)
	}
	var last error
	for {
		lead := c.leader(ctx) // nil unless the running members agree
		if lead == target {
			return nil
		} else if lead != nil && target.id != 0 {
			mctx, cancel := context.WithTimeout(ctx, c.eo.ElectionTimeout+10*time.Second)
			_, err := lead.admin.MoveLeader(mctx, target.id)
			cancel()
			if err != nil {
				last = err
			}
		} else if target.id == 0 {
			_, _ = c.status(ctx, target)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd: move leader to %s: %v (last error: %v)", target.host.Name, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// logTails is the end of every member's log, for error messages.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, m := range c.members {
		fmt.Fprintf(&b, "--- %s (%s), last lines:\n%s\n", m.host.Name, m.logPath, tail(m.logPath, 12))
	}
	return b.String()
}

// tail returns the last n lines of a file's last 64 KB, preceded by up to 5 earlier error
// lines of the latest run (etcd prints a bad flag's error before pages of usage).
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	const maxBytes = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxBytes {
		_, _ = f.Seek(st.Size()-maxBytes, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "### ") { // launch marks the start of each run
			lines = lines[i+1:]
			break
		}
	}
	var errs []string
	if len(lines) > n {
		for _, l := range lines[:len(lines)-n] {
			ll := strings.ToLower(l)
			if len(errs) < 5 && (strings.Contains(ll, "error") || strings.Contains(ll, "fatal") ||
				strings.Contains(ll, "panic") || strings.Contains(ll, "not defined")) {
				errs = append(errs, l)
			}
		}
		lines = lines[len(lines)-n:]
		if len(errs) > 0 {
			errs = append(errs, "...")
		}
	}
	return strings.Join(append(errs, lines...), "\n")
}
