package raft

import (
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// StateMachine is what a group's committed commands are applied to. A group's applied state
// lives in storage records of its partition (written by Apply, in the same synced batch as
// the group's applied index), so a snapshot of the partition's data is a snapshot of the
// state machine. Implementations must be deterministic: every replica applies the same
// commands in the same order and must reach the same records and results.
type StateMachine interface {
	// Prepare fills cmd (key, value, tombstone or command) from a client write: a put, a
	// delete, or an OpCommand. An error refuses the request before anything is proposed.
	Prepare(req engine.Request, cmd *peerpb.RaftCommand) error
	// Apply applies one committed command, the log's entry index, at version v (above every
	// earlier applied command's) and returns the records to write (of the group's
	// partition) and the proposer's result (Err, Version, Output; ID and Op are filled in by
	// the engine).
	Apply(g GroupRef, index uint64, cmd *peerpb.RaftCommand, v hlc.Version) ([]storage.Record, engine.Result)
	// Load rebuilds in-memory state from the group's records (at start, and after a
	// snapshot replaced them: records are then the snapshot's, in key order). A state
	// machine whose state is its records alone does nothing.
	Load(g GroupRef, records func(fn func(storage.Record) bool) error) error
	// InMemory reports whether Load needs the records (the snapshot path then reads the
	// staged file back for it).
	InMemory() bool
}

// GroupRef names a group's partition.
type GroupRef struct {
	Keyspace  string
	Partition uint32
}

// kvStateMachine is the raft protocol's state machine: every command writes one key (a put or
// a tombstone) as a record versioned in log order.
type kvStateMachine struct{}

func (kvStateMachine) Prepare(req engine.Request, cmd *peerpb.RaftCommand) error {
	switch req.Op {
	case engine.OpPut:
		cmd.Key, cmd.Value = req.Key, req.Value
	case engine.OpDelete:
		cmd.Key, cmd.Tombstone = req.Key, true
	default:
		return errs.New(errs.Invalid, "keyspace %q uses protocol raft, which has no %s operation", req.Keyspace, req.Op)
	}
	return nil
}

func (kvStateMachine) Apply(g GroupRef, _ uint64, cmd *peerpb.RaftCommand, v hlc.Version) ([]storage.Record, engine.Result) {
	rec := storage.Record{Keyspace: g.Keyspace, Key: cmd.GetKey(), Value: cmd.GetValue(), Tombstone: cmd.GetTombstone(), Version: v}
	if rec.Value == nil && !rec.Tombstone {
		rec.Value = []byte{}
	}
	return []storage.Record{rec}, engine.Result{Version: v}
}

func (kvStateMachine) Load(GroupRef, func(fn func(storage.Record) bool) error) error { return nil }

func (kvStateMachine) InMemory() bool { return false }
