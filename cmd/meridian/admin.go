package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"meridian/client"
)

// adminCmd is the operators' view and levers of elasticity (docs/elasticity.md): the
// cluster's status, decommissioning a node (and cancelling that), moving a replica by hand.
func adminCmd() *cobra.Command {
	var endpoint string
	var timeout time.Duration
	with := func(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
		if endpoint == "" {
			return fmt.Errorf("admin: --endpoint HOST:PORT is required")
		}
		c, err := client.Dial(endpoint)
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(cmd.Context(), c)
	}
	opts := func() []client.Option {
		if timeout > 0 {
			return []client.Option{client.Timeout(timeout)}
		}
		return nil
	}
	cmd := &cobra.Command{Use: "admin", Short: "Cluster administration: status, decommission, replica moves"}
	cmd.PersistentFlags().StringVar(&endpoint, "endpoint", "", "node address HOST:PORT")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 0, "deadline of the change (default: the cluster's default request timeout)")

	var watch time.Duration
	status := &cobra.Command{
		Use: "status", Short: "Members (state, liveness, replicas, bytes, load), moves in flight, imbalance indexes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				for {
					st, err := c.ClusterStatus(ctx)
					if err != nil {
						return err
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "NODE\tID\tREGION\tSTATE\tALIVE\tREPLICAS\tBYTES\tOPS/S\tCPU\tBOOTSTRAP")
					for _, n := range st.Nodes {
						fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%v\t%d\t%s\t%.0f\t%.0f%%\t%s\n", n.Name, n.Id, n.Region, n.State, n.Alive, n.Replicas,
							humanize.IBytes(n.Bytes), n.LoadOps, 100*n.Cpu, n.Bootstrap)
					}
					w.Flush()
					fmt.Printf("partitions %d; imbalance: replicas %.3f, bytes %.3f, load %.3f; moves in flight %d\n",
						st.Partitions, st.ReplicaImbalance, st.ByteImbalance, st.LoadImbalance, len(st.Moves))
					for _, m := range st.Moves {
						fmt.Printf("  move %d: %s partition %d, %s -> %s (copying from %s)\n", m.MoveId, m.Keyspace, m.Partition, m.From, m.To, m.Source)
					}
					if st.Driver != "" {
						fmt.Printf("this node runs the placement driver: %d splits, %d merges, %d moves started since it took over\n", st.Splits, st.Merges, st.MovesStarted)
					}
					if watch <= 0 {
						return nil
					}
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(watch):
					}
					fmt.Println()
				}
			})
		},
	}
	status.Flags().DurationVar(&watch, "watch", 0, "print again every D until interrupted")
	cmd.AddCommand(status)

	cmd.AddCommand(&cobra.Command{
		Use: "decommission NODE", Short: "Move NODE's replicas to the other nodes of its region one by one, then remove it (ElasCass 3.3)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				out, err := c.SetNodeState(ctx, a[0], "decommissioning", opts()...)
				if err != nil {
					return err
				}
				fmt.Printf("%s is %s: its replicas move away one by one (admin status shows the progress); it stops once it holds nothing\n", a[0], out.State)
				return nil
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use: "recommission NODE", Short: "Cancel a decommission: NODE keeps what it still holds and takes replicas again", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				out, err := c.SetNodeState(ctx, a[0], "active", opts()...)
				if err != nil {
					return err
				}
				fmt.Printf("%s is %s\n", a[0], out.State)
				return nil
			})
		},
	})
	var from, to, source string
	move := &cobra.Command{
		Use: "move KEYSPACE PARTITION --from NODE --to NODE [--source NODE]", Short: "Move a partition's replica to another node of its region", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := strconv.ParseUint(a[1], 10, 32)
			if err != nil {
				return fmt.Errorf("admin move: partition %q is not a partition number (describe-keyspace lists them)", a[1])
			}
			if from == "" || to == "" {
				return fmt.Errorf("admin move: --from and --to are required")
			}
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				out, err := c.MoveReplica(ctx, a[0], uint32(id), from, to, source, opts()...)
				if err != nil {
					return err
				}
				fmt.Printf("move %d started: %s partition %d, %s -> %s; it finishes once %s has caught up (admin status)\n", out.MoveId, a[0], id, from, to, to)
				return nil
			})
		},
	}
	move.Flags().StringVar(&from, "from", "", "the node giving up the replica")
	move.Flags().StringVar(&to, "to", "", "the node taking it (same region)")
	move.Flags().StringVar(&source, "source", "", "the replica the new one copies from (default: the leaving one, or the nearest live replica)")
	cmd.AddCommand(move)
	return cmd
}
