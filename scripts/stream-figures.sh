#!/usr/bin/env bash
# stream-figures.sh OUT_DIR — issue 20's ingest and read figures on this machine:
# Fig. 5.10 (`meridian bench stream`: Meridian's stream engine in process and over loopback
# gRPC (a `meridian server` process) at the local and memory acknowledgement levels, Apache
# Kafka 4.4 and InfluxDB 1.6, batches of 100 to 30,000 16-byte records), Fig. 5.11 with the
# aggregates (`meridian bench stream reads`) and Fig. 5.12 (`meridian bench stream
# historical`, PHASE=30s each phase, once unpinned and once with --pin). Writes stream.md,
# stream.json, stream-ingest.png/.svg, reads.md, reads.json, fig5.8/ and fig5.9/
# (`meridian bench stream bursts`, BURSTS=60s each), fig5.12/ and fig5.12-pinned/, and
# uptime.txt (the machine's load beside the numbers) into OUT_DIR. About 15 minutes with the
# defaults (DURATION=10s per run, two runs per system and batch size; WARMUP=2s of each left
# out). HIST_RATE sets the historical benchmark's append rate (records/s, default 500000).
#
# Needs: Java 17+ and Maven (scripts/fetch-kafka.sh resolves Kafka's jars once into
# ~/.cache/meridian), influxd (Debian: apt-get install -y influxdb); for Fig. 5.12 VersityGW
# (scripts/fetch-versitygw.sh; without it the servers share a directory, which the output
# says). A missing peer is
# reported in its rows, not fatal; SKIP=kafka,influxdb leaves peers out.
set -euo pipefail
out="${1:?usage: stream-figures.sh OUT_DIR}"
mkdir -p "$out"
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/meridian}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
SKIP=${SKIP:-}
[[ -x "$BIN" ]] || go build -tags pebblegozstd -o "$BIN" ./cmd/meridian
if [[ ",$SKIP," != *,kafka,* ]]; then
	export MERIDIAN_KAFKA_LIB="${MERIDIAN_KAFKA_LIB:-$(bash scripts/fetch-kafka.sh | tail -n1)}"
fi
{ echo "before: $(uptime)"; } >"$out/uptime.txt"
echo "== bench stream ($(date -u +%H:%M:%S))" >&2
"$BIN" bench stream --duration "$DURATION" --warmup "$WARMUP" --skip-peers "$SKIP" --out "$out" >/dev/null
echo "after ingest: $(uptime)" >>"$out/uptime.txt"
echo "== bench stream reads ($(date -u +%H:%M:%S))" >&2
"$BIN" bench stream reads --duration "$DURATION" --warmup "$WARMUP" --out "$out" >/dev/null
echo "after reads: $(uptime)" >>"$out/uptime.txt"
echo "== bench stream bursts, Fig. 5.8 ($(date -u +%H:%M:%S))" >&2
mkdir -p "$out/fig5.8" "$out/fig5.9"
"$BIN" bench stream bursts --duration "${BURSTS:-60s}" --out "$out/fig5.8" >/dev/null
echo "after Fig. 5.8: $(uptime)" >>"$out/uptime.txt"
echo "== bench stream bursts --upload-workers 1, Fig. 5.9 ($(date -u +%H:%M:%S))" >&2
"$BIN" bench stream bursts --duration "${BURSTS:-60s}" --upload-workers 1 --out "$out/fig5.9" >/dev/null
echo "after Fig. 5.9: $(uptime)" >>"$out/uptime.txt"
echo "== bench stream historical, Fig. 5.12 ($(date -u +%H:%M:%S))" >&2
mkdir -p "$out/fig5.12" "$out/fig5.12-pinned"
"$BIN" bench stream historical --phase1 "${PHASE:-30s}" --phase2 "${PHASE:-30s}" --append-rate "${HIST_RATE:-500000}" --out "$out/fig5.12" >/dev/null
echo "after Fig. 5.12: $(uptime)" >>"$out/uptime.txt"
"$BIN" bench stream historical --phase1 "${PHASE:-30s}" --phase2 "${PHASE:-30s}" --append-rate "${HIST_RATE:-500000}" --pin --out "$out/fig5.12-pinned" >/dev/null
echo "after Fig. 5.12 pinned: $(uptime)" >>"$out/uptime.txt"
cat "$out/stream.md" "$out/reads.md" "$out/fig5.8/bursts.md" "$out/fig5.9/bursts.md" "$out/fig5.12/historical.md" "$out/fig5.12-pinned/historical.md" "$out/uptime.txt"
