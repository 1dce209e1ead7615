#!/usr/bin/env bash
# Runs every fuzz target for a bounded time: `make fuzz` (FUZZ_SECONDS per target, default 60;
# FUZZ_TIMEOUT seconds per input, default 5, and FUZZ_MAX_LEN bytes per input, default 512 KiB:
# inputs large enough that a quadratic decoder takes seconds, so a slow input fails the run
# like a crash, as a timeout-* artifact;
# FUZZ_TARGETS to pick some; FUZZ_SANITIZER=address to run under AddressSanitizer, about 8x
# fewer executions: the code under test is safe Rust but for the tagged-pointer cell). Seeds each corpus with real encodings first. Prints the executions
# per target and fails when any target found a crash (kept in tests/fuzz/artifacts/<target>/).
#
# cargo-fuzz passes nightly-only rustc flags (-Zsanitizer=address, ...); RUSTC_BOOTSTRAP=1 lets
# the stable toolchain accept them, so no nightly toolchain is needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARGO=${CARGO:-cargo}
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"ctr_state ctr_apply ctr_step effect pnc_state ctr_args pnc_args"}
sanitizer=${FUZZ_SANITIZER:-none}
timeout=${FUZZ_TIMEOUT:-5}
max_len=${FUZZ_MAX_LEN:-524288}
dir=tests/fuzz
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz >/dev/null 2>&1 || "$CARGO" install cargo-fuzz
# Real encodings, made by the module's own encoders (src/fuzzing.rs, seeds()).
CTR_FUZZ_SEEDS="$PWD/$dir/corpus" "$CARGO" test --release --lib --quiet write_seed_corpus -- --ignored >/dev/null
"$CARGO" fuzz build --fuzz-dir "$dir" -s "$sanitizer"

summary=()
failed=()
for t in $targets; do
  mkdir -p "$dir/corpus/$t" "$dir/logs"
  extra=()
  [ -f "$dir/dict/$t.dict" ] && extra+=("-dict=$dir/dict/$t.dict")
  log="$dir/logs/$t.log"
  echo "fuzzing $t for ${seconds}s, sanitizer $sanitizer (log: $log)"
  status=0
  "$CARGO" fuzz run --fuzz-dir "$dir" -s "$sanitizer" "$t" "$dir/corpus/$t" -- \
    -max_total_time="$seconds" -timeout="$timeout" -max_len="$max_len" -report_slow_units=1 \
    -print_final_stats=1 ${extra[@]+"${extra[@]}"} \
    >"$log" 2>&1 || status=$?
  runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  corpus=$(find "$dir/corpus/$t" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    failed+=("$t")
    summary+=("$t: FAILED after ${runs:-?} executions; see $log and $dir/artifacts/$t/")
    grep -E "panicked|SUMMARY|Test unit written" "$log" | head -5 || true
  else
    summary+=("$t: ${runs:-?} executions, coverage ${cov:-?} edges, corpus $corpus inputs, no crash")
  fi
done
echo
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "crashes or slow inputs (timeouts) in: ${failed[*]} (minimize with: RUSTC_BOOTSTRAP=1 cargo fuzz tmin --fuzz-dir $dir <target> <artifact>;"
  echo "keep the input in $dir/regressions/<target>/ with the fix)"
  exit 1
fi
