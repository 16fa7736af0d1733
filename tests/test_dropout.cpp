// dropout: statistics, exact scaling, identity cases, determinism, gradient.
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/dropout.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

TEST(Dropout, KeptFractionAndExactScaling) {
  const int64_t n = 40000;
  for (double p : {0.1, 0.5, 0.8}) {
    Generator gen(1);
    Tensor y = dropout(Tensor::ones({n}), p, true, gen);
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    int64_t kept = 0;
    double total = 0;
    for (float v : y.to_vector<float>()) {
      ASSERT_TRUE(v == 0.0f || v == scale) << v;  // survivors are scaled exactly by 1 / (1 − p)
      kept += v != 0.0f;
      total += v;
    }
    // Kept fraction ≈ 1 − p within 5 standard deviations of a Binomial(n, 1 − p) / n.
    const double sd = std::sqrt(p * (1 - p) / static_cast<double>(n));
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1 - p, 5 * sd) << "p = " << p;
    // so the expected value is preserved: mean(out) ≈ 1
    EXPECT_NEAR(total / static_cast<double>(n), 1.0, 5 * sd / (1 - p)) << "p = " << p;
  }
}

TEST(Dropout, EvalAndZeroPAreIdentity) {
  Generator gen(2);
  Tensor x = Tensor::from_list({1, 2, 3}, {3}).requires_grad_();
  const auto state = gen.state();
  Tensor a = dropout(x, 0.5, /*train=*/false, gen);
  Tensor b = dropout(x, 0.0, /*train=*/true, gen);
  EXPECT_TRUE(a.is_same(x));  // the same tensor, no copy and no node
  EXPECT_TRUE(b.is_same(x));
  EXPECT_EQ(gen.state(), state);  // and no random numbers drawn
}

TEST(Dropout, POneGivesZerosAndZeroGradient) {
  Generator gen(3);
  Tensor x = Tensor::from_list({1, -2, 3, 4}, {2, 2}, DType::f64).requires_grad_();
  Tensor y = dropout(x, 1.0, true, gen);
  for (double v : y.to_vector<double>()) EXPECT_EQ(v, 0.0);
  sum(y).backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
}

TEST(Dropout, SameSeedSameMask) {
  Tensor x = Tensor::ones({1000});
  Generator g1(42), g2(42), g3(43);
  const auto a = dropout(x, 0.5, true, g1).to_vector<float>();
  const auto b = dropout(x, 0.5, true, g2).to_vector<float>();
  const auto c = dropout(x, 0.5, true, g3).to_vector<float>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // the generator advances: a second call draws a new mask
  EXPECT_NE(dropout(x, 0.5, true, g1).to_vector<float>(), a);
}

TEST(Dropout, GradientIsTheSavedMaskTimesScale) {
  Generator gen(4);
  Tensor x = Tensor::ones({200}, DType::f64).requires_grad_();
  Tensor y = dropout(x, 0.3, true, gen);
  Tensor w = Tensor::arange(0, 200, 1, DType::f64);
  sum(y * w).backward();
  // x = 1 everywhere, so y holds exactly keep · scale, and dx = keep · scale · w
  const auto yv = y.to_vector<double>(), wv = w.to_vector<double>(), g = x.grad().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], yv[i] * wv[i]);
}

TEST(Dropout, Gradcheck) {
  Generator init(5);
  Tensor x = Tensor::randn({3, 4}, init, DType::f64).requires_grad_();
  // A fresh generator with a fixed seed per call: every evaluation sees the same mask.
  auto r = gradcheck([](const std::vector<Tensor>& in) { Generator g(9); return dropout(in[0], 0.4, true, g); }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
  Tensor xt = Tensor::randn({4, 3}, init, DType::f64).transpose(0, 1).requires_grad_();
  r = gradcheck([](const std::vector<Tensor>& in) { Generator g(9); return dropout(in[0], 0.4, true, g); }, {xt});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Dropout, NonContiguousInputUsesLogicalOrder) {
  Generator init(6);
  Tensor t = Tensor::randn({5, 4}, init).transpose(0, 1);
  ASSERT_FALSE(t.is_contiguous());
  Generator g1(7), g2(7);
  EXPECT_EQ(dropout(t, 0.5, true, g1).to_vector<float>(), dropout(t.contiguous(), 0.5, true, g2).to_vector<float>());
}

TEST(Dropout, Errors) {
  Generator gen(8);
  Tensor x = Tensor::ones({2, 3});
  expect_error<ValueError>([&] { dropout(x, 1.5, true, gen); }, {"dropout", "1.5", "[2, 3]"});
  expect_error<ValueError>([&] { dropout(x, -0.1, true, gen); }, {"dropout", "-0.1"});
  expect_error<ValueError>([&] { dropout(x, NAN, false, gen); }, {"dropout", "nan"});
  expect_error<DTypeError>([&] { dropout(Tensor::ones({2}, DType::i64), 0.5, true, gen); }, {"dropout", "i64"});
}
