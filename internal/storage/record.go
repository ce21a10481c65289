// Package storage is Meridian's storage engine: multi-version key-value records on Pebble v2.
//
// Every write is a Record: (keyspace, user key, version) → value or tombstone. A partition
// is a key range of a keyspace (Span); records do not name one, so repartitioning moves no
// data.
// Versions of one key are kept side by side (MVCC) and sorted newest first, so
// last-writer-wins needs no read-before-write: applying an older version never hides a
// newer one (DESIGN.md section 5, quorum: "writes apply only if newer").
package storage

import (
	"bytes"
	"fmt"

	"meridian/internal/hlc"
)

// Record is one version of one key.
type Record struct {
	Keyspace string
	Key      []byte
	Version  hlc.Version
	// Value is nil for a tombstone.
	Value     []byte
	Tombstone bool
}

// Newer reports whether r is a strictly newer version than o (same key assumed).
func (r Record) Newer(o Record) bool { return o.Version.Less(r.Version) }

// Span is a key range of one keyspace, [Start, End); a nil End means to the end of the
// keyspace, an empty Start from its beginning. A partition replica is the span of its
// partition.
type Span struct {
	Keyspace   string
	Start, End []byte
}

// KeyspaceSpan is the span of the whole keyspace.
func KeyspaceSpan(keyspace string) Span { return Span{Keyspace: keyspace} }

// Contains reports whether key lies in the span.
func (s Span) Contains(key []byte) bool {
	return bytes.Compare(key, s.Start) >= 0 && (s.End == nil || bytes.Compare(key, s.End) < 0)
}

// ContainsSpan reports whether o lies within s (same keyspace).
func (s Span) ContainsSpan(o Span) bool {
	if o.Keyspace != s.Keyspace || bytes.Compare(o.Start, s.Start) < 0 {
		return false
	}
	if s.End == nil {
		return true
	}
	return o.End != nil && bytes.Compare(o.End, s.End) <= 0
}

func (s Span) String() string {
	if s.End == nil {
		return fmt.Sprintf("%q[%q, end)", s.Keyspace, s.Start)
	}
	return fmt.Sprintf("%q[%q, %q)", s.Keyspace, s.Start, s.End)
}
