# Shared by the bench/ scripts (sourced, not run): logging, and the redis-server that a script
# starts on a free loopback port and always stops (SHUTDOWN NOSAVE, then its own pid only).
# Sourcing creates a temp dir ($tmp, removed on exit) and installs the EXIT/INT/TERM traps.
# The caller sets MODULE (the module to load), and optionally MODULE_ARGS (its load arguments),
# before calling start_server. REDIS_SERVER picks the server binary (default redis-server; the
# test matrix's servers work too, e.g. target/servers/redis-8.0/bin/redis-server).
# shellcheck shell=bash

log() { printf '%s\n' "$*" >&2; }
die() {
  log "bench: $*"
  exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ctr-bench.XXXXXX")
server_pid=""
port=""

stop_server() {
  [ -n "$server_pid" ] || return 0
  if kill -0 "$server_pid" 2>/dev/null; then
    redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    local _
    for _ in $(seq 50); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    # Still there after 5 s: end it by its id (it is the process this script started).
    if kill -0 "$server_pid" 2>/dev/null; then kill "$server_pid" 2>/dev/null || true; fi
  fi
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

cleanup() {
  local rc=$?
  stop_server
  if [ "$rc" -ne 0 ] && [ -s "$tmp/redis.log" ]; then
    log "--- last lines of the server log ---"
    tail -n 15 "$tmp/redis.log" >&2 || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rcli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }

# Figures over repetitions: the median of space-separated numbers; the median over the
# repetitions of (run of $1) / (run of $2) in the same repetition, i.e. seconds apart; a ratio.
median() { tr ' ' '\n' <<<"$1" | awk 'NF' | sort -g | awk '{ v[NR] = $1 }
  END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
paired() {
  awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); split(b, y, " "); m = 0
    for (k = 1; k <= n; k++) if (y[k] > 0) r[++m] = x[k] / y[k]
    for (p = 2; p <= m; p++) { v = r[p]; q = p - 1; while (q > 0 && r[q] > v) { r[q + 1] = r[q]; q-- } r[q + 1] = v }
    if (m == 0) print "-"; else if (m % 2) printf "%.2f", r[(m + 1) / 2]; else printf "%.2f", (r[m / 2] + r[m / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

# True when something accepts connections on 127.0.0.1:$1.
port_busy() { (: <>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# SERVER_PREFIX: words run in front of the server (bench/callgrind.sh puts valgrind there; its
# output goes to $tmp/server.out); EXTRA_LOADS: more server arguments after the module's (e.g.
# "--loadmodule $tmp/floor.so", the module floor of build_module_floor); START_WAIT_TENTHS: how long one start may take, in tenths of
# a second (default 50).
start_server() {
  local attempt _ pid_seen
  local server
  server=$(command -v "${REDIS_SERVER:-redis-server}") || die "no server ${REDIS_SERVER:-redis-server}"
  for attempt in $(seq 10); do
    # Below the kernel's range for outgoing connections (32768 and up by default), where a
    # client socket of another process could take the port between the check and the bind.
    port=$((10000 + (RANDOM * 32768 + RANDOM) % 22000))
    port_busy "$port" && continue
    # shellcheck disable=SC2086
    ${SERVER_PREFIX:-} "$server" --port "$port" --bind 127.0.0.1 --protected-mode yes \
      --save '' --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" --daemonize no \
      --enable-debug-command local --loadmodule "$MODULE" ${MODULE_ARGS:-} ${EXTRA_LOADS:-} \
      >"$tmp/server.out" 2>&1 &
    server_pid=$!
    for _ in $(seq $((${START_WAIT_TENTHS:-50} * 2))); do
      kill -0 "$server_pid" 2>/dev/null || break
      # Only talk to the server once it is certainly ours (another one may hold the port).
      pid_seen=$(rcli INFO server 2>/dev/null | awk -F: '/^process_id:/ { print $2 + 0 }') || true
      [ "$pid_seen" = "$server_pid" ] && return 0
      sleep 0.05
    done
    log "bench: redis-server did not start on port $port (attempt $attempt)"
    stop_server
  done
  die "could not start redis-server with the module"
}

# Builds bench/module_floor/floor.c (the cheapest counter a module can have: FLOOR.INCR) into
# $tmp/floor.so and prints its path; prints nothing, with a note, when it cannot (no C compiler,
# or no redismodule.h: the header comes with the redis-module crate in cargo's registry).
build_module_floor() {
  local version header cc=${CC:-cc}
  command -v "$cc" >/dev/null 2>&1 || { log "bench: no C compiler ($cc): the module floor is skipped"; return 0; }
  version=$(awk '/^name = "redis-module"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' "$repo/Cargo.lock")
  header=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -path "*/redis-module-$version/src/include/redismodule.h" 2>/dev/null | head -n 1)
  [ -n "$header" ] || { log "bench: no redismodule.h of redis-module $version in cargo's registry: the module floor is skipped"; return 0; }
  "$cc" -O2 -fPIC -shared -Wall -Wextra -I"$(dirname "$header")" -o "$tmp/floor.so" \
    "$repo/bench/module_floor/floor.c" >&2 || { log "bench: floor.c did not build: the module floor is skipped"; return 0; }
  printf '%s\n' "$tmp/floor.so"
}

# start_cluster: a 3-master cluster (docker/cluster.sh, $CTR_MODULE loaded) on free loopback
# ports, listed in $ports, stopped on exit. Then `cli PORT ARGS...` talks to a node and
# `owner KEY` prints the port of the master serving KEY.
start_cluster() {
  export CLUSTER_DIR=$tmp/cluster
  ports=()
  while [ "${#ports[@]}" -lt 3 ]; do
    # The node and its bus port (+10000) both below the outgoing-connection range (32768).
    p=$((10000 + (RANDOM * 32768 + RANDOM) % 12000))
    port_busy "$p" || port_busy "$((p + 10000))" || ports+=("$p")
  done
  trap 'rc=$?; stop_cluster; rm -rf "$tmp"; exit $rc' EXIT
  sh docker/cluster.sh start "${ports[@]}" >/dev/null
}
stop_cluster() { sh docker/cluster.sh stop >/dev/null 2>&1 || true; }

cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }

owner() {
  local p
  for p in "${ports[@]}"; do
    case "$(cli "$p" CTR.GET "$1")" in MOVED*) ;; *) echo "$p"; return ;; esac
  done
  die "no node serves $1"
}

# start_master_with_replica: a replica, then its master (in $port, the one talked to), the
# replica linked and stopped on exit (its port in $replica_port). lib.sh stops the last server
# started; this stops the replica.
start_master_with_replica() {
  start_server
  replica_port=$port
  replica_pid=$server_pid
  trap 'rc=$?; stop_replica; (exit "$rc"); cleanup' EXIT
  start_server
  cli "$replica_port" REPLICAOF 127.0.0.1 "$port" >/dev/null
  local _
  for _ in $(seq 200); do
    cli "$replica_port" INFO replication | grep -q 'master_link_status:up' && return 0
    sleep 0.05
  done
  die "the replica did not link to its master"
}
stop_replica() {
  [ -n "${replica_pid:-}" ] || return 0
  redis-cli -h 127.0.0.1 -p "$replica_port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$replica_pid" 2>/dev/null || true
}

# reset_stats: CONFIG RESETSTAT on every master of the cluster (start_cluster's ports).
reset_stats() { for p in "${ports[@]}"; do cli "$p" CONFIG RESETSTAT >/dev/null; done; }
# node_stats COMMAND: one row per node: COMMAND's calls (INFO commandstats, lowercase, e.g.
# ctr.add), their share of all nodes' calls, usec per call.
node_stats() {
  local p
  for p in "${ports[@]}"; do
    cli "$p" INFO commandstats | tr -d '\r' | awk -F'[:,=]' -v port="$p" -v cmd="cmdstat_$1" '
      $1 == cmd { calls = $3; usec = $7 }
      END { printf "%s %d %s\n", port, calls, usec }'
  done | awk '{ row[NR] = $0; total += $2 } END {
    for (i = 1; i <= NR; i++) { split(row[i], f, " ");
      printf "| %s | %d | %.0f%% | %s |\n", f[1], f[2], total ? f[2] * 100 / total : 0, f[3] } }'
}
# table_head COMMAND: the header of node_stats' table.
table_head() {
  echo "| node | $1 calls | share of calls | usec per call |"
  echo "|---|---|---|---|"
}
