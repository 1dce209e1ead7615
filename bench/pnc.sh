#!/usr/bin/env bash
# PN-Counter benchmarks (results are recorded in docs/PNC.md, "Benchmark"):
#   1. PNC.MERGE ops/s and blob size for states of 3, 16 and 64 replica ids, merging into keys
#      that already hold the state (a periodic sync's steady state) and into fresh keys;
#   2. memory per key (used_memory delta over KEYS keys) for PN-counters with 1 and 3 replica
#      ids, next to INCRBY strings and CTR counters.
# PNC.ADD against INCRBY and CTR.ADD is a group of bench/run.sh (`pnc hot P16`, `pnc rand P16`).
#
# Usage (from the repository root, after `cargo build --release`):
#   bash bench/pnc.sh
# Environment: CTR_MODULE (module path), PORT (default: a free one), MERGE_REQUESTS (default
# 300000), FRESH_REQUESTS (default 50000), KEYS (default 100000).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
MERGE_REQUESTS=${MERGE_REQUESTS:-300000}
FRESH_REQUESTS=${FRESH_REQUESTS:-50000}
KEYS=${KEYS:-100000}
[ -f "$MODULE" ] || { echo "module not found at $MODULE (run cargo build --release)" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
PORT=${PORT:-$(free_port)}
DIR=$(mktemp -d)
cli() { redis-cli -p "$PORT" "$@"; }
cleanup() {
  cli shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

"${REDIS_SERVER:-redis-server}" --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
  --logfile "$DIR/redis.log" --daemonize yes --loadmodule "$MODULE" replica-id bench >/dev/null
for _ in $(seq 100); do cli ping >/dev/null 2>&1 && break; sleep 0.05; done

# ops/s of one redis-benchmark run of the given command (second CSV column).
ops() {
  local n=$1; shift
  redis-benchmark -p "$PORT" -n "$n" -c 50 -P 16 -r 100000 --csv "$@" |
    awk -F'"' 'NR == 2 { printf "%d\n", $4 }'
}
usec_per_call() {
  cli info commandstats | tr -d '\r' |
    awk -F'[:,=]' -v c="cmdstat_$1" '$1 == c { for (i = 2; i < NF; i++) if ($i == "usec_per_call") print $(i + 1) }'
}

echo "# redis-ctr PN-Counter benchmark"
echo "server: $("${REDIS_SERVER:-redis-server}" --version | cut -d' ' -f1-3), $(nproc) cores, client and server on one host"
echo

# A state blob of N replica ids "replica-000".. with P in 100..199 and N = 50: every varint is
# one byte and no byte is 0, so the blob can travel as a command-line argument.
blob() {
  local n=$1 i s
  s=$(printf '\\x01\\x%02x' "$n")
  for ((i = 0; i < n; i++)); do
    s+=$(printf '\\x0breplica-%03d\\x%02x\\x32' "$i" $((100 + i % 100)))
  done
  printf "$s"
}

echo "## PNC.MERGE (-c 50 -P 16 -r 100000)"
echo "replicas | blob bytes | ops/s, keys already hold it (-n $MERGE_REQUESTS) | ops/s, fresh keys (-n $FRESH_REQUESTS) | usec_per_call (all)"
for n in 3 16 64; do
  state=$(blob "$n")
  [ "$(cli pnc.merge check:$n "$state")" -gt 0 ] || { echo "blob $n did not merge" >&2; exit 1; }
  cli flushall >/dev/null
  cli config resetstat >/dev/null
  # Fill the key space first, so the measured merges find the state already there.
  redis-benchmark -p "$PORT" -n 300000 -c 50 -P 16 -r 100000 -q PNC.MERGE "m$n:__rand_int__" "$state" >/dev/null
  steady=$(ops "$MERGE_REQUESTS" PNC.MERGE "m$n:__rand_int__" "$state")
  # Fresh keys: a key space far larger than the requests, emptied first.
  cli flushall >/dev/null
  fresh=$(redis-benchmark -p "$PORT" -n "$FRESH_REQUESTS" -c 50 -P 16 -r 1000000000 --csv \
    PNC.MERGE "f$n:__rand_int__" "$state" | awk -F'"' 'NR == 2 { printf "%d\n", $4 }')
  echo "$n | ${#state} | $steady | $fresh | $(usec_per_call pnc.merge)"
  cli flushall >/dev/null
done
echo

echo "## Memory per key (used_memory delta over $KEYS keys)"
used() { cli info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }
per_key() { # script args...
  cli flushall >/dev/null
  local before after
  before=$(used)
  cli eval "$@" >/dev/null
  after=$(used)
  echo $(((after - before) / KEYS))
}
three=$(blob 3)
echo "INCRBY string:            $(per_key "for i = 1, tonumber(ARGV[1]) do redis.call('INCRBY', 'k:' .. i, 1) end" 0 "$KEYS") bytes"
echo "CTR.ADD counter:          $(per_key "for i = 1, tonumber(ARGV[1]) do redis.call('CTR.ADD', 'k:' .. i, 1) end" 0 "$KEYS") bytes"
echo "PNC.ADD (1 replica id):   $(per_key "for i = 1, tonumber(ARGV[1]) do redis.call('PNC.ADD', 'k:' .. i, 1) end" 0 "$KEYS") bytes"
echo "PNC.MERGE (3 replica ids): $(per_key "for i = 1, tonumber(ARGV[1]) do redis.call('PNC.MERGE', 'k:' .. i, ARGV[2]) end" 0 "$KEYS" "$three") bytes"
echo "MEMORY USAGE of one key: PNC 1 id $(cli pnc.add one 1 >/dev/null; cli memory usage one)," \
  "3 ids $(cli pnc.merge three "$three" >/dev/null; cli memory usage three)," \
  "64 ids $(cli pnc.merge sixtyfour "$(blob 64)" >/dev/null; cli memory usage sixtyfour)"
