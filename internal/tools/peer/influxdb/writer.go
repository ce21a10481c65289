package influxdb

// The writer driver: the InfluxDB side of the stream-ingest comparison (thesis Fig. 5.10).
// One batch of B records is one HTTP request, POST /write?db=DB&precision=ns, whose body is
// B points in line protocol, as one Kawkab append carries one batch. A point is the
// equivalent of a 16-byte record: a nanosecond timestamp and one int64 field,
//
//	s,w=3 v=41i 1732712345000000041
//
// in measurement "s" with a tag naming the writer, so that each writer appends to a series
// of its own as each of the thesis's clients appends to a file of its own. Each writer's
// timestamps start at the run's start (ns) and go up by one per point, so no two points of a
// series share a timestamp (InfluxDB would keep one of them). The load loop (closed loop for
// the peak, open loop at a rate, HDR latencies, CPU times) is loadgen's.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"meridian/internal/tools/streambench/loadgen"
)

// Measurement is the points' measurement; Field their one field; Tag the writer's tag key.
const (
	Measurement = "s"
	Field       = "v"
	Tag         = "w"
)

// LoadOptions describe one writer run.
type LoadOptions struct {
	// Load is the run: workers (writers), batch size, bounds, rate, warm-up. Its
	// ServerPids default to the server's.
	Load loadgen.Options
	// Database is written to (it must exist: Server.CreateDatabase).
	Database string
}

// Writer appends batches of points to one database, one series per worker. Each worker's
// state is its own: Send from worker w must not run concurrently with another Send from w.
type Writer struct {
	url     string
	client  *http.Client
	b       int
	workers []*writerState
}

type writerState struct {
	tag  []byte // "s,w=<w> v="
	next int64  // the next point's sequence number in the series
	base int64  // the series' first timestamp (ns)
	body []byte
}

// NewWriter is a writer of batches of b points from workers workers to database db of s.
// Timestamps start at base (ns; 0: now).
func NewWriter(s *Server, db string, b, workers int, base int64) (*Writer, error) {
	if b <= 0 || workers <= 0 {
		return nil, fmt.Errorf("influxdb: writer of batches of %d points from %d workers", b, workers)
	}
	if base == 0 {
		base = time.Now().UnixNano()
	}
	q := url.Values{"db": {db}, "precision": {"ns"}}
	w := &Writer{
		url: s.URL() + "/write?" + q.Encode(),
		client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
			MaxIdleConns: workers, MaxIdleConnsPerHost: workers, IdleConnTimeout: time.Minute, DisableCompression: true,
		}},
		b: b,
	}
	for i := range workers {
		w.workers = append(w.workers, &writerState{
			tag:  []byte(fmt.Sprintf("%s,%s=%d %s=", Measurement, Tag, i, Field)),
			base: base,
			body: make([]byte, 0, b*48),
		})
	}
	return w, nil
}

// AppendPoints appends n points of a series to body in line protocol: tag is "s,w=<w> v=",
// the values are first, first+1, ... and the timestamps base+first, base+first+1, ...
func AppendPoints(body, tag []byte, base, first int64, n int) []byte {
	for i := range int64(n) {
		body = append(body, tag...)
		body = strconv.AppendInt(body, first+i, 10)
		body = append(body, 'i', ' ')
		body = strconv.AppendInt(body, base+first+i, 10)
		body = append(body, '\n')
	}
	return body
}

// Send writes worker w's next batch and returns once InfluxDB acknowledged it (204).
func (wr *Writer) Send(ctx context.Context, w int, _ int64) error {
	st := wr.workers[w]
	st.body = AppendPoints(st.body[:0], st.tag, st.base, st.next, wr.b)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wr.url, bytes.NewReader(st.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := wr.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("influxdb: write of %d points: %s: %s", wr.b, resp.Status, bytes.TrimSpace(msg))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	st.next += int64(wr.b) // only an acknowledged batch advances: a failed one is written again
	return nil
}

// Written is the number of points the writer's acknowledged batches held.
func (wr *Writer) Written() int64 {
	var n int64
	for _, st := range wr.workers {
		n += st.next
	}
	return n
}

// Close closes the writer's idle connections.
func (wr *Writer) Close() { wr.client.CloseIdleConnections() }

func (lo LoadOptions) prepare(s *Server) (loadgen.Options, error) {
	o := lo.Load
	if lo.Database == "" {
		return o, errors.New("influxdb: no database")
	}
	if len(o.ServerPids) == 0 {
		o.ServerPids = s.Pids()
	}
	if o.Name == "" {
		o.Name = "influxdb"
	}
	return o.WithDefaults()
}

// Write runs one writer load (closed loop, or open loop if lo.Load.Rate > 0) against s.
func Write(ctx context.Context, s *Server, lo LoadOptions) (loadgen.Result, error) {
	o, err := lo.prepare(s)
	if err != nil {
		return loadgen.Result{}, err
	}
	wr, err := NewWriter(s, lo.Database, o.BatchRecords, o.Workers, 0)
	if err != nil {
		return loadgen.Result{}, err
	}
	defer wr.Close()
	return loadgen.Run(ctx, o, wr.Send)
}

// PeakAndLoaded is Fig. 5.10's pair for InfluxDB: the closed-loop peak, then the open loop
// at fraction of it, with the same writers (their series continue).
func PeakAndLoaded(ctx context.Context, s *Server, lo LoadOptions, fraction float64) (peak, loaded loadgen.Result, err error) {
	o, err := lo.prepare(s)
	if err != nil {
		return peak, loaded, err
	}
	wr, err := NewWriter(s, lo.Database, o.BatchRecords, o.Workers, 0)
	if err != nil {
		return peak, loaded, err
	}
	defer wr.Close()
	return loadgen.PeakAndLoaded(ctx, o, fraction, wr.Send)
}

// Count is the number of points in database db (SELECT count(v) FROM s).
func (s *Server) Count(ctx context.Context, db string) (int64, error) {
	body, err := s.Query(ctx, db, fmt.Sprintf("SELECT count(%s) FROM %s", quoteIdent(Field), quoteIdent(Measurement)))
	if err != nil {
		return 0, err
	}
	return parseCount(body)
}

// parseCount reads the count out of /query's JSON answer to a count query (0 when the
// measurement has no points: the answer then has no series).
func parseCount(body []byte) (int64, error) {
	var r struct {
		Results []struct {
			Series []struct {
				Values [][]json.RawMessage `json:"values"`
			} `json:"series"`
			Error string `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("influxdb: count: %w in %q", err, body)
	}
	if len(r.Results) != 1 {
		return 0, fmt.Errorf("influxdb: count: %d results in %q", len(r.Results), body)
	}
	if r.Results[0].Error != "" {
		return 0, fmt.Errorf("influxdb: count: %s", r.Results[0].Error)
	}
	if len(r.Results[0].Series) == 0 {
		return 0, nil
	}
	v := r.Results[0].Series[0].Values
	if len(v) != 1 || len(v[0]) != 2 {
		return 0, fmt.Errorf("influxdb: count: unexpected values in %q", body)
	}
	n, err := strconv.ParseInt(string(v[0][1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("influxdb: count: %w in %q", err, body)
	}
	return n, nil
}
