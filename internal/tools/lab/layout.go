// Package lab is Meridian's network lab (issue 7): real server processes — Meridian's and
// the peers' (Apache Cassandra, etcd, Apache ZooKeeper) — in network namespaces joined by a user-space WAN
// router (package wan) that delays every packet by the one-way latency of its region pair,
// so that every system is measured in the same run under the same WAN, and faults are real:
// kill -9, cut links, skewed clocks. DESIGN.md section 4 ("lab" runtime).
//
// Each host is a namespace with one address, 10.77.R.H (R: the region's position in the
// topology, H: the host's position in its region), on a TUN device whose other end is the
// router. Namespaces have no other device and no route off the machine.
package lab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"meridian/internal/tools/lab/wan"
	"meridian/internal/topology"
)

// Host roles.
const (
	RoleMeridian  = "meridian"  // a Meridian server
	RoleClient    = "client"    // where the region's benchmark clients connect from
	RoleCassandra = "cassandra" // an Apache Cassandra node
	RoleEtcd      = "etcd"      // an etcd member
	RoleZooKeeper = "zookeeper" // an Apache ZooKeeper server
)

// PeerRoles are the peer systems the lab can run, in the order their hosts are laid out.
var PeerRoles = []string{RoleCassandra, RoleEtcd, RoleZooKeeper}

// Host is one lab host.
type Host struct {
	Name   string     `json:"name"` // e.g. "europe-m1", "us-client"
	Region string     `json:"region"`
	Role   string     `json:"role"`
	Addr   netip.Addr `json:"addr"`
	Netns  string     `json:"netns"`
	TUN    string     `json:"tun"` // the router's name for the device before it moves in
}

// Layout is the lab's hosts.
type Layout struct {
	Topology *topology.Topology `json:"-"`
	// TopologySpec is the topology as written to the state file, so that every lab command
	// (and the router) sees the same one.
	TopologySpec topology.Spec `json:"topology"`
	Hosts        []Host        `json:"hosts"`
}

// PlanOptions say which hosts a lab has.
type PlanOptions struct {
	Topology *topology.Topology
	// MeridianPerRegion Meridian servers in each region (default 1).
	MeridianPerRegion int
	// Peers adds hosts in every region for each peer: RoleCassandra, RoleEtcd, RoleZooKeeper.
	Peers []string
	// PeersPerRegion is the number of hosts each peer gets in each region (default 1). The
	// thesis's comparisons run every system on as many servers as Meridian: `lab run` sets it
	// to the Meridian servers per region unless told otherwise.
	PeersPerRegion int
}

// MaxHostsPerRegion bounds the hosts of a region (the last address byte).
const MaxHostsPerRegion = 200

// Plan lays out the hosts: per region, the Meridian servers, one client host, and
// PeersPerRegion hosts per peer system.
func Plan(o PlanOptions) (*Layout, error) {
	t := o.Topology
	if t == nil {
		return nil, fmt.Errorf("lab: no topology")
	}
	if len(t.Regions) > 250 {
		return nil, fmt.Errorf("lab: %d regions; at most 250", len(t.Regions))
	}
	if o.MeridianPerRegion < 0 {
		return nil, fmt.Errorf("lab: %d Meridian servers per region; give 1 or more (0: the default, 1)", o.MeridianPerRegion)
	}
	if o.MeridianPerRegion == 0 {
		o.MeridianPerRegion = 1
	}
	if o.PeersPerRegion < 0 {
		return nil, fmt.Errorf("lab: %d peer hosts per region; give 1 or more (0: the default, 1)", o.PeersPerRegion)
	}
	if o.PeersPerRegion == 0 {
		o.PeersPerRegion = 1
	}
	for i, p := range o.Peers {
		if !slices.Contains(PeerRoles, p) {
			return nil, fmt.Errorf("lab: unknown peer %q (%s)", p, strings.Join(PeerRoles, ", "))
		}
		if slices.Contains(o.Peers[:i], p) {
			return nil, fmt.Errorf("lab: peer %q given twice", p)
		}
	}
	if n := o.MeridianPerRegion + 1 + len(o.Peers)*o.PeersPerRegion; n > MaxHostsPerRegion {
		return nil, fmt.Errorf("lab: %d hosts per region; at most %d", n, MaxHostsPerRegion)
	}
	l := &Layout{Topology: t, TopologySpec: t.Spec()}
	for ri, region := range t.Regions {
		hi := 0
		add := func(name, role string) {
			hi++
			idx := len(l.Hosts)
			l.Hosts = append(l.Hosts, Host{Name: name, Region: region, Role: role,
				Addr:  netip.AddrFrom4([4]byte{10, 77, byte(ri + 1), byte(hi)}),
				Netns: NetnsPrefix + name, TUN: fmt.Sprintf("mlab%d", idx)})
		}
		for i := range o.MeridianPerRegion {
			add(fmt.Sprintf("%s-m%d", region, i+1), RoleMeridian)
		}
		add(region+"-client", RoleClient)
		for _, p := range o.Peers {
			// One host keeps the name it always had (europe-etcd); several are numbered
			// (europe-etcd1, europe-etcd2, ...), as Meridian's servers are.
			if o.PeersPerRegion == 1 {
				add(region+"-"+p, p)
				continue
			}
			for i := range o.PeersPerRegion {
				add(fmt.Sprintf("%s-%s%d", region, p, i+1), p)
			}
		}
	}
	if err := l.validateNames(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Layout) validateNames() error {
	for _, h := range l.Hosts {
		// Namespace names become file names; host names become node names ([a-z0-9-]+).
		for _, c := range h.Name {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("lab: host name %q: region names must be lower-case letters, digits and '-'", h.Name)
			}
		}
	}
	return nil
}

// ByRole returns the hosts of a role in layout order.
func (l *Layout) ByRole(role string) []Host {
	var out []Host
	for _, h := range l.Hosts {
		if h.Role == role {
			out = append(out, h)
		}
	}
	return out
}

// Client returns region's client host.
func (l *Layout) Client(region string) (Host, bool) {
	for _, h := range l.Hosts {
		if h.Role == RoleClient && h.Region == region {
			return h, true
		}
	}
	return Host{}, false
}

// Host returns the host named name.
func (l *Layout) Host(name string) (Host, bool) {
	i := slices.IndexFunc(l.Hosts, func(h Host) bool { return h.Name == name })
	if i < 0 {
		return Host{}, false
	}
	return l.Hosts[i], true
}

// WANHosts returns the hosts as the router sees them.
func (l *Layout) WANHosts() []wan.Host {
	out := make([]wan.Host, len(l.Hosts))
	for i, h := range l.Hosts {
		out[i] = wan.Host{Name: h.Name, Region: h.Region, Addr: h.Addr}
	}
	return out
}

// TopologyLink is the default link between two hosts: half the topology's RTT between
// their regions (half the intra-region RTT within one).
func (l *Layout) TopologyLink(src, dst wan.Host) wan.Link {
	return wan.Link{DelayMs: float64(l.Topology.OneWay(src.Region, dst.Region).Microseconds()) / 1000}
}

// State is what `lab up` leaves for the other lab commands, in DIR/state.json.
type State struct {
	Layout    *Layout `json:"layout"`
	RouterPid int     `json:"router_pid"`
	// Meridian is the running Meridian cluster, if any.
	Meridian *MeridianState `json:"meridian,omitempty"`
	// Fabric, when set, is a data-centre network of shared multi-hop links the router
	// carries packets over instead of the topology's region-pair links (`meridian lab
	// mayflower`, mayflowerlab.go); such a lab has no topology.
	Fabric *wan.Fabric `json:"fabric,omitempty"`
}

// MeridianState describes running Meridian servers.
type MeridianState struct {
	Config string         `json:"config"` // the cluster configuration file
	Pids   map[string]int `json:"pids"`   // by node (host) name
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// RouterSocket is the router's control socket in the lab's directory.
func RouterSocket(dir string) string { return filepath.Join(dir, "router.sock") }

// LoadState reads the lab's state; a clear error when no lab is up.
func LoadState(dir string) (*State, error) {
	b, err := os.ReadFile(statePath(dir))
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("lab: no lab is up in %s (run meridian lab up)", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("lab: read state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("lab: state %s: %w", statePath(dir), err)
	}
	if s.Layout == nil {
		return nil, fmt.Errorf("lab: state %s has no layout", statePath(dir))
	}
	if s.Fabric != nil {
		return &s, nil
	}
	t, err := topology.New(s.Layout.TopologySpec)
	if err != nil {
		return nil, fmt.Errorf("lab: state topology: %w", err)
	}
	s.Layout.Topology = t
	return &s, nil
}

// Save writes the state atomically.
func (s *State) Save(dir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("lab: write state: %w", err)
	}
	return os.Rename(tmp, statePath(dir))
}
