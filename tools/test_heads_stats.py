"""Tests of tools/heads_stats.py against numbers computed by hand (closed forms,
enumerations small enough to do on paper) and against its nulls' calibration.

    cd tools && /usr/bin/python3 -m unittest test_heads_stats

ctest runs it as heads_stats_py; without python3-numpy or python3-scipy it
exits 77, which ctest reports as skipped.
"""
import math
import sys
import unittest

try:
    import numpy as np
    import scipy  # noqa: F401
except ImportError as e:
    print(f"heads_stats_py: skipped: needs Debian's python3-numpy and python3-scipy "
          f"(scripts/setup installs them): {e}", file=sys.stderr)
    sys.exit(77)

import heads_stats as hs  # noqa: E402

# Textbook two-sided 95% Student-t quantiles t_0.975(df).
T975 = {2: 4.302653, 4: 2.776445}


class TInterval(unittest.TestCase):
    def test_five_seeds_use_t_with_four_degrees_of_freedom(self):
        ci = hs.t_interval([1, 2, 3, 4, 5])
        sd = math.sqrt(2.5)                       # squared deviations 4+1+0+1+4 over n−1 = 4
        half = T975[4] * sd / math.sqrt(5)        # 1.96324
        self.assertEqual(ci.n, 5)
        self.assertAlmostEqual(ci.mean, 3.0)
        self.assertAlmostEqual(ci.sd, sd)
        self.assertAlmostEqual(ci.half, half, places=5)
        self.assertAlmostEqual(ci.lo, 3 - half, places=5)
        self.assertAlmostEqual(ci.hi, 3 + half, places=5)

    def test_three_seeds_are_wider_than_their_range_would_say(self):
        # The review's fr H = 1 seeds: a percentile bootstrap gives their range [94.2, 99.6].
        seeds = [97.6, 94.2, 99.6]
        ci = hs.t_interval(seeds)
        sd = math.sqrt(((97.6 - 97.1333333) ** 2 + (94.2 - 97.1333333) ** 2 + (99.6 - 97.1333333) ** 2) / 2)
        self.assertAlmostEqual(ci.half, T975[2] * sd / math.sqrt(3), places=4)
        self.assertLess(ci.lo, min(seeds))
        self.assertGreater(ci.hi, max(seeds))

    def test_conf_changes_the_quantile(self):
        self.assertLess(hs.t_interval([1, 2, 3, 4, 5], conf=0.9).half, hs.t_interval([1, 2, 3, 4, 5]).half)

    def test_one_seed_has_no_interval(self):
        ci = hs.t_interval([97.5])
        self.assertEqual((ci.mean, ci.n), (97.5, 1))
        self.assertIsNone(ci.lo)
        self.assertIsNone(ci.hi)
        self.assertIsNone(ci.sd)
        self.assertIn("no interval", ci.note)

    def test_refuses_nan_and_empty(self):
        with self.assertRaisesRegex(ValueError, "NaN/inf at positions \\[1\\]"):
            hs.t_interval([1.0, float("nan"), 2.0])
        with self.assertRaisesRegex(ValueError, "at least one value"):
            hs.t_interval([])


class FmtCi(unittest.TestCase):
    def test_one_format_with_n(self):
        self.assertEqual(hs.fmt_ci(hs.t_interval([1, 2, 3, 4, 5])), "3.00 [1.04, 4.96] (n=5)")
        self.assertEqual(hs.fmt_ci(97.13, 94.2, 99.6, 3, digits=1), "97.1 [94.2, 99.6] (n=3)")
        self.assertEqual(hs.fmt_ci(hs.t_interval([97.5]), digits=1), "97.5 (n=1, no interval)")

    def test_signed_difference_from_paired(self):
        d = hs.paired({1: 0, 2: 0, 3: 0}, {1: 1, 2: 2, 3: 3})
        self.assertEqual(hs.fmt_ci(d, digits=1, signed=True), f"+2.0 [{2 - T975[2] / math.sqrt(3):+.1f}, "
                                                              f"{2 + T975[2] / math.sqrt(3):+.1f}] (n=3)")

    def test_n_is_required(self):
        with self.assertRaisesRegex(ValueError, "n is part of every number"):
            hs.fmt_ci(1.0, 0.5, 1.5)


class Paired(unittest.TestCase):
    def test_t_test_matches_the_closed_form_for_two_degrees_of_freedom(self):
        # d = 1, 2, 3: mean 2, sd 1, t = 2·√3. With 2 df, P(T > t) = (1 − t/√(t² + 2)) / 2.
        r = hs.paired({1: 10, 2: 20, 3: 30}, {1: 11, 2: 22, 3: 33})
        t = 2 * math.sqrt(3)
        self.assertAlmostEqual(r.p_t, 1 - t / math.sqrt(t * t + 2), places=10)
        self.assertAlmostEqual(r.diff.mean, 2.0)
        self.assertAlmostEqual(r.diff.half, T975[2] / math.sqrt(3), places=5)
        self.assertEqual(r.n, 3)
        # All three positive: the signed-rank test's most extreme outcome, 2 of 2³ sign patterns.
        self.assertAlmostEqual(r.p_wilcoxon, 0.25)
        self.assertAlmostEqual(r.wilcoxon_min_p, 0.25)

    def test_pairs_by_seed_key_not_by_order(self):
        a = {1: 1.0, 2: 5.0, 3: 9.0}
        b = {3: 10.0, 1: 2.0, 2: 6.0}              # every seed +1, listed in another order
        r = hs.paired(a, b)
        self.assertAlmostEqual(r.diff.mean, 1.0)
        self.assertAlmostEqual(r.diff.sd, 0.0)
        self.assertIsNone(r.p_t)                   # sd = 0: no t-test, and it says so
        self.assertIn("t-test is undefined", r.note)
        self.assertEqual(r.seeds, (1, 2, 3))

    def test_wilcoxon_exact_by_enumeration(self):
        # d = 1, −2, 3, 4, 5, 6: ranks 1..6, W+ = 19. W+ ≥ 19 for 3 of 64 sign patterns
        # (negatives {}, {1}, {2}), and as many at the other end: p = 6/64.
        a = {s: 0.0 for s in range(6)}
        r = hs.paired(a, dict(enumerate([1, -2, 3, 4, 5, 6])))
        self.assertAlmostEqual(r.p_wilcoxon, 6 / 64)
        from scipy import stats
        self.assertAlmostEqual(r.p_wilcoxon, stats.wilcoxon([1, -2, 3, 4, 5, 6], method="exact").pvalue)

    def test_wilcoxon_exact_with_ties_and_zeros(self):
        # |d| = 1, 1, 1, 2, 2, 3 (the 0 dropped): midranks 2, 2, 2, 4.5, 4.5, 6, total 21;
        # W+ = 19 with the −1 negative. W+ ≤ 2 when the positive set is empty or one of the three
        # rank-2 values: 4 of 64 sign patterns; W+ ≥ 19 mirrors them: p = 8/64.
        d = [1, 1, -1, 2, 2, 3, 0]
        r = hs.paired({s: 0.0 for s in range(7)}, dict(enumerate(d)))
        self.assertAlmostEqual(r.p_wilcoxon, 8 / 64)
        self.assertAlmostEqual(r.wilcoxon_min_p, 2 / 64)
        self.assertEqual(r.n, 7)

    def test_five_seeds_cannot_reach_wilcoxon_0_05(self):
        r = hs.paired({s: 0.0 for s in range(5)}, {s: 1.0 + s for s in range(5)})
        self.assertAlmostEqual(r.wilcoxon_min_p, 2 / 32)
        self.assertAlmostEqual(r.p_wilcoxon, 2 / 32)

    def test_refuses_unmatched_seeds(self):
        with self.assertRaisesRegex(ValueError, r"seeds \[3\] are only in a and \[4\] only in b"):
            hs.paired({1: 1, 2: 2, 3: 3}, {1: 1, 2: 2, 4: 4})
        with self.assertRaisesRegex(TypeError, "dicts seed -> value"):
            hs.paired([1, 2], [3, 4])

    def test_one_seed_has_no_test(self):
        r = hs.paired({1: 1.0}, {1: 2.0})
        self.assertIsNone(r.p_t)
        self.assertIsNone(r.diff.lo)
        self.assertEqual(r.note, "n = 1: no test")


class Trend(unittest.TestCase):
    def test_monotone_set_is_rho_one_with_exact_p(self):
        # Of the 5! orders of y only the identity and the reversal reach |ρ| = 1.
        r = hs.trend([1, 2, 4, 8, 16], [0.1, 0.2, 0.3, 0.4, 0.5])
        self.assertAlmostEqual(r.rho, 1.0)
        self.assertTrue(r.exact)
        self.assertEqual(r.permutations, 120)
        self.assertAlmostEqual(r.p, 2 / 120)
        r = hs.trend([1, 2, 4, 8, 16, 32], [6, 5, 4, 3, 2, 1])
        self.assertAlmostEqual(r.rho, -1.0)
        self.assertAlmostEqual(r.p, 2 / 720)

    def test_stratified_permutes_only_within_seed(self):
        # Two seeds, H ranks 1..3 in each; y rises with H in both. Pooled ranks of x have ties
        # (centred −2, 0, 2 twice), y's ranks are 1, 3, 5, 2, 4, 6: the dot product is 16, the
        # maximum. Unstratified: 2·2·2 orders of y reach +16 and 8 reach −16, p = 16/720.
        # Within seed: only the identity and both-reversed of the 3!·3! = 36, p = 2/36.
        x = [1, 2, 3, 1, 2, 3]
        y = [1.0, 2.0, 3.0, 1.1, 2.1, 3.1]
        pooled = hs.trend(x, y)
        within = hs.trend(x, y, strata=["s1"] * 3 + ["s2"] * 3)
        self.assertAlmostEqual(pooled.rho, within.rho)
        self.assertAlmostEqual(pooled.p, 16 / 720)
        self.assertEqual((within.permutations, within.strata), (36, 2))
        self.assertAlmostEqual(within.p, 2 / 36)

    def test_rho_with_ties_is_spearmans(self):
        from scipy import stats
        x = [1, 1, 2, 2, 4, 4, 8, 8]
        y = [3.0, 2.5, 2.5, 2.0, 1.0, 1.5, 0.5, 1.5]
        self.assertAlmostEqual(hs.trend(x, y).rho, stats.spearmanr(x, y).correlation)

    def test_monte_carlo_p_never_zero(self):
        r = hs.trend(range(10), range(10), permutations=2000, seed=3)
        self.assertFalse(r.exact)
        self.assertAlmostEqual(r.p, 1 / 2001)

    def test_null_is_calibrated(self):
        # Independent x and y: p below 0.05 about 5% of the time (200 tries: 10 expected, sd 3).
        rng = np.random.default_rng(7)
        x = np.repeat([1, 2, 4, 8, 16], 3)
        ps = [hs.trend(x, rng.random(15), permutations=500, seed=i, strata=np.tile([1, 2, 3], 5)).p
              for i in range(200)]
        self.assertLess(np.mean(np.array(ps) < 0.05), 0.1)
        self.assertAlmostEqual(np.mean(ps), 0.5, delta=0.07)

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "one length"):
            hs.trend([1, 2, 3], [1, 2])
        with self.assertRaisesRegex(ValueError, "constant"):
            hs.trend([1, 2, 3], [5, 5, 5])


class Converged(unittest.TestCase):
    steps = np.arange(0, 3001, 100)

    def test_flattened_decay_passes_and_falling_decay_fails(self):
        flat = 0.1 + np.exp(-self.steps / 300)        # at 3,000 steps e^−10 of the way left
        falling = 0.1 + np.exp(-self.steps / 3000)    # still a third of its drop to go
        self.assertTrue(hs.converged(self.steps, flat).converged)
        r = hs.converged(self.steps, falling)
        self.assertFalse(r.converged)
        # d/ds at s ≈ 2800 is −e^(−2800/3000)/3000 per step: about −0.131 per 1,000 steps.
        self.assertAlmostEqual(r.slope_per_1k, -math.exp(-2800 / 3000) / 3, delta=0.003)

    def test_an_order_of_magnitude_in_the_second_half_fails(self):
        # The review's case: valid loss falls 10x between the middle and the end.
        loss = 0.02 * 10 ** (-self.steps / 1500)
        self.assertFalse(hs.converged(self.steps, loss).converged)

    def test_linear_slope_is_exact_and_relative_to_the_final_loss(self):
        steps = np.arange(0, 1001, 100)
        r = hs.converged(steps, 1.5 - 0.0001 * steps)
        self.assertAlmostEqual(r.slope_per_1k, -0.1)
        self.assertAlmostEqual(r.final_loss, 1.4)
        self.assertAlmostEqual(r.rel_slope_per_1k, -0.1 / 1.4)
        self.assertAlmostEqual(r.slope_se_per_1k, 0.0)

    def test_threshold_boundary(self):
        steps = np.arange(0, 1001, 100)
        final = 2.0
        for rel, expected in ((-0.004, True), (-0.006, False), (+0.01, True)):
            loss = final + rel * final * (steps - 1000) / 1000      # slope rel·final per 1,000 steps
            self.assertEqual(hs.converged(steps, loss).converged, expected, rel)

    def test_only_the_window_counts(self):
        steps = np.arange(0, 1001, 100)
        loss = np.where(steps < 600, 10.0 - steps / 100, 1.0)      # 10 → 5 by step 500, then flat at 1
        self.assertTrue(hs.converged(steps, loss, window=5).converged)
        self.assertFalse(hs.converged(steps, loss, window=6).converged)

    def test_rule_is_stated(self):
        r = hs.converged(self.steps, 0.1 + np.exp(-self.steps / 300))
        self.assertEqual(r.rule, "slope of the last 5 held-out losses > -0.5% of the loss per 1,000 steps")
        self.assertEqual(hs.converged(self.steps, 1 + 0 * self.steps, window=4, threshold=0.01).rule,
                         "slope of the last 4 held-out losses > -1% of the loss per 1,000 steps")

    def test_converged_since_is_the_first_step_the_rule_holds_for_good(self):
        # Falls 1e-3 per step (far steeper than the rule) until step 1,000, flat after: with a
        # 5-point window over evaluations every 100 steps, the fit first sees only flat points
        # (and holds for good) at step 1,400 (1,000 .. 1,400).
        steps = np.arange(100, 3001, 100)
        loss = 2 + np.maximum(0, 1000 - steps) * 1e-3
        self.assertEqual(hs.converged_since(steps, loss, window=5, threshold=0.01), 1400.0)
        # A steady fall of about 4% per 1k steps never holds; a plateau that falls again at the
        # end held earlier, but not for good.
        self.assertIsNone(hs.converged_since(steps, 3 - steps * 1e-4, window=5, threshold=0.01))
        self.assertIsNone(hs.converged_since(steps, 2 - np.maximum(0, steps - 2500) * 1e-3, window=5, threshold=0.01))
        self.assertEqual(hs.converged_since(steps, 1 + 0 * steps, window=5), 500.0)

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "at least window = 5"):
            hs.converged([1, 2, 3], [3, 2, 1])
        with self.assertRaisesRegex(ValueError, "positive final loss"):
            hs.converged(range(5), [4, 3, 2, 1, 0])
        with self.assertRaisesRegex(ValueError, "increasing steps"):
            hs.converged([1, 2, 2, 3, 4], [5, 4, 3, 2, 1])


class TimeToTarget(unittest.TestCase):
    steps = [0, 100, 200, 300]
    seconds = [0.0, 12.0, 22.0, 35.0]

    def test_interpolates_step_and_seconds(self):
        r = hs.time_to_target(self.steps, self.seconds, [0.2, 0.6, 0.9, 0.95], 0.8, higher_is_better=True)
        self.assertTrue(r.reached)
        self.assertAlmostEqual(r.step, 100 + 100 * 2 / 3)       # 0.6 → 0.9 crosses 0.8 two thirds in
        self.assertAlmostEqual(r.seconds, 12 + 10 * 2 / 3)

    def test_lower_is_better(self):
        r = hs.time_to_target(self.steps, self.seconds, [3.0, 2.0, 1.5, 1.2], 1.8, higher_is_better=False)
        self.assertAlmostEqual(r.step, 140.0)                     # 2.0 → 1.5 crosses 1.8 at 0.4
        self.assertAlmostEqual(r.seconds, 16.0)
        self.assertEqual((r.best, r.best_step), (1.2, 300))

    def test_first_crossing_not_the_last(self):
        r = hs.time_to_target(self.steps, self.seconds, [0.2, 0.85, 0.7, 0.95], 0.8, higher_is_better=True)
        self.assertAlmostEqual(r.step, 100 * 0.6 / 0.65)

    def test_edges(self):
        m = [0.2, 0.6, 0.9, 0.95]
        self.assertEqual(hs.time_to_target(self.steps, self.seconds, m, 0.1, True).step, 0)
        self.assertAlmostEqual(hs.time_to_target(self.steps, self.seconds, m, 0.9, True).step, 200)
        nan = hs.time_to_target(self.steps, self.seconds, [0.2, float("nan"), 0.9, 0.95], 0.8, True)
        self.assertEqual(nan.step, 200)                           # no interpolation across a NaN

    def test_not_reached_gives_none_and_the_best(self):
        r = hs.time_to_target(self.steps, self.seconds, [0.2, 0.6, 0.97, 0.95], 0.99, higher_is_better=True)
        self.assertFalse(r.reached)
        self.assertIsNone(r.step)
        self.assertIsNone(r.seconds)
        self.assertEqual((r.best, r.best_step), (0.97, 200))


class Recurrence(unittest.TestCase):
    def test_identical_seeds_recur_fully_beyond_chance(self):
        rng = np.random.default_rng(11)
        m = rng.random((8, 9))
        r = hs.recurrence_baseline({1: m, 2: m.copy(), 3: m.copy()}, permutations=999, seed=1)
        self.assertEqual(r.observed, 9)
        self.assertEqual(r.per_seed, {2: 9, 3: 9})
        self.assertEqual(r.random_p, 1 / 1000)
        self.assertEqual(r.shuffle_p, 1 / 1000)
        self.assertTrue(np.array_equal(r.matchings[2], np.arange(8)))

    def test_relabelled_heads_still_recur(self):
        # Seed 2 is seed 1 with its heads relabelled within each layer: the matching undoes it.
        rng = np.random.default_rng(12)
        m = rng.random((8, 6))
        perm = np.array([2, 0, 3, 1, 5, 7, 4, 6])                   # within heads 0-3 and 4-7
        r = hs.recurrence_baseline([m, m[perm]], groups=[0] * 4 + [1] * 4, permutations=200)
        self.assertEqual(r.observed, 6)
        self.assertTrue(np.array_equal(r.matchings[1], np.argsort(perm)))

    def test_matching_stays_within_groups(self):
        rng = np.random.default_rng(13)
        m = rng.random((8, 6))
        swapped = m[[4, 1, 2, 3, 0, 5, 6, 7]]                       # heads 0 and 4 cross layers
        groups = np.array([0] * 4 + [1] * 4)
        r = hs.recurrence_baseline([m, swapped], groups=groups, permutations=50)
        self.assertTrue(np.array_equal(groups[r.matchings[1]], groups))
        free = hs.recurrence_baseline([m, swapped], permutations=50)
        self.assertEqual(free.matchings[1][0], 4)                    # unconstrained, it crosses

    def test_random_matching_chance_mean_is_roles_over_heads(self):
        # One other seed, no groups: each role recurs under a random matching with probability 1/H.
        rng = np.random.default_rng(14)
        r = hs.recurrence_baseline([rng.random((8, 9)), rng.random((8, 9))], permutations=4000, seed=2)
        self.assertAlmostEqual(r.random_mean, 9 / 8, delta=0.06)

    def test_independent_seeds_are_not_significant_under_shuffled_roles(self):
        # Seeds that share nothing: the shuffled-roles p is uniform. The random-matching
        # null is not: optimal matching alone lifts the count above it (the docstring's caveat).
        rng = np.random.default_rng(15)
        shuffle_p, observed, random_mean = [], [], []
        for i in range(100):
            r = hs.recurrence_baseline([rng.random((8, 9)), rng.random((8, 9))], permutations=199, seed=i)
            shuffle_p.append(r.shuffle_p)
            observed.append(r.observed)
            random_mean.append(r.random_mean)
        self.assertLess(np.mean(np.array(shuffle_p) <= 0.05), 0.12)
        self.assertAlmostEqual(np.mean(shuffle_p), 0.55, delta=0.1)    # discrete counts: a little above 0.5
        self.assertGreater(np.mean(observed), 1.5 * np.mean(random_mean))

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "at least 2 seeds"):
            hs.recurrence_baseline([np.eye(3)])
        with self.assertRaisesRegex(ValueError, r"got \(3, 2\) for seed 2"):
            hs.recurrence_baseline({1: np.eye(3), 2: np.ones((3, 2))})


class Holm(unittest.TestCase):
    def test_hand_computed_family(self):
        # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 → running max.
        self.assertEqual([round(p, 10) for p in hs.holm([0.01, 0.04, 0.03, 0.005])], [0.03, 0.06, 0.06, 0.02])

    def test_capped_and_keeps_names(self):
        self.assertEqual(hs.holm([0.5, 0.6]), [1.0, 1.0])
        out = hs.holm({"1→2": 0.01, "2→8": 0.02})
        self.assertEqual(list(out), ["1→2", "2→8"])
        self.assertAlmostEqual(out["1→2"], 0.02)
        self.assertAlmostEqual(out["2→8"], 0.02)

    def test_between_raw_and_bonferroni(self):
        p = np.random.default_rng(5).random(7) / 10
        adj = np.array(hs.holm(p))
        self.assertTrue(np.all(adj >= p))
        self.assertTrue(np.all(adj <= np.minimum(1, 7 * p) + 1e-15))

    def test_refuses_out_of_range(self):
        with self.assertRaisesRegex(ValueError, r"in \[0, 1\]"):
            hs.holm([0.1, 1.2])


if __name__ == "__main__":
    unittest.main()
