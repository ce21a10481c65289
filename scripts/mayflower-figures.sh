#!/usr/bin/env bash
# mayflower-figures.sh OUT_DIR — the Mayflower thesis's Figs. 3.3–3.8 (3.4.3–3.4.8) on the
# flow-level testbed (internal/tools/flowsim): every scheme on the same SEEDS seeds of JOBS
# jobs each, one Markdown table per configuration in OUT_DIR (and a CDF chart for Fig. 3.3).
# Deterministic: the figures do not depend on the machine's load. About 10 minutes on two
# cores with the defaults.
set -euo pipefail
out="${1:?usage: mayflower-figures.sh OUT_DIR}"
mkdir -p "$out"
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/meridian}
SEEDS=${SEEDS:-10}
JOBS=${JOBS:-2000}
ALL=nearest-ecmp,nearest-m,sinbad-r-ecmp,sinbad-r-m,mayflower-b,mayflower-p,mayflower-p-makespan
SWEEP=nearest-ecmp,sinbad-r-m,mayflower-b,mayflower-p-makespan
run() { # NAME SCHEMES FLAGS...
	local name=$1 schemes=$2
	shift 2
	echo "== $name $* ($(date -u +%H:%M:%S))" >&2
	"$BIN" bench mayflower --seeds "$SEEDS" --jobs "$JOBS" --schemes "$schemes" "$@" --markdown "$out/$name.md" >/dev/null
}
run fig3.3 "$ALL" --chart "$out/fig3.3-cdf.png"
for loc in 0.5,0.3,0.2 0.3,0.5,0.2 0.2,0.3,0.5 0.3334,0.3333,0.3333; do
	run "fig3.4-locality-$loc" "$ALL" --locality "$loc"
done
for rate in 0.05 0.15 0.2; do run "fig3.5-rate-$rate" "$SWEEP" --rate "$rate"; done
for o in 1x1 2x2 1x8 8x1 4x4; do run "fig3.6-oversubscription-$o" "$SWEEP" --oversubscription "$o"; done
for bg in 8 16 32; do run "fig3.7-background-$bg" "$SWEEP" --background "$bg"; done
run fig3.8-block-64 "$SWEEP" --job-mb 64 --chunk-mb 16
run fig3.8-block-256 "$SWEEP" --job-mb 256 --chunk-mb 64
