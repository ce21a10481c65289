package quorum_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/placement"
	"meridian/internal/replication/coord"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/wire/peerpb"
)

// largeValue is a value of n bytes whose every 4 KiB chunk differs, so a chunk put at the
// wrong offset shows.
func largeValue(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i/4096*7 + i%251)
	}
	return v
}

// notReplica is a 3-region cluster where node 1 coordinates but holds no replica: its reads
// of a large value must fetch it from n2 and n3.
func notReplica(t *testing.T, opts map[string]string) *replicationtest.Harness {
	return replicationtest.NewWithPlacement(t, "quorum", 3, 1, opts, func(m *placement.Map) *placement.Map {
		ks := *m.Keyspaces["ks"]
		ks.Partitions = append([]placement.Partition(nil), ks.Partitions...)
		ks.Partitions[0].Replicas = []uint32{2, 3}
		return m.With(&ks)
	})
}

// chunkSources counts the chunks each node served.
func chunkSources(envs []*peerpb.Envelope) map[uint32]int {
	out := map[uint32]int{}
	for _, e := range envs {
		if r, ok := e.Msg.(*peerpb.Envelope_ReadChunkReply); ok && !r.ReadChunkReply.Missing {
			out[e.From]++
		}
	}
	return out
}

// deliverAll delivers until the queue is empty, returning everything delivered.
func deliverAll(h *replicationtest.Harness) []*peerpb.Envelope {
	var all []*peerpb.Envelope
	for range 10_000 {
		d := h.Deliver(func(*peerpb.Envelope) bool { return true })
		if len(d) == 0 {
			break
		}
		all = append(all, d...)
	}
	return all
}

func counters(h *replicationtest.Harness, node uint32) *coord.LargeReadStats {
	return h.Engine(node, config.ProtocolQuorum).(*coord.Core).LargeReadCounters()
}

func TestLargeReadFetchesInChunks(t *testing.T) {
	const size = 50_000 // 13 chunks of 4 KiB
	for _, tc := range []struct {
		selector string
		extra    map[string]string
		// wantSources: how many replicas served chunks.
		wantSources int
	}{
		{selector: "nearest", wantSources: 1},
		{selector: "snitch", wantSources: 1},
		{selector: "mayflower", extra: map[string]string{"network.node_bandwidth": "10MB", "network.wan_bandwidth": "5MB"}, wantSources: 2},
		{selector: "mayflower", extra: map[string]string{"network.node_bandwidth": "10MB", "mayflower_split": "never"}, wantSources: 1},
		{selector: "mayflower", wantSources: 1}, // unconfigured: nearest
	} {
		t.Run(fmt.Sprintf("%s-%v", tc.selector, tc.extra), func(t *testing.T) {
			opts := map[string]string{"read_selector": tc.selector, "large_read_bytes": "1KiB", "read_chunk_bytes": "4KiB", "read_window": "2"}
			for k, v := range tc.extra {
				opts[k] = v
			}
			h := notReplica(t, opts)
			val := largeValue(size)
			put := h.Propose(2, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: val, Level: config.LevelAll})
			h.Stabilize()
			if r, ok := h.Reply(put); !ok || r.Err != nil {
				t.Fatalf("put: %+v %v", r, ok)
			}
			get := h.Propose(1, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k"), Level: config.LevelOne})
			delivered := deliverAll(h)
			r, ok := h.Reply(get)
			if !ok || r.Err != nil || !r.Found || !bytes.Equal(r.Value, val) {
				t.Fatalf("get: ok=%v err=%v found=%v len=%d equal=%v", ok, r.Err, r.Found, len(r.Value), bytes.Equal(r.Value, val))
			}
			src := chunkSources(delivered)
			total := 0
			for _, n := range src {
				total += n
			}
			// A split read's endgame may ask a chunk twice, one at a time per source.
			if len(src) != tc.wantSources || total < 13 || total > 13+tc.wantSources-1 {
				t.Errorf("chunks by source %v (total %d), want %d sources and 13 chunks", src, total, tc.wantSources)
			}
			for _, e := range delivered {
				if rr, ok := e.Msg.(*peerpb.Envelope_ReadReply); ok && (!rr.ReadReply.ValueOmitted || len(rr.ReadReply.Record.Value) != 0) {
					t.Errorf("the header read carried the value: %v", rr.ReadReply)
				}
			}
			st := counters(h, 1)
			if st.BytesFetched.Load() < size || st.BytesWasted.Load() > int64(tc.wantSources-1)*4096 {
				t.Errorf("counters: fetched %d wasted %d", st.BytesFetched.Load(), st.BytesWasted.Load())
			}
		})
	}
}

// A replica that lacks the version answers "missing"; the fetch goes on from the other one.
func TestLargeReadSkipsAReplicaWithoutTheVersion(t *testing.T) {
	h := notReplica(t, map[string]string{"read_selector": "mayflower", "large_read_bytes": "1KiB", "read_chunk_bytes": "4KiB",
		"network.node_bandwidth": "10MB", "network.wan_bandwidth": "5MB"})
	val := largeValue(30_000)
	// The write reaches n2 only (ONE); n3 never gets it.
	put := h.Propose(2, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: val, Level: config.LevelOne})
	h.Drop(func(e *peerpb.Envelope) bool { _, w := e.Msg.(*peerpb.Envelope_Write); return w && e.To == 3 })
	h.Stabilize()
	if r, ok := h.Reply(put); !ok || r.Err != nil {
		t.Fatalf("put: %+v", r)
	}
	get := h.Propose(1, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k"), Level: config.LevelOne})
	delivered := deliverAll(h)
	r, ok := h.Reply(get)
	if !ok || r.Err != nil || !bytes.Equal(r.Value, val) {
		t.Fatalf("get: ok=%v err=%v len=%d", ok, r.Err, len(r.Value))
	}
	missing := 0
	for _, e := range delivered {
		if m, ok := e.Msg.(*peerpb.Envelope_ReadChunkReply); ok && m.ReadChunkReply.Missing {
			missing++
			if e.From != 3 {
				t.Errorf("n%d said missing", e.From)
			}
		}
	}
	if missing == 0 {
		t.Errorf("the split never asked n3 (sources %v)", chunkSources(delivered))
	}
	if counters(h, 1).SourcesFailed.Load() != 1 {
		t.Errorf("sources failed = %d, want 1", counters(h, 1).SourcesFailed.Load())
	}
}

// A QUORUM read whose newest version is large fetches it, then repairs the stale replica with
// the whole record.
func TestLargeReadRepairsWithTheWholeValue(t *testing.T) {
	h := replicationtest.New(t, "quorum", 3, 1, map[string]string{"large_read_bytes": "1KiB", "read_chunk_bytes": "4KiB"})
	old := []byte("small")
	h.Propose(1, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: old, Level: config.LevelAll})
	h.Stabilize()
	val := largeValue(20_000)
	// The large write reaches n2 and n3 only; n1 keeps the small one.
	h.Propose(2, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: val, Level: config.LevelOne})
	h.Drop(func(e *peerpb.Envelope) bool { _, w := e.Msg.(*peerpb.Envelope_Write); return w && e.To == 1 })
	h.Stabilize()
	get := h.Propose(1, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k"), Level: config.LevelQuorum})
	delivered := deliverAll(h)
	r, ok := h.Reply(get)
	if !ok || r.Err != nil || !bytes.Equal(r.Value, val) {
		t.Fatalf("get: ok=%v err=%v len=%d", ok, r.Err, len(r.Value))
	}
	if len(chunkSources(delivered)) == 0 {
		t.Errorf("no chunk was fetched")
	}
	if got := h.Newest("k")[1]; !bytes.Equal(got.Value, val) {
		t.Errorf("n1 was not repaired with the whole value: %d bytes", len(got.Value))
	}
}

// Hedged: the nearest replica is silent, so after hedge_after the next one is asked and the
// read completes from it.
func TestHedgedReadAsksTheNextReplica(t *testing.T) {
	h := notReplica(t, map[string]string{"read_selector": "hedged", "hedge_after": "50ms", "large_read_bytes": "1KiB", "read_chunk_bytes": "4KiB"})
	val := largeValue(20_000)
	h.Propose(2, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: val, Level: config.LevelAll})
	h.Stabilize()
	get := h.Propose(1, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k"), Level: config.LevelOne})
	// The header and n2's first chunks go through; n2's later chunk replies are lost.
	h.Deliver(func(e *peerpb.Envelope) bool { _, ok := e.Msg.(*peerpb.Envelope_Read); return ok })
	h.Deliver(func(e *peerpb.Envelope) bool { _, ok := e.Msg.(*peerpb.Envelope_ReadReply); return ok })
	h.Drop(func(e *peerpb.Envelope) bool { _, ok := e.Msg.(*peerpb.Envelope_ReadChunk); return ok && e.To == 2 })
	h.Tick(100 * time.Millisecond)
	delivered := h.Deliver(func(e *peerpb.Envelope) bool { return true })
	delivered = append(delivered, deliverAll(h)...)
	r, ok := h.Reply(get)
	if !ok || r.Err != nil || !bytes.Equal(r.Value, val) {
		t.Fatalf("get: ok=%v err=%v len=%d", ok, r.Err, len(r.Value))
	}
	if src := chunkSources(delivered); src[3] == 0 {
		t.Errorf("the hedge (n3) served nothing: %v", src)
	}
}
