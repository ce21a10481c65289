package storage

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// rawKeyTag prefixes raw keys: a protocol's own durable state outside the MVCC record space
// (a Raft group's log, hard state and snapshot metadata), apart from data ('d') and meta
// ('m') keys. The rest of a raw key is the protocol's, compared bytewise.
const rawKeyTag = 'r'

// RawOp is one write of raw (non-MVCC) state. Raw state is written in the same synced batch
// as records (ApplyBatch), so a protocol's log and the data it applies become durable
// together, through the committer's group commit.
type RawOp struct {
	Key   []byte
	Value []byte
	// Delete removes Key; with End set it removes the range [Key, End) (log truncation).
	Delete bool
	End    []byte
}

// Validate reports a malformed op (an empty key, a value on a delete, an empty range).
func (op RawOp) Validate() error {
	switch {
	case len(op.Key) == 0:
		return errors.New("storage: raw op with an empty key")
	case !op.Delete && op.End != nil:
		return fmt.Errorf("storage: raw op on %x: a range end on a set", op.Key)
	case op.Delete && op.Value != nil:
		return fmt.Errorf("storage: raw op on %x: a value on a delete", op.Key)
	case op.End != nil && bytes.Compare(op.Key, op.End) >= 0:
		return fmt.Errorf("storage: raw op: empty range [%x, %x)", op.Key, op.End)
	}
	return nil
}

func encodeRawKey(dst, key []byte) []byte {
	dst = append(dst, rawKeyTag)
	return append(dst, key...)
}

// ApplyBatch writes records and raw ops in one Pebble batch, atomically (records first, then
// raw ops in order); with sync=true it returns only after the WAL holding the batch is
// fsynced. Apply is ApplyBatch without raw ops.
func (e *Engine) ApplyBatch(recs []Record, raw []RawOp, sync bool) error {
	if len(raw) == 0 {
		return e.Apply(recs, sync)
	}
	if err := e.checkOpen(); err != nil {
		return err
	}
	b := e.db.NewBatch()
	defer b.Close()
	if err := e.fillRecords(b, recs); err != nil {
		return err
	}
	var kbuf, ebuf []byte
	for i := range raw {
		op := &raw[i]
		if err := op.Validate(); err != nil {
			return err
		}
		kbuf = encodeRawKey(kbuf[:0], op.Key)
		var err error
		switch {
		case op.Delete && op.End != nil:
			ebuf = encodeRawKey(ebuf[:0], op.End)
			err = b.DeleteRange(kbuf, ebuf, nil)
		case op.Delete:
			err = b.Delete(kbuf, nil)
		default:
			err = b.Set(kbuf, op.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("storage: apply: raw op on %x: %w", op.Key, err)
		}
	}
	if err := b.Commit(writeOptions(sync)); err != nil {
		return fmt.Errorf("storage: apply %d records and %d raw ops (sync=%t): %w", len(recs), len(raw), sync, err)
	}
	e.countApply(len(recs), sync)
	return nil
}

// GetRaw returns the raw value under key, as a fresh slice.
func (e *Engine) GetRaw(key []byte) ([]byte, bool, error) {
	if err := e.checkOpen(); err != nil {
		return nil, false, err
	}
	v, closer, err := e.db.Get(encodeRawKey(nil, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("storage: get raw %x: %w", key, err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("storage: get raw %x: %w", key, err)
	}
	return out, true, nil
}

// ScanRaw calls fn with every raw key in [start, end) in order (end nil: to the last raw
// key), at most limit of them (0: no limit), until fn returns false. key and value are valid
// only during the call.
func (e *Engine) ScanRaw(start, end []byte, limit int, fn func(key, value []byte) bool) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	lower := encodeRawKey(nil, start)
	upper := []byte{rawKeyTag + 1}
	if end != nil {
		upper = encodeRawKey(nil, end)
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("storage: scan raw [%x, %x): %w", start, end, err)
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		if !fn(it.Key()[1:], it.Value()) {
			break
		}
		if n++; limit > 0 && n >= limit {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("storage: scan raw [%x, %x): %w", start, end, err)
	}
	return nil
}
