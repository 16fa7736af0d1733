"""The heads study's runs (issue 31): the pilot (seconds per step per (H, G)),
the cost of a grid and its split into parts, the plan, running a part's
unfinished runs two at once, and reading what the runs wrote (their logs,
translate's test line, whether a run is complete).

The C++ programs train and measure; this module starts them and reads their
output. tools/heads_study.py is the command line.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

from heads_grids import SCHEDULE_NOTE, Grid, command, frozen_grid, grid_from, runs_of

PART_HOURS = 2.0


# ---------------------------------------------------------------------------
# Cost and parts

def run_seconds(run, grid: Grid, pilot, done=0):
    """Estimated wall seconds of one run on one core from the pilot's (H, G) row:
    start-up, steps x seconds per step, and its evaluations; with `done` steps
    already trained (a grid extended, or a part cut short), only what remains
    (0 for a finished run). None without a pilot row."""
    row = (pilot or {}).get("configs", {}).get(f"H{run['H']}-G{run['G']}")
    if row is None:
        return None
    if done >= run["steps"]:
        return 0.0
    evals = sum(1 for s in grid.evals() if s > done)
    return row["startup_s"] + (run["steps"] - done) * row["s_per_step"] + evals * row["eval_s"]


def makespan(costs, jobs):
    """Wall time of `costs` run longest first, each on the first free of `jobs` workers."""
    free = [0.0] * max(1, jobs)
    for c in sorted(costs, reverse=True):
        i = free.index(min(free))
        free[i] += c
    return max(free)


def split_parts(costs: dict, seed_of: dict, jobs=2, limit_s=PART_HOURS * 3600, parts=None):
    """Runs (id -> seconds) into parts of whole seeds (seed_of: id -> a sortable
    seed key; make_plan puts the no-mask controls after every seed), in seed
    order: a study cut short then leaves whole seeds, so every comparison paired
    by seed has one n, and a part is a session's work whose records are
    committed while its checkpoints, which a fresh checkout lacks, are not (its
    probes and GQA uptrainings run before the session ends). Without `parts`,
    each part takes the next seeds while its wall time at `jobs` at once stays
    within limit_s; with it, the seeds are cut into that many parts of about
    equal core time. A seed's runs that alone exceed the limit are an error."""
    if not costs:
        raise ValueError("split_parts: expected at least one run, got none")
    groups = {}
    for rid in sorted(costs, key=lambda r: (seed_of[r], list(costs).index(r))):
        groups.setdefault(seed_of[rid], []).append(rid)
    if parts is not None:
        if not 1 <= parts <= len(groups):
            raise ValueError(f"split_parts: expected 1 <= parts <= {len(groups)} (the seeds), got {parts}")
        total, bins, done = sum(costs.values()), [[]], 0.0
        for k, ids in enumerate(groups.values()):
            left_groups, left_bins = len(groups) - k, parts - len(bins)
            if bins[-1] and len(bins) < parts and (done >= len(bins) * total / parts or left_groups <= left_bins):
                bins.append([])
            bins[-1] += ids
            done += sum(costs[r] for r in ids)
        return bins
    bins = []
    for seed, ids in groups.items():
        alone = makespan([costs[r] for r in ids], jobs)
        if alone > limit_s:
            raise ValueError(f"split_parts: seed {seed}'s {len(ids)} runs alone take {alone / 3600:.2f} h at {jobs} "
                             f"at once, over the {limit_s / 3600:g} h limit of a part; hint: fewer --steps, or a "
                             "longer --part-hours")
        if bins and makespan([costs[r] for r in bins[-1] + ids], jobs) <= limit_s:
            bins[-1] += ids
        else:
            bins.append(list(ids))
    return bins


def make_plan(grid: Grid, pilot, jobs=2, parts=None, limit_s=PART_HOURS * 3600, out=None, bins=None):
    """The parts with their runs, core-minutes and wall estimates. Without a
    pilot the runs are split by count (cost unknown) into `parts` (default 1).
    With `out`, the steps its runs' logs already hold are not counted again.
    With `bins` (a frozen plan's run ids per part), those parts are estimated
    as they are."""
    runs = runs_of(grid)
    done = {r["id"]: trained_steps(Path(out) / "runs" / r["id"]) if out else 0 for r in runs}
    est = {r["id"]: run_seconds(r, grid, pilot, done[r["id"]]) for r in runs}
    measured = all(v is not None for v in est.values())
    costs = est if measured else {r["id"]: float(r["steps"]) for r in runs}
    seed_of = {r["id"]: (not r["causal"], r["seed"]) for r in runs}   # the no-mask controls last
    if bins is None:
        bins = split_parts(costs, seed_of, jobs, limit_s if measured else float("inf"),
                           parts if measured or parts else 1)
    elif sorted(r for b in bins for r in b) != sorted(est):
        raise SystemExit("heads_study: the frozen plan's runs are not the grid's; hint: delete plan.json to replan")
    parts = []
    for b in bins:
        core = sum(est[r] for r in b) if measured else None
        wall = makespan([est[r] for r in b], jobs) if measured else None
        part = dict(runs=b, core_minutes=None if core is None else core / 60,
                    wall_minutes=None if wall is None else wall / 60)
        after = uptrainings_after(grid, pilot, b, out) if measured else None
        if after:   # `run` uptrains the part's seeds once its runs are done (the limit counts the runs only)
            part.update(after_core_minutes=sum(after) / 60, after_wall_minutes=makespan(after, jobs) / 60)
        parts.append(part)
    return dict(grid=grid.name, jobs=jobs, limit_hours=limit_s / 3600, measured=measured, parts=parts)


def uptrainings_after(grid: Grid, pilot, part_runs, out=None):
    """Seconds of each GQA uptraining of the seeds whose multi-head source run is
    in part_runs (lm grids with GQA runs), or None when the grid has none or the
    pilot lacks a row."""
    if grid.program != "lm" or not grid.gqa_heads:
        return None
    import heads_gqa   # it reads runs with this module's functions
    got = []
    for r in runs_of(grid):
        if r["id"] in part_runs and r["causal"] and r["H"] == r["G"] == grid.gqa_heads:
            secs = heads_gqa.uptraining_seconds(grid, pilot, r["seed"], out)
            if secs is None:
                return None
            got += secs
    return got


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


def trained_steps(run_dir):
    """The last step a run's checkpoint holds (0 when it has none): where a resume starts."""
    steps = [int(p.name[5:13]) for p in (Path(run_dir) / "ckpt").glob("step-*.model.safetensors")]
    return max(steps, default=0)


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
    # The checkpoint is not committed: its model's hash is kept beside the records (spm.sha256), so a clone
    # reports what the run trained on.
    spm, kept = d / "ckpt" / "sentencepiece.model", d / "spm.sha256"
    if spm.exists():
        digest = hashlib.sha256(spm.read_bytes()).hexdigest()
        if not kept.exists() or kept.read_text().strip() != digest:
            kept.write_text(digest + "\n")
    return dict(corpus_hash=corpus, spm_sha256=kept.read_text().strip() if kept.exists() else None)


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
# Pilot, plan and run

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
        if p.get("after_core_minutes"):
            head += (f"; then its seeds' GQA uptrainings, {p['after_core_minutes']:.1f} core-minutes, about "
                     f"{p['after_wall_minutes']:.1f} min wall")
        print(head)
        total += (cm or 0) + p.get("after_core_minutes", 0)
        for rid in p["runs"]:
            print(f"  {rid}: {shlex.join(runs[rid]['args'])}")
    if plan["measured"]:
        print(f"total: {total:.1f} core-minutes ({total / 60:.2f} core-hours) in {len(plan['parts'])} part(s) of at "
              f"most {plan['limit_hours']:g} h each")


def cmd_plan(args, grid=None):
    """Split the grid into parts and freeze the split in plan.json; with a plan
    already frozen, print it with its estimates remade (the pilot, or the steps
    already trained, may have changed) and say how to replan."""
    grid = frozen_grid(grid or grid_from(args), args.out)
    pilot, note = load_pilot(args.out)
    path = Path(args.out) / "plan.json"
    if path.exists():
        saved = json.loads(path.read_text())
        plan = make_plan(grid, pilot, saved["jobs"], limit_s=saved["limit_hours"] * 3600, out=args.out,
                         bins=[p["runs"] for p in saved["parts"]])
        print(f"note: the plan frozen in {path}, which `run` uses; delete it to replan with these flags")
    else:
        plan = make_plan(grid, pilot, args.jobs, args.parts, args.part_hours * 3600, args.out)
        if plan["measured"] or args.parts:
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
        plan = make_plan(grid, pilot, args.jobs, n, args.part_hours * 3600, args.out)
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
