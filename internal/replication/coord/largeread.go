package coord

// Large reads (docs/mayflower.md). A read whose level needs answers from some replicas asks
// them as usual, but with max_value_bytes: a replica holding a larger value answers with the
// record's version and the value's size only (a digest read, as Cassandra's). Once the level's
// replicas have answered, the coordinator knows the newest version V and its size, and fetches
// the value in chunks pinned to V (ReadChunkRequest) from the replica or replicas its selector
// picks among the live replicas of the partition — not only those that answered: every
// replica that holds V can serve it, and one that does not says so (missing) and is dropped.
// Then the read goes on as any other (read repair of stale replicas with the whole record).
//
// Selectors (keyspace option read_selector):
//   - nearest: the nearest live replica, as every read did before;
//   - snitch: Cassandra's dynamic snitch — each replica's latency per byte, decayed; the
//     nearest unless its score is 10% worse than the best scored one;
//   - hedged: the nearest, and after hedge_after the next nearest too, both taking every
//     chunk not yet received (The Tail at Scale's hedged requests; the first copy wins);
//   - mayflower: the replica, or two replicas, of least cost on the network model built from
//     the links (config.Network) and the transfers every node reports (thesis 3.2, 3.5.2).
//
// A split read's two parts are not cut in advance: one source takes chunks from the front and
// the other from the back, each as its window frees up, so the parts end together whatever
// their real rates turn out to be (work stealing; the plan's shares decide only whether to
// split and from where).

import (
	"maps"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// MutationFetchAnyVersion breaks large reads on purpose (the simulator's mutation suite): a
// replica serves chunks of its newest version instead of the one the fetch is pinned to.
const MutationFetchAnyVersion = "fetch-any-version"

// LargeReadMutations and LargeReadMutationHints are the large reads' broken variants and
// the simulation settings under which they show (values in many one-byte chunks, from two
// replicas at once, under the mayflower selector).
var (
	LargeReadMutations = map[string]string{
		MutationFetchAnyVersion: "a replica serves a large read's chunks from its newest version, not the pinned one (values are put together from two versions)",
	}
	LargeReadMutationHints = map[string]engine.SimHints{
		MutationFetchAnyVersion: {KeyspaceOptions: map[string]string{"read_selector": "mayflower", "large_read_bytes": "1", "read_chunk_bytes": "1", "read_window": "1"}},
	}
)

// Limits of large reads.
const (
	// maxFetches bounds the large reads a coordinator fetches at once; one more is refused
	// (Overloaded) rather than queued.
	maxFetches = 4096
	// maxReadRestarts bounds how often a read starts over because no live replica holds the
	// version it was fetching.
	maxReadRestarts = 3
	// maxFetchWindow bounds the chunks one source has in flight.
	maxFetchWindow = 64
	// snitchBadness is the dynamic snitch's threshold (Cassandra's dynamic_snitch_badness_threshold
	// default 0.1): the nearest replica is passed over only when its score is this much worse.
	snitchBadness = 0.1
	// snitchAlpha weighs a new latency sample in a replica's score; snitchForget drops a score
	// not refreshed for this long (Cassandra resets its scores every 10 minutes).
	snitchAlpha  = 0.25
	snitchForget = 10 * time.Second
	// hedgeSamples is how many of the latest large reads' time per byte the automatic hedge
	// delay takes its 95th percentile over; hedgeMinSamples before it is used.
	hedgeSamples    = 256
	hedgeMinSamples = 20
)

// LargeReadStats are the large reads' counters, read by the metrics (atomics: the node's
// metrics read them while the event loop runs).
type LargeReadStats struct {
	// Reads by how their value was fetched: the selector's choice, mayflower without a
	// configured network (nearest instead), or locally (this node held the version).
	Nearest, Snitch, Hedged, Mayflower, MayflowerUnconfigured, Local atomic.Int64
	// Split: reads fetched from two replicas at once (mayflower).
	Split        atomic.Int64
	BytesFetched atomic.Int64 // chunk bytes received
	// BytesWasted: chunk bytes received twice (hedging) or for a read that had ended.
	BytesWasted   atomic.Int64
	Restarts      atomic.Int64
	SourcesFailed atomic.Int64
	// Split scans (scan.go): partitions of scans read from two replicas at once, the pages
	// their forward and backward halves received, the halves given up because their replica
	// was slow or down (the other read on alone), and the records the halves received that
	// were not part of the answer (read by both where they met, or by the backward half of a
	// partition the limit ended before the halves met).
	ScanSplits, ScanPagesForward, ScanPagesBackward, ScanSplitFallbacks, ScanSplitUnused atomic.Int64
	// Streaming scans (scanstream.go): streams this node served as a replica, requests for a
	// stream it answered with one page because every cursor was in use, cursors dropped after
	// their coordinator fell silent, and streams this node gave up as a coordinator (the
	// replica was slow, or a page did not continue the read) and read on elsewhere.
	ScanStreams, ScanCursorsRefused, ScanCursorsExpired, ScanStreamRestarts atomic.Int64
	// ScanRepairs: records scans wrote to replicas that answered with an older version of a
	// key, or none (scanrepair.go).
	ScanRepairs atomic.Int64
}

// count counts a read fetched under label.
func (s *LargeReadStats) count(label string) {
	switch label {
	case config.ReadSelectorNearest:
		s.Nearest.Add(1)
	case config.ReadSelectorSnitch:
		s.Snitch.Add(1)
	case config.ReadSelectorHedged:
		s.Hedged.Add(1)
	case config.ReadSelectorMayflower:
		s.Mayflower.Add(1)
	case labelMayflowerUnconfigured:
		s.MayflowerUnconfigured.Add(1)
	case labelLocal:
		s.Local.Add(1)
	}
}

// Labels of reads not fetched by their selector.
const (
	labelMayflowerUnconfigured = "mayflower-unconfigured"
	labelLocal                 = "local"
)

// ByLabel lists the read counts by label, for the metrics.
func (s *LargeReadStats) ByLabel() map[string]int64 {
	return map[string]int64{
		config.ReadSelectorNearest: s.Nearest.Load(), config.ReadSelectorSnitch: s.Snitch.Load(),
		config.ReadSelectorHedged: s.Hedged.Load(), config.ReadSelectorMayflower: s.Mayflower.Load(),
		labelMayflowerUnconfigured: s.MayflowerUnconfigured.Load(), labelLocal: s.Local.Load(),
	}
}

// fetch is a pending read's value transfer.
//
// Invariants: gotN = |{i: got[i]}|; a chunk is in at most one exclusive source's inflight; a
// finished fetch is removed from Core.fetches.
type fetch struct {
	id       uint64
	r        *pendingRead
	version  hlc.Version
	size     int
	chunk    int
	n        int // chunks
	value    []byte
	got      []bool
	assigned []bool
	gotN     int
	retry    []int // chunks whose source failed, asked again first
	sources  []*fetchSource
	spare    []uint32 // live replicas not used yet, in the selector's order
	started  time.Time
	label    string
	hedge    bool // sources take every chunk not yet received (not only unassigned ones)
	// endgame: once no chunk is unassigned, a source with room asks for a chunk another
	// source still has in flight (BitTorrent's endgame; each chunk at most once more), so
	// a split read does not wait on its slower part's last window (mayflower).
	endgame bool
	dup     map[int]bool // chunks asked a second time in the endgame
	window  int
	opts    config.LargeReadOptions
}

// fetchSource is one replica a fetch reads from.
type fetchSource struct {
	node uint32
	back bool // takes chunks from the end
	// window is the chunks it may have in flight: read_window, or more when its bandwidth-
	// delay product needs them (a replica across the WAN).
	window   int
	cursor   int
	inflight map[int]time.Time // chunk → when asked
	failed   bool
	// rate (bytes/s) is the plan's estimate until measured: bytes received since sampleAt,
	// every report interval (transfers.go).
	rate     float64
	received int64
	sampleAt time.Time
}

func (f *fetch) chunkLen(i int) int { return min(f.chunk, f.size-i*f.chunk) }

// remaining is what s has yet to deliver, for the flow model: its chunks in flight and its
// share of the unassigned ones (by rate).
func (f *fetch) remaining(s *fetchSource) float64 {
	var inflight, total float64
	for i := range s.inflight {
		inflight += float64(f.chunkLen(i))
	}
	unassigned := 0.0
	for i := range f.n {
		if !f.assigned[i] && !f.got[i] {
			unassigned += float64(f.chunkLen(i))
		}
	}
	for _, o := range f.sources {
		if !o.failed {
			total += max(o.rate, 1)
		}
	}
	return inflight + unassigned*max(s.rate, 1)/max(total, 1)
}

// largeReadOptions returns ks's large-read options (parsed once per placement map).
func (c *Core) largeReadOptions(ks *placement.Keyspace) config.LargeReadOptions {
	if o, ok := c.lr.opts[ks.Spec.Name]; ok {
		return o
	}
	o, err := config.LargeReadOptionsOf(ks.Spec.Protocol, ks.Spec.Options)
	if err != nil {
		// Options are validated when a keyspace is created or altered; one that still fails
		// to parse gets no large reads (every value whole, as before).
		o = config.LargeReadOptions{}
	}
	if c.lr.opts == nil {
		c.lr.opts = map[string]config.LargeReadOptions{}
	}
	c.lr.opts[ks.Spec.Name] = o
	return o
}

// startFetch starts fetching r's newest value (version and size known, value omitted).
func (c *Core) startFetch(now time.Time, id uint64, r *pendingRead) {
	ks, ok := c.Pmap.Keyspace(r.req.Keyspace)
	if !ok {
		c.failRead(id, r, errs.New(errs.NotFound, "keyspace %q was dropped during the read", r.req.Keyspace))
		return
	}
	o := c.largeReadOptions(ks)
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 256 << 10
	}
	if o.Window <= 0 {
		o.Window = 8
	}
	size := r.newest.size
	n := (size + o.ChunkBytes - 1) / o.ChunkBytes
	f := &fetch{id: id, r: r, version: r.newest.rec.Version, size: size, chunk: o.ChunkBytes, n: n,
		got: make([]bool, n), assigned: make([]bool, n), started: now, window: o.Window, opts: o}
	r.fetch = f
	// This node may hold the version itself (a replica that was not asked, or whose answer
	// came after the level's): read it locally, no transfer.
	if slices.Contains(r.q.union, c.Cfg.NodeID) {
		if rec, found, err := c.Store.GetAt(r.req.Keyspace, r.req.Key, f.version); err == nil && found && rec.Version == f.version && len(rec.Value) == size {
			f.value = rec.Value
			f.gotN = n
			f.label = labelLocal
			c.finishFetch(now, f)
			return
		}
	}
	if len(c.fetches) >= maxFetches {
		c.failRead(id, r, errs.New(errs.Overloaded, "node fetches %d large reads already (limit %d)", len(c.fetches), maxFetches))
		return
	}
	var cands []uint32
	for _, n := range c.ByDistance(r.q.union) {
		if n != c.Cfg.NodeID && c.Alive(n) {
			cands = append(cands, n)
		}
	}
	// Replicas that answered with V first: they hold it (the others may not yet).
	slices.SortStableFunc(cands, func(a, b uint32) int {
		ha, hb := r.replies[a].version() == f.version, r.replies[b].version() == f.version
		switch {
		case ha == hb:
			return 0
		case ha:
			return -1
		}
		return 1
	})
	if len(cands) == 0 {
		c.failRead(id, r, errs.New(errs.Unavailable, "no live replica to fetch a %d-byte value from", size))
		return
	}
	f.value = make([]byte, size)
	c.fetches[id] = f
	c.selectSources(now, f, ks, cands)
	c.lr.stats.count(f.label)
	if len(f.sources) > 1 {
		c.lr.stats.Split.Add(1)
	}
	c.pumpAll(now, f)
}

// addSource makes node a source of f.
func (c *Core) addSource(now time.Time, f *fetch, node uint32, back bool, rate float64) *fetchSource {
	s := &fetchSource{node: node, back: back, inflight: map[int]time.Time{}, rate: rate, sampleAt: now, window: f.window}
	// Enough chunks in flight to fill the path at its capacity across the round trip (its
	// bandwidth-delay product), as TCP's window grows to: read_window 4 of 256 KiB carries
	// only 4 MB/s across a 250 ms round trip. The capacity, not the rate expected now: the
	// path may free up while the read runs.
	expect := c.Cfg.Network.NodeBytesPerSec
	if wan := c.Cfg.Network.WANBytesPerSec; wan > 0 && c.Region[node] != c.SelfRegion {
		expect = min(expect, wan)
	}
	if expect <= 0 {
		expect = rate
	}
	if rtt := c.RTT(node); expect > 0 && rtt > 0 {
		bdp := int(expect*rtt.Seconds())/f.chunk + 1
		s.window = min(max(s.window, bdp), maxFetchWindow)
	}
	if back {
		s.cursor = f.n - 1
	}
	f.sources = append(f.sources, s)
	f.spare = slices.DeleteFunc(f.spare, func(x uint32) bool { return x == node })
	return s
}

// selectSources picks f's first sources among cands (nearest first, holders of the version
// before the rest).
func (c *Core) selectSources(now time.Time, f *fetch, ks *placement.Keyspace, cands []uint32) {
	f.spare = slices.Clone(cands)
	switch f.opts.Selector {
	case config.ReadSelectorSnitch:
		f.label = config.ReadSelectorSnitch
		c.addSource(now, f, c.snitchPick(now, cands), false, 0)
	case config.ReadSelectorHedged:
		f.label = config.ReadSelectorHedged
		c.addSource(now, f, cands[0], false, 0)
		if len(cands) > 1 {
			c.AddTimer(now.Add(c.hedgeDelay(f)), timerFetchHedge, f.id)
		}
	case config.ReadSelectorMayflower:
		plan, ok := c.mayflowerPlan(now, f.opts.Split, float64(f.size), cands)
		if !ok {
			f.label = labelMayflowerUnconfigured
			c.addSource(now, f, cands[0], false, 0)
			return
		}
		f.label = config.ReadSelectorMayflower
		f.endgame = len(plan) > 1
		for i, p := range plan {
			c.addSource(now, f, p.node, i == 1, p.rate)
		}
	default:
		f.label = config.ReadSelectorNearest
		c.addSource(now, f, cands[0], false, 0)
	}
}

// hedgeDelay is how long the nearest replica has before the hedge is asked: hedge_after, or
// the 95th percentile of the recent large reads' time per byte times f's size (The Tail at
// Scale: "defer sending a secondary request until the first request has been outstanding for
// more than the 95th-percentile expected latency").
func (c *Core) hedgeDelay(f *fetch) time.Duration {
	if f.opts.HedgeAfter > 0 {
		return f.opts.HedgeAfter
	}
	if len(c.lr.perByte) < hedgeMinSamples {
		// No history yet: the time the nearest replica's interface would take, twice, plus
		// a round trip; 100ms per MiB when the interface's bandwidth is not configured.
		perByte := 100e-3 / (1 << 20)
		if bw := c.Cfg.Network.NodeBytesPerSec; bw > 0 {
			perByte = 2 / bw
		}
		return time.Duration(perByte*float64(f.size)*float64(time.Second)) + c.RTT(f.sources[0].node)
	}
	s := slices.Clone(c.lr.perByte)
	sort.Float64s(s)
	p95 := s[(len(s)*95)/100]
	return time.Duration(p95 * float64(f.size) * float64(time.Second))
}

// snitchPick is the dynamic snitch's choice among cands (nearest first).
func (c *Core) snitchPick(now time.Time, cands []uint32) uint32 {
	score := func(n uint32) (float64, bool) {
		s, ok := c.lr.snitch[n]
		if !ok || now.Sub(s.at) > snitchForget {
			return 0, false
		}
		return s.perByte, true
	}
	nearest := cands[0]
	ns, ok := score(nearest)
	if !ok {
		return nearest
	}
	best, bs := nearest, ns
	for _, n := range cands[1:] {
		if s, ok := score(n); ok && s < bs {
			best, bs = n, s
		}
	}
	if ns > bs*(1+snitchBadness) {
		return best
	}
	return nearest
}

// nextChunk is the chunk s asks for next, or -1.
func (f *fetch) nextChunk(s *fetchSource) int {
	for len(f.retry) > 0 {
		i := f.retry[0]
		f.retry = f.retry[1:]
		if !f.got[i] {
			f.assigned[i] = true
			return i
		}
	}
	for s.cursor >= 0 && s.cursor < f.n {
		i := s.cursor
		if s.back {
			s.cursor--
		} else {
			s.cursor++
		}
		if f.got[i] {
			continue
		}
		if f.hedge {
			if _, asked := s.inflight[i]; asked {
				continue
			}
		} else if f.assigned[i] {
			continue
		}
		f.assigned[i] = true
		return i
	}
	if f.endgame && len(s.inflight) == 0 {
		// The endgame, for a source with nothing left to do: the chunk another source asked
		// for longest ago (one at a time, so the duplicates are at most a chunk per time a
		// source runs dry).
		best, bestAt := -1, time.Time{}
		for _, o := range f.sources {
			if o == s || o.failed {
				continue
			}
			for i, at := range o.inflight {
				if f.got[i] || f.dup[i] {
					continue
				}
				if best < 0 || at.Before(bestAt) || (at.Equal(bestAt) && i < best) {
					best, bestAt = i, at
				}
			}
		}
		if best >= 0 {
			if f.dup == nil {
				f.dup = map[int]bool{}
			}
			f.dup[best] = true
			return best
		}
	}
	return -1
}

// pump keeps s's window full.
func (c *Core) pump(now time.Time, f *fetch, s *fetchSource) {
	for c.askNext(now, f, s) {
	}
}

// pumpAll fills every source's window one chunk at a time, in turn, so that sources starting
// together share the chunks instead of the first one's window taking them all.
func (c *Core) pumpAll(now time.Time, f *fetch) {
	for progress := true; progress; {
		progress = false
		for _, s := range f.sources {
			progress = c.askNext(now, f, s) || progress
		}
	}
}

// askNext asks s for its next chunk if its window has room; false if it did not.
func (c *Core) askNext(now time.Time, f *fetch, s *fetchSource) bool {
	if s.failed || len(s.inflight) >= s.window {
		return false
	}
	i := f.nextChunk(s)
	if i < 0 {
		return false
	}
	s.inflight[i] = now
	c.Send(s.node, &peerpb.Envelope{Msg: &peerpb.Envelope_ReadChunk{ReadChunk: &peerpb.ReadChunkRequest{
		RequestId: f.id, Keyspace: f.r.req.Keyspace, Partition: f.r.part.ID, Key: f.r.req.Key,
		Version: wire.VersionToPB(f.version), Offset: uint64(i * f.chunk), Length: uint32(f.chunkLen(i)), MoveEpoch: f.r.part.MoveEpoch,
	}}})
	return true
}

// handleReadChunk serves a chunk of a value at exactly the version asked for.
func (c *Core) handleReadChunk(now time.Time, from uint32, m *peerpb.ReadChunkRequest) {
	if !c.admitKey(m.Keyspace, m.Key, m.MoveEpoch) {
		return
	}
	reply := &peerpb.ReadChunkReply{RequestId: m.RequestId, Offset: m.Offset}
	v := wire.VersionFromPB(m.Version)
	rec, found, err := c.servedValue(m.Keyspace, m.Key, v)
	if c.Cfg.Mutation == MutationFetchAnyVersion {
		// Broken on purpose: serve the newest version's bytes whatever the fetch is pinned
		// to, so a value can be put together from two versions.
		rec, found, err = c.Store.Get(m.Keyspace, m.Key)
		if found {
			rec.Version = v
		}
	}
	if err != nil {
		return // no reply: the coordinator's failure detection or deadline takes over
	}
	end := m.Offset + uint64(m.Length)
	if !found || rec.Version != v || rec.Tombstone || end > uint64(len(rec.Value)) {
		reply.Missing = true
	} else {
		reply.Data = rec.Value[m.Offset:end]
	}
	c.Send(from, &peerpb.Envelope{Msg: &peerpb.Envelope_ReadChunkReply{ReadChunkReply: reply}})
}

// servedValue reads key's version v for a chunk request through a small cache of the values
// last served: a value is read from storage once for all its chunks, not once per chunk (an
// 8 MiB value in 256 KiB chunks would otherwise be read 32 times).
func (c *Core) servedValue(keyspace string, key []byte, v hlc.Version) (storage.Record, bool, error) {
	k := servedKey{keyspace: keyspace, key: string(key), version: v}
	for i, e := range c.lr.served {
		if e.k == k {
			// Most recent last.
			c.lr.served = append(append(c.lr.served[:i:i], c.lr.served[i+1:]...), e)
			return e.rec, true, nil
		}
	}
	rec, found, err := c.Store.GetAt(keyspace, key, v)
	if err != nil || !found || rec.Version != v {
		return rec, found, err
	}
	c.lr.served = append(c.lr.served, servedEntry{k: k, rec: rec})
	total := 0
	for _, e := range c.lr.served {
		total += len(e.rec.Value)
	}
	for len(c.lr.served) > 1 && (len(c.lr.served) > servedCacheEntries || total > servedCacheBytes) {
		total -= len(c.lr.served[0].rec.Value)
		c.lr.served = c.lr.served[1:]
	}
	return rec, true, nil
}

// The cache of values served in chunks: at most this many values and bytes (the last one
// served stays whatever its size).
const (
	servedCacheEntries = 16
	servedCacheBytes   = 64 << 20
)

type servedKey struct {
	keyspace, key string
	version       hlc.Version
}

type servedEntry struct {
	k   servedKey
	rec storage.Record
}

func (f *fetch) nodes() []uint32 {
	var out []uint32
	for _, s := range f.sources {
		out = append(out, s.node)
	}
	return out
}

func (f *fetch) source(node uint32) *fetchSource {
	for _, s := range f.sources {
		if s.node == node {
			return s
		}
	}
	return nil
}

// handleReadChunkReply takes a chunk (or a replica's "missing") for a fetch.
func (c *Core) handleReadChunkReply(now time.Time, from uint32, m *peerpb.ReadChunkReply) {
	f, ok := c.fetches[m.RequestId]
	if !ok {
		c.lr.stats.BytesWasted.Add(int64(len(m.Data)))
		return
	}
	s := f.source(from)
	if s == nil || s.failed {
		c.lr.stats.BytesWasted.Add(int64(len(m.Data)))
		return
	}
	if m.Missing {
		c.failSource(now, f, s)
		return
	}
	if m.Offset%uint64(f.chunk) != 0 || m.Offset >= uint64(f.size) {
		return
	}
	i := int(m.Offset / uint64(f.chunk))
	asked, inflight := s.inflight[i]
	if !inflight || len(m.Data) != f.chunkLen(i) {
		return
	}
	delete(s.inflight, i)
	c.lr.stats.BytesFetched.Add(int64(len(m.Data)))
	s.received += int64(len(m.Data))
	if d := now.Sub(asked); d > 0 {
		c.snitchSample(now, from, d.Seconds()/float64(len(m.Data)))
	}
	if f.got[i] {
		c.lr.stats.BytesWasted.Add(int64(len(m.Data)))
	} else {
		copy(f.value[i*f.chunk:], m.Data)
		f.got[i] = true
		f.gotN++
	}
	if f.gotN == f.n {
		c.finishFetch(now, f)
		return
	}
	c.pump(now, f, s)
}

func (c *Core) snitchSample(now time.Time, node uint32, perByte float64) {
	if c.lr.snitch == nil {
		c.lr.snitch = map[uint32]snitchScore{}
	}
	s, ok := c.lr.snitch[node]
	if !ok || now.Sub(s.at) > snitchForget {
		s.perByte = perByte
	} else {
		s.perByte = (1-snitchAlpha)*s.perByte + snitchAlpha*perByte
	}
	s.at = now
	c.lr.snitch[node] = s
}

type snitchScore struct {
	perByte float64 // seconds per byte, decayed
	at      time.Time
}

// failSource drops s from f (it does not hold the version, or is down): its chunks in flight
// go to the others, and a spare replica takes over when none is left.
func (c *Core) failSource(now time.Time, f *fetch, s *fetchSource) {
	s.failed = true
	c.lr.stats.SourcesFailed.Add(1)
	for i := range s.inflight {
		if !f.got[i] {
			f.retry = append(f.retry, i)
		}
	}
	slices.Sort(f.retry)
	s.inflight = map[int]time.Time{}
	live := 0
	for _, o := range f.sources {
		if !o.failed {
			live++
		}
	}
	if live == 0 {
		for len(f.spare) > 0 {
			n := f.spare[0]
			if !c.Alive(n) {
				f.spare = f.spare[1:]
				continue
			}
			// The replacement walks every chunk from the front: assigned chunks of failed
			// sources are in retry, the rest unassigned.
			c.addSource(now, f, n, false, 0)
			live++
			break
		}
	}
	if live == 0 {
		c.restartRead(now, f)
		return
	}
	c.pumpAll(now, f)
}

// hedgeFetch adds the next nearest replica to a fetch still running (hedged selector).
func (c *Core) hedgeFetch(now time.Time, id uint64) {
	f, ok := c.fetches[id]
	if !ok || len(f.spare) == 0 {
		return
	}
	f.hedge = true
	s := c.addSource(now, f, f.spare[0], true, 0)
	c.pump(now, f, s)
}

// finishFetch completes the value and lets the read go on (read repair, answer).
func (c *Core) finishFetch(now time.Time, f *fetch) {
	delete(c.fetches, f.id)
	r := f.r
	r.newest.rec.Value = f.value
	r.newest.omitted = false
	r.fetched = true
	// The path says the value was fetched and how ("quorum+mayflower"): the reads-served
	// counts of the simulator and the node's metrics show it.
	r.path += "+" + f.label
	if f.label == labelLocal {
		c.lr.stats.count(labelLocal)
	} else if f.size > 0 {
		if len(c.lr.perByte) >= hedgeSamples {
			c.lr.perByte = c.lr.perByte[1:]
		}
		c.lr.perByte = append(c.lr.perByte, now.Sub(f.started).Seconds()/float64(f.size))
	}
	c.maybeFinishRead(now, f.id, r)
}

// restartRead starts r over (no live replica holds the version it was fetching: it was
// overwritten and collected, or its holders went down); at most maxReadRestarts times.
func (c *Core) restartRead(now time.Time, f *fetch) {
	delete(c.fetches, f.id)
	r := f.r
	c.lr.stats.Restarts.Add(1)
	r.done = true
	c.Inflight--
	delete(c.reads, f.id)
	if r.restarts >= maxReadRestarts {
		c.Fail(r.req, errs.New(errs.Unavailable, "no live replica holds version %v of the %d-byte value any more (%d restarts)", f.version, f.size, r.restarts))
		return
	}
	ks, ok := c.Pmap.Keyspace(r.req.Keyspace)
	if !ok {
		c.Fail(r.req, errs.New(errs.NotFound, "keyspace %q was dropped during the read", r.req.Keyspace))
		return
	}
	c.startRead(now, ks, r.req, r.path, r.restarts+1)
}

// failRead ends r with err.
func (c *Core) failRead(id uint64, r *pendingRead, err error) {
	delete(c.fetches, id)
	if r.done {
		return
	}
	r.done = true
	c.Inflight--
	delete(c.reads, id)
	c.Fail(r.req, err)
}

// tickFetches drops sources the failure detector has given up on.
func (c *Core) tickFetches(now time.Time) {
	if len(c.fetches) == 0 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(c.fetches)) {
		f, ok := c.fetches[id]
		if !ok {
			continue
		}
		for _, s := range f.sources {
			if !s.failed && !c.Alive(s.node) {
				c.failSource(now, f, s)
				if _, still := c.fetches[id]; !still {
					break
				}
			}
		}
	}
}

// LargeReadCounters exposes the large reads' counters.
func (c *Core) LargeReadCounters() *LargeReadStats { return &c.lr.stats }
