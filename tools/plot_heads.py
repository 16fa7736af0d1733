#!/usr/bin/python3
"""Plot the heads study (heads_study's results.jsonl) as a PNG.

    /usr/bin/python3 tools/plot_heads.py runs/heads/results.jsonl -o docs/heads-study/heads.png
    /usr/bin/python3 tools/plot_heads.py runs/heads/results.jsonl -o docs/heads-study/heads.png --study runs/heads

Three panels against the number of heads H (log scale), one line per target
language, each point the mean over seeds with a ± sample-std error bar: test
exact match, test BLEU, and the training step time. Needs Debian's
python3-matplotlib.

With --study DIR (heads_study's output directory) it also draws, beside the
PNG given to -o:
  curves-<lang>.png     valid token accuracy and loss against step per H (constant E),
                        the mean over seeds with a 95% bootstrap band
  steps-to-target.png   steps to 90% and 99% valid token accuracy against H, with 95% CIs
  axes.png              quality against parameters, training FLOPs and step time,
                        constant E and constant D as two lines per language
  pruning.png           greedy exact match and BLEU against the share of heads removed,
                        by importance, by ablation and at random (pruning-<lang>.jsonl):
                        the mean over the models with a 95% bootstrap band over seeds
Intervals are percentile bootstraps of the mean over seeds (2000 resamples,
seed 19), as heads_study computes them.
"""
import argparse
import glob
import os
import random
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from jsonl import read_jsonl  # noqa: E402


def read_runs(path):
    runs = read_jsonl(path, "plot_heads")
    if not runs:
        sys.exit(f"plot_heads: {path} holds no runs")
    return runs


def bootstrap(values, resamples=2000, level=0.95, seed=19):
    """Mean and percentile-bootstrap interval (lo, hi) of the mean of values."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choice(values) for _ in range(n)) / n for _ in range(resamples))

    def quantile(q):
        pos = q * (len(means) - 1)
        i = int(pos)
        return means[-1] if i + 1 >= len(means) else means[i] + (pos - i) * (means[i + 1] - means[i])

    return statistics.mean(values), quantile((1 - level) / 2), quantile((1 + level) / 2)


def plot_mean_band(ax, xs, samples, label, style="-"):
    """The mean of each sample against xs, with its 95% bootstrap band when the samples hold several values."""
    stats = [bootstrap(v) for v in samples]
    line, = ax.plot(xs, [m for m, _, _ in stats], style, label=label)
    if max(len(v) for v in samples) > 1:
        ax.fill_between(xs, [lo for _, lo, _ in stats], [hi for _, _, hi in stats], color=line.get_color(), alpha=0.2)


def steps_to_reach(run, target):
    for step, acc in zip(run["curve"]["step"], run["curve"]["valid_token_accuracy"]):
        if acc >= target:
            return step
    return None


def log2_axis(ax, ticks):
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())


def plot_curves(lang, runs, width, path):
    """Valid token accuracy and loss against step, one band per H of the constant-E axis."""
    by_h = defaultdict(list)
    for r in runs:
        if r["d_model"] == width:
            by_h[r["heads"]].append(r)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, key, label in ((axes[0], "valid_token_accuracy", "valid token accuracy (%)"),
                           (axes[1], "valid_loss", "valid loss (teacher-forced)")):
        for h in sorted(by_h):
            steps = by_h[h][0]["curve"]["step"]
            rows = [r["curve"][key] for r in by_h[h] if r["curve"]["step"] == steps]
            plot_mean_band(ax, steps, [[row[i] for row in rows] for i in range(len(steps))], f"H={h} (n={len(rows)})")
        if key == "valid_loss":
            ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.set_title(f"en→{lang}, E = {width} (D = E/H)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_steps_to_target(by_lang, width, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, target in zip(axes, (90, 99)):
        for lang, runs in sorted(by_lang.items()):
            by_h = defaultdict(list)
            for r in runs:
                if r["d_model"] == width:
                    by_h[r["heads"]].append(steps_to_reach(r, target))
            hs = [h for h in sorted(by_h) if all(s is not None for s in by_h[h])]
            stats = [bootstrap(by_h[h]) for h in hs]
            if hs:
                ax.errorbar(hs, [m for m, _, _ in stats], yerr=[[m - lo for m, lo, _ in stats],
                                                                [hi - m for m, _, hi in stats]],
                            marker="o", capsize=3, label=f"en→{lang}")
            missed = [h for h in sorted(by_h) if h not in hs]
            if missed:
                ax.text(0.02, 0.95 - 0.07 * len(ax.texts), f"{lang}: not every seed reached it at H = "
                        + ", ".join(map(str, missed)), transform=ax.transAxes, fontsize=8, va="top")
        log2_axis(ax, sorted({r["heads"] for runs in by_lang.values() for r in runs if r["d_model"] == width}))
        ax.set_xlabel(f"heads H (E = {width}, D = E/H)")
        ax.set_ylabel(f"steps to {target}% valid token accuracy")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_axes(by_lang, timing, path):
    """Test exact match against parameters, training FLOPs and step time; constant E and constant D as lines."""
    ms = {(t["lang"], t["heads"], t["d_model"], t["d_ff"]): t for t in timing}
    panels = (("parameters", "parameters"), ("train_flops_per_token", "training FLOP per target token"),
              ("median_ms", "step ms (1 thread, interleaved)"))
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for ax, (key, label) in zip(axes, panels):
        for lang, runs in sorted(by_lang.items()):
            for axis in ("constant_e", "constant_d"):
                shapes = sorted({k for k, t in ms.items() if k[0] == lang and t[axis]}, key=lambda k: k[1])
                xs, ys, lo_hi, names = [], [], [], []
                for shape in shapes:
                    rs = [r for r in runs if (r["lang"], r["heads"], r["d_model"], r["d_ff"]) == shape]
                    if not rs:
                        continue
                    m, lo, hi = bootstrap([r["exact_match"] for r in rs])
                    xs.append(ms[shape]["median_ms"] if key == "median_ms" else rs[0][key])
                    ys.append(m)
                    lo_hi.append((m - lo, hi - m))
                    names.append(f"H{shape[1]}")
                if not xs:
                    continue
                ax.errorbar(xs, ys, yerr=list(zip(*lo_hi)), marker="o" if axis == "constant_e" else "s", capsize=3,
                            linestyle="-" if axis == "constant_e" else "--",
                            label=f"en→{lang}, {'E' if axis == 'constant_e' else 'D'} fixed")
                for x, y, name in zip(xs, ys, names):
                    ax.annotate(name, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("test exact match (%)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pruning(directory, path):
    """One column per language: exact match and BLEU against the share of heads removed, one line per order."""
    by_lang = {}
    for file in sorted(glob.glob(os.path.join(directory, "pruning-*.jsonl"))):
        points = read_jsonl(file, "plot_heads")
        if points:
            by_lang[points[0]["lang"]] = points
    if not by_lang:
        return False
    fig, axes = plt.subplots(2, len(by_lang), figsize=(5.5 * len(by_lang), 6.5), squeeze=False)
    for col, (lang, points) in enumerate(sorted(by_lang.items())):
        for row, (key, label) in enumerate([("exact_match", "greedy exact match (%)"), ("bleu", "BLEU")]):
            ax = axes[row][col]
            for order, style in [("importance", "o-"), ("ablation", "s-"), ("random", "^--")]:
                by_share = defaultdict(list)  # the models' values at each share removed
                for p in points:
                    if p["order"] == order:
                        by_share[100 * p["fraction"]].append(p[key])
                shares = sorted(by_share)
                plot_mean_band(ax, shares, [by_share[x] for x in shares], f"{order} (n={len(by_share[shares[0]])})",
                               style)
            ax.set_xlabel("heads removed (%)")
            ax.set_ylabel(label)
            ax.set_title(f"en→{lang}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_study(directory, out_dir, width):
    by_lang = {}
    for path in sorted(glob.glob(os.path.join(directory, "curves-*.jsonl"))):
        runs = read_runs(path)
        by_lang[runs[0]["lang"]] = runs
    if not by_lang:
        sys.exit(f"plot_heads: no curves-*.jsonl in {directory}")
    written = []
    for lang, runs in sorted(by_lang.items()):
        written.append(os.path.join(out_dir, f"curves-{lang}.png"))
        plot_curves(lang, runs, width, written[-1])
    written.append(os.path.join(out_dir, "steps-to-target.png"))
    plot_steps_to_target(by_lang, width, written[-1])
    written.append(os.path.join(out_dir, "axes.png"))
    plot_axes(by_lang, read_runs(os.path.join(directory, "axes.jsonl")), written[-1])
    if plot_pruning(directory, os.path.join(out_dir, "pruning.png")):
        written.append(os.path.join(out_dir, "pruning.png"))
    for path in written:
        print(f"plot_heads: wrote {path}")


def mean_std(values):
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.jsonl written by heads_study")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--study", metavar="DIR", help="heads_study's output directory: also draw the learning curves, "
                    "steps to target and both axes (PNGs beside --output)")
    args = ap.parse_args()

    by_lang = defaultdict(lambda: defaultdict(list))
    for r in read_runs(args.results):
        by_lang[r["lang"]][r["heads"]].append(r)
    panels = [("exact_match", "test exact match (%)"), ("bleu", "test BLEU"), ("step_ms", "training step (ms)")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (key, label) in zip(axes, panels):
        for lang, by_h in sorted(by_lang.items()):
            hs = sorted(by_h)
            stats = [mean_std([r[key] for r in by_h[h]]) for h in hs]
            ax.errorbar(hs, [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3, label=f"en→{lang}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({h for by_h in by_lang.values() for h in by_h}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("heads H (d_model fixed)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot_heads: wrote {args.output}")
    if args.study:
        widths = {r["heads"] * r["head_width"] for r in read_runs(args.results)}  # the constant-E grid's E
        if len(widths) != 1:
            sys.exit(f"plot_heads: {args.results} mixes model widths {sorted(widths)}; expected one (constant E)")
        plot_study(args.study, os.path.dirname(os.path.abspath(args.output)), widths.pop())


if __name__ == "__main__":
    main()
