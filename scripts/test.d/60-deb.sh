#!/usr/bin/env bash
# The .deb: configure a portable build next to the Release one (BUILD_DIR-deb:
# -DATTOGRAD_NATIVE=OFF, prefix /usr, no tests; ccache makes rebuilds quick),
# `cpack -G DEB`, and inspect the package: its control fields (name, version,
# the Debian packages it depends on) and its file list (headers, the five
# libraries, the CMake package, attograd.pc, the programs and the corpus, all
# under /usr, no internal header). As root with apt-get (CI), also install it
# with `apt-get install ./attograd_*.deb`, build and run examples/consumer
# against /usr through find_package and pkg-config, and remove it again.
# Usage: scripts/test.d/60-deb.sh BUILD_DIR [--no-apt]   (prints its figures)
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [--no-apt]}" && pwd)
apt=1
[[ ${2:-} == --no-apt ]] && apt=0
src=$(cd "$(dirname "$0")/../.." && pwd)
deb_build=$build-deb
work=$(mktemp -d /tmp/attograd_deb.XXXXXX)
installed=0
cleanup() {
  if (( installed )); then
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq -o DPkg::Lock::Timeout=300 attograd > "$work/purge.log" 2>&1 ||
      { echo "deb: apt-get purge attograd failed:" >&2; cat "$work/purge.log" >&2; }
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "deb: $*" >&2; exit 1; }

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
start=$SECONDS
# Only what the package installs (the attograd_package target), not every
# example: CMAKE_SKIP_INSTALL_ALL_DEPENDENCY keeps cpack's install from building `all`.
cmake -S "$src" -B "$deb_build" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DATTOGRAD_NATIVE=OFF -DATTOGRAD_SANITIZE=OFF -DATTOGRAD_BUILD_TESTS=OFF -DATTOGRAD_BUILD_EXAMPLES=ON \
  -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON > "$work/build.log"
cmake --build "$deb_build" -j2 --target attograd_package >> "$work/build.log"
if grep -rq -e '-march=native' --include=flags.make "$deb_build"; then fail "the package build uses -march=native"; fi
rm -f "$deb_build"/attograd_*.deb
(cd "$deb_build" && cpack -G DEB > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log" >&2; fail "cpack failed"; }
debs=("$deb_build"/attograd_*.deb)
(( ${#debs[@]} == 1 )) || fail "expected one attograd_*.deb in $deb_build, found ${#debs[@]}"
deb=${debs[0]}
version=$(sed -n 's/^#define ATTOGRAD_VERSION_STRING "\(.*\)"/\1/p' "$deb_build/include/attograd/version.h")
arch=$(dpkg --print-architecture)
[[ $(basename "$deb") == "attograd_${version}_${arch}.deb" ]] || fail "$(basename "$deb"): expected attograd_${version}_${arch}.deb"
echo "deb: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB, built in $((SECONDS - start)) s"

# Control fields.
field() { dpkg-deb -f "$deb" "$1"; }
[[ $(field Package) == attograd && $(field Version) == "$version" && $(field Architecture) == "$arch" ]] ||
  fail "control: Package/Version/Architecture are '$(field Package)' '$(field Version)' '$(field Architecture)'"
depends=$(field Depends)
for dep in libopenblas0 libfmt-dev nlohmann-json3-dev libsentencepiece-dev libsleef-dev libxsmm-dev; do
  [[ ", $depends," == *", $dep,"* || ", $depends," == *", $dep ("* ]] || fail "Depends lacks $dep: $depends"
done
dpkg-deb -I "$deb" > "$work/info.txt"
echo "deb: Depends: $depends"

# File list.
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' > "$work/files.txt"
if grep -v -e '^/usr/' -e '^/$' "$work/files.txt"; then fail "files outside /usr (above)"; fi
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
lib=/usr/lib/$multiarch
expect=(/usr/include/attograd/attograd.h /usr/include/attograd/version.h /usr/include/attograd/autograd/tensor.h
        /usr/include/attograd/autograd/function.h /usr/include/attograd/autograd/gradcheck.h
        /usr/include/attograd/nn/attention.h /usr/include/attograd/optim/adam.h /usr/include/attograd/data/vocab.h
        "$lib"/libattograd_{tensor,autograd,nn,optim,data}.a "$lib"/cmake/attograd/attogradConfig{,Version}.cmake
        "$lib"/cmake/attograd/attogradTargets.cmake "$lib"/pkgconfig/attograd.pc
        /usr/bin/attograd-{copy-task,translate,lm} /usr/share/attograd/numbers/{train,valid,test,gen}.tsv)
for f in "${expect[@]}"; do grep -qx -- "$f" "$work/files.txt" || fail "the package lacks $f"; done
for f in autograd/tensor_impl.h autograd/ops/map_zip.h autograd/backend/blas.h; do
  if grep -qx "/usr/include/attograd/$f" "$work/files.txt"; then fail "the package installs the internal header $f"; fi
done
echo "deb: $(grep -c '[^/]$' "$work/files.txt") files ($(grep -c '^/usr/include/.*\.h$' "$work/files.txt") headers)"

# Install it, use it from /usr, remove it.
if (( !apt )) || (( EUID != 0 )) || ! command -v apt-get > /dev/null; then
  echo "deb: apt-get install skipped (needs root and apt-get)"; exit 0
fi
if dpkg-query -W -f='${Status}' attograd 2>/dev/null | grep -q 'install ok installed'; then
  echo "deb: apt-get install skipped (a package named attograd is already installed)"; exit 0
fi
tiny=(--steps 1 --warmup 0 --eval-every 0 --eval-size 8 --samples 0 --d-model 16 --heads 2 --d-ff 32 --enc-layers 1
      --dec-layers 1)
start=$SECONDS
installed=1
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "$deb" \
  > "$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get install $deb failed"; }
cmake -S "$src/examples/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release > "$work/consumer.log"
cmake --build "$work/consumer" -j2 >> "$work/consumer.log"
"$work/consumer/scaled_tanh" > "$work/run.log"
grep -q '^gradcheck passed' "$work/run.log" || fail "the consumer built against /usr: $(cat "$work/run.log")"
read -ra flags < <(pkg-config --cflags --libs attograd)
"${CXX:-c++}" -std=c++20 -O2 "$src/examples/consumer/main.cpp" "${flags[@]}" -o "$work/scaled_tanh_pc"
"$work/scaled_tanh_pc" > "$work/run_pc.log"
grep -q '^gradcheck passed' "$work/run_pc.log" || fail "the pkg-config consumer: $(cat "$work/run_pc.log")"
(cd / && attograd-translate train "${tiny[@]}" --checkpoint-dir "$work/ck" > "$work/translate.log" 2>&1) ||
  { cat "$work/translate.log" >&2; fail "attograd-translate, run from /, did not train on the installed corpus"; }
echo "deb: installed with apt-get; attograd-translate found its corpus; the consumer built against /usr" \
     "(find_package and pkg-config) and ran:" \
     "$(tail -1 "$work/run.log") ($((SECONDS - start)) s)"
