package txnsim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"

	"meridian/internal/sdur"
	"meridian/internal/topology"
)

// Result is what a run produced.
type Result struct {
	Options Options
	Stats   *Stats
	// Converged: after the faults healed and everything quiesced, every replica of each
	// partition committed the same transactions in the same order. Divergence says where not.
	Converged  bool
	Divergence string
	// Stuck counts transactions still pending at some replica after the quiescence.
	Stuck int
	// Events is the number of simulation events processed.
	Events int
}

// startAt is when clients start (leaders are elected before).
const startAt = time.Second

// maxEvents bounds a run.
const maxEvents = 400_000_000

// Run simulates one run.
func Run(o Options) (*Result, error) {
	_, res, err := run(o)
	return res, err
}

func run(o Options) (*cluster, *Result, error) {
	o = o.ensureDefaults()
	if err := o.validate(); err != nil {
		return nil, nil, err
	}
	topo, err := topology.Builtin(o.Topology)
	if err != nil {
		return nil, nil, fmt.Errorf("topology: %w", err)
	}
	s := &cluster{opts: o, topo: topo, rng: rand.New(rand.NewPCG(o.Seed, 0x5d0e)), cut: map[[2]string]bool{}, fifo: map[[2]int]time.Duration{}}
	from := startAt + o.Warmup
	end := from + o.Duration
	s.stats = newStats(from, end, o.KeepHistory)
	s.delay = newDelayEstimator(o)
	m, ok := modes[o.Mode]
	if !ok {
		return nil, nil, fmt.Errorf("transaction mode %q: want one of %v", o.Mode, modeNames())
	}
	s.mode = m
	if err := s.build(); err != nil {
		return nil, nil, err
	}
	// The preferred servers campaign first (IV-A: a partition's preferred server leads),
	// once every replica has applied its bootstrap configuration.
	for _, n := range s.nodes {
		s.flush(n)
	}
	for _, p := range s.parts {
		n := s.nodes[p.preferred]
		_ = n.groups[p.id].rn.Campaign()
		s.flush(n)
	}
	s.after(o.RaftTick, s.tick)
	s.mode.start(s)
	if o.SaveEvery > 0 {
		s.after(o.SaveEvery, s.saveAll)
	}
	for _, c := range s.clients() {
		c := c
		s.at(startAt, func() { c.start(end) })
	}
	s.scheduleFaults(end)
	limit := end + o.Quiesce
	s.at(end, func() { s.heal() })
	events := 0
	for s.q.Len() > 0 && s.err == nil {
		if s.q.peek().at > limit {
			break
		}
		ev := heap.Pop(&s.q).(*event)
		s.now = ev.at
		ev.fn()
		events++
		if events > maxEvents {
			return nil, nil, fmt.Errorf("seed %d: more than %d events", o.Seed, maxEvents)
		}
	}
	if s.err != nil {
		return nil, nil, fmt.Errorf("seed %d: %w", o.Seed, s.err)
	}
	s.stats.bound = s.lowerBoundMs
	res := &Result{Options: o, Stats: s.stats, Events: events}
	res.Converged, res.Divergence, res.Stuck = s.converged()
	return s, res, nil
}

// build places nodes and partitions (paper VI-A: two partitions of three servers; WAN 1: a
// majority of each partition in its home region; WAN 2: one server of each in every region).
func (s *cluster) build() error {
	regions := s.topo.Regions
	if len(regions) < 2 {
		return fmt.Errorf("topology %s has %d regions; SDUR's deployments need at least 2", s.topo.Name, len(regions))
	}
	homes := min(len(regions), s.opts.Partitions)
	addNode := func(region string) int {
		n := &node{id: uint32(len(s.nodes) + 1), idx: len(s.nodes), region: region, up: true, groups: map[uint32]*group{}, submitted: map[sdur.TxnID]*submission{}}
		s.nodes = append(s.nodes, n)
		return n.idx
	}
	for i := range s.opts.Partitions {
		p := &partition{id: uint32(i)}
		home := regions[i%homes]
		switch s.opts.Deployment {
		case WAN1:
			// Two servers in the home region and the third in the next home region, so that
			// each home region reads every partition locally.
			other := regions[(i+1)%homes]
			if other == home {
				other = regions[(i+1)%len(regions)]
			}
			p.replicas = []int{addNode(home), addNode(home), addNode(other)}
		case WAN2:
			idx := slices.Index(regions, home)
			for j := range 3 {
				p.replicas = append(p.replicas, addNode(regions[(idx+j)%len(regions)]))
			}
		}
		p.preferred = p.replicas[0]
		s.parts = append(s.parts, p)
	}
	for _, p := range s.parts {
		for _, r := range p.replicas {
			g, err := s.newGroup(s.nodes[r], p, nil, nil)
			if err != nil {
				return err
			}
			g.leaderSince = -1
			s.resetElection(g)
			s.nodes[r].groups[p.id] = g
		}
	}
	return nil
}

// clients returns the closed-loop clients: ClientsPerRegion next to each partition's preferred
// server, with that partition as home.
func (s *cluster) clients() []*client {
	var out []*client
	for _, p := range s.parts {
		for i := range s.opts.ClientsPerRegion {
			id := len(out)
			out = append(out, &client{s: s, id: id, region: s.nodes[p.preferred].region, home: p.id, submitter: p.preferred,
				rng: rand.New(rand.NewPCG(s.opts.Seed, uint64(1000+id)))})
			_ = i
		}
	}
	return out
}

// scheduleFaults places the crashes and cuts in the measured run.
func (s *cluster) scheduleFaults(end time.Duration) {
	f := s.opts.Faults
	span := end - startAt
	if span <= 0 {
		return
	}
	for range f.Crashes {
		at := startAt + time.Duration(s.rng.Int64N(int64(span)))
		victim := s.rng.IntN(len(s.nodes))
		down := time.Duration(s.rng.Int64N(int64(max(f.CrashFor, time.Millisecond))))
		s.at(at, func() { s.crash(victim) })
		s.at(at+down, func() { s.restart(victim) })
	}
	regions := s.topo.Regions
	for range f.Cuts {
		at := startAt + time.Duration(s.rng.Int64N(int64(span)))
		a := regions[s.rng.IntN(len(regions))]
		b := regions[s.rng.IntN(len(regions))]
		if a == b {
			continue
		}
		dur := time.Duration(s.rng.Int64N(int64(max(f.CutFor, time.Millisecond))))
		s.at(at, func() { s.cut[[2]string{a, b}], s.cut[[2]string{b, a}] = true, true })
		s.at(at+dur, func() { delete(s.cut, [2]string{a, b}); delete(s.cut, [2]string{b, a}) })
	}
}

// heal ends every fault: cuts healed, crashed nodes restarted, no more loss or spikes.
func (s *cluster) heal() {
	s.cut = map[[2]string]bool{}
	s.opts.Faults = Faults{}
	for i, n := range s.nodes {
		if !n.up {
			s.restart(i)
		}
	}
}

// converged compares, per partition, the commit sequences of its replicas: each must be a
// prefix of the longest (a replica behind is "stuck"; one that differs has diverged).
func (s *cluster) converged() (bool, string, int) {
	stuck := 0
	for _, p := range s.parts {
		var longest []sdur.TxnID
		for _, r := range p.replicas {
			if g := s.nodes[r].groups[p.id]; len(g.applied) > len(longest) {
				longest = g.applied
			}
		}
		for _, r := range p.replicas {
			g := s.nodes[r].groups[p.id]
			for i, id := range g.applied {
				if longest[i] != id {
					return false, fmt.Sprintf("partition %d: node %d committed %s as its %d-th transaction, another replica %s",
						p.id, s.nodes[r].id, id, i+1, longest[i]), stuck
				}
			}
			stuck += g.rep.pendingCount()
		}
	}
	return true, "", stuck
}

var _ = etcdraft.StateLeader

// lowerBoundMs is the physical lower bound of a class's commit latency for a client in region:
// a transaction's entry must reach a majority of each of its partitions' replicas and the news
// must come back, so for each partition it is the majority-th smallest RTT from the region to
// the partition's replicas (the intra-region RTT for a replica in the region itself), and the
// transaction's bound is the largest over its partitions (they run in parallel). Locals
// involve the client's home partition; globals the home and the farthest other; read-only
// transactions only a read at the nearest replica of each partition.
func (s *cluster) lowerBoundMs(class, region string) float64 {
	rtt := func(p *partition) []float64 {
		out := make([]float64, 0, len(p.replicas))
		for _, r := range p.replicas {
			out = append(out, float64(s.topo.RTT(region, s.nodes[r].region))/float64(time.Millisecond))
		}
		slices.Sort(out)
		return out
	}
	majority := func(p *partition) float64 { return rtt(p)[len(p.replicas)/2] }
	nearest := func(p *partition) float64 { return rtt(p)[0] }
	var home *partition
	for _, p := range s.parts {
		if s.nodes[p.preferred].region == region {
			home = p
			break
		}
	}
	if home == nil {
		return 0
	}
	switch class {
	case "local", "post", "follow-local":
		return majority(home)
	case "global", "follow-global":
		b := majority(home)
		for _, p := range s.parts {
			b = max(b, majority(p))
		}
		return b
	case "readonly", "timeline":
		b := 0.0
		for _, p := range s.parts {
			b = max(b, nearest(p))
		}
		return b
	}
	return 0
}
