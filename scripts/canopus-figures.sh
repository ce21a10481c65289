#!/usr/bin/env bash
# canopus-figures.sh OUT_DIR — the Canopus thesis's Figs. 4.6 and 4.7 (4.6.2), scaled to this
# machine: Canopus, EPaxos and Raft side by side on ec2-7 (Table 4.1), three nodes per region,
# 16-byte values, Poisson arrivals. Each configuration's highest rate whose median stays under
# 1.5× its unloaded median in every region (--p50-factor 1.5), and its medians at 70% of that
# rate. Fig. 4.6: 3, 5 and 7 regions at 20% writes; Fig. 4.7: 3 regions at 1%, 20% and 50%.
#
# The links between regions are the bottleneck the thesis names (a proposal crosses each pair
# of super-leaves once; EPaxos broadcasts every command): LINK (default 100KB per second each
# way per region pair) with CPU per message CPU_MSG (default 20us). Output: one .txt and one
# .json per run in OUT_DIR. Bounded: each search stops after its bisections; the whole set
# takes about an hour on two cores.
set -euo pipefail
out="${1:?usage: canopus-figures.sh OUT_DIR}"
mkdir -p "$out"
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/meridian}
LINK=${LINK:-100KB}
CPU_MSG=${CPU_MSG:-20us}
PROTOCOLS=${PROTOCOLS:-"canopus::write_leases=false,epaxos,raft:LINEARIZABLE/"}
REGIONS=${REGIONS:-"3 5 7"}
MIXES=${MIXES:-"0.01 0.5"}
# The thesis shows EPaxos at 20% writes only in Fig. 4.7 ("the same results with different
# write-ratios"); the mixes run Canopus and EPaxos.
MIX_PROTOCOLS=${MIX_PROTOCOLS:-"canopus::write_leases=false,epaxos"}
common=(--nodes-per-region 3 --replicas-per-region 3 --partitions 1 --records 5000 --field-length 16
	--max --max-fresh --p50-factor 1.5 --p99 5s --max-start "${START:-25}" --clients 256
	--link-bandwidth "$LINK" --cpu-per-message "$CPU_MSG")
run() { # NAME TOPOLOGY WRITE_FRACTION PROTOCOLS
	local name=$1 topo=$2 w=$3 protocols=$4
	local r
	r=$(python3 -c "print(round(1-$w, 4))")
	echo "== $name: $topo, writes $w, $(date -u +%H:%M:%S)" >&2
	"$BIN" bench compare --emulated "$topo" --protocols "$protocols" "${common[@]}" \
		--mix "read=$r,update=$w,dist=uniform" --json "$out/$name.json" >"$out/$name.txt" 2>"$out/$name.log" ||
		echo "== $name failed: $(tail -n 1 "$out/$name.log")" >&2
	tail -n 30 "$out/$name.txt" >&2
}
for k in $REGIONS; do
	run "fig4.6-regions$k-w20" "ec2-7:$k" 0.2 "$PROTOCOLS"
done
for w in $MIXES; do
	run "fig4.7-regions3-w${w#0.}" "ec2-7:3" "$w" "$MIX_PROTOCOLS"
done
