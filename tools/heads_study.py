"""The heads study's grids (issue 31, third edition): the language model and
real translation. Plan a grid, measure its cost, run it in parts, and report it
with the statistics of heads_stats.

    H=tools/heads_study.py
    /usr/bin/python3 $H pilot                 # seconds per step per (H, G), on this CPU
    /usr/bin/python3 $H plan                  # the runs, their parts (each <= 2 h), core-minutes
    /usr/bin/python3 $H run --part 1/4        # that part's unfinished runs, 2 at once
    /usr/bin/python3 $H report                # lm-heads.md and lm-heads.json
    /usr/bin/python3 $H plan --grid translate-ko   # the same for en->ko (out: runs/heads-translate-ko)
    /usr/bin/python3 $H quick --lm build/bin/lm --translate build/bin/translate --out /tmp/q   # CI

Grids (--grid): `lm` (lm on its fortunes) and `translate-LANG` (translate on
the gettext corpus en -> LANG; the issue asks for fr and ko). One grid per
language, not one grid with a language axis: losses, BLEU and chrF are not
comparable across target languages (other vocabularies; a Hangul syllable is
one chrF character), so every statistic is within one language anyway, and a
grid per directory keeps each comparison paired by seed and each plan's parts
independent.

Every subcommand takes --out DIR (default runs/heads-<grid>) and the grid's
flags (--steps, --eval-every, --eval-size, --warmup, --seeds, --model K=V,
--jobs, --part-hours); a flag not given takes the grid's default.

Everything lives under --out: grid.json (the grid the runs belong to; another
grid in the same directory is refused), pilot.json, plan.json (the parts,
frozen when first written, so every `run --part i/n` agrees on which runs are
its own), runs/<id>/{log.jsonl, ckpt/, stdout.txt}.

The C++ programs train and measure (`train --log`: step and eval records with
the held-out loss, elapsed_s and train_s, the seconds in training steps only;
translate's eval records add greedy BLEU and chrF on the --eval-size first
valid sentences, and its final test decode, beam 4 on the test part, is only
in stdout's `test (...)` line); this file only reads their output. Needs numpy
and scipy (heads_stats).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    import heads_stats as hs  # noqa: E402
except ImportError as e:   # numpy or scipy missing
    hs = None
    _IMPORT_ERROR = e

PART_HOURS = 2.0
SCHEDULE_NOTE = ("schedule: linear warmup then a constant lr (--schedule warmup), not a decaying one (lm's cosine, "
                 "translate's inverse square root): a cosine decay to its floor at the budget flattens every curve by "
                 "construction, and any decay shrinks the steps and with them the slope of the held-out loss, so the "
                 "convergence rule would measure the schedule, not learning that stopped")


# ---------------------------------------------------------------------------
# The grid

@dataclass(frozen=True)
class Grid:
    """A grid's shared settings. program: the C++ program that trains (lm or
    translate); model: its model and training flags (fixed width); text: None
    for lm's default (the fortunes); task: translate's corpus and test flags;
    window: the evaluations the convergence rule fits; margin: the time-to-target
    level is the worst final held-out metric among the H-grid runs, that
    fraction worse."""
    name: str
    steps: int
    eval_every: int
    eval_size: int
    warmup: int
    heads: tuple
    seeds: tuple
    gqa_heads: int            # the H at which G varies (0: no GQA runs)
    gqa_groups: tuple
    control_heads: int        # the H of the no-causal control (0: none)
    control_seeds: tuple
    model: dict = field(default_factory=dict)
    text: str | None = None
    threads: int = 1
    window: int = 5
    threshold: float = 0.005
    margin: float = 0.01
    program: str = "lm"
    task: dict = field(default_factory=dict)

    def evals(self):
        """The eval steps of every run: each eval_every, and the last step."""
        s = list(range(self.eval_every, self.steps + 1, self.eval_every))
        return s if s and s[-1] == self.steps else s + [self.steps]


# lm's default width (E 128, d_ff 512) with 2 blocks and a 64-token context
# instead of 4 and 128: a step costs 0.075 s instead of 0.33 s (one thread, two
# runs at once, Zen 5), so the 37 runs take 2.5 core-hours, not 10.5. The
# question is the heads at a fixed width; depth and context are held fixed.
LM_MODEL = {"d-model": 128, "d-ff": 512, "layers": 2, "context": 64, "batch-size": 32}
# translate's defaults for real sentences (docs/translate.md, the tested config
# of its results table: 2+2 pre-LN layers, d_model 128, d_ff 512, dropout and
# label smoothing 0.1, batches of 4,096 tokens, peak lr 2e-3, a joint 2,000-piece
# vocabulary) written out, so grid.json records them. d_model 128 leaves
# D = 16 per head at H = 8. The lr is held at translate's peak instead of
# decaying from it (SCHEDULE_NOTE); the pilot's curves show whether that holds.
TRANSLATE_MODEL = {"d-model": 128, "d-ff": 512, "enc-layers": 2, "dec-layers": 2, "dropout": 0.1,
                   "label-smoothing": 0.1, "max-tokens": 4096, "lr": 0.002, "vocab-size": 2000}
GRID_DEFAULTS = {"lm": dict(steps=3000, eval_every=100, eval_size=200, warmup=60, seeds=5),
                 # eval_size 500: the whole valid part of a gettext corpus, so valid BLEU is over 500
                 # sentences; warmup 300: translate's tested warmup.
                 "translate": dict(steps=3000, eval_every=100, eval_size=500, warmup=300, seeds=5)}


def lm_grid(steps=3000, eval_every=100, eval_size=200, warmup=60, seeds=5, model=None):
    """The issue's LM grid at lm's default width: H in {1,2,4,8,16} x seeds; G in
    {1,2} at H = 8; the causal mask off at H = 4 for 2 seeds (the control)."""
    s = tuple(range(1, seeds + 1))
    return Grid("lm", steps, eval_every, eval_size, warmup, (1, 2, 4, 8, 16), s, 8, (1, 2), 4, s[:2],
                {**LM_MODEL, **(model or {})})


def translate_grid(lang, steps=3000, eval_every=100, eval_size=500, warmup=300, seeds=5, model=None):
    """The issue's translation grid on the gettext corpus en -> lang: H in
    {1,2,4,8} x seeds; G in {1,2} at H = 8 (translate's --kv-heads: the
    decoder's attention). No causal control: a decoder needs its mask. Every run
    sees the same data: the split depends on --split-seed only (not --seed), and
    each run trains its SentencePiece model on that same training part with a
    fixed seed on one thread, so the models are byte-identical (the report
    checks the corpus hash and the model's SHA-256 across runs)."""
    s = tuple(range(1, seeds + 1))
    return Grid(f"translate-{lang}", steps, eval_every, eval_size, warmup, (1, 2, 4, 8), s, 8, (1, 2), 0, (),
                {**TRANSLATE_MODEL, **(model or {})}, program="translate",
                task={"corpus": "gettext", "src": "en", "tgt": lang, "beam": 4})


def quick_grid(text):
    """The CI grid of lm: every part of the pipeline in seconds (3 evaluations per
    run, so the convergence window is 3)."""
    model = {"d-model": 16, "d-ff": 64, "layers": 1, "context": 16, "batch-size": 8}
    return Grid("quick", 30, 10, 20, 5, (1, 2), (1, 2), 0, (), 0, (), model, str(text), 1, window=3)


def quick_translate_grid():
    """The CI grid of translate: the number-words corpus (no SentencePiece, a
    second a run), H in {1, 2} and G = 1 at H = 2, the test part decoded greedily;
    60 steps, so BLEU leaves 0 and its target means something."""
    model = {"d-model": 32, "d-ff": 64, "enc-layers": 1, "dec-layers": 1, "lr": 0.003}
    return Grid("quick-translate", 60, 20, 50, 10, (1, 2), (1, 2), 2, (1,), 0, (), model, window=3,
                program="translate", task={"corpus": "numbers", "tgt": "fr", "beam": 1})


def run_id(H, G, causal, seed):
    return f"H{H}-G{G}{'' if causal else '-nocausal'}-s{seed}"


def _flags(d):
    return [a for k, v in d.items() for a in (f"--{k}", str(v))]


def runs_of(grid: Grid):
    """The grid as data: one dict per run (id, H, G, causal, seed, steps, args:
    the program's train flags without the run's paths)."""
    configs = [(H, H, True, grid.seeds) for H in grid.heads]
    configs += [(grid.gqa_heads, G, True, grid.seeds) for G in grid.gqa_groups]
    if grid.control_heads:
        configs.append((grid.control_heads, grid.control_heads, False, grid.control_seeds))
    out = []
    for H, G, causal, seeds in configs:
        for seed in seeds:
            args = ["train"] + _flags(grid.task) + _flags(grid.model)
            args += ["--heads", str(H), "--kv-heads", str(G)] + ([] if causal else ["--no-causal"])
            args += ["--seed", str(seed), "--steps", str(grid.steps), "--schedule", "warmup",
                     "--warmup", str(grid.warmup), "--eval-every", str(grid.eval_every),
                     "--eval-size", str(grid.eval_size), "--log-every", str(grid.eval_every),
                     "--threads", str(grid.threads), "--samples", "0", "--quiet", "--keep-last", "1"]
            if grid.text:
                args += ["--text", grid.text]
            out.append(dict(id=run_id(H, G, causal, seed), H=H, G=G, causal=causal, seed=seed,
                            steps=grid.steps, program=grid.program, args=args))
    return out


def command(run, program, out):
    """The full command line of `run` (program: the lm or translate executable) in
    out/runs/<id>/, resuming its checkpoint when there is one.

    translate resumes only from a checkpoint that is there, and otherwise starts
    over with --overwrite: a start killed before its first checkpoint leaves
    nothing to keep but the directory's claim and perhaps its SentencePiece
    models, which a fresh start trains again, identically."""
    d = Path(out) / "runs" / run["id"]
    ckpt = d / "ckpt"
    resume = run.get("program", "lm") == "lm" or any(ckpt.glob("step-*.model.safetensors"))
    return [str(program)] + run["args"] + ["--log", str(d / "log.jsonl"), "--checkpoint-dir", str(ckpt),
                                           "--resume" if resume else "--overwrite"]


# ---------------------------------------------------------------------------
# Cost and parts

def run_seconds(run, grid: Grid, pilot):
    """Estimated wall seconds of one run on one core from the pilot's (H, G) row:
    start-up, steps x seconds per step, and its evaluations. None without a pilot row."""
    row = (pilot or {}).get("configs", {}).get(f"H{run['H']}-G{run['G']}")
    if row is None:
        return None
    return row["startup_s"] + run["steps"] * row["s_per_step"] + len(grid.evals()) * row["eval_s"]


def makespan(costs, jobs):
    """Wall time of `costs` run longest first, each on the first free of `jobs` workers."""
    free = [0.0] * max(1, jobs)
    for c in sorted(costs, reverse=True):
        i = free.index(min(free))
        free[i] += c
    return max(free)


def split_parts(costs: dict, jobs=2, limit_s=PART_HOURS * 3600, parts=None):
    """Runs (id -> seconds) into parts: the fewest parts whose wall time at `jobs`
    at once is at most limit_s each (or exactly `parts`). Longest runs first, each
    to the part with the least work so far; returns a list of id lists, each run
    in exactly one part. A run longer than the limit alone is an error."""
    if not costs:
        raise ValueError("split_parts: expected at least one run, got none")
    if parts is None and max(costs.values()) > limit_s:
        worst = max(costs, key=costs.get)
        raise ValueError(f"split_parts: run {worst} alone takes {costs[worst] / 3600:.2f} h, over the "
                         f"{limit_s / 3600:g} h limit of a part; hint: fewer --steps, or a longer part limit")

    def assign(n):
        bins = [[] for _ in range(n)]
        load = [0.0] * n
        for rid in sorted(costs, key=lambda r: (-costs[r], r)):
            i = load.index(min(load))
            bins[i].append(rid)
            load[i] += costs[rid]
        return [sorted(b, key=list(costs).index) for b in bins]

    if parts is not None:
        if not 1 <= parts <= len(costs):
            raise ValueError(f"split_parts: expected 1 <= parts <= {len(costs)} (the runs), got {parts}")
        return assign(parts)
    for n in range(1, len(costs) + 1):
        bins = assign(n)
        if all(makespan([costs[r] for r in b], jobs) <= limit_s for b in bins):
            return bins
    return assign(len(costs))


def make_plan(grid: Grid, pilot, jobs=2, parts=None, limit_s=PART_HOURS * 3600):
    """The parts with their runs, core-minutes and wall estimates. Without a
    pilot the runs are split by count (cost unknown) into `parts` (default 1)."""
    runs = runs_of(grid)
    est = {r["id"]: run_seconds(r, grid, pilot) for r in runs}
    measured = all(v is not None for v in est.values())
    costs = est if measured else {r["id"]: float(r["steps"]) for r in runs}
    bins = split_parts(costs, jobs, limit_s if measured else float("inf"), parts if measured or parts else 1)
    out = []
    for b in bins:
        core = sum(est[r] for r in b) if measured else None
        wall = makespan([est[r] for r in b], jobs) if measured else None
        out.append(dict(runs=b, core_minutes=None if core is None else core / 60,
                        wall_minutes=None if wall is None else wall / 60))
    return dict(grid=grid.name, jobs=jobs, limit_hours=limit_s / 3600, measured=measured, parts=out)


# ---------------------------------------------------------------------------
# Logs

def read_log(path):
    """The records of a run's log; a line cut short by a kill is skipped (lm drops it on resume)."""
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        pass
    return out


def eval_records(records):
    """The held-out evaluations in step order, the last record of a step winning."""
    by_step = {r["step"]: r for r in records if "eval_loss" in r}
    return [by_step[s] for s in sorted(by_step)]


def status(records, steps):
    """'complete' (an eval record at the final step), 'partial at step N' or 'missing'."""
    ev = eval_records(records)
    if ev and ev[-1]["step"] >= steps:
        return "complete"
    last = max((r.get("step", 0) for r in records), default=None)
    return "missing" if last is None else f"partial at step {last}"


TEST_LINE = re.compile(r"^test \((\d+) sentences[^)]*\): loss (\S+)\s+token accuracy (\S+)%\s+exact match (\S+)%"
                       r"\s+BLEU (\S+)\s+chrF (\S+)\s*$")
CORPUS_HASH = re.compile(r"^total: .* hash ([0-9a-f]+)\s*$")


def read_test(stdout_path):
    """translate's final test decode from a run's stdout (its last `test (...)`
    line: a resumed run appends to the file): dict(sentences, loss, bleu, chrf),
    or None when the run has not reached it."""
    try:
        lines = Path(stdout_path).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        m = TEST_LINE.match(line)
        if m:
            return dict(sentences=int(m[1]), loss=float(m[2]), bleu=float(m[5]), chrf=float(m[6]))
    return None


def data_identity(run_dir):
    """What a run trained on: the gettext manifest's corpus hash (last in its stdout)
    and the SHA-256 of its SentencePiece model; None for what it lacks (the
    number corpus has neither)."""
    d = Path(run_dir)
    corpus = None
    try:
        for line in (d / "stdout.txt").read_text(encoding="utf-8", errors="replace").splitlines():
            m = CORPUS_HASH.match(line)
            corpus = m[1] if m else corpus
    except FileNotFoundError:
        pass
    spm = d / "ckpt" / "sentencepiece.model"
    return dict(corpus_hash=corpus, spm_sha256=hashlib.sha256(spm.read_bytes()).hexdigest() if spm.exists() else None)


def run_status(grid: Grid, run, out):
    """status() of a run's log; for translate, 'complete' also needs the final
    test decode in its stdout (a run killed during it is 'trained, test decode
    missing', and `run` finishes it: translate --resume at the last step only
    evaluates and tests)."""
    d = Path(out) / "runs" / run["id"]
    st = status(read_log(d / "log.jsonl"), run["steps"])
    if st == "complete" and grid.program == "translate" and read_test(d / "stdout.txt") is None:
        return "trained, test decode missing"
    return st


# ---------------------------------------------------------------------------
# The target and the report

def choose_target(finals, margin):
    """The time-to-target level: the worst final held-out loss among `finals`
    times (1 + margin), so every one of those runs reaches it."""
    if not finals:
        raise ValueError("choose_target: expected final losses of at least one run, got none")
    return max(finals) * (1 + margin)


def _ci(values, digits=3):
    return hs.fmt_ci(hs.t_interval(values), digits=digits)


def _p(p):
    return "n/a" if p is None else f"{p:.3g}"


def _config(k):
    return dict(zip(("H", "G", "causal"), k))


def _per_config(groups, value, digits):
    """One row per configuration: the mean of value(run) over seeds with its t-interval."""
    rows = []
    for k in sorted(groups):
        ci = hs.t_interval([value(r) for r in groups[k].values()])
        rows.append(dict(_config(k), mean=ci.mean, lo=ci.lo, hi=ci.hi, n=ci.n, text=hs.fmt_ci(ci, digits=digits)))
    return rows


def _paired(groups, ref, value, digits):
    """b - a paired by seed for every configuration b against its a (ref for the
    H grid and the control, multi-head attention at the same H for G < H), with
    Holm's adjustment over each family of p-values."""
    comps = []
    for k in sorted(groups):
        if ref is None or k == ref:
            continue
        base = ref if k[0] == k[1] else (k[0], k[0], True)   # GQA against MHA at its own H
        if base not in groups:
            continue
        seeds = sorted(set(groups[k]) & set(groups[base]))
        if len(seeds) < 2:
            continue
        d = hs.paired({s: value(groups[base][s]) for s in seeds}, {s: value(groups[k][s]) for s in seeds})
        comps.append(dict(a=_config(base), b=_config(k), diff=d.diff.mean, lo=d.diff.lo, hi=d.diff.hi, n=d.n,
                          seeds=list(seeds), p_t=d.p_t, p_wilcoxon=d.p_wilcoxon, wilcoxon_min_p=d.wilcoxon_min_p,
                          text=hs.fmt_ci(d, digits=digits, signed=True)))
    for name in ("p_t", "p_wilcoxon"):
        idx = [i for i, c in enumerate(comps) if c[name] is not None]
        adj = hs.holm([comps[i][name] for i in idx]) if idx else []
        for i, a in zip(idx, adj):
            comps[i][name + "_holm"] = a
    return comps


def _trend(trend_runs, value):
    if len({r["H"] for r in trend_runs}) < 2 or len(trend_runs) < 3:
        return None
    t = hs.trend([r["H"] for r in trend_runs], [value(r) for r in trend_runs], strata=[r["seed"] for r in trend_runs])
    return dict(rho=t.rho, p=t.p, n=t.n, exact=t.exact, strata=t.strata)


def _time_to(trend_runs, grid, metric, higher_is_better, what):
    """Steps and train seconds to the level every H-grid run reaches: the worst
    final value of `metric` (an eval record's key) made `margin` worse."""
    finals = [r["evals"][-1][metric] for r in trend_runs]
    if higher_is_better:
        target = min(finals) * (1 - grid.margin)
        how = (f"the worst final {what} among the {len(trend_runs)} H-grid runs x (1 - {grid.margin:g}) = "
               f"{target:.4f}")
    else:
        target = choose_target(finals, grid.margin)
        how = (f"the worst final {what} among the {len(trend_runs)} H-grid runs x (1 + {grid.margin:g}) = "
               f"{target:.4f}")
    per_h = defaultdict(list)
    for r in trend_runs:
        ev = r["evals"]
        t = hs.time_to_target([e["step"] for e in ev], [e["train_s"] for e in ev], [e[metric] for e in ev],
                              target, higher_is_better=higher_is_better)
        per_h[r["H"]].append(dict(id=r["id"], reached=t.reached, step=t.step, seconds=t.seconds))
    rows = []
    for H in sorted(per_h):
        got = [x for x in per_h[H] if x["reached"]]
        row = dict(H=H, n=len(per_h[H]), reached=len(got))
        if got:
            row["steps"] = _ci([x["step"] for x in got], 0)
            row["seconds"] = _ci([x["seconds"] for x in got], 2)
        rows.append(row)
    return dict(metric=metric, what=what, level=target, margin=grid.margin, threads=grid.threads,
                per_run=dict(per_h), per_H=rows, how=how)


def _data_check(done, out):
    """Whether every run saw the same data: the distinct corpus hashes and
    SentencePiece models over the complete runs (one of each when identical)."""
    ids = {r["id"]: data_identity(Path(out) / "runs" / r["id"]) for r in done}
    res = {}
    for key in ("corpus_hash", "spm_sha256"):
        seen = defaultdict(list)
        for rid, d in ids.items():
            if d[key] is not None:
                seen[d[key]].append(rid)
        res[key] = dict(seen)
    return res


def analyse(grid: Grid, out):
    """Every number of the report as data (the .json), from the runs' logs (and,
    for translate, their stdout's test line)."""
    runs = runs_of(grid)
    done, missing = [], []
    for r in runs:
        d = Path(out) / "runs" / r["id"]
        st = run_status(grid, r, out)
        if st != "complete":
            missing.append(dict(id=r["id"], status=st))
            continue
        ev = eval_records(read_log(d / "log.jsonl"))
        evals = [dict(step=e["step"], loss=e["eval_loss"], train_s=e["train_s"],
                      **{k: e[k] for k in ("bleu", "chrf") if k in e}) for e in ev]
        run = dict(r, evals=evals, final=ev[-1]["eval_loss"])
        if grid.program == "translate":
            run["test"] = read_test(d / "stdout.txt")
        done.append(run)
    key = lambda r: (r["H"], r["G"], r["causal"])   # noqa: E731
    groups = defaultdict(dict)
    for r in done:
        groups[key(r)][r["seed"]] = r
    res = dict(grid=asdict(grid), runs_planned=len(runs), runs_complete=len(done), missing=missing,
               schedule=SCHEDULE_NOTE)
    res["final_loss"] = _per_config(groups, lambda r: r["final"], 3)

    hgrid = [k for k in groups if k[0] == k[1] and k[2]]
    ref = None
    if hgrid:
        ref = (4, 4, True) if (4, 4, True) in groups else \
            min(hgrid, key=lambda k: sum(r["final"] for r in groups[k].values()) / len(groups[k]))
    res["reference"] = None if ref is None else dict(_config(ref), why="H = 4" if ref == (4, 4, True)
                                                     else "the best H: lowest mean final held-out loss")
    res["paired"] = _paired(groups, ref, lambda r: r["final"], 3)
    trend_runs = [r for k in hgrid for r in groups[k].values()]
    res["trend"] = _trend(trend_runs, lambda r: r["final"])

    conv = []
    for r in done:
        ev = r["evals"]
        c = hs.converged([e["step"] for e in ev], [e["loss"] for e in ev], window=grid.window,
                         threshold=grid.threshold)
        conv.append(dict(id=r["id"], H=r["H"], G=r["G"], causal=r["causal"], converged=c.converged,
                         slope_per_1k=c.slope_per_1k, rel_slope_per_1k=c.rel_slope_per_1k,
                         slope_se_per_1k=c.slope_se_per_1k, final=c.final_loss, rule=c.rule))
    res["convergence"] = conv
    res["rule"] = conv[0]["rule"] if conv else None
    res["target"] = _time_to(trend_runs, grid, "loss", False, "held-out loss") if trend_runs else None

    res["test"] = None
    if grid.program == "translate":
        test = dict(how=f"the final test decode (translate's `test (...)` line: beam {grid.task.get('beam', 4)}, "
                        "the whole test part), after the last step")
        for m, digits in (("bleu", 2), ("chrf", 2)):
            value = lambda r, m=m: r["test"][m]   # noqa: E731
            test[m] = dict(per_config=_per_config(groups, value, digits), paired=_paired(groups, ref, value, digits),
                           trend=_trend(trend_runs, value))
        test["sentences"] = sorted({r["test"]["sentences"] for r in done})
        res["test"] = test
        # Valid BLEU is in every eval record (greedy, the first eval_size valid sentences), so
        # time to a BLEU target is measured as time to a loss target is.
        res["target_bleu"] = (_time_to(trend_runs, grid, "bleu", True, "valid BLEU (greedy)")
                              if trend_runs and all("bleu" in e for r in trend_runs for e in r["evals"]) else None)
        res["data"] = _data_check(done, out)
    return res


def _name(c):
    return f"H{c['H']} G{c['G']}{'' if c['causal'] else ' no-causal'}"


def _paired_md(comps, ref, what, control):
    L = [f"Differences b - a in {what}, paired by seed; a is H = {ref['H']} ({ref['why']}) for the H grid"
         f"{' and the no-causal control' if control else ''}, and multi-head attention at the same H for G < H. "
         "Holm adjusts each family of p-values across the comparisons.", "",
         "| a | b | b - a [95% t] (n) | p (t) | Holm | p (Wilcoxon) | Holm | min Wilcoxon p at n |",
         "|---|---|---|---|---|---|---|---|"]
    for c in comps:
        L.append(f"| {_name(c['a'])} | {_name(c['b'])} | {c['text']} | {_p(c['p_t'])} | {_p(c.get('p_t_holm'))} | "
                 f"{_p(c['p_wilcoxon'])} | {_p(c.get('p_wilcoxon_holm'))} | {_p(c['wilcoxon_min_p'])} |")
    return L


def _trend_md(t, what):
    return ("not enough H-grid runs" if t is None else
            f"Spearman rho(H, {what}) = {t['rho']:+.3f}, permutation p = {t['p']:.3g} "
            f"({'exact' if t['exact'] else 'Monte Carlo'}, permuted within each of {t['strata']} seeds), "
            f"n = {t['n']} runs (G = H, causal).")


def _target_md(tg):
    if tg is None:
        return ["no H-grid runs"]
    L = [f"Target {tg['what']}: {tg['how']}. Steps and train seconds (training steps only, "
         f"{tg['threads']} thread) at the first evaluation reaching it, interpolated between evaluations.", "",
         "| H | reached (of n) | steps, mean [95% t] (n) | train seconds, mean [95% t] (n) |", "|---|---|---|---|"]
    for r in tg["per_H"]:
        L.append(f"| {r['H']} | {r['reached']} of {r['n']} | {r.get('steps', '-')} | {r.get('seconds', '-')} |")
    return L


def _test_md(res):
    """The translation sections: final test BLEU and chrF, and whether the data were identical."""
    test, ref = res["test"], res["reference"]
    L = ["", "## Final test BLEU and chrF", "", f"From {test['how']}; test sentences per run: "
         f"{', '.join(map(str, test['sentences'])) or 'none'}. BLEU is sacreBLEU's default, chrF is chrF2.", "",
         "| H | G | test BLEU, mean [95% t] (n seeds) | test chrF, mean [95% t] (n seeds) |", "|---|---|---|---|"]
    chrf = {(r["H"], r["G"], r["causal"]): r["text"] for r in test["chrf"]["per_config"]}
    L += [f"| {r['H']} | {r['G']} | {r['text']} | {chrf[(r['H'], r['G'], r['causal'])]} |"
          for r in test["bleu"]["per_config"]]
    for m, what in (("bleu", "final test BLEU"), ("chrf", "final test chrF")):
        L += ["", f"### Paired by seed: {what}", ""]
        L += _paired_md(test[m]["paired"], ref, what, False) if ref else ["no H-grid configuration is complete"]
        L += ["", _trend_md(test[m]["trend"], what)]
    L += ["", "## Time to target: valid BLEU", ""]
    L += (_target_md(res["target_bleu"]) if res.get("target_bleu") else
          ["the eval records carry no BLEU: time to target uses the held-out loss only"])
    L += ["", "## Identical data", ""]
    for key, what in (("corpus_hash", "corpus hash (the gettext manifest)"), ("spm_sha256", "SentencePiece model")):
        seen = res["data"][key]
        if not seen:
            L.append(f"- {what}: none in the runs (the number corpus has neither)")
        elif len(seen) == 1:
            v, ids = next(iter(seen.items()))
            L.append(f"- {what}: identical in all {len(ids)} complete runs ({v[:16]})")
        else:
            L.append(f"- {what}: DIFFERS across runs: "
                     + "; ".join(f"{v[:16]}: {', '.join(i)}" for v, i in seen.items()))
    return L


def markdown(res):
    """<program>-heads.md: every number with its n."""
    g = res["grid"]
    task = f"; task {g['task']}" if g.get("task") else ""
    L = [f"# Heads study, {g.get('program', 'lm')} grid `{g['name']}`", "",
         f"{res['runs_complete']} of {res['runs_planned']} runs complete; {g['steps']} steps, held-out loss every "
         f"{g['eval_every']} steps on {g['eval_size']} held-out examples, {g['threads']} thread(s) per run; "
         f"model {g['model']}{task}.", "", res["schedule"] + ".", ""]
    L += ["## Missing runs", ""]
    L += [f"- {m['id']}: {m['status']}" for m in res["missing"]] or ["none"]
    L += ["", "## Final held-out loss", "", "| H | G | causal | final loss, mean [95% t-interval] (n seeds) |",
          "|---|---|---|---|"]
    L += [f"| {r['H']} | {r['G']} | {'yes' if r['causal'] else 'no'} | {r['text']} |" for r in res["final_loss"]]
    ref = res["reference"]
    L += ["", "## Paired by seed", ""]
    L += (_paired_md(res["paired"], ref, "final held-out loss", g["control_heads"]) if ref
          else ["no H-grid configuration is complete"])
    L += ["", "## Trend across H", "", _trend_md(res["trend"], "final held-out loss")]
    L += ["", "## Convergence", "", f"Rule: {res['rule']}.", "",
          "| run | converged | slope per 1k steps (± se) | relative slope per 1k | final loss |", "|---|---|---|---|---|"]
    for c in res["convergence"]:
        L.append(f"| {c['id']} | {'yes' if c['converged'] else 'no'} | {c['slope_per_1k']:+.4f} "
                 f"(± {c['slope_se_per_1k']:.4f}) | {c['rel_slope_per_1k'] * 100:+.2f}% | {c['final']:.4f} |")
    count = defaultdict(lambda: [0, 0])
    for c in res["convergence"]:
        count[_name(c)][0] += c["converged"]
        count[_name(c)][1] += 1
    L += ["", "Converged per configuration: " + "; ".join(f"{k}: {a} of n = {b}" for k, (a, b) in count.items())]
    L += ["", "## Time to target", ""] + _target_md(res["target"])
    if res.get("test"):
        L += _test_md(res)
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------
# Subcommands

def parse_model(pairs):
    """--model K=V flags (a model or training flag of the program, without its --)
    into a dict; a value that reads as a number is kept as that number."""
    out = {}
    for text in pairs or []:
        k, sep, v = text.partition("=")
        if not sep or not k or not v or k.startswith("-"):
            raise SystemExit(f"heads_study: --model expects KEY=VALUE with the flag's name without --, e.g. "
                             f"d-model=256, got {text!r}")
        for conv in (int, float):
            try:
                v = conv(v)
                break
            except ValueError:
                continue
        out[k] = v
    return out


def grid_kind(name):
    if name == "lm":
        return "lm"
    if re.fullmatch(r"translate-[a-zA-Z_@]+", name):
        return "translate"
    raise SystemExit(f"heads_study: unknown --grid {name!r}; expected lm or translate-LANG (translate-fr, "
                     "translate-ko: the gettext corpus en -> LANG)")


def grid_from(args):
    """The grid of --grid, with the flags given and the grid's defaults for the rest."""
    kind = grid_kind(args.grid)
    flags = {k: getattr(args, k) for k in GRID_DEFAULTS[kind] if getattr(args, k, None) is not None}
    flags = {**GRID_DEFAULTS[kind], **flags}
    model = parse_model(args.model)
    if kind == "lm":
        return lm_grid(**flags, model=model)
    return translate_grid(args.grid.split("-", 1)[1], **flags, model=model)


def frozen_grid(grid: Grid, out):
    """grid.json under out: written on first use; another grid there is refused.
    Fields added since it was written take their defaults (an older LM grid's
    grid.json lacks program and task)."""
    path = Path(out) / "grid.json"
    mine = json.loads(json.dumps(asdict(grid)))
    if path.exists():
        saved = json.loads(json.dumps(asdict(saved_grid(out))))
        if saved != mine:
            diff = {k: (saved.get(k), mine.get(k)) for k in set(saved) | set(mine) if saved.get(k) != mine.get(k)}
            raise SystemExit(f"heads_study: {path} holds another grid (saved, now: {diff}); hint: the same flags, "
                             "or another --out")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(mine, indent=1) + "\n")
    return grid


def saved_grid(out):
    path = Path(out) / "grid.json"
    if not path.exists():
        raise SystemExit(f"heads_study: {path} is missing: nothing was planned or run in {out}; hint: plan or run first")
    d = json.loads(path.read_text())
    return Grid(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def program_of(grid: Grid, args):
    """The executable that trains the grid's runs (--lm or --translate), checked."""
    path = args.lm if grid.program == "lm" else args.translate
    if not os.access(path, os.X_OK):
        raise SystemExit(f"heads_study: {path} is not an executable; hint: build the {grid.program} target, or pass "
                         f"--{grid.program}")
    return path


def cpu_name():
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_pilot(out):
    """pilot.json and a line saying where its numbers come from (or why there are none)."""
    path = Path(out) / "pilot.json"
    if not path.exists():
        return None, f"no pilot ({path} missing): core-minutes unknown; run `heads_study.py pilot` first"
    p = json.loads(path.read_text())
    note = f"seconds per step measured by pilot on {p['cpu']} at {p['date']} ({p['steps']} steps, {p['jobs']} at once)"
    if p["cpu"] != cpu_name():
        note += f"; WARNING: this machine is {cpu_name()}, so the estimates are from another CPU"
    return p, note


def print_plan(grid, plan, note):
    runs = {r["id"]: r for r in runs_of(grid)}
    print(f"grid {grid.name} ({grid.program}): {len(runs)} runs of {grid.steps} steps, held-out loss every "
          f"{grid.eval_every} steps on {grid.eval_size} held-out examples, {grid.threads} thread per run, "
          f"{plan['jobs']} runs at once on "
          f"{plan['jobs']} cores")
    print(SCHEDULE_NOTE)
    print(note)
    total = 0.0
    for i, p in enumerate(plan["parts"], 1):
        cm = p["core_minutes"]
        head = (f"part {i}/{len(plan['parts'])}: {len(p['runs'])} runs, "
                + (f"{cm:.1f} core-minutes, about {p['wall_minutes']:.1f} min wall" if cm is not None
                   else "cost unmeasured"))
        print(head)
        total += cm or 0
        for rid in p["runs"]:
            print(f"  {rid}: {shlex.join(runs[rid]['args'])}")
    if plan["measured"]:
        print(f"total: {total:.1f} core-minutes ({total / 60:.2f} core-hours) in {len(plan['parts'])} part(s) of at "
              f"most {plan['limit_hours']:g} h each")


def cmd_plan(args, grid=None):
    grid = frozen_grid(grid or grid_from(args), args.out)
    pilot, note = load_pilot(args.out)
    plan = make_plan(grid, pilot, args.jobs, args.parts, args.part_hours * 3600)
    path = Path(args.out) / "plan.json"
    if path.exists() and json.loads(path.read_text())["parts"] != plan["parts"]:
        print(f"note: {path} holds an earlier plan, which `run` keeps using (delete it to replan)")
    elif plan["measured"] or args.parts:
        path.write_text(json.dumps(plan, indent=1) + "\n")   # frozen: every `run --part i/n` reads it
    else:
        print("not frozen into plan.json: the split waits for a pilot (or --parts)")
    print_plan(grid, plan, note)
    return plan


def cmd_pilot(args, grid=None):
    """Seconds per training step for each (H, G) of the grid, `jobs` at once, one
    thread each. start-up is everything outside the steps and one evaluation:
    loading (for translate, the corpus and SentencePiece) and translate's final
    test decode, whose model has barely trained, so decodes run long: an
    over-estimate."""
    grid = grid or grid_from(args)
    program = program_of(grid, args)
    configs = {}
    for r in runs_of(grid):
        configs.setdefault(f"H{r['H']}-G{r['G']}", r)
    todo = []
    for name, r in configs.items():
        d = Path(args.out) / "pilot" / name
        d.mkdir(parents=True, exist_ok=True)
        a = list(r["args"])
        for flag, value in (("--steps", args.pilot_steps), ("--eval-every", max(1, args.pilot_steps // 2))):
            a[a.index(flag) + 1] = str(value)
        a[a.index("--log-every") + 1] = "1"
        log = d / "log.jsonl"
        # A checkpoint at each evaluation, as the real runs write.
        todo.append((name, [str(program)] + a + ["--log", str(log), "--checkpoint-dir", str(d / "ckpt"),
                                                  "--overwrite"], log))
    result = {}

    def finish(name, log, wall):
        recs = read_log(log)
        steps = [x for x in recs if "loss" in x and "eval_loss" not in x]
        if not steps or steps[-1]["step"] != args.pilot_steps:
            raise SystemExit(f"heads_study: pilot {name} wrote no step {args.pilot_steps} record in {log}")
        last = steps[-1]
        # Past the first step (allocation and cache warm-up), as a long run sees it.
        s_step = (last["train_s"] - steps[0]["train_s"]) / (last["step"] - steps[0]["step"])
        eval_s = last["elapsed_s"] - last["train_s"]   # the one evaluation (and checkpoint) at mid-run
        result[name] = dict(s_per_step=s_step, eval_s=eval_s, startup_s=max(0.0, wall - last["elapsed_s"] - eval_s))
        print(f"pilot {name}: {s_step:.4f} s/step, {eval_s:.2f} s per evaluation, start-up {result[name]['startup_s']:.1f} s")

    # Fillers (repeats of the first configs, not measured) give the last runs
    # partners, so every measured run shares the machine as the parts' runs do.
    fillers = [(f"filler-{n}", c[:c.index("--log")] + ["--log", str(log) + ".filler"], None)
               for n, c, log in todo[:(-len(todo)) % max(1, args.jobs)]]
    for name, wall, log in run_pool([(n, c, log, None) for n, c, log in todo + fillers], args.jobs):
        if log is not None:
            finish(name, log, wall)
    pilot = dict(cpu=cpu_name(), date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 steps=args.pilot_steps, jobs=args.jobs, threads=grid.threads, configs=result)
    (Path(args.out) / "pilot.json").write_text(json.dumps(pilot, indent=1) + "\n")
    print(f"wrote {Path(args.out) / 'pilot.json'}")
    return pilot


def run_pool(jobs_list, jobs):
    """Runs (name, argv, log, stdout path) `jobs` at once; yields (name, wall seconds, log) as each ends.
    A failed command ends the study with its output's tail; Ctrl-C sends SIGTERM to the runs (lm then
    writes a checkpoint) and waits for them."""
    pending = list(jobs_list)
    live = {}
    try:
        while pending or live:
            while pending and len(live) < jobs:
                name, argv, log, out = pending.pop(0)
                sink = open(out, "a") if out else subprocess.DEVNULL
                live[name] = (subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT), time.time(), log, out)
            time.sleep(0.05)
            for name in list(live):
                proc, t0, log, out = live[name]
                if proc.poll() is None:
                    continue
                del live[name]
                if proc.returncode != 0:
                    tail = Path(out).read_text()[-2000:] if out else ""
                    raise SystemExit(f"heads_study: {name} failed (exit {proc.returncode}): "
                                     f"{shlex.join(proc.args)}\n{tail}")
                yield name, time.time() - t0, log
    finally:
        for proc, *_ in live.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, *_ in live.values():
            proc.wait()


def parse_part(text):
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"heads_study: --part expects i/n (e.g. 1/4), got {text!r}")
    if not 1 <= i <= n:
        raise SystemExit(f"heads_study: --part expects 1 <= i <= n, got {text!r}")
    return i, n


def cmd_run(args, grid=None):
    grid = frozen_grid(grid or grid_from(args), args.out)
    i, n = parse_part(args.part)
    path = Path(args.out) / "plan.json"
    if path.exists():
        plan = json.loads(path.read_text())
    else:
        pilot, note = load_pilot(args.out)
        plan = make_plan(grid, pilot, args.jobs, n, args.part_hours * 3600)
        path.write_text(json.dumps(plan, indent=1) + "\n")
        print(f"no plan yet: wrote {path} ({note})")
    if len(plan["parts"]) != n:
        raise SystemExit(f"heads_study: {path} has {len(plan['parts'])} parts, not {n}; hint: --part i/"
                         f"{len(plan['parts'])}, or delete {path} to replan")
    runs = {r["id"]: r for r in runs_of(grid)}
    mine = [runs[rid] for rid in plan["parts"][i - 1]["runs"]]
    program = program_of(grid, args)
    todo = []
    for r in mine:
        d = Path(args.out) / "runs" / r["id"]
        st = run_status(grid, r, args.out)
        if st == "complete":
            print(f"{r['id']}: complete, skipped")
            continue
        d.mkdir(parents=True, exist_ok=True)
        print(f"{r['id']}: {st}; {'resuming' if st != 'missing' else 'starting'}")
        todo.append((r["id"], command(r, program, args.out), d / "log.jsonl", d / "stdout.txt"))
    t0 = time.time()
    for k, (name, wall, log) in enumerate(run_pool(todo, args.jobs), 1):
        ev = eval_records(read_log(log))
        final = f"{ev[-1]['eval_loss']:.4f}" if ev else "none"
        test = read_test(Path(log).parent / "stdout.txt") if grid.program == "translate" else None
        final += f", test BLEU {test['bleu']:.2f} chrF {test['chrf']:.2f}" if test else ""
        print(f"[{k}/{len(todo)}] {name} done in {wall:.1f} s (final held-out loss {final}); "
              f"part {i}/{n} at {time.time() - t0:.0f} s", flush=True)
    print(f"part {i}/{n}: {len(mine)} runs, {len(mine) - len(todo)} were already complete, {len(todo)} ran")


def report_paths(grid: Grid, out):
    """<out>/lm-heads.{md,json} or <out>/translate-heads.{md,json}."""
    return Path(out) / f"{grid.program}-heads.md", Path(out) / f"{grid.program}-heads.json"


def cmd_report(args):
    grid = saved_grid(args.out)
    res = analyse(grid, args.out)
    md = markdown(res)
    md_path, json_path = report_paths(grid, args.out)
    md_path.write_text(md)
    json_path.write_text(json.dumps(res, indent=1) + "\n")
    print(md)
    print(f"wrote {md_path} and {json_path}")
    return res


SECTIONS = ("## Missing runs", "## Final held-out loss", "## Paired by seed", "## Trend across H", "## Convergence",
            "## Time to target")
TRANSLATE_SECTIONS = ("## Final test BLEU and chrF", "### Paired by seed: final test BLEU",
                      "### Paired by seed: final test chrF", "## Time to target: valid BLEU", "## Identical data")


def quick_grid_run(args, grid, out):
    """One quick grid end to end in `out`: pilot, plan in 2 parts, an interrupted
    run, both parts, the report; returns the problems found in the report."""
    saved = out / "grid.json"
    if saved.exists() and json.loads(saved.read_text()).get("name") != grid.name:
        raise SystemExit(f"heads_study quick: {out} holds another grid's runs; hint: another --out")
    for name in ("runs", "pilot"):
        shutil.rmtree(out / name, ignore_errors=True)     # a fresh run every time, never stale logs
    for path in ("grid.json", "plan.json", "pilot.json", *report_paths(grid, out)):
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
        cmd_run(args, grid)
    problems = []
    if grid.program == "translate":
        problems += quick_test_decode_missing(args, grid, out, plan)
    res = cmd_report(args)
    md = report_paths(grid, out)[0].read_text()
    ids = [r["id"] for r in runs_of(grid)]
    wanted = SECTIONS + (TRANSLATE_SECTIONS if grid.program == "translate" else ())
    problems += [f"section {s!r} missing" for s in wanted if s not in md]
    problems += [f"run {r} not in the convergence table" for r in ids if f"| {r} |" not in md]
    if res["missing"]:
        problems.append(f"runs missing: {res['missing']}")
    if res["runs_complete"] != len(ids) or not res["trend"] or not res["paired"]:
        problems.append("expected every run complete, a trend and a paired comparison")
    if any(r["reached"] != r["n"] for r in res["target"]["per_H"]):
        problems.append("every H-grid run must reach the target (it is the worst final loss plus a margin)")
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


def add_common(p, grid_steps=True):
    """The flags every subcommand takes (after its name: `plan --out DIR`). The
    grid's flags default to None: the grid's own default (GRID_DEFAULTS)."""
    bin_dir = Path(__file__).resolve().parent.parent / "build" / "bin"
    p.add_argument("--out", default=None, help="the study's directory (default runs/heads-<grid>)")
    p.add_argument("--lm", default=str(bin_dir / "lm"), help="the lm program (default build/bin/lm)")
    p.add_argument("--translate", default=str(bin_dir / "translate"),
                   help="the translate program (default build/bin/translate)")
    p.add_argument("--grid", default="lm", help="lm, or translate-LANG for the gettext corpus en -> LANG "
                   "(translate-fr, translate-ko) (default lm)")
    if grid_steps:
        p.add_argument("--steps", type=int, default=None, help="steps per run (default 3000)")
    p.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every N steps (default 100)")
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
    p = sub.add_parser("run", help="one part's unfinished runs")
    add_common(p)
    p.add_argument("--part", required=True, help="i/n, as plan printed")
    add_common(sub.add_parser("report", help="<out>/<program>-heads.md and .json"))
    add_common(sub.add_parser("quick", help="both pipelines on tiny grids, in <out>/lm and <out>/translate (CI)"))
    args = ap.parse_args(argv)
    if hs is None:
        print(f"heads_study: needs Debian's python3-numpy and python3-scipy (scripts/setup): {_IMPORT_ERROR}",
              file=sys.stderr)
        return 77
    grid_kind(args.grid)
    if args.out is None:
        args.out = "/tmp/heads-quick" if args.cmd == "quick" else f"runs/heads-{args.grid}"
    {"plan": cmd_plan, "pilot": cmd_pilot, "run": cmd_run, "report": cmd_report, "quick": cmd_quick}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
