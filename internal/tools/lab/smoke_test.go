//go:build linux

package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/ycsb"
)

// labTestSetup skips unless a lab can run here (root, namespaces, not -short, not
// MERIDIAN_LAB_SMOKE=0), and builds the meridian binary the router runs.
func labTestSetup(t *testing.T) (tmp, exe string) {
	t.Helper()
	if testing.Short() {
		t.Skip("lab test: skipped in -short mode")
	}
	if err := CheckPrivileges(); err != nil {
		t.Skipf("lab test skipped: %v", err)
	}
	if err := exec.Command("ip", "netns", "add", NetnsPrefix+"probe").Run(); err != nil {
		t.Skipf("lab test skipped: cannot create a network namespace here (%v)", err)
	}
	_ = exec.Command("ip", "netns", "del", NetnsPrefix+"probe").Run()
	if os.Getenv("MERIDIAN_LAB_SMOKE") == "0" {
		t.Skip("lab test skipped: MERIDIAN_LAB_SMOKE=0")
	}
	tmp = t.TempDir()
	exe = filepath.Join(tmp, "meridian")
	build := exec.Command("go", "build", "-tags", "pebblegozstd", "-o", exe, "meridian/cmd/meridian")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building meridian: %v\n%s", err, out)
	}
	return tmp, exe
}

// TestLabSmoke brings a lab up (3 Meridian hosts, one per region of gcp-meteorshower-3, and
// their client hosts), runs a 10 s benchmark through the WAN router, kills and restarts a
// node under a checked history, and tears everything down. It needs root and network
// namespaces; elsewhere it skips and says why. It must not run beside a lab of your own:
// the lab's namespace names are fixed, and Up removes an earlier lab's.
func TestLabSmoke(t *testing.T) {
	tmp, exe := labTestSetup(t)
	dir := filepath.Join(tmp, "lab")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topo := mustTopology(t, "gcp-meteorshower-3")
	st, err := Up(ctx, UpOptions{Dir: dir, Topology: topo, Exe: exe, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := Down(context.Background(), dir, nil); err != nil {
			t.Errorf("down: %v", err)
		}
		if left, _ := listNetns(); len(left) != 0 {
			t.Errorf("namespaces left after down: %v", left)
		}
		if err := Down(context.Background(), dir, nil); err != nil {
			t.Errorf("a second down must be a no-op: %v", err)
		}
	}()
	if n := len(st.Layout.ByRole(RoleMeridian)); n != 3 {
		t.Fatalf("%d Meridian hosts, want 3", n)
	}
	target, err := NewTarget(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	target.meridian.exe = exe
	defer target.Close()
	w, _ := ycsb.Core("a")
	w.RecordCount = 100
	rep, err := bench.Compare(ctx, target, []bench.Config{{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"}},
		bench.RunOptions{Workload: w, ClientsPerRegion: 4, Duration: 10 * time.Second, Warmup: time.Second, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := rep.Runs[0]
	for _, region := range topo.Regions {
		rs, ok := run.Regions[region]
		if !ok || rs.Write.Count == 0 {
			t.Fatalf("no writes measured in %s", region)
		}
		// The router's delay is a floor no noise can lower: a QUORUM write from europe
		// needs the reply of the nearest other region (us, 100 ms RTT).
		if bound := bench.LowerBoundMs(topo, bench.Config{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"}, region, "write"); rs.Write.P50Ms < bound {
			t.Errorf("%s: write p50 %.1f ms below the WAN's floor %.1f ms: the router is not delaying", region, rs.Write.P50Ms, bound)
		}
		if rs.Read.Errors+rs.Write.Errors != 0 {
			t.Errorf("%s: %d errors without faults", region, rs.Read.Errors+rs.Write.Errors)
		}
	}
	res, err := RunNemesis(ctx, target, NemesisOptions{Scenarios: []string{ScenarioKill}, Configs: []bench.Config{{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"}},
		Duration: 8 * time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.OK == 0 || len(r.Violations) != 0 || r.LostWrites != 0 {
		t.Fatalf("kill -9 under quorum: %d ok ops, violations %v, %d lost writes", r.OK, r.Violations, r.LostWrites)
	}
}
