"""What tools/bf16_learning.py and tools/bf16_breaks.py share (issue 32): the
issue's rule for "reaches float32's quality" and the held-out curves drawn
seed by seed.

The rule: a setting reaches float32's quality when it is worse than float32
(its difference, paired by seed) by no more than 1% of float32's value or
float32's own seed spread (the sample standard deviation over seeds); being
better is reaching it. It is judged twice: on the mean difference, and on the
worse end of its 95% t-interval, which asks whether the data could also hide
a loss of quality beyond the rule.
"""
import heads_stats as hs


def within(worse, ref, sd):
    """A loss of quality `worse` (> 0: worse than float32) no larger than 1% of |ref| or sd (None: no spread)."""
    return worse <= 0.01 * abs(ref) or (sd is not None and worse <= sd)


def judge(diffs, ref, sd, higher_is_better=False):
    """diffs: setting minus float32, one per seed (a loss: lower is better; higher_is_better for exact match or
    BLEU). Returns (interval of the differences, the rule on the mean, the rule at the interval's worse end);
    with one seed there is no interval and the last is None."""
    ci = hs.t_interval(diffs)
    sign = -1.0 if higher_is_better else 1.0
    if ci.lo is None:
        return ci, within(sign * ci.mean, ref, sd), None
    return ci, within(sign * ci.mean, ref, sd), within(max(sign * ci.lo, sign * ci.hi), ref, sd)


def draw_curves(path, rows):
    """rows: [(ylabel, [(title, {label: {seed: [(step, value), ...]}}, log_y), ...]), ...]: a grid of panels,
    one colour per label and one line per seed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    width = max(len(panels) for _, panels in rows)
    fig, axes = plt.subplots(len(rows), width, figsize=(4.6 * width, 3.4 * len(rows)), squeeze=False)
    for r, (ylabel, panels) in enumerate(rows):
        for ax, (title, series, log_y) in zip(axes[r], panels):
            for i, (label, by_seed) in enumerate(series.items()):
                for k, (_, points) in enumerate(sorted(by_seed.items())):
                    ax.plot([s for s, _ in points], [v for _, v in points], color=f"C{i}", alpha=0.75, lw=1,
                            label=label if k == 0 else None)
            if title:
                ax.set_title(title)
            if log_y:
                ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel(ylabel)
            ax.legend()
        for ax in axes[r][len(panels):]:
            ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"\ndrew {path}")
