package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/bench"
)

func benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks (commands, not tests)"}
	var o bench.ThroughputOptions
	var ops []string
	var jsonPath string
	tp := &cobra.Command{
		Use:   "throughput --endpoint HOST:PORT [--ops put,get]",
		Short: "Closed-loop throughput of one node over gRPC: ops/s, p50/p99, CPU per operation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Endpoint == "" {
				return fmt.Errorf("bench throughput: --endpoint is required")
			}
			var results []*bench.ThroughputResult
			for _, op := range ops {
				oo := o
				oo.Op = op
				r, err := bench.Throughput(cmd.Context(), oo)
				if err != nil {
					return err
				}
				r.Print(os.Stdout)
				results = append(results, r)
			}
			if jsonPath != "" {
				b, _ := json.MarshalIndent(results, "", "  ")
				if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("bench: write %s: %w", jsonPath, err)
				}
			}
			return nil
		},
	}
	tp.Flags().StringVar(&o.Endpoint, "endpoint", "", "node address HOST:PORT")
	tp.Flags().StringVar(&o.Keyspace, "keyspace", "bench", "keyspace")
	tp.Flags().StringSliceVar(&ops, "ops", []string{"put", "get"}, "operations to measure, in order")
	tp.Flags().IntVar(&o.Concurrency, "concurrency", 64, "requests in flight")
	tp.Flags().IntVar(&o.ValueBytes, "value-bytes", 100, "value size")
	tp.Flags().IntVar(&o.Keys, "keys", 100000, "key space size")
	tp.Flags().DurationVar(&o.Duration, "duration", 10*time.Second, "duration per operation")
	tp.Flags().StringVar(&o.Consistency, "consistency", "ONE", "consistency level")
	tp.Flags().IntVar(&o.ServerPID, "server-pid", 0, "server process to sample CPU time from")
	tp.Flags().StringVar(&jsonPath, "json", "", "write results as JSON")
	cmd.AddCommand(tp)
	return cmd
}
