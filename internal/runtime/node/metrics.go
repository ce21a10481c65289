package node

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/errs"
	"meridian/internal/quorum"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// metrics are the node's Prometheus series. Names follow Prometheus conventions: base units
// (seconds, bytes), _total for counters.
type metrics struct {
	latency     *prometheus.HistogramVec
	msgSent     *prometheus.CounterVec
	msgReceived *prometheus.CounterVec
	dropped     *prometheus.CounterVec
	commitSize  prometheus.Histogram
	commitTime  prometheus.Histogram
	aeJobs      prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, n *Node) *metrics {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meridian_request_duration_seconds",
			Help:    "Client request latency at the coordinator, by operation, consistency level and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 0.1ms .. 13s
		}, []string{"op", "level", "outcome"}),
		msgSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_replication_messages_sent_total", Help: "Peer messages handed to the transport, by type.",
		}, []string{"type"}),
		msgReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_replication_messages_received_total", Help: "Peer messages received, by type.",
		}, []string{"type"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_messages_dropped_total", Help: "Messages dropped by this node, by reason.",
		}, []string{"reason"}),
		commitSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_storage_commit_records", Help: "Records per synced storage batch (group commit size).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_storage_commit_duration_seconds", Help: "Time to write and fsync one batch.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		aeJobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_anti_entropy_jobs_total", Help: "Anti-entropy steps run (digests, comparisons, repairs).",
		}),
	}
	reg.MustRegister(m.latency, m.msgSent, m.msgReceived, m.dropped, m.commitSize, m.commitTime, m.aeJobs)
	storageGauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	storageGauge("meridian_storage_disk_bytes", "Bytes of the Pebble store on disk.", func() float64 { return float64(n.engine.Stats().DiskBytes) })
	storageGauge("meridian_storage_memtable_bytes", "Bytes in Pebble memtables.", func() float64 { return float64(n.engine.Stats().MemTableBytes) })
	storageGauge("meridian_storage_wal_syncs", "Synced storage batches since start.", func() float64 { return float64(n.engine.Stats().WALSyncs) })
	storageGauge("meridian_storage_records_applied", "Records applied since start.", func() float64 { return float64(n.engine.Stats().RecordsApplied) })
	storageGauge("meridian_storage_read_amplification", "Pebble read amplification.", func() float64 { return float64(n.engine.Stats().ReadAmp) })
	ms := n.core.MS()
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	counter("meridian_meteorshower_reads_local_total", "MeteorShower reads served by the local replica at once.", func() float64 { return float64(ms.ReadsLocal.Load()) })
	counter("meridian_meteorshower_reads_waited_total", "MeteorShower reads served locally after waiting for statuses or data.", func() float64 { return float64(ms.ReadsWaited.Load()) })
	counter("meridian_meteorshower_reads_fallback_total", "MeteorShower reads served by a quorum instead (clock offset beyond ε, or statuses missing too long).", func() float64 { return float64(ms.ReadsFallback.Load()) })
	counter("meridian_meteorshower_read_wait_seconds_total", "Total time MeteorShower reads waited before being served locally.", func() float64 { return float64(ms.ReadWaitNanosTotal.Load()) / 1e9 })
	counter("meridian_meteorshower_statuses_sent_total", "Status messages sent.", func() float64 { return float64(ms.StatusesSent.Load()) })
	counter("meridian_meteorshower_statuses_received_total", "Status messages received.", func() float64 { return float64(ms.StatusesReceived.Load()) })
	counter("meridian_meteorshower_status_bytes_sent_total", "Approximate bytes of status messages sent.", func() float64 { return float64(ms.StatusBytesSent.Load()) })
	counter("meridian_meteorshower_status_gaps_total", "Gaps in a peer's status sequence longer than the redundancy, repaired with a full status.", func() float64 { return float64(ms.Gaps.Load()) })
	storageGauge("meridian_clock_measured_offset_seconds", "Largest clock offset to a peer measured by the clock service.", func() float64 { return float64(ms.MeasuredOffsetNanos.Load()) / 1e9 })
	storageGauge("meridian_clock_unsafe", "1 when the measured clock offset exceeds ε and clock-dependent reads fall back.", func() float64 {
		if ms.ClockUnsafe.Load() {
			return 1
		}
		return 0
	})
	registerGLMetrics(reg, n.core.GLCounters())
	storageGauge("meridian_peers_down", "Peers the failure detector considers down.", func() float64 {
		down := 0
		for _, nd := range n.opts.Cluster.Nodes {
			if nd.ID != n.self.ID && !n.core.Alive(nd.ID) {
				down++
			}
		}
		return float64(down)
	})
	return m
}

// registerGLMetrics exports GlobLease's counters (liu-thesis 4.1): how reads were served,
// write modes, lease maintenance, mastership changes and hot keys.
func registerGLMetrics(reg *prometheus.Registry, gl *quorum.GLCounters) {
	load := func(v *atomic.Int64) func() float64 { return func() float64 { return float64(v.Load()) } }
	labeledCounter := func(name, help, label string, values map[string]*atomic.Int64) {
		for _, lv := range slices.Sorted(maps.Keys(values)) {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help,
				ConstLabels: prometheus.Labels{label: lv}}, load(values[lv])))
		}
	}
	labeledCounter("meridian_globlease_reads_total", "GlobLease reads by how they were served: master (coordinated by the key's master), "+
		"lease (by the coordinator's replica under a valid read lease), forwarded (the coordinator asked the master), "+
		"affiliate (served by this node for a hot key under a secondary lease).",
		"path", map[string]*atomic.Int64{
			quorum.PathMaster: &gl.ReadsMaster, quorum.PathLease: &gl.ReadsLease,
			quorum.PathForwarded: &gl.ReadsForwarded, quorum.PathAffiliate: &gl.ReadsAffiliate,
		})
	labeledCounter("meridian_globlease_writes_total", "GlobLease writes this node ran as master, by write mode (passive counts only writes that found no valid lease).",
		"mode", map[string]*atomic.Int64{"active": &gl.WritesActive, "passive": &gl.WritesPassive})
	counter := func(name, help string, v *atomic.Int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, load(v)))
	}
	counter("meridian_globlease_writes_waited_for_lease_total", "GlobLease writes that waited for a lease holder's lease to expire.", &gl.WritesWaitedForLease)
	counter("meridian_globlease_lease_renewals_total", "GlobLease reads at a replica without a valid lease that asked the master for one (liu-thesis 4.1.5).", &gl.LeaseRenewals)
	counter("meridian_globlease_lease_updates_total", "Lease holders GlobLease writes had to update or outwait (liu-thesis 4.1.5).", &gl.LeaseUpdates)
	counter("meridian_globlease_leases_granted_total", "Read leases granted by this node as master.", &gl.LeasesGranted)
	counter("meridian_globlease_lease_expired_waits_total", "GlobLease waits for an expired lease.", &gl.LeasesExpiredWaits)
	counter("meridian_globlease_lease_messages_total", "GlobLease lease messages sent or received by this node (requests, grants, acknowledgements, updates).", &gl.LeaseMessages)
	counter("meridian_globlease_master_moves_total", "Masterships this node took over from another node (a moved key, or a home's keys after failover).", &gl.MasterMoves)
	counter("meridian_globlease_table_changes_total", "Mastership table versions this node applied.", &gl.TableChanges)
	counter("meridian_globlease_recoveries_total", "Keys whose committed version this node recovered after becoming their master.", &gl.Recoveries)
	counter("meridian_globlease_revocations_total", "Lease revocation rounds this node started after taking over keys another master may have leased.", &gl.Revocations)
	counter("meridian_globlease_secondary_grants_total", "Secondary leases granted to affiliated nodes for hot keys.", &gl.SecondaryGrants)
	counter("meridian_globlease_suspect_holders_total", "Lease holders put on probation for leaving a write's update unacknowledged longer than suspect_after.", &gl.SuspectMarks)
	counter("meridian_globlease_short_grants_total", "Leases granted at suspect_lease to holders on probation (liu-thesis 4.1.3: per-node lease length).", &gl.ShortGrants)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meridian_globlease_hot_keys",
		Help: "Keys this node currently considers hot (replicated to affiliated nodes)."}, load(&gl.HotKeys)))
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	switch errs.KindOf(err) {
	case errs.Invalid:
		return "invalid"
	case errs.NotFound:
		return "not_found"
	case errs.Unavailable:
		return "unavailable"
	case errs.Timeout:
		return "timeout"
	case errs.Overloaded:
		return "overloaded"
	case errs.Exhausted:
		return "exhausted"
	}
	return "error"
}

func (m *metrics) observe(req quorum.Request, res quorum.Result, d time.Duration) {
	m.latency.WithLabelValues(opName(req.Op), string(req.Level), outcome(res.Err)).Observe(d.Seconds())
}

func opName(op quorum.Op) string {
	if op == quorum.OpMoveMaster {
		return "move_master"
	}
	return op.String()
}

func (m *metrics) commit(records int, d time.Duration) {
	m.commitSize.Observe(float64(records))
	m.commitTime.Observe(d.Seconds())
}

func (m *metrics) sent(env *peerpb.Envelope) { m.msgSent.WithLabelValues(wire.MessageType(env)).Inc() }
func (m *metrics) received(env *peerpb.Envelope) {
	m.msgReceived.WithLabelValues(wire.MessageType(env)).Inc()
}
