// Package kawkab holds Kawkab's storage structures and its stream engine: an append-only
// time-series stream store (../shared/seeds/thesis-mayflower-canopus-kawkab.txt, chapter 5).
//
// index.go is the time index of a stream (section 5.5): a k-ary post-order heap of fixed-size
// index blocks (5.4.2, Figs. 5.5–5.7) whose body entries hold the minimum and maximum timestamp
// of one data block each, built append-only as records arrive (5.5.2) and searched backwards
// from the last block (5.5.3). Beyond the thesis, every entry and every header entry also
// carries a summary (count, sum, minimum, maximum) of a numeric value of the records, so an
// aggregate over a time range is answered from index blocks alone except at the (at most two)
// data blocks at its edges. It is pure and deterministic: no clocks, no goroutines, its blocks
// kept through a NodeStore.
//
// stream.go is a stream's schema and record layout (5.2, 5.4.1): fixed-size records whose
// first 8 bytes are the timestamp, 16 KiB data blocks that no record straddles, 4 MiB chunks.
// chunkfile.go is the local chunk store of one stream (5.3.2, "Local Store Service"): dense
// data chunk files, index chunk files that are the index's NodeStore, the metadata file.
// engine.go is the stream engine: appends acknowledged at a stream's level (fsynced with
// group commit, or written), reads by record number and time range, aggregates, and recovery
// from the files alone after a crash.
//
// cache.go is the buffer cache (5.3.2, "Memory Manager"; 5.6's timer queues): sharded,
// reference-counted 16 KiB buffers from per-shard pools, clean blocks evicted above 90% full,
// dirty ones never, single-flight loads, and owners that keep a block until a timeout.
//
// objstore.go is the object-store tier (5.3.2, the global store): the ObjectStore interface
// (Put, ranged Get, Delete, List by prefix) with its rules for keys, ranges and errors, an
// in-memory store for tests and a store over a local directory (atomic, fsynced writes; keys
// escaped into paths that cannot leave it). objmodel.go wraps any store in a latency and
// bandwidth model of S3 calibrated on the thesis's measurements (5.7.6), on an injectable
// Clock (clock.go: the wall clock, or a discrete-event VirtualClock for tests). The S3 client
// and an embedded S3-compatible server are in package s3store, the conformance suite every
// implementation passes in package objstoretest.
//
// store.go is a node's streams (5.3.2: the worker node's memory manager, local store and
// global store services): OpenStore recovers every stream in a directory; full chunks are
// uploaded in order per stream by a pool of workers, with the index nodes that describe them
// and a manifest (manifest.go) recording the uploaded prefix; uploaded chunks are deleted
// least recently used first while the local store is more than half full (5.3.2, 5.7.1);
// appends are slowed above a high-water mark and declined at the capacity (ErrStoreFull).
// blockread.go reads a stream's blocks through the buffer cache, from the local files or, for
// chunks deleted after their upload, with ranged GETs. remote.go reads a stream's uploaded
// prefix at a node other than the primary, from the object store alone (5.7.5, Fig. 5.12).
//
// docs/kawkab.md describes the layouts, the corrected entry formula of 5.5.1, what each
// acknowledgement level survives, recovery and the tests.
package kawkab
