// Package meteorshower is the state machine of MeteorShower's local reads
// (meteorshower-paper.txt sections II-C, II-E and III; liu-thesis 4.2): every replica reports
// the (key, wts) of the writes it applied in periodic status messages, and a read at time t is
// served by the local replica when a majority (ALL: every replica) of valid statuses — the
// local one, and those whose send time sts satisfies sts + θ > t — show no version newer than
// the local one. Writes are the quorum protocol's; the quorum core (internal/quorum) owns
// requests and calls this package for the status machinery. Sans-IO: time comes in as
// arguments, messages go out as return values.
package meteorshower

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/hlc"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Mutations are MeteorShower's deliberately broken variants (for the simulator).
var Mutations = map[string]string{
	"theta-above-upper": "θ set to 3x its upper bound (+20ms): statuses too old to prove that a completed write is absent are used",
	"clock-no-fallback": "local reads go on when the measured clock offset exceeds ε (run with clock-beyond)",
	"gap-ignored":       "a gap in a peer's status sequence longer than the redundancy l is ignored instead of repaired",
}

// keyID identifies a key across keyspaces: the keyspace, a zero byte, the key. It names no
// partition: partitions are key ranges, and a split or merge must not change what the
// status map knows of a key (a status entry's partition field is informational).
type keyID string

// KeyID is the map key the quorum core uses for its read-subscription map: the same
// identity as the status map's.
func KeyID(keyspace string, key []byte) string {
	return string(makeKeyID(keyspace, key))
}

func makeKeyID(keyspace string, key []byte) keyID {
	b := make([]byte, 0, len(keyspace)+len(key)+1)
	b = append(b, keyspace...)
	b = append(b, 0)
	b = append(b, key...)
	return keyID(b)
}

// Sharing tells which peers replicate a key's partition (the receivers of its statuses).
type Sharing interface {
	PeersOf(keyspace string, partition uint32) []uint32
}

// TrackerConfig parameterises a Tracker.
type TrackerConfig struct {
	Self uint32
	// Peers are every other node that replicates a MeteorShower partition with this one.
	Peers []uint32
	// Interval between status messages; Redundancy is l.
	Interval   time.Duration
	Redundancy int
	// MaxClockOffset is ε.
	MaxClockOffset time.Duration
	// ClockPingInterval: how often the clock service pings each peer. Default 250ms.
	ClockPingInterval time.Duration
	// PeerRTT is the configured network RTT to each peer (the topology's).
	PeerRTT  map[uint32]time.Duration
	Mutation string
}

// peerIn is what this node knows of one peer's statuses.
type peerIn struct {
	incarnation uint64
	// complete: we hold a full status (or the peer's history from its first status) and every
	// status after it, so versions is the peer's state as of lastSts.
	complete bool
	lastSeq  uint64
	lastSts  int64 // sender's clock, ns, of batch lastSeq
	// received holds batches beyond lastSeq (seq → sts) until the sequence is contiguous.
	received map[uint64]int64
	// versions holds, per key, the newest few versions the peer reported, ascending: a read
	// at ts compares with the newest version stamped no later than ts, so writes that began
	// after the read cannot starve it.
	versions map[keyID][]hlc.Version
	// full status being assembled.
	fullBase     uint64
	fullBaseSts  int64
	fullAsked    time.Time
	fullPending  bool
	statusesSeen uint64
}

// peerOut is what this node sends one peer.
type peerOut struct {
	seq     uint64
	current []*peerpb.StatusEntry
	history []*peerpb.StatusBatch // the last l batches, oldest first
}

// Tracker holds the sender and receiver state of one node.
type Tracker struct {
	cfg         TrackerConfig
	incarnation uint64
	out         map[uint32]*peerOut
	in          map[uint32]*peerIn
	lastSend    time.Time
	clock       clockService
	stats       Stats
}

// Stats count the tracker's work (exported as metrics).
type Stats struct {
	StatusesSent, StatusesReceived, StatusBytesSent uint64
	Gaps, FullStatusesServed, FullStatusesApplied   uint64
}

// New returns a tracker; start is this incarnation's start time (it numbers the statuses).
func NewTracker(cfg TrackerConfig, start time.Time) *Tracker {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Millisecond
	}
	if cfg.ClockPingInterval <= 0 {
		cfg.ClockPingInterval = 250 * time.Millisecond
	}
	t := &Tracker{cfg: cfg, incarnation: uint64(start.UnixNano()), out: map[uint32]*peerOut{}, in: map[uint32]*peerIn{}}
	slices.Sort(t.cfg.Peers)
	for _, p := range t.cfg.Peers {
		t.out[p] = &peerOut{}
		t.in[p] = &peerIn{received: map[uint64]int64{}, versions: map[keyID][]hlc.Version{}}
	}
	t.clock.init(cfg.Peers, cfg.PeerRTT)
	return t
}

// Stats returns the counters.
func (t *Tracker) Stats() Stats { return t.stats }

// AddPeer starts exchanging statuses with p, a node that came to share a partition with
// this one (a replica move). Its view starts incomplete: reads count it once a full status
// (a scan of what it holds) and the statuses after it have arrived.
func (t *Tracker) AddPeer(p uint32, rtt time.Duration) {
	if _, ok := t.out[p]; ok || p == t.cfg.Self {
		return
	}
	t.cfg.Peers = append(t.cfg.Peers, p)
	slices.Sort(t.cfg.Peers)
	t.out[p] = &peerOut{}
	t.in[p] = &peerIn{received: map[uint64]int64{}, versions: map[keyID][]hlc.Version{}}
	t.clock.peers = t.cfg.Peers
	t.clock.est.AddPeer(p, rtt)
}

// Forget drops this node's view of p's state (p became a replica of a partition by a move:
// what it copied in its snapshot never appeared in its statuses); the next status from p
// asks for a full status, and reads do not count p until it has arrived.
func (t *Tracker) Forget(p uint32) {
	in, ok := t.in[p]
	if !ok {
		return
	}
	*in = peerIn{incarnation: in.incarnation, received: map[uint64]int64{}, versions: map[keyID][]hlc.Version{}}
}

// Applied records a write this replica applied, for the next status to every peer that
// replicates its partition (paper Fig. 3b: Status.append((key, wts))).
func (t *Tracker) Applied(keyspace string, partition uint32, key []byte, v hlc.Version, peers []uint32) {
	e := &peerpb.StatusEntry{Keyspace: keyspace, Partition: partition, Key: key, Wts: wire.VersionToPB(v)}
	for _, p := range peers {
		if o, ok := t.out[p]; ok {
			o.current = append(o.current, e)
		}
	}
}

// Tick sends the statuses due (every interval, even when empty: an empty status still tells
// the receivers that nothing happened up to sts — paper III-B) and the clock pings.
func (t *Tracker) Tick(now time.Time) []*peerpb.Envelope {
	var envs []*peerpb.Envelope
	if now.Sub(t.lastSend) >= t.cfg.Interval {
		t.lastSend = now
		for _, p := range t.cfg.Peers {
			o := t.out[p]
			o.seq++
			batch := &peerpb.StatusBatch{Seq: o.seq, StsUnixNanos: now.UnixNano(), Entries: o.current}
			o.current = nil
			st := &peerpb.Status{Incarnation: t.incarnation, Current: batch}
			for i := len(o.history) - 1; i >= 0; i-- {
				st.Redundant = append(st.Redundant, o.history[i])
			}
			o.history = append(o.history, batch)
			if len(o.history) > t.cfg.Redundancy {
				o.history = o.history[len(o.history)-t.cfg.Redundancy:]
			}
			env := &peerpb.Envelope{From: t.cfg.Self, To: p, Msg: &peerpb.Envelope_Status{Status: st}}
			t.stats.StatusesSent++
			t.stats.StatusBytesSent += uint64(proto.Size(env))
			envs = append(envs, env)
		}
	}
	envs = append(envs, t.clock.tick(now, t.cfg.Self, t.cfg.ClockPingInterval)...)
	// Ask again for full statuses that never arrived (a lost request or reply).
	for _, p := range t.cfg.Peers {
		in := t.in[p]
		if in.fullPending && now.Sub(in.fullAsked) > 2*time.Second {
			envs = append(envs, t.askFull(now, p))
		}
	}
	return envs
}

func (t *Tracker) askFull(now time.Time, p uint32) *peerpb.Envelope {
	in := t.in[p]
	in.fullPending = true
	in.fullAsked = now
	return &peerpb.Envelope{From: t.cfg.Self, To: p, Msg: &peerpb.Envelope_FullStatusRequest{FullStatusRequest: &peerpb.FullStatusRequest{Incarnation: in.incarnation}}}
}

// OnStatus merges a peer's status into the status map (paper Fig. 4b). It returns messages to
// send (a full-status request after an unrecoverable gap).
func (t *Tracker) OnStatus(now time.Time, from uint32, st *peerpb.Status) []*peerpb.Envelope {
	in, ok := t.in[from]
	if !ok || st.GetCurrent() == nil {
		return nil
	}
	t.stats.StatusesReceived++
	if st.Incarnation != in.incarnation {
		// A new incarnation (the peer restarted): its sequence starts over and nothing we
		// knew of it is a base any more.
		*in = peerIn{incarnation: st.Incarnation, received: map[uint64]int64{}, versions: map[keyID][]hlc.Version{}}
	}
	in.statusesSeen++
	batches := append([]*peerpb.StatusBatch{st.Current}, st.Redundant...)
	for _, b := range batches {
		for _, e := range b.Entries {
			in.note(makeKeyID(e.Keyspace, e.Key), wire.VersionFromPB(e.Wts))
		}
		if b.Seq > in.lastSeq {
			in.received[b.Seq] = b.StsUnixNanos
		}
	}
	t.advance(in)
	var envs []*peerpb.Envelope
	if !in.complete && !in.fullPending {
		// Statuses only report writes since the peer started; what it stored before (and
		// what we may have missed) comes from one full status per incarnation.
		return append(envs, t.askFull(now, from))
	}
	if next := in.lastSeq + 1; !t.hasSeq(in, next) && len(in.received) > 0 {
		newest := slices.Max(mapKeys(in.received))
		// Batches before newest-l cannot arrive any more as redundancy: a real gap.
		if newest > next+uint64(t.cfg.Redundancy) {
			if t.cfg.Mutation == "gap-ignored" {
				// Broken on purpose: skip the gap as if nothing had happened.
				in.lastSeq = newest
				in.lastSts = in.received[newest]
				clear(in.received)
				in.complete = true
			} else if !in.fullPending {
				t.stats.Gaps++
				in.complete = false
				envs = append(envs, t.askFull(now, from))
			}
		}
	}
	return envs
}

func (t *Tracker) hasSeq(in *peerIn, s uint64) bool { _, ok := in.received[s]; return ok }

// versionsKept bounds the per-key version list of the status map.
const versionsKept = 4

// note records that the peer holds version v of key (statuses may repeat and reorder).
func (in *peerIn) note(id keyID, v hlc.Version) {
	vs := in.versions[id]
	i, found := slices.BinarySearchFunc(vs, v, hlc.Version.Compare)
	if found {
		return
	}
	vs = slices.Insert(vs, i, v)
	if len(vs) > versionsKept {
		vs = vs[len(vs)-versionsKept:]
	}
	in.versions[id] = vs
}

// newestAtOrBefore returns the newest version of key the peer reported that was stamped no
// later than ts; known is false when every kept version is later and older ones were dropped.
func (in *peerIn) newestAtOrBefore(id keyID, ts int64) (v hlc.Version, known bool) {
	vs := in.versions[id]
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].WallNanos <= ts {
			return vs[i], true
		}
	}
	return hlc.Version{}, len(vs) < versionsKept
}

func (t *Tracker) advance(in *peerIn) {
	for {
		sts, ok := in.received[in.lastSeq+1]
		if !ok {
			return
		}
		delete(in.received, in.lastSeq+1)
		in.lastSeq++
		in.lastSts = sts
	}
}

func mapKeys(m map[uint64]int64) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// FullStatusFor builds the reply to a full-status request from the entries the runtime read
// from storage (the sender's newest version of every shared key). Called by the protocol
// core's job; base is this node's current status seq for the peer, taken before the scan, so
// every write applied after it is also in a later status.
func (t *Tracker) FullStatusBase(peer uint32) (seq uint64, incarnation uint64) {
	if o, ok := t.out[peer]; ok {
		return o.seq, t.incarnation
	}
	return 0, t.incarnation
}

// OnFullStatus applies a chunk of a peer's full status.
func (t *Tracker) OnFullStatus(now time.Time, from uint32, fs *peerpb.FullStatus) {
	in, ok := t.in[from]
	if !ok || fs.Incarnation != in.incarnation && in.incarnation != 0 {
		return
	}
	for _, e := range fs.Entries {
		in.note(makeKeyID(e.Keyspace, e.Key), wire.VersionFromPB(e.Wts))
	}
	if !fs.Done {
		return
	}
	t.stats.FullStatusesApplied++
	in.fullPending = false
	if fs.BaseSeq >= in.lastSeq {
		// Everything up to base_seq is in the full status; continue from there.
		for s := range in.received {
			if s <= fs.BaseSeq {
				delete(in.received, s)
			}
		}
		in.lastSeq = fs.BaseSeq
		in.lastSts = fs.BaseStsUnixNanos
	}
	t.advance(in)
	in.complete = true
}

// Theta is the resolved θ of one read.
type Theta = time.Duration

// Check decides whether the local replica may serve a read of key at local time now with
// staleness bound theta (paper Fig. 5b): count the valid statuses — the local one always, a
// peer's when its map is complete and lastSts + θ > now — and among them those whose
// version of the key is not newer than the local one; serve when both reach need.
// It returns whether to serve, and whether enough statuses were valid at all.
//
// floor is the newest version the reader's session has observed: a status sent before it
// cannot vouch for writes the session's order already places before this read (see
// docs/meteorshower.md, "θ upper and concurrent writers").
func (t *Tracker) Check(now time.Time, keyspace string, partition uint32, key []byte, local hlc.Version,
	replicas []uint32, need int, theta time.Duration, floor int64) (serve bool, valid int) {
	id := makeKeyID(keyspace, key)
	valid, holders, stable := 1, 1, 1 // the local status; the local copy holds local
	for _, r := range replicas {
		if r == t.cfg.Self {
			continue
		}
		in, ok := t.in[r]
		if !ok {
			continue
		}
		if vs := in.versions[id]; local.IsZero() || (len(vs) > 0 && !vs[len(vs)-1].Less(local)) {
			stable++
		}
		if !in.complete || in.lastSeq == 0 {
			continue
		}
		if in.lastSts+int64(theta) <= now.UnixNano() || in.lastSts <= floor {
			continue
		}
		valid++
		if pv, known := in.newestAtOrBefore(id, now.UnixNano()); known && !local.Less(pv) {
			holders++
		}
	}
	// Stability: the value returned must already be held by enough replicas, as a quorum
	// read's blocking read repair ensures. Returning a write that only the local replica has
	// lets two readers in two regions each see their own region's fresh write first and
	// miss the other's — a cycle no sequential order explains (docs/meteorshower.md).
	return valid >= need && holders >= need && stable >= need, valid
}

// ClockSafe reports whether every measured peer offset is within ε (DESIGN.md section 4:
// protocols that depend on the clock bound fall back when the measured offset exceeds it).
func (t *Tracker) ClockSafe() bool {
	if t.cfg.Mutation == "clock-no-fallback" {
		return true
	}
	return t.clock.maxOffset() <= t.cfg.MaxClockOffset
}

// MaxMeasuredOffset is the largest |offset| estimated to any peer.
func (t *Tracker) MaxMeasuredOffset() time.Duration { return t.clock.maxOffset() }

// OnClockPing answers a ping.
func (t *Tracker) OnClockPing(now time.Time, from uint32, p *peerpb.ClockPing) *peerpb.Envelope {
	return &peerpb.Envelope{From: t.cfg.Self, To: from, Msg: &peerpb.Envelope_ClockPong{ClockPong: &peerpb.ClockPong{
		T1UnixNanos: p.T1UnixNanos, T2UnixNanos: now.UnixNano()}}}
}

// OnClockPong folds a pong into the offset estimate.
func (t *Tracker) OnClockPong(now time.Time, from uint32, p *peerpb.ClockPong) {
	t.clock.pong(now, from, p)
}

// String summarises the receiver state (debugging).
func (t *Tracker) String() string {
	s := ""
	for _, p := range t.cfg.Peers {
		in := t.in[p]
		s += fmt.Sprintf("peer %d: complete=%v lastSeq=%d lastSts=%d keys=%d; ", p, in.complete, in.lastSeq, in.lastSts, len(in.versions))
	}
	return s
}
