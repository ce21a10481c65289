package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"meridian/internal/engine"
	"meridian/internal/topology"
)

// Peer protocols in the lab (issue 7): Apache Cassandra takes Cassandra's levels
// (cassandra:QUORUM/QUORUM); etcd takes its read mode (etcd:linearizable, etcd:serializable);
// ZooKeeper takes its read mode too (zookeeper:linearizable, a sync before each read;
// zookeeper:sequential, the server's local state).
const (
	ProtocolCassandra     = "cassandra"
	ProtocolEtcd          = "etcd"
	EtcdLinearizable      = "linearizable"
	EtcdSerializable      = "serializable"
	ProtocolZooKeeper     = "zookeeper"
	ZooKeeperLinearizable = "linearizable"
	ZooKeeperSequential   = "sequential"
)

// ParseConfigs parses a --protocols list: entries separated by ';' or ',' of the form
// PROTOCOL[:READ/WRITE][:key=value+key=value], e.g.
// "quorum:QUORUM/QUORUM,quorum:ALL/ONE,meteorshower:QUORUM/QUORUM:theta=upper".
// A protocol without levels uses QUORUM/QUORUM.
func ParseConfigs(s string) ([]Config, error) {
	var out []Config
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' }) {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, ":")
		c := Config{Protocol: f[0], ReadLevel: "QUORUM", WriteLevel: "QUORUM"}
		if p, ok := engine.Lookup(c.Protocol); ok && (p.ReadLevel != "" || p.WriteLevel != "") {
			c.ReadLevel, c.WriteLevel = string(p.ReadLevel), string(p.WriteLevel)
		}
		if p, ok := engine.Lookup(c.Protocol); ok && p.NotKeyValue != "" {
			return nil, fmt.Errorf("bench: %q: %s", part, p.NotKeyValue)
		}
		if p, ok := engine.Lookup(c.Protocol); ok && p.NoPointLevels != "" {
			c.ReadLevel, c.WriteLevel = "", ""
			if len(f) > 1 && f[1] != "" {
				return nil, fmt.Errorf("bench: %q: %s takes no consistency levels: %s", part, c.Protocol, p.NoPointLevels)
			}
		}
		if c.Protocol == ProtocolEtcd {
			// etcd has one write path (the Raft log) and two read paths.
			c.ReadLevel, c.WriteLevel = EtcdLinearizable, ""
			if len(f) > 1 && f[1] != "" {
				c.ReadLevel = strings.ToLower(f[1])
				if c.ReadLevel != EtcdLinearizable && c.ReadLevel != EtcdSerializable {
					return nil, fmt.Errorf("bench: %q: etcd reads are %s or %s", part, EtcdLinearizable, EtcdSerializable)
				}
			}
			f = f[:min(len(f), 1)]
		}
		if c.Protocol == ProtocolZooKeeper {
			// ZooKeeper, like etcd, has one write path (Zab through the leader) and two reads.
			c.ReadLevel, c.WriteLevel = ZooKeeperLinearizable, ""
			if len(f) > 1 && f[1] != "" {
				c.ReadLevel = strings.ToLower(f[1])
				if c.ReadLevel != ZooKeeperLinearizable && c.ReadLevel != ZooKeeperSequential {
					return nil, fmt.Errorf("bench: %q: zookeeper reads are %s or %s", part, ZooKeeperLinearizable, ZooKeeperSequential)
				}
			}
			f = f[:min(len(f), 1)]
		}
		if len(f) > 1 && f[1] != "" {
			lv := strings.Split(f[1], "/")
			if len(lv) != 2 {
				return nil, fmt.Errorf("bench: %q: levels must be READ/WRITE, e.g. QUORUM/QUORUM", part)
			}
			c.ReadLevel, c.WriteLevel = strings.ToUpper(lv[0]), strings.ToUpper(lv[1])
		}
		if len(f) > 2 && f[2] != "" {
			c.Options = map[string]string{}
			for _, kv := range strings.Split(f[2], "+") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return nil, fmt.Errorf("bench: %q: option %q must be key=value", part, kv)
				}
				c.Options[k] = v
			}
		}
		if len(f) > 3 {
			return nil, fmt.Errorf("bench: %q: too many ':' parts", part)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no configuration given")
	}
	return out, nil
}

// protocolCounters is implemented by sessions that can report a protocol's counters summed
// over every node (engine.Counted: reads by path, lease renewals, status bytes, ...).
type protocolCounters interface {
	ProtocolCounters() map[string]int64
}

// Compare runs each configuration in turn against the target under identical load (same
// workload, clients, seed and durations) and returns one report.
func Compare(ctx context.Context, t Target, cfgs []Config, o RunOptions, log io.Writer) (*Report, error) {
	topo := t.Topology()
	rep := &Report{Topology: topo.Name, Regions: topo.Regions}
	for _, cfg := range cfgs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if log != nil {
			fmt.Fprintf(log, "running %s on %s (%s, %d clients per region, %v + %v warm-up) ...\n",
				cfg.Label(), t.Name(), o.Workload.Name, o.ClientsPerRegion, o.Duration, o.Warmup)
		}
		sess, err := t.Prepare(ctx, cfg)
		if err != nil {
			return rep, fmt.Errorf("bench: prepare %s: %w", cfg.Label(), err)
		}
		type statusCounter interface {
			StatusBytes() int64
			Nodes() int
		}
		sc, hasStatus := sess.(statusCounter)
		ro := o
		if !o.SkipLoad {
			// Load first, so the status traffic below is that of the measured run alone.
			if err := Load(ctx, sess, o.Workload, topo.Regions, max(o.LoadParallel, 256)); err != nil {
				sess.Close()
				return rep, fmt.Errorf("bench: load %s: %w", cfg.Label(), err)
			}
			ro.SkipLoad = true
		}
		var before int64
		var started time.Time
		if hasStatus {
			before, started = sc.StatusBytes(), time.Now()
		}
		pc, hasCounters := sess.(protocolCounters)
		var countersBefore map[string]int64
		if hasCounters {
			countersBefore = pc.ProtocolCounters()
		}
		run, err := Execute(ctx, sess, topo.Regions, cfg, ro)
		if err == nil && hasStatus && sc.Nodes() > 0 {
			if d := time.Since(started).Seconds(); d > 0 {
				run.StatusBytesPerNodePerS = float64(sc.StatusBytes()-before) / d / float64(sc.Nodes())
			}
		}
		if err == nil && hasCounters {
			run.ProtocolCounters = map[string]int64{}
			for k, v := range pc.ProtocolCounters() {
				if d := v - countersBefore[k]; d != 0 {
					run.ProtocolCounters[k] = d
				}
			}
		}
		sess.Close()
		if err != nil {
			return rep, fmt.Errorf("bench: run %s: %w", cfg.Label(), err)
		}
		rep.Runs = append(rep.Runs, *run)
	}
	return rep, nil
}

// SweepRTT repeats Compare over an equidistant topology of the given regions at each RTT.
func SweepRTT(ctx context.Context, newTarget func(*topology.Topology) Target, regions []string, rttsMs []float64,
	cfgs []Config, o RunOptions, log io.Writer) (*Sweep, error) {
	sw := &Sweep{}
	for _, rtt := range rttsMs {
		topo := topology.Equidistant("equidistant", regions, rtt, 0.5)
		if log != nil {
			fmt.Fprintf(log, "== RTT %.0f ms ==\n", rtt)
		}
		rep, err := Compare(ctx, newTarget(topo), cfgs, o, log)
		if err != nil {
			return sw, err
		}
		r := rtt
		rep.RTTMs = &r
		sw.Points = append(sw.Points, *rep)
	}
	return sw, nil
}

// PrintCompare prints one table: per configuration and region, read and write p50/p99, the
// physical lower bound, and each configuration's p50 ratio to the first configuration's.
func PrintCompare(w io.Writer, rep *Report) {
	if len(rep.Runs) == 0 {
		fmt.Fprintln(w, "no runs")
		return
	}
	regions := rep.Regions
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tregion\tread p50\tp99\tbound\tratio\twrite p50\tp99\tbound\tratio\terrors\t")
	base := rep.Runs[0]
	for _, run := range rep.Runs {
		for _, reg := range regions {
			s, b := run.Regions[reg], base.Regions[reg]
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t%.1f\t%.1f\t%.1f\t%s\t%d\t\n", run.Label(), reg,
				s.Read.P50Ms, s.Read.P99Ms, s.Read.LowerBoundMs, ratio(s.Read.P50Ms, b.Read.P50Ms, s.Read.Count),
				s.Write.P50Ms, s.Write.P99Ms, s.Write.LowerBoundMs, ratio(s.Write.P50Ms, b.Write.P50Ms, s.Write.Count),
				s.Read.Errors+s.Write.Errors)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "latencies in ms; bound = the physical lower bound for the configuration's guarantee; ratio = p50 / p50 of %s\n", base.Label())
	for _, run := range rep.Runs {
		fmt.Fprintf(w, "  %s: %.0f ops/s", run.Label(), run.ThroughputOps)
		if run.StatusBytesPerNodePerS > 0 {
			fmt.Fprintf(w, ", status traffic %.0f bytes/s per node", run.StatusBytesPerNodePerS)
		}
		if c := run.ProtocolCounters; c != nil && c["peer_msgs_inter"]+c["peer_msgs_intra"] > 0 {
			if ops := run.Ops(); ops > 0 {
				fmt.Fprintf(w, ", peer messages per op %.1f within regions + %.1f between (bytes %.0f + %.0f)",
					float64(c["peer_msgs_intra"])/float64(ops), float64(c["peer_msgs_inter"])/float64(ops),
					float64(c["peer_bytes_intra"])/float64(ops), float64(c["peer_bytes_inter"])/float64(ops))
			}
		}
		fmt.Fprintln(w)
	}
}

func ratio(a, b float64, count int64) string {
	if count == 0 {
		return "-"
	}
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// PrintSweep prints, per RTT and configuration, read and write p50/p99 averaged over regions.
func PrintSweep(w io.Writer, sw *Sweep) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "RTT ms\tconfiguration\tread p50\tp99\tbound\twrite p50\tp99\tbound\t")
	for _, p := range sw.Points {
		for _, run := range p.Runs {
			var rp50, rp99, rb, wp50, wp99, wb float64
			n := float64(len(run.Regions))
			for _, s := range run.Regions {
				rp50 += s.Read.P50Ms / n
				rp99 += s.Read.P99Ms / n
				rb += s.Read.LowerBoundMs / n
				wp50 += s.Write.P50Ms / n
				wp99 += s.Write.P99Ms / n
				wb += s.Write.LowerBoundMs / n
			}
			fmt.Fprintf(tw, "%.0f\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", *p.RTTMs, run.Label(), rp50, rp99, rb, wp50, wp99, wb)
		}
	}
	tw.Flush()
}
