// Package globlease holds the pure building blocks of the GlobLease protocol (liu thesis 4.1,
// ../shared/seeds/liu-thesis-globlease-meteorshower.txt) that decide, from the stream of
// requests a node sees, where data should live:
//
//   - HotKeys finds the keys hot enough to deserve extra read replicas. The thesis (4.1.4,
//     "Scalability and Elasticity of GlobLease", "Affiliated Nodes") attaches lightweight
//     affiliated nodes to a host node and replicates "a configurable subset of the keys" on
//     them under a secondary lease, so that "only highly requested data items are replicated"
//     and spiky, skewed workloads are absorbed in seconds. It leaves open how that subset is
//     chosen; HotKeys chooses it online, with a bounded table and hysteresis.
//   - Origins finds the keys whose master should move to the region that writes them. In the
//     thesis's write-dominant experiment (4.1.5, "Evaluation of GlobLease") master migration
//     "is not automated, it is achieved by calling the master migration API from a script by
//     analyzing the incoming workload (offline)". Origins is that analysis done online, with
//     a share threshold, a hold time and a cooldown so that a master never flaps between
//     regions whose clients take turns writing.
//
// Everything here is sans-IO and deterministic: no goroutines, no clocks (the caller passes
// now), no randomness, and every result that comes from a map is sorted before it is
// returned. Every table has a fixed capacity, so memory stays bounded however many distinct
// keys the workload touches.
package globlease
