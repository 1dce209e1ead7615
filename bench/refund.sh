#!/usr/bin/env bash
# Refunds (docs/BENCHMARKS.md#refunds-benchrefundsh): `CTR.REFUND key TOKEN token` against the
# Lua script users write for it (bench/lua/refund.lua, over the ledger that
# bench/lua/reserve_units.lua keeps: one key per order recording the units granted).
#
# One server; for each repetition, each form in turn (ctr, then lua): FLUSHALL, a stock of
# 10^12, ORDERS reservations of 1 unit each with its own token / order id (not measured), a
# check of the replies on one more order (reserve, refund: 1, refund again: 1, the stock
# unchanged by the second), then the measured phases, each ORDERS requests sent with
# `redis-cli --pipe` from a RESP file generated once with awk (C and pipelined: the server is
# the bottleneck), after CONFIG RESETSTAT:
#   refund  every order refunded once (every unit comes back: the stock ends where it started);
#   retry   the same refunds again (replays: each replies its units again, nothing changes).
# A run whose requests failed (errors from redis-cli --pipe, failed_calls or rejected_calls in
# INFO commandstats), whose call count is not ORDERS, or whose stock is not what it must be,
# stops the script. Prints a markdown table per phase: per form the median ops/s (ORDERS / wall
# seconds of the --pipe run) and the median usec/call (usec / calls of cmdstat_ctr.refund or
# cmdstat_evalsha), each as a ratio to the Lua script's (ratio of medians) and as the paired
# ratio (median over the repetitions of ctr / lua of the same repetition), then the machine.
#
# Usage (from the repository root, after `cargo build --release`): bash bench/refund.sh
# Environment: MODULE (default target/release/libredis_ctr.so), ORDERS (default 300000), REPS
# (default 3), REDIS_SERVER (bench/lib.sh). Tokens are remembered for ctr.token-window-ms (1 h by
# default), and the Lua ledger entries for 3600 s: far longer than a run.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

command -v redis-cli >/dev/null || die "redis-cli is not installed (it comes with redis-server)"
MODULE=${MODULE:-target/release/libredis_ctr.so}
[ -f "$MODULE" ] || die "build the module first (cargo build --release)"
MODULE=$(realpath "$MODULE")
ORDERS=${ORDERS:-300000}
REPS=${REPS:-3}
[[ $ORDERS =~ ^[1-9][0-9]*$ ]] || die "ORDERS must be a positive integer"
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer"
START=1000000000000
LEDGER_SECONDS=3600
FORMS=(ctr lua)
PHASES=(refund retry)

load_avg() { cut -d' ' -f1-3 /proc/loadavg; }
load_before=$(load_avg)
start_server
version=$(rcli INFO server | tr -d '\r' | awk -F: '$1 == "redis_version" { print $2 }')
log "bench: redis-server $version on 127.0.0.1:$port; $REPS repetition(s) of $ORDERS orders per form"

load_script() { rcli SCRIPT LOAD "$(cat "bench/lua/$1")"; }
RESERVE_SHA=$(load_script reserve_units.lua)
REFUND_SHA=$(load_script refund.lua)
[[ $RESERVE_SHA =~ ^[0-9a-f]{40}$ && $REFUND_SHA =~ ^[0-9a-f]{40}$ ]] ||
  die "SCRIPT LOAD failed: $RESERVE_SHA $REFUND_SHA"

# Per form: the commands (words; '#' is replaced by the order's number), the command whose
# commandstats to read, and how the stock is set and read.
declare -A RESERVE_CMD=([ctr]="CTR.DECRFLOOR stock 1 TOKEN o:#"
  [lua]="EVALSHA $RESERVE_SHA 2 stock ord:# 1 0 $LEDGER_SECONDS")
declare -A REFUND_CMD=([ctr]="CTR.REFUND stock TOKEN o:#" [lua]="EVALSHA $REFUND_SHA 2 stock ord:#")
declare -A STAT=([ctr]=ctr.refund [lua]=evalsha)
declare -A LABEL=([ctr]="CTR.REFUND" [lua]="refund.lua (EVALSHA)")
declare -A SHOWN=([ctr]="CTR.REFUND stock TOKEN o:<i>" [lua]="EVALSHA refund.lua 2 stock ord:<i>")
set_stock() {
  case $1 in
    ctr) rcli CTR.ADD stock "$2" ;;
    lua) rcli SET stock "$2" ;;
  esac
}
stock() {
  case $1 in
    ctr) rcli CTR.GET stock ;;
    lua) rcli GET stock ;;
  esac
}
# One request of a form's command for order "$2" (its words with '#' replaced), reply raw.
one() {
  local -a words
  read -r -a words <<<"$1"
  rcli "${words[@]//#/$2}"
}

# RESP for ORDERS requests of the words in $1, '#' replaced by the order's number 0..ORDERS-1
# (split around it once: mawk's gsub slows down as it is called, a million calls take minutes).
resp() {
  awk -v n="$ORDERS" -v words="$1" 'BEGIN {
    c = split(words, w, " ")
    for (k = 1; k <= c; k++) {
      at[k] = index(w[k], "#")
      if (at[k]) { pre[k] = substr(w[k], 1, at[k] - 1); post[k] = substr(w[k], at[k] + 1) }
    }
    for (i = 0; i < n; i++) {
      s = "*" c "\r\n"
      for (k = 1; k <= c; k++) {
        v = at[k] ? pre[k] i post[k] : w[k]
        s = s "$" length(v) "\r\n" v "\r\n"
      }
      printf "%s", s
    }
  }'
}
log "generating the requests"
for f in "${FORMS[@]}"; do
  resp "${RESERVE_CMD[$f]}" >"$tmp/reserve.$f"
  resp "${REFUND_CMD[$f]}" >"$tmp/refund.$f"
done

# Sends a RESP file with redis-cli --pipe; dies unless every request got a reply without error.
pipe() {
  local out
  out=$(rcli --pipe <"$1" 2>&1) || die "redis-cli --pipe <$1 failed: $out"
  [[ $out == *"errors: 0, replies: $ORDERS"* ]] || die "redis-cli --pipe <$1: $out"
}
expect() { # what, got, wanted
  [ "$2" = "$3" ] || die "$1: got '$2', expected '$3'"
}

declare -A OPS=() USEC=()
# One measured phase: CONFIG RESETSTAT, the refunds, their figures; the stock must end at START.
measure() {
  local f=$1 phase=$2 t0 t1 line calls usec failed
  rcli CONFIG RESETSTAT >/dev/null
  t0=$(date +%s.%N)
  pipe "$tmp/refund.$f"
  t1=$(date +%s.%N)
  line=$(rcli INFO commandstats | tr -d '\r' | grep -F "cmdstat_${STAT[$f]}:" || true)
  [ -n "$line" ] || die "$f $phase: no commandstats for ${STAT[$f]}"
  calls=$(sed -E 's/.*[:,]calls=([0-9]+).*/\1/' <<<"$line")
  usec=$(sed -E 's/.*,usec=([0-9]+).*/\1/' <<<"$line")
  failed=$(awk -F'[:,=]' '{ for (k = 2; k < NF; k++) if ($k == "failed_calls" || $k == "rejected_calls") s += $(k + 1) }
    END { print s + 0 }' <<<"$line")
  [ "$failed" -eq 0 ] || die "$f $phase: $failed calls failed ($line)"
  expect "$f $phase: calls of ${STAT[$f]}" "$calls" "$ORDERS"
  expect "$f $phase: the stock after the refunds" "$(stock "$f")" "$START"
  OPS[$phase|$f]+="$(awk -v n="$ORDERS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }') "
  USEC[$phase|$f]+="$(awk -v u="$usec" -v c="$calls" 'BEGIN { printf "%.4f", u / c }') "
  log "  $phase: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') s, $(awk -v u="$usec" -v c="$calls" 'BEGIN { printf "%.3f", u / c }') usec/call"
}

for ((rep = 1; rep <= REPS; rep++)); do
  for f in "${FORMS[@]}"; do
    log "run $rep/$REPS $f"
    rcli FLUSHALL >/dev/null
    set_stock "$f" "$START" >/dev/null
    expect "$f: the starting stock" "$(stock "$f")" "$START"
    pipe "$tmp/reserve.$f"
    left=$((START - ORDERS))
    expect "$f: the stock after the reservations" "$(stock "$f")" "$left"
    # One more order, outside the measured ones: the replies themselves.
    expect "$f: reserving the sample order" "$(one "${RESERVE_CMD[$f]}" sample)" "$((left - 1))"
    expect "$f: the first refund of the sample order" "$(one "${REFUND_CMD[$f]}" sample)" 1
    expect "$f: the stock after it" "$(stock "$f")" "$left"
    expect "$f: the second refund of the sample order" "$(one "${REFUND_CMD[$f]}" sample)" 1
    expect "$f: the stock after the second refund" "$(stock "$f")" "$left"
    expect "$f: the reservation's retry after the refund" "$(one "${RESERVE_CMD[$f]}" sample)" "$((left - 1))"
    expect "$f: the refund of an unknown order" "$(one "${REFUND_CMD[$f]}" unknown)" ""
    measure "$f" refund
    measure "$f" retry
    expect "$f: a retried refund after the runs" "$(one "${REFUND_CMD[$f]}" 0)" 1
    expect "$f: the stock after it" "$(stock "$f")" "$START"
  done
done
rcli FLUSHALL >/dev/null


echo "Refunds, $(date -u '+%Y-%m-%d %H:%M UTC'), Redis $version: $ORDERS orders of 1 unit, each refunded through \`redis-cli --pipe\`, $REPS interleaved repetition(s); load average $load_before before, $(load_avg) after."
echo
echo "Command: \`ORDERS=$ORDERS REPS=$REPS bash bench/refund.sh\`"
for phase in "${PHASES[@]}"; do
  echo
  case $phase in
    refund) echo "Phase \`refund\`: each order's first refund (its unit goes back to the stock)." ;;
    retry) echo "Phase \`retry\`: the same refunds again (replays: the same reply, nothing changes)." ;;
  esac
  echo
  echo "| form | command | median ops/s | ops/s ratio | paired | median usec/call | usec ratio | paired | ops/s per run |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---|"
  base_ops=$(median "${OPS[$phase|lua]}")
  base_usec=$(median "${USEC[$phase|lua]}")
  for f in lua ctr; do
    ops=$(median "${OPS[$phase|$f]}")
    usec=$(median "${USEC[$phase|$f]}")
    printf '| %s | `%s` | %.0f | %s | %s | %.3f | %s | %s | %s |\n' "${LABEL[$f]}" "${SHOWN[$f]}" \
      "$ops" "$(ratio "$ops" "$base_ops")" "$(paired "${OPS[$phase|$f]}" "${OPS[$phase|lua]}")" \
      "$usec" "$(ratio "$usec" "$base_usec")" "$(paired "${USEC[$phase|$f]}" "${USEC[$phase|lua]}")" \
      "$(sed -E 's/ $//; s/ /, /g' <<<"${OPS[$phase|$f]}")"
  done
done
echo
echo "Machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo); redis-server $version ($(redis-cli --version)); the module at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
