#!/usr/bin/env bash
# examples/bench at a few steps: its output lines have every field scripts/bench
# reads, and decoding with the KV cache gives the same tokens as without.
# Checks the format only, never the timings. $1: the Release build dir.
set -euo pipefail
bin=${1:?usage: bench_smoke.sh BUILD_DIR}/bin/bench
cmake --build "$1" --target bench >/dev/null
out=$("$bin" --config tiny --threads 1 --warmup 1 --steps 2)
echo "$out"
re_num='[0-9]+(\.[0-9]+)?'
grep -Eq "^bench framework=attograd mode=train config=tiny threads=1 kernel=[A-Za-z0-9]+ steps=2 step_ms=$re_num tok_s=$re_num gflops=$re_num peak_rss_mb=$re_num$" <<<"$out" \
  || { echo "bench_smoke: unexpected train line" >&2; exit 1; }
dec=$("$bin" --decode --config tiny --threads 1 --lengths 3,5 --decode-batch 4 --repeats 1)
echo "$dec"
[[ $(grep -c " cache=" <<<"$dec") == 4 ]] || { echo "bench_smoke: expected 4 decode lines" >&2; exit 1; }
grep -Eq "^bench framework=attograd mode=decode config=tiny threads=1 kernel=[A-Za-z0-9]+ batch=4 len=5 cache=no ms=$re_num tok_s=$re_num peak_rss_mb=$re_num same=yes$" <<<"$dec" \
  || { echo "bench_smoke: unexpected decode line" >&2; exit 1; }
if grep -q "same=no" <<<"$dec"; then echo "bench_smoke: cached and uncached decoding differ" >&2; exit 1; fi
# The table script reads these lines (PyTorch's side absent: only the kernel row and our rows that need no peer).
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
printf '%s\n%s\n' "$out" "$dec" >"$tmp"
python3 "$(dirname "$0")/../../tools/bench_table.py" "$tmp" | grep -q "OpenBLAS kernel" \
  || { echo "bench_smoke: bench_table.py failed" >&2; exit 1; }
echo "bench_smoke: ok"
