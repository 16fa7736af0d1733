// Learning-rate schedules: values at chosen steps against the formulas (and a
// few literal numbers), the Noam peak, driving an optimizer, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <attograd/optim/optim.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

TEST(Schedule, Constant) {
  optim::Constant s(0.3);
  for (int64_t t : {1, 2, 1000, 1000000}) EXPECT_EQ(s.lr_at(t), 0.3);
}

TEST(Schedule, LinearWarmup) {
  optim::LinearWarmup s(0.4, 10);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.04);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.2);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 0.36);
  EXPECT_EQ(s.lr_at(10), 0.4);
  EXPECT_EQ(s.lr_at(11), 0.4);
  EXPECT_EQ(s.lr_at(100000), 0.4);
  for (int64_t t = 1; t < 10; ++t) EXPECT_LT(s.lr_at(t), s.lr_at(t + 1));
  EXPECT_EQ(optim::LinearWarmup(0.4, 0).lr_at(1), 0.4);
}

TEST(Schedule, NoamFormulaAndPeak) {
  const int64_t d_model = 512, warmup = 4000;
  optim::Noam s(d_model, warmup);
  auto formula = [&](double factor, double t) {
    return factor / std::sqrt(static_cast<double>(d_model)) *
           std::min(1.0 / std::sqrt(t), t / std::pow(static_cast<double>(warmup), 1.5));
  };
  for (int64_t t : {1, 2, 100, 3999, 4000, 4001, 10000, 100000})
    EXPECT_NEAR(s.lr_at(t), formula(1.0, static_cast<double>(t)), 1e-18) << t;
  // Literal values (computed independently in Python).
  EXPECT_NEAR(s.lr_at(1), 1.746928107421711e-07, 1e-20);
  EXPECT_NEAR(s.lr_at(4000), 0.0006987712429686843, 1e-18);
  // The peak is at step == warmup: factor * (d_model * warmup)^-0.5.
  EXPECT_NEAR(s.lr_at(warmup), 1.0 / std::sqrt(512.0 * 4000.0), 1e-18);
  for (int64_t t = 1; t <= 3 * warmup; ++t) EXPECT_LE(s.lr_at(t), s.lr_at(warmup)) << t;
  EXPECT_LT(s.lr_at(warmup - 1), s.lr_at(warmup));
  EXPECT_LT(s.lr_at(warmup + 1), s.lr_at(warmup));
  // Linear before the peak, t^-0.5 after it.
  EXPECT_NEAR(s.lr_at(2000) * 2, s.lr_at(4000), 1e-18);
  EXPECT_NEAR(s.lr_at(16000) * 2, s.lr_at(4000), 1e-18);
  // factor scales everything.
  optim::Noam f2(d_model, warmup, 2.0);
  EXPECT_NEAR(f2.lr_at(16000), 0.0006987712429686843, 1e-18);
  EXPECT_NEAR(f2.lr_at(123), 2 * s.lr_at(123), 1e-18);
}

TEST(Schedule, InverseSqrtPeaksAtLrThenDecaysAsRootOfStep) {
  optim::InverseSqrt s(5e-4, 400);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 5e-4 / 400);
  EXPECT_DOUBLE_EQ(s.lr_at(200), 2.5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(400), 5e-4);  // the peak is --lr itself
  EXPECT_DOUBLE_EQ(s.lr_at(1600), 2.5e-4);  // four times the warmup: half the peak
  EXPECT_NEAR(s.lr_at(6400), 1.25e-4, 1e-18);
  for (int64_t t = 1; t < 400; ++t) EXPECT_LT(s.lr_at(t), s.lr_at(t + 1)) << t;
  for (int64_t t = 400; t < 2000; ++t) EXPECT_GT(s.lr_at(t), s.lr_at(t + 1)) << t;
  // Past the warmup it is Noam's decay with its peak scaled to --lr.
  optim::Noam noam(512, 400);
  EXPECT_NEAR(s.lr_at(3000) / noam.lr_at(3000), 5e-4 / noam.lr_at(400), 1e-9);
  expect_error<ValueError>([] { optim::InverseSqrt(1e-3, 0); }, {"InverseSqrt", "warmup_steps >= 1"});
}

TEST(Schedule, WarmupCosine) {
  const double peak = 1.0, floor = 0.1;
  optim::WarmupCosine s(peak, 10, 110, floor);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.5);
  EXPECT_EQ(s.lr_at(10), peak);
  EXPECT_DOUBLE_EQ(s.lr_at(60), (peak + floor) / 2);  // half way through the decay
  EXPECT_DOUBLE_EQ(s.lr_at(35), floor + (peak - floor) * 0.5 * (1 + std::cos(std::numbers::pi / 4)));
  EXPECT_DOUBLE_EQ(s.lr_at(85), floor + (peak - floor) * 0.5 * (1 + std::cos(3 * std::numbers::pi / 4)));
  EXPECT_EQ(s.lr_at(110), floor);
  EXPECT_EQ(s.lr_at(1000), floor);
  for (int64_t t = 10; t < 110; ++t) EXPECT_GT(s.lr_at(t), s.lr_at(t + 1)) << t;
  // No warmup: starts at the peak's cosine value.
  optim::WarmupCosine nw(2.0, 0, 4);
  EXPECT_DOUBLE_EQ(nw.lr_at(2), 1.0);
  EXPECT_EQ(nw.lr_at(4), 0.0);
}

TEST(Schedule, StepDecay) {
  optim::StepDecay s(0.1, 3, 0.5);
  for (int64_t t : {1, 2, 3}) EXPECT_EQ(s.lr_at(t), 0.1);
  for (int64_t t : {4, 5, 6}) EXPECT_DOUBLE_EQ(s.lr_at(t), 0.05);
  EXPECT_DOUBLE_EQ(s.lr_at(7), 0.025);
  EXPECT_DOUBLE_EQ(s.lr_at(31), 0.1 * std::pow(0.5, 10));
  EXPECT_DOUBLE_EQ(optim::StepDecay(1.0, 10).lr_at(11), 0.1);  // default gamma
}

TEST(Schedule, StepSetsTheLrOnEveryGroup) {
  Tensor a = Tensor::zeros({2}, DType::f64).requires_grad_();
  Tensor b = Tensor::zeros({1}, DType::f64).requires_grad_();
  optim::SGD opt(std::vector<optim::ParamGroup>{{{a}, 0.7, std::nullopt}, {{b}, std::nullopt, std::nullopt}}, {.lr = 0.9});
  optim::LinearWarmup s(0.4, 4);
  EXPECT_EQ(s.last_step(), 0);
  EXPECT_DOUBLE_EQ(s.step(opt), 0.1);
  EXPECT_EQ(s.last_step(), 1);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  EXPECT_DOUBLE_EQ(opt.param_groups()[1].lr, 0.1);
  s.step(opt);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.2);
  // The lr drives the update: p -= lr * g.
  b.set_grad(Tensor::ones({1}, DType::f64));
  s.step(opt);
  opt.step();
  EXPECT_NEAR(b.item(), -0.3, 1e-15);
  // Resuming: set the step the saved run had reached.
  optim::LinearWarmup resumed(0.4, 4);
  resumed.set_last_step(2);
  EXPECT_DOUBLE_EQ(resumed.step(opt), 0.3);
  EXPECT_EQ(resumed.last_step(), 3);
}

TEST(Schedule, Errors) {
  expect_error<ValueError>([] { optim::Noam(512, 4000).lr_at(0); }, {"Noam", "steps count from 1", "got 0"});
  expect_error<ValueError>([] { optim::Constant(0.1).lr_at(-2); }, {"Constant", "got -2"});
  expect_error<ValueError>([] { optim::LinearWarmup(0.1, 5).lr_at(0); }, {"LinearWarmup"});
  expect_error<ValueError>([] { optim::Noam(0, 10); }, {"Noam", "d_model"});
  expect_error<ValueError>([] { optim::Noam(16, 0); }, {"Noam", "warmup_steps >= 1"});
  expect_error<ValueError>([] { optim::Noam(16, 10, -1.0); }, {"Noam", "factor"});
  expect_error<ValueError>([] { optim::Constant(-0.1); }, {"Constant", "lr >= 0"});
  expect_error<ValueError>([] { optim::LinearWarmup(0.1, -1); }, {"LinearWarmup", "warmup_steps"});
  expect_error<ValueError>([] { optim::WarmupCosine(1.0, 10, 10); }, {"WarmupCosine", "total_steps > warmup_steps"});
  expect_error<ValueError>([] { optim::WarmupCosine(1.0, 1, 10, 2.0); }, {"WarmupCosine", "min_lr"});
  expect_error<ValueError>([] { optim::StepDecay(0.1, 0); }, {"StepDecay", "step_size"});
  expect_error<ValueError>([] { optim::StepDecay(0.1, 2, -0.5); }, {"StepDecay", "gamma"});
  optim::Constant c(0.1);
  expect_error<ValueError>([&] { c.set_last_step(-1); }, {"set_last_step", "-1"});
}
