package storage

// Key and value encoding of the storage engine (DESIGN.md section 4 (storage engine): "Pebble,
// MVCC keys (user key, timestamp)").
//
// Pebble sees plain byte strings compared bytewise (its default comparer), so the whole
// MVCC order is carried by the encoding:
//
//	data key:  'k' | escaped(keyspace) | escaped(userKey) | ^version
//	           (escaped() includes its 0x00 0x01 terminator, so this is byte for byte
//	           'k' | esc(keyspace) 0x00 0x01 | esc(userKey) 0x00 0x01 | ^version)
//	meta key:  'm' | name
//	value:     flag byte (0 = value, 1 = tombstone) | value bytes
//
// The partition is not part of a data key: a partition is a key range of its keyspace
// (Span), so splitting or merging partitions changes only the placement map and rewrites no
// data (ElasCass 3.1 builds new replica files at every split; Meridian does not need to).
// Data directories written before that had 'd' | escaped(keyspace) | partition (uint32
// big-endian) | escaped(userKey) | ^version; Open rewrites them once (migrate.go).
//
// escaped(s) writes s with every 0x00 byte replaced by 0x00 0xFF and then the terminator
// 0x00 0x01. This is the classic order-preserving, prefix-free escape:
//
//   - order preserving: a < b bytewise  <=>  escaped(a) < escaped(b). A proper prefix ends in
//     0x00 0x01, which sorts before every continuation (a literal byte >= 0x01 or an escaped
//     zero 0x00 0xFF), so "a" < "a\x00" < "ab" holds for the encodings too.
//   - prefix free: no escaped string is a prefix of another one, because inside an escaped
//     string 0x00 is always followed by 0xFF and only the terminator has 0x00 0x01. So keyspace
//     "a" and keyspace "a\x00b" (or user keys "k" and "k\x00...") never share a key prefix and
//     can never bleed into each other's ranges.
//
// ^version is hlc.Version.Encode (16 bytes, sorting like Version.Compare) with every bit
// inverted, so that for one user key the NEWEST version sorts FIRST: a read seeks to the key
// prefix and takes the first entry, and a scan takes the first entry of every key then skips
// the rest.
//
// The smallest byte string greater than every key that starts with a given prefix is
// prefixEnd(prefix). For a user-key prefix (which ends with the terminator 0x00 0x01) that is
// the same prefix ending in 0x00 0x02, and no escaped string contains 0x00 0x02, so a SeekGE
// there lands exactly on the next user key.

import (
	"bytes"
	"errors"
	"fmt"

	"meridian/internal/hlc"
)

const (
	dataKeyTag       = 'k'
	legacyDataKeyTag = 'd' // data keys with a partition (migrate.go)
	metaKeyTag       = 'm'

	escByte       = 0x00 // first byte of every escape sequence
	escZero       = 0xFF // 0x00 0xFF encodes a literal 0x00
	escTerm       = 0x01 // 0x00 0x01 terminates an escaped string
	legacyPartLen = 4    // partition of a legacy data key, uint32 big-endian
	versionLen    = hlc.EncodedVersionLen

	valueFlagValue     = 0
	valueFlagTombstone = 1
)

// ErrCorrupt is wrapped by every error about a stored key or value that does not decode.
var ErrCorrupt = errors.New("storage: corrupt encoding")

// appendEscaped appends escaped(s) (see the file comment) to dst.
func appendEscaped(dst []byte, s []byte) []byte {
	// One pass; the loop runs len(s) times.
	for _, c := range s {
		if c == escByte {
			dst = append(dst, escByte, escZero)
			continue
		}
		dst = append(dst, c)
	}
	return append(dst, escByte, escTerm)
}

// appendEscapedString is appendEscaped for a string without converting it to []byte.
func appendEscapedString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == escByte {
			dst = append(dst, escByte, escZero)
			continue
		}
		dst = append(dst, s[i])
	}
	return append(dst, escByte, escTerm)
}

// decodeEscaped reads one escaped string from the front of b and returns the unescaped bytes
// (a fresh slice, never aliasing b) and the rest of b after the terminator.
func decodeEscaped(b []byte) (out []byte, rest []byte, err error) {
	out = make([]byte, 0, len(b))
	// Every iteration consumes at least one byte of b, so the loop is bounded by len(b).
	for len(b) > 0 {
		i := bytes.IndexByte(b, escByte)
		if i < 0 {
			return nil, nil, fmt.Errorf("%w: escaped string has no terminator", ErrCorrupt)
		}
		out = append(out, b[:i]...)
		if i+1 >= len(b) {
			return nil, nil, fmt.Errorf("%w: escaped string ends inside an escape", ErrCorrupt)
		}
		switch b[i+1] {
		case escZero:
			out = append(out, escByte)
			b = b[i+2:]
		case escTerm:
			return out, b[i+2:], nil
		default:
			return nil, nil, fmt.Errorf("%w: invalid escape 0x00 0x%02x", ErrCorrupt, b[i+1])
		}
	}
	return nil, nil, fmt.Errorf("%w: escaped string has no terminator", ErrCorrupt)
}

// appendKeyspacePrefix appends 'k' | escaped(keyspace): the common prefix of every data key
// of the keyspace (GC walks this span).
func appendKeyspacePrefix(dst []byte, keyspace string) []byte {
	dst = append(dst, dataKeyTag)
	return appendEscapedString(dst, keyspace)
}

// appendKeyPrefix appends the common prefix of every version of one user key:
// 'k' | escaped(keyspace) | escaped(userKey).
func appendKeyPrefix(dst []byte, keyspace string, userKey []byte) []byte {
	dst = appendKeyspacePrefix(dst, keyspace)
	return appendEscaped(dst, userKey)
}

// spanBounds returns the [lo, hi) interval of data keys holding every version of every user
// key in span. Escaping preserves order and is prefix free, so for user keys u and s,
// esc(u)|version >= esc(s) exactly when u >= s: the bounds are the escaped range ends.
func spanBounds(span Span) (lo, hi []byte) {
	ks := appendKeyspacePrefix(nil, span.Keyspace)
	lo = appendEscaped(bytes.Clone(ks), span.Start)
	if span.End == nil {
		return lo, prefixEnd(ks)
	}
	return lo, appendEscaped(ks, span.End)
}

// appendInvertedVersion appends v's 16-byte encoding with every bit inverted (newest first).
func appendInvertedVersion(dst []byte, v hlc.Version) []byte {
	n := len(dst)
	dst = v.Encode(dst)
	for i := n; i < len(dst); i++ {
		dst[i] = ^dst[i]
	}
	return dst
}

// decodeInvertedVersion decodes the output of appendInvertedVersion.
func decodeInvertedVersion(b []byte) (hlc.Version, error) {
	if len(b) != versionLen {
		return hlc.Version{}, fmt.Errorf("%w: version has %d bytes, want %d", ErrCorrupt, len(b), versionLen)
	}
	var buf [versionLen]byte
	for i := range buf {
		buf[i] = ^b[i]
	}
	v, err := hlc.DecodeVersion(buf[:])
	if err != nil {
		return hlc.Version{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return v, nil
}

// encodeDataKey appends the full data key of one version of one user key to dst.
func encodeDataKey(dst []byte, keyspace string, userKey []byte, v hlc.Version) []byte {
	dst = appendKeyPrefix(dst, keyspace, userKey)
	return appendInvertedVersion(dst, v)
}

// decodeDataKey is the inverse of encodeDataKey. It rejects malformed input (wrong tag, bad
// escape, missing terminator, short version, trailing bytes) with an error wrapping
// ErrCorrupt and never panics. The returned userKey never aliases k.
func decodeDataKey(k []byte) (keyspace string, userKey []byte, v hlc.Version, err error) {
	if len(k) == 0 || k[0] != dataKeyTag {
		return "", nil, hlc.Version{}, fmt.Errorf("%w: not a data key", ErrCorrupt)
	}
	ks, rest, err := decodeEscaped(k[1:])
	if err != nil {
		return "", nil, hlc.Version{}, fmt.Errorf("data key keyspace: %w", err)
	}
	userKey, rest, err = decodeEscaped(rest)
	if err != nil {
		return "", nil, hlc.Version{}, fmt.Errorf("data key user key: %w", err)
	}
	v, err = decodeInvertedVersion(rest)
	if err != nil {
		return "", nil, hlc.Version{}, fmt.Errorf("data key version: %w", err)
	}
	return string(ks), userKey, v, nil
}

// decodeLegacyDataKey decodes a data key of the layout with a partition ('d' | escaped
// (keyspace) | partition | escaped(userKey) | ^version), for the one-time migration.
func decodeLegacyDataKey(k []byte) (keyspace string, userKey []byte, v hlc.Version, err error) {
	if len(k) == 0 || k[0] != legacyDataKeyTag {
		return "", nil, hlc.Version{}, fmt.Errorf("%w: not a legacy data key", ErrCorrupt)
	}
	ks, rest, err := decodeEscaped(k[1:])
	if err != nil {
		return "", nil, hlc.Version{}, fmt.Errorf("legacy data key keyspace: %w", err)
	}
	if len(rest) < legacyPartLen {
		return "", nil, hlc.Version{}, fmt.Errorf("%w: legacy data key has a short partition", ErrCorrupt)
	}
	userKey, rest, err = decodeEscaped(rest[legacyPartLen:])
	if err != nil {
		return "", nil, hlc.Version{}, fmt.Errorf("legacy data key user key: %w", err)
	}
	v, err = decodeInvertedVersion(rest)
	if err != nil {
		return "", nil, hlc.Version{}, fmt.Errorf("legacy data key version: %w", err)
	}
	return string(ks), userKey, v, nil
}

// splitVersion splits a data key into its user-key prefix (everything but the version) and
// its version, without unescaping anything: the cheap path for GC, which only compares
// prefixes and wall times.
func splitVersion(k []byte) (prefix []byte, v hlc.Version, err error) {
	if len(k) <= versionLen || k[0] != dataKeyTag {
		return nil, hlc.Version{}, fmt.Errorf("%w: data key too short or untagged", ErrCorrupt)
	}
	prefix = k[:len(k)-versionLen]
	v, err = decodeInvertedVersion(k[len(k)-versionLen:])
	return prefix, v, err
}

// encodeMetaKey returns 'm' | name.
func encodeMetaKey(name string) []byte {
	k := make([]byte, 0, 1+len(name))
	k = append(k, metaKeyTag)
	return append(k, name...)
}

// prefixEnd returns the smallest byte string greater than every string that starts with
// prefix, or nil if there is none (prefix is empty or all 0xFF) — nil means "no upper bound"
// to Pebble. The result is a fresh slice.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	// Bounded by len(prefix): each iteration drops one trailing byte.
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// appendValue appends the stored form of a record's value: flag byte then the bytes.
// A tombstone stores no bytes even if the caller passed some.
func appendValue(dst []byte, r *Record) []byte {
	if r.Tombstone {
		return append(dst, valueFlagTombstone)
	}
	dst = append(dst, valueFlagValue)
	return append(dst, r.Value...)
}

// decodeValue parses a stored value. The returned value is a fresh slice (never nil for a
// live value, so an empty value and a tombstone stay distinguishable) or nil for a tombstone.
func decodeValue(b []byte) (value []byte, tombstone bool, err error) {
	if len(b) == 0 {
		return nil, false, fmt.Errorf("%w: empty stored value", ErrCorrupt)
	}
	switch b[0] {
	case valueFlagValue:
		return append(make([]byte, 0, len(b)-1), b[1:]...), false, nil
	case valueFlagTombstone:
		if len(b) != 1 {
			return nil, false, fmt.Errorf("%w: tombstone carries %d value bytes", ErrCorrupt, len(b)-1)
		}
		return nil, true, nil
	default:
		return nil, false, fmt.Errorf("%w: unknown value flag %d", ErrCorrupt, b[0])
	}
}

// decodeRecord turns one stored (key, value) pair back into a Record.
func decodeRecord(k, val []byte) (Record, error) {
	ks, uk, v, err := decodeDataKey(k)
	if err != nil {
		return Record{}, err
	}
	value, tomb, err := decodeValue(val)
	if err != nil {
		return Record{}, fmt.Errorf("value of %q/%q@%s: %w", ks, uk, v, err)
	}
	return Record{Keyspace: ks, Key: uk, Version: v, Value: value, Tombstone: tomb}, nil
}
