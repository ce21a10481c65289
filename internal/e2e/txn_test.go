package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meridian/client"
)

// TestTxnBankTransfers runs bank transfers between accounts (of two partitions, for the raft
// modes; catenae replicates the keyspace whole) through every node of a three-node cluster, in
// each transaction mode, while read-only transactions check
// that the total never changes; one node is SIGKILLed in the middle and restarted. At the end
// every node reads the same balances, and they add up.
func TestTxnBankTransfers(t *testing.T) {
	skipShort(t)
	for _, mode := range []string{"sdur", "2pc", "catenae"} {
		t.Run(mode, func(t *testing.T) { runBank(t, mode) })
	}
}

const (
	bankAccounts = 8
	bankInitial  = 100
	bankRunFor   = 4 * time.Second
)

// bankKey spreads the accounts over the byte ranges of the keyspace's partitions.
func bankKey(i int) []byte {
	return append([]byte{byte(i * 256 / bankAccounts)}, fmt.Sprintf("acct-%02d", i)...)
}

func runBank(t *testing.T, mode string) {
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	spec := &client.KeyspaceSpec{Name: "bank", Protocol: "raft", Partitions: 2, ReplicasPerRegion: 1,
		Options: map[string]string{"txn_mode": mode, "election_timeout": "1s"}}
	if mode == "catenae" {
		spec = &client.KeyspaceSpec{Name: "bank", Protocol: "catenae", Partitions: 1, ReplicasPerRegion: 1}
	}
	_, _, err := c.client("n1").CreateKeyspace(ctx, spec)
	cancel()
	if err != nil {
		t.Fatalf("create keyspace: %v", err)
	}
	// Plain writes are refused on a transactional keyspace.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	_, err = c.client("n1").Put(ctx, "bank", []byte("x"), []byte("1"))
	cancel()
	if err == nil {
		t.Fatal("a plain put on a transactional keyspace was accepted")
	}
	keys := make([][]byte, bankAccounts)
	for i := range keys {
		keys[i] = bankKey(i)
	}
	// Open the accounts (retrying while the groups elect leaders).
	deadline := time.Now().Add(waitLimit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tx := c.client("n1").Begin("bank")
		for _, k := range keys {
			tx.Put(k, []byte(strconv.Itoa(bankInitial)))
		}
		_, err := tx.Commit(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("open the accounts: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	total := func(cl *client.Client) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		vals, err := cl.ReadOnly(ctx, "bank", keys)
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, k := range keys {
			n, err := strconv.Atoi(string(vals[string(k)]))
			if err != nil {
				return 0, fmt.Errorf("account %q holds %q", k, vals[string(k)])
			}
			sum += n
		}
		return sum, nil
	}

	var committed, aborted, failed, checks atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var badMu sync.Mutex
	var bad []string
	for w := range 6 {
		name := c.names()[w%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for !stop.Load() {
				cl := c.client(name)
				if w%3 == 2 { // a checker: read-only transactions
					sum, err := total(cl)
					if err != nil {
						failed.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					checks.Add(1)
					if sum != bankAccounts*bankInitial {
						badMu.Lock()
						bad = append(bad, fmt.Sprintf("node %s read a total of %d", name, sum))
						badMu.Unlock()
					}
					continue
				}
				from, to := rng.IntN(bankAccounts), rng.IntN(bankAccounts)
				if from == to {
					continue
				}
				err := transfer(cl, keys[from], keys[to], 1+rng.IntN(10))
				switch {
				case err == nil:
					committed.Add(1)
				case errors.Is(err, client.ErrAborted):
					aborted.Add(1)
				default:
					failed.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(bankRunFor / 2)
	c.kill("n3")
	c.start("n3")
	time.Sleep(bankRunFor / 2)
	stop.Store(true)
	wg.Wait()
	t.Logf("%s: %d transfers committed, %d aborted, %d failed (timeouts, a node down); %d read-only checks", mode, committed.Load(), aborted.Load(), failed.Load(), checks.Load())
	for _, b := range bad {
		t.Error(b)
	}
	if committed.Load() == 0 || checks.Load() == 0 {
		t.Fatalf("nothing committed (%d) or checked (%d)", committed.Load(), checks.Load())
	}
	c.waitReady("n3")
	// Every node reads the same balances once the restarted node caught up. A read-only read
	// is at its node's validated prefix, which may lag the others' for a while: every node is
	// read again until they agree.
	deadline = time.Now().Add(waitLimit)
	for {
		reads := map[string]map[string][]byte{}
		var errs []error
		for _, name := range c.names() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			vals, err := c.client(name).ReadOnly(ctx, "bank", keys)
			cancel()
			reads[name] = vals
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
		agree := len(errs) == 0
		for _, name := range c.names() {
			agree = agree && sameBalances(reads[c.names()[0]], reads[name])
		}
		if agree {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes never read the same balances: %v (errors %v)", reads, errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if sum, err := total(c.client("n3")); err != nil || sum != bankAccounts*bankInitial {
		t.Fatalf("final total %d (err %v), want %d", sum, err, bankAccounts*bankInitial)
	}
}

// transfer moves amount from one account to another in one transaction.
func transfer(cl *client.Client, from, to []byte, amount int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx := cl.Begin("bank")
	vals, err := tx.GetMany(ctx, [][]byte{from, to})
	if err != nil {
		tx.Abort()
		return err
	}
	a, err1 := strconv.Atoi(string(vals[0].Value))
	b, err2 := strconv.Atoi(string(vals[1].Value))
	if err1 != nil || err2 != nil {
		tx.Abort()
		return fmt.Errorf("balances %q %q", vals[0].Value, vals[1].Value)
	}
	tx.Put(from, []byte(strconv.Itoa(a-amount)))
	tx.Put(to, []byte(strconv.Itoa(b+amount)))
	_, err = tx.Commit(ctx)
	return err
}

func sameBalances(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}
