package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/storage"
)

// The catalog: keyspaces come from the cluster file or are created through the API. Created
// keyspaces are stored as records of the _system keyspace, which is replicated on every node
// with the quorum protocol, so they survive restarts and reach nodes that were down through
// anti-entropy. Until cluster metadata moves to a consensus group (issue 13), two concurrent creates
// of the same name resolve by last-writer-wins.
//
// A node installs a keyspace in the committer, as soon as its catalog record is durable and
// before the acknowledgement of that record leaves (watchCatalog): so a node that has
// acknowledged the record serves the keyspace. A create writes at QUORUM and then waits
// (Request.WaitAll) for the acknowledgement of every node the failure detector considers
// alive, until its deadline; it returns the nodes that had not installed the keyspace then
// (issue 12: a create used to return while other regions still answered "unknown
// keyspace").

const catalogPrefix = "keyspace/"

func (n *Node) systemKeyspace() *placement.Keyspace {
	var ids []uint32
	regions := []string{}
	for _, nd := range n.opts.Cluster.Nodes {
		ids = append(ids, nd.ID)
		if !slices.Contains(regions, nd.Region) {
			regions = append(regions, nd.Region)
		}
	}
	slices.Sort(ids)
	return &placement.Keyspace{
		Spec: config.Keyspace{Name: engine.SystemKeyspace, Protocol: engine.SystemKeyspaceProtocol, Regions: regions, ReplicasPerRegion: 0, Partitions: 1,
			Options: map[string]string{}},
		Partitions: []placement.Partition{{ID: 0, Start: []byte{}, End: nil, Replicas: ids}},
	}
}

// loadPlacement builds the placement of the configured keyspaces, the system keyspace and the
// keyspaces created through the API that this node has stored.
func (n *Node) loadPlacement() (*placement.Map, error) {
	pm, err := placement.Build(n.opts.Cluster)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.self.Name, err)
	}
	for _, ks := range n.opts.Cluster.Keyspaces {
		n.origins.Store(ks.Name, "config")
	}
	pm = pm.With(n.systemKeyspace())
	var created []storage.Record
	err = n.store.Scan(engine.SystemKeyspace, 0, []byte(catalogPrefix), nil, 0, func(r storage.Record) bool {
		if strings.HasPrefix(string(r.Key), catalogPrefix) && !r.Tombstone {
			created = append(created, r)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: load catalog: %w", n.self.Name, err)
	}
	for _, r := range created {
		ks, err := n.decodeKeyspace(r.Value)
		if err != nil {
			n.log.Warn("ignoring unreadable catalog entry", "key", string(r.Key), "err", err)
			continue
		}
		if _, exists := pm.Keyspace(ks.Spec.Name); exists {
			continue
		}
		pm = pm.With(ks)
		n.origins.Store(ks.Spec.Name, "api")
	}
	return pm, nil
}

func (n *Node) decodeKeyspace(b []byte) (*placement.Keyspace, error) {
	var spec config.Keyspace
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("decode keyspace: %w", err)
	}
	if err := config.ValidateKeyspace(&spec, n.opts.Cluster); err != nil {
		return nil, err
	}
	return placement.BuildKeyspace(spec, n.opts.Cluster.Nodes)
}

// watchCatalog installs keyspaces whose catalog records were just made durable here. It runs
// in the committer before the batch's messages (the records' acknowledgements) leave, and it
// is the only writer of the placement map after start; the event loop hands the new map to
// the core before the next input it handles (syncPlacement), so a request the gateway
// accepted against the new map never reaches a core without it.
func (n *Node) watchCatalog(writes []storage.Record) {
	for _, r := range writes {
		if r.Keyspace != engine.SystemKeyspace || r.Tombstone || !strings.HasPrefix(string(r.Key), catalogPrefix) {
			continue
		}
		if _, exists := n.pmap.Load().Keyspace(strings.TrimPrefix(string(r.Key), catalogPrefix)); exists {
			continue
		}
		ks, err := n.decodeKeyspace(r.Value)
		if err != nil {
			n.log.Warn("ignoring unreadable catalog entry", "key", string(r.Key), "err", err)
			continue
		}
		n.origins.Store(ks.Spec.Name, "api")
		pm := n.pmap.Load().With(ks)
		n.pmap.Store(pm)
		n.log.Info("keyspace installed", "keyspace", ks.Spec.Name, "placement_version", pm.Version)
	}
}

// CreateKeyspace validates spec, stores it in the catalog at QUORUM and waits until every
// node that is alive has installed it, up to timeout. notInstalled lists the nodes that had
// not ("NAME: reason"): they learn the keyspace when they are back (replication of the catalog
// or anti-entropy).
func (n *Node) CreateKeyspace(ctx context.Context, spec config.Keyspace, timeout time.Duration) (created config.Keyspace, notInstalled []string, err error) {
	if spec.Name == "" {
		return spec, nil, errs.New(errs.Invalid, "create keyspace: name is empty")
	}
	if strings.HasPrefix(spec.Name, "_") {
		return spec, nil, errs.New(errs.Invalid, "keyspace name %q: names starting with _ are reserved", spec.Name)
	}
	if err := config.ValidateKeyspace(&spec, n.opts.Cluster); err != nil {
		return spec, nil, errs.New(errs.Invalid, "%v", err)
	}
	if _, exists := n.pmap.Load().Keyspace(spec.Name); exists {
		return spec, nil, errs.New(errs.AlreadyExists, "keyspace %q already exists", spec.Name)
	}
	ks, err := placement.BuildKeyspace(spec, n.opts.Cluster.Nodes)
	if err != nil {
		return spec, nil, errs.New(errs.Invalid, "%v", err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return spec, nil, errs.New(errs.Internal, "encode keyspace: %v", err)
	}
	res := n.Do(ctx, engine.Request{
		Op: engine.OpPut, Keyspace: engine.SystemKeyspace, Key: []byte(catalogPrefix + spec.Name), Value: b,
		Level: config.LevelQuorum, Deadline: n.clock.Now().Add(timeout), WaitAll: true,
	})
	if res.Err != nil {
		return spec, nil, res.Err
	}
	for _, u := range res.Unacked {
		nd, _ := n.opts.Cluster.NodeByID(u.Node)
		notInstalled = append(notInstalled, fmt.Sprintf("%s: %s", nd.Name, u.Reason))
	}
	// This node replicates _system, so its own acknowledgement (counted above) came after
	// its committer installed the keyspace.
	return ks.Spec, notInstalled, nil
}

// Origin says where a keyspace was defined: "config" or "api".
func (n *Node) Origin(name string) string {
	if v, ok := n.origins.Load(name); ok {
		return v.(string)
	}
	return ""
}
