package raft

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Counters are one node's Raft engine's event counts, safe to read from any goroutine (the
// metrics and benchmarks read them while the event loop writes).
type Counters struct {
	ReadsLease, ReadsReadIndex, ReadsStale atomic.Int64
	// Lease fallbacks: a linearizable read at the leader that went by ReadIndex, by why.
	LeaseClock, LeaseExpired, LeaseTransfer, LeaseNewTerm, LeaseNoQuorum atomic.Int64
	Forwarded                                                            atomic.Int64
	// ForwardsDuplicated counts forwarded requests received twice (run once).
	ForwardsDuplicated atomic.Int64
	// ReadIndexByLease counts followers' read index requests the leader answered under its
	// lease, with no heartbeat round.
	ReadIndexByLease atomic.Int64
	Coalesced        atomic.Int64 // Raft messages that shared an envelope with another
	// Reproposed counts this node's commands proposed again with a new version because a
	// newer command of this node applied first.
	Reproposed                                              atomic.Int64
	Quiesced, Unquiesced                                    atomic.Int64
	VotesFrozen                                             atomic.Int64
	LeaderTransfers                                         atomic.Int64
	ConfChanges, ConfChangesProposed                        atomic.Int64
	ReplicasRemoved                                         atomic.Int64
	SnapshotsPrepared, SnapshotsSent, SnapshotsReceived     atomic.Int64
	SnapshotsInstalled, SnapshotsResumed, SnapshotsDeferred atomic.Int64
	SnapshotErrors                                          atomic.Int64
	// Splits and merges (repartition.go): entries proposed, splits, freezes and merges
	// applied, range entries refused alike by every replica (stale), merges a replica had to
	// wait for (its right-hand replica behind the freeze), groups founded by splits here,
	// groups merged away or superseded by a snapshot, requests sent to another group.
	RangeProposals, Splits, Freezes, Merges, RangeRefused, MergesBlocked atomic.Int64
	GroupsFounded, GroupsMerged, GroupsSuperseded, Rerouted              atomic.Int64
	// SnapshotsRefused counts snapshots a replica did not take because another group of
	// its node still held part of their range.
	SnapshotsRefused atomic.Int64
	// Transactions (txn.go): submitted here, decided (outcome reached this submitter),
	// parts proposed again, votes sent, abort requests (recovery, geo-sdur IV-F), leaders'
	// tick and threshold entries, transactional reads served, entries replayed into a core at
	// start, transaction messages refused after decoding.
	TxnSubmitted, TxnCommitted, TxnAborted, TxnResent, TxnVotesSent   atomic.Int64
	TxnAbortRequests, TxnTicks, TxnReads, TxnReplayed, TxnBadMessages atomic.Int64
	// TxnVectors counts snapshot vectors this node's sequencers published; TxnVectorRefused,
	// vectors a sequencer refused to publish because they would break the chain.
	TxnVectors, TxnVectorRefused atomic.Int64
	// QuiescedGroups and Groups are gauges, set at each Tick.
	QuiescedGroups, Groups atomic.Int64
}

func (c *Counters) read(path string) {
	switch path {
	case PathLease:
		c.ReadsLease.Add(1)
	case PathReadIndex:
		c.ReadsReadIndex.Add(1)
	case PathStale:
		c.ReadsStale.Add(1)
	}
}

func (c *Counters) leaseFallback(why string) {
	switch why {
	case "clock":
		c.LeaseClock.Add(1)
	case "expired":
		c.LeaseExpired.Add(1)
	case "transfer":
		c.LeaseTransfer.Add(1)
	case "new_term":
		c.LeaseNewTerm.Add(1)
	case "no_quorum":
		c.LeaseNoQuorum.Add(1)
	}
}

// Counters returns the engine's counters.
func (e *Engine) Counters() *Counters { return e.stats }

// CounterSnapshot implements engine.Counted.
func (e *Engine) CounterSnapshot() map[string]int64 {
	c := e.stats
	return map[string]int64{
		"raft_reads_lease": c.ReadsLease.Load(), "raft_reads_read_index": c.ReadsReadIndex.Load(), "raft_reads_stale": c.ReadsStale.Load(),
		"raft_lease_fallback_clock": c.LeaseClock.Load(), "raft_lease_fallback_expired": c.LeaseExpired.Load(),
		"raft_lease_fallback_transfer": c.LeaseTransfer.Load(), "raft_lease_fallback_new_term": c.LeaseNewTerm.Load(),
		"raft_forwarded": c.Forwarded.Load(), "raft_coalesced": c.Coalesced.Load(), "raft_reproposed": c.Reproposed.Load(),
		"raft_quiesced": c.Quiesced.Load(), "raft_unquiesced": c.Unquiesced.Load(), "raft_votes_frozen": c.VotesFrozen.Load(),
		"raft_leader_transfers": c.LeaderTransfers.Load(), "raft_conf_changes": c.ConfChanges.Load(),
		"raft_snapshots_sent": c.SnapshotsSent.Load(), "raft_snapshots_installed": c.SnapshotsInstalled.Load(),
		"raft_snapshot_errors": c.SnapshotErrors.Load(), "raft_groups": c.Groups.Load(), "raft_groups_quiesced": c.QuiescedGroups.Load(),
		"raft_splits": c.Splits.Load(), "raft_merges": c.Merges.Load(), "raft_freezes": c.Freezes.Load(),
		"raft_merges_blocked": c.MergesBlocked.Load(), "raft_rerouted": c.Rerouted.Load(),
		"txn_submitted": c.TxnSubmitted.Load(), "txn_committed": c.TxnCommitted.Load(), "txn_aborted": c.TxnAborted.Load(),
		"txn_resent": c.TxnResent.Load(), "txn_votes_sent": c.TxnVotesSent.Load(), "txn_abort_requests": c.TxnAbortRequests.Load(),
		"txn_ticks": c.TxnTicks.Load(), "txn_reads": c.TxnReads.Load(),
	}
}

// RegisterMetrics exports the counters as meridian_raft_* series (labelled by protocol, so the
// metadata group's engine and the raft keyspaces' engine are told apart).
func RegisterMetrics(reg prometheus.Registerer, protocol string, c *Counters) {
	labels := prometheus.Labels{"protocol": protocol}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meridian_raft_" + name, Help: help, ConstLabels: labels}, f))
	}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meridian_raft_" + name, Help: help, ConstLabels: labels}, f))
	}
	load := func(v *atomic.Int64) func() float64 { return func() float64 { return float64(v.Load()) } }
	counter("reads_lease_total", "Linearizable reads the leader served under its lease.", load(&c.ReadsLease))
	counter("reads_read_index_total", "Linearizable reads served after a ReadIndex round.", load(&c.ReadsReadIndex))
	counter("reads_stale_total", "Stale reads served from a replica's applied state.", load(&c.ReadsStale))
	for why, v := range map[string]*atomic.Int64{"clock": &c.LeaseClock, "expired": &c.LeaseExpired, "transfer": &c.LeaseTransfer, "new_term": &c.LeaseNewTerm, "no_quorum": &c.LeaseNoQuorum} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meridian_raft_lease_fallbacks_total",
			Help:        "Linearizable reads at the leader that went by ReadIndex instead of the lease, by reason (clock: offset beyond ε measured).",
			ConstLabels: prometheus.Labels{"protocol": protocol, "reason": why}}, load(v)))
	}
	counter("read_index_by_lease_total", "Followers' read index requests the leader answered at once under its lease.", load(&c.ReadIndexByLease))
	counter("forwarded_total", "Requests forwarded to a replica because this node holds none (or one still catching up).", load(&c.Forwarded))
	counter("reproposed_total", "Commands this node proposed again with a new version because a newer one of its own applied first.", load(&c.Reproposed))
	counter("messages_coalesced_total", "Raft messages that shared a peer envelope with another message to the same node.", load(&c.Coalesced))
	counter("quiesced_total", "Times a group stopped ticking (idle).", load(&c.Quiesced))
	counter("unquiesced_total", "Times a quiesced group woke up.", load(&c.Unquiesced))
	counter("votes_frozen_total", "Vote requests dropped by a restarted group while the leases it may have promised run out.", load(&c.VotesFrozen))
	counter("leader_transfers_total", "Leader transfers started (steering to the leader region, moves on request, leaving leaders).", load(&c.LeaderTransfers))
	counter("conf_changes_total", "Configuration changes applied.", load(&c.ConfChanges))
	counter("snapshots_sent_total", "Snapshot transfers started by a leader.", load(&c.SnapshotsSent))
	counter("snapshots_installed_total", "Snapshots installed by a follower.", load(&c.SnapshotsInstalled))
	counter("snapshot_errors_total", "Snapshot transfers abandoned or failed.", load(&c.SnapshotErrors))
	counter("replicas_removed_total", "Replicas this node deleted after leaving their group.", load(&c.ReplicasRemoved))
	counter("splits_total", "Split entries applied: a group narrowed and founded its right-hand group here.", load(&c.Splits))
	counter("freezes_total", "Freeze entries applied: a group whose partition a merge retired stopped taking writes.", load(&c.Freezes))
	counter("merges_total", "Merge entries applied: a group widened over its frozen right-hand neighbour, whose Raft state went.", load(&c.Merges))
	counter("merges_blocked_total", "Merge entries this replica had to wait for, its replica of the right-hand group not having applied the freeze.", load(&c.MergesBlocked))
	counter("range_refused_total", "Split, freeze or merge entries every replica refused alike (stale: the range or configuration changed since the proposal).", load(&c.RangeRefused))
	counter("rerouted_total", "Requests sent to another group because a split or merge took their key away.", load(&c.Rerouted))
	counter("txn_submitted_total", "Transactions submitted through this node.", load(&c.TxnSubmitted))
	counter("txn_committed_total", "Transactions submitted here that committed.", load(&c.TxnCommitted))
	counter("txn_aborted_total", "Transactions submitted here that aborted (certification, recovery, limits).", load(&c.TxnAborted))
	counter("txn_resent_total", "Transaction parts proposed again for want of an outcome.", load(&c.TxnResent))
	counter("txn_votes_sent_total", "Certification votes of global transactions this node's replicas sent.", load(&c.TxnVotesSent))
	counter("txn_abort_requests_total", "Abort requests appended for globals whose votes did not come (geo-sdur IV-F).", load(&c.TxnAbortRequests))
	counter("txn_tick_entries_total", "Tick and threshold entries leaders appended to transactional groups.", load(&c.TxnTicks))
	counter("txn_reads_total", "Transactional reads served at a snapshot.", load(&c.TxnReads))
	counter("txn_vectors_total", "Snapshot vectors for read-only transactions this node's sequencers published.", load(&c.TxnVectors))
	gauge("groups", "Raft groups on this node.", load(&c.Groups))
	gauge("groups_quiesced", "Raft groups on this node that are quiesced (not ticking).", load(&c.QuiescedGroups))
}
