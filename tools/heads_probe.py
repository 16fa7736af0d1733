"""The heads study's per-head analyses (issue 31): run `head_probe lm` on every
complete run's last checkpoint (runs/<id>/probe.json), then read them:

- pruning: Michel et al. (2019)'s curves, heads removed globally, least
  important first, in four orders (raw importance |dL/dxi_h|, importance
  normalised per layer as their section 4.1 does, single-head ablation, random
  orders); per H the held-out loss increase at each removed fraction with
  t-intervals over seeds, and the orders compared paired by run;
- roles: what each head attends to (previous token, itself, the first position
  of the window, induction: the token after an earlier occurrence of the
  current one), each head labelled by the role it scores highest on over a
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
# the window's first position; induction mass above its own chance level
# (uniform attention over the keys it sees), so an even spread scores 0; focus
# (the mean largest weight of a row) and breadth (entropy over its causal
# ceiling, log of the keys seen).
ROLES = ("previous_token", "self", "first_position", "induction", "focus", "breadth")
# A head's label: the first role (in this order) whose score reaches its level.
# Half the attention on one kind of key names the head; induction at 0.3 above
# chance (the text's repeats are few); "focused" is a head that puts half its
# mass on one key that is none of the kinds above; "broad" spreads to 70% of the
# uniform entropy; "mixed" does none of these.
ROLE_LEVELS = (("previous_token", 0.5), ("self", 0.5), ("first_position", 0.5), ("induction", 0.3),
               ("focus", 0.5), ("breadth", 0.7))
LABELS = {"previous_token": "previous token", "self": "self", "first_position": "first position",
          "induction": "induction", "focus": "focused elsewhere", "breadth": "broad"}
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


def cmd_probe(args, grid: Grid):
    """For each complete run whose results are missing or older than its
    checkpoint: head_probe lm (probe.json) and `lm eval` on every held-out window
    (heldout.json: the final quality on the whole held-out text, where the
    trainer's evaluations read its first eval_size windows), `jobs` at once, one
    thread each."""
    todo = []
    for r in runs_of(grid):
        if run_status(grid, r, args.out) != "complete":
            continue
        ckpt = Path(args.out) / "runs" / r["id"] / "ckpt"
        newest = max(p.stat().st_mtime for p in ckpt.glob("step-*.model.safetensors"))
        path, held = probe_path(args.out, r["id"]), heldout_path(args.out, r["id"])
        if not (path.exists() and path.stat().st_mtime >= newest):
            argv = [args.head_probe, "lm", "--checkpoint", str(ckpt), "--threads", "1", "--out", str(path)]
            todo.append((f"probe {r['id']}", argv, None, str(path.with_suffix(".txt"))))
        if not (held.exists() and held.stat().st_mtime >= newest):
            held.with_suffix(".txt").unlink(missing_ok=True)   # run_pool appends
            argv = [args.lm, "eval", "--checkpoint", str(ckpt), "--threads", "1"]
            todo.append((f"held-out {r['id']}", argv, None, str(held.with_suffix(".txt"))))
    for k, (name, wall, _) in enumerate(run_pool(todo, args.jobs), 1):
        if name.startswith("held-out "):
            held = heldout_path(args.out, name.split(" ", 1)[1])
            result = read_heldout_line(held.with_suffix(".txt").read_text())
            if result is None:
                raise SystemExit(f"heads_study probe: no held-out line in {held.with_suffix('.txt')}")
            held.write_text(json.dumps(result) + "\n")
        print(f"[{k}/{len(todo)}] {name}: {wall:.1f} s", flush=True)
    print(f"probe: {len(todo)} jobs")


# ---------------------------------------------------------------------------
# Reading the probes

def pruning_deltas(probe):
    """order -> the loss increase over the baseline at each fraction (random:
    the mean over the run's random orders)."""
    base = probe["baseline_loss"]
    curves = defaultdict(list)
    for o in probe["pruning"]["orders"]:
        name = "random" if o["name"].startswith("random") else o["name"]
        curves[name].append(np.asarray(o["loss"], dtype=float) - base)
    missing = [o for o in ORDERS if o not in curves]
    if missing:
        raise ValueError(f"{probe['checkpoint']}: the probe has no pruning order {missing}; hint: rerun `probe`")
    return {k: np.mean(v, axis=0) for k, v in curves.items()}


def role_scores(h):
    """One head's scores, in ROLES order."""
    breadth = h["entropy"] / h["uniform_entropy"] if h["uniform_entropy"] > 0 else 0.0
    return [h["previous_token"], h["self"], h["first_position"], h["induction"] - h["induction_chance"],
            h["max_weight"], breadth]


def role_matrix(probe):
    """[heads, roles] scores in layer-major head order, and each head's layer."""
    heads = sorted(probe["heads"], key=lambda h: (h["layer"], h["head"]))
    return np.asarray([role_scores(h) for h in heads]), np.asarray([h["layer"] for h in heads])


def role_of(scores):
    """The head's label: the first role of ROLE_LEVELS its score reaches, else "mixed"."""
    for role, level in ROLE_LEVELS:
        if scores[ROLES.index(role)] >= level:
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
    fractions = next(iter(next(iter(probes.values())).values()))["pruning"]["fractions"]
    res = dict(fractions=fractions, missing=missing, role_levels=dict(ROLE_LEVELS), roles=list(ROLES), per_H=[])
    auc = defaultdict(dict)   # order -> (H, seed) -> mean delta over the interior fractions
    for H in sorted(probes):
        runs = probes[H]
        deltas = {s: pruning_deltas(p) for s, p in runs.items()}
        row = dict(H=H, n=len(runs), heads=runs[next(iter(runs))]["pruning"]["heads"], curves={}, roles={})
        for o in ORDERS:
            per_f = np.array([deltas[s][o] for s in sorted(deltas)])
            row["curves"][o] = [_interval(per_f[:, i]) for i in range(per_f.shape[1])]
            for s in deltas:
                auc[o][(H, s)] = float(np.mean(deltas[s][o][INTERIOR]))
        # The largest fraction each order removes at < 1% of the baseline loss, per run.
        row["prunable"] = {o: _interval([_prunable(fractions, deltas[s][o], runs[s]["baseline_loss"], row["heads"],
                                                   runs[s]["pruning"].get("removed"))
                                         for s in sorted(runs)]) for o in ORDERS}
        row["rho_ablation"] = {}
        for key in ("importance", "importance_normalized"):
            rhos = [_rho(np.array([h[key] for h in p["heads"]]), np.array([h["ablation_delta"] for h in p["heads"]]))
                    for p in runs.values()]
            rhos = [x for x in rhos if x is not None]
            row["rho_ablation"][key] = _interval(rhos) if rhos else None
        mats = {s: role_matrix(p) for s, p in sorted(runs.items())}
        counts = defaultdict(list)
        for s, (m, _) in mats.items():
            labels = [role_of(x) for x in m]
            for role in (*ROLES, "mixed"):
                counts[role].append(labels.count(role))
        row["roles"] = {role: _interval(c, 1) for role, c in counts.items()}
        # Recurrence over the roles every seed has a head labelled with (a role
        # no head holds has no "best head" to recur).
        held = [j for j, role in enumerate(ROLES)
                if all(any(role_of(x) == role for x in m) for m, _ in mats.values())]
        if H > 1 and len(mats) >= 2 and held:
            groups = next(iter(mats.values()))[1]
            rec = hs.recurrence_baseline({s: m[:, held] for s, (m, _) in mats.items()}, groups=groups,
                                         permutations=2000)
            row["recurrence"] = dict(observed=rec.observed, roles=rec.roles, held=[ROLES[j] for j in held],
                                     random_mean=rec.random_mean, random_p=rec.random_p,
                                     # One role has no other to shuffle with: that null is void.
                                     shuffle_mean=rec.shuffle_mean if len(held) > 1 else None,
                                     shuffle_p=rec.shuffle_p if len(held) > 1 else None, seeds=len(mats))
        res["per_H"].append(row)
    res["orders"] = _compare_orders(auc)
    return res


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
    lines = ["## Pruning (Michel et al. 2019), heads removed across layers, least important first", "",
             "Held-out loss increase (nats) when that fraction of all heads is removed; importance is computed "
             "once on the full model; random is the mean of each run's random orders. Mean [95% t-interval] "
             "over seeds.", ""]
    head = ("| H | order | " + " | ".join(f"{fr[i]:.0%} removed" for i in show) +
            " | share of heads removed before the loss rises 1% |")
    lines += [head, "|" + "---|" * (3 + len(show))]
    for row in res["per_H"]:
        for o in ORDERS:
            cells = " | ".join(row["curves"][o][i]["text"] for i in show)
            lines.append(f"| {row['H']} | {ORDER_NAMES[o]} | {cells} | {row['prunable'][o]['text']} |")
    orders = res["orders"] or dict(what="(needs two H > 1 runs)", comparisons=[])
    lines += ["", f"Orders against raw importance: {orders['what']}; Holm over the three.", "",
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
    levels = ", ".join(f"{LABELS[r]} {v:g}" for r, v in ROLE_LEVELS)
    lines += ["", "## Head roles", "",
              "Each head's scores on the held-out windows: mass on the previous token, on itself, on the window's "
              "first position, induction mass above its uniform-attention chance, focus (mean largest weight), "
              "breadth (entropy over its causal ceiling). A head is labelled by the first of these that reaches its "
              f"level ({levels}), else mixed. Heads per model, mean [95% t] over seeds. Recurrence: the roles "
              "every seed has a head for, whose best head is matched across every seed (heads matched within "
              "layers by their score rows), against random matching and shuffled roles.", "",
              "| H | heads | " + " | ".join(LABELS[r] for r in ROLES) + " | mixed | roles recurring (chance: "
              "random / shuffled, p) |", "|" + "---|" * (len(ROLES) + 4)]
    for row in res["per_H"]:
        cells = " | ".join(row["roles"][r]["text"] for r in (*ROLES, "mixed"))
        rec = row.get("recurrence")
        if rec and rec["shuffle_p"] is not None:
            rtext = (f"{rec['observed']} of {rec['roles']} ({', '.join(LABELS[r] for r in rec['held'])}) over "
                     f"{rec['seeds']} seeds ({rec['random_mean']:.2f} / {rec['shuffle_mean']:.2f}, "
                     f"p {rec['shuffle_p']:.3g})")
        elif rec:
            rtext = (f"{rec['observed']} of 1 ({LABELS[rec['held'][0]]}) over {rec['seeds']} seeds (random "
                     f"matching {rec['random_mean']:.2f}; one role: nothing to shuffle)")
        else:
            rtext = "n/a"
        lines.append(f"| {row['H']} | {row['heads']} | {cells} | {rtext} |")
    if res["missing"]:
        lines += ["", f"Runs without a probe: {', '.join(res['missing'])}."]
    return "\n".join(lines) + "\n"


def _p(p):
    return "n/a" if p is None else f"{p:.3g}"


def _t(x):
    return "n/a" if x is None else x["text"]
