package globlease

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/replication/coord"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// The non-master side of GlobLease: answers to forwarded requests, leases, updates and
// commits, revocations, and the hot-key (affiliated node) machinery of liu-thesis 4.1.4.

// glGrantFresh reports whether a grant sent at sentNanos (the grantor's clock) may still be
// used: older grants are refused, which bounds how long after its master stopped acting a
// lease can begin (the new master's conservative period counts on it).
func (c *Engine) glGrantFresh(now time.Time, gp glPartID, grantor uint32, sentNanos int64) bool {
	sent := time.Unix(0, sentNanos)
	if now.Sub(sent) > glGrantMaxAge {
		return false
	}
	if at, ok := c.gl.revoked[gp][grantor]; ok && sent.Before(at.Add(c.Cfg.MaxClockOffset)) {
		return false // sent before this node acknowledged a revocation of the grantor's leases
	}
	return true
}

func (c *Engine) glHandleForwardReply(now time.Time, from uint32, m *peerpb.GlForwardReply) {
	fwd, ok := c.gl.fwd[m.GetRequestId()]
	if !ok {
		return
	}
	delete(c.gl.fwd, m.GetRequestId())
	var waiters []glWaiter
	if fwd.renewal {
		if r, ok := c.gl.renewing[fwd.id]; ok && r.fwdID == m.GetRequestId() {
			waiters = r.waiters
			delete(c.gl.renewing, fwd.id)
		}
	}
	ks, ok := c.Pmap.Keyspace(fwd.req.Keyspace)
	if !ok {
		return
	}
	p := ks.Lookup(fwd.req.Key)
	if fwd.gp != nil {
		// The partition's state here may have changed since the request left (a move step):
		// leases are installed only in the current state, and only by a member.
		fwd.gp = c.glPartOf(ks.Spec.Name, p.ID)
	}
	if m.GetRedirect() != 0 {
		if fwd.gp != nil && m.GetTable() != nil {
			c.glAdopt(now, fwd.gp, m.GetTable())
		}
		to := m.GetRedirect()
		if to == c.Cfg.NodeID && fwd.gp != nil {
			// The node asked knows an older table than this one (it names this node, which
			// forwarded because its own table names another): ask that one.
			to = fwd.gp.masterOf(fwd.req.Key, c.Region)
		}
		if fwd.hops+1 > glMaxHops || !c.KnownNode(to) {
			err := errs.New(errs.Unavailable, "globlease: no master found for key %q after %d redirections", fwd.req.Key, fwd.hops+1)
			c.glAnswer(fwd.waiter, Result{Op: fwd.req.Op, Err: err}, nil)
			for _, w := range waiters {
				c.glAnswer(w, Result{Op: OpGet, Err: err}, nil)
			}
			return
		}
		fwd.hops++
		if fwd.renewal {
			c.gl.renewing[fwd.id] = &glRenewal{waiters: waiters}
		}
		c.glForward(now, ks, p, fwd, to)
		return
	}
	if m.GetErrKind() != 0 {
		err := errs.New(errs.Kind(m.GetErrKind()), "%s", m.GetErrMsg())
		c.glAnswer(fwd.waiter, Result{Op: fwd.req.Op, Err: err}, nil)
		for _, w := range waiters {
			c.glAnswer(w, Result{Op: OpGet, Err: err}, nil)
		}
		return
	}
	switch fwd.req.Op {
	case OpGet:
		res := Result{Op: OpGet, Path: m.GetPath(), Found: m.GetFound(), Version: wire.VersionFromPB(m.GetVersion())}
		if res.Path == "" {
			res.Path = PathForwarded
		}
		var rec storage.Record
		if m.GetFound() {
			r, err := wire.RecordFromPB(m.GetRecord())
			if err != nil {
				return
			}
			rec = r
			res.Value, res.Version = rec.Value, rec.Version
		}
		c.glCounters.ReadsForwarded.Add(1)
		if m.GetLeaseNanos() > 0 {
			c.glInstallLease(now, fwd, from, m, rec)
		}
		if fwd.gp == nil && len(m.GetAffiliates()) > 0 {
			nodes := append([]uint32{from}, m.GetAffiliates()...)
			slices.Sort(nodes)
			nodes = slices.Compact(nodes)
			if len(c.gl.routes) < glMaxAffEntries {
				c.gl.routes[fwd.id] = &glRoute{nodes: nodes, until: now.Add(c.glOptions(ks).SecondaryLease)}
			}
		}
		c.glAnswer(fwd.waiter, res, m.GetRecord())
		// The answer was computed at the master before some waiters arrived here, so it may be
		// older than a write they already saw: they are served from the lease just installed
		// (which updates that reached this replica have already suspended), or asked again.
		for _, w := range waiters {
			if r, ok := c.glLocalRecord(now, fwd.gp, fwd.id, fwd.req.Keyspace, p.ID, fwd.req.Key); ok {
				res := Result{Op: OpGet, Path: r.Path, Found: r.Found}
				if r.Found {
					rec, _ := wire.RecordFromPB(r.Record)
					res.Value, res.Version = rec.Value, rec.Version
				}
				c.glAnswer(w, res, r.Record)
				continue
			}
			c.glForward(now, ks, p, &glFwd{req: fwd.req, id: fwd.id, gp: fwd.gp, waiter: w}, c.glTarget(now, ks, p, fwd.gp, fwd.req))
		}
	case OpMoveMaster:
		c.glAnswer(fwd.waiter, Result{Op: OpMoveMaster, Master: c.NodeName(m.GetMaster()), MasterRegion: c.Region[m.GetMaster()], TableVersion: m.GetTableVersion()}, nil)
	default:
		c.glAnswer(fwd.waiter, Result{Op: fwd.req.Op, Version: wire.VersionFromPB(m.GetVersion())}, nil)
	}
}

func (c *Engine) KnownNode(id uint32) bool { _, ok := c.Region[id]; return ok && id != c.Cfg.NodeID }

// glInstallLease starts the lease a renewal brought (it starts now, on arrival: liu-thesis
// 4.1.3 "Leasing Period") and acknowledges it, so the master's record starts later still.
func (c *Engine) glInstallLease(now time.Time, fwd *glFwd, from uint32, m *peerpb.GlForwardReply, rec storage.Record) {
	if fwd.gp == nil {
		// This node stopped being a member while the read was forwarded: decline (the master
		// drops its record).
		ks, _ := c.Pmap.Keyspace(fwd.req.Keyspace)
		c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlLeaseAck{GlLeaseAck: &peerpb.GlLeaseAck{Keyspace: fwd.req.Keyspace,
			Partition: ks.Lookup(fwd.req.Key).ID, Key: fwd.req.Key, GrantId: m.GetGrantId()}}})
		return
	}
	ack := &peerpb.GlLeaseAck{Keyspace: fwd.req.Keyspace, Partition: fwd.gp.p.ID, Key: fwd.req.Key, GrantId: m.GetGrantId()}
	pid := glPartID{fwd.req.Keyspace, fwd.gp.p.ID}
	// The key's ID under the partition it is in now (a split may have renamed it since the
	// read left).
	id := coord.KeyID(fwd.req.Keyspace, fwd.gp.p.ID, fwd.req.Key)
	grantVer := rec.Version
	if !m.GetFound() {
		grantVer = wire.VersionFromPB(m.GetVersion())
	}
	// A grant that crossed an update of the key (links may reorder) would revive the older
	// version the update has just suspended: refuse it.
	newer := false
	if seen, ok := c.gl.updated[id]; ok && grantVer.Less(seen.version) {
		newer = true
	}
	if !fwd.gp.joining && !newer && c.glGrantFresh(now, pid, from, m.GetGrantSentUnixNanos()) &&
		c.glGrantGenOK(fwd.req.Keyspace, fwd.req.Key, m.GetGeneration()) && c.glCheckGrant(now, id, from, m.GetGrantId()) == glGrantNew {
		l := &glLease{until: now.Add(time.Duration(m.GetLeaseNanos())), found: m.GetFound(), grantor: from, part: pid}
		if m.GetFound() {
			l.version = rec.Version
			c.Clock.Observe(now, rec.Version)
			c.ApplyLocal(now, rec, false)
		}
		c.gl.leases[id] = l
		ack.Accepted = true
	}
	c.glCounters.LeaseMessages.Add(1)
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlLeaseAck{GlLeaseAck: ack}})
}

// glHandleUpdate applies a write pushed by the master (or a host, or lazily).
func (c *Engine) glHandleUpdate(now time.Time, from uint32, m *peerpb.GlUpdate) {
	rec, err := wire.RecordFromPB(m.GetRecord())
	if err != nil {
		return
	}
	ks, ok := c.Pmap.Keyspace(rec.Keyspace)
	if !ok || !isGL(ks) {
		return
	}
	// The key's partition in this node's map: the master's may differ around a split or merge,
	// and then the update brings no lease (gl_split.go).
	part := ks.Lookup(rec.Key).ID
	id := coord.KeyID(rec.Keyspace, part, rec.Key)
	pid := glPartID{rec.Keyspace, part}
	gp := c.glPartOf(rec.Keyspace, part)
	if gp != nil && m.GetMoveEpoch() < gp.p.MoveEpoch {
		// The fence of the move protocol (gl_move.go): the master has not applied the
		// partition's last move. A write it commits must not count this replica, which may
		// have begun catching the new replica up at a version below it.
		c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdateAck{GlUpdateAck: &peerpb.GlUpdateAck{WriteId: m.GetWriteId()}}})
		return
	}
	// The new replica of a move takes every write and no lease: it serves nothing before the
	// move finishes.
	leaseOK := m.GetLeaseNanos() > 0 && (gp == nil || !gp.joining) && c.glGrantFresh(now, pid, from, m.GetSentUnixNanos()) &&
		c.glGrantGenOK(rec.Keyspace, rec.Key, m.GetGeneration())
	// A lease that comes with an older version than an update this node already has (a
	// delayed grant overtaken by a write) would revive what that update suspended.
	if u, ok := c.gl.updated[id]; ok && rec.Version.Less(u.version) {
		leaseOK = false
	}
	if m.GetLeaseNanos() > 0 && !leaseOK {
		// Refused: remembered, so that a later copy of the same update (a duplicate, or the
		// master's retransmission with a fresh send time) is refused as this one was.
		if c.glCheckGrant(now, id, from, m.GetWriteId()) == glGrantNew {
			c.glDeclineGrant(id, from, m.GetWriteId())
		}
	}
	if leaseOK {
		switch c.glCheckGrant(now, id, from, m.GetWriteId()) {
		case glGrantStale:
			leaseOK = false
		case glGrantDuplicate:
			if c.glGrantDeclined(id, from, m.GetWriteId()) {
				leaseOK = false // the first copy was refused: so is this one
				break
			}
			// Already applied: keep the lease as the first copy started it, and acknowledge
			// as then (the grantor may record the lease again, later: conservative) — unless
			// the first copy's acknowledgement still waits for this host's affiliated nodes.
			for _, hw := range c.gl.hostWait {
				if hw.master == from && hw.writeID == m.GetWriteId() {
					return
				}
			}
			c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdateAck{GlUpdateAck: &peerpb.GlUpdateAck{
				WriteId: m.GetWriteId(), Ok: true, LeaseNanos: m.GetLeaseNanos(), NotStored: gp == nil}}})
			return
		}
	}
	if u, ok := c.gl.updated[id]; !ok || u.version.Less(rec.Version) {
		if len(c.gl.updated) < glMaxSeen {
			c.gl.updated[id] = glUpdated{version: rec.Version, at: now}
		}
	}
	ack := &peerpb.GlUpdateAck{WriteId: m.GetWriteId(), Ok: true}
	if gp == nil {
		// Not a member: an affiliated node, or a replica a move removed that a master still
		// counts as a lease holder. Its ack ends a lease but stores nothing for the write.
		ack.NotStored = true
		c.glAffUpdate(now, from, id, pid, rec, m, leaseOK)
		if a, ok := c.gl.aff[id]; ok && leaseOK && a.until.After(now) {
			ack.LeaseNanos = m.GetLeaseNanos()
		}
		if c.glPassToAffiliates(now, from, id, m, 0, ack) {
			return // acknowledged when they have it or their leases ran out (glTickHot)
		}
		c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdateAck{GlUpdateAck: ack}})
		return
	}
	delete(c.gl.aff, id) // a member serves the partition's keys from its leases only
	c.Clock.Observe(now, rec.Version)
	c.ApplyLocal(now, rec, false)
	l := c.gl.leases[id]
	switch {
	case leaseOK:
		nl := &glLease{until: now.Add(time.Duration(m.GetLeaseNanos())), grantor: from, part: pid}
		if m.GetCommitted() {
			nl.version, nl.found = rec.Version, !rec.Tombstone
		} else {
			// Not served until the commit notice: the master may not have a majority yet.
			nl.pending, nl.found = rec.Version, !rec.Tombstone
		}
		c.gl.leases[id] = nl
		ack.LeaseNanos = m.GetLeaseNanos()
	case l != nil && (!m.GetCommitted() || l.version.Less(rec.Version)):
		// The master does not count on this replica's lease any more: stop serving.
		delete(c.gl.leases, id)
	}
	// Affiliated nodes holding a secondary lease learn the update first (their leases are
	// sub-periods of this one, so this is bounded by the lease's own end).
	if c.glPassToAffiliates(now, from, id, m, c.glSecondaryLength(now, gp, id, ack.LeaseNanos), ack) {
		return // acknowledged when they have it or their leases ran out (glTickHot)
	}
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdateAck{GlUpdateAck: ack}})
}

// glPassToAffiliates passes an uncommitted update of key id on to the affiliated nodes that
// hold a valid secondary lease from this host, renewed for sec (0: no lease), and reports
// whether it did: the host then sends ack to the master (glMaybeAckHost) only when each has
// acknowledged or its secondary lease ran out (liu-thesis 4.1.4 "Consistency Issues"). A
// replica that left the partition by a move does this too, without a lease, until the
// secondary leases it hosted have run out.
func (c *Engine) glPassToAffiliates(now time.Time, from uint32, id string, m *peerpb.GlUpdate, sec time.Duration, ack *peerpb.GlUpdateAck) bool {
	hk, ok := c.gl.hostAff[id]
	if !ok || m.GetCommitted() {
		return false
	}
	hw := &glHostWait{from: 0, writeID: m.GetWriteId(), master: from, id: id, waitFor: map[uint32]bool{}, leaseNanos: ack.GetLeaseNanos(),
		until: now, notStored: ack.GetNotStored()}
	for _, n := range sortedKeys(hk.recs) {
		r := hk.recs[n]
		if now.Before(r.until) {
			hw.waitFor[n] = true
			hw.until = maxTime(hw.until, r.until)
		}
	}
	if len(hw.waitFor) == 0 {
		return false
	}
	wid := c.glNewID()
	c.gl.hostWait[wid] = hw
	for _, n := range sortedKeys(hw.waitFor) {
		u := &peerpb.GlUpdate{WriteId: wid, Record: m.GetRecord(), SentUnixNanos: now.UnixNano(), LeaseNanos: int64(sec), Generation: m.GetGeneration()}
		if sec > 0 {
			hk.recs[n] = &glRecord{until: now.Add(glGrantMaxAge + c.Cfg.MaxClockOffset + stretch(sec))}
		}
		// Without a new lease the record stays until the affiliated node acknowledges the
		// update (which ends its lease) or the record runs out: the host must not acknowledge
		// the master while the old secondary lease may still be in force.
		c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdate{GlUpdate: u}})
	}
	return true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// glSecondaryLength is the secondary lease a host may give now: the configured length, cut so
// that it ends before the host's own lease (leaseNanos from now) minus the grant's maximum age
// and ε — a sub-period of the host's lease (liu-thesis 4.1.4 "Consistency Issues").
func (c *Engine) glSecondaryLength(now time.Time, gp *glPart, id string, leaseNanos int64) time.Duration {
	d := gp.opts.SecondaryLease
	if gp.masterOf(nil, c.Region) == c.Cfg.NodeID && leaseNanos == 0 {
		return d
	}
	room := time.Duration(leaseNanos) - glGrantMaxAge - 2*c.Cfg.MaxClockOffset - 10*time.Millisecond
	room = time.Duration(float64(room) * (1 - 2*glDriftMargin))
	if room < d {
		d = room
	}
	if d < 10*time.Millisecond {
		return 0
	}
	return d
}

func (c *Engine) glAffUpdate(now time.Time, from uint32, id string, pid glPartID, rec storage.Record, m *peerpb.GlUpdate, leaseOK bool) {
	a, ok := c.gl.aff[id]
	if !leaseOK {
		if ok && (!m.GetCommitted() || a.rec.Version.Less(rec.Version)) {
			delete(c.gl.aff, id)
		}
		return
	}
	if !ok {
		if len(c.gl.aff) >= glMaxAffEntries {
			return
		}
		a = &glAff{part: pid}
		c.gl.aff[id] = a
	}
	a.until = now.Add(time.Duration(m.GetLeaseNanos()))
	a.host = from
	if m.GetCommitted() {
		a.rec, a.found, a.pending = rec, !rec.Tombstone, nil
	} else {
		r := rec
		a.pending = &r
	}
}

func (c *Engine) glHandleCommit(now time.Time, from uint32, m *peerpb.GlCommit) {
	id := coord.KeyID(m.GetKeyspace(), m.GetPartition(), m.GetKey())
	v := wire.VersionFromPB(m.GetVersion())
	if l, ok := c.gl.leases[id]; ok && l.pending == v {
		l.version, l.pending = v, hlc.Version{}
	}
	if a, ok := c.gl.aff[id]; ok && a.pending != nil && a.pending.Version == v {
		a.rec, a.found, a.pending = *a.pending, !a.pending.Tombstone, nil
	}
	if hk, ok := c.gl.hostAff[id]; ok {
		for _, n := range sortedKeys(hk.recs) {
			if now.Before(hk.recs[n].until) {
				c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_GlCommit{GlCommit: m}})
			}
		}
	}
}

func (c *Engine) glHandleUpdateAck(now time.Time, from uint32, m *peerpb.GlUpdateAck) {
	id := m.GetWriteId()
	if k, ok := c.gl.writes[id]; ok {
		c.glHandleUpdateAckAtMaster(now, from, k, m)
		return
	}
	if hw, ok := c.gl.hostWait[id]; ok {
		if hk, ok := c.gl.hostAff[hw.id]; ok {
			if m.GetLeaseNanos() > 0 {
				hk.recs[from] = &glRecord{until: now.Add(stretch(time.Duration(m.GetLeaseNanos()))), acked: true}
			} else {
				delete(hk.recs, from)
			}
		}
		delete(hw.waitFor, from)
		c.glMaybeAckHost(now, id, hw)
		return
	}
	if lz, ok := c.gl.lazy[id]; ok {
		delete(lz.pending, from)
		if len(lz.pending) == 0 {
			delete(c.gl.lazy, id)
		}
		return
	}
	if g, ok := c.gl.grants[id]; ok && g.node == from {
		delete(c.gl.grants, id)
		until := now.Add(stretch(g.lease))
		if g.master {
			if k, ok := c.gl.keys[g.id]; ok {
				if r, ok := k.leases[from]; ok && r.grant == id {
					if m.GetLeaseNanos() > 0 {
						r.until, r.acked = until, true
					} else {
						delete(k.leases, from)
					}
				}
			}
		} else if hk, ok := c.gl.hostAff[g.id]; ok {
			if r, ok := hk.recs[from]; ok && r.grant == id {
				if m.GetLeaseNanos() > 0 {
					r.until, r.acked = until, true
				} else {
					delete(hk.recs, from)
				}
			}
		}
	}
}

// glMaybeAckHost acknowledges the master's update once every affiliated node has it or its
// secondary lease ran out.
func (c *Engine) glMaybeAckHost(now time.Time, wid uint64, hw *glHostWait) {
	if hk, ok := c.gl.hostAff[hw.id]; ok {
		for n := range hw.waitFor {
			if r, ok := hk.recs[n]; !ok || !now.Before(r.until) {
				delete(hw.waitFor, n)
			}
		}
	} else {
		clear(hw.waitFor)
	}
	if len(hw.waitFor) > 0 {
		return
	}
	delete(c.gl.hostWait, wid)
	c.Send(hw.master, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdateAck{GlUpdateAck: &peerpb.GlUpdateAck{WriteId: hw.writeID, Ok: true, LeaseNanos: hw.leaseNanos, NotStored: hw.notStored}}})
}

// glHandleRevoke drops the leases the grantor gave (see glConservative) and acknowledges.
func (c *Engine) glHandleRevoke(now time.Time, from uint32, m *peerpb.GlRevoke) {
	if !c.glGenInstalled(m.GetKeyspace(), m.GetGeneration()) {
		// A new generation's master (gl_split.go): this node still holds, or may still take,
		// leases of the partitions the generation replaces. It acknowledges once it has
		// installed the generation (the master resends).
		return
	}
	pid := glPartID{m.GetKeyspace(), m.GetPartition()}
	if c.gl.revoked[pid] == nil {
		c.gl.revoked[pid] = map[uint32]time.Time{}
	}
	c.gl.revoked[pid][m.GetGrantor()] = now
	drop := func(id string) {
		if l, ok := c.gl.leases[id]; ok && l.part == pid && l.grantor == m.GetGrantor() {
			delete(c.gl.leases, id)
		}
		if a, ok := c.gl.aff[id]; ok && a.part == pid {
			delete(c.gl.aff, id)
		}
	}
	if len(m.GetKeys()) > 0 {
		for _, k := range m.GetKeys() {
			drop(coord.KeyID(m.GetKeyspace(), m.GetPartition(), k))
		}
	} else {
		// Bounded by the number of leases and affiliated entries this node holds.
		for id, l := range c.gl.leases {
			if l.part == pid && l.grantor == m.GetGrantor() {
				delete(c.gl.leases, id)
			}
		}
		for id, a := range c.gl.aff {
			if a.part == pid {
				delete(c.gl.aff, id)
			}
		}
	}
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlRevokeAck{GlRevokeAck: &peerpb.GlRevokeAck{Keyspace: m.GetKeyspace(), Partition: m.GetPartition(), Id: m.GetId()}}})
}

// --- hot keys (affiliated nodes, liu-thesis 4.1.4) ---

// glTickHot re-evaluates hot keys and gives (or renews) secondary leases on them to the other
// nodes of this region. Runs every glSlowTick.
func (c *Engine) glTickHot(now time.Time) {
	gl := c.gl
	if gl.hot == nil {
		return
	}
	gl.hot.Update(now)
	hot := gl.hot.Hot()
	c.glCounters.HotKeys.Store(int64(len(hot)))
	for _, idb := range hot {
		id := string(idb)
		ksName, part, key, ok := coord.ParseKeyID(id)
		if !ok {
			continue
		}
		gp := c.glPartOf(ksName, part)
		if gp == nil || !gp.opts.HotKeys || gp.joining || !gp.p.Contains(key) {
			continue // (not contained: a key seen before a split that moved it to another ID)
		}
		var (
			rec    storage.Record
			found  bool
			lease  time.Duration
			master bool
		)
		if c.glActing(gp, key, now) {
			k, ok := gl.keys[id]
			if !ok || !k.known || k.write != nil {
				continue
			}
			r, f, ok := c.glCommittedRecord(k)
			if !ok {
				continue
			}
			rec, found, lease, master = r, f, gp.opts.SecondaryLease, true
		} else {
			l, ok := gl.leases[id]
			if !ok || !l.pending.IsZero() || !now.Before(l.until) {
				continue
			}
			if l.until.Sub(now) < 2*gp.opts.SecondaryLease+glGrantMaxAge {
				// A hot key's host renews its own lease before it runs out: secondary leases
				// must end before it, so a lapse would send every affiliated node's reads
				// back to the host at once.
				c.glRenewInBackground(now, gp, id, key)
			}
			lease = c.glSecondaryLength(now, gp, id, int64(l.until.Sub(now)))
			if lease == 0 {
				continue
			}
			found = l.found
			if found {
				r, f, err := c.Store.GetAt(ksName, key, l.version)
				if err != nil || !f || r.Version != l.version {
					continue
				}
				rec = r
			} else {
				rec = storage.Record{Keyspace: ksName, Key: key, Tombstone: true}
			}
		}
		c.glGrantSecondary(now, gp, id, rec, found, lease, master)
	}
	// Host waits whose affiliated nodes' leases ran out.
	ids := slices.Sorted(maps.Keys(gl.hostWait))
	for _, id := range ids {
		c.glMaybeAckHost(now, id, gl.hostWait[id])
	}
	// Forget expired routing links, affiliated entries and host records (bounded maps).
	for id, r := range gl.routes {
		if !now.Before(r.until) {
			delete(gl.routes, id)
		}
	}
	for id, a := range gl.aff {
		if !now.Before(a.until) {
			delete(gl.aff, id)
		}
	}
	for id, hk := range gl.hostAff {
		for n, r := range hk.recs {
			if !now.Before(r.until) {
				delete(hk.recs, n)
			}
		}
		if len(hk.recs) == 0 {
			delete(gl.hostAff, id)
		}
	}
	for id, l := range gl.leases {
		if !now.Before(l.until) {
			delete(gl.leases, id)
		}
	}
	for id, u := range gl.updated {
		if now.Sub(u.at) > 2*glGrantMaxAge {
			delete(gl.updated, id) // older grants are refused as stale anyway
		}
	}
	for id, g := range gl.grantSeen {
		if now.Sub(g.at) > 2*glGrantMaxAge { // older grants are refused as stale anyway
			delete(gl.grantSeen, id)
		}
	}
	for k, until := range gl.seen {
		if now.After(until) {
			delete(gl.seen, k)
		}
	}
}

// glRenewInBackground asks the master for a fresh lease on key without a client waiting.
func (c *Engine) glRenewInBackground(now time.Time, gp *glPart, id string, key []byte) {
	if _, busy := c.gl.renewing[id]; busy {
		return
	}
	req := Request{Op: OpGet, Keyspace: gp.ks.Spec.Name, Key: key, Deadline: now.Add(c.glRoundTimeout(gp))}
	c.glSendOrWait(now, gp.ks, gp.p, gp, &glFwd{req: req, id: id, gp: gp})
}

// glGrantSecondary sends secondary leases on a hot key to the affiliated nodes: the nodes of
// this region that do not replicate the partition (lowest IDs first, up to hot_key_replicas),
// renewing a lease once half of it is gone.
func (c *Engine) glGrantSecondary(now time.Time, gp *glPart, id string, rec storage.Record, found bool, lease time.Duration, master bool) {
	var affs []uint32
	for _, n := range c.Cfg.Nodes {
		// Not a member: the new replica of a move serves nothing until the move finishes.
		if n.Region == c.SelfRegion && n.ID != c.Cfg.NodeID && !gp.p.Holds(n.ID) {
			affs = append(affs, n.ID)
		}
	}
	slices.Sort(affs)
	if len(affs) > gp.opts.HotKeyReplicas {
		affs = affs[:gp.opts.HotKeyReplicas]
	}
	var recs map[uint32]*glRecord
	if master {
		recs = c.gl.keys[id].leases
	} else {
		hk, ok := c.gl.hostAff[id]
		if !ok {
			if len(c.gl.hostAff) >= glMaxAffEntries {
				return
			}
			hk = &glHostKey{recs: map[uint32]*glRecord{}}
			c.gl.hostAff[id] = hk
		}
		recs = hk.recs
	}
	if !found {
		// A key that does not exist has no record to lease: such a grant would carry no key
		// (the update is refused at the door, wire.PeerCheck) and this host would wait on a
		// lease nobody holds. Affiliates forward reads of absent keys to the master.
		return
	}
	pb := wire.RecordToPB(rec)
	for _, n := range affs {
		if r, ok := recs[n]; ok && r.acked && r.until.Sub(now) > lease/2 {
			continue
		}
		wid := c.glNewID()
		recs[n] = &glRecord{until: now.Add(glGrantMaxAge + c.Cfg.MaxClockOffset + stretch(lease)), grant: wid}
		if len(c.gl.grants) < glMaxAffEntries {
			c.gl.grants[wid] = glGrant{id: id, node: n, master: master, lease: lease, sent: now}
		}
		c.glCounters.SecondaryGrants.Add(1)
		c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_GlUpdate{GlUpdate: &peerpb.GlUpdate{
			WriteId: wid, Record: pb, LeaseNanos: int64(lease), SentUnixNanos: now.UnixNano(), TableVersion: gp.table.version, Committed: true, Generation: gp.p.Generation}}})
	}
	for g, gr := range c.gl.grants {
		if now.Sub(gr.sent) > 10*time.Second {
			delete(c.gl.grants, g) // lost acknowledgements: the records expire on their own
		}
	}
}

// --- dispatch ---

func (c *Engine) glStep(now time.Time, env *peerpb.Envelope) {
	c.glSetup(now)
	if c.gl == nil {
		return
	}
	from := env.From
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_GlForward:
		c.glHandleForward(now, from, m.GlForward)
	case *peerpb.Envelope_GlForwardReply:
		c.glHandleForwardReply(now, from, m.GlForwardReply)
	case *peerpb.Envelope_GlLeaseAck:
		c.glHandleLeaseAck(now, from, m.GlLeaseAck)
	case *peerpb.Envelope_GlUpdate:
		c.glHandleUpdate(now, from, m.GlUpdate)
	case *peerpb.Envelope_GlUpdateAck:
		c.glHandleUpdateAck(now, from, m.GlUpdateAck)
	case *peerpb.Envelope_GlCommit:
		c.glHandleCommit(now, from, m.GlCommit)
	case *peerpb.Envelope_GlHeartbeat:
		c.glHandleHeartbeat(now, from, m.GlHeartbeat)
	case *peerpb.Envelope_GlHeartbeatAck:
		c.glHandleHeartbeatAck(now, from, m.GlHeartbeatAck)
	case *peerpb.Envelope_GlPrepare:
		c.glHandlePrepare(now, from, m.GlPrepare)
	case *peerpb.Envelope_GlPromise:
		c.glHandlePromise(now, from, m.GlPromise)
	case *peerpb.Envelope_GlAccept:
		c.glHandleAccept(now, from, m.GlAccept)
	case *peerpb.Envelope_GlAccepted:
		c.glHandleAccepted(now, from, m.GlAccepted)
	case *peerpb.Envelope_GlCommitTable:
		c.glHandleCommitTable(now, from, m.GlCommitTable)
	case *peerpb.Envelope_GlFetch:
		c.glHandleFetch(now, from, m.GlFetch)
	case *peerpb.Envelope_GlFetchReply:
		c.glHandleFetchReply(now, from, m.GlFetchReply)
	case *peerpb.Envelope_GlRevoke:
		c.glHandleRevoke(now, from, m.GlRevoke)
	case *peerpb.Envelope_GlRevokeAck:
		c.glHandleRevokeAck(now, from, m.GlRevokeAck)
	}
}

func (c *Engine) glTick(now time.Time) {
	c.glSetup(now)
	if c.gl == nil || len(c.gl.partList) == 0 && len(c.gl.fwd) == 0 {
		return
	}
	c.glTickHeartbeats(now)
	c.glTickMaster(now)
	if now.Before(c.gl.nextSlow) {
		return
	}
	c.gl.nextSlow = now.Add(glSlowTick)
	c.glTickFailover(now)
	c.glTickMoveRoles(now)
	c.glTickProposals(now)
	c.glTickMoves(now)
	c.glTickHot(now)
}

// glTickMoves starts automatic migrations and gives up moves that stall.
func (c *Engine) glTickMoves(now time.Time) {
	gl := c.gl
	for _, k := range c.glMovingKeys() {
		if now.Sub(k.moveAt) > 10*c.glRoundTimeout(k.gp)+5*time.Second && len(k.moveWait) > 0 {
			// The move keeps going (this node must not act on the key again until a newer
			// table is chosen: the proposal may still win), but its callers hear now.
			for _, op := range k.moveWait {
				c.glFailOp(op, errs.New(errs.Unavailable, "globlease: moving the master of key %q has not completed (no majority of its replicas answered); it continues in the background", k.key))
			}
			k.moveWait = nil
		}
	}
	if gl.origins == nil {
		return
	}
	masterRegion := func(idb []byte) string {
		if k, ok := gl.keys[string(idb)]; ok {
			return c.Region[k.gp.masterOf(k.key, c.Region)]
		}
		return c.SelfRegion
	}
	for _, mv := range gl.origins.Candidates(now, masterRegion, 16) {
		k, ok := gl.keys[string(mv.Key)]
		if !ok || !k.gp.opts.AutoMigrate || !c.glActing(k.gp, k.key, now) || k.write != nil || k.recovery != nil {
			continue
		}
		target := c.glMoveTarget(k.gp, mv.To)
		if target == 0 || target == c.Cfg.NodeID {
			continue
		}
		gl.origins.Moved(now, mv.Key)
		c.glBeginMove(now, k, target)
	}
}

func (c *Engine) glMovingKeys() []*glKey {
	var out []*glKey
	for _, gp := range c.gl.partList {
		keys := slices.Sorted(maps.Keys(gp.migrating))
		for _, k := range keys {
			if ks, ok := c.gl.keys[coord.KeyID(gp.ks.Spec.Name, gp.p.ID, []byte(k))]; ok {
				out = append(out, ks)
			}
		}
	}
	return out
}

// glExpireLocal fails local request id at its deadline, saying what it waited for: at this
// node as the key's master (glTimeoutAtMaster), or for the master it was forwarded to.
func (c *Engine) glExpireLocal(id uint64) {
	now := c.LastTick
	for _, kid := range slices.Sorted(maps.Keys(c.gl.waiting)) {
		if k, ok := c.gl.keys[kid]; ok {
			for _, op := range k.queue {
				if op.from == 0 && op.req.ID == id {
					c.glFinish(id, Result{Op: op.op, Err: c.glTimeoutAtMaster(now, k, op)})
					return
				}
			}
		}
	}
	for _, wid := range slices.Sorted(maps.Keys(c.gl.writes)) {
		if k := c.gl.writes[wid]; k != nil && k.write != nil {
			for _, op := range k.write.waiters {
				if op.from == 0 && op.req.ID == id {
					c.glFinish(id, Result{Op: op.op, Err: c.glTimeoutAtMaster(now, k, op)})
					return
				}
			}
		}
	}
	for _, fid := range slices.Sorted(maps.Keys(c.gl.fwd)) {
		if f := c.gl.fwd[fid]; f.waiter.local == id {
			c.glFinish(id, Result{Op: f.req.Op, Err: errs.New(errs.Timeout, "globlease %s of key %q timed out waiting for its master %s%s",
				f.req.Op, f.req.Key, c.glFwdTarget(f), writeMayHaveApplied(f.req.Op))})
			return
		}
	}
	c.glFinish(id, Result{Err: errs.New(errs.Timeout, "globlease request timed out before its master answered; a write may or may not have been applied")})
}

func writeMayHaveApplied(op Op) string {
	if op == OpGet {
		return ""
	}
	return "; the write may or may not have been applied"
}

// glFwdTarget names the node a forwarded request went to, with its region.
func (c *Engine) glFwdTarget(f *glFwd) string {
	if f.to == 0 {
		return "(not reached)"
	}
	return fmt.Sprintf("%s (%s), which did not answer (down, cut off, or itself waiting on a lease holder)", c.NodeName(f.to), c.Region[f.to])
}

func (c *Engine) glExpireFwd(id uint64) {
	fwd, ok := c.gl.fwd[id]
	if !ok {
		return
	}
	delete(c.gl.fwd, id)
	if r, ok := c.gl.renewing[fwd.id]; ok && r.fwdID == id {
		delete(c.gl.renewing, fwd.id)
		for _, w := range r.waiters {
			c.glAnswer(w, Result{Op: OpGet, Err: errs.New(errs.Timeout, "globlease read timed out waiting for the key's master")}, nil)
		}
	}
}

// Claim is what one node believes it may act as master for in a partition right now (its
// master lease is valid): the home replicas whose keys it has (default keys) and the moved
// keys it has; Excluded are keys its table sends elsewhere or that it is giving away. The
// simulator checks that no key is claimed by two nodes at any step (liu-thesis 4.1.3: "either
// no master or only one correct master of a key exists").
type Claim struct {
	Keyspace  string
	Partition uint32
	// Start and End bound the partition's range (End nil: unbounded): claims of partitions
	// that a split or merge made are compared with those of the ones before by range.
	Start, End []byte
	Node       uint32
	Homes      []uint32
	Keys       []string
	Excluded   []string
	// HomeOf returns the home replica of a key under the claiming node's map (two nodes on
	// either side of a replica move may compute different homes for the same key).
	HomeOf func(key []byte) uint32
	// Reps are one key of each stretch of the partition whose keys share a home region: a
	// claim covers a stretch when its HomeOf names one of its Homes (gl_move.go).
	Reps []string
}

// ClaimsStretch reports whether the claim covers, through its homes, the stretch of keys
// starting at rep (all of it but finitely many keys: Excluded).
func (g Claim) ClaimsStretch(rep string) bool {
	return slices.Contains(g.Homes, g.HomeOf([]byte(rep)))
}

// Claims reports whether key is claimed by this node.
func (g Claim) Claims(key string) bool {
	if slices.Contains(g.Keys, key) {
		return true
	}
	if slices.Contains(g.Excluded, key) {
		return false
	}
	return slices.Contains(g.Homes, g.HomeOf([]byte(key)))
}

// MasterClaims lists this node's master claims at its local time now.
func (c *Engine) MasterClaims(now time.Time) []Claim {
	if c.gl == nil {
		return nil
	}
	var out []Claim
	for _, gp := range c.gl.partList {
		// A leaving replica that proposed its handover commits nothing more of the partition.
		if gp.locked || !c.glMasterLeaseValid(gp, now) {
			continue
		}
		g := gp
		cl := Claim{Keyspace: gp.ks.Spec.Name, Partition: gp.p.ID, Start: gp.p.Start, End: gp.p.End, Node: c.Cfg.NodeID,
			HomeOf: func(key []byte) uint32 { return g.home(key, c.Region) }}
		for _, k := range gp.homeKeys() {
			cl.Reps = append(cl.Reps, string(k))
		}
		for _, h := range gp.homes(c.Region) {
			if r, ok := gp.returning[h]; ok && r.locked {
				continue // proposed to go back to its home: this node commits nothing more of it
			}
			if gp.table.resolve(h) == c.Cfg.NodeID {
				cl.Homes = append(cl.Homes, h)
			}
		}
		for k, m := range gp.table.overrides {
			if _, moving := gp.migrating[k]; m == c.Cfg.NodeID && !moving {
				cl.Keys = append(cl.Keys, k)
			} else {
				cl.Excluded = append(cl.Excluded, k)
			}
		}
		for k := range gp.migrating {
			cl.Excluded = append(cl.Excluded, k)
		}
		slices.Sort(cl.Keys)
		slices.Sort(cl.Excluded)
		if len(cl.Homes) > 0 || len(cl.Keys) > 0 {
			out = append(out, cl)
		}
	}
	return out
}

// ServingLease is a version a node serves under a valid lease (or secondary lease) now.
type ServingLease struct {
	Node    uint32
	KeyID   string
	Version hlc.Version
}

// ServingLeases lists what this node would serve under its leases at its local time now.
func (c *Engine) ServingLeases(now time.Time) []ServingLease {
	if c.gl == nil {
		return nil
	}
	var out []ServingLease
	for _, id := range slices.Sorted(maps.Keys(c.gl.leases)) {
		if l := c.gl.leases[id]; now.Before(l.until) && l.pending.IsZero() {
			out = append(out, ServingLease{Node: c.Cfg.NodeID, KeyID: id, Version: l.version})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.gl.aff)) {
		if a := c.gl.aff[id]; now.Before(a.until) && a.pending == nil {
			v := a.rec.Version
			if !a.found && a.rec.Tombstone && a.rec.Version.WallNanos == 0 {
				v = hlc.Version{}
			}
			out = append(out, ServingLease{Node: c.Cfg.NodeID, KeyID: id, Version: v})
		}
	}
	return out
}

// Committed returns the committed version of every key this node knows as its master.
func (c *Engine) Committed() map[string]hlc.Version {
	if c.gl == nil {
		return nil
	}
	out := map[string]hlc.Version{}
	for id, k := range c.gl.keys {
		if k.known && k.exists {
			out[id] = k.committed
		}
	}
	return out
}
