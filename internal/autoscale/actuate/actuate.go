// Package actuate carries out the autoscaler's decisions (internal/autoscale, docs/elasticity.md
// "Autoscaling after ProRenaTa") on a running cluster: it observes each region through the admin
// API's cluster status (the nodes' request load, their states) and adds or removes server
// processes on this machine (Processes: the lab, a single-host deployment). Kubernetes
// deployments use internal/autoscale/kube instead, built into the binary with -tags kubernetes.
//
// A node is added by starting `meridian server --join` (ElasCass bootstrapping: it registers,
// then takes its share of replicas in two phases) and removed by decommissioning it (its
// replicas move to the other nodes of its region, then the process stops by itself), so no
// acknowledged write depends on a process the autoscaler stops.
package actuate

import (
	"context"
	"fmt"

	"meridian/api/meridianpb"
	"meridian/client"
	"meridian/internal/metadata"
)

// Admin is what the actuators need of the cluster's admin API; *client.Client implements it.
type Admin interface {
	ClusterStatus(ctx context.Context, options ...client.Option) (*meridianpb.ClusterStatusResponse, error)
	SetNodeState(ctx context.Context, node, state string, options ...client.Option) (*meridianpb.SetNodeStateResponse, error)
}

// RegionView is one region as the cluster status shows it.
type RegionView struct {
	// Serving: active, alive nodes that finished bootstrapping. Joining: nodes still
	// registering or bootstrapping (they count in the size the controller plans with).
	// Leaving: nodes being decommissioned.
	Serving, Joining, Leaving int
	// LoadOps is the request rate the region's nodes report (ops/s).
	LoadOps float64
	// Bytes is the data the region's nodes hold (the migration model's D); Replicas the
	// partition replicas they hold (the units the placement driver moves).
	Bytes    uint64
	Replicas int
	// Nodes are the region's nodes, in status order.
	Nodes []*meridianpb.NodeStatus
}

// View returns region's view of a cluster status.
func View(st *meridianpb.ClusterStatusResponse, region string) RegionView {
	var v RegionView
	for _, n := range st.GetNodes() {
		if n.GetRegion() != region {
			continue
		}
		v.Nodes = append(v.Nodes, n)
		switch n.GetState() {
		case metadata.NodeJoining:
			v.Joining++
		case metadata.NodeActive:
			if !n.GetAlive() {
				continue // down: neither serving nor planned with
			}
			if n.GetBootstrap() != "" {
				v.Joining++
			} else {
				v.Serving++
			}
		case metadata.NodeDecommissioning:
			v.Leaving++
		default:
			continue
		}
		v.LoadOps += n.GetLoadOps()
		v.Bytes += n.GetBytes()
		v.Replicas += int(n.GetReplicas())
	}
	return v
}

// Regions lists the regions that have nodes in a cluster status, in status order.
func Regions(st *meridianpb.ClusterStatusResponse) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range st.GetNodes() {
		if !seen[n.GetRegion()] {
			seen[n.GetRegion()] = true
			out = append(out, n.GetRegion())
		}
	}
	return out
}

// Observer reads one cluster status per control period and answers every region's questions
// from it (the loop asks for each region's load and nodes in turn).
type Observer struct {
	Admin Admin
	last  *meridianpb.ClusterStatusResponse
}

// Refresh reads the cluster status.
func (o *Observer) Refresh(ctx context.Context) (*meridianpb.ClusterStatusResponse, error) {
	st, err := o.Admin.ClusterStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("actuate: cluster status: %w", err)
	}
	o.last = st
	return st, nil
}

// Load is the region's load in the last status read (autoscale.Loop.Load).
func (o *Observer) Load(_ context.Context, region string) (float64, error) {
	if o.last == nil {
		return 0, fmt.Errorf("actuate: no cluster status read yet")
	}
	return View(o.last, region).LoadOps, nil
}
