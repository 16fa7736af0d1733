"""The heads study's figures (issue 31), drawn from a grid's report (the JSON of
`heads_study.py report`) and its runs' logs into the grid's directory;
tools/heads_doc.py render draws them with the doc. Needs Debian's python3-matplotlib (scripts/setup
--with-torch installs it).

    quality.png          final held-out loss (the whole held-out text when the runs
                         were probed, else the trainer's last evaluation) against H,
                         mean over seeds with its 95% t-interval; the G < H runs
                         beside their H (the no-mask control reads its own target,
                         a loss near 0, and is left off the scale)
    time-to-target.png   steps, and seconds at the pilot's step time, to the common
                         target against H, with 95% t-intervals
    curves.png           held-out loss against step per configuration, the mean
                         over seeds, with the last third of training enlarged
    pruning.png          Michel et al.'s pruning curves: the held-out loss increase
                         against the share of heads removed, in each order, mean
                         over seeds with its 95% t-band; one panel per attention
                         kind (translation: all heads, then each kind alone, the
                         others kept) or per H (the language model)
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heads_grids import runs_of, saved_grid  # noqa: E402
from heads_runs import eval_records, read_log  # noqa: E402


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _label(row):
    if not row["causal"]:
        return f"H = {row['H']}, no causal mask"
    return f"H = {row['H']}" + (f", G = {row['G']}" if row["G"] != row["H"] else "")


def _errorbar(ax, x, rows, **kw):
    mean = np.array([r["mean"] for r in rows])
    lo = np.array([r["lo"] if r["lo"] is not None else r["mean"] for r in rows])
    hi = np.array([r["hi"] if r["hi"] is not None else r["mean"] for r in rows])
    ax.errorbar(x, mean, yerr=[mean - lo, hi - mean], capsize=3, **kw)


def quality(res, path):
    """Final held-out loss against H (log2 axis); G < H at H slightly right of it."""
    plt = _plt()
    block = res.get("final_heldout") or {"per_config": res["final_loss"]}
    rows = block["per_config"]
    what = "held-out loss, whole held-out text" if res.get("final_heldout") else "held-out loss, last evaluation"
    fig, ax = plt.subplots(figsize=(6, 4))
    mha = [r for r in rows if r["G"] == r["H"] and r["causal"]]
    _errorbar(ax, [r["H"] for r in mha], mha, fmt="o-", color="C0", label="multi-head (G = H)")
    for i, r in enumerate(x for x in rows if x["G"] != x["H"] and x["causal"]):
        _errorbar(ax, [r["H"] * 1.08 ** (i + 1)], [r], fmt="s", color=f"C{i + 1}", label=_label(r))
    ax.set_xscale("log", base=2)
    ax.set_xticks([r["H"] for r in mha], [str(r["H"]) for r in mha])
    ax.set_xlabel("heads H (constant width E)")
    ax.set_ylabel(f"{what} (nats/char)" if res["grid"]["program"] == "lm" else what)
    n = sorted({r["n"] for r in rows})
    ax.set_title(f"Quality against H: mean and 95% t-interval over seeds (n = {', '.join(map(str, n))})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def time_to_target(res, path):
    """Steps and seconds (at the pilot's step time) to the target against H."""
    plt = _plt()
    t = res["target"]
    rows = [r for r in t["per_H"] if "steps_ci" in r]
    panels = [("steps_ci", "steps to target")]
    if all("pilot_seconds_ci" in r for r in rows):
        panels.append(("pilot_seconds_ci", f"seconds to target ({t['threads']} thread, pilot step time)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, (key, label) in zip(axes[0], panels):
        _errorbar(ax, [r["H"] for r in rows], [r[key] for r in rows], fmt="o-", color="C0")
        ax.set_xscale("log", base=2)
        ax.set_xticks([r["H"] for r in rows], [str(r["H"]) for r in rows])
        ax.set_xlabel("heads H")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle(f"Time to {t['what']} {t['level']:.4f}: mean and 95% t-interval over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def curves(out, path):
    """Held-out loss against step, the mean over seeds per configuration; the right
    panel enlarges the last third of training."""
    plt = _plt()
    grid = saved_grid(out)
    by = defaultdict(list)
    for r in runs_of(grid):
        ev = eval_records(read_log(Path(out) / "runs" / r["id"] / "log.jsonl"))
        if ev and ev[-1]["step"] >= grid.steps:
            by[(r["H"], r["G"], r["causal"])].append({e["step"]: e["eval_loss"] for e in ev})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    tail = grid.steps * 2 / 3
    for i, (k, logs) in enumerate(sorted(by.items(), key=lambda kv: (not kv[0][2], kv[0][1] != kv[0][0], kv[0]))):
        steps = sorted(set.intersection(*(set(x) for x in logs)))
        mean = [np.mean([x[s] for x in logs]) for s in steps]
        label = _label(dict(H=k[0], G=k[1], causal=k[2])) + f" (n = {len(logs)})"
        style = "-" if k[2] and k[0] == k[1] else "--"
        for ax in axes:
            keep = [j for j, s in enumerate(steps) if ax is axes[0] or s >= tail]
            ax.plot([steps[j] for j in keep], [mean[j] for j in keep], style, color=f"C{i}", label=label, lw=1.2)
    axes[0].set_ylabel("held-out loss (first evaluation windows)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[1].set_title(f"the last third (steps {tail:.0f}-{grid.steps})", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


ORDER_STYLE = {"importance": ("raw importance", "C0"), "importance_normalized": ("normalised importance", "C1"),
               "ablation": ("single-head ablation", "C2"), "random": ("random", "C7")}


def pruning(res, path):
    """The pruning curves of the probes (res["heads"]); False when there are none."""
    heads = res.get("heads")
    if not heads or not heads["per_H"]:
        return False
    fr = np.array(heads["fractions"])
    if len(heads["scopes"]) > 1:   # translation: one H, a panel per scope
        row = heads["per_H"][-1]
        from heads_probe import KIND_NAMES
        panels = [(f"H = {row['H']}, {KIND_NAMES.get(scope, 'all heads')} ({row['scopes'][scope]['heads']})",
                   row["scopes"][scope]) for scope in heads["scopes"]]
    else:
        panels = [(f"H = {r['H']} ({r['scopes']['all']['heads']} heads)", r["scopes"]["all"])
                  for r in heads["per_H"] if r["H"] > 1]
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.3), squeeze=False, sharey=True)
    for ax, (title, sc) in zip(axes[0], panels):
        for order, (name, color) in ORDER_STYLE.items():
            cells = sc["curves"][order]
            mean = np.array([c["mean"] for c in cells])
            lo = np.array([c["lo"] if c["lo"] is not None else c["mean"] for c in cells])
            hi = np.array([c["hi"] if c["hi"] is not None else c["mean"] for c in cells])
            ax.plot(fr, mean, color=color, label=name, lw=1.5)
            ax.fill_between(fr, lo, hi, color=color, alpha=0.15, lw=0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("share of heads removed")
    axes[0][0].set_ylabel("held-out loss increase (nats)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def draw(res, out):
    """Every figure of the grid in `out` (res: its report) into `out`; the paths written."""
    paths = [Path(out) / name for name in ("quality.png", "time-to-target.png", "curves.png")]
    quality(res, paths[0])
    time_to_target(res, paths[1])
    curves(out, paths[2])
    if pruning(res, Path(out) / "pruning.png"):
        paths.append(Path(out) / "pruning.png")
    return paths
