package globlease

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/replication/coord"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// GlobLease (liu-thesis-globlease-meteorshower.txt section 4.1) on Meridian's placement: the
// replication group of a key is its partition's replicas (one "DHT ring" per region in the
// thesis), and every key has one master in that group (gl_table.go).
//
//   - Reads (Algorithm 1): the master serves reads; another replica serves a read only under a
//     valid lease for the key. Without one it forwards the read to the master and asks for a
//     lease at the same time (renewal). The lease starts at the replica when the grant arrives;
//     the master's lease record starts only when the replica's acknowledgement arrives, so the
//     record always outlasts the lease (4.1.3 "Leasing Period"). Until the acknowledgement, the
//     master keeps a conservative record (send time + grant age bound + ε + lease).
//   - Writes (Algorithm 2) go to the master and are serialised per key there. Active: the data
//     goes to every replica, with a renewed lease to those holding a valid one; the write
//     commits once a majority has it and every node still holding a valid lease has it too or
//     its lease expired. Passive (a request option): when no valid lease exists the master
//     writes locally, replies, and propagates afterwards. A key's first write is always active.
//   - Replicas serve only committed versions, at exactly the version their lease covers
//     (storage keeps versions side by side): an update makes a replica stop serving the key
//     until the master's commit notice. This closes a gap the thesis leaves open: a replica
//     serving a write that a failing master never committed, which a new master would not
//     know about.
//   - A new master (failover, migration, restart) recovers a key before serving it: it reads a
//     majority and re-writes the newest version actively, and it treats every node as a possible
//     lease holder until each has acknowledged a revocation of the old master's leases or the
//     longest lease has run out.
//   - Hot keys (4.1.4, affiliated nodes): a replica that sees a key read often gives the other
//     nodes of its region a secondary lease on it — always a sub-period of its own — so they
//     serve it from memory; before acknowledging an update it updates or outwaits them.
//
// Scans of a globlease keyspace read a majority like quorum QUORUM scans and are not
// lease-protected (documented in docs/globlease.md).

// Read paths of globlease reads.
const (
	PathMaster    = "master"
	PathLease     = "lease"
	PathForwarded = "forwarded"
	PathAffiliate = "affiliate"
)

// Counters are GlobLease's metrics (atomic: read by the metrics goroutine).
type Counters struct {
	ReadsMaster, ReadsLease, ReadsForwarded, ReadsAffiliate atomic.Int64
	WritesActive, WritesPassive, WritesWaitedForLease       atomic.Int64
	// LeaseRenewals: reads at a replica without a valid lease that asked the master for one.
	// LeaseUpdates: lease holders a write had to update (or outwait). Their sum per read is the
	// lease maintenance overhead of liu-thesis 4.1.5 (Fig. 4.6).
	LeaseRenewals, LeaseUpdates, LeasesGranted, LeasesExpiredWaits atomic.Int64
	LeaseMessages                                                  atomic.Int64
	MasterMoves, TableChanges, Recoveries, Revocations             atomic.Int64
	SecondaryGrants, HotKeys                                       atomic.Int64
	// SuspectMarks: lease holders found leaving a write's update unacknowledged for longer
	// than suspect_after; ShortGrants: leases granted at suspect_lease to such holders.
	SuspectMarks, ShortGrants atomic.Int64
	// ReportsHeld: a new replica's caught-up reports held back until the mastership table
	// allowed the move to finish (gl_move.go).
	ReportsHeld atomic.Int64
}

// Mutations are GlobLease's broken variants (DESIGN.md section 6: every checker is proven
// by a variant it must catch); the replica move's are in MoveMutations (gl_move.go).
var Mutations = map[string]string{
	"lease-record-at-grant":    "the master's lease record starts when the grant is sent instead of when the replica's acknowledgement arrives, so it ends before the replica's lease",
	"write-skips-lease-holder": "a write commits at a majority without updating (or outwaiting) a replica that still holds a valid lease",
	"master-ignores-lease":     "a master keeps acting without a majority's heartbeat acknowledgements, so a partitioned master and its elected successor overlap (the one-master invariant must see it)",
}

// Snapshot returns the counters by name.
func (g *Counters) Snapshot() map[string]int64 {
	return map[string]int64{
		"reads_master": g.ReadsMaster.Load(), "reads_lease": g.ReadsLease.Load(), "reads_forwarded": g.ReadsForwarded.Load(),
		"reads_affiliate": g.ReadsAffiliate.Load(), "writes_active": g.WritesActive.Load(), "writes_passive": g.WritesPassive.Load(),
		"lease_renewals": g.LeaseRenewals.Load(), "lease_updates": g.LeaseUpdates.Load(), "leases_granted": g.LeasesGranted.Load(),
		"lease_messages": g.LeaseMessages.Load(), "master_moves": g.MasterMoves.Load(), "table_changes": g.TableChanges.Load(),
		"recoveries": g.Recoveries.Load(), "revocations": g.Revocations.Load(), "secondary_grants": g.SecondaryGrants.Load(),
		"suspect_marks": g.SuspectMarks.Load(), "short_grants": g.ShortGrants.Load(), "move_reports_held": g.ReportsHeld.Load(),
	}
}

// Counters returns the GlobLease counters.
func (c *Engine) Counters() *Counters { return &c.glCounters }

const (
	glMaxQueue      = 1024    // ops waiting per key at a master
	glMaxKeys       = 1 << 20 // master key states kept
	glMaxHops       = 4       // redirections of one forwarded request
	glGrantMaxAge   = time.Second
	glSlowTick      = 250 * time.Millisecond
	glResendEvery   = 500 * time.Millisecond
	glMaxAffEntries = 4096
)

// glSeenKey identifies a forwarded write (the coordinator's request ID restarts with the
// process, the deadline tells incarnations apart).
type glSeenKey struct {
	from     uint32
	id       uint64
	deadline int64
}

const glMaxSeen = 1 << 18

type glGrantSeen struct {
	grantor uint32
	id      uint64
	at      time.Time
	// declined: the first copy of this grant was refused (not fresh, or older than an
	// update already applied) and acknowledged without a lease. Every later copy must be
	// refused too: the grantor's record follows that first acknowledgement, and a master
	// retransmits an unacknowledged update with a fresh send time, which would otherwise
	// pass the freshness test and start a lease the master does not count on.
	declined bool
}

// glGrantVerdict classifies a lease grant against the newest one accepted for the key.
type glGrantVerdict int

const (
	glGrantNew       glGrantVerdict = iota // newer than anything accepted: use it
	glGrantDuplicate                       // the one already accepted, delivered again
	glGrantStale                           // older than one already accepted: refuse
)

// glCheckGrant classifies a lease grant (grantor, id) on key and remembers a new one as the
// newest. A duplicate must not restart the lease (it started when the first copy arrived, and
// the grantor's record follows that copy's acknowledgement); a stale one must not revive it.
func (c *Engine) glCheckGrant(now time.Time, key string, grantor uint32, id uint64) glGrantVerdict {
	if s, ok := c.gl.grantSeen[key]; ok && s.grantor == grantor {
		switch {
		case id < s.id:
			return glGrantStale
		case id == s.id:
			return glGrantDuplicate
		}
	}
	if _, ok := c.gl.grantSeen[key]; ok || len(c.gl.grantSeen) < glMaxSeen {
		c.gl.grantSeen[key] = glGrantSeen{grantor: grantor, id: id, at: now}
	}
	return glGrantNew
}

// glDeclineGrant marks the grant (grantor, id) on key, just classified as new, as refused.
func (c *Engine) glDeclineGrant(key string, grantor uint32, id uint64) {
	if s, ok := c.gl.grantSeen[key]; ok && s.grantor == grantor && s.id == id {
		s.declined = true
		c.gl.grantSeen[key] = s
	}
}

// glGrantDeclined reports whether the grant (grantor, id) on key was refused when it first came.
func (c *Engine) glGrantDeclined(key string, grantor uint32, id uint64) bool {
	s, ok := c.gl.grantSeen[key]
	return ok && s.grantor == grantor && s.id == id && s.declined
}

type glUpdated struct {
	version hlc.Version
	at      time.Time
}

type glPartID struct {
	ks   string
	part uint32
}

type glState struct {
	pmap     *placement.Map
	parts    map[glPartID]*glPart
	partList []*glPart

	keys map[string]*glKey // master side, by key ID
	// retiring: writes a superseded generation of a partition still has in flight at this
	// node, by keyspace and key (gl_split.go: glRetire), until they commit or retireBy.
	retiring map[string]*glKey
	retireBy map[*glPart]time.Time
	waiting  map[string]bool        // keys with queued ops
	leases   map[string]*glLease    // replica side
	renewing map[string]*glRenewal  // reads waiting for a renewal at this replica
	aff      map[string]*glAff      // this node as an affiliated (hot-key) node
	hostAff  map[string]*glHostKey  // this node as the host of affiliated nodes (non-master)
	routes   map[string]*glRoute    // routing links to affiliated nodes
	fwd      map[uint64]*glFwd      // requests this node forwarded, by peer request ID
	local    map[uint64]bool        // client requests not answered yet, by request ID
	writes   map[uint64]*glKey      // master writes in flight, by write ID
	fetches  map[uint64]*glKey      // recoveries in flight, by request ID
	grants   map[uint64]glGrant     // secondary grants in flight, by write ID
	hostWait map[uint64]*glHostWait // updates a host passes on before acknowledging
	lazy     map[uint64]*glLazy     // passive writes being propagated
	revoked  map[glPartID]map[uint32]time.Time
	seen     map[glSeenKey]time.Time // forwarded writes executed here, until they expire
	updated  map[string]glUpdated    // newest version each key's updates brought, for a while
	// grantSeen: the newest lease grant accepted per key (grantor, ID). Grant IDs grow with
	// every grant a node sends, so a grant older than one already accepted — overtaken on
	// the way — is refused: the grantor's record follows only its newest grant.
	grantSeen map[string]glGrantSeen

	hot     *HotKeys
	origins *Origins

	// suspects: lease holders that left an update unacknowledged longer than suspect_after,
	// until when their probation lasts; they are granted suspect_lease-long leases (per-node
	// lease length, liu-thesis 4.1.3 "Leasing Period"). Bounded by the cluster's nodes.
	suspects map[uint32]time.Time

	hbSeq             uint64
	hbSent            map[uint64]time.Time
	nextHeartbeat     time.Time
	heartbeatInterval time.Duration
	startedAt         time.Time
	nextSlow          time.Time
	// nextID numbers this incarnation's messages that expect an answer. It starts at the
	// start time in nanoseconds, so answers meant for a previous incarnation (still in flight
	// after a restart) never match a new request.
	nextID uint64
}

func (c *Engine) glNewID() uint64 {
	c.gl.nextID++
	return c.gl.nextID
}

// glKey is the master's state of one key. Invariant: write != nil only while acting or until
// the write is abandoned; committed is meaningful only when known.
type glKey struct {
	gp        *glPart
	key       []byte
	id        string
	known     bool
	exists    bool
	committed hlc.Version
	leases    map[uint32]*glRecord
	write     *glWrite
	recovery  *glRecovery
	queue     []*glOp
	draining  bool
	moveTo    uint32
	moveAt    time.Time
	moveWait  []*glOp
}

type glRecord struct {
	until time.Time
	grant uint64
	acked bool
	lease time.Duration // the length granted (the record lasts at least this long once acknowledged)
}

// glOp is a request at the master: from a local client (from == 0) or forwarded.
type glOp struct {
	op        Op
	keyBytes  []byte
	part      uint32
	req       Request // local
	from      uint32
	fwdID     uint64
	wantLease bool
	passive   bool
	origin    string
	region    string // OpMoveMaster
	value     []byte
	minVer    hlc.Version
	deadline  time.Time
	version   hlc.Version // a write's version, once stamped
	done      bool        // answered, or carried by a batched write (leaves the queue)
}

type glWrite struct {
	id         uint64
	started    time.Time
	rec        storage.Record
	acks       map[uint32]bool // every node that acknowledged (lease holders included)
	stored     map[uint32]bool // members that stored it (what majorities count)
	leaseTo    map[uint32]bool // nodes offered a lease with this update
	waiters    []*glOp
	nextResend time.Time
	recovery   bool
}

// glLease is a replica's lease on a key. It serves version (at exactly that version) while
// now < until and pending is zero.
type glLease struct {
	until   time.Time
	version hlc.Version
	found   bool
	pending hlc.Version
	grantor uint32
	part    glPartID
}

type glRenewal struct {
	waiters []glWaiter
	fwdID   uint64
}

// glWaiter is whoever waits for a forwarded read's answer: a local client request, or a
// non-replica's read this replica relayed.
type glWaiter struct {
	local     uint64 // client request ID; 0 for relays
	relayFrom uint32
	relayID   uint64
}

type glAff struct {
	rec     storage.Record
	found   bool
	until   time.Time
	pending *storage.Record
	host    uint32
	master  uint32
	part    glPartID
}

type glHostKey struct {
	recs map[uint32]*glRecord
	next time.Time // next renewal
}

type glHostWait struct {
	from, writeID uint64
	master        uint32
	id            string
	waitFor       map[uint32]bool
	leaseNanos    int64
	until         time.Time
	notStored     bool // the host is no member of the partition (it left by a move)
}

// glGrant is a secondary lease sent to an affiliated node, waiting for its acknowledgement.
type glGrant struct {
	id     string
	node   uint32
	master bool // granted by the key's master (record in glKey.leases) or by a host (glHostKey)
	lease  time.Duration
	sent   time.Time
}

type glRoute struct {
	nodes []uint32
	next  int
	until time.Time
}

type glFwd struct {
	to      uint32 // the node it was last sent to
	req     Request
	id      string
	gp      *glPart
	hops    int
	renewal bool
	waiter  glWaiter
}

type glLazy struct {
	rec     storage.Record
	gp      *glPart
	pending map[uint32]bool
	next    time.Time
}

func isGL(ks *placement.Keyspace) bool {
	return ks != nil && ks.Spec.Protocol == config.ProtocolGlobLease
}

// glSetup (re)builds the per-partition state when the placement map changes.
func (c *Engine) glSetup(now time.Time) {
	if c.Pmap == nil || (c.gl != nil && c.gl.pmap == c.Pmap) {
		return
	}
	if c.gl == nil {
		hbInterval := time.Duration(0)
		c.gl = &glState{
			parts: map[glPartID]*glPart{}, keys: map[string]*glKey{}, waiting: map[string]bool{},
			retiring: map[string]*glKey{}, retireBy: map[*glPart]time.Time{},
			leases: map[string]*glLease{}, renewing: map[string]*glRenewal{}, aff: map[string]*glAff{},
			hostAff: map[string]*glHostKey{}, routes: map[string]*glRoute{}, fwd: map[uint64]*glFwd{}, local: map[uint64]bool{}, fetches: map[uint64]*glKey{}, grants: map[uint64]glGrant{}, seen: map[glSeenKey]time.Time{}, updated: map[string]glUpdated{}, grantSeen: map[string]glGrantSeen{},
			writes: map[uint64]*glKey{}, hostWait: map[uint64]*glHostWait{}, lazy: map[uint64]*glLazy{},
			revoked: map[glPartID]map[uint32]time.Time{}, hbSent: map[uint64]time.Time{}, suspects: map[uint32]time.Time{},
			startedAt: now, heartbeatInterval: hbInterval, nextID: uint64(now.UnixNano()),
		}
	}
	gl := c.gl
	prevMap := gl.pmap
	gl.pmap = c.Pmap
	c.glDropSuperseded(prevMap, c.Pmap)
	prev := slices.Clone(gl.partList)
	held := map[glPartID]bool{}
	type freshPart struct {
		ks     *placement.Keyspace
		p      *placement.Partition
		opts   config.GlobLeaseOptions
		fenced bool
	}
	var fresh []freshPart
	for _, ksName := range slices.Sorted(maps.Keys(c.Pmap.Keyspaces)) {
		ks := c.Pmap.Keyspaces[ksName]
		if !isGL(ks) {
			continue
		}
		opts, err := config.GlobLeaseOptionsOf(ks.Spec.Options, ks.Spec.Regions)
		if err != nil {
			continue // validated when the keyspace was created
		}
		if gl.hot == nil {
			hk := HotKeyConfig{HotRate: opts.HotKeyRate, MaxHot: 64}
			hk.EnsureDefaults()
			gl.hot = NewHotKeys(hk)
			mp := MigrationPolicy{Share: opts.MigrateShare, Hold: opts.MigrateHold, Cooldown: opts.MigrateCooldown}
			mp.EnsureDefaults()
			mp.Share, mp.Hold, mp.Cooldown = opts.MigrateShare, opts.MigrateHold, opts.MigrateCooldown
			gl.origins = NewOrigins(mp)
		}
		if iv := opts.MasterLease / 4; gl.heartbeatInterval == 0 || iv < gl.heartbeatInterval {
			gl.heartbeatInterval = iv
		}
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			id := glPartID{ks.Spec.Name, p.ID}
			// A member: a replica, or the new replica of a move in progress (gl_move.go).
			if !p.Holds(c.Cfg.NodeID) {
				continue
			}
			if old, ok := gl.parts[id]; ok && old.p.Generation == p.Generation {
				held[id] = true
				old.ks, old.p = ks, p
				c.glConfigure(now, old)
				continue
			}
			// New here, or a new generation of it (a split or merge: gl_split.go). Whether the
			// acceptor fences is decided from the states the generation supersedes, before
			// they are dropped.
			fenced := p.Generation > 0 && c.glNeedsFence(glOverlapping(prev, ks.Spec.Name, p), p)
			fresh = append(fresh, freshPart{ks: ks, p: p, opts: opts, fenced: fenced})
		}
	}
	// Partitions this node no longer holds (it left by a move, or the keyspace is gone) and
	// generations a split or merge superseded.
	var requeue []*glOp
	for _, gp := range prev {
		if !held[glPartID{gp.ks.Spec.Name, gp.p.ID}] {
			if c.glStillHolds(gp) {
				// A split or merge: the writes in flight finish under the old generation
				// (gl_split.go), the rest runs under the new one.
				requeue = append(requeue, c.glRetire(now, gp)...)
			}
			requeue = append(requeue, c.glDropPart(now, gp, "left partition %d of keyspace %q (a replica move, a split or a merge)")...)
			if ks, ok := c.Pmap.Keyspace(gp.ks.Spec.Name); !ok || !hasPartition(ks, gp.p.ID) {
				// A merge retired the ID (IDs are never reused): its acceptor state is garbage.
				c.Persist(storage.Record{Keyspace: glMetaKeyspace, Key: glMetaKey(gp.ks.Spec.Name, gp.p.ID), Version: glMetaVersion, Tombstone: true})
			}
		}
	}
	for _, f := range fresh {
		id := glPartID{f.ks.Spec.Name, f.p.ID}
		held[id] = true
		o := f.opts
		gp := &glPart{ks: f.ks, p: f.p, opts: &o, installedAt: now,
			table:   newTable(),
			ackedAt: map[uint32]time.Time{}, lastAckTo: map[uint32]time.Time{}, lastHeard: map[uint32]time.Time{}, withholdAck: map[uint32]time.Time{},
			homeSince: map[uint32]time.Time{}, keySince: map[string]time.Time{},
			migrating: map[string]uint32{}, wantMoves: map[string]uint32{}, wantFailover: map[uint32]bool{},
			returning: map[uint32]*glReturn{},
		}
		gp.table.gen = f.p.Generation
		loaded := c.glLoad(gp)
		c.glConfigure(now, gp)
		gl.parts[id] = gp
		gl.partList = append(gl.partList, gp)
		if f.p.Generation > 0 {
			// A split or merge made this generation (gl_split.go). The fence as decided above
			// when the generation is new here (also after a restart that lost its state: no
			// old state, so fenced); as written with the state when it was found.
			if !loaded {
				gp.fenced = f.fenced
			}
			if gp.fenced {
				gp.ackFence = now.Add(gp.opts.ElectionTimeout)
			}
			c.glPersist(gp)
			gp.genPending = true
			continue
		}
		// After a (re)start this node may have granted leases in a previous life: until every
		// node acknowledges a revocation, or the longest lease ran out, all may hold one.
		if gp.mastersAny(c.Cfg.NodeID, c.Region) {
			c.glStartConservative(now, gp, c.Cfg.NodeID, nil)
		}
	}
	slices.SortFunc(gl.partList, func(a, b *glPart) int {
		if a.ks.Spec.Name != b.ks.Spec.Name {
			if a.ks.Spec.Name < b.ks.Spec.Name {
				return -1
			}
			return 1
		}
		return int(a.p.ID) - int(b.p.ID)
	})
	c.glRequeue(now, requeue)
}

func (c *Engine) glPartOf(ks string, part uint32) *glPart {
	if c.gl == nil {
		return nil
	}
	return c.gl.parts[glPartID{ks, part}]
}

// glOptions returns a globlease keyspace's typed options, also on a node that replicates none
// of its partitions (a coordinator that only forwards).
func (c *Engine) glOptions(ks *placement.Keyspace) *config.GlobLeaseOptions {
	for _, gp := range c.gl.partList {
		if gp.ks.Spec.Name == ks.Spec.Name {
			return gp.opts
		}
	}
	o, err := config.GlobLeaseOptionsOf(ks.Spec.Options, ks.Spec.Regions)
	if err != nil {
		return &config.GlobLeaseOptions{Lease: time.Minute, MasterLease: time.Second, ElectionTimeout: 2 * time.Second}
	}
	return &o
}

// glProposeReq handles a client request for a globlease keyspace at this coordinator.
func (c *Engine) glProposeReq(now time.Time, ks *placement.Keyspace, req Request) {
	c.glSetup(now)
	p := ks.Lookup(req.Key)
	id := coord.KeyID(ks.Spec.Name, p.ID, req.Key)
	if req.Op == OpGet {
		c.glObserveRead(now, id, p)
	}
	gp := c.glPartOf(ks.Spec.Name, p.ID)
	if req.WriteMode == "" && (req.Op == OpPut || req.Op == OpDelete) {
		req.WriteMode = "active"
		if c.glOptions(ks).Passive {
			req.WriteMode = "passive"
		}
	}
	c.Inflight++
	c.gl.local[req.ID] = true
	c.AddTimer(req.Deadline, timerGLLocalDeadline, req.ID)
	if gp != nil && gp.masterOf(req.Key, c.Region) == c.Cfg.NodeID {
		c.glMasterOp(now, gp, &glOp{op: req.Op, keyBytes: req.Key, part: p.ID, req: req, passive: req.WriteMode == "passive", origin: c.SelfRegion, region: req.Region,
			value: req.Value, minVer: req.MinVersion, deadline: req.Deadline})
		return
	}
	if req.Op == OpGet {
		if r, ok := c.glLocalRead(now, gp, id, req.Keyspace, p.ID, req.Key); ok {
			c.glFinish(req.ID, r)
			return
		}
	}
	c.glSendOrWait(now, ks, p, gp, &glFwd{req: req, id: id, gp: gp, waiter: glWaiter{local: req.ID}})
}

// glSendOrWait forwards a request, coalescing reads of one key at a replica: one read asks
// the master for the lease (renewal), the others wait for its answer.
func (c *Engine) glSendOrWait(now time.Time, ks *placement.Keyspace, p *placement.Partition, gp *glPart, fwd *glFwd) {
	if fwd.req.Op == OpGet && gp != nil {
		if r, ok := c.gl.renewing[fwd.id]; ok {
			if len(r.waiters) < glMaxQueue {
				r.waiters = append(r.waiters, fwd.waiter)
				return
			}
		} else {
			fwd.renewal = true
			c.glCounters.LeaseRenewals.Add(1)
			c.gl.renewing[fwd.id] = &glRenewal{}
		}
	}
	c.glForward(now, ks, p, fwd, c.glTarget(now, ks, p, gp, fwd.req))
}

// glFinish answers a local client request once (later answers and timeouts are dropped).
func (c *Engine) glFinish(id uint64, r Result) {
	if !c.gl.local[id] {
		return
	}
	delete(c.gl.local, id)
	c.Inflight--
	r.ID = id
	c.Reply(r)
}

// glAnswer delivers a read result to a waiter.
func (c *Engine) glAnswer(w glWaiter, r Result, rec *peerpb.Record) {
	if w.local != 0 {
		c.glFinish(w.local, r)
		return
	}
	if w.relayFrom != 0 {
		out := &peerpb.GlForwardReply{RequestId: w.relayID, Found: r.Found, Path: PathForwarded, ErrMsg: errMsg(r.Err), ErrKind: uint32(errs.KindOf(r.Err))}
		if r.Err == nil {
			out.ErrKind = 0
		}
		if r.Found {
			out.Record = rec
		}
		c.Send(w.relayFrom, &peerpb.Envelope{Msg: &peerpb.Envelope_GlForwardReply{GlForwardReply: out}})
	}
}

func errMsg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// glTarget picks where to send a request this node cannot serve: reads of keys with routing
// links go round-robin to the affiliated nodes; other reads from a non-replica to the nearest
// replica (preferably in this region, which may hold a lease); everything else to the master.
func (c *Engine) glTarget(now time.Time, ks *placement.Keyspace, p *placement.Partition, gp *glPart, req Request) uint32 {
	id := coord.KeyID(ks.Spec.Name, p.ID, req.Key)
	if req.Op == OpGet && gp == nil {
		if rt, ok := c.gl.routes[id]; ok && now.Before(rt.until) && len(rt.nodes) > 0 {
			rt.next = (rt.next + 1) % len(rt.nodes)
			return rt.nodes[rt.next]
		}
		return c.ByDistance(p.Replicas)[0]
	}
	if gp != nil {
		return gp.masterOf(req.Key, c.Region)
	}
	// A non-replica does not know the table: the home replica is the best guess; a stale
	// guess is redirected.
	opts := c.glOptions(ks)
	want := opts.HomeRegionOf(req.Key)
	for _, r := range p.Replicas {
		if c.Region[r] == want {
			return r
		}
	}
	return p.Replicas[0]
}

func (c *Engine) glForward(now time.Time, ks *placement.Keyspace, p *placement.Partition, fwd *glFwd, to uint32) {
	id := c.glNewID()
	fwd.to = to
	c.gl.fwd[id] = fwd
	if fwd.renewal {
		c.gl.renewing[fwd.id].fwdID = id
	}
	c.AddTimer(fwd.req.Deadline, timerGLFwdDeadline, id)
	req := fwd.req
	op := uint32(1)
	var value []byte
	switch req.Op {
	case OpPut:
		op, value = 2, req.Value
	case OpDelete:
		op = 3
	case OpMoveMaster:
		op, value = 4, []byte(req.Region)
	}
	var tv uint64
	if fwd.gp != nil {
		tv = fwd.gp.table.version
	}
	if fwd.renewal {
		c.glCounters.LeaseMessages.Add(1)
	}
	c.Send(to, &peerpb.Envelope{Msg: &peerpb.Envelope_GlForward{GlForward: &peerpb.GlForward{
		RequestId: id, Keyspace: ks.Spec.Name, Partition: p.ID, Key: req.Key, Op: op, Value: value,
		Passive: req.WriteMode == "passive", MinVersion: wire.VersionToPB(req.MinVersion), WantLease: fwd.renewal,
		OriginRegion: c.SelfRegion, TableVersion: tv, DeadlineUnixNanos: req.Deadline.UnixNano(), Hops: uint32(fwd.hops),
	}}})
}

// glLocalRead serves a read from a valid lease or affiliated entry; false when it cannot.
func (c *Engine) glLocalRead(now time.Time, gp *glPart, id, ks string, part uint32, key []byte) (Result, bool) {
	r, ok := c.glLocalRecord(now, gp, id, ks, part, key)
	if !ok {
		return Result{}, false
	}
	if r.Path == PathLease {
		c.glCounters.ReadsLease.Add(1)
	}
	res := Result{Op: OpGet, Path: r.Path, Found: r.Found}
	if r.Found {
		rec, _ := wire.RecordFromPB(r.Record)
		res.Value, res.Version = rec.Value, rec.Version
	}
	return res, true
}

func resultOf(req Request, rec storage.Record, path string) Result {
	r := Result{ID: req.ID, Op: req.Op, Version: rec.Version, Path: path}
	if !rec.Tombstone {
		r.Found = true
		r.Value = rec.Value
	}
	return r
}

func (c *Engine) glObserveRead(now time.Time, id string, p *placement.Partition) {
	if c.gl.hot != nil && p.HasReplica(c.Cfg.NodeID) {
		c.gl.hot.Observe(now, []byte(id))
	}
}

// glHandleForward handles a forwarded request: at the master (or the node that thinks it
// is), at a replica holding a lease (reads from non-replicas), or at an affiliated node.
func (c *Engine) glHandleForward(now time.Time, from uint32, m *peerpb.GlForward) {
	c.glSetup(now)
	ks, ok := c.Pmap.Keyspace(m.GetKeyspace())
	if !ok || !isGL(ks) {
		return
	}
	// The key's partition in this node's map (the sender's may be older or newer around a
	// split or merge: this node's map decides, its table names the master).
	p := ks.Lookup(m.GetKey())
	id := coord.KeyID(ks.Spec.Name, p.ID, m.GetKey())
	gp := c.glPartOf(ks.Spec.Name, p.ID)
	reply := func(r *peerpb.GlForwardReply) {
		r.RequestId = m.GetRequestId()
		c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_GlForwardReply{GlForwardReply: r}})
	}
	op := Op(0)
	switch m.GetOp() {
	case 1:
		op = OpGet
	case 2:
		op = OpPut
	case 3:
		op = OpDelete
	case 4:
		op = OpMoveMaster
	default:
		return
	}
	if op == OpGet {
		c.glObserveRead(now, id, p)
		// An affiliated node or a replica with a lease answers reads that need no lease.
		if !m.GetWantLease() && (gp == nil || gp.masterOf(m.GetKey(), c.Region) != c.Cfg.NodeID) {
			if r, ok := c.glLocalRecord(now, gp, id, ks.Spec.Name, p.ID, m.GetKey()); ok {
				reply(r)
				return
			}
			if gp != nil && !p.HasReplica(from) {
				// A non-replica asked this replica: renew on its behalf (Algorithm 1).
				c.glRelay(now, ks, p, gp, from, m)
				return
			}
		}
	}
	deadline := time.Unix(0, m.GetDeadlineUnixNanos())
	if m.GetDeadlineUnixNanos() == 0 || deadline.After(now.Add(c.Cfg.Limits.MaxRequestTimeout)) {
		deadline = now.Add(c.Cfg.Limits.MaxRequestTimeout)
	}
	if op != OpGet {
		// A duplicated message must not write twice: the master stamps the version, so a
		// second execution would be a second, later write of the same value. Nor may a copy
		// run after an earlier copy was redirected (this node's table changed in between, as
		// around a replica move's handover): the coordinator acts on the first answer, and
		// may report the write as not applied or send it elsewhere.
		dk := glSeenKey{from: from, id: m.GetRequestId(), deadline: m.GetDeadlineUnixNanos()}
		if _, dup := c.gl.seen[dk]; dup {
			return
		}
		if len(c.gl.seen) < glMaxSeen {
			c.gl.seen[dk] = deadline.Add(time.Second)
		}
	}
	if gp == nil {
		// Not a replica (a stale routing link): send it to a replica of the partition.
		reply(&peerpb.GlForwardReply{Redirect: c.ByDistance(p.Replicas)[0]})
		return
	}
	master := gp.masterOf(m.GetKey(), c.Region)
	if master != c.Cfg.NodeID {
		r := &peerpb.GlForwardReply{Redirect: master}
		if m.GetTableVersion() < gp.table.version {
			r.Table = gp.table.toPB(ks.Spec.Name, p.ID)
		}
		reply(r)
		return
	}
	// Give up a one-way delay (and ε) before the coordinator does, so that the explanation
	// of a timeout here reaches it in time.
	var oneWay time.Duration
	if t := c.Cfg.Topology; t != nil && t.HasRegion(c.SelfRegion) && t.HasRegion(c.Region[from]) {
		oneWay = t.OneWay(c.SelfRegion, c.Region[from])
	}
	opDeadline := deadline.Add(-oneWay - c.Cfg.MaxClockOffset - 5*time.Millisecond)
	if opDeadline.Before(now) {
		opDeadline = now
	}
	c.glMasterOp(now, gp, &glOp{op: op, keyBytes: m.GetKey(), part: p.ID, req: Request{Op: op, Keyspace: ks.Spec.Name, Key: m.GetKey()}, from: from, fwdID: m.GetRequestId(), wantLease: m.GetWantLease() && p.HasReplica(from),
		passive: m.GetPassive(), origin: m.GetOriginRegion(), region: string(m.GetValue()), value: m.GetValue(),
		minVer: wire.VersionFromPB(m.GetMinVersion()), deadline: opDeadline})
}

// glLocalRecord answers a read from this node's lease or affiliated entry, if valid.
func (c *Engine) glLocalRecord(now time.Time, gp *glPart, id, ks string, part uint32, key []byte) (*peerpb.GlForwardReply, bool) {
	if gp != nil {
		l, ok := c.gl.leases[id]
		if gp.joining || !ok || !now.Before(l.until) || !l.pending.IsZero() {
			return nil, false
		}
		r := &peerpb.GlForwardReply{Path: PathLease, Affiliates: c.glAffiliatesOf(now, id)}
		if !l.found {
			return r, true
		}
		rec, found, err := c.Store.GetAt(ks, key, l.version)
		if err != nil || !found || rec.Version != l.version {
			return nil, false
		}
		r.Found, r.Record = true, wire.RecordToPB(rec)
		return r, true
	}
	a, ok := c.gl.aff[id]
	if !ok || !now.Before(a.until) || a.pending != nil {
		return nil, false
	}
	c.glCounters.ReadsAffiliate.Add(1)
	r := &peerpb.GlForwardReply{Path: PathAffiliate}
	if a.found {
		r.Found, r.Record = true, wire.RecordToPB(a.rec)
	}
	return r, true
}

// glAffiliatesOf lists the affiliated nodes holding a valid secondary lease on key id, from
// this host's records (routing links for the requester).
func (c *Engine) glAffiliatesOf(now time.Time, id string) []uint32 {
	var recs map[uint32]*glRecord
	if hk, ok := c.gl.hostAff[id]; ok {
		recs = hk.recs
	} else if k, ok := c.gl.keys[id]; ok {
		recs = map[uint32]*glRecord{}
		for n, r := range k.leases {
			// Affiliated nodes: not members, and not replicas that left by a move (the master
			// may still hold their record until it runs out; they serve nothing).
			if !k.gp.p.Holds(n) && !k.gp.p.HasDeparted(n) {
				recs[n] = r
			}
		}
	}
	var out []uint32
	for _, n := range sortedKeys(recs) {
		if r := recs[n]; r.acked && now.Before(r.until) {
			out = append(out, n)
		}
	}
	return out
}

// glRelay forwards a non-replica's read to the master as this replica's own renewal.
func (c *Engine) glRelay(now time.Time, ks *placement.Keyspace, p *placement.Partition, gp *glPart, from uint32, m *peerpb.GlForward) {
	deadline := time.Unix(0, m.GetDeadlineUnixNanos())
	if m.GetDeadlineUnixNanos() == 0 || deadline.After(now.Add(c.Cfg.Limits.MaxRequestTimeout)) {
		deadline = now.Add(c.Cfg.Limits.MaxRequestTimeout)
	}
	req := Request{Op: OpGet, Keyspace: ks.Spec.Name, Key: m.GetKey(), Deadline: deadline}
	c.glSendOrWait(now, ks, p, gp, &glFwd{req: req, id: coord.KeyID(ks.Spec.Name, p.ID, m.GetKey()), gp: gp,
		waiter: glWaiter{relayFrom: from, relayID: m.GetRequestId()}})
}

// CounterSnapshot returns the counters by name (engine.Counted).
func (c *Engine) CounterSnapshot() map[string]int64 { return c.glCounters.Snapshot() }
