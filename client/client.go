// Package client is the Go client of Meridian's gRPC API.
//
//	c, err := client.Dial("127.0.0.1:7101")
//	defer c.Close()
//	v, err := c.Put(ctx, "demo", []byte("k"), []byte("v"), client.Consistency("QUORUM"))
//	r, err := c.Get(ctx, "demo", []byte("k"))
//
// Connect to a node in your own region: the node you call coordinates your request.
// Errors carry the server's one-line explanation; Code tells retryable kinds apart.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
)

// Version identifies one write: (wall time, logical counter, coordinator node id).
type Version struct {
	WallNanos int64
	Logical   uint32
	NodeID    uint32
}

func (v Version) String() string {
	if v == (Version{}) {
		return "-"
	}
	return fmt.Sprintf("%s.%d@%d", time.Unix(0, v.WallNanos).UTC().Format("2006-01-02T15:04:05.000000000Z"), v.Logical, v.NodeID)
}

func fromPB(v *meridianpb.Version) Version {
	if v == nil {
		return Version{}
	}
	return Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeID: v.NodeId}
}

// Error is an error returned by a Meridian node.
type Error struct {
	Code codes.Code
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", codeName(e.Code), e.Msg) }

func codeName(c codes.Code) string {
	switch c {
	case codes.InvalidArgument:
		return "invalid argument"
	case codes.NotFound:
		return "not found"
	case codes.AlreadyExists:
		return "already exists"
	case codes.Unavailable:
		return "unavailable"
	case codes.DeadlineExceeded:
		return "timeout"
	case codes.ResourceExhausted:
		return "overloaded"
	}
	return c.String()
}

// CodeOf returns the gRPC code of err (codes.Unknown when err is not from a node).
func CodeOf(err error) codes.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return codes.Unknown
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok {
		return &Error{Code: s.Code(), Msg: s.Message()}
	}
	return err
}

// Client is a connection to one node. It is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	api  meridianpb.MeridianClient
}

// Dial connects to a node at host:port. The connection is made lazily.
func Dial(endpoint string) (*Client, error) { return DialWith(endpoint, nil) }

// DialWith connects through dial (nil: the default dialer) — the lab dials from a client
// host's network namespace.
func DialWith(endpoint string, dial func(ctx context.Context, address string) (net.Conn, error)) (*Client, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20))}
	if dial != nil {
		opts = append(opts, grpc.WithContextDialer(dial))
	}
	conn, err := grpc.NewClient(endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", endpoint, err)
	}
	return &Client{conn: conn, api: meridianpb.NewMeridianClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// API returns the raw gRPC stub.
func (c *Client) API() meridianpb.MeridianClient { return c.api }

// Option modifies one request.
type Option func(*opts)

type opts struct {
	consistency string
	writeMode   string
	timeout     time.Duration
}

// Consistency sets the consistency level (quorum: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM).
// GlobLease keyspaces take none on Get, Put and Delete.
func Consistency(level string) Option { return func(o *opts) { o.consistency = level } }

// WriteMode sets the write mode of a Put or Delete on a GlobLease keyspace: "active"
// (replicas holding read leases are updated before the reply) or "passive" (the reply comes
// after the master's write; leases are outwaited or updated afterwards). "" is the
// keyspace's default. Other requests ignore it.
func WriteMode(mode string) Option { return func(o *opts) { o.writeMode = mode } }

// Timeout sets the server-side deadline of the request.
func Timeout(d time.Duration) Option { return func(o *opts) { o.timeout = d } }

func collect(os []Option) opts {
	var o opts
	for _, f := range os {
		f(&o)
	}
	return o
}

func (o opts) timeoutMs() uint32 {
	if o.timeout <= 0 {
		return 0
	}
	return uint32(max(1, o.timeout.Milliseconds()))
}

// GetResult is the outcome of a Get.
type GetResult struct {
	Found       bool
	Value       []byte
	Version     Version
	Coordinator string
	// ReadPath says how the read was served: "quorum", "local", ... (see the API's
	// GetResponse.read_path); for GlobLease "master", "lease", "forwarded" or "affiliate".
	ReadPath string
}

// Get reads key.
func (c *Client) Get(ctx context.Context, keyspace string, key []byte, options ...Option) (GetResult, error) {
	o := collect(options)
	r, err := c.api.Get(ctx, &meridianpb.GetRequest{Keyspace: keyspace, Key: key, Consistency: o.consistency, TimeoutMs: o.timeoutMs()})
	if err != nil {
		return GetResult{}, wrap(err)
	}
	return GetResult{Found: r.Found, Value: r.Value, Version: fromPB(r.Version), Coordinator: r.Coordinator, ReadPath: r.ReadPath}, nil
}

// Put writes key and returns the version it was written at.
func (c *Client) Put(ctx context.Context, keyspace string, key, value []byte, options ...Option) (Version, error) {
	o := collect(options)
	r, err := c.api.Put(ctx, &meridianpb.PutRequest{Keyspace: keyspace, Key: key, Value: value, Consistency: o.consistency, WriteMode: o.writeMode, TimeoutMs: o.timeoutMs()})
	if err != nil {
		return Version{}, wrap(err)
	}
	return fromPB(r.Version), nil
}

// Delete deletes key and returns the version of the tombstone.
func (c *Client) Delete(ctx context.Context, keyspace string, key []byte, options ...Option) (Version, error) {
	o := collect(options)
	r, err := c.api.Delete(ctx, &meridianpb.DeleteRequest{Keyspace: keyspace, Key: key, Consistency: o.consistency, WriteMode: o.writeMode, TimeoutMs: o.timeoutMs()})
	if err != nil {
		return Version{}, wrap(err)
	}
	return fromPB(r.Version), nil
}

// KeyValue is one item of a scan.
type KeyValue struct {
	Key, Value []byte
	Version    Version
}

// Scan reads up to limit keys of [start, end) (end nil: to the end of the keyspace). more
// reports that the range may hold further keys; continue from the last key + "\x00".
func (c *Client) Scan(ctx context.Context, keyspace string, start, end []byte, limit int, options ...Option) (items []KeyValue, more bool, err error) {
	o := collect(options)
	if limit < 0 {
		return nil, false, fmt.Errorf("client: scan limit %d is negative", limit)
	}
	r, err := c.api.Scan(ctx, &meridianpb.ScanRequest{Keyspace: keyspace, Start: start, End: end, Limit: uint32(limit), Consistency: o.consistency, TimeoutMs: o.timeoutMs()})
	if err != nil {
		return nil, false, wrap(err)
	}
	for _, it := range r.Items {
		items = append(items, KeyValue{Key: it.Key, Value: it.Value, Version: fromPB(it.Version)})
	}
	return items, r.More, nil
}

// MoveMaster moves the master of key in a GlobLease keyspace to a replica in region. It
// returns the key's master (node name) and its region after the move, and the version of the
// mastership table that records it.
func (c *Client) MoveMaster(ctx context.Context, keyspace string, key []byte, region string, options ...Option) (master, masterRegion string, tableVersion uint64, err error) {
	o := collect(options)
	r, err := c.api.MoveMaster(ctx, &meridianpb.MoveMasterRequest{Keyspace: keyspace, Key: key, Region: region, TimeoutMs: o.timeoutMs()})
	if err != nil {
		return "", "", 0, wrap(err)
	}
	return r.Master, r.Region, r.TableVersion, nil
}

// KeyspaceSpec describes a keyspace.
type KeyspaceSpec = meridianpb.KeyspaceSpec

// CreateKeyspace creates a keyspace.
func (c *Client) CreateKeyspace(ctx context.Context, spec *KeyspaceSpec) (*KeyspaceSpec, error) {
	r, err := c.api.CreateKeyspace(ctx, &meridianpb.CreateKeyspaceRequest{Spec: spec})
	if err != nil {
		return nil, wrap(err)
	}
	return r.Spec, nil
}

// DescribeKeyspace returns a keyspace's spec and placement.
func (c *Client) DescribeKeyspace(ctx context.Context, name string) (*meridianpb.DescribeKeyspaceResponse, error) {
	r, err := c.api.DescribeKeyspace(ctx, &meridianpb.DescribeKeyspaceRequest{Name: name})
	return r, wrap(err)
}

// ListKeyspaces lists the keyspaces.
func (c *Client) ListKeyspaces(ctx context.Context) ([]*KeyspaceSpec, error) {
	r, err := c.api.ListKeyspaces(ctx, &meridianpb.ListKeyspacesRequest{})
	if err != nil {
		return nil, wrap(err)
	}
	return r.Keyspaces, nil
}

// Session keeps one client's guarantees across coordinators: it remembers the newest version
// it has read or written and sends it with every request, so the coordinator stamps the
// session's next write with a newer version even when coordinators' clocks disagree.
// Without it, a write through a coordinator whose clock is behind could get an older version
// than the same client's previous write, and last-writer-wins would undo the newer write
// (see docs/simulation.md). A Session is safe for concurrent use, but its guarantees are
// those of one sequential client.
type Session struct {
	c    *Client
	mu   sync.Mutex
	seen Version
}

// NewSession starts a session on c.
func (c *Client) NewSession() *Session { return &Session{c: c} }

// Seen returns the newest version the session has observed.
func (s *Session) Seen() Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

func (s *Session) observe(v Version) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if versionLess(s.seen, v) {
		s.seen = v
	}
}

func versionLess(a, b Version) bool {
	if a.WallNanos != b.WallNanos {
		return a.WallNanos < b.WallNanos
	}
	if a.Logical != b.Logical {
		return a.Logical < b.Logical
	}
	return a.NodeID < b.NodeID
}

func (s *Session) seenPB() *meridianpb.Version {
	v := s.Seen()
	if v == (Version{}) {
		return nil
	}
	return &meridianpb.Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeId: v.NodeID}
}

// Get reads key within the session.
func (s *Session) Get(ctx context.Context, keyspace string, key []byte, options ...Option) (GetResult, error) {
	o := collect(options)
	r, err := s.c.api.Get(ctx, &meridianpb.GetRequest{Keyspace: keyspace, Key: key, Consistency: o.consistency, TimeoutMs: o.timeoutMs(), SessionVersion: s.seenPB()})
	if err != nil {
		return GetResult{}, wrap(err)
	}
	res := GetResult{Found: r.Found, Value: r.Value, Version: fromPB(r.Version), Coordinator: r.Coordinator, ReadPath: r.ReadPath}
	s.observe(res.Version)
	return res, nil
}

// Put writes key within the session.
func (s *Session) Put(ctx context.Context, keyspace string, key, value []byte, options ...Option) (Version, error) {
	o := collect(options)
	r, err := s.c.api.Put(ctx, &meridianpb.PutRequest{Keyspace: keyspace, Key: key, Value: value, Consistency: o.consistency, WriteMode: o.writeMode, TimeoutMs: o.timeoutMs(), SessionVersion: s.seenPB()})
	if err != nil {
		return Version{}, wrap(err)
	}
	v := fromPB(r.Version)
	s.observe(v)
	return v, nil
}

// Delete deletes key within the session.
func (s *Session) Delete(ctx context.Context, keyspace string, key []byte, options ...Option) (Version, error) {
	o := collect(options)
	r, err := s.c.api.Delete(ctx, &meridianpb.DeleteRequest{Keyspace: keyspace, Key: key, Consistency: o.consistency, WriteMode: o.writeMode, TimeoutMs: o.timeoutMs(), SessionVersion: s.seenPB()})
	if err != nil {
		return Version{}, wrap(err)
	}
	v := fromPB(r.Version)
	s.observe(v)
	return v, nil
}
