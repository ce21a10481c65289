package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"meridian/client"
)

// TestQuorumSurvivesOneNodeDown is the README walkthrough, automated: a three-node cluster
// keeps serving QUORUM with one node SIGKILLed, refuses ALL with an error naming the dead
// node, and the node, restarted on its data directory, catches up by anti-entropy.
func TestQuorumSurvivesOneNodeDown(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	n1, n3 := c.client("n1"), c.client("n3")
	quorum, one := client.Consistency("QUORUM"), client.Consistency("ONE")
	key := []byte("walkthrough")

	put := func(cl *client.Client, key []byte, val string, level client.Option) error {
		ctx, cancel := reqCtx()
		defer cancel()
		_, err := cl.Put(ctx, "demo", key, []byte(val), level, client.Timeout(5*time.Second))
		return err
	}
	get := func(cl *client.Client, key []byte, level client.Option) (client.GetResult, error) {
		ctx, cancel := reqCtx()
		defer cancel()
		return cl.Get(ctx, "demo", key, level, client.Timeout(5*time.Second))
	}

	// All three up: write through n1, read through n3.
	if err := put(n1, key, "v1", quorum); err != nil {
		t.Fatalf("QUORUM put through n1 with every node up: %v", err)
	}
	r, err := get(n3, key, quorum)
	if err != nil || !r.Found || string(r.Value) != "v1" {
		t.Fatalf("QUORUM get through n3 = found %v value %q err %v; want \"v1\"", r.Found, r.Value, err)
	}

	// n2 dies.
	c.kill("n2")
	written := map[string]bool{"v1": true} // every value ever sent for key
	latest := ""

	// QUORUM still works. The first requests may time out while the failure detector notices
	// that n2 is gone; an error must then be a timeout or unavailability, never a wrong value.
	attempt := 0
	eventually(t, "QUORUM put and get with n2 down", func() error {
		attempt++
		val := fmt.Sprintf("while-n2-down-%d", attempt)
		written[val] = true
		if err := put(n1, key, val, quorum); err != nil {
			if !transient(err) {
				t.Fatalf("QUORUM put through n1 with n2 down: unexpected error %v (want success, timeout or unavailable)", err)
			}
			t.Logf("QUORUM put attempt %d: %v (retrying)", attempt, err)
			return err
		}
		latest = val
		for _, via := range []struct {
			name string
			cl   *client.Client
		}{{"n3", n3}, {"n1", n1}} {
			r, err := get(via.cl, key, quorum)
			if err != nil {
				if !transient(err) {
					t.Fatalf("QUORUM get through %s with n2 down: unexpected error %v", via.name, err)
				}
				t.Logf("QUORUM get through %s, attempt %d: %v (retrying)", via.name, attempt, err)
				return err
			}
			if !r.Found || string(r.Value) != val {
				t.Fatalf("QUORUM get through %s after an acknowledged QUORUM put of %q returned found=%v value %q", via.name, val, r.Found, r.Value)
			}
		}
		return nil
	})

	// More keys written while n2 is down, all of which n2 must catch up on.
	var missed []string
	for i := range 20 {
		k := fmt.Sprintf("missed-%02d", i)
		eventually(t, "QUORUM put of "+k, func() error {
			err := put(n3, []byte(k), "val-"+k, quorum)
			if err != nil && !transient(err) {
				t.Fatalf("QUORUM put of %s through n3 with n2 down: %v", k, err)
			}
			return err
		})
		missed = append(missed, k)
	}

	// ALL cannot succeed, and the error says which node is missing.
	{
		ctx, cancel := reqCtx()
		_, err := n1.Put(ctx, "demo", []byte("needs-all"), []byte("x"), client.Consistency("ALL"), client.Timeout(3*time.Second))
		cancel()
		var ce *client.Error
		switch {
		case err == nil:
			t.Fatal("ALL put with n2 down succeeded")
		case !errors.As(err, &ce):
			t.Fatalf("ALL put with n2 down: error %v is not a node's error", err)
		case ce.Code != codes.Unavailable && ce.Code != codes.DeadlineExceeded:
			t.Fatalf("ALL put with n2 down: code %v (%v), want Unavailable or DeadlineExceeded", ce.Code, err)
		case !strings.Contains(ce.Msg, "n2"):
			t.Fatalf("ALL put with n2 down: message %q does not name n2", ce.Msg)
		}
		t.Logf("ALL put with n2 down: %v", err)
	}

	// The CLI reports the same failure as one line on stderr and a non-zero exit.
	res := runCLI(t, "kv", "--endpoint", c.node("n1").listen, "put", "demo", "k", "v", "--consistency", "ALL")
	res.mustFailOneLine(t, "n2")
	t.Logf("CLI: %v", res)

	// n2 comes back on the same data directory and catches up by anti-entropy.
	c.start("n2")
	c.waitReady("n2")
	n2 := c.client("n2")
	eventually(t, fmt.Sprintf("ONE get of %q through restarted n2 returning %q", key, latest), func() error {
		r, err := get(n2, key, one)
		if err != nil {
			if !transient(err) {
				t.Fatalf("ONE get through restarted n2: unexpected error %v", err)
			}
			return err
		}
		if !r.Found || !written[string(r.Value)] {
			t.Fatalf("ONE get through restarted n2 returned found=%v value %q, which was never written", r.Found, r.Value)
		}
		if string(r.Value) != latest {
			return fmt.Errorf("n2 still has %q", r.Value)
		}
		return nil
	})
	for _, k := range missed {
		eventually(t, fmt.Sprintf("ONE get of %q through restarted n2", k), func() error {
			r, err := get(n2, []byte(k), one)
			if err != nil {
				if !transient(err) {
					t.Fatalf("ONE get of %s through restarted n2: unexpected error %v", k, err)
				}
				return err
			}
			if !r.Found {
				return fmt.Errorf("n2 does not have %s yet", k)
			}
			if string(r.Value) != "val-"+k {
				t.Fatalf("ONE get of %s through restarted n2 = %q, want %q", k, r.Value, "val-"+k)
			}
			return nil
		})
	}
}
