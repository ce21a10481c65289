package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"meridian/internal/hlc"
)

// orderCases are user keys (and keyspaces) whose byte order the encoding must preserve:
// prefixes, embedded and trailing 0x00 and 0xFF bytes, the empty string.
var orderCases = [][]byte{
	nil,
	[]byte("\x00"),
	[]byte("\x00\x00"),
	[]byte("\x00\x01"),
	[]byte("\x00\xff"),
	[]byte("\x01"),
	[]byte("a"),
	[]byte("a\x00"),
	[]byte("a\x00\x00"),
	[]byte("a\x00\x01"),
	[]byte("a\x00b"),
	[]byte("a\x00\xff"),
	[]byte("a\x01"),
	[]byte("a\xff"),
	[]byte("a\xff\x00"),
	[]byte("ab"),
	[]byte("b"),
	[]byte("\xff"),
	[]byte("\xff\x00"),
	[]byte("\xff\xff"),
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

func TestEscapedPreservesOrderAndIsPrefixFree(t *testing.T) {
	for _, a := range orderCases {
		for _, b := range orderCases {
			ea, eb := appendEscaped(nil, a), appendEscaped(nil, b)
			if got, want := sign(bytes.Compare(ea, eb)), sign(bytes.Compare(a, b)); got != want {
				t.Errorf("compare(esc(%q), esc(%q)) = %d, want %d (esc: %x vs %x)", a, b, got, want, ea, eb)
			}
			if !bytes.Equal(a, b) && bytes.HasPrefix(eb, ea) {
				t.Errorf("esc(%q)=%x is a prefix of esc(%q)=%x", a, ea, b, eb)
			}
			if s := appendEscapedString(nil, string(a)); !bytes.Equal(s, ea) {
				t.Errorf("appendEscapedString(%q) = %x, appendEscaped = %x", a, s, ea)
			}
		}
	}
}

func TestDataKeyOrder(t *testing.T) {
	v := func(w int64, l, n uint32) hlc.Version { return hlc.Version{WallNanos: w, Logical: l, NodeID: n} }
	versions := []hlc.Version{
		v(math.MinInt64, 0, 0), v(-1, 0, 0), {}, v(0, 0, 1), v(0, 1, 0), v(5, 0, 0),
		v(5, 0, 7), v(5, 3, 0), v(1700000000000000000, 2, 9), v(math.MaxInt64, math.MaxUint32, math.MaxUint32),
	}
	type pos struct {
		key []byte
		v   hlc.Version
	}
	var all []pos
	for _, k := range orderCases {
		for _, ver := range versions {
			all = append(all, pos{k, ver})
		}
	}
	for _, a := range all {
		for _, b := range all {
			ka := encodeDataKey(nil, "ks", a.key, a.v)
			kb := encodeDataKey(nil, "ks", b.key, b.v)
			// Keys order by user key; for one user key the newest version comes first.
			want := sign(bytes.Compare(a.key, b.key))
			if want == 0 {
				want = -a.v.Compare(b.v)
			}
			if got := sign(bytes.Compare(ka, kb)); got != want {
				t.Fatalf("order of (%q,%s) vs (%q,%s) = %d, want %d", a.key, a.v, b.key, b.v, got, want)
			}
			// Every version of a key lies inside [keyPrefix, prefixEnd(keyPrefix)), and no
			// other key's version does.
			p := appendKeyPrefix(nil, "ks", a.key)
			in := bytes.Compare(kb, p) >= 0 && bytes.Compare(kb, prefixEnd(p)) < 0
			if in != bytes.Equal(a.key, b.key) {
				t.Fatalf("key %q@%s inside span of %q = %t", b.key, b.v, a.key, in)
			}
		}
	}
}

func TestDataKeyRoundTrip(t *testing.T) {
	versions := []hlc.Version{
		{}, {WallNanos: -42, Logical: 3, NodeID: 7},
		{WallNanos: math.MinInt64},
		{WallNanos: math.MaxInt64, Logical: math.MaxUint32, NodeID: math.MaxUint32},
	}
	for _, ks := range orderCases {
		for _, uk := range orderCases {
			for _, v := range versions {
				k := encodeDataKey(nil, string(ks), uk, v)
				gks, guk, gv, err := decodeDataKey(k)
				if err != nil {
					t.Fatalf("decode(%x): %v", k, err)
				}
				if gks != string(ks) || !bytes.Equal(guk, uk) || gv != v {
					t.Fatalf("round trip of (%q,%q,%s) gave (%q,%q,%s)", ks, uk, v, gks, guk, gv)
				}
				if _, _, _, err := decodeLegacyDataKey(k); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decodeLegacyDataKey accepted a current key %x: %v", k, err)
				}
				for i := range k {
					k[i] = 0xAA // the decoded user key must not alias the input
				}
				if !bytes.Equal(guk, uk) {
					t.Fatalf("decoded user key %q changed with its input", guk)
				}
			}
		}
	}
}

func TestLegacyDataKeyRoundTrip(t *testing.T) {
	for _, ks := range orderCases {
		for _, uk := range orderCases {
			// Partitions whose bytes look like escapes (0x00 0x01, 0x00 0xFF) must not
			// confuse the decoder: the partition has a fixed width.
			for _, part := range []uint32{0, 1, 0x00010000, 0x0001ff00, 0x00ff0001, math.MaxUint32} {
				v := hlc.Version{WallNanos: -42, Logical: 3, NodeID: part}
				k := encodeLegacyDataKey(nil, string(ks), part, uk, v)
				gks, guk, gv, err := decodeLegacyDataKey(k)
				if err != nil {
					t.Fatalf("decodeLegacy(%x): %v", k, err)
				}
				if gks != string(ks) || !bytes.Equal(guk, uk) || gv != v {
					t.Fatalf("legacy round trip of (%q,%d,%q,%s) gave (%q,%q,%s)", ks, part, uk, v, gks, guk, gv)
				}
				if _, _, _, err := decodeDataKey(k); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decodeDataKey accepted a legacy key %x: %v", k, err)
				}
				for i := range k {
					k[i] = 0xAA
				}
				if !bytes.Equal(guk, uk) {
					t.Fatalf("decoded legacy user key %q changed with its input", guk)
				}
			}
		}
	}
	good := encodeLegacyDataKey(nil, "ks", 1, []byte("k"), hlc.Version{WallNanos: 9})
	for name, k := range map[string][]byte{
		"empty":                 nil,
		"current tag":           append([]byte{dataKeyTag}, good[1:]...),
		"unterminated keyspace": []byte("dks"),
		"short partition":       []byte("dks\x00\x01\x00\x00"),
		"unterminated user key": []byte("dks\x00\x01\x00\x00\x00\x01k"),
		"missing version":       good[:len(good)-versionLen],
		"short version":         good[:len(good)-1],
		"trailing byte":         append(bytes.Clone(good), 0),
	} {
		if _, _, _, err := decodeLegacyDataKey(k); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decodeLegacy(%x) error = %v, want ErrCorrupt", name, k, err)
		}
	}
}

func TestDecodeDataKeyRejectsMalformed(t *testing.T) {
	good := encodeDataKey(nil, "ks", []byte("k"), hlc.Version{WallNanos: 9})
	cases := map[string][]byte{
		"empty":                 nil,
		"meta tag":              append([]byte{metaKeyTag}, good[1:]...),
		"legacy tag":            append([]byte{legacyDataKeyTag}, good[1:]...),
		"legacy key":            encodeLegacyDataKey(nil, "ks", 1, []byte("k"), hlc.Version{WallNanos: 9}),
		"tag only":              {dataKeyTag},
		"unterminated keyspace": []byte("kks"),
		"escape at end":         []byte("kks\x00"),
		"bad escape":            []byte("kks\x00\x02"),
		"unterminated user key": []byte("kks\x00\x01k"),
		"bad user key escape":   []byte("kks\x00\x01k\x00\x02"),
		"missing version":       good[:len(good)-versionLen],
		"short version":         good[:len(good)-1],
		"trailing byte":         append(bytes.Clone(good), 0),
	}
	for name, k := range cases {
		if _, _, _, err := decodeDataKey(k); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decode(%x) error = %v, want ErrCorrupt", name, k, err)
		}
	}
	for _, k := range [][]byte{[]byte("k"), encodeLegacyDataKey(nil, "ks", 1, []byte("k"), hlc.Version{})} {
		if _, _, err := splitVersion(k); !errors.Is(err, ErrCorrupt) {
			t.Errorf("splitVersion(%x) error = %v, want ErrCorrupt", k, err)
		}
	}
}

// TestSpanBounds: a data key lies in spanBounds(span) exactly when its keyspace is the
// span's and span.Contains(its user key), whatever its version: the bounds that Scan,
// ExportSpan, DeleteSpan and IngestSpan's emptiness check give Pebble select exactly the
// span's records.
func TestSpanBounds(t *testing.T) {
	in := func(k, lo, hi []byte) bool {
		return bytes.Compare(lo, k) <= 0 && (hi == nil || bytes.Compare(k, hi) < 0)
	}
	versions := []hlc.Version{
		{WallNanos: math.MinInt64}, // inverts to all 0xFF: the last version of a key
		{},
		{WallNanos: 7, Logical: 1, NodeID: 2},
		{WallNanos: math.MaxInt64, Logical: math.MaxUint32, NodeID: math.MaxUint32}, // all 0x00: the first
	}
	keyspaces := []string{"", "\x00", "k", "ks", "ks\x00", "ks\x00\x00", "ks\x01", "ksa", "ks\xff", "kt", "\xff"}
	checked := 0
	check := func(span Span, ks string, key []byte) {
		t.Helper()
		lo, hi := spanBounds(span)
		want := ks == span.Keyspace && span.Contains(key)
		for _, v := range versions {
			k := encodeDataKey(nil, ks, key, v)
			if got := in(k, lo, hi); got != want {
				t.Fatalf("data key of %q/%q@%s in bounds of %s = %t, want %t (key %x, bounds [%x, %x))",
					ks, key, v, span, got, want, k, lo, hi)
			}
		}
		checked++
	}

	// Exhaustive over orderCases (prefixes, 0x00, 0xFF, the empty key) as keys and bounds.
	ends := append([][]byte{nil, {}}, orderCases[1:]...) // nil End: unbounded; empty End: an empty span
	for _, start := range orderCases {
		for _, end := range ends {
			for _, ks := range []string{"ks", "ks\x00", ""} {
				span := Span{Keyspace: ks, Start: start, End: end}
				for _, key := range orderCases {
					check(span, "ks", key)
					check(span, "ks\x00", key)
					check(span, "", key)
				}
			}
		}
	}

	// Random keys and spans over an alphabet that makes escapes, prefixes and terminators
	// likely, in random keyspaces.
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0x00, 0x01, 0x02, '/', 'a', 0xfe, 0xff}
	randBytes := func() []byte {
		b := make([]byte, rng.IntN(5))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return b
	}
	for i := 0; i < 20000; i++ {
		span := Span{Keyspace: keyspaces[rng.IntN(len(keyspaces))], Start: randBytes(), End: randBytes()}
		switch rng.IntN(4) {
		case 0:
			span.End = nil
		case 1:
			// End extends Start: a key may share a prefix with both bounds.
			span.End = append(bytes.Clone(span.Start), randBytes()...)
		}
		key := randBytes()
		switch rng.IntN(4) {
		case 0: // Start itself, or a key extending it
			key = append(bytes.Clone(span.Start), randBytes()...)
		case 1: // End itself, a prefix of it, or a key extending one
			if span.End != nil {
				key = append(bytes.Clone(span.End[:rng.IntN(len(span.End)+1)]), randBytes()...)
			}
		}
		ks := span.Keyspace
		if rng.IntN(3) == 0 {
			ks = keyspaces[rng.IntN(len(keyspaces))]
		}
		check(span, ks, key)
	}
	if checked < 20000 {
		t.Fatalf("only %d cases checked", checked)
	}

	// The whole keyspace's bounds are its keyspace prefix's.
	for _, ks := range keyspaces {
		lo, hi := spanBounds(KeyspaceSpan(ks))
		p := appendKeyspacePrefix(nil, ks)
		if !bytes.Equal(hi, prefixEnd(p)) || !bytes.HasPrefix(lo, p) {
			t.Fatalf("spanBounds(%s) = [%x, %x), keyspace prefix %x", KeyspaceSpan(ks), lo, hi, p)
		}
	}
}

func TestSpanContains(t *testing.T) {
	s := Span{Keyspace: "ks", Start: []byte("p6/"), End: []byte("p7/")}
	for key, want := range map[string]bool{
		"p6/": true, "p6/\x00": true, "p6/\xff": true, "p7": true, "p7\x00": true,
		"p7/": false, "p7/\x00": false, "p6": false, "p6.\xff": false, "": false, "\xff": false,
	} {
		if got := s.Contains([]byte(key)); got != want {
			t.Errorf("%s.Contains(%q) = %t, want %t", s, key, got, want)
		}
	}
	all := KeyspaceSpan("ks")
	for _, key := range []string{"", "\x00", "\xff\xff"} {
		if !all.Contains([]byte(key)) {
			t.Errorf("%s does not contain %q", all, key)
		}
	}
	for _, c := range []struct {
		outer, inner Span
		want         bool
	}{
		{all, s, true},
		{s, s, true},
		{s, all, false},
		{s, Span{Keyspace: "ks", Start: []byte("p6/x"), End: []byte("p7/")}, true},
		{s, Span{Keyspace: "ks", Start: []byte("p6/x")}, false},
		{s, Span{Keyspace: "ks", Start: []byte("p6"), End: []byte("p7/")}, false},
		{s, Span{Keyspace: "ks", Start: []byte("p6/"), End: []byte("p7/\x00")}, false},
		{s, Span{Keyspace: "ks\x00", Start: []byte("p6/"), End: []byte("p7/")}, false},
		{all, Span{Keyspace: "ks", Start: []byte("z")}, true},
	} {
		if got := c.outer.ContainsSpan(c.inner); got != c.want {
			t.Errorf("%s.ContainsSpan(%s) = %t, want %t", c.outer, c.inner, got, c.want)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	cases := []struct{ in, want []byte }{
		{nil, nil},
		{[]byte{0xff, 0xff}, nil},
		{[]byte("a"), []byte("b")},
		{[]byte("a\x00\x01"), []byte("a\x00\x02")},
		{[]byte{1, 0xff, 0xff}, []byte{2}},
	}
	for _, c := range cases {
		in := bytes.Clone(c.in)
		if got := prefixEnd(in); !bytes.Equal(got, c.want) {
			t.Errorf("prefixEnd(%x) = %x, want %x", c.in, got, c.want)
		}
		if !bytes.Equal(in, c.in) {
			t.Errorf("prefixEnd modified its input %x to %x", c.in, in)
		}
	}
}

func TestValueEncoding(t *testing.T) {
	for _, r := range []Record{
		{Value: []byte("v")},
		{Value: nil},
		{Value: []byte{0, 1, 0xff}},
		{Tombstone: true},
		{Tombstone: true, Value: []byte("ignored")},
	} {
		b := appendValue(nil, &r)
		val, tomb, err := decodeValue(b)
		if err != nil {
			t.Fatalf("decodeValue(%x): %v", b, err)
		}
		if tomb != r.Tombstone {
			t.Fatalf("tombstone = %t, want %t", tomb, r.Tombstone)
		}
		if r.Tombstone && val != nil {
			t.Fatalf("tombstone decoded with value %q", val)
		}
		if !r.Tombstone && (val == nil || !bytes.Equal(val, r.Value)) {
			t.Fatalf("value = %q (nil=%t), want %q non-nil", val, val == nil, r.Value)
		}
	}
	for _, bad := range [][]byte{nil, {2}, {valueFlagTombstone, 'x'}} {
		if _, _, err := decodeValue(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeValue(%x) error = %v, want ErrCorrupt", bad, err)
		}
	}
}

// FuzzDecodeDataKey checks that decodeDataKey (and decodeLegacyDataKey, which the migration
// runs on whatever an old store holds) never panics on arbitrary bytes, that whatever it
// accepts re-encodes to exactly the same bytes (the encoding is canonical), that
// encode→decode round-trips arbitrary (keyspace, user key, version) values and orders them as
// the MVCC order demands, and that span bounds select a key exactly when the span contains it.
func FuzzDecodeDataKey(f *testing.F) {
	f.Add([]byte{}, "", []byte{}, int64(0), uint32(0), uint32(0))
	f.Add(encodeDataKey(nil, "ks", []byte("a\x00b"), hlc.Version{WallNanos: 5}), "ks",
		[]byte("a\x00b"), int64(5), uint32(1), uint32(2))
	f.Add([]byte("kks\x00\x01k\x00\x01"), "a\x00",
		[]byte("\xff\x00\xff"), int64(-1), uint32(math.MaxUint32), uint32(7))
	f.Add(encodeLegacyDataKey(nil, "ks", 3, []byte("a\x00b"), hlc.Version{WallNanos: 5}), "ks",
		[]byte("a\x00"), int64(5), uint32(1), uint32(2))
	f.Add([]byte("dks\x00\x01\x00\x00\x00\x01k\x00\x01"), "a\x00",
		[]byte("\xff\x00\xff"), int64(-1), uint32(math.MaxUint32), uint32(7))
	f.Add([]byte("k\x00\xff\x00\x02"), "\x00\x00", []byte(nil), int64(math.MinInt64), uint32(0), uint32(0))
	f.Add([]byte("m"), "\xff", []byte("a\x00"), int64(math.MaxInt64), uint32(2), uint32(1))
	f.Fuzz(func(t *testing.T, raw []byte, ks string, uk []byte, wall int64, logical, node uint32) {
		// Arbitrary input: no panic, and accepted input is canonical.
		if gks, guk, gv, err := decodeDataKey(raw); err == nil {
			if re := encodeDataKey(nil, gks, guk, gv); !bytes.Equal(re, raw) {
				t.Fatalf("decode(%x) accepted but re-encodes to %x", raw, re)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode(%x) error %v does not wrap ErrCorrupt", raw, err)
		}
		if gks, guk, gv, err := decodeLegacyDataKey(raw); err == nil {
			// The partition is the 4 bytes after the escaped keyspace.
			at := len(appendKeyspacePrefix(nil, gks))
			part := binary.BigEndian.Uint32(raw[at : at+legacyPartLen])
			if re := encodeLegacyDataKey(nil, gks, part, guk, gv); !bytes.Equal(re, raw) {
				t.Fatalf("decodeLegacy(%x) accepted but re-encodes to %x", raw, re)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeLegacy(%x) error %v does not wrap ErrCorrupt", raw, err)
		}
		_, _, _ = splitVersion(raw)

		// Round trip.
		v := hlc.Version{WallNanos: wall, Logical: logical, NodeID: node}
		k := encodeDataKey(nil, ks, uk, v)
		gks, guk, gv, err := decodeDataKey(k)
		if err != nil {
			t.Fatalf("decode(encode(%q,%q,%s)) = %v", ks, uk, v, err)
		}
		if gks != ks || !bytes.Equal(guk, uk) || gv != v {
			t.Fatalf("round trip of (%q,%q,%s) gave (%q,%q,%s)", ks, uk, v, gks, guk, gv)
		}
		prefix, sv, err := splitVersion(k)
		if err != nil || sv != v || !bytes.Equal(prefix, appendKeyPrefix(nil, ks, uk)) {
			t.Fatalf("splitVersion(%x) = %x, %s, %v", k, prefix, sv, err)
		}
		// The legacy layout of the same version migrates to exactly this key.
		lk := encodeLegacyDataKey(nil, ks, logical^node, uk, v)
		if lks, luk, lv, err := decodeLegacyDataKey(lk); err != nil || !bytes.Equal(encodeDataKey(nil, lks, luk, lv), k) {
			t.Fatalf("legacy key %x decodes to (%q,%q,%s,%v), not to %x", lk, lks, luk, lv, err, k)
		}

		// Order against raw used as a second user key, same version and a newer one.
		k2 := encodeDataKey(nil, ks, raw, v)
		if got, want := sign(bytes.Compare(k, k2)), sign(bytes.Compare(uk, raw)); got != want {
			t.Fatalf("order of user keys %q vs %q: encoded %d, want %d", uk, raw, got, want)
		}
		if v.WallNanos < math.MaxInt64 {
			newer := v
			newer.WallNanos++
			if kn := encodeDataKey(nil, ks, uk, newer); bytes.Compare(kn, k) >= 0 {
				t.Fatalf("newer version %s does not sort before %s", newer, v)
			}
		}

		// Span bounds with raw as Start or End select k exactly when the span contains uk.
		for _, span := range []Span{
			{Keyspace: ks, Start: raw}, {Keyspace: ks, End: raw}, {Keyspace: ks, Start: raw, End: uk},
			{Keyspace: ks, Start: uk, End: raw}, {Keyspace: ks + "\x00", Start: raw},
		} {
			lo, hi := spanBounds(span)
			in := bytes.Compare(lo, k) <= 0 && (hi == nil || bytes.Compare(k, hi) < 0)
			if want := span.Keyspace == ks && span.Contains(uk); in != want {
				t.Fatalf("key %q@%s in bounds [%x, %x) of %s = %t, want %t", uk, v, lo, hi, span, in, want)
			}
		}
	})
}
