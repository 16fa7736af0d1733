#!/usr/bin/python3
"""Where bfloat16 breaks training (issue 32), measured one op at a time on the
outside twin of `lm train` (tools/lm_nanogpt.py, PyTorch): the same model and
recipe trained at each of lm_nanogpt's --precision settings from the same
seeds, each final model scored in float32 on every held-out window.

    /usr/bin/python3 tools/bf16_breaks.py run --out DIR --text FILE [--seeds 1,2,3] [--jobs 2] [--steps 600]
    /usr/bin/python3 tools/bf16_breaks.py report --out DIR [--plot FILE.png]

The settings (lm_nanogpt.py's docstring says exactly what each rounds):
f32; products (attograd's autocast policy); softmax and loss (that policy plus
the attention softmax, or the loss's log-softmax, in bf16); autocast (torch
1.13's CPU autocast, whose bf16 products make GELU and the attention softmax
bf16); bf16 (master weights and optimizer state in bf16 too). The twin is used because
attograd's autocast has no switch that puts the softmax, the loss or the master
weights in bf16, by design.

run writes DIR/<precision>-s<seed>.jsonl (lm_nanogpt's JSON lines, renamed
from .part when the run ends well; a log whose setup matches the request and
whose last evaluation is at --steps is not run again), one thread each,
--jobs at once. report prints, at the f32 runs' last evaluation, per setting
the held-out loss, mean [95% t] over seeds, and minus f32 paired by seed,
with the issue's rule (worse than float32 by at most 1% of its loss or the
f32 seeds' standard deviation; tools/precision_rule.py) judged on the mean and on the
interval's worse end; a run whose loss is not finite is counted as diverged;
then the mean held-out loss of every setting at every evaluation.
"""
import argparse
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads_stats as hs  # noqa: E402  (t_interval)
import precision_rule as rule  # noqa: E402  (the issue's rule, the curves)
from lm_nanogpt import PRECISIONS  # noqa: E402

TWIN = Path(__file__).resolve().parent / "lm_nanogpt.py"


def log_path(out, precision, seed):
    return Path(out) / f"{precision}-s{seed}.jsonl"


def records(path):
    """The log's JSON records; a line cut short (a killed run) is skipped."""
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def evals(path):
    return [r for r in records(path) if r.get("kind") == "eval"]


def finished(path, a, precision, seed):
    """The log is a whole run of this request: its setup's text, seed and precision match and it evaluated at
    every step asked."""
    recs = records(path)
    setup = next((r for r in recs if r.get("kind") == "setup"), None)
    return (setup is not None and setup.get("text") == os.path.abspath(a.text) and setup.get("seed") == seed
            and setup.get("precision") == precision
            and [r["step"] for r in recs if r.get("kind") == "eval"] == eval_steps(a.steps, a.eval_every))


def eval_steps(steps, every):
    return list(range(every, steps + 1, every)) + ([steps] if steps % every else [])


def run(a):
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = eval_steps(a.steps, a.eval_every)
    jobs = [(p, s) for s in a.seeds for p in a.precisions if not finished(log_path(out, p, s), a, p, s)]

    def one(job):
        p, s = job
        log = log_path(out, p, s)
        part = log.with_suffix(".part")
        argv = ["/usr/bin/python3", str(TWIN), "--text", os.path.abspath(a.text), "--seed", str(s),
                "--steps", str(a.steps), "--eval-at", ",".join(map(str, steps)), "--precision", p, "--threads", "1"]
        with open(part, "w") as f:
            subprocess.run(argv, check=True, stdout=f)
        part.replace(log)
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
    if not complete.get("f32"):
        raise SystemExit(f"bf16_breaks report: no f32 run in {out}; hint: bf16_breaks.py run first")
    last = max(ev[-1]["step"] for ev in complete["f32"].values())
    at = {p: {s: ev[-1]["all"] for s, ev in r.items() if ev[-1]["step"] == last} for p, r in complete.items()}
    f32 = {s: v for s, v in at["f32"].items() if math.isfinite(v)}
    sd = hs.t_interval(list(f32.values())).sd if len(f32) > 1 else None
    print(f"Held-out loss on every window (float32 scoring) after {last} steps; mean [95% t] over seeds; minus f32 "
          f"paired by seed; the rule: worse than f32 by at most 1% of it or the f32 seeds' sd "
          f"({'n/a' if sd is None else f'{sd:.4f}'}), on the mean and on the interval's worse end.\n")
    print("| precision | seeds | held-out loss | f32 on the same seeds | minus f32, paired (pairs) | relative | "
          "within the rule: mean | worse end |")
    print("|---|---|---|---|---|---|---|---|")
    for p, by_seed in at.items():
        finite = {s: v for s, v in by_seed.items() if math.isfinite(v)}
        diverged = len(by_seed) - len(finite)
        note = f" ({diverged} diverged)" if diverged else ""
        if len(finite) < 2:
            print(f"| {p} | {len(by_seed)}{note} | {', '.join(f'{v:.4f}' for v in finite.values()) or '-'} | | | | "
                  f"{'NO' if diverged else ''} | |")
            continue
        ci = hs.t_interval(list(finite.values()))
        pairs = {s: v - f32[s] for s, v in finite.items() if s in f32}
        if p == "f32" or len(pairs) < 2:
            print(f"| {p} | {len(by_seed)}{note} | {hs.fmt_ci(ci, digits=4)} | | | | | |")
            continue
        ref = sum(f32[s] for s in pairs) / len(pairs)
        d, on_mean, at_worse_end = rule.judge(list(pairs.values()), ref, sd)
        print(f"| {p} | {len(by_seed)}{note} | {hs.fmt_ci(ci, digits=4)} | {ref:.4f} | "
              f"{hs.fmt_ci(d, digits=4, signed=True)} ({len(pairs)}) | {d.mean / ref * 100:+.2f}% | {'yes' if on_mean and not diverged else 'NO'} "
              f"| {'yes' if at_worse_end and not diverged else 'NO'} |")
    steps = sorted({e["step"] for r in complete.values() for ev in r.values() for e in ev})
    print("\nMean held-out loss over seeds at each evaluation:\n")
    print("| precision | " + " | ".join(f"step {s}" for s in steps) + " |")
    print("|---|" + "---|" * len(steps))
    for p, r in complete.items():
        cells = []
        for st in steps:
            v = [e["all"] for ev in r.values() for e in ev if e["step"] == st]
            cells.append(f"{sum(v) / len(v):.4f} ({len(v)})" if v else "-")
        print(f"| {p} | " + " | ".join(cells) + " |")
    if a.plot:
        series = {p: {s: [(e["step"], e["all"]) for e in ev] for s, ev in r.items()} for p, r in complete.items()}
        rule.draw_curves(a.plot, [("held-out loss (every window, f32 scoring)", [("", series, False)])])


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
