//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/tools/loopback"
)

// LoopbackSideBySide is what bench loopback compares by default.
const LoopbackSideBySide = "quorum:QUORUM/QUORUM,etcd:linearizable"

func benchLoopbackCmd() *cobra.Command {
	var f benchFlags
	var topo, dir string
	var limit time.Duration
	cmd := &cobra.Command{
		Use:   "loopback [--targets LIST] [--workload a] [--records N] [--max --p99 D] [--warmup D] [--json FILE]",
		Short: "Meridian and etcd as real processes on 127.0.0.2–4 (no lab router), one after the other under the same load",
		Long: `bench loopback starts three real meridian server processes on 127.0.0.2, .3 and .4 (one
per region of --topology), and for etcd configurations three etcd members on the same
addresses, and runs each configuration in turn with the same YCSB clients. Only one system
runs at a time. With --max it runs the open-loop throughput search of bench run --max and
reports, per system, ops/s, p50/p99, ops/s per node, the machine's CPU and CPU µs per
operation (the whole machine's and the servers' own). Needs etcd on PATH for etcd targets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := loadTopology(topo)
			if err != nil {
				return err
			}
			if dir == "" {
				d, err := os.MkdirTemp("", "meridian-loopback-")
				if err != nil {
					return fmt.Errorf("bench loopback: %w", err)
				}
				defer os.RemoveAll(d)
				dir = d
			}
			lt, err := loopback.NewTarget(loopback.Options{Dir: dir, Topology: t, Log: os.Stderr})
			if err != nil {
				return err
			}
			defer lt.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), limit)
			defer cancel()
			cmd.SetContext(ctx)
			f.loopback = lt
			return runBench(cmd, f)
		},
	}
	addBenchFlags(cmd, &f)
	fl := cmd.Flags()
	fl.StringVar(&topo, "topology", "examples/topologies/lan-3.yaml", "regions (one node each) and the RTTs the nodes believe in (built-in name or file); loopback adds no delay")
	fl.StringVar(&dir, "dir", "", "working directory: configurations, data, logs (default: a temporary directory, removed)")
	fl.DurationVar(&limit, "timeout", 45*time.Minute, "the whole run's time limit")
	fl.Lookup("protocols").Usage = "the targets (same as --targets)"
	fl.StringVar(&f.protocols, "targets", LoopbackSideBySide, "configurations to run: Meridian's PROTOCOL[:READ/WRITE][:opt=v], etcd:linearizable|serializable")
	return cmd
}
