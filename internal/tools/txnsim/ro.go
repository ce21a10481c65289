package txnsim

import (
	"fmt"
	"slices"
	"time"

	"meridian/internal/sdur"
)

// Read-only transactions (paper III-A: "read-only transactions execute against a
// globally-consistent snapshot and commit without certification"; the snapshots "are built
// asynchronously by servers") read at a *snapshot vector*: one snapshot counter per partition.
// Two properties make every such read serializable:
//
//   - Each vector holds every global transaction in all its partitions or in none. Then the
//     vector is a prefix of a serialization order: a chain of dependencies between partitions
//     passes through globals, which are in or out everywhere.
//   - The vectors form one chain (each is componentwise at or above the one before). Without
//     it, two read-only transactions could see two independent locals of two partitions in
//     opposite orders (a long fork: the simulation's checker found exactly that, G2, with
//     vectors chosen per transaction).
//
// So one process, the snapshot sequencer (the preferred server of partition 0), builds the
// chain by exchanging snapshot counters: every SnapshotInterval it asks a replica of each
// partition for its SC and the globals it completed since the previous vector's component,
// asks the other partitions of each such global whether and where they completed it, lowers
// each component below every global not yet in all its partitions (never below the previous
// vector: the globals there are in all of them already), and sends the new vector, numbered,
// to every replica. A read-only transaction asks the nearest replica of each partition for the
// newest vector it has, takes the newest of those, and reads each partition at its component
// (a replica behind that component waits). Everything a read-only transaction does is in its
// own region: 0 WAN round trips where every partition has a replica there; the price is
// staleness — a vector is about one sequencer round (a WAN round trip) plus the interval old.

// snapVector is one vector of the chain.
type snapVector struct {
	seq uint64
	vec []uint64
}

// sequencer builds the chain of snapshot vectors.
type sequencer struct {
	node     int
	last     snapVector
	inFlight bool
	rounds   int
}

func (s *cluster) startSequencer() {
	s.seqr = &sequencer{node: s.parts[0].preferred, last: snapVector{vec: make([]uint64, len(s.parts))}}
	s.after(s.opts.SnapshotInterval, s.sequencerRound)
}

// globalAt is a global's completion at a partition.
type globalAt struct {
	id    sdur.TxnID
	index uint64
	parts []uint32
}

func (s *cluster) sequencerRound() {
	q := s.seqr
	defer s.after(s.opts.SnapshotInterval, s.sequencerRound)
	home := s.nodes[q.node]
	if q.inFlight || !home.up {
		return
	}
	q.inFlight = true
	epoch := home.epoch
	round := q.rounds
	s.at(s.now+5*time.Second, func() {
		if q.inFlight && q.rounds == round { // a message lost: give the round up
			q.inFlight = false
			q.rounds++
		}
	})
	nparts := len(s.parts)
	sc := make([]uint64, nparts)
	cands := make([][]globalAt, nparts)
	servers := make([]int, nparts)
	remaining := nparts
	failed := false
	for p := range nparts {
		p := p
		servers[p] = s.nearestReplica(home, s.parts[p])
		from := q.last.vec[p]
		s.send(q.node, servers[p], func(n *node) {
			g := n.groups[uint32(p)]
			if g == nil {
				return
			}
			sr := g.rep.(*sdurReplica)
			cur := sr.rep.SnapshotCounter()
			var list []globalAt
			ok := true
			if cur < from {
				ok = false // a replica behind the last vector: try again next round
			}
			// The globals completed in (from, cur], newest first, from the retained order.
			for i := len(sr.globalOrder) - 1; i >= 0 && ok; i-- {
				cg := sr.completedGlobals[sr.globalOrder[i]]
				if cg.index <= from {
					break
				}
				list = append(list, globalAt{id: sr.globalOrder[i], index: cg.index, parts: cg.parts})
				if i == 0 && len(sr.globalOrder) == maxRetainedGlobals {
					ok = false // older ones dropped: cannot vouch for the range
				}
			}
			s.send(n.idx, q.node, func(*node) {
				if !home.up || home.epoch != epoch || q.rounds != round || !q.inFlight {
					return
				}
				if !ok {
					failed = true
				}
				sc[p], cands[p] = cur, list
				remaining--
				if remaining == 0 {
					if failed {
						q.inFlight = false
						q.rounds++
						return
					}
					s.sequencerStatus(round, servers, sc, cands)
				}
			})
		})
	}
}

// sequencerStatus asks every partition where it completed the candidate globals, then
// computes and publishes the next vector.
func (s *cluster) sequencerStatus(round int, servers []int, sc []uint64, cands [][]globalAt) {
	q := s.seqr
	home := s.nodes[q.node]
	epoch := home.epoch
	nparts := len(s.parts)
	var ids []sdur.TxnID
	seen := map[sdur.TxnID]bool{}
	for _, l := range cands {
		for _, c := range l {
			if !seen[c.id] {
				seen[c.id] = true
				ids = append(ids, c.id)
			}
		}
	}
	status := make([]map[sdur.TxnID]uint64, nparts)
	remaining := nparts
	for p := range nparts {
		p := p
		s.send(q.node, servers[p], func(n *node) {
			g := n.groups[uint32(p)]
			if g == nil {
				return
			}
			st := make(map[sdur.TxnID]uint64, len(ids))
			for _, id := range ids {
				st[id] = g.rep.(*sdurReplica).completedGlobals[id].index
			}
			s.send(n.idx, q.node, func(*node) {
				if !home.up || home.epoch != epoch || q.rounds != round || !q.inFlight {
					return
				}
				status[p] = st
				remaining--
				if remaining == 0 {
					s.publishVector(sc, cands, status)
				}
			})
		})
	}
}

func (s *cluster) publishVector(sc []uint64, cands [][]globalAt, status []map[sdur.TxnID]uint64) {
	q := s.seqr
	nparts := len(sc)
	vec := slices.Clone(sc)
	for p := range nparts {
		vec[p] = max(vec[p], q.last.vec[p])
	}
	// Lower below every global in one component and not (yet) in another.
	for range 64 * nparts {
		changed := false
		for p := range nparts {
			for _, c := range cands[p] {
				if c.index > vec[p] {
					continue
				}
				for _, other := range c.parts {
					if int(other) == p || int(other) >= nparts {
						continue
					}
					if idx := status[other][c.id]; idx == 0 || idx > vec[other] {
						vec[p] = c.index - 1
						changed = true
						break
					}
				}
			}
		}
		if !changed {
			break
		}
	}
	for p := range nparts {
		if vec[p] < q.last.vec[p] {
			// Cannot happen (a global below the last vector is in all its partitions); refuse
			// to publish rather than break the chain.
			s.fail(errSequencer(p, vec[p], q.last.vec[p]))
			return
		}
	}
	q.rounds++
	q.inFlight = false
	if slices.Equal(vec, q.last.vec) {
		return
	}
	v := snapVector{seq: q.last.seq + 1, vec: vec}
	q.last = v
	s.stats.Vectors++
	for _, p := range s.parts {
		for _, r := range p.replicas {
			s.send(q.node, r, func(n *node) {
				if n.latest.seq < v.seq {
					n.latest = v
				}
			})
		}
	}
}

// maxRetainedGlobals bounds a replica's record of completed globals.
const maxRetainedGlobals = 1 << 16

func (c *client) snapshotRead(class string, body func(read func(keys []string, cb func(map[string][]int64))), done func()) {
	s := c.s
	rec := &txnRecord{ID: s.stats.nextTxn(), Process: c.id, Class: class, Region: c.region, Invoke: s.now, Reads: map[string][]int64{}, ReadOnly: true}
	nparts := len(s.parts)
	servers := make([]int, nparts)
	for p := range s.parts {
		servers[p] = c.server(s.parts[p])
	}
	gone := false
	s.at(s.now+s.opts.ClientTimeout, func() {
		if rec.Outcome == "" {
			gone = true
			c.suspect(servers...)
			rec.Outcome, rec.Reason, rec.Return = "indeterminate", "client timeout", s.now
			s.stats.record(rec)
			done()
		}
	})
	// Step 1: the newest vector among the nearest replicas.
	var best snapVector
	best.vec = make([]uint64, nparts)
	remaining := nparts
	for p := range nparts {
		s.clientSend(c.region, servers[p], func(n *node) {
			v := n.latest
			s.toClient(n.idx, c.region, func() {
				if gone {
					return
				}
				if v.seq > best.seq {
					best = v
				}
				remaining--
				if remaining == 0 {
					c.roRead(rec, servers, best, body, &gone, done)
				}
			})
		})
	}
}

// roRead is step 2: the reads, at the vector's components.
func (c *client) roRead(rec *txnRecord, servers []int, v snapVector, body func(read func([]string, func(map[string][]int64))), gone *bool, done func()) {
	s := c.s
	rec.Snapshots = v.vec
	outstanding := 0
	finished := false
	maybeDone := func() {
		if outstanding == 0 && !finished && !*gone {
			finished = true
			rec.Outcome, rec.Return = "ok", s.now
			s.stats.record(rec)
			done()
		}
	}
	read := func(keys []string, cb func(map[string][]int64)) {
		byPart := map[uint32][]string{}
		for _, k := range keys {
			byPart[keyPartition(k)] = append(byPart[keyPartition(k)], k)
		}
		for _, p := range sortedPartitions(byPart) {
			outstanding++
			p := p
			req := &readReq{keys: byPart[p], snapshot: v.vec[p], has: true}
			req.reply = func(values map[string][]int64, _ map[string]uint64, _ uint64) {
				s.toClient(servers[p], c.region, func() {
					if *gone {
						return
					}
					for k, val := range values {
						rec.Reads[k] = val
					}
					outstanding--
					cb(values)
					maybeDone()
				})
			}
			s.clientSend(c.region, servers[p], func(n *node) {
				if g := n.groups[p]; g != nil {
					s.serveRead(g, req)
				}
			})
		}
	}
	body(read)
	maybeDone()
}

func errSequencer(p int, got, last uint64) error {
	return fmt.Errorf("snapshot sequencer: partition %d's component would go back from %d to %d", p, last, got)
}
