"""Tests of tools/heads_doc.py (the heads study's doc rendered from its data and
checked against it): paths into a report, placeholders, and `check` finding a
stale report or doc on a synthetic grid.

    cd tools && /usr/bin/python3 -m unittest test_heads_doc

ctest runs it as heads_doc_py (exit 77 without numpy/scipy).
"""
import json
import sys
import tempfile
import unittest
from pathlib import Path

try:
    import numpy  # noqa: F401
    import scipy  # noqa: F401
except ImportError as e:
    print(f"heads_doc_py: skipped: needs Debian's python3-numpy and python3-scipy: {e}", file=sys.stderr)
    sys.exit(77)

import heads_doc as hd  # noqa: E402

try:
    import matplotlib  # noqa: F401
    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False
import heads_grids as grids  # noqa: E402

REPORT = {"final": [{"H": 1, "G": 1, "causal": True, "mean": 1.82125, "text": "1.821 [1.818, 1.825] (n=5)"},
                    {"H": 4, "G": 4, "causal": True, "mean": 1.77691, "text": "1.777"},
                    {"H": 4, "G": 4, "causal": False, "mean": 0.039, "text": "0.039"}],
          "trend": {"rho": -0.5, "n": 25}, "grid": {"name": "lm"},
          "paired": [{"a": {"H": 4, "G": 4}, "b": {"H": 1, "G": 1}, "diff": 0.04},
                     {"a": {"H": 8, "G": 8}, "b": {"H": 8, "G": 2}, "diff": 0.01}]}


class Lookup(unittest.TestCase):
    def test_paths_index_and_select(self):
        self.assertEqual(hd.lookup(REPORT, "trend.n"), 25)
        self.assertEqual(hd.lookup(REPORT, "final[0].mean"), 1.82125)
        self.assertEqual(hd.lookup(REPORT, "final[-1].mean"), 0.039)
        self.assertEqual(hd.lookup(REPORT, "final[H=4,causal=true].mean"), 1.77691)
        self.assertEqual(hd.lookup(REPORT, "final[H=4,causal=false].text"), "0.039")
        self.assertEqual(hd.lookup(REPORT, "grid.name"), "lm")
        self.assertEqual(hd.lookup(REPORT, "paired[b.H=8,b.G=2].diff"), 0.01)   # a dotted key reaches into b
        with self.assertRaisesRegex(KeyError, r"matches 0 of 2"):
            hd.lookup(REPORT, "paired[b.H=8,b.G=4].diff")

    def test_errors_name_the_segment(self):
        with self.assertRaisesRegex(KeyError, r"trend\.slope: no key 'slope' \(there: n, rho\)"):
            hd.lookup(REPORT, "trend.slope")
        with self.assertRaisesRegex(KeyError, r"matches 2 of 3 elements"):
            hd.lookup(REPORT, "final[H=4].mean")
        with self.assertRaisesRegex(KeyError, r"matches 0 of 3"):
            hd.lookup(REPORT, "final[H=16].mean")
        with self.assertRaisesRegex(KeyError, r"index 3 out of a list of 3"):
            hd.lookup(REPORT, "final[3]")
        with self.assertRaisesRegex(KeyError, r"selects from a list, got dict"):
            hd.lookup(REPORT, "trend[0]")


class Render(unittest.TestCase):
    def test_placeholders_with_and_without_a_format(self):
        t = ("H = 1 reaches {{lm:final[H=1].mean|.3f}} ({{lm:final[H=1].text}}),\n"
             "rho {{ lm:trend.rho | +.2f }} over n = {{lm:trend.n}} runs; no placeholder here.\n")
        self.assertEqual(hd.render(t, {"lm": REPORT}.__getitem__),
                         "H = 1 reaches 1.821 (1.821 [1.818, 1.825] (n=5)),\n"
                         "rho -0.50 over n = 25 runs; no placeholder here.\n")
        self.assertEqual(hd.grids_of(t + "{{translate-fr:x}}"), ["lm", "translate-fr"])

    def test_errors_name_the_template_line(self):
        with self.assertRaisesRegex(KeyError, r"heads-study.md.in:2: \{\{lm:trend.p\}\}"):
            hd.render("ok\n{{lm:trend.p}}\n", {"lm": REPORT}.__getitem__)
        with self.assertRaisesRegex(ValueError, r"names a dict"):
            hd.render("{{lm:trend}}", {"lm": REPORT}.__getitem__)
        with self.assertRaisesRegex(ValueError, r"format '.3f' does not apply to 'lm'"):
            hd.render("{{lm:grid.name|.3f}}", {"lm": REPORT}.__getitem__)

    def test_close_compares_floats_to_a_tolerance_and_nothing_else(self):
        self.assertTrue(hd.close({"a": [1.0, 2]}, {"a": [1.0 + 1e-14, 2]}))
        self.assertFalse(hd.close({"a": [1.0, 2]}, {"a": [1.001, 2]}))
        self.assertFalse(hd.close({"a": 1}, {"a": 1, "b": 2}))
        self.assertFalse(hd.close(True, 1.0))


class Check(unittest.TestCase):
    """A synthetic grid of two H (runs whose held-out loss falls with H and seed)
    rendered into a one-line doc; check passes, then fails when a run's record,
    the committed report or the doc changes."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.study = Path(self.dir.name) / "study"
        out = self.study / "lm"
        self.grid = grids.quick_grid("text.txt")
        grids.frozen_grid(self.grid, out)
        for r in grids.runs_of(self.grid):
            d = out / "runs" / r["id"]
            d.mkdir(parents=True)
            self.log(d / "log.jsonl", r["H"], r["seed"])
        self.template = Path(self.dir.name) / "t.md.in"
        self.template.write_text("H = 2 ends at {{lm:final_loss[H=2,G=2,causal=true].mean|.4f}} (n = "
                                 "{{lm:final_loss[H=2,G=2,causal=true].n}}).\n")
        self.doc = Path(self.dir.name) / "doc.md"
        self.args = type("Args", (), dict(template=str(self.template), doc=str(self.doc), study=str(self.study)))()

    def log(self, path, H, seed, shift=0.0):
        recs = [dict(step=s, eval_loss=3.0 - 0.01 * s * H - 0.001 * seed + shift, elapsed_s=s / 10, train_s=s / 10)
                for s in self.grid.evals()]
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))

    def tearDown(self):
        self.dir.cleanup()

    def test_rendered_data_check_and_staleness_is_found(self):
        hd.cmd_render(self.args)
        self.assertEqual(self.doc.read_text(), "H = 2 ends at 2.3985 (n = 2).\n")   # 3 - 0.6 - mean(0.001, 0.002)
        if HAVE_MATPLOTLIB:   # the figures (Debian's python3-matplotlib; without it render says so and goes on)
            for name in ("quality.png", "time-to-target.png", "curves.png"):
                self.assertEqual((self.study / "lm" / name).read_bytes()[:8], b"\x89PNG\r\n\x1a\n", name)
        self.assertEqual(hd.check(self.template, self.doc, self.study), [])
        self.log(self.study / "lm" / "runs" / "H2-G2-s1" / "log.jsonl", 2, 1, shift=0.01)
        problems = hd.check(self.template, self.doc, self.study)
        self.assertTrue(any("lm-heads.json is not what the committed records give" in p for p in problems), problems)
        self.assertTrue(any("-H = 2 ends at 2.3985" in p and "+H = 2 ends at 2.4035" in p for p in problems),
                        problems)
        hd.cmd_render(self.args)
        self.assertEqual(hd.check(self.template, self.doc, self.study), [])
        self.doc.write_text(self.doc.read_text().replace("2.4035", "2.40"))
        self.assertEqual(len(hd.check(self.template, self.doc, self.study)), 1)


if __name__ == "__main__":
    unittest.main()
