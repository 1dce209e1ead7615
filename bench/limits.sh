#!/usr/bin/env bash
# Rate limiters side by side in one server (issue 37): CTR.THROTTLE against redis-cell 0.2.2's
# CL.THROTTLE and the GCRA Lua script users run; CTR.WINDOW (a sliding-window limit by floor)
# against the sorted-set Lua limiter and the two-fixed-window approximation. Per form: ops/s
# (redis-benchmark, 50 clients, 10,000 limited keys, at pipeline 1 and 16), usec per call (INFO
# commandstats, of the pipeline 1 run), bytes
# per limited key (used_memory over 10,000 keys that took 100 requests each) and, for the
# sliding windows, the error of the allowed count against an exact sliding window on one fixed
# sequence of request times. Prints markdown tables (docs/BENCHMARKS.md#rate-limits-benchlimitssh).
#
# redis-cell is built from crates.io into target/redis-cell (a benchmark's baseline, not a
# dependency; nothing of it is committed); without cargo or the network its rows are left out.
# SECONDS_PER_RUN (default 3): the length of each throughput run.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

command -v redis-benchmark >/dev/null || die "redis-benchmark is not installed (it comes with redis-server)"
MODULE=${MODULE:-target/release/libredis_ctr.so}
[ -f "$MODULE" ] || die "build the module first (cargo build --release)"
MODULE=$(realpath "$MODULE")
SECONDS_PER_RUN=${SECONDS_PER_RUN:-3}
KEYS=10000
CELL_DIR=target/redis-cell

# redis-cell 0.2.2 from crates.io, built with its own lock-free dependency versions.
build_redis_cell() {
  [ -f "$CELL_DIR/libredis_cell.so" ] && return 0
  command -v cargo >/dev/null || return 1
  mkdir -p "$CELL_DIR/fetch/src"
  printf '[package]\nname = "fetch-redis-cell"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n[workspace]\n\n[dependencies]\nredis-cell = "=0.2.2"\n' \
    >"$CELL_DIR/fetch/Cargo.toml"
  : >"$CELL_DIR/fetch/src/lib.rs"
  (cd "$CELL_DIR/fetch" && cargo fetch -q) || return 1
  local src
  src=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -maxdepth 2 -type d -name 'redis-cell-0.2.2' | head -n 1)
  [ -n "$src" ] || return 1
  rm -rf "$CELL_DIR/src-0.2.2"
  cp -r "$src" "$CELL_DIR/src-0.2.2"
  printf '\n[workspace]\n' >>"$CELL_DIR/src-0.2.2/Cargo.toml"
  (cd "$CELL_DIR/src-0.2.2" && CARGO_TARGET_DIR=../build cargo build --release -q) || return 1
  cp "$CELL_DIR/build/release/libredis_cell.so" "$CELL_DIR/libredis_cell.so"
}

CELL=""
if build_redis_cell; then
  CELL=$(realpath "$CELL_DIR/libredis_cell.so")
  MODULE_ARGS="--loadmodule $CELL"
else
  log "bench: redis-cell 0.2.2 could not be built (cargo, network): its rows are left out"
fi
start_server
log "server on port $port$([ -n "$CELL" ] && echo ", redis-cell loaded")"

load_script() { rcli SCRIPT LOAD "$(cat "bench/lua/$1")"; }
GCRA_SHA=$(load_script gcra.lua)
ZSET_SHA=$(load_script zset_window.lua)
TWO_SHA=$(load_script two_windows.lua)

# The usec_per_call of one command in INFO commandstats.
usec_per_call() {
  rcli INFO commandstats | tr -d '\r' | grep -F "cmdstat_$1:" |
    sed -E 's/.*usec_per_call=([0-9.]+).*/\1/'
}

# ops/s of redis-benchmark sending $1 requests "${@:3}" at pipeline $2 over $KEYS random keys.
bench_ops() {
  local n=$1 pipeline=$2
  shift 2
  redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n "$n" -r "$KEYS" -P "$pipeline" -q "$@" 2>/dev/null |
    tr '\r' '\n' | grep -F 'requests per second' | tail -n 1 |
    sed -E 's/.*: ([0-9.]+) requests per second.*/\1/'
}

# One throughput measurement: at pipeline 1 (a short calibration, then a run of
# SECONDS_PER_RUN, its usec per call from INFO commandstats), then the same at pipeline 16
# (what tells a command's own cost apart from the loopback's); prints "ops usec ops_p16".
measure() {
  local stat=$1
  shift
  local probe n ops usec ops16
  probe=$(bench_ops 20000 1 "$@")
  n=$(awk -v o="$probe" -v s="$SECONDS_PER_RUN" 'BEGIN { printf "%d", o * s }')
  rcli CONFIG RESETSTAT >/dev/null
  ops=$(bench_ops "$n" 1 "$@")
  usec=$(usec_per_call "$stat")
  probe=$(bench_ops 100000 16 "$@")
  n=$(awk -v o="$probe" -v s="$SECONDS_PER_RUN" 'BEGIN { printf "%d", o * s }')
  ops16=$(bench_ops "$n" 16 "$@")
  echo "$ops $usec $ops16"
}

# The sliding-window limit's keys: floor -limit, then the window (redis-benchmark's keys are
# the prefix and 12 digits).
window_keys() {
  local prefix=$1 count=$2 limit=$3 window=$4
  rcli EVAL "for i = 0, tonumber(ARGV[1]) - 1 do
      local k = ARGV[2] .. string.format('%012d', i)
      redis.call('CTR.FLOOR', k, -tonumber(ARGV[3]))
      redis.call('CTR.WINDOW', k, ARGV[4])
    end return 1" 0 "$count" "$prefix" "$limit" "$window" >/dev/null
}

declare -a ROWS
row() { ROWS+=("$1|$2|$3|$4|$5|$6"); } # group|form|command|ops|usec|ops at pipeline 16

rcli FLUSHALL >/dev/null
log "throughput: GCRA"
if [ -n "$CELL" ]; then
  read -r o u p < <(measure cl.throttle CL.THROTTLE cell:__rand_int__ 1000 1000 60 1)
  row gcra "redis-cell 0.2.2" "CL.THROTTLE key 1000 1000 60 1" "$o" "$u" "$p"
fi
read -r o u p < <(measure ctr.throttle CTR.THROTTLE ctr:__rand_int__ 1000 1000 60 1)
row gcra "redis-ctr" "CTR.THROTTLE key 1000 1000 60 1" "$o" "$u" "$p"
read -r o u p < <(measure evalsha EVALSHA "$GCRA_SHA" 1 lua:__rand_int__ 1000 1000 60 1)
row gcra "GCRA Lua script" "EVALSHA gcra.lua 1 key 1000 1000 60 1" "$o" "$u" "$p"

rcli FLUSHALL >/dev/null
log "throughput: sliding windows"
read -r o u p < <(measure evalsha EVALSHA "$ZSET_SHA" 1 zset:__rand_int__ 1000 60000 __rand_int__)
row window "sorted-set Lua" "EVALSHA zset_window.lua 1 key 1000 60000 id" "$o" "$u" "$p"
window_keys ctrw: "$KEYS" 1000 60000
read -r o u p < <(measure ctr.decrfloor CTR.DECRFLOOR ctrw:__rand_int__ 1)
row window "redis-ctr" "CTR.DECRFLOOR key 1 (floor -1000, CTR.WINDOW key 60000)" "$o" "$u" "$p"
sample=$(rcli CTR.GET ctrw:000000000007)
[ "${sample:-0}" -lt 0 ] || die "the windowed keys took nothing: redis-benchmark's key names changed?"
read -r o u p < <(measure evalsha EVALSHA "$TWO_SHA" 1 two:__rand_int__ 1000 60000)
row window "two fixed windows (Lua)" "EVALSHA two_windows.lua 1 key 1000 60000" "$o" "$u" "$p"

# Bytes per limited key: 10,000 keys, 100 requests each on average (all allowed), used_memory
# before and after (the setup of the windowed keys included), sent at pipeline 16. Over 1,000
# keys the server's own fixed growth (about 40 KB whatever the number of keys: buffers, script
# state) added some 40 bytes a key.
MEM_KEYS=10000
bytes_per_key() {
  local setup=$1
  shift
  rcli FLUSHALL >/dev/null
  local before after
  before=$(rcli INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }')
  [ "$setup" = window ] && window_keys ctrw: "$MEM_KEYS" 1000 60000
  # Read at once: the GCRA forms' keys expire within a second of their last request.
  redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -P 16 -n $((MEM_KEYS * 100)) -r "$MEM_KEYS" -q "$@" >/dev/null 2>&1
  after=$(rcli INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }')
  echo $(((after - before) / MEM_KEYS))
}
# Bytes per limited key when each key's 100 requests come spread over its whole window (one
# every 590 ms of the 60 s window, times carried by the requests: AT, the scripts' now; the
# sorted set's request ids 12 digits, as redis-benchmark's random ones above), as steady traffic
# leaves a key: every bucket of the window holds some. Sliding windows only.
bytes_spread() {
  local form=$1 before after base
  rcli FLUSHALL >/dev/null
  before=$(rcli INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }')
  [ "$form" = ctr ] && window_keys ctrw: "$MEM_KEYS" 1000 60000
  base=$(($(rcli TIME | head -n 1) * 1000 + 1000))
  awk -v keys="$MEM_KEYS" -v base="$base" -v form="$form" -v zsha="$ZSET_SHA" -v tsha="$TWO_SHA" 'BEGIN {
    for (j = 0; j < 100; j++) { t = base + j * 590
      for (k = 0; k < keys; k++) { key = sprintf("%012d", k)
        if (form == "ctr") printf "CTR.DECRFLOOR ctrw:%s 1 AT %.0f\n", key, t
        else if (form == "zset") printf "EVALSHA %s 1 zset:%s 1000 60000 %012d %.0f\n", zsha, key, j * keys + k, t
        else printf "EVALSHA %s 1 two:%s 1000 60000 %.0f\n", tsha, key, t } } }' |
    rcli --pipe >"$tmp/spread.out" 2>&1
  grep -q 'errors: 0' "$tmp/spread.out" || die "the spread requests of $form failed: $(tail -n 2 "$tmp/spread.out")"
  sleep 1 # the keyspace's rehash done
  after=$(rcli INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }')
  echo $(((after - before) / MEM_KEYS))
}
log "memory per limited key"
declare -A MEM
[ -n "$CELL" ] && MEM["redis-cell 0.2.2"]=$(bytes_per_key none CL.THROTTLE cell:__rand_int__ 1000 1000 60 1)
MEM["redis-ctr|gcra"]=$(bytes_per_key none CTR.THROTTLE ctr:__rand_int__ 1000 1000 60 1)
MEM["GCRA Lua script"]=$(bytes_per_key none EVALSHA "$GCRA_SHA" 1 lua:__rand_int__ 1000 1000 60 1)
MEM["sorted-set Lua"]=$(bytes_per_key none EVALSHA "$ZSET_SHA" 1 zset:__rand_int__ 1000 60000 __rand_int__)
MEM["redis-ctr|window"]=$(bytes_per_key window CTR.DECRFLOOR ctrw:__rand_int__ 1)
MEM["two fixed windows (Lua)"]=$(bytes_per_key none EVALSHA "$TWO_SHA" 1 two:__rand_int__ 1000 60000)
declare -A SPREAD=(["sorted-set Lua"]=$(bytes_spread zset) ["redis-ctr|window"]=$(bytes_spread ctr)
  ["two fixed windows (Lua)"]=$(bytes_spread two))

# The error of each sliding window against an exact one: a limit of 100 per 10 s, a request
# every 40 ms for 50 s (2.5 times the limit), times carried by the requests (AT, or the scripts'
# now argument), from a second ahead of the server's clock.
log "error against an exact sliding window"
rcli FLUSHALL >/dev/null
LIMIT=100 WINDOW=10000 STEP=40 COUNT=1250
base=$(($(rcli TIME | head -n 1) * 1000 + 1000))
rcli CTR.FLOOR err:ctr -$LIMIT >/dev/null
rcli CTR.WINDOW err:ctr $WINDOW >/dev/null
for i in $(seq 0 $((COUNT - 1))); do
  t=$((base + i * STEP))
  echo "CTR.DECRFLOOR err:ctr 1 AT $t"
  echo "EVALSHA $ZSET_SHA 1 err:zset $LIMIT $WINDOW $i $t"
  echo "EVALSHA $TWO_SHA 1 err:two $LIMIT $WINDOW $t"
done >"$tmp/err.cmds"
rcli <"$tmp/err.cmds" >"$tmp/err.out"
! grep -q 'ERR' "$tmp/err.out" || die "a request of the error run failed: $(grep -m 1 ERR "$tmp/err.out")"
exact=$(awk -v n=$COUNT -v step=$STEP -v w=$WINDOW -v l=$LIMIT 'BEGIN {
  for (i = 0; i < n; i++) { t = i * step; c = 0
    for (j = first; j < k; j++) if (at[j] > t - w) c++; else first = j + 1
    if (c < l) at[k++] = t }
  print k }')
read -r ctr_ok zset_ok two_ok < <(awk '{ f = (NR - 1) % 3
  if (f == 0 && $0 != "") ctr++; if (f == 1 && $0 == 1) zset++; if (f == 2 && $0 == 1) two++ }
  END { print ctr + 0, zset + 0, two + 0 }' "$tmp/err.out")
err() { awk -v a="$1" -v e="$exact" 'BEGIN { printf "%+.1f%% (%d allowed)", (a - e) * 100 / e, a }'; }
declare -A ERR=(["sorted-set Lua"]=$(err "$zset_ok") ["redis-ctr|window"]=$(err "$ctr_ok")
  ["two fixed windows (Lua)"]=$(err "$two_ok"))

echo "Rate limiters, $(date -u '+%Y-%m-%d %H:%M UTC'), $(redis-server --version | awk '{ print $3 }'), ${SECONDS_PER_RUN} s per run, 50 clients, $KEYS keys; exact sliding window: $exact allowed of $COUNT"
echo
echo "| group | form | command | ops/s | ops/s ratio | ops/s P16 | P16 ratio | usec/call | usec ratio | bytes per limited key | bytes, requests spread over the window | error against exact |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
declare -A BASE_OPS BASE_USEC BASE_P16
for r in "${ROWS[@]}"; do
  IFS='|' read -r g form cmd ops usec p16 <<<"$r"
  [ -n "${BASE_OPS[$g]:-}" ] || { BASE_OPS[$g]=$ops; BASE_USEC[$g]=$usec; BASE_P16[$g]=$p16; }
  mem=${MEM["$form|$g"]:-${MEM[$form]:-}}
  e=${ERR["$form|$g"]:-${ERR[$form]:-n/a}}
  spread=${SPREAD["$form|$g"]:-${SPREAD[$form]:-n/a}}
  [ "$g" = gcra ] && e="n/a (the same algorithm)"
  printf '| %s | %s | `%s` | %.0f | %s | %.0f | %s | %s | %s | %s | %s | %s |\n' "$g" "$form" "$cmd" "$ops" \
    "$(ratio "$ops" "${BASE_OPS[$g]}")" "$p16" "$(ratio "$p16" "${BASE_P16[$g]}")" \
    "$usec" "$(ratio "$usec" "${BASE_USEC[$g]}")" "$mem" "$spread" "$e"
done
