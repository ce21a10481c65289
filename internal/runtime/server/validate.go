// Package server is the gateway of DESIGN.md section 4: it validates client requests, turns
// them into protocol requests for the node's coordinator, and maps results to gRPC statuses.
// It also assembles a server process (gRPC for clients and peers, Prometheus metrics).
package server

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
)

// DefaultScanLimit applies when a scan names no limit.
const DefaultScanLimit = 1000

// maxSessionAhead bounds how far a client's session version may be ahead of the node's
// clock. A session version comes from another coordinator's clock; within the clock bound it
// is a few milliseconds ahead at most. Far beyond means a broken client or clock, and
// adopting it would drag this node's clock into the future.
const maxSessionAhead = time.Minute

// validator checks requests against the cluster's limits and the current placement map.
type validator struct {
	limits config.Limits
	pmap   *placement.Map
	now    time.Time
}

func (v validator) keyspace(name string) (*placement.Keyspace, error) {
	if name == "" {
		return nil, errs.New(errs.Invalid, "keyspace name is empty")
	}
	if strings.HasPrefix(name, "_") {
		return nil, errs.New(errs.Invalid, "keyspace %q is reserved for Meridian's own metadata", name)
	}
	ks, ok := v.pmap.Keyspace(name)
	if !ok {
		return nil, errs.New(errs.NotFound, "unknown keyspace %q", name)
	}
	return ks, nil
}

func (v validator) key(key []byte, what string) error {
	if len(key) == 0 {
		return errs.New(errs.Invalid, "%s is empty", what)
	}
	if len(key) > v.limits.MaxKeyBytes {
		return errs.New(errs.Invalid, "%s is %d bytes, limit is %d (limits.max_key_bytes)", what, len(key), v.limits.MaxKeyBytes)
	}
	return nil
}

func (v validator) deadline(timeoutMs uint32) (time.Time, error) {
	if timeoutMs == 0 {
		return v.now.Add(v.limits.DefaultRequestTimeout), nil
	}
	d := time.Duration(timeoutMs) * time.Millisecond
	if d > v.limits.MaxRequestTimeout {
		return time.Time{}, errs.New(errs.Invalid, "timeout %v exceeds the limit %v (limits.max_request_timeout)", d, v.limits.MaxRequestTimeout)
	}
	return v.now.Add(d), nil
}

// point validates the fields every single-key operation shares, in the order clients see
// their errors: keyspace, key, then (extra) the operation's own fields, the protocol's
// fields (engine.CheckRequest: write mode, level), deadline, session.
func (v validator) point(op engine.Op, keyspace string, key []byte, extra func(ks *placement.Keyspace) error, consistency, writeMode string,
	timeoutMs uint32, session *meridianpb.Version) (engine.Request, error) {
	ks, err := v.keyspace(keyspace)
	if err != nil {
		return engine.Request{}, err
	}
	if err := v.key(key, "key"); err != nil {
		return engine.Request{}, err
	}
	if extra != nil {
		if err := extra(ks); err != nil {
			return engine.Request{}, err
		}
	}
	req := engine.Request{Op: op, Keyspace: ks.Spec.Name, Key: key, WriteMode: writeMode}
	if err := engine.CheckRequest(ks, &req, consistency); err != nil {
		return engine.Request{}, err
	}
	dl, err := v.deadline(timeoutMs)
	if err != nil {
		return engine.Request{}, err
	}
	sv, err := v.session(session)
	if err != nil {
		return engine.Request{}, err
	}
	req.Deadline, req.MinVersion = dl, sv
	return req, nil
}

func (v validator) get(r *meridianpb.GetRequest) (engine.Request, error) {
	return v.point(engine.OpGet, r.GetKeyspace(), r.GetKey(), nil, r.GetConsistency(), "", r.GetTimeoutMs(), r.GetSessionVersion())
}

func (v validator) put(r *meridianpb.PutRequest) (engine.Request, error) {
	check := func(ks *placement.Keyspace) error {
		if err := notTransactional(ks); err != nil {
			return err
		}
		if len(r.GetValue()) > v.limits.MaxValueBytes {
			return errs.New(errs.Invalid, "value is %d bytes, limit is %d (limits.max_value_bytes)", len(r.GetValue()), v.limits.MaxValueBytes)
		}
		return nil
	}
	req, err := v.point(engine.OpPut, r.GetKeyspace(), r.GetKey(), check, r.GetConsistency(), r.GetWriteMode(), r.GetTimeoutMs(), r.GetSessionVersion())
	if err != nil {
		return req, err
	}
	req.Value = r.GetValue()
	if req.Value == nil {
		req.Value = []byte{} // an empty value is a value, not a tombstone
	}
	return req, nil
}

func (v validator) del(r *meridianpb.DeleteRequest) (engine.Request, error) {
	return v.point(engine.OpDelete, r.GetKeyspace(), r.GetKey(), notTransactional, r.GetConsistency(), r.GetWriteMode(), r.GetTimeoutMs(), r.GetSessionVersion())
}

// moveMaster validates a request to move a key's master: keyspace (of a protocol with
// masters, engine.CheckRequest), key, region (one of the keyspace's), deadline.
func (v validator) moveMaster(r *meridianpb.MoveMasterRequest) (engine.Request, error) {
	ks, err := v.keyspace(r.GetKeyspace())
	if err != nil {
		return engine.Request{}, err
	}
	probe := engine.Request{Op: engine.OpMoveMaster, Keyspace: ks.Spec.Name}
	if err := engine.CheckRequest(ks, &probe, ""); err != nil {
		return engine.Request{}, err
	}
	if err := v.key(r.GetKey(), "key"); err != nil {
		return engine.Request{}, err
	}
	if r.GetRegion() == "" {
		return engine.Request{}, errs.New(errs.Invalid, "move master: region is empty; keyspace %q has regions %s", ks.Spec.Name, strings.Join(ks.Spec.Regions, ", "))
	}
	if !slices.Contains(ks.Spec.Regions, r.GetRegion()) {
		return engine.Request{}, errs.New(errs.Invalid, "move master: %q is not a region of keyspace %q (regions: %s)", r.GetRegion(), ks.Spec.Name, strings.Join(ks.Spec.Regions, ", "))
	}
	dl, err := v.deadline(r.GetTimeoutMs())
	if err != nil {
		return engine.Request{}, err
	}
	return engine.Request{Op: engine.OpMoveMaster, Keyspace: ks.Spec.Name, Key: r.GetKey(), Region: r.GetRegion(), Deadline: dl}, nil
}

func (v validator) scan(r *meridianpb.ScanRequest) (engine.Request, error) {
	ks, err := v.keyspace(r.GetKeyspace())
	if err != nil {
		return engine.Request{}, err
	}
	if len(r.GetStart()) > v.limits.MaxKeyBytes {
		return engine.Request{}, errs.New(errs.Invalid, "scan start is %d bytes, limit is %d (limits.max_key_bytes)", len(r.GetStart()), v.limits.MaxKeyBytes)
	}
	if len(r.GetEnd()) > v.limits.MaxKeyBytes {
		return engine.Request{}, errs.New(errs.Invalid, "scan end is %d bytes, limit is %d (limits.max_key_bytes)", len(r.GetEnd()), v.limits.MaxKeyBytes)
	}
	if len(r.GetEnd()) > 0 && bytes.Compare(r.GetStart(), r.GetEnd()) >= 0 {
		return engine.Request{}, errs.New(errs.Invalid, "scan range is empty: start %q is not before end %q", r.GetStart(), r.GetEnd())
	}
	// Compare in uint64 before converting, so a huge limit cannot wrap on 32-bit platforms.
	if uint64(r.GetLimit()) > uint64(v.limits.MaxScanLimit) {
		return engine.Request{}, errs.New(errs.Invalid, "scan limit %d exceeds the limit %d (limits.max_scan_limit)", r.GetLimit(), v.limits.MaxScanLimit)
	}
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = min(DefaultScanLimit, v.limits.MaxScanLimit)
	}
	start := r.GetStart()
	if start == nil {
		start = []byte{}
	}
	req := engine.Request{Op: engine.OpScan, Keyspace: ks.Spec.Name, Start: start, End: r.GetEnd(), Limit: limit}
	if err := engine.CheckRequest(ks, &req, r.GetConsistency()); err != nil {
		return engine.Request{}, err
	}
	dl, err := v.deadline(r.GetTimeoutMs())
	if err != nil {
		return engine.Request{}, err
	}
	req.Deadline = dl
	return req, nil
}

func (v validator) session(sv *meridianpb.Version) (hlc.Version, error) {
	if sv == nil {
		return hlc.Version{}, nil
	}
	ver := hlc.Version{WallNanos: sv.GetWallNanos(), Logical: sv.GetLogical(), NodeID: sv.GetNodeId()}
	if ver.WallNanos > v.now.Add(maxSessionAhead).UnixNano() {
		return hlc.Version{}, errs.New(errs.Invalid, "session version %s is more than %v ahead of this node's clock", ver, maxSessionAhead)
	}
	return ver, nil
}

func versionPB(v hlc.Version) *meridianpb.Version {
	if v.IsZero() {
		return nil
	}
	return &meridianpb.Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeId: v.NodeID}
}

// txnKeyspace returns a transactional keyspace (txn_mode other than none).
func (v validator) txnKeyspace(name string) (*placement.Keyspace, error) {
	ks, err := v.keyspace(name)
	if err != nil {
		return nil, err
	}
	if config.TxnModeOf(ks.Spec.Options) == config.TxnNone {
		return nil, errs.New(errs.Invalid, "keyspace %q is not transactional (txn_mode none): use Get/Put/Delete, or create it with txn_mode sdur", ks.Spec.Name)
	}
	return ks, nil
}

// notTransactional refuses a plain write on a transactional keyspace: it would bypass
// certification (and stamp a version that is not a snapshot counter).
func notTransactional(ks *placement.Keyspace) error {
	if config.TxnModeOf(ks.Spec.Options) != config.TxnNone {
		return errs.New(errs.Invalid, "keyspace %q is transactional (txn_mode %s): write through TxnCommit", ks.Spec.Name, config.TxnModeOf(ks.Spec.Options))
	}
	return nil
}

// txnKeyCount checks the number of keys a transaction request names (limits.max_txn_keys).
func (v validator) txnKeyCount(n int) error {
	if n > v.limits.MaxTxnKeys {
		return errs.New(errs.Invalid, "transaction names %d keys, limit is %d (limits.max_txn_keys)", n, v.limits.MaxTxnKeys)
	}
	return nil
}

// txnTooLarge refuses a transaction request whose keys and values exceed max_value_bytes
// together: a transaction's part (its reads, writes and snapshot in one partition) is one
// entry of the partition's replicated log, and must fit one like a plain write does.
func (v validator) txnTooLarge() error {
	return errs.New(errs.Invalid, "the transaction's keys and values come to more than %d bytes together (limits.max_value_bytes: a transaction must fit one replicated log entry)", v.limits.MaxValueBytes)
}

// txnSnapshots validates a transaction's snapshots: partitions of the keyspace, one
// snapshot each. They are returned in the order given.
func (v validator) txnSnapshots(ks *placement.Keyspace, in []*meridianpb.TxnSnapshot) ([]engine.TxnSnapshot, error) {
	if len(in) > len(ks.Partitions) {
		return nil, errs.New(errs.Invalid, "%d snapshots, but keyspace %q has %d partitions (one snapshot per partition)", len(in), ks.Spec.Name, len(ks.Partitions))
	}
	out := make([]engine.TxnSnapshot, 0, len(in))
	seen := make(map[uint32]bool, len(in))
	for _, s := range in {
		p := s.GetPartition()
		if _, ok := ks.Partition(p); !ok {
			return nil, errs.New(errs.Invalid, "snapshot of partition %d: keyspace %q has no partition %d (its partitions changed since the transaction began? then begin it again)", p, ks.Spec.Name, p)
		}
		if seen[p] {
			return nil, errs.New(errs.Invalid, "partition %d has two snapshots: a transaction reads each partition at one snapshot", p)
		}
		seen[p] = true
		out = append(out, engine.TxnSnapshot{Partition: p, Counter: s.GetCounter()})
	}
	return out, nil
}

// txnCheck runs the protocol's validation of a transaction request (it takes no level) and
// sets its deadline.
func (v validator) txnCheck(ks *placement.Keyspace, req *engine.Request, timeoutMs uint32) error {
	if err := engine.CheckRequest(ks, req, ""); err != nil {
		return err
	}
	dl, err := v.deadline(timeoutMs)
	if err != nil {
		return err
	}
	req.Deadline = dl
	return nil
}

// txnRead validates a TxnRead and returns one OpTxnRead per key, in the order of the keys:
// keyspace (transactional), key count (1..limits.max_txn_keys), each key, no duplicates, the
// keys' total size (txnTooLarge), snapshots, the protocol's fields, deadline. Every request
// carries the request's snapshots (Txn.Snapshots; the handler gives each key the snapshots
// the earlier keys fixed too) and the one deadline of the whole request.
func (v validator) txnRead(r *meridianpb.TxnReadRequest) ([]engine.Request, error) {
	ks, err := v.txnKeyspace(r.GetKeyspace())
	if err != nil {
		return nil, err
	}
	keys := r.GetKeys()
	if len(keys) == 0 {
		return nil, errs.New(errs.Invalid, "transaction read names no keys")
	}
	if err := v.txnKeyCount(len(keys)); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(keys))
	total := 0
	for i, k := range keys {
		if err := v.key(k, fmt.Sprintf("keys[%d]", i)); err != nil {
			return nil, err
		}
		if seen[string(k)] {
			return nil, errs.New(errs.Invalid, "key %q is named twice", k)
		}
		seen[string(k)] = true
		if total += len(k); total > v.limits.MaxValueBytes {
			return nil, v.txnTooLarge()
		}
	}
	snaps, err := v.txnSnapshots(ks, r.GetSnapshots())
	if err != nil {
		return nil, err
	}
	if r.GetReadOnly() && len(snaps) > 0 {
		return nil, errs.New(errs.Invalid, "a read-only transaction read names no snapshots: it reads at the keyspace's newest snapshot vector, in one request")
	}
	base := engine.Request{Op: engine.OpTxnRead, Keyspace: ks.Spec.Name}
	if err := v.txnCheck(ks, &base, r.GetTimeoutMs()); err != nil {
		return nil, err
	}
	out := make([]engine.Request, len(keys))
	for i, k := range keys {
		out[i] = base
		out[i].Key = k
		out[i].Txn = &engine.TxnRequest{Snapshots: snaps, ReadOnly: r.GetReadOnly()}
	}
	return out, nil
}

// txnCommit validates a TxnCommit: keyspace (transactional), at least one read or write,
// key count (limits.max_txn_keys), each key, no key twice among the reads or the writes (a
// key read and written is in both: 2pc validates the version read), values, and the size of all keys and values
// together (txnTooLarge: limits.max_value_bytes), read versions (one per read, or none),
// snapshots, the protocol's fields, deadline.
func (v validator) txnCommit(r *meridianpb.TxnCommitRequest) (engine.Request, error) {
	ks, err := v.txnKeyspace(r.GetKeyspace())
	if err != nil {
		return engine.Request{}, err
	}
	reads, writes := r.GetReads(), r.GetWrites()
	if len(reads) == 0 && len(writes) == 0 {
		return engine.Request{}, errs.New(errs.Invalid, "transaction has no reads and no writes (nothing to commit)")
	}
	if err := v.txnKeyCount(len(reads) + len(writes)); err != nil {
		return engine.Request{}, err
	}
	written := make(map[string]bool, len(writes))
	total := 0
	tx := &engine.TxnRequest{}
	if len(writes) > 0 {
		tx.Writes = make([]engine.TxnWrite, 0, len(writes))
	}
	for i, w := range writes {
		k := w.GetKey()
		if err := v.key(k, fmt.Sprintf("writes[%d].key", i)); err != nil {
			return engine.Request{}, err
		}
		if written[string(k)] {
			return engine.Request{}, errs.New(errs.Invalid, "key %q is written twice: send one write per key (the last)", k)
		}
		written[string(k)] = true
		val := w.GetValue()
		if w.GetDelete() && len(val) > 0 {
			return engine.Request{}, errs.New(errs.Invalid, "write of key %q deletes it and carries a value of %d bytes", k, len(val))
		}
		if len(val) > v.limits.MaxValueBytes {
			return engine.Request{}, errs.New(errs.Invalid, "value of key %q is %d bytes, limit is %d (limits.max_value_bytes)", k, len(val), v.limits.MaxValueBytes)
		}
		if total += len(k) + len(val); total > v.limits.MaxValueBytes {
			return engine.Request{}, v.txnTooLarge()
		}
		if val == nil && !w.GetDelete() {
			val = []byte{} // an empty value is a value, not a tombstone
		}
		tx.Writes = append(tx.Writes, engine.TxnWrite{Key: k, Value: val, Delete: w.GetDelete()})
	}
	read := make(map[string]bool, len(reads))
	for i, k := range reads {
		if err := v.key(k, fmt.Sprintf("reads[%d]", i)); err != nil {
			return engine.Request{}, err
		}
		if read[string(k)] {
			return engine.Request{}, errs.New(errs.Invalid, "read key %q is named twice", k)
		}
		read[string(k)] = true
		if total += len(k); total > v.limits.MaxValueBytes {
			return engine.Request{}, v.txnTooLarge()
		}
	}
	tx.Reads = reads
	if rv := r.GetReadVersions(); len(rv) > 0 {
		if len(rv) != len(reads) {
			return engine.Request{}, errs.New(errs.Invalid, "%d read versions for %d reads: give one per read, in the order of the reads, or none", len(rv), len(reads))
		}
		tx.ReadVersions = rv
	}
	if tx.Snapshots, err = v.txnSnapshots(ks, r.GetSnapshots()); err != nil {
		return engine.Request{}, err
	}
	req := engine.Request{Op: engine.OpTxnCommit, Keyspace: ks.Spec.Name, Txn: tx}
	if err := v.txnCheck(ks, &req, r.GetTimeoutMs()); err != nil {
		return engine.Request{}, err
	}
	return req, nil
}
