#!/bin/sh
# One redis-server with the redis-ctr module loaded, in the foreground. This is the command
# behind `make run`, behind every node of `make cluster` (docker/cluster.sh), and behind the
# Docker images (docker/Dockerfile, docker/compose*.yml): one command line for all of them.
#
# Usage: server.sh PORT DIR [redis-server options...]
# Environment:
#   CTR_MODULE    the module to load (libredis_ctr.so); required
#   MODULE_ARGS   module load arguments, e.g. "max-shards 8 token-window-ms 600000"; optional
#   REDIS_SERVER  the server binary (default redis-server; a valkey-server works too)
set -eu

if [ $# -lt 2 ]; then
  echo "usage: $0 PORT DIR [redis-server options...]" >&2
  exit 2
fi
port=$1
dir=$2
shift 2
: "${CTR_MODULE:?set CTR_MODULE to the path of libredis_ctr.so}"
mkdir -p "$dir"

# Server options go before --loadmodule: every word after the module's path, up to the next
# --option, is a module argument. MODULE_ARGS is a word list on purpose (unquoted).
# shellcheck disable=SC2086
exec "${REDIS_SERVER:-redis-server}" --port "$port" --dir "$dir" "$@" \
  --loadmodule "$CTR_MODULE" ${MODULE_ARGS:-}
