package globlease

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/replication/coord"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// The master's side of GlobLease: serialised writes (Algorithm 2), reads and lease grants
// (Algorithm 1), lease records, recovery of a key's committed version, revocation.

// glConservative: after this node became master of keys (start, failover, migration), every
// node may still hold a lease from grantor on them until `until`, unless it acknowledged the
// revocation.
type glConservative struct {
	id      uint64
	grantor uint32
	keys    map[string]bool // nil: every key of the partition this node masters
	until   time.Time
	acked   map[uint32]bool
	next    time.Time
}

type glRecovery struct {
	id      uint64
	replies map[uint32]*storage.Record // nil value: the replica has no version
	resend  time.Time
}

// glLeaseHorizon is how long after a new master takes over a lease from the old one may
// still be in force: the lease, the grant's maximum age in flight, ε, and drift.
func (c *Engine) glLeaseHorizon(gp *glPart) time.Duration {
	longest := gp.opts.Lease
	for _, r := range gp.opts.LeaseRanges {
		longest = max(longest, r.Value)
	}
	return time.Duration(float64(longest)*(1+2*glDriftMargin)) + glGrantMaxAge + c.Cfg.MaxClockOffset + 10*time.Millisecond
}

func (c *Engine) glStartConservative(now time.Time, gp *glPart, grantor uint32, keys map[string]bool) {
	cons := &glConservative{id: c.glNewID(), grantor: grantor, keys: keys, until: now.Add(c.glLeaseHorizon(gp)),
		acked: map[uint32]bool{c.Cfg.NodeID: true}}
	if len(gp.cons) >= 64 {
		// Bounded: merge into one that covers the whole partition (more conservative).
		cons.keys = nil
		gp.cons = gp.cons[1:]
	}
	gp.cons = append(gp.cons, cons)
	c.glCounters.Revocations.Add(1)
	c.glSendRevokes(now, gp, cons)
}

func (c *Engine) glSendRevokes(now time.Time, gp *glPart, cons *glConservative) {
	cons.next = now.Add(glResendEvery)
	msg := &peerpb.GlRevoke{Keyspace: gp.ks.Spec.Name, Partition: gp.p.ID, Grantor: cons.grantor, Id: cons.id, Generation: gp.p.Generation}
	if cons.keys != nil {
		ks := slices.Sorted(maps.Keys(cons.keys))
		for _, k := range ks {
			msg.Keys = append(msg.Keys, []byte(k))
		}
	}
	for _, n := range c.Cfg.Nodes {
		if !cons.acked[n.ID] {
			c.Send(n.ID, &peerpb.Envelope{Msg: &peerpb.Envelope_GlRevoke{GlRevoke: msg}})
		}
	}
}

// glHolders lists the nodes that may hold a valid lease on k now (sorted): acknowledged or
// outstanding grants, and every node a conservative period still covers.
func (c *Engine) glHolders(now time.Time, k *glKey) []uint32 {
	set := map[uint32]bool{}
	for n, r := range k.leases {
		if now.Before(r.until) {
			set[n] = true
		}
	}
	for _, cons := range k.gp.cons {
		if !now.Before(cons.until) || (cons.keys != nil && !cons.keys[string(k.key)]) {
			continue
		}
		for _, n := range c.Cfg.Nodes {
			if !cons.acked[n.ID] {
				set[n.ID] = true
			}
		}
	}
	delete(set, c.Cfg.NodeID)
	if c.Cfg.Mutation == "move-ignores-leases" {
		// Broken on purpose: the replica a move removes, or has removed, is not waited for.
		p := k.gp.p
		for n := range set {
			if (p.Move != nil && n == p.Move.Remove) || (p.HasDeparted(n) && !p.Holds(n)) {
				delete(set, n)
			}
		}
	}
	return sortedKeys(set)
}

func (c *Engine) glKeyState(gp *glPart, key []byte) *glKey {
	id := coord.KeyID(gp.ks.Spec.Name, gp.p.ID, key)
	if k, ok := c.gl.keys[id]; ok {
		return k
	}
	if len(c.gl.keys) >= glMaxKeys {
		c.glEvictKeys(c.LastTick)
	}
	k := &glKey{gp: gp, key: append([]byte(nil), key...), id: id, leases: map[uint32]*glRecord{}}
	c.gl.keys[id] = k
	return k
}

// glEvictKeys forgets idle key states (no write, no queue, no valid lease record): they will
// be recovered on next use. Bounded by the map size.
func (c *Engine) glEvictKeys(now time.Time) {
	for id, k := range c.gl.keys {
		if k.write != nil || len(k.queue) > 0 || k.recovery != nil || len(k.moveWait) > 0 {
			continue
		}
		valid := false
		for _, r := range k.leases {
			if now.Before(r.until) {
				valid = true
				break
			}
		}
		if !valid {
			delete(c.gl.keys, id)
		}
	}
}

// glMasterOp runs (or queues) an operation at the node its table names as the key's master.
func (c *Engine) glMasterOp(now time.Time, gp *glPart, op *glOp) {
	k := c.glKeyState(gp, op.key())
	if len(k.queue) >= glMaxQueue {
		c.glFailOp(op, errs.New(errs.Overloaded, "globlease: %d operations already wait for key %q at its master", len(k.queue), k.key))
		return
	}
	k.queue = append(k.queue, op)
	c.gl.waiting[k.id] = true
	c.glDrain(now, k)
}

func (op *glOp) key() []byte {
	return op.keyBytes
}

// glDrain runs queued operations in order until one has to wait.
func (c *Engine) glDrain(now time.Time, k *glKey) {
	// Not re-entrant: a write that commits at once (one replica) would drain again from
	// inside the operation being run.
	if k.draining {
		return
	}
	k.draining = true
	defer func() { k.draining = false }()
	// Every waiting operation that can run now runs, not only those at the front: a read
	// behind a write that waits answers with the committed version (the two are concurrent,
	// so the read may be ordered first), and writes behind it join the next batch. Each
	// client has one request in flight, so no client's order changes.
	for i := 0; i < len(k.queue) && i < glMaxQueue; i++ {
		if op := k.queue[i]; !op.done && c.glTry(now, k, op) {
			op.done = true
		}
	}
	k.queue = slices.DeleteFunc(k.queue, func(op *glOp) bool { return op.done })
	if len(k.queue) == 0 {
		delete(c.gl.waiting, k.id)
	}
}

// glTry performs op if it can now; false means it must wait (no effects).
func (c *Engine) glTry(now time.Time, k *glKey, op *glOp) bool {
	gp := k.gp
	if now.After(op.deadline) {
		c.glFailOp(op, c.glTimeoutAtMaster(now, k, op))
		return true
	}
	master := gp.masterOf(k.key, c.Region)
	if master != c.Cfg.NodeID {
		c.glRedirectOp(now, op, master)
		return true
	}
	if op.op == OpMoveMaster {
		return c.glTryMove(now, k, op)
	}
	if !c.glActing(gp, k.key, now) {
		return false
	}
	if c.glRetiringWrite(gp, k.key) {
		return false // the superseded generation's write of the key finishes first (gl_split.go)
	}
	switch op.op {
	case OpGet:
		if !k.known {
			if k.write == nil && k.recovery == nil {
				c.glStartRecovery(now, k)
			}
			return false
		}
		rec, found, ok := c.glCommittedRecord(k)
		if !ok {
			return false // committed version not yet visible in local storage
		}
		c.glReplyRead(now, k, op, rec, found, op.wantLease && k.write == nil)
		return true
	case OpPut, OpDelete:
		if k.write != nil || k.recovery != nil {
			return false
		}
		c.glStartWrite(now, k, op, nil)
		return true
	}
	c.glFailOp(op, errs.New(errs.Invalid, "globlease: unsupported operation %s", op.op))
	return true
}

// glCommittedRecord reads the committed version from storage; ok is false while the write
// that made it is still on its way to storage.
func (c *Engine) glCommittedRecord(k *glKey) (rec storage.Record, found, ok bool) {
	if !k.exists {
		return storage.Record{}, false, true
	}
	rec, found, err := c.Store.GetAt(k.gp.ks.Spec.Name, k.key, k.committed)
	if err != nil || !found || rec.Version != k.committed {
		return storage.Record{}, false, false
	}
	return rec, !rec.Tombstone, true
}

func (c *Engine) glReplyRead(now time.Time, k *glKey, op *glOp, rec storage.Record, found, grant bool) {
	if op.from == 0 {
		c.glCounters.ReadsMaster.Add(1)
		res := Result{Op: OpGet, Path: PathMaster, Version: rec.Version}
		if found {
			res.Found, res.Value = true, rec.Value
		}
		c.glFinish(op.req.ID, res)
		return
	}
	r := &peerpb.GlForwardReply{RequestId: op.fwdID, Found: found, Path: PathForwarded, Version: wire.VersionToPB(rec.Version)}
	if found {
		r.Record = wire.RecordToPB(rec)
	}
	r.Affiliates = c.glAffiliatesOf(now, k.id)
	if grant {
		lease := c.glGrantLength(now, k, op.from)
		g := c.glNewID()
		// Until the acknowledgement arrives the record is conservative: the grant may be in
		// flight for up to glGrantMaxAge (older grants are refused), and clocks differ by ε.
		// A record that already runs longer (an earlier, longer grant) keeps its end: a
		// lease is never shortened for a holder that may still hold the long one.
		until := now.Add(glGrantMaxAge + c.Cfg.MaxClockOffset + stretch(lease))
		if old, ok := k.leases[op.from]; ok && old.until.After(until) {
			until = old.until
		}
		k.leases[op.from] = &glRecord{until: until, grant: g, lease: lease}
		r.LeaseNanos = int64(lease)
		r.GrantSentUnixNanos = now.UnixNano()
		r.GrantId = g
		r.Generation = k.gp.p.Generation
		c.glCounters.LeasesGranted.Add(1)
		c.glCounters.LeaseMessages.Add(1)
	}
	c.Send(op.from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlForwardReply{GlForwardReply: r}})
}

// stretch lengthens a lease for the master's record (clock drift).
func stretch(d time.Duration) time.Duration { return time.Duration(float64(d) * (1 + 2*glDriftMargin)) }

func (c *Engine) glHandleLeaseAck(now time.Time, from uint32, m *peerpb.GlLeaseAck) {
	c.glCounters.LeaseMessages.Add(1)
	k, ok := c.gl.keys[coord.KeyID(m.GetKeyspace(), m.GetPartition(), m.GetKey())]
	if !ok {
		return
	}
	r, ok := k.leases[from]
	if !ok || r.grant != m.GetGrantId() {
		return
	}
	if !m.GetAccepted() {
		delete(k.leases, from)
		return
	}
	lease := r.lease
	if lease <= 0 {
		lease = k.gp.opts.LeaseOf(k.key) // a record made before grants carried their length
	}
	if c.Cfg.Mutation == "lease-record-at-grant" {
		// Broken on purpose: the record starts when the grant was sent, so it ends before the
		// replica's lease (which started when the grant arrived).
		r.acked = true
		r.until = r.until.Add(-glGrantMaxAge - c.Cfg.MaxClockOffset - stretch(lease)).Add(lease)
		return
	}
	if until := now.Add(stretch(lease)); until.After(r.until) || !r.acked {
		r.until = until
	}
	r.acked = true
}

// glGrantLength is the lease to grant node on k: the key's lease, or suspect_lease while
// the node is on probation for stalling a write (liu-thesis 4.1.3 "Leasing Period": the
// lease length is per node). Only new grants get shorter; records of leases already granted
// keep their end.
func (c *Engine) glGrantLength(now time.Time, k *glKey, node uint32) time.Duration {
	lease := k.gp.opts.LeaseOf(k.key)
	if short := k.gp.opts.SuspectLease; short > 0 && short < lease {
		if until, ok := c.gl.suspects[node]; ok && now.Before(until) {
			c.glCounters.ShortGrants.Add(1)
			return short
		}
	}
	return lease
}

// glExpireWaiters fails the operations carried by w whose deadline has passed, saying what
// the write waits for. (Forwarded operations carry a deadline a one-way delay earlier than
// their coordinator's, so this explanation reaches the coordinator before it gives up.)
func (c *Engine) glExpireWaiters(now time.Time, k *glKey, w *glWrite) {
	kept := w.waiters[:0]
	for _, op := range w.waiters {
		if now.After(op.deadline) {
			c.glFailOp(op, c.glTimeoutAtMaster(now, k, op))
			continue
		}
		kept = append(kept, op)
	}
	clear(w.waiters[len(kept):])
	w.waiters = kept
}

// glTimeoutAtMaster is the error of op, which timed out at this node, k's master: it names
// what op waited for — the lease holders a write waits for and until when, the missing
// acknowledgements, this node's master lease, or the earlier write or recovery op queued
// behind.
func (c *Engine) glTimeoutAtMaster(now time.Time, k *glKey, op *glOp) error {
	self := fmt.Sprintf("%s (%s)", c.NodeName(c.Cfg.NodeID), c.SelfRegion)
	what := fmt.Sprintf("globlease %s of key %q timed out at its master %s", op.op, k.key, self)
	var why string
	switch {
	case k.gp.leaving:
		why = "this node is leaving the partition (a replica move) and hands the keys it masters to a replica that stays; ask again"
	case !c.glMasterLeaseValid(k.gp, now):
		why = "this node holds no master lease (fewer than a majority of the partition's replicas acknowledged its heartbeats recently)"
	case k.write != nil && slices.Contains(k.write.waiters, op):
		why = "the write waits for " + c.glWriteWait(now, k, k.write)
	case k.write != nil:
		why = "it is queued behind an earlier write of the key, which waits for " + c.glWriteWait(now, k, k.write)
	case k.recovery != nil:
		why = "the key's committed version is being recovered from its replicas (after a change of master)"
	default:
		why = "the key was busy"
	}
	msg := what + ": " + why
	if op.op != OpGet {
		msg += "; the write may or may not have been applied"
	}
	return errs.New(errs.Timeout, "%s", msg)
}

// glWriteWait says what w waits for before it commits: a majority, and every lease holder
// that has not acknowledged the update, each until its lease runs out.
func (c *Engine) glWriteWait(now time.Time, k *glKey, w *glWrite) string {
	var parts []string
	if !c.glQuorum(k.gp, func(r uint32) bool { return w.stored[r] }) {
		parts = append(parts, "a majority of the replicas ("+c.glDescribeQuorum(k.gp, func(r uint32) bool { return w.stored[r] })+")")
	}
	for _, h := range c.glHolders(now, k) {
		if w.acks[h] {
			continue
		}
		until := now
		if r, ok := k.leases[h]; ok && r.until.After(until) {
			until = r.until
		}
		for _, cons := range k.gp.cons {
			if now.Before(cons.until) && !cons.acked[h] && (cons.keys == nil || cons.keys[string(k.key)]) && cons.until.After(until) {
				until = cons.until
			}
		}
		parts = append(parts, fmt.Sprintf("the lease of %s (%s), which has not acknowledged the update, to run out at %s (%v from now)",
			c.NodeName(h), c.Region[h], until.UTC().Format("15:04:05.000"), until.Sub(now).Round(time.Millisecond)))
	}
	if len(parts) == 0 {
		return "its commit"
	}
	return strings.Join(parts, " and ")
}

// glSuspectStallers puts on probation the lease holders that have left w's update
// unacknowledged for longer than suspect_after.
func (c *Engine) glSuspectStallers(now time.Time, k *glKey, w *glWrite) {
	opts := k.gp.opts
	if opts.SuspectLease <= 0 || now.Sub(w.started) < opts.SuspectAfter {
		return
	}
	for _, h := range c.glHolders(now, k) {
		if w.acks[h] {
			continue
		}
		if until, ok := c.gl.suspects[h]; !ok || !now.Before(until) {
			c.glCounters.SuspectMarks.Add(1)
		}
		c.gl.suspects[h] = now.Add(opts.SuspectProbation)
	}
}

// glStartWrite begins a write (op) or the recovery re-write of rec (op nil). Writes waiting
// behind op for the same key join it (a per-key group commit): each gets its own, increasing
// version, and only the newest record travels. The older ones are overwritten at once, before
// anyone can read them, which is a legal order for them. This keeps a hot key's write
// throughput from being one write per lease-holder round trip.
func (c *Engine) glStartWrite(now time.Time, k *glKey, op *glOp, recovered *storage.Record) {
	gp := k.gp
	var rec storage.Record
	var batch []*glOp
	if recovered != nil {
		rec = *recovered
	} else {
		batch = c.glTakeWriteBatch(k, op)
		if cur, found, err := c.Store.Get(gp.ks.Spec.Name, k.key); err == nil && found {
			c.Clock.Observe(now, cur.Version)
		}
		for _, b := range batch {
			if !b.minVer.IsZero() {
				c.Clock.Observe(now, b.minVer)
			}
		}
		for _, b := range batch {
			b.version = c.Clock.Now(now)
			if c.gl.origins != nil && b.origin != "" && gp.opts.AutoMigrate {
				c.gl.origins.Observe(now, []byte(k.id), b.origin)
			}
		}
		last := batch[len(batch)-1]
		rec = storage.Record{Keyspace: gp.ks.Spec.Name, Key: k.key, Version: last.version}
		if last.op == OpDelete {
			rec.Tombstone = true
		} else {
			rec.Value = last.value
		}
	}
	holders := c.glHolders(now, k)
	c.ApplyLocal(now, rec, false)
	passive := len(batch) > 0
	for _, b := range batch {
		passive = passive && b.passive
	}
	if passive && k.known && k.exists && len(holders) == 0 {
		// Passive update (Algorithm 2, first branch): no valid lease anywhere, so nobody can
		// serve the old value; reply after the local write and propagate lazily.
		k.committed = rec.Version
		c.glCounters.WritesPassive.Add(int64(len(batch)))
		for _, b := range batch {
			c.glReplyWrite(b, b.version)
		}
		c.glStartLazy(now, gp, rec)
		return
	}
	w := &glWrite{id: c.glNewID(), started: now, rec: rec, acks: map[uint32]bool{c.Cfg.NodeID: true}, stored: map[uint32]bool{c.Cfg.NodeID: true}, leaseTo: map[uint32]bool{},
		nextResend: now.Add(glResendEvery), recovery: recovered != nil}
	w.waiters = batch
	c.glCounters.WritesActive.Add(int64(len(batch)))
	k.write = w
	c.gl.writes[w.id] = k
	for _, h := range holders {
		if r, ok := k.leases[h]; ok && now.Before(r.until) {
			w.leaseTo[h] = true
		}
	}
	if len(holders) > 0 {
		c.glCounters.LeaseUpdates.Add(int64(len(holders)))
		c.glCounters.LeaseMessages.Add(int64(len(holders)))
	}
	c.glSendUpdates(now, k, w, holders)
	c.glCheckWrite(now, k)
}

// glSendUpdates sends the write to every replica and every possible lease holder that has not
// acknowledged it; holders with a valid record get a renewed lease with it.
func (c *Engine) glSendUpdates(now time.Time, k *glKey, w *glWrite, holders []uint32) {
	gp := k.gp
	targets := map[uint32]bool{}
	for _, r := range gp.p.Holders() {
		targets[r] = true // during a move, the new replica too (gl_move.go)
	}
	for _, h := range holders {
		targets[h] = true
	}
	pb := wire.RecordToPB(w.rec)
	for _, n := range sortedKeys(targets) {
		if w.acks[n] {
			continue
		}
		u := &peerpb.GlUpdate{WriteId: w.id, Record: pb, SentUnixNanos: now.UnixNano(), TableVersion: gp.table.version, MoveEpoch: gp.p.MoveEpoch, Generation: gp.p.Generation}
		if w.leaseTo[n] {
			if gp.p.HasReplica(n) {
				u.LeaseNanos = int64(c.glGrantLength(now, k, n))
			} else {
				u.LeaseNanos = int64(gp.opts.SecondaryLease)
			}
		}
		c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdate{GlUpdate: u}})
	}
}

// glTakeWriteBatch returns op and the other writes waiting for the same key (at most
// glMaxBatch), marking those done.
func (c *Engine) glTakeWriteBatch(k *glKey, op *glOp) []*glOp {
	batch := []*glOp{op}
	for _, q := range k.queue {
		if len(batch) >= glMaxBatch {
			break
		}
		if q != op && !q.done && (q.op == OpPut || q.op == OpDelete) {
			q.done = true // carried by this write; the drain drops it from the queue
			batch = append(batch, q)
		}
	}
	return batch
}

// glMaxBatch bounds the writes of one key committed together.
const glMaxBatch = 256

// glCheckWrite commits k's write when a majority of replicas (of the old and the new set
// during a move) has stored it and every node that may hold a valid lease has it too (or its
// lease ran out), while this node is the acting master and is not handing the key over.
func (c *Engine) glCheckWrite(now time.Time, k *glKey) {
	w := k.write
	if w == nil || k.gp.locked || !c.glMasterLeaseValid(k.gp, now) {
		return
	}
	if _, locked := k.gp.glGivingBack(k.key, c.Region); locked {
		return
	}
	if !c.glQuorum(k.gp, func(r uint32) bool { return w.stored[r] }) {
		return
	}
	if c.Cfg.Mutation != "write-skips-lease-holder" {
		for _, h := range c.glHolders(now, k) {
			if !w.acks[h] {
				return
			}
		}
	}
	k.write = nil
	delete(c.gl.writes, w.id)
	k.known, k.exists, k.committed = true, true, w.rec.Version
	for _, op := range w.waiters {
		c.glReplyWrite(op, op.version)
	}
	commit := &peerpb.GlCommit{Keyspace: w.rec.Keyspace, Partition: k.gp.p.ID, Key: w.rec.Key, Version: wire.VersionToPB(w.rec.Version)}
	for _, node := range sortedKeys(w.acks) {
		if node != c.Cfg.NodeID {
			c.Send(node, &peerpb.Envelope{Msg: &peerpb.Envelope_GlCommit{GlCommit: commit}})
		}
	}
	if w.recovery {
		k.recovery = nil
	}
	c.glDrain(now, k)
}

func (c *Engine) glHandleUpdateAckAtMaster(now time.Time, from uint32, k *glKey, m *peerpb.GlUpdateAck) {
	w := k.write
	if w == nil || w.id != m.GetWriteId() {
		return
	}
	if !m.GetOk() {
		return
	}
	w.acks[from] = true
	if !m.GetNotStored() && k.gp.p.Holds(from) {
		w.stored[from] = true
	}
	if w.leaseTo[from] {
		c.glCounters.LeaseMessages.Add(1)
		if m.GetLeaseNanos() > 0 {
			k.leases[from] = &glRecord{until: now.Add(stretch(time.Duration(m.GetLeaseNanos()))), acked: true}
		} else {
			delete(k.leases, from)
		}
	}
	c.glCheckWrite(now, k)
}

func (c *Engine) glReplyWrite(op *glOp, v hlc.Version) {
	if op.from == 0 {
		c.glFinish(op.req.ID, Result{Op: op.op, Version: v})
		return
	}
	c.Send(op.from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlForwardReply{GlForwardReply: &peerpb.GlForwardReply{RequestId: op.fwdID, Version: wire.VersionToPB(v)}}})
}

func (c *Engine) glFailOp(op *glOp, err error) {
	if op.from == 0 {
		c.glFinish(op.req.ID, Result{Op: op.op, Err: err})
		return
	}
	c.Send(op.from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlForwardReply{GlForwardReply: &peerpb.GlForwardReply{
		RequestId: op.fwdID, ErrKind: uint32(errs.KindOf(err)), ErrMsg: err.Error()}}})
}

// glRedirectOp sends an operation on to the key's master: local ones are forwarded, forwarded
// ones get a redirection (with this node's table) so the coordinator retries there.
func (c *Engine) glRedirectOp(now time.Time, op *glOp, master uint32) {
	if op.from != 0 {
		r := &peerpb.GlForwardReply{RequestId: op.fwdID, Redirect: master}
		if gp := c.glPartOf(op.req.Keyspace, op.part); gp != nil {
			r.Table = gp.table.toPB(gp.ks.Spec.Name, gp.p.ID)
		}
		c.Send(op.from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlForwardReply{GlForwardReply: r}})
		return
	}
	ks, ok := c.Pmap.Keyspace(op.req.Keyspace)
	if !ok {
		c.glFinish(op.req.ID, Result{Op: op.op, Err: errs.New(errs.NotFound, "unknown keyspace %q", op.req.Keyspace)})
		return
	}
	p := ks.Lookup(op.req.Key)
	fwd := &glFwd{req: op.req, id: coord.KeyID(ks.Spec.Name, p.ID, op.req.Key), gp: c.glPartOf(ks.Spec.Name, p.ID), waiter: glWaiter{local: op.req.ID}}
	c.glForward(now, ks, p, fwd, master)
}

// --- recovery ---

// glStartRecovery learns a key's committed version after this node became its master: a
// majority of replicas reports its newest version; if they agree and no old lease can be in
// force, that is the committed version, otherwise the newest is re-written actively.
func (c *Engine) glStartRecovery(now time.Time, k *glKey) {
	c.glCounters.Recoveries.Add(1)
	rv := &glRecovery{id: c.glNewID(), replies: map[uint32]*storage.Record{}, resend: now.Add(c.glRoundTimeout(k.gp))}
	k.recovery = rv
	c.gl.fetches[rv.id] = k
	if cur, found, err := c.Store.Get(k.gp.ks.Spec.Name, k.key); err == nil {
		if found {
			rv.replies[c.Cfg.NodeID] = &cur
		} else {
			rv.replies[c.Cfg.NodeID] = nil
		}
	}
	c.glSendFetches(k, rv)
	c.glCheckRecovery(now, k)
}

func (c *Engine) glSendFetches(k *glKey, rv *glRecovery) {
	for _, r := range k.gp.p.Holders() {
		if _, ok := rv.replies[r]; !ok {
			c.Send(r, &peerpb.Envelope{Msg: &peerpb.Envelope_GlFetch{GlFetch: &peerpb.GlFetch{RequestId: rv.id, Keyspace: k.gp.ks.Spec.Name, Partition: k.gp.p.ID, Key: k.key}}})
		}
	}
}

func (c *Engine) glHandleFetch(now time.Time, from uint32, m *peerpb.GlFetch) {
	gp := c.glPartOf(m.GetKeyspace(), m.GetPartition())
	if gp == nil || !gp.p.Holds(from) {
		return
	}
	r := &peerpb.GlFetchReply{RequestId: m.GetRequestId()}
	if rec, found, err := c.Store.Get(m.GetKeyspace(), m.GetKey()); err == nil && found {
		r.Found, r.Record = true, wire.RecordToPB(rec)
	} else if err != nil {
		return
	}
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlFetchReply{GlFetchReply: r}})
}

func (c *Engine) glHandleFetchReply(now time.Time, from uint32, m *peerpb.GlFetchReply) {
	k, ok := c.gl.fetches[m.GetRequestId()]
	if !ok || k.recovery == nil || k.recovery.id != m.GetRequestId() || !k.gp.p.Holds(from) {
		return
	}
	if m.GetFound() {
		rec, err := wire.RecordFromPB(m.GetRecord())
		if err != nil {
			return
		}
		c.Clock.Observe(now, rec.Version)
		k.recovery.replies[from] = &rec
	} else {
		k.recovery.replies[from] = nil
	}
	c.glCheckRecovery(now, k)
}

func (c *Engine) glCheckRecovery(now time.Time, k *glKey) {
	rv := k.recovery
	if rv == nil || k.write != nil {
		return
	}
	if !c.glQuorum(k.gp, func(r uint32) bool { _, ok := rv.replies[r]; return ok }) {
		return
	}
	delete(c.gl.fetches, rv.id)
	var newest *storage.Record
	for _, r := range rv.replies {
		if r != nil && (newest == nil || newest.Version.Less(r.Version)) {
			newest = r
		}
	}
	agrees := func(n uint32) bool {
		r, ok := rv.replies[n]
		return ok && ((r == nil && newest == nil) || (r != nil && newest != nil && r.Version == newest.Version))
	}
	if newest == nil || (c.glQuorum(k.gp, agrees) && len(c.glHolders(now, k)) == 0) {
		k.recovery = nil
		k.known = true
		k.exists = newest != nil
		if newest != nil {
			k.committed = newest.Version
		}
		c.glDrain(now, k)
		return
	}
	// Re-write the newest version (same version: idempotent at replicas) so that it is on a
	// majority and on every possible lease holder before anyone serves it.
	rec := *newest
	c.glStartWrite(now, k, nil, &rec)
}

// --- passive propagation ---

func (c *Engine) glStartLazy(now time.Time, gp *glPart, rec storage.Record) {
	lz := &glLazy{rec: rec, gp: gp, pending: map[uint32]bool{}, next: now.Add(glResendEvery)}
	for _, r := range gp.p.Holders() {
		if r != c.Cfg.NodeID {
			lz.pending[r] = true
		}
	}
	id := c.glNewID()
	if len(c.gl.lazy) < 100_000 {
		c.gl.lazy[id] = lz
	}
	c.glSendLazy(now, id, lz)
}

func (c *Engine) glSendLazy(now time.Time, id uint64, lz *glLazy) {
	lz.next = now.Add(glResendEvery)
	pb := wire.RecordToPB(lz.rec)
	for _, n := range sortedKeys(lz.pending) {
		c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdate{GlUpdate: &peerpb.GlUpdate{WriteId: id, Record: pb, SentUnixNanos: now.UnixNano(), Committed: true, MoveEpoch: lz.gp.p.MoveEpoch, Generation: lz.gp.p.Generation}}})
	}
}

// --- migration ---

// glTryMove starts moving k's master to the replica in op.region (two-phase, gl_table.go).
func (c *Engine) glTryMove(now time.Time, k *glKey, op *glOp) bool {
	gp := k.gp
	target := c.glMoveTarget(gp, op.region)
	if target == 0 {
		if gp.p.Move != nil && c.Region[gp.p.Move.Remove] == op.region {
			c.glFailOp(op, errs.New(errs.Unavailable, "keyspace %q: the replica of partition %d in region %q is moving (to another node of the region); move the master there once the move is over", gp.ks.Spec.Name, gp.p.ID, op.region))
			return true
		}
		c.glFailOp(op, errs.New(errs.Invalid, "keyspace %q has no replica in region %q", gp.ks.Spec.Name, op.region))
		return true
	}
	if target == c.Cfg.NodeID {
		c.glReplyMove(op, gp)
		return true
	}
	if !c.glActing(gp, k.key, now) || k.write != nil || k.recovery != nil {
		return false
	}
	c.glBeginMove(now, k, target)
	k.moveWait = append(k.moveWait, op)
	return true
}

// glMoveTarget is the replica of gp in region that a key's master migrates to: the lowest ID
// among the replicas there that stay through a move in progress (0: none).
func (c *Engine) glMoveTarget(gp *glPart, region string) uint32 {
	target := uint32(0)
	for _, r := range gp.p.Replicas {
		if c.Region[r] == region && glStayer(gp.p, r) && (target == 0 || r < target) {
			target = r
		}
	}
	return target
}

func (c *Engine) glBeginMove(now time.Time, k *glKey, target uint32) {
	k.gp.migrating[string(k.key)] = target
	k.gp.wantMoves[string(k.key)] = target
	k.moveTo, k.moveAt = target, now
}

func (c *Engine) glReplyMove(op *glOp, gp *glPart) {
	master := gp.masterOf(op.keyBytes, c.Region)
	if op.from == 0 {
		c.glFinish(op.req.ID, Result{Op: OpMoveMaster, Master: c.NodeName(master), MasterRegion: c.Region[master], TableVersion: gp.table.version})
		return
	}
	c.Send(op.from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlForwardReply{GlForwardReply: &peerpb.GlForwardReply{
		RequestId: op.fwdID, Master: master, TableVersion: gp.table.version}}})
}

// glTableChanged hands over the keys that left this node and prepares for those that came.
func (c *Engine) glTableChanged(now time.Time, gp *glPart, old *glTable) {
	self := c.Cfg.NodeID
	// Keys that came: from failover (a home's keys) or migration (one key).
	for _, h := range gp.homes(c.Region) {
		if from := old.resolve(h); from != self && gp.table.resolve(h) == self {
			c.glStartConservative(now, gp, from, nil)
			c.glCounters.MasterMoves.Add(1)
		}
	}
	byGrantor := map[uint32]map[string]bool{}
	for k, m := range gp.table.overrides {
		if m != self {
			continue
		}
		if from := old.masterOf([]byte(k), gp.home([]byte(k), c.Region)); from != self {
			if byGrantor[from] == nil {
				byGrantor[from] = map[string]bool{}
			}
			byGrantor[from][k] = true
			c.glCounters.MasterMoves.Add(1)
		}
	}
	for _, from := range sortedKeys(byGrantor) {
		c.glStartConservative(now, gp, from, byGrantor[from])
	}
	// Leases this node holds, as a replica (or an affiliated node) of the old master, on keys
	// it now masters: it serves those keys as their master from now on, and a lease of its
	// own would outlive the first write it commits (the lease invariant; found by the
	// simulator, seed 1993).
	pid := glPartID{gp.ks.Spec.Name, gp.p.ID}
	for _, id := range slices.Sorted(maps.Keys(c.gl.leases)) {
		if l := c.gl.leases[id]; l.part == pid {
			if _, _, key, ok := coord.ParseKeyID(id); ok && gp.masterOf(key, c.Region) == self {
				delete(c.gl.leases, id)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.gl.aff)) {
		if a := c.gl.aff[id]; a.part == pid {
			if _, _, key, ok := coord.ParseKeyID(id); ok && gp.masterOf(key, c.Region) == self {
				delete(c.gl.aff, id)
			}
		}
	}
	// Key states: keys that came must be recovered; keys that left are handed over.
	for _, id := range c.keyIDsOf(gp) {
		k := c.gl.keys[id]
		oldM := old.masterOf(k.key, gp.home(k.key, c.Region))
		newM := gp.masterOf(k.key, c.Region)
		if oldM != self && newM == self {
			k.known = false
			continue
		}
		if newM == self {
			continue
		}
		if k.write != nil {
			delete(c.gl.writes, k.write.id)
			for _, op := range k.write.waiters {
				c.glFailOp(op, errs.New(errs.Timeout, "globlease: the master of key %q moved during the write; it may or may not have been applied", k.key))
			}
			k.write = nil
		}
		if k.recovery != nil {
			delete(c.gl.fetches, k.recovery.id)
			k.recovery = nil
		}
		for _, op := range k.moveWait {
			c.glReplyMove(op, gp)
		}
		k.moveWait = nil
		queue := k.queue
		k.queue = nil
		delete(c.gl.waiting, id)
		for _, op := range queue {
			if !op.done {
				c.glRedirectOp(now, op, newM)
			}
		}
		k.known = false
		k.leases = map[uint32]*glRecord{}
	}
}

// glTickMaster: deadlines, resends, expiring leases, waiting operations, moves that stall.
func (c *Engine) glTickMaster(now time.Time) {
	gl := c.gl
	c.glTickRetiring(now)
	ids := slices.Sorted(maps.Keys(gl.writes))
	for _, id := range ids {
		k := gl.writes[id]
		if k == nil || k.write == nil || k.write.id != id {
			delete(gl.writes, id)
			continue
		}
		if now.After(k.write.nextResend) {
			k.write.nextResend = now.Add(glResendEvery)
			c.glSendUpdates(now, k, k.write, c.glHolders(now, k))
		}
		c.glSuspectStallers(now, k, k.write)
		c.glCheckWrite(now, k)
		if k.write != nil {
			c.glExpireWaiters(now, k, k.write)
		}
	}
	keys := slices.Sorted(maps.Keys(gl.waiting))
	for _, id := range keys {
		if k, ok := gl.keys[id]; ok {
			c.glDrain(now, k)
			if k.recovery != nil && now.After(k.recovery.resend) {
				k.recovery.resend = now.Add(c.glRoundTimeout(k.gp))
				c.glSendFetches(k, k.recovery)
			}
		} else {
			delete(gl.waiting, id)
		}
	}
	lids := slices.Sorted(maps.Keys(gl.lazy))
	for _, id := range lids {
		if lz := gl.lazy[id]; now.After(lz.next) {
			c.glSendLazy(now, id, lz)
		}
	}
	for _, gp := range gl.partList {
		kept := gp.cons[:0]
		for _, cons := range gp.cons {
			if !now.Before(cons.until) || len(cons.acked) >= len(c.Cfg.Nodes) {
				continue
			}
			if now.After(cons.next) {
				c.glSendRevokes(now, gp, cons)
			}
			kept = append(kept, cons)
		}
		gp.cons = kept
	}
}

func (c *Engine) glHandleRevokeAck(now time.Time, from uint32, m *peerpb.GlRevokeAck) {
	gp := c.glPartOf(m.GetKeyspace(), m.GetPartition())
	if gp == nil {
		return
	}
	for _, cons := range gp.cons {
		if cons.id == m.GetId() {
			cons.acked[from] = true
		}
	}
	c.glWakeMasters(now)
}

// glWakeMasters lets writes and queued operations that waited for acknowledgements proceed.
func (c *Engine) glWakeMasters(now time.Time) {
	c.glTickMaster(now)
}
