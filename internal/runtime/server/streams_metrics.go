package server

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// streamMetrics are the Streams service's Prometheus series (docs/streams.md, "Metrics").
type streamMetrics struct {
	appends      *prometheus.CounterVec // by outcome: ok, refused, failed
	records      prometheus.Counter
	bytes        prometheus.Counter
	appendTime   *prometheus.HistogramVec // by ack level
	readRecords  *prometheus.CounterVec   // by kind: range, records, subscribe
	subscribers  prometheus.Gauge
	subEnded     *prometheus.CounterVec // by reason: too_slow, dropped, canceled, error
	replFailures prometheus.Counter
}

func newStreamMetrics(reg prometheus.Registerer) *streamMetrics {
	m := &streamMetrics{
		appends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_stream_appends_total",
			Help: "Batches appended at this node's primaries, by outcome (ok, refused: the request was wrong, failed)."}, []string{"outcome"}),
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_stream_appended_records_total",
			Help: "Records acknowledged by this node's primaries."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_stream_appended_bytes_total",
			Help: "Bytes of records acknowledged by this node's primaries."}),
		appendTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meridian_stream_append_duration_seconds",
			Help: "Time to acknowledge one batch at the primary (from its arrival), by ack level.", Buckets: prometheus.ExponentialBuckets(0.00002, 2, 20)}, []string{"ack"}),
		readRecords: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_stream_read_records_total",
			Help: "Records sent to readers, by call (range, records, subscribe)."}, []string{"call"}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_stream_subscribers",
			Help: "Tail subscriptions open at this node."}),
		subEnded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_stream_subscriptions_ended_total",
			Help: "Subscriptions ended by the server or the client, by reason (too_slow, dropped, canceled, error)."}, []string{"reason"}),
		replFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_stream_replication_failures_total",
			Help: "Batches of replicated streams whose second node did not acknowledge them (the append failed)."}),
	}
	if reg == nil {
		return m
	}
	// A service started again on the same node (tests) reuses the series.
	register := func(c prometheus.Collector) prometheus.Collector {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector
			}
		}
		return c
	}
	m.appends = register(m.appends).(*prometheus.CounterVec)
	m.records = register(m.records).(prometheus.Counter)
	m.bytes = register(m.bytes).(prometheus.Counter)
	m.appendTime = register(m.appendTime).(*prometheus.HistogramVec)
	m.readRecords = register(m.readRecords).(*prometheus.CounterVec)
	m.subscribers = register(m.subscribers).(prometheus.Gauge)
	m.subEnded = register(m.subEnded).(*prometheus.CounterVec)
	m.replFailures = register(m.replFailures).(prometheus.Counter)
	return m
}

func (m *streamMetrics) appended(ack string, start time.Time, records, bytes int) {
	m.appends.WithLabelValues("ok").Inc()
	m.records.Add(float64(records))
	m.bytes.Add(float64(bytes))
	m.appendTime.WithLabelValues(ack).Observe(time.Since(start).Seconds())
}
