// Package catsim runs Catenae (internal/catenae) on a simulated geo-distributed cluster in
// virtual time: one data center server per region of a topology, messages delayed by the
// topology's one-way delays with jitter, loosely synchronized clocks, seeded faults (loss,
// duplication, pauses of a data center, replicas that execute a transaction wrongly), and
// closed-loop clients in every region. `meridian sim txn --mode catenae` checks its histories
// for serializability and its replicas for convergence; `meridian bench catenae` measures it.
package catsim

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"meridian/internal/catenae"
	"meridian/internal/tools/check"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// Workload is what the clients run.
type Workload string

const (
	// Check: list-append transactions on a few keys (conflicts, write skew), recorded for the
	// serializability checker.
	Check Workload = "check"
	// Micro: the Geo-SDUR microbenchmark (VI-A): two reads and two writes of random items.
	Micro Workload = "micro"
	// TPCC: New-Order and Payment (tpcc.go).
	TPCC Workload = "tpcc"
)

// Options configure a run; zero fields take defaults.
type Options struct {
	Seed     uint64
	Mutation string
	Topology string // built-in name; default ec2-sdur-3
	Workload Workload
	// ClientsPerRegion closed-loop clients in each region (default 3 for Check, 16 else).
	ClientsPerRegion int
	Duration, Warmup time.Duration // default 2s (Check) or 20s, and 0 (Check) or 3s
	EpochLength      time.Duration // default 10ms
	// Items for Micro (default 1,000,000), Keys for Check (default 6); Warehouses for TPCC
	// (default: 2 per region).
	Items, Keys, Warehouses int
	// Zipf: Micro draws items from a Zipfian distribution of this constant (YCSB's 0.99 is
	// skewed: a few items take most requests) instead of uniformly; 0: uniform.
	Zipf float64
	// Faults.
	Loss       float64 // each message lost (and duplicated, at half this rate)
	Corrupt    float64 // a faulty replica executes a transaction wrongly
	CorruptTwo bool    // two replicas are faulty (digests split three ways: the tie-break)
	Pauses     int     // data center pauses (100-500 ms each)
	// Crashes: a data center crashes (its volatile state lost: the other data centers'
	// inputs of open epochs, its speculative order, their votes; catenae.Saved keeps the
	// rest) and restarts 100-500 ms later.
	Crashes int
	// ClockSkew bounds each data center's clock offset (uniform in ±ClockSkew). Default 1ms.
	ClockSkew time.Duration
	// ClientTimeout: a client gives up on a transaction (indeterminate). Default 5s.
	ClientTimeout time.Duration
	// Idle: no clients (the epoch messages' bandwidth at idle).
	Idle bool
}

func (o Options) withDefaults() Options {
	if o.Topology == "" {
		o.Topology = "ec2-sdur-3"
	}
	if o.Workload == "" {
		o.Workload = Check
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 16
		if o.Workload == Check {
			o.ClientsPerRegion = 3
		}
	}
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
		if o.Workload == Check {
			o.Duration = 2 * time.Second
		}
	}
	if o.Warmup <= 0 && o.Workload != Check {
		o.Warmup = 3 * time.Second
	}
	if o.EpochLength <= 0 {
		o.EpochLength = 10 * time.Millisecond
	}
	if o.Items <= 0 {
		o.Items = 1_000_000
	}
	if o.Keys <= 0 {
		o.Keys = 6
	}
	if o.ClockSkew <= 0 {
		o.ClockSkew = time.Millisecond
	}
	if o.ClientTimeout <= 0 {
		o.ClientTimeout = 5 * time.Second
	}
	return o
}

// Result is a run's outcome.
type Result struct {
	Options Options
	History check.TxnHistory // Check only
	// Committed, TimedOut count transactions; Fast those committed at close on validated
	// reads (half a round trip), the rest after their own validation (a round trip).
	Committed, TimedOut, Fast int
	// Aborted: optimistic transactions whose reads were overwritten before they were ordered.
	Aborted int
	// Restarts: data centers restarted from their saved state after a crash.
	Restarts int
	// Latency per region (commit, measured after the warmup), and all regions together.
	Latency map[string]*hdrhistogram.Histogram
	All     *hdrhistogram.Histogram
	// ThroughputTPS over the measured period.
	ThroughputTPS float64
	// BytesPerNodeSec: bytes of its messages (their protobuf wire form) one data center sends
	// per second, measured.
	BytesPerNodeSec float64
	// Replica counters, by region.
	Stats map[string]catenae.Stats
	// Converged: after the load stopped and everything quiesced, every data center holds
	// the same validated state. Divergence says how not.
	Converged  bool
	Divergence string
	Regions    []string
}

type event struct {
	at  time.Duration
	seq int
	fn  func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type sim struct {
	o       Options
	rng     *rand.Rand
	q       queue
	seq     int
	now     time.Duration
	topo    *topology.Topology
	regions []string
	dcs     []uint32
	reps    map[uint32]*catenae.Replica
	// disks are the data centers' durable states as their Readies' Durable built them up
	// (catenae.Disk): what the node runtime keeps in storage.
	disks   map[uint32]*catenae.Disk
	opts    map[uint32]catenae.Options
	offsets map[uint32]time.Duration
	paused  map[uint32]bool
	epoch0  time.Time
	res     *Result
	pending map[catenae.TxnID]*pendingTxn
	work    workload
	// measuredBytes are the bytes of the messages sent during the measured period.
	measuredBytes float64
}

type pendingTxn struct {
	rec    *check.Txn
	start  time.Duration
	client int
	region string
}

// workload builds the clients' transactions.
type workload interface {
	// next returns a client's next transaction, and its record for the checker (nil: not
	// recorded).
	next(s *sim, dc uint32, client int) (catenae.Proc, *check.Txn)
}

// Run simulates one run.
func Run(o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Mutation != "" {
		if _, ok := catenae.Mutations[o.Mutation]; !ok {
			return nil, fmt.Errorf("catsim: unknown mutation %q", o.Mutation)
		}
	}
	topo, err := topology.Builtin(o.Topology)
	if err != nil {
		return nil, fmt.Errorf("catsim: topology: %w", err)
	}
	s := &sim{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0xca7e)), topo: topo, regions: topo.Regions, reps: map[uint32]*catenae.Replica{}, disks: map[uint32]*catenae.Disk{}, opts: map[uint32]catenae.Options{},
		offsets: map[uint32]time.Duration{}, paused: map[uint32]bool{}, epoch0: time.Unix(1_800_000_000, 0),
		pending: map[catenae.TxnID]*pendingTxn{},
		res:     &Result{Options: o, Latency: map[string]*hdrhistogram.Histogram{}, All: newHist(), Stats: map[string]catenae.Stats{}, Regions: topo.Regions}}
	switch o.Workload {
	case Check:
		s.work = &checkWorkload{keys: o.Keys}
	case Micro:
		w := &microWorkload{items: o.Items}
		if o.Zipf > 0 {
			w.zipf = ycsb.NewZipfian(0, uint64(o.Items)-1, o.Zipf)
		}
		s.work = w
	case TPCC:
		s.work = newTPCC(o, len(topo.Regions))
	default:
		return nil, fmt.Errorf("catsim: unknown workload %q (want check, micro or tpcc)", o.Workload)
	}
	for i := range s.regions {
		s.dcs = append(s.dcs, uint32(i+1))
	}
	start := uint64(s.epoch0.UnixNano()/int64(o.EpochLength)) - 1
	for i, dc := range s.dcs {
		s.offsets[dc] = time.Duration(s.rng.Int64N(int64(2*o.ClockSkew))) - o.ClockSkew
		opts := catenae.Options{EpochLength: o.EpochLength, Mutation: o.Mutation, Start: start}
		faulty := dc == s.dcs[len(s.dcs)-1] || (o.CorruptTwo && len(s.dcs) > 2 && dc == s.dcs[len(s.dcs)-2])
		if o.Corrupt > 0 && faulty {
			opts.Corrupt = func(catenae.TxnID) bool { return s.rng.Float64() < o.Corrupt }
		}
		r, err := catenae.NewReplica(dc, s.dcs, opts)
		if err != nil {
			return nil, err
		}
		s.reps[dc], s.opts[dc], s.disks[dc] = r, opts, catenae.NewDisk()
		s.res.Latency[s.regions[i]] = newHist()
	}
	s.run()
	return s.res, nil
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 120_000_000, 3) } // µs

func (s *sim) at(d time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: s.now + d, seq: s.seq, fn: fn})
}

func (s *sim) clock(dc uint32) time.Time { return s.epoch0.Add(s.now + s.offsets[dc]) }

func (s *sim) region(dc uint32) string { return s.regions[dc-1] }

func (s *sim) oneWay(a, b uint32) time.Duration {
	if a == b {
		return 0
	}
	return s.topo.OneWay(s.region(a), s.region(b))
}

func (s *sim) run() {
	o := s.o
	end := o.Warmup + o.Duration
	for _, dc := range s.dcs {
		dc := dc
		s.at(0, func() { s.tick(dc, end) })
		for c := range o.ClientsPerRegion {
			if o.Idle {
				break
			}
			c := c
			s.at(time.Duration(s.rng.IntN(10))*time.Millisecond, func() { s.startClient(dc, c, end) })
		}
	}
	for i := 0; i < o.Pauses; i++ {
		dc := s.dcs[s.rng.IntN(len(s.dcs))]
		start := time.Duration(s.rng.Int64N(int64(end)))
		s.at(start, func() { s.paused[dc] = true })
		s.at(start+time.Duration(100+s.rng.IntN(400))*time.Millisecond, func() { s.paused[dc] = false })
	}
	for i := 0; i < o.Crashes; i++ {
		dc := s.dcs[s.rng.IntN(len(s.dcs))]
		start := time.Duration(s.rng.Int64N(int64(end)))
		var saved []byte
		// Half the restarts are from the whole saved state (catenae.Saved, in its wire form),
		// half from the disk its Readies wrote (catenae.Disk: the validated state and the
		// inputs, the closed epochs executed again) as the node runtime restarts.
		fromDisk := s.rng.IntN(2) == 0
		crashed := false
		s.at(start, func() {
			if s.paused[dc] {
				return // already down
			}
			s.paused[dc] = true
			crashed = true
			if fromDisk {
				return // the disk is as its last Ready left it
			}
			// What was durable when it crashed (its last Ready), in its wire form.
			b, err := catenae.EncodeSaved(s.reps[dc].Save())
			if err != nil {
				panic(fmt.Sprintf("catsim: save data center %d: %v", dc, err))
			}
			saved = b
		})
		s.at(start+time.Duration(100+s.rng.IntN(400))*time.Millisecond, func() {
			if !crashed {
				return
			}
			var r *catenae.Replica
			var err error
			if fromDisk {
				r, err = s.disks[dc].Restore(dc, s.dcs, s.opts[dc], s.clock(dc))
				// A restarted replica has no clients waiting: theirs time out.
			} else {
				var st *catenae.Saved
				if st, err = catenae.DecodeSaved(saved, catenae.DefaultWireLimits); err == nil {
					r, err = catenae.Restore(st, s.opts[dc], s.clock(dc))
				}
			}
			if err != nil {
				panic(fmt.Sprintf("catsim: restart data center %d: %v", dc, err))
			}
			s.reps[dc] = r
			s.res.Restarts++
			s.paused[dc] = false
			s.drain(dc)
		})
	}
	// Quiesce: the load stops at end; everything in flight settles (bounded).
	limit := end + o.ClientTimeout + 10*time.Second
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*event)
		s.now = e.at
		if s.now > limit {
			break
		}
		e.fn()
	}
	for _, p := range s.pending {
		if p.rec != nil {
			p.rec.Outcome = check.TxnIndeterminate
			s.res.History.Txns = append(s.res.History.Txns, *p.rec)
		}
	}
	measured := o.Duration.Seconds()
	s.res.ThroughputTPS = float64(s.res.All.TotalCount()) / measured
	for i, dc := range s.dcs {
		s.res.Stats[s.regions[i]] = s.reps[dc].Stats()
	}
	s.res.BytesPerNodeSec = s.measuredBytes / float64(len(s.dcs)) / measured
	s.converged()
}

// tick drives a data center's clock every millisecond until the run has quiesced.
func (s *sim) tick(dc uint32, end time.Duration) {
	if !s.paused[dc] {
		s.reps[dc].Tick(s.clock(dc))
		s.drain(dc)
	}
	if s.now < end+s.o.ClientTimeout || len(s.pending) > 0 || s.reps[dc].Pending() > 0 {
		s.at(time.Millisecond, func() { s.tick(dc, end) })
	}
}

func (s *sim) startClient(dc uint32, client int, end time.Duration) {
	if s.now >= end {
		return
	}
	if s.paused[dc] {
		s.at(50*time.Millisecond, func() { s.startClient(dc, client, end) })
		return
	}
	proc, rec := s.work.next(s, dc, client)
	if rec != nil {
		rec.Invoke = int64(s.now)
	}
	id, err := s.reps[dc].Submit(s.clock(dc), proc)
	if err != nil {
		s.at(10*time.Millisecond, func() { s.startClient(dc, client, end) }) // saturated: back off
		return
	}
	p := &pendingTxn{rec: rec, start: s.now, client: client, region: s.region(dc)}
	s.pending[id] = p
	s.at(s.o.ClientTimeout, func() {
		if s.pending[id] != p {
			return
		}
		delete(s.pending, id)
		s.res.TimedOut++
		if rec != nil {
			rec.Outcome = check.TxnIndeterminate
			s.res.History.Txns = append(s.res.History.Txns, *rec)
		}
		s.startClient(dc, client, end)
	})
	s.drain(dc)
}

// drain delivers a replica's messages (lost, duplicated, delayed by the topology plus jitter)
// and outcomes (to the clients).
func (s *sim) drain(dc uint32) {
	r := s.reps[dc]
	for r.HasReady() {
		rd := r.Ready()
		s.disks[dc].Apply(rd.Durable)
		for _, m := range rd.Messages {
			// Every message goes through its wire form (catenae/wire.go): what is measured
			// is what would be sent, and what is delivered is what decodes.
			data, err := catenae.EncodeMessage(m)
			if err != nil {
				panic(fmt.Sprintf("catsim: data center %d: %v", dc, err))
			}
			if s.now >= s.o.Warmup && s.now < s.o.Warmup+s.o.Duration {
				s.measuredBytes += float64(len(data))
			}
			if s.rng.Float64() < s.o.Loss {
				continue
			}
			copies := 1
			if s.rng.Float64() < s.o.Loss/2 {
				copies = 2
			}
			for range copies {
				d := s.oneWay(dc, m.To)
				d += time.Duration(float64(d) * 0.05 * s.rng.Float64()) // jitter: reorders messages
				d += 100 * time.Microsecond
				to := m.To
				s.at(d, func() {
					if s.paused[to] {
						return
					}
					got, err := catenae.DecodeMessage(data, catenae.DefaultWireLimits)
					if err != nil {
						panic(fmt.Sprintf("catsim: a message from data center %d does not decode: %v", dc, err))
					}
					s.reps[to].Step(s.clock(to), got)
					s.drain(to)
				})
			}
		}
		for _, out := range rd.Outcomes {
			s.outcome(dc, out)
		}
	}
}

func (s *sim) outcome(dc uint32, out catenae.Outcome) {
	p := s.pending[out.Txn]
	if p == nil {
		return
	}
	delete(s.pending, out.Txn)
	if rec := p.rec; rec != nil {
		rec.Return = int64(s.now)
		if out.Committed {
			rec.Outcome = check.TxnOK
			ri := 0
			for i := range rec.Ops {
				// Reads by OpRead come with the result; an optimistic transaction's were
				// recorded when it read them (its procedure has none).
				if rec.Ops[i].Kind == check.MopRead && len(out.Result.Reads) > 0 && ri < len(out.Result.Reads) {
					rec.Ops[i].List = decodeList(out.Result.Reads[ri])
					ri++
				}
			}
		} else {
			rec.Outcome = check.TxnAborted
		}
		s.res.History.Txns = append(s.res.History.Txns, *rec)
	}
	if !out.Committed {
		s.res.Aborted++
	}
	if out.Committed {
		s.res.Committed++
		if out.Fast {
			s.res.Fast++
		}
		if p.start >= s.o.Warmup && s.now <= s.o.Warmup+s.o.Duration {
			us := (s.now - p.start).Microseconds()
			_ = s.res.Latency[p.region].RecordValue(max(us, 1))
			_ = s.res.All.RecordValue(max(us, 1))
		}
	}
	end := s.o.Warmup + s.o.Duration
	c := p.client
	// The client's next transaction after a processing pause of a millisecond (a commit at
	// the same instant would loop forever in virtual time).
	s.at(time.Millisecond, func() { s.startClient(dc, c, end) })
}

// converged compares the data centers' validated states at the lowest validated epoch, and
// checks that none is stuck behind the others (a replica whose results never validate: after
// the quiescence every data center must have validated every epoch the others did, give or
// take the last second).
func (s *sim) converged() {
	s.res.Converged = true
	upto, top := ^uint64(0), uint64(0)
	stuck := uint32(0)
	for _, dc := range s.dcs {
		v := s.reps[dc].ValidatedUpto()
		if v < upto {
			upto, stuck = v, dc
		}
		top = max(top, v)
	}
	if slack := uint64(time.Second / s.o.EpochLength); top > upto+slack {
		s.res.Converged = false
		s.res.Divergence = fmt.Sprintf("data center %d validated up to epoch %d only, another up to %d: stuck", stuck, upto, top)
		return
	}
	first := s.reps[s.dcs[0]].StateDigest(upto)
	for _, dc := range s.dcs[1:] {
		if d := s.reps[dc].StateDigest(upto); d != first {
			s.res.Converged = false
			s.res.Divergence = fmt.Sprintf("data centers %d and %d hold different states at validated epoch %d", s.dcs[0], dc, upto)
			return
		}
	}
}

func decodeList(b []byte) []int64 {
	var out []int64
	for len(b) >= 8 {
		out = append(out, int64(binary.BigEndian.Uint64(b[:8])))
		b = b[8:]
	}
	return out
}

// CheckSeed runs one seed of the check workload and reports whether its history is
// serializable and its data centers converged (why not, when not).
func CheckSeed(o Options) (bool, string, error) {
	o.Workload = Check
	res, err := Run(o)
	if err != nil {
		return false, "", err
	}
	if r, anomalies := check.CheckSerializable(res.History, time.Minute); r != check.Ok {
		why := fmt.Sprintf("not serializable (%d transactions, %d committed)", len(res.History.Txns), res.Committed)
		for i, a := range anomalies {
			if i == 3 {
				break
			}
			why += "\n  " + a.String()
		}
		return false, why, nil
	}
	if !res.Converged {
		return false, "diverged: " + res.Divergence, nil
	}
	if res.Committed == 0 {
		return false, "nothing committed", nil
	}
	return true, "", nil
}

// SimOptions are the faults of `meridian sim txn --mode catenae` for a seed: 2% loss (1%
// duplication), a faulty replica (2% of its executions wrong; two faulty replicas every third
// seed), two pauses on even seeds and two crashes with restarts from the saved state on odd
// ones; the topology alternates between ec2-sdur-3 and gcp-meteorshower-3.
func SimOptions(seed uint64) Options {
	o := Options{Seed: seed, Workload: Check, Loss: 0.02, Corrupt: 0.02, CorruptTwo: seed%3 == 0}
	if seed%2 == 0 {
		o.Pauses = 2
	} else {
		o.Crashes = 2
	}
	if seed%2 == 1 {
		o.Topology = "gcp-meteorshower-3"
	}
	return o
}

// MutationOptions make the faults a mutation needs likely (a three-way split of digests).
func MutationOptions(seed uint64, mutation string) Options {
	o := SimOptions(seed)
	o.Mutation, o.Corrupt, o.CorruptTwo, o.Duration = mutation, 0.2, true, 500*time.Millisecond
	return o
}

// checkWorkload: list-append transactions on a few keys. A third are optimistic, as the
// product's interactive transactions will be: their reads are done first, at the data
// center's validated prefix, and the transaction is submitted with an OpExpect of each
// version read (it aborts if one was overwritten since).
type checkWorkload struct {
	keys    int
	nextVal int64
	nextID  int
}

func (w *checkWorkload) next(s *sim, dc uint32, client int) (catenae.Proc, *check.Txn) {
	w.nextID++
	rec := &check.Txn{ID: w.nextID, Process: int(dc)*1000 + client}
	var p catenae.Proc
	perm := s.rng.Perm(w.keys)
	key := func(i int) string { return fmt.Sprintf("k%d", i) }
	optimistic := s.rng.IntN(3) == 0
	for _, i := range perm[:1+s.rng.IntN(2)] {
		if optimistic {
			vals, vers, _ := s.reps[dc].ReadOnly([]string{key(i)})
			p.Ops = append(p.Ops, catenae.Op{Kind: catenae.OpExpect, Key: key(i), Version: vers[0]})
			rec.Ops = append(rec.Ops, check.Mop{Kind: check.MopRead, Key: key(i), List: decodeList(vals[0])})
			continue
		}
		p.Ops = append(p.Ops, catenae.Op{Kind: catenae.OpRead, Key: key(i)})
		rec.Ops = append(rec.Ops, check.Mop{Kind: check.MopRead, Key: key(i)})
	}
	for _, i := range perm[1 : 2+s.rng.IntN(2)] {
		w.nextVal++
		p.Ops = append(p.Ops, catenae.Op{Kind: catenae.OpAppend, Key: key(i), Delta: w.nextVal})
		rec.Ops = append(rec.Ops, check.Mop{Kind: check.MopAppend, Key: key(i), Value: w.nextVal})
	}
	return p, rec
}

// microWorkload: two reads and two writes of random items (Geo-SDUR VI-A), uniform or
// Zipfian.
type microWorkload struct {
	items int
	zipf  *ycsb.Zipfian
}

func (w *microWorkload) item(s *sim) string {
	if w.zipf != nil {
		return fmt.Sprintf("i%d", w.zipf.Next(s.rng))
	}
	return fmt.Sprintf("i%d", s.rng.IntN(w.items))
}

func (w *microWorkload) next(s *sim, _ uint32, _ int) (catenae.Proc, *check.Txn) {
	var p catenae.Proc
	for range 2 {
		p.Ops = append(p.Ops, catenae.Op{Kind: catenae.OpRead, Key: w.item(s)})
	}
	for range 2 {
		p.Ops = append(p.Ops, catenae.Op{Kind: catenae.OpAdd, Key: w.item(s), Delta: 1})
	}
	return p, nil
}
