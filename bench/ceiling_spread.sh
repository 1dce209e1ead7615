#!/usr/bin/env bash
# Ceiled spread counters across 3 masters (issue 35; results in docs/BENCHMARKS.md, "Ceiled
# spread counters"), in one run on a local cluster started for it:
#   1. capped add load: CALLS `CTR.ADD member 1` (pipeline 16) on a counter capped far above
#      what the run adds, spread over 16 members, each member's adds sent to its own master,
#      against the same adds on one ceiled key: calls and server time per call per node (INFO
#      commandstats), and the total read back;
#   2. filling to the cap: FILL_CLIENTS redis-benchmark clients per member add 1 at a time to
#      a counter capped at CAP, spread over 16 members, twice the cap in adds: the total never
#      passes the cap; a walk over the members (retrying TRYAGAIN, which redis-benchmark cannot)
#      then adds what room is left, and the total read back must be the cap exactly. The adds
#      each master answered and the room moved (refusals ask the rebalancer for it) are printed.
#
# Usage (from the repository root, after `make build`): bash bench/ceiling_spread.sh
# Environment: CTR_MODULE (module path), CALLS (default 320000), CAP (default 100000),
# FILL_CLIENTS (default 2).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
CALLS=${CALLS:-320000}
CAP=${CAP:-100000}
FILL_CLIENTS=${FILL_CLIENTS:-2}
[ -f "$MODULE" ] || { echo "module not found at $MODULE (run make build)" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CTR_MODULE=$MODULE
start_cluster

# ceiled_spread KEY CEILING: KEY at 0 capped at CEILING, spread over 16 members (printed, the
# home first), once every share of the room has arrived (room_in_flight 0).
ceiled_spread() {
  cli "${ports[0]}" -c CTR.ADD "$1" 0 >/dev/null
  cli "${ports[0]}" -c CTR.CEIL "$1" "$2" >/dev/null
  cli "${ports[0]}" -c CTR.SPREAD "$1" 16
  local _
  for _ in $(seq 100); do
    [ "$(cli "$(owner "$1")" CTR.INFO "$1" | awk 'f { print; exit } /^room_in_flight$/ { f = 1 }')" = 0 ] && return
    sleep 0.1
  done
  die "the shares of $1 never arrived"
}

log "cluster on ports ${ports[*]}; $CALLS capped adds, then adds past a cap of $CAP"
echo "## Capped add load of one counter ($CALLS CTR.ADD of 1, pipeline 16, far below the cap)"
echo
mapfile -t members < <(ceiled_spread load 1000000000)
reset_stats
# Per member, a multiple of its 2 clients x pipeline 16: redis-benchmark sends whole pipelines.
per=$((CALLS / 16 / 32 * 32))
for m in "${members[@]}"; do
  redis-benchmark -h 127.0.0.1 -p "$(owner "$m")" -c 2 -P 16 -n "$per" -q CTR.ADD "$m" 1 >/dev/null &
done
wait
total=$(cli "$(owner load)" CTR.GET load)
[ "$total" = "$((per * 16))" ] || die "spread total $total, expected $((per * 16))"
echo "Spread over 16 members (each member's adds sent to its own master; total read back: $total):"
echo
table_head ctr.add
node_stats ctr.add
echo
cli "${ports[0]}" -c CTR.ADD onekey 0 >/dev/null
cli "${ports[0]}" -c CTR.CEIL onekey 1000000000 >/dev/null
reset_stats
redis-benchmark -h 127.0.0.1 -p "$(owner onekey)" -c 32 -P 16 -n "$CALLS" -q CTR.ADD onekey 1 >/dev/null
echo "The same adds on one ceiled key:"
echo
table_head ctr.add
node_stats ctr.add
echo

echo "## Filling to the cap ($CAP, 16 members, $FILL_CLIENTS clients per member adding 1 at a time, twice the cap in adds)"
echo
mapfile -t members < <(ceiled_spread fill "$CAP")
reset_stats
per=$((CAP * 2 / 16 / FILL_CLIENTS * FILL_CLIENTS))
start=$(date +%s%N)
for m in "${members[@]}"; do
  redis-benchmark -h 127.0.0.1 -p "$(owner "$m")" -c "$FILL_CLIENTS" -n "$per" -q CTR.ADD "$m" 1 >/dev/null &
done
wait
ms=$(( ($(date +%s%N) - start) / 1000000 ))
reached=$(cli "$(owner fill)" CTR.GET fill)
[ "$reached" -le "$CAP" ] || die "filled to $reached, past the cap $CAP"
# redis-benchmark cannot retry a TRYAGAIN (room still gathering when little is left) and
# stops that client: the last units are added by a walk over the members, retrying.
walked=0
for m in "${members[@]}"; do
  tries=0
  while :; do
    r=$(cli "$(owner "$m")" CTR.ADD "$m" 1)
    case $r in
      '' ) break ;;
      TRYAGAIN*) tries=$((tries + 1)); [ "$tries" -lt 50 ] || break; sleep 0.05 ;;
      *[!0-9-]*) die "$m: $r" ;;
      *) walked=$((walked + 1)) ;;
    esac
  done
done
total=$(cli "$(owner fill)" CTR.GET fill)
[ "$total" = "$CAP" ] || die "filled to $total, expected exactly $CAP"
moved=0
for p in "${ports[@]}"; do
  n=$(cli "$p" INFO ctr | tr -d '\r' | awk -F: '/^ctr_budget_moves:/ { print $2 }')
  moved=$((moved + ${n:-0}))
done
echo "- $((per * 16)) adds of 1 sent in $ms ms reached $reached (never past the cap); a walk over the members then added the last $walked units: the total read back is $total, the cap exactly; budget moves (of room) made: $moved"
echo
table_head ctr.add
node_stats ctr.add
