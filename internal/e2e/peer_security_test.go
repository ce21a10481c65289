package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"meridian/client"
	"meridian/internal/wire/peerpb"
)

// Issue 12, defect 1: the client port also served meridian.peer.v1.Peer/Stream, and a
// forged WriteRequest with a version in the year 2255 was applied; every later write was
// acknowledged yet no read ever returned it. Now peer traffic has its own listener, streams
// are accepted only from nodes of the cluster (cluster name, node id and name, from the
// node's own address), and a version too far ahead of the receiver's clock is refused even
// from a node of the cluster. Each refusal shows on /metrics.
func TestForgedPeerWritesAreRefused(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	n1 := c.node("n1")
	victim := []byte("victim")
	forged := &peerpb.Envelope{From: 2, To: 1, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{RequestId: 1, Record: &peerpb.Record{
		Keyspace: "demo", Key: victim, Value: []byte("FORGED"),
		Version: &peerpb.Version{WallNanos: time.Date(2255, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), NodeId: 2},
	}}}}

	// sendStream opens a peer stream to addr from source (""; any), with the metadata md,
	// sends env and returns the stream's final status.
	sendStream := func(addr, source string, md []string, env *peerpb.Envelope) error {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if source != "" {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
			opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
		}
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if len(md) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, md...)
		}
		st, err := peerpb.NewPeerClient(conn).Stream(ctx)
		if err != nil {
			return err
		}
		st.Send(env)
		_, err = st.CloseAndRecv()
		return err
	}
	asN2 := []string{"meridian-cluster", "e2e", "meridian-node-id", "2", "meridian-node", "n2", "meridian-to", "1"}

	// 1. The client port does not serve the peer service at all.
	if err := sendStream(n1.listen, "", asN2, forged); status.Code(err) != codes.Unimplemented {
		t.Fatalf("peer stream on the client port: %v, want Unimplemented", err)
	}
	// 2. The peer port refuses a stream that names no node, and one that claims to be n2
	//    from an address that is not n2's.
	if err := sendStream(n1.peerListen, "127.0.0.1", nil, forged); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous peer stream: %v, want Unauthenticated", err)
	}
	if err := sendStream(n1.peerListen, "127.0.0.1", asN2, forged); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("peer stream claiming n2 from 127.0.0.1: %v, want PermissionDenied", err)
	}
	// 3. Even from n2's own address with n2's identity (what a compromised or buggy member
	//    could send), a version 229 years ahead of n1's clock is refused, never applied.
	if err := sendStream(n1.peerListen, n2Host(c), asN2, forged); err != nil {
		t.Fatalf("peer stream as n2 from n2's address: %v", err)
	}

	// The victim key behaves: the acknowledged write is what every read returns.
	cl := c.client("n1")
	ctx, cancel := reqCtx()
	defer cancel()
	v, err := cl.Put(ctx, "demo", victim, []byte("new-after-forge"), client.Consistency("QUORUM"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range c.names() {
		r, err := c.client(name).Get(ctx, "demo", victim, client.Consistency("ALL"))
		if err != nil || string(r.Value) != "new-after-forge" || r.Version != v {
			t.Fatalf("read at ALL through %s: %q %v (err %v), want the acknowledged write %v", name, r.Value, r.Version, err, v)
		}
	}
	// /metrics shows both kinds of refusal.
	var samples map[string]float64
	eventually(t, "refusals on /metrics", func() error {
		samples = scrape(t, n1.metrics)
		for _, series := range []string{
			`meridian_peer_streams_refused_total{reason="no_identity"}`,
			`meridian_peer_streams_refused_total{reason="source_address"}`,
			`meridian_peer_messages_rejected_total{reason="future_version"}`,
		} {
			if samples[series] < 1 {
				return fmt.Errorf("%s = %v", series, samples[series])
			}
		}
		return nil
	})
}

// n2Host is the IP of n2's peer listener, the only address n2's streams are accepted from.
func n2Host(c *cluster) string {
	host, _, _ := net.SplitHostPort(c.node("n2").peerListen)
	return host
}
