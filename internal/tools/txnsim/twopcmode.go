package txnsim

import (
	"fmt"

	"meridian/internal/sdur"
	"meridian/internal/twopc"
)

// twopcMode is the two-phase commit baseline (internal/twopc) on the simulated cluster.
type twopcMode struct{}

func init() { modes["2pc"] = twopcMode{} }

func (twopcMode) mutations() map[string]string { return twopc.Mutations }

type twopcReplica struct{ rep *twopc.Replica }

func (twopcMode) newReplica(s *cluster, p *partition) (replica, error) {
	rep, err := twopc.NewReplica(p.id, twopc.Options{DecisionTimeout: s.opts.RecoveryTimeout, Mutation: s.opts.Mutation})
	if err != nil {
		return nil, err
	}
	return &twopcReplica{rep: rep}, nil
}

func (twopcMode) start(*cluster) {}

func (twopcMode) restore(s *cluster, p *partition, saved any) (replica, error) {
	data, ok := saved.([]byte)
	if !ok {
		return nil, fmt.Errorf("partition %d: saved state of type %T is not 2PC's", p.id, saved)
	}
	rep, err := twopc.Restore(data, twopc.Options{DecisionTimeout: s.opts.RecoveryTimeout, Mutation: s.opts.Mutation}, s.clock())
	if err != nil {
		return nil, err
	}
	return &twopcReplica{rep: rep}, nil
}

func (r *twopcReplica) save() (any, bool) {
	data, err := r.rep.Snapshot()
	return data, err == nil
}

func (r *twopcReplica) deliver(s *cluster, n *node, g *group, index uint64, payload any) {
	e, ok := payload.(twopc.Entry)
	if !ok {
		s.fail(errPayload(n, g, payload))
		return
	}
	r.rep.Deliver(s.clock(), index, e)
}

func (r *twopcReplica) tick(s *cluster, n *node, g *group) { r.rep.Tick(s.clock()) }
func (r *twopcReplica) setLeader(l bool)                   { r.rep.SetLeader(l) }
func (r *twopcReplica) setReplay(i uint64)                 { r.rep.SetReplay(i) }
func (r *twopcReplica) readVersion() uint64                { return r.rep.Version() }
func (r *twopcReplica) pendingCount() int                  { return r.rep.PendingCount() }

// submit prepares the transaction in every partition at once; the coordinator is the first
// partition (the client's home partition comes first when it takes part).
func (twopcMode) submit(s *cluster, n *node, id sdur.TxnID, tparts []*txnPart) {
	coord := tparts[0].partition
	if home := n.groups; len(home) > 0 {
		for _, tp := range tparts {
			if _, ok := n.groups[tp.partition]; ok {
				coord = tp.partition
				break
			}
		}
	}
	entries := make([]twopc.Entry, 0, len(tparts))
	for _, tp := range tparts {
		p := &twopc.Part{ID: twopc.TxnID(id), Partition: tp.partition, Partitions: tp.partitions, Coordinator: coord, Submitter: n.id}
		for i, k := range tp.reads {
			p.Reads = append(p.Reads, twopc.Read{Key: k, Version: tp.readVersions[i]})
		}
		for _, w := range tp.writes {
			p.Writes = append(p.Writes, twopc.Write{Key: w.Key, Value: w.Value, Delete: w.Delete})
		}
		entries = append(entries, twopc.Entry{Kind: twopc.EntryPrepare, Part: p})
	}
	send := func() {
		for _, e := range entries {
			s.propose(n, e.Part.Partition, e)
		}
	}
	send()
	n.submitted[id].resend = send
}

// readOnly: 2PC has no snapshots; a read-only transaction is a transaction without writes,
// validated like the others (it can abort).
func (twopcMode) readOnly(c *client, class string, body func(read func(keys []string, cb func(map[string][]int64))), done func()) {
	c.validatedRead(class, body, done)
}

func (r *twopcReplica) drain(s *cluster, n *node, g *group) {
	for range 1000 {
		if !r.rep.HasReady() {
			return
		}
		rd := r.rep.Ready()
		for _, a := range rd.Applies {
			s.applyWrites(g, a.Version, sdur.TxnID(a.Txn), len(a.Writes), func(i int) (string, []byte, bool) {
				return a.Writes[i].Key, a.Writes[i].Value, a.Writes[i].Delete
			})
		}
		for _, o := range rd.Outcomes {
			res := txnResult{id: sdur.TxnID(o.Txn), committed: o.Committed, reason: o.Reason, key: o.Key}
			if sub := s.nodeByID(o.Submitter); sub >= 0 {
				s.send(n.idx, sub, func(dst *node) { s.outcome(dst, res) })
			}
		}
		for _, v := range rd.Votes {
			v := v
			s.stats.VotesSent++
			for _, rr := range s.parts[v.Coordinator].replicas {
				s.send(n.idx, rr, func(dst *node) {
					if dg := dst.groups[v.Coordinator]; dg != nil {
						dg.rep.(*twopcReplica).rep.Vote(s.clock(), v)
					}
				})
			}
		}
		for _, d := range rd.Decides {
			d := d
			for _, pid := range d.Partitions {
				if pid == g.part.id || int(pid) >= len(s.parts) {
					continue
				}
				for _, rr := range s.parts[pid].replicas {
					s.send(n.idx, rr, func(dst *node) {
						if dg := dst.groups[pid]; dg != nil {
							dg.rep.(*twopcReplica).rep.Decided(s.clock(), d)
						}
					})
				}
			}
		}
		for _, e := range rd.Proposals {
			s.propose(n, g.part.id, e)
		}
		for _, sr := range rd.StatusRequests {
			sr := sr
			for _, rr := range s.parts[sr.Coordinator].replicas {
				s.send(n.idx, rr, func(dst *node) {
					if dg := dst.groups[sr.Coordinator]; dg != nil {
						dg.rep.(*twopcReplica).rep.Status(s.clock(), sr)
					}
				})
			}
		}
	}
}

func errPayload(n *node, g *group, payload any) error {
	return fmt.Errorf("node %d partition %d: log entry of type %T is not this mode's", n.id, g.part.id, payload)
}
