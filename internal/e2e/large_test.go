package e2e

import (
	"bytes"
	"fmt"
	"testing"

	"meridian/client"
)

// TestLargeValuesReplicateScanAndRepair: values near the 1 MiB limit travel between nodes —
// in scan replies of several such records and in anti-entropy pushes to a restarted node.
// (Regression: peer messages above ~1.09 MiB were once refused by the receiving server and
// silently dropped, so QUORUM scans timed out and repair never finished.)
func TestLargeValuesReplicateScanAndRepair(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	n1 := c.client("n1")
	value := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 700<<10) }
	for i := range 3 {
		ctx, cancel := reqCtx()
		_, err := n1.Put(ctx, "demo", fmt.Appendf(nil, "big%d", i), value(i), client.Consistency("ALL"))
		cancel()
		if err != nil {
			t.Fatalf("ALL put of a 700 KiB value: %v", err)
		}
	}
	ctx, cancel := reqCtx()
	items, more, err := c.client("n3").Scan(ctx, "demo", []byte("big"), []byte("bih"), 10, client.Consistency("QUORUM"))
	cancel()
	if err != nil || more || len(items) != 3 {
		t.Fatalf("QUORUM scan over three 700 KiB values: %d items, more %v, err %v", len(items), more, err)
	}
	for i, it := range items {
		if !bytes.Equal(it.Value, value(i)) {
			t.Fatalf("item %d has the wrong value", i)
		}
	}

	c.kill("n2")
	for i := range 3 {
		eventually(t, "QUORUM put with n2 down", func() error {
			ctx, cancel := reqCtx()
			defer cancel()
			_, err := n1.Put(ctx, "demo", fmt.Appendf(nil, "ae%d", i), value(i), client.Consistency("QUORUM"))
			return err
		})
	}
	c.start("n2")
	c.waitReady("n2")
	n2 := c.client("n2")
	eventually(t, "restarted n2 repaired with three 700 KiB values", func() error {
		for i := range 3 {
			ctx, cancel := reqCtx()
			r, err := n2.Get(ctx, "demo", fmt.Appendf(nil, "ae%d", i), client.Consistency("ONE"))
			cancel()
			if err != nil {
				return err
			}
			if !r.Found || !bytes.Equal(r.Value, value(i)) {
				return fmt.Errorf("ae%d not repaired yet (found %v)", i, r.Found)
			}
		}
		return nil
	})
}
