#!/usr/bin/python3
"""lm train's float32 baseline against an outside nanoGPT-style twin
(tools/lm_nanogpt.py), several seeds on each side, on a text neither was tuned
on (issue 32; docs/design/lm-baseline.md).

    /usr/bin/python3 tools/lm_baseline.py run --out DIR [--seeds 1,2,3] [--jobs 2] [--lm build/bin/lm]
    /usr/bin/python3 tools/lm_baseline.py report --out DIR

run writes DIR/text.txt (lm_nanogpt.py --make-text) and, per seed, three
one-thread runs of 600 steps: `lm train` scoring every aligned held-out window
(--eval-size larger than the part holds: ours-all-sS.jsonl), `lm train` with
its default 200 windows (ours-first-sS.jsonl; the same training, so the pair
isolates the protocol), and the twin (twin-sS.jsonl, which scores its model
all three ways). report prints, at steps 200 / 400 / 600, the mean [95% t]
over seeds of each, and the differences that matter: ours minus the twin on
the same windows, and each protocol minus "all" on the same models.
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

ROOT = Path(__file__).resolve().parent.parent
STEPS = (200, 400, 600)


def ours_cmd(lm, text, seed, eval_size, log):
    return [lm, "train", "--text", str(text), "--seed", str(seed), "--steps", "600", "--eval-every", "200",
            "--eval-size", str(eval_size), "--log", str(log), "--threads", "1", "--samples", "0", "--quiet"]


def run(a):
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    text = out / "text.txt"
    py = "/usr/bin/python3"
    nano = str(ROOT / "tools" / "lm_nanogpt.py")
    subprocess.run([py, nano, "--make-text", str(text)], check=True)
    jobs = []
    for s in a.seeds:
        jobs.append((ours_cmd(a.lm, text, s, 100000, out / f"ours-all-s{s}.jsonl"), None))
        jobs.append((ours_cmd(a.lm, text, s, 200, out / f"ours-first-s{s}.jsonl"), None))
        jobs.append(([py, nano, "--text", str(text), "--seed", str(s)], out / f"twin-s{s}.jsonl"))

    def one(job):
        cmd, stdout = job
        with open(stdout, "w") if stdout else open(os.devnull, "w") as f:
            subprocess.run(cmd, check=True, stdout=f, env=dict(os.environ, OMP_NUM_THREADS="1"))
        print("done:", " ".join(cmd[:2] + cmd[-4:]), flush=True)

    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(one, jobs))


def ours_losses(path):
    return {r["step"]: r["eval_loss"] for r in map(json.loads, open(path)) if "eval_loss" in r}


def twin_losses(path, how):
    return {r["step"]: r[how] for r in map(json.loads, open(path)) if r.get("kind") == "eval"}


def report(a):
    out = Path(a.out)
    seeds = sorted(int(p.stem.split("-s")[-1]) for p in out.glob("twin-s*.jsonl"))
    series = {"ours, all windows": {s: ours_losses(out / f"ours-all-s{s}.jsonl") for s in seeds},
              "ours, first 200 windows": {s: ours_losses(out / f"ours-first-s{s}.jsonl") for s in seeds}}
    for how, label in (("all", "all windows"), ("first", "first 200 windows"), ("random", "random (estimate_loss)")):
        series[f"twin, {label}"] = {s: twin_losses(out / f"twin-s{s}.jsonl", how) for s in seeds}
    setup = json.loads(open(out / f"twin-s{seeds[0]}.jsonl").readline())

    def cell(values):
        ci = hs.t_interval(values)
        return f"{ci.mean:.4f} [{ci.lo:.4f}, {ci.hi:.4f}]" if len(values) > 1 else f"{values[0]:.4f}"

    print(f"{setup['chars']:,} characters ({setup['vocab']} distinct), held-out {setup['heldout_tokens']:,}; "
          f"twin {setup['params']:,} parameters; seeds {seeds}; mean [95% t] over seeds (n = {len(seeds)})\n")
    print("| held-out loss | " + " | ".join(f"step {s}" for s in STEPS) + " |")
    print("|---|" + "---|" * len(STEPS))
    for name, runs in series.items():
        print(f"| {name} | " + " | ".join(cell([runs[s][k] for s in seeds]) for k in STEPS) + " |")
    pairs = (("ours minus twin, all windows", "ours, all windows", "twin, all windows"),
             ("ours minus twin, first 200 windows", "ours, first 200 windows", "twin, first 200 windows"),
             ("ours: first 200 minus all", "ours, first 200 windows", "ours, all windows"),
             ("twin: first 200 minus all", "twin, first 200 windows", "twin, all windows"),
             ("twin: random minus all", "twin, random (estimate_loss)", "twin, all windows"))
    print("\n| difference, by seed | " + " | ".join(f"step {s}" for s in STEPS) + " |")
    print("|---|" + "---|" * len(STEPS))
    for name, x, y in pairs:
        print(f"| {name} | " + " | ".join(
            cell([series[x][s][k] - series[y][s][k] for s in seeds]) for k in STEPS) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--seeds", default="1,2,3", type=lambda s: [int(x) for x in s.split(",")])
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--lm", default=str(ROOT / "build" / "bin" / "lm"))
    p = sub.add_parser("report")
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    run(a) if a.cmd == "run" else report(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
