package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/topology"
)

// Run is one configuration the demo measures.
type Run struct {
	Protocol   string `json:"protocol"`
	ReadLevel  string `json:"read_level"`
	WriteLevel string `json:"write_level"`
}

// DefaultRuns are the seeds' baseline configurations (MeteorShower paper IV-2): QUORUM reads
// with QUORUM writes, and ALL reads with ONE writes — both give R + W > N.
var DefaultRuns = []Run{
	{Protocol: "quorum", ReadLevel: "QUORUM", WriteLevel: "QUORUM"},
	{Protocol: "quorum", ReadLevel: "ALL", WriteLevel: "ONE"},
}

// Options configures the demo.
type Options struct {
	Topology *topology.Topology
	// Duration is the measured time of each run (after a warm-up that is not measured).
	Duration time.Duration
	Warmup   time.Duration
	// ClientsPerRegion closed-loop clients, each talking to a node in its own region.
	ClientsPerRegion int
	Keys             int
	ValueBytes       int
	// ReadFraction of operations are reads, the rest updates (0.5 as in paper IV-A).
	ReadFraction float64
	Runs         []Run
	Seed         uint64
	Out          io.Writer
}

func (o *Options) ensureDefaults() {
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	if o.Warmup <= 0 {
		o.Warmup = 2 * time.Second
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 8
	}
	if o.Keys <= 0 {
		o.Keys = 1000
	}
	if o.ValueBytes <= 0 {
		o.ValueBytes = 100
	}
	if o.ReadFraction == 0 {
		o.ReadFraction = 0.5
	}
	if len(o.Runs) == 0 {
		o.Runs = DefaultRuns
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
}

// OpStats are the latencies of one operation type in one region.
type OpStats struct {
	Count        int64   `json:"count"`
	Errors       int64   `json:"errors"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	LowerBoundMs float64 `json:"lower_bound_ms"`
}

// RegionStats are one region's results of one run.
type RegionStats struct {
	Read  OpStats `json:"read"`
	Write OpStats `json:"write"`
}

// RunResult is one run's results.
type RunResult struct {
	Run
	Regions       map[string]RegionStats `json:"regions"`
	ThroughputOps float64                `json:"throughput_ops"`
}

// Report is the demo's JSON output.
type Report struct {
	Topology string      `json:"topology"`
	Runs     []RunResult `json:"runs"`
}

// Execute runs every configuration in turn, each on a fresh cluster under the same load, and
// prints the table.
func Execute(ctx context.Context, o Options) (*Report, error) {
	o.ensureDefaults()
	rep := &Report{Topology: o.Topology.Name}
	fmt.Fprintf(o.Out, "Meridian demo: topology %s (%s), one node per region on the emulated WAN,\n", o.Topology.Name, regionRTTs(o.Topology))
	fmt.Fprintf(o.Out, "%d clients per region, %.0f%% reads / %.0f%% updates over %d keys of %d bytes, %v measured per run.\n\n",
		o.ClientsPerRegion, o.ReadFraction*100, (1-o.ReadFraction)*100, o.Keys, o.ValueBytes, o.Duration)
	for _, r := range o.Runs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		fmt.Fprintf(o.Out, "running %s read %s / write %s ...\n", r.Protocol, r.ReadLevel, r.WriteLevel)
		res, err := executeRun(ctx, o, r)
		if err != nil {
			return rep, fmt.Errorf("demo: run %s %s/%s: %w", r.Protocol, r.ReadLevel, r.WriteLevel, err)
		}
		rep.Runs = append(rep.Runs, *res)
	}
	PrintTable(o.Out, o.Topology, rep)
	return rep, nil
}

func regionRTTs(t *topology.Topology) string {
	s := ""
	for i, a := range t.Regions {
		for _, b := range t.Regions[i+1:] {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s-%s %.0fms", a, b, float64(t.RTT(a, b).Microseconds())/1000)
		}
	}
	return "RTT " + s
}

// LowerBound is the physical minimum latency of an operation that needs `count` replies from
// the replicas (one per region here) when the client sits in `region`: the count-th smallest
// RTT from region to the replicas (the local replica costs nothing).
func LowerBound(t *topology.Topology, region string, count int) time.Duration {
	var rtts []time.Duration
	for _, r := range t.Regions {
		if r == region {
			rtts = append(rtts, 0)
		} else {
			rtts = append(rtts, t.RTT(region, r))
		}
	}
	slices.Sort(rtts)
	if count < 1 || count > len(rtts) {
		return 0
	}
	return rtts[count-1]
}

func levelCount(level string, replicas int) int {
	switch config.Level(level) {
	case config.LevelOne, config.LevelLocalOne, config.LevelLocalQuorum:
		return 1
	case config.LevelQuorum:
		return replicas/2 + 1
	case config.LevelAll:
		return replicas
	}
	return replicas
}

type regionHists struct {
	mu               sync.Mutex
	read, write      *hdrhistogram.Histogram
	readErr, writeEr int64
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 120_000_000, 3) } // µs, up to 120s

func executeRun(ctx context.Context, o Options, r Run) (*RunResult, error) {
	c, err := StartCluster(ClusterOptions{
		Topology: o.Topology,
		Keyspace: config.Keyspace{Name: "demo", Protocol: r.Protocol, ReplicasPerRegion: 1, Partitions: 16,
			Options: map[string]string{"read_level": r.ReadLevel, "write_level": r.WriteLevel}},
		Seed: o.Seed,
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	value := make([]byte, o.ValueBytes)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	if err := load(ctx, c, o.Topology.Regions[0], o.Keys, value); err != nil {
		return nil, err
	}
	hists := map[string]*regionHists{}
	for _, reg := range o.Topology.Regions {
		hists[reg] = &regionHists{read: newHist(), write: newHist()}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	measureFrom := time.Now().Add(o.Warmup)
	measureTo := measureFrom.Add(o.Duration)
	var wg sync.WaitGroup
	for ri, reg := range o.Topology.Regions {
		for ci := range o.ClientsPerRegion {
			wg.Add(1)
			go func(reg string, seed uint64, svc serviceAPI) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(o.Seed, seed))
				h := hists[reg]
				for runCtx.Err() == nil {
					now := time.Now()
					if now.After(measureTo) {
						return
					}
					key := keyName(rng.IntN(o.Keys))
					isRead := rng.Float64() < o.ReadFraction
					var err error
					start := time.Now()
					if isRead {
						_, err = svc.Get(runCtx, &meridianpb.GetRequest{Keyspace: "demo", Key: key})
					} else {
						_, err = svc.Put(runCtx, &meridianpb.PutRequest{Keyspace: "demo", Key: key, Value: value})
					}
					lat := time.Since(start)
					if start.Before(measureFrom) {
						continue
					}
					h.mu.Lock()
					switch {
					case err != nil && isRead:
						h.readErr++
					case err != nil:
						h.writeEr++
					case isRead:
						_ = h.read.RecordValue(max(1, lat.Microseconds()))
					default:
						_ = h.write.RecordValue(max(1, lat.Microseconds()))
					}
					h.mu.Unlock()
				}
			}(reg, uint64(ri*1000+ci+1), c.ServiceIn(reg, ci))
		}
	}
	wg.Wait()
	res := &RunResult{Run: r, Regions: map[string]RegionStats{}}
	var total int64
	n := len(o.Topology.Regions)
	for _, reg := range o.Topology.Regions {
		h := hists[reg]
		rs := RegionStats{
			Read:  opStats(h.read, h.readErr, LowerBound(o.Topology, reg, levelCount(r.ReadLevel, n))),
			Write: opStats(h.write, h.writeEr, LowerBound(o.Topology, reg, levelCount(r.WriteLevel, n))),
		}
		total += rs.Read.Count + rs.Write.Count
		res.Regions[reg] = rs
	}
	res.ThroughputOps = float64(total) / o.Duration.Seconds()
	return res, nil
}

// load writes every key once at ALL, 128 at a time, so reads find data in every region.
func load(ctx context.Context, c *Cluster, region string, keys int, value []byte) error {
	const parallel = 128
	sem := make(chan struct{}, parallel)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	svc := c.ServiceIn(region, 0)
	for k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := c.Put(ctx, svc, "demo", keyName(k), value, "ALL"); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("load key %d: %w", k, err)
				}
				mu.Unlock()
			}
		}(k)
	}
	wg.Wait()
	return first
}

type serviceAPI interface {
	Get(context.Context, *meridianpb.GetRequest) (*meridianpb.GetResponse, error)
	Put(context.Context, *meridianpb.PutRequest) (*meridianpb.PutResponse, error)
}

func keyName(i int) []byte { return fmt.Appendf(nil, "user%08d", i) }

func opStats(h *hdrhistogram.Histogram, errs int64, bound time.Duration) OpStats {
	return OpStats{
		Count:        h.TotalCount(),
		Errors:       errs,
		P50Ms:        float64(h.ValueAtQuantile(50)) / 1000,
		P99Ms:        float64(h.ValueAtQuantile(99)) / 1000,
		LowerBoundMs: float64(bound.Microseconds()) / 1000,
	}
}

// PrintTable prints one line per run and region.
func PrintTable(w io.Writer, t *topology.Topology, rep *Report) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tregion\treads\tp50 ms\tp99 ms\tbound ms\twrites\tp50 ms\tp99 ms\tbound ms\terrors\t")
	for _, run := range rep.Runs {
		name := fmt.Sprintf("%s %s/%s", run.Protocol, run.ReadLevel, run.WriteLevel)
		for _, reg := range t.Regions {
			s := run.Regions[reg]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%d\t%.1f\t%.1f\t%.1f\t%d\t\n", name, reg,
				s.Read.Count, s.Read.P50Ms, s.Read.P99Ms, s.Read.LowerBoundMs,
				s.Write.Count, s.Write.P50Ms, s.Write.P99Ms, s.Write.LowerBoundMs, s.Read.Errors+s.Write.Errors)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nbound = the physical lower bound: the RTT to the replica whose reply completes the level")
	fmt.Fprintln(w, "(the nearest majority for QUORUM, the farthest replica for ALL, the local replica for ONE).")
}

// WriteJSON writes the report.
func WriteJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("demo: write %s: %w", path, err)
	}
	return nil
}
