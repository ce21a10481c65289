package server

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/topology"
)

// testNow is the validator's clock in these tests: deadlines are checked exactly against it.
var testNow = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// testPlacement builds, through config.Validate and placement.Build, the placement of a
// 3-region cluster with the user keyspaces "kv" (quorum), "gl" (globlease, regions a and
// b), "rk" (raft, not transactional) and "tx" (raft, txn_mode sdur, 4 partitions). It also
// holds a "_system" keyspace, so the reserved-name rule is seen to apply to names that exist.
func testPlacement(t testing.TB) *placement.Map {
	t.Helper()
	c := &config.Cluster{
		Name:     "vt",
		Topology: topology.Equidistant("t", []string{"a", "b", "c"}, 2, 0),
		Nodes: []config.Node{
			{Name: "a-1", Region: "a", Listen: "127.0.0.1:7001", PeerListen: "127.0.0.1:8001"},
			{Name: "b-1", Region: "b", Listen: "127.0.0.1:7002", PeerListen: "127.0.0.1:8002"},
			{Name: "c-1", Region: "c", Listen: "127.0.0.1:7003", PeerListen: "127.0.0.1:8003"},
		},
		Keyspaces: []config.Keyspace{
			{Name: "kv", Protocol: config.ProtocolQuorum},
			{Name: "gl", Protocol: config.ProtocolGlobLease, Regions: []string{"a", "b"}},
			{Name: "rk", Protocol: config.ProtocolRaft, Partitions: 2},
			{Name: "tx", Protocol: config.ProtocolRaft, Partitions: 4, Options: map[string]string{"txn_mode": "sdur"}},
		},
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("test cluster: %v", err)
	}
	pm, err := placement.Build(c)
	if err != nil {
		t.Fatalf("placement: %v", err)
	}
	sys := &placement.Keyspace{
		Spec:       config.Keyspace{Name: "_meta", Protocol: config.ProtocolMetadata, Regions: []string{"a", "b", "c"}, Partitions: 1},
		Partitions: []placement.Partition{{ID: 0, Start: []byte{}, Replicas: []uint32{1, 2, 3}}},
	}
	return pm.With(sys)
}

func testValidator(t testing.TB) validator {
	return validator{limits: config.DefaultLimits(), pmap: testPlacement(t), now: testNow}
}

// validate runs the validator's method for the request's type.
func validate(v validator, req any) (engine.Request, error) {
	switch r := req.(type) {
	case *meridianpb.GetRequest:
		return v.get(r)
	case *meridianpb.PutRequest:
		return v.put(r)
	case *meridianpb.DeleteRequest:
		return v.del(r)
	case *meridianpb.ScanRequest:
		return v.scan(r)
	case *meridianpb.MoveMasterRequest:
		return v.moveMaster(r)
	case *meridianpb.TxnCommitRequest:
		return v.txnCommit(r)
	}
	panic(fmt.Sprintf("validate: unexpected request type %T", req))
}

// checkErr asserts err is an *errs.Error of kind want whose one-line message contains every
// one of msg.
func checkErr(t *testing.T, err error, want errs.Kind, msg ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v error containing %q", want, msg)
	}
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %q is a %T, want *errs.Error", err, err)
	}
	if e.Kind != want {
		t.Errorf("kind = %v, want %v (error: %v)", e.Kind, want, err)
	}
	if strings.ContainsAny(e.Msg, "\r\n") || e.Msg == "" {
		t.Errorf("message %q is not one non-empty line", e.Msg)
	}
	for _, m := range msg {
		if !strings.Contains(e.Msg, m) {
			t.Errorf("message %q does not contain %q", e.Msg, m)
		}
	}
}

// op describes one of the four data requests, to build the rules they share.
type op struct {
	name  string
	qop   engine.Op
	build func(keyspace string, key []byte, consistency string, timeoutMs uint32) any
}

var ops = []op{
	{"get", engine.OpGet, func(ks string, key []byte, c string, ms uint32) any {
		return &meridianpb.GetRequest{Keyspace: ks, Key: key, Consistency: c, TimeoutMs: ms}
	}},
	{"put", engine.OpPut, func(ks string, key []byte, c string, ms uint32) any {
		return &meridianpb.PutRequest{Keyspace: ks, Key: key, Value: []byte("v"), Consistency: c, TimeoutMs: ms}
	}},
	{"del", engine.OpDelete, func(ks string, key []byte, c string, ms uint32) any {
		return &meridianpb.DeleteRequest{Keyspace: ks, Key: key, Consistency: c, TimeoutMs: ms}
	}},
	{"scan", engine.OpScan, func(ks string, key []byte, c string, ms uint32) any {
		// The key is used as the scan's start.
		return &meridianpb.ScanRequest{Keyspace: ks, Start: key, Consistency: c, TimeoutMs: ms}
	}},
}

type valCase struct {
	name string
	req  any
	// On failure: the kind and substrings of the message.
	kind errs.Kind
	msg  []string
	// On success: checks of the protocol request.
	check func(t *testing.T, r engine.Request)
}

func wantLevel(l config.Level) func(*testing.T, engine.Request) {
	return func(t *testing.T, r engine.Request) {
		if r.Level != l {
			t.Errorf("Level = %q, want %q", r.Level, l)
		}
	}
}

func wantDeadline(d time.Duration) func(*testing.T, engine.Request) {
	return func(t *testing.T, r engine.Request) {
		if want := testNow.Add(d); !r.Deadline.Equal(want) {
			t.Errorf("Deadline = %v, want now+%v = %v", r.Deadline, d, want)
		}
	}
}

func TestValidatorRules(t *testing.T) {
	lim := config.DefaultLimits()
	maxKey := bytes.Repeat([]byte("k"), lim.MaxKeyBytes)
	longKey := bytes.Repeat([]byte("k"), lim.MaxKeyBytes+1)
	maxMs := uint32(lim.MaxRequestTimeout / time.Millisecond)
	keyLimit := fmt.Sprintf("limit is %d (limits.max_key_bytes)", lim.MaxKeyBytes)

	var cases []valCase
	for _, o := range ops {
		b := o.build
		cases = append(cases,
			valCase{name: o.name + "/empty keyspace", req: b("", []byte("k"), "", 0), kind: errs.Invalid,
				msg: []string{"keyspace name is empty"}},
			valCase{name: o.name + "/reserved keyspace", req: b("_system", []byte("k"), "", 0), kind: errs.Invalid,
				msg: []string{`"_system"`, "reserved"}},
			valCase{name: o.name + "/reserved unknown keyspace", req: b("_other", []byte("k"), "", 0), kind: errs.Invalid,
				msg: []string{`"_other"`, "reserved"}},
			valCase{name: o.name + "/unknown keyspace", req: b("nope", []byte("k"), "", 0), kind: errs.NotFound,
				msg: []string{`unknown keyspace "nope"`}},
			valCase{name: o.name + "/keyspace name is case-sensitive", req: b("KV", []byte("k"), "", 0), kind: errs.NotFound,
				msg: []string{`"KV"`}},
			valCase{name: o.name + "/bad consistency", req: b("kv", []byte("k"), "FOO", 0), kind: errs.Invalid,
				msg: []string{`consistency "FOO"`, `keyspace "kv"`, "ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM"}},
			valCase{name: o.name + "/consistency with newline stays one line", req: b("kv", []byte("k"), "ONE\nTWO", 0), kind: errs.Invalid,
				msg: []string{`consistency "ONE\nTWO"`}},
			valCase{name: o.name + "/lower-case consistency", req: b("kv", []byte("k"), "quorum", 0), check: wantLevel(config.LevelQuorum)},
			valCase{name: o.name + "/mixed-case local consistency", req: b("kv", []byte("k"), "Local_Quorum", 0), check: wantLevel(config.LevelLocalQuorum)},
			valCase{name: o.name + "/no consistency is the keyspace default", req: b("kv", []byte("k"), "", 0), check: wantLevel("")},
			valCase{name: o.name + "/timeout over max", req: b("kv", []byte("k"), "", maxMs+1), kind: errs.Invalid,
				msg: []string{"timeout 1m0.001s", "limit 1m0s (limits.max_request_timeout)"}},
			valCase{name: o.name + "/huge timeout", req: b("kv", []byte("k"), "", 1<<32-1), kind: errs.Invalid,
				msg: []string{"limits.max_request_timeout"}},
			valCase{name: o.name + "/timeout exactly max", req: b("kv", []byte("k"), "", maxMs), check: wantDeadline(lim.MaxRequestTimeout)},
			valCase{name: o.name + "/timeout 1ms", req: b("kv", []byte("k"), "", 1), check: wantDeadline(time.Millisecond)},
			valCase{name: o.name + "/timeout 0 is the default", req: b("kv", []byte("k"), "", 0), check: wantDeadline(lim.DefaultRequestTimeout)},
			valCase{name: o.name + "/op and keyspace", req: b("kv", []byte("k"), "", 0), check: func(t *testing.T, r engine.Request) {
				if r.Op != o.qop || r.Keyspace != "kv" {
					t.Errorf("Op %v Keyspace %q, want %v kv", r.Op, r.Keyspace, o.qop)
				}
			}},
		)
		if o.qop == engine.OpScan {
			continue
		}
		cases = append(cases,
			valCase{name: o.name + "/nil key", req: b("kv", nil, "", 0), kind: errs.Invalid, msg: []string{"key is empty"}},
			valCase{name: o.name + "/empty key", req: b("kv", []byte{}, "", 0), kind: errs.Invalid, msg: []string{"key is empty"}},
			valCase{name: o.name + "/key max+1", req: b("kv", longKey, "", 0), kind: errs.Invalid,
				msg: []string{fmt.Sprintf("key is %d bytes", lim.MaxKeyBytes+1), keyLimit}},
			valCase{name: o.name + "/key exactly max", req: b("kv", maxKey, "", 0), check: func(t *testing.T, r engine.Request) {
				if !bytes.Equal(r.Key, maxKey) {
					t.Errorf("Key has %d bytes, want the %d given", len(r.Key), len(maxKey))
				}
			}},
			valCase{name: o.name + "/one-byte key", req: b("kv", []byte{0}, "", 0), check: func(t *testing.T, r engine.Request) {
				if !bytes.Equal(r.Key, []byte{0}) {
					t.Errorf("Key = %q", r.Key)
				}
			}},
			// The keyspace is checked before the key, the key before the level, the level
			// before the timeout: the first problem is reported.
			valCase{name: o.name + "/first problem wins", req: b("nope", nil, "FOO", maxMs+1), kind: errs.NotFound, msg: []string{"nope"}},
			valCase{name: o.name + "/key before level", req: b("kv", nil, "FOO", maxMs+1), kind: errs.Invalid, msg: []string{"key is empty"}},
		)
	}

	// Put values.
	maxVal := bytes.Repeat([]byte("v"), lim.MaxValueBytes)
	cases = append(cases,
		valCase{name: "put/value max+1", req: &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: append(maxVal, 'v')},
			kind: errs.Invalid, msg: []string{fmt.Sprintf("value is %d bytes, limit is %d (limits.max_value_bytes)", lim.MaxValueBytes+1, lim.MaxValueBytes)}},
		valCase{name: "put/value exactly max", req: &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: maxVal},
			check: func(t *testing.T, r engine.Request) {
				if len(r.Value) != lim.MaxValueBytes {
					t.Errorf("Value has %d bytes, want %d", len(r.Value), lim.MaxValueBytes)
				}
			}},
		valCase{name: "put/nil value is an empty value, not a tombstone", req: &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k")},
			check: func(t *testing.T, r engine.Request) {
				if r.Value == nil || len(r.Value) != 0 {
					t.Errorf("Value = %#v, want non-nil empty", r.Value)
				}
			}},
		valCase{name: "put/value kept", req: &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: []byte("hello")},
			check: func(t *testing.T, r engine.Request) {
				if string(r.Key) != "k" || string(r.Value) != "hello" || r.Op != engine.OpPut {
					t.Errorf("request = %+v", r)
				}
			}},
	)

	// Scans.
	scan := func(start, end string, limit uint32) *meridianpb.ScanRequest {
		return &meridianpb.ScanRequest{Keyspace: "kv", Start: []byte(start), End: []byte(end), Limit: limit}
	}
	wantLimit := func(n int) func(*testing.T, engine.Request) {
		return func(t *testing.T, r engine.Request) {
			if r.Limit != n {
				t.Errorf("Limit = %d, want %d", r.Limit, n)
			}
		}
	}
	cases = append(cases,
		valCase{name: "scan/start equals end", req: scan("m", "m", 0), kind: errs.Invalid,
			msg: []string{"scan range is empty", `start "m"`, `end "m"`}},
		valCase{name: "scan/start after end", req: scan("z", "a", 0), kind: errs.Invalid,
			msg: []string{"scan range is empty", `start "z"`, `end "a"`}},
		valCase{name: "scan/start before end", req: scan("a", "b", 0), check: func(t *testing.T, r engine.Request) {
			if string(r.Start) != "a" || string(r.End) != "b" {
				t.Errorf("range [%q, %q), want [a, b)", r.Start, r.End)
			}
		}},
		valCase{name: "scan/empty end is unbounded", req: scan("z", "", 0), check: func(t *testing.T, r engine.Request) {
			if string(r.Start) != "z" || len(r.End) != 0 {
				t.Errorf("range [%q, %q), want [z, unbounded)", r.Start, r.End)
			}
		}},
		valCase{name: "scan/nil start is the beginning", req: &meridianpb.ScanRequest{Keyspace: "kv"}, check: func(t *testing.T, r engine.Request) {
			if r.Start == nil || len(r.Start) != 0 || len(r.End) != 0 {
				t.Errorf("range [%#v, %#v), want non-nil empty start, empty end", r.Start, r.End)
			}
		}},
		valCase{name: "scan/limit over max", req: scan("", "", uint32(lim.MaxScanLimit)+1), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("scan limit %d exceeds the limit %d (limits.max_scan_limit)", lim.MaxScanLimit+1, lim.MaxScanLimit)}},
		valCase{name: "scan/limit max uint32", req: scan("", "", 1<<32-1), kind: errs.Invalid,
			msg: []string{"scan limit 4294967295", "limits.max_scan_limit"}},
		valCase{name: "scan/limit exactly max", req: scan("", "", uint32(lim.MaxScanLimit)), check: wantLimit(lim.MaxScanLimit)},
		valCase{name: "scan/limit 1", req: scan("", "", 1), check: wantLimit(1)},
		valCase{name: "scan/limit 0 is the default", req: scan("", "", 0), check: wantLimit(DefaultScanLimit)},
		valCase{name: "scan/start over key limit", req: scan(string(longKey), "", 0), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("scan start is %d bytes", lim.MaxKeyBytes+1), keyLimit}},
		valCase{name: "scan/end over key limit", req: scan("", string(longKey), 0), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("scan end is %d bytes", lim.MaxKeyBytes+1), keyLimit}},
		valCase{name: "scan/start and end exactly max", req: scan(string(maxKey[1:])+"a", string(maxKey), 0), check: func(t *testing.T, r engine.Request) {
			if len(r.Start) != lim.MaxKeyBytes || len(r.End) != lim.MaxKeyBytes {
				t.Errorf("start %d end %d bytes", len(r.Start), len(r.End))
			}
		}},
	)

	runValCases(t, testValidator(t), cases)
}

func runValCases(t *testing.T, v validator, cases []valCase) {
	t.Helper()
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("test bug: duplicate case %q", c.name)
		}
		names[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			got, err := validate(v, c.req)
			if c.kind != 0 {
				checkErr(t, err, c.kind, c.msg...)
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

func wantWriteMode(m string) func(*testing.T, engine.Request) {
	return func(t *testing.T, r engine.Request) {
		if r.WriteMode != m {
			t.Errorf("WriteMode = %q, want %q", r.WriteMode, m)
		}
	}
}

// TestValidatorGlobLease checks the rules that differ for globlease keyspaces: no
// consistency level on single-key operations (scans keep theirs), write modes only there,
// and the move-master request.
func TestValidatorGlobLease(t *testing.T) {
	lim := config.DefaultLimits()
	longKey := bytes.Repeat([]byte("k"), lim.MaxKeyBytes+1)
	maxMs := uint32(lim.MaxRequestTimeout / time.Millisecond)
	noLevel := []string{`keyspace "gl" uses protocol globlease, which takes no consistency level`, "write_mode active|passive"}

	var cases []valCase
	for _, o := range ops {
		b := o.build
		if o.qop == engine.OpScan {
			cases = append(cases,
				valCase{name: "scan/globlease takes a level", req: b("gl", nil, "quorum", 0), check: wantLevel(config.LevelQuorum)},
				valCase{name: "scan/globlease bad level", req: b("gl", nil, "FOO", 0), kind: errs.Invalid, msg: []string{`consistency "FOO"`}},
				valCase{name: "scan/globlease default level", req: b("gl", nil, "", 0), check: wantLevel("")},
			)
			continue
		}
		cases = append(cases,
			valCase{name: o.name + "/globlease rejects a level", req: b("gl", []byte("k"), "QUORUM", 0), kind: errs.Invalid, msg: noLevel},
			valCase{name: o.name + "/globlease rejects even ONE", req: b("gl", []byte("k"), "one", 0), kind: errs.Invalid, msg: noLevel},
			valCase{name: o.name + "/globlease key before level", req: b("gl", nil, "QUORUM", 0), kind: errs.Invalid, msg: []string{"key is empty"}},
			valCase{name: o.name + "/globlease no level", req: b("gl", []byte("k"), "", 0), check: func(t *testing.T, r engine.Request) {
				if r.Op != o.qop || r.Keyspace != "gl" || r.Level != "" || r.WriteMode != "" {
					t.Errorf("request = %+v, want op %v keyspace gl, no level, no write mode", r, o.qop)
				}
			}},
			valCase{name: o.name + "/globlease timeout over max", req: b("gl", []byte("k"), "", maxMs+1), kind: errs.Invalid,
				msg: []string{"limits.max_request_timeout"}},
		)
	}

	put := func(ks, mode string) *meridianpb.PutRequest {
		return &meridianpb.PutRequest{Keyspace: ks, Key: []byte("k"), Value: []byte("v"), WriteMode: mode}
	}
	del := func(ks, mode string) *meridianpb.DeleteRequest {
		return &meridianpb.DeleteRequest{Keyspace: ks, Key: []byte("k"), WriteMode: mode}
	}
	for _, w := range []struct {
		name  string
		build func(ks, mode string) any
	}{
		{"put", func(ks, mode string) any { return put(ks, mode) }},
		{"del", func(ks, mode string) any { return del(ks, mode) }},
	} {
		b := w.build
		cases = append(cases,
			valCase{name: w.name + "/write_mode active", req: b("gl", "active"), check: wantWriteMode("active")},
			valCase{name: w.name + "/write_mode passive", req: b("gl", "passive"), check: wantWriteMode("passive")},
			valCase{name: w.name + "/write_mode is case-insensitive", req: b("gl", "PASSIVE"), check: wantWriteMode("passive")},
			valCase{name: w.name + "/write_mode mixed case", req: b("gl", "Active"), check: wantWriteMode("active")},
			valCase{name: w.name + "/no write_mode is the keyspace default", req: b("gl", ""), check: wantWriteMode("")},
			valCase{name: w.name + "/bad write_mode", req: b("gl", "eager"), kind: errs.Invalid,
				msg: []string{`write_mode "eager"`, "active or passive"}},
			valCase{name: w.name + "/write_mode with newline stays one line", req: b("gl", "active\npassive"), kind: errs.Invalid,
				msg: []string{`write_mode "active\npassive"`}},
			valCase{name: w.name + "/write_mode on a quorum keyspace", req: b("kv", "active"), kind: errs.Invalid,
				msg: []string{`write_mode "active"`, `keyspace "kv"`, "protocol quorum has no write modes"}},
			valCase{name: w.name + "/bad write_mode on a quorum keyspace", req: b("kv", "lazy"), kind: errs.Invalid,
				msg: []string{`write_mode "lazy"`, "protocol quorum has no write modes"}},
			valCase{name: w.name + "/no write_mode on a quorum keyspace", req: b("kv", ""), check: wantWriteMode("")},
			valCase{name: w.name + "/unknown keyspace before write_mode", req: b("nope", "eager"), kind: errs.NotFound, msg: []string{"nope"}},
		)
	}
	cases = append(cases,
		valCase{name: "put/write_mode before level", req: &meridianpb.PutRequest{Keyspace: "gl", Key: []byte("k"), WriteMode: "x", Consistency: "ONE"},
			kind: errs.Invalid, msg: []string{`write_mode "x"`}},
		valCase{name: "put/value before write_mode", req: &meridianpb.PutRequest{Keyspace: "gl", Key: []byte("k"), Value: make([]byte, lim.MaxValueBytes+1), WriteMode: "x"},
			kind: errs.Invalid, msg: []string{"limits.max_value_bytes"}},
		valCase{name: "put/globlease value kept", req: put("gl", "passive"), check: func(t *testing.T, r engine.Request) {
			if r.Op != engine.OpPut || string(r.Key) != "k" || string(r.Value) != "v" || r.WriteMode != "passive" {
				t.Errorf("request = %+v", r)
			}
		}},
	)

	// Move master.
	mm := func(ks string, key []byte, region string, ms uint32) *meridianpb.MoveMasterRequest {
		return &meridianpb.MoveMasterRequest{Keyspace: ks, Key: key, Region: region, TimeoutMs: ms}
	}
	k := []byte("k")
	cases = append(cases,
		valCase{name: "move/ok", req: mm("gl", k, "b", 0), check: func(t *testing.T, r engine.Request) {
			if r.Op != engine.OpMoveMaster || r.Keyspace != "gl" || string(r.Key) != "k" || r.Region != "b" {
				t.Errorf("request = %+v, want move-master of gl/k to b", r)
			}
			wantDeadline(lim.DefaultRequestTimeout)(t, r)
		}},
		valCase{name: "move/timeout", req: mm("gl", k, "a", 1500), check: wantDeadline(1500 * time.Millisecond)},
		valCase{name: "move/timeout over max", req: mm("gl", k, "a", maxMs+1), kind: errs.Invalid, msg: []string{"limits.max_request_timeout"}},
		valCase{name: "move/empty keyspace", req: mm("", k, "a", 0), kind: errs.Invalid, msg: []string{"keyspace name is empty"}},
		valCase{name: "move/reserved keyspace", req: mm("_system", k, "a", 0), kind: errs.Invalid, msg: []string{"reserved"}},
		valCase{name: "move/unknown keyspace", req: mm("nope", k, "a", 0), kind: errs.NotFound, msg: []string{`unknown keyspace "nope"`}},
		valCase{name: "move/quorum keyspace", req: mm("kv", k, "a", 0), kind: errs.Invalid,
			msg: []string{`keyspace "kv"`, "protocol quorum", "which has no masters to move"}},
		valCase{name: "move/empty key", req: mm("gl", nil, "a", 0), kind: errs.Invalid, msg: []string{"key is empty"}},
		valCase{name: "move/key max+1", req: mm("gl", longKey, "a", 0), kind: errs.Invalid,
			msg: []string{fmt.Sprintf("key is %d bytes", lim.MaxKeyBytes+1), "limits.max_key_bytes"}},
		valCase{name: "move/empty region", req: mm("gl", k, "", 0), kind: errs.Invalid,
			msg: []string{"region is empty", `keyspace "gl"`, "a, b"}},
		valCase{name: "move/region outside the keyspace", req: mm("gl", k, "c", 0), kind: errs.Invalid,
			msg: []string{`"c" is not a region of keyspace "gl"`, "regions: a, b"}},
		valCase{name: "move/unknown region", req: mm("gl", k, "mars", 0), kind: errs.Invalid, msg: []string{`"mars"`, "regions: a, b"}},
		valCase{name: "move/region is case-sensitive", req: mm("gl", k, "A", 0), kind: errs.Invalid, msg: []string{`"A"`}},
		valCase{name: "move/region with newline stays one line", req: mm("gl", k, "a\nb", 0), kind: errs.Invalid, msg: []string{`"a\nb"`}},
		valCase{name: "move/key before region", req: mm("gl", nil, "", 0), kind: errs.Invalid, msg: []string{"key is empty"}},
	)
	runValCases(t, testValidator(t), cases)
}

// TestValidatorConfiguredLimits checks that the rules use the cluster's limits, not the
// defaults, and that the default scan limit never exceeds the configured maximum.
func TestValidatorConfiguredLimits(t *testing.T) {
	v := validator{
		limits: config.Limits{MaxKeyBytes: 4, MaxValueBytes: 8, MaxScanLimit: 50,
			DefaultRequestTimeout: 250 * time.Millisecond, MaxRequestTimeout: 2 * time.Second},
		pmap: testPlacement(t),
		now:  testNow,
	}
	_, err := v.get(&meridianpb.GetRequest{Keyspace: "kv", Key: []byte("12345")})
	checkErr(t, err, errs.Invalid, "key is 5 bytes, limit is 4 (limits.max_key_bytes)")
	if _, err := v.get(&meridianpb.GetRequest{Keyspace: "kv", Key: []byte("1234")}); err != nil {
		t.Errorf("4-byte key: %v", err)
	}
	_, err = v.put(&meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Value: []byte("123456789")})
	checkErr(t, err, errs.Invalid, "value is 9 bytes, limit is 8 (limits.max_value_bytes)")
	_, err = v.del(&meridianpb.DeleteRequest{Keyspace: "kv", Key: []byte("k"), TimeoutMs: 2001})
	checkErr(t, err, errs.Invalid, "timeout 2.001s exceeds the limit 2s (limits.max_request_timeout)")
	r, err := v.del(&meridianpb.DeleteRequest{Keyspace: "kv", Key: []byte("k")})
	if err != nil || !r.Deadline.Equal(testNow.Add(250*time.Millisecond)) {
		t.Errorf("default deadline: %v, %v; want now+250ms", r.Deadline, err)
	}
	r, err = v.scan(&meridianpb.ScanRequest{Keyspace: "kv"})
	if err != nil || r.Limit != 50 {
		t.Errorf("scan limit 0 with max_scan_limit 50: limit %d, %v; want 50", r.Limit, err)
	}
	_, err = v.scan(&meridianpb.ScanRequest{Keyspace: "kv", Limit: 51})
	checkErr(t, err, errs.Invalid, "scan limit 51 exceeds the limit 50 (limits.max_scan_limit)")
	_, err = v.scan(&meridianpb.ScanRequest{Keyspace: "kv", End: []byte("12345")})
	checkErr(t, err, errs.Invalid, "scan end is 5 bytes, limit is 4 (limits.max_key_bytes)")
}

// TestValidatorDoesNotMutate checks that validation leaves the request as it was.
func TestValidatorDoesNotMutate(t *testing.T) {
	v := testValidator(t)
	r := &meridianpb.PutRequest{Keyspace: "kv", Key: []byte("k"), Consistency: "one"}
	if _, err := v.put(r); err != nil {
		t.Fatal(err)
	}
	if r.Value != nil || r.Consistency != "one" || string(r.Key) != "k" {
		t.Errorf("request changed: %v", r)
	}
}

func TestToStatus(t *testing.T) {
	if err := ToStatus(nil); err != nil {
		t.Errorf("ToStatus(nil) = %v", err)
	}
	cases := []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{errs.New(errs.Invalid, "key is empty"), codes.InvalidArgument, "key is empty"},
		{errs.New(errs.NotFound, "unknown keyspace %q", "x"), codes.NotFound, `unknown keyspace "x"`},
		{errs.New(errs.AlreadyExists, "keyspace %q already exists", "x"), codes.AlreadyExists, `keyspace "x" already exists`},
		{errs.New(errs.Unavailable, "2 of 3 replicas down"), codes.Unavailable, "2 of 3 replicas down"},
		{errs.New(errs.Timeout, "deadline passed"), codes.DeadlineExceeded, "deadline passed"},
		{errs.New(errs.Overloaded, "queue full"), codes.ResourceExhausted, "queue full"},
		{errs.New(errs.Internal, "disk on fire"), codes.Internal, "disk on fire"},
		{errs.New(errs.Kind(99), "strange"), codes.Internal, "strange"},
		{errors.New("plain error"), codes.Internal, "plain error"},
		// A wrapped Meridian error keeps its kind and the wrapper's message.
		{fmt.Errorf("node n1: %w", errs.New(errs.Unavailable, "no quorum")), codes.Unavailable, "node n1: no quorum"},
	}
	for _, c := range cases {
		t.Run(c.msg, func(t *testing.T) {
			err := ToStatus(c.err)
			st, ok := status.FromError(err)
			if !ok {
				t.Fatalf("ToStatus(%v) = %v (%T), not a gRPC status", c.err, err, err)
			}
			if st.Code() != c.code {
				t.Errorf("code = %v, want %v", st.Code(), c.code)
			}
			if st.Message() != c.msg {
				t.Errorf("message = %q, want %q", st.Message(), c.msg)
			}
		})
	}
}
