package server_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/tools/bench"
	"meridian/internal/topology"
)

// TestGlobLeaseThroughService drives a globlease keyspace through the client API: writes
// in both modes, reads from every region, a master move, and the requests the gateway
// refuses for globlease.
func TestGlobLeaseThroughService(t *testing.T) {
	c, err := bench.StartCluster(bench.ClusterOptions{
		Topology:       topology.Equidistant("t", regions, 2, 0),
		NodesPerRegion: 1,
		Keyspace: config.Keyspace{Name: "gl", Protocol: config.ProtocolGlobLease,
			Options: map[string]string{"lease": "2s", "master_lease": "500ms", "election_timeout": "1s"}},
		Seed: 1,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Close)
	cx := ctx(t)
	a, b, cc := c.Services[0], c.Services[1], c.Services[2]
	key := []byte("k")
	paths := []string{"master", "lease", "forwarded", "affiliate"}

	// The first requests may find the partition's masters still being established.
	eventually(t, "first put", func() error {
		_, err := a.Put(cx, &meridianpb.PutRequest{Keyspace: "gl", Key: key, Value: []byte("v1")})
		return err
	})
	getAll := func(want string) {
		t.Helper()
		for i, svc := range c.Services {
			g, err := svc.Get(cx, &meridianpb.GetRequest{Keyspace: "gl", Key: key})
			if err != nil {
				t.Fatalf("node %d: get: %v", i, err)
			}
			if !g.Found || string(g.Value) != want {
				t.Errorf("node %d: get = found %v %q, want %q", i, g.Found, g.Value, want)
			}
			if !slices.Contains(paths, g.ReadPath) {
				t.Errorf("node %d: read path %q, want one of %v", i, g.ReadPath, paths)
			}
		}
	}
	getAll("v1")

	m, err := b.MoveMaster(cx, &meridianpb.MoveMasterRequest{Keyspace: "gl", Key: key, Region: "c"})
	if err != nil {
		t.Fatalf("move master to c: %v", err)
	}
	if m.Master != "c-1" || m.Region != "c" || m.TableVersion == 0 {
		t.Errorf("move master = %v, want master c-1 in region c with a table version", m)
	}
	if _, err := a.Put(cx, &meridianpb.PutRequest{Keyspace: "gl", Key: key, Value: []byte("v2"), WriteMode: "passive"}); err != nil {
		t.Fatalf("passive put after the move: %v", err)
	}
	getAll("v2")
	if _, err := cc.Delete(cx, &meridianpb.DeleteRequest{Keyspace: "gl", Key: key, WriteMode: "ACTIVE"}); err != nil {
		t.Fatalf("active delete: %v", err)
	}
	for i, svc := range c.Services {
		g, err := svc.Get(cx, &meridianpb.GetRequest{Keyspace: "gl", Key: key})
		if err != nil || g.Found {
			t.Errorf("node %d: get after delete = found %v, %v", i, g.GetFound(), err)
		}
	}

	// Scans take consistency levels.
	if _, err := b.Scan(cx, &meridianpb.ScanRequest{Keyspace: "gl", Consistency: "QUORUM"}); err != nil {
		t.Errorf("QUORUM scan of a globlease keyspace: %v", err)
	}

	// Refused by the gateway.
	_, err = a.Get(cx, &meridianpb.GetRequest{Keyspace: "gl", Key: key, Consistency: "QUORUM"})
	wantCode(t, err, codes.InvalidArgument, "uses protocol globlease, which takes no consistency level")
	_, err = a.Put(cx, &meridianpb.PutRequest{Keyspace: "gl", Key: key, Value: []byte("x"), WriteMode: "sometimes"})
	wantCode(t, err, codes.InvalidArgument, `write_mode "sometimes"`, "active or passive")
	_, err = a.MoveMaster(cx, &meridianpb.MoveMasterRequest{Keyspace: "gl", Key: key, Region: "mars"})
	wantCode(t, err, codes.InvalidArgument, `"mars" is not a region of keyspace "gl"`, "regions: a, b, c")
	_, err = a.MoveMaster(cx, &meridianpb.MoveMasterRequest{Keyspace: "nope", Key: key, Region: "a"})
	wantCode(t, err, codes.NotFound, `unknown keyspace "nope"`)
	_, err = a.MoveMaster(cx, &meridianpb.MoveMasterRequest{Keyspace: "gl", Region: "a"})
	wantCode(t, err, codes.InvalidArgument, "key is empty")
}
