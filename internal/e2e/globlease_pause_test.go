package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"meridian/client"
)

// Issue 12, defect 4: with a lease holder paused, a write at the key's master waits until
// the holder's lease runs out (the protocol's rule, liu-thesis 4.1.3), but its timeout error
// blamed the master. Now the error names the holder and when its lease ends; and a holder
// that stalled a write gets short leases (suspect_lease) while on probation, so its next
// pause stalls writes for that long at most. The two stalls are measured and logged.
func TestGlobLeasePausedHolder(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	n1, n3 := c.node("n1"), c.node("n3")
	const lease, suspectLease = 8 * time.Second, time.Second
	runCLI(t, "kv", "--endpoint", n1.listen, "create-keyspace", "gl", "--protocol", "globlease", "--partitions", "1",
		"--option", "lease="+lease.String(), "--option", "suspect_lease="+suspectLease.String(), "--option", "suspect_after=500ms",
		"--option", "master_lease=500ms", "--option", "election_timeout=1s", "--option", "auto_migrate=false").mustSucceed(t)
	master, holder := c.client("n1"), c.client("n3")
	put := func(value string, timeout time.Duration) (time.Duration, error) {
		start := time.Now()
		_, err := master.Put(context.Background(), "gl", []byte("k"), []byte(value), client.Timeout(timeout))
		return time.Since(start), err
	}
	eventually(t, "first write at the master", func() error { _, err := put("v0", 5*time.Second); return err })
	// n3 reads until it serves the key from its own lease.
	leased := func() {
		t.Helper()
		eventually(t, "n3 holds a lease", func() error {
			ctx, cancel := reqCtx()
			defer cancel()
			r, err := holder.Get(ctx, "gl", []byte("k"))
			if err == nil && r.ReadPath != "lease" {
				return fmt.Errorf("read path %q", r.ReadPath)
			}
			return err
		})
	}
	pause := func() {
		t.Helper()
		n3.pause(t)
	}
	paused := true
	resume := func() {
		if paused {
			n3.cmd.Process.Signal(syscall.SIGCONT)
			paused = false
		}
	}
	defer resume()

	leased()
	pause()
	// A write with a short deadline times out, and says whose lease it waits for.
	_, err := put("v1", 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "timed out at its master n1 (europe)") ||
		!strings.Contains(err.Error(), "the lease of n3 (asia), which has not acknowledged the update, to run out at") {
		t.Fatalf("write at the master while the lease holder is paused: %v; want an error naming the holder and its lease end", err)
	}
	t.Logf("the error: %v", err)
	// A write with a long deadline waits out the (full) lease.
	firstStall, err := put("v2", 3*lease)
	if err != nil {
		t.Fatalf("write waiting out the paused holder's lease: %v", err)
	}
	resume()
	// n3 is on probation: its next lease is short.
	leased()
	samples := scrape(t, n1.metrics)
	if samples["meridian_globlease_suspect_holders_total"] < 1 || samples["meridian_globlease_short_grants_total"] < 1 {
		t.Fatalf("suspect holders %v, short grants %v; want n3 on probation with a short lease",
			samples["meridian_globlease_suspect_holders_total"], samples["meridian_globlease_short_grants_total"])
	}
	paused = true
	pause()
	secondStall, err := put("v3", 3*lease)
	if err != nil {
		t.Fatalf("write waiting out the suspect holder's short lease: %v", err)
	}
	resume()
	t.Logf("write at the master with a paused lease holder: %v the first time (lease %v), %v the second (suspect_lease %v)",
		firstStall.Round(time.Millisecond), lease, secondStall.Round(time.Millisecond), suspectLease)
}
