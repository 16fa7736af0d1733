"""Tests of tools/precision_rule.py, the issue-32 rule for "reaches float32's
quality", on differences small enough to check by hand.

    cd tools && /usr/bin/python3 -m unittest test_precision_rule

ctest runs it as precision_rule_py; without python3-numpy or python3-scipy
(heads_stats needs them) it exits 77, which ctest reports as skipped.
"""
import sys
import unittest

try:
    import numpy  # noqa: F401
    import scipy  # noqa: F401
except ImportError as e:
    print(f"precision_rule_py: skipped: needs Debian's python3-numpy and python3-scipy: {e}", file=sys.stderr)
    sys.exit(77)

import precision_rule as rule  # noqa: E402


class Within(unittest.TestCase):
    def test_one_percent_of_the_reference_or_the_spread_whichever_is_larger(self):
        self.assertTrue(rule.within(0.019, ref=2.0, sd=None))     # 0.95% of 2.0
        self.assertFalse(rule.within(0.021, ref=2.0, sd=None))    # 1.05%
        self.assertTrue(rule.within(0.021, ref=2.0, sd=0.03))     # inside the seed spread
        self.assertFalse(rule.within(0.031, ref=2.0, sd=0.03))

    def test_being_better_is_reaching_the_quality(self):
        self.assertTrue(rule.within(-5.0, ref=2.0, sd=None))


class Judge(unittest.TestCase):
    def test_a_loss_is_judged_at_the_upper_end_of_its_interval(self):
        # Differences 0.01, 0.02, 0.03: mean 0.02, sd 0.01, t_0.975(2) = 4.303, half-width 0.0248.
        ci, on_mean, at_worse_end = rule.judge([0.01, 0.02, 0.03], ref=2.0, sd=0.025)
        self.assertAlmostEqual(ci.mean, 0.02)
        self.assertAlmostEqual(ci.hi, 0.02 + 4.302653 * 0.01 / 3 ** 0.5, places=5)
        self.assertTrue(on_mean)           # 0.02 <= max(0.02, 0.025)
        self.assertFalse(at_worse_end)     # 0.0448 > 0.025

    def test_a_score_is_judged_at_the_lower_end_of_its_interval(self):
        # BLEU falling by 0.5 in every seed; the f32 seeds spread 1.0 BLEU.
        _, on_mean, at_worse_end = rule.judge([-0.5, -0.5, -0.5], ref=0.0, sd=1.0, higher_is_better=True)
        self.assertTrue(on_mean and at_worse_end)
        _, on_mean, _ = rule.judge([-1.5, -1.4, -1.6], ref=0.0, sd=1.0, higher_is_better=True)
        self.assertFalse(on_mean)
        # The same differences as a gain pass.
        _, on_mean, at_worse_end = rule.judge([1.5, 1.4, 1.6], ref=0.0, sd=1.0, higher_is_better=True)
        self.assertTrue(on_mean and at_worse_end)

    def test_one_seed_is_judged_on_its_value(self):
        ci, on_mean, at_worse_end = rule.judge([0.03], ref=2.0, sd=None)
        self.assertIsNone(ci.lo)
        self.assertFalse(on_mean)
        self.assertIsNone(at_worse_end)    # no interval, no verdict at its end
        # A score one seed found higher in bf16 reaches float32's score.
        _, on_mean, _ = rule.judge([1.0], ref=0.0, sd=None, higher_is_better=True)
        self.assertTrue(on_mean)

    def test_a_score_s_worse_end_is_its_lower_end(self):
        # Differences -0.2, 0, +0.2: mean 0, sd 0.2, half-width 4.303 * 0.2 / sqrt(3) = 0.497, so the
        # interval is [-0.497, +0.497] and a score's worse end is its lower end, a loss of 0.497 > 0.3.
        _, on_mean, at_worse_end = rule.judge([-0.2, 0.0, 0.2], ref=0.0, sd=0.3, higher_is_better=True)
        self.assertTrue(on_mean)
        self.assertFalse(at_worse_end)
        _, _, at_worse_end = rule.judge([0.3, 0.5, 0.7], ref=0.0, sd=0.3, higher_is_better=True)
        self.assertTrue(at_worse_end)      # lower end 0.5 - 0.497 > 0: a gain at both ends
        _, _, at_worse_end = rule.judge([0.3, 0.5, 0.7], ref=0.0, sd=0.3)
        self.assertFalse(at_worse_end)     # as a loss, +0.997 at the upper end


if __name__ == "__main__":
    unittest.main()
