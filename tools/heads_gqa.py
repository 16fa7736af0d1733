"""The heads study's GQA conversion with controls (issue 31): Ainslie et al.
(2023) convert a trained multi-head model to grouped-query attention by
mean-pooling each group's key and value heads, then "uptrain" it for a small
share of the original steps, and report near-multi-head quality after 5%.

For each seed's multi-head run at H = grid.gqa_heads and each G of the grid:
- convert (head_probe lm-convert-gqa) by mean pooling, and by keeping each
  group's first head (the control for what averaging adds); score the
  converted model untrained;
- uptrain with `lm train --init-from` at the grid's recipe (fresh AdamW, the
  grid's warmup, then a constant lr), mean pooling at the training lr and at a
  tenth of it, first-head pooling at the training lr;
- the control for "more training alone": the multi-head model itself trained
  the same extra steps the same way, at each learning rate (a tenth of the
  lr lowers the loss of any model after a constant-lr run, converted or not,
  so each uptraining is paired with the control at its own lr).
One uptraining run of 20% of the grid's steps gives the 5%, 10% and 20%
budgets from its evaluations: after the warmup the lr is constant, so the run
at step 150 is the run a 150-step budget would have made.

Every number is the held-out loss on the grid's evaluation windows, paired by
seed: uptrained GQA against the multi-head control at the same budget, and
against GQA trained from scratch for the grid's steps.

tools/heads_study.py is the command line (`gqa`, then `report`).
"""
from __future__ import annotations

import json
import math
import subprocess
from collections import defaultdict
from pathlib import Path

import heads_stats as hs
from heads_grids import Grid, _flags, run_id
from heads_runs import eval_records, read_log, run_pool, run_status, status

BUDGETS = (0.05, 0.10, 0.20)   # shares of the grid's steps; the run lasts the largest
LR_SCALES = (1.0, 0.1)         # of the training lr, for mean pooling
TRAINING_LR = 3e-3             # lm train's default, which the LM grid keeps
EVAL_EVERY = 50                # at most; it divides every budget's step (eval_every)


def variants(grid: Grid):
    """(name, G, pool, lr_scale) of every uptraining of one seed; pool None is the
    multi-head control (no conversion)."""
    out = []
    for G in grid.gqa_groups:
        for scale in LR_SCALES:
            out.append((f"G{G}-mean-lr{scale:g}", G, "mean", scale))
        out.append((f"G{G}-first-lr1", G, "first", 1.0))
    for scale in LR_SCALES:
        out.append((control_name(grid, scale), grid.gqa_heads, None, scale))
    return out


def control_name(grid: Grid, scale):
    """The multi-head control uptrained at `scale` times the training lr."""
    return f"G{grid.gqa_heads}-control-lr{scale:g}"


def uptrain_steps(grid: Grid):
    return round(max(BUDGETS) * grid.steps)


def uptraining_seconds(grid: Grid, pilot, seed, out=None):
    """Estimated seconds of each of one seed's uptrainings on one core, from the
    pilot's rows at (gqa_heads, G); an uptraining already complete in `out`
    costs 0. None without a pilot row."""
    got = []
    for name, G, _, _ in variants(grid):
        row = (pilot or {}).get("configs", {}).get(f"H{grid.gqa_heads}-G{G}")
        if row is None:
            return None
        log = gqa_root(grid, out) / f"s{seed}-{name}" / "log.jsonl" if out else None
        if log and status(read_log(log), uptrain_steps(grid)) == "complete":
            got.append(0.0)
            continue
        evals = uptrain_steps(grid) // eval_every(grid)
        got.append(row["startup_s"] + uptrain_steps(grid) * row["s_per_step"] + evals * row["eval_s"])
    return got


def budget_steps(grid: Grid):
    return [round(b * grid.steps) for b in BUDGETS]


def eval_every(grid: Grid):
    """Every EVAL_EVERY steps, or more often so that each budget's step is evaluated."""
    return math.gcd(EVAL_EVERY, *budget_steps(grid))


def training_lr(grid: Grid):
    return float(grid.model.get("lr", TRAINING_LR))


def gqa_root(grid: Grid, out):
    """out/gqa/from-<steps>: the uptrainings of the multi-head models at the grid's
    budget (a grid extended later converts its longer-trained models afresh)."""
    return Path(out) / "gqa" / f"from-{grid.steps}"


def source_dir(grid: Grid, out, seed):
    return Path(out) / "runs" / run_id(grid.gqa_heads, grid.gqa_heads, True, seed)


def uptrain_args(grid: Grid, G, scale, seed, init, d):
    """lm train's flags for one uptraining: the grid's model and recipe at G K/V
    heads, from `init` (a start killed before its first checkpoint starts over
    with --overwrite), or resuming its own checkpoint when it has one (lm
    refuses --init-from with --resume). The trainer evaluates the starting model
    as step 0."""
    model = {k: v for k, v in grid.model.items() if k != "lr"}
    resume = any((d / "ckpt").glob("step-*.model.safetensors"))
    return (["train"] + _flags(model) + ["--heads", str(grid.gqa_heads), "--kv-heads", str(G)] +
            (["--resume"] if resume else ["--init-from", str(init), "--overwrite"]) +
            ["--lr", f"{training_lr(grid) * scale:g}", "--seed", str(seed), "--steps", str(uptrain_steps(grid)),
             "--schedule", "warmup", "--warmup", str(grid.warmup), "--eval-every", str(eval_every(grid)),
             "--eval-size", str(grid.eval_size), "--log-every", str(eval_every(grid)), "--threads", str(grid.threads),
             "--samples", "0", "--quiet", "--keep-last", "1", "--log", str(d / "log.jsonl"),
             "--checkpoint-dir", str(d / "ckpt")] + (["--text", grid.text] if grid.text else []))


def cmd_gqa(args, grid: Grid):
    """Convert, score and uptrain every seed whose multi-head run is complete
    (gqa_root/s<seed>-<variant>/); finished uptrainings are skipped, partial ones resume."""
    root = gqa_root(grid, args.out)
    todo = []
    for seed in grid.seeds:
        src = source_dir(grid, args.out, seed)
        if status(read_log(src / "log.jsonl"), grid.steps) != "complete":
            print(f"seed {seed}: {src.name} is not complete; skipped")
            continue
        for name, G, pool, scale in variants(grid):
            d = root / f"s{seed}-{name}"
            if status(read_log(d / "log.jsonl"), uptrain_steps(grid)) == "complete":
                continue
            if not any((src / "ckpt").glob("step-*.model.safetensors")) and not any((d / "ckpt").glob("step-*")):
                print(f"seed {seed}: {src.name} has no checkpoint (a fresh checkout keeps the records only), so "
                      f"{d.name} cannot be uptrained here; hint: rerun the seed's part")
                continue
            d.mkdir(parents=True, exist_ok=True)
            init = src / "ckpt"
            if pool is not None:
                conv = d / "converted" / "converted.model.safetensors"
                if not conv.exists():
                    p = subprocess.run([args.head_probe, "lm-convert-gqa", "--checkpoint", str(src / "ckpt"),
                                        "--kv-heads", str(G), "--pool", pool, "--to", str(conv)],
                                       capture_output=True, text=True)
                    if p.returncode != 0:
                        raise SystemExit(f"heads_study gqa: converting {src.name} failed: {p.stderr.strip()}")
                init = conv
            todo.append((f"s{seed}-{name}", [str(args.lm)] + uptrain_args(grid, G, scale, seed, init, d),
                         d / "log.jsonl", d / "stdout.txt"))
    for k, (name, wall, _) in enumerate(run_pool(todo, args.jobs), 1):
        print(f"[{k}/{len(todo)}] uptrain {name}: {wall:.1f} s", flush=True)
    print(f"gqa: {len(todo)} uptrainings ran")


# ---------------------------------------------------------------------------
# Analysis

def loss_at(evals, step):
    for e in evals:
        if e["step"] == step:
            return e["eval_loss"]
    return None


def analyse_gqa(grid: Grid, out):
    """Per variant and budget the held-out loss over seeds, and the paired
    differences the claims rest on. None before any uptraining finished."""
    root = gqa_root(grid, out)
    if not root.exists():
        return None
    steps = budget_steps(grid)
    loss = defaultdict(dict)   # (variant, budget step or 0) -> seed -> loss
    for seed in grid.seeds:
        for name, *_ in variants(grid):
            d = root / f"s{seed}-{name}"
            records = read_log(d / "log.jsonl")
            if status(records, uptrain_steps(grid)) != "complete":
                continue
            ev = eval_records(records)
            for s in (0, *steps):
                loss[(name, s)][seed] = loss_at(ev, s)
    if not loss:
        return None
    ref = {}   # the grid's own runs: multi-head and from-scratch GQA at the full budget
    for G in (grid.gqa_heads, *grid.gqa_groups):
        for seed in grid.seeds:
            r = dict(id=run_id(grid.gqa_heads, G, True, seed), steps=grid.steps)
            if run_status(grid, r, out) == "complete":
                ref.setdefault(G, {})[seed] = eval_records(read_log(Path(out) / "runs" / r["id"] / "log.jsonl"))[-1][
                    "eval_loss"]
    rows = []
    for name, G, pool, scale in variants(grid):
        row = dict(variant=name, G=G, pool=pool or "none (multi-head control)", lr=training_lr(grid) * scale,
                   loss={})
        for s in (0, *steps):
            v = loss.get((name, s), {})
            if v:
                row["loss"][s] = _ci(v)
        if pool is not None:
            last = steps[-1]
            control = control_name(grid, scale)
            row["control"] = control
            row["vs_control"] = {s: _paired(loss.get((control, s), {}), loss.get((name, s), {})) for s in steps}
            row["vs_scratch"] = _paired(ref.get(G, {}), loss.get((name, last), {}))
            row["vs_mha"] = {s: _paired(ref.get(grid.gqa_heads, {}), loss.get((name, s), {})) for s in (0, *steps)}
            if pool != "mean":   # Ainslie et al.'s pooling comparison: this pooling minus mean pooling
                mean = next(v for v, g, pl, sc in variants(grid) if g == G and pl == "mean" and sc == scale)
                row["vs_mean"] = {s: _paired(loss.get((mean, s), {}), loss.get((name, s), {})) for s in (0, *steps)}
        rows.append(row)
    return dict(budgets=list(BUDGETS), steps=steps, uptrain_steps=uptrain_steps(grid), warmup=grid.warmup,
                heads=grid.gqa_heads, grid_steps=grid.steps, rows=rows,
                mha=_ci(ref[grid.gqa_heads]) if grid.gqa_heads in ref else None,
                scratch={G: _ci(ref[G]) for G in grid.gqa_groups if G in ref})


def _ci(by_seed):
    ci = hs.t_interval(list(by_seed.values()))
    return dict(mean=ci.mean, lo=ci.lo, hi=ci.hi, n=ci.n, text=hs.fmt_ci(ci, digits=4))


def _paired(a, b):
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    d = hs.paired({s: a[s] for s in seeds}, {s: b[s] for s in seeds})
    return dict(diff=d.diff.mean, n=d.n, p_t=d.p_t, text=hs.fmt_ci(d, digits=4, signed=True))


def markdown(res):
    if res is None:
        return "## GQA conversion\n\nNo uptrainings yet (`heads_study.py gqa`).\n"
    st = res["steps"]
    L = ["## GQA conversion (Ainslie et al. 2023) with controls", "",
         f"The H = {res['heads']} multi-head model of each seed after {res['grid_steps']} steps, converted to G K/V "
         f"heads and uptrained {res['uptrain_steps']} steps (warmup {res['warmup']}, then a constant lr); the "
         "budgets are read from the same run. Held-out loss, mean [95% t] (n seeds). The multi-head controls are "
         "the source model trained the same extra steps the same way, at each lr.", ""]
    if res["mha"]:
        L.append(f"Multi-head source (H = G = {res['heads']}, {res['grid_steps']} steps): {res['mha']['text']}.")
    for G, v in res["scratch"].items():
        L.append(f"G = {G} trained from scratch ({res['grid_steps']} steps): {v['text']}.")
    L += ["", "| variant | lr | converted, untrained | " + " | ".join(
        f"{b:.0%} ({s} steps)" for b, s in zip(res["budgets"], st)) + " |", "|---|---|---|" + "---|" * len(st)]
    for r in res["rows"]:
        cells = [r["loss"].get(s, {}).get("text", "-") for s in (0, *st)]
        L.append(f"| {r['variant']} | {r['lr']:g} | " + " | ".join(cells) + " |")
    L += ["", "Paired by seed (b - a, held-out loss): uptrained GQA against the multi-head control at the same "
          "lr and budget, and at the largest budget against GQA from scratch.", "",
          "| variant | control | " + " | ".join(f"minus the control, {s} steps" for s in st) +
          " | minus GQA from scratch |", "|---|---|" + "---|" * (len(st) + 1)]
    for r in res["rows"]:
        if "vs_control" not in r:
            continue
        cells = [(r["vs_control"].get(s) or {}).get("text", "-") for s in st]
        cells.append((r["vs_scratch"] or {}).get("text", "-"))
        L.append(f"| {r['variant']} | {r['control']} | " + " | ".join(cells) + " |")
    pooled = [r for r in res["rows"] if "vs_mean" in r]
    if pooled:
        L += ["", "Pooling compared (Ainslie et al.: mean pooling ahead of keeping the first head), paired by seed, "
              "b - a where a is mean pooling at the same G and lr:", "",
              "| variant | untrained | " + " | ".join(f"{s} steps" for s in st) + " |", "|---|---|" + "---|" * len(st)]
        for r in pooled:
            cells = [(r["vs_mean"].get(s) or {}).get("text", "-") for s in (0, *st)]
            L.append(f"| {r['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------
# What the KV cache costs against H and G (head_probe lm-cost)

# Two regimes: one sequence (the cache is small, the step is compute-bound:
# 2 blocks at E 128 keep 64 KB per head-width of cache at t = 1024), and a
# batch of 32 sequences at t = 1024 (tens of MB of cache, past the caches of
# the CPU: the memory-bound regime GQA's papers target).
COST_SETTINGS = (dict(name="one sequence", batch=1, lengths=(64, 256, 1024), repeats=5),
                 # lm-cost times the uncached path at the shortest length, so 16 keeps it cheap at B = 32
                 dict(name="a batch of 32", batch=32, lengths=(16, 1024), repeats=3))


def cost_path(out, setting=COST_SETTINGS[0]):
    return Path(out) / ("cost.json" if setting["batch"] == 1 else f"cost-b{setting['batch']}.json")


def cmd_cost(args, grid: Grid, vocab):
    """head_probe lm-cost at the grid's width and vocabulary, in each of
    COST_SETTINGS: every H of the grid with G = H, and the grid's G at its GQA H;
    one thread, as the runs train."""
    m = grid.model
    for st in COST_SETTINGS:
        argv = [args.head_probe, "lm-cost", "--heads", ",".join(map(str, grid.heads)),
                "--kv-heads", ",".join(map(str, grid.gqa_groups)), "--kv-at-heads", str(grid.gqa_heads),
                "--lengths", ",".join(map(str, st["lengths"])), "--batch", str(st["batch"]),
                "--d-model", str(m["d-model"]), "--d-ff", str(m["d-ff"]), "--layers", str(m["layers"]),
                "--vocab", str(vocab), "--repeats", str(st["repeats"]), "--threads", str(grid.threads),
                "--out", str(cost_path(args.out, st))]
        subprocess.run(argv, check=True)


def cost_data(out):
    """Each setting's measurement as head_probe lm-cost wrote it, by the batch
    ("b1", "b32"), or None before `heads_study.py cost`."""
    got = {f"b{st['batch']}": json.loads(cost_path(out, st).read_text())
           for st in COST_SETTINGS if cost_path(out, st).exists()}
    return got or None


def cost_markdown(out):
    L = ["## Decode cost against H and G", ""]
    for st in COST_SETTINGS:
        path = cost_path(out, st)
        L += [f"### {st['name'].capitalize()}", ""]
        L += _cost_table(json.loads(path.read_text())) if path.exists() else ["Not measured yet (`heads_study.py cost`)."]
        L.append("")
    return "\n".join(L)


def _cost_table(c):
    lengths = sorted({r["t"] for r in c["cached"]})
    off = [r for r in c["cached"] if r["kv_bytes_used"] != r["kv_bytes_formula"]]
    formula = ("equal to 2·L·B·t·G·D·4 at every point" if not off else
               f"differs from 2·L·B·t·G·D·4 at {len(off)} points: H {off[0]['heads']} G {off[0]['kv_heads']} t "
               f"{off[0]['t']}: {off[0]['kv_bytes_used']} against {off[0]['kv_bytes_formula']}")
    L = [f"Greedy decoding with the KV cache, batch {c['batch']}, {c['threads']} thread, on {c['cpu']}: CPU ms per "
         f"step of the batch (the process's CPU time, which other work on the machine disturbs less than the wall "
         f"clock; with one thread on a quiet machine the two agree; median of {c['repeats']} decodes of t tokens, "
         f"context t) and the cache's bytes at t "
         f"(the cache's own count; {formula}), random weights at the grid's width "
         f"(E {c['model']['d_model']}, {c['model']['layers']} blocks, vocabulary {c['model']['vocab']}).", "",
         "| H | G | " + " | ".join(f"CPU ms per step at t = {t}" for t in lengths) + " | " +
         " | ".join(f"KV bytes at t = {t}" for t in lengths) + " |", "|---|---|" + "---|" * (2 * len(lengths))]
    rows = {}
    for r in c["cached"]:
        rows.setdefault((r["heads"], r["kv_heads"]), {})[r["t"]] = r
    for (H, G), by_t in sorted(rows.items(), key=lambda x: (x[0][0], -x[0][1])):
        L.append(f"| {H} | {G} | " + " | ".join(f"{by_t[t]['cpu_ms_per_token']:.3f}" if t in by_t else "-"
                                               for t in lengths) + " | " +
                 " | ".join(f"{by_t[t]['kv_bytes_used']:,}" if t in by_t else "-" for t in lengths) + " |")
    if c.get("uncached"):
        L += ["", "Without the cache (each token runs the graph over its window again): " +
              ", ".join(f"H {r['heads']} G {r['kv_heads']} at t = {r['t']}: {r['cpu_ms_per_token']:.3f} CPU ms"
                        for r in c["uncached"]) + "."]
    return L
