package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"meridian/internal/wire/peerpb"
)

// PeerNode is one node of the cluster as the transport knows it.
type PeerNode struct {
	ID   uint32
	Name string
	// Addr is the node's peer listener (host:port): where it is dialled, and, when the host
	// is an IP address, the only source address its streams are accepted from.
	Addr string
}

// GRPCOptions configures the production transport.
type GRPCOptions struct {
	// Cluster is the cluster's name: sent when a stream opens and checked by the receiver.
	Cluster string
	// Self is this node's ID; Nodes lists every node of the cluster, this one included.
	Self  uint32
	Nodes []PeerNode
	// QueueLen bounds the messages waiting for one peer; beyond it Send drops. Default 16384.
	QueueLen int
	// MaxBackoff bounds the wait between reconnection attempts to a peer. Default 1s.
	MaxBackoff time.Duration
	// OnError, when set, is told of stream failures (at most once a minute per peer).
	OnError func(peer uint32, err error)
	// OnRefused, when set, is told of every incoming stream refused at setup and of every
	// message whose sender is not the stream's authenticated node; reason is a short label.
	OnRefused func(reason, remote string, err error)
	// DialTimeout bounds connecting to a peer. Default 5s.
	DialTimeout time.Duration
}

// Metadata keys of a peer stream's setup: who is sending, in which cluster, to whom.
const (
	mdCluster = "meridian-cluster"
	mdNodeID  = "meridian-node-id"
	mdNode    = "meridian-node"
	mdTo      = "meridian-to"
)

// Reasons an incoming peer stream or message is refused (metric label values).
const (
	RefuseNoIdentity    = "no_identity"
	RefuseWrongCluster  = "wrong_cluster"
	RefuseNotMember     = "not_member"
	RefuseWrongNode     = "wrong_node"
	RefuseSourceAddress = "source_address"
	RefuseFromMismatch  = "from_mismatch"
)

// GRPC sends each peer's messages over one long-lived client stream (Peer.Stream), opened
// lazily and reopened with backoff after a failure. Messages queued while a peer is
// unreachable are dropped, which the protocols tolerate.
type GRPC struct {
	opts    GRPCOptions
	handler Handler
	self    PeerNode
	// view is the membership and the peers' send queues, replaced whole when a node joins
	// or leaves (SetMembers), read without locks on every message.
	view atomic.Pointer[grpcView]
	// mu serialises SetMembers.
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	counters
	refusedCount atomic.Uint64
	peerpb.UnimplementedPeerServer
}

// grpcView is one version of the transport's membership.
type grpcView struct {
	members map[uint32]member
	peers   map[uint32]*grpcPeer
}

// member is what an incoming stream's claimed identity is checked against.
type member struct {
	PeerNode
	// sources are the addresses the node's streams may come from; empty: not checked (the
	// peer address names a host, not an IP, or the unspecified address).
	sources []netip.Addr
}

type grpcPeer struct {
	id         uint32
	addr       string
	queue      chan *peerpb.Envelope
	lastReport time.Time
	// carry is a message taken from queue that has not been sent yet (the send loop's only).
	carry *peerpb.Envelope
	// legacy: the peer does not know Peer.StreamBatches; send one message per stream message.
	legacy atomic.Bool
}

// Bounds of one EnvelopeBatch. The receiver's limit on a stream message
// (server.peerMaxRecvBytes) is above 8 MiB plus twice the largest record, so a batch of
// MaxBatchBytes, or a single larger message alone, always fits.
const (
	MaxBatchMessages = 1024
	MaxBatchBytes    = 1 << 20
)

// Flow-control windows of peer connections. Fixed windows turn off gRPC's bandwidth
// estimation, which otherwise sends a PING (and gets a PING ack) about once per round trip
// on every connection that receives data, each a packet of its own; a peer stream needs no
// more than this in flight.
const (
	StreamWindowBytes = 1 << 20
	ConnWindowBytes   = 2 << 20
)

func (g *GRPC) reportError(p *grpcPeer, err error) {
	if g.opts.OnError == nil || time.Since(p.lastReport) < time.Minute {
		return
	}
	p.lastReport = time.Now()
	g.opts.OnError(p.id, err)
}

// NewGRPC returns a transport delivering received messages to h. Register it on the node's
// gRPC server so peers can reach it.
func NewGRPC(opts GRPCOptions, h Handler) (*GRPC, error) {
	if opts.QueueLen <= 0 {
		opts.QueueLen = 16384
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = time.Second
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.Cluster == "" {
		return nil, errors.New("transport: no cluster name")
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &GRPC{opts: opts, handler: h, ctx: ctx, cancel: cancel}
	g.view.Store(&grpcView{members: map[uint32]member{}, peers: map[uint32]*grpcPeer{}})
	for _, nd := range opts.Nodes {
		if nd.ID == opts.Self {
			g.self = nd
		}
	}
	if g.self.ID == 0 {
		cancel()
		return nil, fmt.Errorf("transport: this node (%d) is not among the cluster's nodes", opts.Self)
	}
	if err := g.SetMembers(opts.Nodes); err != nil {
		cancel()
		return nil, err
	}
	return g, nil
}

// SetMembers makes nodes the cluster's membership: a node that joined gets a send queue and
// its streams are accepted; a node no longer listed (it left) is refused, and what is sent
// to it is dropped. A node's address does not change.
func (g *GRPC) SetMembers(nodes []PeerNode) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.view.Load()
	next := &grpcView{members: map[uint32]member{}, peers: map[uint32]*grpcPeer{}}
	for _, nd := range nodes {
		if nd.Addr == "" {
			return fmt.Errorf("transport: node %d (%s) has no peer address", nd.ID, nd.Name)
		}
		if _, dup := next.members[nd.ID]; dup {
			return fmt.Errorf("transport: node id %d listed twice", nd.ID)
		}
		next.members[nd.ID] = member{PeerNode: nd, sources: sourceAddrs(nd.Addr)}
	}
	var start []*grpcPeer
	for _, nd := range nodes {
		if nd.ID == g.opts.Self {
			continue
		}
		if p, ok := old.peers[nd.ID]; ok {
			next.peers[nd.ID] = p
			continue
		}
		p := &grpcPeer{id: nd.ID, addr: nd.Addr, queue: make(chan *peerpb.Envelope, g.opts.QueueLen)}
		next.peers[nd.ID] = p
		start = append(start, p)
	}
	g.view.Store(next)
	// A peer that left keeps its (idle) send loop until the transport closes: nothing is
	// queued for it any more.
	for _, p := range start {
		g.wg.Add(1)
		go g.sendLoop(p)
	}
	return nil
}

// sourceAddrs returns the only addresses a node whose peer listener is addr may connect
// from: its IP when addr names one (this node binds its outgoing peer connections to it,
// see dialer); none (no check) for a host name or the unspecified address.
func sourceAddrs(addr string) []netip.Addr {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.IsUnspecified() {
		return nil
	}
	return []netip.Addr{ip.Unmap()}
}

// dialer connects to peers from this node's own peer address when it is an IP, so that the
// receiver can check where the stream comes from.
func (g *GRPC) dialer() func(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: g.opts.DialTimeout}
	if src := sourceAddrs(g.self.Addr); len(src) == 1 {
		d.LocalAddr = &net.TCPAddr{IP: src[0].AsSlice()}
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, c: &g.counters}, nil
	}
}

// countingConn counts the bytes and write calls of a connection to a peer: what replication
// costs on the wire, per message and per client write (meridian_transport_* metrics).
type countingConn struct {
	net.Conn
	c *counters
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.c.wireBytes.Add(uint64(n))
	c.c.wireWrites.Add(1)
	return n, err
}

// authenticate checks an incoming stream's claimed identity against the membership before
// any message is read. Until mTLS (issue 21) this is what keeps a client, or a process of
// another cluster, from writing as a replica: the cluster's name, a node id of this cluster
// with its name, addressed to this node, from that node's own address.
func (g *GRPC) authenticate(ctx context.Context) (uint32, string, error) {
	remote := "unknown"
	var remoteIP netip.Addr
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
		if ap, err := netip.ParseAddrPort(remote); err == nil {
			remoteIP = ap.Addr().Unmap()
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	cluster, idText, name, to := get(mdCluster), get(mdNodeID), get(mdNode), get(mdTo)
	if cluster == "" || idText == "" {
		return 0, RefuseNoIdentity, status.Errorf(codes.Unauthenticated, "peer stream from %s refused: it names no cluster and node (peer traffic is accepted only from nodes of cluster %s)", remote, g.opts.Cluster)
	}
	if cluster != g.opts.Cluster {
		return 0, RefuseWrongCluster, status.Errorf(codes.PermissionDenied, "peer stream from %s refused: it is from cluster %q, this is cluster %q", remote, cluster, g.opts.Cluster)
	}
	id64, err := strconv.ParseUint(idText, 10, 32)
	m, known := g.view.Load().members[uint32(id64)]
	if err != nil || !known || m.ID == g.opts.Self {
		return 0, RefuseNotMember, status.Errorf(codes.PermissionDenied, "peer stream from %s refused: node id %q is not another node of cluster %s", remote, idText, g.opts.Cluster)
	}
	if name != m.Name || to != strconv.FormatUint(uint64(g.opts.Self), 10) {
		return 0, RefuseWrongNode, status.Errorf(codes.PermissionDenied, "peer stream from %s refused: it claims node %d named %q to node %s, the membership says %d is %q and this is node %d (%s); are the nodes' configurations the same?",
			remote, m.ID, name, to, m.ID, m.Name, g.self.ID, g.self.Name)
	}
	if len(m.sources) > 0 {
		ok := false
		for _, a := range m.sources {
			ok = ok || a == remoteIP
		}
		if !ok {
			return 0, RefuseSourceAddress, status.Errorf(codes.PermissionDenied, "peer stream from %s refused: node %s connects from %s (the IP of its peer_listen), not from %s", remote, m.Name, m.sources[0], remoteIP)
		}
	}
	return m.ID, "", nil
}

func (g *GRPC) refused(reason, remote string, err error) {
	g.refusedCount.Add(1)
	if g.opts.OnRefused != nil {
		g.opts.OnRefused(reason, remote, err)
	}
}

// Register adds the Peer service to s.
func (g *GRPC) Register(s *grpc.Server) { peerpb.RegisterPeerServer(s, g) }

// Stream is the server side of Peer.Stream: it authenticates the sending node, then
// delivers every message it sends.
func (g *GRPC) Stream(stream grpc.ClientStreamingServer[peerpb.Envelope, peerpb.StreamAck]) error {
	from, err := g.authenticateStream(stream.Context())
	if err != nil {
		return err
	}
	for {
		env, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&peerpb.StreamAck{})
			}
			return err
		}
		g.accept(from, env)
	}
}

// StreamBatches is the server side of Peer.StreamBatches: Stream, with several messages in
// each stream message.
func (g *GRPC) StreamBatches(stream grpc.ClientStreamingServer[peerpb.EnvelopeBatch, peerpb.StreamAck]) error {
	from, err := g.authenticateStream(stream.Context())
	if err != nil {
		return err
	}
	for {
		b, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&peerpb.StreamAck{})
			}
			return err
		}
		for _, env := range b.Envelopes {
			g.accept(from, env)
		}
	}
}

// authenticateStream authenticates an incoming stream, counting and reporting a refusal.
func (g *GRPC) authenticateStream(ctx context.Context) (uint32, error) {
	from, reason, err := g.authenticate(ctx)
	if err != nil {
		remote := "unknown"
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			remote = p.Addr.String()
		}
		g.refused(reason, remote, err)
		return 0, err
	}
	return from, nil
}

// accept delivers a message received on the stream of node from.
func (g *GRPC) accept(from uint32, env *peerpb.Envelope) {
	if env == nil {
		return
	}
	if env.From != from {
		// An authenticated node speaking for another: a bug or a forgery; never deliver.
		g.refused(RefuseFromMismatch, g.view.Load().members[from].Name, fmt.Errorf("message from node %d on the stream of node %d", env.From, from))
		return
	}
	if env.To != g.opts.Self {
		return // misrouted: a stale address map on the sender
	}
	g.received.Add(1)
	g.handler(env)
}

// Send queues env for its destination.
func (g *GRPC) Send(env *peerpb.Envelope) bool {
	env.From = g.opts.Self
	p, ok := g.view.Load().peers[env.To]
	if !ok {
		g.dropped.Add(1)
		return false
	}
	select {
	case p.queue <- env:
		g.sent.Add(1)
		return true
	default:
		g.dropped.Add(1)
		return false
	}
}

func (g *GRPC) sendLoop(p *grpcPeer) {
	defer g.wg.Done()
	backoff := 10 * time.Millisecond
	for g.ctx.Err() == nil {
		err := g.streamTo(p)
		if g.ctx.Err() != nil {
			return
		}
		if err != nil {
			// The peer is down or restarting, or refused a message; retry after a pause,
			// dropping what queues up meanwhile. Report it, at most once per peer per minute.
			g.reportError(p, err)
		}
		g.drain(p)
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, g.opts.MaxBackoff)
		if err == nil {
			backoff = 10 * time.Millisecond
		}
	}
}

// drain drops the messages queued for an unreachable peer, so that a returning peer does
// not first receive a burst of stale requests.
func (g *GRPC) drain(p *grpcPeer) {
	if p.carry != nil {
		p.carry = nil
		g.dropped.Add(1)
	}
	for range len(p.queue) {
		select {
		case <-p.queue:
			g.dropped.Add(1)
		default:
			return
		}
	}
}

func (g *GRPC) streamTo(p *grpcPeer) error {
	conn, err := grpc.NewClient(p.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(PeerKeepaliveParams),
		grpc.WithContextDialer(g.dialer()),
		grpc.WithStaticStreamWindowSize(StreamWindowBytes),
		grpc.WithStaticConnWindowSize(ConnWindowBytes),
	)
	if err != nil {
		return fmt.Errorf("transport: dial peer %d at %s: %w", p.id, p.addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, mdCluster, g.opts.Cluster, mdNodeID, strconv.FormatUint(uint64(g.opts.Self), 10),
		mdNode, g.self.Name, mdTo, strconv.FormatUint(uint64(p.id), 10))
	// Wait for the first message before opening the stream so an idle cluster does not keep
	// dialling peers that are down.
	select {
	case <-g.ctx.Done():
		return nil
	case p.carry = <-p.queue:
	}
	if p.legacy.Load() {
		return g.streamEach(ctx, conn, p)
	}
	return g.streamBatches(ctx, conn, p)
}

// streamBatches sends p's messages on Peer.StreamBatches: each stream message carries what
// was queued for p when it left (at most MaxBatchMessages messages and, unless one message is
// larger, MaxBatchBytes). A receiver without the method turns p to Peer.Stream.
func (g *GRPC) streamBatches(ctx context.Context, conn *grpc.ClientConn, p *grpcPeer) error {
	stream, err := peerpb.NewPeerClient(conn).StreamBatches(ctx, grpc.WaitForReady(false))
	if err != nil {
		g.dropped.Add(1)
		p.carry = nil
		return fmt.Errorf("transport: open stream to peer %d: %w", p.id, err)
	}
	batch := &peerpb.EnvelopeBatch{}
	for {
		if p.carry == nil {
			select {
			case <-g.ctx.Done():
				return nil
			case p.carry = <-p.queue:
			}
		}
		g.fillBatch(p, batch)
		if err := stream.Send(batch); err != nil {
			g.dropped.Add(uint64(len(batch.Envelopes)))
			clear(batch.Envelopes)
			if errors.Is(err, io.EOF) {
				// The receiver ended the stream; its status says why.
				if _, rerr := stream.CloseAndRecv(); rerr != nil {
					err = rerr
				}
			}
			if status.Code(err) == codes.Unimplemented {
				// A node of an older version: one message per stream message from now on.
				p.legacy.Store(true)
			}
			return fmt.Errorf("transport: send to peer %d: %w", p.id, err)
		}
		// gRPC has encoded the batch: drop the references so the messages can be collected.
		clear(batch.Envelopes)
		batch.Envelopes = batch.Envelopes[:0]
	}
}

// fillBatch moves p.carry and then whatever else is queued for p into batch, within the
// bounds; a message that would overflow MaxBatchBytes stays in p.carry for the next batch.
func (g *GRPC) fillBatch(p *grpcPeer, batch *peerpb.EnvelopeBatch) {
	batch.Envelopes = append(batch.Envelopes[:0], p.carry)
	bytes := proto.Size(p.carry)
	p.carry = nil
	for len(batch.Envelopes) < MaxBatchMessages {
		select {
		case env := <-p.queue:
			n := proto.Size(env)
			if bytes+n > MaxBatchBytes {
				p.carry = env
				return
			}
			batch.Envelopes = append(batch.Envelopes, env)
			bytes += n
		default:
			return
		}
	}
}

// streamEach sends p's messages on Peer.Stream, one per stream message (receivers that do
// not know Peer.StreamBatches).
func (g *GRPC) streamEach(ctx context.Context, conn *grpc.ClientConn, p *grpcPeer) error {
	stream, err := peerpb.NewPeerClient(conn).Stream(ctx, grpc.WaitForReady(false))
	if err != nil {
		g.dropped.Add(1)
		p.carry = nil
		return fmt.Errorf("transport: open stream to peer %d: %w", p.id, err)
	}
	for {
		if p.carry == nil {
			select {
			case <-g.ctx.Done():
				return nil
			case p.carry = <-p.queue:
			}
		}
		env := p.carry
		p.carry = nil
		if err := stream.Send(env); err != nil {
			g.dropped.Add(1)
			return fmt.Errorf("transport: send to peer %d: %w", p.id, err)
		}
	}
}

// Stats returns the transport's counters.
func (g *GRPC) Stats() Stats { return g.stats() }

// Refused counts incoming streams and messages refused by authentication.
func (g *GRPC) Refused() uint64 { return g.refusedCount.Load() }

// Close stops every sender.
func (g *GRPC) Close() error {
	g.cancel()
	g.wg.Wait()
	return nil
}
