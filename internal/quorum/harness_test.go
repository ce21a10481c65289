package quorum

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/topology"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// harness runs several cores in one goroutine on virtual time, with messages held in a queue
// that tests deliver, drop or reorder explicitly. Heartbeats are delivered at once unless the
// link is cut, so traces show only protocol messages. It is the seed of the simulator.
type harness struct {
	t       testing.TB
	epoch   time.Time
	now     time.Time
	cluster *config.Cluster
	cores   map[uint32]*Core
	stores  map[uint32]*storage.Engine
	ids     []uint32
	queue   []*peerpb.Envelope
	replies []nodeResult
	cut     map[[2]uint32]bool
	nextReq uint64
}

type nodeResult struct {
	node uint32
	Result
}

var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newHarness builds a cluster with one node per region of an equidistant topology (RTT 100ms)
// and a keyspace "ks" replicated once per region with the given partitions and options.
func newHarness(t testing.TB, regions, partitions int, options map[string]string) *harness {
	return newProtocolHarness(t, "quorum", regions, partitions, options)
}

func newProtocolHarness(t testing.TB, protocol string, regions, partitions int, options map[string]string) *harness {
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
	c.Keyspaces = []config.Keyspace{{Name: "ks", Protocol: protocol, ReplicasPerRegion: 1, Partitions: partitions, Options: options}}
	if err := c.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	pm, err := placement.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, epoch: testEpoch, now: testEpoch, cluster: c, cores: map[uint32]*Core{}, stores: map[uint32]*storage.Engine{}, cut: map[[2]uint32]bool{}}
	for _, n := range c.Nodes {
		e, err := storage.Open("/data", storage.Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		core := NewCore(Config{NodeID: n.ID, Nodes: c.Nodes, Topology: topo, Limits: c.Limits, AntiEntropyInterval: c.AntiEntropy.Interval}, e)
		core.SetPlacement(pm)
		h.cores[n.ID] = core
		h.stores[n.ID] = e
		h.ids = append(h.ids, n.ID)
	}
	return h
}

func (h *harness) propose(node uint32, req Request) uint64 {
	h.nextReq++
	req.ID = h.nextReq
	if req.Deadline.IsZero() {
		req.Deadline = h.now.Add(5 * time.Second)
	}
	h.cores[node].Propose(h.now, req)
	h.flush(node)
	return req.ID
}

// flush takes the node's Ready: writes go to storage (synchronously, before anything else,
// as the Ready contract demands), messages to the queue, replies to the result list, and
// anti-entropy jobs run inline.
func (h *harness) flush(node uint32) {
	for range 100 {
		core := h.cores[node]
		if !core.HasReady() {
			return
		}
		rd := core.Ready()
		if len(rd.Writes) > 0 {
			if err := h.stores[node].Apply(rd.Writes, true); err != nil {
				h.t.Fatalf("apply: %v", err)
			}
		}
		h.queue = append(h.queue, rd.Messages...)
		for _, r := range rd.Replies {
			h.replies = append(h.replies, nodeResult{node, r})
		}
		for _, j := range rd.Jobs {
			envs, err := RunJob(h.stores[node], node, j)
			if err != nil {
				h.t.Fatalf("job: %v", err)
			}
			h.queue = append(h.queue, envs...)
		}
	}
	h.t.Fatalf("node %d keeps producing output", node)
}

// deliver delivers (in queue order) the queued messages matching f, once each, and returns
// them. Messages produced by the deliveries are queued, not delivered.
func (h *harness) deliver(f func(*peerpb.Envelope) bool) []*peerpb.Envelope {
	var keep, done []*peerpb.Envelope
	cur := h.queue
	h.queue = nil
	for _, env := range cur {
		if !f(env) {
			keep = append(keep, env)
			continue
		}
		done = append(done, env)
	}
	h.queue = keep
	for _, env := range done {
		if h.cut[[2]uint32{env.From, env.To}] {
			continue
		}
		h.cores[env.To].Step(h.now, env)
		h.flush(env.To)
	}
	return done
}

func (h *harness) drop(f func(*peerpb.Envelope) bool) []*peerpb.Envelope {
	var keep, dropped []*peerpb.Envelope
	for _, env := range h.queue {
		if f(env) {
			dropped = append(dropped, env)
		} else {
			keep = append(keep, env)
		}
	}
	h.queue = keep
	return dropped
}

// stabilize delivers everything until the queue is empty (bounded).
func (h *harness) stabilize() int {
	n := 0
	for round := 0; round < 1000 && len(h.queue) > 0; round++ {
		n += len(h.deliver(func(*peerpb.Envelope) bool { return true }))
	}
	if len(h.queue) > 0 {
		h.t.Fatalf("stabilize: messages still queued after 1000 rounds")
	}
	return n
}

// tick advances virtual time by d in steps of at most 10ms, ticking every core, and delivers
// heartbeats at once (unless the link is cut).
func (h *harness) tick(d time.Duration) {
	end := h.now.Add(d)
	for h.now.Before(end) {
		step := min(10*time.Millisecond, end.Sub(h.now))
		h.now = h.now.Add(step)
		for _, id := range h.ids {
			h.cores[id].Tick(h.now)
			h.flush(id)
		}
		h.deliver(isHeartbeat)
	}
}

func isHeartbeat(env *peerpb.Envelope) bool {
	_, ok := env.Msg.(*peerpb.Envelope_Heartbeat)
	return ok
}

func (h *harness) takeReplies() []nodeResult {
	r := h.replies
	h.replies = nil
	return r
}

func (h *harness) reply(id uint64) (Result, bool) {
	for _, r := range h.replies {
		if r.ID == id {
			return r.Result, true
		}
	}
	return Result{}, false
}

// newest returns each node's newest stored version of key in keyspace ks.
func (h *harness) newest(key string) map[uint32]storage.Record {
	out := map[uint32]storage.Record{}
	ks, _ := h.cores[h.ids[0]].pmap.Keyspace("ks")
	p := ks.Lookup([]byte(key))
	for _, id := range h.ids {
		rec, found, err := h.stores[id].Get("ks", p.ID, []byte(key))
		if err != nil {
			h.t.Fatal(err)
		}
		if found {
			out[id] = rec
		}
	}
	return out
}

func (h *harness) fmtVersion(v hlc.Version) string {
	if v.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%d.%d@%d", (v.WallNanos-h.epoch.UnixNano())/int64(time.Millisecond), v.Logical, v.NodeID)
}

func (h *harness) fmtEnv(env *peerpb.Envelope) string {
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
		if m.ReadReply.Found {
			fmt.Fprintf(&b, "read_reply id=%d %s v=%s", m.ReadReply.RequestId, m.ReadReply.Record.Value, h.fmtVersion(versionOf(m.ReadReply.Record.Version)))
		} else {
			fmt.Fprintf(&b, "read_reply id=%d not-found", m.ReadReply.RequestId)
		}
	case *peerpb.Envelope_Scan:
		fmt.Fprintf(&b, "scan id=%d p=%d [%q,%q) limit=%d", m.Scan.RequestId, m.Scan.Partition, m.Scan.Start, m.Scan.End, m.Scan.Limit)
	case *peerpb.Envelope_ScanReply:
		fmt.Fprintf(&b, "scan_reply id=%d records=%d truncated=%v", m.ScanReply.RequestId, len(m.ScanReply.Records), m.ScanReply.Truncated)
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

func (h *harness) fmtResult(r nodeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "n%d req=%d %s: ", r.node, r.ID, r.Op)
	switch {
	case r.Err != nil:
		fmt.Fprintf(&b, "error: %v", r.Err)
	case r.Op == OpGet && r.Found && r.Path != "" && r.Path != PathQuorum:
		fmt.Fprintf(&b, "%s v=%s path=%s", r.Value, h.fmtVersion(r.Version), r.Path)
	case r.Op == OpGet && r.Found:
		fmt.Fprintf(&b, "%s v=%s", r.Value, h.fmtVersion(r.Version))
	case r.Op == OpGet:
		fmt.Fprintf(&b, "not found v=%s", h.fmtVersion(r.Version))
	case r.Op == OpScan:
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

func sortedIDs(m map[uint32]storage.Record) []uint32 {
	var ids []uint32
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
