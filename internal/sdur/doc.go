// Package sdur is Geo-SDUR, scalable deferred update replication across regions
// (../shared/seeds/geo-sdur-deferred-update-replication.txt), as a sans-IO state machine: one
// Replica per replica of a partition. Its inputs are the entries of the partition's atomic
// broadcast (Deliver, in log order: a partition's Raft log), votes of the other partitions
// (Vote) and the passage of time (Tick); its outputs (Ready) are the outcomes of transactions,
// the writes to apply (versioned by the snapshot counter), the votes to send, and the
// proposals the runtime must append to other partitions' logs (recovery, section IV-F).
//
// Everything a replica decides — a vote, a position in the pending list, an outcome, the order
// and version of the writes — is a function of the delivered entries alone, so every replica
// of a partition decides alike (section IV-G 3a). The paper's Algorithm 2 is not: there,
// certification reads the committed database (line 49) and the pending list (lines 52, 56),
// whose contents depend on when a replica happened to receive the votes of an earlier global
// transaction. A replica that had completed (and aborted) global u certifies a later t against
// a database without u; one that had not, against a pending list with u — they vote
// differently, and a local transaction commits on one and aborts on the other. The fixes (and
// the three defects the issue names) are documented where they apply:
//
//   - Globals are certified at delivery against every transaction delivered before them that
//     is not in their snapshot: pending, or completed after it, whatever its outcome
//     (conservative, so that a replica that has not yet learnt an outcome and one that has
//     decide alike). Per key the replica keeps the index of the last completion that read and
//     that wrote it, and how many pending transactions do: O(1) per key, no window of past
//     transactions to bound (the paper keeps the last K bloom filters, section V).
//   - A global whose snapshot is ahead of this replica's snapshot counter waits (with every
//     later entry) until the replica has completed that far: its certification needs to know
//     which transactions are in its snapshot.
//   - Locals choose their position at delivery only among the pending globals still within
//     their reordering threshold — which no replica can have completed yet, so the suffix is
//     the same everywhere — and are certified (line 49 and 56: nothing committed between their
//     snapshot and their position wrote what they read) when they reach the head of the
//     pending list, where every replica has completed exactly the same transactions.
//   - Line 29: a global completes once DC ≥ t.rt; line 58: a local may leap it while DC ≤ t.rt
//     (the k-th transaction after it may still leap it, as IV-E says; after that no later
//     delivery can).
//   - Lines 37-39: the writes are applied at version SC+1 (the new snapshot) and the
//     certification range starts after the snapshot (DB[st+1 … SC]).
//   - Writes must be reads (writeset ⊆ readset, section II-B): a blind write is certified as an
//     implicit read of its key at the transaction's snapshot of that partition.
//
// Reordering thresholds come in two kinds (Options.Threshold): counted in delivered entries,
// the paper's k (IV-E), or counted in tick entries the partition's leader appends to the log
// every tick interval while a global waits (beyond the paper: a threshold in time, which needs
// no tuning to the transaction rate and never leaves a global waiting for traffic that does
// not come). Both are changed at run time by a configuration entry in the log.
package sdur
