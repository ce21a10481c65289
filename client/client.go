// Package client is the Go client of Meridian's gRPC API.
//
//	c, err := client.Dial("127.0.0.1:7101")
//	defer c.Close()
//	v, err := c.Put(ctx, "demo", []byte("k"), []byte("v"), client.Consistency("QUORUM"))
//	r, err := c.Get(ctx, "demo", []byte("k"))
//
// Keyspaces with txn_mode sdur take multi-key transactions instead of Put and Delete: Begin
// (txn.go), and ReadOnly for consistent reads of several keys.
//
// Connect to a node in your own region: the node you call coordinates your request.
// Errors carry the server's one-line explanation; Code tells retryable kinds apart.
//
// Deadlines. Every call has one: a ctx without a deadline gets Options.CallTimeout (default
// 10 s), so a paused or partitioned node cannot hold a caller forever; the error then says
// which endpoint did not answer within how long. The Timeout option sets the server-side
// deadline of a request (the server's own timeout error says which replicas did not answer);
// when ctx has no deadline of its own, the call then waits that long plus a grace of 250 ms,
// so that the server's explanation arrives before the client gives up.
//
// Keepalive. The connection pings a server that has sent nothing for 10 s and drops the
// connection when a ping is not answered within 5 s, so calls to a node that stopped
// answering fail with Unavailable instead of each waiting out its deadline. Servers accept
// pings every 5 s or more rarely (transport.ServerKeepaliveOptions), and grpc-go never pings
// more often than every 10 s, so the two agree.
//
// Sizes. A value larger than the node accepts is refused with the documented limit
// (limits.max_value_bytes): before it is sent when it is over 1 MiB (the client asks the
// node for its limits once, ServerInfo), or after the transport refused it.
package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
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
	// Label, when set, names the error in place of the code's name (a stream's
	// FAILED_PRECONDITION is "not the primary", not a stale placement).
	Label string
}

func (e *Error) Error() string {
	if e.Label != "" {
		return fmt.Sprintf("%s: %s", e.Label, e.Msg)
	}
	return fmt.Sprintf("%s: %s", codeName(e.Code), e.Msg)
}

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
		return "resource exhausted"
	case codes.Aborted:
		return "conflict"
	case codes.FailedPrecondition:
		return "stale placement"
	case codes.OutOfRange:
		return "out of range"
	case codes.DataLoss:
		return "data loss"
	case codes.PermissionDenied:
		return "permission denied"
	}
	return c.String()
}

// CodeOf returns the gRPC code of err (codes.Aborted for a transaction's *AbortError,
// codes.Unknown when err is not from a node).
func CodeOf(err error) codes.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var a *AbortError
	if errors.As(err, &a) {
		return codes.Aborted
	}
	return codes.Unknown
}

// Client is a connection to one node. It is safe for concurrent use.
type Client struct {
	endpoint string
	opts     Options
	conn     *grpc.ClientConn
	api      meridianpb.MeridianClient

	infoMu sync.Mutex
	info   *meridianpb.ServerInfoResponse // the node's limits, once fetched

	// placement is the newest placement version seen per keyspace: sent with every request,
	// so this client is never served under an older placement than one it has seen (after
	// an alter-keyspace it made, say). A node with a newer placement answers "stale
	// placement"; the client refreshes (DescribeKeyspace) and retries once.
	pvMu      sync.Mutex
	placement map[string]uint64

	// peers are connections to streams' primaries (streams.go), closed with the client.
	peersMu sync.Mutex
	peers   map[string]*Client
}

// Options configure a connection. The zero value is usable: every zero field gets its
// default.
type Options struct {
	// Dial, when set, makes the connection (the lab dials from a client host's network
	// namespace). Default: a TCP dial.
	Dial func(ctx context.Context, address string) (net.Conn, error)
	// CallTimeout bounds a call whose ctx has no deadline. Default 10 s.
	CallTimeout time.Duration
	// KeepaliveTime is how long the connection may be silent before it pings the server,
	// KeepaliveTimeout how long it waits for the answer. Defaults 10 s and 5 s (grpc-go
	// raises a Time below 10 s to 10 s).
	KeepaliveTime, KeepaliveTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultCallTimeout      = 10 * time.Second
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
	// TimeoutGrace is how much longer than a request's server-side timeout (the Timeout
	// option) a call without a deadline of its own waits, so that the server's explanatory
	// timeout error arrives first.
	TimeoutGrace = 250 * time.Millisecond
	// maxMessageBytes bounds the messages the client sends and accepts (a scan reply holds
	// up to limits.max_scan_limit rows).
	maxMessageBytes = 256 << 20
	// checkLimitsAbove: values larger than this are checked against the node's limits
	// before they are sent.
	checkLimitsAbove = 1 << 20
)

func (o *Options) ensureDefaults() {
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.KeepaliveTime <= 0 {
		o.KeepaliveTime = DefaultKeepaliveTime
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
}

// Dial connects to a node at host:port with the default Options. The connection is made
// lazily.
func Dial(endpoint string) (*Client, error) { return DialOptions(endpoint, Options{}) }

// DialWith connects through dial (nil: the default dialer) — the lab dials from a client
// host's network namespace.
func DialWith(endpoint string, dial func(ctx context.Context, address string) (net.Conn, error)) (*Client, error) {
	return DialOptions(endpoint, Options{Dial: dial})
}

// Flow-control windows of a client connection (the servers use the same).
const (
	streamWindowBytes = 1 << 20
	connWindowBytes   = 2 << 20
)

// DialOptions connects to a node at host:port with o.
func DialOptions(endpoint string, o Options) (*Client, error) {
	o.ensureDefaults()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: o.KeepaliveTime, Timeout: o.KeepaliveTimeout}),
		// Fixed flow-control windows: gRPC's bandwidth estimation would otherwise PING the
		// server about once per round trip while responses flow, each PING and its ack a
		// packet of their own. Larger responses still flow, with window updates.
		grpc.WithStaticStreamWindowSize(streamWindowBytes),
		grpc.WithStaticConnWindowSize(connWindowBytes),
	}
	if o.Dial != nil {
		opts = append(opts, grpc.WithContextDialer(o.Dial))
	}
	conn, err := grpc.NewClient(endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", endpoint, err)
	}
	return &Client{endpoint: endpoint, opts: o, conn: conn, api: meridianpb.NewMeridianClient(conn), placement: map[string]uint64{}}, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	c.peersMu.Lock()
	for _, p := range c.peers {
		p.Close()
	}
	c.peers = nil
	c.peersMu.Unlock()
	return c.conn.Close()
}

// API returns the raw gRPC stub.
func (c *Client) API() meridianpb.MeridianClient { return c.api }

// Endpoint returns the address of the node the client talks to.
func (c *Client) Endpoint() string { return c.endpoint }

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

// Timeout sets the server-side deadline of the request (at most the cluster's
// limits.max_request_timeout, and below 2^32 ms).
func Timeout(d time.Duration) Option { return func(o *opts) { o.timeout = d } }

// call is one call's bounds: its context and the request fields derived from the options.
type call struct {
	ctx       context.Context
	cancel    context.CancelFunc
	bound     time.Duration // the deadline the client set (0: the caller's own)
	timeoutMs uint32
}

// begin validates the options and bounds ctx: its own deadline if it has one, else the
// request's server-side timeout plus TimeoutGrace, else CallTimeout.
func (c *Client) begin(ctx context.Context, options []Option) (opts, *call, error) {
	var o opts
	for _, f := range options {
		f(&o)
	}
	cl := &call{ctx: ctx, cancel: func() {}}
	if o.timeout < 0 {
		return o, nil, &Error{Code: codes.InvalidArgument, Msg: fmt.Sprintf("timeout %v is negative", o.timeout)}
	}
	if o.timeout > 0 {
		ms := max(1, o.timeout.Milliseconds())
		if ms > math.MaxUint32 {
			return o, nil, &Error{Code: codes.InvalidArgument, Msg: fmt.Sprintf("timeout %v is out of range (at most %d ms, and the cluster's limits.max_request_timeout)", o.timeout, uint32(math.MaxUint32))}
		}
		cl.timeoutMs = uint32(ms)
	}
	if _, ok := ctx.Deadline(); !ok {
		cl.bound = c.opts.CallTimeout
		if o.timeout > 0 {
			cl.bound = o.timeout + TimeoutGrace
		}
		cl.ctx, cl.cancel = context.WithTimeout(ctx, cl.bound)
	}
	return o, cl, nil
}

// expired reports whether the call's deadline has passed, or is so close that a deadline
// error came from it rather than from the node's own request timeout (which fires
// TimeoutGrace earlier).
func (cl *call) expired() bool {
	if cl.ctx.Err() != nil {
		return true
	}
	dl, ok := cl.ctx.Deadline()
	return ok && time.Until(dl) < TimeoutGrace/5
}

// sizeRE matches gRPC's refusal of a message over a receive or send limit.
var sizeRE = regexp.MustCompile(`(?:received|send) message larger than max \((\d+) vs\. (\d+)\)`)

// wrap turns a gRPC error of this call into an *Error that says what happened in Meridian's
// terms. valueLen is the size of the value sent (0: none).
func (c *Client) wrap(cl *call, err error, valueLen int) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch {
	case s.Code() == codes.DeadlineExceeded && cl.expired() && cl.bound > 0:
		// The call's deadline passed without an answer from the node (the server enforces
		// the propagated deadline too, and may reset the stream a moment before the client's
		// own timer fires: "stream terminated by RST_STREAM").
		return &Error{Code: codes.DeadlineExceeded, Msg: fmt.Sprintf("no answer from %s within %v (is the node paused, overloaded or cut off?)", c.endpoint, cl.bound)}
	case s.Code() == codes.DeadlineExceeded && cl.expired():
		return &Error{Code: codes.DeadlineExceeded, Msg: fmt.Sprintf("no answer from %s before the caller's deadline (is the node paused, overloaded or cut off?)", c.endpoint)}
	case s.Code() == codes.ResourceExhausted && sizeRE.MatchString(s.Message()):
		return c.sizeError(s.Message(), valueLen)
	}
	return &Error{Code: s.Code(), Msg: s.Message()}
}

// sizeError explains a message the transport refused for its size in the terms of the
// documented limits, asking the node for them.
func (c *Client) sizeError(msg string, valueLen int) error {
	m := sizeRE.FindStringSubmatch(msg)
	size, _ := strconv.ParseInt(m[1], 10, 64)
	if valueLen > 0 {
		if info, err := c.ServerInfo(context.Background()); err == nil {
			return c.valueTooLarge(valueLen, info)
		}
		return &Error{Code: codes.InvalidArgument, Msg: fmt.Sprintf("value is %d bytes, more than %s accepts (limits.max_value_bytes; the transport refused the request of %d bytes)", valueLen, c.endpoint, size)}
	}
	return &Error{Code: codes.ResourceExhausted, Msg: fmt.Sprintf("a message of %d bytes was refused by the transport (%s)", size, msg)}
}

func (c *Client) valueTooLarge(valueLen int, info *meridianpb.ServerInfoResponse) error {
	return &Error{Code: codes.InvalidArgument, Msg: fmt.Sprintf("value is %d bytes, limit is %d (limits.max_value_bytes) on node %s", valueLen, info.MaxValueBytes, info.Node)}
}

// ServerInfo returns the node's name and limits, fetched once per Client.
func (c *Client) ServerInfo(ctx context.Context) (*meridianpb.ServerInfoResponse, error) {
	c.infoMu.Lock()
	defer c.infoMu.Unlock()
	if c.info != nil {
		return c.info, nil
	}
	_, cl, _ := c.begin(ctx, nil)
	defer cl.cancel()
	info, err := c.api.ServerInfo(cl.ctx, &meridianpb.ServerInfoRequest{})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	c.info = info
	return info, nil
}

// CheckValueSize refuses a value the node's limits cannot take, asking the node for its
// limits once. Put and Delete call it for values over 1 MiB, so that a value that cannot be
// stored is not sent over a WAN in vain; the server validates every value anyway.
func (c *Client) CheckValueSize(ctx context.Context, size int) error {
	info, err := c.ServerInfo(ctx)
	if err != nil {
		return err
	}
	if size > int(info.MaxValueBytes) {
		return c.valueTooLarge(size, info)
	}
	return nil
}

// PlacementVersion returns the newest placement version of keyspace this client has seen
// (0: none).
func (c *Client) PlacementVersion(keyspace string) uint64 {
	c.pvMu.Lock()
	defer c.pvMu.Unlock()
	return c.placement[keyspace]
}

// sawPlacement records a placement version of keyspace from a response.
func (c *Client) sawPlacement(keyspace string, v uint64) {
	c.pvMu.Lock()
	defer c.pvMu.Unlock()
	if v > c.placement[keyspace] {
		c.placement[keyspace] = v
	}
}

// refreshPlacement reads keyspace's current placement version from the cluster metadata
// (after a "stale placement" answer) and reports whether it could.
func (c *Client) refreshPlacement(ctx context.Context, keyspace string) bool {
	r, err := c.DescribeKeyspace(ctx, keyspace)
	if err != nil {
		return false
	}
	c.pvMu.Lock()
	defer c.pvMu.Unlock()
	c.placement[keyspace] = r.PlacementVersion
	return true
}

// withPlacement runs one request with this client's placement version of keyspace; if the
// node answers "stale placement", it refreshes the version and runs it once more.
func withPlacement[T any](c *Client, ctx context.Context, keyspace string, do func(pv uint64) (T, uint64, error)) (T, error) {
	out, pv, err := do(c.PlacementVersion(keyspace))
	if CodeOf(err) == codes.FailedPrecondition && c.refreshPlacement(ctx, keyspace) {
		out, pv, err = do(c.PlacementVersion(keyspace))
	}
	if err == nil {
		c.sawPlacement(keyspace, pv)
	}
	return out, err
}

// GetResult is the outcome of a Get.
type GetResult struct {
	Found       bool
	Value       []byte
	Version     Version
	Coordinator string
	// ReadPath says how the read was served: "quorum", "local", ... (see the API's
	// GetResponse.read_path); for GlobLease "master", "lease", "forwarded" or "affiliate";
	// for raft "lease", "read-index" or "stale".
	ReadPath string
	// StalenessBound, for a raft STALE read, bounds how old the value may be: it holds every
	// write acknowledged more than this long before the read (-1: unknown).
	StalenessBound time.Duration
	// PlacementVersion is the keyspace's placement version the read was served under.
	PlacementVersion uint64
}

// Get reads key.
func (c *Client) Get(ctx context.Context, keyspace string, key []byte, options ...Option) (GetResult, error) {
	return c.get(ctx, keyspace, key, nil, options)
}

func (c *Client) get(ctx context.Context, keyspace string, key []byte, session *meridianpb.Version, options []Option) (GetResult, error) {
	o, cl, err := c.begin(ctx, options)
	if err != nil {
		return GetResult{}, err
	}
	defer cl.cancel()
	return withPlacement(c, cl.ctx, keyspace, func(pv uint64) (GetResult, uint64, error) {
		r, err := c.api.Get(cl.ctx, &meridianpb.GetRequest{Keyspace: keyspace, Key: key, Consistency: o.consistency, TimeoutMs: cl.timeoutMs,
			SessionVersion: session, PlacementVersion: pv})
		if err != nil {
			return GetResult{}, 0, c.wrap(cl, err, 0)
		}
		stale := time.Duration(r.StalenessBoundMs * float64(time.Millisecond))
		if r.StalenessBoundMs < 0 {
			stale = -1
		}
		return GetResult{Found: r.Found, Value: r.Value, Version: fromPB(r.Version), Coordinator: r.Coordinator, ReadPath: r.ReadPath,
			StalenessBound: stale, PlacementVersion: r.PlacementVersion}, r.PlacementVersion, nil
	})
}

// Put writes key and returns the version it was written at.
func (c *Client) Put(ctx context.Context, keyspace string, key, value []byte, options ...Option) (Version, error) {
	return c.put(ctx, keyspace, key, value, nil, options)
}

func (c *Client) put(ctx context.Context, keyspace string, key, value []byte, session *meridianpb.Version, options []Option) (Version, error) {
	o, cl, err := c.begin(ctx, options)
	if err != nil {
		return Version{}, err
	}
	defer cl.cancel()
	if len(value) > checkLimitsAbove {
		if err := c.CheckValueSize(cl.ctx, len(value)); err != nil && CodeOf(err) == codes.InvalidArgument {
			return Version{}, err
		}
	}
	return withPlacement(c, cl.ctx, keyspace, func(pv uint64) (Version, uint64, error) {
		r, err := c.api.Put(cl.ctx, &meridianpb.PutRequest{Keyspace: keyspace, Key: key, Value: value, Consistency: o.consistency, WriteMode: o.writeMode,
			TimeoutMs: cl.timeoutMs, SessionVersion: session, PlacementVersion: pv})
		if err != nil {
			return Version{}, 0, c.wrap(cl, err, len(value))
		}
		return fromPB(r.Version), r.PlacementVersion, nil
	})
}

// Delete deletes key and returns the version of the tombstone.
func (c *Client) Delete(ctx context.Context, keyspace string, key []byte, options ...Option) (Version, error) {
	return c.del(ctx, keyspace, key, nil, options)
}

func (c *Client) del(ctx context.Context, keyspace string, key []byte, session *meridianpb.Version, options []Option) (Version, error) {
	o, cl, err := c.begin(ctx, options)
	if err != nil {
		return Version{}, err
	}
	defer cl.cancel()
	return withPlacement(c, cl.ctx, keyspace, func(pv uint64) (Version, uint64, error) {
		r, err := c.api.Delete(cl.ctx, &meridianpb.DeleteRequest{Keyspace: keyspace, Key: key, Consistency: o.consistency, WriteMode: o.writeMode,
			TimeoutMs: cl.timeoutMs, SessionVersion: session, PlacementVersion: pv})
		if err != nil {
			return Version{}, 0, c.wrap(cl, err, 0)
		}
		return fromPB(r.Version), r.PlacementVersion, nil
	})
}

// KeyValue is one item of a scan.
type KeyValue struct {
	Key, Value []byte
	Version    Version
}

// Scan reads up to limit keys of [start, end) (end nil: to the end of the keyspace; limit 0:
// the server's default). more reports that the range may hold further keys; continue from
// the last key + "\x00".
func (c *Client) Scan(ctx context.Context, keyspace string, start, end []byte, limit int, options ...Option) (items []KeyValue, more bool, err error) {
	if limit < 0 || uint64(limit) > math.MaxUint32 {
		return nil, false, &Error{Code: codes.InvalidArgument, Msg: fmt.Sprintf("scan limit %d is out of range: 0 (the server's default) to the cluster's limits.max_scan_limit", limit)}
	}
	o, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, false, err
	}
	defer cl.cancel()
	type page struct {
		items []KeyValue
		more  bool
	}
	p, err := withPlacement(c, cl.ctx, keyspace, func(pv uint64) (page, uint64, error) {
		r, err := c.api.Scan(cl.ctx, &meridianpb.ScanRequest{Keyspace: keyspace, Start: start, End: end, Limit: uint32(limit), Consistency: o.consistency,
			TimeoutMs: cl.timeoutMs, PlacementVersion: pv})
		if err != nil {
			return page{}, 0, c.wrap(cl, err, 0)
		}
		var out page
		for _, it := range r.Items {
			out.items = append(out.items, KeyValue{Key: it.Key, Value: it.Value, Version: fromPB(it.Version)})
		}
		out.more = r.More
		return out, r.PlacementVersion, nil
	})
	return p.items, p.more, err
}

// MoveMaster moves the master of key in a GlobLease keyspace to a replica in region. It
// returns the key's master (node name) and its region after the move, and the version of the
// mastership table that records it.
func (c *Client) MoveMaster(ctx context.Context, keyspace string, key []byte, region string, options ...Option) (master, masterRegion string, tableVersion uint64, err error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return "", "", 0, err
	}
	defer cl.cancel()
	r, err := c.api.MoveMaster(cl.ctx, &meridianpb.MoveMasterRequest{Keyspace: keyspace, Key: key, Region: region, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return "", "", 0, c.wrap(cl, err, 0)
	}
	return r.Master, r.Region, r.TableVersion, nil
}

// KeyspaceSpec describes a keyspace.
type KeyspaceSpec = meridianpb.KeyspaceSpec

// CreateKeyspace creates a keyspace. It returns once every node that is up has installed
// it; notInstalled names the nodes that had not then ("NAME: reason"), which learn it when
// they are back.
func (c *Client) CreateKeyspace(ctx context.Context, spec *KeyspaceSpec, options ...Option) (created *KeyspaceSpec, notInstalled []string, err error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, nil, err
	}
	defer cl.cancel()
	r, err := c.api.CreateKeyspace(cl.ctx, &meridianpb.CreateKeyspaceRequest{Spec: spec, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return nil, nil, c.wrap(cl, err, 0)
	}
	c.sawPlacement(spec.GetName(), r.Version)
	return r.Spec, r.NotInstalled, nil
}

// KeyspaceChange is what AlterKeyspace changes.
type KeyspaceChange struct {
	// SetOptions sets protocol options; an empty value restores an option's default.
	SetOptions map[string]string
	// Regions and ReplicasPerRegion change the replication (protocols that move replicas
	// themselves: raft). Empty or 0: unchanged.
	Regions           []string
	ReplicasPerRegion uint32
	// ExpectVersion: change only if the keyspace is still at this placement version
	// (else the error is codes.Aborted, "changed concurrently"); 0: whatever its version.
	ExpectVersion uint64
}

// AlterKeyspace changes a keyspace through the cluster metadata. It returns once every node
// that is up has installed the change (notInstalled names the others).
func (c *Client) AlterKeyspace(ctx context.Context, name string, ch KeyspaceChange, options ...Option) (*meridianpb.AlterKeyspaceResponse, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := c.api.AlterKeyspace(cl.ctx, &meridianpb.AlterKeyspaceRequest{Name: name, SetOptions: ch.SetOptions, Regions: ch.Regions,
		ReplicasPerRegion: ch.ReplicasPerRegion, ExpectVersion: ch.ExpectVersion, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	c.sawPlacement(name, r.Version)
	return r, nil
}

// SplitPartition splits the partition of keyspace that holds key, so that key starts a new
// partition (expectVersion: only if the keyspace is still at that placement version; 0:
// any). Both halves keep their replicas, so no data moves; raft and globlease keyspaces
// refuse. It returns once every node that is up has the new map.
func (c *Client) SplitPartition(ctx context.Context, keyspace string, key []byte, expectVersion uint64, options ...Option) (*meridianpb.RepartitionResponse, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := c.api.SplitPartition(cl.ctx, &meridianpb.SplitPartitionRequest{Keyspace: keyspace, Key: key, ExpectVersion: expectVersion, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	c.sawPlacement(keyspace, r.Version)
	return r, nil
}

// MergePartitions merges partition with its right-hand neighbour in keyspace; both must
// have the same replicas.
func (c *Client) MergePartitions(ctx context.Context, keyspace string, partition uint32, expectVersion uint64, options ...Option) (*meridianpb.RepartitionResponse, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := c.api.MergePartitions(cl.ctx, &meridianpb.MergePartitionsRequest{Keyspace: keyspace, Partition: partition, ExpectVersion: expectVersion, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	c.sawPlacement(keyspace, r.Version)
	return r, nil
}

// DropKeyspace removes a keyspace and its data (expectVersion: only if it is still at that
// placement version; 0: whatever its version).
func (c *Client) DropKeyspace(ctx context.Context, name string, expectVersion uint64, options ...Option) (*meridianpb.DropKeyspaceResponse, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := c.api.DropKeyspace(cl.ctx, &meridianpb.DropKeyspaceRequest{Name: name, ExpectVersion: expectVersion, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	c.pvMu.Lock()
	delete(c.placement, name)
	c.pvMu.Unlock()
	return r, nil
}

// DescribeKeyspace returns a keyspace's spec and placement, read from the cluster metadata
// (Consistency("STALE"): the node's installed copy).
func (c *Client) DescribeKeyspace(ctx context.Context, name string, options ...Option) (*meridianpb.DescribeKeyspaceResponse, error) {
	o, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := c.api.DescribeKeyspace(cl.ctx, &meridianpb.DescribeKeyspaceRequest{Name: name, Consistency: o.consistency})
	return r, c.wrap(cl, err, 0)
}

// ListKeyspaces lists the keyspaces.
func (c *Client) ListKeyspaces(ctx context.Context) ([]*KeyspaceSpec, error) {
	_, cl, _ := c.begin(ctx, nil)
	defer cl.cancel()
	r, err := c.api.ListKeyspaces(cl.ctx, &meridianpb.ListKeyspacesRequest{})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
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
	res, err := s.c.get(ctx, keyspace, key, s.seenPB(), options)
	if err != nil {
		return GetResult{}, err
	}
	s.observe(res.Version)
	return res, nil
}

// Put writes key within the session.
func (s *Session) Put(ctx context.Context, keyspace string, key, value []byte, options ...Option) (Version, error) {
	v, err := s.c.put(ctx, keyspace, key, value, s.seenPB(), options)
	if err != nil {
		return Version{}, err
	}
	s.observe(v)
	return v, nil
}

// Delete deletes key within the session.
func (s *Session) Delete(ctx context.Context, keyspace string, key []byte, options ...Option) (Version, error) {
	v, err := s.c.del(ctx, keyspace, key, s.seenPB(), options)
	if err != nil {
		return Version{}, err
	}
	s.observe(v)
	return v, nil
}

// JoinCluster registers a new node with the cluster (meridian server --join does this
// before the node first starts): it returns the node's ID.
func (c *Client) JoinCluster(ctx context.Context, r *meridianpb.JoinClusterRequest, options ...Option) (*meridianpb.JoinClusterResponse, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r.TimeoutMs = cl.timeoutMs
	out, err := c.api.JoinCluster(cl.ctx, r)
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	return out, nil
}

// SetNodeState decommissions a member ("decommissioning": its replicas move away, then it
// leaves) or cancels that ("active").
func (c *Client) SetNodeState(ctx context.Context, node, state string, options ...Option) (*meridianpb.SetNodeStateResponse, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	out, err := c.api.SetNodeState(cl.ctx, &meridianpb.SetNodeStateRequest{Node: node, State: state, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	return out, nil
}

// MoveReplica starts moving a partition's replica from one node to another of its region.
func (c *Client) MoveReplica(ctx context.Context, keyspace string, partition uint32, from, to, source string, options ...Option) (*meridianpb.MoveReplicaResponse, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	out, err := c.api.MoveReplica(cl.ctx, &meridianpb.MoveReplicaRequest{Keyspace: keyspace, Partition: partition, From: from, To: to, Source: source, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	return out, nil
}

// ClusterStatus describes the members, what they hold and serve, and the moves in flight.
func (c *Client) ClusterStatus(ctx context.Context, options ...Option) (*meridianpb.ClusterStatusResponse, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	out, err := c.api.ClusterStatus(cl.ctx, &meridianpb.ClusterStatusRequest{})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	return out, nil
}
