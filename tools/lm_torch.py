#!/usr/bin/python3
"""The lm program's default run, in PyTorch: the twin GPT (tools/torch_twin.py)
trained on the same text with the same tokenizer, split, model, init scheme,
optimizer, schedule and clipping, for a side-by-side loss table (docs/lm.md).

    /usr/bin/python3 tools/lm_torch.py [--text FILE] [--steps 600] [--log runs/torch.jsonl]

What differs: the random numbers (the initial weights and the windows are drawn
from torch's generator, not attograd's), so the curves agree in distribution,
not bit for bit. Without --text it reads the fortunes as `lm train` does.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_twin as tt  # noqa: E402

FORTUNES = "/usr/share/games/fortunes"


def read_text(path):
    if path:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    names = sorted(n for n in os.listdir(FORTUNES)
                   if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(FORTUNES, n))
                   and not os.path.islink(os.path.join(FORTUNES, n)))
    return "".join(open(os.path.join(FORTUNES, n), "rb").read().decode("utf-8") for n in names)


def char_ids(text):
    """CharLMTokenizer: id 0 <unk>, then characters by count (ties in UTF-8 byte order)."""
    counts = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    order = sorted(counts, key=lambda c: (-counts[c], c.encode("utf-8")))
    index = {c: i + 1 for i, c in enumerate(order)}
    return torch.tensor([index[c] for c in text], dtype=torch.int64), len(order) + 1


def lr_at(step, a):
    """optim::WarmupCosine (attograd/optim/schedule.cpp)."""
    if step <= a.warmup:
        return a.lr * step / a.warmup
    if step >= a.steps:
        return a.min_lr
    progress = (step - a.warmup) / (a.steps - a.warmup)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text", default="")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--eval-size", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--log", default="")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    ids, vocab = char_ids(read_text(a.text))
    n = len(ids)
    split = n - math.ceil(n * 0.1)
    T = a.context
    c = tt.GPTConfig(vocab=vocab, context=T, d_model=128, heads=4, d_ff=512, layers=4, init="gpt2")
    model = tt.GPT(c).float()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=a.weight_decay)
    held = torch.stack([ids[split + i * T: split + i * T + T + 1]
                        for i in range(min(a.eval_size, (n - split - 1) // T))])
    log = open(a.log, "w") if a.log else None
    print(f"torch: {n} tokens, vocab {vocab}, {sum(p.numel() for p in model.parameters())} parameters")
    for step in range(1, a.steps + 1):
        starts = torch.randint(0, split - T, (a.batch_size,))
        w = torch.stack([ids[s:s + T + 1] for s in starts.tolist()])
        loss = F.cross_entropy(model(w[:, :-1]).reshape(-1, vocab), w[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.step()
        opt.zero_grad(set_to_none=True)
        record = {"step": step, "loss": loss.item(), "lr": lr_at(step, a)}
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                losses = [F.cross_entropy(model(b[:, :-1]).reshape(-1, vocab), b[:, 1:].reshape(-1)).item()
                          for b in held.split(a.batch_size)]
                sizes = [len(b) for b in held.split(a.batch_size)]
            model.train()
            record["eval_loss"] = sum(l * s for l, s in zip(losses, sizes)) / sum(sizes)
            print(f"eval step {step}: loss {record['eval_loss']:.4f}", flush=True)
        if log:
            log.write(json.dumps(record) + "\n")
            log.flush()


if __name__ == "__main__":
    main()
