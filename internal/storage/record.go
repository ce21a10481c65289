// Package storage is Meridian's storage engine: multi-version key-value records on Pebble v2.
//
// Every write is a Record: (keyspace, partition, user key, version) → value or tombstone.
// Versions of one key are kept side by side (MVCC) and sorted newest first, so
// last-writer-wins needs no read-before-write: applying an older version never hides a
// newer one (DESIGN.md section 5, quorum: "writes apply only if newer").
package storage

import (
	"meridian/internal/hlc"
)

// Record is one version of one key.
type Record struct {
	Keyspace  string
	Partition uint32
	Key       []byte
	Version   hlc.Version
	// Value is nil for a tombstone.
	Value     []byte
	Tombstone bool
}

// Newer reports whether r is a strictly newer version than o (same key assumed).
func (r Record) Newer(o Record) bool { return o.Version.Less(r.Version) }
