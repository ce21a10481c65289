package txnsim

import (
	"fmt"
	"time"

	"meridian/internal/sdur"
)

// Deployment places the replicas of the partitions (paper IV-B, Fig. 1).
type Deployment string

const (
	// WAN1: a majority of each partition's replicas in its home region, the third in the
	// other home region (so that every home region reads both partitions locally).
	WAN1 Deployment = "wan1"
	// WAN2: one replica of every partition in each region; a majority spans regions.
	WAN2 Deployment = "wan2"
)

// Workload is what the clients run.
type Workload string

const (
	// Micro: the paper's microbenchmark (VI-A): two reads and two writes, a global touches one
	// key of the client's home partition and one of another.
	Micro Workload = "micro"
	// Social: the Twitter-like application (VI-A): timeline (global read-only), post (local),
	// follow (global with probability FollowGlobal).
	Social Workload = "social"
	// Check: the simulation's workload: few keys, reads of 2-3 keys and appends to 1-2 of them
	// (so that read-only keys and write skew occur), read-only transactions too.
	Check Workload = "check"
	// TPCC: New-Order and Payment (internal/tools/tpcc), warehouses spread over the
	// partitions' home regions (two each; a partition holds its region's warehouses, the item
	// table is read from the client's home partition); a transaction touching a remote
	// warehouse is global.
	TPCC Workload = "tpcc"
)

// Faults are the seeded faults of a simulation run.
type Faults struct {
	Loss, Dup float64
	// SpikeProb of a message being delayed by up to Spike more.
	SpikeProb float64
	Spike     time.Duration
	// Crashes: this many node crashes during the run, each restarted after up to CrashFor.
	Crashes  int
	CrashFor time.Duration
	// Cuts: this many region-pair cuts (both directions), each healed after up to CutFor.
	Cuts   int
	CutFor time.Duration
}

// Options configure a run. Zero fields take defaults (ensureDefaults).
type Options struct {
	// Mode is the transaction mode: "sdur" (default) or "2pc".
	Mode       string
	Seed       uint64
	Topology   string // built-in name; default ec2-sdur-3
	Deployment Deployment
	Partitions int // default 2
	Workload   Workload
	// GlobalPct is the share of global transactions (Micro, Check), in percent.
	GlobalPct float64
	// ItemsPerPartition: keys per partition (Micro default 1,000,000; Check default 12).
	ItemsPerPartition int
	// Users per partition (Social, default 100,000); FollowGlobal the share of follows that
	// are global (default 0.5).
	UsersPerPartition int
	FollowGlobal      float64
	// ReadOnlyPct: the share of read-only transactions in Check.
	ReadOnlyPct float64
	// ClientsPerRegion: closed-loop clients in each home region. Default 8.
	ClientsPerRegion int
	// ThinkTime between a client's transactions (open the loop a little). Default 0.
	ThinkTime time.Duration
	Duration  time.Duration // measured (after Warmup). Default 30s.
	Warmup    time.Duration // default 3s
	// Threshold is the reordering threshold (0: no reordering). AutoThreshold (beyond the
	// paper) has each partition's leader set it, in ticks, to the measured time its globals
	// wait for their votes.
	Threshold     sdur.Threshold
	AutoThreshold bool
	// ThresholdMargin: the automatic threshold covers the mean wait for votes plus this many
	// mean deviations. Default 0.75 (measured, WAN 1 at 10% globals with 1 ms ticks: 0.75
	// keeps locals at 1.15× their 0%-globals p99 with globals at 102.5 ms p99, 1 keeps them at
	// 1.00× with globals at 104.5 ms; 0.5, measured with 2 ms ticks, let locals reach 1.32×).
	ThresholdMargin float64
	// Delay: fixed delaying Δ of the own partition's broadcast (IV-D); AutoDelay estimates it
	// per partition from measured delivery times instead.
	Delay     time.Duration
	AutoDelay bool
	// TickEntryInterval: how often a leader appends a tick entry when one is needed (the
	// granularity of a threshold in ticks). Default 1ms (a tick entry per millisecond while a
	// global waits: cheap in WAN 1, where a partition's log commits within its region).
	TickEntryInterval time.Duration
	// TickLinger: a leader keeps appending ticks this long after a global last waited, so
	// that ticks are in flight when the next global is delivered. Default 1s.
	TickLinger time.Duration
	// RaftTick and ElectionTicks: Raft's clock.
	RaftTick      time.Duration
	ElectionTicks int
	// DiskSync: the time a Raft Ready with entries takes to be durable before its messages
	// leave (the paper's prototype logs to disk with Berkeley DB). Default 1ms.
	DiskSync time.Duration
	// IntraDelay is added to every message between nodes (processing). Default 100µs.
	IntraDelay time.Duration
	JitterFrac float64 // default 0.05
	// SubmitRetry: a submitter broadcasts a transaction again after this long without an
	// outcome. Default 2s. VoteRetry and RecoveryTimeout: sdur.Options.
	SubmitRetry     time.Duration
	VoteRetry       time.Duration
	RecoveryTimeout time.Duration
	// ClientTimeout: a client gives up on a transaction (indeterminate). Default 20s.
	ClientTimeout time.Duration
	// SnapshotInterval: how often the sequencer builds a snapshot vector for read-only
	// transactions. Default 20ms.
	SnapshotInterval time.Duration
	// SnapshotWindow: completions a leader keeps above the snapshot floor. Default 100,000.
	SnapshotWindow uint64
	Faults         Faults
	// SaveEvery: replicas save their state this often (modes that can), and a restart begins
	// after the last save instead of at the start of the log. 0: never.
	SaveEvery time.Duration
	// Quiesce: after the clients stop and faults heal, time for everything to complete
	// before the convergence check. Default 30s.
	Quiesce  time.Duration
	Mutation string
	// KeepHistory records the history for the serializability checker.
	KeepHistory bool
}

func (o Options) ensureDefaults() Options {
	if o.Mode == "" {
		o.Mode = "sdur"
	}
	if o.Topology == "" {
		o.Topology = "ec2-sdur-3"
	}
	if o.Deployment == "" {
		o.Deployment = WAN1
	}
	if o.Partitions == 0 {
		o.Partitions = 2
	}
	if o.Workload == "" {
		o.Workload = Micro
	}
	if o.ItemsPerPartition == 0 {
		o.ItemsPerPartition = 1_000_000
		if o.Workload == Check {
			o.ItemsPerPartition = 12
		}
	}
	if o.UsersPerPartition == 0 {
		o.UsersPerPartition = 100_000
	}
	if o.FollowGlobal == 0 {
		o.FollowGlobal = 0.5
	}
	if o.ClientsPerRegion == 0 {
		o.ClientsPerRegion = 8
	}
	if o.Duration == 0 {
		o.Duration = 30 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 3 * time.Second
	}
	if o.Threshold.Unit == 0 {
		o.Threshold.Unit = sdur.Entries
	}
	if o.TickEntryInterval == 0 {
		o.TickEntryInterval = time.Millisecond
	}
	if o.RaftTick == 0 {
		o.RaftTick = 50 * time.Millisecond
	}
	if o.ElectionTicks == 0 {
		o.ElectionTicks = 20
	}
	if o.DiskSync == 0 {
		o.DiskSync = time.Millisecond
	}
	if o.IntraDelay == 0 {
		o.IntraDelay = 100 * time.Microsecond
	}
	if o.JitterFrac == 0 {
		o.JitterFrac = 0.05
	}
	if o.SubmitRetry == 0 {
		o.SubmitRetry = 2 * time.Second
	}
	if o.VoteRetry == 0 {
		o.VoteRetry = 500 * time.Millisecond
	}
	if o.RecoveryTimeout == 0 {
		o.RecoveryTimeout = 5 * time.Second
	}
	if o.ClientTimeout == 0 {
		o.ClientTimeout = 20 * time.Second
	}
	if o.TickLinger == 0 {
		o.TickLinger = time.Second
	}
	if o.ThresholdMargin == 0 {
		o.ThresholdMargin = 0.75
	}
	if o.SnapshotInterval == 0 {
		o.SnapshotInterval = 20 * time.Millisecond
	}
	if o.SnapshotWindow == 0 {
		o.SnapshotWindow = 100_000
	}
	if o.Quiesce == 0 {
		o.Quiesce = 30 * time.Second
	}
	return o
}

func (o Options) validate() error {
	switch o.Deployment {
	case WAN1, WAN2:
	default:
		return fmt.Errorf("deployment %q: want wan1 or wan2", o.Deployment)
	}
	switch o.Workload {
	case Micro, Social, Check, TPCC:
	default:
		return fmt.Errorf("workload %q: want micro, social, check or tpcc", o.Workload)
	}
	if o.Partitions < 2 || o.Partitions > 16 {
		return fmt.Errorf("partitions %d: want 2 to 16", o.Partitions)
	}
	if o.GlobalPct < 0 || o.GlobalPct > 100 {
		return fmt.Errorf("global percentage %v: want 0 to 100", o.GlobalPct)
	}
	if o.ItemsPerPartition < 4 {
		return fmt.Errorf("items per partition %d: want at least 4", o.ItemsPerPartition)
	}
	if o.ClientsPerRegion < 1 || o.ClientsPerRegion > 4096 {
		return fmt.Errorf("clients per region %d: want 1 to 4096", o.ClientsPerRegion)
	}
	if o.Duration > time.Hour {
		return fmt.Errorf("duration %v: at most an hour of virtual time", o.Duration)
	}
	if m, ok := modes[o.Mode]; ok && o.Mutation != "" {
		if _, ok := m.mutations()[o.Mutation]; !ok {
			return fmt.Errorf("mode %s has no mutation %q", o.Mode, o.Mutation)
		}
	}
	return nil
}
