// Statistics for the heads study: a percentile-bootstrap confidence interval
// of a mean, paired differences, and the steps a learning curve takes to
// reach a target. Everything is deterministic: resampling draws from the
// project's Generator with a given seed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attograd::app::heads {

// The mean of n values and a confidence interval [lo, hi] around it.
struct Interval {
  double mean = 0, lo = 0, hi = 0;
  int64_t n = 0;
  bool contains(double v) const { return lo <= v && v <= hi; }
  double width() const { return hi - lo; }
};

// Percentile bootstrap (Efron & Tibshirani 1993, §13.3): `resamples` samples
// of size n drawn with replacement from x (Generator(seed)), their means
// sorted, and the (1 - level)/2 and (1 + level)/2 quantiles (linear
// interpolation between order statistics). With few values (n = 3 seeds) the
// interval is narrower than a t interval: it only sees the spread the sample
// shows. ValueError for an empty sample, a level outside (0, 1) or fewer than
// 2 resamples.
Interval bootstrap_mean(const std::vector<double>& x, uint64_t seed, int64_t resamples = 2000, double level = 0.95);

// b[i] - a[i]: the change from a to b on each pair (the same seed, so the same
// init stream and data order). ValueError when the sizes differ.
std::vector<double> paired_differences(const std::vector<double>& a, const std::vector<double>& b);

// One point of a learning curve: a metric measured after `step` training steps.
struct CurvePoint {
  int64_t step = 0;
  double value = 0;
};

// The first step whose value is at least `target` (points in step order); none
// when the curve never reaches it within its budget.
std::optional<int64_t> steps_to_reach(const std::vector<CurvePoint>& curve, double target);

// "12.3 [11.0, 13.5]" with `digits` decimals.
std::string show_interval(const Interval& i, int digits);

}  // namespace attograd::app::heads
