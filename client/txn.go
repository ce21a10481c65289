package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"

	"meridian/api/meridianpb"
)

// Transactions (keyspaces with txn_mode sdur: Geo-SDUR, docs/transactions.md).
//
//	t := c.Begin("accounts")
//	a, _, err := t.Get(ctx, []byte("alice"))
//	b, _, err := t.Get(ctx, []byte("bob"))
//	t.Put([]byte("alice"), debit(a))
//	t.Put([]byte("bob"), credit(b))
//	res, err := t.Commit(ctx)
//	var abort *client.AbortError
//	if errors.As(err, &abort) { /* a conflict: run the transaction again */ }
//
// A transaction reads each partition at one snapshot (the first read of a partition fixes
// it), buffers its writes in the client, and sends everything at Commit, where the cluster
// certifies it: it commits if nothing it read was overwritten since its snapshots, else it
// aborts. An abort is an *AbortError; a timeout (codes.DeadlineExceeded) at Commit means the
// outcome is unknown: the transaction may have committed.

// ErrTxnDone is returned by a Txn's methods after Commit or Abort: a Txn is used once.
var ErrTxnDone = errors.New("client: the transaction has already been committed or aborted; begin a new one")

// ErrAborted matches every *AbortError with errors.Is.
var ErrAborted = errors.New("transaction aborted")

// AbortError is a transaction that did not commit: certification found a conflict (another
// transaction wrote what it read, after its snapshot), or the cluster gave up on it. Nothing
// of it was written; running it again (a new Txn) may commit.
type AbortError struct {
	// Reason is the cluster's explanation.
	Reason string
	// Key is the key whose conflict caused the abort (nil: none in particular).
	Key []byte
	// Txn is the transaction's ID, for logs and operators.
	Txn string
}

func (e *AbortError) Error() string {
	msg := "transaction aborted"
	if e.Txn != "" {
		msg = fmt.Sprintf("transaction %s aborted", e.Txn)
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if len(e.Key) > 0 {
		msg += fmt.Sprintf(" (key %q)", e.Key)
	}
	return msg
}

// Is makes errors.Is(err, ErrAborted) true for every abort.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// CommitResult describes a committed transaction.
type CommitResult struct {
	// Txn is the transaction's ID ("" when nothing was sent: no reads and no writes).
	Txn string
	// Version is the version the writes were applied at in the first of the transaction's
	// partitions (sdur: that partition's snapshot counter).
	Version uint64
	// Coordinator is the node that submitted the transaction.
	Coordinator string
}

// TxnValue is one key read in a transaction.
type TxnValue struct {
	Key   []byte
	Value []byte
	Found bool
	// Version is the key's version as read (sdur: the snapshot counter of its last write at
	// the transaction's snapshot); 0: never written, or the value is the transaction's own
	// write.
	Version uint64
}

// txnRead is a key read from the cluster (what Get returns again for it).
type txnRead struct {
	value     []byte
	found     bool
	version   uint64
	partition uint32
}

// Txn is a transaction on one keyspace, from Begin to Commit or Abort. Its methods may be
// called from several goroutines; they run one at a time.
type Txn struct {
	c        *Client
	keyspace string
	options  []Option

	mu   sync.Mutex
	done bool
	// snapshots: the snapshot counter of each partition read so far.
	snapshots map[uint32]uint64
	// reads and readOrder: the keys read from the cluster, in the order first read.
	reads     map[string]txnRead
	readOrder []string
	// writes and writeOrder: the buffered writes (the last per key), in the order first
	// written.
	writes     map[string]*meridianpb.TxnWrite
	writeOrder []string
}

// Begin starts a transaction on keyspace, which must have txn_mode sdur. Nothing is sent
// until the first read. The options apply to every call of the transaction (Timeout: the
// server-side deadline of each read and of the commit; Consistency and WriteMode do not
// apply).
func (c *Client) Begin(keyspace string, options ...Option) *Txn {
	return &Txn{c: c, keyspace: keyspace, options: options, snapshots: map[uint32]uint64{},
		reads: map[string]txnRead{}, writes: map[string]*meridianpb.TxnWrite{}}
}

// Keyspace returns the transaction's keyspace.
func (t *Txn) Keyspace() string { return t.keyspace }

// Get reads key in the transaction. A key the transaction wrote returns the buffered write
// (not found after a Delete); a key it read before returns the same value again; any other
// key is read from the cluster at the transaction's snapshot of the key's partition (the
// first read of a partition fixes that snapshot). A read the cluster refuses as a conflict
// (the snapshot is older than the partition keeps) ends the transaction with an
// *AbortError, as an abort at commit does.
func (t *Txn) Get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	vals, err := t.GetMany(ctx, [][]byte{key})
	if err != nil {
		return nil, false, err
	}
	return vals[0].Value, vals[0].Found, nil
}

// GetMany reads keys in the transaction (as Get does each) and returns one TxnValue per key,
// in the order given. The keys the transaction has neither written nor read yet are read in
// one request.
func (t *Txn) GetMany(ctx context.Context, keys [][]byte) ([]TxnValue, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, ErrTxnDone
	}
	var fetch [][]byte
	asked := map[string]bool{}
	for _, k := range keys {
		if len(k) == 0 {
			return nil, &Error{Code: codes.InvalidArgument, Msg: "key is empty"}
		}
		sk := string(k)
		if _, ok := t.writes[sk]; ok {
			continue
		}
		if _, ok := t.reads[sk]; ok || asked[sk] {
			continue
		}
		asked[sk] = true
		fetch = append(fetch, k)
	}
	if len(fetch) > 0 {
		if err := t.fetch(ctx, fetch); err != nil {
			return nil, err
		}
	}
	out := make([]TxnValue, len(keys))
	for i, k := range keys {
		if w, ok := t.writes[string(k)]; ok {
			out[i] = TxnValue{Key: k, Value: w.Value, Found: !w.Delete}
			continue
		}
		r := t.reads[string(k)]
		out[i] = TxnValue{Key: k, Value: r.value, Found: r.found, Version: r.version}
	}
	return out, nil
}

// fetch reads keys from the cluster at the transaction's snapshots and remembers the values
// and the snapshots the reads fixed. Called with t.mu held.
func (t *Txn) fetch(ctx context.Context, keys [][]byte) error {
	_, cl, err := t.c.begin(ctx, t.options)
	if err != nil {
		return err
	}
	defer cl.cancel()
	snaps := t.snapshotsPB()
	r, err := withPlacement(t.c, cl.ctx, t.keyspace, func(pv uint64) (*meridianpb.TxnReadResponse, uint64, error) {
		r, err := t.c.api.TxnRead(cl.ctx, &meridianpb.TxnReadRequest{Keyspace: t.keyspace, Keys: keys, Snapshots: snaps,
			TimeoutMs: cl.timeoutMs, PlacementVersion: pv})
		if err != nil {
			return nil, 0, t.c.wrap(cl, err, 0)
		}
		return r, r.PlacementVersion, nil
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == codes.Aborted {
			// The cluster cannot serve the transaction any more (its snapshot of a partition
			// is older than the partition keeps): it is over, as if aborted at commit.
			t.done = true
			return &AbortError{Reason: e.Msg}
		}
		return err
	}
	// Check the whole answer before taking any of it.
	got := map[string]*meridianpb.TxnValue{}
	for _, v := range r.Values {
		got[string(v.Key)] = v
	}
	for _, k := range keys {
		if got[string(k)] == nil {
			return &Error{Code: codes.Internal, Msg: fmt.Sprintf("%s answered a transaction read without key %q", t.c.endpoint, k)}
		}
	}
	for _, s := range r.Snapshots {
		if have, ok := t.snapshots[s.Partition]; ok && have != s.Counter {
			return &Error{Code: codes.Internal, Msg: fmt.Sprintf("%s read partition %d at snapshot %d, but the transaction reads it at snapshot %d",
				t.c.endpoint, s.Partition, s.Counter, have)}
		}
	}
	for _, s := range r.Snapshots {
		t.snapshots[s.Partition] = s.Counter
	}
	for _, k := range keys {
		v := got[string(k)]
		t.reads[string(k)] = txnRead{value: v.Value, found: v.Found, version: v.Version, partition: v.Partition}
		t.readOrder = append(t.readOrder, string(k))
	}
	return nil
}

func (t *Txn) snapshotsPB() []*meridianpb.TxnSnapshot {
	parts := make([]uint32, 0, len(t.snapshots))
	for p := range t.snapshots {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	out := make([]*meridianpb.TxnSnapshot, len(parts))
	for i, p := range parts {
		out[i] = &meridianpb.TxnSnapshot{Partition: p, Counter: t.snapshots[p]}
	}
	return out
}

// Put buffers a write of key (the last write of a key wins). Nothing is sent before Commit.
func (t *Txn) Put(key, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return t.buffer(&meridianpb.TxnWrite{Key: bytes.Clone(key), Value: bytes.Clone(value)})
}

// Delete buffers the deletion of key (the last write of a key wins).
func (t *Txn) Delete(key []byte) error {
	return t.buffer(&meridianpb.TxnWrite{Key: bytes.Clone(key), Delete: true})
}

func (t *Txn) buffer(w *meridianpb.TxnWrite) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxnDone
	}
	if len(w.Key) == 0 {
		return &Error{Code: codes.InvalidArgument, Msg: "key is empty"}
	}
	k := string(w.Key)
	if _, ok := t.writes[k]; !ok {
		t.writeOrder = append(t.writeOrder, k)
	}
	t.writes[k] = w
	return nil
}

// Commit submits the transaction: the keys it read (with the versions read), its writes,
// and its snapshots. It returns an *AbortError when the transaction aborted (nothing of it was
// written). Any other error leaves the outcome unknown when it is a timeout
// (codes.DeadlineExceeded: it may have committed) and means it was not submitted otherwise
// (invalid, unavailable, ...). A transaction with no reads and no writes commits at once,
// without a call. The Txn cannot be used after Commit, whatever the outcome.
func (t *Txn) Commit(ctx context.Context) (CommitResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return CommitResult{}, ErrTxnDone
	}
	t.done = true
	req := &meridianpb.TxnCommitRequest{Keyspace: t.keyspace}
	for _, k := range t.readOrder {
		// Read keys that were then written too: 2pc validates the version read (sdur
		// certifies every written key as read anyway).
		req.Reads = append(req.Reads, []byte(k))
		req.ReadVersions = append(req.ReadVersions, t.reads[k].version)
	}
	for _, k := range t.writeOrder {
		req.Writes = append(req.Writes, t.writes[k])
	}
	if len(req.Reads) == 0 && len(req.Writes) == 0 {
		return CommitResult{}, nil
	}
	req.Snapshots = t.snapshotsPB()
	_, cl, err := t.c.begin(ctx, t.options)
	if err != nil {
		return CommitResult{}, err
	}
	defer cl.cancel()
	size := 0
	for _, k := range req.Reads {
		size += len(k)
	}
	for _, w := range req.Writes {
		size += len(w.Key) + len(w.Value)
	}
	if size > checkLimitsAbove {
		// Refuse before sending what the node cannot take (as Put does for large values).
		if info, err := t.c.ServerInfo(cl.ctx); err == nil && size > int(info.MaxValueBytes) {
			return CommitResult{}, &Error{Code: codes.InvalidArgument, Msg: fmt.Sprintf("the transaction's keys and values come to %d bytes, limit is %d (limits.max_value_bytes) on node %s",
				size, info.MaxValueBytes, info.Node)}
		}
	}
	r, err := withPlacement(t.c, cl.ctx, t.keyspace, func(pv uint64) (*meridianpb.TxnCommitResponse, uint64, error) {
		req.PlacementVersion, req.TimeoutMs = pv, cl.timeoutMs
		r, err := t.c.api.TxnCommit(cl.ctx, req)
		if err != nil {
			return nil, 0, t.c.wrap(cl, err, 0)
		}
		return r, r.PlacementVersion, nil
	})
	if err != nil {
		return CommitResult{}, err
	}
	if !r.Committed {
		return CommitResult{}, &AbortError{Reason: r.Reason, Key: r.Key, Txn: r.Txn}
	}
	return CommitResult{Txn: r.Txn, Version: r.Version, Coordinator: r.Coordinator}, nil
}

// Abort ends the transaction without committing: its buffered writes are dropped (nothing
// was sent). Aborting a finished transaction does nothing.
func (t *Txn) Abort() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	t.writes, t.writeOrder = nil, nil
	t.reads, t.readOrder = nil, nil
}

// partitionsRead returns how many partitions the transaction has read.
func (t *Txn) partitionsRead() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.snapshots)
}

// ReadOnly reads keys of a transactional keyspace in one read-only transaction and returns
// the values of those found (keyed by string(key)), all from one globally consistent
// snapshot. In an sdur keyspace they are read at the keyspace's newest snapshot vector, in
// the node's own region, and the transaction never aborts (it may read a state a little
// older than the newest: about one sequencer round); in a 2pc keyspace the node reads them
// and validates the versions by a commit without writes, reading again after a conflict (an
// error with code Aborted after 6 conflicts).
func (c *Client) ReadOnly(ctx context.Context, keyspace string, keys [][]byte, options ...Option) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(keys) == 0 {
		return out, nil
	}
	_, cl, err := c.begin(ctx, options)
	if err != nil {
		return nil, err
	}
	defer cl.cancel()
	r, err := withPlacement(c, cl.ctx, keyspace, func(pv uint64) (*meridianpb.TxnReadResponse, uint64, error) {
		r, err := c.api.TxnRead(cl.ctx, &meridianpb.TxnReadRequest{Keyspace: keyspace, Keys: keys, ReadOnly: true, TimeoutMs: cl.timeoutMs, PlacementVersion: pv})
		if err != nil {
			return nil, 0, c.wrap(cl, err, 0)
		}
		return r, r.PlacementVersion, nil
	})
	if err != nil {
		return nil, err
	}
	for _, v := range r.Values {
		if v.Found {
			out[string(v.Key)] = v.Value
		}
	}
	return out, nil
}
