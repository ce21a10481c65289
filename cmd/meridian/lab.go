//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"meridian/internal/tools/flowsim"
	"meridian/internal/tools/lab"
	"meridian/internal/tools/lab/wan"
)

func labCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "The network lab: real processes in network namespaces under a user-space WAN router (needs root)",
		Long: `The network lab runs real Meridian servers, and the peers a user would pick instead
(Apache Cassandra, etcd, Apache ZooKeeper), in network namespaces joined by a user-space WAN
router that delays each packet by the one-way latency of its region pair. Needs root. One lab
per machine; its state lives in --dir. See docs/lab.md.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", lab.DefaultDir, "the lab's state directory")
	cmd.AddCommand(labUpCmd(&dir), labDownCmd(&dir), labRouterCmd(&dir), labStatusCmd(&dir), labWANCmd(&dir),
		labBenchCmd(&dir), labRunCmd(&dir), labRouterBenchCmd(&dir), labNemesisCmd(&dir), labMayflowerCmd(&dir))
	return cmd
}

func labUpCmd(dir *string) *cobra.Command {
	var topo, peers string
	var perRegion, peersPerRegion int
	var seed uint64
	var withMeridian bool
	cmd := &cobra.Command{
		Use:   "up [--topology T] [--meridian-per-region N] [--peers cassandra,etcd,zookeeper] [--peers-per-region N]",
		Short: "Create the hosts and the WAN router, and start Meridian servers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := loadTopology(topo)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("peers-per-region") {
				peersPerRegion = perRegion // every system on as many servers as Meridian
			}
			st, err := lab.Up(cmd.Context(), lab.UpOptions{Dir: *dir, Topology: t, MeridianPerRegion: perRegion, Peers: splitList(peers),
				PeersPerRegion: peersPerRegion, Seed: seed, Log: os.Stderr})
			if err != nil {
				return err
			}
			if withMeridian {
				m := lab.NewMeridian(*dir, st, nil)
				if err := m.Start(cmd.Context(), lab.DefaultKeyspace()); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "lab: Meridian servers up; configuration %s (keyspace %q)\n", m.ConfigPath(), "bench")
			}
			printHosts(st.Layout)
			return nil
		},
	}
	cmd.Flags().StringVar(&topo, "topology", "gcp-meteorshower-3", "regions and RTTs (built-in name or file)")
	cmd.Flags().IntVar(&perRegion, "meridian-per-region", 1, "Meridian servers per region")
	cmd.Flags().StringVar(&peers, "peers", "", "peer hosts to add in every region: cassandra, etcd, zookeeper")
	cmd.Flags().IntVar(&peersPerRegion, "peers-per-region", 1, "hosts of each peer in each region (default: --meridian-per-region)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the router's jitter and loss")
	cmd.Flags().BoolVar(&withMeridian, "meridian", true, "start Meridian servers (keyspace bench, quorum)")
	return cmd
}

func printHosts(l *lab.Layout) {
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tREGION\tROLE\tADDRESS\tNAMESPACE")
	for _, h := range l.Hosts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.Name, h.Region, h.Role, h.Addr, h.Netns)
	}
	tw.Flush()
}

func labDownCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop every lab process and remove every lab namespace and device (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lab.CheckPrivileges(); err != nil {
				return err
			}
			return lab.Down(cmd.Context(), *dir, os.Stderr)
		},
	}
}

func labRouterCmd(dir *string) *cobra.Command {
	var seed uint64
	cmd := &cobra.Command{
		Use:    "router",
		Short:  "Run the WAN router daemon (started by lab up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			return lab.RunRouter(cmd.Context(), *dir, seed, log)
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of jitter and loss")
	return cmd
}

func labStatusCmd(dir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the hosts, the links and the router's counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := lab.LoadState(*dir)
			if err != nil {
				return err
			}
			s, err := wan.NewClient(lab.RouterSocket(*dir)).Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			printHosts(st.Layout)
			fmt.Println()
			tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FROM\tTO\tDELAY ms\tJITTER ms\tLOSS %\tMBIT/S\tCUT\tPACKETS\tBYTES\tDROPPED")
			for _, l := range s.Links {
				bw := "-"
				if l.Link.BandwidthMbps > 0 {
					bw = fmt.Sprint(l.Link.BandwidthMbps)
				}
				fmt.Fprintf(tw, "%s\t%s\t%g\t%g\t%g\t%s\t%v\t%d\t%d\t%d\n", l.From, l.To, l.Link.DelayMs, l.Link.JitterMs, l.Link.LossPct, bw, l.Cut,
					l.Packets, l.Bytes, l.DroppedCut+l.DroppedLoss+l.DroppedQueue+l.DroppedUnknown)
			}
			tw.Flush()
			fmt.Printf("\nforwarded %d packets in %.0f s; delay error p50 %.0f µs, p99 %.0f µs, max %.0f µs\n",
				s.Forwarded, s.UptimeS, s.LatenessP50Us, s.LatenessP99Us, s.LatenessMaxUs)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the router's status as JSON")
	return cmd
}

// labRouter returns the control client of the lab up in dir (a clear error when none is).
func labRouter(dir string) (*wan.Client, error) {
	if _, err := lab.LoadState(dir); err != nil {
		return nil, err
	}
	return wan.NewClient(lab.RouterSocket(dir)), nil
}

func labWANCmd(dir *string) *cobra.Command {
	cmd := &cobra.Command{Use: "wan", Short: "Change the WAN at run time: link delay, jitter, loss, bandwidth; cut and heal"}
	var from, to string
	var symmetric, oneWay, all bool
	var delay, jitter, loss, bw float64
	set := &cobra.Command{
		Use:   "set --from SEL --to SEL [--delay-ms D] [--jitter-ms J] [--loss-pct L] [--bandwidth-mbps B] [--symmetric]",
		Short: "Change links (SEL: '*', a region or a host)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := wan.LinkRequest{From: from, To: to, Symmetric: symmetric}
			fl := cmd.Flags()
			if fl.Changed("delay-ms") {
				r.DelayMs = &delay
			}
			if fl.Changed("jitter-ms") {
				r.JitterMs = &jitter
			}
			if fl.Changed("loss-pct") {
				r.LossPct = &loss
			}
			if fl.Changed("bandwidth-mbps") {
				r.BandwidthMbps = &bw
			}
			rc, err := labRouter(*dir)
			if err != nil {
				return err
			}
			return rc.SetLink(cmd.Context(), r)
		},
	}
	set.Flags().Float64Var(&delay, "delay-ms", 0, "one-way delay")
	set.Flags().Float64Var(&jitter, "jitter-ms", 0, "uniform extra delay in [0, J)")
	set.Flags().Float64Var(&loss, "loss-pct", 0, "random loss, percent")
	set.Flags().Float64Var(&bw, "bandwidth-mbps", 0, "rate limit (0: none)")
	set.Flags().BoolVar(&symmetric, "symmetric", false, "also the reverse direction")
	cut := &cobra.Command{
		Use:   "cut --from SEL --to SEL [--one-way]",
		Short: "Drop every packet between the selections (both directions unless --one-way)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := labRouter(*dir)
			if err != nil {
				return err
			}
			return rc.Cut(cmd.Context(), wan.CutRequest{From: from, To: to, OneWay: oneWay})
		},
	}
	heal := &cobra.Command{
		Use:   "heal (--all | --from SEL --to SEL [--one-way])",
		Short: "Heal cut links",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := labRouter(*dir)
			if err != nil {
				return err
			}
			return rc.Heal(cmd.Context(), wan.CutRequest{From: from, To: to, OneWay: oneWay, All: all})
		},
	}
	heal.Flags().BoolVar(&all, "all", false, "heal every link")
	for _, c := range []*cobra.Command{set, cut, heal} {
		c.Flags().StringVar(&from, "from", "", "source selection: '*', a region or a host")
		c.Flags().StringVar(&to, "to", "", "destination selection")
	}
	for _, c := range []*cobra.Command{cut, heal} {
		c.Flags().BoolVar(&oneWay, "one-way", false, "only from -> to")
	}
	cmd.AddCommand(set, cut, heal)
	return cmd
}

func labMayflowerCmd(dir *string) *cobra.Command {
	var (
		o                                 lab.MayflowerLabOptions
		schemes, locality, oversub, mdOut string
		jsOut                             string
		jobs                              int
	)
	cmd := &cobra.Command{
		Use:   "mayflower [--scale F] [--jobs N] [--schemes LIST] [--seed N]",
		Short: "Mayflower's schemes with real TCP: the thesis's testbed as a fabric in the router, bandwidths and sizes scaled down together (Figs. 3.3; docs/mayflower.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Flow.Testbed, o.Flow.Locality, err = parseTestbedFlags("lab mayflower", oversub, locality); err != nil {
				return err
			}
			for _, s := range splitTrimmed(schemes) {
				o.Schemes = append(o.Schemes, flowsim.Scheme(s))
			}
			o.Flow.Jobs, o.Dir, o.Log = jobs, *dir, os.Stderr
			res, err := lab.RunMayflowerLab(cmd.Context(), o)
			if err != nil {
				return err
			}
			md := res.Markdown()
			fmt.Print(md)
			return writeReproOutputs("lab mayflower", md, mdOut, jsOut, res)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&o.Scale, "scale", 0.005, "bandwidths and sizes times this (0.005: 5 Mbps edges, 640 KiB jobs)")
	f.IntVar(&jobs, "jobs", 300, "read jobs (the same for every scheme)")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the workload and of the schemes' random choices")
	f.StringVar(&schemes, "schemes", "nearest-ecmp,sinbad-r-m,mayflower-b,mayflower-p-makespan", "schemes, comma-separated (as bench mayflower; not mayflower-p-steal)")
	f.Float64Var(&o.Flow.RatePerHost, "rate", 0.1, "Poisson job arrivals per second per host")
	f.StringVar(&locality, "locality", "0.5,0.3,0.2", "client in the primary's rack, pod, another pod (R,P,O)")
	f.StringVar(&oversub, "oversubscription", "2x4", "oversubscription at the racks x at the pods")
	f.DurationVar(&o.LinkQueue, "link-queue", 0, "each fabric link's queue bound (0: 300ms, about 125 packets at 5 Mbps)")
	f.DurationVar(&o.Drain, "drain", 60*time.Second, "how long to wait for jobs after the last arrival")
	f.StringVar(&jsOut, "json", "", "write the results as JSON")
	f.StringVar(&mdOut, "markdown", "", "write the table as Markdown")
	return cmd
}
