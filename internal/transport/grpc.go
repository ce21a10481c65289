package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"meridian/internal/wire/peerpb"
)

// GRPCOptions configures the production transport.
type GRPCOptions struct {
	// Self is this node's ID; Peers maps every other node's ID to its listen address.
	Self  uint32
	Peers map[uint32]string
	// QueueLen bounds the messages waiting for one peer; beyond it Send drops. Default 16384.
	QueueLen int
	// MaxBackoff bounds the wait between reconnection attempts to a peer. Default 1s.
	MaxBackoff time.Duration
	// OnError, when set, is told of stream failures (at most once a minute per peer).
	OnError func(peer uint32, err error)
}

// GRPC sends each peer's messages over one long-lived client stream (Peer.Stream), opened
// lazily and reopened with backoff after a failure. Messages queued while a peer is
// unreachable are dropped, which the protocols tolerate.
type GRPC struct {
	opts    GRPCOptions
	handler Handler
	peers   map[uint32]*grpcPeer
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	counters
	peerpb.UnimplementedPeerServer
}

type grpcPeer struct {
	id         uint32
	addr       string
	queue      chan *peerpb.Envelope
	lastReport time.Time
}

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
	ctx, cancel := context.WithCancel(context.Background())
	g := &GRPC{opts: opts, handler: h, peers: map[uint32]*grpcPeer{}, ctx: ctx, cancel: cancel}
	for id, addr := range opts.Peers {
		if id == opts.Self {
			continue
		}
		if addr == "" {
			cancel()
			return nil, fmt.Errorf("transport: peer %d has no address", id)
		}
		p := &grpcPeer{id: id, addr: addr, queue: make(chan *peerpb.Envelope, opts.QueueLen)}
		g.peers[id] = p
		g.wg.Add(1)
		go g.sendLoop(p)
	}
	return g, nil
}

// Register adds the Peer service to s.
func (g *GRPC) Register(s *grpc.Server) { peerpb.RegisterPeerServer(s, g) }

// Stream is the server side of Peer.Stream: it delivers every received message.
func (g *GRPC) Stream(stream grpc.ClientStreamingServer[peerpb.Envelope, peerpb.StreamAck]) error {
	for {
		env, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&peerpb.StreamAck{})
			}
			return err
		}
		if env.To != g.opts.Self {
			continue // misrouted: a stale address map on the sender
		}
		g.received.Add(1)
		g.handler(env)
	}
}

// Send queues env for its destination.
func (g *GRPC) Send(env *peerpb.Envelope) bool {
	env.From = g.opts.Self
	p, ok := g.peers[env.To]
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
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	)
	if err != nil {
		return fmt.Errorf("transport: dial peer %d at %s: %w", p.id, p.addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	// Wait for the first message before opening the stream so an idle cluster does not keep
	// dialling peers that are down.
	var first *peerpb.Envelope
	select {
	case <-g.ctx.Done():
		return nil
	case first = <-p.queue:
	}
	stream, err := peerpb.NewPeerClient(conn).Stream(ctx, grpc.WaitForReady(false))
	if err != nil {
		g.dropped.Add(1)
		return fmt.Errorf("transport: open stream to peer %d: %w", p.id, err)
	}
	if err := stream.Send(first); err != nil {
		g.dropped.Add(1)
		return fmt.Errorf("transport: send to peer %d: %w", p.id, err)
	}
	for {
		select {
		case <-g.ctx.Done():
			return nil
		case env := <-p.queue:
			if err := stream.Send(env); err != nil {
				g.dropped.Add(1)
				return fmt.Errorf("transport: send to peer %d: %w", p.id, err)
			}
		}
	}
}

// Stats returns the transport's counters.
func (g *GRPC) Stats() Stats { return g.stats() }

// Close stops every sender.
func (g *GRPC) Close() error {
	g.cancel()
	g.wg.Wait()
	return nil
}
