package epaxos

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// memStore is a replica's saved state (raw keys).
type memStore struct{ kv map[string][]byte }

func (m *memStore) GetRaw(k []byte) ([]byte, bool, error) {
	v, ok := m.kv[string(k)]
	return v, ok, nil
}
func (m *memStore) ScanRaw(start, end []byte, _ int, fn func(k, v []byte) bool) error {
	var keys []string
	for k := range m.kv {
		if k >= string(start) && (len(end) == 0 || k < string(end)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !fn([]byte(k), m.kv[k]) {
			break
		}
	}
	return nil
}
func (m *memStore) apply(ops []storage.RawOp) {
	for _, op := range ops {
		switch {
		case op.Delete && op.End != nil:
			for k := range m.kv {
				if k >= string(op.Key) && k < string(op.End) {
					delete(m.kv, k)
				}
			}
		case op.Delete:
			delete(m.kv, string(op.Key))
		default:
			m.kv[string(op.Key)] = op.Value
		}
	}
}

// cluster runs replicas with messages held until the test delivers them.
type cluster struct {
	t        *testing.T
	ids      []uint32
	nodes    map[uint32]*Node
	stores   map[uint32]*memStore
	queue    []Message // with Body; From in from
	from     []uint32
	executed map[uint32][]Executed
	now      time.Time
	mutation string
}

func newCluster(t *testing.T, n int, mutation string) *cluster {
	c := &cluster{t: t, nodes: map[uint32]*Node{}, stores: map[uint32]*memStore{}, executed: map[uint32][]Executed{},
		now: time.Unix(1000, 0), mutation: mutation}
	for i := 1; i <= n; i++ {
		c.ids = append(c.ids, uint32(i))
	}
	for _, id := range c.ids {
		c.stores[id] = &memStore{kv: map[string][]byte{}}
		c.start(id)
	}
	return c
}

func (c *cluster) start(id uint32) {
	nd, err := NewNode(Config{ID: id, Replicas: c.ids, Rand: rand.New(rand.NewPCG(uint64(id), 7)), Store: c.stores[id],
		Prefix: []byte("p"), Mutation: c.mutation, Options: Options{BatchInterval: time.Millisecond, BatchMax: 1,
			FastPathTimeout: 50 * time.Millisecond, RecoveryTimeout: time.Second, ReportInterval: time.Hour, MaxInstances: 1000}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[id] = nd
}

// collect takes every node's output: saves, queues messages, records executions.
func (c *cluster) collect() {
	for _, id := range c.ids {
		nd := c.nodes[id]
		if nd == nil || !nd.HasReady() {
			continue
		}
		rd := nd.Ready()
		if err := nd.Err(); err != nil {
			c.t.Fatalf("node %d: %v", id, err)
		}
		c.stores[id].apply(rd.Raw)
		for _, m := range rd.Messages {
			c.queue = append(c.queue, m)
			c.from = append(c.from, id)
		}
		c.executed[id] = append(c.executed[id], rd.Executed...)
	}
}

// deliver delivers queued messages that match keep (nil: all), dropping those that match
// drop, until none is left.
func (c *cluster) deliver(keep func(from, to uint32, m *peerpb.EPaxosEnvelope) bool) {
	for range 10_000 {
		c.collect()
		if len(c.queue) == 0 {
			return
		}
		m, from := c.queue[0], c.from[0]
		c.queue, c.from = c.queue[1:], c.from[1:]
		if c.nodes[m.To] == nil || (keep != nil && !keep(from, m.To, m.Body)) {
			continue
		}
		c.nodes[m.To].Step(c.now, from, m.Body)
	}
	c.t.Fatal("messages never stop")
}

func put(id uint64, key string) *peerpb.EPaxosCommand {
	return &peerpb.EPaxosCommand{RequestId: id, Key: []byte(key), Value: []byte(fmt.Sprint(id)), Write: true}
}

func (c *cluster) propose(at uint32, cmd *peerpb.EPaxosCommand) {
	c.nodes[at].Propose(c.now, cmd)
	c.collect()
}

func (c *cluster) tick(d time.Duration) {
	c.now = c.now.Add(d)
	for _, id := range c.ids {
		if nd := c.nodes[id]; nd != nil {
			nd.Tick(c.now)
		}
	}
}

// order is the request IDs a node executed, in order.
func (c *cluster) order(id uint32) []uint64 {
	var out []uint64
	for _, ex := range c.executed[id] {
		for _, cmd := range ex.Attrs.GetCommands() {
			out = append(out, cmd.GetRequestId())
		}
	}
	return out
}

func TestQuorumSizes(t *testing.T) {
	for _, tc := range []struct{ n, majority, fast, recover int }{{1, 1, 1, 1}, {3, 2, 2, 1}, {5, 3, 4, 2}, {6, 4, 4, 2}, {7, 4, 6, 3}, {9, 5, 8, 4}} {
		c := newCluster(t, tc.n, "")
		nd := c.nodes[1]
		if nd.majority != tc.majority || nd.fastQuorum != tc.fast || nd.recoverQuorum != tc.recover {
			t.Errorf("N=%d: majority %d fast %d recover %d, want %d %d %d", tc.n, nd.majority, nd.fastQuorum, nd.recoverQuorum, tc.majority, tc.fast, tc.recover)
		}
	}
}

// Without interference a command commits in one round trip (no Accept is ever sent).
func TestFastPathWithoutInterference(t *testing.T) {
	c := newCluster(t, 5, "")
	c.propose(1, put(1, "a"))
	c.propose(2, put(2, "b"))
	accepts := 0
	c.deliver(func(_, _ uint32, m *peerpb.EPaxosEnvelope) bool {
		if m.GetAccept() != nil {
			accepts++
		}
		return true
	})
	if accepts != 0 {
		t.Fatalf("%d accepts on the fast path", accepts)
	}
	for _, id := range c.ids {
		if got := len(c.order(id)); got != 2 {
			t.Fatalf("node %d executed %d commands, want 2", id, got)
		}
	}
}

// Two concurrent writes of one key take the slow path at least once and execute in the
// same order everywhere.
func TestInterferingCommandsExecuteInOneOrder(t *testing.T) {
	c := newCluster(t, 5, "")
	// Both leaders pre-accept before either hears of the other.
	c.nodes[1].Propose(c.now, put(1, "k"))
	c.nodes[5].Propose(c.now, put(2, "k"))
	c.nodes[3].Propose(c.now, put(3, "k"))
	c.deliver(nil)
	want := c.order(1)
	if len(want) != 3 {
		t.Fatalf("node 1 executed %v", want)
	}
	for _, id := range c.ids {
		if got := c.order(id); !slices.Equal(got, want) {
			t.Fatalf("node %d executed %v, node 1 %v", id, got, want)
		}
	}
}

// The case the simulator found (seed 62, three replicas): the leader commits on the fast
// path with one replica's unchanged reply while the third replica had changed the
// attributes; the leader is then cut off. Recovery must take the unchanged value, not the
// changed one.
func TestRecoveryTakesTheUnchangedValue(t *testing.T) {
	c := newCluster(t, 3, "")
	// Replica 1 pre-accepts a write of k that nobody else hears of.
	c.propose(1, put(1, "k"))
	c.deliver(func(from, _ uint32, _ *peerpb.EPaxosEnvelope) bool { return from != 1 })
	// Replica 3 leads a write of k: replica 2 leaves its attributes unchanged and 3 commits
	// on the fast path; replica 1 adds its write as a dependency, but its reply and 3's
	// commit never arrive.
	c.propose(3, put(2, "k"))
	c.deliver(func(from, to uint32, m *peerpb.EPaxosEnvelope) bool {
		return !(from == 3 && m.GetCommit() != nil) && !(from == 1 && to == 3)
	})
	committedAt3, ok := c.nodes[3].Committed(ID{3, 1})
	if !ok {
		t.Fatal("replica 3 did not commit its instance")
	}
	c.nodes[3] = nil // cut off for good
	for range 5 {
		c.tick(1500 * time.Millisecond)
		c.deliver(nil)
	}
	for _, id := range []uint32{1, 2} {
		got, ok := c.nodes[id].Committed(ID{3, 1})
		if !ok {
			t.Fatalf("replica %d never recovered instance 3.1", id)
		}
		if !proto.Equal(got, committedAt3) {
			t.Fatalf("replica %d committed %v, replica 3 %v", id, got, committedAt3)
		}
	}
}

// A restarted replica keeps its instances, ballots and next slot.
func TestRestartKeepsState(t *testing.T) {
	c := newCluster(t, 3, "")
	c.propose(1, put(1, "a"))
	c.deliver(nil)
	before := c.nodes[1].nextSlot
	c.start(1)
	if c.nodes[1].nextSlot != before {
		t.Fatalf("next slot %d after restart, %d before", c.nodes[1].nextSlot, before)
	}
	if _, ok := c.nodes[1].Committed(ID{1, 1}); !ok {
		t.Fatal("instance 1.1 lost at restart")
	}
	c.propose(1, put(2, "a"))
	c.deliver(nil)
	if got := c.order(2); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("node 2 executed %v", got)
	}
}

// Instances every replica executed are collected from memory and storage.
func TestExecutedInstancesAreCollected(t *testing.T) {
	c := newCluster(t, 3, "")
	for i := range 10 {
		c.propose(uint32(i%3+1), put(uint64(i+1), "k"))
		c.deliver(nil)
	}
	for _, id := range c.ids {
		c.nodes[id].cfg.Options.ReportInterval = time.Millisecond
	}
	for range 3 {
		c.tick(10 * time.Millisecond)
		c.deliver(nil)
	}
	for _, id := range c.ids {
		if n := len(c.nodes[id].insts); n != 0 {
			t.Errorf("node %d keeps %d instances", id, n)
		}
		saved := 0
		for k := range c.stores[id].kv {
			if bytes.HasPrefix([]byte(k), []byte("pi")) {
				saved++
			}
		}
		if saved != 0 {
			t.Errorf("node %d keeps %d saved instances", id, saved)
		}
	}
}

// Decoding garbage never panics a replica (the message validator passes any EPaxos
// envelope of a replica; the core must cope).
func FuzzStep(f *testing.F) {
	seed, _ := proto.Marshal(&peerpb.EPaxosEnvelope{Body: &peerpb.EPaxosEnvelope_PreAccept{PreAccept: &peerpb.EPaxosPreAccept{
		Replica: 2, Slot: 1, Ballot: &peerpb.EPaxosBallot{}, Attrs: &peerpb.EPaxosAttrs{Commands: []*peerpb.EPaxosCommand{put(1, "k")}, Deps: []uint64{0, 0, 0}}}}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		var env peerpb.EPaxosEnvelope
		if proto.Unmarshal(b, &env) != nil {
			return
		}
		c := newCluster(t, 3, "")
		c.nodes[1].Step(c.now, 2, &env)
		c.nodes[1].Tick(c.now.Add(time.Minute))
		c.collect()
	})
}

// Reads of one key do not interfere: concurrent reads (after a write every replica knows)
// all take the fast path.
func TestReadsOfOneKeyStayOnTheFastPath(t *testing.T) {
	c := newCluster(t, 5, "")
	c.propose(1, put(1, "k"))
	c.deliver(nil)
	for i, at := range []uint32{2, 3, 4} {
		c.nodes[at].Propose(c.now, &peerpb.EPaxosCommand{RequestId: uint64(10 + i), Key: []byte("k")})
	}
	accepts := 0
	c.deliver(func(_, _ uint32, m *peerpb.EPaxosEnvelope) bool {
		if m.GetAccept() != nil {
			accepts++
		}
		return true
	})
	if accepts != 0 {
		t.Fatalf("%d accepts: concurrent reads changed each other's attributes", accepts)
	}
}
