#!/usr/bin/python3
"""scripts/bench --sweep: how the base training step's time and peak RSS grow
with d_model, sequence length and batch, for attograd and PyTorch.

    /usr/bin/python3 tools/bench_sweep.py [--threads 1] [--steps 5] [--warmup 2] [--raw FILE] [--plot FILE.png]

One axis at a time moves away from base (d_model 256 with d_ff = 4 x d_model,
length 32, batch 32, 8 heads, 2+2 layers): d_model 64..512, length 16..256,
batch 8..64. Each point is one process of build/bin/bench and one of
tools/bench_torch.py (PyTorch's defaults at 1 thread; OMP_WAIT_POLICY=PASSIVE
above), alternating which goes first. For each axis and framework it prints
the step time and peak RSS, the fitted exponent k of time ~ x^k (least
squares on log-log) and the local exponents between neighbouring points
(length: the T² attention terms push them from ~1 towards 2). With
matplotlib installed (python3-matplotlib) it draws the log-log curves to
--plot; without, it says so and prints the tables only.
"""
import argparse
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AXES = (("d-model", "d_model", [64, 128, 256, 512]), ("len", "sequence length", [16, 32, 64, 128, 256]),
        ("batch", "batch", [8, 16, 32, 64]))
FRAMEWORKS = ("attograd", "pytorch")


def run(framework, flag, value, args):
    common = ["--config", "base", f"--{flag}", str(value), "--threads", str(args.threads),
              "--warmup", str(args.warmup), "--steps", str(args.steps)]
    cmd = ([os.path.join(ROOT, "build/bin/bench")] if framework == "attograd"
           else ["/usr/bin/python3", os.path.join(ROOT, "tools/bench_torch.py")]) + common
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("bench ")][-1]
    return line, {k: v for k, v in (w.split("=", 1) for w in line.split()[1:] if "=" in w)}


def slope(xs, ys):
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def machine_line(kernel):
    """CPU (model name, family, model), cores, OpenBLAS kernel and load: what every figure names."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')}, model {info.get('model', '?')}), "
            f"{os.cpu_count()} CPUs, OpenBLAS kernel {kernel}, load {load}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--raw", default="", help="also keep every measurement line in this file")
    ap.add_argument("--plot", default=os.path.join(ROOT, "docs/sweep.png"))
    args = ap.parse_args()
    results = {}  # (axis flag, framework) -> [(x, step_ms, peak_rss_mb)]
    raw = []
    kernel = "?"
    for flag, _, values in AXES:
        for i, x in enumerate(values):
            order = FRAMEWORKS if i % 2 == 0 else FRAMEWORKS[::-1]
            for fw in order:
                line, rec = run(fw, flag, x, args)
                raw.append(f"{line} sweep={flag}:{x}")
                kernel = rec.get("kernel", kernel)
                results.setdefault((flag, fw), []).append((x, float(rec["step_ms"]), float(rec["peak_rss_mb"])))
            print(f"sweep: {flag} {x} done", file=sys.stderr, flush=True)
    machine = f"{machine_line(kernel)} at the end; {args.threads} thread(s) each"
    print(f"\nsweep: {machine}")
    if args.raw:
        with open(args.raw, "w") as f:
            f.write("\n".join(raw) + f"\n# {machine}\n")
    for flag, name, values in AXES:
        print(f"\n{name} (others at base):")
        print("| " + " | ".join([name] + [f"{fw} ms" for fw in FRAMEWORKS] + [f"{fw} MB" for fw in FRAMEWORKS]
                                + ["ratio (PyTorch / ours)"]) + " |")
        print("|" + "---|" * 6)
        ours, theirs = results[(flag, "attograd")], results[(flag, "pytorch")]
        for (x, a, ra), (_, b, rb) in zip(ours, theirs):
            print(f"| {x} | {a:.1f} | {b:.1f} | {ra:.0f} | {rb:.0f} | {b / a:.2f}x |")
        for fw in FRAMEWORKS:
            pts = results[(flag, fw)]
            xs, ts = [p[0] for p in pts], [p[1] for p in pts]
            local = [math.log(ts[i + 1] / ts[i]) / math.log(xs[i + 1] / xs[i]) for i in range(len(xs) - 1)]
            print(f"{fw}: time ~ {name}^{slope(xs, ts):.2f} (local: {', '.join(f'{k:.2f}' for k in local)}); "
                  f"peak RSS ~ {name}^{slope(xs, [p[2] for p in pts]):.2f}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\nsweep: matplotlib is not installed (apt install python3-matplotlib): no plots drawn")
        return 0
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for col, (flag, name, _) in enumerate(AXES):
        for fw in FRAMEWORKS:
            pts = results[(flag, fw)]
            for row, idx, what in ((0, 1, "step ms"), (1, 2, "peak RSS MB")):
                ax = axes[row][col]
                ax.loglog([p[0] for p in pts], [p[idx] for p in pts], "o-", label=fw, base=2)
                ax.set_xlabel(name)
                ax.set_ylabel(what)
                ax.grid(True, which="both", alpha=0.3)
                ax.legend()
    fig.suptitle(f"training step of base, one axis at a time: {machine}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=90)
    print(f"\nsweep: plots in {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
