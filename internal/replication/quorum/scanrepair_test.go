package quorum_test

import (
	"fmt"
	"testing"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/wire/peerpb"
)

// A scan at QUORUM repairs what it reads, as a read does: here n1 alone holds the newest
// versions of some keys (writes at ONE whose other copies were lost). A scan coordinated by n1
// reads n1 and one other replica, writes those keys to it, and answers only once it has
// acknowledged them — so a later read at QUORUM that does not ask n1 still sees them.
func TestScanAtQuorumRepairsWhatItReads(t *testing.T) {
	h := replicationtest.New(t, "quorum", 3, 1, map[string]string{"scan_page_bytes": "200B"})
	for i := range 30 {
		h.Propose(1, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte(fmt.Sprintf("key%02d", i)), Value: []byte("old"), Level: config.LevelAll})
		h.Stabilize()
	}
	// Every third key gets a newer version that reaches n1 only.
	for i := 0; i < 30; i += 3 {
		h.Propose(1, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte(fmt.Sprintf("key%02d", i)), Value: []byte("new"), Level: config.LevelOne})
		h.Drop(func(e *peerpb.Envelope) bool { _, ok := e.Msg.(*peerpb.Envelope_Write); return ok })
		h.Stabilize()
	}
	for _, r := range h.TakeReplies() {
		if r.Err != nil {
			t.Fatalf("write: %v", r.Err)
		}
	}
	id := h.Propose(1, engine.Request{Op: engine.OpScan, Keyspace: "ks", Limit: 100, Level: config.LevelQuorum})
	// The scan does not answer while its repairs are held back: each page waits for its own.
	repairs := 0
	for range 100 {
		var held []*peerpb.Envelope
		for range 100 {
			held = append(held, h.Drop(func(e *peerpb.Envelope) bool { _, ok := e.Msg.(*peerpb.Envelope_Write); return ok })...)
			if len(h.Deliver(func(*peerpb.Envelope) bool { return true })) == 0 {
				break
			}
		}
		if len(held) == 0 {
			break
		}
		if _, ok := h.Reply(id); ok {
			t.Fatal("the scan answered before its repairs were acknowledged")
		}
		repairs += len(held)
		h.Queue = append(h.Queue, held...)
		h.Deliver(func(e *peerpb.Envelope) bool { _, ok := e.Msg.(*peerpb.Envelope_Write); return ok })
	}
	if repairs != 10 {
		t.Fatalf("%d repair writes, want 10 (the keys only n1 held, to the one other replica asked)", repairs)
	}
	h.Stabilize()
	r, ok := h.Reply(id)
	if !ok || r.Err != nil {
		t.Fatalf("scan: ok=%v err=%v", ok, r.Err)
	}
	if len(r.Items) != 30 {
		t.Fatalf("%d items, want 30", len(r.Items))
	}
	for i, it := range r.Items {
		want := "old"
		if i%3 == 0 {
			want = "new"
		}
		if string(it.Value) != want {
			t.Errorf("%s = %q, want %q", it.Key, it.Value, want)
		}
	}
	if n := counters(h, 1).ScanRepairs.Load(); n != 10 {
		t.Errorf("%d records repaired, want 10", n)
	}
	// A quorum without n1 now holds every newest version.
	for i := 0; i < 30; i += 3 {
		key := fmt.Sprintf("key%02d", i)
		holders := 0
		for _, rec := range h.Newest(key) {
			if string(rec.Value) == "new" {
				holders++
			}
		}
		if holders < 2 {
			t.Errorf("%s: %d replicas hold the newest version after the scan", key, holders)
		}
	}
}
