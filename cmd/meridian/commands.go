package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"meridian/api/meridianpb"
	"meridian/client"
	"meridian/internal/config"
	"meridian/internal/runtime/server"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/chart"
	"meridian/internal/tools/demo"
	"meridian/internal/topology"
)

func serverCmd() *cobra.Command {
	var cfgPath, nodeName, dataDir, logLevel, diskReserve string
	var joinRegion, joinListen, joinPeerListen, joinMetrics string
	var join bool
	var clockOffset time.Duration
	var clockControl bool
	cmd := &cobra.Command{
		Use:   "server --config FILE --node NAME [--data-dir DIR] [--join --region R --listen ADDR --peer-listen ADDR [--metrics ADDR]]",
		Short: "Run one Meridian node (--join: a new node joins the running cluster)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfgPath == "" || nodeName == "" {
				return fmt.Errorf("server: --config and --node are required")
			}
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			if dataDir == "" {
				dataDir = fmt.Sprintf("data/%s", nodeName)
			}
			self, err := joinedSelf(cmd.Context(), cfg, nodeName, dataDir, join, config.Node{Name: nodeName, Region: joinRegion,
				Listen: joinListen, PeerListen: joinPeerListen, Metrics: joinMetrics})
			if err != nil {
				return err
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("server: --log-level %q: %w", logLevel, err)
			}
			var reserve uint64
			if diskReserve != "" {
				if reserve, err = humanize.ParseBytes(diskReserve); err != nil || reserve == 0 {
					return fmt.Errorf("server: --disk-reserve %q: want a size such as 256MiB or 1GiB (default: 5%% of the data disk, within 16 MiB..1 GiB)", diskReserve)
				}
			}
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			return server.Run(cmd.Context(), server.Options{Cluster: cfg, NodeName: nodeName, Self: self, DataDir: dataDir, DiskReserveBytes: reserve,
				ClockOffset: clockOffset, ClockControl: clockControl, Logger: logger})
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "cluster configuration file (YAML)")
	cmd.Flags().StringVar(&nodeName, "node", "", "name of this node in the configuration")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "storage directory (default data/NODE)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&diskReserve, "disk-reserve", "", "disk space kept free for the store itself, e.g. 256MiB: writes are refused with 'disk full' below half of it, the other half is an emergency ballast (default 5% of the data disk, within 16 MiB..1 GiB)")
	cmd.Flags().BoolVar(&join, "join", false, "this node is not in the configuration file: register it with the running cluster (through the file's nodes), then start it; it takes replicas by the two-phase bootstrap (docs/elasticity.md). Once joined, it starts again without --join")
	cmd.Flags().StringVar(&joinRegion, "region", "", "with --join: the new node's region")
	cmd.Flags().StringVar(&joinListen, "listen", "", "with --join: the new node's client API address HOST:PORT")
	cmd.Flags().StringVar(&joinPeerListen, "peer-listen", "", "with --join: the new node's peer address HOST:PORT")
	cmd.Flags().StringVar(&joinMetrics, "metrics", "", "with --join: the new node's /metrics address HOST:PORT (optional)")
	cmd.Flags().DurationVar(&clockOffset, "clock-offset", 0, "shift this node's clock (testing clock skew)")
	cmd.Flags().BoolVar(&clockControl, "clock-control", false, "serve /debug/clock on the metrics address to change this node's clock offset and drift at run time (lab faults; never in production)")
	return cmd
}

// joinedSelf returns the identity of a node that is not in the configuration file: the one it
// saved when it joined, or, with --join, a new one the cluster gives it now. nil: a node of
// the file.
func joinedSelf(ctx context.Context, cfg *config.Cluster, name, dataDir string, join bool, want config.Node) (*config.Node, error) {
	if _, ok := cfg.Node(name); ok {
		if join {
			return nil, fmt.Errorf("server: %s is in the configuration file; start it without --join", name)
		}
		return nil, nil
	}
	saved, found, err := server.JoinedIdentity(dataDir, cfg.Name)
	if err != nil {
		return nil, err
	}
	if found {
		if saved.Name != name {
			return nil, fmt.Errorf("server: data directory %s belongs to node %s, not %s", dataDir, saved.Name, name)
		}
		return &saved, nil
	}
	if !join {
		return nil, fmt.Errorf("server: %q is not a node of cluster %s and has not joined it: start it with --join --region R --listen HOST:PORT --peer-listen HOST:PORT", name, cfg.Name)
	}
	if want.Region == "" || want.Listen == "" || want.PeerListen == "" {
		return nil, fmt.Errorf("server: --join needs --region, --listen and --peer-listen")
	}
	// Any member that answers registers the node; the file's nodes are the ones known here.
	var lastErr error
	for _, nd := range cfg.Nodes {
		c, err := client.Dial(nd.Listen)
		if err != nil {
			lastErr = err
			continue
		}
		out, err := c.JoinCluster(ctx, &meridianpb.JoinClusterRequest{Cluster: cfg.Name, Name: want.Name, Region: want.Region,
			Listen: want.Listen, PeerListen: want.PeerListen, Metrics: want.Metrics}, client.Timeout(20*time.Second))
		c.Close()
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", nd.Name, err)
			if code := client.CodeOf(err); code == codes.InvalidArgument || code == codes.AlreadyExists {
				return nil, fmt.Errorf("server: join refused by %w", lastErr)
			}
			continue
		}
		want.ID = out.Id
		if err := server.SaveJoinedIdentity(dataDir, cfg.Name, want); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "joined cluster %s as %s (id %d, %s) through %s\n", cfg.Name, want.Name, want.ID, out.State, nd.Name)
		return &want, nil
	}
	return nil, fmt.Errorf("server: could not join cluster %s through any node of the configuration file: %w", cfg.Name, lastErr)
}

func kvCmd() *cobra.Command {
	var endpoint, consistency, writeMode, valueFile string
	var timeout time.Duration
	var limit int
	dial := func() (*client.Client, error) {
		if endpoint == "" {
			return nil, fmt.Errorf("kv: --endpoint HOST:PORT is required")
		}
		if timeout < 0 {
			return nil, fmt.Errorf("kv: --timeout %v is negative", timeout)
		}
		return client.Dial(endpoint)
	}
	opts := func() []client.Option {
		o := []client.Option{client.Consistency(consistency), client.WriteMode(writeMode)}
		if timeout > 0 {
			o = append(o, client.Timeout(timeout))
		}
		return o
	}
	// withClient dials the endpoint and runs fn. The client bounds every call: by --timeout
	// (the server's deadline) plus client.TimeoutGrace, or by client.DefaultCallTimeout.
	withClient := func(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(cmd.Context(), c)
	}
	cmd := &cobra.Command{Use: "kv", Short: "Read and write keys through a node"}
	cmd.PersistentFlags().StringVar(&endpoint, "endpoint", "", "node address HOST:PORT")
	cmd.PersistentFlags().StringVar(&consistency, "consistency", "", "consistency level (quorum: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM; globlease: none except for scans); default: the keyspace's")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 0, fmt.Sprintf("request deadline, kept by the server (default: the cluster's limits.default_request_timeout); the command gives up %v after it, or after %v without --timeout, when the node does not answer at all", client.TimeoutGrace, client.DefaultCallTimeout))

	// --write-mode is checked by the server, which names the valid values.
	writeModeFlag := func(c *cobra.Command) *cobra.Command {
		c.Flags().StringVar(&writeMode, "write-mode", "", "globlease only: active or passive (default: the keyspace's write_mode)")
		return c
	}
	put := writeModeFlag(&cobra.Command{
		Use: "put KEYSPACE KEY [VALUE | --value-file FILE|-]", Short: "Write a value (from the argument, a file, or stdin with --value-file -)", Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			if (len(a) == 3) == (valueFile != "") {
				return fmt.Errorf("put: give the value either as the VALUE argument or with --value-file FILE (- for stdin), not both and not neither")
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				var value []byte
				if len(a) == 3 {
					value = []byte(a[2])
				} else {
					var err error
					if value, err = readValue(ctx, c, valueFile, os.Stdin); err != nil {
						return err
					}
				}
				v, err := c.Put(ctx, a[0], []byte(a[1]), value, opts()...)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "ok version %s\n", v)
				return nil
			})
		},
	})
	put.Flags().StringVar(&valueFile, "value-file", "", "read the value from FILE (- for stdin); values larger than the node's limits.max_value_bytes are refused before they are sent")
	cmd.AddCommand(put)
	cmd.AddCommand(&cobra.Command{
		Use: "get KEYSPACE KEY", Short: "Read a value (printed on stdout)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.Get(ctx, a[0], []byte(a[1]), opts()...)
				if err != nil {
					return err
				}
				if !r.Found {
					return exitError{code: 2, err: fmt.Errorf("key %q not found in keyspace %q", a[1], a[0])}
				}
				os.Stdout.Write(r.Value)
				os.Stdout.WriteString("\n")
				switch {
				case r.ReadPath == "stale" && r.StalenessBound >= 0:
					fmt.Fprintf(os.Stderr, "ok version %s, read path %s, coordinator %s, at most %s stale\n", r.Version, r.ReadPath, r.Coordinator, r.StalenessBound.Round(time.Millisecond))
				case r.ReadPath == "stale":
					fmt.Fprintf(os.Stderr, "ok version %s, read path %s, coordinator %s, staleness unknown (no leader heartbeat applied yet)\n", r.Version, r.ReadPath, r.Coordinator)
				case r.ReadPath != "":
					fmt.Fprintf(os.Stderr, "ok version %s, read path %s, coordinator %s\n", r.Version, r.ReadPath, r.Coordinator)
				}
				return nil
			})
		},
	})
	cmd.AddCommand(writeModeFlag(&cobra.Command{
		Use: "delete KEYSPACE KEY", Short: "Delete a key", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				v, err := c.Delete(ctx, a[0], []byte(a[1]), opts()...)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "ok version %s\n", v)
				return nil
			})
		},
	}))
	cmd.AddCommand(&cobra.Command{
		Use: "move-master KEYSPACE KEY REGION", Short: "Move a key's master to a replica in REGION (globlease: the key's master; raft: the leader of the key's partition)", Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, a []string) error {
			if consistency != "" {
				return fmt.Errorf("move-master: --consistency does not apply (a move goes through the key's master)")
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				master, region, tv, err := c.MoveMaster(ctx, a[0], []byte(a[1]), a[2], opts()...)
				if err != nil {
					return err
				}
				fmt.Printf("master of %q is now %s (region %s), table version %d\n", a[1], master, region, tv)
				return nil
			})
		},
	})
	scan := &cobra.Command{
		Use: "scan KEYSPACE START END", Short: "List keys in [START, END) as KEY<TAB>VALUE lines; END \"\" means to the end", Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				var end []byte
				if a[2] != "" {
					end = []byte(a[2])
				}
				if limit < 0 || uint64(limit) > math.MaxUint32 {
					return fmt.Errorf("scan: --limit %d is out of range: 1 to the cluster's limits.max_scan_limit (0 or no --limit: 1000)", limit)
				}
				items, more, err := c.Scan(ctx, a[0], []byte(a[1]), end, limit, opts()...)
				if err != nil {
					return err
				}
				for _, it := range items {
					fmt.Printf("%s\t%s\n", it.Key, it.Value)
				}
				if more {
					fmt.Fprintln(os.Stderr, "(more keys in range; raise --limit or continue after the last key)")
				}
				return nil
			})
		},
	}
	scan.Flags().IntVar(&limit, "limit", 0, "maximum keys returned (default 1000; at most limits.max_scan_limit)")
	cmd.AddCommand(scan)
	cmd.AddCommand(kvTxnCmd(withClient, opts, &consistency))

	var ksProtocol, ksRegions string
	var ksReplicas, ksPartitions int
	var ksOptions, ksSplitAt []string
	create := &cobra.Command{
		Use: "create-keyspace NAME", Short: "Create a keyspace", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				// In the API 0 means "the default"; on the command line an explicit 0 is a mistake.
				if ksReplicas < 1 || ksReplicas > 1<<16 {
					return fmt.Errorf("create-keyspace: --replicas-per-region %d must be at least 1", ksReplicas)
				}
				if ksPartitions < 1 || ksPartitions > 4096 {
					return fmt.Errorf("create-keyspace: --partitions %d out of range 1..4096", ksPartitions)
				}
				spec := &client.KeyspaceSpec{Name: a[0], Protocol: ksProtocol, ReplicasPerRegion: uint32(ksReplicas), Partitions: uint32(ksPartitions)}
				if !cmd.Flags().Changed("partitions") {
					spec.Partitions = 0 // the protocol's default: 16, or 1 for a fully replicated protocol (catenae)
				}
				if len(ksSplitAt) > 0 {
					if cmd.Flags().Changed("partitions") {
						return fmt.Errorf("create-keyspace: --split-at sets the partitions (one more than the split points); leave --partitions out")
					}
					spec.SplitPoints, spec.Partitions = ksSplitAt, 0
				}
				if ksRegions != "" {
					spec.Regions = splitList(ksRegions)
				}
				for _, kv := range ksOptions {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return fmt.Errorf("create-keyspace: --option %q: want KEY=VALUE", kv)
					}
					if spec.Options == nil {
						spec.Options = map[string]string{}
					}
					if _, dup := spec.Options[k]; dup {
						return fmt.Errorf("create-keyspace: --option %s given twice", k)
					}
					spec.Options[k] = v
				}
				got, notInstalled, err := c.CreateKeyspace(ctx, spec, opts()...)
				if err != nil {
					return err
				}
				fmt.Printf("created keyspace %s: protocol %s, regions %v, %d replicas per region, %d partitions, options %v, placement version %d\n",
					got.Name, got.Protocol, got.Regions, got.ReplicasPerRegion, got.Partitions, got.Options, c.PlacementVersion(got.Name))
				warnNotInstalled(notInstalled)
				return nil
			})
		},
	}
	create.Flags().StringVar(&ksProtocol, "protocol", "quorum", "replication protocol")
	create.Flags().StringVar(&ksRegions, "regions", "", "comma-separated regions (default all)")
	create.Flags().IntVar(&ksReplicas, "replicas-per-region", 1, "replicas in each region")
	create.Flags().IntVar(&ksPartitions, "partitions", 16, "range partitions (unset: 16, or 1 for catenae, which replicates a keyspace whole)")
	create.Flags().StringArrayVar(&ksOptions, "option", nil, "protocol option KEY=VALUE (repeatable), e.g. --option lease=2s")
	create.Flags().StringSliceVar(&ksSplitAt, "split-at", nil, "initial partition boundaries, strictly increasing (comma-separated or repeated), e.g. --split-at user2,user4,user6,user8")
	cmd.AddCommand(create)
	var splitExpect uint64
	split := &cobra.Command{
		Use: "split KEYSPACE KEY [--expect-version V]", Short: "Split the partition holding KEY so that KEY starts a new partition (same replicas; no data moves)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.SplitPartition(ctx, a[0], []byte(a[1]), splitExpect, opts()...)
				if err != nil {
					return err
				}
				fmt.Printf("split keyspace %s at %q: %d partitions, placement version %d\n", a[0], a[1], len(r.Partitions), r.Version)
				warnNotInstalled(r.NotInstalled)
				return nil
			})
		},
	}
	split.Flags().Uint64Var(&splitExpect, "expect-version", 0, "apply only if the keyspace is still at this placement version")
	cmd.AddCommand(split)
	var mergeExpect uint64
	merge := &cobra.Command{
		Use: "merge KEYSPACE PARTITION [--expect-version V]", Short: "Merge partition PARTITION with its right-hand neighbour (they must have the same replicas)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := strconv.ParseUint(a[1], 10, 32)
			if err != nil {
				return fmt.Errorf("merge: partition %q is not a partition number (describe-keyspace lists them)", a[1])
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.MergePartitions(ctx, a[0], uint32(id), mergeExpect, opts()...)
				if err != nil {
					return err
				}
				fmt.Printf("merged partition %d of %s with its right-hand neighbour: %d partitions, placement version %d\n", id, a[0], len(r.Partitions), r.Version)
				warnNotInstalled(r.NotInstalled)
				return nil
			})
		},
	}
	merge.Flags().Uint64Var(&mergeExpect, "expect-version", 0, "apply only if the keyspace is still at this placement version")
	cmd.AddCommand(merge)
	cmd.AddCommand(&cobra.Command{
		Use: "describe-keyspace NAME [--consistency LINEARIZABLE|STALE]", Short: "Show a keyspace and its placement (from the cluster metadata; STALE: the node's copy)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				d, err := c.DescribeKeyspace(ctx, a[0], opts()...)
				if err != nil {
					return err
				}
				s := d.Spec
				fmt.Printf("keyspace %s (%s): protocol %s, regions %v, %d replicas per region, %d partitions, options %v, placement version %d\n",
					s.Name, d.Origin, s.Protocol, s.Regions, s.ReplicasPerRegion, len(d.Partitions), s.Options, d.PlacementVersion)
				for _, p := range d.Partitions {
					fmt.Printf("  partition %3d  start %-12s replicas %v", p.Partition, strconv.Quote(string(p.Start)), p.Replicas)
					if len(p.Learners) > 0 {
						fmt.Printf(" learners %v", p.Learners)
					}
					fmt.Println()
				}
				return nil
			})
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use: "list-keyspaces", Short: "List the keyspaces (name, protocol, regions, partitions)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				list, err := c.ListKeyspaces(ctx)
				if err != nil {
					return err
				}
				for _, s := range list {
					fmt.Printf("%s\t%s\tregions %v\t%d partitions\n", s.Name, s.Protocol, s.Regions, s.Partitions)
				}
				return nil
			})
		},
	})

	var altRegions string
	var altReplicas int
	var altOptions []string
	var altExpect uint64
	alter := &cobra.Command{
		Use:   "alter-keyspace NAME [--option KEY=VALUE]... [--regions a,b] [--replicas-per-region N] [--expect-version V]",
		Short: "Change a keyspace's options (or, for raft keyspaces, its replication) through the cluster metadata",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				ch := client.KeyspaceChange{ExpectVersion: altExpect}
				if altReplicas < 0 || altReplicas > 1<<16 {
					return fmt.Errorf("alter-keyspace: --replicas-per-region %d out of range 1..65536", altReplicas)
				}
				ch.ReplicasPerRegion = uint32(altReplicas)
				if altRegions != "" {
					ch.Regions = splitList(altRegions)
				}
				for _, kv := range altOptions {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return fmt.Errorf("alter-keyspace: --option %q: want KEY=VALUE (KEY= restores the default)", kv)
					}
					if ch.SetOptions == nil {
						ch.SetOptions = map[string]string{}
					}
					if _, dup := ch.SetOptions[k]; dup {
						return fmt.Errorf("alter-keyspace: --option %s given twice", k)
					}
					ch.SetOptions[k] = v
				}
				r, err := c.AlterKeyspace(ctx, a[0], ch, opts()...)
				if err != nil {
					return err
				}
				s := r.Spec
				verb := "altered"
				if r.Unchanged {
					verb = "unchanged"
				}
				fmt.Printf("%s keyspace %s: protocol %s, regions %v, %d replicas per region, %d partitions, options %v, placement version %d\n",
					verb, s.Name, s.Protocol, s.Regions, s.ReplicasPerRegion, s.Partitions, s.Options, r.Version)
				warnNotInstalled(r.NotInstalled)
				return nil
			})
		},
	}
	alter.Flags().StringVar(&altRegions, "regions", "", "new comma-separated regions (raft keyspaces)")
	alter.Flags().IntVar(&altReplicas, "replicas-per-region", 0, "new replicas per region (raft keyspaces; 0: unchanged)")
	alter.Flags().StringArrayVar(&altOptions, "option", nil, "protocol option KEY=VALUE to set (repeatable); KEY= restores its default")
	alter.Flags().Uint64Var(&altExpect, "expect-version", 0, "change only if the keyspace is still at this placement version (see describe-keyspace)")
	cmd.AddCommand(alter)

	var dropExpect uint64
	drop := &cobra.Command{
		Use: "drop-keyspace NAME [--expect-version V]", Short: "Remove a keyspace and its data", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.DropKeyspace(ctx, a[0], dropExpect, opts()...)
				if err != nil {
					return err
				}
				fmt.Printf("dropped keyspace %s (it was at placement version %d)\n", a[0], r.Version)
				warnNotInstalled(r.NotInstalled)
				return nil
			})
		},
	}
	drop.Flags().Uint64Var(&dropExpect, "expect-version", 0, "drop only if the keyspace is still at this placement version")
	cmd.AddCommand(drop)
	return cmd
}

// warnNotInstalled says which nodes had not applied a metadata change when it returned.
func warnNotInstalled(nodes []string) {
	for _, n := range nodes {
		fmt.Fprintf(os.Stderr, "warning: not yet in force on %s (the node applies it when it catches up with the cluster metadata)\n", n)
	}
}

func demoCmd() *cobra.Command {
	var topo, jsonPath, chartPath string
	var duration time.Duration
	var clients int
	var quick bool
	cmd := &cobra.Command{
		Use:   "demo [--topology NAME|FILE] [--duration D] [--quick] [--json FILE] [--chart FILE]",
		Short: "Every protocol side by side on an emulated 3-region cluster: latency per region against the physical lower bound",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := loadTopology(topo)
			if err != nil {
				return err
			}
			warmup := 2 * time.Second
			if quick {
				duration, warmup, clients = 4*time.Second, time.Second, min(clients, 4)
			}
			rep, err := demo.Run(cmd.Context(), demo.Options{Topology: t, Workload: demo.DefaultWorkload(), Duration: duration,
				Warmup: warmup, ClientsPerRegion: clients, Seed: 1, Progress: os.Stderr, ProgressTTY: isTerminal(os.Stderr)})
			if err != nil {
				return err
			}
			if jsonPath != "" {
				if err := bench.WriteJSON(jsonPath, rep); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "wrote %s\n", jsonPath)
			}
			if chartPath != "" {
				if err := chart.RegionBars(rep, "read", chartPath); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "wrote %s (read latency per region and configuration)\n", chartPath)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&topo, "topology", "gcp-meteorshower-3", "built-in topology name or topology file")
	cmd.Flags().DurationVar(&duration, "duration", 12*time.Second, "measured time per configuration (plus 2s warm-up)")
	cmd.Flags().BoolVar(&quick, "quick", false, "a short run (4s per configuration, 4 clients per region)")
	cmd.Flags().StringVar(&jsonPath, "json", "", "write the results as JSON to FILE")
	cmd.Flags().StringVar(&chartPath, "chart", "demo-read-latency.png", "write the read-latency chart (PNG or SVG); \"\" for none")
	cmd.Flags().IntVar(&clients, "clients", 8, "closed-loop clients per region")
	return cmd
}

// readValue reads a value from path ("-": stdin), refusing one larger than the node's
// limits.max_value_bytes without reading it all when the size is known beforehand.
func readValue(ctx context.Context, c *client.Client, path string, stdin io.Reader) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("put: --value-file: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > 1<<20 {
			if err := c.CheckValueSize(ctx, int(min(st.Size(), math.MaxInt32))); client.CodeOf(err) == codes.InvalidArgument {
				return nil, err
			}
		}
		r = f
	}
	// Read at most one byte more than the node accepts (or than any message may hold when
	// its limits cannot be asked), so that a huge input is refused without being buffered.
	max := int64(256 << 20)
	if info, err := c.ServerInfo(ctx); err == nil {
		max = int64(info.MaxValueBytes)
	}
	value, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("put: reading the value: %w", err)
	}
	if int64(len(value)) > max {
		if err := c.CheckValueSize(ctx, len(value)); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("put: the value is larger than %d bytes", max)
	}
	return value, nil
}

func loadTopology(ref string) (*topology.Topology, error) {
	// NAME:N keeps the first N regions of NAME (in its file order), NAME:a+b+c those regions:
	// the Canopus thesis's 3- and 5-datacentre runs are subsets of ec2-7 (4.6.2).
	if base, sel, ok := strings.Cut(ref, ":"); ok && !fileExists(ref) {
		t, err := loadTopology(base)
		if err != nil {
			return nil, err
		}
		regions := strings.Split(sel, "+")
		if k, err := strconv.Atoi(sel); err == nil {
			if k < 1 || k > len(t.Regions) {
				return nil, fmt.Errorf("topology %q: %d regions: %s has %d", ref, k, t.Name, len(t.Regions))
			}
			regions = t.Regions[:k]
		}
		return t.Subset(t.Name+"-"+strings.ReplaceAll(sel, "+", "-"), regions)
	}
	if topology.IsBuiltin(ref) {
		return topology.Builtin(ref)
	}
	if _, err := os.Stat(ref); err == nil {
		return topology.Load(ref)
	}
	return nil, fmt.Errorf("topology %q is neither a built-in (%v) nor a readable file (NAME:N or NAME:a+b selects regions)", ref, topology.BuiltinNames())
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func splitList(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
