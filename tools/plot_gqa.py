#!/usr/bin/python3
"""Plot experiment 6 of the heads study (heads_study's gqa-<lang>.jsonl) as a PNG.

    /usr/bin/python3 tools/plot_gqa.py runs/heads/gqa-fr.jsonl [runs/heads/gqa-de.jsonl] -o docs/heads-study/gqa.png

Two panels per language: test exact match against the KV-cache bytes at the
longest decoded length (log scale), one marker per model kind (from scratch,
converted from multi-head attention, uptrained), each point one model and
labelled with its G; and the cached ms/token against G at every decoded
length (median over the models of that G). Needs Debian's python3-matplotlib.
"""
import argparse
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from jsonl import read_jsonl  # noqa: E402

MARKERS = {"scratch": ("o", "#1f77b4"), "converted": ("x", "#d62728"), "uptrained": ("s", "#2ca02c")}


def read_models(path):
    models = read_jsonl(path, "plot_gqa")
    if not models:
        sys.exit(f"plot_gqa: {path} holds no models")
    return models


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", nargs="+", help="gqa-<lang>.jsonl files written by heads_study --gqa")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    args = ap.parse_args()
    langs = [read_models(p) for p in args.jsonl]
    fig, axes = plt.subplots(len(langs), 2, figsize=(11, 4 * len(langs)), squeeze=False)
    for row, models in enumerate(langs):
        lang = models[0]["lang"]
        longest = max(c["t"] for c in models[0]["cache"])
        ax = axes[row][0]
        for how, (marker, color) in MARKERS.items():
            pts = [m for m in models if m["how"] == how]
            if not pts:
                continue
            xs = [next(c["bytes_used"] for c in m["cache"] if c["t"] == longest) for m in pts]
            ax.scatter(xs, [m["exact_match"] for m in pts], marker=marker, color=color, label=how)
            for x, m in zip(xs, pts):
                ax.annotate(f"G={m['kv_heads']}", (x, m["exact_match"]), textcoords="offset points", xytext=(5, 3),
                            fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"KV-cache bytes used at t = {longest}")
        ax.set_ylabel("test exact match (%)")
        ax.set_title(f"en→{lang}: quality against cache (H = {models[0]['heads']})")
        ax.legend()
        ax = axes[row][1]
        lengths = sorted({c["t"] for m in models for c in m["cache"]})
        groups = sorted({m["kv_heads"] for m in models})
        for t in lengths:
            ms = defaultdict(list)
            for m in models:
                ms[m["kv_heads"]].extend(c["ms_per_token"] for c in m["cache"] if c["t"] == t)
            ax.plot(groups, [statistics.median(ms[g]) for g in groups], marker="o", label=f"t = {t}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(groups, [str(g) for g in groups])
        ax.set_xlabel("K/V heads G")
        ax.set_ylabel("cached decoding, ms/token")
        ax.set_title(f"en→{lang}: decoding time against G")
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
