"""Tests of tools/heads_study.py's pure parts: the grid as data, the split into
parts, run completeness from a log, the time-to-target level.

    cd tools && /usr/bin/python3 -m unittest test_heads_study

ctest runs it as heads_study_py (skipped, exit 77, without numpy/scipy); the
pipeline end to end is heads_study_lm_quick.
"""
import json
import sys
import tempfile
import unittest
from collections import Counter
from pathlib import Path

try:
    import numpy  # noqa: F401
    import scipy  # noqa: F401
except ImportError as e:
    print(f"heads_study_py: skipped: needs Debian's python3-numpy and python3-scipy: {e}", file=sys.stderr)
    sys.exit(77)

import heads_study as st  # noqa: E402


class LmGrid(unittest.TestCase):
    def setUp(self):
        self.runs = st.runs_of(st.lm_grid())

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
                          flag("--batch-size")), ("128", "512", "4", "128", "32"))
        self.assertEqual((flag("--steps"), flag("--schedule"), flag("--warmup"), flag("--threads")),
                         ("3000", "warmup", "60", "1"))
        self.assertNotIn("--no-causal", a)
        control = next(x for x in self.runs if not x["causal"])
        self.assertIn("--no-causal", control["args"])
        cmd = st.command(r, "/bin/lm", "/o")
        self.assertEqual(cmd[0], "/bin/lm")
        self.assertEqual(cmd[cmd.index("--log") + 1], "/o/runs/H8-G2-s3/log.jsonl")
        self.assertEqual(cmd[cmd.index("--checkpoint-dir") + 1], "/o/runs/H8-G2-s3/ckpt")
        self.assertEqual(cmd[-1], "--resume")   # an interrupted run continues its checkpoint

    def test_eval_steps_end_at_the_last_step(self):
        self.assertEqual(st.lm_grid(steps=250, eval_every=100).evals(), [100, 200, 250])
        self.assertEqual(st.lm_grid(steps=300, eval_every=100).evals(), [100, 200, 300])


class Parts(unittest.TestCase):
    def test_each_part_within_the_limit_and_every_run_in_exactly_one(self):
        costs = {f"r{i}": float(c) for i, c in enumerate([50, 40, 40, 30, 30, 20, 20, 10, 10, 5, 5, 5])}
        parts = st.split_parts(costs, jobs=2, limit_s=60)
        self.assertEqual(sorted(r for p in parts for r in p), sorted(costs))
        for p in parts:
            self.assertLessEqual(st.makespan([costs[r] for r in p], 2), 60)
        # 265 s of work on 2 workers needs at least 3 parts of 60 s; the split finds a small count.
        self.assertGreaterEqual(len(parts), 3)
        self.assertLessEqual(len(parts), 4)

    def test_a_given_count_is_kept(self):
        costs = {f"r{i}": 1.0 for i in range(7)}
        parts = st.split_parts(costs, parts=3)
        self.assertEqual(len(parts), 3)
        self.assertEqual(sorted(len(p) for p in parts), [2, 2, 3])

    def test_a_run_longer_than_a_part_is_refused(self):
        with self.assertRaisesRegex(ValueError, "r1 alone takes 3.00 h"):
            st.split_parts({"r0": 10.0, "r1": 3 * 3600.0}, limit_s=7200)

    def test_makespan_runs_longest_first(self):
        self.assertEqual(st.makespan([3, 3, 2, 2, 2], 2), 7)   # 3+2+2 | 3+2
        self.assertEqual(st.makespan([5, 1], 1), 6)

    def test_plan_uses_the_pilot_and_says_core_minutes(self):
        grid = st.lm_grid(steps=1000, eval_every=100)
        rows = {f"H{r['H']}-G{r['G']}": dict(s_per_step=0.1 * r["H"] ** 0.5, eval_s=2.0, startup_s=1.0)
                for r in st.runs_of(grid)}
        plan = st.make_plan(grid, dict(configs=rows), jobs=2, limit_s=1800)
        self.assertTrue(plan["measured"])
        self.assertTrue(all(p["wall_minutes"] <= 30 for p in plan["parts"]))
        total = sum(p["core_minutes"] for p in plan["parts"])
        expected = sum(1 + 1000 * rows[f"H{r['H']}-G{r['G']}"]["s_per_step"] + 10 * 2 for r in st.runs_of(grid))
        self.assertAlmostEqual(total * 60, expected)

    def test_without_a_pilot_the_cost_is_unknown(self):
        plan = st.make_plan(st.lm_grid(), None, parts=3)
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
            self.assertEqual(st.status(st.read_log(log), 30), "missing")
            write_log(log, [self.step(10, 1), self.ev(10, 2.9, 1), self.step(20, 2), self.ev(20, 2.8, 2),
                            self.step(30, 3)], cut=True)   # killed during the last evaluation
            self.assertEqual(st.status(st.read_log(log), 30), "partial at step 30")
            write_log(log, [self.step(10, 1), self.ev(10, 2.9, 1), self.step(30, 3), self.ev(30, 2.7, 3)])
            self.assertEqual(st.status(st.read_log(log), 30), "complete")
            self.assertEqual(st.status(st.read_log(log), 40), "partial at step 30")

    def test_eval_records_in_step_order_the_last_of_a_step_winning(self):
        recs = [self.ev(20, 2.8, 2), self.ev(10, 2.9, 1), self.ev(20, 2.7, 2.5), self.step(20, 2)]
        ev = st.eval_records(recs)
        self.assertEqual([(e["step"], e["eval_loss"]) for e in ev], [(10, 2.9), (20, 2.7)])


class Target(unittest.TestCase):
    def test_every_run_reaches_the_worst_final_plus_margin(self):
        finals = [1.52, 1.61, 1.49]
        target = st.choose_target(finals, 0.01)
        self.assertAlmostEqual(target, 1.61 * 1.01)
        self.assertTrue(all(f <= target for f in finals))
        with self.assertRaisesRegex(ValueError, "at least one run"):
            st.choose_target([], 0.01)


if __name__ == "__main__":
    unittest.main()
