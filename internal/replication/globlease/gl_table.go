package globlease

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// GlobLease mastership (liu-thesis 4.1.3, "Master Migration and Failure Recovery").
//
// Every key has one master. Which node that is, is the partition's mastership table: by
// default the partition's replica in the key's home region, changed by substitutions (failover:
// every key of a failed node goes to its successor) and per-key overrides (migration). A table
// version changes only through one Paxos instance per version, run by the replication group
// as the thesis prescribes ("the replication group as a Paxos group"): prepare/promise, then
// accept/accepted, then commit. Migration is the same two phases started by the old master
// (who stops acting on the key first, so no wait is needed); failover is started by a replica
// that has stopped hearing the master.
//
// At most one master per key. A node acts as master only while a majority of the partition's
// replicas acknowledged one of its heartbeats — sent at the node's committed table version —
// within masterLease, measured from when it sent the heartbeat. An acceptor does not accept a
// table that takes keys from node X (unless X itself proposed it) until electionTimeout has
// passed since it last acknowledged X, nor during electionTimeout after its own start (it may
// have acknowledged X just before a crash). Any majority that accepts the failover intersects
// the majority behind X's last master lease, so X stopped acting before the new table can be
// chosen. This is the thesis's timing rule for leases applied to mastership (the record on the
// acceptor starts after the lease on the master) and needs only bounded clock drift, which
// electionTimeout − masterLease (≥ 100ms, validated) absorbs. The same gap, being far above
// ε, keeps the new master's HLC above every version the old master stamped.

// glDriftMargin is the clock rate error every lease length is stretched (records) or shrunk
// (holders) by: 1000 ppm, ten times a common crystal's bound (the thesis assumes "the latency of
// message delivery is much more significant than the clock drifts").
const glDriftMargin = 1e-3

// glMetaKeyspace holds each replica's durable GlobLease acceptor state. It is not in the
// placement map, so anti-entropy and scans never see it.
const glMetaKeyspace = "_globlease"

// glMetaVersion is the fixed MVCC version of acceptor-state records: each write overwrites
// the previous one instead of piling up versions.
var glMetaVersion = hlc.Version{WallNanos: 1}

// glBallot orders by the proposer's partition configuration first (gl_move.go: every ballot
// of a later configuration is above those of earlier ones, as in Vertical Paxos).
type glBallot struct {
	config uint64
	round  uint64
	node   uint32
}

func (b glBallot) less(o glBallot) bool {
	if b.config != o.config {
		return b.config < o.config
	}
	if b.round != o.round {
		return b.round < o.round
	}
	return b.node < o.node
}

func (b glBallot) isZero() bool { return b == glBallot{} }

func ballotToPB(b glBallot) *peerpb.GlBallot {
	return &peerpb.GlBallot{Round: b.round, Node: b.node, Config: b.config}
}
func ballotFromPB(b *peerpb.GlBallot) glBallot {
	return glBallot{round: b.GetRound(), node: b.GetNode(), config: b.GetConfig()}
}

// glTable is one version of a partition's mastership table. Invariant: subst never maps a node
// to itself and is already resolved (no chains); overrides point at replicas of the partition.
type glTable struct {
	version   uint64
	subst     map[uint32]uint32 // home replica → node that took its keys (failover)
	overrides map[string]uint32 // key → master (migration)
	initiator uint32
	hlc       hlc.Version
	// config is the configuration of the ballot that chose this version (0: not chosen yet);
	// handed are the homes a replica move gave to a substitute (gl_move.go).
	config uint64
	handed map[uint32]bool
	// gen is the partition generation the table belongs to (gl_split.go).
	gen uint64
}

func newTable() glTable {
	return glTable{subst: map[uint32]uint32{}, overrides: map[string]uint32{}, handed: map[uint32]bool{}}
}

func (t *glTable) clone() glTable {
	out := *t
	out.subst = maps.Clone(t.subst)
	if out.subst == nil {
		out.subst = map[uint32]uint32{}
	}
	out.overrides = maps.Clone(t.overrides)
	if out.overrides == nil {
		out.overrides = map[string]uint32{}
	}
	out.handed = maps.Clone(t.handed)
	if out.handed == nil {
		out.handed = map[uint32]bool{}
	}
	return out
}

// sameMasters reports whether two tables assign masters identically (and mark the same
// handed-over homes).
func (t *glTable) sameMasters(o *glTable) bool {
	return maps.Equal(t.subst, o.subst) && maps.Equal(t.overrides, o.overrides) && maps.Equal(t.handed, o.handed)
}

func (t *glTable) resolve(home uint32) uint32 {
	if n, ok := t.subst[home]; ok {
		return n
	}
	return home
}

// masterOf returns the master of key whose home replica is home.
func (t *glTable) masterOf(key []byte, home uint32) uint32 {
	if m, ok := t.overrides[string(key)]; ok {
		return m
	}
	return t.resolve(home)
}

// toPB encodes the table. A substitution travels as an override whose key is
// substPrefix + the home node ID: user keys never start with a zero byte followed by that
// text in practice, and a table is only ever decoded by this function.
func (t *glTable) toPB(ks string, part uint32) *peerpb.GlTable {
	pb := &peerpb.GlTable{Keyspace: ks, Partition: part, Version: t.version, Initiator: t.initiator, Hlc: wire.VersionToPB(t.hlc),
		Config: t.config, HandedOver: slices.Sorted(maps.Keys(t.handed)), Generation: t.gen}
	homes := slices.Sorted(maps.Keys(t.subst))
	for _, h := range homes {
		pb.Overrides = append(pb.Overrides, &peerpb.GlOverride{Key: substKey(h), Master: t.subst[h]})
	}
	keys := slices.Sorted(maps.Keys(t.overrides))
	for _, k := range keys {
		pb.Overrides = append(pb.Overrides, &peerpb.GlOverride{Key: []byte(k), Master: t.overrides[k]})
	}
	return pb
}

const substPrefix = "\x00subst:"

func substKey(home uint32) []byte {
	return fmt.Appendf([]byte(substPrefix), "%d", home)
}

func glTableFromPB(pb *peerpb.GlTable) glTable {
	t := newTable()
	t.version, t.initiator, t.hlc, t.config, t.gen = pb.GetVersion(), pb.GetInitiator(), wire.VersionFromPB(pb.GetHlc()), pb.GetConfig(), pb.GetGeneration()
	for _, h := range pb.GetHandedOver() {
		t.handed[h] = true
	}
	for _, o := range pb.GetOverrides() {
		k := string(o.GetKey())
		var home uint32
		if n, _ := fmt.Sscanf(k, substPrefix+"%d", &home); n == 1 && len(k) > len(substPrefix) && k[:len(substPrefix)] == substPrefix {
			t.subst[home] = o.GetMaster()
			continue
		}
		t.overrides[k] = o.GetMaster()
	}
	return t
}

// glPart is this node's GlobLease state for one partition it replicates.
type glPart struct {
	ks   *placement.Keyspace
	p    *placement.Partition
	opts *config.GlobLeaseOptions

	// Durable acceptor state (written through Ready.Writes before any reply that depends on it).
	table          glTable
	promised       glBallot
	acceptedBallot glBallot
	accepted       *glTable

	// Master lease: per replica, the send time of the newest heartbeat it acknowledged at
	// this node's table version. Self counts implicitly.
	ackedAt map[uint32]time.Time
	// Acceptor side: when this node last acknowledged node X's heartbeat, and last heard one.
	lastAckTo map[uint32]time.Time
	lastHeard map[uint32]time.Time
	// withholdAck: until when this acceptor acknowledges no heartbeat of node X for the
	// partition, because it refused a value being completed that takes X's keys while it still
	// acknowledged X (glAccept). Cleared when the table changes. At most one entry per member.
	withholdAck map[uint32]time.Time
	// seenRound: the highest round of this configuration an acceptor refused a promise for
	// (GlPromise.promised); this node's next ballot goes past it.
	seenRound uint64
	// installedAt: when this node installed the partition (node start, or a keyspace created
	// or given this node later). Failure detection counts silence from here, not from node
	// start: a replica that learns of a keyspace after electionTimeout has not yet had a chance
	// to hear its master, and must not elect a successor at once.
	installedAt time.Time

	// since: when each key group became this node's: per home replica for defaults, per key
	// for overrides. A new master assumes every node may hold a lease from the old one until
	// since + the longest lease (+ grant age and ε).
	homeSince map[uint32]time.Time
	keySince  map[string]time.Time

	// migrating: keys this node is giving away (it no longer acts on them) → target.
	migrating map[string]uint32
	// wantMoves: moves waiting for the next proposal; wantFailover: nodes to take over.
	wantMoves    map[string]uint32
	wantFailover map[uint32]bool
	prop         *glProposal
	nextPropAt   time.Time
	// acceptedAt: when this acceptor accepted a table that is not committed yet. If no
	// proposer finishes the instance, this node does (glTickProposals), or its heartbeat
	// acknowledgements would stay withheld forever.
	acceptedAt time.Time
	// cons: conservative periods after taking keys over (gl_master.go).
	cons []*glConservative

	// Replica moves (gl_move.go). config: the partition's configuration number when this node
	// last installed it. joining: this node is the move's new replica (it stores writes and
	// votes, and masters, leases and serves nothing). leaving: it is the move's leaving replica
	// and gives every key it masters away; locked: the handover is proposed and this node
	// commits nothing more of the partition. returning: homes this node hands back once the
	// replicas settle. wantSeal: the new replica wants a table chosen in the joint
	// configuration.
	config    uint64
	joining   bool
	leaving   bool
	leaveAt   time.Time
	locked    bool
	returning map[uint32]*glReturn
	wantSeal  bool

	// Generations (gl_split.go). fenced: this acceptor withholds its acknowledgements of the
	// generation's masters (itself included) until ackFence. genPending: a master of the
	// generation starts its conservative period when its master lease first holds.
	fenced     bool
	ackFence   time.Time
	genPending bool
}

type glProposal struct {
	version  uint64
	ballot   glBallot
	value    *glTable // what this node wants (built from its committed table)
	chosen   *glTable // value sent in phase 2
	phase    int
	promises map[uint32]*peerpb.GlPromise
	accepts  map[uint32]bool
	deadline time.Time
	// grace: until then phase 1 waits for more promises when a quorum's do not prove that
	// no value was chosen (glMaybeAccept); half the round timeout.
	grace time.Time
	// leftBehind: value is an instance this node accepted and nobody finished (glPropose).
	leftBehind bool
}

// home returns the replica of the partition in key's home region (the lowest node ID there).
func (gp *glPart) home(key []byte, region map[uint32]string) uint32 {
	want := gp.opts.HomeRegionOf(key)
	best := uint32(0)
	for _, r := range gp.p.Replicas {
		if region[r] == want && (best == 0 || r < best) {
			best = r
		}
	}
	if best == 0 {
		best = slices.Min(gp.p.Replicas)
	}
	return best
}

func (gp *glPart) masterOf(key []byte, region map[uint32]string) uint32 {
	return gp.table.masterOf(key, gp.home(key, region))
}

// homes lists the home replicas of the partition: the replicas that are home to some key range.
func (gp *glPart) homes(region map[uint32]string) []uint32 {
	seen := map[uint32]bool{gp.home(gp.p.Start, region): true}
	for _, r := range gp.opts.HomeRanges {
		if gp.p.Contains([]byte(r.Start)) {
			seen[gp.home([]byte(r.Start), region)] = true
		}
	}
	// Ranges that begin before the partition but cover part of it are represented by the
	// partition's start key above.
	out := slices.Sorted(maps.Keys(seen))
	return out
}

// mastersAny reports whether node masters any key of the partition by its table.
func (gp *glPart) mastersAny(node uint32, region map[uint32]string) bool {
	for _, h := range gp.homes(region) {
		if gp.table.resolve(h) == node {
			return true
		}
	}
	for _, m := range gp.table.overrides {
		if m == node {
			return true
		}
	}
	return false
}

// masterLeaseValid reports whether this node may act as a master in the partition now.
func (c *Engine) glMasterLeaseValid(gp *glPart, now time.Time) bool {
	if c.Cfg.Mutation == "master-ignores-lease" {
		return true
	}
	if gp.joining {
		return false // the new replica of a move masters nothing until it finishes
	}
	// This node counts for itself like any acceptor: not while it has accepted a table that
	// is not committed yet (it may take keys from this very node). During a move the
	// acknowledgements must be a majority of the old and of the new replica set.
	return c.glQuorum(gp, func(r uint32) bool {
		if r == c.Cfg.NodeID {
			return gp.accepted == nil && !now.Before(gp.ackFence)
		}
		t, ok := gp.ackedAt[r]
		return ok && now.Before(t.Add(gp.opts.MasterLease))
	})
}

// glActing reports whether this node is the acting master of key now.
func (c *Engine) glActing(gp *glPart, key []byte, now time.Time) bool {
	if gp.masterOf(key, c.Region) != c.Cfg.NodeID {
		return false
	}
	if _, moving := gp.migrating[string(key)]; moving {
		return false
	}
	if gp.leaving {
		return false // handing every key over (gl_move.go)
	}
	if giving, _ := gp.glGivingBack(key, c.Region); giving {
		return false
	}
	if !c.glMasterLeaseValid(gp, now) {
		return false
	}
	c.glStartGeneration(now, gp)
	return true
}

// glPersist queues the partition's acceptor state for storage.
func (c *Engine) glPersist(gp *glPart) {
	st := &peerpb.GlAcceptorState{
		Committed: gp.table.toPB(gp.ks.Spec.Name, gp.p.ID),
		Promised:  ballotToPB(gp.promised),
		Config:    gp.config,
		Fenced:    gp.fenced,
	}
	if gp.accepted != nil {
		st.AcceptedBallot = ballotToPB(gp.acceptedBallot)
		st.Accepted = gp.accepted.toPB(gp.ks.Spec.Name, gp.p.ID)
	}
	b, err := proto.Marshal(st)
	if err != nil {
		panic(fmt.Sprintf("globlease: marshal acceptor state: %v", err)) // cannot fail for valid messages
	}
	c.Persist(storage.Record{Keyspace: glMetaKeyspace, Key: glMetaKey(gp.ks.Spec.Name, gp.p.ID), Version: glMetaVersion, Value: b})
}

func glMetaKey(ks string, part uint32) []byte { return fmt.Appendf(nil, "acceptor/%s/%d", ks, part) }

// glLoad restores a partition's acceptor state from storage (after a restart) and reports
// whether it found one of the partition's current generation (gl_split.go: a state written
// in an earlier generation belongs to a partition a split or merge superseded).
func (c *Engine) glLoad(gp *glPart) bool {
	rec, found, err := c.Store.Get(glMetaKeyspace, glMetaKey(gp.ks.Spec.Name, gp.p.ID))
	if err != nil || !found || rec.Tombstone {
		return false
	}
	var st peerpb.GlAcceptorState
	if proto.Unmarshal(rec.Value, &st) != nil {
		return false
	}
	if st.GetConfig() < glGenFloor(gp.p) || st.GetCommitted().GetGeneration() != gp.p.Generation {
		return false
	}
	gp.fenced = st.GetFenced()
	gp.table = glTableFromPB(st.GetCommitted())
	gp.promised = ballotFromPB(st.GetPromised())
	if st.GetAccepted() != nil {
		t := glTableFromPB(st.GetAccepted())
		gp.accepted = &t
		gp.acceptedBallot = ballotFromPB(st.GetAcceptedBallot())
	}
	c.Clock.Observe(c.LastTick, gp.table.hlc)
	return true
}

// glAdopt installs a committed table newer than ours.
func (c *Engine) glAdopt(now time.Time, gp *glPart, pb *peerpb.GlTable) {
	if pb == nil || pb.GetVersion() <= gp.table.version {
		return
	}
	next := glTableFromPB(pb)
	if next.gen != gp.p.Generation {
		return // a table of another generation of the range (gl_split.go)
	}
	// Every master the table names is a member of the partition in this node's map. A
	// table made under another map (a node on the other side of a move step) may name a
	// node this one does not know as a member yet or any more: it is refused until this
	// node's map catches up, and a later version comes with the next heartbeat. A
	// substitute for a home that is not a replica here (a move's new replica is not one
	// yet) is left out of that check: no key of this map resolves through it (homes are
	// replicas; the new replica's entry is normalised before the move may finish), so it is
	// dormant. Such entries stay
	// behind when homes leave (a table substituted n1 by n4, then both left by moves); a new
	// replica that refused the table for them never learnt it, could not seal its move, and
	// the move never finished (the simulator's move-progress check).
	for _, m := range next.overrides {
		if !gp.p.Holds(m) {
			return
		}
	}
	for h, m := range next.subst {
		if gp.p.HasReplica(h) && !gp.p.Holds(m) {
			return
		}
	}
	old := gp.table
	gp.table = next
	if gp.accepted != nil && gp.accepted.version <= next.version {
		gp.accepted = nil
		gp.acceptedBallot = glBallot{}
	}
	gp.promised = glBallot{}
	c.Clock.Observe(now, next.hlc)
	c.glPersist(gp)
	c.glCounters.TableChanges.Add(1)
	self := c.Cfg.NodeID
	for _, h := range gp.homes(c.Region) {
		if old.resolve(h) != self && next.resolve(h) == self {
			gp.homeSince[h] = now
		}
	}
	for k, m := range next.overrides {
		if m == self && old.masterOf([]byte(k), gp.home([]byte(k), c.Region)) != self {
			gp.keySince[k] = now
		}
	}
	for k := range gp.keySince {
		if next.overrides[k] != self {
			delete(gp.keySince, k)
		}
	}
	// Moves that are done (or overtaken) end; keys that left this node lose their master state.
	for k, to := range gp.migrating {
		if next.masterOf([]byte(k), gp.home([]byte(k), c.Region)) != self {
			delete(gp.migrating, k)
			_ = to
		}
	}
	for k, to := range gp.wantMoves {
		if next.masterOf([]byte(k), gp.home([]byte(k), c.Region)) == to {
			delete(gp.wantMoves, k)
		}
	}
	// A node that just became a master has had no reason to send this partition heartbeats
	// before: failure detection counts its silence from now, not from its last heartbeat
	// as a master long ago. Before, a replica wanted the new master failed over at once,
	// and its proposals, refused while the master lived, kept the move that was waiting for
	// the table from finishing (the simulator's move-progress check, globlease seed 142).
	for _, h := range gp.homes(c.Region) {
		if m := next.resolve(h); m != old.resolve(h) {
			gp.lastHeard[m] = now
		}
	}
	for k, m := range next.overrides {
		if m != old.masterOf([]byte(k), gp.home([]byte(k), c.Region)) {
			gp.lastHeard[m] = now
		}
	}
	for x := range gp.wantFailover {
		if !gp.mastersAny(x, c.Region) {
			delete(gp.wantFailover, x)
		}
	}
	if next.config == gp.config {
		gp.wantSeal = false
	}
	clear(gp.withholdAck) // the value being completed is in (or overtaken)
	c.glTableChanged(now, gp, &old)
}

// --- heartbeats (master lease) ---

func (c *Engine) glTickHeartbeats(now time.Time) {
	gl := c.gl
	if now.Before(gl.nextHeartbeat) {
		return
	}
	gl.nextHeartbeat = now.Add(gl.heartbeatInterval)
	gl.hbSeq++
	gl.hbSent[gl.hbSeq] = now
	delete(gl.hbSent, gl.hbSeq-64) // acks older than 64 heartbeats are useless (bounded map)
	perPeer := map[uint32][]*peerpb.GlPartVersion{}
	for _, gp := range gl.partList {
		if !gp.mastersAny(c.Cfg.NodeID, c.Region) {
			continue
		}
		for _, r := range gp.p.Holders() {
			if r != c.Cfg.NodeID {
				perPeer[r] = append(perPeer[r], &peerpb.GlPartVersion{Keyspace: gp.ks.Spec.Name, Partition: gp.p.ID, Version: gp.table.version, Config: gp.config})
			}
		}
	}
	for _, peer := range sortedKeys(perPeer) {
		c.Send(peer, &peerpb.Envelope{Msg: &peerpb.Envelope_GlHeartbeat{GlHeartbeat: &peerpb.GlHeartbeat{Seq: gl.hbSeq, Parts: perPeer[peer]}}})
	}
}

// sortedKeys lists a map's node IDs in order, so that messages and decisions come out the
// same on every run (map iteration order is random).
func sortedKeys[V any](m map[uint32]V) []uint32 { return slices.Sorted(maps.Keys(m)) }

func (c *Engine) glHandleHeartbeat(now time.Time, from uint32, m *peerpb.GlHeartbeat) {
	ack := &peerpb.GlHeartbeatAck{Seq: m.GetSeq()}
	for _, pv := range m.GetParts() {
		gp := c.glPartOf(pv.GetKeyspace(), pv.GetPartition())
		if gp == nil || !gp.p.Holds(from) {
			continue
		}
		gp.lastHeard[from] = now
		switch {
		case gp.table.version > pv.GetVersion():
			ack.Newer = append(ack.Newer, gp.table.toPB(gp.ks.Spec.Name, gp.p.ID))
		case pv.GetConfig() != gp.config:
			// Another configuration of the partition (one of us has not installed the last move
			// step): no acknowledgement, which would count for a master lease under a
			// majority this node may not belong to (gl_move.go).
		case now.Before(gp.withholdAck[from]):
			// A value being completed takes keys from the sender (glAccept).
		case now.Before(gp.ackFence):
			// A new generation's fence (gl_split.go): this acceptor may have backed a master of
			// the partition the generation superseded that the new table does not name.
		case gp.table.version == pv.GetVersion() && gp.accepted == nil:
			// No acknowledgement while a table this node accepted may be about to be chosen:
			// it could take keys from the sender.
			gp.lastAckTo[from] = now
			ack.Acked = append(ack.Acked, pv)
		case gp.table.version < pv.GetVersion():
			// Behind: report our version so the master sends its table (a lower version is
			// never counted as an acknowledgement).
			ack.Acked = append(ack.Acked, &peerpb.GlPartVersion{Keyspace: pv.GetKeyspace(), Partition: pv.GetPartition(), Version: gp.table.version, Config: gp.config})
		default:
			// Same version but a table accepted and not yet committed: no acknowledgement.
		}
	}
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlHeartbeatAck{GlHeartbeatAck: ack}})
}

func (c *Engine) glHandleHeartbeatAck(now time.Time, from uint32, m *peerpb.GlHeartbeatAck) {
	sent, ok := c.gl.hbSent[m.GetSeq()]
	for _, t := range m.GetNewer() {
		if gp := c.glPartOf(t.GetKeyspace(), t.GetPartition()); gp != nil {
			c.glAdopt(now, gp, t)
		}
	}
	if !ok {
		return
	}
	for _, pv := range m.GetAcked() {
		gp := c.glPartOf(pv.GetKeyspace(), pv.GetPartition())
		if gp == nil || !gp.p.Holds(from) || pv.GetConfig() != gp.config {
			continue
		}
		if pv.GetVersion() < gp.table.version {
			c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlCommitTable{GlCommitTable: &peerpb.GlCommitTable{Table: gp.table.toPB(gp.ks.Spec.Name, gp.p.ID)}}})
			continue
		}
		if pv.GetVersion() != gp.table.version {
			continue
		}
		if cur, ok := gp.ackedAt[from]; !ok || sent.After(cur) {
			gp.ackedAt[from] = sent
		}
	}
	c.glWakeMasters(now)
}

// --- failover detection ---

// glTickFailover starts an election for the keys of a master this replica has not heard from
// for electionTimeout (plus a stagger by rank, so the preferred successor usually wins alone:
// a replica in the failed master's region first, then the lowest node ID).
func (c *Engine) glTickFailover(now time.Time) {
	for _, gp := range c.gl.partList {
		if gp.joining || gp.leaving {
			// The replicas of a move that do not stay take no keys (gl_move.go), so they
			// drop the failovers they wanted before the move too.
			clear(gp.wantFailover)
			continue
		}
		for x := range gp.wantFailover {
			// A master heard from again is not failed: withdraw the wish. Otherwise this
			// replica proposed the failover for ever (acceptors refuse it while they hear
			// from the master), and a leaving replica's handover, which carries its wishes,
			// was refused with it: the move never finished (the simulator's move-progress
			// check, globlease seed 1 with moves and splits).
			if heard, ok := gp.lastHeard[x]; ok && now.Sub(heard) < gp.opts.ElectionTimeout {
				delete(gp.wantFailover, x)
			}
		}
		for _, x := range c.glMasterCandidates(gp) {
			if x == c.Cfg.NodeID || !gp.mastersAny(x, c.Region) || gp.wantFailover[x] {
				continue
			}
			heard, ok := gp.lastHeard[x]
			if !ok {
				heard = gp.installedAt
				gp.lastHeard[x] = heard
			}
			if now.Sub(heard) < gp.opts.ElectionTimeout+c.glSuccessorRank(gp, x)*gp.opts.MasterLease/2 {
				continue
			}
			gp.wantFailover[x] = true
		}
	}
}

// glMasterCandidates are the nodes that may master keys of gp: its members, and any other
// node its table names (a table made under another map; its keys are failed over like a
// silent master's).
func (c *Engine) glMasterCandidates(gp *glPart) []uint32 {
	set := map[uint32]bool{}
	for _, r := range gp.p.Holders() {
		set[r] = true
	}
	for _, m := range gp.table.subst {
		set[m] = true
	}
	for _, m := range gp.table.overrides {
		set[m] = true
	}
	return sortedKeys(set)
}

// glSuccessorRank orders the replicas that may take over x's keys (replicas that stay through
// a move in progress); this node's rank.
func (c *Engine) glSuccessorRank(gp *glPart, x uint32) time.Duration {
	cands := slices.DeleteFunc(slices.Clone(gp.p.Replicas), func(r uint32) bool { return r == x || !glStayer(gp.p, r) })
	slices.SortFunc(cands, func(a, b uint32) int {
		ra, rb := c.Region[a] == c.Region[x], c.Region[b] == c.Region[x]
		if ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	return time.Duration(slices.Index(cands, c.Cfg.NodeID))
}

// --- proposer ---

// glTickProposals starts or retries the proposal for pending moves and failovers.
func (c *Engine) glTickProposals(now time.Time) {
	for _, gp := range c.gl.partList {
		if gp.prop != nil {
			c.glMaybeAccept(now, gp) // a phase 1 that waited for more promises (glMaybeAccept)
			if gp.prop == nil {
				continue
			}
			if now.After(gp.prop.deadline) {
				gp.prop = nil
				// Back off by a random number of slow ticks (proposals start only on them)
				// so duelling proposers separate. A fixed per-node amount (50 ms + 10 ms per
				// node ID) fell within one slow tick, so two proposers whose ticks were
				// aligned (every node restarted at once) preempted each other on a LAN for
				// ever (the simulator's move-progress check, globlease on lan-3, seed 114).
				gp.nextPropAt = now.Add(time.Duration(1+c.rng.IntN(4))*glSlowTick - time.Millisecond)
			}
			continue
		}
		stuck := gp.accepted != nil && now.After(gp.acceptedAt.Add(2*c.glRoundTimeout(gp)))
		if len(gp.wantMoves) == 0 && len(gp.wantFailover) == 0 && !stuck && !c.glWantsTable(gp) {
			continue
		}
		if now.Before(gp.nextPropAt) {
			continue
		}
		c.glPropose(now, gp)
	}
}

// glBuild returns the table this node wants: its committed table with the pending moves and
// failovers applied; nil when nothing would change.
func (c *Engine) glBuild(gp *glPart) *glTable {
	next := gp.table.clone()
	next.version = gp.table.version + 1
	next.initiator = c.Cfg.NodeID
	changed := false
	for _, x := range sortedKeys(gp.wantFailover) {
		for _, h := range gp.homes(c.Region) {
			if next.resolve(h) == x {
				if h == c.Cfg.NodeID {
					delete(next.subst, h)
				} else {
					next.subst[h] = c.Cfg.NodeID
				}
				changed = true
			}
		}
		for k, m := range next.overrides {
			if m == x {
				next.overrides[k] = c.Cfg.NodeID
				changed = true
			}
		}
	}
	keys := slices.Sorted(maps.Keys(gp.wantMoves))
	for _, k := range keys {
		to := gp.wantMoves[k]
		if next.masterOf([]byte(k), gp.home([]byte(k), c.Region)) != c.Cfg.NodeID || !glStayer(gp.p, to) {
			delete(gp.wantMoves, k) // not ours any more (or the target is moving): nothing to give away
			delete(gp.migrating, k)
			continue
		}
		if next.resolve(gp.home([]byte(k), c.Region)) == to {
			delete(next.overrides, k)
		} else {
			next.overrides[k] = to
		}
		changed = true
	}
	c.glBuildMoves(gp, &next)
	if !changed && next.sameMasters(&gp.table) && !gp.wantSeal {
		return nil
	}
	return &next
}

func (c *Engine) glPropose(now time.Time, gp *glPart) {
	value := c.glBuild(gp)
	leftBehind := false
	if value == nil && gp.accepted != nil {
		// Finish an instance another proposer left behind: phase 1 will find its value.
		v := gp.accepted.clone()
		value = &v
		gp.acceptedAt = now
		leftBehind = true
	}
	if value == nil {
		return
	}
	value.hlc = c.Clock.Now(now)
	value.config = 0 // set when chosen, to the choosing ballot's configuration
	round := max(gp.promised.round, gp.acceptedBallot.round, gp.seenRound)
	gp.prop = &glProposal{
		version: value.version, ballot: glBallot{config: gp.config, round: round + 1, node: c.Cfg.NodeID}, value: value, phase: 1,
		promises: map[uint32]*peerpb.GlPromise{}, accepts: map[uint32]bool{},
		deadline: now.Add(c.glRoundTimeout(gp)), grace: now.Add(c.glRoundTimeout(gp) / 2), leftBehind: leftBehind,
	}
	for _, r := range gp.p.Holders() {
		msg := &peerpb.GlPrepare{Keyspace: gp.ks.Spec.Name, Partition: gp.p.ID, Version: value.version, Ballot: ballotToPB(gp.prop.ballot)}
		if r == c.Cfg.NodeID {
			c.glHandlePromise(now, r, c.glPrepare(now, gp, msg))
			continue
		}
		c.Send(r, &peerpb.Envelope{Msg: &peerpb.Envelope_GlPrepare{GlPrepare: msg}})
	}
}

// glRoundTimeout bounds one proposal: a few round trips to the farthest replica.
func (c *Engine) glRoundTimeout(gp *glPart) time.Duration {
	var far time.Duration
	for _, r := range gp.p.Holders() {
		far = max(far, c.RTT(r))
	}
	return 4*far + 200*time.Millisecond
}

// glPrepare is the acceptor's phase 1.
func (c *Engine) glPrepare(now time.Time, gp *glPart, m *peerpb.GlPrepare) *peerpb.GlPromise {
	b := ballotFromPB(m.GetBallot())
	resp := &peerpb.GlPromise{Keyspace: m.GetKeyspace(), Partition: m.GetPartition(), Version: m.GetVersion(), Ballot: m.GetBallot()}
	switch {
	case m.GetVersion() <= gp.table.version:
		resp.Committed = gp.table.toPB(gp.ks.Spec.Name, gp.p.ID)
	case m.GetVersion() > gp.table.version+1:
		// Behind: say nothing; the proposer sends its table when it sees our version.
		resp.Committed = &peerpb.GlTable{Keyspace: m.GetKeyspace(), Partition: m.GetPartition(), Version: gp.table.version}
	case b.config != gp.config:
		// A ballot of another configuration of the partition (a move step one of us has not
		// installed): no promise (gl_move.go).
	case gp.promised.less(b):
		gp.promised = b
		c.glPersist(gp)
		resp.Ok = true
		if gp.accepted != nil && gp.accepted.version == m.GetVersion() {
			resp.AcceptedBallot = ballotToPB(gp.acceptedBallot)
			resp.Accepted = gp.accepted.toPB(gp.ks.Spec.Name, gp.p.ID)
		}
	default:
		resp.Promised = ballotToPB(gp.promised)
	}
	return resp
}

func (c *Engine) glHandlePrepare(now time.Time, from uint32, m *peerpb.GlPrepare) {
	gp := c.glPartOf(m.GetKeyspace(), m.GetPartition())
	if gp == nil || !gp.p.Holds(from) {
		return
	}
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlPromise{GlPromise: c.glPrepare(now, gp, m)}})
}

func (c *Engine) glHandlePromise(now time.Time, from uint32, m *peerpb.GlPromise) {
	gp := c.glPartOf(m.GetKeyspace(), m.GetPartition())
	if gp == nil {
		return
	}
	if t := m.GetCommitted(); t != nil {
		if t.GetVersion() > gp.table.version {
			c.glAdopt(now, gp, t)
		} else if t.GetVersion() < gp.table.version && from != c.Cfg.NodeID {
			c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlCommitTable{GlCommitTable: &peerpb.GlCommitTable{Table: gp.table.toPB(gp.ks.Spec.Name, gp.p.ID)}}})
		}
	}
	pr := gp.prop
	if p := m.GetPromised(); p != nil && ballotFromPB(p).config == gp.config {
		// Refused for a higher promise: the next ballot goes past it (glPropose). Before,
		// a proposer raised its round by one per attempt (every 1.5 s or so) and trailed
		// acceptors whose rounds duelling proposers had raised, for many seconds (the
		// simulator's move-progress check, globlease seed 47 with moves).
		gp.seenRound = max(gp.seenRound, ballotFromPB(p).round)
	}
	if pr == nil || pr.phase != 1 || m.GetVersion() != pr.version || ballotFromPB(m.GetBallot()) != pr.ballot || !m.GetOk() {
		return
	}
	pr.promises[from] = m
	c.glMaybeAccept(now, gp)
}

// glMaybeAccept starts phase 2 of gp's proposal once its promises are a quorum: with the
// value accepted at the highest ballot, if any, else its own (Paxos) — unless the promises
// prove that no value can have been chosen for this version (glNoneChosen). When they do not
// prove it yet and some holders have not answered, it waits for them until half the round
// timeout has passed (glTickProposals calls again): the acceptor whose answer would prove it
// is often the farthest, and without the wait a left-behind value no acceptor admits was
// proposed again at every round.
func (c *Engine) glMaybeAccept(now time.Time, gp *glPart) {
	pr := gp.prop
	if pr == nil || pr.phase != 1 || !c.glQuorum(gp, func(r uint32) bool { return pr.promises[r] != nil }) {
		return
	}
	chosen := pr.value
	best := glBallot{}
	for _, id := range sortedKeys(pr.promises) {
		p := pr.promises[id]
		if p.GetAccepted() != nil && best.less(ballotFromPB(p.GetAcceptedBallot())) {
			best = ballotFromPB(p.GetAcceptedBallot())
			t := glTableFromPB(p.GetAccepted())
			chosen = &t
		}
	}
	if chosen != pr.value && pr.value != nil {
		switch {
		case c.glNoneChosen(gp, pr):
			chosen = pr.value
		case len(pr.promises) < len(gp.p.Holders()) && now.Before(pr.grace):
			return // wait for the other holders' promises
		}
	}
	pr.chosen = chosen
	pr.chosen.config = 0
	pr.phase = 2
	acc := &peerpb.GlAccept{Ballot: ballotToPB(pr.ballot), Table: chosen.toPB(gp.ks.Spec.Name, gp.p.ID), Completing: chosen != pr.value || pr.leftBehind}
	for _, r := range gp.p.Holders() {
		if r == c.Cfg.NodeID {
			c.glHandleAccepted(now, r, c.glAccept(now, gp, acc))
			continue
		}
		c.Send(r, &peerpb.Envelope{Msg: &peerpb.Envelope_GlAccept{GlAccept: acc}})
	}
}

// glNoneChosen reports whether the promises of pr prove that no value has been chosen for
// its version, so the proposer may propose its own value instead of the highest accepted one.
//
// Why it is needed: an acceptor's admission rules make some values unacceptable for as long
// as their reason holds — a failover of a master the acceptors still hear from, or a table
// that gives keys to a moving replica (glAccept, glJointAdmits). A proposer that accepted its
// own such value alone left it behind, every later phase 1 that met it had to propose it
// again, and every acceptor refused it: the partition's table was stuck, and a move waiting
// for its seal never finished (the simulator's move-progress check).
//
// Why it is safe: a value chosen at ballot b was accepted at b by a quorum of b's
// configuration, and an acceptor that accepted reports an accepted value for the version
// ever after (at b or a later ballot). Every quorum of every configuration whose accepted
// values can still matter holds a majority of the old replica set O = p.Replicas: the settled
// configuration's quorums are majorities of O; a joint one's are majorities of O and of the
// new set; the joint configuration of the move that made O (finished: its new set is O) or
// that left O (aborted: its old set is O) likewise; values of configurations before that are
// of versions the move's seal committed (gl_move.go). So if the members of O that promised
// and report an accepted value, plus the members of O that did not promise, are fewer than a
// majority of O, no value was chosen for the version. The members that promised cannot
// accept an older ballot any more.
func (c *Engine) glNoneChosen(gp *glPart, pr *glProposal) bool {
	old := gp.p.Replicas
	could := 0
	for _, r := range old {
		p, promised := pr.promises[r]
		if !promised || p.GetAccepted() != nil {
			could++
		}
	}
	return could < len(old)/2+1
}

// glAccept is the acceptor's phase 2, with the failover rule (see the top of this file).
func (c *Engine) glAccept(now time.Time, gp *glPart, m *peerpb.GlAccept) *peerpb.GlAccepted {
	b := ballotFromPB(m.GetBallot())
	t := glTableFromPB(m.GetTable())
	resp := &peerpb.GlAccepted{Keyspace: gp.ks.Spec.Name, Partition: gp.p.ID, Version: t.version, Ballot: m.GetBallot()}
	if t.version != gp.table.version+1 {
		if t.version <= gp.table.version {
			resp.Committed = gp.table.toPB(gp.ks.Spec.Name, gp.p.ID)
		}
		resp.Reason = "version"
		return resp
	}
	if b.config != gp.config {
		resp.Reason = "configuration"
		return resp
	}
	if b.less(gp.promised) {
		resp.Reason = "ballot"
		return resp
	}
	if why := c.glJointAdmits(gp, &t); why != "" {
		resp.Reason = why
		return resp
	}
	for _, x := range c.glLosers(gp, &t) {
		if x == t.initiator {
			continue
		}
		if x == c.Cfg.NodeID && c.glMasterLeaseValid(gp, now) {
			resp.Reason = "self is an acting master"
			return resp
		}
		if last, ok := gp.lastAckTo[x]; ok && now.Before(last.Add(gp.opts.ElectionTimeout)) {
			if m.GetCompleting() {
				// The value may have been chosen and must be completed, so refusing it for
				// as long as X's lease may rest on this acceptor would stall the partition's
				// table for good while X lives (a failover proposed during a partition that
				// healed, left accepted; the simulator's move-progress check, globlease
				// seed 84 with moves). Stop renewing X's lease here instead: once
				// electionTimeout has passed since the last acknowledgement, the proposer's
				// next attempt is accepted. Safe: withholding acknowledgements only
				// shortens leases.
				gp.withholdAck[x] = now.Add(4 * gp.opts.ElectionTimeout)
			}
			resp.Reason = fmt.Sprintf("acknowledged node %d %v ago", x, now.Sub(last))
			return resp
		}
		if now.Before(gp.installedAt.Add(gp.opts.ElectionTimeout)) {
			resp.Reason = "restarted or installed the keyspace recently"
			return resp
		}
	}
	gp.promised = b
	gp.acceptedBallot = b
	gp.accepted = &t
	gp.acceptedAt = now
	c.glPersist(gp)
	resp.Ok = true
	return resp
}

// glLosers lists the nodes that master fewer keys under next than under the committed table.
func (c *Engine) glLosers(gp *glPart, next *glTable) []uint32 {
	lost := map[uint32]bool{}
	cur := &gp.table
	for _, h := range gp.homes(c.Region) {
		if a, b := cur.resolve(h), next.resolve(h); a != b {
			lost[a] = true
		}
	}
	for k := range cur.overrides {
		home := gp.home([]byte(k), c.Region)
		if a, b := cur.masterOf([]byte(k), home), next.masterOf([]byte(k), home); a != b {
			lost[a] = true
		}
	}
	for k := range next.overrides {
		home := gp.home([]byte(k), c.Region)
		if a, b := cur.masterOf([]byte(k), home), next.masterOf([]byte(k), home); a != b {
			lost[a] = true
		}
	}
	return sortedKeys(lost)
}

func (c *Engine) glHandleAccept(now time.Time, from uint32, m *peerpb.GlAccept) {
	gp := c.glPartOf(m.GetTable().GetKeyspace(), m.GetTable().GetPartition())
	if gp == nil || !gp.p.Holds(from) {
		return
	}
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlAccepted{GlAccepted: c.glAccept(now, gp, m)}})
}

func (c *Engine) glHandleAccepted(now time.Time, from uint32, m *peerpb.GlAccepted) {
	gp := c.glPartOf(m.GetKeyspace(), m.GetPartition())
	if gp == nil {
		return
	}
	if t := m.GetCommitted(); t != nil && t.GetVersion() > gp.table.version {
		c.glAdopt(now, gp, t)
	}
	pr := gp.prop
	if pr == nil || pr.phase != 2 || m.GetVersion() != pr.version || ballotFromPB(m.GetBallot()) != pr.ballot || !m.GetOk() {
		return
	}
	pr.accepts[from] = true
	if !c.glQuorum(gp, func(r uint32) bool { return pr.accepts[r] }) {
		return
	}
	pr.chosen.config = pr.ballot.config
	chosen := pr.chosen.toPB(gp.ks.Spec.Name, gp.p.ID)
	gp.prop = nil
	for _, r := range gp.p.Holders() {
		if r != c.Cfg.NodeID {
			c.Send(r, &peerpb.Envelope{Msg: &peerpb.Envelope_GlCommitTable{GlCommitTable: &peerpb.GlCommitTable{Table: chosen}}})
		}
	}
	c.glAdopt(now, gp, chosen)
	// What we wanted may not be what was chosen (another proposer's value won): the next
	// tick proposes again on top of the new table.
}

func (c *Engine) glHandleCommitTable(now time.Time, from uint32, m *peerpb.GlCommitTable) {
	gp := c.glPartOf(m.GetTable().GetKeyspace(), m.GetTable().GetPartition())
	if gp == nil || !gp.p.Holds(from) {
		return
	}
	c.glAdopt(now, gp, m.GetTable())
}
