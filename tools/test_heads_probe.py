"""Tests of tools/heads_probe.py (the heads study's reading of head_probe's
JSON): pruning deltas, the share of heads prunable, role labels, and the
analysis over synthetic probes of a grid (orders compared paired by run,
roles counted, recurrence against chance).

    cd tools && /usr/bin/python3 -m unittest test_heads_probe

ctest runs it as heads_probe_py (exit 77 without numpy/scipy); heads_study_quick
runs head_probe itself on the quick grid.
"""
import contextlib
import io
import json
import sys
import tempfile
import unittest
from pathlib import Path

try:
    import numpy as np
    import scipy  # noqa: F401
except ImportError as e:
    print(f"heads_probe_py: skipped: needs Debian's python3-numpy and python3-scipy: {e}", file=sys.stderr)
    sys.exit(77)

import heads_gqa  # noqa: E402
import heads_grids as grids  # noqa: E402
import heads_probe as hp  # noqa: E402

FRACTIONS = [i / 10 for i in range(11)]


def fake_probe(H, layers, seed, roles, base=2.0):
    """A probe of a model with layers x H heads. roles[i]: the role (a ROLES name)
    head i (layer-major) does, or None for a mixed head. Pruning losses: raw
    importance removes harmless heads first (loss grows late); random grows
    linearly; normalised importance and ablation in between."""
    N = layers * H
    heads = []
    for i in range(N):
        score = dict(previous_token=0.1, self=0.1, next_token=0.0, first_position=0.1, offset=2, offset_mass=0.1,
                     induction=0.05, induction_chance=0.05, max_weight=0.3, entropy=0.5, uniform_entropy=1.0)
        r = roles[i]
        if r == "induction":
            score["induction"] = 0.05 + 0.7
        elif r == "focus":
            score["max_weight"] = 0.9
        elif r == "breadth":
            score["entropy"] = 0.9
        elif r == "offset":
            score.update(offset=3, offset_mass=0.8)
        elif r is not None:
            score[r] = 0.8
        heads.append(dict(layer=i // H, head=i % H, importance=float(i + 1), importance_normalized=float(N - i),
                          ablation_delta=float(i + 1) * 0.01, **score))
    ks = hp.removed_counts(FRACTIONS, N)
    late = [base + 0.5 * (k / N) ** 3 for k in ks]
    linear = [base + 0.5 * k / N for k in ks]
    worse = [base + 0.5 * (k / N) ** 2 for k in ks]
    orders = [dict(name="importance", loss=late), dict(name="importance_normalized", loss=worse),
              dict(name="ablation", loss=worse), dict(name="random-1", loss=linear), dict(name="random-2", loss=linear)]
    return dict(checkpoint=f"H{H}-s{seed}", baseline_loss=base, heads=heads,
                pruning=dict(fractions=FRACTIONS, heads=N, removed=ks, orders=orders))


def fake_translate_probe(H, seed, base=1.0):
    """One layer of each attention kind with H heads: head 0 of the decoder self
    attends to the previous token, head 0 of the cross to the diagonal; pruning
    one kind alone costs 0.1 (encoder), 0.2 (decoder self), 0.4 (cross) at f = 1."""
    heads = []
    for kind in ("encoder_self", "decoder_self", "decoder_cross"):
        for h in range(H):
            x = dict(type=kind, layer=0, head=h, previous_token=0.1, self=0.1, next_token=0.1, first_position=0.1,
                     offset=2, offset_mass=0.1, max_weight=0.3, entropy=0.5, uniform_entropy=1.0,
                     importance=1.0 + h, importance_normalized=1.0, ablation_delta=0.01 * (h + 1))
            if kind == "decoder_self":
                x.update(induction=0.05, induction_chance=0.05, previous_token=0.9 if h == 0 else 0.1)
            if kind == "decoder_cross":
                x.update(diagonal=0.8 if h == 0 else 0.1, last_source=0.1)
            heads.append(x)

    def block(n, cost):
        ks = hp.removed_counts(FRACTIONS, n)
        loss = [base + cost * k / n for k in ks]
        return dict(fractions=FRACTIONS, heads=n, removed=ks,
                    orders=[dict(name=o, loss=loss) for o in ("importance", "importance_normalized", "ablation",
                                                              "random-1")])
    by_type = {"encoder_self": block(H, 0.1), "decoder_self": block(H, 0.2), "decoder_cross": block(H, 0.4)}
    return dict(checkpoint=f"t-{seed}", baseline_loss=base, heads=heads, types=list(by_type),
                pruning={"global": block(3 * H, 0.7), "by_type": by_type})


class Reading(unittest.TestCase):
    def test_deltas_subtract_the_baseline_and_average_random_orders(self):
        p = fake_probe(2, 2, 1, ["previous_token", "self", None, "induction"])
        p["pruning"]["orders"][4]["loss"] = [x + 0.2 for x in p["pruning"]["orders"][4]["loss"]]
        d = hp.pruning_deltas(p["pruning"], p["baseline_loss"])
        self.assertEqual(d["importance"][0], 0.0)
        self.assertAlmostEqual(d["random"][-1], 0.5 + 0.1)   # the mean of the two random orders
        del p["pruning"]["orders"][2]
        with self.assertRaisesRegex(ValueError, "ablation"):
            hp.pruning_deltas(p["pruning"], p["baseline_loss"])

    def test_removed_counts_round_halves_up_as_cpp_does(self):
        self.assertEqual(hp.removed_counts([0.0, 0.25, 0.5, 1.0], 2), [0, 1, 1, 2])
        self.assertEqual(hp.removed_counts(FRACTIONS, 10), list(range(11)))

    def test_prunable_stops_at_the_first_fraction_over_one_percent(self):
        base = 2.0
        delta = [0, 0.001, 0.019, 0.03, 0.0, 0.5]   # the dip at the fifth point does not count
        fr = [0, 0.2, 0.4, 0.6, 0.8, 1.0]
        self.assertAlmostEqual(hp._prunable(fr, delta, base, 10), 0.4)
        self.assertEqual(hp._prunable(fr, [0.05] * 6, base, 10), 0.0)

    def test_a_head_is_labelled_by_the_first_role_reaching_its_level(self):
        def label(**kw):
            h = dict(previous_token=0.1, self=0.1, next_token=0.0, first_position=0.1, offset=2, offset_mass=0.1,
                     induction=0.05, induction_chance=0.05, max_weight=0.3, entropy=0.5, uniform_entropy=1.0)
            h.update(kw)
            return hp.role_of(hp.role_scores(h))
        self.assertEqual(label(previous_token=0.6, max_weight=0.6), "previous_token")   # before "focus"
        self.assertEqual(label(next_token=0.9, max_weight=0.9), "next_token")   # the no-mask control's reading ahead
        self.assertEqual(label(induction=0.4), "induction")          # 0.35 above its chance of 0.05
        self.assertEqual(label(induction=0.3), "mixed")              # 0.25 above chance: under the level
        self.assertEqual(label(offset_mass=0.7, max_weight=0.7), "offset")   # a head two back, before "focus"
        # A probe older than the offsets: an earlier role still names the head, else it is unknown.
        self.assertEqual(label(previous_token=0.6, offset_mass=None), "previous_token")
        self.assertEqual(label(max_weight=0.9, offset_mass=None), "unknown")
        self.assertEqual(label(max_weight=0.9), "focus")
        self.assertEqual(label(entropy=0.8), "breadth")
        self.assertEqual(label(entropy=0.8, uniform_entropy=0.0), "mixed")   # one key seen: no breadth
        self.assertEqual(label(), "mixed")

    def test_the_role_matrix_scores_induction_above_its_chance(self):
        m, layers = hp.role_matrix(fake_probe(2, 2, 1, ["induction", None, "previous_token", "self"]))
        self.assertEqual(m.shape, (4, len(hp.ROLES)))
        self.assertAlmostEqual(m[0, hp.ROLES.index("induction")], 0.7)
        self.assertAlmostEqual(m[1, hp.ROLES.index("induction")], 0.0)
        self.assertAlmostEqual(m[1, hp.ROLES.index("breadth")], 0.5)
        self.assertEqual(layers.tolist(), [0, 0, 1, 1])


class Analysis(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.out = Path(self.dir.name)
        self.grid = grids.lm_grid(seeds=4)
        for r in grids.runs_of(self.grid):
            if r["G"] != r["H"] or not r["causal"] or r["H"] > 4:
                continue
            d = self.out / "runs" / r["id"]
            d.mkdir(parents=True)
            # Every seed: layer 0's head 0 previous-token, layer 1's head 0 induction; the rest mixed.
            H = r["H"]
            roles = ["previous_token"] + [None] * (H - 1) + ["induction"] + [None] * (H - 1)
            (d / "probe.json").write_text(json.dumps(fake_probe(H, 2, r["seed"], roles)))

    def tearDown(self):
        self.dir.cleanup()

    def test_orders_are_compared_paired_by_run_and_missing_runs_listed(self):
        res = hp.analyse_probes(self.grid, self.out)
        self.assertEqual([row["H"] for row in res["per_H"]], [1, 2, 4])
        self.assertIn("H8-G8-s1", res["missing"])
        comp = {c["order"]: c for c in res["orders"]["all"]["comparisons"]}
        self.assertEqual(comp["random"]["n"], 8)          # H = 2 and 4, four seeds each (H = 1 ties)
        self.assertGreater(comp["random"]["diff"]["mean"], 0)
        self.assertGreater(comp["importance_normalized"]["diff"]["mean"], 0)
        self.assertEqual(comp["random"]["p_holm"], max(comp["random"]["p_holm"], comp["random"]["p_t"]))
        row4 = res["per_H"][2]
        # The curve of raw importance: 0.5 (k/N)^3 < 1% of 2.0 up to k/N = 0.3 (0.0135 < 0.02 at 0.3; 0.032 at 0.4).
        # N = 8: k = 2 at f = 0.2 and 0.3
        self.assertAlmostEqual(row4["scopes"]["all"]["prunable"]["importance"]["mean"], 0.25)
        self.assertEqual(row4["roles"]["lm"]["previous_token"]["mean"], 1)
        self.assertEqual(row4["roles"]["lm"]["mixed"]["mean"], 6)
        # Both roles sit on the same matched heads in every seed: they recur; the
        # roles no head holds are not counted.
        self.assertEqual(row4["recurrence"]["lm"]["held"], ["previous_token", "induction"])
        self.assertEqual(row4["recurrence"]["lm"]["observed"], 2)
        # The fake's ablation grows with the head's index: the last head (layer 1, mixed) costs most in every run.
        self.assertEqual(row4["costliest"]["heads"], [dict(kind="lm", layer=1, role="mixed", runs=4)])
        self.assertAlmostEqual(row4["costliest"]["delta"]["mean"], 0.08)
        self.assertAlmostEqual(row4["ablation_by_kind"]["lm"]["mean"], sum(0.01 * (i + 1) for i in range(8)))
        self.assertIn("## Pruning", hp.markdown(res))

    def test_probes_without_offsets_leave_the_role_statistics_and_offsets_are_counted(self):
        # H = 4: every seed's layer 0 head 1 reads three back; seed 1's probe predates the offsets.
        for seed in range(1, 5):
            roles = ["previous_token", "offset", None, None, "induction", None, None, None]
            p = fake_probe(4, 2, seed, roles)
            if seed == 1:
                for h in p["heads"]:
                    del h["offset"], h["offset_mass"]
            (self.out / "runs" / f"H4-G4-s{seed}" / "probe.json").write_text(json.dumps(p))
        row4 = hp.analyse_probes(self.grid, self.out)["per_H"][2]
        self.assertEqual(row4["n"], 4)                      # pruning keeps every seed
        self.assertEqual(row4["roles"]["lm"]["offset"]["n"], 3)
        self.assertEqual(row4["roles"]["lm"]["offset"]["mean"], 1)
        self.assertEqual(row4["offsets"]["lm"], {"3": 3})
        self.assertEqual(row4["recurrence"]["lm"]["seeds"], 3)
        self.assertIn("k = 3 (3)", hp.markdown(hp.analyse_probes(self.grid, self.out)))

    def test_a_translate_probe_is_read_per_attention_kind(self):
        grid = grids.translate_grid("fr", seeds=2)
        with tempfile.TemporaryDirectory() as out:
            for r in grids.runs_of(grid):
                d = Path(out) / "runs" / r["id"]
                d.mkdir(parents=True)
                (d / "probe.json").write_text(json.dumps(fake_translate_probe(r["H"], r["seed"])))
            res = hp.analyse_probes(grid, out)
        self.assertEqual(res["scopes"], ["all", "encoder_self", "decoder_self", "decoder_cross"])
        self.assertEqual(res["kinds"], ["encoder_self", "decoder_self", "decoder_cross"])
        row = res["per_H"][0]
        self.assertEqual(row["scopes"]["decoder_self"]["heads"], 8)
        self.assertEqual(row["scopes"]["all"]["heads"], 24)
        # Pruning the cross-attention alone hurts most in the fake: its curve is the steepest.
        self.assertGreater(row["scopes"]["decoder_cross"]["curves"]["importance"][-1]["mean"],
                           row["scopes"]["encoder_self"]["curves"]["importance"][-1]["mean"])
        self.assertEqual(row["roles"]["decoder_cross"]["diagonal"]["mean"], 1)
        self.assertEqual(row["roles"]["decoder_self"]["previous_token"]["mean"], 1)
        self.assertNotIn("induction", row["roles"]["encoder_self"])   # encoder heads have no induction score
        md = hp.markdown(res)
        self.assertIn("### Cross-attention", md)
        self.assertIn("| 8 | cross-attention (8) | raw importance |", md)

    def test_no_probes_is_said_not_failed(self):
        empty = tempfile.TemporaryDirectory()
        self.assertIsNone(hp.analyse_probes(self.grid, empty.name))
        self.assertIn("No probes yet", hp.markdown(None))
        empty.cleanup()


class NoMask(unittest.TestCase):
    """The no-mask control's reading: its loss beside the masked run of its seed,
    the heads on the next position, the samples; a run without a probe is named."""

    def test_the_control_beside_its_masked_twin(self):
        grid = grids.quick_grid("text.txt")   # the control: H = 2, seed 1, one layer
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            ids = {r["id"]: r for r in grids.runs_of(grid)}
            control, twin = "H2-G2-nocausal-s1", "H2-G2-s1"
            self.assertIn(control, ids)
            self.assertTrue(hp.wants_sample(grid, ids[twin]) and not hp.wants_sample(grid, ids["H2-G2-s2"]))
            self.assertIsNone(hp.analyse_no_mask(grids.quick_translate_grid(), out))
            for rid in (control, twin):
                (out / "runs" / rid).mkdir(parents=True)
            self.assertEqual(hp.analyse_no_mask(grid, out)["missing"], [control])
            probe = fake_probe(2, 1, 1, ["previous_token", "next_token"])
            probe["heads"][1]["ablation_delta"] = 1.5
            hp.probe_path(out, control).write_text(json.dumps(probe))
            hp.heldout_path(out, control).write_text(json.dumps(dict(loss=0.25, tokens=100)))
            hp.heldout_path(out, twin).write_text(json.dumps(dict(loss=1.75, tokens=100)))
            hp.sample_path(out, control).write_text("The zzzz\n")
            res = hp.analyse_no_mask(grid, out)
            self.assertEqual(res["missing"], [])
            (r,) = res["runs"]
            self.assertEqual((r["twin"], r["loss"], r["twin_loss"]), (twin, 0.25, 1.75))
            self.assertEqual(r["next_token_heads"], 1)
            self.assertEqual((r["reader"]["layer"], r["reader"]["head"], r["reader"]["role"]), (0, 1, "next token"))
            self.assertEqual(r["reader"]["ablation_delta"], 1.5)
            self.assertEqual((r["sample"], r["twin_sample"]), ("The zzzz", None))
            md = hp.no_mask_markdown(res)
            self.assertIn("| H2-G2-nocausal-s1 | 0.2500 | 1.7500 | 1 of 2 | 0.800 (L0 H1) | +1.5000 |", md)
            self.assertIn("```text\nThe zzzz\n```", md)
            self.assertNotIn(f"Greedy sample of {twin}", md)


class FreshCheckout(unittest.TestCase):
    """A clone holds the committed records of complete runs but no checkpoints:
    probe and gqa keep what is there and say what they cannot make."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name)
        self.grid = grids.quick_grid("text.txt")
        for r in grids.runs_of(self.grid):
            d = self.out / "runs" / r["id"]
            d.mkdir(parents=True)
            (d / "log.jsonl").write_text("".join(json.dumps(dict(step=s, eval_loss=2.0)) + "\n"
                                                 for s in self.grid.evals()))
        self.args = type("Args", (), dict(out=str(self.out), jobs=1, lm="/nonexistent/lm",
                                         head_probe="/nonexistent/head_probe"))()

    def tearDown(self):
        self.tmp.cleanup()

    def test_probe_keeps_the_committed_results_and_names_the_missing(self):
        first, *rest = grids.runs_of(self.grid)
        for r in rest:
            hp.probe_path(self.out, r["id"]).write_text("{}")
            hp.heldout_path(self.out, r["id"]).write_text("{}")
            if hp.wants_sample(self.grid, r):
                hp.sample_path(self.out, r["id"]).write_text("The end")
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            hp.cmd_probe(self.args, self.grid)   # would fail starting /nonexistent programs
        self.assertIn(f"{first['id']}: no checkpoint to probe, so probe.json and heldout.json cannot be made",
                      said.getvalue())
        self.assertIn("probe: 0 jobs", said.getvalue())
        self.assertEqual(sum(f"{r['id']}:" in said.getvalue() for r in rest), 0)

    def test_gqa_skips_a_seed_whose_source_has_no_checkpoint(self):
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            heads_gqa.cmd_gqa(self.args, self.grid)
        self.assertIn("has no checkpoint", said.getvalue())
        self.assertIn("gqa: 0 uptrainings ran", said.getvalue())


if __name__ == "__main__":
    unittest.main()
