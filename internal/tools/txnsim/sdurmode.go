package txnsim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"

	"meridian/internal/sdur"
)

// sdurMode is Geo-SDUR (internal/sdur) on the simulated cluster.
type sdurMode struct{}

func init() { modes["sdur"] = sdurMode{} }

func (sdurMode) mutations() map[string]string { return sdur.Mutations }

// sdurReplica adapts sdur.Replica and keeps what read-only transactions need: the globals it
// completed, with their completion index.
type sdurReplica struct {
	rep              *sdur.Replica
	completedGlobals map[sdur.TxnID]completedGlobal
	globalOrder      []sdur.TxnID
	lag              sdur.LagEstimator
	// lastNeed: when a global last waited for its threshold here (ticks linger after it).
	lastNeed time.Duration
}

func (sdurMode) newReplica(s *cluster, p *partition) (replica, error) {
	rep, err := sdur.NewReplica(p.id, sdur.Options{
		Threshold:       s.opts.Threshold,
		VoteRetry:       s.opts.VoteRetry,
		RecoveryTimeout: s.opts.RecoveryTimeout,
		Mutation:        s.opts.Mutation,
	})
	if err != nil {
		return nil, err
	}
	return &sdurReplica{rep: rep, completedGlobals: map[sdur.TxnID]completedGlobal{}}, nil
}

// sdurSaved is an SDUR replica's saved state: the core's snapshot and the completed globals
// the snapshot sequencer asks about (node state that must survive a restart too: a vector that
// misses a global completed before the restart could hold it in one partition only).
type sdurSaved struct {
	core        []byte
	completed   map[sdur.TxnID]completedGlobal
	globalOrder []sdur.TxnID
}

func (r *sdurReplica) save() (any, bool) {
	data, err := r.rep.Snapshot()
	if err != nil {
		return nil, false
	}
	return &sdurSaved{core: data, completed: maps.Clone(r.completedGlobals), globalOrder: slices.Clone(r.globalOrder)}, true
}

func (sdurMode) restore(s *cluster, p *partition, saved any) (replica, error) {
	st, ok := saved.(*sdurSaved)
	if !ok {
		return nil, fmt.Errorf("partition %d: saved state of type %T is not SDUR's", p.id, saved)
	}
	rep, err := sdur.Restore(st.core, sdur.Options{
		Threshold:       s.opts.Threshold,
		VoteRetry:       s.opts.VoteRetry,
		RecoveryTimeout: s.opts.RecoveryTimeout,
		Mutation:        s.opts.Mutation,
	}, s.clock())
	if err != nil {
		return nil, err
	}
	return &sdurReplica{rep: rep, completedGlobals: maps.Clone(st.completed), globalOrder: slices.Clone(st.globalOrder)}, nil
}

func (sdurMode) start(s *cluster) {
	s.after(s.opts.TickEntryInterval, s.thresholdTicks)
	s.startSequencer()
	if s.opts.Threshold.Unit == sdur.Ticks {
		// The threshold rides in the log from the start (it may change at run time).
		for _, p := range s.parts {
			th := s.opts.Threshold
			s.after(startAt/2, func() { s.propose(s.nodes[p.preferred], p.id, sdur.Entry{Kind: sdur.EntryConfig, Threshold: &th}) })
		}
	}
}

func (r *sdurReplica) deliver(s *cluster, n *node, g *group, _ uint64, payload any) {
	e, ok := payload.(sdur.Entry)
	if !ok {
		s.fail(errPayload(n, g, payload))
		return
	}
	r.rep.Deliver(s.clock(), e)
}

func (r *sdurReplica) tick(s *cluster, n *node, g *group) { r.rep.Tick(s.clock()) }
func (r *sdurReplica) setLeader(bool)                     {}
func (r *sdurReplica) setReplay(uint64)                   {}
func (r *sdurReplica) readVersion() uint64                { return r.rep.SnapshotCounter() }
func (r *sdurReplica) pendingCount() int {
	p, w := r.rep.PendingCount()
	return p + w
}

// submit is Algorithm 2's submit (lines 41-45) at node n: broadcast each part to its
// partition, delaying the broadcasts that would arrive early (delaying, IV-D).
func (sdurMode) submit(s *cluster, n *node, id sdur.TxnID, tparts []*txnPart) {
	parts := make([]*sdur.Part, 0, len(tparts))
	for _, tp := range tparts {
		reads := make([]string, 0, len(tp.reads))
		for _, k := range tp.reads {
			written := false
			for _, w := range tp.writes {
				written = written || w.Key == k
			}
			if !written {
				reads = append(reads, k)
			}
		}
		parts = append(parts, &sdur.Part{ID: id, Partition: tp.partition, Partitions: tp.partitions, Snapshot: tp.snapshot, Reads: reads, Writes: tp.writes, Submitter: n.id})
	}
	sub := n.submitted[id]
	sub.parts = parts
	delays := s.delay.delays(n, s, parts)
	for i, p := range parts {
		e := sdur.Entry{Kind: sdur.EntryTxn, Txn: p}
		if d := delays[i]; d > 0 {
			epoch := n.epoch
			pid := p.Partition
			s.after(d, func() {
				if n.up && n.epoch == epoch {
					s.propose(n, pid, e)
				}
			})
			continue
		}
		s.propose(n, p.Partition, e)
	}
	s.delay.submitted(n, sub, s.clock(), delays)
	// A proposal may be lost (no leader, a dropped message): broadcast again. A second
	// delivery is ignored by the replicas; the abort request of recovery (IV-F) settles the
	// rest.
	sub.resend = func() {
		for _, p := range parts {
			s.propose(n, p.Partition, sdur.Entry{Kind: sdur.EntryTxn, Txn: p})
		}
	}
}

func (sdurMode) readOnly(c *client, class string, body func(read func(keys []string, cb func(map[string][]int64))), done func()) {
	c.snapshotRead(class, body, done)
}

// drain carries out what the SDUR replica asks: writes applied to the store, outcomes to the
// submitter, votes to the other partitions' replicas, vote requests, abort requests.
func (r *sdurReplica) drain(s *cluster, n *node, g *group) {
	for range 1000 {
		if !r.rep.HasReady() {
			return
		}
		rd := r.rep.Ready()
		for _, a := range rd.Applies {
			s.applyWrites(g, a.Index, a.Txn, len(a.Writes), func(i int) (string, []byte, bool) {
				return a.Writes[i].Key, a.Writes[i].Value, a.Writes[i].Delete
			})
		}
		for _, o := range rd.Outcomes {
			if o.Global && o.Index > 0 {
				r.completedGlobals[o.Txn] = completedGlobal{index: o.Index, parts: o.Partitions}
				r.globalOrder = append(r.globalOrder, o.Txn)
				if len(r.globalOrder) > maxRetainedGlobals {
					delete(r.completedGlobals, r.globalOrder[0])
					r.globalOrder = r.globalOrder[1:]
				}
			}
			if n.idx == g.part.preferred && o.Reordered && o.Committed {
				s.stats.Reordered++
			}
			res := txnResult{id: o.Txn, committed: o.Committed, reason: string(o.Reason), key: o.Key}
			if sub := s.nodeByID(o.Submitter); sub >= 0 {
				s.send(n.idx, sub, func(dst *node) { s.outcome(dst, res) })
			}
		}
		for _, v := range rd.Votes {
			v := v
			for _, pid := range v.Partitions {
				if pid == g.part.id || int(pid) >= len(s.parts) {
					continue
				}
				for _, rr := range s.parts[pid].replicas {
					from := n.idx
					s.send(n.idx, rr, func(dst *node) { sdurVote(s, from, dst, pid, v) })
				}
			}
			if v.Txn.Node == n.id {
				s.delay.observe(n, v.Txn, g.part.id, s.clock(), 0) // delivered by the submitter's own replica
			}
			if v.Partition == g.part.id && v.Commit {
				r.lag.Delivered(v, s.clock())
			}
			s.stats.VotesSent++
		}
		for _, vr := range rd.VoteRequests {
			vr := vr
			if int(vr.Partition) >= len(s.parts) {
				continue
			}
			from, asking := n.idx, g.part.id
			for _, rr := range s.parts[vr.Partition].replicas {
				s.send(n.idx, rr, func(dst *node) {
					if dg := dst.groups[vr.Partition]; dg != nil {
						if v, ok := dg.rep.(*sdurReplica).rep.VoteFor(vr.Txn); ok {
							s.send(dst.idx, from, func(back *node) { sdurVote(s, dst.idx, back, asking, v) })
						}
					}
				})
			}
		}
		for _, ar := range rd.AbortRequests {
			ar := ar
			s.stats.AbortRequests++
			s.propose(n, ar.Partition, sdur.Entry{Kind: sdur.EntryAbortRequest, Abort: &ar})
		}
	}
}

// sdurVote hands a vote from node `from` to n's replica of partition pid.
func sdurVote(s *cluster, from int, n *node, pid uint32, v sdur.Vote) {
	g := n.groups[pid]
	if g == nil {
		return
	}
	sr := g.rep.(*sdurReplica)
	sr.rep.Vote(s.clock(), v)
	sr.lag.Vote(v, s.clock())
	if v.Txn.Node == n.id {
		s.delay.observe(n, v.Txn, v.Partition, s.clock(), s.topo.OneWay(s.nodes[from].region, n.region))
	}
}

// thresholdTicks appends tick entries to the logs whose leader is here and that need them
// (globals waiting for their reordering threshold), with the snapshot floor.
func (s *cluster) thresholdTicks() {
	for _, n := range s.nodes {
		if !n.up {
			continue
		}
		for _, pid := range s.partIDs(n) {
			g := n.groups[pid]
			if g.rn.BasicStatus().RaftState != etcdraft.StateLeader { // every tick interval: no progress map
				continue
			}
			rep := g.rep.(*sdurReplica).rep
			floor := uint64(0)
			if sc := rep.SnapshotCounter(); sc > s.opts.SnapshotWindow {
				floor = sc - s.opts.SnapshotWindow
			}
			if s.opts.AutoThreshold {
				g.rep.(*sdurReplica).retune(s, n, pid)
			}
			// Ticks keep flowing for TickLinger after the last time a global waited: a tick
			// takes a commit latency to be delivered (a WAN round trip in WAN 2), so ticks
			// started only once a global is delivered would reach its threshold that much
			// later; ticks already in flight reach it on time.
			sr := g.rep.(*sdurReplica)
			if rep.NeedsTicks() {
				sr.lastNeed = s.now
			}
			if rep.NeedsTicks() || (sr.lastNeed > 0 && s.now-sr.lastNeed < s.opts.TickLinger) || floor > rep.Floor()+s.opts.SnapshotWindow/4 {
				s.propose(n, pid, sdur.Entry{Kind: sdur.EntryTick, Floor: floor})
			}
		}
	}
	s.after(s.opts.TickEntryInterval, s.thresholdTicks)
}

var _ = time.Second

// retune proposes the automatic threshold (sdur.LagEstimator) as a configuration entry.
func (r *sdurReplica) retune(s *cluster, n *node, pid uint32) {
	th, ok := r.lag.Retune(r.rep.Threshold(), s.opts.TickEntryInterval, s.opts.ThresholdMargin, s.clock())
	if !ok {
		return
	}
	s.stats.Retunes++
	s.propose(n, pid, sdur.Entry{Kind: sdur.EntryConfig, Threshold: &th})
}
