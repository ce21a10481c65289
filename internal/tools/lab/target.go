//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"meridian/client"
	"meridian/internal/config"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/peer"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// PeerCluster is a running peer system (Cassandra, etcd, ZooKeeper).
type PeerCluster interface {
	Target() bench.Target
	Stop() error
}

// PeerStarter starts a peer system on its hosts.
type PeerStarter func(ctx context.Context, o peer.Options) (PeerCluster, error)

// peerStarters are the peers the lab can run, by role (registered in peers.go).
var peerStarters = map[string]PeerStarter{}

// PeerRole returns the host role that runs protocol, or "" for Meridian's own protocols.
func PeerRole(protocol string) string {
	switch protocol {
	case bench.ProtocolCassandra:
		return RoleCassandra
	case bench.ProtocolEtcd:
		return RoleEtcd
	case bench.ProtocolZooKeeper:
		return RoleZooKeeper
	}
	return ""
}

// Target benchmarks the lab. A Meridian configuration restarts the lab's Meridian servers
// with fresh data and keyspace "bench" under it (as the emulated target starts a fresh
// cluster); a peer configuration starts that peer on its hosts (once for all its
// configurations) after stopping whatever else runs, so that the systems never share the
// machine's two cores while one is measured.
type Target struct {
	dir      string
	st       *State
	meridian *Meridian
	log      io.Writer
	mu       sync.Mutex
	peers    map[string]PeerCluster // running, by role
	// replicasPerRegion and partitions shape Meridian's benchmark keyspace (SetKeyspaceShape;
	// default one replica per region, 16 partitions).
	replicasPerRegion, partitions int
}

// SetKeyspaceShape sets the replicas per region and partitions of the keyspace each Meridian
// configuration is benchmarked on. Replicas per region cannot exceed the Meridian servers of a
// region.
func (t *Target) SetKeyspaceShape(replicasPerRegion, partitions int) error {
	servers := map[string]int{}
	for _, h := range t.meridian.Hosts() {
		servers[h.Region]++
	}
	for region, n := range servers {
		if replicasPerRegion > n {
			return fmt.Errorf("lab: %d replicas per region, but region %s has %d Meridian servers (--meridian-per-region or --nodes-per-region)", replicasPerRegion, region, n)
		}
	}
	if replicasPerRegion < 1 || partitions < 1 || partitions > 4096 {
		return fmt.Errorf("lab: keyspace shape %d replicas per region, %d partitions: want ≥ 1 replica and 1..4096 partitions", replicasPerRegion, partitions)
	}
	t.replicasPerRegion, t.partitions = replicasPerRegion, partitions
	return nil
}

// NewTarget benchmarks the lab up in dir.
func NewTarget(dir string, log io.Writer) (*Target, error) {
	st, err := LoadState(dir)
	if err != nil {
		return nil, err
	}
	if st.Fabric != nil {
		return nil, fmt.Errorf("lab: the lab in %s is a data-centre fabric (lab mayflower), not regions; bring a lab up with lab up", dir)
	}
	return &Target{dir: dir, st: st, meridian: NewMeridian(dir, st, log), log: log, peers: map[string]PeerCluster{}}, nil
}

// Meridian returns the lab's Meridian servers.
func (t *Target) Meridian() *Meridian { return t.meridian }

// State returns the lab's state.
func (t *Target) State() *State { return t.st }

func (t *Target) Name() string                 { return "lab " + t.st.Layout.Topology.Name }
func (t *Target) Topology() *topology.Topology { return t.st.Layout.Topology }

// Close stops the peers this target started (the lab itself stays up).
func (t *Target) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopPeersExcept("")
}

func (t *Target) stopPeersExcept(keep string) error {
	var errs []error
	for _, role := range slices.Sorted(maps.Keys(t.peers)) {
		if role == keep {
			continue
		}
		errs = append(errs, t.peers[role].Stop())
		delete(t.peers, role)
	}
	return errors.Join(errs...)
}

// PeerOptions are the options a peer on role's hosts starts with.
func (t *Target) PeerOptions(role string) (peer.Options, error) {
	hosts := t.st.Layout.ByRole(role)
	if len(hosts) == 0 {
		return peer.Options{}, fmt.Errorf("lab: the lab has no %s hosts (bring it up with --peers %s)", role, role)
	}
	o := peer.Options{Dir: filepath.Join(t.dir, "peers", role), Topology: t.st.Layout.Topology, Log: t.log,
		DialFrom: func(region string) peer.DialFunc {
			ch, ok := t.st.Layout.Client(region)
			if !ok {
				return nil
			}
			return DialFrom(ch.Netns)
		}}
	for _, h := range hosts {
		ns := h.Netns
		o.Hosts = append(o.Hosts, peer.Host{Name: h.Name, Region: h.Region, Addr: h.Addr.String(),
			Command: func(ctx context.Context, name string, args ...string) *exec.Cmd {
				return netnsCommand(ctx, ns, name, args...)
			}})
	}
	return o, nil
}

// Prepare readies the lab for cfg.
func (t *Target) Prepare(ctx context.Context, cfg bench.Config) (bench.Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if role := PeerRole(cfg.Protocol); role != "" {
		if err := t.meridian.Stop(); err != nil {
			return nil, err
		}
		if err := t.stopPeersExcept(role); err != nil {
			return nil, err
		}
		pc, ok := t.peers[role]
		if !ok {
			start, known := peerStarters[role]
			if !known {
				return nil, fmt.Errorf("lab: peer %s is not built into this binary", role)
			}
			o, err := t.PeerOptions(role)
			if err != nil {
				return nil, err
			}
			if pc, err = start(ctx, o); err != nil {
				return nil, fmt.Errorf("lab: start %s: %w", role, err)
			}
			t.peers[role] = pc
		}
		sess, err := pc.Target().Prepare(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if pp, ok := pc.(interface{ Pids() []int }); ok {
			sess = bench.WithServerPIDs(sess, pp.Pids)
		}
		return sess, nil
	}
	if err := t.stopPeersExcept(""); err != nil {
		return nil, err
	}
	if !slices.Contains(config.Protocols(), cfg.Protocol) {
		return nil, fmt.Errorf("lab: unknown protocol %q (Meridian's: %v; peers: %s)", cfg.Protocol, config.Protocols(), strings.Join(PeerRoles, ", "))
	}
	// YCSB keys all start with "user": split where they spread (ycsb.SplitPoints).
	replicas, partitions := max(1, t.replicasPerRegion), t.partitions
	if partitions == 0 {
		partitions = 16
	}
	ks := config.Keyspace{Name: "bench", Protocol: cfg.Protocol, Partitions: partitions, SplitPoints: ycsb.SplitPoints(partitions), ReplicasPerRegion: replicas, Options: map[string]string{}}
	maps.Copy(ks.Options, cfg.Options)
	if cfg.ReadLevel != "" {
		ks.Options["read_level"] = cfg.ReadLevel
	}
	if cfg.WriteLevel != "" {
		ks.Options["write_level"] = cfg.WriteLevel
	}
	if err := t.meridian.Start(ctx, ks); err != nil {
		return nil, err
	}
	cfg.ReplicasPerRegion = replicas
	return &meridianSession{t: t, cfg: cfg}, nil
}

type meridianSession struct {
	t   *Target
	cfg bench.Config
	mu  sync.Mutex
	// clients are shared by every benchmark client of a region talking to the same server,
	// as the peers' drivers share one session per region: one HTTP/2 connection carries
	// all of them, so requests are batched into fewer packets and syscalls.
	clients map[string]*client.Client
}

func (s *meridianSession) Connect(region string, i int) (bench.KV, error) {
	var hosts []Host
	for _, h := range s.t.meridian.Hosts() {
		if h.Region == region {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("lab: no Meridian server in region %q", region)
	}
	h := hosts[i%len(hosts)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[h.Name]; ok {
		return bench.ClientKV(c, "bench", s.cfg), nil
	}
	c, err := s.t.meridian.Dial(h, region)
	if err != nil {
		return nil, err
	}
	if s.clients == nil {
		s.clients = map[string]*client.Client{}
	}
	s.clients[h.Name] = c
	return bench.ClientKV(c, "bench", s.cfg), nil
}

func (s *meridianSession) LowerBoundMs(region, op string) float64 {
	return bench.LowerBoundMs(s.t.Topology(), s.cfg, region, op)
}

// ServerPIDs are the Meridian servers' processes (bench.ServerProcesses).
func (s *meridianSession) ServerPIDs() []int {
	if s.t.meridian.st.Meridian == nil {
		return nil
	}
	return slices.Collect(maps.Values(s.t.meridian.st.Meridian.Pids))
}

// Nodes is the number of Meridian servers.
func (s *meridianSession) Nodes() int { return len(s.t.meridian.Hosts()) }

func (s *meridianSession) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		c.Close()
	}
	s.clients = nil
	return nil
}
