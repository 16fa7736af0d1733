"""The heads study's language-model grid (issue 31, third edition): plan it, measure
its cost, run it in parts, and report it with the statistics of heads_stats.

    H=tools/heads_study.py
    /usr/bin/python3 $H pilot                 # seconds per step per (H, G), on this CPU
    /usr/bin/python3 $H plan                  # the runs, their parts (each <= 2 h), core-minutes
    /usr/bin/python3 $H run --part 1/4        # that part's unfinished runs, 2 at once
    /usr/bin/python3 $H report                # lm-heads.md and lm-heads.json
    /usr/bin/python3 $H quick --lm build/bin/lm --out /tmp/q   # all of it on a tiny grid (CI)

Every subcommand takes --out DIR (default runs/heads-lm) and the grid's flags
(--steps, --eval-every, --eval-size, --warmup, --seeds, --jobs, --part-hours).

Everything lives under --out (default runs/heads-lm): grid.json (the grid the
runs belong to; another grid in the same directory is refused), pilot.json,
plan.json (the parts, frozen when first written, so every `run --part i/n`
agrees on which runs are its own), runs/<id>/{log.jsonl, ckpt/, stdout.txt}.

The C++ program trains and measures (`lm train --log`: step and eval records
with the held-out loss, elapsed_s and train_s, the seconds in training steps
only); this file only reads its records. Needs numpy and scipy (heads_stats).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
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
SCHEDULE_NOTE = ("schedule: linear warmup then a constant lr (--schedule warmup), not cosine: a cosine decay to its "
                 "floor at the budget flattens every curve by construction, so the convergence rule would measure "
                 "the schedule ending, not learning that stopped")


# ---------------------------------------------------------------------------
# The grid

@dataclass(frozen=True)
class Grid:
    """A grid's shared settings. model: lm's model flags (fixed width); text: None
    for lm's default (the fortunes); window: the evaluations the convergence
    rule fits; margin: the time-to-target level is the worst final held-out
    loss among the H-grid runs times (1 + margin)."""
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

    def evals(self):
        """The eval steps of every run: each eval_every, and the last step."""
        s = list(range(self.eval_every, self.steps + 1, self.eval_every))
        return s if s and s[-1] == self.steps else s + [self.steps]


LM_MODEL = {"d-model": 128, "d-ff": 512, "layers": 4, "context": 128, "batch-size": 32}


def lm_grid(steps=3000, eval_every=100, eval_size=200, warmup=60, seeds=5):
    """The issue's LM grid at lm's default width: H in {1,2,4,8,16} x seeds; G in
    {1,2} at H = 8; the causal mask off at H = 4 for 2 seeds (the control)."""
    s = tuple(range(1, seeds + 1))
    return Grid("lm", steps, eval_every, eval_size, warmup, (1, 2, 4, 8, 16), s, 8, (1, 2), 4, s[:2],
                dict(LM_MODEL))


def quick_grid(text):
    """The CI grid: every part of the pipeline in seconds (3 evaluations per run,
    so the convergence window is 3)."""
    model = {"d-model": 16, "d-ff": 64, "layers": 1, "context": 16, "batch-size": 8}
    return Grid("quick", 30, 10, 20, 5, (1, 2), (1, 2), 0, (), 0, (), model, str(text), 1, window=3)


def run_id(H, G, causal, seed):
    return f"H{H}-G{G}{'' if causal else '-nocausal'}-s{seed}"


def runs_of(grid: Grid):
    """The grid as data: one dict per run (id, H, G, causal, seed, steps, args:
    lm train's flags without the run's paths)."""
    configs = [(H, H, True, grid.seeds) for H in grid.heads]
    configs += [(grid.gqa_heads, G, True, grid.seeds) for G in grid.gqa_groups]
    if grid.control_heads:
        configs.append((grid.control_heads, grid.control_heads, False, grid.control_seeds))
    out = []
    for H, G, causal, seeds in configs:
        for seed in seeds:
            args = ["train"] + [a for k, v in grid.model.items() for a in (f"--{k}", str(v))]
            args += ["--heads", str(H), "--kv-heads", str(G)] + ([] if causal else ["--no-causal"])
            args += ["--seed", str(seed), "--steps", str(grid.steps), "--schedule", "warmup",
                     "--warmup", str(grid.warmup), "--eval-every", str(grid.eval_every),
                     "--eval-size", str(grid.eval_size), "--log-every", str(grid.eval_every),
                     "--threads", str(grid.threads), "--samples", "0", "--quiet", "--keep-last", "1"]
            if grid.text:
                args += ["--text", grid.text]
            out.append(dict(id=run_id(H, G, causal, seed), H=H, G=G, causal=causal, seed=seed,
                            steps=grid.steps, args=args))
    return out


def command(run, lm, out):
    """The full lm command line of `run` in out/runs/<id>/ (resuming its checkpoint when there is one)."""
    d = Path(out) / "runs" / run["id"]
    return [str(lm)] + run["args"] + ["--log", str(d / "log.jsonl"), "--checkpoint-dir", str(d / "ckpt"), "--resume"]


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


def analyse(grid: Grid, out):
    """Every number of the report as data (the .json), from the runs' logs."""
    runs = runs_of(grid)
    done, missing = [], []
    for r in runs:
        recs = read_log(Path(out) / "runs" / r["id"] / "log.jsonl")
        st = status(recs, r["steps"])
        if st != "complete":
            missing.append(dict(id=r["id"], status=st))
            continue
        ev = eval_records(recs)
        done.append(dict(r, evals=[dict(step=e["step"], loss=e["eval_loss"], train_s=e["train_s"]) for e in ev],
                         final=ev[-1]["eval_loss"]))
    key = lambda r: (r["H"], r["G"], r["causal"])   # noqa: E731
    groups = defaultdict(dict)
    for r in done:
        groups[key(r)][r["seed"]] = r
    res = dict(grid=asdict(grid), runs_planned=len(runs), runs_complete=len(done), missing=missing,
               schedule=SCHEDULE_NOTE)

    res["final_loss"] = []
    for k in sorted(groups):
        ci = hs.t_interval([r["final"] for r in groups[k].values()])
        res["final_loss"].append(dict(H=k[0], G=k[1], causal=k[2], mean=ci.mean, lo=ci.lo, hi=ci.hi, n=ci.n,
                                      text=hs.fmt_ci(ci, digits=3)))

    hgrid = [k for k in groups if k[0] == k[1] and k[2]]
    ref = None
    if hgrid:
        ref = (4, 4, True) if (4, 4, True) in groups else \
            min(hgrid, key=lambda k: sum(r["final"] for r in groups[k].values()) / len(groups[k]))
    res["reference"] = None if ref is None else dict(H=ref[0], G=ref[1], causal=ref[2],
                                                     why="H = 4" if ref == (4, 4, True) else "the best H: lowest mean")
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
        d = hs.paired({s: groups[base][s]["final"] for s in seeds}, {s: groups[k][s]["final"] for s in seeds})
        comps.append(dict(a=dict(zip(("H", "G", "causal"), base)), b=dict(zip(("H", "G", "causal"), k)),
                          diff=d.diff.mean, lo=d.diff.lo, hi=d.diff.hi, n=d.n, seeds=list(seeds), p_t=d.p_t,
                          p_wilcoxon=d.p_wilcoxon, wilcoxon_min_p=d.wilcoxon_min_p,
                          text=hs.fmt_ci(d, digits=3, signed=True)))
    for name in ("p_t", "p_wilcoxon"):
        idx = [i for i, c in enumerate(comps) if c[name] is not None]
        adj = hs.holm([comps[i][name] for i in idx]) if idx else []
        for i, a in zip(idx, adj):
            comps[i][name + "_holm"] = a
    res["paired"] = comps

    trend_runs = [r for k in hgrid for r in groups[k].values()]
    res["trend"] = None
    if len({r["H"] for r in trend_runs}) >= 2 and len(trend_runs) >= 3:
        t = hs.trend([r["H"] for r in trend_runs], [r["final"] for r in trend_runs],
                     strata=[r["seed"] for r in trend_runs])
        res["trend"] = dict(rho=t.rho, p=t.p, n=t.n, exact=t.exact, strata=t.strata)

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

    res["target"] = None
    if trend_runs:
        target = choose_target([r["final"] for r in trend_runs], grid.margin)
        per_h = defaultdict(list)
        for r in trend_runs:
            ev = r["evals"]
            t = hs.time_to_target([e["step"] for e in ev], [e["train_s"] for e in ev], [e["loss"] for e in ev],
                                  target, higher_is_better=False)
            per_h[r["H"]].append(dict(id=r["id"], reached=t.reached, step=t.step, seconds=t.seconds))
        rows = []
        for H in sorted(per_h):
            got = [x for x in per_h[H] if x["reached"]]
            row = dict(H=H, n=len(per_h[H]), reached=len(got))
            if got:
                row["steps"] = _ci([x["step"] for x in got], 0)
                row["seconds"] = _ci([x["seconds"] for x in got], 2)
            rows.append(row)
        res["target"] = dict(level=target, margin=grid.margin, threads=grid.threads, per_run=dict(per_h),
                             per_H=rows, how=(f"the worst final held-out loss among the {len(trend_runs)} H-grid "
                                              f"runs x (1 + {grid.margin:g}) = {target:.4f}"))
    return res


def markdown(res):
    """lm-heads.md: every number with its n."""
    g = res["grid"]
    L = [f"# Heads study, LM grid `{g['name']}`", "",
         f"{res['runs_complete']} of {res['runs_planned']} runs complete; {g['steps']} steps, held-out loss every "
         f"{g['eval_every']} steps on {g['eval_size']} windows, {g['threads']} thread(s) per run; "
         f"model {g['model']}.", "", res["schedule"] + ".", ""]
    L += ["## Missing runs", ""]
    L += [f"- {m['id']}: {m['status']}" for m in res["missing"]] or ["none"]
    L += ["", "## Final held-out loss", "", "| H | G | causal | final loss, mean [95% t-interval] (n seeds) |",
          "|---|---|---|---|"]
    L += [f"| {r['H']} | {r['G']} | {'yes' if r['causal'] else 'no'} | {r['text']} |" for r in res["final_loss"]]
    ref = res["reference"]
    L += ["", "## Paired by seed", ""]
    if ref:
        L += [f"Differences b - a in final held-out loss, paired by seed; a is H = {ref['H']} ({ref['why']}) for "
              "the H grid and the no-causal control, and multi-head attention at the same H for G < H. Holm "
              "adjusts each family of p-values across the comparisons.", "",
              "| a | b | b - a [95% t] (n) | p (t) | Holm | p (Wilcoxon) | Holm | min Wilcoxon p at n |",
              "|---|---|---|---|---|---|---|---|"]
        name = lambda c: f"H{c['H']} G{c['G']}{'' if c['causal'] else ' no-causal'}"   # noqa: E731
        for c in res["paired"]:
            L.append(f"| {name(c['a'])} | {name(c['b'])} | {c['text']} | {_p(c['p_t'])} | {_p(c.get('p_t_holm'))} | "
                     f"{_p(c['p_wilcoxon'])} | {_p(c.get('p_wilcoxon_holm'))} | {_p(c['wilcoxon_min_p'])} |")
    else:
        L.append("no H-grid configuration is complete")
    L += ["", "## Trend across H", ""]
    t = res["trend"]
    L.append("not enough H-grid runs" if t is None else
             f"Spearman rho(H, final held-out loss) = {t['rho']:+.3f}, permutation p = {t['p']:.3g} "
             f"({'exact' if t['exact'] else 'Monte Carlo'}, permuted within each of {t['strata']} seeds), "
             f"n = {t['n']} runs (G = H, causal).")
    L += ["", "## Convergence", "", f"Rule: {res['rule']}.", "",
          "| run | converged | slope per 1k steps (± se) | relative slope per 1k | final loss |", "|---|---|---|---|---|"]
    for c in res["convergence"]:
        L.append(f"| {c['id']} | {'yes' if c['converged'] else 'no'} | {c['slope_per_1k']:+.4f} "
                 f"(± {c['slope_se_per_1k']:.4f}) | {c['rel_slope_per_1k'] * 100:+.2f}% | {c['final']:.4f} |")
    count = defaultdict(lambda: [0, 0])
    for c in res["convergence"]:
        k = f"H{c['H']} G{c['G']}{'' if c['causal'] else ' no-causal'}"
        count[k][0] += c["converged"]
        count[k][1] += 1
    L += ["", "Converged per configuration: " + "; ".join(f"{k}: {a} of n = {b}" for k, (a, b) in count.items())]
    L += ["", "## Time to target", ""]
    tg = res["target"]
    if tg is None:
        L.append("no H-grid runs")
    else:
        L += [f"Target held-out loss: {tg['how']}. Steps and train seconds (training steps only, "
              f"{tg['threads']} thread) at the first evaluation reaching it, interpolated between evaluations.", "",
              "| H | reached (of n) | steps, mean [95% t] (n) | train seconds, mean [95% t] (n) |", "|---|---|---|---|"]
        for r in tg["per_H"]:
            L.append(f"| {r['H']} | {r['reached']} of {r['n']} | {r.get('steps', '-')} | {r.get('seconds', '-')} |")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------
# Subcommands

def grid_from(args):
    if args.grid == "lm":
        return lm_grid(args.steps, args.eval_every, args.eval_size, args.warmup, args.seeds)
    raise SystemExit(f"heads_study: unknown --grid {args.grid!r}; expected lm")


def frozen_grid(grid: Grid, out):
    """grid.json under out: written on first use; another grid there is refused."""
    path = Path(out) / "grid.json"
    mine = json.loads(json.dumps(asdict(grid)))
    if path.exists():
        saved = json.loads(path.read_text())
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
    print(f"grid {grid.name}: {len(runs)} runs of {grid.steps} steps, held-out loss every {grid.eval_every} steps "
          f"on {grid.eval_size} windows, {grid.threads} thread per run, {plan['jobs']} runs at once on "
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
    """Seconds per training step for each (H, G) of the grid, `jobs` at once, one thread each."""
    grid = grid or grid_from(args)
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
        todo.append((name, [str(args.lm)] + a + ["--log", str(log), "--checkpoint-dir", str(d / "ckpt"),
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
    todo = []
    for r in mine:
        d = Path(args.out) / "runs" / r["id"]
        st = status(read_log(d / "log.jsonl"), r["steps"])
        if st == "complete":
            print(f"{r['id']}: complete, skipped")
            continue
        d.mkdir(parents=True, exist_ok=True)
        print(f"{r['id']}: {st}; {'resuming' if st != 'missing' else 'starting'}")
        todo.append((r["id"], command(r, args.lm, args.out), d / "log.jsonl", d / "stdout.txt"))
    t0 = time.time()
    for k, (name, wall, log) in enumerate(run_pool(todo, args.jobs), 1):
        ev = eval_records(read_log(log))
        final = f"{ev[-1]['eval_loss']:.4f}" if ev else "none"
        print(f"[{k}/{len(todo)}] {name} done in {wall:.1f} s (final held-out loss {final}); "
              f"part {i}/{n} at {time.time() - t0:.0f} s", flush=True)
    print(f"part {i}/{n}: {len(mine)} runs, {len(mine) - len(todo)} were already complete, {len(todo)} ran")


def cmd_report(args):
    grid = saved_grid(args.out)
    res = analyse(grid, args.out)
    md = markdown(res)
    (Path(args.out) / "lm-heads.md").write_text(md)
    (Path(args.out) / "lm-heads.json").write_text(json.dumps(res, indent=1) + "\n")
    print(md)
    print(f"wrote {Path(args.out) / 'lm-heads.md'} and {Path(args.out) / 'lm-heads.json'}")
    return res


SECTIONS = ("## Missing runs", "## Final held-out loss", "## Paired by seed", "## Trend across H", "## Convergence",
            "## Time to target")


def cmd_quick(args):
    """The pipeline on a tiny grid: pilot, plan in 2 parts, run both, report; checks the report."""
    out = Path(args.out)
    saved = out / "grid.json"
    if saved.exists() and json.loads(saved.read_text()).get("name") != "quick":
        raise SystemExit(f"heads_study quick: {out} holds another grid's runs; hint: another --out")
    for name in ("runs", "pilot"):
        shutil.rmtree(out / name, ignore_errors=True)     # a fresh run every time, never stale logs
    for name in ("grid.json", "plan.json", "pilot.json", "lm-heads.md", "lm-heads.json"):
        (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    text = out / "text.txt"
    words = "the quick brown fox jumps over a lazy dog and then sleeps under an old tree".split()
    lines = [" ".join(words[(7 * i + 3 * j) % len(words)] for j in range(8)) for i in range(300)]
    text.write_text("\n".join(lines) + "\n")
    grid = quick_grid(text)
    args.pilot_steps, args.parts = 10, 2
    cmd_pilot(args, grid)
    plan = cmd_plan(args, grid)
    # An interrupted run: the first of part 1 stops after step 20 (with its
    # checkpoint); `run` must find it partial and resume it, not start over.
    first = next(r for r in runs_of(grid) if r["id"] == plan["parts"][0]["runs"][0])
    d = out / "runs" / first["id"]
    d.mkdir(parents=True)
    with open(d / "stdout.txt", "w") as sink:
        subprocess.run(command(first, args.lm, out) + ["--stop-after", "20"], stdout=sink, stderr=subprocess.STDOUT,
                       check=True)
    interrupted = status(read_log(d / "log.jsonl"), first["steps"])
    for i in (1, 2):
        args.part = f"{i}/2"
        cmd_run(args, grid)
    res = cmd_report(args)
    md = (out / "lm-heads.md").read_text()
    ids = [r["id"] for r in runs_of(grid)]
    problems = [f"section {s!r} missing" for s in SECTIONS if s not in md]
    problems += [f"run {r} not in the convergence table" for r in ids if f"| {r} |" not in md]
    if res["missing"]:
        problems.append(f"runs missing: {res['missing']}")
    if res["runs_complete"] != len(ids) or not res["trend"] or not res["paired"]:
        problems.append("expected every run complete, a trend and a paired comparison")
    if any(r["reached"] != r["n"] for r in res["target"]["per_H"]):
        problems.append("every H-grid run must reach the target (it is the worst final loss plus a margin)")
    if interrupted != "partial at step 20":
        problems.append(f"the interrupted run {first['id']} was {interrupted!r}, expected 'partial at step 20'")
    ev = eval_records(read_log(d / "log.jsonl"))
    # Resumed, its last process trained 10 steps (elapsed_s) while train_s counts all 30.
    if not ev or ev[-1]["elapsed_s"] >= ev[-1]["train_s"]:
        problems.append(f"the interrupted run {first['id']} was restarted, not resumed: {ev[-1:]}")
    if [e["step"] for e in ev] != [10, 20, 30] or any(b["train_s"] < a["train_s"] for a, b in zip(ev, ev[1:])):
        problems.append(f"the resumed run's evaluations are not steps 10, 20, 30 with growing train_s: {ev}")
    if problems:
        raise SystemExit("heads_study quick: " + "; ".join(problems))
    print(f"quick: ok ({len(ids)} runs, every section present)")


def add_common(p, grid_steps=True):
    """The flags every subcommand takes (after its name: `plan --out DIR`)."""
    p.add_argument("--out", default="runs/heads-lm", help="the study's directory (default runs/heads-lm)")
    p.add_argument("--lm", default=str(Path(__file__).resolve().parent.parent / "build" / "bin" / "lm"),
                   help="the lm program (default build/bin/lm)")
    p.add_argument("--grid", default="lm", help="the grid (lm)")
    if grid_steps:
        p.add_argument("--steps", type=int, default=3000, help="steps per run (default 3000)")
    p.add_argument("--eval-every", type=int, default=100, help="held-out evaluation every N steps (default 100)")
    p.add_argument("--eval-size", type=int, default=200, help="held-out windows per evaluation (default 200)")
    p.add_argument("--warmup", type=int, default=60, help="linear warmup steps, then a constant lr (default 60)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per configuration (default 5)")
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
    p.set_defaults(steps=3000)   # the grid's; seconds per step do not depend on it
    p.add_argument("--steps", dest="pilot_steps", type=int, default=20, help="steps per pilot run (default 20)")
    p = sub.add_parser("run", help="one part's unfinished runs")
    add_common(p)
    p.add_argument("--part", required=True, help="i/n, as plan printed")
    add_common(sub.add_parser("report", help="<out>/lm-heads.md and .json"))
    add_common(sub.add_parser("quick", help="the whole pipeline on a tiny grid (CI)"))
    args = ap.parse_args(argv)
    if hs is None:
        print(f"heads_study: needs Debian's python3-numpy and python3-scipy (scripts/setup): {_IMPORT_ERROR}",
              file=sys.stderr)
        return 77
    if args.cmd in ("pilot", "run", "quick") and not os.access(args.lm, os.X_OK):
        raise SystemExit(f"heads_study: {args.lm} is not an executable; hint: build the lm target, or pass --lm")
    {"plan": cmd_plan, "pilot": cmd_pilot, "run": cmd_run, "report": cmd_report, "quick": cmd_quick}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
