package coord

import (
	"time"

	"meridian/internal/hlc"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// Scans repair what they read, as reads do (blocking read repair, read.go). A round whose
// quorum needs more than one replica's answer merges the replies key by key; a key whose
// newest version is not yet held by a quorum among the replicas that answered — one replica
// answered with an older version, or with none — is written to those replicas, and the round's
// page counts only once a quorum holds every such key. Without it a scan at QUORUM could
// return a write that reached one replica (a write that timed out) and a later read at QUORUM
// miss it, which the simulator's sequential-consistency check found (docs/simulation.md,
// "Scans"): a scan now gives, key by key, the guarantee of a read at the same level.
//
// Every reply covers every merged key: the merge keeps only keys up to the last key of the
// reply that got least far among those cut short, so a key a reply lacks is a key that
// replica does not hold. Repairs are ordinary replica writes (newest version wins), so a late
// or repeated one is harmless.

// mergedPage is a round's replies merged (mergeScanReplies).
type mergedPage struct {
	recs      []storage.Record
	bound     []byte
	truncated bool
}

// scanRepair is a round's repair in progress.
type scanRepair struct {
	// holders: per key still short of a quorum, the replicas known to hold its newest
	// version.
	holders map[string]map[uint32]bool
	writes  []uint64 // the repair writes' request IDs
}

// scanRepairWrite is one repair write in flight: of which round, which key, to which replica.
type scanRepairWrite struct {
	round uint64
	key   string
	node  uint32
}

// startScanRepair writes the keys of rd's merged page that a quorum of the replicas that
// answered does not hold yet to those that lack them; it reports whether the round must wait
// for their acknowledgements.
func (c *Core) startScanRepair(now time.Time, id uint64, rd *scanRound) bool {
	m := rd.merged
	if c.Cfg.Mutation == MutationScanNoRepair {
		return false // broken on purpose (scanmutations.go)
	}
	if len(m.recs) == 0 || len(rd.replies) < 2 {
		return false // one reply is the newest by definition: nothing to compare
	}
	have := map[uint32]map[string]hlc.Version{}
	for n, rep := range rd.replies {
		if rep == nil {
			continue
		}
		vs := make(map[string]hlc.Version, len(rep.Records))
		for _, pr := range rep.Records {
			if rec, err := wire.RecordFromPB(pr); err == nil {
				vs[string(rec.Key)] = rec.Version
			}
		}
		have[n] = vs
	}
	var rr *scanRepair
	for _, rec := range m.recs {
		key := string(rec.Key)
		holders := map[uint32]bool{}
		var stale []uint32
		for _, n := range rd.q.union { // node order: the output is deterministic
			vs, answered := have[n]
			if !answered {
				continue
			}
			if v, ok := vs[key]; ok && v == rec.Version {
				holders[n] = true
			} else {
				stale = append(stale, n)
			}
		}
		held := func(n uint32) bool { return holders[n] }
		if rd.q.satisfied(held) {
			continue
		}
		pb := wire.RecordToPB(rec)
		for _, n := range stale {
			c.lr.stats.ScanRepairs.Add(1)
			if n == c.Cfg.NodeID {
				c.ApplyLocal(now, rec, false)
				holders[n] = true
				continue
			}
			if rr == nil {
				rr = &scanRepair{holders: map[string]map[uint32]bool{}}
			}
			wid := c.newPeerReq()
			c.scanRepairWrites[wid] = scanRepairWrite{round: id, key: key, node: n}
			rr.writes = append(rr.writes, wid)
			c.Send(n, &peerpb.Envelope{Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{RequestId: wid, Record: pb, MoveEpoch: rd.part.p.MoveEpoch}}})
		}
		if !rd.q.satisfied(held) && rr != nil {
			rr.holders[key] = holders
		}
	}
	if rr == nil || len(rr.holders) == 0 {
		if rr != nil {
			c.endScanRepair(rr)
		}
		return false
	}
	rd.repair = rr
	return true
}

// scanRepairAcked takes a replica's acknowledgement of repair write wid; once a quorum holds
// every repaired key, the round's page counts.
func (c *Core) scanRepairAcked(now time.Time, wid uint64, from uint32) {
	w, ok := c.scanRepairWrites[wid]
	if !ok || w.node != from {
		return
	}
	delete(c.scanRepairWrites, wid)
	rd, ok := c.scans[w.round]
	if !ok || rd.repair == nil {
		return
	}
	holders, waiting := rd.repair.holders[w.key]
	if !waiting {
		return
	}
	holders[from] = true
	if !rd.q.satisfied(func(n uint32) bool { return holders[n] }) {
		return
	}
	delete(rd.repair.holders, w.key)
	if len(rd.repair.holders) > 0 {
		return
	}
	c.endScanRepair(rd.repair)
	rd.repair = nil
	if c.completeScanRound(now, w.round, rd) {
		c.advanceScan(now, rd.op)
	}
}

// endScanRepair forgets rr's writes still in flight (their acknowledgements are ignored).
func (c *Core) endScanRepair(rr *scanRepair) {
	for _, wid := range rr.writes {
		delete(c.scanRepairWrites, wid)
	}
	rr.writes = nil
}
