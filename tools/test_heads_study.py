"""Tests of the heads study's pure parts (tools/heads_study.py and its modules
heads_grids, heads_runs, heads_report): the grids as data (lm and translate) and
their command lines, the split into parts, run completeness from a log (and
translate's test line), the time-to-target level, the translation report from
synthetic runs.

    cd tools && /usr/bin/python3 -m unittest test_heads_study

ctest runs it as heads_study_py (skipped, exit 77, without numpy/scipy); the
pipeline end to end (both grids) is heads_study_quick.
"""
import argparse
import dataclasses
import hashlib
import json
import sys
import tempfile
import unittest
from collections import Counter
from dataclasses import asdict
from pathlib import Path

try:
    import numpy  # noqa: F401
    import scipy  # noqa: F401
except ImportError as e:
    print(f"heads_study_py: skipped: needs Debian's python3-numpy and python3-scipy: {e}", file=sys.stderr)
    sys.exit(77)

import heads_grids as grids  # noqa: E402
import heads_report as report  # noqa: E402
import heads_runs as runs  # noqa: E402
import heads_study as study  # noqa: E402


class LmGrid(unittest.TestCase):
    def setUp(self):
        self.runs = grids.runs_of(grids.lm_grid())

    def test_the_issues_configurations_and_seeds(self):
        count = Counter((r["H"], r["G"], r["causal"]) for r in self.runs)
        expected = {(H, H, True): 5 for H in (1, 2, 4, 8, 16)}
        expected.update({(8, 1, True): 5, (8, 2, True): 5, (4, 4, False): 2})
        self.assertEqual(dict(count), expected)
        self.assertEqual(len({r["id"] for r in self.runs}), len(self.runs))

    def test_command_lines_carry_the_run_and_the_fixed_width(self):
        r = next(x for x in self.runs if (x["H"], x["G"], x["seed"]) == (8, 2, 3))
        a = r["args"]
        flag = lambda f: a[a.index(f) + 1]   # noqa: E731
        self.assertEqual((flag("--heads"), flag("--kv-heads"), flag("--seed")), ("8", "2", "3"))
        self.assertEqual((flag("--d-model"), flag("--d-ff"), flag("--layers"), flag("--context"),
                          flag("--batch-size")), ("128", "512", "2", "64", "32"))
        self.assertEqual((flag("--steps"), flag("--schedule"), flag("--warmup"), flag("--threads")),
                         ("12000", "warmup", "60", "1"))
        self.assertNotIn("--no-causal", a)
        control = next(x for x in self.runs if not x["causal"])
        self.assertIn("--no-causal", control["args"])
        cmd = grids.command(r, "/bin/lm", "/o")
        self.assertEqual(cmd[0], "/bin/lm")
        self.assertEqual(cmd[cmd.index("--log") + 1], "/o/runs/H8-G2-s3/log.jsonl")
        self.assertEqual(cmd[cmd.index("--checkpoint-dir") + 1], "/o/runs/H8-G2-s3/ckpt")
        self.assertEqual(cmd[-1], "--resume")   # an interrupted run continues its checkpoint

    def test_eval_steps_end_at_the_last_step(self):
        self.assertEqual(grids.lm_grid(steps=250, eval_every=100).evals(), [100, 200, 250])
        self.assertEqual(grids.lm_grid(steps=300, eval_every=100).evals(), [100, 200, 300])


def flag_of(args):
    return lambda f: args[args.index(f) + 1]


class TranslateGrid(unittest.TestCase):
    def setUp(self):
        self.grid = grids.translate_grid("ko")
        self.runs = grids.runs_of(self.grid)

    def test_the_issues_configurations_and_seeds(self):
        count = Counter((r["H"], r["G"], r["causal"]) for r in self.runs)
        self.assertEqual(dict(count), {(8, 8, True): 5})    # the heads of one width over 5 seeds; no GQA, no control
        self.assertEqual(len({r["id"] for r in self.runs}), len(self.runs))
        self.assertEqual(self.grid.name, "translate-ko")

    def test_command_lines_carry_the_corpus_the_run_and_the_fixed_width(self):
        r = next(x for x in self.runs if (x["H"], x["G"], x["seed"]) == (8, 8, 4))
        a = r["args"]
        flag = flag_of(a)
        self.assertEqual(a[0], "train")
        self.assertEqual((flag("--corpus"), flag("--src"), flag("--tgt"), flag("--beam")), ("gettext", "en", "ko", "4"))
        self.assertEqual((flag("--heads"), flag("--kv-heads"), flag("--seed")), ("8", "8", "4"))
        self.assertEqual((flag("--d-model"), flag("--d-ff"), flag("--enc-layers"), flag("--dec-layers"),
                          flag("--dropout"), flag("--label-smoothing"), flag("--max-tokens"), flag("--lr")),
                         ("128", "512", "2", "2", "0.1", "0.1", "4096", "0.002"))
        self.assertEqual((flag("--steps"), flag("--schedule"), flag("--warmup"), flag("--eval-every"),
                          flag("--eval-size"), flag("--threads")), ("2000", "warmup", "300", "50", "500", "1"))
        self.assertNotIn("--no-causal", a)
        self.assertNotIn("--text", a)
        # Every flag once: translate (cxxopts) refuses a flag given twice.
        names = [x for x in a if x.startswith("--")]
        self.assertEqual(len(names), len(set(names)))

    def test_a_fresh_run_overwrites_and_a_checkpointed_one_resumes(self):
        r = self.runs[0]
        with tempfile.TemporaryDirectory() as out:
            cmd = grids.command(r, "/bin/translate", out)
            self.assertEqual(cmd[cmd.index("--checkpoint-dir") + 1], f"{out}/runs/{r['id']}/ckpt")
            self.assertEqual(cmd[-1], "--overwrite")
            ckpt = Path(out) / "runs" / r["id"] / "ckpt"
            ckpt.mkdir(parents=True)
            (ckpt / "run.json").write_text("{}")    # claimed, killed before the first checkpoint
            self.assertEqual(grids.command(r, "/bin/translate", out)[-1], "--overwrite")
            (ckpt / "step-00000100.model.safetensors").write_text("")
            self.assertEqual(grids.command(r, "/bin/translate", out)[-1], "--resume")
        lm_run = grids.runs_of(grids.lm_grid())[0]
        self.assertEqual(grids.command(lm_run, "/bin/lm", "/nowhere")[-1], "--resume")

    def parse(self, *argv):
        p = argparse.ArgumentParser()
        study.add_common(p)
        return p.parse_args(list(argv))

    def test_grid_flags_default_per_grid_and_model_flags_override(self):
        g = grids.grid_from(self.parse("--grid", "translate-fr"))
        self.assertEqual((g.name, g.task["tgt"], g.steps, g.warmup, g.eval_size),
                         ("translate-fr", "fr", 2000, 300, 500))
        g = grids.grid_from(self.parse("--grid", "translate-fr", "--steps", "500", "--model", "d-model=256",
                                    "--model", "lr=1e-3"))
        self.assertEqual((g.steps, g.model["d-model"], g.model["lr"], g.model["d-ff"]), (500, 256, 0.001, 512))
        flag = flag_of(grids.runs_of(g)[0]["args"])
        self.assertEqual((flag("--d-model"), flag("--lr")), ("256", "0.001"))
        lm = grids.grid_from(self.parse())
        self.assertEqual((lm.name, lm.program, lm.warmup, lm.eval_size), ("lm", "lm", 60, 200))
        for bad in (["--grid", "translate"], ["--grid", "translate-fr", "--model", "d-model"]):
            with self.assertRaises(SystemExit):
                grids.grid_from(self.parse(*bad))

    def test_an_lm_grid_json_from_before_the_translate_fields_still_matches(self):
        grid = grids.lm_grid()
        with tempfile.TemporaryDirectory() as out:
            old = asdict(grid)
            del old["program"], old["task"]
            (Path(out) / "grid.json").write_text(json.dumps(old))
            self.assertEqual(grids.frozen_grid(grid, out), grid)
            with self.assertRaisesRegex(SystemExit, "another grid"):
                grids.frozen_grid(grids.lm_grid(steps=10), out)


class Parts(unittest.TestCase):
    def test_parts_hold_whole_seeds_in_order_within_the_limit(self):
        # 4 seeds of 3 runs (20 + 20 + 10 s: 30 s wall at 2 at once); a 60 s part takes two seeds.
        costs = {f"s{s}-r{i}": float(c) for s in (1, 2, 3, 4) for i, c in enumerate([20, 20, 10])}
        seed_of = {r: int(r[1]) for r in costs}
        parts = runs.split_parts(costs, seed_of, jobs=2, limit_s=60)
        self.assertEqual(sorted(r for p in parts for r in p), sorted(costs))
        self.assertEqual([sorted({seed_of[r] for r in p}) for p in parts], [[1, 2], [3, 4]])
        for p in parts:
            self.assertLessEqual(runs.makespan([costs[r] for r in p], 2), 60)
        # A shorter limit cuts every seed alone, never one seed across parts.
        self.assertEqual(len(runs.split_parts(costs, seed_of, jobs=2, limit_s=40)), 4)

    def test_a_given_count_cuts_the_seeds_into_parts_of_about_equal_work(self):
        costs = {f"s{s}-r{i}": 1.0 for s in range(1, 6) for i in range(3)}
        seed_of = {r: int(r[1]) for r in costs}
        parts = runs.split_parts(costs, seed_of, parts=3)
        self.assertEqual([sorted({seed_of[r] for r in p}) for p in parts], [[1, 2], [3, 4], [5]])
        # Runs already complete cost nothing; the count still holds.
        self.assertEqual(len(runs.split_parts({r: 0.0 for r in costs}, seed_of, parts=3)), 3)
        with self.assertRaisesRegex(ValueError, "1 <= parts <= 5"):
            runs.split_parts(costs, seed_of, parts=6)

    def test_a_seed_longer_than_a_part_is_refused(self):
        with self.assertRaisesRegex(ValueError, "seed 2's 2 runs alone take 3.00 h"):
            runs.split_parts({"a": 10.0, "b": 3 * 3600.0, "c": 60.0}, {"a": 1, "b": 2, "c": 2}, limit_s=7200)

    def test_makespan_runs_longest_first(self):
        self.assertEqual(runs.makespan([3, 3, 2, 2, 2], 2), 7)   # 3+2+2 | 3+2
        self.assertEqual(runs.makespan([5, 1], 1), 6)

    def test_plan_uses_the_pilot_and_says_core_minutes(self):
        grid = grids.lm_grid(steps=1000, eval_every=100)
        rows = {f"H{r['H']}-G{r['G']}": dict(s_per_step=0.1 * r["H"] ** 0.5, eval_s=2.0, startup_s=1.0)
                for r in grids.runs_of(grid)}
        plan = runs.make_plan(grid, dict(configs=rows), jobs=2, limit_s=1800)
        self.assertTrue(plan["measured"])
        self.assertTrue(all(p["wall_minutes"] <= 30 for p in plan["parts"]))
        total = sum(p["core_minutes"] for p in plan["parts"])
        expected = sum(1 + 1000 * rows[f"H{r['H']}-G{r['G']}"]["s_per_step"] + 10 * 2 for r in grids.runs_of(grid))
        self.assertAlmostEqual(total * 60, expected)

    def test_an_extended_grid_plans_only_the_remaining_steps(self):
        grid = grids.lm_grid(steps=1000, eval_every=100)
        pilot = dict(configs={f"H{r['H']}-G{r['G']}": dict(s_per_step=0.1, eval_s=2.0, startup_s=1.0)
                              for r in grids.runs_of(grid)})
        r = grids.runs_of(grid)[0]
        self.assertAlmostEqual(runs.run_seconds(r, grid, pilot, done=600), 1 + 400 * 0.1 + 4 * 2)
        self.assertEqual(runs.run_seconds(r, grid, pilot, done=1000), 0.0)
        with tempfile.TemporaryDirectory() as out:
            ckpt = Path(out) / "runs" / r["id"] / "ckpt"
            ckpt.mkdir(parents=True)
            (ckpt / "step-00000600.model.safetensors").write_bytes(b"")
            self.assertEqual(runs.trained_steps(ckpt.parent), 600)
            full = runs.make_plan(grid, pilot, limit_s=1e9)
            part = runs.make_plan(grid, pilot, limit_s=1e9, out=out)
            self.assertAlmostEqual((full["parts"][0]["core_minutes"] - part["parts"][0]["core_minutes"]) * 60,
                                   600 * 0.1 + 6 * 2)

    def test_a_larger_budget_extends_the_frozen_grid_and_nothing_else_does(self):
        with tempfile.TemporaryDirectory() as out:
            grids.frozen_grid(grids.lm_grid(steps=1000), out)
            (Path(out) / "plan.json").write_text("{}")
            grids.frozen_grid(grids.lm_grid(steps=2000), out)
            self.assertEqual(grids.saved_grid(out).steps, 2000)
            self.assertFalse((Path(out) / "plan.json").exists())   # cut for the old budget
            with self.assertRaisesRegex(SystemExit, "another grid"):
                grids.frozen_grid(grids.lm_grid(steps=1500), out)   # shrinking is another grid
            with self.assertRaisesRegex(SystemExit, "another grid"):
                grids.frozen_grid(grids.lm_grid(steps=3000, eval_every=50), out)
            (Path(out) / "plan.json").write_text("{}")
            grids.frozen_grid(dataclasses.replace(grids.lm_grid(steps=2000), window=10), out)   # read, not trained
            self.assertEqual(grids.saved_grid(out).window, 10)
            self.assertTrue((Path(out) / "plan.json").exists())

    def test_without_a_pilot_the_cost_is_unknown(self):
        plan = runs.make_plan(grids.lm_grid(), None, parts=3)
        self.assertFalse(plan["measured"])
        self.assertEqual(len(plan["parts"]), 3)
        self.assertIsNone(plan["parts"][0]["core_minutes"])


def write_log(path, records, cut=False):
    text = "".join(json.dumps(r) + "\n" for r in records)
    Path(path).write_text(text + ('{"step": 31, "lo' if cut else ""))


class Completeness(unittest.TestCase):
    def step(self, s, t):
        return dict(step=s, loss=3.0, elapsed_s=t, train_s=t * 0.9)

    def ev(self, s, loss, t):
        return dict(step=s, eval_loss=loss, elapsed_s=t, train_s=t * 0.9)

    def test_complete_only_with_an_eval_record_at_the_final_step(self):
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "log.jsonl"
            self.assertEqual(runs.status(runs.read_log(log), 30), "missing")
            write_log(log, [self.step(10, 1), self.ev(10, 2.9, 1), self.step(20, 2), self.ev(20, 2.8, 2),
                            self.step(30, 3)], cut=True)   # killed during the last evaluation
            self.assertEqual(runs.status(runs.read_log(log), 30), "partial at step 30")
            write_log(log, [self.step(10, 1), self.ev(10, 2.9, 1), self.step(30, 3), self.ev(30, 2.7, 3)])
            self.assertEqual(runs.status(runs.read_log(log), 30), "complete")
            self.assertEqual(runs.status(runs.read_log(log), 40), "partial at step 30")

    def test_eval_records_in_step_order_the_last_of_a_step_winning(self):
        recs = [self.ev(20, 2.8, 2), self.ev(10, 2.9, 1), self.ev(20, 2.7, 2.5), self.step(20, 2)]
        ev = runs.eval_records(recs)
        self.assertEqual([(e["step"], e["eval_loss"]) for e in ev], [(10, 2.9), (20, 2.7)])


class ConvergenceReport(unittest.TestCase):
    def test_each_run_says_whether_and_since_when_the_rule_holds(self):
        # H = 1 falls 0.01 per step to step 50 and is flat after: with a 3-point window over
        # evaluations every 10 steps the rule first holds on 50, 60, 70 and for good; H = 2 keeps falling.
        grid = grids.Grid("lm", 100, 10, 20, 5, (1, 2), (1, 2), 0, (), 0, (), {}, window=3, threshold=0.01)
        with tempfile.TemporaryDirectory() as out:
            for r in grids.runs_of(grid):
                d = Path(out) / "runs" / r["id"]
                d.mkdir(parents=True)
                loss = (lambda s: 3 - 0.01 * min(s, 50)) if r["H"] == 1 else (lambda s: 3 - 0.01 * s)
                write_log(d / "log.jsonl", [dict(step=s, eval_loss=loss(s), elapsed_s=s, train_s=s)
                                            for s in grid.evals()])
            res = report.analyse(grid, out)
            since = {c["id"]: (c["converged"], c["since"]) for c in res["convergence"]}
            self.assertEqual(since, {"H1-G1-s1": (True, 70.0), "H1-G1-s2": (True, 70.0),
                                     "H2-G2-s1": (False, None), "H2-G2-s2": (False, None)})
            md = report.markdown(res)
            self.assertIn("| H1-G1-s1 | yes | 70 |", md)
            self.assertIn("| H2-G2-s2 | no | - |", md)


TEST_LINE = ("test (1000 sentences, beam 4, length penalty 0.6): loss {loss:.4f}  token accuracy 41.20%  "
             "exact match 3.10%  BLEU {bleu:.2f}  chrF {chrf:.2f}\n")
MANIFEST = "total: en -> ko, 26 domains (0 missing), 22189 entries, 9345 pairs: train 7845 (seed 1); hash {h}\n"


class TranslateLogs(unittest.TestCase):
    def test_the_last_test_line_counts_and_none_before_it(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "stdout.txt"
            self.assertIsNone(runs.read_test(out))
            out.write_text("valid (500 sentences): loss 2.1  token accuracy 50.00%  exact match 1.00%  BLEU 9.00  "
                           "chrF 30.00\n")
            self.assertIsNone(runs.read_test(out))
            out.write_text(TEST_LINE.format(loss=2.5, bleu=20.0, chrf=40.0) + "resumed\n"
                           + TEST_LINE.format(loss=2.25, bleu=21.5, chrf=41.25).replace(", beam 4, length penalty 0.6",
                                                                                        ""))
            self.assertEqual(runs.read_test(out), dict(sentences=1000, loss=2.25, bleu=21.5, chrf=41.25))

    def test_complete_needs_the_test_line(self):
        grid = grids.translate_grid("fr", steps=20, eval_every=10)
        run = grids.runs_of(grid)[0]
        with tempfile.TemporaryDirectory() as out:
            d = Path(out) / "runs" / run["id"]
            d.mkdir(parents=True)
            write_log(d / "log.jsonl", [dict(step=s, eval_loss=3.0 - s / 100, bleu=s / 2, elapsed_s=s, train_s=s)
                                        for s in (10, 20)])
            (d / "stdout.txt").write_text("done: 20 steps\n")
            self.assertEqual(runs.run_status(grid, run, out), "trained, test decode missing")
            with open(d / "stdout.txt", "a") as f:
                f.write(TEST_LINE.format(loss=2.0, bleu=10.0, chrf=30.0))
            self.assertEqual(runs.run_status(grid, run, out), "complete")

    def test_data_identity_reads_the_corpus_hash_and_hashes_the_subword_model(self):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "ckpt").mkdir()
            self.assertEqual(runs.data_identity(d), dict(corpus_hash=None, spm_sha256=None))
            (Path(d) / "stdout.txt").write_text(MANIFEST.format(h="1bd97d9c086af428") + "translate: en -> ko\n")
            (Path(d) / "ckpt" / "sentencepiece.model").write_bytes(b"pieces")
            self.assertEqual(runs.data_identity(d), dict(corpus_hash="1bd97d9c086af428",
                                                       spm_sha256=hashlib.sha256(b"pieces").hexdigest()))


class TranslateReport(unittest.TestCase):
    """The report of synthetic runs whose numbers are known: H = 2 scores BLEU
    1 + seed / 10 above H = 1 on each seed, G = 1 at H = 2 scores 3 below it,
    and H = 2 learns twice as fast."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.out = Path(self.dir.name)
        self.grid = grids.Grid("translate-ko", 40, 10, 20, 5, (1, 2), (1, 2, 3), 2, (1,), 0, (), {"d-model": 8},
                            window=3, program="translate", task={"corpus": "gettext", "tgt": "ko"})
        for r in grids.runs_of(self.grid):
            d = self.out / "runs" / r["id"]
            (d / "ckpt").mkdir(parents=True)
            speed = 2 if (r["H"], r["G"]) == (2, 2) else 1
            recs = [dict(step=s, eval_loss=4.0 - 0.02 * s * speed, bleu=0.5 * s * speed, chrf=s, elapsed_s=s / 10,
                         train_s=s / 10) for s in self.grid.evals()]
            write_log(d / "log.jsonl", recs)
            bleu = 20 + r["seed"] + ((1 + r["seed"] / 10) if r["H"] == 2 else 0) - (3 if r["G"] < r["H"] else 0)
            (d / "stdout.txt").write_text(MANIFEST.format(h="1bd97d9c086af428")
                                          + TEST_LINE.format(loss=2.0, bleu=bleu, chrf=40.0 + r["seed"]))
            (d / "ckpt" / "sentencepiece.model").write_bytes(b"same pieces")

    def tearDown(self):
        self.dir.cleanup()

    def test_test_bleu_paired_target_and_identical_data(self):
        res = report.analyse(self.grid, self.out)
        self.assertEqual(res["runs_complete"], 9)
        self.assertEqual((res["reference"]["H"], res["reference"]["G"]), (2, 2))   # lowest final loss
        bleu = {(c["b"]["H"], c["b"]["G"]): c for c in res["test"]["bleu"]["paired"]}
        self.assertAlmostEqual(bleu[(1, 1)]["diff"], -1.2)      # H1 - H2: -(1 + seed / 10), mean over seeds 1..3
        self.assertAlmostEqual(bleu[(2, 1)]["diff"], -3.0)      # GQA against MHA at H = 2
        self.assertEqual(bleu[(1, 1)]["n"], 3)
        per = {(r["H"], r["G"]): r for r in res["test"]["bleu"]["per_config"]}
        self.assertAlmostEqual(per[(1, 1)]["mean"], 22.0)
        self.assertEqual(res["test"]["sentences"], [1000])
        # Valid BLEU target: the worst final (H = 1: 20) less 1% = 19.8, reached at step 39.6 by H = 1
        # and 19.8 by H = 2 (interpolated between evaluations).
        tb = {r["H"]: r for r in res["target_bleu"]["per_H"]}
        self.assertAlmostEqual(res["target_bleu"]["level"], 19.8)
        self.assertEqual((tb[1]["reached"], tb[2]["reached"]), (3, 3))
        self.assertTrue(tb[1]["steps"].startswith("40 ") and tb[2]["steps"].startswith("20 "), tb)
        self.assertEqual(list(res["data"]["corpus_hash"]), ["1bd97d9c086af428"])
        self.assertEqual(len(res["data"]["spm_sha256"]), 1)
        md = report.markdown(res)
        for section in report.SECTIONS + report.TRANSLATE_SECTIONS:
            self.assertIn(section, md)
        self.assertIn("identical in all 9 complete runs", md)
        self.assertNotIn("no-causal control", md)

    def test_a_run_with_another_subword_model_is_named(self):
        (self.out / "runs" / "H1-G1-s2" / "ckpt" / "sentencepiece.model").write_bytes(b"other pieces")
        md = report.markdown(report.analyse(self.grid, self.out))
        self.assertRegex(md, r"SentencePiece model: DIFFERS across runs: .*H1-G1-s2")


class Target(unittest.TestCase):
    def test_every_run_reaches_the_worst_final_plus_margin(self):
        finals = [1.52, 1.61, 1.49]
        target = report.choose_target(finals, 0.01)
        self.assertAlmostEqual(target, 1.61 * 1.01)
        self.assertTrue(all(f <= target for f in finals))
        with self.assertRaisesRegex(ValueError, "at least one run"):
            report.choose_target([], 0.01)


if __name__ == "__main__":
    unittest.main()
