// Package peer holds what the lab's peer systems (Apache Cassandra, etcd) share: where a
// node runs and how a benchmark client reaches it. The peers run beside Meridian in the same
// lab, under the same WAN, driven by the same workload generator through bench.Target, so
// that every system is measured in one run (issue 7).
package peer

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"

	"meridian/internal/topology"
)

// Host is where one peer node runs: a lab host (a network namespace with its own address)
// or, in tests, this machine on a loopback address such as 127.0.0.2.
type Host struct {
	Name   string // unique in the cluster, e.g. "cassandra-europe"
	Region string // one of the topology's regions
	Addr   string // the IP address the node binds to
	// Command builds a command that runs on the host (in the lab: `ip netns exec NS ...`);
	// nil runs it on this machine.
	Command func(ctx context.Context, name string, args ...string) *exec.Cmd
}

// Cmd builds a command that runs on h.
func (h Host) Cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	if h.Command != nil {
		return h.Command(ctx, name, args...)
	}
	return exec.CommandContext(ctx, name, args...)
}

// DialFunc opens a connection, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Options start a peer cluster: one node per host.
type Options struct {
	Hosts []Host
	// Dir is the cluster's working directory (configurations, data, logs); created if absent.
	Dir      string
	Topology *topology.Topology
	// DialFrom returns how a client in region opens connections (in the lab: from the
	// region's client host); nil dials from this machine.
	DialFrom func(region string) DialFunc
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Validate checks the options.
func (o *Options) Validate() error {
	if len(o.Hosts) == 0 {
		return fmt.Errorf("peer: no hosts")
	}
	if o.Dir == "" {
		return fmt.Errorf("peer: no working directory")
	}
	if o.Topology == nil {
		return fmt.Errorf("peer: no topology")
	}
	seen := map[string]bool{}
	for _, h := range o.Hosts {
		if h.Name == "" || h.Addr == "" {
			return fmt.Errorf("peer: host %+v needs a name and an address", h)
		}
		if seen[h.Name] {
			return fmt.Errorf("peer: host %q given twice", h.Name)
		}
		seen[h.Name] = true
		if !o.Topology.HasRegion(h.Region) {
			return fmt.Errorf("peer: host %q is in region %q, which topology %s does not have", h.Name, h.Region, o.Topology.Name)
		}
		if net.ParseIP(h.Addr) == nil {
			return fmt.Errorf("peer: host %q: address %q is not an IP address", h.Name, h.Addr)
		}
	}
	return nil
}

// Dialer returns the dial function for a client in region (nil: the default dialer).
func (o *Options) Dialer(region string) DialFunc {
	if o.DialFrom == nil {
		return nil
	}
	return o.DialFrom(region)
}

// Logf writes a progress line.
func (o *Options) Logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}
