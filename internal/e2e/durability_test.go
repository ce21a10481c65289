package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meridian/client"
)

// TestAcknowledgedWritesSurviveKillAll SIGKILLs every node while writes are in flight,
// restarts them on their data directories and reads back every acknowledged write. The
// single-node variant checks the local fsync-before-ack path alone.
func TestAcknowledgedWritesSurviveKillAll(t *testing.T) {
	skipShort(t)
	t.Run("three-nodes-quorum", func(t *testing.T) {
		runKillAll(t, threeNodes, nil, "QUORUM")
	})
	t.Run("single-node-one", func(t *testing.T) {
		runKillAll(t, threeNodes[:1], []string{threeNodes[0].region}, "ONE")
	})
	// GlobLease: active writes acknowledged by the master once a majority has them; after
	// every process is killed and restarted, the masters recover each key before serving it.
	t.Run("three-nodes-globlease", func(t *testing.T) {
		runKillAllKeyspace(t, threeNodes, nil, "", &client.KeyspaceSpec{Name: "gl", Protocol: "globlease", Partitions: 4,
			Options: map[string]string{"lease": "2s", "master_lease": "500ms", "election_timeout": "1s"}})
	})
}

const (
	killAllWriters     = 16
	killAllMaxPerWrite = 2000
	killAllWriteFor    = 3 * time.Second
)

type ackedWrite struct{ key, val string }

func runKillAll(t *testing.T, specs []nodeSpec, ksRegions []string, level string) {
	runKillAllKeyspace(t, specs, ksRegions, level, nil)
}

// runKillAllKeyspace runs the kill-all test on keyspace "demo" of the configuration, or on
// the keyspace spec creates (through the API) when given.
func runKillAllKeyspace(t *testing.T, specs []nodeSpec, ksRegions []string, level string, spec *client.KeyspaceSpec) {
	c := newCluster(t, specs, ksRegions)
	c.startAll()
	c.waitReady(c.names()...)
	ks, levelName := "demo", level
	if level == "" {
		levelName = "the keyspace's default"
	}
	if spec != nil {
		ks = spec.Name
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, _, err := c.client(c.nodes[0].name).CreateKeyspace(ctx, spec)
		cancel()
		if err != nil {
			t.Fatalf("create keyspace %s: %v", ks, err)
		}
	}

	var clients []*client.Client
	for _, p := range c.nodes {
		clients = append(clients, c.client(p.name))
	}
	nonce := rand.Uint64()
	acks := make([][]ackedWrite, killAllWriters)
	var (
		stop, killed                         atomic.Bool
		inflight, total, errsBefore, errsAft atomic.Int64
		firstErrMu                           sync.Mutex
		firstErrBefore                       error
		wg                                   sync.WaitGroup
	)
	for w := range killAllWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[w%len(clients)]
			for seq := 0; seq < killAllMaxPerWrite && !stop.Load(); seq++ {
				key := fmt.Sprintf("w-%02d-%05d", w, seq)
				val := fmt.Sprintf("%s/%x", key, nonce)
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				inflight.Add(1)
				_, err := cl.Put(ctx, ks, []byte(key), []byte(val), client.Consistency(level), client.Timeout(10*time.Second))
				inflight.Add(-1)
				cancel()
				if err == nil {
					acks[w] = append(acks[w], ackedWrite{key, val})
					total.Add(1)
					continue
				}
				if killed.Load() {
					errsAft.Add(1)
				} else {
					errsBefore.Add(1)
					firstErrMu.Lock()
					if firstErrBefore == nil {
						firstErrBefore = err
					}
					firstErrMu.Unlock()
				}
			}
		}()
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()

	// Let the writers run, then kill every node at once while they are still writing.
	start := time.Now()
	for time.Since(start) < killAllWriteFor && total.Load() < killAllWriters*killAllMaxPerWrite*3/4 {
		select {
		case <-writersDone:
			t.Fatalf("every writer finished before the kill (%d acknowledged); the kill must hit writes in flight", total.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	inflightAtKill, ackedAtKill := inflight.Load(), total.Load()
	killed.Store(true)
	c.killAll()
	stop.Store(true)
	select {
	case <-writersDone:
	case <-time.After(waitLimit):
		t.Fatalf("writers did not stop within %v of the kill", waitLimit)
	}
	t.Logf("killed all %d node(s) after %v: %d writes acknowledged before the kill, %d in flight; %d acknowledged in total; %d errors before the kill, %d after",
		len(c.nodes), time.Since(start).Round(time.Millisecond), ackedAtKill, inflightAtKill, total.Load(), errsBefore.Load(), errsAft.Load())
	if firstErrBefore != nil {
		t.Logf("first error before the kill: %v", firstErrBefore)
	}
	var all []ackedWrite
	for _, a := range acks {
		all = append(all, a...)
	}
	if len(all) == 0 {
		t.Fatal("no write was acknowledged before the kill; nothing to check")
	}

	// Restart everything on the same data directories.
	c.startAll()
	c.waitReady(c.names()...)
	clients = clients[:0]
	for _, p := range c.nodes {
		clients = append(clients, c.client(p.name))
	}

	// Every acknowledged write must be there, with exactly its value, read through each node
	// in turn.
	var (
		next      atomic.Int64
		checked   atomic.Int64
		retries   atomic.Int64
		badMu     sync.Mutex
		bad       []string
		badCount  int
		readersWG sync.WaitGroup
	)
	deadline := time.Now().Add(waitLimit)
	report := func(s string) {
		badMu.Lock()
		defer badMu.Unlock()
		badCount++
		if len(bad) < 20 {
			bad = append(bad, s)
		}
	}
	for range 16 {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(all) {
					return
				}
				a := all[i]
				ni := i % len(clients)
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					r, err := clients[ni].Get(ctx, ks, []byte(a.key), client.Consistency(level), client.Timeout(5*time.Second))
					cancel()
					if err != nil && transient(err) && time.Now().Before(deadline) {
						retries.Add(1)
						time.Sleep(50 * time.Millisecond)
						continue
					}
					switch {
					case err != nil:
						report(fmt.Sprintf("%s via %s: %v", a.key, c.nodes[ni].name, err))
					case !r.Found:
						report(fmt.Sprintf("%s via %s: acknowledged write lost (not found)", a.key, c.nodes[ni].name))
					case string(r.Value) != a.val:
						report(fmt.Sprintf("%s via %s: value %q, acknowledged %q", a.key, c.nodes[ni].name, r.Value, a.val))
					default:
						checked.Add(1)
					}
					break
				}
			}
		}()
	}
	readersWG.Wait()
	if badCount > 0 {
		sort.Strings(bad)
		t.Fatalf("%d of %d acknowledged writes not read back correctly at %s after restarting every node; first ones:\n%s",
			badCount, len(all), levelName, strings.Join(bad, "\n"))
	}
	t.Logf("checked %d acknowledged writes at %s after restart (%d writers, read through %d node(s) in turn, %d transient read retries)",
		checked.Load(), levelName, killAllWriters, len(clients), retries.Load())
}
