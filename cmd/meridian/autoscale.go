package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"meridian/client"
	"meridian/internal/autoscale"
	"meridian/internal/autoscale/actuate"
	"meridian/internal/config"
)

// autoscaleFlags are `meridian autoscale`'s options.
type autoscaleFlags struct {
	endpoint, configPath, actuator, workDir, metrics string
	regions, hosts, extraArgs, migrationRate         string
	period, duration                                 time.Duration
	season, minNodes, maxNodes                       int
	capacity, utilization                            float64
	// Kubernetes actuator (built with -tags kubernetes).
	namespace, kubeconfig, stsPrefix string
}

// autoscaleCmd is `meridian autoscale`: ProRenaTa's loop over a running cluster
// (docs/elasticity.md, "Autoscaling after ProRenaTa").
func autoscaleCmd() *cobra.Command {
	var f autoscaleFlags
	cmd := &cobra.Command{
		Use:   "autoscale --endpoint ADDR --capacity OPS [--actuator process|kubernetes] [--period 15s] [--season N]",
		Short: "Scale each region's nodes out and in ahead of the predicted load (ProRenaTa: Holt-Winters forecast, migration model, reactive correction); every decision logged and in metrics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAutoscale(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.endpoint, "endpoint", "", "a node's client address HOST:PORT (the admin API)")
	fl.StringVar(&f.configPath, "config", "", "the cluster's configuration file (process actuator: the new nodes read it; the migration rate defaults from its bwman section)")
	fl.StringVar(&f.actuator, "actuator", "process", "process (start `meridian server --join` here, decommission to remove) or kubernetes (scale a StatefulSet per region; needs a binary built with -tags kubernetes)")
	fl.StringVar(&f.workDir, "work-dir", "", "process actuator: where the started nodes keep their data and logs")
	fl.StringVar(&f.hosts, "hosts", "", "process actuator: REGION=HOST,... the address each region's new nodes listen on (default 127.0.0.1)")
	fl.StringVar(&f.extraArgs, "server-args", "", "process actuator: extra `meridian server` arguments, space-separated (e.g. \"--disk-reserve 32MiB\")")
	fl.StringVar(&f.regions, "regions", "", "regions to scale, comma-separated (default: every region in the cluster status)")
	fl.DurationVar(&f.period, "period", 15*time.Second, "control period")
	fl.IntVar(&f.season, "season", 5760, "periods in the load's cycle (a day of 15-s periods)")
	fl.Float64Var(&f.capacity, "capacity", 0, "requests per second one node serves within the SLO (required; measure it with `meridian bench max`)")
	fl.Float64Var(&f.utilization, "target-utilization", 0.7, "share of the capacity a plan aims at")
	fl.IntVar(&f.minNodes, "min-nodes", 1, "least nodes per region")
	fl.IntVar(&f.maxNodes, "max-nodes", 8, "most nodes per region")
	fl.StringVar(&f.migrationRate, "migration-rate", "", "bytes/s one node moves during a scaling action (default: bwman.static_rate, else half of bwman.link_bandwidth, else 32MB)")
	fl.StringVar(&f.metrics, "metrics", "", "serve the loop's metrics on HOST:PORT/metrics")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (0: until interrupted)")
	fl.StringVar(&f.namespace, "namespace", "default", "kubernetes actuator: the namespace of the StatefulSets")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubernetes actuator: kubeconfig file (default: in-cluster configuration)")
	fl.StringVar(&f.stsPrefix, "statefulset-prefix", "meridian-", "kubernetes actuator: region R's StatefulSet is PREFIX+R")
	return cmd
}

func runAutoscale(ctx context.Context, f autoscaleFlags) error {
	if f.endpoint == "" {
		return fmt.Errorf("autoscale: --endpoint is required")
	}
	if !(f.capacity > 0) {
		return fmt.Errorf("autoscale: --capacity is required: the requests per second one node serves within the SLO")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	admin, err := client.Dial(f.endpoint)
	if err != nil {
		return fmt.Errorf("autoscale: %w", err)
	}
	defer admin.Close()
	var cfg *config.Cluster
	if f.configPath != "" {
		if cfg, err = config.Load(f.configPath); err != nil {
			return fmt.Errorf("autoscale: %w", err)
		}
	}
	rate, err := migrationRate(f.migrationRate, cfg)
	if err != nil {
		return err
	}
	maxMoves, perMove := driverRounds(cfg)
	obs := &actuate.Observer{Admin: admin}
	st, err := obs.Refresh(ctx)
	if err != nil {
		return fmt.Errorf("autoscale: %w", err)
	}
	regions := actuate.Regions(st)
	if f.regions != "" {
		regions = splitTrimmed(f.regions)
	}
	if len(regions) == 0 {
		return fmt.Errorf("autoscale: no region to scale")
	}
	var act autoscale.Actuator
	switch f.actuator {
	case "process":
		if f.configPath == "" || f.workDir == "" {
			return fmt.Errorf("autoscale: the process actuator needs --config and --work-dir")
		}
		hosts := map[string]string{}
		for _, kv := range splitTrimmed(f.hosts) {
			r, h, ok := strings.Cut(kv, "=")
			if !ok || r == "" || h == "" {
				return fmt.Errorf("autoscale: --hosts %q: want REGION=HOST,...", f.hosts)
			}
			hosts[r] = h
		}
		act, err = actuate.NewProcesses(actuate.ProcessOptions{Config: f.configPath, WorkDir: f.workDir, Hosts: hosts,
			ExtraArgs: strings.Fields(f.extraArgs), Admin: admin, Log: log})
	case "kubernetes":
		act, err = kubeActuator(f, admin)
	default:
		err = fmt.Errorf("--actuator %q: want process or kubernetes", f.actuator)
	}
	if err != nil {
		return fmt.Errorf("autoscale: %w", err)
	}
	loop := &autoscale.Loop{Controllers: map[string]*autoscale.Controller{}, Act: act, Load: obs.Load, Log: log}
	for _, r := range regions {
		v := actuate.View(st, r)
		c, err := autoscale.New(autoscale.Options{Period: f.period, Season: f.season, CapacityPerNode: f.capacity, TargetUtilization: f.utilization,
			MinNodes: f.minNodes, MaxNodes: f.maxNodes,
			Model: autoscale.MigrationModel{DataBytes: float64(v.Bytes), RateBytesPerSec: rate, Overhead: 5 * time.Second,
				Partitions: v.Replicas, MaxMovesPerNode: maxMoves, PerMove: perMove}})
		if err != nil {
			return fmt.Errorf("autoscale: region %s: %w", r, err)
		}
		loop.Controllers[r] = c
	}
	if f.metrics != "" {
		reg := prometheus.NewRegistry()
		if err := loop.Register(reg); err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Addr: f.metrics, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("autoscale: metrics server", "err", err)
			}
		}()
		defer srv.Close()
	}
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	log.Info("autoscale: running", "regions", regions, "actuator", f.actuator, "period", f.period, "season", f.season,
		"capacity_ops", f.capacity, "migration_rate_bytes", int64(rate))
	t := time.NewTicker(f.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		st, err := obs.Refresh(ctx)
		if err != nil {
			log.Warn("autoscale: no cluster status this period", "err", err)
			continue
		}
		// The data each region holds changes as it grows: the migration model follows.
		for _, r := range regions {
			loop.Controllers[r].SetDataBytes(float64(actuate.View(st, r).Bytes))
		}
		if _, err := loop.Step(ctx); err != nil {
			log.Warn("autoscale: period", "err", err)
		}
	}
}

// driverRounds are the placement driver's settings the migration model counts waves with: the
// moves in flight per node, and a wave's fixed cost, taken as three of the driver's rounds (the
// round that plans the move, one in which the snapshot is asked and exported and a catch-up
// round runs, the one that sees it finished); without a configuration, the defaults (2, 1 s).
func driverRounds(cfg *config.Cluster) (maxMoves int, perMove time.Duration) {
	maxMoves, interval := 2, time.Second
	if cfg != nil {
		if cfg.Elasticity.MaxMovesPerNode > 0 {
			maxMoves = cfg.Elasticity.MaxMovesPerNode
		}
		if cfg.Elasticity.Interval > 0 {
			interval = cfg.Elasticity.Interval
		}
	}
	return maxMoves, 3 * interval
}

// migrationRate is the migration model's per-node rate: the flag, else what BwMan is
// configured to give the system class.
func migrationRate(flag string, cfg *config.Cluster) (float64, error) {
	if flag != "" {
		n, err := humanize.ParseBytes(flag)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("autoscale: --migration-rate %q: want a byte rate such as 32MB", flag)
		}
		return float64(n), nil
	}
	if cfg != nil {
		switch {
		case cfg.BwMan.StaticBytesPerSec > 0:
			return cfg.BwMan.StaticBytesPerSec, nil
		case cfg.BwMan.LinkBytesPerSec > 0:
			return cfg.BwMan.LinkBytesPerSec / 2, nil
		}
	}
	return 32e6, nil
}
