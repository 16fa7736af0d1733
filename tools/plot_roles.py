#!/usr/bin/python3
"""Plot the head-role study (heads_study --roles, roles-<lang>.jsonl) as a PNG.

    /usr/bin/python3 tools/plot_roles.py runs/roles/roles-fr.jsonl -o docs/heads-study/roles-fr.png

One panel per seed: a role x cross-attention-head matrix of gold-alignment
accuracy (percent of the role's target tokens whose largest weight falls on a
gold source token), with the better of the two positional baselines (diagonal,
best fixed offset) as the last row and the dedicated heads boxed. Needs
Debian's python3-matplotlib.
"""
import argparse
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from jsonl import read_jsonl  # noqa: E402


def read_lines(path):
    kinds = defaultdict(list)
    for j in read_jsonl(path, "plot_roles"):
        kinds[j.get("kind", "?")].append(j)
    if not kinds["cross_head"] or not kinds["baseline"]:
        sys.exit(f"plot_roles: {path} has no cross_head or baseline lines; is it a roles-<lang>.jsonl?")
    return kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    a = ap.parse_args()
    kinds = read_lines(a.jsonl)
    roles = [b["role"] for b in kinds["baseline"]]
    baseline = [max(b["diagonal"]["value"], b["offset"]["value"]) for b in kinds["baseline"]]
    seeds = sorted({h["seed"] for h in kinds["cross_head"]})
    lang = kinds["baseline"][0]["lang"]

    fig, axes = plt.subplots(1, len(seeds), figsize=(1.0 + 0.75 * len(roles) * len(seeds), 4.2), squeeze=False)
    for ax, seed in zip(axes[0], seeds):
        heads = [h for h in kinds["cross_head"] if h["seed"] == seed]
        rows = [[h["accuracy"][r]["value"] for r in roles] for h in heads] + [baseline]
        labels = [f"L{h['layer']}H{h['head']}" for h in heads] + ["baseline"]
        ax.imshow(rows, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        for i, row in enumerate(rows):
            for j, v in enumerate(row):
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7, color="w" if v < 60 else "k")
        for i, h in enumerate(heads):
            for r in h["dedicated"]:
                ax.add_patch(Rectangle((roles.index(r) - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", lw=2))
        ax.set_xticks(range(len(roles)), roles, rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_title(f"en→{lang}, seed {seed}", fontsize=10)
    fig.suptitle("gold-alignment accuracy (%) per cross head and role; red: dedicated", fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
