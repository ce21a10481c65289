package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"meridian/internal/tools/repro"
)

// benchBwManCmd is `meridian bench bwman`: client p99 and migration time while a join, a
// decommission and a re-replication run, unthrottled, under static caps and under BwMan.
func benchBwManCmd() *cobra.Command {
	var (
		o                                         repro.BwManOptions
		topoName, bandwidth, caps, modes, jsonOut string
		mdOut                                     string
	)
	cmd := &cobra.Command{
		Use:   "bwman [--modes off,static,auto] [--static-caps 0.1,0.25,0.5] [--rate OPS] [--slo D]",
		Short: "BwMan on the emulated cluster: SLO-violating windows, p99 spread and migration times, unthrottled vs static caps vs BwMan",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topo, err := loadTopology(topoName)
			if err != nil {
				return fmt.Errorf("bench bwman: %w", err)
			}
			o.Topology = topo
			bw, err := humanize.ParseBytes(bandwidth)
			if err != nil || bw == 0 {
				return fmt.Errorf("bench bwman: --bandwidth %q: want a byte rate such as 16MB", bandwidth)
			}
			o.NodeBandwidth = float64(bw)
			for _, c := range splitTrimmed(caps) {
				v, err := strconv.ParseFloat(c, 64)
				if err != nil || v <= 0 || v > 1 {
					return fmt.Errorf("bench bwman: --static-caps %q: want shares of the link in (0, 1]", c)
				}
				o.StaticCaps = append(o.StaticCaps, v)
			}
			o.Modes = splitTrimmed(modes)
			o.Log = os.Stderr
			res, err := repro.BwManBench(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench bwman: %w", err)
			}
			md := res.Markdown()
			fmt.Print(md)
			return writeReproOutputs("bench bwman", md, mdOut, jsonOut, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&topoName, "topology", "lan-3", "emulated topology (built-in name or file)")
	f.StringVar(&bandwidth, "bandwidth", "2MB", "each node's network bandwidth (bytes per second)")
	f.Float64Var(&o.NodeCapacityOps, "capacity", 500, "each node's service capacity (requests per second)")
	f.Float64Var(&o.RatePerRegion, "rate", 150, "the clients' open-loop rate, ops/s per region")
	f.IntVar(&o.Records, "records", 20000, "records loaded")
	f.IntVar(&o.RecordBytes, "record-bytes", 4096, "value size")
	f.DurationVar(&o.SLO, "slo", 100*time.Millisecond, "the p99 a 1-s window must hold")
	f.StringVar(&caps, "static-caps", "0.25,0.5", "static caps tried, as shares of the bandwidth")
	f.StringVar(&modes, "modes", "off,static,auto", "shapings run: off, static, auto")
	f.Uint64Var(&o.Seed, "seed", 1, "seed")
	f.StringVar(&jsonOut, "json", "", "write the results as JSON")
	f.StringVar(&mdOut, "markdown", "", "write the table as Markdown")
	return cmd
}
