package node

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/metadata"
	"meridian/internal/storage"
)

// Streams (docs/streams.md): their records live in the cluster metadata like keyspaces'.
// Every node keeps a table of them, loaded from its metadata records at start and changed as
// records become durable (watchCatalog, reloadCatalog), and tells the stream service of
// changes (SetStreamHook) so that the primary can remove a dropped stream's files.

// streamTable is an immutable map of stream records by "keyspace/name".
type streamTable map[string]*metadata.StreamRecord

// StreamEvent is a change of a stream's record on this node: created (or changed), or
// dropped (Dropped; Record is the record it had).
type StreamEvent struct {
	Record  *metadata.StreamRecord
	Dropped bool
}

func streamTableKey(ks, name string) string { return ks + "/" + name }

// streamKeyName splits a stream record key into "keyspace/name".
func streamKeyName(key []byte) string {
	return strings.TrimPrefix(string(key), string(metadata.StreamPrefix()))
}

// SetStreamHook sets the function told of every stream change applied here. It runs in the
// committer: it must not block.
func (n *Node) SetStreamHook(fn func(StreamEvent)) { n.streamHook.Store(&fn) }

func (n *Node) notifyStream(ev StreamEvent) {
	if fn := n.streamHook.Load(); fn != nil {
		(*fn)(ev)
	}
}

// loadStreamRecord adds a stream record read at start.
func loadStreamRecord(t streamTable, r storage.Record) {
	if r.Tombstone {
		return
	}
	if rec, err := metadata.DecodeStream(r.Value); err == nil {
		t[streamTableKey(rec.Spec.Keyspace, rec.Spec.Name)] = rec
	}
}

// applyStreamRecords applies stream records that became durable (watchCatalog).
func (n *Node) applyStreamRecords(writes []storage.Record) {
	var next streamTable
	var events []StreamEvent
	for _, r := range writes {
		if r.Keyspace != metadata.Keyspace || !metadata.IsStreamKey(r.Key) {
			continue
		}
		if next == nil {
			next = maps.Clone(n.streamTable())
		}
		k := streamKeyName(r.Key)
		if r.Tombstone {
			if old, ok := next[k]; ok {
				delete(next, k)
				events = append(events, StreamEvent{Record: old, Dropped: true})
				n.log.Info("stream dropped", "stream", k, "id", old.ID)
			}
			continue
		}
		rec, err := metadata.DecodeStream(r.Value)
		if err != nil {
			n.log.Warn("ignoring an unreadable stream record", "key", string(r.Key), "err", err)
			continue
		}
		if old, ok := next[k]; ok && old.ID != rec.ID {
			events = append(events, StreamEvent{Record: old, Dropped: true})
		}
		next[k] = rec
		events = append(events, StreamEvent{Record: rec})
		n.log.Info("stream installed", "stream", k, "id", rec.ID, "primary", n.MemberName(rec.Primary))
	}
	if next == nil {
		return
	}
	n.streams.Store(&next)
	for _, ev := range events {
		n.notifyStream(ev)
	}
}

// reloadStreams replaces the table with the stream records in storage (after a metadata
// snapshot; reloadCatalog).
func (n *Node) reloadStreams() {
	next := streamTable{}
	err := n.store.Scan(storage.Span{Keyspace: metadata.Keyspace, Start: metadata.StreamPrefix()}, 0, func(r storage.Record) bool {
		if !metadata.IsStreamKey(r.Key) {
			return false
		}
		loadStreamRecord(next, r)
		return true
	})
	if err != nil {
		n.log.Error("could not read the streams after a metadata snapshot", "err", err)
		return
	}
	old := n.streamTable()
	n.streams.Store(&next)
	for k, rec := range old {
		if cur, ok := next[k]; !ok || cur.ID != rec.ID {
			n.notifyStream(StreamEvent{Record: rec, Dropped: true})
		}
	}
	for k, rec := range next {
		if cur, ok := old[k]; !ok || cur.Version != rec.Version {
			n.notifyStream(StreamEvent{Record: rec})
		}
	}
}

func (n *Node) streamTable() streamTable {
	if t := n.streams.Load(); t != nil {
		return *t
	}
	return streamTable{}
}

// Stream returns the stream record this node has applied.
func (n *Node) Stream(keyspace, name string) (*metadata.StreamRecord, bool) {
	r, ok := n.streamTable()[streamTableKey(keyspace, name)]
	return r, ok
}

// Streams returns the streams this node has applied, of keyspace ("": all), by keyspace
// and name.
func (n *Node) Streams(keyspace string) []*metadata.StreamRecord {
	t := n.streamTable()
	var out []*metadata.StreamRecord
	for _, k := range slices.Sorted(maps.Keys(t)) {
		if keyspace == "" || t[k].Spec.Keyspace == keyspace {
			out = append(out, t[k])
		}
	}
	return out
}

// LookupStream returns a stream's record: this node's copy, or, if it has none yet, the
// metadata group's (LINEARIZABLE: a stream created a moment ago that has not reached this
// node yet is found).
func (n *Node) LookupStream(ctx context.Context, keyspace, name string, timeout time.Duration) (*metadata.StreamRecord, error) {
	if r, ok := n.Stream(keyspace, name); ok {
		return r, nil
	}
	res := n.Do(ctx, engine.Request{Op: engine.OpGet, Keyspace: metadata.Keyspace, Key: metadata.StreamKey(keyspace, name),
		Level: "LINEARIZABLE", Deadline: n.clock.Now().Add(timeout)})
	switch {
	case res.Err != nil:
		return nil, res.Err
	case !res.Found:
		return nil, errs.New(errs.NotFound, "no stream %q in keyspace %q", name, keyspace)
	}
	rec, err := metadata.DecodeStream(res.Value)
	if err != nil {
		return nil, errs.New(errs.Internal, "%v", err)
	}
	return rec, nil
}

// CreateStream creates a stream through the cluster metadata: its primary is the
// least-loaded of the keyspace's nodes that this node sees alive. It returns once every live
// node has applied it (notInstalled names those that had not).
func (n *Node) CreateStream(ctx context.Context, spec metadata.StreamSpec, timeout time.Duration) (*metadata.StreamRecord, []string, error) {
	spec, err := metadata.NormalizeStreamSpec(spec)
	if err != nil {
		return nil, nil, err
	}
	ks, ok := n.pmap.Load().Keyspace(spec.Keyspace)
	if !ok {
		return nil, nil, errs.New(errs.NotFound, "create stream %q: no keyspace %q", spec.Name, spec.Keyspace)
	}
	var cands []uint32
	for _, p := range ks.Partitions {
		for _, id := range p.Replicas {
			if !slices.Contains(cands, id) && n.memberAlive(id) {
				cands = append(cands, id)
			}
		}
	}
	slices.Sort(cands)
	if len(cands) == 0 {
		return nil, nil, errs.New(errs.Unavailable, "create stream %q: node %s sees none of keyspace %q's nodes alive", spec.Name, n.self.Name, spec.Keyspace)
	}
	out, un, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpCreateStream, Stream: &spec, Candidates: cands}, timeout, true)
	if err != nil {
		return nil, nil, err
	}
	if out.Stream == nil {
		return nil, nil, errs.New(errs.Internal, "create stream %q: the metadata returned no stream", spec.Name)
	}
	return out.Stream, n.notInstalledNames(un), nil
}

// DropStream drops a stream through the cluster metadata; its primary removes its files.
func (n *Node) DropStream(ctx context.Context, keyspace, name string, expectVersion uint64, timeout time.Duration) (*metadata.StreamRecord, []string, error) {
	if keyspace == "" {
		return nil, nil, errs.New(errs.Invalid, "drop stream: keyspace name is empty")
	}
	if err := metadata.ValidateStreamName(name); err != nil {
		return nil, nil, err
	}
	out, un, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpDropStream, Name: keyspace, StreamName: name, ExpectVersion: expectVersion}, timeout, true)
	if err != nil {
		return nil, nil, err
	}
	return out.Stream, n.notInstalledNames(un), nil
}

// memberAlive reports whether a member has been heard from recently (its statistics are
// fresh; elastic.go's liveness, safe off the event loop).
func (n *Node) memberAlive(id uint32) bool {
	n.el.mu.Lock()
	defer n.el.mu.Unlock()
	ok, _ := n.fresh(id, n.clock.Now())
	return ok
}

// MemberAddress is a member's client address ("" if unknown).
func (n *Node) MemberAddress(id uint32) string {
	if m, ok := n.Member(id); ok {
		return m.Listen
	}
	return ""
}

// DataDir is the node's data directory.
func (n *Node) DataDir() string { return n.opts.DataDir }
