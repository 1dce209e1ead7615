#!/usr/bin/env bash
# The periodic reconcile job for a counter whose event log is a Redis stream: run it every
# minute (cron, a systemd timer). Safe from its very first run: that one only STARTs the
# counter's history and says when the first repair can come; every later run repairs at the
# newest watermark that has settled, or says why it waits.
#
# Usage: REDIS_PORT=6379 bash reconcile_stream_job.sh [counter] [stream]
set -euo pipefail
PORT="${REDIS_PORT:-6379}"
cli() { redis-cli -p "$PORT" "$@"; }
# Both keys in one hash slot (one cluster node): the {orders} tag.
DEFAULT_COUNTER='demo:{orders}:count' DEFAULT_STREAM='demo:{orders}:log'
COUNTER=${1:-$DEFAULT_COUNTER}
STREAM=${2:-$DEFAULT_STREAM}

# 1. START, every run: the first starts the history without changing the value; later runs
#    change nothing. The reply is the earliest watermark the counter accepts.
earliest=$(cli CTR.RECONCILE "$COUNTER" START)

# 2. The watermark: the newest bucket boundary at least ctr.settle-ms old, on the server's clock.
width=$(cli CONFIG GET ctr.bucket-ms | tail -n 1)
settle=$(cli CONFIG GET ctr.settle-ms | tail -n 1)
now=$(cli TIME | { read -r s; read -r us; echo $((s * 1000 + us / 1000)); })
w=$(((now - settle) / width * width))

# 3. The first runs: the history is younger than the settle delay, nothing to repair yet.
if [ "$w" -lt "$earliest" ]; then
  echo "history starts at $earliest; the first repair comes once it has settled ($(((earliest + settle - now + 999) / 1000)) s)"
  exit 0
fi

# 4. The repair at w. A missing stream is an error (a typo must not wipe the counter); a log
#    that may really be empty says so with EMPTYOK.
reply=$(cli CTR.RECONCILE "$COUNTER" FROM STREAM "$STREAM" AT "$w")
case $reply in
  *ERR* | *WRONGTYPE*) echo "reconcile refused: $reply" >&2; exit 1 ;;
esac
echo "repaired at $w: value $(echo "$reply" | sed -n 1p), drift $(echo "$reply" | sed -n 2p)"
