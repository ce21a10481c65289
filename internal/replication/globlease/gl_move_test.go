package globlease

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// A small cluster for the move tests: three regions of two nodes, one globlease keyspace of
// one partition replicated once per region, every node's engine driven on virtual time in
// 5 ms steps, each message delivered one step after it was sent (unless its link is cut).
// Each node installs placement maps when the test says so, so nodes can be left on either
// side of a move step. After every step the simulator's invariants (one master per key, no
// stale read under a lease) are checked.
type moveCluster struct {
	t        *testing.T
	now      time.Time
	mutation string
	ids      []uint32
	engines  map[uint32]*Engine
	stores   map[uint32]*storage.Engine
	maps     map[uint32]*placement.Map
	newest   *placement.Map
	queue    []*peerpb.Envelope
	replies  map[uint64]engine.Result
	reports  []engine.Report
	cut      map[[2]uint32]bool
	nextReq  uint64
	moveID   uint64
	broken   string // the first invariant violation
	region   map[uint32]string
	replicas []uint32
}

func newMoveCluster(t *testing.T, mutation string) *moveCluster {
	t.Helper()
	regions := []string{"r1", "r2", "r3"}
	topo := topology.Equidistant("test", regions, 40, 1)
	c := &config.Cluster{Name: "test", Topology: topo, TopologyRef: "test"}
	id := uint32(0)
	for _, r := range regions {
		for i := range 2 {
			id++
			c.Nodes = append(c.Nodes, config.Node{ID: id, Name: fmt.Sprintf("n%d", id), Region: r,
				Listen: fmt.Sprintf("127.0.0.1:%d", 30000+id), PeerListen: fmt.Sprintf("127.0.0.1:%d", 31000+id)})
			_ = i
		}
	}
	c.Keyspaces = []config.Keyspace{{Name: "ks", Protocol: config.ProtocolGlobLease, ReplicasPerRegion: 1, Partitions: 1,
		Options: map[string]string{"lease": "2s", "master_lease": "300ms", "election_timeout": "600ms", "hot_keys": "false", "auto_migrate": "false"}}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	pm, err := placement.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	mc := &moveCluster{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), mutation: mutation,
		engines: map[uint32]*Engine{}, stores: map[uint32]*storage.Engine{}, maps: map[uint32]*placement.Map{},
		newest: pm, replies: map[uint64]engine.Result{}, cut: map[[2]uint32]bool{}, region: map[uint32]string{}}
	for _, n := range c.Nodes {
		st, err := storage.Open("/data", storage.Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		e := NewEngine(engine.Config{NodeID: n.ID, Nodes: c.Nodes, Topology: topo, Limits: c.Limits,
			AntiEntropyInterval: 500 * time.Millisecond, Mutation: mutation, RandSeed: uint64(n.ID)}, st)
		e.SetPlacement(pm)
		mc.ids = append(mc.ids, n.ID)
		mc.engines[n.ID], mc.stores[n.ID], mc.maps[n.ID] = e, st, pm
		mc.region[n.ID] = n.Region
	}
	ks, _ := pm.Keyspace("ks")
	mc.replicas = slices.Clone(ks.Partitions[0].Replicas)
	return mc
}

func (mc *moveCluster) flush(id uint32) {
	e, st := mc.engines[id], mc.stores[id]
	for range 100 {
		if !e.HasReady() {
			return
		}
		rd := e.Ready()
		if err := st.ApplyBatch(rd.Writes, rd.Raw, true); err != nil {
			mc.t.Fatalf("n%d: apply: %v", id, err)
		}
		for _, in := range rd.Ingests {
			if err := in.Perform(st); err != nil {
				mc.t.Fatalf("n%d: ingest: %v", id, err)
			}
		}
		mc.queue = append(mc.queue, rd.Messages...)
		for _, r := range rd.Replies {
			mc.replies[r.ID] = r
		}
		mc.reports = append(mc.reports, rd.Reports...)
		for _, j := range rd.Jobs {
			envs, err := j.Run(st, id)
			if err != nil {
				mc.t.Fatalf("n%d: job: %v", id, err)
			}
			mc.queue = append(mc.queue, envs...)
		}
	}
	mc.t.Fatalf("n%d keeps producing output", id)
}

// step advances virtual time by 5 ms: every node ticks, then the messages sent so far are
// delivered (in order), then the invariants are checked.
func (mc *moveCluster) step() {
	mc.now = mc.now.Add(5 * time.Millisecond)
	for _, id := range mc.ids {
		mc.engines[id].Tick(mc.now)
		mc.flush(id)
	}
	q := mc.queue
	mc.queue = nil
	for _, env := range q {
		if mc.cut[[2]uint32{env.From, env.To}] {
			continue
		}
		mc.engines[env.To].Step(mc.now, env)
		mc.flush(env.To)
	}
	if mc.broken == "" {
		now := make([]time.Time, len(mc.ids))
		engines := make([]engine.Engine, len(mc.ids))
		up := make([]bool, len(mc.ids))
		for i, id := range mc.ids {
			now[i], engines[i], up[i] = mc.now, mc.engines[id], true
		}
		if msg := invariant(now, engines, up); msg != "" {
			mc.broken = fmt.Sprintf("at %v: %s", mc.now.Format("15:04:05.000"), msg)
		}
	}
}

func (mc *moveCluster) run(d time.Duration) {
	for end := mc.now.Add(d); mc.now.Before(end); {
		mc.step()
	}
}

// runUntil steps until cond holds, failing the test after limit of virtual time.
func (mc *moveCluster) runUntil(limit time.Duration, what string, cond func() bool) {
	mc.t.Helper()
	for end := mc.now.Add(limit); !cond(); mc.step() {
		if mc.now.After(end) {
			mc.t.Fatalf("%s: not after %v of virtual time", what, limit)
		}
	}
}

func (mc *moveCluster) install(pm *placement.Map, nodes ...uint32) {
	for _, id := range nodes {
		mc.maps[id] = pm
		mc.engines[id].SetPlacement(pm)
		mc.flush(id)
	}
}

func (mc *moveCluster) installAll(pm *placement.Map) { mc.install(pm, mc.ids...) }

func (mc *moveCluster) ks() *placement.Keyspace {
	ks, _ := mc.newest.Keyspace("ks")
	return ks
}

// startMove makes a map in which remove's replica moves to add (source: src).
func (mc *moveCluster) startMove(remove, add, src uint32) *placement.Map {
	mc.moveID++
	next, err := mc.ks().StartMove(0, placement.Move{ID: mc.moveID, Add: add, Remove: remove, Source: src})
	if err != nil {
		mc.t.Fatal(err)
	}
	next.Version = mc.ks().Version + 1
	mc.newest = mc.newest.With(next)
	return mc.newest
}

func (mc *moveCluster) finishMove() *placement.Map {
	next, err := mc.ks().FinishMove(0, mc.moveID)
	if err != nil {
		mc.t.Fatal(err)
	}
	next.Version = mc.ks().Version + 1
	mc.newest = mc.newest.With(next)
	return mc.newest
}

func (mc *moveCluster) abortMove() *placement.Map {
	next, err := mc.ks().AbortMove(0, mc.moveID)
	if err != nil {
		mc.t.Fatal(err)
	}
	next.Version = mc.ks().Version + 1
	mc.newest = mc.newest.With(next)
	return mc.newest
}

// do runs a request at node and waits for its answer.
func (mc *moveCluster) do(node uint32, req engine.Request) engine.Result {
	mc.t.Helper()
	mc.nextReq++
	req.ID, req.Keyspace = mc.nextReq, "ks"
	if req.Deadline.IsZero() {
		req.Deadline = mc.now.Add(3 * time.Second)
	}
	mc.engines[node].Propose(mc.now, req)
	mc.flush(node)
	mc.runUntil(5*time.Second, fmt.Sprintf("answer to %s at n%d", req.Op, node), func() bool { _, ok := mc.replies[req.ID]; return ok })
	return mc.replies[req.ID]
}

func (mc *moveCluster) put(node uint32, key, value string) {
	mc.t.Helper()
	if r := mc.do(node, engine.Request{Op: engine.OpPut, Key: []byte(key), Value: []byte(value)}); r.Err != nil {
		mc.t.Fatalf("put %s=%s at n%d: %v", key, value, node, r.Err)
	}
}

func (mc *moveCluster) get(node uint32, key string) string {
	mc.t.Helper()
	r := mc.do(node, engine.Request{Op: engine.OpGet, Key: []byte(key)})
	if r.Err != nil {
		mc.t.Fatalf("get %s at n%d: %v", key, node, r.Err)
	}
	return string(r.Value)
}

func (mc *moveCluster) state(node uint32) (MoveState, bool) {
	return mc.engines[node].MoveStateOf(mc.now, "ks", 0)
}

// master returns the node whose master lease is valid and whose table names it master of the
// partition's first keys (0: none).
func (mc *moveCluster) master() uint32 {
	for _, id := range mc.ids {
		if st, ok := mc.state(id); ok && st.MasterOfPartStart == id && st.MasterLeaseIsValid && !st.Locked {
			return id
		}
	}
	return 0
}

// other returns the node of node's region that is not node.
func (mc *moveCluster) other(node uint32) uint32 {
	for _, id := range mc.ids {
		if id != node && mc.region[id] == mc.region[node] {
			return id
		}
	}
	return 0
}

func (mc *moveCluster) reported(moveID uint64) bool {
	for _, r := range mc.reports {
		if r.Kind == engine.ReportMoveCaughtUp && r.MoveID == moveID {
			return true
		}
	}
	return false
}

func (mc *moveCluster) checkInvariants() {
	mc.t.Helper()
	if mc.broken != "" {
		mc.t.Fatalf("invariant broken %s", mc.broken)
	}
}

func TestConfigNumbersGrowWithEveryMoveStep(t *testing.T) {
	p := placement.Partition{Replicas: []uint32{1, 3, 5}}
	settled := glConfigOf(&p)
	p.Move, p.MoveEpoch = &placement.Move{ID: 7, Add: 2, Remove: 1}, 7
	joint := glConfigOf(&p)
	p.Move = nil
	after := glConfigOf(&p)
	p.Move, p.MoveEpoch = &placement.Move{ID: 9, Add: 1, Remove: 2}, 9
	next := glConfigOf(&p)
	if !(settled < joint && joint < after && after < next) {
		t.Fatalf("configurations %d, %d, %d, %d do not grow with the steps", settled, joint, after, next)
	}
	// Ballots order by configuration first: any ballot of a later configuration is above
	// every ballot of an earlier one (gl_move.go, Vertical Paxos).
	if !(glBallot{config: joint, round: 99, node: 9}).less(glBallot{config: after, round: 1, node: 1}) {
		t.Fatal("a ballot of an earlier configuration with a higher round orders above a later configuration's")
	}
}

// The table rules of a move, on a partition with replicas n1 (r1), n3 (r2), n5 (r3) whose
// replica n1 moves to n2 (r1): the home of r1's keys is n1 under the old replicas and n2
// under the new ones.
func TestJointTableRules(t *testing.T) {
	region := map[uint32]string{1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r3", 6: "r3"}
	opts := config.GlobLeaseOptions{HomeRegion: "r1"}
	p := &placement.Partition{Replicas: []uint32{1, 3, 5}, Move: &placement.Move{ID: 4, Add: 2, Remove: 1, Source: 3}, MoveEpoch: 4}
	gp := &glPart{p: p, opts: &opts}
	e := newTestEngine(region)
	pairs := gp.homePairs(region)
	if len(pairs) != 1 || pairs[0] != (glHomePair{old: 1, new: 2}) {
		t.Fatalf("home pairs %v, want [{1 2}]", pairs)
	}
	start := newTable()
	if e.glConsistent(gp, &start) {
		t.Fatal("a table under which the leaving replica masters its keys is consistent")
	}
	// Without a successor nothing moves: only the leaving replica (or a failover) gives its
	// keys away.
	tb := start.clone()
	e.glNormalize(gp, &tb, 0)
	if !tb.sameMasters(&start) {
		t.Fatalf("normalising without a successor changed the table: %v", tb.subst)
	}
	// The handover: the keys go to n3, under the old and the new map alike, and both homes
	// are marked for the hand-back once the replicas settle.
	tb.overrides["k"] = 1
	e.glNormalize(gp, &tb, 3)
	if tb.subst[1] != 3 || tb.subst[2] != 3 || tb.overrides["k"] != 3 || !tb.handed[1] || !tb.handed[2] {
		t.Fatalf("handover table: subst %v overrides %v handed %v", tb.subst, tb.overrides, tb.handed)
	}
	if !e.glConsistent(gp, &tb) {
		t.Fatal("the handover table is not consistent")
	}
	// Acceptors: a table giving keys to the moving replicas is refused; once the committed
	// table is consistent, an inconsistent one is refused too.
	gp.table = start
	bad := start.clone()
	bad.subst[1] = 2
	if why := e.glJointAdmits(gp, &bad); why == "" {
		t.Fatal("acceptors admit a table giving the leaving replica's keys to the new replica")
	}
	if why := e.glJointAdmits(gp, &tb); why != "" {
		t.Fatalf("acceptors refuse the handover: %s", why)
	}
	gp.table = tb
	back := tb.clone()
	delete(back.subst, 2) // under the new map n2 would master r1's keys
	if why := e.glJointAdmits(gp, &back); why == "" {
		t.Fatal("acceptors admit a table that breaks the old and new maps' agreement")
	}
	// Once the move is over, the substitute hands the new home its keys back and the
	// entries of the node that left are dropped.
	p.Replicas, p.Move = []uint32{2, 3, 5}, nil
	gp.returning = map[uint32]*glReturn{2: {locked: true}}
	e.Cfg.NodeID = 3
	next := tb.clone()
	e.glBuildMoves(gp, &next)
	if len(next.subst) != 0 || len(next.handed) != 0 || next.overrides["k"] != 3 {
		t.Fatalf("hand-back table: subst %v handed %v overrides %v", next.subst, next.handed, next.overrides)
	}
}

// Joint majorities: during a move a decision needs a majority of the old set and of the new.
func TestJointQuorum(t *testing.T) {
	e := newTestEngine(nil)
	gp := &glPart{p: &placement.Partition{Replicas: []uint32{1, 3, 5}, Move: &placement.Move{ID: 1, Add: 2, Remove: 1}}}
	has := func(ns ...uint32) func(uint32) bool { return func(n uint32) bool { return slices.Contains(ns, n) } }
	for _, c := range []struct {
		nodes []uint32
		ok    bool
	}{
		{[]uint32{3, 5}, true},     // the stayers are a majority of both
		{[]uint32{1, 3}, false},    // old set only
		{[]uint32{2, 3}, false},    // new set only
		{[]uint32{1, 2, 5}, true},  // one of each and a stayer
		{[]uint32{1, 2}, false},    // the moving replicas alone
		{[]uint32{1, 2, 3}, true},  // both sets
		{[]uint32{2, 5, 6}, false}, // a non-member counts nowhere
	} {
		if got := e.glQuorum(gp, has(c.nodes...)); got != c.ok {
			t.Errorf("quorum of %v = %v, want %v", c.nodes, got, c.ok)
		}
	}
	e.Cfg.Mutation = "move-new-set-only"
	if !e.glQuorum(gp, has(2, 3)) {
		t.Error("the mutation move-new-set-only does not take the new set alone")
	}
}

func newTestEngine(region map[uint32]string) *Engine {
	var nodes []config.Node
	for id, r := range region {
		nodes = append(nodes, config.Node{ID: id, Name: fmt.Sprintf("n%d", id), Region: r})
	}
	slices.SortFunc(nodes, func(a, b config.Node) int { return int(a.ID) - int(b.ID) })
	st, _ := storage.Open("/data", storage.Options{FS: vfs.NewMem()})
	e := NewEngine(engine.Config{NodeID: 1, Nodes: nodes}, st)
	return e
}

// A whole move of the replica that masters the partition's keys: it hands them to a replica
// that stays, the new replica reports only once a joint table is consistent, no key ever
// has two masters, writes and reads go on, and once the move finishes the keys go back to
// the new home replica with every write.
func TestMoveOfTheMasterHandsOverAndBack(t *testing.T) {
	mc := newMoveCluster(t, "")
	mc.runUntil(3*time.Second, "a master", func() bool { return mc.master() != 0 })
	r := mc.master()
	a := mc.other(r)
	mc.put(r, "k1", "v1")
	stayer := mc.replicas[1]
	if stayer == r {
		stayer = mc.replicas[0]
	}
	if got := mc.get(stayer, "k1"); got != "v1" {
		t.Fatalf("read before the move: %q", got)
	}

	mc.installAll(mc.startMove(r, a, stayer))
	mc.runUntil(3*time.Second, "the handover", func() bool {
		st, _ := mc.state(r)
		return !st.MastersAny && mc.master() != 0
	})
	x := mc.master()
	if x == r || x == a {
		t.Fatalf("during the move n%d masters the keys; want a replica that stays", x)
	}
	stA, ok := mc.state(a)
	if !ok || !stA.Joining || stA.MasterLeaseIsValid {
		t.Fatalf("new replica n%d: %+v (ok %v)", a, stA, ok)
	}
	mc.put(stayer, "k1", "v2")
	if got := mc.get(r, "k1"); got != "v2" {
		t.Fatalf("read at the leaving replica during the move: %q", got)
	}
	mc.runUntil(10*time.Second, "the new replica's report", func() bool { return mc.reported(mc.moveID) })
	stA, _ = mc.state(a)
	if !stA.Consistent || stA.TableConfig != stA.Config {
		t.Fatalf("the new replica reported with table %+v", stA)
	}
	if len(mc.engines[a].ServingLeases(mc.now)) != 0 {
		t.Fatal("the new replica serves under a lease before the move finished")
	}

	t.Logf("n%d -> n%d: handed to n%d; reported at %v; held reports %d", r, a, x, mc.now.Format("05.000"), mc.engines[a].Counters().ReportsHeld.Load())
	mc.installAll(mc.finishMove())
	if _, ok := mc.state(r); ok {
		t.Fatal("the leaving replica kept its state of the partition after the move finished")
	}
	mc.runUntil(5*time.Second, "the hand-back to the new home", func() bool { return mc.master() == a })
	if got := mc.get(a, "k1"); got != "v2" {
		t.Fatalf("read at the new master: %q", got)
	}
	mc.put(mc.replicas[2], "k1", "v3")
	if got := mc.get(r, "k1"); got != "v3" {
		t.Fatalf("read at the node that left: %q", got)
	}
	mc.checkInvariants()
}

// An aborted move gives the leaving replica its keys back, and the new replica drops out.
func TestAbortedMoveHandsBackToTheOldHome(t *testing.T) {
	mc := newMoveCluster(t, "")
	mc.runUntil(3*time.Second, "a master", func() bool { return mc.master() != 0 })
	r := mc.master()
	a := mc.other(r)
	mc.put(r, "k1", "v1")
	mc.installAll(mc.startMove(r, a, r))
	mc.runUntil(3*time.Second, "the handover", func() bool {
		st, _ := mc.state(r)
		return !st.MastersAny && mc.master() != 0
	})
	mc.installAll(mc.abortMove())
	if _, ok := mc.state(a); ok {
		t.Fatal("the new replica kept its state after the move was aborted")
	}
	mc.runUntil(5*time.Second, "the hand-back to the old home", func() bool { return mc.master() == r })
	if got := mc.get(a, "k1"); got != "v1" {
		t.Fatalf("read after the abort: %q", got)
	}
	mc.checkInvariants()
}

// A write after a move finished still updates, or outwaits, the lease the replica that left
// holds: while that replica cannot be reached its lease is in force, and the write waits.
func TestWriteWaitsForTheLeavingReplicasLease(t *testing.T) {
	mc := newMoveCluster(t, "")
	mc.runUntil(3*time.Second, "a master", func() bool { return mc.master() != 0 })
	m := mc.master()
	var r uint32
	for _, id := range mc.replicas {
		if id != m {
			r = id
			break
		}
	}
	mc.put(m, "k1", "v1")
	// Two reads at r: the first asks the master and takes a lease, the second is served
	// under it.
	mc.get(r, "k1")
	if got := mc.do(r, engine.Request{Op: engine.OpGet, Key: []byte("k1")}); got.Path != PathLease {
		t.Fatalf("second read at n%d served by %q, want a lease", r, got.Path)
	}
	a := mc.other(r)
	// The move starts and finishes at every node but r, which is cut off and keeps its lease.
	for _, id := range mc.ids {
		if id != r {
			mc.cut[[2]uint32{id, r}], mc.cut[[2]uint32{r, id}] = true, true
		}
	}
	start := mc.startMove(r, a, m)
	mc.install(start, mc.ids...)
	mc.runUntil(10*time.Second, "the new replica's report", func() bool { return mc.reported(mc.moveID) })
	finish := mc.finishMove()
	others := slices.DeleteFunc(slices.Clone(mc.ids), func(id uint32) bool { return id == r })
	mc.install(finish, others...)
	mc.nextReq++
	id := mc.nextReq
	mc.engines[m].Propose(mc.now, engine.Request{ID: id, Keyspace: "ks", Op: engine.OpPut, Key: []byte("k1"), Value: []byte("v2"), Deadline: mc.now.Add(10 * time.Second)})
	mc.flush(m)
	for len(mc.engines[r].ServingLeases(mc.now)) > 0 {
		if _, done := mc.replies[id]; done {
			t.Fatal("a write committed while the replica that left still served the key under its lease")
		}
		mc.step()
	}
	mc.runUntil(5*time.Second, "the write", func() bool { _, ok := mc.replies[id]; return ok })
	if err := mc.replies[id].Err; err != nil {
		t.Fatalf("write: %v", err)
	}
	mc.checkInvariants()
}

// Master leases during a move count a majority of the old set and of the new one. Two nodes
// have installed the move (the master n? and the new replica), the other two replicas of the
// old set have not, and the two groups are cut off from each other. The old-map pair elects a
// successor for the master's keys under the old configuration; the master, on the joint map,
// must then not act: the new replica's acknowledgement alone is no majority of the old set.
// With the mutation move-new-set-only it is, and the one-master invariant catches it.
func TestJointLeaseAcrossConfigurations(t *testing.T) {
	for _, tc := range []struct {
		mutation  string
		wantTwice bool
	}{{"", false}, {"move-new-set-only", true}} {
		t.Run("mutation="+tc.mutation, func(t *testing.T) {
			mc := newMoveCluster(t, tc.mutation)
			mc.runUntil(3*time.Second, "a master", func() bool { return mc.master() != 0 })
			x := mc.master()
			var r, b uint32
			for _, id := range mc.replicas {
				switch {
				case id == x:
				case r == 0:
					r = id
				default:
					b = id
				}
			}
			a := mc.other(r)
			mc.put(x, "k1", "v1")
			joint := mc.startMove(r, a, x)
			mc.install(joint, x, a)
			for _, p := range []uint32{x, a} {
				for _, q := range []uint32{r, b} {
					mc.cut[[2]uint32{p, q}], mc.cut[[2]uint32{q, p}] = true, true
				}
			}
			mc.run(4 * time.Second)
			t.Logf("master n%d, moving n%d -> n%d, stayer n%d: %s", x, r, a, b, mc.broken)
			if got := mc.broken != ""; got != tc.wantTwice {
				t.Fatalf("invariant broken: %q; want broken %v", mc.broken, tc.wantTwice)
			}
		})
	}
}

// A proposer may propose its own value instead of the highest accepted one only when the
// promises prove that no value was chosen: the members of the old replica set that promised
// and report an accepted value, plus those that did not promise, are fewer than a majority.
func TestNoneChosen(t *testing.T) {
	e := newTestEngine(nil)
	gp := &glPart{p: &placement.Partition{Replicas: []uint32{1, 3, 5}, Move: &placement.Move{ID: 1, Add: 2, Remove: 1}}}
	accepted := &peerpb.GlPromise{Ok: true, Accepted: &peerpb.GlTable{Version: 2}}
	empty := &peerpb.GlPromise{Ok: true}
	for _, c := range []struct {
		name     string
		promises map[uint32]*peerpb.GlPromise
		none     bool
	}{
		{"one acceptor of three accepted, all promised", map[uint32]*peerpb.GlPromise{1: accepted, 3: empty, 5: empty, 2: empty}, true},
		{"one accepted, one silent: a majority may have accepted", map[uint32]*peerpb.GlPromise{1: accepted, 3: empty, 2: empty}, false},
		{"none accepted, one silent", map[uint32]*peerpb.GlPromise{3: empty, 5: empty, 2: empty}, true},
		{"two accepted", map[uint32]*peerpb.GlPromise{1: accepted, 3: accepted, 5: empty}, false},
		// The new replica's promise proves nothing about the old set.
		{"only the new replica and one stayer promised", map[uint32]*peerpb.GlPromise{2: empty, 3: empty}, false},
	} {
		if got := e.glNoneChosen(gp, &glProposal{promises: c.promises}); got != c.none {
			t.Errorf("%s: none chosen = %v, want %v", c.name, got, c.none)
		}
	}
}

// Before the seal, acceptors admit a table that gives keys to the leaving replica (a value of
// the configuration before the move that must be completed); after it, they refuse it, and a
// table giving keys to the new replica is refused either way.
func TestJointAdmitsLeftoverBeforeSeal(t *testing.T) {
	region := map[uint32]string{1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r3", 6: "r3"}
	opts := config.GlobLeaseOptions{HomeRegion: "r2"}
	p := &placement.Partition{Replicas: []uint32{1, 3, 5}, Move: &placement.Move{ID: 4, Add: 2, Remove: 1, Source: 3}, MoveEpoch: 4}
	gp := &glPart{p: p, opts: &opts, config: glConfigOf(p)}
	e := newTestEngine(region)
	gp.table = newTable()
	gp.table.config = glConfigOf(&placement.Partition{Replicas: []uint32{1, 3, 5}}) // chosen before the move
	failover := gp.table.clone()
	failover.subst[3] = 1 // n3's keys to the leaving n1
	if why := e.glJointAdmits(gp, &failover); why != "" {
		t.Fatalf("before the seal, acceptors refuse a leftover giving keys to the leaving replica: %s", why)
	}
	toNew := gp.table.clone()
	toNew.subst[3] = 2
	if why := e.glJointAdmits(gp, &toNew); why == "" {
		t.Fatal("acceptors admit a table giving keys to the new replica before the seal")
	}
	gp.table.config = gp.config // sealed
	if why := e.glJointAdmits(gp, &failover); why == "" {
		t.Fatal("after the seal, acceptors admit a table giving keys to the leaving replica")
	}
}
