package globlease

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
)

// Replica moves under GlobLease (docs/elasticity.md, "Under each protocol"; ElasCass 4.2 moves
// a replica with two ownership tokens, Meridian stages it in the cluster metadata: move_start,
// the new replica catches up, move_finish or move_abort).
//
// Data. The quorum family's machinery does the copying (coord/move.go): the new replica (Add)
// pulls an sstable snapshot of the range from the move's source, and every old replica runs
// catch-up rounds at the version T0 it had reached when it applied the move, until Add holds
// what a majority of the old set (and every live old replica) held. GlobLease adds what its
// own writes need for that argument to hold: a master writes Add as well as the old replicas
// from move_start on, an update carries the master's move epoch and a replica that has applied
// a later move refuses it (so a write acknowledged by an old replica after its T0 comes from a
// master that knows of the move), and an acknowledgement counts towards a write's majorities
// only if its sender stored the record as a member of the partition (GlUpdateAck.not_stored).
//
// Configurations. A partition's configuration number is 2·MoveEpoch+1 while its replicas are
// settled and 2·(move ID) while a move is in progress (glConfigOf): it grows with every
// move_start, move_finish and move_abort. In the joint configuration of a move, every majority
// GlobLease counts — the Paxos quorums that choose mastership tables, the heartbeat
// acknowledgements behind a master lease, a write's acknowledgements, a recovery's replies — is
// a majority of the old set AND of the new set (glQuorum), as in Raft's joint consensus. Every
// Paxos ballot carries its proposer's configuration and orders by it first; an acceptor
// answers prepares and accepts, and acknowledges heartbeats, only of its own configuration.
//
// Why that is safe. This is Vertical Paxos (Lamport, Malkhi, Zhou 2009) with the cluster
// metadata as the configuration master: each configuration's ballots are above the previous
// one's, and a new configuration may rely on the previous one only after a state transfer.
// Quorums of the joint configuration meet those of the configuration before it (both contain
// a majority of the old set) and after it (both contain a majority of the new set); only the
// old set's and the new set's majorities may miss each other (they share all replicas but the
// moving one). Two rules close that gap, both checked before Add reports that it has caught
// up, which is what the node proposing move_finish waits for:
//
//   - Seal: Add knows a table version that was chosen by a ballot of the joint configuration
//     (GlTable.config). Its acceptors, a majority of the old set among them, had applied the
//     move when they accepted it and refuse every ballot of the old configuration since, and
//     they accept a version only on top of the previous one: so no ballot of the old
//     configuration chooses a version above it, the version itself is what the old
//     configuration chose if it chose one (joint ballots are higher and their phase 1 meets
//     every old majority), and a majority of the new set holds it or a later version — which
//     is what a proposer of the new configuration meets in its phase 1.
//   - Consistency: under that table, every key has the same master whether the node computing
//     it uses the old map or the new one (the home replica of the moving replica's region can
//     differ between them), and that master is a replica that stays (glConsistent). So
//     move_finish moves no mastership by itself: masters change only by table versions, and
//     those obey the existing rules (a migration is started by the master that gives the keys
//     away, a failover waits electionTimeout after the acceptor last acknowledged the old
//     master). Once a joint table is consistent, acceptors of the joint configuration accept
//     only consistent tables (glJointAdmits), so it stays so until the move ends.
//
// Master leases across move_finish: a lease of the joint configuration rests on a majority of
// the new set, which every majority of the new configuration meets, so the failover rule covers
// it. A lease of the configuration before the move rests on a majority of the old set, which a
// majority of the new configuration may miss; but by the time Add reports, a majority of the old
// set has applied the move (the catch-up rounds ran on them) and acknowledges no heartbeat of
// the old configuration, so such a lease ends within masterLease of the report. An acceptor
// therefore takes keys from a master (failover) only electionTimeout after it installed its
// current configuration, as after a restart (glConfigure).
//
// Masters. The leaving replica (Remove) stops acting as soon as it applies move_start: it
// starts no new operation, lets the writes it has in flight commit (for at most two round
// timeouts), then commits nothing more of the partition and proposes the table that gives every
// key it masters to a replica that stays (of its region if the keyspace has one there), as the
// thesis's migration does key by key (liu-thesis 4.1.3, "Master Migration and Failure
// Recovery": the old master stops acting first, so no wait is needed). The new master takes the
// keys as after any migration: it revokes or outwaits the old master's leases and recovers each
// key's committed version before it serves it. If Remove is down, the other replicas take its
// keys by failover. Add masters nothing while the move lasts (it proposes only the seal, which
// moves no key). The home replicas that lost their keys this way are recorded in the table
// (GlTable.handed_over); once the replicas settle (finish or abort) the substitute hands their
// keys back to the home replica of the settled map, by the same migration.
//
// Leases. Add holds no lease, hosts no hot key and serves no read until the move finishes: it
// is not a replica of the old set, so no master grants it a lease, and it refuses the leases a
// host offered it as an affiliated node before the move. Remove keeps its leases (it is a
// replica of the old set) until it applies move_finish; then it drops them and stops granting
// secondary leases. Masters keep the records of every lease they granted, Remove's included,
// so a write still updates Remove (which acknowledges without a lease, ending the record) or
// outwaits its lease; a new master's revocation covers every node. Secondary leases Remove
// hosted for affiliated nodes: before Remove acknowledges an update it updates or outwaits
// them, as a member or after it left.

// glConfigOf is partition p's configuration number: 2·move ID while a move is in progress,
// 2·MoveEpoch+1 once it is settled; it grows with every move step.
//
// A split or merge starts a new generation (gl_split.go) numbered like a move, by its metadata
// command's ID, so its configuration 2·Generation+1 is above every configuration before it,
// and a move after it (a later ID) above it again.
func glConfigOf(p *placement.Partition) uint64 {
	if p.Move != nil {
		return 2 * p.Move.ID
	}
	return 2*max(p.MoveEpoch, p.Generation) + 1
}

// MoveMutations are GlobLease's deliberately broken replica moves.
var MoveMutations = map[string]string{
	"move-master-stays":   "the leaving replica does not hand its keys over before the move finishes (and the new replica reports without waiting for a consistent table), so move_finish moves masterships implicitly while the old master still acts",
	"move-ignores-leases": "a write during or after a move neither updates nor outwaits the leaving replica's valid lease",
	"move-new-set-only":   "during a move, table choices, master leases, write commits and recoveries count a majority of the new replica set only, not a majority of the old set too, so the new replica counts before it has caught up",
}

// MoveMutationHints run the move mutations with frequent moves and spare nodes to move to.
var MoveMutationHints = map[string]engine.SimHints{
	"move-master-stays":   {NodesPerRegion: 2, MoveEvery: 150 * time.Millisecond},
	"move-ignores-leases": {NodesPerRegion: 2, MoveEvery: 150 * time.Millisecond, ReadFraction: 0.8},
	// On lan-3 it is caught within ten seeds (sequential consistency). On the default WAN
	// topology it took 133 seeds, and none in 200 once moves stopped stalling (the
	// move-progress fixes): the interleaving it needs is rarer where round trips differ.
	"move-new-set-only": {NodesPerRegion: 2, MoveEvery: 100 * time.Millisecond, Faults: []string{"partition", "loss", "crash"},
		PartitionEvery: time.Second, Linearizability: true, Topology: "lan-3"},
}

// glQuorum reports whether the nodes for which has is true are a majority of every replica set
// of gp: the replicas, and during a move also the new set (joint majorities).
func (c *Engine) glQuorum(gp *glPart, has func(uint32) bool) bool {
	for _, set := range c.glSets(gp) {
		n := 0
		for _, r := range set {
			if has(r) {
				n++
			}
		}
		if n < len(set)/2+1 {
			return false
		}
	}
	return true
}

// glSets are the replica sets whose majorities gp's decisions need.
func (c *Engine) glSets(gp *glPart) [][]uint32 {
	sets := gp.p.ReplicaSets()
	if len(sets) > 1 && c.Cfg.Mutation == "move-new-set-only" {
		return sets[1:] // broken on purpose: the new set alone decides
	}
	return sets
}

// glDescribeQuorum says how far has got towards gp's quorum: "1 of 2 of the old replica set
// (no ack from [n3]), 2 of 2 of the new set".
func (c *Engine) glDescribeQuorum(gp *glPart, has func(uint32) bool) string {
	sets := c.glSets(gp)
	var parts []string
	for i, set := range sets {
		n := 0
		var missing []uint32
		for _, r := range set {
			if has(r) {
				n++
			} else {
				missing = append(missing, r)
			}
		}
		s := fmt.Sprintf("%d of %d", n, len(set)/2+1)
		if len(sets) > 1 {
			s += [...]string{" of the old replica set", " of the new replica set"}[min(i, 1)]
		}
		if len(missing) > 0 {
			s += fmt.Sprintf(" (no ack from %v)", c.NodeNames(missing))
		}
		parts = append(parts, s)
	}
	return joinAnd(parts)
}

func joinAnd(parts []string) string {
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out
}

// glStayer reports whether node is a replica of gp that stays through its move (every replica
// when none is in progress).
func glStayer(p *placement.Partition, node uint32) bool {
	if !p.HasReplica(node) {
		return false
	}
	return p.Move == nil || node != p.Move.Remove
}

// homeIn is the replica of replicas in key's home region (the lowest node ID there; the lowest
// of all when the region has none), as glPart.home computes it for the map's replicas.
func (gp *glPart) homeIn(key []byte, replicas []uint32, region map[uint32]string) uint32 {
	want := gp.opts.HomeRegionOf(key)
	best := uint32(0)
	for _, r := range replicas {
		if region[r] == want && (best == 0 || r < best) {
			best = r
		}
	}
	if best == 0 {
		best = slices.Min(replicas)
	}
	return best
}

// homeKeys are one key of each stretch of the partition whose keys share a home region: the
// partition's start, and every home range that starts inside it.
func (gp *glPart) homeKeys() [][]byte {
	out := [][]byte{gp.p.Start}
	for _, r := range gp.opts.HomeRanges {
		if k := []byte(r.Start); gp.p.Contains(k) && string(k) != string(gp.p.Start) {
			out = append(out, k)
		}
	}
	return out
}

// glHomePair is the home replica of a stretch of keys under the old map and the new one.
type glHomePair struct{ old, new uint32 }

// homePairs lists, for a partition moving a replica, the home replicas of each stretch of keys
// under the old set and the new one (they differ only in the moving replica's region).
func (gp *glPart) homePairs(region map[uint32]string) []glHomePair {
	var out []glHomePair
	for _, k := range gp.homeKeys() {
		hp := glHomePair{gp.homeIn(k, gp.p.Replicas, region), gp.homeIn(k, gp.p.NewReplicas(), region)}
		if !slices.Contains(out, hp) {
			out = append(out, hp)
		}
	}
	return out
}

// glConsistent reports whether table t gives every key of gp, moving a replica, the same master
// under the old map and the new one, and only to replicas that stay.
func (c *Engine) glConsistent(gp *glPart, t *glTable) bool {
	if gp.p.Move == nil {
		return true
	}
	for _, hp := range gp.homePairs(c.Region) {
		m := t.resolve(hp.old)
		if m != t.resolve(hp.new) || !glStayer(gp.p, m) {
			return false
		}
	}
	for _, m := range t.overrides {
		if !glStayer(gp.p, m) {
			return false
		}
	}
	return true
}

func setResolve(t *glTable, home, master uint32) {
	if home == master {
		delete(t.subst, home)
		return
	}
	t.subst[home] = master
}

// glNormalize makes next, a table proposed while gp moves a replica, give the keys homed at the
// new map's home replicas to the same masters as under the old map, and — with successor set —
// gives the keys of the replicas that do not stay (the leaving one handing over, or a failover
// of it) to successor. Keys that still have a master that does not stay are left alone: only
// the leaving replica itself (or a failover) may take them (glJointAdmits).
func (c *Engine) glNormalize(gp *glPart, next *glTable, successor uint32) {
	mv := gp.p.Move
	if mv == nil {
		return
	}
	for _, hp := range gp.homePairs(c.Region) {
		m := next.resolve(hp.old)
		if !glStayer(gp.p, m) {
			if successor == 0 {
				continue
			}
			m = successor
		}
		setResolve(next, hp.old, m)
		setResolve(next, hp.new, m)
		// The home replicas that do not master their own keys because of the move get them
		// back once the replicas settle: the leaving one (if the move is aborted) and the new
		// map's home (once it finishes).
		if hp.old == mv.Remove && m != hp.old {
			next.handed[hp.old] = true
		}
		if hp.new != hp.old && m != hp.new {
			next.handed[hp.new] = true
		}
	}
	if successor != 0 {
		for _, k := range slices.Sorted(maps.Keys(next.overrides)) {
			if !glStayer(gp.p, next.overrides[k]) {
				next.overrides[k] = successor
			}
		}
	}
}

// glJointAdmits is the acceptor's rule for a table proposed while gp moves a replica: it gives
// no key to a replica that does not stay, and once the committed table is consistent (the old
// and the new map agree on every master), so is the next one. "" admits.
//
// Before the seal (the committed table was chosen in an earlier configuration), a table that
// gives keys to the leaving replica is admitted: it can only be a value a ballot of the
// configuration before the move accepted, perhaps chosen, that a proposer of the joint one
// found in its phase 1 and must complete (a failover the leaving replica proposed just before
// it applied the move, accepted by every old replica but committed by none). Refusing it
// stalled the partition's table, and the move, for ever. The leaving replica commits nothing
// once it applies the move and hands such keys on to a successor (glBuildMoves), and the seal
// that follows needs a consistent table, so this changes nothing the seal argues from.
func (c *Engine) glJointAdmits(gp *glPart, next *glTable) string {
	mv := gp.p.Move
	if mv == nil {
		return ""
	}
	cur := &gp.table
	sealed := cur.config == gp.config
	admits := func(from, to uint32) bool {
		return from == to || glStayer(gp.p, to) || (!sealed && to == mv.Remove)
	}
	for _, h := range gp.homes(c.Region) {
		if a, b := cur.resolve(h), next.resolve(h); !admits(a, b) {
			return fmt.Sprintf("gives the keys homed at node %d to node %d, which is moving", h, b)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(next.overrides)) {
		home := gp.home([]byte(k), c.Region)
		if a, b := cur.masterOf([]byte(k), home), next.overrides[k]; !admits(a, b) {
			return fmt.Sprintf("gives key %q to node %d, which is moving", k, b)
		}
	}
	if sealed && c.glConsistent(gp, cur) && !c.glConsistent(gp, next) {
		return "the committed table gives every key the same master under the old and the new replicas; this one does not"
	}
	return ""
}

// glSuccessor is the replica that takes the keys this leaving node masters: a replica that
// stays, of this node's region if there is one, alive if one is, lowest ID first.
func (c *Engine) glSuccessor(gp *glPart) uint32 {
	var cands []uint32
	for _, r := range gp.p.Replicas {
		if glStayer(gp.p, r) && r != c.Cfg.NodeID {
			cands = append(cands, r)
		}
	}
	rank := func(r uint32) int {
		n := 0
		if c.Region[r] != c.SelfRegion {
			n += 2
		}
		if !c.Alive(r) {
			n++
		}
		return n
	}
	slices.SortFunc(cands, func(a, b uint32) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return cmp.Compare(ra, rb)
		}
		return cmp.Compare(a, b)
	})
	if len(cands) == 0 {
		return 0
	}
	return cands[0]
}

// glConfigure brings gp in line with its partition's configuration in the installed map (a
// move started, finished or was aborted; or gp is new).
func (c *Engine) glConfigure(now time.Time, gp *glPart) {
	cfg := glConfigOf(gp.p)
	if gp.config == cfg {
		return
	}
	first := gp.config == 0
	gp.config = cfg
	gp.seenRound = 0 // rounds of another configuration
	self := c.Cfg.NodeID
	mv := gp.p.Move
	gp.joining = mv != nil && mv.Add == self
	leaving := mv != nil && mv.Remove == self && c.Cfg.Mutation != "move-master-stays"
	if !first {
		// A new configuration: failovers wait electionTimeout from now, as after a restart (a
		// master lease of the configuration before the last one may rest on replicas outside
		// this configuration's majorities; see the top of this file). Acknowledgements and
		// ballots of the old configuration no longer count.
		gp.installedAt = now
		clear(gp.ackedAt)
		gp.prop = nil
		gp.nextPropAt = time.Time{}
		gp.wantSeal = false
		for h := range gp.returning {
			delete(gp.returning, h)
		}
		// Migrations to a node that is now moving are abandoned (their proposals, of the old
		// configuration, cannot be chosen by acceptors of this one).
		for k, to := range gp.migrating {
			if mv != nil && !glStayer(gp.p, to) {
				delete(gp.migrating, k)
				delete(gp.wantMoves, k)
			}
		}
	}
	switch {
	case leaving && !gp.leaving:
		gp.leaving, gp.leaveAt, gp.locked = true, now, false
	case !leaving:
		gp.leaving, gp.locked = false, false
	}
	if gp.joining {
		// The new replica serves nothing until the move finishes: not what it holds as an
		// affiliated node of a hot key either (its host keeps the record and updates it).
		pid := glPartID{gp.ks.Spec.Name, gp.p.ID}
		for _, id := range slices.Sorted(maps.Keys(c.gl.aff)) {
			if c.gl.aff[id].part == pid {
				delete(c.gl.aff, id)
			}
		}
		for _, id := range slices.Sorted(maps.Keys(c.gl.leases)) {
			if c.gl.leases[id].part == pid {
				delete(c.gl.leases, id)
			}
		}
	}
}

// glDropPart forgets a partition this node no longer holds (its move finished and it was the
// leaving replica, or aborted and it was the new one): key states, and the leases it held as a
// replica (it stops serving them; masters still count it as a holder until it acknowledges an
// update without a lease or the record runs out). Secondary leases it hosted stay in hostAff:
// updates still pass through it to those affiliated nodes until they run out.
//
// why describes the departure, a format taking the partition ID and the keyspace name.
// Operations that had not run yet are returned, to run again under the new map
// (glRequeue): they were not applied, so nothing is lost by running them elsewhere.
func (c *Engine) glDropPart(now time.Time, gp *glPart, why string) (notRun []*glOp) {
	pid := glPartID{gp.ks.Spec.Name, gp.p.ID}
	where := fmt.Sprintf(why, gp.p.ID, gp.ks.Spec.Name)
	for _, id := range c.keyIDsOf(gp) {
		k := c.gl.keys[id]
		if w := k.write; w != nil {
			delete(c.gl.writes, w.id)
			for _, op := range w.waiters {
				c.glFailOp(op, errs.New(errs.Timeout, "globlease: this node %s during the write of key %q; it may or may not have been applied", where, k.key))
			}
		}
		if k.recovery != nil {
			delete(c.gl.fetches, k.recovery.id)
		}
		notRun = append(notRun, k.moveWait...)
		for _, op := range k.queue {
			if !op.done {
				notRun = append(notRun, op)
			}
		}
		delete(c.gl.waiting, id)
		delete(c.gl.keys, id)
	}
	for _, id := range slices.Sorted(maps.Keys(c.gl.leases)) {
		if c.gl.leases[id].part == pid {
			delete(c.gl.leases, id)
		}
	}
	if c.gl.parts[pid] == gp {
		delete(c.gl.parts, pid)
	}
	c.gl.partList = slices.DeleteFunc(c.gl.partList, func(p *glPart) bool { return p == gp })
	return notRun
}

// glRequeue runs operations a dropped partition state had not run yet under the current map:
// at this node if it masters the key now, otherwise at the key's master (or a replica that
// knows it).
func (c *Engine) glRequeue(now time.Time, ops []*glOp) {
	for _, op := range ops {
		ks, ok := c.Pmap.Keyspace(op.req.Keyspace)
		if !ok || !isGL(ks) {
			c.glFailOp(op, errs.New(errs.NotFound, "globlease: keyspace %q is gone", op.req.Keyspace))
			continue
		}
		p := ks.Lookup(op.key())
		op.part = p.ID
		gp := c.glPartOf(ks.Spec.Name, p.ID)
		switch {
		case gp != nil && gp.masterOf(op.key(), c.Region) == c.Cfg.NodeID:
			c.glMasterOp(now, gp, op)
		case gp != nil:
			c.glRedirectOp(now, op, gp.masterOf(op.key(), c.Region))
		default:
			c.glRedirectOp(now, op, c.ByDistance(p.Replicas)[0])
		}
	}
}

// glBusy reports whether this node, as master, has a write or a recovery of gp in flight on a
// key for which pred holds.
func (c *Engine) glBusy(gp *glPart, pred func(k *glKey) bool) bool {
	for _, k := range c.gl.writes {
		if k.gp == gp && pred(k) {
			return true
		}
	}
	for _, k := range c.gl.fetches {
		if k.gp == gp && pred(k) {
			return true
		}
	}
	return false
}

// glSealable reports whether the new replica can seal the joint configuration now: the
// committed table is consistent, or becomes so once normalised (glNormalize without a
// successor). The second case is a leaving replica that masters nothing (its home's keys were
// substituted to a stayer before the move): it has nothing to hand over and proposes no
// table, yet the new map's home in its region differs from the old one, so the committed
// table is not consistent. Before, nobody proposed the table that makes it so and the move
// never finished (the simulator's move-progress check, globlease seed 1 with moves).
func (c *Engine) glSealable(gp *glPart) bool {
	if c.glConsistent(gp, &gp.table) {
		return true
	}
	next := gp.table.clone()
	c.glNormalize(gp, &next, 0)
	return c.glConsistent(gp, &next)
}

// glLeaveWait bounds how long a leaving master lets its writes in flight commit before it
// proposes the handover (they fail as ambiguous if they have not: it commits nothing after).
func (c *Engine) glLeaveWait(gp *glPart) time.Duration { return 2 * c.glRoundTimeout(gp) }

// glTickMoveRoles drives this node's roles in the moves of its partitions: the leaving replica
// hands its keys over, the new replica seals the joint configuration, and once the replicas
// settle a substitute hands moved homes back.
func (c *Engine) glTickMoveRoles(now time.Time) {
	self := c.Cfg.NodeID
	for _, gp := range c.gl.partList {
		switch {
		case gp.leaving && !gp.locked:
			if c.glBusy(gp, func(*glKey) bool { return true }) && now.Sub(gp.leaveAt) < c.glLeaveWait(gp) {
				continue
			}
			gp.locked = true
		case gp.joining:
			// Seal, or make the sealed table consistent: a table chosen in the joint
			// configuration need not be (a failover completed there, say), and nobody else
			// proposes the one that is when the leaving replica masters nothing.
			gp.wantSeal = gp.prop == nil && (gp.table.config != gp.config || !c.glConsistent(gp, &gp.table)) && c.glSealable(gp)
		case gp.p.Move == nil && !gp.leaving:
			c.glTickReturns(now, gp, self)
		}
	}
}

// glReturn is a home whose keys this node hands back (a move is over).
type glReturn struct {
	since  time.Time
	locked bool // proposed: this node commits nothing more of the home's keys
}

// glTickReturns starts and advances handing moved homes back to their home replicas.
func (c *Engine) glTickReturns(now time.Time, gp *glPart, self uint32) {
	for _, h := range slices.Sorted(maps.Keys(gp.table.handed)) {
		if _, ok := gp.returning[h]; ok || gp.table.subst[h] != self || !gp.p.HasReplica(h) || h == self || !c.Alive(h) {
			continue
		}
		if !slices.Contains(gp.homes(c.Region), h) {
			continue
		}
		gp.returning[h] = &glReturn{since: now}
	}
	for _, h := range slices.Sorted(maps.Keys(gp.returning)) {
		r := gp.returning[h]
		if gp.table.subst[h] != self {
			delete(gp.returning, h)
			continue
		}
		if r.locked {
			continue
		}
		busy := c.glBusy(gp, func(k *glKey) bool {
			_, over := gp.table.overrides[string(k.key)]
			return !over && gp.home(k.key, c.Region) == h
		})
		if busy && now.Sub(r.since) < c.glLeaveWait(gp) {
			continue
		}
		r.locked = true
	}
}

// glGivingBack reports whether key's keys are being handed back to its home by this node.
func (gp *glPart) glGivingBack(key []byte, region map[uint32]string) (giving, locked bool) {
	if len(gp.returning) == 0 {
		return false, false
	}
	if _, over := gp.table.overrides[string(key)]; over {
		return false, false
	}
	r, ok := gp.returning[gp.home(key, region)]
	if !ok {
		return false, false
	}
	return true, r.locked
}

// glWantsTable reports whether this node has a move role that needs a new table version.
func (c *Engine) glWantsTable(gp *glPart) bool {
	if gp.wantSeal || (gp.locked && gp.mastersAny(c.Cfg.NodeID, c.Region)) {
		return true
	}
	for _, r := range gp.returning {
		if r.locked {
			return true
		}
	}
	return false
}

// glBuildMoves applies this node's move roles to next (glBuild): the handover of a leaving
// replica, the hand-back of settled homes, the normalisation of a joint table, and the removal
// of entries for nodes that are no longer replicas.
func (c *Engine) glBuildMoves(gp *glPart, next *glTable) {
	self := c.Cfg.NodeID
	if mv := gp.p.Move; mv != nil {
		successor := uint32(0)
		switch {
		case gp.locked:
			successor = c.glSuccessor(gp)
		case gp.wantFailover[mv.Remove] && glStayer(gp.p, self):
			successor = self
		}
		c.glNormalize(gp, next, successor)
		return
	}
	for _, h := range slices.Sorted(maps.Keys(gp.returning)) {
		if r := gp.returning[h]; r.locked && next.subst[h] == self {
			delete(next.subst, h)
			delete(next.handed, h)
		}
	}
	for h := range next.handed {
		if !gp.p.HasReplica(h) || next.resolve(h) == h {
			delete(next.handed, h)
		}
	}
	for h := range next.subst {
		if !gp.p.HasReplica(h) {
			delete(next.subst, h)
		}
	}
}

// glMayReport decides whether the new replica's report that it has caught up (coord's
// engine.ReportMoveCaughtUp) may go out: besides the data, GlobLease needs a table chosen in
// the joint configuration that is consistent (the top of this file).
func (c *Engine) glMayReport(r engine.Report) bool {
	if c.gl == nil || c.Pmap == nil {
		return false
	}
	ks, ok := c.Pmap.Keyspace(r.Keyspace)
	if !ok || !isGL(ks) {
		return true
	}
	if c.Cfg.Mutation == "move-master-stays" {
		return true // broken on purpose: the data alone decides
	}
	gp := c.glPartOf(r.Keyspace, r.Partition)
	if gp == nil || gp.p.Move == nil || gp.p.Move.ID != r.MoveID || !gp.joining {
		return false
	}
	return gp.table.config == gp.config && c.glConsistent(gp, &gp.table)
}

// Ready returns the engine's output, holding back a new replica's caught-up report until
// GlobLease's own conditions hold (glMayReport; coord repeats the report every second).
func (c *Engine) Ready() engine.Ready {
	rd := c.Core.Ready()
	if len(rd.Reports) == 0 {
		return rd
	}
	kept := rd.Reports[:0]
	for _, r := range rd.Reports {
		if r.Kind == engine.ReportMoveCaughtUp && !c.glMayReport(r) {
			c.glCounters.ReportsHeld.Add(1)
			continue
		}
		kept = append(kept, r)
	}
	rd.Reports = kept
	return rd
}

// MoveState is a node's GlobLease view of a partition that moves a replica (tests, traces).
type MoveState struct {
	Config             uint64
	Joining, Leaving   bool
	Locked             bool
	TableVersion       uint64
	TableConfig        uint64
	Consistent         bool
	MastersAny         bool
	Returning          []uint32
	HandedOver         []uint32
	MasterOfPartStart  uint32
	MasterLeaseIsValid bool
}

// MoveStateOf returns this node's view of partition part of keyspace ks at now (ok false: it
// holds no GlobLease state for it).
func (c *Engine) MoveStateOf(now time.Time, ks string, part uint32) (MoveState, bool) {
	if c.gl == nil {
		return MoveState{}, false
	}
	gp := c.glPartOf(ks, part)
	if gp == nil {
		return MoveState{}, false
	}
	return MoveState{
		Config: gp.config, Joining: gp.joining, Leaving: gp.leaving, Locked: gp.locked,
		TableVersion: gp.table.version, TableConfig: gp.table.config, Consistent: c.glConsistent(gp, &gp.table),
		MastersAny: gp.mastersAny(c.Cfg.NodeID, c.Region), Returning: slices.Sorted(maps.Keys(gp.returning)),
		HandedOver: slices.Sorted(maps.Keys(gp.table.handed)), MasterOfPartStart: gp.masterOf(gp.p.Start, c.Region),
		MasterLeaseIsValid: c.glMasterLeaseValid(gp, now),
	}, true
}

// keyIDsOf lists, sorted (deterministic order), the IDs of the key states of partition gp.
func (c *Engine) keyIDsOf(gp *glPart) []string {
	ids := make([]string, 0)
	for id, k := range c.gl.keys {
		if k.gp == gp {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
