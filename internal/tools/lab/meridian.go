//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"meridian/client"
	"meridian/internal/config"
	"meridian/internal/tools/ycsb"
)

// Ports every Meridian server uses on its own address.
const (
	MeridianPort        = 7070
	MeridianPeerPort    = 7080
	MeridianMetricsPort = 9090
)

// DefaultKeyspace is the keyspace a lab starts with: "bench", quorum, QUORUM/QUORUM.
func DefaultKeyspace() config.Keyspace {
	return config.Keyspace{Name: "bench", Protocol: config.ProtocolQuorum, Partitions: 16, SplitPoints: ycsb.SplitPoints(16), ReplicasPerRegion: 1,
		Options: map[string]string{"read_level": "QUORUM", "write_level": "QUORUM"}}
}

// Meridian runs the lab's Meridian servers, one per RoleMeridian host.
type Meridian struct {
	dir string
	st  *State
	exe string
	// MaxClockOffset is the cluster's ε (default 2ms).
	MaxClockOffset time.Duration
	log            io.Writer
}

// NewMeridian manages Meridian servers of the lab whose state is st.
func NewMeridian(dir string, st *State, log io.Writer) *Meridian {
	return &Meridian{dir: dir, st: st, MaxClockOffset: 2 * time.Millisecond, log: log}
}

func (m *Meridian) root() string { return filepath.Join(m.dir, "meridian") }

// ConfigPath is the cluster configuration file the servers run with.
func (m *Meridian) ConfigPath() string { return filepath.Join(m.root(), "cluster.yaml") }

// Hosts are the servers' hosts.
func (m *Meridian) Hosts() []Host { return m.st.Layout.ByRole(RoleMeridian) }

// Endpoint is the gRPC address of the server on host h.
func Endpoint(h Host) string { return fmt.Sprintf("%s:%d", h.Addr, MeridianPort) }

func peerAddr(h Host) string { return fmt.Sprintf("%s:%d", h.Addr, MeridianPeerPort) }

func metricsAddr(h Host) string { return fmt.Sprintf("%s:%d", h.Addr, MeridianMetricsPort) }

// writeConfig writes the cluster configuration with keyspace ks.
func (m *Meridian) writeConfig(ks config.Keyspace) error {
	if err := os.MkdirAll(m.root(), 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	topoPath := filepath.Join(m.root(), "topology.yaml")
	tb, err := yaml.Marshal(m.st.Layout.TopologySpec)
	if err != nil {
		return fmt.Errorf("lab: topology: %w", err)
	}
	if err := os.WriteFile(topoPath, tb, 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
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
		Options           map[string]string `yaml:"options,omitempty"`
	}
	cfg := struct {
		Cluster  string            `yaml:"cluster"`
		Topology string            `yaml:"topology"`
		Clock    map[string]string `yaml:"clock"`
		Nodes    []node            `yaml:"nodes"`
		Keyspace []keyspace        `yaml:"keyspaces"`
	}{Cluster: "lab", Topology: "topology.yaml", Clock: map[string]string{"max_offset": m.MaxClockOffset.String()}}
	for _, h := range m.Hosts() {
		cfg.Nodes = append(cfg.Nodes, node{Name: h.Name, Region: h.Region, Listen: Endpoint(h), PeerListen: peerAddr(h), Metrics: metricsAddr(h)})
	}
	cfg.Keyspace = []keyspace{{Name: ks.Name, Protocol: ks.Protocol, ReplicasPerRegion: max(1, ks.ReplicasPerRegion), Partitions: max(1, ks.Partitions), Options: ks.Options}}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("lab: cluster configuration: %w", err)
	}
	b = append([]byte("# Written by meridian lab; the servers of the lab run with it.\n"), b...)
	if err := os.WriteFile(m.ConfigPath(), b, 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	// Validate with the servers' own parser, so a bad keyspace fails here, clearly.
	if _, err := config.Load(m.ConfigPath()); err != nil {
		return err
	}
	return nil
}

// Start (re)starts every server with fresh data and keyspace ks, and waits until each
// answers.
func (m *Meridian) Start(ctx context.Context, ks config.Keyspace) error {
	if err := m.Stop(); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(m.root(), "data")); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := m.writeConfig(ks); err != nil {
		return err
	}
	m.st.Meridian = &MeridianState{Config: m.ConfigPath(), Pids: map[string]int{}}
	for _, h := range m.Hosts() {
		if err := m.startNode(h); err != nil {
			return err
		}
	}
	if err := m.st.Save(m.dir); err != nil {
		return err
	}
	return m.WaitReady(ctx, 60*time.Second)
}

func (m *Meridian) startNode(h Host) error {
	exe, err := exePath(m.exe)
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(m.dir, "logs", h.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("lab: log of %s: %w", h.Name, err)
	}
	defer logf.Close()
	cmd := netnsCommand(context.Background(), h.Netns, exe, "server", "--config", m.ConfigPath(), "--node", h.Name,
		"--data-dir", filepath.Join(m.root(), "data", h.Name), "--clock-control", "--log-level", "warn",
		// The lab's servers share one machine's disk: a small reserve each instead of the
		// default (up to 1 GiB, half of it a ballast file), which is sized for a node's own disk.
		"--disk-reserve", "64MiB")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("lab: start %s: %w", h.Name, err)
	}
	m.st.Meridian.Pids[h.Name] = cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it whenever it exits
	return nil
}

// WaitReady waits until every running server answers a request from its region's client host.
func (m *Meridian) WaitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, h := range m.Hosts() {
		if _, running := m.st.Meridian.Pids[h.Name]; !running {
			continue
		}
		c, err := m.Dial(h, h.Region)
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
			if time.Now().After(deadline) || ctx.Err() != nil {
				c.Close()
				return fmt.Errorf("lab: server %s not ready after %v: %v; log: %s", h.Name, limit, err, tail(filepath.Join(m.dir, "logs", h.Name+".log"), 5))
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	return nil
}

// Dial connects to the server on h from region's client host.
func (m *Meridian) Dial(h Host, region string) (*client.Client, error) {
	ch, ok := m.st.Layout.Client(region)
	if !ok {
		return nil, fmt.Errorf("lab: no client host in region %q", region)
	}
	dial := DialFrom(ch.Netns)
	return client.DialWith(Endpoint(h), func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) })
}

// Kill sends SIGKILL to the server on host name (kill -9: no clean shutdown).
func (m *Meridian) Kill(name string) error {
	if m.st.Meridian == nil {
		return errors.New("lab: no Meridian servers running")
	}
	pid, ok := m.st.Meridian.Pids[name]
	if !ok {
		return fmt.Errorf("lab: no running server %q", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("lab: kill %s: %w", name, err)
	}
	waitGone([]int{pid}, 10*time.Second)
	delete(m.st.Meridian.Pids, name)
	return m.st.Save(m.dir)
}

// Restart starts the server on host name again, on its existing data.
func (m *Meridian) Restart(ctx context.Context, name string) error {
	h, ok := m.st.Layout.Host(name)
	if !ok || h.Role != RoleMeridian {
		return fmt.Errorf("lab: %q is not a Meridian host", name)
	}
	if err := m.startNode(h); err != nil {
		return err
	}
	if err := m.st.Save(m.dir); err != nil {
		return err
	}
	return m.WaitReady(ctx, 60*time.Second)
}

// Stop stops every server (SIGTERM, then SIGKILL after 5s).
func (m *Meridian) Stop() error {
	if m.st.Meridian == nil {
		return nil
	}
	pids := slices.Collect(maps.Values(m.st.Meridian.Pids))
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	waitGone(pids, 5*time.Second)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitGone(pids, 5*time.Second)
	m.st.Meridian = nil
	return m.st.Save(m.dir)
}

// SetClock changes the clock of the server on host name (offset and drift; see the
// server's --clock-control).
func (m *Meridian) SetClock(ctx context.Context, name string, offset time.Duration, driftPPM float64) error {
	h, ok := m.st.Layout.Host(name)
	if !ok {
		return fmt.Errorf("lab: no host %q", name)
	}
	ch, _ := m.st.Layout.Client(h.Region)
	dial := DialFrom(ch.Netns)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial}}
	form := url.Values{"offset": {offset.String()}, "drift_ppm": {fmt.Sprint(driftPPM)}}
	resp, err := hc.PostForm("http://"+metricsAddr(h)+"/debug/clock", form)
	if err != nil {
		return fmt.Errorf("lab: set clock of %s: %w", name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("lab: set clock of %s: %s", name, strings.TrimSpace(string(body)))
	}
	return nil
}
