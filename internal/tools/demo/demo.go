// Package demo is Meridian's main job on one machine, and its story: every protocol Meridian
// has, side by side on an in-process cluster with one node per region of the MeteorShower
// paper's GCP deployment (emulated WAN), under the same read-heavy YCSB load from clients in
// every region, with each latency printed next to the physical lower bound of its guarantee
// (DESIGN.md sections 1 and 7).
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"meridian/internal/tools/bench"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// Configs are the configurations the demo compares: every protocol Meridian has, each at the
// levels that give its guarantee. Protocols add themselves here as they land.
var Configs = []bench.Config{
	{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"},
	{Protocol: "quorum", ReadLevel: "ALL", WriteLevel: "ONE"},
	{Protocol: "meteorshower", ReadLevel: "QUORUM", WriteLevel: "QUORUM", Options: map[string]string{"theta": "lower"}},
	{Protocol: "meteorshower", ReadLevel: "QUORUM", WriteLevel: "QUORUM", Options: map[string]string{"theta": "upper"}},
	{Protocol: "globlease"},
	{Protocol: "raft", ReadLevel: "LINEARIZABLE"},
	{Protocol: "canopus"},
}

// Explanations are printed under the table, one per protocol, to say what the reader sees.
var Explanations = map[string]string{
	"quorum": "quorum (the seeds' baseline, Cassandra's levels): a QUORUM read costs the round trip to the " +
		"nearest other replica, an ALL read the round trip to the farthest; ONE writes return at once " +
		"but push the cost onto ALL reads. Both pairs give R + W > N: every read sees the newest " +
		"acknowledged write.",
	"meteorshower": "meteorshower (the MeteorShower paper): writes are quorum writes; reads are served by the " +
		"local replica once status messages from a majority show it holds the newest version. With " +
		"theta=lower a read waits one one-way delay for statuses sent after it arrived (half a quorum " +
		"read), sequentially consistent for any client. With theta=upper (the paper's bound) reads " +
		"return in about ε + one status interval; that is sequentially consistent only while each " +
		"client stays with its own region's node — `meridian sim --roam` finds the counterexample " +
		"otherwise (docs/meteorshower.md) — so Meridian's default is theta=lower.",
	"globlease": "globlease (liu-thesis 4.1): every key has a master (here in the first region); other regions " +
		"read locally under a 60 s lease, and the first read of a key in a region renews the lease at the " +
		"master (one round trip). Writes go to the master and wait for a majority plus every replica still " +
		"holding a lease, so write latency grows with the distance to the master; sequentially consistent " +
		"(docs/globlease.md).",
	"raft": "raft (etcd raft, one group per partition): writes go to the partition's leader — wherever " +
		"the election put it — and commit at a majority; a LINEARIZABLE read asks the leader to confirm " +
		"its leadership with a majority (ReadIndex), so it costs the round trip to the leader plus the " +
		"leader's nearest majority (docs/raft.md).",
	"canopus": "canopus (thesis chapter 4): no leader — every region's nodes propose in consensus cycles " +
		"that gather every region's requests, so a write costs the round trip to the farthest region from " +
		"anywhere. Reads are linearizable too: a key not written recently is read at once under the " +
		"write-lease rule (4.5.2), after a round trip inside the region; a key written recently waits for " +
		"the next cycle; a write to a key without a lease first waits for its lease, about one more round " +
		"trip (docs/canopus.md).",
}

// Options configures the demo.
type Options struct {
	Topology *topology.Topology
	Workload ycsb.Workload
	// Duration is measured time per configuration (after Warmup).
	Duration         time.Duration
	Warmup           time.Duration
	ClientsPerRegion int
	Configs          []bench.Config
	Seed             uint64
	Out              io.Writer
	// Progress shows a live line while each configuration runs.
	Progress    io.Writer
	ProgressTTY bool
}

// DefaultWorkload is read-heavy: YCSB workload B (95% reads, 5% updates, zipfian) over 1,000
// records of 100 bytes, the shape of the MeteorShower and GlobLease evaluations.
func DefaultWorkload() ycsb.Workload {
	w, _ := ycsb.Core("b")
	w.RecordCount = 1000
	w.FieldCount, w.FieldLength = 1, 100
	return w
}

// Run executes the comparison and prints the story.
func Run(ctx context.Context, o Options) (*bench.Report, error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if len(o.Configs) == 0 {
		o.Configs = Configs
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 8
	}
	fmt.Fprintf(o.Out, "Meridian demo: one node per region of %s (%s) on the emulated WAN.\n", o.Topology.Name, rtts(o.Topology))
	fmt.Fprintf(o.Out, "Workload %s: %s, %d closed-loop clients per region, each talking to its own region's node; %v measured per configuration.\n\n",
		o.Workload.Name, mix(o.Workload), o.ClientsPerRegion, o.Duration)
	target := &bench.EmulatedTarget{Topo: o.Topology, Partitions: 16, Seed: o.Seed}
	rep, err := bench.Compare(ctx, target, o.Configs, bench.RunOptions{
		Workload: o.Workload, ClientsPerRegion: o.ClientsPerRegion, Duration: o.Duration, Warmup: o.Warmup,
		Seed: o.Seed, Progress: o.Progress, ProgressTTY: o.ProgressTTY,
	}, o.Out)
	if err != nil {
		return rep, err
	}
	fmt.Fprintln(o.Out)
	bench.PrintCompare(o.Out, rep)
	fmt.Fprintln(o.Out)
	seen := map[string]bool{}
	for _, c := range o.Configs {
		if e, ok := Explanations[c.Protocol]; ok && !seen[c.Protocol] {
			seen[c.Protocol] = true
			fmt.Fprintln(o.Out, wrap("- "+e, 100))
		}
	}
	return rep, nil
}

func rtts(t *topology.Topology) string {
	var parts []string
	for i, a := range t.Regions {
		for _, b := range t.Regions[i+1:] {
			parts = append(parts, fmt.Sprintf("%s-%s %.0f ms", a, b, float64(t.RTT(a, b).Microseconds())/1000))
		}
	}
	return "RTT " + strings.Join(parts, ", ")
}

func mix(w ycsb.Workload) string {
	var parts []string
	add := func(p float64, name string) {
		if p > 0 {
			parts = append(parts, fmt.Sprintf("%.0f%% %s", p*100, name))
		}
	}
	add(w.ReadProportion, "reads")
	add(w.UpdateProportion, "updates")
	add(w.InsertProportion, "inserts")
	add(w.ScanProportion, "scans")
	add(w.ReadModifyWriteProportion, "read-modify-writes")
	return fmt.Sprintf("%s, %s over %d records of %d bytes", strings.Join(parts, " / "), w.RequestDistribution, w.RecordCount, w.ValueBytes())
}

func wrap(s string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if line+1+len(word) > width {
				b.WriteString("\n  ")
				line = 2
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}
