package repro

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meridian/internal/config"
	"meridian/internal/elascass"
	"meridian/internal/engine"
	"meridian/internal/metadata"
	"meridian/internal/runtime/node"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// LargeReadOptions configure `meridian bench mayflower --product` (docs/mayflower.md, "In the
// product"): large values read at ONE on an emulated cluster whose nodes' interfaces and
// inter-region links have a bandwidth, while a node joins the first region and pulls its
// share of the data (a bootstrap stream in the background), under each large-read selector.
type LargeReadOptions struct {
	Topology *topology.Topology
	// NodesPerRegion before the join (default 2).
	NodesPerRegion int
	// Keys of ValueBytes read (default 24 of 8 MiB); BulkKeys of BulkBytes (default 300 of
	// 1 MiB) only move: the join's stream.
	Keys, ValueBytes, BulkKeys, BulkBytes int
	// NodeBandwidth and WANBandwidth, bytes/s each way (defaults 25 MB/s and 12.5 MB/s).
	NodeBandwidth, WANBandwidth float64
	// ReadersPerRegion closed-loop readers in every region of ReaderRegions (default 2; all
	// regions by default).
	ReadersPerRegion int
	ReaderRegions    []string
	// ReplicaRegions hold the read keyspace's replicas (default every region): readers in a
	// region without one read across the WAN links.
	ReplicaRegions []string
	// JoinRegion is where the node joins (default the first region).
	JoinRegion string
	// Duration caps the measured reads (default 30s; from the join's start; they stop when
	// the join is done).
	Duration time.Duration
	// ChunkBytes and Window: the reads' chunks and window per replica (defaults 256 KiB, 4).
	ChunkBytes, Window int
	// Selectors run (default nearest, snitch, hedged, mayflower).
	Selectors []string
	// NoJoin: no bootstrap stream (the idle network).
	NoJoin bool
	// ScanRecords > 0 makes each read a long scan instead of a Get: ScanRecords consecutive
	// records (in key order) of ValueBytes each, from a random loaded key, in pages of
	// ScanPageBytes (default 512 KiB; split scans, docs/mayflower.md), ScanWindow pages in
	// flight from each replica a scan reads from (scan_window_pages; default 4).
	ScanRecords, ScanPageBytes, ScanWindow int
	// Seeds runs each selector this many times (seeds Seed, Seed+1, ...; default 1) and
	// pools their reads.
	Seeds int
	Seed  uint64
	Log   io.Writer
}

func (o *LargeReadOptions) defaults() error {
	if o.Topology == nil {
		t, err := topology.Builtin("gcp-meteorshower-3")
		if err != nil {
			return err
		}
		o.Topology = t
	}
	o.NodesPerRegion = cmp.Or(o.NodesPerRegion, 2)
	o.Keys = cmp.Or(o.Keys, 24)
	o.ValueBytes = cmp.Or(o.ValueBytes, 8<<20)
	o.BulkKeys = cmp.Or(o.BulkKeys, 300)
	o.BulkBytes = cmp.Or(o.BulkBytes, 1<<20)
	if o.NodeBandwidth == 0 {
		o.NodeBandwidth = 25e6
	}
	if o.WANBandwidth == 0 {
		o.WANBandwidth = 12.5e6
	}
	o.ReadersPerRegion = cmp.Or(o.ReadersPerRegion, 2)
	o.Seeds = cmp.Or(o.Seeds, 1)
	if o.Seeds < 1 || o.Seeds > 20 {
		return fmt.Errorf("seeds %d: want 1 to 20", o.Seeds)
	}
	if o.Duration == 0 {
		o.Duration = 30 * time.Second
	}
	o.ChunkBytes = cmp.Or(o.ChunkBytes, 256<<10)
	o.Window = cmp.Or(o.Window, 4)
	if len(o.Selectors) == 0 {
		o.Selectors = []string{config.ReadSelectorNearest, config.ReadSelectorSnitch, config.ReadSelectorHedged, config.ReadSelectorMayflower}
	}
	for _, s := range o.Selectors {
		switch s {
		case config.ReadSelectorNearest, config.ReadSelectorSnitch, config.ReadSelectorHedged, config.ReadSelectorMayflower:
		default:
			return fmt.Errorf("selector %q: want nearest, snitch, hedged or mayflower", s)
		}
	}
	o.ScanPageBytes = cmp.Or(o.ScanPageBytes, 512<<10)
	o.ScanWindow = cmp.Or(o.ScanWindow, 4)
	if o.ScanWindow < 1 || o.ScanWindow > 64 {
		return fmt.Errorf("a scan window of %d pages: want 1 to 64", o.ScanWindow)
	}
	if o.ScanRecords < 0 || o.ScanRecords > 100_000 || (o.ScanRecords > 0 && (o.Keys < 2*o.ScanRecords || o.ValueBytes < 1<<10 || o.ValueBytes > 64<<20)) {
		return fmt.Errorf("scans of %d records: want 0 (Gets) or 1 to 100000 records of 1 KiB to 64 MiB, and at least twice as many keys", o.ScanRecords)
	}
	if o.ScanPageBytes < 64<<10 || o.ScanPageBytes > 4<<20 {
		return fmt.Errorf("scan pages of %d bytes: want 64 KiB to 4 MiB", o.ScanPageBytes)
	}
	if o.Keys < 1 || (o.ScanRecords == 0 && (o.ValueBytes < 2<<20 || o.ValueBytes > 64<<20)) || o.BulkKeys < 0 || o.Duration < time.Second || o.Duration > 10*time.Minute {
		return fmt.Errorf("want ≥ 1 key, values of 2 to 64 MiB, a duration of 1s to 10m")
	}
	if o.JoinRegion == "" {
		o.JoinRegion = o.Topology.Regions[0]
	}
	for _, r := range append(append(slices.Clone(o.ReaderRegions), o.ReplicaRegions...), o.JoinRegion) {
		if !o.Topology.HasRegion(r) {
			return fmt.Errorf("reader region %q is not a region of %s", r, o.Topology.Name)
		}
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// LargeReadRegion is one region's reads under one selector.
type LargeReadRegion struct {
	Region                  string
	Reads, Errors           int
	MeanMs, P50Ms, P99Ms    float64
	LowerBoundMs            float64
	JoinRegion              bool
	LatenciesMs             []float64 `json:"-"`
	CoordinatedAtReplicaPct float64
}

// LargeReadRun is one selector's run.
type LargeReadRun struct {
	Selector string
	Regions  []LargeReadRegion
	// All regions together.
	Reads                int
	MeanMs, P50Ms, P99Ms float64
	// Fetched and wasted chunk bytes, split reads (from the nodes' counters).
	FetchedBytes, WastedBytes, Splits int64
	// JoinS: how long the join took (0: not finished within the run, or no join).
	JoinS float64
}

// LargeReadResult is the experiment.
type LargeReadResult struct {
	Options LargeReadOptions `json:"-"`
	Runs    []LargeReadRun
}

// LargeReadBench runs the experiment.
func LargeReadBench(ctx context.Context, o LargeReadOptions) (*LargeReadResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	res := &LargeReadResult{Options: o}
	for _, sel := range o.Selectors {
		var runs []LargeReadRun
		for k := range o.Seeds {
			so := o
			so.Seed = o.Seed + uint64(k)
			fmt.Fprintf(o.Log, "  %s (seed %d)\n", sel, so.Seed)
			r, err := largeReadRun(ctx, so, sel)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", sel, err)
			}
			runs = append(runs, r)
		}
		res.Runs = append(res.Runs, poolRuns(runs))
	}
	return res, nil
}

// poolRuns merges one selector's runs over several seeds: the reads of all together, the
// counters summed, the join time averaged over the runs where it finished.
func poolRuns(runs []LargeReadRun) LargeReadRun {
	if len(runs) == 1 {
		return runs[0]
	}
	out := LargeReadRun{Selector: runs[0].Selector}
	joins := 0
	var all []float64
	for ri := range runs[0].Regions {
		reg := runs[0].Regions[ri]
		reg.LatenciesMs, reg.Reads, reg.Errors = nil, 0, 0
		atReplica := 0.0
		for _, r := range runs {
			x := r.Regions[ri]
			reg.LatenciesMs = append(reg.LatenciesMs, x.LatenciesMs...)
			reg.Reads += x.Reads
			reg.Errors += x.Errors
			atReplica += x.CoordinatedAtReplicaPct * float64(x.Reads) / 100
		}
		reg.MeanMs, reg.P50Ms, reg.P99Ms = latencyStats(reg.LatenciesMs)
		if reg.Reads > 0 {
			reg.CoordinatedAtReplicaPct = 100 * atReplica / float64(reg.Reads)
		}
		all = append(all, reg.LatenciesMs...)
		out.Regions = append(out.Regions, reg)
	}
	for _, r := range runs {
		out.FetchedBytes += r.FetchedBytes
		out.WastedBytes += r.WastedBytes
		out.Splits += r.Splits
		if r.JoinS > 0 {
			out.JoinS += r.JoinS
			joins++
		}
	}
	if joins > 0 {
		out.JoinS /= float64(joins)
	}
	out.Reads = len(all)
	out.MeanMs, out.P50Ms, out.P99Ms = latencyStats(all)
	return out
}

func largeReadRun(ctx context.Context, o LargeReadOptions, selector string) (LargeReadRun, error) {
	run := LargeReadRun{Selector: selector}
	on := true
	parts := min(o.Keys, 6)
	ks := config.Keyspace{Name: "bench", Protocol: config.ProtocolQuorum, ReplicasPerRegion: 1, Partitions: parts, Regions: o.ReplicaRegions,
		SplitPoints: ycsb.SplitPoints(parts), Options: map[string]string{
			"read_level": "ONE", "write_level": "QUORUM", "read_selector": selector,
			"large_read_bytes": "1MiB", "read_chunk_bytes": fmt.Sprint(o.ChunkBytes), "read_window": fmt.Sprint(o.Window),
			"scan_page_bytes": fmt.Sprint(o.ScanPageBytes), "scan_window_pages": fmt.Sprint(o.ScanWindow),
			"split_ops": "0", "split_bytes": "16GiB", "merge_bytes": "1KiB", "min_partitions": fmt.Sprint(parts)}}
	bulk := config.Keyspace{Name: "bulk", Protocol: config.ProtocolQuorum, ReplicasPerRegion: 1, Partitions: 24,
		SplitPoints: ycsb.SplitPoints(24), Options: map[string]string{
			"split_ops": "0", "split_bytes": "16GiB", "merge_bytes": "1KiB", "min_partitions": "24"}}
	elasticity := &config.Elasticity{Driver: &on, Strategy: string(elascass.TwoPhase), Interval: 250 * time.Millisecond,
		MaxMovesPerNode: 4, MaxMoves: 64, DeadAfter: 10 * time.Second, TargetByteImbalance: -1, TargetLoadImbalance: -1}
	if o.NoJoin {
		elasticity = nil // nothing to place: the driver stays off, no replica moves
	}
	c, err := bench.StartCluster(bench.ClusterOptions{
		Topology: o.Topology, NodesPerRegion: o.NodesPerRegion, Seed: o.Seed,
		Keyspace: ks, ExtraKeyspaces: []config.Keyspace{bulk}, MaxValueBytes: o.ValueBytes,
		NodeBandwidth: o.NodeBandwidth, LinkBandwidth: o.WANBandwidth,
		Network:    &config.Network{NodeBandwidth: fmt.Sprintf("%dB", int64(o.NodeBandwidth)), WANBandwidth: fmt.Sprintf("%dB", int64(o.WANBandwidth))},
		Elasticity: elasticity,
		// Anti-entropy's digests read every value (8 MiB each here) on the host's two cores:
		// rounds every 10 minutes keep them out of a run of a few minutes.
		AntiEntropyInterval: 10 * time.Minute,
		Logger:              benchLogger(),
		MetadataVoters:      firstNodes(o.Topology),
	})
	if err != nil {
		return run, err
	}
	defer c.Close()
	if err := LoadDirectInto(c, "bench", o.Keys, o.ValueBytes, o.Seed); err != nil {
		return run, err
	}
	if o.BulkKeys > 0 {
		if err := LoadDirectInto(c, "bulk", o.BulkKeys, o.BulkBytes, o.Seed+1); err != nil {
			return run, err
		}
	}
	// Let the stores finish the flushes and compactions of the load before measuring: they
	// are the host's work, not the emulated network's.
	for _, nd := range c.Nodes {
		nd.Engine().WaitIdle(2 * time.Minute)
	}
	base := largeReadCounters(c)
	joinRegion := o.JoinRegion
	var (
		mu   sync.Mutex
		lat  = map[string][]float64{}
		errN = map[string]int{}
		atRp = map[string]int{}
	)
	rctx, stop := context.WithTimeout(ctx, o.Duration)
	defer stop()
	start := time.Now()
	joinDone := make(chan float64, 1)
	// With a join, the readers read while it runs: they start no read once it is done (the
	// reads in flight then finish and count), or at Duration.
	var joined atomic.Bool
	if !o.NoJoin {
		go func() {
			nn, err := c.Join(rctx, joinRegion)
			if err != nil {
				joinDone <- 0
				return
			}
			watcher := c.Nodes[0]
			if err := waitMoves(rctx, watcher, func(st node.Status) bool {
				return stateOf(watcher, nn.ID()) == metadata.NodeActive && holdsShare(st, nn.Name())
			}); err != nil {
				joinDone <- 0
				return
			}
			joined.Store(true)
			joinDone <- time.Since(start).Seconds()
		}()
	}
	// A scan starts at a random loaded key and reads the ScanRecords keys that follow it in
	// key order (the loaded names are hashed, so the order is the sorted list's).
	var sorted [][]byte
	if o.ScanRecords > 0 {
		for i := range o.Keys {
			sorted = append(sorted, ycsb.KeyName(uint64(i), false))
		}
		slices.SortFunc(sorted, bytes.Compare)
	}
	var wg sync.WaitGroup
	for ri, region := range o.Topology.Regions {
		if len(o.ReaderRegions) > 0 && !slices.Contains(o.ReaderRegions, region) {
			continue
		}
		var coords []*node.Node
		for i := 1; i <= o.NodesPerRegion; i++ {
			coords = append(coords, c.NodeIn(region, i))
		}
		for k := range o.ReadersPerRegion {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(o.Seed, uint64(ri*100+k)))
				for rctx.Err() == nil && !joined.Load() {
					key := ycsb.KeyName(uint64(rng.IntN(o.Keys)), false)
					req := engine.Request{Op: engine.OpGet, Keyspace: "bench", Key: key, Level: config.LevelOne}
					if o.ScanRecords > 0 {
						first := rng.IntN(len(sorted) - o.ScanRecords)
						key = sorted[first]
						req = engine.Request{Op: engine.OpScan, Keyspace: "bench", Start: key, End: sorted[first+o.ScanRecords],
							Limit: o.ScanRecords, Level: config.LevelOne}
					}
					nd, atReplica := coordinatorFor(coords, k, key)
					t0 := time.Now()
					req.Deadline = t0.Add(60 * time.Second)
					r := nd.Do(rctx, req)
					d := time.Since(t0)
					if rctx.Err() != nil {
						return // cut off by the end of the run: not a read's latency
					}
					mu.Lock()
					if r.Err != nil || (o.ScanRecords == 0 && len(r.Value) != o.ValueBytes) || (o.ScanRecords > 0 && len(r.Items) != o.ScanRecords) {
						errN[region]++
					} else {
						lat[region] = append(lat[region], float64(d.Microseconds())/1000)
						if atReplica {
							atRp[region]++
						}
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if !o.NoJoin {
		select {
		case run.JoinS = <-joinDone:
		case <-time.After(time.Second):
		}
	}
	end := largeReadCounters(c)
	run.FetchedBytes, run.WastedBytes, run.Splits = end[0]-base[0], end[1]-base[1], end[2]-base[2]
	var all []float64
	for _, region := range o.Topology.Regions {
		if len(o.ReaderRegions) > 0 && !slices.Contains(o.ReaderRegions, region) {
			continue
		}
		ls := lat[region]
		all = append(all, ls...)
		rr := LargeReadRegion{Region: region, Reads: len(ls), Errors: errN[region], JoinRegion: region == joinRegion && !o.NoJoin, LatenciesMs: ls}
		rr.MeanMs, rr.P50Ms, rr.P99Ms = latencyStats(ls)
		rr.LowerBoundMs = largeReadLowerBound(o, region)
		if len(ls) > 0 {
			rr.CoordinatedAtReplicaPct = 100 * float64(atRp[region]) / float64(len(ls))
		}
		run.Regions = append(run.Regions, rr)
	}
	run.Reads = len(all)
	run.MeanMs, run.P50Ms, run.P99Ms = latencyStats(all)
	if o.ScanRecords > 0 {
		// A scan's bytes are its pages: the records it returned and those its split halves
		// read for nothing (where they met, or past the limit; scans cut off by the
		// end of the run count only their unused records).
		unused := end[3] - base[3]
		run.WastedBytes = unused * int64(o.ValueBytes)
		run.FetchedBytes = (int64(len(all))*int64(o.ScanRecords) + unused) * int64(o.ValueBytes)
	}
	fmt.Fprintf(o.Log, "    %d reads, mean %.0f ms, p99 %.0f ms, join %.1f s, %d split, %.1f%% bytes wasted\n", run.Reads, run.MeanMs, run.P99Ms, run.JoinS,
		run.Splits, 100*float64(run.WastedBytes)/float64(max(run.FetchedBytes, 1)))
	return run, nil
}

// largeReadLowerBound is the physical lower bound of a read coordinated in region on an idle
// network: the header's round trip to the nearest replica, then the value at the most the
// coordinator can receive — its interface, or less when the replicas are across WAN links
// (every replica region's path at once, each a node interface within the region or a WAN
// link from another).
func largeReadLowerBound(o LargeReadOptions, region string) float64 {
	regions := o.ReplicaRegions
	if len(regions) == 0 {
		regions = o.Topology.Regions
	}
	nearest, in := time.Duration(1<<62), 0.0
	for _, r := range regions {
		nearest = min(nearest, o.Topology.RTT(region, r))
		if r == region {
			in += o.NodeBandwidth
		} else {
			in += min(o.NodeBandwidth, o.WANBandwidth)
		}
	}
	in = min(in, o.NodeBandwidth)
	return nearest.Seconds()*1000 + float64(o.ValueBytes*max(1, o.ScanRecords))/in*1000
}

// coordinatorFor picks the node of coords that reader k's read of key goes to: from its own
// node on (readers spread over the region's nodes, as clients over gateways), the first that
// holds no replica of the key's partition (the read then crosses the network, which is what
// the selectors choose about), else its own.
func coordinatorFor(coords []*node.Node, k int, key []byte) (*node.Node, bool) {
	for i := range coords {
		nd := coords[(k+i)%len(coords)]
		ks, ok := nd.Placement().Keyspace("bench")
		if !ok {
			continue
		}
		if !slices.Contains(ks.Lookup(key).Replicas, nd.ID()) {
			return nd, false
		}
	}
	return coords[k%len(coords)], true
}

// largeReadCounters sums the cluster's fetched bytes, wasted bytes and split reads.
func largeReadCounters(c *bench.Cluster) [4]int64 {
	var out [4]int64
	for _, nd := range c.Nodes {
		mfs, err := nd.Registry().Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			i := -1
			switch mf.GetName() {
			case "meridian_large_read_bytes_total":
				i = 0
			case "meridian_large_read_wasted_bytes_total":
				i = 1
			case "meridian_large_reads_split_total", "meridian_split_scans_total":
				i = 2
			case "meridian_split_scan_unused_records_total":
				i = 3
			}
			if i < 0 {
				continue
			}
			for _, m := range mf.GetMetric() {
				out[i] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return out
}

// latencyStats returns the mean, p50 and p99 of ms.
func latencyStats(ms []float64) (mean, p50, p99 float64) {
	if len(ms) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return sum / float64(len(s)), at(0.50), at(0.99)
}

// Markdown renders the result.
func (r *LargeReadResult) Markdown() string {
	o := r.Options
	var b strings.Builder
	stream := fmt.Sprintf("while a node joins %s and pulls its share of %d MB of other data (two-phase bootstrap; reads from the join's start to its end)", o.JoinRegion, o.BulkKeys*o.BulkBytes/1e6)
	if o.NoJoin {
		stream = "on an otherwise idle network"
	}
	replicas := "every region"
	if len(o.ReplicaRegions) > 0 {
		replicas = strings.Join(o.ReplicaRegions, ", ")
	}
	what := fmt.Sprintf("of %d values of %.1f MiB (chunks of %d KiB, %d in flight per replica)", o.Keys, float64(o.ValueBytes)/(1<<20), o.ChunkBytes>>10, o.Window)
	if o.ScanRecords > 0 {
		what = fmt.Sprintf("that are scans of %d consecutive records of %d KiB (%.1f MiB; pages of %d KiB, %d in flight per replica) among %d", o.ScanRecords, o.ValueBytes>>10,
			float64(o.ScanRecords*o.ValueBytes)/(1<<20), o.ScanPageBytes>>10, o.ScanWindow, o.Keys)
	}
	fmt.Fprintf(&b, "Replicas in %s. Reads at ONE %s by %d closed-loop readers per region (%s) on %s, %d nodes per region (each coordinating for keys it holds no replica of), interfaces of %.1f MB/s and inter-region links of %.1f MB/s each way, %s, at most %v per selector and seed, %d seed(s) pooled.\n\n",
		replicas, what, o.ReadersPerRegion, readerRegions(o), o.Topology.Name, o.NodesPerRegion, o.NodeBandwidth/1e6, o.WANBandwidth/1e6, stream, o.Duration, o.Seeds)
	var nearest *LargeReadRun
	for i := range r.Runs {
		if r.Runs[i].Selector == config.ReadSelectorNearest {
			nearest = &r.Runs[i]
		}
	}
	b.WriteString("| selector | reads | mean (ms) | p50 (ms) | p99 (ms) | mean vs nearest | p99 vs nearest | split reads | extra bytes | join (s) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Runs {
		rm, rp := "—", "—"
		if nearest != nil && nearest.MeanMs > 0 {
			rm = fmt.Sprintf("%.2f", x.MeanMs/nearest.MeanMs)
			rp = fmt.Sprintf("%.2f", x.P99Ms/nearest.P99Ms)
		}
		join := "—"
		if x.JoinS > 0 {
			join = fmt.Sprintf("%.1f", x.JoinS)
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.0f | %s | %s | %d | %.1f%% | %s |\n", x.Selector, x.Reads, x.MeanMs, x.P50Ms, x.P99Ms, rm, rp,
			x.Splits, 100*float64(x.WastedBytes)/float64(max(x.FetchedBytes, 1)), join)
	}
	b.WriteString("\nPer region (p50 / p99 ms; lower bound: the header's round trip to the nearest replica plus the value at the most the coordinator can receive on an idle network, over its interface or the WAN links from every replica region):\n\n| selector |")
	if len(r.Runs) > 0 {
		for _, reg := range r.Runs[0].Regions {
			fmt.Fprintf(&b, " %s |", reg.Region)
		}
		b.WriteString("\n|---|")
		for range r.Runs[0].Regions {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, x := range r.Runs {
		fmt.Fprintf(&b, "| %s |", x.Selector)
		for _, reg := range x.Regions {
			fmt.Fprintf(&b, " %.0f / %.0f (n=%d, errors %d) |", reg.P50Ms, reg.P99Ms, reg.Reads, reg.Errors)
		}
		b.WriteString("\n")
	}
	if len(r.Runs) > 0 {
		b.WriteString("| lower bound |")
		for _, reg := range r.Runs[0].Regions {
			fmt.Fprintf(&b, " %.0f |", reg.LowerBoundMs)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func readerRegions(o LargeReadOptions) string {
	if len(o.ReaderRegions) == 0 {
		return "every region"
	}
	return strings.Join(o.ReaderRegions, ", ")
}

// CDF is the run's read latencies over every region as (ms, cumulative fraction) points.
func (r LargeReadRun) CDF() [][2]float64 {
	var all []float64
	for _, reg := range r.Regions {
		all = append(all, reg.LatenciesMs...)
	}
	slices.Sort(all)
	out := make([][2]float64, len(all))
	for i, v := range all {
		out[i] = [2]float64{v, float64(i+1) / float64(len(all))}
	}
	return out
}
