#!/usr/bin/env bash
# The idle sweep: N counters take T tokens each and then go quiet. How long until used_memory is
# back within 5% of the same counters without tokens, how long the sweep's ticks take, and how
# much a client's round trip is delayed while it runs. Prints a markdown table.
#
#   bash bench/sweep.sh
#
# Environment: CTR_MODULE (module path), SWEEP_COUNTERS (default 100000), SWEEP_TOKENS (default
# 20 per counter), SWEEP_WINDOW_MS (ctr.token-window-ms, default 20000: longer than the fill),
# SWEEP_ARGS (more module load arguments, e.g. "sweep-budget 2000 sweep-interval-ms 100").
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
MODULE=${CTR_MODULE:-$repo/target/release/libredis_ctr.so}
COUNTERS=${SWEEP_COUNTERS:-100000}
TOKENS=${SWEEP_TOKENS:-20}
WINDOW=${SWEEP_WINDOW_MS:-20000}
MODULE_ARGS="token-window-ms $WINDOW ${SWEEP_ARGS:-}"

# shellcheck source=bench/lib.sh
. "$here/lib.sh"
[ -f "$MODULE" ] || die "module not found: $MODULE (build it with make build)"
start_server

used() { rcli INFO memory | awk -F: '/^used_memory:/ { print $2 + 0 }'; }
ctr_field() { rcli INFO ctr | awk -F: -v f="ctr_$1" '$1 == f { print $2 + 0 }'; }
pipe() { rcli --pipe >/dev/null; }
now_ms() { date +%s%3N; }

# RESP for `CTR.ADD idle:<k> 1 [TOKEN t<j>]`, T times per counter (no token when T = 0).
fill() {
  awk -v n="$COUNTERS" -v t="$1" 'BEGIN {
    for (k = 0; k < n; k++) {
      key = "idle:" k
      if (t == 0) {
        printf "*3\r\n$7\r\nCTR.ADD\r\n$%d\r\n%s\r\n$2\r\n20\r\n", length(key), key
      }
      for (j = 0; j < t; j++) {
        tok = "t" j
        printf "*5\r\n$7\r\nCTR.ADD\r\n$%d\r\n%s\r\n$1\r\n1\r\n$5\r\nTOKEN\r\n$%d\r\n%s\r\n",
          length(key), key, length(tok), tok
      }
    }
  }' | pipe
}

# The baseline: the same counters, same values, no tokens.
fill 0
baseline=$(used)
# The machine's noise floor: the same client's worst round trip over 10 s with nothing to sweep.
timeout 10 redis-cli -h 127.0.0.1 -p "$port" --latency --raw -i 1 >"$tmp/quiet.txt" 2>/dev/null || true
quiet=$(awk '{ if ($2 > m) m = $2 } END { print m + 0 }' "$tmp/quiet.txt")
rcli FLUSHALL >/dev/null
sleep 1

start=$(now_ms)
fill "$TOKENS"
filled=$(now_ms)
peak=$(used)
log "filled in $((filled - start)) ms; used_memory $peak (baseline $baseline)"

# While the sweep runs: one client's round trips (redis-cli --latency, 1 sample per 10 ms).
timeout $((WINDOW / 1000 + 90)) redis-cli -h 127.0.0.1 -p "$port" --latency --raw -i 1 \
  >"$tmp/latency.txt" 2>/dev/null &
lat_pid=$!
back=""
limit=$((WINDOW + 120000))
while :; do
  t=$(now_ms)
  mem=$(used)
  if awk -v m="$mem" -v b="$baseline" 'BEGIN { exit !(m <= b * 1.05) }'; then
    back=$((t - start))
    break
  fi
  [ $((t - start)) -lt "$limit" ] || break
  sleep 0.2
done
sleep 1
kill "$lat_pid" 2>/dev/null || true
wait "$lat_pid" 2>/dev/null || true
final=$(used)
# --raw --latency prints "min max avg samples" per interval; the worst max over the run.
worst=$(awk '{ if ($2 > m) m = $2 } END { print m + 0 }' "$tmp/latency.txt")

# The last token expires one window after the end of the fill.
after_expiry=""
[ -n "$back" ] && after_expiry=$((back - (filled - start) - WINDOW))
echo "| counters x tokens | token window | fill | baseline used_memory | with tokens | back within 5% (after the last token expired) | used_memory then | sweep ticks | longest tick (CPU) | worst client round trip during the sweep | the same, 10 s with nothing to sweep |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '| %d x %d | %d s | %.1f s | %.1f MB | %.1f MB | %s | %.1f MB | %d | %d µs | %s ms | %s ms |\n' \
  "$COUNTERS" "$TOKENS" "$((WINDOW / 1000))" "$(awk -v v="$((filled - start))" 'BEGIN { print v / 1000 }')" \
  "$(awk -v v="$baseline" 'BEGIN { print v / 1e6 }')" "$(awk -v v="$peak" 'BEGIN { print v / 1e6 }')" \
  "$(if [ -n "$back" ]; then awk -v v="$back" -v e="$after_expiry" 'BEGIN { printf "%.1f s (%.1f s)", v / 1000, e / 1000 }'; else echo "not within the limit"; fi)" \
  "$(awk -v v="$final" 'BEGIN { print v / 1e6 }')" "$(ctr_field sweep_ticks)" \
  "$(ctr_field sweep_longest_tick_us)" "$worst" "$quiet"
log "released $(ctr_field sweep_released) entries from $(ctr_field sweep_counters) counters; tokens held $(ctr_field tokens_held)"
