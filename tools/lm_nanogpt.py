#!/usr/bin/python3
"""An outside check of `lm train`'s float32 baseline (issue 32): a character
GPT written the way nanoGPT (karpathy/nanoGPT, model.py and train.py) writes
one, sharing no code and no convention with attograd or tools/torch_twin.py,
trained with lm train's default hyperparameters, and scored on the held-out
text three ways.

    /usr/bin/python3 tools/lm_nanogpt.py --make-text FILE   # the prose-and-code text of the comparison
    /usr/bin/python3 tools/lm_nanogpt.py --text FILE [--seed 1] [--steps 600] [--eval-at 200,400,600]
                                         [--bias on|off] [--decay all|2d] [--threads 1]
                                         [--precision f32|products|softmax|loss|autocast|bf16]

The recipe (lm train's defaults, as the issue states them for its twin):
context 128, width 128, 4 heads, 4 blocks, MLP 512, batch 32, dropout 0,
AdamW lr 3e-3, betas (0.9, 0.98), eps 1e-9, weight decay 0.1; 60 warmup
steps then cosine towards 1e-4 (reached one step after the last, as nanoGPT); gradient norm clipped to 1;
GPT-2 init (N(0, 0.02), residual projections 0.02/sqrt(2 * layers)); the
head tied to the token embedding.

What is nanoGPT's and not attograd's: the vocabulary is the text's
characters in sorted order (no <unk>); training windows start anywhere in
the training part (the split is lm's, n - ceil(0.1 n), where nanoGPT takes
int(0.9 n): the same except for rounding, so the held-out windows match);
the lr of iteration it (0-based) is lr * (it + 1) / (warmup + 1) during the
warmup, then min_lr + (lr - min_lr) * (1 + cos(pi * r)) / 2 with
r = (it - warmup) / (steps - warmup); --bias (default on) puts biases on every
Linear and LayerNorm; --decay all decays every parameter (the issue's
twin), 2d only the matrices (nanoGPT's configure_optimizers).

--precision (issue 32's "where bfloat16 would break training", measured one
op at a time; the held-out scoring always runs in float32 on the float32
weights, or on the bf16 weights widened):
  f32       everything float32 (the default);
  products  attograd's autocast policy: every matrix product (the Linears,
            the tied head, Q·Kᵀ and P·V) rounds its inputs to bf16 and sums
            in float32 into a float32 result; backward rounds the incoming
            gradient to bf16 where it enters a product and returns float32
            gradients; softmax, the loss, layer norm, GELU, the residual
            stream, the optimizer and the master weights stay float32;
  softmax   products, and the attention softmax in bf16 (the scores rounded
            to bf16, the probabilities stored in bf16, its backward in bf16);
  loss      products, and the log-softmax of the loss in bf16 (the logits
            rounded to bf16, the log-softmax and its backward in bf16);
  autocast  torch.autocast("cpu", bfloat16) as it is in torch 1.13: products
            return bf16, so GELU and the attention softmax run in bf16; the
            loss runs in float32 on the bf16 logits (1.13 casts losses to
            float32);
  bf16      the whole model in bf16, master weights and AdamW state included
            (its logged train_loss is a bf16 value, about 0.008 apart).
A run that diverges logs NaN losses (not strict JSON; Python reads them).

The held-out loss after each step in --eval-at, three ways, one JSON line each:
  random  nanoGPT's estimate_loss: the mean over 200 batches of 32 windows
          starting anywhere in the held-out part (a new draw each time, from
          a generator of its own, so training is not disturbed);
  first   the first 200 windows of 128 aligned from the held-out part's start
          (what lm train --eval-size 200 scores);
  all     every aligned window of the held-out part (lm train --eval-size
          with at least as many windows as the part holds).
"""
import argparse
import contextlib
import copy
import json
import math
import os
import sys
import time

PRECISIONS = ("f32", "products", "softmax", "loss", "autocast", "bf16")
PROSE = ["Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.3", "GPL-2", "GPL-3", "LGPL-2.1", "LGPL-3",
         "MPL-1.1", "MPL-2.0"]  # /usr/share/common-licenses (the files, not their symlinks)
CODE = ["argparse", "statistics", "fractions", "heapq", "shlex", "glob", "fnmatch", "colorsys", "bisect", "calendar",
        "textwrap"]  # /usr/lib/python3.11 (458k characters in all; the last 10% is textwrap, MPL-2.0 and calendar's end)


def make_text(path):
    """Prose (Debian's license texts) and code (Python modules) alternating file by
    file, so both sides of the 90/10 split hold both; LF line ends only."""
    prose = [open(f"/usr/share/common-licenses/{n}", encoding="utf-8").read() for n in PROSE]
    code = [open(f"/usr/lib/python3.11/{n}.py", encoding="utf-8").read() for n in CODE]
    text = "".join(p + c for p, c in zip(prose, code)).replace("\r\n", "\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}: {len(text)} characters, {len(set(text))} distinct", file=sys.stderr)


def build(torch, nn, F, vocab, a):
    def low(*which):
        """Whether this forward runs one of `which` precisions (never while scoring: a.scoring)."""
        return a.precision in which and not a.scoring

    def rounded(t):
        return t.bfloat16().float()

    class RoundedProduct(torch.autograd.Function):
        """x @ y with both operands rounded to bf16 and float32 sums (a product
        of two bf16 values is exact in float32); backward rounds grad to bf16
        where it enters each product and returns float32 gradients."""

        @staticmethod
        def forward(ctx, x, y):
            xr, yr = rounded(x), rounded(y)
            ctx.save_for_backward(xr, yr)
            return xr @ yr

        @staticmethod
        def backward(ctx, grad):
            xr, yr = ctx.saved_tensors
            g = rounded(grad)
            dx = g @ yr.transpose(-2, -1) if ctx.needs_input_grad[0] else None
            dy = xr.transpose(-2, -1) @ g if ctx.needs_input_grad[1] else None
            if dy is not None and dy.dim() > yr.dim():   # y broadcast over x's batch dimensions
                dy = dy.reshape(-1, *yr.shape).sum(0)
            return dx, dy

    def mm(x, y):
        """x @ y; under the products policy, RoundedProduct."""
        return RoundedProduct.apply(x, y) if low("products", "softmax", "loss") else x @ y

    class Linear(nn.Linear):
        def forward(self, x):
            if not low("products", "softmax", "loss"):
                return super().forward(x)
            y = mm(x, self.weight.t())
            return y if self.bias is None else y + self.bias

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = Linear(a.width, 3 * a.width, bias=a.bias)
            self.c_proj = Linear(a.width, a.width, bias=a.bias)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (z.view(B, T, a.heads, C // a.heads).transpose(1, 2) for z in (q, k, v))
            att = mm(q, k.transpose(-2, -1)) / math.sqrt(C // a.heads)
            if low("softmax"):
                att = att.bfloat16()
            att = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1)
            return self.c_proj(mm(att, v).transpose(1, 2).reshape(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(a.width)
            self.attn = SelfAttention()
            self.ln_2 = nn.LayerNorm(a.width)
            self.c_fc = Linear(a.width, a.mlp, bias=a.bias)
            self.c_proj = Linear(a.mlp, a.width, bias=a.bias)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, a.width)
            self.wpe = nn.Embedding(a.context, a.width)
            self.h = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.width)
            self.lm_head = Linear(a.width, vocab, bias=False)
            self.lm_head.weight = self.wte.weight
            mask = torch.ones(a.context, a.context, dtype=torch.bool).triu(1)
            for blk in self.h:
                blk.attn.register_buffer("mask", mask, persistent=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                    if getattr(m, "bias", None) is not None:
                        nn.init.zeros_(m.bias)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * a.layers))
            if not a.bias:  # torch 1.13's LayerNorm always has a bias: frozen at 0, it is none
                for m in self.modules():
                    if isinstance(m, nn.LayerNorm):
                        m.bias.requires_grad_(False)

        def forward(self, idx, targets):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for blk in self.h:
                x = blk(x)
            logits = self.lm_head(self.ln_f(x))
            if low("loss"):
                logits = logits.bfloat16()
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1)).float()

    return GPT()


def lr_at(it, a):
    if it < a.warmup:
        return a.lr * (it + 1) / (a.warmup + 1)
    r = min(1.0, (it - a.warmup) / max(1, a.steps - a.warmup))
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * r))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make-text", metavar="FILE", help="write the comparison's text and exit")
    ap.add_argument("--text")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--eval-at", default="200,400,600")
    ap.add_argument("--bias", choices=["on", "off"], default="on")
    ap.add_argument("--decay", choices=["all", "2d"], default="all")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", choices=PRECISIONS, default="f32")
    a = ap.parse_args()
    if a.make_text:
        make_text(a.make_text)
        return 0
    if not a.text:
        ap.error("--text FILE (or --make-text FILE)")
    a.bias = a.bias == "on"
    a.context, a.width, a.heads, a.layers, a.mlp, a.batch = 128, 128, 4, 4, 512, 32
    a.lr, a.min_lr, a.warmup, a.wd, a.clip = 3e-3, 1e-4, 60, 0.1, 1.0
    try:
        eval_at = sorted({int(s) for s in a.eval_at.split(",")})
    except ValueError:
        ap.error(f"--eval-at expects comma-separated steps, got {a.eval_at!r}")
    if a.steps < 1 or not eval_at or eval_at[0] < 1 or eval_at[-1] > a.steps:
        ap.error(f"--eval-at must be steps in [1, --steps = {a.steps}]")

    import torch
    import torch.nn.functional as F
    from torch import nn
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    text = open(a.text, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = len(data) - math.ceil(0.1 * len(data))  # lm's split, so "first" and "all" are its windows
    train, val = data[:n], data[n:]
    if len(val) <= a.context or len(train) <= a.context:
        sys.exit(f"lm_nanogpt: the text is too short: {len(train)} training and {len(val)} held-out characters, "
                 f"each must exceed the context ({a.context})")
    a.scoring = False   # set while the held-out loss is scored: float32 throughout
    model = build(torch, nn, F, len(chars), a)
    if a.precision == "bf16":
        model = model.bfloat16()   # the tied head stays tied: .bfloat16() converts each parameter in place
    params = [p for p in model.parameters() if p.requires_grad]
    if a.decay == "all":
        groups = [{"params": params, "weight_decay": a.wd}]
    else:
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.wd},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.98), eps=1e-9)
    n_params = sum(p.numel() for p in params)
    print(json.dumps(dict(kind="setup", text=os.path.abspath(a.text), chars=len(text), vocab=len(chars), train_tokens=len(train),
                          heldout_tokens=len(val), params=n_params, bias=a.bias, decay=a.decay, seed=a.seed,
                          precision=a.precision, torch=torch.__version__)), flush=True)

    def windows(part, starts):
        x = torch.stack([part[s:s + a.context] for s in starts])
        y = torch.stack([part[s + 1:s + 1 + a.context] for s in starts])
        return x, y

    eval_gen = torch.Generator().manual_seed(1_000_003 * a.seed)

    @torch.no_grad()
    def heldout():
        a.scoring = True
        scorer = copy.deepcopy(model).float() if a.precision == "bf16" else model
        scorer.eval()
        out = {}
        losses = []
        for _ in range(200):
            starts = torch.randint(len(val) - a.context, (a.batch,), generator=eval_gen).tolist()
            losses.append(scorer(*windows(val, starts)).item())
        out["random"] = sum(losses) / len(losses)
        aligned = list(range(0, len(val) - a.context, a.context))
        for name, starts in (("first", aligned[:200]), ("all", aligned)):
            total = 0.0
            for i in range(0, len(starts), a.batch):
                chunk = starts[i:i + a.batch]
                total += scorer(*windows(val, chunk)).item() * len(chunk)
            out[name] = total / len(starts)
            out[name + "_windows"] = len(starts)
        model.train()
        a.scoring = False
        return out

    t0 = time.perf_counter()
    for it in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(it, a)
        starts = torch.randint(len(train) - a.context, (a.batch,)).tolist()
        with torch.autocast("cpu", dtype=torch.bfloat16) if a.precision == "autocast" else contextlib.nullcontext():
            loss = model(*windows(train, starts))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        if it + 1 in eval_at:
            print(json.dumps(dict(kind="eval", step=it + 1, train_loss=loss.item(), seconds=time.perf_counter() - t0,
                                  **heldout())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
