package sim

import (
	"fmt"
	"io"
	"maps"
	"sort"
	"strings"
	"time"

	"meridian/internal/tools/seedpool"
)

// SeedsOptions runs many seeds of one configuration.
type SeedsOptions struct {
	Base      Options
	Seeds     int
	SeedStart uint64
	Out       io.Writer
	// Progress prints a line every this many seeds (0: never).
	Progress int
	// Workers runs this many seeds at once (0: one per core). The result, the output and the
	// seed a run stops at are the same for every value (seedpool.Run delivers in seed order).
	Workers int
}

// SeedsResult summarises a multi-seed run.
type SeedsResult struct {
	Seeds      int
	Ops        int
	OK         int
	SimSeconds float64
	Wall       time.Duration
	Crashes    int
	Partitions int
	// Repartitions counts splits and merges; Moves, MovesFinished, MovesAborted replica moves.
	Repartitions                       int
	Moves, MovesFinished, MovesAborted int
	ReadPaths                          map[string]int
	// Scans sums the seeds' scan counts (Report.Scans).
	Scans ScanCounts
	// Failed is the first failing seed's report (nil when every seed passed).
	Failed *Report
}

// SimPerWall is simulated seconds per wall-clock second.
func (r *SeedsResult) SimPerWall() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return r.SimSeconds / r.Wall.Seconds()
}

// RunSeeds runs seeds SeedStart.. SeedStart+Seeds-1 and stops at the first violation (the
// lowest failing seed, as a sequential run would).
func RunSeeds(so SeedsOptions) (*SeedsResult, error) {
	res := &SeedsResult{}
	start := time.Now()
	_, err := seedpool.Run(so.Seeds, so.Workers, func(i int) (*Report, error) {
		o := so.Base
		o.Seed = so.SeedStart + uint64(i)
		rep, err := Run(o)
		if err != nil {
			return nil, fmt.Errorf("seed %d (replay: %s): %w", o.Seed, ReplayCommand(o), err)
		}
		return rep, nil
	}, func(_ int, rep *Report) bool {
		res.Seeds++
		res.Ops += rep.Ops
		res.OK += rep.OK
		res.SimSeconds += rep.SimSeconds
		res.Crashes += rep.Crashes
		res.Partitions += rep.Partitions
		res.Repartitions += rep.Repartitions
		res.Moves += rep.Moves
		res.MovesFinished += rep.MovesFinished
		res.MovesAborted += rep.MovesAborted
		if res.ReadPaths == nil {
			res.ReadPaths = map[string]int{}
		}
		for k, v := range rep.ReadPaths {
			res.ReadPaths[k] += v
		}
		res.Scans.add(rep.Scans)
		if len(rep.Violations) > 0 {
			res.Failed = rep
			return true
		}
		if so.Progress > 0 && so.Out != nil && res.Seeds%so.Progress == 0 {
			fmt.Fprintf(so.Out, "  %d seeds ok (%d ops, %.0f sim s, %.1f sim s per wall s)\n",
				res.Seeds, res.Ops, res.SimSeconds, res.SimSeconds/time.Since(start).Seconds())
		}
		return false
	})
	res.Wall = time.Since(start)
	return res, err
}

// Effective returns o as a run uses it: the protocol's simulation defaults and the general
// defaults applied.
func (o Options) Effective() Options {
	if o.Protocol == "" {
		o.Protocol = "quorum"
	}
	if p, err := LookupProtocol(o.Protocol); err == nil {
		prepare(p, &o)
	}
	o.ensureDefaults()
	return o
}

// ReplayCommand is the one command that reproduces a seed exactly.
func ReplayCommand(o Options) string {
	o = o.Effective()
	var b strings.Builder
	fmt.Fprintf(&b, "meridian sim --protocol %s --seeds 1 --seed-start %d --faults %s --topology %s --read-level %s --write-level %s",
		o.Protocol, o.Seed, FaultList(o.Faults), o.Topology.Name, o.ReadLevel, o.WriteLevel)
	if o.Mutation != "" {
		fmt.Fprintf(&b, " --mutate %s", o.Mutation)
	}
	if o.Roam {
		b.WriteString(" --roam")
	}
	if o.LoseRegion {
		b.WriteString(" --lose-region")
	}
	if o.NoSessions {
		b.WriteString(" --sessions=false")
	}
	if o.Linearizability {
		b.WriteString(" --linearizability")
	}
	if o.FreshReads {
		b.WriteString(" --fresh-reads")
	}
	for _, k := range sortedOptionKeys(o.KeyspaceOptions) {
		fmt.Fprintf(&b, " --option %s=%s", k, o.KeyspaceOptions[k])
	}
	if o.ReplicaRegions > 0 {
		fmt.Fprintf(&b, " --replica-regions %d", o.ReplicaRegions)
	}
	// Always written: a protocol's default may differ from 1 (two for some), and a replay
	// without it would run another cluster.
	if o.NodesPerRegion > 0 {
		fmt.Fprintf(&b, " --nodes-per-region %d", o.NodesPerRegion)
	}
	if o.ReadFraction != 0.5 {
		fmt.Fprintf(&b, " --read-fraction %g", o.ReadFraction)
	}
	if o.ScanFraction > 0 {
		fmt.Fprintf(&b, " --scan-fraction %g", o.ScanFraction)
	}
	if o.Keys != 3 {
		fmt.Fprintf(&b, " --keys %d", o.Keys)
	}
	if o.ClientsPerRegion != 2 {
		fmt.Fprintf(&b, " --clients-per-region %d", o.ClientsPerRegion)
	}
	if o.ClockStepEvery > 0 {
		fmt.Fprintf(&b, " --clock-step-every %s", o.ClockStepEvery)
	}
	if o.RequestTimeout != time.Second {
		fmt.Fprintf(&b, " --request-timeout %s", o.RequestTimeout)
	}
	if o.RepartitionEvery > 0 {
		fmt.Fprintf(&b, " --repartition-every %s", o.RepartitionEvery)
	}
	if o.MoveEvery > 0 {
		fmt.Fprintf(&b, " --move-every %s", o.MoveEvery)
	}
	if o.MoveCheckAfter > 0 && o.MoveCheckAfter != defaultMoveCheckAfter {
		fmt.Fprintf(&b, " --move-check-after %s", o.MoveCheckAfter)
	}
	if o.PartitionEvery > 0 {
		fmt.Fprintf(&b, " --partition-every %s", o.PartitionEvery)
	}
	if o.Quiesce != 5*time.Second {
		fmt.Fprintf(&b, " --quiesce %s", o.Quiesce)
	}
	if o.MaxClockOffset != 2*time.Millisecond {
		fmt.Fprintf(&b, " --max-clock-offset %s", o.MaxClockOffset)
	}
	if o.DelaySpikeProb > 0 {
		fmt.Fprintf(&b, " --delay-spike-prob %g", o.DelaySpikeProb)
	}
	b.WriteString(" --verbose")
	return b.String()
}

// PrintFailure explains a failing seed and how to replay it.
func PrintFailure(w io.Writer, o Options, rep *Report) {
	o.Seed = rep.Seed
	fmt.Fprintf(w, "seed %d: %d violation(s) in %d operations (%d crashes, %d partitions):\n", rep.Seed, len(rep.Violations), rep.Ops, rep.Crashes, rep.Partitions)
	for _, v := range rep.Violations {
		fmt.Fprintf(w, "  %s\n", v.Error())
	}
	fmt.Fprintf(w, "replay: %s\n", ReplayCommand(o))
}

// MutationResult is how a mutation fared against the checkers.
type MutationResult struct {
	Mutation    string
	Description string
	Caught      bool
	SeedsTried  int
	Seed        uint64 // the first seed that caught it
	Checker     string
}

// MutationOptions returns base with the settings that let mutation m of base.Protocol show
// (its protocol's simulation defaults and engine.SimHints), without the mutation itself: a
// correct protocol must pass under them too.
func MutationOptions(base Options, m string) (Options, error) {
	if base.Protocol == "" {
		base.Protocol = "quorum"
	}
	p, err := LookupProtocol(base.Protocol)
	if err != nil {
		return base, err
	}
	prepare(p, &base)
	return mutationOptions(p, base, m)
}

func mutationOptions(p Protocol, base Options, m string) (Options, error) {
	o := base
	o.Faults = maps.Clone(base.Faults)
	err := applyMutationHints(p, m, &o)
	return o, err
}

// RunMutations runs each mutation of the protocol over up to maxSeeds seeds with every
// fault on, and records how many seeds it took the checkers to catch it. Each mutation's
// seeds run on workers goroutines (0: one per core); the seed reported is the lowest that
// caught it, whatever the number of workers.
func RunMutations(base Options, maxSeeds, workers int, out io.Writer) ([]MutationResult, error) {
	if base.Protocol == "" {
		base.Protocol = "quorum"
	}
	p, err := LookupProtocol(base.Protocol)
	if err != nil {
		return nil, err
	}
	prepare(p, &base)
	base.ensureDefaults()
	var results []MutationResult
	for _, m := range MutationNames(p) {
		desc, _ := MutationDescription(p, m)
		o, err := mutationOptions(p, base, m)
		if err != nil {
			return results, err
		}
		o.Mutation = m
		r := MutationResult{Mutation: m, Description: desc}
		_, err = seedpool.Run(maxSeeds, workers, func(i int) (*Report, error) {
			o := o
			o.Seed = base.Seed + uint64(i)
			rep, err := Run(o)
			if err != nil {
				return nil, fmt.Errorf("mutation %s, seed %d (replay: %s): %w", m, o.Seed, ReplayCommand(o), err)
			}
			return rep, nil
		}, func(i int, rep *Report) bool {
			r.SeedsTried = i + 1
			if len(rep.Violations) > 0 {
				r.Caught, r.Seed, r.Checker = true, rep.Seed, rep.Violations[0].Checker
				return true
			}
			return false
		})
		if err != nil {
			return results, err
		}
		if out != nil {
			if r.Caught {
				fmt.Fprintf(out, "  mutation %-16s caught by %-24s after %3d seed(s) (seed %d): %s\n", m, r.Checker, r.SeedsTried, r.Seed, desc)
			} else {
				fmt.Fprintf(out, "  mutation %-16s NOT CAUGHT in %d seeds: %s\n", m, r.SeedsTried, desc)
			}
		}
		results = append(results, r)
	}
	return results, nil
}

func sortedOptionKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
