// Package repro holds the reproductions of the seed papers' experiments that need more than
// a `bench compare` run: each drives the general benchmark (package bench) through the sweep
// a paper's figure or table describes and tabulates the result beside the paper's numbers.
// Today: GlobLease's figures 4.4–4.8 and hot-key spike (liu-thesis section 4.1.5,
// `meridian bench globlease-figs` and `globlease-spike`).
package repro
