package kawkab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// The upload manifest (thesis 5.3.2, "Global Store Service"; docs/kawkab.md, "Uploads and the
// manifest"): the object <prefix>/s<id>/manifest, with a local copy in the stream's directory,
// says how much of the stream is in the object store. Chunks are uploaded in order per stream,
// so what is uploaded is a prefix: the first Chunks data chunks (Records records, whole chunks)
// and the first Nodes index nodes, the last of which describes exactly the uploaded blocks (a
// node that goes on past them is uploaded cut to them, sealed, and put again as it grows).
//
// Little-endian, ManifestBytes long:
//
//	offset  size  field
//	0       4     magic "KWKM"
//	4       2     version (1)
//	6       2     reserved, 0
//	8       8     stream ID
//	16      4     record size R
//	20      4     index body entries n
//	24      8     data chunks uploaded C
//	32      8     records uploaded: C × 256 × ⌊16384/R⌋
//	40      8     index nodes uploaded: ⌈256·C / n⌉
//	48      4     CRC-32C (Castagnoli) of bytes 0 … 47
//	52      4     reserved, 0
//
// The redundant fields (records, nodes) are checked against C, so a manifest says one thing.
const (
	ManifestBytes   = 56
	manifestMagic   = "KWKM"
	manifestVersion = 1
	manifestName    = "manifest"
	manifestTmpName = "manifest.tmp"
)

// ErrMalformedManifest is wrapped by every error for a manifest that does not decode.
var ErrMalformedManifest = errors.New("malformed upload manifest")

// Manifest is what a stream's upload manifest says.
type Manifest struct {
	StreamID    uint64
	RecordBytes int
	// IndexN is the index's body entries per node (n), from the stream's metadata.
	IndexN int
	// Chunks is the number of data chunks uploaded: d0 … d(Chunks−1).
	Chunks uint64
	// Records is the number of records uploaded: Chunks whole chunks.
	Records uint64
	// Nodes is the number of index nodes uploaded: those describing the uploaded blocks.
	Nodes uint64
}

// manifestFor is the manifest of the first chunks chunks of a stream.
func manifestFor(id uint64, lay Layout, n int, chunks uint64) Manifest {
	return Manifest{
		StreamID:    id,
		RecordBytes: lay.R,
		IndexN:      n,
		Chunks:      chunks,
		Records:     chunks * lay.PerChunk,
		Nodes:       nodesFor(chunks*ChunkBlocks, n),
	}
}

// nodesFor is the number of index nodes describing b data blocks: ⌈b/n⌉ (every node, leaf or
// internal, has n body entries; docs/kawkab.md, "The entry formula").
func nodesFor(b uint64, n int) uint64 { return (b + uint64(n) - 1) / uint64(n) }

func badManifest(format string, args ...any) error {
	return fmt.Errorf("kawkab: upload manifest: %s: %w", fmt.Sprintf(format, args...), ErrMalformedManifest)
}

// validate checks the fields against each other.
func (m Manifest) validate() error {
	if m.RecordBytes < MinRecordBytes || m.RecordBytes > MaxRecordBytes {
		return badManifest("record size %d bytes, want %d to %d", m.RecordBytes, MinRecordBytes, MaxRecordBytes)
	}
	if m.IndexN < 1 || m.IndexN > BlockBytes {
		return badManifest("index body entries n = %d, want 1 to %d", m.IndexN, BlockBytes)
	}
	lay, _ := NewLayout(m.RecordBytes)
	hi, recs := bits.Mul64(m.Chunks, lay.PerChunk)
	if hi != 0 || m.Chunks > (1<<64-1)/ChunkBlocks-uint64(m.IndexN) {
		return badManifest("%d chunks overflow", m.Chunks)
	}
	if recs != m.Records {
		return badManifest("%d chunks of %d-byte records hold %d records, not %d", m.Chunks, m.RecordBytes, recs, m.Records)
	}
	if want := nodesFor(m.Chunks*ChunkBlocks, m.IndexN); want != m.Nodes {
		return badManifest("%d chunks need %d index nodes of %d entries, not %d", m.Chunks, want, m.IndexN, m.Nodes)
	}
	return nil
}

// encodeManifest encodes a valid manifest.
func encodeManifest(m Manifest) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	b := make([]byte, ManifestBytes)
	copy(b, manifestMagic)
	binary.LittleEndian.PutUint16(b[4:], manifestVersion)
	binary.LittleEndian.PutUint64(b[8:], m.StreamID)
	binary.LittleEndian.PutUint32(b[16:], uint32(m.RecordBytes))
	binary.LittleEndian.PutUint32(b[20:], uint32(m.IndexN))
	binary.LittleEndian.PutUint64(b[24:], m.Chunks)
	binary.LittleEndian.PutUint64(b[32:], m.Records)
	binary.LittleEndian.PutUint64(b[40:], m.Nodes)
	binary.LittleEndian.PutUint32(b[48:], crc32c(b[:48]))
	return b, nil
}

// decodeManifest decodes and validates a manifest: exact size, magic, version, reserved bytes
// zero, checksum, fields that agree.
func decodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) != ManifestBytes {
		return m, badManifest("%d bytes, want %d", len(b), ManifestBytes)
	}
	if string(b[:4]) != manifestMagic {
		return m, badManifest("magic %q, want %q", b[:4], manifestMagic)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != manifestVersion {
		return m, badManifest("version %d, this build reads version %d", v, manifestVersion)
	}
	if stored, computed := binary.LittleEndian.Uint32(b[48:]), crc32c(b[:48]); stored != computed {
		return m, badManifest("checksum mismatch: stored %#08x, computed %#08x", stored, computed)
	}
	if !allZero(b[6:8]) || !allZero(b[52:56]) {
		return m, badManifest("reserved bytes are not zero")
	}
	m.StreamID = binary.LittleEndian.Uint64(b[8:])
	m.RecordBytes = int(binary.LittleEndian.Uint32(b[16:]))
	m.IndexN = int(binary.LittleEndian.Uint32(b[20:]))
	m.Chunks = binary.LittleEndian.Uint64(b[24:])
	m.Records = binary.LittleEndian.Uint64(b[32:])
	m.Nodes = binary.LittleEndian.Uint64(b[40:])
	if err := m.validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Object keys of a stream in the object store (docs/plans/kawkab.md, "Names"):
// <prefix>/s<id>/d<c>, <prefix>/s<id>/i<c>, <prefix>/s<id>/meta, <prefix>/s<id>/manifest.
func streamKey(prefix string, id uint64, name string) string {
	if prefix == "" {
		return StreamDirName(id) + "/" + name
	}
	return prefix + "/" + StreamDirName(id) + "/" + name
}
