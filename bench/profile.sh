#!/usr/bin/env bash
# Where does a module command spend its time compared with a native one? Starts its own
# redis-server with the module (free loopback port), and for each of two commands runs
# redis-benchmark while `perf record` samples the server (CPU clock, no call graph), then prints
# the server CPU time per operation, per symbol, side by side, largest differences first.
#
#   bash bench/profile.sh                 # INCRBY n:hot 1 against CTR.ADD c:hot 1, pipeline 16
#
# Environment:
#   PROFILE_A="INCRBY n:hot 1"   reference command      PROFILE_B="CTR.ADD c:hot 1"
#   PROFILE_OPTS="-P 16"         redis-benchmark options (e.g. "-P 16 -r 100000")
#   PROFILE_REQUESTS=3000000     requests per command
#   PROFILE_TOP=30, PROFILE_BOTTOM=10   rows shown: largest excess of B, then largest of A
#   CTR_MODULE                   module to load (default target/release/libredis_ctr.so)
# Needs perf (Debian: apt-get install linux-perf) and the right to profile the server process
# (root, or kernel.perf_event_paranoid <= 1).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
A=${PROFILE_A:-INCRBY n:hot 1}
B=${PROFILE_B:-CTR.ADD c:hot 1}
OPTS=${PROFILE_OPTS:--P 16}
REQUESTS=${PROFILE_REQUESTS:-3000000}
TOP=${PROFILE_TOP:-30}
BOTTOM=${PROFILE_BOTTOM:-10}
MODULE=${CTR_MODULE:-$repo/target/release/libredis_ctr.so}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

for tool in perf redis-server redis-cli redis-benchmark awk; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (perf: apt-get install linux-perf)"
done
[ -f "$MODULE" ] || die "module not found: $MODULE (build it with make build)"
[[ $REQUESTS =~ ^[0-9]+$ ]] || die "PROFILE_REQUESTS must be an integer"

perf_pid=""
stop_perf() {
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
    perf_pid=""
  fi
}
trap 'stop_perf; cleanup' EXIT

# Profiles one command: sets RES_USEC (usec_per_call) and RES_RPS (ops/s), and leaves $tmp/$2.sym
# (ns per operation <TAB> symbol).
profile() {
  local cmd=$1 tag=$2 line _
  local -a opts words
  read -r -a opts <<<"$OPTS"
  read -r -a words <<<"$cmd"
  redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n 100000 -q "${opts[@]}" "${words[@]}" >/dev/null 2>&1 ||
    die "redis-benchmark failed for $cmd"
  rcli CONFIG RESETSTAT >/dev/null
  perf record -F 4999 -p "$server_pid" -o "$tmp/$tag.data" >/dev/null 2>"$tmp/$tag.perf.err" &
  perf_pid=$!
  sleep 0.5
  kill -0 "$perf_pid" 2>/dev/null || die "perf record failed: $(cat "$tmp/$tag.perf.err")"
  line=$(redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n "$REQUESTS" -q --csv "${opts[@]}" "${words[@]}" | tail -n 1)
  stop_perf
  RES_RPS=$(awk -F, '{ v = $(NF - 6); gsub(/"/, "", v); print v }' <<<"$line")
  RES_USEC=$(rcli INFO commandstats | tr -d '\r' | awk -F'[:,=]' -v c="cmdstat_$(tr '[:upper:]' '[:lower:]' <<<"${words[0]}")" \
    '$1 == c { for (k = 2; k < NF; k++) if ($k == "usec_per_call") print $(k + 1) }')
  perf report -i "$tmp/$tag.data" --stdio --no-children -F period,dso,sym 2>/dev/null |
    awk -v n="$REQUESTS" '/^#/ || NF < 3 { next } { p = $1; $1 = ""; sub(/^ +/, ""); gsub(/ +/, " "); printf "%.2f\t%s\n", p / n, $0 }' \
      >"$tmp/$tag.sym"
}

start_server
log "profile: redis-server on 127.0.0.1:$port (pid $server_pid), $REQUESTS requests each, options: $OPTS"
profile "$A" a
usec_a=$RES_USEC rps_a=$RES_RPS
profile "$B" b
usec_b=$RES_USEC rps_b=$RES_RPS
stop_server

echo "## Server CPU per operation: \`$B\` against \`$A\` (redis-benchmark $OPTS, 50 clients)"
echo
echo "| | \`$A\` | \`$B\` |"
echo "|---|---:|---:|"
echo "| ops/s | $rps_a | $rps_b |"
echo "| usec_per_call | $usec_a | $usec_b |"
awk -F'\t' 'FNR == 1 { f++ } { t[f] += $1 } END { printf "| server CPU per op (ns, all code incl. kernel) | %.0f | %.0f |\n", t[1], t[2] }' \
  "$tmp/a.sym" "$tmp/b.sym"
echo
echo "Per symbol, ns per operation (perf samples x period / requests): where B costs more first, where A costs more last:"
echo
echo "| symbol | A | B | B - A |"
echo "|---|---:|---:|---:|"
awk -F'\t' 'FNR == 1 { f++ } { v[$2, f] = $1; k[$2] = 1 }
  END { for (s in k) printf "%.1f\t%.1f\t%.1f\t%s\n", v[s, 2] - v[s, 1], v[s, 1], v[s, 2], s }' \
  "$tmp/a.sym" "$tmp/b.sym" | sort -t$'\t' -k1,1 -gr >"$tmp/diff"
head -n "$TOP" "$tmp/diff" | awk -F'\t' '{ printf "| `%s` | %s | %s | %+.1f |\n", $4, $2, $3, $1 }'
echo "| ... | | | |"
tail -n "$BOTTOM" "$tmp/diff" | awk -F'\t' '{ printf "| `%s` | %s | %s | %+.1f |\n", $4, $2, $3, $1 }'
