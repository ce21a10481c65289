package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
)

// Streams (docs/streams.md): append-only time-series streams of fixed-size records whose
// first 8 bytes are a timestamp (int64 little-endian). A stream's appends and reads go to
// its primary node: the methods here find it with DescribeStream and connect to it (one
// extra connection per primary, kept until Close), so the node the client dialled may be
// any node of the cluster.
//
//	c.CreateStream(ctx, &client.StreamSpec{Keyspace: "demo", Name: "ticks", RecordBytes: 16, ValueOffset: 8})
//	app, _ := c.NewAppender(ctx, "demo", "ticks")
//	b := client.NewBatch(16, 8)
//	b.Add(time.Now().UnixNano(), 42)
//	first, err := app.Append(ctx, b.Bytes())
//	it := c.ReadRange(ctx, "demo", "ticks", from, to)
//	for it.Next() { rec := it.Record(); ... }
//	if err := it.Err(); err != nil { ... }

// StreamSpec describes a stream to create; StreamInfo is a stream as the cluster holds it.
type (
	StreamSpec  = meridianpb.StreamSpec
	StreamField = meridianpb.StreamField
	StreamInfo  = meridianpb.StreamInfo
)

// StreamsAPI returns the raw gRPC stub of the Streams service on the dialled node.
func (c *Client) StreamsAPI() meridianpb.StreamsClient { return meridianpb.NewStreamsClient(c.conn) }

// CreateStream creates a stream in a keyspace; the cluster picks its primary.
func (c *Client) CreateStream(ctx context.Context, spec *StreamSpec, options ...Option) (*StreamInfo, error) {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := c.StreamsAPI().CreateStream(cl.ctx, &meridianpb.CreateStreamRequest{Spec: spec, TimeoutMs: cl.timeoutMs})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	return r.Stream, nil
}

// DropStream drops a stream and its records (expectVersion 0: whatever its version).
func (c *Client) DropStream(ctx context.Context, keyspace, name string, expectVersion uint64, options ...Option) error {
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return err
	}
	defer cl.cancel()
	_, err = c.StreamsAPI().DropStream(cl.ctx, &meridianpb.DropStreamRequest{Keyspace: keyspace, Name: name, ExpectVersion: expectVersion, TimeoutMs: cl.timeoutMs})
	return c.wrap(cl, err, 0)
}

// ListStreams lists the streams of a keyspace ("": every keyspace).
func (c *Client) ListStreams(ctx context.Context, keyspace string) ([]*StreamInfo, error) {
	_, cl, err := c.begin(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := c.StreamsAPI().ListStreams(cl.ctx, &meridianpb.ListStreamsRequest{Keyspace: keyspace})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	return r.Streams, nil
}

// DescribeStream describes a stream as the dialled node knows it; at the primary it also
// says how many records the stream has (Live).
func (c *Client) DescribeStream(ctx context.Context, keyspace, name string) (*StreamInfo, error) {
	_, cl, err := c.begin(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := c.StreamsAPI().DescribeStream(cl.ctx, &meridianpb.DescribeStreamRequest{Keyspace: keyspace, Name: name})
	if err != nil {
		return nil, c.wrap(cl, err, 0)
	}
	return r.Stream, nil
}

// primaryAPI returns the Streams stub of a stream's primary (and its description).
func (c *Client) primaryAPI(ctx context.Context, keyspace, name string) (meridianpb.StreamsClient, *StreamInfo, error) {
	info, err := c.DescribeStream(ctx, keyspace, name)
	if err != nil {
		return nil, nil, err
	}
	api, err := c.streamsAt(info.GetPrimaryAddress())
	return api, info, err
}

// readerAPI returns the Streams stub of the node that serves a stream's historical reads:
// its reader node, else the node this client is connected to if it is not the primary, else
// the primary (a stream on a one-node cluster).
func (c *Client) readerAPI(ctx context.Context, keyspace, name string) (meridianpb.StreamsClient, error) {
	info, err := c.DescribeStream(ctx, keyspace, name)
	if err != nil {
		return nil, err
	}
	addr := info.GetReaderAddress()
	if addr == "" && info.GetPrimaryAddress() != c.endpoint {
		addr = c.endpoint
	}
	if addr == "" {
		addr = info.GetPrimaryAddress()
	}
	return c.streamsAt(addr)
}

// streamsAt returns the Streams stub of the node at addr ("" or this client's endpoint:
// the node this client is connected to), dialling it once.
func (c *Client) streamsAt(addr string) (meridianpb.StreamsClient, error) {
	if addr == "" || addr == c.endpoint {
		return c.StreamsAPI(), nil
	}
	c.peersMu.Lock()
	defer c.peersMu.Unlock()
	if p, ok := c.peers[addr]; ok {
		return p.StreamsAPI(), nil
	}
	p, err := DialOptions(addr, c.opts)
	if err != nil {
		return nil, err
	}
	if c.peers == nil {
		c.peers = map[string]*Client{}
	}
	c.peers[addr] = p
	return p.StreamsAPI(), nil
}

// streamErr turns a gRPC error of a streaming call into an *Error.
func streamErr(what string, err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	e := &Error{Code: s.Code(), Msg: s.Message()}
	if s.Code() == codes.FailedPrecondition {
		e.Label = "not the primary"
	}
	return e
}

// Appender appends batches to one stream at its primary, each acknowledged before Append
// returns (AppendAcked). Not safe for concurrent use: use one Appender per goroutine (the
// primary's group commit shares fsyncs among them).
type Appender struct {
	c                *Client
	keyspace, name   string
	info             *StreamInfo
	stream           meridianpb.Streams_AppendAckedClient
	cancel           context.CancelFunc
	broken           error
	named            bool // the current call's first message named the stream
	appended, writes uint64
}

// NewAppender finds the stream's primary and opens an append call to it.
func (c *Client) NewAppender(ctx context.Context, keyspace, name string) (*Appender, error) {
	a := &Appender{c: c, keyspace: keyspace, name: name}
	if err := a.open(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Appender) open(ctx context.Context) error {
	api, info, err := a.c.primaryAPI(ctx, a.keyspace, a.name)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	st, err := api.AppendAcked(sctx)
	if err != nil {
		cancel()
		return streamErr("append", err)
	}
	a.info, a.stream, a.cancel, a.broken, a.named = info, st, cancel, nil, false
	return nil
}

// Info is the stream's description as of the Appender's last connection.
func (a *Appender) Info() *StreamInfo { return a.info }

// Append appends a batch of whole records (timestamps not decreasing, none older than the
// stream's last) and returns the record number of its first record once the primary has
// acknowledged it at the stream's ack level. After a failure of the connection the error
// says the batch's fate is unknown; the next Append reconnects (finding the primary again).
func (a *Appender) Append(ctx context.Context, records []byte) (uint64, error) {
	if a.broken != nil {
		if err := a.open(ctx); err != nil {
			return 0, fmt.Errorf("append to stream %s/%s: reconnecting after %v: %w", a.keyspace, a.name, a.broken, err)
		}
	}
	first, err := a.send(ctx, records)
	if err != nil {
		a.cancel()
		a.broken = err
		var e *Error
		if errors.As(err, &e) && e.Code != codes.Unavailable && e.Code != codes.Canceled && e.Code != codes.DeadlineExceeded {
			return 0, err // refused by the server: the batch was not appended
		}
		return 0, &Error{Code: codes.Unavailable, Msg: fmt.Sprintf("append to stream %s/%s at its primary %s (%s) failed: %v; the batch may or may not have been appended (read the stream's end to know); the next Append reconnects",
			a.keyspace, a.name, a.info.GetPrimary(), a.info.GetPrimaryAddress(), err)}
	}
	a.appended += uint64(len(records))
	a.writes++
	return first, nil
}

func (a *Appender) send(ctx context.Context, records []byte) (uint64, error) {
	stop := context.AfterFunc(ctx, a.cancel)
	defer stop()
	m := &meridianpb.AppendRequest{Records: records}
	if !a.named {
		m.Keyspace, m.Stream = a.keyspace, a.name
		a.named = true
	}
	if err := a.stream.Send(m); err != nil {
		// The server's reason, if it ended the call.
		_, rerr := a.stream.Recv()
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return 0, streamErr("append", rerr)
		}
		return 0, streamErr("append", err)
	}
	ack, err := a.stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "the primary ended the append call")
		}
		if ctx.Err() != nil {
			return 0, &Error{Code: codes.Canceled, Msg: ctx.Err().Error()}
		}
		return 0, streamErr("append", err)
	}
	return ack.GetFirstRecord(), nil
}

// Close ends the append call.
func (a *Appender) Close() error {
	if a.broken != nil || a.stream == nil {
		return nil
	}
	err := a.stream.CloseSend()
	if err == nil {
		_, err = a.stream.Recv()
	}
	a.cancel()
	return streamErr("append", err)
}

// Record is one record read from a stream.
type Record struct {
	// Number is the record's position in the stream (0 for the first).
	Number uint64
	// Bytes is the whole record; its first 8 bytes are the timestamp.
	Bytes []byte
}

// Timestamp is the record's timestamp.
func (r Record) Timestamp() int64 { return RecordTimestamp(r.Bytes) }

// Int64 is the int64 field at offset off.
func (r Record) Int64(off int) int64 { return int64(binary.LittleEndian.Uint64(r.Bytes[off:])) }

// Float64 is the float64 field at offset off.
func (r Record) Float64(off int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64(r.Bytes[off:]))
}

// Records iterates over records a read or a subscription returns.
type Records struct {
	recv   func() (*meridianpb.RecordsPage, error)
	cancel context.CancelFunc
	page   *meridianpb.RecordsPage
	i      int
	cur    Record
	err    error
	done   bool
	// uploaded is the last page's uploaded_records (historical reads).
	uploaded uint64
}

// Uploaded is, for a historical read served from the object store, the number of records
// the store held when the read was served: the read covers none after them (read those at
// the primary). Valid once Next has returned false without an error; 0 for other reads and
// for a historical read the primary served itself.
func (it *Records) Uploaded() uint64 { return it.uploaded }

// Next advances to the next record; false at the end or on an error (Err).
func (it *Records) Next() bool {
	for !it.done {
		if it.page != nil && it.i < int(it.page.Count) {
			R := int(it.page.RecordBytes)
			it.cur = Record{Number: it.page.FirstRecord + uint64(it.i), Bytes: it.page.Records[it.i*R : (it.i+1)*R]}
			it.i++
			return true
		}
		p, err := it.recv()
		if err != nil {
			it.done = true
			if !errors.Is(err, io.EOF) {
				it.err = streamErr("read", err)
			}
			it.cancel()
			return false
		}
		if int(p.Count)*int(p.RecordBytes) != len(p.Records) || p.RecordBytes == 0 {
			it.done, it.err = true, fmt.Errorf("read: a page of %d records of %d bytes holds %d bytes", p.Count, p.RecordBytes, len(p.Records))
			it.cancel()
			return false
		}
		it.page, it.i, it.uploaded = p, 0, p.UploadedRecords
	}
	return false
}

// Record is the current record (valid until the next call of Next).
func (it *Records) Record() Record { return it.cur }

// Err is the error that ended the iteration (nil at a normal end).
func (it *Records) Err() error { return it.err }

// Close ends the read early.
func (it *Records) Close() {
	it.done = true
	it.cancel()
}

func failed(err error) *Records {
	return &Records{err: err, done: true, cancel: func() {}}
}

// ReadRange reads the records with timestamps in [from, to] from the stream's primary.
func (c *Client) ReadRange(ctx context.Context, keyspace, name string, from, to int64) *Records {
	return c.readRange(ctx, keyspace, name, from, to, false)
}

// HistoricalRange reads the records with timestamps in [from, to] among those uploaded to
// the object store, at the stream's reader node, which fetches them from the object store
// without the primary (thesis 5.7.4: historical queries leave the primary's ingest alone).
// Records not yet uploaded (the last, partly filled 4 MiB chunk and any waiting for their
// upload) are left out: Uploaded says where the answer stops.
func (c *Client) HistoricalRange(ctx context.Context, keyspace, name string, from, to int64) *Records {
	return c.readRange(ctx, keyspace, name, from, to, true)
}

func (c *Client) readRange(ctx context.Context, keyspace, name string, from, to int64, historical bool) *Records {
	api, err := c.readAPI(ctx, keyspace, name, historical)
	if err != nil {
		return failed(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := api.ReadRange(ctx, &meridianpb.ReadRangeRequest{Keyspace: keyspace, Stream: name, FromTimestamp: from, ToTimestamp: to, Historical: historical})
	if err != nil {
		cancel()
		return failed(streamErr("read", err))
	}
	return &Records{recv: st.Recv, cancel: cancel}
}

// ReadRecords reads count records from record number first (count 0: to the stream's end
// as of the read).
func (c *Client) ReadRecords(ctx context.Context, keyspace, name string, first, count uint64) *Records {
	return c.readRecords(ctx, keyspace, name, first, count, false)
}

// HistoricalRecords reads count records from record number first among those uploaded to
// the object store, at the stream's reader node (HistoricalRange); count 0: to the uploaded
// records' end. A read starting at or after them is refused (FAILED_PRECONDITION).
func (c *Client) HistoricalRecords(ctx context.Context, keyspace, name string, first, count uint64) *Records {
	return c.readRecords(ctx, keyspace, name, first, count, true)
}

// readAPI is where a read goes: the primary, or the reader node for a historical read.
func (c *Client) readAPI(ctx context.Context, keyspace, name string, historical bool) (meridianpb.StreamsClient, error) {
	if historical {
		return c.readerAPI(ctx, keyspace, name)
	}
	api, _, err := c.primaryAPI(ctx, keyspace, name)
	return api, err
}

func (c *Client) readRecords(ctx context.Context, keyspace, name string, first, count uint64, historical bool) *Records {
	api, err := c.readAPI(ctx, keyspace, name, historical)
	if err != nil {
		return failed(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := api.ReadRecords(ctx, &meridianpb.ReadRecordsRequest{Keyspace: keyspace, Stream: name, First: first, Count: count, Historical: historical})
	if err != nil {
		cancel()
		return failed(streamErr("read", err))
	}
	return &Records{recv: st.Recv, cancel: cancel}
}

// SubscribeOptions says where a subscription starts.
type SubscribeOptions struct {
	// From is the first record to deliver; FromEnd starts at the stream's end instead.
	From    uint64
	FromEnd bool
	// MaxLagRecords: see SubscribeRequest (0: the server's default).
	MaxLagRecords uint64
}

// Subscribe delivers the stream's records from a record number on, then each record as
// the primary acknowledges it, until ctx ends (Err is then nil) or the subscription fails
// (a subscriber too slow gets RESOURCE_EXHAUSTED naming the record to resume from).
func (c *Client) Subscribe(ctx context.Context, keyspace, name string, o SubscribeOptions) *Records {
	api, _, err := c.primaryAPI(ctx, keyspace, name)
	if err != nil {
		return failed(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	st, err := api.Subscribe(sctx, &meridianpb.SubscribeRequest{Keyspace: keyspace, Stream: name, From: o.From, FromEnd: o.FromEnd, MaxLagRecords: o.MaxLagRecords})
	if err != nil {
		cancel()
		return failed(streamErr("subscribe", err))
	}
	recv := func() (*meridianpb.RecordsPage, error) {
		p, err := st.Recv()
		if err != nil && ctx.Err() != nil {
			return nil, io.EOF // the caller ended it
		}
		return p, err
	}
	return &Records{recv: recv, cancel: cancel}
}

// Aggregate is a summary of a stream's values in a time range.
type Aggregate struct {
	Count    uint64
	Sum      *big.Int
	Min, Max int64
	// Uploaded: for a historical aggregate served from the object store, the records it
	// held (0 otherwise).
	Uploaded uint64
}

// Mean is Sum / Count (0 for no records).
func (a Aggregate) Mean() float64 {
	if a.Count == 0 {
		return 0
	}
	f, _ := new(big.Float).Quo(new(big.Float).SetInt(a.Sum), new(big.Float).SetUint64(a.Count)).Float64()
	return f
}

// Aggregate summarizes the stream's values (its value field) over [from, to].
func (c *Client) Aggregate(ctx context.Context, keyspace, name string, from, to int64) (Aggregate, error) {
	return c.aggregate(ctx, keyspace, name, from, to, false)
}

// HistoricalAggregate summarizes the values over [from, to] of the records uploaded to the
// object store, at the stream's reader node (HistoricalRange); Aggregate.Uploaded says how
// many records the object store held.
func (c *Client) HistoricalAggregate(ctx context.Context, keyspace, name string, from, to int64) (Aggregate, error) {
	return c.aggregate(ctx, keyspace, name, from, to, true)
}

func (c *Client) aggregate(ctx context.Context, keyspace, name string, from, to int64, historical bool) (Aggregate, error) {
	api, err := c.readAPI(ctx, keyspace, name, historical)
	if err != nil {
		return Aggregate{}, err
	}
	_, cl, err := c.begin(ctx, nil)
	if err != nil {
		return Aggregate{}, err
	}
	defer cl.cancel()
	r, err := api.Aggregate(cl.ctx, &meridianpb.AggregateRequest{Keyspace: keyspace, Stream: name, FromTimestamp: from, ToTimestamp: to, Historical: historical})
	if err != nil {
		return Aggregate{}, c.wrap(cl, err, 0)
	}
	sum := new(big.Int).Lsh(big.NewInt(r.SumHi), 64)
	sum.Add(sum, new(big.Int).SetUint64(r.SumLo))
	return Aggregate{Count: r.Count, Sum: sum, Min: r.Min, Max: r.Max, Uploaded: r.UploadedRecords}, nil
}

// RecordTimestamp is a record's timestamp, its first 8 bytes.
func RecordTimestamp(rec []byte) int64 { return int64(binary.LittleEndian.Uint64(rec)) }

// Batch builds a batch of records of a fixed size with a timestamp and, at valueOffset
// (≥ 8; < 0 for none), an int64 value; the other bytes are zero.
type Batch struct {
	r, valueOffset int
	buf            []byte
}

// NewBatch returns an empty batch of recordBytes-byte records.
func NewBatch(recordBytes, valueOffset int) *Batch {
	return &Batch{r: recordBytes, valueOffset: valueOffset}
}

// Add appends a record with timestamp ts and value v.
func (b *Batch) Add(ts, v int64) {
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(ts))
	rec := make([]byte, b.r-8)
	if b.valueOffset >= 8 && b.valueOffset+8 <= b.r {
		binary.LittleEndian.PutUint64(rec[b.valueOffset-8:], uint64(v))
	}
	b.buf = append(b.buf, rec...)
}

// AddRecord appends a whole record (its length must be the batch's record size).
func (b *Batch) AddRecord(rec []byte) error {
	if len(rec) != b.r {
		return fmt.Errorf("a record of %d bytes in a batch of %d-byte records", len(rec), b.r)
	}
	b.buf = append(b.buf, rec...)
	return nil
}

// Bytes is the batch's records (valid until the next Add or Reset).
func (b *Batch) Bytes() []byte { return b.buf }

// Len is the number of records in the batch.
func (b *Batch) Len() int { return len(b.buf) / b.r }

// Reset empties the batch.
func (b *Batch) Reset() { b.buf = b.buf[:0] }
