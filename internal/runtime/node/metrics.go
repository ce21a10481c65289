package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/runtime/transport"
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
	// movesFinished counts the move_finish commands this node got committed.
	movesFinished prometheus.Counter
	// elastic counts the placement driver's changes made from this node, by kind.
	elastic *prometheus.CounterVec
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
		movesFinished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_moves_finished_total", Help: "Replica moves this node finished (as their new replica, once it had caught up).",
		}),
		elastic: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_placement_changes_total", Help: "Changes the placement driver made from this node: split, merge, move_start, move_abort, node_active, node_removed.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.latency, m.msgSent, m.msgReceived, m.dropped, m.commitSize, m.commitTime, m.aeJobs, m.movesFinished, m.elastic)
	storageGauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	storageGauge("meridian_storage_disk_bytes", "Bytes of the Pebble store on disk.", func() float64 { return float64(n.store.Stats().DiskBytes) })
	storageGauge("meridian_storage_memtable_bytes", "Bytes in Pebble memtables.", func() float64 { return float64(n.store.Stats().MemTableBytes) })
	storageGauge("meridian_storage_wal_syncs", "Synced storage batches since start.", func() float64 { return float64(n.store.Stats().WALSyncs) })
	storageGauge("meridian_storage_records_applied", "Records applied since start.", func() float64 { return float64(n.store.Stats().RecordsApplied) })
	storageGauge("meridian_storage_read_amplification", "Pebble read amplification.", func() float64 { return float64(n.store.Stats().ReadAmp) })
	transportCounter := func(name, help string, f func(transport.Stats) uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if n.tr == nil { // still starting
				return 0
			}
			return float64(f(n.tr.Stats()))
		}))
	}
	transportCounter("meridian_transport_wire_bytes_sent_total", "Bytes written to peer connections (with HTTP/2 and gRPC framing).",
		func(s transport.Stats) uint64 { return s.WireBytesSent })
	transportCounter("meridian_transport_wire_writes_total", "Write calls (syscalls) on peer connections.",
		func(s transport.Stats) uint64 { return s.WireWrites })
	storageGauge("meridian_peers_down", "Peers the failure detector considers down.", func() float64 {
		down := 0
		for _, nd := range n.Members() {
			if nd.ID != n.self.ID && !n.peerAliveConcurrent(nd.ID) {
				down++
			}
		}
		return float64(down)
	})
	return m
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

func (m *metrics) observe(req engine.Request, res engine.Result, d time.Duration) {
	m.latency.WithLabelValues(opName(req.Op), string(req.Level), outcome(res.Err)).Observe(d.Seconds())
}

func opName(op engine.Op) string {
	if op == engine.OpMoveMaster {
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
