#!/usr/bin/env bash
# redis-ctr benchmarks (`make bench`). Starts its own redis-server with the module on a free
# loopback port, runs every scenario of bench/scenarios.txt interleaved (for each repetition,
# every scenario once), measures memory per key, stops the server it started, and prints
# markdown tables on stdout (progress goes to stderr).
#
# Method (docs/BENCHMARKS.md): redis-benchmark, 50 clients, >= 3 interleaved runs of >= 3 s
# each; per scenario the median ops/s and the median usec_per_call (INFO commandstats, reset
# before every run), each as a ratio to the baseline (first line) of its group. The report also
# gives paired ratios (each run against the baseline run of the same repetition) and the CPU that
# other processes took during each run, to tell a real difference from a disturbed run.
#
# Environment:
#   BENCH_REPS=5        runs per scenario (interleaved; the method asks for at least 3)
#   BENCH_SECONDS=3     minimum length of one run, in seconds (the request count is calibrated
#                       per scenario with a 25% margin; a run that still comes out shorter is
#                       run again with more requests)
#   BENCH_CLIENTS=50    redis-benchmark connections
#   BENCH_MEM_KEYS=1000000  keys written per memory case (0: skip the memory section)
#   BENCH_ONLY=regex    run only the groups whose name matches (extended regex)
#   BENCH_QUICK=1       smoke check: 1 run of 0.5 s per scenario, 100000 keys per memory case
#                       (figures from a quick run do not satisfy the method)
#   BENCH_SCENARIOS     scenario file (default bench/scenarios.txt)
#   CTR_MODULE          module to load (default target/release/libredis_ctr.so; the Makefile
#                       exports it)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

if [ "${BENCH_QUICK:-0}" = 1 ]; then
  default_reps=1 default_seconds=0.5 default_keys=100000
else
  default_reps=5 default_seconds=3 default_keys=1000000
fi
REPS=${BENCH_REPS:-$default_reps}
SECONDS_PER_RUN=${BENCH_SECONDS:-$default_seconds}
CLIENTS=${BENCH_CLIENTS:-50}
MEM_KEYS=${BENCH_MEM_KEYS:-$default_keys}
ONLY=${BENCH_ONLY:-}
SCENARIO_FILE=${BENCH_SCENARIOS:-$here/scenarios.txt}
MODULE=${CTR_MODULE:-$repo/target/release/libredis_ctr.so}
MARGIN=1.25
# Memory target: bytes a cold counter may cost beyond a native integer key.
MEM_TARGET=40

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_number() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; }
if ! is_uint "$REPS" || [ "$REPS" -lt 1 ]; then die "BENCH_REPS must be a positive integer"; fi
is_number "$SECONDS_PER_RUN" || die "BENCH_SECONDS must be a number of seconds"
if ! is_uint "$CLIENTS" || [ "$CLIENTS" -lt 1 ]; then die "BENCH_CLIENTS must be a positive integer"; fi
is_uint "$MEM_KEYS" || die "BENCH_MEM_KEYS must be a non-negative integer"

for tool in "${REDIS_SERVER:-redis-server}" redis-cli redis-benchmark awk sort date mktemp; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (make deps installs redis-server and redis-tools)"
done
[ -f "$MODULE" ] || die "module not found: $MODULE (build it with make build)"
[ -f "$SCENARIO_FILE" ] || die "scenario file not found: $SCENARIO_FILE"


# --- scenarios ------------------------------------------------------------------------------

trim() {
  local s=$1
  s=${s#"${s%%[![:space:]]*}"}
  s=${s%"${s##*[![:space:]]}"}
  printf '%s' "$s"
}

SC_GROUP=() SC_NAME=() SC_STAT=() SC_OPTS=() SC_PROBE=() SC_SETUP=() SC_CMD=() SC_TARGET=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  case "$(trim "$line")" in '' | '#'*) continue ;; esac
  IFS='|' read -r f_group f_name f_stat f_opts f_probe f_setup f_cmd f_target f_extra <<<"$line"
  if [ -n "$(trim "${f_extra:-}")" ] || [ -z "$(trim "${f_cmd:-}")" ]; then
    die "$SCENARIO_FILE:$lineno: expected 7 or 8 fields separated by |"
  fi
  f_target=$(trim "${f_target:-}")
  [ -z "$f_target" ] || [ "$f_target" = - ] || is_number "$f_target" ||
    die "$SCENARIO_FILE:$lineno: the target must be a number (minimum ops/s ratio)"
  f_group=$(trim "$f_group")
  if [ -n "$ONLY" ] && ! [[ $f_group =~ $ONLY ]]; then continue; fi
  SC_GROUP+=("$f_group")
  SC_NAME+=("$(trim "$f_name")")
  SC_STAT+=("$(trim "$f_stat" | tr '[:upper:]' '[:lower:]')")
  SC_OPTS+=("$(trim "$f_opts")")
  SC_PROBE+=("$(trim "$f_probe")")
  SC_SETUP+=("$(trim "$f_setup")")
  SC_CMD+=("$(trim "$f_cmd")")
  SC_TARGET+=("${f_target:--}")
done <"$SCENARIO_FILE"
count=${#SC_GROUP[@]}
[ "$count" -gt 0 ] || [ "$MEM_KEYS" -gt 0 ] || die "no scenario selected (BENCH_ONLY=$ONLY)"

# Lua scripts: bench/lua/NAME.lua is referred to as @NAME.
declare -A SHA=()
load_scripts() {
  local f name sha
  for f in "$here"/lua/*.lua; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .lua)
    sha=$(rcli -x SCRIPT LOAD <"$f")
    [[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD $name.lua failed: $sha"
    SHA[$name]=$sha
  done
}

# Expands @NAME words into script SHAs; prints one word per line.
expand_words() {
  local w
  for w in $1; do
    if [[ $w == @* ]]; then
      [ -n "${SHA[${w#@}]:-}" ] || die "unknown script $w (no bench/lua/${w#@}.lua)"
      printf '%s\n' "${SHA[${w#@}]}"
    else
      printf '%s\n' "$w"
    fi
  done
}

# The Lua scripts must do what they claim before their figures mean anything.
check_scripts() {
  local got want
  got=$(
    rcli --no-raw EVALSHA "${SHA[idem_add]}" 2 probe:tok1 probe:n 5 60
    rcli --no-raw EVALSHA "${SHA[idem_add]}" 2 probe:tok1 probe:n 5 60
    rcli --no-raw EVALSHA "${SHA[idem_add]}" 2 probe:tok2 probe:n 5 60
    rcli SET probe:s 3 >/dev/null
    rcli --no-raw EVALSHA "${SHA[floor_decr]}" 1 probe:s 2 0
    rcli --no-raw EVALSHA "${SHA[floor_decr]}" 1 probe:s 2 0
    rcli SET probe:s2 3 >/dev/null
    rcli --no-raw EVALSHA "${SHA[floor_decr_ledger]}" 2 probe:s2 probe:o1 2 0 60
    rcli --no-raw EVALSHA "${SHA[floor_decr_ledger]}" 2 probe:s2 probe:o1 2 0 60
    rcli --no-raw EVALSHA "${SHA[floor_decr_ledger]}" 2 probe:s2 probe:o2 2 0 60
    rcli --no-raw EVALSHA "${SHA[floor_decr_ledger]}" 2 probe:s2 probe:o2 2 0 60
    rcli --no-raw GET probe:s2
    # The first add of a window sets its TTL; a later one leaves the TTL it finds.
    rcli --no-raw EVALSHA "${SHA[fixed_window]}" 1 probe:w 2 60
    rcli --no-raw EVAL "return redis.call('TTL', KEYS[1]) > 30 and 1 or 0" 1 probe:w
    rcli EXPIRE probe:w 30 >/dev/null
    rcli --no-raw EVALSHA "${SHA[fixed_window]}" 1 probe:w 2 60
    rcli --no-raw EVAL "return redis.call('TTL', KEYS[1]) <= 30 and 1 or 0" 1 probe:w
  )
  want=$(printf '%s\n' '(integer) 5' '(integer) 5' '(integer) 10' '(integer) 1' '(nil)' \
    '(integer) 1' '(integer) 1' '(nil)' '(nil)' '"1"' \
    '(integer) 2' '(integer) 1' '(integer) 4' '(integer) 1')
  [ "$got" = "$want" ] || die "a Lua script misbehaves: got [$got], want [$want]"
}

# --- measuring ------------------------------------------------------------------------------

# CPU use, in clock ticks, to tell how much of the machine other processes took during a run
# (the machine is shared; a run disturbed by someone's build shows up in the report).
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
machine_busy() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat 2>/dev/null || echo 0; }
proc_cpu() { # utime + stime (+ cutime + cstime of reaped children when $2 = children)
  awk -v c="${2:-}" '{ sub(/^.*\) /, ""); t = $12 + $13; if (c == "children") t += $14 + $15; print t }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# Sets RUN_OPS, RUN_USEC, RUN_SECS and RUN_OTHER (cores used by other processes) for one run of
# scenario $1 with $2 requests.
run_once() {
  local i=$1 n=$2 stat=${SC_STAT[$1]} setup_cmd line calls usec failed
  local busy0 server0 self0 t0 busy1 server1 self1 t1
  local -a opts cmd setup
  if [ "${SC_SETUP[$i]}" != - ]; then
    while IFS= read -r -d ';' setup_cmd; do
      [ -n "$(trim "$setup_cmd")" ] || continue
      mapfile -t setup < <(expand_words "$setup_cmd")
      line=$(rcli --no-raw "${setup[@]}")
      [[ $line != "(error)"* ]] || die "${SC_GROUP[$i]} / ${SC_NAME[$i]}: setup failed: $line"
    done <<<"${SC_SETUP[$i]};"
  fi
  read -r -a opts <<<"${SC_OPTS[$i]}"
  [ "${SC_OPTS[$i]}" != - ] || opts=()
  mapfile -t cmd < <(expand_words "${SC_CMD[$i]}")
  rcli CONFIG RESETSTAT >/dev/null
  busy0=$(machine_busy) server0=$(proc_cpu "$server_pid") self0=$(proc_cpu $$ children) t0=$(date +%s%N)
  if ! redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$n" -q --csv "${opts[@]}" \
    "${cmd[@]}" >"$tmp/bench.out" 2>"$tmp/bench.err"; then
    cat "$tmp/bench.err" >&2
    die "${SC_GROUP[$i]} / ${SC_NAME[$i]}: redis-benchmark failed"
  fi
  t1=$(date +%s%N) busy1=$(machine_busy) server1=$(proc_cpu "$server_pid") self1=$(proc_cpu $$ children)
  RUN_OTHER=$(awk -v b="$((busy1 - busy0))" -v s="$((server1 - server0))" -v c="$((self1 - self0))" \
    -v hz="$CLK_TCK" -v ns="$((t1 - t0))" 'BEGIN { o = (b - s - c) / hz / (ns / 1e9); if (o < 0) o = 0; printf "%.2f", o }')
  # CSV: "test","rps",... ; the test name may hold commas, so count fields from the end.
  RUN_OPS=$(awk -F, 'NF >= 8 { v = $(NF - 6); gsub(/"/, "", v); if (v ~ /^[0-9.]+$/) r = v }
    END { print r }' "$tmp/bench.out")
  [ -n "$RUN_OPS" ] || die "${SC_GROUP[$i]} / ${SC_NAME[$i]}: no figure in redis-benchmark output: $(head -c 300 "$tmp/bench.out")"
  line=$(rcli INFO commandstats | tr -d '\r' | grep -F "cmdstat_${stat}:" || true)
  [ -n "$line" ] || die "${SC_GROUP[$i]} / ${SC_NAME[$i]}: no commandstats for $stat"
  calls=$(sed -E 's/.*[:,]calls=([0-9]+).*/\1/' <<<"$line")
  usec=$(sed -E 's/.*,usec=([0-9]+).*/\1/' <<<"$line")
  failed=$(awk -F'[:,=]' '{ for (k = 2; k < NF; k++) if ($k == "failed_calls" || $k == "rejected_calls") s += $(k + 1) }
    END { print s + 0 }' <<<"$line")
  if [ "$failed" -ne 0 ]; then
    die "${SC_GROUP[$i]} / ${SC_NAME[$i]}: $failed calls failed ($line): the scenario is broken; first reply: $(rcli --no-raw "${cmd[@]}")"
  fi
  [ "$calls" -ge "$n" ] || log "  warning: ${SC_NAME[$i]}: $calls calls of $stat for $n requests"
  RUN_USEC=$(awk -v u="$usec" -v c="$calls" 'BEGIN { printf "%.4f", u / c }')
  RUN_SECS=$(awk -v n="$n" -v r="$RUN_OPS" 'BEGIN { printf "%.2f", n / r }')
}

# Requests needed for a run of SECONDS_PER_RUN at $1 ops/s, with the margin.
requests_for() {
  awk -v r="$1" -v s="$SECONDS_PER_RUN" -v m="$MARGIN" 'BEGIN { n = int(r * s * m) + 1; if (n < 1000) n = 1000; print n }'
}

fmt_ops() { awk -v v="$1" 'BEGIN { if (v >= 1000) printf "%.1fk", v / 1000; else printf "%.0f", v }'; }
fmt_load() { awk -v v="$1" 'BEGIN { printf "%.2f", v }'; }
fmt_usec() { awk -v v="$1" 'BEGIN { printf "%.3f", v }'; }

# --- memory ---------------------------------------------------------------------------------

used_memory() { rcli INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }

# Waits until the main dictionary is not rehashing (and clients are gone), so that used_memory
# holds one bucket array only.
settle() {
  local _ stats
  for _ in $(seq 100); do
    stats=$(rcli DEBUG HTSTATS 0 2>&1) || true
    if [[ $stats == *ERR* ]]; then
      sleep 1 # DEBUG not allowed: a fixed wait instead
      break
    fi
    [[ $stats == *rehashing* ]] || break
    sleep 0.1
  done
  sleep 0.3
}

# RESP for `CMD k:0 delta` .. `CMD k:N-1 delta`.
resp_stream() {
  awk -v c="$1" -v d="$2" -v n="$3" 'BEGIN {
    for (i = 0; i < n; i++) {
      k = "k:" i
      printf "*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(c), c, length(k), k, length(d), d
    }
  }'
}

MEM_LABEL=() MEM_PER_KEY=() MEM_USAGE=() MEM_TYPE=()
memory_case() {
  local label=$1 command=$2 delta=$3 before after out
  log "memory: $label"
  rcli FLUSHALL >/dev/null
  settle
  before=$(used_memory)
  out=$(resp_stream "$command" "$delta" "$MEM_KEYS" | rcli --pipe 2>&1)
  [[ $out == *"errors: 0, replies: $MEM_KEYS"* ]] || die "redis-cli --pipe for $label: $out"
  [ "$(rcli DBSIZE)" = "$MEM_KEYS" ] || die "memory case $label: DBSIZE is not $MEM_KEYS"
  settle
  after=$(used_memory)
  MEM_LABEL+=("$label")
  MEM_PER_KEY+=("$(awk -v a="$after" -v b="$before" -v n="$MEM_KEYS" 'BEGIN { printf "%.1f", (a - b) / n }')")
  MEM_USAGE+=("$(rcli MEMORY USAGE k:1)")
  MEM_TYPE+=("$(rcli TYPE k:1) / $(rcli OBJECT ENCODING k:1 2>/dev/null || echo -)")
}

# --- run ------------------------------------------------------------------------------------

started=$(date +%s)
# The module floor (bench/module_floor/floor.c) loaded beside the module, for the `api P16`
# group: what the cheapest possible module write costs on this server.
floor_so=$(build_module_floor)
[ -z "$floor_so" ] || EXTRA_LOADS="--loadmodule $floor_so"
start_server
version=$(rcli INFO server | tr -d '\r' | awk -F: '$1 == "redis_version" { print $2 }')
log "bench: redis-server $version on 127.0.0.1:$port (pid $server_pid); $REPS run(s) of >= ${SECONDS_PER_RUN}s per scenario, $CLIENTS clients"
load_scripts
for ((i = 0; i < count; i++)); do
  for w in ${SC_PROBE[$i]} ${SC_SETUP[$i]//;/ } ${SC_CMD[$i]}; do
    if [[ $w == @* ]] && [ -z "${SHA[${w#@}]:-}" ]; then
      die "${SC_GROUP[$i]} / ${SC_NAME[$i]}: unknown script $w (no bench/lua/${w#@}.lua)"
    fi
  done
done
check_scripts

# Probe each group once; a group with a failing probe is skipped whole.
declare -A SKIP=()
NOTES=()
for ((i = 0; i < count; i++)); do
  g=${SC_GROUP[$i]}
  [ "${SC_PROBE[$i]}" != - ] || continue
  [ -z "${SKIP[$g]:-}" ] || continue
  mapfile -t probe < <(expand_words "${SC_PROBE[$i]}")
  reply=$(rcli --no-raw "${probe[@]}" 2>&1 | head -n 1)
  if [[ $reply == "(error)"* ]]; then
    SKIP[$g]=1
    NOTES+=("group \`$g\` skipped: \`${SC_PROBE[$i]}\` replies \`${reply#(error) }\` (not built yet)")
    log "bench: ${NOTES[-1]}"
  fi
done
rcli FLUSHALL >/dev/null

# Calibration (also the warm-up: random keys exist before the measured runs).
declare -a REQS=() OPS=() USEC=() SECS=() OTHER=()
for ((i = 0; i < count; i++)); do
  [ -z "${SKIP[${SC_GROUP[$i]}]:-}" ] || continue
  run_once "$i" 5000
  warm=$(awk -v r="$RUN_OPS" -v s="$SECONDS_PER_RUN" 'BEGIN { if (s > 0.5) s = 0.5; n = int(r * s); if (n < 5000) n = 5000; print n }')
  run_once "$i" "$warm"
  REQS[i]=$(requests_for "$RUN_OPS")
  OPS[i]="" USEC[i]="" SECS[i]="" OTHER[i]=""
  log "calibrated ${SC_GROUP[$i]} / ${SC_NAME[$i]}: $(fmt_ops "$RUN_OPS") ops/s -> ${REQS[$i]} requests per run"
done

for ((rep = 1; rep <= REPS; rep++)); do
  for ((i = 0; i < count; i++)); do
    [ -z "${SKIP[${SC_GROUP[$i]}]:-}" ] || continue
    for attempt in 1 2 3; do
      run_once "$i" "${REQS[$i]}"
      log "run $rep/$REPS ${SC_GROUP[$i]} / ${SC_NAME[$i]}: $(fmt_ops "$RUN_OPS") ops/s, $(fmt_usec "$RUN_USEC") usec/call, ${RUN_SECS}s, other load ${RUN_OTHER} cores"
      # Came out short (the machine got faster than at calibration): more requests, run again.
      awk -v s="$RUN_SECS" -v t="$SECONDS_PER_RUN" 'BEGIN { exit !(s < t) }' || break
      REQS[i]=$(requests_for "$RUN_OPS")
      [ "$attempt" = 3 ] || log "  shorter than ${SECONDS_PER_RUN}s: repeating with ${REQS[$i]} requests"
    done
    OPS[i]="${OPS[$i]} $RUN_OPS"
    USEC[i]="${USEC[$i]} $RUN_USEC"
    SECS[i]="${SECS[$i]} $RUN_SECS"
    OTHER[i]="${OTHER[$i]} $RUN_OTHER"
  done
done

if [ "$MEM_KEYS" -gt 0 ]; then
  memory_case "native string, INCRBY k:N 1 (shared integer)" INCRBY 1
  memory_case "CTR, CTR.ADD k:N 1" CTR.ADD 1
  memory_case "native string, INCRBY k:N 1000000" INCRBY 1000000
  memory_case "CTR, CTR.ADD k:N 1000000" CTR.ADD 1000000
  memory_case "CTR, CTR.ADD k:N 4611686018427387904 (2^62: too large to inline)" CTR.ADD 4611686018427387904
  rcli FLUSHALL >/dev/null
fi

stop_server
elapsed=$(($(date +%s) - started))

# --- report ---------------------------------------------------------------------------------

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git -C "$repo" status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null)" ]; then
  commit="$commit (with uncommitted changes)"
fi
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
echo "## redis-ctr benchmark"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M UTC'), Redis $version, $(nproc 2>/dev/null || echo '?') CPU(s)${cpu:+ ($cpu)}, loopback; module at commit $commit"
echo "- $REPS interleaved run(s) per scenario, each >= ${SECONDS_PER_RUN}s, $CLIENTS clients; medians; wall time ${elapsed}s"
if [ "$REPS" -lt 3 ] || awk -v s="$SECONDS_PER_RUN" 'BEGIN { exit !(s < 3) }'; then
  echo "- **smoke run**: fewer than 3 runs or runs shorter than 3 s; these figures do not satisfy the method"
fi
all_other=$(for ((i = 0; i < count; i++)); do printf '%s ' "${OTHER[$i]:-}"; done)
if [ -n "$(trim "$all_other")" ]; then
  echo "- CPU used by other processes on this machine during the measured runs: median $(fmt_load "$(median "$all_other")") cores, max $(tr ' ' '\n' <<<"$all_other" | awk 'NF' | sort -g | tail -n 1) cores (of $(nproc 2>/dev/null || echo '?'))"
fi
for note in "${NOTES[@]}"; do echo "- $note"; done

if [ "$count" -gt 0 ]; then
  echo
  echo "### Throughput and server time per call"
  echo
  echo "Ratios are to the group's baseline (its first line): ops/s ratio above 1 = faster, usec ratio above 1 = more server time. \"medians\": ratio of the medians (the headline figure); \"paired\": median of the per-repetition ratios (each run against the baseline run of the same repetition, seconds apart), a check against drifting load. The target is judged on the ratio of medians."
  echo
  echo "| group | scenario | command | ops/s | ops/s ratio (medians) | ops/s ratio (paired) | usec/call | usec ratio (medians) | usec ratio (paired) | target (ops/s ratio) |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---:|---|"
  declare -A BASE_OPS=() BASE_USEC=() BASE_I=()
  for ((i = 0; i < count; i++)); do
    g=${SC_GROUP[$i]}
    [ -z "${SKIP[$g]:-}" ] || continue
    ops=$(median "${OPS[$i]}")
    usec=$(median "${USEC[$i]}")
    name=${SC_NAME[$i]}
    if [ -z "${BASE_OPS[$g]:-}" ]; then
      BASE_OPS[$g]=$ops BASE_USEC[$g]=$usec BASE_I[$g]=$i
      name="$name (baseline)"
    fi
    r=$(ratio "$ops" "${BASE_OPS[$g]}")
    target=-
    if [ "${SC_TARGET[$i]}" != - ]; then
      if awk -v a="$ops" -v b="${BASE_OPS[$g]}" -v t="${SC_TARGET[$i]}" 'BEGIN { exit !(b > 0 && a / b >= t) }'; then
        target=">= ${SC_TARGET[$i]}: met"
      else
        target=">= ${SC_TARGET[$i]}: **not met**"
      fi
    fi
    b=${BASE_I[$g]}
    echo "| $g | $name | \`${SC_CMD[$i]}\` | $(fmt_ops "$ops") | $r | $(paired "${OPS[$i]}" "${OPS[$b]}") | $(fmt_usec "$usec") | $(ratio "$usec" "${BASE_USEC[$g]}") | $(paired "${USEC[$i]}" "${USEC[$b]}") | $target |"
  done
  echo
  echo "### Every run"
  echo
  echo "| group | scenario | requests per run | ops/s per run | usec/call per run | run length (s) | other processes (cores) |"
  echo "|---|---|---:|---|---|---|---|"
  for ((i = 0; i < count; i++)); do
    [ -z "${SKIP[${SC_GROUP[$i]}]:-}" ] || continue
    per_ops=$(for v in ${OPS[$i]}; do fmt_ops "$v"; printf ' '; done)
    per_usec=$(for v in ${USEC[$i]}; do fmt_usec "$v"; printf ' '; done)
    echo "| ${SC_GROUP[$i]} | ${SC_NAME[$i]} | ${REQS[$i]} | ${per_ops% } | ${per_usec% } | $(trim "${SECS[$i]}") | $(trim "${OTHER[$i]}") |"
  done
fi

if [ "${#MEM_LABEL[@]}" -gt 0 ]; then
  echo
  echo "### Memory per key"
  echo
  echo "\`used_memory\` delta over $MEM_KEYS keys \`k:0\`..\`k:$((MEM_KEYS - 1))\` written with \`redis-cli --pipe\` into an empty server, after rehashing finished (includes the keyspace bucket array). \`MEMORY USAGE\` is of the key \`k:1\` (it leaves the bucket array out)."
  echo
  echo "| keys | bytes per key | MEMORY USAGE k:1 | TYPE / encoding |"
  echo "|---|---:|---:|---|"
  for ((m = 0; m < ${#MEM_LABEL[@]}; m++)); do
    echo "| ${MEM_LABEL[$m]} | ${MEM_PER_KEY[$m]} | ${MEM_USAGE[$m]} | ${MEM_TYPE[$m]} |"
  done
  echo
  small=$(awk -v a="${MEM_PER_KEY[1]}" -v b="${MEM_PER_KEY[0]}" 'BEGIN { printf "%+.1f", a - b }')
  large=$(awk -v a="${MEM_PER_KEY[3]}" -v b="${MEM_PER_KEY[2]}" 'BEGIN { printf "%+.1f", a - b }')
  echo "- CTR minus native, value 1: **$small B per key**; value 1000000: **$large B per key**"
  if awk -v d="$small" -v t="$MEM_TARGET" 'BEGIN { exit !(d <= t) }'; then met=met; else met="**not met**"; fi
  echo "- target: a cold counter costs at most $MEM_TARGET B more than a native integer key (value 1, a shared integer): $met"
fi
