package storage

import (
	"bytes"
	"errors"
	"math"
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
			ka := encodeDataKey(nil, "ks", 7, a.key, a.v)
			kb := encodeDataKey(nil, "ks", 7, b.key, b.v)
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
			p := appendKeyPrefix(nil, "ks", 7, a.key)
			in := bytes.Compare(kb, p) >= 0 && bytes.Compare(kb, prefixEnd(p)) < 0
			if in != bytes.Equal(a.key, b.key) {
				t.Fatalf("key %q@%s inside span of %q = %t", b.key, b.v, a.key, in)
			}
		}
	}
}

func TestDataKeyRoundTrip(t *testing.T) {
	for _, ks := range orderCases {
		for _, uk := range orderCases {
			for _, part := range []uint32{0, 1, 0x00010000, math.MaxUint32} {
				v := hlc.Version{WallNanos: -42, Logical: 3, NodeID: part}
				k := encodeDataKey(nil, string(ks), part, uk, v)
				gks, gpart, guk, gv, err := decodeDataKey(k)
				if err != nil {
					t.Fatalf("decode(%x): %v", k, err)
				}
				if gks != string(ks) || gpart != part || !bytes.Equal(guk, uk) || gv != v {
					t.Fatalf("round trip of (%q,%d,%q,%s) gave (%q,%d,%q,%s)", ks, part, uk, v, gks, gpart, guk, gv)
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

func TestDecodeDataKeyRejectsMalformed(t *testing.T) {
	good := encodeDataKey(nil, "ks", 1, []byte("k"), hlc.Version{WallNanos: 9})
	cases := map[string][]byte{
		"empty":                 nil,
		"meta tag":              append([]byte{metaKeyTag}, good[1:]...),
		"tag only":              {dataKeyTag},
		"unterminated keyspace": []byte("dks"),
		"escape at end":         []byte("dks\x00"),
		"bad escape":            []byte("dks\x00\x02"),
		"short partition":       []byte("dks\x00\x01\x00\x00"),
		"unterminated user key": []byte("dks\x00\x01\x00\x00\x00\x01k"),
		"missing version":       good[:len(good)-versionLen],
		"short version":         good[:len(good)-1],
		"trailing byte":         append(bytes.Clone(good), 0),
	}
	for name, k := range cases {
		if _, _, _, _, err := decodeDataKey(k); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decode(%x) error = %v, want ErrCorrupt", name, k, err)
		}
	}
	if _, _, err := splitVersion([]byte("d")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("splitVersion(short) error = %v, want ErrCorrupt", err)
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

// FuzzDecodeDataKey checks that decodeDataKey never panics on arbitrary bytes, that whatever
// it accepts re-encodes to exactly the same bytes (the encoding is canonical), and that
// encode→decode round-trips arbitrary (keyspace, partition, user key, version) values and
// orders them as the MVCC order demands.
func FuzzDecodeDataKey(f *testing.F) {
	f.Add([]byte{}, "", uint32(0), []byte{}, int64(0), uint32(0), uint32(0))
	f.Add(encodeDataKey(nil, "ks", 3, []byte("a\x00b"), hlc.Version{WallNanos: 5}), "ks", uint32(3),
		[]byte("a\x00b"), int64(5), uint32(1), uint32(2))
	f.Add([]byte("dks\x00\x01\x00\x00\x00\x01k\x00\x01"), "a\x00", uint32(math.MaxUint32),
		[]byte("\xff\x00\xff"), int64(-1), uint32(math.MaxUint32), uint32(7))
	f.Add([]byte("d\x00\xff\x00\x02"), "\x00\x00", uint32(1), []byte(nil), int64(math.MinInt64), uint32(0), uint32(0))
	f.Add([]byte("m"), "\xff", uint32(1<<31), []byte("a\x00"), int64(math.MaxInt64), uint32(2), uint32(1))
	f.Fuzz(func(t *testing.T, raw []byte, ks string, part uint32, uk []byte, wall int64, logical, node uint32) {
		// Arbitrary input: no panic, and accepted input is canonical.
		if gks, gpart, guk, gv, err := decodeDataKey(raw); err == nil {
			if re := encodeDataKey(nil, gks, gpart, guk, gv); !bytes.Equal(re, raw) {
				t.Fatalf("decode(%x) accepted but re-encodes to %x", raw, re)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode(%x) error %v does not wrap ErrCorrupt", raw, err)
		}
		_, _, _ = splitVersion(raw)

		// Round trip.
		v := hlc.Version{WallNanos: wall, Logical: logical, NodeID: node}
		k := encodeDataKey(nil, ks, part, uk, v)
		gks, gpart, guk, gv, err := decodeDataKey(k)
		if err != nil {
			t.Fatalf("decode(encode(%q,%d,%q,%s)) = %v", ks, part, uk, v, err)
		}
		if gks != ks || gpart != part || !bytes.Equal(guk, uk) || gv != v {
			t.Fatalf("round trip of (%q,%d,%q,%s) gave (%q,%d,%q,%s)", ks, part, uk, v, gks, gpart, guk, gv)
		}
		prefix, sv, err := splitVersion(k)
		if err != nil || sv != v || !bytes.Equal(prefix, appendKeyPrefix(nil, ks, part, uk)) {
			t.Fatalf("splitVersion(%x) = %x, %s, %v", k, prefix, sv, err)
		}

		// Order against raw used as a second user key, same version and a newer one.
		k2 := encodeDataKey(nil, ks, part, raw, v)
		if got, want := sign(bytes.Compare(k, k2)), sign(bytes.Compare(uk, raw)); got != want {
			t.Fatalf("order of user keys %q vs %q: encoded %d, want %d", uk, raw, got, want)
		}
		if v.WallNanos < math.MaxInt64 {
			newer := v
			newer.WallNanos++
			if kn := encodeDataKey(nil, ks, part, uk, newer); bytes.Compare(kn, k) >= 0 {
				t.Fatalf("newer version %s does not sort before %s", newer, v)
			}
		}
	})
}
