package raft_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/replication/raft"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/tools/check"
	"meridian/internal/wire/peerpb"
)

// The transaction path of the product engine (not the simulator's model of it) under faults:
// clients on every node run read-write and read-only transactions on registers of two
// partitions while messages are delayed, reordered and lost and nodes restart; every seed's
// history must be serializable (Elle's method, internal/tools/check).
func TestTxnProductSerializableUnderFaults(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for _, mode := range []string{"sdur", "2pc"} {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed%d", mode, seed), func(t *testing.T) {
				if err := runTxnFaults(t, mode, uint64(seed), ""); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// The test above can fail: with the cores' certification broken (the write→read half of the
// globals' test dropped, a local leaping globals it conflicts with, Algorithm 2's
// certification as printed), some seed's history is not serializable. (The divergence
// mutation complete-before-threshold needs votes that arrive late; every node here holds
// both partitions, so votes are local: the simulator, meridian sim txn, catches it.)
func TestTxnProductCatchesBrokenCertification(t *testing.T) {
	for _, mut := range []string{"global-test-one-way", "leap-ignores-conflicts", "paper-certification"} {
		t.Run(mut, func(t *testing.T) {
			for seed := range 40 {
				err := runTxnFaults(t, "sdur", uint64(seed), mut)
				if err != nil {
					t.Logf("caught at seed %d: %v", seed, err)
					return
				}
			}
			t.Error("40 seeds all looked serializable")
		})
	}
}

// txnClient is one client's transaction in progress.
type txnClient struct {
	node     uint32
	txn      *check.Txn
	readOnly bool
	keys     []string // to read, in order
	writes   map[string]int64
	next     int // next key to read
	snaps    []engine.TxnSnapshot
	versions map[string]uint64
	pending  uint64 // request in flight (0: none)
	commit   bool   // the pending request is the commit
	sentAt   time.Time
}

func runTxnFaults(t *testing.T, mode string, seed uint64, mutation string) error {
	opts := map[string]string{"heartbeat_interval": "100ms", "election_timeout": "500ms", "txn_mode": mode, "log_retain": "20"}
	if mode == "sdur" {
		opts["reorder_threshold"] = "entries:4" // reordering on
		if seed%2 == 1 {
			opts["txn_delay"] = "auto" // and delaying, on every other seed
		}
	}
	h := replicationtest.New(t, "raft", 3, 2, opts)
	setMutation := func() {
		if mutation == "" {
			return
		}
		for _, id := range h.IDs {
			if err := raft.SetTxnMutationForTest(h.Engine(id, "raft").(*raft.Engine), mutation); err != nil {
				t.Fatal(err)
			}
		}
	}
	setMutation()
	rng := rand.New(rand.NewPCG(seed, 15))
	var keys []string
	keys = append(keys, keysOf(t, h, 0, 3)...)
	keys = append(keys, keysOf(t, h, 1, 3)...)
	var hist check.TxnHistory
	hist.Registers = true
	nextValue := int64(0)
	nextID := 0
	clients := make([]*txnClient, 6)
	record := func(c *txnClient, outcome check.TxnOutcome) {
		c.txn.Outcome = outcome
		c.txn.Return = h.Now.UnixNano()
		hist.Txns = append(hist.Txns, *c.txn)
	}
	start := func(i int) *txnClient {
		nextID++
		c := &txnClient{node: uint32(1 + i%3), txn: &check.Txn{ID: nextID, Process: i, Invoke: h.Now.UnixNano()}, versions: map[string]uint64{}, writes: map[string]int64{}}
		c.readOnly = mode == "sdur" && rng.IntN(4) == 0
		perm := rng.Perm(len(keys))
		for _, k := range perm[:2] {
			c.keys = append(c.keys, keys[k])
		}
		if !c.readOnly {
			// Write one or two keys, read or not (write skew across partitions needs a
			// transaction that writes what it did not read).
			for _, k := range perm[1+rng.IntN(2) : 3+rng.IntN(2)] {
				nextValue++
				c.writes[keys[k]] = nextValue
			}
		}
		return c
	}
	send := func(c *txnClient) {
		deadline := h.Now.Add(3 * time.Second)
		c.sentAt = h.Now
		if c.next < len(c.keys) {
			req := engine.Request{Op: engine.OpTxnRead, Keyspace: "ks", Key: []byte(c.keys[c.next]), Deadline: deadline,
				Txn: &engine.TxnRequest{Snapshots: c.snaps, ReadOnly: c.readOnly}}
			c.pending, c.commit = h.Propose(c.node, req), false
			return
		}
		op := txnOp{writes: map[string]string{}, snaps: c.snaps}
		for _, k := range c.keys {
			op.reads = append(op.reads, k)
			op.versions = append(op.versions, c.versions[k])
		}
		for k, v := range c.writes {
			op.writes[k] = strconv.FormatInt(v, 10)
			c.txn.Ops = append(c.txn.Ops, check.Mop{Kind: check.MopWrite, Key: k, Value: v})
		}
		req := commitReq(op)
		req.Deadline = deadline
		c.pending, c.commit = h.Propose(c.node, req), true
	}
	done := 0
	const total = 120
	for step := 0; done < total && step < 20_000; step++ {
		for i := range clients {
			c := clients[i]
			if c == nil && done+activeClients(clients) < total {
				c = start(i)
				clients[i] = c
				send(c)
				continue
			}
			if c == nil {
				continue
			}
			r, ok := h.Reply(c.pending)
			if !ok {
				if h.Now.Sub(c.sentAt) > 5*time.Second { // lost with a restarted node
					if c.commit {
						record(c, check.TxnIndeterminate)
					}
					clients[i], done = nil, done+1
				}
				continue
			}
			if !c.commit {
				if r.Err != nil || r.Txn == nil {
					clients[i], done = nil, done+1 // a read failed: the transaction is given up
					continue
				}
				v, found := int64(0), r.Found
				if found {
					v, _ = strconv.ParseInt(string(r.Value), 10, 64)
				}
				c.txn.Ops = append(c.txn.Ops, check.Mop{Kind: check.MopRead, Key: c.keys[c.next], ReadValue: v, ReadFound: found})
				c.versions[c.keys[c.next]] = r.Txn.Version
				if c.readOnly {
					c.snaps = r.Txn.Vector
				} else {
					c.snaps = appendSnapshot(c.snaps, r.Txn.Snapshot)
				}
				c.next++
				if c.readOnly && c.next == len(c.keys) {
					record(c, check.TxnOK) // at one snapshot vector: no commit
					clients[i], done = nil, done+1
					continue
				}
				send(c)
				continue
			}
			switch {
			case r.Err != nil && errs.KindOf(r.Err) == errs.Timeout:
				record(c, check.TxnIndeterminate)
			case r.Err != nil || r.Txn == nil:
				record(c, check.TxnAborted) // refused before anything was proposed
			case r.Txn.Committed:
				record(c, check.TxnOK)
			default:
				record(c, check.TxnAborted)
			}
			clients[i], done = nil, done+1
		}
		// Faults: deliver a random part of what is queued (the rest waits: reordering), lose
		// a few messages, now and then restart a node.
		lose := rng.Float64() < 0.3
		h.Drop(func(*peerpb.Envelope) bool { return lose && rng.IntN(50) == 0 })
		h.Deliver(func(*peerpb.Envelope) bool { return rng.IntN(3) != 0 })
		if rng.IntN(400) == 0 {
			h.Restart(uint32(1 + rng.IntN(3)))
			setMutation()
		}
		h.Tick(time.Duration(1+rng.IntN(10)) * time.Millisecond)
	}
	committed := 0
	for _, x := range hist.Txns {
		if x.Outcome == check.TxnOK {
			committed++
		}
	}
	res, anomalies := check.CheckSerializable(hist, time.Minute)
	if res != check.Ok {
		msg := fmt.Sprintf("seed %d (%s): not serializable: %v (%d transactions, %d committed)", seed, mode, res, len(hist.Txns), committed)
		for _, a := range anomalies {
			msg += "\n  " + a.String()
		}
		return fmt.Errorf("%s", msg)
	}
	if committed < total/6 {
		t.Errorf("seed %d: only %d of %d transactions committed: the test hardly tests", seed, committed, len(hist.Txns))
	}
	return nil
}

func activeClients(cs []*txnClient) int {
	n := 0
	for _, c := range cs {
		if c != nil {
			n++
		}
	}
	return n
}

func appendSnapshot(s []engine.TxnSnapshot, x engine.TxnSnapshot) []engine.TxnSnapshot {
	for _, y := range s {
		if y.Partition == x.Partition {
			return s
		}
	}
	return append(s, x)
}
