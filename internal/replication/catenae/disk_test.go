package catenae

import (
	"testing"

	core "meridian/internal/catenae"
)

// The meta key decodes to what was encoded, and refuses what is not one.
func FuzzDecodeMeta(f *testing.F) {
	m := meta{replicasVersion: 9, proposal: 100, start: 102, core: core.Meta{Seq: 5, LastNanos: 1 << 40, SentUpto: 150, Closed: 149, ValidatedUpto: 147, ValidatedSeq: 33}, forgot: 140}
	b := m.encode()
	if got, err := decodeMeta(b); err != nil || got != m {
		f.Fatalf("round trip: %+v, %v", got, err)
	}
	f.Add(b)
	f.Add([]byte{metaVersion})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMeta(data)
		if err != nil {
			return
		}
		c := m.core
		if m.start != 0 && (c.SentUpto < c.Closed || c.Closed < c.ValidatedUpto || m.forgot > c.ValidatedUpto) {
			t.Fatalf("decoded a meta out of order: %+v", m)
		}
		if again, err := decodeMeta(m.encode()); err != nil || again != m {
			t.Fatalf("re-encoded meta decodes to %+v, %v", again, err)
		}
	})
}
