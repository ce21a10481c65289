package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"meridian/api/meridianpb"
	"meridian/internal/errs"
	"meridian/internal/metadata"
)

// FuzzStreamRequests decodes arbitrary bytes as a CreateStreamRequest and validates its spec
// as the service and the catalog do, and checks an append batch of an arbitrary size against
// an arbitrary record size. Validation never panics; an accepted spec is one the engine
// takes, its schema adding up to its record size with the aggregated field inside it; a
// refusal is InvalidArgument with a one-line message; a batch is accepted exactly when it is
// whole records within the limit.
func FuzzStreamRequests(f *testing.F) {
	add := func(m proto.Message, r uint16, n uint32) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, r, n)
	}
	i64 := func(n string) *meridianpb.StreamField { return &meridianpb.StreamField{Name: n, Type: "int64"} }
	add(&meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 16, ValueOffset: 8}}, 16, 1600)
	add(&meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 4096, Ack: "memory"}}, 4096, 4096*3)
	add(&meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "t.1", Fields: []*meridianpb.StreamField{i64("ts"),
		{Name: "p", Type: "float64"}, i64("q"), {Name: "sym", Type: "bytes", Bytes: 4}}, ValueField: "q"}}, 28, 29)
	add(&meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 15}}, 15, 0)
	add(&meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "s", RecordBytes: 16, Ack: "replicated"}}, 16, 1<<30)
	add(&meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "s", Fields: []*meridianpb.StreamField{i64("ts"), i64("ts")}}}, 16, 16)
	add(&meridianpb.CreateStreamRequest{Spec: &meridianpb.StreamSpec{Keyspace: "kv", Name: "s", Fields: []*meridianpb.StreamField{i64("ts"),
		{Name: "b", Type: "bytes", Bytes: 1 << 31}}}}, 1, 7)
	add(&meridianpb.CreateStreamRequest{}, 0, 0)
	f.Add([]byte{0xff, 0x01}, uint16(100), uint32(99))
	const maxBatch = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte, r uint16, n uint32) {
		var req meridianpb.CreateStreamRequest
		if proto.Unmarshal(data, &req) == nil && req.GetSpec() != nil {
			spec, err := metadata.NormalizeStreamSpec(streamSpecFromPB(req.GetSpec()))
			if err != nil {
				if errs.KindOf(err) != errs.Invalid || strings.Contains(err.Error(), "\n") {
					t.Fatalf("refusal %q: kind %v, want a one-line invalid argument", err, errs.KindOf(err))
				}
			} else {
				cfg, cerr := (&metadata.StreamRecord{Spec: spec, ID: 1}).Config()
				if cerr != nil || cfg.Validate() != nil {
					t.Fatalf("accepted %+v, which the engine refuses: %v %v", spec, cerr, cfg.Validate())
				}
				if len(spec.Fields) > 0 {
					w := 0
					for _, f := range spec.Fields {
						w += f.Width()
					}
					if w != spec.RecordBytes || spec.Fields[0].Type != metadata.FieldInt64 {
						t.Fatalf("accepted schema %+v: widths %d, record %d", spec.Fields, w, spec.RecordBytes)
					}
				}
			}
		}
		R := int(r)
		if R == 0 {
			return
		}
		err := checkBatch("kv", "s", R, maxBatch, int(n))
		ok := n > 0 && int(n) <= maxBatch && int(n)%R == 0
		if (err == nil) != ok {
			t.Fatalf("batch of %d bytes of %d-byte records (limit %d): %v", n, R, maxBatch, err)
		}
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("batch refusal %v is not InvalidArgument", err)
		}
	})
}
