package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/tools/scalesim"
)

// benchAutoscaleCmd is `meridian bench autoscale`: the autoscaling policies on the model of a
// region's nodes (internal/tools/scalesim), over one synthetic diurnal trace with flash crowds.
func benchAutoscaleCmd() *cobra.Command {
	var o scalesim.Options
	cmd := &cobra.Command{
		Use:   "autoscale [--days N] [--flash-factor X] [--seed S]",
		Short: "Autoscaling policies (reactive HPA-like, step, proactive, ProRenaTa, oracle) on a model of a region's nodes: SLO violations, utilisation, node-seconds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Days <= o.WarmupDays && cmd.Flags().Changed("days") {
				return fmt.Errorf("bench autoscale: --days %d must exceed the %d warm-up days", o.Days, max(o.WarmupDays, 2))
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
	return cmd
}
