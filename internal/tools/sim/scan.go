package sim

// Scans (Options.ScanFraction). A scan is meant to give, per key, the guarantee of a read at
// the same level, and no snapshot across keys (internal/replication/coord/scan.go), so the
// simulator records a scan that returned as one read per key of its range that it covered,
// all with the scan's times, node and process, as one group (check.Op.Group): the checkers
// judge each key's read as any other and order the group with the client's other operations,
// but not its keys among themselves. Covered: every key of [start, end) when the answer says
// there is no more (More false), else the keys up to the last one returned (the rest is
// unknown; no read is recorded for them). A key covered but not returned was read as absent. A
// scan that failed or timed out returned nothing and is recorded as nothing, as a read that
// did not return has no effect. What the answer itself must obey — keys ascending, inside the
// range, at most limit of them, keys of the key space, no tombstone — is checked here
// (checker "scan").
//
// Scans repair nothing, unlike QUORUM reads, so they are not sequentially consistent: a scan
// may return a write that timed out after reaching one replica and a later read miss it
// (docs/simulation.md, "Scans"). What they give is fresh reads (Options.FreshReads), which the
// scan runs of make sim-ci check.

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"meridian/internal/engine"
	"meridian/internal/hlc"
	"meridian/internal/replication/coord"
	"meridian/internal/storage"
	"meridian/internal/tools/check"
)

// CheckerScan names violations of a scan answer's own rules.
const CheckerScan = "scan"

// scanOp is a scan in flight.
type scanOp struct {
	start, end []byte // [start, end); end empty: to the keyspace's end
	limit      int
	invoke     int64 // virtual time
	nodeInvoke int64 // the coordinator's clock
	node       int
}

func (sc *scanOp) String() string {
	end := "end"
	if len(sc.end) > 0 {
		end = fmt.Sprintf("%q", sc.end)
	}
	return fmt.Sprintf("scan [%q, %s) limit %d", sc.start, end, sc.limit)
}

// ScanCounts are a run's scans: those invoked, those that returned (OK) and the reads
// recorded for them, and the quorum coordinators' split scans (coord.LargeReadStats):
// partitions read from two replicas at once, the pages of their forward and backward halves,
// and the halves given up (the other replica read on alone).
type ScanCounts struct {
	Scans, OK, KeyReads                              int
	Splits, PagesForward, PagesBackward, SplitsEnded int64
}

func (c *ScanCounts) add(o ScanCounts) {
	c.Scans += o.Scans
	c.OK += o.OK
	c.KeyReads += o.KeyReads
	c.Splits += o.Splits
	c.PagesForward += o.PagesForward
	c.PagesBackward += o.PagesBackward
	c.SplitsEnded += o.SplitsEnded
}

// keyRead is what a scan says of one key.
type keyRead struct {
	key     string
	found   bool
	value   string
	version hlc.Version
}

// sortedKeys is the key space ("k0".."k{Keys-1}") in byte order, the order scans return keys
// in ("k10" < "k2").
func sortedKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	slices.Sort(keys)
	return keys
}

// scanKeyReads converts a scan's answer (items, more) to the reads it stands for, one per key
// of keys (the key space, sorted) inside [start, end) that the answer covers (see the top of
// the file), in key order. It returns an error when the answer breaks a scan's rules: items
// out of order or repeated, outside the range, more than limit, a deleted record, or a key
// outside the key space.
func scanKeyReads(keys []string, start, end []byte, limit int, items []storage.Record, more bool) ([]keyRead, error) {
	inRange := func(k []byte) bool {
		return bytes.Compare(k, start) >= 0 && (len(end) == 0 || bytes.Compare(k, end) < 0)
	}
	if len(items) > limit {
		return nil, fmt.Errorf("returned %d items, over its limit %d", len(items), limit)
	}
	got := make(map[string]storage.Record, len(items))
	for i, it := range items {
		switch {
		case i > 0 && bytes.Compare(items[i-1].Key, it.Key) >= 0:
			return nil, fmt.Errorf("returned %q after %q: items must be in ascending key order, each once", it.Key, items[i-1].Key)
		case !inRange(it.Key):
			return nil, fmt.Errorf("returned %q, outside its range", it.Key)
		case it.Tombstone:
			return nil, fmt.Errorf("returned the tombstone of %q (a deleted key is not an item)", it.Key)
		}
		if _, ok := slices.BinarySearch(keys, string(it.Key)); !ok {
			return nil, fmt.Errorf("returned %q, a key nobody wrote", it.Key)
		}
		got[string(it.Key)] = it
	}
	var out []keyRead
	for _, k := range keys {
		if !inRange([]byte(k)) {
			continue
		}
		if more && (len(items) == 0 || k > string(items[len(items)-1].Key)) {
			break // past the last key returned: not covered
		}
		r := keyRead{key: k}
		if it, ok := got[k]; ok {
			r.found, r.value, r.version = true, string(it.Value), it.Version
		}
		out = append(out, r)
	}
	return out, nil
}

// scan starts client ci's scan through node: a random range of the key space from one of its
// keys (or the keyspace's start) to a later key (or the keyspace's end), with a random limit
// from 1 to one more than the keys.
func (s *simulator) scan(ci, node int) error {
	cl := s.clients[ci]
	if s.scanKeys == nil {
		s.scanKeys = sortedKeys(s.o.Keys)
	}
	keys := s.scanKeys
	n := len(keys)
	a := s.rng.IntN(n+1) - 1 // -1: from the keyspace's start
	b := a + 1 + s.rng.IntN(n-a)
	sc := &scanOp{start: []byte{}, limit: 1 + s.rng.IntN(n+1), invoke: s.now, node: node}
	if a >= 0 {
		sc.start = []byte(keys[a])
	}
	if b < n {
		sc.end = []byte(keys[b])
	}
	s.report.Scans.Scans++
	nd := s.nodes[node]
	if !nd.up {
		// Connection refused: the client moves to another node.
		s.finishScan(ci, sc, check.Failed, engine.Result{}, 0)
		cl.home = s.otherNodeIn(cl.region, cl.home)
		return nil
	}
	req := engine.Request{Op: engine.OpScan, Keyspace: "sim", Start: sc.start, End: sc.end, Limit: sc.limit, Level: s.readLvl}
	if !s.o.NoSessions {
		req.MinVersion = cl.session
	}
	s.nextReq++
	req.ID = s.nextReq
	local := s.localTime(node)
	req.Deadline = local.Add(s.o.RequestTimeout)
	sc.nodeInvoke = local.UnixNano() - epoch
	cl.inflight = &inflightOp{idx: -1, req: req.ID, node: node, scan: sc}
	s.reqs[req.ID] = ci
	s.trace("invoke c%d %s via %s", ci, sc, nd.cfg.Name)
	s.schedule(event{at: s.now + int64(s.o.RequestTimeout) + int64(500*time.Millisecond), kind: evClientTimeout, cli: ci, req: req.ID})
	nd.host.Propose(local, req)
	return s.processReady(node)
}

// finishScan ends client ci's scan sc: when it returned (OK), its reads go into the history
// (nodeReturn is the coordinator's clock then).
func (s *simulator) finishScan(ci int, sc *scanOp, outcome check.Outcome, r engine.Result, nodeReturn int64) {
	cl := s.clients[ci]
	summary := outcome.String()
	if outcome == check.OK {
		s.report.Scans.OK++
		reads, err := scanKeyReads(s.scanKeys, sc.start, sc.end, sc.limit, r.Items, r.More)
		if err != nil && s.scanBroken == nil {
			s.scanBroken = &check.Violation{Checker: CheckerScan, Reason: fmt.Sprintf("at %.3fms: c%d's %s via %s %v",
				float64(s.now)/1e6, ci, sc, s.nodes[sc.node].cfg.Name, err)}
		}
		s.scanGroups++
		var b strings.Builder
		for _, kr := range reads {
			op := check.Op{ID: len(s.history), Process: cl.proc, Kind: check.Read, Key: kr.key, Found: kr.found, Value: kr.value,
				Version: kr.version, Outcome: check.OK, Invoke: sc.invoke, Return: s.now, NodeInvoke: sc.nodeInvoke, NodeReturn: nodeReturn,
				Node: s.nodes[sc.node].cfg.Name, Group: s.scanGroups}
			s.history = append(s.history, op)
			if cl.session.Less(kr.version) {
				// As a session's read: the client has seen this version.
				cl.session = kr.version
			}
			if kr.found {
				fmt.Fprintf(&b, " %s=%s", kr.key, kr.value)
			} else {
				fmt.Fprintf(&b, " %s=absent", kr.key)
			}
		}
		s.report.Scans.KeyReads += len(reads)
		summary = fmt.Sprintf("%d items, more=%v, reads:%s", len(r.Items), r.More, b.String())
	}
	s.clientReturned(ci, outcome, fmt.Sprintf("%s -> %s", sc, summary))
}

// countScanStats adds the split-scan counters of host's quorum-family engines (they live as
// long as the node's incarnation: counted at its crash and at the end).
func (s *simulator) countScanStats(host *engine.Host) {
	if host == nil {
		return
	}
	_, engines := host.Engines()
	for _, e := range engines {
		lr, ok := e.(interface{ LargeReadCounters() *coord.LargeReadStats })
		if !ok {
			continue
		}
		st := lr.LargeReadCounters()
		s.report.Scans.Splits += st.ScanSplits.Load()
		s.report.Scans.PagesForward += st.ScanPagesForward.Load()
		s.report.Scans.PagesBackward += st.ScanPagesBackward.Load()
		s.report.Scans.SplitsEnded += st.ScanSplitFallbacks.Load()
	}
}
