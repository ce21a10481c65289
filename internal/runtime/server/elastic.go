package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"meridian/api/meridianpb"
	"meridian/internal/config"
)

// The elasticity calls (docs/elasticity.md): a node joins, a node is decommissioned, a
// replica moves by hand, and the cluster's status.

// JoinCluster registers a node that joins the running cluster.
func (s *Service) JoinCluster(ctx context.Context, r *meridianpb.JoinClusterRequest) (*meridianpb.JoinClusterResponse, error) {
	timeout, err := s.metaTimeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	rec, err := s.node.JoinCluster(ctx, r.GetCluster(), config.Node{Name: r.GetName(), Region: r.GetRegion(), Listen: r.GetListen(),
		PeerListen: r.GetPeerListen(), Metrics: r.GetMetrics()}, timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.JoinClusterResponse{Id: rec.ID, State: rec.State}, nil
}

// SetNodeState decommissions a member (or cancels that).
func (s *Service) SetNodeState(ctx context.Context, r *meridianpb.SetNodeStateRequest) (*meridianpb.SetNodeStateResponse, error) {
	timeout, err := s.metaTimeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	rec, version, err := s.node.SetNodeState(ctx, r.GetNode(), r.GetState(), timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.SetNodeStateResponse{State: rec.State, Version: version}, nil
}

// MoveReplica starts a replica move.
func (s *Service) MoveReplica(ctx context.Context, r *meridianpb.MoveReplicaRequest) (*meridianpb.MoveReplicaResponse, error) {
	timeout, err := s.metaTimeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	id, err := s.node.MoveReplica(ctx, r.GetKeyspace(), r.GetPartition(), r.GetFrom(), r.GetTo(), r.GetSource(), timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &meridianpb.MoveReplicaResponse{MoveId: id}, nil
}

// joinedFile is where a node that joined the running cluster keeps its identity, in its data
// directory: the configuration file does not list it, and it must come back as the same node.
const joinedFile = "joined-node.json"

type joinedIdentity struct {
	Cluster string      `json:"cluster"`
	Node    config.Node `json:"node"`
}

// JoinedIdentity reads the identity a node saved when it joined (found false: it never did).
func JoinedIdentity(dataDir, cluster string) (nd config.Node, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, joinedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return config.Node{}, false, nil
	}
	if err != nil {
		return config.Node{}, false, fmt.Errorf("server: read the joined identity: %w", err)
	}
	var id joinedIdentity
	if err := json.Unmarshal(b, &id); err != nil {
		return config.Node{}, false, fmt.Errorf("server: %s in %s is unreadable: %w", joinedFile, dataDir, err)
	}
	if id.Cluster != cluster {
		return config.Node{}, false, fmt.Errorf("server: data directory %s belongs to a node of cluster %q, not %q", dataDir, id.Cluster, cluster)
	}
	return id.Node, true, nil
}

// SaveJoinedIdentity writes the identity of a node that has just joined, durably, before it
// first starts.
func SaveJoinedIdentity(dataDir, cluster string, nd config.Node) error {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("server: data directory: %w", err)
	}
	b, _ := json.MarshalIndent(joinedIdentity{Cluster: cluster, Node: nd}, "", "  ")
	tmp := filepath.Join(dataDir, joinedFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("server: save the joined identity: %w", err)
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("server: save the joined identity: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dataDir, joinedFile)); err != nil {
		return fmt.Errorf("server: save the joined identity: %w", err)
	}
	d, err := os.Open(dataDir)
	if err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ClusterStatus describes the members, what they hold and serve, and the moves in flight.
func (s *Service) ClusterStatus(ctx context.Context, r *meridianpb.ClusterStatusRequest) (*meridianpb.ClusterStatusResponse, error) {
	st := s.node.ClusterStatus()
	out := &meridianpb.ClusterStatusResponse{ReplicaImbalance: st.ReplicaImbalance, ByteImbalance: st.ByteImbalance, LoadImbalance: st.LoadImbalance,
		Partitions: uint32(st.Partitions), Splits: uint64(st.Splits), Merges: uint64(st.Merges), MovesStarted: uint64(st.MovesStarted), Driver: st.Driver}
	for _, n := range st.Nodes {
		out.Nodes = append(out.Nodes, &meridianpb.NodeStatus{Id: n.ID, Name: n.Name, Region: n.Region, State: n.State, Alive: n.Alive,
			Replicas: uint32(n.Replicas), Bytes: uint64(max(0, n.Bytes)), LoadOps: n.LoadOps, Cpu: n.CPU, Bootstrap: n.Bootstrap, StatsAgeS: n.StatsAge.Seconds()})
	}
	for _, m := range st.Moves {
		out.Moves = append(out.Moves, &meridianpb.MoveStatus{Keyspace: m.Keyspace, Partition: m.Partition, MoveId: m.ID, From: m.From, To: m.To, Source: m.Source})
	}
	return out, nil
}
