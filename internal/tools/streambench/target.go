package streambench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"meridian/internal/kawkab"
)

// Target is one appender's stream in the system under test: the harness calls Append from
// one goroutine at a time, with batches of whole records (R bytes each, the first 8 the
// timestamp, int64 little-endian, not decreasing across the appender's batches), and Append
// returns once the batch is acknowledged at the target's level. The batch must not be kept
// after Append returns (the harness reuses it). Close releases the stream.
//
// The in-process target wraps a kawkab.Stream. A loopback-gRPC target (once the Streams
// service merges) implements the same two methods with the Go client: Append sends the
// batch on the stream's append call and waits for its acknowledgement.
type Target interface {
	Append(ctx context.Context, batch []byte) error
	Close() error
}

// TargetConfig is what a Factory needs to open one appender's stream.
type TargetConfig struct {
	// Appender is the appender's index (0, 1, ...): each has a stream of its own, as each
	// of the thesis's clients appends to a file of its own (5.7.2).
	Appender int
	// Run names the run (a system, an acknowledgement level, a batch size), unique in one
	// benchmark: a remote target makes its stream names from it.
	Run string
	// RecordBytes is R.
	RecordBytes int
	// ValueOffset is where each record's int64 value is (8 for the harness's records).
	ValueOffset int
	// Ack is the acknowledgement level: "local" (fsynced) or "memory" (written).
	Ack string
	// Dir is a directory of the run's own, for targets that keep files (in process).
	Dir string
}

// Factory opens one appender's target.
type Factory func(ctx context.Context, cfg TargetConfig) (Target, error)

var (
	registryMu sync.Mutex
	registry   = map[string]Factory{}
)

// Register makes a target kind available to the harness ("inproc" is built in; a gRPC
// target registers "grpc" from its own package's init or from the command). Registering a
// name twice panics.
func Register(kind string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[kind]; dup {
		panic(fmt.Sprintf("streambench: target kind %q registered twice", kind))
	}
	registry[kind] = f
}

// Lookup is the factory of a target kind.
func Lookup(kind string) (Factory, error) {
	registryMu.Lock()
	defer registryMu.Unlock()
	f, ok := registry[kind]
	if !ok {
		return nil, fmt.Errorf("streambench: unknown target kind %q (have %v)", kind, kindsLocked())
	}
	return f, nil
}

// Kinds are the registered target kinds, sorted.
func Kinds() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	return kindsLocked()
}

func kindsLocked() []string {
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return slices.Clip(out)
}

// InProcess is the built-in target kind: a kawkab.Stream in this process.
const InProcess = "inproc"

func init() { Register(InProcess, openInProcess) }

// FsyncStats count the fsyncs a target's streams made (files and directories), through
// kawkab.StreamOptions.Sync: the local level's group commits, and at both levels the fsync
// of a chunk when the next one starts.
type FsyncStats struct {
	Calls int64         `json:"calls"`
	Total time.Duration `json:"total_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Sub is the fsyncs since an earlier reading (Max is the later reading's: a maximum over
// the whole life unless the counter was reset; see fsyncCounter.take).
func (f FsyncStats) Sub(o FsyncStats) FsyncStats {
	return FsyncStats{Calls: f.Calls - o.Calls, Total: f.Total - o.Total, Max: f.Max}
}

// Add sums two targets' fsyncs.
func (f FsyncStats) Add(o FsyncStats) FsyncStats {
	return FsyncStats{Calls: f.Calls + o.Calls, Total: f.Total + o.Total, Max: max(f.Max, o.Max)}
}

// FsyncCounter is implemented by targets that count their fsyncs. TakeFsyncs returns the
// counts since the last call.
type FsyncCounter interface {
	TakeFsyncs() FsyncStats
}

type fsyncCounter struct {
	mu sync.Mutex
	st FsyncStats
}

func (c *fsyncCounter) sync(f *os.File) error {
	t0 := time.Now()
	err := f.Sync()
	d := time.Since(t0)
	c.mu.Lock()
	c.st.Calls++
	c.st.Total += d
	c.st.Max = max(c.st.Max, d)
	c.mu.Unlock()
	return err
}

func (c *fsyncCounter) take() FsyncStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	c.st = FsyncStats{}
	return st
}

// inProcess is one appender's kawkab stream.
type inProcess struct {
	s     *kawkab.Stream
	syncs *fsyncCounter
}

func openInProcess(_ context.Context, cfg TargetConfig) (Target, error) {
	if cfg.Dir == "" {
		return nil, errors.New("streambench: the in-process target needs a directory")
	}
	ack, err := kawkab.ParseAckLevel(cfg.Ack)
	if err != nil {
		return nil, err
	}
	syncs := &fsyncCounter{}
	s, err := kawkab.CreateStream(filepath.Clean(cfg.Dir), kawkab.StreamConfig{
		ID: uint64(cfg.Appender) + 1, RecordBytes: cfg.RecordBytes, ValueOffset: cfg.ValueOffset, Ack: ack,
	}, kawkab.StreamOptions{Sync: syncs.sync})
	if err != nil {
		return nil, err
	}
	return &inProcess{s: s, syncs: syncs}, nil
}

// TakeFsyncs is the fsyncs since the last call.
func (t *inProcess) TakeFsyncs() FsyncStats { return t.syncs.take() }

func (t *inProcess) Append(_ context.Context, batch []byte) error {
	_, err := t.s.Append(batch)
	return err
}

func (t *inProcess) Close() error { return t.s.Close() }

// Stream is the kawkab stream of an in-process target (for the read benchmarks).
func (t *inProcess) Stream() *kawkab.Stream { return t.s }
