package storage

import (
	"fmt"

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

	// Logger receives Pebble's log output.
	//
	// The default value is a quiet logger that drops Infof (Pebble logs every flush and
	// compaction at that level, which would drown a node's own logs) and passes Errorf and
	// Fatalf to pebble.DefaultLogger. Note that pebble.DefaultLogger.Fatalf exits the process,
	// as Pebble expects of every Logger.
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
		o.Logger = quietLogger{}
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

// quietLogger drops Pebble's Infof chatter and keeps errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}

func (quietLogger) Errorf(format string, args ...interface{}) {
	pebble.DefaultLogger.Errorf(format, args...)
}

func (quietLogger) Fatalf(format string, args ...interface{}) {
	pebble.DefaultLogger.Fatalf(format, args...)
}
