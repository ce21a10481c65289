package kawkab

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func manifestCRC(b []byte) []byte {
	if len(b) != ManifestBytes {
		return b
	}
	b = bytes.Clone(b)
	putU32(b[48:], crc32c(b[:48]))
	return b
}

// TestManifestEncoding: round trips, and one refusal per check (the checksum fixed so that
// the field checks are reached), each wrapping ErrMalformedManifest.
func TestManifestEncoding(t *testing.T) {
	lay, _ := NewLayout(100)
	for _, chunks := range []uint64{0, 1, 5, 1 << 30} {
		m := manifestFor(9, lay, 289, chunks)
		b, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeManifest(b)
		if err != nil || got != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, got, err)
		}
	}
	m := manifestFor(9, lay, 3, 5)
	if m.Records != 5*256*163 || m.Nodes != 427 {
		t.Fatalf("manifest %+v", m)
	}
	good, _ := encodeManifest(m)
	cases := []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"short", func(b []byte) []byte { return b[:40] }, "40 bytes"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return manifestCRC(b) }, "magic"},
		{"version", func(b []byte) []byte { b[4] = 2; return manifestCRC(b) }, "version 2"},
		{"checksum", func(b []byte) []byte { b[30] ^= 1; return b }, "checksum"},
		{"reserved", func(b []byte) []byte { b[53] = 1; return manifestCRC(b) }, "reserved"},
		{"record size", func(b []byte) []byte { putU32(b[16:], 8); return manifestCRC(b) }, "record size 8"},
		{"n", func(b []byte) []byte { putU32(b[20:], 0); return manifestCRC(b) }, "n = 0"},
		{"records", func(b []byte) []byte { b[32]++; return manifestCRC(b) }, "hold"},
		{"nodes", func(b []byte) []byte { b[40]++; return manifestCRC(b) }, "index nodes"},
		{"overflow", func(b []byte) []byte { b[31] = 0xff; return manifestCRC(b) }, "overflow"},
	}
	for _, c := range cases {
		_, err := decodeManifest(c.edit(bytes.Clone(good)))
		if !errors.Is(err, ErrMalformedManifest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := encodeManifest(Manifest{RecordBytes: 100, IndexN: 3, Chunks: 1}); err == nil {
		t.Fatal("an inconsistent manifest encoded")
	}
}

// FuzzDecodeManifest: decoding never panics, and a manifest that decodes encodes back to the
// same bytes. Each input is also tried with its checksum fixed, so the field checks are
// fuzzed too.
func FuzzDecodeManifest(f *testing.F) {
	lay, _ := NewLayout(100)
	for _, c := range []uint64{0, 3} {
		b, _ := encodeManifest(manifestFor(1, lay, 289, c))
		f.Add(b)
	}
	f.Add([]byte("KWKM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, manifestCRC(b)} {
			m, err := decodeManifest(in)
			if err != nil {
				if !errors.Is(err, ErrMalformedManifest) {
					t.Fatalf("error %v does not wrap ErrMalformedManifest", err)
				}
				continue
			}
			out, err := encodeManifest(m)
			if err != nil || !bytes.Equal(out, in) {
				t.Fatalf("decoded %+v does not encode back: %v", m, err)
			}
		}
	})
}
