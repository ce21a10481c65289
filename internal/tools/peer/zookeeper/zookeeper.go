// Package zookeeper runs an Apache ZooKeeper ensemble as a peer system in the network lab: one
// server per peer.Host, started as a real JVM from the Maven Central jars
// (scripts/fetch-zookeeper.sh) — in the lab inside the host's network namespace, under the
// emulated WAN — and benchmarked through bench.Target like Meridian itself. At most five
// servers vote (Zab participants) and the others are observers, as the Canopus thesis
// configured ZooKeeper (section 4.6.1: "only five followers with the rest of the nodes set as
// observers"). The client is github.com/go-zookeeper/zk. See docs/peers-zookeeper.md.
package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"meridian/internal/tools/peer"
)

// DefaultVersion is the ZooKeeper release fetched when Options.LibDir is not given.
const DefaultVersion = "3.9.5"

// LibDirEnv names the environment variable that may point at the jar directory.
const LibDirEnv = "MERIDIAN_ZOOKEEPER_LIB"

// Defaults.
const (
	// DefaultVoters is the number of voting servers: the thesis's five followers (a leader
	// and four followers in Zab's terms, a quorum of three).
	DefaultVoters = 5
	// DefaultHeapMB is each server's JVM heap (-Xms and -Xmx).
	DefaultHeapMB = 512
	// DefaultStartTimeout bounds Start and Restart: JVM start-up, leader election and every
	// learner's synchronisation, on two cores shared by up to nine JVMs.
	DefaultStartTimeout = 3 * time.Minute
	// sessionTicks is the default session timeout in ticks (20 s at a 2 s tick): inside
	// ZooKeeper's bounds of 2 to 20 ticks, and long enough that a client does not lose its
	// session while its server is briefly starved of CPU.
	sessionTicks = 10
	// pollInterval is how often start-up checks poll: short next to the seconds a JVM takes.
	pollInterval = 250 * time.Millisecond
	// stopGrace is how long Stop waits for a server to exit on SIGTERM before it kills it.
	stopGrace = 10 * time.Second
)

// Options configure the ZooKeeper servers (peer.Options say where they run). The zero value is
// usable.
type Options struct {
	// LibDir holds ZooKeeper's jars. Empty: $LibDirEnv, else scripts/fetch-zookeeper.sh
	// Version is run (it caches the jars; see FetchScript).
	LibDir string
	// Version is the release to fetch when LibDir is empty (default DefaultVersion).
	Version string
	// FetchScript is the path of fetch-zookeeper.sh; empty: found above the working directory
	// or this package's source.
	FetchScript string
	// Java is the java binary (default "java"; ZooKeeper 3.9 runs on Java 8 to 21).
	Java string
	// Voters is the number of voting servers (default DefaultVoters); the other hosts are
	// observers. With fewer hosts, every host votes.
	Voters int
	// LeaderRegion is where the leader should be: its first host is started first and has the
	// highest myid, which ZooKeeper's election prefers (see roles). Default: the topology's
	// first region that has a host, as the etcd peer pins its leader there.
	LeaderRegion string
	// HeapMB is each server's JVM heap (default DefaultHeapMB).
	HeapMB int
	// TickTime, InitLimit and SyncLimit are zoo.cfg's (default: DefaultTiming).
	TickTime             time.Duration
	InitLimit, SyncLimit int
	// SessionTimeout is what benchmark clients ask for (default 10 ticks); ZooKeeper grants
	// 2 to 20 ticks.
	SessionTimeout time.Duration
	// StartTimeout bounds Start and Restart (default DefaultStartTimeout).
	StartTimeout time.Duration
	// ExtraConfig are "key=value" lines appended to every zoo.cfg (later lines win).
	ExtraConfig []string
	// ExtraJVMArgs are appended to the JVM's options.
	ExtraJVMArgs []string
}

// withDefaults checks zo against the peer options and fills in its defaults (except LibDir).
func (zo Options) withDefaults(o *peer.Options) (Options, error) {
	if err := o.Validate(); err != nil {
		return zo, err
	}
	addrs := map[string]string{}
	for _, h := range o.Hosts {
		a := net.ParseIP(h.Addr).String()
		if prev, ok := addrs[a]; ok {
			return zo, fmt.Errorf("zookeeper: hosts %q and %q share address %s (every server listens on ports %d, %d, %d and %d)",
				prev, h.Name, h.Addr, ClientPort, QuorumPort, ElectionPort, AdminPort)
		}
		addrs[a] = h.Name
	}
	if zo.Voters < 0 || zo.HeapMB < 0 || zo.TickTime < 0 || zo.InitLimit < 0 || zo.SyncLimit < 0 ||
		zo.SessionTimeout < 0 || zo.StartTimeout < 0 {
		return zo, fmt.Errorf("zookeeper: negative count or duration in options %+v", zo)
	}
	if zo.Version == "" {
		zo.Version = DefaultVersion
	}
	if zo.Java == "" {
		zo.Java = "java"
	}
	if zo.Voters == 0 {
		zo.Voters = DefaultVoters
	}
	zo.Voters = min(zo.Voters, len(o.Hosts))
	if zo.LeaderRegion == "" {
		zo.LeaderRegion = peer.FirstRegion(o)
	}
	if !slices.ContainsFunc(o.Hosts, func(h peer.Host) bool { return h.Region == zo.LeaderRegion }) {
		return zo, fmt.Errorf("zookeeper: leader region %q has no host (hosts are in %s)", zo.LeaderRegion, strings.Join(peer.Regions(o.Hosts), ", "))
	}
	if zo.HeapMB == 0 {
		zo.HeapMB = DefaultHeapMB
	}
	if zo.HeapMB < 64 {
		return zo, fmt.Errorf("zookeeper: heap of %d MB is too small (at least 64)", zo.HeapMB)
	}
	tick, initLimit, syncLimit := DefaultTiming(o.Hosts, o.Topology)
	if zo.TickTime == 0 {
		zo.TickTime = tick
	}
	if zo.TickTime%time.Millisecond != 0 {
		return zo, fmt.Errorf("zookeeper: tick %v must be whole milliseconds", zo.TickTime)
	}
	if zo.InitLimit == 0 {
		zo.InitLimit = initLimit
	}
	if zo.SyncLimit == 0 {
		zo.SyncLimit = syncLimit
	}
	if zo.SessionTimeout == 0 {
		zo.SessionTimeout = sessionTicks * zo.TickTime
	}
	if zo.SessionTimeout < 2*zo.TickTime || zo.SessionTimeout > 20*zo.TickTime {
		return zo, fmt.Errorf("zookeeper: session timeout %v is outside ZooKeeper's bounds of 2 to 20 ticks (%v to %v)",
			zo.SessionTimeout, 2*zo.TickTime, 20*zo.TickTime)
	}
	if zo.StartTimeout == 0 {
		zo.StartTimeout = DefaultStartTimeout
	}
	for _, l := range zo.ExtraConfig {
		if k, _, ok := strings.Cut(l, "="); !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(l, "\r\n") {
			return zo, fmt.Errorf("zookeeper: extra configuration line %q is not one key=value line", l)
		}
	}
	return zo, nil
}

// Cluster is a running ZooKeeper ensemble: one server per peer.Host.
type Cluster struct {
	o       peer.Options
	zo      Options
	version string
	roles   []role // by host index
	members []*member
	// procCtx outlives Start's context: the servers run until Stop, not until the caller's
	// start-up deadline passes.
	procCtx    context.Context
	procCancel context.CancelFunc
	// clientLog receives the ZooKeeper client library's error lines, at most a bounded number.
	clientLog *boundedLog

	mu       sync.Mutex
	stopped  bool
	admin    map[string]*http.Client // AdminServer clients, by the region they dial from
	sessions map[*session]bool       // open benchmark sessions; Stop closes them
}

// member is one server and its files.
type member struct {
	i    int
	host peer.Host
	role role
	dirs serverDirs
	proc peer.Process
}

// Start writes each server's configuration into o.Dir/<host>/ (wiping any data left there, so
// every ensemble is fresh), starts the preferred leader, then every other server, and returns
// once every server serves clients in its role and exactly one leads. It fails after
// zo.StartTimeout with the end of the failing server's log.
func Start(ctx context.Context, o peer.Options, zo Options) (*Cluster, error) {
	zo, err := zo.withDefaults(&o)
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath(zo.Java); err != nil {
		return nil, fmt.Errorf("zookeeper: java binary %q not found (ZooKeeper 3.9 needs Java 8 to 21): %w", zo.Java, err)
	}
	ctx, cancel := context.WithTimeout(ctx, zo.StartTimeout)
	defer cancel()
	lib, err := resolveLibDir(ctx, zo, o.Log)
	if err != nil {
		return nil, err
	}
	zo.LibDir = lib
	version, err := libVersion(lib)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: working directory %q: %w", o.Dir, err)
	}
	o.Dir = dir

	procCtx, procCancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Cluster{o: o, zo: zo, version: version, procCtx: procCtx, procCancel: procCancel,
		clientLog: &boundedLog{w: o.Log, left: clientLogLines},
		admin:     map[string]*http.Client{}, sessions: map[*session]bool{}}
	c.roles = roles(o.Hosts, o.Topology.Regions, zo.Voters, zo.LeaderRegion)
	for i, h := range o.Hosts {
		m := &member{i: i, host: h, role: c.roles[i], dirs: dirsOf(o.Dir, h.Name)}
		if err := c.writeFiles(m, true); err != nil {
			procCancel()
			return nil, err
		}
		c.members = append(c.members, m)
	}
	o.Logf("zookeeper: starting %d servers (ZooKeeper %s; %d voters, %d observers; tick %v, initLimit %d, syncLimit %d) in %s",
		len(c.members), version, zo.Voters, len(c.members)-zo.Voters, zo.TickTime, zo.InitLimit, zo.SyncLimit, o.Dir)
	began := time.Now()
	// The preferred leader first, up to its AdminServer, which it starts just before its
	// election: every other server then hears its vote (the highest myid) as soon as it joins,
	// and no quorum of the others can settle on a leader before it is there.
	first := c.byRank(0)
	if err := c.launch(first); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.waitAdmin(ctx, first); err != nil {
		c.Stop()
		return nil, err
	}
	for _, m := range c.members {
		if m != first {
			if err := c.launch(m); err != nil {
				c.Stop()
				return nil, err
			}
		}
	}
	if err := c.waitServing(ctx, c.members); err != nil {
		c.Stop()
		return nil, err
	}
	lead := c.leader(ctx)
	where := "unknown"
	if lead != nil {
		where = fmt.Sprintf("%s (%s)", lead.host.Name, lead.host.Region)
		if lead.host.Region != zo.LeaderRegion {
			where += fmt.Sprintf(", not in the preferred region %s", zo.LeaderRegion)
		}
	}
	o.Logf("zookeeper: %d servers up in %.1fs, leader %s; logs in %s/<host>/zookeeper.log",
		len(c.members), time.Since(began).Seconds(), where, o.Dir)
	return c, nil
}

// byRank is the member of the given rank (0: the preferred leader).
func (c *Cluster) byRank(rank int) *member {
	for _, m := range c.members {
		if m.role.rank == rank {
			return m
		}
	}
	return nil
}

// writeFiles writes m's configuration and myid; fresh wipes its data and log first.
func (c *Cluster) writeFiles(m *member, fresh bool) error {
	if fresh {
		for _, p := range []string{m.dirs.Data, m.dirs.LogFile} {
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("zookeeper: wipe %s: %w", p, err)
			}
		}
	}
	for _, d := range []string{m.dirs.Conf, m.dirs.Data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("zookeeper: create %s: %w", d, err)
		}
	}
	ec := ensembleConfig{tick: c.zo.TickTime, initLimit: c.zo.InitLimit, syncLimit: c.zo.SyncLimit,
		maxClientCnxns: maxClientCnxns, extra: c.zo.ExtraConfig}
	files := map[string][]byte{
		m.dirs.Cfg:                         zooCfg(c.o.Hosts, c.roles, m.i, m.dirs, ec),
		m.dirs.Logback:                     []byte(logbackXML),
		filepath.Join(m.dirs.Data, "myid"): myID(m.role),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("zookeeper: write %s: %w", path, err)
		}
	}
	return nil
}

// launch starts m's JVM on its host, appending to its log file.
func (c *Cluster) launch(m *member) error {
	kind := "voter"
	if m.role.observer {
		kind = "observer"
	}
	header := fmt.Sprintf("=== meridian: starting %s (%s, myid %d, %s) at %s", m.host.Name, m.host.Addr, m.role.id, kind, time.Now().Format(time.RFC3339))
	pid, err := m.proc.Start(c.procCtx, m.host, m.dirs.LogFile, m.dirs.Root, header, c.zo.Java, javaArgs(c.zo, m.dirs)...)
	if err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	c.o.Logf("zookeeper: started %s on %s (myid %d, %s, pid %d)", m.host.Name, m.host.Addr, m.role.id, kind, pid)
	return nil
}

// Stop closes the benchmark sessions, asks every server to exit (SIGTERM, then SIGKILL after
// 10 s) and waits for them; the data and logs stay in o.Dir. It is idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	sessions := make([]*session, 0, len(c.sessions))
	for s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	// Clients first: a session left open would keep reconnecting to servers that are gone.
	for _, s := range sessions {
		s.Close()
	}
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for k, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.proc.Stop(stopGrace, time.Minute); err != nil {
				errs[k] = fmt.Errorf("zookeeper: %s: %w", m.host.Name, err)
			}
		}()
	}
	wg.Wait()
	c.procCancel()
	c.mu.Lock()
	for _, hc := range c.admin {
		hc.CloseIdleConnections()
	}
	c.mu.Unlock()
	c.o.Logf("zookeeper: stopped")
	return errors.Join(errs...)
}

// Kill kills server i (SIGKILL: a crash) and waits for it to exit; Restart brings it back with
// its data.
func (c *Cluster) Kill(i int) error {
	if err := c.check(i); err != nil {
		return err
	}
	m := c.members[i]
	if err := m.proc.Kill(time.Minute); err != nil {
		return fmt.Errorf("zookeeper: %s: %w", m.host.Name, err)
	}
	c.o.Logf("zookeeper: killed %s", m.host.Name)
	return nil
}

// Restart starts server i again on its data (it must not be running) and waits, at most
// Options.StartTimeout, until it serves again in its role.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if err := c.check(i); err != nil {
		return err
	}
	m := c.members[i]
	if m.proc.Running() {
		return fmt.Errorf("zookeeper: server %s is running", m.host.Name)
	}
	if err := c.writeFiles(m, false); err != nil {
		return err
	}
	if err := c.launch(m); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.zo.StartTimeout)
	defer cancel()
	if err := c.waitServing(ctx, []*member{m}); err != nil {
		return err
	}
	c.o.Logf("zookeeper: restarted %s", m.host.Name)
	return nil
}

// check says why server i cannot be killed or restarted, or nil.
func (c *Cluster) check(i int) error {
	if i < 0 || i >= len(c.members) {
		return fmt.Errorf("zookeeper: no server %d (the ensemble has %d)", i, len(c.members))
	}
	return c.running()
}

// running is an error once the ensemble was stopped.
func (c *Cluster) running() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("zookeeper: ensemble stopped")
	}
	return nil
}

// Pids are the servers' process ids (a server that never started has none).
func (c *Cluster) Pids() []int {
	var out []int
	for _, m := range c.members {
		if pid := m.proc.Pid(); pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// Hosts are the servers' hosts, in server order (the index Kill and Restart take).
func (c *Cluster) Hosts() []peer.Host { return slices.Clone(c.o.Hosts) }

// Voters are the voting servers' hosts, the preferred leader first.
func (c *Cluster) Voters() []peer.Host {
	var vs []*member
	for _, m := range c.members {
		if !m.role.observer {
			vs = append(vs, m)
		}
	}
	slices.SortFunc(vs, func(a, b *member) int { return a.role.rank - b.role.rank })
	out := make([]peer.Host, len(vs))
	for i, m := range vs {
		out[i] = m.host
	}
	return out
}

// Version is the server's version, from its jar's name (e.g. "3.9.5").
func (c *Cluster) Version() string { return c.version }

// Timing is the ensemble's tickTime, initLimit and syncLimit.
func (c *Cluster) Timing() (tick time.Duration, initLimit, syncLimit int) {
	return c.zo.TickTime, c.zo.InitLimit, c.zo.SyncLimit
}

// LogFile is server i's log.
func (c *Cluster) LogFile(i int) string { return c.members[i].dirs.LogFile }

// --- the AdminServer ---

// adminReply is the part of an AdminServer command's JSON reply the lab reads: "error" is null
// on success, and "This ZooKeeper instance is not currently serving requests" while a server
// has no quorum; srvr's server_stats.server_state is leader, follower or observer.
type adminReply struct {
	Error       *string `json:"error"`
	ServerStats *struct {
		ServerState string `json:"server_state"`
	} `json:"server_stats"`
}

// maxAdminReply bounds the bytes read from one AdminServer reply (srvr's is about 1 KB).
const maxAdminReply = 1 << 20

// adminClient is the HTTP client that reaches the AdminServers from region (in the lab: from
// the region's client host, since the root namespace has no route to the lab's addresses).
func (c *Cluster) adminClient(region string) *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc, ok := c.admin[region]; ok {
		return hc
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}
	if d := c.o.Dialer(region); d != nil {
		tr.DialContext = d
	}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	c.admin[region] = hc
	return hc
}

// adminCommand runs an AdminServer command on m and decodes its reply. A reply whose error is
// set is returned with that error; no reply (nil) means the AdminServer did not answer.
func (c *Cluster) adminCommand(ctx context.Context, m *member, command string) (*adminReply, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(m.host.Addr, strconv.Itoa(AdminPort)) + "/commands/" + command
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %s: %w", url, err)
	}
	resp, err := c.adminClient(m.host.Region).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r adminReply
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAdminReply)).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d, undecodable reply: %w", url, resp.StatusCode, err)
	}
	if r.Error != nil {
		return &r, errors.New(*r.Error)
	}
	return &r, nil
}

// state is m's role as it reports it: "leader", "follower" or "observer" once it serves.
func (c *Cluster) state(ctx context.Context, m *member) (string, error) {
	r, err := c.adminCommand(ctx, m, "srvr")
	if err != nil {
		return "", err
	}
	if r.ServerStats == nil || r.ServerStats.ServerState == "" {
		return "", fmt.Errorf("srvr reply without server_stats.server_state")
	}
	return r.ServerStats.ServerState, nil
}

// poll calls check until it returns true or an error that is final, one of ms exits, or ctx
// ends; what names the wait in errors, which carry the end of the servers' logs.
func (c *Cluster) poll(ctx context.Context, ms []*member, what string, check func(context.Context) (bool, error)) error {
	var last error
	for {
		for _, m := range ms {
			if exited, err := m.proc.Exited(); exited {
				return fmt.Errorf("zookeeper: %s exited while %s (%v); end of %s:\n%s", m.host.Name, what, err, m.dirs.LogFile,
					peer.TailFile(m.dirs.LogFile, 30))
			}
		}
		ok, err := check(ctx)
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("zookeeper: gave up %s (%v; last check: %v)\n%s", what, ctx.Err(), last, c.logTails(ms))
		case <-time.After(pollInterval):
		}
	}
}

// waitAdmin waits until m's AdminServer answers (serving or not).
func (c *Cluster) waitAdmin(ctx context.Context, m *member) error {
	return c.poll(ctx, []*member{m}, "waiting for "+m.host.Name+"'s AdminServer", func(ctx context.Context) (bool, error) {
		// Any reply, "not currently serving" included: the server is past its start-up.
		r, err := c.adminCommand(ctx, m, "ruok")
		return r != nil, err
	})
}

// waitServing waits until each of ms serves in its role (a voter as leader or follower, an
// observer as observer) and the running servers agree that exactly one leads.
func (c *Cluster) waitServing(ctx context.Context, ms []*member) error {
	return c.poll(ctx, ms, "waiting for the servers to serve", func(ctx context.Context) (bool, error) {
		for _, m := range ms {
			st, err := c.state(ctx, m)
			if err != nil {
				return false, fmt.Errorf("%s: %w", m.host.Name, err)
			}
			if m.role.observer != (st == "observer") {
				return false, fmt.Errorf("%s serves as %s", m.host.Name, st)
			}
		}
		if c.leader(ctx) == nil {
			return false, errors.New("no single leader")
		}
		return true, nil
	})
}

// leader is the one running server that reports itself leader; nil if none or several do.
func (c *Cluster) leader(ctx context.Context) *member {
	var lead *member
	for _, m := range c.members {
		if !m.proc.Running() {
			continue
		}
		if st, err := c.state(ctx, m); err == nil && st == "leader" {
			if lead != nil {
				return nil
			}
			lead = m
		}
	}
	return lead
}

// waitLeader waits until exactly one running server leads.
func (c *Cluster) waitLeader(ctx context.Context) (*member, error) {
	for {
		if m := c.leader(ctx); m != nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("zookeeper: no leader: %w\n%s", ctx.Err(), c.logTails(c.members))
		case <-time.After(pollInterval):
		}
	}
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

// logTails is the end of each of ms's logs, for error messages.
func (c *Cluster) logTails(ms []*member) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "--- %s (%s), last lines:\n%s\n", m.host.Name, m.dirs.LogFile, peer.TailFile(m.dirs.LogFile, 12))
	}
	return b.String()
}

// --- clients ---

// clientLogLines bounds the client library's lines an ensemble forwards to peer.Options.Log:
// a client whose server is down retries every second and logs each failure.
const clientLogLines = 50

// boundedLog forwards the ZooKeeper client library's log lines (zk.Logger) until its budget
// is spent, then drops them, saying so once.
type boundedLog struct {
	w    io.Writer
	left int64
}

func (l *boundedLog) Printf(format string, args ...any) {
	if l.w == nil {
		return
	}
	switch n := atomic.AddInt64(&l.left, -1); {
	case n >= 0:
		fmt.Fprintf(l.w, "zookeeper client: "+format+"\n", args...)
	case n == -1:
		fmt.Fprintf(l.w, "zookeeper client: further log lines dropped\n")
	}
}

// orderedHosts is a zk.HostProvider that tries the servers in a fixed order, a client's own
// server first: zk.Connect shuffles the server list, and its default provider shuffles again,
// which would send a benchmark client to a random server of its region.
type orderedHosts struct {
	mu         sync.Mutex
	order      []string // the preference, "addr:port"
	servers    []string
	curr, last int
}

// Init keeps the servers of the connection string in the preferred order.
func (hp *orderedHosts) Init(servers []string) error {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.servers = hp.servers[:0]
	for _, s := range hp.order {
		if slices.Contains(servers, s) {
			hp.servers = append(hp.servers, s)
		}
	}
	if len(hp.servers) == 0 {
		return fmt.Errorf("zookeeper: none of the servers %v is among %v", servers, hp.order)
	}
	hp.curr, hp.last = -1, -1
	return nil
}

func (hp *orderedHosts) Len() int {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	return len(hp.servers)
}

// Next is the next server in order; retryStart is true once every server was tried since the
// last successful connection (the client then waits a second before going round again).
func (hp *orderedHosts) Next() (string, bool) {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.curr = (hp.curr + 1) % len(hp.servers)
	retryStart := hp.curr == hp.last
	if hp.last == -1 {
		hp.last = 0
	}
	return hp.servers[hp.curr], retryStart
}

func (hp *orderedHosts) Connected() {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.last = hp.curr
}

// clientAddr is a server's client address.
func clientAddr(h peer.Host) string { return net.JoinHostPort(h.Addr, strconv.Itoa(ClientPort)) }

// minDialTimeout is the least time a connection attempt gets. The client library asks for 1 s,
// which is the kernel's first SYN retransmission: when a rate search opens 256 sessions per
// region at once on a saturated machine, a server's accept queue drops SYNs, and a 1 s attempt
// fails just before the retransmitted SYN would have connected (the lab saw tens of such
// failures, each sending the client to another server of its region).
const minDialTimeout = 5 * time.Second

// zkDialer adapts the peer's dial function (nil: the default dialer) to the client library's.
func zkDialer(d peer.DialFunc) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), max(timeout, minDialTimeout))
		defer cancel()
		if d == nil {
			var nd net.Dialer
			return nd.DialContext(ctx, network, address)
		}
		return d(ctx, network, address)
	}
}

// Buffer sizes of the client library's sessions: it allocates a send buffer and a receive
// buffer per session (1.5 MB each by default), and a rate search opens 256 sessions per region.
const (
	// clientBufferBytes bounds a benchmark client's request and reply: a YCSB record is a
	// kilobyte (10 fields of 100 bytes) at most in the core workloads.
	clientBufferBytes = 128 << 10
	// adminRequestBytes bounds Prepare's requests (a multi of deleteBatch deletions): ZooKeeper's
	// own limit on a request (jute.maxbuffer).
	adminRequestBytes = 1 << 20
	// adminReplyBytes bounds the reply to Prepare's listing of every benchmark key (about 20
	// bytes a key).
	adminReplyBytes = 16 << 20
)

// connect opens a ZooKeeper session dialled from region, to the servers in order (addresses
// "addr:port"), the first preferred: a benchmark client's (small buffers) or Prepare's. It
// returns at once: the session is established in the background, and requests wait for it.
func (c *Cluster) connect(region string, order []string, small bool) (*zk.Conn, error) {
	send, recv := adminRequestBytes, adminReplyBytes
	if small {
		send, recv = clientBufferBytes, clientBufferBytes
	}
	conn, _, err := zk.Connect(order, c.zo.SessionTimeout,
		zk.WithDialer(zkDialer(c.o.Dialer(region))),
		zk.WithHostProvider(&orderedHosts{order: order}),
		zk.WithLogger(c.clientLog), zk.WithLogInfo(false),
		zk.WithMaxConnBufferSize(send), zk.WithMaxBufferSize(recv))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: client for %s: %w", strings.Join(order, ","), err)
	}
	return conn, nil
}

// --- the jars ---

// resolveLibDir finds the jar directory: zo.LibDir, $MERIDIAN_ZOOKEEPER_LIB, or the output of
// scripts/fetch-zookeeper.sh (which downloads once and caches).
func resolveLibDir(ctx context.Context, zo Options, log io.Writer) (string, error) {
	return peer.ResolveLibDir(ctx, peer.JarSource{Peer: "zookeeper", LibDir: zo.LibDir, Env: LibDirEnv, Script: zo.FetchScript,
		DefaultScript: "scripts/fetch-zookeeper.sh", Version: zo.Version}, log)
}

// jarVersion matches the server jar's name (not zookeeper-jute's or another artifact's).
var jarVersion = regexp.MustCompile(`^zookeeper-([0-9][0-9A-Za-z.+_-]*)\.jar$`)

// libVersion checks that dir holds a ZooKeeper server jar and returns its version.
func libVersion(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("zookeeper: jar directory: %w (run scripts/fetch-zookeeper.sh)", err)
	}
	for _, e := range entries {
		if m := jarVersion.FindStringSubmatch(e.Name()); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("zookeeper: %s holds no zookeeper-VERSION.jar (run scripts/fetch-zookeeper.sh)", dir)
}
