package repro

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"meridian/internal/config"
	"meridian/internal/elascass"
	"meridian/internal/hlc"
	"meridian/internal/metadata"
	"meridian/internal/runtime/node"
	"meridian/internal/storage"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/ycsb"
	"meridian/internal/topology"
)

// ElasCass's evaluation (elascass-node-bootstrapping.txt section 5), scaled to one machine:
// 1 GiB of 1 KB records with Θmax = 20 MiB keeps the paper's partition count (100 GB / 2 GB),
// every node is an emulated machine with a service capacity (requests per second) and a
// network bandwidth, so that the emulated nodes, not the host, are the bottleneck, and the
// cluster spans three regions (one replica per region at QUORUM/QUORUM: every ElasCass rule
// runs per region in Meridian).
//
//   - Bootstrap (Figs. 5, 6, 7): nodes join, one per region at a time, from StartNodes to
//     MaxNodes per region, under a read-heavy hotspot workload; per join, the time until the
//     new node serves (bootstrap time), the data it holds then (bootstrap volume) and once
//     balanced, the time to hold half its share and its whole share, the imbalance indexes of
//     replicas, bytes and load; per size, the throughput at saturation and its p99. For each
//     strategy: two-phase (ElasCass), one-phase, split-move (Cassandra).
//   - Partitioning (Fig. 8): the data loaded with the driver on, for each Θmax of a sweep: the
//     partitions made, their fullness (bytes / Θmax) and its spread, the data rewritten by the
//     splits, and the write p99 while splitting against a run without splits.

// ElasticOptions parameterise the ElasCass experiments.
type ElasticOptions struct {
	Topology *topology.Topology
	// DataBytes of records of RecordBytes (value size).
	DataBytes   int64
	RecordBytes int
	// ThetaMax and ThetaMin are the keyspace's split_bytes and merge_bytes.
	ThetaMax, ThetaMin int64
	// StartNodes and MaxNodes per region (the bootstrap experiment's range).
	StartNodes, MaxNodes int
	Strategies           []elascass.Strategy
	// NodeCapacityOps and NodeBandwidth model each node (bench.ClusterOptions).
	NodeCapacityOps float64
	NodeBandwidth   float64
	// BackgroundClients per region run the read-heavy hotspot workload during joins;
	// SaturationClients per region (and node per region) measure the throughput at each
	// size, after at least BalanceDuration of the same workload during which the driver
	// splits hot partitions (SplitOps: the keyspace's split_ops, default a third of a node's
	// capacity) and refines the placement, until it is quiet (balanceUnderLoad).
	BackgroundClients, SaturationClients int
	MeasureDuration, BalanceDuration     time.Duration
	SplitOps                             float64
	// P99BoundMs, when positive, adds to each size of the bootstrap experiment a search for the
	// highest open-loop rate of the same Zipfian workload whose every region's p99 of every
	// operation stays under it (bench.SearchMax; probes of ProbeDuration): the throughput at
	// a p99 bound, whose scaling efficiency the issue asks for.
	P99BoundMs    float64
	ProbeDuration time.Duration
	// ThetaSweep lists Θmax values of the partitioning experiment (Θmin = Θmax/2);
	// PartitionBytes is its data size.
	ThetaSweep     []int64
	PartitionBytes int64
	// Interval is the elasticity interval (statistics and driver rounds); MaxMovesPerNode
	// the moves into one node at a time (the background phase's throttle).
	Interval        time.Duration
	MaxMovesPerNode int
	// StepTimeout bounds one join's wait for its node to serve and the cluster to balance.
	StepTimeout time.Duration
	Seed        uint64
	Log         io.Writer

	currentStrategy elascass.Strategy
}

func (o *ElasticOptions) defaults() {
	if o.DataBytes == 0 {
		o.DataBytes = 1 << 30
	}
	if o.RecordBytes == 0 {
		o.RecordBytes = 1000
	}
	if o.ThetaMax == 0 {
		o.ThetaMax = 20 << 20
	}
	if o.ThetaMin == 0 {
		o.ThetaMin = o.ThetaMax / 2
	}
	if o.StartNodes == 0 {
		o.StartNodes = 1
	}
	if o.MaxNodes == 0 {
		o.MaxNodes = 4
	}
	if len(o.Strategies) == 0 {
		o.Strategies = []elascass.Strategy{elascass.TwoPhase, elascass.OnePhase, elascass.SplitMove}
	}
	if o.NodeCapacityOps == 0 {
		o.NodeCapacityOps = 1500
	}
	if o.NodeBandwidth == 0 {
		o.NodeBandwidth = 40e6
	}
	if o.BackgroundClients == 0 {
		o.BackgroundClients = 4
	}
	if o.SaturationClients == 0 {
		o.SaturationClients = 48
	}
	if o.MeasureDuration == 0 {
		o.MeasureDuration = 6 * time.Second
	}
	if o.BalanceDuration == 0 {
		o.BalanceDuration = 20 * time.Second
	}
	if o.SplitOps == 0 {
		o.SplitOps = o.NodeCapacityOps / 3
	}
	if len(o.ThetaSweep) == 0 {
		o.ThetaSweep = []int64{8 << 20, 16 << 20, 32 << 20, 64 << 20}
	}
	if o.PartitionBytes == 0 {
		o.PartitionBytes = 512 << 20
	}
	if o.Interval == 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.MaxMovesPerNode == 0 {
		o.MaxMovesPerNode = 4
	}
	if o.StepTimeout == 0 {
		o.StepTimeout = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// JoinResult is one node's join.
type JoinResult struct {
	Node   string `json:"node"`
	Region string `json:"region"`
	// NodesInRegion after the join.
	NodesInRegion int `json:"nodes_in_region"`
	// JoinS: the registration (the metadata's join command, in force on every live node);
	// BootstrapS: from the join until the node served (became active; phase 1 over).
	JoinS      float64 `json:"join_s"`
	BootstrapS float64 `json:"bootstrap_s"`
	// BootstrapBytes: the data it held then; BootstrapReplicas the replicas.
	BootstrapBytes    int64 `json:"bootstrap_bytes"`
	BootstrapReplicas int   `json:"bootstrap_replicas"`
	// FirstReplicaS: until its first incoming replica had caught up and the move finished
	// (it then serves that partition's reads too).
	FirstReplicaS float64 `json:"first_replica_s"`
	// HalfShareS and FullShareS: until it held half of, and all of, its region's share R̄
	// (floor); FinalBytes and FinalReplicas once the region was balanced.
	HalfShareS    float64 `json:"half_share_s"`
	FullShareS    float64 `json:"full_share_s"`
	FinalBytes    int64   `json:"final_bytes"`
	FinalReplicas int     `json:"final_replicas"`
	// BalanceVolume is the share of the region's data the i-th node ideally holds (1/i).
	BalanceVolumeBytes int64 `json:"balance_volume_bytes"`
}

// SizeResult is the cluster at one size (nodes per region), balanced.
type SizeResult struct {
	NodesPerRegion int `json:"nodes_per_region"`
	// BalanceS: how long the unmeasured Zipfian load ran before the measured run (until the
	// driver had been quiet for a while); MovesDuringMeasure and SplitsDuringMeasure: the
	// changes the driver started while measuring (as the driving node counts them).
	BalanceS            float64 `json:"balance_s"`
	MovesDuringMeasure  int64   `json:"moves_during_measure"`
	SplitsDuringMeasure int64   `json:"splits_during_measure"`
	// Imbalance indexes (the worst region's) of replicas and bytes once the joins were over
	// (after phase 2: the hotspot workload), and of replicas, bytes and utilisation (CPU,
	// averaged over the measured run) under the saturating Zipfian load, after the load
	// splits and refinement of BalanceDuration; the mean utilisation of the nodes then.
	JoinedReplicaImbalance float64 `json:"joined_replica_imbalance"`
	JoinedByteImbalance    float64 `json:"joined_byte_imbalance"`
	ReplicaImbalance       float64 `json:"replica_imbalance"`
	ByteImbalance          float64 `json:"byte_imbalance"`
	CPUImbalance           float64 `json:"cpu_imbalance"`
	MeanCPU                float64 `json:"mean_cpu"`
	// ThroughputOps and the p99 of reads and writes per region at saturation.
	ThroughputOps float64 `json:"throughput_ops"`
	// AtBound is the rate search under ElasticOptions.P99BoundMs (nil: not run).
	AtBound    *bench.MaxResult              `json:"at_bound,omitempty"`
	Regions    map[string]bench.RegionStats  `json:"regions"`
	Partitions int                           `json:"partitions"`
	Joins      []JoinResult                  `json:"joins"`
	Extra      map[string]float64            `json:"extra,omitempty"`
	Nodes      map[string]map[string]float64 `json:"nodes"`
}

// StrategyResult is the bootstrap experiment for one strategy.
type StrategyResult struct {
	Strategy string       `json:"strategy"`
	Sizes    []SizeResult `json:"sizes"`
	// ScalingEfficiency[i] = throughput(size i) / (throughput(first size) · nodes_i/nodes_0).
	ScalingEfficiency []float64 `json:"scaling_efficiency"`
	// EfficiencyAtBound is the same ratio of the throughputs at the p99 bound.
	EfficiencyAtBound []float64 `json:"efficiency_at_bound,omitempty"`
}

// PartitionResult is one Θmax of the partitioning experiment.
type PartitionResult struct {
	ThetaMaxBytes int64   `json:"theta_max_bytes"`
	Partitions    int     `json:"partitions"`
	FullnessMean  float64 `json:"fullness_mean"`
	FullnessSD    float64 `json:"fullness_sd"`
	// Splits made, and the bytes every node wrote (WAL and ingested sstables) while they were
	// made with no client writing, per split: the metadata records only, the data stays.
	Splits                int     `json:"splits"`
	BytesWrittenPerSplit  float64 `json:"bytes_written_per_split"`
	WriteP99NoSplitsMs    float64 `json:"write_p99_no_splits_ms"`
	WriteP99DuringSplitMs float64 `json:"write_p99_during_splits_ms"`
	SplitsDuringRun       int     `json:"splits_during_run"`
}

// ElasticResults is everything the experiments measured.
type ElasticResults struct {
	Options      map[string]any    `json:"options"`
	Strategies   []StrategyResult  `json:"strategies"`
	Partitioning []PartitionResult `json:"partitioning"`
	// DataSweep: two-phase bootstrap time (and one-phase, for contrast) of a node joining a
	// one-node region over data sizes: the first phase does not grow with the data.
	DataSweep []DataPoint `json:"data_sweep"`
}

// DataPoint is one data size of the sweep.
type DataPoint struct {
	DataBytes      int64   `json:"data_bytes"`
	Strategy       string  `json:"strategy"`
	BootstrapS     float64 `json:"bootstrap_s"`
	BootstrapBytes int64   `json:"bootstrap_bytes"`
	FullShareS     float64 `json:"full_share_s"`
}

// ElasticCluster starts an emulated cluster for the experiments: nodes per region, keyspace
// "bench" (quorum, QUORUM/QUORUM, Θmax/Θmin, YCSB split points for 16 initial partitions), the
// placement driver with strategy.
func ElasticCluster(o ElasticOptions, nodes int, strategy elascass.Strategy, thetaMax, thetaMin int64, splitOps float64, driver bool) (*bench.Cluster, error) {
	on := driver
	return bench.StartCluster(bench.ClusterOptions{
		Topology: o.Topology, NodesPerRegion: nodes, Seed: o.Seed,
		Keyspace: config.Keyspace{Name: "bench", Protocol: config.ProtocolQuorum, ReplicasPerRegion: 1, Partitions: 16,
			SplitPoints: ycsb.SplitPoints(16), Options: map[string]string{
				"read_level": "QUORUM", "write_level": "QUORUM", "split_ops": fmt.Sprint(int(splitOps)), "min_partitions": "1",
				"split_bytes": fmt.Sprint(thetaMax), "merge_bytes": fmt.Sprint(thetaMin)}},
		NodeCapacityOps: o.NodeCapacityOps, NodeBandwidth: o.NodeBandwidth,
		Elasticity: &config.Elasticity{Driver: &on, Strategy: string(strategy), Interval: o.Interval, MaxMovesPerNode: o.MaxMovesPerNode, MaxMoves: 64,
			DeadAfter: time.Hour},
		Logger: benchLogger(),
	})
}

// benchLogger is the nodes' logger: silent, or (MERIDIAN_BENCH_LOG=info|debug|warn) on stderr.
func benchLogger() *slog.Logger {
	var lvl slog.Level
	if v := os.Getenv("MERIDIAN_BENCH_LOG"); v != "" && lvl.UnmarshalText([]byte(v)) == nil {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	}
	return slog.New(slog.DiscardHandler)
}

// LoadDirect writes records keys 0..n-1 (YCSB hashed key names) with values of valueBytes
// straight into the storage of every replica of their partitions, as a bulk import does: the
// experiments are about moving data, not about loading it through the write path.
func LoadDirect(c *bench.Cluster, n int, valueBytes int, seed uint64) error {
	return LoadDirectInto(c, "bench", n, valueBytes, seed)
}

// LoadDirectInto is LoadDirect into the named keyspace.
func LoadDirectInto(c *bench.Cluster, keyspace string, n int, valueBytes int, seed uint64) error {
	pm := c.Nodes[0].Placement()
	ks, ok := pm.Keyspace(keyspace)
	if !ok {
		return fmt.Errorf("repro: no keyspace %s", keyspace)
	}
	engines := map[uint32]*storage.Engine{}
	for _, nd := range c.Nodes {
		engines[nd.ID()] = nd.Engine()
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	batches := map[uint32][]storage.Record{}
	now := time.Now().UnixNano()
	flush := func(id uint32, sync bool) error {
		if len(batches[id]) == 0 {
			return nil
		}
		err := engines[id].Apply(batches[id], sync)
		batches[id] = batches[id][:0]
		return err
	}
	for i := range n {
		key := ycsb.KeyName(uint64(i), false)
		val := make([]byte, valueBytes)
		for j := 0; j < len(val); j += 8 {
			v := rng.Uint64()
			for k := 0; k < 8 && j+k < len(val); k++ {
				val[j+k] = 'a' + byte(v>>(8*k))%26
			}
		}
		rec := storage.Record{Keyspace: keyspace, Key: key, Value: val, Version: hlc.Version{WallNanos: now, Logical: uint32(i), NodeID: 1}}
		for _, r := range ks.Lookup(key).Replicas {
			batches[r] = append(batches[r], rec)
			// Batches of at most 2,000 records or 64 MiB.
			if len(batches[r]) >= 2000 || len(batches[r])*valueBytes >= 64<<20 {
				if err := flush(r, false); err != nil {
					return err
				}
			}
		}
	}
	for id := range engines {
		if err := flush(id, true); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until the cluster's partition count and moves have been stable for settleRounds
// elasticity intervals, up to timeout; it returns the partition count.
// balanceUnderLoad runs the saturating Zipfian load unmeasured while the driver splits hot
// partitions and refines the placement: at least BalanceDuration, then until no move has been
// in flight for balanceQuiet (longer than the driver's settle_for, so a refinement that was
// going to act has acted), at most 4×BalanceDuration. It returns how long that took.
func balanceUnderLoad(ctx context.Context, c *bench.Cluster, cfg bench.Config, o ElasticOptions, records, size int) (float64, error) {
	const balanceQuiet = 7 * time.Second
	bctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = bench.Execute(bctx, bench.ReplicaAwareSessionOf(c, cfg), o.Topology.Regions, cfg, bench.RunOptions{Workload: zipfWorkload(records, o.RecordBytes),
			SkipLoad: true, ClientsPerRegion: o.SaturationClients * size, Duration: time.Hour, Seed: o.Seed + 100 + uint64(size)})
	}()
	defer func() { stop(); <-done }()
	start := time.Now()
	var quietSince time.Time
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(o.Interval):
		}
		now := time.Now()
		if len(c.Nodes[0].ClusterStatus().Moves) > 0 {
			quietSince = time.Time{}
		} else if quietSince.IsZero() {
			quietSince = now
		}
		el := now.Sub(start)
		if (el >= o.BalanceDuration && !quietSince.IsZero() && now.Sub(quietSince) >= balanceQuiet) || el >= 4*o.BalanceDuration {
			return el.Seconds(), nil
		}
	}
}

func settle(ctx context.Context, c *bench.Cluster, interval, timeout time.Duration) (int, error) {
	// Stable for 3 s and a dozen driver rounds: the statistics of a change take a round or
	// two to reach the driver, and the driver makes a few changes per round.
	settleRounds := max(12, int(3*time.Second/interval))
	deadline := time.Now().Add(timeout)
	last, stable := -1, 0
	for time.Now().Before(deadline) {
		st := c.Nodes[0].ClusterStatus()
		if ks, ok := c.Nodes[0].Placement().Keyspace("bench"); !ok || ks.Version == 0 {
			// Not in the cluster metadata yet: the driver leaves it alone until it is.
			time.Sleep(interval)
			continue
		}
		if st.Partitions == last && len(st.Moves) == 0 {
			stable++
		} else {
			stable = 0
		}
		last = st.Partitions
		if stable >= settleRounds {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(interval):
		}
	}
	return last, fmt.Errorf("repro: the cluster did not settle within %v (%d partitions)", timeout, last)
}

// nodeBytes is the data node n holds in keyspace bench (its storage's estimate, exact for
// small amounts).
func nodeBytes(n *node.Node) int64 {
	b, _ := n.Engine().SpanBytes(storage.KeyspaceSpan("bench"), 8<<20)
	return int64(b)
}

// heldBy counts the partitions of bench whose replica is on node id.
func heldBy(n *node.Node, id uint32) (replicas, partitions int) {
	ks, ok := n.Placement().Keyspace("bench")
	if !ok {
		return 0, 0
	}
	for i := range ks.Partitions {
		if ks.Partitions[i].HasReplica(id) {
			replicas++
		}
	}
	return replicas, len(ks.Partitions)
}

// stateOf is a member's state as node n sees it.
func stateOf(n *node.Node, id uint32) string {
	for _, m := range n.Members() {
		if m.ID == id {
			return m.State
		}
	}
	return metadata.NodeRemoved
}

// joinAndWatch joins a node to region and follows it until its region is balanced.
func joinAndWatch(ctx context.Context, c *bench.Cluster, region string, o ElasticOptions) (JoinResult, error) {
	start := time.Now()
	nn, err := c.Join(ctx, region)
	if err != nil {
		return JoinResult{}, err
	}
	jr := JoinResult{Node: nn.Name(), Region: region, JoinS: time.Since(start).Seconds()}
	watcher := c.Nodes[0]
	deadline := start.Add(o.StepTimeout)
	served := false
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return jr, ctx.Err()
		}
		st := watcher.ClusterStatus()
		inRegion, total := 0, 0
		for _, m := range st.Nodes {
			if m.Region == region && (m.State == metadata.NodeActive || m.State == metadata.NodeJoining) {
				inRegion++
			}
		}
		held, parts := heldBy(watcher, nn.ID())
		total = parts
		share := 0
		if inRegion > 0 {
			share = total / inRegion
		}
		jr.NodesInRegion = inRegion
		el := time.Since(start).Seconds()
		if !served && stateOf(watcher, nn.ID()) == metadata.NodeActive {
			served = true
			jr.BootstrapS, jr.BootstrapBytes, jr.BootstrapReplicas = el, nodeBytes(nn), held
			fmt.Fprintf(o.Log, "    %s serves after %.1fs holding %d replicas (%.1f MiB)\n", nn.Name(), el, held, float64(jr.BootstrapBytes)/(1<<20))
		}
		if jr.FirstReplicaS == 0 && held > 0 {
			jr.FirstReplicaS = el
		}
		if served && jr.HalfShareS == 0 && share > 0 && held*2 >= share {
			jr.HalfShareS = el
		}
		if served && jr.FullShareS == 0 && share > 0 && held >= share {
			jr.FullShareS = el
		}
		movesIn := false
		for _, mv := range st.Moves {
			movesIn = movesIn || mv.To == nn.Name() || mv.From == nn.Name()
		}
		// Done once the node holds its share and no move into or out of it is in flight
		// (refinement elsewhere may go on: it is not this join's work).
		if served && (jr.FullShareS > 0 || o.strategyStops()) && !movesIn {
			jr.FinalBytes, jr.FinalReplicas = nodeBytes(nn), held
			return jr, nil
		}
		time.Sleep(o.Interval / 2)
	}
	return jr, fmt.Errorf("repro: %s did not serve and balance within %v (state %s)", nn.Name(), o.StepTimeout, stateOf(watcher, nn.ID()))
}

// strategyStops is set while a strategy that never balances (split-move) runs: a join is
// over once its moves are.
func (o ElasticOptions) strategyStops() bool { return o.currentStrategy == elascass.SplitMove }

// Bootstrap runs the bootstrap experiment for one strategy.
func elasticBootstrap(ctx context.Context, o ElasticOptions, s elascass.Strategy) (StrategyResult, error) {
	o.currentStrategy = s
	res := StrategyResult{Strategy: string(s)}
	c, err := ElasticCluster(o, o.StartNodes, s, o.ThetaMax, o.ThetaMin, o.SplitOps, true)
	if err != nil {
		return res, err
	}
	defer c.Close()
	records := int(o.DataBytes / int64(o.RecordBytes))
	fmt.Fprintf(o.Log, "%s: loading %d records of %d B into %d node(s) per region\n", s, records, o.RecordBytes, o.StartNodes)
	if err := LoadDirect(c, records, o.RecordBytes, o.Seed); err != nil {
		return res, err
	}
	parts, err := settle(ctx, c, o.Interval, o.StepTimeout)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(o.Log, "  %d partitions after splitting (Θmax %d MiB)\n", parts, o.ThetaMax>>20)
	cfg := bench.Config{Protocol: config.ProtocolQuorum, ReadLevel: "QUORUM", WriteLevel: "QUORUM"}
	bg := hotspotWorkload(records, o.RecordBytes)
	for size := o.StartNodes; size <= o.MaxNodes; size++ {
		sr := SizeResult{NodesPerRegion: size, Extra: map[string]float64{}}
		if size > o.StartNodes {
			// One join per region, under the background workload, the regions one after
			// another (a region's joins are independent of another's).
			bctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = bench.Execute(bctx, bench.ReplicaAwareSessionOf(c, cfg), o.Topology.Regions, cfg, bench.RunOptions{Workload: bg, SkipLoad: true,
					ClientsPerRegion: o.BackgroundClients, Duration: time.Hour, Seed: o.Seed})
			}()
			for _, region := range o.Topology.Regions {
				jr, err := joinAndWatch(ctx, c, region, o)
				if err != nil {
					stop()
					wg.Wait()
					return res, err
				}
				jr.BalanceVolumeBytes = o.DataBytes / int64(size)
				sr.Joins = append(sr.Joins, jr)
			}
			stop()
			wg.Wait()
		}
		if _, err := settle(ctx, c, o.Interval, o.StepTimeout); err != nil {
			return res, err
		}
		st := c.Nodes[0].ClusterStatus()
		sr.JoinedReplicaImbalance, sr.JoinedByteImbalance = st.ReplicaImbalance, st.ByteImbalance
		// Saturation: closed loop, many clients per region; the first BalanceDuration is
		// not measured (load splits and refinement under the Zipfian load), the utilisation
		// of every node is averaged over the measured part.
		balanceS, err := balanceUnderLoad(ctx, c, cfg, o, records, size)
		if err != nil {
			return res, err
		}
		sr.BalanceS = balanceS
		before := c.Nodes[0].ClusterStatus()
		var cpu *cpuSampler
		var workBefore map[string][2]int64
		measureStart := time.Now()
		run, err := bench.Execute(ctx, bench.ReplicaAwareSessionOf(c, cfg), o.Topology.Regions, cfg, bench.RunOptions{Workload: zipfWorkload(records, o.RecordBytes),
			SkipLoad: true, ClientsPerRegion: o.SaturationClients * size, Warmup: 3 * time.Second, Duration: o.MeasureDuration, Seed: o.Seed + uint64(size),
			OnMeasureStart: func() { cpu, workBefore, measureStart = startCPUSampler(c, o.Interval), c.Work(), time.Now() }})
		if cpu == nil {
			return res, fmt.Errorf("repro: the saturation run at %d nodes per region never started measuring: %w", size, err)
		}
		avgCPU := cpu.stop()
		workAfter, measured := c.Work(), time.Since(measureStart).Seconds()
		if err != nil {
			return res, err
		}
		sr.ThroughputOps, sr.Regions = run.ThroughputOps, run.Regions
		st = c.Nodes[0].ClusterStatus()
		sr.MovesDuringMeasure, sr.SplitsDuringMeasure = st.MovesStarted-before.MovesStarted, st.Splits-before.Splits
		sr.Partitions = st.Partitions
		sr.ReplicaImbalance, sr.ByteImbalance = st.ReplicaImbalance, st.ByteImbalance
		var cpus []float64
		sr.Nodes = map[string]map[string]float64{}
		byRegion := map[string][]float64{}
		for _, nst := range st.Nodes {
			u := avgCPU[nst.Name]
			cpus = append(cpus, u)
			byRegion[nst.Region] = append(byRegion[nst.Region], u)
			sr.Nodes[nst.Name] = map[string]float64{"replicas": float64(nst.Replicas), "bytes": float64(nst.Bytes), "cpu": u, "ops": nst.LoadOps,
				// Service slots per second booked by clients and by peers while measured.
				"client_slots_s": float64(workAfter[nst.Name][0]-workBefore[nst.Name][0]) / measured,
				"peer_slots_s":   float64(workAfter[nst.Name][1]-workBefore[nst.Name][1]) / measured}
			if _, heard := avgCPU[nst.Name]; !heard {
				fmt.Fprintf(o.Log, "    (the driving node did not hear %s's statistics while measuring: its cpu is not known)\n", nst.Name)
			}
		}
		for _, v := range byRegion {
			sr.CPUImbalance = max(sr.CPUImbalance, elascass.Imbalance(v))
		}
		sr.MeanCPU = mean(cpus)
		fmt.Fprintf(o.Log, "  %d node(s)/region: joined: imbalance replicas %.3f bytes %.3f; balanced under load for %.0fs; saturated: %.0f ops/s, %d partitions, mean cpu %.0f%%, imbalance replicas %.3f bytes %.3f cpu %.3f (%d moves, %d splits while measuring)\n",
			size, sr.JoinedReplicaImbalance, sr.JoinedByteImbalance, sr.BalanceS, sr.ThroughputOps, sr.Partitions, 100*sr.MeanCPU, sr.ReplicaImbalance, sr.ByteImbalance, sr.CPUImbalance,
			sr.MovesDuringMeasure, sr.SplitsDuringMeasure)
		if o.P99BoundMs > 0 {
			// Open loop from a quarter of the closed-loop saturation upward (doubling, then
			// four bisections: the answer is within about 3% of the highest rate that holds).
			start := max(1, sr.ThroughputOps/float64(len(o.Topology.Regions))/4)
			// The saturating run left every node a backlog (its queued requests): let it
			// drain first, and after each probe over the bound (bench.MaxOptions.Cooldown).
			cool := 2 * max(o.ProbeDuration, time.Second)
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(cool):
			}
			mr, err := bench.SearchMax(ctx, bench.ReplicaAwareSessionOf(c, cfg), o.Topology.Regions, cfg, size*len(o.Topology.Regions),
				bench.RunOptions{Workload: zipfWorkload(records, o.RecordBytes), SkipLoad: true, ClientsPerRegion: o.SaturationClients * size, Seed: o.Seed + 100 + uint64(size)},
				bench.MaxOptions{P99BoundMs: o.P99BoundMs, StartRatePerRegion: start, Probe: o.ProbeDuration, Cooldown: cool}, o.Log)
			if err != nil {
				return res, fmt.Errorf("repro: rate search at %d nodes per region: %w", size, err)
			}
			sr.AtBound = mr
			fmt.Fprintf(o.Log, "  %d node(s)/region: %.0f ops/s with every p99 under %.0f ms (p99 %.0f ms)\n", size, mr.BestOps, o.P99BoundMs, mr.BestP99Ms)
		}
		res.Sizes = append(res.Sizes, sr)
	}
	base := res.Sizes[0]
	for _, sr := range res.Sizes {
		scale := float64(sr.NodesPerRegion) / float64(base.NodesPerRegion)
		res.ScalingEfficiency = append(res.ScalingEfficiency, sr.ThroughputOps/(base.ThroughputOps*scale))
		if sr.AtBound != nil && base.AtBound != nil && base.AtBound.BestOps > 0 {
			res.EfficiencyAtBound = append(res.EfficiencyAtBound, sr.AtBound.BestOps/(base.AtBound.BestOps*scale))
		}
	}
	return res, nil
}

// cpuSampler averages every node's utilisation (its statistics' CPU, as the driving node
// hears them) over a run.
type cpuSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	sum  map[string]float64
	n    map[string]int
}

func startCPUSampler(c *bench.Cluster, every time.Duration) *cpuSampler {
	s := &cpuSampler{done: make(chan struct{}), sum: map[string]float64{}, n: map[string]int{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
			}
			for _, nst := range c.Nodes[0].ClusterStatus().Nodes {
				if nst.Alive {
					s.sum[nst.Name] += nst.CPU
					s.n[nst.Name]++
				}
			}
		}
	}()
	return s
}

// stop ends the sampling and returns each node's mean utilisation.
func (s *cpuSampler) stop() map[string]float64 {
	close(s.done)
	s.wg.Wait()
	out := map[string]float64{}
	for name, sum := range s.sum {
		out[name] = sum / float64(s.n[name])
	}
	return out
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// hotspotWorkload is ElasCass Table 2's read-intensive workload: 95/5, 80% of the requests on
// 20% of the data.
func hotspotWorkload(records, valueBytes int) ycsb.Workload {
	w := ycsb.Defaults()
	w.Name = "elascass-read-hotspot"
	w.RecordCount, w.FieldCount, w.FieldLength = records, 1, valueBytes
	w.ReadProportion, w.UpdateProportion = 0.95, 0.05
	w.RequestDistribution = ycsb.DistHotspot
	return w
}

// ycsbB is YCSB B (95% reads, 5% updates, uniform keys) over records single-field values of
// valueBytes: the client load of the BwMan and autoscaling experiments.
func ycsbB(records, valueBytes int) ycsb.Workload {
	w := hotspotWorkload(records, valueBytes)
	w.Name = "ycsb-b"
	w.RequestDistribution = ycsb.DistUniform
	return w
}

// zipfWorkload is the zipfian (0.99) read-intensive workload of ElasCass Figs. 6-7.
func zipfWorkload(records, valueBytes int) ycsb.Workload {
	w := hotspotWorkload(records, valueBytes)
	w.Name = "elascass-read-zipfian"
	w.RequestDistribution = ycsb.DistZipfian
	return w
}

// elasticPartitioning runs Fig. 8 for one Θmax. The data is loaded with splitting off, and a
// write workload measured (the reference); then Θmax is set to twice its value (alter-
// keyspace) and the splits are left to happen with no client writing, counting the bytes the
// nodes write meanwhile; then Θmax is set to its value while the write workload runs again
// (the p99 while splitting), and once the splits have settled the partitions' fullness is
// measured.
func elasticPartitioning(ctx context.Context, o ElasticOptions, thetaMax int64) (PartitionResult, error) {
	pr := PartitionResult{ThetaMaxBytes: thetaMax}
	c, err := ElasticCluster(o, 1, elascass.TwoPhase, 1<<50, 0, 0, true)
	if err != nil {
		return pr, err
	}
	defer c.Close()
	records := int(o.PartitionBytes / int64(o.RecordBytes))
	if err := LoadDirect(c, records, o.RecordBytes, o.Seed); err != nil {
		return pr, err
	}
	cfg := bench.Config{Protocol: config.ProtocolQuorum, ReadLevel: "QUORUM", WriteLevel: "QUORUM"}
	writes := hotspotWorkload(records, o.RecordBytes)
	writes.Name, writes.ReadProportion, writes.UpdateProportion, writes.RequestDistribution = "writes-uniform", 0, 1, ycsb.DistUniform
	ro := bench.RunOptions{Workload: writes, SkipLoad: true, ClientsPerRegion: o.BackgroundClients, Warmup: time.Second, Duration: o.MeasureDuration, Seed: o.Seed}
	ref, err := bench.Execute(ctx, bench.ReplicaAwareSessionOf(c, cfg), o.Topology.Regions, cfg, ro)
	if err != nil {
		return pr, err
	}
	pr.WriteP99NoSplitsMs = maxP99(ref, "write")
	alter := func(t int64) error {
		_, _, _, _, err := c.Nodes[0].AlterKeyspace(ctx, "bench", node.KeyspaceChange{SetOptions: map[string]string{
			"split_bytes": fmt.Sprint(t), "merge_bytes": fmt.Sprint(t / 2)}}, 10*time.Second)
		return err
	}
	p0 := c.Nodes[0].ClusterStatus().Partitions
	w0 := bytesWritten(c)
	if err := alter(2 * thetaMax); err != nil {
		return pr, err
	}
	p1, err := settle(ctx, c, o.Interval, o.StepTimeout)
	if err != nil {
		return pr, err
	}
	if p1 > p0 {
		pr.BytesWrittenPerSplit = float64(bytesWritten(c)-w0) / float64(p1-p0)
	}
	if err := alter(thetaMax); err != nil {
		return pr, err
	}
	during, err := bench.Execute(ctx, bench.ReplicaAwareSessionOf(c, cfg), o.Topology.Regions, cfg, ro)
	if err != nil {
		return pr, err
	}
	pr.WriteP99DuringSplitMs = maxP99(during, "write")
	pr.SplitsDuringRun = c.Nodes[0].ClusterStatus().Partitions - p1
	p2, err := settle(ctx, c, o.Interval, o.StepTimeout)
	if err != nil {
		return pr, err
	}
	pr.Partitions, pr.Splits = p2, p2-p0
	ks, _ := c.Nodes[0].Placement().Keyspace("bench")
	var full []float64
	for i := range ks.Partitions {
		b, _ := c.Nodes[0].Engine().SpanBytes(ks.Partitions[i].Span("bench"), 8<<20)
		full = append(full, float64(b)/float64(thetaMax))
	}
	pr.FullnessMean = mean(full)
	var v float64
	for _, f := range full {
		v += (f - pr.FullnessMean) * (f - pr.FullnessMean)
	}
	pr.FullnessSD = math.Sqrt(v / float64(max(1, len(full))))
	fmt.Fprintf(o.Log, "Θmax %d MiB: %d partitions (%d splits, %d during the write run), fullness %.0f%% ± %.0f%%, %.0f bytes written per split, write p99 %.1f ms without splits, %.1f ms while splitting\n",
		thetaMax>>20, pr.Partitions, pr.Splits, pr.SplitsDuringRun, 100*pr.FullnessMean, 100*pr.FullnessSD, pr.BytesWrittenPerSplit, pr.WriteP99NoSplitsMs, pr.WriteP99DuringSplitMs)
	return pr, nil
}

// bytesWritten is what every node's storage wrote: WAL bytes and ingested sstables.
func bytesWritten(c *bench.Cluster) uint64 {
	var n uint64
	for _, nd := range c.Nodes {
		st := nd.Engine().Stats()
		n += st.WALBytesIn + st.IngestedBytes
	}
	return n
}

// maxP99 is the largest p99 of op over the regions.
func maxP99(run *bench.Run, op string) float64 {
	v := 0.0
	for _, rs := range run.Regions {
		s := rs.Read
		if op == "write" {
			s = rs.Write
		}
		v = max(v, s.P99Ms)
	}
	return v
}

// elasticDataSweep measures a node joining a one-node region over data sizes.
func elasticDataSweep(ctx context.Context, o ElasticOptions, sizes []int64) ([]DataPoint, error) {
	var out []DataPoint
	for _, s := range []elascass.Strategy{elascass.TwoPhase, elascass.OnePhase} {
		for _, size := range sizes {
			o.currentStrategy = s
			c, err := ElasticCluster(o, 1, s, o.ThetaMax, o.ThetaMin, 0, true)
			if err != nil {
				return out, err
			}
			if err := LoadDirect(c, int(size/int64(o.RecordBytes)), o.RecordBytes, o.Seed); err == nil {
				_, err = settle(ctx, c, o.Interval, o.StepTimeout)
			}
			if err != nil {
				c.Close()
				return out, err
			}
			jr, err := joinAndWatch(ctx, c, o.Topology.Regions[0], o)
			c.Close()
			if err != nil {
				return out, err
			}
			out = append(out, DataPoint{DataBytes: size, Strategy: string(s), BootstrapS: jr.BootstrapS, BootstrapBytes: jr.BootstrapBytes, FullShareS: jr.FullShareS})
			fmt.Fprintf(o.Log, "data %d MiB, %s: serves after %.2fs (%.1f MiB), full share after %.2fs\n", size>>20, s, jr.BootstrapS, float64(jr.BootstrapBytes)/(1<<20), jr.FullShareS)
		}
	}
	return out, nil
}

// ElasticExperiments runs the experiments named (bootstrap, partitioning, data-sweep).
func ElasticExperiments(ctx context.Context, o ElasticOptions, experiments []string, dataSizes []int64) (*ElasticResults, error) {
	o.defaults()
	res := &ElasticResults{Options: map[string]any{
		"topology": o.Topology.Name, "data_bytes": o.DataBytes, "record_bytes": o.RecordBytes, "theta_max": o.ThetaMax, "theta_min": o.ThetaMin,
		"start_nodes": o.StartNodes, "max_nodes": o.MaxNodes, "node_capacity_ops": o.NodeCapacityOps, "node_bandwidth_bytes_s": o.NodeBandwidth,
		"background_clients": o.BackgroundClients, "saturation_clients": o.SaturationClients, "interval": o.Interval.String()}}
	for _, e := range experiments {
		switch e {
		case "bootstrap":
			for _, s := range o.Strategies {
				sr, err := elasticBootstrap(ctx, o, s)
				if err != nil {
					return res, fmt.Errorf("bootstrap %s: %w", s, err)
				}
				res.Strategies = append(res.Strategies, sr)
			}
		case "partitioning":
			for _, t := range o.ThetaSweep {
				pr, err := elasticPartitioning(ctx, o, t)
				if err != nil {
					return res, fmt.Errorf("partitioning Θmax %d: %w", t, err)
				}
				res.Partitioning = append(res.Partitioning, pr)
			}
		case "data-sweep":
			pts, err := elasticDataSweep(ctx, o, dataSizes)
			if err != nil {
				return res, fmt.Errorf("data sweep: %w", err)
			}
			res.DataSweep = pts
		default:
			return res, fmt.Errorf("unknown experiment %q (bootstrap, partitioning, data-sweep)", e)
		}
	}
	return res, nil
}

// Markdown renders the results as the tables of docs/benchmarks.md.
func (r *ElasticResults) Markdown() string {
	var b strings.Builder
	if len(r.Strategies) > 0 {
		fmt.Fprintf(&b, "\n### Bootstrap (ElasCass Figs. 5-7)\n\n")
		fmt.Fprintf(&b, "| strategy | node | nodes in region | registered after s | serves after s | MiB then | replicas then | first replica s | half share s | full share s | final MiB | final replicas |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.Strategies {
			for _, sz := range s.Sizes {
				for _, j := range sz.Joins {
					fmt.Fprintf(&b, "| %s | %s | %d | %.2f | %.2f | %.1f | %d | %.2f | %.2f | %.2f | %.1f | %d |\n", s.Strategy, j.Node, j.NodesInRegion, j.JoinS, j.BootstrapS,
						float64(j.BootstrapBytes)/(1<<20), j.BootstrapReplicas, j.FirstReplicaS, j.HalfShareS, j.FullShareS, float64(j.FinalBytes)/(1<<20), j.FinalReplicas)
				}
			}
		}
		fmt.Fprintf(&b, "\nImbalance indexes (σ/mean, the worst region's): after the joins (hotspot load), and under the saturating Zipfian load after load splits and refinement.\n")
		fmt.Fprintf(&b, "\n| strategy | nodes/region | joined: replicas | joined: bytes | throughput ops/s | scaling efficiency | mean cpu | replicas | bytes | cpu | partitions |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.Strategies {
			for i, sz := range s.Sizes {
				fmt.Fprintf(&b, "| %s | %d | %.3f | %.3f | %.0f | %.2f | %.0f%% | %.3f | %.3f | %.3f | %d |\n", s.Strategy, sz.NodesPerRegion,
					sz.JoinedReplicaImbalance, sz.JoinedByteImbalance, sz.ThroughputOps,
					s.ScalingEfficiency[i], 100*sz.MeanCPU, sz.ReplicaImbalance, sz.ByteImbalance, sz.CPUImbalance, sz.Partitions)
			}
		}
		fmt.Fprintf(&b, "\np99 at saturation per region (read / write ms):\n\n| strategy | nodes/region | %s |\n|---|---:|%s\n", strings.Join(regionsOf(r), " | "), strings.Repeat("---:|", len(regionsOf(r))))
		for _, s := range r.Strategies {
			for _, sz := range s.Sizes {
				var cells []string
				for _, reg := range regionsOf(r) {
					rs := sz.Regions[reg]
					cells = append(cells, fmt.Sprintf("%.1f / %.1f", rs.Read.P99Ms, rs.Write.P99Ms))
				}
				fmt.Fprintf(&b, "| %s | %d | %s |\n", s.Strategy, sz.NodesPerRegion, strings.Join(cells, " | "))
			}
		}
		atBound := false
		for _, s := range r.Strategies {
			atBound = atBound || len(s.EfficiencyAtBound) > 0
		}
		if atBound {
			fmt.Fprintf(&b, "\nThroughput at a p99 bound (open-loop rate search of the same Zipfian workload: every region's p99 of every operation under the bound, no errors, no dropped arrivals; a probe over the bound is tried twice):\n\n| strategy | nodes/region | p99 bound ms | ops/s | worst p99 ms | worst p50 ms | probes | scaling efficiency at the bound |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, s := range r.Strategies {
				for i, sz := range s.Sizes {
					if sz.AtBound == nil || i >= len(s.EfficiencyAtBound) {
						continue
					}
					fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %d | %.2f |\n", s.Strategy, sz.NodesPerRegion, sz.AtBound.P99BoundMs, sz.AtBound.BestOps,
						sz.AtBound.BestP99Ms, sz.AtBound.BestP50Ms, len(sz.AtBound.Probes), s.EfficiencyAtBound[i])
				}
			}
		}
	}
	if len(r.DataSweep) > 0 {
		fmt.Fprintf(&b, "\n### Bootstrap time over the data size (one node joining a one-node region)\n\n| strategy | data MiB | serves after s | MiB then | full share s |\n|---|---:|---:|---:|---:|\n")
		for _, p := range r.DataSweep {
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.1f | %.2f |\n", p.Strategy, p.DataBytes>>20, p.BootstrapS, float64(p.BootstrapBytes)/(1<<20), p.FullShareS)
		}
	}
	if len(r.Partitioning) > 0 {
		fmt.Fprintf(&b, "\n### Partitioning (ElasCass Fig. 8)\n\n| Θmax MiB | partitions | splits | fullness mean | fullness sd | bytes written per split | write p99 no splits ms | write p99 while splitting ms | splits in that run | ratio |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range r.Partitioning {
			ratio := 0.0
			if p.WriteP99NoSplitsMs > 0 {
				ratio = p.WriteP99DuringSplitMs / p.WriteP99NoSplitsMs
			}
			fmt.Fprintf(&b, "| %d | %d | %d | %.0f%% | %.0f%% | %.0f | %.1f | %.1f | %d | %.2f |\n", p.ThetaMaxBytes>>20, p.Partitions, p.Splits,
				100*p.FullnessMean, 100*p.FullnessSD, p.BytesWrittenPerSplit, p.WriteP99NoSplitsMs, p.WriteP99DuringSplitMs, p.SplitsDuringRun, ratio)
		}
	}
	return b.String()
}

func regionsOf(r *ElasticResults) []string {
	for _, s := range r.Strategies {
		for _, sz := range s.Sizes {
			var out []string
			for reg := range sz.Regions {
				out = append(out, reg)
			}
			slices.Sort(out)
			return out
		}
	}
	return nil
}

// MergeElasticJSON reads results written by bench elastic --json and merges them: the
// strategies, data-sweep points and partitioning results of every file, the options of the
// first.
func MergeElasticJSON(paths []string) (*ElasticResults, error) {
	out := &ElasticResults{}
	for i, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("repro: read results: %w", err)
		}
		var r ElasticResults
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("repro: results %s: %w", path, err)
		}
		if i == 0 {
			out.Options = r.Options
		}
		out.Strategies = append(out.Strategies, r.Strategies...)
		out.DataSweep = append(out.DataSweep, r.DataSweep...)
		out.Partitioning = append(out.Partitioning, r.Partitioning...)
	}
	return out, nil
}
