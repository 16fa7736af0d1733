"""The heads study's grids (issue 31, third edition): the language model and
real translation. Plan a grid, measure its cost, run it in parts, and report it
with the statistics of heads_stats.

    H=tools/heads_study.py
    /usr/bin/python3 $H pilot                 # seconds per step per (H, G), on this CPU
    /usr/bin/python3 $H plan                  # the runs, their parts (each <= 2 h), core-minutes
    /usr/bin/python3 $H run --part 1/4        # that part's unfinished runs, 2 at once, then their probes
                                              # and GQA uptrainings (what needs the checkpoints)
    /usr/bin/python3 $H report                # lm-heads.md and lm-heads.json
    /usr/bin/python3 $H plan --grid translate-ko   # the same for en->ko (out: docs/heads-study/translate-ko)
    /usr/bin/python3 $H quick --lm build/bin/lm --translate build/bin/translate --out /tmp/q   # CI

Grids (--grid): `lm` (lm on its fortunes) and `translate-LANG` (translate on
the gettext corpus en -> LANG; the issue asks for fr and ko). One grid per
language, not one grid with a language axis: losses, BLEU and chrF are not
comparable across target languages (other vocabularies; a Hangul syllable is
one chrF character), so every statistic is within one language anyway, and a
grid per directory keeps each comparison paired by seed and each plan's parts
independent.

Every subcommand takes --out DIR (default docs/heads-study/<grid>) and the grid's
flags (--steps, --eval-every, --eval-size, --warmup, --seeds, --model K=V,
--jobs, --part-hours); a flag not given takes the grid's default.

Everything lives under --out: grid.json (the grid the runs belong to; another
grid in the same directory is refused), pilot.json, plan.json (the parts,
frozen when first written, so every `run --part i/n` agrees on which runs are
its own), runs/<id>/{log.jsonl, ckpt/, stdout.txt, probe.json, heldout.json},
gqa/from-<steps>/s<seed>-<variant>/. The default directory is the study's
committed data: everything but the checkpoints (ckpt/, gqa's converted/ and
the pilot's runs are ignored by git). A fresh checkout therefore reports every
committed run but cannot probe, uptrain or resume one: a part's `probe` and
`gqa` run while its checkpoints are still on the machine (the parts hold
whole seeds for this reason).

The C++ programs train and measure (`train --log`: step and eval records with
the held-out loss, elapsed_s and train_s, the seconds in training steps only;
translate's eval records add greedy BLEU and chrF on the --eval-size first
valid sentences, and its final test decode, beam 4 on the test part, is only
in stdout's `test (...)` line); these files only read their output. Needs numpy
and scipy (heads_stats).

This file is the command line and `quick`; the rest is by concern:
heads_grids.py (the grids as data, each run's command line, grid.json),
heads_runs.py (pilot, cost and parts, plan, run, reading the runs' logs) and
heads_report.py (the analysis and its markdown).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import heads_report  # noqa: E402
from heads_grids import saved_grid  # noqa: E402
from heads_grids import command, grid_kind, quick_grid, quick_translate_grid, runs_of  # noqa: E402
from heads_report import SECTIONS, TRANSLATE_SECTIONS, cmd_report, report_paths  # noqa: E402
from heads_runs import (PART_HOURS, cmd_pilot, cmd_plan, cmd_run, eval_records, program_of,  # noqa: E402
                        read_log, read_test, run_status, status)


# ---------------------------------------------------------------------------
# quick: both pipelines on tiny grids (CI)

HEAD_SECTIONS = ("## Pruning", "## Importance against ablation", "## Head roles")
LM_SECTIONS = ("## Final loss on the whole held-out text", "## GQA conversion", "## Decode cost against H and G",
               "## The no-mask control")

def quick_grid_run(args, grid, out):
    """One quick grid end to end in `out`: pilot, plan in 2 parts, an interrupted
    run, both parts, the report; returns the problems found in the report."""
    saved = out / "grid.json"
    if saved.exists() and json.loads(saved.read_text()).get("name") != grid.name:
        raise SystemExit(f"heads_study quick: {out} holds another grid's runs; hint: another --out")
    for name in ("runs", "pilot", "gqa"):
        shutil.rmtree(out / name, ignore_errors=True)     # a fresh run every time, never stale logs
    for path in ("grid.json", "plan.json", "pilot.json", "cost.json", "cost-b32.json", *report_paths(grid, out)):
        (out / path).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    args.out = str(out)
    args.pilot_steps, args.parts = 10, 2
    cmd_pilot(args, grid)
    plan = cmd_plan(args, grid)
    # An interrupted run: the first of part 1 stops at its next-to-last evaluation
    # (with its checkpoint); `run` must find it partial and resume it, not start over.
    evals = grid.evals()
    first = next(r for r in runs_of(grid) if r["id"] == plan["parts"][0]["runs"][0])
    d = out / "runs" / first["id"]
    d.mkdir(parents=True)
    with open(d / "stdout.txt", "w") as sink:
        subprocess.run(command(first, program_of(grid, args), out) + ["--stop-after", str(evals[-2])], stdout=sink,
                       stderr=subprocess.STDOUT, check=True)
    interrupted = status(read_log(d / "log.jsonl"), first["steps"])
    for i in (1, 2):
        args.part = f"{i}/2"
        cmd_run_part(args, grid)   # then probe and gqa (again below: finding nothing left to do)
    problems = []
    if grid.program == "translate":
        problems += quick_test_decode_missing(args, grid, out, plan)
    cmd_probe(args)
    if grid.program == "lm":
        cmd_gqa(args)
        cmd_cost(args)
    res = cmd_report(args)
    md = report_paths(grid, out)[0].read_text()
    ids = [r["id"] for r in runs_of(grid)]
    wanted = SECTIONS + HEAD_SECTIONS + (TRANSLATE_SECTIONS if grid.program == "translate" else LM_SECTIONS)
    problems += [f"section {s!r} missing" for s in wanted if s not in md]
    problems += [f"run {r} not in the convergence table" for r in ids if f"| {r} |" not in md]
    if res["missing"]:
        problems.append(f"runs missing: {res['missing']}")
    if res["runs_complete"] != len(ids) or not res["trend"] or not res["paired"]:
        problems.append("expected every run complete, a trend and a paired comparison")
    if any(r["reached"] != r["n"] for r in res["target"]["per_H"]):
        problems.append("every H-grid run must reach the target (it is the worst final loss plus a margin)")
    problems += quick_heads_problems(res, grid)
    if grid.program == "translate":
        t = res["test"]
        if not t["bleu"]["paired"] or not t["bleu"]["trend"] or any(r["n"] != len(grid.seeds)
                                                                    for r in t["bleu"]["per_config"]):
            problems.append(f"expected test BLEU for every seed, a paired comparison and a trend: {t['bleu']}")
        if not res["target_bleu"] or any(r["reached"] != r["n"] for r in res["target_bleu"]["per_H"]):
            problems.append("every H-grid run must reach the valid BLEU target")
    if interrupted != f"partial at step {evals[-2]}":
        problems.append(f"the interrupted run {first['id']} was {interrupted!r}, "
                        f"expected 'partial at step {evals[-2]}'")
    ev = eval_records(read_log(d / "log.jsonl"))
    # Resumed, its last process trained the last eval's steps (elapsed_s) while train_s counts them all.
    if not ev or ev[-1]["elapsed_s"] >= ev[-1]["train_s"]:
        problems.append(f"the interrupted run {first['id']} was restarted, not resumed: {ev[-1:]}")
    if [e["step"] for e in ev] != evals or any(b["train_s"] < a["train_s"] for a, b in zip(ev, ev[1:])):
        problems.append(f"the resumed run's evaluations are not steps {evals} with growing train_s: {ev}")
    return [f"{grid.name}: {p}" for p in problems]


def quick_heads_problems(res, grid):
    """The lm grid's probe and GQA sections hold every seed."""
    problems = []
    heads, gqa = res.get("heads"), res.get("gqa_conversion")
    if not heads or heads["missing"] or [r["n"] for r in heads["per_H"]] != [len(grid.seeds)] * len(grid.heads):
        problems.append(f"expected a probe of every H-grid run: {heads and heads['missing']}")
    if grid.program == "translate":
        if heads and heads["scopes"] != ["all", "encoder_self", "decoder_self", "decoder_cross"]:
            problems.append(f"expected pruning within each attention kind: {heads['scopes']}")
        return problems
    nm = res.get("no_mask")
    layers = int(grid.model.get("layers", 1))
    if not nm or nm["missing"] or sorted(r["seed"] for r in nm["runs"]) != sorted(grid.control_seeds) or any(
            None in (r["loss"], r["twin_loss"], r["sample"], r["twin_sample"])
            or len(r["heads"]) != layers * grid.control_heads for r in nm["runs"]):
        problems.append(f"expected the no-mask control's losses, every head and both samples per seed: {nm}")
    if not gqa or any(v["n"] != len(grid.seeds) for r in gqa["rows"] for v in r["loss"].values()):
        problems.append(f"expected every GQA uptraining of every seed at every budget: {gqa}")
    elif any(r.get("vs_scratch") is None for r in gqa["rows"] if "vs_control" in r):
        problems.append("expected the uptrained GQA models paired with GQA from scratch")
    return problems


def quick_test_decode_missing(args, grid, out, plan):
    """A translate run killed during its final test decode (its stdout cut before
    the test line) is not complete, and `run` finishes it without training."""
    rid = plan["parts"][1]["runs"][0]
    run = next(r for r in runs_of(grid) if r["id"] == rid)
    d = out / "runs" / rid
    text = (d / "stdout.txt").read_text()
    (d / "stdout.txt").write_text(text[:text.index("\ntest (") + 1])
    before = read_log(d / "log.jsonl")
    st = run_status(grid, run, out)
    args.part = "2/2"
    cmd_run(args, grid)
    problems = []
    if st != "trained, test decode missing":
        problems.append(f"{rid} without its test line was {st!r}, expected 'trained, test decode missing'")
    if read_test(d / "stdout.txt") is None:
        problems.append(f"`run` did not finish {rid}'s test decode")
    if [r for r in read_log(d / "log.jsonl") if "loss" in r and "eval_loss" not in r] != \
            [r for r in before if "loss" in r and "eval_loss" not in r]:
        problems.append(f"finishing {rid}'s test decode trained again")
    return problems


def cmd_quick(args):
    """Both programs' pipelines on tiny grids, in <out>/lm and <out>/translate; checks the reports."""
    out = Path(args.out)
    text = out / "text.txt"
    out.mkdir(parents=True, exist_ok=True)
    words = "the quick brown fox jumps over a lazy dog and then sleeps under an old tree".split()
    lines = [" ".join(words[(7 * i + 3 * j) % len(words)] for j in range(8)) for i in range(300)]
    text.write_text("\n".join(lines) + "\n")
    grids = [(quick_grid(text), out / "lm"), (quick_translate_grid(), out / "translate")]
    problems, t0 = [], time.time()
    for grid, sub in grids:
        problems += quick_grid_run(args, grid, sub)
    if problems:
        raise SystemExit("heads_study quick: " + "; ".join(problems))
    print(f"quick: ok ({', '.join(f'{g.name}: {len(runs_of(g))} runs' for g, _ in grids)}, every section present, "
          f"{time.time() - t0:.1f} s)")


def lm_grid_of(args, what):
    grid = saved_grid(args.out)
    if grid.program != "lm":
        raise SystemExit(f"heads_study {what}: head_probe reads lm checkpoints; {args.out} holds a {grid.program} grid")
    return grid


def cmd_run_part(args, grid=None):
    """A part's runs, then what needs their checkpoints: the probes and, for an
    lm grid with GQA runs, the uptrainings of the part's seeds. The checkpoints
    are not committed, so a part is one session's work, done when this returns."""
    cmd_run(args, grid)
    cmd_probe(args)
    grid = saved_grid(args.out)
    if grid.program == "lm" and grid.gqa_heads:
        cmd_gqa(args)


def cmd_probe(args):
    import heads_probe   # numpy and scipy are checked in main
    heads_probe.cmd_probe(args, saved_grid(args.out))


def cmd_gqa(args):
    import heads_gqa
    grid = lm_grid_of(args, "gqa")
    if not grid.gqa_heads:
        raise SystemExit(f"heads_study gqa: the grid in {args.out} has no GQA runs to compare with")
    heads_gqa.cmd_gqa(args, grid)


def cmd_cost(args):
    import heads_gqa
    grid = lm_grid_of(args, "cost")
    probes = sorted(Path(args.out).glob("runs/*/probe.json"))
    if not probes:
        raise SystemExit("heads_study cost: times the grid's model at its vocabulary, read from a probe; hint: "
                         "heads_study.py probe first")
    heads_gqa.cmd_cost(args, grid, json.loads(probes[0].read_text())["config"]["vocab"])


# ---------------------------------------------------------------------------
# The command line

def add_common(p, grid_steps=True):
    """The flags every subcommand takes (after its name: `plan --out DIR`). The
    grid's flags default to None: the grid's own default (GRID_DEFAULTS)."""
    bin_dir = Path(__file__).resolve().parent.parent / "build" / "bin"
    p.add_argument("--out", default=None, help="the study's directory (default docs/heads-study/<grid>)")
    p.add_argument("--lm", default=str(bin_dir / "lm"), help="the lm program (default build/bin/lm)")
    p.add_argument("--translate", default=str(bin_dir / "translate"),
                   help="the translate program (default build/bin/translate)")
    p.add_argument("--head-probe", default=str(bin_dir / "head_probe"),
                   help="the head_probe program (default build/bin/head_probe): probe, gqa")
    p.add_argument("--grid", default="lm", help="lm, or translate-LANG for the gettext corpus en -> LANG "
                   "(translate-fr, translate-ko) (default lm)")
    if grid_steps:
        p.add_argument("--steps", type=int, default=None, help="steps per run (default: lm 12000, translate 2000)")
    p.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every N steps (default: lm 100, translate 50)")
    p.add_argument("--eval-size", type=int, default=None,
                   help="held-out examples per evaluation (default: lm 200 windows, translate 500 sentences)")
    p.add_argument("--warmup", type=int, default=None,
                   help="linear warmup steps, then a constant lr (default: lm 60, translate 300)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 5)")
    p.add_argument("--model", action="append", metavar="K=V",
                   help="a model or training flag of the program for every run, overriding the grid's "
                   "(repeatable), e.g. --model d-model=256 --model lr=0.001")
    p.add_argument("--jobs", type=int, default=2, help="runs at once, 1 thread each (default 2)")
    p.add_argument("--part-hours", type=float, default=PART_HOURS, help="the longest a part may take (default 2)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="the runs, their parts and core-minutes")
    add_common(p)
    p.add_argument("--parts", type=int, default=None, help="this many parts (default: the fewest within --part-hours)")
    p = sub.add_parser("pilot", help="seconds per step for each (H, G), written to <out>/pilot.json")
    add_common(p, grid_steps=False)
    p.set_defaults(steps=None)   # the grid's; seconds per step do not depend on it
    p.add_argument("--steps", dest="pilot_steps", type=int, default=20, help="steps per pilot run (default 20)")
    p = sub.add_parser("run", help="one part's unfinished runs, then their probes and (lm) GQA uptrainings")
    add_common(p)
    p.add_argument("--part", required=True, help="i/n, as plan printed")
    add_common(sub.add_parser("probe", help="head_probe lm on every complete run's last checkpoint (lm grids)"))
    add_common(sub.add_parser("gqa", help="the multi-head runs converted to GQA and uptrained, with controls "
                                          "(lm grids)"))
    add_common(sub.add_parser("cost", help="decode ms/token and KV-cache bytes against H and G at the grid's "
                                           "width (lm grids), <out>/cost.json"))
    add_common(sub.add_parser("report", help="<out>/<program>-heads.md and .json"))
    add_common(sub.add_parser("quick", help="both pipelines on tiny grids, in <out>/lm and <out>/translate (CI)"))
    args = ap.parse_args(argv)
    if heads_report.hs is None:
        print("heads_study: needs Debian's python3-numpy and python3-scipy (scripts/setup): "
              f"{heads_report.IMPORT_ERROR}", file=sys.stderr)
        return 77
    grid_kind(args.grid)
    if args.out is None:
        args.out = "/tmp/heads-quick" if args.cmd == "quick" else str(Path(__file__).resolve().parent.parent / "docs" / "heads-study" / args.grid)
    {"plan": cmd_plan, "pilot": cmd_pilot, "run": cmd_run_part, "report": cmd_report, "quick": cmd_quick,
     "probe": cmd_probe, "gqa": cmd_gqa, "cost": cmd_cost}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
