package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/kawkab"
	"meridian/internal/metadata"
	"meridian/internal/runtime/node"
)

// The Streams service (docs/streams.md): Kawkab's time-series streams on a Meridian node.
// Stream records live in the cluster metadata (any node creates, drops, lists and describes
// them); a stream's appends and reads are served by its primary alone, and any other node
// answers them with FAILED_PRECONDITION naming the primary and its address (no forwarding:
// a client that knows the primary — the Go client asks DescribeStream — pays no extra hop).

// Page sizes.
const (
	defaultStreamPageBytes = 1 << 20
	// subscribeBufferPages bounds a subscriber's buffer: pages read from the stream and
	// not yet handed to gRPC.
	subscribeBufferPages = 8
)

// StreamsOptions configures the Streams service of a node.
type StreamsOptions struct {
	// DataDir is the node's data directory; the streams' files go to DataDir/streams.
	DataDir string
	// Config is the cluster's streams section (validated).
	Config config.Streams
	// Objects, when set, is the object store (tests); otherwise it is built from Config.
	Objects kawkab.ObjectStore
	Logger  *slog.Logger
	// ReplicaAddress, when set, gives the client address of a node for replication (tests);
	// default the member's listen address. ReplicaDial, when set, dials it; default a TCP
	// dial from the IP of this node's listen address.
	ReplicaAddress func(node uint32) string
	ReplicaDial    func(ctx context.Context, addr string) (net.Conn, error)
	// Registry receives the service's metrics; default the node's registry.
	Registry prometheus.Registerer
}

// StreamsService implements the Streams gRPC service on one node.
type StreamsService struct {
	meridianpb.UnimplementedStreamsServer
	node  *node.Node
	store *streamStore
	cfg   config.Streams
	log   *slog.Logger

	dropMu  sync.Mutex
	dropped map[uint64]bool // streams dropped since start: never opened again
	closed  bool
	wg      sync.WaitGroup // removals of dropped streams' files

	// Replication (streams_replica.go).
	replMu         sync.Mutex
	links          map[uint64]*replicaLink
	conns          map[string]*grpc.ClientConn
	replicaAddress func(uint32) string
	dial           func(ctx context.Context, addr string) (net.Conn, error)
	replTimeout    time.Duration

	m *streamMetrics
}

// NewStreamsService opens the node's stream store (and its object store) and returns the
// service. Close it after the gRPC server has stopped.
func NewStreamsService(n *node.Node, o StreamsOptions) (*StreamsService, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Config.MaxBatchBytes == 0 {
		if err := config.ValidateStreams(&o.Config); err != nil {
			return nil, err
		}
	}
	objects, closeOS := o.Objects, func() error { return nil }
	if objects == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var where string
		var err error
		objects, closeOS, where, err = openObjectStore(ctx, o.Config, o.DataDir)
		if err != nil {
			return nil, err
		}
		o.Logger.Info("streams: object store ready", "store", where, "prefix", o.Config.Prefix)
	}
	st, err := newStreamStore(o.DataDir, o.Config, objects, closeOS, o.Logger)
	if err != nil {
		closeOS()
		return nil, err
	}
	s := &StreamsService{node: n, store: st, cfg: o.Config, log: o.Logger, dropped: map[uint64]bool{},
		links: map[uint64]*replicaLink{}, conns: map[string]*grpc.ClientConn{}, replicaAddress: o.ReplicaAddress, dial: o.ReplicaDial,
		replTimeout: defaultReplicationTimeout}
	if o.Registry == nil {
		o.Registry = registerer(n)
	}
	s.m = newStreamMetrics(o.Registry)
	if o.Registry != nil {
		// A service started again on the same node (tests) replaces the store's collector.
		c := newStoreCollector(st.stats)
		if err := o.Registry.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				o.Registry.Unregister(are.ExistingCollector)
				_ = o.Registry.Register(c)
			}
		}
	}
	if s.replicaAddress == nil {
		s.replicaAddress = n.MemberAddress
	}
	if s.dial == nil {
		s.dial = defaultReplicaDialer(n.MemberAddress(n.ID()))
	}
	n.SetStreamHook(s.onStreamEvent)
	live := map[uint64]bool{}
	for _, r := range n.Streams("") {
		live[r.ID] = true
	}
	st.sweep(func(id uint64) bool { return live[id] })
	return s, nil
}

// registerer is the node's metrics registry (nil: none).
func registerer(n *node.Node) prometheus.Registerer {
	if r := n.Registry(); r != nil {
		return r
	}
	return nil
}

// onStreamEvent runs in the node's committer: a dropped stream's files are removed in the
// background.
func (s *StreamsService) onStreamEvent(ev node.StreamEvent) {
	if !ev.Dropped {
		return
	}
	s.dropMu.Lock()
	s.dropped[ev.Record.ID] = true
	closed := s.closed
	if !closed {
		s.wg.Add(1)
	}
	s.dropMu.Unlock()
	s.store.markDropped(ev.Record.ID)
	if closed {
		return // the next start's sweep removes the files
	}
	go func() {
		defer s.wg.Done()
		if err := s.store.drop(ev.Record.ID); err != nil {
			s.log.Warn("removing a dropped stream's files", "stream", ev.Record.Spec.Keyspace+"/"+ev.Record.Spec.Name, "id", ev.Record.ID, "err", err)
		}
	}()
}

// Close closes the node's streams and object store.
func (s *StreamsService) Close() error {
	s.dropMu.Lock()
	s.closed = true
	s.dropMu.Unlock()
	s.wg.Wait()
	s.closeReplication()
	return s.store.close()
}

func (s *StreamsService) isDropped(id uint64) bool {
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	return s.dropped[id]
}

// MaxBatchBytes is the largest batch an append takes.
func (s *StreamsService) MaxBatchBytes() int { return int(s.cfg.MaxBatchBytes) }

func (s *StreamsService) timeout(ms uint32) (time.Duration, error) {
	l := s.node.Cluster().Limits
	if ms == 0 {
		return l.DefaultRequestTimeout, nil
	}
	d := time.Duration(ms) * time.Millisecond
	if d > l.MaxRequestTimeout {
		return 0, errs.New(errs.Invalid, "timeout %v exceeds the limit %v (limits.max_request_timeout)", d, l.MaxRequestTimeout)
	}
	return d, nil
}

// streamStatus maps an error of the stream store or the catalog to a gRPC status.
func streamStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if e := (*errs.Error)(nil); errors.As(err, &e) {
		return ToStatus(err)
	}
	msg := strings.TrimPrefix(err.Error(), "kawkab: ")
	code := codes.Internal
	switch {
	case errors.Is(err, errStoreFull):
		code = codes.ResourceExhausted
	case errors.Is(err, kawkab.ErrOutOfOrder), errors.Is(err, kawkab.ErrInvalidBatch), errors.Is(err, kawkab.ErrReadTooLarge),
		errors.Is(err, kawkab.ErrInvalidConfig):
		code = codes.InvalidArgument
	case errors.Is(err, kawkab.ErrOutOfRange):
		code = codes.OutOfRange
	case errors.Is(err, kawkab.ErrStreamClosed), errors.Is(err, kawkab.ErrStreamFailed), errors.Is(err, kawkab.ErrStreamLocked):
		code = codes.Unavailable
	case errors.Is(err, kawkab.ErrCorrupt):
		code = codes.DataLoss
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, msg)
}

func (s *StreamsService) info(r *metadata.StreamRecord) *meridianpb.StreamInfo {
	sp := r.Spec
	out := &meridianpb.StreamInfo{
		Spec: &meridianpb.StreamSpec{Keyspace: sp.Keyspace, Name: sp.Name, RecordBytes: uint32(sp.RecordBytes), ValueField: sp.ValueField, Ack: sp.Ack},
		Id:   r.ID, Primary: s.node.MemberName(r.Primary), PrimaryAddress: s.node.MemberAddress(r.Primary), Version: r.Version,
	}
	if sp.ValueOffset > 0 {
		out.Spec.ValueOffset = uint32(sp.ValueOffset)
	}
	for _, f := range sp.Fields {
		out.Spec.Fields = append(out.Spec.Fields, &meridianpb.StreamField{Name: f.Name, Type: f.Type, Bytes: uint32(f.Bytes)})
	}
	if r.Reader != 0 {
		out.Reader, out.ReaderAddress = s.node.MemberName(r.Reader), s.node.MemberAddress(r.Reader)
	}
	return out
}

// streamSpecFromPB is the catalog's spec of a request's (sizes clamped: the catalog refuses
// anything that large with its limit).
func streamSpecFromPB(sp *meridianpb.StreamSpec) metadata.StreamSpec {
	spec := metadata.StreamSpec{Keyspace: sp.GetKeyspace(), Name: sp.GetName(), RecordBytes: int(min(sp.GetRecordBytes(), 1<<20)),
		ValueField: sp.GetValueField(), ValueOffset: int(min(sp.GetValueOffset(), 1<<20)), Ack: sp.GetAck()}
	for _, f := range sp.GetFields() {
		spec.Fields = append(spec.Fields, metadata.StreamField{Name: f.GetName(), Type: f.GetType(), Bytes: int(min(f.GetBytes(), 1<<20))})
	}
	return spec
}

// CreateStream creates a stream in a keyspace.
func (s *StreamsService) CreateStream(ctx context.Context, r *meridianpb.CreateStreamRequest) (*meridianpb.CreateStreamResponse, error) {
	sp := r.GetSpec()
	if sp == nil {
		return nil, ToStatus(errs.New(errs.Invalid, "create stream: spec is missing"))
	}
	timeout, err := s.timeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	if len(sp.GetFields()) > metadata.MaxStreamFields {
		return nil, ToStatus(errs.New(errs.Invalid, "create stream: %d fields, at most %d", len(sp.GetFields()), metadata.MaxStreamFields))
	}
	spec := streamSpecFromPB(sp)
	rec, notInstalled, err := s.node.CreateStream(ctx, spec, timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	if len(notInstalled) > 0 {
		s.log.Warn("stream created; some nodes had not applied it yet", "stream", spec.Keyspace+"/"+spec.Name, "not_installed", notInstalled)
	}
	return &meridianpb.CreateStreamResponse{Stream: s.info(rec)}, nil
}

// DropStream drops a stream; its primary removes its files.
func (s *StreamsService) DropStream(ctx context.Context, r *meridianpb.DropStreamRequest) (*meridianpb.DropStreamResponse, error) {
	timeout, err := s.timeout(r.GetTimeoutMs())
	if err != nil {
		return nil, ToStatus(err)
	}
	if err := checkKeyspaceName(r.GetKeyspace()); err != nil {
		return nil, ToStatus(err)
	}
	rec, _, err := s.node.DropStream(ctx, r.GetKeyspace(), r.GetName(), r.GetExpectVersion(), timeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &meridianpb.DropStreamResponse{}
	if rec != nil {
		out.Id = rec.ID
	}
	return out, nil
}

func checkKeyspaceName(ks string) error {
	switch {
	case ks == "":
		return errs.New(errs.Invalid, "keyspace name is empty")
	case strings.HasPrefix(ks, "_"):
		return errs.New(errs.Invalid, "keyspace %q is reserved for Meridian's own metadata", ks)
	case len(ks) > 256:
		return errs.New(errs.Invalid, "keyspace name of %d bytes is too long", len(ks))
	}
	return nil
}

// ListStreams lists the streams of a keyspace (or all), as this node has applied them.
func (s *StreamsService) ListStreams(ctx context.Context, r *meridianpb.ListStreamsRequest) (*meridianpb.ListStreamsResponse, error) {
	if ks := r.GetKeyspace(); ks != "" {
		if err := checkKeyspaceName(ks); err != nil {
			return nil, ToStatus(err)
		}
		if _, ok := s.node.Placement().Keyspace(ks); !ok {
			return nil, ToStatus(errs.New(errs.NotFound, "unknown keyspace %q", ks))
		}
	}
	out := &meridianpb.ListStreamsResponse{}
	for _, rec := range s.node.Streams(r.GetKeyspace()) {
		out.Streams = append(out.Streams, s.info(rec))
	}
	return out, nil
}

// lookup validates a stream's name and finds its record.
func (s *StreamsService) lookup(ctx context.Context, keyspace, name string) (*metadata.StreamRecord, error) {
	if err := checkKeyspaceName(keyspace); err != nil {
		return nil, ToStatus(err)
	}
	if err := metadata.ValidateStreamName(name); err != nil {
		return nil, ToStatus(err)
	}
	rec, err := s.node.LookupStream(ctx, keyspace, name, s.node.Cluster().Limits.DefaultRequestTimeout)
	if err != nil {
		return nil, ToStatus(err)
	}
	if s.isDropped(rec.ID) {
		return nil, status.Errorf(codes.NotFound, "stream %q of keyspace %q was dropped", name, keyspace)
	}
	return rec, nil
}

// primary finds a stream whose appends and reads this node serves: its primary.
func (s *StreamsService) primary(ctx context.Context, keyspace, name string) (*metadata.StreamRecord, error) {
	rec, err := s.lookup(ctx, keyspace, name)
	if err != nil {
		return nil, err
	}
	if rec.Primary != s.node.ID() {
		return nil, status.Errorf(codes.FailedPrecondition, "stream %s/%s: node %s is not its primary; send its appends and reads to its primary %s at %s",
			keyspace, name, s.node.Name(), s.node.MemberName(rec.Primary), s.node.MemberAddress(rec.Primary))
	}
	return rec, nil
}

// storeErr maps a stream store error, telling a dropped stream apart.
func (s *StreamsService) storeErr(rec *metadata.StreamRecord, err error) error {
	if errors.Is(err, kawkab.ErrStreamClosed) {
		if cur, ok := s.node.Stream(rec.Spec.Keyspace, rec.Spec.Name); s.isDropped(rec.ID) || !ok || cur.ID != rec.ID {
			return status.Errorf(codes.NotFound, "stream %q of keyspace %q was dropped", rec.Spec.Name, rec.Spec.Keyspace)
		}
		return status.Errorf(codes.Unavailable, "stream %s/%s: node %s is shutting down", rec.Spec.Keyspace, rec.Spec.Name, s.node.Name())
	}
	return streamStatus(err)
}

// DescribeStream describes a stream; its primary adds its length and last timestamp.
func (s *StreamsService) DescribeStream(ctx context.Context, r *meridianpb.DescribeStreamRequest) (*meridianpb.DescribeStreamResponse, error) {
	rec, err := s.lookup(ctx, r.GetKeyspace(), r.GetName())
	if err != nil {
		return nil, err
	}
	out := s.info(rec)
	if rec.Primary == s.node.ID() {
		n, last, has, err := s.store.info(rec)
		if err != nil {
			return nil, s.storeErr(rec, err)
		}
		out.Live, out.Records, out.LastTimestamp, out.HasRecords = true, n, last, has
	}
	return &meridianpb.DescribeStreamResponse{Stream: out}, nil
}

// appendBatch validates and appends one batch.
func (s *StreamsService) appendBatch(ctx context.Context, rec *metadata.StreamRecord, b []byte) (uint64, error) {
	start := time.Now()
	first, err := s.appendBatch1(ctx, rec, b)
	switch {
	case err == nil:
		s.m.appended(rec.Spec.Ack, start, len(b)/rec.Spec.RecordBytes, len(b))
	case status.Code(err) == codes.InvalidArgument || status.Code(err) == codes.NotFound:
		s.m.appends.WithLabelValues("refused").Inc()
	default:
		s.m.appends.WithLabelValues("failed").Inc()
	}
	return first, err
}

func (s *StreamsService) appendBatch1(ctx context.Context, rec *metadata.StreamRecord, b []byte) (uint64, error) {
	if err := checkBatch(rec.Spec.Keyspace, rec.Spec.Name, rec.Spec.RecordBytes, int(s.cfg.MaxBatchBytes), len(b)); err != nil {
		return 0, err
	}
	var first uint64
	var err error
	if rec.Replicated() {
		first, err = s.appendReplicated(ctx, rec, b)
	} else {
		first, err = s.store.append(rec, b)
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return 0, err
		}
		if errors.Is(err, kawkab.ErrOutOfOrder) {
			return 0, status.Errorf(codes.InvalidArgument, "stream %s/%s: %s", rec.Spec.Keyspace, rec.Spec.Name, trimStreamPrefix(err.Error()))
		}
		return 0, s.storeErr(rec, err)
	}
	return first, nil
}

// checkBatch checks a batch's size: at least one record, at most maxBatch bytes, whole
// records of R bytes.
func checkBatch(ks, name string, R, maxBatch, n int) error {
	switch {
	case n == 0:
		return status.Errorf(codes.InvalidArgument, "stream %s/%s: an empty batch (send at least one %d-byte record)", ks, name, R)
	case n > maxBatch:
		return status.Errorf(codes.InvalidArgument, "stream %s/%s: a batch of %d bytes exceeds the limit of %d bytes (streams.max_batch); split it", ks, name, n, maxBatch)
	case n%R != 0:
		return status.Errorf(codes.InvalidArgument, "stream %s/%s: a batch of %d bytes is not a whole number of %d-byte records (%d records and %d bytes more)",
			ks, name, n, R, n/R, n%R)
	}
	return nil
}

// trimStreamPrefix drops the engine's "kawkab: stream N: append: " prefix.
func trimStreamPrefix(msg string) string {
	if i := strings.Index(msg, "append: "); i >= 0 {
		return msg[i+len("append: "):]
	}
	return strings.TrimPrefix(msg, "kawkab: ")
}

// appendTarget resolves the stream a call appends to from its first message; later
// messages may repeat the names but not change them.
func (s *StreamsService) appendTarget(ctx context.Context, rec *metadata.StreamRecord, m *meridianpb.AppendRequest) (*metadata.StreamRecord, error) {
	if rec == nil {
		return s.primary(ctx, m.GetKeyspace(), m.GetStream())
	}
	if (m.GetKeyspace() != "" && m.GetKeyspace() != rec.Spec.Keyspace) || (m.GetStream() != "" && m.GetStream() != rec.Spec.Name) {
		return nil, status.Errorf(codes.InvalidArgument, "an append call goes to one stream: it began with %s/%s, a later batch names %s/%s",
			rec.Spec.Keyspace, rec.Spec.Name, m.GetKeyspace(), m.GetStream())
	}
	return rec, nil
}

// Append takes batches until the client closes its side, then replies once.
func (s *StreamsService) Append(srv meridianpb.Streams_AppendServer) error {
	var rec *metadata.StreamRecord
	out := &meridianpb.AppendResponse{}
	for {
		m, err := srv.Recv()
		if err == io.EOF {
			return srv.SendAndClose(out)
		}
		if err != nil {
			return err
		}
		if rec, err = s.appendTarget(srv.Context(), rec, m); err != nil {
			return err
		}
		first, err := s.appendBatch(srv.Context(), rec, m.GetRecords())
		if err != nil {
			return err
		}
		n := uint64(len(m.GetRecords()) / rec.Spec.RecordBytes)
		if out.Batches == 0 {
			out.FirstRecord = first
		}
		out.Batches++
		out.Records += n
		out.LastRecord = first + n - 1
	}
}

// AppendAcked acknowledges each batch as soon as it is appended at the stream's level.
func (s *StreamsService) AppendAcked(srv meridianpb.Streams_AppendAckedServer) error {
	var rec *metadata.StreamRecord
	for {
		m, err := srv.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if rec, err = s.appendTarget(srv.Context(), rec, m); err != nil {
			return err
		}
		first, err := s.appendBatch(srv.Context(), rec, m.GetRecords())
		if err != nil {
			return err
		}
		if err := srv.Send(&meridianpb.AppendAck{FirstRecord: first, Records: uint32(len(m.GetRecords()) / rec.Spec.RecordBytes)}); err != nil {
			return err
		}
	}
}

// pageRecords is the records per page for a request's page_bytes.
func pageRecords(pageBytes uint32, R int) (int, error) {
	if pageBytes == 0 {
		pageBytes = defaultStreamPageBytes
	}
	if pageBytes > maxStreamPageBytes {
		return 0, status.Errorf(codes.InvalidArgument, "page_bytes %d exceeds the limit of %d", pageBytes, maxStreamPageBytes)
	}
	return max(1, int(pageBytes)/R), nil
}

// sendPages sends records (consecutive, from first) in pages of at most per records.
func sendPages(send func(*meridianpb.RecordsPage) error, first uint64, recs []byte, R, per int) error {
	for len(recs) > 0 {
		n := min(per, len(recs)/R)
		if err := send(&meridianpb.RecordsPage{FirstRecord: first, Count: uint32(n), RecordBytes: uint32(R), Records: recs[:n*R]}); err != nil {
			return err
		}
		first += uint64(n)
		recs = recs[n*R:]
	}
	return nil
}

// readTarget finds the stream a read names and what serves it at this node: the stream
// itself at its primary; for a historical read at another node, the records uploaded to the
// object store (uploaded is then their number; 0 at the primary). Any other read at a node
// that is not the primary is refused, naming the primary.
func (s *StreamsService) readTarget(ctx context.Context, keyspace, name string, historical bool) (rec *metadata.StreamRecord, r streamReader, uploaded uint64, err error) {
	rec, err = s.lookup(ctx, keyspace, name)
	if err != nil {
		return nil, nil, 0, err
	}
	if rec.Primary == s.node.ID() {
		r, err = s.store.reader(ctx, rec, true)
		if err != nil {
			return nil, nil, 0, s.storeErr(rec, err)
		}
		return rec, r, 0, nil
	}
	if !historical {
		return nil, nil, 0, status.Errorf(codes.FailedPrecondition, "stream %s/%s: node %s is not its primary; send its appends and reads to its primary %s at %s (or ask for a historical read of its uploaded records)",
			keyspace, name, s.node.Name(), s.node.MemberName(rec.Primary), s.node.MemberAddress(rec.Primary))
	}
	r, err = s.store.reader(ctx, rec, false)
	if errors.Is(err, errNotUploaded) {
		return nil, nil, 0, status.Errorf(codes.FailedPrecondition, "stream %s/%s: no chunk of it is in the object store yet (chunks are uploaded when they fill: %d records); read it at its primary %s at %s",
			keyspace, name, kawkab.ChunkBytes/rec.Spec.RecordBytes, s.node.MemberName(rec.Primary), s.node.MemberAddress(rec.Primary))
	}
	if err != nil {
		return nil, nil, 0, s.storeErr(rec, err)
	}
	s.m.historicalReads.Inc()
	return rec, r, r.Len(), nil
}

// ReadRange streams the records whose timestamps are in [from, to], in pages.
func (s *StreamsService) ReadRange(r *meridianpb.ReadRangeRequest, srv meridianpb.Streams_ReadRangeServer) error {
	tl, th := r.GetFromTimestamp(), r.GetToTimestamp()
	if tl > th {
		return status.Errorf(codes.InvalidArgument, "read range: from_timestamp %d is after to_timestamp %d", tl, th)
	}
	rec, rd, uploaded, err := s.readTarget(srv.Context(), r.GetKeyspace(), r.GetStream(), r.GetHistorical())
	if err != nil {
		return err
	}
	R := rec.Spec.RecordBytes
	per, err := pageRecords(r.GetPageBytes(), R)
	if err != nil {
		return err
	}
	limit := r.GetLimit()
	if limit == 0 {
		limit = ^uint64(0)
	}
	res, err := rd.ReadRange(tl, th)
	if err != nil {
		return s.storeErr(rec, err)
	}
	first, n, recs, more := res.First, res.N, res.Records, res.More
	sent := 0
	send := func(p *meridianpb.RecordsPage) error {
		p.UploadedRecords = uploaded
		sent++
		return srv.Send(p)
	}
	defer func() {
		// A historical read always answers with the uploaded count, even with no record.
		if uploaded > 0 && sent == 0 && srv.Context().Err() == nil {
			_ = send(&meridianpb.RecordsPage{RecordBytes: uint32(R)})
		}
	}()
	for {
		if uint64(n) > limit {
			n, recs, more = int(limit), recs[:int(limit)*R], false
		}
		if err := sendPages(send, first, recs, R, per); err != nil {
			return err
		}
		s.m.readRecords.WithLabelValues("range").Add(float64(n))
		limit -= uint64(n)
		if !more || limit == 0 || srv.Context().Err() != nil {
			return srv.Context().Err()
		}
		// Continue by record number, up to the range's end.
		first += uint64(n)
		batch, err := rd.ReadRecords(first, int(min(uint64(maxStreamPageBytes/R), limit)))
		if err != nil {
			return s.storeErr(rec, err)
		}
		n, more = 0, len(batch) > 0
		for n*R < len(batch) && kawkab.Timestamp(batch[n*R:]) <= th {
			n++
		}
		if n*R < len(batch) {
			more = false // a record past the range's end
		}
		recs = batch[:n*R]
		if n == 0 {
			return nil
		}
	}
}

// ReadRecords streams records by number, in pages.
func (s *StreamsService) ReadRecords(r *meridianpb.ReadRecordsRequest, srv meridianpb.Streams_ReadRecordsServer) error {
	rec, rd, uploaded, err := s.readTarget(srv.Context(), r.GetKeyspace(), r.GetStream(), r.GetHistorical())
	if err != nil {
		return err
	}
	R := rec.Spec.RecordBytes
	per, err := pageRecords(r.GetPageBytes(), R)
	if err != nil {
		return err
	}
	n := rd.Len()
	first := r.GetFirst()
	if first > n || (uploaded > 0 && first == n && r.GetCount() > 0) {
		if uploaded > 0 {
			return status.Errorf(codes.FailedPrecondition, "stream %s/%s: historical read from record %d: the object store holds records 0 to %d; read later ones at its primary %s at %s",
				rec.Spec.Keyspace, rec.Spec.Name, first, int64(n)-1, s.node.MemberName(rec.Primary), s.node.MemberAddress(rec.Primary))
		}
		return status.Errorf(codes.OutOfRange, "stream %s/%s: read from record %d: the stream has %d records (0 to %d)", rec.Spec.Keyspace, rec.Spec.Name, first, n, int64(n)-1)
	}
	end := n
	if c := r.GetCount(); c > 0 && c < n-first {
		end = first + c
	}
	send := func(p *meridianpb.RecordsPage) error {
		p.UploadedRecords = uploaded
		return srv.Send(p)
	}
	for first < end {
		recs, err := rd.ReadRecords(first, int(min(uint64(per), end-first)))
		if err != nil {
			return s.storeErr(rec, err)
		}
		if len(recs) == 0 {
			return nil
		}
		if err := sendPages(send, first, recs, R, per); err != nil {
			return err
		}
		s.m.readRecords.WithLabelValues("records").Add(float64(len(recs) / R))
		first += uint64(len(recs) / R)
	}
	return nil
}

// Aggregate summarizes the values of the records in a time range.
func (s *StreamsService) Aggregate(ctx context.Context, r *meridianpb.AggregateRequest) (*meridianpb.AggregateResponse, error) {
	if r.GetFromTimestamp() > r.GetToTimestamp() {
		return nil, status.Errorf(codes.InvalidArgument, "aggregate: from_timestamp %d is after to_timestamp %d", r.GetFromTimestamp(), r.GetToTimestamp())
	}
	rec, rd, uploaded, err := s.readTarget(ctx, r.GetKeyspace(), r.GetStream(), r.GetHistorical())
	if err != nil {
		return nil, err
	}
	sum, err := rd.Aggregate(r.GetFromTimestamp(), r.GetToTimestamp())
	if err != nil {
		return nil, s.storeErr(rec, err)
	}
	return &meridianpb.AggregateResponse{Count: sum.Count, SumHi: sum.Sum.Hi, SumLo: sum.Sum.Lo, Sum: sum.Sum.String(), Min: sum.Min, Max: sum.Max, UploadedRecords: uploaded}, nil
}

// Subscribe streams the stream's records from a record number on, then each record as it
// is acknowledged. A bounded buffer of pages sits between the stream and the client; a
// subscriber that has caught up with the tail and then falls more than max_lag_records
// behind it is ended with RESOURCE_EXHAUSTED naming the record to resume from.
func (s *StreamsService) Subscribe(r *meridianpb.SubscribeRequest, srv meridianpb.Streams_SubscribeServer) error {
	ctx := srv.Context()
	rec, err := s.primary(ctx, r.GetKeyspace(), r.GetStream())
	if err != nil {
		return err
	}
	R := rec.Spec.RecordBytes
	per, err := pageRecords(r.GetPageBytes(), R)
	if err != nil {
		return err
	}
	maxLag := s.cfg.SubscribeMaxLag
	if l := r.GetMaxLagRecords(); l > 0 {
		if l > maxLag {
			return status.Errorf(codes.InvalidArgument, "max_lag_records %d exceeds the limit of %d (streams.subscribe_max_lag)", l, maxLag)
		}
		maxLag = l
	}
	n, _, err := s.store.tail(rec)
	if err != nil {
		return s.storeErr(rec, err)
	}
	next := r.GetFrom()
	if r.GetFromEnd() {
		next = n
	}
	if next > n {
		return status.Errorf(codes.OutOfRange, "subscribe to stream %s/%s from record %d: the stream has %d records (subscribe from 0 to %d, or from_end)", rec.Spec.Keyspace, rec.Spec.Name, next, n, n)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.m.subscribers.Inc()
	defer s.m.subscribers.Dec()
	pages := make(chan *meridianpb.RecordsPage, subscribeBufferPages)
	var delivered atomic.Uint64
	delivered.Store(next)
	var perr error
	tooSlow := func(tail uint64) error {
		at := delivered.Load()
		return status.Errorf(codes.ResourceExhausted, "subscriber of stream %s/%s is too slow: it is %d records behind the tail (limit %d, max_lag_records) with its buffer of %d pages full; it has been sent every record before %d: resubscribe from %d",
			rec.Spec.Keyspace, rec.Spec.Name, tail-at, maxLag, subscribeBufferPages, at, at)
	}
	go func() {
		defer close(pages)
		caughtUp := false
		for {
			n, ch, err := s.store.tail(rec)
			if err != nil {
				perr = s.storeErr(rec, err)
				return
			}
			if cur, ok := s.node.Stream(rec.Spec.Keyspace, rec.Spec.Name); s.isDropped(rec.ID) || (ok && cur.ID != rec.ID) {
				perr = status.Errorf(codes.NotFound, "stream %q of keyspace %q was dropped", rec.Spec.Name, rec.Spec.Keyspace)
				return
			}
			if caughtUp && n-next > maxLag {
				perr = tooSlow(n)
				return
			}
			if next >= n {
				caughtUp = true
				select {
				case <-ch:
				case <-ctx.Done():
					return
				}
				continue
			}
			recs, err := s.store.readRecords(rec, next, int(min(uint64(per), n-next)))
			if err != nil {
				perr = s.storeErr(rec, err)
				return
			}
			page := &meridianpb.RecordsPage{FirstRecord: next, Count: uint32(len(recs) / R), RecordBytes: uint32(R), Records: recs}
			for pushed := false; !pushed; {
				select {
				case pages <- page:
					pushed = true
				case <-ch:
					var tail uint64
					if tail, ch, err = s.store.tail(rec); err != nil {
						perr = s.storeErr(rec, err)
						return
					}
					if caughtUp && tail-next > maxLag {
						perr = tooSlow(tail)
						return
					}
				case <-ctx.Done():
					return
				}
			}
			next += uint64(page.Count)
		}
	}()
	for page := range pages {
		if err := srv.Send(page); err != nil {
			cancel()
			for range pages {
			}
			s.m.subEnded.WithLabelValues("canceled").Inc()
			return err
		}
		s.m.readRecords.WithLabelValues("subscribe").Add(float64(page.Count))
		delivered.Store(page.FirstRecord + uint64(page.Count))
	}
	switch code := status.Code(perr); {
	case perr == nil:
		s.m.subEnded.WithLabelValues("canceled").Inc()
		return ctx.Err()
	case code == codes.ResourceExhausted:
		s.m.subEnded.WithLabelValues("too_slow").Inc()
	case code == codes.NotFound:
		s.m.subEnded.WithLabelValues("dropped").Inc()
	default:
		s.m.subEnded.WithLabelValues("error").Inc()
	}
	return perr
}
