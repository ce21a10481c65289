package check

import (
	"strings"
	"testing"

	"meridian/internal/hlc"
)

func TestValidateRejectsMalformedHistories(t *testing.T) {
	good := func() *hb {
		var b hb
		b.w(1, "x", "a", 1, 0, 1)
		b.r(1, "x", "a", 1, 2, 3)
		b.indet(2, "x", "b", 0)
		b.r(2, "x", "", 0, 1, 2) // overlaps the abandoned write: allowed
		b.failed(3, "x", "c", 0, 1)
		return &b
	}
	if err := good().h.Validate(); err != nil {
		t.Fatalf("well-formed history rejected: %v", err)
	}
	cases := []struct {
		name, want string
		mutate     func(b *hb)
	}{
		{"duplicate ID", "duplicate op ID", func(b *hb) { b.h[1].ID = 0 }},
		{"ok returned before invoked", "returned before", func(b *hb) { b.h[0].Return = -1 }},
		{"failed returned before invoked", "returned before", func(b *hb) { b.h[4].Return = -1 }},
		{"overlapping ops", "overlapping", func(b *hb) { b.r(1, "y", "", 0, 2, 5) }},
		{"op invoked before the previous returned", "overlapping", func(b *hb) { b.h[1].Invoke = 0 }},
		{"empty write value", "empty value", func(b *hb) { b.h[0].Value = ""; b.h[1].Value = "" }},
		{"duplicate written value", "written twice", func(b *hb) { b.w(4, "y", "a", 9, 0, 1) }},
		{"duplicate failed value", "written twice", func(b *hb) { b.failed(4, "y", "c", 0, 1) }},
		{"ok write without version", "without a version", func(b *hb) { b.w(4, "y", "q", 0, 0, 1).Version = hlc.Version{} }},
		{"unknown kind", "unknown kind", func(b *hb) { b.h[0].Kind = 9 }},
		{"unknown outcome", "unknown outcome", func(b *hb) { b.h[0].Outcome = 9 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := good()
			c.mutate(b)
			err := b.h.Validate()
			if err == nil {
				t.Fatal("malformed history accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
			if v := CheckAll(b.h, nil, Options{}); len(v) != 1 || v[0].Checker != CheckerHistory {
				t.Fatalf("CheckAll must report only the malformed history, got %v", v)
			}
		})
	}
}

func TestCheckAll(t *testing.T) {
	var b hb
	b.w(1, "x", "a", 1, 0, 1)
	b.w(1, "x", "b", 2, 2, 3)
	b.r(2, "x", "a", 1, 4, 5) // SC, not linearizable
	final := []ReplicaState{st("n1", "x", "b", 2), st("n2", "x", "b", 2)}
	if v := CheckAll(b.h, final, Options{}); v != nil {
		t.Fatalf("want no violations without linearizability, got %v", v)
	}
	v := CheckAll(b.h, final, Options{Linearizability: true, LinearizabilityTimeout: linTimeout})
	if len(v) != 1 || v[0].Checker != CheckerLinearizable {
		t.Fatalf("want one linearizability violation, got %v", v)
	}
	// Every checker at once.
	b.r(2, "x", "", 0, 6, 7) // SC: absent after seeing a
	final = []ReplicaState{st("n1", "x", "a", 1), st("n2", "x", "", 0)}
	got := map[string]bool{}
	for _, v := range CheckAll(b.h, final, Options{Linearizability: true, LinearizabilityTimeout: linTimeout}) {
		got[v.Checker] = true
	}
	for _, c := range []string{CheckerSequential, CheckerDurable, CheckerConvergent, CheckerLinearizable} {
		if !got[c] {
			t.Errorf("%s violation missing: %v", c, got)
		}
	}
}
