package txnsim

import (
	"fmt"
	"math/rand/v2"
	"meridian/internal/tools/tpcc"
	"slices"
	"time"

	"meridian/internal/sdur"
)

// client is a closed-loop client in a region whose home partition is the one its region's
// preferred server leads (paper VI-A: clients next to their partition's preferred server).
type client struct {
	s         *cluster
	id        int
	region    string
	home      uint32
	submitter int // the preferred server near the client (Algorithm 1, line 18)
	rng       *rand.Rand
	running   bool
	// avoid: nodes the client suspects (a transaction through them timed out), until when.
	avoid map[int]time.Duration
}

// server returns the replica of p the client uses: the nearest it does not suspect.
func (c *client) server(p *partition) int {
	s := c.s
	best, bestD := -1, time.Duration(1<<62)
	for _, r := range p.replicas {
		if until, ok := c.avoid[r]; ok && s.now < until {
			continue
		}
		d := s.topo.OneWay(c.region, s.nodes[r].region)
		if d < bestD || (d == bestD && r == p.preferred) {
			best, bestD = r, d
		}
	}
	if best < 0 {
		return s.nearestReplicaTo(c.region, p)
	}
	return best
}

// submitterNode is the client's preferred server (Algorithm 1, line 18), or, while the client
// suspects it, the nearest other replica of its home partition.
func (c *client) submitterNode() int {
	if until, ok := c.avoid[c.submitter]; !ok || c.s.now >= until {
		return c.submitter
	}
	return c.server(c.s.parts[c.home])
}

// suspect marks the nodes a timed-out transaction went through.
func (c *client) suspect(nodes ...int) {
	if c.avoid == nil {
		c.avoid = map[int]time.Duration{}
	}
	for _, n := range nodes {
		c.avoid[n] = c.s.now + 5*time.Second
	}
}

// op is one key a transaction touches.
type op struct {
	key         string
	write       bool
	appendValue int64
	// names: the appended element stands for this user (a follow's producer entry).
	names *userRef
}

// txnRecord is one transaction of the history.
type txnRecord struct {
	ID       int
	Process  int
	Class    string
	Region   string
	Invoke   time.Duration
	Return   time.Duration
	Outcome  string // "ok", "aborted", "indeterminate"
	Reason   string
	Key      string
	Reads    map[string][]int64
	Appends  []appendOp
	ReadOnly bool
	Txn      sdur.TxnID
	// Snapshots are a read-only transaction's snapshot per partition.
	Snapshots []uint64
}

type appendOp struct {
	Key   string
	Value int64
}

// clientSend delivers fn at node `to` after the client's one-way delay (clients' links are
// reliable; a crashed node loses what it held).
func (s *cluster) clientSend(region string, to int, fn func(n *node)) {
	b := s.nodes[to]
	d := s.topo.OneWay(region, b.region) + s.opts.IntraDelay
	epoch := b.epoch
	s.after(d, func() {
		if !b.up || b.epoch != epoch {
			return
		}
		fn(b)
		s.flush(b)
	})
}

// toClient delivers fn at the client after the one-way delay from node `from`.
func (s *cluster) toClient(from int, region string, fn func()) {
	a := s.nodes[from]
	s.after(s.topo.OneWay(a.region, region)+s.opts.IntraDelay, fn)
}

// start runs the client's loop until the end of the measured period.
func (c *client) start(end time.Duration) {
	c.running = true
	var next func()
	next = func() {
		if c.s.now >= end || c.s.err != nil {
			c.running = false
			return
		}
		c.one(func() {
			if c.s.opts.ThinkTime > 0 {
				c.s.after(c.s.opts.ThinkTime, next)
				return
			}
			next()
		})
	}
	c.s.after(time.Duration(c.rng.IntN(1000))*time.Microsecond, next)
}

// one runs one transaction and calls done when the client knows its outcome.
func (c *client) one(done func()) {
	s := c.s
	switch s.opts.Workload {
	case Micro:
		global := c.rng.Float64()*100 < s.opts.GlobalPct
		keys := []string{c.itemKey(c.home), c.itemKey(c.home)}
		for keys[1] == keys[0] {
			keys[1] = c.itemKey(c.home)
		}
		class := "local"
		if global {
			keys[1] = c.itemKey(c.other())
			class = "global"
		}
		c.update(class, []op{{key: keys[0], write: true}, {key: keys[1], write: true}}, done)
	case Check:
		if c.rng.Float64()*100 < s.opts.ReadOnlyPct {
			n := 2 + c.rng.IntN(2)
			keys := make([]string, 0, n)
			for len(keys) < n {
				p := c.home
				if c.rng.IntN(2) == 0 {
					p = c.other()
				}
				if k := c.itemKey(p); !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
			s.mode.readOnly(c, "readonly", func(read func([]string, func(map[string][]int64))) {
				read(keys, func(map[string][]int64) {})
			}, done)
			return
		}
		global := c.rng.Float64()*100 < s.opts.GlobalPct
		if global && c.rng.IntN(2) == 0 {
			// The shape of the paper's footnote 2 (write skew across partitions): read a key
			// of each partition, write one of them. Only the global test's both directions
			// keep two such transactions, delivered in opposite orders, from both committing.
			ops := []op{{key: c.itemKey(c.home)}, {key: c.itemKey(c.other())}}
			ops[c.rng.IntN(2)].write = true
			c.update("global", ops, done)
			return
		}
		n := 2 + c.rng.IntN(2)
		ops := make([]op, 0, n)
		for len(ops) < n {
			p := c.home
			if global && len(ops) > 0 && c.rng.IntN(2) == 0 {
				p = c.other()
			}
			k := c.itemKey(p)
			if slices.ContainsFunc(ops, func(o op) bool { return o.key == k }) {
				continue
			}
			ops = append(ops, op{key: k})
		}
		if global && !slices.ContainsFunc(ops, func(o op) bool { return keyPartition(o.key) != c.home }) {
			ops[len(ops)-1].key = c.itemKey(c.other())
		}
		writes := 1 + c.rng.IntN(2)
		for _, i := range c.rng.Perm(len(ops))[:writes] {
			ops[i].write = true
		}
		class := "local"
		if global {
			class = "global"
		}
		c.update(class, ops, done)
	case Social:
		c.social(done)
	case TPCC:
		c.tpcc(done)
	}
}

// tpcc runs a TPC-C-like transaction: its reads and read-modify-writes (appends here: the
// histories stay checkable) on the partitions of their warehouses.
func (c *client) tpcc(done func()) {
	s := c.s
	if s.tpcc == nil {
		s.tpcc = &tpcc.Gen{Regions: len(s.parts), PerRegion: tpccWarehousesPerPartition}
	}
	t := s.tpcc.Next(int(c.home), c.id, c.rng.IntN)
	part := func(k string) uint32 {
		if w := tpcc.Warehouse(k); w >= 0 {
			return uint32(w / tpccWarehousesPerPartition)
		}
		return c.home // the item table: read where the client is
	}
	var ops []op
	seen := map[string]bool{}
	add := func(k string, write bool) {
		name := keyName(part(k), k)
		if seen[name] {
			return
		}
		seen[name] = true
		ops = append(ops, op{key: name, write: write})
	}
	for _, k := range t.Reads {
		add(k, false)
	}
	for _, a := range t.Adds {
		add(a.Key, true)
	}
	for _, k := range t.Inserts {
		add(k, true)
	}
	class := t.Kind
	if slices.ContainsFunc(ops, func(o op) bool { return keyPartition(o.key) != c.home }) {
		class += "-global"
	}
	c.update(class, ops, done)
}

// tpccWarehousesPerPartition: TPC-C warehouses per partition (each partition's home region
// holds two).
const tpccWarehousesPerPartition = 2

func (c *client) itemKey(p uint32) string {
	return keyName(p, fmt.Sprintf("k%d", c.rng.IntN(c.s.opts.ItemsPerPartition)))
}

// other returns a partition other than the client's home.
func (c *client) other() uint32 {
	n := uint32(len(c.s.parts))
	return (c.home + 1 + uint32(c.rng.IntN(int(n-1)))) % n
}

// update runs a read-write transaction: reads of every key at its partition's nearest replica
// (one request per partition, so that its reads share a snapshot: Algorithm 1), then appends
// to the written keys (the value read plus one unique element), committed through the
// client's preferred server.
func (c *client) update(class string, ops []op, done func()) {
	s := c.s
	rec := &txnRecord{ID: s.stats.nextTxn(), Process: c.id, Class: class, Region: c.region, Invoke: s.now, Reads: map[string][]int64{}}
	byPart := map[uint32][]string{}
	for _, o := range ops {
		p := keyPartition(o.key)
		byPart[p] = append(byPart[p], o.key)
	}
	pids := sortedPartitions(byPart)
	snapshots := map[uint32]uint64{}
	versions := map[string]uint64{}
	remaining := len(pids)
	timedOut := false
	timer := s.now + s.opts.ClientTimeout
	finish := func(outcome, reason, key string, id sdur.TxnID) {
		if rec.Outcome != "" {
			return
		}
		rec.Outcome, rec.Reason, rec.Key, rec.Txn, rec.Return = outcome, reason, key, id, s.now
		s.stats.record(rec)
		done()
	}
	var used []int
	s.at(timer, func() {
		if rec.Outcome == "" {
			timedOut = true
			c.suspect(used...)
			finish("indeterminate", "client timeout", "", sdur.TxnID{})
		}
	})
	for _, p := range pids {
		server := c.server(s.parts[p])
		used = append(used, server)
		req := &readReq{keys: byPart[p]}
		p := p
		req.reply = func(values map[string][]int64, vers map[string]uint64, st uint64) {
			s.toClient(server, c.region, func() {
				if timedOut || rec.Outcome != "" {
					return
				}
				snapshots[p] = st
				for k, v := range values {
					rec.Reads[k] = v
					versions[k] = vers[k]
				}
				remaining--
				if remaining == 0 {
					used = append(used, c.commit(rec, ops, byPart, snapshots, versions, finish))
				}
			})
		}
		s.clientSend(c.region, server, func(n *node) {
			if g := n.groups[p]; g != nil {
				s.serveRead(g, req)
			}
		})
	}
}

func (c *client) commit(rec *txnRecord, ops []op, byPart map[uint32][]string, snapshots map[uint32]uint64, versions map[string]uint64, finish func(string, string, string, sdur.TxnID)) int {
	s := c.s
	pids := sortedPartitions(byPart)
	parts := make([]*txnPart, 0, len(pids))
	for _, p := range pids {
		part := &txnPart{partition: p, partitions: pids, snapshot: snapshots[p], reads: byPart[p]}
		for _, k := range byPart[p] {
			part.readVersions = append(part.readVersions, versions[k])
		}
		for i := range ops {
			o := &ops[i]
			if !o.write || keyPartition(o.key) != p {
				continue
			}
			o.appendValue = s.stats.nextValue()
			if o.names != nil {
				s.stats.producers[o.appendValue] = *o.names
			}
			list := append(slices.Clone(rec.Reads[o.key]), o.appendValue)
			part.writes = append(part.writes, sdur.Write{Key: o.key, Value: encodeList(list)})
			rec.Appends = append(rec.Appends, appendOp{Key: o.key, Value: o.appendValue})
		}
		parts = append(parts, part)
	}
	return c.submitParts(parts, finish)
}

// submitParts sends a transaction's parts to the client's submitter, which runs the mode's
// commit; finish gets the outcome.
func (c *client) submitParts(parts []*txnPart, finish func(string, string, string, sdur.TxnID)) int {
	s := c.s
	sub := c.submitterNode()
	s.clientSend(c.region, sub, func(n *node) {
		n.seq++
		id := sdur.TxnID{Node: n.id, Seq: n.seq}
		s.track(n, id, len(parts) > 1, func() {}, func(o txnResult) {
			s.toClient(sub, c.region, func() {
				if o.committed {
					finish("ok", "", "", o.id)
				} else {
					finish("aborted", o.reason, o.key, o.id)
				}
			})
		})
		s.mode.submit(s, n, id, parts)
	})
	return sub
}

// validatedRead runs a read-only transaction as a transaction without writes (modes without
// snapshots: its reads are validated at commit, and it can abort).
func (c *client) validatedRead(class string, body func(read func(keys []string, cb func(map[string][]int64))), done func()) {
	s := c.s
	rec := &txnRecord{ID: s.stats.nextTxn(), Process: c.id, Class: class, Region: c.region, Invoke: s.now, Reads: map[string][]int64{}, ReadOnly: true}
	versions := map[string]uint64{}
	byPart := map[uint32][]string{}
	var used []int
	gone := false
	finish := func(outcome, reason, key string, id sdur.TxnID) {
		if rec.Outcome != "" {
			return
		}
		rec.Outcome, rec.Reason, rec.Key, rec.Txn, rec.Return = outcome, reason, key, id, s.now
		s.stats.record(rec)
		done()
	}
	s.at(s.now+s.opts.ClientTimeout, func() {
		if rec.Outcome == "" {
			gone = true
			c.suspect(used...)
			finish("indeterminate", "client timeout", "", sdur.TxnID{})
		}
	})
	outstanding := 0
	committed := false
	maybeCommit := func() {
		if outstanding > 0 || committed || gone {
			return
		}
		committed = true
		pids := sortedPartitions(byPart)
		parts := make([]*txnPart, 0, len(pids))
		for _, p := range pids {
			part := &txnPart{partition: p, partitions: pids, reads: byPart[p]}
			for _, k := range byPart[p] {
				part.readVersions = append(part.readVersions, versions[k])
			}
			parts = append(parts, part)
		}
		used = append(used, c.submitParts(parts, finish))
	}
	read := func(keys []string, cb func(map[string][]int64)) {
		per := map[uint32][]string{}
		for _, k := range keys {
			if _, seen := versions[k]; seen {
				continue
			}
			per[keyPartition(k)] = append(per[keyPartition(k)], k)
		}
		for _, p := range sortedPartitions(per) {
			outstanding++
			p := p
			server := c.server(s.parts[p])
			used = append(used, server)
			req := &readReq{keys: per[p]}
			req.reply = func(values map[string][]int64, vers map[string]uint64, _ uint64) {
				s.toClient(server, c.region, func() {
					if gone {
						return
					}
					for k, v := range values {
						rec.Reads[k] = v
						versions[k] = vers[k]
						byPart[p] = append(byPart[p], k)
					}
					outstanding--
					cb(values)
					maybeCommit()
				})
			}
			s.clientSend(c.region, server, func(n *node) {
				if g := n.groups[p]; g != nil {
					s.serveRead(g, req)
				}
			})
		}
	}
	body(read)
	maybeCommit()
}

func sortedPartitions[V any](m map[uint32]V) []uint32 {
	out := make([]uint32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// nearestReplicaTo returns the replica of p nearest to a region.
func (s *cluster) nearestReplicaTo(region string, p *partition) int {
	best, bestD := -1, time.Duration(1<<62)
	for _, r := range p.replicas {
		d := s.topo.OneWay(region, s.nodes[r].region)
		if d < bestD || (d == bestD && r == p.preferred) {
			best, bestD = r, d
		}
	}
	return best
}

// social runs one operation of the Twitter-like benchmark (VI-A): 85% timeline, 7.5% post,
// 7.5% follow (global with probability FollowGlobal). A user u of partition p has keys
// p/u<u>/posts, /producers (whom u follows) and /consumers (who follows u).
func (c *client) social(done func()) {
	s := c.s
	u := c.rng.IntN(s.opts.UsersPerPartition)
	userKey := func(p uint32, u int, list string) string { return keyName(p, fmt.Sprintf("u%d/%s", u, list)) }
	x := c.rng.Float64()
	switch {
	case x < 0.85:
		// Timeline: the user's producers, then each producer's posts (the last 10 producers),
		// read-only on a globally consistent snapshot.
		s.mode.readOnly(c, "timeline", func(read func([]string, func(map[string][]int64))) {
			pk := userKey(c.home, u, "producers")
			read([]string{pk}, func(v map[string][]int64) {
				producers := v[pk]
				if len(producers) > 10 {
					producers = producers[len(producers)-10:]
				}
				keys := make([]string, 0, len(producers))
				for _, id := range producers {
					p, pu := s.stats.producer(id)
					if k := userKey(p, pu, "posts"); !slices.Contains(keys, k) {
						keys = append(keys, k)
					}
				}
				if len(keys) > 0 {
					read(keys, func(map[string][]int64) {})
				}
			})
		}, done)
	case x < 0.925:
		c.update("post", []op{{key: userKey(c.home, u, "posts"), write: true}}, done)
	default:
		p, class := c.home, "follow-local"
		if c.rng.Float64() < s.opts.FollowGlobal {
			p, class = c.other(), "follow-global"
		}
		v := c.rng.IntN(s.opts.UsersPerPartition)
		if p == c.home && v == u {
			v = (u + 1) % s.opts.UsersPerPartition
		}
		// u follows v: u's producers get v (its appended element names v), v's consumers get u.
		c.update(class, []op{{key: userKey(c.home, u, "producers"), write: true, names: &userRef{p: p, u: v}}, {key: userKey(p, v, "consumers"), write: true}}, done)
	}
}

// userRef names a user; the elements appended to producer lists map back to users through it
// (every appended element is unique in the history).
type userRef struct {
	p uint32
	u int
}
