#!/usr/bin/env bash
# Memory stays flat: train the copy task for 3,000 steps (checkpointing every
# 500) while sampling the process's resident set size (VmRSS) every 50 ms.
# Warm-up is the first 20% of the samples; the baseline is the largest RSS in
# the next 20%, and the run fails if the largest RSS of the last 40% is more
# than 5% above it (a leak of a few bytes a step adds up to that over the run).
# Usage: scripts/test.d/40-memory.sh BUILD_DIR [STEPS]   (prints its figures)
set -euo pipefail
bin=${1:?usage: $0 BUILD_DIR [STEPS]}/bin/copy_task
steps=${2:-3000}
[[ -x $bin ]] || { echo "memory: $bin not built" >&2; exit 1; }
work=$(mktemp -d /tmp/attograd_memory.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$bin" train --d-model 32 --heads 2 --d-ff 64 --enc-layers 1 --dec-layers 1 --max-len 16 --symbols 8 \
  --min-length 3 --max-length 10 --batch-size 16 --steps "$steps" --warmup 100 --eval-every 0 --eval-size 16 \
  --checkpoint-dir "$work/ck" --checkpoint-every 500 --samples 0 --threads 1 --quiet > "$work/out.log" 2>&1 &
pid=$!
samples=()
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
  [[ -n $rss ]] && samples+=("$rss")
  sleep 0.05
done
wait "$pid" || { echo "memory: training failed"; cat "$work/out.log"; exit 1; }
n=${#samples[@]}
(( n >= 50 )) || { echo "memory: only $n RSS samples; the run was too short to judge"; exit 1; }
printf '%s\n' "${samples[@]}" | awk -v n="$n" -v steps="$steps" '
  { rss[NR] = $1 }
  END {
    for (i = int(n * 0.2) + 1; i <= int(n * 0.4); i++) if (rss[i] > base) base = rss[i]
    for (i = int(n * 0.6) + 1; i <= n; i++) if (rss[i] > late) late = rss[i]
    for (i = 1; i <= n; i++) if (rss[i] > peak) peak = rss[i]
    growth = 100 * (late - base) / base
    printf "memory: %d steps, %d RSS samples; after warm-up %.1f MB, late %.1f MB (growth %+.2f%%, limit 5%%), peak %.1f MB\n",
           steps, n, base / 1024, late / 1024, growth, peak / 1024
    exit growth < 5 ? 0 : 1
  }'
