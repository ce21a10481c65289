#!/usr/bin/env bash
# The idle cost of many Raft groups: three server processes on 127.0.0.2-4 (one per region of
# gcp-meteorshower-3, data on disk) hold RAFT_GROUPS raft partitions (in keyspaces of at most 4096
# partitions each, one replica per node). Once every group has a leader and has gone quiet, it
# samples each process for SAMPLE seconds and reports, per node: peer messages sent per second
# (by type), Raft messages per second, CPU (cores, from /proc/PID/stat), resident memory, and
# how many of its groups are quiesced.
#
#   RAFT_GROUPS=10000 SAMPLE=60 bash scripts/idle-raft-groups.sh
#
# Bounded: the start waits at most SETTLE_LIMIT seconds (default 600) for the groups to settle.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/meridian}
RAFT_GROUPS=${RAFT_GROUPS:-10000}
SAMPLE=${SAMPLE:-60}
SETTLE_LIMIT=${SETTLE_LIMIT:-600}
[ -x "$BIN" ] || { echo "build first: make build" >&2; exit 1; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/meridian-idle.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

hosts=(127.0.0.2 127.0.0.3 127.0.0.4)
regions=(europe us asia)
{
  echo "cluster: idle"
  echo "topology: gcp-meteorshower-3"
  echo "nodes:"
  for i in 0 1 2; do
    h=${hosts[$i]}
    printf '  - name: n%d\n    region: %s\n    listen: %s:7301\n    peer_listen: %s:7302\n    metrics: %s:7303\n' \
      $((i + 1)) "${regions[$i]}" "$h" "$h" "$h"
  done
  echo "keyspaces:"
  left=$RAFT_GROUPS
  k=1
  while [ "$left" -gt 0 ]; do
    n=$((left > 4096 ? 4096 : left))
    printf '  - name: idle%d\n    protocol: raft\n    replicas_per_region: 1\n    partitions: %d\n' "$k" "$n"
    left=$((left - n))
    k=$((k + 1))
  done
} >"$DIR/cluster.yaml"

for i in 0 1 2; do
  "$BIN" server --config "$DIR/cluster.yaml" --node "n$((i + 1))" --data-dir "$DIR/n$((i + 1))" \
    --log-level warn --disk-reserve 64MiB >"$DIR/n$((i + 1)).log" 2>&1 &
  PIDS+=($!)
  disown $!
done

# metric NODE_INDEX REGEX: the sum of the samples of the metrics whose line matches REGEX.
metric() {
  curl -sf "http://${hosts[$1]}:7303/metrics" | awk -v re="$2" '$0 !~ /^#/ && $0 ~ re { s += $NF } END { printf "%.0f\n", s }'
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
rss_mib() { awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }

echo "waiting for $RAFT_GROUPS groups on 3 nodes to elect leaders and quiesce (at most ${SETTLE_LIMIT}s)..."
start=$(date +%s)
while :; do
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a server exited; logs in $DIR:" >&2; tail -20 "$DIR"/n*.log >&2; exit 1; }; done
  settled=1
  status=""
  for i in 0 1 2; do
    g=$(metric $i '^meridian_raft_groups\{protocol="raft"\}' 2>/dev/null || echo 0)
    q=$(metric $i '^meridian_raft_groups_quiesced\{protocol="raft"\}' 2>/dev/null || echo 0)
    status+=" n$((i + 1)) ${q:-0}/${g:-0}"
    if [ "${g:-0}" != "$RAFT_GROUPS" ] || [ "${q:-0}" != "$RAFT_GROUPS" ]; then settled=0; fi
  done
  [ $settled = 1 ] && break
  if [ $(($(date +%s) - start)) -gt "$SETTLE_LIMIT" ]; then
    echo "not settled within ${SETTLE_LIMIT}s (quiesced/groups:$status); measuring anyway" >&2
    break
  fi
  sleep 5
done
echo "settled after $(($(date +%s) - start))s (quiesced/groups:$status); sampling ${SAMPLE}s"

hz=$(getconf CLK_TCK)
declare -a m0 r0 c0
for i in 0 1 2; do
  m0[$i]=$(metric $i '^meridian_replication_messages_sent_total')
  r0[$i]=$(metric $i '^meridian_replication_messages_sent_total\{.*type="raft')
  c0[$i]=$(cpu_ticks "${PIDS[$i]}")
  curl -sf "http://${hosts[$i]}:7303/metrics" | awk '/^meridian_replication_messages_sent_total/' >"$DIR/sent0.$i"
done
t0=$(date +%s.%N)
sleep "$SAMPLE"
t1=$(date +%s.%N)
printf '%-4s %14s %14s %10s %9s %16s  %s\n' node "peer msgs/s" "raft msgs/s" "CPU cores" "RSS MiB" "quiesced/groups" "sent by type (per s)"
for i in 0 1 2; do
  m1=$(metric $i '^meridian_replication_messages_sent_total')
  r1=$(metric $i '^meridian_replication_messages_sent_total\{.*type="raft')
  c1=$(cpu_ticks "${PIDS[$i]}")
  g=$(metric $i '^meridian_raft_groups\{protocol="raft"\}')
  q=$(metric $i '^meridian_raft_groups_quiesced\{protocol="raft"\}')
  bytype=$(curl -sf "http://${hosts[$i]}:7303/metrics" | awk '/^meridian_replication_messages_sent_total/' |
    awk -v dt="$(echo "$t1 - $t0" | bc -l)" 'NR == FNR { a[$1] = $2; next } { d = $2 - a[$1]; if (d > 0) { match($1, /type="[^"]*"/); printf "%s=%.2f ", substr($1, RSTART + 6, RLENGTH - 7), d / dt } }' "$DIR/sent0.$i" -)
  awk -v n="n$((i + 1))" -v m="$((m1 - m0[$i]))" -v r="$((r1 - r0[$i]))" -v c="$((c1 - c0[$i]))" -v hz="$hz" \
    -v t0="$t0" -v t1="$t1" -v rss="$(rss_mib "${PIDS[$i]}")" -v qg="$q/$g" -v bt="$bytype" \
    'BEGIN { dt = t1 - t0; printf "%-4s %14.2f %14.2f %10.4f %9s %16s  %s\n", n, m / dt, r / dt, c / hz / dt, rss, qg, bt }'
done
