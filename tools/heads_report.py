"""The heads study's report (issue 31): every number as data (analyse: final
held-out loss, paired by seed, the trend across H, convergence, time to target;
for translate, final test BLEU and chrF and a check that every run saw the same
data), and the markdown of it, with the statistics of heads_stats.

tools/heads_study.py is the command line (`report`).
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from heads_grids import SCHEDULE_NOTE, Grid, runs_of, saved_grid
from heads_runs import data_identity, eval_records, read_log, read_test, run_status

IMPORT_ERROR = None
try:
    import heads_stats as hs
except ImportError as e:   # numpy or scipy missing: heads_study's main says so and exits 77
    hs = None
    IMPORT_ERROR = e


# ---------------------------------------------------------------------------
# The target and the report

def choose_target(finals, margin):
    """The time-to-target level: the worst final held-out loss among `finals`
    times (1 + margin), so every one of those runs reaches it."""
    if not finals:
        raise ValueError("choose_target: expected final losses of at least one run, got none")
    return max(finals) * (1 + margin)


def _ci(values, digits=3):
    return hs.fmt_ci(hs.t_interval(values), digits=digits)


def _p(p):
    return "n/a" if p is None else f"{p:.3g}"


def _config(k):
    return dict(zip(("H", "G", "causal"), k))


def _per_config(groups, value, digits):
    """One row per configuration: the mean of value(run) over seeds with its t-interval."""
    rows = []
    for k in sorted(groups):
        ci = hs.t_interval([value(r) for r in groups[k].values()])
        rows.append(dict(_config(k), mean=ci.mean, lo=ci.lo, hi=ci.hi, n=ci.n, text=hs.fmt_ci(ci, digits=digits)))
    return rows


def _pair(a, b, value, digits, base, k):
    """b - a paired by the seeds both hold (a, b: seed -> run), or None under 2 seeds."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    d = hs.paired({s: value(a[s]) for s in seeds}, {s: value(b[s]) for s in seeds})
    return dict(a=_config(base), b=_config(k), diff=d.diff.mean, lo=d.diff.lo, hi=d.diff.hi, n=d.n,
                seeds=list(seeds), p_t=d.p_t, p_wilcoxon=d.p_wilcoxon, wilcoxon_min_p=d.wilcoxon_min_p,
                text=hs.fmt_ci(d, digits=digits, signed=True))


def _paired(groups, ref, value, digits):
    """b - a paired by seed for every configuration b against its a (ref for the
    H grid and the control, multi-head attention at the same H for G < H), with
    Holm's adjustment within each family: the H grid, GQA, the control (the
    `family` of each comparison)."""
    comps = []
    for k in sorted(groups):
        if ref is None or k == ref:
            continue
        base = ref if k[0] == k[1] else (k[0], k[0], True)   # GQA against MHA at its own H
        if base not in groups:
            continue
        c = _pair(groups[base], groups[k], value, digits, base, k)
        if c:
            c["family"] = "control" if not k[2] else "H" if k[0] == k[1] else "GQA"
            comps.append(c)
    for family in ("H", "GQA", "control"):
        _holm([c for c in comps if c["family"] == family])
    return comps


def _paired_to(groups, base, keys, value, digits):
    """b - base paired by seed for each configuration b of keys (not base), Holm over them."""
    comps = [_pair(groups[base], groups[k], value, digits, base, k) for k in sorted(keys) if k != base]
    return _holm([c for c in comps if c])


def _holm(comps):
    for name in ("p_t", "p_wilcoxon"):
        idx = [i for i, c in enumerate(comps) if c[name] is not None]
        adj = hs.holm([comps[i][name] for i in idx]) if idx else []
        for i, a in zip(idx, adj):
            comps[i][name + "_holm"] = a
    return comps


def _trend(trend_runs, value):
    if len({r["H"] for r in trend_runs}) < 2 or len(trend_runs) < 3:
        return None
    t = hs.trend([r["H"] for r in trend_runs], [value(r) for r in trend_runs], strata=[r["seed"] for r in trend_runs])
    return dict(rho=t.rho, p=t.p, n=t.n, exact=t.exact, strata=t.strata)


def _time_to(trend_runs, grid, metric, higher_is_better, what, pilot=None, ref=None):
    """Steps and train seconds to the level every H-grid run reaches: the worst
    final value of `metric` (an eval record's key) made `margin` worse. With a
    pilot, also the steps at the pilot's seconds per step of the run's (H, G):
    train_s is what the run measured on a machine other work may have shared,
    the pilot times every configuration under the same conditions. With ref
    (a configuration), each H's steps and pilot seconds minus ref's, paired by
    seed over the runs that reached the level."""
    finals = [r["evals"][-1][metric] for r in trend_runs]
    if higher_is_better:
        target = min(finals) * (1 - grid.margin)
        how = (f"the worst final {what} among the {len(trend_runs)} H-grid runs x (1 - {grid.margin:g}) = "
               f"{target:.4f}")
    else:
        target = choose_target(finals, grid.margin)
        how = (f"the worst final {what} among the {len(trend_runs)} H-grid runs x (1 + {grid.margin:g}) = "
               f"{target:.4f}")
    per_h = defaultdict(list)
    for r in trend_runs:
        ev = r["evals"]
        t = hs.time_to_target([e["step"] for e in ev], [e["train_s"] for e in ev], [e[metric] for e in ev],
                              target, higher_is_better=higher_is_better)
        row = (pilot or {}).get("configs", {}).get(f"H{r['H']}-G{r['G']}")
        per_h[r["H"]].append(dict(id=r["id"], seed=r["seed"], reached=t.reached, step=t.step, seconds=t.seconds,
                                  pilot_seconds=t.step * row["s_per_step"] if t.reached and row else None))
    rows = []
    for H in sorted(per_h):
        got = [x for x in per_h[H] if x["reached"]]
        row = dict(H=H, n=len(per_h[H]), reached=len(got))
        # Each as text (the markdown's) and as numbers (key_ci: mean, lo, hi, n; for the doc and the plots).
        fields = [("steps", "step", 0), ("seconds", "seconds", 2)]
        if got and all(x["pilot_seconds"] is not None for x in got):
            fields.append(("pilot_seconds", "pilot_seconds", 2))
        for key, src, digits in fields if got else []:
            ci = hs.t_interval([x[src] for x in got])
            row[key] = hs.fmt_ci(ci, digits=digits)
            row[f"{key}_ci"] = dict(mean=ci.mean, lo=ci.lo, hi=ci.hi, n=ci.n)
        rows.append(row)
    paired = {}
    if ref is not None and ref[0] in per_h:
        reached = {H: {x["seed"]: x for x in xs if x["reached"]} for H, xs in per_h.items()}
        keys = {H: (H, H, True) for H in reached}
        for field in ("step", "pilot_seconds"):
            if all(x[field] is not None for xs in reached.values() for x in xs.values()):
                paired[field] = _paired_to({keys[H]: xs for H, xs in reached.items()}, keys[ref[0]], keys.values(),
                                           lambda x, f=field: x[f], 0 if field == "step" else 1)
    return dict(metric=metric, what=what, level=target, margin=grid.margin, threads=grid.threads,
                per_run=dict(per_h), per_H=rows, how=how, paired=paired,
                pilot=None if not pilot else f"{pilot['cpu']}, {pilot['date']}, {pilot['jobs']} runs at once")


def _plan(out):
    """The frozen plan (plan.json) in brief: each part's runs, core-minutes and
    wall minutes as `plan` estimated them from the pilot, and the totals."""
    path = Path(out) / "plan.json"
    if not path.exists():
        return None
    plan = json.loads(path.read_text())
    parts = [dict(runs=len(p["runs"]), core_minutes=p.get("core_minutes"), wall_minutes=p.get("wall_minutes"))
             for p in plan["parts"]]
    known = all(p["core_minutes"] is not None and p["wall_minutes"] is not None for p in parts)
    return dict(jobs=plan["jobs"], parts=parts, runs=sum(p["runs"] for p in parts),
                core_minutes=sum(p["core_minutes"] for p in parts) if known else None,
                wall_minutes=sum(p["wall_minutes"] for p in parts) if known else None)


def _data_check(done, out):
    """Whether every run saw the same data: the distinct corpus hashes and
    SentencePiece models over the complete runs (one of each when identical)."""
    ids = {r["id"]: data_identity(Path(out) / "runs" / r["id"]) for r in done}
    res = {}
    for key in ("corpus_hash", "spm_sha256"):
        seen = defaultdict(list)
        for rid, d in ids.items():
            if d[key] is not None:
                seen[d[key]].append(rid)
        res[key] = dict(seen)
    return res


def analyse(grid: Grid, out):
    """Every number of the report as data (the .json), from the runs' logs (and,
    for translate, their stdout's test line)."""
    runs = runs_of(grid)
    done, missing = [], []
    for r in runs:
        d = Path(out) / "runs" / r["id"]
        st = run_status(grid, r, out)
        if st != "complete":
            missing.append(dict(id=r["id"], status=st))
            continue
        ev = eval_records(read_log(d / "log.jsonl"))
        evals = [dict(step=e["step"], loss=e["eval_loss"], train_s=e["train_s"],
                      **{k: e[k] for k in ("bleu", "chrf") if k in e}) for e in ev]
        run = dict(r, evals=evals, final=ev[-1]["eval_loss"])
        if grid.program == "translate":
            run["test"] = read_test(d / "stdout.txt")
        done.append(run)
    key = lambda r: (r["H"], r["G"], r["causal"])   # noqa: E731
    groups = defaultdict(dict)
    for r in done:
        groups[key(r)][r["seed"]] = r
    res = dict(grid=asdict(grid), runs_planned=len(runs), runs_complete=len(done), missing=missing,
               schedule=SCHEDULE_NOTE)
    res["final_loss"] = _per_config(groups, lambda r: r["final"], 3)

    hgrid = [k for k in groups if k[0] == k[1] and k[2]]
    ref = None
    if hgrid:
        ref = (4, 4, True) if (4, 4, True) in groups else \
            min(hgrid, key=lambda k: sum(r["final"] for r in groups[k].values()) / len(groups[k]))
    res["reference"] = None if ref is None else dict(_config(ref), why="H = 4" if ref == (4, 4, True)
                                                     else "the best H: lowest mean final held-out loss")
    res["paired"] = _paired(groups, ref, lambda r: r["final"], 3)
    trend_runs = [r for k in hgrid for r in groups[k].values()]
    res["trend"] = _trend(trend_runs, lambda r: r["final"])
    # lm: the final model on every held-out window (heads_study.py probe runs lm eval), when every run has it.
    for r in done:
        path = Path(out) / "runs" / r["id"] / "heldout.json"
        r["heldout"] = json.loads(path.read_text()) if path.exists() else None
    res["final_heldout"] = None
    if done and all(r["heldout"] for r in done):
        value = lambda r: r["heldout"]["loss"]   # noqa: E731
        res["final_heldout"] = dict(tokens=sorted({r["heldout"]["tokens"] for r in done}),
                                    per_config=_per_config(groups, value, 4),
                                    paired=_paired(groups, ref, value, 4), trend=_trend(trend_runs, value))
        if len(hgrid) > 1:   # every H against the best one (lowest mean), as H = 4 above
            best = min(hgrid, key=lambda k: sum(map(value, groups[k].values())) / len(groups[k]))
            res["final_heldout"]["best"] = _config(best)
            res["final_heldout"]["paired_best"] = _paired_to(groups, best, hgrid, value, 4)

    conv = []
    for r in done:
        ev = r["evals"]
        c = hs.converged([e["step"] for e in ev], [e["loss"] for e in ev], window=grid.window,
                         threshold=grid.threshold)
        since = hs.converged_since([e["step"] for e in ev], [e["loss"] for e in ev], window=grid.window,
                                   threshold=grid.threshold)
        conv.append(dict(id=r["id"], H=r["H"], G=r["G"], causal=r["causal"], converged=c.converged,
                         slope_per_1k=c.slope_per_1k, rel_slope_per_1k=c.rel_slope_per_1k,
                         slope_se_per_1k=c.slope_se_per_1k, final=c.final_loss, rule=c.rule, since=since))
    res["convergence"] = conv
    res["rule"] = conv[0]["rule"] if conv else None
    missed = [c["id"] for c in conv if not c["converged"]]
    # Holding the rule bounds how fast a curve still falls; its slope may still differ from 0 by 2 standard
    # errors either way (still falling slowly, or rising: overfitting).
    held = [c for c in conv if c["converged"] and c["slope_se_per_1k"]]
    falling = [c["id"] for c in held if c["slope_per_1k"] <= -2 * c["slope_se_per_1k"]]
    rising = [c["id"] for c in held if c["slope_per_1k"] >= 2 * c["slope_se_per_1k"]]
    res["converged_count"] = dict(runs=len(conv), held=len(conv) - len(missed), missed=", ".join(missed) or "none",
                                  falling=len(falling), falling_ids=", ".join(falling) or "none",
                                  rising=len(rising), rising_ids=", ".join(rising) or "none")
    pilot = json.loads((Path(out) / "pilot.json").read_text()) if (Path(out) / "pilot.json").exists() else None
    res["target"] = _time_to(trend_runs, grid, "loss", False, "held-out loss", pilot, ref) if trend_runs else None
    res["plan"] = _plan(out)
    # Step time per configuration: the pilot's (one timing each, every configuration under the same conditions)
    # and each run's own (its train seconds over its steps: n per configuration, under whatever shared the CPU).
    res["step_ms"] = dict(runs=_per_config(groups, lambda r: 1000 * r["evals"][-1]["train_s"] / r["evals"][-1]["step"], 1),
                          pilot={k: 1000 * v["s_per_step"] for k, v in (pilot or {}).get("configs", {}).items()})

    res["test"] = None
    if grid.program == "translate":
        test = dict(how=f"the final test decode (translate's `test (...)` line: beam {grid.task.get('beam', 4)}, "
                        "the whole test part), after the last step")
        for m, digits in (("bleu", 2), ("chrf", 2)):
            value = lambda r, m=m: r["test"][m]   # noqa: E731
            test[m] = dict(per_config=_per_config(groups, value, digits), paired=_paired(groups, ref, value, digits),
                           trend=_trend(trend_runs, value))
        test["sentences"] = sorted({r["test"]["sentences"] for r in done})
        res["test"] = test
        # Valid BLEU is in every eval record (greedy, the first eval_size valid sentences), so
        # time to a BLEU target is measured as time to a loss target is.
        res["target_bleu"] = (_time_to(trend_runs, grid, "bleu", True, "valid BLEU (greedy)", pilot, ref)
                              if trend_runs and all("bleu" in e for r in trend_runs for e in r["evals"]) else None)
        res["data"] = _data_check(done, out)
    return res


def _name(c):
    return f"H{c['H']} G{c['G']}{'' if c['causal'] else ' no-causal'}"


def _paired_md(comps, ref, what, control):
    if not comps:
        return [f"No pairs to compare in {what}: one configuration, or fewer than two seeds shared with "
                f"H = {ref['H']}."]
    L = [f"Differences b - a in {what}, paired by seed; a is H = {ref['H']} ({ref['why']}) for the H grid"
         f"{' and the no-causal control' if control else ''}, and multi-head attention at the same H for G < H. "
         "Holm adjusts each family of p-values across the comparisons.", "",
         "| a | b | b - a [95% t] (n) | p (t) | Holm | p (Wilcoxon) | Holm | min Wilcoxon p at n |",
         "|---|---|---|---|---|---|---|---|"]
    for c in comps:
        L.append(f"| {_name(c['a'])} | {_name(c['b'])} | {c['text']} | {_p(c['p_t'])} | {_p(c.get('p_t_holm'))} | "
                 f"{_p(c['p_wilcoxon'])} | {_p(c.get('p_wilcoxon_holm'))} | {_p(c['wilcoxon_min_p'])} |")
    return L


def _trend_md(t, what):
    return ("not enough H-grid runs" if t is None else
            f"Spearman rho(H, {what}) = {t['rho']:+.3f}, permutation p = {t['p']:.3g} "
            f"({'exact' if t['exact'] else 'Monte Carlo'}, permuted within each of {t['strata']} seeds), "
            f"n = {t['n']} runs (G = H, causal).")


def _target_md(tg, ref=None):
    if tg is None:
        return ["no H-grid runs"]
    L = [f"Target {tg['what']}: {tg['how']}. Steps and train seconds (training steps only, "
         f"{tg['threads']} thread, as each run measured them) at the first evaluation reaching it, interpolated "
         "between evaluations; and the steps at the pilot's seconds per step of the run's configuration "
         f"({tg.get('pilot') or 'no pilot'}: every configuration timed under the same conditions, once: the "
         "intervals hold the seeds' spread in steps, not the timing's own error).", "",
         "| H | reached (of n) | steps, mean [95% t] (n) | train seconds, mean [95% t] (n) | "
         "seconds at the pilot's step time |", "|---|---|---|---|---|"]
    for r in tg["per_H"]:
        L.append(f"| {r['H']} | {r['reached']} of {r['n']} | {r.get('steps', '-')} | {r.get('seconds', '-')} | "
                 f"{r.get('pilot_seconds', '-')} |")
    for field, what in (("step", "steps to the target"), ("pilot_seconds", "seconds at the pilot's step time")):
        if tg.get("paired", {}).get(field) and ref:
            L += [""] + _paired_md(tg["paired"][field], ref, what, False)
    return L


def _test_md(res):
    """The translation sections: final test BLEU and chrF, and whether the data were identical."""
    test, ref = res["test"], res["reference"]
    L = ["", "## Final test BLEU and chrF", "", f"From {test['how']}; test sentences per run: "
         f"{', '.join(map(str, test['sentences'])) or 'none'}. BLEU is sacreBLEU's default, chrF is chrF2.", "",
         "| H | G | test BLEU, mean [95% t] (n seeds) | test chrF, mean [95% t] (n seeds) |", "|---|---|---|---|"]
    chrf = {(r["H"], r["G"], r["causal"]): r["text"] for r in test["chrf"]["per_config"]}
    L += [f"| {r['H']} | {r['G']} | {r['text']} | {chrf[(r['H'], r['G'], r['causal'])]} |"
          for r in test["bleu"]["per_config"]]
    for m, what in (("bleu", "final test BLEU"), ("chrf", "final test chrF")):
        L += ["", f"### Paired by seed: {what}", ""]
        L += _paired_md(test[m]["paired"], ref, what, False) if ref else ["no H-grid configuration is complete"]
        L += ["", _trend_md(test[m]["trend"], what)]
    L += ["", "## Time to target: valid BLEU", ""]
    L += (_target_md(res["target_bleu"], ref) if res.get("target_bleu") else
          ["the eval records carry no BLEU: time to target uses the held-out loss only"])
    L += ["", "## Identical data", ""]
    for key, what in (("corpus_hash", "corpus hash (the gettext manifest)"), ("spm_sha256", "SentencePiece model")):
        seen = res["data"][key]
        if not seen:
            L.append(f"- {what}: none in the runs (the number corpus has neither)")
        elif len(seen) == 1:
            v, ids = next(iter(seen.items()))
            L.append(f"- {what}: identical in all {len(ids)} complete runs ({v[:16]})")
        else:
            L.append(f"- {what}: DIFFERS across runs: "
                     + "; ".join(f"{v[:16]}: {', '.join(i)}" for v, i in seen.items()))
    return L


def markdown(res):
    """<program>-heads.md: every number with its n."""
    g = res["grid"]
    task = f"; task {g['task']}" if g.get("task") else ""
    L = [f"# Heads study, {g.get('program', 'lm')} grid `{g['name']}`", "",
         f"{res['runs_complete']} of {res['runs_planned']} runs complete; {g['steps']} steps, held-out loss every "
         f"{g['eval_every']} steps on {g['eval_size']} held-out examples, {g['threads']} thread(s) per run; "
         f"model {g['model']}{task}.", "", res["schedule"] + ".", ""]
    L += ["## Missing runs", ""]
    L += [f"- {m['id']}: {m['status']}" for m in res["missing"]] or ["none"]
    L += ["", "## Final held-out loss", "", "| H | G | causal | final loss, mean [95% t-interval] (n seeds) |",
          "|---|---|---|---|"]
    L += [f"| {r['H']} | {r['G']} | {'yes' if r['causal'] else 'no'} | {r['text']} |" for r in res["final_loss"]]
    ref = res["reference"]
    L += ["", "## Paired by seed", ""]
    L += (_paired_md(res["paired"], ref, "final held-out loss", g["control_heads"]) if ref
          else ["no H-grid configuration is complete"])
    L += ["", "## Trend across H", "", _trend_md(res["trend"], "final held-out loss")]
    fh = res.get("final_heldout")
    if fh:
        L += ["", "## Final loss on the whole held-out text", "",
              f"The last checkpoint on every held-out window ({', '.join(map(str, fh['tokens']))} tokens; the "
              f"evaluations above read the first {g['eval_size']}), `lm eval`.", "",
              "| H | G | causal | held-out loss, mean [95% t-interval] (n seeds) |", "|---|---|---|---|"]
        L += [f"| {r['H']} | {r['G']} | {'yes' if r['causal'] else 'no'} | {r['text']} |" for r in fh["per_config"]]
        L += [""] + _paired_md(fh["paired"], ref, "held-out loss on every window", g["control_heads"])
        if fh.get("paired_best"):
            best = dict(fh["best"], why="the lowest mean held-out loss on every window, chosen on these same data, "
                                        "so these p-values are not adjusted for that choice")
            L += ["", "Every H against the best:", ""] + _paired_md(fh["paired_best"], best,
                                                                       "held-out loss on every window", False)
        L += ["", _trend_md(fh["trend"], "held-out loss on every window")]
    L += ["", "## Convergence", "", f"Rule: {res['rule']}.", "",
          "Holds since: the first evaluation from which the rule, judged on the curve up to each evaluation, held "
          "at every later one (the budget the run needed).", "",
          "| run | converged | holds since step | slope per 1k steps (± se) | relative slope per 1k | final loss |",
          "|---|---|---|---|---|---|"]
    for c in res["convergence"]:
        since = "-" if c["since"] is None else f"{c['since']:.0f}"
        L.append(f"| {c['id']} | {'yes' if c['converged'] else 'no'} | {since} | {c['slope_per_1k']:+.4f} "
                 f"(± {c['slope_se_per_1k']:.4f}) | {c['rel_slope_per_1k'] * 100:+.2f}% | {c['final']:.4f} |")
    count = defaultdict(lambda: [0, 0])
    for c in res["convergence"]:
        count[_name(c)][0] += c["converged"]
        count[_name(c)][1] += 1
    L += ["", "Converged per configuration: " + "; ".join(f"{k}: {a} of n = {b}" for k, (a, b) in count.items())]
    cc = res["converged_count"]
    L += ["", f"The rule bounds how fast a curve may still fall, not that it is flat: of the {cc['held']} runs "
          f"that hold it, {cc['falling']} still fall by more than twice their slope's standard error "
          f"({cc['falling_ids']}) and {cc['rising']} rise by more than that ({cc['rising_ids']}) (the slope is "
          f"fitted to the last {g['window']} evaluations, {g['window'] - 2} degrees of freedom)."]
    L += ["", "## Step time", "", "Milliseconds per training step: the pilot's (one timing of each configuration, "
          "all under the same conditions) and the runs' own (train seconds over steps, mean [95% t] over seeds; "
          "a run shares the CPU with whatever else ran).", "", "| H | G | causal | pilot | the runs |", "|---|---|---|---|---|"]
    for r in res["step_ms"]["runs"]:
        pilot = res["step_ms"]["pilot"].get(f"H{r['H']}-G{r['G']}") if r["causal"] else None
        L.append(f"| {r['H']} | {r['G']} | {'yes' if r['causal'] else 'no'} | "
                 f"{'-' if pilot is None else f'{pilot:.1f}'} | {r['text']} |")
    L += ["", "## Time to target", ""] + _target_md(res["target"], ref)
    if res.get("test"):
        L += _test_md(res)
    L += ["", "## Plan", ""] + _plan_md(res.get("plan"))
    return "\n".join(L) + "\n"


def _plan_md(plan):
    if not plan:
        return ["no frozen plan (plan.json)"]
    L = [f"The runs in {len(plan['parts'])} parts, {plan['jobs']} at once, one thread each; core-minutes and wall "
         "minutes as `plan` estimated them from the pilot's step times.", "",
         "| part | runs | core-minutes | wall minutes |", "|---|---|---|---|"]
    fmt = lambda x: "-" if x is None else f"{x:.1f}"   # noqa: E731
    L += [f"| {i} | {p['runs']} | {fmt(p['core_minutes'])} | {fmt(p['wall_minutes'])} |"
          for i, p in enumerate(plan["parts"], 1)]
    L.append(f"| all | {plan['runs']} | {fmt(plan['core_minutes'])} | {fmt(plan['wall_minutes'])} |")
    return L


# ---------------------------------------------------------------------------
# The report subcommand

def report_paths(grid: Grid, out):
    """<out>/lm-heads.{md,json} or <out>/translate-heads.{md,json}."""
    return Path(out) / f"{grid.program}-heads.md", Path(out) / f"{grid.program}-heads.json"


def build_report(out):
    """The report of the study in `out` from what it holds (the runs' records,
    probes, uptrainings, cost files; never a checkpoint): (result dict, markdown)."""
    grid = saved_grid(out)
    res = analyse(grid, out)
    md = markdown(res)
    import heads_probe   # head_probe's analyses of the runs' checkpoints (heads_study.py probe)
    res["heads"] = heads_probe.analyse_probes(grid, out)
    md += "\n" + heads_probe.markdown(res["heads"])
    res["no_mask"] = heads_probe.analyse_no_mask(grid, out)
    if res["no_mask"] is not None:
        md += "\n" + heads_probe.no_mask_markdown(res["no_mask"])
    if grid.program == "lm":
        import heads_gqa
        if grid.gqa_heads:   # heads_study.py gqa: conversion and uptraining
            res["gqa_conversion"] = heads_gqa.analyse_gqa(grid, out)
            md += "\n" + heads_gqa.markdown(res["gqa_conversion"])
        md += "\n" + heads_gqa.cost_markdown(out)   # heads_study.py cost
        res["cost"] = heads_gqa.cost_data(out)
    return res, md


def cmd_report(args):
    res, md = build_report(args.out)
    md_path, json_path = report_paths(saved_grid(args.out), args.out)
    md_path.write_text(md)
    json_path.write_text(json.dumps(res, indent=1) + "\n")
    print(md)
    print(f"wrote {md_path} and {json_path}")
    return res


SECTIONS = ("## Missing runs", "## Final held-out loss", "## Paired by seed", "## Trend across H", "## Convergence",
            "## Time to target")
TRANSLATE_SECTIONS = ("## Final test BLEU and chrF", "### Paired by seed: final test BLEU",
                      "### Paired by seed: final test chrF", "## Time to target: valid BLEU", "## Identical data")
