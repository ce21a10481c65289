package metadata

import (
	"slices"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/replication/raft"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// stateMachine is the metadata group's raft.StateMachine: commands are Commands applied to
// the Catalog; the catalog lives in memory (loaded from its records at start and from a
// snapshot's records) and is written through as records.
type stateMachine struct {
	cat *Catalog
}

func newStateMachine(cfg engine.Config) *stateMachine {
	c := &config.Cluster{Name: "meta", Topology: cfg.Topology, Nodes: cfg.Nodes, Limits: cfg.Limits, Metadata: config.Metadata{Voters: cfg.MetadataVoters}}
	return &stateMachine{cat: NewCatalog(c)}
}

// Prepare accepts metadata commands only: the catalog changes through them, never by
// writing its records directly.
func (m *stateMachine) Prepare(req engine.Request, cmd *peerpb.RaftCommand) error {
	if req.Op != engine.OpCommand {
		return errs.New(errs.Invalid, "keyspace %q holds the cluster metadata: change it with keyspace commands (create, alter, drop), not %s", req.Keyspace, req.Op)
	}
	if _, err := DecodeCommand(req.Command); err != nil {
		return errs.New(errs.Invalid, "%v", err)
	}
	cmd.Command = req.Command
	return nil
}

func (m *stateMachine) Apply(g raft.GroupRef, index uint64, cmd *peerpb.RaftCommand, v hlc.Version) ([]storage.Record, engine.Result) {
	c, err := DecodeCommand(cmd.GetCommand())
	if err != nil {
		// Every node decodes the same bytes the same way: every node refuses it alike.
		return nil, engine.Result{Err: errs.New(errs.Invalid, "%v", err)}
	}
	recs, out, err := m.cat.Apply(index, c)
	if err != nil {
		return nil, engine.Result{Err: err}
	}
	for i := range recs {
		recs[i].Keyspace, recs[i].Version = g.Keyspace, v
	}
	return recs, engine.Result{Version: v, Output: encodeOutcome(out)}
}

func (m *stateMachine) Load(_ raft.GroupRef, records func(fn func(storage.Record) bool) error) error {
	return m.cat.Load(records)
}

func (m *stateMachine) InMemory() bool { return true }

// NotifyApplied: every node reports how far it has applied the catalog, so a change can
// return once it is in force everywhere (raft's WaitAll).
func (m *stateMachine) NotifyApplied() bool { return true }

// SystemKeyspace is the placement of the metadata group's keyspace: one partition, whose
// voters are the configured metadata voters and whose learners are every other node.
func SystemKeyspace(c *config.Cluster) *placement.Keyspace {
	voters := c.MetadataVoters()
	var learners []uint32
	var regions []string
	for _, n := range c.Nodes {
		if !slices.Contains(voters, n.ID) {
			learners = append(learners, n.ID)
		}
		if !slices.Contains(regions, n.Region) {
			regions = append(regions, n.Region)
		}
	}
	slices.Sort(learners)
	leaderRegion := ""
	if len(voters) > 0 {
		if n, ok := c.NodeByID(voters[0]); ok {
			leaderRegion = n.Region
		}
	}
	spec := config.Keyspace{Name: Keyspace, Protocol: config.ProtocolMetadata, Regions: regions, ReplicasPerRegion: 1, Partitions: 1,
		Options: map[string]string{"leader_region": leaderRegion, "heartbeat_interval": "200ms", "election_timeout": "2s",
			"read_level": string(config.LevelLinearizable), "log_retain": "10000"}}
	return &placement.Keyspace{Spec: spec, Partitions: []placement.Partition{{ID: 0, Start: []byte{}, End: nil,
		Replicas: slices.Clone(voters), Learners: learners, FoundingVoters: slices.Clone(voters), FoundingLearners: slices.Clone(learners)}}}
}
