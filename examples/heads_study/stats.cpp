#include "examples/heads_study/stats.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/generator.h>

namespace attograd::app::heads {

namespace {

double mean_of(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return s / static_cast<double>(x.size());
}

// The q-quantile of sorted values, interpolating between order statistics.
double quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  if (i + 1 >= sorted.size()) return sorted.back();
  const double f = pos - static_cast<double>(i);
  return sorted[i] + f * (sorted[i + 1] - sorted[i]);
}

}  // namespace

Interval bootstrap_mean(const std::vector<double>& x, uint64_t seed, int64_t resamples, double level) {
  if (x.empty()) fail<ValueError>("bootstrap_mean", "expected at least one value, got an empty sample");
  if (!(level > 0 && level < 1)) fail<ValueError>("bootstrap_mean", "level must be in (0, 1), got {}", level);
  if (resamples < 2) fail<ValueError>("bootstrap_mean", "expected at least 2 resamples, got {}", resamples);
  Interval r;
  r.n = static_cast<int64_t>(x.size());
  r.mean = mean_of(x);
  Generator gen(seed);
  std::vector<double> means(static_cast<size_t>(resamples));
  for (double& m : means) {
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += x[gen.randint(x.size())];
    m = s / static_cast<double>(x.size());
  }
  std::sort(means.begin(), means.end());
  r.lo = quantile(means, (1 - level) / 2);
  r.hi = quantile(means, (1 + level) / 2);
  return r;
}

std::vector<double> paired_differences(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size())
    fail<ValueError>("paired_differences", "expected equal sizes (one value per pair), got {} and {}; hint: pair "
                     "runs by seed and drop seeds that one side lacks", a.size(), b.size());
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = b[i] - a[i];
  return d;
}

std::optional<int64_t> steps_to_reach(const std::vector<CurvePoint>& curve, double target) {
  for (const CurvePoint& p : curve)
    if (p.value >= target) return p.step;
  return std::nullopt;
}

std::string show_interval(const Interval& i, int digits) {
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", i.mean, digits, i.lo, digits, i.hi, digits);
}

}  // namespace attograd::app::heads
