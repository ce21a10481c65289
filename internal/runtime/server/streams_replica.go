package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
	"meridian/internal/metadata"
)

// Synchronous replication of a stream (ack level replicated; docs/streams.md, "Replicated
// streams"): the thesis's future work. The primary appends a batch to its own copy
// (fsynced), then sends it, in order, to the stream's second node (its reader), which appends
// it to its copy (fsynced) before the primary acknowledges. A second node that does not
// acknowledge fails the append (UNAVAILABLE) rather than letting it succeed with one copy.
// The batch stays in the primary's copy and is sent first when the link is next up: on every
// connection the second node says how many records its copy holds and the primary sends what
// it lacks, so the copy is always a prefix of the primary's.

// Identity of a replication call (the same headers as peer streams): checked by the second
// node together with the caller's address.
const (
	replClusterHeader = "meridian-cluster"
	replNodeHeader    = "meridian-node-id"
)

// replicaLink is the primary's replication call to one stream's second node.
type replicaLink struct {
	mu     sync.Mutex // held across a batch's local append and its replication
	st     meridianpb.Streams_ReplicateClient
	cancel context.CancelFunc
	copyN  uint64 // records the copy holds
}

func (l *replicaLink) reset() {
	if l.cancel != nil {
		l.cancel()
	}
	l.st, l.cancel = nil, nil
}

// link returns the replication link of a stream.
func (s *StreamsService) link(id uint64) *replicaLink {
	s.replMu.Lock()
	defer s.replMu.Unlock()
	l, ok := s.links[id]
	if !ok {
		l = &replicaLink{}
		s.links[id] = l
	}
	return l
}

// replicaConn returns the client connection to a node's client address.
func (s *StreamsService) replicaConn(addr string) (*grpc.ClientConn, error) {
	s.replMu.Lock()
	defer s.replMu.Unlock()
	if c, ok := s.conns[addr]; ok {
		return c, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(int(s.cfg.MaxBatchBytes) + 64<<10))}
	if s.dial != nil {
		opts = append(opts, grpc.WithContextDialer(s.dial))
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	s.conns[addr] = c
	return c, nil
}

// defaultReplicaDialer dials from the IP of this node's client address, the address the
// second node expects replication from (on a host with several loopback or interface
// addresses, as the tests' 127.0.0.x nodes).
func defaultReplicaDialer(listen string) func(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	if host, _, err := net.SplitHostPort(listen); err == nil {
		if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
			d.LocalAddr = &net.TCPAddr{IP: ip.AsSlice()}
		}
	}
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

// replicate sends a batch appended locally at first to the stream's second node, after what
// its copy lacks. Called with l.mu held.
func (s *StreamsService) replicate(ctx context.Context, l *replicaLink, rec *metadata.StreamRecord, first uint64, batch []byte) error {
	R := rec.Spec.RecordBytes
	if l.st == nil {
		addr := s.replicaAddress(rec.Reader)
		if addr == "" {
			return fmt.Errorf("node %d has no known address", rec.Reader)
		}
		conn, err := s.replicaConn(addr)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithCancel(grpcmd.AppendToOutgoingContext(context.Background(),
			replClusterHeader, s.node.Cluster().Name, replNodeHeader, strconv.FormatUint(uint64(s.node.ID()), 10)))
		st, err := meridianpb.NewStreamsClient(conn).Replicate(cctx)
		if err != nil {
			cancel()
			return err
		}
		l.st, l.cancel = st, cancel
		n, err := l.exchange(ctx, &meridianpb.ReplicateRequest{Keyspace: rec.Spec.Keyspace, Stream: rec.Spec.Name, StreamId: rec.ID})
		if err != nil {
			return err
		}
		l.copyN = n
	}
	if l.copyN > first {
		return status.Errorf(codes.DataLoss, "the copy at %s holds %d records, more than the primary's %d", s.node.MemberName(rec.Reader), l.copyN, first)
	}
	// What the copy lacks (a batch whose replication failed earlier, or appended before a
	// restart), in pieces no larger than a batch (the second node's receive limit).
	piece := uint64(max(1, min(maxStreamPageBytes, int(s.cfg.MaxBatchBytes))/R))
	for l.copyN < first {
		recs, err := s.store.readRecords(rec, l.copyN, int(min(first-l.copyN, piece)))
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return fmt.Errorf("the primary's copy has no record %d to send", l.copyN)
		}
		if err := l.send(ctx, rec, l.copyN, recs); err != nil {
			return err
		}
	}
	return l.send(ctx, rec, first, batch)
}

func (l *replicaLink) send(ctx context.Context, rec *metadata.StreamRecord, first uint64, recs []byte) error {
	want := first + uint64(len(recs)/rec.Spec.RecordBytes)
	n, err := l.exchange(ctx, &meridianpb.ReplicateRequest{FirstRecord: first, Records: recs})
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("the copy acknowledged %d records, want %d", n, want)
	}
	l.copyN = n
	return nil
}

// exchange sends one request and waits for its acknowledgement (or ctx).
func (l *replicaLink) exchange(ctx context.Context, m *meridianpb.ReplicateRequest) (uint64, error) {
	stop := context.AfterFunc(ctx, l.cancel)
	defer stop()
	if err := l.st.Send(m); err != nil {
		if _, rerr := l.st.Recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
			return 0, rerr
		}
		return 0, err
	}
	ack, err := l.st.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the second node ended the replication call")
		}
		return 0, err
	}
	return ack.GetRecords(), nil
}

// appendReplicated appends a batch of a replicated stream: locally, then at its second
// node, before it is acknowledged.
func (s *StreamsService) appendReplicated(ctx context.Context, rec *metadata.StreamRecord, b []byte) (uint64, error) {
	l := s.link(rec.ID)
	l.mu.Lock()
	defer l.mu.Unlock()
	first, err := s.store.append(rec, b)
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, s.replTimeout)
	defer cancel()
	if err := s.replicate(rctx, l, rec, first, b); err != nil {
		l.reset()
		s.m.replFailures.Inc()
		if st, ok := status.FromError(err); ok && st.Code() == codes.DataLoss {
			return 0, st.Err()
		}
		return 0, status.Errorf(codes.Unavailable, "stream %s/%s: the batch from record %d is durable at the primary %s but its second node %s (%s) did not acknowledge it: %v; a replicated stream takes no append that only one node holds (the batch's records may be read at the primary, and reach %s when it is back)",
			rec.Spec.Keyspace, rec.Spec.Name, first, s.node.Name(), s.node.MemberName(rec.Reader), s.replicaAddress(rec.Reader), errMsg(err), s.node.MemberName(rec.Reader))
	}
	return first, nil
}

func errMsg(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// Replicate is the second node's side: a replicated stream's copy, appended in order.
func (s *StreamsService) Replicate(srv meridianpb.Streams_ReplicateServer) error {
	first, err := srv.Recv()
	if err != nil {
		return err
	}
	rec, err := s.lookup(srv.Context(), first.GetKeyspace(), first.GetStream())
	if err != nil {
		return err
	}
	if err := s.checkReplicaCaller(srv.Context(), rec); err != nil {
		return err
	}
	switch {
	case rec.ID != first.GetStreamId():
		return status.Errorf(codes.FailedPrecondition, "replicate stream %s/%s: it is stream %d here, the request is for %d", rec.Spec.Keyspace, rec.Spec.Name, rec.ID, first.GetStreamId())
	case !rec.Replicated() || rec.Reader != s.node.ID():
		return status.Errorf(codes.FailedPrecondition, "replicate stream %s/%s: node %s holds no copy of it (ack %s, second node %s)", rec.Spec.Keyspace, rec.Spec.Name, s.node.Name(), rec.Spec.Ack, s.node.MemberName(rec.Reader))
	case len(first.GetRecords()) > 0:
		return status.Errorf(codes.InvalidArgument, "replicate stream %s/%s: the first message carries no records", rec.Spec.Keyspace, rec.Spec.Name)
	}
	n, _, _, err := s.store.info(rec)
	if err != nil {
		return s.storeErr(rec, err)
	}
	if err := srv.Send(&meridianpb.ReplicateAck{Records: n}); err != nil {
		return err
	}
	for {
		m, err := srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.GetFirstRecord() != n {
			return status.Errorf(codes.FailedPrecondition, "replicate stream %s/%s: a batch from record %d, the copy holds %d records", rec.Spec.Keyspace, rec.Spec.Name, m.GetFirstRecord(), n)
		}
		if err := checkBatch(rec.Spec.Keyspace, rec.Spec.Name, rec.Spec.RecordBytes, int(s.cfg.MaxBatchBytes), len(m.GetRecords())); err != nil {
			return err
		}
		f, err := s.store.append(rec, m.GetRecords())
		if err != nil {
			return s.storeErr(rec, err)
		}
		if f != n {
			return status.Errorf(codes.Internal, "replicate stream %s/%s: appended at record %d, want %d", rec.Spec.Keyspace, rec.Spec.Name, f, n)
		}
		n += uint64(len(m.GetRecords()) / rec.Spec.RecordBytes)
		if err := srv.Send(&meridianpb.ReplicateAck{Records: n}); err != nil {
			return err
		}
	}
}

// checkReplicaCaller accepts a replication call only from the stream's primary: its node ID
// in the headers and, when the primary's addresses are IPs, a connection from one of them.
// Like peer streams, this keeps clients from writing a copy until mTLS (issue 21).
func (s *StreamsService) checkReplicaCaller(ctx context.Context, rec *metadata.StreamRecord) error {
	md, _ := grpcmd.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	remote := "unknown"
	var remoteIP netip.Addr
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
		if ap, err := netip.ParseAddrPort(remote); err == nil {
			remoteIP = ap.Addr().Unmap()
		}
	}
	if get(replClusterHeader) != s.node.Cluster().Name || get(replNodeHeader) != strconv.FormatUint(uint64(rec.Primary), 10) {
		return status.Errorf(codes.PermissionDenied, "replicate stream %s/%s from %s refused: only its primary %s replicates it", rec.Spec.Keyspace, rec.Spec.Name, remote, s.node.MemberName(rec.Primary))
	}
	m, ok := s.node.Member(rec.Primary)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "replicate stream %s/%s from %s refused: its primary %d is not a member", rec.Spec.Keyspace, rec.Spec.Name, remote, rec.Primary)
	}
	var ips []netip.Addr
	for _, a := range []string{m.Listen, m.PeerListen} {
		if host, _, err := net.SplitHostPort(a); err == nil {
			if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
				ips = append(ips, ip.Unmap())
			}
		}
	}
	if len(ips) == 0 {
		return nil
	}
	for _, ip := range ips {
		if ip == remoteIP {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "replicate stream %s/%s refused: its primary %s connects from %v, not from %s", rec.Spec.Keyspace, rec.Spec.Name, m.Name, ips, remote)
}

// closeReplication ends the replication calls and connections.
func (s *StreamsService) closeReplication() {
	s.replMu.Lock()
	defer s.replMu.Unlock()
	for _, c := range s.conns { // ends the replication calls on them
		c.Close()
	}
	s.conns = map[string]*grpc.ClientConn{}
}

// defaultReplicationTimeout bounds a batch's replication (its catch-up included).
const defaultReplicationTimeout = 10 * time.Second
