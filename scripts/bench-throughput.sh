#!/usr/bin/env bash
# Single-node throughput on loopback: one server from examples/single.yaml (data on disk, every
# acknowledged write fsynced through group commit), 64 concurrent gRPC requests, 100-byte
# values, puts then gets at consistency ONE. Reports ops/s, p50/p99 and CPU per operation of
# the server (sampled from /proc) and of the client.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/meridian}
DURATION=${DURATION:-10s}
DATA=$(mktemp -d "${TMPDIR:-/tmp}/meridian-bench.XXXXXX")
"$BIN" server --config examples/single.yaml --node n1 --data-dir "$DATA/n1" --log-level warn &
PID=$!
trap 'kill -9 $PID 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do
  "$BIN" kv --endpoint 127.0.0.1:7201 get bench probe >/dev/null 2>&1 && break
  "$BIN" kv --endpoint 127.0.0.1:7201 get bench probe 2>&1 | grep -q "not found" && break
  sleep 0.1
done
"$BIN" bench throughput --endpoint 127.0.0.1:7201 --keyspace bench --concurrency 64 \
  --value-bytes 100 --duration "$DURATION" --server-pid "$PID" --ops put,get ${JSON:+--json "$JSON"}
