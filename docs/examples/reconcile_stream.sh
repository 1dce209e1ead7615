#!/usr/bin/env bash
# A reconcile job against a Redis stream used as the event log.
#
# The application appends every event to a stream (the source of truth) and bumps a counter
# (the fast read path). Bumps get lost or doubled (crashes, retries). This job repairs the
# counter without clobbering the bumps that race it, exactly from its first repair.
#
# Usage: REDIS_PORT=6379 bash reconcile_stream.sh   (needs redis-cli and the module loaded)
#
# It waits for the orders to settle: ctr.bucket-ms + ctr.settle-ms, two minutes with the
# defaults. For a quick run, give the server shorter ones, e.g.
#   redis-server --loadmodule ./libredis_ctr.so bucket-ms 1000 settle-ms 1000
set -euo pipefail
PORT="${REDIS_PORT:-6379}"
cli() { redis-cli -p "$PORT" "$@"; }

STREAM=demo:{orders}:log     # the hash tag keeps both keys in one cluster slot
COUNTER=demo:{orders}:count
cli DEL "$STREAM" "$COUNTER" >/dev/null

# The application: an order is an XADD plus a counter bump stamped with the event's time
# (AT = the stream id's millisecond part). A lost bump is skipped, a doubled one sent twice.
order() { # order <n> [lost|doubled]
  local id at
  id=$(cli XADD "$STREAM" '*' order "$1")
  at=${id%-*}
  [ "${2:-}" = lost ] && return 0
  cli CTR.ADD "$COUNTER" 1 AT "$at" >/dev/null
  if [ "${2:-}" = doubled ]; then cli CTR.ADD "$COUNTER" 1 AT "$at" >/dev/null; fi
}

# 1. The counter has been counting for a while before any job existed: orders 1-10, with the
#    bumps of orders 7 and 8 lost. It keeps no bucket history.
for i in $(seq 1 10); do
  case $i in 7 | 8) order "$i" lost ;; *) order "$i" ;; esac
done

# 2. The job's first step, on every run: START. The first run starts the counter's bucket
#    history without changing its value (never an overwrite, which would clobber racing
#    bumps); later runs change nothing. The reply is the earliest watermark the counter
#    accepts: everything counted before START counts as at or before it.
earliest=$(cli CTR.RECONCILE "$COUNTER" START)
[ "$(cli CTR.RECONCILE "$COUNTER" START)" = "$earliest" ]   # idempotent

# 3. The application keeps going: orders 11-20, order 13's bump doubled.
for i in $(seq 11 20); do
  case $i in 13) order "$i" doubled ;; *) order "$i" ;; esac
done
echo "counter before repair: $(cli CTR.GET "$COUNTER") (stream holds $(cli XLEN "$STREAM") orders)"

# 4. The repair: at the newest bucket boundary at least ctr.settle-ms old (FROM STREAM picks it
#    when AT is omitted). The first run can only repair once that watermark has reached START's
#    reply; here we wait for it, and for order 20 to settle.
width=$(cli CONFIG GET ctr.bucket-ms | tail -n 1)
settle=$(cli CONFIG GET ctr.settle-ms | tail -n 1)
wait_s=$(awk -v ms="$((width + settle))" 'BEGIN { printf "%.3f", ms / 1000 }')
echo "waiting ${wait_s} s for the orders to settle (ctr.bucket-ms + ctr.settle-ms)"
sleep "$wait_s"
# Two more orders race the repair: they are after its watermark, and are kept.
order 21
order 22
reply=$(cli CTR.RECONCILE "$COUNTER" FROM STREAM "$STREAM")
value=$(echo "$reply" | sed -n 1p)
drift=$(echo "$reply" | sed -n 2p)
echo "after repair: value $value, drift $drift (the first watermark after START was $earliest)"

# 5. Alert on drift: the per-key and module-wide figures.
cli CTR.INFO "$COUNTER" | paste - - | grep -E '^(last_watermark|last_drift|total_abs_drift|reconciles)'
cli INFO ctr | grep -E '^ctr_(reconciles|drift_total_abs|drift_largest_abs)'
[ "$value" -eq 22 ] && [ "$drift" -eq -1 ] || { echo "unexpected repair" >&2; exit 1; }
