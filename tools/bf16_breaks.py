#!/usr/bin/python3
"""Where bfloat16 breaks training (issue 32), measured one op at a time on the
outside twin of `lm train` (tools/lm_nanogpt.py, PyTorch): the same model and
recipe trained at each of lm_nanogpt's --precision settings from the same
seeds, each final model scored in float32 on every held-out window.

    /usr/bin/python3 tools/bf16_breaks.py run --out DIR --text FILE [--seeds 1,2,3] [--jobs 2] [--steps 600]
    /usr/bin/python3 tools/bf16_breaks.py report --out DIR [--plot FILE.png]

The settings (lm_nanogpt.py's docstring says exactly what each rounds):
f32; products (attograd's autocast policy); softmax and loss (that policy plus
the attention softmax, or the loss, in bf16); autocast (torch 1.13's CPU
autocast, whose bf16 products make GELU, softmax and log-softmax bf16); bf16
(master weights and optimizer state in bf16 too). The twin is used because
attograd's autocast has no switch that puts the softmax, the loss or the master
weights in bf16, by design.

run writes DIR/<precision>-s<seed>.jsonl (lm_nanogpt's JSON lines; a log
with its last evaluation is not run again), one thread each, --jobs at once.
report prints per setting the held-out loss at each evaluation and at the end,
mean [95% t] over seeds, and minus f32 paired by seed, with the issue's rule
(within 1% of float32's loss, or within the f32 seeds' standard deviation).
"""
import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads_stats as hs  # noqa: E402  (t_interval)
from lm_nanogpt import PRECISIONS  # noqa: E402

TWIN = Path(__file__).resolve().parent / "lm_nanogpt.py"


def log_path(out, precision, seed):
    return Path(out) / f"{precision}-s{seed}.jsonl"


def evals(path):
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == "eval"]


def eval_steps(steps, every):
    return list(range(every, steps + 1, every)) + ([steps] if steps % every else [])


def run(a):
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = eval_steps(a.steps, a.eval_every)
    jobs = [(p, s) for s in a.seeds for p in a.precisions
            if [e["step"] for e in evals(log_path(out, p, s))][-1:] != [a.steps]]

    def one(job):
        p, s = job
        log = log_path(out, p, s)
        argv = ["/usr/bin/python3", str(TWIN), "--text", a.text, "--seed", str(s), "--steps", str(a.steps),
                "--eval-at", ",".join(map(str, steps)), "--precision", p, "--threads", "1"]
        with open(log, "w") as f:
            subprocess.run(argv, check=True, stdout=f)
        print(f"done: {log.name}", flush=True)

    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(one, jobs))


def report(a):
    out = Path(a.out)
    runs = {p: {} for p in PRECISIONS}
    for path in sorted(out.glob("*-s*.jsonl")):
        p, seed = path.stem.rsplit("-s", 1)
        ev = evals(path)
        if p in runs and ev:
            runs[p][int(seed)] = ev
    complete = {p: r for p, r in runs.items() if r}
    if "f32" not in complete:
        raise SystemExit(f"bf16_breaks report: no f32 run in {out}; hint: bf16_breaks.py run first")
    last = max(e["step"] for r in complete.values() for ev in r.values() for e in ev)
    f32 = {s: ev for s, ev in complete["f32"].items() if ev[-1]["step"] == last}
    sd = hs.t_interval([ev[-1]["all"] for ev in f32.values()]).sd
    print(f"Held-out loss on every window (float32 scoring) after {last} steps; mean [95% t] over seeds; "
          f"minus f32 paired by seed; the rule: within 1% of f32 or within the f32 seeds' sd ({sd:.4f}).\n")
    print("| precision | n | held-out loss | minus f32, paired | relative | within the rule |")
    print("|---|---|---|---|---|---|")
    for p, r in complete.items():
        done = {s: ev for s, ev in r.items() if ev[-1]["step"] == last}
        if not done:
            print(f"| {p} | 0 | (unfinished) | | | |")
            continue
        ci = hs.t_interval([ev[-1]["all"] for ev in done.values()])
        pairs = [done[s][-1]["all"] - f32[s][-1]["all"] for s in done if s in f32]
        if p == "f32" or not pairs:
            print(f"| {p} | {len(done)} | {hs.fmt_ci(ci, digits=4)} | | | |")
            continue
        d = hs.t_interval(pairs)
        f32_mean = sum(f32[s][-1]["all"] for s in done if s in f32) / len(pairs)
        rel = d.mean / f32_mean
        ok = abs(rel) <= 0.01 or (sd is not None and abs(d.mean) <= sd)
        print(f"| {p} | {len(done)} | {hs.fmt_ci(ci, digits=4)} | {hs.fmt_ci(d, digits=4, signed=True)} | "
              f"{rel * 100:+.2f}% | {'yes' if ok else 'NO'} |")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, (p, r) in enumerate(complete.items()):
            for k, (s, ev) in enumerate(sorted(r.items())):
                ax.plot([e["step"] for e in ev], [e["all"] for e in ev], color=f"C{i}", alpha=0.75, lw=1,
                        label=p if k == 0 else None)
        ax.set_xlabel("step")
        ax.set_ylabel("held-out loss (every window, f32 scoring)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"\ndrew {a.plot}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--text", required=True, help="the text (lm_nanogpt.py --make-text FILE writes the baseline's)")
    r.add_argument("--seeds", default="1,2,3", type=lambda s: [int(x) for x in s.split(",")])
    r.add_argument("--precisions", default=",".join(PRECISIONS), type=lambda s: s.split(","))
    r.add_argument("--steps", type=int, default=600)
    r.add_argument("--eval-every", type=int, default=100)
    r.add_argument("--jobs", type=int, default=2)
    p = sub.add_parser("report")
    p.add_argument("--out", required=True)
    p.add_argument("--plot")
    a = ap.parse_args()
    if a.cmd == "run":
        bad = [p for p in a.precisions if p not in PRECISIONS]
        if bad or a.steps < 1 or a.eval_every < 1 or a.jobs < 1 or not a.seeds:
            ap.error(f"--precisions from {', '.join(PRECISIONS)} (got {bad}); --steps, --eval-every, --jobs >= 1")
        run(a)
    else:
        report(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
