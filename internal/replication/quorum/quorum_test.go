package quorum_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/hlc"
	_ "meridian/internal/replication/quorum"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/wire/peerpb"
)

// staleReadSearch runs random schedules — writes from random coordinators, messages delivered
// in random order or dropped — and after every acknowledged write reads the key through a
// random coordinator. It returns the number of reads that returned something older than an
// acknowledged write. With R + W > N this must be zero; with R + W ≤ N the search must find
// stale reads, which proves the check can fail.
func staleReadSearch(t *testing.T, seeds int, readLevel, writeLevel config.Level) (stale, reads int) {
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 42))
		h := replicationtest.New(t, "quorum", 3, 1, nil)
		var acked hlc.Version
		for step := 0; step < 30; step++ {
			node := uint32(rng.IntN(3) + 1)
			id := h.Propose(node, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: []byte{byte(step)}, Level: writeLevel})
			// Deliver a random subset of messages in random order until the write answers;
			// drop some of the writes to other replicas outright.
			for round := 0; round < 50; round++ {
				if r, ok := h.Reply(id); ok {
					if r.Err == nil && acked.Less(r.Version) {
						acked = r.Version
					}
					break
				}
				rng.Shuffle(len(h.Queue), func(i, j int) { h.Queue[i], h.Queue[j] = h.Queue[j], h.Queue[i] })
				if len(h.Queue) == 0 {
					break
				}
				env := h.Queue[0]
				if _, isWrite := env.Msg.(*peerpb.Envelope_Write); isWrite && rng.IntN(3) == 0 {
					h.Drop(func(e *peerpb.Envelope) bool { return e == env })
					continue
				}
				h.Deliver(func(e *peerpb.Envelope) bool { return e == env })
			}
			h.TakeReplies()
			// Leave the remaining messages of this write in flight, and read.
			reader := uint32(rng.IntN(3) + 1)
			rid := h.Propose(reader, engine.Request{Op: engine.OpGet, Keyspace: "ks", Key: []byte("k"), Level: readLevel})
			for round := 0; round < 200; round++ {
				if _, ok := h.Reply(rid); ok {
					break
				}
				// Deliver only the read's own traffic, so stale replicas stay stale.
				var mine []*peerpb.Envelope
				for _, e := range h.Queue {
					switch m := e.Msg.(type) {
					case *peerpb.Envelope_Read, *peerpb.Envelope_ReadReply:
						mine = append(mine, e)
					case *peerpb.Envelope_Write:
						if m.Write.Record.Version != nil && e.From == reader {
							mine = append(mine, e) // read repair
						}
					case *peerpb.Envelope_WriteAck:
						if e.To == reader {
							mine = append(mine, e)
						}
					}
				}
				if len(mine) == 0 {
					break
				}
				env := mine[rng.IntN(len(mine))]
				h.Deliver(func(e *peerpb.Envelope) bool { return e == env })
			}
			r, ok := h.Reply(rid)
			if !ok || r.Err != nil {
				continue
			}
			reads++
			if r.Version.Less(acked) {
				stale++
			}
			h.TakeReplies()
			h.Tick(time.Millisecond)
		}
	}
	return stale, reads
}

func TestQuorumReadsSeeAcknowledgedWrites(t *testing.T) {
	stale, reads := staleReadSearch(t, 30, config.LevelQuorum, config.LevelQuorum)
	if reads == 0 {
		t.Fatal("no read completed: the search exercised nothing")
	}
	if stale > 0 {
		t.Fatalf("QUORUM/QUORUM: %d of %d reads returned a version older than an acknowledged write", stale, reads)
	}
	stale, reads = staleReadSearch(t, 30, config.LevelAll, config.LevelOne)
	if stale > 0 {
		t.Fatalf("ALL/ONE: %d of %d reads were stale", stale, reads)
	}
}

// TestStaleReadSearchCatchesWeakLevels is the broken variant: R + W ≤ N must be caught.
func TestStaleReadSearchCatchesWeakLevels(t *testing.T) {
	stale, reads := staleReadSearch(t, 30, config.LevelOne, config.LevelOne)
	if stale == 0 {
		t.Fatalf("ONE/ONE: no stale read found in %d reads; the search cannot tell weak levels apart", reads)
	}
	t.Logf("ONE/ONE: %d of %d reads stale (expected)", stale, reads)
}

func TestLastWriterWinsIgnoresDeliveryOrder(t *testing.T) {
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		h := replicationtest.New(t, "quorum", 3, 1, nil)
		var newest hlc.Version
		for i := range 10 {
			id := h.Propose(uint32(rng.IntN(3)+1), engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: []byte("k"), Value: []byte{byte(i)}, Level: config.LevelOne})
			r, ok := h.Reply(id)
			if !ok || r.Err != nil {
				t.Fatalf("seed %d: ONE write through a replica must answer at once: %+v", seed, r)
			}
			if newest.Less(r.Version) {
				newest = r.Version
			}
			h.Tick(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
		for len(h.Queue) > 0 {
			rng.Shuffle(len(h.Queue), func(i, j int) { h.Queue[i], h.Queue[j] = h.Queue[j], h.Queue[i] })
			env := h.Queue[0]
			h.Deliver(func(e *peerpb.Envelope) bool { return e == env })
		}
		for id, rec := range h.Newest("k") {
			if rec.Version != newest {
				t.Fatalf("seed %d: node %d holds %v, newest write is %v", seed, id, rec.Version, newest)
			}
		}
		if len(h.Newest("k")) != 3 {
			t.Fatalf("seed %d: not every replica holds the key", seed)
		}
	}
}

func TestMalformedPeerMessagesAreIgnored(t *testing.T) {
	h := replicationtest.New(t, "quorum", 3, 1, nil)
	core := h.Engine(1, "quorum")
	bad := []*peerpb.Envelope{
		nil,
		{From: 2, To: 1},
		{From: 9, To: 1, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{}}},
		{From: 2, To: 3, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{Record: &peerpb.Record{Keyspace: "ks", Key: []byte("k")}}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{Record: &peerpb.Record{Keyspace: "nope", Key: []byte("k"), Version: &peerpb.Version{WallNanos: 1}}}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_Write{Write: &peerpb.WriteRequest{Record: &peerpb.Record{Keyspace: "ks", Key: []byte{}, Version: &peerpb.Version{WallNanos: 1}}}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_ReadReply{ReadReply: &peerpb.ReadReply{RequestId: 77, Found: true}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_AeDigest{AeDigest: &peerpb.AEDigest{Keyspace: "ks", BucketHashes: []uint64{1, 2}}}},
		{From: 2, To: 1, Msg: &peerpb.Envelope_AePush{AePush: &peerpb.AEPush{Records: []*peerpb.Record{nil, {Keyspace: "ks"}}}}},
	}
	for i, env := range bad {
		core.Step(h.Now, env)
		rd := core.Ready()
		if len(rd.Writes) != 0 || len(rd.Replies) != 0 || len(rd.Jobs) != 0 {
			t.Fatalf("message %d: malformed input produced output %+v", i, rd)
		}
	}
}

// TestInteraction runs the quorum protocol's trace scripts in testdata/
// (replicationtest.RunInteractions documents the commands).
func TestInteraction(t *testing.T) {
	replicationtest.RunInteractions(t, "testdata", "quorum")
}
