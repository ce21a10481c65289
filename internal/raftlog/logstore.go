// Package raftlog is the durable log of one etcd raft group on a Meridian node: etcd raft's
// MemoryStorage as the view a RawNode reads, written through to storage raw keys in the
// committer's synced batches (the Ready contract), reloaded at start, truncated on conflicts,
// compacted behind a snapshot index. The Raft engine (one group per partition) and Canopus
// (one group per super-leaf member, thesis 4.2.3) keep their groups' logs in it, each under
// its own raw-key prefix.
package raftlog

import (
	"encoding/binary"
	"fmt"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"meridian/internal/engine"
	"meridian/internal/storage"
)

// Raw key layout of one group's durable state under its prefix (storage raw keys):
//
//	prefix | 'h'                      hard state (term, vote, commit)
//	prefix | 's'                      snapshot metadata (index, term, conf state)
//	prefix | 'e' | index (uint64 BE)  log entry
//
// Big-endian indexes sort numerically, so an entry range is a key range and truncation is one
// range delete. The owner of the prefix may keep keys of its own under it with other kind
// bytes.
const (
	KindHard     = 'h'
	KindSnapshot = 's'
	kindEntry    = 'e'
)

// StateKey is the key of one kind of state under prefix.
func StateKey(prefix []byte, kind byte) []byte {
	return append(append(make([]byte, 0, len(prefix)+1), prefix...), kind)
}

// EntryKey is the key of the log entry at index under prefix.
func EntryKey(prefix []byte, index uint64) []byte {
	return binary.BigEndian.AppendUint64(StateKey(prefix, kindEntry), index)
}

// LogStore is one Raft group's log on a node: etcd raft's MemoryStorage as the in-memory view
// the RawNode reads (bounded by compaction), written through to storage raw keys. Every
// change returns the raw ops that make it durable; the engine puts them in its Ready, so the
// Ready contract (durable before messages leave) covers the log as it covers data — the
// order etcd raft requires (entries and hard state persisted before messages are sent).
type LogStore struct {
	prefix []byte
	// name says whose log it is, in errors ("raft group 7").
	name string
	mem  *etcdraft.MemoryStorage
}

// Load reads the durable state (snapshot metadata, hard state, entries) stored under prefix.
// A group with nothing stored starts empty. name says whose log it is, in errors.
func Load(store engine.Reader, prefix []byte, name string) (*LogStore, error) {
	s := &LogStore{prefix: prefix, name: name, mem: etcdraft.NewMemoryStorage()}
	group := name
	if b, ok, err := store.GetRaw(StateKey(prefix, KindSnapshot)); err != nil {
		return nil, fmt.Errorf("raftlog: %s: read snapshot metadata: %w", group, err)
	} else if ok {
		var meta raftpb.SnapshotMetadata
		if err := proto.Unmarshal(b, &meta); err != nil {
			return nil, fmt.Errorf("raftlog: %s: snapshot metadata: %w (%w)", group, err, storage.ErrCorrupt)
		}
		if err := s.mem.ApplySnapshot(&raftpb.Snapshot{Metadata: &meta}); err != nil {
			return nil, fmt.Errorf("raftlog: %s: install snapshot metadata at %d: %w", group, meta.GetIndex(), err)
		}
	}
	if b, ok, err := store.GetRaw(StateKey(prefix, KindHard)); err != nil {
		return nil, fmt.Errorf("raftlog: %s: read hard state: %w", group, err)
	} else if ok {
		var hs raftpb.HardState
		if err := proto.Unmarshal(b, &hs); err != nil {
			return nil, fmt.Errorf("raftlog: %s: hard state: %w (%w)", group, err, storage.ErrCorrupt)
		}
		if err := s.mem.SetHardState(&hs); err != nil {
			return nil, fmt.Errorf("raftlog: %s: hard state: %w", group, err)
		}
	}
	first, _ := s.mem.FirstIndex()
	var ents []*raftpb.Entry
	var decodeErr error
	err := store.ScanRaw(EntryKey(prefix, first), StateKey(prefix, kindEntry+1), 0, func(k, v []byte) bool {
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(v, e); err != nil {
			decodeErr = fmt.Errorf("raftlog: %s: entry %x: %w (%w)", group, k, err, storage.ErrCorrupt)
			return false
		}
		if want := first + uint64(len(ents)); e.GetIndex() != want {
			decodeErr = fmt.Errorf("raftlog: %s: log has entry %d where %d belongs (%w)", group, e.GetIndex(), want, storage.ErrCorrupt)
			return false
		}
		ents = append(ents, e)
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return nil, fmt.Errorf("raftlog: %s: read log: %w", group, err)
	}
	if len(ents) > 0 {
		if err := s.mem.Append(ents); err != nil {
			return nil, fmt.Errorf("raftlog: %s: load %d entries: %w", group, len(ents), err)
		}
	}
	return s, nil
}

// Storage is the view the group's RawNode reads.
func (s *LogStore) Storage() etcdraft.Storage { return s.mem }

// Memory is the same view as a MemoryStorage, for owners that wrap it.
func (s *LogStore) Memory() *etcdraft.MemoryStorage { return s.mem }

// Save stages what a Ready asks to persist — a snapshot (metadata; the data is the
// engine's), entries to append (replacing any conflicting suffix) and the hard state — and
// returns the raw ops that make it durable. The RawNode may see the staged state at once:
// nothing leaves the node before the ops are synced (the Ready contract).
func (s *LogStore) Save(hs *raftpb.HardState, snap *raftpb.Snapshot, ents []*raftpb.Entry) ([]storage.RawOp, error) {
	var ops []storage.RawOp
	if snap != nil && snap.GetMetadata().GetIndex() > 0 {
		if err := s.mem.ApplySnapshot(snap); err != nil {
			return nil, fmt.Errorf("raftlog: %s: apply snapshot at %d: %w", s.name, snap.GetMetadata().GetIndex(), err)
		}
		meta, err := proto.Marshal(snap.GetMetadata())
		if err != nil {
			return nil, fmt.Errorf("raftlog: %s: encode snapshot metadata: %w", s.name, err)
		}
		// The snapshot replaces the whole log.
		ops = append(ops,
			storage.RawOp{Key: EntryKey(s.prefix, 0), End: EntryKey(s.prefix, ^uint64(0)), Delete: true},
			storage.RawOp{Key: StateKey(s.prefix, KindSnapshot), Value: meta})
	}
	if len(ents) > 0 {
		oldLast, _ := s.mem.LastIndex()
		if err := s.mem.Append(ents); err != nil {
			return nil, fmt.Errorf("raftlog: %s: append %d entries at %d: %w", s.name, len(ents), ents[0].GetIndex(), err)
		}
		for _, e := range ents {
			b, err := proto.Marshal(e)
			if err != nil {
				return nil, fmt.Errorf("raftlog: %s: encode entry %d: %w", s.name, e.GetIndex(), err)
			}
			ops = append(ops, storage.RawOp{Key: EntryKey(s.prefix, e.GetIndex()), Value: b})
		}
		// A new leader's entries replace a conflicting suffix: drop what lies beyond them.
		if newLast := ents[len(ents)-1].GetIndex(); oldLast > newLast {
			ops = append(ops, storage.RawOp{Key: EntryKey(s.prefix, newLast+1), End: EntryKey(s.prefix, oldLast+1), Delete: true})
		}
	}
	if hs != nil && !etcdraft.IsEmptyHardState(hs) {
		if err := s.mem.SetHardState(hs); err != nil {
			return nil, fmt.Errorf("raftlog: %s: hard state: %w", s.name, err)
		}
		b, err := proto.Marshal(hs)
		if err != nil {
			return nil, fmt.Errorf("raftlog: %s: encode hard state: %w", s.name, err)
		}
		ops = append(ops, storage.RawOp{Key: StateKey(s.prefix, KindHard), Value: b})
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
		return nil, fmt.Errorf("raftlog: %s: snapshot at %d: %w", s.name, index, err)
	}
	if err := s.mem.Compact(index); err != nil {
		return nil, fmt.Errorf("raftlog: %s: compact to %d: %w", s.name, index, err)
	}
	meta, err := proto.Marshal(snap.GetMetadata())
	if err != nil {
		return nil, fmt.Errorf("raftlog: %s: encode snapshot metadata: %w", s.name, err)
	}
	return append(s.clearEntries(first, index), storage.RawOp{Key: StateKey(s.prefix, KindSnapshot), Value: meta}), nil
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
		return []storage.RawOp{{Key: EntryKey(s.prefix, 0), End: EntryKey(s.prefix, last+1), Delete: true}}
	}
	ops := make([]storage.RawOp, 0, last-first+1)
	for i := first; i <= last; i++ {
		ops = append(ops, storage.RawOp{Key: EntryKey(s.prefix, i), Delete: true})
	}
	return ops
}

// Remove returns the raw ops that delete every trace of the group (the replica left it).
func (s *LogStore) Remove() []storage.RawOp {
	return []storage.RawOp{{Key: s.prefix, End: append(append([]byte{}, s.prefix...), 0xff), Delete: true}}
}

// DiscardLogger drops etcd raft's logging (the engines report through results and
// metrics); Panic and Fatal still stop the process, as raft requires.
type DiscardLogger struct{}

func (DiscardLogger) Debug(...interface{})            {}
func (DiscardLogger) Debugf(string, ...interface{})   {}
func (DiscardLogger) Error(...interface{})            {}
func (DiscardLogger) Errorf(string, ...interface{})   {}
func (DiscardLogger) Info(...interface{})             {}
func (DiscardLogger) Infof(string, ...interface{})    {}
func (DiscardLogger) Warning(...interface{})          {}
func (DiscardLogger) Warningf(string, ...interface{}) {}
func (DiscardLogger) Fatal(v ...interface{})          { panic(fmt.Sprint(v...)) }
func (DiscardLogger) Fatalf(f string, v ...interface{}) {
	panic(fmt.Sprintf(f, v...))
}
func (DiscardLogger) Panic(v ...interface{})            { panic(fmt.Sprint(v...)) }
func (DiscardLogger) Panicf(f string, v ...interface{}) { panic(fmt.Sprintf(f, v...)) }
