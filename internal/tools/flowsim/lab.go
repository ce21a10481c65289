package flowsim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"meridian/internal/mayflower"
)

// What the lab (internal/tools/lab, `meridian bench mayflower lab`) needs to run the same
// schemes with real TCP: the jobs of a seed drawn once, and a scheme's Flowserver and choice
// detached from the simulated network, fed with the real flows' counters instead.

// JobSpec is one read job of a workload: when it arrives (seconds from the start), the
// client host, and the file's replica hosts (primary, same pod, other pod).
type JobSpec struct {
	Arrival  float64 `json:"arrival_s"`
	Client   int     `json:"client"`
	Replicas [3]int  `json:"replicas"`
}

// Workload draws o.Jobs jobs as a run would (Poisson arrivals, Zipf files, replicas placed
// across fault domains, clients by the locality mix), from a generator of its own, so every
// scheme given it (Options.Workload) reads exactly the same jobs.
func Workload(o Options) ([]JobSpec, error) {
	o.EnsureDefaults()
	o.Scheme = NearestECMP // any: only the workload is drawn
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &sim{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x776f726b6c6f6164))}
	s.zipf = rand.NewZipf(s.rng, o.Zipf, 1, uint64(o.Files-1))
	if err := s.placeReplicas(); err != nil {
		return nil, err
	}
	rate := o.RatePerHost * float64(o.Testbed.Hosts())
	out := make([]JobSpec, 0, o.Jobs)
	at := 0.0
	for range o.Jobs {
		at += s.rng.ExpFloat64() / rate
		reps := s.replica[int(s.zipf.Uint64())]
		c := s.client(reps)
		if c < 0 {
			return nil, errors.New("flowsim: no host for a client")
		}
		out = append(out, JobSpec{Arrival: at, Client: c, Replicas: reps})
	}
	return out, nil
}

// Selector is one scheme's choice of replicas and paths on the Flowserver's model, which
// the caller keeps: Started when a chunk starts, Finished when it ends, Update at each poll
// with the flow's measured rate and bytes left. It is not safe for concurrent use.
type Selector struct {
	s *sim
}

// Choice is one part of a job: the replica host, the path (its index among
// Testbed.Paths(replica, client), and its links), and the share of the job's chunks.
type Choice struct {
	Replica   int
	PathIndex int
	Path      []string
	Share     float64
}

// NewSelector returns the selector of o.Scheme (seeded by o.Seed for its random ties and
// ECMP draws), with every link of o.Testbed in its model.
func NewSelector(o Options) (*Selector, error) {
	o.EnsureDefaults()
	if o.Scheme == MayflowerPSteal {
		return nil, fmt.Errorf("flowsim: %s steals parts of chunks in flight, which the lab's whole-chunk transfers cannot do", o.Scheme)
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &sim{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x73656c6563746f72)), paths: map[[2]int][][]string{},
		view: mayflower.NewModel(), flows: map[mayflower.FlowID]*flowState{}}
	for l, c := range o.Testbed.Links() {
		if err := s.view.SetLink(mayflower.LinkID(l), c); err != nil {
			return nil, err
		}
	}
	s.view.DefaultRemaining = o.JobBytes
	return &Selector{s: s}, nil
}

// Choose picks a job's replica(s) and path(s) for client c.
func (x *Selector) Choose(c int, reps [3]int) ([]Choice, error) {
	parts, err := x.s.choose(c, reps)
	if err != nil {
		return nil, err
	}
	out := make([]Choice, 0, len(parts))
	for _, p := range parts {
		paths := x.s.pathsOf(p.p.replica, c)
		k := slices.IndexFunc(paths, func(q []string) bool { return slices.Equal(linkIDs(q), p.p.path) })
		if k < 0 {
			return nil, fmt.Errorf("flowsim: chosen path %v is not among the testbed's", p.p.path)
		}
		out = append(out, Choice{Replica: p.p.replica, PathIndex: k, Path: paths[k], Share: p.share})
	}
	return out, nil
}

// Started puts a chunk of size bytes on path into the model at its estimated rate (the
// Flowserver's placement, 3.2.2).
func (x *Selector) Started(id mayflower.FlowID, path []string, size float64) error {
	_, err := x.s.view.Place(id, linkIDs(path), size)
	return err
}

// Finished removes a chunk from the model.
func (x *Selector) Finished(id mayflower.FlowID) { x.s.view.RemoveFlow(id) }

// Update sets a chunk's measured rate (bytes/s) and bytes left, as a poll of the counters
// does; the caller leaves out flows placed less than a poll ago (update-freeze, 3.2.2).
func (x *Selector) Update(id mayflower.FlowID, rate, remaining float64) error {
	if math.IsNaN(rate) || rate < 0 || math.IsNaN(remaining) || remaining < 0 {
		return fmt.Errorf("flowsim: update of flow %d: rate %v, remaining %v", id, rate, remaining)
	}
	return x.s.view.UpdateFlow(id, rate, remaining)
}

// Summarise is the mean and percentiles of completion times (sorted in place).
func Summarise(times []float64) Result { return summarise(times) }

// RunWorkload simulates scheme sc on a given workload, for the lab's side-by-side column.
func RunWorkload(o Options, sc Scheme, w []JobSpec) (Result, error) {
	o.Scheme, o.Workload = sc, w
	return Run(o)
}
