package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"meridian/internal/tools/chart"
	"meridian/internal/tools/flowsim"
)

// parseTestbedFlags reads --oversubscription RACKxPOD and --locality R,P,O into the thesis's
// testbed and a locality mix.
func parseTestbedFlags(what, oversub, locality string) (flowsim.Testbed, [3]float64, error) {
	t := flowsim.DefaultTestbed()
	var loc [3]float64
	if oversub != "" {
		rack, pod, ok := strings.Cut(oversub, "x")
		r, err1 := strconv.ParseFloat(rack, 64)
		p, err2 := strconv.ParseFloat(pod, 64)
		if !ok || err1 != nil || err2 != nil {
			return t, loc, fmt.Errorf("%s: --oversubscription %q: want RACKxPOD, e.g. 2x4", what, oversub)
		}
		t.RackOversubscription, t.PodOversubscription = r, p
	}
	parts := splitTrimmed(locality)
	if len(parts) != 3 {
		return t, loc, fmt.Errorf("%s: --locality %q: want three shares R,P,O", what, locality)
	}
	for i, p := range parts {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return t, loc, fmt.Errorf("%s: --locality %q: %w", what, locality, err)
		}
		loc[i] = v
	}
	return t, loc, nil
}

// benchMayflowerCmd is `meridian bench mayflower`: the Mayflower thesis's replica-and-path
// selection schemes (3.4.2) on the flow-level model of its testbed (3.4.1), same seeds for
// every scheme.
func benchMayflowerCmd() *cobra.Command {
	var (
		o                                        flowsim.Options
		schemes, locality, oversub, mdOut, jsOut string
		chartOut                                 string
		seeds                                    int
		first                                    uint64
		jobMB, chunkMB                           float64
	)
	cmd := &cobra.Command{
		Use:   "mayflower [--schemes LIST] [--seeds N] [--jobs N] [--rate JOBS/S/HOST] [--locality R,P,O] [--oversubscription RACKxPOD]",
		Short: "Mayflower's replica-path selection against nearest, Sinbad-R and ECMP on a flow-level model of the thesis's testbed (Figs. 3.3-3.8)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []flowsim.Scheme
			if schemes == "all" {
				list = flowsim.Schemes
			} else {
				for _, s := range splitTrimmed(schemes) {
					list = append(list, flowsim.Scheme(s))
				}
			}
			var err error
			if o.Testbed, o.Locality, err = parseTestbedFlags("bench mayflower", oversub, locality); err != nil {
				return err
			}
			o.JobBytes, o.ChunkBytes = jobMB*(1<<20), chunkMB*(1<<20)
			c, err := flowsim.Compare(o, list, first, seeds)
			if err != nil {
				return fmt.Errorf("bench mayflower: %w", err)
			}
			md := c.Markdown()
			fmt.Print(md)
			if chartOut != "" {
				var series []chart.Series
				for _, r := range c.Results {
					s := chart.Series{Name: string(r.Scheme)}
					for _, p := range c.CDF(r.Scheme, 200) {
						s.Points = append(s.Points, [2]float64{p[0] * 1000, p[1]})
					}
					series = append(series, s)
				}
				if err := chart.CombinedCDF("Job completion times (Mayflower thesis Fig. 3.3b), flow-level testbed", series, chartOut); err != nil {
					return fmt.Errorf("bench mayflower: --chart: %w", err)
				}
			}
			return writeReproOutputs("bench mayflower", md, mdOut, jsOut, c)
		},
	}
	f := cmd.Flags()
	f.StringVar(&schemes, "schemes", "all", "schemes, comma-separated: nearest-ecmp, nearest-m, sinbad-r-ecmp, sinbad-r-m, mayflower-b, mayflower-p (the thesis's split rule), mayflower-p-makespan; or all")
	f.IntVar(&seeds, "seeds", 3, "seeds per scheme (the same for every scheme)")
	f.Uint64Var(&first, "seed-start", 1, "first seed")
	f.IntVar(&o.Jobs, "jobs", 2000, "read jobs per seed")
	f.Float64Var(&o.RatePerHost, "rate", 0.1, "Poisson job arrivals per second per host (the thesis's λ)")
	f.StringVar(&locality, "locality", "0.5,0.3,0.2", "client in the primary's rack, pod, another pod (R,P,O)")
	f.StringVar(&oversub, "oversubscription", "2x4", "oversubscription at the racks x at the pods (the product is the network's; the thesis: 8)")
	f.IntVar(&o.Files, "files", 1000, "files (one block each)")
	f.Float64Var(&o.Zipf, "zipf", 1.1, "Zipf skew of file popularity (> 1)")
	f.Float64Var(&jobMB, "job-mb", 128, "a job's size, MiB")
	f.Float64Var(&chunkMB, "chunk-mb", 32, "a chunk's size, MiB")
	f.IntVar(&o.Background, "background", 0, "long-lived background flows between random hosts")
	f.Float64Var(&o.PollInterval, "poll", 1, "seconds between the Flowserver's counter polls")
	f.BoolVar(&o.ClientEdgeBound, "client-edge-bound", false, "every link but the clients' own edge links 1000x faster: the bound no replica or path choice can beat")
	f.BoolVar(&o.EndpointOnly, "endpoint-only", false, "the Flowserver learns only what the reads' endpoints report (no switch counters; background flows unseen, their load inferred from the reads' rates)")
	f.BoolVar(&o.NoInference, "no-inference", false, "with --endpoint-only: infer no unseen load (only the reads placed)")
	f.BoolVar(&o.EndpointBound, "endpoint-bound", false, "with --endpoint-only, a diagnostic: give the view the true background flows of each link once a read was bottlenecked with them (peeks at the simulated truth)")
	f.StringVar(&jsOut, "json", "", "write the results as JSON")
	f.StringVar(&mdOut, "markdown", "", "write the table as Markdown")
	f.StringVar(&chartOut, "chart", "", "draw the schemes' completion-time CDFs (.png or .svg)")
	cmd.AddCommand(benchMayflowerProductCmd())
	return cmd
}
