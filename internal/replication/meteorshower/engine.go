package meteorshower

import (
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/replication/coord"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

type (
	Request = engine.Request
	Result  = engine.Result
)

// Engine is MeteorShower on one node: the quorum family's coordinator (writes, fallback
// reads, scans, failure detector, anti-entropy) with MeteorShower's read path and status
// machinery plugged in (coord.Extension).
type Engine struct {
	*coord.Core
	ms         *msState // statuses and waiting reads; nil until a keyspace of this protocol is placed here
	msCounters MSCounters
}

// NewEngine returns node cfg.NodeID's MeteorShower engine.
func NewEngine(cfg engine.Config, store engine.Reader) *Engine {
	e := &Engine{}
	e.Core = coord.New(coord.Config{Config: cfg, Protocol: config.ProtocolMeteorShower}, store, e)
	return e
}

// Intercept takes the reads that MeteorShower serves locally (QUORUM and ALL reads); writes,
// ONE and LOCAL_* reads and scans are the coordinator's.
func (c *Engine) Intercept(now time.Time, ks *placement.Keyspace, req Request) bool {
	if req.Op != coord.OpGet || c.ms == nil || req.Level == config.LevelOne || req.Level.IsLocal() {
		return false
	}
	if ks.Lookup(req.Key).Move != nil {
		// A partition moving a replica is read from both replica sets on the quorum path
		// (docs/elasticity.md): statuses vouch for one set of replicas, and the new one
		// holds data that never appeared in its statuses.
		c.msCounters.ReadsFallback.Add(1)
		return false
	}
	c.startMSRead(now, ks, req)
	return true
}

// PlacementChanged keeps the status peers in line with the map: every node that stores a
// partition with this one exchanges statuses with it, and a node that became a replica of
// a partition by a move is not vouched for until its full status (taken after the move,
// so with what it copied) has arrived.
func (c *Engine) PlacementChanged(now time.Time, old, m *placement.Map) {
	if c.ms == nil {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(m.Keyspaces)) {
		ks := m.Keyspaces[name]
		if !isMS(ks) {
			continue
		}
		oks, _ := old.Keyspace(name)
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			if !p.Holds(c.Cfg.NodeID) {
				continue
			}
			for _, r := range p.Holders() {
				c.ms.tracker.AddPeer(r, c.RTT(r))
			}
			if oks == nil {
				continue
			}
			if op, ok := oks.Partition(p.ID); ok {
				newHere := !op.HasReplica(c.Cfg.NodeID) && p.HasReplica(c.Cfg.NodeID)
				for _, r := range p.Replicas {
					if r == c.Cfg.NodeID {
						continue
					}
					// A replica new to the partition (by a move) is not vouched for until its
					// full status arrives; and a node that has just become a replica itself
					// does not count the others' statuses until it has theirs in full: while
					// it was the move's new replica they sent it no status of the writes
					// they applied (peersOf), so its view of them misses those (sim seed 115
					// with early catch-up answers: it served a version older than a write
					// acknowledged in both sets without it, right after the move).
					if !op.HasReplica(r) || newHere {
						c.ms.tracker.Forget(r)
					}
				}
			}
		}
	}
}

// StepExtension takes MeteorShower's messages.
func (c *Engine) StepExtension(now time.Time, env *peerpb.Envelope) bool {
	switch env.Msg.(type) {
	case *peerpb.Envelope_Status, *peerpb.Envelope_WriteNotification, *peerpb.Envelope_FullStatusRequest,
		*peerpb.Envelope_FullStatus, *peerpb.Envelope_ClockPing, *peerpb.Envelope_ClockPong:
		c.handleMS(now, env)
		return true
	}
	return false
}

// AfterTick sends statuses and clock pings and re-checks waiting reads.
func (c *Engine) AfterTick(now time.Time) { c.tickMS(now) }

// Timer: MeteorShower has no timers of its own (waiting reads are re-checked every tick).
func (c *Engine) Timer(coord.TimerKind, uint64) {}

// DefaultLevel is the quorum protocol's.
func (c *Engine) DefaultLevel(ks *placement.Keyspace, op coord.Op) config.Level {
	return coord.DefaultLevel(ks.Spec, op)
}

// MeteorShower keyspaces share the quorum protocol's writes, failure detector and
// anti-entropy; what differs is the read path (meteorshower-paper.txt II-C, Fig. 5): a read
// is served by the local replica once a majority (ALL: every replica) of valid statuses show
// that the local version is the newest, and otherwise waits in the read-subscription map,
// woken by statuses and by writes applied locally. Three guards keep it within what the
// paper's proof covers:
//   - clock: when the clock service measures an offset beyond ε, reads fall back to quorum
//     reads (a round trip) — visibly, in the response's read path and in metrics;
//   - staleness: a read that waits longer than msMaxWait also falls back (a partition that
//     stops statuses must not stop reads that a quorum can still answer);
//   - placement: a coordinator that holds no replica of the key uses quorum reads.

// ReadPath says how a read was served (returned to clients as read_path).
const (
	PathQuorum      = coord.PathQuorum
	PathLocal       = "local"
	PathLocalWaited = "local-waited"
	PathFallback    = "fallback"
)

// MSCounters are MeteorShower's metrics, updated by the core and read by the runtime's
// metrics (atomic: the core runs on the event loop, metrics on another goroutine).
type MSCounters struct {
	ReadsLocal, ReadsWaited, ReadsFallback                atomic.Int64
	ReadWaitNanosTotal                                    atomic.Int64
	StatusesSent, StatusesReceived, StatusBytesSent, Gaps atomic.Int64
	MeasuredOffsetNanos                                   atomic.Int64
	ClockUnsafe                                           atomic.Bool
}

type msRead struct {
	req    Request
	ks     *placement.Keyspace
	part   *placement.Partition
	need   int
	theta  time.Duration
	since  time.Time
	waited bool
	done   bool
}

type msState struct {
	tracker *Tracker
	pending map[string][]*msRead // by key ID
	count   int
}

// msMaxWait is how long a local read may wait for statuses before it is served by a quorum
// instead: a few status intervals beyond the slowest one-way delay of the cluster.
func (c *Engine) msMaxWait(ks *placement.Keyspace) time.Duration {
	var slowest time.Duration
	for _, a := range c.Cfg.Nodes {
		for _, b := range c.Cfg.Nodes {
			if c.Cfg.Topology != nil && c.Cfg.Topology.HasRegion(a.Region) && c.Cfg.Topology.HasRegion(b.Region) {
				slowest = max(slowest, c.Cfg.Topology.OneWay(a.Region, b.Region))
			}
		}
	}
	return 2*slowest + 10*msInterval(ks) + 50*time.Millisecond
}

func msInterval(ks *placement.Keyspace) time.Duration {
	if d, err := time.ParseDuration(ks.Spec.Options["status_interval"]); err == nil && d > 0 {
		return d
	}
	return 10 * time.Millisecond
}

func isMS(ks *placement.Keyspace) bool {
	return ks != nil && ks.Spec.Protocol == config.ProtocolMeteorShower
}

// setupMS creates the status tracker when the placement first holds a MeteorShower keyspace
// this node replicates.
func (c *Engine) setupMS(now time.Time) {
	if c.ms != nil || c.Pmap == nil {
		return
	}
	interval := time.Duration(0)
	redundancy := 0
	peers := map[uint32]bool{}
	for _, ks := range c.Pmap.Keyspaces {
		if !isMS(ks) {
			continue
		}
		iv := msInterval(ks)
		if interval == 0 || iv < interval {
			interval = iv
		}
		if l, err := strconv.Atoi(ks.Spec.Options["redundancy"]); err == nil {
			redundancy = max(redundancy, l)
		} else {
			redundancy = max(redundancy, 3)
		}
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			if !p.HasReplica(c.Cfg.NodeID) {
				continue
			}
			for _, r := range p.Replicas {
				if r != c.Cfg.NodeID {
					peers[r] = true
				}
			}
		}
	}
	if interval == 0 {
		return
	}
	var list []uint32
	for p := range peers {
		list = append(list, p)
	}
	slices.Sort(list)
	rtts := map[uint32]time.Duration{}
	for _, p := range list {
		rtts[p] = c.RTT(p)
	}
	c.ms = &msState{
		tracker: NewTracker(TrackerConfig{Self: c.Cfg.NodeID, Peers: list, Interval: interval, Redundancy: redundancy,
			MaxClockOffset: c.Cfg.MaxClockOffset, Mutation: c.Cfg.Mutation, PeerRTT: rtts}, now),
		pending: map[string][]*msRead{},
	}
}

// peersOf lists the other replicas of a partition.
func (c *Engine) peersOf(p *placement.Partition) []uint32 {
	out := make([]uint32, 0, len(p.Replicas))
	for _, r := range p.Replicas {
		if r != c.Cfg.NodeID {
			out = append(out, r)
		}
	}
	return out
}

// Applied reports a record queued for this replica's storage in the next status, sends
// write notifications (for writes first applied here: notify), and wakes reads waiting for
// the key.
func (c *Engine) Applied(now time.Time, rec storage.Record, notify bool) {
	if c.ms == nil {
		return
	}
	ks, _ := c.Pmap.Keyspace(rec.Keyspace)
	if !isMS(ks) {
		return
	}
	p := ks.Lookup(rec.Key)
	peers := c.peersOf(p)
	if !notify {
		// Notifications, repairs and anti-entropy often bring a version this replica already
		// has: report only what is new here, so statuses stay small.
		if cur, found, err := c.Store.Get(rec.Keyspace, rec.Key); err == nil && found && !cur.Version.Less(rec.Version) {
			return
		}
	}
	c.ms.tracker.Applied(rec.Keyspace, p.ID, rec.Key, rec.Version, peers)
	if notify {
		pb := wire.RecordToPB(rec)
		for _, r := range peers {
			c.Send(r, &peerpb.Envelope{Msg: &peerpb.Envelope_WriteNotification{WriteNotification: &peerpb.WriteNotification{Record: pb}}})
		}
	}
	// The local version changed only once the write is in storage: re-check after this
	// Ready, on the next event (the write is visible to reads from then on).
	c.msWakeKey(now, rec.Keyspace, rec.Key, rec)
}

func msKeyID(keyspace string, key []byte) string {
	return KeyID(keyspace, key)
}

// startMSRead begins a MeteorShower read.
func (c *Engine) startMSRead(now time.Time, ks *placement.Keyspace, req Request) {
	p := ks.Lookup(req.Key)
	if !req.MinVersion.IsZero() {
		c.Clock.Observe(now, req.MinVersion)
	}
	if !p.HasReplica(c.Cfg.NodeID) {
		c.StartRead(now, ks, req, PathQuorum)
		return
	}
	if !c.ms.tracker.ClockSafe() {
		c.msCounters.ReadsFallback.Add(1)
		c.StartRead(now, ks, req, PathFallback)
		return
	}
	need := len(p.Replicas)/2 + 1
	if req.Level == config.LevelAll {
		need = len(p.Replicas)
	}
	r := &msRead{req: req, ks: ks, part: p, need: need, theta: c.theta(ks, p), since: now}
	if c.tryMSRead(now, r, nil) {
		return
	}
	if c.Inflight >= c.Cfg.MaxInflight {
		c.Fail(req, errs.New(errs.Overloaded, "node coordinates %d requests already", c.Inflight))
		return
	}
	r.waited = true
	id := msKeyID(req.Keyspace, req.Key)
	c.ms.pending[id] = append(c.ms.pending[id], r)
	c.ms.count++
	c.Inflight++
}

// tryMSRead serves r if the statuses allow; known is a record just queued for storage (not
// yet readable) that is the newest local version.
func (c *Engine) tryMSRead(now time.Time, r *msRead, known *storage.Record) bool {
	rec, found, err := c.Store.Get(r.req.Keyspace, r.req.Key)
	if err != nil {
		c.Fail(r.req, errs.New(errs.Internal, "local read: %v", err))
		r.done = true
		return true
	}
	if known != nil && (!found || rec.Version.Less(known.Version)) {
		rec, found = *known, true
	}
	local := rec.Version
	if !found {
		local = hlc.Version{}
	}
	// Validity is judged at the read's own timestamp ts (paper Fig. 5b: sts + θ > ts), not
	// at the time of this re-check.
	ok, _ := c.ms.tracker.Check(r.since, r.req.Keyspace, r.part.ID, r.req.Key, local, r.part.Replicas, r.need, r.theta, r.req.MinVersion.WallNanos)
	if !ok {
		return false
	}
	r.done = true
	res := Result{ID: r.req.ID, Op: coord.OpGet, Path: PathLocal}
	if r.waited {
		res.Path = PathLocalWaited
		c.msCounters.ReadsWaited.Add(1)
		c.msCounters.ReadWaitNanosTotal.Add(int64(now.Sub(r.since)))
	} else {
		c.msCounters.ReadsLocal.Add(1)
	}
	if found {
		c.Clock.Observe(now, rec.Version)
		res.Version = rec.Version
		if !rec.Tombstone {
			res.Found, res.Value = true, rec.Value
		}
	}
	c.Reply(res)
	return true
}

// msWakeKey re-checks the reads waiting for one key after a local write.
func (c *Engine) msWakeKey(now time.Time, keyspace string, key []byte, rec storage.Record) {
	id := msKeyID(keyspace, key)
	waiting := c.ms.pending[id]
	if len(waiting) == 0 {
		return
	}
	kept := waiting[:0]
	for _, r := range waiting {
		if r.done || c.tryMSRead(now, r, &rec) {
			c.msDone(r)
			continue
		}
		kept = append(kept, r)
	}
	c.msSet(id, kept)
}

// msWakeAll re-checks every waiting read (a status arrived: validity or versions changed),
// and sends reads that waited too long, or whose deadline passed, elsewhere.
func (c *Engine) msWakeAll(now time.Time) {
	if c.ms == nil || c.ms.count == 0 {
		return
	}
	ids := make([]string, 0, len(c.ms.pending))
	for id := range c.ms.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic order of replies
	for _, id := range ids {
		waiting := c.ms.pending[id]
		kept := waiting[:0]
		for _, r := range waiting {
			switch {
			case r.done:
				c.msDone(r)
			case !now.Before(r.req.Deadline):
				r.done = true
				c.msDone(r)
				c.Fail(r.req, errs.New(errs.Timeout, "read timed out waiting for replica statuses (meteorshower)"))
			case !c.ms.tracker.ClockSafe() || now.Sub(r.since) > c.msMaxWait(r.ks):
				r.done = true
				c.msDone(r)
				c.msCounters.ReadsFallback.Add(1)
				c.StartRead(now, r.ks, r.req, PathFallback)
			case c.tryMSRead(now, r, nil):
				c.msDone(r)
			default:
				kept = append(kept, r)
			}
		}
		c.msSet(id, kept)
	}
}

func (c *Engine) msDone(r *msRead) {
	c.ms.count--
	c.Inflight--
}

func (c *Engine) msSet(id string, kept []*msRead) {
	if len(kept) == 0 {
		delete(c.ms.pending, id)
	} else {
		c.ms.pending[id] = kept
	}
}

// theta resolves θ for reads of partition p coordinated here (paper II-E): lower is 0; upper
// is the one-way delay lower bound from this node to the replicas — sorted, the minimum for
// ONE writes, the majority-th (the median for three) for QUORUM, the maximum for ALL — minus
// ε; an explicit duration is used as is. The one-way lower bounds are the configured
// topology's RTT/2: safe as long as no message between two regions arrives faster than half
// the configured RTT (true for the emulated WAN and the lab router, which add delay, and an
// operator's responsibility in production).
func (c *Engine) theta(ks *placement.Keyspace, p *placement.Partition) time.Duration {
	if c.Cfg.Mutation == "theta-above-upper" {
		return 3*c.thetaUpper(ks, p) + 20*time.Millisecond
	}
	switch mode := ks.Spec.Options["theta"]; mode {
	case "", "lower":
		return 0
	case "upper":
		return c.thetaUpper(ks, p)
	default:
		d, _ := time.ParseDuration(mode) // validated by config
		return d
	}
}

func (c *Engine) thetaUpper(ks *placement.Keyspace, p *placement.Partition) time.Duration {
	var ones []time.Duration
	for _, r := range p.Replicas {
		if r == c.Cfg.NodeID {
			ones = append(ones, 0)
			continue
		}
		ones = append(ones, c.RTT(r)/2)
	}
	slices.Sort(ones)
	idx := len(ones) / 2 // QUORUM: the majority-th smallest (the median of three)
	switch config.Level(ks.Spec.Options["write_level"]) {
	case config.LevelOne:
		idx = 0
	case config.LevelAll:
		idx = len(ones) - 1
	}
	return max(0, ones[idx]-c.Cfg.MaxClockOffset)
}

// handleMS processes MeteorShower's peer messages.
func (c *Engine) handleMS(now time.Time, env *peerpb.Envelope) {
	if c.ms == nil {
		return
	}
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_Status:
		for _, e := range c.ms.tracker.OnStatus(now, env.From, m.Status) {
			c.Send(e.To, e)
		}
		c.msSyncCounters()
		c.msWakeAll(now)
	case *peerpb.Envelope_WriteNotification:
		rec, err := wire.RecordFromPB(m.WriteNotification.GetRecord())
		if err != nil {
			return
		}
		if !c.HoldsKey(rec.Keyspace, rec.Key) {
			return
		}
		c.Clock.Observe(now, rec.Version)
		c.ApplyLocal(now, rec, false)
	case *peerpb.Envelope_FullStatusRequest:
		seq, inc := c.ms.tracker.FullStatusBase(env.From)
		c.AddJob(fullStatusJob{peer: env.From, baseSeq: seq, incarnation: inc, baseSts: now.UnixNano(),
			parts: c.HeldWith(env.From)})
	case *peerpb.Envelope_FullStatus:
		c.ms.tracker.OnFullStatus(now, env.From, m.FullStatus)
		c.msWakeAll(now)
	case *peerpb.Envelope_ClockPing:
		e := c.ms.tracker.OnClockPing(now, env.From, m.ClockPing)
		c.Send(e.To, e)
	case *peerpb.Envelope_ClockPong:
		c.ms.tracker.OnClockPong(now, env.From, m.ClockPong)
		c.msCounters.MeasuredOffsetNanos.Store(int64(c.ms.tracker.MaxMeasuredOffset()))
		c.msCounters.ClockUnsafe.Store(!c.ms.tracker.ClockSafe())
	}
}

func (c *Engine) tickMS(now time.Time) {
	c.setupMS(now)
	if c.ms == nil {
		return
	}
	for _, e := range c.ms.tracker.Tick(now) {
		c.Send(e.To, e)
	}
	c.msSyncCounters()
	c.msWakeAll(now)
}

func (c *Engine) msSyncCounters() {
	st := c.ms.tracker.Stats()
	c.msCounters.StatusesSent.Store(int64(st.StatusesSent))
	c.msCounters.StatusesReceived.Store(int64(st.StatusesReceived))
	c.msCounters.StatusBytesSent.Store(int64(st.StatusBytesSent))
	c.msCounters.Gaps.Store(int64(st.Gaps))
}

// Counters exposes MeteorShower's counters.
func (c *Engine) Counters() *MSCounters { return &c.msCounters }

// fullStatusJob scans the MeteorShower partitions shared with peer and sends their newest
// versions as a full status (after a gap in the peer's view of our statuses), in chunks.
type fullStatusJob struct {
	peer                 uint32
	baseSeq, incarnation uint64
	baseSts              int64
	parts                []coord.PartRef
}

// maxFullStatusEntries bounds one FullStatus message.
const maxFullStatusEntries = 20_000

func (j fullStatusJob) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	var out []*peerpb.Envelope
	fs := &peerpb.FullStatus{Incarnation: j.incarnation, BaseSeq: j.baseSeq, BaseStsUnixNanos: j.baseSts}
	for _, ref := range j.parts {
		err := store.Scan(ref.Span, 0, func(r storage.Record) bool {
			fs.Entries = append(fs.Entries, &peerpb.StatusEntry{Keyspace: r.Keyspace, Partition: ref.Partition, Key: r.Key, Wts: wire.VersionToPB(r.Version)})
			if len(fs.Entries) >= maxFullStatusEntries {
				out = append(out, &peerpb.Envelope{From: self, To: j.peer, Msg: &peerpb.Envelope_FullStatus{FullStatus: fs}})
				fs = &peerpb.FullStatus{Incarnation: j.incarnation, BaseSeq: j.baseSeq, BaseStsUnixNanos: j.baseSts}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	fs.Done = true
	return append(out, &peerpb.Envelope{From: self, To: j.peer, Msg: &peerpb.Envelope_FullStatus{FullStatus: fs}}), nil
}
