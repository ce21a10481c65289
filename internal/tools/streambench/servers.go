package streambench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"meridian/client"
	"meridian/internal/config"
	"meridian/internal/tools/peer"
	"meridian/internal/topology"
)

// BenchKeyspace is the keyspace the benchmark's streams live in.
const BenchKeyspace = "bench"

// serverOptions start `meridian server` processes for the stream benchmarks.
type serverOptions struct {
	// Dir holds the configuration, the data directories and the logs.
	Dir string
	// Exe is the meridian binary (default: this executable).
	Exe string
	// Addrs are the nodes' loopback addresses, one node each (n1, n2, …, in regions r1,
	// r2, …). The keyspace is placed in the first node's region only, so that every stream
	// the benchmark creates has n1 as its primary.
	Addrs []string
	// Streams is the configuration's streams section.
	Streams map[string]any
	// Env is added to the servers' environment (the object store's credentials).
	Env []string
	// CPUs, if set, pins node i's process to CPUs[i] with taskset -c ("" leaves it free).
	CPUs []string
	Log  io.Writer
}

// serverNode is one running server.
type serverNode struct {
	Name, Addr               string
	Listen, PeerListen, Metr string
	DataDir, LogPath         string
	proc                     *peer.Process
}

// Pid is the server's process id.
func (n *serverNode) Pid() int { return n.proc.Pid() }

// servers are the running `meridian server` processes.
type servers struct {
	o     serverOptions
	Nodes []*serverNode
	// CfgPath is the cluster configuration they run.
	CfgPath string
}

// startServers writes the configuration and starts the servers; it returns once each
// answers and the keyspace exists. Stop stops them.
func startServers(ctx context.Context, o serverOptions) (_ *servers, err error) {
	if o.Exe == "" {
		if o.Exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("streambench: own executable: %w", err)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	s := &servers{o: o}
	var hosts []string
	for _, a := range o.Addrs {
		hosts = append(hosts, a, a, a)
	}
	ports, err := freeAddrs(hosts)
	if err != nil {
		return nil, err
	}
	var regions []string
	for i, a := range o.Addrs {
		regions = append(regions, fmt.Sprintf("r%d", i+1))
		s.Nodes = append(s.Nodes, &serverNode{Name: fmt.Sprintf("n%d", i+1), Addr: a, Listen: ports[3*i], PeerListen: ports[3*i+1], Metr: ports[3*i+2],
			DataDir: filepath.Join(o.Dir, "data", fmt.Sprintf("n%d", i+1)), LogPath: filepath.Join(o.Dir, fmt.Sprintf("n%d.log", i+1)), proc: &peer.Process{}})
	}
	if s.CfgPath, err = s.writeConfig(regions); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
		}
	}()
	for i, n := range s.Nodes {
		h := peer.Host{Name: n.Name, Addr: n.Addr}
		cpu := ""
		if i < len(o.CPUs) {
			cpu = o.CPUs[i]
		}
		env := o.Env
		h.Command = func(ctx context.Context, name string, args ...string) *exec.Cmd {
			var cmd *exec.Cmd
			if cpu != "" {
				cmd = exec.CommandContext(ctx, "taskset", append([]string{"-c", cpu, name}, args...)...)
			} else {
				cmd = exec.CommandContext(ctx, name, args...)
			}
			cmd.Env = append(os.Environ(), env...)
			return cmd
		}
		// context.Background: the servers live until Stop (Pdeathsig ends them with this process).
		if _, err := n.proc.Start(context.Background(), h, n.LogPath, "", "== meridian bench stream", o.Exe,
			"server", "--config", s.CfgPath, "--node", n.Name, "--data-dir", n.DataDir, "--log-level", "warn", "--disk-reserve", "64MiB"); err != nil {
			return nil, err
		}
	}
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *servers) writeConfig(regions []string) (string, error) {
	tb, err := yaml.Marshal(topology.Equidistant("streambench", regions, 0.1, 0.05).Spec())
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(s.o.Dir, "topology.yaml"), tb, 0o644); err != nil {
		return "", err
	}
	type node struct {
		Name       string `yaml:"name"`
		Region     string `yaml:"region"`
		Listen     string `yaml:"listen"`
		PeerListen string `yaml:"peer_listen"`
		Metrics    string `yaml:"metrics"`
	}
	type keyspace struct {
		Name              string   `yaml:"name"`
		Protocol          string   `yaml:"protocol"`
		Regions           []string `yaml:"regions"`
		ReplicasPerRegion int      `yaml:"replicas_per_region"`
		Partitions        int      `yaml:"partitions"`
	}
	c := struct {
		Cluster   string         `yaml:"cluster"`
		Topology  string         `yaml:"topology"`
		Nodes     []node         `yaml:"nodes"`
		Keyspaces []keyspace     `yaml:"keyspaces"`
		Streams   map[string]any `yaml:"streams,omitempty"`
	}{Cluster: "streambench", Topology: "topology.yaml", Streams: s.o.Streams,
		Keyspaces: []keyspace{{Name: BenchKeyspace, Protocol: "quorum", Regions: regions[:1], ReplicasPerRegion: 1, Partitions: 4}}}
	for i, n := range s.Nodes {
		c.Nodes = append(c.Nodes, node{Name: n.Name, Region: regions[i], Listen: n.Listen, PeerListen: n.PeerListen, Metrics: n.Metr})
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.o.Dir, "cluster.yaml")
	if err := os.WriteFile(path, append([]byte("# Written by meridian bench stream.\n"), b...), 0o644); err != nil {
		return "", err
	}
	if _, err := config.Load(path); err != nil {
		return "", err
	}
	return path, nil
}

// wait waits until every server answers and the benchmark's keyspace is there.
func (s *servers) wait(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range s.Nodes {
		c, err := client.Dial(n.Listen)
		if err != nil {
			return err
		}
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.ListStreams(rctx, BenchKeyspace)
			cancel()
			if err == nil {
				break
			}
			if exited, why := n.proc.Exited(); exited {
				c.Close()
				return fmt.Errorf("streambench: server %s exited (%v):\n%s", n.Name, why, peer.TailFile(n.LogPath, 20))
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				c.Close()
				return fmt.Errorf("streambench: server %s not ready: %w\n%s", n.Name, err, peer.TailFile(n.LogPath, 20))
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	return nil
}

// Pids are the servers' process ids.
func (s *servers) Pids() []int {
	var out []int
	for _, n := range s.Nodes {
		if p := n.Pid(); p > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Stop ends the servers (SIGTERM, then SIGKILL).
func (s *servers) Stop() error {
	var errs []error
	for _, n := range s.Nodes {
		if n.proc.Pid() > 0 {
			errs = append(errs, n.proc.Stop(5*time.Second, 10*time.Second))
		}
	}
	return errors.Join(errs...)
}

// freeAddrs returns one free host:port per host; every listener stays open until all are
// chosen, so no port is handed out twice.
func freeAddrs(hosts []string) ([]string, error) {
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
			return nil, fmt.Errorf("streambench: a free port on %s: %w", h, err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// metricSamples are a /metrics page's samples: the series (name with its labels as
// written) to the value.
type metricSamples map[string]float64

// scrapeMetrics reads a node's /metrics page.
func scrapeMetrics(ctx context.Context, addr string) (metricSamples, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("streambench: %s/metrics: %s", addr, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics parses Prometheus's text format (samples only).
func parseMetrics(r io.Reader) (metricSamples, error) {
	out := metricSamples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[strings.TrimSpace(line[:i])] = v
	}
	return out, sc.Err()
}

// Sum is the sum of the samples of a metric (every label set).
func (m metricSamples) Sum(name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}
