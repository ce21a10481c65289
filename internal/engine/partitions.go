package engine

import (
	"cmp"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/placement"
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
