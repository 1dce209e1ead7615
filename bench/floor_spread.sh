#!/usr/bin/env bash
# Floored spread counters across 3 masters (issue 14; results in docs/BENCHMARKS.md, "Floored
# spread counters"), in one run on a local cluster started for it:
#   1. purchase load: CALLS `CTR.DECRFLOOR holder 1` (pipeline 16) spread over 16 holders, each
#      holder's purchases sent to its own master, against the same purchases on one floored
#      key: calls and server time per call per node (INFO commandstats);
#   2. the false-refusal rate of buyers walking the probe rule (clients/rust/examples/
#      floor_sale_bench.rs, BUYERS threads, 1-5 units a purchase, until 99% of STOCK is
#      granted) under even demand and skewed demand (SKEW% of the buyers walk only the holders
#      of one master that is not the home's), with the calls per node of the even sale;
#   3. the flash sale of issue 22 measured from the moment of CTR.SPREAD, first without replicas,
#      then every master with a replica (so the replication gate delays the shares as in
#      production): FLASH_STOCK units
#      spread over FLASH_HOLDERS holders as FLASH_BUYERS buyers start, 1 unit a purchase,
#      FLASH_RETRY% of them retried with their token (clients/rust/examples/flash_sale_bench.rs),
#      FLASH_RUNS sales: false refusals, and units sold against the stock; then as many sales
#      bought by plain redis-py buyers (RedisCluster, the probe rule by hand:
#      clients/python/tests/plain_buyer.py), counting redis-py's give-ups ("TTL exhausted").
#
# Usage (from the repository root, after `make build-tests`): bash bench/floor_spread.sh
# Environment: CTR_MODULE (module path), CALLS (default 320000), STOCK (default 100000),
# BUYERS (default 10), SKEW (default 80), FLASH_STOCK (1000), FLASH_HOLDERS (8), FLASH_BUYERS
# (20), FLASH_RETRY (30), FLASH_RUNS (5); ONLY=flash runs the flash sales alone.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
CALLS=${CALLS:-320000}
STOCK=${STOCK:-100000}
BUYERS=${BUYERS:-10}
SKEW=${SKEW:-80}
FLASH_STOCK=${FLASH_STOCK:-1000}
FLASH_HOLDERS=${FLASH_HOLDERS:-8}
FLASH_BUYERS=${FLASH_BUYERS:-20}
FLASH_RETRY=${FLASH_RETRY:-30}
FLASH_RUNS=${FLASH_RUNS:-5}
# The plain redis-py buyers of the flash sale (clients/python/tests/plain_buyer.py); skipped
# when no Python with redis-py can be had.
PYTHON=${PYTHON-$(bash .ci/python-env "${REDIS_PY:-redis==8.1.0}" 2>/dev/null || true)}
SALE_BENCH=$PWD/target/release/examples/floor_sale_bench
FLASH_BENCH=$PWD/target/release/examples/flash_sale_bench
[ -f "$MODULE" ] || { echo "module not found at $MODULE (run make build-tests)" >&2; exit 1; }
[ -x "$SALE_BENCH" ] || { echo "$SALE_BENCH missing (run make build-tests)" >&2; exit 1; }
[ -x "$FLASH_BENCH" ] || { echo "$FLASH_BENCH missing (run make build-tests)" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CTR_MODULE=$MODULE
start_cluster

# floored_spread KEY STOCK: KEY floored at 0 with STOCK units spread over 16 holders (printed),
# once every share has arrived.
floored_spread() {
  cli "${ports[0]}" -c CTR.ADD "$1" "$2" >/dev/null
  cli "${ports[0]}" -c CTR.FLOOR "$1" 0 >/dev/null
  cli "${ports[0]}" -c CTR.SPREAD "$1" 16
  local _
  for _ in $(seq 100); do
    [ "$(cli "$(owner "$1")" CTR.INFO "$1" | awk 'f { print; exit } /^units_in_flight$/ { f = 1 }')" = 0 ] && return
    sleep 0.1
  done
  die "the shares of $1 never arrived"
}

log "cluster on ports ${ports[*]}; $CALLS purchase calls, sales of $STOCK units by $BUYERS buyers"
if [ "${ONLY:-}" != flash ]; then
echo "## Purchase load of one floored counter ($CALLS CTR.DECRFLOOR of 1 unit, pipeline 16)"
echo
mapfile -t holders < <(floored_spread load 1000000000)
reset_stats
# Per holder, a multiple of its 2 clients x pipeline 16: redis-benchmark sends whole pipelines.
per=$((CALLS / 16 / 32 * 32))
for h in "${holders[@]}"; do
  redis-benchmark -h 127.0.0.1 -p "$(owner "$h")" -c 2 -P 16 -n "$per" -q CTR.DECRFLOOR "$h" 1 >/dev/null &
done
wait
left=$(cli "$(owner load)" CTR.GET load)
[ "$left" = "$((1000000000 - per * 16))" ] || die "spread total $left, expected $((1000000000 - per * 16))"
echo "Spread over 16 holders (each holder's purchases sent to its own master; total read back: $left):"
echo
table_head ctr.decrfloor
node_stats ctr.decrfloor
echo
cli "${ports[0]}" -c CTR.ADD onekey 1000000000 >/dev/null
cli "${ports[0]}" -c CTR.FLOOR onekey 0 >/dev/null
reset_stats
redis-benchmark -h 127.0.0.1 -p "$(owner onekey)" -c 32 -P 16 -n "$CALLS" -q CTR.DECRFLOOR onekey 1 >/dev/null
echo "The same purchases on one floored key:"
echo
table_head ctr.decrfloor
node_stats ctr.decrfloor
echo

echo "## False refusals (buyers walking the probe rule, $STOCK units, $BUYERS buyers, until 99% is granted)"
echo
# sale KEY SKEW: one sale; the skewed buyers walk the holders of the master serving holder 1
# (or holder 2 when holder 1 shares the home's master).
sale() {
  local key=$1 skew=$2 hot_master hot=() h out
  mapfile -t holders < <(floored_spread "$key" "$STOCK")
  hot_master=$(owner "${holders[1]}")
  [ "$hot_master" != "$(owner "$key")" ] || hot_master=$(owner "${holders[2]}")
  for h in "${holders[@]}"; do [ "$(owner "$h")" != "$hot_master" ] || hot+=("$h"); done
  reset_stats
  out=$("$SALE_BENCH" "${ports[0]}" "$key" "$STOCK" "$BUYERS" "$skew" "${hot[@]}")
  echo "- $skew% of the buyers on the ${#hot[@]} holders of one master: $out; total read back $(cli "$(owner "$key")" CTR.GET "$key")"
}
sale even 0
echo
table_head ctr.decrfloor
node_stats ctr.decrfloor
echo
sale skewed "$SKEW"
echo
fi

# flash_sales TAG LABEL: FLASH_RUNS sales (keys tagged TAG) by the library's router, then
# FLASH_RUNS by plain redis-py buyers (PYTHON, when it has redis-py), each a row.
flash_sales() {
  local run out
  for run in $(seq "$FLASH_RUNS"); do
    out=$("$FLASH_BENCH" "${ports[0]}" "{flash$1$run}" "$FLASH_STOCK" "$FLASH_HOLDERS" "$FLASH_BUYERS" "$FLASH_RETRY") ||
      die "flash sale $2 $run: $out"
    echo "- sale $run, $2: $out"
  done
  [ -n "$PYTHON" ] || return 0
  for run in $(seq "$FLASH_RUNS"); do
    out=$(cd clients/python && "$PYTHON" -m tests.plain_buyer "${ports[0]}" "{plain$1$run}" "$FLASH_STOCK" "$FLASH_HOLDERS" "$FLASH_BUYERS" "$FLASH_RETRY") ||
      die "plain redis-py sale $2 $run: $out"
    echo "- sale $run, $2, plain redis-py buyers: $out"
  done
}

echo "## The flash sale from CTR.SPREAD ($FLASH_STOCK units, $FLASH_HOLDERS holders, $FLASH_BUYERS buyers, $FLASH_RETRY% retried; without replicas, then with a replica per master)"
echo
flash_sales plain "no replicas"
for p in "${ports[@]}"; do
  r=$((p + 1))
  while port_busy "$r" || port_busy "$((r + 10000))"; do r=$((r + 1)); done
  sh docker/cluster.sh replica "$r" "$p" >/dev/null || die "no replica for $p"
done
flash_sales replicated "a replica per master"
