package replicationtest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/tools/check"
	"meridian/internal/wire/peerpb"
)

// TxnFaults configures RunTxnFaults.
type TxnFaults struct {
	// Keyspace is the transactional keyspace (default "ks"); Keys the registers the
	// transactions read and write (at least 4).
	Keyspace string
	Keys     []string
	Seed     uint64
	// ReadOnlyOneIn: one transaction in this many is read-only (0: none).
	ReadOnlyOneIn int
	// Total transactions (default 120), run by Clients concurrent clients (default 6).
	Total, Clients int
	// Restarted, when set, is called after a node restarts (a test that set a mutation on
	// the node's engine sets it again).
	Restarted func(node uint32)
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

// RunTxnFaults runs the transaction path of a product engine under faults: clients on every
// node run read-write transactions (read two registers, write one or two, read or not) and
// read-only ones, each read a TxnRead at the snapshots the earlier ones fixed and the commit a
// TxnCommit with the versions read, while messages are delayed, reordered and lost and nodes
// restart; the history must be serializable (Elle's method, internal/tools/check). It returns
// the violation, if any.
func RunTxnFaults(t testing.TB, h *Harness, f TxnFaults) error {
	t.Helper()
	if f.Keyspace == "" {
		f.Keyspace = "ks"
	}
	if len(f.Keys) < 4 {
		t.Fatalf("RunTxnFaults needs at least 4 keys, got %d", len(f.Keys))
	}
	if f.Total <= 0 {
		f.Total = 120
	}
	if f.Clients <= 0 {
		f.Clients = 6
	}
	rng := rand.New(rand.NewPCG(f.Seed, 15))
	var hist check.TxnHistory
	hist.Registers = true
	nextValue := int64(0)
	nextID := 0
	clients := make([]*txnClient, f.Clients)
	record := func(c *txnClient, outcome check.TxnOutcome) {
		c.txn.Outcome = outcome
		c.txn.Return = h.Now.UnixNano()
		hist.Txns = append(hist.Txns, *c.txn)
	}
	start := func(i int) *txnClient {
		nextID++
		c := &txnClient{node: h.IDs[i%len(h.IDs)], txn: &check.Txn{ID: nextID, Process: i, Invoke: h.Now.UnixNano()}, versions: map[string]uint64{}, writes: map[string]int64{}}
		c.readOnly = f.ReadOnlyOneIn > 0 && rng.IntN(f.ReadOnlyOneIn) == 0
		perm := rng.Perm(len(f.Keys))
		for _, k := range perm[:2] {
			c.keys = append(c.keys, f.Keys[k])
		}
		if !c.readOnly {
			// Write one or two keys, read or not (write skew needs a transaction that writes
			// what it did not read).
			for _, k := range perm[1+rng.IntN(2) : 3+rng.IntN(2)] {
				nextValue++
				c.writes[f.Keys[k]] = nextValue
			}
		}
		return c
	}
	send := func(c *txnClient) {
		deadline := h.Now.Add(3 * time.Second)
		c.sentAt = h.Now
		if c.next < len(c.keys) {
			req := engine.Request{Op: engine.OpTxnRead, Keyspace: f.Keyspace, Key: []byte(c.keys[c.next]), Deadline: deadline,
				Txn: &engine.TxnRequest{Snapshots: c.snaps, ReadOnly: c.readOnly}}
			c.pending, c.commit = h.Propose(c.node, req), false
			return
		}
		tx := &engine.TxnRequest{Snapshots: c.snaps}
		for _, k := range c.keys {
			tx.Reads = append(tx.Reads, []byte(k))
			tx.ReadVersions = append(tx.ReadVersions, c.versions[k])
		}
		for k, v := range c.writes {
			tx.Writes = append(tx.Writes, engine.TxnWrite{Key: []byte(k), Value: []byte(strconv.FormatInt(v, 10))})
			c.txn.Ops = append(c.txn.Ops, check.Mop{Kind: check.MopWrite, Key: k, Value: v})
		}
		req := engine.Request{Op: engine.OpTxnCommit, Keyspace: f.Keyspace, Txn: tx, Deadline: deadline}
		c.pending, c.commit = h.Propose(c.node, req), true
	}
	done := 0
	for step := 0; done < f.Total && step < 20_000; step++ {
		for i := range clients {
			c := clients[i]
			if c == nil && done+activeClients(clients) < f.Total {
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
					record(c, check.TxnOK) // at one snapshot: no commit
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
			node := h.IDs[rng.IntN(len(h.IDs))]
			h.Restart(node)
			if f.Restarted != nil {
				f.Restarted(node)
			}
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
		msg := fmt.Sprintf("seed %d: not serializable: %v (%d transactions, %d committed)", f.Seed, res, len(hist.Txns), committed)
		for _, a := range anomalies {
			msg += "\n  " + a.String()
		}
		return fmt.Errorf("%s", msg)
	}
	if committed < f.Total/6 {
		t.Errorf("seed %d: only %d of %d transactions committed: the test hardly tests", f.Seed, committed, len(hist.Txns))
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
