// Package kawkab holds Kawkab's storage structures: the pieces of an append-only time-series
// stream store (../shared/seeds/thesis-mayflower-canopus-kawkab.txt, chapter 5) that the rest
// of Kawkab — the streams API, data blocks and chunks, the buffer cache, the local chunk store,
// the object store, the server — will be built on. Everything here is pure and deterministic:
// no clocks, no goroutines, no I/O except through the interfaces the caller supplies.
//
// index.go is the time index of a stream (section 5.5): a k-ary post-order heap of fixed-size
// index blocks (5.4.2, Figs. 5.5–5.7) whose body entries hold the minimum and maximum timestamp
// of one data block each, built append-only as records arrive (5.5.2) and searched backwards
// from the last block (5.5.3). Beyond the thesis, every entry and every header entry also
// carries a summary (count, sum, minimum, maximum) of a numeric value of the records, so an
// aggregate over a time range is answered from index blocks alone except at the (at most two)
// data blocks at its edges. docs/kawkab.md describes the layout, the corrected entry formula
// of 5.5.1 and the tests.
package kawkab
