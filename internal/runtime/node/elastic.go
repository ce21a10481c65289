package node

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"meridian/internal/config"
	"meridian/internal/elascass"
	"meridian/internal/errs"
	"meridian/internal/hubbub"
	"meridian/internal/metadata"
	"meridian/internal/placement"
	"meridian/internal/wire/peerpb"
)

// Elasticity in the node runtime (docs/elasticity.md). Every node, every elasticity
// interval, measures what it holds and serves — bytes and requests per partition replica,
// its load — and tells every other node (NodeStats, as ElasCass piggybacks its load on the
// gossip heartbeat). One node, the live active member with the lowest ID, also runs the
// placement driver (package elascass) on what it hears, and proposes the driver's changes to
// the cluster metadata. Every change is conditional there, so two nodes that both believe
// they drive (while they disagree on who is alive) only waste a round.

const (
	// loadSamples is the number of recent request keys kept per partition for its load
	// split key; one request in loadSampleEvery is sampled.
	loadSamples     = 32
	loadSampleEvery = 8
	// hitsAlpha is α of Eq. 3 (the weight of the last interval's hits).
	hitsAlpha = 0.5
	// statsFresh and statsFreshMin: a member whose statistics are older than this many
	// intervals, and than statsFreshMin, counts as down for the driver (statistics queue
	// behind bulk transfers on a busy link: a slow one must not look like a dead node).
	statsFresh    = 3
	statsFreshMin = 5 * time.Second
	// actionTimeout bounds one driver action's metadata command; driverParallel bounds the
	// commands of one plan in flight at once.
	actionTimeout  = 5 * time.Second
	driverParallel = 8
	// exactSpanBytes: a partition replica estimated below this size is measured exactly (a
	// scan of at most a few memtables' worth), so unflushed data counts.
	exactSpanBytes = 8 << 20
	// exactScanBudget bounds the bytes one statistics round reads for exact sizes, and
	// exactSpanMaxAge is how long an exact size is used (with the fresh estimate as a floor)
	// before it is measured again. Without the budget a keyspace of many small partitions was
	// read whole every interval (Θmax 4 MiB, 512 MiB: each node scanned its 512 MiB every
	// 250 ms, the host's CPU went to it and the write p99 rose by a WAN round trip's worth
	// while splits made partitions small; docs/benchmarks.md, Fig. 8).
	exactScanBudget = 4 << 20
	exactSpanMaxAge = 10 * time.Second
)

// exactSize is a partition replica's last exact size (measureReplicas).
type exactSize struct {
	start, end []byte
	bytes      int64
	at         time.Time
}

// partLoad counts the requests this node coordinated on one partition.
type partLoad struct {
	count   atomic.Int64
	mu      sync.Mutex
	samples [loadSamples][]byte
	next    int
}

// peerStats is the last NodeStats heard from a member, with when (this node's clock).
type peerStats struct {
	msg *peerpb.NodeStats
	at  time.Time
}

// elastic is the node's elasticity state.
type elastic struct {
	load sync.Map // elascass.PartKey → *partLoad

	mu        sync.Mutex
	peers     map[uint32]peerStats
	hits      map[elascass.PartKey]float64
	lastCount map[elascass.PartKey]int64
	seq       uint64
	cpuAt     time.Time
	cpuUsed   time.Duration
	lastOps   int64
	driver    *elascass.Driver
	started   time.Time
	// Hubbub-scale (internal/hubbub): this node's sensors, and, at the driving node, one
	// detector per region (nodes of a region see the same wide-area round trips, so their
	// request times are comparable), fed every planning round.
	service   serviceMeter
	host      *hostSignals
	detectors map[string]*hubbub.Detector
	flagged   map[string]bool // nodes flagged at the last round (transitions are logged)
	// interfered is the last round's flagged nodes and their index (Interference()).
	interfered map[string]float64

	ops                          atomic.Int64
	splits, merges, movesStarted atomic.Int64
	driving                      atomic.Bool
}

// countRequest counts a client request at this node's gateway against its partition (the
// replica hits of Eq. 3 and the partition's request rate), sampling its key.
func (n *Node) countRequest(keyspace string, key []byte) {
	if strings.HasPrefix(keyspace, "_") {
		return
	}
	ks, ok := n.pmap.Load().Keyspace(keyspace)
	if !ok {
		return
	}
	n.el.ops.Add(1)
	pk := elascass.PartKey{Keyspace: keyspace, Partition: ks.Lookup(key).ID}
	v, ok := n.el.load.Load(pk)
	if !ok {
		v, _ = n.el.load.LoadOrStore(pk, &partLoad{})
	}
	pl := v.(*partLoad)
	if c := pl.count.Add(1); c%loadSampleEvery == 0 {
		pl.mu.Lock()
		pl.samples[pl.next%loadSamples] = bytes.Clone(key)
		pl.next++
		pl.mu.Unlock()
	}
}

// loadMedian is the middle key of a partition's sampled requests (nil: none).
func (pl *partLoad) loadMedian() []byte {
	pl.mu.Lock()
	var keys [][]byte
	for _, k := range pl.samples {
		if k != nil {
			keys = append(keys, k)
		}
	}
	pl.mu.Unlock()
	if len(keys) < 4 {
		return nil
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys[len(keys)/2]
}

// elasticLoop shares this node's statistics every interval and, on the driving node, plans
// and applies the placement driver's changes.
func (n *Node) elasticLoop() {
	defer n.wg.Done()
	e := n.opts.Cluster.Elasticity
	t := time.NewTicker(e.Interval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		now := n.clock.Now()
		st := n.collectStats(now, e.Interval)
		for _, m := range n.Members() {
			if m.ID != n.self.ID {
				n.send(&peerpb.Envelope{From: n.self.ID, To: m.ID, Msg: &peerpb.Envelope_NodeStats{NodeStats: st}})
			}
		}
		n.noteStats(n.self.ID, st, now)
		if !e.DriverOn() || !n.isDriver(now) {
			n.el.driving.Store(false)
			continue
		}
		n.el.driving.Store(true)
		n.drive(now)
	}
}

// noteStats records a member's statistics (the runtime takes NodeStats messages here, not
// an engine).
func (n *Node) noteStats(from uint32, st *peerpb.NodeStats, now time.Time) {
	n.el.mu.Lock()
	defer n.el.mu.Unlock()
	if old, ok := n.el.peers[from]; ok && old.msg.Seq >= st.Seq && old.msg.SentUnixNanos >= st.SentUnixNanos {
		return // reordered or repeated
	}
	n.el.peers[from] = peerStats{msg: st, at: now}
}

// replicaMeasure is what collectStats reads from storage about one replica.
type replicaMeasure struct {
	bytes    int64
	splitKey []byte
}

// cachedSplitKey is a partition's volume median, with the range and time it was found for.
type cachedSplitKey struct {
	start, end []byte
	key        []byte
	at         time.Time
}

// splitKeyMaxAge: a partition's median is looked for again after this long (it moves only
// as data is written; finding it costs a few dozen index lookups, or a read of a small one).
const splitKeyMaxAge = 10 * time.Second

// measureReplicas reads the size (and, above Θmax, the volume median) of every replica this
// node holds. It runs without n.el.mu: it reads the storage engine, and must not hold up the
// peers' statistics the message path hands to noteStats.
func (n *Node) measureReplicas(pm *placement.Map, now time.Time) map[elascass.PartKey]replicaMeasure {
	out := map[elascass.PartKey]replicaMeasure{}
	budget := int64(exactScanBudget)
	for _, name := range sortedKeyspaces(pm) {
		ks := pm.Keyspaces[name]
		if !movable(ks) {
			continue
		}
		eo, _ := config.ElasticOptionsOf(ks.Spec.Options)
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			if !p.Holds(n.self.ID) {
				continue
			}
			pk := elascass.PartKey{Keyspace: name, Partition: p.ID}
			var m replicaMeasure
			m.bytes = n.replicaBytes(pk, p, name, now, &budget)
			if eo.SplitBytes > 0 && m.bytes > eo.SplitBytes && p.Move == nil {
				c, ok := n.splitKeys[pk]
				if !ok || !bytes.Equal(c.start, p.Start) || !bytes.Equal(c.end, p.End) || now.Sub(c.at) > splitKeyMaxAge {
					c = cachedSplitKey{start: p.Start, end: p.End, at: now}
					if k, err := n.store.MedianKey(p.Span(name)); err == nil {
						c.key = k
					}
					n.splitKeys[pk] = c
				}
				m.splitKey = c.key
			}
			out[pk] = m
		}
	}
	for pk := range n.splitKeys {
		if _, ok := out[pk]; !ok {
			delete(n.splitKeys, pk)
		}
	}
	for pk := range n.exactSizes {
		if _, ok := out[pk]; !ok {
			delete(n.exactSizes, pk)
		}
	}
	return out
}

// replicaBytes is the size of this node's replica of partition p: the storage engine's
// estimate, and for a replica estimated below exactSpanBytes (its data may sit in a memtable
// the estimate does not see) the larger of that and an exact size, measured again once it is
// exactSpanMaxAge old while budget (bytes left to read this round) lasts.
func (n *Node) replicaBytes(pk elascass.PartKey, p *placement.Partition, ks string, now time.Time, budget *int64) int64 {
	est, err := n.store.EstimateSpanBytes(p.Span(ks))
	if err != nil || est >= exactSpanBytes {
		return int64(est)
	}
	c, ok := n.exactSizes[pk]
	if ok && (!bytes.Equal(c.start, p.Start) || !bytes.Equal(c.end, p.End)) {
		ok = false // a split or merge changed the range
	}
	if (!ok || now.Sub(c.at) > exactSpanMaxAge) && *budget > 0 {
		if b, err := n.store.SpanBytes(p.Span(ks), exactSpanBytes); err == nil {
			c, ok = exactSize{start: p.Start, end: p.End, bytes: int64(b), at: now}, true
			n.exactSizes[pk] = c
			*budget -= int64(b)
		}
	}
	if !ok {
		return int64(est)
	}
	return max(int64(est), c.bytes)
}

// collectStats measures what this node holds and serves.
func (n *Node) collectStats(now time.Time, interval time.Duration) *peerpb.NodeStats {
	pm := n.pmap.Load()
	measured := n.measureReplicas(pm, now)
	n.el.mu.Lock()
	defer n.el.mu.Unlock()
	n.el.seq++
	st := &peerpb.NodeStats{Seq: n.el.seq, SentUnixNanos: now.UnixNano(), Cpu: n.cpuLoad(now), ServiceUs: n.el.service.mean()}
	if n.opts.ServiceMeter != nil {
		st.ServiceUs = float64(n.opts.ServiceMeter().Microseconds())
	}
	switch {
	case n.opts.HostMeter != nil:
		steal, sched := n.opts.HostMeter()
		st.HostMeasured, st.StealShare, st.SchedP99Us = true, steal, float64(sched.Microseconds())
	case n.opts.LoadMeter == nil:
		// A host of its own (an emulated node shares its process's host with the others:
		// the host's signals are not its own).
		if n.el.host == nil {
			n.el.host = newHostSignals()
		}
		steal, sched := n.el.host.read()
		st.HostMeasured, st.StealShare, st.SchedP99Us = true, steal, float64(sched.Microseconds())
	}
	ops := n.el.ops.Load()
	st.LoadOps = float64(ops-n.el.lastOps) / interval.Seconds()
	n.el.lastOps = ops
	for _, name := range sortedKeyspaces(pm) {
		ks := pm.Keyspaces[name]
		if !movable(ks) {
			continue
		}
		eo, _ := config.ElasticOptionsOf(ks.Spec.Options)
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			pk := elascass.PartKey{Keyspace: name, Partition: p.ID}
			var count int64
			var pl *partLoad
			if v, ok := n.el.load.Load(pk); ok {
				pl = v.(*partLoad)
				count = pl.count.Load()
			}
			rate := float64(count-n.el.lastCount[pk]) / interval.Seconds()
			n.el.lastCount[pk] = count
			n.el.hits[pk] = elascass.EWMA(n.el.hits[pk], rate, hitsAlpha)
			if !p.Holds(n.self.ID) && rate == 0 {
				continue
			}
			ps := &peerpb.PartitionStats{Keyspace: name, Partition: p.ID, Hits: n.el.hits[pk], Rate: rate, Version: ks.Version, Start: p.Start, End: p.End}
			if m, ok := measured[pk]; ok {
				ps.Bytes, ps.SplitKey = m.bytes, m.splitKey
			}
			if pl != nil && eo.SplitOps > 0 && rate > eo.SplitOps {
				ps.LoadSplitKey = pl.loadMedian()
			}
			st.Partitions = append(st.Partitions, ps)
		}
	}
	return st
}

// cpuLoad is the node's utilisation since the last call: Options.LoadMeter's, or the
// process's CPU time over the interval and the cores (a process holds one node in
// production).
func (n *Node) cpuLoad(now time.Time) float64 {
	if n.opts.LoadMeter != nil {
		return n.opts.LoadMeter()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	defer func() { n.el.cpuAt, n.el.cpuUsed = now, used }()
	if n.el.cpuAt.IsZero() || !now.After(n.el.cpuAt) {
		return 0
	}
	cores := float64(max(1, runtime.GOMAXPROCS(0)))
	return min(1, float64(used-n.el.cpuUsed)/float64(now.Sub(n.el.cpuAt))/cores)
}

// markInterference runs Hubbub-scale's detector over the members' last statistics, one
// detector per region, and sets the flagged members' index (the plan then weights their
// share, takes replicas from them first and gives them none). Called by the driving node
// every planning round, with n.el.mu held.
func (n *Node) markInterference(members []elascass.Member) {
	if !n.opts.Cluster.Elasticity.InterferenceOn() {
		return
	}
	n.el.interfered = map[string]float64{}
	byRegion := map[string][]int{}
	for i, m := range members {
		ps, ok := n.el.peers[m.ID]
		if !ok || !m.Alive || m.State != elascass.StateActive || ps.msg.GetServiceUs() <= 0 {
			continue
		}
		byRegion[m.Region] = append(byRegion[m.Region], i)
	}
	if n.el.detectors == nil {
		n.el.detectors = map[string]*hubbub.Detector{}
	}
	for region, idx := range byRegion {
		if len(idx) < 2 {
			continue // nothing to compare a lone node with
		}
		det := n.el.detectors[region]
		if det == nil {
			var err error
			if det, err = hubbub.New(hubbub.Options{}); err != nil {
				n.log.Warn("hubbub: detector", "err", err)
				return
			}
			n.el.detectors[region] = det
		}
		samples := make([]hubbub.NodeSample, 0, len(idx))
		measured := true
		var steals, scheds []float64
		for _, i := range idx {
			msg := n.el.peers[members[i].ID].msg
			measured = measured && msg.GetHostMeasured()
			steals, scheds = append(steals, msg.GetStealShare()), append(scheds, msg.GetSchedP99Us())
			samples = append(samples, hubbub.NodeSample{Node: members[i].Name, LoadOps: msg.GetLoadOps(),
				ServiceTime: time.Duration(msg.GetServiceUs() * float64(time.Microsecond)), HostMeasured: true})
		}
		if !measured {
			// Nodes without a host of their own (emulated nodes sharing a process): their
			// request times alone would move data on every slow period a move causes.
			continue
		}
		// The host signals count in excess of the region's median: nodes sharing a host (or
		// a busy machine under every node) see the same steal and scheduler latency, and
		// that is not one node's interference.
		medSteal, medSched := median(steals), median(scheds)
		for k := range samples {
			samples[k].StealShare = steals[k] - medSteal
			samples[k].SchedLatency = time.Duration((scheds[k] - medSched) * float64(time.Microsecond))
		}
		if n.el.flagged == nil {
			n.el.flagged = map[string]bool{}
		}
		for k, s := range det.Observe(samples) {
			if s.Interfered {
				members[idx[k]].Interference = s.Index
				n.el.interfered[s.Node] = s.Index
			}
			if s.Interfered != n.el.flagged[s.Node] {
				n.el.flagged[s.Node] = s.Interfered
				n.log.Info("hubbub: interference", "node", s.Node, "interfered", s.Interfered, "index", s.Index)
			}
		}
	}
}

// Interference returns the nodes the driver flagged as interfered at its last planning round,
// with their index (empty on a node that does not drive).
func (n *Node) Interference() map[string]float64 {
	n.el.mu.Lock()
	defer n.el.mu.Unlock()
	out := make(map[string]float64, len(n.el.interfered))
	for k, v := range n.el.interfered {
		out[k] = v
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

// movable reports whether the driver manages ks: a user keyspace whose protocol moves
// replicas.
func movable(ks *placement.Keyspace) bool {
	if strings.HasPrefix(ks.Spec.Name, "_") {
		return false
	}
	spec, ok := config.Protocol(ks.Spec.Protocol)
	return ok && spec.Moves
}

func sortedKeyspaces(pm *placement.Map) []string {
	names := make([]string, 0, len(pm.Keyspaces))
	for name := range pm.Keyspaces {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// fresh reports whether member id's statistics are recent (this node's always are).
func (n *Node) fresh(id uint32, now time.Time) (bool, time.Duration) {
	if id == n.self.ID {
		return true, 0
	}
	limit := max(statsFresh*n.opts.Cluster.Elasticity.Interval, statsFreshMin)
	ps, ok := n.el.peers[id]
	if !ok {
		since := now.Sub(n.el.started)
		return since < limit, max(0, since-limit)
	}
	age := now.Sub(ps.at)
	return age < limit, max(0, age-limit)
}

// isDriver reports whether this node drives: the live active (or joining) member with the
// lowest ID.
func (n *Node) isDriver(now time.Time) bool {
	n.el.mu.Lock()
	defer n.el.mu.Unlock()
	for _, m := range n.Members() {
		if m.State != metadata.NodeActive {
			continue
		}
		if ok, _ := n.fresh(m.ID, now); ok {
			return m.ID == n.self.ID
		}
	}
	return false
}

// elasticState is the driver's input: the members with their liveness and load, the managed
// keyspaces and the statistics (sizes and split keys only from the keyspace's current
// version).
func (n *Node) elasticState(now time.Time) elascass.State {
	pm := n.pmap.Load()
	n.el.mu.Lock()
	defer n.el.mu.Unlock()
	st := elascass.State{Now: now, Replicas: map[uint32]map[elascass.PartKey]elascass.ReplicaStat{}, Partitions: map[elascass.PartKey]elascass.PartitionStat{}}
	for _, m := range n.Members() {
		alive, down := n.fresh(m.ID, now)
		mem := elascass.Member{ID: m.ID, Name: m.Name, Region: m.Region, State: m.State, Alive: alive, DownFor: down}
		if ps, ok := n.el.peers[m.ID]; ok {
			mem.CPU, mem.LoadOps = ps.msg.Cpu, ps.msg.LoadOps
		}
		st.Members = append(st.Members, mem)
	}
	for _, name := range sortedKeyspaces(pm) {
		ks := pm.Keyspaces[name]
		if !movable(ks) || ks.Version == 0 {
			continue // version 0: a configuration keyspace the metadata does not hold yet
		}
		spec, _ := config.Protocol(ks.Spec.Protocol)
		eo, _ := config.ElasticOptionsOf(ks.Spec.Options)
		// A transactional keyspace's partitions do not split or merge (metadata refuses it):
		// its replicas move, its ranges stay.
		ko := elascass.KeyspaceOptions{Repartition: spec.Repartition && config.TxnModeOf(ks.Spec.Options) == config.TxnNone, NoRejoin: spec.NoRejoin}
		if spec.Repartition {
			ko.MaxBytes, ko.MinBytes, ko.SplitOps, ko.MinPartitions = eo.SplitBytes, eo.MergeBytes, eo.SplitOps, eo.MinPartitions
			if ko.MinPartitions == 0 {
				ko.MinPartitions = ks.Spec.Partitions
			}
		}
		st.Keyspaces = append(st.Keyspaces, elascass.Keyspace{Keyspace: ks, Options: ko})
	}
	topRate := map[elascass.PartKey]float64{}
	for _, id := range sortedIDs(n.el.peers) {
		ps := n.el.peers[id]
		if alive, _ := n.fresh(id, now); !alive {
			continue
		}
		for _, p := range ps.msg.Partitions {
			pk := elascass.PartKey{Keyspace: p.Keyspace, Partition: p.Partition}
			ks, ok := pm.Keyspace(p.Keyspace)
			if !ok {
				continue
			}
			if cur, ok := ks.Partition(p.Partition); !ok || !bytes.Equal(cur.Start, p.Start) || !bytes.Equal(cur.End, p.End) {
				continue // the partition split or merged since: what was measured is stale
			}
			if st.Replicas[id] == nil {
				st.Replicas[id] = map[elascass.PartKey]elascass.ReplicaStat{}
			}
			st.Replicas[id][pk] = elascass.ReplicaStat{Bytes: p.Bytes, Hits: p.Hits}
			agg := st.Partitions[pk]
			agg.Known = true
			agg.Bytes = max(agg.Bytes, p.Bytes)
			agg.Rate += p.Rate
			agg.Heat += p.Hits
			if len(p.SplitKey) > 0 && agg.SplitKey == nil {
				agg.SplitKey = p.SplitKey
			}
			if len(p.LoadSplitKey) > 0 && p.Rate > topRate[pk] {
				agg.LoadSplitKey, topRate[pk] = p.LoadSplitKey, p.Rate
			}
			st.Partitions[pk] = agg
		}
	}
	return st
}

func sortedIDs[V any](m map[uint32]V) []uint32 {
	out := make([]uint32, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// drive plans and carries out the placement driver's changes, one metadata command each.
func (n *Node) drive(now time.Time) {
	if n.el.driver == nil {
		e := n.opts.Cluster.Elasticity
		d, err := elascass.New(elascass.Options{Strategy: elascass.Strategy(e.Strategy), DeadAfter: e.DeadAfter,
			MaxMovesPerNode: e.MaxMovesPerNode, MaxMoves: e.MaxMoves,
			TargetByteImbalance: e.TargetByteImbalance, TargetLoadImbalance: e.TargetLoadImbalance, SettleFor: e.SettleFor, StalledAfter: e.StalledAfter})
		if err != nil {
			n.log.Error("placement driver: bad options", "err", err)
			return
		}
		n.el.driver = d
	}
	// The changes are independent (each names its own partition or node, and each is
	// checked against the catalog as it is when it applies): proposed together, a few at a
	// time, so that a plan costs about one metadata round trip, not one per change.
	st := n.elasticState(now)
	n.el.mu.Lock()
	n.markInterference(st.Members) // once per planning round: the detector's period
	n.el.mu.Unlock()
	acts := n.el.driver.Plan(st)
	sem := make(chan struct{}, driverParallel)
	var wg sync.WaitGroup
	for _, a := range acts {
		sem <- struct{}{}
		wg.Add(1)
		go func(a elascass.Action) {
			defer func() { <-sem; wg.Done() }()
			if err := n.act(a); err != nil {
				if k := errs.KindOf(err); k != errs.Conflict {
					n.log.Warn("placement driver: change not made", "change", a.String(), "err", err)
				}
				return
			}
			n.log.Info("placement driver", "change", a.String())
		}(a)
	}
	wg.Wait()
}

// act proposes one driver action to the cluster metadata.
func (n *Node) act(a elascass.Action) error {
	ctx, cancel := context.WithTimeout(context.Background(), actionTimeout)
	defer cancel()
	var cmd metadata.Command
	switch a.Kind {
	case elascass.ActSplit:
		// Not conditional on the keyspace's version: a plan's splits of different partitions
		// would conflict with each other. The catalog checks that the key is still inside
		// the partition, which is all a split needs.
		cmd = metadata.Command{Op: metadata.OpSplit, Name: a.Keyspace, Partition: a.Partition, SplitKey: a.SplitKey}
	case elascass.ActMerge:
		// The catalog checks the neighbours are on the same replicas and not moving.
		cmd = metadata.Command{Op: metadata.OpMerge, Name: a.Keyspace, Partition: a.Partition}
	case elascass.ActStartMove:
		mv := a.Move
		cmd = metadata.Command{Op: metadata.OpMoveStart, Name: a.Keyspace, Partition: a.Partition, Move: &mv}
	case elascass.ActAbortMove:
		cmd = metadata.Command{Op: metadata.OpMoveAbort, Name: a.Keyspace, Partition: a.Partition, MoveID: a.Move.ID}
	case elascass.ActNodeState:
		cmd = metadata.Command{Op: metadata.OpNodeState, NodeID: a.Node, State: a.State, ExpectState: a.From}
	default:
		return errs.New(errs.Internal, "unknown driver action %d", a.Kind)
	}
	if _, _, err := n.metaCommand(ctx, cmd, actionTimeout, false); err != nil {
		return err
	}
	switch a.Kind {
	case elascass.ActSplit:
		n.el.splits.Add(1)
		n.m.elastic.WithLabelValues("split").Inc()
	case elascass.ActMerge:
		n.el.merges.Add(1)
		n.m.elastic.WithLabelValues("merge").Inc()
	case elascass.ActStartMove:
		n.el.movesStarted.Add(1)
		n.m.elastic.WithLabelValues("move_start").Inc()
	case elascass.ActAbortMove:
		n.m.elastic.WithLabelValues("move_abort").Inc()
	case elascass.ActNodeState:
		n.m.elastic.WithLabelValues("node_" + a.State).Inc()
	}
	return nil
}

// ClusterStatus describes the members (state, liveness, replicas, bytes, load), the moves in
// flight and the imbalance indexes, from this node's map and the statistics it has heard.
func (n *Node) ClusterStatus() Status {
	now := n.clock.Now()
	pm := n.pmap.Load()
	st := n.elasticState(now)
	out := Status{Splits: n.el.splits.Load(), Merges: n.el.merges.Load(), MovesStarted: n.el.movesStarted.Load()}
	replicas := map[uint32]int{}
	for _, name := range sortedKeyspaces(pm) {
		ks := pm.Keyspaces[name]
		if strings.HasPrefix(name, "_") {
			continue
		}
		out.Partitions += len(ks.Partitions)
		for i := range ks.Partitions {
			p := &ks.Partitions[i]
			for _, r := range p.Replicas {
				replicas[r]++
			}
			if mv := p.Move; mv != nil {
				out.Moves = append(out.Moves, MoveInfo{Keyspace: name, Partition: p.ID, ID: mv.ID, From: n.MemberName(mv.Remove),
					To: n.MemberName(mv.Add), Source: n.MemberName(mv.Source)})
			}
		}
	}
	// Imbalance indexes per region (replicas move within their region, so that is where
	// balance is possible); the worst region's is reported.
	repl, byts, load := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	n.el.mu.Lock()
	for _, m := range st.Members {
		ns := NodeStatus{ID: m.ID, Name: m.Name, Region: m.Region, State: m.State, Alive: m.Alive, Replicas: replicas[m.ID], CPU: m.CPU, LoadOps: m.LoadOps}
		if ps, ok := n.el.peers[m.ID]; ok {
			ns.StatsAge = now.Sub(ps.at)
			for _, p := range ps.msg.Partitions {
				ns.Bytes += p.Bytes
			}
		}
		if m.State == metadata.NodeJoining {
			ns.Bootstrap = "phase 1"
		}
		out.Nodes = append(out.Nodes, ns)
		if m.State == metadata.NodeActive && m.Alive {
			r := m.Region
			repl[r], byts[r], load[r] = append(repl[r], float64(ns.Replicas)), append(byts[r], float64(ns.Bytes)), append(load[r], ns.LoadOps)
		}
	}
	n.el.mu.Unlock()
	for r := range repl {
		out.ReplicaImbalance = max(out.ReplicaImbalance, elascass.Imbalance(repl[r]))
		out.ByteImbalance = max(out.ByteImbalance, elascass.Imbalance(byts[r]))
		out.LoadImbalance = max(out.LoadImbalance, elascass.Imbalance(load[r]))
	}
	if n.el.driving.Load() {
		out.Driver = n.self.Name
	}
	return out
}

// Status is ClusterStatus's answer.
type Status struct {
	Nodes                                          []NodeStatus
	Moves                                          []MoveInfo
	ReplicaImbalance, ByteImbalance, LoadImbalance float64
	Partitions                                     int
	Splits, Merges, MovesStarted                   int64
	// Driver is this node's name when it runs the placement driver.
	Driver string
}

// NodeStatus is one member in Status.
type NodeStatus struct {
	ID                  uint32
	Name, Region, State string
	Alive               bool
	Replicas            int
	Bytes               int64
	LoadOps, CPU        float64
	Bootstrap           string
	StatsAge            time.Duration
}

// MoveInfo is a move in flight in Status.
type MoveInfo struct {
	Keyspace         string
	Partition        uint32
	ID               uint64
	From, To, Source string
}

// handleNodeStats takes a member's statistics (from deliver, before the engines).
func (n *Node) handleNodeStats(env *peerpb.Envelope) bool {
	st, ok := env.Msg.(*peerpb.Envelope_NodeStats)
	if !ok {
		return false
	}
	n.noteStats(env.From, st.NodeStats, n.clock.Now())
	return true
}
