package storage

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

const (
	// DefaultCacheBytes is the default size of the block cache.
	DefaultCacheBytes int64 = 64 << 20
	// DefaultMemTableBytes is the default size of one memtable. Small on purpose: a memtable
	// filled in random key order is a skiplist whose every hop is a cache miss, and point
	// reads of recent writes were 3x slower from a 32 MiB memtable than from flushed SSTs
	// (single-node get throughput 14.0k/s at 32 MiB vs 22.3k/s at 4 MiB, docs/benchmarks.md).
	DefaultMemTableBytes uint64 = 4 << 20
	// maxMemTableBytes mirrors Pebble's limit (Options.Validate rejects MemTableSize >= 4 GiB).
	maxMemTableBytes uint64 = 4 << 30
)

// Options configures an Engine. The zero value is usable: Open calls EnsureDefaults, which
// fills every zero field with its default, and then Validate.
type Options struct {
	// FS is the filesystem the engine stores its files on; export and ingest paths are on it
	// too.
	//
	// The default value is vfs.Default (the OS filesystem). Tests pass vfs.NewCrashableMem()
	// to simulate a crash (MemFS.CrashClone) or vfs.NewMem().
	FS vfs.FS

	// CacheBytes is the memory for Pebble's block cache, which holds uncompressed sstable
	// blocks. Pebble counts memtables against its cache, so Open gives Pebble a cache of
	// CacheBytes + 2*MemTableBytes: CacheBytes stays available for blocks. Total memory is
	// therefore about CacheBytes + 2*MemTableBytes (more while flushes are stalled).
	//
	// The default value is 64 MiB. Negative values are invalid.
	CacheBytes int64

	// MemTableBytes is the size of one memtable. Writes go to the WAL and the memtable; a full
	// memtable is flushed to an L0 sstable. Larger memtables absorb more writes between
	// flushes at the cost of memory and of WAL replay time after a crash.
	//
	// The default value is 4 MiB (see DefaultMemTableBytes). It must be below 4 GiB (Pebble's limit).
	MemTableBytes uint64

	// DiskReserveBytes is the disk space the store keeps for its own work (space.go): half
	// of it is a ballast file given back when a write meets a full disk, and writes are
	// refused (DiskState.Full) while free space is below the other half.
	//
	// The default value is 5% of the filesystem, at least 16 MiB and at most 1 GiB, and at
	// most a quarter of the filesystem. It must be smaller than the filesystem. Ignored on
	// filesystems that report no usage (in-memory stores).
	DiskReserveBytes uint64

	// DiskCheckInterval is how often the free space is read. The default value is 250ms.
	DiskCheckInterval time.Duration

	// Logger receives Pebble's log output.
	//
	// The default value is a quiet logger that drops Infof (Pebble logs every flush and
	// compaction at that level, which would drown a node's own logs), passes Errorf to
	// pebble.DefaultLogger at most once per errorLogInterval for each message format (a
	// flush failing on a full disk is retried, and logged, continuously: issue 12 counted
	// 90,692 lines in 3.5 minutes) with the number suppressed, and Fatalf to
	// pebble.DefaultLogger.Fatalf, which exits the process, as Pebble expects of every Logger.
	Logger pebble.Logger
}

// EnsureDefaults fills every zero field of o with its default value.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = DefaultMemTableBytes
	}
	if o.Logger == nil {
		o.Logger = newQuietLogger()
	}
	if o.DiskCheckInterval <= 0 {
		o.DiskCheckInterval = DefaultDiskCheckInterval
	}
}

// Validate returns an error naming the first invalid field of o. It accepts zero values
// (EnsureDefaults replaces them), so it may be called before or after EnsureDefaults.
func (o *Options) Validate() error {
	if o.CacheBytes < 0 {
		return fmt.Errorf("storage: invalid Options.CacheBytes %d: must not be negative", o.CacheBytes)
	}
	if o.MemTableBytes >= maxMemTableBytes {
		return fmt.Errorf("storage: invalid Options.MemTableBytes %d: must be below %d (4 GiB)",
			o.MemTableBytes, maxMemTableBytes)
	}
	return nil
}

// pebbleOptions translates o (after EnsureDefaults) into Pebble options. The result has had
// pebble's own EnsureDefaults applied, so the engine can use it to make sstable writer and
// reader options for export and ingest that match the DB.
func (o *Options) pebbleOptions() *pebble.Options {
	po := &pebble.Options{
		FS: o.FS,
		// Pebble charges memtable memory against its block cache (DB.newMemTable reserves
		// each memtable's arena in the cache, and keeps one recycled memtable's reservation).
		// With the defaults, two 32 MiB memtables would consume the whole 64 MiB cache and
		// every read would miss (measured: BenchmarkGet 17 µs/op, all of it pread and
		// snappy). So the cache is sized for CacheBytes of blocks on top of the mutable and
		// the recycled memtable.
		CacheSize:    o.CacheBytes + 2*int64(o.MemTableBytes),
		MemTableSize: o.MemTableBytes,
		Logger:       o.Logger,
		// Pin the newest format major version so that a fresh store and an exported
		// partition snapshot (written with the DB's TableFormat) are always ingestible by
		// another node running the same binary (ElasCass bootstrapping,
		// ../shared/seeds/elascass-node-bootstrapping.txt).
		FormatMajorVersion: pebble.FormatNewest,
	}
	po.EnsureDefaults()
	return po
}

// errorLogInterval is the least time between two log lines of one Pebble error format.
const errorLogInterval = 30 * time.Second

// quietLogger drops Pebble's Infof chatter and keeps errors, at a bounded rate.
type quietLogger struct {
	out   pebble.Logger // pebble.DefaultLogger; tests capture it
	mu    sync.Mutex
	last  map[string]time.Time // by format; bounded by Pebble's fixed set of formats
	quiet map[string]int       // lines suppressed since the last one printed
}

func newQuietLogger() *quietLogger {
	return &quietLogger{out: pebble.DefaultLogger, last: map[string]time.Time{}, quiet: map[string]int{}}
}

func (*quietLogger) Infof(string, ...interface{}) {}

func (l *quietLogger) Errorf(format string, args ...interface{}) {
	now := time.Now()
	l.mu.Lock()
	if last, ok := l.last[format]; ok && now.Sub(last) < errorLogInterval {
		l.quiet[format]++
		l.mu.Unlock()
		return
	}
	suppressed := l.quiet[format]
	l.last[format], l.quiet[format] = now, 0
	if len(l.last) > 1024 { // formats are constants; this only guards against a surprise
		clear(l.last)
		clear(l.quiet)
	}
	l.mu.Unlock()
	if suppressed > 0 {
		format += fmt.Sprintf(" (and %d more like it in the last %s)", suppressed, errorLogInterval)
	}
	l.out.Errorf(format, args...)
}

func (l *quietLogger) Fatalf(format string, args ...interface{}) {
	l.out.Fatalf(format, args...)
}
