package streambench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"meridian/client"
)

// GRPC is the loopback-gRPC target kind: one `meridian server` process on a loopback address
// (the thesis's one Kawkab node, its clients on other machines), a stream per appender
// created through the Go client at the run's acknowledgement level, and appends through
// client.Appender (one bidirectional AppendAcked call per appender). The load generator runs
// in this process: client and server share the machine's cores.
const GRPC = "grpc"

// GRPCAddr is the loopback address of the gRPC target's server.
const GRPCAddr = "127.0.0.71"

// sessionOptions are what a session needs to start.
type sessionOptions struct {
	Dir string
	Exe string
	Log io.Writer
}

// session is a target kind's state for a whole benchmark: the in-process kind has none; the
// gRPC kind's is its server process.
type session interface {
	Open(ctx context.Context, cfg TargetConfig) (Target, error)
	// ServerPids are the processes whose CPU time is the server's (none: in process).
	ServerPids() []int
	Close() error
}

// openSession starts a target kind's session.
func openSession(ctx context.Context, kind string, o sessionOptions) (session, error) {
	if kind == GRPC {
		return startGRPC(ctx, o)
	}
	f, err := Lookup(kind)
	if err != nil {
		return nil, err
	}
	return factorySession{f}, nil
}

type factorySession struct{ f Factory }

func (s factorySession) Open(ctx context.Context, cfg TargetConfig) (Target, error) {
	return s.f(ctx, cfg)
}
func (factorySession) ServerPids() []int { return nil }
func (factorySession) Close() error      { return nil }

// grpcSession is the gRPC target's server.
type grpcSession struct {
	srv   *servers
	admin *client.Client
}

func init() {
	Register(GRPC, func(context.Context, TargetConfig) (Target, error) {
		return nil, errors.New("streambench: the grpc target runs through a session (its server process)")
	})
}

func startGRPC(ctx context.Context, o sessionOptions) (*grpcSession, error) {
	srv, err := startServers(ctx, serverOptions{Dir: filepath.Join(o.Dir, "grpc-server"), Exe: o.Exe, Addrs: []string{GRPCAddr},
		Streams: map[string]any{"object_store": "embedded", "local_capacity": "16GiB", "max_batch": "1MiB"}, Log: o.Log})
	if err != nil {
		return nil, err
	}
	admin, err := client.Dial(srv.Nodes[0].Listen)
	if err != nil {
		return nil, errors.Join(err, srv.Stop())
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "bench stream: meridian server (pid %d) at %s, log %s\n", srv.Nodes[0].Pid(), srv.Nodes[0].Listen, srv.Nodes[0].LogPath)
	}
	return &grpcSession{srv: srv, admin: admin}, nil
}

func (s *grpcSession) ServerPids() []int { return s.srv.Pids() }

func (s *grpcSession) Close() error {
	return errors.Join(s.admin.Close(), s.srv.Stop())
}

// Open creates the appender's stream and its append call (a connection of its own, as each
// of the thesis's clients).
func (s *grpcSession) Open(ctx context.Context, cfg TargetConfig) (Target, error) {
	name := fmt.Sprintf("%s-%d", cfg.Run, cfg.Appender)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := s.admin.CreateStream(cctx, &client.StreamSpec{Keyspace: BenchKeyspace, Name: name, RecordBytes: uint32(cfg.RecordBytes),
		ValueOffset: uint32(cfg.ValueOffset), Ack: cfg.Ack}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", name, err)
	}
	c, err := client.Dial(s.srv.Nodes[0].Listen)
	if err != nil {
		return nil, err
	}
	app, err := c.NewAppender(cctx, BenchKeyspace, name)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &grpcTarget{s: s, name: name, c: c, app: app}, nil
}

type grpcTarget struct {
	s    *grpcSession
	name string
	c    *client.Client
	app  *client.Appender
}

func (t *grpcTarget) Append(ctx context.Context, batch []byte) error {
	_, err := t.app.Append(ctx, batch)
	return err
}

// Close ends the append call and drops the stream (its files go with it).
func (t *grpcTarget) Close() error {
	err := errors.Join(t.app.Close(), t.c.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(err, t.s.admin.DropStream(ctx, BenchKeyspace, t.name, 0))
}
