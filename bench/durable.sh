#!/usr/bin/env bash
# What a durable purchase costs (results in docs/BENCHMARKS.md, "Durable purchases"): one
# master with one replica (loopback), PURCHASES tokened purchases of 1 through the Python
# client, one at a time: `Ctr.decrfloor` as it is, then with `replicas=1` (each grant followed
# by WAIT 1 on its connection). Prints the time per purchase of each and their ratio.
#
# Usage (from the repository root, after `make build-tests`, with target/venv from make test):
#   bash bench/durable.sh
# Environment: CTR_MODULE (module path), PURCHASES (default 5000), CTR_PYTHON (default
# target/venv/bin/python).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
source bench/lib.sh

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
PURCHASES=${PURCHASES:-5000}
PYTHON=${CTR_PYTHON:-$PWD/target/venv/bin/python}
[ -f "$MODULE" ] || die "module not found at $MODULE (run make build-tests)"
"$PYTHON" -c 'import redis' 2>/dev/null || die "no redis-py in $PYTHON (run make test once)"

start_master_with_replica

PYTHONPATH=clients/python "$PYTHON" - "$port" "$PURCHASES" <<'PY'
import sys, time
import redis, redis_ctr

port, n = int(sys.argv[1]), int(sys.argv[2])
ctr = redis_ctr.Ctr(redis.Redis(port=port))
per = {}
for replicas in (0, 1):
    key = f"durable:{replicas}"
    ctr.add(key, n)
    ctr.floor(key, 0)
    start = time.perf_counter()
    for i in range(n):
        assert ctr.decrfloor(key, 1, token=f"t{i}", replicas=replicas) is not None
    per[replicas] = (time.perf_counter() - start) / n * 1e6
print("| purchase | per purchase (µs) |")
print("|---|---|")
print(f"| `decrfloor(key, 1, token=t)` | {per[0]:.0f} |")
print(f"| `decrfloor(key, 1, token=t, replicas=1)` | {per[1]:.0f} |")
print(f"\nRatio durable / plain: {per[1] / per[0]:.2f}")
PY
echo
echo "Machine: $(nproc) cores, load avg $(cut -d' ' -f1 /proc/loadavg); $(redis-server --version | cut -d' ' -f3); redis-py $("$PYTHON" -c 'import redis; print(redis.__version__)')."
