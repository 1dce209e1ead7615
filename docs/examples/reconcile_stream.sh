#!/usr/bin/env bash
# A reconcile job against a Redis stream used as the event log.
#
# The application appends every event to a stream (the source of truth) and bumps a counter
# (the fast read path). Bumps get lost or doubled (crashes, retries). This job repairs the
# counter every few seconds without clobbering the bumps that race it.
#
# Usage: REDIS_PORT=6379 bash reconcile_stream.sh   (needs redis-cli and the module loaded)
set -euo pipefail
PORT="${REDIS_PORT:-6379}"
cli() { redis-cli -p "$PORT" "$@"; }

STREAM=demo:{orders}:log     # the hash tag keeps both keys in one cluster slot
COUNTER=demo:{orders}:count
cli DEL "$STREAM" "$COUNTER" >/dev/null

# 1. Start tracking: the first reconcile is a plain overwrite from the whole stream.
cli CTR.RECONCILE "$COUNTER" FROM STREAM "$STREAM" >/dev/null

# 2. The application: 20 orders, each an XADD plus a counter bump stamped with the event's
#    time (AT = the stream id's millisecond part). Orders 7 and 8 lose their bump, order 13's
#    is doubled: the counter runs one short.
for i in $(seq 1 20); do
  id=$(cli XADD "$STREAM" '*' order "$i")
  at=${id%-*}
  { [ "$i" -eq 7 ] || [ "$i" -eq 8 ]; } && continue
  cli CTR.ADD "$COUNTER" 1 AT "$at" >/dev/null
  [ "$i" -eq 13 ] && cli CTR.ADD "$COUNTER" 1 AT "$at" >/dev/null
done
echo "counter before repair: $(cli CTR.GET "$COUNTER") (stream holds $(cli XLEN "$STREAM") orders)"

# 3. The job: wait until the events have settled (ctr.settle-ms after the newest bucket
#    boundary), then reconcile at the default watermark. The reply is [value, drift].
width=$(cli CONFIG GET ctr.bucket-ms | tail -n 1)
settle=$(cli CONFIG GET ctr.settle-ms | tail -n 1)
sleep "$(awk -v ms="$((width + settle))" 'BEGIN { printf "%.3f", ms / 1000 }')"
reply=$(cli CTR.RECONCILE "$COUNTER" FROM STREAM "$STREAM")
value=$(echo "$reply" | sed -n 1p)
drift=$(echo "$reply" | sed -n 2p)
echo "after repair: value $value, drift $drift"

# 4. Alert on drift: the per-key and module-wide figures.
cli CTR.INFO "$COUNTER" | paste - - | grep -E '^(last_watermark|last_drift|total_abs_drift|reconciles)'
cli INFO ctr | grep -E '^ctr_(reconciles|drift_total_abs|drift_largest_abs)'
[ "$value" -eq 20 ] && [ "$drift" -eq -1 ] || { echo "unexpected repair" >&2; exit 1; }
