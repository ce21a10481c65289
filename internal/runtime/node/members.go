package node

import (
	"context"
	"slices"
	"strings"
	"time"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/metadata"
	"meridian/internal/placement"
	"meridian/internal/runtime/transport"
)

// The membership: the configuration file's nodes (the cluster's founders) and the nodes that
// joined it since (meridian server --join), each with the state the cluster metadata gives it
// (joining, active, decommissioning; removed nodes are gone). Every node applies the same
// node records, so every node comes to the same membership; until it has, a peer it does not
// know is refused like any stranger (the peer retries).

// leaveGrace is how long a removed node stays reachable after this node learns of its
// removal: long enough for it to learn of its own removal from the metadata group (whose log
// it follows until the group drops it) and stop.
const leaveGrace = 30 * time.Second

// membership is one version of the node's view of the cluster's members. Immutable.
type membership struct {
	founding []config.Node
	records  map[uint32]*metadata.NodeRecord
	// members are the nodes that have not been removed; leaving, removed nodes still
	// reachable until their grace ends; reach, both (what the transport, the peer checks
	// and the metadata group's learners follow); byID indexes reach.
	members []metadata.MemberInfo
	leaving map[uint32]leavingNode
	reach   []config.Node
	byID    map[uint32]metadata.MemberInfo
}

type leavingNode struct {
	node  config.Node
	until time.Time
}

func newMembership(founding []config.Node, records map[uint32]*metadata.NodeRecord) *membership {
	return buildMembership(founding, records, nil)
}

func buildMembership(founding []config.Node, records map[uint32]*metadata.NodeRecord, leaving map[uint32]leavingNode) *membership {
	m := &membership{founding: founding, records: records, leaving: leaving, byID: map[uint32]metadata.MemberInfo{}}
	m.members = metadata.MembersOf(founding, records)
	for _, mi := range m.members {
		m.byID[mi.ID] = mi
		m.reach = append(m.reach, mi.Node)
	}
	for _, id := range sortedIDs(leaving) {
		m.byID[id] = metadata.MemberInfo{Node: leaving[id].node, State: metadata.NodeRemoved}
		m.reach = append(m.reach, leaving[id].node)
	}
	slices.SortFunc(m.reach, func(a, b config.Node) int { return int(a.ID) - int(b.ID) })
	return m
}

// with returns the membership with rec applied at now: a node removed by it stays reachable
// for leaveGrace.
func (m *membership) with(rec *metadata.NodeRecord, now time.Time) *membership {
	records := make(map[uint32]*metadata.NodeRecord, len(m.records)+1)
	for id, r := range m.records {
		records[id] = r
	}
	leaving := make(map[uint32]leavingNode, len(m.leaving)+1)
	for id, l := range m.leaving {
		leaving[id] = l
	}
	if was, ok := m.byID[rec.ID]; ok && rec.State == metadata.NodeRemoved && was.State != metadata.NodeRemoved {
		leaving[rec.ID] = leavingNode{node: was.Node, until: now.Add(leaveGrace)}
	}
	records[rec.ID] = rec
	return buildMembership(m.founding, records, leaving)
}

// expired returns the membership without the leaving nodes whose grace ended by now, or nil
// when none did.
func (m *membership) expired(now time.Time) *membership {
	var gone []uint32
	for id, l := range m.leaving {
		if now.After(l.until) {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	leaving := make(map[uint32]leavingNode, len(m.leaving))
	for id, l := range m.leaving {
		if !slices.Contains(gone, id) {
			leaving[id] = l
		}
	}
	return buildMembership(m.founding, m.records, leaving)
}

// nodes are the reachable members as configuration nodes, by ID.
func (m *membership) nodes() []config.Node { return slices.Clone(m.reach) }

// peerNodes are the reachable members as the transport knows them.
func (m *membership) peerNodes() []transport.PeerNode {
	out := make([]transport.PeerNode, 0, len(m.reach))
	for _, nd := range m.reach {
		out = append(out, transport.PeerNode{ID: nd.ID, Name: nd.Name, Addr: nd.PeerListen})
	}
	return out
}

// systemKeyspace is the metadata group's placement under this membership: the configured
// voters, and every other member a learner (a node that joined is added, one removed drops
// out, and the group's membership follows, raft/membership.go).
func (m *membership) systemKeyspace(c *config.Cluster) *placement.Keyspace {
	ks := metadata.SystemKeyspace(c)
	p := &ks.Partitions[0]
	var learners []uint32
	for _, nd := range m.reach {
		if !slices.Contains(p.Replicas, nd.ID) {
			learners = append(learners, nd.ID)
		}
	}
	p.Learners = learners
	return ks.Index()
}

// Members returns the cluster's members with their states, by ID.
func (n *Node) Members() []metadata.MemberInfo { return n.memb.Load().members }

// Member returns a member (or a node removed moments ago) by ID.
func (n *Node) Member(id uint32) (metadata.MemberInfo, bool) {
	mi, ok := n.memb.Load().byID[id]
	return mi, ok
}

// MemberName names node id ("node-ID" when it is not a member).
func (n *Node) MemberName(id uint32) string {
	if mi, ok := n.Member(id); ok {
		return mi.Name
	}
	if nd, ok := n.opts.Cluster.NodeByID(id); ok {
		return nd.Name
	}
	return "node-" + itoa(id)
}

func itoa(v uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// expireLeaving drops the removed nodes whose grace has ended (the committer calls it with
// every batch, before it installs anything).
func (n *Node) expireLeaving() {
	m := n.memb.Load().expired(time.Now())
	if m == nil {
		return
	}
	n.pmap.Store(n.setMembership(m, n.pmap.Load()))
}

// setMembership installs a new membership: the placement map carries it to the engines, the
// metadata group's placement follows it, and the transport learns the new peers.
func (n *Node) setMembership(m *membership, pm *placement.Map) *placement.Map {
	n.memb.Store(m)
	pm = pm.With(m.systemKeyspace(n.opts.Cluster))
	pm.Nodes = m.nodes()
	if t, ok := n.tr.(interface {
		SetMembers([]transport.PeerNode) error
	}); ok {
		if err := t.SetMembers(m.peerNodes()); err != nil {
			n.log.Error("could not update the transport's membership", "err", err)
		}
	}
	return pm
}

// noteOwnState reacts to this node's own record: a node that has been removed (it was
// decommissioned and holds nothing) says so; the server stops it (Removed).
func (n *Node) noteOwnState(rec *metadata.NodeRecord) {
	if rec.ID != n.self.ID {
		return
	}
	if rec.State == metadata.NodeRemoved {
		n.log.Info("this node has been decommissioned: it holds no replica and has left the cluster")
		n.removedOnce.Do(func() { close(n.removed) })
	}
}

// Removed is closed once this node has been decommissioned and removed from the cluster.
func (n *Node) Removed() <-chan struct{} { return n.removed }

// JoinCluster registers a node that joins the running cluster (meridian server --join) and
// waits until every live member has applied its record, so that they accept its streams. It
// returns the node's record: its ID, and the state joining.
func (n *Node) JoinCluster(ctx context.Context, cluster string, nd config.Node, timeout time.Duration) (*metadata.NodeRecord, error) {
	if cluster != n.opts.Cluster.Name {
		return nil, errs.New(errs.Invalid, "join: this is cluster %q, the joining node is configured for %q", n.opts.Cluster.Name, cluster)
	}
	if err := config.ValidateNodeName(nd.Name); err != nil {
		return nil, errs.New(errs.Invalid, "join: %v", err)
	}
	if _, ok := n.opts.Cluster.Node(nd.Name); ok {
		return nil, errs.New(errs.Invalid, "join: %s is in the configuration file: start it with --node %s, without --join", nd.Name, nd.Name)
	}
	cmd := metadata.Command{Op: metadata.OpRegisterNode, Node: &metadata.NodeRecord{Name: nd.Name, Region: nd.Region,
		Listen: nd.Listen, PeerListen: nd.PeerListen, Metrics: nd.Metrics}}
	out, _, err := n.metaCommand(ctx, cmd, timeout, true)
	if err != nil {
		return nil, err
	}
	if out.Node == nil {
		return nil, errs.New(errs.Internal, "join: the metadata returned no node record")
	}
	return out.Node, nil
}

// SetNodeState changes a member's state through the cluster metadata (decommission, or its
// cancellation), waiting until every live member has applied it.
func (n *Node) SetNodeState(ctx context.Context, name, state string, timeout time.Duration) (*metadata.NodeRecord, uint64, error) {
	var id uint32
	for _, m := range n.Members() {
		if m.Name == name {
			id = m.ID
		}
	}
	if id == 0 {
		return nil, 0, errs.New(errs.NotFound, "no member named %q (admin status lists them)", name)
	}
	switch state {
	case metadata.NodeDecommissioning, metadata.NodeActive:
	default:
		return nil, 0, errs.New(errs.Invalid, "node state %q: set decommissioning (to move its replicas away and remove it) or active (to cancel that)", state)
	}
	out, _, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpNodeState, NodeID: id, State: state}, timeout, true)
	if err != nil {
		return nil, 0, err
	}
	return out.Node, out.Version, nil
}

// MoveReplica starts moving the replica of a partition from one node to another of its
// region (source: the replica the new one copies from; 0: the nearest other replica, or the
// leaving one when it is the only one of the region).
func (n *Node) MoveReplica(ctx context.Context, keyspace string, partition uint32, from, to, source string, timeout time.Duration) (uint64, error) {
	ks, ok := n.pmap.Load().Keyspace(keyspace)
	if !ok || strings.HasPrefix(keyspace, "_") {
		return 0, errs.New(errs.NotFound, "move: no keyspace %q", keyspace)
	}
	p, ok := ks.Partition(partition)
	if !ok {
		return 0, errs.New(errs.NotFound, "move: keyspace %q has no partition %d (describe-keyspace lists them)", keyspace, partition)
	}
	byName := map[string]uint32{}
	for _, m := range n.Members() {
		byName[m.Name] = m.ID
	}
	mv := placement.Move{Add: byName[to], Remove: byName[from], Source: byName[source]}
	if mv.Add == 0 || mv.Remove == 0 || (source != "" && mv.Source == 0) {
		return 0, errs.New(errs.NotFound, "move: unknown node (from %q, to %q, source %q)", from, to, source)
	}
	if mv.Source == 0 {
		mv.Source = n.nearestSource(p, mv.Remove)
	}
	out, _, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpMoveStart, Name: keyspace, Partition: partition, Move: &mv}, timeout, false)
	if err != nil {
		return 0, err
	}
	q, _ := out.Keyspace.Placement().Partition(partition)
	if q == nil || q.Move == nil {
		return 0, errs.New(errs.Internal, "move: the metadata shows no move of partition %d", partition)
	}
	return q.Move.ID, nil
}

// nearestSource picks the replica a new replica in remove's region copies from: the leaving
// replica itself (it is in the region and holds everything), unless it is down, then the
// nearest other replica.
func (n *Node) nearestSource(p *placement.Partition, remove uint32) uint32 {
	if n.peerAlive(remove) {
		return remove
	}
	region := ""
	if m, ok := n.Member(remove); ok {
		region = m.Region
	}
	best, bestRTT := uint32(0), time.Duration(1<<62)
	for _, r := range p.Replicas {
		if r == remove || !n.peerAlive(r) {
			continue
		}
		m, _ := n.Member(r)
		rtt := time.Duration(0)
		if t := n.opts.Cluster.Topology; t != nil && m.Region != region && t.HasRegion(m.Region) && t.HasRegion(region) {
			rtt = n.opts.Cluster.Topology.RTT(region, m.Region)
		}
		if rtt < bestRTT {
			best, bestRTT = r, rtt
		}
	}
	if best == 0 {
		return remove
	}
	return best
}
