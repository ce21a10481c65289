// Package sim is Meridian's deterministic simulator (DESIGN.md section 6; in the spirit of
// FoundationDB's simulation and TigerBeetle's VOPR). It runs a whole cluster of protocol
// cores — the same code production runs — in one goroutine on virtual time, with every source
// of non-determinism drawn from one seeded PRNG: message delays, loss, duplication and
// reordering, partitions, crashes that really lose unsynced data (Pebble's crashable in-memory
// filesystem), slow disks, and clocks with offset and drift. Clients in every region record a
// history, which the checkers of package check then judge. The same seed gives the same
// execution byte for byte, so every failure replays with one command.
package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"meridian/internal/config"
	"meridian/internal/topology"
)

// Fault names, for --faults.
const (
	FaultLoss      = "loss"      // messages dropped with a probability
	FaultDup       = "dup"       // messages delivered twice
	FaultReorder   = "reorder"   // jitter large enough to reorder messages on a link
	FaultDelay     = "delay"     // delay spikes: a message (and, on a FIFO link, those behind it) held 100ms–1s
	FaultPartition = "partition" // scheduled cuts: a node, a region, one direction, a minority
	FaultCrash     = "crash"     // nodes crash (unsynced data lost) and restart
	FaultSlowDisk  = "slowdisk"  // some syncs take tens to hundreds of milliseconds
	FaultClock     = "clock"     // per-node clock offset and drift within ε
	// FaultClockBeyond lets offsets exceed ε (up to 20ε). Not part of "all": it breaks the
	// assumption clock-dependent protocols are allowed to make.
	FaultClockBeyond = "clock-beyond"
)

// AllFaults is what --faults all enables: every fault within the protocols' assumptions.
var AllFaults = []string{FaultLoss, FaultDup, FaultReorder, FaultDelay, FaultPartition, FaultCrash, FaultSlowDisk, FaultClock}

var knownFaults = append(slices.Clone(AllFaults), FaultClockBeyond)

// ParseFaults parses a comma-separated list, "all" or "none".
func ParseFaults(s string) (map[string]bool, error) {
	out := map[string]bool{}
	s = strings.TrimSpace(s)
	switch s {
	case "", "none":
		return out, nil
	case "all":
		for _, f := range AllFaults {
			out[f] = true
		}
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "all" {
			for _, a := range AllFaults {
				out[a] = true
			}
			continue
		}
		if !slices.Contains(knownFaults, f) {
			return nil, fmt.Errorf("sim: unknown fault %q (known: %s, all, none)", f, strings.Join(knownFaults, ", "))
		}
		out[f] = true
	}
	return out, nil
}

// FaultList renders a fault set canonically (for replay commands).
func FaultList(f map[string]bool) string {
	var names []string
	for n, on := range f {
		if on {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	if len(names) == len(AllFaults) && !f[FaultClockBeyond] {
		return "all"
	}
	return strings.Join(names, ",")
}

// Options configures one simulated run.
type Options struct {
	Protocol string
	Seed     uint64
	Topology *topology.Topology
	// NodesPerRegion and ReplicasPerRegion shape the cluster (default 1 and 1).
	NodesPerRegion    int
	ReplicasPerRegion int
	Partitions        int
	// KeyspaceOptions are the protocol's keyspace options (e.g. theta).
	KeyspaceOptions map[string]string
	// ReplicaRegions, when set, places the keyspace's replicas in the first ReplicaRegions
	// regions only (clients stay in every region).
	ReplicaRegions int
	// ClientsPerRegion sequential clients in each region (default 2).
	ClientsPerRegion int
	// Keys is the size of the key set; small so that operations collide (default 3).
	Keys int
	// ReadFraction of operations are reads (default 0.5).
	ReadFraction float64
	// ScanFraction of the reads are scans (engine.OpScan) of a random range of the key space
	// with a random limit, recorded as one read per key the scan covered (scan.go); 0..1,
	// default 0: no scans, and no randomness drawn for them, so every run without scans is
	// the same execution as before they existed.
	ScanFraction float64
	// Duration of the client workload in virtual time (default 5s); faults happen within it.
	Duration time.Duration
	// Quiesce is the virtual time after the workload with every fault healed, for
	// anti-entropy and pending requests to finish (default 5s).
	Quiesce time.Duration
	// RequestTimeout is each client request's deadline (default 1s).
	RequestTimeout time.Duration
	ReadLevel      config.Level
	WriteLevel     config.Level
	Faults         map[string]bool
	// MaxClockOffset is ε (default 2ms).
	MaxClockOffset time.Duration
	// ClockStepEvery, when set with a clock fault, steps every node's clock this often on
	// average (default: 0 to 3 steps per node and run).
	ClockStepEvery time.Duration
	// PartitionEvery, when set with the partition fault, starts a partition this often on
	// average, each after the last has healed (default: one or two per run).
	PartitionEvery time.Duration
	// RepartitionEvery, when set, splits or merges a partition of the keyspace this often on
	// average (protocols that repartition: config.ProtocolSpec.Repartition). Each node
	// installs the new map after its own delay (up to one RTT to the farthest node), as
	// nodes learn the metadata group's change, so nodes serve under different maps for a
	// while; the checkers must see no difference.
	RepartitionEvery time.Duration
	// MoveEvery, when set, starts a replica move this often on average (protocols that
	// move replicas: config.ProtocolSpec.Moves; needs more nodes per region than replicas):
	// moves finish when the new replica reports it has caught up, and some are aborted.
	MoveEvery time.Duration
	// MoveCheckAfter is how long after its start, and after each check, the driver checks a
	// move still in progress: it aborts the move if its new replica is down, and otherwise
	// with probability 0.3 while the workload runs (default 4s). Short checks abort many
	// moves, where a move's quorum rules matter most.
	MoveCheckAfter time.Duration
	// Sessions: clients send their session version (client.Session). Default true.
	NoSessions bool
	// Roam: each client sends a share of its requests to a random node in any region, so
	// one client's requests meet coordinators with different clocks.
	Roam bool
	// DelaySpikeProb, when set, is the share of messages the delay fault holds back
	// (default: 0.5%–2.5%, drawn per seed).
	DelaySpikeProb float64
	// LoseRegion: every node of a random region crashes for good during the workload; the
	// protocol must exclude the region and go on (regionloss.go). The workload lasts at
	// least 10s.
	LoseRegion bool
	// Mutation names a deliberately broken variant (protocol or runtime).
	Mutation string
	// Linearizability also runs the Porcupine check (quorum does not promise it).
	Linearizability bool
	// FreshReads checks that every read returns the newest acknowledged write or a newer one
	// (check.FreshReads) instead of sequential consistency: what reads at ONE or LOCAL_ONE
	// promise with writes at ALL (R + W > N). They do not promise sequential consistency:
	// they repair nothing, so a write that timed out after reaching some replicas is seen by
	// one read and missed by the next.
	FreshReads bool
	// TickInterval of the cores in virtual time (default 2ms).
	TickInterval time.Duration
	// Trace, when set, receives one line per event (the hash covers the same lines).
	Trace func(line string)
}

func (o *Options) ensureDefaults() {
	if o.Protocol == "" {
		o.Protocol = "quorum"
	}
	if o.NodesPerRegion <= 0 {
		o.NodesPerRegion = 1
	}
	if o.ReplicasPerRegion <= 0 {
		o.ReplicasPerRegion = 1
	}
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 2
	}
	if o.Keys <= 0 {
		o.Keys = 3
	}
	if o.ReadFraction == 0 {
		o.ReadFraction = 0.5
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.LoseRegion {
		o.Duration = max(o.Duration, minLossDuration)
	}
	if o.Quiesce <= 0 {
		o.Quiesce = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = time.Second
	}
	if o.ReadLevel == "" {
		o.ReadLevel = config.LevelQuorum
	}
	if o.WriteLevel == "" {
		o.WriteLevel = config.LevelQuorum
	}
	if o.Faults == nil {
		o.Faults = map[string]bool{}
	}
	if o.MaxClockOffset <= 0 {
		o.MaxClockOffset = 2 * time.Millisecond
	}
	if o.MoveCheckAfter <= 0 {
		o.MoveCheckAfter = defaultMoveCheckAfter
	}
	if o.TickInterval <= 0 {
		o.TickInterval = 2 * time.Millisecond
	}
}
