// Losses: cross_entropy (fused and composite), nll_loss, mse_loss.
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/softmax.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

// The 3×3 example the PyTorch numbers below were computed on.
Tensor example_logits() { return Tensor::from_list({1, 2, 3, 0.5, -1, 2, 0, 0, 1}, {3, 3}, DType::f64); }
Tensor example_targets() { return ids({2, -100, 0}, {3}); }

const Reduction kReductions[] = {Reduction::mean, Reduction::sum, Reduction::none};

}  // namespace

TEST(CrossEntropy, HandComputed) {
  // One row of two equal logits: loss = log 2 for either target.
  Tensor x = Tensor::from_list({0.5, 0.5}, {1, 2}, DType::f64);
  EXPECT_NEAR(cross_entropy(x, ids({1}, {1})).item(), std::log(2.0), 1e-15);
  // [1, 2, 3] with target 0: lse − 1.
  Tensor y = Tensor::from_list({1, 2, 3}, {1, 3}, DType::f64);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(cross_entropy(y, ids({0}, {1})).item(), lse - 1, 1e-14);
  // with smoothing ε: (1 − ε)(lse − 1) + ε (lse − mean(x))
  EXPECT_NEAR(cross_entropy(y, ids({0}, {1}), {.label_smoothing = 0.25}).item(), 0.75 * (lse - 1) + 0.25 * (lse - 2),
              1e-14);
}

TEST(CrossEntropy, MatchesPyTorchNumbers) {
  // F.cross_entropy(x, t, ...) with x, t = example_logits(), example_targets() (row 1 ignored)
  Tensor x = example_logits(), t = example_targets();
  EXPECT_NEAR(cross_entropy(x, t).item(), 0.9795253391882157, 1e-14);
  EXPECT_NEAR(cross_entropy(x, t, {.reduction = Reduction::sum}).item(), 1.9590506783764314, 1e-14);
  EXPECT_NEAR(cross_entropy(x, t, {.label_smoothing = 0.1}).item(), 1.0128586725215492, 1e-14);
  EXPECT_NEAR(cross_entropy(x, t, {.label_smoothing = 0.1, .reduction = Reduction::sum}).item(), 2.0257173450430983,
              1e-14);
  expect_near_all(cross_entropy(x, t, {.label_smoothing = 0.1, .reduction = Reduction::none}).to_vector<double>(),
                  {0.5076059644443804, 0.0, 1.5181113805987176}, 1e-14);
  // its gradient (torch: x.grad after F.cross_entropy(x, t, label_smoothing=0.1).backward())
  Tensor xl = x.detach().requires_grad_();
  cross_entropy(xl, t, {.label_smoothing = 0.1}).backward();
  expect_near_all(xl.grad().to_vector<double>(),
                  {0.02834861991852355, 0.10569756886073216, -0.13404618877925578, 0, 0, 0, -0.36069588785812395,
                   0.08930411214187606, 0.2713917757162479}, 1e-14);
}

TEST(CrossEntropy, FusedAndCompositeAgreeInValueAndGradient) {
  // ignore_index in the middle, smoothing on and off, every reduction, f32 and f64.
  for (DType dt : {DType::f64, DType::f32}) {
    for (double eps : {0.0, 0.2}) {
      for (Reduction red : kReductions) {
        const CrossEntropyOptions opt{.ignore_index = 3, .label_smoothing = eps, .reduction = red};
        Tensor t = ids({0, 3, 4, 1, 3, 2}, {6});
        Tensor a = randn({6, 5}, 21, dt).requires_grad_(), b = a.detach().clone().requires_grad_();
        Tensor fa = cross_entropy(a, t, opt), fb = cross_entropy_composite(b, t, opt);
        const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
        expect_near_all(fa.to_vector<double>(), fb.to_vector<double>(), tol);
        Tensor w = randn(fa.shape(), 22, dt);  // a non-uniform output gradient
        fa.backward(w);
        fb.backward(w);
        expect_near_all(a.grad().to_vector<double>(), b.grad().to_vector<double>(), tol);
        // ignored rows get no gradient
        const auto g = a.grad().to_vector<double>();
        for (int64_t row : {1, 4})
          for (int64_t k = 0; k < 5; ++k) EXPECT_EQ(g[row * 5 + k], 0.0);
      }
    }
  }
}

TEST(CrossEntropy, Gradcheck) {
  Tensor t = ids({1, -100, 0, 3}, {4});
  for (double eps : {0.0, 0.3}) {
    for (Reduction red : kReductions) {
      const CrossEntropyOptions opt{.label_smoothing = eps, .reduction = red};
      auto r = gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, opt); },
                         {randn({4, 4}, 30).requires_grad_()});
      EXPECT_TRUE(r.ok) << r.summary();
      r = gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy_composite(in[0], t, opt); },
                    {randn({4, 4}, 30).requires_grad_()});
      EXPECT_TRUE(r.ok) << r.summary();
    }
  }
}

TEST(CrossEntropy, BatchTimeInputIsFlattened) {
  // logits [B, T, V] with targets [B, T] == the [B·T, V] / [B·T] loss.
  Tensor x = randn({2, 3, 4}, 40), t = ids({0, 1, -100, 3, 2, 2}, {2, 3});
  const CrossEntropyOptions opt{.label_smoothing = 0.1};
  EXPECT_NEAR(cross_entropy(x, t, opt).item(), cross_entropy(x.reshape({6, 4}), t.reshape({6}), opt).item(), 1e-15);
  Tensor none = cross_entropy(x, t, {.reduction = Reduction::none});
  EXPECT_EQ(none.shape(), (Shape{2, 3}));
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, opt); },
                     {x.detach().requires_grad_()});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(CrossEntropy, NonContiguousLogits) {
  Tensor base = randn({4, 3}, 41);
  Tensor x = base.transpose(0, 1).requires_grad_();  // [3, 4], non-contiguous leaf
  ASSERT_FALSE(x.is_contiguous());
  Tensor t = ids({3, 0, 2}, {3});
  EXPECT_NEAR(cross_entropy(x, t).item(), cross_entropy(x.contiguous(), t).item(), 1e-15);
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, {.label_smoothing = 0.2}); },
                     {x});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(CrossEntropy, AllIgnoredMeanIsZeroWithZeroGradient) {
  Tensor x = randn({3, 4}, 50).requires_grad_(), t = ids({-100, -100, -100}, {3});
  for (double eps : {0.0, 0.1}) {
    x.zero_grad();
    Tensor loss = cross_entropy(x, t, {.label_smoothing = eps});
    EXPECT_EQ(loss.item(), 0.0);
    loss.backward();
    for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
    Tensor xc = x.detach().requires_grad_();
    Tensor lc = cross_entropy_composite(xc, t, {.label_smoothing = eps});
    EXPECT_EQ(lc.item(), 0.0);
    lc.backward();
    for (double g : xc.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
  }
}

TEST(CrossEntropy, IgnoreIndexInsideTheClassRange) {
  // ignore_index = 0 (a pad id): rows with target 0 drop out of the mean.
  Tensor x = randn({3, 4}, 51), t = ids({0, 2, 1}, {3});
  const double l = cross_entropy(x, t, {.ignore_index = 0}).item();
  const double l12 = cross_entropy(x.slice(0, 1, 3), t.slice(0, 1, 3)).item();
  EXPECT_NEAR(l, l12, 1e-15);
}

TEST(CrossEntropy, LargeLogitsStayFinite) {
  Tensor x = Tensor::from_list({1e4, 0, -1e4, 3e4}, {2, 2}, DType::f32);
  Tensor loss = cross_entropy(x, ids({1, 0}, {2}), {.reduction = Reduction::none});
  expect_near_all(loss.to_vector<double>(), {1e4, 4e4}, 1.0);
}

TEST(CrossEntropy, Errors) {
  Tensor x = Tensor::zeros({2, 3}, DType::f32);
  expect_error<IndexError>([&] { cross_entropy(x, ids({0, 3}, {2})); }, {"cross_entropy", "target 3", "V = 3"});
  expect_error<IndexError>([&] { cross_entropy(x, ids({-1, 0}, {2})); }, {"cross_entropy", "target -1", "V = 3"});
  expect_error<IndexError>([&] { cross_entropy_composite(x, ids({0, 7}, {2})); },
                           {"cross_entropy_composite", "target 7", "V = 3"});
  expect_error<ShapeError>([&] { cross_entropy(x, ids({0, 1, 2}, {3})); }, {"cross_entropy", "[2, 3]", "[2]", "[3]"});
  expect_error<DTypeError>([&] { cross_entropy(x, Tensor::zeros({2}, DType::f32)); }, {"cross_entropy", "i64"});
  expect_error<DTypeError>([&] { cross_entropy(Tensor::zeros({2, 3}, DType::i64), ids({0, 1}, {2})); },
                           {"cross_entropy", "i64"});
  expect_error<ValueError>([&] { cross_entropy(x, ids({0, 1}, {2}), {.label_smoothing = 1.5}); },
                           {"cross_entropy", "label_smoothing", "1.5"});
  expect_error<ShapeError>([&] { cross_entropy(Tensor::zeros({2, 0}), ids({0, 1}, {2})); }, {"cross_entropy", "[2, 0]"});
}

TEST(NllLoss, MatchesPyTorchAndCrossEntropy) {
  // F.nll_loss(example_logits(), [1, 0, 2]) = -(2 + 0.5 + 1) / 3
  EXPECT_NEAR(nll_loss(example_logits(), ids({1, 0, 2}, {3})).item(), -1.1666666666666667, 1e-15);
  // nll_loss(log_softmax(x)) == cross_entropy(x), values and gradients
  Tensor t = ids({2, 0, -100, 1}, {4});
  for (Reduction red : kReductions) {
    Tensor a = randn({4, 3}, 60).requires_grad_(), b = a.detach().requires_grad_();
    Tensor la = nll_loss(log_softmax(a, 1), t, {.reduction = red});
    Tensor lb = cross_entropy(b, t, {.reduction = red});
    expect_near_all(la.to_vector<double>(), lb.to_vector<double>(), 1e-14);
    Tensor w = randn(la.shape(), 61);
    la.backward(w);
    lb.backward(w);
    expect_near_all(a.grad().to_vector<double>(), b.grad().to_vector<double>(), 1e-14);
  }
}

TEST(NllLoss, GradcheckAndEdgeCases) {
  Tensor t = ids({2, -100, 0}, {3});
  for (Reduction red : kReductions) {
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return nll_loss(in[0], t, {.reduction = red}); },
                       {randn({3, 4}, 62).requires_grad_()});
    EXPECT_TRUE(r.ok) << r.summary();
  }
  Tensor x = randn({2, 3}, 63).requires_grad_();
  Tensor l = nll_loss(x, ids({-100, -100}, {2}));
  EXPECT_EQ(l.item(), 0.0);
  l.backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
  expect_error<IndexError>([&] { nll_loss(x, ids({0, 5}, {2})); }, {"nll_loss", "target 5", "V = 3"});
  expect_error<ShapeError>([&] { nll_loss(x, ids({0}, {1})); }, {"nll_loss", "[2, 3]", "[1]"});
}

TEST(MseLoss, ValuesAndGradcheck) {
  Tensor a = Tensor::from_list({1, 2, 3, -1, 0, 4}, {2, 3}, DType::f64);
  Tensor b = Tensor::ones({2, 3}, DType::f64);
  // torch: F.mse_loss(a, ones) = 3.1666666666666665
  EXPECT_NEAR(mse_loss(a, b).item(), 3.1666666666666665, 1e-15);
  EXPECT_NEAR(mse_loss(a, b, Reduction::sum).item(), 19.0, 1e-15);
  expect_near_all(mse_loss(a, b, Reduction::none).to_vector<double>(), {0, 1, 4, 4, 1, 9}, 0);
  for (Reduction red : kReductions) {
    auto r = gradcheck([red](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], red); },
                       {randn({2, 3}, 70).requires_grad_(), randn({3, 2}, 71).transpose(0, 1).requires_grad_()});
    EXPECT_TRUE(r.ok) << r.summary();
  }
  // only the target needs a gradient
  Tensor p = randn({3}, 72), q = randn({3}, 73).requires_grad_();
  mse_loss(p, q).backward();
  const auto gp = p.to_vector<double>(), gq = q.to_vector<double>(), g = q.grad().to_vector<double>();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(g[i], -2 * (gp[i] - gq[i]) / 3, 1e-15);
}

TEST(MseLoss, Errors) {
  expect_error<ShapeError>([] { mse_loss(Tensor::zeros({2, 3}), Tensor::zeros({3})); }, {"mse_loss", "[2, 3]", "[3]"});
  expect_error<DTypeError>([] { mse_loss(Tensor::zeros({3}), Tensor::zeros({3}, DType::f64)); },
                           {"mse_loss", "f32", "f64"});
}
