package engine

import (
	"cmp"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/storage"
)

// LocalPartition is a partition of a keyspace that a node replicates.
type LocalPartition struct {
	Keyspace  *placement.Keyspace
	Partition placement.Partition
}

// LocalPartitions lists the partitions of protocol's keyspaces in m that node replicates,
// by keyspace name and partition ID (engines that keep one instance per partition build them
// from it).
func LocalPartitions(m *placement.Map, protocol string, node uint32) []LocalPartition {
	var out []LocalPartition
	for _, ks := range m.Keyspaces {
		if ks.Spec.Protocol != protocol {
			continue
		}
		for _, p := range ks.Partitions {
			if slices.Contains(p.Replicas, node) {
				out = append(out, LocalPartition{Keyspace: ks, Partition: p})
			}
		}
	}
	slices.SortFunc(out, func(a, b LocalPartition) int {
		return cmp.Or(strings.Compare(a.Keyspace.Spec.Name, b.Keyspace.Spec.Name), cmp.Compare(a.Partition.ID, b.Partition.ID))
	})
	return out
}

// RegisterCounters registers a Prometheus counter per name, read from the engine's atomic
// counters: PREFIX_NAME_total, with help HELP: NAME (in words).
func RegisterCounters(reg prometheus.Registerer, prefix, help string, names []string, counters map[string]*atomic.Int64) {
	for _, name := range names {
		c := counters[name]
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: prefix + name + "_total",
			Help: help + ": " + strings.ReplaceAll(name, "_", " ") + ".",
		}, func() float64 { return float64(c.Load()) }))
	}
}

// Reconcile keeps one instance per local partition: it creates the missing ones, drops (after
// calling drop) those whose partition is no longer local, and returns the keys in local's
// order (by keyspace, then partition).
func Reconcile[K comparable, V any](instances map[K]V, local []LocalPartition, key func(LocalPartition) K,
	create func(K, LocalPartition) V, drop func(K, V)) []K {
	order := make([]K, 0, len(local))
	seen := make(map[K]bool, len(local))
	for _, lp := range local {
		k := key(lp)
		seen[k] = true
		order = append(order, k)
		if _, ok := instances[k]; !ok {
			instances[k] = create(k, lp)
		}
	}
	for k, v := range instances {
		if !seen[k] {
			drop(k, v)
			delete(instances, k)
		}
	}
	return order
}

// LocalRead reads req (a Get or a Scan) from the node's own replica once the Ready that
// carries it is applied, answering with path as the read path.
func LocalRead(req Request, path string) Read {
	return Read{ID: req.ID, Op: req.Op, Run: func(store Reader) Result {
		res := Result{ID: req.ID, Op: req.Op, Path: path}
		if req.Op == OpScan {
			ScanLive(store, storage.Span{Keyspace: req.Keyspace, Start: req.Start, End: req.End}, req.Limit, &res)
			return res
		}
		rec, found, err := store.Get(req.Keyspace, req.Key)
		GetLive(rec, found, err, &res)
		return res
	}}
}

// RoutePartition finds the partition of a keyspace of protocol that req addresses: its key's,
// or, for a scan, the one partition the range lies in (protocols whose partitions are
// consensus instances of their own serve no scan across them).
func RoutePartition(m *placement.Map, protocol string, req Request) (*placement.Keyspace, *placement.Partition, error) {
	ks, ok := m.Keyspace(req.Keyspace)
	if !ok || ks.Spec.Protocol != protocol {
		return nil, nil, errs.New(errs.NotFound, "keyspace %q is not a %s keyspace of this node's map", req.Keyspace, protocol)
	}
	key := req.Key
	if req.Op == OpScan {
		parts := ks.Overlapping(req.Start, req.End)
		if len(parts) != 1 {
			return nil, nil, errs.New(errs.Invalid, "keyspace %q (%s): a scan covers one partition (each partition is a consensus instance of its own; this range covers %d): split the range at the partitions' bounds", req.Keyspace, protocol, len(parts))
		}
		key = parts[0].Start
	}
	return ks, ks.Lookup(key), nil
}
