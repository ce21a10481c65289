package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"meridian/client"
)

// TestCanopusExcludesALostRegion: a canopus keyspace with exclude_after on, one server per
// region. asia's server is SIGKILLed; after the stall the other two exclude asia through the
// metadata group (real processes, the runtime's exclude_start and exclude_report proposals),
// and writes and linearizable reads go on in europe and us. asia, restarted, refuses the
// keyspace with an error that names its exclusion; it loses nothing that was acknowledged.
func TestCanopusExcludesALostRegion(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	regional := "  - name: regional\n    protocol: canopus\n    replicas_per_region: 1\n    partitions: 1\n" +
		"    options: {exclude_after: 1s, write_leases: \"false\", election_timeout: 400ms, heartbeat_interval: 50ms}\n"
	c.cfgYAML = strings.Replace(c.cfgYAML, "anti_entropy:", regional+"anti_entropy:", 1)
	if err := os.WriteFile(c.cfgPath, []byte(c.cfgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	c.startAll()
	c.waitReady(c.names()...)
	n1, n2 := c.client("n1"), c.client("n2")
	put := func(cl *client.Client, key, val string) error {
		ctx, cancel := reqCtx()
		defer cancel()
		_, err := cl.Put(ctx, "regional", []byte(key), []byte(val), client.Timeout(3*time.Second))
		return err
	}
	get := func(cl *client.Client, key string) (client.GetResult, error) {
		ctx, cancel := reqCtx()
		defer cancel()
		return cl.Get(ctx, "regional", []byte(key), client.Timeout(3*time.Second))
	}
	eventually(t, "a canopus write with every region up", func() error { return put(n1, "before", "v0") })

	c.kill("n3")
	acked := map[string]string{"before": "v0"}
	for i := range 5 {
		key, val := fmt.Sprintf("after-%d", i), fmt.Sprintf("v%d", i)
		eventually(t, "a canopus write once asia is lost", func() error {
			err := put(n1, key, val)
			if err != nil && !transient(err) {
				t.Fatalf("put %s with asia lost: %v (want success, or a timeout while the exclusion runs)", key, err)
			}
			return err
		})
		acked[key] = val
	}
	for key, val := range acked {
		r, err := get(n2, key)
		if err != nil || !r.Found || string(r.Value) != val {
			t.Fatalf("linearizable get of %s through us after asia's exclusion: found %v value %q err %v; want %q", key, r.Found, r.Value, err, val)
		}
	}

	// asia comes back on its data: excluded for good, it says so rather than serving.
	c.start("n3")
	n3 := c.client("n3")
	eventually(t, "asia's restarted server refusing the keyspace", func() error {
		_, err := get(n3, "before")
		switch {
		case err == nil:
			t.Fatal("asia, excluded, served a read of the keyspace")
		case strings.Contains(err.Error(), "excluded"):
			return nil
		}
		return err
	})
}
