// Package ycsb generates YCSB workloads for Meridian's benchmark clients.
//
// It is an in-tree port of the parts of the Yahoo! Cloud Serving Benchmark that decide *what*
// a client does next — the operation mix, the request distributions and the key names — written
// to follow YCSB's definitions (Cooper et al., "Benchmarking Cloud Serving Systems with YCSB",
// SoCC 2010) and its Java source (github.com/brianfrankcooper/YCSB, core/src/main/java/site/ycsb:
// workloads/CoreWorkload.java, generator/*.java, Utils.java; workloads/workloada..workloadf).
// The seed papers measure with YCSB: MeteorShower (section IV, 50% reads / 50% updates),
// GlobLease (Liu's thesis, Table 4.2: 95/5 and 5/95 read/write mixes, a skewed Zipfian), and
// ElasCass (Table 2: hashed FNV-64 insert order, zipfian 0.99 and hotspot 80%/20%).
//
// The pieces, with their YCSB counterparts:
//
//   - [Workload], [Core], [ParseMix]: CoreWorkload's properties and the core workloads A–F.
//   - [Shared]: the state one run's clients share — the insert key sequence
//     (AcknowledgedCounterGenerator) and the precomputed distributions.
//   - [Generator]: one client thread's stream of [Op]s (CoreWorkload.doTransaction).
//   - [Zipfian], [ScrambledZipfian], [SkewedLatest], [Hotspot], [Uniform], [AckCounter]:
//     ZipfianGenerator, ScrambledZipfianGenerator, SkewedLatestGenerator,
//     HotspotIntegerGenerator, UniformLongGenerator, AcknowledgedCounterGenerator.
//   - [KeyName], [AppendKeyName], [FNVHash64]: CoreWorkload.buildKeyName and Utils.fnvhash64.
//
// Random numbers come from math/rand/v2 (PCG), one source per client, so streams are
// reproducible from a seed but are not bit-identical to Java's; the distributions are.
package ycsb
