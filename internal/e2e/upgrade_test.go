package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"meridian/client"
	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/storage"
)

// legacyCatalogKeyspace and legacyLayout describe a data directory written before the cluster
// metadata moved to its Raft group: the catalog was the quorum keyspace "_system", one
// record "keyspace/NAME" per keyspace created through the API, holding its JSON spec.
const (
	legacyCatalogKeyspace = "_system"
	layoutMetaKey         = "layout"
)

// writeLegacyDir fills dataDir as a layout-1 node left it: no layout mark, the keyspace
// "legacy" (quorum, one partition) in the old catalog, and one value written in it.
func writeLegacyDir(t *testing.T, dataDir string, stamp hlc.Version) {
	t.Helper()
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e, err := storage.Open(dataDir, storage.Options{DiskReserveBytes: 32 << 20})
	if err != nil {
		t.Fatalf("open %s: %v", dataDir, err)
	}
	defer e.Close()
	spec, err := json.Marshal(config.Keyspace{Name: "legacy", Protocol: "quorum", ReplicasPerRegion: 1, Partitions: 1,
		Options: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	recs := []storage.Record{
		{Keyspace: legacyCatalogKeyspace, Key: []byte("keyspace/legacy"), Version: stamp, Value: spec},
		{Keyspace: "legacy", Key: []byte("written-before"), Version: stamp, Value: []byte("the upgrade")},
	}
	if err := e.Apply(recs, true); err != nil {
		t.Fatalf("write the layout-1 records: %v", err)
	}
}

// TestUpgradeFromLayout1 starts a cluster on data directories of the previous layout: the
// keyspace of the old catalog is served with its data, imported into the cluster metadata
// (a placement version above 0), and once imported the old catalog is deleted and every
// directory is marked with the current layout.
func TestUpgradeFromLayout1(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	stamp := hlc.Version{WallNanos: time.Now().Add(-time.Hour).UnixNano(), NodeID: 1}
	for _, p := range c.nodes {
		writeLegacyDir(t, p.dataDir, stamp)
	}
	c.startAll()
	c.waitReady(c.names()...)
	cl := c.client("n2")

	eventually(t, "the old catalog's keyspace is imported", func() error {
		ctx, cancel := reqCtx()
		defer cancel()
		d, err := cl.DescribeKeyspace(ctx, "legacy")
		if err != nil {
			return err
		}
		if d.GetPlacementVersion() == 0 {
			return errString("keyspace legacy still at placement version 0 (not in the metadata yet)")
		}
		if got := d.GetSpec().GetProtocol(); got != "quorum" {
			t.Fatalf("imported keyspace legacy has protocol %q, want quorum", got)
		}
		return nil
	})
	ctx, cancel := reqCtx()
	res, err := cl.Get(ctx, "legacy", []byte("written-before"), client.Consistency("QUORUM"))
	cancel()
	if err != nil {
		t.Fatalf("read the value written before the upgrade: %v", err)
	}
	if string(res.Value) != "the upgrade" {
		t.Fatalf("read %q written before the upgrade, want %q", res.Value, "the upgrade")
	}

	// Each node marks its directory once its imports are done; stop them after that.
	eventually(t, "every node finished its import", func() error {
		for _, p := range c.nodes {
			b, err := os.ReadFile(p.logPath)
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), "the old catalog is imported into the cluster metadata and deleted") {
				return errString(p.name + " has not deleted its old catalog yet")
			}
		}
		return nil
	})
	c.killAll()
	for _, p := range c.nodes {
		e, err := storage.Open(p.dataDir, storage.Options{DiskReserveBytes: 32 << 20})
		if err != nil {
			t.Fatalf("reopen %s: %v", p.dataDir, err)
		}
		layout, _, err := e.GetMeta(layoutMetaKey)
		if err != nil {
			t.Fatal(err)
		}
		var old int
		if err := e.Scan(storage.KeyspaceSpan(legacyCatalogKeyspace), 0, func(storage.Record) bool { old++; return true }); err != nil {
			t.Fatal(err)
		}
		e.Close()
		if string(layout) != "2" {
			t.Errorf("%s: data layout %q after the upgrade, want \"2\"", p.name, layout)
		}
		if old != 0 {
			t.Errorf("%s: %d records of the old catalog left after the upgrade", p.name, old)
		}
	}

	// Restarted, the keyspace comes from the metadata alone and keeps its data.
	c.startAll()
	c.waitReady(c.names()...)
	cl = c.client("n3")
	eventually(t, "the value is read after the restart", func() error {
		ctx, cancel := reqCtx()
		defer cancel()
		res, err := cl.Get(ctx, "legacy", []byte("written-before"), client.Consistency("QUORUM"))
		if err != nil {
			return err
		}
		if string(res.Value) != "the upgrade" {
			t.Fatalf("read %q after the restart, want %q", res.Value, "the upgrade")
		}
		return nil
	})
}

// TestNewerLayoutRefused starts a node on a data directory a newer binary marked: it must
// exit with an error naming the layout rather than read data it does not understand.
func TestNewerLayoutRefused(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes[:1], []string{threeNodes[0].region})
	p := c.nodes[0]
	if err := os.MkdirAll(p.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e, err := storage.Open(p.dataDir, storage.Options{DiskReserveBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.PutMeta(layoutMetaKey, []byte("3"), true); err != nil {
		t.Fatal(err)
	}
	e.Close()
	c.start(p.name)
	select {
	case <-p.done:
	case <-time.After(waitLimit):
		t.Fatalf("%s still running on a data directory of layout 3", p.name)
	}
	if code := p.cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatalf("%s exited 0 on a data directory of layout 3", p.name)
	}
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "newer Meridian (data layout 3") {
		t.Fatalf("%s's log does not name the newer layout:\n%s", p.name, tail(string(b), 20))
	}
}

type errString string

func (e errString) Error() string { return string(e) }
