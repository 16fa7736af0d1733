#!/usr/bin/python3
"""Same learning in bf16 (issue 32): the copy task, real translation and the
language model trained with --precision f32 and --precision bf16 from the same
seeds, their held-out curves side by side, and whether bf16 reaches float32's
quality.

    /usr/bin/python3 tools/bf16_learning.py run --out DIR [--tasks copy,lm,translate] [--seeds 1,2,3] [--jobs 2]
    /usr/bin/python3 tools/bf16_learning.py report --out DIR [--plot FILE.png]

run trains every (task, seed, precision) once, one thread each, `--jobs` at a
time, logging to DIR/<task>-<precision>-s<seed>.jsonl (a finished log is not
run again). The tasks, each the program's own defaults except where noted:
  copy       copy_task train (the tiny model, 1,500 steps)
  lm         lm train on the fortunes (600 steps, cosine)
  translate  translate train on the gettext catalogs, en -> fr, the heads
             study's model (E 128, F 512, 2 + 2 layers, dropout 0.1, label
             smoothing 0.1, 4,096-token batches, lr 2e-3, 2,000 pieces),
             1,000 steps
report prints, per task, the final held-out loss and the task's quality
metric (copy: exact match; translate: BLEU of the greedy valid decode) per
precision, mean [95% t] over seeds, and bf16 minus f32 paired by seed, beside
the issue's rule (tools/precision_rule.py: within 1% of float32's loss, or
within the f32 seeds' standard deviation; the quality metric by that spread
alone), judged on the mean and on the interval's worse end; --plot draws the
held-out curves.
"""
import argparse
import json
import math
import statistics
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads_stats as hs  # noqa: E402  (t_interval)
import precision_rule as rule  # noqa: E402  (the issue's rule, the curves)

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "build" / "bin"
TASKS = {
    "copy": ([str(BIN / "copy_task"), "train"], "exact_match"),
    "lm": ([str(BIN / "lm"), "train"], None),
    "translate": ([str(BIN / "translate"), "train", "--corpus", "gettext", "--src", "en", "--tgt", "fr",
                   "--d-model", "128", "--d-ff", "512", "--enc-layers", "2", "--dec-layers", "2", "--dropout", "0.1",
                   "--label-smoothing", "0.1", "--max-tokens", "4096", "--lr", "0.002", "--vocab-size", "2000",
                   "--steps", "1000", "--beam", "1"], "bleu"),
}
PRECISIONS = ("f32", "bf16")


def log_path(out, task, precision, seed):
    return Path(out) / f"{task}-{precision}-s{seed}.jsonl"


def evals(path):
    return [r for r in map(json.loads, open(path)) if "eval_loss" in r]


def train_losses(path):
    """(step, training loss) at every logged step."""
    return [(r["step"], r["loss"]) for r in map(json.loads, open(path)) if "loss" in r and "eval_loss" not in r]


def finished(path):
    return path.exists() and (path.with_suffix(".done")).exists()


def run(a):
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for task in a.tasks:
        argv, _ = TASKS[task]
        for seed in a.seeds:
            for p in PRECISIONS:
                log = log_path(out, task, p, seed)
                if not finished(log):
                    jobs.append((argv + ["--seed", str(seed), "--precision", p, "--threads", "1", "--log", str(log)], log))

    def one(job):
        argv, log = job
        with open(log.with_suffix(".txt"), "w") as f:
            subprocess.run(argv, check=True, stdout=f, stderr=subprocess.STDOUT)
        # A bf16 run trains in bf16 only where the products run native; elsewhere the program says so and
        # trains in f32, which would compare f32 with f32: refuse that run. (Not --quiet: it hides that line.)
        if "--precision" in argv and argv[argv.index("--precision") + 1] == "bf16":
            out = log.with_suffix(".txt").read_text()
            if "precision bf16: matrix products in bfloat16" not in out:
                raise SystemExit(f"bf16_learning: {log.name} did not train in bf16 here: "
                                 + next((ln for ln in out.splitlines() if ln.startswith("precision bf16")),
                                        "no precision line"))
        log.with_suffix(".done").touch()
        print(f"done: {log.name}", flush=True)

    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(one, jobs))


def report(a):
    out = Path(a.out)
    panels = []
    for task, (_, metric) in TASKS.items():
        seeds = sorted({int(p.stem.rsplit("-s", 1)[1]) for p in out.glob(f"{task}-f32-s*.jsonl")
                        if finished(p) and finished(log_path(out, task, "bf16", int(p.stem.rsplit("-s", 1)[1])))})
        if not seeds:
            continue
        runs = {p: {s: evals(log_path(out, task, p, s)) for s in seeds} for p in PRECISIONS}
        train = {p: {s: train_losses(log_path(out, task, p, s)) for s in seeds} for p in PRECISIONS}
        held = {p: {s: [(e["step"], e["eval_loss"]) for e in ev] for s, ev in r.items()} for p, r in runs.items()}
        panels.append((task, train, held))
        print(f"## {task} (n = {len(seeds)} seeds: {seeds}; the last evaluation, step {runs['f32'][seeds[0]][-1]['step']})\n")
        print("| | f32 | bf16 | bf16 - f32, paired | relative | f32 seed sd | within the rule: mean | worse end |")
        print("|---|---|---|---|---|---|---|---|")
        for name, key in (("held-out loss", "eval_loss"),) + (((metric, metric),) if metric else ()):
            print(row(name, key, [runs["f32"][s][-1].get(key) for s in seeds],
                      [runs["bf16"][s][-1].get(key) for s in seeds]))
        secs = {p: statistics.median(r[s][-1]["train_s"] for s in seeds) for p, r in runs.items()}
        print(f"\nTraining seconds, median over seeds (one thread, two runs at once): f32 {secs['f32']:.0f}, "
              f"bf16 {secs['bf16']:.0f} ({secs['f32'] / secs['bf16']:.2f}x)\n")
    if a.plot and panels:
        # The copy task's losses fall over four decades: a log scale shows its ending.
        rule.draw_curves(a.plot, [("training loss", [(t, tr, t == "copy") for t, tr, _ in panels]),
                                  ("held-out loss", [(t, he, t == "copy") for t, _, he in panels])])


def row(name, key, f32, b16):
    """One table row: f32 and bf16 over seeds, their paired difference and the rule's verdicts. A run whose
    number is missing or not finite (a diverged run: JSON writes NaN as null) fails the rule."""
    diverged = [i for i, (f, b) in enumerate(zip(f32, b16)) if not all(v is not None and math.isfinite(v)
                                                                         for v in (f, b))]
    if diverged:
        return f"| {name} | {len(diverged)} of {len(f32)} seeds diverged | | | | | NO | NO |"
    cf, cb = hs.t_interval(f32), hs.t_interval(b16)
    loss = key == "eval_loss"
    digits = 4 if abs(cf.mean) >= 0.01 else 7  # the copy task's loss ends near 1e-5
    rel = (sum(b16) - sum(f32)) / sum(f32) if sum(f32) else float("nan")
    sd = f"{cf.sd:.{digits}f}" if cf.sd is not None else "n/a"
    diff = [b - f for b, f in zip(b16, f32)]
    if loss and abs(cf.mean) < 1e-3:
        # A loss this near zero (the copy task) is noise around a solved task: judged by its quality metric.
        verdict = ("not judged (loss near 0)", "")
        d = hs.t_interval(diff)
    else:
        # Quality metrics are judged by the seed spread alone; the 1% of the rule is for the loss.
        d, on_mean, at_worse_end = rule.judge(diff, cf.mean if loss else 0.0, cf.sd, higher_is_better=not loss)
        verdict = ("yes" if on_mean else "NO", "n/a (one seed)" if at_worse_end is None
                   else "yes" if at_worse_end else "NO")
    return (f"| {name} | {hs.fmt_ci(cf, digits=digits)} | {hs.fmt_ci(cb, digits=digits)} | "
            f"{hs.fmt_ci(d, digits=digits, signed=True)} | {rel * 100:+.2f}% | {sd} | {verdict[0]} | {verdict[1]} |")

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--tasks", default="copy,lm,translate", type=lambda s: s.split(","))
    r.add_argument("--seeds", default="1,2,3", type=lambda s: [int(x) for x in s.split(",")])
    r.add_argument("--jobs", type=int, default=2)
    p = sub.add_parser("report")
    p.add_argument("--out", required=True)
    p.add_argument("--plot")
    a = ap.parse_args()
    if a.cmd == "run":
        bad = [t for t in a.tasks if t not in TASKS]
        if bad:
            ap.error(f"unknown task {bad}; tasks: {', '.join(TASKS)}")
        run(a)
    else:
        report(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
