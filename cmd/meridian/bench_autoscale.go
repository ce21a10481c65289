package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/tools/repro"
	"meridian/internal/tools/scalesim"
)

// benchAutoscaleCmd is `meridian bench autoscale`: the autoscaling policies on the model of a
// region's nodes (internal/tools/scalesim), over one synthetic diurnal trace with flash crowds.
func benchAutoscaleCmd() *cobra.Command {
	var o scalesim.Options
	var interference, emulated bool
	var eo repro.AutoscaleOptions
	var policies, jsonOut, mdOut string
	var repeats int
	var repeatLoad float64
	cmd := &cobra.Command{
		Use:   "autoscale [--days N] [--flash-factor X] [--seed S]",
		Short: "Autoscaling policies (reactive HPA-like, step, proactive, ProRenaTa, oracle) on a model of a region's nodes: SLO violations, utilisation, node-seconds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Days <= o.WarmupDays && cmd.Flags().Changed("days") {
				return fmt.Errorf("bench autoscale: --days %d must exceed the %d warm-up days", o.Days, max(o.WarmupDays, 2))
			}
			if repeats != 0 {
				if !emulated || interference {
					return fmt.Errorf("bench autoscale: --repeat needs --emulated and not --interference")
				}
				eo.Log = os.Stderr
				res, err := repro.AutoscaleRepeat(cmd.Context(), repro.AutoscaleRepeatOptions{AutoscaleOptions: eo, Repeats: repeats, LoadOps: repeatLoad})
				if err != nil {
					return fmt.Errorf("bench autoscale --repeat: %w", err)
				}
				md := res.Markdown()
				fmt.Print(md)
				return writeReproOutputs("bench autoscale", md, mdOut, jsonOut, res)
			}
			if emulated {
				eo.Interference = interference
				if cmd.Flags().Changed("policies") || !interference {
					eo.Policies = splitTrimmed(policies)
				}
				eo.Log = os.Stderr
				res, err := repro.AutoscaleEmulated(cmd.Context(), eo)
				if err != nil {
					return fmt.Errorf("bench autoscale --emulated: %w", err)
				}
				md := res.Markdown()
				fmt.Print(md)
				return writeReproOutputs("bench autoscale", md, mdOut, jsonOut, res)
			}
			if interference {
				// Hubbub-scale: two nodes slowed 1.5× and 2× for the middle half of the
				// measured day; oblivious vs aware ProRenaTa.
				o.Days = max(o.Days, 3)
				rs, err := scalesim.CompareInterference(o, scalesim.InterferenceOptions{})
				if err != nil {
					return fmt.Errorf("bench autoscale: %w", err)
				}
				fmt.Print(scalesim.InterferenceMarkdown(rs))
				return nil
			}
			rs, err := scalesim.Compare(o)
			if err != nil {
				return fmt.Errorf("bench autoscale: %w", err)
			}
			fmt.Print(scalesim.Markdown(o, rs))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Days, "days", 4, "days of the trace (the first two are warm-up, not measured)")
	f.DurationVar(&o.Period, "period", 15*time.Second, "control period")
	f.Float64Var(&o.FlashFactor, "flash-factor", 1.5, "load multiplier of the flash crowds")
	f.Uint64Var(&o.Seed, "seed", 1, "seed")
	f.BoolVar(&emulated, "emulated", false, "run the policies on the emulated cluster (real nodes, joins and decommissions; one compressed day) instead of the model")
	f.StringVar(&policies, "policies", "prorenata,reactive", "with --emulated: policies run")
	f.IntVar(&eo.Season, "season", 24, "with --emulated: periods in the day")
	f.DurationVar(&eo.Period, "emulated-period", 5*time.Second, "with --emulated: the control period")
	f.IntVar(&repeats, "repeat", 0, "with --emulated: instead of a day, join one node to a region of 3 and decommission it again, this many times at a constant load (the spread of identical actions, against the migration model's predictions)")
	f.Float64Var(&repeatLoad, "repeat-load", 0, "with --repeat: the constant load in ops/s (default half the region's capacity)")
	f.StringVar(&jsonOut, "json", "", "with --emulated: write the results as JSON")
	f.StringVar(&mdOut, "markdown", "", "with --emulated: write the tables as Markdown")
	f.BoolVar(&interference, "interference", false, "Hubbub-scale: slow two nodes 1.5× and 2× mid-run; interference-oblivious vs aware ProRenaTa (with --emulated: on the emulated cluster, the placement driver's detector)")
	return cmd
}
