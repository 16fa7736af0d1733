#!/usr/bin/env bash
# The API reference: scripts/docs builds it (Doxygen over the public headers)
# into BUILD_DIR/docs and fails on a public function, class, enum or alias
# without a comment, or on a comment Doxygen cannot read. Also checks
# that docs/Doxyfile leaves out exactly the headers cmake/install.cmake keeps
# private, that a class page carries its header's comments and that the front
# page is the umbrella header's.
# Then it checks itself: a copy of the headers with one planted undocumented
# function (and one documented) must fail, naming the first only.
# Usage: scripts/test.d/65-apidocs.sh BUILD_DIR   (about 20 s)
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
cd "$(dirname "$0")/../.."
work=$(mktemp -d /tmp/attograd_apidocs.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "apidocs: $*" >&2; exit 1; }

# The self-test's tree, built in the background beside the real one.
mkdir -p "$work/tree/attograd"
cp -r attograd/attograd.h attograd/autograd attograd/nn attograd/optim attograd/data "$work/tree/attograd/"
find "$work/tree" -type f ! -name '*.h' -delete
sed -i 's#^}  // namespace attograd$#// Planted by 65-apidocs.sh: documented.\nTensor planted_documented(const Tensor\& x);\nTensor planted_undocumented(const Tensor\& x);\n&#' \
  "$work/tree/attograd/nn/linear.h"
grep -q planted_undocumented "$work/tree/attograd/nn/linear.h" || fail "self-test: could not plant the fault in attograd/nn/linear.h"
scripts/docs --src "$work/tree" --out "$work/out" --no-html > "$work/selftest" 2>&1 &
selftest=$!

# Doxyfile's EXCLUDE is the install's private headers.
private=$(sed -n '/^set(ATTOGRAD_PRIVATE_HEADERS/,/)/p' cmake/install.cmake | grep -oE '[a-z_/]+\.h' | sort)
excluded=$(sed -n '/^EXCLUDE  /,/^[^ ]/p' docs/Doxyfile | grep -oE '[a-z_/]+\.h' | sed 's#^attograd/##' | sort)
[[ $private == "$excluded" ]] ||
  fail "docs/Doxyfile's EXCLUDE is not cmake/install.cmake's ATTOGRAD_PRIVATE_HEADERS:"$'\n'"$(diff <(echo "$excluded") <(echo "$private"))"

rc=0
scripts/docs --out "$build/docs" || rc=$?
wait "$selftest" && selftest_rc=0 || selftest_rc=$?
(( rc == 0 )) || fail "the API reference has the problems above"

# A class page shows its header's comments (the filter worked), and the front
# page is the umbrella header's comment.
page=$build/docs/html/classattograd_1_1MultiHeadAttention.html
[[ -f $page ]] || fail "no page for MultiHeadAttention ($page)"
for phrase in "gen draws the initial weights" "Unset by default"; do
  grep -qF "$phrase" "$page" || fail "MultiHeadAttention's page lacks its header comment '$phrase'"
done
grep -qF "Where to start" "$build/docs/html/index.html" || fail "the front page is not attograd/attograd.h's comment"

# The self-test: the planted undocumented function, and only it, is reported.
if (( selftest_rc == 0 )); then sed 's/^/  /' "$work/selftest"; fail "self-test: a tree with an undocumented function passed"; fi
grep -qE '^ +attograd/nn/linear\.h:[0-9]+: attograd: planted_undocumented\(' "$work/selftest" ||
  { sed 's/^/  /' "$work/selftest"; fail "self-test: the planted undocumented function was not reported"; }
if grep -q 'planted_documented' "$work/selftest"; then fail "self-test: a documented function was reported"; fi
grep -q '; 1 problem(s)' "$work/selftest" || { sed 's/^/  /' "$work/selftest"; fail "self-test: expected exactly 1 problem"; }
echo "apidocs: self-test: the planted undocumented function was reported, the documented one was not"
