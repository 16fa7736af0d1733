#!/usr/bin/python3
"""Plot the heads study (heads_study's results.jsonl) as a PNG.

    /usr/bin/python3 tools/plot_heads.py runs/heads/results.jsonl -o docs/heads-study/heads.png

Three panels against the number of heads H (log scale), one line per target
language, each point the mean over seeds with a ± sample-std error bar: test
exact match, test BLEU, and the training step time. Needs Debian's
python3-matplotlib.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_runs(path):
    runs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"plot_heads: {path}:{lineno}: not JSON ({e})")
    if not runs:
        sys.exit(f"plot_heads: {path} holds no runs")
    return runs


def mean_std(values):
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.jsonl written by heads_study")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
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


if __name__ == "__main__":
    main()
