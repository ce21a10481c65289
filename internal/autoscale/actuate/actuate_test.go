package actuate

import (
	"context"
	"strings"
	"testing"

	"meridian/api/meridianpb"
	"meridian/client"
)

func status() *meridianpb.ClusterStatusResponse {
	return &meridianpb.ClusterStatusResponse{Nodes: []*meridianpb.NodeStatus{
		{Name: "eu-1", Region: "eu", State: "active", Alive: true, LoadOps: 100, Bytes: 1000},
		{Name: "eu-2", Region: "eu", State: "active", Alive: true, LoadOps: 50, Bytes: 500, Bootstrap: "phase 2"},
		{Name: "eu-3", Region: "eu", State: "joining", Alive: true},
		{Name: "eu-4", Region: "eu", State: "decommissioning", Alive: true, LoadOps: 10, Bytes: 100},
		{Name: "eu-5", Region: "eu", State: "active", Alive: false, LoadOps: 999, Bytes: 999},
		{Name: "eu-6", Region: "eu", State: "removed", Alive: true},
		{Name: "us-1", Region: "us", State: "active", Alive: true, LoadOps: 70, Bytes: 700},
	}}
}

// A region's view: bootstrapping and registering nodes are joining, a dead node counts for
// nothing, a leaving node's load and bytes still count (it serves until its replicas move).
func TestView(t *testing.T) {
	v := View(status(), "eu")
	if v.Serving != 1 || v.Joining != 2 || v.Leaving != 1 || v.LoadOps != 160 || v.Bytes != 1600 || len(v.Nodes) != 6 {
		t.Fatalf("%+v", v)
	}
	if got := Regions(status()); strings.Join(got, ",") != "eu,us" {
		t.Fatalf("regions %v", got)
	}
}

type fakeAdmin struct {
	st            *meridianpb.ClusterStatusResponse
	decommissions []string
}

func (f *fakeAdmin) ClusterStatus(context.Context, ...client.Option) (*meridianpb.ClusterStatusResponse, error) {
	return f.st, nil
}

func (f *fakeAdmin) SetNodeState(_ context.Context, node, state string, _ ...client.Option) (*meridianpb.SetNodeStateResponse, error) {
	f.decommissions = append(f.decommissions, node+"="+state)
	return &meridianpb.SetNodeStateResponse{}, nil
}

// The process actuator removes only nodes it started (the newest active first); with none
// left in the region it refuses and says why.
func TestProcessesRemoveOnlyTheirOwn(t *testing.T) {
	admin := &fakeAdmin{st: status()}
	p, err := NewProcesses(ProcessOptions{Binary: "/bin/true", Config: "c.yaml", WorkDir: t.TempDir(), Admin: admin})
	if err != nil {
		t.Fatal(err)
	}
	p.started = []*started{{name: "eu-1", region: "eu"}, {name: "eu-2", region: "eu"}, {name: "us-1", region: "us"}}
	// eu-2 is still bootstrapping: eu-1 is the newest active one it started.
	if err := p.Remove(context.Background(), "eu", 1); err != nil {
		t.Fatal(err)
	}
	if strings.Join(admin.decommissions, ",") != "eu-1=decommissioning" {
		t.Fatalf("decommissioned %v", admin.decommissions)
	}
	p.started = p.started[2:]
	if err := p.Remove(context.Background(), "eu", 1); err == nil || !strings.Contains(err.Error(), "the configured nodes are the floor") {
		t.Fatalf("removing a node it did not start: %v", err)
	}
	if _, err := NewProcesses(ProcessOptions{Admin: admin}); err == nil {
		t.Fatal("no configuration file accepted")
	}
}
