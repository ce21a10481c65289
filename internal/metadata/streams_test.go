package metadata

import (
	"strings"
	"testing"

	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/kawkab"
	"meridian/internal/storage"
)

// TestStreamCommands: streams are created in an existing keyspace with a unique name, an ID
// that is the command's log index, a primary among the candidates (least streams first) and a
// reader on another node; they are dropped by name (conditionally on their version), with
// their keyspace, and survive a reload of the catalog from its records.
func TestStreamCommands(t *testing.T) {
	cat := testCatalog(t, 1) // n1 europe, n2 us, n3 asia
	if _, _, err := cat.Apply(5, Command{Op: OpCreate, Spec: &config.Keyspace{Name: "kv", Protocol: "quorum", Partitions: 2}}); err != nil {
		t.Fatal(err)
	}
	var stored []storage.Record
	create := func(index uint64, spec StreamSpec, cands ...uint32) (*StreamRecord, error) {
		t.Helper()
		recs, out, err := cat.Apply(index, Command{Op: OpCreateStream, Stream: &spec, Candidates: cands})
		stored = append(stored, recs...)
		return out.Stream, err
	}
	if _, err := create(6, StreamSpec{Keyspace: "nope", Name: "s", RecordBytes: 16}); errs.KindOf(err) != errs.NotFound || !strings.Contains(err.Error(), `no keyspace "nope"`) {
		t.Fatalf("stream in a missing keyspace: %v", err)
	}
	primaries := map[uint32]int{}
	var ids []uint64
	for i, name := range []string{"a", "b", "c", "d", "e", "f"} {
		s, err := create(uint64(10+i), StreamSpec{Keyspace: "kv", Name: name, RecordBytes: 16})
		if err != nil {
			t.Fatal(err)
		}
		if s.ID != uint64(10+i) || s.Spec.ValueOffset != kawkab.NoValue || s.Spec.Ack != "local" {
			t.Fatalf("stream %s: %+v", name, s)
		}
		if s.Reader == 0 || s.Reader == s.Primary {
			t.Fatalf("stream %s: primary %d reader %d", name, s.Primary, s.Reader)
		}
		primaries[s.Primary]++
		ids = append(ids, s.ID)
	}
	// Least streams first: 6 streams over 3 nodes, 2 each.
	if len(primaries) != 3 || primaries[1] != 2 || primaries[2] != 2 || primaries[3] != 2 {
		t.Fatalf("primaries not balanced: %v", primaries)
	}
	// Only the candidates the proposer saw alive.
	s, err := create(20, StreamSpec{Keyspace: "kv", Name: "only3", RecordBytes: 32}, 3)
	if err != nil || s.Primary != 3 || s.Reader != 0 {
		t.Fatalf("candidates [3]: %+v, %v", s, err)
	}
	if _, err := create(21, StreamSpec{Keyspace: "kv", Name: "none", RecordBytes: 32}, 99); errs.KindOf(err) != errs.Unavailable {
		t.Fatalf("no live candidate: %v", err)
	}
	// Replicated streams need a second node: their copy is on the reader.
	if _, err := create(24, StreamSpec{Keyspace: "kv", Name: "rep1", RecordBytes: 32, Ack: "replicated"}, 2); errs.KindOf(err) != errs.Unavailable || !strings.Contains(err.Error(), "needs a second live node") {
		t.Fatalf("replicated with one candidate: %v", err)
	}
	if rs, err := create(25, StreamSpec{Keyspace: "kv", Name: "rep2", RecordBytes: 32, Ack: "replicated"}, 2, 3); err != nil || rs.Reader == 0 || rs.Reader == rs.Primary || !rs.Replicated() {
		t.Fatalf("replicated: %+v, %v", rs, err)
	} else if cfg, _ := rs.Config(); cfg.Ack != kawkab.AckLocal {
		t.Fatalf("a replicated stream's engine acknowledges at %v, want local", cfg.Ack)
	}
	if _, err := create(22, StreamSpec{Keyspace: "kv", Name: "a", RecordBytes: 16}); errs.KindOf(err) != errs.AlreadyExists {
		t.Fatalf("duplicate name: %v", err)
	}
	// A schema determines the record size and the aggregated value's offset.
	sch, err := create(23, StreamSpec{Keyspace: "kv", Name: "ticks", Fields: []StreamField{{Name: "ts", Type: "int64"},
		{Name: "price", Type: "float64"}, {Name: "qty", Type: "int64"}, {Name: "sym", Type: "bytes", Bytes: 8}}, ValueField: "qty"})
	if err != nil || sch.Spec.RecordBytes != 32 || sch.Spec.ValueOffset != 16 {
		t.Fatalf("schema stream: %+v, %v", sch, err)
	}
	// Reload from the records: the same streams.
	cat2 := testCatalog(t, 1)
	if err := cat2.Load(func(fn func(storage.Record) bool) error {
		for i := len(stored) - 1; i >= 0; i-- { // newest first, as a snapshot
			if !fn(stored[i]) {
				break
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(cat2.Streams()) != 9 || cat2.Streams()["kv/ticks"].Spec.ValueOffset != 16 {
		t.Fatalf("reloaded streams: %v", cat2.Streams())
	}
	// Drop: conditional, then gone; dropping again is NotFound.
	if _, _, err := cat.Apply(30, Command{Op: OpDropStream, Name: "kv", StreamName: "a", ExpectVersion: 99}); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("drop at a stale version: %v", err)
	}
	recs, out, err := cat.Apply(31, Command{Op: OpDropStream, Name: "kv", StreamName: "a", ExpectVersion: ids[0]})
	if err != nil || len(recs) != 1 || !recs[0].Tombstone || out.Stream.ID != ids[0] {
		t.Fatalf("drop: %v %+v %v", recs, out, err)
	}
	if _, _, err := cat.Apply(32, Command{Op: OpDropStream, Name: "kv", StreamName: "a"}); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("drop twice: %v", err)
	}
	// Re-created with the same name: a new ID.
	if s, err := create(33, StreamSpec{Keyspace: "kv", Name: "a", RecordBytes: 16}); err != nil || s.ID != 33 {
		t.Fatalf("re-create: %+v, %v", s, err)
	}
	// Dropping the keyspace drops its streams.
	recs, _, err = cat.Apply(40, Command{Op: OpDrop, Name: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	tomb := 0
	for _, r := range recs {
		if IsStreamKey(r.Key) && r.Tombstone {
			tomb++
		}
	}
	if tomb != 9 || len(cat.Streams()) != 0 {
		t.Fatalf("keyspace drop: %d stream tombstones, %d streams left", tomb, len(cat.Streams()))
	}
}

// TestNormalizeStreamSpec: every refusal, with what it names.
func TestNormalizeStreamSpec(t *testing.T) {
	i64 := func(n string) StreamField { return StreamField{Name: n, Type: FieldInt64} }
	for _, tc := range []struct {
		spec StreamSpec
		want string
	}{
		{StreamSpec{Name: "s", RecordBytes: 16}, "keyspace name is empty"},
		{StreamSpec{Keyspace: "_meta", Name: "s", RecordBytes: 16}, "reserved"},
		{StreamSpec{Keyspace: "kv", RecordBytes: 16}, "stream name is empty"},
		{StreamSpec{Keyspace: "kv", Name: "a/b", RecordBytes: 16}, "use letters"},
		{StreamSpec{Keyspace: "kv", Name: strings.Repeat("a", 129), RecordBytes: 16}, "too long"},
		{StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 15}, "record size 15 bytes, want 16 to 4096"},
		{StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 4097}, "want 16 to 4096"},
		{StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 16, ValueOffset: 9}, "value offset 9"},
		{StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 16, Ack: "quorum"}, `ack level "quorum"`},
		{StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 16, ValueField: "v"}, "needs a schema"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{{Name: "ts", Type: FieldFloat64}, i64("v")}}, "must be int64"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), i64("ts")}}, "appears twice"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), {Name: "x", Type: "int32"}}}, `type "int32"`},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), {Name: "b", Type: FieldBytes}}}, "bytes[0]"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), {Name: "b", Type: FieldBytes, Bytes: 4089}}}, "bytes[4089]"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), {Name: "b", Type: FieldBytes, Bytes: 4088}, i64("x")}}, "more than 4096"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts")}}, "record size 8 bytes"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), i64("v")}, ValueField: "w"}, "not a field"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), {Name: "f", Type: FieldFloat64}}, ValueField: "f"}, "must be an int64"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), i64("v")}, ValueField: "ts"}, "must be an int64 field after"},
		{StreamSpec{Keyspace: "kv", Name: "s", Fields: []StreamField{i64("ts"), i64("v")}, RecordBytes: 24}, "record_bytes 24"},
	} {
		_, err := NormalizeStreamSpec(tc.spec)
		if errs.KindOf(err) != errs.Invalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an invalid-argument error containing %q", tc.spec, err, tc.want)
		}
	}
	got, err := NormalizeStreamSpec(StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 24, ValueOffset: 16, Ack: "memory"})
	if err != nil || got.ValueOffset != 16 || got.Ack != "memory" {
		t.Fatalf("valid raw spec: %+v, %v", got, err)
	}
	if got, err := NormalizeStreamSpec(StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 16, Ack: "replicated"}); err != nil || got.Ack != "replicated" {
		t.Fatalf("replicated: %+v, %v", got, err)
	}
}
