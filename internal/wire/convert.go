// Package wire converts between Meridian's in-memory types and their protobuf encodings, and
// validates what arrives from the network before a protocol core sees it.
package wire

import (
	"errors"
	"fmt"

	"meridian/internal/hlc"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// VersionToPB encodes v.
func VersionToPB(v hlc.Version) *peerpb.Version {
	return &peerpb.Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeId: v.NodeID}
}

// VersionFromPB decodes v; nil is the zero version.
func VersionFromPB(v *peerpb.Version) hlc.Version {
	if v == nil {
		return hlc.Version{}
	}
	return hlc.Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeID: v.NodeId}
}

// RecordToPB encodes r. The returned message aliases r's byte slices.
func RecordToPB(r storage.Record) *peerpb.Record {
	return &peerpb.Record{
		Keyspace:  r.Keyspace,
		Key:       r.Key,
		Version:   VersionToPB(r.Version),
		Value:     r.Value,
		Tombstone: r.Tombstone,
	}
}

// ErrBadRecord is returned for records that no correct peer sends.
var ErrBadRecord = errors.New("wire: malformed record")

// RecordFromPB decodes and validates r.
func RecordFromPB(r *peerpb.Record) (storage.Record, error) {
	if r == nil {
		return storage.Record{}, fmt.Errorf("%w: missing", ErrBadRecord)
	}
	if r.Keyspace == "" {
		return storage.Record{}, fmt.Errorf("%w: empty keyspace", ErrBadRecord)
	}
	if len(r.Key) == 0 {
		return storage.Record{}, fmt.Errorf("%w: empty key", ErrBadRecord)
	}
	v := VersionFromPB(r.Version)
	if v.IsZero() {
		return storage.Record{}, fmt.Errorf("%w: zero version", ErrBadRecord)
	}
	if r.Tombstone && len(r.Value) > 0 {
		return storage.Record{}, fmt.Errorf("%w: tombstone with a value", ErrBadRecord)
	}
	return storage.Record{
		Keyspace:  r.Keyspace,
		Key:       r.Key,
		Version:   v,
		Value:     r.Value,
		Tombstone: r.Tombstone,
	}, nil
}
