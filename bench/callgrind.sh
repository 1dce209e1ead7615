#!/usr/bin/env bash
# Instructions per call, counted exactly (valgrind's callgrind), for a few commands side by side:
# a deterministic measure of what a command costs the server, which the load of a shared machine
# does not move. Starts its own redis-server with the module under callgrind (free loopback port),
# collecting only inside `processCommand` (one command's whole handling once its request is
# parsed: lookup, the command itself, its reply, and its propagation), and for each command runs a
# warm-up, zeroes the counters, runs COUNT requests with redis-benchmark and dumps them.
#
#   bash bench/callgrind.sh                       # INCRBY, CTR.ADD and PNC.ADD on a hot key, P16
#   bash bench/callgrind.sh 'INCRBY n:__rand_int__ 1' 'CTR.ADD c:__rand_int__ 1'
#
# It prints, per command, the instructions per call inside processCommand and inside `call`,
# split by whose code ran (the module's own, Redis's module API, the allocator, the rest of the
# server), then the functions with the largest self cost per call. The raw dumps stay in
# CALLGRIND_KEEP when set (open them with callgrind_annotate or kcachegrind).
#
# Environment:
#   CALLGRIND_COUNT=100000      measured requests per command
#   CALLGRIND_WARMUP=20000      requests before the counters are zeroed (creates the keys)
#   CALLGRIND_OPTS="-P 16"      redis-benchmark options (e.g. "-P 16 -r 100000")
#   CALLGRIND_TOP=25            functions listed per command
#   CALLGRIND_KEEP=dir          keep the callgrind dumps in this directory
#   MODULE_ARGS                 module load arguments (default: replica-id bench)
#   CTR_MODULE                  module to load (default target/release/libredis_ctr.so)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
COUNT=${CALLGRIND_COUNT:-100000}
WARMUP=${CALLGRIND_WARMUP:-20000}
OPTS=${CALLGRIND_OPTS:--P 16}
TOP=${CALLGRIND_TOP:-25}
KEEP=${CALLGRIND_KEEP:-}
MODULE=${CTR_MODULE:-$repo/target/release/libredis_ctr.so}
MODULE_ARGS=${MODULE_ARGS:-replica-id bench}
if [ "$#" -gt 0 ]; then
  COMMANDS=("$@")
else
  COMMANDS=("INCRBY n:hot 1" "CTR.ADD c:hot 1" "PNC.ADD p:hot 1")
fi

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

for tool in valgrind callgrind_control callgrind_annotate redis-server redis-cli redis-benchmark awk; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (Debian: apt-get install valgrind)"
done
[ -f "$MODULE" ] || die "module not found: $MODULE (build it with make build)"
[[ $COUNT =~ ^[1-9][0-9]*$ ]] || die "CALLGRIND_COUNT must be a positive integer"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "CALLGRIND_WARMUP must be an integer"

# The server under valgrind: lib.sh's start_server, with valgrind in front of redis-server
# (collecting only inside processCommand) and time to start under it.
SERVER_PREFIX="valgrind --tool=callgrind --toggle-collect=processCommand --dump-instr=no \
  --callgrind-out-file=$tmp/callgrind.out.%p"
START_WAIT_TENTHS=600

bench_run() {
  local n=$1 cmd=$2
  local -a opts words
  read -r -a opts <<<"$OPTS"
  read -r -a words <<<"$cmd"
  redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n "$n" -q "${opts[@]}" "${words[@]}" >/dev/null 2>&1 ||
    die "redis-benchmark failed for $cmd"
}

# The dump callgrind_control just wrote (the newest numbered file).
latest_dump() { ls -t "$tmp"/callgrind.out."$server_pid".* 2>/dev/null | head -n 1; }

# Per function, self instructions per call (paths shortened), from a dump:
# "count<TAB>name<TAB>object<TAB>whose code".
self_costs() {
  callgrind_annotate --auto=no --inclusive=no --threshold=100 "$1" 2>/dev/null |
    awk -v n="$2" -v module="$(basename "$MODULE")" '
      /PROGRAM TOTALS/ { v = $1; gsub(/,/, "", v); total = v; next }
      /^ *[0-9,]+ +\(/ {
        v = $1; gsub(/,/, "", v)
        # The frames outside processCommand show the whole total: not a cost of their own.
        if (v == total) next
        obj = ""; if (match($0, /\[[^]]*\]$/)) obj = substr($0, RSTART + 1, RLENGTH - 2)
        name = $0; sub(/^ *[0-9,]+ +\([^)]*\) +/, "", name); sub(/ \[.*$/, "", name)
        # Whose code: the module, Redis module API, the allocator, or the rest of the server.
        if (name ~ /redis_ctr|redis_module/ || obj == module || obj ~ ("/" module "$")) cat = "module code"
        else if (obj ~ /jemalloc/ || name ~ /:(zmalloc|zfree|zrealloc|ztrymalloc|zcalloc)/) cat = "allocator"
        else if (name ~ /:(RM_|module|RedisModule)/) cat = "module API"
        else cat = "server"
        # file:function -> the function (for module code: the file its inlined code came
        # from, without directories, then the function without the crate name).
        if (name ~ /redis_ctr|redis_module/) { sub(/^[^:]*\//, "", name); gsub(/redis_ctr::/, "", name) }
        else sub(/^[^:]*:/, "", name)
        sub(/^.*\//, "", obj)
        printf "%.1f\t%s\t%s\t%s\n", v / n, name, obj, cat
      }'
}

start_server
log "callgrind: redis-server on 127.0.0.1:$port (pid $server_pid), $COUNT requests per command, options: $OPTS"
summary=()
i=0
for cmd in "${COMMANDS[@]}"; do
  i=$((i + 1))
  [ "$WARMUP" -gt 0 ] && bench_run "$WARMUP" "$cmd"
  callgrind_control -z "$server_pid" >/dev/null
  bench_run "$COUNT" "$cmd"
  callgrind_control -d "cmd$i" "$server_pid" >/dev/null
  dump=$(latest_dump)
  [ -n "$dump" ] || die "no callgrind dump for $cmd"
  if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp "$dump" "$KEEP/cmd$i.callgrind"; fi
  self_costs "$dump" "$COUNT" >"$tmp/self$i"
  in_call=$(callgrind_annotate --auto=no --inclusive=yes --threshold=100 "$dump" 2>/dev/null |
    awk -v n="$COUNT" '$0 ~ /\?\?\?:call \[/ { v = $1; gsub(/,/, "", v); printf "%.0f", v / n }')
  summary+=("$(awk -F'\t' -v cmd="$cmd" -v call="${in_call:-?}" '
    { t += $1; c[$4] += $1 }
    END { printf "| `%s` | %.0f | %s | %.0f | %.0f | %.0f | %.0f |", cmd, t, call, c["module code"], c["module API"], c["allocator"], c["server"] }' "$tmp/self$i")")
done
stop_server

echo "## Instructions per call (callgrind; redis-benchmark $OPTS, 50 clients, $COUNT requests per command)"
echo
echo "Counted inside processCommand (the whole handling of a parsed request: lookup, ACL, the"
echo "command, its reply, its propagation). \`call\` is the command with its reply and"
echo "propagation; the last four columns split the total by whose code ran (self cost)."
echo
echo "| command | total | in \`call\` | module code | module API | allocator | rest of the server |"
echo "|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${summary[@]}"
i=0
for cmd in "${COMMANDS[@]}"; do
  i=$((i + 1))
  echo
  echo "### \`$cmd\`: the $TOP functions with the largest self cost, instructions per call"
  echo
  echo "| function | object | instructions |"
  echo "|---|---|---:|"
  sort -t$'\t' -k1,1 -gr "$tmp/self$i" | head -n "$TOP" |
    awk -F'\t' '{ printf "| `%s` | %s | %s |\n", $2, $3, $1 }'
done
