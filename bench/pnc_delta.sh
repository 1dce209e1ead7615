#!/usr/bin/env bash
# Bytes per pnc-sync run, delta states (PNC.STATE key SINCE version) against whole states
# (issue 36; figures in docs/BENCHMARKS.md and docs/PNC.md). For N deployments (3 and 16):
# KEYS PN-counters, each written by every deployment (so each state holds N replica ids), one
# first run to converge, then RUNS runs INTERVAL seconds apart while one deployment adds to a
# tenth of the keys between runs. Prints the bytes of state each run read and sent (pnc-sync's
# own count), for `pnc-sync` (deltas) and `pnc-sync --full`.
#
# Usage (from the repository root, after `cargo build --release`):
#   bash bench/pnc_delta.sh
# Environment: CTR_MODULE (module path), KEYS (default 200), RUNS (default 4), INTERVAL
# (default 1).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
SYNC=$PWD/target/release/pnc-sync
KEYS=${KEYS:-200}
RUNS=${RUNS:-4}
INTERVAL=${INTERVAL:-1}
[ -f "$MODULE" ] && [ -x "$SYNC" ] || { echo "run cargo build --release first" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
DIR=$(mktemp -d)
PORTS=()
cleanup() {
  for p in "${PORTS[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

start() { # index
  local port
  port=$(free_port)
  mkdir -p "$DIR/$1"
  "${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$DIR/$1" --logfile "$DIR/$1/redis.log" --daemonize yes \
    --loadmodule "$MODULE" replica-id "region$1" >/dev/null
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  PORTS+=("$port")
}

# One deployment adds to a tenth of the keys, once per interval, while the tool runs.
writer() { # port
  for _ in $(seq "$RUNS"); do
    sleep "$INTERVAL"
    for k in $(seq 0 10 $((KEYS - 1))); do echo "PNC.ADD key:$k 1"; done | redis-cli -p "$1" >/dev/null
  done
}

for n in 3 16; do
  for i in $(seq 0 $((n - 1))); do start "$i"; done
  for p in "${PORTS[@]}"; do
    for k in $(seq 0 $((KEYS - 1))); do echo "PNC.ADD key:$k 1"; done | redis-cli -p "$p" >/dev/null
  done
  endpoints=()
  for p in "${PORTS[@]}"; do endpoints+=("127.0.0.1:$p"); done
  for mode in delta full; do
    flag=()
    [ "$mode" = full ] && flag=(--full)
    writer "${PORTS[0]}" &
    out=$("$SYNC" --pattern 'key:*' --interval "$INTERVAL" --runs $((RUNS + 1)) "${flag[@]}" "${endpoints[@]}")
    wait
    # The first run converges from scratch; the others are the steady state.
    echo "$out" | awk -v n="$n" -v mode="$mode" '/bytes of state/ {
        for (i = 1; i <= NF; i++) if ($(i + 1) == "bytes") b = $i
        runs++; if (runs > 1) { total += b; steady++ } else first = b
      } END { printf "%2d deployments, %-5s: first run %d bytes, then %d bytes per run (mean of %d)\n",
        n, mode, first, total / steady, steady }'
  done
  cleanup
  PORTS=()
  DIR=$(mktemp -d)
done
