package client

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"meridian/api/meridianpb"
)

// fakeNode answers ServerInfo with small limits, blocks Get until the call is cancelled, and
// accepts every Put that reaches it.
type fakeNode struct {
	meridianpb.UnimplementedMeridianServer
}

func (fakeNode) ServerInfo(context.Context, *meridianpb.ServerInfoRequest) (*meridianpb.ServerInfoResponse, error) {
	return &meridianpb.ServerInfoResponse{Node: "fake", MaxValueBytes: 500, MaxRequestMessageBytes: 2000}, nil
}

func (fakeNode) Get(ctx context.Context, _ *meridianpb.GetRequest) (*meridianpb.GetResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (fakeNode) Put(context.Context, *meridianpb.PutRequest) (*meridianpb.PutResponse, error) {
	return &meridianpb.PutResponse{}, nil
}

func startFake(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(2000))
	meridianpb.RegisterMeridianServer(s, fakeNode{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// A value the transport refuses for its size is explained with the documented limit, which
// the client asks the node for (issue 12: "received message larger than max").
func TestTransportSizeRefusalNamesTheLimit(t *testing.T) {
	c, err := Dial(startFake(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Put(context.Background(), "ks", []byte("k"), make([]byte, 4000))
	if CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "value is 4000 bytes, limit is 500 (limits.max_value_bytes) on node fake") {
		t.Fatalf("put over the transport's limit: %v", err)
	}
}

// A call without a deadline of its own is bounded, and the error says which node did not
// answer within how long.
func TestCallWithoutDeadlineIsBounded(t *testing.T) {
	addr := startFake(t)
	c, err := DialOptions(addr, Options{CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Get(context.Background(), "ks", []byte("k"))
	if CodeOf(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no answer from "+addr+" within 200ms") {
		t.Fatalf("get from a node that never answers: %v", err)
	}
	// With a server-side timeout, the client waits that long plus the grace.
	_, err = c.Get(context.Background(), "ks", []byte("k"), Timeout(100*time.Millisecond))
	if !strings.Contains(err.Error(), "within "+(100*time.Millisecond+TimeoutGrace).String()) {
		t.Fatalf("get with a 100ms timeout: %v", err)
	}
	// The caller's own deadline is kept as it is.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err = c.Get(ctx, "ks", []byte("k")); !strings.Contains(err.Error(), "before the caller's deadline") {
		t.Fatalf("get with the caller's deadline: %v", err)
	}
}

// Arguments that do not fit the wire's 32-bit fields are refused before anything is sent,
// never wrapped (issue 12: --limit 4294967297 returned 1 row).
func TestNarrowingIsValidated(t *testing.T) {
	c, err := Dial("127.0.0.1:1") // never dialled: every call fails before sending
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, limit := range []int{-1, math.MaxUint32 + 1, math.MaxUint32 + 2, 99999999999} {
		if _, _, err := c.Scan(context.Background(), "ks", nil, nil, limit); CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("scan limit %d: %v", limit, err)
		}
	}
	if _, err := c.Get(context.Background(), "ks", []byte("k"), Timeout(time.Duration(math.MaxUint32+1)*time.Millisecond)); CodeOf(err) != codes.InvalidArgument {
		t.Errorf("a timeout of 2^32 ms: %v", err)
	}
	if _, err := c.Get(context.Background(), "ks", []byte("k"), Timeout(-time.Second)); CodeOf(err) != codes.InvalidArgument {
		t.Errorf("a negative timeout: %v", err)
	}
}
