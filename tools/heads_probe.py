"""The heads study's per-head analyses (issue 31): run `head_probe lm` (or
`translate`) on every complete run's last checkpoint (runs/<id>/probe.json),
then read them:

- pruning: Michel et al. (2019)'s curves, heads removed globally, least
  important first, in four orders (raw importance |dL/dxi_h|, importance
  normalised per layer as their section 4.1 does, single-head ablation, random
  orders); per H the held-out loss increase at each removed fraction with
  t-intervals over seeds, and the orders compared paired by run;
- roles: what each head attends to (previous token, itself, the first position
  of the window, a fixed offset of 2 to 8 tokens, induction: the token after
  an earlier occurrence of the current one), each head labelled by the role it scores highest on over a
  stated level; per H the heads of each role, and whether roles recur across
  seeds (heads_stats.recurrence_baseline: random matching and shuffled roles);
- importance against ablation: Spearman's rho per run, raw and normalised.

tools/heads_study.py is the command line (`probe`, then `report`).
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

import heads_stats as hs
from heads_grids import Grid, runs_of
from heads_runs import run_pool, run_status

ORDERS = ("importance", "importance_normalized", "ablation", "random")
ORDER_NAMES = {"importance": "raw importance", "importance_normalized": "normalised importance",
               "ablation": "single-head ablation", "random": "random (mean of the run's orders)"}
# A head's role scores (the columns of the recurrence matrices), each higher
# when the head does more of it: its mass on the previous token, on itself, on
# the next position (0 under a causal mask: the no-mask control's reading
# ahead), on the first position, on its best fixed offset 2 <= |t - s| <= 8
# (Clark et al. 2019's baseline; "offset" in probe.json says which k); induction
# mass above its own chance level (uniform
# attention over the keys it sees), so an even spread scores 0; for a
# cross-attention head, its mass near the monotone diagonal (round(t·S/T) ± 1)
# and on the last source position (a "no-op" sink); focus (the mean largest
# weight of a row) and breadth (entropy over its ceiling, log of the keys seen).
# Each kind of attention has the roles its statistics define.
SELF_ROLES = ("previous_token", "self", "next_token", "first_position", "offset", "induction", "focus", "breadth")
ROLE_SETS = {"lm": SELF_ROLES, "decoder_self": SELF_ROLES,
             "encoder_self": ("previous_token", "self", "next_token", "first_position", "offset", "focus", "breadth"),
             "decoder_cross": ("diagonal", "last_source", "focus", "breadth")}
ROLES = SELF_ROLES
# A head's label: the first role of its set whose score reaches its level.
# Half the attention on one kind of key names the head; induction at 0.3 above
# chance (the text's repeats are few); "focused" is a head that puts half its
# mass on one key that is none of the kinds above; "broad" spreads to 70% of the
# uniform entropy; "mixed" does none of these.
ROLE_LEVELS = {"previous_token": 0.5, "self": 0.5, "next_token": 0.5, "first_position": 0.5, "offset": 0.5,
               "induction": 0.3,
               "diagonal": 0.5, "last_source": 0.5, "focus": 0.5, "breadth": 0.7}
LABELS = {"previous_token": "previous token", "self": "self", "next_token": "next token",
          "first_position": "first position", "offset": "fixed offset",
          "induction": "induction", "diagonal": "diagonal", "last_source": "last source (sink)",
          "focus": "focused elsewhere", "breadth": "broad"}
KIND_NAMES = {"lm": "causal self-attention", "encoder_self": "encoder self-attention",
              "decoder_self": "decoder self-attention", "decoder_cross": "cross-attention"}
INTERIOR = slice(1, -1)   # the fractions strictly between none and all heads removed


def probe_path(out, run_id):
    return Path(out) / "runs" / run_id / "probe.json"


HELDOUT_LINE = re.compile(r"^held-out \((.*)\): loss (\S+)\s+perplexity (\S+)\s+bits/char (\S+) \((\d+) held-out tokens\)")


def heldout_path(out, run_id):
    return Path(out) / "runs" / run_id / "heldout.json"


def read_heldout_line(text):
    """lm eval's result line as a dict (None when absent)."""
    for line in text.splitlines():
        m = HELDOUT_LINE.match(line.strip())
        if m:
            return dict(text=m.group(1), loss=float(m.group(2)), perplexity=float(m.group(3)),
                        bits_per_char=float(m.group(4)), tokens=int(m.group(5)))
    return None


def sample_path(out, run_id):
    return Path(out) / "runs" / run_id / "sample.txt"


# What `probe` asks of the no-mask control and of the masked run of the same
# seed: a greedy continuation (deterministic) of a short prompt, long enough
# to pass the context, so the window ends both short of and at T.
SAMPLE_PROMPT, SAMPLE_TOKENS = "The ", 300


def wants_sample(grid: Grid, r):
    """The lm grid's no-mask control runs and the masked runs of their (H, seed)."""
    return (grid.program == "lm" and bool(grid.control_heads) and r["H"] == r["G"] == grid.control_heads
            and r["seed"] in grid.control_seeds)


def cmd_probe(args, grid: Grid):
    """For each complete run whose results are missing or older than its
    checkpoint (a run without a checkpoint keeps the results it has): head_probe
    lm or translate (probe.json) and, for lm, `lm eval` on every held-out window
    (heldout.json: the final quality on the whole held-out text, where the
    trainer's evaluations read its first eval_size windows) and, for the
    no-mask control and its masked twins, `lm sample` (sample.txt), `jobs` at
    once, one thread each."""
    todo = []
    for r in runs_of(grid):
        if run_status(grid, r, args.out) != "complete":
            continue
        ckpt = Path(args.out) / "runs" / r["id"] / "ckpt"
        path, held = probe_path(args.out, r["id"]), heldout_path(args.out, r["id"])
        sample = sample_path(args.out, r["id"]) if wants_sample(grid, r) else None
        saved = [p.stat().st_mtime for p in ckpt.glob("step-*.model.safetensors")]
        if not saved:   # a fresh checkout: the records are committed, the checkpoints are not
            lacking = [p.name for p in (path, held, sample) if p is not None and not p.exists()
                       and (p is path or grid.program == "lm")]
            if lacking:
                print(f"{r['id']}: no checkpoint to probe, so {' and '.join(lacking)} cannot be made here; "
                      "hint: rerun the run (its seed's part) to probe it")
            continue
        newest = max(saved)
        if not (path.exists() and path.stat().st_mtime >= newest):
            argv = [args.head_probe, grid.program, "--checkpoint", str(ckpt), "--threads", "1", "--out", str(path)]
            todo.append((f"probe {r['id']}", argv, None, str(path.with_suffix(".txt"))))
        if grid.program == "lm" and not (held.exists() and held.stat().st_mtime >= newest):
            held.with_suffix(".txt").unlink(missing_ok=True)   # run_pool appends
            argv = [args.lm, "eval", "--checkpoint", str(ckpt), "--threads", "1"]
            todo.append((f"held-out {r['id']}", argv, None, str(held.with_suffix(".txt"))))
        if sample is not None and not (sample.exists() and sample.stat().st_mtime >= newest):
            part = sample.with_suffix(".part")
            part.unlink(missing_ok=True)   # run_pool appends; a finished sample is renamed below
            argv = [args.lm, "sample", "--checkpoint", str(ckpt), "--threads", "1", "--temperature", "0",
                    "--prompt", SAMPLE_PROMPT, "--max-len", str(SAMPLE_TOKENS)]
            todo.append((f"sample {r['id']}", argv, None, str(part)))
    for k, (name, wall, _) in enumerate(run_pool(todo, args.jobs), 1):
        if name.startswith("held-out "):
            held = heldout_path(args.out, name.split(" ", 1)[1])
            result = read_heldout_line(held.with_suffix(".txt").read_text())
            if result is None:
                raise SystemExit(f"heads_study probe: no held-out line in {held.with_suffix('.txt')}")
            held.write_text(json.dumps(result) + "\n")
        elif name.startswith("sample "):
            part = sample_path(args.out, name.split(" ", 1)[1]).with_suffix(".part")
            part.replace(part.with_suffix(".txt"))
        print(f"[{k}/{len(todo)}] {name}: {wall:.1f} s", flush=True)
    print(f"probe: {len(todo)} jobs")


# ---------------------------------------------------------------------------
# Reading the probes

def scopes(probe):
    """The pruning blocks of a probe by scope: "all" (every head, across layers
    and kinds) and, for translate, each attention kind alone (Michel et al.'s
    Fig. 4); each block has its orders, fractions, heads and removed counts."""
    p = probe["pruning"]
    if "global" not in p:
        return {"all": p}
    return {"all": p["global"], **{t: p["by_type"][t] for t in probe["types"]}}   # the probe's order of kinds


def pruning_deltas(block, baseline, where="the probe"):
    """order -> the loss increase over the baseline at each fraction (random:
    the mean over the run's random orders)."""
    curves = defaultdict(list)
    for o in block["orders"]:
        name = "random" if o["name"].startswith("random") else o["name"]
        curves[name].append(np.asarray(o["loss"], dtype=float) - baseline)
    missing = [o for o in ORDERS if o not in curves]
    if missing:
        raise ValueError(f"{where} has no pruning order {missing}; hint: rerun `probe`")
    return {k: np.mean(v, axis=0) for k, v in curves.items()}


def head_kind(h):
    return h.get("type", "lm")


def role_scores(h, roles=SELF_ROLES):
    """One head's scores, in the order of roles."""
    def score(role):
        if role == "induction":
            return h["induction"] - h["induction_chance"]
        if role == "focus":
            return h["max_weight"]
        if role == "breadth":
            return h["entropy"] / h["uniform_entropy"] if h["uniform_entropy"] > 0 else 0.0
        if role == "offset":
            return h.get("offset_mass")   # None in a probe older than the offset scores
        return h[role]
    return [score(r) for r in roles]


def role_matrix(probe, kind="lm"):
    """[heads, roles] scores of the probe's heads of one kind, in layer-major
    order, and each head's layer."""
    heads = sorted((h for h in probe["heads"] if head_kind(h) == kind), key=lambda h: (h["layer"], h["head"]))
    roles = ROLE_SETS[kind]
    return np.asarray([role_scores(h, roles) for h in heads]), np.asarray([h["layer"] for h in heads])


def role_of(scores, roles=SELF_ROLES):
    """The head's label: the first of roles its score reaches the level of, else
    "mixed"; "unknown" when a score it needs is missing (None)."""
    for role, score in zip(roles, scores):
        if score is None:
            return "unknown"
        if score >= ROLE_LEVELS[role]:
            return role
    return "mixed"


def _rho(a, b):
    if np.all(a == a[0]) or np.all(b == b[0]):
        return None
    return float(stats.spearmanr(a, b).statistic)


def analyse_probes(grid: Grid, out):
    """Everything the report says about the heads, as data. Only the H-grid runs
    (multi-head, causal) enter; runs without a probe are listed as missing."""
    probes, missing = defaultdict(dict), []
    for r in runs_of(grid):
        if r["G"] != r["H"] or not r["causal"]:
            continue
        path = probe_path(out, r["id"])
        if path.exists():
            probes[r["H"]][r["seed"]] = json.loads(path.read_text())
        else:
            missing.append(r["id"])
    if not probes:
        return None
    first = next(iter(next(iter(probes.values())).values()))
    kinds = sorted({head_kind(h) for h in first["heads"]}, key=list(KIND_NAMES).index)
    res = dict(fractions=scopes(first)["all"]["fractions"], missing=missing, role_levels=ROLE_LEVELS,
               kinds=kinds, scopes=list(scopes(first)), per_H=[])
    auc = defaultdict(lambda: defaultdict(dict))   # scope -> order -> (H, seed) -> mean delta, interior fractions
    for H in sorted(probes):
        runs = probes[H]
        row = dict(H=H, n=len(runs), scopes={}, roles={}, recurrence={}, offsets={})
        for scope in res["scopes"]:
            blocks = {s: scopes(p)[scope] for s, p in runs.items()}
            deltas = {s: pruning_deltas(blocks[s], runs[s]["baseline_loss"], runs[s]["checkpoint"]) for s in runs}
            heads = blocks[next(iter(blocks))]["heads"]
            sc = dict(heads=heads, curves={}, prunable={})
            for o in ORDERS:
                per_f = np.array([deltas[s][o] for s in sorted(deltas)])
                sc["curves"][o] = [_interval(per_f[:, i]) for i in range(per_f.shape[1])]
                # The share of heads removed before the loss rises 1% of the baseline, per run.
                sc["prunable"][o] = _interval([_prunable(res["fractions"], deltas[s][o], runs[s]["baseline_loss"],
                                                         heads, blocks[s].get("removed")) for s in sorted(runs)])
                for s in deltas:
                    auc[scope][o][(H, s)] = float(np.mean(deltas[s][o][INTERIOR]))
            row["scopes"][scope] = sc
        row["heads"] = row["scopes"]["all"]["heads"]
        row["rho_ablation"] = {}
        for key in ("importance", "importance_normalized"):
            rhos = [_rho(np.array([h[key] for h in p["heads"]]), np.array([h["ablation_delta"] for h in p["heads"]]))
                    for p in runs.values()]
            rhos = [x for x in rhos if x is not None]
            row["rho_ablation"][key] = _interval(rhos) if rhos else None
        for kind in kinds:
            row["roles"][kind], row["recurrence"][kind], row["offsets"][kind] = _roles(runs, kind, H)
        row["costliest"] = _costliest(runs)
        row["ablation_by_kind"] = {kind: _interval([sum(h["ablation_delta"] for h in p["heads"]
                                                        if head_kind(h) == kind) for p in runs.values()])
                                   for kind in kinds}
        res["per_H"].append(row)
    res["orders"] = {scope: _compare_orders(auc[scope]) for scope in res["scopes"]}
    return res


def analyse_no_mask(grid: Grid, out):
    """The no-mask control of question 3 as data: for each of its runs with a
    probe, the whole-held-out loss beside the masked run of the same (H, seed),
    every head's mass on the next position (the token that is the position's
    own target) with its role and single-head ablation cost, and the greedy
    samples `probe` drew from both. None when the grid has no control."""
    if grid.program != "lm" or not grid.control_heads:
        return None
    by_id = {r["id"]: r for r in runs_of(grid)}
    runs, missing = [], []

    def read(run_id, path_of):
        path = path_of(out, run_id)
        if not path.exists():
            return None
        return path.read_text().rstrip("\n") if path.suffix == ".txt" else json.loads(path.read_text())

    for r in by_id.values():
        if r["causal"]:
            continue
        probe = read(r["id"], probe_path)
        if probe is None:
            missing.append(r["id"])
            continue
        twin = next((x["id"] for x in by_id.values() if x["causal"] and x["seed"] == r["seed"]
                     and x["H"] == r["H"] and x["G"] == r["G"]), None)
        if twin is None or not probe.get("heads"):
            missing.append(r["id"])
            continue
        held, twin_held = read(r["id"], heldout_path), read(twin, heldout_path)
        heads = []
        for h in sorted(probe["heads"], key=lambda h: (h["layer"], h["head"])):
            roles = ROLE_SETS[head_kind(h)]
            heads.append(dict(layer=h["layer"], head=h["head"], next_token=h["next_token"],
                              previous_token=h["previous_token"], self=h["self"],
                              role=LABELS.get(role_of(role_scores(h, roles), roles), "mixed"),
                              ablation_delta=h["ablation_delta"]))
        reader = max(heads, key=lambda h: h["next_token"])
        runs.append(dict(id=r["id"], seed=r["seed"], twin=twin,
                         loss=held and held["loss"], twin_loss=twin_held and twin_held["loss"],
                         probe_baseline=probe["baseline_loss"], heads=heads,
                         next_token_heads=sum(h["next_token"] >= ROLE_LEVELS["next_token"] for h in heads),
                         reader=reader, sample=read(r["id"], sample_path), twin_sample=read(twin, sample_path)))
    return dict(H=grid.control_heads, runs=runs, missing=missing, level=ROLE_LEVELS["next_token"],
                prompt=SAMPLE_PROMPT, sample_tokens=SAMPLE_TOKENS)


def no_mask_markdown(res):
    if res is None:
        return ""
    L = ["## The no-mask control", "",
         f"H = {res['H']} trained without the causal mask: every position sees every other, so position t can read "
         "its own target (token t + 1). Loss on every held-out window (`lm eval`, which reads ahead as training "
         "did) beside the masked run of the same seed; the heads that put at least "
         f"{res['level']:.0%} of their mass on the next position; the head with the most, and the loss its "
         "single-head ablation costs (head_probe, on its windows).", ""]
    if res["missing"]:
        L += [f"Without a probe yet: {', '.join(res['missing'])}.", ""]
    if not res["runs"]:
        return "\n".join(L) + "\n"
    L += ["| run | held-out loss, no mask | masked, same seed | heads reading the next position | "
          "largest next-position mass (layer, head) | its ablation cost |", "|---|---|---|---|---|---|"]
    fmt = lambda x: "-" if x is None else f"{x:.4f}"   # noqa: E731
    for r in res["runs"]:
        h = r["reader"]
        L.append(f"| {r['id']} | {fmt(r['loss'])} | {fmt(r['twin_loss'])} | {r['next_token_heads']} of "
                 f"{len(r['heads'])} | {h['next_token']:.3f} (L{h['layer']} H{h['head']}) | "
                 f"{h['ablation_delta']:+.4f} |")
    L += ["", "Every head of the control: mass on the next position, the previous one and itself; its label; "
          "its ablation cost.", "", "| run | layer | head | next | previous | self | label | ablation cost |",
          "|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        L += [f"| {r['id']} | {h['layer']} | {h['head']} | {h['next_token']:.3f} | {h['previous_token']:.3f} | "
              f"{h['self']:.3f} | {h['role']} | {h['ablation_delta']:+.4f} |" for h in r["heads"]]
    for r in res["runs"]:
        for name, text in ((r["id"], r["sample"]), (r["twin"], r["twin_sample"])):
            if text is not None:
                L += ["", f"Greedy sample of {name} ({res['sample_tokens']} tokens after {res['prompt']!r}):", "",
                      "```text", text.rstrip("\n"), "```"]
    return "\n".join(L) + "\n"


def _costliest(runs):
    """The head whose single-head ablation costs most in each run: how often it
    is of each (kind, layer, role), and its loss increase over the runs. In a
    probe without the offset scores (older than that statistic) a head no
    earlier role names is "unknown"."""
    where, deltas = defaultdict(int), []
    for p in runs.values():
        h = max(p["heads"], key=lambda x: x["ablation_delta"])
        roles = ROLE_SETS[head_kind(h)]
        role = role_of(role_scores(h, roles), roles)
        where[(head_kind(h), h["layer"], role)] += 1
        deltas.append(h["ablation_delta"])
    return dict(n=len(deltas), delta=_interval(deltas),
                heads=[dict(kind=k, layer=l, role=r, runs=c) for (k, l, r), c in
                       sorted(where.items(), key=lambda kv: -kv[1])])


def _roles(runs, kind, H):
    """Heads of each label per model (t-intervals over seeds), the recurrence
    across seeds of the roles every seed has a head labelled with (a role no head
    holds has no "best head" to recur), and how many heads labelled "fixed
    offset" read each offset k (all seeds together)."""
    roles = ROLE_SETS[kind]
    # Probes written before head_probe measured the best offset (the LM grid's
    # seed 1, whose checkpoints were gone) have no offset score: they leave the
    # role statistics, and the n of each cell says so.
    runs = {s: p for s, p in runs.items()
            if "offset" not in roles or all("offset_mass" in h for h in p["heads"] if head_kind(h) == kind)}
    if not runs:
        return {}, None, {}
    offsets = defaultdict(int)
    for p in runs.values():
        for h in p["heads"]:
            if head_kind(h) == kind and role_of(role_scores(h, roles), roles) == "offset":
                offsets[str(h["offset"])] += 1
    offsets = dict(sorted(offsets.items(), key=lambda kv: int(kv[0])))
    mats = {s: role_matrix(p, kind) for s, p in sorted(runs.items())}
    counts = defaultdict(list)
    for m, _ in mats.values():
        labels = [role_of(x, roles) for x in m]
        for role in (*roles, "mixed"):
            counts[role].append(labels.count(role))
    held = [j for j, role in enumerate(roles) if all(any(role_of(x, roles) == role for x in m) for m, _ in mats.values())]
    if H == 1 or len(mats) < 2 or not held:
        return {role: _interval(c, 1) for role, c in counts.items()}, None, offsets
    groups = next(iter(mats.values()))[1]
    rec = hs.recurrence_baseline({s: m[:, held] for s, (m, _) in mats.items()}, groups=groups, permutations=2000)
    return {role: _interval(c, 1) for role, c in counts.items()}, dict(
        observed=rec.observed, roles=rec.roles, held=[roles[j] for j in held],
        recurred=[roles[j] for j, r in zip(held, rec.recurred) if r],
        # the same as text, for the write-up
        held_names=", ".join(LABELS[roles[j]] for j in held),
        recurred_names=", ".join(LABELS[roles[j]] for j, r in zip(held, rec.recurred) if r) or "none",
        random_mean=rec.random_mean,
        random_p=rec.random_p, seeds=len(mats),
        # One role has no other to shuffle with: that null is void.
        shuffle_mean=rec.shuffle_mean if len(held) > 1 else None,
        shuffle_p=rec.shuffle_p if len(held) > 1 else None), offsets


def _interval(values, digits=3):
    ci = hs.t_interval(values)
    return dict(mean=ci.mean, lo=ci.lo, hi=ci.hi, n=ci.n, text=hs.fmt_ci(ci, digits=digits))


def removed_counts(fractions, heads):
    """Heads removed at each fraction: round(f * N), halves away from zero, as
    head_probe counts them (C++ std::round)."""
    return [int(np.floor(f * heads + 0.5)) for f in fractions]


def _prunable(fractions, delta, baseline, heads, removed=None):
    """The largest share of heads removed before the first fraction whose loss
    increase reaches 1% of the baseline (curves need not be monotone, so a later
    dip is not counted)."""
    best = 0
    for k, d in zip(removed or removed_counts(fractions, heads), delta):
        if d >= 0.01 * baseline:
            break
        best = k
    return best / heads


def _compare_orders(auc):
    """Each order against raw importance, paired by run (H > 1: at H = 1 the
    per-layer normalisation ties every head), by the mean loss increase over the
    interior fractions; Holm over the three comparisons."""
    keys = {k for k in auc["importance"] if k[0] > 1}
    if len(keys) < 2:
        return None
    out = []
    for o in ("importance_normalized", "ablation", "random"):
        p = hs.paired({k: auc["importance"][k] for k in keys}, {k: auc[o][k] for k in keys})
        out.append(dict(order=o, diff=_interval([auc[o][k] - auc["importance"][k] for k in sorted(keys)]),
                        p_t=p.p_t, p_wilcoxon=p.p_wilcoxon, n=p.n))
    adjusted = hs.holm([c["p_t"] if c["p_t"] is not None else 1.0 for c in out])
    for c, p in zip(out, adjusted):
        c["p_holm"] = p
    return dict(what="mean loss increase over the fractions 0.1-0.9, order minus raw importance, paired by run "
                     "(every H > 1 run with its seed)", comparisons=out)


# ---------------------------------------------------------------------------
# Markdown

def markdown(res):
    if res is None:
        return "## Heads\n\nNo probes yet (`heads_study.py probe`).\n"
    fr = res["fractions"]
    show = [i for i, f in enumerate(fr) if round(f * 10) in (2, 4, 6, 8)]
    many = len(res["scopes"]) > 1
    lines = ["## Pruning (Michel et al. 2019), heads removed least important first", "",
             "Held-out loss increase (nats) when that fraction of the heads is removed"
             + (": across every head (all), or within one kind of attention only, the others kept (Michel et al.'s "
                "Fig. 4)" if many else ", across layers") +
             "; importance is computed once on the full model; random is the mean of each run's random orders. "
             "Mean [95% t-interval] over seeds.", ""]
    head = ("| H | " + ("heads pruned | " if many else "") + "order | " +
            " | ".join(f"{fr[i]:.0%} removed" for i in show) + " | share of heads removed before the loss rises 1% |")
    lines += [head, "|" + "---|" * (3 + len(show) + many)]
    for row in res["per_H"]:
        for scope, sc in row["scopes"].items():
            where = f"{KIND_NAMES.get(scope, scope)} ({sc['heads']}) | " if many else ""
            for o in ORDERS:
                cells = " | ".join(sc["curves"][o][i]["text"] for i in show)
                lines.append(f"| {row['H']} | {where}{ORDER_NAMES[o]} | {cells} | {sc['prunable'][o]['text']} |")
    for scope, orders in res["orders"].items():
        orders = orders or dict(what="(needs two H > 1 runs)", comparisons=[])
        what = f" ({KIND_NAMES.get(scope, scope)} heads)" if many else ""
        lines += ["", f"Orders against raw importance{what}: {orders['what']}; Holm over the three.", "",
                  "| order | minus raw importance | p (t) | p (Holm) | p (Wilcoxon) |", "|---|---|---|---|---|"]
        for c in orders["comparisons"]:
            lines.append(f"| {ORDER_NAMES[c['order']]} | {c['diff']['text']} | {_p(c['p_t'])} | {_p(c['p_holm'])} | "
                         f"{_p(c['p_wilcoxon'])} |")
    lines += ["", "## Importance against ablation", "",
              "Spearman's rho between each head's importance and its single-head ablation loss increase, per run; "
              "mean over seeds.", "", "| H | raw | normalised per layer |", "|---|---|---|"]
    for row in res["per_H"]:
        r = row["rho_ablation"]
        lines.append(f"| {row['H']} | {_t(r['importance'])} | {_t(r['importance_normalized'])} |")
    lines += ["", "The costliest head of each run (the largest single-head ablation), and the ablation losses "
              "summed within each kind of attention, mean [95% t] over seeds:", "",
              "| H | costliest head: kind, layer, role (runs) | its loss increase | " +
              " | ".join(f"sum over {KIND_NAMES.get(k, k)}" for k in res["kinds"]) + " |",
              "|" + "---|" * (3 + len(res["kinds"]))]
    for row in res["per_H"]:
        c = row["costliest"]
        where = "; ".join(f"{KIND_NAMES.get(x['kind'], x['kind'])} L{x['layer']} "
                          f"{LABELS.get(x['role'], x['role'])} ({x['runs']} of {c['n']})" for x in c["heads"])
        lines.append(f"| {row['H']} | {where} | {c['delta']['text']} | " +
                     " | ".join(row["ablation_by_kind"][k]["text"] for k in res["kinds"]) + " |")
    levels = ", ".join(f"{LABELS[r]} {v:g}" for r, v in ROLE_LEVELS.items())
    lines += ["", "## Head roles", "",
              "Each head's scores on the held-out text: mass on the previous token, on itself, on the first position, "
              "on its best fixed offset k (2 <= |k| <= 8, k > 0 behind), "
              "induction mass above its uniform-attention chance; for cross-attention, mass near the monotone diagonal "
              "and on the last source position; focus (mean largest weight) and breadth (entropy over its ceiling). "
              "A head is labelled by the first role of its kind that reaches its level "
              f"({levels}), else mixed. Heads per model, mean [95% t] over seeds. Recurrence: the roles every seed "
              "has a head for, whose best head is matched across every seed (heads matched within layers by their "
              "score rows), against random matching and shuffled roles."]
    for kind in res["kinds"]:
        roles = ROLE_SETS[kind]
        lines += ["", f"### {KIND_NAMES[kind].capitalize()}", "",
                  "| H | " + " | ".join(LABELS[r] for r in roles) + " | mixed | roles recurring (chance: random / "
                  "shuffled, p) |", "|" + "---|" * (len(roles) + 3)]
        for row in res["per_H"]:
            if not row["roles"][kind]:
                lines.append(f"| {row['H']} | " + "n/a | " * (len(roles) + 1) + "no probe measured the offsets |")
                continue
            cells = " | ".join(row["roles"][kind][r]["text"] for r in (*roles, "mixed"))
            lines.append(f"| {row['H']} | {cells} | {_recurrence_text(row['recurrence'][kind])} |")
        offsets = [f"H = {row['H']}: " + ", ".join(f"k = {k} ({c})" for k, c in row["offsets"][kind].items())
                   for row in res["per_H"] if row["offsets"][kind]]
        if offsets:
            lines += ["", "Fixed-offset heads by offset (heads over all seeds): " + "; ".join(offsets) + "."]
    if res["missing"]:
        lines += ["", f"Runs without a probe: {', '.join(res['missing'])}."]
    return "\n".join(lines) + "\n"


def _recurrence_text(rec):
    if rec is None:
        return "n/a"
    if rec["shuffle_p"] is None:
        return (f"{rec['observed']} of 1 ({LABELS[rec['held'][0]]}) over {rec['seeds']} seeds (random matching "
                f"{rec['random_mean']:.2f}; one role: nothing to shuffle)")
    recurred = ", ".join(LABELS[r] for r in rec["recurred"]) or "none"
    return (f"{rec['observed']} of {rec['roles']} ({', '.join(LABELS[r] for r in rec['held'])}; recurring: {recurred}) "
            f"over {rec['seeds']} seeds ({rec['random_mean']:.2f} / {rec['shuffle_mean']:.2f}, "
            f"p {rec['shuffle_p']:.3g})")


def _p(p):
    return "n/a" if p is None else f"{p:.3g}"


def _t(x):
    return "n/a" if x is None else x["text"]
