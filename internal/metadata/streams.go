package metadata

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"meridian/internal/errs"
	"meridian/internal/kawkab"
	"meridian/internal/storage"
)

// Streams (Kawkab, issue 20; docs/streams.md): append-only time-series streams live in the
// catalog like keyspaces. A stream belongs to a keyspace (its name is unique there, and
// dropping the keyspace drops its streams), has a fixed record size — given directly or by a
// schema of fixed-width fields starting with the 8-byte timestamp — an acknowledgement level,
// a 64-bit ID (the log index of the command that created it: unique in the cluster and never
// reused) and a primary node, its one writer (thesis 5.3.2), plus a reader node for
// historical reads. The primary is chosen deterministically by the state machine among the
// candidates the proposer saw alive, least-loaded first.

// Stream ops.
const (
	OpCreateStream = "create_stream"
	OpDropStream   = "drop_stream"
)

const streamPrefix = "stream/"

// StreamKey is the record key of stream name of keyspace ks.
func StreamKey(ks, name string) []byte { return []byte(streamPrefix + ks + "/" + name) }

// StreamKeyspacePrefix is the key prefix of keyspace ks's streams.
func StreamKeyspacePrefix(ks string) []byte { return []byte(streamPrefix + ks + "/") }

// StreamPrefix is the key prefix of every stream record.
func StreamPrefix() []byte { return []byte(streamPrefix) }

// IsStreamKey reports whether a metadata record key is a stream's.
func IsStreamKey(key []byte) bool { return strings.HasPrefix(string(key), streamPrefix) }

// Field types of a stream schema.
const (
	FieldInt64   = "int64"
	FieldFloat64 = "float64"
	FieldBytes   = "bytes"
)

// StreamField is one fixed-width field of a stream's record schema, little-endian.
type StreamField struct {
	Name string `json:"name"`
	// Type is int64, float64 or bytes.
	Type string `json:"type"`
	// Bytes is a bytes field's width (1 to 4088); int64 and float64 are 8 bytes.
	Bytes int `json:"bytes,omitempty"`
}

// Width is the field's size in bytes.
func (f StreamField) Width() int {
	if f.Type == FieldBytes {
		return f.Bytes
	}
	return 8
}

// StreamSpec is what a stream is created with.
type StreamSpec struct {
	Keyspace string `json:"keyspace"`
	Name     string `json:"name"`
	// RecordBytes is the fixed record size (16 to 4096); with Fields it is their total width
	// (0 or equal).
	RecordBytes int `json:"record_bytes"`
	// Fields is the optional record schema; the first field is the timestamp, an int64.
	Fields []StreamField `json:"fields,omitempty"`
	// ValueField names the int64 field aggregates summarize (schema streams).
	ValueField string `json:"value_field,omitempty"`
	// ValueOffset is the offset of the aggregated int64 (8 to RecordBytes − 8), or
	// kawkab.NoValue (−1). With a schema it is ValueField's offset.
	ValueOffset int `json:"value_offset"`
	// Ack is local (default), memory or replicated (also fsynced on the reader node).
	Ack string `json:"ack"`
}

// StreamRecord is a stream as the catalog holds it.
type StreamRecord struct {
	Spec StreamSpec `json:"spec"`
	// ID is the stream's 64-bit identifier: the log index of the command that created it.
	ID uint64 `json:"id"`
	// Primary is the node that takes the stream's appends; Reader (0: none) the node
	// designated for historical reads, which also holds the copy of a replicated stream.
	Primary uint32 `json:"primary"`
	Reader  uint32 `json:"reader,omitempty"`
	// Version is the log index of the command that last changed the record.
	Version uint64 `json:"version"`
}

// Config is the stream's engine configuration, on its primary and on its second node alike.
// A replicated stream's engine acknowledges at local (fsynced): the stream service adds the
// second node's copy (kawkab's engine refuses AckReplicated itself).
func (r *StreamRecord) Config() (kawkab.StreamConfig, error) {
	ack, err := kawkab.ParseAckLevel(r.Spec.Ack)
	if err != nil {
		return kawkab.StreamConfig{}, err
	}
	return kawkab.StreamConfig{ID: r.ID, RecordBytes: r.Spec.RecordBytes, ValueOffset: r.Spec.ValueOffset, Ack: engineAck(ack)}, nil
}

// Replicated reports whether the stream's appends are acknowledged by a second node too.
func (r *StreamRecord) Replicated() bool { return r.Spec.Ack == kawkab.AckReplicated.String() }

func engineAck(a kawkab.AckLevel) kawkab.AckLevel {
	if a == kawkab.AckReplicated {
		return kawkab.AckLocal
	}
	return a
}

// DecodeStream decodes a stream record's value.
func DecodeStream(b []byte) (*StreamRecord, error) {
	var r StreamRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("metadata: stream record: %w", err)
	}
	if r.Spec.Keyspace == "" || r.Spec.Name == "" || r.ID == 0 {
		return nil, fmt.Errorf("metadata: stream record without a keyspace, name or ID")
	}
	return &r, nil
}

// MaxStreamNameLen bounds a stream's name.
const MaxStreamNameLen = 128

// MaxStreamFields bounds a schema's fields.
const MaxStreamFields = 256

// ValidateStreamName checks a stream name: 1 to 128 of letters, digits, '_', '-', '.',
// starting with a letter or digit.
func ValidateStreamName(name string) error {
	if name == "" {
		return errs.New(errs.Invalid, "stream name is empty")
	}
	if len(name) > MaxStreamNameLen {
		return errs.New(errs.Invalid, "stream name of %d bytes is too long (at most %d)", len(name), MaxStreamNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '-' && c != '.') {
			return errs.New(errs.Invalid, "stream name %q: use letters, digits, '_', '-' and '.', starting with a letter or digit", name)
		}
	}
	return nil
}

// NormalizeStreamSpec validates a stream spec and fills in what the schema determines
// (RecordBytes, ValueOffset) and the default ack level. Errors are errs.Invalid (an ack
// level this build does not implement wraps kawkab.ErrAckNotSupported).
func NormalizeStreamSpec(s StreamSpec) (StreamSpec, error) {
	if s.Keyspace == "" {
		return s, errs.New(errs.Invalid, "create stream: keyspace name is empty")
	}
	if strings.HasPrefix(s.Keyspace, "_") {
		return s, errs.New(errs.Invalid, "create stream: keyspace %q is reserved for Meridian's own metadata", s.Keyspace)
	}
	if err := ValidateStreamName(s.Name); err != nil {
		return s, err
	}
	if s.Ack == "" {
		s.Ack = kawkab.AckLocal.String()
	}
	ack, err := kawkab.ParseAckLevel(s.Ack)
	if err != nil {
		return s, errs.New(errs.Invalid, "create stream %q: ack level %q: want local, memory or replicated", s.Name, s.Ack)
	}
	if len(s.Fields) > 0 {
		if len(s.Fields) > MaxStreamFields {
			return s, errs.New(errs.Invalid, "create stream %q: %d fields, at most %d", s.Name, len(s.Fields), MaxStreamFields)
		}
		if f := s.Fields[0]; f.Type != FieldInt64 {
			return s, errs.New(errs.Invalid, "create stream %q: the first field (%q) is the record's timestamp and must be int64, not %s", s.Name, f.Name, f.Type)
		}
		seen := map[string]bool{}
		off, valueOff := 0, kawkab.NoValue
		for i, f := range s.Fields {
			if err := ValidateStreamName(f.Name); err != nil {
				return s, errs.New(errs.Invalid, "create stream %q: field %d: %v", s.Name, i, strings.TrimPrefix(err.Error(), "invalid argument: "))
			}
			if seen[f.Name] {
				return s, errs.New(errs.Invalid, "create stream %q: field %q appears twice", s.Name, f.Name)
			}
			seen[f.Name] = true
			switch f.Type {
			case FieldInt64, FieldFloat64:
				if f.Bytes != 0 && f.Bytes != 8 {
					return s, errs.New(errs.Invalid, "create stream %q: field %q: %s is 8 bytes, not %d", s.Name, f.Name, f.Type, f.Bytes)
				}
				s.Fields[i].Bytes = 0
			case FieldBytes:
				if f.Bytes < 1 || f.Bytes > kawkab.MaxRecordBytes-kawkab.TimestampBytes {
					return s, errs.New(errs.Invalid, "create stream %q: field %q: bytes[%d], want 1 to %d", s.Name, f.Name, f.Bytes, kawkab.MaxRecordBytes-kawkab.TimestampBytes)
				}
			default:
				return s, errs.New(errs.Invalid, "create stream %q: field %q: type %q, want int64, float64 or bytes", s.Name, f.Name, f.Type)
			}
			if s.ValueField != "" && f.Name == s.ValueField {
				if f.Type != FieldInt64 || i == 0 {
					return s, errs.New(errs.Invalid, "create stream %q: value field %q must be an int64 field after the timestamp", s.Name, f.Name)
				}
				valueOff = off
			}
			off += f.Width()
			if off > kawkab.MaxRecordBytes {
				return s, errs.New(errs.Invalid, "create stream %q: the fields add up to more than %d bytes", s.Name, kawkab.MaxRecordBytes)
			}
		}
		if s.ValueField != "" && valueOff == kawkab.NoValue {
			return s, errs.New(errs.Invalid, "create stream %q: value field %q is not a field of the schema", s.Name, s.ValueField)
		}
		if s.RecordBytes != 0 && s.RecordBytes != off {
			return s, errs.New(errs.Invalid, "create stream %q: record_bytes %d but the fields add up to %d", s.Name, s.RecordBytes, off)
		}
		if s.ValueOffset != 0 && s.ValueOffset != kawkab.NoValue && s.ValueOffset != valueOff {
			return s, errs.New(errs.Invalid, "create stream %q: give the aggregated field by name (value_field), not by offset, in a stream with a schema", s.Name)
		}
		s.RecordBytes, s.ValueOffset = off, valueOff
	} else {
		if s.ValueField != "" {
			return s, errs.New(errs.Invalid, "create stream %q: value field %q needs a schema (fields)", s.Name, s.ValueField)
		}
		if s.ValueOffset == 0 {
			s.ValueOffset = kawkab.NoValue
		}
	}
	cfg := kawkab.StreamConfig{ID: 1, RecordBytes: s.RecordBytes, ValueOffset: s.ValueOffset, Ack: engineAck(ack)}
	if err := cfg.Validate(); err != nil {
		return s, errs.New(errs.Invalid, "create stream %q: %s", s.Name, strings.TrimPrefix(err.Error(), "kawkab: stream 1: "))
	}
	return s, nil
}

// Streams returns the catalog's streams by key (not to be modified).
func (c *Catalog) Streams() map[string]*StreamRecord { return c.streams }

func streamMapKey(ks, name string) string { return ks + "/" + name }

func (c *Catalog) createStream(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	if cmd.Stream == nil {
		return nil, Outcome{}, errs.New(errs.Invalid, "create stream: no spec")
	}
	spec, err := NormalizeStreamSpec(cloneStreamSpec(*cmd.Stream))
	if err != nil {
		return nil, Outcome{}, err
	}
	ks, ok := c.keyspaces[spec.Keyspace]
	if !ok {
		return nil, Outcome{}, errs.New(errs.NotFound, "create stream %q: no keyspace %q", spec.Name, spec.Keyspace)
	}
	mk := streamMapKey(spec.Keyspace, spec.Name)
	if old, ok := c.streams[mk]; ok {
		return nil, Outcome{}, errs.New(errs.AlreadyExists, "stream %q already exists in keyspace %q (id %d, created at metadata version %d)", spec.Name, spec.Keyspace, old.ID, old.ID)
	}
	// Candidates: the keyspace's replicas that are active members, narrowed to those the
	// proposer saw alive (if it named any).
	var placed []uint32
	for _, p := range ks.Partitions {
		for _, id := range p.Replicas {
			if !slices.Contains(placed, id) {
				placed = append(placed, id)
			}
		}
	}
	slices.Sort(placed)
	var cands []uint32
	for _, id := range placed {
		if n := c.nodeRecord(id); n == nil || n.State != NodeActive {
			continue
		}
		if len(cmd.Candidates) > 0 && !slices.Contains(cmd.Candidates, id) {
			continue
		}
		cands = append(cands, id)
	}
	if len(cands) == 0 {
		return nil, Outcome{}, errs.New(errs.Unavailable, "create stream %q: no live active node holds keyspace %q (its nodes: %v)", spec.Name, spec.Keyspace, placed)
	}
	primaries, readers := map[uint32]int{}, map[uint32]int{}
	for _, s := range c.streams {
		primaries[s.Primary]++
		if s.Reader != 0 {
			readers[s.Reader]++
		}
	}
	least := func(ids []uint32, load func(uint32) int) uint32 {
		best := ids[0]
		for _, id := range ids[1:] {
			if load(id) < load(best) {
				best = id
			}
		}
		return best
	}
	primary := least(cands, func(id uint32) int { return primaries[id] })
	var reader uint32
	if others := slices.DeleteFunc(slices.Clone(cands), func(id uint32) bool { return id == primary }); len(others) > 0 {
		reader = least(others, func(id uint32) int { return readers[id] + primaries[id] })
	}
	if spec.Ack == kawkab.AckReplicated.String() && reader == 0 {
		return nil, Outcome{}, errs.New(errs.Unavailable, "create stream %q: ack level replicated needs a second live node of keyspace %q, and only %v is (its nodes: %v)", spec.Name, spec.Keyspace, cands, placed)
	}
	rec := &StreamRecord{Spec: spec, ID: index, Primary: primary, Reader: reader, Version: index}
	c.streams[mk] = rec
	return []storage.Record{streamRecord(rec)}, Outcome{Version: index, Stream: rec}, nil
}

func (c *Catalog) dropStream(index uint64, cmd Command) ([]storage.Record, Outcome, error) {
	mk := streamMapKey(cmd.Name, cmd.StreamName)
	old, ok := c.streams[mk]
	if !ok {
		return nil, Outcome{}, errs.New(errs.NotFound, "drop stream: no stream %q in keyspace %q", cmd.StreamName, cmd.Name)
	}
	if cmd.ExpectVersion != 0 && cmd.ExpectVersion != old.Version {
		return nil, Outcome{}, errs.New(errs.Conflict, "drop stream %q: it changed concurrently (it is at version %d; this drop was based on version %d)", cmd.StreamName, old.Version, cmd.ExpectVersion)
	}
	delete(c.streams, mk)
	return []storage.Record{{Keyspace: Keyspace, Key: StreamKey(old.Spec.Keyspace, old.Spec.Name), Tombstone: true}}, Outcome{Version: old.Version, Stream: old}, nil
}

// dropKeyspaceStreams drops the streams of a dropped keyspace.
func (c *Catalog) dropKeyspaceStreams(ks string) []storage.Record {
	var out []storage.Record
	for _, mk := range slices.Sorted(maps.Keys(c.streams)) {
		s := c.streams[mk]
		if s.Spec.Keyspace != ks {
			continue
		}
		delete(c.streams, mk)
		out = append(out, storage.Record{Keyspace: Keyspace, Key: StreamKey(s.Spec.Keyspace, s.Spec.Name), Tombstone: true})
	}
	return out
}

func streamRecord(rec *StreamRecord) storage.Record {
	b, _ := json.Marshal(rec)
	return storage.Record{Keyspace: Keyspace, Key: StreamKey(rec.Spec.Keyspace, rec.Spec.Name), Value: b}
}

func cloneStreamSpec(s StreamSpec) StreamSpec {
	s.Fields = slices.Clone(s.Fields)
	return s
}
