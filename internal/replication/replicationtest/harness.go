// Package replicationtest drives the engines of a small cluster in one goroutine on virtual
// time, for the protocols' unit and trace tests (in the style of etcd raft's rafttest): each
// node is an engine.Host, messages wait in a queue that tests deliver, drop or reorder
// explicitly, and RunInteractions runs datadriven trace scripts against it.
package replicationtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/topology"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Harness runs several nodes' engines in one goroutine on virtual time, with messages held in
// a queue that tests deliver, drop or reorder explicitly. Heartbeats are delivered at once
// unless the link is cut, so traces show only protocol messages.
type Harness struct {
	t     testing.TB
	epoch time.Time
	// Now is the virtual time.
	Now     time.Time
	Cluster *config.Cluster
	// Hosts are the nodes' engines, by node ID.
	Hosts  map[uint32]*engine.Host
	Stores map[uint32]*storage.Engine
	// IDs are the node IDs in order.
	IDs []uint32
	// Queue holds the messages sent and not yet delivered or dropped, in send order.
	Queue   []*peerpb.Envelope
	replies []NodeResult
	// Cut links lose every message (from, to).
	Cut     map[[2]uint32]bool
	nextReq uint64
}

// NodeResult is a reply and the node that gave it.
type NodeResult struct {
	Node uint32
	engine.Result
}

var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// New builds a cluster with one node per region of an equidistant topology (RTT 100ms) and a
// keyspace "ks" of protocol (which must be registered: import its package) replicated once
// per region with the given partitions and options.
func New(t testing.TB, protocol string, regions, partitions int, options map[string]string) *Harness {
	t.Helper()
	return NewWithPlacement(t, protocol, regions, partitions, options, nil)
}

// NewWithPlacement is New with the built placement passed through adjust (when not nil)
// before any node installs it: a test that needs nodes outside a partition from the start
// (a Raft node removed from a group never joins it again, config.ProtocolSpec.NoRejoin).
func NewWithPlacement(t testing.TB, protocol string, regions, partitions int, options map[string]string, adjust func(*placement.Map) *placement.Map) *Harness {
	t.Helper()
	var names []string
	for i := range regions {
		names = append(names, fmt.Sprintf("r%d", i+1))
	}
	topo := topology.Equidistant("test", names, 100, 0.5)
	c := &config.Cluster{Name: "test", Topology: topo, TopologyRef: "test"}
	for i, r := range names {
		c.Nodes = append(c.Nodes, config.Node{ID: uint32(i + 1), Name: fmt.Sprintf("n%d", i+1), Region: r, Listen: fmt.Sprintf("127.0.0.1:%d", 30001+i), PeerListen: fmt.Sprintf("127.0.0.1:%d", 31001+i)})
	}
	if options == nil {
		options = map[string]string{}
	}
	// Options named network.* configure the cluster's network section (large reads).
	ksOptions := map[string]string{}
	for k, v := range options {
		switch k {
		case "network.node_bandwidth":
			c.Network.NodeBandwidth = v
		case "network.wan_bandwidth":
			c.Network.WANBandwidth = v
		default:
			ksOptions[k] = v
		}
	}
	c.Keyspaces = []config.Keyspace{{Name: "ks", Protocol: protocol, ReplicasPerRegion: 1, Partitions: partitions, Options: ksOptions}}
	if err := c.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	pm, err := placement.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	if adjust != nil {
		pm = adjust(pm)
	}
	if _, ok := engine.Lookup(protocol); !ok {
		t.Fatalf("protocol %q is not registered (registered: %v)", protocol, engine.Names())
	}
	h := &Harness{t: t, epoch: testEpoch, Now: testEpoch, Cluster: c, Hosts: map[uint32]*engine.Host{}, Stores: map[uint32]*storage.Engine{}, Cut: map[[2]uint32]bool{}}
	for _, n := range c.Nodes {
		e, err := storage.Open("/data", storage.Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		host := engine.NewHost(engine.Config{NodeID: n.ID, Nodes: c.Nodes, Topology: topo, Limits: c.Limits, AntiEntropyInterval: c.AntiEntropy.Interval, RandSeed: uint64(n.ID), Network: c.Network}, e, nil)
		host.SetPlacement(pm)
		h.Hosts[n.ID] = host
		h.Stores[n.ID] = e
		h.IDs = append(h.IDs, n.ID)
	}
	return h
}

// Restart replaces node's engines with new ones built on the same storage (a restart after
// a crash that lost nothing unsynced: the harness syncs every write), with the placement
// the node had. Messages queued for the node are kept.
func (h *Harness) Restart(node uint32) {
	old := h.Hosts[node]
	var nd config.Node
	for _, n := range h.Cluster.Nodes {
		if n.ID == node {
			nd = n
		}
	}
	host := engine.NewHost(engine.Config{NodeID: nd.ID, Nodes: h.Cluster.Nodes, Topology: h.Cluster.Topology, Limits: h.Cluster.Limits,
		AntiEntropyInterval: h.Cluster.AntiEntropy.Interval, RandSeed: uint64(nd.ID) + uint64(h.Now.UnixNano()), Network: h.Cluster.Network}, h.Stores[node], nil)
	host.SetPlacement(old.Placement())
	h.Hosts[node] = host
	h.Flush(node)
}

// Placement returns the placement map node has.
func (h *Harness) Placement(node uint32) *placement.Map { return h.Hosts[node].Placement() }

// Engine returns node's engine of protocol.
func (h *Harness) Engine(node uint32, protocol string) engine.Engine {
	e, ok := h.Hosts[node].Engine(protocol)
	if !ok {
		h.t.Fatalf("node %d has no %s engine", node, protocol)
	}
	return e
}

// SetPlacement installs m at every node.
func (h *Harness) SetPlacement(m *placement.Map) {
	for _, id := range h.IDs {
		h.Hosts[id].SetPlacement(m)
	}
}

// Propose starts req at node (assigning its ID and, if unset, a 5 s deadline), takes the
// node's output and returns the request ID.
func (h *Harness) Propose(node uint32, req engine.Request) uint64 {
	h.nextReq++
	req.ID = h.nextReq
	if req.Deadline.IsZero() {
		req.Deadline = h.Now.Add(5 * time.Second)
	}
	h.Hosts[node].Propose(h.Now, req)
	h.Flush(node)
	return req.ID
}

// Flush takes the node's Ready: writes go to storage (synchronously, before anything else,
// as the Ready contract demands), messages to the queue, replies to the result list, and
// anti-entropy jobs run inline.
func (h *Harness) Flush(node uint32) {
	for range 100 {
		core := h.Hosts[node]
		if !core.HasReady() {
			return
		}
		rd := core.Ready()
		if len(rd.Writes) > 0 || len(rd.Raw) > 0 {
			if err := h.Stores[node].ApplyBatch(rd.Writes, rd.Raw, true); err != nil {
				h.t.Fatalf("apply: %v", err)
			}
		}
		for _, in := range rd.Ingests {
			if err := h.Stores[node].ReplaceSpan(in.Span, in.File, in.Before, in.After); err != nil {
				h.t.Fatalf("install snapshot: %v", err)
			}
		}
		h.Queue = append(h.Queue, rd.Messages...)
		for _, r := range rd.Replies {
			h.replies = append(h.replies, NodeResult{node, r})
		}
		for _, r := range rd.Reads {
			res := engine.RunRead(r, h.Stores[node], h.Now)
			if res.Forward != nil {
				h.Queue = append(h.Queue, res.Forward)
				continue
			}
			h.replies = append(h.replies, NodeResult{node, res})
		}
		for _, j := range rd.Jobs {
			envs, err := j.Run(h.Stores[node], node)
			if err != nil {
				h.t.Fatalf("job: %v", err)
			}
			// A job's notes to its own engine are queued like messages (delivered in order).
			h.Queue = append(h.Queue, envs...)
		}
	}
	h.t.Fatalf("node %d keeps producing output", node)
}

// Deliver delivers (in queue order) the queued messages matching f, once each, and returns
// them. Messages produced by the deliveries are queued, not delivered.
func (h *Harness) Deliver(f func(*peerpb.Envelope) bool) []*peerpb.Envelope {
	var keep, done []*peerpb.Envelope
	cur := h.Queue
	h.Queue = nil
	for _, env := range cur {
		if !f(env) {
			keep = append(keep, env)
			continue
		}
		done = append(done, env)
	}
	h.Queue = keep
	for _, env := range done {
		if h.Cut[[2]uint32{env.From, env.To}] {
			continue
		}
		h.Hosts[env.To].Step(h.Now, env)
		h.Flush(env.To)
	}
	return done
}

// Drop removes the queued messages matching f and returns them.
func (h *Harness) Drop(f func(*peerpb.Envelope) bool) []*peerpb.Envelope {
	var keep, dropped []*peerpb.Envelope
	for _, env := range h.Queue {
		if f(env) {
			dropped = append(dropped, env)
		} else {
			keep = append(keep, env)
		}
	}
	h.Queue = keep
	return dropped
}

// Stabilize delivers everything until the queue is empty (bounded).
func (h *Harness) Stabilize() int {
	n := 0
	for round := 0; round < 1000 && len(h.Queue) > 0; round++ {
		n += len(h.Deliver(func(*peerpb.Envelope) bool { return true }))
	}
	if len(h.Queue) > 0 {
		h.t.Fatalf("stabilize: messages still queued after 1000 rounds")
	}
	return n
}

// Tick advances virtual time by d in steps of at most 10ms, ticking every core, and delivers
// heartbeats at once (unless the link is cut).
func (h *Harness) Tick(d time.Duration) {
	end := h.Now.Add(d)
	for h.Now.Before(end) {
		step := min(10*time.Millisecond, end.Sub(h.Now))
		h.Now = h.Now.Add(step)
		for _, id := range h.IDs {
			h.Hosts[id].Tick(h.Now)
			h.Flush(id)
		}
		h.Deliver(isHeartbeat)
	}
}

// isHeartbeat: heartbeats are delivered at once by Tick.
func isHeartbeat(env *peerpb.Envelope) bool {
	_, ok := env.Msg.(*peerpb.Envelope_Heartbeat)
	return ok
}

// TakeReplies returns and clears the replies so far.
func (h *Harness) TakeReplies() []NodeResult {
	r := h.replies
	h.replies = nil
	return r
}

// Reply returns the reply to request id, if it came.
func (h *Harness) Reply(id uint64) (engine.Result, bool) {
	for _, r := range h.replies {
		if r.ID == id {
			return r.Result, true
		}
	}
	return engine.Result{}, false
}

// Newest returns each node's newest stored version of key in keyspace ks.
func (h *Harness) Newest(key string) map[uint32]storage.Record {
	out := map[uint32]storage.Record{}
	for _, id := range h.IDs {
		rec, found, err := h.Stores[id].Get("ks", []byte(key))
		if err != nil {
			h.t.Fatal(err)
		}
		if found {
			out[id] = rec
		}
	}
	return out
}

func (h *Harness) fmtVersion(v hlc.Version) string {
	if v.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%d.%d@%d", (v.WallNanos-h.epoch.UnixNano())/int64(time.Millisecond), v.Logical, v.NodeID)
}

func (h *Harness) fmtEnv(env *peerpb.Envelope) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d->%d ", env.From, env.To)
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_Write:
		r := m.Write.Record
		val := string(r.Value)
		if r.Tombstone {
			val = "<tombstone>"
		}
		fmt.Fprintf(&b, "write id=%d %s=%s v=%s", m.Write.RequestId, r.Key, val, h.fmtVersion(versionOf(r.Version)))
	case *peerpb.Envelope_WriteAck:
		fmt.Fprintf(&b, "write_ack id=%d", m.WriteAck.RequestId)
	case *peerpb.Envelope_Read:
		fmt.Fprintf(&b, "read id=%d %s", m.Read.RequestId, m.Read.Key)
	case *peerpb.Envelope_ReadReply:
		if m.ReadReply.ValueOmitted {
			fmt.Fprintf(&b, "read_reply id=%d <%d bytes omitted> v=%s", m.ReadReply.RequestId, m.ReadReply.ValueSize, h.fmtVersion(versionOf(m.ReadReply.Record.Version)))
		} else if m.ReadReply.Found {
			fmt.Fprintf(&b, "read_reply id=%d %s v=%s", m.ReadReply.RequestId, m.ReadReply.Record.Value, h.fmtVersion(versionOf(m.ReadReply.Record.Version)))
		} else {
			fmt.Fprintf(&b, "read_reply id=%d not-found", m.ReadReply.RequestId)
		}
	case *peerpb.Envelope_ReadChunk:
		fmt.Fprintf(&b, "read_chunk id=%d %s v=%s [%d,+%d)", m.ReadChunk.RequestId, m.ReadChunk.Key, h.fmtVersion(versionOf(m.ReadChunk.Version)), m.ReadChunk.Offset, m.ReadChunk.Length)
	case *peerpb.Envelope_ReadChunkReply:
		if m.ReadChunkReply.Missing {
			fmt.Fprintf(&b, "read_chunk_reply id=%d at=%d missing", m.ReadChunkReply.RequestId, m.ReadChunkReply.Offset)
		} else {
			fmt.Fprintf(&b, "read_chunk_reply id=%d at=%d %d bytes", m.ReadChunkReply.RequestId, m.ReadChunkReply.Offset, len(m.ReadChunkReply.Data))
		}
	case *peerpb.Envelope_TransferReport:
		fmt.Fprintf(&b, "transfer_report transfers=%d", len(m.TransferReport.Transfers))
	case *peerpb.Envelope_Scan:
		fmt.Fprintf(&b, "scan id=%d p=%d [%q,%q) limit=%d", m.Scan.RequestId, m.Scan.Partition, m.Scan.Start, m.Scan.End, m.Scan.Limit)
		if m.Scan.Window > 1 {
			fmt.Fprintf(&b, " window=%d", m.Scan.Window)
		}
		if m.Scan.Reverse {
			b.WriteString(" reverse")
		}
	case *peerpb.Envelope_ScanReply:
		fmt.Fprintf(&b, "scan_reply id=%d records=%d truncated=%v", m.ScanReply.RequestId, len(m.ScanReply.Records), m.ScanReply.Truncated)
		if m.ScanReply.Reverse {
			b.WriteString(" reverse")
		}
		if m.ScanReply.Streaming || m.ScanReply.Seq > 0 {
			fmt.Fprintf(&b, " seq=%d streaming=%v", m.ScanReply.Seq, m.ScanReply.Streaming)
		}
	case *peerpb.Envelope_ScanCredit:
		fmt.Fprintf(&b, "scan_credit id=%d through=%d [%q,%q) cancel=%v", m.ScanCredit.RequestId, m.ScanCredit.Through, m.ScanCredit.Start, m.ScanCredit.End, m.ScanCredit.Cancel)
	case *peerpb.Envelope_AeDigest:
		fmt.Fprintf(&b, "ae_digest p=%d", m.AeDigest.Partition)
	case *peerpb.Envelope_AeKeys:
		fmt.Fprintf(&b, "ae_keys p=%d buckets=%d entries=%d", m.AeKeys.Partition, len(m.AeKeys.Buckets), len(m.AeKeys.Entries))
	case *peerpb.Envelope_AePull:
		fmt.Fprintf(&b, "ae_pull p=%d keys=%d", m.AePull.Partition, len(m.AePull.Keys))
	case *peerpb.Envelope_AePush:
		fmt.Fprintf(&b, "ae_push records=%d", len(m.AePush.Records))
	case *peerpb.Envelope_Heartbeat:
		b.WriteString("heartbeat")
	case *peerpb.Envelope_GlForward:
		f := m.GlForward
		fmt.Fprintf(&b, "gl_forward op=%d %s", f.Op, f.Key)
		if f.WantLease {
			b.WriteString(" want_lease")
		}
	case *peerpb.Envelope_GlForwardReply:
		f := m.GlForwardReply
		switch {
		case f.Redirect != 0:
			fmt.Fprintf(&b, "gl_forward_reply redirect=%d", f.Redirect)
		case f.Found:
			fmt.Fprintf(&b, "gl_forward_reply %s v=%s", f.Record.Value, h.fmtVersion(versionOf(f.Record.Version)))
		default:
			fmt.Fprintf(&b, "gl_forward_reply v=%s", h.fmtVersion(versionOf(f.Version)))
		}
		if f.LeaseNanos > 0 {
			fmt.Fprintf(&b, " lease=%v", time.Duration(f.LeaseNanos))
		}
	case *peerpb.Envelope_GlUpdate:
		u := m.GlUpdate
		fmt.Fprintf(&b, "gl_update %s=%s v=%s lease=%v", u.Record.Key, u.Record.Value, h.fmtVersion(versionOf(u.Record.Version)), time.Duration(u.LeaseNanos))
	case *peerpb.Envelope_GlUpdateAck:
		fmt.Fprintf(&b, "gl_update_ack lease=%v", time.Duration(m.GlUpdateAck.LeaseNanos))
	case *peerpb.Envelope_GlCommit:
		fmt.Fprintf(&b, "gl_commit %s v=%s", m.GlCommit.Key, h.fmtVersion(versionOf(m.GlCommit.Version)))
	case *peerpb.Envelope_GlLeaseAck:
		fmt.Fprintf(&b, "gl_lease_ack %s accepted=%v", m.GlLeaseAck.Key, m.GlLeaseAck.Accepted)
	default:
		b.WriteString(wire.MessageType(env))
	}
	return b.String()
}

func versionOf(v *peerpb.Version) hlc.Version {
	if v == nil {
		return hlc.Version{}
	}
	return hlc.Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeID: v.NodeId}
}

func (h *Harness) fmtResult(r NodeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "n%d req=%d %s: ", r.Node, r.ID, r.Op)
	switch {
	case r.Err != nil:
		fmt.Fprintf(&b, "error: %v", r.Err)
	case r.Op == engine.OpGet && r.Found && r.Path != "" && r.Path != "quorum":
		fmt.Fprintf(&b, "%s v=%s path=%s", r.Value, h.fmtVersion(r.Version), r.Path)
	case r.Op == engine.OpGet && r.Found:
		fmt.Fprintf(&b, "%s v=%s", r.Value, h.fmtVersion(r.Version))
	case r.Op == engine.OpGet:
		fmt.Fprintf(&b, "not found v=%s", h.fmtVersion(r.Version))
	case r.Op == engine.OpScan:
		var items []string
		for _, it := range r.Items {
			items = append(items, fmt.Sprintf("%s=%s", it.Key, it.Value))
		}
		fmt.Fprintf(&b, "[%s] more=%v", strings.Join(items, " "), r.More)
	default:
		fmt.Fprintf(&b, "ok v=%s", h.fmtVersion(r.Version))
	}
	return b.String()
}
