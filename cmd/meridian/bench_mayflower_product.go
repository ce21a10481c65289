package main

import (
	"fmt"
	"os"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"meridian/internal/tools/chart"
	"meridian/internal/tools/repro"
)

// benchMayflowerProductCmd is `meridian bench mayflower product`: Meridian's large reads on the
// emulated cluster with bandwidth-limited interfaces and links and a bootstrap stream in the
// background, under each read selector (docs/mayflower.md, "In the product").
func benchMayflowerProductCmd() *cobra.Command {
	var (
		o                                  repro.LargeReadOptions
		topoName, nodeBW, wanBW, selectors string
		valueSize, chunk, bulkSize         string
		scanPage                           string
		jsonOut, mdOut, readerRegions      string
		chartOut                           string
		replicaRegions                     string
	)
	cmd := &cobra.Command{
		Use:   "product [--selectors nearest,snitch,hedged,mayflower] [--duration D] [--value-size 8MiB]",
		Short: "Large reads in Meridian: nearest vs dynamic snitch vs hedged vs Mayflower, while a node joins (emulated WAN with bandwidths)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topo, err := loadTopology(topoName)
			if err != nil {
				return fmt.Errorf("bench mayflower product: %w", err)
			}
			o.Topology = topo
			rate := func(flag, v string) (float64, error) {
				n, err := humanize.ParseBytes(v)
				if err != nil || n == 0 {
					return 0, fmt.Errorf("bench mayflower product: --%s %q: want a positive byte rate such as 25MB", flag, v)
				}
				return float64(n), nil
			}
			if o.NodeBandwidth, err = rate("node-bandwidth", nodeBW); err != nil {
				return err
			}
			if o.WANBandwidth, err = rate("wan-bandwidth", wanBW); err != nil {
				return err
			}
			size := func(flag, v string) (int, error) {
				n, err := humanize.ParseBytes(v)
				if err != nil || n == 0 || n > 64<<20 {
					return 0, fmt.Errorf("bench mayflower product: --%s %q: want a size from 1 B to 64 MiB", flag, v)
				}
				return int(n), nil
			}
			if o.ValueBytes, err = size("value-size", valueSize); err != nil {
				return err
			}
			if o.ScanPageBytes, err = size("scan-page", scanPage); err != nil {
				return err
			}
			if o.ChunkBytes, err = size("chunk-size", chunk); err != nil {
				return err
			}
			if o.BulkBytes, err = size("bulk-size", bulkSize); err != nil {
				return err
			}
			o.Selectors = splitTrimmed(selectors)
			o.ReaderRegions = splitTrimmed(readerRegions)
			o.ReplicaRegions = splitTrimmed(replicaRegions)
			o.Log = os.Stderr
			res, err := repro.LargeReadBench(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench mayflower product: %w", err)
			}
			md := res.Markdown()
			fmt.Print(md)
			if chartOut != "" {
				var series []chart.Series
				for _, r := range res.Runs {
					s := chart.Series{Name: r.Selector}
					for _, p := range r.CDF() {
						s.Points = append(s.Points, p)
					}
					series = append(series, s)
				}
				if err := chart.CombinedCDF("8 MiB reads during a join, by read selector (Meridian, emulated WAN)", series, chartOut); err != nil {
					return fmt.Errorf("bench mayflower product: --chart: %w", err)
				}
			}
			return writeReproOutputs("bench mayflower product", md, mdOut, jsonOut, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&topoName, "topology", "gcp-meteorshower-3", "emulated topology (built-in name or file)")
	f.StringVar(&nodeBW, "node-bandwidth", "25MB", "each node's interface, each way (bytes per second)")
	f.StringVar(&wanBW, "wan-bandwidth", "12.5MB", "each link between two regions, each way (bytes per second)")
	f.StringVar(&selectors, "selectors", "nearest,snitch,hedged,mayflower", "read selectors to run, one fresh cluster each")
	f.StringVar(&valueSize, "value-size", "8MiB", "size of the values read (2 to 64 MiB; with --scan-records, each record's: 1 KiB to 64 MiB)")
	f.IntVar(&o.ScanRecords, "scan-records", 0, "each read is a scan of this many consecutive records (0: Gets of --value-size)")
	f.StringVar(&scanPage, "scan-page", "512KiB", "scan_page_bytes: a scan page's size (64 KiB to 4 MiB)")
	f.IntVar(&o.ScanWindow, "scan-window", 4, "scan_window_pages: scan pages in flight from each replica a scan reads from (1: a request per page)")
	f.StringVar(&chunk, "chunk-size", "256KiB", "read_chunk_bytes")
	f.StringVar(&bulkSize, "bulk-size", "1MiB", "size of the background keyspace's values")
	f.IntVar(&o.Keys, "keys", 24, "values read")
	f.IntVar(&o.BulkKeys, "bulk-keys", 300, "values of the background keyspace (the join moves its share of them)")
	f.IntVar(&o.Window, "window", 4, "read_window: chunks in flight per replica")
	f.IntVar(&o.NodesPerRegion, "nodes-per-region", 2, "nodes per region before the join")
	f.IntVar(&o.ReadersPerRegion, "readers", 2, "closed-loop readers per region")
	f.StringVar(&readerRegions, "reader-regions", "", "regions with readers, comma-separated (default: every region)")
	f.StringVar(&replicaRegions, "replica-regions", "", "regions holding the read keyspace's replicas, comma-separated (default: every region)")
	f.StringVar(&o.JoinRegion, "join-region", "", "region the node joins (default: the first)")
	f.DurationVar(&o.Duration, "duration", 0, "measured time per selector, from the join's start (default 30s)")
	f.BoolVar(&o.NoJoin, "no-join", false, "no bootstrap stream: the idle network")
	f.Uint64Var(&o.Seed, "seed", 1, "first seed (keys read, values)")
	f.IntVar(&o.Seeds, "seeds", 1, "runs per selector (seeds seed, seed+1, ...), their reads pooled")
	f.StringVar(&jsonOut, "json", "", "write the result as JSON to this file")
	f.StringVar(&mdOut, "markdown", "", "write the Markdown table to this file")
	f.StringVar(&chartOut, "chart", "", "draw the selectors' read-latency CDFs (all regions) to this PNG or SVG file")
	return cmd
}
