#!/usr/bin/env bash
# The layering, read from the #include lines alone (no build needed):
#   - attograd/autograd/ is the base and includes nothing of the other parts;
#     nn/, optim/, data/ and dist/ each include only themselves and autograd/.
#   - The private headers (cmake/install.cmake's ATTOGRAD_PRIVATE_HEADERS)
#     are autograd's own. Outside it only nn/ reaches two of them: the GEMM
#     layer's face, backend/blas.h (gemm and gemm_weight, which the decode
#     step calls on weights the GEMM layer keeps transposed), and
#     kernels/rows.h (the row softmax and logsumexp the ops share with the
#     decode step and beam search).
#   - No public header includes a private one (the install then compiles
#     each installed header alone: 50-install.sh).
#   - examples/ and fuzz/ include only public headers: they are programs a
#     user could write against the installed library.
# Usage: scripts/test.d/05-layering.sh [BUILD_DIR]   (BUILD_DIR is unused; < 1 s)
set -euo pipefail
cd "$(dirname "$0")/../.."

private=$(sed -n '/^set(ATTOGRAD_PRIVATE_HEADERS/,/)/p' cmake/install.cmake | grep -oE '[a-z_/]+\.h' | sort)
[[ -n $private ]] || { echo "layering: no private headers read from cmake/install.cmake" >&2; exit 1; }
problems=()

# includes FILE...: "file:line: header" for each <attograd/...> include, header relative to attograd/.
includes() { grep -HnoE '^#include <attograd/[^>]+>' "$@" | sed -E 's#:\#include <attograd/(.*)>$#: \1#' || true; }

for part in autograd nn optim data dist; do
  while IFS= read -r hit; do
    [[ -n $hit ]] || continue
    header=${hit##*: } target=${header%%/*}
    [[ $header == version.h || $target == "$part" || $target == autograd ]] && continue
    problems+=("$hit: attograd/$part/ may include only itself and attograd/autograd/")
  done < <(includes $(find "attograd/$part" -name '*.h' -o -name '*.cpp'))
done

is_private() { grep -qxF "$1" <<< "$private"; }
while IFS= read -r hit; do
  [[ -n $hit ]] || continue
  file=${hit%%:*} header=${hit##*: }
  is_private "$header" || continue
  case $file in
    attograd/autograd/*) rel=${file#attograd/}; is_private "$rel" || [[ $rel == *.cpp ]] ||
                           problems+=("$hit: the public header $file includes the private $header") ;;
    attograd/nn/*.cpp)   [[ $header == autograd/backend/blas.h || $header == autograd/kernels/rows.h ]] ||
                           problems+=("$hit: nn/ reaches autograd's internals only through backend/blas.h and kernels/rows.h") ;;
    *)                   problems+=("$hit: $header is private (cmake/install.cmake); use a public header") ;;
  esac
done < <(includes $(find attograd examples fuzz -name '*.h' -o -name '*.cpp'))

if (( ${#problems[@]} )); then
  echo "layering: ${#problems[@]} include(s) break the layering:" >&2
  printf '  %s\n' "${problems[@]}" >&2
  exit 1
fi
echo "layering: $(includes $(find attograd examples fuzz -name '*.h' -o -name '*.cpp') | wc -l) includes checked, layering holds"
