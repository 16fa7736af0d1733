#!/usr/bin/env bash
# attograd vendored with add_subdirectory: a parent project (written to
# BUILD_DIR-vendor/parent) adds the source tree and builds examples/consumer
# against attograd::attograd. Checks that only the libraries come along (no
# test, example or install targets, every ATTOGRAD_ option off, no
# -march=native on the parent's target), then builds the consumer and runs it.
# The build directory is kept, so after the first run (a few minutes: the
# libraries' portable flags) it is an incremental build.
# Usage: scripts/test.d/55-vendor.sh BUILD_DIR   (prints its figures)
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$build-vendor
fail() { echo "vendor: $*" >&2; exit 1; }

mkdir -p "$dir/parent"
cat > "$dir/parent/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(vendor LANGUAGES CXX)
add_subdirectory("$src" attograd)
add_executable(scaled_tanh "$src/examples/consumer/main.cpp")
target_link_libraries(scaled_tanh PRIVATE attograd::attograd)
CMAKE

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
start=$SECONDS
cmake -S "$dir/parent" -B "$dir/build" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release > "$dir/configure.log"
targets=$(cmake --build "$dir/build" --target help)
if grep -E -e '\.\.\. (test_|fuzz_|ops_bench|install)' -e '\.\.\. (copy_task|translate|heads_study|custom_layer)$' \
     <<< "$targets"; then
  fail "the vendored attograd brings the targets above"
fi
for option in BUILD_TESTS BUILD_EXAMPLES BUILD_BENCHMARKS INSTALL NATIVE FUZZ SANITIZE; do
  grep -qx "ATTOGRAD_$option:BOOL=OFF" "$dir/build/CMakeCache.txt" || fail "ATTOGRAD_$option is not OFF by default"
done
cmake --build "$dir/build" -j2 > "$dir/build.log"
if grep -rq -e '-march=native' --include=flags.make "$dir/build"; then fail "-march=native in the vendored build"; fi
"$dir/build/scaled_tanh" > "$dir/run.log"
grep -q '^gradcheck passed' "$dir/run.log" || fail "the consumer: $(cat "$dir/run.log")"
echo "vendor: add_subdirectory: $(grep -c '^\.\.\. ' <<< "$targets") targets in the parent, consumer built and ran" \
     "in $((SECONDS - start)) s: $(tail -1 "$dir/run.log")"
