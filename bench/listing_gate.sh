#!/usr/bin/env bash
# What the listing gate costs (results in docs/BENCHMARKS.md, "The listing gate"): one master
# with one replica (loopback), a counter spread to 2 holders; ROUNDS times, `CTR.HOLDERS key AT
# ms` with no list change before it (the gate open), then after a grow or a shrink (the gate
# closed: the call waits for the replica's acknowledgement, asked at once). Prints the time per
# call of each and their difference.
#
# Usage (from the repository root, after `make build-tests`, with target/venv from make test):
#   bash bench/listing_gate.sh
# Environment: CTR_MODULE (module path), ROUNDS (default 500), CTR_PYTHON (default
# target/venv/bin/python).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
source bench/lib.sh

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
ROUNDS=${ROUNDS:-500}
PYTHON=${CTR_PYTHON:-$PWD/target/venv/bin/python}
[ -f "$MODULE" ] || die "module not found at $MODULE (run make build-tests)"
"$PYTHON" -c 'import redis' 2>/dev/null || die "no redis-py in $PYTHON (run make test once)"

start_master_with_replica

"$PYTHON" - "$port" "$ROUNDS" <<'PY'
import sys, time
import redis

port, rounds = int(sys.argv[1]), int(sys.argv[2])
r = redis.Redis(port=port)
r.execute_command("CTR.ADD", "gate", 1000)
r.execute_command("CTR.SPREAD", "gate", 2)


def holders_at() -> float:
    # A time back enough not to be ahead of the module's clock under load (the gate is
    # closed after a change whatever the time asked).
    at = int(time.time() * 1000) - 100
    start = time.perf_counter()
    r.execute_command("CTR.HOLDERS", "gate", "AT", at)
    return time.perf_counter() - start


time.sleep(0.01)
holders_at()  # the gate opens once after the spread
open_, closed = [], []
for i in range(rounds):
    open_.append(holders_at())
    r.execute_command("CTR.SPREAD", "gate", 3 if i % 2 == 0 else 2)
    time.sleep(0.006)
    closed.append(holders_at())
median = lambda xs: sorted(xs)[len(xs) // 2] * 1e6
p99 = lambda xs: sorted(xs)[int(len(xs) * 0.99)] * 1e6
print("| `CTR.HOLDERS key AT ms` | median (µs) | p99 (µs) |")
print("|---|---|---|")
print(f"| no list change before it (gate open) | {median(open_):.0f} | {p99(open_):.0f} |")
print(f"| after a grow or a shrink (gate closed) | {median(closed):.0f} | {p99(closed):.0f} |")
print(f"\nThe wait for the replica's acknowledgement: {median(closed) - median(open_):.0f} µs (medians)")
PY
echo
