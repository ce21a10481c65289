package node

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/storage"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// The node's guards (issue 12): what it refuses before a protocol core sees it, and how it
// says so — peer messages that fail validation, and writes its full disk cannot take. Every
// refusal is counted on /metrics; logs are bounded (rateLog), never one line per operation.

// guardMetrics are the series of the guards.
type guardMetrics struct {
	peerRejected *prometheus.CounterVec // by wire.Reject* reason
	peerRefused  *prometheus.CounterVec // streams refused at setup, by transport.Refuse* reason
	diskRefusals *prometheus.CounterVec // by source: client, peer
	diskRefused  atomic.Int64           // the sum of diskRefusals, for the log summaries
}

func (g *guardMetrics) refusedOnFullDisk(source string) {
	g.diskRefusals.WithLabelValues(source).Inc()
	g.diskRefused.Add(1)
}

func newGuardMetrics(reg *prometheus.Registry, n *Node) *guardMetrics {
	g := &guardMetrics{
		peerRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_peer_messages_rejected_total",
			Help: "Peer messages refused by validation before reaching the protocol (future_version: a version beyond ε + clock.future_version_margin ahead of this node's clock), by reason.",
		}, []string{"reason"}),
		peerRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_peer_streams_refused_total",
			Help: "Incoming peer streams refused at setup (not a node of this cluster, wrong address) and messages sent in another node's name, by reason.",
		}, []string{"reason"}),
		diskRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_disk_full_refusals_total",
			Help: "Writes refused because the data disk is below its free-space floor: client writes (source=client) and replicated writes from peers (source=peer).",
		}, []string{"source"}),
	}
	reg.MustRegister(g.peerRejected, g.peerRefused, g.diskRefusals)
	disk := func(name, help string, f func(storage.DiskState) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(n.store.DiskState()) }))
	}
	disk("meridian_disk_full", "1 while the data disk is below its free-space floor and writes are refused.", func(s storage.DiskState) float64 {
		if s.Full {
			return 1
		}
		return 0
	})
	disk("meridian_disk_available_bytes", "Free bytes on the data disk at the last reading.", func(s storage.DiskState) float64 { return float64(s.AvailBytes) })
	disk("meridian_disk_total_bytes", "Size of the data disk.", func(s storage.DiskState) float64 { return float64(s.TotalBytes) })
	disk("meridian_disk_reserve_bytes", "Space the store keeps for itself: writes are refused below half of it; the other half is the emergency ballast.", func(s storage.DiskState) float64 { return float64(s.ReserveBytes) })
	disk("meridian_storage_enospc_total", "Storage writes that met a full disk (each gave back the ballast).", func(s storage.DiskState) float64 { return float64(s.NoSpaceErrors) })
	return g
}

// admitPeer validates env (wire.PeerCheck) and refuses replicated writes while the disk is
// full. It reports whether env may be queued for the core.
func (n *Node) admitPeer(env *peerpb.Envelope) bool {
	pc := wire.PeerCheck{
		Self: n.self.ID, Members: n.isMember, Placement: n.pmap.Load(), Limits: n.opts.Cluster.Limits,
		Now: n.clock.Now(), MaxFuture: n.opts.Cluster.Clock.MaxFutureVersion(),
	}
	rej := pc.Envelope(env)
	if rej == nil {
		// Engine 0 is the node runtime itself (NodeStats); every other ID names a protocol.
		_, runtimeMsg := env.Msg.(*peerpb.Envelope_NodeStats)
		if _, ok := engine.LookupID(env.GetEngine()); !ok && !(runtimeMsg && env.GetEngine() == 0) {
			rej = &wire.Rejection{Reason: "unknown_engine", Detail: fmt.Sprintf("no protocol has engine ID %d (protocols: %v)", env.GetEngine(), engine.Names())}
		}
	}
	if rej != nil {
		n.gm.peerRejected.WithLabelValues(rej.Reason).Inc()
		if ok, suppressed := n.logs.allow("peer_rejected/" + rej.Reason); ok {
			n.log.Warn("peer message rejected", "from", env.GetFrom(), "type", wire.MessageType(env), "reason", rej.Reason,
				"detail", rej.Detail, "similar_suppressed", suppressed)
		}
		return false
	}
	// Nodes exchange messages about a keyspace only under the same replica sets: one made
	// under others (both known to the cluster metadata: version 0 is a configuration
	// file's keyspace not imported yet, placed the same way everywhere) is dropped. The
	// sender or this node is behind the metadata and catches up as its learner. Splits and
	// merges keep the replicas version, so they drop nothing.
	if name, ok := wire.KeyspaceOf(env); ok && env.GetPlacementVersion() != 0 {
		if ks, ok := n.pmap.Load().Keyspace(name); ok && ks.ReplicasVersion != 0 && ks.ReplicasVersion != env.GetPlacementVersion() {
			reason := "placement_stale" // the sender is behind
			if env.GetPlacementVersion() > ks.ReplicasVersion {
				reason = "placement_behind" // this node is behind
			}
			n.gm.peerRejected.WithLabelValues(reason).Inc()
			return false
		}
	}
	if wire.CarriesReplicatedWrite(env) {
		if ds := n.store.DiskState(); ds.Full {
			// Dropped like a lost message: the coordinator counts this replica as not having
			// acknowledged, and anti-entropy repairs it once space is back.
			n.gm.refusedOnFullDisk("peer")
			return false
		}
	}
	return true
}

func (n *Node) isMember(id uint32) bool { _, ok := n.memb.Load().byID[id]; return ok }

// RefusedPeerStream counts and logs (bounded) an incoming peer stream the transport refused.
func (n *Node) RefusedPeerStream(reason, remote string, err error) {
	n.gm.peerRefused.WithLabelValues(reason).Inc()
	if ok, suppressed := n.logs.allow("peer_refused/" + reason); ok {
		n.log.Warn("peer stream refused", "remote", remote, "reason", reason, "err", err, "similar_suppressed", suppressed)
	}
}

// refuseWriteOnFullDisk refuses a client write at once when it would be stored on this
// node's full disk. A write this node only coordinates (it holds no replica of the key) is
// not refused: its replicas decide for themselves.
func (n *Node) refuseWriteOnFullDisk(req engine.Request) error {
	if req.Op != engine.OpPut && req.Op != engine.OpDelete {
		return nil
	}
	ds := n.store.DiskState()
	if !ds.Full {
		return nil
	}
	if ks, ok := n.pmap.Load().Keyspace(req.Keyspace); ok && !ks.Lookup(req.Key).HasReplica(n.self.ID) {
		return nil
	}
	n.gm.refusedOnFullDisk("client")
	return errs.New(errs.Exhausted, "disk full on node %s (%s); reads are still served", n.self.Name, ds)
}

// diskWatcher logs the disk's transitions to and from full, and while it stays full a
// summary once a minute (refusals since the last line) — never a line per operation. Near
// the floor the state can flap as compactions free space and writes take it again, so each
// kind of transition is logged at most once a minute too, with the number suppressed.
func (n *Node) diskWatcher() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	wasFull := false
	var lastSummary time.Time
	var refusedAtSummary int64
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		ds := n.store.DiskState()
		switch {
		case ds.Full && !wasFull:
			if ok, suppressed := n.logs.allow("disk_full"); ok {
				n.log.Error("disk full: refusing client and replicated writes until space is freed; reads are still served", "state", ds.String(),
					"enospc", ds.NoSpaceErrors, "similar_suppressed", suppressed)
			}
			lastSummary, refusedAtSummary = time.Now(), n.gm.diskRefused.Load()
		case ds.Full && time.Since(lastSummary) >= time.Minute:
			r := n.gm.diskRefused.Load()
			n.log.Error("disk still full", "state", ds.String(), "writes_refused_last_minute", r-refusedAtSummary, "enospc", ds.NoSpaceErrors)
			lastSummary, refusedAtSummary = time.Now(), r
		case !ds.Full && wasFull:
			if ok, suppressed := n.logs.allow("disk_recovered"); ok {
				n.log.Info("disk space recovered: writes accepted again", "state", ds.String(), "similar_suppressed", suppressed)
			}
		}
		wasFull = ds.Full
	}
}

// rateLog allows one log line per key per interval and counts what it suppressed. Keys are
// a fixed set (reasons); the map is cleared if it ever grows past a bound.
type rateLog struct {
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	quiet map[string]int
}

func newRateLog(every time.Duration) *rateLog {
	return &rateLog{every: every, last: map[string]time.Time{}, quiet: map[string]int{}}
}

// allow reports whether a line for key may be logged now, and how many were suppressed
// since the last one.
func (r *rateLog) allow(key string) (bool, int) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.last[key]; ok && now.Sub(last) < r.every {
		r.quiet[key]++
		return false, 0
	}
	if len(r.last) > 1024 {
		clear(r.last)
		clear(r.quiet)
	}
	suppressed := r.quiet[key]
	r.last[key], r.quiet[key] = now, 0
	return true, suppressed
}
