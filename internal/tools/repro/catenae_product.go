package repro

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/runtime/server"
	"meridian/internal/tools/bench"
	"meridian/internal/topology"
)

// CatenaeProductOptions configure `meridian bench catenae --product`: catenae keyspaces on the
// node runtime (real nodes: gateway, event loop, committer, the catenae engine, Pebble in
// memory) on the emulated WAN, driven through the gRPC service's TxnRead and TxnCommit.
type CatenaeProductOptions struct {
	Topologies       []string
	Duration, Warmup time.Duration
	ClientsPerRegion int
	// Items the transactions draw from, uniformly.
	Items int
	// EpochLength of the keyspace (its epoch_length option).
	EpochLength time.Duration
	Seed        uint64
}

func (o CatenaeProductOptions) withDefaults() CatenaeProductOptions {
	if len(o.Topologies) == 0 {
		o.Topologies = []string{"gcp-meteorshower-3", "ec2-sdur-3"}
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup <= 0 {
		o.Warmup = 2 * time.Second
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 8
	}
	if o.Items <= 0 {
		o.Items = 100_000
	}
	if o.EpochLength <= 0 {
		o.EpochLength = 10 * time.Millisecond
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// CatenaeProductRow is one workload's result on one topology in one region (or "all").
type CatenaeProductRow struct {
	Topology, Workload, Region             string
	P50Ms, P99Ms, ThroughputTPS, AbortRate float64
	// HalfRTTMs is half the round trip to the farthest region (the commit's lower bound);
	// BoundMs adds one epoch (a transaction waits for its epoch to end).
	HalfRTTMs, BoundMs float64
	// CPUPerTxnUs is the process's CPU time (every node, the clients) per committed
	// transaction ("all" rows).
	CPUPerTxnUs float64
}

// CatenaeProductResult is the whole run.
type CatenaeProductResult struct {
	Options CatenaeProductOptions
	Rows    []CatenaeProductRow
}

// The product workloads: "blind" transactions write two items without reading (no conflict
// can abort them: Catenae's fast path); "rmw" transactions read two items (TxnRead at the
// validated prefix) and write both, incremented (TxnCommit with the versions read: an abort
// when a concurrent commit overwrote one).
var catenaeProductWorkloads = []string{"blind", "rmw"}

// CatenaeProduct runs the product benchmark.
func CatenaeProduct(ctx context.Context, o CatenaeProductOptions) (*CatenaeProductResult, error) {
	o = o.withDefaults()
	res := &CatenaeProductResult{Options: o}
	for _, name := range o.Topologies {
		topo, err := topology.Builtin(name)
		if err != nil {
			return nil, err
		}
		rows, err := catenaeProductTopology(ctx, o, topo)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		res.Rows = append(res.Rows, rows...)
	}
	return res, nil
}

func catenaeProductTopology(ctx context.Context, o CatenaeProductOptions, topo *topology.Topology) ([]CatenaeProductRow, error) {
	ks := config.Keyspace{Name: "bench", Protocol: config.ProtocolCatenae, Options: map[string]string{"epoch_length": o.EpochLength.String()}}
	c, err := bench.StartCluster(bench.ClusterOptions{Topology: topo, Keyspace: ks, Jitter: time.Millisecond, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// The replicas start after their handshake: commit until one succeeds.
	svc := c.ServiceIn(topo.Regions[0], 0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := svc.TxnCommit(ctx, &meridianpb.TxnCommitRequest{Keyspace: ks.Name, Writes: []*meridianpb.TxnWrite{{Key: []byte("warm"), Value: []byte("1")}}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the keyspace did not start: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var rows []CatenaeProductRow
	for _, w := range catenaeProductWorkloads {
		r, err := catenaeProductRun(ctx, o, c, topo, ks.Name, w)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// regionStats are one region's measurements.
type regionStats struct {
	hist              *hdrhistogram.Histogram // commit latency, µs
	commits, aborts   int64
	errors            int64
	firstErr          string
	measuredFrom, end time.Time
}

func catenaeProductRun(ctx context.Context, o CatenaeProductOptions, c *bench.Cluster, topo *topology.Topology, keyspace, workload string) ([]CatenaeProductRow, error) {
	cpu0, start := bench.SelfCPUSeconds(), time.Now()
	measureFrom, end := start.Add(o.Warmup), start.Add(o.Warmup+o.Duration)
	stats := map[string]*regionStats{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ri, region := range topo.Regions {
		st := &regionStats{hist: hdrhistogram.New(1, 60_000_000, 3), measuredFrom: measureFrom, end: end}
		stats[region] = st
		svc := c.ServiceIn(region, 0)
		for cl := range o.ClientsPerRegion {
			rng := rand.New(rand.NewPCG(o.Seed, uint64(ri*1000+cl)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) && ctx.Err() == nil {
					t0 := time.Now()
					committed, err := catenaeProductTxn(ctx, svc, keyspace, workload, rng, o.Items)
					lat := time.Since(t0)
					if t0.Before(measureFrom) {
						continue
					}
					mu.Lock()
					switch {
					case err != nil:
						st.errors++
						if st.firstErr == "" {
							st.firstErr = err.Error()
						}
					case committed:
						st.commits++
						_ = st.hist.RecordValue(max(lat.Microseconds(), 1))
					default:
						st.aborts++
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(10 * time.Millisecond)
					}
				}
			}()
		}
	}
	wg.Wait()
	cpu := bench.SelfCPUSeconds() - cpu0
	var rows []CatenaeProductRow
	all := hdrhistogram.New(1, 60_000_000, 3)
	var commits, aborts int64
	secs := o.Duration.Seconds()
	for _, region := range topo.Regions {
		st := stats[region]
		if st.errors > 0 && st.commits == 0 {
			return nil, fmt.Errorf("%s in %s: every transaction failed (%d), first: %s", workload, region, st.errors, st.firstErr)
		}
		all.Merge(st.hist)
		commits, aborts = commits+st.commits, aborts+st.aborts
		half := farthestRTTMs(topo, region) / 2
		rows = append(rows, CatenaeProductRow{Topology: topo.Name, Workload: workload, Region: region,
			P50Ms: float64(st.hist.ValueAtQuantile(50)) / 1000, P99Ms: float64(st.hist.ValueAtQuantile(99)) / 1000,
			ThroughputTPS: float64(st.commits) / secs, AbortRate: rate(st.aborts, st.commits+st.aborts),
			HalfRTTMs: half, BoundMs: half + float64(o.EpochLength.Microseconds())/1000})
	}
	// CPU over the whole run (warm-up included), per transaction committed in it: an upper
	// bound on the measured window's share.
	total := commits * int64(o.Warmup+o.Duration) / int64(o.Duration)
	rows = append(rows, CatenaeProductRow{Topology: topo.Name, Workload: workload, Region: "all",
		P50Ms: float64(all.ValueAtQuantile(50)) / 1000, P99Ms: float64(all.ValueAtQuantile(99)) / 1000,
		ThroughputTPS: float64(commits) / secs, AbortRate: rate(aborts, commits+aborts), CPUPerTxnUs: cpu / float64(max(total, 1)) * 1e6})
	return rows, nil
}

func rate(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// farthestRTTMs is the round trip from region to the farthest other region.
func farthestRTTMs(t *topology.Topology, region string) float64 {
	far := 0.0
	for _, b := range t.Regions {
		if ms, err := t.RTTMs(region, b); err == nil && ms > far {
			far = ms
		}
	}
	return far
}

// catenaeProductTxn runs one transaction; committed false: aborted (a conflict).
func catenaeProductTxn(ctx context.Context, svc *server.Service, keyspace, workload string, rng *rand.Rand, items int) (bool, error) {
	a, b := rng.IntN(items), rng.IntN(items)
	for b == a {
		b = rng.IntN(items)
	}
	keys := [][]byte{[]byte(fmt.Sprintf("item%07d", a)), []byte(fmt.Sprintf("item%07d", b))}
	req := &meridianpb.TxnCommitRequest{Keyspace: keyspace}
	switch workload {
	case "blind":
		for _, k := range keys {
			req.Writes = append(req.Writes, &meridianpb.TxnWrite{Key: k, Value: []byte(strconv.Itoa(rng.IntN(1000)))})
		}
	case "rmw":
		rd, err := svc.TxnRead(ctx, &meridianpb.TxnReadRequest{Keyspace: keyspace, Keys: keys})
		if err != nil {
			return false, err
		}
		for _, v := range rd.GetValues() {
			n, _ := strconv.Atoi(string(v.GetValue()))
			req.Reads = append(req.Reads, v.GetKey())
			req.ReadVersions = append(req.ReadVersions, v.GetVersion())
			req.Writes = append(req.Writes, &meridianpb.TxnWrite{Key: v.GetKey(), Value: []byte(strconv.Itoa(n + 1))})
		}
		req.Snapshots = rd.GetSnapshots()
	default:
		return false, fmt.Errorf("unknown workload %q", workload)
	}
	resp, err := svc.TxnCommit(ctx, req)
	if err != nil {
		return false, err
	}
	return resp.GetCommitted(), nil
}

// Markdown renders the result.
func (r *CatenaeProductResult) Markdown() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "Catenae on the node runtime (emulated WAN, 1 ms jitter, one node per region, Pebble in memory), %d closed-loop clients per region calling the gRPC service, %v measured after %v; %d items; epoch %v.\n\n",
		o.ClientsPerRegion, o.Duration, o.Warmup, o.Items, o.EpochLength)
	b.WriteString("| topology | workload | region | commit p50 (ms) | commit p99 (ms) | ½ RTT to farthest (ms) | ½ RTT + epoch (ms) | tps | aborts | CPU per txn (µs) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Rows {
		bound, half, cpu := "", "", ""
		if x.Region != "all" {
			half, bound = fmt.Sprintf("%.1f", x.HalfRTTMs), fmt.Sprintf("%.1f", x.BoundMs)
		} else {
			cpu = fmt.Sprintf("%.0f", x.CPUPerTxnUs)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %.1f | %s | %s | %.0f | %.1f%% | %s |\n", x.Topology, x.Workload, x.Region, x.P50Ms, x.P99Ms, half, bound, x.ThroughputTPS, 100*x.AbortRate, cpu)
	}
	return b.String()
}
