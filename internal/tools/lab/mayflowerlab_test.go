//go:build linux

package lab

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"meridian/internal/tools/flowsim"
)

// TestFabricLayoutOfTheThesisTestbed: the default testbed becomes 64 hosts with distinct
// addresses, 224 directed links (64 × 2 edges, 32 × 2 rack uplinks, 16 × 2 pod uplinks)
// and 1, 2 or 8 paths per host pair by distance, each link at its scaled rate.
func TestFabricLayoutOfTheThesisTestbed(t *testing.T) {
	tb := flowsim.DefaultTestbed()
	tb.EdgeBps *= 0.005
	l, f, err := fabricLayout(tb, 50*time.Microsecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Hosts) != 64 || len(f.Links) != 224 {
		t.Fatalf("%d hosts, %d links; want 64, 224", len(l.Hosts), len(f.Links))
	}
	seen := map[netip.Addr]bool{}
	for _, h := range l.Hosts {
		if seen[h.Addr] {
			t.Fatalf("address %v twice", h.Addr)
		}
		seen[h.Addr] = true
	}
	for _, c := range []struct{ src, dst, paths int }{{0, 1, 1}, {0, 4, 2}, {0, 16, 8}, {63, 0, 8}} {
		if got := len(f.Paths[c.src][c.dst]); got != c.paths {
			t.Errorf("host %d -> %d: %d paths, want %d", c.src, c.dst, got, c.paths)
		}
	}
	for _, ln := range f.Links {
		if ln.Name == "h0>tor" && ln.BandwidthMbps != 5 {
			t.Errorf("edge link at %v Mbps, want 5 (1 Gbps × 0.005)", ln.BandwidthMbps)
		}
	}
}

// TestMayflowerLabSmoke runs two schemes on a small fabric with real TCP: every job
// completes, and none beats its edge link (the router limits bandwidth).
func TestMayflowerLabSmoke(t *testing.T) {
	tmp, exe := labTestSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := MayflowerLabOptions{Dir: filepath.Join(tmp, "lab"), Exe: exe, Scale: 0.005, Seed: 1,
		Schemes: []flowsim.Scheme{flowsim.NearestECMP, flowsim.MayflowerPMakespan},
		Flow: flowsim.Options{Testbed: flowsim.Testbed{Pods: 2, RacksPerPod: 2, HostsPerRack: 2, EdgeBps: 1e9 / 8,
			RackOversubscription: 2, PodOversubscription: 2}, Jobs: 12, RatePerHost: 0.5}}
	res, err := RunMayflowerLab(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := listNetns(); len(left) != 0 {
		t.Errorf("namespaces left after the run: %v", left)
	}
	f := o.scaled()
	floor := f.JobBytes / f.Testbed.EdgeBps // a job alone on its client's edge link
	for _, r := range res.Rows {
		if r.Incomplete != 0 || r.Lab.Jobs != 12 {
			t.Errorf("%s: %d of 12 jobs done, %d incomplete", r.Scheme, r.Lab.Jobs, r.Incomplete)
		}
		if r.Lab.P50 < 0.95*floor {
			t.Errorf("%s: median job %.2f s, below the edge link's %.2f s: the fabric does not limit bandwidth", r.Scheme, r.Lab.P50, floor)
		}
	}
	if md := res.Markdown(); len(md) == 0 {
		t.Error("no table")
	}
}
