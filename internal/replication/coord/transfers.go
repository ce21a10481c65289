package coord

// Flow tracking without a programmable network (thesis 3.5.2, the endpoint-only Flowserver).
// Mayflower's Flowserver polls switch counters every second; Meridian has no switches to ask,
// so every node measures the transfers it receives — large reads' chunks, replica moves'
// snapshot pulls and scans' streams of pages — and, every report interval, tells the other nodes each one's source, bytes
// left and measured rate. A coordinator choosing where to fetch a large value builds the
// model from them (mayflowerPlan): a link per node interface and direction and per ordered
// region pair, the reported flows on their paths, and costs each replica with Eq. 3.1–3.2.
//
// What this cannot see: traffic that is not a Meridian transfer (other tenants, clients'
// requests and replies). The flow-level testbed measures how far that leaves the choice from
// one made with switch counters (meridian bench mayflower --endpoint-only).

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"meridian/internal/config"
	"meridian/internal/mayflower"
	"meridian/internal/placement"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// largeReads is the coordinator's state for large reads: parsed options, the dynamic
// snitch's scores, the hedge delay's samples, the counters and the other nodes' transfer
// reports.
type largeReads struct {
	opts map[string]config.LargeReadOptions // by keyspace; cleared when the placement changes
	// mayflowerUsed caches whether a keyspace of this core reads with mayflower (nil: not
	// computed for this placement).
	mayflowerUsed *bool
	snitch        map[uint32]snitchScore
	perByte       []float64 // seconds per byte of the latest fetches (≤ hedgeSamples)
	stats         LargeReadStats
	served        []servedEntry // values served in chunks, least recent first (servedValue)
	// reported are the other nodes' latest reports, by node.
	reported     map[uint32]transferReport
	nextReport   time.Time
	reportedLast bool // the last report this node sent listed transfers
}

type transferReport struct {
	at        time.Time
	interval  time.Duration
	transfers []*peerpb.Transfer
}

// defaultElephantBytes is the remaining size the model assumes for a flow whose size is not
// known (3.2.2, "Unknown flow size": the average elephant flow).
const defaultElephantBytes = 64 << 20

func (c *Core) reportInterval() time.Duration {
	if d := c.Cfg.Network.ReportInterval; d > 0 {
		return d
	}
	return time.Second
}

// mayflowerInUse reports whether a keyspace of this core reads with the mayflower selector:
// only then are transfers reported.
func (c *Core) mayflowerInUse() bool {
	if c.lr.mayflowerUsed != nil {
		return *c.lr.mayflowerUsed
	}
	used := false
	if c.Pmap != nil {
		for _, ks := range c.Pmap.Keyspaces {
			if c.Owns(ks) && c.largeReadOptions(ks).Selector == config.ReadSelectorMayflower {
				used = true
				break
			}
		}
	}
	c.lr.mayflowerUsed = &used
	return used
}

// tickTransfers samples the rates of the transfers this node receives and, every report
// interval, reports them.
func (c *Core) tickTransfers(now time.Time) {
	if now.Before(c.lr.nextReport) {
		return
	}
	c.lr.nextReport = now.Add(c.reportInterval())
	for _, f := range c.fetches {
		for _, s := range f.sources {
			s.rate, s.received, s.sampleAt = sampleRate(now, s.rate, s.received, s.sampleAt)
		}
	}
	for _, in := range c.mv.in {
		if in.phase == phasePull {
			in.pullRate, in.pullBytes, in.pullSampleAt = sampleRate(now, in.pullRate, in.pullBytes, in.pullSampleAt)
		}
	}
	for _, rd := range c.scans {
		if rd.stream {
			rd.rate, rd.received, rd.sampleAt = sampleRate(now, rd.rate, rd.received, rd.sampleAt)
		}
	}
	if !c.mayflowerInUse() {
		return
	}
	own := c.ownTransfers()
	if len(own) == 0 && !c.lr.reportedLast {
		return
	}
	c.lr.reportedLast = len(own) > 0
	for _, n := range c.Cfg.Nodes {
		if n.ID == c.Cfg.NodeID || !c.Alive(n.ID) {
			continue
		}
		c.Send(n.ID, &peerpb.Envelope{Msg: &peerpb.Envelope_TransferReport{TransferReport: &peerpb.TransferReport{
			Transfers: own, IntervalMs: uint32(c.reportInterval().Milliseconds()),
		}}})
	}
}

// sampleRate folds the bytes received since at into a rate (bytes/s): the first measurement
// replaces the estimate, later ones are averaged with it (weight ½).
func sampleRate(now time.Time, rate float64, received int64, at time.Time) (float64, int64, time.Time) {
	d := now.Sub(at).Seconds()
	if at.IsZero() {
		return rate, 0, now
	}
	if d <= 0 {
		return rate, received, at
	}
	measured := float64(received) / d
	if rate <= 0 {
		return measured, 0, now
	}
	return (rate + measured) / 2, 0, now
}

// ownTransfers lists the transfers this node receives, the largest remaining first (at most
// wire.MaxReportedTransfers).
func (c *Core) ownTransfers() []*peerpb.Transfer {
	var out []*peerpb.Transfer
	for _, f := range c.fetches {
		for _, s := range f.sources {
			if s.failed {
				continue
			}
			out = append(out, &peerpb.Transfer{Source: s.node, RemainingBytes: uint64(f.remaining(s)), RemainingKnown: true, RateBytesPerSec: s.rate})
		}
	}
	for _, in := range c.mv.in {
		if in.phase != phasePull {
			continue
		}
		left := in.size - in.next
		for range in.outstanding {
			left += int64(c.Cfg.ChunkBytes())
		}
		out = append(out, &peerpb.Transfer{Source: in.source, RemainingBytes: uint64(max(left, 0)), RemainingKnown: true, RateBytesPerSec: in.pullRate})
	}
	for _, rd := range c.scans {
		if !rd.stream {
			continue // a page at a time: short transfers, each within a round trip
		}
		ks, _ := c.Pmap.Keyspace(rd.op.req.Keyspace)
		out = append(out, &peerpb.Transfer{Source: rd.node, RemainingBytes: uint64(rd.streamRemaining(c.scanPageBytes(ks))), RemainingKnown: true, RateBytesPerSec: rd.rate})
	}
	slices.SortFunc(out, func(a, b *peerpb.Transfer) int {
		// A total order (the transfers come from maps): equal ones are alike.
		if a.RemainingBytes != b.RemainingBytes {
			return cmp.Compare(b.RemainingBytes, a.RemainingBytes)
		}
		if a.Source != b.Source {
			return cmp.Compare(a.Source, b.Source)
		}
		return cmp.Compare(a.RateBytesPerSec, b.RateBytesPerSec)
	})
	if len(out) > wire.MaxReportedTransfers {
		out = out[:wire.MaxReportedTransfers]
	}
	return out
}

func (c *Core) handleTransferReport(now time.Time, from uint32, m *peerpb.TransferReport) {
	if c.lr.reported == nil {
		c.lr.reported = map[uint32]transferReport{}
	}
	if len(m.Transfers) == 0 {
		delete(c.lr.reported, from)
		return
	}
	c.lr.reported[from] = transferReport{at: now, interval: time.Duration(m.IntervalMs) * time.Millisecond, transfers: m.Transfers}
}

// Link names of the model: a node's interface each way, and the link between two regions.
func upLink(n uint32) mayflower.LinkID {
	return mayflower.LinkID("up:" + strconv.FormatUint(uint64(n), 10))
}
func downLink(n uint32) mayflower.LinkID {
	return mayflower.LinkID("down:" + strconv.FormatUint(uint64(n), 10))
}
func wanLink(a, b string) mayflower.LinkID {
	return mayflower.LinkID("wan:" + a + ">" + b)
}

// flowPath is the links a transfer from src to dst crosses.
func (c *Core) flowPath(src, dst uint32) []mayflower.LinkID {
	path := []mayflower.LinkID{upLink(src)}
	ra, rb := c.Region[src], c.Region[dst]
	if c.Cfg.Network.WANBytesPerSec > 0 && ra != rb {
		path = append(path, wanLink(ra, rb))
	}
	return append(path, downLink(dst))
}

// candidatesFrom lists the paths from nodes to this node for the model: a part from a replica
// across the WAN starts a round trip later (its first chunk), which counts as latency.
func (c *Core) candidatesFrom(nodes []uint32) []mayflower.Candidate {
	out := make([]mayflower.Candidate, len(nodes))
	for i, n := range nodes {
		out[i] = mayflower.Candidate{Replica: fmt.Sprint(n), Path: c.flowPath(n, c.Cfg.NodeID), Latency: c.RTT(n).Seconds()}
	}
	return out
}

// planPart is a source the plan reads from and its estimated rate.
type planPart struct {
	node uint32
	rate float64
}

// transferModel builds the Flowserver's model: the links of every member and region pair,
// and every transfer in flight this node knows of (its own, and the others' reports).
func (c *Core) transferModel(now time.Time) (*mayflower.Model, error) {
	bw := c.Cfg.Network.NodeBytesPerSec
	m := mayflower.NewModel()
	m.DefaultRemaining = defaultElephantBytes
	regions := map[string]bool{}
	for _, n := range c.Cfg.Nodes {
		if err := m.SetLink(upLink(n.ID), bw); err != nil {
			return nil, err
		}
		if err := m.SetLink(downLink(n.ID), bw); err != nil {
			return nil, err
		}
		regions[n.Region] = true
	}
	if wan := c.Cfg.Network.WANBytesPerSec; wan > 0 {
		for a := range regions {
			for b := range regions {
				if a != b {
					if err := m.SetLink(wanLink(a, b), wan); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	var id mayflower.FlowID
	add := func(src, dst uint32, t *peerpb.Transfer) {
		if _, ok := c.Region[src]; !ok || src == dst || !(t.RateBytesPerSec > 0) {
			return // unknown node, or nothing measured yet: no load to count
		}
		id++
		// A flow the model cannot take (too many on a link) is left out: the choice is then
		// made on the others, as with a switch counter that was not read.
		_ = m.AddFlow(mayflower.Flow{ID: id, Path: c.flowPath(src, dst), Rate: t.RateBytesPerSec,
			Remaining: float64(t.RemainingBytes), RemainingKnown: t.RemainingKnown})
	}
	for _, t := range c.ownTransfers() {
		add(t.Source, c.Cfg.NodeID, t)
	}
	nodes := make([]uint32, 0, len(c.lr.reported))
	for n := range c.lr.reported {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		rep := c.lr.reported[n]
		if now.Sub(rep.at) > 3*rep.interval {
			delete(c.lr.reported, n)
			continue
		}
		for _, t := range rep.transfers {
			add(t.Source, n, t)
		}
	}
	return m, nil
}

// mayflowerPlan chooses the sources of a transfer of size bytes among cands by Mayflower's
// cost (thesis 3.2.2 Eq. 3.1–3.2; 3.2.3 for the split, under the keyspace's mayflower_split
// rule split): one part, or two. ok is false when the network is not configured. Large reads
// plan a value's fetch with it, split scans a page (scan.go).
func (c *Core) mayflowerPlan(now time.Time, split string, size float64, cands []uint32) ([]planPart, bool) {
	if c.Cfg.Network.NodeBytesPerSec <= 0 {
		return nil, false
	}
	m, err := c.transferModel(now)
	if err != nil {
		return nil, false
	}
	mc := c.candidatesFrom(cands)
	rule := mayflower.SplitMakespan
	switch split {
	case "never":
		rule = mayflower.SplitNever
	case "literal":
		rule = mayflower.SplitLiteral
	}
	plan, err := m.Plan(mc, size, rule)
	if err != nil {
		return nil, false
	}
	out := make([]planPart, 0, len(plan.Parts))
	for _, p := range plan.Parts {
		out = append(out, planPart{node: cands[p.Candidate], rate: p.Rate})
	}
	return out, true
}

// moveSource is the old replica a new replica pulls its snapshot from: in a keyspace that reads
// with mayflower (and a configured network), the live old replica of least cost for an
// elephant of unknown size on the transfer model (every old replica holds the data; the
// catch-up rounds of all of them cover what the source missed); else the one the move names.
func (c *Core) moveSource(now time.Time, in *inMove) uint32 {
	ks, ok := c.Pmap.Keyspace(in.span.Keyspace)
	if !ok || c.largeReadOptions(ks).Selector != config.ReadSelectorMayflower || c.Cfg.Network.NodeBytesPerSec <= 0 {
		return in.named
	}
	var cands []uint32
	for _, n := range c.ByDistance(in.old) {
		if n != c.Cfg.NodeID && c.Alive(n) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return in.named
	}
	m, err := c.transferModel(now)
	if err != nil {
		return in.named
	}
	mc := c.candidatesFrom(cands)
	ch, err := m.Choose(mc, defaultElephantBytes)
	if err != nil {
		return in.named
	}
	return cands[ch.Best]
}

// transferOrder orders nodes (nearest first, live) for a transfer of about size bytes by ks's
// read selector: mayflower by cost on the transfer model (Eq. 3.1–3.2), snitch by the dynamic
// snitch's choice first; nearest and hedged keep the distance order (hedged scans are the
// speculative retry). This node, when listed, stays first: reading its own storage costs no
// link.
func (c *Core) transferOrder(now time.Time, ks *placement.Keyspace, nodes []uint32, size float64) []uint32 {
	if len(nodes) < 2 {
		return nodes
	}
	var head, rest []uint32
	for _, n := range nodes {
		if n == c.Cfg.NodeID {
			head = append(head, n)
		} else {
			rest = append(rest, n)
		}
	}
	if len(rest) < 2 {
		return nodes
	}
	switch c.largeReadOptions(ks).Selector {
	case config.ReadSelectorSnitch:
		best := c.snitchPick(now, rest)
		out := append(head, best)
		for _, n := range rest {
			if n != best {
				out = append(out, n)
			}
		}
		return out
	case config.ReadSelectorMayflower:
		if c.Cfg.Network.NodeBytesPerSec <= 0 {
			return nodes
		}
		m, err := c.transferModel(now)
		if err != nil {
			return nodes
		}
		ch, err := m.Choose(c.candidatesFrom(rest), size)
		if err != nil {
			return nodes
		}
		cost := map[uint32]float64{}
		for i, n := range rest {
			cost[n] = ch.Estimates[i].Cost
		}
		slices.SortStableFunc(rest, func(a, b uint32) int { return cmp.Compare(cost[a], cost[b]) })
		return append(head, rest...)
	}
	return nodes
}
