// Package raft is Meridian's Raft protocol: one Raft group per partition (multi-raft) on
// go.etcd.io/raft/v3, the library etcd and CockroachDB use (issue 13; Raft is the building
// block of Geo-SDUR's atomic broadcast, Canopus's super-leaves and cluster metadata).
//
// The durable log of a group is package raftlog (shared with Canopus): etcd
// raft's MemoryStorage as the view a RawNode reads, written through to storage raw keys in
// the committer's synced batches, reloaded at start, truncated on conflicts, compacted
// behind a snapshot index.
package raft
