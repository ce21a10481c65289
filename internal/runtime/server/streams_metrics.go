package server

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/kawkab"
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
	// historicalReads counts reads served here from the object store (this node is not the
	// stream's primary).
	historicalReads prometheus.Counter
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
		historicalReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_stream_historical_reads_total",
			Help: "Reads served at this node from the object store's uploads of streams another node is the primary of."}),
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
	m.historicalReads = register(m.historicalReads).(prometheus.Counter)
	return m
}

// storeCollector exports the node store's state at each scrape (thesis Figs. 5.8–5.9: the
// cache, the local store, its evictable share, the upload queue).
type storeCollector struct {
	stats func() kawkab.StoreStats
	descs map[string]*prometheus.Desc
}

var storeSeries = []struct {
	name, help string
	counter    bool
	value      func(kawkab.StoreStats) float64
}{
	{"meridian_stream_store_local_bytes", "Bytes of the streams' local chunk files.", false, func(s kawkab.StoreStats) float64 { return float64(s.LocalBytes) }},
	{"meridian_stream_store_capacity_bytes", "The local store's capacity (0: unlimited).", false, func(s kawkab.StoreStats) float64 { return float64(s.CapacityBytes) }},
	{"meridian_stream_store_evictable_bytes", "Local bytes uploaded and not yet deleted.", false, func(s kawkab.StoreStats) float64 { return float64(s.EvictableBytes) }},
	{"meridian_stream_store_upload_queue_chunks", "Full chunks not yet recorded as uploaded.", false, func(s kawkab.StoreStats) float64 { return float64(s.UploadQueue) }},
	{"meridian_stream_store_cache_used_bytes", "Bytes the buffer cache holds.", false, func(s kawkab.StoreStats) float64 { return float64(s.Cache.UsedBytes) }},
	{"meridian_stream_store_uploads_total", "Data chunks uploaded to the object store.", true, func(s kawkab.StoreStats) float64 { return float64(s.Uploads) }},
	{"meridian_stream_store_upload_failures_total", "Failed upload requests (each retried).", true, func(s kawkab.StoreStats) float64 { return float64(s.UploadFailures) }},
	{"meridian_stream_store_uploaded_bytes_total", "Bytes put to the object store.", true, func(s kawkab.StoreStats) float64 { return float64(s.UploadedBytes) }},
	{"meridian_stream_store_appends_slowed_total", "Appends that waited for space (backpressure).", true, func(s kawkab.StoreStats) float64 { return float64(s.AppendsSlowed) }},
	{"meridian_stream_store_appends_declined_total", "Appends declined because the local store was full.", true, func(s kawkab.StoreStats) float64 { return float64(s.AppendsDeclined) }},
	{"meridian_stream_store_deleted_chunks_total", "Local chunks deleted after their upload.", true, func(s kawkab.StoreStats) float64 { return float64(s.DeletedChunks) }},
	{"meridian_stream_store_object_get_bytes_total", "Bytes read from the object store for reads of deleted chunks.", true, func(s kawkab.StoreStats) float64 { return float64(s.ObjectGetBytes) }},
}

func newStoreCollector(stats func() kawkab.StoreStats) *storeCollector {
	c := &storeCollector{stats: stats, descs: map[string]*prometheus.Desc{}}
	for _, s := range storeSeries {
		c.descs[s.name] = prometheus.NewDesc(s.name, s.help, nil, nil)
	}
	return c
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, s := range storeSeries {
		kind := prometheus.GaugeValue
		if s.counter {
			kind = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(c.descs[s.name], kind, s.value(st))
	}
}

func (m *streamMetrics) appended(ack string, start time.Time, records, bytes int) {
	m.appends.WithLabelValues("ok").Inc()
	m.records.Add(float64(records))
	m.bytes.Add(float64(bytes))
	m.appendTime.WithLabelValues(ack).Observe(time.Since(start).Seconds())
}
