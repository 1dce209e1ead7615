#!/usr/bin/env bash
# The coalescing writer against single adds (results in docs/BENCHMARKS.md, "Coalescing
# writer"): one process makes ADDS adds of 1 over KEYS keys, with each client library, first
# one CTR.ADD per add, then through its CoalescingWriter (defaults: flush every 100 ms or
# 10,000 adds). For each run: the wall time, the CTR.ADD calls the server counted
# (INFO commandstats, reset before the run), the total read back, and the machine's load.
#
# Usage (from the repository root, after `make build-tests`, with target/venv from make test):
#   bash bench/coalescing.sh
# Environment: CTR_MODULE (module path), ADDS (default 1000000), KEYS (default 100),
# CTR_PYTHON (default target/venv/bin/python).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
source bench/lib.sh

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
ADDS=${ADDS:-1000000}
KEYS=${KEYS:-100}
PYTHON=${CTR_PYTHON:-$PWD/target/venv/bin/python}
RUST_BENCH=$PWD/target/release/examples/coalescing_bench
[ -f "$MODULE" ] || die "module not found at $MODULE (run make build-tests)"
[ -x "$RUST_BENCH" ] || die "$RUST_BENCH missing (run make build-tests)"
"$PYTHON" -c 'import redis' 2>/dev/null || die "no redis-py in $PYTHON (run make test once)"

start_server

# Busy share of the whole machine (all cores) between two /proc/stat samples, in percent.
cpu_sample() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
busy_percent() { awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" 'BEGIN { printf "%.0f", 100 * (c - a) / (d - b) }'; }

echo "| client | mode | adds | CTR.ADD calls at the server | wall time (s) | adds/s | total read back | machine busy (%) | load avg before |"
echo "|---|---|---|---|---|---|---|---|---|"
for client in python rust; do
  for mode in single coalesced; do
    rcli FLUSHALL >/dev/null
    rcli CONFIG RESETSTAT >/dev/null
    load=$(cut -d' ' -f1 /proc/loadavg)
    read -r busy0 total0 < <(cpu_sample)
    if [ "$client" = python ]; then
      out=$(PYTHONPATH=clients/python "$PYTHON" bench/coalescing.py "$port" "$mode" "$ADDS" "$KEYS")
    else
      out=$("$RUST_BENCH" "$port" "$mode" "$ADDS" "$KEYS")
    fi
    read -r busy1 total1 < <(cpu_sample)
    read -r seconds _sent total <<<"$out"
    calls=$(rcli INFO commandstats | tr -d '\r' | awk -F'[=,]' '/^cmdstat_ctr.add:/ { print $2 }')
    [ "$total" = "$ADDS" ] || die "$client $mode: read back $total, expected $ADDS"
    rate=$(awk -v n="$ADDS" -v s="$seconds" 'BEGIN { printf "%.0f", n / s }')
    echo "| $client | $mode | $ADDS | ${calls:-0} | $seconds | $rate | $total | $(busy_percent "$busy0" "$total0" "$busy1" "$total1") | $load |"
    log "$client $mode done: $seconds s"
  done
done
echo
echo "Machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo); $(redis-server --version | cut -d' ' -f3); Python $("$PYTHON" -c 'import platform; print(platform.python_version())'), redis-py $("$PYTHON" -c 'import redis; print(redis.__version__)')."
