//go:build linux

// Package loopback runs Meridian and etcd side by side as real processes on this machine's
// loopback addresses (127.0.0.2, .3, .4: one node per region), without the lab's network
// namespaces and WAN router. It is the lab's comparison minus the router: the kernel's
// loopback path is the network, so what is measured is the servers' own cost per operation
// (`meridian bench loopback`, docs/benchmarks.md).
package loopback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"meridian/client"
	"meridian/internal/config"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/tools/peer/etcd"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// Ports every Meridian server uses on its own loopback address (the lab's). etcd members use
// theirs (2379, 2380) on the same addresses; the two systems never run at the same time.
const (
	MeridianPort        = 7070
	MeridianPeerPort    = 7080
	MeridianMetricsPort = 9090
)

// readyLimit bounds the wait for a started Meridian cluster to answer.
const readyLimit = 60 * time.Second

// Options configure a Target.
type Options struct {
	// Dir holds the configurations, data and logs (created; wiped per configuration).
	Dir      string
	Topology *topology.Topology
	// Exe is the meridian binary the servers run (default: this executable).
	Exe string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Target is a bench.Target over real processes on loopback: a Meridian configuration starts
// three fresh `meridian server` processes with keyspace "bench" under it; an etcd
// configuration starts etcd members (once for all its configurations). Whatever else runs is
// stopped first, so that the systems never share the cores while one is measured.
type Target struct {
	o     Options
	hosts []peer.Host // one per region, on 127.0.0.2 onwards

	mu       sync.Mutex
	meridian []*peer.Process // running servers, in host order; nil when none
	etcd     *etcd.Cluster   // running etcd; nil when none
}

// NewTarget prepares a target with one node per region of o.Topology.
func NewTarget(o Options) (*Target, error) {
	if o.Topology == nil || o.Dir == "" {
		return nil, errors.New("loopback: a topology and a directory are required")
	}
	if n := len(o.Topology.Regions); n > 250 {
		return nil, fmt.Errorf("loopback: %d regions do not fit 127.0.0.2–254", n)
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("loopback: own executable: %w", err)
		}
		o.Exe = exe
	}
	t := &Target{o: o}
	for i, r := range o.Topology.Regions {
		t.hosts = append(t.hosts, peer.Host{Name: fmt.Sprintf("n%d-%s", i+1, r), Region: r, Addr: fmt.Sprintf("127.0.0.%d", i+2)})
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	return t, nil
}

func (t *Target) Name() string                 { return "loopback " + t.o.Topology.Name }
func (t *Target) Topology() *topology.Topology { return t.o.Topology }

// Nodes is the number of servers of each system.
func (t *Target) Nodes() int { return len(t.hosts) }

// Close stops every process the target started.
func (t *Target) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return errors.Join(t.stopMeridian(), t.stopEtcd())
}

func (t *Target) logf(format string, args ...any) {
	if t.o.Log != nil {
		fmt.Fprintf(t.o.Log, format+"\n", args...)
	}
}

// Prepare readies the target for cfg.
func (t *Target) Prepare(ctx context.Context, cfg bench.Config) (bench.Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch cfg.Protocol {
	case bench.ProtocolEtcd:
		if err := t.stopMeridian(); err != nil {
			return nil, err
		}
		if t.etcd == nil {
			o := peer.Options{Hosts: t.etcdHosts(), Dir: filepath.Join(t.o.Dir, "etcd"), Topology: t.o.Topology, Log: t.o.Log}
			c, err := etcd.Start(ctx, o, etcd.Options{})
			if err != nil {
				return nil, fmt.Errorf("loopback: start etcd: %w", err)
			}
			t.etcd = c
		}
		sess, err := t.etcd.Target().Prepare(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return bench.WithServerPIDs(sess, t.etcd.Pids), nil
	case bench.ProtocolCassandra:
		return nil, errors.New("loopback: Cassandra is not run on loopback (its JVMs need more than this machine's cores; use the lab)")
	}
	if err := t.stopEtcd(); err != nil {
		return nil, err
	}
	if !slices.Contains(config.Protocols(), cfg.Protocol) {
		return nil, fmt.Errorf("loopback: unknown protocol %q (Meridian's: %v; peer: etcd)", cfg.Protocol, config.Protocols())
	}
	if err := t.startMeridian(ctx, cfg); err != nil {
		return nil, err
	}
	return &meridianSession{t: t, cfg: cfg, pids: t.meridianPids()}, nil
}

// etcdHosts are the hosts with names of etcd members.
func (t *Target) etcdHosts() []peer.Host {
	out := slices.Clone(t.hosts)
	for i := range out {
		out[i].Name = "etcd-" + out[i].Region
	}
	return out
}

// Endpoint is the client address of Meridian server i.
func (t *Target) Endpoint(i int) string {
	return net.JoinHostPort(t.hosts[i].Addr, fmt.Sprint(MeridianPort))
}

// MetricsAddr is the /metrics and /debug/pprof address of Meridian server i.
func (t *Target) MetricsAddr(i int) string {
	return net.JoinHostPort(t.hosts[i].Addr, fmt.Sprint(MeridianMetricsPort))
}

func (t *Target) meridianRoot() string { return filepath.Join(t.o.Dir, "meridian") }

// writeMeridianConfig writes the cluster configuration with keyspace "bench" under cfg.
func (t *Target) writeMeridianConfig(cfg bench.Config) (string, error) {
	root := t.meridianRoot()
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("loopback: %w", err)
	}
	tb, err := yaml.Marshal(t.o.Topology.Spec())
	if err != nil {
		return "", fmt.Errorf("loopback: topology: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "topology.yaml"), tb, 0o644); err != nil {
		return "", fmt.Errorf("loopback: %w", err)
	}
	type node struct {
		Name       string `yaml:"name"`
		Region     string `yaml:"region"`
		Listen     string `yaml:"listen"`
		PeerListen string `yaml:"peer_listen"`
		Metrics    string `yaml:"metrics"`
	}
	type keyspace struct {
		Name              string            `yaml:"name"`
		Protocol          string            `yaml:"protocol"`
		ReplicasPerRegion int               `yaml:"replicas_per_region"`
		Partitions        int               `yaml:"partitions"`
		SplitPoints       []string          `yaml:"split_points,omitempty"`
		Options           map[string]string `yaml:"options,omitempty"`
	}
	opts := maps.Clone(cfg.Options)
	if opts == nil {
		opts = map[string]string{}
	}
	if cfg.ReadLevel != "" {
		opts["read_level"] = cfg.ReadLevel
	}
	if cfg.WriteLevel != "" {
		opts["write_level"] = cfg.WriteLevel
	}
	c := struct {
		Cluster   string     `yaml:"cluster"`
		Topology  string     `yaml:"topology"`
		Nodes     []node     `yaml:"nodes"`
		Keyspaces []keyspace `yaml:"keyspaces"`
	}{Cluster: "loopback", Topology: "topology.yaml",
		Keyspaces: []keyspace{{Name: "bench", Protocol: cfg.Protocol, ReplicasPerRegion: 1, Partitions: 16, SplitPoints: ycsb.SplitPoints(16), Options: opts}}}
	for i, h := range t.hosts {
		c.Nodes = append(c.Nodes, node{Name: h.Name, Region: h.Region, Listen: t.Endpoint(i),
			PeerListen: net.JoinHostPort(h.Addr, fmt.Sprint(MeridianPeerPort)), Metrics: t.MetricsAddr(i)})
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("loopback: cluster configuration: %w", err)
	}
	path := filepath.Join(root, "cluster.yaml")
	if err := os.WriteFile(path, append([]byte("# Written by meridian bench loopback.\n"), b...), 0o644); err != nil {
		return "", fmt.Errorf("loopback: %w", err)
	}
	// The servers' own parser: a bad configuration fails here, clearly.
	if _, err := config.Load(path); err != nil {
		return "", err
	}
	return path, nil
}

// startMeridian (re)starts every server with fresh data and waits until each answers.
func (t *Target) startMeridian(ctx context.Context, cfg bench.Config) error {
	if err := t.stopMeridian(); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(t.meridianRoot(), "data")); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	path, err := t.writeMeridianConfig(cfg)
	if err != nil {
		return err
	}
	logDir := filepath.Join(t.meridianRoot(), "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	for _, h := range t.hosts {
		p := &peer.Process{}
		// The servers share one disk: a small reserve each (the default suits a node's own disk).
		if _, err := p.Start(context.Background(), h, filepath.Join(logDir, h.Name+".log"), "", "== "+cfg.Label(), t.o.Exe,
			"server", "--config", path, "--node", h.Name, "--data-dir", filepath.Join(t.meridianRoot(), "data", h.Name),
			"--log-level", "warn", "--disk-reserve", "64MiB"); err != nil {
			t.meridian = append(t.meridian, p)
			return errors.Join(err, t.stopMeridian())
		}
		t.meridian = append(t.meridian, p)
	}
	t.logf("loopback: %d Meridian servers started (%s)", len(t.hosts), cfg.Label())
	if err := t.waitMeridian(ctx); err != nil {
		return errors.Join(err, t.stopMeridian())
	}
	return nil
}

// waitMeridian waits until every server answers a request.
func (t *Target) waitMeridian(ctx context.Context) error {
	deadline := time.Now().Add(readyLimit)
	for i, h := range t.hosts {
		c, err := client.Dial(t.Endpoint(i))
		if err != nil {
			return err
		}
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.ListKeyspaces(rctx)
			cancel()
			if err == nil {
				break
			}
			if exited, why := t.meridian[i].Exited(); exited {
				c.Close()
				return fmt.Errorf("loopback: server %s exited (%v); log in %s", h.Name, why, filepath.Join(t.meridianRoot(), "logs"))
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				c.Close()
				return fmt.Errorf("loopback: server %s not ready after %v: %w", h.Name, readyLimit, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	return nil
}

func (t *Target) meridianPids() []int {
	var out []int
	for _, p := range t.meridian {
		if pid := p.Pid(); pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// stopMeridian kills the servers (data is discarded at the next start, so no clean shutdown).
func (t *Target) stopMeridian() error {
	var errs []error
	for _, p := range t.meridian {
		errs = append(errs, p.Kill(10*time.Second))
	}
	t.meridian = nil
	return errors.Join(errs...)
}

func (t *Target) stopEtcd() error {
	if t.etcd == nil {
		return nil
	}
	err := t.etcd.Stop()
	t.etcd = nil
	return err
}

type meridianSession struct {
	t    *Target
	cfg  bench.Config
	pids []int
	mu   sync.Mutex
	// clients are shared by every benchmark client of a region, as etcd's client shares one
	// connection: one HTTP/2 connection per region carries every request.
	clients map[string]*client.Client
}

func (s *meridianSession) Connect(region string, _ int) (bench.KV, error) {
	i := slices.IndexFunc(s.t.hosts, func(h peer.Host) bool { return h.Region == region })
	if i < 0 {
		return nil, fmt.Errorf("loopback: no Meridian server in region %q", region)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[region]; ok {
		return bench.ClientKV(c, "bench", s.cfg), nil
	}
	c, err := client.Dial(s.t.Endpoint(i))
	if err != nil {
		return nil, err
	}
	if s.clients == nil {
		s.clients = map[string]*client.Client{}
	}
	s.clients[region] = c
	return bench.ClientKV(c, "bench", s.cfg), nil
}

func (s *meridianSession) LowerBoundMs(region, op string) float64 {
	return bench.LowerBoundMs(s.t.o.Topology, s.cfg, region, op)
}

// ServerPIDs are the Meridian servers' processes (bench.ServerProcesses).
func (s *meridianSession) ServerPIDs() []int { return s.pids }

func (s *meridianSession) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		c.Close()
	}
	s.clients = nil
	return nil
}
