package catenae

import (
	"encoding/binary"
	"fmt"

	core "meridian/internal/catenae"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/storage"
)

// A replica's durable state (catenae.Durable, written in the Ready that produces it) lives in
// the node's storage:
//
//	records of the keyspace, version = chain position   the validated versions
//	raw 'c' | len(keyspace) | keyspace | 'm'            meta (below)
//	raw … | 'i' | epoch (uint64 BE) | data center (uint32 BE)       an input (catenae.EncodeInput)
//	raw … | 'v' | epoch | data center of the txn | seq (uint64 BE)  its own vote: the digest
//
// Big-endian epochs sort numerically, so forgetting the epochs up to one is a range delete.
// A restart builds a catenae.Disk from them and restores the replica from it.
const (
	rawTag    = 'c'
	kindMeta  = 'm'
	kindInput = 'i'
	kindVote  = 'v'
)

func prefix(keyspace string) []byte {
	b := make([]byte, 0, 2+len(keyspace))
	b = append(b, rawTag, byte(len(keyspace)))
	return append(b, keyspace...)
}

func metaKey(keyspace string) []byte { return append(prefix(keyspace), kindMeta) }

func inputKey(keyspace string, epoch uint64, dc uint32) []byte {
	b := binary.BigEndian.AppendUint64(append(prefix(keyspace), kindInput), epoch)
	return binary.BigEndian.AppendUint32(b, dc)
}

func voteKey(keyspace string, epoch uint64, id core.TxnID) []byte {
	b := binary.BigEndian.AppendUint64(append(prefix(keyspace), kindVote), epoch)
	b = binary.BigEndian.AppendUint32(b, id.DC)
	return binary.BigEndian.AppendUint64(b, id.Seq)
}

// dropState deletes a keyspace's raw state (every key under its prefix).
func dropState(keyspace string) storage.RawOp {
	p := prefix(keyspace)
	end := append(prefix(keyspace), 0xff)
	return storage.RawOp{Key: p, End: end, Delete: true}
}

// meta is what the meta key holds: the keyspace's replicas version (whose state this is), the
// start handshake (the own proposal; the start epoch once agreed, else 0), the replica's
// catenae.Meta and the epochs forgotten.
type meta struct {
	replicasVersion, proposal, start uint64
	core                             core.Meta
	forgot                           uint64
}

const metaVersion = 1

// metaBytes is the meta key's length: a version byte and ten uint64s.
const metaBytes = 1 + 10*8

func (m meta) encode() []byte {
	b := make([]byte, 0, metaBytes)
	b = append(b, metaVersion)
	for _, v := range []uint64{m.replicasVersion, m.proposal, m.start, m.core.Seq, uint64(m.core.LastNanos), m.core.SentUpto,
		m.core.Closed, m.core.ValidatedUpto, m.core.ValidatedSeq, m.forgot} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b
}

func decodeMeta(b []byte) (meta, error) {
	if len(b) != metaBytes || b[0] != metaVersion {
		return meta{}, fmt.Errorf("catenae meta of %d bytes, version %d (want %d bytes, version %d)", len(b), firstByte(b), metaBytes, metaVersion)
	}
	var f [10]uint64
	for i := range f {
		f[i] = binary.BigEndian.Uint64(b[1+8*i:])
	}
	m := meta{replicasVersion: f[0], proposal: f[1], start: f[2], core: core.Meta{Seq: f[3], LastNanos: int64(f[4]), SentUpto: f[5],
		Closed: f[6], ValidatedUpto: f[7], ValidatedSeq: f[8]}, forgot: f[9]}
	c := m.core
	if m.start != 0 && (c.SentUpto < c.Closed || c.Closed < c.ValidatedUpto || (c.SentUpto != 0 && c.ValidatedUpto < m.start) || m.forgot > c.ValidatedUpto) {
		return meta{}, fmt.Errorf("catenae meta out of order: start %d, %+v, forgot %d", m.start, c, m.forgot)
	}
	return m, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

func (k *keyspace) metaOp() storage.RawOp {
	m := meta{replicasVersion: k.replicasVersion, proposal: k.proposal, start: k.start, core: k.meta, forgot: k.forgot}
	return storage.RawOp{Key: metaKey(k.name), Value: m.encode()}
}

// persist turns a replica's Durable into this Ready's writes.
func (e *Engine) persist(k *keyspace, d core.Durable) error {
	if d.Empty() {
		return nil
	}
	for _, in := range d.Inputs {
		b, err := core.EncodeInput(in.Txns)
		if err != nil {
			return err
		}
		e.out.Raw = append(e.out.Raw, storage.RawOp{Key: inputKey(k.name, in.Epoch, in.DC), Value: b})
	}
	for _, v := range d.Versions {
		rec := storage.Record{Keyspace: k.name, Key: []byte(v.Key), Version: hlc.Version{WallNanos: int64(v.Seq)}, Value: v.Value, Tombstone: v.Value == nil}
		e.out.Writes = append(e.out.Writes, rec)
	}
	for _, v := range d.Votes {
		e.out.Raw = append(e.out.Raw, storage.RawOp{Key: voteKey(k.name, v.Epoch, v.Txn), Value: binary.BigEndian.AppendUint64(nil, v.Digest)})
	}
	metaChanged := false
	if d.Meta != nil {
		k.meta, metaChanged = *d.Meta, true
	}
	if d.Forget > k.forgot {
		k.forgot, metaChanged = d.Forget, true
		e.out.Raw = append(e.out.Raw,
			storage.RawOp{Key: inputKey(k.name, 0, 0), End: inputKey(k.name, d.Forget+1, 0), Delete: true},
			storage.RawOp{Key: voteKey(k.name, 0, core.TxnID{}), End: voteKey(k.name, d.Forget+1, core.TxnID{}), Delete: true})
	}
	if metaChanged {
		e.out.Raw = append(e.out.Raw, k.metaOp())
	}
	return nil
}

// load reads k's meta key once: a fresh keyspace proposes its start (start.go); one that has
// started is restored from its disk.
func (e *Engine) load(k *keyspace) error {
	b, ok, err := e.store.GetRaw(metaKey(k.name))
	if err != nil {
		return fmt.Errorf("read meta: %w", err)
	}
	if !ok {
		return nil
	}
	m, err := decodeMeta(b)
	if err != nil {
		return err
	}
	if m.replicasVersion != 0 && k.replicasVersion != 0 && m.replicasVersion != k.replicasVersion {
		// The state of a keyspace of the same name that was dropped while this node was
		// down: it goes, and this one starts afresh.
		e.out.Raw = append(e.out.Raw, dropState(k.name))
		return nil
	}
	k.proposal, k.start, k.meta, k.forgot = m.proposal, m.start, m.core, m.forgot
	if k.proposal != 0 {
		k.proposals[e.cfg.NodeID] = k.proposal
	}
	return nil
}

// restore builds the replica of a started keyspace from its disk.
func (e *Engine) restore(k *keyspace) (*core.Replica, error) {
	d := core.NewDisk()
	d.Meta, d.Forgot = k.meta, k.forgot
	err := e.store.Scan(storage.KeyspaceSpan(k.name), 0, func(r storage.Record) bool {
		v := r.Value
		if !r.Tombstone && v == nil {
			v = []byte{}
		}
		if r.Tombstone {
			v = nil
		}
		d.Versions[string(r.Key)] = core.StoredVersion{Key: string(r.Key), Value: v, Seq: uint64(r.Version.WallNanos)}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read versions: %w", err)
	}
	var derr error
	p := append(prefix(k.name), kindInput)
	err = e.store.ScanRaw(p, append(prefix(k.name), kindInput+1), 0, func(key, value []byte) bool {
		rest := key[len(p):]
		if len(rest) != 12 {
			derr = fmt.Errorf("input key of %d bytes", len(key))
			return false
		}
		epoch, dc := binary.BigEndian.Uint64(rest), binary.BigEndian.Uint32(rest[8:])
		txns, err := core.DecodeInput(value, epoch, dc, e.lim)
		if err != nil {
			derr = err
			return false
		}
		d.Inputs[core.InputKey{Epoch: epoch, DC: dc}] = txns
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("read inputs: %w", err)
	}
	p = append(prefix(k.name), kindVote)
	err = e.store.ScanRaw(p, append(prefix(k.name), kindVote+1), 0, func(key, value []byte) bool {
		rest := key[len(p):]
		if len(rest) != 20 || len(value) != 8 {
			derr = fmt.Errorf("vote key of %d bytes, value of %d", len(key), len(value))
			return false
		}
		id := core.TxnID{DC: binary.BigEndian.Uint32(rest[8:]), Seq: binary.BigEndian.Uint64(rest[12:])}
		d.Votes[id] = core.Vote{Txn: id, Epoch: binary.BigEndian.Uint64(rest), DC: e.cfg.NodeID, Digest: binary.BigEndian.Uint64(value)}
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("read votes: %w", err)
	}
	opts := k.opts
	opts.Start = k.start
	return d.Restore(e.cfg.NodeID, k.dcs, opts, e.now)
}

// failLoad marks k as unable to serve: its durable state is unreadable (storage failed, or
// it is corrupt). Nothing is overwritten; an operator sees the reason in every refusal.
func failLoad(k *keyspace, err error) {
	k.failed = errs.New(errs.Internal, "keyspace %q: its durable state on this node cannot be loaded: %v", k.name, err)
}
