#!/usr/bin/python3
"""The table scripts/bench prints, from the `bench ...` lines of examples/bench
and tools/bench_torch.py (several rounds of each, interleaved), and the
`machine ...` and `skip ...` lines scripts/bench writes beside them.

    /usr/bin/python3 tools/bench_table.py LINES_FILE

Each framework is reported at its best setting (highest median tok/s over the
rounds): the thread count, and for PyTorch also mkldnn on or off. A ratio is
the median over rounds of the per-round ratio (round r of ours against round r
of PyTorch), so both sides of a ratio were measured minutes apart under the
same machine load. Rows at precision=bf16 (`bench --precision bf16`,
`bench_torch_fast.py --precision bf16`: torch.autocast) get rows of their own:
our bf16 step against our float32 step and against PyTorch's autocast step.
Plain Python, no torch.
"""
import shlex
import statistics
import sys
from collections import defaultdict

TRAIN_TARGETS = (("tiny", "≥ 3x"), ("base", "≥ 1.5x"), ("lm", "≥ 1.5x"))
BF16_TARGETS = {"base": "≥ 1.5x", "lm": "≥ 1.5x"}  # our bf16 step against our float32 step (issue 32)


def words(line):
    return dict(w.split("=", 1) for w in shlex.split(line)[1:] if "=" in w)


def parse(path):
    """{key: [record per round]} with key = (framework, mode, config, threads,
    procs, mkldnn, len, cache, precision); the machine record; {row: reason} of skipped rows."""
    runs, machine, skipped = defaultdict(list), {}, {}
    with open(path) as f:
        for line in f:
            kind = line.split(maxsplit=1)[0] if line.strip() else ""
            if kind == "machine":
                machine.update(words(line))
            elif kind == "skip":
                rec = words(line)
                skipped[rec["row"]] = rec["reason"]
            elif kind == "bench":
                rec = words(line)
                key = (rec["framework"], rec["mode"], rec["config"], int(rec["threads"]), int(rec.get("procs", 1)),
                       rec.get("mkldnn"), rec.get("len"), rec.get("cache"), rec.get("precision", "f32"))
                runs[key].append(rec)
    return runs, machine, skipped


def med(recs, field):
    return statistics.median(float(r[field]) for r in recs)


def ratio(a, b, field, invert=False):
    """Median over rounds of a[r] / b[r] (or b[r] / a[r] with invert)."""
    n = min(len(a), len(b))
    vals = [float(a[i][field]) / float(b[i][field]) for i in range(n)]
    if invert:
        vals = [1 / v for v in vals]
    return statistics.median(vals)


def setting(key):
    """How a run was set up, for the labels: '2 thr' or '2 thr, mkldnn off'."""
    return f"{key[3]} thr" + (f", mkldnn {key[5]}" if key[5] else "")


def best(runs, fw, mode, config, better, field, **match):
    """(key, records) of fw's best run of mode/config (better: max or min of the median field)."""
    idx = {"threads": 3, "procs": 4, "mkldnn": 5, "len": 6, "cache": 7, "precision": 8}
    cands = {k: v for k, v in runs.items() if k[:3] == (fw, mode, config)
             and all(k[idx[f]] == v for f, v in match.items())}
    if not cands:
        return None, None
    k = better(cands, key=lambda k: med(cands[k], field))
    return k, cands[k]


def fmt_num(x):
    return f"{x / 1e3:.1f}k" if x >= 1e4 else f"{x:.0f}" if x >= 100 else f"{x:.2f}"


def train_rows(runs):
    rows = []
    for config, target in TRAIN_TARGETS:
        ko, ours = best(runs, "attograd", "train", config, max, "tok_s", precision="f32")
        kp, theirs = best(runs, "pytorch", "train", config, max, "tok_s", precision="f32")
        if not ours or not theirs:
            continue
        rows.append((f"{config}: train tok/s (ours {setting(ko)}; PyTorch {setting(kp)})", fmt_num(med(ours, "tok_s")),
                     fmt_num(med(theirs, "tok_s")), f"{ratio(ours, theirs, 'tok_s'):.2f}x", target))
        rows.append((f"{config}: step ms", f"{med(ours, 'step_ms'):.1f}", f"{med(theirs, 'step_ms'):.1f}",
                     f"{ratio(ours, theirs, 'step_ms', invert=True):.2f}x faster", ""))
        rows.append((f"{config}: model GFLOP/s", f"{med(ours, 'gflops'):.1f}", f"{med(theirs, 'gflops'):.1f}", "", ""))
        rate = runs.get(("attograd", "sgemm", config, ko[3], 1, None, None, None, "f32"))
        if rate:
            rows.append((f"{config}: the step's GEMMs alone, GFLOP/s (ours {setting(ko)}; ratio: model / this)",
                         f"{med(rate, 'gflops'):.1f}", "", f"{ratio(ours, rate, 'gflops'):.0%}",
                         "≥ 85%" if config == "base" else ""))
        rows.append((f"{config}: peak RSS MB", f"{med(ours, 'peak_rss_mb'):.0f}", f"{med(theirs, 'peak_rss_mb'):.0f}",
                     f"{ratio(ours, theirs, 'peak_rss_mb'):.2f}x", "≤ 0.25x" if config != "lm" else ""))
        on = best(runs, "pytorch", "train", config, max, "tok_s", mkldnn="on", precision="f32")[1]
        off = best(runs, "pytorch", "train", config, max, "tok_s", mkldnn="off", precision="f32")[1]
        if on and off:
            rows.append((f"{config}: PyTorch mkldnn off vs on (tok/s, best threads)", "", "",
                         f"{ratio(off, on, 'tok_s'):.2f}x", ""))
        if config == "base":
            one = {fw: best(runs, fw, "train", "base", max, "tok_s", threads=1, precision="f32")[1]
                   for fw in ("attograd", "pytorch")}
            two = {fw: best(runs, fw, "train", "base", max, "tok_s", threads=2, precision="f32")[1]
                   for fw in ("attograd", "pytorch")}
            if all(one.values()) and all(two.values()):
                rows.append(("base: 2 threads vs 1 (tok/s)", f"{ratio(two['attograd'], one['attograd'], 'tok_s'):.2f}x",
                             f"{ratio(two['pytorch'], one['pytorch'], 'tok_s'):.2f}x", "", "≥ 1.6x (ours)"))
    return rows


def bf16_rows(runs, skipped):
    """Mixed precision: our bf16 step against our float32 step (the speed and memory
    targets) and against PyTorch's CPU autocast step, each at its best setting."""
    if "bf16" in skipped:
        return [("bf16 training rows", f"skipped: {skipped['bf16']}", "", "", "")]
    rows = []
    for config, _ in TRAIN_TARGETS:
        kb, ours = best(runs, "attograd", "train", config, max, "tok_s", precision="bf16")
        kf, ours_f32 = best(runs, "attograd", "train", config, max, "tok_s", precision="f32")
        if not ours or not ours_f32:
            continue
        rows.append((f"{config} bf16: ours bf16 vs ours f32, train tok/s (bf16 {setting(kb)}; f32 {setting(kf)})",
                     f"{fmt_num(med(ours, 'tok_s'))} vs {fmt_num(med(ours_f32, 'tok_s'))}", "",
                     f"{ratio(ours, ours_f32, 'tok_s'):.2f}x", BF16_TARGETS.get(config, "")))
        rows.append((f"{config} bf16: ours peak RSS MB, bf16 vs f32", f"{med(ours, 'peak_rss_mb'):.0f} vs "
                     f"{med(ours_f32, 'peak_rss_mb'):.0f}", "", f"{ratio(ours, ours_f32, 'peak_rss_mb'):.2f}x",
                     "≤ 0.7x"))
        if all("peak_tensor_mb" in r for r in ours + ours_f32):
            rows.append((f"{config} bf16: ours peak tensor MB (live tensors only), bf16 vs f32",
                         f"{med(ours, 'peak_tensor_mb'):.0f} vs {med(ours_f32, 'peak_tensor_mb'):.0f}", "",
                         f"{ratio(ours, ours_f32, 'peak_tensor_mb'):.2f}x", ""))
        rate = runs.get(("attograd", "sgemm", config, kb[3], 1, None, None, None, "bf16"))
        if rate:
            rows.append((f"{config} bf16: the step's GEMMs alone in bf16, GFLOP/s (ratio: model / this)",
                         f"{med(rate, 'gflops'):.1f}", "", f"{ratio(ours, rate, 'gflops'):.0%}", ""))
        kp, theirs = best(runs, "pytorch", "train", config, max, "tok_s", precision="bf16")
        if theirs:
            rows.append((f"{config} bf16: train tok/s, ours vs PyTorch autocast (PyTorch {setting(kp)})",
                         fmt_num(med(ours, "tok_s")), fmt_num(med(theirs, "tok_s")),
                         f"{ratio(ours, theirs, 'tok_s'):.2f}x", "> 1x"))
            rows.append((f"{config} bf16: peak RSS MB, ours vs PyTorch autocast", f"{med(ours, 'peak_rss_mb'):.0f}",
                         f"{med(theirs, 'peak_rss_mb'):.0f}", f"{ratio(ours, theirs, 'peak_rss_mb'):.2f}x", ""))
            _, theirs_f32 = best(runs, "pytorch", "train", config, max, "tok_s", precision="f32")
            if theirs_f32:
                rows.append((f"{config} bf16: PyTorch autocast vs its f32, tok/s", "", "",
                             f"{ratio(theirs, theirs_f32, 'tok_s'):.2f}x", ""))
    return rows


def translate_rows(runs, skipped):
    """Real sentences (tools/bench_translate.py): translate train against its stock torch.nn.Transformer twin."""
    if "translate" in skipped:
        return [("translate (gettext en->fr, real sentences)", f"skipped: {skipped['translate']}", "", "", "")]
    ko, ours = best(runs, "attograd", "train", "translate", max, "tok_s")
    kp, theirs = best(runs, "pytorch", "train", "translate", max, "tok_s")
    if not ours or not theirs:
        return []
    return [(f"translate (gettext en->fr, d_model 128, 2+2 layers): train tok/s (ours {setting(ko)}; PyTorch "
             f"{setting(kp)})", fmt_num(med(ours, "tok_s")), fmt_num(med(theirs, "tok_s")),
             f"{ratio(ours, theirs, 'tok_s'):.2f}x", "> 1x"),
            ("translate: peak RSS MB", f"{med(ours, 'peak_rss_mb'):.0f}", f"{med(theirs, 'peak_rss_mb'):.0f}",
             f"{ratio(ours, theirs, 'peak_rss_mb'):.2f}x", "")]


def dp_rows(runs, skipped):
    if "dp" in skipped:
        return [("data-parallel, 2 procs × 1 thread", f"skipped: {skipped['dp']}", "", "", "")]
    rows = []
    for config in sorted({k[2] for k in runs if k[1] == "dp"}):
        get = lambda procs, threads: runs.get(("attograd", "dp", config, threads, procs, None, None, None, "f32"))
        two = get(2, 1)
        if not two:
            continue
        rows.append((f"{config} data-parallel: 2 procs × 1 thread, tok/s (allreduce ms, share of step)",
                     f"{fmt_num(med(two, 'tok_s'))} ({med(two, 'allreduce_ms'):.1f} ms, "
                     f"{med(two, 'allreduce_pct'):.0f}%)", "", "", ""))
        for name, recs in (("1 proc × 2 threads", get(1, 2)), ("1 proc × 1 thread", get(1, 1))):
            if recs:
                rows.append((f"{config} data-parallel: {name}, tok/s (2 procs × 1 thread against it)",
                             fmt_num(med(recs, "tok_s")), "", f"{ratio(two, recs, 'tok_s'):.2f}x", ""))
    return rows


def decode_rows(runs):
    rows = []
    lens = sorted({int(k[6]) for k in runs if k[1] == "decode"})
    for n in lens:
        ko, cached = best(runs, "attograd", "decode", "base", min, "ms", len=str(n), cache="yes")
        kn, nocache = best(runs, "attograd", "decode", "base", min, "ms", len=str(n), cache="no")
        kp, theirs = best(runs, "pytorch", "decode", "base", min, "ms", len=str(n), cache="no")
        if not (cached and theirs):
            continue
        b = cached[0]["batch"]
        rows.append((f"decode {b}×{n}: ours KV-cached vs PyTorch no-cache, ms (ours {setting(ko)}; PyTorch {setting(kp)})",
                     f"{med(cached, 'ms'):.0f}", f"{med(theirs, 'ms'):.0f}",
                     f"{ratio(cached, theirs, 'ms', invert=True):.1f}x faster", "≥ 20x at 32, growing"))
        if nocache:
            same = all(r["same"] == "yes" for r in nocache)
            rows.append((f"decode {b}×{n}: ours no-cache, ms, {setting(kn)} (outputs identical to cached: "
                         f"{'yes' if same else 'NO'})", f"{med(nocache, 'ms'):.0f}", "",
                         f"{ratio(cached, nocache, 'ms', invert=True):.1f}x (cache gain)", ""))
    return rows


def machine_rows(runs, machine):
    kernels = {}
    for key, recs in runs.items():
        kernels.setdefault(key[0], set()).update(r["kernel"] for r in recs)
    rows = []
    if machine:
        cpu = f"{machine.get('cpu', '?')} (family {machine.get('family', '?')}, model {machine.get('model', '?')}), " \
              f"{machine.get('cpus', '?')} CPUs"
        rows.append(("CPU", cpu, "same", "", ""))
        rows.append(("load average (1, 5, 15 min) at start / end", machine.get("load_start", "?"),
                     machine.get("load_end", "?"), "", ""))
    rows.append(("OpenBLAS kernel", ",".join(sorted(kernels.get("attograd", {"-"}))),
                 ",".join(sorted(kernels.get("pytorch", {"-"}))), "", ""))
    torch_recs = [r for k, v in runs.items() if k[0] == "pytorch" for r in v]
    if torch_recs:
        waits = sorted({f"{r['mode']} {r['threads']} thr: {r['omp_wait']}" for r in torch_recs})
        mkldnn = sorted({r["mkldnn"] for r in torch_recs}, reverse=True)
        rows.append(("PyTorch settings", "", f"OMP_WAIT_POLICY {', '.join(waits)}; interop threads "
                     f"{','.join(sorted({r['interop'] for r in torch_recs}))}; mkldnn {' and '.join(mkldnn)}"
                     + (", the faster per row" if len(mkldnn) > 1 else ""), "", ""))
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench_table.py LINES_FILE")
    runs, machine, skipped = parse(sys.argv[1])
    rows = (train_rows(runs) + bf16_rows(runs, skipped) + translate_rows(runs, skipped) + dp_rows(runs, skipped) + decode_rows(runs)
            + machine_rows(runs, machine))
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
