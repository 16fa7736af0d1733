#!/usr/bin/env bash
# Fuzz the loaders for a bounded time: builds the libFuzzer targets of fuzz/
# with clang (ASan+UBSan) in build-fuzz/, then runs each one for
# FUZZ_SECONDS (default 15) from its committed seeds (fuzz/corpus/<target>/,
# copied: the repository is not modified), each input under 10 s, 2 GB of
# RSS and 512 MB in one allocation (past those libFuzzer reports it).
# Prints executions, coverage and crashes per target. A crash fails the run
# and leaves the input in build-fuzz/crashes/; fix the bug, then commit the
# input to fuzz/regressions/<target>/ so that tests/test_fuzz_regressions.cpp
# replays it in every normal build. scripts/fuzz runs this for longer.
# Usage: scripts/test.d/20-fuzz.sh [BUILD_DIR (unused)] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../.."
shift || true
targets=("$@")
(( ${#targets[@]} )) || targets=(safetensors vocab tsv pairs mo checkpoint model)
seconds=${FUZZ_SECONDS:-15}
command -v clang++ > /dev/null || { echo "fuzz: clang++ not found (scripts/setup installs clang)" >&2; exit 1; }

mkdir -p build-fuzz
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DATTOGRAD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DATTOGRAD_BUILD_TESTS=OFF -DATTOGRAD_BUILD_EXAMPLES=OFF "${launcher[@]}" > build-fuzz/build.log 2>&1 ||
  { cat build-fuzz/build.log; exit 1; }
cmake --build build-fuzz -j2 --target "${targets[@]/#/fuzz_}" >> build-fuzz/build.log 2>&1 || { cat build-fuzz/build.log; exit 1; }

mkdir -p build-fuzz/crashes
failed=0
for t in "${targets[@]}"; do
  work=build-fuzz/corpus-run/$t
  rm -rf "$work" && mkdir -p "$work"
  seeds=$(find "fuzz/corpus/$t" -type f | wc -l)
  log=build-fuzz/$t.log
  rc=0
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "build-fuzz/bin/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/crashes/$t-" "$work" "fuzz/corpus/$t" > "$log" 2>&1 || rc=$?
  execs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  inputs=$(find "$work" -type f | wc -l)
  if (( rc )); then
    failed=1
    echo "fuzz $t: FAILED after ${execs:-?} executions, ${cov:-cov: ?}, 1 crash (exit $rc; libFuzzer stops at the first); input saved under build-fuzz/crashes/:"
    grep -E 'ERROR|SUMMARY|terminate|what\(\)|Test unit written' "$log" | head -8
  else
    echo "fuzz $t: ${execs} executions in ${seconds} s, ${cov:-cov: ?} (edges, features), corpus $seeds seeds -> $((seeds + inputs)) inputs, 0 crashes"
  fi
done
exit "$failed"
