// Package hlc provides the physical clock (with an injectable offset for tests and the lab),
// the hybrid logical clock that stamps every write, and Version, the total order on writes.
//
// Versions are (wall time, logical counter, node id): last-writer-wins compares them
// lexicographically, so two writes stamped in the same instant by different coordinators
// still have a deterministic winner (MeteorShower paper I-A: "the write takes effect when the
// stored value is older than t"; ties broken by node id as Cassandra does with its
// client-supplied timestamps).
package hlc

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Version totally orders writes to one key. The zero Version is older than every real write.
type Version struct {
	// WallNanos is the physical component in nanoseconds since the Unix epoch.
	WallNanos int64
	// Logical breaks ties between events with the same WallNanos on one clock.
	Logical uint32
	// NodeID is the coordinator that stamped the write; it breaks ties across clocks.
	NodeID uint32
}

// EncodedVersionLen is the size of Version.Encode's output.
const EncodedVersionLen = 16

// Compare returns -1, 0 or +1 as v is older than, equal to, or newer than o.
func (v Version) Compare(o Version) int {
	switch {
	case v.WallNanos != o.WallNanos:
		if v.WallNanos < o.WallNanos {
			return -1
		}
		return 1
	case v.Logical != o.Logical:
		if v.Logical < o.Logical {
			return -1
		}
		return 1
	case v.NodeID != o.NodeID:
		if v.NodeID < o.NodeID {
			return -1
		}
		return 1
	}
	return 0
}

// Less reports whether v is strictly older than o.
func (v Version) Less(o Version) bool { return v.Compare(o) < 0 }

// IsZero reports whether v is the zero (absent) version.
func (v Version) IsZero() bool { return v == Version{} }

// Time returns the physical component as a time.Time.
func (v Version) Time() time.Time { return time.Unix(0, v.WallNanos) }

// String renders the version as wall.logical@node, e.g. "1700000000000000000.3@2".
func (v Version) String() string {
	return fmt.Sprintf("%d.%d@%d", v.WallNanos, v.Logical, v.NodeID)
}

// Encode appends the 16-byte big-endian encoding of v to dst. The encoding sorts like Compare.
func (v Version) Encode(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(v.WallNanos)^(1<<63))
	dst = binary.BigEndian.AppendUint32(dst, v.Logical)
	dst = binary.BigEndian.AppendUint32(dst, v.NodeID)
	return dst
}

// DecodeVersion decodes the output of Encode.
func DecodeVersion(b []byte) (Version, error) {
	if len(b) != EncodedVersionLen {
		return Version{}, fmt.Errorf("hlc: version encoding has %d bytes, want %d", len(b), EncodedVersionLen)
	}
	return Version{
		WallNanos: int64(binary.BigEndian.Uint64(b[0:8]) ^ (1 << 63)),
		Logical:   binary.BigEndian.Uint32(b[8:12]),
		NodeID:    binary.BigEndian.Uint32(b[12:16]),
	}, nil
}
