package globlease

import (
	"bytes"
	"maps"
	"slices"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/replication/coord"
)

// Splits and merges of GlobLease partitions (ElasCass 3.1 on GlobLease's per-partition state;
// docs/elasticity.md, "Under each protocol").
//
// A partition's mastership table is one Paxos-chosen sequence of versions (gl_table.go), and
// its masters act under master leases acknowledged by a majority of its replicas. Neither can
// be cut in two or joined in place: two partitions' tables are independent Paxos instances,
// and nodes install a new map each at its own moment. So a split or merge starts a new
// *generation* of each resulting partition (placement.Partition.Generation, the metadata
// command's ID): a new configuration in the Vertical Paxos sense of gl_move.go, whose
// configuration number is above every one before it (glConfigOf), with a fresh table — every
// key mastered by its home replica — that every node derives from the map alone. Nothing is
// copied between generations, so nothing can be copied inconsistently; the rules below make
// the change safe, and the ordinary failover handles a home replica that is down.
//
// One master per key. An acceptor that installs a generation stops acknowledging the
// heartbeats of the one before (configurations differ), so an old master's lease ends within
// masterLease of the last old acknowledgement. A master of the new generation acts only on a
// majority's acknowledgements of the new generation, which meets that old majority. So an
// acceptor that may have backed an old master whose keys the new table gives to someone else
// withholds its acknowledgements of the new generation for electionTimeout after installing
// it (the fence, as a restarted acceptor waits before a failover): its table of an old
// partition overlapping the new range substitutes a home, moves a key of the range, hands a
// home over, or it has accepted a table not yet committed. An acceptor whose old tables all
// name the home replicas for the range backed only masters that the new table names too —
// the same nodes, which dropped their old state when they installed — since a later table
// taking keys from a master is chosen only after that master stopped acting (gl_table.go's
// migration and failover rules). That is the common case, and it needs no wait. The fence
// is persisted with the acceptor state, and after a restart an acceptor without its state
// of the current generation fences too.
//
// No lease of an old generation outlives the change unseen. A node that installs a new
// generation drops every lease and affiliated entry of the partitions it supersedes, and
// accepts a lease (a grant with a read, an update or a secondary lease) only from a sender of
// its own generation of the key's partition (GlUpdate.generation, GlForwardReply.generation).
// A new master, once its master lease of the new generation first holds — by then every old
// master of its keys has stopped granting — starts a conservative period (gl_master.go):
// until each node has acknowledged a revocation of the generation, which a node does only
// once it has installed it, or the longest lease has run out, every node may hold a lease.
//
// Committed data. A master's writes in flight when it installs a generation finish under the
// old one (glRetire): they commit only under the old master lease, which ends within
// masterLease as acceptors stop acknowledging the old generation, so before any other node
// masters the keys under the new one; and this node serves a key under the new generation
// only once its old write is over (committed, or failed as ambiguous at the deadline). Its
// operations that had not run, run again under the new map. A new master recovers each key (a
// majority read and an active rewrite of the newest version) before it serves it, as after any
// change of master.

// SplitMutations are GlobLease's deliberately broken splits and merges that the simulator
// must catch. A third, "split-without-fence" (an acceptor acknowledges a new generation's
// master at once, even where its old table substituted a home or moved a key, while the old
// master may still act), is caught by the one-master invariant in TestSplitWithoutFenceIsCaught:
// the simulator's runs make its interleaving (a failover, the failed node back, a split
// installed by all but the substitute) too rarely for a fixed seed budget.
var SplitMutations = map[string]string{
	"split-skips-revocation": "a new generation trusts that no lease exists: its masters start no conservative period, and nodes keep the leases of the partitions it superseded, take grants of any generation and acknowledge revocations before installing it",
}

// SplitMutationHints run the split mutation with frequent splits and merges, long leases,
// mostly reads and nodes cut off (so that a lease the new master ignores is still in force
// when it commits a write the holder did not get).
var SplitMutationHints = map[string]engine.SimHints{
	"split-skips-revocation": {RepartitionEvery: 200 * time.Millisecond, ReadFraction: 0.8, Faults: []string{"partition"},
		PartitionEvery: 700 * time.Millisecond, KeyspaceOptions: map[string]string{"lease": "3s"}, Linearizability: true},
}

// glGenFloor is the lowest configuration number of p's generation: a state written in a lower
// one belongs to a partition the generation superseded.
func glGenFloor(p *placement.Partition) uint64 {
	if p.Generation == 0 {
		return 0
	}
	return 2*p.Generation + 1
}

// glGenerationOf returns the generation of the partition holding key in the map this node has
// installed (0 if the keyspace is unknown here).
func (c *Engine) glGenerationOf(ks string, key []byte) uint64 {
	k, ok := c.gl.pmap.Keyspace(ks)
	if !ok {
		return 0
	}
	return k.Lookup(key).Generation
}

// glGrantGenOK: a lease is taken only from a sender of this node's generation of the key's
// partition (older: its master may be superseded; newer: this node has not dropped the
// leases the generation replaced yet).
func (c *Engine) glGrantGenOK(ks string, key []byte, gen uint64) bool {
	if c.Cfg.Mutation == "split-skips-revocation" {
		return true
	}
	return c.glGenerationOf(ks, key) == gen
}

// glGenInstalled reports whether this node has installed generation gen of keyspace ks (or a
// later change): generations are metadata command IDs, applied in order.
func (c *Engine) glGenInstalled(ks string, gen uint64) bool {
	if gen == 0 || c.Cfg.Mutation == "split-skips-revocation" {
		return true
	}
	k, ok := c.gl.pmap.Keyspace(ks)
	if !ok {
		return false
	}
	for i := range k.Partitions {
		if k.Partitions[i].Generation >= gen {
			return true
		}
	}
	return false
}

// glNeedsFence reports whether this acceptor must withhold its acknowledgements of p's new
// generation for electionTimeout: olds are its states of the partitions p's range was part
// of. It need not when they all give every key of the range to its home replica, as the new
// generation's table does, and hold no table that might still be chosen.
func (c *Engine) glNeedsFence(olds []*glPart, p *placement.Partition) bool {
	if c.Cfg.Mutation == "split-without-fence" {
		return false
	}
	covered := 0
	for _, gp := range olds {
		t := &gp.table
		if gp.accepted != nil || len(t.subst) > 0 || len(t.handed) > 0 || gp.leaving || gp.joining || len(gp.migrating) > 0 {
			return true
		}
		for k := range t.overrides {
			if p.Contains([]byte(k)) {
				return true
			}
		}
		covered++
	}
	// Without a state for the range (this node did not hold it, or restarted) nothing is
	// known about what it acknowledged.
	return covered == 0
}

// glOverlapping returns the parts of olds whose ranges overlap p's.
func glOverlapping(olds []*glPart, ks string, p *placement.Partition) []*glPart {
	var out []*glPart
	for _, gp := range olds {
		if gp.ks.Spec.Name != ks {
			continue
		}
		q := gp.p
		if (q.End == nil || bytes.Compare(p.Start, q.End) < 0) && (p.End == nil || bytes.Compare(q.Start, p.End) < 0) {
			out = append(out, gp)
		}
	}
	return out
}

// glDropSuperseded drops the leases and affiliated entries this node holds on partitions of
// old that m no longer has at the same generation (a split or merge superseded them).
func (c *Engine) glDropSuperseded(old, m *placement.Map) {
	if old == nil || c.Cfg.Mutation == "split-skips-revocation" {
		return
	}
	gone := map[glPartID]bool{}
	for name, ok := range old.Keyspaces {
		if !isGL(ok) {
			continue
		}
		nk, _ := m.Keyspace(name)
		for i := range ok.Partitions {
			p := &ok.Partitions[i]
			if nk == nil {
				gone[glPartID{name, p.ID}] = true
			} else if q, found := nk.Partition(p.ID); !found || q.Generation != p.Generation {
				gone[glPartID{name, p.ID}] = true
			}
		}
	}
	if len(gone) == 0 {
		return
	}
	// Bounded by the leases and affiliated entries this node holds.
	for id, l := range c.gl.leases {
		if gone[l.part] {
			delete(c.gl.leases, id)
		}
	}
	for id, a := range c.gl.aff {
		if gone[a.part] {
			delete(c.gl.aff, id)
		}
	}
}

// glStartGeneration begins the conservative period of a new generation's master once its
// master lease first holds (see the top of this file); called before every master action.
func (c *Engine) glStartGeneration(now time.Time, gp *glPart) {
	if !gp.genPending {
		return
	}
	gp.genPending = false
	if c.Cfg.Mutation == "split-skips-revocation" {
		return
	}
	if gp.mastersAny(c.Cfg.NodeID, c.Region) {
		c.glStartConservative(now, gp, c.Cfg.NodeID, nil)
	}
}

func hasPartition(k *placement.Keyspace, id uint32) bool {
	_, ok := k.Partition(id)
	return ok
}

// glStillHolds reports whether this node holds, in the installed map, a partition overlapping
// gp's range (gp was superseded by a split or merge rather than left by a move).
func (c *Engine) glStillHolds(gp *glPart) bool {
	ks, ok := c.Pmap.Keyspace(gp.ks.Spec.Name)
	if !ok || !isGL(ks) {
		return false
	}
	for i := range ks.Partitions {
		p := &ks.Partitions[i]
		if p.Holds(c.Cfg.NodeID) && len(glOverlapping([]*glPart{gp}, ks.Spec.Name, p)) > 0 && p.Generation != gp.p.Generation {
			return true
		}
	}
	return false
}

// glRetiredKey names a key by keyspace and key alone (its partition changes with the
// generation).
func glRetiredKey(ks string, key []byte) string { return coord.KeyID(ks, 0, key) }

// glRetire moves gp's keys with a write in flight out of the key table, to finish under the
// generation gp belongs to (see "Committed data" above); glDropPart then drops the rest. The
// writes commit under gp's master lease only, so at most masterLease after this node's last
// acknowledged old heartbeat; after retireBy they fail as ambiguous.
func (c *Engine) glRetire(now time.Time, gp *glPart) (notRun []*glOp) {
	kept := 0
	for _, id := range c.keyIDsOf(gp) {
		k := c.gl.keys[id]
		if k.write == nil {
			continue
		}
		rk := glRetiredKey(gp.ks.Spec.Name, k.key)
		if _, dup := c.gl.retiring[rk]; dup {
			continue // (cannot be: one write per key; dropped with the part as before)
		}
		for _, op := range k.queue {
			if !op.done {
				notRun = append(notRun, op)
			}
		}
		notRun = append(notRun, k.moveWait...)
		k.queue, k.moveWait = nil, nil
		if k.recovery != nil {
			delete(c.gl.fetches, k.recovery.id)
			k.recovery = nil
		}
		delete(c.gl.keys, id)
		delete(c.gl.waiting, id)
		c.gl.retiring[rk] = k
		kept++
	}
	if kept > 0 {
		c.gl.retireBy[gp] = now.Add(gp.opts.MasterLease + 2*c.glRoundTimeout(gp))
	}
	return notRun
}

// glRetiringWrite reports whether a superseded generation still has a write of key in flight
// at this node (gp is the key's partition in the current one).
func (c *Engine) glRetiringWrite(gp *glPart, key []byte) bool {
	k, ok := c.gl.retiring[glRetiredKey(gp.ks.Spec.Name, key)]
	return ok && k.write != nil
}

// glTickRetiring forgets retired writes that are over and fails, as ambiguous, those still in
// flight when their generation's master lease has run out (or at its deadline).
func (c *Engine) glTickRetiring(now time.Time) {
	if len(c.gl.retiring) == 0 {
		return
	}
	for _, rk := range slices.Sorted(maps.Keys(c.gl.retiring)) {
		k := c.gl.retiring[rk]
		// The old master lease is not renewed any more (no heartbeats of the old generation):
		// once it has run out the write can never commit, so it fails at once.
		if w := k.write; w != nil && (now.After(c.gl.retireBy[k.gp]) || !c.glMasterLeaseValid(k.gp, now)) {
			delete(c.gl.writes, w.id)
			for _, op := range w.waiters {
				c.glFailOp(op, errs.New(errs.Timeout, "globlease: partition %d of keyspace %q split or merged during the write of key %q, which did not commit under the old partition's master lease; it may or may not have been applied",
					k.gp.p.ID, k.gp.ks.Spec.Name, k.key))
			}
			k.write = nil
		}
		if k.write == nil {
			delete(c.gl.retiring, rk)
		}
	}
	for gp, by := range c.gl.retireBy {
		if now.After(by) {
			delete(c.gl.retireBy, gp)
		}
	}
}
