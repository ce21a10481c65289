package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meridian/api/meridianpb"
)

// TestAutoscaleAddsAndRemovesServers runs `meridian autoscale` with the process actuator over
// the README's three-node cluster: while clients write through n1 (europe) faster than one node
// serves within the capacity given, it starts a europe node with `meridian server --join`; when
// the load moves to n2 (us), it decommissions that node after the stabilisation time, and the
// process stops by itself. Every acknowledged write is then read back at ALL.
func TestAutoscaleAddsAndRemovesServers(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.cfgYAML += "elasticity:\n  interval: 200ms\n"
	if err := os.WriteFile(c.cfgPath, []byte(c.cfgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	c.startAll()
	c.waitReady(c.names()...)
	original := c.names()
	n1 := c.node("n1")
	admin := c.client("n1")

	// The autoscaler: europe only, 1-s periods, a season of 4 (the predictor is ready after
	// 8 periods; the reactive path decides before), 20 ops/s per node at 70%, at most 2 nodes.
	autoLog := filepath.Join(c.dir, "autoscale.log")
	logFile, err := os.Create(autoLog)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	actx, stopAuto := context.WithTimeout(context.Background(), 5*time.Minute)
	defer stopAuto()
	auto := exec.CommandContext(actx, binPath, "autoscale", "--endpoint", n1.listen, "--config", c.cfgPath,
		"--work-dir", filepath.Join(c.dir, "auto"), "--regions", "europe", "--hosts", "europe=127.0.0.5",
		"--period", "1s", "--season", "4", "--capacity", "20", "--max-nodes", "2", "--server-args", "--disk-reserve 32MiB")
	auto.Stdout, auto.Stderr = logFile, logFile
	// Its own process group: the servers it starts are killed with it when the test ends.
	auto.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := auto.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-auto.Process.Pid, syscall.SIGKILL)
		_ = auto.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(autoLog)
			t.Logf("autoscale log:\n%s", tail(string(b), 60))
		}
	})

	// --- High load in europe: the autoscaler adds a node there.
	high := startWorkload(c, []string{"n1"}, 4)
	defer high.stop()
	const added = "auto-europe-1"
	waitStatus(t, c, admin, added+" active and holding replicas", joinLimit, "",
		func(st *meridianpb.ClusterStatusResponse) error {
			nd := statusNode(st, added)
			switch {
			case nd == nil:
				return fmt.Errorf("%s not in the status yet: %s", added, describeStatus(st))
			case nd.State != "active" || nd.Bootstrap != "" || nd.Replicas == 0:
				return fmt.Errorf("%s is %s (bootstrap %q, %d replicas)", added, nd.State, nd.Bootstrap, nd.Replicas)
			}
			return nil
		})
	high.stop()
	t.Logf("scale-out: %s joined; %d writes acknowledged through n1", added, high.acked.Load())

	// --- The load moves to us: after the stabilisation time (10 periods) the autoscaler
	// decommissions the node it started, which stops by itself.
	low := startWorkloadKeys(c, []string{"n2"}, 1, "low")
	defer low.stop()
	waitStatus(t, c, admin, added+" decommissioned and gone", decommissionLimit+30*time.Second, "",
		func(st *meridianpb.ClusterStatusResponse) error {
			if nd := statusNode(st, added); nd != nil {
				return fmt.Errorf("%s is %s with %d replicas (moves in flight %d)", added, nd.State, nd.Replicas, len(st.Moves))
			}
			if len(st.Moves) > 0 {
				return fmt.Errorf("%d moves in flight", len(st.Moves))
			}
			return nil
		})
	low.stop()
	b, err := os.ReadFile(autoLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"autoscale: node started", "autoscale: node decommissioning", "autoscale decision"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the autoscaler's log does not say %q", want)
		}
	}
	t.Logf("autoscale decisions:\n%s", grepLines(string(b), "autoscale decision", 12))

	// --- Every acknowledged write, from both phases, is read back at ALL.
	acked := high.result()
	for k, v := range low.result() {
		acked[k] = v
	}
	missing, wrong, readErrs := c.readBack(original, acked)
	if len(missing)+len(wrong)+len(readErrs) > 0 {
		t.Errorf("of %d acknowledged writes: %d missing, %d with another value, %d unreadable (e.g. %v %v %v)",
			len(acked), len(missing), len(wrong), len(readErrs), head(missing), head(wrong), head(readErrs))
	}
	if len(acked) == 0 {
		t.Fatal("no write was acknowledged")
	}
	t.Logf("read back %d acknowledged writes at ALL", len(acked))
	c.checkRunning(original...)
}

func grepLines(s, want string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, want) {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

func head(s []string) []string {
	if len(s) > 3 {
		return s[:3]
	}
	return s
}
