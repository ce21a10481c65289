package raft

import (
	"encoding/binary"
	"fmt"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/engine"
	"meridian/internal/storage"
)

// Raw key layout of one Raft group's durable state (storage raw keys, written through the
// node's committer in the same synced batch as the data the group applies):
//
//	'g' | group (uint64 BE) | 'h'                      hard state (term, vote, commit)
//	'g' | group (uint64 BE) | 's'                      snapshot metadata (index, term, conf state)
//	'g' | group (uint64 BE) | 'e' | index (uint64 BE)  log entry
//
// Big-endian indexes sort numerically, so an entry range is a key range and truncation is one
// range delete.
const (
	rawGroupTag  = 'g'
	kindHard     = 'h'
	kindSnapshot = 's'
	kindEntry    = 'e'
)

func groupPrefix(group uint64) []byte {
	b := make([]byte, 0, 18)
	b = append(b, rawGroupTag)
	return binary.BigEndian.AppendUint64(b, group)
}

func stateKey(group uint64, kind byte) []byte { return append(groupPrefix(group), kind) }

func entryKey(group, index uint64) []byte {
	return binary.BigEndian.AppendUint64(append(groupPrefix(group), kindEntry), index)
}

// LogStore is one Raft group's log on a node: etcd raft's MemoryStorage as the in-memory view
// the RawNode reads (bounded by compaction), written through to storage raw keys. Every
// change returns the raw ops that make it durable; the engine puts them in its Ready, so the
// Ready contract (durable before messages leave) covers the log as it covers data — the
// order etcd raft requires (entries and hard state persisted before messages are sent).
type LogStore struct {
	group uint64
	mem   *etcdraft.MemoryStorage
}

// LoadLogStore reads group's durable state (snapshot metadata, hard state, entries) from
// store. A group with nothing stored starts empty.
func LoadLogStore(store engine.Reader, group uint64) (*LogStore, error) {
	s := &LogStore{group: group, mem: etcdraft.NewMemoryStorage()}
	if b, ok, err := store.GetRaw(stateKey(group, kindSnapshot)); err != nil {
		return nil, fmt.Errorf("raft: group %d: read snapshot metadata: %w", group, err)
	} else if ok {
		var meta raftpb.SnapshotMetadata
		if err := proto.Unmarshal(b, &meta); err != nil {
			return nil, fmt.Errorf("raft: group %d: snapshot metadata: %w (%w)", group, err, storage.ErrCorrupt)
		}
		if err := s.mem.ApplySnapshot(&raftpb.Snapshot{Metadata: &meta}); err != nil {
			return nil, fmt.Errorf("raft: group %d: install snapshot metadata at %d: %w", group, meta.GetIndex(), err)
		}
	}
	if b, ok, err := store.GetRaw(stateKey(group, kindHard)); err != nil {
		return nil, fmt.Errorf("raft: group %d: read hard state: %w", group, err)
	} else if ok {
		var hs raftpb.HardState
		if err := proto.Unmarshal(b, &hs); err != nil {
			return nil, fmt.Errorf("raft: group %d: hard state: %w (%w)", group, err, storage.ErrCorrupt)
		}
		if err := s.mem.SetHardState(&hs); err != nil {
			return nil, fmt.Errorf("raft: group %d: hard state: %w", group, err)
		}
	}
	first, _ := s.mem.FirstIndex()
	var ents []*raftpb.Entry
	var decodeErr error
	err := store.ScanRaw(entryKey(group, first), append(groupPrefix(group), kindEntry+1), 0, func(k, v []byte) bool {
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(v, e); err != nil {
			decodeErr = fmt.Errorf("raft: group %d: entry %x: %w (%w)", group, k, err, storage.ErrCorrupt)
			return false
		}
		if want := first + uint64(len(ents)); e.GetIndex() != want {
			decodeErr = fmt.Errorf("raft: group %d: log has entry %d where %d belongs (%w)", group, e.GetIndex(), want, storage.ErrCorrupt)
			return false
		}
		ents = append(ents, e)
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return nil, fmt.Errorf("raft: group %d: read log: %w", group, err)
	}
	if len(ents) > 0 {
		if err := s.mem.Append(ents); err != nil {
			return nil, fmt.Errorf("raft: group %d: load %d entries: %w", group, len(ents), err)
		}
	}
	return s, nil
}

// Storage is the view the group's RawNode reads.
func (s *LogStore) Storage() etcdraft.Storage { return s.mem }

// Save stages what a Ready asks to persist — a snapshot (metadata; the data is the
// engine's), entries to append (replacing any conflicting suffix) and the hard state — and
// returns the raw ops that make it durable. The RawNode may see the staged state at once:
// nothing leaves the node before the ops are synced (the Ready contract).
func (s *LogStore) Save(hs *raftpb.HardState, snap *raftpb.Snapshot, ents []*raftpb.Entry) ([]storage.RawOp, error) {
	var ops []storage.RawOp
	if snap != nil && snap.GetMetadata().GetIndex() > 0 {
		if err := s.mem.ApplySnapshot(snap); err != nil {
			return nil, fmt.Errorf("raft: group %d: apply snapshot at %d: %w", s.group, snap.GetMetadata().GetIndex(), err)
		}
		meta, err := proto.Marshal(snap.GetMetadata())
		if err != nil {
			return nil, fmt.Errorf("raft: group %d: encode snapshot metadata: %w", s.group, err)
		}
		// The snapshot replaces the whole log.
		ops = append(ops,
			storage.RawOp{Key: entryKey(s.group, 0), End: entryKey(s.group, ^uint64(0)), Delete: true},
			storage.RawOp{Key: stateKey(s.group, kindSnapshot), Value: meta})
	}
	if len(ents) > 0 {
		oldLast, _ := s.mem.LastIndex()
		if err := s.mem.Append(ents); err != nil {
			return nil, fmt.Errorf("raft: group %d: append %d entries at %d: %w", s.group, len(ents), ents[0].GetIndex(), err)
		}
		for _, e := range ents {
			b, err := proto.Marshal(e)
			if err != nil {
				return nil, fmt.Errorf("raft: group %d: encode entry %d: %w", s.group, e.GetIndex(), err)
			}
			ops = append(ops, storage.RawOp{Key: entryKey(s.group, e.GetIndex()), Value: b})
		}
		// A new leader's entries replace a conflicting suffix: drop what lies beyond them.
		if newLast := ents[len(ents)-1].GetIndex(); oldLast > newLast {
			ops = append(ops, storage.RawOp{Key: entryKey(s.group, newLast+1), End: entryKey(s.group, oldLast+1), Delete: true})
		}
	}
	if hs != nil && !etcdraft.IsEmptyHardState(hs) {
		if err := s.mem.SetHardState(hs); err != nil {
			return nil, fmt.Errorf("raft: group %d: hard state: %w", s.group, err)
		}
		b, err := proto.Marshal(hs)
		if err != nil {
			return nil, fmt.Errorf("raft: group %d: encode hard state: %w", s.group, err)
		}
		ops = append(ops, storage.RawOp{Key: stateKey(s.group, kindHard), Value: b})
	}
	return ops, nil
}

// Compact discards the log up to and including index, which must be applied: what it held
// is then in the replica's data, and a follower that needs it gets a snapshot instead. cs is
// the configuration at index.
func (s *LogStore) Compact(index uint64, cs *raftpb.ConfState) ([]storage.RawOp, error) {
	first, _ := s.mem.FirstIndex()
	if index < first {
		return nil, nil // already compacted
	}
	snap, err := s.mem.CreateSnapshot(index, cs, nil)
	if err != nil {
		return nil, fmt.Errorf("raft: group %d: snapshot at %d: %w", s.group, index, err)
	}
	if err := s.mem.Compact(index); err != nil {
		return nil, fmt.Errorf("raft: group %d: compact to %d: %w", s.group, index, err)
	}
	meta, err := proto.Marshal(snap.GetMetadata())
	if err != nil {
		return nil, fmt.Errorf("raft: group %d: encode snapshot metadata: %w", s.group, err)
	}
	return append(s.clearEntries(first, index), storage.RawOp{Key: stateKey(s.group, kindSnapshot), Value: meta}), nil
}

// pointDeleteMaxEntries is how many log entries a truncation deletes one by one; more go
// with one range deletion. Every range tombstone in the memtable is fragmented again by each
// new iterator until a flush (Pebble's keySpanCache is reset by each new range deletion), so
// frequent small truncations as range deletions slow every read of the node; a few point
// tombstones cost nothing to read past. CockroachDB draws the same line for its raft log
// (storage.ClearRangeThresholdPointKeys, 64).
const pointDeleteMaxEntries = 64

// clearEntries returns the ops that delete the stored entries first..last: those below
// first are gone already (an earlier truncation or snapshot deleted them).
func (s *LogStore) clearEntries(first, last uint64) []storage.RawOp {
	if last < first {
		return nil
	}
	if last-first+1 > pointDeleteMaxEntries {
		return []storage.RawOp{{Key: entryKey(s.group, 0), End: entryKey(s.group, last+1), Delete: true}}
	}
	ops := make([]storage.RawOp, 0, last-first+1)
	for i := first; i <= last; i++ {
		ops = append(ops, storage.RawOp{Key: entryKey(s.group, i), Delete: true})
	}
	return ops
}

// Remove returns the raw ops that delete every trace of the group (the replica left it).
func (s *LogStore) Remove() []storage.RawOp {
	return []storage.RawOp{{Key: groupPrefix(s.group), End: append(groupPrefix(s.group), 0xff), Delete: true}}
}
