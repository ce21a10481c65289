package flowsim

import (
	"fmt"
	"strings"
)

// Comparison is every scheme run on the same seeds.
type Comparison struct {
	Options Options
	Seeds   []uint64
	// Results are per scheme, over every seed's jobs pooled.
	Results []Result
	// times are each scheme's pooled completion times, sorted (for CDF).
	times map[Scheme][]float64
}

// CDF returns a scheme's completion-time distribution as (seconds, cumulative fraction)
// points, at most points of them (≥ 2), evenly spaced in rank; nil for a scheme not run.
func (c Comparison) CDF(sc Scheme, points int) [][2]float64 {
	ts := c.times[sc]
	if len(ts) == 0 {
		return nil
	}
	points = max(2, min(points, len(ts)))
	out := make([][2]float64, 0, points)
	for k := range points {
		i := k * (len(ts) - 1) / (points - 1)
		out = append(out, [2]float64{ts[i], float64(i+1) / float64(len(ts))})
	}
	return out
}

// Compare runs each scheme on seeds first..first+seeds−1 (the same workload for every
// scheme: the seed fixes files, replicas, arrivals and clients) and pools their jobs.
func Compare(o Options, schemes []Scheme, first uint64, seeds int) (Comparison, error) {
	if seeds < 1 || seeds > 1000 {
		return Comparison{}, fmt.Errorf("flowsim: %d seeds: want 1..1000", seeds)
	}
	if len(schemes) == 0 {
		return Comparison{}, fmt.Errorf("flowsim: no scheme to compare")
	}
	o.EnsureDefaults()
	c := Comparison{Options: o, times: map[Scheme][]float64{}}
	for k := range seeds {
		c.Seeds = append(c.Seeds, first+uint64(k))
	}
	for _, sc := range schemes {
		var pooled []float64
		splits, sim, steals, stolen := 0, 0.0, 0, 0.0
		for _, seed := range c.Seeds {
			oo := o
			oo.Scheme, oo.Seed = sc, seed
			r, times, err := run(oo)
			if err != nil {
				return Comparison{}, fmt.Errorf("flowsim: %s, seed %d: %w", sc, seed, err)
			}
			pooled = append(pooled, times...)
			splits += r.Split
			sim += r.SimSeconds
			steals += r.Steals
			stolen += r.StolenBytes
		}
		r := summarise(pooled) // sorts pooled
		r.Scheme, r.Split, r.SimSeconds = sc, splits, sim
		r.Steals, r.StolenBytes = steals, stolen
		c.Results = append(c.Results, r)
		c.times[sc] = pooled
	}
	return c, nil
}

// Result returns the comparison's result of a scheme.
func (c Comparison) Result(sc Scheme) (Result, bool) {
	for _, r := range c.Results {
		if r.Scheme == sc {
			return r, true
		}
	}
	return Result{}, false
}

// Markdown is the comparison as a table, with each scheme's mean completion time over
// Mayflower-P's under the thesis's literal split rule and under the makespan rule.
func (c Comparison) Markdown() string {
	var b strings.Builder
	o := c.Options
	view := "the Flowserver reads switch counters"
	switch {
	case o.EndpointBound:
		view = "the Flowserver sees what the reads' endpoints report, plus the true background flows where a read was bottlenecked with them (a diagnostic bound)"
	case o.NoInference:
		view = "the Flowserver sees only what the reads' endpoints report, and infers nothing"
	case o.EndpointOnly:
		view = "the Flowserver sees only what the reads' endpoints report, and infers the load it does not see"
	}
	fmt.Fprintf(&b, "Flow-level testbed: %d pods × %d racks × %d hosts, %.0f Mbps edges, oversubscription %.0f:1 (%.0f at the racks × %.0f at the pods); %d files, Zipf %.2f; %.0f MB jobs in %.0f MB chunks; %.2f jobs/s per host; locality %v; %d background flows (%s); %d jobs per seed, seeds %v.\n\n",
		o.Testbed.Pods, o.Testbed.RacksPerPod, o.Testbed.HostsPerRack, o.Testbed.EdgeBps*8/1e6, o.Testbed.Oversubscription(), o.Testbed.RackOversubscription, o.Testbed.PodOversubscription,
		o.Files, o.Zipf, o.JobBytes/(1<<20), o.ChunkBytes/(1<<20), o.RatePerHost, o.Locality, o.Background, view, o.Jobs, c.Seeds)
	lit, _ := c.Result(MayflowerP)
	mk, _ := c.Result(MayflowerPMakespan)
	b.WriteString("| scheme | jobs | mean s | p50 s | p95 s | p99 s | split jobs | mean / Mayflower-P (literal) | mean / Mayflower-P (makespan) | p95 / Mayflower-P (makespan) | tail steals (bytes moved; none read twice) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ratio := func(x, y float64) string {
		if y <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", x/y)
	}
	for _, r := range c.Results {
		steals := "–"
		if r.Steals > 0 {
			steals = fmt.Sprintf("%d (%.1f%% of the bytes)", r.Steals, 100*r.StolenBytes/(float64(r.Jobs)*o.JobBytes))
		}
		fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %.2f | %.2f | %d | %s | %s | %s | %s |\n", r.Scheme, r.Jobs, r.Mean, r.P50, r.P95, r.P99, r.Split, ratio(r.Mean, lit.Mean), ratio(r.Mean, mk.Mean), ratio(r.P95, mk.P95), steals)
	}
	return b.String()
}
