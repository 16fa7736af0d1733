#!/usr/bin/env bash
# Memory stays flat: train the copy task for 3,000 steps (checkpointing every
# 500) while sampling the process's memory every 50 ms from /proc/PID/status,
# each sample tagged with the last step in the JSON log. The figure judged is
# RssAnon, the heap and other anonymous memory, where leaked tensors, graph
# nodes and saved buffers would sit; VmRSS adds the pages of the binary and
# its libraries (OpenBLAS, ...), mostly constant, and is printed too.
# Every batch has the same shape: the caching allocator (attograd/autograd/backend/allocator.h)
# keeps a free list per block size for good, so with random lengths a rare
# short batch late in the run adds a bounded step that is not a leak.
# Warm-up is the first third of the run (the first checkpoints included); the
# baseline is the largest RssAnon over the next 500 steps, and the run fails
# if the largest over the rest of the training (before the final evaluation)
# is 5% or more above it.
# Usage: scripts/test.d/40-memory.sh BUILD_DIR [STEPS]   (prints its figures)
set -euo pipefail
bin=${1:?usage: $0 BUILD_DIR [STEPS]}/bin/copy_task
steps=${2:-3000}
[[ -x $bin ]] || { echo "memory: $bin not built" >&2; exit 1; }
work=$(mktemp -d /tmp/attograd_memory.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$bin" train --d-model 32 --heads 2 --d-ff 64 --enc-layers 1 --dec-layers 1 --max-len 12 --symbols 8 \
  --min-length 8 --max-length 8 --batch-size 8 --steps "$steps" --warmup 100 --eval-every 0 --eval-size 16 \
  --checkpoint-dir "$work/ck" --checkpoint-every 500 --log "$work/log.jsonl" --samples 0 --threads 1 --quiet \
  > "$work/out.log" 2>&1 &
pid=$!
: > "$work/samples"
while kill -0 "$pid" 2>/dev/null; do
  anon= rss= step=0
  while read -r key value _; do
    case $key in RssAnon:) anon=$value ;; VmRSS:) rss=$value ;; esac
  done < "/proc/$pid/status" 2>/dev/null || true
  last=$(tail -c 300 "$work/log.jsonl" 2>/dev/null || true)
  [[ $last =~ .*\"step\":([0-9]+) ]] && step=${BASH_REMATCH[1]}
  [[ -n $anon && -n $rss ]] && echo "$step $anon $rss" >> "$work/samples"
  sleep 0.05
done
wait "$pid" || { echo "memory: training failed"; cat "$work/out.log"; exit 1; }
awk -v steps="$steps" '
  { n++; if ($3 > peak) peak = $3 }
  $1 >= steps / 3 && $1 < steps / 3 + 500 { if ($2 > base) base = $2; if ($3 > base_rss) base_rss = $3; nb++ }
  $1 >= steps / 3 + 500 && $1 < steps { if ($2 > late) late = $2; if ($3 > late_rss) late_rss = $3; nl++ }
  END {
    if (!nb || !nl) { printf "memory: too few samples (%d) to judge\n", n; exit 1 }
    growth = 100 * (late - base) / base
    printf "memory: %d steps, %d samples; heap (RssAnon) after warm-up %.2f MB, later %.2f MB: growth %+.2f%% (limit 5%%); " \
           "VmRSS %.2f -> %.2f MB (%+.2f%%), peak %.2f MB\n", steps, n, base / 1024, late / 1024, growth,
           base_rss / 1024, late_rss / 1024, 100 * (late_rss - base_rss) / base_rss, peak / 1024
    exit growth < 5 ? 0 : 1
  }' "$work/samples"
