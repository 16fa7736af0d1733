#!/usr/bin/env bash
# A copy_task checkpoint (multi-head, then grouped-query) loads into PyTorch (tools/load_in_torch.py) and gives
# the same logits as attograd on one held-out batch. Skipped without torch.
# Usage: scripts/test.d/10-load-in-torch.sh BUILD_DIR
set -euo pipefail
build=$1
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "load-in-torch: skipped (Debian's python3-torch is not installed; scripts/setup --with-torch adds it)"
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$build/bin/copy_task" train --steps 40 --warmup 10 --eval-every 0 --eval-size 16 --samples 0 --quiet \
  --d-model 32 --heads 4 --d-ff 64 --checkpoint-dir "$dir/ckpt" >/dev/null
"$build/bin/copy_task" eval --checkpoint "$dir/ckpt" --eval-size 16 --dump-batch "$dir/batch.safetensors" >/dev/null
/usr/bin/python3 tools/load_in_torch.py "$dir/ckpt" "$dir/batch.safetensors"
# The same with grouped-query attention (2 K/V heads for 4 heads in the decoder).
"$build/bin/copy_task" train --steps 40 --warmup 10 --eval-every 0 --eval-size 16 --samples 0 --quiet \
  --d-model 32 --heads 4 --kv-heads 2 --d-ff 64 --checkpoint-dir "$dir/gqa" >/dev/null
"$build/bin/copy_task" eval --checkpoint "$dir/gqa" --eval-size 16 --dump-batch "$dir/gqa-batch.safetensors" >/dev/null
/usr/bin/python3 tools/load_in_torch.py "$dir/gqa" "$dir/gqa-batch.safetensors"
