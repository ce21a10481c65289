package coord

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"

	"meridian/internal/engine"
	"meridian/internal/hlc"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Anti-entropy is how a replica that missed writes (it was down, partitioned, or lost unsynced
// data) catches up. We chose it over hinted handoff because it also repairs what hints cannot:
// a coordinator that crashed holding hints, and writes that reached too few replicas before a
// timeout. It is Cassandra's repair with hashed buckets in place of a Merkle tree:
//
//  1. Every AntiEntropyInterval the node sends each peer a digest of up to
//     maxAEPartitionsPerRound partitions they both replicate (round-robin): per partition,
//     aeBuckets hashes, each the xor of hash(key, newest version, tombstone) over the keys of
//     the bucket. Xor makes the hash independent of scan order.
//  2. The peer compares with its own digest and answers with the (key, version) pairs of its
//     keys in the buckets that differ.
//  3. The initiator pushes the records it has newer (or the peer lacks) and pulls the ones the
//     peer has newer; the peer answers pulls with pushes. Pushed records are applied like any
//     replicated write: last writer wins by version, so repair can never undo a newer write.
//
// Every step is bounded (entries, keys, bytes per message); what is cut off is repaired by the
// next round. The scans run off the event loop as Jobs (RunJob), so a large partition does not
// stall request processing; the core itself stays sans-IO.

const (
	aeBuckets               = 256
	maxAEPartitionsPerRound = 64
	maxAEEntries            = 20_000
	maxAEBytes              = 4 << 20
)

// JobKind names an anti-entropy step that reads storage.
type JobKind int

const (
	JobSendDigest JobKind = iota + 1
	JobCompareDigest
	JobReconcile
	JobServePull
)

// Job is anti-entropy work for the runtime to run off the event loop with RunJob.
type Job struct {
	Kind      JobKind
	Peer      uint32
	RoundID   uint64
	Keyspace  string
	Partition uint32
	// Span is the partition's key range in this node's map when the job was made: what the
	// job scans (records do not name partitions).
	Span      storage.Span
	Hashes    []uint64             // JobCompareDigest: the peer's digest
	Buckets   []uint32             // JobReconcile: buckets that differ
	Entries   []*peerpb.KeyVersion // JobReconcile: the peer's keys in those buckets
	Truncated bool                 // JobReconcile: the peer's entries were cut short
	Keys      [][]byte             // JobServePull
	// Cutoff: only keys whose newest version is at or before it take part (0: all).
	Cutoff int64
	// MoveID and At: a catch-up round of a replica move (move.go): every key's newest
	// version not newer than At takes part, and the round's answers say when it is done.
	MoveID uint64
	At     hlc.Version
}

// Run performs the job (engine.Job).
func (j Job) Run(store engine.Store, self uint32) ([]*peerpb.Envelope, error) {
	return RunJob(store, self, j)
}

type aeState struct {
	lastRound time.Time
	nextRound uint64
	cursor    map[uint32]int // per peer: index of the next shared partition
}

// PartRef names one partition of one keyspace, with its key range.
type PartRef struct {
	Keyspace  string
	Partition uint32
	Span      storage.Span
}

// SharedPartitions lists, in a deterministic order, the partitions of this core's keyspaces
// that both nodes replicate.
func (c *Core) SharedPartitions(peer uint32) []PartRef {
	if c.Pmap == nil {
		return nil
	}
	names := make([]string, 0, len(c.Pmap.Keyspaces))
	for n := range c.Pmap.Keyspaces {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []PartRef
	for _, n := range names {
		ks := c.Pmap.Keyspaces[n]
		if !c.Owns(ks) {
			continue
		}
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			if p.HasReplica(c.Cfg.NodeID) && p.HasReplica(peer) {
				out = append(out, PartRef{n, p.ID, p.Span(n)})
			}
		}
	}
	return out
}

// HeldWith lists, in a deterministic order, the partitions of this core's keyspaces whose
// data both nodes store now (placement.Partition.Holds: replicas, and the new replica of a
// move in progress).
func (c *Core) HeldWith(peer uint32) []PartRef {
	if c.Pmap == nil {
		return nil
	}
	var out []PartRef
	for _, n := range slices.Sorted(maps.Keys(c.Pmap.Keyspaces)) {
		ks := c.Pmap.Keyspaces[n]
		if !c.Owns(ks) {
			continue
		}
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			if p.Holds(c.Cfg.NodeID) && p.Holds(peer) {
				out = append(out, PartRef{n, p.ID, p.Span(n)})
			}
		}
	}
	return out
}

func (c *Core) tickAE(now time.Time) {
	if c.Cfg.Mutation == "no-anti-entropy" {
		return // broken on purpose: replicas that missed a write never catch up
	}
	if c.ae.lastRound.IsZero() {
		c.ae.lastRound = now // first round one interval after start
		return
	}
	if now.Sub(c.ae.lastRound) < c.Cfg.AntiEntropyInterval {
		return
	}
	c.ae.lastRound = now
	if c.ae.cursor == nil {
		c.ae.cursor = map[uint32]int{}
	}
	for _, peer := range c.live.peers {
		if !c.Alive(peer) {
			continue
		}
		shared := c.SharedPartitions(peer)
		if len(shared) == 0 {
			continue
		}
		c.ae.nextRound++
		start := c.ae.cursor[peer] % len(shared)
		n := min(len(shared), maxAEPartitionsPerRound)
		for i := range n {
			ref := shared[(start+i)%len(shared)]
			c.out.Jobs = append(c.out.Jobs, Job{Kind: JobSendDigest, Peer: peer, RoundID: c.ae.nextRound,
				Keyspace: ref.Keyspace, Partition: ref.Partition, Span: ref.Span, Cutoff: now.Add(-c.aeGrace()).UnixNano()})
		}
		c.ae.cursor[peer] = (start + n) % len(shared)
	}
}

// handleAE turns anti-entropy messages that need storage scans into jobs.
func (c *Core) handleAE(now time.Time, env *peerpb.Envelope) {
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_AeDigest:
		d := m.AeDigest
		span := msgSpan(d.Keyspace, d.Start, d.End)
		if d.MoveId != 0 {
			c.catchUpDigest(env.From, d, span)
			return
		}
		if !c.HoldsRange(d.Keyspace, span.Start, span.End) || len(d.BucketHashes) != aeBuckets {
			return
		}
		c.out.Jobs = append(c.out.Jobs, Job{Kind: JobCompareDigest, Peer: env.From, RoundID: d.RoundId,
			Keyspace: d.Keyspace, Partition: d.Partition, Span: span, Hashes: d.BucketHashes, Cutoff: d.CutoffUnixNanos})
	case *peerpb.Envelope_AeKeys:
		k := m.AeKeys
		span := msgSpan(k.Keyspace, k.Start, k.End)
		if k.MoveId != 0 {
			c.catchUpKeys(env.From, k, span)
			return
		}
		if !c.HoldsRange(k.Keyspace, span.Start, span.End) {
			return
		}
		c.out.Jobs = append(c.out.Jobs, Job{Kind: JobReconcile, Peer: env.From, RoundID: k.RoundId,
			Keyspace: k.Keyspace, Partition: k.Partition, Span: span, Buckets: k.Buckets, Entries: k.Entries, Truncated: k.Truncated,
			Cutoff: k.CutoffUnixNanos})
	case *peerpb.Envelope_AePull:
		p := m.AePull
		if len(p.Keys) > maxAEEntries {
			return
		}
		for _, k := range p.Keys {
			if !c.HoldsKey(p.Keyspace, k) {
				return
			}
		}
		c.out.Jobs = append(c.out.Jobs, Job{Kind: JobServePull, Peer: env.From, RoundID: p.RoundId,
			Keyspace: p.Keyspace, Partition: p.Partition, Keys: p.Keys})
	}
}

// handleAEPush applies repaired records. No ack: a lost push is redone by the next round.
func (c *Core) handleAEPush(now time.Time, from uint32, m *peerpb.AEPush) {
	if m.MoveId != 0 {
		c.catchUpPush(now, from, m)
		return
	}
	for _, pr := range m.Records {
		c.applyRepair(now, pr)
	}
}

// applyRepair applies one repaired record of a key this node holds.
func (c *Core) applyRepair(now time.Time, pr *peerpb.Record) {
	rec, err := wire.RecordFromPB(pr)
	if err != nil {
		return
	}
	if !c.HoldsKey(rec.Keyspace, rec.Key) || c.clearingKey(rec.Keyspace, rec.Key) {
		return
	}
	c.Clock.Observe(now, rec.Version)
	c.ApplyLocal(now, rec, false)
}

// msgSpan is the range a message names: an empty end is the end of the keyspace (no
// partition ends at the empty key).
func msgSpan(keyspace string, start, end []byte) storage.Span {
	if len(end) == 0 {
		end = nil
	}
	if start == nil {
		start = []byte{}
	}
	return storage.Span{Keyspace: keyspace, Start: start, End: end}
}

func bucketOf(key []byte) uint32 { return uint32(xxhash.Sum64(key) % aeBuckets) }

func entryHash(key []byte, v hlc.Version, tombstone bool) uint64 {
	var buf [hlc.EncodedVersionLen + 1]byte
	b := v.Encode(buf[:0])
	if tombstone {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	d := xxhash.New()
	_, _ = d.Write(key)
	_, _ = d.Write(b)
	return d.Sum64()
}

// aeGrace is how old a key's newest version must be before anti-entropy compares it: writes
// younger than a few WAN round trips are normally still being replicated, and comparing them
// only produces differences that replication itself resolves a moment later — extra scans,
// pushes and load spikes under heavy writes.
func (c *Core) aeGrace() time.Duration {
	var slowest time.Duration
	for _, n := range c.Cfg.Nodes {
		slowest = max(slowest, c.RTT(n.ID))
	}
	return time.Second + 4*slowest
}

// settled reports whether r takes part in an anti-entropy round with this cutoff.
func settled(r storage.Record, cutoff int64) bool {
	return cutoff == 0 || r.Version.WallNanos <= cutoff
}

// Digest computes the bucket hashes of one partition over the keys settled by cutoff.
func Digest(store Reader, span storage.Span, cutoff int64) ([]uint64, error) {
	h := make([]uint64, aeBuckets)
	err := store.Scan(span, 0, func(r storage.Record) bool {
		if settled(r, cutoff) {
			h[bucketOf(r.Key)] ^= entryHash(r.Key, r.Version, r.Tombstone)
		}
		return true
	})
	return h, err
}

// scanJob scans a job's range: every key's newest version (with the cutoff applied by the
// caller), or, for a catch-up round, every key's newest version not newer than job.At.
func scanJob(store Reader, job Job, fn func(storage.Record) bool) error {
	if job.MoveID != 0 {
		return store.ScanAt(job.Span, job.At, 0, fn)
	}
	return store.Scan(job.Span, 0, fn)
}

// digestOf is Digest for a job (catch-up rounds compare at job.At, without cutoff).
func digestOf(store Reader, job Job) ([]uint64, error) {
	if job.MoveID == 0 {
		return Digest(store, job.Span, job.Cutoff)
	}
	h := make([]uint64, aeBuckets)
	err := scanJob(store, job, func(r storage.Record) bool {
		h[bucketOf(r.Key)] ^= entryHash(r.Key, r.Version, r.Tombstone)
		return true
	})
	return h, err
}

// RunJob performs one anti-entropy job against storage and returns the messages to send. It
// is a pure function of the job and the storage contents, so the simulator can run it inline.
func RunJob(store Reader, self uint32, job Job) ([]*peerpb.Envelope, error) {
	to := func(msg any) *peerpb.Envelope { return aeEnvelope(self, job.Peer, msg) }
	switch job.Kind {
	case JobSendDigest:
		h, err := digestOf(store, job)
		if err != nil {
			return nil, err
		}
		return []*peerpb.Envelope{to(&peerpb.AEDigest{RoundId: job.RoundID, Keyspace: job.Keyspace, Partition: job.Partition,
			Start: job.Span.Start, End: job.Span.End,
			BucketHashes: h, CutoffUnixNanos: job.Cutoff, MoveId: job.MoveID, At: atPB(job)})}, nil

	case JobCompareDigest:
		h, err := digestOf(store, job)
		if err != nil {
			return nil, err
		}
		var diff []uint32
		for i := range h {
			if h[i] != job.Hashes[i] {
				diff = append(diff, uint32(i))
			}
		}
		if len(diff) == 0 {
			if job.MoveID == 0 {
				return nil, nil
			}
			// A catch-up round with equal digests: this new replica holds what the old
			// one held at job.At. Tell both.
			return []*peerpb.Envelope{
				to(&peerpb.AEKeys{RoundId: job.RoundID, Keyspace: job.Keyspace, Partition: job.Partition, Start: job.Span.Start, End: job.Span.End,
					MoveId: job.MoveID, At: atPB(job), Equal: true}),
				{From: self, To: self, Msg: &peerpb.Envelope_MoveNote{MoveNote: &peerpb.MoveNote{Keyspace: job.Keyspace, Start: job.Span.Start, End: job.Span.End,
					MoveId: job.MoveID, CoveredBy: job.Peer}}},
			}, nil
		}
		want := bucketSet(diff)
		keys := &peerpb.AEKeys{RoundId: job.RoundID, Keyspace: job.Keyspace, Partition: job.Partition, Buckets: diff,
			Start: job.Span.Start, End: job.Span.End,
			CutoffUnixNanos: job.Cutoff, MoveId: job.MoveID, At: atPB(job)}
		err = scanJob(store, job, func(r storage.Record) bool {
			if !want[bucketOf(r.Key)] || !settled(r, job.Cutoff) {
				return true
			}
			if len(keys.Entries) >= maxAEEntries {
				keys.Truncated = true
				return false
			}
			keys.Entries = append(keys.Entries, &peerpb.KeyVersion{Key: r.Key, Version: wire.VersionToPB(r.Version)})
			return true
		})
		if err != nil {
			return nil, err
		}
		return []*peerpb.Envelope{to(keys)}, nil

	case JobReconcile:
		want := bucketSet(job.Buckets)
		remote := make(map[string]hlc.Version, len(job.Entries))
		var lastRemote []byte
		for _, e := range job.Entries {
			remote[string(e.Key)] = wire.VersionFromPB(e.Version)
			if bytes.Compare(e.Key, lastRemote) > 0 {
				lastRemote = e.Key
			}
		}
		push := &peerpb.AEPush{RoundId: job.RoundID, MoveId: job.MoveID}
		pushBytes := 0
		seen := map[string]bool{}
		cut := false // the push stopped at its bounds: the round is not complete
		err := scanJob(store, job, func(r storage.Record) bool {
			if !want[bucketOf(r.Key)] {
				return true
			}
			if !settled(r, job.Cutoff) {
				seen[string(r.Key)] = true // newer here than the round looks at: never pull it
				return true
			}
			if job.Truncated && bytes.Compare(r.Key, lastRemote) > 0 {
				return false // the peer's list stops here; the rest waits for the next round
			}
			seen[string(r.Key)] = true
			rv, ok := remote[string(r.Key)]
			if ok && !rv.Less(r.Version) {
				return true
			}
			if pushBytes >= maxAEBytes || len(push.Records) >= maxAEEntries {
				cut = true
				return false
			}
			push.Records = append(push.Records, wire.RecordToPB(r))
			pushBytes += len(r.Key) + len(r.Value) + 40
			return true
		})
		if err != nil {
			return nil, err
		}
		if job.MoveID != 0 {
			// A catch-up round pushes only (the new replica's newer versions are writes of
			// the move that the old replica gets anyway); with nothing to push, the new
			// replica holds what this one held at job.At.
			push.Covered = len(push.Records) == 0 && !cut && !job.Truncated
			return []*peerpb.Envelope{to(push)}, nil
		}
		pull := &peerpb.AEPull{RoundId: job.RoundID, Keyspace: job.Keyspace, Partition: job.Partition}
		for _, e := range job.Entries {
			if len(pull.Keys) >= maxAEEntries {
				break
			}
			if !seen[string(e.Key)] {
				pull.Keys = append(pull.Keys, e.Key)
				continue
			}
			cur, found, err := store.Get(job.Keyspace, e.Key)
			if err != nil {
				return nil, err
			}
			if !found || cur.Version.Less(wire.VersionFromPB(e.Version)) {
				pull.Keys = append(pull.Keys, e.Key)
			}
		}
		var out []*peerpb.Envelope
		if len(push.Records) > 0 {
			out = append(out, to(push))
		}
		if len(pull.Keys) > 0 {
			out = append(out, to(pull))
		}
		return out, nil

	case JobServePull:
		push := &peerpb.AEPush{RoundId: job.RoundID}
		pushBytes := 0
		for _, k := range job.Keys {
			if pushBytes >= maxAEBytes {
				break
			}
			r, found, err := store.Get(job.Keyspace, k)
			if err != nil {
				return nil, err
			}
			if !found {
				continue
			}
			push.Records = append(push.Records, wire.RecordToPB(r))
			pushBytes += len(r.Key) + len(r.Value) + 40
		}
		if len(push.Records) == 0 {
			return nil, nil
		}
		return []*peerpb.Envelope{to(push)}, nil
	}
	return nil, nil
}

func atPB(job Job) *peerpb.Version {
	if job.MoveID == 0 {
		return nil
	}
	return wire.VersionToPB(job.At)
}

func bucketSet(buckets []uint32) map[uint32]bool {
	m := make(map[uint32]bool, len(buckets))
	for _, b := range buckets {
		if b < aeBuckets {
			m[b] = true
		}
	}
	return m
}

// aeEnvelope wraps an anti-entropy message for the wire.
func aeEnvelope(from, to uint32, msg any) *peerpb.Envelope {
	e := &peerpb.Envelope{From: from, To: to}
	switch v := msg.(type) {
	case *peerpb.AEDigest:
		e.Msg = &peerpb.Envelope_AeDigest{AeDigest: v}
	case *peerpb.AEKeys:
		e.Msg = &peerpb.Envelope_AeKeys{AeKeys: v}
	case *peerpb.AEPull:
		e.Msg = &peerpb.Envelope_AePull{AePull: v}
	case *peerpb.AEPush:
		e.Msg = &peerpb.Envelope_AePush{AePush: v}
	default:
		panic(fmt.Sprintf("quorum: %T is not an anti-entropy message", msg))
	}
	return e
}
