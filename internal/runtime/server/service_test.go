package server_test

// These tests drive the client API (server.Service) of an in-process cluster on the emulated
// WAN: 3 regions 2ms apart, one node per region, keyspace "kv" (quorum protocol, 16
// partitions, one replica per region). They are in package server_test because package demo,
// which builds the cluster, imports package server.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/placement"
	"meridian/internal/runtime/server"
	"meridian/internal/tools/bench"
	"meridian/internal/topology"
)

var regions = []string{"a", "b", "c"}

func startCluster(t *testing.T) *bench.Cluster {
	t.Helper()
	c, err := bench.StartCluster(bench.ClusterOptions{
		Topology:       topology.Equidistant("t", regions, 2, 0),
		NodesPerRegion: 1,
		Keyspace:       config.Keyspace{Name: "kv", Protocol: config.ProtocolQuorum},
		Seed:           1,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Close)
	if len(c.Services) != 3 {
		t.Fatalf("cluster has %d services, want 3", len(c.Services))
	}
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// wantCode asserts err is a gRPC status with the code and a message containing each of msg.
func wantCode(t *testing.T, err error, code codes.Code, msg ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", code)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v (%T) is not a gRPC status", err, err)
	}
	if st.Code() != code {
		t.Errorf("code %v, want %v (message %q)", st.Code(), code, st.Message())
	}
	for _, m := range msg {
		if !strings.Contains(st.Message(), m) {
			t.Errorf("message %q does not contain %q", st.Message(), m)
		}
	}
}

// eventually retries fn until it returns nil, failing the test after a generous bound.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newer reports whether a is strictly newer than b in (wall, logical, node) order.
func newer(a, b *meridianpb.Version) bool {
	switch {
	case a == nil:
		return false
	case b == nil:
		return true
	case a.WallNanos != b.WallNanos:
		return a.WallNanos > b.WallNanos
	case a.Logical != b.Logical:
		return a.Logical > b.Logical
	}
	return a.NodeId > b.NodeId
}

func sameVersion(a, b *meridianpb.Version) bool {
	return a.GetWallNanos() == b.GetWallNanos() && a.GetLogical() == b.GetLogical() && a.GetNodeId() == b.GetNodeId()
}

func TestPutGetDeleteRoundTrip(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	a, b, cc := c.Services[0], c.Services[1], c.Services[2]
	key := []byte("user/1")

	g, err := b.Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: key})
	if err != nil {
		t.Fatalf("get of a missing key: %v", err)
	}
	if g.Found || len(g.Value) != 0 {
		t.Errorf("missing key: found %v value %q", g.Found, g.Value)
	}

	p1, err := a.Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: key, Value: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}
	if p1.Version == nil || p1.Version.WallNanos == 0 || p1.Coordinator != "a-1" {
		t.Errorf("put 1: version %v coordinator %q", p1.Version, p1.Coordinator)
	}
	// QUORUM writes and reads intersect: another coordinator sees the write.
	g, err = b.Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Found || string(g.Value) != "v1" || !sameVersion(g.Version, p1.Version) || g.Coordinator != "b-1" {
		t.Errorf("get after put 1 = found %v %q %v via %q, want v1 %v via b-1", g.Found, g.Value, g.Version, g.Coordinator, p1.Version)
	}

	p2, err := cc.Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: key, Value: []byte("v2"), Consistency: "all"})
	if err != nil {
		t.Fatal(err)
	}
	if !newer(p2.Version, p1.Version) {
		t.Errorf("put 2 version %v is not newer than put 1 version %v", p2.Version, p1.Version)
	}
	for i, svc := range c.Services {
		g, err := svc.Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: key, Consistency: "ONE"})
		if err != nil {
			t.Fatal(err)
		}
		// The write was at ALL, so even ONE reads on every node see it.
		if !g.Found || string(g.Value) != "v2" || !sameVersion(g.Version, p2.Version) {
			t.Errorf("node %d: get after put 2 at ALL = found %v %q %v, want v2 %v", i, g.Found, g.Value, g.Version, p2.Version)
		}
	}

	// An empty value is a value.
	p3, err := a.Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if !newer(p3.Version, p2.Version) {
		t.Errorf("put 3 version %v is not newer than %v", p3.Version, p2.Version)
	}
	g, err = b.Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Found || len(g.Value) != 0 {
		t.Errorf("get of an empty value = found %v %q", g.Found, g.Value)
	}

	d, err := b.Delete(cx, &meridianpb.DeleteRequest{Keyspace: "kv", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if !newer(d.Version, p3.Version) || d.Coordinator != "b-1" {
		t.Errorf("delete version %v via %q, want newer than %v via b-1", d.Version, d.Coordinator, p3.Version)
	}
	for i, svc := range c.Services {
		g, err := svc.Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if g.Found || len(g.Value) != 0 {
			t.Errorf("node %d: get after delete = found %v %q", i, g.Found, g.Value)
		}
	}

	// A write after the delete brings the key back, with a newer version still.
	p4, err := cc.Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: key, Value: []byte("v4")})
	if err != nil {
		t.Fatal(err)
	}
	if !newer(p4.Version, d.Version) {
		t.Errorf("put 4 version %v is not newer than the delete's %v", p4.Version, d.Version)
	}
	g, err = a.Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: key})
	if err != nil || !g.Found || string(g.Value) != "v4" {
		t.Errorf("get after put 4 = %v, %v", g, err)
	}
}

// TestInvalidRequestsThroughService checks that the gateway maps validation errors to gRPC
// statuses and never reaches the cluster with them.
func TestInvalidRequestsThroughService(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	s := c.Services[0]
	_, err := s.Get(cx, &meridianpb.GetRequest{Keyspace: "kv"})
	wantCode(t, err, codes.InvalidArgument, "key is empty")
	_, err = s.Get(cx, &meridianpb.GetRequest{Keyspace: "nope", Key: []byte("k")})
	wantCode(t, err, codes.NotFound, `unknown keyspace "nope"`)
	_, err = s.Put(cx, &meridianpb.PutRequest{Keyspace: "_system", Key: []byte("keyspace/evil"), Value: []byte("{}")})
	wantCode(t, err, codes.InvalidArgument, "reserved")
	_, err = s.Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: make([]byte, config.DefaultMaxValueBytes+1)})
	wantCode(t, err, codes.InvalidArgument, "limits.max_value_bytes")
	_, err = s.Delete(cx, &meridianpb.DeleteRequest{Keyspace: "kv", Key: []byte("k"), Consistency: "TWO"})
	wantCode(t, err, codes.InvalidArgument, `consistency "TWO"`)
	_, err = s.Scan(cx, &meridianpb.ScanRequest{Keyspace: "kv", Limit: config.DefaultMaxScanLimit + 1})
	wantCode(t, err, codes.InvalidArgument, "limits.max_scan_limit")
	_, err = s.Scan(cx, &meridianpb.ScanRequest{Keyspace: "kv", Start: []byte("b"), End: []byte("a")})
	wantCode(t, err, codes.InvalidArgument, "scan range is empty")
	_, err = s.Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte("k"), TimeoutMs: 61_000})
	wantCode(t, err, codes.InvalidArgument, "limits.max_request_timeout")
	// Transactions need a transactional keyspace.
	_, err = s.TxnRead(cx, &meridianpb.TxnReadRequest{Keyspace: "kv", Keys: [][]byte{[]byte("k")}})
	wantCode(t, err, codes.InvalidArgument, `keyspace "kv" is not transactional (txn_mode none)`)
	_, err = s.TxnCommit(cx, &meridianpb.TxnCommitRequest{Keyspace: "kv", Writes: []*meridianpb.TxnWrite{{Key: []byte("k"), Value: []byte("v")}}})
	wantCode(t, err, codes.InvalidArgument, `keyspace "kv" is not transactional (txn_mode none)`, "txn_mode sdur")
	_, err = s.TxnRead(cx, &meridianpb.TxnReadRequest{Keyspace: "nope", Keys: [][]byte{[]byte("k")}})
	wantCode(t, err, codes.NotFound, `unknown keyspace "nope"`)
	info, err := s.ServerInfo(cx, &meridianpb.ServerInfoRequest{})
	if err != nil || info.MaxTxnKeys != config.DefaultMaxTxnKeys {
		t.Errorf("server info: max_txn_keys %d, %v; want %d", info.GetMaxTxnKeys(), err, config.DefaultMaxTxnKeys)
	}
}

// scanKey is the i-th key of the scan tests: the first byte spreads the keys over the 16
// partitions (partition p holds first bytes 16p..16p+15).
func scanKey(i int) []byte { return []byte(string([]byte{byte(i * 5)}) + "k") }

func scanAll(t *testing.T, svc *server.Service, limit uint32) ([][]byte, int) {
	t.Helper()
	cx := ctx(t)
	var got [][]byte
	var start []byte
	pages := 0
	for {
		pages++
		if pages > 100 {
			t.Fatalf("scan with limit %d: more than 100 pages, got %d keys so far", limit, len(got))
		}
		res, err := svc.Scan(cx, &meridianpb.ScanRequest{Keyspace: "kv", Start: start, Limit: limit})
		if err != nil {
			t.Fatalf("scan from %q: %v", start, err)
		}
		if len(res.Items) > int(limit) {
			t.Fatalf("scan from %q with limit %d returned %d items", start, limit, len(res.Items))
		}
		for _, it := range res.Items {
			got = append(got, it.Key)
			if it.Version == nil {
				t.Errorf("item %q has no version", it.Key)
			}
		}
		if !res.More {
			return got, pages
		}
		if len(res.Items) == 0 {
			t.Fatalf("scan from %q: More with no items, the client cannot make progress", start)
		}
		start = append(slices.Clone(res.Items[len(res.Items)-1].Key), 0)
	}
}

func TestScanAcrossPartitions(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	const n = 50
	var want [][]byte
	for i := range n {
		k := scanKey(i)
		want = append(want, k)
		if _, err := c.Services[i%3].Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: k, Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
	}
	// The keys are spread over all 16 partitions (the point of the test).
	desc, err := c.Services[0].DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	used := map[uint32]bool{}
	for _, k := range want {
		i, _ := slices.BinarySearchFunc(desc.Partitions, k, func(p *meridianpb.PartitionPlacement, k []byte) int {
			return bytes.Compare(p.Start, k)
		})
		if i == len(desc.Partitions) || !bytes.Equal(desc.Partitions[i].Start, k) {
			i-- // the last partition starting before k
		}
		used[desc.Partitions[i].Partition] = true
	}
	if len(used) != len(desc.Partitions) {
		t.Fatalf("test bug: the keys fall in %d of %d partitions", len(used), len(desc.Partitions))
	}

	for i, svc := range c.Services {
		got, pages := scanAll(t, svc, 10)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("paged scan via %s returned %d keys %q\nwant %d keys %q", c.Nodes[i].Name(), len(got), got, len(want), want)
		}
		if pages != n/10 {
			t.Errorf("paged scan with limit 10 over %d keys took %d pages, want %d (More set on the last full page?)", n, pages, n/10)
		}
	}

	// One page: More says whether keys were left out.
	for _, tc := range []struct {
		limit uint32
		items int
		more  bool
	}{{1, 1, true}, {10, 10, true}, {49, 49, true}, {50, 50, false}, {51, 50, false}, {0, 50, false}} {
		res, err := c.Services[1].Scan(cx, &meridianpb.ScanRequest{Keyspace: "kv", Limit: tc.limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Items) != tc.items || res.More != tc.more {
			t.Errorf("scan with limit %d: %d items, More %v; want %d items, More %v", tc.limit, len(res.Items), res.More, tc.items, tc.more)
		}
		for i, it := range res.Items {
			if !bytes.Equal(it.Key, want[i]) || string(it.Value) != fmt.Sprint(i) {
				t.Errorf("scan with limit %d: item %d = %q=%q, want %q=%d", tc.limit, i, it.Key, it.Value, want[i], i)
				break
			}
		}
	}

	// A bounded range inside the keyspace: keys 10..19, [want[10], want[20]).
	res, err := c.Services[2].Scan(cx, &meridianpb.ScanRequest{Keyspace: "kv", Start: want[10], End: want[20]})
	if err != nil {
		t.Fatal(err)
	}
	var keys [][]byte
	for _, it := range res.Items {
		keys = append(keys, it.Key)
	}
	if !slices.EqualFunc(keys, want[10:20], bytes.Equal) || res.More {
		t.Errorf("scan [%q, %q) = %q More %v, want %q More false", want[10], want[20], keys, res.More, want[10:20])
	}
}

func TestDeleteHidesKeyFromGetAndScan(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	const n = 20
	for i := range n {
		if _, err := c.Services[0].Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: scanKey(i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	// Delete every third key, through another coordinator.
	var want [][]byte
	for i := range n {
		if i%3 == 0 {
			if _, err := c.Services[1].Delete(cx, &meridianpb.DeleteRequest{Keyspace: "kv", Key: scanKey(i)}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want = append(want, scanKey(i))
	}
	// Deleting a key that never existed is fine.
	if _, err := c.Services[1].Delete(cx, &meridianpb.DeleteRequest{Keyspace: "kv", Key: []byte("never")}); err != nil {
		t.Errorf("delete of a missing key: %v", err)
	}
	for i := range n {
		g, err := c.Services[2].Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: scanKey(i)})
		if err != nil {
			t.Fatal(err)
		}
		if g.Found != (i%3 != 0) {
			t.Errorf("get %q: found %v, want %v", scanKey(i), g.Found, i%3 != 0)
		}
	}
	for _, limit := range []uint32{1, 4, 7, 1000} {
		got, _ := scanAll(t, c.Services[2], limit)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("scan with limit %d after deletes = %q\nwant %q", limit, got, want)
		}
	}
	// Scans that start on, or are limited around, tombstones.
	res, err := c.Services[0].Scan(cx, &meridianpb.ScanRequest{Keyspace: "kv", Start: scanKey(0), End: scanKey(1)})
	if err != nil || len(res.Items) != 0 || res.More {
		t.Errorf("scan of a range holding only a tombstone = %v, %v; want no items, More false", res, err)
	}
	res, err = c.Services[0].Scan(cx, &meridianpb.ScanRequest{Keyspace: "kv", Start: scanKey(3), Limit: 1})
	if err != nil || len(res.Items) != 1 || !bytes.Equal(res.Items[0].Key, scanKey(4)) || !res.More {
		t.Errorf("scan from a tombstone with limit 1 = %v, %v; want %q, More true", res, err, scanKey(4))
	}
}

func keyspaceSpec(name string) *meridianpb.KeyspaceSpec {
	return &meridianpb.KeyspaceSpec{Name: name, Protocol: "quorum", Partitions: 8,
		Options: map[string]string{"read_level": "one", "write_level": "all"}}
}

func TestCreateKeyspace(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	a, b, cc := c.Services[0], c.Services[1], c.Services[2]

	res, err := a.CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("users")})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	sp := res.Spec
	if sp.GetName() != "users" || sp.GetProtocol() != "quorum" || !slices.Equal(sp.GetRegions(), regions) ||
		sp.GetReplicasPerRegion() != 1 || sp.GetPartitions() != 8 {
		t.Errorf("created spec = %v, want users/quorum, regions %v, 1 replica per region, 8 partitions", sp, regions)
	}
	// The options come back normalised, with the defaults filled in.
	if o := sp.GetOptions(); o["read_level"] != "ONE" || o["write_level"] != "ALL" || o["speculative_retry"] != "0s" {
		t.Errorf("created options = %v", o)
	}

	// The creating node can use the keyspace at once.
	if _, err := a.Put(cx, &meridianpb.PutRequest{Keyspace: "users", Key: []byte("u1"), Value: []byte("ann")}); err != nil {
		t.Errorf("put on the creating node: %v", err)
	}

	// Duplicates, on the creating node and (once installed) elsewhere.
	_, err = a.CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("users")})
	wantCode(t, err, codes.AlreadyExists, `"users"`)
	_, err = a.CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: &meridianpb.KeyspaceSpec{Name: "kv", Protocol: "quorum"}})
	wantCode(t, err, codes.AlreadyExists, `"kv"`)

	// Another node learns the keyspace within a WAN delay; then it serves it, and the value
	// written on the creating node (at ALL, the keyspace's write level) is there.
	for i, svc := range []*server.Service{b, cc} {
		eventually(t, fmt.Sprintf("keyspace installed on node %d", i+1), func() error {
			_, err := svc.DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "users"})
			return err
		})
	}
	if _, err := b.Put(cx, &meridianpb.PutRequest{Keyspace: "users", Key: []byte("u2"), Value: []byte("bob")}); err != nil {
		t.Fatalf("put on another node: %v", err)
	}
	for _, k := range []struct{ key, value string }{{"u1", "ann"}, {"u2", "bob"}} {
		g, err := cc.Get(cx, &meridianpb.GetRequest{Keyspace: "users", Key: []byte(k.key)})
		if err != nil || !g.Found || string(g.Value) != k.value {
			t.Errorf("get %s from a third node = %v, %v; want %s", k.key, g, err, k.value)
		}
	}
	_, err = b.CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("users")})
	wantCode(t, err, codes.AlreadyExists, `"users"`)
	// Keyspaces are separate: the key of users is not in kv.
	if g, err := b.Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte("u1")}); err != nil || g.Found {
		t.Errorf("get u1 from kv = %v, %v; want not found", g, err)
	}

	d, err := cc.DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "users"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Origin != "api" || len(d.Partitions) != 8 || d.Spec.GetName() != "users" {
		t.Errorf("describe users: origin %q, %d partitions, spec %v; want api, 8", d.Origin, len(d.Partitions), d.Spec)
	}
}

func TestCreateKeyspaceInvalid(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	s := c.Services[0]
	spec := func(edit func(*meridianpb.KeyspaceSpec)) *meridianpb.KeyspaceSpec {
		sp := keyspaceSpec("things")
		edit(sp)
		return sp
	}
	cases := []struct {
		name string
		req  *meridianpb.CreateKeyspaceRequest
		code codes.Code
		msg  []string
	}{
		{"no spec", &meridianpb.CreateKeyspaceRequest{}, codes.InvalidArgument, []string{"spec is missing"}},
		{"reserved name", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Name = "_system" })},
			codes.InvalidArgument, []string{`"_system"`, "reserved"}},
		{"reserved new name", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Name = "_mine" })},
			codes.InvalidArgument, []string{`"_mine"`, "reserved"}},
		{"empty name", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Name = "" })},
			codes.InvalidArgument, []string{"name is empty"}},
		{"bad name", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Name = "Things" })},
			codes.InvalidArgument, []string{"name:", `"Things" is not a valid keyspace name`}},
		{"no protocol", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Protocol = "" })},
			codes.InvalidArgument, []string{"protocol: required", "quorum"}},
		{"unknown protocol", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Protocol = "paxos" })},
			codes.InvalidArgument, []string{"protocol:", `unknown protocol "paxos"`}},
		{"too many partitions", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Partitions = 5000 })},
			codes.InvalidArgument, []string{"partitions:", "between 1 and 4096, got 5000"}},
		{"absurd partitions", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Partitions = 1 << 31 })},
			codes.InvalidArgument, []string{"partitions"}},
		{"too many replicas", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.ReplicasPerRegion = 2 })},
			codes.InvalidArgument, []string{"replicas_per_region:", "region a has 1"}},
		{"unknown region", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Regions = []string{"a", "mars"} })},
			codes.InvalidArgument, []string{"regions[1]:", `unknown region "mars"`}},
		{"duplicate region", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Regions = []string{"b", "b"} })},
			codes.InvalidArgument, []string{"regions[1]:", "duplicate region"}},
		{"unknown option", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Options["colour"] = "red" })},
			codes.InvalidArgument, []string{"options.colour:", "unknown option"}},
		{"bad level option", &meridianpb.CreateKeyspaceRequest{Spec: spec(func(sp *meridianpb.KeyspaceSpec) { sp.Options["read_level"] = "most" })},
			codes.InvalidArgument, []string{"options.read_level:", `"most"`}},
		{"timeout over max", &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec("things"), TimeoutMs: 61_000},
			codes.InvalidArgument, []string{"limits.max_request_timeout"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.CreateKeyspace(cx, tc.req)
			wantCode(t, err, tc.code, tc.msg...)
		})
	}
	// None of them created anything.
	l, err := s.ListKeyspaces(cx, &meridianpb.ListKeyspacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Keyspaces) != 1 || l.Keyspaces[0].Name != "kv" {
		t.Errorf("keyspaces after invalid creates = %v, want only kv", l.Keyspaces)
	}
}

func TestDescribeKeyspace(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	nodeOf := map[string]string{"a": "a-1", "b": "b-1", "c": "c-1"}
	for i, svc := range c.Services {
		d, err := svc.DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "kv"})
		if err != nil {
			t.Fatal(err)
		}
		sp := d.Spec
		if sp.GetName() != "kv" || sp.GetProtocol() != "quorum" || !slices.Equal(sp.GetRegions(), regions) ||
			sp.GetReplicasPerRegion() != 1 || sp.GetPartitions() != config.DefaultPartitions || sp.GetOptions()["read_level"] != "QUORUM" {
			t.Errorf("node %d: spec %v", i, sp)
		}
		if d.Origin != "config" || d.PlacementVersion == 0 {
			t.Errorf("node %d: origin %q placement version %d, want config and > 0", i, d.Origin, d.PlacementVersion)
		}
		if len(d.Partitions) != 16 {
			t.Fatalf("node %d: %d partitions, want 16", i, len(d.Partitions))
		}
		for j, p := range d.Partitions {
			if p.Partition != uint32(j) || !bytes.Equal(p.Start, placement.PartitionStart(j, 16)) {
				t.Errorf("node %d: partition %d: id %d start %x, want %d %x", i, j, p.Partition, p.Start, j, placement.PartitionStart(j, 16))
			}
			// One replica per region, named, in the keyspace's region order.
			want := []string{nodeOf["a"], nodeOf["b"], nodeOf["c"]}
			if !slices.Equal(p.Replicas, want) {
				t.Errorf("node %d: partition %d replicas %q, want %q", i, j, p.Replicas, want)
			}
		}
	}
	_, err := c.Services[0].DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound, `"nope"`)
	_, err = c.Services[0].DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{})
	wantCode(t, err, codes.InvalidArgument, "keyspace name is empty")
	_, err = c.Services[0].DescribeKeyspace(cx, &meridianpb.DescribeKeyspaceRequest{Name: "_system"})
	wantCode(t, err, codes.InvalidArgument, "reserved")
}

func TestListKeyspaces(t *testing.T) {
	c := startCluster(t)
	cx := ctx(t)
	names := func(svc *server.Service) []string {
		t.Helper()
		l, err := svc.ListKeyspaces(cx, &meridianpb.ListKeyspacesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ks := range l.Keyspaces {
			out = append(out, ks.Name)
		}
		return out
	}
	// The system keyspace is not listed.
	if got := names(c.Services[0]); !slices.Equal(got, []string{"kv"}) {
		t.Errorf("keyspaces = %q, want [kv]", got)
	}
	for _, name := range []string{"zeta", "alpha"} {
		if _, err := c.Services[0].CreateKeyspace(cx, &meridianpb.CreateKeyspaceRequest{Spec: keyspaceSpec(name)}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"alpha", "kv", "zeta"}
	if got := names(c.Services[0]); !slices.Equal(got, want) {
		t.Errorf("keyspaces on the creating node = %q, want %q (sorted)", got, want)
	}
	eventually(t, "keyspaces listed on another node", func() error {
		if got := names(c.Services[2]); !slices.Equal(got, want) {
			return fmt.Errorf("got %q, want %q", got, want)
		}
		return nil
	})
	l, err := c.Services[2].ListKeyspaces(cx, &meridianpb.ListKeyspacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sp := l.Keyspaces[0]; sp.Partitions != 8 || sp.Protocol != "quorum" || sp.Options["write_level"] != "ALL" {
		t.Errorf("listed spec of alpha = %v", sp)
	}
}
