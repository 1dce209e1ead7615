#!/usr/bin/env bash
# Spread counter benchmarks on a local 3-master cluster started for the run (results are
# recorded in docs/BENCHMARKS.md, "Spread counters"), measured side by side in one run:
#   1. read latency (p50/p99, redis-benchmark --csv) of CTR.GET on a spread counter's home with
#      3, 16 and 64 holders against a plain counter, and with ctr.gather-cache-ms 100;
#   2. write load of one hot counter: WRITES adds spread over 16 holders, each holder written by
#      clients connected to the master serving it, against the same adds on one key: commands
#      and server time per node from INFO commandstats;
#   3. hot reads of one 16-holder counter for HOT_SECONDS per row, on its home master and on a
#      replica of it (clients sending READONLY), with and without ctr.gather-cache-ms:
#      reads/s, latency, and what the reads cost the cluster (gathers, the home master's
#      CTR.GET calls, gather answers the other masters sent);
#   4. bytes per holder (MEMORY USAGE);
#   5. exact reads (issue 24's table): one counter of 16 holders read by 1 and by 10 clients on
#      its home's master and on a replica of it, next to a plain counter in the same slot read
#      the same way, and with ctr.gather-cache-ms 100: reads/s, p50/p99/max, and the reads/s as
#      a share of the plain counter's; and once with ctr.read-links no (every request over the
#      cluster bus). `ONLY=reads` runs just this table (REDIS_SERVER picks the
#      server: run it once per server of the matrix).
#
# Usage (from the repository root, after `make build-tests`, which builds the module and the
# client examples): bash bench/spread.sh
# Environment: CTR_MODULE (module path), READS (default 20000 per read row), CLIENTS (default
# 10, for the reads), WRITES (default 320000), HOT_SECONDS (default 3), ONLY (reads: the exact
# reads table alone), REDIS_SERVER (server binary, as for bench/lib.sh).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
READS=${READS:-20000}
CLIENTS=${CLIENTS:-10}
WRITES=${WRITES:-320000}
HOT_SECONDS=${HOT_SECONDS:-3}
ONLY=${ONLY:-}
READ_BENCH=$PWD/target/release/examples/read_bench
[ -f "$MODULE" ] || { echo "module not found at $MODULE (run make build-tests)" >&2; exit 1; }
[ -x "$READ_BENCH" ] || { echo "$READ_BENCH missing (run make build-tests)" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. bench/lib.sh

export CTR_MODULE=$MODULE
start_cluster

# latency LABEL PORT KEY: one CSV row of redis-benchmark for CTR.GET KEY.
latency() {
  local row
  row=$(redis-benchmark -h 127.0.0.1 -p "$2" -c "$CLIENTS" -n "$READS" --csv CTR.GET "$3" | tail -n 1)
  # "test","rps","avg","min","p50","p95","p99","max"
  echo "$row" | awk -F'"' -v label="$1" '{ printf "| %s | %s | %s | %s |\n", label, $4, $10, $14 }'
}

log "cluster on ports ${ports[*]}; reads $READS per row, writes $WRITES"
if [ "$ONLY" != reads ]; then
echo "## Read latency (CTR.GET, $CLIENTS clients, ms)"
echo
echo "| counter | requests/s | p50 | p99 |"
echo "|---|---|---|---|"
cli "${ports[0]}" -c CTR.ADD plain 1 >/dev/null
latency "plain counter" "$(owner plain)" plain
for n in 3 16 64; do
  cli "${ports[0]}" -c CTR.SPREAD "read$n" "$n" >/dev/null
  latency "spread, $n holders" "$(owner "read$n")" "read$n"
done
home=$(owner read64)
cli "$home" CONFIG SET ctr.gather-cache-ms 100 >/dev/null
latency "spread, 64 holders, gather-cache-ms 100" "$home" read64
cli "$home" CONFIG SET ctr.gather-cache-ms 0 >/dev/null
echo

# Write load. commandstats: ctr.add calls and usec_per_call per node.
reset_stats() { for p in "${ports[@]}"; do cli "$p" CONFIG RESETSTAT >/dev/null; done; }
node_stats() {
  local p
  for p in "${ports[@]}"; do
    cli "$p" INFO commandstats | tr -d '\r' |
      awk -F'[:,=]' -v port="$p" '/^cmdstat_ctr.add:/ { printf "| %s | %s | %s |\n", port, $3, $7 }'
  done
}
echo "## Write load of one hot counter ($WRITES adds, pipeline 16)"
echo
mapfile -t holders < <(cli "${ports[0]}" -c CTR.SPREAD hot 16)
reset_stats
per=$((WRITES / 16))
for h in "${holders[@]}"; do
  redis-benchmark -h 127.0.0.1 -p "$(owner "$h")" -c 2 -P 16 -n "$per" -q CTR.ADD "$h" 1 >/dev/null &
done
wait
total=$(cli "$(owner hot)" CTR.GET hot)
[ "$total" = "$((per * 16))" ] || die "spread total $total, expected $((per * 16))"
echo "Spread over 16 holders (each holder's adds sent to its own master; total read back: $total):"
echo
echo "| node | ctr.add calls | usec per call |"
echo "|---|---|---|"
node_stats
echo
reset_stats
redis-benchmark -h 127.0.0.1 -p "$(owner onekey)" -c 32 -P 16 -n "$WRITES" -q CTR.ADD onekey 1 >/dev/null
echo "The same adds on one key:"
echo
echo "| node | ctr.add calls | usec per call |"
echo "|---|---|---|"
node_stats
echo

fi

# Hot reads. info_field PORT SECTION FIELD: one field of INFO; sum_field SECTION FIELD PORT...:
# its sum over nodes; cpu_ms PORT...: the nodes' CPU time (user + system) so far, in ms.
info_field() { cli "$1" INFO "$2" | tr -d '\r' | sed -n "s/^$3://p"; }
sum_field() {
  local p sum=0
  for p in "${@:3}"; do sum=$((sum + $(info_field "$p" "$1" "$2"))); done
  echo "$sum"
}
cpu_ms() {
  local p
  for p in "$@"; do cli "$p" INFO cpu; done | tr -d '\r' |
    awk -F: '/^used_cpu_(user|sys):/ { ms += $2 * 1000 } END { printf "%d", ms }'
}
[ "$ONLY" != reads ] || cli "${ports[0]}" -c CTR.SPREAD read16 16 >/dev/null
home=$(owner read16)
others=()
for p in "${ports[@]}"; do [ "$p" = "$home" ] || others+=("$p"); done
replica_port=$((home + 1))
while port_busy "$replica_port" || port_busy "$((replica_port + 10000))"; do replica_port=$((replica_port + 1)); done
sh docker/cluster.sh replica "$replica_port" "$home" >/dev/null || { tail -n 20 "$CLUSTER_DIR/$replica_port/redis.log" >&2; die "no replica"; }
# hot_row LABEL PORT CACHE_MS [readonly]: one row of reads of read16 through PORT.
hot_row() {
  local label=$1 at=$2 cache=$3 mode=${4:-} out s0 h0 o0 reads rps p50 p99 errors
  cli "$home" CONFIG SET ctr.gather-cache-ms "$cache" >/dev/null
  cli "$replica_port" CONFIG SET ctr.gather-cache-ms "$cache" >/dev/null
  s0=$(sum_field ctr ctr_gather_requests_served "${others[@]}")
  h0=$(cpu_ms "$home")
  o0=$(cpu_ms "${others[@]}")
  # shellcheck disable=SC2086
  out=$("$READ_BENCH" "$at" read16 "$CLIENTS" "$HOT_SECONDS" $mode)
  read -r reads rps p50 p99 errors _ <<<"$out"
  echo "| $label | $reads | $rps | $p50 | $p99 | $errors | $(($(cpu_ms "$home") - h0)) | $(($(cpu_ms "${others[@]}") - o0)) | $(($(sum_field ctr ctr_gather_requests_served "${others[@]}") - s0)) |"
}
# exact_row LABEL PORT KEY READERS CACHE_MS [readonly]: one row of the exact reads table (the
# plain counter's reads/s, $plain_rps, must be set for the share).
exact_row() {
  local label=$1 at=$2 key=$3 readers=$4 cache=$5 mode=${6:-} out reads rps p50 p99 errors max share
  cli "$home" CONFIG SET ctr.gather-cache-ms "$cache" >/dev/null
  cli "$replica_port" CONFIG SET ctr.gather-cache-ms "$cache" >/dev/null
  # shellcheck disable=SC2086
  out=$("$READ_BENCH" "$at" "$key" "$readers" "$HOT_SECONDS" $mode)
  read -r reads rps p50 p99 errors max <<<"$out"
  [ "$errors" = 0 ] || die "$label: $errors reads failed"
  [ -n "${plain_rps:-}" ] || plain_rps=$rps
  share=$(awk -v a="$rps" -v b="$plain_rps" 'BEGIN { printf "%.0f%%", 100 * a / b }')
  echo "| $server_name | $label | $readers | $rps | $p50 | $p99 | $max | $share |"
}
# The plain counter sits in the home's slot: on the same master and replica.
cli "$home" CTR.ADD "{read16}plain" 1 >/dev/null
server_name=$("$(command -v "${REDIS_SERVER:-redis-server}")" --version | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^v=/) { sub("v=", "", $i); v = $i } } END { print ($1 == "Valkey" ? "Valkey " : "Redis ") v }')
echo "## Exact reads of a spread counter (16 holders on 3 masters, $HOT_SECONDS s per row, module at $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'))"
echo
echo "| server | read | readers | reads/s | p50 ms | p99 ms | max ms | share of the plain counter's reads/s |"
echo "|---|---|---|---|---|---|---|---|"
for where in master replica; do
  if [ "$where" = master ]; then at=$home mode=""; else at=$replica_port mode=readonly; fi
  plain_rps=""
  exact_row "plain counter, $where" "$at" "{read16}plain" "$CLIENTS" 0 $mode
  exact_row "spread, $where" "$at" read16 1 0 $mode
  exact_row "spread, $where" "$at" read16 "$CLIENTS" 0 $mode
  exact_row "spread, $where, gather-cache-ms 100" "$at" read16 "$CLIENTS" 100 $mode
  # The same reads with every request over the cluster bus (no read links).
  cli "$at" CONFIG SET ctr.read-links no >/dev/null
  exact_row "spread, $where, read-links no (the bus)" "$at" read16 "$CLIENTS" 0 $mode
  cli "$at" CONFIG SET ctr.read-links yes >/dev/null
done
cli "$home" CONFIG SET ctr.gather-cache-ms 0 >/dev/null
cli "$replica_port" CONFIG SET ctr.gather-cache-ms 0 >/dev/null
echo
[ "$ONLY" != reads ] || exit 0

echo "## Hot reads of one counter (16 holders, $CLIENTS clients, $HOT_SECONDS s per row)"
echo
echo "| reads served by | reads | reads/s | p50 ms | p99 ms | failed reads | home master CPU ms | other masters CPU ms | gather requests answered by the other masters |"
echo "|---|---|---|---|---|---|---|---|---|"
hot_row "home master, no cache" "$home" 0
hot_row "home master, gather-cache-ms 100" "$home" 100
hot_row "replica of the home master (READONLY), no cache" "$replica_port" 0 readonly
hot_row "replica of the home master (READONLY), gather-cache-ms 100" "$replica_port" 100 readonly
cli "$home" CONFIG SET ctr.gather-cache-ms 0 >/dev/null
echo

echo "## Bytes"
echo
h1=${holders[1]}
echo "- a written holder: MEMORY USAGE $(cli "$(owner "$h1")" MEMORY USAGE "$h1") bytes (an ordinary counter)"
cli "${ports[0]}" -c CTR.ADD solo 1 >/dev/null
for n in 16 64; do
  cli "${ports[0]}" -c CTR.ADD "mem$n" 1 >/dev/null
  cli "${ports[0]}" -c CTR.SPREAD "mem$n" "$n" >/dev/null
  echo "- a home of $n holders: MEMORY USAGE $(cli "$(owner "mem$n")" MEMORY USAGE "mem$n") bytes (a plain counter: $(cli "$(owner solo)" MEMORY USAGE solo))"
done
