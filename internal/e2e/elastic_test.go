package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meridian/api/meridianpb"
	"meridian/client"
)

// Bounds of the elasticity test's waits; generous, like waitLimit, and never asserted on.
const (
	joinLimit         = 90 * time.Second
	decommissionLimit = 120 * time.Second
)

// TestJoinAndDecommissionUnderLoad grows the README's three-node cluster by a fourth node
// (n4, europe, started with `meridian server --join`) while a workload writes QUORUM, waits
// until the placement driver has given n4 its share of europe's replicas, decommissions it
// with `meridian admin decommission`, waits until the n4 process stops on its own and the
// cluster is back to three nodes with europe's replicas on n1, and then reads back every
// acknowledged write at ALL.
func TestJoinAndDecommissionUnderLoad(t *testing.T) {
	skipShort(t)
	testStart := time.Now()
	c := newCluster(t, threeNodes, nil)
	// A short planning interval so that the driver moves replicas quickly.
	c.cfgYAML += "elasticity:\n  interval: 200ms\n"
	if err := os.WriteFile(c.cfgPath, []byte(c.cfgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	c.startAll()
	c.waitReady(c.names()...)
	original := c.names() // n1, n2, n3
	n1 := c.node("n1")
	admin := c.client("n1")

	// The workload: distinct keys, each written once, through n1..n3 in turn.
	wl := startWorkload(c, original, 4)
	defer wl.stop() // on early failures; idempotent
	time.Sleep(2 * time.Second)
	t.Logf("workload: %d writes acknowledged before the join", wl.acked.Load())

	// --- n4 joins (europe).
	c.addJoiner(nodeSpec{"n4", "europe", "127.0.0.5"})
	ackedBeforeJoin := wl.acked.Load()
	joinStart := time.Now()
	c.startJoin("n4")
	c.waitReady("n4")
	// The driver moves a few replicas at a time (max_moves_per_node), so "no moves in flight"
	// alone may be a pause between two batches: the condition must hold, with the same
	// replica counts, for a while (many planning intervals).
	var settled struct {
		since time.Time
		key   string
	}
	st := waitStatus(t, c, admin, "n4 active with its share of europe's replicas and no moves in flight", joinLimit, "n4",
		func(st *meridianpb.ClusterStatusResponse) error {
			nd, n1s := statusNode(st, "n4"), statusNode(st, "n1")
			var err error
			switch {
			case nd == nil || n1s == nil:
				err = fmt.Errorf("n1 or n4 is not in the status")
			case nd.State != "active" || !nd.Alive:
				err = fmt.Errorf("n4 is %s (alive %v, %d replicas, bootstrap %q)", nd.State, nd.Alive, nd.Replicas, nd.Bootstrap)
			case nd.Replicas < 6:
				err = fmt.Errorf("n4 holds %d replicas (moves in flight %d)", nd.Replicas, len(st.Moves))
			case len(st.Moves) > 0:
				err = fmt.Errorf("n4 holds %d replicas; %d moves in flight", nd.Replicas, len(st.Moves))
			}
			if err != nil {
				settled.since = time.Time{}
				return err
			}
			key := fmt.Sprintf("n1=%d n4=%d partitions=%d", n1s.Replicas, nd.Replicas, st.Partitions)
			if settled.since.IsZero() || key != settled.key {
				settled.since, settled.key = time.Now(), key
			}
			if d := time.Since(settled.since); d < 2*time.Second {
				return fmt.Errorf("%s with no moves in flight for %v only", key, d.Round(time.Millisecond))
			}
			return nil
		})
	joinTime := settled.since.Sub(joinStart) // until the placement settled
	n4Replicas := statusNode(st, "n4").Replicas
	t.Logf("join: n4 active with %d replicas, n1 %d, no moves in flight, settled %v after the start of n4 (seen stable %v later); %d of %d partitions; %d writes acknowledged meanwhile",
		n4Replicas, statusNode(st, "n1").Replicas, joinTime.Round(time.Millisecond), time.Since(settled.since).Round(time.Millisecond), n4Replicas+statusNode(st, "n1").Replicas, st.Partitions,
		wl.acked.Load()-ackedBeforeJoin)
	if sum := n4Replicas + statusNode(st, "n1").Replicas; sum != st.Partitions {
		t.Errorf("after the join, n1 (%d) and n4 (%d) hold %d of europe's replicas; the keyspace has %d partitions",
			statusNode(st, "n1").Replicas, n4Replicas, sum, st.Partitions)
	}
	if wl.acked.Load() == ackedBeforeJoin {
		t.Errorf("no write was acknowledged while n4 joined (%v)", joinTime)
	}
	res := runCLI(t, "admin", "--endpoint", n1.listen, "status").mustSucceed(t)
	t.Logf("admin status after the join:\n%s", res.stdout)
	if !strings.Contains(res.stdout, "\nn4 ") {
		t.Errorf("admin status after the join does not list n4:\n%s", res.stdout)
	}
	c.checkRunning(append(original, "n4")...)

	// --- n4 is decommissioned through n1; it stops by itself once it holds nothing.
	ackedBeforeDecom := wl.acked.Load()
	decomStart := time.Now()
	res = runCLI(t, "admin", "--endpoint", n1.listen, "decommission", "n4").mustSucceed(t)
	t.Logf("%s", strings.TrimSpace(res.stdout))
	p4 := c.node("n4")
	progress := time.NewTicker(10 * time.Second)
	func() {
		defer progress.Stop()
		deadline := time.After(decommissionLimit)
		for {
			select {
			case <-p4.done:
				return
			case <-progress.C:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				st, err := admin.ClusterStatus(ctx)
				cancel()
				if err == nil {
					t.Logf("decommission in progress: %s", describeStatus(st))
				}
			case <-deadline:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				st, err := admin.ClusterStatus(ctx)
				cancel()
				last := fmt.Sprint(err)
				if err == nil {
					last = describeStatus(st)
				}
				t.Fatalf("n4 did not stop within %v of admin decommission; status from n1: %s", decommissionLimit, last)
			}
		}
	}()
	decomExit := time.Since(decomStart)
	if code := p4.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("decommissioned n4 exited with status %d, want 0", code)
	}
	if b, err := os.ReadFile(p4.logPath); err != nil {
		t.Error(err)
	} else if !strings.Contains(string(b), "decommissioned: this node holds nothing and has left the cluster; stopping") {
		t.Errorf("n4's log does not say it stopped because it was decommissioned:\n%s", tail(string(b), 20))
	}
	st = waitStatus(t, c, admin, "n4 gone and europe's replicas back on n1", waitLimit, "",
		func(st *meridianpb.ClusterStatusResponse) error {
			if nd := statusNode(st, "n4"); nd != nil {
				return fmt.Errorf("n4 is still a member (%s, %d replicas)", nd.State, nd.Replicas)
			}
			if len(st.Moves) > 0 {
				return fmt.Errorf("%d moves in flight", len(st.Moves))
			}
			for _, name := range original {
				nd := statusNode(st, name)
				if nd == nil {
					return fmt.Errorf("%s is not in the status", name)
				}
				if nd.Replicas != st.Partitions {
					return fmt.Errorf("%s holds %d replicas of %d partitions", name, nd.Replicas, st.Partitions)
				}
			}
			return nil
		})
	decomTime := time.Since(decomStart)
	t.Logf("decommission: n4 exited %v after admin decommission, gone from the status after %v; n1 holds %d of %d partitions; %d writes acknowledged meanwhile",
		decomExit.Round(time.Millisecond), decomTime.Round(time.Millisecond), statusNode(st, "n1").Replicas, st.Partitions,
		wl.acked.Load()-ackedBeforeDecom)
	if wl.acked.Load() == ackedBeforeDecom {
		t.Errorf("no write was acknowledged while n4 was decommissioned (%v)", decomTime)
	}
	res = runCLI(t, "admin", "--endpoint", n1.listen, "status").mustSucceed(t)
	t.Logf("admin status after the decommission:\n%s", res.stdout)
	for _, line := range strings.Split(res.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "n4" {
			t.Errorf("admin status after the decommission still lists n4: %q", line)
		}
	}

	// --- Stop the workload and read back every acknowledged write.
	wl.stop()
	c.checkRunning(original...)
	acked := wl.result()
	t.Logf("workload: %d writes attempted, %d acknowledged; failures by code: %v", wl.attempted.Load(), len(acked), wl.failureSummary())
	for _, e := range wl.sampleErrs {
		t.Logf("workload error sample: %s", e)
	}
	if len(acked) == 0 {
		t.Fatal("the workload had no write acknowledged")
	}
	missing, wrong, readErrs := c.readBack(original, acked)
	t.Logf("read back %d acknowledged writes at ALL: %d missing, %d with another value, %d unreadable", len(acked), len(missing), len(wrong), len(readErrs))
	for _, list := range []struct {
		what  string
		items []string
	}{{"missing", missing}, {"wrong value", wrong}, {"unreadable", readErrs}} {
		if len(list.items) == 0 {
			continue
		}
		sort.Strings(list.items)
		show := list.items
		if len(show) > 20 {
			show = show[:20]
		}
		t.Errorf("%d acknowledged writes %s after the join and decommission, e.g.:\n  %s", len(list.items), list.what, strings.Join(show, "\n  "))
	}
	c.checkRunning(original...)
	t.Logf("test ran %v", time.Since(testStart).Round(time.Millisecond))
}

// addJoiner adds a node that is not in the configuration file (it joins with --join) on
// free ports of spec.host. The cluster's cleanup kills it and prints its log like the others'.
func (c *cluster) addJoiner(spec nodeSpec) *proc {
	c.t.Helper()
	addrs := freeAddrs(c.t, []string{spec.host, spec.host, spec.host})
	p := &proc{
		nodeSpec:    spec,
		listen:      addrs[0],
		peerListen:  addrs[1],
		metrics:     addrs[2],
		dataDir:     filepath.Join(c.dir, "data", spec.name),
		diskReserve: "32MiB",
		logPath:     filepath.Join(c.dir, spec.name+".log"),
	}
	c.nodes = append(c.nodes, p)
	c.byName[spec.name] = p
	return p
}

// startJoin starts a node added by addJoiner with `meridian server --join`, as start does
// for the nodes of the file.
func (c *cluster) startJoin(name string) {
	c.t.Helper()
	p := c.node(name)
	c.startWith(name, " (--join)", "--join", "--region", p.region, "--listen", p.listen, "--peer-listen", p.peerListen,
		"--metrics", p.metrics, "--data-dir", p.dataDir)
}

// checkRunning fails the test if any of the named server processes has exited.
func (c *cluster) checkRunning(names ...string) {
	c.t.Helper()
	for _, name := range names {
		p := c.node(name)
		if !p.running() {
			state := "never started"
			if p.cmd != nil && p.cmd.ProcessState != nil {
				state = p.cmd.ProcessState.String()
			}
			c.t.Fatalf("server %s is not running (%s); see its log below", name, state)
		}
	}
}

func statusNode(st *meridianpb.ClusterStatusResponse, name string) *meridianpb.NodeStatus {
	for _, n := range st.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func describeStatus(st *meridianpb.ClusterStatusResponse) string {
	var b strings.Builder
	for _, n := range st.Nodes {
		fmt.Fprintf(&b, "%s(%s %s alive=%v replicas=%d) ", n.Name, n.Region, n.State, n.Alive, n.Replicas)
	}
	fmt.Fprintf(&b, "partitions %d, moves in flight %d", st.Partitions, len(st.Moves))
	for _, m := range st.Moves {
		fmt.Fprintf(&b, "; move %d %s/%d %s->%s", m.MoveId, m.Keyspace, m.Partition, m.From, m.To)
	}
	return b.String()
}

// waitStatus polls cl's ClusterStatus until cond accepts it, failing the test after limit or
// if n1, n2, n3 or mustRun ("": none more) is no longer running.
func waitStatus(t *testing.T, c *cluster, cl *client.Client, what string, limit time.Duration, mustRun string,
	cond func(*meridianpb.ClusterStatusResponse) error) *meridianpb.ClusterStatusResponse {
	t.Helper()
	deadline := time.Now().Add(limit)
	var lastErr error
	for {
		names := []string{"n1", "n2", "n3"}
		if mustRun != "" {
			names = append(names, mustRun)
		}
		c.checkRunning(names...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cl.ClusterStatus(ctx)
		cancel()
		if err == nil {
			if err = cond(st); err == nil {
				return st
			}
			err = fmt.Errorf("%v [%s]", err, describeStatus(st))
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done within %v; last: %v", what, limit, lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// workload writes distinct keys at QUORUM from a few goroutines and records the
// acknowledged ones.
type workload struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once
	attempted atomic.Int64
	acked     atomic.Int64

	mu         sync.Mutex
	values     map[string]string // acknowledged key -> value
	failures   map[string]int    // error code -> count
	sampleErrs []string
}

const (
	workloadMaxPerWriter = 4000
	workloadMaxTime      = 5 * time.Minute
)

func startWorkload(c *cluster, via []string, writers int) *workload {
	c.t.Helper()
	return startWorkloadKeys(c, via, writers, "w")
}

// startWorkloadKeys is startWorkload with keys <prefix><writer>-<i>.
func startWorkloadKeys(c *cluster, via []string, writers int, prefix string) *workload {
	c.t.Helper()
	var cls []*client.Client
	for _, name := range via {
		cls = append(cls, c.client(name))
	}
	ctx, cancel := context.WithTimeout(context.Background(), workloadMaxTime)
	w := &workload{cancel: cancel, values: map[string]string{}, failures: map[string]int{}}
	pad := strings.Repeat("x", 200) // some bytes for the moves to copy
	for g := range writers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; i < workloadMaxPerWriter && ctx.Err() == nil; i++ {
				key := fmt.Sprintf("%s%d-%d", prefix, g, i)
				val := fmt.Sprintf("%s@%d:%s", key, time.Now().UnixNano(), pad)
				cl := cls[(g+i)%len(cls)]
				w.attempted.Add(1)
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cl.Put(rctx, "demo", []byte(key), []byte(val), client.Consistency("QUORUM"), client.Timeout(5*time.Second))
				rcancel()
				w.mu.Lock()
				if err == nil {
					w.values[key] = val
					w.acked.Add(1)
				} else {
					code := client.CodeOf(err).String()
					w.failures[code]++
					if len(w.sampleErrs) < 10 {
						w.sampleErrs = append(w.sampleErrs, fmt.Sprintf("%s via %s at %s: %v", key, cl.Endpoint(), time.Now().Format("15:04:05.000"), err))
					}
				}
				w.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	return w
}

func (w *workload) stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
}

func (w *workload) result() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.values))
	for k, v := range w.values {
		out[k] = v
	}
	return out
}

func (w *workload) failureSummary() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.failures {
		out[k] = v
	}
	return out
}

// readBack reads every key of want at ALL, through the named nodes in turn, retrying
// timeouts and unavailability for a while.
func (c *cluster) readBack(via []string, want map[string]string) (missing, wrong, readErrs []string) {
	c.t.Helper()
	var cls []*client.Client
	for _, name := range via {
		cls = append(cls, c.client(name))
	}
	keys := make(chan string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := r
			for key := range keys {
				deadline := time.Now().Add(waitLimit)
				for {
					n++
					cl := cls[n%len(cls)]
					ctx, cancel := reqCtx()
					got, err := cl.Get(ctx, "demo", []byte(key), client.Consistency("ALL"), client.Timeout(5*time.Second))
					cancel()
					if err != nil && transient(err) && time.Now().Before(deadline) {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					mu.Lock()
					switch {
					case err != nil:
						readErrs = append(readErrs, fmt.Sprintf("%s via %s: %v", key, cl.Endpoint(), err))
					case !got.Found:
						missing = append(missing, fmt.Sprintf("%s (via %s)", key, cl.Endpoint()))
					case string(got.Value) != want[key]:
						wrong = append(wrong, fmt.Sprintf("%s via %s: %.40q, want %.40q", key, cl.Endpoint(), got.Value, want[key]))
					}
					mu.Unlock()
					break
				}
			}
		}()
	}
	for k := range want {
		keys <- k
	}
	close(keys)
	wg.Wait()
	return missing, wrong, readErrs
}
