// Package elascass is Meridian's placement driver: the ElasCass rules
// (../shared/seeds/elascass-node-bootstrapping.txt) as a deterministic planner. Given the
// cluster's members, its placement and the statistics every node shares (bytes and hits per
// partition replica, request rates, load), Plan returns the metadata changes to make now:
//
//   - bounded partitions (3.1): a partition larger than Θmax splits at its data-volume median,
//     one hotter than a request rate splits at its load median (as CockroachDB's and TiKV's
//     load-based splitters do), and two adjacent partitions on the same replicas merge when
//     together below Θmin, Θmax ≥ 2·Θmin, never below the keyspace's partition floor N;
//   - two-phase bootstrap (3.2): a joining node first takes the partitions with a replica on a
//     dead node (Rule 2) and a share (10%) of the replicas of every heavily loaded node (Rule 3:
//     load above 50% and 20% above the mean), and becomes active — it serves; then, throttled,
//     every node below R̄ = Σν/n takes replicas from nodes above it (Rule 4), from the most
//     loaded first. A source gives up the replica found by walking out from the middle of its
//     replicas ranked by an exponential moving average of their hits (Eq. 3);
//   - decommission (3.3): a leaving node's replicas move one by one to the least loaded node
//     of its region that lacks them; the node is removed once it holds nothing; a node dead for
//     longer than DeadAfter has its replicas re-created elsewhere (Rule 2);
//   - partitions being moved are not split or merged, and moving partitions are not chosen
//     (Rule 1).
//
// Meridian is geo-distributed and ElasCass is not: every rule runs per region (a replica
// moves within its region, R̄ is a region's, sources are the region's nodes), so a region
// keeps its replica count and its local reads.
//
// The driver is sans-IO like the protocol cores: time and state come in, actions go out; the
// node runtime (internal/runtime/node/driver.go) gathers the state and proposes the actions
// to the cluster metadata, where each is conditional, so a driver acting on a stale view
// only loses a round.
package elascass
