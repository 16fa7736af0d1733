#!/usr/bin/env bash
# attograd vendored with add_subdirectory, as shared libraries: a parent
# project (written to BUILD_DIR-vendor/parent) adds the source tree and builds
# examples/consumer against attograd::attograd with -DBUILD_SHARED_LIBS=ON
# (the static libraries are what 50-install and 60-deb use). Checks that only
# the libraries come along (no test, example or install targets, every
# ATTOGRAD_ option off, no -march=native on the parent's target); that each
# libattograd_*.so has its per-minor-version soname and exports only symbols
# that name attograd (cmake/exports.map); that an attograd::ShapeError thrown
# inside a library is caught by type in the program; then runs the consumer.
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
add_executable(catch_across catch_across.cpp)
target_link_libraries(catch_across PRIVATE attograd::attograd)
CMAKE
cat > "$dir/parent/catch_across.cpp" <<'CPP'
// matmul's shape check throws inside libattograd_autograd.so; the handler
// here matches only if ShapeError's typeinfo is the one the library used.
#include <cstdio>

#include <attograd/attograd.h>

int main() {
  try {
    attograd::matmul(attograd::Tensor::zeros({2, 3}), attograd::Tensor::zeros({4, 5}));
  } catch (const attograd::ShapeError& e) {
    std::printf("caught attograd::ShapeError: %s\n", e.what());
    return 0;
  } catch (...) {
  }
  std::puts("the ShapeError was not caught by type");
  return 1;
}
CPP

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
start=$SECONDS
cmake -S "$dir/parent" -B "$dir/build" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  > "$dir/configure.log"
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
version=$(sed -n 's/^#define ATTOGRAD_VERSION_STRING "\([0-9]*\.[0-9]*\).*/\1/p' "$dir/build/attograd/include/attograd/version.h")
exported=0
for part in tensor autograd nn optim data; do
  lib=$(find "$dir/build/attograd" -name "libattograd_$part.so" -print -quit)
  [[ -n $lib ]] || fail "libattograd_$part.so was not built"
  soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
  [[ $soname == "libattograd_$part.so.$version" ]] || fail "libattograd_$part.so has soname '$soname'"
  symbols=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt)
  if stray=$(grep -v 'attograd::' <<< "$symbols"); then
    fail "libattograd_$part.so exports symbols outside attograd: $(head -5 <<< "$stray" | tr '\n' ';')"
  fi
  exported=$((exported + $(wc -l <<< "$symbols")))
done
"$dir/build/catch_across" > "$dir/catch.log" || fail "$(cat "$dir/catch.log")"
"$dir/build/scaled_tanh" > "$dir/run.log"
grep -q '^gradcheck passed' "$dir/run.log" || fail "the consumer: $(cat "$dir/run.log")"
echo "vendor: add_subdirectory, shared: $(grep -c '^\.\.\. ' <<< "$targets") targets in the parent;" \
     "sonames .so.$version, $exported exported symbols, all naming attograd; a ShapeError caught across the library"
echo "vendor: consumer built and ran in $((SECONDS - start)) s: $(tail -1 "$dir/run.log")"
