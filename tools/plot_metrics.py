#!/usr/bin/python3
"""Plot a training run's JSON-lines log (the --log file of copy_task / translate / lm) as a PNG.

    /usr/bin/python3 tools/plot_metrics.py runs/fr.jsonl -o docs/fr_training.png [--title "en -> fr"]

Three panels against the training step: the training loss (and the held-out
loss at each evaluation), the held-out measures (token accuracy and exact
match, and BLEU / 100 when the log has it; for a language model's log, whose
evaluations hold perplexity and bits_per_char, the perplexity and the bits
per character), and the learning rate. Records with
"skipped": true are drawn as red marks on the loss panel. Needs Debian's
python3-matplotlib.
"""
import argparse
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from jsonl import read_jsonl  # noqa: E402


def read_log(path):
    train, evals, skipped = [], [], []
    for r in read_jsonl(path, "plot_metrics: error"):
        if r.get("skipped"):
            skipped.append(r)
        elif "eval_loss" in r:
            evals.append(r)
        elif "loss" in r:
            train.append(r)
    if not train and not evals:
        sys.exit(f"plot_metrics: error: {path} has no training or evaluation records")
    return train, evals, skipped


def draw_accuracy(ax, evals):
    if evals:
        es = [r["step"] for r in evals]
        ax.plot(es, [100 * r["token_accuracy"] for r in evals], "o-", label="token accuracy", ms=4)
        ax.plot(es, [100 * r["exact_match"] for r in evals], "s-", label="exact match", ms=4)
        if all("bleu" in r for r in evals):
            ax.plot(es, [r["bleu"] for r in evals], "^--", label="BLEU", ms=4)
        ax.legend(fontsize=8)
    ax.set_ylim(0, 101)
    ax.set_title("held-out accuracy (%)")


def draw_lm_evals(ax, evals):
    """A language model's held-out perplexity (left axis) and bits per character (right axis)."""
    es = [r["step"] for r in evals]
    ax.plot(es, [r["perplexity"] for r in evals], "o-", label="perplexity", ms=4)
    ax.set_ylabel("perplexity")
    bits = ax.twinx()
    bits.plot(es, [r["bits_per_char"] for r in evals], "s--", color="tab:orange", label="bits/char", ms=4)
    bits.set_ylabel("bits per character")
    lines = ax.get_lines() + bits.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], fontsize=8)
    ax.set_title("held-out perplexity and bits/char")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("-o", "--output", required=True, help="PNG file to write")
    ap.add_argument("--title", default=None)
    ap.add_argument("--dpi", type=int, default=80)
    args = ap.parse_args()
    train, evals, skipped = read_log(args.log)

    fig, (ax_loss, ax_acc, ax_lr) = plt.subplots(1, 3, figsize=(12, 3.4))
    steps = [r["step"] for r in train]
    if train:
        ax_loss.plot(steps, [r["loss"] for r in train], label="train loss", lw=1.2)
    if evals:
        ax_loss.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", label="held-out loss", ms=4)
    for r in skipped:
        ax_loss.axvline(r["step"], color="red", lw=0.8)
    ax_loss.set_yscale("log")
    ax_loss.set_title("loss (cross-entropy per token)")
    ax_loss.legend(fontsize=8)

    if evals and all("perplexity" in r and "bits_per_char" in r for r in evals):
        draw_lm_evals(ax_acc, evals)
    else:
        draw_accuracy(ax_acc, evals)

    if train:
        ax_lr.plot(steps, [r["lr"] for r in train], lw=1.2)
    ax_lr.set_title("learning rate")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))

    for ax in (ax_loss, ax_acc, ax_lr):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
