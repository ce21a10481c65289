package raft

import (
	"encoding/binary"
	"fmt"

	"meridian/internal/engine"
	"meridian/internal/raftlog"
)

// Raw key layout of one Raft group's durable state: raftlog's keys under 'g' | group
// (uint64 BE), plus the engine's own kinds ('a' applied state, 'm' ingest marker, 't'
// transaction state).
const (
	rawGroupTag  = 'g'
	kindHard     = raftlog.KindHard
	kindSnapshot = raftlog.KindSnapshot
)

// LogStore is a group's durable log (package raftlog).
type LogStore = raftlog.LogStore

func groupPrefix(group uint64) []byte {
	b := make([]byte, 0, 18)
	b = append(b, rawGroupTag)
	return binary.BigEndian.AppendUint64(b, group)
}

func stateKey(group uint64, kind byte) []byte { return raftlog.StateKey(groupPrefix(group), kind) }

func entryKey(group, index uint64) []byte { return raftlog.EntryKey(groupPrefix(group), index) }

// LoadLogStore reads group's durable log from store.
func LoadLogStore(store engine.Reader, group uint64) (*LogStore, error) {
	return raftlog.Load(store, groupPrefix(group), fmt.Sprintf("raft group %d", group))
}
