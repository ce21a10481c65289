package kawkab

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func validMeta() streamMeta {
	return streamMeta{
		StreamConfig: StreamConfig{ID: 42, RecordBytes: 100, ValueOffset: 8, Ack: AckMemory},
		Index:        Config{BlockSize: BlockBytes, K: DefaultK, N: 289},
	}
}

func TestStreamMetaRoundTrip(t *testing.T) {
	for _, m := range []streamMeta{
		validMeta(),
		{StreamConfig: StreamConfig{ID: 1<<64 - 1, RecordBytes: 16, ValueOffset: NoValue}, Index: Config{BlockSize: BlockBytes, K: 2, N: 1}},
		{StreamConfig: StreamConfig{RecordBytes: 4096, ValueOffset: 4088}, Index: Config{BlockSize: BlockBytes, K: 8, N: 284}},
	} {
		b, err := encodeStreamMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != StreamMetaBytes {
			t.Fatalf("%d bytes", len(b))
		}
		got, err := decodeStreamMeta(b)
		if err != nil || got != m {
			t.Fatalf("decode: %+v, %v; want %+v", got, err, m)
		}
	}
	// Refusals: every field's damage is named.
	good, _ := encodeStreamMeta(validMeta())
	fix := func(b []byte) []byte { // recompute the checksum so the field check is reached
		b = bytes.Clone(b)
		putU32(b[44:], crc32c(b[:44]))
		return b
	}
	set := func(off int, v ...byte) []byte {
		b := bytes.Clone(good)
		copy(b[off:], v)
		return fix(b)
	}
	cases := []struct {
		b    []byte
		want string
	}{
		{good[:47], "47 bytes, want 48"},
		{append(bytes.Clone(good), 0), "49 bytes"},
		{set(0, 'X'), "magic"},
		{set(4, 2), "version 2"},
		{set(6, 1), "reserved bytes"},
		{set(26, 1), "reserved bytes"},
		{set(38, 1), "reserved bytes"},
		{set(28, 0, 0x20), "8192-byte blocks"},
		{set(32, 0, 2), "512 blocks per chunk"},
		{set(16, 15), "record size 15"},
		{set(16, 1, 0x10), "record size 4097"},
		{set(16, 0, 0, 0, 0x80), "record size 2147483648"},
		{set(20, 4), "value offset 4"},
		{set(20, 0xfe, 0xff, 0xff, 0xff), "value offset -2"},
		{set(24, 2), "not supported yet"},
		{set(24, 9), "unknown ack level 9"},
		{set(36, 1, 0), "fan-out k=1"},
		{set(40, 0, 0, 0, 0), "index body entries n = 0"},
		{set(40, 0x22, 1), "body entries per index block"},
		{func() []byte { b := bytes.Clone(good); b[9] ^= 1; return b }(), "checksum mismatch"},
	}
	for _, c := range cases {
		_, err := decodeStreamMeta(c.b)
		if !errors.Is(err, ErrMalformedMeta) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%x: %v, want %q", c.b, err, c.want)
		}
	}
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// FuzzDecodeStreamMeta: decoding never panics, and a metadata file that decodes encodes back
// to the same bytes (one encoding per schema). Each input is also tried with its checksum
// fixed, so the field checks behind it are fuzzed too.
func FuzzDecodeStreamMeta(f *testing.F) {
	good, _ := encodeStreamMeta(validMeta())
	f.Add(good)
	f.Add(good[:20])
	m := validMeta()
	m.ValueOffset, m.Ack, m.Index = NoValue, AckLocal, Config{BlockSize: BlockBytes, K: 2, N: 3}
	b, _ := encodeStreamMeta(m)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, fixedCRC(b)} {
			m, err := decodeStreamMeta(in)
			if err != nil {
				if !errors.Is(err, ErrMalformedMeta) {
					t.Fatalf("error %v does not wrap ErrMalformedMeta", err)
				}
				continue
			}
			out, err := encodeStreamMeta(m)
			if err != nil || !bytes.Equal(out, in) {
				t.Fatalf("decoded %+v encodes to %x, %v; input %x", m, out, err, in)
			}
		}
	})
}

func fixedCRC(b []byte) []byte {
	if len(b) != StreamMetaBytes {
		return b
	}
	b = bytes.Clone(b)
	putU32(b[44:], crc32c(b[:44]))
	return b
}

// TestChunkNames: d<c> and i<c> in decimal, parsed back only when canonical.
func TestChunkNames(t *testing.T) {
	if DataChunkName(12) != "d12" || IndexChunkName(0) != "i0" || StreamDirName(1<<64-1) != "s18446744073709551615" {
		t.Fatal("names")
	}
	for name, ok := range map[string]bool{"d0": true, "i7": true, "d18446744073709551615": true, "d": false, "d01": false, "d-1": false, "d+1": false, "x1": false, "d18446744073709551616": false, "i1a": false} {
		if _, _, got := parseChunkName(name); got != ok {
			t.Errorf("parseChunkName(%q) = %v", name, got)
		}
	}
}

// TestIndexNodesInChunkFiles: index node j is at ((j−1) mod 256)·16 KiB of index chunk
// (j−1)/256, each a valid block numbered j; 300 nodes span two index chunks.
func TestIndexNodesInChunkFiles(t *testing.T) {
	cfg := StreamConfig{ID: 5, RecordBytes: 4096, ValueOffset: 8, Ack: AckMemory}
	dir := t.TempDir()
	s, m, _ := buildStreamFiles(t, dir, cfg, StreamOptions{Sync: noSync, Index: Config{K: 2, N: 1}}, 300*4+1, 9)
	defer s.Close()
	if s.IndexNodes() != 301 {
		t.Fatalf("%d nodes for 301 blocks of one entry each", s.IndexNodes())
	}
	sealed := uint64(300) // the open block's node is not stored yet
	var b []byte
	for j := uint64(1); j <= sealed; j++ {
		if (j-1)%ChunkBlocks == 0 {
			var err error
			if b, err = os.ReadFile(filepath.Join(dir, StreamDirName(cfg.ID), IndexChunkName((j-1)/ChunkBlocks))); err != nil {
				t.Fatal(err)
			}
		}
		off := (j - 1) % ChunkBlocks * BlockBytes
		nd, err := UnmarshalNode(b[off : off+BlockBytes])
		if err != nil || nd.Number != j || nd.Open || len(nd.Body) != 1 {
			t.Fatalf("node %d: %+v, %v", j, nd, err)
		}
		if first := m.ts[(j-1)*4]; nd.Body[0].TsMin != first {
			t.Fatalf("node %d describes a block starting at %d, want %d", j, nd.Body[0].TsMin, first)
		}
	}
	if got := uint64(fileSize(t, filepath.Join(dir, StreamDirName(cfg.ID), IndexChunkName(1)))); got != (sealed-ChunkBlocks)*BlockBytes {
		t.Fatalf("i1 is %d bytes, want %d", got, (sealed-ChunkBlocks)*BlockBytes)
	}
}

// TestOpenFilesBounded: reads over many chunks keep at most MaxOpenFiles chunk files open
// once they return (the chunks being written stay open; others are opened on demand).
func TestOpenFilesBounded(t *testing.T) {
	cfg := StreamConfig{ID: 6, RecordBytes: 4096, ValueOffset: 8, Ack: AckMemory}
	s, m, _ := buildStreamFiles(t, t.TempDir(), cfg, StreamOptions{Sync: noSync, MaxOpenFiles: 2, Index: Config{K: 2, N: 1}}, 4*ChunkBlocks*4+10, 3)
	defer s.Close()
	waitBackground(t, s) // a filled chunk stays open until its background fsync
	opens := s.cs.files.opens
	for c := uint64(0); c < 5; c++ {
		for _, r := range []uint64{c * s.lay.PerChunk, c*s.lay.PerChunk + 7} {
			if r >= m.n() {
				continue
			}
			b, err := s.ReadRecords(r, 1)
			if err != nil || !bytes.Equal(b, m.data[r*4096:(r+1)*4096]) {
				t.Fatalf("record %d: %v", r, err)
			}
		}
		if _, err := s.ReadRange(m.ts[0], m.ts[0]); err != nil { // walks old index nodes
			t.Fatal(err)
		}
		if o := s.cs.files.openFiles(); o > 2 {
			t.Fatalf("%d chunk files open, limit 2", o)
		}
	}
	if s.cs.files.opens == opens {
		t.Fatal("no chunk file was opened on demand")
	}
}

// TestCreateStream: an interrupted creation (the directory, no metadata) is finished by the
// next CreateStream; a directory with chunks but no metadata is refused; OpenStream of a
// missing stream says so.
func TestCreateStream(t *testing.T) {
	dir := t.TempDir()
	cfg := StreamConfig{ID: 11, RecordBytes: 64, ValueOffset: NoValue}
	sdir := filepath.Join(dir, StreamDirName(cfg.ID))
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sdir, metaTmpName), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := CreateStream(dir, cfg, StreamOptions{Sync: noSync})
	if err != nil {
		t.Fatalf("create over an interrupted creation: %v", err)
	}
	if _, err := os.Stat(filepath.Join(sdir, metaTmpName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("meta.tmp left behind: %v", err)
	}
	rec := make([]byte, 64)
	PutTimestamp(rec, 5)
	if _, err := s.Append(rec); err != nil {
		t.Fatal(err)
	}
	if g, err := s.Aggregate(0, 10); err != nil || g.Count != 1 || g.Sum != (Int128{}) {
		t.Fatalf("aggregate without a value offset: %v, %v", g, err)
	}
	s.Close()
	if err := os.Remove(filepath.Join(sdir, metaName)); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateStream(dir, cfg, StreamOptions{Sync: noSync}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("create over chunks without metadata: %v", err)
	}
	if _, err := CreateStream(dir, StreamConfig{ID: 12, RecordBytes: 64, ValueOffset: NoValue}, StreamOptions{Index: Config{BlockSize: 8192}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("create with 8 KiB index blocks: %v", err)
	}
}

// TestAppendAfterFailure: a failed fsync makes the stream refuse appends (ErrStreamFailed),
// every later fsync fail too, and reads go on.
func TestAppendAfterFailure(t *testing.T) {
	fail := false
	syncf := func(f *os.File) error {
		if fail {
			return errors.New("EIO")
		}
		return nil
	}
	cfg := StreamConfig{ID: 13, RecordBytes: 64, ValueOffset: 8}
	s, err := CreateStream(t.TempDir(), cfg, StreamOptions{Sync: syncf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := make([]byte, 64)
	PutTimestamp(rec, 1)
	if _, err := s.Append(rec); err != nil {
		t.Fatal(err)
	}
	fail = true
	if _, err := s.Append(rec); !errors.Is(err, ErrStreamFailed) || !strings.Contains(err.Error(), "EIO") {
		t.Fatalf("append with a failing fsync: %v", err)
	}
	fail = false
	if _, err := s.Append(rec); !errors.Is(err, ErrStreamFailed) {
		t.Fatalf("append after a failed fsync: %v", err)
	}
	if s.Len() != 1 {
		t.Fatalf("%d records visible; the unacknowledged one must not be", s.Len())
	}
	if b, err := s.ReadRecords(0, 5); err != nil || len(b) != 64 {
		t.Fatalf("read after the failure: %d bytes, %v", len(b), err)
	}
}
