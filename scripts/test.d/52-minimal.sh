#!/usr/bin/env bash
# The core on OpenBLAS alone: the libraries configured with every optional
# library off (-DATTOGRAD_SENTENCEPIECE=OFF -DATTOGRAD_SLEEF=OFF
# -DATTOGRAD_XSMM=OFF -DATTOGRAD_MPI=OFF; no tests, no examples) in
# BUILD_DIR-minimal, installed into a temporary prefix; then checks that
#   - version.h says so (every ATTOGRAD_HAS_ macro 0 but none missing);
#   - the installed package asks for none of them: attograd.pc requires none,
#     the exported targets name none, and find_package(attograd) succeeds with
#     PkgConfig made unfindable (the config looks for them only when built
#     with them);
#   - examples/tour, the README's first program, builds against the prefix
#     through find_package and through pkg-config, links neither SLEEF nor
#     SentencePiece nor libxsmm, and runs to its last line with nothing on
#     stderr (tensors, .backward(), an MLP, Adam and gradcheck need nothing
#     else).
# The build directory is kept (with ccache, a rerun is mostly cache hits).
# Usage: scripts/test.d/52-minimal.sh BUILD_DIR   (prints its figures)
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$build-minimal
work=$(mktemp -d /tmp/attograd_minimal.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cxx=${CXX:-c++}
fail() { echo "minimal: $*" >&2; exit 1; }

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
start=$SECONDS
# -O0: this checks what is built and linked, not speed, and unoptimized the
# libraries compile in a third of Release's time (what keeps a cold run short).
cmake -S "$src" -B "$dir" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DATTOGRAD_SENTENCEPIECE=OFF \
  -DATTOGRAD_SLEEF=OFF -DATTOGRAD_XSMM=OFF -DATTOGRAD_MPI=OFF -DATTOGRAD_BUILD_TESTS=OFF \
  -DATTOGRAD_BUILD_EXAMPLES=OFF -DATTOGRAD_INSTALL=ON > "$work/configure.log" || { cat "$work/configure.log" >&2; exit 1; }
for option in SENTENCEPIECE SLEEF XSMM; do  # configuring says what the build lacks
  grep -q "ATTOGRAD_$option: OFF, " "$work/configure.log" || fail "configure did not report ATTOGRAD_$option: OFF"
done
cmake --build "$dir" -j2 > "$work/build.log" || { tail -40 "$work/build.log" >&2; exit 1; }
cmake --install "$dir" --prefix "$prefix" > "$work/install.log"
echo "minimal: configured, built and installed the libraries in $((SECONDS - start)) s" \
     "(ATTOGRAD_SENTENCEPIECE, _SLEEF, _XSMM, _MPI OFF)"

# The headers say what the library has.
for option in SENTENCEPIECE SLEEF XSMM MPI; do
  grep -q "^#define ATTOGRAD_HAS_$option 0$" "$prefix/include/attograd/version.h" ||
    fail "installed version.h lacks '#define ATTOGRAD_HAS_$option 0'"
done

# The package asks for none of the libraries left out.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
pc=$(pkg-config --print-requires --print-requires-private attograd; pkg-config --static --libs attograd)
if grep -Eiw 'sentencepiece|sleef|-lxsmm|-lxsmmnoblas' <<< "$pc"; then fail "attograd.pc asks for the above"; fi
if grep -El 'PkgConfig::|MPI::' "$prefix"/lib/cmake/attograd/attogradTargets*.cmake; then
  fail "the exported targets above name a library the build left out"
fi

# The tour through find_package, with PkgConfig unfindable: the config must not look for it.
start=$SECONDS
mkdir -p "$work/tour-src"
printf '%s\n' 'cmake_minimum_required(VERSION 3.20)' 'project(tour LANGUAGES CXX)' \
  'find_package(attograd 0.1 CONFIG REQUIRED)' "add_executable(tour \"$src/examples/tour/main.cpp\")" \
  'target_link_libraries(tour PRIVATE attograd::attograd)' > "$work/tour-src/CMakeLists.txt"
cmake -S "$work/tour-src" -B "$work/tour" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON > "$work/tour.log" 2>&1 || { cat "$work/tour.log" >&2; exit 1; }
cmake --build "$work/tour" -j2 >> "$work/tour.log" || { cat "$work/tour.log" >&2; exit 1; }
read -ra flags < <(pkg-config --cflags --libs attograd)
"$cxx" -std=c++20 -O2 "$src/examples/tour/main.cpp" "${flags[@]}" -o "$work/tour_pc"
check_tour() {  # check_tour BINARY: runs to the end, nothing on stderr, none of the optional libraries inside
  env -u OPENBLAS_CORETYPE "$1" > "$work/run.log" 2> "$work/err.log" ||
    { cat "$work/run.log" "$work/err.log" >&2; fail "the tour $1 failed"; }
  grep -q '^gradcheck of tanh (backward vs finite differences): passed$' "$work/run.log" ||
    { cat "$work/run.log" >&2; fail "the tour $1 did not finish"; }
  [[ ! -s $work/err.log ]] || { cat "$work/err.log" >&2; fail "the tour $1 printed on stderr"; }
  if ldd "$1" | grep -Ei 'sleef|sentencepiece|xsmm|mpi'; then fail "the tour $1 loads the above"; fi
  if nm "$1" | grep -Ei ' [TtDdBb] (libxsmm_|Sleef_)' | head -3; then fail "the tour $1 contains the above"; fi
}
check_tour "$work/tour/tour"
check_tour "$work/tour_pc"
echo "minimal: examples/tour built (find_package without PkgConfig, and pkg-config) and ran in" \
     "$((SECONDS - start)) s: $(tail -1 "$work/run.log")"
