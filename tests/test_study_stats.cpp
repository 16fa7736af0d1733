// The heads study's statistics (examples/heads_study/stats.h): bootstrap
// intervals of a mean, paired differences and steps to reach a target.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include <attograd/autograd/error.h>
#include <attograd/autograd/generator.h>
#include "examples/heads_study/stats.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::app::heads;
using attograd::testing::expect_error;

namespace {

std::vector<double> normal_sample(size_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> x(n);
  for (double& v : x) v = 10 + 2 * gen.normal();
  return x;
}

}  // namespace

TEST(HeadsStats, ConstantSampleHasAZeroWidthInterval) {
  const Interval i = bootstrap_mean({4.5, 4.5, 4.5, 4.5}, 1);
  EXPECT_EQ(i.n, 4);
  EXPECT_DOUBLE_EQ(i.mean, 4.5);
  EXPECT_DOUBLE_EQ(i.lo, 4.5);
  EXPECT_DOUBLE_EQ(i.hi, 4.5);
  EXPECT_DOUBLE_EQ(i.width(), 0);
}

TEST(HeadsStats, IntervalContainsTheMeanAndShrinksWithN) {
  const Interval small = bootstrap_mean(normal_sample(10, 3), 7);
  const Interval large = bootstrap_mean(normal_sample(1000, 3), 7);
  for (const Interval& i : {small, large}) {
    EXPECT_TRUE(i.contains(i.mean)) << show_interval(i, 3);
    EXPECT_LT(i.lo, i.hi);
  }
  EXPECT_LT(large.width(), small.width() / 4);  // about sqrt(100) = 10 times narrower
  // For n = 1000 draws of N(10, 2²) the 95% interval is about ±1.96·2/√1000 = ±0.124.
  EXPECT_NEAR(large.width(), 2 * 1.96 * 2 / std::sqrt(1000.0), 0.05);
  EXPECT_TRUE(large.contains(10.0)) << show_interval(large, 3);
}

TEST(HeadsStats, ReproducibleWithASeed) {
  const std::vector<double> x = {1, 5, 2, 8, 3};
  const Interval a = bootstrap_mean(x, 11), b = bootstrap_mean(x, 11), c = bootstrap_mean(x, 12);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_TRUE(a.lo != c.lo || a.hi != c.hi);  // another seed resamples differently
  // The percentile interval of a mean stays inside the sample's range.
  EXPECT_GE(a.lo, 1);
  EXPECT_LE(a.hi, 8);
}

TEST(HeadsStats, BadArguments) {
  expect_error<ValueError>([] { bootstrap_mean({}, 1); }, {"bootstrap_mean", "empty sample"});
  expect_error<ValueError>([] { bootstrap_mean({1, 2}, 1, 2000, 1.5); }, {"level must be in (0, 1)", "1.5"});
  expect_error<ValueError>([] { bootstrap_mean({1, 2}, 1, 1); }, {"at least 2 resamples", "got 1"});
  expect_error<ValueError>([] { paired_differences({1, 2}, {1}); }, {"paired_differences", "got 2 and 1"});
}

TEST(HeadsStats, PairedDifferences) {
  EXPECT_EQ(paired_differences({1, 2, 3}, {2, 2, 5}), (std::vector<double>{1, 0, 2}));
  // Pairing removes the shared seed effect: a constant gain gives a zero-width interval.
  const Interval d = bootstrap_mean(paired_differences({10, 50, 90}, {12, 52, 92}), 5);
  EXPECT_DOUBLE_EQ(d.mean, 2);
  EXPECT_DOUBLE_EQ(d.width(), 0);
}

TEST(HeadsStats, StepsToReachATarget) {
  const std::vector<CurvePoint> curve = {{50, 0.4}, {100, 0.85}, {150, 0.92}, {200, 0.88}, {250, 0.995}};
  EXPECT_EQ(steps_to_reach(curve, 0.9), std::optional<int64_t>(150));  // the first crossing, not the last
  EXPECT_EQ(steps_to_reach(curve, 0.99), std::optional<int64_t>(250));
  EXPECT_EQ(steps_to_reach(curve, 0.4), std::optional<int64_t>(50));
  EXPECT_EQ(steps_to_reach(curve, 0.999), std::nullopt);  // never within the budget
  EXPECT_EQ(steps_to_reach({}, 0.5), std::nullopt);
}
