package server_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcmd "google.golang.org/grpc/metadata"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/kawkab"
	"meridian/internal/runtime/node"
	"meridian/internal/runtime/server"
	"meridian/internal/tools/bench"
)

// These tests drive the Streams service of each node of an in-process cluster (keyspace kv
// on all three nodes) over gRPC on 127.0.0.1, every API and every refusal.

type streamNode struct {
	name string
	dir  string
	svc  *server.StreamsService
	api  meridianpb.StreamsClient
	stop func()
}

// streamAddrs are the test listeners' addresses by node (replication dials them);
// streamRegs the services' metrics registries by node (the node's own registry is not
// gathered here: its peers-down gauge reads the failure detector off the event loop).
var streamAddrs, streamRegs sync.Map

func streamRegistry(n *node.Node) *prometheus.Registry {
	r, _ := streamRegs.LoadOrStore(n, prometheus.NewRegistry())
	return r.(*prometheus.Registry)
}

// startStreamNode starts node i's Streams service on dir, its object store objects (none
// given: a new in-memory one of its own).
func startStreamNode(t *testing.T, c *bench.Cluster, i int, dir string, objects ...kawkab.ObjectStore) *streamNode {
	t.Helper()
	var obj kawkab.ObjectStore = kawkab.NewMemObjectStore()
	if len(objects) > 0 {
		obj = objects[0]
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	streamAddrs.Store(c.Nodes[i], lis.Addr().String())
	nodes := c.Nodes
	svc, err := server.NewStreamsService(c.Nodes[i], server.StreamsOptions{DataDir: dir, Objects: obj,
		Config: config.Streams{MaxBatch: "64KiB", SubscribeMaxLag: 5000}, Registry: streamRegistry(c.Nodes[i]),
		ReplicaAddress: func(id uint32) string {
			for _, n := range nodes {
				if n.ID() == id {
					a, _ := streamAddrs.Load(n)
					s, _ := a.(string)
					return s
				}
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	meridianpb.RegisterStreamsServer(gs, svc)
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sn := &streamNode{name: c.Nodes[i].Name(), dir: dir, svc: svc, api: meridianpb.NewStreamsClient(conn)}
	stopped := false
	sn.stop = func() {
		if stopped {
			return
		}
		stopped = true
		conn.Close()
		gs.Stop()
		if err := svc.Close(); err != nil {
			t.Errorf("close streams of %s: %v", sn.name, err)
		}
	}
	t.Cleanup(sn.stop)
	return sn
}

func startStreams(t *testing.T) (*bench.Cluster, []*streamNode) {
	c := startCluster(t)
	var out []*streamNode
	for i := range c.Nodes {
		out = append(out, startStreamNode(t, c, i, t.TempDir()))
	}
	return c, out
}

// byName returns the node named name.
func byName(t *testing.T, nodes []*streamNode, name string) *streamNode {
	t.Helper()
	for _, n := range nodes {
		if n.name == name {
			return n
		}
	}
	t.Fatalf("no node %q", name)
	return nil
}

// recs builds records of R bytes: timestamp ts0+i*step, value v(i) at offset 8.
func recs(R, n int, ts0, step int64, v func(i int) int64) []byte {
	b := make([]byte, R*n)
	for i := range n {
		binary.LittleEndian.PutUint64(b[i*R:], uint64(ts0+int64(i)*step))
		binary.LittleEndian.PutUint64(b[i*R+8:], uint64(v(i)))
	}
	return b
}

func appendAll(t *testing.T, api meridianpb.StreamsClient, ks, name string, batches ...[]byte) (*meridianpb.AppendResponse, error) {
	t.Helper()
	st, err := api.Append(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range batches {
		m := &meridianpb.AppendRequest{Records: b}
		if i == 0 {
			m.Keyspace, m.Stream = ks, name
		}
		if err := st.Send(m); err != nil {
			break // the server ended the call: CloseAndRecv says why
		}
	}
	return st.CloseAndRecv()
}

func readAll(t *testing.T, recv func() (*meridianpb.RecordsPage, error)) (first uint64, out []byte, pages int, err error) {
	t.Helper()
	first = ^uint64(0)
	for {
		p, err := recv()
		if errors.Is(err, io.EOF) {
			return first, out, pages, nil
		}
		if err != nil {
			return first, out, pages, err
		}
		if first == ^uint64(0) {
			first = p.FirstRecord
		} else if want := first + uint64(len(out))/uint64(p.RecordBytes); p.FirstRecord != want {
			t.Fatalf("page starts at record %d, want %d", p.FirstRecord, want)
		}
		pages++
		out = append(out, p.Records...)
	}
}

func TestStreamsCatalogAPI(t *testing.T) {
	c, nodes := startStreams(t)
	cx := ctx(t)
	api := nodes[1].api // any node creates
	for _, tc := range []struct {
		spec *meridianpb.StreamSpec
		code codes.Code
		msg  string
	}{
		{nil, codes.InvalidArgument, "spec is missing"},
		{&meridianpb.StreamSpec{Keyspace: "nope", Name: "s", RecordBytes: 16}, codes.NotFound, `no keyspace "nope"`},
		{&meridianpb.StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 8}, codes.InvalidArgument, "record size 8 bytes, want 16 to 4096"},
		{&meridianpb.StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 16, Ack: "quorum"}, codes.InvalidArgument, `ack level "quorum"`},
		{&meridianpb.StreamSpec{Keyspace: "kv", Name: "bad name", RecordBytes: 16}, codes.InvalidArgument, "use letters"},
		{&meridianpb.StreamSpec{Keyspace: "_meta", Name: "s", RecordBytes: 16}, codes.InvalidArgument, "reserved"},
	} {
		_, err := api.CreateStream(cx, &meridianpb.CreateStreamRequest{Spec: tc.spec})
		wantCode(t, err, tc.code, tc.msg)
	}
	cr, err := api.CreateStream(cx, &meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "ticks",
		Fields: []*meridianpb.StreamField{{Name: "ts", Type: "int64"}, {Name: "qty", Type: "int64"}, {Name: "sym", Type: "bytes", Bytes: 8}}, ValueField: "qty"}})
	if err != nil {
		t.Fatal(err)
	}
	info := cr.Stream
	if info.Spec.RecordBytes != 24 || info.Spec.ValueOffset != 8 || info.Spec.Ack != "local" || info.Id == 0 || info.Primary == "" ||
		info.PrimaryAddress == "" || info.Reader == "" || info.Reader == info.Primary {
		t.Fatalf("created: %+v", info)
	}
	_, err = api.CreateStream(cx, &meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "ticks", RecordBytes: 16}})
	wantCode(t, err, codes.AlreadyExists, `stream "ticks" already exists`)
	// Every node lists and describes it; the primary adds its length.
	for _, n := range nodes {
		eventually(t, "list at "+n.name, func() error {
			l, err := n.api.ListStreams(cx, &meridianpb.ListStreamsRequest{Keyspace: "kv"})
			if err != nil {
				return err
			}
			if len(l.Streams) != 1 || l.Streams[0].Id != info.Id {
				return fmt.Errorf("listed %v", l.Streams)
			}
			return nil
		})
		d, err := n.api.DescribeStream(cx, &meridianpb.DescribeStreamRequest{Keyspace: "kv", Name: "ticks"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Stream.Live != (n.name == info.Primary) || d.Stream.Records != 0 || d.Stream.HasRecords {
			t.Fatalf("describe at %s: %+v", n.name, d.Stream)
		}
	}
	_, err = api.ListStreams(cx, &meridianpb.ListStreamsRequest{Keyspace: "nope"})
	wantCode(t, err, codes.NotFound, `unknown keyspace "nope"`)
	_, err = api.DescribeStream(cx, &meridianpb.DescribeStreamRequest{Keyspace: "kv", Name: "missing"})
	wantCode(t, err, codes.NotFound, `no stream "missing" in keyspace "kv"`)
	_, err = api.DescribeStream(cx, &meridianpb.DescribeStreamRequest{Keyspace: "", Name: "x"})
	wantCode(t, err, codes.InvalidArgument, "keyspace name is empty")

	// Its files exist at the primary once it is used; a drop removes them.
	prim := byName(t, nodes, info.Primary)
	if _, err := appendAll(t, prim.api, "kv", "ticks", recs(24, 10, 1, 1, func(i int) int64 { return int64(i) })); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(prim.dir, "streams", kawkab.StreamDirName(info.Id))
	if _, err := os.Stat(sdir); err != nil {
		t.Fatalf("stream files: %v", err)
	}
	_, err = api.DropStream(cx, &meridianpb.DropStreamRequest{Keyspace: "kv", Name: "ticks", ExpectVersion: info.Version + 1})
	wantCode(t, err, codes.Aborted, "changed concurrently")
	if _, err := api.DropStream(cx, &meridianpb.DropStreamRequest{Keyspace: "kv", Name: "ticks", ExpectVersion: info.Version}); err != nil {
		t.Fatal(err)
	}
	_, err = api.DropStream(cx, &meridianpb.DropStreamRequest{Keyspace: "kv", Name: "ticks"})
	wantCode(t, err, codes.NotFound, `no stream "ticks"`)
	eventually(t, "files removed", func() error {
		if _, err := os.Stat(sdir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s still there (%v)", sdir, err)
		}
		return nil
	})
	_, err = prim.api.DescribeStream(cx, &meridianpb.DescribeStreamRequest{Keyspace: "kv", Name: "ticks"})
	wantCode(t, err, codes.NotFound)
	_, err = appendAll(t, prim.api, "kv", "ticks", recs(24, 1, 100, 1, func(int) int64 { return 0 }))
	wantCode(t, err, codes.NotFound)

	// Dropping the keyspace drops its streams and their files.
	info2 := createStream(t, api, "again", 16)
	prim2 := byName(t, nodes, info2.Primary)
	if _, err := appendAll(t, prim2.api, "kv", "again", recs(16, 5, 1, 1, func(int) int64 { return 0 })); err != nil {
		t.Fatal(err)
	}
	sdir2 := filepath.Join(prim2.dir, "streams", kawkab.StreamDirName(info2.Id))
	if _, err := c.Services[0].DropKeyspace(cx, &meridianpb.DropKeyspaceRequest{Name: "kv"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the keyspace's stream dropped everywhere", func() error {
		for _, n := range nodes {
			if l, err := n.api.ListStreams(cx, &meridianpb.ListStreamsRequest{}); err != nil || len(l.Streams) != 0 {
				return fmt.Errorf("%s lists %v (%v)", n.name, l.GetStreams(), err)
			}
		}
		if _, err := os.Stat(sdir2); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s still there (%v)", sdir2, err)
		}
		return nil
	})
	_, err = prim2.api.DescribeStream(cx, &meridianpb.DescribeStreamRequest{Keyspace: "kv", Name: "again"})
	wantCode(t, err, codes.NotFound)
}

func createStream(t *testing.T, api meridianpb.StreamsClient, name string, R int) *meridianpb.StreamInfo {
	t.Helper()
	cr, err := api.CreateStream(ctx(t), &meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: name, RecordBytes: uint32(R), ValueOffset: 8}})
	if err != nil {
		t.Fatal(err)
	}
	return cr.Stream
}

func TestStreamsAppendAndRead(t *testing.T) {
	c, nodes := startStreams(t)
	cx := ctx(t)
	const R = 32
	info := createStream(t, nodes[0].api, "s", R)
	prim := byName(t, nodes, info.Primary)
	var other *streamNode
	for _, n := range nodes {
		if n.name != info.Primary {
			other = n
		}
	}

	// Refusals.
	_, err := appendAll(t, other.api, "kv", "s", recs(R, 1, 1, 1, func(int) int64 { return 0 }))
	wantCode(t, err, codes.FailedPrecondition, "not its primary", info.Primary, info.PrimaryAddress)
	_, err = appendAll(t, prim.api, "kv", "nope", recs(R, 1, 1, 1, func(int) int64 { return 0 }))
	wantCode(t, err, codes.NotFound, `no stream "nope"`)
	_, err = appendAll(t, prim.api, "kv", "s", nil)
	wantCode(t, err, codes.InvalidArgument, "empty batch")
	_, err = appendAll(t, prim.api, "kv", "s", make([]byte, R+5))
	wantCode(t, err, codes.InvalidArgument, "not a whole number of 32-byte records", "1 records and 5 bytes")
	_, err = appendAll(t, prim.api, "kv", "s", make([]byte, 65536+R))
	wantCode(t, err, codes.InvalidArgument, "exceeds the limit of 65536 bytes")
	_, err = appendAll(t, prim.api, "kv", "s", recs(R, 3, 100, -1, func(int) int64 { return 0 }))
	wantCode(t, err, codes.InvalidArgument, "timestamp 99", "100")

	// Appends: client streaming, then acknowledged batches; timestamps 0, 10, 20, ...
	const total = 3000
	all := recs(R, total, 0, 10, func(i int) int64 { return int64(i*7%1000) - 300 })
	res, err := appendAll(t, prim.api, "kv", "s", all[:1000*R], all[1000*R:2000*R])
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 2000 || res.Batches != 2 || res.FirstRecord != 0 || res.LastRecord != 1999 {
		t.Fatalf("append response %+v", res)
	}
	st, err := prim.api.AppendAcked(cx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2000; i < total; i += 250 {
		m := &meridianpb.AppendRequest{Keyspace: "kv", Stream: "s", Records: all[i*R : (i+250)*R]}
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		ack, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ack.FirstRecord != uint64(i) || ack.Records != 250 {
			t.Fatalf("ack %+v, want first %d", ack, i)
		}
	}
	// A batch older than the stream's end names both timestamps; another stream is refused.
	if err := st.Send(&meridianpb.AppendRequest{Records: recs(R, 1, 5, 1, func(int) int64 { return 0 })}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantCode(t, err, codes.InvalidArgument, "timestamp 5", fmt.Sprint((total-1)*10))
	st2, _ := prim.api.AppendAcked(cx)
	st2.Send(&meridianpb.AppendRequest{Keyspace: "kv", Stream: "s", Records: recs(R, 1, 1e9, 1, func(int) int64 { return 0 })})
	if _, err := st2.Recv(); err != nil {
		t.Fatal(err)
	}
	st2.Send(&meridianpb.AppendRequest{Keyspace: "kv", Stream: "t", Records: recs(R, 1, 1e9, 1, func(int) int64 { return 0 })})
	_, err = st2.Recv()
	wantCode(t, err, codes.InvalidArgument, "one stream")
	n := total + 1
	all = append(all, recs(R, 1, 1e9, 1, func(int) int64 { return 0 })...)

	// ReadRecords: in pages of page_bytes.
	rr, err := prim.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "s", First: 5, Count: 100, PageBytes: 10 * R})
	if err != nil {
		t.Fatal(err)
	}
	first, got, pages, err := readAll(t, rr.Recv)
	if err != nil || first != 5 || string(got) != string(all[5*R:105*R]) || pages != 10 {
		t.Fatalf("read records: first %d, %d bytes, %d pages, %v", first, len(got), pages, err)
	}
	rr, _ = prim.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "s"})
	if _, got, _, err = readAll(t, rr.Recv); err != nil || string(got) != string(all) {
		t.Fatalf("read all records: %d bytes, %v", len(got), err)
	}
	rr, _ = prim.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "s", First: uint64(n + 1)})
	_, _, _, err = readAll(t, rr.Recv)
	wantCode(t, err, codes.OutOfRange, fmt.Sprintf("the stream has %d records", n))
	rr, _ = prim.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "s", PageBytes: 8 << 20})
	_, _, _, err = readAll(t, rr.Recv)
	wantCode(t, err, codes.InvalidArgument, "page_bytes 8388608 exceeds the limit")
	rr, _ = other.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "s"})
	_, _, _, err = readAll(t, rr.Recv)
	wantCode(t, err, codes.FailedPrecondition, info.Primary)

	// ReadRange against brute force, with edges, a limit and single timestamps.
	for _, tc := range []struct {
		tl, th int64
		limit  uint64
	}{{0, 29990, 0}, {15, 15, 0}, {20, 20, 0}, {-100, -1, 0}, {105, 20000, 0}, {105, 20000, 17}, {29990, 2e9, 0}, {0, 1e9, 0}} {
		rg, err := prim.api.ReadRange(cx, &meridianpb.ReadRangeRequest{Keyspace: "kv", Stream: "s", FromTimestamp: tc.tl, ToTimestamp: tc.th, Limit: tc.limit, PageBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		first, got, _, err := readAll(t, rg.Recv)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		wfirst := ^uint64(0)
		for i := 0; i < n; i++ {
			ts := int64(binary.LittleEndian.Uint64(all[i*R:]))
			if ts >= tc.tl && ts <= tc.th && (tc.limit == 0 || uint64(len(want)/R) < tc.limit) {
				if wfirst == ^uint64(0) {
					wfirst = uint64(i)
				}
				want = append(want, all[i*R:(i+1)*R]...)
			}
		}
		if string(got) != string(want) || (len(want) > 0 && first != wfirst) {
			t.Fatalf("range [%d, %d] limit %d: %d records from %d, want %d from %d", tc.tl, tc.th, tc.limit, len(got)/R, first, len(want)/R, wfirst)
		}
	}
	rg, _ := prim.api.ReadRange(cx, &meridianpb.ReadRangeRequest{Keyspace: "kv", Stream: "s", FromTimestamp: 10, ToTimestamp: 5})
	_, _, _, err = readAll(t, rg.Recv)
	wantCode(t, err, codes.InvalidArgument, "from_timestamp 10 is after to_timestamp 5")

	// Aggregate against brute force.
	for _, tc := range [][2]int64{{0, 1e10}, {15, 25}, {1234, 27771}, {-5, -1}} {
		a, err := prim.api.Aggregate(cx, &meridianpb.AggregateRequest{Keyspace: "kv", Stream: "s", FromTimestamp: tc[0], ToTimestamp: tc[1]})
		if err != nil {
			t.Fatal(err)
		}
		var cnt uint64
		sum := new(big.Int)
		var mn, mx int64
		for i := 0; i < n; i++ {
			ts := int64(binary.LittleEndian.Uint64(all[i*R:]))
			v := int64(binary.LittleEndian.Uint64(all[i*R+8:]))
			if ts < tc[0] || ts > tc[1] {
				continue
			}
			if cnt == 0 || v < mn {
				mn = v
			}
			if cnt == 0 || v > mx {
				mx = v
			}
			cnt++
			sum.Add(sum, big.NewInt(v))
		}
		if a.Count != cnt || a.Sum != sum.String() || (cnt > 0 && (a.Min != mn || a.Max != mx)) {
			t.Fatalf("aggregate %v: %+v, want count %d sum %s min %d max %d", tc, a, cnt, sum, mn, mx)
		}
	}
	_, err = prim.api.Aggregate(cx, &meridianpb.AggregateRequest{Keyspace: "kv", Stream: "s", FromTimestamp: 2, ToTimestamp: 1})
	wantCode(t, err, codes.InvalidArgument, "after")
	_, err = other.api.Aggregate(cx, &meridianpb.AggregateRequest{Keyspace: "kv", Stream: "s"})
	wantCode(t, err, codes.FailedPrecondition, info.PrimaryAddress)

	// Metrics: every acknowledged record counted once, refusals apart.
	pn := nodeNamed(t, c, info.Primary)
	if got := metricValue(t, streamRegistry(pn), "meridian_stream_appended_records_total", nil); got != float64(n) {
		t.Fatalf("appended records metric %v, want %d", got, n)
	}
	if got := metricValue(t, streamRegistry(pn), "meridian_stream_appends_total", map[string]string{"outcome": "refused"}); got < 5 {
		t.Fatalf("refused appends metric %v, want at least 5", got)
	}
	// The primary's service restarts on its directory: every record is there.
	prim.stop()
	var idx int
	for i, nd := range c.Nodes {
		if nd.Name() == info.Primary {
			idx = i
		}
	}
	again := startStreamNode(t, c, idx, prim.dir)
	rr, _ = again.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "s"})
	if _, got, _, err = readAll(t, rr.Recv); err != nil || string(got) != string(all) {
		t.Fatalf("after restart: %d bytes, %v", len(got), err)
	}
	d, err := again.api.DescribeStream(cx, &meridianpb.DescribeStreamRequest{Keyspace: "kv", Name: "s"})
	if err != nil || d.Stream.Records != uint64(n) || d.Stream.LastTimestamp != 1e9 || !d.Stream.HasRecords {
		t.Fatalf("describe after restart: %+v, %v", d.GetStream(), err)
	}
}

func TestStreamsSubscribe(t *testing.T) {
	c, nodes := startStreams(t)
	const R = 16
	info := createStream(t, nodes[0].api, "tail", R)
	prim := byName(t, nodes, info.Primary)
	cx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	if _, err := appendAll(t, prim.api, "kv", "tail", recs(R, 100, 0, 1, func(i int) int64 { return int64(i) })); err != nil {
		t.Fatal(err)
	}
	sub, err := prim.api.Subscribe(cx, &meridianpb.SubscribeRequest{Keyspace: "kv", Stream: "tail", From: 40, PageBytes: 20 * R})
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(40)
	recvUpTo := func(end uint64) {
		t.Helper()
		for next < end {
			p, err := sub.Recv()
			if err != nil {
				t.Fatalf("subscription at record %d: %v", next, err)
			}
			if p.FirstRecord != next || p.Count == 0 || p.Count > 20 {
				t.Fatalf("page from %d of %d records, want from %d", p.FirstRecord, p.Count, next)
			}
			for i := range int(p.Count) {
				if ts := int64(binary.LittleEndian.Uint64(p.Records[i*R:])); ts != int64(next)+int64(i) {
					t.Fatalf("record %d has timestamp %d", next+uint64(i), ts)
				}
			}
			next += uint64(p.Count)
		}
	}
	recvUpTo(100)
	// New records are delivered as they are acknowledged.
	for b := range 5 {
		if _, err := appendAll(t, prim.api, "kv", "tail", recs(R, 30, int64(100+30*b), 1, func(int) int64 { return 0 })); err != nil {
			t.Fatal(err)
		}
		recvUpTo(uint64(130 + 30*b))
	}
	// From the end: only new records.
	end, err := prim.api.Subscribe(cx, &meridianpb.SubscribeRequest{Keyspace: "kv", Stream: "tail", FromEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendAll(t, prim.api, "kv", "tail", recs(R, 1, 1000, 1, func(int) int64 { return 0 })); err != nil {
		t.Fatal(err)
	}
	if p, err := end.Recv(); err != nil || p.FirstRecord != 250 || p.Count != 1 {
		t.Fatalf("from the end: %+v, %v", p, err)
	}
	// Refusals.
	bad, _ := prim.api.Subscribe(cx, &meridianpb.SubscribeRequest{Keyspace: "kv", Stream: "tail", From: 1000})
	_, err = bad.Recv()
	wantCode(t, err, codes.OutOfRange, "from record 1000", "has 251 records")
	bad, _ = prim.api.Subscribe(cx, &meridianpb.SubscribeRequest{Keyspace: "kv", Stream: "tail", MaxLagRecords: 1 << 40})
	_, err = bad.Recv()
	wantCode(t, err, codes.InvalidArgument, "max_lag_records")
	bad, _ = nodes[(indexOf(nodes, prim)+1)%3].api.Subscribe(cx, &meridianpb.SubscribeRequest{Keyspace: "kv", Stream: "tail"})
	_, err = bad.Recv()
	wantCode(t, err, codes.FailedPrecondition, "not its primary")

	// A subscriber that stops reading after catching up is ended, naming where to resume.
	slow, err := prim.api.Subscribe(cx, &meridianpb.SubscribeRequest{Keyspace: "kv", Stream: "tail", FromEnd: true, PageBytes: R, MaxLagRecords: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendAll(t, prim.api, "kv", "tail", recs(R, 1, 2000, 1, func(int) int64 { return 0 })); err != nil {
		t.Fatal(err)
	}
	if p, err := slow.Recv(); err != nil || p.FirstRecord != 251 {
		t.Fatalf("slow subscriber's first page: %+v, %v", p, err)
	}
	ts := int64(3000)
	for range 60 { // 60 × 1000 records of 1-record pages: far beyond gRPC's window and the buffer
		if _, err := appendAll(t, prim.api, "kv", "tail", recs(R, 1000, ts, 1, func(int) int64 { return 0 })); err != nil {
			t.Fatal(err)
		}
		ts += 1000
	}
	var last error
	got := 0
	for {
		_, err := slow.Recv()
		if err != nil {
			last = err
			break
		}
		got++
	}
	wantCode(t, last, codes.ResourceExhausted, "too slow", "resubscribe from")
	if got := metricValue(t, streamRegistry(nodeNamed(t, c, info.Primary)), "meridian_stream_subscriptions_ended_total", map[string]string{"reason": "too_slow"}); got < 1 {
		t.Fatalf("too-slow subscriptions metric %v", got)
	}
	if got >= 60000 {
		t.Fatalf("the slow subscriber got all %d records", got)
	}
	// The first subscriber, not read meanwhile, is too slow too.
	for {
		if _, err := sub.Recv(); err != nil {
			wantCode(t, err, codes.ResourceExhausted, "too slow")
			break
		}
	}
	// Dropping the stream ends its subscriptions.
	sub, err = prim.api.Subscribe(cx, &meridianpb.SubscribeRequest{Keyspace: "kv", Stream: "tail", FromEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].api.DropStream(cx, &meridianpb.DropStreamRequest{Keyspace: "kv", Name: "tail"}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := sub.Recv()
		if err != nil {
			wantCode(t, err, codes.NotFound, "dropped")
			break
		}
	}
}

func indexOf(nodes []*streamNode, n *streamNode) int {
	for i, m := range nodes {
		if m == n {
			return i
		}
	}
	return -1
}

// TestStreamsReplicated: a replicated stream's batches are in the second node's copy before
// they are acknowledged; with the second node down appends fail (UNAVAILABLE, naming it)
// rather than succeed with one copy; when it is back the copy catches up, the failed batch
// first; replication calls from anyone but the primary, or out of sequence, are refused.
func TestStreamsReplicated(t *testing.T) {
	c, nodes := startStreams(t)
	cx := ctx(t)
	const R = 24
	cr, err := nodes[0].api.CreateStream(cx, &meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "rep", RecordBytes: R, ValueOffset: 8, Ack: "replicated"}})
	if err != nil {
		t.Fatal(err)
	}
	info := cr.Stream
	prim, second := byName(t, nodes, info.Primary), byName(t, nodes, info.Reader)
	if prim == second {
		t.Fatalf("primary and second node are both %s", prim.name)
	}
	var model []byte
	ts := int64(0)
	batch := func(n int) []byte {
		b := recs(R, n, ts, 1, func(i int) int64 { return ts + int64(i) })
		ts += int64(n)
		return b
	}
	for range 5 {
		b := batch(300)
		if _, err := appendAll(t, prim.api, "kv", "rep", b); err != nil {
			t.Fatal(err)
		}
		model = append(model, b...)
	}
	// The copy, read from the second node's files once its service is stopped.
	readCopy := func(sn *streamNode) []byte {
		t.Helper()
		sn.stop()
		st, err := kawkab.OpenStream(filepath.Join(sn.dir, "streams"), info.Id, kawkab.StreamOptions{})
		if err != nil {
			t.Fatalf("open the copy: %v", err)
		}
		defer st.Close()
		out, err := st.ReadRecords(0, int(st.Len()))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	idx := slices.IndexFunc(c.Nodes, func(n *node.Node) bool { return n.Name() == second.name })
	if got := readCopy(second); string(got) != string(model) {
		t.Fatalf("the copy holds %d records, want %d", len(got)/R, len(model)/R)
	}
	// Second node down: the append fails visibly; the primary keeps the batch.
	for range 3 { // 3 × 48 KB: the catch-up takes more than one 64 KiB piece
		failed := batch(2000)
		_, err = appendAll(t, prim.api, "kv", "rep", failed)
		wantCode(t, err, codes.Unavailable, "did not acknowledge", second.name)
		model = append(model, failed...)
	}
	// Back: the next append brings the copy up to date, the failed batch first.
	second = startStreamNode(t, c, idx, second.dir)
	b := batch(50)
	if _, err := appendAll(t, prim.api, "kv", "rep", b); err != nil {
		t.Fatalf("append with the second node back: %v", err)
	}
	model = append(model, b...)
	rr, _ := prim.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "rep"})
	if _, got, _, err := readAll(t, rr.Recv); err != nil || string(got) != string(model) {
		t.Fatalf("the primary holds %d records, want %d (%v)", len(got)/R, len(model)/R, err)
	}
	// A replication call from anyone but the primary is refused.
	forged, err := second.api.Replicate(cx)
	if err != nil {
		t.Fatal(err)
	}
	forged.Send(&meridianpb.ReplicateRequest{Keyspace: "kv", Stream: "rep", StreamId: info.Id})
	_, err = forged.Recv()
	wantCode(t, err, codes.PermissionDenied, "only its primary")
	// The primary's identity (from its IP, 127.0.0.1 here), but out of sequence.
	var primID uint32
	for _, n := range c.Nodes {
		if n.Name() == info.Primary {
			primID = n.ID()
		}
	}
	mctx := grpcmd.AppendToOutgoingContext(cx, "meridian-cluster", c.Config.Name, "meridian-node-id", fmt.Sprint(primID))
	seq, err := second.api.Replicate(mctx)
	if err != nil {
		t.Fatal(err)
	}
	seq.Send(&meridianpb.ReplicateRequest{Keyspace: "kv", Stream: "rep", StreamId: info.Id})
	ack, err := seq.Recv()
	if err != nil || ack.Records != uint64(len(model)/R) {
		t.Fatalf("hello: %+v, %v", ack, err)
	}
	seq.Send(&meridianpb.ReplicateRequest{FirstRecord: ack.Records + 5, Records: make([]byte, R)})
	_, err = seq.Recv()
	wantCode(t, err, codes.FailedPrecondition, "the copy holds")
	if got := readCopy(second); string(got) != string(model) {
		t.Fatalf("after catching up the copy holds %d records, want %d", len(got)/R, len(model)/R)
	}
}

func nodeNamed(t *testing.T, c *bench.Cluster, name string) *node.Node {
	t.Helper()
	for _, n := range c.Nodes {
		if n.Name() == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}
