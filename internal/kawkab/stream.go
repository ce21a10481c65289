package kawkab

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ---------------------------------------------------------------------------------------------
// Records, data blocks and chunks (5.2, 5.4.1)
// ---------------------------------------------------------------------------------------------

// The fixed sizes of a stream's storage (thesis 5.4.1: "We use 16KB blocks and 4MB chunks in
// our implementation"), and the limits on a stream's record (docs/plans/kawkab.md, "Records,
// blocks, chunks").
const (
	// BlockBytes is a data block's size (5.4.1: 16 KB). A block holds ⌊BlockBytes/R⌋ records
	// of R bytes; no record straddles two blocks, so the last BlockBytes mod R bytes of a
	// sealed block are unused (zero).
	BlockBytes = 16 << 10
	// ChunkBlocks is the number of data blocks in a chunk (5.4.1: 4 MB chunks of 16 KB
	// blocks), and also the number of index blocks in an index chunk (5.4.2: "index blocks
	// are stored and managed the same way as data blocks … batched in the local store in
	// larger chunks").
	ChunkBlocks = 256
	// ChunkBytes is a chunk's size (5.4.1: 4 MB), the unit of the local store's files and of
	// uploads to the object store.
	ChunkBytes = ChunkBlocks * BlockBytes
	// TimestampBytes is the size of a record's timestamp, its first 8 bytes (5.2: "the first
	// 8 bytes of a record are required to be the record's timestamp"), an int64
	// little-endian.
	TimestampBytes = 8
	// ValueBytes is the size of a record's summarized value, an int64 little-endian at the
	// stream's value offset.
	ValueBytes = 8
	// MinRecordBytes is the smallest record: a timestamp and one more 8-byte field.
	MinRecordBytes = 16
	// MaxRecordBytes is the largest record (4 KiB): a data block holds at least 4.
	MaxRecordBytes = 4 << 10
	// NoValue is the value offset of a stream whose records carry no summarized value.
	NoValue = -1
)

// AckLevel says when an append is acknowledged (docs/plans/kawkab.md, "Local chunk files and
// what an append acknowledges"; docs/kawkab.md, "Acknowledgement levels").
type AckLevel uint8

const (
	// AckLocal (the default, the zero value): an append returns once its records are written
	// to the stream's chunk file and fsynced (with the index blocks that changed). It
	// survives a process crash (kill -9) and a machine crash or power loss.
	AckLocal AckLevel = iota
	// AckMemory (the thesis's own level, 5.3.1 "Eliminating Data Replication"): an append
	// returns once its records are written to the chunk file with write(2), in the kernel's
	// page cache, without fsync. It survives a process crash (kill -9); a machine crash or
	// power loss loses what the kernel had not yet written back (at most everything since
	// the last chunk boundary, where the engine fsyncs).
	AckMemory
	// AckReplicated (the thesis's future work): also fsynced at a second node before the
	// acknowledgement. Not supported yet: Validate refuses it.
	AckReplicated
)

func (a AckLevel) String() string {
	switch a {
	case AckLocal:
		return "local"
	case AckMemory:
		return "memory"
	case AckReplicated:
		return "replicated"
	}
	return fmt.Sprintf("AckLevel(%d)", uint8(a))
}

// ParseAckLevel is the level named local, memory or replicated.
func ParseAckLevel(s string) (AckLevel, error) {
	for _, a := range []AckLevel{AckLocal, AckMemory, AckReplicated} {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("kawkab: ack level %q: want local, memory or replicated", s)
}

// ErrAckNotSupported is wrapped by the error for an acknowledgement level this build does
// not implement (AckReplicated).
var ErrAckNotSupported = errors.New("acknowledgement level not supported yet")

// ErrInvalidConfig is wrapped by every error of StreamConfig.Validate.
var ErrInvalidConfig = errors.New("invalid stream configuration")

// StreamConfig is a stream's schema, fixed when it is created.
type StreamConfig struct {
	// ID is the stream's 64-bit identifier (5.4.1: the file-ID of a block's name); its files
	// live in the directory s<ID>.
	ID uint64
	// RecordBytes is the fixed record size R, MinRecordBytes to MaxRecordBytes. A record's
	// first 8 bytes are its timestamp, an int64 little-endian.
	RecordBytes int
	// ValueOffset is the offset of the int64 (little-endian) that the summary index
	// aggregates, 8 to R − 8, or NoValue (−1): then every record's value is 0 and an
	// aggregate's Count is its only meaningful field.
	ValueOffset int
	// Ack is when an append is acknowledged.
	Ack AckLevel
}

// Validate checks the schema: the record size, the value offset, the acknowledgement level.
func (c StreamConfig) Validate() error {
	if c.RecordBytes < MinRecordBytes || c.RecordBytes > MaxRecordBytes {
		return fmt.Errorf("kawkab: stream %d: record size %d bytes, want %d to %d: %w",
			c.ID, c.RecordBytes, MinRecordBytes, MaxRecordBytes, ErrInvalidConfig)
	}
	if c.ValueOffset != NoValue && (c.ValueOffset < TimestampBytes || c.ValueOffset > c.RecordBytes-ValueBytes) {
		return fmt.Errorf("kawkab: stream %d: value offset %d, want %d (none) or %d to %d (an int64 after the timestamp, inside a %d-byte record): %w",
			c.ID, c.ValueOffset, NoValue, TimestampBytes, c.RecordBytes-ValueBytes, c.RecordBytes, ErrInvalidConfig)
	}
	switch c.Ack {
	case AckLocal, AckMemory:
	case AckReplicated:
		return fmt.Errorf("kawkab: stream %d: ack level %v (fsynced at a second node) is not supported yet: %w: %w",
			c.ID, c.Ack, ErrAckNotSupported, ErrInvalidConfig)
	default:
		return fmt.Errorf("kawkab: stream %d: unknown ack level %d, want local (%d) or memory (%d): %w",
			c.ID, uint8(c.Ack), AckLocal, AckMemory, ErrInvalidConfig)
	}
	return nil
}

// Timestamp is a record's timestamp: its first 8 bytes, an int64 little-endian (5.2).
func Timestamp(rec []byte) int64 { return int64(binary.LittleEndian.Uint64(rec)) }

// PutTimestamp sets a record's timestamp.
func PutTimestamp(rec []byte, ts int64) { binary.LittleEndian.PutUint64(rec, uint64(ts)) }

// Value is the summarized value of a record of this stream: the int64 at ValueOffset, or 0
// when the stream has none.
func (c StreamConfig) Value(rec []byte) int64 {
	if c.ValueOffset == NoValue {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(rec[c.ValueOffset:]))
}

// Record is what the index keeps of a record: its timestamp and value.
func (c StreamConfig) Record(rec []byte) Record {
	return Record{TS: Timestamp(rec), Value: c.Value(rec)}
}

// Layout is the arithmetic of a record size: where record number r lives (5.4.1: "as block
// and record sizes are fixed, a block number can be easily calculated from file length or a
// record number without explicit lookup"). Records, blocks and chunks are numbered from 0.
type Layout struct {
	// R is the record size.
	R int
	// PerBlock is ⌊BlockBytes/R⌋, the records of a data block.
	PerBlock int
	// PerChunk is PerBlock·ChunkBlocks, the records of a data chunk.
	PerChunk uint64
	// Tail is BlockBytes mod R, the unused (zero) bytes at the end of a sealed block.
	Tail int
}

// NewLayout is the layout of R-byte records; R must be MinRecordBytes to MaxRecordBytes.
func NewLayout(r int) (Layout, error) {
	if r < MinRecordBytes || r > MaxRecordBytes {
		return Layout{}, fmt.Errorf("kawkab: record size %d bytes, want %d to %d: %w", r, MinRecordBytes, MaxRecordBytes, ErrInvalidConfig)
	}
	per := BlockBytes / r
	return Layout{R: r, PerBlock: per, PerChunk: uint64(per) * ChunkBlocks, Tail: BlockBytes - per*r}, nil
}

// Layout is the stream's record layout (the record size must be valid).
func (c StreamConfig) Layout() Layout {
	l, err := NewLayout(c.RecordBytes)
	if err != nil {
		panic(err)
	}
	return l
}

// Pos is where a record lives.
type Pos struct {
	Block uint64 // the data block, r / PerBlock (numbered across the stream, from 0)
	Slot  int    // the record's slot in its block, r % PerBlock
	Chunk uint64 // the data chunk, Block / ChunkBlocks (the file d<Chunk>)
	// Offset is the record's byte offset in its chunk file: (Block mod ChunkBlocks)·BlockBytes
	// + Slot·R. Block b's slot starts at (b mod 256)·16 KiB whatever the record size.
	Offset int64
}

// Locate is where record r lives.
func (l Layout) Locate(r uint64) Pos {
	b := r / uint64(l.PerBlock)
	slot := int(r % uint64(l.PerBlock))
	return Pos{
		Block:  b,
		Slot:   slot,
		Chunk:  b / ChunkBlocks,
		Offset: int64(b%ChunkBlocks)*BlockBytes + int64(slot)*int64(l.R),
	}
}

// FirstRecord is the number of the first record of data block b.
func (l Layout) FirstRecord(b uint64) uint64 { return b * uint64(l.PerBlock) }

// Blocks is the number of data blocks that n records occupy (the last possibly partial).
func (l Layout) Blocks(n uint64) uint64 { return (n + uint64(l.PerBlock) - 1) / uint64(l.PerBlock) }

// Chunks is the number of data chunks that n records occupy (the last possibly partial).
func (l Layout) Chunks(n uint64) uint64 { return (n + l.PerChunk - 1) / l.PerChunk }

// FullChunkFileBytes is the size of a full data chunk file: 255 whole blocks, then the last
// block's records without its unused tail (a chunk file ends right after its last record).
func (l Layout) FullChunkFileBytes() int64 {
	return ChunkBytes - int64(l.Tail)
}

// ChunkFileBytes is the size of data chunk c's file when the stream holds n records: 0 for a
// chunk after the last record's, FullChunkFileBytes for a chunk before it, and for the last
// one the end of its last record.
func (l Layout) ChunkFileBytes(n uint64, c uint64) int64 {
	first := c * l.PerChunk
	switch {
	case n <= first:
		return 0
	case n >= first+l.PerChunk:
		return l.FullChunkFileBytes()
	}
	return l.Locate(n-1).Offset + int64(l.R)
}

// RecordsInChunkFile is the number of whole records a chunk file of size bytes holds, and
// the size it should have (the end of its last whole record): a torn last record — a size
// not on a record boundary — or a partly written block tail is cut off. size must be at most
// FullChunkFileBytes (callers check).
func (l Layout) RecordsInChunkFile(size int64) (n uint64, end int64) {
	blocks := size / BlockBytes
	in := min(int((size%BlockBytes)/int64(l.R)), l.PerBlock)
	n = uint64(blocks)*uint64(l.PerBlock) + uint64(in)
	if n == 0 {
		return 0, 0
	}
	return n, l.Locate(n-1).Offset + int64(l.R)
}
