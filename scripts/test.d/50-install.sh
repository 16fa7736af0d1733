#!/usr/bin/env bash
# attograd as an installed library: `cmake --install` the Release build into a
# temporary prefix, then check what a user of the prefix sees:
#   - no internal header is installed, and each installed header compiles
#     alone in a translation unit (-I<prefix>/include only, -Wall -Wextra);
#   - nothing of this machine's build leaks into the package (-march=native,
#     the source or build directory);
#   - the installed attograd-translate, run from a directory without data,
#     trains a step on the installed corpus (share/attograd/numbers);
#   - examples/consumer builds with find_package(attograd) and runs (it
#     gradchecks its own layer and trains it), and builds again with
#     `pkg-config --cflags --libs attograd` alone, and runs;
#   - so does examples/tour, the README's first program, which includes only
#     installed headers and calls nothing before its first GEMM: with
#     OPENBLAS_CORETYPE unset it prints its last line and nothing on stderr
#     (no slow-kernel warning: the library picked OpenBLAS' kernel itself);
#   - custom_layer and higher_order build with examples/common against the
#     prefix and run (custom_layer's gradchecks pass).
# Usage: scripts/test.d/50-install.sh BUILD_DIR   (prints its figures)
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/attograd_install.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cxx=${CXX:-c++}

start=$SECONDS
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
echo "install: $(find "$prefix" -type f | wc -l) files, $(du -sh "$prefix" | cut -f1) in $((SECONDS - start)) s"

# Internal headers stay out.
for internal in autograd/tensor_impl.h autograd/ops/map_zip.h autograd/backend/blas.h autograd/kernels/rows.h; do
  if [[ -e $prefix/include/attograd/$internal ]]; then
    echo "install: internal header $internal was installed" >&2; exit 1
  fi
done
for f in attograd/attograd.h attograd/version.h lib/cmake/attograd/attogradConfig.cmake \
         lib/cmake/attograd/attogradConfigVersion.cmake lib/pkgconfig/attograd.pc; do
  [[ $f == include/* || $f == lib/* ]] || f=include/$f
  [[ -e $prefix/$f ]] || { echo "install: $f missing" >&2; exit 1; }
done
for part in tensor autograd nn optim data; do  # static, or shared (-DBUILD_SHARED_LIBS=ON)
  [[ -e $prefix/lib/libattograd_$part.a || -e $prefix/lib/libattograd_$part.so ]] ||
    { echo "install: lib/libattograd_$part.a (or .so) missing" >&2; exit 1; }
done
if grep -rl -e 'march=native' -e "$src" -e "$build" "$prefix/lib/cmake" "$prefix/lib/pkgconfig" "$prefix/include"; then
  echo "install: the files above name -march=native or this machine's source/build directory" >&2; exit 1
fi

# The installed programs find their corpus through the prefix, not the current directory.
if [[ -x $prefix/bin/attograd-translate ]]; then
  mkdir "$work/elsewhere"
  (cd "$work/elsewhere" && "$prefix/bin/attograd-translate" train --steps 1 --warmup 0 --eval-every 0 --eval-size 8 \
     --samples 0 --d-model 16 --heads 2 --d-ff 32 --enc-layers 1 --dec-layers 1 --checkpoint-dir "$work/ck" \
     > "$work/translate.log" 2>&1) || { cat "$work/translate.log" >&2; echo "install: attograd-translate failed" >&2; exit 1; }
  echo "programs: $(ls "$prefix/bin" | tr '\n' ' ')- attograd-translate trained on $prefix/share/attograd/numbers"
fi

# Each public header on its own.
start=$SECONDS
mapfile -t headers < <(cd "$prefix/include" && find attograd -name '*.h' | sort)
check_header() {  # check_header attograd/<path>.h
  printf '#include <%s>\n' "$1" > "$work/tu_${1//\//_}.cpp"
  "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -I"$prefix/include" "$work/tu_${1//\//_}.cpp"
}
export -f check_header
export work prefix cxx
printf '%s\n' "${headers[@]}" | xargs -P2 -I{} bash -c 'check_header {}'
echo "headers: ${#headers[@]} installed headers each compile alone ($((SECONDS - start)) s)"

# The consumer through find_package.
start=$SECONDS
cmake -S "$src/examples/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  > "$work/consumer.log"
cmake --build "$work/consumer" -j2 >> "$work/consumer.log"
"$work/consumer/scaled_tanh" > "$work/run.log"
grep -q '^gradcheck passed' "$work/run.log"
echo "find_package: consumer built and ran in $((SECONDS - start)) s: $(tail -1 "$work/run.log")"

# The tour through find_package: a project around the unchanged examples/tour/main.cpp.
start=$SECONDS
mkdir -p "$work/tour-src"
printf '%s\n' 'cmake_minimum_required(VERSION 3.20)' 'project(tour LANGUAGES CXX)' \
  'find_package(attograd 0.1 CONFIG REQUIRED)' "add_executable(tour \"$src/examples/tour/main.cpp\")" \
  'target_link_libraries(tour PRIVATE attograd::attograd)' > "$work/tour-src/CMakeLists.txt"
cmake -S "$work/tour-src" -B "$work/tour" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" > "$work/tour.log"
cmake --build "$work/tour" -j2 >> "$work/tour.log"
check_tour() {  # check_tour BINARY: runs as a reader runs it, with no OPENBLAS_CORETYPE
  env -u OPENBLAS_CORETYPE "$1" > "$work/tour_run.log" 2> "$work/tour_err.log" ||
    { cat "$work/tour_run.log" "$work/tour_err.log" >&2; echo "install: the installed tour $1 failed" >&2; exit 1; }
  grep -q '^gradcheck of tanh (backward vs finite differences): passed$' "$work/tour_run.log" ||
    { cat "$work/tour_run.log" >&2; echo "install: the tour $1 did not finish" >&2; exit 1; }
  if [[ -s $work/tour_err.log ]]; then
    cat "$work/tour_err.log" >&2; echo "install: the tour $1 printed on stderr" >&2; exit 1
  fi
}
check_tour "$work/tour/tour"
echo "find_package: examples/tour built and ran in $((SECONDS - start)) s: $(tail -1 "$work/tour_run.log")"

# The other small programs, custom_layer and higher_order, with the programs'
# shared code (examples/common, which a user copies with them): built against
# the prefix, so examples/ includes only installed headers. -O1: this checks
# that they compile and run, not their speed.
start=$SECONDS
mkdir -p "$work/small-src"
printf '%s\n' 'cmake_minimum_required(VERSION 3.20)' 'project(small LANGUAGES CXX)' \
  'find_package(attograd 0.1 CONFIG REQUIRED)' 'find_package(cxxopts REQUIRED)' 'find_package(ZLIB REQUIRED)' \
  "file(GLOB common \"$src/examples/common/*.cpp\")" 'add_library(common STATIC ${common})' \
  "target_include_directories(common PUBLIC \"$src\")" \
  'target_link_libraries(common PUBLIC attograd::attograd attograd::dist cxxopts::cxxopts ZLIB::ZLIB)' \
  'foreach(program custom_layer higher_order)' \
  "  add_executable(\${program} \"$src/examples/\${program}/main.cpp\")" \
  '  target_link_libraries(${program} PRIVATE common)' 'endforeach()' > "$work/small-src/CMakeLists.txt"
cmake -S "$work/small-src" -B "$work/small" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
  -DCMAKE_PREFIX_PATH="$prefix" > "$work/small.log" 2>&1 &&
  cmake --build "$work/small" -j2 >> "$work/small.log" 2>&1 ||
  { tail -30 "$work/small.log" >&2; echo "install: custom_layer/higher_order do not build against the prefix" >&2; exit 1; }
"$work/small/custom_layer" check > "$work/custom_layer.log" 2>&1 ||
  { cat "$work/custom_layer.log" >&2; echo "install: the installed custom_layer check failed" >&2; exit 1; }
"$work/small/higher_order" > "$work/higher_order.log" 2>&1 ||
  { cat "$work/higher_order.log" >&2; echo "install: the installed higher_order failed" >&2; exit 1; }
echo "find_package: custom_layer (check passed) and higher_order (trained) built against the prefix in $((SECONDS - start)) s"

# The version rule (SameMinorVersion): 0.1 finds 0.1.x, the next minor release does not.
version=$(sed -n 's/^#define ATTOGRAD_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/attograd/version.h")
IFS=. read -r major minor _ <<< "$version"
probe() {  # probe VERSION: does find_package(attograd VERSION) succeed against the prefix?
  mkdir -p "$work/probe-$1"
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(probe CXX)\nfind_package(attograd %s CONFIG REQUIRED)\n' "$1" \
    > "$work/probe-$1/CMakeLists.txt"
  cmake -S "$work/probe-$1" -B "$work/probe-$1/build" -DCMAKE_PREFIX_PATH="$prefix" > "$work/probe-$1.log" 2>&1
}
probe "$major.$minor" || { cat "$work/probe-$major.$minor.log" >&2; echo "install: find_package($major.$minor) failed" >&2; exit 1; }
if probe "$major.$((minor + 1))"; then echo "install: find_package($major.$((minor + 1))) accepted $version" >&2; exit 1; fi
echo "version: find_package(attograd $major.$minor) finds $version, find_package(attograd $major.$((minor + 1))) does not"

# The consumer through pkg-config.
start=$SECONDS
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
[[ $(pkg-config --modversion attograd) == "$version" ]] || { echo "install: attograd.pc has another version" >&2; exit 1; }
read -ra flags < <(pkg-config --cflags --libs attograd)
"$cxx" -std=c++20 -O2 "$src/examples/consumer/main.cpp" "${flags[@]}" -o "$work/scaled_tanh_pc"
# (a shared build in a prefix off the loader's path needs LD_LIBRARY_PATH, as any such library does)
LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/scaled_tanh_pc" > "$work/run_pc.log"
grep -q '^gradcheck passed' "$work/run_pc.log"
echo "pkg-config: consumer built and ran in $((SECONDS - start)) s: $(tail -1 "$work/run_pc.log")"
start=$SECONDS
"$cxx" -std=c++20 -O2 "$src/examples/tour/main.cpp" "${flags[@]}" -o "$work/tour_pc"
LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} check_tour "$work/tour_pc"
echo "pkg-config: examples/tour built and ran in $((SECONDS - start)) s"
