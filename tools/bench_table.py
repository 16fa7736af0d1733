#!/usr/bin/python3
"""The table scripts/bench prints, from the `bench ...` lines of examples/bench
and tools/bench_torch.py (several rounds of each, interleaved).

    /usr/bin/python3 tools/bench_table.py LINES_FILE

Each framework is reported at its best thread setting (highest median tok/s
over the rounds). A ratio is the median over rounds of the per-round ratio
(round r of ours against round r of PyTorch), so both sides of a ratio were
measured minutes apart under the same machine load. Plain Python, no torch.
"""
import statistics
import sys
from collections import defaultdict


def parse(path):
    """{key: [record per round]} with key = (framework, mode, config, threads, len, cache)."""
    runs = defaultdict(list)
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words or words[0] != "bench":
                continue
            rec = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            key = (rec["framework"], rec["mode"], rec["config"], int(rec["threads"]), rec.get("len"), rec.get("cache"))
            runs[key].append(rec)
    return runs


def med(recs, field):
    return statistics.median(float(r[field]) for r in recs)


def ratio(a, b, field, invert=False):
    """Median over rounds of a[r] / b[r] (or b[r] / a[r] with invert)."""
    n = min(len(a), len(b))
    vals = [float(a[i][field]) / float(b[i][field]) for i in range(n)]
    if invert:
        vals = [1 / v for v in vals]
    return statistics.median(vals)


def best_threads(runs, fw, config):
    cands = {k[3]: v for k, v in runs.items() if k[:3] == (fw, "train", config)}
    if not cands:
        return None, None
    t = max(cands, key=lambda t: med(cands[t], "tok_s"))
    return t, cands[t]


def fmt_num(x):
    return f"{x / 1e3:.1f}k" if x >= 1e4 else f"{x:.0f}" if x >= 100 else f"{x:.2f}"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench_table.py LINES_FILE")
    runs = parse(sys.argv[1])
    rows = []  # (what, ours, pytorch, ratio, target)
    kernels = {}
    for key, recs in runs.items():
        kernels.setdefault(key[0], set()).update(r["kernel"] for r in recs)

    for config, target in (("tiny", "≥ 3x"), ("base", "≥ 1.5x")):
        to, ours = best_threads(runs, "attograd", config)
        tp, theirs = best_threads(runs, "pytorch", config)
        if not ours or not theirs:
            continue
        rows.append((f"{config}: train tok/s (best threads: ours {to}, PyTorch {tp})", fmt_num(med(ours, "tok_s")),
                     fmt_num(med(theirs, "tok_s")), f"{ratio(ours, theirs, 'tok_s'):.2f}x", target))
        rows.append((f"{config}: step ms", f"{med(ours, 'step_ms'):.1f}", f"{med(theirs, 'step_ms'):.1f}",
                     f"{ratio(ours, theirs, 'step_ms', invert=True):.2f}x faster", ""))
        rows.append((f"{config}: model GFLOP/s", f"{med(ours, 'gflops'):.1f}", f"{med(theirs, 'gflops'):.1f}", "", ""))
        rows.append((f"{config}: peak RSS MB", f"{med(ours, 'peak_rss_mb'):.0f}", f"{med(theirs, 'peak_rss_mb'):.0f}",
                     f"{ratio(ours, theirs, 'peak_rss_mb'):.2f}x", "≤ 0.25x"))
        if config == "base":
            one = {fw: runs.get((fw, "train", "base", 1, None, None)) for fw in ("attograd", "pytorch")}
            two = {fw: runs.get((fw, "train", "base", 2, None, None)) for fw in ("attograd", "pytorch")}
            if all(one.values()) and all(two.values()):
                rows.append(("base: 2 threads vs 1 (tok/s)", f"{ratio(two['attograd'], one['attograd'], 'tok_s'):.2f}x",
                             f"{ratio(two['pytorch'], one['pytorch'], 'tok_s'):.2f}x", "", "≥ 1.6x (ours)"))

    def best_decode(fw, n, cache):
        """(threads, records) of fw's fastest thread setting for decoding to length n."""
        cands = {k[3]: v for k, v in runs.items() if k[:2] == (fw, "decode") and k[4] == str(n) and k[5] == cache}
        if not cands:
            return None, None
        t = min(cands, key=lambda t: med(cands[t], "ms"))
        return t, cands[t]

    lens = sorted({int(k[4]) for k in runs if k[1] == "decode"})
    for n in lens:
        to, cached = best_decode("attograd", n, "yes")
        tn, nocache = best_decode("attograd", n, "no")
        tp, theirs = best_decode("pytorch", n, "no")
        if not (cached and theirs):
            continue
        b = cached[0]["batch"]
        rows.append((f"decode {b}×{n}: ours KV-cached vs PyTorch no-cache, ms (best threads: ours {to}, PyTorch {tp})",
                     f"{med(cached, 'ms'):.0f}", f"{med(theirs, 'ms'):.0f}",
                     f"{ratio(cached, theirs, 'ms', invert=True):.1f}x faster", "≥ 20x at 32, growing"))
        if nocache:
            same = all(r["same"] == "yes" for r in nocache)
            rows.append((f"decode {b}×{n}: ours no-cache, ms, {tn} threads (outputs identical to cached: "
                         f"{'yes' if same else 'NO'})", f"{med(nocache, 'ms'):.0f}", "",
                         f"{ratio(cached, nocache, 'ms', invert=True):.1f}x (cache gain)", ""))

    rows.append(("OpenBLAS kernel", ",".join(sorted(kernels.get("attograd", {"-"}))),
                 ",".join(sorted(kernels.get("pytorch", {"-"}))), "", ""))
    rounds = max((len(v) for v in runs.values()), default=0)
    head = ("", "attograd", "PyTorch", f"ratio (median of {rounds} rounds)", "target")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(5)]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))


if __name__ == "__main__":
    main()
