// Package metadata is Meridian's cluster metadata: the catalog of keyspaces with their
// placement, and the membership of the cluster, kept by one Raft group (the "_meta" keyspace,
// protocol "metadata"). Its voters are a few nodes spread over the regions (config
// metadata.voters); every other node follows it as a learner, so every node holds the whole
// catalog and serves under it.
//
// Every change is a command in the group's log, applied by the same deterministic state
// machine on every node (Catalog.Apply): create, alter and drop of a keyspace, each
// conditional on the version it was based on, and the registration of a node. A keyspace's
// version is the log index of the command that last changed it, so two concurrent changes of
// one keyspace are ordered by the log and exactly one of them wins; the other gets a clear
// error (errs.Conflict or errs.AlreadyExists). The applied state is stored as records of the
// group's partition (Record), written in the same synced batch as the group's applied index;
// nodes install keyspaces from those records as they become durable (the node runtime's
// watchCatalog), and a change returns once every live node has applied it.
package metadata

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/storage"
)

// Keyspace is the name of the metadata group's keyspace.
const Keyspace = "_meta"

// LegacyKeyspace is where the catalog lived before it moved to the metadata group (a quorum
// keyspace of that name, records "keyspace/NAME"); a data directory that still has it is
// migrated at start (the node runtime).
const LegacyKeyspace = "_system"

// Record keys in the metadata partition.
const (
	keyspacePrefix = "ks/"
	nodePrefix     = "node/"
	importedPrefix = "imported/"
)

// KeyspaceKey is the record key of keyspace name.
func KeyspaceKey(name string) []byte { return []byte(keyspacePrefix + name) }

// IsKeyspaceKey reports whether a metadata record key is a keyspace's, and whose.
func IsKeyspaceKey(key []byte) (string, bool) {
	if !strings.HasPrefix(string(key), keyspacePrefix) {
		return "", false
	}
	return string(key[len(keyspacePrefix):]), true
}

// KeyspaceRecord is a keyspace as the catalog holds it.
type KeyspaceRecord struct {
	Spec       config.Keyspace       `json:"spec"`
	Partitions []placement.Partition `json:"partitions"`
	// Version is the log index of the command that last changed the keyspace.
	Version uint64 `json:"version"`
	// Created is the log index of the command that created it.
	Created uint64 `json:"created"`
	// NextPartitionID is the ID of the next partition a split creates (0 in records from
	// before splits: then the largest ID + 1).
	NextPartitionID uint32 `json:"next_partition_id,omitempty"`
	// ReplicasVersion is the log index of the last command other than a split or merge
	// (create, alter: they change replicas or what requests mean); splits and merges keep it. Nodes
	// exchange messages about the keyspace only under the same replicas version. 0 in
	// records from before it existed: then Version.
	ReplicasVersion uint64 `json:"replicas_version,omitempty"`
}

// Placement returns the record as a placement keyspace.
func (r *KeyspaceRecord) Placement() *placement.Keyspace {
	rv := r.ReplicasVersion
	if rv == 0 {
		rv = r.Version
	}
	k := &placement.Keyspace{Spec: r.Spec, Partitions: r.Partitions, Version: r.Version, NextPartitionID: r.NextPartitionID, ReplicasVersion: rv}
	return k.Index()
}

// DecodeKeyspace decodes a keyspace record's value.
func DecodeKeyspace(b []byte) (*KeyspaceRecord, error) {
	var r KeyspaceRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("metadata: keyspace record: %w", err)
	}
	if r.Spec.Name == "" || len(r.Partitions) == 0 {
		return nil, fmt.Errorf("metadata: keyspace record without a name or partitions")
	}
	return &r, nil
}

// NodeRecord is a node's membership record. Nodes of the configuration file register
// themselves (active) when they first start; a node that joins the running cluster
// (meridian server --join) is registered with its addresses and an ID the catalog gives it.
type NodeRecord struct {
	ID     uint32 `json:"id"`
	Name   string `json:"name"`
	Region string `json:"region"`
	// State: NodeJoining (bootstrapping: it takes replicas, ElasCass 3.2 phase 1),
	// NodeActive, NodeDecommissioning (its replicas move away; it takes none), NodeRemoved
	// (it holds nothing and has left; final).
	State   string `json:"state"`
	Version uint64 `json:"version"`
	// Addresses of a node that joined (the configuration file has those of the others).
	Listen     string `json:"listen,omitempty"`
	PeerListen string `json:"peer_listen,omitempty"`
	Metrics    string `json:"metrics,omitempty"`
	// Joined is the log index at which a joining node was registered (0: a founding node).
	Joined uint64 `json:"joined,omitempty"`
}

// Node returns the record as a configuration node.
func (r *NodeRecord) Node() config.Node {
	return config.Node{ID: r.ID, Name: r.Name, Region: r.Region, Listen: r.Listen, PeerListen: r.PeerListen, Metrics: r.Metrics}
}

// Node states.
const (
	NodeJoining         = "joining"
	NodeActive          = "active"
	NodeDecommissioning = "decommissioning"
	NodeRemoved         = "removed"
)

// Command is one metadata change, the payload of a log entry (RaftCommand.command). JSON,
// so a log stays readable across versions; V is its format version.
type Command struct {
	V  int    `json:"v"`
	Op string `json:"op"` // create, alter, drop, register_node
	// Name is the keyspace (alter, drop).
	Name string `json:"name,omitempty"`
	// Spec is the keyspace to create.
	Spec *config.Keyspace `json:"spec,omitempty"`
	// IfAbsent (create): an identical keyspace that already exists is not an error (the
	// import of a configuration file's keyspaces, which every node proposes).
	IfAbsent bool `json:"if_absent,omitempty"`
	// Import (create): a keyspace of a configuration file (or of an old catalog) that every
	// node proposes; only the first import of a name creates it, so a keyspace dropped
	// since is not brought back by a node that starts with the old file.
	Import bool `json:"import,omitempty"`
	// ExpectVersion (alter, drop): the change applies only if the keyspace is still at this
	// version (0: whatever its version).
	ExpectVersion uint64 `json:"expect_version,omitempty"`
	// Alter: options to set (an empty value removes the option, back to its default), and
	// new regions and replicas per region (zero values: unchanged).
	SetOptions        map[string]string `json:"set_options,omitempty"`
	Regions           []string          `json:"regions,omitempty"`
	ReplicasPerRegion int               `json:"replicas_per_region,omitempty"`
	// Node (register_node).
	Node *NodeRecord `json:"node,omitempty"`
	// Partition (split, merge): the partition to split, or the left one of the two to merge.
	Partition uint32 `json:"partition,omitempty"`
	// SplitKey (split): the first key of the new right-hand partition.
	SplitKey []byte `json:"split_key,omitempty"`
	// Move (move_start): the replica move to start (Add, Remove, Source; its ID is the
	// command's log index).
	Move *placement.Move `json:"move,omitempty"`
	// MoveID (move_finish, move_abort): the move the command is about.
	MoveID uint64 `json:"move_id,omitempty"`
	// NodeID, State and ExpectState (node_state): the node whose state changes, to what,
	// and from what (empty: any).
	NodeID      uint32 `json:"node_id,omitempty"`
	State       string `json:"state,omitempty"`
	ExpectState string `json:"expect_state,omitempty"`
	// Region, Reporter and Position (exclude_start, exclude_report): the region being
	// excluded from Partition, and the reporting region's frozen position
	// (placement.Exclusion).
	Region   string `json:"region,omitempty"`
	Reporter string `json:"reporter,omitempty"`
	Position uint64 `json:"position,omitempty"`
	// Round (exclude_report, exclude_cancel): the attempt, its exclude_start's index.
	Round uint64 `json:"round,omitempty"`
	// Stream (create_stream): the stream to create; Candidates: the nodes the proposer
	// saw alive, among which the primary is chosen (empty: every active node of the
	// keyspace). StreamName (drop_stream): the stream of keyspace Name to drop.
	Stream     *StreamSpec `json:"stream,omitempty"`
	Candidates []uint32    `json:"candidates,omitempty"`
	StreamName string      `json:"stream_name,omitempty"`
}

// Command ops.
const (
	OpCreate       = "create"
	OpAlter        = "alter"
	OpDrop         = "drop"
	OpRegisterNode = "register_node"
	OpSplit        = "split"
	OpMerge        = "merge"
	OpMoveStart    = "move_start"
	OpMoveFinish   = "move_finish"
	OpMoveAbort    = "move_abort"
	OpNodeState    = "node_state"
	// OpExcludeStart and OpExcludeReport exclude a lost region's replicas of a partition
	// (placement.Exclusion; protocols with config.ProtocolSpec.RegionExclusion).
	OpExcludeStart  = "exclude_start"
	OpExcludeReport = "exclude_report"
	OpExcludeCancel = "exclude_cancel"
)

// commandVersion is the Command format this code writes and understands.
const commandVersion = 1

// Encode encodes c.
func (c Command) Encode() []byte {
	c.V = commandVersion
	b, _ := json.Marshal(c)
	return b
}

// DecodeCommand decodes a command.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("metadata: command: %w", err)
	}
	if c.V != commandVersion {
		return c, fmt.Errorf("metadata: command format %d, this node understands %d", c.V, commandVersion)
	}
	return c, nil
}

// Outcome is a command's result (engine.Result.Output).
type Outcome struct {
	// Version is the keyspace's version after the command (create, alter), or the version
	// it had (drop, an identical create of an existing keyspace).
	Version  uint64          `json:"version"`
	Keyspace *KeyspaceRecord `json:"keyspace,omitempty"`
	// Unchanged: the command found the catalog already as it asked (an identical create).
	Unchanged bool `json:"unchanged,omitempty"`
	// Node is a node's record after register_node or node_state.
	Node *NodeRecord `json:"node,omitempty"`
	// Stream is the stream created (create_stream) or dropped (drop_stream).
	Stream *StreamRecord `json:"stream,omitempty"`
}

// DecodeOutcome decodes a command's result.
func DecodeOutcome(b []byte) (Outcome, error) {
	var o Outcome
	if len(b) == 0 {
		return o, fmt.Errorf("metadata: empty outcome")
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("metadata: outcome: %w", err)
	}
	return o, nil
}

// Catalog is the metadata state machine's state: the keyspaces and nodes. Deterministic: its
// Apply depends only on its state, the command and the log index.
type Catalog struct {
	// cluster is what validation and placement need: the topology and the nodes.
	cluster   *config.Cluster
	keyspaces map[string]*KeyspaceRecord
	nodes     map[uint32]*NodeRecord
	// imported are the names a configuration file's import has created once.
	imported map[string]bool
	// streams by "keyspace/name".
	streams map[string]*StreamRecord
}

// NewCatalog returns an empty catalog for the cluster.
func NewCatalog(cluster *config.Cluster) *Catalog {
	return &Catalog{cluster: cluster, keyspaces: map[string]*KeyspaceRecord{}, nodes: map[uint32]*NodeRecord{}, imported: map[string]bool{},
		streams: map[string]*StreamRecord{}}
}

// Keyspaces returns the catalog's keyspaces by name (not to be modified).
func (c *Catalog) Keyspaces() map[string]*KeyspaceRecord { return c.keyspaces }

// Load replaces the catalog with its records: each key's newest version only (a snapshot
// file holds every version, newest first; a storage scan only the newest).
func (c *Catalog) Load(records func(fn func(storage.Record) bool) error) error {
	ks := map[string]*KeyspaceRecord{}
	nodes := map[uint32]*NodeRecord{}
	imported := map[string]bool{}
	streams := map[string]*StreamRecord{}
	seen := map[string]bool{}
	var decodeErr error
	err := records(func(r storage.Record) bool {
		if seen[string(r.Key)] {
			return true
		}
		seen[string(r.Key)] = true
		if r.Tombstone {
			return true
		}
		switch {
		case strings.HasPrefix(string(r.Key), keyspacePrefix):
			rec, err := DecodeKeyspace(r.Value)
			if err != nil {
				decodeErr = err
				return false
			}
			ks[rec.Spec.Name] = rec
		case strings.HasPrefix(string(r.Key), streamPrefix):
			rec, err := DecodeStream(r.Value)
			if err != nil {
				decodeErr = err
				return false
			}
			streams[streamMapKey(rec.Spec.Keyspace, rec.Spec.Name)] = rec
		case strings.HasPrefix(string(r.Key), importedPrefix):
			imported[string(r.Key[len(importedPrefix):])] = true
		case strings.HasPrefix(string(r.Key), nodePrefix):
			var n NodeRecord
			if err := json.Unmarshal(r.Value, &n); err != nil {
				decodeErr = fmt.Errorf("metadata: node record: %w", err)
				return false
			}
			nodes[n.ID] = &n
		}
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return err
	}
	c.keyspaces, c.nodes, c.imported, c.streams = ks, nodes, imported, streams
	return nil
}

// Apply applies one committed command at log index. It returns the records to write (the
// catalog's new state for what changed) and the outcome, or the error the proposer gets.
func (c *Catalog) Apply(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	switch cmd.Op {
	case OpCreate:
		return c.create(index, cmd)
	case OpAlter:
		return c.alter(index, cmd)
	case OpDrop:
		return c.drop(index, cmd)
	case OpRegisterNode:
		return c.registerNode(index, cmd)
	case OpNodeState:
		return c.nodeState(index, cmd)
	case OpSplit, OpMerge:
		return c.repartition(index, cmd)
	case OpMoveStart, OpMoveFinish, OpMoveAbort:
		return c.move(index, cmd)
	case OpExcludeStart, OpExcludeReport, OpExcludeCancel:
		return c.exclude(index, cmd)
	case OpCreateStream:
		return c.createStream(index, cmd)
	case OpDropStream:
		return c.dropStream(index, cmd)
	}
	return nil, Outcome{}, errs.New(errs.Invalid, "metadata command %q is not known", cmd.Op)
}

func (c *Catalog) create(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	if cmd.Spec == nil {
		return nil, Outcome{}, errs.New(errs.Invalid, "create keyspace: no spec")
	}
	spec := cloneSpec(*cmd.Spec)
	if err := config.ValidateKeyspace(&spec, c.cluster); err != nil {
		return nil, Outcome{}, errs.New(errs.Invalid, "%v", err)
	}
	old, exists := c.keyspaces[spec.Name]
	if exists && cmd.IfAbsent && sameSpec(old.Spec, spec) {
		return nil, Outcome{Version: old.Version, Keyspace: old, Unchanged: true}, nil
	}
	if cmd.Import && c.imported[spec.Name] && !exists {
		// Imported once and dropped since: stays dropped.
		return nil, Outcome{Unchanged: true}, nil
	}
	if exists {
		return nil, Outcome{}, errs.New(errs.AlreadyExists, "keyspace %q already exists (created at metadata version %d, now at version %d)", spec.Name, old.Created, old.Version)
	}
	pk, err := placement.BuildKeyspace(spec, c.placementNodes())
	if err != nil {
		return nil, Outcome{}, errs.New(errs.Invalid, "%v", err)
	}
	rec := &KeyspaceRecord{Spec: spec, Partitions: pk.Partitions, NextPartitionID: pk.NextPartitionID, Version: index, Created: index, ReplicasVersion: index}
	c.keyspaces[spec.Name] = rec
	recs := []storage.Record{keyspaceRecord(rec)}
	if cmd.Import {
		c.imported[spec.Name] = true
		recs = append(recs, storage.Record{Keyspace: Keyspace, Key: []byte(importedPrefix + spec.Name), Value: []byte{1}})
	}
	return recs, Outcome{Version: index, Keyspace: rec}, nil
}

func (c *Catalog) alter(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	old, err := c.conditional(cmd, "alter")
	if err != nil {
		return nil, Outcome{}, err
	}
	spec := cloneSpec(old.Spec)
	for _, k := range slices.Sorted(maps.Keys(cmd.SetOptions)) {
		if v := cmd.SetOptions[k]; v == "" {
			delete(spec.Options, k)
		} else {
			spec.Options[k] = v
		}
	}
	moved := false
	if len(cmd.Regions) > 0 && !slices.Equal(cmd.Regions, spec.Regions) {
		spec.Regions, moved = slices.Clone(cmd.Regions), true
	}
	if cmd.ReplicasPerRegion > 0 && cmd.ReplicasPerRegion != spec.ReplicasPerRegion {
		spec.ReplicasPerRegion, moved = cmd.ReplicasPerRegion, true
	}
	if err := config.ValidateKeyspace(&spec, c.cluster); err != nil {
		return nil, Outcome{}, errs.New(errs.Invalid, "alter keyspace %q: %v", old.Spec.Name, err)
	}
	if was, is := config.TxnModeOf(old.Spec.Options), config.TxnModeOf(spec.Options); was != is {
		// Records of a transactional keyspace are versioned by snapshot counters, a plain
		// keyspace's by hybrid clocks: the two cannot share a partition's history.
		return nil, Outcome{}, errs.New(errs.Invalid, "alter keyspace %q: txn_mode cannot change from %s to %s once created (drop and re-create the keyspace)", old.Spec.Name, was, is)
	}
	if p, _ := config.Protocol(spec.Protocol); p.FixedOptions && !maps.Equal(old.Spec.Options, spec.Options) {
		return nil, Outcome{}, errs.New(errs.Invalid, "alter keyspace %q: the options of a %s keyspace are fixed when it is created (its replicas agree on them, and no change is ordered among them); drop and re-create the keyspace", old.Spec.Name, spec.Protocol)
	}
	if p, _ := config.Protocol(spec.Protocol); moved && !p.MovableReplicas {
		return nil, Outcome{}, errs.New(errs.Invalid,
			"alter keyspace %q: protocol %s cannot move replicas between nodes yet (data movement for it comes with elastic partitions); regions and replicas_per_region stay as they are", old.Spec.Name, spec.Protocol)
	}
	if sameSpec(old.Spec, spec) {
		return nil, Outcome{Version: old.Version, Keyspace: old, Unchanged: true}, nil
	}
	pk, err := placement.Rebuild(old.Placement(), spec, c.placementNodes())
	if err != nil {
		return nil, Outcome{}, errs.New(errs.Invalid, "alter keyspace %q: %v", old.Spec.Name, err)
	}
	// An alter changes what requests mean (options) or where keys live (replicas): clients
	// and peers on the version before it refresh.
	rec := &KeyspaceRecord{Spec: spec, Partitions: pk.Partitions, NextPartitionID: pk.NextPartitionID, Version: index, Created: old.Created, ReplicasVersion: index}
	c.keyspaces[spec.Name] = rec
	return []storage.Record{keyspaceRecord(rec)}, Outcome{Version: index, Keyspace: rec}, nil
}

// repartition splits a partition at a key or merges a partition with its right-hand
// neighbour (ElasCass 3.1). The command is the paper's four steps in one: the metadata log
// orders it against every other change of the keyspace (election and notification), and a
// node serves under the old map until it applies the new one; the change returns once every
// live node has applied it (the acknowledgements that replace the paper's gossip timers).
// Nothing else has to happen first because nothing moves: both sides keep the replicas
// (placement.Split, placement.Merge), the storage keys name no partition, and messages
// between nodes place records by key, so nodes on either map agree on every key's replicas.
// The replica-set version stays, and peers on the old and new maps keep talking.
func (c *Catalog) repartition(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	old, err := c.conditional(cmd, cmd.Op)
	if err != nil {
		return nil, Outcome{}, err
	}
	if p, _ := config.Protocol(old.Spec.Protocol); !p.Repartition {
		return nil, Outcome{}, errs.New(errs.Invalid,
			"%s keyspace %q: protocol %s does not split or merge partitions yet (its per-partition state, a Raft group or a GlobLease mastership table, needs its own split protocol)", cmd.Op, cmd.Name, old.Spec.Protocol)
	}
	if m := config.TxnModeOf(old.Spec.Options); m != config.TxnNone {
		return nil, Outcome{}, errs.New(errs.Invalid,
			"%s keyspace %q: the partitions of a transactional keyspace (txn_mode %s) do not split or merge yet (the pending transactions and per-key certification state of a partition would have to be cut at the split entry); its replicas still move", cmd.Op, cmd.Name, m)
	}
	var pk *placement.Keyspace
	if cmd.Op == OpSplit {
		pk, err = old.Placement().Split(cmd.Partition, cmd.SplitKey, index)
	} else {
		pk, err = old.Placement().Merge(cmd.Partition, index)
	}
	if err != nil {
		return nil, Outcome{}, errs.New(errs.Invalid, "%s keyspace %q: %v", cmd.Op, cmd.Name, err)
	}
	if err := pk.Check(); err != nil {
		return nil, Outcome{}, errs.New(errs.Internal, "%s keyspace %q: %v", cmd.Op, cmd.Name, err)
	}
	rec := &KeyspaceRecord{Spec: old.Spec, Partitions: pk.Partitions, NextPartitionID: pk.NextPartitionID, Version: index, Created: old.Created, ReplicasVersion: old.ReplicasVersion}
	c.keyspaces[old.Spec.Name] = rec
	return []storage.Record{keyspaceRecord(rec)}, Outcome{Version: index, Keyspace: rec}, nil
}

// move starts, finishes or aborts a replica move of one partition (ElasCass 3.2-3.3, with
// the staged protocol of docs/elasticity.md). Like a split it keeps the keyspace's replicas
// version: nodes on either side of the change keep talking, and the partition's move epoch
// (the start's index) fences coordinators that have not seen the start.
func (c *Catalog) move(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	old, err := c.conditional(cmd, cmd.Op)
	if err != nil {
		return nil, Outcome{}, err
	}
	if p, _ := config.Protocol(old.Spec.Protocol); !p.Moves {
		return nil, Outcome{}, errs.New(errs.Invalid,
			"%s keyspace %q: protocol %s does not move replicas (docs/elasticity.md says why)", cmd.Op, cmd.Name, old.Spec.Protocol)
	}
	var pk *placement.Keyspace
	switch cmd.Op {
	case OpMoveStart:
		if cmd.Move == nil {
			return nil, Outcome{}, errs.New(errs.Invalid, "move_start keyspace %q: no move", cmd.Name)
		}
		if err := c.checkMoveNodes(old, cmd.Partition, *cmd.Move); err != nil {
			return nil, Outcome{}, err
		}
		mv := *cmd.Move
		mv.ID = index
		pk, err = old.Placement().StartMove(cmd.Partition, mv)
	case OpMoveFinish:
		pk, err = old.Placement().FinishMove(cmd.Partition, cmd.MoveID)
	case OpMoveAbort:
		pk, err = old.Placement().AbortMove(cmd.Partition, cmd.MoveID)
	}
	if err != nil {
		kind := errs.Invalid
		if cmd.Op != OpMoveStart {
			kind = errs.Conflict // finished or aborted by someone else meanwhile
		}
		return nil, Outcome{}, errs.New(kind, "%s keyspace %q: %v", cmd.Op, cmd.Name, err)
	}
	if err := pk.Check(); err != nil {
		return nil, Outcome{}, errs.New(errs.Internal, "%s keyspace %q: %v", cmd.Op, cmd.Name, err)
	}
	rec := &KeyspaceRecord{Spec: old.Spec, Partitions: pk.Partitions, NextPartitionID: pk.NextPartitionID, Version: index, Created: old.Created, ReplicasVersion: old.ReplicasVersion}
	c.keyspaces[old.Spec.Name] = rec
	return []storage.Record{keyspaceRecord(rec)}, Outcome{Version: index, Keyspace: rec}, nil
}

// exclude starts the exclusion of a lost region's replicas from a partition, or records a
// region's report on it (placement.Exclusion decides once every other region has reported).
func (c *Catalog) exclude(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	old, err := c.conditional(cmd, cmd.Op)
	if err != nil {
		return nil, Outcome{}, err
	}
	if p, _ := config.Protocol(old.Spec.Protocol); !p.RegionExclusion {
		return nil, Outcome{}, errs.New(errs.Invalid, "%s keyspace %q: protocol %s does not exclude regions", cmd.Op, cmd.Name, old.Spec.Protocol)
	}
	var pk *placement.Keyspace
	switch cmd.Op {
	case OpExcludeStart:
		pk, err = old.Placement().StartExclusion(cmd.Partition, cmd.Region, index)
	case OpExcludeReport:
		pk, err = old.Placement().ReportExclusion(cmd.Partition, cmd.Region, cmd.Round, cmd.Reporter, cmd.Position)
	default:
		pk, err = old.Placement().CancelExclusion(cmd.Partition, cmd.Region, cmd.Round)
	}
	if err != nil {
		// Another region's exclusion under way, or a report on one that is not: the
		// reporter's view is stale, not its request malformed.
		return nil, Outcome{}, errs.New(errs.Conflict, "%s keyspace %q: %v", cmd.Op, cmd.Name, err)
	}
	if err := pk.Check(); err != nil {
		return nil, Outcome{}, errs.New(errs.Internal, "%s keyspace %q: %v", cmd.Op, cmd.Name, err)
	}
	before, _ := old.Placement().Partition(cmd.Partition)
	after, _ := pk.Partition(cmd.Partition)
	if before != nil && after != nil && before.Exclusion != nil && sameExclusion(before.Exclusion, after.Exclusion) {
		return nil, Outcome{Version: old.Version, Keyspace: old}, nil // repeated: nothing changes
	}
	rec := &KeyspaceRecord{Spec: old.Spec, Partitions: pk.Partitions, NextPartitionID: pk.NextPartitionID, Version: index, Created: old.Created, ReplicasVersion: old.ReplicasVersion}
	c.keyspaces[old.Spec.Name] = rec
	return []storage.Record{keyspaceRecord(rec)}, Outcome{Version: index, Keyspace: rec}, nil
}

func sameExclusion(a, b *placement.Exclusion) bool {
	return a != nil && b != nil && a.Region == b.Region && a.Round == b.Round && a.From == b.From && maps.Equal(a.Reports, b.Reports)
}

// checkMoveNodes checks a move's nodes against the membership: all known, Add and Remove
// in the same region (every ElasCass rule runs per region in Meridian, so a region keeps
// its replica count), Add accepting replicas (not leaving the cluster).
func (c *Catalog) checkMoveNodes(ks *KeyspaceRecord, partition uint32, mv placement.Move) error {
	add, ok := c.memberNode(mv.Add)
	if !ok {
		return errs.New(errs.Invalid, "move in keyspace %q: node %d (add) is not a member of the cluster", ks.Spec.Name, mv.Add)
	}
	rem, ok := c.memberNode(mv.Remove)
	if !ok {
		return errs.New(errs.Invalid, "move in keyspace %q: node %d (remove) is not a member of the cluster", ks.Spec.Name, mv.Remove)
	}
	if _, ok := c.memberNode(mv.Source); !ok {
		return errs.New(errs.Invalid, "move in keyspace %q: node %d (source) is not a member of the cluster", ks.Spec.Name, mv.Source)
	}
	if spec, _ := config.Protocol(ks.Spec.Protocol); spec.NoRejoin {
		if p, ok := ks.Placement().Partition(partition); ok && p.HasDeparted(mv.Add) {
			return errs.New(errs.Invalid, "move in keyspace %q: %s left partition %d earlier, and a %s group never takes a member back (its members are named by node; docs/elasticity.md)", ks.Spec.Name, add.Name, partition, ks.Spec.Protocol)
		}
	}
	if add.Region != rem.Region {
		return errs.New(errs.Invalid, "move in keyspace %q: %s is in region %s and %s in %s; a replica moves within its region", ks.Spec.Name, rem.Name, rem.Region, add.Name, add.Region)
	}
	if n := c.nodeRecord(mv.Add); n == nil || (n.State != NodeActive && n.State != NodeJoining) {
		return errs.New(errs.Invalid, "move in keyspace %q: %s is not active or joining and takes no replicas", ks.Spec.Name, add.Name)
	}
	return nil
}

func (c *Catalog) drop(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	old, err := c.conditional(cmd, "drop")
	if err != nil {
		return nil, Outcome{}, err
	}
	delete(c.keyspaces, old.Spec.Name)
	recs := append([]storage.Record{{Keyspace: Keyspace, Key: KeyspaceKey(old.Spec.Name), Tombstone: true}}, c.dropKeyspaceStreams(old.Spec.Name)...)
	return recs, Outcome{Version: old.Version}, nil
}

// conditional finds the keyspace a change names and checks the version it was based on.
func (c *Catalog) conditional(cmd Command, what string) (*KeyspaceRecord, error) {
	if strings.HasPrefix(cmd.Name, "_") {
		return nil, errs.New(errs.Invalid, "%s keyspace %q: system keyspaces cannot be changed", what, cmd.Name)
	}
	old, ok := c.keyspaces[cmd.Name]
	if !ok {
		return nil, errs.New(errs.NotFound, "%s keyspace %q: no such keyspace", what, cmd.Name)
	}
	if cmd.ExpectVersion != 0 && cmd.ExpectVersion != old.Version {
		return nil, errs.New(errs.Conflict, "%s keyspace %q: it changed concurrently (it is at version %d; this change was based on version %d); describe it and retry",
			what, cmd.Name, old.Version, cmd.ExpectVersion)
	}
	return old, nil
}

func (c *Catalog) registerNode(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	n := cmd.Node
	if n == nil || n.Name == "" {
		return nil, Outcome{}, errs.New(errs.Invalid, "register node: no node")
	}
	if n.ID == 0 {
		return c.joinNode(index, n)
	}
	if _, ok := c.cluster.NodeByID(n.ID); !ok {
		if old, ok := c.nodes[n.ID]; ok && old.Name == n.Name {
			// A node that joined earlier, starting again: its record stands.
			return nil, Outcome{Version: old.Version, Unchanged: true, Node: old}, nil
		}
		return nil, Outcome{}, errs.New(errs.Invalid, "register node: node %d is not in the cluster configuration and has not joined", n.ID)
	}
	if old, ok := c.nodes[n.ID]; ok && old.Name == n.Name && old.Region == n.Region {
		// Registration is once: a restart does not undo a decommission.
		return nil, Outcome{Version: old.Version, Unchanged: true, Node: old}, nil
	}
	rec := &NodeRecord{ID: n.ID, Name: n.Name, Region: n.Region, State: NodeActive, Version: index}
	return c.putNode(rec), Outcome{Version: index, Node: rec}, nil
}

// joinNode registers a node that joins the running cluster: a new ID (above every founding
// and registered one), a name and addresses no member uses, a region of the topology. It
// starts as joining: the placement driver gives it replicas (ElasCass 3.2).
func (c *Catalog) joinNode(index uint64, n *NodeRecord) ([]storage.Record, Outcome, error) {
	if err := config.ValidateNodeName(n.Name); err != nil {
		return nil, Outcome{}, errs.New(errs.Invalid, "join: %v", err)
	}
	if c.cluster.Topology != nil && !c.cluster.Topology.HasRegion(n.Region) {
		return nil, Outcome{}, errs.New(errs.Invalid, "join: region %q is not a region of the cluster's topology %v", n.Region, c.cluster.Topology.Regions)
	}
	if n.Listen == "" || n.PeerListen == "" {
		return nil, Outcome{}, errs.New(errs.Invalid, "join: node %s needs a listen and a peer_listen address", n.Name)
	}
	next := uint32(0)
	for _, m := range c.Members() {
		next = max(next, m.ID)
		if m.Name == n.Name {
			if rec, ok := c.nodes[m.ID]; ok && rec.Joined != 0 && rec.Listen == n.Listen && rec.PeerListen == n.PeerListen && rec.Region == n.Region {
				// The same node asking again (its first answer was lost): the same record.
				return nil, Outcome{Version: rec.Version, Unchanged: true, Node: rec}, nil
			}
			return nil, Outcome{}, errs.New(errs.AlreadyExists, "join: a node named %s is already a member (id %d)", n.Name, m.ID)
		}
		for _, a := range []string{n.Listen, n.PeerListen, n.Metrics} {
			if a != "" && (a == m.Listen || a == m.PeerListen || a == m.Metrics) {
				return nil, Outcome{}, errs.New(errs.AlreadyExists, "join: address %s is already used by node %s", a, m.Name)
			}
		}
	}
	for id := range c.nodes {
		next = max(next, id) // removed nodes' IDs are never given again
	}
	rec := &NodeRecord{ID: next + 1, Name: n.Name, Region: n.Region, State: NodeJoining, Version: index,
		Listen: n.Listen, PeerListen: n.PeerListen, Metrics: n.Metrics, Joined: index}
	return c.putNode(rec), Outcome{Version: index, Node: rec}, nil
}

// nodeState changes a node's state: joining → active (its bootstrap's first phase is done),
// active ⇄ decommissioning, decommissioning → removed once it holds no replica. A metadata
// voter cannot be decommissioned (the voters are configuration).
func (c *Catalog) nodeState(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	old := c.nodeRecord(cmd.NodeID)
	if old == nil {
		return nil, Outcome{}, errs.New(errs.NotFound, "node %d is not a member of the cluster", cmd.NodeID)
	}
	if cmd.ExpectState != "" && old.State != cmd.ExpectState {
		return nil, Outcome{}, errs.New(errs.Conflict, "node %s is %s, not %s", old.Name, old.State, cmd.ExpectState)
	}
	if old.State == cmd.State {
		return nil, Outcome{Version: old.Version, Unchanged: true, Node: old}, nil
	}
	ok := false
	switch cmd.State {
	case NodeActive:
		ok = old.State == NodeJoining || old.State == NodeDecommissioning
	case NodeDecommissioning:
		ok = old.State == NodeActive || old.State == NodeJoining
		if ok && slices.Contains(c.cluster.MetadataVoters(), old.ID) {
			return nil, Outcome{}, errs.New(errs.Invalid, "node %s is a voter of the cluster metadata (metadata.voters); it cannot be decommissioned", old.Name)
		}
	case NodeRemoved:
		ok = old.State == NodeDecommissioning
		if ok {
			if held := c.heldBy(old.ID); held != "" {
				return nil, Outcome{}, errs.New(errs.Conflict, "node %s still holds %s; it leaves once it holds nothing", old.Name, held)
			}
		}
	default:
		return nil, Outcome{}, errs.New(errs.Invalid, "node state %q is not one of joining, active, decommissioning, removed", cmd.State)
	}
	if !ok {
		return nil, Outcome{}, errs.New(errs.Invalid, "node %s is %s and cannot become %s", old.Name, old.State, cmd.State)
	}
	rec := *old
	rec.State, rec.Version = cmd.State, index
	return c.putNode(&rec), Outcome{Version: index, Node: &rec}, nil
}

// heldBy describes a partition node id is a member of (replica or move target), or "".
func (c *Catalog) heldBy(id uint32) string {
	for _, name := range slices.Sorted(maps.Keys(c.keyspaces)) {
		for _, p := range c.keyspaces[name].Partitions {
			if p.HasMember(id) {
				return fmt.Sprintf("partition %d of keyspace %s", p.ID, name)
			}
		}
	}
	return ""
}

// nodeRecord returns a member's record; a founding node that has not registered yet gets an
// active one.
func (c *Catalog) nodeRecord(id uint32) *NodeRecord {
	if r, ok := c.nodes[id]; ok {
		return r
	}
	if n, ok := c.cluster.NodeByID(id); ok {
		return &NodeRecord{ID: n.ID, Name: n.Name, Region: n.Region, State: NodeActive}
	}
	return nil
}

func (c *Catalog) putNode(rec *NodeRecord) []storage.Record {
	c.nodes[rec.ID] = rec
	b, _ := json.Marshal(rec)
	return []storage.Record{{Keyspace: Keyspace, Key: NodeKey(rec.ID), Value: b}}
}

// NodeKey is the key of a node's record.
func NodeKey(id uint32) []byte { return []byte(fmt.Sprintf("%s%010d", nodePrefix, id)) }

// IsNodeKey reports whether key is a node record's key.
func IsNodeKey(key []byte) bool { return strings.HasPrefix(string(key), nodePrefix) }

// DecodeNode decodes a node record's value.
func DecodeNode(b []byte) (*NodeRecord, error) {
	var r NodeRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("metadata: node record: %w", err)
	}
	return &r, nil
}

// Members are the cluster's nodes that have not been removed: the configuration's, with the
// records' states, and those that joined, by ID.
func (c *Catalog) Members() []MemberInfo {
	return MembersOf(c.cluster.Nodes, c.nodes)
}

// MemberInfo is a member with its state.
type MemberInfo struct {
	config.Node
	State string
}

// MembersOf merges the founding nodes with the node records (by ID): removed nodes are left
// out, a founding node without a record is active.
func MembersOf(founding []config.Node, records map[uint32]*NodeRecord) []MemberInfo {
	var out []MemberInfo
	for _, n := range founding {
		st := NodeActive
		if r, ok := records[n.ID]; ok {
			st = r.State
		}
		if st != NodeRemoved {
			out = append(out, MemberInfo{Node: n, State: st})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(records)) {
		r := records[id]
		if r.Joined == 0 || r.State == NodeRemoved {
			continue
		}
		out = append(out, MemberInfo{Node: r.Node(), State: r.State})
	}
	slices.SortFunc(out, func(a, b MemberInfo) int { return int(a.ID) - int(b.ID) })
	return out
}

// placementNodes are the nodes new keyspaces are placed on: the active members.
func (c *Catalog) placementNodes() []config.Node {
	var out []config.Node
	for _, m := range c.Members() {
		if m.State == NodeActive {
			out = append(out, m.Node)
		}
	}
	return out
}

// memberNode returns a member that has not been removed.
func (c *Catalog) memberNode(id uint32) (config.Node, bool) {
	for _, m := range c.Members() {
		if m.ID == id {
			return m.Node, true
		}
	}
	return config.Node{}, false
}

// Nodes returns the membership records by node ID.
func (c *Catalog) Nodes() map[uint32]*NodeRecord { return c.nodes }

func keyspaceRecord(rec *KeyspaceRecord) storage.Record {
	b, _ := json.Marshal(rec)
	return storage.Record{Keyspace: Keyspace, Key: KeyspaceKey(rec.Spec.Name), Value: b}
}

func cloneSpec(s config.Keyspace) config.Keyspace {
	s.Regions = slices.Clone(s.Regions)
	s.Options = maps.Clone(s.Options)
	if s.Options == nil {
		s.Options = map[string]string{}
	}
	return s
}

// sameSpec compares two validated specs.
func sameSpec(a, b config.Keyspace) bool {
	if len(a.Options) == 0 && len(b.Options) == 0 {
		a.Options, b.Options = nil, nil
	}
	return reflect.DeepEqual(a, b)
}
