#!/bin/sh
# A Redis Cluster of masters with the redis-ctr module loaded on every node.
#
#   cluster.sh start [PORT...]        start one master per port (default 7000 7001 7002) as a
#                                     daemon in $CLUSTER_DIR/PORT, join them into a cluster on
#                                     the first start, print how to connect     (make cluster);
#                                     with REPLICAS=N, N replicas per master on the ports after
#                                     the last master's (7003-7005 for N=1)
#                                     (make cluster CLUSTER_REPLICAS=1). When the cluster is not
#                                     ok within CLUSTER_WAIT_S (15) it says what is wrong and
#                                     stops the nodes this call started
#   cluster.sh stop                   stop the nodes `start` recorded in $CLUSTER_DIR (their pid
#                                     files), and nothing else                  (make cluster-stop)
#   cluster.sh node PORT DIR [opts]   one cluster node in the foreground        (docker compose)
#   cluster.sh create HOST:PORT...    join running nodes into a cluster of masters (no replicas)
#                                     and wait until it is ok  (used by start, and docker compose)
#   cluster.sh replica PORT MASTER    start a node on PORT (like start) and make it a replica of
#                                     the local master on port MASTER; waits until it is in sync
#
# Every node runs docker/server.sh with the same cluster options, locally and in Docker.
# Environment: CLUSTER_DIR (default data/cluster), REDIS_CLI (default redis-cli), REPLICAS
# (default 0), CLUSTER_WAIT_S (default 15), and CTR_MODULE, MODULE_ARGS, REDIS_SERVER as for
# server.sh.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
cli=${REDIS_CLI:-redis-cli}

# What makes a server a cluster node. The node timeout is short enough for a laptop cluster to
# notice a dead node quickly, long enough not to fail a node that is merely busy.
NODE_OPTS="--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000"

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

# info HOST PORT FIELD: a field of CLUSTER INFO (empty when the node does not answer).
info() {
  "$cli" -h "$1" -p "$2" CLUSTER INFO 2>/dev/null | tr -d '\r' | sed -n "s/^$3://p"
}

# wait_up HOST:PORT...: until every node answers PING (30 s at most).
wait_up() {
  for addr in "$@"; do
    i=0
    until [ "$("$cli" -h "${addr%:*}" -p "${addr##*:}" PING 2>/dev/null)" = PONG ]; do
      i=$((i + 1))
      [ "$i" -le 300 ] || die "no answer from $addr"
      sleep 0.1
    done
  done
}

# How long start and create wait for the cluster to be ok before they say why it is not.
wait_s=${CLUSTER_WAIT_S:-15}

# wait_ok HOST:PORT...: until every node says cluster_state:ok and knows at least all of them
# (a cluster may have more: replicas, a node that failed over); says why not after wait_s.
wait_ok() {
  deadline=$(($(date +%s) + wait_s))
  for addr in "$@"; do
    until [ "$(info "${addr%:*}" "${addr##*:}" cluster_state)" = ok ] &&
      [ "$(info "${addr%:*}" "${addr##*:}" cluster_known_nodes)" -ge "$#" ] 2>/dev/null; do
      if [ "$(date +%s)" -ge "$deadline" ]; then
        diagnose "$@"
        exit 1
      fi
      sleep 0.1
    done
  done
}

# diagnose HOST:PORT...: what each node says of the cluster, and the nodes it sees failing.
diagnose() {
  echo "cluster.sh: the cluster is not ok after $wait_s s:" >&2
  seen=""
  for addr in "$@"; do
    h=${addr%:*} p=${addr##*:}
    state=$(info "$h" "$p" cluster_state)
    if [ -z "$state" ]; then
      echo "  $addr: does not answer" >&2
      continue
    fi
    echo "  $addr: cluster_state $state, $(info "$h" "$p" cluster_slots_ok) of 16384 slots ok" \
      "($(info "$h" "$p" cluster_slots_pfail) pfail, $(info "$h" "$p" cluster_slots_fail) fail)," \
      "knows $(info "$h" "$p" cluster_known_nodes) nodes" >&2
    seen="$seen$("$cli" -h "$h" -p "$p" CLUSTER NODES 2>/dev/null | tr -d '\r')
"
  done
  # CLUSTER NODES: id addr flags master ping pong epoch link slots... Every answering node's
  # view: a node that one view knows only as noaddr (its port since taken by another server
  # that answered with another name) is named by the address another view still knows.
  echo "$seen" | awk 'NF > 7 {
      a = $2
      sub(/@.*/, "", a)
      if (a !~ /^:/) addr[$1] = a
    }
    ($3 ~ /fail/ || $8 == "disconnected") && !($1 in line) {
      order[++n] = $1
      role = ($3 ~ /master/) ? "master" : "replica"
      line[$1] = " is down (" $3 ", link " $8 ")" (NF > 8 ? ", its slots " $9 " uncovered" : "")
      kind[$1] = role
    }
    END {
      for (i = 1; i <= n; i++) {
        id = order[i]
        name = (id in addr) ? addr[id] : "node " id " (its address unknown)"
        print "  " kind[id] " " name line[id]
      }
    }' >&2
  echo "  a master that is down with no replica to take over leaves its slots uncovered: start" \
    "it again (cluster.sh start with its port), or repair the cluster by hand" \
    "(redis-cli --cluster check / fix)" >&2
}

create() {
  [ $# -gt 0 ] || die "create needs HOST:PORT of every node"
  wait_up "$@"
  known=$(info "${1%:*}" "${1##*:}" cluster_known_nodes)
  if [ "${known:-1}" -ge $# ]; then
    echo "the nodes already form a cluster"
  else
    "$cli" --cluster create "$@" --cluster-replicas 0 --cluster-yes
  fi
  wait_ok "$@"
}

node() {
  [ $# -ge 2 ] || die "usage: cluster.sh node PORT DIR [redis-server options...]"
  port=$1
  dir=$2
  shift 2
  # shellcheck disable=SC2086
  exec sh "$here/server.sh" "$port" "$dir" $NODE_OPTS "$@"
}

# running PID: the process exists and has not exited (an exited daemon stays a zombie until
# init reaps it, which can take a while).
running() {
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
  [ -n "$state" ] && [ "$state" != Z ]
}

# ours PID PORT: true when PID is running and is the server listening on PORT (Redis and Valkey
# set their process title to "<binary> <addr>:<port> [cluster]"; a server started through its
# dynamic loader, as the test matrix does, keeps its command line, where server.sh put
# "--port PORT"), so that a pid file left over from a crash never makes us signal an unrelated
# process.
ours() {
  [ -n "$1" ] && running "$1" &&
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qE -- ":$2 |--port $2 "
}

# The ports of the nodes this call started (stopped again when it fails).
started_here=""

# start_node PORT: one daemon node in $cluster_dir/PORT, unless ours already runs there.
start_node() {
  dir="$cluster_dir/$1"
  mkdir -p "$dir"
  if ours "$(cat "$dir/redis.pid" 2>/dev/null)" "$1"; then
    echo "node $1 already running (pid $(cat "$dir/redis.pid"))"
  else
    rm -f "$dir/redis.pid"
    started_here="$started_here $1"
    # shellcheck disable=SC2086
    sh "$here/server.sh" "$1" "$dir" $NODE_OPTS --bind 127.0.0.1 \
      --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
  fi
}

# On a failed start or replica: stop the nodes this call started (those already running
# before it are left as they were).
stop_started_on_failure() {
  status=$?
  if [ "$status" -ne 0 ] && [ -n "$started_here" ]; then
    echo "cluster.sh: stopping the nodes this call started:$started_here" >&2
    for port in $started_here; do stop_node "$port" >&2; done
  fi
  exit "$status"
}

# check_started PORT...: every node answers and is the server we started.
check_started() {
  addrs=""
  for port in "$@"; do addrs="$addrs 127.0.0.1:$port"; done
  # shellcheck disable=SC2086
  wait_up $addrs
  for port in "$@"; do
    ours "$(cat "$cluster_dir/$port/redis.pid" 2>/dev/null)" "$port" ||
      die "node $port did not start (see $cluster_dir/$port/redis.log)"
  done
}

start() {
  [ $# -gt 0 ] || set -- 7000 7001 7002
  mkdir -p "$cluster_dir"
  trap stop_started_on_failure EXIT
  for port in "$@"; do start_node "$port"; done
  check_started "$@"
  # shellcheck disable=SC2086
  create $addrs
  add_replicas "${REPLICAS:-0}" "$@"
  echo
  echo "redis-ctr cluster is up; connect with: redis-cli -c -p $1"
  roles "$1"
  echo "data and logs in $cluster_dir/PORT"
  echo "stop it with: make cluster-stop (or docker/cluster.sh stop)"
}

# add_replicas N MASTER_PORT...: N replicas of each master, on the ports after the last
# master's; one already in the cluster (a restart, a replica promoted by a failover) is kept
# as it is.
add_replicas() {
  n=$1
  shift
  last=0
  for port in "$@"; do [ "$port" -le "$last" ] || last=$port; done
  k=0
  while [ "$k" -lt "$n" ]; do
    for master in "$@"; do
      last=$((last + 1))
      start_node "$last"
      check_started "$last"
      if [ "$(info 127.0.0.1 "$last" cluster_known_nodes)" -gt 1 ] 2>/dev/null; then
        echo "node $last already in the cluster"
      else
        replicate "$last" "$master"
      fi
    done
    k=$((k + 1))
  done
  [ "$n" -eq 0 ] || { wait_up "127.0.0.1:$1"; wait_ok "127.0.0.1:$1"; }
}

# roles PORT: the masters and replicas as the node on PORT sees them.
roles() {
  "$cli" -p "$1" CLUSTER NODES 2>/dev/null | tr -d '\r' | awk '
    { sub(/@.*/, "", $2) }
    $3 ~ /master/ { m = m " " $2 }
    $3 ~ /slave/ { r = r " " $2 }
    END { print "masters:" m; if (r != "") print "replicas:" r }'
}

replica() {
  [ $# -eq 2 ] || die "usage: cluster.sh replica PORT MASTER_PORT"
  trap stop_started_on_failure EXIT
  start_node "$1"
  check_started "$1"
  replicate "$1" "$2"
}

# replicate PORT MASTER_PORT: the running node on PORT joins and replicates the master.
replicate() {
  master_id=$("$cli" -p "$2" CLUSTER MYID) || die "no node on port $2"
  "$cli" -p "$1" CLUSTER MEET 127.0.0.1 "$2" >/dev/null
  # REPLICATE needs the master known to the new node, which takes a gossip round or two.
  i=0
  until [ "$("$cli" -p "$1" CLUSTER REPLICATE "$master_id" 2>/dev/null)" = OK ]; do
    i=$((i + 1))
    [ "$i" -le 300 ] || die "node $1 could not replicate $2"
    sleep 0.1
  done
  i=0
  until "$cli" -p "$1" INFO replication 2>/dev/null | tr -d '\r' | grep -qx 'master_link_status:up'; do
    i=$((i + 1))
    [ "$i" -le 300 ] || die "replica $1 did not sync with $2"
    sleep 0.1
  done
  echo "node $1 replicates $2"
}

stop() {
  stopped=0
  for pidfile in "$cluster_dir"/*/redis.pid; do
    [ -f "$pidfile" ] || continue
    dir=${pidfile%/redis.pid}
    stop_node "${dir##*/}" && stopped=$((stopped + 1))
  done
  [ "$stopped" -gt 0 ] || echo "no running node recorded in $cluster_dir"
}

# stop_node PORT: stops the node start recorded in $cluster_dir/PORT; false when none runs.
stop_node() {
  port=$1
  pidfile="$cluster_dir/$port/redis.pid"
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  if ! ours "$pid" "$port"; then
    echo "node $port: pid $pid is not our server any more; stale pid file removed"
    rm -f "$pidfile"
    return 1
  fi
  # A clean shutdown (it saves the data when save points are configured, as by default).
  "$cli" -p "$port" SHUTDOWN >/dev/null 2>&1 || true
  i=0
  while running "$pid" && [ "$i" -lt 200 ]; do
    i=$((i + 1))
    sleep 0.05
  done
  if running "$pid"; then
    kill "$pid"
    echo "node $port: did not shut down in 10 s; sent SIGTERM to pid $pid"
  fi
  rm -f "$pidfile"
  echo "node $port stopped"
}

command=${1:-}
[ $# -gt 0 ] && shift
case "$command" in
start | stop | replica)
  mkdir -p "${CLUSTER_DIR:-data/cluster}"
  cluster_dir=$(cd "${CLUSTER_DIR:-data/cluster}" && pwd)
  "$command" "$@"
  ;;
node | create) "$command" "$@" ;;
*)
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
