package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/metadata"
	"meridian/internal/placement"
	"meridian/internal/storage"
)

// The catalog: keyspaces and their placement live in the cluster metadata group (the
// metadata keyspace, package metadata), a consensus group whose voters are a few nodes and whose
// learners are all the others, so every node holds the whole catalog.
//
//   - A change (create, alter, drop) is a command of that group, conditional on the version
//     it was based on; it returns once every live node has applied it, or names the nodes
//     that have not (CreateKeyspace and friends).
//   - A node installs a keyspace in the committer, as soon as the metadata record is durable
//     and before anything that follows it leaves (watchCatalog); it drops a keyspace the same
//     way, with its data.
//   - Keyspaces of the configuration file are served from the file at once (placement
//     version 0) and imported into the metadata by every node (create-if-never-imported):
//     the first import wins, and from then on the metadata is what counts.
//   - A data directory written before the metadata group (layout 1: the catalog was a quorum
//     keyspace, "_system") is migrated: its keyspaces are served and imported the same way,
//     then the old catalog is deleted and the directory marked layout 2. A directory of a
//     newer layout is refused.

// layoutKey is the storage meta key holding the data directory's layout version.
const layoutKey = "layout"

// currentLayout is the layout this code writes: the catalog in the metadata group.
const currentLayout = 2

// legacyCatalogPrefix is the key prefix of the layout-1 catalog's records.
const legacyCatalogPrefix = "keyspace/"

// checkLayout refuses a data directory of a newer layout, and reports whether this one has
// yet to be marked with the current layout.
func (n *Node) checkLayout() (mark bool, err error) {
	b, found, err := n.store.GetMeta(layoutKey)
	if err != nil {
		return false, fmt.Errorf("node %s: read the data layout: %w", n.self.Name, err)
	}
	if !found {
		return true, nil
	}
	v, err := strconv.Atoi(string(b))
	if err != nil {
		return false, fmt.Errorf("node %s: data directory has an unreadable layout %q (%w)", n.self.Name, b, storage.ErrCorrupt)
	}
	if v > currentLayout {
		return false, fmt.Errorf("node %s: the data directory was written by a newer Meridian (data layout %d; this binary reads layouts up to %d); run the newer binary", n.self.Name, v, currentLayout)
	}
	return v < currentLayout, nil
}

// loadPlacement builds the placement the node starts with: the metadata keyspace, the
// keyspaces the metadata group had applied here before (newest first), and the keyspaces of
// the configuration file and of a layout-1 catalog that the metadata does not hold yet.
func (n *Node) loadPlacement() (*placement.Map, error) {
	mark, err := n.checkLayout()
	if err != nil {
		return nil, err
	}
	pm := &placement.Map{Version: 1, Keyspaces: map[string]*placement.Keyspace{}}
	pm.Keyspaces[metadata.Keyspace] = metadata.SystemKeyspace(n.opts.Cluster)

	// What the metadata group had applied here (each key's newest version).
	dropped := map[string]bool{}
	records := map[uint32]*metadata.NodeRecord{}
	streams := streamTable{}
	err = n.store.Scan(storage.KeyspaceSpan(metadata.Keyspace), 0, func(r storage.Record) bool {
		if metadata.IsStreamKey(r.Key) {
			loadStreamRecord(streams, r)
			return true
		}
		if metadata.IsNodeKey(r.Key) && !r.Tombstone {
			if rec, derr := metadata.DecodeNode(r.Value); derr == nil {
				records[rec.ID] = rec
			}
			return true
		}
		name, ok := metadata.IsKeyspaceKey(r.Key)
		if !ok {
			return true
		}
		if r.Tombstone {
			dropped[name] = true
			return true
		}
		rec, derr := metadata.DecodeKeyspace(r.Value)
		if derr != nil {
			err = fmt.Errorf("keyspace record %q: %w", r.Key, derr)
			return false
		}
		pm.Keyspaces[name] = rec.Placement()
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: load the catalog: %w", n.self.Name, err)
	}
	n.streams.Store(&streams)
	if self := n.opts.Self; self != nil && records[self.ID] == nil {
		// A node that has just joined knows itself before the metadata's record of it
		// reaches it: as a learner of the metadata group, it gets the catalog from there.
		records[self.ID] = &metadata.NodeRecord{ID: self.ID, Name: self.Name, Region: self.Region, State: metadata.NodeJoining,
			Listen: self.Listen, PeerListen: self.PeerListen, Metrics: self.Metrics, Joined: 1}
	}
	if len(records) > 0 {
		m := newMembership(n.opts.Cluster.Nodes, records)
		n.memb.Store(m)
		pm.Keyspaces[metadata.Keyspace] = m.systemKeyspace(n.opts.Cluster)
		pm.Nodes = m.nodes()
	}

	// The configuration file's keyspaces, until the metadata has them.
	for _, ks := range n.opts.Cluster.Keyspaces {
		n.imports = append(n.imports, ks)
		if _, ok := pm.Keyspaces[ks.Name]; ok || dropped[ks.Name] {
			continue
		}
		pk, err := placement.BuildKeyspace(ks, n.opts.Cluster.Nodes)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.self.Name, err)
		}
		pm.Keyspaces[ks.Name] = pk
	}

	// A layout-1 catalog's keyspaces, the same way.
	if mark {
		err = n.store.Scan(storage.Span{Keyspace: metadata.LegacyKeyspace, Start: []byte(legacyCatalogPrefix)}, 0, func(r storage.Record) bool {
			if r.Tombstone || !strings.HasPrefix(string(r.Key), legacyCatalogPrefix) {
				return true
			}
			var spec config.Keyspace
			if jerr := json.Unmarshal(r.Value, &spec); jerr != nil {
				n.log.Warn("ignoring an unreadable keyspace of the old catalog", "key", string(r.Key), "err", jerr)
				return true
			}
			if verr := config.ValidateKeyspace(&spec, n.opts.Cluster); verr != nil {
				n.log.Warn("ignoring a keyspace of the old catalog this configuration does not allow", "keyspace", spec.Name, "err", verr)
				return true
			}
			n.imports = append(n.imports, spec)
			n.legacyCatalog = true
			if _, ok := pm.Keyspaces[spec.Name]; !ok && !dropped[spec.Name] {
				if pk, berr := placement.BuildKeyspace(spec, n.opts.Cluster.Nodes); berr == nil {
					pm.Keyspaces[spec.Name] = pk
				}
			}
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("node %s: read the old catalog: %w", n.self.Name, err)
		}
		if n.legacyCatalog {
			n.log.Info("data directory of layout 1: its catalog will be imported into the cluster metadata", "keyspaces", len(n.imports)-len(n.opts.Cluster.Keyspaces))
		} else if err := n.store.PutMeta(layoutKey, []byte(strconv.Itoa(currentLayout)), true); err != nil {
			return nil, fmt.Errorf("node %s: mark the data layout: %w", n.self.Name, err)
		}
	}
	return pm, nil
}

// watchCatalog installs, changes and drops keyspaces as their metadata records become
// durable here. It runs in the committer after the batch holding them is synced and before
// that batch's messages and replies leave, and it is the only writer of the placement map
// after start; the event loop hands the new map to the engines before the next input
// (syncPlacement), so a request the gateway accepted under the new map never reaches an
// engine without it. A dropped keyspace's data is deleted here, before anything later.
func (n *Node) watchCatalog(writes []storage.Record) {
	pm := n.pmap.Load()
	changed := false
	defer n.applyStreamRecords(writes)
	for _, r := range writes {
		if r.Keyspace != metadata.Keyspace || metadata.IsStreamKey(r.Key) {
			continue
		}
		if metadata.IsNodeKey(r.Key) && !r.Tombstone {
			rec, err := metadata.DecodeNode(r.Value)
			if err != nil {
				n.log.Warn("ignoring an unreadable node record", "key", string(r.Key), "err", err)
				continue
			}
			pm, changed = n.setMembership(n.memb.Load().with(rec, time.Now()), pm), true
			n.log.Info("member changed", "member", rec.Name, "id", rec.ID, "region", rec.Region, "state", rec.State)
			n.noteOwnState(rec)
			continue
		}
		name, ok := metadata.IsKeyspaceKey(r.Key)
		if !ok || strings.HasPrefix(name, "_") {
			continue
		}
		if r.Tombstone {
			if _, ok := pm.Keyspace(name); !ok {
				continue
			}
			pm, changed = pm.Without(name), true
			if err := n.store.DeleteKeyspace(name); err != nil {
				n.log.Error("could not delete a dropped keyspace's data", "keyspace", name, "err", err)
			}
			n.log.Info("keyspace dropped", "keyspace", name)
			continue
		}
		rec, err := metadata.DecodeKeyspace(r.Value)
		if err != nil {
			n.log.Warn("ignoring an unreadable keyspace record", "key", string(r.Key), "err", err)
			continue
		}
		if cur, ok := pm.Keyspace(name); ok && cur.Version >= rec.Version && cur.Version != 0 {
			continue
		}
		pm, changed = pm.With(rec.Placement()), true
		n.log.Info("keyspace installed", "keyspace", name, "placement_version", rec.Version)
	}
	if changed {
		n.pmap.Store(pm)
	}
}

// reloadCatalog installs the catalog from the metadata records in storage, after a snapshot
// of the metadata group replaced them (a node that joins, or one far behind, catches up by
// snapshot, and a snapshot's records never pass through watchCatalog): keyspaces newer there
// are installed, keyspaces of the metadata that it no longer holds are dropped, and the node
// records become the membership. Runs in the committer, like watchCatalog.
func (n *Node) reloadCatalog() {
	defer n.reloadStreams()
	pm := n.pmap.Load()
	seen := map[string]bool{}
	m := n.memb.Load()
	changed := false
	err := n.store.Scan(storage.KeyspaceSpan(metadata.Keyspace), 0, func(r storage.Record) bool {
		if r.Tombstone {
			return true
		}
		if metadata.IsNodeKey(r.Key) {
			if rec, err := metadata.DecodeNode(r.Value); err == nil {
				if old, ok := m.records[rec.ID]; !ok || old.Version < rec.Version {
					m = m.with(rec, time.Now())
					n.noteOwnState(rec)
					changed = true
				}
			}
			return true
		}
		name, ok := metadata.IsKeyspaceKey(r.Key)
		if !ok || strings.HasPrefix(name, "_") {
			return true
		}
		rec, err := metadata.DecodeKeyspace(r.Value)
		if err != nil {
			return true
		}
		seen[name] = true
		if cur, ok := pm.Keyspace(name); ok && cur.Version >= rec.Version && cur.Version != 0 {
			return true
		}
		pm, changed = pm.With(rec.Placement()), true
		n.log.Info("keyspace installed from a metadata snapshot", "keyspace", name, "placement_version", rec.Version)
		return true
	})
	if err != nil {
		n.log.Error("could not read the catalog after a metadata snapshot", "err", err)
		return
	}
	for name, ks := range pm.Keyspaces {
		if strings.HasPrefix(name, "_") || seen[name] || ks.Version == 0 {
			continue
		}
		pm, changed = pm.Without(name), true
		if err := n.store.DeleteKeyspace(name); err != nil {
			n.log.Error("could not delete a dropped keyspace's data", "keyspace", name, "err", err)
		}
		n.log.Info("keyspace dropped (absent from a metadata snapshot)", "keyspace", name)
	}
	if m != n.memb.Load() {
		pm = n.setMembership(m, pm)
	}
	if changed {
		n.pmap.Store(pm)
	}
}

// admitWrites drops the records of keyspaces that are not (any more) in the placement: an
// engine's write for a keyspace dropped meanwhile must not outlive the drop.
func (n *Node) admitWrites(writes []storage.Record) []storage.Record {
	pm := n.pmap.Load()
	kept := writes[:0]
	for _, r := range writes {
		if _, ok := pm.Keyspaces[r.Keyspace]; ok {
			kept = append(kept, r)
			continue
		}
		n.m.dropped.WithLabelValues("keyspace_dropped").Inc()
	}
	return kept
}

// importCatalog imports the configuration file's keyspaces (and a layout-1 catalog's) into
// the cluster metadata and registers this node, retrying while the metadata group has no
// leader; then it marks the data directory with the current layout. It runs until done or
// the node closes.
func (n *Node) importCatalog() {
	defer n.wg.Done()
	pending := slices.Clone(n.imports)
	registered := false
	backoff := 200 * time.Millisecond
	for {
		var left []config.Keyspace
		for _, spec := range pending {
			if err := n.importKeyspace(spec); err != nil {
				left = append(left, spec)
				if ok, _ := n.logs.allow("import:" + spec.Name); ok {
					n.log.Warn("could not import a keyspace into the cluster metadata yet; retrying", "keyspace", spec.Name, "err", err)
				}
			}
		}
		pending = left
		if !registered {
			registered = n.registerSelf() == nil
		}
		if len(pending) == 0 && registered {
			break
		}
		select {
		case <-n.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	if n.legacyCatalog {
		if err := n.store.DeleteSpan(storage.KeyspaceSpan(metadata.LegacyKeyspace), true); err != nil {
			n.log.Error("could not delete the old catalog after importing it", "err", err)
			return
		}
		n.log.Info("the old catalog is imported into the cluster metadata and deleted")
	}
	if err := n.store.PutMeta(layoutKey, []byte(strconv.Itoa(currentLayout)), true); err != nil {
		n.log.Error("could not mark the data layout", "err", err)
	}
}

// metaCommand runs a metadata command and returns its outcome.
func (n *Node) metaCommand(ctx context.Context, cmd metadata.Command, timeout time.Duration, waitAll bool) (metadata.Outcome, []engine.Unacked, error) {
	res := n.Do(ctx, engine.Request{Op: engine.OpCommand, Keyspace: metadata.Keyspace, Command: cmd.Encode(),
		Deadline: n.clock.Now().Add(timeout), WaitAll: waitAll})
	if res.Err != nil {
		return metadata.Outcome{}, nil, res.Err
	}
	out, err := metadata.DecodeOutcome(res.Output)
	if err != nil {
		return metadata.Outcome{}, nil, errs.New(errs.Internal, "%v", err)
	}
	return out, res.Unacked, nil
}

func (n *Node) importKeyspace(spec config.Keyspace) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpCreate, Spec: &spec, IfAbsent: true, Import: true}, 5*time.Second, false)
	if errs.KindOf(err) == errs.AlreadyExists {
		n.log.Warn("a keyspace of the configuration file differs from the cluster's metadata; the metadata is what counts (change it with alter-keyspace)", "keyspace", spec.Name, "detail", err)
		return nil
	}
	return err
}

func (n *Node) registerSelf() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpRegisterNode,
		Node: &metadata.NodeRecord{ID: n.self.ID, Name: n.self.Name, Region: n.self.Region, State: "active"}}, 5*time.Second, false)
	return err
}

// notInstalledNames renders the nodes that had not applied a change.
func (n *Node) notInstalledNames(un []engine.Unacked) []string {
	var out []string
	for _, u := range un {
		out = append(out, fmt.Sprintf("%s: %s", n.MemberName(u.Node), u.Reason))
	}
	return out
}

// CreateKeyspace creates a keyspace through the cluster metadata and waits until every node
// that is alive has installed it, up to timeout. notInstalled lists the nodes that had not
// ("NAME: reason"): they install it when they catch up with the metadata. version is the
// keyspace's placement version.
func (n *Node) CreateKeyspace(ctx context.Context, spec config.Keyspace, timeout time.Duration) (created config.Keyspace, version uint64, notInstalled []string, err error) {
	if spec.Name == "" {
		return spec, 0, nil, errs.New(errs.Invalid, "create keyspace: name is empty")
	}
	if strings.HasPrefix(spec.Name, "_") {
		return spec, 0, nil, errs.New(errs.Invalid, "keyspace name %q: names starting with _ are reserved", spec.Name)
	}
	if err := config.ValidateKeyspace(&spec, n.opts.Cluster); err != nil {
		return spec, 0, nil, errs.New(errs.Invalid, "%v", err)
	}
	out, un, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpCreate, Spec: &spec}, timeout, true)
	if err != nil {
		return spec, 0, nil, err
	}
	return out.Keyspace.Spec, out.Version, n.notInstalledNames(un), nil
}

// KeyspaceChange is what AlterKeyspace changes.
type KeyspaceChange struct {
	// SetOptions: options to set; an empty value restores the option's default.
	SetOptions map[string]string
	// Regions and ReplicasPerRegion: new replication (empty or 0: unchanged).
	Regions           []string
	ReplicasPerRegion int
	// ExpectVersion: apply only if the keyspace is still at this version (0: any).
	ExpectVersion uint64
}

// AlterKeyspace changes a keyspace through the cluster metadata, waiting as CreateKeyspace.
func (n *Node) AlterKeyspace(ctx context.Context, name string, ch KeyspaceChange, timeout time.Duration) (spec config.Keyspace, version uint64, unchanged bool, notInstalled []string, err error) {
	if name == "" {
		return spec, 0, false, nil, errs.New(errs.Invalid, "alter keyspace: name is empty")
	}
	if len(ch.SetOptions) == 0 && len(ch.Regions) == 0 && ch.ReplicasPerRegion == 0 {
		return spec, 0, false, nil, errs.New(errs.Invalid, "alter keyspace %q: nothing to change (set options, regions or replicas_per_region)", name)
	}
	cmd := metadata.Command{Op: metadata.OpAlter, Name: name, ExpectVersion: ch.ExpectVersion, SetOptions: ch.SetOptions,
		Regions: ch.Regions, ReplicasPerRegion: ch.ReplicasPerRegion}
	out, un, err := n.metaCommand(ctx, cmd, timeout, true)
	if err != nil {
		return spec, 0, false, nil, err
	}
	return out.Keyspace.Spec, out.Version, out.Unchanged, n.notInstalledNames(un), nil
}

// SplitPartition splits the partition holding key at key (key starts the new partition),
// through the cluster metadata, waiting as CreateKeyspace. The partition is the one of this
// node's map; if a concurrent change moved the boundary, the command fails clearly (the
// metadata checks key against the partition as it is then).
func (n *Node) SplitPartition(ctx context.Context, keyspace string, key []byte, expectVersion uint64, timeout time.Duration) (*metadata.KeyspaceRecord, []string, error) {
	ks, ok := n.pmap.Load().Keyspace(keyspace)
	if !ok || strings.HasPrefix(keyspace, "_") {
		return nil, nil, errs.New(errs.NotFound, "split: no keyspace %q", keyspace)
	}
	if len(key) == 0 {
		return nil, nil, errs.New(errs.Invalid, "split keyspace %q: the split key is empty (the first partition always starts at the empty key)", keyspace)
	}
	if len(key) > n.opts.Cluster.Limits.MaxKeyBytes {
		return nil, nil, errs.New(errs.Invalid, "split keyspace %q: split key of %d bytes exceeds max_key_bytes (%d)", keyspace, len(key), n.opts.Cluster.Limits.MaxKeyBytes)
	}
	p := ks.Lookup(key)
	if string(p.Start) == string(key) {
		return nil, nil, errs.New(errs.Invalid, "split keyspace %q: partition %d already starts at %q", keyspace, p.ID, key)
	}
	cmd := metadata.Command{Op: metadata.OpSplit, Name: keyspace, Partition: p.ID, SplitKey: key, ExpectVersion: expectVersion}
	out, un, err := n.metaCommand(ctx, cmd, timeout, true)
	if err != nil {
		return nil, nil, err
	}
	return out.Keyspace, n.notInstalledNames(un), nil
}

// MergePartitions merges partition id with its right-hand neighbour through the cluster
// metadata, waiting as CreateKeyspace.
func (n *Node) MergePartitions(ctx context.Context, keyspace string, id uint32, expectVersion uint64, timeout time.Duration) (*metadata.KeyspaceRecord, []string, error) {
	if _, ok := n.pmap.Load().Keyspace(keyspace); !ok || strings.HasPrefix(keyspace, "_") {
		return nil, nil, errs.New(errs.NotFound, "merge: no keyspace %q", keyspace)
	}
	cmd := metadata.Command{Op: metadata.OpMerge, Name: keyspace, Partition: id, ExpectVersion: expectVersion}
	out, un, err := n.metaCommand(ctx, cmd, timeout, true)
	if err != nil {
		return nil, nil, err
	}
	return out.Keyspace, n.notInstalledNames(un), nil
}

// DropKeyspace removes a keyspace and its data through the cluster metadata, waiting as
// CreateKeyspace. version is the one the keyspace had.
func (n *Node) DropKeyspace(ctx context.Context, name string, expectVersion uint64, timeout time.Duration) (version uint64, notInstalled []string, err error) {
	if name == "" {
		return 0, nil, errs.New(errs.Invalid, "drop keyspace: name is empty")
	}
	out, un, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpDrop, Name: name, ExpectVersion: expectVersion}, timeout, true)
	if err != nil {
		return 0, nil, err
	}
	return out.Version, n.notInstalledNames(un), nil
}

// DescribeKeyspace returns a keyspace's placement: read from the metadata group at
// LINEARIZABLE (reflecting every change that has returned), or this node's installed copy at
// STALE. A keyspace of the configuration file the metadata does not hold yet is this node's
// (placement version 0).
func (n *Node) DescribeKeyspace(ctx context.Context, name string, level config.Level, timeout time.Duration) (*placement.Keyspace, error) {
	if level == "" {
		level = config.LevelLinearizable
	}
	if level != config.LevelLinearizable && level != config.LevelStale {
		return nil, errs.New(errs.Invalid, "describe keyspace: consistency %q is not valid: use LINEARIZABLE or STALE", level)
	}
	local, haveLocal := n.pmap.Load().Keyspace(name)
	if level == config.LevelStale || strings.HasPrefix(name, "_") {
		if !haveLocal {
			return nil, errs.New(errs.NotFound, "unknown keyspace %q", name)
		}
		return local, nil
	}
	res := n.Do(ctx, engine.Request{Op: engine.OpGet, Keyspace: metadata.Keyspace, Key: metadata.KeyspaceKey(name), Level: level,
		Deadline: n.clock.Now().Add(timeout)})
	switch {
	case res.Err != nil:
		return nil, res.Err
	case !res.Found:
		if haveLocal && local.Version == 0 {
			return local, nil // from the configuration file, not imported yet
		}
		return nil, errs.New(errs.NotFound, "unknown keyspace %q", name)
	}
	rec, err := metadata.DecodeKeyspace(res.Value)
	if err != nil {
		return nil, errs.New(errs.Internal, "%v", err)
	}
	return rec.Placement(), nil
}

// Origin says where a keyspace was first defined: "config" (the cluster file) or "api".
func (n *Node) Origin(name string) string {
	for _, ks := range n.opts.Cluster.Keyspaces {
		if ks.Name == name {
			return "config"
		}
	}
	if strings.HasPrefix(name, "_") {
		return "system"
	}
	return "api"
}

// awaitPlacement waits (up to wait) until this node's placement of keyspace is at least
// version, and says whether it is.
func (n *Node) awaitPlacement(ctx context.Context, keyspace string, version uint64, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		if ks, ok := n.pmap.Load().Keyspace(keyspace); ok && ks.Version >= version {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-n.stop:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// CheckPlacement enforces a client's placement version of a keyspace (0: none): a request
// made under an older placement than this node's is refused as stale; one made under a newer
// placement than this node has yet waits briefly for the metadata to catch up here, then is
// refused the same way. It returns the version the request is served under. A request made
// under a version at or after the keyspace's last replica change (ReplicasVersion) is served
// even if splits or merges came since: they changed no key's replicas.
func (n *Node) CheckPlacement(ctx context.Context, keyspace string, clientVersion uint64) (uint64, error) {
	ks, ok := n.pmap.Load().Keyspace(keyspace)
	if !ok {
		return 0, nil // the gateway reports unknown keyspaces
	}
	switch {
	case clientVersion == 0 || (clientVersion >= ks.ReplicasVersion && clientVersion <= ks.Version):
		return ks.Version, nil
	case clientVersion < ks.Version:
		return ks.Version, errs.New(errs.StalePlacement, "keyspace %q is at placement version %d, the request was made under version %d: refresh it (describe-keyspace) and retry", keyspace, ks.Version, clientVersion)
	}
	if n.awaitPlacement(ctx, keyspace, clientVersion, placementWait) {
		ks, _ = n.pmap.Load().Keyspace(keyspace)
		return ks.Version, nil
	}
	return ks.Version, errs.New(errs.StalePlacement, "node %s has placement version %d of keyspace %q, the request needs version %d: this node has not caught up with the cluster metadata yet; retry, or ask another node", n.self.Name, ks.Version, keyspace, clientVersion)
}

// placementWait is how long a node behind a client's placement waits for the metadata.
const placementWait = time.Second
