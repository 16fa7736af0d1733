// softmax / log_softmax: values, stability, fully masked rows, gradients along any dim.
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/softmax.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

}  // namespace

TEST(Softmax, ValuesMatchHandComputed) {
  Tensor x = Tensor::from_list({1, 2, 3}, {3}, DType::f64);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  expect_near_all(softmax(x, 0).to_vector<double>(), {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z}, 1e-15);
  expect_near_all(log_softmax(x, 0).to_vector<double>(), {1 - std::log(z), 2 - std::log(z), 3 - std::log(z)}, 1e-14);
}

TEST(Softmax, ValuesMatchPyTorch) {
  // torch.softmax / log_softmax of [[1, 2, 3], [-1, 0, 4]] (float64)
  Tensor y = Tensor::from_list({1, 2, 3, -1, 0, 4}, {2, 3}, DType::f64);
  expect_near_all(softmax(y, 1).to_vector<double>(),
                  {0.09003057317038045, 0.2447284710547976, 0.6652409557748218, 0.006573263185309083,
                   0.0178679818703045, 0.9755587549443865}, 1e-15);
  expect_near_all(log_softmax(y, -1).to_vector<double>(),
                  {-2.4076059644443806, -1.4076059644443804, -0.4076059644443804, -5.024744890138822,
                   -4.024744890138822, -0.02474489013882259}, 1e-14);
  expect_near_all(softmax(y, 0).to_vector<double>(),
                  {0.8807970779778823, 0.8807970779778823, 0.2689414213699951, 0.11920292202211755,
                   0.11920292202211755, 0.7310585786300049}, 1e-15);
  // f32 agrees with f64 to float precision
  expect_near_all(softmax(y.to(DType::f32), 1).to_vector<double>(), softmax(y, 1).to_vector<double>(), 1e-7);
}

TEST(Softmax, LargeLogitsDoNotOverflow) {
  Tensor x = Tensor::from_list({1000, 1001, 1002}, {3}, DType::f32);
  Tensor ref = Tensor::from_list({0, 1, 2}, {3}, DType::f32);
  expect_near_all(softmax(x, 0).to_vector<double>(), softmax(ref, 0).to_vector<double>(), 1e-7);
  expect_near_all(log_softmax(x, 0).to_vector<double>(), log_softmax(ref, 0).to_vector<double>(), 1e-5);
  x = Tensor::from_list({-1000, -1001}, {2}, DType::f32);
  EXPECT_NEAR(softmax(x, 0).to_vector<double>()[0], 1 / (1 + std::exp(-1.0)), 1e-6);
}

TEST(Softmax, RowsSumToOneAlongAnyDim) {
  Generator gen(3);
  Tensor x = Tensor::randn({3, 4, 5}, gen, DType::f64);
  for (int64_t d = 0; d < 3; ++d) {
    Tensor s = sum(softmax(x, d), {d});
    for (double v : s.to_vector<double>()) EXPECT_NEAR(v, 1.0, 1e-12) << "dim " << d;
    // exp(log_softmax) is softmax
    expect_near_all(exp(log_softmax(x, d)).to_vector<double>(), softmax(x, d).to_vector<double>(), 1e-14);
  }
}

TEST(Softmax, NonContiguousInputMatchesContiguous) {
  Generator gen(4);
  Tensor base = Tensor::randn({4, 3}, gen, DType::f64);
  Tensor t = base.transpose(0, 1);  // [3, 4], not contiguous
  ASSERT_FALSE(t.is_contiguous());
  for (int64_t d = 0; d < 2; ++d) {
    expect_near_all(softmax(t, d).to_vector<double>(), softmax(t.contiguous(), d).to_vector<double>(), 0);
    expect_near_all(log_softmax(t, d).to_vector<double>(), log_softmax(t.contiguous(), d).to_vector<double>(), 0);
  }
}

TEST(Softmax, FullyMaskedRowGivesZerosAndZeroGradNeverNaN) {
  const double inf = INFINITY;
  // row 0 fully masked, row 1 partly masked
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = Tensor::from_vector(std::vector<double>{-inf, -inf, -inf, 0.5, -inf, 1.5}, {2, 3}, dt).requires_grad_();
    Tensor y = softmax(x, 1);
    const auto v = y.to_vector<double>();
    expect_near_all({v[0], v[1], v[2]}, {0, 0, 0}, 0);
    EXPECT_EQ(v[4], 0.0);
    EXPECT_NEAR(v[3] + v[5], 1.0, 1e-6);
    Tensor w = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, dt);
    sum(y * w).backward();
    const auto g = x.grad().to_vector<double>();
    for (double e : g) EXPECT_TRUE(std::isfinite(e));
    expect_near_all({g[0], g[1], g[2], g[4]}, {0, 0, 0, 0}, 0);
    EXPECT_NE(g[3], 0.0);

    Tensor x2 = Tensor::from_vector(std::vector<double>{-inf, -inf, -inf, 0.5, -inf, 1.5}, {2, 3}, dt).requires_grad_();
    Tensor l = log_softmax(x2, 1);
    const auto lv = l.to_vector<double>();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(lv[i], -inf);
    EXPECT_FALSE(std::isnan(lv[3]) || std::isnan(lv[5]));
    l.backward(Tensor::ones({2, 3}, dt));
    const auto lg = x2.grad().to_vector<double>();
    for (double e : lg) EXPECT_FALSE(std::isnan(e));
    expect_near_all({lg[0], lg[1], lg[2]}, {0, 0, 0}, 0);
  }
}

TEST(Softmax, MaskedColumnUnderMiddleDim) {
  // A fully masked row along dim 1 of [2, 3, 2]: x[0, :, 1] = -inf.
  const double inf = INFINITY;
  Tensor x = Tensor::from_vector(std::vector<double>{1, -inf, 2, -inf, 3, -inf, 1, 2, 3, 4, 5, 6}, {2, 3, 2}, DType::f64);
  Tensor y = softmax(x, 1);
  const auto v = y.to_vector<double>();
  EXPECT_EQ(v[1], 0.0);
  EXPECT_EQ(v[3], 0.0);
  EXPECT_EQ(v[5], 0.0);
  EXPECT_NEAR(v[0] + v[2] + v[4], 1.0, 1e-15);
}

TEST(Softmax, NaNInputPropagates) {
  Tensor x = Tensor::from_list({NAN, -INFINITY, -INFINITY}, {3}, DType::f64);
  for (double v : softmax(x, 0).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
}

TEST(Softmax, GradcheckLastDim) {
  Tensor x = randn_leaf({3, 5}, 10);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0], -1); }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
  r = gradcheck([](const std::vector<Tensor>& in) { return log_softmax(in[0], 1); }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Softmax, GradcheckMiddleAndFirstDim) {
  Tensor x = randn_leaf({2, 3, 4}, 11);
  for (int64_t d : {0, 1}) {
    auto r = gradcheck([d](const std::vector<Tensor>& in) { return softmax(in[0], d); }, {x});
    EXPECT_TRUE(r.ok) << "dim " << d << "\n" << r.summary();
    r = gradcheck([d](const std::vector<Tensor>& in) { return log_softmax(in[0], d); }, {x});
    EXPECT_TRUE(r.ok) << "dim " << d << "\n" << r.summary();
  }
}

TEST(Softmax, GradcheckNonContiguousInputAndGrad) {
  Tensor x = randn_leaf({4, 3}, 12).detach().transpose(0, 1).requires_grad_();  // non-contiguous leaf [3, 4]
  ASSERT_FALSE(x.is_contiguous());
  // The transpose after the op hands softmax a non-contiguous grad.
  auto r = gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0], 0).transpose(0, 1) * 1.5; }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
  r = gradcheck([](const std::vector<Tensor>& in) { return log_softmax(in[0], 1).transpose(0, 1); }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Softmax, ZeroDimTensor) {
  Tensor x = Tensor::scalar(3.0, DType::f64);
  EXPECT_EQ(softmax(x, 0).item(), 1.0);
  EXPECT_EQ(log_softmax(x, -1).item(), 0.0);
}

TEST(Softmax, Errors) {
  Tensor x = Tensor::zeros({2, 3}, DType::f32);
  expect_error<IndexError>([&] { softmax(x, 2); }, {"softmax", "dim 2"});
  expect_error<IndexError>([&] { log_softmax(x, -3); }, {"log_softmax", "dim -3"});
  expect_error<DTypeError>([&] { softmax(Tensor::zeros({2}, DType::i64), 0); }, {"softmax", "i64"});
}
