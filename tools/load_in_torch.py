#!/usr/bin/python3
"""Load an attograd checkpoint into PyTorch and check it computes the same logits.

    build/bin/copy_task eval --checkpoint DIR --dump-batch batch.safetensors
    /usr/bin/python3 tools/load_in_torch.py DIR batch.safetensors

The checkpoint's weights (safetensors, attograd's parameter names) go into the
PyTorch twin of the model (tools/torch_twin.py), built from the config in the
checkpoint's metadata. The batch file holds the inputs attograd ran ("src",
"tgt_in", "src_key_padding_mask") and the logits it produced ("logits"). The
twin runs the same batch; the tool prints the largest difference and exits 1
when it exceeds the tolerance (float32 arithmetic on both sides).
Needs Debian's python3-torch.
"""
import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import torch_twin as tt  # noqa: E402


def newest_model_file(path):
    if not os.path.isdir(path):
        return path
    steps = []
    for name in os.listdir(path):
        m = re.fullmatch(r"step-(\d+)\.model\.safetensors", name)
        if m and os.path.exists(os.path.join(path, f"step-{m.group(1)}.train.safetensors")):
            steps.append((int(m.group(1)), name))
    if not steps:
        sys.exit(f"load_in_torch: no complete checkpoint in {path}")
    return os.path.join(path, max(steps)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="checkpoint directory or .model.safetensors file")
    ap.add_argument("batch", help="batch file written by `copy_task eval --dump-batch`")
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args()

    model_file = newest_model_file(args.checkpoint)
    tensors, metadata = st.load(model_file)
    config = json.loads(metadata["config"])
    twin = tt.Seq2SeqTransformer(tt.Config(**config)).float().eval()
    tt.from_attograd_state(twin, {k: v.to_torch() for k, v in tensors.items()})

    batch, _ = st.load(args.batch)
    src = batch["src"].to_torch()
    tgt_in = batch["tgt_in"].to_torch()
    kpm = batch["src_key_padding_mask"].to_torch()
    ours = batch["logits"].to_torch()
    with torch.no_grad():
        theirs = twin(src, tgt_in, kpm)
    diff = (theirs - ours).abs().max().item()
    agree = (theirs.argmax(-1) == ours.argmax(-1)).float().mean().item()
    print(f"load_in_torch: {os.path.basename(model_file)} in PyTorch {torch.__version__}: logits {list(ours.shape)}, "
          f"max abs diff {diff:.3g} (atol {args.atol}), argmax agreement {100 * agree:.1f}%")
    return 0 if diff <= args.atol else 1


if __name__ == "__main__":
    sys.exit(main())
