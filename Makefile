# Meridian — build, test and demo. Pebble is built with its pure-Go zstd (pebblegozstd) so no
# C toolchain is needed for compression.
GO       ?= go
TAGS     ?= pebblegozstd
BIN      ?= bin/meridian
FUZZTIME ?= 5s

SIMSEEDS ?= 200
# The slowest configurations (replica moves and repartitions together) run half as many in CI;
# docs/simulation.md lists the larger manual runs.
SIMSEEDS_SLOW ?= 100

.PHONY: build test test-short fuzz sim-ci demo vet proto bench-throughput clean

build:
	$(GO) build -tags $(TAGS) -o $(BIN) ./cmd/meridian

# The test command of the README and of CI: vet, every package's tests (including the
# multi-process end-to-end tests on 127.0.0.x), then each fuzz target for a bounded time.
test: vet
	$(GO) test -tags $(TAGS) -count=1 -timeout 20m ./...
	$(MAKE) fuzz
	$(MAKE) sim-ci

test-short:
	$(GO) test -tags $(TAGS) -short -count=1 ./...

vet:
	$(GO) vet -tags $(TAGS) ./...
	# The Kubernetes build of the binary (client-go linked in; docs/elasticity.md).
	$(GO) vet -tags $(TAGS),kubernetes ./cmd/meridian

fuzz:
	GO=$(GO) scripts/fuzz-one.sh FuzzRequestDecodeValidate ./internal/runtime/server/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzTxnCommitRequest ./internal/runtime/server/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzStreamRequests ./internal/runtime/server/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeDataKey ./internal/storage/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzParseConfig ./internal/config/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzControlAPI ./internal/tools/lab/wan/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzPeerEnvelope ./internal/wire/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzRestore ./internal/sdur/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeEntry ./internal/sdur/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeEntry ./internal/twopc/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeMessage ./internal/catenae/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeSaved ./internal/catenae/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeInput ./internal/catenae/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeMeta ./internal/replication/catenae/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeEnvelope ./internal/replication/canopus/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzStep ./internal/epaxos/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzUnmarshalNode ./internal/kawkab/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeStreamMeta ./internal/kawkab/ $(FUZZTIME) $(TAGS)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeManifest ./internal/kawkab/ $(FUZZTIME) $(TAGS)

# Deterministic simulation: SIMSEEDS seeds of every protocol with every fault on, then the
# mutation suite (every broken variant must be caught). Exits non-zero on any violation.
sim-ci: build
	$(BIN) sim --protocol quorum --seeds $(SIMSEEDS) --faults all
	$(BIN) sim --protocol quorum --mutations --mutation-seeds 200 --faults all
	$(BIN) sim --protocol quorum --seeds $(SIMSEEDS) --faults all --nodes-per-region 2 --repartition-every 100ms
	$(BIN) sim --protocol quorum --seeds $(SIMSEEDS) --faults all --nodes-per-region 2 --move-every 300ms
	# Large reads (docs/mayflower.md): every value fetched in one-byte chunks from one or two
	# replicas, while replicas move.
	$(BIN) sim --protocol quorum --seeds 100 --faults all --nodes-per-region 2 --move-every 300ms --option read_selector=mayflower --option large_read_bytes=1 --option read_chunk_bytes=1 --option read_window=2
	$(BIN) sim --protocol quorum --seeds 50 --faults all --option read_selector=hedged --option hedge_after=5ms --option large_read_bytes=1 --option read_chunk_bytes=2
	$(BIN) sim --protocol quorum --seeds 50 --faults all --option read_selector=snitch --option large_read_bytes=1 --option read_chunk_bytes=2
	# Scans (docs/simulation.md, "Scans"): half the reads are scans of random ranges and limits,
	# checked as one read per key they cover, in one-record pages. First split scans
	# (docs/mayflower.md): reads at ONE from the region that holds no replica, two equidistant
	# replica regions, mayflower reads a partition from both ends. Reads at ONE with writes at
	# ALL promise the newest acknowledged write, not sequential consistency (--fresh-reads);
	# scans at QUORUM repair what they read and are sequentially consistent per key, as reads
	# are. Both lines take about 7 s on two cores.
	$(BIN) sim --protocol quorum --seeds 100 --faults all --topology equidistant --replica-regions 2 --read-level ONE --write-level ALL --fresh-reads --scan-fraction 0.5 --keys 12 --option read_selector=mayflower --option scan_page_bytes=1
	$(BIN) sim --protocol quorum --seeds 100 --faults all --scan-fraction 0.5 --option scan_page_bytes=1
	$(BIN) sim --protocol meteorshower --seeds $(SIMSEEDS_SLOW) --faults all --nodes-per-region 2 --move-every 300ms
	$(BIN) sim --protocol meteorshower --seeds $(SIMSEEDS) --faults all --repartition-every 100ms
	$(BIN) sim --protocol meteorshower --seeds $(SIMSEEDS) --faults all --option theta=lower
	$(BIN) sim --protocol meteorshower --seeds $(SIMSEEDS) --faults all --option theta=upper
	$(BIN) sim --protocol meteorshower --mutations --mutation-seeds 200 --faults all
	$(BIN) sim --protocol globlease --seeds $(SIMSEEDS) --faults all
	$(BIN) sim --protocol globlease --seeds $(SIMSEEDS) --faults all --nodes-per-region 1
	$(BIN) sim --protocol globlease --seeds $(SIMSEEDS_SLOW) --faults all --nodes-per-region 3 --move-every 300ms
	$(BIN) sim --protocol globlease --seeds $(SIMSEEDS_SLOW) --faults all --repartition-every 200ms --linearizability
	$(BIN) sim --protocol globlease --seeds $(SIMSEEDS_SLOW) --faults all --nodes-per-region 3 --move-every 300ms --repartition-every 200ms
	$(BIN) sim --protocol globlease --mutations --mutation-seeds 200 --faults all
	$(BIN) sim --protocol raft --seeds $(SIMSEEDS) --faults all
	$(BIN) sim --protocol raft --seeds $(SIMSEEDS) --faults all --nodes-per-region 3 --move-every 300ms
	$(BIN) sim --protocol raft --seeds $(SIMSEEDS) --faults all --nodes-per-region 3 --repartition-every 100ms
	# Regression: a replica that left its group deleted its range before an earlier read ran.
	$(BIN) sim --protocol raft --seeds 1 --seed-start 567 --faults all --nodes-per-region 3 --move-every 300ms
	$(BIN) sim --protocol raft --mutations --mutation-seeds 200 --faults all
	$(BIN) sim --protocol metadata --seeds $(SIMSEEDS) --faults all
	$(BIN) sim --protocol metadata --mutations --mutation-seeds 200 --faults all
	# Transactions (docs/transactions.md): serializability and convergence under every fault.
	$(BIN) sim txn --mode sdur --seeds $(SIMSEEDS)
	$(BIN) sim txn --mode sdur --mutations --mutation-seeds 300
	$(BIN) sim txn --mode 2pc --seeds $(SIMSEEDS)
	$(BIN) sim txn --mode 2pc --mutations --mutation-seeds 300
	# Catenae (docs/catenae.md).
	$(BIN) sim txn --mode catenae --seeds $(SIMSEEDS)
	$(BIN) sim txn --mode catenae --mutations --mutation-seeds 100
	# Canopus (docs/canopus.md): nine nodes of 27 broadcast groups run about 8 simulated
	# seconds per wall second, so CI runs 30 seeds (a manual run covers 2,000).
	$(BIN) sim --protocol canopus --seeds 30 --faults all
	# A short pipeline: logs compacted and readmissions applied within a run.
	$(BIN) sim --protocol canopus --seeds 30 --faults all --option max_cycles_in_flight=4
	$(BIN) sim --protocol canopus --mutations --mutation-seeds 200 --faults all
	# Region exclusion: a region lost for good (excluded, the others go on), and exclusion on
	# with every region kept (the ack rule, mistaken exclusions).
	$(BIN) sim --protocol canopus --seeds 40 --faults all --lose-region --option exclude_after=1s
	$(BIN) sim --protocol canopus --seeds 30 --faults all --option exclude_after=1s
	# EPaxos (docs/epaxos.md): six replicas (fast quorum 4) and three (fast quorum 2).
	$(BIN) sim --protocol epaxos --seeds $(SIMSEEDS) --faults all
	$(BIN) sim --protocol epaxos --seeds $(SIMSEEDS) --faults all --nodes-per-region 1
	# The overload guard tripping often (refused requests must never break linearizability).
	$(BIN) sim --protocol epaxos --seeds 50 --faults all --option overload_after=100ms
	$(BIN) sim --protocol epaxos --mutations --mutation-seeds 200 --faults all

# The README's first command: an in-process cluster on the emulated WAN, latency per region.
demo:
	$(GO) run -tags $(TAGS) ./cmd/meridian demo

proto:
	bash proto/gen.sh

# Single-node throughput over gRPC on loopback: starts a server from examples/single.yaml
# with its data on disk (every write fsynced), runs puts then gets at 64 in flight.
bench-throughput: build
	bash scripts/bench-throughput.sh

clean:
	rm -rf bin data
