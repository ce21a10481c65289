package flowsim

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"meridian/internal/mayflower"
)

// Scheme is a replica-and-path selection scheme (3.4.2).
type Scheme string

// The schemes of 3.4.2, and the makespan variant of Mayflower-P (docs/mayflower.md).
const (
	NearestECMP        Scheme = "nearest-ecmp"
	NearestM           Scheme = "nearest-m"
	SinbadRECMP        Scheme = "sinbad-r-ecmp"
	SinbadRM           Scheme = "sinbad-r-m"
	MayflowerB         Scheme = "mayflower-b"
	MayflowerP         Scheme = "mayflower-p"
	MayflowerPMakespan Scheme = "mayflower-p-makespan"
	// MayflowerPSteal is Mayflower-P (makespan) with tail stealing, beyond the thesis: once
	// every chunk of a job has started, each poll moves part of its straggling chunk — the
	// one with the most bytes left, if it will not end before the next poll — to the best
	// path from a replica the job is not reading from (the third replica of a split job), so
	// both pieces end together. A chunk-level hedge that reads no byte twice.
	MayflowerPSteal Scheme = "mayflower-p-steal"
)

// Schemes lists every scheme in the order results are printed.
var Schemes = []Scheme{NearestECMP, NearestM, SinbadRECMP, SinbadRM, MayflowerB, MayflowerP, MayflowerPMakespan, MayflowerPSteal}

// Options describe one run. Zero fields take the thesis's values (EnsureDefaults).
type Options struct {
	Testbed Testbed
	Scheme  Scheme
	Seed    uint64
	// Files is how many files there are (each 128 MB block one file), Zipf its popularity
	// skew (the thesis: ρ = 1.1; must be > 1).
	Files int
	Zipf  float64
	// JobBytes is a read job's size and ChunkBytes the piece a client fetches at a time
	// (the thesis: 128 MB in 32 MB chunks).
	JobBytes, ChunkBytes float64
	// RatePerHost is the Poisson job arrival rate per host, jobs/s (the thesis's λ = 0.1).
	RatePerHost float64
	// Locality is the probability that a client is in the primary replica's rack, in
	// another rack of its pod, or in another pod (the thesis's default (0.5, 0.3, 0.2)).
	Locality [3]float64
	// Jobs bounds the run: jobs arriving after this many are not generated.
	Jobs int
	// PollInterval is how often the selectors' model reads the flows' real rates and
	// remaining bytes (the thesis's edge-switch counters: 1 s); a flow placed less than a
	// poll ago keeps its estimated rate (the thesis's update-freeze).
	PollInterval float64
	// Background is how many long-lived background flows run between random hosts on ECMP
	// paths (3.4.7), of a size the selectors do not know.
	Background int
	// EndpointOnly is the Flowserver without switch counters (3.5.2's alternative, the one
	// Meridian can build): it learns of flows only from the endpoints of the reads it
	// places, which report their rates and remaining bytes every poll; background flows
	// are invisible to it. At every poll it infers the load it cannot see from those
	// reports (mayflower.Model.InferHidden) and holds it as hidden flows.
	EndpointOnly bool
	// Workload, when set, is the run's jobs (arrival, client, replicas) instead of drawn
	// ones, so a run repeats exactly the jobs the lab ran with real TCP (Workload()). Jobs
	// and the arrival-related fields are then taken from it.
	Workload []JobSpec
	// ClientEdgeBound makes every link but the hosts' downlinks (the clients' edge links)
	// a thousand times faster: a run then shows what no choice of replica or path can
	// remove, the sharing of a client's own link by its concurrent jobs (the bound on tail
	// stealing and hedging, docs/mayflower.md).
	ClientEdgeBound bool
	// NoInference leaves the endpoint-only view without the inferred hidden load: only the
	// reads it placed (the view before the inference, for comparison).
	NoInference bool
	// EndpointBound is a diagnostic, not a Flowserver: the endpoint-only view is given the
	// true background flows (their number, and the rate they had then) on every link
	// where a read has been bottlenecked together with them, from the poll it first was on.
	// It peeks at the simulated truth, and bounds what an inference from the reads'
	// bottlenecks could learn.
	EndpointBound bool
}

// EnsureDefaults fills zero fields with the thesis's values.
func (o *Options) EnsureDefaults() {
	if o.Testbed == (Testbed{}) {
		o.Testbed = DefaultTestbed()
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Files == 0 {
		o.Files = 1000
	}
	def(&o.Zipf, 1.1)
	def(&o.JobBytes, 128<<20)
	def(&o.ChunkBytes, 32<<20)
	def(&o.RatePerHost, 0.1)
	if o.Locality == [3]float64{} {
		o.Locality = [3]float64{0.5, 0.3, 0.2}
	}
	if o.Jobs == 0 {
		o.Jobs = 2000
	}
	def(&o.PollInterval, 1)
}

// Validate checks the options (after EnsureDefaults).
func (o Options) Validate() error {
	if err := o.Testbed.Validate(); err != nil {
		return err
	}
	if !slices.Contains(Schemes, o.Scheme) {
		return fmt.Errorf("flowsim: unknown scheme %q (one of %v)", o.Scheme, Schemes)
	}
	switch {
	case o.Files < 1 || o.Files > 10_000_000:
		return fmt.Errorf("flowsim: %d files: want 1..10000000", o.Files)
	case !(o.Zipf > 1) || o.Zipf > 10:
		return fmt.Errorf("flowsim: Zipf skew %v: want > 1 and ≤ 10", o.Zipf)
	case !(o.ChunkBytes > 0) || !(o.JobBytes >= o.ChunkBytes) || o.JobBytes/o.ChunkBytes > 1024:
		return fmt.Errorf("flowsim: job of %v bytes in chunks of %v: want chunk > 0, job ≥ chunk, at most 1024 chunks", o.JobBytes, o.ChunkBytes)
	case !(o.RatePerHost > 0) || o.RatePerHost > 1000:
		return fmt.Errorf("flowsim: %v jobs/s per host: want > 0 and ≤ 1000", o.RatePerHost)
	case o.Jobs < 1 || o.Jobs > 1_000_000:
		return fmt.Errorf("flowsim: %d jobs: want 1..1000000", o.Jobs)
	case !(o.PollInterval > 0) || o.PollInterval > 3600:
		return fmt.Errorf("flowsim: poll interval %v s: want > 0 and ≤ 3600", o.PollInterval)
	case o.Background < 0 || o.Background > 10_000:
		return fmt.Errorf("flowsim: %d background flows: want 0..10000", o.Background)
	case (o.NoInference || o.EndpointBound) && !o.EndpointOnly, o.NoInference && o.EndpointBound:
		return errors.New("flowsim: no inference and the endpoint bound are variants of the endpoint-only view, one at a time")
	}
	hosts := o.Testbed.Hosts()
	last := 0.0
	for i, j := range o.Workload {
		if !(j.Arrival >= last) || j.Client < 0 || j.Client >= hosts || slices.Contains(j.Replicas[:], j.Client) {
			return fmt.Errorf("flowsim: workload job %d %+v: arrivals must not decrease, the client must be a host without a replica", i, j)
		}
		for _, r := range j.Replicas {
			if r < 0 || r >= hosts {
				return fmt.Errorf("flowsim: workload job %d: replica %d of %d hosts", i, r, hosts)
			}
		}
		last = j.Arrival
	}
	sum := 0.0
	for _, p := range o.Locality {
		if p < 0 {
			return fmt.Errorf("flowsim: locality %v: no negative share", o.Locality)
		}
		sum += p
	}
	if math.Abs(sum-1) > 1e-9 {
		return fmt.Errorf("flowsim: locality %v sums to %v, want 1", o.Locality, sum)
	}
	return nil
}

// Result is one run's outcome.
type Result struct {
	Scheme Scheme
	Jobs   int
	// Completion times of the jobs, seconds: mean and percentiles.
	Mean, P50, P95, P99 float64
	// Split is how many jobs read from two replicas.
	Split int
	// Steals and StolenBytes: the tail steals (mayflower-p-steal) and the bytes they moved
	// to another replica; none of them is read twice.
	Steals      int
	StolenBytes float64
	// SimSeconds is the simulated time the run took.
	SimSeconds float64
}

type part struct {
	replica int
	path    []mayflower.LinkID
	queue   int // chunks not started
	flow    mayflower.FlowID
	busy    bool
}

type job struct {
	id      int
	client  int
	reps    [3]int
	arrival float64
	parts   []*part
	left    int     // chunks not finished
	bytes   float64 // bytes not yet given to a chunk
}

type flowState struct {
	job       *job // nil: a background flow
	part      *part
	remaining float64
	placedAt  float64
}

type sim struct {
	o       Options
	rng     *rand.Rand
	zipf    *rand.Zipf
	paths   map[[2]int][][]string
	truth   *mayflower.Model
	view    *mayflower.Model
	flows   map[mayflower.FlowID]*flowState
	nextID  mayflower.FlowID
	now     float64
	times   []float64
	splits  int
	replica [][3]int // per file: primary, same-pod, other-pod
	jobs    []*job   // every job so far, in arrival order
	steals  int
	stolen  float64
	// inferred is the endpoint-only view's inference of the load it does not see.
	inferred mayflower.HiddenState
	prior    map[mayflower.LinkID]float64
	// revealed are the links the endpoint bound has handed to the view, with the
	// background flows' rates then (EndpointBound).
	revealed map[mayflower.LinkID][]float64
	// afterPoll, when set, is called after every poll (tests).
	afterPoll func(s *sim, rates map[mayflower.FlowID]float64)
}

// Run simulates one scheme.
func Run(o Options) (Result, error) {
	r, _, err := run(o)
	return r, err
}

func run(o Options) (Result, []float64, error) {
	return runWith(o, nil)
}

// runWith runs one scheme, calling afterPoll (when not nil) after every poll.
func runWith(o Options, afterPoll func(s *sim, rates map[mayflower.FlowID]float64)) (Result, []float64, error) {
	o.EnsureDefaults()
	if o.Workload != nil {
		o.Jobs = len(o.Workload)
	}
	if err := o.Validate(); err != nil {
		return Result{}, nil, err
	}
	s := &sim{afterPoll: afterPoll, o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x6d61796677)), paths: map[[2]int][][]string{},
		truth: mayflower.NewModel(), view: mayflower.NewModel(), flows: map[mayflower.FlowID]*flowState{}}
	s.zipf = rand.NewZipf(s.rng, o.Zipf, 1, uint64(o.Files-1))
	for l, c := range o.Testbed.Links() {
		if o.ClientEdgeBound && !strings.HasPrefix(l, "tor>h") {
			c *= 1000
		}
		if err := s.truth.SetLink(mayflower.LinkID(l), c); err != nil {
			return Result{}, nil, err
		}
		if err := s.view.SetLink(mayflower.LinkID(l), c); err != nil {
			return Result{}, nil, err
		}
	}
	s.view.DefaultRemaining = o.JobBytes
	if err := s.placeReplicas(); err != nil {
		return Result{}, nil, err
	}
	if err := s.startBackground(); err != nil {
		return Result{}, nil, err
	}
	if err := s.loop(); err != nil {
		return Result{}, nil, err
	}
	r := summarise(s.times)
	r.Scheme, r.Split, r.SimSeconds = o.Scheme, s.splits, s.now
	r.Steals, r.StolenBytes = s.steals, s.stolen
	return r, s.times, nil
}

// summarise is the mean and percentiles of completion times (sorted in place).
func summarise(times []float64) Result {
	r := Result{Jobs: len(times)}
	if len(times) == 0 {
		return r
	}
	sort.Float64s(times)
	sum := 0.0
	for _, x := range times {
		sum += x
	}
	r.Mean = sum / float64(len(times))
	q := func(p float64) float64 {
		return times[min(len(times)-1, int(math.Ceil(p*float64(len(times))))-1)]
	}
	r.P50, r.P95, r.P99 = q(0.50), q(0.95), q(0.99)
	return r
}

// placeReplicas puts each file's primary on a random host, the second replica in another
// rack of its pod and the third in another pod (3.4.1).
func (s *sim) placeReplicas() error {
	t := s.o.Testbed
	s.replica = make([][3]int, s.o.Files)
	for f := range s.replica {
		p := s.rng.IntN(t.Hosts())
		pp := t.Place(p)
		second := Host{Pod: pp.Pod, Rack: (pp.Rack + 1 + s.rng.IntN(t.RacksPerPod-1)) % t.RacksPerPod, Index: s.rng.IntN(t.HostsPerRack)}
		third := Host{Pod: (pp.Pod + 1 + s.rng.IntN(t.Pods-1)) % t.Pods, Rack: s.rng.IntN(t.RacksPerPod), Index: s.rng.IntN(t.HostsPerRack)}
		s.replica[f] = [3]int{p, t.HostAt(second), t.HostAt(third)}
	}
	return nil
}

func (s *sim) pathsOf(src, dst int) [][]string {
	k := [2]int{src, dst}
	if p, ok := s.paths[k]; ok {
		return p
	}
	p := s.o.Testbed.Paths(src, dst)
	s.paths[k] = p
	return p
}

func linkIDs(p []string) []mayflower.LinkID {
	out := make([]mayflower.LinkID, len(p))
	for i, l := range p {
		out[i] = mayflower.LinkID(l)
	}
	return out
}

func (s *sim) startBackground() error {
	t := s.o.Testbed
	for range s.o.Background {
		a := s.rng.IntN(t.Hosts())
		b := (a + 1 + s.rng.IntN(t.Hosts()-1)) % t.Hosts()
		ps := s.pathsOf(a, b)
		path := linkIDs(ps[s.rng.IntN(len(ps))])
		s.nextID++
		if err := s.truth.AddFlow(mayflower.Flow{ID: s.nextID, Path: path}); err != nil {
			return err
		}
		if !s.o.EndpointOnly {
			if err := s.view.AddFlow(mayflower.Flow{ID: s.nextID, Path: path}); err != nil {
				return err
			}
		}
		s.flows[s.nextID] = &flowState{remaining: math.Inf(1), placedAt: math.Inf(-1)}
	}
	return nil
}

// client picks a job's client host by the locality mix relative to the primary replica,
// never a host that holds a replica of the file (its read would not cross the network).
func (s *sim) client(replicas [3]int) int {
	t := s.o.Testbed
	p := t.Place(replicas[0])
	x := s.rng.Float64()
	for range 64 {
		h := p
		switch {
		case x < s.o.Locality[0]:
			h.Index = s.rng.IntN(t.HostsPerRack)
		case x < s.o.Locality[0]+s.o.Locality[1] && t.RacksPerPod > 1:
			h.Rack = (p.Rack + 1 + s.rng.IntN(t.RacksPerPod-1)) % t.RacksPerPod
			h.Index = s.rng.IntN(t.HostsPerRack)
		case t.Pods > 1:
			h.Pod = (p.Pod + 1 + s.rng.IntN(t.Pods-1)) % t.Pods
			h.Rack, h.Index = s.rng.IntN(t.RacksPerPod), s.rng.IntN(t.HostsPerRack)
		default:
			h = t.Place(s.rng.IntN(t.Hosts()))
		}
		c := t.HostAt(h)
		if !slices.Contains(replicas[:], c) {
			return c
		}
	}
	// A rack full of replicas: any other host.
	for c := range t.Hosts() {
		if !slices.Contains(replicas[:], c) {
			return c
		}
	}
	return -1
}

func (s *sim) loop() error {
	nextArrival := s.rng.ExpFloat64() / (s.o.RatePerHost * float64(s.o.Testbed.Hosts()))
	if s.o.Workload != nil {
		nextArrival = s.o.Workload[0].Arrival
	}
	arrived := 0
	nextPoll := s.o.PollInterval
	var jobs []*job
	// Every event is an arrival, a chunk's end or a poll; arrivals are bounded by Jobs and
	// each brings at most 1024 chunks, so the loop is bounded.
	maxEvents := s.o.Jobs*(2+int(s.o.JobBytes/s.o.ChunkBytes)) + int(1e7)
	for ev := 0; ; ev++ {
		if ev > maxEvents {
			return errors.New("flowsim: event bound exceeded")
		}
		rates := s.truth.FairRates(nil)
		// The next chunk to finish.
		var doneID mayflower.FlowID
		doneAt := math.Inf(1)
		for id, f := range s.flows {
			if f.job == nil {
				continue
			}
			if r := rates[id]; r > 0 {
				if at := s.now + f.remaining/r; at < doneAt || (at == doneAt && id < doneID) {
					doneAt, doneID = at, id
				}
			}
		}
		at := math.Inf(1)
		if arrived < s.o.Jobs {
			at = nextArrival
		}
		at = math.Min(at, doneAt)
		if math.IsInf(at, 1) {
			if arrived >= s.o.Jobs && s.jobsLeft(jobs) == 0 {
				return nil
			}
			return errors.New("flowsim: stuck: chunks in flight with no bandwidth")
		}
		if nextPoll < at {
			at = nextPoll
		}
		// Move the bytes.
		for id, f := range s.flows {
			if f.job != nil {
				f.remaining = math.Max(0, f.remaining-rates[id]*(at-s.now))
			}
		}
		s.now = at
		switch {
		case at == nextPoll:
			s.poll(rates)
			nextPoll += s.o.PollInterval
		case at == doneAt:
			if err := s.chunkDone(doneID); err != nil {
				return err
			}
		default:
			j, err := s.arrive(arrived)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
			arrived++
			nextArrival = s.now + s.rng.ExpFloat64()/(s.o.RatePerHost*float64(s.o.Testbed.Hosts()))
			if s.o.Workload != nil && arrived < len(s.o.Workload) {
				nextArrival = s.o.Workload[arrived].Arrival
			}
		}
		if arrived >= s.o.Jobs && s.jobsLeft(jobs) == 0 {
			return nil
		}
	}
}

func (s *sim) jobsLeft(jobs []*job) int {
	n := 0
	for _, j := range jobs {
		if j.left > 0 {
			n++
		}
	}
	return n
}

// poll is the Flowserver reading the edge switches' counters: every flow's real rate and
// remaining bytes, except a flow placed less than a poll ago keeps its estimated rate
// (update-freeze, 3.2.2).
func (s *sim) poll(rates map[mayflower.FlowID]float64) {
	for id, f := range s.flows {
		rate := rates[id]
		if s.now-f.placedAt < s.o.PollInterval {
			if vf, ok := s.view.Flow(id); ok {
				rate = vf.Rate
			}
		}
		if math.IsInf(f.remaining, 1) {
			// A background flow: its size stays unknown (absent from an endpoint-only view).
			_ = s.view.SetRate(id, rate)
			continue
		}
		_ = s.view.UpdateFlow(id, rate, f.remaining)
	}
	switch {
	case !s.o.EndpointOnly || s.o.NoInference:
	case s.o.EndpointBound:
		s.endpointBound(rates)
	default:
		s.inferHidden(rates)
	}
	if s.o.Scheme == MayflowerPSteal {
		s.stealTails()
	}
	if s.afterPoll != nil {
		s.afterPoll(s, rates)
	}
}

// inferOptions are the endpoint-only view's: rates measured within 1%, a link filled by the
// reads alone ruled out for a minute, and links weighed by how many host pairs' shortest
// paths cross them (traffic nobody reported is likelier where more of it can pass).
func (s *sim) inferOptions() mayflower.InferOptions {
	if s.prior == nil {
		t := s.o.Testbed
		s.prior = map[mayflower.LinkID]float64{}
		for a := range t.Hosts() {
			for b := range t.Hosts() {
				ps := s.pathsOf(a, b)
				for _, p := range ps {
					for _, l := range p {
						s.prior[mayflower.LinkID(l)] += 1 / float64(len(ps))
					}
				}
			}
		}
	}
	return mayflower.InferOptions{Tolerance: 0.01, Prior: s.prior, CleanPolls: int(math.Ceil(60 / s.o.PollInterval))}
}

// inferHidden is the endpoint-only view's inference of the load it does not see (3.5.2):
// from the paths of the reads it placed and their endpoints' measured rates alone, never
// the background flows.
func (s *sim) inferHidden(rates map[mayflower.FlowID]float64) {
	ids := make([]mayflower.FlowID, 0, len(s.flows))
	for id, f := range s.flows {
		if f.job != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	reports := make([]mayflower.Report, 0, len(ids))
	for _, id := range ids {
		reports = append(reports, mayflower.Report{Path: s.flows[id].part.path, Rate: rates[id]})
	}
	next, err := s.view.InferHidden(reports, s.inferred, s.inferOptions())
	if err != nil {
		return // a report the model refuses: keep the last inference
	}
	if s.view.SetHidden(next.Hidden) == nil {
		s.inferred = next
	}
}

// endpointBound hands the endpoint-only view the true background flows of every link where
// a read is bottlenecked together with them (EndpointBound, a diagnostic).
func (s *sim) endpointBound(rates map[mayflower.FlowID]float64) {
	if s.revealed == nil {
		s.revealed = map[mayflower.LinkID][]float64{}
	}
	load := map[mayflower.LinkID]float64{}
	top := map[mayflower.LinkID]float64{}
	bg := map[mayflower.LinkID][]float64{}
	for _, id := range slices.Sorted(maps.Keys(s.flows)) {
		f := s.flows[id]
		tf, _ := s.truth.Flow(id)
		for _, l := range tf.Path {
			load[l] += rates[id]
			if f.job == nil {
				bg[l] = append(bg[l], rates[id])
			} else {
				top[l] = math.Max(top[l], rates[id])
			}
		}
	}
	for id, f := range s.flows {
		if f.job == nil {
			continue
		}
		for _, l := range f.part.path {
			if len(bg[l]) > 0 && rates[id] >= top[l]*(1-1e-9) && load[l] >= s.truth.Capacity(l)*(1-1e-9) {
				s.revealed[l] = bg[l]
			}
		}
	}
	var hidden []mayflower.Hidden
	for _, l := range slices.Sorted(maps.Keys(s.revealed)) {
		sum := 0.0
		for _, r := range s.revealed[l] {
			sum += r
		}
		n := len(s.revealed[l])
		hidden = append(hidden, mayflower.Hidden{Link: l, Flows: n, Rate: sum / float64(n), Free: sum / float64(n), Among: 1})
	}
	_ = s.view.SetHidden(hidden)
}

// minStealBytes: a straggler with less than this left is left alone.
const minStealBytes = 1 << 20

// stealTails moves part of each job's straggling chunk to a replica the job is not reading
// from (MayflowerPSteal), at most once per job per poll. A steal the model cannot take (one
// of its bounds) is not made.
func (s *sim) stealTails() {
	ids := make([]mayflower.FlowID, 0, len(s.flows))
	for id, f := range s.flows {
		if f.job != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	byJob := map[*job][]mayflower.FlowID{}
	for _, id := range ids {
		byJob[s.flows[id].job] = append(byJob[s.flows[id].job], id)
	}
	for _, j := range s.jobs {
		s.stealTail(j, byJob[j], true)
	}
}

// stealTail moves part of job j's straggling chunk (inFlight: its pieces in flight, in ID
// order) to the best path from a replica j is not reading from now, so both pieces end
// together; atPoll: only a straggler that would not end before the next poll.
func (s *sim) stealTail(j *job, inFlight []mayflower.FlowID, atPoll bool) {
	if j.left == 0 || len(inFlight) == 0 {
		return
	}
	for _, p := range j.parts {
		if p.queue > 0 {
			return // chunks left to start: plain work stealing takes them
		}
	}
	// The straggler: the in-flight piece with the most bytes left.
	sid := inFlight[0]
	for _, id := range inFlight[1:] {
		if s.flows[id].remaining > s.flows[sid].remaining {
			sid = id
		}
	}
	st := s.flows[sid]
	vf, ok := s.view.Flow(sid)
	if !ok || !(vf.Rate > 0) || st.remaining < 2*minStealBytes || (atPoll && st.remaining/vf.Rate <= s.o.PollInterval) {
		return
	}
	// Replicas the job is not reading from now.
	busy := map[int]bool{}
	for _, id := range inFlight {
		busy[s.flows[id].part.replica] = true
	}
	var others []int
	for _, r := range j.reps {
		if !busy[r] && !slices.Contains(others, r) {
			others = append(others, r)
		}
	}
	if len(others) == 0 {
		return
	}
	cands, hosts := s.candidates(j.client, others)
	ch, err := s.view.Choose(cands, st.remaining)
	if err != nil {
		return
	}
	b2 := ch.Estimates[ch.Best].Rate
	if !(b2 > 0) {
		return
	}
	moved := st.remaining * b2 / (vf.Rate + b2)
	if moved < minStealBytes {
		return
	}
	p := &part{replica: hosts[ch.Best], path: cands[ch.Best].Path, busy: true}
	s.nextID++
	p.flow = s.nextID
	if err := s.truth.AddFlow(mayflower.Flow{ID: p.flow, Path: p.path, Remaining: moved, RemainingKnown: true}); err != nil {
		return
	}
	if _, err := s.view.Place(p.flow, p.path, moved); err != nil {
		s.truth.RemoveFlow(p.flow)
		return
	}
	st.remaining -= moved
	_ = s.view.UpdateFlow(sid, vf.Rate, st.remaining)
	s.flows[p.flow] = &flowState{job: j, part: p, remaining: moved, placedAt: s.now}
	j.parts = append(j.parts, p)
	j.left++
	s.steals++
	s.stolen += moved
}

func (s *sim) arrive(n int) (*job, error) {
	var reps [3]int
	var c int
	if s.o.Workload != nil {
		reps, c = s.o.Workload[n].Replicas, s.o.Workload[n].Client
	} else {
		file := int(s.zipf.Uint64())
		reps = s.replica[file]
		c = s.client(reps)
	}
	if c < 0 {
		return nil, errors.New("flowsim: no host for a client")
	}
	chunks := int(math.Ceil(s.o.JobBytes / s.o.ChunkBytes))
	j := &job{id: n, client: c, reps: reps, arrival: s.now, left: chunks, bytes: s.o.JobBytes}
	s.jobs = append(s.jobs, j)
	parts, err := s.choose(c, reps)
	if err != nil {
		return nil, err
	}
	// Chunks in proportion to the parts' shares (at least one each); the rest is stolen
	// by whichever part finishes first.
	if len(parts) == 2 {
		s.splits++
		first := int(math.Round(float64(chunks) * parts[0].share))
		first = min(max(first, 1), chunks-1)
		parts[0].p.queue, parts[1].p.queue = first, chunks-first
	} else {
		parts[0].p.queue = chunks
	}
	for _, pp := range parts {
		j.parts = append(j.parts, pp.p)
	}
	for _, p := range j.parts {
		if p.queue > 0 {
			if err := s.startChunk(j, p); err != nil {
				return nil, err
			}
		}
	}
	return j, nil
}

type chosen struct {
	p     *part
	share float64
}

// candidates lists every path from each replica to client c, and each one's replica host.
func (s *sim) candidates(c int, reps []int) ([]mayflower.Candidate, []int) {
	var out []mayflower.Candidate
	var hosts []int
	for _, r := range reps {
		for _, p := range s.pathsOf(r, c) {
			out = append(out, mayflower.Candidate{Replica: fmt.Sprint(r), Path: linkIDs(p)})
			hosts = append(hosts, r)
		}
	}
	return out, hosts
}

// choose runs the scheme: which replica(s), which path(s).
func (s *sim) choose(c int, reps [3]int) ([]chosen, error) {
	t := s.o.Testbed
	single := func(r int, path []mayflower.LinkID) []chosen {
		return []chosen{{p: &part{replica: r, path: path}, share: 1}}
	}
	switch s.o.Scheme {
	case NearestECMP, NearestM:
		best := reps[0]
		var tied []int
		for _, r := range reps {
			if d := t.Distance(r, c); d < t.Distance(best, c) {
				best, tied = r, nil
			}
		}
		for _, r := range reps {
			if t.Distance(r, c) == t.Distance(best, c) {
				tied = append(tied, r)
			}
		}
		r := tied[s.rng.IntN(len(tied))]
		return s.pathFor(c, r, s.o.Scheme == NearestM)
	case SinbadRECMP, SinbadRM:
		r := s.sinbadR(c, reps)
		return s.pathFor(c, r, s.o.Scheme == SinbadRM)
	}
	rule := mayflower.SplitNever
	switch s.o.Scheme {
	case MayflowerP:
		rule = mayflower.SplitLiteral
	case MayflowerPMakespan, MayflowerPSteal:
		rule = mayflower.SplitMakespan
	}
	cands, hosts := s.candidates(c, reps[:])
	plan, err := s.view.Plan(cands, s.o.JobBytes, rule)
	if err != nil {
		return nil, err
	}
	if len(plan.Parts) == 1 {
		k := plan.Parts[0].Candidate
		return single(hosts[k], cands[k].Path), nil
	}
	var out []chosen
	for _, pt := range plan.Parts {
		k := pt.Candidate
		out = append(out, chosen{p: &part{replica: hosts[k], path: cands[k].Path}, share: pt.Bytes / s.o.JobBytes})
	}
	return out, nil
}

// pathFor picks the path from replica r: by ECMP (a hash: here a random draw per job) or by
// the Flowserver's cost among r's paths (the "-M" schemes).
func (s *sim) pathFor(c, r int, byCost bool) ([]chosen, error) {
	ps := s.pathsOf(r, c)
	if !byCost {
		return []chosen{{p: &part{replica: r, path: linkIDs(ps[s.rng.IntN(len(ps))])}, share: 1}}, nil
	}
	cands, _ := s.candidates(c, []int{r})
	ch, err := s.view.Choose(cands, s.o.JobBytes)
	if err != nil {
		return nil, err
	}
	return []chosen{{p: &part{replica: r, path: cands[ch.Best].Path}, share: 1}}, nil
}

// sinbadR is the read variant of Sinbad (3.4.2): the replica whose links up the hierarchy
// (its host uplink, and the rack and pod uplinks its read would climb) are least utilised by
// the flows the model knows, ties to the nearest.
func (s *sim) sinbadR(c int, reps [3]int) int {
	t := s.o.Testbed
	best, bestUtil := -1, math.Inf(1)
	for _, r := range reps {
		util := 0.0
		for _, p := range s.pathsOf(r, c) {
			for _, l := range p {
				if !isUplink(l) {
					continue
				}
				util = math.Max(util, s.utilisation(mayflower.LinkID(l)))
			}
		}
		if util < bestUtil-1e-12 || (math.Abs(util-bestUtil) <= 1e-12 && t.Distance(r, c) < t.Distance(best, c)) {
			best, bestUtil = r, util
		}
	}
	return best
}

// isUplink reports whether a link climbs the hierarchy: host to rack, rack to aggregation,
// aggregation to core.
func isUplink(l string) bool {
	return strings.HasPrefix(l, "h") || strings.Contains(l, ">agg") || strings.Contains(l, ">core")
}

func (s *sim) utilisation(l mayflower.LinkID) float64 {
	return s.view.LinkLoad(l) / s.view.Capacity(l)
}

func (s *sim) startChunk(j *job, p *part) error {
	p.queue--
	p.busy = true
	s.nextID++
	p.flow = s.nextID
	size := math.Min(s.o.ChunkBytes, j.bytes)
	j.bytes -= size
	if err := s.truth.AddFlow(mayflower.Flow{ID: p.flow, Path: p.path, Remaining: size, RemainingKnown: true}); err != nil {
		return err
	}
	if _, err := s.view.Place(p.flow, p.path, size); err != nil {
		return err
	}
	s.flows[p.flow] = &flowState{job: j, part: p, remaining: size, placedAt: s.now}
	return nil
}

func (s *sim) chunkDone(id mayflower.FlowID) error {
	f := s.flows[id]
	delete(s.flows, id)
	s.truth.RemoveFlow(id)
	s.view.RemoveFlow(id)
	j, p := f.job, f.part
	p.busy = false
	j.left--
	if j.left == 0 {
		s.times = append(s.times, s.now-j.arrival)
		return nil
	}
	if p.queue > 0 {
		return s.startChunk(j, p)
	}
	// Work stealing: take a chunk the other part has not started.
	for _, q := range j.parts {
		if q != p && q.queue > 0 {
			q.queue--
			p.queue++
			return s.startChunk(j, p)
		}
	}
	if s.o.Scheme == MayflowerPSteal {
		// Nothing left to start: the idle part's replica (or another the job is not
		// reading from) takes part of the straggler.
		var inFlight []mayflower.FlowID
		for fid, f := range s.flows {
			if f.job == j {
				inFlight = append(inFlight, fid)
			}
		}
		slices.Sort(inFlight)
		s.stealTail(j, inFlight, false)
	}
	return nil
}
