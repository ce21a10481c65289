package kawkab

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// TestLayoutArithmetic checks the record → (chunk, block, slot, offset) arithmetic of 5.4.1
// for record sizes that divide 16 KiB and ones that leave a tail: no record straddles a
// block, records are dense within a block, block b's slot starts at (b mod 256)·16 KiB, and
// the chunk file sizes and their inverse agree.
func TestLayoutArithmetic(t *testing.T) {
	cases := []struct {
		r, perBlock, tail int
	}{
		{16, 1024, 0},
		{24, 682, 16},
		{100, 163, 84},
		{4096, 4, 0},
		{4095, 4, 4},
		{17, 963, 13},
		{3000, 5, 1384},
	}
	rng := rand.New(rand.NewSource(1))
	for _, c := range cases {
		l, err := NewLayout(c.r)
		if err != nil {
			t.Fatal(err)
		}
		if l.PerBlock != c.perBlock || l.Tail != c.tail || l.PerChunk != uint64(c.perBlock)*ChunkBlocks {
			t.Fatalf("R=%d: %+v, want %d per block, tail %d", c.r, l, c.perBlock, c.tail)
		}
		// Records at block and chunk boundaries and random ones.
		var rs []uint64
		for _, b := range []uint64{0, 1, 255, 256, 257, 511, 512, 1 << 20} {
			f := l.FirstRecord(b)
			rs = append(rs, f, f+uint64(l.PerBlock)-1)
			if f > 0 {
				rs = append(rs, f-1)
			}
		}
		for range 1000 {
			rs = append(rs, uint64(rng.Int63n(1<<40)))
		}
		for _, r := range rs {
			p := l.Locate(r)
			if p.Block != r/uint64(l.PerBlock) || p.Slot != int(r%uint64(l.PerBlock)) || p.Chunk != p.Block/ChunkBlocks {
				t.Fatalf("R=%d: record %d at %+v", c.r, r, p)
			}
			inBlock := p.Offset % BlockBytes
			if p.Offset/BlockBytes != int64(p.Block%ChunkBlocks) || inBlock != int64(p.Slot*c.r) {
				t.Fatalf("R=%d: record %d at offset %d: block %d's slot starts at %d", c.r, r, p.Offset, p.Block, int64(p.Block%ChunkBlocks)*BlockBytes)
			}
			if inBlock+int64(c.r) > BlockBytes {
				t.Fatalf("R=%d: record %d straddles blocks: bytes %d to %d of its block", c.r, r, inBlock, inBlock+int64(c.r))
			}
			if p.Offset+int64(c.r) > ChunkBytes {
				t.Fatalf("R=%d: record %d ends past its chunk", c.r, r)
			}
			// The next record follows densely, or starts the next block.
			q := l.Locate(r + 1)
			if q.Block == p.Block && q.Offset != p.Offset+int64(c.r) {
				t.Fatalf("R=%d: record %d at %d, the next at %d", c.r, r, p.Offset, q.Offset)
			}
			if q.Block != p.Block && (q.Block != p.Block+1 || q.Slot != 0 || p.Slot != l.PerBlock-1) {
				t.Fatalf("R=%d: record %d at %+v, the next at %+v", c.r, r, p, q)
			}
		}
		// Chunk file sizes: n records in chunk 0 → the end of record n−1; the inverse.
		if got, want := l.FullChunkFileBytes(), int64(ChunkBytes-c.tail); got != want {
			t.Fatalf("R=%d: full chunk file %d bytes, want %d", c.r, got, want)
		}
		for _, n := range []uint64{0, 1, uint64(l.PerBlock) - 1, uint64(l.PerBlock), uint64(l.PerBlock) + 1, l.PerChunk - 1, l.PerChunk} {
			size := l.ChunkFileBytes(n, 0)
			if n > 0 && size != l.Locate(n-1).Offset+int64(c.r) {
				t.Fatalf("R=%d: %d records: file of %d bytes", c.r, n, size)
			}
			if got, end := l.RecordsInChunkFile(size); got != n || end != size {
				t.Fatalf("R=%d: a file of %d bytes holds %d records ending at %d, want %d", c.r, size, got, end, n)
			}
			// A torn record or a partly written tail is cut off.
			for _, extra := range []int64{1, int64(c.r) - 1} {
				if size+extra > l.FullChunkFileBytes() {
					continue
				}
				if got, end := l.RecordsInChunkFile(size + extra); (got != n || end != size) && !(extra >= int64(c.r) && got == n+1) {
					t.Fatalf("R=%d: %d records and %d torn bytes: %d records ending at %d", c.r, n, extra, got, end)
				}
			}
		}
		// A file ending inside a sealed block's tail (the tail written, the next record not).
		if c.tail > 0 {
			size := int64(BlockBytes) // block 0 with its whole tail
			if got, end := l.RecordsInChunkFile(size); got != uint64(l.PerBlock) || end != BlockBytes-int64(c.tail) {
				t.Fatalf("R=%d: file of one block with its tail: %d records ending at %d", c.r, got, end)
			}
		}
		if l.ChunkFileBytes(l.PerChunk*3, 1) != l.FullChunkFileBytes() || l.ChunkFileBytes(l.PerChunk, 1) != 0 {
			t.Fatalf("R=%d: chunk sizes before and after the last", c.r)
		}
		if l.Blocks(0) != 0 || l.Blocks(1) != 1 || l.Blocks(uint64(l.PerBlock)+1) != 2 || l.Chunks(l.PerChunk) != 1 || l.Chunks(l.PerChunk+1) != 2 {
			t.Fatalf("R=%d: block and chunk counts", c.r)
		}
	}
}

func TestStreamConfigValidate(t *testing.T) {
	ok := []StreamConfig{
		{RecordBytes: 16, ValueOffset: 8},
		{RecordBytes: 16, ValueOffset: NoValue},
		{RecordBytes: 4096, ValueOffset: 4088, Ack: AckMemory},
		{ID: 1 << 63, RecordBytes: 100, ValueOffset: 50},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []struct {
		c    StreamConfig
		want string
	}{
		{StreamConfig{RecordBytes: 15, ValueOffset: NoValue}, "record size 15 bytes, want 16 to 4096"},
		{StreamConfig{RecordBytes: 4097, ValueOffset: NoValue}, "record size 4097"},
		{StreamConfig{RecordBytes: 0}, "record size 0"},
		{StreamConfig{RecordBytes: 16, ValueOffset: 0}, "value offset 0, want -1 (none) or 8 to 8"},
		{StreamConfig{RecordBytes: 16, ValueOffset: 7}, "value offset 7"},
		{StreamConfig{RecordBytes: 16, ValueOffset: 9}, "value offset 9"},
		{StreamConfig{RecordBytes: 100, ValueOffset: 93}, "want -1 (none) or 8 to 92"},
		{StreamConfig{RecordBytes: 16, ValueOffset: -2}, "value offset -2"},
		{StreamConfig{RecordBytes: 16, ValueOffset: 8, Ack: AckReplicated}, "not supported yet"},
		{StreamConfig{RecordBytes: 16, ValueOffset: 8, Ack: 7}, "unknown ack level 7"},
	}
	for _, b := range bad {
		err := b.c.Validate()
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: %v, want an error containing %q", b.c, err, b.want)
		}
	}
	if err := (StreamConfig{RecordBytes: 16, ValueOffset: 8, Ack: AckReplicated}).Validate(); !errors.Is(err, ErrAckNotSupported) {
		t.Errorf("replicated: %v, want ErrAckNotSupported", err)
	}
	for _, a := range []AckLevel{AckLocal, AckMemory, AckReplicated} {
		if got, err := ParseAckLevel(a.String()); err != nil || got != a {
			t.Errorf("ParseAckLevel(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseAckLevel("disk"); err == nil {
		t.Error("ParseAckLevel(disk): no error")
	}
	if _, err := CreateStream(t.TempDir(), StreamConfig{RecordBytes: 16, ValueOffset: 8, Ack: AckReplicated}, StreamOptions{}); !errors.Is(err, ErrAckNotSupported) {
		t.Errorf("CreateStream with ack replicated: %v", err)
	}
}

func TestRecordFields(t *testing.T) {
	c := StreamConfig{RecordBytes: 32, ValueOffset: 16}
	rec := make([]byte, 32)
	PutTimestamp(rec, -5)
	copy(rec[16:], []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if r := c.Record(rec); r.TS != -5 || r.Value != -2 {
		t.Fatalf("record %v", r)
	}
	c.ValueOffset = NoValue
	if v := c.Value(rec); v != 0 {
		t.Fatalf("no value offset: value %d", v)
	}
	_ = fmt.Sprint(AckLevel(9))
}
