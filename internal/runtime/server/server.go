package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/runtime/node"
	"meridian/internal/runtime/transport"
)

// Service implements the Meridian client API on one node. In-process callers (the emulated
// cluster) must not modify a request's byte slices after the call: the node keeps them in
// replication messages and storage batches.
type Service struct {
	meridianpb.UnimplementedMeridianServer
	node *node.Node
}

// NewService returns the client API of n.
func NewService(n *node.Node) *Service { return &Service{node: n} }

func (s *Service) validator() validator {
	// Deadlines are on the node's clock: the core fires them against it, and the clock may
	// carry a configured offset (tests, the lab).
	return validator{limits: s.node.Cluster().Limits, pmap: s.node.Placement(), now: s.node.Clock().Now()}
}

// ToStatus maps a Meridian error to a gRPC status with the same one-line message.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	code := codes.Internal
	switch errs.KindOf(err) {
	case errs.Invalid:
		code = codes.InvalidArgument
	case errs.NotFound:
		code = codes.NotFound
	case errs.AlreadyExists:
		code = codes.AlreadyExists
	case errs.Unavailable:
		code = codes.Unavailable
	case errs.Timeout:
		code = codes.DeadlineExceeded
	case errs.Overloaded, errs.Exhausted:
		code = codes.ResourceExhausted
	case errs.Conflict:
		code = codes.Aborted
	case errs.StalePlacement:
		code = codes.FailedPrecondition
	}
	return status.Error(code, err.Error())
}

func (s *Service) do(ctx context.Context, req engine.Request) engine.Result {
	return s.node.Do(ctx, req)
}

// placed checks the client's placement version of the keyspace (node.CheckPlacement) and
// returns the version the request is served under.
func (s *Service) placed(ctx context.Context, keyspace string, clientVersion uint64) (uint64, error) {
	return s.node.CheckPlacement(ctx, keyspace, clientVersion)
}

// stalenessMs renders a read's staleness bound for the API (-1: unknown).
func stalenessMs(res engine.Result) float64 {
	if res.Path != "stale" {
		return 0
	}
	if res.Staleness < 0 {
		return -1
	}
	return float64(res.Staleness.Microseconds()) / 1000
}

// serve runs a validated data request (verr: the validation's error) under the client's
// placement version: the steps every data call shares. Errors are gRPC statuses.
func (s *Service) serve(ctx context.Context, req engine.Request, verr error, keyspace string, clientPV uint64) (engine.Result, uint64, error) {
	if verr != nil {
		return engine.Result{}, 0, ToStatus(verr)
	}
	pv, err := s.placed(ctx, keyspace, clientPV)
	if err != nil {
		return engine.Result{}, 0, ToStatus(err)
	}
	res := s.do(ctx, req)
	if res.Err != nil {
		return res, pv, ToStatus(res.Err)
	}
	return res, pv, nil
}

// Get reads one key.
func (s *Service) Get(ctx context.Context, r *meridianpb.GetRequest) (*meridianpb.GetResponse, error) {
	req, err := s.validator().get(r)
	res, pv, err := s.serve(ctx, req, err, r.GetKeyspace(), r.GetPlacementVersion())
	if err != nil {
		return nil, err
	}
	return &meridianpb.GetResponse{Found: res.Found, Value: res.Value, Version: versionPB(res.Version), Coordinator: s.node.Name(), ReadPath: res.Path,
		PlacementVersion: pv, StalenessBoundMs: stalenessMs(res)}, nil
}

// Put writes one key.
func (s *Service) Put(ctx context.Context, r *meridianpb.PutRequest) (*meridianpb.PutResponse, error) {
	req, err := s.validator().put(r)
	res, pv, err := s.serve(ctx, req, err, r.GetKeyspace(), r.GetPlacementVersion())
	if err != nil {
		return nil, err
	}
	return &meridianpb.PutResponse{Version: versionPB(res.Version), Coordinator: s.node.Name(), PlacementVersion: pv}, nil
}

// Delete writes a tombstone.
func (s *Service) Delete(ctx context.Context, r *meridianpb.DeleteRequest) (*meridianpb.DeleteResponse, error) {
	req, err := s.validator().del(r)
	res, pv, err := s.serve(ctx, req, err, r.GetKeyspace(), r.GetPlacementVersion())
	if err != nil {
		return nil, err
	}
	return &meridianpb.DeleteResponse{Version: versionPB(res.Version), Coordinator: s.node.Name(), PlacementVersion: pv}, nil
}

// Scan reads a key range.
func (s *Service) Scan(ctx context.Context, r *meridianpb.ScanRequest) (*meridianpb.ScanResponse, error) {
	req, err := s.validator().scan(r)
	res, pv, err := s.serve(ctx, req, err, r.GetKeyspace(), r.GetPlacementVersion())
	if err != nil {
		return nil, err
	}
	out := &meridianpb.ScanResponse{More: res.More, Coordinator: s.node.Name(), PlacementVersion: pv}
	for _, it := range res.Items {
		out.Items = append(out.Items, &meridianpb.KeyValue{Key: it.Key, Value: it.Value, Version: versionPB(it.Version)})
	}
	return out, nil
}

// TxnRead reads keys of a transactional keyspace at the transaction's snapshots.
func (s *Service) TxnRead(ctx context.Context, r *meridianpb.TxnReadRequest) (*meridianpb.TxnReadResponse, error) {
	reqs, err := s.validator().txnRead(r)
	if err != nil {
		return nil, ToStatus(err)
	}
	pv, err := s.placed(ctx, r.GetKeyspace(), r.GetPlacementVersion())
	if err != nil {
		return nil, ToStatus(err)
	}
	var values []*meridianpb.TxnValue
	var snaps []engine.TxnSnapshot
	if ks, ok := s.node.Placement().Keyspace(r.GetKeyspace()); ok && r.GetReadOnly() && config.TxnModeOf(ks.Spec.Options) == config.Txn2PC {
		values, snaps, err = readValidated(ctx, reqs, s.do)
	} else {
		values, snaps, err = readTxnKeys(ctx, reqs, s.do)
	}
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.TxnReadResponse{Values: values, Snapshots: txnSnapshotsPB(snaps), Coordinator: s.node.Name(), PlacementVersion: pv}, nil
}

// readTxnKeys runs a TxnRead's requests (one OpTxnRead per key) in order, each with the
// snapshots the earlier ones fixed, so that every key of one partition is read at one
// snapshot. It returns the values in the order of the keys and the snapshots (the request's
// and those the reads fixed) by partition.
func readTxnKeys(ctx context.Context, reqs []engine.Request, do func(context.Context, engine.Request) engine.Result) ([]*meridianpb.TxnValue, []engine.TxnSnapshot, error) {
	var snaps []engine.TxnSnapshot
	if len(reqs) > 0 && reqs[0].Txn != nil {
		snaps = slices.Clone(reqs[0].Txn.Snapshots)
	}
	values := make([]*meridianpb.TxnValue, 0, len(reqs))
	for _, req := range reqs {
		// Each request gets its own copy: the engine may keep a request's slices.
		req.Txn = &engine.TxnRequest{Snapshots: slices.Clone(snaps), ReadOnly: req.Txn != nil && req.Txn.ReadOnly}
		res := do(ctx, req)
		if res.Err != nil {
			return nil, nil, res.Err
		}
		if res.Txn == nil {
			return nil, nil, errs.New(errs.Internal, "transaction read of key %q in keyspace %q returned no snapshot", req.Key, req.Keyspace)
		}
		if len(snaps) == 0 && len(res.Txn.Vector) > 0 {
			// A read-only read: the rest read at the same vector.
			snaps = slices.Clone(res.Txn.Vector)
		}
		got := res.Txn.Snapshot
		i := slices.IndexFunc(snaps, func(sn engine.TxnSnapshot) bool { return sn.Partition == got.Partition })
		switch {
		case i < 0:
			snaps = append(snaps, got)
		case snaps[i].Counter != got.Counter:
			return nil, nil, errs.New(errs.Internal, "key %q was read at snapshot %d of partition %d, but the transaction reads that partition at snapshot %d",
				req.Key, got.Counter, got.Partition, snaps[i].Counter)
		}
		values = append(values, &meridianpb.TxnValue{Key: req.Key, Found: res.Found, Value: res.Value, Version: res.Txn.Version, Partition: got.Partition})
	}
	slices.SortFunc(snaps, func(a, b engine.TxnSnapshot) int { return cmp.Compare(a.Partition, b.Partition) })
	return values, snaps, nil
}

// readOnlyRetries bounds the validated reads of a 2pc read-only transaction.
const readOnlyRetries = 5

// readValidated is a read-only transaction of a 2pc keyspace, which has no snapshots: the
// keys are read, then a commit without writes validates the versions read (2PC's optimistic
// reads); on a conflict, read again.
func readValidated(ctx context.Context, reqs []engine.Request, do func(context.Context, engine.Request) engine.Result) ([]*meridianpb.TxnValue, []engine.TxnSnapshot, error) {
	var lastErr error
	for range readOnlyRetries + 1 {
		values, snaps, err := readTxnKeys(ctx, reqs, do)
		if err != nil {
			return nil, nil, err
		}
		commit := engine.Request{Op: engine.OpTxnCommit, Keyspace: reqs[0].Keyspace, Deadline: reqs[0].Deadline, Txn: &engine.TxnRequest{}}
		for _, v := range values {
			commit.Txn.Reads = append(commit.Txn.Reads, v.Key)
			commit.Txn.ReadVersions = append(commit.Txn.ReadVersions, v.Version)
		}
		res := do(ctx, commit)
		switch {
		case res.Err != nil:
			return nil, nil, res.Err
		case res.Txn == nil:
			return nil, nil, errs.New(errs.Internal, "read-only validation in keyspace %q returned no outcome", commit.Keyspace)
		case res.Txn.Committed:
			return values, snaps, nil
		}
		lastErr = errs.New(errs.Conflict, "read-only transaction in keyspace %q: its reads were overwritten before they could be validated %d times (last: %s, key %q); retry", commit.Keyspace, readOnlyRetries+1, res.Txn.Reason, res.Txn.Key)
	}
	return nil, nil, lastErr
}

// TxnCommit submits a transaction. An abort is a response (Committed false), not an error.
func (s *Service) TxnCommit(ctx context.Context, r *meridianpb.TxnCommitRequest) (*meridianpb.TxnCommitResponse, error) {
	req, err := s.validator().txnCommit(r)
	res, pv, err := s.serve(ctx, req, err, r.GetKeyspace(), r.GetPlacementVersion())
	if err != nil {
		return nil, err
	}
	if res.Txn == nil {
		return nil, ToStatus(errs.New(errs.Internal, "transaction commit in keyspace %q returned no outcome", req.Keyspace))
	}
	t := res.Txn
	return &meridianpb.TxnCommitResponse{Committed: t.Committed, Reason: t.Reason, Key: t.Key, Version: t.Version, Txn: t.ID,
		Coordinator: s.node.Name(), PlacementVersion: pv}, nil
}

func txnSnapshotsPB(in []engine.TxnSnapshot) []*meridianpb.TxnSnapshot {
	out := make([]*meridianpb.TxnSnapshot, len(in))
	for i, sn := range in {
		out[i] = &meridianpb.TxnSnapshot{Partition: sn.Partition, Counter: sn.Counter}
	}
	return out
}

// MoveMaster moves the master of one key (protocols with masters) to a replica in a region.
func (s *Service) MoveMaster(ctx context.Context, r *meridianpb.MoveMasterRequest) (*meridianpb.MoveMasterResponse, error) {
	req, err := s.validator().moveMaster(r)
	if err != nil {
		return nil, ToStatus(err)
	}
	res := s.do(ctx, req)
	if res.Err != nil {
		return nil, ToStatus(res.Err)
	}
	return &meridianpb.MoveMasterResponse{Master: res.Master, Region: res.MasterRegion, TableVersion: res.TableVersion}, nil
}

func specPB(ks config.Keyspace) *meridianpb.KeyspaceSpec {
	return &meridianpb.KeyspaceSpec{Name: ks.Name, Protocol: ks.Protocol, Regions: ks.Regions,
		ReplicasPerRegion: uint32(ks.ReplicasPerRegion), Partitions: uint32(ks.Partitions), Options: ks.Options,
		SplitPoints: ks.SplitPoints}
}

// SplitPartition splits the partition holding a key at that key.
func (s *Service) SplitPartition(ctx context.Context, r *meridianpb.SplitPartitionRequest) (*meridianpb.RepartitionResponse, error) {
	timeout, err := s.metaTimeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	rec, un, err := s.node.SplitPartition(ctx, r.GetKeyspace(), r.GetKey(), r.GetExpectVersion(), timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.RepartitionResponse{Version: rec.Version, Partitions: s.partitionsPB(rec.Partitions), NotInstalled: un}, nil
}

// MergePartitions merges a partition with its right-hand neighbour.
func (s *Service) MergePartitions(ctx context.Context, r *meridianpb.MergePartitionsRequest) (*meridianpb.RepartitionResponse, error) {
	timeout, err := s.metaTimeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	rec, un, err := s.node.MergePartitions(ctx, r.GetKeyspace(), r.GetPartition(), r.GetExpectVersion(), timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.RepartitionResponse{Version: rec.Version, Partitions: s.partitionsPB(rec.Partitions), NotInstalled: un}, nil
}

// partitionsPB describes partitions with node names.
func (s *Service) partitionsPB(parts []placement.Partition) []*meridianpb.PartitionPlacement {
	names := func(ids []uint32) []string {
		var out []string
		for _, id := range ids {
			out = append(out, s.node.MemberName(id))
		}
		return out
	}
	var out []*meridianpb.PartitionPlacement
	for _, p := range parts {
		out = append(out, &meridianpb.PartitionPlacement{Partition: p.ID, Start: p.Start, Replicas: names(p.Replicas), Learners: names(p.Learners)})
	}
	return out
}

// CreateKeyspace creates a keyspace at run time.
func (s *Service) CreateKeyspace(ctx context.Context, r *meridianpb.CreateKeyspaceRequest) (*meridianpb.CreateKeyspaceResponse, error) {
	sp := r.GetSpec()
	if sp == nil {
		return nil, ToStatus(errs.New(errs.Invalid, "create keyspace: spec is missing"))
	}
	v := s.validator()
	if _, err := v.deadline(r.GetTimeoutMs()); err != nil {
		return nil, ToStatus(err)
	}
	timeout := v.limits.DefaultRequestTimeout
	if r.GetTimeoutMs() > 0 {
		timeout = time.Duration(r.GetTimeoutMs()) * time.Millisecond
	}
	if sp.GetReplicasPerRegion() > 1<<16 || sp.GetPartitions() > 1<<20 {
		return nil, ToStatus(errs.New(errs.Invalid, "create keyspace: replicas_per_region or partitions out of range"))
	}
	spec := config.Keyspace{Name: sp.GetName(), Protocol: sp.GetProtocol(), Regions: sp.GetRegions(),
		ReplicasPerRegion: int(sp.GetReplicasPerRegion()), Partitions: int(sp.GetPartitions()), Options: sp.GetOptions(),
		SplitPoints: sp.GetSplitPoints()}
	got, version, notInstalled, err := s.node.CreateKeyspace(ctx, spec, timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.CreateKeyspaceResponse{Spec: specPB(got), NotInstalled: notInstalled, Version: version}, nil
}

// metaTimeout validates a metadata change's timeout and returns it (the cluster default
// when 0).
func (s *Service) metaTimeout(ms uint32) (time.Duration, error) {
	v := s.validator()
	if _, err := v.deadline(ms); err != nil {
		return 0, err
	}
	if ms > 0 {
		return time.Duration(ms) * time.Millisecond, nil
	}
	return v.limits.DefaultRequestTimeout, nil
}

// AlterKeyspace changes a keyspace's options or (protocols that move replicas) replication.
func (s *Service) AlterKeyspace(ctx context.Context, r *meridianpb.AlterKeyspaceRequest) (*meridianpb.AlterKeyspaceResponse, error) {
	timeout, err := s.metaTimeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	if r.GetReplicasPerRegion() > 1<<16 || len(r.GetSetOptions()) > 256 || len(r.GetRegions()) > 256 {
		return nil, ToStatus(errs.New(errs.Invalid, "alter keyspace: replicas_per_region, options or regions out of range"))
	}
	spec, version, unchanged, notInstalled, err := s.node.AlterKeyspace(ctx, r.GetName(), node.KeyspaceChange{SetOptions: r.GetSetOptions(),
		Regions: r.GetRegions(), ReplicasPerRegion: int(r.GetReplicasPerRegion()), ExpectVersion: r.GetExpectVersion()}, timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.AlterKeyspaceResponse{Spec: specPB(spec), Version: version, NotInstalled: notInstalled, Unchanged: unchanged}, nil
}

// DropKeyspace removes a keyspace and its data.
func (s *Service) DropKeyspace(ctx context.Context, r *meridianpb.DropKeyspaceRequest) (*meridianpb.DropKeyspaceResponse, error) {
	timeout, err := s.metaTimeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	version, notInstalled, err := s.node.DropKeyspace(ctx, r.GetName(), r.GetExpectVersion(), timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.DropKeyspaceResponse{Version: version, NotInstalled: notInstalled}, nil
}

// DescribeKeyspace returns a keyspace's spec and placement.
func (s *Service) DescribeKeyspace(ctx context.Context, r *meridianpb.DescribeKeyspaceRequest) (*meridianpb.DescribeKeyspaceResponse, error) {
	v := s.validator()
	switch name := r.GetName(); {
	case name == "":
		return nil, ToStatus(errs.New(errs.Invalid, "keyspace name is empty"))
	case strings.HasPrefix(name, "_"):
		return nil, ToStatus(errs.New(errs.Invalid, "keyspace %q is reserved for Meridian's own metadata", name))
	case len(name) > 256:
		return nil, ToStatus(errs.New(errs.Invalid, "keyspace name of %d bytes is too long", len(name)))
	}
	ks, err := s.node.DescribeKeyspace(ctx, r.GetName(), config.Level(strings.ToUpper(r.GetConsistency())), v.limits.DefaultRequestTimeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &meridianpb.DescribeKeyspaceResponse{Spec: specPB(ks.Spec), PlacementVersion: ks.Version, Origin: s.node.Origin(ks.Spec.Name),
		Partitions: s.partitionsPB(ks.Partitions)}
	return out, nil
}

// ListKeyspaces lists the user keyspaces.
func (s *Service) ListKeyspaces(ctx context.Context, r *meridianpb.ListKeyspacesRequest) (*meridianpb.ListKeyspacesResponse, error) {
	pm := s.node.Placement()
	out := &meridianpb.ListKeyspacesResponse{}
	for _, name := range sortedNames(pm.Keyspaces) {
		if name[0] == '_' {
			continue
		}
		ks := pm.Keyspaces[name]
		sp := specPB(ks.Spec)
		sp.Partitions = uint32(len(ks.Partitions)) // now, after any splits and merges
		out.Keyspaces = append(out.Keyspaces, sp)
	}
	return out, nil
}

// ServerInfo describes this node and the limits it enforces.
func (s *Service) ServerInfo(ctx context.Context, r *meridianpb.ServerInfoRequest) (*meridianpb.ServerInfoResponse, error) {
	c := s.node.Cluster()
	l := c.Limits
	return &meridianpb.ServerInfoResponse{
		Cluster: c.Name, Node: s.node.Name(), Region: s.node.Region(),
		MaxKeyBytes: uint32(l.MaxKeyBytes), MaxValueBytes: uint32(l.MaxValueBytes), MaxScanLimit: uint32(l.MaxScanLimit),
		DefaultRequestTimeoutMs: uint32(l.DefaultRequestTimeout.Milliseconds()), MaxRequestTimeoutMs: uint32(l.MaxRequestTimeout.Milliseconds()),
		MaxRequestMessageBytes: uint32(ClientMaxRecvBytes(l)),
		MaxTxnKeys:             uint32(l.MaxTxnKeys),
	}, nil
}

// ClientMaxRecvBytes is the client listener's gRPC receive limit: the largest key and value
// the limits allow plus room for the request's other fields and framing. Anything larger is
// cut off by gRPC before the validator sees it (the client maps that refusal to the limits).
// A transaction request's keys and values together are bounded by max_value_bytes too; their
// framing takes at most 16 bytes per key (max_txn_keys) and 24 per partition's snapshot.
func ClientMaxRecvBytes(l config.Limits) int {
	return l.MaxValueBytes + l.MaxKeyBytes + 64<<10 + 16*l.MaxTxnKeys + 24*config.MaxPartitions
}

// Options configures a server process.
type Options struct {
	Cluster  *config.Cluster
	NodeName string
	DataDir  string
	// DiskReserveBytes is the disk space the store keeps free for itself (0: the default,
	// 5% of the filesystem within [16 MiB, 1 GiB]); writes are refused below half of it.
	DiskReserveBytes uint64
	// ClockOffset shifts this node's clock (tests and the lab).
	ClockOffset time.Duration
	// ClockControl serves /debug/clock on the metrics address, through which the lab's
	// nemesis changes this node's clock offset and drift at run time. Off in production: a
	// clock that anyone on the metrics port can move is a fault injector.
	ClockControl bool
	Logger       *slog.Logger
	// Self is this node's identity when it joined the running cluster (it is not in the
	// configuration file; JoinedIdentity reads it back from the data directory).
	Self *config.Node
}

// peerMaxRecvBytes is the peer listener's gRPC receive limit: a scan reply or an
// anti-entropy push holds up to 4 MiB of records plus one record that crossed the bound.
func peerMaxRecvBytes(l config.Limits) int {
	maxRecord := l.MaxValueBytes + l.MaxKeyBytes + 64<<10
	return 2*maxRecord + 8<<20
}

// Run starts a node with the gRPC transport, serves the client API on the node's listen
// address, the peer service on its peer_listen address (a separate listener, so it can be
// firewalled off from clients; streams are accepted only from the cluster's nodes) and
// /metrics, and blocks until ctx is done. Then it stops accepting requests and closes the
// node (acknowledged writes are already durable).
func Run(ctx context.Context, o Options) error {
	self, ok := o.Cluster.Node(o.NodeName)
	if o.Self != nil {
		self, ok = *o.Self, true
	}
	if !ok {
		return fmt.Errorf("server: %q is not a node of cluster %s (nodes: %v); a new node joins with --join", o.NodeName, o.Cluster.Name, nodeNames(o.Cluster))
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	lis, err := net.Listen("tcp", self.Listen)
	if err != nil {
		return fmt.Errorf("server: listen on %s (listen, the client API): %w", self.Listen, err)
	}
	plis, err := net.Listen("tcp", self.PeerListen)
	if err != nil {
		lis.Close()
		return fmt.Errorf("server: listen on %s (peer_listen, the peer service): %w", self.PeerListen, err)
	}
	clock := hlc.NewSystemClock(o.ClockOffset)
	var grpcTr *transport.GRPC
	var peerNodes []transport.PeerNode
	for _, nd := range o.Cluster.Nodes {
		peerNodes = append(peerNodes, transport.PeerNode{ID: nd.ID, Name: nd.Name, Addr: nd.PeerListen})
	}
	if o.Self != nil {
		peerNodes = append(peerNodes, transport.PeerNode{ID: self.ID, Name: self.Name, Addr: self.PeerListen})
	}
	// Refusals are reported to the node's metrics; the node exists only once Start returns,
	// and streams arrive only after the peer server starts below.
	var n *node.Node
	n, err = node.Start(node.Options{
		Cluster: o.Cluster, NodeName: o.NodeName, Self: o.Self, DataDir: o.DataDir, Logger: o.Logger,
		Clock: clock, DiskReserveBytes: o.DiskReserveBytes,
		NewTransport: func(h transport.Handler) (transport.Transport, error) {
			t, err := transport.NewGRPC(transport.GRPCOptions{Cluster: o.Cluster.Name, Self: self.ID, Nodes: peerNodes,
				OnError: func(peer uint32, err error) {
					o.Logger.Warn("peer stream failed; messages to it are dropped until it reconnects", "peer", peer, "err", err)
				},
				OnRefused: func(reason, remote string, err error) { n.RefusedPeerStream(reason, remote, err) },
			}, h)
			grpcTr = t
			return t, err
		},
	})
	if err != nil {
		lis.Close()
		plis.Close()
		return err
	}
	// The stream service: its files under the data directory, its object store.
	streams, err := NewStreamsService(n, StreamsOptions{DataDir: o.DataDir, Config: o.Cluster.Streams, Logger: o.Logger})
	if err != nil {
		lis.Close()
		plis.Close()
		n.Close()
		return err
	}
	// Client requests are bounded by the validator (key and value limits) and, before it,
	// by gRPC's receive limit; the client maps that refusal to the documented limits. A
	// stream's batch may be larger (streams.max_batch).
	gs := grpc.NewServer(append(transport.ServerKeepaliveOptions(),
		grpc.MaxRecvMsgSize(max(ClientMaxRecvBytes(o.Cluster.Limits), streams.MaxBatchBytes()+64<<10)),
		// A fixed pool of stream workers instead of a goroutine per request: fewer stack
		// growths on the hot path.
		grpc.NumStreamWorkers(uint32(max(4, runtime.GOMAXPROCS(0)*4))),
		// Fixed windows: no bandwidth-estimation PINGs on every busy client connection.
		grpc.StaticStreamWindowSize(transport.StreamWindowBytes),
		grpc.StaticConnWindowSize(transport.ConnWindowBytes),
	)...)
	meridianpb.RegisterMeridianServer(gs, NewService(n))
	meridianpb.RegisterStreamsServer(gs, streams)
	ps := grpc.NewServer(append(transport.ServerKeepaliveOptions(), grpc.MaxRecvMsgSize(peerMaxRecvBytes(o.Cluster.Limits)),
		grpc.StaticStreamWindowSize(transport.StreamWindowBytes), grpc.StaticConnWindowSize(transport.ConnWindowBytes))...)
	grpcTr.Register(ps)
	serveErr := make(chan error, 3)
	go func() { serveErr <- gs.Serve(lis) }()
	go func() { serveErr <- ps.Serve(plis) }()
	var hs *http.Server
	if self.Metrics != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(n.Registry(), promhttp.HandlerOpts{}))
		// Profiles for operators chasing CPU or latency (only on the metrics address).
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		if o.ClockControl {
			mux.Handle("/debug/clock", clockHandler(clock, o.Logger))
		}
		hs = &http.Server{Addr: self.Metrics, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		mlis, err := net.Listen("tcp", self.Metrics)
		if err != nil {
			gs.Stop()
			ps.Stop()
			streams.Close()
			n.Close()
			return fmt.Errorf("server: metrics listen on %s: %w", self.Metrics, err)
		}
		go func() {
			if err := hs.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	o.Logger.Info("serving", "node", self.Name, "listen", self.Listen, "peer_listen", self.PeerListen, "metrics", self.Metrics)
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	case <-n.Removed():
		o.Logger.Info("decommissioned: this node holds nothing and has left the cluster; stopping", "node", self.Name)
	}
	if hs != nil {
		hs.Close()
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	// A graceful stop waits for client requests in flight, briefly (they need the peers'
	// replies, so the peer server keeps running meanwhile); peers' streams never end on
	// their own, so the peer server then stops hard.
	select {
	case <-stopped:
	case <-time.After(time.Second):
		gs.Stop()
	}
	ps.Stop()
	if cerr := streams.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if cerr := n.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
