package raft

import (
	"bytes"
	"sort"

	"google.golang.org/protobuf/proto"

	"meridian/internal/placement"
	"meridian/internal/wire/peerpb"
)

// Naming groups on the wire. A receiver checks every group message against its own placement
// map (wire.PeerCheck: the partition it names exists, and sender and receiver are members of
// it, or left it by a move). Maps differ between nodes for a while after each change, and
// splits and merges create and retire partition IDs: a message naming a partition born after
// the receiver's map, or retired before it, would be refused. So a message names, for the
// check, the anchor of its group: the first partition of the run of neighbouring partitions
// that have the same members and departed nodes as the one holding the group's start key in
// the sender's map. Splits give the new partition its parent's members, and merges join only
// neighbours with the same replicas: both happen inside a run and never create or retire its
// first partition, so a receiver whose map is older or newer by any number of splits and
// merges has the anchor, with the members the group has. The group itself travels in the
// message's group field (when it is not the anchor). A message between maps that differ by a
// replica move may still be refused, as such messages were before splits existed (moves
// change members; the runtime drops it and Raft sends again).

// anchors caches, per keyspace placement, each partition's anchor (by position).
type anchorCache map[*placement.Keyspace][]uint32

// anchorOf returns the anchor of the partition of ks that holds key.
func (e *Engine) anchorOf(ks *placement.Keyspace, key []byte) uint32 {
	if len(ks.Partitions) == 0 {
		return 0
	}
	a, ok := e.anchors[ks]
	if !ok {
		a = make([]uint32, len(ks.Partitions))
		for i := range ks.Partitions {
			if i > 0 && placement.SameRun(&ks.Partitions[i-1], &ks.Partitions[i]) {
				a[i] = a[i-1]
			} else {
				a[i] = ks.Partitions[i].ID
			}
		}
		e.anchors[ks] = a
	}
	i := sort.Search(len(ks.Partitions), func(i int) bool { return bytes.Compare(ks.Partitions[i].Start, key) > 0 }) - 1
	return a[max(i, 0)]
}

// wireRef returns how a message about g names it: the anchor, and the group when it is not
// the anchor.
func (e *Engine) wireRef(g *group) (uint32, *uint32) {
	ks, ok := e.pmap.Keyspace(g.key.keyspace)
	if !ok {
		return g.key.partition, nil
	}
	a := e.anchorOf(ks, g.startKey())
	if a == g.key.partition {
		return a, nil
	}
	return a, proto.Uint32(g.key.partition)
}

// groupOf returns the partition of the group a message is about.
func groupOf(partition uint32, group *uint32) uint32 {
	if group != nil {
		return *group
	}
	return partition
}

// raftMessage wraps one of g's encoded Raft messages.
func (e *Engine) raftMessage(g *group, b []byte) *peerpb.RaftMessage {
	m := &peerpb.RaftMessage{Keyspace: g.key.keyspace, Message: b}
	m.Partition, m.Group = e.wireRef(g)
	return m
}
