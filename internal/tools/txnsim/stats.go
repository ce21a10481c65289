package txnsim

import (
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Stats are what a run measured.
type Stats struct {
	measureFrom, measureTo time.Duration
	keepHistory            bool

	txnSeq   int
	valueSeq int64
	// producers maps an element appended to a producer list to the user it names.
	producers map[int64]userRef

	History []*txnRecord
	// latency (committed transactions in the measured window) per class and region, µs.
	latency map[string]map[string]*hdrhistogram.Histogram
	// bound returns the lower bound of a class in a region (set by Run).
	bound func(class, region string) float64
	// Commits and Aborts per class (measured window); AbortReasons per reason.
	Commits, Aborts, Indeterminate map[string]int
	AbortReasons                   map[string]int

	VotesSent, AbortRequests, Resubmits, Crashes, Reordered int
	// Vectors is the number of snapshot vectors published; Retunes the automatic
	// threshold's configuration entries.
	Vectors, Retunes int
	// Saves counts replica states saved; Restores the restarts that began from one.
	Saves, Restores int
}

func newStats(from, to time.Duration, keep bool) *Stats {
	return &Stats{
		measureFrom: from, measureTo: to, keepHistory: keep,
		producers: map[int64]userRef{},
		latency:   map[string]map[string]*hdrhistogram.Histogram{},
		Commits:   map[string]int{}, Aborts: map[string]int{}, Indeterminate: map[string]int{},
		AbortReasons: map[string]int{},
	}
}

func (st *Stats) nextTxn() int     { st.txnSeq++; return st.txnSeq }
func (st *Stats) nextValue() int64 { st.valueSeq++; return st.valueSeq }

// producer returns the user an element of a producer list names.
func (st *Stats) producer(v int64) (uint32, int) {
	r := st.producers[v]
	return r.p, r.u
}

// record counts a finished transaction (latency and outcome if it started in the measured
// window) and keeps it in the history.
func (st *Stats) record(rec *txnRecord) {
	if st.keepHistory {
		st.History = append(st.History, rec)
	}
	if rec.Invoke < st.measureFrom || rec.Invoke >= st.measureTo {
		return
	}
	switch rec.Outcome {
	case "ok":
		st.Commits[rec.Class]++
		byRegion := st.latency[rec.Class]
		if byRegion == nil {
			byRegion = map[string]*hdrhistogram.Histogram{}
			st.latency[rec.Class] = byRegion
		}
		h := byRegion[rec.Region]
		if h == nil {
			h = hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
			byRegion[rec.Region] = h
		}
		_ = h.RecordValue(max(1, int64((rec.Return-rec.Invoke)/time.Microsecond)))
	case "aborted":
		st.Aborts[rec.Class]++
		st.AbortReasons[rec.Reason]++
	default:
		st.Indeterminate[rec.Class]++
	}
}

// ClassStats summarise one class in one region (or "all").
type ClassStats struct {
	Class, Region   string
	Commits, Aborts int
	Indeterminate   int
	AbortRate       float64
	ThroughputTPS   float64
	P50Ms, P99Ms    float64
	MeanMs          float64
	// LowerBoundMs is the physical lower bound of the class's commit latency from the region
	// (0: not computed, "all" rows).
	LowerBoundMs float64
}

// Summary returns per class and region, then per class over all regions.
func (st *Stats) Summary() []ClassStats {
	secs := (st.measureTo - st.measureFrom).Seconds()
	classes := make([]string, 0, len(st.Commits)+len(st.Aborts))
	for c := range st.Commits {
		classes = append(classes, c)
	}
	for c := range st.Aborts {
		if !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	slices.Sort(classes)
	var out []ClassStats
	for _, c := range classes {
		all := hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
		regions := make([]string, 0)
		for r := range st.latency[c] {
			regions = append(regions, r)
		}
		slices.Sort(regions)
		for _, r := range regions {
			h := st.latency[c][r]
			all.Merge(h)
			lb := 0.0
			if st.bound != nil {
				lb = st.bound(c, r)
			}
			out = append(out, ClassStats{Class: c, Region: r, Commits: int(h.TotalCount()), LowerBoundMs: lb,
				ThroughputTPS: float64(h.TotalCount()) / secs,
				P50Ms:         float64(h.ValueAtQuantile(50)) / 1000, P99Ms: float64(h.ValueAtQuantile(99)) / 1000, MeanMs: h.Mean() / 1000})
		}
		cs := ClassStats{Class: c, Region: "all", Commits: st.Commits[c], Aborts: st.Aborts[c], Indeterminate: st.Indeterminate[c],
			ThroughputTPS: float64(st.Commits[c]) / secs,
			P50Ms:         float64(all.ValueAtQuantile(50)) / 1000, P99Ms: float64(all.ValueAtQuantile(99)) / 1000, MeanMs: all.Mean() / 1000}
		if n := cs.Commits + cs.Aborts; n > 0 {
			cs.AbortRate = float64(cs.Aborts) / float64(n)
		}
		out = append(out, cs)
	}
	return out
}
