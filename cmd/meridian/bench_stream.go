package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/tools/streambench"
)

// benchStreamCmd is `meridian bench stream`: thesis Fig. 5.10 (ingest throughput and the
// median at 70% of the peak against the batch size) for Meridian's stream engine beside
// Kafka 4.4 and InfluxDB 1.6 in one run; `bench stream reads` is Fig. 5.11 and the summary
// index's aggregates. docs/streams-bench.md.
func benchStreamCmd() *cobra.Command {
	var (
		o                      streambench.Options
		batches, acks, skip    string
		targets                string
		outDir, jsonOut, mdOut string
	)
	cmd := &cobra.Command{
		Use:   "stream [--batches 100,1000,10000,30000] [--duration 10s] [--skip-peers kafka,influxdb]",
		Short: "Stream ingest (thesis Fig. 5.10): Meridian's stream engine vs Kafka 4.4 and InfluxDB, throughput and latency against the batch size",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Batches, err = parseInts(batches); err != nil {
				return fmt.Errorf("bench stream: --batches: %w", err)
			}
			o.Acks, o.Skip, o.Targets = splitTrimmed(acks), splitTrimmed(skip), splitTrimmed(targets)
			o.Log = os.Stderr
			rep, err := streambench.Run(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench stream: %w", err)
			}
			md := rep.Markdown()
			fmt.Print(md)
			return writeStreamOutputs("bench stream", "stream", outDir, mdOut, jsonOut, md, rep, rep.Charts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&batches, "batches", "100,1000,10000,30000", "batch sizes (records of 16 bytes per append)")
	f.StringVar(&acks, "acks", "local,memory", "Meridian's acknowledgement levels, a row each: local (fsynced), memory (written)")
	f.StringVar(&skip, "skip-peers", "", "systems not run: kafka, influxdb (and meridian)")
	f.StringVar(&targets, "targets", "inproc,grpc", fmt.Sprintf("Meridian's target kinds, rows each side by side (%v): inproc is the engine in this process, grpc a `meridian server` process on loopback", streambench.Kinds()))
	f.StringVar(&targets, "target", "inproc,grpc", "alias of --targets")
	f.StringVar(&o.Exe, "exe", "", "the meridian binary the grpc target's server runs (default: this executable)")
	f.IntVar(&o.Appenders, "appenders", 4, "Meridian appenders, each with a stream of its own")
	f.IntVar(&o.KafkaInFlight, "kafka-inflight", 4, "Kafka producers, each with one batch in flight")
	f.IntVar(&o.InfluxWriters, "influx-writers", 4, "InfluxDB writers, each with a series of its own")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "each run's length (two runs per system and batch size: the peak and 70% of it)")
	f.DurationVar(&o.Warmup, "warmup", 2*time.Second, "the start of each run left out of its measurements")
	f.Int64Var(&o.MaxRecords, "max-records", 500_000_000, "each run's bound in records")
	f.Float64Var(&o.Fraction, "load", 0.7, "the loaded run's share of the peak")
	f.BoolVar(&o.Poisson, "poisson", true, "Poisson arrivals in the loaded runs (as the thesis's clients); false: even spacing")
	f.BoolVar(&o.KafkaFsync, "kafka-fsync", false, "Kafka fsyncs every append before acknowledging it (log.flush.interval.messages=1)")
	f.StringVar(&o.KafkaLibDir, "kafka-lib", "", "Kafka's jar directory (default $MERIDIAN_KAFKA_LIB, else scripts/fetch-kafka.sh's cache)")
	f.StringVar(&o.KafkaAddr, "kafka-addr", "127.0.0.61", "the loopback address Kafka binds")
	f.StringVar(&o.Dir, "scratch", "", "scratch directory for the streams and the peers' data (default: a temporary one, removed)")
	f.BoolVar(&o.Keep, "keep", false, "keep the scratch directory")
	f.StringVar(&outDir, "out", "", "write stream.md, stream.json and the charts (PNG and SVG) into this directory")
	f.StringVar(&jsonOut, "json", "", "write the results as JSON")
	f.StringVar(&mdOut, "markdown", "", "write the table as Markdown")
	cmd.AddCommand(benchStreamReadsCmd(), benchStreamBurstsCmd(), benchStreamHistoricalCmd(), benchStreamHistClientsCmd())
	return cmd
}

// benchStreamBurstsCmd is `meridian bench stream bursts`: Figs. 5.8–5.9.
func benchStreamBurstsCmd() *cobra.Command {
	var (
		o                      streambench.BurstsOptions
		capacityMiB, cacheMiB  int64
		outDir, jsonOut, mdOut string
	)
	cmd := &cobra.Command{
		Use:   "bursts [--duration 60s] [--upload-workers 8] [--steady-rate 500000] [--burst-rate 1500000]",
		Short: "Steady ingest with bursts (thesis Figs. 5.8–5.9): throughput, cache, local store, evictable share and upload queue over time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if capacityMiB < 0 || cacheMiB < 0 {
				return fmt.Errorf("bench stream bursts: --local-mib and --cache-mib must not be negative")
			}
			o.CapacityBytes, o.CacheBytes = capacityMiB<<20, cacheMiB<<20
			o.Log = os.Stderr
			rep, err := streambench.RunBursts(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench stream bursts: %w", err)
			}
			md := rep.Markdown()
			fmt.Print(md)
			return writeStreamOutputs("bench stream bursts", "bursts", outDir, mdOut, jsonOut, md, rep, rep.Charts)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 60*time.Second, "the run's length")
	f.DurationVar(&o.SampleEvery, "sample", time.Second, "sampling period")
	f.Float64Var(&o.BurstProbability, "burst-probability", 0.2, "probability that a second is a burst (the thesis's 20%)")
	f.Uint64Var(&o.Seed, "seed", 571, "seed of the burst schedule")
	f.IntVar(&o.RecordBytes, "record-bytes", 64, "record size (the thesis's 64 bytes in 5.7.1)")
	f.IntVar(&o.BatchRecords, "batch", 1000, "records per append")
	f.IntVar(&o.Appenders, "appenders", 8, "clients, each appending to a stream of its own")
	f.Float64Var(&o.SteadyRate, "steady-rate", 500_000, "offered records per second outside bursts")
	f.Float64Var(&o.BurstRate, "burst-rate", 1_500_000, "offered records per second during a burst")
	f.Int64Var(&capacityMiB, "local-mib", 512, "the local store's capacity, MiB")
	f.Int64Var(&cacheMiB, "cache-mib", 256, "the buffer cache's capacity, MiB")
	f.IntVar(&o.UploadWorkers, "upload-workers", 8, "upload workers (Fig. 5.9: fewer than the ingest needs)")
	f.Float64Var(&o.HighWater, "high-water", 0, "local store level above which appends are slowed (0: the store's default, 0.9)")
	f.DurationVar(&o.MaxSlowdown, "max-slowdown", 0, "bound of one append's wait for space (0: the store's default, 1s)")
	f.IntVar(&o.Retries, "retries", 5, "retries of a declined append before the client drops it")
	f.StringVar(&o.ObjectStore, "object-store", "mem", "where uploads go: mem or dir (behind the S3 model)")
	f.BoolVar(&o.NoModel, "no-model", false, "upload without the S3 latency and bandwidth model")
	f.StringVar(&o.Dir, "scratch", "", "scratch directory (default: a temporary one, removed)")
	f.StringVar(&outDir, "out", "", "write bursts.md, bursts.json and the charts (PNG and SVG) into this directory")
	f.StringVar(&jsonOut, "json", "", "write the results as JSON")
	f.StringVar(&mdOut, "markdown", "", "write the tables as Markdown")
	return cmd
}

// benchStreamHistoricalCmd is `meridian bench stream historical`: Fig. 5.12.
func benchStreamHistoricalCmd() *cobra.Command {
	var (
		o                      streambench.HistoricalOptions
		outDir, jsonOut, mdOut string
	)
	cmd := &cobra.Command{
		Use:   "historical [--phase1 30s] [--phase2 30s] [--append-rate 500000] [--object-store auto|s3|dir] [--pin]",
		Short: "Historical reads at a second node (thesis Fig. 5.12): the primary's appends and recent reads with and without historical range reads served from the object store by another server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.HistReaders == 0 {
				o.HistReaders = -1 // the library's 0 means the default
			}
			o.Log = os.Stderr
			rep, err := streambench.RunHistorical(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench stream historical: %w", err)
			}
			md := rep.Markdown()
			fmt.Print(md)
			return writeStreamOutputs("bench stream historical", "historical", outDir, mdOut, jsonOut, md, rep, rep.Charts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Streams, "streams", 2, "streams at the primary, each with an appender and a recent reader")
	f.IntVar(&o.Batch, "batch", 1000, "records per append and per recent read")
	f.Float64Var(&o.AppendRate, "append-rate", 500_000, "offered appends, records per second over all streams (open loop)")
	f.Float64Var(&o.ReadRate, "read-rate", 0, "offered recent reads at the primary, records per second (0: the append rate)")
	f.StringVar(&o.Ack, "ack", "memory", "the streams' acknowledgement level: memory (the thesis's) or local")
	f.DurationVar(&o.Phase1, "phase1", 30*time.Second, "phase 1: appends and recent reads only (chunks are uploaded meanwhile)")
	f.DurationVar(&o.Phase2, "phase2", 30*time.Second, "phase 2: the same plus historical reads at the reader")
	f.DurationVar(&o.Warmup, "warmup", 2*time.Second, "the start of phase 1 left out of its statistics")
	f.IntVar(&o.HistReaders, "hist-readers", 4, "historical clients at the reader node (0: none, a control run whose phase 2 is like phase 1)")
	f.IntVar(&o.HistRecords, "hist-records", 1_000_000, "records per historical range read (at most half of a stream's uploaded records)")
	f.DurationVar(&o.On, "on", 5*time.Second, "historical clients read back to back for this long…")
	f.DurationVar(&o.Off, "off", 5*time.Second, "…then idle for this long")
	f.StringVar(&o.ObjectStore, "object-store", "auto", "auto (VersityGW if its binary is cached, else dir), s3 (VersityGW as its own process), dir (a shared directory)")
	f.StringVar(&o.Cache, "cache", "4MiB", "each server's buffer cache (small, so that historical reads go to the object store)")
	f.BoolVar(&o.Pin, "pin", false, "pin the primary and its clients to CPU 0, the reader, the object store and the historical clients to CPU 1 (taskset)")
	f.StringVar(&o.Exe, "exe", "", "the meridian binary the servers run (default: this executable)")
	f.StringVar(&o.VersityGW, "versitygw", "", "the versitygw binary (default: $MERIDIAN_VERSITYGW, else scripts/fetch-versitygw.sh's cache)")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the read positions")
	f.StringVar(&o.Dir, "scratch", "", "scratch directory (default: a temporary one, removed)")
	f.BoolVar(&o.Keep, "keep", false, "keep the scratch directory")
	f.StringVar(&outDir, "out", "", "write historical.md, historical.json and the chart (PNG and SVG) into this directory")
	f.StringVar(&jsonOut, "json", "", "write the results as JSON")
	f.StringVar(&mdOut, "markdown", "", "write the tables as Markdown")
	return cmd
}

// benchStreamHistClientsCmd is the historical benchmark's clients in a process of their own
// (started by `bench stream historical`, not by hand).
func benchStreamHistClientsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    streambench.HistClientsCommand + " <options JSON>",
		Short:  "The historical benchmark's clients (started by bench stream historical)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var o streambench.HistClientOptions
			if err := json.Unmarshal([]byte(args[0]), &o); err != nil {
				return fmt.Errorf("%s: %w", streambench.HistClientsCommand, err)
			}
			res, closeClient, err := streambench.RunHistClients(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("%s: %w", streambench.HistClientsCommand, err)
			}
			defer closeClient()
			if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
				return err
			}
			// Stay, with the connections, until the benchmark has read the sockets: it
			// closes our standard input.
			_, err = io.Copy(io.Discard, os.Stdin)
			return err
		},
	}
}

// benchStreamReadsCmd is `meridian bench stream reads`: Fig. 5.11 and the aggregates.
func benchStreamReadsCmd() *cobra.Command {
	var (
		o                      streambench.ReadsOptions
		shares                 string
		outDir, jsonOut, mdOut string
	)
	cmd := &cobra.Command{
		Use:   "reads [--write-shares 1,0.8,0.5,0.2] [--rate 1000000] [--duration 10s]",
		Short: "Recent reads (thesis Fig. 5.11) at several write shares, and aggregates from the summary index against a scan",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range splitTrimmed(shares) {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil || v < 0 || v > 1 {
					return fmt.Errorf("bench stream reads: --write-shares %q: want shares in [0, 1]", s)
				}
				o.WriteShares = append(o.WriteShares, v)
			}
			if o.AggregateRecords == 0 {
				o.AggregateRecords = -1 // the library's 0 means the default
			}
			o.Log = os.Stderr
			rep, err := streambench.RunReads(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("bench stream reads: %w", err)
			}
			md := rep.Markdown()
			fmt.Print(md)
			return writeStreamOutputs("bench stream reads", "reads", outDir, mdOut, jsonOut, md, rep, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&shares, "write-shares", "1,0.8,0.5,0.2", "shares of writes in the request mix (the rest are reads)")
	f.IntVar(&o.Streams, "streams", 4, "streams, each with a worker of its own that writes and reads it")
	f.Float64Var(&o.Rate, "rate", 1_000_000, "offered load, records per second (requests of 1000 records: writes and reads alike)")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "each write share's run")
	f.DurationVar(&o.Warmup, "warmup", 2*time.Second, "the start of each run left out of its measurements")
	f.StringVar(&o.Ack, "ack", "memory", "the streams' acknowledgement level: memory (the thesis's) or local")
	f.Int64Var(&o.AggregateRecords, "aggregate-records", 1_000_000, "records in the aggregate's range (0: skip the aggregates)")
	f.StringVar(&o.Dir, "scratch", "", "scratch directory (default: a temporary one, removed)")
	f.StringVar(&outDir, "out", "", "write reads.md and reads.json into this directory")
	f.StringVar(&jsonOut, "json", "", "write the results as JSON")
	f.StringVar(&mdOut, "markdown", "", "write the tables as Markdown")
	return cmd
}

// parseInts parses "100,1000".
func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range splitTrimmed(s) {
		v, err := strconv.Atoi(p)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q: want positive integers", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// writeStreamOutputs writes the Markdown and JSON where asked, and into outDir as base.md and
// base.json (with the charts, if any) when given.
func writeStreamOutputs(command, base, outDir, mdPath, jsonPath, md string, res any, charts func(dir string) ([]string, error)) error {
	if err := writeReproOutputs(command, md, mdPath, jsonPath, res); err != nil {
		return err
	}
	if outDir == "" {
		return nil
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	if err := writeReproOutputs(command, md, filepath.Join(outDir, base+".md"), filepath.Join(outDir, base+".json"), res); err != nil {
		return err
	}
	if charts != nil {
		files, err := charts(outDir)
		if err != nil {
			return fmt.Errorf("%s: charts: %w", command, err)
		}
		for _, f := range files {
			fmt.Fprintf(os.Stderr, "wrote %s\n", f)
		}
	}
	return nil
}
