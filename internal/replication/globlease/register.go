package globlease

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/replication/coord"
)

// ID is GlobLease's engine ID on the wire (Envelope.engine).
const ID = 3

func init() {
	engine.Register(engine.Protocol{
		Name:  config.ProtocolGlobLease,
		ID:    ID,
		New:   func(cfg engine.Config, store engine.Reader) engine.Engine { return NewEngine(cfg, store) },
		Check: check,
		// A lease or the master serves a read; without its ε a lease can outlive its
		// holder's right to it (liu-thesis 4.1.3), so clocks beyond ε are outside the model.
		Linearizable:   true,
		ClockDependent: true,
		NoPointLevels:  "reads go to the master or a lease holder, writes to the master (choose write_mode=active|passive)",
		LowerBoundMs:   lowerBoundMs,
		Metrics:        func(reg prometheus.Registerer, e engine.Engine) { registerMetrics(reg, e.(*Engine).Counters()) },
		// The protocol's own broken variants, its replica moves' (gl_move.go) and its splits'
		// and merges' (gl_split.go).
		Mutations: coord.WithMoveMutations(coord.WithMoveMutations(Mutations, MoveMutations), SplitMutations),
		Sim: engine.SimSupport{
			DescribeMessage: describeMessage,
			// Timings scaled to a simulated run of seconds: leases of a few hundred
			// milliseconds so they expire and renew many times, a master lease short enough
			// that failovers happen within the run, hot keys at the simulator's rates.
			KeyspaceOptions: map[string]string{
				"lease": "400ms", "master_lease": "300ms", "election_timeout": "600ms",
				"hot_key_rate": "1", "secondary_lease": "150ms",
				"migrate_hold": "500ms", "migrate_cooldown": "2s",
			},
			// Two nodes per region, so every region has an affiliated node for hot keys.
			NodesPerRegion: 2,
			Invariant:      invariant,
			MutationHints:  coord.WithMoveMutations(MoveMutationHints, SplitMutationHints),
		},
	})
}

// check validates a request's GlobLease fields: point operations take no consistency level
// (reads are served by the master or under a lease) but may take a write mode; scans take
// the quorum levels; keys' masters can be moved.
func check(ks *placement.Keyspace, req *engine.Request, level string) error {
	if req.WriteMode != "" {
		m := strings.ToLower(req.WriteMode)
		if m != "active" && m != "passive" {
			return errs.New(errs.Invalid, "write_mode %q is not valid: use active or passive (or none for the keyspace's default)", req.WriteMode)
		}
		req.WriteMode = m
	}
	switch req.Op {
	case engine.OpScan:
		l, err := engine.ParseLevel(ks, level)
		req.Level = l
		return err
	case engine.OpMoveMaster:
		return nil
	}
	if level != "" {
		return errs.New(errs.Invalid, "keyspace %q uses protocol globlease, which takes no consistency level "+
			"(reads are served by the master or under a lease; writes take write_mode active|passive)", ks.Spec.Name)
	}
	return nil
}

// registerMetrics exports GlobLease's counters (liu-thesis 4.1): how reads were served,
// write modes, lease maintenance, mastership changes and hot keys.
func registerMetrics(reg prometheus.Registerer, gl *Counters) {
	load := func(v *atomic.Int64) func() float64 { return func() float64 { return float64(v.Load()) } }
	labeledCounter := func(name, help, label string, values map[string]*atomic.Int64) {
		for _, lv := range slices.Sorted(maps.Keys(values)) {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help,
				ConstLabels: prometheus.Labels{label: lv}}, load(values[lv])))
		}
	}
	labeledCounter("meridian_globlease_reads_total", "GlobLease reads by how they were served: master (coordinated by the key's master), "+
		"lease (by the coordinator's replica under a valid read lease), forwarded (the coordinator asked the master), "+
		"affiliate (served by this node for a hot key under a secondary lease).",
		"path", map[string]*atomic.Int64{
			PathMaster: &gl.ReadsMaster, PathLease: &gl.ReadsLease,
			PathForwarded: &gl.ReadsForwarded, PathAffiliate: &gl.ReadsAffiliate,
		})
	labeledCounter("meridian_globlease_writes_total", "GlobLease writes this node ran as master, by write mode (passive counts only writes that found no valid lease).",
		"mode", map[string]*atomic.Int64{"active": &gl.WritesActive, "passive": &gl.WritesPassive})
	counter := func(name, help string, v *atomic.Int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, load(v)))
	}
	counter("meridian_globlease_writes_waited_for_lease_total", "GlobLease writes that waited for a lease holder's lease to expire.", &gl.WritesWaitedForLease)
	counter("meridian_globlease_lease_renewals_total", "GlobLease reads at a replica without a valid lease that asked the master for one (liu-thesis 4.1.5).", &gl.LeaseRenewals)
	counter("meridian_globlease_lease_updates_total", "Lease holders GlobLease writes had to update or outwait (liu-thesis 4.1.5).", &gl.LeaseUpdates)
	counter("meridian_globlease_leases_granted_total", "Read leases granted by this node as master.", &gl.LeasesGranted)
	counter("meridian_globlease_lease_expired_waits_total", "GlobLease waits for an expired lease.", &gl.LeasesExpiredWaits)
	counter("meridian_globlease_lease_messages_total", "GlobLease lease messages sent or received by this node (requests, grants, acknowledgements, updates).", &gl.LeaseMessages)
	counter("meridian_globlease_master_moves_total", "Masterships this node took over from another node (a moved key, or a home's keys after failover).", &gl.MasterMoves)
	counter("meridian_globlease_table_changes_total", "Mastership table versions this node applied.", &gl.TableChanges)
	counter("meridian_globlease_recoveries_total", "Keys whose committed version this node recovered after becoming their master.", &gl.Recoveries)
	counter("meridian_globlease_revocations_total", "Lease revocation rounds this node started after taking over keys another master may have leased.", &gl.Revocations)
	counter("meridian_globlease_secondary_grants_total", "Secondary leases granted to affiliated nodes for hot keys.", &gl.SecondaryGrants)
	counter("meridian_globlease_suspect_holders_total", "Lease holders put on probation for leaving a write's update unacknowledged longer than suspect_after.", &gl.SuspectMarks)
	counter("meridian_globlease_short_grants_total", "Leases granted at suspect_lease to holders on probation (liu-thesis 4.1.3: per-node lease length).", &gl.ShortGrants)
	counter("meridian_globlease_move_reports_held_total", "Caught-up reports of a new replica held back until the partition's mastership table let the move finish (a table chosen in the joint configuration, giving every key the same master under the old and the new replicas).", &gl.ReportsHeld)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meridian_globlease_hot_keys",
		Help: "Keys this node currently considers hot (replicated to affiliated nodes)."}, load(&gl.HotKeys)))
}

// invariant is the simulator's step invariant for GlobLease: one master per key, and no
// stale read under a valid lease.
func invariant(now []time.Time, engines []engine.Engine, up []bool) string {
	gls := make([]*Engine, len(engines))
	for i, e := range engines {
		if g, ok := e.(*Engine); ok && up[i] {
			gls[i] = g
		}
	}
	if msg := oneMasterInvariant(now, gls); msg != "" {
		return msg
	}
	return leaseInvariant(now, gls)
}

// leaseInvariant is the timing rule checked directly (liu-thesis 4.1.3): no node may serve a
// version under a valid lease (by its own clock) once a newer write of the key has committed
// at a master. A committed write must have updated every valid lease holder or outwaited it.
func leaseInvariant(now []time.Time, gls []*Engine) string {
	committed := map[string]hlc.Version{}
	for _, g := range gls {
		if g == nil {
			continue
		}
		for id, v := range g.Committed() {
			id = keyOnly(id)
			if committed[id].Less(v) {
				committed[id] = v
			}
		}
	}
	for i, g := range gls {
		if g == nil {
			continue
		}
		for _, l := range g.ServingLeases(now[i]) {
			if cv, ok := committed[keyOnly(l.KeyID)]; ok && l.Version.Less(cv) {
				_, _, key, _ := coord.ParseKeyID(l.KeyID)
				return fmt.Sprintf("node %d serves version %s of key %q under a valid lease, but version %s has committed", l.Node, l.Version, key, cv)
			}
		}
	}
	return ""
}

// oneMasterInvariant: at no step may two nodes act as master of the same key (liu-thesis
// 4.1.3: "either no master or only one correct master of a key exists"). Each node's claim is
// evaluated at its own clock and under its own map: across a replica move two nodes may
// compute different home replicas for the same keys, so claims are compared per stretch of
// keys sharing a home region as well as per home replica; across a split or merge two nodes
// may hold different partitions of the same keys, so claims are compared wherever their
// ranges overlap.
func oneMasterInvariant(now []time.Time, gls []*Engine) string {
	byKs := map[string][]Claim{}
	for i, g := range gls {
		if g == nil {
			continue
		}
		for _, cl := range g.MasterClaims(now[i]) {
			byKs[cl.Keyspace] = append(byKs[cl.Keyspace], cl)
		}
	}
	for _, ks := range slices.Sorted(maps.Keys(byKs)) {
		cls := byKs[ks]
		for i := range cls {
			for j := i + 1; j < len(cls); j++ {
				if msg := claimsConflict(ks, cls[i], cls[j]); msg != "" {
					return msg
				}
			}
		}
	}
	return ""
}

// claimsConflict reports a key that claims a and b (of one keyspace) both cover.
func claimsConflict(ks string, a, b Claim) string {
	lo := a.Start
	if bytes.Compare(b.Start, lo) > 0 {
		lo = b.Start
	}
	hi := a.End
	if hi == nil || (b.End != nil && bytes.Compare(b.End, hi) < 0) {
		hi = b.End
	}
	if hi != nil && bytes.Compare(lo, hi) >= 0 {
		return "" // disjoint ranges
	}
	in := func(k string) bool {
		return bytes.Compare([]byte(k), lo) >= 0 && (hi == nil || bytes.Compare([]byte(k), hi) < 0)
	}
	where := fmt.Sprintf("keyspace %s, partitions %d [%q, %q) and %d [%q, %q)", ks, a.Partition, a.Start, a.End, b.Partition, b.Start, b.End)
	if bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End) && (a.End == nil) == (b.End == nil) {
		for _, h := range a.Homes {
			if slices.Contains(b.Homes, h) {
				return fmt.Sprintf("%s: nodes %d and %d both act as master of the keys homed at node %d", where, a.Node, b.Node, h)
			}
		}
	}
	// Every stretch of keys sharing a home region that meets the overlap starts at one of the
	// claims' representatives or at the overlap's start.
	for _, rep := range append(append(slices.Clone(a.Reps), b.Reps...), string(lo)) {
		if in(rep) && a.ClaimsStretch(rep) && b.ClaimsStretch(rep) {
			return fmt.Sprintf("%s: nodes %d and %d both act as master of the keys from %q (homed at node %d for the one, %d for the other)",
				where, a.Node, b.Node, rep, a.HomeOf([]byte(rep)), b.HomeOf([]byte(rep)))
		}
	}
	for _, k := range append(append([]string{}, a.Keys...), append(b.Keys, append(a.Excluded, b.Excluded...)...)...) {
		if in(k) && a.Claims(k) && b.Claims(k) {
			return fmt.Sprintf("%s: nodes %d and %d both act as master of key %q", where, a.Node, b.Node, k)
		}
	}
	return ""
}

// keyOnly names a key by keyspace and key alone: its partition, part of a key ID, changes when
// a split or merge moves the key to another partition.
func keyOnly(id string) string {
	ks, _, key, ok := coord.ParseKeyID(id)
	if !ok {
		return id
	}
	return coord.KeyID(ks, 0, key)
}
