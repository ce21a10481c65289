#!/usr/bin/env bash
# canopus-fig44.sh OUT_DIR — the Canopus thesis's Fig. 4.4 (4.6.1), scaled to this machine:
# one data centre of three racks (lan-3), super-leaves of SIZES nodes (default 3 5 7 9, so 9
# to 27 nodes), Canopus (write leases off, 5 ms cycles) and EPaxos (5 ms batches, basic fast
# quorum), 16-byte values, Poisson arrivals, 60 clients per rack (the thesis: 180 clients).
#
# In one data centre the links are not the bottleneck ("network bandwidth being relatively
# abundant", 4.6.1): the nodes' processors are. Both protocols spread their work evenly over
# the nodes, so when every node is CPU-bound the throughput ratio is the inverse ratio of the
# cluster's CPU per operation — which is also what bounds all the emulated nodes sharing the
# host's two cores. By default no CPU model is set and the host's cores are the processors
# (docs/canopus.md, "Fig. 4.4"); CPU_MSG, CPU_KIB and CPU_REQ (e.g. 250us) give every node a
# modelled core instead. The criterion is the thesis's: the highest rate before the median
# passes P50 (default 10ms), with p99 under 5 s; and the medians at 70% of it.
#
# WRITES (default "0.2") are the write shares run for Canopus; EPaxos runs at 20% only, as the
# thesis shows it ("its performance is largely independent of the write percentage").
# Output: one .txt and one .json per run in OUT_DIR. Bounded: each search stops after its
# bisections; every probe starts a fresh cluster.
set -euo pipefail
out="${1:?usage: canopus-fig44.sh OUT_DIR}"
mkdir -p "$out"
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/meridian}
SIZES=${SIZES:-"3 5 7 9"}
WRITES=${WRITES:-"0.2"}
P50=${P50:-10ms}
common=(--emulated lan-3 --partitions 1 --records 5000 --field-length 16 --clients 60
	--max --max-fresh --p50 "$P50" --p99 5s --max-start "${START:-100}")
[ -n "${CPU_MSG:-}" ] && common+=(--cpu-per-message "$CPU_MSG")
[ -n "${CPU_KIB:-}" ] && common+=(--cpu-per-kib "$CPU_KIB")
[ -n "${CPU_REQ:-}" ] && common+=(--cpu-per-request "$CPU_REQ")
run() { # NAME NODES_PER_RACK WRITE_FRACTION PROTOCOLS
	local name=$1 n=$2 w=$3 protocols=$4
	local r
	r=$(python3 -c "print(round(1-$w, 4))")
	echo "== $name: lan-3 x $n, writes $w, $(date -u +%H:%M:%S)" >&2
	"$BIN" bench compare --protocols "$protocols" --nodes-per-region "$n" --replicas-per-region "$n" "${common[@]}" \
		--mix "read=$r,update=$w,dist=uniform" --json "$out/$name.json" >"$out/$name.txt" 2>"$out/$name.log" ||
		echo "== $name failed: $(tail -n 1 "$out/$name.log")" >&2
	tail -n 12 "$out/$name.txt" >&2
}
for n in $SIZES; do
	for w in $WRITES; do
		protocols="canopus::write_leases=false"
		if [ "$w" = "0.2" ]; then
			protocols="$protocols,epaxos"
		fi
		run "fig4.4-n$((3 * n))-w${w#0.}" "$n" "$w" "$protocols"
	done
done
