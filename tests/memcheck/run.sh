#!/usr/bin/env bash
# `make memcheck`: runs the integration suite's main scenarios against redis-server under
# valgrind memcheck with the module loaded, then checks every server's report: no invalid read
# or write, no use of uninitialised memory, no invalid free, no crash, and no definitely lost
# block that the module owns (a stack frame in libredis_ctr.so / redis_ctr:: / the module's
# Rust sources). redis-server's own findings are counted and listed, not failed on.
#
# Environment:
#   MEMCHECK_TESTS   integration test files to run (default below)
#   MEMCHECK_THREADS test threads, each with its own valgrind'ed server (default 2)
#   CTR_MEMCHECK_LOGS  where the valgrind logs go (default target/memcheck)
set -euo pipefail
cd "$(dirname "$0")/../.."
CARGO=${CARGO:-cargo}
tests=${MEMCHECK_TESTS:-"ctr_commands ctr_floor ctr_tokens ctr_reconcile ctr_persistence pnc_commands pnc_crdt pnc_persistence server_fuzz restore_fuzz"}
threads=${MEMCHECK_THREADS:-2}
logs=${CTR_MEMCHECK_LOGS:-$PWD/target/memcheck}

if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind not found: installing it (Debian package valgrind)"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq valgrind >/dev/null
fi

rm -rf "$logs"
mkdir -p "$logs"
export CTR_MEMCHECK_LOGS=$logs
export REDIS_SERVER=$PWD/tests/memcheck/redis-server-valgrind

args=()
for t in $tests; do args+=(--test "$t"); done
echo "memcheck: cargo test ${args[*]} with redis-server under valgrind (logs in $logs)"
status=0
"$CARGO" test --release --no-fail-fast "${args[@]}" -- --test-threads="$threads" 2>&1 | tee "$logs/tests.out" \
  | grep -E '^test result:|^test .* FAILED|panicked' || true
grep -q 'FAILED\|panicked' "$logs/tests.out" && status=2

# One record = the lines of one error or leak report, up to the next blank "==PID== " line.
awk '
  function flush() {
    if (kind != "") {
      mine = (body ~ /libredis_ctr\.so|redis_ctr::|redis_module::|\/src\/[a-z_\/]+\.rs:|[a-z_]+\.rs:[0-9]+/)
      # A load the test made fail on purpose (a refused load argument): Redis unmaps the module
      # (its frames turn to ???) and exits; what that startup allocated dies with it.
      refused = (!mine && kind == "definitely lost" && body ~ /moduleLoad/ && body ~ /\?\?\?/)
      key = kind (mine ? " (module)" : refused ? " at a refused module load (the server exits)" : " (redis-server)")
      count[key]++
      if (mine) { bad++; print "---- " FILENAME ":\n" body }
    }
    kind = ""; body = ""
  }
  FNR == 1 { flush(); files++ }
  /ERROR SUMMARY/ {
    complete[FILENAME] = 1
    if (match($0, /suppressed: [0-9,]+/)) { n = substr($0, RSTART + 12, RLENGTH - 12); gsub(",", "", n); suppressed += n }
  }
  {
    line = $0
    sub(/^==[0-9]+== ?/, "", line)
    if (line == "") { flush(); next }
    if (kind == "") {
      if (line ~ /^(Invalid (read|write|free)|Mismatched free|Conditional jump|Use of uninitialised|Syscall param|Source and destination overlap|Argument .* of function)/) kind = "error: " line
      else if (line ~ /definitely lost in loss record/) kind = "definitely lost"
      else if (line ~ /^Process terminating with default action of signal/) kind = "crash: " line
      if (kind != "") body = line "\n"
      next
    }
    body = body line "\n"
  }
  END {
    flush()
    for (f in complete) done++
    printf "\nmemcheck: %d server processes, %d complete reports (a server a test kills -9 on purpose leaves none)\n", files, done
    for (k in count) printf "  %5d x %s\n", count[k], k
    printf "  %5d errors suppressed (tests/memcheck/redis-lzf.supp: Redis'"'"'s LZF)\n", suppressed
    if (files == 0) { print "memcheck: no valgrind report found"; exit 1 }
    if (bad > 0) { printf "memcheck: %d findings attributable to the module (above)\n", bad; exit 1 }
    print "memcheck: clean: no invalid access, uninitialised use, invalid free, crash or definite leak in the module"
  }
' "$logs"/valgrind-*.log || status=1

if [ "$status" = 2 ]; then
  echo "memcheck: some tests failed under valgrind (see $logs/tests.out); timing-sensitive ones can, the verdict above is the valgrind one"
fi
[ "$status" = 1 ] && exit 1
exit 0
